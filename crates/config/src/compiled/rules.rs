//! Rule selection (M2, M3): forwarding rules and their per-VIP children, and the
//! index the data plane searches per packet — by address, protocol, then port.

use std::net::IpAddr;

use wire::ip::proto::{self, TCP, UDP};

use super::{ChildRuleId, CompositeId, RuleId, ServiceId};
use crate::schema::{Protocol, RuleMode};
use crate::values::{PortSpec, Prefix, Vip};

/// IP protocol numbers that `L3_DEFAULT` matches (M2).
pub const L3_DEFAULT_PROTOCOLS: [u8; 6] =
    [proto::ICMP, TCP, UDP, proto::GRE, proto::ESP, proto::ICMPV6];

/// A packet's rule: the rule and the child rule (VIP / availability group)
/// whose counters it goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RuleMatch {
    /// The forwarding rule.
    pub rule: RuleId,
    /// The child rule of the destination VIP.
    pub child: ChildRuleId,
    /// The rule's backend service (copied here so that the data plane's
    /// per-packet path needs no second lookup into `rules`).
    pub service: ServiceId,
    /// Whether the rule is a gateway-mode rule (likewise copied).
    pub gateway: bool,
}

/// The clients a rule admits (`source_ranges`): the union of its prefixes
/// as sorted, disjoint address ranges, asked with one binary search. Every
/// prefix of the list allows, so a longest-prefix match would only ever
/// answer "inside some prefix or not"; the merged ranges answer exactly
/// that, with no trie to walk.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SourceSet {
    /// IPv4 ranges, sorted, neither overlapping nor adjacent: their first
    /// and last addresses apart, the search reading only the lasts.
    v4_first: Vec<u32>,
    v4_last: Vec<u32>,
    /// IPv6 ranges, likewise.
    v6_first: Vec<u128>,
    v6_last: Vec<u128>,
}

impl SourceSet {
    /// The set of the addresses inside any of `prefixes`.
    pub fn from_prefixes(prefixes: &[Prefix]) -> SourceSet {
        let (v4, v6): (Vec<Prefix>, Vec<Prefix>) = prefixes.iter().partition(|p| p.addr.is_ipv4());
        let narrow = |x: u128| u32::try_from(x).unwrap_or(u32::MAX);
        let (v4_first, v4_last) = merged(&v4)
            .into_iter()
            .map(|(a, b)| (narrow(a), narrow(b)))
            .unzip();
        let (v6_first, v6_last) = merged(&v6).into_iter().unzip();
        SourceSet {
            v4_first,
            v4_last,
            v6_first,
            v6_last,
        }
    }

    /// Whether `src` lies inside the set. No allocation.
    #[inline]
    pub fn contains(&self, src: IpAddr) -> bool {
        match src {
            IpAddr::V4(a) => {
                let a = u32::from(a);
                let i = self.v4_last.partition_point(|&last| last < a);
                self.v4_first.get(i).is_some_and(|&first| first <= a)
            }
            IpAddr::V6(a) => {
                let a = u128::from(a);
                let i = self.v6_last.partition_point(|&last| last < a);
                self.v6_first.get(i).is_some_and(|&first| first <= a)
            }
        }
    }

    /// Number of disjoint ranges the prefixes merged into.
    pub fn ranges(&self) -> usize {
        self.v4_last.len() + self.v6_last.len()
    }
}

/// The prefixes of one IP version as sorted, disjoint, non-adjacent
/// inclusive ranges of addresses as integers ([`Prefix::span`]).
fn merged(prefixes: &[Prefix]) -> Vec<(u128, u128)> {
    let mut spans: Vec<(u128, u128)> = prefixes.iter().map(Prefix::span).collect();
    spans.sort_unstable();
    let mut out: Vec<(u128, u128)> = Vec::with_capacity(spans.len());
    for (lo, hi) in spans {
        match out.last_mut() {
            Some(last) if lo <= last.1.saturating_add(1) => last.1 = last.1.max(hi),
            _ => out.push((lo, hi)),
        }
    }
    out
}

#[derive(Clone, Debug)]
struct Interval {
    lo: u16,
    hi: u16,
    hit: RuleMatch,
}

