//! The snapshot builder ([`SnapshotBuilder`]), owned by the management
//! core: makes a [`Snapshot`] from a compiled configuration, endpoint health
//! and locality plans, keeping backend slots stable and Maglev tables
//! ([`TableKey`]) between builds.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use config::compiled::{Compiled, Delivery, EndpointId as ConfigEndpointId};
use config::schema::{NoBackendFallback, SessionAffinity};
use flowtable::Tick;
use maglev::MaglevTable;
use wire::ethernet::MacAddr;
use wire::flow::Affinity;

use super::sizing::{TickLimits, max_ip_len, ticks};
use super::tables::{Selection, TableKey, select, table_key};
use super::templates::{self, template, template_to};
use super::{
    Backend, BackendState, EndpointHealth, GatewayHop, Local, Path, ProbeSteer, RegionTables,
    RemoteTunnel, Rules, ServicePlan, SlotTable, Snapshot, tick_reached,
};
use crate::cookie::CookieKey;
use crate::nexthop::{Hop, endpoint_hop};

/// Why a snapshot could not be built.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// building a service's Maglev table failed
    #[error("service {service:?}: cannot build its Maglev table: {source}")]
    Maglev {
        /// Service name.
        service: String,
        /// The builder's complaint.
        source: maglev::BuildError,
    },
}

#[derive(Debug)]
struct SlotRecord {
    backend: Backend,
    drain_ticks: Tick,
    seen: bool,
    /// Draining: whether it was serving (healthy, or its service failing
    /// open) when it left the configuration — a last resort for new
    /// connections of a service with `no_backend_fallback = "draining"`.
    left_serving: bool,
    /// (service name, endpoint identity) the slot belongs to.
    key: (String, String),
}

/// Builds snapshots, remembering backend slots and Maglev tables between
/// builds.
#[derive(Debug, Default)]
pub struct SnapshotBuilder {
    generation: u32,
    cookie_key: CookieKey,
    slots: Vec<SlotRecord>,
    by_identity: HashMap<(String, String), u32>,
    /// Slots of removed backends, for new endpoints to take (lowest last).
    free: Vec<u32>,
    /// The Maglev tables of the last build (and any built ahead of the
    /// next one), by what they were built from.
    tables: HashMap<TableKey, Arc<MaglevTable>>,
    /// The plans of VIPs that differ from their service's (M52, M8):
    /// (service index, VIP, plan), for the next builds.
    vip_plans: Vec<(usize, IpAddr, locality::Plan)>,
    /// VIPs of VRRP groups this node is not master of, sorted.
    standby: Vec<IpAddr>,
}

