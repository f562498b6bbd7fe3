//! One-pass classification of a received frame: the facts the pipeline needs to pick a rule,
//! build a flow key and encapsulate, without re-parsing.

use crate::arp::{self, ArpRepr};
use crate::error::ParseError;
use crate::ethernet::{EthernetRepr, ethertype};
use crate::ip::{mapped_v4, proto};
use crate::tcp::Flags;
use crate::{icmpv4, icmpv6, ipv4, ipv6, need, rd16};

/// IP version of a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IpVersion {
    /// IPv4.
    V4,
    /// IPv6.
    V6,
}

/// Fragment state of an IP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fragment {
    /// Not a fragment.
    No,
    /// The first fragment (offset 0, more fragments follow): ports are present.
    First {
        /// Datagram identification.
        ident: u32,
    },
    /// A later fragment: no upper-layer header.
    Later {
        /// Datagram identification.
        ident: u32,
    },
    /// An IPv6 atomic fragment (fragment header with offset 0 and M = 0,
    /// RFC 6946): a whole packet that happens to carry a fragment header. It
    /// is processed as an unfragmented packet, ports included.
    Atomic {
        /// Datagram identification.
        ident: u32,
    },
}

impl Fragment {
    /// Whether the packet is a real fragment (first or later) of a larger
    /// datagram; an atomic fragment is not.
    pub const fn is_fragment(&self) -> bool {
        matches!(self, Fragment::First { .. } | Fragment::Later { .. })
    }

    /// Whether the packet carries fragmentation at all (a real or an atomic
    /// fragment): what RFC 6980 forbids for neighbor discovery.
    pub const fn has_fragment_header(&self) -> bool {
        !matches!(self, Fragment::No)
    }
}

/// The flow an ICMP error refers to, as quoted (i.e. in the direction of the offending
/// packet, which for a balancer is usually VIP → client).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QuotedFlow {
    /// Source of the quoted packet (IPv4-mapped if IPv4).
    pub src: [u8; 16],
    /// Destination of the quoted packet.
    pub dst: [u8; 16],
    /// Upper-layer protocol of the quoted packet.
    pub proto: u8,
    /// Ports (source, destination) if the quoted packet carried a TCP/UDP header start.
    pub ports: Option<(u16, u16)>,
    /// Whether the quoted packet was a real fragment (an IPv6 atomic fragment
    /// is whole and does not count).
    pub fragment: bool,
}

/// ICMP / ICMPv6 facts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IcmpInfo {
    /// Message type.
    pub msg_type: u8,
    /// Code.
    pub code: u8,
    /// The rest-of-header word (MTU for "frag needed" / "packet too big", echo id/seq…).
    pub rest: u32,
    /// The quoted flow for error messages (None for informational messages).
    pub quoted: Option<QuotedFlow>,
}

/// What the pipeline needs to know about an IP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PacketInfo {
    /// Offset of the IP header from the start of the parsed buffer.
    pub l3_offset: u32,
    /// IP total length (IPv4 total length, or 40 + IPv6 payload length).
    pub l3_len: u32,
    /// IP version.
    pub version: IpVersion,
    /// Source address (IPv4-mapped if IPv4).
    pub src: [u8; 16],
    /// Destination address (IPv4-mapped if IPv4).
    pub dst: [u8; 16],
    /// Upper-layer protocol (after IPv6 extension headers).
    pub proto: u8,
    /// Offset of the upper-layer header from the start of the parsed buffer.
    pub l4_offset: u32,
    /// TTL / hop limit.
    pub ttl: u8,
    /// Fragment state.
    pub fragment: Fragment,
    /// Source and destination ports (TCP and UDP, unless a later fragment).
    pub ports: Option<(u16, u16)>,
    /// TCP flags (empty for other protocols).
    pub tcp_flags: Flags,
    /// ESP SPI, if ESP and not a later fragment.
    pub spi: Option<u32>,
    /// ICMP facts, if ICMP / ICMPv6 and not a later fragment.
    pub icmp: Option<IcmpInfo>,
    /// The source route the packet carries, if any: an IPv4 loose or strict source route
    /// option, or an IPv6 routing header.
    pub source_route: Option<SourceRoute>,
}

