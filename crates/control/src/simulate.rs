//! `spillway simulate`: which rule, service and backend a flow would take,
//! and why, from the live snapshot and flow table, changing nothing.
//!
//! The decision is the data plane's own ([`dataplane::Pipeline::explain`]:
//! the pipeline's passes on a synthetic first packet, the flow table only
//! read); this module parses the query and words the answer, for people or
//! as JSON.
//!
//! Query syntax (the control-socket command line): `simulate src=ADDR
//! dst=ADDR [proto=tcp|udp|icmp|NUMBER] [sport=N] [dport=N] [established]
//! [json]`. `dport` is required for TCP and UDP; `sport` defaults to
//! [`DEFAULT_SPORT`].

use std::fmt::Write as _;
use std::net::IpAddr;

use config::Compiled;
use config::compiled::ZoneId;
use dataplane::{EntryUse, Explanation, Pipeline, Probe, Snapshot, Verdict};
use flowtable::{EntryFlags, FlowTable, Tick};
use wire::flow::Affinity;
use wire::ip::proto;

use crate::drain::{Drained, Scope};

/// Client port of a query that names none.
pub const DEFAULT_SPORT: u16 = 49152;

/// Longest value of one `key=value` word (an IPv6 address with a zone is
/// under 50 bytes).
const MAX_VALUE: usize = 64;

/// A parsed `simulate` query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimQuery {
    /// The flow.
    pub probe: Probe,
    /// Answer in JSON.
    pub json: bool,
}

/// The protocol words of `simulate` are those of `flows`.
pub use crate::flows::parse_proto;

impl SimQuery {
    /// Parses the words after `simulate`.
    pub fn parse(words: &str) -> Result<SimQuery, String> {
        let (mut src, mut dst, mut sport, mut dport) = (None, None, None, None);
        let (mut proto_num, mut json, mut established) = (proto::TCP, false, false);
        for w in words.split_whitespace() {
            match w {
                "json" => {
                    json = true;
                    continue;
                }
                "established" => {
                    established = true;
                    continue;
                }
                _ => {}
            }
            let (k, v) = w.split_once('=').ok_or_else(|| {
                format!(
                    "{:?}: expected key=value (src, dst, proto, sport, dport) or json, established",
                    short(w)
                )
            })?;
            if v.len() > MAX_VALUE {
                return Err(format!("{k}=: value too long"));
            }
            let addr = || {
                v.parse::<IpAddr>()
                    .map(|a| a.to_canonical())
                    .map_err(|_| format!("{k}={v:?}: not an IP address"))
            };
            let port = || {
                v.parse::<u16>()
                    .map_err(|_| format!("{k}={v:?}: not a port (0-65535)"))
            };
            match k {
                "src" => src = Some(addr()?),
                "dst" => dst = Some(addr()?),
                "sport" => sport = Some(port()?),
                "dport" => dport = Some(port()?),
                "proto" => proto_num = parse_proto(v)?,
                _ => {
                    return Err(format!(
                        "unknown argument {:?} (src, dst, proto, sport, dport, established, json)",
                        short(k)
                    ));
                }
            }
        }
        let (Some(src), Some(dst)) = (src, dst) else {
            return Err("usage: simulate src=ADDR dst=ADDR [proto=tcp|udp|icmp|N] [sport=N] [dport=N] [established] [json]".into());
        };
        if src.is_ipv4() != dst.is_ipv4() {
            return Err(format!(
                "src={src} and dst={dst}: not of one address family"
            ));
        }
        let ported = matches!(proto_num, proto::TCP | proto::UDP);
        let dport = match (dport, ported) {
            (Some(p), true) => p,
            (None, true) => return Err("dport=N is required for tcp and udp".into()),
            (Some(_), false) | (None, false) if sport.is_some() || dport.is_some() => {
                return Err(format!("proto={proto_num}: ports only go with tcp and udp"));
            }
            _ => 0,
        };
        if established && proto_num != proto::TCP {
            return Err("established: only for tcp".into());
        }
        Ok(SimQuery {
            probe: Probe {
                src,
                dst,
                proto: proto_num,
                sport: if ported {
                    sport.unwrap_or(DEFAULT_SPORT)
                } else {
                    0
                },
                dport,
                established,
            },
            json,
        })
    }

