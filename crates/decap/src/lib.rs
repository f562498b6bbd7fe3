//! The backend side of Spillway's tunnels, for hosts whose kernel has no
//! GUE/GENEVE/IPIP/GRE decapsulation (or where an operator prefers not to
//! configure it): the functions here decide whether what a socket received
//! is a tunnel packet from a balancer carrying a packet for this backend, and
//! find the original IP packet inside, so that `spillway-decap` can hand it to
//! the kernel through a TUN device and the real server sees the client's
//! packet, byte for byte, addressed to the VIP.
//!
//! A decapsulator writes packets with any source address into the kernel, as
//! if they had arrived on a local interface: left open, it lets anyone who can
//! reach its sockets inject packets past the network's filters, to any
//! address or service of the host. So every packet goes through [`decide`]
//! (a pure function of the policy, the outer source and the bytes): the outer
//! source must be an allowed balancer, the tunnel well formed and carrying
//! data (no GENEVE OAM packet, no critical option this endpoint does not
//! understand), and the inner packet a well-formed IP packet to one of the
//! backend's VIPs from a plausible client, and — where the VIP lists its
//! ports ([`Vip`]) — to one of those ports. Anything else is dropped with a
//! [`DropReason`] the daemon counts.
//!
//! All parsing is `wire`'s, the same code that built the tunnels.

#[cfg(feature = "daemon")]
pub mod daemon;

use std::fmt;
use std::net::{IpAddr, Ipv6Addr};
use std::str::FromStr;

pub use values::Prefix;
use wire::ethernet::ethertype;
use wire::geneve::{self, OptionIds};
use wire::gre::{self, GreRepr};
use wire::gue::GueRepr;
use wire::ip::proto;
use wire::ipv4;
use wire::packet::{IpVersion, parse_ip};

/// Why a received datagram or packet was not delivered. Each has a counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum DropReason {
    /// The outer source is not an allowed balancer address.
    #[error("the outer source is not an allowed balancer address")]
    SourceNotAllowed,
    /// The tunnel (or outer IPv4) header is malformed or of an unknown version.
    #[error("malformed tunnel header")]
    Malformed,
    /// The tunnel carries something other than an IP packet (GENEVE Ethernet,
    /// a GUE control message, GRE with another protocol).
    #[error("the tunnel does not carry an IP packet")]
    NotIp,
    /// A GENEVE OAM (control) packet: not data for the host (RFC 8926 §3.4).
    #[error("GENEVE OAM packet")]
    GeneveOam,
    /// A GENEVE option with the critical bit set that this decapsulator does
    /// not understand: RFC 8926 §3.5.1 requires dropping the packet.
    #[error("GENEVE critical option not understood")]
    GeneveCriticalOption,
    /// The inner packet is not a well-formed IP packet (bad header, header
    /// checksum, length, or not the IP version the tunnel announced).
    #[error("malformed inner IP packet")]
    MalformedInner,
    /// The inner destination is not one of the backend's VIPs.
    #[error("the inner destination is not a VIP of this backend")]
    InnerDstNotOwned,
    /// The inner source cannot be a client: unspecified, loopback, multicast,
    /// broadcast, link-local, IPv4-mapped, one of the backend's own VIPs, or
    /// an allowed balancer address (which a spoofing client would pose as).
    #[error("the inner source cannot be a client")]
    InnerSrcRefused,
    /// The inner packet is itself a tunnel packet (IP-in-IP, GRE, or UDP to
    /// one of this decapsulator's tunnel ports): a balancer never sends one,
    /// and unwrapped it could reach a port no forwarding rule lists.
    #[error("the inner packet is a tunnel packet")]
    NestedTunnel,
    /// The inner packet is to a VIP whose `--vip` lists its protocols and
    /// ports, and its protocol or port is not among them (for an ICMP
    /// error: the port of the server's packet it quotes).
    #[error("the inner packet's protocol or port is not one its VIP lists")]
    PortNotAllowed,
    /// Writing to the TUN device failed (the daemon's, never [`decide`]'s).
    #[error("writing to the TUN device failed")]
    TunWriteFailed,
}