/// A source route in a packet's IP header (what a receiver is asked to forward it on by).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SourceRoute {
    /// An IPv4 loose or strict source route option: its type ([`ipv4::option::LSRR`],
    /// [`ipv4::option::SSRR`]).
    V4(u8),
    /// An IPv6 routing header.
    V6 {
        /// Its routing type ([`ipv6::routing`]).
        routing_type: u8,
        /// Its segments left.
        segments_left: u8,
        /// Its offset from the start of the parsed buffer.
        offset: u32,
        /// Its length in bytes.
        len: u32,
    },
}

/// A classified Ethernet frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Frame {
    /// IPv4 or IPv6.
    Ip(EthernetRepr, PacketInfo),
    /// Ethernet/IPv4 ARP.
    Arp(EthernetRepr, ArpRepr),
    /// Any other EtherType (the payload starts at `header_len()`).
    Other(EthernetRepr),
}

/// Classifies a frame starting at its Ethernet header.
pub fn parse_frame(frame: &[u8]) -> Result<Frame, ParseError> {
    let eth = EthernetRepr::parse(frame)?;
    let off = eth.header_len();
    let rest = frame.get(off..).ok_or(ParseError::Truncated)?;
    match eth.ethertype {
        ethertype::IPV4 => Ok(Frame::Ip(eth, parse_v4(rest, crate::cast::len32(off))?)),
        ethertype::IPV6 => Ok(Frame::Ip(eth, parse_v6(rest, crate::cast::len32(off))?)),
        ethertype::ARP => {
            let a = ArpRepr::parse(&arp::Packet::new_checked(rest)?)?;
            Ok(Frame::Arp(eth, a))
        }
        _ => Ok(Frame::Other(eth)),
    }
}

/// The facts of the packet the data plane sees most: an untagged Ethernet frame carrying
/// an IPv4 header without options and a whole (unfragmented) TCP segment or UDP datagram.
/// Addresses are host-order integers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct V4Flow {
    /// Source address.
    pub src: u32,
    /// Destination address.
    pub dst: u32,
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// [`proto::TCP`] or [`proto::UDP`].
    pub proto: u8,
    /// DS field (DSCP and ECN).
    pub ds: u8,
    /// IPv4 total length.
    pub total_len: u16,
    /// TCP flags (empty for UDP).
    pub tcp_flags: Flags,
    /// Time to live.
    pub ttl: u8,
}

/// Length of the Ethernet + IPv4 headers [`parse_v4_flow`] accepts.
pub const V4_FLOW_L3_END: usize = 34;

/// The fast path of [`parse_frame`]: `Some` for exactly the frames described at
/// [`V4Flow`] that `parse_frame` accepts (with the same facts), `None` for every other
/// frame — which the caller then gives to `parse_frame`. Reads fixed offsets under one
/// length check instead of building a [`PacketInfo`].
#[inline(always)]
pub fn parse_v4_flow(frame: &[u8]) -> Option<V4Flow> {
    let h: &[u8; 42] = frame.first_chunk()?;
    let be16 = |i: usize| u16::from_be_bytes([h[i], h[i + 1]]);
    // EtherType IPv4, version 4 with a 20-byte header, not a fragment.
    if be16(12) != ethertype::IPV4 || h[14] != 0x45 || be16(20) & 0x3fff != 0 {
        return None;
    }
    let total_len = be16(16);
    let tl = usize::from(total_len);
    if tl > frame.len() - 14 {
        return None;
    }
    // The L4 header fits in the IP payload (which implies the minimum total lengths).
    let tcp_flags = match h[23] {
        proto::TCP => {
            let t: &[u8; 54] = frame.first_chunk()?;
            let hl = usize::from(t[46] >> 4) * 4;
            if hl < 20 || 20 + hl > tl {
                return None;
            }
            Flags(u16::from_be_bytes([t[46], t[47]]) & 0x01ff)
        }
        proto::UDP => {
            let ul = usize::from(be16(38));
            if ul < 8 || 20 + ul > tl {
                return None;
            }
            Flags::default()
        }
        _ => return None,
    };
    Some(V4Flow {
        src: u32::from_be_bytes([h[26], h[27], h[28], h[29]]),
        dst: u32::from_be_bytes([h[30], h[31], h[32], h[33]]),
        src_port: be16(34),
        dst_port: be16(36),
        proto: h[23],
        ds: h[15],
        total_len,
        tcp_flags,
        ttl: h[22],
    })
}