    /// The command line that asks a daemon for this query.
    pub fn to_command(&self) -> String {
        let p = &self.probe;
        let mut c = format!("simulate src={} dst={} proto={}", p.src, p.dst, p.proto);
        if matches!(p.proto, proto::TCP | proto::UDP) {
            let _ = write!(c, " sport={} dport={}", p.sport, p.dport);
        }
        if p.established {
            c += " established";
        }
        if self.json {
            c += " json";
        }
        c
    }
}

/// At most 32 characters of client input, for error messages.
fn short(s: &str) -> &str {
    match s.char_indices().nth(32) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// The answer to `q` from `snap` and `flows` at tick `now` (`drained`: the
/// node's drained zones and regions, for the reasons).
pub fn answer(
    q: &SimQuery,
    snap: &Snapshot,
    flows: &FlowTable,
    now: Tick,
    drained: &Drained,
) -> Report {
    let e = Pipeline::explain(snap, flows, now, &q.probe);
    Report::of(&q.probe, &e, snap, drained)
}

/// The backend a flow goes to, named.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct BackendInfo {
    /// Its address.
    pub address: IpAddr,
    /// Its state in the snapshot (`active`, `unhealthy`, `draining`,
    /// `removed`).
    pub state: &'static str,
    /// Its group, zone and region, when it is still configured.
    pub group: Option<String>,
    /// Its zone.
    pub zone: Option<String>,
    /// Its region.
    pub region: Option<String>,
}

/// Everything an answer says, named (what both the human and the JSON
/// answer print; field names: docs/operating.md, "Simulating a flow").
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Report {
    /// `forward`, `reset`, `reply`, `to_host` or `drop`.
    pub outcome: &'static str,
    /// The drop reason's counter name.
    pub drop_reason: Option<&'static str>,
    /// The forwarding rule, its child rule.
    pub rule: Option<String>,
    /// The child rule (`<rule>-ag<N>`).
    pub child_rule: Option<String>,
    /// The backend service.
    pub service: Option<String>,
    /// Its delivery mode.
    pub delivery: Option<String>,
    /// The session affinity: `5-tuple`, `3-tuple`, `2-tuple`.
    pub affinity: Option<&'static str>,
    /// The gateway endpoint the packet was taken to come from.
    pub gateway_endpoint: Option<IpAddr>,
    /// The flow hash (JSON: 16 hex digits).
    #[serde(serialize_with = "hex16")]
    pub flow_hash: u64,
    /// The client's zone (zonal affinity).
    pub client_zone: Option<String>,
    /// `new`, `pinned`, `replaced` (a stale entry) or `none` (no flow
    /// table step).
    pub flow_entry: &'static str,
    /// The backend of a stale or pinned entry.
    pub entry_backend: Option<IpAddr>,
    /// The entry's state (`half-open`, `established`, `fin`, …).
    pub entry_state: Option<&'static str>,
    /// The chosen backend.
    pub backend: Option<BackendInfo>,
    /// The region of a new flow's pick.
    pub region: Option<String>,
    /// Its share of new connections.
    pub region_fraction: Option<f64>,
    /// `default` or `zone` (the client zone's table).
    pub table: Option<&'static str>,
    /// Fail-open (M23).
    pub fail_open: bool,
    /// Why, one sentence a line.
    pub why: Vec<String>,
}

fn name(v: &[String], i: usize) -> Option<String> {
    v.get(i).cloned()
}

fn zone_name(c: &Compiled, z: ZoneId) -> Option<String> {
    name(&c.zones, z.0 as usize)
}

fn affinity_name(a: Affinity) -> &'static str {
    match a {
        Affinity::None | Affinity::ClientIpPortProto => "5-tuple",
        Affinity::ClientIpProto => "3-tuple",
        Affinity::ClientIp => "2-tuple",
    }
}