#[derive(Clone, Debug)]
struct VipRules {
    addr: IpAddr,
    /// Prefix length: less than the address's width for a VIP prefix.
    len: u8,
    /// Sorted, disjoint (validation guarantees it).
    tcp: Vec<Interval>,
    udp: Vec<Interval>,
    l3_default: Option<RuleMatch>,
    /// Echo requests no rule takes are answered (every TCP/UDP rule of the
    /// VIP allows it).
    answers_echo: bool,
}

/// Destination address → protocol → port → rule (M3).
#[derive(Clone, Debug, Default)]
pub struct RuleIndex {
    /// Sorted by address key ([`addr_key`]).
    vips: Vec<VipRules>,
    /// `addr_key` of each entry of `vips`: searched as integers, not as
    /// `IpAddr`s (whose ordering compares byte by byte).
    keys: Vec<u128>,
    /// The VIP prefixes (IPv6 only), sorted and disjoint (validation):
    /// searched only when `dst` is no single VIP, so that single VIPs,
    /// IPv4 above all, pay nothing for them.
    prefixes: Vec<VipRules>,
    /// The first and last address of each of `prefixes`.
    prefix_spans: Vec<(u128, u128)>,
    /// Per child rule (by [`ChildRuleId`]): the clients its rule admits,
    /// an index into `source_sets`; `None`: every client.
    child_sources: Vec<Option<u32>>,
    /// The source sets of the rules with `source_ranges`.
    source_sets: Vec<SourceSet>,
}

