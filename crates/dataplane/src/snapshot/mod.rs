//! The immutable snapshot workers read, and the management-core builder that
//! makes one from a compiled configuration and endpoint health.
//!
//! This file is the read model: the types the pipeline reads per packet
//! ([`Snapshot`], [`Backend`], [`ServicePlan`], [`GatewayHop`], [`Rules`])
//! and their small lookups. The management core's side is beside it:
//! `local.rs` the balancer's own addresses ([`Local`]) and its next hops'
//! MACs, `build.rs` the [`SnapshotBuilder`], `tables.rs` what each Maglev
//! table is built from ([`TableKey`]), `templates.rs` the outer headers of
//! each delivery mode (the builder's per-backend templates, and the pieces
//! `delivery::deliver` builds from without one), `sizing.rs` configured
//! durations and rates as ticks and per-tick budgets, and the flow table's
//! settings ([`flow_table_config`]).
//!
//! Flow entries name backends by **slot**: an index into
//! [`Snapshot::backends`] that the builder keeps stable for a (service name,
//! endpoint identity) pair across every rebuild and reload, so an established
//! flow keeps reaching the same backend whatever happens to the order of the
//! configuration file. A backend that leaves the configuration keeps its slot
//! in state [`BackendState::Draining`] for the service's
//! `connection_draining_timeout`, then [`BackendState::Removed`]; a removed
//! backend's slot goes to the next new endpoint, with a new
//! [`Backend::assigned`] generation so that no older flow entry follows it
//! there (the slot table stays as large as the most backends ever configured
//! at once, not as all that ever were).

use std::net::IpAddr;
use std::sync::Arc;

use config::compiled::{Compiled, Delivery, IngressPolicy, ZoneId};
use config::schema::{ConnectionPersistence, NoBackendAction, Protocol};
use config::values::Prefix;
use config::{RuleIndex, RuleMatch};
use flowtable::Tick;
/// Re-exported for the pipeline and the management core.
pub use flowtable::tick_reached;
use maglev::MaglevTable;
use wire::encap::Template;
use wire::ethernet::MacAddr;
use wire::flow::Affinity;

use crate::cookie::CookieKey;

mod build;
mod local;
mod sizing;
mod tables;
pub(crate) mod templates;

pub use build::{SnapshotBuilder, SnapshotError, affinity};
pub use local::{DEFAULT_MAC, Local};
pub use sizing::flow_table_config;
pub use tables::TableKey;

/// What the management core knows about an endpoint's health.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndpointHealth {
    /// Passing its health check (or not checked).
    pub healthy: bool,
    /// Weight reported by the health check (M17); `None` keeps the
    /// configured weight.
    pub weight: Option<u16>,
}

impl EndpointHealth {
    /// Healthy with the configured weight.
    pub const HEALTHY: EndpointHealth = EndpointHealth {
        healthy: true,
        weight: None,
    };
}

/// A backend's state as far as flows are concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendState {
    /// In the configuration and healthy: keeps its flows; new flows if its
    /// weight is positive.
    Active,
    /// Failing its health check: no new flows; existing ones follow the
    /// service's persistence policy (M11), at most until the tick
    /// `until` (its connection-draining period, counted from when it turned
    /// unhealthy).
    Unhealthy {
        /// Last tick persisted flows may stay.
        until: Tick,
    },
    /// Left the configuration: keeps existing flows until the tick `until`,
    /// no new ones (connection draining, M11).
    Draining {
        /// Last tick of the draining period.
        until: Tick,
    },
    /// Gone: its flows move to another backend.
    Removed,
}

impl BackendState {
    /// Its name, as `status`, `simulate` and the metrics say it.
    pub const fn name(self) -> &'static str {
        match self {
            BackendState::Active => "active",
            BackendState::Unhealthy { .. } => "unhealthy",
            BackendState::Draining { .. } => "draining",
            BackendState::Removed => "removed",
        }
    }

    /// The last tick its flows may stay, when it is unhealthy or draining.
    pub const fn until(self) -> Option<Tick> {
        match self {
            BackendState::Unhealthy { until } | BackendState::Draining { until } => Some(until),
            BackendState::Active | BackendState::Removed => None,
        }
    }
}

