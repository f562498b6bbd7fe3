//! IPv6 Neighbor Discovery (RFC 4861): Neighbor Solicitation and Neighbor Advertisement
//! messages with their link-layer address options, the validity rules of §7.1, and the
//! in-place answer to a solicitation for one of the balancer's addresses (§7.2.4).
//!
//! # Design
//!
//! The messages are ICMPv6 messages; [`crate::icmpv6::Packet`] already gives type, code and
//! checksum, so this module only adds what follows the first 8 bytes (target address and
//! options), the validation, and two `Copy` reprs with `parse`/`emit`. Validation is strict
//! because an answer announces our MAC for an address: a message that fails any check of
//! RFC 4861 §7.1 (hop limit 255, code 0, length, non-multicast target, option lengths, the
//! duplicate-address-detection rules) or is fragmented (RFC 6980) is rejected with an
//! [`NdpError`], and the data plane drops and counts it.
//!
//! [`answer_solicitation`] rewrites the received frame into the advertisement, keeping its
//! VLAN tags. The answer (72 bytes of IPv6) can be longer than a solicitation without a
//! source link-layer option, so the frame grows into its headroom; it is written from
//! scratch, extension headers of the solicitation are not copied.

use core::net::Ipv6Addr;

use crate::buf::{PacketBuf, resize_for_rewrite};
use crate::error::{NdpError, ParseError, ReplyError};
use crate::ethernet::{EthernetRepr, MacAddr, ethertype};
use crate::icmpv6::{self, msg};
use crate::ip::proto;
use crate::ipv6::{self, Ipv6Repr};
use crate::{arr, need};

mod field {
    use core::ops::Range;
    pub const FLAGS: usize = 4;
    pub const TARGET: Range<usize> = 8..24;
    pub const OPTIONS: usize = 24;
}

/// Length of a solicitation or advertisement without options.
pub const MESSAGE_LEN: usize = field::OPTIONS;
/// Length of an Ethernet link-layer address option.
pub const LL_OPTION_LEN: usize = 8;
/// Hop limit every neighbor discovery message is sent and received with.
pub const HOP_LIMIT: u8 = 255;

/// Neighbor discovery option types.
pub mod option {
    /// Source link-layer address.
    pub const SOURCE_LL: u8 = 1;
    /// Target link-layer address.
    pub const TARGET_LL: u8 = 2;
}

/// The all-nodes multicast address `ff02::1`.
pub const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);

/// Whether `a` is a solicited-node multicast address (`ff02::1:ff00:0/104`).
pub fn is_solicited_node(a: &Ipv6Addr) -> bool {
    a.octets()[..13] == [0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff]
}

/// The solicited-node multicast address of `target` (RFC 4291 §2.7.1).
pub fn solicited_node(target: &Ipv6Addr) -> Ipv6Addr {
    let t = target.octets();
    let mut a = [0u8; 16];
    a[..13].copy_from_slice(&[0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff]);
    a[13..].copy_from_slice(&t[13..]);
    Ipv6Addr::from(a)
}

/// The Ethernet multicast MAC of an IPv6 multicast address (`33:33` + its last 32 bits,
/// RFC 2464 §7).
pub fn multicast_mac(a: &Ipv6Addr) -> MacAddr {
    let o = a.octets();
    [0x33, 0x33, o[12], o[13], o[14], o[15]]
}

/// Neighbor Advertisement flags (the top bits of the message's 32-bit flags field).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct NaFlags(pub u8);

impl NaFlags {
    /// R: the sender is a router.
    pub const ROUTER: NaFlags = NaFlags(0x80);
    /// S: sent in response to a solicitation.
    pub const SOLICITED: NaFlags = NaFlags(0x40);
    /// O: overrides an existing cache entry.
    pub const OVERRIDE: NaFlags = NaFlags(0x20);
    /// Whether every flag of `other` is set.
    pub const fn contains(self, other: NaFlags) -> bool {
        self.0 & other.0 == other.0
    }
    /// Union.
    pub const fn union(self, other: NaFlags) -> NaFlags {
        NaFlags(self.0 | other.0)
    }
}

