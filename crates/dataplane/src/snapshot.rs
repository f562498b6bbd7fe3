//! The immutable snapshot workers read, and the management-core builder that
//! makes one from a compiled configuration and endpoint health.
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
//!
//! Maglev tables are kept between builds by what they are built from
//! ([`TableKey`]): a health change rebuilds the tables of the service it
//! touches, not every table.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use config::compiled::{Compiled, Delivery, EndpointId as ConfigEndpointId, IngressPolicy, ZoneId};
use config::schema::{
    ConnectionPersistence, LoadBalancing, NoBackendAction, Protocol, SessionAffinity,
};
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
use crate::nexthop::{Hop, NextHop, endpoint_hop};

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
    /// The service's part of its flow keys (`config::compiled::Service::
    /// flow_tag`): stable across reloads that reorder services.
    pub flow_tag: u16,
    /// Every endpoint is unhealthy and the service fails open (M23).
    pub fail_open: bool,
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

/// The balancer's own addresses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Local {
    /// MAC of the port packets leave on.
    pub mac: MacAddr,
    /// MAC of the next hop towards backends without their own MAC, when
    /// no egress port says otherwise ([`crate::nexthop::Hop::Default`]);
    /// all zero: none (such backends are unresolved).
    pub next_hop_mac: MacAddr,
    /// Outer source address of IPv4 tunnels.
    pub tunnel_src_v4: Option<Ipv4Addr>,
    /// Outer source address of IPv6 tunnels.
    pub tunnel_src_v6: Option<Ipv6Addr>,
    /// Addresses of the balancer itself (answered by ARP, handed to the host).
    pub own_addrs: Vec<IpAddr>,
    /// MAC of each port, in `[[ports]]` order: a reply (ARP, NDP, TCP reset)
    /// leaves with the MAC of the port its request came in on. Empty (or
    /// shorter) means `mac` for every port.
    pub port_macs: Vec<MacAddr>,
    /// MTU of the port packets to backends leave on (M48); `None` (no
    /// ports, offline replays): no limit.
    pub egress_mtu: Option<u16>,
    /// The MACs resolved for next hops (M47), from the management core's
    /// neighbour table; a next hop not listed is unresolved.
    pub neighbours: Vec<(NextHop, MacAddr)>,
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
    /// Appliances (backends of gateway services) by address, sorted: the
    /// only sources a returned Geneve packet is taken from (M32).
    pub appliances: Vec<(IpAddr, u32)>,
    /// Health probes through VIPs (M52), sorted by source port: what the
    /// host sends from one of these ports to its VIP goes to its backend.
    pub probe_steering: Vec<ProbeSteer>,
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
        self.gateways
            .iter()
            .enumerate()
            .find(|(_, g)| g.port == port && g.mac != [0; 6] && g.mac[..] == *mac)
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
            let hop = crate::nexthop::gateway_endpoint_hop(compiled, g.address);
            Some(GatewayHop {
                address: g.address,
                port: hop.map_or(0, |h| h.port),
                mac: hop
                    .and_then(|h| local.mac_of(Hop::Resolved(h)))
                    .unwrap_or_default(),
                id: g.id,
                child: child.index(),
                svc: g.service.index(),
                flow_tag: g.flow_tag,
                protocol: rule.protocol,
            })
        })
        .collect()
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
}

impl Rules {
    /// The rule index and client zones of `compiled`.
    pub fn from_config(compiled: &Compiled) -> Rules {
        Rules {
            index: compiled.rule_index.clone(),
            client_zones: compiled.client_zones.clone(),
            children: compiled.children.len(),
        }
    }