/// One backend slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backend {
    /// Where packets for it go.
    pub addr: IpAddr,
    /// Next-hop MAC for it (its own for `l2dsr`); all zero while that next
    /// hop is unresolved (M47): its packets are then dropped
    /// (`no_neighbour`), never sent.
    pub mac: MacAddr,
    /// Index of its service in [`Snapshot::services`] (of the snapshot where
    /// it was last configured).
    pub service: u32,
    /// Flow-relevant state.
    pub state: BackendState,
    /// Generation of the snapshot that gave this slot to this endpoint. A
    /// slot of a removed backend can be given to a new endpoint; flow
    /// entries made before (an older generation) are never followed to it.
    pub assigned: u32,
    /// Outer headers for packets to it, precomputed for its service's
    /// delivery mode (`None` for `l2dsr` and without a tunnel source).
    pub encap: Option<Template>,
    /// For an appliance of a gateway rule (M31), whose packets carry their
    /// gateway endpoint's ID: its outer headers with room for that option,
    /// filled in per packet (its `encap` is `None`: the established fast
    /// path, which has no endpoint, never takes its packets).
    pub gateway_encap: Option<Template>,
    /// The largest inner IP packet (bytes) that still fits the egress
    /// port's MTU once encapsulated for it: [`Local::egress_mtu`] minus the
    /// template's overhead. Larger ones are answered with ICMP too-big or,
    /// IPv4 without DF, forwarded and counted (M48).
    pub max_ip_len: u32,
    /// Another Spillway's rule (a `remote_rule` group, M21): a packet that
    /// arrived tunnelled (M49) is never sent on to it, so two nodes spilling
    /// over to each other cannot bounce a packet between them.
    pub remote: bool,
    /// A dual-stack endpoint's IPv6 address (M8): its IPv6 packets go there,
    /// by their own next hop and headers (`None`: every packet goes to
    /// `addr`).
    pub v6: Option<Box<Path>>,
    /// Its service delivers by `l2dsr`, and it is neither an appliance nor
    /// another Spillway's rule: an established flow's packet to it has its
    /// MACs rewritten on the fast path (its `encap` is `None`).
    pub l2dsr: bool,
}

/// A backend's second address and how to reach it (a dual-stack
/// endpoint's IPv6 address, M8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Path {
    /// The address.
    pub addr: IpAddr,
    /// Its next hop's MAC; all zero while unresolved.
    pub mac: MacAddr,
    /// Its precomputed outer headers (as [`Backend::encap`]).
    pub encap: Option<Template>,
    /// As [`Backend::max_ip_len`].
    pub max_ip_len: u32,
}

impl Backend {
    /// The outer headers and the largest inner packet for a packet of
    /// family `v6`: the IPv6 path's for IPv6 packets to a dual-stack
    /// backend, else the backend's own.
    #[inline(always)]
    pub fn encap_for(&self, v6: bool) -> (Option<&Template>, u32) {
        // The family first: an IPv4 packet never reads `self.v6` (another
        // cache line of the slot).
        if v6 && let Some(p) = &self.v6 {
            return (p.encap.as_ref(), p.max_ip_len);
        }
        (self.encap.as_ref(), self.max_ip_len)
    }

    /// The address and next-hop MAC for a packet of family `v6`.
    pub fn address_for(&self, v6: bool) -> (IpAddr, MacAddr) {
        match &self.v6 {
            Some(p) if v6 => (p.addr, p.mac),
            _ => (self.addr, self.mac),
        }
    }

    /// Whether a flow entry made in snapshot `generation` names this backend:
    /// its slot was given to it no later (a removed backend's slot may since
    /// have gone to a new endpoint, which the old flows must not follow).
    #[inline(always)]
    pub fn holds_entry_of(&self, generation: u32) -> bool {
        // Generations wrap like ticks.
        tick_reached(generation, self.assigned)
    }
}

