//! The immutable snapshot compiled from a validated config: what the data
//! plane and the management core read.
//!
//! Names become dense `u32` indices so that the data plane indexes vectors
//! instead of hashing strings, and rule selection (M3) becomes a
//! binary search per packet: [`RuleIndex::lookup`] never allocates.
//!
//! `compile` is crate-private: a `Compiled` exists only for a config that
//! passed validation (its invariants, e.g. disjoint port intervals per VIP
//! and protocol, are what make the lookup correct).
//!
//! The snapshot and its index types live here; rule selection, services,
//! compilation and the summary each have their own submodule.

use std::net::IpAddr;

use crate::schema::HealthCheck;
use crate::values::Prefix;

mod capacity;
mod compile;
mod rules;
mod services;
mod summary;

pub(crate) use compile::compile;

/// A position in one of the config's lists as a dense `u32` id. Validation
/// keeps every list far below 2^32; past it the id saturates rather than
/// wrapping round to alias another.
fn dense(i: usize) -> u32 {
    u32::try_from(i).unwrap_or(u32::MAX)
}
pub use capacity::{CapacityLimits, UtilizationSource};
pub use rules::{ChildRule, L3_DEFAULT_PROTOCOLS, Rule, RuleIndex, RuleMatch, SourceSet};
pub use services::{
    Balancing, Composite, DEFAULT_MAX_UTILIZATION, Delivery, Endpoint, GUE_PORT, GatewayEndpoint,
    Group, Service, assign_flow_tags, flow_tags,
};
pub use summary::summary;

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
    /// The share of every `RATE` capacity this node budgets for itself
    /// while it cannot hear the cluster's rates (`node.capacity_share`, or
    /// 1 / (flow-sync peers + 1)), in (0, 1].
    pub capacity_share: f64,
    /// Whether `capacity_share` was configured (not the default).
    pub capacity_share_set: bool,
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
    /// Gateway endpoints of gateway-mode rules (M31), sorted by address
    /// (each address belongs to one rule: validation).
    pub gateways: Vec<GatewayEndpoint>,
    /// `[dataplane]`, `[[ports]]`, `[bgp]`, `[flow_sync]`, `[metrics]`,
    /// `[control]` as written: settings, not per-packet state.
    pub settings: Settings,
    /// `[tunnel_ingress]`, resolved (M49).
    pub tunnel_ingress: IngressPolicy,
    /// Health probes through VIPs (M52), sorted by endpoint then VIP, each
    /// with its own source port.
    pub vip_probes: Vec<VipProbe>,
}

impl Compiled {
    /// The distinct VIPs of service `s`'s rules, in rule order.
    pub fn service_vips(&self, s: ServiceId) -> Vec<IpAddr> {
        let of = self
            .services
            .get(s.index())
            .map_or(&[][..], |x| &x.rules[..]);
        rules::service_vips(&self.rules, &self.children, of, false)
    }
}

/// One health probe through a VIP (`target = "vip"`, M52): the host
/// connects to `vip:port` from `source_port`, and the data plane delivers
/// what it sends from that port to `endpoint`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VipProbe {
    /// The endpoint probed.
    pub endpoint: EndpointId,
    /// The VIP probed (one of its service's rules').
    pub vip: IpAddr,
    /// The port probed: the check's, else the endpoint's.
    pub port: u16,
    /// The probe's source port, from `[dataplane] vip_probe_ports`.
    pub source_port: u16,
}

/// `[tunnel_ingress]`, resolved (M49): which tunnels to the node's own
/// addresses the data plane decapsulates, and from where.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IngressPolicy {
    /// IP-in-IP (protocols 4 and 41) accepted.
    pub ipip: bool,
    /// GRE accepted.
    pub gre: bool,
    /// GUE accepted on this UDP port.
    pub gue_port: Option<u16>,
    /// GENEVE accepted on this UDP port.
    pub geneve_port: Option<u16>,
    /// GUE's and GENEVE's ports, accepted or not: an inner packet of
    /// protocol 4, 41 or 47, or UDP to one of these, is a tunnel inside a
    /// tunnel.
    pub tunnel_ports: [u16; 2],
    /// Outer sources accepted (empty: none).
    pub allow: Vec<Prefix>,
}

impl IngressPolicy {
    /// Whether any tunnel is accepted.
    pub fn any(&self) -> bool {
        self.ipip || self.gre || self.gue_port.is_some() || self.geneve_port.is_some()
    }

    /// Whether tunnels from `src` are accepted.
    pub fn allows(&self, src: IpAddr) -> bool {
        self.allow.iter().any(|p| p.contains(src))
    }
}

/// The host of an `http://` or `https://` URL when it is an IP address
/// (`http://192.0.2.7:9469/status`, `http://[2001:db8::7]/status`); `None`
/// for a name or anything else.
pub fn url_host(url: &str) -> Option<IpAddr> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))?;
    let authority = rest.split(['/', '?', '#']).next()?;
    let host_port = authority.rsplit('@').next()?;
    if let Some(v6) = host_port.strip_prefix('[') {
        return v6.split(']').next()?.parse().ok();
    }
    host_port.split(':').next()?.parse().ok()
}