/// An address as one integer (IPv4 as IPv4-mapped IPv6).
#[inline]
fn addr_key(a: IpAddr) -> u128 {
    match a {
        IpAddr::V4(v4) => 0xffff_0000_0000 | u128::from(u32::from(v4)),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

impl RuleIndex {
    #[inline]
    fn find(&self, dst: IpAddr) -> Option<&VipRules> {
        // `::ffff:a.b.c.d` shares its key with the IPv4 VIP a.b.c.d, but it
        // is an IPv6 destination (one that never appears on the wire):
        // never a VIP (validation rejects such VIPs).
        if let IpAddr::V6(v6) = dst {
            if v6.to_ipv4_mapped().is_some() {
                return None;
            }
        }
        let key = addr_key(dst);
        match self.keys.binary_search(&key) {
            Ok(i) => self.vips.get(i),
            Err(_) if dst.is_ipv6() && !self.prefixes.is_empty() => self.in_prefix(key),
            Err(_) => None,
        }
    }

    /// The VIP prefix holding the address of `key`, if any.
    #[cold]
    fn in_prefix(&self, key: u128) -> Option<&VipRules> {
        let i = self.prefix_spans.partition_point(|&(_, last)| last < key);
        let &(first, _) = self.prefix_spans.get(i)?;
        if first <= key {
            self.prefixes.get(i)
        } else {
            None
        }
    }

    /// The rule for a packet to `dst` with IP protocol `proto` and
    /// destination port `dst_port` (`None` for protocols without ports and
    /// non-first fragments), or `None`: drop (M3, M6).
    ///
    /// A TCP/UDP rule whose ports contain the port wins over `L3_DEFAULT`;
    /// a packet without a port matches only all-port rules. No allocation.
    #[inline]
    pub fn lookup(&self, dst: IpAddr, proto: u8, dst_port: Option<u16>) -> Option<RuleMatch> {
        Self::rule_at(self.find(dst)?, proto, dst_port)
    }

    /// [`RuleIndex::lookup`], telling apart when no rule matches whether
    /// `dst` is a VIP at all (`Err(true)`: "VIP, no rule"; `Err(false)`:
    /// not a VIP) with the one search: what the data plane asks of every
    /// packet, where `lookup` then [`RuleIndex::is_vip`] searched twice for
    /// a packet to no VIP (gateway traffic, anything not ours).
    #[inline]
    pub fn select(&self, dst: IpAddr, proto: u8, dst_port: Option<u16>) -> Result<RuleMatch, bool> {
        match self.find(dst) {
            Some(v) => Self::rule_at(v, proto, dst_port).ok_or(true),
            None => Err(false),
        }
    }

    #[inline]
    fn rule_at(v: &VipRules, proto: u8, dst_port: Option<u16>) -> Option<RuleMatch> {
        let specific = match proto {
            TCP => Some(&v.tcp),
            UDP => Some(&v.udp),
            _ => None,
        };
        if let Some(iv) = specific {
            let hit = match dst_port {
                Some(p) => iv
                    .get(iv.partition_point(|x| x.hi < p))
                    .filter(|x| x.lo <= p),
                // All-port rules are the only ones containing "no port";
                // such a rule covers 0-65535, so it is the only interval.
                None => iv.first().filter(|x| x.lo == 0 && x.hi == u16::MAX),
            };
            if let Some(h) = hit {
                return Some(h.hit);
            }
        }
        if L3_DEFAULT_PROTOCOLS.contains(&proto) {
            v.l3_default
        } else {
            None
        }
    }

    /// The rule for a real IP fragment (first or later) to `dst` with
    /// protocol `proto` (M13). A fragment can never prove its ports —
    /// later fragments have none, and a first fragment's header says nothing
    /// about the fragments that follow it — so it matches only a rule that
    /// accepts every port of its protocol: a TCP/UDP `all` rule, else
    /// `L3_DEFAULT`. A VIP whose only TCP rule is `TCP 80` therefore drops
    /// every TCP fragment: otherwise a fragmented SYN to port 22 would reach
    /// the backends through a rule that lists only port 80. Every fragment
    /// of a datagram gets the same answer, so all of them reach one service.
    #[inline]
    pub fn lookup_fragment(&self, dst: IpAddr, proto: u8) -> Option<RuleMatch> {
        self.lookup(dst, proto, None)
    }

    /// Whether the rule of child rule `child` (an index) admits a packet
    /// from client `src` (M6: its `source_ranges`, if it has any).
    #[inline]
    pub fn admits(&self, child: usize, src: IpAddr) -> bool {
        match self.child_sources.get(child).copied().flatten() {
            None => true,
            Some(set) => self
                .source_sets
                .get(set as usize)
                .is_some_and(|s| s.contains(src)),
        }
    }

    /// This index without the single-address VIPs of `standby` (sorted):
    /// the VIPs of VRRP groups this node is not master of, whose packets
    /// no rule takes and whose ARP/NDP it does not answer.
    pub fn without(&self, standby: &[IpAddr]) -> RuleIndex {
        let mut out = self.clone();
        let keep: Vec<bool> = self
            .vips
            .iter()
            .map(|v| standby.binary_search(&v.addr).is_err())
            .collect();
        let mut i = 0;
        out.vips.retain(|_| {
            i += 1;
            keep.get(i - 1).copied().unwrap_or(true)
        });
        let mut i = 0;
        out.keys.retain(|_| {
            i += 1;
            keep.get(i - 1).copied().unwrap_or(true)
        });
        out
    }

    /// Whether `addr` is a VIP this node serves (it answers ARP/NDP for it
    /// and counts unmatched traffic as "VIP, no rule" rather than "not ours").
    pub fn is_vip(&self, addr: IpAddr) -> bool {
        self.find(addr).is_some()
    }

    /// Whether an ICMP echo request to `addr` that no rule takes is answered
    /// by the balancer itself (`answer_ping`).
    #[inline]
    pub fn answers_echo(&self, addr: IpAddr) -> bool {
        self.find(addr).is_some_and(|v| v.answers_echo)
    }

    /// The single-address VIPs this node serves, in address order (its
    /// VIP prefixes are [`RuleIndex::vip_prefixes`]).
    pub fn vips(&self) -> impl Iterator<Item = IpAddr> + '_ {
        self.vips.iter().map(|v| v.addr)
    }

    /// The VIP prefixes this node serves, in address order.
    pub fn vip_prefixes(&self) -> impl Iterator<Item = Prefix> + '_ {
        self.prefixes.iter().map(|v| Prefix {
            addr: v.addr,
            len: v.len,
        })
    }

    /// Rules reachable at `vip` (an address; of a VIP prefix, any of its
    /// addresses), in selection order per protocol: TCP intervals, UDP
    /// intervals, then L3_DEFAULT (for summaries and status).
    pub fn rules_at(&self, vip: IpAddr) -> Vec<RuleId> {
        let Some(v) = self.find(vip) else {
            return Vec::new();
        };
        let mut out: Vec<RuleId> = Vec::new();
        for x in v.tcp.iter().chain(&v.udp) {
            if !out.contains(&x.hit.rule) {
                out.push(x.hit.rule);
            }
        }
        out.extend(v.l3_default.map(|m| m.rule));
        out
    }
}

