//! The immutable snapshot compiled from a validated config: what the data
//! plane and the management core read.
//!
//! Names become dense `u32` indices so that the data plane indexes vectors
//! instead of hashing strings, and rule selection (SPEC M3) becomes a
//! binary search per packet: [`RuleIndex::lookup`] never allocates.
//!
//! `compile` is crate-private: a `Compiled` exists only for a config that
//! passed validation (its invariants, e.g. disjoint port intervals per VIP
//! and protocol, are what make the lookup correct).

use std::fmt::Write as _;
use std::net::IpAddr;
use std::ops::Range;

use crate::schema::{
    Aggregation, BalancingMode, Config, ConnectionPersistence, DeliveryMode, GeneveOptions,
    GroupKind, HashAlgorithm, HealthCheck, LoadBalancing, Locality, NoBackendAction, Protocol,
    RemoteRule, RuleMode, SessionAffinity,
};
use crate::values::{MacAddr, PortSpec, Prefix};

macro_rules! id {
    ($(#[$m:meta])* $name:ident) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(pub u32);

        impl $name {
            /// The index into its vector.
            pub const fn index(self) -> usize {
                self.0 as usize
            }
        }
    };
}

id!(
    /// Index into [`Compiled::rules`].
    RuleId
);
id!(
    /// Index into [`Compiled::children`] (`<rule>-ag0` / `<rule>-ag1`).
    ChildRuleId
);
id!(
    /// Index into [`Compiled::services`].
    ServiceId
);
id!(
    /// Index into [`Compiled::groups`].
    GroupId
);
id!(
    /// Index into [`Compiled::endpoints`].
    EndpointId
);
id!(
    /// Index into [`Compiled::regions`]; lower is nearer (M24).
    RegionId
);
id!(
    /// Index into [`Compiled::zones`].
    ZoneId
);
id!(
    /// Index into [`Compiled::health_checks`].
    HealthCheckId
);
id!(
    /// Index into [`Compiled::composites`].
    CompositeId
);

/// IP protocol numbers that `L3_DEFAULT` matches (M2).
pub const L3_DEFAULT_PROTOCOLS: [u8; 6] = [
    1,  // ICMP
    6,  // TCP
    17, // UDP
    47, // GRE
    50, // ESP
    58, // ICMPv6
];
const TCP: u8 = 6;
const UDP: u8 = 17;

/// A packet's rule: the rule and the child rule (VIP / availability group)
/// whose counters it goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RuleMatch {
    /// The forwarding rule.
    pub rule: RuleId,
    /// The child rule of the destination VIP.
    pub child: ChildRuleId,
    /// The rule's backend service (copied here so that the data plane's
    /// per-packet path needs no second lookup into `rules`).
    pub service: ServiceId,
    /// Whether the rule is a gateway-mode rule (likewise copied).
    pub gateway: bool,
}

#[derive(Clone, Debug)]
struct Interval {
    lo: u16,
    hi: u16,
    hit: RuleMatch,
}

#[derive(Clone, Debug)]
struct VipRules {
    addr: IpAddr,
    /// Sorted, disjoint (validation guarantees it).
    tcp: Vec<Interval>,
    udp: Vec<Interval>,
    l3_default: Option<RuleMatch>,
}

/// Destination address → protocol → port → rule (SPEC M3).
#[derive(Clone, Debug, Default)]
pub struct RuleIndex {
    /// Sorted by address key ([`addr_key`]).
    vips: Vec<VipRules>,
    /// `addr_key` of each entry of `vips`: searched as integers, not as
    /// `IpAddr`s (whose ordering compares byte by byte).
    keys: Vec<u128>,
}