/// Everything a worker needs about one backend service.
#[derive(Debug, Clone)]
pub struct ServicePlan {
    /// How packets reach its backends.
    pub delivery: Delivery,
    /// Session affinity (M9).
    pub affinity: Affinity,
    /// Persistence on unhealthy backends (M11).
    pub persistence: ConnectionPersistence,
    /// What to do without an eligible backend (M14).
    pub no_backend_action: NoBackendAction,
    /// Where new connections go (M24–M28), one entry per region that
    /// takes a share of them, in the order of `thresholds`.
    pub regions: Vec<RegionTables>,
    /// Cumulative shares of the regions as 32-bit thresholds
    /// ([`locality::pick_index`]); empty when no backend is eligible.
    pub thresholds: Vec<u32>,
    /// Whether the region tables have per-client-zone variants (M27).
    pub zonal: bool,
    /// Whether its new flows look up the client's zone and are counted per
    /// client zone ([`crate::WorkerCounters::zone_flows`]): the service has
    /// zonal affinity and client zones exist, whether or not this round's
    /// plan has zone variants (the counts are what sizes them, M27).
    pub measures_zones: bool,
    /// The service's part of its flow keys (`config::compiled::Service::
    /// flow_tag`): stable across reloads that reorder services.
    pub flow_tag: u16,
    /// Every endpoint is unhealthy and the service fails open (M23).
    pub fail_open: bool,
    /// No configured endpoint is eligible, and new connections go to the
    /// draining ones instead (`no_backend_fallback = "draining"`, M14):
    /// `regions` is then one table over them, without a locality plan.
    pub last_resort: bool,
    /// The locality plan `regions` and `thresholds` were built from (its
    /// regions in the same order), for explanations
    /// ([`crate::pipeline::explain`]); the packet path never reads it.
    pub locality: Option<Arc<locality::Plan>>,
}

/// One region's selection tables: the default set first, then one per
/// client zone with zonal affinity.
#[derive(Debug, Clone)]
pub struct RegionTables {
    /// Maglev tables and the backend slot of each table entry.
    pub tables: Vec<SlotTable>,
    /// Client zone of `tables[i + 1]`.
    pub zones: Vec<ZoneId>,
}

/// A Maglev table whose endpoint indices map to backend slots.
#[derive(Debug, Clone)]
pub struct SlotTable {
    /// The table (shared with the builder, which keeps it for the next
    /// build while its inputs stay the same).
    pub table: Arc<MaglevTable>,
    /// Backend slot of each of the table's endpoints.
    pub slots: Vec<u32>,
}

impl ServicePlan {
    /// The backend slot a new flow with `hash` goes to, if any backend is
    /// eligible: the region by its share of new connections, then (for a
    /// client in a zone with its own table) the zone's table, then Maglev.
    #[inline]
    pub fn pick(&self, hash: u64, client_zone: Option<ZoneId>) -> Option<u32> {
        self.pick_detail(hash, client_zone).map(|p| p.slot)
    }

    /// [`ServicePlan::pick`] with the way it went: which region and which
    /// of its tables. The one definition of the choice; `pick` is this
    /// with the slot alone (the same code once inlined).
    #[inline(always)]
    pub fn pick_detail(&self, hash: u64, client_zone: Option<ZoneId>) -> Option<Pick> {
        let r = locality::pick_index(&self.thresholds, hash)?;
        let region = self.regions.get(r)?;
        let t = match client_zone {
            Some(z) if self.zonal => region
                .zones
                .iter()
                .position(|&x| x == z)
                .map_or(0, |i| i + 1),
            _ => 0,
        };
        let st = region.tables.get(t).or_else(|| region.tables.first())?;
        let slot = st.slots.get(st.table.lookup(hash) as usize).copied()?;
        Some(Pick {
            region: r,
            // Unused by `pick`: optimised away there.
            table: if t < region.tables.len() { t } else { 0 },
            slot,
        })
    }

    /// Distinct backend slots that can get new connections.
    pub fn eligible_slots(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self
            .regions
            .iter()
            .flat_map(|r| r.tables.iter().flat_map(|t| t.slots.iter().copied()))
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }
}

/// How [`ServicePlan::pick_detail`] chose a new flow's backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pick {
    /// Index into [`ServicePlan::regions`] (and the locality plan's
    /// regions): the region by its share of new connections.
    pub region: usize,
    /// Index into that region's tables: 0 the default set, `1 + i` the
    /// table of client zone `zones[i]` (zonal affinity, M27).
    pub table: usize,
    /// The backend slot.
    pub slot: u32,
}

