//! `spillway flows`: the connection table, filtered, one line per entry.
//!
//! Query syntax (the control-socket command line): `flows` followed by any of
//! `vip=ADDR`, `client=ADDR`, `backend=ADDR`, `service=NAME`,
//! `proto=tcp|udp|icmp|icmpv6|N`, `state=STATE` (`half-open`,
//! `established`, `fin`, `rst`, `open`), `limit=N`. Every filter must match. All matching entries are counted; at most
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
    /// Only flows of this IP protocol.
    pub proto: Option<u8>,
    /// Only entries in this state (one of [`STATES`]).
    pub state: Option<&'static str>,
    /// At most this many lines.
    pub limit: usize,
}

/// The entry states `state=` takes, as listed.
pub const STATES: [&str; 5] = ["half-open", "established", "fin", "rst", "open"];

/// The filters, as an error lists them.
const FILTERS: &str = "vip, client, backend, service, proto, state, limit";

impl Default for FlowQuery {
    fn default() -> Self {
        FlowQuery {
            vip: None,
            client: None,
            backend: None,
            service: None,
            proto: None,
            state: None,
            limit: DEFAULT_LIMIT,
        }
    }
}

impl FlowQuery {
    /// Parses the words after `flows`.
    pub fn parse(words: &str) -> Result<FlowQuery, String> {
        let mut q = FlowQuery::default();
        for w in words.split_whitespace() {
            let (k, v) = w
                .split_once('=')
                .ok_or_else(|| format!("{w:?}: expected key=value ({FILTERS})"))?;
            let addr = || {
                v.parse::<IpAddr>()
                    .map_err(|_| format!("{k}={v:?}: not an IP address"))
            };
            match k {
                "vip" => q.vip = Some(addr()?),
                "client" => q.client = Some(addr()?),
                "backend" => q.backend = Some(addr()?),
                "service" => q.service = Some(v.to_owned()),
                "proto" => q.proto = Some(parse_proto(v)?),
                "state" => {
                    q.state =
                        Some(STATES.into_iter().find(|s| *s == v).ok_or_else(|| {
                            format!("state={v:?}: not one of {}", STATES.join(", "))
                        })?);
                }
                "limit" => {
                    q.limit = v.parse().map_err(|_| format!("limit={v:?}: not a count"))?;
                    if q.limit > MAX_LIMIT {
                        return Err(format!(
                            "limit={v}: at most {MAX_LIMIT} entries are listed; narrow the filter"
                        ));
                    }
                }
                _ => {
                    return Err(format!("unknown filter {k:?} ({FILTERS})"));
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
        if let Some(p) = self.proto {
            let _ = write!(c, " proto={p}");
        }
        if let Some(s) = self.state {
            let _ = write!(c, " state={s}");
        }
        let _ = write!(c, " limit={}", self.limit);
        c
    }
}

/// `spillway flows`' answer: the entries listed and how many matched.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct FlowList {
    /// Entries matching the filters.
    pub matched: usize,
    /// Live entries scanned.
    pub live: usize,
    /// The entries listed (at most the limit).
    pub flows: Vec<Flow>,
}

/// One flow-table entry.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Flow {
    /// `tcp`, `udp`, `icmp`, `icmpv6`, `gre`, `esp`, `ip` (another
    /// protocol) or `any` (a 2-tuple entry).
    pub proto: &'static str,
    /// The client's address.
    pub client: IpAddr,
    /// Its port (`null` unless a 5-tuple entry).
    pub client_port: Option<u16>,
    /// The VIP.
    pub vip: IpAddr,
    /// The VIP's port (`null` unless a 5-tuple entry).
    pub vip_port: Option<u16>,
    /// The backend service (`?`: its backend is gone).
    pub service: String,
    /// The backend's address (`null`: gone).
    pub backend: Option<IpAddr>,
    /// `active`, `unhealthy`, `draining`, `removed` or `gone`.
    pub backend_state: String,
    /// One of [`STATES`].
    pub state: &'static str,
    /// Not confirmed by a second packet yet.
    pub unconfirmed: bool,
    /// Seconds since it was created.
    pub age_s: i32,
    /// Seconds since its last packet.
    pub idle_s: i32,
    /// The backend slot's generation it was made with.
    pub generation: u32,
    /// Its flow cookie (M32), 8 hex digits.
    pub cookie: String,
}

/// Lists the entries of `flows` matching `q`, in slot order.
pub fn list(
    q: &FlowQuery,
    flows: &FlowTable,
    snap: &Snapshot,
    compiled: &Compiled,
    now: Tick,
) -> FlowList {
    let mut out = Vec::new();
    let mut matched = 0usize;
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
        let state = state_of(e.flags);
        let ok = q.vip.is_none_or(|a| a.to_canonical() == vip)
            && q.client.is_none_or(|a| a.to_canonical() == client)
            && q.backend.is_none_or(|a| backend.is_some_and(|b| b.addr.to_canonical() == a.to_canonical()))
            && q.service.as_deref().is_none_or(|s| s == service)
            // A 2-tuple entry carries no protocol: it matches none.
            && q.proto.is_none_or(|p| key.tuple != Tuple::Two && key.proto == p)
            && q.state.is_none_or(|s| s == state);
        if !ok {
            return ControlFlow::Continue(());
        }
        matched += 1;
        if out.len() < q.limit {
            let five = key.tuple == Tuple::Five;
            out.push(Flow {
                proto: match key.tuple {
                    Tuple::Two => "any",
                    _ => proto_name(key.proto),
                },
                client,
                client_port: five.then_some(key.src_port),
                vip,
                vip_port: five.then_some(key.dst_port),
                service: service.to_owned(),
                backend: backend.map(|b| b.addr),
                backend_state: backend
                    .map_or("gone".to_owned(), |b| format!("{:?}", b.state).to_lowercase()),
                state,
                unconfirmed: e.flags.contains(EntryFlags::UNCONFIRMED),
                age_s: flowtable::tick_age(now, e.created),
                idle_s: flowtable::tick_age(now, e.last_seen),
                generation: e.generation,
                cookie: format!("{:08x}", e.cookie),
            });
        }
        ControlFlow::Continue(())
    });
    FlowList {
        matched,
        live: scanned,
        flows: out,
    }
}