/// Walks the options after the fixed part of a message: every option must have a non-zero
/// length and fit (RFC 4861 §7.1). Returns the first link-layer address option of `kind`.
fn ll_option(mut opts: &[u8], kind: u8) -> Result<Option<MacAddr>, ParseError> {
    let mut found = None;
    while !opts.is_empty() {
        need(opts, 2)?;
        let len = usize::from(opts[1]) * 8;
        if len == 0 {
            return Err(ParseError::BadOption);
        }
        need(opts, len)?;
        if opts[0] == kind && found.is_none() {
            found = Some(arr(opts, 2));
        }
        opts = &opts[len..];
    }
    Ok(found)
}

/// Checks what solicitations and advertisements share (§7.1.1, §7.1.2): type, hop limit,
/// checksum, code, length and a non-multicast target. Returns the target.
fn check_common(
    msg: &[u8],
    msg_type: u8,
    src: &Ipv6Addr,
    dst: &Ipv6Addr,
    hop_limit: u8,
) -> Result<Ipv6Addr, NdpError> {
    let p = icmpv6::Packet::new_checked(msg)?;
    if p.msg_type() != msg_type {
        return Err(NdpError::WrongType);
    }
    if hop_limit != HOP_LIMIT {
        return Err(NdpError::HopLimit);
    }
    if !p.verify_checksum(src, dst) {
        return Err(NdpError::Parse(ParseError::BadChecksum));
    }
    if p.code() != 0 {
        return Err(NdpError::Code);
    }
    if msg.len() < MESSAGE_LEN {
        return Err(NdpError::TooShort);
    }
    let target = Ipv6Addr::from(arr::<16>(msg, field::TARGET.start));
    if target.is_multicast() {
        return Err(NdpError::MulticastTarget);
    }
    Ok(target)
}

/// Writes type, code 0, the flags word, target and an optional link-layer option, then the
/// checksum; `msg` must be exactly the message (its length is what the checksum covers).
fn emit_common(
    msg: &mut [u8],
    msg_type: u8,
    flags: u8,
    target: &Ipv6Addr,
    ll: Option<(u8, MacAddr)>,
    src: &Ipv6Addr,
    dst: &Ipv6Addr,
) -> Result<(), ParseError> {
    let len = MESSAGE_LEN + if ll.is_some() { LL_OPTION_LEN } else { 0 };
    if msg.len() != len {
        return Err(ParseError::BadLength);
    }
    msg[..field::TARGET.start].fill(0);
    msg[field::FLAGS] = flags;
    msg[field::TARGET].copy_from_slice(&target.octets());
    if let Some((kind, mac)) = ll {
        let o = &mut msg[field::OPTIONS..];
        o[0] = kind;
        o[1] = crate::cast::len8(LL_OPTION_LEN / 8);
        o[2..8].copy_from_slice(&mac);
    }
    let mut p = icmpv6::Packet::new_unchecked(msg);
    p.set_msg_type(msg_type);
    p.set_code(0);
    p.fill_checksum(src, dst);
    Ok(())
}

/// A Neighbor Solicitation (RFC 4861 §4.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NeighborSolicitRepr {
    /// The address whose link-layer address is asked for.
    pub target: Ipv6Addr,
    /// The sender's link-layer address (absent in duplicate address detection).
    pub source_ll: Option<MacAddr>,
}

impl NeighborSolicitRepr {
    /// Parses and validates (RFC 4861 §7.1.1) the ICMPv6 message `msg` — exactly the
    /// message, as long as the IP length says — received from `src` for `dst` with
    /// `hop_limit`.
    pub fn parse(
        msg: &[u8],
        src: &Ipv6Addr,
        dst: &Ipv6Addr,
        hop_limit: u8,
    ) -> Result<Self, NdpError> {
        let target = check_common(msg, msg::NEIGHBOR_SOLICIT, src, dst, hop_limit)?;
        let source_ll = ll_option(&msg[field::OPTIONS..], option::SOURCE_LL)?;
        // Nothing may be sent from a group address (RFC 4291 §2.7); answering one
        // would send a solicited advertisement to a group.
        if src.is_multicast() || source_ll.is_some_and(|m| m[0] & 1 != 0) {
            return Err(NdpError::MulticastSource);
        }
        if src.is_unspecified() && (!is_solicited_node(dst) || source_ll.is_some()) {
            return Err(NdpError::BadDad);
        }
        Ok(NeighborSolicitRepr { target, source_ll })
    }