/// An address as one integer (IPv4 as IPv4-mapped IPv6).
#[inline]
fn addr_key(a: IpAddr) -> u128 {
    match a {
        IpAddr::V4(v4) => 0xffff_0000_0000 | u128::from(u32::from(v4)),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

impl RuleIndex {
    #[inline]
    fn find(&self, dst: IpAddr) -> Option<&VipRules> {
        // `::ffff:a.b.c.d` shares its key with the IPv4 VIP a.b.c.d, but it
        // is an IPv6 destination (one that never appears on the wire):
        // never a VIP (validation rejects such VIPs).
        if let IpAddr::V6(v6) = dst {
            if v6.to_ipv4_mapped().is_some() {
                return None;
            }
        }
        let i = self.keys.binary_search(&addr_key(dst)).ok()?;
        self.vips.get(i)
    }

    /// The rule for a packet to `dst` with IP protocol `proto` and
    /// destination port `dst_port` (`None` for protocols without ports and
    /// non-first fragments), or `None`: drop (M3, M6).
    ///
    /// A TCP/UDP rule whose ports contain the port wins over `L3_DEFAULT`;
    /// a packet without a port matches only all-port rules. No allocation.
    #[inline]
    pub fn lookup(&self, dst: IpAddr, proto: u8, dst_port: Option<u16>) -> Option<RuleMatch> {
        let v = self.find(dst)?;
        let specific = match proto {
            TCP => Some(&v.tcp),
            UDP => Some(&v.udp),
            _ => None,
        };
        if let Some(iv) = specific {
            let hit = match dst_port {
                Some(p) => iv
                    .get(iv.partition_point(|x| x.hi < p))
                    .filter(|x| x.lo <= p),
                // All-port rules are the only ones containing "no port";
                // such a rule covers 0-65535, so it is the only interval.
                None => iv.first().filter(|x| x.lo == 0 && x.hi == u16::MAX),
            };
            if let Some(h) = hit {
                return Some(h.hit);
            }
        }
        if L3_DEFAULT_PROTOCOLS.contains(&proto) {
            v.l3_default
        } else {
            None
        }
    }

    /// The rule for a real IP fragment (first or later) to `dst` with
    /// protocol `proto` (SPEC M13). A fragment can never prove its ports —
    /// later fragments have none, and a first fragment's header says nothing
    /// about the fragments that follow it — so it matches only a rule that
    /// accepts every port of its protocol: a TCP/UDP `all` rule, else
    /// `L3_DEFAULT`. A VIP whose only TCP rule is `TCP 80` therefore drops
    /// every TCP fragment: otherwise a fragmented SYN to port 22 would reach
    /// the backends through a rule that lists only port 80. Every fragment
    /// of a datagram gets the same answer, so all of them reach one service.
    #[inline]
    pub fn lookup_fragment(&self, dst: IpAddr, proto: u8) -> Option<RuleMatch> {
        self.lookup(dst, proto, None)
    }

    /// Whether `addr` is a VIP this node serves (it answers ARP/NDP for it
    /// and counts unmatched traffic as "VIP, no rule" rather than "not ours").
    pub fn is_vip(&self, addr: IpAddr) -> bool {
        self.find(addr).is_some()
    }

    /// The VIPs this node serves, in address order.
    pub fn vips(&self) -> impl Iterator<Item = IpAddr> + '_ {
        self.vips.iter().map(|v| v.addr)
    }

    /// Rules reachable at `vip`, in selection order per protocol: TCP
    /// intervals, UDP intervals, then L3_DEFAULT (for summaries and status).
    pub fn rules_at(&self, vip: IpAddr) -> Vec<RuleId> {
        let Ok(i) = self.keys.binary_search(&addr_key(vip)) else {
            return Vec::new();
        };
        let v = &self.vips[i];
        let mut out: Vec<RuleId> = Vec::new();
        for x in v.tcp.iter().chain(&v.udp) {
            if !out.contains(&x.hit.rule) {
                out.push(x.hit.rule);
            }
        }
        out.extend(v.l3_default.map(|m| m.rule));
        out
    }
}

/// `[node]`, resolved.
#[derive(Clone, Debug)]
pub struct NodeInfo {
    /// Node name.
    pub name: String,
    /// Own region.
    pub region: RegionId,
    /// Own zone.
    pub zone: ZoneId,
    /// `Some(g)`: only availability group `g` is served (M5).
    pub availability_group: Option<u8>,
    /// Forwarding after route withdrawal on shutdown.
    pub shutdown_drain: std::time::Duration,
}

/// A forwarding rule.
#[derive(Clone, Debug)]
pub struct Rule {
    /// Name.
    pub name: String,
    /// Protocol.
    pub protocol: Protocol,
    /// Ports.
    pub ports: PortSpec,
    /// Passthrough or gateway.
    pub mode: RuleMode,
    /// Service taking its traffic.
    pub service: ServiceId,
    /// One child per VIP, availability group 0 first.
    pub children: Vec<ChildRuleId>,
    /// Gateway mode: endpoint address → 64-bit ID.
    pub gateway_endpoints: Vec<(IpAddr, u64)>,
    /// The composite whose state this rule exports (M20), if any.
    pub composite: Option<CompositeId>,
}

/// A rule's presence on one VIP: the unit of metrics (M5).
#[derive(Clone, Debug)]
pub struct ChildRule {
    /// `<rule>-ag0` or `<rule>-ag1`.
    pub name: String,
    /// Parent rule.
    pub rule: RuleId,
    /// 0 or 1.
    pub availability_group: u8,
    /// The VIP.
    pub vip: IpAddr,
    /// Whether this node serves (and announces) it.
    pub served: bool,
}

/// Delivery with its parameters (M8, M30).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// Destination-MAC rewrite.
    L2dsr,
    /// IP-in-IP.
    Ipip,
    /// GRE with an optional key.
    Gre {
        /// GRE key.
        key: Option<u32>,
    },
    /// GUE variant 1.
    Gue {
        /// Outer UDP destination port.
        port: u16,
    },
    /// Geneve.
    Geneve {
        /// Outer UDP destination port.
        port: u16,
        /// Option class.
        option_class: u16,
        /// Type of the gateway-endpoint-ID option.
        endpoint_id_type: u8,
        /// Type of the flow-cookie option.
        flow_cookie_type: u8,
    },
}

impl std::fmt::Display for Delivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Delivery::L2dsr => f.write_str("l2dsr"),
            Delivery::Ipip => f.write_str("ipip"),
            Delivery::Gre { key: None } => f.write_str("gre"),
            Delivery::Gre { key: Some(k) } => write!(f, "gre (key {k})"),
            Delivery::Gue { port } => write!(f, "gue (port {port})"),
            Delivery::Geneve {
                port,
                option_class,
                endpoint_id_type,
                flow_cookie_type,
            } => write!(
                f,
                "geneve (port {port}, option class {option_class:#06x}, types {endpoint_id_type}/{flow_cookie_type})"
            ),
        }
    }
}

/// Default GUE port (Katran's and GLB's deployments each pick one; 6080 is
/// the IANA-registered GUE port).
pub const GUE_PORT: u16 = 6080;
/// Default target utilization of `UTILIZATION` mode.
pub const DEFAULT_MAX_UTILIZATION: f64 = 0.8;

/// Capacity settings (M25).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Balancing {
    /// RATE or UTILIZATION.
    pub mode: BalancingMode,
    /// RATE: per-endpoint packets per second.
    pub max_rate_per_endpoint: Option<u64>,
    /// UTILIZATION: target (0, 1].
    pub max_utilization: f64,
}

/// A backend service.
#[derive(Clone, Debug)]
pub struct Service {
    /// Name.
    pub name: String,
    /// Delivery.
    pub delivery: Delivery,
    /// M9.
    pub session_affinity: SessionAffinity,
    /// M11.
    pub connection_persistence: ConnectionPersistence,
    /// M11; zero: no draining.
    pub connection_draining_timeout: std::time::Duration,
    /// M12.
    pub load_balancing: LoadBalancing,
    /// Maglev table size (prime).
    pub maglev_table_size: u32,
    /// Hash algorithm version.
    pub hash: HashAlgorithm,
    /// Health check of its endpoints.
    pub health_check: Option<HealthCheckId>,
    /// M19.
    pub aggregation: Aggregation,
    /// M23.
    pub fail_open: bool,
    /// M14.
    pub no_backend_action: NoBackendAction,
    /// M25.
    pub balancing: Balancing,
    /// M27, M28.
    pub locality: Locality,
    /// Kind shared by all its groups.
    pub kind: GroupKind,
    /// Its groups.
    pub groups: Range<u32>,
    /// Its endpoints (of all groups, group by group).
    pub endpoints: Range<u32>,
    /// Rules sending to it (they share its capacity: M4).
    pub rules: Vec<RuleId>,
    /// The service's part of its flows' identity in the flow table (M38):
    /// derived from its name, so that reordering, adding or removing other
    /// `[[backend_services]]` blocks never orphans an existing flow. See
    /// [`assign_flow_tags`].
    pub flow_tag: u16,
}

