//! Test packets: Ethernet → IPv4/IPv6 → TCP/UDP/ICMP/raw, with right
//! checksums, IPv4 options, TCP options, VLAN tags, padding and fragments,
//! and tunnels built by `wire`'s own encapsulation.
//!
//! Headers are written with `wire`'s emitters (`Ipv4Repr::emit`,
//! `TcpRepr::emit`, `fill_checksum`, …), which `wire`'s tests check
//! against scapy; this kit's own tests check a few frames against scapy
//! too, so a builder bug cannot hide behind a parser bug.
//!
//! Every field has a plain default (TTL and hop limit 64, IPv4
//! identification 1 with DF, flow label 0, TCP seq 1, window 65535) and a
//! setter, so a test that compares bytes can reproduce any frame exactly.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use wire::buf::{MemBuf, PacketBuf};
use wire::encap::{Outer, Tunnel, UdpChecksum, encapsulate};
use wire::ethernet::{EthernetRepr, MAX_VLAN_TAGS, VlanTag, ethertype};
use wire::{icmpv4, icmpv6, ipv4, ipv6, tcp, udp};

pub use wire::ip::proto;

/// IP protocol numbers (also in [`proto`]).
pub const TCP: u8 = proto::TCP;
/// UDP.
pub const UDP: u8 = proto::UDP;
/// ICMP.
pub const ICMP: u8 = proto::ICMP;
/// ICMPv6.
pub const ICMPV6: u8 = proto::ICMPV6;
/// ESP.
pub const ESP: u8 = proto::ESP;
/// GRE.
pub const GRE: u8 = proto::GRE;

/// TCP flag bits (the low byte of the flags field).
pub const FIN: u8 = 0x01;
/// SYN.
pub const SYN: u8 = 0x02;
/// RST.
pub const RST: u8 = 0x04;
/// PSH.
pub const PSH: u8 = 0x08;
/// ACK.
pub const ACK: u8 = 0x10;
/// URG.
pub const URG: u8 = 0x20;

/// Default source MAC of built frames.
pub const SRC_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
/// Default destination MAC of built frames.
pub const DST_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];

/// An IPv4 address from text (panics on a typo: tests only).
pub fn v4(s: &str) -> IpAddr {
    IpAddr::V4(s.parse::<Ipv4Addr>().expect("IPv4 address"))
}

/// An IPv6 address from text.
pub fn v6(s: &str) -> IpAddr {
    IpAddr::V6(s.parse::<Ipv6Addr>().expect("IPv6 address"))
}

/// The upper layer of a [`Packet`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum L4 {
    /// A TCP segment.
    Tcp {
        /// Source port.
        sport: u16,
        /// Destination port.
        dport: u16,
        /// Sequence number.
        seq: u32,
        /// Acknowledgment number.
        ack: u32,
        /// Flags ([`SYN`], [`ACK`], …).
        flags: u8,
        /// Window.
        window: u16,
        /// Urgent pointer.
        urgent: u16,
        /// Raw options (a multiple of 4 bytes, at most 40).
        options: Vec<u8>,
        /// Whether the checksum is computed (false: sent as 0).
        checksum: bool,
    },
    /// A UDP datagram.
    Udp {
        /// Source port.
        sport: u16,
        /// Destination port.
        dport: u16,
        /// Whether the checksum is computed (false: sent as 0).
        checksum: bool,
    },
    /// An ICMP message (ICMPv6 when the addresses are IPv6): type, code,
    /// the rest-of-header word; the payload is its data.
    Icmp {
        /// Message type.
        msg_type: u8,
        /// Code.
        code: u8,
        /// Rest of the header (echo id/seq, MTU, …).
        rest: u32,
    },
    /// Any protocol: the payload is the whole upper layer, as given.
    Raw(u8),
}

/// A packet to build; see the crate documentation for examples.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet {
    /// Ethernet source.
    pub src_mac: [u8; 6],
    /// Ethernet destination.
    pub dst_mac: [u8; 6],
    /// VLAN tags `(tpid, tci)`, outermost first (at most two).
    pub vlans: Vec<(u16, u16)>,
    /// IP source (its family decides IPv4 or IPv6).
    pub src: IpAddr,
    /// IP destination (same family as `src`).
    pub dst: IpAddr,
    /// TTL or hop limit.
    pub ttl: u8,
    /// IPv4 identification (low 16 bits) or IPv6 fragment identification.
    pub ident: u32,
    /// IPv4 don't-fragment flag.
    pub dont_frag: bool,
    /// IPv4 DSCP/ECN byte or IPv6 traffic class.
    pub tos: u8,
    /// IPv6 flow label.
    pub flow_label: u32,
    /// Raw IPv4 options (a multiple of 4 bytes).
    pub ip_options: Vec<u8>,
    /// The upper layer.
    pub l4: L4,
    /// Upper-layer payload (after the TCP/UDP/ICMP header).
    pub payload: Vec<u8>,
    /// Frames shorter than this are padded with zeros (Ethernet padding; 0: none).
    pub min_frame: usize,
}

