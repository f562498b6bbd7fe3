//! In-place encapsulation and decapsulation for every delivery mode of M8, and the
//! GENEVE return-path rewrite an NVA performs (M32).
//!
//! # Shape
//!
//! [`encapsulate`] takes a buffer holding a frame as received (Ethernet header, optional
//! VLAN tags, IPv4 or IPv6 packet, optional link padding), strips the link-layer header and
//! the padding, and prepends
//!
//! | mode | outer headers |
//! | --- | --- |
//! | `ipip` | Ethernet, IPv4/IPv6 (protocol 4 or 41) |
//! | `gre` | Ethernet, IP (47), GRE (protocol = inner EtherType, optional key) |
//! | `gue` | Ethernet, IP (17), UDP — variant 1: the inner IP packet follows directly |
//! | `geneve` | Ethernet, IP (17), UDP (dst 6081), GENEVE (protocol = inner EtherType, options) |
//!
//! Outer and inner families may differ (4-in-6 etc.). The outer IPv4 header gets a full
//! checksum, identification 0 and the DF bit as configured; the outer DS field copies the
//! inner one (RFC 6040 normal mode); an outer IPv6 flow label carries the flow hash
//! (RFC 6438). The outer UDP source port is taken from the flow hash within a configured
//! range, so NIC RSS and ECMP spread flows. UDP checksums follow [`UdpChecksum`].
//!
//! [`decapsulate`] is the inverse: it validates the outer headers (checksums, lengths,
//! tunnel kind), removes them, and prepends a link-layer header the caller supplies, so
//! `decapsulate(encapsulate(frame))` returns the original frame byte for byte (minus any
//! link padding). [`l2dsr_rewrite`] is the `l2dsr` mode: only MAC addresses change.

use core::net::{IpAddr, Ipv4Addr};

use crate::buf::PacketBuf;
use crate::error::{DecapError, EncapError, ParseError};
use crate::ethernet::{self, EthernetRepr, MacAddr, ethertype};
use crate::flow::port_in_span;
use crate::geneve::{self, GatewayOptions, GeneveRepr, OptionIds};
use crate::gre::{self, GreRepr};
use crate::gue::{self, GueRepr};
use crate::ip::proto;
use crate::ipv4;
use crate::ipv6::{self, Ipv6Repr};
use crate::udp;

/// Which checksum outer UDP headers of GUE/GENEVE get.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum UdpChecksum {
    /// Zero over IPv4 (RFC 768), computed over IPv6: a plain IPv6 receiver drops zero
    /// checksums unless configured per RFC 6935/6936.
    #[default]
    Auto,
    /// Always computed.
    Full,
    /// Zero over both families (RFC 6935 tunnels; the decapsulator must allow it).
    Zero,
}

/// The outer headers' fixed parts, shared by every tunnel mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Outer {
    /// Outer source MAC (this node's port).
    pub src_mac: MacAddr,
    /// Outer destination MAC (next hop or backend).
    pub dst_mac: MacAddr,
    /// Outer source IP (this node's tunnel address).
    pub src_ip: IpAddr,
    /// Outer destination IP (backend or NVA); must be of the same family as `src_ip`.
    pub dst_ip: IpAddr,
    /// Outer TTL / hop limit.
    pub ttl: u8,
    /// Outer IPv4 don't-fragment bit. The outer identification is always 0, which RFC 6864
    /// allows only for atomic datagrams: keep this set unless the path really needs
    /// fragmentation of tunnel packets.
    pub dont_fragment: bool,
    /// The flow hash: outer UDP source port and IPv6 flow label.
    pub flow_hash: u64,
    /// Lowest outer UDP source port (49152 by default).
    pub src_port_min: u16,
    /// Highest outer UDP source port (65535 by default).
    pub src_port_max: u16,
    /// UDP checksum policy.
    pub udp_checksum: UdpChecksum,
}

/// The tunnel of a delivery mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tunnel {
    /// IP-in-IP (4in4, 6in6, 4in6, 6in4).
    IpIp,
    /// GRE (RFC 2784) with an optional key (RFC 2890).
    Gre {
        /// Key.
        key: Option<u32>,
    },
    /// GUE variant 1 (direct IP) over UDP to `port`.
    Gue {
        /// UDP destination port of the decapsulator.
        port: u16,
    },
    /// GENEVE over UDP to `port` (6081) with Spillway's gateway options.
    Geneve {
        /// UDP destination port (6081).
        port: u16,
        /// VNI (0 per M30).
        vni: u32,
        /// Option class and types.
        ids: OptionIds,
        /// Endpoint ID and cookie.
        options: GatewayOptions,
    },
}

impl Tunnel {
    /// Bytes of tunnel headers between the outer IP header and the inner packet.
    pub const fn header_len(&self) -> usize {
        match self {
            Tunnel::IpIp => 0,
            Tunnel::Gre { key } => gre::MIN_HEADER_LEN + if key.is_some() { 4 } else { 0 },
            Tunnel::Gue { .. } => udp::HEADER_LEN,
            Tunnel::Geneve { options, .. } => {
                udp::HEADER_LEN + geneve::BASE_HEADER_LEN + options.wire_len()
            }
        }
    }
}

/// Default range of outer UDP source ports (the IANA ephemeral range).
pub const DEFAULT_SRC_PORTS: (u16, u16) = (49152, 65535);

/// Rewrites destination and source MAC of a frame in place (`l2dsr` delivery).
pub fn l2dsr_rewrite(frame: &mut [u8], dst: MacAddr, src: MacAddr) -> Result<(), ParseError> {
    let mut f = ethernet::Frame::new_checked(frame)?;
    f.set_dst(dst);
    f.set_src(src);
    Ok(())
}

