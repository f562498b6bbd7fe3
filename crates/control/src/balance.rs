//! Health and locality on the management core (SPEC M16–M29): runs the
//! health checker, turns its verdicts and the data plane's per-backend
//! packet counts into a locality plan per service every second, and tells
//! the manager when the snapshot must be rebuilt. The data plane only ever
//! sees the result (the snapshot's region shares and Maglev tables).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use config::Compiled;
use config::compiled::{EndpointId, ServiceId};
use dataplane::{EndpointHealth, SnapshotBuilder, WorkerCounters};
use health::{Aggregate, HealthChecker, HealthSnapshot, State};
use locality::{EndpointObs, Health, NodeSpec, Observation, Plan, Planner, ServiceSpec};

/// How often plans are recomputed (M29: at least every second).
pub const PLAN_PERIOD: Duration = Duration::from_secs(1);

/// The management core's health and locality state.
pub struct Balance {
    checker: Option<HealthChecker>,
    remote: crate::remote::RemotePoller,
    /// Per endpoint (index of `compiled.endpoints`): its remote rule, for
    /// endpoints of `remote_rule` groups.
    remote_of: Vec<Option<crate::remote::RemoteKey>>,
    /// The remote verdicts the current plans were made with (status and
    /// plans read these, so both agree with the snapshot).
    remote_seen: HashMap<crate::remote::RemoteKey, State>,
    health: HealthSnapshot,
    node: NodeSpec,
    specs: Vec<Option<ServiceSpec>>,
    /// Kept across reloads by service name (their smoothing state).
    planners: HashMap<String, Planner>,
    plans: Vec<Option<Plan>>,
    last_plan: Option<Instant>,
    /// Per backend slot: packets forwarded, at the last plan.
    prev_packets: Vec<u64>,
}

impl Balance {
    /// Starts health checking for `compiled` (no thread when no service
    /// has a health check).
    pub fn start(compiled: &Compiled) -> Result<Balance, health::HealthError> {
        let mut b = Balance {
            checker: None,
            remote: crate::remote::RemotePoller::start(Vec::new()),
            remote_of: Vec::new(),
            remote_seen: HashMap::new(),
            health: HealthSnapshot::default(),
            node: NodeSpec::from_compiled(compiled),
            specs: Vec::new(),
            planners: HashMap::new(),
            plans: Vec::new(),
            last_plan: None,
            prev_packets: Vec::new(),
        };
        b.reload(compiled)?;
        Ok(b)
    }

    /// Follows a new configuration: probes of endpoints that stay keep
    /// their state, planners of services that stay keep theirs.
    pub fn reload(&mut self, compiled: &Compiled) -> Result<(), health::HealthError> {
        let targets = health::targets_from_compiled(compiled)?;
        match (&mut self.checker, targets.is_empty()) {
            (Some(c), false) => c.update(targets)?,
            (Some(_), true) => {
                if let Some(c) = self.checker.take() {
                    c.stop()?;
                }
            }
            (None, false) => self.checker = Some(HealthChecker::start(targets)?),
            (None, true) => {}
        }
        if let Some(c) = &self.checker {
            self.health = c.snapshot();
        } else {
            self.health = HealthSnapshot::default();
        }
        self.remote_of = compiled
            .endpoints
            .iter()
            .map(|ep| {
                let g = compiled.groups.get(ep.group.index())?;
                let r = g.remote.as_ref()?;
                Some(crate::remote::RemoteKey {
                    url: r.status_url.clone(),
                    rule: r.rule.clone(),
                })
            })
            .collect();
        let mut keys: Vec<crate::remote::RemoteKey> =
            self.remote_of.iter().flatten().cloned().collect();
        keys.sort_by(|a, b| (&a.url, &a.rule).cmp(&(&b.url, &b.rule)));
        keys.dedup();
        if keys != self.remote.keys() {
            self.remote = crate::remote::RemotePoller::start(keys);
        }
        self.node = NodeSpec::from_compiled(compiled);
        self.specs = (0..compiled.services.len())
            .map(|i| ServiceSpec::from_compiled(compiled, ServiceId(i as u32)))
            .collect();
        let names: Vec<&str> = compiled.services.iter().map(|s| s.name.as_str()).collect();
        self.planners
            .retain(|name, _| names.contains(&name.as_str()));
        self.plans = vec![None; compiled.services.len()];
        // Plans for the new configuration right away, so the snapshot built
        // from it already carries them (rates: none measured yet).
        self.last_plan = Some(Instant::now());
        self.plan(compiled, None, &WorkerCounters::default(), PLAN_PERIOD);
        Ok(())
    }

    /// The verdict on endpoint `id`: its probe's, or for a `remote_rule`
    /// group the remote rule's exported state; `None`: not checked.
    fn verdict(&self, id: EndpointId) -> Option<State> {
        if let Some(Some(k)) = self.remote_of.get(id.index()) {
            return Some(self.remote_seen.get(k).copied().unwrap_or(State::Unknown));
        }
        self.health.get(id).map(|s| s.state)
    }

