//! The decision function on synthetic services: spillover, cascade,
//! failover, draining, fail-open, UNKNOWN, zones, and a configuration file.

#![allow(clippy::cast_possible_truncation)] // test values are small
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

mod common;

use std::time::Duration;

use common::*;
use locality::{
    AggregateHealth, Aggregation, Eligibility, EndpointObs, Health, Locality, NodeSpec,
    Observation, Planner, ServiceSpec, Tuning, decide, pick_region,
};

fn plan(svc: &ServiceSpec, obs: Vec<EndpointObs>) -> locality::Plan {
    decide(&node(), svc, &observe(obs), None, &Tuning::default()).unwrap()
}

/// Region A (10 × 100 pps) and B (10 × 100 pps).
fn two_regions() -> (ServiceSpec, std::ops::Range<usize>, std::ops::Range<usize>) {
    let mut svc = rate_service(100);
    let a = group(&mut svc, A, zone(A, 0), 10);
    let b = group(&mut svc, B, zone(B, 0), 10);
    (svc, a, b)
}

#[test]
fn region_a_at_150_percent_spills_a_third_to_b() {
    let (svc, a, _) = two_regions();
    let mut obs = all_healthy(&svc);
    load(&mut obs, a, 1500.0);
    let p = plan(&svc, obs);
    assert_eq!(p.regions.len(), 2);
    assert_eq!(p.regions[0].region, A);
    assert!(close(fraction(&p, A), 2.0 / 3.0, 1e-9), "{p:#?}");
    assert!(close(fraction(&p, B), 1.0 / 3.0, 1e-9), "{p:#?}");
    assert!(!p.overloaded && !p.degraded);
    assert_eq!(p.status[0].utilization, Some(1.5));
}

#[test]
fn demand_is_total_traffic_not_the_nearest_regions_current_share() {
    // Already split 2/3 : 1/3 — the decision is the same as when all of it
    // sat in A: a fixed point, no oscillation.
    let (svc, a, b) = two_regions();
    let mut obs = all_healthy(&svc);
    load(&mut obs, a, 1000.0);
    load(&mut obs, b, 500.0);
    let p = plan(&svc, obs);
    assert!(close(fraction(&p, A), 2.0 / 3.0, 1e-9));
}

#[test]
fn region_a_at_80_percent_spills_nothing() {
    let (svc, a, _) = two_regions();
    let mut obs = all_healthy(&svc);
    load(&mut obs, a, 800.0);
    let p = plan(&svc, obs);
    assert_eq!(p.regions.len(), 1);
    assert_eq!(p.regions[0].region, A);
    assert_eq!(p.regions[0].fraction, 1.0);
    assert_eq!(p.thresholds, [u32::MAX]);
    for h in [0u64, 1, u64::MAX, 0xdead_beef] {
        assert_eq!(pick_region(&p, h), Some(0));
    }
}

#[test]
fn no_traffic_goes_to_the_nearest_region() {
    let (svc, _, _) = two_regions();
    let p = plan(&svc, all_healthy(&svc));
    assert_eq!(p.regions.len(), 1);
    assert_eq!(p.regions[0].region, A);
}

#[test]
fn region_a_at_300_percent_with_a_small_b_cascades_to_c() {
    let mut svc = rate_service(100);
    let a = group(&mut svc, A, zone(A, 0), 10); // 1000
    group(&mut svc, B, zone(B, 0), 5); // 500
    group(&mut svc, C, zone(C, 0), 100); // 10000
    let mut obs = all_healthy(&svc);
    load(&mut obs, a, 3000.0);
    let p = plan(&svc, obs);
    let f: Vec<_> = p.regions.iter().map(|r| (r.region, r.fraction)).collect();
    assert_eq!(f.len(), 3, "{f:?}");
    assert!(close(f[0].1, 1.0 / 3.0, 1e-9), "{f:?}");
    assert!(close(f[1].1, 1.0 / 6.0, 1e-9), "{f:?}");
    assert!(close(f[2].1, 1.0 / 2.0, 1e-9), "{f:?}");
    assert_eq!([f[0].0, f[1].0, f[2].0], [A, B, C]);
}

#[test]
fn every_region_full_shares_in_proportion_to_capacity() {
    let mut svc = rate_service(100);
    let a = group(&mut svc, A, zone(A, 0), 10); // 1000
    group(&mut svc, B, zone(B, 0), 30); // 3000
    let mut obs = all_healthy(&svc);
    load(&mut obs, a, 8000.0);
    let p = plan(&svc, obs);
    assert!(p.overloaded);
    assert!(close(fraction(&p, A), 0.25, 1e-9));
    assert!(close(fraction(&p, B), 0.75, 1e-9));
}

