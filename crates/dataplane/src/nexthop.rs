//! Next hops (M47): which addresses the data plane sends to must be
//! resolved to a MAC, on which port, and which next hop each endpoint's
//! packets go to. Pure functions of the compiled configuration; the
//! management core resolves the set ([`next_hops`]) and the snapshot builder
//! gives each backend the MAC of its next hop ([`endpoint_hop`]).

use std::net::IpAddr;

use config::Compiled;
use config::compiled::{Delivery, Endpoint};
use config::schema::{Port, PortRole};
use wire::ethernet::MacAddr;

/// An address to resolve, and the port it is resolved on (and learned on).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NextHop {
    /// Index of the port in `[[ports]]`.
    pub port: usize,
    /// The neighbour's address.
    pub addr: IpAddr,
}

/// Where one endpoint's packets go at layer 2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hop {
    /// A configured MAC (the endpoint's `mac`, or the port's `gateway_mac`):
    /// never resolved.
    Static(MacAddr),
    /// The MAC resolved for this next hop (the endpoint itself, or the
    /// port's gateway).
    Resolved(NextHop),
    /// No egress port is configured (tests, offline replays): the snapshot's
    /// `Local::next_hop_mac`.
    Default,
}

/// The port packets to backends leave by: the `backend` port, else the
/// uplink.
pub fn egress_port(compiled: &Compiled) -> Option<(usize, &Port)> {
    config::schema::egress_port(&compiled.settings.ports)
}

/// The next hop of `ep`: its static `mac`; for `l2dsr` (validated to be on
/// the egress port's subnet) and for a tunnel endpoint on one of the egress
/// port's subnets, the endpoint itself; otherwise the port's gateway
/// (`gateway_mac`, else resolved). A port without a gateway reaches only its
/// subnets: an endpoint off them has no next hop, which is
/// [`Hop::Default`] (an unset `next_hop_mac`: dropped, never sent to zero).
pub fn endpoint_hop(compiled: &Compiled, ep: &Endpoint) -> Hop {
    hop_to(compiled, ep, ep.address)
}

/// The next hop of a dual-stack endpoint's IPv6 address (`None` without
/// one), found as [`endpoint_hop`] finds its address's. Off the port's
/// subnets it is the port's gateway, whose MAC serves both families.
pub fn endpoint_hop6(compiled: &Compiled, ep: &Endpoint) -> Option<Hop> {
    ep.address6.map(|a| hop_to(compiled, ep, a))
}

fn hop_to(compiled: &Compiled, ep: &Endpoint, address: IpAddr) -> Hop {
    if let Some(m) = ep.mac {
        return Hop::Static(m.0);
    }
    let Some((port, p)) = egress_port(compiled) else {
        return Hop::Default;
    };
    let l2dsr = compiled
        .services
        .get(ep.service.index())
        .is_some_and(|s| s.delivery == Delivery::L2dsr);
    if l2dsr || p.addresses.iter().any(|a| a.contains(address)) {
        return Hop::Resolved(NextHop {
            port,
            addr: address,
        });
    }
    gateway_hop(port, p).unwrap_or(Hop::Default)
}

fn gateway_hop(port: usize, p: &Port) -> Option<Hop> {
    match (p.gateway_mac, p.gateway) {
        (Some(m), _) => Some(Hop::Static(m.0)),
        (None, Some(addr)) => Some(Hop::Resolved(NextHop { port, addr })),
        (None, None) => None,
    }
}

/// The port and next hop of a remote gateway endpoint's tunnel (M31): it
/// is reached as a tunnel backend is ([`endpoint_hop`]), by the egress port
/// (where its flows' appliances return), itself on one of that port's
/// subnets, else the port's gateway. Port 0 and [`Hop::Default`] without
/// ports (offline replays, tests).
pub fn remote_gateway_hop(compiled: &Compiled, addr: IpAddr) -> (usize, Hop) {
    let Some((port, p)) = egress_port(compiled) else {
        return (0, Hop::Default);
    };
    if p.addresses.iter().any(|a| a.contains(addr)) {
        return (port, Hop::Resolved(NextHop { port, addr }));
    }
    (port, gateway_hop(port, p).unwrap_or(Hop::Default))
}

/// Every next hop to resolve, each once, in a stable order: the gateway of
/// the egress port and of the uplink (without `gateway_mac`), then every
/// endpoint whose [`endpoint_hop`] is resolved, then every gateway endpoint
/// (M31).
pub fn next_hops(compiled: &Compiled) -> Vec<NextHop> {
    let mut out: Vec<NextHop> = Vec::new();
    let ports = &compiled.settings.ports;
    for (i, p) in ports.iter().enumerate() {
        if matches!(p.role, PortRole::Backend | PortRole::Uplink)
            && let Some(Hop::Resolved(h)) = gateway_hop(i, p)
        {
            out.push(h);
        }
    }
    out.extend(
        compiled
            .endpoints
            .iter()
            .flat_map(|ep| {
                [
                    Some(endpoint_hop(compiled, ep)),
                    endpoint_hop6(compiled, ep),
                ]
            })
            .filter_map(|h| match h {
                Some(Hop::Resolved(h)) => Some(h),
                _ => None,
            }),
    );
    out.extend(
        compiled
            .gateways
            .iter()
            .filter_map(|g| gateway_endpoint_hop(compiled, g.address)),
    );
    let mut seen = std::collections::HashSet::new();
    out.retain(|h| seen.insert(*h));
    out
}