    /// What the snapshot builder needs about endpoint `id`. An endpoint not
    /// known UNHEALTHY keeps its flows (UNKNOWN right after start included);
    /// which endpoints take new flows is the plan's decision.
    pub fn endpoint_health(&self, id: EndpointId) -> EndpointHealth {
        EndpointHealth {
            healthy: self.verdict(id) != Some(State::Unhealthy),
            weight: self.health.get(id).and_then(|s| s.weight),
        }
    }

    /// The plans, indexed like `compiled.services` (for the builder).
    pub fn plans(&self) -> &[Option<Plan>] {
        &self.plans
    }

    /// Periodic work. Returns true when the snapshot must be rebuilt: a
    /// health verdict changed, or a plan did. `counters` is asked for only
    /// when plans are recomputed.
    pub fn tick(
        &mut self,
        compiled: &Compiled,
        builder: &SnapshotBuilder,
        counters: impl FnOnce() -> WorkerCounters,
    ) -> bool {
        let mut rebuild = false;
        if let Some(c) = &self.checker {
            if let Some(h) = c.changed_since(self.health.generation) {
                // Only a change of state or weight matters to the snapshot.
                let differs = h.endpoints.len() != self.health.endpoints.len()
                    || h.endpoints
                        .iter()
                        .zip(&self.health.endpoints)
                        .any(|(a, b)| {
                            a.state != b.state || a.weight != b.weight || a.endpoint != b.endpoint
                        });
                self.health = h;
                rebuild |= differs;
            }
        }
        // A remote rule's verdict changed: act on it now, like a probe's.
        let remote: HashMap<crate::remote::RemoteKey, State> = self
            .remote_of
            .iter()
            .flatten()
            .map(|k| (k.clone(), self.remote.state(k).0))
            .collect();
        if remote != self.remote_seen {
            self.remote_seen = remote;
            rebuild = true;
        }
        let now = Instant::now();
        let due = self
            .last_plan
            .is_none_or(|t| now.duration_since(t) >= PLAN_PERIOD);
        if due || rebuild {
            let elapsed = self
                .last_plan
                .map_or(PLAN_PERIOD, |t| now.duration_since(t))
                .max(Duration::from_millis(1));
            self.last_plan = Some(now);
            rebuild |= self.plan(compiled, Some(builder), &counters(), elapsed);
        }
        rebuild
    }

    fn plan(
        &mut self,
        compiled: &Compiled,
        builder: Option<&SnapshotBuilder>,
        counters: &WorkerCounters,
        elapsed: Duration,
    ) -> bool {
        let secs = elapsed.as_secs_f64();
        let packets = &counters.backend_packets;
        let mut changed = false;
        for (i, svc) in compiled.services.iter().enumerate() {
            let Some(spec) = self.specs.get(i).and_then(Option::as_ref) else {
                continue;
            };
            let checked =
                svc.health_check.is_some() || svc.kind == config::schema::GroupKind::RemoteRule;
            let endpoints = compiled.service_endpoints(ServiceId(i as u32));
            let obs: Vec<EndpointObs> = svc
                .endpoint_ids()
                .zip(endpoints)
                .map(|(id, ep)| {
                    let rate = builder
                        .and_then(|b| b.slot_of(&svc.name, &ep.identity))
                        .map_or(0.0, |slot| {
                            let s = slot as usize;
                            let now = packets.get(s).copied().unwrap_or(0);
                            let before = self.prev_packets.get(s).copied().unwrap_or(0);
                            now.saturating_sub(before) as f64 / secs
                        });
                    let status = self.health.get(id);
                    EndpointObs {
                        health: match self.verdict(id) {
                            _ if !checked => Health::Healthy,
                            Some(State::Healthy) => Health::Healthy,
                            Some(State::Unhealthy) => Health::Unhealthy,
                            Some(State::Unknown) | None => Health::Unknown,
                        },
                        weight: status.and_then(|s| s.weight),
                        rate,
                        utilization: status.and_then(|s| s.utilization),
                    }
                })
                .collect();
            let planner = self.planners.entry(svc.name.clone()).or_default();
            match planner.update(&self.node, spec, &Observation::new(obs), elapsed) {
                Ok(plan) => {
                    let old = self.plans.get(i).and_then(Option::as_ref);
                    let differs =
                        old.is_none_or(|o| !o.same_tables(plan) || o.thresholds != plan.thresholds);
                    if differs {
                        if let Some(o) = old {
                            log_change(&svc.name, o, plan, compiled);
                        }
                        changed = true;
                    }
                    if let Some(slot) = self.plans.get_mut(i) {
                        *slot = Some(plan.clone());
                    }
                }
                Err(e) => log::error!("service {}: locality: {e}", svc.name),
            }
        }
        if builder.is_some() {
            self.prev_packets.clone_from(packets);
        }
        changed
    }

