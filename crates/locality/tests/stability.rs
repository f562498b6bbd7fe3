//! Closed loop: the plan's own resulting rates (and utilizations) are fed
//! back in, round after round, through the smoothing [`Planner`]. The
//! decision must converge and not oscillate.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

mod common;

use std::time::Duration;

use common::*;
use locality::{EndpointObs, Plan, Planner, ServiceSpec, Tuning, decide};

/// A toy backend world: each second a share `churn` of the traffic is new
/// connections, placed by the current plan; the rest stays where it was.
struct World {
    svc: ServiceSpec,
    planner: Planner,
    /// Packets per second per endpoint.
    rate: Vec<f64>,
    /// UTILIZATION: packets per second at which an endpoint reports 1.0.
    full_at: Vec<f64>,
    /// UTILIZATION: utilization with no traffic of ours.
    background: f64,
    churn: f64,
    rng: u64,
    /// Relative noise on the measured rates.
    noise: f64,
}

/// The default tuning without the counting-noise band: the rates here
/// stand for any scale (the band depends on the absolute rate; its own
/// test is in the crate), so the smoothing and hysteresis are what is
/// shown.
fn scale_free() -> Tuning {
    Tuning {
        noise_sigmas: 0.0,
        ..Tuning::default()
    }
}

impl World {
    fn new(svc: ServiceSpec) -> Self {
        let n = svc.endpoints.len();
        World {
            svc,
            planner: Planner::new(scale_free()),
            rate: vec![0.0; n],
            full_at: vec![f64::INFINITY; n],
            background: 0.0,
            churn: 0.3,
            rng: 0x5eed,
            noise: 0.0,
        }
    }

    fn jitter(&mut self) -> f64 {
        self.rng = self
            .rng
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let u = (self.rng >> 11) as f64 / (1u64 << 53) as f64; // [0, 1)
        1.0 + self.noise * (2.0 * u - 1.0)
    }

    /// One second: measure, decide, then move traffic by the new plan.
    fn step(&mut self, demand: f64) -> Plan {
        let mut obs = Vec::with_capacity(self.rate.len());
        // Common-mode noise (the worst case: it moves the total).
        let jitter = self.jitter();
        for i in 0..self.rate.len() {
            let measured = self.rate[i] * jitter;
            obs.push(EndpointObs {
                utilization: self.full_at[i]
                    .is_finite()
                    .then(|| self.background + self.rate[i] / self.full_at[i]),
                ..EndpointObs::healthy(measured)
            });
        }
        let plan = self
            .planner
            .update(&node(), &self.svc, &observe(obs), Duration::from_secs(1))
            .unwrap()
            .clone();
        // Where new connections go under this plan.
        let mut target = vec![0.0; self.rate.len()];
        for r in &plan.regions {
            let total: f64 = r.endpoints.iter().map(|w| f64::from(w.weight)).sum();
            for w in &r.endpoints {
                target[w.endpoint as usize] += demand * r.fraction * f64::from(w.weight) / total;
            }
        }
        // Existing traffic keeps a (1 − churn) share, scaled to the demand.
        let old: f64 = self.rate.iter().sum();
        let keep = if old > 0.0 { demand / old } else { 0.0 };
        for (r, t) in self.rate.iter_mut().zip(target) {
            *r = (1.0 - self.churn) * *r * keep + self.churn * t;
        }
        plan
    }
}

/// Checks a fraction series: after `settle` rounds it stays within `band`
/// of `want`, it changes at most `max_changes` times, and successive
/// changes never reverse direction more than `max_reversals` times.
fn assert_converges(
    series: &[f64],
    settle: usize,
    want: f64,
    band: f64,
    max_changes: usize,
    max_reversals: usize,
) {
    for (i, f) in series.iter().enumerate().skip(settle) {
        assert!(
            (f - want).abs() <= band,
            "round {i}: {f} not within {band} of {want}: {series:?}"
        );
    }
    let deltas: Vec<f64> = series[settle..]
        .windows(2)
        .map(|w| w[1] - w[0])
        .filter(|d| d.abs() > 1e-12)
        .collect();
    assert!(
        deltas.len() <= max_changes,
        "{} changes after round {settle}: {series:?}",
        deltas.len()
    );
    let reversals = deltas
        .windows(2)
        .filter(|w| w[0].signum() != w[1].signum())
        .count();
    assert!(
        reversals <= max_reversals,
        "{reversals} reversals: {series:?}"
    );
}