/// Encapsulates the frame in `buf` in place (see the module docs). Returns the number of
/// outer header bytes now in front of the inner IP packet. On error the frame is unchanged.
///
/// The outer headers are those of the [`Template`] of `outer` and `tunnel`: one
/// implementation serves this call and the data plane's per-backend templates.
pub fn encapsulate<B: PacketBuf>(
    buf: &mut B,
    outer: &Outer,
    tunnel: &Tunnel,
) -> Result<usize, EncapError> {
    let inner = InnerIp::of(buf.data())?;
    let template = Template::new(outer, tunnel)?;
    let cookie = match tunnel {
        Tunnel::Geneve { options, .. } => options.cookie.unwrap_or(0),
        _ => 0,
    };
    encapsulate_with(buf, &template, &inner, outer.flow_hash, cookie)
}

/// The inner IP packet of a frame, as [`encapsulate_with`] needs it: what the caller's
/// parse already found out (the data plane's [`crate::packet::PacketInfo`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct InnerIp {
    /// Bytes of link-layer header (Ethernet and VLAN tags) before the IP header.
    pub l2_len: usize,
    /// IP total length (IPv4 total length, or 40 + IPv6 payload length).
    pub ip_len: usize,
    /// IPv6 rather than IPv4.
    pub v6: bool,
    /// DS field (IPv4 TOS byte, IPv6 traffic class).
    pub ds: u8,
}

impl InnerIp {
    /// Reads the facts from a frame (what [`encapsulate`] does).
    pub fn of(frame: &[u8]) -> Result<InnerIp, EncapError> {
        let eth = EthernetRepr::parse(frame)?;
        let l2_len = eth.header_len();
        let ip = frame.get(l2_len..).ok_or(ParseError::Truncated)?;
        let (ip_len, ds, v6) = match eth.ethertype {
            ethertype::IPV4 => {
                let p = ipv4::Packet::new_checked(ip)?;
                (usize::from(p.total_len()), p.dscp_ecn(), false)
            }
            ethertype::IPV6 => {
                let p = ipv6::Packet::new_checked(ip)?;
                let len = ipv6::HEADER_LEN + usize::from(p.payload_len());
                (len, p.traffic_class(), true)
            }
            _ => return Err(EncapError::NotIp),
        };
        Ok(InnerIp {
            l2_len,
            ip_len,
            v6,
            ds,
        })
    }

    /// The facts from a parse of `frame` ([`crate::packet::parse_frame`]'s `info`): no
    /// second parse, only the DS byte is read.
    #[inline]
    pub fn from_parsed(info: &crate::packet::PacketInfo, frame: &[u8]) -> InnerIp {
        let l3 = info.l3_offset as usize;
        let b = |i: usize| frame.get(l3 + i).copied().unwrap_or(0);
        let v6 = info.version == crate::packet::IpVersion::V6;
        InnerIp {
            l2_len: l3,
            ip_len: info.l3_len as usize,
            v6,
            ds: if v6 { (b(0) << 4) | (b(1) >> 4) } else { b(1) },
        }
    }
}

/// Longest GENEVE options a [`Template`] carries (endpoint ID and cookie).
const TEMPLATE_OPTIONS: usize = 20;
/// The options of a passthrough packet's GENEVE header: the flow cookie's option alone
/// (a 4-byte option header and the 4-byte cookie).
const COOKIE_ONLY: usize = 8;

/// The tunnel part of a [`Template`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
enum TemplateTunnel {
    IpIp,
    Gre {
        key: Option<u32>,
    },
    Gue {
        port: u16,
    },
    Geneve {
        port: u16,
        vni: u32,
        /// The options as emitted, the cookie's value (last, if any) overwritten per packet.
        options: [u8; TEMPLATE_OPTIONS],
        options_len: u8,
        cookie: bool,
        /// The options start with the gateway endpoint ID (M30), whose value
        /// [`encapsulate_with_endpoint`] overwrites per packet.
        endpoint: bool,
    },
}

/// The outer headers of one destination, computed once (when the data plane's snapshot is
/// built) so that each packet only copies them and fills in its own fields: [`encapsulate`]
/// minus the per-packet work that never changes; [`encapsulate`] itself builds one per
/// call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Template {
    /// Ethernet and IP header (34 bytes for IPv4, 54 for IPv6) with the per-packet fields
    /// zero: DS / traffic class, lengths, IPv4 checksum, IPv6 flow label, and for IP-in-IP
    /// the protocol. For UDP tunnels over IPv4, the UDP header follows (bytes 34..42) with
    /// its destination port filled in and the rest zero.
    head: [u8; 54],
    /// Over IPv4, a UDP tunnel (GUE, GENEVE) without UDP checksum: the usual case, whose
    /// Ethernet, IP and UDP headers are copied from `head` in one go.
    udp4: bool,
    /// IPv6 outer header.
    v6: bool,
    /// Ones'-complement sum of the IPv4 header words in `head`.
    sum: u32,
    /// Sum of the pseudo header's addresses, when the outer UDP header gets a checksum.
    udp_checksum: Option<u64>,
    tunnel: TemplateTunnel,
    /// Bytes of tunnel headers between the outer IP header and the inner packet.
    tunnel_len: u8,
    /// Offset of the tunnel headers (Ethernet + outer IP header).
    l4: u8,
    /// IP protocol of the outer header for an IPv4 / IPv6 inner packet where it depends on
    /// the inner packet (IP-in-IP); 0 where `head` already holds it.
    inner_proto: [u8; 2],
    /// Largest IP payload (tunnel headers and inner packet) the outer header can describe.
    max_payload: u16,
    src_port_min: u16,
    /// Size of the UDP source port range (`max - min + 1`), for [`port_in_span`].
    src_port_span: u32,
}