#[test]
fn the_preference_order_is_the_nodes_not_the_region_ids() {
    let (svc, a, _) = two_regions();
    let mut obs = all_healthy(&svc);
    load(&mut obs, a, 500.0);
    let mut n = node();
    n.region_order = vec![B, A];
    let p = decide(&n, &svc, &observe(obs), None, &Tuning::default()).unwrap();
    assert_eq!(p.regions.len(), 1);
    assert_eq!(p.regions[0].region, B);
    assert_eq!(p.status[0].region, B);
    // Unlisted regions come after the listed ones.
    n.region_order = vec![];
    let p = decide(
        &n,
        &svc,
        &observe(all_healthy(&svc)),
        None,
        &Tuning::default(),
    )
    .unwrap();
    assert_eq!(p.regions[0].region, A);
}

#[test]
fn unhealthy_region_fails_over_to_b_and_comes_back_when_healthy() {
    let (svc, a, b) = two_regions();
    let mut planner = Planner::new(Tuning::default());
    let mut obs = all_healthy(&svc);
    load(&mut obs, a.clone(), 300.0);
    let sec = Duration::from_secs(1);

    let p = planner
        .update(&node(), &svc, &observe(obs.clone()), sec)
        .unwrap();
    assert_eq!(fraction(p, A), 1.0);

    // 5 of 10 healthy: below min_healthy_percent = 60 → UNHEALTHY.
    for o in &mut obs[a.start..a.start + 5] {
        o.health = Health::Unhealthy;
    }
    let p = planner
        .update(&node(), &svc, &observe(obs.clone()), sec)
        .unwrap();
    assert_eq!(p.status[0].health, AggregateHealth::Unhealthy);
    assert!(!p.status[0].candidate);
    assert_eq!(p.regions.len(), 1, "{p:#?}");
    assert_eq!(p.regions[0].region, B);
    assert_eq!(fraction(p, B), 1.0);
    assert!(used(p).iter().all(|&e| b.contains(&(e as usize))));

    // Recovered: new connections return at once (smoothing never delays
    // health).
    for o in &mut obs[a.start..a.start + 5] {
        o.health = Health::Healthy;
    }
    let p = planner
        .update(&node(), &svc, &observe(obs.clone()), sec)
        .unwrap();
    assert_eq!(p.regions.len(), 1);
    assert_eq!(p.regions[0].region, A);

    // 6 of 10 is enough.
    for o in &mut obs[a.start..a.start + 4] {
        o.health = Health::Unhealthy;
    }
    let p = planner.update(&node(), &svc, &observe(obs), sec).unwrap();
    assert_eq!(p.status[0].health, AggregateHealth::Healthy);
    assert_eq!(p.regions[0].region, A);
    assert_eq!(p.regions[0].endpoints.len(), 6);
}

#[test]
fn below_min_healthy_count_fails_over() {
    let mut svc = rate_service(100);
    svc.aggregation = Aggregation {
        min_healthy_percent: 0,
        min_healthy_count: 4,
    };
    group(&mut svc, A, zone(A, 0), 3);
    group(&mut svc, B, zone(B, 0), 5);
    let p = plan(&svc, all_healthy(&svc));
    assert_eq!(p.status[0].health, AggregateHealth::Unhealthy);
    assert_eq!(p.regions[0].region, B);
    assert_eq!(p.regions.len(), 1);
}

#[test]
fn every_region_unhealthy_still_uses_the_healthy_endpoints() {
    let (svc, a, b) = two_regions();
    let mut obs = all_healthy(&svc);
    for i in (a.start..a.start + 6).chain(b.start..b.start + 6) {
        obs[i].health = Health::Unhealthy;
    }
    let p = plan(&svc, obs);
    assert!(p.degraded);
    assert_eq!(p.regions[0].region, A);
    assert_eq!(p.regions[0].endpoints.len(), 4);
    assert_eq!(p.eligibility, Eligibility::Healthy);
}

#[test]
fn capacity_scaler_zero_drains_a_group() {
    let mut svc = rate_service(100);
    let drained = group_with(&mut svc, A, zone(A, 0), 5, 0.0, None);
    let live = group(&mut svc, A, zone(A, 1), 5);
    group(&mut svc, B, zone(B, 0), 10);
    let mut obs = all_healthy(&svc);
    // The drained group still carries established flows.
    load(&mut obs, drained.clone(), 600.0);
    load(&mut obs, live.clone(), 150.0);
    let p = plan(&svc, obs.clone());
    // A's capacity is only the live group's: 500 of a demand of 750.
    assert_eq!(p.status[0].capacity, 500.0);
    assert!(close(fraction(&p, A), 500.0 / 750.0, 1e-9));
    assert!(
        used(&p).iter().all(|&e| !drained.contains(&(e as usize))),
        "{p:#?}"
    );
    // Draining is not ill health.
    assert_eq!(p.status[0].health, AggregateHealth::Healthy);

    // A region whose only group is drained takes nothing.
    svc.groups[1].capacity_scaler = 0.0;
    let p = plan(&svc, obs);
    assert_eq!(p.regions.len(), 1);
    assert_eq!(p.regions[0].region, B);

    // A half scaler halves capacity and the weights.
    svc.groups[1].capacity_scaler = 0.5;
    svc.groups[0].capacity_scaler = 1.0;
    let p = plan(&svc, all_healthy(&svc));
    assert_eq!(p.status[0].capacity, 500.0 + 250.0);
    let w = |e: usize| {
        p.regions[0]
            .endpoints
            .iter()
            .find(|x| x.endpoint as usize == e)
            .unwrap()
            .weight
    };
    assert_eq!(w(drained.start), 2 * w(live.start));
}