    /// The rule for a packet to `dst` with protocol `proto` and destination
    /// port `port` (`None` for a fragment: `RuleIndex::lookup_fragment`), or
    /// whether `dst` is a VIP at all (`RuleIndex::select`: one search).
    #[inline]
    pub fn select(&self, dst: IpAddr, proto: u8, port: Option<u16>) -> Result<RuleMatch, bool> {
        self.index.select(dst, proto, port)
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
}

/// MAC used when neither the configuration nor a device gives one
/// (offline replays): locally administered, "SPW".
pub const DEFAULT_MAC: MacAddr = [0x02, 0x53, 0x50, 0x57, 0x00, 0x01];

impl Local {
    /// The balancer's addresses from `[[ports]]`: packets to backends leave
    /// through the `backend` port if there is one, else the `uplink` port;
    /// its MAC (configured, else `device_mac(device)`, else [`DEFAULT_MAC`]),
    /// its gateway MAC as next hop, and its first address of each family as
    /// tunnel source. Every configured address is the balancer's own.
    pub fn from_config(compiled: &Compiled, device_mac: impl Fn(&str) -> Option<MacAddr>) -> Local {
        let ports = &compiled.settings.ports;
        let out = config::schema::egress_port(ports).map(|(_, p)| p);
        let mut local = Local {
            mac: DEFAULT_MAC,
            own_addrs: ports
                .iter()
                .flat_map(|p| p.addresses.iter().map(|a| a.addr))
                .collect(),
            ..Local::default()
        };
        local.port_macs = ports
            .iter()
            .map(|p| {
                p.mac
                    .map(|m| m.0)
                    .or_else(|| device_mac(&p.device))
                    .unwrap_or(DEFAULT_MAC)
            })
            .collect();
        if let Some(p) = out {
            local.mac = p
                .mac
                .map(|m| m.0)
                .or_else(|| device_mac(&p.device))
                .unwrap_or(DEFAULT_MAC);
            local.next_hop_mac = p.gateway_mac.map(|m| m.0).unwrap_or_default();
            local.egress_mtu = Some(p.mtu);
            for a in &p.addresses {
                match a.addr {
                    IpAddr::V4(v4) => {
                        local.tunnel_src_v4.get_or_insert(v4);
                    }
                    IpAddr::V6(v6) => {
                        local.tunnel_src_v6.get_or_insert(v6);
                    }
                }
            }
        }
        local
    }
}

impl Local {
    /// The MAC `hop` leads to, if it is known (never all zero).
    pub fn mac_of(&self, hop: Hop) -> Option<MacAddr> {
        let mac = match hop {
            Hop::Static(m) => m,
            Hop::Default => self.next_hop_mac,
            Hop::Resolved(h) => self
                .neighbours
                .iter()
                .find(|(n, _)| *n == h)
                .map(|(_, m)| *m)?,
        };
        (mac != [0; 6]).then_some(mac)
    }

    /// Whether every address of `ep` has a next hop with a MAC (M47): one
    /// that has not takes no new flows.
    pub fn endpoint_resolved(&self, compiled: &Compiled, ep: &config::compiled::Endpoint) -> bool {
        self.mac_of(endpoint_hop(compiled, ep)).is_some()
            && crate::nexthop::endpoint_hop6(compiled, ep).is_none_or(|h| self.mac_of(h).is_some())
    }
}

impl Snapshot {
    /// Whether `addr` belongs to the balancer itself.
    pub fn is_own(&self, addr: IpAddr) -> bool {
        self.local.own_addrs.contains(&addr)
    }
}

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

/// What a Maglev table is built from (M12): its size and its endpoints
/// (identity, weight) in order. Equal keys give equal tables, so the builder
/// keeps tables by key and a rebuild builds only those whose inputs changed.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TableKey {
    /// The table-building algorithm (the service's `hash`).
    pub algorithm: maglev::Algorithm,
    /// Table size (a prime).
    pub size: u32,
    /// Endpoints, in the order the table numbers them.
    pub endpoints: Vec<maglev::Endpoint>,
}

impl TableKey {
    /// Builds the table. Pure: any thread may do it.
    pub fn build(&self) -> Result<MaglevTable, maglev::BuildError> {
        MaglevTable::build(
            self.algorithm,
            maglev::TableSize::new(self.size)?,
            &self.endpoints,
        )
    }
}