impl Service {
    /// Ids of its groups.
    pub fn group_ids(&self) -> impl Iterator<Item = GroupId> + use<> {
        self.groups.clone().map(GroupId)
    }

    /// Ids of its endpoints.
    pub fn endpoint_ids(&self) -> impl Iterator<Item = EndpointId> + use<> {
        self.endpoints.clone().map(EndpointId)
    }
}

/// A backend group.
#[derive(Clone, Debug)]
pub struct Group {
    /// Name (unique within its service).
    pub name: String,
    /// Its service.
    pub service: ServiceId,
    /// Region.
    pub region: RegionId,
    /// Zone.
    pub zone: ZoneId,
    /// 0.0–1.0.
    pub capacity_scaler: f64,
    /// RATE: packets per second of the group.
    pub max_rate: Option<u64>,
    /// Its endpoints.
    pub endpoints: Range<u32>,
    /// `remote_rule` groups: the remote rule (its VIP is also the group's
    /// single endpoint, so selection treats both kinds alike).
    pub remote: Option<RemoteRule>,
}

/// An endpoint.
#[derive(Clone, Debug)]
pub struct Endpoint {
    /// Where packets go.
    pub address: IpAddr,
    /// Configured port (health checks).
    pub port: Option<u16>,
    /// Port the health check probes (the check's own, else the endpoint's).
    pub health_port: Option<u16>,
    /// Relative weight 0–1000.
    pub weight: u16,
    /// l2dsr: fixed MAC.
    pub mac: Option<MacAddr>,
    /// Stable identity for Maglev's permutation (`10.0.0.1`, `10.0.0.1:80`,
    /// `[fd00::1]:80`): the same endpoint hashes the same on every node and
    /// across reloads, whatever its position in the file.
    pub identity: String,
    /// Its group.
    pub group: GroupId,
    /// Its service.
    pub service: ServiceId,
}

/// A composite health check (M20).
#[derive(Clone, Debug)]
pub struct Composite {
    /// Name.
    pub name: String,
    /// Sources with their aggregation policy.
    pub sources: Vec<(ServiceId, Aggregation)>,
    /// The rule that exports its state.
    pub destination: RuleId,
}

/// The snapshot.
#[derive(Clone, Debug)]
pub struct Compiled {
    /// This node.
    pub node: NodeInfo,
    /// Rules.
    pub rules: Vec<Rule>,
    /// Child rules.
    pub children: Vec<ChildRule>,
    /// Rule selection.
    pub rule_index: RuleIndex,
    /// Services.
    pub services: Vec<Service>,
    /// Groups.
    pub groups: Vec<Group>,
    /// Endpoints.
    pub endpoints: Vec<Endpoint>,
    /// Health checks.
    pub health_checks: Vec<HealthCheck>,
    /// Composite health checks.
    pub composites: Vec<Composite>,
    /// Regions, nearest first: `node.region_preference`, then the other
    /// regions in name order (the node's own first when no order is given).
    pub regions: Vec<String>,
    /// Zones in order of first mention.
    pub zones: Vec<String>,
    /// Client prefixes → zone, longest prefix first (M27).
    pub client_zones: Vec<(Prefix, ZoneId)>,
    /// Gateway endpoint address → (gateway rule, endpoint ID), sorted by
    /// address (each address belongs to one rule: validation).
    pub gateway_sources: Vec<(IpAddr, RuleId, u64)>,
    /// `[dataplane]`, `[[ports]]`, `[bgp]`, `[flow_sync]`, `[metrics]`,
    /// `[control]` as written: settings, not per-packet state.
    pub settings: Settings,
}

/// Settings the daemon reads at start (cores, ports) or hands to its
/// subsystems; they need no compilation.
#[derive(Clone, Debug)]
pub struct Settings {
    /// `[dataplane]`.
    pub dataplane: crate::schema::Dataplane,
    /// `[[ports]]`.
    pub ports: Vec<crate::schema::Port>,
    /// `[bgp]`.
    pub bgp: Option<crate::schema::Bgp>,
    /// `[flow_sync]`.
    pub flow_sync: Option<crate::schema::FlowSync>,
    /// `[metrics]`.
    pub metrics: crate::schema::Metrics,
    /// `[control]`.
    pub control: crate::schema::Control,
}

impl Compiled {
    /// The zone of a client address, by longest prefix (M27). No allocation.
    pub fn client_zone(&self, src: IpAddr) -> Option<ZoneId> {
        self.client_zones
            .iter()
            .find(|(p, _)| p.contains(src))
            .map(|&(_, z)| z)
    }

    /// The gateway-mode rule and endpoint ID for traffic from `src` (M31).
    /// Binary search, no allocation.
    pub fn gateway_endpoint(&self, src: IpAddr) -> Option<(RuleId, u64)> {
        let i = self
            .gateway_sources
            .binary_search_by(|(a, _, _)| a.cmp(&src))
            .ok()?;
        let (_, rule, id) = self.gateway_sources[i];
        Some((rule, id))
    }

    /// Endpoints of a service.
    pub fn service_endpoints(&self, s: ServiceId) -> &[Endpoint] {
        let r = &self.services[s.index()].endpoints;
        &self.endpoints[r.start as usize..r.end as usize]
    }
}

fn intern(list: &mut Vec<String>, name: &str) -> u32 {
    match list.iter().position(|n| n == name) {
        Some(i) => i as u32,
        None => {
            list.push(name.to_owned());
            (list.len() - 1) as u32
        }
    }
}