impl Packet {
    fn new(src: IpAddr, dst: IpAddr, l4: L4) -> Packet {
        assert_eq!(
            src.is_ipv4(),
            dst.is_ipv4(),
            "mixed address families: {src} -> {dst}"
        );
        Packet {
            src_mac: SRC_MAC,
            dst_mac: DST_MAC,
            vlans: Vec::new(),
            src,
            dst,
            ttl: 64,
            ident: 1,
            dont_frag: true,
            tos: 0,
            flow_label: 0,
            ip_options: Vec::new(),
            l4,
            payload: Vec::new(),
            min_frame: 0,
        }
    }

    /// A TCP segment with `flags`, seq 1, ack 0, window 65535.
    pub fn tcp(src: IpAddr, dst: IpAddr, sport: u16, dport: u16, flags: u8) -> Packet {
        Packet::new(
            src,
            dst,
            L4::Tcp {
                sport,
                dport,
                seq: 1,
                ack: 0,
                flags,
                window: 65535,
                urgent: 0,
                options: Vec::new(),
                checksum: true,
            },
        )
    }

    /// A UDP datagram with its checksum.
    pub fn udp(src: IpAddr, dst: IpAddr, sport: u16, dport: u16) -> Packet {
        Packet::new(
            src,
            dst,
            L4::Udp {
                sport,
                dport,
                checksum: true,
            },
        )
    }

    /// An ICMP (IPv4) or ICMPv6 (IPv6) message.
    pub fn icmp(src: IpAddr, dst: IpAddr, msg_type: u8, code: u8, rest: u32) -> Packet {
        Packet::new(
            src,
            dst,
            L4::Icmp {
                msg_type,
                code,
                rest,
            },
        )
    }

    /// An echo request (ICMP type 8 or ICMPv6 type 128).
    pub fn echo(src: IpAddr, dst: IpAddr, id: u16, seq: u16) -> Packet {
        let t = if src.is_ipv4() { 8 } else { 128 };
        Packet::icmp(src, dst, t, 0, (u32::from(id) << 16) | u32::from(seq))
    }

    /// Protocol `proto` whose whole upper layer is the payload.
    pub fn raw(src: IpAddr, dst: IpAddr, proto: u8) -> Packet {
        Packet::new(src, dst, L4::Raw(proto))
    }

    /// Sets the upper-layer payload.
    pub fn payload(mut self, data: &[u8]) -> Packet {
        self.payload = data.to_vec();
        self
    }
    /// Sets the Ethernet source and destination.
    pub fn macs(mut self, src: [u8; 6], dst: [u8; 6]) -> Packet {
        self.src_mac = src;
        self.dst_mac = dst;
        self
    }
    /// Adds a VLAN tag (inside those added before).
    pub fn vlan(mut self, tpid: u16, tci: u16) -> Packet {
        self.vlans.push((tpid, tci));
        self
    }
    /// Sets the TTL / hop limit.
    pub fn ttl(mut self, ttl: u8) -> Packet {
        self.ttl = ttl;
        self
    }
    /// Sets the IPv4 identification / IPv6 fragment identification.
    pub fn ident(mut self, ident: u32) -> Packet {
        self.ident = ident;
        self
    }
    /// Sets or clears IPv4 don't-fragment.
    pub fn dont_frag(mut self, df: bool) -> Packet {
        self.dont_frag = df;
        self
    }
    /// Sets the IPv4 DSCP/ECN byte or IPv6 traffic class.
    pub fn tos(mut self, tos: u8) -> Packet {
        self.tos = tos;
        self
    }
    /// Sets the IPv6 flow label.
    pub fn flow_label(mut self, label: u32) -> Packet {
        self.flow_label = label;
        self
    }
    /// Sets raw IPv4 options.
    pub fn ip_options(mut self, options: &[u8]) -> Packet {
        self.ip_options = options.to_vec();
        self
    }
    /// Pads the frame with zeros to at least `len` bytes (60: Ethernet's minimum).
    pub fn min_frame(mut self, len: usize) -> Packet {
        self.min_frame = len;
        self
    }

