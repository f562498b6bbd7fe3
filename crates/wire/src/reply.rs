//! TCP resets built in place from the segment they answer (RFC 9293 §3.10.7.1), for
//! services without an eligible backend (M14, `no_backend_action = "reset"`), and ICMP
//! "fragmentation needed" / "packet too big" errors for packets that would exceed the
//! egress MTU once encapsulated (M48, [`too_big`]).
//!
//! # Design
//!
//! The balancer answers as a TCP endpoint in state CLOSED would: a segment with ACK gets
//! `<SEQ=SEG.ACK><CTL=RST>`, any other `<SEQ=0><ACK=SEG.SEQ+SEG.LEN><CTL=RST,ACK>`, where
//! SEG.LEN counts the payload plus one for SYN and one for FIN. A reset is never answered,
//! nor a fragment (its TCP header may be elsewhere), nor a segment whose IPv4 header or TCP
//! checksum does not verify (it might carry wrong sequence numbers), nor one from or to a
//! non-unicast address.
//!
//! The reply reuses the frame: MACs swapped (source = ours), VLAN tags kept, addresses and
//! ports swapped, a fresh IP header (IPv4: TTL 64, ID 0, DF, no options; IPv6: hop limit
//! 64, no extension headers), a bare 20-byte TCP header with window 0, and the tail
//! trimmed. Ethernet minimum-size padding is left to the NIC.

use core::net::IpAddr;

use crate::buf::{PacketBuf, resize_for_rewrite};
use crate::error::{ParseError, ReplyError};
use crate::ethernet::{EthernetRepr, MacAddr, ethertype};
use crate::ip::proto;
use crate::ipv4::{self, Ipv4Repr};
use crate::ipv6::{self, Ipv6Repr};
use crate::tcp::{self, Flags, TcpRepr};
use crate::{icmpv4, icmpv6};

/// TTL / hop limit of generated resets.
pub const RESET_TTL: u8 = 64;

/// Whether a reply may be sent from or to `a`.
fn is_unicast(a: &IpAddr) -> bool {
    match a {
        IpAddr::V4(a) => !(a.is_unspecified() || a.is_broadcast() || a.is_multicast()),
        IpAddr::V6(a) => !(a.is_unspecified() || a.is_multicast()),
    }
}

/// The TCP header of the reset answering a segment with `seq`, `ack`, `flags` and
/// `payload_len` payload bytes, from `src_port` (ours) to `dst_port` (theirs).
pub fn reset_for(
    src_port: u16,
    dst_port: u16,
    seq: u32,
    ack: u32,
    flags: Flags,
    payload_len: usize,
) -> TcpRepr {
    let (seq, ack, flags) = if flags.contains(Flags::ACK) {
        (ack, 0, Flags::RST)
    } else {
        let mut len = crate::cast::len32(payload_len);
        len = len.wrapping_add(u32::from(flags.contains(Flags::SYN)));
        len = len.wrapping_add(u32::from(flags.contains(Flags::FIN)));
        (0, seq.wrapping_add(len), Flags::RST.union(Flags::ACK))
    };
    TcpRepr {
        src_port,
        dst_port,
        seq,
        ack,
        flags,
        window: 0,
        urgent: 0,
        options: tcp::Options::default(),
    }
}

/// The Ethernet header of a frame to answer and what follows it; never a
/// frame from a multicast (or broadcast) MAC.
/// Writes a reply's Ethernet header at the front of `data` (back to the
/// sender of `eth`, from `mac`, VLAN tags kept) and splits what follows its
/// `l2` bytes into the IP header (`hdr` bytes) and the rest.
fn reply_front(
    data: &mut [u8],
    eth: EthernetRepr,
    mac: MacAddr,
    l2: usize,
    hdr: usize,
) -> Result<(&mut [u8], &mut [u8]), ReplyError> {
    EthernetRepr {
        dst: eth.src,
        src: mac,
        ..eth
    }
    .emit(data)?;
    Ok(data
        .get_mut(l2..)
        .and_then(|b| b.split_at_mut_checked(hdr))
        .ok_or(ParseError::Truncated)?)
}

