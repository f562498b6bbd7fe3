//! Flow keys (M9, M13, M31) and the stable `spillway-flow-v1` hash.
//!
//! # Which key a packet gets
//!
//! * Affinity `None` and `ClientIpPortProto` hash the 5-tuple (GCP defines
//!   `CLIENT_IP_PORT_PROTO` as a 5-tuple hash too; the two differ only in connection
//!   tracking, which is not this crate's business); `ClientIpProto` the 3-tuple (source,
//!   destination, protocol); `ClientIp` the 2-tuple (source, destination).
//! * Protocols without ports (ESP, GRE, ICMP, …) fall back from 5- to 3-tuple.
//! * **Fragments**: a later fragment has no ports, so to keep all fragments of a datagram on
//!   one backend (M13) *every* fragment — the first one included — uses the 3-tuple (or the
//!   2-tuple under `ClientIp`). Non-fragmented packets of the same flow still use the
//!   5-tuple; a datagram that is fragmented may therefore reach a different backend than the
//!   flow's unfragmented packets would, which is what Maglev and Katran do as well. An IPv6
//!   atomic fragment (offset 0, M = 0, RFC 6946) is a whole packet and keeps its 5-tuple.
//! * **ICMP errors** are keyed by the packet they quote, reversed: an error sent to the VIP
//!   quotes a packet the backend sent from the VIP to the client, so swapping source and
//!   destination (addresses and ports) yields the key of the original client → VIP flow.
//!   A quoted first fragment still carries its ports and gets that 5-tuple key; a quoted
//!   later fragment gets the 3-tuple.
//! * The **symmetric** key orders the two endpoints so that both directions of a connection
//!   give the same key (gateway mode, M31).
//!
//! # Hash (`spillway-flow-v1`)
//!
//! The key is packed into five big-endian 64-bit words ([`FlowKey::pack`]) and hashed with
//! [`hash_words`]: two folded 64×64→128-bit multiplications over word pairs mixed with fixed
//! constants (digits of π), a third folding the fifth word with their combination, and a
//! final fold. The constants and the packing are part of the wire contract: nodes of a
//! cluster must agree on them, so they never change; a new algorithm gets a new name.

use core::net::IpAddr;

use crate::ip::{is_mapped_v4, unmap};
use crate::packet::{IcmpInfo, PacketInfo, QuotedFlow};

/// Session affinity of a backend service (M9).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Affinity {
    /// 5-tuple.
    #[default]
    None,
    /// 5-tuple (client IP, client port, protocol, VIP, VIP port).
    ClientIpPortProto,
    /// 3-tuple: client IP, VIP, protocol.
    ClientIpProto,
    /// 2-tuple: client IP, VIP.
    ClientIp,
}

impl Affinity {
    /// How the last word of a packed key ([`FlowKey::pack`]: ports, protocol, tuple) is made
    /// under this affinity, for [`FlowKey::pack_v4_with`].
    #[must_use]
    pub const fn last_word(self) -> LastWord {
        const PORTS: u64 = 0xffff_ffff << 32;
        const PROTO: u64 = 0xff << 24;
        let (keep, tuple) = match self {
            Affinity::ClientIp => (0, Tuple::Two),
            Affinity::ClientIpProto => (PROTO, Tuple::Three),
            Affinity::None | Affinity::ClientIpPortProto => (PORTS | PROTO, Tuple::Five),
        };
        LastWord {
            keep,
            tuple: (tuple as u64) << 16,
        }
    }
}

/// The affinity-dependent part of a packed key's last word: which of the ports and protocol
/// bits it keeps, and its tuple bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LastWord {
    keep: u64,
    tuple: u64,
}

impl LastWord {
    /// The last word of the packed key of a packet with this protocol and these ports.
    #[inline(always)]
    const fn of(self, proto: u8, ports: (u16, u16)) -> u64 {
        let all = ((ports.0 as u64) << 48) | ((ports.1 as u64) << 32) | ((proto as u64) << 24);
        (all & self.keep) | self.tuple
    }
}

/// Which fields of a [`FlowKey`] are significant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Tuple {
    /// Source and destination addresses.
    Two = 2,
    /// Addresses and protocol.
    Three = 3,
    /// Addresses, protocol and ports.
    Five = 5,
}

/// A flow key. Addresses are 16 bytes (IPv4 as IPv4-mapped IPv6); fields not covered by
/// the key's [`Tuple`] are zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FlowKey {
    /// Source address.
    pub src: [u8; 16],
    /// Destination address.
    pub dst: [u8; 16],
    /// Source port (0 unless 5-tuple).
    pub src_port: u16,
    /// Destination port (0 unless 5-tuple).
    pub dst_port: u16,
    /// Protocol (0 for a 2-tuple).
    pub proto: u8,
    /// Significant fields.
    pub tuple: Tuple,
}