#[test]
fn rate_capacity_uses_group_max_rate_pro_rata() {
    let mut svc = rate_service(100);
    let g = group_with(&mut svc, A, zone(A, 0), 4, 1.0, Some(200)); // min(400, 200)
    group(&mut svc, B, zone(B, 0), 10);
    let mut obs = all_healthy(&svc);
    let p = plan(&svc, obs.clone());
    assert_eq!(p.status[0].capacity, 200.0);
    obs[g.start].health = Health::Unhealthy;
    let p = plan(&svc, obs);
    assert_eq!(p.status[0].capacity, 150.0);
    // Without a per-endpoint rate the group's rate alone counts.
    svc.capacity = locality::CapacityMode::Rate {
        max_rate_per_endpoint: None,
    };
    svc.groups[0].max_rate = Some(1000);
    svc.groups[1].max_rate = Some(10);
    let p = plan(&svc, all_healthy(&svc));
    assert_eq!(p.status[0].capacity, 1000.0);
    assert_eq!(p.status[1].capacity, 10.0);
}

#[test]
fn capacity_share_budgets_a_node_of_several() {
    let (svc, a, _) = two_regions();
    let mut obs = all_healthy(&svc);
    load(&mut obs, a, 600.0);
    let mut n = node();
    n.capacity_share = 0.5; // two balancer nodes behind ECMP
    let p = decide(&n, &svc, &observe(obs), None, &Tuning::default()).unwrap();
    assert_eq!(p.status[0].capacity, 500.0);
    assert!(close(fraction(&p, A), 500.0 / 600.0, 1e-9));
}

#[test]
fn fail_open_truth_table() {
    // (fail_open, how many of 4 endpoints healthy) → (eligibility, eligible).
    let cases = [
        (false, 0, Eligibility::Nothing, 0),
        (true, 0, Eligibility::FailOpen, 4),
        (false, 1, Eligibility::Healthy, 1),
        (true, 1, Eligibility::Healthy, 1),
        (false, 4, Eligibility::Healthy, 4),
        (true, 4, Eligibility::Healthy, 4),
    ];
    for (fail_open, healthy, want, n_used) in cases {
        let mut svc = rate_service(100);
        svc.fail_open = fail_open;
        svc.aggregation.min_healthy_percent = 0;
        group(&mut svc, A, zone(A, 0), 2);
        group(&mut svc, B, zone(B, 0), 2);
        let mut obs = vec![EndpointObs::UNHEALTHY; 4];
        for o in &mut obs[..healthy] {
            o.health = Health::Healthy;
        }
        let p = plan(&svc, obs);
        assert_eq!(
            p.eligibility, want,
            "fail_open={fail_open} healthy={healthy}"
        );
        let eligible: u32 = p.status.iter().map(|s| s.eligible).sum();
        assert_eq!(
            eligible as usize, n_used,
            "fail_open={fail_open} healthy={healthy}"
        );
        assert_eq!(p.is_serving(), n_used > 0);
        if want != Eligibility::FailOpen {
            // Only healthy endpoints (the first `healthy`) are ever used.
            assert!(used(&p).iter().all(|&e| (e as usize) < healthy));
        }
        let sum: f64 = p.regions.iter().map(|r| r.fraction).sum();
        assert!(n_used == 0 && sum == 0.0 || close(sum, 1.0, 1e-12));
        if want == Eligibility::FailOpen {
            // Routing as if healthy: nearest region first; status still real.
            assert_eq!(p.regions.len(), 1);
            assert_eq!(p.regions[0].region, A);
            assert_eq!(p.status[0].health, AggregateHealth::Unhealthy);
            assert_eq!(p.health, AggregateHealth::Unhealthy);
        }
    }
    // Fail-open never revives a drained group or a weight-0 endpoint.
    let mut svc = rate_service(100);
    svc.fail_open = true;
    group_with(&mut svc, A, zone(A, 0), 2, 0.0, None);
    group(&mut svc, B, zone(B, 0), 2);
    let mut obs = vec![EndpointObs::UNHEALTHY; 4];
    obs[3].weight = Some(0);
    let p = plan(&svc, obs);
    assert_eq!(p.eligibility, Eligibility::FailOpen);
    assert_eq!(used(&p), [2]);
}