/// Compiles a config that passed `validate` (unresolvable names cannot
/// occur; should one, it would resolve to index 0 rather than panic).
pub(crate) fn compile(cfg: &Config) -> Compiled {
    // Regions: the preference order, then the rest by name.
    let mut regions: Vec<String> = cfg.node.region_preference.clone();
    if regions.is_empty() {
        regions.push(cfg.node.region.clone());
    }
    let mut others: Vec<&str> = cfg
        .backend_services
        .iter()
        .flat_map(|s| &s.groups)
        .map(|g| g.region.as_str())
        .chain([cfg.node.region.as_str()])
        .filter(|r| !regions.iter().any(|x| x == r))
        .collect();
    others.sort_unstable();
    others.dedup();
    regions.extend(others.into_iter().map(str::to_owned));

    let mut zones: Vec<String> = Vec::new();
    let node_zone = ZoneId(intern(&mut zones, &cfg.node.zone));

    let hc_id = |name: &str| {
        cfg.health_checks
            .iter()
            .position(|h| h.name == name)
            .map(|i| HealthCheckId(i as u32))
    };
    let svc_id = |name: &str| {
        ServiceId(
            cfg.backend_services
                .iter()
                .position(|s| s.name == name)
                .unwrap_or(0) as u32,
        )
    };
    let region_id = |regions: &[String], name: &str| {
        RegionId(regions.iter().position(|r| r == name).unwrap_or(0) as u32)
    };

    let mut services = Vec::new();
    let mut groups = Vec::new();
    let mut endpoints = Vec::new();
    for (si, s) in cfg.backend_services.iter().enumerate() {
        let sid = ServiceId(si as u32);
        let check = s.health_check.as_deref().and_then(hc_id);
        let check_port = check.and_then(|c| cfg.health_checks[c.index()].port);
        let g_start = groups.len() as u32;
        let e_start = endpoints.len() as u32;
        for g in &s.groups {
            let gid = GroupId(groups.len() as u32);
            let ge_start = endpoints.len() as u32;
            for e in &g.endpoints {
                let identity = match (e.address, e.port) {
                    (a, None) => a.to_string(),
                    (IpAddr::V4(a), Some(p)) => format!("{a}:{p}"),
                    (IpAddr::V6(a), Some(p)) => format!("[{a}]:{p}"),
                };
                endpoints.push(Endpoint {
                    address: e.address,
                    port: e.port,
                    health_port: check_port.or(e.port),
                    weight: e.weight,
                    mac: e.mac,
                    identity,
                    group: gid,
                    service: sid,
                });
            }
            if let Some(r) = &g.remote {
                endpoints.push(Endpoint {
                    address: r.vip,
                    port: None,
                    health_port: None,
                    weight: 100,
                    mac: None,
                    identity: format!("remote:{}", r.rule),
                    group: gid,
                    service: sid,
                });
            }
            groups.push(Group {
                name: g.name.clone(),
                service: sid,
                region: region_id(&regions, &g.region),
                zone: ZoneId(intern(&mut zones, &g.zone)),
                capacity_scaler: g.capacity_scaler,
                max_rate: g.max_rate,
                endpoints: ge_start..endpoints.len() as u32,
                remote: g.remote.clone(),
            });
        }
        let geneve = s.geneve.unwrap_or_else(GeneveOptions::default);
        services.push(Service {
            name: s.name.clone(),
            delivery: match s.delivery {
                DeliveryMode::L2dsr => Delivery::L2dsr,
                DeliveryMode::Ipip => Delivery::Ipip,
                DeliveryMode::Gre => Delivery::Gre { key: s.gre_key },
                DeliveryMode::Gue => Delivery::Gue {
                    port: s.gue_port.unwrap_or(GUE_PORT),
                },
                DeliveryMode::Geneve => Delivery::Geneve {
                    port: geneve.port,
                    option_class: geneve.option_class,
                    endpoint_id_type: geneve.endpoint_id_type,
                    flow_cookie_type: geneve.flow_cookie_type,
                },
            },
            session_affinity: s.session_affinity,
            connection_persistence: s.connection_persistence,
            connection_draining_timeout: s.connection_draining_timeout.get(),
            load_balancing: s.load_balancing,
            maglev_table_size: s.maglev_table_size,
            hash: s.hash,
            health_check: check,
            aggregation: s.aggregation,
            fail_open: s.fail_open,
            no_backend_action: s.no_backend_action,
            balancing: Balancing {
                mode: s.balancing_mode,
                max_rate_per_endpoint: s.max_rate_per_endpoint,
                max_utilization: s.max_utilization.unwrap_or(DEFAULT_MAX_UTILIZATION),
            },
            locality: s.locality,
            kind: s.groups.first().map(|g| g.kind).unwrap_or_default(),
            groups: g_start..groups.len() as u32,
            endpoints: e_start..endpoints.len() as u32,
            rules: Vec::new(),
            flow_tag: 0,
        });
    }
    assign_flow_tags(&mut services);

    let composite_of = |rule: &str| {
        cfg.composite_health_checks
            .iter()
            .position(|c| c.destination == rule)
            .map(|i| CompositeId(i as u32))
    };
    let mut rules = Vec::new();
    let mut children = Vec::new();
    for (ri, r) in cfg.forwarding_rules.iter().enumerate() {
        let rid = RuleId(ri as u32);
        let service = svc_id(&r.backend_service);
        if let Some(s) = services.get_mut(service.index()) {
            s.rules.push(rid);
        }
        let mut kids = Vec::new();
        for (ag, &vip) in r.vips.iter().enumerate() {
            let ag = ag as u8;
            kids.push(ChildRuleId(children.len() as u32));
            children.push(ChildRule {
                name: format!("{}-ag{ag}", r.name),
                rule: rid,
                availability_group: ag,
                vip,
                served: cfg.node.availability_group.is_none_or(|g| g == ag),
            });
        }
        rules.push(Rule {
            name: r.name.clone(),
            protocol: r.protocol,
            ports: r.ports.clone(),
            mode: r.mode,
            service,
            children: kids,
            gateway_endpoints: r
                .gateway_endpoints
                .iter()
                .map(|g| (g.address, g.id))
                .collect(),
            composite: composite_of(&r.name),
        });
    }

    let rule_index = build_index(&rules, &children);
    let mut gateway_sources: Vec<(IpAddr, RuleId, u64)> = rules
        .iter()
        .enumerate()
        .flat_map(|(i, r)| {
            r.gateway_endpoints
                .iter()
                .map(move |&(a, id)| (a, RuleId(i as u32), id))
        })
        .collect();
    gateway_sources.sort_by_key(|&(a, _, _)| a);

    let composites = cfg
        .composite_health_checks
        .iter()
        .map(|c| Composite {
            name: c.name.clone(),
            sources: c
                .sources
                .iter()
                .map(|s| {
                    let sid = svc_id(&s.backend_service);
                    let own = services
                        .get(sid.index())
                        .map(|x| x.aggregation)
                        .unwrap_or_default();
                    (sid, s.aggregation.unwrap_or(own))
                })
                .collect(),
            destination: RuleId(
                cfg.forwarding_rules
                    .iter()
                    .position(|r| r.name == c.destination)
                    .unwrap_or(0) as u32,
            ),
        })
        .collect();

    let mut client_zones: Vec<(Prefix, ZoneId)> = cfg
        .client_zones
        .iter()
        .flat_map(|z| z.prefixes.iter().map(move |p| (*p, z.zone.as_str())))
        .map(|(p, z)| (p, ZoneId(intern(&mut zones, z))))
        .collect();
    client_zones.sort_by(|a, b| b.0.len.cmp(&a.0.len).then(a.0.cmp(&b.0)));

    Compiled {
        node: NodeInfo {
            name: cfg.node.name.clone(),
            region: region_id(&regions, &cfg.node.region),
            zone: node_zone,
            availability_group: cfg.node.availability_group,
            shutdown_drain: cfg.node.shutdown_drain.get(),
        },
        rules,
        children,
        rule_index,
        services,
        groups,
        endpoints,
        health_checks: cfg.health_checks.clone(),
        composites,
        regions,
        zones,
        client_zones,
        gateway_sources,
        settings: Settings {
            dataplane: cfg.dataplane.clone(),
            ports: cfg.ports.clone(),
            bgp: cfg.bgp.clone(),
            flow_sync: cfg.flow_sync.clone(),
            metrics: cfg.metrics.clone(),
            control: cfg.control.clone(),
        },
    }
}