    fn tcp_field(mut self, f: impl FnOnce(&mut u32, &mut u32, &mut u16, &mut Vec<u8>)) -> Packet {
        match &mut self.l4 {
            L4::Tcp {
                seq,
                ack,
                window,
                options,
                ..
            } => f(seq, ack, window, options),
            other => panic!("not TCP: {other:?}"),
        }
        self
    }
    /// Sets the TCP sequence number.
    pub fn seq(self, v: u32) -> Packet {
        self.tcp_field(|s, _, _, _| *s = v)
    }
    /// Sets the TCP acknowledgment number.
    pub fn ack(self, v: u32) -> Packet {
        self.tcp_field(|_, a, _, _| *a = v)
    }
    /// Sets the TCP window.
    pub fn window(self, v: u16) -> Packet {
        self.tcp_field(|_, _, w, _| *w = v)
    }
    /// Sets raw TCP options (a multiple of 4 bytes).
    pub fn tcp_options(self, o: &[u8]) -> Packet {
        self.tcp_field(|_, _, _, opts| *opts = o.to_vec())
    }
    /// TCP only: `false` sends a zero checksum (frames whose receiver
    /// never checks it, kept as they were first written).
    pub fn tcp_checksum(mut self, on: bool) -> Packet {
        match &mut self.l4 {
            L4::Tcp { checksum, .. } => *checksum = on,
            other => panic!("not TCP: {other:?}"),
        }
        self
    }
    /// UDP only: `false` sends a zero checksum.
    pub fn udp_checksum(mut self, on: bool) -> Packet {
        match &mut self.l4 {
            L4::Udp { checksum, .. } => *checksum = on,
            other => panic!("not UDP: {other:?}"),
        }
        self
    }

    /// The IP protocol / next header of the upper layer.
    pub fn protocol(&self) -> u8 {
        match (&self.l4, self.src) {
            (L4::Tcp { .. }, _) => TCP,
            (L4::Udp { .. }, _) => UDP,
            (L4::Icmp { .. }, IpAddr::V4(_)) => ICMP,
            (L4::Icmp { .. }, IpAddr::V6(_)) => ICMPV6,
            (L4::Raw(p), _) => *p,
        }
    }

    /// The upper layer (header and payload) with its checksum over the
    /// whole datagram.
    pub fn l4_bytes(&self) -> Vec<u8> {
        let (src, dst) = (&self.src, &self.dst);
        match &self.l4 {
            L4::Tcp {
                sport,
                dport,
                seq,
                ack,
                flags,
                window,
                urgent,
                options,
                checksum,
            } => {
                let r = tcp::TcpRepr {
                    src_port: *sport,
                    dst_port: *dport,
                    seq: *seq,
                    ack: *ack,
                    flags: tcp::Flags(u16::from(*flags)),
                    window: *window,
                    urgent: *urgent,
                    options: ipv4::Options::new(options).expect("TCP options: 4n bytes, <= 40"),
                };
                let mut b = vec![0u8; r.header_len() + self.payload.len()];
                b[r.header_len()..].copy_from_slice(&self.payload);
                let mut p = tcp::Packet::new_unchecked(&mut b[..]);
                r.emit(&mut p).expect("TCP header");
                if *checksum {
                    p.fill_checksum(src, dst).expect("TCP checksum");
                }
                b
            }
            L4::Udp {
                sport,
                dport,
                checksum,
            } => {
                let r = udp::UdpRepr {
                    src_port: *sport,
                    dst_port: *dport,
                    payload_len: u16::try_from(self.payload.len()).expect("UDP payload length"),
                };
                let mut b = vec![0u8; 8 + self.payload.len()];
                b[8..].copy_from_slice(&self.payload);
                let mut p = udp::Packet::new_unchecked(&mut b[..]);
                r.emit(&mut p).expect("UDP header");
                if *checksum {
                    p.fill_checksum(src, dst).expect("UDP checksum");
                }
                b
            }
            L4::Icmp {
                msg_type,
                code,
                rest,
            } => {
                let mut b = vec![0u8; 8 + self.payload.len()];
                b[8..].copy_from_slice(&self.payload);
                match (src, dst) {
                    (IpAddr::V4(_), _) => icmpv4::Icmpv4Repr {
                        msg_type: *msg_type,
                        code: *code,
                        rest: *rest,
                    }
                    .emit(&mut icmpv4::Packet::new_unchecked(&mut b[..])),
                    (IpAddr::V6(s), IpAddr::V6(d)) => icmpv6::Icmpv6Repr {
                        msg_type: *msg_type,
                        code: *code,
                        rest: *rest,
                    }
                    .emit(&mut icmpv6::Packet::new_unchecked(&mut b[..]), s, d),
                    _ => unreachable!("families checked in Packet::new"),
                }
                .expect("ICMP header");
                b
            }
            L4::Raw(_) => self.payload.clone(),
        }
    }