impl Template {
    /// The template of `outer` (its `flow_hash` is ignored) and `tunnel` (a GENEVE cookie's
    /// presence counts, not its value).
    pub fn new(outer: &Outer, tunnel: &Tunnel) -> Result<Template, EncapError> {
        let v6 = match (outer.src_ip, outer.dst_ip) {
            (IpAddr::V4(_), IpAddr::V4(_)) => false,
            (IpAddr::V6(_), IpAddr::V6(_)) => true,
            _ => return Err(EncapError::MixedFamilies),
        };
        if outer.src_port_min > outer.src_port_max {
            return Err(EncapError::BadPortRange);
        }
        let mut head = [0u8; 54];
        let et = if v6 { ethertype::IPV6 } else { ethertype::IPV4 };
        EthernetRepr::untagged(outer.dst_mac, outer.src_mac, et).emit(&mut head)?;
        let l4_proto = match tunnel {
            Tunnel::IpIp => 0,
            Tunnel::Gre { .. } => proto::GRE,
            Tunnel::Gue { .. } | Tunnel::Geneve { .. } => proto::UDP,
        };
        let ip = &mut head[ethernet::HEADER_LEN..];
        let mut sum = 0;
        match (outer.src_ip, outer.dst_ip) {
            (IpAddr::V4(src), IpAddr::V4(dst)) => {
                let mut p = ipv4::Packet::new_unchecked(&mut ip[..ipv4::MIN_HEADER_LEN]);
                p.set_version_and_header_len(ipv4::MIN_HEADER_LEN);
                p.set_frag(outer.dont_fragment, false, 0);
                p.set_ttl(outer.ttl);
                p.set_protocol(l4_proto);
                p.set_src(src);
                p.set_dst(dst);
                sum = ip[..ipv4::MIN_HEADER_LEN]
                    .chunks_exact(2)
                    .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
                    .sum();
            }
            (IpAddr::V6(src), IpAddr::V6(dst)) => Ipv6Repr {
                src,
                dst,
                next_header: l4_proto,
                payload_len: 0,
                hop_limit: outer.ttl,
                traffic_class: 0,
                flow_label: 0,
            }
            .emit(&mut ipv6::Packet::new_unchecked(ip))?,
            _ => return Err(EncapError::MixedFamilies),
        }
        let udp = l4_proto == proto::UDP;
        if let (false, Tunnel::Gue { port } | Tunnel::Geneve { port, .. }) = (v6, tunnel) {
            let dst_port = ethernet::HEADER_LEN + ipv4::MIN_HEADER_LEN + 2;
            head[dst_port..dst_port + 2].copy_from_slice(&port.to_be_bytes());
        }
        let checksummed = match outer.udp_checksum {
            UdpChecksum::Auto => v6,
            UdpChecksum::Full => true,
            UdpChecksum::Zero => false,
        };
        let udp_checksum = (udp && checksummed)
            .then(|| crate::ip::pseudo_header(&outer.src_ip, &outer.dst_ip, 0, 0))
            .flatten();
        let tunnel = match *tunnel {
            Tunnel::IpIp => TemplateTunnel::IpIp,
            Tunnel::Gre { key } => TemplateTunnel::Gre { key },
            Tunnel::Gue { port } => TemplateTunnel::Gue { port },
            Tunnel::Geneve {
                port,
                vni,
                ids,
                options,
            } => {
                if vni > 0x00ff_ffff {
                    return Err(ParseError::BadOption.into());
                }
                let mut o = [0u8; TEMPLATE_OPTIONS];
                let n = options.emit(&ids, &mut o)?;
                TemplateTunnel::Geneve {
                    port,
                    vni,
                    options: o,
                    options_len: u8::try_from(n).map_err(|_| ParseError::BadOption)?,
                    cookie: options.cookie.is_some(),
                    endpoint: options.endpoint_id.is_some(),
                }
            }
        };
        let ip_hdr = if v6 {
            ipv6::HEADER_LEN
        } else {
            ipv4::MIN_HEADER_LEN
        };
        let inner_proto = match tunnel {
            TemplateTunnel::IpIp => [proto::IPIP, proto::IPV6],
            _ => [0, 0],
        };
        Ok(Template {
            head,
            udp4: udp && !v6 && udp_checksum.is_none(),
            v6,
            sum,
            udp_checksum,
            tunnel_len: crate::cast::len8(Self::tunnel_len_of(&tunnel)),
            tunnel,
            l4: crate::cast::len8(ethernet::HEADER_LEN + ip_hdr),
            inner_proto,
            // An IPv4 total length counts the header too.
            max_payload: u16::MAX - if v6 { 0 } else { crate::cast::len16(ip_hdr) },
            src_port_min: outer.src_port_min,
            src_port_span: u32::from(outer.src_port_max - outer.src_port_min) + 1,
        })
    }

    /// Bytes encapsulation adds to the inner IP packet: the outer IP header and the tunnel
    /// headers (what the egress MTU must hold beyond the inner packet).
    pub const fn overhead(&self) -> usize {
        self.l4 as usize - ethernet::HEADER_LEN + self.tunnel_len as usize
    }

    const fn tunnel_len_of(tunnel: &TemplateTunnel) -> usize {
        match *tunnel {
            TemplateTunnel::IpIp => 0,
            TemplateTunnel::Gre { key } => gre::MIN_HEADER_LEN + if key.is_some() { 4 } else { 0 },
            TemplateTunnel::Gue { .. } => udp::HEADER_LEN,
            TemplateTunnel::Geneve { options_len, .. } => {
                udp::HEADER_LEN + geneve::BASE_HEADER_LEN + options_len as usize
            }
        }
    }
}

