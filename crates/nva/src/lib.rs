//! The reference network virtual appliance for Spillway's gateway mode (M33):
//! what a firewall or IDS behind a gateway load balancer does with the GENEVE
//! packets it gets, reduced to the contract. A packet comes in on UDP 6081
//! from the balancer; the appliance sends the same GENEVE packet back, outer
//! addresses swapped and ports kept, every option returned unchanged — the
//! balancer then checks the flow cookie and sends the inner packet on.
//!
//! Sending a packet back to where it came from is what a reflector does: the
//! appliance answers only the balancers it is told of
//! ([`Config::source_allowed`], `--allow-source`, as `spillway decap` takes
//! tunnels only from them); a datagram from anyone else is counted and not
//! even parsed.
//!
//! On top of that it can log flows, drop by a simple 5-tuple rule (what a
//! firewall would), and — for the balancer's negative tests — change the
//! cookie or strip the options before returning. [`answer`] is the whole
//! decision, a pure function of the configuration and the received UDP
//! payload; `spillway nva` (the `daemon` module) adds the sockets.
//!
//! All parsing is `wire`'s, the code that builds the balancer's tunnels.

#[cfg(feature = "daemon")]
pub mod daemon;
#[cfg(feature = "daemon")]
pub mod flowlog;
#[cfg(feature = "daemon")]
pub mod health;

use std::fmt;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::str::FromStr;

pub use values::Prefix;
use wire::ethernet::ethertype;
use wire::geneve::{self, OptionIds};
use wire::packet::{IpVersion, parse_ip};

/// Why a received datagram was not returned. Each has a counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum DropReason {
    /// The source is not an allowed balancer address (the daemon's check,
    /// [`Config::source_allowed`], before [`answer`]).
    #[error("the source is not an allowed balancer address")]
    SourceNotAllowed,
    /// Not a GENEVE packet this appliance can read: short, version not 0,
    /// an option overrunning the header, or an inner packet that is not one
    /// whole, well-formed IP packet of the announced version.
    #[error("malformed GENEVE packet")]
    Malformed,
    /// GENEVE carrying something other than IPv4 or IPv6 (protocol type
    /// neither 0x0800 nor 0x86DD): the gateway contract carries IP only.
    #[error("GENEVE carrying something other than IP")]
    NotIp,
    /// A GENEVE OAM packet: not a client's packet, nothing to return.
    #[error("GENEVE OAM packet")]
    Oam,
    /// A `--drop` rule matched the inner packet.
    #[error("dropped by a rule")]
    Rule,
    /// Sending the answer failed (the daemon's, never [`answer`]'s).
    #[error("sending the answer failed")]
    SendFailed,
}

impl DropReason {
    /// Every reason, in the order the counters are printed.
    pub const ALL: [DropReason; 6] = [
        DropReason::SourceNotAllowed,
        DropReason::Malformed,
        DropReason::NotIp,
        DropReason::Oam,
        DropReason::Rule,
        DropReason::SendFailed,
    ];

    /// The counter's name.
    pub const fn name(self) -> &'static str {
        match self {
            DropReason::SourceNotAllowed => "source_not_allowed",
            DropReason::Malformed => "malformed",
            DropReason::NotIp => "not_ip",
            DropReason::Oam => "oam",
            DropReason::Rule => "rule",
            DropReason::SendFailed => "send_failed",
        }
    }

    /// Position in [`DropReason::ALL`].
    pub const fn index(self) -> usize {
        self as usize
    }
}

/// What the appliance does to a packet before returning it (negative tests
/// of the balancer's return path; a real appliance never does any).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Tamper {
    /// Return the packet unchanged.
    #[default]
    None,
    /// Invert every bit of the flow-cookie option's value (so it can never
    /// equal the original); a packet without one is returned unchanged.
    Cookie,
    /// Remove every option (options length 0, critical flag cleared).
    StripOptions,
}

impl FromStr for Tamper {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "none" => Ok(Tamper::None),
            "cookie" => Ok(Tamper::Cookie),
            "strip-options" => Ok(Tamper::StripOptions),
            _ => Err(format!(
                "{s:?} is not a tamper mode (none, cookie, strip-options)"
            )),
        }
    }
}