/// The ports `[[vrrp]]` groups run on, by index in `[[ports]]`.
fn vrrp_ports(compiled: &Compiled) -> Vec<usize> {
    let ports = &compiled.settings.ports;
    let mut v: Vec<usize> = compiled
        .settings
        .vrrp
        .iter()
        .filter_map(|g| ports.iter().position(|p| p.name == g.port))
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// Maps configuration affinity onto the flow-key rule of `wire`.
pub fn affinity(a: SessionAffinity) -> Affinity {
    match a {
        SessionAffinity::None => Affinity::None,
        SessionAffinity::ClientIpProto => Affinity::ClientIpProto,
        SessionAffinity::ClientIp => Affinity::ClientIp,
        SessionAffinity::ClientIpPortProto => Affinity::ClientIpPortProto,
    }
}

impl SnapshotBuilder {
    /// A builder with no slots yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The plans of VIPs whose endpoints' verdicts differ from their
    /// service's (M52, M8), for the next builds: (service index, VIP,
    /// plan). Their child rules' new flows follow them.
    pub fn set_vip_plans(&mut self, plans: Vec<(usize, IpAddr, locality::Plan)>) {
        self.vip_plans = plans;
    }

    /// The VIPs of VRRP groups this node is not master of, for the next
    /// builds: left out of the rules (no ARP/NDP answered, nothing
    /// forwarded). Returns whether they changed.
    pub fn set_standby(&mut self, mut vips: Vec<IpAddr>) -> bool {
        vips.sort_unstable();
        vips.dedup();
        let changed = vips != self.standby;
        self.standby = vips;
        changed
    }

    /// A service's plan for the pipeline from its selection: its Maglev
    /// tables (kept from before, or built) with their backend slots;
    /// `measures_zones` as [`Compiled::measures_client_zones`] says.
    fn service_plan(
        &self,
        (svc, measures_zones): (&config::compiled::Service, bool),
        sel: Selection,
        slot_of: &[u32],
        plan: Option<&locality::Plan>,
        used: &mut HashMap<TableKey, Arc<MaglevTable>>,
    ) -> Result<ServicePlan, SnapshotError> {
        let mut regions = Vec::with_capacity(sel.regions.len());
        for (sets, zones) in sel.regions {
            let mut tables = Vec::with_capacity(sets.len());
            for set in sets {
                tables.push(SlotTable {
                    table: self.table(svc, table_key(svc, &set), used)?,
                    slots: set
                        .iter()
                        .map(|(i, _)| slot_of.get(*i).copied().unwrap_or(u32::MAX))
                        .collect(),
                });
            }
            regions.push(RegionTables { tables, zones });
        }
        let zonal = regions.iter().any(|r| !r.zones.is_empty());
        Ok(ServicePlan {
            delivery: svc.delivery,
            affinity: affinity(svc.session_affinity),
            persistence: svc.connection_persistence,
            no_backend_action: svc.no_backend_action,
            regions,
            thresholds: sel.thresholds,
            zonal,
            measures_zones,
            flow_tag: svc.flow_tag,
            fail_open: sel.fail_open,
            last_resort: false,
            locality: plan.map(|p| Arc::new(p.clone())),
        })
    }

    /// The Maglev table of `key` (of service `svc`): one this build already
    /// uses, one kept from the last build or built ahead, or built here;
    /// recorded in `used`.
    fn table(
        &self,
        svc: &config::compiled::Service,
        key: TableKey,
        used: &mut HashMap<TableKey, Arc<MaglevTable>>,
    ) -> Result<Arc<MaglevTable>, SnapshotError> {
        let table = match used.get(&key).or_else(|| self.tables.get(&key)) {
            Some(t) => t.clone(),
            None => Arc::new(key.build().map_err(|source| SnapshotError::Maglev {
                service: svc.name.clone(),
                source,
            })?),
        };
        used.insert(key, table.clone());
        Ok(table)
    }

    /// A builder whose snapshots carry `cookie_key` (a secret chosen once
    /// per process, [`CookieKey::random`]; [`SnapshotBuilder::new`] uses the
    /// all-zero key, for tests and replays).
    pub fn with_cookie_key(cookie_key: CookieKey) -> Self {
        Self {
            cookie_key,
            ..Self::default()
        }
    }

    /// Builds the next snapshot. `health` answers for every endpoint of the
    /// configuration; `now` is the current tick and `ticks_per_second` the
    /// tick rate (for draining deadlines).
    pub fn build(
        &mut self,
        compiled: Arc<Compiled>,
        local: Local,
        health: impl Fn(ConfigEndpointId) -> EndpointHealth,
        now: Tick,
        ticks_per_second: u32,
    ) -> Result<Snapshot, SnapshotError> {
        self.build_with_plans(compiled, local, health, &[], now, ticks_per_second)
    }

    /// The Maglev tables that [`SnapshotBuilder::build_with_plans`] with
    /// these inputs would have to build (each once): none when only
    /// fractions, states or other services changed. The management core
    /// builds them off its loop ([`TableKey::build`]) and hands them over
    /// with [`SnapshotBuilder::add_tables`] when they are large.
    pub fn missing_tables(
        &self,
        compiled: &Compiled,
        local: &Local,
        health: impl Fn(ConfigEndpointId) -> EndpointHealth,
        plans: &[Option<locality::Plan>],
    ) -> Vec<TableKey> {
        let mut out: Vec<TableKey> = Vec::new();
        for (i, svc) in compiled.services.iter().enumerate() {
            let sel = select(
                compiled,
                svc,
                &health,
                plans.get(i).and_then(Option::as_ref),
                local,
            );
            for (sets, _) in &sel.regions {
                for set in sets {
                    let key = table_key(svc, set);
                    if !self.tables.contains_key(&key) && !out.contains(&key) {
                        out.push(key);
                    }
                }
            }
        }
        out
    }

    /// Tables built ahead of the next build (see
    /// [`SnapshotBuilder::missing_tables`]).
    pub fn add_tables(&mut self, tables: impl IntoIterator<Item = (TableKey, Arc<MaglevTable>)>) {
        self.tables.extend(tables);
    }

    /// Maglev tables held (those of the last build, and any added since).
    pub fn tables_held(&self) -> usize {
        self.tables.len()
    }

    /// Like [`SnapshotBuilder::build`], with the management core's locality
    /// decision for each service (indexed like `compiled.services`; a
    /// service without one gets a single table over its eligible
    /// endpoints, fail-open per M23). Only tables whose endpoints or
    /// weights changed since the last build are built.
    ///
    /// In stages: the services' endpoints onto backend slots and their
    /// plans (`place_services`), the plans of VIPs of their own
    /// (`place_vip_plans`), the backends that left the configuration
    /// (`drain_departed`), then each backend's outer headers
    /// (`attach_templates`).
    pub fn build_with_plans(
        &mut self,
        compiled: Arc<Compiled>,
        local: Local,
        health: impl Fn(ConfigEndpointId) -> EndpointHealth,
        plans: &[Option<locality::Plan>],
        now: Tick,
        ticks_per_second: u32,
    ) -> Result<Snapshot, SnapshotError> {
        for rec in &mut self.slots {
            rec.seen = false;
        }
        let inputs = Inputs {
            compiled: &compiled,
            local: &local,
            health: &health,
            plans,
            gateway_svc: (0..compiled.services.len())
                .map(|i| compiled.gateways.iter().any(|g| g.service.index() == i))
                .collect(),
            generation: self.generation.wrapping_add(1),
            now,
            ticks_per_second,
        };
        let mut used: HashMap<TableKey, Arc<MaglevTable>> = HashMap::new();
        let Placed {
            mut services,
            slots_of,
            endpoint_slot,
            mut appliances,
        } = self.place_services(&inputs, &mut used)?;
        let mut plan_services: Vec<usize> = (0..services.len()).collect();
        let child_plans = self.place_vip_plans(
            &inputs,
            &slots_of,
            &mut services,
            &mut plan_services,
            &mut used,
        )?;
        self.drain_departed(&inputs, &mut appliances);
        self.fall_back_to_draining(&compiled, &mut services, &plan_services, &mut used)?;
        // Keep the tables this snapshot uses, drop the rest.
        self.tables = used;
        self.generation = inputs.generation;
        let mut backends: Vec<Backend> = self.slots.iter().map(|r| r.backend.clone()).collect();
        for be in &mut backends {
            let gateway = inputs.is_gateway_svc(be.service as usize);
            attach_templates(be, &services, gateway, &local);
        }
        // An address listed twice (two gateway services) answers for its
        // first slot.
        appliances.sort_by_key(|&(a, _)| a);
        appliances.dedup_by_key(|&mut (a, _)| a);
        let probe_steering = probe_steering(&compiled, &endpoint_slot);
        let budgets = TickLimits::of(&compiled.settings.dataplane, ticks_per_second);
        let gateways = gateway_hops(&compiled, &local);
        Ok(Snapshot {
            generation: self.generation,
            new_flow_budget: budgets.new_flow,
            too_big_budget: budgets.too_big,
            echo_budget: budgets.echo,
            cookie_key: self.cookie_key,
            appliance_port: config::schema::egress_port(&compiled.settings.ports).map(|(i, _)| i),
            gateway_mismatch_budget: budgets.gateway_mismatch,
            rules: Rules::serving(&compiled, &self.standby),
            vrrp_ports: vrrp_ports(&compiled),
            standby: self.standby.clone(),
            tunnel_ingress: compiled.tunnel_ingress.clone(),
            remote_gateways: gateways.iter().any(|g| g.remote.is_some()),
            gateways,
            appliances,
            probe_steering,
            child_plans,
            compiled,
            services,
            backends,
            local,
        })
    }

    /// Every service's endpoints onto backend slots (each keeps its slot,
    /// or takes a removed backend's, or a new one), and the service's plan
    /// over them.
    fn place_services<H: Fn(ConfigEndpointId) -> EndpointHealth>(
        &mut self,
        inputs: &Inputs<'_, H>,
        used: &mut HashMap<TableKey, Arc<MaglevTable>>,
    ) -> Result<Placed, SnapshotError> {
        let compiled = inputs.compiled;
        let mut placed = Placed {
            services: Vec::with_capacity(compiled.services.len()),
            slots_of: Vec::with_capacity(compiled.services.len()),
            endpoint_slot: vec![u32::MAX; compiled.endpoints.len()],
            appliances: Vec::new(),
        };
        for (svc_index, svc) in compiled.services.iter().enumerate() {
            let svc_id = u32::try_from(svc_index).unwrap_or(u32::MAX);
            let drain_ticks = ticks(svc.connection_draining_timeout, inputs.ticks_per_second);
            let plan = inputs.plans.get(svc_index).and_then(Option::as_ref);
            let sel = select(compiled, svc, inputs.health, plan, inputs.local);
            // Backend slot of every endpoint, by its index within the service.
            let mut slot_of: Vec<u32> = Vec::new();
            for ep_id in svc.endpoint_ids() {
                let Some(ep) = compiled.endpoints.get(ep_id.0 as usize) else {
                    continue;
                };
                let h = (inputs.health)(ep_id);
                // Failing open, every endpoint serves as if healthy: its
                // flows stay on it instead of moving at every packet.
                let backend =
                    configured_backend(inputs, ep, svc_id, h.healthy || sel.fail_open, drain_ticks);
                let slot = self.slot_for(&svc.name, &ep.identity, backend, drain_ticks);
                if inputs.is_gateway_svc(svc_index) {
                    placed.appliances.push((ep.address, slot));
                }
                slot_of.push(slot);
                if let Some(s) = placed.endpoint_slot.get_mut(ep_id.0 as usize) {
                    *s = slot;
                }
            }
            placed.services.push(self.service_plan(
                (svc, compiled.measures_client_zones(svc)),
                sel,
                &slot_of,
                plan,
                used,
            )?);
            placed.slots_of.push(slot_of);
        }
        Ok(placed)
    }

    /// VIPs whose endpoints' verdicts differ from their service's (M52,
    /// M8): plans of their own, appended to `services`, which their child
    /// rules take. Returns the plan of each child rule (its index in
    /// `services`).
    fn place_vip_plans<H: Fn(ConfigEndpointId) -> EndpointHealth>(
        &mut self,
        inputs: &Inputs<'_, H>,
        slots_of: &[Vec<u32>],
        services: &mut Vec<ServicePlan>,
        plan_services: &mut Vec<usize>,
        used: &mut HashMap<TableKey, Arc<MaglevTable>>,
    ) -> Result<Vec<u32>, SnapshotError> {
        let compiled = inputs.compiled;
        let mut child_plans: Vec<u32> = compiled
            .children
            .iter()
            .map(|c| {
                compiled
                    .rules
                    .get(c.rule.0 as usize)
                    .map_or(u32::MAX, |r| r.service.0)
            })
            .collect();
        for (svc_index, vip, plan) in std::mem::take(&mut self.vip_plans) {
            let (Some(svc), Some(slot_of)) =
                (compiled.services.get(svc_index), slots_of.get(svc_index))
            else {
                continue;
            };
            let sel = select(compiled, svc, inputs.health, Some(&plan), inputs.local);
            let sp = self.service_plan(
                (svc, compiled.measures_client_zones(svc)),
                sel,
                slot_of,
                Some(&plan),
                used,
            )?;
            let index = u32::try_from(services.len()).unwrap_or(u32::MAX);
            services.push(sp);
            plan_services.push(svc_index);
            for (c, child) in compiled.children.iter().enumerate() {
                let of_svc = compiled
                    .rules
                    .get(child.rule.0 as usize)
                    .is_some_and(|r| r.service.index() == svc_index);
                if of_svc
                    && child.vip == vip
                    && let Some(p) = child_plans.get_mut(c)
                {
                    *p = index;
                }
            }
            self.vip_plans.push((svc_index, vip, plan));
        }
        Ok(child_plans)
    }

    /// Backends that left the configuration drain, then go; a removed
    /// backend's slot is free for a new endpoint. A draining appliance
    /// stays in `appliances`.
    fn drain_departed<H>(&mut self, inputs: &Inputs<'_, H>, appliances: &mut Vec<(IpAddr, u32)>) {
        let now = inputs.now;
        for (i, rec) in self.slots.iter_mut().enumerate().filter(|(_, r)| !r.seen) {
            rec.backend.state = match rec.backend.state {
                s @ (BackendState::Active | BackendState::Unhealthy { .. }) => {
                    rec.left_serving = s == BackendState::Active;
                    BackendState::Draining {
                        until: now.wrapping_add(rec.drain_ticks),
                    }
                }
                BackendState::Draining { until } if tick_reached(now, until) => {
                    self.free.push(u32::try_from(i).unwrap_or(u32::MAX));
                    BackendState::Removed
                }
                s => s,
            };
            // An appliance that left its gateway service still takes back
            // what its draining flows send it (M32): its returns are
            // checked against the service it belongs to, which it is
            // pointed at again should the file have moved it.
            if let BackendState::Draining { .. } = rec.backend.state
                && let Some(svc) = inputs
                    .compiled
                    .services
                    .iter()
                    .position(|s| s.name == rec.key.0)
                && inputs.is_gateway_svc(svc)
            {
                rec.backend.service = u32::try_from(svc).unwrap_or(u32::MAX);
                appliances.push((rec.backend.addr, u32::try_from(i).unwrap_or(u32::MAX)));
            }
        }
        self.free.sort_unstable_by(|a, b| b.cmp(a));
        self.free.dedup();
    }

    /// Plans without an eligible backend, of services with
    /// `no_backend_fallback = "draining"` (M14): their new connections go to
    /// the service's endpoints that left the configuration while serving
    /// and are still draining, through one Maglev table over them (by
    /// identity, so every node of a cluster picks alike). Kubernetes'
    /// terminating endpoints as the last resort. `plan_services` gives each
    /// plan's service index.
    fn fall_back_to_draining(
        &self,
        compiled: &Compiled,
        services: &mut [ServicePlan],
        plan_services: &[usize],
        used: &mut HashMap<TableKey, Arc<MaglevTable>>,
    ) -> Result<(), SnapshotError> {
        for (plan, &svc_index) in services.iter_mut().zip(plan_services) {
            let Some(svc) = compiled.services.get(svc_index) else {
                continue;
            };
            let eligible = plan.regions.iter().any(|r| !r.tables.is_empty());
            if eligible || svc.no_backend_fallback != NoBackendFallback::Draining {
                continue;
            }
            let mut draining: Vec<(&str, u32)> = self
                .slots
                .iter()
                .enumerate()
                .filter(|(_, r)| {
                    r.key.0 == svc.name
                        && r.left_serving
                        && matches!(r.backend.state, BackendState::Draining { .. })
                })
                .map(|(i, r)| (r.key.1.as_str(), u32::try_from(i).unwrap_or(u32::MAX)))
                .collect();
            if draining.is_empty() {
                continue;
            }
            draining.sort_unstable();
            let set: Vec<(usize, maglev::Endpoint)> = draining
                .iter()
                .enumerate()
                .map(|(i, (identity, _))| {
                    let id = maglev::EndpointId::from_bytes(identity.as_bytes());
                    (i, maglev::Endpoint { id, weight: 1 })
                })
                .collect();
            let table = self.table(svc, table_key(svc, &set), used)?;
            plan.regions = vec![RegionTables {
                tables: vec![SlotTable {
                    table,
                    slots: draining.iter().map(|&(_, slot)| slot).collect(),
                }],
                zones: Vec::new(),
            }];
            plan.thresholds = vec![u32::MAX];
            plan.zonal = false;
            plan.last_resort = true;
            // Its regions are no longer the locality plan's.
            plan.locality = None;
        }
        Ok(())
    }

    /// Every endpoint with a backend slot: (service, identity, slot).
    pub fn identities(&self) -> impl Iterator<Item = (&str, &str, u32)> {
        self.by_identity
            .iter()
            .map(|((s, i), slot)| (s.as_str(), i.as_str(), *slot))
    }

    /// The backend slot of endpoint `identity` of `service`, if it has one.
    pub fn slot_of(&self, service: &str, identity: &str) -> Option<u32> {
        self.by_identity
            .get(&(service.to_owned(), identity.to_owned()))
            .copied()
    }

    fn slot_for(
        &mut self,
        service: &str,
        identity: &str,
        backend: Backend,
        drain_ticks: Tick,
    ) -> u32 {
        let key = (service.to_owned(), identity.to_owned());
        if let Some(&slot) = self.by_identity.get(&key) {
            if let Some(rec) = self.slots.get_mut(slot as usize) {
                let mut backend = backend;
                // The slot stays this endpoint's since it was assigned —
                // but `assigned` never falls 2^30 builds behind, so that
                // the wrapping comparison of `holds_entry_of` keeps working
                // (an entry that old cannot be in the table any more).
                let behind = backend.assigned.wrapping_sub(rec.backend.assigned);
                backend.assigned = if behind > 1 << 30 {
                    backend.assigned.wrapping_sub(1 << 30)
                } else {
                    rec.backend.assigned
                };
                // Still unhealthy: its draining period runs from when it
                // turned unhealthy, not from this rebuild.
                if let (
                    BackendState::Unhealthy { until },
                    BackendState::Unhealthy { until: earlier },
                ) = (&mut backend.state, rec.backend.state)
                {
                    *until = earlier;
                }
                rec.backend = backend;
                rec.drain_ticks = drain_ticks;
                rec.seen = true;
                return slot;
            }
        }
        let record = SlotRecord {
            backend,
            drain_ticks,
            seen: true,
            left_serving: false,
            key: key.clone(),
        };
        // A removed backend's slot: its flow entries predate `assigned`
        // and are never followed to the new endpoint (`Backend::assigned`).
        while let Some(slot) = self.free.pop() {
            if let Some(rec) = self.slots.get_mut(slot as usize) {
                if rec.seen || rec.backend.state != BackendState::Removed {
                    continue;
                }
                self.by_identity.remove(&rec.key);
                *rec = record;
                self.by_identity.insert(key, slot);
                return slot;
            }
        }
        let slot = u32::try_from(self.slots.len()).unwrap_or(u32::MAX);
        self.slots.push(record);
        self.by_identity.insert(key, slot);
        slot
    }
}

/// What one build reads besides the builder's own state.
struct Inputs<'a, H> {
    compiled: &'a Compiled,
    local: &'a Local,
    health: &'a H,
    /// Each service's locality plan, indexed like `compiled.services`.
    plans: &'a [Option<locality::Plan>],
    /// Services of gateway rules (M31): their backends are appliances.
    gateway_svc: Vec<bool>,
    /// The generation of the snapshot being built.
    generation: u32,
    now: Tick,
    ticks_per_second: u32,
}

