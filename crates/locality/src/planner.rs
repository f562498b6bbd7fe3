//! The stateful wrapper the management core keeps per service: it smooths
//! the raw one-interval measurements and remembers the last plan for
//! hysteresis, then calls [`decide`].

use std::time::Duration;

use config::compiled::ZoneId;

use crate::decide::decide;
use crate::input::{InputError, NodeSpec, Observation, ServiceSpec, Tuning};
use crate::plan::Plan;

/// Smoothed state of one series.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Ewma(f64);

impl Ewma {
    /// Moves towards `x` by `dt / (τ + dt)`, with τ the rise or fall time
    /// constant (a first-order low-pass filter, discretised so that the
    /// result does not depend on floating-point `exp`).
    fn update(&mut self, x: f64, dt: f64, t: &Tuning) {
        let tau = if x > self.0 { t.rise } else { t.fall }.as_secs_f64();
        let alpha = if tau <= 0.0 { 1.0 } else { dt / (tau + dt) };
        self.0 += alpha * (x - self.0);
    }
}

fn clean(x: f64) -> f64 {
    if x.is_finite() && x > 0.0 { x } else { 0.0 }
}

/// Per-service decision state: smoothed measurements and the last plan.
///
/// Call [`Planner::update`] once per management cycle (at least every
/// second, M29) with the raw measurements of the interval just ended and
/// its length. A new planner — or one after [`Planner::reset`], or one
/// whose service's endpoints moved (a reload changed their number, groups'
/// regions or zones) — starts from the first observation as is, without
/// hysteresis. A reload that only changes capacities, scalers, weights or
/// policies keeps the smoothed state and the previous plan.
#[derive(Clone, Debug, Default)]
pub struct Planner {
    tuning: Tuning,
    demand: Option<Ewma>,
    rates: Vec<Ewma>,
    utilization: Vec<Option<Ewma>>,
    zones: Vec<(ZoneId, Ewma)>,
    /// Region and zone of each endpoint the state was built for.
    shape: Vec<(config::compiled::RegionId, ZoneId)>,
    smoothed: Observation,
    plan: Option<Plan>,
    /// The next update takes rates and demand as they are.
    reseed: bool,
}

impl Planner {
    /// A planner with `tuning`.
    pub fn new(tuning: Tuning) -> Self {
        Planner {
            tuning,
            ..Planner::default()
        }
    }

    /// Its tuning.
    pub fn tuning(&self) -> &Tuning {
        &self.tuning
    }

    /// The last plan, if any.
    pub fn plan(&self) -> Option<&Plan> {
        self.plan.as_ref()
    }

    /// The smoothed observation the last plan was decided from (status
    /// output, debugging).
    pub fn smoothed(&self) -> &Observation {
        &self.smoothed
    }

    /// Forgets the smoothed state and the last plan.
    pub fn reset(&mut self) {
        *self = Planner::new(self.tuning);
    }

    /// The next update takes the rates and the demand as they are, not
    /// smoothed into the old ones; the last plan stays (hysteresis). For a
    /// change of what is measured rather than of the load: the management
    /// core counting another set of balancer nodes' rates (a peer fell
    /// silent or was heard again) would otherwise see a 5 s fall or a 1 s
    /// rise of demand that never happened.
    pub fn reseed(&mut self) {
        self.reseed = true;
    }

    /// Smooths `raw` (measured over `elapsed`) into the state and decides.
    ///
    /// Health and weights are taken as they are (failover must not wait);
    /// endpoint rates, the demand, utilizations and zone shares are
    /// smoothed. An invalid observation changes nothing and returns the
    /// error.
    pub fn update(
        &mut self,
        node: &NodeSpec,
        svc: &ServiceSpec,
        raw: &Observation,
        elapsed: Duration,
    ) -> Result<&Plan, InputError> {
        if raw.endpoints.len() != svc.endpoints.len() {
            return Err(InputError::EndpointCount {
                got: raw.endpoints.len(),
                want: svc.endpoints.len(),
            });
        }
        svc.check()?;
        let dt = elapsed.as_secs_f64();
        let t = self.tuning;
        let shape: Vec<_> = svc
            .endpoints
            .iter()
            .map(|e| {
                let g = &svc.groups[e.group as usize];
                (g.region, g.zone)
            })
            .collect();
        let fresh = self.demand.is_none() || shape != self.shape;
        if fresh {
            self.shape = shape;
            self.rates.clear();
            self.utilization.clear();
            self.zones.clear();
            self.demand = None;
            self.plan = None;
        }

        let demand_raw = match raw.demand {
            Some(d) => clean(d),
            None => raw.endpoints.iter().map(|o| clean(o.rate)).sum(),
        };
        let reseed = std::mem::take(&mut self.reseed);
        match &mut self.demand {
            Some(d) if !reseed => d.update(demand_raw, dt, &t),
            _ => self.demand = Some(Ewma(demand_raw)),
        }

        let mut smoothed = Vec::with_capacity(raw.endpoints.len());
        for (i, o) in raw.endpoints.iter().enumerate() {
            let rate = clean(o.rate);
            if fresh {
                self.rates.push(Ewma(rate));
                self.utilization
                    .push(o.utilization.filter(|u| u.is_finite()).map(Ewma));
            } else {
                if reseed {
                    self.rates[i] = Ewma(rate);
                } else {
                    self.rates[i].update(rate, dt, &t);
                }
                self.utilization[i] = match (self.utilization[i], o.utilization) {
                    (Some(mut s), Some(u)) if u.is_finite() => {
                        s.update(u, dt, &t);
                        Some(s)
                    }
                    (_, u) => u.filter(|u| u.is_finite()).map(Ewma),
                };
            }
            let mut x = *o;
            x.rate = self.rates[i].0;
            x.utilization = self.utilization[i].map(|u| u.0);
            smoothed.push(x);
        }

        // Zone shares: zones missing from this round decay towards 0.
        for (z, s) in &mut self.zones {
            let x = raw
                .zone_demand
                .iter()
                .filter(|(y, _)| y == z)
                .map(|(_, v)| clean(*v))
                .sum();
            s.update(x, dt, &t);
        }
        for &(z, v) in &raw.zone_demand {
            if !self.zones.iter().any(|(y, _)| *y == z) {
                self.zones.push((z, Ewma(clean(v))));
            }
        }
        self.zones.sort_by_key(|(z, _)| *z);

        self.smoothed = Observation {
            endpoints: smoothed,
            demand: self.demand.map(|d| d.0),
            zone_demand: self.zones.iter().map(|(z, s)| (*z, s.0)).collect(),
        };
        let plan = decide(node, svc, &self.smoothed, self.plan.as_ref(), &t)?;
        Ok(self.plan.insert(plan))
    }
}