/// A side of a [`Rule`]: an address or prefix (or any) and a port (or any).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Endpoint {
    /// `None`: any address.
    pub addr: Option<Prefix>,
    /// `None`: any port (and packets without ports, such as ICMP).
    pub port: Option<u16>,
}

impl Endpoint {
    fn matches(&self, a: IpAddr, port: Option<u16>) -> bool {
        self.addr.is_none_or(|p| p.contains(a)) && self.port.is_none_or(|want| port == Some(want))
    }
}

/// A drop rule, written `PROTO SRC -> DST` (one direction) or
/// `PROTO SRC <-> DST` (either direction): PROTO is `tcp`, `udp`, `icmp`
/// (ICMP or ICMPv6), `any` or an IP protocol number; SRC and DST are
/// `ADDR[/LEN][:PORT]`, `*[:PORT]`, or for IPv6 `[ADDR[/LEN]][:PORT]`, a
/// port being a number or `*`. Example: `tcp 10.0.0.1:* -> *:22`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rule {
    /// `None`: any protocol.
    pub proto: Option<u8>,
    /// Source side as written.
    pub src: Endpoint,
    /// Destination side as written.
    pub dst: Endpoint,
    /// `<->`: the rule also matches with source and destination swapped.
    pub both_ways: bool,
}

impl Rule {
    /// Whether the rule matches a packet of this 5-tuple (`ports` is `None`
    /// for a packet without ports or a later fragment).
    pub fn matches(&self, flow: &Flow) -> bool {
        if self.proto.is_some_and(|p| !proto_matches(p, flow.proto)) {
            return false;
        }
        let (sp, dp) = (flow.ports.map(|p| p.0), flow.ports.map(|p| p.1));
        (self.src.matches(flow.src, sp) && self.dst.matches(flow.dst, dp))
            || (self.both_ways && self.src.matches(flow.dst, dp) && self.dst.matches(flow.src, sp))
    }
}

/// `icmp` covers ICMPv6 too (rules are written once for both families).
fn proto_matches(rule: u8, packet: u8) -> bool {
    rule == packet || (rule == wire::ip::proto::ICMP && packet == wire::ip::proto::ICMPV6)
}

fn parse_endpoint(s: &str) -> Result<Endpoint, String> {
    let bad_port = |p: &str| format!("{p:?} is not a port (a number from 0 to 65535, or *)");
    let port = |p: &str| -> Result<Option<u16>, String> {
        if p == "*" {
            Ok(None)
        } else {
            p.parse().map(Some).map_err(|_| bad_port(p))
        }
    };
    let addr = |a: &str| -> Result<Option<Prefix>, String> {
        if a == "*" {
            return Ok(None);
        }
        Prefix::parse_network(a).map(Some)
    };
    // `[v6]:port`, `[v6]`, `v4:port`, `*:port`, or a bare address (an IPv6
    // one without brackets has no port: its colons are the address's).
    if let Some(rest) = s.strip_prefix('[') {
        let (a, tail) = rest
            .split_once(']')
            .ok_or_else(|| format!("{s:?}: missing ]"))?;
        let p = match tail {
            "" => None,
            t => port(t.strip_prefix(':').ok_or_else(|| bad_port(t))?)?,
        };
        return Ok(Endpoint {
            addr: addr(a)?,
            port: p,
        });
    }
    match s.split_once(':') {
        Some((a, p)) if !p.contains(':') => Ok(Endpoint {
            addr: addr(a)?,
            port: port(p)?,
        }),
        _ => Ok(Endpoint {
            addr: addr(s)?,
            port: None,
        }),
    }
}

impl FromStr for Rule {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let usage = "write PROTO SRC -> DST, e.g. \"tcp 10.0.0.1:* -> *:22\"";
        let words: Vec<&str> = s.split_whitespace().collect();
        let [proto, src, arrow, dst] = words.as_slice() else {
            return Err(format!("{s:?}: {usage}"));
        };
        let both_ways = match *arrow {
            "->" => false,
            "<->" => true,
            _ => {
                return Err(format!(
                    "{s:?}: expected -> or <-> between the sides; {usage}"
                ));
            }
        };
        let proto = match *proto {
            "any" => None,
            "tcp" => Some(wire::ip::proto::TCP),
            "udp" => Some(wire::ip::proto::UDP),
            "icmp" => Some(wire::ip::proto::ICMP),
            n => Some(n.parse().map_err(|_| {
                format!("{n:?} is not a protocol (tcp, udp, icmp, any or 0-255); {usage}")
            })?),
        };
        Ok(Rule {
            proto,
            src: parse_endpoint(src)?,
            dst: parse_endpoint(dst)?,
            both_ways,
        })
    }
}

