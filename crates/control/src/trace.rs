//! `spillway trace`: the live pipeline's decisions for the packets a filter
//! takes, until a count or a time (the data plane's part is
//! [`dataplane::trace`]). Each packet is worded as `simulate` words a
//! flow's explanation ([`crate::simulate::Report`]: the rule, service,
//! region and table, backend, flow entry and delivery, or the drop reason
//! by its counter's name), after what it carried as it arrived.
//!
//! Query syntax (the control-socket command line): `trace [src=A[/LEN]]
//! [dst=A[/LEN]] [host=A[/LEN]] [proto=tcp|udp|icmp|N] [sport=N]
//! [dport=N] [port=N] [rule=NAME] [drop[=REASON]|forwarded]
//! [count=N] [seconds=S] [json]`.

use std::fmt::Write as _;
use std::net::IpAddr;

use dataplane::trace::{AddrMatch, HeadMatch, OutcomeMatch, TraceFilter, TraceRecord};
use dataplane::{DropReason, Probe, Snapshot};
use wire::ip::proto;

use crate::drain::Drained;
use crate::simulate::Report;

/// Packets a trace takes unless it says.
pub const DEFAULT_COUNT: u32 = 10;
/// Seconds a trace runs at most unless it says.
pub const DEFAULT_SECONDS: u32 = 10;
/// The longest a trace may run: its client waits for the answer, within
/// the control socket's answer timeout.
pub const MAX_SECONDS: u32 = 25;

/// A parsed `trace` query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceQuery {
    /// What the packets carry.
    pub head: HeadMatch,
    /// The forwarding rule, by name.
    pub rule: Option<String>,
    /// Which outcomes.
    pub outcome: Option<OutcomeMatch>,
    /// Packets to take.
    pub count: u32,
    /// Seconds to run at most.
    pub seconds: u32,
}

impl Default for TraceQuery {
    fn default() -> Self {
        TraceQuery {
            head: HeadMatch::default(),
            rule: None,
            outcome: None,
            count: DEFAULT_COUNT,
            seconds: DEFAULT_SECONDS,
        }
    }
}

const USAGE: &str = "usage: trace [src=ADDR[/LEN]] [dst=ADDR[/LEN]] [host=ADDR[/LEN]] [proto=tcp|udp|icmp|N] [sport=N] [dport=N] [port=N] [rule=NAME] [drop[=REASON]|forwarded] [count=N] [seconds=S] [json]";

fn addr_match(k: &str, v: &str) -> Result<AddrMatch, String> {
    let (a, len) = match v.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (v, None),
    };
    let addr = a
        .parse::<IpAddr>()
        .map(|a| a.to_canonical())
        .map_err(|_| format!("{k}={v:?}: not an address or prefix"))?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    let len = match len {
        None => max,
        Some(l) => l
            .parse::<u8>()
            .ok()
            .filter(|&l| l <= max)
            .ok_or_else(|| format!("{k}={v:?}: prefix length over {max}"))?,
    };
    Ok(AddrMatch { addr, len })
}

impl TraceQuery {
    /// Parses the words after `trace`.
    pub fn parse(words: &str) -> Result<TraceQuery, String> {
        let mut q = TraceQuery::default();
        for w in words.split_whitespace() {
            match w {
                "drop" | "drops" => {
                    q.outcome = Some(OutcomeMatch::AnyDrop);
                    continue;
                }
                "forwarded" => {
                    q.outcome = Some(OutcomeMatch::NotDropped);
                    continue;
                }
                _ => {}
            }
            let Some((k, v)) = w.split_once('=') else {
                return Err(format!("{:?}: expected key=value\n{USAGE}", short(w)));
            };
            if v.len() > 64 {
                return Err(format!("{}=: value too long", short(k)));
            }
            let port = || {
                v.parse::<u16>()
                    .map_err(|_| format!("{k}={v:?}: not a port (0-65535)"))
            };
            match k {
                "src" => q.head.src = Some(addr_match(k, v)?),
                "dst" => q.head.dst = Some(addr_match(k, v)?),
                "host" => q.head.host = Some(addr_match(k, v)?),
                "proto" => q.head.proto = Some(crate::flows::parse_proto(v)?),
                "sport" => q.head.sport = Some(port()?),
                "dport" => q.head.dport = Some(port()?),
                "port" => q.head.port = Some(port()?),
                "rule" => {
                    if v.is_empty() || !v.chars().all(|c| c.is_ascii_graphic()) {
                        return Err(format!("rule={:?}: not a rule name", short(v)));
                    }
                    q.rule = Some(v.to_owned());
                }
                "drop" => {
                    let reason = DropReason::ALL
                        .iter()
                        .find(|r| r.name() == v)
                        .ok_or_else(|| format!("drop={:?}: not a drop reason (the drop counters' names, e.g. no_backend)", short(v)))?;
                    q.outcome = Some(OutcomeMatch::Drop(*reason));
                }
                "count" => {
                    q.count = v
                        .parse::<u32>()
                        .ok()
                        .filter(|n| (1..=dataplane::trace::MAX_TRACE_COUNT).contains(n))
                        .ok_or_else(|| {
                            format!(
                                "count={v:?}: not a count of 1 to {}",
                                dataplane::trace::MAX_TRACE_COUNT
                            )
                        })?;
                }
                "seconds" => {
                    q.seconds = v
                        .parse::<u32>()
                        .ok()
                        .filter(|n| (1..=MAX_SECONDS).contains(n))
                        .ok_or_else(|| format!("seconds={v:?}: not 1 to {MAX_SECONDS}"))?;
                }
                _ => return Err(format!("unknown argument {:?}\n{USAGE}", short(k))),
            }
        }
        let h = &q.head;
        if (h.sport.is_some() || h.dport.is_some() || h.port.is_some())
            && h.proto.is_some_and(|p| p != proto::TCP && p != proto::UDP)
        {
            return Err("ports only go with tcp and udp".into());
        }
        Ok(q)
    }

