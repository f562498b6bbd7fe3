//! Health and locality on the management core (M16–M29): turns the
//! health checker's and the remote rules' verdicts and the data plane's
//! per-backend packet counts into a locality plan per service every second,
//! and tells the core when the snapshot must be rebuilt. The data plane only
//! ever sees the result (the snapshot's region shares and Maglev tables).
//! No I/O: the probers are reached through [`Probes`], time is an argument,
//! log lines are [`Output::Log`]s.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Duration;

use config::Compiled;
use config::compiled::{ChildRule, EndpointId, Rule, ServiceId};
use dataplane::{EndpointHealth, SnapshotBuilder, WorkerCounters};
use flowsync::Rate;
use health::{Aggregate, HealthSnapshot, State};
use locality::{EndpointObs, Health, NodeSpec, Observation, Plan, Planner, ServiceSpec};

use crate::cluster::Cluster;
use crate::ports::RemoteKey;
use crate::ports::{Output, Probes, say};

/// How often plans are recomputed (M29: at least every second).
pub const PLAN_PERIOD: Duration = Duration::from_secs(1);

/// A service's client zones as the data plane measured them over the last
/// planning interval (M27): new flows per second from each.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ZoneDemand {
    /// Every client zone (`[[client_zones]]`), in id order, with the new
    /// flows per second from its clients.
    pub zones: Vec<(config::compiled::ZoneId, f64)>,
    /// New flows per second from clients in no zone.
    pub unzoned: f64,
    /// New flows per second in all.
    pub new_flows: f64,
}

/// What the indices of `WorkerCounters::zone_flows` stand for: the
/// services and zones by name.
#[derive(Clone, Debug, Default, PartialEq)]
struct ZoneLayout(Vec<String>, Vec<String>);

impl ZoneLayout {
    fn of(c: &Compiled) -> Self {
        ZoneLayout(
            c.services.iter().map(|s| s.name.clone()).collect(),
            c.zones.clone(),
        )
    }
}

/// The zones `[[client_zones]]` name, in id order, once each.
fn client_zones(c: &Compiled) -> Vec<config::compiled::ZoneId> {
    let mut z: Vec<_> = c.client_zones.iter().map(|&(_, z)| z).collect();
    z.sort_unstable();
    z.dedup();
    z
}

/// The management core's health and locality state.
pub struct Balance {
    /// The remote rules polled (sorted, distinct).
    remote_keys: Vec<RemoteKey>,
    /// Per endpoint (index of `compiled.endpoints`): its remote rule, for
    /// endpoints of `remote_rule` groups.
    remote_of: Vec<Option<RemoteKey>>,
    /// The remote verdicts the current plans were made with (status and
    /// plans read these, so both agree with the snapshot).
    remote_seen: HashMap<RemoteKey, State>,
    /// Why each remote rule has its latest verdict (status).
    remote_why: HashMap<RemoteKey, String>,
    /// The remote verdicts given since the last tick.
    remote_new: Option<HashMap<RemoteKey, State>>,
    health: HealthSnapshot,
    /// A health status given since the last tick changed a state or weight.
    health_changed: bool,
    node: NodeSpec,
    specs: Vec<Option<ServiceSpec>>,
    /// Kept across reloads by service name (their smoothing state).
    planners: HashMap<String, Planner>,
    plans: Vec<Option<Plan>>,
    /// Per service, the plans of its VIPs on which some endpoint's verdict
    /// differs from its service-wide one (probes through VIPs, M52; a
    /// dual-stack endpoint's address of one family, M8). Usually empty.
    vip_plans: Vec<Vec<(IpAddr, Plan)>>,
    last_plan: Option<Duration>,
    /// Per backend slot: packets forwarded, at the last plan.
    prev_packets: Vec<u64>,
    /// The data plane's new flows per service and client zone at the last
    /// plan (`WorkerCounters::zone_flows`), and the services and zones
    /// (by name) their indices stood for then.
    prev_zone_flows: (Vec<Vec<u64>>, ZoneLayout),
    /// Per service: its clients' zones as measured at the last plan (M27).
    zone_demand: Vec<Option<ZoneDemand>>,
    /// Per endpoint: its next hop has no MAC (M47). Planned as unhealthy,
    /// so that locality spills its share over instead of dropping it.
    unresolved: Vec<bool>,
    /// Drained zones and regions (M37), by name (kept across reloads):
    /// their groups are planned with a `capacity_scaler` of 0.
    drained: crate::drain::Drained,
    /// Services every group of which is drained: drain is not applied to
    /// them (draining must not black-hole a service; status says so).
    drain_ignored: Vec<String>,
    /// The peers' measured rates and the capacity share (M25 with M34).
    cluster: Cluster,
    /// Which peers' rates the last plans counted.
    counted: Vec<bool>,
    /// What this node's data plane forwarded to each endpoint over the last
    /// planning interval, for the peers; taken by [`Balance::take_measured`].
    measured: Option<Vec<Rate>>,
    /// Each composite source's shape (`composite/service` → fingerprint)
    /// in the running configuration.
    source_shapes: HashMap<String, u64>,
    /// Composite sources the last reload changed (or the start made): UNKNOWN
    /// until each of their checked endpoints has been probed again (M20),
    /// with the probes each had then.
    settling: HashMap<String, Vec<(EndpointId, u64)>>,
}