/// What the appliance does.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Config {
    /// Sources answered (the balancers' tunnel addresses); `None`: any
    /// (`--allow-any`, and the default of this struct, for [`answer`]'s
    /// tests: the daemon requires one or the other).
    pub sources: Option<Vec<Prefix>>,
    /// Class and types of Spillway's options (the cookie is found by them).
    pub ids: OptionIds,
    /// Drop rules; the first that matches drops the packet.
    pub rules: Vec<Rule>,
    /// What to change before returning.
    pub tamper: Tamper,
}

impl Config {
    /// Whether datagrams from `src` are answered. The daemon's sockets are
    /// bound per family (IPv6 ones v6-only), so an IPv4-mapped source is an
    /// IPv6 packet that claims one: it matches no IPv4 prefix.
    pub fn source_allowed(&self, src: IpAddr) -> bool {
        self.sources
            .as_ref()
            .is_none_or(|list| list.iter().any(|p| p.contains(src)))
    }
}

/// The inner packet's 5-tuple and the balancer's options, for the flow log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Flow {
    /// IP protocol (after IPv6 extension headers).
    pub proto: u8,
    /// Inner source.
    pub src: IpAddr,
    /// Inner destination.
    pub dst: IpAddr,
    /// Source and destination ports (TCP and UDP, unless a later fragment).
    pub ports: Option<(u16, u16)>,
    /// The endpoint-ID option's value, if present.
    pub endpoint_id: Option<u64>,
    /// The flow-cookie option's value as received, if present.
    pub cookie: Option<u32>,
}

impl Flow {
    /// Which way the packet goes relative to the connection's canonical
    /// order (the lower (address, port) first): `a->b` or `b->a`. Both
    /// directions of a connection share [`Flow::key`] and differ here, so a
    /// log shows whether they passed the same appliance.
    pub fn direction(&self) -> &'static str {
        let (sp, dp) = self.ports.unwrap_or((0, 0));
        if (self.src, sp) <= (self.dst, dp) {
            "a->b"
        } else {
            "b->a"
        }
    }

    /// The connection in canonical order: `proto a:port b:port`.
    pub fn key(&self) -> String {
        let (sp, dp) = self.ports.unwrap_or((0, 0));
        let (a, b) = if self.direction() == "a->b" {
            ((self.src, sp), (self.dst, dp))
        } else {
            ((self.dst, dp), (self.src, sp))
        };
        let side = |(ip, port): (IpAddr, u16)| match ip {
            IpAddr::V4(v4) => format!("{v4}:{port}"),
            IpAddr::V6(v6) => format!("[{v6}]:{port}"),
        };
        format!("{} {} {}", self.proto, side(a), side(b))
    }
}

/// One flow-log line: `proto a b direction src->dst endpoint_id cookie`
/// (missing options as `-`), space-separated, stable for scripts.
impl fmt::Display for Flow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hex = |v: Option<u64>, w: usize| v.map_or("-".to_owned(), |v| format!("{v:0w$x}"));
        write!(
            f,
            "{} {} endpoint_id={} cookie={}",
            self.key(),
            self.direction(),
            hex(self.endpoint_id, 16),
            hex(self.cookie.map(u64::from), 8)
        )
    }
}

/// The UDP datagram (header and `payload`) answering a packet that came from
/// `balancer` to `appliance` with the ports kept (M32): from the balancer's
/// source port to the appliance's Geneve port, sent from the appliance's
/// address to the balancer's, checksum over that pseudo header. `None` when
/// the families differ or the payload does not fit a datagram.
pub fn kept_ports_datagram(
    appliance: SocketAddr,
    balancer: SocketAddr,
    payload: &[u8],
) -> Option<Vec<u8>> {
    if appliance.is_ipv4() != balancer.is_ipv4() {
        return None;
    }
    let len = u16::try_from(wire::udp::HEADER_LEN + payload.len()).ok()?;
    let mut d = vec![0u8; usize::from(len)];
    d.get_mut(wire::udp::HEADER_LEN..)?.copy_from_slice(payload);
    let mut u = wire::udp::Packet::new_unchecked(&mut d[..]);
    u.set_src_port(balancer.port());
    u.set_dst_port(appliance.port());
    u.set_len(len);
    u.fill_checksum(&appliance.ip(), &balancer.ip()).ok()?;
    Some(d)
}