    /// The command line that asks a daemon for this query.
    pub fn to_command(&self) -> String {
        let mut c = "trace".to_owned();
        let m = |a: &AddrMatch| format!("{}/{}", a.addr, a.len);
        let h = &self.head;
        for (k, v) in [("src", &h.src), ("dst", &h.dst), ("host", &h.host)] {
            if let Some(a) = v {
                let _ = write!(c, " {k}={}", m(a));
            }
        }
        if let Some(p) = h.proto {
            let _ = write!(c, " proto={p}");
        }
        for (k, v) in [("sport", h.sport), ("dport", h.dport), ("port", h.port)] {
            if let Some(p) = v {
                let _ = write!(c, " {k}={p}");
            }
        }
        if let Some(r) = &self.rule {
            let _ = write!(c, " rule={r}");
        }
        match self.outcome {
            Some(OutcomeMatch::AnyDrop) => c += " drop",
            Some(OutcomeMatch::Drop(r)) => {
                let _ = write!(c, " drop={}", r.name());
            }
            Some(OutcomeMatch::NotDropped) => c += " forwarded",
            None => {}
        }
        let _ = write!(c, " count={} seconds={}", self.count, self.seconds);
        c
    }

    /// The data plane's filter, the rule resolved against `snap`.
    pub fn filter(&self, snap: &Snapshot) -> Result<TraceFilter, String> {
        let children = match &self.rule {
            None => None,
            Some(name) => {
                let c = &*snap.compiled;
                let children: Vec<usize> = c
                    .children
                    .iter()
                    .enumerate()
                    .filter(|(_, ch)| {
                        c.rules
                            .get(ch.rule.0 as usize)
                            .is_some_and(|r| &r.name == name)
                    })
                    .map(|(i, _)| i)
                    .collect();
                if children.is_empty() {
                    return Err(format!("rule={name}: no such rule"));
                }
                Some((snap.generation, children))
            }
        };
        Ok(TraceFilter {
            head: self.head,
            children,
            outcome: self.outcome,
            count: self.count,
        })
    }
}

/// At most 32 characters of client input, for error messages.
fn short(s: &str) -> &str {
    match s.char_indices().nth(32) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// One traced packet: what it carried, and the decision.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TracedPacket {
    /// The worker that decided.
    pub worker: u16,
    /// The port it arrived on, by name.
    pub port: String,
    /// Its length.
    pub len: u16,
    /// IP source (none: not IP).
    pub src: Option<IpAddr>,
    /// IP destination.
    pub dst: Option<IpAddr>,
    /// IP protocol's name or number.
    pub proto: String,
    /// Source port.
    pub sport: Option<u16>,
    /// Destination port.
    pub dport: Option<u16>,
    /// TCP flags (`SYN`, `ACK`, …).
    pub tcp_flags: Option<String>,
    /// The EtherType of a frame that is not IP.
    pub ethertype: Option<String>,
    /// The snapshot generation it was decided with.
    pub generation: u32,
    /// Whether the packet created a flow entry.
    pub created_entry: bool,
    /// The decision, as `simulate` reports one.
    pub decision: Report,
}

/// What a trace took.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TraceReport {
    /// The query, as a command line.
    pub query: String,
    /// The packets, in the order the management core received them
    /// (each worker's in its own order).
    pub packets: Vec<TracedPacket>,
    /// `count` (as many as asked) or `time`.
    pub stopped_by: &'static str,
    /// How long it ran.
    pub seconds: f64,
    /// Records lost to a worker's full queue.
    pub lost: u64,
}

fn flags_text(f: u8) -> String {
    let names = [
        (0x02, "SYN"),
        (0x10, "ACK"),
        (0x01, "FIN"),
        (0x04, "RST"),
        (0x08, "PSH"),
        (0x20, "URG"),
    ];
    let set: Vec<&str> = names
        .iter()
        .filter(|(b, _)| f & b != 0)
        .map(|(_, n)| *n)
        .collect();
    if set.is_empty() {
        "none".into()
    } else {
        set.join(",")
    }
}