fn delivery_name(d: config::compiled::Delivery) -> String {
    use config::compiled::Delivery as D;
    match d {
        D::L2dsr => "l2dsr".into(),
        D::Ipip => "ipip".into(),
        D::Gre { .. } => "gre".into(),
        D::Gue { port } => format!("gue (port {port})"),
        D::Geneve { port, .. } => format!("geneve (port {port})"),
    }
}

fn pct(f: f64) -> String {
    format!("{:.1}%", f * 100.0)
}

impl Report {
    /// Names and reasons for explanation `e` of `probe` against `snap`.
    pub fn of(probe: &Probe, e: &Explanation, snap: &Snapshot, drained: &Drained) -> Report {
        let c = &*snap.compiled;
        let (outcome, drop_reason) = match e.verdict {
            Verdict::Forward | Verdict::ForwardTo(_) | Verdict::Fragment(_) => ("forward", None),
            Verdict::Reply if e.service.is_some() => ("reset", None),
            Verdict::Reply => ("reply", None),
            Verdict::ToHost => ("to_host", None),
            Verdict::Drop(r) => ("drop", Some(r.name())),
        };
        let child = e.child.and_then(|i| c.children.get(i));
        let rule = child.and_then(|ch| c.rules.get(ch.rule.0 as usize));
        let svc = e.service.and_then(|i| c.services.get(i));
        let plan = e.service.and_then(|i| snap.services.get(i));
        let backend_info = |slot: u32| {
            snap.backends.get(slot as usize).map(|b| {
                let ep = c
                    .endpoints
                    .iter()
                    .find(|ep| ep.service.0 == b.service && ep.address == b.addr);
                let group = ep.and_then(|ep| c.groups.get(ep.group.0 as usize));
                BackendInfo {
                    address: b.addr,
                    state: dataplane::BackendState::name(b.state),
                    group: group.map(|g| g.name.clone()),
                    zone: group.and_then(|g| zone_name(c, g.zone)),
                    region: group.and_then(|g| name(&c.regions, g.region.0 as usize)),
                }
            })
        };
        let mut why = Vec::new();
        let mut r = Report {
            outcome,
            drop_reason,
            rule: rule.map(|r| r.name.clone()),
            child_rule: child.map(|ch| ch.name.clone()),
            service: svc.map(|s| s.name.clone()),
            delivery: plan.map(|p| delivery_name(p.delivery)),
            affinity: plan.map(|p| affinity_name(p.affinity)),
            gateway_endpoint: e
                .gateway
                .and_then(|g| snap.gateways.get(g))
                .map(|h| h.address),
            flow_hash: e.hash,
            client_zone: e.client_zone.and_then(|z| zone_name(c, z)),
            flow_entry: "none",
            entry_backend: None,
            entry_state: None,
            backend: e.backend.and_then(backend_info),
            region: None,
            region_fraction: None,
            table: None,
            fail_open: plan.is_some_and(|p| p.fail_open),
            why: Vec::new(),
        };
        // The rule step.
        match (rule, e.verdict) {
            (Some(rule), _) => {
                let via = match r.gateway_endpoint {
                    Some(g) => format!(" (a gateway rule: from gateway endpoint {g})"),
                    None => String::new(),
                };
                why.push(format!(
                    "rule {} takes {} {}{via}: service {}",
                    rule.name,
                    proto_name(probe.proto),
                    dest(probe),
                    r.service.as_deref().unwrap_or("?"),
                ));
            }
            (None, Verdict::Drop(reason)) => why.push(match reason.name() {
                "no_rule" => format!(
                    "{} is a VIP but no rule takes {} to port {}",
                    probe.dst,
                    proto_name(probe.proto),
                    probe.dport
                ),
                "not_ours" => format!(
                    "{} is not a VIP or an own address of this node{} (no open relay, M6)",
                    probe.dst,
                    if snap.gateways.is_empty() {
                        ""
                    } else {
                        ", and no gateway rule takes it"
                    }
                ),
                "gateway_vip" => format!(
                    "{} is a gateway rule's VIP: it takes only what gateway endpoints route through the node",
                    probe.dst
                ),
                "gateway_no_rule" => format!(
                    "no gateway rule takes {} traffic",
                    proto_name(probe.proto)
                ),
                other => format!("dropped before any rule: {other}"),
            }),
            (None, Verdict::ToHost) => why.push(format!(
                "{} is an own address of this node: the packet goes to the host",
                probe.dst
            )),
            (None, _) => {}
        }
        if let (Some(p), Some(_)) = (plan, rule) {
            why.push(format!(
                "session affinity {}: the flow key is {}, hash {:016x}",
                affinity_name(p.affinity),
                match p.affinity {
                    Affinity::ClientIpProto => "client address, protocol, VIP",
                    Affinity::ClientIp => "client address, VIP",
                    _ => "client address and port, protocol, VIP and port",
                },
                e.hash
            ));
        }
        // The flow-table step.
        let entry_backend = |slot: u32| snap.backends.get(slot as usize).map(|b| b.addr);
        match e.entry {
            EntryUse::Pinned { slot, flags } => {
                r.flow_entry = "pinned";
                r.entry_backend = entry_backend(slot);
                r.entry_state = Some(crate::flows::state_of(flags));
                let st = r.backend.as_ref().map_or("?", |b| b.state);
                let persist = match st {
                    "active" => String::new(),
                    "unhealthy" => format!(
                        " (unhealthy: kept by connection persistence {:?} until its draining period ends, M11)",
                        plan.map(|p| p.persistence)
                    ),
                    "draining" => " (draining: kept until its draining period ends, M11)".into(),
                    _ => String::new(),
                };
                why.push(format!(
                    "an existing flow-table entry ({}{}) pins the flow to backend {}{persist}",
                    crate::flows::state_of(flags),
                    if flags.contains(EntryFlags::UNCONFIRMED) {
                        ", unconfirmed"
                    } else {
                        ""
                    },
                    r.entry_backend.map_or("?".into(), |a| a.to_string()),
                ));
            }
            EntryUse::Stale { slot, flags } => {
                r.flow_entry = "replaced";
                r.entry_backend = entry_backend(slot);
                r.entry_state = Some(crate::flows::state_of(flags));
                why.push(format!(
                    "an entry ({}) names backend {} ({}), which no longer takes this {}: it is replaced by a new pick",
                    crate::flows::state_of(flags),
                    r.entry_backend.map_or("?".into(), |a| a.to_string()),
                    snap.backends
                        .get(slot as usize)
                        .map_or("gone", |b| dataplane::BackendState::name(b.state)),
                    if probe.proto == proto::TCP && !probe.established {
                        "new connection (a SYN)"
                    } else {
                        "flow"
                    }
                ));
            }
            EntryUse::None if e.service.is_some() => {
                r.flow_entry = "new";
                why.push("no flow-table entry: a new flow (an entry would be inserted, within the new-entry budget)".into());
            }
            EntryUse::None => {}
        }
        // The locality step.
        if let (Some(pk), Some(p)) = (e.pick, plan) {
            r.table = Some(if pk.table == 0 { "default" } else { "zone" });
            let lp = p.locality.as_deref();
            let share = lp.and_then(|l| l.regions.get(pk.region));
            r.region = share.and_then(|s| name(&c.regions, s.region.0 as usize));
            r.region_fraction = share.map(|s| s.fraction);
            why.extend(locality_why(c, p, lp, pk, e.client_zone, drained));
        } else if e.service.is_some() && e.backend.is_none() {
            let p = plan;
            why.push(format!(
                "no backend of service {} is eligible for new connections{}: {}",
                r.service.as_deref().unwrap_or("?"),
                p.and_then(|p| p.locality.as_deref())
                    .map(|l| format!(" (eligibility {:?})", l.eligibility).to_lowercase())
                    .unwrap_or_default(),
                match outcome {
                    "reset" => "answered with a TCP reset (no_backend_action = reset, M14)",
                    _ => "dropped (no_backend, M14)",
                }
            ));
        }
        if let Some(b) = &r.backend {
            why.push(format!(
                "backend {} (group {}, zone {}, region {}), {}; delivery {}",
                b.address,
                b.group.as_deref().unwrap_or("?"),
                b.zone.as_deref().unwrap_or("?"),
                b.region.as_deref().unwrap_or("?"),
                b.state,
                r.delivery.as_deref().unwrap_or("?"),
            ));
            if let Some(reason) = r.drop_reason {
                why.push(format!("but the packet would be dropped: {reason}"));
            }
        }
        r.why = why;
        r
    }
}