/// A forwarding rule.
#[derive(Clone, Debug)]
pub struct Rule {
    /// Name.
    pub name: String,
    /// Protocol.
    pub protocol: Protocol,
    /// Ports.
    pub ports: PortSpec,
    /// Passthrough or gateway.
    pub mode: RuleMode,
    /// Service taking its traffic.
    pub service: ServiceId,
    /// One child per VIP, availability group 0 first.
    pub children: Vec<ChildRuleId>,
    /// Gateway mode: its gateway endpoints as configured (address, 64-bit
    /// ID, tunnel of a remote one).
    pub gateway_endpoints: Vec<crate::schema::GatewayEndpoint>,
    /// The composite whose state this rule exports (M20), if any.
    pub composite: Option<CompositeId>,
    /// Whether its VIPs may answer ICMP echo themselves.
    pub answer_ping: bool,
    /// The clients it admits (`source_ranges`, as written); `None`: every
    /// client.
    pub source_ranges: Option<Vec<Prefix>>,
}

/// A rule's presence on one VIP: the unit of metrics (M5).
#[derive(Clone, Debug)]
pub struct ChildRule {
    /// `<rule>-ag0` or `<rule>-ag1`.
    pub name: String,
    /// Parent rule.
    pub rule: RuleId,
    /// 0 or 1.
    pub availability_group: u8,
    /// The VIP; of a VIP prefix, the address standing for it
    /// ([`Vip::probe_addr`]: probed through, states keyed by).
    pub vip: IpAddr,
    /// The VIP's prefix length: 32 or 128 for one address, less for an
    /// IPv6 prefix whose every address the child rule takes.
    pub vip_len: u8,
    /// Whether its VIP was allocated from its availability group's
    /// `vip_pool` (the rule gives no `vips`).
    pub allocated: bool,
    /// Whether this node serves (and announces) it.
    pub served: bool,
}

impl ChildRule {
    /// Its VIP as written: one address, or the prefix.
    pub fn vip_spec(&self) -> Vip {
        let p = Prefix {
            addr: self.vip,
            len: self.vip_len,
        }
        .network();
        if p.len == Prefix::host(self.vip).len {
            Vip::host(self.vip)
        } else {
            Vip {
                addr: p.addr,
                len: p.len,
            }
        }
    }
}

/// Builds the per-VIP index from the served child rules.
pub(super) fn build_index(rules: &[Rule], children: &[ChildRule]) -> RuleIndex {
    let mut vips: Vec<VipRules> = Vec::new();
    let mut at: std::collections::HashMap<Vip, usize> = std::collections::HashMap::new();
    for (ci, c) in children.iter().enumerate() {
        if !c.served {
            continue;
        }
        let Some(rule) = rules.get(c.rule.0 as usize) else {
            continue;
        };
        let hit = RuleMatch {
            rule: c.rule,
            child: ChildRuleId(super::dense(ci)),
            service: rule.service,
            gateway: rule.mode == RuleMode::Gateway,
        };
        let spec = c.vip_spec();
        let entry = match at.get(&spec) {
            Some(&i) => &mut vips[i],
            None => {
                at.insert(spec, vips.len());
                vips.push(VipRules {
                    addr: spec.addr,
                    len: spec.len,
                    tcp: Vec::new(),
                    udp: Vec::new(),
                    l3_default: None,
                    answers_echo: true,
                });
                let last = vips.len() - 1;
                &mut vips[last]
            }
        };
        let rule = &rules[c.rule.index()];
        entry.answers_echo &= rule.answer_ping || rule.protocol == Protocol::L3Default;
        let list = match rule.protocol {
            Protocol::L3Default => {
                entry.l3_default = Some(hit);
                continue;
            }
            Protocol::Tcp => &mut entry.tcp,
            Protocol::Udp => &mut entry.udp,
        };
        list.extend(rule.ports.ranges().into_iter().map(|r| Interval {
            lo: r.lo,
            hi: r.hi,
            hit,
        }));
    }
    for v in &mut vips {
        v.tcp.sort_by_key(|x| x.lo);
        v.udp.sort_by_key(|x| x.lo);
    }
    let (mut prefixes, mut vips): (Vec<VipRules>, Vec<VipRules>) = vips
        .into_iter()
        .partition(|v| v.len < Prefix::host(v.addr).len);
    vips.sort_by_key(|v| addr_key(v.addr));
    let keys = vips.iter().map(|v| addr_key(v.addr)).collect();
    prefixes.sort_by_key(|v| addr_key(v.addr));
    let prefix_spans = prefixes
        .iter()
        .map(|v| {
            let (first, last) = Prefix {
                addr: v.addr,
                len: v.len,
            }
            .span();
            if v.addr.is_ipv4() {
                (addr_key(v.addr), addr_key(v.addr) | (last - first))
            } else {
                (first, last)
            }
        })
        .collect();
    // One set per rule with a list, shared by its child rules.
    let mut source_sets = Vec::new();
    let set_of_rule: Vec<Option<u32>> = rules
        .iter()
        .map(|r| {
            source_sets.push(SourceSet::from_prefixes(r.source_ranges.as_deref()?));
            Some(u32::try_from(source_sets.len() - 1).unwrap_or(u32::MAX))
        })
        .collect();
    let child_sources = children
        .iter()
        .map(|c| set_of_rule.get(c.rule.index()).copied().flatten())
        .collect();
    RuleIndex {
        vips,
        keys,
        prefixes,
        prefix_spans,
        child_sources,
        source_sets,
    }
}