    /// The IP packet (header, then [`Packet::l4_bytes`]).
    pub fn ip(&self) -> Vec<u8> {
        ip_packet(self, &self.l4_bytes(), 0, false, false)
    }

    /// The Ethernet frame.
    pub fn frame(&self) -> Vec<u8> {
        self.eth(&self.ip())
    }

    /// `ip` (any IP packet, e.g. a fragment) behind this packet's Ethernet
    /// header (MACs, VLAN tags), padded to `min_frame`.
    pub fn eth(&self, ip: &[u8]) -> Vec<u8> {
        let et = match ip.first().map(|b| b >> 4) {
            Some(6) => ethertype::IPV6,
            _ => ethertype::IPV4,
        };
        frame(
            self.src_mac,
            self.dst_mac,
            &self.vlans,
            et,
            ip,
            self.min_frame,
        )
    }

    /// The upper layer (checksum over the whole datagram) cut into IP
    /// fragments of `chunk` bytes (a multiple of 8), in offset order. IPv4
    /// fragments carry the low 16 bits of `ident` and no DF; IPv6 ones a
    /// fragment header with `ident`.
    pub fn ip_fragments(&self, chunk: usize) -> Vec<Vec<u8>> {
        assert!(
            chunk > 0 && chunk % 8 == 0,
            "fragment payloads are multiples of 8 bytes"
        );
        let l4 = self.l4_bytes();
        let n = l4.len().div_ceil(chunk).max(1);
        (0..n)
            .map(|i| {
                let off = i * chunk;
                let part = &l4[off..(off + chunk).min(l4.len())];
                ip_packet(self, part, off, i + 1 < n, true)
            })
            .collect()
    }

    /// [`Packet::ip_fragments`] as Ethernet frames.
    pub fn fragments(&self, chunk: usize) -> Vec<Vec<u8>> {
        self.ip_fragments(chunk)
            .iter()
            .map(|ip| self.eth(ip))
            .collect()
    }
}

/// The IP header of `p` around `l4`; `fragment`: a fragment at byte
/// `offset` (IPv6: with a fragment header).
fn ip_packet(p: &Packet, l4: &[u8], offset: usize, more: bool, fragment: bool) -> Vec<u8> {
    let protocol = p.protocol();
    match (p.src, p.dst) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => {
            let r = ipv4::Ipv4Repr {
                src,
                dst,
                protocol,
                payload_len: u16::try_from(l4.len()).expect("IPv4 payload length"),
                ttl: p.ttl,
                dscp_ecn: p.tos,
                ident: (p.ident & 0xffff) as u16,
                dont_frag: p.dont_frag && !fragment,
                more_frags: more,
                frag_offset: u16::try_from(offset).expect("fragment offset"),
                options: ipv4::Options::new(&p.ip_options).expect("IPv4 options: 4n bytes, <= 40"),
            };
            let hl = r.header_len();
            let mut b = vec![0u8; hl + l4.len()];
            b[hl..].copy_from_slice(l4);
            r.emit(&mut ipv4::Packet::new_unchecked(&mut b[..]))
                .expect("IPv4 header");
            b
        }
        (IpAddr::V6(src), IpAddr::V6(dst)) => {
            let fh = if fragment { 8 } else { 0 };
            let r = ipv6::Ipv6Repr {
                src,
                dst,
                next_header: if fragment { proto::IPV6_FRAG } else { protocol },
                payload_len: u16::try_from(fh + l4.len()).expect("IPv6 payload length"),
                hop_limit: p.ttl,
                traffic_class: p.tos,
                flow_label: p.flow_label,
            };
            let mut b = vec![0u8; 40 + fh + l4.len()];
            b[40 + fh..].copy_from_slice(l4);
            r.emit(&mut ipv6::Packet::new_unchecked(&mut b[..]))
                .expect("IPv6 header");
            if fragment {
                ipv6::FragmentRepr {
                    next_header: protocol,
                    offset: u16::try_from(offset).expect("fragment offset"),
                    more_frags: more,
                    ident: p.ident,
                }
                .emit(&mut b[40..48])
                .expect("fragment header");
            }
            b
        }
        _ => unreachable!("families checked in Packet::new"),
    }
}