impl DropReason {
    /// Every reason, in the order the counters are printed.
    pub const ALL: [DropReason; 11] = [
        DropReason::SourceNotAllowed,
        DropReason::Malformed,
        DropReason::NotIp,
        DropReason::GeneveOam,
        DropReason::GeneveCriticalOption,
        DropReason::MalformedInner,
        DropReason::InnerDstNotOwned,
        DropReason::InnerSrcRefused,
        DropReason::NestedTunnel,
        DropReason::PortNotAllowed,
        DropReason::TunWriteFailed,
    ];

    /// The counter's name.
    pub const fn name(self) -> &'static str {
        match self {
            DropReason::SourceNotAllowed => "source_not_allowed",
            DropReason::Malformed => "malformed",
            DropReason::NotIp => "not_ip",
            DropReason::GeneveOam => "geneve_oam",
            DropReason::GeneveCriticalOption => "geneve_critical_option",
            DropReason::MalformedInner => "malformed_inner",
            DropReason::InnerDstNotOwned => "inner_dst_not_owned",
            DropReason::InnerSrcRefused => "inner_src_refused",
            DropReason::NestedTunnel => "nested_tunnel",
            DropReason::PortNotAllowed => "port_not_allowed",
            DropReason::TunWriteFailed => "tun_write_failed",
        }
    }

    /// Position in [`DropReason::ALL`].
    pub const fn index(self) -> usize {
        self as usize
    }
}

/// Ports of one protocol a VIP takes: `first..=last`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ports {
    /// IP protocol: TCP or UDP.
    pub proto: u8,
    /// First port.
    pub first: u16,
    /// Last port (`first` for a single one).
    pub last: u16,
}

/// A VIP this backend serves (`--vip`): an address or prefix, and the
/// protocols and ports its servers listen on, or `None` for every one.
///
/// Written `ADDR[/LEN]` (every protocol and port), or with a port list
/// after a colon: `192.0.2.10:tcp/80,443,udp/53`, `[2001:db8::10]:tcp/80`,
/// `192.0.2.0/24:tcp/8000-8099` — each `tcp/` or `udp/` starts the ports of
/// that protocol; a port is `N` or `N-M`.
///
/// With a list, an inner packet to the VIP must be TCP or UDP to a listed
/// port of its protocol. Two exceptions, both needing the protocol listed:
/// a later IPv4/IPv6 fragment, which carries no port (the kernel reassembles
/// it only with its first fragment, which does and is checked: without it
/// the fragments expire unread); and an ICMP or ICMPv6 error quoting a
/// packet the server sent from a listed port (path-MTU discovery of the
/// server's replies, which go to clients directly). Every other ICMP
/// message, and every other protocol, is dropped.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Vip {
    /// The address or prefix.
    pub prefix: Prefix,
    /// What it takes; `None`: everything.
    pub ports: Option<Vec<Ports>>,
}

impl Vip {
    /// A VIP taking every protocol and port.
    pub fn any_port(prefix: Prefix) -> Vip {
        Vip {
            prefix,
            ports: None,
        }
    }

    /// Whether this VIP's list takes `proto` at `port` (`None`: the port
    /// is not known, a later fragment: the protocol must be listed).
    fn takes(&self, proto: u8, port: Option<u16>) -> bool {
        let Some(list) = &self.ports else {
            return true;
        };
        list.iter()
            .any(|p| p.proto == proto && port.is_none_or(|port| (p.first..=p.last).contains(&port)))
    }
}

impl FromStr for Vip {
    type Err = String;