/// [`encapsulate`] with the outer headers of a [`Template`]: the same bytes for the same
/// packet, flow hash and cookie (the value of the GENEVE cookie option, if the template
/// has one), with the inner packet's facts from the caller's parse instead of a second one.
/// Always inlined: it is the data plane's per-packet encapsulation, and with
/// [`encapsulate`] calling it too the compiler would otherwise keep one shared copy.
#[inline(always)]
pub fn encapsulate_with<B: PacketBuf>(
    buf: &mut B,
    t: &Template,
    inner: &InnerIp,
    flow_hash: u64,
    cookie: u32,
) -> Result<usize, EncapError> {
    encapsulate_template(buf, t, inner, flow_hash, cookie, None)
}

/// [`encapsulate_with`] for a template whose GENEVE options carry a gateway endpoint ID
/// (M30): `endpoint_id` is written in its place (a template without one is used as it
/// is). The bytes [`encapsulate`] gives with that endpoint ID.
#[inline]
pub fn encapsulate_with_endpoint<B: PacketBuf>(
    buf: &mut B,
    t: &Template,
    inner: &InnerIp,
    flow_hash: u64,
    cookie: u32,
    endpoint_id: u64,
) -> Result<usize, EncapError> {
    encapsulate_template(buf, t, inner, flow_hash, cookie, Some(endpoint_id))
}

#[inline(always)]
fn encapsulate_template<B: PacketBuf>(
    buf: &mut B,
    t: &Template,
    inner: &InnerIp,
    flow_hash: u64,
    cookie: u32,
    endpoint_id: Option<u64>,
) -> Result<usize, EncapError> {
    const L3: usize = ethernet::HEADER_LEN;
    // Everything that depends only on the destination was worked out in `Template::new`.
    let l4 = usize::from(t.l4);
    let tun_len = usize::from(t.tunnel_len);
    let ip_payload = tun_len + inner.ip_len;
    if ip_payload > usize::from(t.max_payload) {
        return Err(EncapError::TooLong);
    }
    let hdr_len = l4 + tun_len;
    // The frame's link-layer header is overwritten, the rest prepended.
    let grow = hdr_len
        .checked_sub(inner.l2_len)
        .ok_or(ParseError::BadHeaderLength)?;
    let keep = inner.l2_len + inner.ip_len;
    if buf.len() < keep {
        return Err(ParseError::Truncated.into());
    }
    // Ethernet padding beyond the inner packet is dropped in the same step.
    let d = buf.reframe(grow, grow + keep)?;
    let inner_et = || {
        if inner.v6 {
            ethertype::IPV6
        } else {
            ethertype::IPV4
        }
    };
    let ipip_proto = t.inner_proto[usize::from(inner.v6)];
    if t.v6 {
        let head: &mut [u8; 54] = d.first_chunk_mut().ok_or(ParseError::Truncated)?;
        *head = t.head;
        // Version, traffic class (the inner DS, RFC 6040) and the flow hash as flow label
        // (RFC 6438).
        let w = (6 << 28) | (u32::from(inner.ds) << 20) | (flow_hash & 0x000f_ffff) as u32;
        head[L3..L3 + 4].copy_from_slice(&w.to_be_bytes());
        head[L3 + 4..L3 + 6].copy_from_slice(&crate::cast::len16(ip_payload).to_be_bytes());
        // From the template, not read back from the frame: a byte load from the wide
        // stores just made stalls on store forwarding.
        head[L3 + 6] = t.head[L3 + 6] | ipip_proto;
    } else if t.udp4 {
        // Ethernet, IPv4 and UDP headers in one copy, then the packet's own fields.
        let head: &mut [u8; 42] = d.first_chunk_mut().ok_or(ParseError::Truncated)?;
        *head = *t.head.first_chunk().ok_or(ParseError::Truncated)?;
        let (ip, _) = head
            .split_first_chunk_mut::<34>()
            .ok_or(ParseError::Truncated)?;
        ipv4_fields(ip, t, inner.ds, ip_payload, 0);
        const L4: usize = L3 + ipv4::MIN_HEADER_LEN;
        let src = port_in_span(flow_hash, t.src_port_min, t.src_port_span);
        head[L4..L4 + 2].copy_from_slice(&src.to_be_bytes());
        head[L4 + 4..L4 + 6].copy_from_slice(&crate::cast::len16(ip_payload).to_be_bytes());
        if let TemplateTunnel::Gue { .. } = t.tunnel {
            return Ok(hdr_len);
        }
    } else {
        let head: &mut [u8; 34] = d.first_chunk_mut().ok_or(ParseError::Truncated)?;
        *head = *t.head.first_chunk().ok_or(ParseError::Truncated)?;
        ipv4_fields(head, t, inner.ds, ip_payload, ipip_proto);
    }
    let udp_header = |d: &mut [u8], port: u16| {
        let src = port_in_span(flow_hash, t.src_port_min, t.src_port_span);
        let len = crate::cast::len16(ip_payload).to_be_bytes();
        let [s0, s1] = src.to_be_bytes();
        let [p0, p1] = port.to_be_bytes();
        if let Some(u) = d.get_mut(l4..l4 + udp::HEADER_LEN) {
            u.copy_from_slice(&[s0, s1, p0, p1, len[0], len[1], 0, 0]);
        }
    };
    match &t.tunnel {
        TemplateTunnel::IpIp => {}
        &TemplateTunnel::Gre { key } => {
            let [e0, e1] = inner_et().to_be_bytes();
            let flags = if key.is_some() { 0x20 } else { 0 };
            if let Some(g) = d.get_mut(l4..l4 + 4) {
                g.copy_from_slice(&[flags, 0, e0, e1]);
            }
            if let (Some(k), Some(g)) = (key, d.get_mut(l4 + 4..l4 + 8)) {
                g.copy_from_slice(&k.to_be_bytes());
            }
        }
        // (Over IPv4 without UDP checksum, GUE is done above.)
        &TemplateTunnel::Gue { port } => udp_header(d, port),
        TemplateTunnel::Geneve {
            port,
            vni,
            options,
            options_len,
            cookie: has_cookie,
            endpoint: has_endpoint,
        } => {
            let (port, vni, options_len, has_cookie) = (*port, *vni, *options_len, *has_cookie);
            if !t.udp4 {
                udp_header(d, port);
            }
            let g = l4 + udp::HEADER_LEN;
            let ol = usize::from(options_len);
            let [e0, e1] = inner_et().to_be_bytes();
            let [_, v0, v1, v2] = vni.to_be_bytes();
            // A gateway rule's packet (M30: the endpoint ID, then the cookie): the base
            // header and both options in one write of fixed size, the same bytes as below.
            if let (Some(id), true, true, TEMPLATE_OPTIONS) =
                (endpoint_id, *has_endpoint, has_cookie, ol)
            {
                const N: usize = geneve::BASE_HEADER_LEN + TEMPLATE_OPTIONS;
                let mut h = [0u8; N];
                h[..8].copy_from_slice(&[crate::cast::len8(ol / 4), 0, e0, e1, v0, v1, v2, 0]);
                h[8..].copy_from_slice(options);
                h[12..20].copy_from_slice(&id.to_be_bytes());
                h[24..].copy_from_slice(&cookie.to_be_bytes());
                if let Some(b) = d.get_mut(g..g + N) {
                    b.copy_from_slice(&h);
                }
            } else if let (None, false, true, COOKIE_ONLY) =
                (endpoint_id, *has_endpoint, has_cookie, ol)
            {
                // A flow cookie alone (the usual passthrough packet): the base header and
                // the option in one write of fixed size, the same bytes as below.
                const N: usize = geneve::BASE_HEADER_LEN + COOKIE_ONLY;
                let mut h = [0u8; N];
                h[..8].copy_from_slice(&[crate::cast::len8(ol / 4), 0, e0, e1, v0, v1, v2, 0]);
                if let Some(o) = options.first_chunk::<COOKIE_ONLY>() {
                    h[8..].copy_from_slice(o);
                }
                h[12..].copy_from_slice(&cookie.to_be_bytes());
                if let Some(b) = d.get_mut(g..g + N) {
                    b.copy_from_slice(&h);
                }
            } else {
                if let Some(b) = d.get_mut(g..g + geneve::BASE_HEADER_LEN) {
                    b.copy_from_slice(&[crate::cast::len8(ol / 4), 0, e0, e1, v0, v1, v2, 0]);
                }
                let o = g + geneve::BASE_HEADER_LEN;
                if let (Some(dst), Some(src)) = (d.get_mut(o..o + ol), options.get(..ol)) {
                    dst.copy_from_slice(src);
                    match dst.last_chunk_mut::<4>() {
                        Some(c) if has_cookie => *c = cookie.to_be_bytes(),
                        _ => {}
                    }
                    // The endpoint ID option comes first: its data at bytes 4..12.
                    if let (Some(id), true, Some(d)) =
                        (endpoint_id, *has_endpoint, dst.get_mut(4..12))
                    {
                        d.copy_from_slice(&id.to_be_bytes());
                    }
                }
            }
        }
    }
    // A UDP checksum covers the inner packet: only where the policy asks for one (IPv6
    // by default), as `UdpPacket::fill_checksum` computes it.
    if let Some(addrs) = t.udp_checksum
        && let Some(seg) = d.get_mut(l4..l4 + ip_payload)
    {
        let len = ip_payload as u64;
        let ph = addrs + u64::from(proto::UDP) + (len >> 16) + (len & 0xffff);
        let c = !crate::checksum::fold(crate::checksum::add(ph, seg));
        let c = if c == 0 { 0xffff } else { c };
        if let Some(x) = seg.get_mut(6..8) {
            x.copy_from_slice(&c.to_be_bytes());
        }
    }
    Ok(hdr_len)
}