/// An Ethernet frame: `src` → `dst`, VLAN tags `(tpid, tci)`, `ethertype`,
/// `payload`, zero-padded to `min_len`.
pub fn frame(
    src: [u8; 6],
    dst: [u8; 6],
    vlans: &[(u16, u16)],
    ethertype: u16,
    payload: &[u8],
    min_len: usize,
) -> Vec<u8> {
    assert!(vlans.len() <= MAX_VLAN_TAGS, "at most two VLAN tags");
    let mut e = EthernetRepr::untagged(dst, src, ethertype);
    for (i, &(tpid, tci)) in vlans.iter().enumerate() {
        e.vlans[i] = VlanTag { tpid, tci };
    }
    e.vlan_count = u8::try_from(vlans.len()).expect("at most two VLAN tags");
    let hl = e.header_len();
    let mut f = vec![0u8; (hl + payload.len()).max(min_len)];
    e.emit(&mut f).expect("Ethernet header");
    f[hl..hl + payload.len()].copy_from_slice(payload);
    f
}

/// The outer headers of a tunnel from `src` to `dst` (same family) with
/// plain defaults: MACs [`SRC_MAC`] → [`DST_MAC`], TTL 64, DF, flow hash
/// 42, source ports 49152–65535, UDP checksum as `wire` chooses. Change
/// fields as needed before [`encap`].
pub fn outer(src: IpAddr, dst: IpAddr) -> Outer {
    Outer {
        src_mac: SRC_MAC,
        dst_mac: DST_MAC,
        src_ip: src,
        dst_ip: dst,
        ttl: 64,
        dont_fragment: true,
        flow_hash: 42,
        src_port_min: 49152,
        src_port_max: 65535,
        udp_checksum: UdpChecksum::Auto,
    }
}

/// `frame` (an Ethernet frame) encapsulated by `wire` as the balancer
/// does: the whole outer frame, Ethernet header included.
pub fn encap(frame: &[u8], outer: &Outer, tunnel: &Tunnel) -> Vec<u8> {
    let mut buf = MemBuf::new(vec![0u8; 256 + frame.len()], 256, frame).expect("buffer fits");
    encapsulate(&mut buf, outer, tunnel).expect("encapsulate");
    buf.data().to_vec()
}

/// Adds `data` as big-endian 16-bit words to a one's-complement sum (an
/// odd last byte is the high byte of a word). Written apart from `wire`'s
/// checksum code on purpose: tests check `wire`'s outputs with it.
pub fn sum16(mut sum: u32, data: &[u8]) -> u32 {
    for c in data.chunks(2) {
        sum += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
    }
    sum
}

/// The Internet checksum (RFC 1071) of `data` on top of a partial sum:
/// 0 when `data` holds a right checksum.
pub fn csum(sum: u32, data: &[u8]) -> u16 {
    let mut sum = sum16(sum, data);
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !((sum & 0xffff) as u16)
}

/// The pseudo-header sum of TCP, UDP and ICMPv6 (IPv4 or IPv6 form) for an
/// upper layer of `len` bytes.
pub fn pseudo(src: IpAddr, dst: IpAddr, proto: u8, len: usize) -> u32 {
    let octets = |a: IpAddr| match a {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    };
    let s = sum16(sum16(0, &octets(src)), &octets(dst));
    let len = u32::try_from(len).expect("an upper layer under 4 GiB");
    s + u32::from(proto) + (len & 0xffff) + (len >> 16)
}

/// A broadcast ARP request from `sender_mac`/`sender` for `target` (target
/// hardware address zero), unpadded (42 bytes).
pub fn arp_request(sender_mac: [u8; 6], sender: Ipv4Addr, target: Ipv4Addr) -> Vec<u8> {
    let r = wire::arp::ArpRepr {
        oper: 1,
        sha: sender_mac,
        spa: sender,
        tha: [0; 6],
        tpa: target,
    };
    let mut body = vec![0u8; r.buffer_len()];
    r.emit(&mut wire::arp::Packet::new_unchecked(&mut body[..]))
        .expect("ARP message");
    frame(sender_mac, [0xff; 6], &[], ethertype::ARP, &body, 0)
}
