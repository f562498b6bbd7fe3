//! The core's side of L2 (M47): the data plane's sightings of neighbours
//! in, ARP requests and neighbour solicitations for the next hops
//! ([`crate::neighbours`]) and gratuitous announcements of the addresses
//! this node serves out, as frames for a worker to send
//! ([`Output::Transmit`]); resolved MACs go into the snapshot.

use std::time::Duration;

use config::Compiled;

use super::{Core, Output, say};
use crate::neighbours::Neighbours;

impl Core {
    /// Input: what the data plane saw of neighbours, as (port, address,
    /// MAC) (M47). A next hop resolved, or a new MAC, republishes the
    /// snapshot at once.
    pub fn sightings(
        &mut self,
        now: Duration,
        seen: impl IntoIterator<Item = (usize, std::net::IpAddr, wire::ethernet::MacAddr)>,
    ) {
        self.advance(now);
        let mut changed = false;
        for (port, ip, mac) in seen {
            if self.neighbours.sighting(self.now, port, ip, mac) {
                say!(
                    self.out,
                    Info,
                    "neighbour {ip} on port {port} is at {}",
                    mac_text(mac)
                );
                changed = true;
            }
        }
        if changed {
            self.neighbours_changed();
            if let Err(e) = self.publish() {
                say!(self.out, Error, "rebuilding the snapshot: {e}");
            }
        }
    }

    /// The neighbour table (status, metrics).
    pub fn neighbours(&self) -> &Neighbours {
        &self.neighbours
    }

    /// Requests and announcements due now; whether the resolved MACs
    /// changed (a next hop failed).
    pub(super) fn neighbours_tick(&mut self) -> bool {
        let mut ask = Vec::new();
        let changed = self.neighbours.tick(self.now, &mut ask);
        let ports = &self.compiled.settings.ports;
        for hop in ask {
            let Some(p) = ports.get(hop.port) else {
                continue;
            };
            let mac = self.port_mac(hop.port);
            let mut buf = [0u8; dataplane::neighbour::FRAME_MAX];
            let built = match hop.addr {
                std::net::IpAddr::V4(target) => {
                    let src = first_v4(p).unwrap_or(std::net::Ipv4Addr::UNSPECIFIED);
                    wire::neighbour::arp_request(&mut buf, mac, src, target)
                }
                std::net::IpAddr::V6(target) => match first_v6(p) {
                    Some(src) => {
                        wire::neighbour::neighbour_solicitation(&mut buf, mac, src, target)
                    }
                    None => continue,
                },
            };
            if let Ok(n) = built {
                self.out.push(Output::Transmit {
                    port: hop.port,
                    frame: buf[..n].to_vec(),
                });
            }
        }
        let mut due = Vec::new();
        self.announcer.tick(
            self.now,
            self.compiled.settings.neighbours.announce_interval.0,
            &mut due,
        );
        for (port, addr) in due {
            let mac = self.port_mac(port);
            let mut buf = [0u8; dataplane::neighbour::FRAME_MAX];
            let built = match addr {
                std::net::IpAddr::V4(a) => wire::neighbour::gratuitous_arp(&mut buf, mac, a),
                std::net::IpAddr::V6(a) => wire::neighbour::unsolicited_advert(&mut buf, mac, a),
            };
            if let Ok(n) = built {
                self.out.push(Output::Transmit {
                    port,
                    frame: buf[..n].to_vec(),
                });
            }
        }
        if changed {
            for e in self.neighbours.entries() {
                if e.state == crate::neighbours::State::Failed && e.mac.is_none() {
                    say!(
                        self.out,
                        Warn,
                        "neighbour {} on port {} does not answer: packets for it are dropped (no_neighbour)",
                        e.hop.addr,
                        e.hop.port
                    );
                }
            }
            self.neighbours_changed();
        }
        changed
    }

    /// The neighbour table changed: the snapshot's MACs, and locality's
    /// view of which endpoints can take flows.
    pub(super) fn neighbours_changed(&mut self) {
        self.local.neighbours = self.neighbours.resolved();
        let unresolved = self
            .compiled
            .endpoints
            .iter()
            .map(|ep| !self.local.endpoint_resolved(&self.compiled, ep))
            .collect();
        self.balance.set_unresolved(unresolved);
    }

    fn port_mac(&self, port: usize) -> wire::ethernet::MacAddr {
        self.local
            .port_macs
            .get(port)
            .copied()
            .unwrap_or(self.local.mac)
    }
}

/// The next hops of `compiled` (M47).
pub(super) fn next_hops(compiled: &Compiled) -> Vec<dataplane::nexthop::NextHop> {
    dataplane::nexthop::next_hops(compiled)
}

fn first_v4(p: &config::schema::Port) -> Option<std::net::Ipv4Addr> {
    p.addresses.iter().find_map(|a| match a.addr {
        std::net::IpAddr::V4(v) => Some(v),
        std::net::IpAddr::V6(_) => None,
    })
}

fn first_v6(p: &config::schema::Port) -> Option<std::net::Ipv6Addr> {
    p.addresses.iter().find_map(|a| match a.addr {
        std::net::IpAddr::V6(v) => Some(v),
        std::net::IpAddr::V4(_) => None,
    })
}

pub(super) fn mac_text(m: wire::ethernet::MacAddr) -> String {
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        m[0], m[1], m[2], m[3], m[4], m[5]
    )
}

/// What this node announces on L2 (M47): every VIP it serves (but VRRP
/// groups' VIPs) on the uplink
/// and on each data port whose subnet holds it, and each port's own
/// addresses on that port; as (port, address), each once.
pub(super) fn announced(compiled: &Compiled) -> Vec<(usize, std::net::IpAddr)> {
    use config::schema::PortRole;
    let ports = &compiled.settings.ports;
    let mut out: Vec<(usize, std::net::IpAddr)> = Vec::new();
    let mut vips: Vec<std::net::IpAddr> = compiled
        .children
        .iter()
        // A VIP prefix is routed to the node, never announced address by
        // address (the data plane still answers for any of them).
        .filter(|ch| ch.served && !ch.vip_spec().is_range())
        .map(|ch| ch.vip)
        // A VRRP group's VIPs are announced by its master when it takes
        // over, never by every node.
        .filter(|v| !compiled.settings.vrrp.iter().any(|g| g.vips.contains(v)))
        .collect();
    vips.sort_unstable();
    vips.dedup();
    for (i, p) in ports.iter().enumerate() {
        if p.role == PortRole::Exception {
            continue;
        }
        for v in &vips {
            if p.role == PortRole::Uplink || p.addresses.iter().any(|a| a.contains(*v)) {
                out.push((i, *v));
            }
        }
        for a in &p.addresses {
            out.push((i, a.addr));
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}