#[test]
fn unknown_endpoints_are_eligible_only_while_none_is_known_healthy() {
    let (mut svc, a, b) = two_regions();
    // Start-up: nothing known → all used, regions UNKNOWN but candidates.
    let p = plan(&svc, vec![EndpointObs::UNKNOWN; 20]);
    assert_eq!(p.eligibility, Eligibility::Unknown);
    assert_eq!(p.status[0].health, AggregateHealth::Unknown);
    assert_eq!(p.regions[0].region, A);
    assert_eq!(p.regions[0].endpoints.len(), 10);

    // One verdict of healthy anywhere: unverified endpoints stop taking new
    // connections; A (1 healthy, 9 unknown) is UNKNOWN, still a candidate.
    let mut obs = vec![EndpointObs::UNKNOWN; 20];
    obs[a.start].health = Health::Healthy;
    let p = plan(&svc, obs.clone());
    assert_eq!(p.eligibility, Eligibility::Healthy);
    assert_eq!(used(&p), [a.start as u32]);

    // Only failures known so far: the unknown ones are still better.
    let mut obs = vec![EndpointObs::UNKNOWN; 20];
    for o in &mut obs[a.clone()] {
        o.health = Health::Unhealthy;
    }
    let p = plan(&svc, obs);
    assert_eq!(p.eligibility, Eligibility::Unknown);
    assert_eq!(p.status[0].health, AggregateHealth::Unhealthy);
    assert_eq!(p.regions[0].region, B);
    assert!(used(&p).iter().all(|&e| b.contains(&(e as usize))));

    // A healthy endpoint that cannot serve (weight 0) does not end the
    // start-up tier.
    let mut obs = vec![EndpointObs::UNKNOWN; 20];
    obs[a.start].health = Health::Healthy;
    obs[a.start].weight = Some(0);
    let p = plan(&svc, obs);
    assert_eq!(p.eligibility, Eligibility::Unknown);
    assert_eq!(p.regions[0].endpoints.len(), 9);

    // Without a health check, unknown means healthy.
    svc.health_checked = false;
    let mut obs = vec![EndpointObs::UNKNOWN; 20];
    obs[b.start].health = Health::Healthy;
    let p = plan(&svc, obs);
    assert_eq!(p.eligibility, Eligibility::Healthy);
    assert_eq!(p.status[0].health, AggregateHealth::Healthy);
    assert_eq!(p.regions[0].endpoints.len(), 10);
}

#[test]
fn weights_from_the_health_check_count_and_zero_excludes() {
    let mut svc = rate_service(100);
    let a = group(&mut svc, A, zone(A, 0), 3);
    let mut obs = all_healthy(&svc);
    obs[a.start].weight = Some(300);
    obs[a.start + 1].weight = Some(0);
    let p = plan(&svc, obs.clone());
    let ws: Vec<(u32, u32)> = p.regions[0]
        .endpoints
        .iter()
        .map(|w| (w.endpoint, w.weight))
        .collect();
    assert_eq!(ws, [(0, 300_000), (2, 100_000)]);
    // MAGLEV (unweighted): every positive weight counts the same.
    svc.weighted = false;
    let p = plan(&svc, obs);
    let ws: Vec<u32> = p.regions[0].endpoints.iter().map(|w| w.weight).collect();
    assert_eq!(ws, [1000, 1000]);
}

#[test]
fn utilization_region_can_take_target_over_utilization_of_its_load() {
    let mut svc = util_service(0.6);
    let a = group(&mut svc, A, zone(A, 0), 10);
    let b = group(&mut svc, B, zone(B, 0), 10);
    let mut obs = all_healthy(&svc);
    load(&mut obs, a.clone(), 900.0);
    for o in &mut obs[a] {
        o.utilization = Some(0.9);
    }
    for o in &mut obs[b.clone()] {
        o.utilization = Some(0.1); // idle: room, amount unknown yet
    }
    let p = plan(&svc, obs.clone());
    assert!(close(p.status[0].capacity, 600.0, 1e-9));
    assert!(close(fraction(&p, A), 2.0 / 3.0, 1e-9), "{p:#?}");
    assert!(close(fraction(&p, B), 1.0 / 3.0, 1e-9));
    assert_eq!(p.status[0].utilization, Some(0.9));

    // An idle region at or above target offers nothing.
    for o in &mut obs[b] {
        o.utilization = Some(0.7);
    }
    let p = plan(&svc, obs);
    assert_eq!(p.status[1].capacity, 0.0);
    // Nowhere to spill: everything full, B has no capacity → all to A.
    assert!(p.overloaded);
    assert_eq!(fraction(&p, A), 1.0);
}