/// The answer to one received GENEVE packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The UDP payload to send back (the GENEVE packet, changed only as the
    /// [`Tamper`] mode asks).
    pub payload: Vec<u8>,
    /// What the packet carried, for the flow log.
    pub flow: Flow,
}

/// Decides about one received UDP payload: returns what to send back, or
/// why nothing. The outer headers are written apart: [`kept_ports_datagram`]
/// (the contract's answer) or the socket's own reply.
pub fn answer(cfg: &Config, payload: &[u8]) -> Result<Answer, (DropReason, Option<Flow>)> {
    let malformed = (DropReason::Malformed, None);
    let p = geneve::Packet::new_checked(payload).map_err(|_| malformed)?;
    let repr = geneve::GeneveRepr::parse(&p).map_err(|_| malformed)?;
    if repr.oam {
        return Err((DropReason::Oam, None));
    }
    let want_v6 = match repr.protocol {
        ethertype::IPV4 => false,
        ethertype::IPV6 => true,
        _ => return Err((DropReason::NotIp, None)),
    };
    // A wrong-length option of Spillway's class and type is malformed too:
    // the balancer never sends one.
    let opts = geneve::GatewayOptions::parse(&cfg.ids, p.options()).map_err(|_| malformed)?;
    let inner = payload.get(repr.header_len()..).ok_or(malformed)?;
    let info = parse_ip(inner).map_err(|_| malformed)?;
    let v6 = info.version == IpVersion::V6;
    if v6 != want_v6 || info.l3_len as usize != inner.len() {
        return Err(malformed);
    }
    let addr = |a: [u8; 16]| {
        let a = Ipv6Addr::from(a);
        match (v6, a.to_ipv4_mapped()) {
            (false, Some(v4)) => IpAddr::V4(v4),
            _ => IpAddr::V6(a),
        }
    };
    let flow = Flow {
        proto: info.proto,
        src: addr(info.src),
        dst: addr(info.dst),
        ports: info.ports,
        endpoint_id: opts.endpoint_id,
        cookie: opts.cookie,
    };
    if cfg.rules.iter().any(|r| r.matches(&flow)) {
        return Err((DropReason::Rule, Some(flow)));
    }
    let out = match cfg.tamper {
        Tamper::None => payload.to_vec(),
        Tamper::Cookie => tamper_cookie(&cfg.ids, payload, repr.header_len()),
        Tamper::StripOptions => strip_options(payload, repr.header_len()),
    };
    Ok(Answer { payload: out, flow })
}

/// The packet with every cookie option's value inverted (the options were
/// checked by the caller: each TLV lies within the header).
fn tamper_cookie(ids: &OptionIds, payload: &[u8], header_len: usize) -> Vec<u8> {
    let mut out = payload.to_vec();
    let mut off = geneve::BASE_HEADER_LEN;
    while off + geneve::OPTION_HEADER_LEN <= header_len {
        let (Some(hi), Some(lo), Some(&ty), Some(&len)) = (
            out.get(off),
            out.get(off + 1),
            out.get(off + 2),
            out.get(off + 3),
        ) else {
            break;
        };
        let class = u16::from_be_bytes([*hi, *lo]);
        let data = usize::from(len & 0x1f) * 4;
        let start = off + geneve::OPTION_HEADER_LEN;
        if class == ids.class && ty == ids.cookie_type {
            if let Some(d) = out.get_mut(start..start + data) {
                d.iter_mut().for_each(|b| *b = !*b);
            }
        }
        off = start + data;
    }
    out
}

/// The packet without options: base header (options length 0, critical flag
/// cleared, since no critical option is left) and the inner packet.
fn strip_options(payload: &[u8], header_len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len());
    out.extend_from_slice(payload.get(..geneve::BASE_HEADER_LEN).unwrap_or_default());
    out.extend_from_slice(payload.get(header_len..).unwrap_or_default());
    let mut p = geneve::Packet::new_unchecked(&mut out[..]);
    let oam = p.oam();
    p.set_options_len(0);
    p.set_flags(oam, false);
    out
}

#[cfg(test)]
mod tests;