fn reply_l2(data: &[u8]) -> Result<(EthernetRepr, &[u8]), ReplyError> {
    let eth = EthernetRepr::parse(data)?;
    if eth.src[0] & 1 != 0 {
        return Err(ReplyError::BadSource);
    }
    let l3 = data.get(eth.header_len()..).ok_or(ParseError::Truncated)?;
    Ok((eth, l3))
}

/// Rewrites the Ethernet frame `pkt`, a TCP segment over IPv4 or IPv6, into the reset that
/// answers it, sent from `mac`. On error the frame is unchanged.
pub fn tcp_reset<B: PacketBuf + ?Sized>(pkt: &mut B, mac: MacAddr) -> Result<(), ReplyError> {
    let data = pkt.data();
    let (eth, l3) = reply_l2(data)?;
    let l2 = eth.header_len();
    let (src, dst, seg) = match eth.ethertype {
        ethertype::IPV4 => {
            let ip = ipv4::Packet::new_checked(l3)?;
            if !ip.verify_checksum() {
                return Err(ParseError::BadChecksum.into());
            }
            if ip.protocol() != proto::TCP {
                return Err(ReplyError::NotTcp);
            }
            if ip.is_fragment() {
                return Err(ReplyError::Fragment);
            }
            let (hl, tl) = (ip.header_len(), usize::from(ip.total_len()));
            let seg = l3.get(hl..tl).ok_or(ParseError::Truncated)?;
            (IpAddr::V4(ip.src()), IpAddr::V4(ip.dst()), seg)
        }
        ethertype::IPV6 => {
            let ip = ipv6::Packet::new_checked(l3)?;
            let end = ipv6::HEADER_LEN + usize::from(ip.payload_len());
            let payload = l3.get(ipv6::HEADER_LEN..end).ok_or(ParseError::Truncated)?;
            let walk = ipv6::walk_extensions(payload, ip.next_header())?;
            if walk.fragment.is_some() {
                return Err(ReplyError::Fragment);
            }
            if walk.upper != proto::TCP {
                return Err(ReplyError::NotTcp);
            }
            let seg = payload.get(walk.offset..).ok_or(ParseError::Truncated)?;
            (IpAddr::V6(ip.src()), IpAddr::V6(ip.dst()), seg)
        }
        _ => return Err(ReplyError::NotTcp),
    };
    if !is_unicast(&src) || !is_unicast(&dst) {
        return Err(ReplyError::BadSource);
    }
    let t = tcp::Packet::new_checked(seg)?;
    if !t.verify_checksum(&src, &dst) {
        return Err(ParseError::BadChecksum.into());
    }
    let flags = t.flags();
    if flags.contains(Flags::RST) {
        return Err(ReplyError::Reset);
    }
    let rst = reset_for(
        t.dst_port(),
        t.src_port(),
        t.seq(),
        t.ack(),
        flags,
        t.payload().len(),
    );

    let ip_len = match src {
        IpAddr::V4(_) => ipv4::MIN_HEADER_LEN,
        IpAddr::V6(_) => ipv6::HEADER_LEN,
    };
    resize_for_rewrite(pkt, l2 + ip_len + tcp::MIN_HEADER_LEN)?;
    let (ip, seg) = reply_front(pkt.data_mut(), eth, mac, l2, ip_len)?;
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => Ipv4Repr {
            src: d,
            dst: s,
            protocol: proto::TCP,
            payload_len: crate::cast::len16(tcp::MIN_HEADER_LEN),
            ttl: RESET_TTL,
            dscp_ecn: 0,
            ident: 0,
            dont_frag: true,
            more_frags: false,
            frag_offset: 0,
            options: ipv4::Options::default(),
        }
        .emit(&mut ipv4::Packet::new_unchecked(ip))?,
        (IpAddr::V6(s), IpAddr::V6(d)) => Ipv6Repr {
            src: d,
            dst: s,
            next_header: proto::TCP,
            payload_len: crate::cast::len16(tcp::MIN_HEADER_LEN),
            hop_limit: RESET_TTL,
            traffic_class: 0,
            flow_label: 0,
        }
        .emit(&mut ipv6::Packet::new_unchecked(ip))?,
        _ => return Err(ParseError::BadVersion.into()),
    }
    let mut t = tcp::Packet::new_unchecked(seg);
    rst.emit(&mut t)?;
    t.fill_checksum(&dst, &src)?;
    Ok(())
}