/// Settings the daemon reads at start (cores, ports) or hands to its
/// subsystems; they need no compilation.
#[derive(Clone, Debug)]
pub struct Settings {
    /// `[dataplane]`.
    pub dataplane: crate::schema::Dataplane,
    /// `[[ports]]`.
    pub ports: Vec<crate::schema::Port>,
    /// Per port, in `[[ports]]` order: for an exception port, the index of
    /// the data port whose host traffic it carries (its `for_port`, else the
    /// first uplink; M47); `None` for data ports and for an exception port
    /// without one.
    pub exception_for: Vec<Option<usize>>,
    /// `[bgp]`.
    pub bgp: Option<crate::schema::Bgp>,
    /// `[flow_sync]`.
    pub flow_sync: Option<crate::schema::FlowSync>,
    /// `[flow_sync]`'s shared key, resolved (validation checked it).
    pub flow_sync_key: Option<flowsync::SyncKey>,
    /// `[metrics]`.
    pub metrics: crate::schema::Metrics,
    /// `[control]`.
    pub control: crate::schema::Control,
    /// `[neighbours]`.
    pub neighbours: crate::schema::Neighbours,
    /// `[[vrrp]]`.
    pub vrrp: Vec<crate::schema::Vrrp>,
}

impl Compiled {
    /// The zone of a client address, by longest prefix (M27). No allocation.
    pub fn client_zone(&self, src: IpAddr) -> Option<ZoneId> {
        self.client_zones
            .iter()
            .find(|(p, _)| p.contains(src))
            .map(|&(_, z)| z)
    }

    /// Whether the data plane looks up the zone of service `s`'s clients
    /// and counts its new flows per client zone (M27): it has zonal
    /// affinity and `[[client_zones]]` name some.
    pub fn measures_client_zones(&self, s: &Service) -> bool {
        s.locality.zonal_affinity && !self.client_zones.is_empty()
    }

    /// The gateway-mode rule and endpoint ID for traffic from `src` (M31).
    /// Binary search, no allocation.
    pub fn gateway_endpoint(&self, src: IpAddr) -> Option<&GatewayEndpoint> {
        let i = self
            .gateways
            .binary_search_by(|g| g.address.cmp(&src))
            .ok()?;
        self.gateways.get(i)
    }

    /// Endpoints of a service.
    pub fn service_endpoints(&self, s: ServiceId) -> &[Endpoint] {
        let r = &self.services[s.index()].endpoints;
        &self.endpoints[r.start as usize..r.end as usize]
    }
}

/// Config texts the submodules' unit tests compile.
#[cfg(test)]
mod fixture {
    use crate::{Env, Loaded, load_str};

    /// A node, and a GRE service reachable from IPv4 and IPv6 VIPs.
    pub(super) fn doc(node_extra: &str, rules: &str) -> String {
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

    pub(super) fn rule(name: &str, vips: &str, proto: &str, ports: &str) -> String {
        format!(
            "[[forwarding_rules]]\nname = \"{name}\"\nvips = [{vips}]\nprotocol = \"{proto}\"\nports = {ports}\nbackend_service = \"svc\"\n"
        )
    }

    pub(super) fn load(text: &str) -> Result<Loaded, crate::ConfigErrors> {
        load_str("t.toml", text, &Env::with_cpus(4))
    }

    pub(super) const V4: &str = "\"10.0.0.10\"";
    pub(super) const V6: &str = "\"fd00::10\", \"fd00::11\"";
}

#[cfg(test)]
mod tests {
    use super::fixture::{doc, load};

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
    fn probes_through_vips_take_one_source_port_each() {
        use super::fixture::{V4, V6, rule};
        let rules = format!(
            "{}{}[dataplane]\nvip_probe_ports = \"61000-61001,62000-62009\"\n[[health_checks]]\nname = \"h\"\ntype = \"TCP\"\nport = 8080\ntarget = \"vip\"\n",
            rule("a", V4, "TCP", "80"),
            rule("b", V6, "TCP", "443"),
        );
        let text = doc("", &rules).replace(
            "delivery = \"gre\"",
            "delivery = \"gre\"\nhealth_check = \"h\"",
        );
        let c = load(&text).unwrap().compiled;
        let got: Vec<(u32, String, u16, u16)> = c
            .vip_probes
            .iter()
            .map(|p| (p.endpoint.0, p.vip.to_string(), p.port, p.source_port))
            .collect();
        // Each endpoint through each VIP of the service (both of rule b's),
        // the ports in the ranges' order.
        let want = [
            (0, "10.0.0.10", 8080, 61000),
            (0, "fd00::10", 8080, 61001),
            (0, "fd00::11", 8080, 62000),
            (1, "10.0.0.10", 8080, 62001),
            (1, "fd00::10", 8080, 62002),
            (1, "fd00::11", 8080, 62003),
        ];
        let want: Vec<_> = want
            .iter()
            .map(|&(e, v, p, s)| (e, v.to_owned(), p, s))
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn a_node_of_one_availability_group_probes_only_its_groups_vips() {
        use super::fixture::{V6, rule};
        let rules = format!(
            "{}[[health_checks]]\nname = \"h\"\ntype = \"TCP\"\nport = 8080\ntarget = \"vip\"\n",
            rule("b", V6, "TCP", "443"),
        );
        let probed = |node: &str| {
            let text = doc(node, &rules).replace(
                "delivery = \"gre\"",
                "delivery = \"gre\"\nhealth_check = \"h\"",
            );
            let c = load(&text).unwrap().compiled;
            let mut vips: Vec<String> = c.vip_probes.iter().map(|p| p.vip.to_string()).collect();
            vips.sort();
            vips.dedup();
            vips
        };
        // Rule b's VIPs: fd00::10 (group 0) and fd00::11 (group 1).
        assert_eq!(probed(""), ["fd00::10", "fd00::11"]);
        assert_eq!(probed("availability_group = 0"), ["fd00::10"]);
        assert_eq!(probed("availability_group = 1"), ["fd00::11"]);
    }
}