#[test]
fn rate_surge_converges_to_the_spill_share_without_oscillating() {
    let mut svc = rate_service(100);
    let a = group(&mut svc, A, zone(A, 0), 10); // 1000 pps
    group(&mut svc, B, zone(B, 0), 10);
    group(&mut svc, C, zone(C, 0), 10);
    let mut w = World::new(svc);
    for i in a {
        w.rate[i] = 50.0;
    }
    let mut series = Vec::new();
    for round in 0..30 {
        let demand = if round < 3 { 500.0 } else { 1500.0 };
        series.push(fraction(&w.step(demand), A));
    }
    assert_eq!(series[0], 1.0);
    // Monotone approach to 2/3, then still (hysteresis 0.01).
    assert_converges(&series, 10, 2.0 / 3.0, 0.011, 0, 0);
    for pair in series.windows(2) {
        assert!(pair[1] <= pair[0] + 1e-12, "{series:?}");
    }
    // And the spilled share is where it should be: B, not C.
    let p = w.step(1500.0);
    assert_eq!(p.regions.len(), 2, "{p:#?}");
    assert!(close(fraction(&p, B), 1.0 - fraction(&p, A), 1e-12));
}

#[test]
fn rate_with_noisy_measurements_holds_steady() {
    let mut svc = rate_service(100);
    let a = group(&mut svc, A, zone(A, 0), 10);
    group(&mut svc, B, zone(B, 0), 10);
    let mut w = World::new(svc);
    w.noise = 0.05; // ±5 % on the measured total, every second
    for i in a {
        w.rate[i] = 150.0;
    }
    let series: Vec<f64> = (0..60).map(|_| fraction(&w.step(1500.0), A)).collect();
    // ±5 % noise would swing the raw fraction by ±0.03; smoothing and
    // hysteresis keep the published one still most of the time.
    assert_converges(&series, 5, 2.0 / 3.0, 0.03, 12, 12);
}

#[test]
fn utilization_converges_with_background_load() {
    // A is full at 1000 pps, B at 2000; both idle at 5 %; target 0.8.
    // Fixed point: A carries L with 0.05 + L/1000 = 0.8 → L = 750 of 1500.
    let mut svc = util_service(0.8);
    let a = group(&mut svc, A, zone(A, 0), 10);
    let b = group(&mut svc, B, zone(B, 0), 10);
    let mut w = World::new(svc);
    w.background = 0.05;
    for i in a.clone() {
        w.full_at[i] = 100.0;
        w.rate[i] = 150.0;
    }
    for i in b {
        w.full_at[i] = 200.0;
    }
    let series: Vec<f64> = (0..40).map(|_| fraction(&w.step(1500.0), A)).collect();
    assert_converges(&series, 20, 0.5, 0.02, 3, 1);
    // And A's endpoints end near target.
    let util = 0.05 + w.rate[a.start] / 100.0;
    assert!((util - 0.8).abs() < 0.03, "A at {util}: {series:?}");
}