/// Fills the per-packet fields of an outer IPv4 header just copied from `t` into `head`
/// (Ethernet and IPv4): DS, total length, the protocol where it follows the inner packet
/// (IP-in-IP; 0 otherwise) and the checksum, from the template's sum.
#[inline(always)]
fn ipv4_fields(head: &mut [u8; 34], t: &Template, ds: u8, ip_payload: usize, ipip_proto: u8) {
    const L3: usize = ethernet::HEADER_LEN;
    let total_len = crate::cast::len16(ipv4::MIN_HEADER_LEN + ip_payload);
    head[L3 + 1] = ds;
    head[L3 + 2..L3 + 4].copy_from_slice(&total_len.to_be_bytes());
    if ipip_proto != 0 {
        // From the template, not read back from the frame: a byte load from the wide
        // stores just made stalls on store forwarding.
        head[L3 + 9] = t.head[L3 + 9] | ipip_proto;
    }
    let sum = t.sum + u32::from(ds) + u32::from(total_len) + u32::from(ipip_proto);
    head[L3 + 10..L3 + 12].copy_from_slice(&(!crate::checksum::fold32(sum)).to_be_bytes());
}

/// The kind of tunnel a packet arrived in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TunnelKind {
    /// IP-in-IP.
    IpIp,
    /// GRE.
    Gre,
    /// GUE (variant 1 or variant 0 with a header).
    Gue,
    /// GENEVE.
    Geneve,
}

/// What the decapsulator accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DecapConfig {
    /// UDP port of GUE (None: GUE not accepted).
    pub gue_port: Option<u16>,
    /// UDP port of GENEVE (None: GENEVE not accepted).
    pub geneve_port: Option<u16>,
    /// Accept zero UDP checksums over IPv6 (RFC 6935/6936).
    pub allow_zero_udp_checksum_v6: bool,
    /// Option class and types of Spillway's GENEVE options.
    pub geneve_ids: OptionIds,
}