    /// Length of the emitted message.
    pub const fn buffer_len(&self) -> usize {
        MESSAGE_LEN
            + if self.source_ll.is_some() {
                LL_OPTION_LEN
            } else {
                0
            }
    }

    /// Writes the message with its checksum into `msg`, which must be exactly
    /// `buffer_len()` bytes long.
    pub fn emit(&self, msg: &mut [u8], src: &Ipv6Addr, dst: &Ipv6Addr) -> Result<(), ParseError> {
        emit_common(
            msg,
            msg::NEIGHBOR_SOLICIT,
            0,
            &self.target,
            self.source_ll.map(|m| (option::SOURCE_LL, m)),
            src,
            dst,
        )
    }
}

/// A Neighbor Advertisement (RFC 4861 §4.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NeighborAdvertRepr {
    /// Router, Solicited and Override flags.
    pub flags: NaFlags,
    /// The address advertised.
    pub target: Ipv6Addr,
    /// The target's link-layer address.
    pub target_ll: Option<MacAddr>,
}

impl NeighborAdvertRepr {
    /// Parses and validates (RFC 4861 §7.1.2) the ICMPv6 message `msg` received from `src`
    /// for `dst` with `hop_limit`.
    pub fn parse(
        msg: &[u8],
        src: &Ipv6Addr,
        dst: &Ipv6Addr,
        hop_limit: u8,
    ) -> Result<Self, NdpError> {
        let target = check_common(msg, msg::NEIGHBOR_ADVERT, src, dst, hop_limit)?;
        let flags = NaFlags(msg[field::FLAGS] & 0xe0);
        if dst.is_multicast() && flags.contains(NaFlags::SOLICITED) {
            return Err(NdpError::SolicitedMulticast);
        }
        let target_ll = ll_option(&msg[field::OPTIONS..], option::TARGET_LL)?;
        Ok(NeighborAdvertRepr {
            flags,
            target,
            target_ll,
        })
    }

    /// Length of the emitted message.
    pub const fn buffer_len(&self) -> usize {
        MESSAGE_LEN
            + if self.target_ll.is_some() {
                LL_OPTION_LEN
            } else {
                0
            }
    }

    /// Writes the message with its checksum into `msg`, which must be exactly
    /// `buffer_len()` bytes long. Reserved bits are written as zero.
    pub fn emit(&self, msg: &mut [u8], src: &Ipv6Addr, dst: &Ipv6Addr) -> Result<(), ParseError> {
        emit_common(
            msg,
            msg::NEIGHBOR_ADVERT,
            self.flags.0 & 0xe0,
            &self.target,
            self.target_ll.map(|m| (option::TARGET_LL, m)),
            src,
            dst,
        )
    }
}

/// A valid Neighbor Solicitation received in an Ethernet frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Solicitation {
    /// The frame's Ethernet header (with its VLAN tags).
    pub eth: EthernetRepr,
    /// IPv6 source (`::` for duplicate address detection).
    pub src: Ipv6Addr,
    /// IPv6 destination (the target's solicited-node group, or the target itself).
    pub dst: Ipv6Addr,
    /// The solicitation.
    pub ns: NeighborSolicitRepr,
}

impl Solicitation {
    /// Where the answer goes (RFC 4861 §7.2.4): `(IPv6 destination, Ethernet destination,
    /// Solicited flag)`. A solicitation from `::` is answered to all nodes, unsolicited;
    /// any other to its sender, at its source link-layer address if it gave one, else at
    /// the frame's source MAC.
    pub fn reply_to(&self) -> (Ipv6Addr, MacAddr, bool) {
        if self.src.is_unspecified() {
            (ALL_NODES, multicast_mac(&ALL_NODES), false)
        } else {
            (self.src, self.ns.source_ll.unwrap_or(self.eth.src), true)
        }
    }
}