/// Builds the per-VIP index from the served child rules.
fn build_index(rules: &[Rule], children: &[ChildRule]) -> RuleIndex {
    let mut vips: Vec<VipRules> = Vec::new();
    for (ci, c) in children.iter().enumerate() {
        if !c.served {
            continue;
        }
        let Some(rule) = rules.get(c.rule.0 as usize) else {
            continue;
        };
        let hit = RuleMatch {
            rule: c.rule,
            child: ChildRuleId(ci as u32),
            service: rule.service,
            gateway: rule.mode == RuleMode::Gateway,
        };
        let entry = match vips.iter().position(|v| v.addr == c.vip) {
            Some(i) => &mut vips[i],
            None => {
                vips.push(VipRules {
                    addr: c.vip,
                    tcp: Vec::new(),
                    udp: Vec::new(),
                    l3_default: None,
                });
                let last = vips.len() - 1;
                &mut vips[last]
            }
        };
        let rule = &rules[c.rule.index()];
        let list = match rule.protocol {
            Protocol::L3Default => {
                entry.l3_default = Some(hit);
                continue;
            }
            Protocol::Tcp => &mut entry.tcp,
            Protocol::Udp => &mut entry.udp,
        };
        list.extend(rule.ports.ranges().into_iter().map(|r| Interval {
            lo: r.lo,
            hi: r.hi,
            hit,
        }));
    }
    for v in &mut vips {
        v.tcp.sort_by_key(|x| x.lo);
        v.udp.sort_by_key(|x| x.lo);
    }
    vips.sort_by_key(|v| addr_key(v.addr));
    let keys = vips.iter().map(|v| addr_key(v.addr)).collect();
    RuleIndex { vips, keys }
}

/// What `spillway check-config` prints; `memory` is the memory estimate's
/// lines ([`crate::memory::summary`]).
pub fn summary(c: &Compiled, memory: &str, warnings: &[String]) -> String {
    let mut s = String::new();
    let ag = match c.node.availability_group {
        Some(g) => format!("availability group {g} only"),
        None => "both availability groups".to_owned(),
    };
    let _ = writeln!(
        s,
        "node {}: region {}, zone {}, {ag}",
        c.node.name,
        c.regions[c.node.region.index()],
        c.zones[c.node.zone.index()]
    );
    let vips: Vec<IpAddr> = c.rule_index.vips().collect();
    let _ = writeln!(
        s,
        "forwarding rules: {} ({} child rules), served VIPs: {}",
        c.rules.len(),
        c.children.len(),
        vips.len()
    );
    for vip in vips {
        let rules: Vec<String> = c
            .rule_index
            .rules_at(vip)
            .into_iter()
            .map(|r| {
                let rule = &c.rules[r.index()];
                let ports = if rule.protocol == Protocol::L3Default {
                    String::new()
                } else {
                    format!(" {}", rule.ports)
                };
                let gw = if rule.mode == RuleMode::Gateway {
                    " (gateway)"
                } else {
                    ""
                };
                format!(
                    "{} {}{ports} -> {}{gw}",
                    rule.name,
                    rule.protocol,
                    c.services[rule.service.index()].name
                )
            })
            .collect();
        let _ = writeln!(s, "  {vip}: {}", rules.join("; "));
    }
    let _ = writeln!(
        s,
        "backend services: {}, groups: {}, endpoints: {}, health checks: {}, composite health checks: {}",
        c.services.len(),
        c.groups.len(),
        c.endpoints.len(),
        c.health_checks.len(),
        c.composites.len()
    );
    for svc in &c.services {
        let _ = writeln!(
            s,
            "  {}: {}, {} groups, {} endpoints, Maglev M = {}",
            svc.name,
            svc.delivery,
            svc.groups.len(),
            svc.endpoints.len(),
            svc.maglev_table_size
        );
    }
    let _ = writeln!(s, "regions (nearest first): {}", c.regions.join(", "));
    s.push_str(memory);
    let _ = writeln!(s, "warnings: {}", warnings.len());
    for w in warnings {
        let _ = writeln!(s, "  {w}");
    }
    s
}

/// Gives every service its [`Service::flow_tag`]: 16 bits of a fixed hash
/// (FNV-1a) of its name, so a service keeps its tag whatever the order of the
/// file. Two names that collide are told apart in name order (the later one
/// takes the next free tag), which depends only on the set of names, never on
/// their order; tags are distinct while there are at most 65,536 services.
pub fn assign_flow_tags(services: &mut [Service]) {
    let mut order: Vec<usize> = (0..services.len()).collect();
    order.sort_by(|&a, &b| services[a].name.cmp(&services[b].name));
    let mut used = vec![false; 1 << 16];
    for i in order {
        let mut tag = name_tag(&services[i].name);
        for _ in 0..u16::MAX {
            if !used[usize::from(tag)] {
                break;
            }
            tag = tag.wrapping_add(1);
        }
        used[usize::from(tag)] = true;
        services[i].flow_tag = tag;
    }
}