/// A UTILIZATION service at target `t` with a rate limit too: `per_endpoint`
/// pps per endpoint (M25, "or both").
fn util_and_rate_service(t: f64, per_endpoint: Option<u64>) -> ServiceSpec {
    ServiceSpec::new(locality::CapacityMode::Utilization {
        max_utilization: t,
        max_rate_per_endpoint: per_endpoint,
    })
}

/// Region A (10 endpoints) carrying 900 pps at utilization 0.9, and an
/// idle region B with room.
fn util_and_rate_obs(svc: &ServiceSpec, a: std::ops::Range<usize>) -> Vec<EndpointObs> {
    let mut obs = all_healthy(svc);
    load(&mut obs, a.clone(), 900.0);
    for (i, o) in obs.iter_mut().enumerate() {
        o.utilization = Some(if a.contains(&i) { 0.9 } else { 0.1 });
    }
    obs
}

/// M25 "or both": with a rate and a utilization target, a group's capacity
/// is the smaller of what each allows — whichever is reached first binds.
/// At 900 pps and utilization 0.9, target 0.6 allows 600 pps; 100 pps per
/// endpoint allows 1000 (utilization binds), 50 allows 500 (the rate
/// binds). The spill follows the binding limit.
#[test]
fn rate_and_utilization_together_bind_whichever_is_reached_first() {
    for (per_endpoint, capacity) in [(None, 600.0), (Some(100), 600.0), (Some(50), 500.0)] {
        let mut svc = util_and_rate_service(0.6, per_endpoint);
        let a = group(&mut svc, A, zone(A, 0), 10);
        group(&mut svc, B, zone(B, 0), 10);
        let p = plan(&svc, util_and_rate_obs(&svc, a));
        assert!(
            close(p.status[0].capacity, capacity, 1e-9),
            "{per_endpoint:?}: {p:#?}"
        );
        assert!(close(fraction(&p, A), capacity / 900.0, 1e-9), "{p:#?}");
        assert!(close(fraction(&p, B), 1.0 - capacity / 900.0, 1e-9));
        // Status shows the reported utilization, not load / capacity.
        assert_eq!(p.status[0].utilization, Some(0.9));
    }

    // The group's max_rate is a limit of its own (pro rata to eligible
    // endpoints, as in RATE), and the group's max_utilization overrides
    // the service's target: 900 × 0.45 / 0.9 = 450 < 700.
    let mut svc = util_and_rate_service(0.6, None);
    let a = group_with(&mut svc, A, zone(A, 0), 10, 1.0, Some(700));
    group(&mut svc, B, zone(B, 0), 10);
    let p = plan(&svc, util_and_rate_obs(&svc, a.clone()));
    assert!(close(p.status[0].capacity, 600.0, 1e-9), "{p:#?}");
    svc.groups[0].max_utilization = Some(0.45);
    let p = plan(&svc, util_and_rate_obs(&svc, a.clone()));
    assert!(close(p.status[0].capacity, 450.0, 1e-9), "{p:#?}");
    svc.groups[0].max_utilization = Some(1.0);
    let p = plan(&svc, util_and_rate_obs(&svc, a.clone()));
    assert!(close(p.status[0].capacity, 700.0, 1e-9), "{p:#?}");

    // capacity_scaler scales both limits: half of 600 and of 700.
    svc.groups[0].capacity_scaler = 0.5;
    svc.groups[0].max_utilization = None;
    let p = plan(&svc, util_and_rate_obs(&svc, a));
    assert!(close(p.status[0].capacity, 300.0, 1e-9), "{p:#?}");
}