impl<H> Inputs<'_, H> {
    /// Whether service `svc` is a gateway rule's (its backends appliances).
    fn is_gateway_svc(&self, svc: usize) -> bool {
        self.gateway_svc.get(svc).copied().unwrap_or(false)
    }
}

/// The services' endpoints placed on backend slots
/// ([`SnapshotBuilder::place_services`]).
struct Placed {
    /// The plan of each service, indexed like `compiled.services`.
    services: Vec<ServicePlan>,
    /// Backend slot of every endpoint, by service and index within it.
    slots_of: Vec<Vec<u32>>,
    /// Backend slot of every endpoint, by its index in `compiled.endpoints`.
    endpoint_slot: Vec<u32>,
    /// The appliances (backends of gateway services): (address, slot).
    appliances: Vec<(IpAddr, u32)>,
}

/// Endpoint `ep` of service `svc_id` as this build configures it: its
/// addresses and their next hops' MACs, and its state (`serving`: healthy,
/// or its service failing open). Its templates come last
/// ([`attach_templates`]).
fn configured_backend<H>(
    inputs: &Inputs<'_, H>,
    ep: &config::compiled::Endpoint,
    svc_id: u32,
    serving: bool,
    drain_ticks: Tick,
) -> Backend {
    let (compiled, local) = (inputs.compiled, inputs.local);
    Backend {
        addr: ep.address,
        mac: local.mac_of(endpoint_hop(compiled, ep)).unwrap_or_default(),
        service: svc_id,
        state: if serving {
            BackendState::Active
        } else {
            BackendState::Unhealthy {
                until: inputs.now.wrapping_add(drain_ticks),
            }
        },
        assigned: inputs.generation,
        encap: None,
        gateway_encap: None,
        l2dsr: false,
        max_ip_len: u32::MAX,
        remote: compiled
            .groups
            .get(ep.group.0 as usize)
            .is_some_and(|g| g.remote.is_some()),
        v6: ep.address6.map(|addr| {
            Box::new(Path {
                addr,
                mac: crate::nexthop::endpoint_hop6(compiled, ep)
                    .and_then(|h| local.mac_of(h))
                    .unwrap_or_default(),
                encap: None,
                max_ip_len: u32::MAX,
            })
        }),
    }
}