/// FNV-1a (32 bits) of `name`, folded to 16 bits. Part of the flow-table
/// contract between a node's reloads: never change it.
fn name_tag(name: &str) -> u16 {
    let mut h: u32 = 0x811c_9dc5;
    for b in name.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    ((h >> 16) ^ (h & 0xffff)) as u16
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Env, Loaded, load_str};

    /// Services named `names`, in that order, with their default fields.
    fn named(names: &[String]) -> Vec<Service> {
        let mut text = String::from("[node]\nname = \"n\"\nregion = \"r\"\nzone = \"z\"\n");
        for n in names {
            text += &format!(
                "\n[[backend_services]]\nname = \"{n}\"\ndelivery = \"ipip\"\ngroups = [{{ name = \"g\", region = \"r\", zone = \"z\", endpoints = [{{ address = \"10.1.0.1\" }}] }}]\n"
            );
        }
        match load_str("t.toml", &text, &Env::default()) {
            Ok(l) => l.compiled.services,
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn flow_tags_follow_names_not_positions_and_never_collide() {
        // Enough names for 16-bit collisions to occur (birthday bound ~300).
        let names: Vec<String> = (0..2000).map(|i| format!("svc-{i}")).collect();
        let tags = |svcs: &[Service]| -> std::collections::HashMap<String, u16> {
            svcs.iter().map(|s| (s.name.clone(), s.flow_tag)).collect()
        };
        let mut reversed = names.clone();
        reversed.reverse();
        let mut shuffled = names.clone();
        shuffled.rotate_left(777);
        let a = tags(&named(&names));
        assert_eq!(a, tags(&named(&reversed)));
        assert_eq!(a, tags(&named(&shuffled)));
        let distinct: std::collections::HashSet<u16> = a.values().copied().collect();
        assert_eq!(distinct.len(), names.len(), "every service has its own tag");
        let hashed = names.iter().filter(|n| a[*n] == name_tag(n)).count();
        assert!(hashed < names.len(), "the test saw a collision to resolve");
        // A service keeps its tag when another one is added or removed
        // (unless the other one's name collides with it).
        let b = tags(&named(&names[..3]));
        for n in &names[..3] {
            assert_eq!(b[n], name_tag(n));
        }
    }

    /// A node, and a GRE service reachable from IPv4 and IPv6 VIPs.
    fn doc(node_extra: &str, rules: &str) -> String {
        format!(
            r#"
[node]
name = "n1"
region = "r1"
zone = "r1-a"
{node_extra}

[[backend_services]]
name = "svc"
delivery = "gre"
maglev_table_size = 65537
[[backend_services.groups]]
name = "g"
region = "r1"
zone = "r1-a"
endpoints = [{{ address = "10.1.0.1" }}, {{ address = "fd01::1" }}]
{rules}
"#
        )
    }

    fn rule(name: &str, vips: &str, proto: &str, ports: &str) -> String {
        format!(
            "[[forwarding_rules]]\nname = \"{name}\"\nvips = [{vips}]\nprotocol = \"{proto}\"\nports = {ports}\nbackend_service = \"svc\"\n"
        )
    }

    fn load(text: &str) -> Result<Loaded, crate::ConfigErrors> {
        load_str("t.toml", text, &Env::with_cpus(4))
    }

    const V4: &str = "\"10.0.0.10\"";
    const V6: &str = "\"fd00::10\", \"fd00::11\"";

    /// Packet: destination, IP protocol, destination port; expected child
    /// rule name (None: drop).
    type Probe = (&'static str, u8, Option<u16>, Option<&'static str>);

    struct Case {
        name: &'static str,
        rules: Vec<String>,
        /// `Err(needle)`: rejected with a message containing it.
        expect: Result<Vec<Probe>, &'static str>,
    }

    #[test]
    fn rule_selection_follows_m3() {
        let cases = vec![
            Case {
                name: "L3_DEFAULT + TCP all ports: TCP to the TCP rule, the rest to L3_DEFAULT",
                rules: vec![
                    rule("l3", V4, "L3_DEFAULT", "\"all\""),
                    rule("tcp", V4, "TCP", "\"all\""),
                ],
                expect: Ok(vec![
                    ("10.0.0.10", 6, Some(80), Some("tcp-ag0")),
                    ("10.0.0.10", 6, Some(0), Some("tcp-ag0")),
                    ("10.0.0.10", 6, None, Some("tcp-ag0")),
                    ("10.0.0.10", 17, Some(53), Some("l3-ag0")),
                    ("10.0.0.10", 1, None, Some("l3-ag0")),
                    ("10.0.0.10", 50, None, Some("l3-ag0")),
                    ("10.0.0.10", 47, None, Some("l3-ag0")),
                    ("10.0.0.10", 58, None, Some("l3-ag0")),
                    // SCTP is not among L3_DEFAULT's protocols (M2).
                    ("10.0.0.10", 132, Some(80), None),
                ]),
            },
            Case {
                name: "L3_DEFAULT + TCP/8080: TCP 8080 to the TCP rule, TCP 80 to L3_DEFAULT",
                rules: vec![
                    rule("l3", V4, "L3_DEFAULT", "\"all\""),
                    rule("alt", V4, "TCP", "8080"),
                ],
                expect: Ok(vec![
                    ("10.0.0.10", 6, Some(8080), Some("alt-ag0")),
                    ("10.0.0.10", 6, Some(80), Some("l3-ag0")),
                    ("10.0.0.10", 6, Some(8081), Some("l3-ag0")),
                    // A non-first fragment has no port: only all-port rules.
                    ("10.0.0.10", 6, None, Some("l3-ag0")),
                    ("10.0.0.10", 17, Some(8080), Some("l3-ag0")),
                ]),
            },
            Case {
                name: "TCP 80,443 beside TCP 81-442 is accepted and each port finds its rule",
                rules: vec![
                    rule("a", V4, "TCP", "\"80,443\""),
                    rule("b", V4, "TCP", "\"81-442\""),
                ],
                expect: Ok(vec![
                    ("10.0.0.10", 6, Some(79), None),
                    ("10.0.0.10", 6, Some(80), Some("a-ag0")),
                    ("10.0.0.10", 6, Some(81), Some("b-ag0")),
                    ("10.0.0.10", 6, Some(300), Some("b-ag0")),
                    ("10.0.0.10", 6, Some(442), Some("b-ag0")),
                    ("10.0.0.10", 6, Some(443), Some("a-ag0")),
                    ("10.0.0.10", 6, Some(444), None),
                    ("10.0.0.10", 6, None, None),
                    ("10.0.0.10", 17, Some(80), None),
                ]),
            },
            Case {
                name: "TCP all + TCP 80 on one pair is rejected",
                rules: vec![
                    rule("all", V4, "TCP", "\"all\""),
                    rule("web", V4, "TCP", "80"),
                ],
                expect: Err("TCP ports 80 overlap rule \"all\""),
            },
            Case {
                name: "two L3_DEFAULT rules on one pair are rejected",
                rules: vec![
                    rule("x", V4, "L3_DEFAULT", "\"all\""),
                    rule("y", V4, "L3_DEFAULT", "\"all\""),
                ],
                expect: Err("a second L3_DEFAULT rule on 10.0.0.10"),
            },
            Case {
                name: "rules sharing one VIP of their pair overlap there",
                rules: vec![
                    rule("x", "\"10.0.0.10\", \"10.0.0.11\"", "UDP", "\"50-60\""),
                    rule("y", "\"10.0.0.12\", \"10.0.0.11\"", "UDP", "55"),
                ],
                expect: Err("UDP ports 55 overlap rule \"x\""),
            },
            Case {
                name: "same ports, different protocols coexist",
                rules: vec![rule("t", V4, "TCP", "53"), rule("u", V4, "UDP", "53")],
                expect: Ok(vec![
                    ("10.0.0.10", 6, Some(53), Some("t-ag0")),
                    ("10.0.0.10", 17, Some(53), Some("u-ag0")),
                    ("10.0.0.10", 1, None, None),
                ]),
            },
            Case {
                name: "IPv6 VIPs in both availability groups",
                rules: vec![
                    rule("v6", V6, "TCP", "443"),
                    rule("v6all", V6, "L3_DEFAULT", "\"all\""),
                ],
                expect: Ok(vec![
                    ("fd00::10", 6, Some(443), Some("v6-ag0")),
                    ("fd00::11", 6, Some(443), Some("v6-ag1")),
                    ("fd00::11", 58, None, Some("v6all-ag1")),
                    ("fd00::10", 17, Some(443), Some("v6all-ag0")),
                    ("fd00::12", 6, Some(443), None),
                    ("10.0.0.10", 6, Some(443), None),
                ]),
            },
            Case {
                name: "a packet to a VIP matching no rule, or to no VIP, is dropped",
                rules: vec![rule("web", V4, "TCP", "80")],
                expect: Ok(vec![
                    ("10.0.0.10", 6, Some(80), Some("web-ag0")),
                    ("10.0.0.10", 6, Some(8080), None),
                    ("10.0.0.10", 17, Some(80), None),
                    ("10.0.0.10", 1, None, None),
                    ("10.0.0.11", 6, Some(80), None),
                    ("::", 6, Some(80), None),
                ]),
            },
        ];
        for case in cases {
            let text = doc("", &case.rules.concat());
            match (load(&text), case.expect) {
                (Ok(l), Ok(probes)) => {
                    for (dst, proto, port, want) in probes {
                        let got = l
                            .compiled
                            .rule_index
                            .lookup(dst.parse().unwrap(), proto, port)
                            .map(|m| {
                                let child = &l.compiled.children[m.child.index()];
                                assert_eq!(child.rule, m.rule);
                                child.name.as_str()
                            });
                        assert_eq!(
                            got, want,
                            "{}: {dst} proto {proto} port {port:?}",
                            case.name
                        );
                    }
                }
                (Err(e), Err(needle)) => {
                    assert!(e.to_string().contains(needle), "{}: {e}", case.name);
                }
                (Ok(_), Err(needle)) => panic!("{}: accepted, expected {needle:?}", case.name),
                (Err(e), Ok(_)) => panic!("{}: rejected: {e}", case.name),
            }
        }
    }

    #[test]
    fn a_node_of_one_availability_group_serves_only_its_vips() {
        let rules = rule("web", "\"10.0.0.10\", \"10.0.0.11\"", "TCP", "80");
        let l = load(&doc("availability_group = 1", &rules)).unwrap();
        let idx = &l.compiled.rule_index;
        assert_eq!(idx.lookup("10.0.0.10".parse().unwrap(), 6, Some(80)), None);
        assert!(!idx.is_vip("10.0.0.10".parse().unwrap()));
        let m = idx
            .lookup("10.0.0.11".parse().unwrap(), 6, Some(80))
            .unwrap();
        assert_eq!(l.compiled.children[m.child.index()].name, "web-ag1");
        let names: Vec<(&str, bool)> = l
            .compiled
            .children
            .iter()
            .map(|c| (c.name.as_str(), c.served))
            .collect();
        assert_eq!(names, [("web-ag0", false), ("web-ag1", true)]);
    }

    #[test]
    fn services_groups_and_endpoints_are_dense_and_resolved() {
        let text = r#"
[node]
name = "n1"
region = "eu"
zone = "eu-a"
region_preference = ["eu", "us"]

[[health_checks]]
name = "hc"
type = "TCP"
port = 8080

[[backend_services]]
name = "a"
delivery = "gue"
health_check = "hc"
[[backend_services.groups]]
name = "us"
region = "us"
zone = "us-a"
endpoints = [{ address = "10.2.0.1", weight = 7 }]
[[backend_services.groups]]
name = "eu"
region = "eu"
zone = "eu-b"
endpoints = [{ address = "10.1.0.1", port = 80 }, { address = "fd00::1", port = 80 }]

[[backend_services]]
name = "b"
delivery = "geneve"
geneve = { option_class = 0x0200 }
[[backend_services.groups]]
name = "g"
region = "ap"
zone = "ap-a"
endpoints = [{ address = "10.3.0.1" }]

[[forwarding_rules]]
name = "r1"
vips = ["10.0.0.1"]
protocol = "TCP"
ports = 80
backend_service = "a"
[[forwarding_rules]]
name = "r2"
vips = ["10.0.0.2"]
protocol = "UDP"
backend_service = "a"
"#;
        let c = load(text).unwrap().compiled;
        assert_eq!(c.regions, ["eu", "us", "ap"]);
        assert_eq!(c.services.len(), 2);
        let a = &c.services[0];
        assert_eq!(a.delivery, Delivery::Gue { port: GUE_PORT });
        assert_eq!(a.rules, [RuleId(0), RuleId(1)]);
        assert_eq!(a.health_check, Some(HealthCheckId(0)));
        assert_eq!(a.group_ids().collect::<Vec<_>>(), [GroupId(0), GroupId(1)]);
        let eps: Vec<(&str, u16, Option<u16>)> = c
            .service_endpoints(ServiceId(0))
            .iter()
            .map(|e| (e.identity.as_str(), e.weight, e.health_port))
            .collect();
        assert_eq!(
            eps,
            [
                ("10.2.0.1", 7, Some(8080)),
                ("10.1.0.1:80", 100, Some(8080)),
                ("[fd00::1]:80", 100, Some(8080))
            ]
        );
        assert_eq!(c.groups[0].region, RegionId(1));
        assert_eq!(c.groups[1].region, RegionId(0));
        assert_eq!(c.node.region, RegionId(0));
        assert_eq!(c.endpoints[2].group, GroupId(1));
        let b = &c.services[1];
        assert_eq!(
            b.delivery,
            Delivery::Geneve {
                port: 6081,
                option_class: 0x0200,
                endpoint_id_type: 1,
                flow_cookie_type: 3
            }
        );
        assert_eq!(c.service_endpoints(ServiceId(1))[0].service, ServiceId(1));
        assert_eq!(c.groups[2].region.index(), 2);
    }

    /// Tiny deterministic generator (no dependency needed for this).
    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self, n: u64) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (self.0 >> 33) % n
        }
    }

    /// Random rule sets on two VIPs: every accepted one selects exactly as
    /// a literal reading of M3 over all candidates.
    #[test]
    fn index_agrees_with_a_literal_reading_of_m3() {
        let mut rng = Lcg(7);
        let vips = ["10.0.0.1", "10.0.0.2"];
        let (mut accepted, mut rejected) = (0, 0);
        for _ in 0..300 {
            let n = 1 + rng.next(4) as usize;
            let mut specs = Vec::new();
            let mut text = String::new();
            for i in 0..n {
                let proto = ["TCP", "UDP", "L3_DEFAULT"][rng.next(3) as usize];
                let ports: String = if proto == "L3_DEFAULT" || rng.next(4) == 0 {
                    "all".into()
                } else {
                    let lo = 1 + rng.next(12);
                    let hi = lo + rng.next(4);
                    if rng.next(2) == 0 {
                        format!("{lo}-{hi}")
                    } else {
                        format!("{lo},{}", hi + 3)
                    }
                };
                let vip = vips[rng.next(2) as usize];
                text.push_str(&rule(
                    &format!("r{i}"),
                    &format!("\"{vip}\""),
                    proto,
                    &format!("\"{ports}\""),
                ));
                specs.push((vip, proto, ports.parse::<PortSpec>().unwrap()));
            }
            let Ok(l) = load(&doc("", &text)) else {
                rejected += 1;
                continue;
            };
            accepted += 1;
            for vip in vips {
                for proto in [1u8, 6, 17, 47, 50, 58, 132] {
                    for port in (0..=20).map(Some).chain([None]) {
                        let cands: Vec<usize> = specs
                            .iter()
                            .enumerate()
                            .filter(|(_, (v, _, _))| *v == vip)
                            .filter(|(_, (_, p, _))| match *p {
                                "TCP" => proto == 6,
                                "UDP" => proto == 17,
                                _ => L3_DEFAULT_PROTOCOLS.contains(&proto),
                            })
                            .filter(|(_, (_, _, ps))| {
                                ps.is_all()
                                    || port.is_some_and(|x| {
                                        ps.ranges().iter().any(|r| r.lo <= x && x <= r.hi)
                                    })
                            })
                            .map(|(i, _)| i)
                            .collect();
                        let specific: Vec<usize> = cands
                            .iter()
                            .copied()
                            .filter(|&i| specs[i].1 != "L3_DEFAULT")
                            .collect();
                        assert!(
                            specific.len() <= 1,
                            "validation let overlapping rules through:\n{text}"
                        );
                        let want = specific.first().or(cands.first()).copied();
                        let got = l
                            .compiled
                            .rule_index
                            .lookup(vip.parse().unwrap(), proto, port)
                            .map(|m| m.rule.index());
                        assert_eq!(got, want, "{vip} {proto} {port:?}\n{text}");
                    }
                }
            }
        }
        assert!(
            accepted > 50 && rejected > 50,
            "{accepted} accepted, {rejected} rejected"
        );
    }

    #[test]
    fn client_zones_match_the_longest_prefix() {
        let text = doc(
            "",
            r#"
[[client_zones]]
zone = "r1-a"
prefixes = ["10.0.0.0/8"]
[[client_zones]]
zone = "r1-b"
prefixes = ["10.5.0.0/16", "fd00::/8"]
"#,
        );
        let c = load(&text).unwrap().compiled;
        let zone = |a: &str| {
            c.client_zone(a.parse().unwrap())
                .map(|z| c.zones[z.index()].as_str())
        };
        assert_eq!(zone("10.5.1.1"), Some("r1-b"));
        assert_eq!(zone("10.6.1.1"), Some("r1-a"));
        assert_eq!(zone("fd12::1"), Some("r1-b"));
        assert_eq!(zone("192.0.2.1"), None);
    }

    #[test]
    fn summary_lists_rules_per_vip() {
        let l = load(&doc(
            "",
            &(rule("web", V4, "TCP", "\"80,443\"") + &rule("l3", V4, "L3_DEFAULT", "\"all\"")),
        ))
        .unwrap();
        let s = l.summary();
        assert!(
            s.contains("10.0.0.10: web TCP 80,443 -> svc; l3 L3_DEFAULT -> svc"),
            "{s}"
        );
        assert!(s.contains("endpoints: 2"), "{s}");
        assert!(s.contains("regions (nearest first): r1"), "{s}");
    }
}