/// With no utilization reported, UTILIZATION alone has no limit
/// (unlimited, status `None`: unknown); a rate set beside it still limits.
/// The node's capacity share (M25 with several nodes) applies to the rate
/// only: the endpoints' utilization already counts every node's traffic.
#[test]
fn an_unreported_utilization_leaves_the_rate_as_the_only_limit() {
    let mut svc = util_and_rate_service(0.6, None);
    let a = group(&mut svc, A, zone(A, 0), 10);
    group(&mut svc, B, zone(B, 0), 10);
    let mut obs = all_healthy(&svc);
    load(&mut obs, a.clone(), 900.0);
    let p = plan(&svc, obs.clone());
    assert!(p.status[0].capacity.is_infinite(), "{p:#?}");
    assert_eq!(p.status[0].utilization, None);
    assert_eq!(fraction(&p, A), 1.0);

    let mut svc = util_and_rate_service(0.6, Some(50));
    let a = group(&mut svc, A, zone(A, 0), 10);
    group(&mut svc, B, zone(B, 0), 10);
    let p = plan(&svc, obs.clone());
    assert!(close(p.status[0].capacity, 500.0, 1e-9), "{p:#?}");
    assert_eq!(p.status[0].utilization, None);

    let half = NodeSpec {
        capacity_share: 0.5,
        ..node()
    };
    let p = decide(&half, &svc, &observe(obs), None, &Tuning::default()).unwrap();
    assert!(close(p.status[0].capacity, 250.0, 1e-9), "{p:#?}");
    // Reported, the 600 pps utilization allows is not halved: 250 by rate
    // binds; at 200 pps per endpoint (1000 after the share) the 600 does.
    let p = decide(
        &half,
        &svc,
        &observe(util_and_rate_obs(&svc, a.clone())),
        None,
        &Tuning::default(),
    )
    .unwrap();
    assert!(close(p.status[0].capacity, 250.0, 1e-9), "{p:#?}");
    let svc = {
        let mut s = util_and_rate_service(0.6, Some(200));
        group(&mut s, A, zone(A, 0), 10);
        group(&mut s, B, zone(B, 0), 10);
        s
    };
    let p = decide(
        &half,
        &svc,
        &observe(util_and_rate_obs(&svc, a)),
        None,
        &Tuning::default(),
    )
    .unwrap();
    assert!(close(p.status[0].capacity, 600.0, 1e-9), "{p:#?}");
}

/// Region A with zones a0 and a1 (5 × 100 pps each), region B.
fn zoned(locality: Locality) -> ServiceSpec {
    let mut svc = rate_service(100);
    svc.locality = locality;
    group(&mut svc, A, zone(A, 0), 5);
    group(&mut svc, A, zone(A, 1), 5);
    group(&mut svc, B, zone(B, 0), 10);
    svc
}

/// Share of a selection set's weight on endpoints `range`.
fn share_on(set: &[locality::Weighted], range: std::ops::Range<usize>) -> f64 {
    let total: f64 = set.iter().map(|w| f64::from(w.weight)).sum();
    let inside: f64 = set
        .iter()
        .filter(|w| range.contains(&(w.endpoint as usize)))
        .map(|w| f64::from(w.weight))
        .sum();
    inside / total
}

#[test]
fn zonal_affinity_keeps_clients_in_zone_with_a_spill_ratio() {
    let svc = zoned(Locality {
        zonal_affinity: true,
        zonal_spill_ratio: 0.2,
        cross_zone: true,
    });
    let mut obs = all_healthy(&svc);
    load(&mut obs, 0..10, 400.0);
    let p = plan(&svc, obs.clone());
    let r = &p.regions[0];
    // Unmapped clients: cross-zone, even by weight.
    assert_eq!(r.table_index(None), 0);
    assert!(close(share_on(&r.endpoints, 0..5), 0.5, 1e-9));
    // Zone a0's clients: 80 % pinned + 20 % spread by weight → 90 % stay,
    // 10 % (≤ the 20 % spill ratio) leave.
    assert_eq!(r.zone_variants.len(), 2);
    let i = r.table_index(Some(zone(A, 0)));
    let v = &r.zone_variants[i - 1];
    assert_eq!(v.zone, zone(A, 0));
    assert!(close(v.in_zone_share, 0.8, 1e-12));
    assert!(close(share_on(&v.endpoints, 0..5), 0.9, 1e-5));
    let v1 = &r.zone_variants[r.table_index(Some(zone(A, 1))) - 1];
    assert!(close(share_on(&v1.endpoints, 5..10), 0.9, 1e-5));
    // A client zone with no endpoints here uses the default set.
    assert_eq!(r.table_index(Some(zone(B, 0))), 0);
    let tables: Vec<_> = r.tables().collect();
    assert_eq!(tables.len(), 3);

    // Spill ratio 0: stay in zone.
    let svc0 = zoned(Locality {
        zonal_affinity: true,
        zonal_spill_ratio: 0.0,
        cross_zone: true,
    });
    let p = plan(&svc0, obs.clone());
    let v = &p.regions[0].zone_variants[0];
    assert_eq!(v.in_zone_share, 1.0);
    assert!(v.endpoints.iter().all(|w| w.endpoint < 5));
    assert_eq!(v.endpoints.len(), 5);

    // The zone without healthy endpoints: its clients go cross-zone.
    for o in &mut obs[0..5] {
        o.health = Health::Unhealthy;
    }
    let mut s = svc0.clone();
    s.aggregation.min_healthy_percent = 0;
    let p = plan(&s, obs);
    let r = &p.regions[0];
    assert_eq!(r.table_index(Some(zone(A, 0))), 0);
    assert!(r.endpoints.iter().all(|w| w.endpoint >= 5));
}

