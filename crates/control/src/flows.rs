//! `spillway flows`: the connection table, filtered, one line per entry.
//!
//! Query syntax (the control-socket command line): `flows` followed by any of
//! `vip=ADDR`, `client=ADDR`, `backend=ADDR`, `service=NAME`, `limit=N`.
//! Every filter must match. All matching entries are counted; at most
//! `limit` (default 1000, at most [`MAX_LIMIT`]) are listed, so an answer
//! stays bounded however large the table.

use std::fmt::Write as _;
use std::net::IpAddr;
use std::ops::ControlFlow;

use config::Compiled;
use dataplane::Snapshot;
use flowtable::{EntryFlags, FlowTable, Tick};
use wire::flow::{FlowKey, Tuple};
use wire::ip::proto;

/// Default number of entries listed.
pub const DEFAULT_LIMIT: usize = 1000;
/// Most entries one answer lists (about 20 MB of text): beyond, narrow the
/// filter.
pub const MAX_LIMIT: usize = 100_000;

/// A parsed `flows` query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowQuery {
    /// Only flows to this VIP.
    pub vip: Option<IpAddr>,
    /// Only flows from this client address.
    pub client: Option<IpAddr>,
    /// Only flows on this backend address.
    pub backend: Option<IpAddr>,
    /// Only flows of this backend service.
    pub service: Option<String>,
    /// At most this many lines.
    pub limit: usize,
}

impl Default for FlowQuery {
    fn default() -> Self {
        FlowQuery {
            vip: None,
            client: None,
            backend: None,
            service: None,
            limit: DEFAULT_LIMIT,
        }
    }
}

impl FlowQuery {
    /// Parses the words after `flows`.
    pub fn parse(words: &str) -> Result<FlowQuery, String> {
        let mut q = FlowQuery::default();
        for w in words.split_whitespace() {
            let (k, v) = w.split_once('=').ok_or_else(|| {
                format!("{w:?}: expected key=value (vip, client, backend, service, limit)")
            })?;
            let addr = || {
                v.parse::<IpAddr>()
                    .map_err(|_| format!("{k}={v:?}: not an IP address"))
            };
            match k {
                "vip" => q.vip = Some(addr()?),
                "client" => q.client = Some(addr()?),
                "backend" => q.backend = Some(addr()?),
                "service" => q.service = Some(v.to_owned()),
                "limit" => {
                    q.limit = v.parse().map_err(|_| format!("limit={v:?}: not a count"))?;
                    if q.limit > MAX_LIMIT {
                        return Err(format!(
                            "limit={v}: at most {MAX_LIMIT} entries are listed; narrow the filter"
                        ));
                    }
                }
                _ => {
                    return Err(format!(
                        "unknown filter {k:?} (vip, client, backend, service, limit)"
                    ));
                }
            }
        }
        Ok(q)
    }

    /// The command line that asks a daemon for this query.
    pub fn to_command(&self) -> String {
        let mut c = String::from("flows");
        if let Some(a) = self.vip {
            let _ = write!(c, " vip={a}");
        }
        if let Some(a) = self.client {
            let _ = write!(c, " client={a}");
        }
        if let Some(a) = self.backend {
            let _ = write!(c, " backend={a}");
        }
        if let Some(s) = &self.service {
            let _ = write!(c, " service={s}");
        }
        let _ = write!(c, " limit={}", self.limit);
        c
    }
}

