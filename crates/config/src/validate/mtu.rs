//! The egress MTU against encapsulation (M48): IPv6 hosts ignore a "packet
//! too big" under 1280 (RFC 8200 §5), so a backend side whose MTU, less a
//! tunnel's overhead, leaves IPv6 VIPs less than 1280 bytes would silently
//! lose the packets between the two sizes.

use super::Checker;
use crate::schema::DeliveryMode;

/// The smallest MTU IPv6 allows a path.
const IPV6_MIN_MTU: u16 = 1280;

impl Checker<'_> {
    /// Each service an IPv6 VIP's rule reaches through a tunnel must leave
    /// inner packets of 1280 bytes room on the egress port.
    pub(super) fn mtu(&mut self) {
        let cfg = self.cfg;
        let Some((i, port)) = crate::schema::egress_port(&cfg.ports) else {
            return;
        };
        for svc in &cfg.backend_services {
            let tunnel = match svc.delivery {
                DeliveryMode::L2dsr => continue,
                DeliveryMode::Ipip => 0,
                DeliveryMode::Gre => 4 + if svc.gre_key.is_some() { 4 } else { 0 },
                DeliveryMode::Gue => 8,
                // UDP, the base header and the flow cookie option.
                DeliveryMode::Geneve => 8 + 8 + 8,
            };
            let v6_vip = self
                .index
                .rules_of(cfg, &svc.name)
                .any(|r| r.vips.iter().any(|v| v.addr.is_ipv6()));
            if !v6_vip {
                continue;
            }
            let v6_endpoint = svc
                .groups
                .iter()
                .flat_map(|g| &g.endpoints)
                .any(|e| e.address.is_ipv6());
            let overhead: u16 = if v6_endpoint { 40 } else { 20 } + tunnel;
            let usable = port.mtu.saturating_sub(overhead);
            if usable < IPV6_MIN_MTU {
                self.err(
                    &format!("ports[{i}].mtu"),
                    format!(
                        "MTU {} leaves {usable} bytes for the IPv6 packets of service {:?} once in {} ({overhead} bytes): IPv6 needs {IPV6_MIN_MTU} (hosts ignore a smaller \"packet too big\"); at least {} on this port",
                        port.mtu,
                        svc.name,
                        svc.delivery,
                        IPV6_MIN_MTU + overhead
                    ),
                );
            }
        }
    }
}
