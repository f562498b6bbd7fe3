//! The balancer's own addresses ([`Local`]): from the configuration's
//! ports, with the MACs resolved for its next hops (M47).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use config::compiled::Compiled;
use wire::ethernet::MacAddr;

use crate::nexthop::{Hop, NextHop, endpoint_hop};

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