    fn from_str(s: &str) -> Result<Vip, String> {
        // `[v6[/len]][:spec]`, `v4[/len][:spec]`, or a bare IPv6 prefix
        // (its colons are its own: no spec without brackets).
        let (addr, spec) = if let Some(rest) = s.strip_prefix('[') {
            let (a, tail) = rest
                .split_once(']')
                .ok_or_else(|| format!("{s:?}: missing ]"))?;
            let spec = match tail {
                "" => None,
                t => Some(t.strip_prefix(':').ok_or_else(|| {
                    format!("{s:?}: expected :PORTS after the ], e.g. [2001:db8::10]:tcp/80,443")
                })?),
            };
            (a, spec)
        } else {
            match s.split_once(':') {
                Some((a, spec)) if a.parse::<Prefix>().is_ok_and(|p| p.addr.is_ipv4()) => {
                    (a, Some(spec))
                }
                _ => (s, None),
            }
        };
        let prefix = Prefix::parse_network(addr)?;
        let ports = spec.map(|spec| parse_ports(s, spec)).transpose()?;
        Ok(Vip { prefix, ports })
    }
}

/// `tcp/80,443,udp/53`: each `PROTO/` starts that protocol's ports.
fn parse_ports(whole: &str, spec: &str) -> Result<Vec<Ports>, String> {
    let usage = "write PROTO/PORT[,PORT…] (PROTO tcp or udp, a port N or N-M), e.g. 192.0.2.10:tcp/80,443,udp/53";
    let mut out = Vec::new();
    let mut proto = None;
    for item in spec.split(',') {
        let port = match item.split_once('/') {
            Some((p, port)) => {
                proto = Some(match p {
                    "tcp" => wire::ip::proto::TCP,
                    "udp" => wire::ip::proto::UDP,
                    _ => return Err(format!("{whole:?}: {p:?} is not tcp or udp; {usage}")),
                });
                port
            }
            None => item,
        };
        let Some(proto) = proto else {
            return Err(format!("{whole:?}: a port before any protocol; {usage}"));
        };
        let num = |n: &str| -> Result<u16, String> {
            match n.parse::<u16>() {
                Ok(p) if p != 0 => Ok(p),
                _ => Err(format!("{whole:?}: {n:?} is not a port (1-65535); {usage}")),
            }
        };
        let (first, last) = match port.split_once('-') {
            Some((a, b)) => (num(a)?, num(b)?),
            None => (num(port)?, num(port)?),
        };
        if first > last {
            return Err(format!("{whole:?}: the range {port} is backwards"));
        }
        out.push(Ports { proto, first, last });
    }
    Ok(out)
}

impl fmt::Display for Vip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(list) = &self.ports else {
            return write!(f, "{}", self.prefix);
        };
        if self.prefix.addr.is_ipv6() {
            write!(f, "[{}]:", self.prefix)?;
        } else {
            write!(f, "{}:", self.prefix)?;
        }
        let mut last_proto = None;
        for (i, p) in list.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            if last_proto != Some(p.proto) {
                f.write_str(if p.proto == wire::ip::proto::TCP {
                    "tcp/"
                } else {
                    "udp/"
                })?;
                last_proto = Some(p.proto);
            }
            if p.first == p.last {
                write!(f, "{}", p.first)?;
            } else {
                write!(f, "{}-{}", p.first, p.last)?;
            }
        }
        Ok(())
    }
}

/// What the decapsulator accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// Outer sources tunnels are accepted from (the balancers' tunnel
    /// addresses); `None`: any source (`--allow-any`).
    pub sources: Option<Vec<Prefix>>,
    /// Inner destinations this backend owns (its VIPs), with the ports
    /// each takes.
    pub vips: Vec<Vip>,
    /// Class and types of Spillway's GENEVE options: the only options this
    /// decapsulator understands (and so the only critical ones it accepts).
    pub geneve_ids: OptionIds,
    /// UDP ports this decapsulator takes tunnels on (GUE, GENEVE): an inner
    /// packet to one of them is a nested tunnel.
    pub tunnel_ports: Vec<u16>,
}