#[test]
fn zonal_affinity_spills_more_when_the_zone_is_over_capacity() {
    let svc = zoned(Locality {
        zonal_affinity: true,
        zonal_spill_ratio: 0.2,
        cross_zone: true,
    });
    let mut obs = all_healthy(&svc);
    load(&mut obs, 0..10, 1000.0); // region A exactly full
    let mut o = observe(obs);
    // 80 % of new connections come from zone a0's clients: 800 > 500.
    o.zone_demand = vec![(zone(A, 0), 0.8), (zone(A, 1), 0.2)];
    let p = decide(&node(), &svc, &o, None, &Tuning::default()).unwrap();
    let r = &p.regions[0];
    let v = &r.zone_variants[r.table_index(Some(zone(A, 0))) - 1];
    // Zone load = 800 · (p + (1 − p)/2) = 500 → p = 0.25.
    assert!(close(v.in_zone_share, 0.25, 1e-9), "{v:?}");
    assert!(close(800.0 * share_on(&v.endpoints, 0..5), 500.0, 0.01));
    // Zone a1's clients: 200 of 500, the ceiling applies.
    let v1 = &r.zone_variants[r.table_index(Some(zone(A, 1))) - 1];
    assert!(close(v1.in_zone_share, 0.8, 1e-12));
}

#[test]
fn cross_zone_off_serves_the_nodes_zone_first() {
    let svc = zoned(Locality {
        zonal_affinity: false,
        zonal_spill_ratio: 0.0,
        cross_zone: false,
    });
    let mut obs = all_healthy(&svc);
    load(&mut obs, 0..10, 400.0); // fits zone a0 (500)
    let p = plan(&svc, obs.clone());
    let r = &p.regions[0];
    assert_eq!(r.node_zone_share, Some(1.0));
    assert!(r.endpoints.iter().all(|w| w.endpoint < 5));
    assert!(r.zone_variants.is_empty());

    // 800 > 500: keep what fits, spread the rest.
    load(&mut obs, 0..10, 800.0);
    let p = plan(&svc, obs.clone());
    let r = &p.regions[0];
    let share = r.node_zone_share.unwrap();
    assert!(close(share, 0.25, 1e-9));
    assert!(close(800.0 * share_on(&r.endpoints, 0..5), 500.0, 0.01));

    // Node zone without healthy endpoints: the other zone serves.
    for o in &mut obs[0..5] {
        o.health = Health::Unhealthy;
    }
    let mut s = svc.clone();
    s.aggregation.min_healthy_percent = 0;
    let p = plan(&s, obs.clone());
    let r = &p.regions[0];
    assert_eq!(r.node_zone_share, None);
    assert!(
        r.endpoints
            .iter()
            .all(|w| (5..10).contains(&(w.endpoint as usize)))
    );

    // Regions without the node's zone are plain cross-zone.
    let mut n = node();
    n.region_order = vec![B, A];
    let p = decide(
        &n,
        &svc,
        &observe(all_healthy(&svc)),
        None,
        &Tuning::default(),
    )
    .unwrap();
    assert_eq!(p.regions[0].region, B);
    assert_eq!(p.regions[0].node_zone_share, None);
    assert_eq!(p.regions[0].endpoints.len(), 10);
}

#[test]
fn cross_zone_on_spreads_by_weight_over_all_zones() {
    let svc = zoned(Locality::default());
    let mut obs = all_healthy(&svc);
    obs[0].weight = Some(500);
    let p = plan(&svc, obs);
    let r = &p.regions[0];
    assert_eq!(r.endpoints.len(), 10);
    assert!(close(share_on(&r.endpoints, 0..1), 500.0 / 1400.0, 1e-12));
    assert!(r.zone_variants.is_empty());
    assert_eq!(r.node_zone_share, None);
}