/// An immutable view of everything the pipeline decides with.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// Increases with every build.
    pub generation: u32,
    /// Rule selection and client zones: all the pipeline reads of the
    /// configuration.
    pub rules: Rules,
    /// The configuration it was built from, for the management core (names,
    /// settings, status); the pipeline reads [`Snapshot::rules`] instead.
    pub compiled: Arc<Compiled>,
    /// Per service, indexed like `compiled.services`.
    pub services: Vec<ServicePlan>,
    /// Backend slots (stable across builds).
    pub backends: Vec<Backend>,
    /// This node's addresses.
    pub local: Local,
    /// New flow entries a worker may create per tick (M15).
    pub new_flow_budget: u32,
    /// ICMP too-big errors a worker may send per tick (M48).
    pub too_big_budget: u32,
    /// ICMP echo replies a worker may send per tick (`icmp_echo_rate`).
    pub echo_budget: u32,
    /// The key of the cookies no flow entry stores (gateway flows forwarded
    /// without an entry, ICMP errors to appliances: [`crate::cookie`]).
    pub cookie_key: CookieKey,
    /// The port appliances are reached through (the egress port), the only
    /// one their returns are taken on (M53); `None`: no ports configured
    /// (offline replays, tests), where there is only one.
    pub appliance_port: Option<usize>,
    /// Returns an appliance may have refused per tick and worker before its
    /// returns are dropped unread for the rest of the tick
    /// (`gateway_mismatch_rate`, M53).
    pub gateway_mismatch_budget: u32,
    /// Which tunnels to the own addresses are decapsulated, from where
    /// (M49): the compiled configuration's, copied like [`Snapshot::rules`].
    pub tunnel_ingress: IngressPolicy,
    /// The gateway endpoints of the gateway rules this node serves (M31).
    pub gateways: Vec<GatewayHop>,
    /// Whether any of `gateways` is remote (its traffic tunnelled): when
    /// none is, a packet to an own address (an appliance's return above
    /// all) is not compared with each endpoint.
    pub remote_gateways: bool,
    /// Appliances (backends of gateway services) by address, sorted: the
    /// only sources a returned Geneve packet is taken from (M32).
    pub appliances: Vec<(IpAddr, u32)>,
    /// Health probes through VIPs (M52), sorted by source port: what the
    /// host sends from one of these ports to its VIP goes to its backend.
    pub probe_steering: Vec<ProbeSteer>,
    /// The ports VRRP groups run on (`[[vrrp]]`): their advertisements
    /// are copied to the management core.
    pub vrrp_ports: Vec<usize>,
    /// VIPs of VRRP groups this node is not master of, sorted: left out of
    /// [`Snapshot::rules`]; their packets are `vrrp_backup` drops.
    pub standby: Vec<IpAddr>,
    /// Per child rule: the index in [`Snapshot::services`] of the plan its
    /// new flows take — its service's, or its VIP's own when an endpoint's
    /// verdict there differs (M52, M8; such plans follow the services').
    pub child_plans: Vec<u32>,
}

/// Where the host's probe from one source port goes (M52).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeSteer {
    /// The probe's source port.
    pub source_port: u16,
    /// The VIP it connects to (IPv4-mapped); other destinations are not
    /// steered.
    pub vip: [u8; 16],
    /// The endpoint's backend slot.
    pub slot: u32,
    /// Its service's index.
    pub svc: u32,
}

impl Snapshot {
    /// The plan child rule `child` of service `svc` takes.
    #[inline(always)]
    pub fn plan_for(&self, child: usize, svc: usize) -> Option<&ServicePlan> {
        let i = self.child_plans.get(child).map_or(svc, |&p| p as usize);
        self.services.get(i)
    }

    /// The steering of the host's probe from `source_port` (binary search).
    pub fn probe_steer(&self, source_port: u16) -> Option<&ProbeSteer> {
        let i = self
            .probe_steering
            .binary_search_by_key(&source_port, |p| p.source_port)
            .ok()?;
        self.probe_steering.get(i)
    }
}