/// The flow hash as 16 hex digits.
fn hex16<S: serde::Serializer>(h: &u64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format!("{h:016x}"))
}

/// A few lines for people.
impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "outcome: {}{}",
            self.outcome,
            self.drop_reason
                .map(|r| format!(" ({r})"))
                .unwrap_or_default()
        );
        if let Some(rule) = &self.rule {
            let _ = writeln!(
                out,
                "rule: {rule} ({}), service {}",
                self.child_rule.as_deref().unwrap_or("?"),
                self.service.as_deref().unwrap_or("?")
            );
        }
        if let Some(b) = &self.backend {
            let _ = writeln!(
                out,
                "backend: {} ({}, {})",
                b.address, b.state, self.flow_entry
            );
        }
        for w in &self.why {
            let _ = writeln!(out, "  - {w}");
        }
        f.write_str(&out)
    }
}

/// Why a new flow went to the region and table it did.
fn locality_why(
    c: &Compiled,
    p: &dataplane::ServicePlan,
    lp: Option<&locality::Plan>,
    pk: dataplane::Pick,
    client_zone: Option<ZoneId>,
    drained: &Drained,
) -> Vec<String> {
    let mut why = Vec::new();
    if p.fail_open {
        why.push(
            "fail-open: every endpoint is unhealthy, so all of them take new connections (M23)"
                .into(),
        );
    }
    if p.last_resort {
        why.push(
            "no configured endpoint is eligible: new connections go to the endpoints still draining after they left the configuration while healthy (no_backend_fallback = draining, M14)"
                .into(),
        );
        return why;
    }
    let Some(lp) = lp else {
        why.push("Maglev over the service's eligible endpoints (no locality plan)".into());
        return why;
    };
    let rname = |id: config::compiled::RegionId| {
        name(&c.regions, id.0 as usize).unwrap_or_else(|| format!("#{}", id.0))
    };
    let Some(share) = lp.regions.get(pk.region) else {
        return why;
    };
    let chosen = rname(share.region);
    // Regions nearer than the chosen one, and why they did not take it.
    for st in lp.status.iter().take_while(|st| st.region != share.region) {
        let n = rname(st.region);
        let reason = if drained.contains(Scope::Region, &n) {
            "drained".to_owned()
        } else if !st.candidate && st.eligible == 0 {
            format!(
                "no eligible endpoint ({} of {} healthy)",
                st.healthy, st.endpoints
            )
        } else if !st.candidate {
            format!("{:?} by aggregation (failover, M24)", st.health).to_uppercase()
        } else {
            format!(
                "at capacity: it takes {} of new connections, the rest spills over (M26)",
                pct(st.fraction)
            )
        };
        why.push(format!("nearer region {n}: {reason}"));
    }
    let spill = lp.regions.len() > 1;
    why.push(format!(
        "region {chosen} ({} of {} regions taking new connections, {} of them{}): {}",
        pk.region + 1,
        lp.regions.len(),
        pct(share.fraction),
        if lp.overloaded {
            "; every candidate is at capacity, shared by capacity"
        } else {
            ""
        },
        if pk.region == 0 && !spill {
            "the nearest candidate takes every new connection (region preference, M24)"
        } else if pk.region == 0 {
            "the nearest candidate; this flow's region key falls in its share"
        } else {
            "spillover: this flow's region key falls in this region's share (M26)"
        }
    ));
    if lp.degraded {
        why.push("degraded: every region is UNHEALTHY by aggregation; their healthy endpoints are used anyway".into());
    }
    if p.zonal {
        let zn = client_zone.and_then(|z| zone_name(c, z));
        match (pk.table, zn) {
            (0, Some(z)) => why.push(format!(
                "zonal affinity: client zone {z} has no table of its own in region {chosen}{}: the region's default set (cross-zone)",
                if drained.contains(Scope::Zone, &z) {
                    " (the zone is drained)"
                } else {
                    " (no eligible endpoint there)"
                }
            )),
            (0, None) => why.push(
                "zonal affinity: the client is in no configured zone: the region's default set"
                    .into(),
            ),
            (t, zn) => {
                let v = share.zone_variants.get(t - 1);
                why.push(format!(
                    "zonal affinity: client zone {}'s table, {} of its new connections kept in the zone (M27)",
                    zn.unwrap_or_else(|| "?".into()),
                    v.map_or("?".into(), |v| pct(v.in_zone_share))
                ));
            }
        }
    } else if let Some(s) = share.node_zone_share {
        why.push(format!(
            "cross_zone = false: {} of the region's new connections pinned to the node's zone",
            pct(s)
        ));
    }
    why
}