impl Policy {
    /// Whether tunnels from `src` are accepted (an IPv4-mapped IPv6 address
    /// is not an IPv4 address here: the caller canonicalises what a
    /// dual-stack socket reports, never what an IPv6 packet claims).
    pub fn source_allowed(&self, src: IpAddr) -> bool {
        self.sources.is_none() || self.is_balancer(src)
    }

    /// Whether `a` is in the `--allow-source` list (never under
    /// `--allow-any`, which names no balancer).
    pub fn is_balancer(&self, a: IpAddr) -> bool {
        self.sources
            .as_ref()
            .is_some_and(|list| list.iter().any(|p| p.contains(a)))
    }

    /// Whether `dst` is one of this backend's VIPs.
    pub fn owns(&self, dst: IpAddr) -> bool {
        self.vips.iter().any(|v| v.prefix.contains(dst))
    }

    /// Whether a VIP that `dst` lies in takes `proto` at `port` (`None`: a
    /// later fragment, whose port is not known: its protocol must be
    /// listed). Several `--vip` of one address add up.
    pub fn takes(&self, dst: IpAddr, proto: u8, port: Option<u16>) -> bool {
        self.vips
            .iter()
            .any(|v| v.prefix.contains(dst) && v.takes(proto, port))
    }

    /// Whether a VIP that `dst` lies in takes everything (lists no ports).
    pub fn takes_all(&self, dst: IpAddr) -> bool {
        self.vips
            .iter()
            .any(|v| v.prefix.contains(dst) && v.ports.is_none())
    }
}

/// The tunnel a packet came in, as the socket that received it tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Carrier {
    /// GUE over UDP: the bytes are the UDP payload.
    Gue,
    /// GENEVE over UDP: the bytes are the UDP payload.
    Geneve,
    /// IP in IP (IP protocol 4 for an IPv4 inner packet, 41 for IPv6): the
    /// bytes are the outer IP payload, i.e. the inner packet.
    IpInIp {
        /// The outer protocol announces an IPv6 inner packet (41).
        inner_v6: bool,
    },
    /// GRE: the bytes are the outer IP payload.
    Gre,
}

/// Decides about one tunnel packet: `src` is its outer source address,
/// `payload` what follows the outer IP header (for GUE and GENEVE, what
/// follows the UDP header). Returns the inner IP packet to hand to the kernel,
/// or why not.
///
/// The outer source is checked first: packets from anywhere else are not
/// even parsed.
pub fn decide<'a>(
    policy: &Policy,
    src: IpAddr,
    carrier: Carrier,
    payload: &'a [u8],
) -> Result<&'a [u8], DropReason> {
    if !policy.source_allowed(src) {
        return Err(DropReason::SourceNotAllowed);
    }
    let (inner, want_v6) = match carrier {
        Carrier::Gue => gue_inner(payload)?,
        Carrier::Geneve => geneve_inner(&policy.geneve_ids, payload)?,
        Carrier::IpInIp { inner_v6 } => (payload, inner_v6),
        Carrier::Gre => gre_inner(payload)?,
    };
    checked_inner(policy, inner, want_v6)
}

/// [`decide`] for what a raw IPv4 socket delivers: the outer IPv4 header
/// (whose source and protocol are used), then the tunnel.
pub fn decide_ipv4<'a>(policy: &Policy, packet: &'a [u8]) -> Result<&'a [u8], DropReason> {
    let p = ipv4::Packet::new_checked(packet).map_err(|_| DropReason::Malformed)?;
    if !policy.source_allowed(IpAddr::V4(p.src())) {
        return Err(DropReason::SourceNotAllowed);
    }
    if !p.verify_checksum() {
        return Err(DropReason::Malformed);
    }
    let carrier = match p.protocol() {
        proto::IPIP => Carrier::IpInIp { inner_v6: false },
        proto::IPV6 => Carrier::IpInIp { inner_v6: true },
        proto::GRE => Carrier::Gre,
        _ => return Err(DropReason::Malformed),
    };
    let payload = packet
        .get(p.header_len()..usize::from(p.total_len()))
        .ok_or(DropReason::Malformed)?;
    decide(policy, IpAddr::V4(p.src()), carrier, payload)
}