impl Default for DecapConfig {
    fn default() -> Self {
        DecapConfig {
            gue_port: Some(gue::PORT),
            geneve_port: Some(geneve::PORT),
            allow_zero_udp_checksum_v6: false,
            geneve_ids: OptionIds::default(),
        }
    }
}

/// What the outer headers of a tunnel packet said.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TunnelInfo {
    /// Tunnel kind.
    pub kind: TunnelKind,
    /// Outer link-layer header.
    pub eth: EthernetRepr,
    /// Outer source IP.
    pub src_ip: IpAddr,
    /// Outer destination IP.
    pub dst_ip: IpAddr,
    /// Outer TTL / hop limit.
    pub ttl: u8,
    /// Outer UDP ports (GUE, GENEVE).
    pub udp_ports: Option<(u16, u16)>,
    /// GRE key.
    pub gre_key: Option<u32>,
    /// GENEVE VNI.
    pub vni: Option<u32>,
    /// Spillway's GENEVE options.
    pub gateway: GatewayOptions,
    /// GENEVE: the O bit is set (a control message, not data; RFC 8926 §3.4).
    pub geneve_oam: bool,
    /// GENEVE: an option marked critical is not one of Spillway's (its receiver must
    /// drop the packet, RFC 8926 §3.5.1), or the C bit is set without Spillway's options
    /// being the critical ones.
    pub geneve_unknown_critical: bool,
    /// Whether the inner packet is IPv6.
    pub inner_v6: bool,
    /// Offset of the inner IP packet in the frame.
    pub inner_offset: usize,
    /// Length of the inner IP packet.
    pub inner_len: usize,
}

fn inner_ip_len(b: &[u8], want_v6: Option<bool>) -> Result<(bool, usize), DecapError> {
    let v = b.first().ok_or(ParseError::Truncated)? >> 4;
    let v6 = match v {
        4 => false,
        6 => true,
        _ => return Err(DecapError::NotIp),
    };
    if want_v6.is_some_and(|w| w != v6) {
        return Err(DecapError::NotIp);
    }
    let len = if v6 {
        let p = ipv6::Packet::new_checked(b)?;
        ipv6::HEADER_LEN + usize::from(p.payload_len())
    } else {
        usize::from(ipv4::Packet::new_checked(b)?.total_len())
    };
    Ok((v6, len))
}

fn want_from_ethertype(et: u16) -> Result<bool, DecapError> {
    match et {
        ethertype::IPV4 => Ok(false),
        ethertype::IPV6 => Ok(true),
        _ => Err(DecapError::NotIp),
    }
}

/// Parses and validates the outer headers of a tunnel frame without changing it.
#[inline]
pub fn parse_tunnel(frame: &[u8], cfg: &DecapConfig) -> Result<TunnelInfo, DecapError> {
    let eth = EthernetRepr::parse(frame)?;
    let l3 = eth.header_len();
    let ipb = frame.get(l3..).ok_or(ParseError::Truncated)?;
    let (src_ip, dst_ip, ttl, l4_proto, l4_off, l3_end) = match eth.ethertype {
        ethertype::IPV4 => {
            let p = ipv4::Packet::new_checked(ipb)?;
            if !p.verify_checksum() {
                return Err(ParseError::BadChecksum.into());
            }
            if p.is_fragment() {
                return Err(ParseError::Unsupported.into());
            }
            (
                IpAddr::V4(p.src()),
                IpAddr::V4(p.dst()),
                p.ttl(),
                p.protocol(),
                l3 + p.header_len(),
                l3 + usize::from(p.total_len()),
            )
        }
        ethertype::IPV6 => {
            let p = ipv6::Packet::new_checked(ipb)?;
            let w = ipv6::walk_extensions(p.payload(), p.next_header())?;
            if w.fragment.is_some() {
                return Err(ParseError::Unsupported.into());
            }
            (
                IpAddr::V6(p.src()),
                IpAddr::V6(p.dst()),
                p.hop_limit(),
                w.upper,
                l3 + ipv6::HEADER_LEN + w.offset,
                l3 + ipv6::HEADER_LEN + usize::from(p.payload_len()),
            )
        }
        _ => return Err(DecapError::NotTunnel),
    };
    let l4 = frame.get(l4_off..l3_end).ok_or(ParseError::Truncated)?;
    let mut info = TunnelInfo {
        kind: TunnelKind::IpIp,
        eth,
        src_ip,
        dst_ip,
        ttl,
        udp_ports: None,
        gre_key: None,
        vni: None,
        gateway: GatewayOptions::default(),
        geneve_oam: false,
        geneve_unknown_critical: false,
        inner_v6: false,
        inner_offset: 0,
        inner_len: 0,
    };
    let (rel, want) = match l4_proto {
        proto::IPIP => (0, Some(false)),
        proto::IPV6 => (0, Some(true)),
        proto::GRE => {
            let g = GreRepr::parse(&gre::Packet::new_checked(l4)?)?;
            info.kind = TunnelKind::Gre;
            info.gre_key = g.key;
            (g.header_len(), Some(want_from_ethertype(g.protocol)?))
        }
        proto::UDP => {
            let u = udp::Packet::new_checked(l4)?;
            if u.checksum() == 0 && src_ip.is_ipv6() {
                if !cfg.allow_zero_udp_checksum_v6 {
                    return Err(DecapError::ZeroUdpChecksum);
                }
            } else if !u.verify_checksum(&src_ip, &dst_ip) {
                return Err(ParseError::BadChecksum.into());
            }
            if usize::from(u.len()) != l4.len() {
                return Err(ParseError::BadLength.into());
            }
            info.udp_ports = Some((u.src_port(), u.dst_port()));
            let payload = u.payload();
            if Some(u.dst_port()) == cfg.geneve_port {
                let p = geneve::Packet::new_checked(payload)?;
                let r = GeneveRepr::parse(&p)?;
                info.kind = TunnelKind::Geneve;
                info.vni = Some(r.vni);
                info.gateway = GatewayOptions::parse(&cfg.geneve_ids, p.options())?;
                info.geneve_oam = r.oam;
                info.geneve_unknown_critical = unknown_critical(&cfg.geneve_ids, &p, r.critical);
                (
                    udp::HEADER_LEN + r.header_len(),
                    Some(want_from_ethertype(r.protocol)?),
                )
            } else if Some(u.dst_port()) == cfg.gue_port {
                info.kind = TunnelKind::Gue;
                match GueRepr::parse(payload)? {
                    GueRepr::DirectIp { ipv6 } => (udp::HEADER_LEN, Some(ipv6)),
                    r @ GueRepr::Header {
                        control: false,
                        proto,
                        ..
                    } => {
                        let want = match proto {
                            proto::IPIP => false,
                            proto::IPV6 => true,
                            _ => return Err(DecapError::NotIp),
                        };
                        (udp::HEADER_LEN + r.header_len(), Some(want))
                    }
                    GueRepr::Header { .. } => return Err(DecapError::NotIp),
                }
            } else {
                return Err(DecapError::NotTunnel);
            }
        }
        _ => return Err(DecapError::NotTunnel),
    };
    let inner = l4.get(rel..).ok_or(ParseError::Truncated)?;
    let (v6, len) = inner_ip_len(inner, want)?;
    if len != inner.len() {
        return Err(ParseError::BadLength.into());
    }
    info.inner_v6 = v6;
    info.inner_offset = l4_off + rel;
    info.inner_len = len;
    Ok(info)
}