/// [`parse_v4_flow`] of a bare IPv4 packet (no link-layer header in front, such as a
/// tunnel's inner packet): `Some` for exactly the option-less, unfragmented IPv4 TCP/UDP
/// packets [`parse_ip`] accepts, with the same facts.
#[inline(always)]
pub fn parse_ip_v4_flow(ip: &[u8]) -> Option<V4Flow> {
    let h: &[u8; 28] = ip.first_chunk()?;
    let be16 = |i: usize| u16::from_be_bytes([h[i], h[i + 1]]);
    // Version 4 with a 20-byte header, not a fragment.
    if h[0] != 0x45 || be16(6) & 0x3fff != 0 {
        return None;
    }
    let total_len = be16(2);
    let tl = usize::from(total_len);
    if tl > ip.len() {
        return None;
    }
    // The L4 header fits in the IP payload (which implies the minimum total lengths).
    let tcp_flags = match h[9] {
        proto::TCP => {
            let t: &[u8; 40] = ip.first_chunk()?;
            let hl = usize::from(t[32] >> 4) * 4;
            if hl < 20 || 20 + hl > tl {
                return None;
            }
            Flags(u16::from_be_bytes([t[32], t[33]]) & 0x01ff)
        }
        proto::UDP => {
            let ul = usize::from(be16(24));
            if ul < 8 || 20 + ul > tl {
                return None;
            }
            Flags::default()
        }
        _ => return None,
    };
    Some(V4Flow {
        src: u32::from_be_bytes([h[12], h[13], h[14], h[15]]),
        dst: u32::from_be_bytes([h[16], h[17], h[18], h[19]]),
        src_port: be16(20),
        dst_port: be16(22),
        proto: h[9],
        ds: h[1],
        total_len,
        tcp_flags,
        ttl: h[8],
    })
}

/// The IPv6 counterpart of [`V4Flow`]: an untagged Ethernet frame carrying an IPv6 header
/// followed directly (no extension headers) by a TCP segment or UDP datagram, between
/// addresses that are not IPv4-mapped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct V6Flow {
    /// Source address.
    pub src: [u8; 16],
    /// Destination address.
    pub dst: [u8; 16],
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// [`proto::TCP`] or [`proto::UDP`].
    pub proto: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Payload length.
    pub payload_len: u16,
    /// TCP flags (empty for UDP).
    pub tcp_flags: Flags,
    /// Hop limit.
    pub hop_limit: u8,
}

/// The fast path of [`parse_frame`] for IPv6: `Some` for exactly the frames described at
/// [`V6Flow`] that `parse_frame` accepts (with the same facts), `None` for every other
/// frame. IPv4-mapped addresses are left to `parse_frame`'s caller, which treats them as
/// IPv4.
#[inline(always)]
pub fn parse_v6_flow(frame: &[u8]) -> Option<V6Flow> {
    const L4: usize = 54;
    let h: &[u8; 62] = frame.first_chunk()?;
    let be16 = |i: usize| u16::from_be_bytes([h[i], h[i + 1]]);
    if be16(12) != ethertype::IPV6 || h[14] >> 4 != 6 {
        return None;
    }
    let payload_len = be16(18);
    let pl = usize::from(payload_len);
    if pl > frame.len() - L4 {
        return None;
    }
    let tcp_flags = match h[20] {
        proto::TCP => {
            let t: &[u8; 74] = frame.first_chunk()?;
            let hl = usize::from(t[L4 + 12] >> 4) * 4;
            if hl < 20 || hl > pl {
                return None;
            }
            Flags(u16::from_be_bytes([t[L4 + 12], t[L4 + 13]]) & 0x01ff)
        }
        proto::UDP => {
            let ul = usize::from(be16(L4 + 4));
            if ul < 8 || ul > pl {
                return None;
            }
            Flags::default()
        }
        _ => return None,
    };
    let mut src = [0u8; 16];
    let mut dst = [0u8; 16];
    src.copy_from_slice(&h[22..38]);
    dst.copy_from_slice(&h[38..54]);
    if crate::ip::is_mapped_v4(&src) || crate::ip::is_mapped_v4(&dst) {
        return None;
    }
    Some(V6Flow {
        src,
        dst,
        src_port: be16(L4),
        dst_port: be16(L4 + 2),
        proto: h[20],
        traffic_class: (h[14] << 4) | (h[15] >> 4),
        payload_len,
        tcp_flags,
        hop_limit: h[21],
    })
}