/// GUE variant 1 (the payload is the IP packet, as Spillway sends) or
/// variant 0 with a header carrying protocol 4 or 41.
fn gue_inner(payload: &[u8]) -> Result<(&[u8], bool), DropReason> {
    match GueRepr::parse(payload).map_err(|_| DropReason::Malformed)? {
        GueRepr::DirectIp { ipv6 } => Ok((payload, ipv6)),
        r @ GueRepr::Header {
            control: false,
            proto: p @ (proto::IPIP | proto::IPV6),
            ..
        } => Ok((
            payload.get(r.header_len()..).ok_or(DropReason::Malformed)?,
            p == proto::IPV6,
        )),
        GueRepr::Header { .. } => Err(DropReason::NotIp),
    }
}

/// GENEVE per RFC 8926: version 0 only; OAM packets are not data; every
/// option is looked at (whatever the C bit says, which only announces
/// critical ones), Spillway's own must have their length and any other
/// critical option drops the packet; non-critical unknown options are
/// skipped.
fn geneve_inner<'a>(ids: &OptionIds, payload: &'a [u8]) -> Result<(&'a [u8], bool), DropReason> {
    let p = geneve::Packet::new_checked(payload).map_err(|_| DropReason::Malformed)?;
    if p.version() != 0 {
        return Err(DropReason::Malformed);
    }
    if p.oam() {
        return Err(DropReason::GeneveOam);
    }
    for o in p.option_iter() {
        let o = o.map_err(|_| DropReason::Malformed)?;
        let len = if o.class != ids.class {
            None
        } else if o.opt_type == ids.endpoint_type {
            Some(8)
        } else if o.opt_type == ids.cookie_type {
            Some(4)
        } else {
            None
        };
        match len {
            Some(n) if o.data.len() != n => return Err(DropReason::Malformed),
            Some(_) => {}
            None if o.is_critical() => return Err(DropReason::GeneveCriticalOption),
            None => {}
        }
    }
    let v6 = match p.protocol() {
        ethertype::IPV4 => false,
        ethertype::IPV6 => true,
        _ => return Err(DropReason::NotIp),
    };
    Ok((
        payload.get(p.header_len()..).ok_or(DropReason::Malformed)?,
        v6,
    ))
}

fn gre_inner(payload: &[u8]) -> Result<(&[u8], bool), DropReason> {
    let g = gre::Packet::new_checked(payload)
        .and_then(|p| GreRepr::parse(&p))
        .map_err(|_| DropReason::Malformed)?;
    let v6 = match g.protocol {
        ethertype::IPV4 => false,
        ethertype::IPV6 => true,
        _ => return Err(DropReason::NotIp),
    };
    Ok((
        payload.get(g.header_len()..).ok_or(DropReason::Malformed)?,
        v6,
    ))
}