/// A GENEVE packet returned by an appliance (M32) as [`parse_geneve_return_v4`] found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GeneveReturn {
    /// The gateway endpoint ID option's value.
    pub endpoint_id: u64,
    /// The flow cookie option's value.
    pub cookie: u32,
    /// The inner packet's facts ([`crate::packet::parse_ip_v4_flow`]).
    pub inner: crate::packet::V4Flow,
    /// Offset of the inner IP packet in the frame.
    pub inner_offset: usize,
    /// Length of the inner IP packet.
    pub inner_len: usize,
}

/// The fast path of [`parse_tunnel`] for gateway mode's returns (M32): the layout the
/// balancer sends (untagged Ethernet, IPv4 without options, UDP, a GENEVE header whose
/// only options are the endpoint ID then the cookie, neither OAM nor critical, an
/// option-less unfragmented IPv4 TCP/UDP packet inside). `Some` only for frames that
/// [`parse_tunnel`] accepts — with `geneve_port` the frame's UDP destination port and
/// `ids` — as GENEVE with both options, not OAM, no unknown critical option, and whose
/// inner packet [`crate::packet::parse_ip`] accepts, with the same facts; `None` for the
/// rest, which the caller gives to [`parse_tunnel`]. Every check of the general path is
/// made here too (outer IPv4 header checksum, the UDP checksum unless zero, every length),
/// at fixed offsets.
#[inline]
pub fn parse_geneve_return_v4(frame: &[u8], ids: &OptionIds) -> Option<GeneveReturn> {
    const IP: usize = ethernet::HEADER_LEN;
    const UDP: usize = IP + ipv4::MIN_HEADER_LEN;
    const INNER: usize = UDP + udp::HEADER_LEN + geneve::BASE_HEADER_LEN + 20;
    let h: &[u8; INNER] = frame.first_chunk()?;
    let be16 = |i: usize| u16::from_be_bytes([h[i], h[i + 1]]);
    // Untagged IPv4 with a 20-byte header, not a fragment, carrying UDP, and long enough
    // for the GENEVE header with both options.
    if be16(12) != ethertype::IPV4
        || h[IP] != 0x45
        || be16(IP + 6) & 0x3fff != 0
        || h[IP + 9] != proto::UDP
    {
        return None;
    }
    let tl = usize::from(be16(IP + 2));
    if tl < INNER - IP || tl > frame.len() - IP {
        return None;
    }
    let ip_header: &[u8; 20] = h.get(IP..UDP)?.try_into().ok()?;
    if !ipv4::header_checksum_ok(ip_header) {
        return None;
    }
    // The UDP length is the rest of the IP packet; a zero checksum is "none" over IPv4
    // (RFC 768), any other must verify, as `udp::Packet::verify_checksum` has it.
    let ul = usize::from(be16(UDP + 4));
    if ul != tl - ipv4::MIN_HEADER_LEN {
        return None;
    }
    if be16(UDP + 6) != 0 {
        let src = IpAddr::V4(Ipv4Addr::new(h[26], h[27], h[28], h[29]));
        let dst = IpAddr::V4(Ipv4Addr::new(h[30], h[31], h[32], h[33]));
        let ph = crate::ip::pseudo_header(&src, &dst, proto::UDP, crate::cast::len32(ul))?;
        let seg = frame.get(UDP..UDP + ul)?;
        if crate::checksum::fold(crate::checksum::add(ph, seg)) != 0xffff {
            return None;
        }
    }
    // GENEVE version 0 with 5 words of options, O and C clear, an IPv4 payload; the
    // endpoint ID option (8 bytes) then the cookie option (4 bytes), of distinct types
    // without the critical bit.
    const G: usize = UDP + udp::HEADER_LEN;
    const O: usize = G + geneve::BASE_HEADER_LEN;
    if h[G] != 5 || h[G + 1] & 0xc0 != 0 || be16(G + 2) != ethertype::IPV4 {
        return None;
    }
    if ids.endpoint_type == ids.cookie_type || (ids.endpoint_type | ids.cookie_type) & 0x80 != 0 {
        return None;
    }
    if be16(O) != ids.class
        || h[O + 2] != ids.endpoint_type
        || h[O + 3] != 2
        || be16(O + 12) != ids.class
        || h[O + 14] != ids.cookie_type
        || h[O + 15] != 1
    {
        return None;
    }
    let id: [u8; 8] = h.get(O + 4..O + 12)?.try_into().ok()?;
    let cookie: [u8; 4] = h.get(O + 16..O + 20)?.try_into().ok()?;
    // The inner packet fills the rest of the outer one exactly.
    let inner_ip = frame.get(INNER..IP + tl)?;
    let inner = crate::packet::parse_ip_v4_flow(inner_ip)?;
    if usize::from(inner.total_len) != inner_ip.len() {
        return None;
    }
    Some(GeneveReturn {
        endpoint_id: u64::from_be_bytes(id),
        cookie: u32::from_be_bytes(cookie),
        inner,
        inner_offset: INNER,
        inner_len: inner_ip.len(),
    })
}