/// Parses and validates a frame carrying a Neighbor Solicitation: Ethernet (with up to two
/// VLAN tags), IPv6, any extension headers but a fragment header (RFC 6980), and the message
/// itself (RFC 4861 §7.1.1).
pub fn parse_solicitation(frame: &[u8]) -> Result<Solicitation, NdpError> {
    let eth = EthernetRepr::parse(frame)?;
    if eth.ethertype != ethertype::IPV6 {
        return Err(NdpError::WrongType);
    }
    if eth.src[0] & 1 != 0 {
        return Err(NdpError::MulticastSource);
    }
    let l3 = frame.get(eth.header_len()..).unwrap_or(&[]);
    let ip = ipv6::Packet::new_checked(l3)?;
    let end = ipv6::HEADER_LEN + usize::from(ip.payload_len());
    let payload = l3.get(ipv6::HEADER_LEN..end).ok_or(ParseError::Truncated)?;
    let walk = ipv6::walk_extensions(payload, ip.next_header())?;
    if walk.fragment.is_some() {
        return Err(NdpError::Fragmented);
    }
    if walk.upper != proto::ICMPV6 {
        return Err(NdpError::WrongType);
    }
    let msg = payload.get(walk.offset..).ok_or(ParseError::Truncated)?;
    let (src, dst) = (ip.src(), ip.dst());
    let ns = NeighborSolicitRepr::parse(msg, &src, &dst, ip.hop_limit())?;
    Ok(Solicitation { eth, src, dst, ns })
}

/// Length of the frame [`answer_solicitation`] writes for `sol`.
pub const fn answer_len(sol: &Solicitation) -> usize {
    sol.eth.header_len() + ipv6::HEADER_LEN + MESSAGE_LEN + LL_OPTION_LEN
}