/// `be`'s precomputed outer headers for its service's delivery mode
/// (`gateway`: it is an appliance of a gateway rule) and the largest inner
/// packet that fits with them; the same for a dual-stack backend's IPv6
/// path.
fn attach_templates(be: &mut Backend, services: &[ServicePlan], gateway: bool, local: &Local) {
    // No template while the next hop is unresolved: such packets
    // leave the established fast path for `delivery::deliver`, which
    // drops them (`no_neighbour`), so the fast path tests nothing.
    let template = services
        .get(be.service as usize)
        .filter(|_| be.mac != [0; 6])
        .and_then(|p| template(local, be, p.delivery, gateway));
    be.max_ip_len = max_ip_len(local, template.as_ref());
    // A remote rule's packets take the long way, where a packet that
    // arrived tunnelled is held back from it (M49): the fast path
    // tests nothing for it.
    let usable = template.filter(|_| !be.remote);
    (be.encap, be.gateway_encap) = if gateway {
        (None, usable)
    } else {
        (usable, None)
    };
    // A dual-stack backend's IPv6 path: the same, to its IPv6 address.
    let delivery = services.get(be.service as usize).map(|p| p.delivery);
    be.l2dsr = !gateway && !be.remote && delivery == Some(Delivery::L2dsr);
    let remote = be.remote;
    if let (Some(v6), Some(delivery)) = (be.v6.as_deref_mut(), delivery) {
        v6.encap = (v6.mac != [0; 6] && !remote)
            .then(|| template_to(local, v6.addr, v6.mac, delivery))
            .flatten();
        v6.max_ip_len = max_ip_len(local, v6.encap.as_ref());
    }
}