#[test]
fn hysteresis_holds_small_moves_but_not_failover() {
    let mut svc = rate_service(100);
    let a = group(&mut svc, A, zone(A, 0), 10);
    let b = group(&mut svc, B, zone(B, 0), 10);
    let t = Tuning::default();
    let mut obs = all_healthy(&svc);
    load(&mut obs, a.clone(), 1500.0);
    let p1 = decide(&node(), &svc, &observe(obs.clone()), None, &t).unwrap();
    // Demand 1510: A's share 0.6623, moved by 0.0044 < 0.01 → held.
    load(&mut obs, a.clone(), 1510.0);
    let p2 = decide(&node(), &svc, &observe(obs.clone()), Some(&p1), &t).unwrap();
    assert_eq!(p2.thresholds, p1.thresholds);
    assert_eq!(fraction(&p2, A), fraction(&p1, A));
    // Without a previous plan it would have moved.
    let fresh = decide(&node(), &svc, &observe(obs.clone()), None, &t).unwrap();
    assert_ne!(fresh.thresholds, p1.thresholds);
    // Demand 1600: moved by 0.042 → published.
    load(&mut obs, a.clone(), 1600.0);
    let p3 = decide(&node(), &svc, &observe(obs.clone()), Some(&p2), &t).unwrap();
    assert!(close(fraction(&p3, A), 1000.0 / 1600.0, 1e-12));
    // B losing its health is a candidate change: acts at once even for a
    // tiny share.
    for o in &mut obs[b] {
        o.health = locality::Health::Unhealthy;
    }
    let p4 = decide(&node(), &svc, &observe(obs), Some(&p3), &t).unwrap();
    assert_eq!(p4.regions.len(), 1);
    assert_eq!(fraction(&p4, A), 1.0);
    assert!(p4.overloaded);
}

#[test]
fn smoothing_spills_fast_and_returns_slowly() {
    let mut svc = rate_service(100);
    let a = group(&mut svc, A, zone(A, 0), 10);
    group(&mut svc, B, zone(B, 0), 10);
    let mut planner = Planner::new(scale_free());
    let sec = Duration::from_secs(1);
    let mut obs = all_healthy(&svc);
    let mut at = |planner: &mut Planner, total: f64| {
        load(&mut obs, a.clone(), total);
        fraction(
            planner
                .update(&node(), &svc, &observe(obs.clone()), sec)
                .unwrap(),
            A,
        )
    };
    assert_eq!(at(&mut planner, 500.0), 1.0);
    // Surge to 2000: half the step in the first second (τ = 1 s).
    let f = at(&mut planner, 2000.0);
    assert!(close(f, 1000.0 / 1250.0, 1e-9), "{f}");
    let mut f = f;
    for _ in 0..6 {
        f = at(&mut planner, 2000.0);
    }
    assert!(f < 0.52, "{f}");
    // Back to 500: the demand estimate decays with τ = 5 s, so A's share
    // comes back over several seconds, not at once.
    let back = at(&mut planner, 500.0);
    assert!(back < 0.7, "{back}");
    let mut rounds = 1;
    let mut f = back;
    while f < 1.0 {
        f = at(&mut planner, 500.0);
        rounds += 1;
        assert!(rounds < 30, "never came back");
    }
    assert!(rounds >= 4, "{rounds}");
}

#[test]
fn planner_keeps_state_across_a_capacity_reload_and_resets_on_reshape() {
    let mut svc = rate_service(100);
    let a = group(&mut svc, A, zone(A, 0), 10);
    group(&mut svc, B, zone(B, 0), 10);
    let sec = Duration::from_secs(1);
    let mut planner = Planner::new(Tuning::default());
    let mut obs = all_healthy(&svc);
    load(&mut obs, a.clone(), 1500.0);
    let f1 = fraction(
        planner
            .update(&node(), &svc, &observe(obs.clone()), sec)
            .unwrap(),
        A,
    );
    assert!(close(f1, 2.0 / 3.0, 1e-9));
    // A reload that changes B's scaler only: smoothed state and hysteresis
    // stay (A's share is unchanged, so nothing moves).
    svc.groups[1].capacity_scaler = 0.5;
    let p = planner
        .update(&node(), &svc, &observe(obs.clone()), sec)
        .unwrap();
    assert_eq!(fraction(p, A), f1);
    // A reload that adds endpoints to A: fresh start from this observation.
    let more = group(&mut svc, A, zone(A, 1), 5);
    let mut obs2 = all_healthy(&svc);
    load(&mut obs2, a, 1500.0);
    load(&mut obs2, more, 0.0);
    let p = planner.update(&node(), &svc, &observe(obs2), sec).unwrap();
    assert_eq!(fraction(p, A), 1.0);
    assert_eq!(planner.smoothed().endpoints.len(), 25);
    planner.reset();
    assert!(planner.plan().is_none());
}
