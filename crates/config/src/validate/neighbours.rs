//! `[neighbours]` and the next hops that must be resolvable (M47): an
//! `l2dsr` endpoint without a `mac` is resolved on the port packets to
//! backends leave by, so it must be on one of that port's subnets.

use super::{Checker, join};
use crate::schema::DeliveryMode;

/// Most requests before a next hop is failed: more only delays the verdict.
const MAX_PROBES: u32 = 20;
/// Most announcements of one address.
const MAX_ANNOUNCE: u32 = 10;

impl Checker<'_> {
    pub(super) fn neighbours(&mut self) {
        let cfg = self.cfg;
        let n = &cfg.neighbours;
        for (field, d) in [
            ("reachable", n.reachable),
            ("retransmit", n.retransmit),
            ("failed_retry", n.failed_retry),
            ("announce_interval", n.announce_interval),
        ] {
            if d.is_zero() {
                self.err(&format!("neighbours.{field}"), "must be longer than 0");
            }
        }
        if !(1..=MAX_PROBES).contains(&n.probes) {
            self.err(
                "neighbours.probes",
                format!("{} is out of range 1-{MAX_PROBES}", n.probes),
            );
        }
        if n.failed_retry < n.retransmit {
            self.err(
                "neighbours.failed_retry",
                "must be at least neighbours.retransmit (failed next hops are asked less often, not more)",
            );
        }
        if n.announce_count > MAX_ANNOUNCE {
            self.err(
                "neighbours.announce_count",
                format!("{} is out of range 0-{MAX_ANNOUNCE}", n.announce_count),
            );
        }
        // Packets to backends leave by the backend port, else the uplink;
        // without either there is nothing to resolve on.
        let Some((pi, port)) = crate::schema::egress_port(&cfg.ports) else {
            return;
        };
        // Tunnels leave from the port's first address of the endpoint's
        // family: without one, every packet to it would be dropped.
        for (i, s) in cfg.backend_services.iter().enumerate() {
            if s.delivery == DeliveryMode::L2dsr {
                continue;
            }
            for (g, gr) in s.groups.iter().enumerate() {
                for (e, ep) in gr.endpoints.iter().enumerate() {
                    for (field, addr) in [("address", Some(ep.address)), ("address6", ep.address6)]
                    {
                        let Some(addr) = addr else { continue };
                        if !port
                            .addresses
                            .iter()
                            .any(|a| a.addr.is_ipv4() == addr.is_ipv4())
                        {
                            let at = self.at(&format!("ports[{pi}].name"));
                            self.warn(
                                &format!("backend_services[{i}].groups[{g}].endpoints[{e}].{field}"),
                                format!(
                                    "tunnels to {addr} leave port {:?} (at {at}) from its first {} address, and it has none: its packets are dropped (no_tunnel_source)",
                                    port.name,
                                    if addr.is_ipv4() { "IPv4" } else { "IPv6" }
                                ),
                            );
                        }
                    }
                }
            }
        }
        for (i, s) in cfg.backend_services.iter().enumerate() {
            if s.delivery != DeliveryMode::L2dsr {
                continue;
            }
            for (g, gr) in s.groups.iter().enumerate() {
                for (e, ep) in gr.endpoints.iter().enumerate() {
                    let addrs = [("address", Some(ep.address)), ("address6", ep.address6)];
                    for (field, addr) in addrs {
                        let Some(addr) = addr else { continue };
                        if ep.mac.is_none() && !port.addresses.iter().any(|a| a.contains(addr)) {
                            let at = self.at(&format!("ports[{pi}].name"));
                            self.err(
                            &format!("backend_services[{i}].groups[{g}].endpoints[{e}].{field}"),
                            format!(
                                "an l2dsr endpoint without a mac is resolved with ARP/NDP on port {:?} (at {at}), so it must be on one of its subnets ({}); give its mac, or an address on the port's segment",
                                port.name,
                                if port.addresses.is_empty() { "it has none".to_owned() } else { join(&port.addresses) }
                            ),
                        );
                        }
                    }
                }
            }
        }
    }
}