impl Balance {
    /// Starts health checking for `compiled` at `now` (log lines go to
    /// `out`).
    pub fn start(
        compiled: &Compiled,
        now: Duration,
        probes: &mut dyn Probes,
        out: &mut Vec<Output>,
    ) -> Result<Balance, health::HealthError> {
        let mut b = Balance {
            remote_keys: Vec::new(),
            remote_of: Vec::new(),
            remote_seen: HashMap::new(),
            remote_why: HashMap::new(),
            remote_new: None,
            health: HealthSnapshot::default(),
            health_changed: false,
            unresolved: Vec::new(),
            node: NodeSpec::from_compiled(compiled),
            specs: Vec::new(),
            planners: HashMap::new(),
            plans: Vec::new(),
            vip_plans: Vec::new(),
            last_plan: None,
            prev_packets: Vec::new(),
            prev_zone_flows: (Vec::new(), ZoneLayout::default()),
            zone_demand: Vec::new(),
            drained: crate::drain::Drained::new(),
            drain_ignored: Vec::new(),
            cluster: Cluster::new(compiled),
            counted: Vec::new(),
            measured: None,
            source_shapes: HashMap::new(),
            settling: HashMap::new(),
        };
        b.reload(compiled, now, probes, out)?;
        Ok(b)
    }

    /// Follows a new configuration: probes of endpoints that stay keep
    /// their state, planners of services that stay keep theirs (log lines
    /// go to `out`).
    pub fn reload(
        &mut self,
        compiled: &Compiled,
        now: Duration,
        probes: &mut dyn Probes,
        out: &mut Vec<Output>,
    ) -> Result<(), health::HealthError> {
        let targets = health::targets_from_compiled(compiled)?;
        self.health = probes.set_targets(targets)?;
        self.health_changed = false;
        self.reshape_sources(compiled);
        self.remote_of = compiled
            .endpoints
            .iter()
            .map(|ep| {
                let g = compiled.groups.get(ep.group.index())?;
                let r = g.remote.as_ref()?;
                Some(RemoteKey {
                    url: r.status_url.clone(),
                    rule: r.rule.clone(),
                })
            })
            .collect();
        let mut keys: Vec<RemoteKey> = self.remote_of.iter().flatten().cloned().collect();
        keys.sort_by(|a, b| (&a.url, &a.rule).cmp(&(&b.url, &b.rule)));
        keys.dedup();
        if keys != self.remote_keys {
            // A new poller: every verdict is UNKNOWN until its first poll.
            self.remote_why.clear();
            self.remote_keys.clone_from(&keys);
            probes.poll_remotes(keys);
        }
        self.node = NodeSpec::from_compiled(compiled);
        self.cluster.reconfigure(compiled);
        self.specs_from(compiled);
        let names: Vec<&str> = compiled.services.iter().map(|s| s.name.as_str()).collect();
        self.planners
            .retain(|name, _| names.contains(&name.as_str()));
        self.plans = vec![None; compiled.services.len()];
        self.vip_plans = vec![Vec::new(); compiled.services.len()];
        // Plans for the new configuration right away, so the snapshot built
        // from it already carries them (rates: none measured yet).
        self.last_plan = Some(now);
        self.plan(
            compiled,
            None,
            &WorkerCounters::default(),
            now,
            PLAN_PERIOD,
            out,
        );
        Ok(())
    }

    /// Composite sources that are new or changed (endpoints, their ports or
    /// places, the policy, the check) start over at UNKNOWN (M20); the
    /// others keep their state.
    fn reshape_sources(&mut self, compiled: &Compiled) {
        let mut shapes = HashMap::new();
        let mut settling = HashMap::new();
        for c in &compiled.composites {
            for (s, policy) in &c.sources {
                let Some(svc) = compiled.services.get(s.index()) else {
                    continue;
                };
                let key = format!("{}/{}", c.name, svc.name);
                let shape = source_shape(compiled, *s, policy);
                let changed = self.source_shapes.get(&key) != Some(&shape);
                if changed || self.settling.contains_key(&key) {
                    // Probed endpoints only: the others need no probe.
                    let waits = svc
                        .endpoint_ids()
                        .filter(|id| !self.health.all(*id).is_empty())
                        .map(|id| (id, self.probes_of(id)))
                        .collect();
                    settling.insert(key.clone(), waits);
                }
                shapes.insert(key, shape);
            }
        }
        self.source_shapes = shapes;
        self.settling = settling;
    }

    /// The fewest probes any of endpoint `id`'s checks has made.
    fn probes_of(&self, id: EndpointId) -> u64 {
        self.health
            .all(id)
            .iter()
            .map(|s| s.counters.probes())
            .min()
            .unwrap_or(0)
    }

    /// Whether composite source `key` waits for probes since a reload.
    fn is_settling(&self, key: &str) -> bool {
        self.settling
            .get(key)
            .is_some_and(|waits| waits.iter().any(|&(id, then)| self.probes_of(id) <= then))
    }

    /// The services' static shapes, drained zones and regions applied.
    fn specs_from(&mut self, compiled: &Compiled) {
        self.drain_ignored.clear();
        let (zones, regions) = self.drained.groups_of(compiled);
        let drained = |g: &locality::GroupSpec| {
            zones.get(g.zone.index()) == Some(&true) || regions.get(g.region.index()) == Some(&true)
        };
        self.specs = (0..u32::try_from(compiled.services.len()).unwrap_or(u32::MAX))
            .map(|i| {
                let mut spec = ServiceSpec::from_compiled(compiled, ServiceId(i))?;
                let left = spec
                    .groups
                    .iter()
                    .any(|g| g.capacity_scaler > 0.0 && !drained(g));
                if left {
                    for g in spec.groups.iter_mut().filter(|g| drained(g)) {
                        g.capacity_scaler = 0.0;
                    }
                } else if spec.groups.iter().any(drained) {
                    if let Some(s) = compiled.services.get(i as usize) {
                        self.drain_ignored.push(s.name.clone());
                    }
                }
                Some(spec)
            })
            .collect();
    }

