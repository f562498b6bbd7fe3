//! `[[vrrp]]`: VRRPv3 groups (RFC 5798) — a usable VRID, priority and
//! interval on a data port; VIPs that are this file's own single-address
//! VIPs, of one IP version, in one group only, and never also announced by
//! `[bgp]` (a VIP fails over one way).

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::time::Duration;

use super::Checker;
use crate::schema::PortRole;

/// The shortest interval: the management loop steps every 50 ms, so a
/// shorter one could not be kept.
const MIN_INTERVAL: Duration = Duration::from_millis(100);

impl Checker<'_> {
    pub(super) fn vrrp(&mut self) {
        let rule_vips: HashSet<IpAddr> = self
            .cfg
            .forwarding_rules
            .iter()
            .flat_map(|r| r.vips.iter())
            .filter(|v| !v.is_range())
            .map(|v| v.addr)
            .collect();
        let mut groups = HashSet::new();
        let mut owner: HashMap<IpAddr, u8> = HashMap::new();
        for (i, g) in self.cfg.vrrp.iter().enumerate() {
            let at = |f: &str| format!("vrrp[{i}].{f}");
            if g.vrid == 0 {
                self.err(&at("vrid"), "a virtual router ID is 1 to 255");
            }
            if !(1..=254).contains(&g.priority) {
                self.err(
                    &at("priority"),
                    format!(
                        "priority {} is not 1 to 254 (255 is the owner of the addresses, which a load balancer never is)",
                        g.priority
                    ),
                );
            }
            let iv = g.advert_interval.0;
            let max = Duration::from_millis(u64::from(wire::vrrp::MAX_INTERVAL_CS) * 10);
            if iv < MIN_INTERVAL || iv > max || iv.as_nanos() % 10_000_000 != 0 {
                self.err(
                    &at("advert_interval"),
                    format!(
                        "{iv:?} is not a whole number of centiseconds from 100ms to 40.95s (the management loop steps every 50 ms)"
                    ),
                );
            }
            match self.cfg.ports.iter().find(|p| p.name == g.port) {
                None => self.err(
                    &at("port"),
                    format!("no port is named {:?} in [[ports]]", g.port),
                ),
                Some(p) if p.role == PortRole::Exception => self.err(
                    &at("port"),
                    format!(
                        "{:?} is an exception port: VRRP runs on a data port",
                        g.port
                    ),
                ),
                Some(p) => {
                    let v4 = g.vips.first().is_none_or(IpAddr::is_ipv4);
                    if v4 && !p.addresses.iter().any(|a| a.addr.is_ipv4()) {
                        self.err(
                            &at("port"),
                            format!("port {:?} has no IPv4 address to advertise from", g.port),
                        );
                    }
                }
            }
            let Some(first) = g.vips.first() else {
                self.err(&at("vips"), "a group needs at least one VIP");
                continue;
            };
            let v4 = first.is_ipv4();
            if !groups.insert((g.port.as_str(), g.vrid, v4)) {
                self.err(
                    &at("vrid"),
                    format!(
                        "VRID {} of IPv{} is already a group on port {:?}",
                        g.vrid,
                        if v4 { 4 } else { 6 },
                        g.port
                    ),
                );
            }
            let most = wire::vrrp::max_addrs(v4);
            if g.vips.len() > most {
                self.err(
                    &at("vips"),
                    format!(
                        "{} VIPs: a group advertises at most {most} of its IP version",
                        g.vips.len()
                    ),
                );
            }
            for vip in &g.vips {
                if vip.is_ipv4() != v4 {
                    self.err(
                        &at("vips"),
                        format!(
                            "{vip} is not of the IP version of {first}: a group is IPv4 or IPv6"
                        ),
                    );
                } else if !rule_vips.contains(vip) {
                    self.err(
                        &at("vips"),
                        format!("{vip} is no single-address VIP of a forwarding rule"),
                    );
                } else if let Some(other) = owner.insert(*vip, g.vrid) {
                    self.err(
                        &at("vips"),
                        format!("{vip} is already in the group of VRID {other}"),
                    );
                } else if self.cfg.bgp.is_some() {
                    self.err(
                        &at("vips"),
                        format!(
                            "{vip} is announced by [bgp], which announces every VIP: a VIP fails over by BGP or by VRRP, not both"
                        ),
                    );
                }
            }
            let mut seen = HashSet::new();
            for (j, p) in g.peers.iter().enumerate() {
                if p.is_ipv4() != v4 {
                    self.err(
                        &format!("vrrp[{i}].peers[{j}]"),
                        format!("{p} is not of the group's IP version"),
                    );
                }
                if !seen.insert(p) {
                    self.err(
                        &format!("vrrp[{i}].peers[{j}]"),
                        format!("peer {p} is listed twice"),
                    );
                }
            }
        }
    }
}