/// The next hop of a gateway endpoint (M31): itself, on the first data port
/// whose subnet holds it (validation requires one when ports exist). Its
/// resolved MAC, on that port, is how its traffic is recognised, and where
/// returned packets go. A remote endpoint's: [`remote_gateway_hop`].
pub fn gateway_endpoint_hop(compiled: &Compiled, addr: IpAddr) -> Option<NextHop> {
    if compiled
        .gateway_endpoint(addr)
        .is_some_and(|g| g.tunnel.is_some())
    {
        return match remote_gateway_hop(compiled, addr) {
            (_, Hop::Resolved(h)) => Some(h),
            _ => None,
        };
    }
    compiled
        .settings
        .ports
        .iter()
        .enumerate()
        .find(|(_, p)| {
            p.role != PortRole::Exception && p.addresses.iter().any(|a| a.contains(addr))
        })
        .map(|(port, _)| NextHop { port, addr })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compiled(text: &str) -> Compiled {
        match config::load_str("t.toml", text, &config::Env::default()) {
            Ok(l) => l.compiled,
            Err(e) => panic!("{e}"),
        }
    }

    const NODE: &str = "[node]\nname = \"n\"\nregion = \"r\"\nzone = \"z\"\n";

    fn svc(name: &str, delivery: &str, eps: &str) -> String {
        format!(
            "\n[[backend_services]]\nname = \"{name}\"\ndelivery = \"{delivery}\"\ngroups = [{{ name = \"g\", region = \"r\", zone = \"z\", endpoints = [{eps}] }}]\n"
        )
    }

    #[test]
    fn gateways_and_connected_endpoints_are_next_hops() {
        let c = compiled(&format!(
            "{NODE}[[ports]]\nname = \"up\"\ndevice = \"d0\"\nrole = \"uplink\"\naddresses = [\"192.0.2.2/24\"]\ngateway = \"192.0.2.1\"\n\
             [[ports]]\nname = \"be\"\ndevice = \"d1\"\nrole = \"backend\"\naddresses = [\"10.1.0.2/24\"]\ngateway = \"10.1.0.1\"\n{}{}",
            svc(
                "t",
                "gue",
                "{ address = \"10.1.0.11\" }, { address = \"10.9.0.1\" }"
            ),
            svc(
                "l",
                "l2dsr",
                "{ address = \"10.1.0.21\" }, { address = \"10.1.0.22\", mac = \"02:00:00:00:00:22\" }"
            ),
        ));
        let hops: Vec<(usize, String)> = next_hops(&c)
            .iter()
            .map(|h| (h.port, h.addr.to_string()))
            .collect();
        assert_eq!(
            hops,
            [
                (0, "192.0.2.1".to_owned()),
                (1, "10.1.0.1".to_owned()),
                (1, "10.1.0.11".to_owned()),
                (1, "10.1.0.21".to_owned()),
            ]
        );
        let hop = |i: usize| endpoint_hop(&c, &c.endpoints[i]);
        let gw = NextHop {
            port: 1,
            addr: "10.1.0.1".parse().unwrap(),
        };
        // Off the subnet: through the gateway; a static MAC is never resolved.
        assert_eq!(hop(1), Hop::Resolved(gw));
        assert_eq!(hop(3), Hop::Static([2, 0, 0, 0, 0, 0x22]));
    }

    #[test]
    fn a_static_gateway_mac_is_never_resolved() {
        let c = compiled(&format!(
            "{NODE}[[ports]]\nname = \"up\"\ndevice = \"d0\"\nrole = \"uplink\"\naddresses = [\"192.0.2.2/24\"]\ngateway = \"192.0.2.1\"\ngateway_mac = \"02:00:00:00:00:fe\"\n{}",
            svc("t", "ipip", "{ address = \"10.9.0.1\" }"),
        ));
        assert!(next_hops(&c).is_empty());
        assert_eq!(
            endpoint_hop(&c, &c.endpoints[0]),
            Hop::Static([2, 0, 0, 0, 0, 0xfe])
        );
        let none = compiled(&format!(
            "{NODE}{}",
            svc("t", "ipip", "{ address = \"10.9.0.1\" }")
        ));
        assert_eq!(endpoint_hop(&none, &none.endpoints[0]), Hop::Default);
    }
}