    /// The exported state of every forwarding rule (M21): its composite
    /// health check's, else its service's aggregated health.
    pub fn rule_states(&self, compiled: &Compiled) -> Vec<(String, Aggregate)> {
        compiled
            .rules
            .iter()
            .map(|r| {
                let state = match r.composite.and_then(|c| compiled.composites.get(c.index())) {
                    Some(c) => health::composite(
                        &c.sources
                            .iter()
                            .map(|(s, policy)| self.service_health(compiled, *s, *policy))
                            .collect::<Vec<_>>(),
                    ),
                    None => compiled
                        .services
                        .get(r.service.index())
                        .map_or(Aggregate::Unknown, |svc| {
                            self.service_health(compiled, r.service, svc.aggregation)
                        }),
                };
                (r.name.clone(), state)
            })
            .collect()
    }

    fn service_health(
        &self,
        compiled: &Compiled,
        s: ServiceId,
        policy: config::schema::Aggregation,
    ) -> Aggregate {
        let Some(svc) = compiled.services.get(s.index()) else {
            return Aggregate::Unknown;
        };
        let states: Vec<State> = svc
            .endpoint_ids()
            .map(|id| match self.verdict(id) {
                Some(st) => st,
                None if svc.health_check.is_none() => State::Healthy,
                None => State::Unknown,
            })
            .collect();
        health::aggregate(&states, policy)
    }

    /// Status lines: per service and region, health, shares, capacity; per
    /// rule, its exported state.
    pub fn status(&self, compiled: &Compiled) -> String {
        let mut out = String::new();
        for (svc, plan) in compiled.services.iter().zip(&self.plans) {
            let Some(plan) = plan else { continue };
            let _ = writeln!(
                out,
                "service {}: health {:?}, eligibility {:?}{}{}",
                svc.name,
                plan.health,
                plan.eligibility,
                if plan.degraded { ", degraded" } else { "" },
                if plan.overloaded { ", overloaded" } else { "" }
            );
            for r in &plan.status {
                let _ = writeln!(
                    out,
                    "  region {}: {:?}, {} endpoints ({} healthy, {} unknown, {} eligible), load {:.0} pps of capacity {}, new flows {:.1} %",
                    compiled
                        .regions
                        .get(r.region.index())
                        .map_or("?", String::as_str),
                    r.health,
                    r.endpoints,
                    r.healthy,
                    r.unknown,
                    r.eligible,
                    r.load,
                    if r.capacity.is_finite() {
                        format!("{:.0} pps", r.capacity)
                    } else {
                        "unlimited".into()
                    },
                    r.fraction * 100.0
                );
            }
        }
        for (rule, state) in self.rule_states(compiled) {
            let _ = writeln!(out, "rule {rule}: {state}");
        }
        for (ep, key) in compiled.endpoints.iter().zip(&self.remote_of) {
            if let Some(k) = key {
                let state = self.remote_seen.get(k).copied().unwrap_or(State::Unknown);
                let why = self.remote.state(k).1;
                let _ = writeln!(
                    out,
                    "  remote rule {} at {} (VIP {}): {state} ({})",
                    k.rule,
                    k.url,
                    ep.address,
                    if why.is_empty() {
                        "no answer yet"
                    } else {
                        &why
                    }
                );
            }
        }
        for s in &self.health.endpoints {
            let _ = writeln!(
                out,
                "  health {}/{}: {} ({}){}; {} ok / {} failed probes, {} transitions",
                s.service,
                s.addr,
                s.state,
                if s.last_reason.is_empty() {
                    "no probe yet"
                } else {
                    &s.last_reason
                },
                s.weight.map_or(String::new(), |w| format!(", weight {w}")),
                s.counters.probes_ok,
                s.counters.probes_failed,
                s.counters.transitions()
            );
        }
        out
    }

    /// Every probed endpoint's latest status (metrics).
    pub fn probed(&self) -> &[health::EndpointStatus] {
        &self.health.endpoints
    }

    /// Stops the health checker.
    pub fn stop(&mut self) {
        if let Some(c) = self.checker.take() {
            if let Err(e) = c.stop() {
                log::warn!("health checker: {e}");
            }
        }
    }
}

/// One log line per change of where new connections go.
fn log_change(service: &str, old: &Plan, new: &Plan, compiled: &Compiled) {
    let shares = |p: &Plan| {
        p.regions
            .iter()
            .map(|r| {
                format!(
                    "{} {:.1} %",
                    compiled
                        .regions
                        .get(r.region.index())
                        .map_or("?", String::as_str),
                    r.fraction * 100.0
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let (a, b) = (shares(old), shares(new));
    if a != b {
        log::info!("locality: service {service}: new connections [{a}] -> [{b}]");
    }
}