/// Rewrites the frame `pkt` that carried `sol` into the Neighbor Advertisement answering it
/// for `sol.ns.target` at `mac` (RFC 4861 §7.2.4): Override set, Router clear, Solicited
/// unless answering duplicate address detection; the target link-layer address option;
/// IPv6 from the target with hop limit 255; Ethernet from `mac`, VLAN tags kept.
///
/// The caller decides that the target is ours. The frame grows into its headroom when the
/// solicitation was shorter than the answer; on a buffer error it is left unchanged.
pub fn answer_solicitation<B: PacketBuf + ?Sized>(
    pkt: &mut B,
    sol: &Solicitation,
    mac: MacAddr,
) -> Result<(), ReplyError> {
    let (dst, dst_mac, solicited) = sol.reply_to();
    let src = sol.ns.target;
    let l2 = sol.eth.header_len();
    resize_for_rewrite(pkt, answer_len(sol))?;
    let data = pkt.data_mut();
    EthernetRepr {
        dst: dst_mac,
        src: mac,
        ethertype: ethertype::IPV6,
        ..sol.eth
    }
    .emit(data)?;
    let (ip, msg) = data
        .get_mut(l2..)
        .and_then(|b| b.split_at_mut_checked(ipv6::HEADER_LEN))
        .ok_or(ParseError::Truncated)?;
    Ipv6Repr {
        src,
        dst,
        next_header: proto::ICMPV6,
        payload_len: crate::cast::len16(MESSAGE_LEN + LL_OPTION_LEN),
        hop_limit: HOP_LIMIT,
        traffic_class: 0,
        flow_label: 0,
    }
    .emit(&mut ipv6::Packet::new_unchecked(ip))?;
    let flags = if solicited {
        NaFlags::SOLICITED.union(NaFlags::OVERRIDE)
    } else {
        NaFlags::OVERRIDE
    };
    NeighborAdvertRepr {
        flags,
        target: src,
        target_ll: Some(mac),
    }
    .emit(msg, &src, &dst)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buf::MemBuf;

    const CLIENT: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x10);
    const VIP: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0, 0, 0, 0, 1);
    const CLIENT_MAC: MacAddr = [2, 0, 0, 0, 0, 1];
    const LB_MAC: MacAddr = [2, 0, 0, 0, 0, 2];

    fn ns_msg(ns: &NeighborSolicitRepr, src: &Ipv6Addr, dst: &Ipv6Addr) -> Vec<u8> {
        let mut m = vec![0xa5; ns.buffer_len()];
        ns.emit(&mut m, src, dst).unwrap();
        m
    }

    fn frame(src: &Ipv6Addr, dst: &Ipv6Addr, hop_limit: u8, msg: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; 14 + 40 + msg.len()];
        EthernetRepr::untagged(multicast_mac(dst), CLIENT_MAC, ethertype::IPV6)
            .emit(&mut f)
            .unwrap();
        Ipv6Repr {
            src: *src,
            dst: *dst,
            next_header: proto::ICMPV6,
            payload_len: crate::cast::len16(msg.len()),
            hop_limit,
            traffic_class: 0,
            flow_label: 0,
        }
        .emit(&mut ipv6::Packet::new_unchecked(&mut f[14..]))
        .unwrap();
        f[54..].copy_from_slice(msg);
        f
    }

    #[test]
    fn solicited_node_addresses() {
        let s = solicited_node(&VIP);
        assert_eq!(s, "ff02::1:ff00:1".parse::<Ipv6Addr>().unwrap());
        assert!(is_solicited_node(&s));
        assert!(!is_solicited_node(&ALL_NODES));
        assert_eq!(multicast_mac(&s), [0x33, 0x33, 0xff, 0, 0, 1]);
    }

    #[test]
    fn solicitation_validation() {
        let sn = solicited_node(&VIP);
        let ns = NeighborSolicitRepr {
            target: VIP,
            source_ll: Some(CLIENT_MAC),
        };
        let m = ns_msg(&ns, &CLIENT, &sn);
        assert_eq!(NeighborSolicitRepr::parse(&m, &CLIENT, &sn, 255), Ok(ns));
        assert_eq!(
            NeighborSolicitRepr::parse(&m, &CLIENT, &sn, 64),
            Err(NdpError::HopLimit)
        );
        assert_eq!(
            NeighborSolicitRepr::parse(&m, &CLIENT, &VIP, 255),
            Err(NdpError::Parse(ParseError::BadChecksum)),
            "the pseudo header covers the destination"
        );
        let mut bad = m.clone();
        bad[1] = 1;
        icmpv6::Packet::new_unchecked(&mut bad[..]).fill_checksum(&CLIENT, &sn);
        assert_eq!(
            NeighborSolicitRepr::parse(&bad, &CLIENT, &sn, 255),
            Err(NdpError::Code)
        );
        let mut short = m[..20].to_vec();
        icmpv6::Packet::new_unchecked(&mut short[..]).fill_checksum(&CLIENT, &sn);
        assert_eq!(
            NeighborSolicitRepr::parse(&short, &CLIENT, &sn, 255),
            Err(NdpError::TooShort)
        );
        let mc = ns_msg(
            &NeighborSolicitRepr {
                target: sn,
                source_ll: None,
            },
            &CLIENT,
            &sn,
        );
        assert_eq!(
            NeighborSolicitRepr::parse(&mc, &CLIENT, &sn, 255),
            Err(NdpError::MulticastTarget)
        );
        let mut zero_opt = m.clone();
        zero_opt[25] = 0;
        icmpv6::Packet::new_unchecked(&mut zero_opt[..]).fill_checksum(&CLIENT, &sn);
        assert_eq!(
            NeighborSolicitRepr::parse(&zero_opt, &CLIENT, &sn, 255),
            Err(NdpError::Parse(ParseError::BadOption))
        );
        let mut long_opt = m.clone();
        long_opt[25] = 2;
        icmpv6::Packet::new_unchecked(&mut long_opt[..]).fill_checksum(&CLIENT, &sn);
        assert_eq!(
            NeighborSolicitRepr::parse(&long_opt, &CLIENT, &sn, 255),
            Err(NdpError::Parse(ParseError::Truncated))
        );
        // Duplicate address detection: from ::, to the solicited-node group, no option.
        let u = Ipv6Addr::UNSPECIFIED;
        assert_eq!(
            NeighborSolicitRepr::parse(&ns_msg(&ns, &u, &sn), &u, &sn, 255),
            Err(NdpError::BadDad)
        );
        let dad = NeighborSolicitRepr {
            target: VIP,
            source_ll: None,
        };
        assert_eq!(
            NeighborSolicitRepr::parse(&ns_msg(&dad, &u, &sn), &u, &sn, 255),
            Ok(dad)
        );
        assert_eq!(
            NeighborSolicitRepr::parse(&ns_msg(&dad, &u, &VIP), &u, &VIP, 255),
            Err(NdpError::BadDad)
        );
        // Nothing is answered towards a group.
        let group = ALL_NODES;
        assert_eq!(
            NeighborSolicitRepr::parse(&ns_msg(&dad, &group, &sn), &group, &sn, 255),
            Err(NdpError::MulticastSource)
        );
        let group_ll = NeighborSolicitRepr {
            target: VIP,
            source_ll: Some([0x33, 0x33, 0, 0, 0, 1]),
        };
        assert_eq!(
            NeighborSolicitRepr::parse(&ns_msg(&group_ll, &CLIENT, &sn), &CLIENT, &sn, 255),
            Err(NdpError::MulticastSource)
        );
        // An advertisement is not a solicitation.
        let na = NeighborAdvertRepr {
            flags: NaFlags::OVERRIDE,
            target: VIP,
            target_ll: None,
        };
        let mut m = [0u8; MESSAGE_LEN];
        na.emit(&mut m, &VIP, &ALL_NODES).unwrap();
        assert_eq!(
            NeighborSolicitRepr::parse(&m, &VIP, &ALL_NODES, 255),
            Err(NdpError::WrongType)
        );
        assert_eq!(NeighborAdvertRepr::parse(&m, &VIP, &ALL_NODES, 255), Ok(na));
        let solicited = NeighborAdvertRepr {
            flags: NaFlags::SOLICITED,
            ..na
        };
        solicited.emit(&mut m, &VIP, &ALL_NODES).unwrap();
        assert_eq!(
            NeighborAdvertRepr::parse(&m, &VIP, &ALL_NODES, 255),
            Err(NdpError::SolicitedMulticast)
        );
        assert!(ns.emit(&mut [0u8; 24], &CLIENT, &sn).is_err());
    }

    #[test]
    fn answering_grows_a_short_solicitation() {
        // NUD probe: unicast to the target, no source link-layer option (24 bytes).
        let ns = NeighborSolicitRepr {
            target: VIP,
            source_ll: None,
        };
        let f = frame(&CLIENT, &VIP, 255, &ns_msg(&ns, &CLIENT, &VIP));
        let sol = parse_solicitation(&f).unwrap();
        assert_eq!(sol.reply_to(), (CLIENT, CLIENT_MAC, true));
        let mut buf = MemBuf::new([0xa5u8; 256], 64, &f).unwrap();
        answer_solicitation(&mut buf, &sol, LB_MAC).unwrap();
        let out = buf.data();
        assert_eq!(out.len(), 14 + 40 + 32);
        let eth = EthernetRepr::parse(out).unwrap();
        assert_eq!((eth.dst, eth.src), (CLIENT_MAC, LB_MAC));
        let ip = ipv6::Packet::new_checked(&out[14..]).unwrap();
        assert_eq!((ip.src(), ip.dst(), ip.hop_limit()), (VIP, CLIENT, 255));
        let na = NeighborAdvertRepr::parse(ip.payload(), &VIP, &CLIENT, 255).unwrap();
        assert_eq!(
            na,
            NeighborAdvertRepr {
                flags: NaFlags::SOLICITED.union(NaFlags::OVERRIDE),
                target: VIP,
                target_ll: Some(LB_MAC),
            }
        );
        // Without headroom the frame is left alone.
        let mut buf = MemBuf::new([0u8; 256], 0, &f).unwrap();
        assert!(matches!(
            answer_solicitation(&mut buf, &sol, LB_MAC),
            Err(ReplyError::Buf(_))
        ));
        assert_eq!(buf.data(), &f[..]);
    }

    #[test]
    fn fragmented_and_forwarded_solicitations_are_rejected() {
        let sn = solicited_node(&VIP);
        let ns = NeighborSolicitRepr {
            target: VIP,
            source_ll: Some(CLIENT_MAC),
        };
        let m = ns_msg(&ns, &CLIENT, &sn);
        assert_eq!(
            parse_solicitation(&frame(&CLIENT, &sn, 254, &m)),
            Err(NdpError::HopLimit)
        );
        // The same message behind an atomic fragment header.
        let mut fh = [0u8; 8];
        ipv6::FragmentRepr {
            next_header: proto::ICMPV6,
            offset: 0,
            more_frags: false,
            ident: 1,
        }
        .emit(&mut fh)
        .unwrap();
        let mut body = fh.to_vec();
        body.extend_from_slice(&m);
        let mut f = frame(&CLIENT, &sn, 255, &body);
        f[20] = proto::IPV6_FRAG;
        assert_eq!(parse_solicitation(&f), Err(NdpError::Fragmented));
        for n in 0..f.len() {
            assert!(parse_solicitation(&f[..n]).is_err());
        }
    }
}