/// Whether a GENEVE header carries a critical option that is not one of Spillway's own
/// (`ids`), or announces critical options (`c_bit`) without carrying a known critical one.
fn unknown_critical<T: AsRef<[u8]>>(ids: &OptionIds, p: &geneve::Packet<T>, c_bit: bool) -> bool {
    let known = |o: &geneve::GeneveOption<'_>| {
        o.class == ids.class && (o.opt_type == ids.endpoint_type || o.opt_type == ids.cookie_type)
    };
    let mut known_critical = false;
    for o in p.option_iter().flatten() {
        if o.is_critical() {
            if !known(&o) {
                return true;
            }
            known_critical = true;
        }
    }
    c_bit && !known_critical
}

/// Removes the outer headers of the tunnel frame in `buf` that [`parse_tunnel`] described
/// as `info`, in place, keeping the frame's own link-layer header (MACs, VLAN tags) in front
/// of the inner packet with its EtherType set to the inner packet's, so that the frame reads
/// as if the inner packet had arrived directly (tunnelled ingress, M49). Link padding after
/// the outer packet is dropped. On error the packet is unchanged.
pub fn strip_outer<B: PacketBuf>(buf: &mut B, info: &TunnelInfo) -> Result<(), DecapError> {
    let l2 = info.eth.header_len();
    let end = info
        .inner_offset
        .checked_add(info.inner_len)
        .ok_or(ParseError::BadLength)?;
    // The link-layer header moves to just before the inner packet.
    let start = info
        .inner_offset
        .checked_sub(l2)
        .ok_or(ParseError::BadLength)?;
    if end > buf.len() || l2 < 2 {
        return Err(ParseError::Truncated.into());
    }
    let et = if info.inner_v6 {
        ethertype::IPV6
    } else {
        ethertype::IPV4
    };
    let data = buf.data_mut();
    data.copy_within(..l2, start);
    data[info.inner_offset - 2..info.inner_offset].copy_from_slice(&et.to_be_bytes());
    let excess = buf.len() - end;
    buf.trim(excess)?;
    buf.adj(start)?;
    Ok(())
}

/// Decapsulates the tunnel frame in `buf` in place and prepends `l2` (a complete
/// link-layer header whose EtherType, after any VLAN tags, matches the inner packet; empty
/// to leave a bare IP packet). Returns what the outer headers said.
pub fn decapsulate<B: PacketBuf>(
    buf: &mut B,
    cfg: &DecapConfig,
    l2: &[u8],
) -> Result<TunnelInfo, DecapError> {
    let info = parse_tunnel(buf.data(), cfg)?;
    if !l2.is_empty() {
        let eth = EthernetRepr::parse(l2)?;
        let et = if info.inner_v6 {
            ethertype::IPV6
        } else {
            ethertype::IPV4
        };
        if eth.ethertype != et || eth.header_len() != l2.len() {
            return Err(DecapError::L2Mismatch);
        }
    }
    if buf.headroom() + info.inner_offset < l2.len() {
        return Err(crate::error::BufError::NoHeadroom.into());
    }
    let excess = buf.len() - info.inner_offset - info.inner_len;
    buf.trim(excess)?;
    buf.adj(info.inner_offset)?;
    buf.prepend(l2.len())?.copy_from_slice(l2);
    Ok(info)
}

/// The NVA's return-path rewrite of a GENEVE frame (M32), in place: swaps outer MACs
/// and IPs, keeps UDP ports, the GENEVE header and every option. If `ttl` is given the
/// outer TTL / hop limit is set to it (IPv4 checksum updated incrementally, RFC 1624).
/// Swapping addresses changes neither the IPv4 header checksum nor the UDP checksum (the
/// pseudo-header sum is order-independent), so both stay valid.
pub fn geneve_return_rewrite(
    frame: &mut [u8],
    cfg: &DecapConfig,
    ttl: Option<u8>,
) -> Result<TunnelInfo, DecapError> {
    let info = parse_tunnel(frame, cfg)?;
    if info.kind != TunnelKind::Geneve {
        return Err(DecapError::NotTunnel);
    }
    let mut f = ethernet::Frame::new_unchecked(&mut *frame);
    f.set_dst(info.eth.src);
    f.set_src(info.eth.dst);
    let l3 = info.eth.header_len();
    let ipb = &mut frame[l3..];
    if info.src_ip.is_ipv4() {
        let mut p = ipv4::Packet::new_unchecked(ipb);
        p.swap_addrs();
        if let Some(t) = ttl {
            p.set_ttl_incremental(t);
        }
    } else {
        let mut p = ipv6::Packet::new_unchecked(ipb);
        p.swap_addrs();
        if let Some(t) = ttl {
            p.set_hop_limit(t);
        }
    }
    Ok(info)
}