/// Rewrites the Ethernet frame `pkt`, an ICMP echo request (IPv4 type 8 or ICMPv6 type
/// 128, code 0) to an address the balancer answers for, into its echo reply (RFC 792,
/// RFC 4443 §4.2), sent from `mac` back to the request's source MAC, VLAN tags kept: the
/// addresses swapped, TTL / hop limit 64, the identifier, sequence number and data echoed,
/// the tail beyond the IP packet trimmed.
///
/// Never answered: a fragment, a request whose IPv4 header or ICMP checksum does not
/// verify, an IPv4 header with options or an IPv6 packet with extension headers, a request
/// from or to a non-unicast address or from a multicast MAC. On error the frame is
/// unchanged.
pub fn echo_reply<B: PacketBuf + ?Sized>(pkt: &mut B, mac: MacAddr) -> Result<(), ReplyError> {
    let data = pkt.data();
    let (eth, l3) = reply_l2(data)?;
    let l2 = eth.header_len();
    let (src, dst, hdr, end, dont_frag) = match eth.ethertype {
        ethertype::IPV4 => {
            let ip = ipv4::Packet::new_checked(l3)?;
            if !ip.verify_checksum() {
                return Err(ParseError::BadChecksum.into());
            }
            if ip.is_fragment() {
                return Err(ReplyError::Fragment);
            }
            let (hl, tl) = (ip.header_len(), usize::from(ip.total_len()));
            if ip.protocol() != proto::ICMP || hl != ipv4::MIN_HEADER_LEN {
                return Err(ReplyError::NotEcho);
            }
            let msg = icmpv4::Packet::new_checked(l3.get(hl..tl).ok_or(ParseError::Truncated)?)?;
            if msg.msg_type() != icmpv4::msg::ECHO_REQUEST || msg.code() != 0 {
                return Err(ReplyError::NotEcho);
            }
            if !msg.verify_checksum() {
                return Err(ParseError::BadChecksum.into());
            }
            (
                IpAddr::V4(ip.src()),
                IpAddr::V4(ip.dst()),
                hl,
                tl,
                ip.dont_frag(),
            )
        }
        ethertype::IPV6 => {
            let ip = ipv6::Packet::new_checked(l3)?;
            let end = ipv6::HEADER_LEN + usize::from(ip.payload_len());
            let payload = l3.get(ipv6::HEADER_LEN..end).ok_or(ParseError::Truncated)?;
            if ip.next_header() == proto::IPV6_FRAG {
                return Err(ReplyError::Fragment);
            }
            if ip.next_header() != proto::ICMPV6 {
                return Err(ReplyError::NotEcho);
            }
            let msg = icmpv6::Packet::new_checked(payload)?;
            if msg.msg_type() != icmpv6::msg::ECHO_REQUEST || msg.code() != 0 {
                return Err(ReplyError::NotEcho);
            }
            if !msg.verify_checksum(&ip.src(), &ip.dst()) {
                return Err(ParseError::BadChecksum.into());
            }
            (
                IpAddr::V6(ip.src()),
                IpAddr::V6(ip.dst()),
                ipv6::HEADER_LEN,
                end,
                false,
            )
        }
        _ => return Err(ReplyError::NotIp),
    };
    if !is_unicast(&src) || !is_unicast(&dst) {
        return Err(ReplyError::BadSource);
    }
    resize_for_rewrite(pkt, l2 + end)?;
    let (ip, msg) = reply_front(pkt.data_mut(), eth, mac, l2, hdr)?;
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let mut ip = ipv4::Packet::new_unchecked(ip);
            ip.set_src(d);
            ip.set_dst(s);
            ip.set_ttl(RESET_TTL);
            ip.set_frag(dont_frag, false, 0);
            ip.fill_checksum();
            let mut m = icmpv4::Packet::new_unchecked(msg);
            m.set_msg_type(icmpv4::msg::ECHO_REPLY);
            m.fill_checksum();
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            let mut ip = ipv6::Packet::new_unchecked(ip);
            ip.set_src(d);
            ip.set_dst(s);
            ip.set_hop_limit(RESET_TTL);
            let mut m = icmpv6::Packet::new_unchecked(msg);
            m.set_msg_type(icmpv6::msg::ECHO_REPLY);
            m.fill_checksum(&d, &s);
        }
        _ => return Err(ParseError::BadVersion.into()),
    }
    Ok(())
}