/// Lists the entries of `flows` matching `q`, newest state first per slot
/// order, with a summary line.
pub fn list(
    q: &FlowQuery,
    flows: &FlowTable,
    snap: &Snapshot,
    compiled: &Compiled,
    now: Tick,
) -> String {
    let mut out = String::new();
    let (mut matched, mut listed) = (0usize, 0usize);
    let scanned = flows.scan(|k, e| {
        let Some(key) = FlowKey::unpack(&wire::flow::without_service_tag(k.0)) else {
            return ControlFlow::Continue(());
        };
        // A slot reused by a newer endpoint is not this entry's backend.
        let backend = snap
            .backends
            .get(e.backend as usize)
            .filter(|b| b.holds_entry_of(e.generation));
        let service = backend
            .and_then(|b| compiled.services.get(b.service as usize))
            .map_or("?", |s| s.name.as_str());
        let (client, vip) = (key.src_addr(), key.dst_addr());
        let ok = q.vip.is_none_or(|a| a.to_canonical() == vip)
            && q.client.is_none_or(|a| a.to_canonical() == client)
            && q.backend.is_none_or(|a| backend.is_some_and(|b| b.addr.to_canonical() == a.to_canonical()))
            && q.service.as_deref().is_none_or(|s| s == service);
        if !ok {
            return ControlFlow::Continue(());
        }
        matched += 1;
        if listed < q.limit {
            listed += 1;
            let (cp, vp) = match key.tuple {
                Tuple::Five => (format!(":{}", key.src_port), format!(":{}", key.dst_port)),
                _ => (String::new(), String::new()),
            };
            let proto = match key.tuple {
                Tuple::Two => "any",
                _ => proto_name(key.proto),
            };
            let (baddr, bstate) = backend.map_or(("?".to_owned(), "gone".to_owned()), |b| {
                (b.addr.to_string(), format!("{:?}", b.state).to_lowercase())
            });
            let _ = writeln!(
                out,
                "{proto} {}{cp} -> {}{vp} service {service} backend {baddr} ({bstate}) state {}{} age {} s idle {} s gen {} cookie {:08x}",
                bracket(client),
                bracket(vip),
                flag_names(e.flags),
                if e.flags.contains(EntryFlags::UNCONFIRMED) {
                    " unconfirmed"
                } else {
                    ""
                },
                flowtable::tick_age(now, e.created),
                flowtable::tick_age(now, e.last_seen),
                e.generation,
                e.cookie,
            );
        }
        ControlFlow::Continue(())
    });
    let _ = writeln!(
        out,
        "{matched} matching flows of {scanned} live entries{}",
        if matched > listed {
            format!(" ({listed} listed; raise the limit or narrow the filter)")
        } else {
            String::new()
        }
    );
    out
}

fn bracket(a: IpAddr) -> String {
    match a {
        IpAddr::V6(_) => format!("[{a}]"),
        IpAddr::V4(_) => a.to_string(),
    }
}

fn proto_name(p: u8) -> &'static str {
    match p {
        proto::ICMP => "icmp",
        proto::TCP => "tcp",
        proto::UDP => "udp",
        proto::GRE => "gre",
        proto::ESP => "esp",
        proto::ICMPV6 => "icmpv6",
        _ => "ip",
    }
}

fn flag_names(f: EntryFlags) -> &'static str {
    if f.contains(EntryFlags::RST) {
        "rst"
    } else if f.contains(EntryFlags::FIN) {
        "fin"
    } else if f.is_half_open() {
        "half-open"
    } else if f.contains(EntryFlags::ESTABLISHED) {
        "established"
    } else {
        "open"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_parse_and_round_trip() {
        let q = FlowQuery::parse(
            "vip=198.18.10.10 client=2001:db8::1 backend=10.0.0.1 service=web limit=5",
        )
        .unwrap();
        assert_eq!(q.vip, Some("198.18.10.10".parse().unwrap()));
        assert_eq!(q.client, Some("2001:db8::1".parse().unwrap()));
        assert_eq!(q.backend, Some("10.0.0.1".parse().unwrap()));
        assert_eq!(q.service.as_deref(), Some("web"));
        assert_eq!(q.limit, 5);
        let cmd = q.to_command();
        assert_eq!(
            FlowQuery::parse(cmd.strip_prefix("flows").unwrap()).unwrap(),
            q
        );
        assert_eq!(FlowQuery::parse("").unwrap(), FlowQuery::default());
    }

    #[test]
    fn bad_queries_say_what_is_wrong() {
        assert!(FlowQuery::parse("vip").unwrap_err().contains("key=value"));
        assert!(
            FlowQuery::parse("vip=foo")
                .unwrap_err()
                .contains("not an IP")
        );
        assert!(
            FlowQuery::parse("limit=-1")
                .unwrap_err()
                .contains("not a count")
        );
        assert!(
            FlowQuery::parse(&format!("limit={}", MAX_LIMIT + 1))
                .unwrap_err()
                .contains("at most 100000 entries")
        );
        assert_eq!(
            FlowQuery::parse(&format!("limit={MAX_LIMIT}"))
                .unwrap()
                .limit,
            MAX_LIMIT
        );
        assert!(
            FlowQuery::parse("port=80")
                .unwrap_err()
                .contains("unknown filter")
        );
    }
}