impl FlowKey {
    /// A 5-tuple key.
    pub const fn five(
        src: [u8; 16],
        dst: [u8; 16],
        proto: u8,
        src_port: u16,
        dst_port: u16,
    ) -> Self {
        FlowKey {
            src,
            dst,
            src_port,
            dst_port,
            proto,
            tuple: Tuple::Five,
        }
    }
    /// A 3-tuple key.
    pub const fn three(src: [u8; 16], dst: [u8; 16], proto: u8) -> Self {
        FlowKey {
            src,
            dst,
            src_port: 0,
            dst_port: 0,
            proto,
            tuple: Tuple::Three,
        }
    }
    /// A 2-tuple key.
    pub const fn two(src: [u8; 16], dst: [u8; 16]) -> Self {
        FlowKey {
            src,
            dst,
            src_port: 0,
            dst_port: 0,
            proto: 0,
            tuple: Tuple::Two,
        }
    }

    /// The key for a flow under an affinity, given its ports if it has any and whether the
    /// packet is a fragment (see the module docs for the rules).
    pub const fn with_affinity(
        src: [u8; 16],
        dst: [u8; 16],
        proto: u8,
        ports: Option<(u16, u16)>,
        fragment: bool,
        affinity: Affinity,
    ) -> Self {
        match affinity {
            Affinity::ClientIp => FlowKey::two(src, dst),
            Affinity::ClientIpProto => FlowKey::three(src, dst, proto),
            Affinity::None | Affinity::ClientIpPortProto => match ports {
                Some((sp, dp)) if !fragment => FlowKey::five(src, dst, proto, sp, dp),
                _ => FlowKey::three(src, dst, proto),
            },
        }
    }

    /// The key of the flow an ICMP error refers to: the quoted packet reversed, so that the
    /// error maps to the same key as the original client → VIP flow.
    pub const fn from_quoted(q: &QuotedFlow, affinity: Affinity) -> Self {
        // A quoted *first* fragment still shows its ports: the error is about
        // a large reply the backend sent on a flow whose client packets were
        // (almost always) unfragmented, so it gets that flow's 5-tuple key.
        // Only a quoted later fragment, without ports, falls back to the
        // 3-tuple that fragments are keyed on.
        let (ports, fragment) = match q.ports {
            Some((s, d)) => (Some((d, s)), false),
            None => (None, q.fragment),
        };
        FlowKey::with_affinity(q.dst, q.src, q.proto, ports, fragment, affinity)
    }

    /// The key of a parsed packet. ICMP errors get the key of the flow they quote
    /// ([`FlowKey::from_quoted`]); everything else its own key.
    pub fn from_packet(info: &PacketInfo, affinity: Affinity) -> Self {
        if let Some(IcmpInfo {
            quoted: Some(q), ..
        }) = &info.icmp
        {
            return FlowKey::from_quoted(q, affinity);
        }
        FlowKey::with_affinity(
            info.src,
            info.dst,
            info.proto,
            info.ports,
            info.fragment.is_fragment(),
            affinity,
        )
    }

    /// Whether both addresses are IPv4 (IPv4-mapped).
    pub fn is_ipv4(&self) -> bool {
        is_mapped_v4(&self.src) && is_mapped_v4(&self.dst)
    }

    /// The source address as an `IpAddr` (IPv4-mapped addresses become IPv4).
    pub fn src_addr(&self) -> IpAddr {
        unmap(&self.src)
    }

    /// The destination address as an `IpAddr` (IPv4-mapped addresses become IPv4).
    pub fn dst_addr(&self) -> IpAddr {
        unmap(&self.dst)
    }

    /// The key with source and destination (addresses and ports) swapped.
    pub const fn reversed(&self) -> Self {
        FlowKey {
            src: self.dst,
            dst: self.src,
            src_port: self.dst_port,
            dst_port: self.src_port,
            proto: self.proto,
            tuple: self.tuple,
        }
    }

    /// The direction-independent key: endpoints ordered so that `(src, src_port) <=
    /// (dst, dst_port)`. Both directions of a connection map to the same symmetric key.
    pub fn symmetric(&self) -> Self {
        if (self.src, self.src_port) <= (self.dst, self.dst_port) {
            *self
        } else {
            self.reversed()
        }
    }