/// A gateway endpoint as the pipeline recognises it (M31): frames from its
/// MAC on its port take its gateway rule; returned packets go back to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayHop {
    /// Its configured address.
    pub address: IpAddr,
    /// The port it is on (index in `[[ports]]`).
    pub port: usize,
    /// Its resolved MAC; all zero while unresolved (nothing is recognised
    /// as its traffic, nothing returned to it).
    pub mac: MacAddr,
    /// The 64-bit endpoint ID of the Geneve option (M30).
    pub id: u64,
    /// The child rule its packets are counted under (the rule's first
    /// served one).
    pub child: usize,
    /// Index of the rule's service (the appliances).
    pub svc: usize,
    /// Its flows' tag in the flow table (`config::compiled::GatewayEndpoint::flow_tag`).
    pub flow_tag: u16,
    /// The rule's protocol.
    pub protocol: Protocol,
    /// A remote endpoint's tunnel (M31); `None`: a neighbour, recognised
    /// by its MAC. A remote one's `port` and `mac` are those of its
    /// tunnel's next hop.
    pub remote: Option<RemoteTunnel>,
}

/// How a remote gateway endpoint's traffic arrives and returns (M31).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteTunnel {
    /// The UDP port its Geneve arrives on (the rule's service's Geneve
    /// port).
    pub geneve_port: u16,
    /// The outer headers of its returns (this node's tunnel source to its
    /// address, by its next hop, no options); `None` while the next hop is
    /// unresolved or without a tunnel source of its family.
    pub template: Option<Box<wire::encap::Template>>,
}

impl GatewayHop {
    /// Whether its rule takes IP protocol `proto`.
    #[inline]
    pub fn takes(&self, proto: u8) -> bool {
        match self.protocol {
            Protocol::Tcp => proto == wire::ip::proto::TCP,
            Protocol::Udp => proto == wire::ip::proto::UDP,
            Protocol::L3Default => config::compiled::L3_DEFAULT_PROTOCOLS.contains(&proto),
        }
    }
}

impl Snapshot {
    /// The gateway endpoint a frame from `mac` on port `port` came from.
    #[inline]
    pub fn gateway_from(&self, port: usize, mac: &[u8]) -> Option<(usize, &GatewayHop)> {
        self.gateways.iter().enumerate().find(|(_, g)| {
            g.port == port && g.mac != [0; 6] && g.mac[..] == *mac && g.remote.is_none()
        })
    }

    /// The remote gateway endpoint (M31) whose tunnel comes from `src`.
    #[inline]
    pub fn remote_gateway(&self, src: IpAddr) -> Option<(usize, &GatewayHop)> {
        if !self.remote_gateways {
            return None;
        }
        self.gateways
            .iter()
            .enumerate()
            .find(|(_, g)| g.remote.is_some() && g.address == src)
    }

    /// The Geneve port of appliance `slot`'s service.
    #[inline]
    pub fn gateway_geneve_port(&self, slot: u32) -> Option<u16> {
        let be = self.backends.get(slot as usize)?;
        match self.services.get(be.service as usize)?.delivery {
            Delivery::Geneve { port, .. } => Some(port),
            _ => None,
        }
    }

    /// Whether `port` is the Geneve port of a gateway rule's service: the
    /// port appliances return to (M32).
    pub fn is_gateway_geneve_port(&self, port: u16) -> bool {
        self.gateways.iter().any(|g| {
            matches!(
                self.services.get(g.svc).map(|s| s.delivery),
                Some(Delivery::Geneve { port: p, .. }) if p == port
            )
        })
    }

    /// The backend slot of the appliance at `addr`, if it is one.
    #[inline]
    pub fn appliance(&self, addr: IpAddr) -> Option<u32> {
        // Compared as integers: the same search in fewer instructions, on
        // every packet to an own address.
        let want = addr_order(&addr);
        let i = self
            .appliances
            .binary_search_by(|(a, _)| addr_order(a).cmp(&want))
            .ok()?;
        self.appliances.get(i).map(|&(_, slot)| slot)
    }
}

/// `IpAddr`'s order as integers: every IPv4 address before every IPv6 one
/// (an IPv4-mapped IPv6 address included), each family by value.
#[inline(always)]
fn addr_order(a: &IpAddr) -> (bool, u128) {
    match a {
        IpAddr::V4(v) => (false, u128::from(u32::from(*v))),
        IpAddr::V6(v) => (true, u128::from(*v)),
    }
}

/// What the pipeline selects rules with (M3) and finds a client's zone
/// with (M27), taken from the compiled configuration when a snapshot is
/// built: the snapshot owns it, so that the pipeline reads only the snapshot.
#[derive(Debug, Clone, Default)]
pub struct Rules {
    index: RuleIndex,
    /// Longest prefix first.
    client_zones: Vec<(Prefix, ZoneId)>,
    children: usize,
    /// Services (rows of the per-client-zone counters).
    services: usize,
    /// Columns of the per-client-zone counters: the zones plus one (no
    /// zone) when some service measures them, else 0.
    zone_columns: usize,
}