#[test]
fn mismatched_inputs_are_errors() {
    let (svc, _, _) = two_regions();
    let e = decide(
        &node(),
        &svc,
        &observe(vec![EndpointObs::UNKNOWN; 3]),
        None,
        &Tuning::default(),
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "3 endpoint observations for a service of 20 endpoints"
    );
    let mut bad = svc.clone();
    bad.endpoints[4].group = 9;
    let e = decide(
        &node(),
        &bad,
        &observe(all_healthy(&bad)),
        None,
        &Tuning::default(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("names group 9"), "{e}");
    let mut planner = Planner::default();
    assert!(
        planner
            .update(&node(), &svc, &observe(vec![]), Duration::from_secs(1))
            .is_err()
    );
    assert!(planner.plan().is_none());
}

#[test]
fn a_service_without_endpoints_has_an_empty_plan() {
    let svc = rate_service(100);
    let p = plan(&svc, vec![]);
    assert!(!p.is_serving());
    assert_eq!(pick_region(&p, 42), None);
    assert_eq!(p.eligibility, Eligibility::Nothing);
}

#[test]
fn from_compiled_reads_the_two_region_example() {
    let text = include_str!("../../../config/two-region-spillover.toml");
    let loaded = config::load_str(
        "two-region-spillover.toml",
        text,
        &config::Env::with_cpus(4),
    )
    .unwrap();
    let c = &loaded.compiled;
    let node = NodeSpec::from_compiled(c);
    assert_eq!(c.regions[node.region.index()], "us-east");
    assert_eq!(node.region_order.len(), 2);
    let sid = config::compiled::ServiceId(0);
    let svc = ServiceSpec::from_compiled(c, sid).unwrap();
    assert!(ServiceSpec::from_compiled(c, config::compiled::ServiceId(7)).is_none());
    assert_eq!(svc.endpoints.len(), 9);
    assert!(svc.health_checked && svc.weighted && !svc.fail_open);
    assert!(svc.locality.zonal_affinity);
    let local = 4u32;
    let id = locality::endpoint_id(&c.services[0], local);
    assert_eq!(c.endpoints[id.index()].address.to_string(), "10.201.2.12");

    // Everything healthy, 250 kpps all at us-east.
    let mut obs = vec![EndpointObs::healthy(0.0); 9];
    for o in &mut obs[..5] {
        o.rate = 50_000.0;
    }
    let p = decide(
        &node,
        &svc,
        &Observation::new(obs),
        None,
        &Tuning::default(),
    )
    .unwrap();
    // us-east: 3 × 50k + 2 × 50k × 0.5 = 200k; us-west: min(4 × 50k, 200k).
    assert_eq!(p.status[0].capacity, 200_000.0);
    assert_eq!(p.status[1].capacity, 200_000.0);
    assert!(close(fraction(&p, p.status[0].region), 0.8, 1e-9));
    assert!(close(fraction(&p, p.status[1].region), 0.2, 1e-9));
    // The bigger machine (weight 200) and the half-scaled zone.
    let ws: Vec<u32> = p.regions[0].endpoints.iter().map(|w| w.weight).collect();
    assert_eq!(ws, [100_000, 100_000, 200_000, 50_000, 50_000]);
    // Zonal affinity: a variant for each us-east zone.
    assert_eq!(p.regions[0].zone_variants.len(), 2);
}

/// The two-region example under UTILIZATION keeps its rates as a second
/// limit (M25, "or both"), and a group's own max_utilization overrides the
/// service's target.
#[test]
fn from_compiled_reads_rate_and_utilization_together() {
    let text = include_str!("../../../config/two-region-spillover.toml")
        .replacen(
            "balancing_mode = \"RATE\"",
            "balancing_mode = \"UTILIZATION\"\nmax_utilization = 0.7",
            1,
        )
        .replacen(
            "zone = \"us-east-b\"\n",
            "zone = \"us-east-b\"\nmax_utilization = 0.5\n",
            1,
        );
    let loaded = config::load_str("t.toml", &text, &config::Env::with_cpus(4)).unwrap();
    let c = &loaded.compiled;
    let svc = ServiceSpec::from_compiled(c, config::compiled::ServiceId(0)).unwrap();
    assert_eq!(
        svc.capacity,
        locality::CapacityMode::Utilization {
            max_utilization: 0.7,
            max_rate_per_endpoint: Some(50_000),
        }
    );
    let targets: Vec<Option<f64>> = svc.groups.iter().map(|g| g.max_utilization).collect();
    assert_eq!(targets, [None, Some(0.5), None]);
    assert_eq!(svc.groups[2].max_rate, Some(200_000));

    // us-east's groups at utilization 0.35 carrying 50 kpps each: use-a
    // may take 50k × 0.7 / 0.35 = 100k (its rate allows 150k), use-b
    // 50k × 0.5 × 0.5 / 0.35 = 35.7k (its rate, halved, 50k).
    let mut obs = vec![EndpointObs::healthy(0.0); 9];
    for (i, o) in obs[..5].iter_mut().enumerate() {
        o.rate = if i < 3 { 50_000.0 / 3.0 } else { 25_000.0 };
        o.utilization = Some(0.35);
    }
    let p = decide(
        &NodeSpec::from_compiled(c),
        &svc,
        &Observation::new(obs),
        None,
        &Tuning::default(),
    )
    .unwrap();
    let want = 100_000.0 + 50_000.0 * 0.25 / 0.35;
    assert!(close(p.status[0].capacity, want, 1e-6), "{p:#?}");
    // us-west reports nothing: only its rates, min(4 × 50k, 200k).
    assert!(close(p.status[1].capacity, 200_000.0, 1e-9), "{p:#?}");
    assert_eq!(p.status[1].utilization, None);
}