    /// [`FlowKey::symmetric`] of a packed key ([`FlowKey::pack`]): `symmetric_packed(k.pack())
    /// == k.symmetric().pack()`, without unpacking. The big-endian address words compare as
    /// the address bytes do, so the order is the same.
    #[inline(always)]
    #[must_use]
    pub const fn symmetric_packed(w: [u64; 5]) -> [u64; 5] {
        Self::symmetric_packed_dir(w).0
    }

    /// [`FlowKey::symmetric_packed`], and whether the key was reversed to
    /// make it (the packet travels against the symmetric key's order): the
    /// direction gateway mode tells apart (M53). A key whose two ends are
    /// equal is never reversed.
    #[inline(always)]
    #[must_use]
    pub const fn symmetric_packed_dir(w: [u64; 5]) -> ([u64; 5], bool) {
        let (sp, dp) = ((w[4] >> 48) & 0xffff, (w[4] >> 32) & 0xffff);
        let ordered = if w[0] != w[2] {
            w[0] < w[2]
        } else if w[1] != w[3] {
            w[1] < w[3]
        } else {
            sp <= dp
        };
        if ordered {
            (w, false)
        } else {
            (
                [
                    w[2],
                    w[3],
                    w[0],
                    w[1],
                    (w[4] & 0xffff_ffff) | (dp << 48) | (sp << 32),
                ],
                true,
            )
        }
    }

    /// The fixed 40-byte representation: source (2 words), destination (2 words) as
    /// big-endian, then `src_port << 48 | dst_port << 32 | proto << 24 | tuple << 16`.
    pub fn pack(&self) -> [u64; 5] {
        let w = |a: &[u8; 16], i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&a[i * 8..i * 8 + 8]);
            u64::from_be_bytes(b)
        };
        [
            w(&self.src, 0),
            w(&self.src, 1),
            w(&self.dst, 0),
            w(&self.dst, 1),
            (u64::from(self.src_port) << 48)
                | (u64::from(self.dst_port) << 32)
                | (u64::from(self.proto) << 24)
                | ((self.tuple as u64) << 16),
        ]
    }
    /// [`FlowKey::pack`] of the key [`FlowKey::with_affinity`] gives an unfragmented IPv4
    /// packet with ports (addresses as host-order integers), computed in registers: the
    /// data plane's fast path for TCP and UDP over IPv4.
    #[inline(always)]
    pub const fn pack_v4(
        src: u32,
        dst: u32,
        proto: u8,
        ports: (u16, u16),
        affinity: Affinity,
    ) -> [u64; 5] {
        Self::pack_v4_with(src, dst, proto, ports, affinity.last_word())
    }

    /// [`FlowKey::pack_v4`] with the affinity's part worked out beforehand
    /// ([`Affinity::last_word`]): a mask and an `or` instead of a choice per packet.
    #[inline(always)]
    pub const fn pack_v4_with(
        src: u32,
        dst: u32,
        proto: u8,
        ports: (u16, u16),
        last: LastWord,
    ) -> [u64; 5] {
        // An IPv4-mapped address (::ffff:a.b.c.d) packs to 0, 0xffff_aabb_ccdd.
        const MAPPED: u64 = 0xffff_0000_0000;
        [
            0,
            MAPPED | src as u64,
            0,
            MAPPED | dst as u64,
            last.of(proto, ports),
        ]
    }
    /// [`FlowKey::pack`] of the key [`FlowKey::with_affinity`] gives an unfragmented packet
    /// with ports between 16-byte addresses, without building the key first.
    #[inline(always)]
    pub fn pack_v6(
        src: &[u8; 16],
        dst: &[u8; 16],
        proto: u8,
        ports: (u16, u16),
        affinity: Affinity,
    ) -> [u64; 5] {
        Self::pack_v6_with(src, dst, proto, ports, affinity.last_word())
    }

    /// [`FlowKey::pack_v6`] with the affinity's part worked out beforehand, as
    /// [`FlowKey::pack_v4_with`].
    #[inline(always)]
    #[allow(
        clippy::cast_possible_truncation,
        reason = "the halves of a 128-bit address"
    )]
    pub const fn pack_v6_with(
        src: &[u8; 16],
        dst: &[u8; 16],
        proto: u8,
        ports: (u16, u16),
        last: LastWord,
    ) -> [u64; 5] {
        // Whole 16-byte loads: no slicing, nothing to check.
        let (s, d) = (u128::from_be_bytes(*src), u128::from_be_bytes(*dst));
        [
            (s >> 64) as u64,
            s as u64,
            (d >> 64) as u64,
            d as u64,
            last.of(proto, ports),
        ]
    }

    /// The inverse of [`FlowKey::pack`]; `None` for words no key packs to.
    pub fn unpack(w: &[u64; 5]) -> Option<Self> {
        let tuple = match (w[4] >> 16) & 0xff {
            2 => Tuple::Two,
            3 => Tuple::Three,
            5 => Tuple::Five,
            _ => return None,
        };
        if w[4] & SERVICE_TAG_BITS != 0 {
            return None;
        }
        let mut src = [0u8; 16];
        let mut dst = [0u8; 16];
        src[..8].copy_from_slice(&w[0].to_be_bytes());
        src[8..].copy_from_slice(&w[1].to_be_bytes());
        dst[..8].copy_from_slice(&w[2].to_be_bytes());
        dst[8..].copy_from_slice(&w[3].to_be_bytes());
        let [t0, t1, t2, t3, t4, ..] = w[4].to_be_bytes();
        Some(FlowKey {
            src,
            dst,
            src_port: u16::from_be_bytes([t0, t1]),
            dst_port: u16::from_be_bytes([t2, t3]),
            proto: t4,
            tuple,
        })
    }

    /// The `spillway-flow-v1` hash of the key (seed 0).
    #[inline]
    pub fn hash64(&self) -> u64 {
        hash_words(&self.pack(), 0)
    }

    /// The `spillway-flow-v1` hash with a seed (e.g. per VIP).
    #[inline]
    pub fn hash64_seeded(&self, seed: u64) -> u64 {
        hash_words(&self.pack(), seed)
    }
}