/// Parses a bare IP packet (offsets are relative to `packet`). The buffer may be longer
/// than the IP length (link padding); the IP length must fit.
pub fn parse_ip(packet: &[u8]) -> Result<PacketInfo, ParseError> {
    need(packet, 1)?;
    match packet[0] >> 4 {
        4 => parse_v4(packet, 0),
        6 => parse_v6(packet, 0),
        _ => Err(ParseError::BadVersion),
    }
}

/// `b` starts at the IPv4 header, which is at `base` in the caller's buffer.
#[inline(always)]
fn parse_v4(b: &[u8], base: u32) -> Result<PacketInfo, ParseError> {
    let p = ipv4::Packet::new_checked(b)?;
    let hl = p.header_len();
    let tl = usize::from(p.total_len());
    let fragment = if !p.is_fragment() {
        Fragment::No
    } else if p.frag_offset() == 0 {
        Fragment::First {
            ident: u32::from(p.ident()),
        }
    } else {
        Fragment::Later {
            ident: u32::from(p.ident()),
        }
    };
    // Options are parsed only for what they ask of a receiver (RFC 791 §3.1).
    let source_route = if hl > ipv4::MIN_HEADER_LEN {
        ipv4::source_route(p.options())?.map(SourceRoute::V4)
    } else {
        None
    };
    let mut info = PacketInfo {
        l3_offset: base,
        l3_len: crate::cast::len32(tl),
        version: IpVersion::V4,
        src: mapped_v4(p.src_bytes()),
        dst: mapped_v4(p.dst_bytes()),
        proto: p.protocol(),
        l4_offset: base + crate::cast::len32(hl),
        ttl: p.ttl(),
        fragment,
        ports: None,
        tcp_flags: Flags::default(),
        spi: None,
        icmp: None,
        source_route,
    };
    if !matches!(fragment, Fragment::Later { .. }) {
        parse_l4(&mut info, &b[hl..tl], IpVersion::V4)?;
    }
    Ok(info)
}

/// `b` starts at the IPv6 header, which is at `base` in the caller's buffer.
#[inline(always)]
fn parse_v6(b: &[u8], base: u32) -> Result<PacketInfo, ParseError> {
    let p = ipv6::Packet::new_checked(b)?;
    let payload = p.payload();
    let walk = ipv6::walk_extensions(payload, p.next_header())?;
    let fragment = match walk.fragment {
        None => Fragment::No,
        Some(f) if f.is_atomic() => Fragment::Atomic { ident: f.ident },
        Some(f) if f.is_first() => Fragment::First { ident: f.ident },
        Some(f) => Fragment::Later { ident: f.ident },
    };
    let mut info = PacketInfo {
        l3_offset: base,
        l3_len: crate::cast::len32(ipv6::HEADER_LEN + payload.len()),
        version: IpVersion::V6,
        src: p.src_bytes(),
        dst: p.dst_bytes(),
        proto: walk.upper,
        l4_offset: base + crate::cast::len32(ipv6::HEADER_LEN + walk.offset),
        ttl: p.hop_limit(),
        fragment,
        ports: None,
        tcp_flags: Flags::default(),
        spi: None,
        icmp: None,
        source_route: walk.routing.map(|r| SourceRoute::V6 {
            routing_type: r.routing_type,
            segments_left: r.segments_left,
            offset: base + crate::cast::len32(ipv6::HEADER_LEN + r.offset),
            len: crate::cast::len32(r.len),
        }),
    };
    if !matches!(fragment, Fragment::Later { .. }) {
        let l4 = payload.get(walk.offset..).ok_or(ParseError::Truncated)?;
        parse_l4(&mut info, l4, IpVersion::V6)?;
    }
    Ok(info)
}

