//! `[[forwarding_rules]]`: each rule's VIPs, ports and service, and that no two
//! rules compete for one packet (M3, M4), since the data plane picks one by address.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;

use super::{Checker, family, family_compatible, ipv4_mapped};
use crate::schema::{DeliveryMode, ForwardingRule, GatewayTunnel, Protocol, RuleMode};
use crate::values::{Prefix, Vip};

/// The widest IPv6 VIP prefix (a cloud's external IPv6 forwarding rule is
/// a /96).
const MIN_VIP_PREFIX_V6: u8 = 96;

impl Checker<'_> {
    pub(super) fn rules(&mut self) {
        let cfg = self.cfg;
        let ix = self.index;
        let rules = &cfg.forwarding_rules;
        self.names(
            "forwarding rule",
            rules
                .iter()
                .enumerate()
                .map(|(i, r)| (format!("forwarding_rules[{i}].name"), r.name.as_str())),
        );
        // `/status`, the metrics and the transitions name rules and child
        // rules alike (M5, M21): a rule named like another's child rule
        // would export two states under one name.
        for (i, r) in rules.iter().enumerate() {
            let parent = rules.iter().find_map(|o| {
                (0..o.vips.len())
                    .find(|g| r.name == format!("{}-ag{g}", o.name))
                    .map(|g| (o, g))
            });
            if let Some((o, g)) = parent {
                self.err(
                    &format!("forwarding_rules[{i}].name"),
                    format!(
                        "{:?} is also the name of rule {:?}'s child rule for availability group {g}: status and metrics would show two states under one name",
                        r.name, o.name
                    ),
                );
            }
        }
        let services: HashMap<&str, usize> = cfg
            .backend_services
            .iter()
            .enumerate()
            .map(|(i, s)| (s.name.as_str(), i))
            .collect();
        let mut gateway_sources: HashMap<IpAddr, String> = HashMap::new();
        // M5: an address is availability group 0 or 1 wherever it is a VIP,
        // or a node of one group would serve half of another's address.
        let mut group_of: HashMap<Vip, (usize, usize)> = HashMap::new();
        self.vip_overlaps();
        for (i, r) in rules.iter().enumerate() {
            let p = format!("forwarding_rules[{i}]");
            match r.vips.len() {
                1 | 2 => {}
                0 => self.err(
                    &format!("{p}.vips"),
                    "a rule needs one VIP (availability group 0) or two (groups 0 and 1)",
                ),
                n => self.err(
                    &format!("{p}.vips"),
                    format!("{n} VIPs: a rule has one VIP per availability group, at most two"),
                ),
            }
            if let [a, b] = r.vips[..] {
                if a.addr.is_ipv4() != b.addr.is_ipv4() {
                    self.err(
                        &format!("{p}.vips[1]"),
                        format!(
                            "{b} is {} but {a} is {}: both VIPs of a rule are of one IP version",
                            family(b.addr),
                            family(a.addr)
                        ),
                    );
                } else if a == b {
                    self.err(
                        &format!("{p}.vips[1]"),
                        format!("{b} is given twice: each availability group needs its own VIP"),
                    );
                }
            }
            for (k, v) in r.vips.iter().enumerate() {
                let a = v.addr;
                if a.is_unspecified() || a.is_multicast() || a.is_loopback() {
                    self.err(&format!("{p}.vips[{k}]"), format!("{v} cannot be a VIP"));
                } else if let Some(v4) = ipv4_mapped(&a) {
                    self.err(
                        &format!("{p}.vips[{k}]"),
                        format!("{v} is an IPv4-mapped IPv6 address, which never appears on the wire: write {v4}"),
                    );
                } else if a.is_ipv4() && v.is_range() {
                    self.err(
                        &format!("{p}.vips[{k}]"),
                        format!("{v}: an IPv4 VIP is one address; only an IPv6 VIP may be a prefix (/96 to /128)"),
                    );
                } else if a.is_ipv6() && v.len < MIN_VIP_PREFIX_V6 {
                    self.err(
                        &format!("{p}.vips[{k}]"),
                        format!("{v} is wider than /{MIN_VIP_PREFIX_V6}: an IPv6 VIP prefix is /{MIN_VIP_PREFIX_V6} to /128, as a cloud's IPv6 forwarding rule"),
                    );
                } else if v.prefix().has_host_bits() {
                    self.err(
                        &format!("{p}.vips[{k}]"),
                        format!(
                            "{v} has host bits set beyond /{}: write the network, {}",
                            v.len,
                            v.prefix().network()
                        ),
                    );
                }
                // (A rule giving one address twice is told so above.)
                match group_of.get(v) {
                    Some(&(g, j)) if g != k && j != i => self.err(
                        &format!("{p}.vips[{k}]"),
                        format!("{v} is availability group {k} here but group {g} in rule {:?}: an address plays one availability-group role across all rules", rules[j].name),
                    ),
                    Some(_) => {}
                    None => {
                        group_of.insert(*v, (k, i));
                    }
                }
            }
            if r.answer_ping == Some(true)
                && (r.protocol == Protocol::L3Default || r.mode == RuleMode::Gateway)
            {
                self.err(&format!("{p}.answer_ping"), "only a passthrough TCP or UDP rule's VIPs answer ping themselves: an L3_DEFAULT rule forwards ICMP, a gateway rule's traffic belongs to its appliances");
            }
            if let Some(ranges) = &r.source_ranges {
                self.source_ranges(&p, r, ranges);
            }
            if r.protocol == Protocol::L3Default && !r.ports.is_all() {
                self.err(&format!("{p}.ports"), format!("L3_DEFAULT matches every port and protocol: ports must be \"all\", not \"{}\"", r.ports));
            }
            if let Some(ag) = cfg.node.availability_group
                && usize::from(ag) >= r.vips.len()
                && !r.vips.is_empty()
            {
                self.warn(&format!("{p}.vips"), format!("this node serves availability group {ag} only, and the rule has no VIP for it"));
            }
            let svc = services.get(r.backend_service.as_str()).copied();
            match svc {
                None => {
                    let known = cfg
                        .backend_services
                        .iter()
                        .map(|s| s.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ");
                    self.err(
                        &format!("{p}.backend_service"),
                        format!(
                            "no backend service is named {:?} (known: {known})",
                            r.backend_service
                        ),
                    );
                }
                Some(s) => self.rule_families(i, s),
            }
            // Gateway mode (M31): the NVAs are reached with Geneve only.
            match r.mode {
                RuleMode::Gateway => {
                    if let Some(s) = svc
                        && cfg.backend_services[s].delivery != DeliveryMode::Geneve
                    {
                        self.err(
                            &format!("{p}.mode"),
                            format!("a gateway rule sends to its appliances with Geneve, but service {:?} delivers with {}", r.backend_service, cfg.backend_services[s].delivery),
                        );
                    }
                    if r.gateway_endpoints.is_empty() {
                        self.err(
                            &format!("{p}.gateway_endpoints"),
                            "a gateway rule needs at least one gateway endpoint",
                        );
                    }
                    // The rule takes what its endpoints route to it, in both
                    // directions: a port filter would split connections.
                    if !r.ports.is_all() {
                        self.err(
                            &format!("{p}.ports"),
                            "a gateway rule takes every port of its protocol in both directions: ports must be \"all\"",
                        );
                    }
                    if let Some(s) = svc
                        && cfg.backend_services[s].delivery == DeliveryMode::Geneve
                        && let Some(other) = ix
                            .rules_of(cfg, &cfg.backend_services[s].name)
                            .find(|o| o.mode == RuleMode::Passthrough)
                    {
                        self.err(
                            &format!("{p}.backend_service"),
                            format!("service {:?} holds appliances, which return what they get; it cannot also serve passthrough rule {:?}", r.backend_service, other.name),
                        );
                    }
                    let mut ids = HashSet::new();
                    for (k, g) in r.gateway_endpoints.iter().enumerate() {
                        // Identified by the MAC its address resolves to, on
                        // the port of its subnet (M31, M47).
                        let data_ports = || {
                            cfg.ports
                                .iter()
                                .filter(|pt| pt.role != crate::schema::PortRole::Exception)
                        };
                        if let Some(t) = g.tunnel {
                            self.remote_gateway_endpoint(
                                &format!("{p}.gateway_endpoints[{k}]"),
                                g.address,
                                t,
                            );
                        } else if data_ports().next().is_some()
                            && !data_ports()
                                .any(|pt| pt.addresses.iter().any(|a| a.contains(g.address)))
                        {
                            self.err(
                                &format!("{p}.gateway_endpoints[{k}].address"),
                                format!("gateway endpoint {} is on no subnet of a data port: it must be a neighbour, whose MAC identifies its traffic", g.address),
                            );
                        }
                        if !ids.insert(g.id) {
                            self.err(
                                &format!("{p}.gateway_endpoints[{k}].id"),
                                format!("endpoint ID {:#x} is used twice", g.id),
                            );
                        }
                        // The source address selects the rule (M31), so it
                        // may belong to one rule only.
                        let path = format!("{p}.gateway_endpoints[{k}].address");
                        if let Some(first) = gateway_sources.get(&g.address) {
                            let at = self.at(first);
                            self.err(
                                &path,
                                format!("gateway endpoint {} is already listed at {at}", g.address),
                            );
                        } else {
                            gateway_sources.insert(g.address, path);
                        }
                    }
                }
                RuleMode::Passthrough => {
                    if !r.gateway_endpoints.is_empty() {
                        self.err(
                            &format!("{p}.gateway_endpoints"),
                            "gateway endpoints only apply to rules with mode = \"gateway\"",
                        );
                    }
                }
            }
        }
        self.rule_overlaps();
    }

    /// A remote gateway endpoint (M31) at `p`, tunnelling from `addr`: its
    /// returns leave the egress port from that port's address of its family,
    /// to it or to the port's gateway; its address is none of the node's,
    /// no VIP and no backend's (a Geneve packet from an appliance is a
    /// return, never ingress).
    fn remote_gateway_endpoint(&mut self, p: &str, addr: IpAddr, tunnel: GatewayTunnel) {
        let cfg = self.cfg;
        let at = format!("{p}.address");
        let fam = if addr.is_ipv4() { "IPv4" } else { "IPv6" };
        if let Some((pi, port)) = crate::schema::egress_port(&cfg.ports) {
            let port_at = self.at(&format!("ports[{pi}].name"));
            if !port
                .addresses
                .iter()
                .any(|a| a.addr.is_ipv4() == addr.is_ipv4())
            {
                self.err(
                    &at,
                    format!("remote gateway endpoint {addr} gets its returns in {tunnel} from port {:?} (at {port_at}), which has no {fam} address", port.name),
                );
            } else if !port.addresses.iter().any(|a| a.contains(addr))
                && port.gateway.is_none()
                && port.gateway_mac.is_none()
            {
                self.err(
                    &at,
                    format!("remote gateway endpoint {addr} is on no subnet of port {:?} (at {port_at}), which has no gateway to reach it by", port.name),
                );
            }
        }
        let own = cfg
            .ports
            .iter()
            .any(|pt| pt.addresses.iter().any(|a| a.addr == addr));
        let vip = cfg
            .forwarding_rules
            .iter()
            .any(|r| r.vips.iter().any(|v| v.contains(addr)));
        let backend = cfg.backend_services.iter().find(|s| {
            s.groups
                .iter()
                .flat_map(|g| &g.endpoints)
                .any(|e| e.address == addr || e.address6 == Some(addr))
        });
        if own || vip {
            self.err(
                &at,
                format!("remote gateway endpoint {addr} is {} of this node's: its tunnel would come from the node itself", if own { "an address" } else { "a VIP" }),
            );
        } else if let Some(s) = backend {
            self.err(
                &at,
                format!("remote gateway endpoint {addr} is also an endpoint of service {:?}: Geneve from an appliance is a return, never a gateway endpoint's traffic", s.name),
            );
        }
    }

    /// A rule's `source_ranges`: networks of its VIPs' IP version, written
    /// without host bits, on a passthrough rule.
    /// M1: a packet's destination names one VIP. Two different VIPs (of
    /// any rules) sharing an address — a prefix and an address or prefix
    /// inside it — are refused at the later one; rules may share one VIP.
    fn vip_overlaps(&mut self) {
        let rules = &self.cfg.forwarding_rules;
        let mut seen: Vec<(Vip, usize)> = Vec::new();
        for (i, r) in rules.iter().enumerate() {
            for (k, v) in r.vips.iter().enumerate() {
                let clash = seen.iter().find(|(o, _)| o != v && o.overlaps(v));
                if let Some(&(o, j)) = clash {
                    self.err(
                        &format!("forwarding_rules[{i}].vips[{k}]"),
                        format!("{v} overlaps VIP {o} of rule {:?}: a packet's destination must name one VIP", rules[j].name),
                    );
                } else if !seen.iter().any(|(o, _)| o == v) {
                    seen.push((*v, i));
                }
            }
        }
    }

    fn source_ranges(&mut self, p: &str, r: &ForwardingRule, ranges: &[Prefix]) {
        let at = format!("{p}.source_ranges");
        if r.mode == RuleMode::Gateway {
            self.err(&at, "a gateway rule carries its appliances' traffic from anywhere to anywhere: source_ranges apply to passthrough rules");
            return;
        }
        if ranges.is_empty() {
            self.err(
                &at,
                "an empty list admits no client: omit source_ranges to admit every client",
            );
        }
        let Some(vip) = r.vips.first() else {
            return;
        };
        for (k, range) in ranges.iter().enumerate() {
            if range.addr.is_ipv4() != vip.addr.is_ipv4() {
                self.err(
                    &format!("{at}[{k}]"),
                    format!(
                        "{range} is {} but the rule's VIPs are {}: it would admit no client",
                        family(range.addr),
                        family(vip.addr)
                    ),
                );
            } else if range.has_host_bits() {
                self.err(
                    &format!("{at}[{k}]"),
                    format!(
                        "{range} has host bits set beyond /{}: write the network, {}",
                        range.len,
                        range.network()
                    ),
                );
            } else if let Some(v4) = ipv4_mapped(&range.addr) {
                self.err(
                    &format!("{at}[{k}]"),
                    format!("{range} is IPv4-mapped IPv6, which never appears on the wire as a source: an IPv4 client ({v4}) reaches an IPv4 VIP"),
                );
            }
        }
    }

    /// M4: no two rules on one address pair share a protocol and a port; at
    /// most one L3_DEFAULT per pair. Rules sharing any VIP address count as
    /// one pair, because the data plane selects by destination address.
    fn rule_overlaps(&mut self) {
        let rules = &self.cfg.forwarding_rules;
        // Only rules sharing a VIP and a protocol can conflict, and of
        // those (but L3_DEFAULT ones) only rules whose port ranges meet: a
        // sweep over each VIP's ranges in port order finds exactly those
        // pairs, rather than comparing every rule with every other (many
        // rules may share one VIP, each on ports of its own).
        let mut by_vip: HashMap<(Vip, Protocol), Vec<usize>> = HashMap::new();
        for (i, r) in rules.iter().enumerate() {
            for v in &r.vips {
                let list = by_vip.entry((*v, r.protocol)).or_default();
                // (Rules are visited in order: a rule giving one VIP twice
                // would come right after itself.)
                if list.last() != Some(&i) {
                    list.push(i);
                }
            }
        }
        let mut pairs = std::collections::BTreeSet::new();
        for ((_, protocol), list) in &by_vip {
            if *protocol == Protocol::L3Default {
                // Every L3_DEFAULT rule after the first is an error.
                for (x, &j) in list.iter().enumerate() {
                    for &i in &list[..x] {
                        pairs.insert((i.min(j), i.max(j)));
                    }
                }
                continue;
            }
            let mut ranges: Vec<(u16, u16, usize)> = list
                .iter()
                .flat_map(|&i| {
                    rules[i]
                        .ports
                        .ranges()
                        .into_iter()
                        .map(move |r| (r.lo, r.hi, i))
                })
                .collect();
            ranges.sort_unstable();
            // The ranges begun so far that reach the current one's start.
            let mut open: Vec<(u16, usize)> = Vec::new();
            for (lo, hi, i) in ranges {
                open.retain(|&(end, _)| end >= lo);
                for &(_, j) in &open {
                    if j != i {
                        pairs.insert((i.min(j), i.max(j)));
                    }
                }
                open.push((hi, i));
            }
        }
        for (i, j) in pairs {
            {
                let (a, b) = (&rules[i], &rules[j]);
                let shared: Vec<String> = b
                    .vips
                    .iter()
                    .filter(|v| a.vips.contains(v))
                    .map(ToString::to_string)
                    .collect();
                if shared.is_empty() || a.protocol != b.protocol {
                    continue;
                }
                let pb = format!("forwarding_rules[{j}]");
                let at = self.at(&format!("forwarding_rules[{i}]"));
                let on = shared.join("/");
                if b.protocol == Protocol::L3Default {
                    self.err(
                        &format!("{pb}.protocol"),
                        format!("a second L3_DEFAULT rule on {on}: rule {:?} ({at}) already is the L3_DEFAULT rule there", a.name),
                    );
                    continue;
                }
                let common = a.ports.intersection(&b.ports);
                if !common.is_empty() {
                    let ports = crate::values::PortSpec::Ranges(common).to_string();
                    let ports = if ports == "0-65535" {
                        "all".to_owned()
                    } else {
                        ports
                    };
                    self.err(
                        &format!("{pb}.ports"),
                        format!(
                            "{} ports {ports} overlap rule {:?} ({at}) on {on}",
                            b.protocol, a.name
                        ),
                    );
                }
            }
        }
    }

    /// M4/M8: every endpoint can carry the rule's address family.
    fn rule_families(&mut self, r: usize, s: usize) {
        let rule = &self.cfg.forwarding_rules[r];
        let svc = &self.cfg.backend_services[s];
        let Some(vip) = rule.vips.first().map(|v| v.addr) else {
            return;
        };
        for (g, group) in svc.groups.iter().enumerate() {
            // A dual-stack endpoint takes a family if either address can.
            let mut targets: Vec<(String, IpAddr)> = group
                .endpoints
                .iter()
                .enumerate()
                .filter(|(_, ep)| {
                    !ep.address6
                        .is_some_and(|a6| family_compatible(svc.delivery, vip, a6))
                })
                .map(|(e, ep)| {
                    (
                        format!("backend_services[{s}].groups[{g}].endpoints[{e}].address"),
                        ep.address,
                    )
                })
                .collect();
            if let Some(rem) = &group.remote {
                targets.push((
                    format!("backend_services[{s}].groups[{g}].remote.vip"),
                    rem.vip,
                ));
            }
            for (path, addr) in targets {
                if !family_compatible(svc.delivery, vip, addr) {
                    let why = match svc.delivery {
                        DeliveryMode::L2dsr => {
                            "l2dsr only rewrites the MAC, so endpoints need the VIP's address family"
                        }
                        _ => {
                            "ipip carries IPv4 in IPv4, IPv6 in IPv6 and IPv4 in IPv6, not IPv6 in IPv4"
                        }
                    };
                    let at = self.at(&format!("forwarding_rules[{r}].vips"));
                    self.err(
                        &path,
                        format!("{} endpoint {addr} cannot take the {} traffic of rule {:?} ({at}): {why}", family(addr), family(vip), rule.name),
                    );
                }
            }
        }
    }
}