/// The low 16 bits of a packed key's last word, which [`FlowKey::pack`] leaves zero: where
/// the data plane stores the backend service's stable flow tag in its flow-table keys. The
/// service is part of a flow's identity (with 2-tuple affinity a TCP and a UDP rule on one VIP
/// may feed different services), but not of its hash, so that Maglev's choice stays that of
/// the packet's [`FlowKey::hash64`].
pub const SERVICE_TAG_BITS: u64 = 0xffff;

/// A packed key (from [`FlowKey::pack`] or its fast-path variants, whose service-tag bits are
/// zero) with the service's flow tag added.
#[inline(always)]
#[must_use]
pub const fn with_service_tag(mut words: [u64; 5], tag: u16) -> [u64; 5] {
    words[4] |= tag as u64;
    words
}

/// The service tag [`with_service_tag`] added to a packed key.
#[inline]
#[must_use]
pub const fn service_tag(words: &[u64; 5]) -> u16 {
    (words[4] & SERVICE_TAG_BITS) as u16
}

/// The source address of a packed key (with or without its service tag),
/// IPv4-mapped addresses as IPv4: [`FlowKey::src_addr`] without unpacking.
#[inline]
#[must_use]
pub fn source_of(words: &[u64; 5]) -> IpAddr {
    let w = |x: u64| x.to_be_bytes();
    let (hi, lo) = (w(words[0]), w(words[1]));
    let mut src = [0u8; 16];
    src[..8].copy_from_slice(&hi);
    src[8..].copy_from_slice(&lo);
    unmap(&src)
}

/// A packed key without its service tag: what [`FlowKey::unpack`] reads.
#[inline]
#[must_use]
pub const fn without_service_tag(mut words: [u64; 5]) -> [u64; 5] {
    words[4] &= !SERVICE_TAG_BITS;
    words
}

/// Name of the hash algorithm implemented by [`hash_words`].
pub const HASH_NAME: &str = "spillway-flow-v1";

/// Fixed constants of `spillway-flow-v1` (hex digits of π after the point).
const K: [u64; 6] = [
    0x243f_6a88_85a3_08d3,
    0x1319_8a2e_0370_7344,
    0xa409_3822_299f_31d0,
    0x082e_fa98_ec4e_6c89,
    0x4528_21e6_38d0_1377,
    0xbe54_66cf_34e9_0c6c,
];

/// 64×64→128-bit multiply, folded to 64 bits by xor of the halves.
#[inline(always)]
#[allow(
    clippy::cast_possible_truncation,
    reason = "splits the product in halves"
)]
const fn fold_mul(a: u64, b: u64) -> u64 {
    let r = (a as u128).wrapping_mul(b as u128);
    (r as u64) ^ ((r >> 64) as u64)
}