/// The inner packet must be one whole, well-formed IP packet of the version
/// the tunnel announced (nothing after it: a tunnel has no trailer), to a VIP,
/// from an address a client can have.
fn checked_inner<'a>(
    policy: &Policy,
    inner: &'a [u8],
    want_v6: bool,
) -> Result<&'a [u8], DropReason> {
    let info = parse_ip(inner).map_err(|_| DropReason::MalformedInner)?;
    let v6 = info.version == IpVersion::V6;
    if v6 != want_v6 || info.l3_len as usize != inner.len() {
        return Err(DropReason::MalformedInner);
    }
    // The kernel would drop a bad header checksum too, but silently.
    if !v6 && !ipv4::Packet::new_unchecked(inner).verify_checksum() {
        return Err(DropReason::MalformedInner);
    }
    let addr = |a: [u8; 16]| {
        let a = Ipv6Addr::from(a);
        match (v6, a.to_ipv4_mapped()) {
            (false, Some(v4)) => IpAddr::V4(v4),
            _ => IpAddr::V6(a),
        }
    };
    if !policy.owns(addr(info.dst)) {
        return Err(DropReason::InnerDstNotOwned);
    }
    if !client_source(policy, addr(info.src)) {
        return Err(DropReason::InnerSrcRefused);
    }
    if !port_allowed(policy, addr(info.dst), &info) {
        return Err(DropReason::PortNotAllowed);
    }
    // A tunnel inside the tunnel: unwrapped, it would come back to this
    // decapsulator's sockets (which listen on the VIPs too) as if a
    // balancer had sent it, and its inner packet could reach any port.
    let nested = match info.proto {
        proto::IPIP | proto::IPV6 | proto::GRE => true,
        proto::UDP => info
            .ports
            .is_some_and(|(_, dport)| policy.tunnel_ports.contains(&dport)),
        _ => false,
    };
    // (A fragmented one is caught by its first fragment, which carries the
    // port: without it the kernel never reassembles the rest.)
    if nested {
        return Err(DropReason::NestedTunnel);
    }
    Ok(inner)
}

/// Whether the VIP `dst` takes the inner packet `info` by its port lists
/// (see [`Vip`]): TCP or UDP to a listed port; a later fragment of a listed
/// protocol; an ICMP error quoting a packet the server sent from a listed
/// port (its source port: the server's reply from the VIP).
fn port_allowed(policy: &Policy, dst: IpAddr, info: &wire::packet::PacketInfo) -> bool {
    use wire::ip::proto::{ICMP, ICMPV6, TCP, UDP};
    use wire::packet::Fragment;
    match info.proto {
        TCP | UDP => match (info.ports, info.fragment) {
            (Some((_, dport)), _) => policy.takes(dst, info.proto, Some(dport)),
            (None, Fragment::Later { .. }) => policy.takes(dst, info.proto, None),
            (None, _) => false,
        },
        ICMP | ICMPV6 => match info.icmp.and_then(|i| i.quoted) {
            Some(q) if matches!(q.proto, TCP | UDP) => {
                policy.takes(dst, q.proto, q.ports.map(|(sport, _)| sport))
            }
            // Not an error (an echo request, say), or a later fragment:
            // only a VIP without a list takes it.
            _ => policy.takes_all(dst),
        },
        _ => policy.takes_all(dst),
    }
}

/// Whether a packet from `src` can come from a client through a balancer.
/// These sources are refused because they would let a tunnel packet pose as
/// the host itself (loopback, its own VIPs: services trusting local peers),
/// reach group or link scope (multicast, broadcast, link-local), or are
/// invalid on the wire; the kernel drops several of them as martians, but
/// only depending on sysctls (`accept_local`, `route_localnet`) and without
/// telling this daemon's counters.
pub fn client_source(policy: &Policy, src: IpAddr) -> bool {
    // A balancer's own address: what a client would spoof to be trusted as
    // the balancer (its health checks, say) or to reach the tunnel sockets.
    if policy.is_balancer(src) {
        return false;
    }
    let bogus = match src {
        IpAddr::V4(a) => {
            a.octets()[0] == 0 // "this network", 0.0.0.0/8
                || a.is_loopback()
                || a.is_multicast()
                || a.is_broadcast()
                || a.is_link_local()
        }
        IpAddr::V6(a) => {
            a.is_unspecified()
                || a.is_loopback()
                || a.is_multicast()
                || a.is_unicast_link_local()
                || a.to_ipv4_mapped().is_some()
        }
    };
    !bogus && !policy.owns(src)
}

#[cfg(test)]
mod tests;