/// The host's probes through VIPs (M52) whose endpoint has a backend slot,
/// sorted by source port ([`Snapshot::probe_steer`]).
fn probe_steering(compiled: &Compiled, endpoint_slot: &[u32]) -> Vec<ProbeSteer> {
    let mut probe_steering: Vec<ProbeSteer> = compiled
        .vip_probes
        .iter()
        .filter_map(|p| {
            let slot = *endpoint_slot.get(p.endpoint.0 as usize)?;
            let ep = compiled.endpoints.get(p.endpoint.0 as usize)?;
            (slot != u32::MAX).then_some(ProbeSteer {
                source_port: p.source_port,
                vip: wire::ip::to_mapped(&p.vip),
                slot,
                svc: ep.service.0,
            })
        })
        .collect();
    probe_steering.sort_by_key(|p| p.source_port);
    probe_steering
}

/// The gateway endpoints of `compiled` whose rule this node serves, with
/// the MACs resolved so far.
fn gateway_hops(compiled: &Compiled, local: &Local) -> Vec<GatewayHop> {
    compiled
        .gateways
        .iter()
        .filter_map(|g| {
            let rule = compiled.rules.get(g.rule.index())?;
            let child = rule
                .children
                .iter()
                .find(|c| compiled.children.get(c.index()).is_some_and(|c| c.served))?;
            let (port, mac, remote) = if g.tunnel.is_some() {
                remote_gateway(compiled, local, g)
            } else {
                let hop = crate::nexthop::gateway_endpoint_hop(compiled, g.address);
                (
                    hop.map_or(0, |h| h.port),
                    hop.and_then(|h| local.mac_of(Hop::Resolved(h)))
                        .unwrap_or_default(),
                    None,
                )
            };
            Some(GatewayHop {
                address: g.address,
                port,
                mac,
                remote,
                id: g.id,
                child: child.index(),
                svc: g.service.index(),
                flow_tag: g.flow_tag,
                protocol: rule.protocol,
            })
        })
        .collect()
}