    /// Drains these zones and regions, undrains the others; the plans
    /// follow at the next tick.
    pub fn set_drained(&mut self, compiled: &Compiled, drained: &crate::drain::Drained) {
        if *drained != self.drained {
            self.drained = drained.clone();
            self.specs_from(compiled);
            self.health_changed = true;
        }
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
    /// An endpoint probed through several VIPs or at two addresses is
    /// healthy while any of them passes: its flows there stay, and the
    /// VIPs' own plans keep new flows off where it fails (M52, M8).
    pub fn endpoint_health(&self, id: EndpointId) -> EndpointHealth {
        let all = self.health.all(id);
        let healthy = if all.len() > 1 {
            all.iter().any(|s| s.state != State::Unhealthy)
        } else {
            self.verdict(id) != Some(State::Unhealthy)
        };
        EndpointHealth {
            healthy,
            weight: self.health.get(id).and_then(|s| s.weight),
        }
    }

    /// The plans, indexed like `compiled.services` (for the builder).
    pub fn plans(&self) -> &[Option<Plan>] {
        &self.plans
    }

    /// The VIPs with plans of their own (for the builder): (service index,
    /// VIP, plan).
    pub fn vip_plans(&self) -> Vec<(usize, IpAddr, Plan)> {
        self.vip_plans
            .iter()
            .enumerate()
            .flat_map(|(i, v)| v.iter().map(move |(vip, p)| (i, *vip, p.clone())))
            .collect()
    }

    /// What the planner is told of endpoint `id`'s health, from its
    /// `verdict`.
    fn obs_health(&self, id: EndpointId, checked: bool, verdict: Option<State>) -> Health {
        match verdict {
            _ if self.unresolved.get(id.index()) == Some(&true) => Health::Unhealthy,
            // Unchecked and no verdict given (a scripted one may be:
            // `ScriptedProbes::report_unchecked`).
            _ if !checked && self.health.get(id).is_none() => Health::Healthy,
            Some(State::Healthy) => Health::Healthy,
            Some(State::Unhealthy) => Health::Unhealthy,
            // A remote rule's UNKNOWN (a peer starting, a reload there, no
            // poll answered yet) keeps its group eligible: only UNHEALTHY
            // fails over (M21), or every peer restart would move clients.
            Some(State::Unknown) if matches!(self.remote_of.get(id.index()), Some(Some(_))) => {
                Health::Healthy
            }
            Some(State::Unknown) | None => Health::Unknown,
        }
    }

    /// The verdict on endpoint `id` for traffic to `vip`: its probes through
    /// that VIP (M52), else a dual-stack endpoint's probe of its address of
    /// the VIP's family (M8), else its verdict.
    fn verdict_at(&self, compiled: &Compiled, id: EndpointId, vip: IpAddr) -> Option<State> {
        let all = self.health.all(id);
        let relevant: Vec<State> = if all.iter().any(|s| s.vip.is_some()) {
            all.iter()
                .filter(|s| s.vip == Some(vip))
                .map(|s| s.state)
                .collect()
        } else {
            let want = compiled
                .endpoints
                .get(id.index())
                .filter(|e| e.address6.is_some())
                .map(|e| e.address_for(vip.is_ipv6()));
            all.iter()
                .filter(|s| want.is_none_or(|w| s.addr.ip() == w))
                .map(|s| s.state)
                .collect()
        };
        worst(&relevant).or_else(|| self.verdict(id))
    }

    /// The verdict on endpoint `id` as child rule `child` sees it (M5,
    /// M52): of an endpoint probed through VIPs, its probes through the
    /// child's VIP, else (a composite's source behind other rules) through
    /// the VIPs of the child's availability group; else, and for `None`,
    /// its verdict. A path broken through one group's VIP thus fails only
    /// that group's child rules.
    fn verdict_for(
        &self,
        compiled: &Compiled,
        id: EndpointId,
        child: Option<&ChildRule>,
    ) -> Option<State> {
        let all = self.health.all(id);
        let Some(ch) = child.filter(|_| all.iter().any(|s| s.vip.is_some())) else {
            return self.verdict(id);
        };
        let through = |pick: &dyn Fn(IpAddr) -> bool| -> Vec<State> {
            all.iter()
                .filter(|s| s.vip.is_some_and(pick))
                .map(|s| s.state)
                .collect()
        };
        let own = through(&|v| v == ch.vip);
        let relevant = if own.is_empty() {
            through(&|v| {
                compiled
                    .children
                    .iter()
                    .find(|c| c.vip == v)
                    .is_some_and(|c| c.availability_group == ch.availability_group)
            })
        } else {
            own
        };
        worst(&relevant).or_else(|| self.verdict(id))
    }

    /// The remote rules to poll.
    pub fn remote_keys(&self) -> &[RemoteKey] {
        &self.remote_keys
    }

    /// The generation of the health statuses last given.
    pub fn health_generation(&self) -> u64 {
        self.health.generation
    }

    /// New health statuses (acted on at the next tick).
    pub fn health(&mut self, h: HealthSnapshot) {
        // Only a change of state or weight matters to the snapshot.
        let differs = h.endpoints.len() != self.health.endpoints.len()
            || h.endpoints
                .iter()
                .zip(&self.health.endpoints)
                .any(|(a, b)| {
                    a.state != b.state || a.weight != b.weight || a.endpoint != b.endpoint
                });
        self.health = h;
        self.health_changed |= differs;
        // Sources whose endpoints have all been probed since are settled.
        let settled: Vec<String> = self
            .settling
            .keys()
            .filter(|k| !self.is_settling(k))
            .cloned()
            .collect();
        for k in settled {
            self.settling.remove(&k);
        }
    }

    /// Which endpoints' next hops are unresolved (M47), indexed like
    /// `compiled.endpoints` (acted on at the next tick).
    pub fn set_unresolved(&mut self, unresolved: Vec<bool>) {
        if unresolved != self.unresolved {
            // From none known (the start) to none unresolved is no change:
            // no republish for it.
            let any = |v: &[bool]| v.iter().any(|&u| u);
            self.health_changed |= any(&unresolved) || any(&self.unresolved);
            self.unresolved = unresolved;
        }
    }

    /// The latest verdict on each remote rule polled, and why (acted on at
    /// the next tick).
    pub fn remote(&mut self, state: impl Fn(&RemoteKey) -> (State, String)) {
        let mut seen = HashMap::new();
        for k in self.remote_of.iter().flatten() {
            if !seen.contains_key(k) {
                let (s, why) = state(k);
                seen.insert(k.clone(), s);
                self.remote_why.insert(k.clone(), why);
            }
        }
        self.remote_new = Some(seen);
    }

    /// Periodic work at `now`. Returns true when the snapshot must be
    /// rebuilt: a health verdict changed, or a plan did. `counters` is asked
    /// for only when plans are recomputed; log lines go to `out`.
    pub fn tick(
        &mut self,
        compiled: &Compiled,
        builder: &SnapshotBuilder,
        now: Duration,
        counters: impl FnOnce() -> WorkerCounters,
        out: &mut Vec<Output>,
    ) -> bool {
        let mut rebuild = std::mem::take(&mut self.health_changed);
        // A remote rule's verdict changed: act on it now, like a probe's.
        if let Some(remote) = self.remote_new.take()
            && remote != self.remote_seen
        {
            self.remote_seen = remote;
            rebuild = true;
        }
        let due = self
            .last_plan
            .is_none_or(|t| now.saturating_sub(t) >= PLAN_PERIOD);
        if due || rebuild {
            let elapsed = self
                .last_plan
                .map_or(PLAN_PERIOD, |t| now.saturating_sub(t))
                .max(Duration::from_millis(1));
            self.last_plan = Some(now);
            rebuild |= self.plan(compiled, Some(builder), &counters(), now, elapsed, out);
        }
        rebuild
    }

    /// Replans every service from the rates measured over `elapsed` (none
    /// without a `builder`: at a reload) and the peers' (M25 with M34).
    fn plan(
        &mut self,
        compiled: &Compiled,
        builder: Option<&SnapshotBuilder>,
        counters: &WorkerCounters,
        now: Duration,
        elapsed: Duration,
        out: &mut Vec<Output>,
    ) -> bool {
        let secs = elapsed.as_secs_f64();
        let packets: Vec<u64> = counters.backends.iter().map(|b| b.packets).collect();
        // Counts taken under other services or zones (a reload since) are
        // not comparable: this round measures nothing, the next does.
        let layout = ZoneLayout::of(compiled);
        let prev_zone_flows = std::mem::take(&mut self.prev_zone_flows);
        let zone_base =
            (builder.is_some() && prev_zone_flows.1 == layout).then_some(&prev_zone_flows.0);
        self.zone_demand.resize(compiled.services.len(), None);
        let mut changed = false;
        self.node.capacity_share = self.cluster.budget(now).share;
        let counted = self.cluster.counted(now);
        if counted != self.counted {
            // Another set of nodes' rates: a step in what is counted, not
            // in the load; smoothing it would under- or overshoot for
            // seconds.
            for p in self.planners.values_mut() {
                p.reseed();
            }
            self.counted = counted;
        }
        let mut measured = Vec::new();
        for (i, svc) in compiled.services.iter().enumerate() {
            let zone_demand = self.zone_observation(compiled, i, counters, zone_base, secs);
            let Some(spec) = self.specs.get(i).and_then(Option::as_ref) else {
                continue;
            };
            let checked =
                svc.health_check.is_some() || svc.kind == config::schema::GroupKind::RemoteRule;
            let endpoints =
                compiled.service_endpoints(ServiceId(u32::try_from(i).unwrap_or(u32::MAX)));
            let obs: Vec<EndpointObs> = svc
                .endpoint_ids()
                .zip(endpoints)
                .map(|(id, ep)| {
                    let own = builder
                        .and_then(|b| b.slot_of(&svc.name, &ep.identity))
                        .map_or(0.0, |slot| {
                            let s = slot as usize;
                            let now = packets.get(s).copied().unwrap_or(0);
                            let before = self.prev_packets.get(s).copied().unwrap_or(0);
                            now.saturating_sub(before) as f64 / secs
                        });
                    if builder.is_some() {
                        measured.push(Rate::new(&svc.name, &ep.identity, own));
                    }
                    // The cluster's demand on it: each node plans on the
                    // same total, so all decide alike.
                    let rate = own + self.cluster.peers_rate(now, &svc.name, &ep.identity);
                    let status = self.health.get(id);
                    EndpointObs {
                        health: self.obs_health(id, checked, self.verdict(id)),
                        weight: status.and_then(|s| s.weight),
                        rate,
                        utilization: status.and_then(|s| s.utilization),
                    }
                })
                .collect();
            // Each VIP on which an endpoint's verdict differs gets a plan of
            // its own, from the same smoothed state (M52, M8).
            let mut vip_plans = Vec::new();
            let several = svc.endpoint_ids().any(|id| self.health.all(id).len() > 1);
            for vip in compiled
                .service_vips(ServiceId(u32::try_from(i).unwrap_or(u32::MAX)))
                .into_iter()
                .filter(|_| several)
            {
                let at_vip: Vec<EndpointObs> = obs
                    .iter()
                    .zip(svc.endpoint_ids())
                    .map(|(o, id)| EndpointObs {
                        health: self.obs_health(id, checked, self.verdict_at(compiled, id, vip)),
                        ..*o
                    })
                    .collect();
                if at_vip.iter().zip(&obs).all(|(a, b)| a.health == b.health) {
                    continue;
                }
                let mut planner = self.planners.get(&svc.name).cloned().unwrap_or_default();
                let observation = Observation {
                    endpoints: at_vip,
                    demand: None,
                    zone_demand: zone_demand.clone(),
                };
                if let Ok(plan) = planner.update(&self.node, spec, &observation, elapsed) {
                    vip_plans.push((vip, plan.clone()));
                }
            }
            let old = self.vip_plans.get(i).map_or(&[][..], Vec::as_slice);
            let same = |a: &(IpAddr, Plan), b: &(IpAddr, Plan)| {
                a.0 == b.0 && a.1.same_tables(&b.1) && a.1.thresholds == b.1.thresholds
            };
            if old.len() != vip_plans.len() || old.iter().zip(&vip_plans).any(|(a, b)| !same(a, b))
            {
                changed = true;
            }
            if let Some(slot) = self.vip_plans.get_mut(i) {
                *slot = vip_plans;
            }
            let planner = self.planners.entry(svc.name.clone()).or_default();
            let observation = Observation {
                endpoints: obs,
                demand: None,
                zone_demand,
            };
            match planner.update(&self.node, spec, &observation, elapsed) {
                Ok(plan) => {
                    let old = self.plans.get(i).and_then(Option::as_ref);
                    let differs =
                        old.is_none_or(|o| !o.same_tables(plan) || o.thresholds != plan.thresholds);
                    if differs {
                        if let Some(o) = old {
                            log_change(&svc.name, o, plan, compiled, out);
                        }
                        changed = true;
                    }
                    if let Some(slot) = self.plans.get_mut(i) {
                        *slot = Some(plan.clone());
                    }
                }
                Err(e) => say!(out, Error, "service {}: locality: {e}", svc.name),
            }
        }
        if builder.is_some() {
            self.prev_packets = packets;
            self.prev_zone_flows = (counters.zone_flows.clone(), layout);
            self.measured = Some(measured);
        } else {
            self.prev_zone_flows = prev_zone_flows;
        }
        changed
    }

    /// Service `i`'s zone demand for this round's observation (M27): each
    /// client zone's share of its new flows counted since the last plan
    /// (`base`), also kept for status. No new flows (or no comparable
    /// counts) tells nothing: the smoothed shares of before are given
    /// again, so they hold; none yet, the planner assumes demand follows
    /// capacity.
    fn zone_observation(
        &mut self,
        compiled: &Compiled,
        i: usize,
        counters: &WorkerCounters,
        base: Option<&Vec<Vec<u64>>>,
        secs: f64,
    ) -> Vec<(config::compiled::ZoneId, f64)> {
        let Some(svc) = compiled.services.get(i) else {
            return Vec::new();
        };
        if !compiled.measures_client_zones(svc) {
            if let Some(z) = self.zone_demand.get_mut(i) {
                *z = None;
            }
            return Vec::new();
        }
        let held = || {
            self.planners
                .get(&svc.name)
                .map(|p| p.smoothed().zone_demand.clone())
                .unwrap_or_default()
        };
        let Some(base) = base else { return held() };
        let row = counters.zone_flows.get(i).map_or(&[][..], Vec::as_slice);
        let before = base.get(i).map_or(&[][..], Vec::as_slice);
        let delta = |c: usize| {
            let now = row.get(c).copied().unwrap_or(0);
            now.saturating_sub(before.get(c).copied().unwrap_or(0))
        };
        let total: u64 = (0..row.len()).map(delta).sum();
        let zones = client_zones(compiled);
        let measured = ZoneDemand {
            unzoned: delta(0) as f64 / secs,
            zones: zones
                .iter()
                .map(|&z| (z, delta(z.index() + 1) as f64 / secs))
                .collect(),
            new_flows: total as f64 / secs,
        };
        if let Some(slot) = self.zone_demand.get_mut(i) {
            *slot = Some(measured);
        }
        if total == 0 {
            return held();
        }
        zones
            .iter()
            .map(|&z| (z, delta(z.index() + 1) as f64 / total as f64))
            .collect()
    }

    /// Service `si`'s client zones for `status` (M27): measured new flows,
    /// the smoothed share the plan used, the share pinned in the zone.
    fn zone_report(
        &self,
        compiled: &Compiled,
        si: usize,
        plan: &Plan,
    ) -> Vec<crate::report::ZoneDemand> {
        let (Some(m), Some(svc)) = (self.zone_demand(si), compiled.services.get(si)) else {
            return Vec::new();
        };
        let shares = self.zone_shares(&svc.name);
        let mut out: Vec<_> = m
            .zones
            .iter()
            .map(|&(z, rate)| crate::report::ZoneDemand {
                zone: compiled
                    .zones
                    .get(z.index())
                    .map_or("?", String::as_str)
                    .to_owned(),
                new_flows_per_s: rate,
                demand_share: shares.iter().find(|(y, _)| *y == z).map(|&(_, s)| s),
                in_zone_share: plan.regions.iter().find_map(|r| {
                    r.zone_variants
                        .iter()
                        .find(|v| v.zone == z)
                        .map(|v| v.in_zone_share)
                }),
            })
            .collect();
        out.push(crate::report::ZoneDemand {
            zone: "-".to_owned(),
            new_flows_per_s: m.unzoned,
            demand_share: None,
            in_zone_share: None,
        });
        out
    }

    /// What was measured of service `i`'s client zones at the last plan
    /// (status, metrics); `None`: it does not measure them.
    pub fn zone_demand(&self, i: usize) -> Option<&ZoneDemand> {
        self.zone_demand.get(i).and_then(Option::as_ref)
    }

    /// The smoothed share of service `name`'s demand from each client zone
    /// its last plan was decided with (empty: none measured yet).
    pub fn zone_shares(&self, name: &str) -> &[(config::compiled::ZoneId, f64)] {
        self.planners
            .get(name)
            .map_or(&[][..], |p| p.smoothed().zone_demand.as_slice())
    }

    /// The rates measured at the last planning, once (for the peers).
    pub fn take_measured(&mut self) -> Option<Vec<Rate>> {
        self.measured.take()
    }

    /// Input: a peer's measured rates, received at `now` (acted on at the
    /// next planning). False: `from` is no configured peer.
    pub fn peer_rates(
        &mut self,
        from: std::net::SocketAddr,
        now: Duration,
        rates: &[Rate],
    ) -> bool {
        self.cluster.heard(from, now, rates)
    }

    /// Input: peer `from` said it leaves the cluster.
    pub fn peer_left(&mut self, from: std::net::SocketAddr) {
        self.cluster.left(from);
    }

    /// The cluster as counted at `now` (status, metrics).
    pub fn cluster(&self, now: Duration) -> crate::report::Cluster {
        self.cluster.status(now)
    }

    /// The exported state of every forwarding rule (M21), in rule order:
    /// the best of its served child rules' ([`Balance::child_states`]:
    /// HEALTHY while one is, else UNKNOWN while one is), so that a rule
    /// still serving through one availability group's VIP is not failed
    /// over by a consumer that names the rule (consumers that send to one
    /// VIP name its child rule); a rule this node serves no VIP of exports
    /// what its child rules would see over all probes.
    pub fn rule_states(&self, compiled: &Compiled) -> Vec<(String, Aggregate)> {
        let children = self.child_states(compiled);
        compiled
            .rules
            .iter()
            .map(|r| {
                let served: Vec<Aggregate> = r
                    .children
                    .iter()
                    .filter(|c| compiled.children.get(c.index()).is_some_and(|c| c.served))
                    .filter_map(|c| children.get(c.index()).copied())
                    .collect();
                let state = best(&served).unwrap_or_else(|| self.exported(compiled, r, None));
                (r.name.clone(), state)
            })
            .collect()
    }

    /// The exported state of every child rule (M5, M21), indexed like
    /// `compiled.children`: its rule's composite health check's, else its
    /// rule's service's aggregated health, each from the endpoints'
    /// verdicts through the child's VIP ([`Balance::verdict_for`]). This
    /// is what decides the child's VIP's announcement (M35). A composite
    /// aggregates each source in this node's own region only (M20): a
    /// healthy far region must not hide a dead local one, which is what the
    /// composite's consumers (the rule's export, announcements) stand for.
    pub fn child_states(&self, compiled: &Compiled) -> Vec<Aggregate> {
        compiled
            .children
            .iter()
            .map(|ch| {
                compiled
                    .rules
                    .get(ch.rule.index())
                    .map_or(Aggregate::Unknown, |r| self.exported(compiled, r, Some(ch)))
            })
            .collect()
    }

    /// The served child rules' names and exported states, in child order
    /// (`/status`, metrics).
    pub fn served_child_states(&self, compiled: &Compiled) -> Vec<(String, Aggregate)> {
        compiled
            .children
            .iter()
            .zip(self.child_states(compiled))
            .filter(|(c, _)| c.served)
            .map(|(c, a)| (c.name.clone(), a))
            .collect()
    }

    /// Rule `r`'s state as child rule `child` sees it (`None`: over all
    /// probes): its composite's, else its service's aggregated health.
    fn exported(&self, compiled: &Compiled, r: &Rule, child: Option<&ChildRule>) -> Aggregate {
        match r.composite.and_then(|c| compiled.composites.get(c.index())) {
            Some(c) => health::composite(
                &c.sources
                    .iter()
                    .map(|(s, policy)| self.source_state(compiled, &c.name, *s, *policy, child))
                    .collect::<Vec<_>>(),
            ),
            None => compiled
                .services
                .get(r.service.index())
                .map_or(Aggregate::Unknown, |svc| {
                    self.service_health(compiled, r.service, svc.aggregation, None, child)
                }),
        }
    }

    /// Every composite's sources (`composite/service`, in this node's
    /// region) and the composite itself, every rule's exported state (and
    /// its child rules' where this node serves both), and every followed
    /// remote rule (`rule@url`), for their transitions.
    pub fn derived_states(
        &self,
        compiled: &Compiled,
    ) -> Vec<(crate::transitions::Kind, String, Aggregate)> {
        use crate::transitions::Kind;
        let mut out = Vec::new();
        for c in &compiled.composites {
            let mut sources = Vec::new();
            for (s, policy) in &c.sources {
                let state = self.source_state(compiled, &c.name, *s, *policy, None);
                let svc = compiled
                    .services
                    .get(s.index())
                    .map_or("?", |v| v.name.as_str());
                out.push((Kind::Source, format!("{}/{svc}", c.name), state));
                sources.push(state);
            }
            out.push((Kind::Composite, c.name.clone(), health::composite(&sources)));
        }
        // A child rule's own transitions where its rule has two served
        // (elsewhere the child's state is its rule's, logged once already).
        let two_served = |c: &ChildRule| {
            compiled.rules.get(c.rule.index()).is_some_and(|r| {
                r.children
                    .iter()
                    .filter(|k| compiled.children.get(k.index()).is_some_and(|k| k.served))
                    .count()
                    > 1
            })
        };
        let children: Vec<(String, Aggregate)> = compiled
            .children
            .iter()
            .zip(self.child_states(compiled))
            .filter(|(c, _)| c.served && two_served(c))
            .map(|(c, a)| (c.name.clone(), a))
            .collect();
        out.extend(
            self.rule_states(compiled)
                .into_iter()
                .chain(children)
                .map(|(name, a)| (Kind::Rule, name, a)),
        );
        for k in &self.remote_keys {
            let state = match self.remote_seen.get(k) {
                Some(State::Healthy) => Aggregate::Healthy,
                Some(State::Unhealthy) => Aggregate::Unhealthy,
                Some(State::Unknown) | None => Aggregate::Unknown,
            };
            out.push((Kind::Remote, format!("{}@{}", k.rule, k.url), state));
        }
        out
    }

    /// Composite `composite`'s source `s` (M20): service `s`'s health in
    /// this node's region as `child` sees it, UNKNOWN while it settles
    /// after a reload.
    fn source_state(
        &self,
        compiled: &Compiled,
        composite: &str,
        s: ServiceId,
        policy: config::schema::Aggregation,
        child: Option<&ChildRule>,
    ) -> Aggregate {
        let name = compiled
            .services
            .get(s.index())
            .map_or("?", |v| v.name.as_str());
        if self.is_settling(&format!("{composite}/{name}")) {
            return Aggregate::Unknown;
        }
        self.service_health(compiled, s, policy, Some(compiled.node.region), child)
    }

    /// Service `s`'s aggregated health under `policy`: over its configured
    /// endpoints in `region` (or all regions) that are not drained (their
    /// zone or region, M37: they take no new connections), from their
    /// verdicts as `child` sees them ([`Balance::verdict_for`]). A region
    /// where it has none is UNHEALTHY there (nothing serves it).
    fn service_health(
        &self,
        compiled: &Compiled,
        s: ServiceId,
        policy: config::schema::Aggregation,
        region: Option<config::compiled::RegionId>,
        child: Option<&ChildRule>,
    ) -> Aggregate {
        let Some(svc) = compiled.services.get(s.index()) else {
            return Aggregate::Unknown;
        };
        let (zones, regions) = self.drained.groups_of(compiled);
        // A service drained whole is not drained at all (see `specs_from`).
        let drain_applies = !self.drain_ignored.contains(&svc.name);
        let in_region = |id: &config::compiled::EndpointId| {
            compiled
                .endpoints
                .get(id.index())
                .and_then(|e| compiled.groups.get(e.group.index()))
                .is_some_and(|g| {
                    region.is_none_or(|r| g.region == r)
                        && !(drain_applies
                            && (zones.get(g.zone.index()) == Some(&true)
                                || regions.get(g.region.index()) == Some(&true)))
                })
        };
        let states: Vec<State> = svc
            .endpoint_ids()
            .filter(in_region)
            .map(|id| match self.verdict_for(compiled, id, child) {
                Some(st) => st,
                None if svc.health_check.is_none() => State::Healthy,
                None => State::Unknown,
            })
            .collect();
        health::aggregate(&states, policy)
    }

    /// Its part of `status`: per service and region, health, shares,
    /// capacity (merged into `services` by name, a service the live
    /// snapshot lacks added); per rule and served child rule, its exported
    /// state; the remote
    /// rules and the probed endpoints.
    pub fn status(&self, compiled: &Compiled, st: &mut crate::report::Status) {
        use crate::report;
        for (si, (svc, plan)) in compiled.services.iter().zip(&self.plans).enumerate() {
            let Some(plan) = plan else { continue };
            let regions = plan
                .status
                .iter()
                .map(|r| report::Region {
                    name: compiled
                        .regions
                        .get(r.region.index())
                        .map_or("?", String::as_str)
                        .to_owned(),
                    health: format!("{:?}", r.health),
                    endpoints: r.endpoints,
                    healthy: r.healthy,
                    unknown: r.unknown,
                    eligible: r.eligible,
                    load_pps: r.load,
                    capacity_pps: r.capacity.is_finite().then_some(r.capacity),
                    utilization: report::Utilization::of(svc.balancing.mode, r.utilization),
                    new_flows_fraction: r.fraction,
                })
                .collect();
            let i = match st.services.iter().position(|s| s.name == svc.name) {
                Some(i) => i,
                None => {
                    st.services.push(report::Service {
                        name: svc.name.clone(),
                        delivery: svc.delivery.to_string(),
                        eligible_backends: None,
                        last_resort_backends: 0,
                        health: None,
                        eligibility: None,
                        degraded: false,
                        overloaded: false,
                        capacity: None,
                        regions: Vec::new(),
                        zones: Vec::new(),
                    });
                    st.services.len() - 1
                }
            };
            if let Some(s) = st.services.get_mut(i) {
                s.health = Some(format!("{:?}", plan.health));
                s.eligibility = Some(format!("{:?}", plan.eligibility));
                s.degraded = plan.degraded;
                s.overloaded = plan.overloaded;
                s.capacity = compiled
                    .capacity_limits(ServiceId(u32::try_from(si).unwrap_or(u32::MAX)))
                    .map(|l| l.to_string());
                s.regions = regions;
                s.zones = self.zone_report(compiled, si, plan);
            }
        }
        st.drain_ignored = self.drain_ignored.clone();
        let children = self.child_states(compiled);
        st.rules = self
            .rule_states(compiled)
            .into_iter()
            .zip(&compiled.rules)
            .map(|((name, state), r)| report::Rule {
                name,
                state: state.to_string(),
                service: compiled
                    .services
                    .get(r.service.index())
                    .map_or("?", |s| s.name.as_str())
                    .to_owned(),
                vips: r
                    .children
                    .iter()
                    .filter_map(|c| {
                        Some((compiled.children.get(c.index())?, children.get(c.index())?))
                    })
                    .map(|(c, state)| report::RuleVip {
                        vip: c.vip,
                        prefix: Some(c.vip_spec())
                            .filter(config::values::Vip::is_range)
                            .map(|v| v.to_string()),
                        allocated: c.allocated,
                        child_rule: c.name.clone(),
                        availability_group: c.availability_group,
                        served: c.served,
                        state: c.served.then(|| state.to_string()),
                        bgp: None,
                    })
                    .collect(),
                source_ranges: r
                    .source_ranges
                    .as_ref()
                    .map(|v| v.iter().map(ToString::to_string).collect()),
            })
            .collect();
        for (ep, key) in compiled.endpoints.iter().zip(&self.remote_of) {
            if let Some(k) = key {
                let state = self.remote_seen.get(k).copied().unwrap_or(State::Unknown);
                let why = self.remote_why.get(k).filter(|w| !w.is_empty());
                st.remote_rules.push(report::RemoteRule {
                    rule: k.rule.clone(),
                    url: k.url.clone(),
                    vip: ep.address,
                    state: state.to_string(),
                    why: why.cloned(),
                });
            }
        }
        st.health = self
            .health
            .endpoints
            .iter()
            .map(|s| report::Health {
                service: s.service.to_string(),
                address: s.addr.to_string(),
                vip: s.vip,
                state: s.state.to_string(),
                reason: (!s.last_reason.is_empty()).then(|| s.last_reason.clone()),
                weight: s.weight,
                probes_ok: s.counters.probes_ok,
                probes_failed: s.counters.probes_failed,
                transitions: s.counters.transitions(),
            })
            .collect();
    }

    /// Every probed endpoint's latest status (metrics).
    pub fn probed(&self) -> &[health::EndpointStatus] {
        &self.health.endpoints
    }
}

/// The worst of `states` (UNHEALTHY over UNKNOWN over HEALTHY); `None`
/// for none.
fn worst(states: &[State]) -> Option<State> {
    [State::Unhealthy, State::Unknown, State::Healthy]
        .into_iter()
        .find(|s| states.contains(s))
}

/// The best of `states` (HEALTHY over UNKNOWN over UNHEALTHY); `None` for
/// none.
fn best(states: &[Aggregate]) -> Option<Aggregate> {
    [Aggregate::Healthy, Aggregate::Unknown, Aggregate::Unhealthy]
        .into_iter()
        .find(|s| states.contains(s))
}

/// One log line per change of where new connections go.
fn log_change(service: &str, old: &Plan, new: &Plan, compiled: &Compiled, out: &mut Vec<Output>) {
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
        say!(
            out,
            Info,
            "locality: service {service}: new connections [{a}] -> [{b}]"
        );
    }
}

/// What makes a composite source the same across a reload: its service's
/// policy and check, and its endpoints (identity, probed port, group, zone
/// and region by name), hashed.
fn source_shape(compiled: &Compiled, s: ServiceId, policy: &config::schema::Aggregation) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    let Some(svc) = compiled.services.get(s.index()) else {
        return 0;
    };
    svc.name.hash(&mut h);
    format!("{policy:?}").hash(&mut h);
    let check = svc
        .health_check
        .and_then(|c| compiled.health_checks.get(c.index()));
    format!("{check:?}").hash(&mut h);
    for ep in compiled.service_endpoints(s) {
        ep.identity.hash(&mut h);
        ep.address6.hash(&mut h);
        ep.health_port.hash(&mut h);
        if let Some(g) = compiled.groups.get(ep.group.index()) {
            g.name.hash(&mut h);
            compiled.zones.get(g.zone.index()).hash(&mut h);
            compiled.regions.get(g.region.index()).hash(&mut h);
        }
    }
    h.finish()
}