/// Total length of an ICMPv4 error (RFC 1812 §4.3.2.3: as much of the original packet as
/// fits in 576 bytes, as Linux sends).
pub const TOO_BIG_V4_MAX: usize = 576;
/// Total length of an ICMPv6 error (RFC 4443 §2.4(c): as much as fits in the minimum MTU).
pub const TOO_BIG_V6_MAX: usize = 1280;
/// The smallest MTU an IPv6 "packet too big" advertises: hosts ignore smaller values
/// (RFC 8200 §5, RFC 8021), so a smaller usable MTU is advertised as this one.
pub const MIN_MTU_V6: u16 = 1280;
/// The smallest MTU an IPv4 "fragmentation needed" advertises (RFC 791: every host takes
/// 68-byte datagrams).
pub const MIN_MTU_V4: u16 = 68;
/// DS byte of generated ICMPv4 errors: precedence 6, internetwork control (RFC 1812
/// §4.3.2.5), as Linux sends them.
pub const ICMP_DS_V4: u8 = 0xc0;

/// Rewrites the Ethernet frame `pkt`, an IPv4 or IPv6 packet too big for the path ahead,
/// into the ICMP error that tells its sender (M48): "fragmentation needed" (type 3 code 4)
/// or "packet too big" (type 2) advertising `mtu` (raised to [`MIN_MTU_V4`] /
/// [`MIN_MTU_V6`]), sent from the packet's destination (the VIP) and the MAC `mac`, back
/// to its source MAC, VLAN tags kept. It quotes the original IP packet from its first byte,
/// as much as fits in [`TOO_BIG_V4_MAX`] / [`TOO_BIG_V6_MAX`] bytes in all. IPv4: TTL 64,
/// ID 0, DF clear, no options; IPv6: hop limit 64, no extension headers.
///
/// Never answered: an ICMP error, an IPv4 fragment other than the first, a packet from or
/// to a non-unicast address or from a multicast MAC, an IPv4 header whose checksum does
/// not verify. The transport checksum is not looked at (a router does not either). On
/// error the frame is unchanged.
pub fn too_big<B: PacketBuf + ?Sized>(
    pkt: &mut B,
    mac: MacAddr,
    mtu: u16,
) -> Result<(), ReplyError> {
    let data = pkt.data();
    let (eth, l3) = reply_l2(data)?;
    let l2 = eth.header_len();
    let (src, dst, ip_len) = match eth.ethertype {
        ethertype::IPV4 => {
            let ip = ipv4::Packet::new_checked(l3)?;
            if !ip.verify_checksum() {
                return Err(ParseError::BadChecksum.into());
            }
            if ip.frag_offset() != 0 {
                return Err(ReplyError::Fragment);
            }
            if ip.protocol() == proto::ICMP
                && ip.payload().first().is_none_or(|&t| icmpv4::is_error(t))
            {
                return Err(ReplyError::IcmpError);
            }
            let len = usize::from(ip.total_len());
            (IpAddr::V4(ip.src()), IpAddr::V4(ip.dst()), len)
        }
        ethertype::IPV6 => {
            let ip = ipv6::Packet::new_checked(l3)?;
            let end = ipv6::HEADER_LEN + usize::from(ip.payload_len());
            let payload = l3.get(ipv6::HEADER_LEN..end).ok_or(ParseError::Truncated)?;
            let walk = ipv6::walk_extensions(payload, ip.next_header())?;
            let whole = walk.fragment.is_none_or(|f| f.is_first());
            if walk.upper == proto::ICMPV6
                && whole
                && payload
                    .get(walk.offset)
                    .is_none_or(|&t| icmpv6::is_error(t))
            {
                return Err(ReplyError::IcmpError);
            }
            (IpAddr::V6(ip.src()), IpAddr::V6(ip.dst()), end)
        }
        _ => return Err(ReplyError::NotIp),
    };
    if !is_unicast(&src) || !is_unicast(&dst) {
        return Err(ReplyError::BadSource);
    }
    let (hdr, max) = match src {
        IpAddr::V4(_) => (ipv4::MIN_HEADER_LEN, TOO_BIG_V4_MAX),
        IpAddr::V6(_) => (ipv6::HEADER_LEN, TOO_BIG_V6_MAX),
    };
    let front = hdr + icmpv4::HEADER_LEN;
    let quoted = ip_len.min(max - front);
    // The quoted packet stays where it is; the new headers go in front of it, the old
    // link-layer header moves to the new front.
    let data = pkt.reframe(front, l2 + front + quoted)?;
    data.copy_within(front..front + l2, 0);
    let (ip, icmp) = reply_front(data, eth, mac, l2, hdr)?;
    let icmp_len = crate::cast::len16(icmpv4::HEADER_LEN + quoted);
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            Ipv4Repr {
                src: d,
                dst: s,
                protocol: proto::ICMP,
                payload_len: icmp_len,
                ttl: RESET_TTL,
                dscp_ecn: ICMP_DS_V4,
                ident: 0,
                dont_frag: false,
                more_frags: false,
                frag_offset: 0,
                options: ipv4::Options::default(),
            }
            .emit(&mut ipv4::Packet::new_unchecked(ip))?;
            icmpv4::Icmpv4Repr::frag_needed(mtu.max(MIN_MTU_V4))
                .emit(&mut icmpv4::Packet::new_unchecked(icmp))?;
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            Ipv6Repr {
                src: d,
                dst: s,
                next_header: proto::ICMPV6,
                payload_len: icmp_len,
                hop_limit: RESET_TTL,
                traffic_class: 0,
                flow_label: 0,
            }
            .emit(&mut ipv6::Packet::new_unchecked(ip))?;
            icmpv6::Icmpv6Repr::packet_too_big(u32::from(mtu.max(MIN_MTU_V6))).emit(
                &mut icmpv6::Packet::new_unchecked(icmp),
                &d,
                &s,
            )?;
        }
        _ => return Err(ParseError::BadVersion.into()),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buf::MemBuf;
    use core::net::{Ipv4Addr, Ipv6Addr};

    const CLIENT_MAC: MacAddr = [2, 0, 0, 0, 0, 1];
    const LB_MAC: MacAddr = [2, 0, 0, 0, 0, 2];

    /// Writes an IPv4 (TTL 50, ID 9) or IPv6 (hop limit 50) header for
    /// `payload_len` bytes of `protocol` at the front of `l3`.
    fn ip_header(
        l3: &mut [u8],
        src: IpAddr,
        dst: IpAddr,
        protocol: u8,
        payload_len: u16,
        df: bool,
    ) {
        match (src, dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => Ipv4Repr {
                src: s,
                dst: d,
                protocol,
                payload_len,
                ttl: 50,
                dscp_ecn: 0,
                ident: 9,
                dont_frag: df,
                more_frags: false,
                frag_offset: 0,
                options: ipv4::Options::default(),
            }
            .emit(&mut ipv4::Packet::new_unchecked(l3))
            .unwrap(),
            (IpAddr::V6(s), IpAddr::V6(d)) => Ipv6Repr {
                src: s,
                dst: d,
                next_header: protocol,
                payload_len,
                hop_limit: 50,
                traffic_class: 0,
                flow_label: 0,
            }
            .emit(&mut ipv6::Packet::new_unchecked(l3))
            .unwrap(),
            _ => unreachable!(),
        }
    }

    /// An untagged TCP segment frame, checksummed.
    fn segment(src: IpAddr, dst: IpAddr, r: &TcpRepr, payload: &[u8]) -> Vec<u8> {
        let (et, ip_len) = match src {
            IpAddr::V4(_) => (ethertype::IPV4, 20),
            IpAddr::V6(_) => (ethertype::IPV6, 40),
        };
        let tl = r.header_len() + payload.len();
        let mut f = vec![0xa5u8; 14 + ip_len + tl];
        EthernetRepr::untagged(LB_MAC, CLIENT_MAC, et)
            .emit(&mut f)
            .unwrap();
        ip_header(
            &mut f[14..],
            src,
            dst,
            proto::TCP,
            crate::cast::len16(tl),
            false,
        );
        let seg = &mut f[14 + ip_len..];
        let mut t = tcp::Packet::new_unchecked(seg);
        r.emit(&mut t).unwrap();
        let hl = r.header_len();
        t.into_inner()[hl..].copy_from_slice(payload);
        tcp::Packet::new_unchecked(&mut f[14 + ip_len..])
            .fill_checksum(&src, &dst)
            .unwrap();
        f
    }

    fn client_segment(flags: Flags, seq: u32, ack: u32) -> TcpRepr {
        TcpRepr {
            src_port: 40000,
            dst_port: 80,
            seq,
            ack,
            flags,
            window: 1000,
            urgent: 0,
            options: tcp::Options::default(),
        }
    }

    #[test]
    fn sequence_numbers_follow_rfc_9293() {
        let f = Flags::SYN.union(Flags::FIN);
        let r = reset_for(80, 40000, u32::MAX, 5, f, 3);
        assert_eq!(
            (r.seq, r.ack, r.flags),
            (0, 4, Flags::RST.union(Flags::ACK))
        );
        let r = reset_for(80, 40000, 1, 77, Flags::ACK.union(Flags::PSH), 100);
        assert_eq!((r.seq, r.ack, r.flags), (77, 0, Flags::RST));
        assert_eq!((r.src_port, r.dst_port, r.window), (80, 40000, 0));
    }

    #[test]
    fn what_is_never_answered() {
        let c = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1));
        let v = IpAddr::V4(Ipv4Addr::new(198, 51, 100, 1));
        let cases = [
            (c, v, Flags::RST, ReplyError::Reset),
            (
                IpAddr::V4(Ipv4Addr::BROADCAST),
                v,
                Flags::SYN,
                ReplyError::BadSource,
            ),
            (
                c,
                IpAddr::V4(Ipv4Addr::new(224, 0, 0, 1)),
                Flags::SYN,
                ReplyError::BadSource,
            ),
            (
                IpAddr::V6(Ipv6Addr::UNSPECIFIED),
                IpAddr::V6(Ipv6Addr::LOCALHOST),
                Flags::SYN,
                ReplyError::BadSource,
            ),
        ];
        for (s, d, flags, want) in cases {
            let f = segment(s, d, &client_segment(flags, 1, 0), b"");
            let mut buf = MemBuf::new([0u8; 256], 0, &f).unwrap();
            assert_eq!(tcp_reset(&mut buf, LB_MAC), Err(want));
            assert_eq!(buf.data(), &f[..], "unchanged");
        }
        let mut f = segment(c, v, &client_segment(Flags::SYN, 1, 0), b"x");
        *f.last_mut().unwrap() ^= 1;
        let mut buf = MemBuf::new([0u8; 256], 0, &f).unwrap();
        assert_eq!(
            tcp_reset(&mut buf, LB_MAC),
            Err(ReplyError::Parse(ParseError::BadChecksum))
        );
        let mut f = segment(c, v, &client_segment(Flags::SYN, 1, 0), b"x");
        f[6] |= 1;
        let mut buf = MemBuf::new([0u8; 256], 0, &f).unwrap();
        assert_eq!(tcp_reset(&mut buf, LB_MAC), Err(ReplyError::BadSource));
        // Not TCP; a fragment.
        let mut f = segment(c, v, &client_segment(Flags::SYN, 1, 0), b"x");
        f[14 + 9] = proto::UDP;
        ipv4::Packet::new_unchecked(&mut f[14..]).fill_checksum();
        let mut buf = MemBuf::new([0u8; 256], 0, &f).unwrap();
        assert_eq!(tcp_reset(&mut buf, LB_MAC), Err(ReplyError::NotTcp));
        let mut f = segment(c, v, &client_segment(Flags::SYN, 1, 0), b"x");
        ipv4::Packet::new_unchecked(&mut f[14..]).set_frag(false, true, 0);
        ipv4::Packet::new_unchecked(&mut f[14..]).fill_checksum();
        let mut buf = MemBuf::new([0u8; 256], 0, &f).unwrap();
        assert_eq!(tcp_reset(&mut buf, LB_MAC), Err(ReplyError::Fragment));
        for n in 0..f.len() {
            let mut buf = MemBuf::new([0u8; 256], 0, &f[..n]).unwrap();
            assert!(tcp_reset(&mut buf, LB_MAC).is_err());
        }
    }

    #[test]
    fn a_syn_with_payload_is_acknowledged_in_full() {
        let c = IpAddr::V6("2001:db8::1".parse().unwrap());
        let v = IpAddr::V6("2001:db8::2".parse().unwrap());
        let f = segment(c, v, &client_segment(Flags::SYN, 100, 0), b"early data");
        let mut buf = MemBuf::new([0u8; 256], 0, &f).unwrap();
        tcp_reset(&mut buf, LB_MAC).unwrap();
        let out = buf.data();
        assert_eq!(out.len(), 14 + 40 + 20);
        let ip = ipv6::Packet::new_checked(&out[14..]).unwrap();
        assert_eq!(ip.hop_limit(), RESET_TTL);
        let t = tcp::Packet::new_checked(ip.payload()).unwrap();
        assert!(t.verify_checksum(&v, &c));
        assert_eq!((t.seq(), t.ack()), (0, 100 + 10 + 1));
        assert_eq!(t.flags(), Flags::RST.union(Flags::ACK));
    }

    /// An untagged ICMP echo request frame (type `t`), checksummed, with
    /// `pad` bytes of Ethernet padding after the IP packet.
    fn echo(src: IpAddr, dst: IpAddr, t: u8, pad: usize) -> Vec<u8> {
        let body = [0x12, 0x34, 0x00, 0x07, b'p', b'i', b'n', b'g'];
        let (et, ip_len) = match src {
            IpAddr::V4(_) => (ethertype::IPV4, 20),
            IpAddr::V6(_) => (ethertype::IPV6, 40),
        };
        let ml = 4 + body.len();
        let mut f = vec![0u8; 14 + ip_len + ml + pad];
        EthernetRepr::untagged(LB_MAC, CLIENT_MAC, et)
            .emit(&mut f)
            .unwrap();
        let len = crate::cast::len16(ml);
        ip_header(
            &mut f[14..],
            src,
            dst,
            if src.is_ipv4() {
                proto::ICMP
            } else {
                proto::ICMPV6
            },
            len,
            true,
        );
        let m = &mut f[14 + ip_len..14 + ip_len + ml];
        m[0] = t;
        m[4..].copy_from_slice(&body);
        match (src, dst) {
            (IpAddr::V4(_), _) => icmpv4::Packet::new_unchecked(m).fill_checksum(),
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                icmpv6::Packet::new_unchecked(m).fill_checksum(&s, &d)
            }
            _ => unreachable!(),
        }
        f
    }

    #[test]
    fn echo_requests_are_answered_in_place() {
        let c4 = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1));
        let v4 = IpAddr::V4(Ipv4Addr::new(198, 51, 100, 1));
        let f = echo(c4, v4, icmpv4::msg::ECHO_REQUEST, 6);
        let mut b = MemBuf::new(vec![0u8; 256], 64, &f).unwrap();
        echo_reply(&mut b, LB_MAC).unwrap();
        let r = b.data();
        assert_eq!(r.len(), f.len() - 6, "padding trimmed");
        assert_eq!((&r[0..6], &r[6..12]), (&CLIENT_MAC[..], &LB_MAC[..]));
        let ip = ipv4::Packet::new_checked(&r[14..]).unwrap();
        assert!(ip.verify_checksum());
        assert_eq!(
            (ip.src(), ip.dst(), ip.ttl()),
            (
                Ipv4Addr::new(198, 51, 100, 1),
                Ipv4Addr::new(192, 0, 2, 1),
                64
            )
        );
        let m = icmpv4::Packet::new_checked(ip.payload()).unwrap();
        assert!(m.verify_checksum());
        assert_eq!((m.msg_type(), m.code()), (icmpv4::msg::ECHO_REPLY, 0));
        assert_eq!(
            &ip.payload()[4..],
            &f[14 + 20 + 4..f.len() - 6],
            "identifier, sequence and data echoed"
        );

        let c6 = IpAddr::V6("2001:db8::1".parse().unwrap());
        let v6 = IpAddr::V6("2001:db8:1::10".parse().unwrap());
        let f = echo(c6, v6, icmpv6::msg::ECHO_REQUEST, 0);
        let mut b = MemBuf::new(vec![0u8; 256], 64, &f).unwrap();
        echo_reply(&mut b, LB_MAC).unwrap();
        let r = b.data();
        let ip = ipv6::Packet::new_checked(&r[14..]).unwrap();
        assert_eq!(
            (IpAddr::V6(ip.src()), IpAddr::V6(ip.dst()), ip.hop_limit()),
            (v6, c6, 64)
        );
        let m = icmpv6::Packet::new_checked(&r[54..]).unwrap();
        assert!(m.verify_checksum(&ip.src(), &ip.dst()));
        assert_eq!(m.msg_type(), icmpv6::msg::ECHO_REPLY);
        assert_eq!(&r[58..], &f[58..]);
    }

    #[test]
    fn what_is_never_echoed() {
        let c = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1));
        let v = IpAddr::V4(Ipv4Addr::new(198, 51, 100, 1));
        let check = |f: Vec<u8>, want: fn(&ReplyError) -> bool| {
            let mut b = MemBuf::new(vec![0u8; 256], 64, &f).unwrap();
            let e = echo_reply(&mut b, LB_MAC).unwrap_err();
            assert!(want(&e), "{e:?}");
            assert_eq!(b.data(), &f[..], "frame unchanged");
        };
        // A reply, not a request.
        check(echo(c, v, icmpv4::msg::ECHO_REPLY, 0), |e| {
            matches!(e, ReplyError::NotEcho)
        });
        // A broadcast destination.
        check(
            echo(
                c,
                IpAddr::V4(Ipv4Addr::BROADCAST),
                icmpv4::msg::ECHO_REQUEST,
                0,
            ),
            |e| matches!(e, ReplyError::BadSource),
        );
        // A corrupted ICMP checksum.
        let mut f = echo(c, v, icmpv4::msg::ECHO_REQUEST, 0);
        f[14 + 20 + 6] ^= 0xff;
        check(f, |e| {
            matches!(e, ReplyError::Parse(ParseError::BadChecksum))
        });
        // A fragment (MF set, header checksum fixed).
        let mut f = echo(c, v, icmpv4::msg::ECHO_REQUEST, 0);
        let mut ip = ipv4::Packet::new_unchecked(&mut f[14..34]);
        ip.set_frag(false, true, 0);
        ip.fill_checksum();
        check(f, |e| matches!(e, ReplyError::Fragment));
        // From a multicast MAC.
        let mut f = echo(c, v, icmpv4::msg::ECHO_REQUEST, 0);
        f[6] |= 1;
        check(f, |e| matches!(e, ReplyError::BadSource));
        // ICMPv6 to a multicast address.
        let c6 = IpAddr::V6("2001:db8::1".parse().unwrap());
        let m6 = IpAddr::V6("ff02::1".parse().unwrap());
        check(echo(c6, m6, icmpv6::msg::ECHO_REQUEST, 0), |e| {
            matches!(e, ReplyError::BadSource)
        });
        // Truncated: the IP length says more than the frame holds.
        let f = echo(c, v, icmpv4::msg::ECHO_REQUEST, 0);
        check(f[..f.len() - 3].to_vec(), |e| {
            matches!(e, ReplyError::Parse(_))
        });
    }
}