/// A remote gateway endpoint's port, next hop MAC (all zero while
/// unresolved) and tunnel (M31): Geneve on its rule's service's port, its
/// returns' outer headers built once, as a backend's are.
fn remote_gateway(
    compiled: &Compiled,
    local: &Local,
    g: &config::compiled::GatewayEndpoint,
) -> (usize, MacAddr, Option<RemoteTunnel>) {
    let (port, hop) = crate::nexthop::remote_gateway_hop(compiled, g.address);
    let mac = local.mac_of(hop).unwrap_or_default();
    let Some(Delivery::Geneve {
        port: geneve_port,
        option_class,
        endpoint_id_type,
        flow_cookie_type,
    }) = compiled.services.get(g.service.index()).map(|s| s.delivery)
    else {
        return (port, mac, None);
    };
    let tunnel = wire::encap::Tunnel::Geneve {
        port: geneve_port,
        vni: 0,
        ids: wire::geneve::OptionIds {
            class: option_class,
            endpoint_type: endpoint_id_type,
            cookie_type: flow_cookie_type,
        },
        options: wire::geneve::GatewayOptions::default(),
    };
    let template = (mac != [0; 6])
        .then(|| templates::outer(local, (g.address, mac), 0).ok())
        .flatten()
        .and_then(|o| wire::encap::Template::new(&o, &tunnel).ok())
        .map(Box::new);
    (
        port,
        mac,
        Some(RemoteTunnel {
            geneve_port,
            template,
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Services `a` and `b`, three endpoints each.
    fn two_services() -> Arc<Compiled> {
        let mut text = String::from("[node]\nname = \"n\"\nregion = \"r\"\nzone = \"z\"\n");
        for (name, net) in [("a", 1), ("b", 2)] {
            text += &format!(
                "\n[[backend_services]]\nname = \"{name}\"\ndelivery = \"ipip\"\ngroups = [{{ name = \"g\", region = \"r\", zone = \"z\", endpoints = [{{ address = \"10.{net}.0.1\" }}, {{ address = \"10.{net}.0.2\" }}, {{ address = \"10.{net}.0.3\" }}] }}]\n"
            );
        }
        match config::load_str("t.toml", &text, &config::Env::default()) {
            Ok(l) => Arc::new(l.compiled),
            Err(e) => panic!("{e}"),
        }
    }

    /// A next hop for every backend (these configurations have no ports).
    fn local() -> Local {
        Local {
            next_hop_mac: [2, 0, 0, 0, 0, 0xfe],
            ..Local::default()
        }
    }

    fn table(s: &Snapshot, svc: usize) -> Arc<MaglevTable> {
        s.services[svc].regions[0].tables[0].table.clone()
    }

    /// Health of the endpoints whose address is not in `down`.
    fn health(
        c: &Arc<Compiled>,
        down: &'static [&'static str],
    ) -> impl Fn(ConfigEndpointId) -> EndpointHealth + use<> {
        let c = c.clone();
        move |id| EndpointHealth {
            healthy: !down.contains(&c.endpoints[id.index()].address.to_string().as_str()),
            weight: None,
        }
    }

    /// Generations wrap (one per build): a backend configured for ever keeps
    /// taking the entries made for it.
    #[test]
    fn a_backend_outlives_generation_wrap_around() {
        let c = two_services();
        let mut b = SnapshotBuilder::new();
        let mut last = 0;
        for start in [0u32, 1 << 30, 1 << 31, 3 << 30, u32::MAX - 5] {
            b.generation = start;
            for _ in 0..12 {
                let s = b
                    .build(c.clone(), local(), health(&c, &[]), 0, 1)
                    .expect("build");
                for be in &s.backends {
                    assert!(
                        be.holds_entry_of(s.generation),
                        "generation {}",
                        s.generation
                    );
                    assert!(s.generation.wrapping_sub(be.assigned) <= 1 << 30);
                }
                last = s.generation;
            }
        }
        assert!(last < 10, "the generation wrapped");
    }

    #[test]
    fn only_the_tables_whose_inputs_changed_are_built() {
        let c = two_services();
        let mut b = SnapshotBuilder::new();
        let s1 = b
            .build(c.clone(), local(), health(&c, &[]), 0, 1)
            .expect("build");
        assert_eq!(b.tables_held(), 2);
        // Nothing changed: nothing to build, the same tables.
        assert!(
            b.missing_tables(&c, &local(), health(&c, &[]), &[])
                .is_empty()
        );
        let s2 = b
            .build(c.clone(), local(), health(&c, &[]), 1, 1)
            .expect("build");
        assert!(Arc::ptr_eq(&table(&s1, 0), &table(&s2, 0)));
        assert!(Arc::ptr_eq(&table(&s1, 1), &table(&s2, 1)));
        // An endpoint of `a` fails: one table to build, `b`'s is kept.
        let down: &[&str] = &["10.1.0.2"];
        let missing = b.missing_tables(&c, &local(), health(&c, down), &[]);
        assert_eq!(missing.len(), 1);
        assert_eq!(missing[0].endpoints.len(), 2);
        // Built elsewhere and handed over, it is the one the build uses.
        let built: Vec<(TableKey, Arc<MaglevTable>)> = missing
            .into_iter()
            .map(|k| {
                let t = Arc::new(k.build().expect("table"));
                (k, t)
            })
            .collect();
        let handed = built[0].1.clone();
        b.add_tables(built);
        let s3 = b
            .build(c.clone(), local(), health(&c, down), 2, 1)
            .expect("build");
        assert!(Arc::ptr_eq(&table(&s3, 0), &handed));
        assert!(Arc::ptr_eq(&table(&s3, 1), &table(&s1, 1)));
        // Only the tables in use are kept.
        assert_eq!(b.tables_held(), 2);
        // Recovery: `a`'s full table is built again (it was dropped), equal
        // to the first one.
        assert_eq!(
            b.missing_tables(&c, &local(), health(&c, &[]), &[]).len(),
            1
        );
        let s4 = b
            .build(c.clone(), local(), health(&c, &[]), 3, 1)
            .expect("build");
        assert_eq!(*table(&s4, 0), *table(&s1, 0));
    }
}