/// `spillway-flow-v1` over five words:
///
/// ```text
/// a = fold_mul(w0 ^ K0, w1 ^ K1 ^ seed)
/// b = fold_mul(w2 ^ K2, w3 ^ K3)
/// c = fold_mul(w4 ^ K4, a ^ b.rotate_left(32) ^ K5)
/// h = fold_mul(c ^ K0, K5 ^ seed) ^ c
/// ```
///
/// where `fold_mul(x, y)` is the 128-bit product of `x` and `y` with its two halves
/// xor-ed. Stable across processes, machines and releases.
#[inline]
pub const fn hash_words(w: &[u64; 5], seed: u64) -> u64 {
    let a = fold_mul(w[0] ^ K[0], w[1] ^ K[1] ^ seed);
    let b = fold_mul(w[2] ^ K[2], w[3] ^ K[3]);
    let c = fold_mul(w[4] ^ K[4], a ^ b.rotate_left(32) ^ K[5]);
    fold_mul(c ^ K[0], K[5] ^ seed) ^ c
}

/// Maps a hash to a port in `[min, max]` (multiply-shift on the top 32 bits, no division).
/// An empty range (`max < min`) yields `min`.
#[inline]
pub const fn port_in_range(hash: u64, min: u16, max: u16) -> u16 {
    if max < min {
        return min;
    }
    port_in_span(hash, min, (max - min) as u32 + 1)
}

/// [`port_in_range`] for the range of `span` ports from `min` (`1 ..= 65536 - min`), when
/// the span is known beforehand.
#[inline]
#[allow(
    clippy::cast_possible_truncation,
    reason = "the offset is below `span`"
)]
pub const fn port_in_span(hash: u64, min: u16, span: u32) -> u16 {
    min + (((hash >> 32) * span as u64) >> 32) as u16
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::Ipv4Addr;

    #[test]
    fn port_range_edges() {
        assert_eq!(port_in_range(u64::MAX, 49152, 65535), 65535);
        assert_eq!(port_in_range(0, 49152, 65535), 49152);
        assert_eq!(port_in_range(u64::MAX, 0, 65535), 65535);
        assert_eq!(port_in_range(12345, 7, 7), 7);
        assert_eq!(port_in_range(12345, 9, 8), 9);
    }

    #[test]
    fn addresses_unmap() {
        let k = FlowKey::two(crate::ip::mapped_v4([1, 2, 3, 4]), [0x20; 16]);
        assert_eq!(k.src_addr(), IpAddr::V4(Ipv4Addr::new(1, 2, 3, 4)));
        assert!(k.dst_addr().is_ipv6());
        assert!(!k.is_ipv4());
        let k = FlowKey::two(
            crate::ip::mapped_v4([1, 2, 3, 4]),
            crate::ip::mapped_v4([5; 4]),
        );
        assert!(k.is_ipv4());
    }

    #[test]
    fn source_of_reads_a_packed_keys_source() {
        let v4 = FlowKey::pack_v4_with(
            0x0a01_0203,
            0x0a09_0909,
            6,
            (1000, 80),
            Affinity::ClientIp.last_word(),
        );
        let tagged = with_service_tag(v4, 7);
        assert_eq!(source_of(&tagged), IpAddr::V4(Ipv4Addr::new(10, 1, 2, 3)));
        let src = [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9];
        let k = FlowKey::five(src, [2; 16], 17, 1, 2);
        assert_eq!(source_of(&k.pack()), k.src_addr());
    }

    #[test]
    fn hash_depends_on_every_field() {
        let base = FlowKey::five([1; 16], [2; 16], 6, 1000, 80);
        let h = base.hash64();
        let mut variants = [base; 6];
        variants[0].src[15] ^= 1;
        variants[1].dst[0] ^= 0x80;
        variants[2].src_port ^= 1;
        variants[3].dst_port ^= 0x8000;
        variants[4].proto = 17;
        variants[5].tuple = Tuple::Three;
        for v in variants {
            assert_ne!(v.hash64(), h, "{v:?}");
        }
        assert_ne!(base.hash64_seeded(1), h);
    }

    #[test]
    fn the_service_tag_comes_off_as_it_went_on() {
        let key = FlowKey::five([1; 16], [2; 16], 6, 1000, 80);
        let tagged = with_service_tag(key.pack(), 0xbeef);
        assert_eq!(service_tag(&tagged), 0xbeef);
        assert_eq!(service_tag(&key.pack()), 0);
        // A tagged key is no packed key; untagged, it is the packet's again.
        assert_eq!(FlowKey::unpack(&tagged), None);
        assert_eq!(FlowKey::unpack(&without_service_tag(tagged)), Some(key));
        assert_ne!(
            with_service_tag(key.pack(), 1),
            with_service_tag(key.pack(), 2)
        );
    }

    #[test]
    fn unpack_rejects_garbage() {
        assert_eq!(FlowKey::unpack(&[0, 0, 0, 0, 4 << 16]), None);
        assert_eq!(FlowKey::unpack(&[0, 0, 0, 0, (5 << 16) | 1]), None);
    }
}