#[inline(always)]
fn parse_l4(info: &mut PacketInfo, l4: &[u8], v: IpVersion) -> Result<(), ParseError> {
    match (info.proto, v) {
        (proto::TCP, _) => {
            let t = crate::tcp::Packet::new_checked(l4)?;
            info.ports = Some((t.src_port(), t.dst_port()));
            info.tcp_flags = t.flags();
        }
        (proto::UDP, _) => {
            // A first fragment carries only part of the datagram its length field covers.
            // (A first fragment too short for the TCP/UDP header is an error: RFC 1858's
            // tiny-fragment attack; such packets are dropped.)
            let u = crate::udp::Packet::new_unchecked(l4);
            if info.fragment.is_fragment() {
                need(l4, crate::udp::HEADER_LEN)?;
            } else {
                u.check_len()?;
            }
            info.ports = Some((u.src_port(), u.dst_port()));
        }
        (proto::ESP, _) => {
            let e = crate::esp::Packet::new_checked(l4)?;
            info.spi = Some(e.spi());
        }
        (proto::ICMP, IpVersion::V4) => {
            let i = icmpv4::Packet::new_checked(l4)?;
            let quoted = if i.is_error() {
                Some(parse_quoted(i.data(), IpVersion::V4)?)
            } else {
                None
            };
            info.icmp = Some(IcmpInfo {
                msg_type: i.msg_type(),
                code: i.code(),
                rest: i.rest(),
                quoted,
            });
        }
        (proto::ICMPV6, IpVersion::V6) => {
            let i = icmpv6::Packet::new_checked(l4)?;
            let quoted = if i.is_error() {
                Some(parse_quoted(i.data(), IpVersion::V6)?)
            } else {
                None
            };
            info.icmp = Some(IcmpInfo {
                msg_type: i.msg_type(),
                code: i.code(),
                rest: i.rest(),
                quoted,
            });
        }
        _ => {}
    }
    Ok(())
}

/// Parses the packet quoted in an ICMP(v6) error: its IP header and, if present, the first
/// four bytes of its TCP/UDP header. The quoted packet is usually cut short, so its
/// length fields are not checked against the buffer.
pub fn parse_quoted(q: &[u8], v: IpVersion) -> Result<QuotedFlow, ParseError> {
    let (src, dst, upper, l4, fragment) = match v {
        IpVersion::V4 => {
            let p = ipv4::Packet::new_unchecked(q);
            p.check_header_len()?;
            let later = p.frag_offset() != 0;
            let l4 = if later { &[][..] } else { &q[p.header_len()..] };
            (
                mapped_v4(p.src_bytes()),
                mapped_v4(p.dst_bytes()),
                p.protocol(),
                l4,
                p.is_fragment(),
            )
        }
        IpVersion::V6 => {
            let p = ipv6::Packet::new_unchecked(q);
            p.check_header_len()?;
            let rest = &q[ipv6::HEADER_LEN..];
            let w = ipv6::walk_extensions(rest, p.next_header())?;
            let later = w.fragment.is_some_and(|f| !f.is_first());
            let l4 = if later {
                &[][..]
            } else {
                rest.get(w.offset..).ok_or(ParseError::Truncated)?
            };
            (
                p.src_bytes(),
                p.dst_bytes(),
                w.upper,
                l4,
                w.fragment.is_some_and(|f| !f.is_atomic()),
            )
        }
    };
    let ports = if matches!(upper, proto::TCP | proto::UDP) && l4.len() >= 4 {
        Some((rd16(l4, 0), rd16(l4, 2)))
    } else {
        None
    };
    Ok(QuotedFlow {
        src,
        dst,
        proto: upper,
        ports,
        fragment,
    })
}