/// The distinct VIPs of rules `of` (a service's), in rule order: both
/// addresses of an availability-group pair, or with `served_only` those of
/// the child rules this node serves (M5).
pub(super) fn service_vips(
    rules: &[Rule],
    children: &[ChildRule],
    of: &[RuleId],
    served_only: bool,
) -> Vec<IpAddr> {
    let mut seen = std::collections::HashSet::new();
    of.iter()
        .filter_map(|r| rules.get(r.index()))
        .flat_map(|r| r.children.iter().filter_map(|c| children.get(c.index())))
        .filter(|c| c.served || !served_only)
        .map(|c| c.vip)
        .filter(|v| seen.insert(*v))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compiled::fixture::{V4, V6, doc, load, rule};

    /// Packet: destination, IP protocol, destination port; expected child
    /// rule name (None: drop).
    type Probe = (&'static str, u8, Option<u16>, Option<&'static str>);

    struct Case {
        name: &'static str,
        rules: Vec<String>,
        /// `Err(needle)`: rejected with a message containing it.
        expect: Result<Vec<Probe>, &'static str>,
    }

    #[test]
    fn rule_selection_follows_m3() {
        let cases = vec![
            Case {
                name: "L3_DEFAULT + TCP all ports: TCP to the TCP rule, the rest to L3_DEFAULT",
                rules: vec![
                    rule("l3", V4, "L3_DEFAULT", "\"all\""),
                    rule("tcp", V4, "TCP", "\"all\""),
                ],
                expect: Ok(vec![
                    ("10.0.0.10", 6, Some(80), Some("tcp-ag0")),
                    ("10.0.0.10", 6, Some(0), Some("tcp-ag0")),
                    ("10.0.0.10", 6, None, Some("tcp-ag0")),
                    ("10.0.0.10", 17, Some(53), Some("l3-ag0")),
                    ("10.0.0.10", 1, None, Some("l3-ag0")),
                    ("10.0.0.10", 50, None, Some("l3-ag0")),
                    ("10.0.0.10", 47, None, Some("l3-ag0")),
                    ("10.0.0.10", 58, None, Some("l3-ag0")),
                    // SCTP is not among L3_DEFAULT's protocols (M2).
                    ("10.0.0.10", 132, Some(80), None),
                ]),
            },
            Case {
                name: "L3_DEFAULT + TCP/8080: TCP 8080 to the TCP rule, TCP 80 to L3_DEFAULT",
                rules: vec![
                    rule("l3", V4, "L3_DEFAULT", "\"all\""),
                    rule("alt", V4, "TCP", "8080"),
                ],
                expect: Ok(vec![
                    ("10.0.0.10", 6, Some(8080), Some("alt-ag0")),
                    ("10.0.0.10", 6, Some(80), Some("l3-ag0")),
                    ("10.0.0.10", 6, Some(8081), Some("l3-ag0")),
                    // A non-first fragment has no port: only all-port rules.
                    ("10.0.0.10", 6, None, Some("l3-ag0")),
                    ("10.0.0.10", 17, Some(8080), Some("l3-ag0")),
                ]),
            },
            Case {
                name: "TCP 80,443 beside TCP 81-442 is accepted and each port finds its rule",
                rules: vec![
                    rule("a", V4, "TCP", "\"80,443\""),
                    rule("b", V4, "TCP", "\"81-442\""),
                ],
                expect: Ok(vec![
                    ("10.0.0.10", 6, Some(79), None),
                    ("10.0.0.10", 6, Some(80), Some("a-ag0")),
                    ("10.0.0.10", 6, Some(81), Some("b-ag0")),
                    ("10.0.0.10", 6, Some(300), Some("b-ag0")),
                    ("10.0.0.10", 6, Some(442), Some("b-ag0")),
                    ("10.0.0.10", 6, Some(443), Some("a-ag0")),
                    ("10.0.0.10", 6, Some(444), None),
                    ("10.0.0.10", 6, None, None),
                    ("10.0.0.10", 17, Some(80), None),
                ]),
            },
            Case {
                name: "TCP all + TCP 80 on one pair is rejected",
                rules: vec![
                    rule("all", V4, "TCP", "\"all\""),
                    rule("web", V4, "TCP", "80"),
                ],
                expect: Err("TCP ports 80 overlap rule \"all\""),
            },
            Case {
                name: "two L3_DEFAULT rules on one pair are rejected",
                rules: vec![
                    rule("x", V4, "L3_DEFAULT", "\"all\""),
                    rule("y", V4, "L3_DEFAULT", "\"all\""),
                ],
                expect: Err("a second L3_DEFAULT rule on 10.0.0.10"),
            },
            Case {
                name: "rules sharing one VIP of their pair overlap there",
                rules: vec![
                    rule("x", "\"10.0.0.10\", \"10.0.0.11\"", "UDP", "\"50-60\""),
                    rule("y", "\"10.0.0.12\", \"10.0.0.11\"", "UDP", "55"),
                ],
                expect: Err("UDP ports 55 overlap rule \"x\""),
            },
            Case {
                name: "same ports, different protocols coexist",
                rules: vec![rule("t", V4, "TCP", "53"), rule("u", V4, "UDP", "53")],
                expect: Ok(vec![
                    ("10.0.0.10", 6, Some(53), Some("t-ag0")),
                    ("10.0.0.10", 17, Some(53), Some("u-ag0")),
                    ("10.0.0.10", 1, None, None),
                ]),
            },
            Case {
                name: "IPv6 VIPs in both availability groups",
                rules: vec![
                    rule("v6", V6, "TCP", "443"),
                    rule("v6all", V6, "L3_DEFAULT", "\"all\""),
                ],
                expect: Ok(vec![
                    ("fd00::10", 6, Some(443), Some("v6-ag0")),
                    ("fd00::11", 6, Some(443), Some("v6-ag1")),
                    ("fd00::11", 58, None, Some("v6all-ag1")),
                    ("fd00::10", 17, Some(443), Some("v6all-ag0")),
                    ("fd00::12", 6, Some(443), None),
                    ("10.0.0.10", 6, Some(443), None),
                ]),
            },
            Case {
                name: "a packet to a VIP matching no rule, or to no VIP, is dropped",
                rules: vec![rule("web", V4, "TCP", "80")],
                expect: Ok(vec![
                    ("10.0.0.10", 6, Some(80), Some("web-ag0")),
                    ("10.0.0.10", 6, Some(8080), None),
                    ("10.0.0.10", 17, Some(80), None),
                    ("10.0.0.10", 1, None, None),
                    ("10.0.0.11", 6, Some(80), None),
                    ("::", 6, Some(80), None),
                ]),
            },
            Case {
                name: "a /96 VIP takes every address in it, next to single VIPs",
                rules: vec![
                    rule("r96", "\"fd00:1::/96\", \"fd00:2::/112\"", "TCP", "443"),
                    rule("r96all", "\"fd00:1::/96\"", "L3_DEFAULT", "\"all\""),
                    rule("one", "\"fd00:1:0:0:0:1::5\"", "TCP", "443"),
                ],
                expect: Ok(vec![
                    ("fd00:1::", 6, Some(443), Some("r96-ag0")),
                    ("fd00:1::1", 6, Some(443), Some("r96-ag0")),
                    ("fd00:1::ffff:ffff", 6, Some(443), Some("r96-ag0")),
                    ("fd00:1::2:3", 17, Some(53), Some("r96all-ag0")),
                    ("fd00:1::1:2:3", 17, Some(53), None),
                    ("fd00:1::1:0:0", 6, Some(443), None),
                    ("fd00:0:ffff:ffff:ffff:ffff:ffff:ffff", 6, Some(443), None),
                    ("fd00:1:0:0:0:1::5", 6, Some(443), Some("one-ag0")),
                    ("fd00:1:0:0:0:1::6", 6, Some(443), None),
                    ("fd00:2::ffff", 6, Some(443), Some("r96-ag1")),
                    ("fd00:2::1:0", 6, Some(443), None),
                    ("fd00:2::1:0", 6, Some(80), None),
                    ("10.0.0.10", 6, Some(443), None),
                ]),
            },
            Case {
                name: "VIPs that share an address are refused",
                rules: vec![
                    rule("r96", "\"fd00:1::/96\"", "TCP", "443"),
                    rule("in", "\"fd00:1::80\"", "TCP", "80"),
                ],
                expect: Err("fd00:1::80 overlaps VIP fd00:1::/96 of rule \"r96\""),
            },
        ];
        for case in cases {
            let text = doc("", &case.rules.concat());
            match (load(&text), case.expect) {
                (Ok(l), Ok(probes)) => {
                    for (dst, proto, port, want) in probes {
                        let idx = &l.compiled.rule_index;
                        let addr = dst.parse().unwrap();
                        // `select` is `lookup`, and `is_vip` when no rule takes it.
                        assert_eq!(
                            idx.select(addr, proto, port),
                            idx.lookup(addr, proto, port).ok_or(idx.is_vip(addr)),
                            "{}: {dst} proto {proto} port {port:?}",
                            case.name
                        );
                        let got = idx.lookup(addr, proto, port).map(|m| {
                            let child = &l.compiled.children[m.child.index()];
                            assert_eq!(child.rule, m.rule);
                            child.name.as_str()
                        });
                        assert_eq!(
                            got, want,
                            "{}: {dst} proto {proto} port {port:?}",
                            case.name
                        );
                    }
                }
                (Err(e), Err(needle)) => {
                    assert!(e.to_string().contains(needle), "{}: {e}", case.name);
                }
                (Ok(_), Err(needle)) => panic!("{}: accepted, expected {needle:?}", case.name),
                (Err(e), Ok(_)) => panic!("{}: rejected: {e}", case.name),
            }
        }
    }

    #[test]
    fn a_node_of_one_availability_group_serves_only_its_vips() {
        let rules = rule("web", "\"10.0.0.10\", \"10.0.0.11\"", "TCP", "80");
        let l = load(&doc("availability_group = 1", &rules)).unwrap();
        let idx = &l.compiled.rule_index;
        assert_eq!(idx.lookup("10.0.0.10".parse().unwrap(), 6, Some(80)), None);
        assert!(!idx.is_vip("10.0.0.10".parse().unwrap()));
        let m = idx
            .lookup("10.0.0.11".parse().unwrap(), 6, Some(80))
            .unwrap();
        assert_eq!(l.compiled.children[m.child.index()].name, "web-ag1");
        let names: Vec<(&str, bool)> = l
            .compiled
            .children
            .iter()
            .map(|c| (c.name.as_str(), c.served))
            .collect();
        assert_eq!(names, [("web-ag0", false), ("web-ag1", true)]);
    }

    /// Tiny deterministic generator (no dependency needed for this).
    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self, n: u64) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (self.0 >> 33) % n
        }
    }

    /// Random rule sets on two VIPs: every accepted one selects exactly as
    /// a literal reading of M3 over all candidates.
    #[test]
    fn index_agrees_with_a_literal_reading_of_m3() {
        let mut rng = Lcg(7);
        let vips = ["10.0.0.1", "10.0.0.2"];
        let (mut accepted, mut rejected) = (0, 0);
        for _ in 0..300 {
            let n = 1 + usize::try_from(rng.next(4)).unwrap();
            let mut specs = Vec::new();
            let mut text = String::new();
            for i in 0..n {
                let proto = ["TCP", "UDP", "L3_DEFAULT"][usize::try_from(rng.next(3)).unwrap()];
                let ports: String = if proto == "L3_DEFAULT" || rng.next(4) == 0 {
                    "all".into()
                } else {
                    let lo = 1 + rng.next(12);
                    let hi = lo + rng.next(4);
                    if rng.next(2) == 0 {
                        format!("{lo}-{hi}")
                    } else {
                        format!("{lo},{}", hi + 3)
                    }
                };
                let vip = vips[usize::try_from(rng.next(2)).unwrap()];
                text.push_str(&rule(
                    &format!("r{i}"),
                    &format!("\"{vip}\""),
                    proto,
                    &format!("\"{ports}\""),
                ));
                specs.push((vip, proto, ports.parse::<PortSpec>().unwrap()));
            }
            let Ok(l) = load(&doc("", &text)) else {
                rejected += 1;
                continue;
            };
            accepted += 1;
            for vip in vips {
                for proto in [1u8, 6, 17, 47, 50, 58, 132] {
                    for port in (0..=20).map(Some).chain([None]) {
                        let cands: Vec<usize> = specs
                            .iter()
                            .enumerate()
                            .filter(|(_, (v, _, _))| *v == vip)
                            .filter(|(_, (_, p, _))| match *p {
                                "TCP" => proto == 6,
                                "UDP" => proto == 17,
                                _ => L3_DEFAULT_PROTOCOLS.contains(&proto),
                            })
                            .filter(|(_, (_, _, ps))| {
                                ps.is_all()
                                    || port.is_some_and(|x| {
                                        ps.ranges().iter().any(|r| r.lo <= x && x <= r.hi)
                                    })
                            })
                            .map(|(i, _)| i)
                            .collect();
                        let specific: Vec<usize> = cands
                            .iter()
                            .copied()
                            .filter(|&i| specs[i].1 != "L3_DEFAULT")
                            .collect();
                        assert!(
                            specific.len() <= 1,
                            "validation let overlapping rules through:\n{text}"
                        );
                        let want = specific.first().or(cands.first()).copied();
                        let got = l
                            .compiled
                            .rule_index
                            .lookup(vip.parse().unwrap(), proto, port)
                            .map(|m| m.rule.index());
                        assert_eq!(got, want, "{vip} {proto} {port:?}\n{text}");
                    }
                }
            }
        }
        assert!(
            accepted > 50 && rejected > 50,
            "{accepted} accepted, {rejected} rejected"
        );
    }

    /// An address of one small neighbourhood per IP version, so that
    /// random prefixes there overlap, touch and nest often.
    fn near(v6: bool, low: u16) -> IpAddr {
        if v6 {
            IpAddr::V6(std::net::Ipv6Addr::from(
                0xfd00_u128 << 112 | u128::from(low),
            ))
        } else {
            IpAddr::V4(std::net::Ipv4Addr::from(0x0a00_0000 | u32::from(low)))
        }
    }

    proptest::proptest! {
        /// A source set admits exactly the addresses inside one of its
        /// prefixes, and never the same bits of the other IP version.
        #[test]
        fn source_set_is_the_union_of_its_prefixes(
            v6 in proptest::prelude::any::<bool>(),
            // (low bits, host bits): lengths near the width, where the
            // ranges are small and meet.
            specs in proptest::collection::vec((0u16..512, 0u8..11), 1..8),
            lows in proptest::collection::vec(0u16..600, 32),
        ) {
            let width = if v6 { 128 } else { 32 };
            let prefixes: Vec<Prefix> = specs
                .iter()
                .map(|&(low, host)| Prefix { addr: near(v6, low), len: width - host }.network())
                .collect();
            let set = SourceSet::from_prefixes(&prefixes);
            for low in lows {
                let addr = near(v6, low);
                let want = prefixes.iter().any(|p| p.contains(addr));
                proptest::prop_assert_eq!(set.contains(addr), want, "{} in {:?}", addr, prefixes);
                proptest::prop_assert!(!set.contains(near(!v6, low)), "{:?}", prefixes);
            }
        }
    }

    #[test]
    fn source_sets_merge_touching_and_nested_prefixes() {
        let p = |s: &str| s.parse::<Prefix>().unwrap();
        let set = SourceSet::from_prefixes(&[
            p("10.0.1.0/24"),
            p("10.0.0.0/24"),
            p("10.0.0.128/25"),
            p("192.0.2.7"),
        ]);
        assert_eq!(set.ranges(), 2);
        assert!(set.contains("10.0.1.255".parse().unwrap()));
        assert!(!set.contains("10.0.2.0".parse().unwrap()));
        assert!(set.contains("192.0.2.7".parse().unwrap()));
        assert!(!set.contains("192.0.2.8".parse().unwrap()));
        let all6 = SourceSet::from_prefixes(&[p("::/0")]);
        assert!(all6.contains("2001:db8::1".parse().unwrap()));
        assert!(
            SourceSet::from_prefixes(&[p("0.0.0.0/0")])
                .contains("255.255.255.255".parse().unwrap())
        );
        assert!(!SourceSet::default().contains("10.0.0.1".parse().unwrap()));
    }
}
