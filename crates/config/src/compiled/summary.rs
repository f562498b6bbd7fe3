//! The text `spillway check-config` prints: what the file compiled to, per VIP
//! and per service, so an operator can see what the node will do.

use std::fmt::Write as _;
use std::net::IpAddr;

use super::Compiled;
use crate::schema::{Protocol, RuleMode};

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
    // Each single VIP, then each VIP prefix (shown with its length, its
    // rules looked up through its first address).
    let vips: Vec<(IpAddr, String)> = c
        .rule_index
        .vips()
        .map(|v| (v, v.to_string()))
        .chain(c.rule_index.vip_prefixes().map(|p| (p.addr, p.to_string())))
        .collect();
    let _ = writeln!(
        s,
        "forwarding rules: {} ({} child rules), served VIPs: {}",
        c.rules.len(),
        c.children.len(),
        vips.len()
    );
    for (vip, shown) in vips {
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
                    let eps: Vec<String> = rule
                        .gateway_endpoints
                        .iter()
                        .map(|g| match g.tunnel {
                            None => format!("{} id {:#x}", g.address, g.id),
                            Some(t) => format!("{} id {:#x} remote in {t}", g.address, g.id),
                        })
                        .collect();
                    format!(" (gateway, from {})", eps.join(", "))
                } else {
                    String::new()
                };
                let from = match &rule.source_ranges {
                    Some(ranges) => {
                        let list: Vec<String> = ranges.iter().map(ToString::to_string).collect();
                        format!(" (from {} only)", list.join(", "))
                    }
                    None => String::new(),
                };
                format!(
                    "{} {}{ports} -> {}{gw}{from}",
                    rule.name,
                    rule.protocol,
                    c.services[rule.service.index()].name
                )
            })
            .collect();
        // A VIP allocated from a pool says so: the file does not show it.
        let pool = c
            .children
            .iter()
            .find(|ch| ch.vip == vip && ch.served)
            .filter(|ch| ch.allocated)
            .map_or("", |_| " (from vip_pool)");
        let _ = writeln!(s, "  {shown}{pool}: {}", rules.join("; "));
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
    for (i, svc) in c.services.iter().enumerate() {
        let capacity = c
            .capacity_limits(super::ServiceId(super::dense(i)))
            .map_or_else(String::new, |l| format!(", capacity {l}"));
        let _ = writeln!(
            s,
            "  {}: {}, {} groups, {} endpoints, Maglev M = {}{capacity}",
            svc.name,
            svc.delivery,
            svc.groups.len(),
            svc.endpoints.len(),
            svc.maglev_table_size
        );
    }
    let _ = writeln!(s, "regions (nearest first): {}", c.regions.join(", "));
    for g in &c.settings.vrrp {
        let vips: Vec<String> = g.vips.iter().map(ToString::to_string).collect();
        let peers = if g.peers.is_empty() {
            "from any sender on the segment".to_owned()
        } else {
            let p: Vec<String> = g.peers.iter().map(ToString::to_string).collect();
            format!("from {} only", p.join(", "))
        };
        let _ = writeln!(
            s,
            "vrrp: vrid {} on port {}, priority {}, every {:?}{}; VIPs {}; advertisements {peers}",
            g.vrid,
            g.port,
            g.priority,
            g.advert_interval.0,
            if g.preempt { ", preempting" } else { "" },
            vips.join(", ")
        );
    }
    s.push_str(memory);
    let _ = writeln!(s, "warnings: {}", warnings.len());
    for w in warnings {
        let _ = writeln!(s, "  {w}");
    }
    s
}

#[cfg(test)]
mod tests {
    use crate::compiled::fixture::{V4, doc, load, rule};

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