fn proto_name(p: u8) -> String {
    match p {
        proto::TCP => "tcp".into(),
        proto::UDP => "udp".into(),
        proto::ICMP => "icmp".into(),
        proto::ICMPV6 => "icmpv6".into(),
        n => format!("protocol {n}"),
    }
}

fn dest(p: &Probe) -> String {
    let a = match p.dst {
        IpAddr::V6(a) => format!("[{a}]"),
        IpAddr::V4(a) => a.to_string(),
    };
    if matches!(p.proto, proto::TCP | proto::UDP) {
        format!("to {a}:{}", p.dport)
    } else {
        format!("to {a}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_parse_round_trip_and_bad_ones_say_why() {
        let q = SimQuery::parse("src=192.0.2.7 dst=10.0.0.10 proto=tcp sport=1234 dport=80 json")
            .unwrap();
        assert_eq!(q.probe.sport, 1234);
        assert_eq!(q.probe.dport, 80);
        assert!(q.json);
        let cmd = q.to_command();
        assert_eq!(
            SimQuery::parse(cmd.strip_prefix("simulate").unwrap()).unwrap(),
            q
        );
        let q = SimQuery::parse("src=2001:db8::1 dst=2001:db8::10 proto=icmp").unwrap();
        assert_eq!((q.probe.proto, q.probe.sport), (proto::ICMP, 0));
        assert_eq!(
            SimQuery::parse("src=1.2.3.4 dst=5.6.7.8 dport=80")
                .unwrap()
                .probe
                .sport,
            DEFAULT_SPORT
        );
        for (bad, says) in [
            ("", "usage"),
            ("src=1.2.3.4", "usage"),
            ("src=1.2.3.4 dst=x dport=1", "not an IP"),
            ("src=1.2.3.4 dst=::1 dport=1", "family"),
            ("src=1.2.3.4 dst=5.6.7.8", "dport=N is required"),
            ("src=1.2.3.4 dst=5.6.7.8 dport=65536", "not a port"),
            (
                "src=1.2.3.4 dst=5.6.7.8 proto=sctp dport=1",
                "protocol number",
            ),
            ("src=1.2.3.4 dst=5.6.7.8 proto=256", "protocol number"),
            ("src=1.2.3.4 dst=5.6.7.8 proto=icmp dport=1", "ports only"),
            (
                "src=1.2.3.4 dst=5.6.7.8 proto=udp dport=1 established",
                "only for tcp",
            ),
            (
                "src=1.2.3.4 dst=5.6.7.8 dport=1 colour=red",
                "unknown argument",
            ),
            ("garbage", "key=value"),
        ] {
            let e = SimQuery::parse(bad).unwrap_err();
            assert!(e.contains(says), "{bad:?}: {e}");
        }
        let long = format!("src={} dst=1.2.3.4 dport=1", "1".repeat(5000));
        assert!(SimQuery::parse(&long).unwrap_err().contains("too long"));
    }
}