#[derive(Debug)]
struct SlotRecord {
    backend: Backend,
    drain_ticks: Tick,
    seen: bool,
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

/// One table's endpoints: (index within the service, Maglev endpoint).
type EndpointSet = Vec<(usize, maglev::Endpoint)>;

/// A service's selection before backend slots are attached: per region that
/// takes a share of new connections, its non-empty tables (endpoints by
/// their index within the service, with weights) and the client zones of
/// its variants.
struct Selection {
    regions: Vec<(Vec<EndpointSet>, Vec<ZoneId>)>,
    thresholds: Vec<u32>,
    /// Every endpoint is unhealthy and the service fails open (M23): all of
    /// them are used as if healthy, existing flows included.
    fail_open: bool,
}

/// What `svc` selects from, given health and its locality plan (a service
/// without one gets a single table over its eligible endpoints).
fn select(
    compiled: &Compiled,
    svc: &config::compiled::Service,
    health: &impl Fn(ConfigEndpointId) -> EndpointHealth,
    plan: Option<&locality::Plan>,
    local: &Local,
) -> Selection {
    // Every endpoint by its index within the service (what a plan names):
    // its Maglev identity, weight, and whether it may take new flows:
    // healthy, and its next hop resolved (M47).
    let eps: Vec<(maglev::Endpoint, bool, bool)> = svc
        .endpoint_ids()
        .filter_map(|ep_id| {
            let ep = compiled.endpoints.get(ep_id.0 as usize)?;
            let h = health(ep_id);
            let weight = match svc.load_balancing {
                LoadBalancing::Maglev => 1,
                LoadBalancing::WeightedMaglev => u32::from(h.weight.unwrap_or(ep.weight)),
            };
            let id = maglev::EndpointId::from_bytes(ep.identity.as_bytes());
            let resolved = local.endpoint_resolved(compiled, ep);
            Some((maglev::Endpoint { id, weight }, h.healthy, resolved))
        })
        .collect();
    let non_empty =
        |sets: Vec<EndpointSet>| -> Vec<_> { sets.into_iter().filter(|s| !s.is_empty()).collect() };
    match plan {
        Some(plan) => Selection {
            regions: plan
                .regions
                .iter()
                .map(|share| {
                    let sets = share
                        .tables()
                        .map(|set| {
                            set.iter()
                                .filter(|w| w.weight > 0)
                                .filter_map(|w| {
                                    let i = w.endpoint as usize;
                                    // The plan weighs health; an unresolved
                                    // next hop takes no new flows whatever
                                    // the plan says.
                                    let (e, _, resolved) = eps.get(i)?;
                                    if !resolved {
                                        return None;
                                    }
                                    Some((
                                        i,
                                        maglev::Endpoint {
                                            id: e.id,
                                            weight: w.weight,
                                        },
                                    ))
                                })
                                .collect()
                        })
                        .collect();
                    (
                        non_empty(sets),
                        share.zone_variants.iter().map(|v| v.zone).collect(),
                    )
                })
                .collect(),
            thresholds: plan.thresholds.clone(),
            fail_open: plan.eligibility == locality::Eligibility::FailOpen,
        },
        None => {
            // Fail-open (M23) is about health: an endpoint whose next hop
            // is unresolved (M47) never takes new flows.
            let weighted = || {
                eps.iter()
                    .enumerate()
                    .filter(|(_, (e, _, resolved))| e.weight > 0 && *resolved)
            };
            let mut eligible: EndpointSet = weighted()
                .filter(|(_, (_, healthy, _))| *healthy)
                .map(|(i, (e, _, _))| (i, *e))
                .collect();
            // Fail-open (M23): with every endpoint unhealthy, use them all.
            let fail_open = eligible.is_empty() && svc.fail_open && weighted().next().is_some();
            if fail_open {
                eligible = weighted().map(|(i, (e, _, _))| (i, *e)).collect();
            }
            if eligible.is_empty() {
                Selection {
                    regions: Vec::new(),
                    thresholds: Vec::new(),
                    fail_open,
                }
            } else {
                Selection {
                    regions: vec![(vec![eligible], Vec::new())],
                    thresholds: vec![u32::MAX],
                    fail_open,
                }
            }
        }
    }
}

fn table_key(svc: &config::compiled::Service, set: &[(usize, maglev::Endpoint)]) -> TableKey {
    TableKey {
        algorithm: match svc.hash {
            config::schema::HashAlgorithm::MaglevV1 => maglev::Algorithm::V1,
            config::schema::HashAlgorithm::MaglevV2 => maglev::Algorithm::V2,
        },
        size: svc.maglev_table_size,
        endpoints: set.iter().map(|(_, e)| *e).collect(),
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

    /// A service's plan for the pipeline from its selection: its Maglev
    /// tables (kept from before, or built) with their backend slots.
    fn service_plan(
        &self,
        svc: &config::compiled::Service,
        sel: Selection,
        slot_of: &[u32],
        plan: Option<&locality::Plan>,
        used: &mut HashMap<TableKey, Arc<MaglevTable>>,
    ) -> Result<ServicePlan, SnapshotError> {
        let mut regions = Vec::with_capacity(sel.regions.len());
        for (sets, zones) in sel.regions {
            let mut tables = Vec::with_capacity(sets.len());
            for set in sets {
                let key = table_key(svc, &set);
                let table = match used.get(&key).or_else(|| self.tables.get(&key)) {
                    Some(t) => t.clone(),
                    None => Arc::new(key.build().map_err(|source| SnapshotError::Maglev {
                        service: svc.name.clone(),
                        source,
                    })?),
                };
                tables.push(SlotTable {
                    table: table.clone(),
                    slots: set
                        .iter()
                        .map(|(i, _)| slot_of.get(*i).copied().unwrap_or(u32::MAX))
                        .collect(),
                });
                used.insert(key, table);
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
            flow_tag: svc.flow_tag,
            fail_open: sel.fail_open,
            locality: plan.map(|p| Arc::new(p.clone())),
        })
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
        let generation = self.generation.wrapping_add(1);
        let mut used: HashMap<TableKey, Arc<MaglevTable>> = HashMap::new();
        let mut services = Vec::with_capacity(compiled.services.len());
        // Services of gateway rules (M31): their backends are appliances.
        let gateway_svc: Vec<bool> = (0..compiled.services.len())
            .map(|i| compiled.gateways.iter().any(|g| g.service.index() == i))
            .collect();
        let mut appliances: Vec<(IpAddr, u32)> = Vec::new();
        let mut slots_of: Vec<Vec<u32>> = Vec::with_capacity(compiled.services.len());
        // Backend slot of every endpoint, by its index in `compiled.endpoints`.
        let mut endpoint_slot: Vec<u32> = vec![u32::MAX; compiled.endpoints.len()];
        for (svc_index, svc) in compiled.services.iter().enumerate() {
            let svc_id = u32::try_from(svc_index).unwrap_or(u32::MAX);
            let drain_ticks = ticks(svc.connection_draining_timeout, ticks_per_second);
            let sel = select(
                &compiled,
                svc,
                &health,
                plans.get(svc_index).and_then(Option::as_ref),
                &local,
            );
            // Backend slot of every endpoint, by its index within the service.
            let mut slot_of: Vec<u32> = Vec::new();
            for ep_id in svc.endpoint_ids() {
                let Some(ep) = compiled.endpoints.get(ep_id.0 as usize) else {
                    continue;
                };
                let h = health(ep_id);
                let backend = Backend {
                    addr: ep.address,
                    mac: local
                        .mac_of(endpoint_hop(&compiled, ep))
                        .unwrap_or_default(),
                    service: svc_id,
                    // Failing open, every endpoint serves as if healthy: its
                    // flows stay on it instead of moving at every packet.
                    state: if h.healthy || sel.fail_open {
                        BackendState::Active
                    } else {
                        BackendState::Unhealthy {
                            until: now.wrapping_add(drain_ticks),
                        }
                    },
                    assigned: generation,
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
                            mac: crate::nexthop::endpoint_hop6(&compiled, ep)
                                .and_then(|h| local.mac_of(h))
                                .unwrap_or_default(),
                            encap: None,
                            max_ip_len: u32::MAX,
                        })
                    }),
                };
                let slot = self.slot_for(&svc.name, &ep.identity, backend, drain_ticks);
                if gateway_svc.get(svc_index).copied().unwrap_or(false) {
                    appliances.push((ep.address, slot));
                }
                slot_of.push(slot);
                if let Some(s) = endpoint_slot.get_mut(ep_id.0 as usize) {
                    *s = slot;
                }
            }
            let plan = plans.get(svc_index).and_then(Option::as_ref);
            services.push(self.service_plan(svc, sel, &slot_of, plan, &mut used)?);
            slots_of.push(slot_of);
        }
        // VIPs whose endpoints' verdicts differ from their service's (M52,
        // M8): plans of their own, which their child rules take.
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
            let sel = select(&compiled, svc, &health, Some(&plan), &local);
            let sp = self.service_plan(svc, sel, slot_of, Some(&plan), &mut used)?;
            let index = u32::try_from(services.len()).unwrap_or(u32::MAX);
            services.push(sp);
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
        // Backends that left the configuration drain, then go; a removed
        // backend's slot is free for a new endpoint.
        for (i, rec) in self.slots.iter_mut().enumerate().filter(|(_, r)| !r.seen) {
            rec.backend.state = match rec.backend.state {
                BackendState::Active | BackendState::Unhealthy { .. } => BackendState::Draining {
                    until: now.wrapping_add(rec.drain_ticks),
                },
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
                && let Some(svc) = compiled.services.iter().position(|s| s.name == rec.key.0)
                && gateway_svc.get(svc).copied().unwrap_or(false)
            {
                rec.backend.service = u32::try_from(svc).unwrap_or(u32::MAX);
                appliances.push((rec.backend.addr, u32::try_from(i).unwrap_or(u32::MAX)));
            }
        }
        self.free.sort_unstable_by(|a, b| b.cmp(a));
        self.free.dedup();
        // Keep the tables this snapshot uses, drop the rest.
        self.tables = used;
        self.generation = generation;
        let mut backends: Vec<Backend> = self.slots.iter().map(|r| r.backend.clone()).collect();
        for be in &mut backends {
            // No template while the next hop is unresolved: such packets
            // leave the established fast path for `delivery::deliver`, which
            // drops them (`no_neighbour`), so the fast path tests nothing.
            let gateway = gateway_svc
                .get(be.service as usize)
                .copied()
                .unwrap_or(false);
            let template = services
                .get(be.service as usize)
                .filter(|_| be.mac != [0; 6])
                .and_then(|p| crate::delivery::template(&local, be, p.delivery, gateway));
            let overhead = template.as_ref().map_or(0, Template::overhead);
            be.max_ip_len = local.egress_mtu.map_or(u32::MAX, |m| {
                u32::from(m).saturating_sub(u32::try_from(overhead).unwrap_or(u32::MAX))
            });
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
                    .then(|| crate::delivery::template_to(&local, v6.addr, v6.mac, delivery))
                    .flatten();
                let overhead = v6.encap.as_ref().map_or(0, Template::overhead);
                v6.max_ip_len = local.egress_mtu.map_or(u32::MAX, |m| {
                    u32::from(m).saturating_sub(u32::try_from(overhead).unwrap_or(u32::MAX))
                });
            }
        }
        // An address listed twice (two gateway services) answers for its
        // first slot.
        appliances.sort_by_key(|&(a, _)| a);
        appliances.dedup_by_key(|&mut (a, _)| a);
        let per_second = compiled.settings.dataplane.new_flow_budget_per_worker();
        let too_big = compiled.settings.dataplane.icmp_too_big_rate;
        let echo = compiled.settings.dataplane.icmp_echo_rate;
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
        Ok(Snapshot {
            generation: self.generation,
            new_flow_budget: (per_second / ticks_per_second.max(1)).max(1),
            // A rate below the tick rate still sends some: one a tick.
            too_big_budget: if too_big == 0 {
                0
            } else {
                (too_big / ticks_per_second.max(1)).max(1)
            },
            echo_budget: if echo == 0 {
                0
            } else {
                (echo / ticks_per_second.max(1)).max(1)
            },
            cookie_key: self.cookie_key,
            appliance_port: config::schema::egress_port(&compiled.settings.ports).map(|(i, _)| i),
            gateway_mismatch_budget: (compiled.settings.dataplane.gateway_mismatch_rate
                / ticks_per_second.max(1))
            .max(1),
            rules: Rules::from_config(&compiled),
            tunnel_ingress: compiled.tunnel_ingress.clone(),
            gateways: gateway_hops(&compiled, &local),
            appliances,
            probe_steering,
            child_plans,
            compiled,
            services,
            backends,
            local,
        })
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

fn ticks(d: std::time::Duration, per_second: u32) -> Tick {
    let t = d.as_millis().saturating_mul(u128::from(per_second)) / 1000;
    Tick::try_from(t).unwrap_or(Tick::MAX / 2)
}

/// Flow-table settings from `[dataplane]` (one tick per second).
pub fn flow_table_config(dp: &config::schema::Dataplane) -> flowtable::Config {
    let secs = |d: config::values::Duration| ticks(d.0, 1).max(1);
    let mut cfg = flowtable::Config::with_capacity(dp.flow_table_capacity as usize);
    cfg.timeouts = flowtable::Timeouts {
        tcp_established: secs(dp.timeouts.tcp_established),
        tcp_half_open: secs(dp.timeouts.tcp_half_open),
        tcp_fin: secs(dp.timeouts.tcp_closing),
        tcp_rst: secs(dp.timeouts.tcp_closing),
        udp: secs(dp.timeouts.udp),
        other: secs(dp.timeouts.other),
        first_packet: secs(dp.timeouts.first_packet),
    };
    cfg
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
