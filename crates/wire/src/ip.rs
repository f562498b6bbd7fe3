//! IP protocol numbers and address helpers shared by IPv4 and IPv6.

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// IP protocol / IPv6 next-header numbers.
pub mod proto {
    /// IPv6 hop-by-hop options.
    pub const HOPOPT: u8 = 0;
    /// ICMP for IPv4.
    pub const ICMP: u8 = 1;
    /// IPv4 in IP.
    pub const IPIP: u8 = 4;
    /// TCP.
    pub const TCP: u8 = 6;
    /// UDP.
    pub const UDP: u8 = 17;
    /// IPv6 in IP.
    pub const IPV6: u8 = 41;
    /// IPv6 routing header.
    pub const IPV6_ROUTE: u8 = 43;
    /// IPv6 fragment header.
    pub const IPV6_FRAG: u8 = 44;
    /// GRE.
    pub const GRE: u8 = 47;
    /// ESP.
    pub const ESP: u8 = 50;
    /// Authentication header.
    pub const AH: u8 = 51;
    /// ICMPv6.
    pub const ICMPV6: u8 = 58;
    /// IPv6 no next header.
    pub const IPV6_NONXT: u8 = 59;
    /// IPv6 destination options.
    pub const IPV6_OPTS: u8 = 60;
}

/// The IPv4-mapped IPv6 form (`::ffff:a.b.c.d`) of an address, as 16 bytes; IPv6 unchanged.
#[inline]
pub fn to_mapped(addr: &IpAddr) -> [u8; 16] {
    match addr {
        IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
        IpAddr::V6(a) => a.octets(),
    }
}

/// Whether a 16-byte address is an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`).
#[inline]
pub fn is_mapped_v4(a: &[u8; 16]) -> bool {
    a[..10].iter().all(|b| *b == 0) && a[10] == 0xff && a[11] == 0xff
}

/// The address a 16-byte (IPv4-mapped for IPv4) address stands for: the
/// inverse of the mapping `PacketInfo` and `FlowKey` use.
#[inline]
pub fn unmap(a: &[u8; 16]) -> IpAddr {
    if is_mapped_v4(a) {
        IpAddr::V4(Ipv4Addr::new(a[12], a[13], a[14], a[15]))
    } else {
        IpAddr::V6(Ipv6Addr::from(*a))
    }
}

/// 16-byte mapped form of an IPv4 address given as 4 bytes.
#[inline]
pub fn mapped_v4(a: [u8; 4]) -> [u8; 16] {
    [
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, a[0], a[1], a[2], a[3],
    ]
}

/// Partial checksum sum of the pseudo header for `proto` over `len` bytes between two
/// addresses of one family. Returns `None` if the families differ.
#[inline]
#[allow(clippy::cast_possible_truncation, reason = "an IPv4 length is 16 bits")]
pub fn pseudo_header(src: &IpAddr, dst: &IpAddr, proto: u8, len: u32) -> Option<u64> {
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => Some(crate::checksum::pseudo_v4(s, d, proto, len as u16)),
        (IpAddr::V6(s), IpAddr::V6(d)) => Some(crate::checksum::pseudo_v6(s, d, proto, len)),
        _ => None,
    }
}

/// Whether an IPv4 source address (host order) is martian: one that never
/// appears as the source of a packet on the wire (RFC 1812 §5.3.7, RFC
/// 6890): 0.0.0.0/8 ("this network", the unspecified address), 127.0.0.0/8
/// (loopback), 224.0.0.0/4 (multicast) and 240.0.0.0/4 (reserved, with the
/// limited broadcast 255.255.255.255). All are told by the first octet: one
/// table lookup.
#[inline(always)]
pub fn is_martian_v4(addr: u32) -> bool {
    let [first, ..] = addr.to_be_bytes();
    MARTIAN_V4[usize::from(first)]
}

/// [`is_martian_v4`]'s table, by first octet.
static MARTIAN_V4: [bool; 256] = {
    let mut t = [false; 256];
    t[0] = true;
    t[127] = true;
    let mut i = 224;
    while i < 256 {
        t[i] = true;
        i += 1;
    }
    t
};

/// Whether an IPv6 source address is martian (RFC 4291 §2.5.2, §2.5.3,
/// §2.7): the unspecified address `::`, the loopback `::1`, or multicast
/// (`ff00::/8`). IPv4-mapped addresses (`::ffff:a.b.c.d`, which never
/// appear on the wire either) are told apart by [`is_mapped_v4`].
#[inline(always)]
pub fn is_martian_v6(a: &[u8; 16]) -> bool {
    a[0] == 0xff || u128::from_be_bytes(*a) <= 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn martian_sources() {
        for (a, martian) in [
            ("0.0.0.0", true),
            ("0.1.2.3", true),
            ("1.0.0.0", false),
            ("10.1.2.3", false),
            ("126.255.255.255", false),
            ("127.0.0.1", true),
            ("128.0.0.0", false),
            ("169.254.1.1", false),
            ("223.255.255.255", false),
            ("224.0.0.1", true),
            ("239.1.1.1", true),
            ("240.0.0.1", true),
            ("255.255.255.255", true),
        ] {
            let v: Ipv4Addr = a.parse().unwrap();
            assert_eq!(is_martian_v4(u32::from(v)), martian, "{a}");
        }
        for (a, martian) in [
            ("::", true),
            ("::1", true),
            ("::2", false),
            ("64:ff9b::a00:1", false),
            ("2001:db8::1", false),
            ("fe80::1", false),
            ("feff::1", false),
            ("ff02::1", true),
            ("ff0e::1:2", true),
        ] {
            let v: Ipv6Addr = a.parse().unwrap();
            assert_eq!(is_martian_v6(&v.octets()), martian, "{a}");
        }
    }
}