impl std::fmt::Display for FlowList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for e in &self.flows {
            let port = |p: Option<u16>| p.map(|p| format!(":{p}")).unwrap_or_default();
            writeln!(
                f,
                "{} {}{} -> {}{} service {} backend {} ({}) state {}{} age {} s idle {} s gen {} cookie {}",
                e.proto,
                bracket(e.client),
                port(e.client_port),
                bracket(e.vip),
                port(e.vip_port),
                e.service,
                e.backend.map_or("?".to_owned(), |a| a.to_string()),
                e.backend_state,
                e.state,
                if e.unconfirmed { " unconfirmed" } else { "" },
                e.age_s,
                e.idle_s,
                e.generation,
                e.cookie,
            )?;
        }
        let listed = self.flows.len();
        writeln!(
            f,
            "{} matching flows of {} live entries{}",
            self.matched,
            self.live,
            if self.matched > listed {
                format!(" ({listed} listed; raise the limit or narrow the filter)")
            } else {
                String::new()
            }
        )
    }
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

/// The protocol number of `tcp`, `udp`, `icmp`, `icmpv6` or a number.
pub fn parse_proto(v: &str) -> Result<u8, String> {
    match v.to_ascii_lowercase().as_str() {
        "tcp" => Ok(proto::TCP),
        "udp" => Ok(proto::UDP),
        "icmp" => Ok(proto::ICMP),
        "icmpv6" => Ok(proto::ICMPV6),
        n => n.parse::<u8>().map_err(|_| {
            format!("proto={v:?}: not tcp, udp, icmp, icmpv6 or a protocol number 0-255")
        }),
    }
}

/// The name of an entry's state (one of [`STATES`]): what `flows` lists
/// and filters by, and what `simulate` reports of an entry it finds.
pub(crate) fn state_of(f: EntryFlags) -> &'static str {
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
    fn every_entry_state_is_one_a_query_can_name() {
        for bits in 0..=u8::MAX {
            let state = state_of(EntryFlags::from_bits(bits));
            assert!(STATES.contains(&state), "{bits:#04x}: {state}");
        }
    }

    #[test]
    fn queries_parse_and_round_trip() {
        let q = FlowQuery::parse(
            "vip=198.18.10.10 client=2001:db8::1 backend=10.0.0.1 service=web proto=udp state=established limit=5",
        )
        .unwrap();
        assert_eq!(q.proto, Some(17));
        assert_eq!(q.state, Some("established"));
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
            FlowQuery::parse("state=closed")
                .unwrap_err()
                .contains("not one of")
        );
        assert!(FlowQuery::parse("proto=x").is_err());
        assert!(
            FlowQuery::parse("port=80")
                .unwrap_err()
                .contains("unknown filter")
        );
    }
}