fn proto_text(p: u8) -> String {
    match p {
        proto::TCP => "tcp".into(),
        proto::UDP => "udp".into(),
        proto::ICMP => "icmp".into(),
        proto::ICMPV6 => "icmpv6".into(),
        n => n.to_string(),
    }
}

impl TracedPacket {
    /// Words record `r` against `snap` (`ports`: the ports' names).
    pub fn of(
        r: &TraceRecord,
        snap: &Snapshot,
        ports: &[String],
        drained: &Drained,
    ) -> TracedPacket {
        let h = &r.head;
        let unspecified = IpAddr::from([0, 0, 0, 0]);
        let probe = Probe {
            src: h.src.unwrap_or(unspecified),
            dst: h.dst.unwrap_or(unspecified),
            proto: h.proto,
            sport: h.ports.map_or(0, |p| p.0),
            dport: h.ports.map_or(0, |p| p.1),
            established: h.proto == proto::TCP && h.tcp_flags & 0x12 == 0x10,
        };
        let mut decision = Report::of(&probe, &r.decision, snap, drained);
        if r.generation != snap.generation {
            decision.why.push(format!(
                "decided with configuration generation {}; named here with generation {}",
                r.generation, snap.generation
            ));
        }
        TracedPacket {
            worker: r.worker,
            port: ports
                .get(usize::from(r.port))
                .cloned()
                .unwrap_or_else(|| r.port.to_string()),
            len: h.len,
            src: h.src,
            dst: h.dst,
            proto: if h.src.is_some() {
                proto_text(h.proto)
            } else {
                String::new()
            },
            sport: h.ports.map(|p| p.0),
            dport: h.ports.map(|p| p.1),
            tcp_flags: (h.proto == proto::TCP).then(|| flags_text(h.tcp_flags)),
            ethertype: h.src.is_none().then(|| format!("{:#06x}", h.ethertype)),
            generation: r.generation,
            created_entry: r.created,
            decision,
        }
    }
}

impl std::fmt::Display for TracedPacket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let end = |a: Option<IpAddr>, p: Option<u16>| match (a, p) {
            (Some(IpAddr::V6(a)), Some(p)) => format!("[{a}]:{p}"),
            (Some(a), Some(p)) => format!("{a}:{p}"),
            (Some(a), None) => a.to_string(),
            (None, _) => "?".into(),
        };
        if self.src.is_some() {
            write!(
                f,
                "worker {} port {}: {} > {} {}",
                self.worker,
                self.port,
                end(self.src, self.sport),
                end(self.dst, self.dport),
                self.proto
            )?;
            if let Some(fl) = &self.tcp_flags {
                write!(f, " [{fl}]")?;
            }
        } else {
            write!(
                f,
                "worker {} port {}: ethertype {}",
                self.worker,
                self.port,
                self.ethertype.as_deref().unwrap_or("?")
            )?;
        }
        writeln!(f, ", {} bytes", self.len)?;
        for line in self.decision.to_string().lines() {
            writeln!(f, "  {line}")?;
        }
        Ok(())
    }
}

impl std::fmt::Display for TraceReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for p in &self.packets {
            writeln!(f, "{p}")?;
        }
        write!(
            f,
            "{} packets traced in {:.1} s (stopped by {})",
            self.packets.len(),
            self.seconds,
            self.stopped_by
        )?;
        if self.lost > 0 {
            write!(f, "; {} lost to full queues", self.lost)?;
        }
        writeln!(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_parse_and_read_back_from_their_command_line() {
        let q = TraceQuery::parse(
            "src=192.0.2.0/24 dst=10.0.0.10 proto=tcp dport=80 rule=web drop=no_backend count=5 seconds=3",
        );
        let Ok(q) = q else {
            panic!("{q:?}");
        };
        assert_eq!(q.count, 5);
        assert_eq!(q.outcome, Some(OutcomeMatch::Drop(DropReason::NoBackend)));
        assert_eq!(q.head.src.map(|s| s.len), Some(24));
        assert_eq!(q.head.dst.map(|s| s.len), Some(32));
        let line = q.to_command();
        assert_eq!(
            TraceQuery::parse(line.strip_prefix("trace").unwrap_or_default()),
            Ok(q)
        );
        assert_eq!(TraceQuery::parse(""), Ok(TraceQuery::default()));
    }

    #[test]
    fn bad_queries_are_refused_with_the_reason() {
        for (q, want) in [
            ("src=10.0.0.1/33", "prefix length over 32"),
            ("drop=nope", "not a drop reason"),
            ("count=0", "not a count"),
            ("seconds=60", "not 1 to 25"),
            ("proto=icmp dport=5", "ports only go with tcp and udp"),
            ("sport=x", "not a port"),
            ("bogus=1", "unknown argument"),
            ("word", "expected key=value"),
        ] {
            let e = TraceQuery::parse(q).expect_err(q);
            assert!(e.contains(want), "{q}: {e}");
        }
    }

    #[test]
    fn tcp_flags_are_named() {
        assert_eq!(flags_text(0x12), "SYN,ACK");
        assert_eq!(flags_text(0), "none");
    }
}