impl Rules {
    /// The rule index and client zones of `compiled`.
    pub fn from_config(compiled: &Compiled) -> Rules {
        Rules::serving(compiled, &[])
    }

    /// [`Rules::from_config`] without the VIPs of `standby` (sorted): those
    /// of VRRP groups this node is not master of.
    pub fn serving(compiled: &Compiled, standby: &[IpAddr]) -> Rules {
        Rules {
            index: if standby.is_empty() {
                compiled.rule_index.clone()
            } else {
                compiled.rule_index.without(standby)
            },
            client_zones: compiled.client_zones.clone(),
            children: compiled.children.len(),
            services: compiled.services.len(),
            zone_columns: if compiled
                .services
                .iter()
                .any(|s| compiled.measures_client_zones(s))
            {
                compiled.zones.len() + 1
            } else {
                0
            },
        }
    }

    /// The rule for a packet to `dst` with protocol `proto` and destination
    /// port `port` (`None` for a fragment: `RuleIndex::lookup_fragment`), or
    /// whether `dst` is a VIP at all (`RuleIndex::select`: one search).
    #[inline]
    pub fn select(&self, dst: IpAddr, proto: u8, port: Option<u16>) -> Result<RuleMatch, bool> {
        self.index.select(dst, proto, port)
    }

    /// Whether the rule of child rule `child` admits client `src` (its
    /// `source_ranges`, M6).
    #[inline]
    pub fn admits(&self, child: usize, src: IpAddr) -> bool {
        self.index.admits(child, src)
    }

    /// Whether `addr` is a VIP this node serves.
    #[inline]
    pub fn is_vip(&self, addr: IpAddr) -> bool {
        self.index.is_vip(addr)
    }

    /// Whether an echo request to `addr` that no rule takes is answered
    /// (a served VIP whose rules allow `answer_ping`).
    #[inline]
    pub fn answers_echo(&self, addr: IpAddr) -> bool {
        self.index.answers_echo(addr)
    }

    /// The zone of a client address, by longest prefix (M27). No allocation.
    #[inline]
    pub fn client_zone(&self, src: IpAddr) -> Option<ZoneId> {
        self.client_zones
            .iter()
            .find(|(p, _)| p.contains(src))
            .map(|&(_, z)| z)
    }

    /// Number of child rules (the size of the per-child counters).
    pub fn children(&self) -> usize {
        self.children
    }

    /// The shape of the per-client-zone new-flow counters
    /// ([`crate::WorkerCounters::zone_flows`]): (services, columns), the
    /// columns 0 when no service measures client zones.
    pub fn zone_counters(&self) -> (usize, usize) {
        (self.services, self.zone_columns)
    }
}

impl Snapshot {
    /// Whether `addr` belongs to the balancer itself.
    pub fn is_own(&self, addr: IpAddr) -> bool {
        self.local.own_addrs.contains(&addr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn any_addr() -> impl proptest::strategy::Strategy<Value = IpAddr> {
        use proptest::prelude::*;
        prop_oneof![
            any::<u32>().prop_map(|v| IpAddr::from(std::net::Ipv4Addr::from(v))),
            any::<u128>().prop_map(|v| IpAddr::from(std::net::Ipv6Addr::from(v))),
            // IPv4-mapped, and small values (`::a.b.c.d`): equal as integers to
            // an IPv4 address, never as addresses.
            any::<u32>().prop_map(|v| IpAddr::from(std::net::Ipv4Addr::from(v).to_ipv6_mapped())),
            any::<u32>().prop_map(|v| IpAddr::from(std::net::Ipv6Addr::from(u128::from(v)))),
        ]
    }

    proptest::proptest! {
        /// The appliances' search key orders addresses as `IpAddr` does (the
        /// order they are sorted in).
        #[test]
        fn appliance_search_orders_as_ip_addr(a in any_addr(), b in any_addr(), same in proptest::prelude::any::<bool>()) {
            let b = if same { a } else { b };
            proptest::prop_assert_eq!(addr_order(&a).cmp(&addr_order(&b)), a.cmp(&b));
        }
    }
}
