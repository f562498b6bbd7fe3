//! Backend services as the data plane delivers to them: delivery, capacity, their
//! groups and endpoints, composites over their health, and each one's flow tag.

use std::net::IpAddr;
use std::ops::Range;

use super::{EndpointId, GroupId, HealthCheckId, RegionId, RuleId, ServiceId, ZoneId};
use crate::schema::{
    Aggregation, BalancingMode, ConnectionPersistence, GroupKind, HashAlgorithm, LoadBalancing,
    Locality, NoBackendAction, NoBackendFallback, RemoteRule, SessionAffinity,
};
use crate::values::MacAddr;

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
pub const GUE_PORT: u16 = wire::gue::PORT;
/// Default target utilization of `UTILIZATION` mode.
pub const DEFAULT_MAX_UTILIZATION: f64 = 0.8;

/// Capacity settings (M25).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Balancing {
    /// RATE or UTILIZATION.
    pub mode: BalancingMode,
    /// Per-endpoint packets per second (RATE, or UTILIZATION's second
    /// limit).
    pub max_rate_per_endpoint: Option<u64>,
    /// UTILIZATION: target (0, 1] of the groups that set none.
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
    /// M14: draining endpoints as the last resort.
    pub no_backend_fallback: NoBackendFallback,
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
    /// Packets per second of the group (RATE, or UTILIZATION's second
    /// limit).
    pub max_rate: Option<u64>,
    /// UTILIZATION: the group's own target; `None`: the service's.
    pub max_utilization: Option<f64>,
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
    /// A dual-stack endpoint's IPv6 address: where IPv6 packets go.
    pub address6: Option<IpAddr>,
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

impl Endpoint {
    /// Where packets of an IPv6 (`v6`) or IPv4 client go: a dual-stack
    /// endpoint's address of that family, else its one address.
    pub fn address_for(&self, v6: bool) -> IpAddr {
        match self.address6 {
            Some(a6) if v6 => a6,
            _ => self.address,
        }
    }

    /// Its addresses: `address`, then `address6` if any.
    pub fn addresses(&self) -> impl Iterator<Item = IpAddr> + use<> {
        std::iter::once(self.address).chain(self.address6)
    }
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

/// A gateway endpoint of a gateway-mode rule (M31): a router that sends the
/// rule traffic to any destination, identified by its address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GatewayEndpoint {
    /// Its address (resolved to a MAC on the port whose subnet holds it).
    pub address: IpAddr,
    /// The 64-bit endpoint ID sent in the Geneve option (M30).
    pub id: u64,
    /// The tunnel a remote endpoint's traffic arrives and returns in;
    /// `None`: a neighbour, recognised by its MAC (M31).
    pub tunnel: Option<crate::schema::GatewayTunnel>,
    /// Its gateway rule.
    pub rule: RuleId,
    /// That rule's service (the appliances).
    pub service: ServiceId,
    /// Its part of its flows' identity in the flow table, in place of the
    /// service's [`Service::flow_tag`]: distinct from every service's and
    /// every other gateway endpoint's ([`flow_tags`]).
    pub flow_tag: u16,
}

/// Gives every service its [`Service::flow_tag`] ([`flow_tags`] of their
/// names).
pub fn assign_flow_tags(services: &mut [Service]) {
    let names: Vec<&str> = services.iter().map(|s| s.name.as_str()).collect();
    let tags = flow_tags(&names);
    for (s, t) in services.iter_mut().zip(tags) {
        s.flow_tag = t;
    }
}

/// The flow tag of each name: 16 bits of a fixed hash (FNV-1a) of the
/// name, so that a service (or a gateway endpoint, M31) keeps its tag
/// whatever the order of the file. Two names that collide are told apart
/// in name order (the later one takes the next free tag), which depends
/// only on the set of names, never on their order; tags are distinct while
/// there are at most 65,536 names.
pub fn flow_tags(names: &[&str]) -> Vec<u16> {
    let mut order: Vec<usize> = (0..names.len()).collect();
    order.sort_by(|&a, &b| names[a].cmp(names[b]));
    let mut used = vec![false; 1 << 16];
    let mut tags = vec![0u16; names.len()];
    for i in order {
        let mut tag = name_tag(names[i]);
        for _ in 0..u16::MAX {
            if !used[usize::from(tag)] {
                break;
            }
            tag = tag.wrapping_add(1);
        }
        used[usize::from(tag)] = true;
        tags[i] = tag;
    }
    tags
}

/// FNV-1a (32 bits) of `name`, folded to 16 bits. Part of the flow-table
/// contract between a node's reloads: never change it.
#[allow(clippy::cast_possible_truncation, reason = "folds to 16 bits")]
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
    use crate::{Env, load_str};

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
}
