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
