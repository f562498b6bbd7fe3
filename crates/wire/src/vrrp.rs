//! VRRP version 3 advertisements (RFC 5798): the whole Ethernet frame, built
//! ([`advert_frame`]) and read back ([`parse_frame`]) with every check of the
//! RFC's §7.1 that needs no configuration (TTL or hop limit 255, version 3,
//! type ADVERTISEMENT, the checksum over the pseudo-header, the address
//! count against the length); the VRID, the addresses and the interval are
//! the receiver's to compare with its own group.
//!
//! ```text
//!  0                   1                   2                   3
//! |Version| Type  | Virtual Rtr ID|   Priority    |Count IPvX Addr|
//! |(rsvd) |     Max Adver Int     |          Checksum             |
//! |                       IPvX Address(es) …                      |
//! ```
//!
//! Frames leave from the port's own MAC, not the virtual router MAC
//! 00-00-5E-00-01-{VRID} of §7.3: the master answers ARP and neighbour
//! solicitations for its VIPs with the port's MAC (as keepalived does
//! without `use_vmac`), so that a NIC need not take a second unicast MAC
//! and clients' caches move by gratuitous ARP on a takeover.

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::checksum;
use crate::error::ParseError;
use crate::ethernet::{self, EthernetRepr, MacAddr, ethertype};
use crate::ipv4::{self, Ipv4Repr};
use crate::ipv6::{self, Ipv6Repr};

/// IP protocol number of VRRP.
pub const PROTOCOL: u8 = 112;
/// The IPv4 group VRRP advertisements are sent to.
pub const GROUP_V4: Ipv4Addr = Ipv4Addr::new(224, 0, 0, 18);
/// The IPv6 group VRRP advertisements are sent to.
pub const GROUP_V6: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 0x12);
/// The Ethernet address of [`GROUP_V4`] (RFC 1112 §6.4).
pub const MAC_V4: MacAddr = [0x01, 0x00, 0x5e, 0x00, 0x00, 0x12];
/// The Ethernet address of [`GROUP_V6`] (RFC 2464 §7).
pub const MAC_V6: MacAddr = [0x33, 0x33, 0x00, 0x00, 0x00, 0x12];
/// TTL and hop limit of every advertisement: a receiver takes only 255,
/// so that none can come from beyond the link (§7.1).
pub const TTL: u8 = 255;
/// Version 3, type 1 (ADVERTISEMENT), in the first byte.
const VERSION_TYPE: u8 = 0x31;
/// Length of the VRRP header, before the addresses.
pub const HEADER_LEN: usize = 8;
/// The most addresses an advertisement carries (its count is one byte).
pub const MAX_ADDRS: usize = 255;
/// The longest advertisement interval, in centiseconds (12 bits).
pub const MAX_INTERVAL_CS: u16 = 0x0fff;
/// The longest advertisement frame Spillway sends (what the data plane's
/// outbox carries): [`max_addrs`] follows from it.
pub const FRAME_MAX: usize = 256;

/// The most VIPs a group of this family can advertise in [`FRAME_MAX`]
/// bytes (53 IPv4, 12 IPv6).
pub const fn max_addrs(v4: bool) -> usize {
    let (ip, addr) = if v4 {
        (ipv4::MIN_HEADER_LEN, 4)
    } else {
        (ipv6::HEADER_LEN, 16)
    };
    (FRAME_MAX - ethernet::HEADER_LEN - ip - HEADER_LEN) / addr
}

/// DSCP of advertisements: class selector 6, network control (as routing
/// protocols and keepalived send them).
const DSCP_CS6: u8 = 0xc0;

/// Why a frame is not a valid VRRPv3 advertisement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum VrrpError {
    /// Not IPv4 or IPv6 carrying protocol 112 to the VRRP group.
    #[error("not a VRRP packet to 224.0.0.18 / ff02::12")]
    NotVrrp,
    /// A header is malformed or cut short.
    #[error("malformed: {0}")]
    Malformed(ParseError),
    /// An IPv4 fragment (an advertisement is never fragmented).
    #[error("fragmented")]
    Fragment,
    /// TTL or hop limit is not 255: sent from beyond the link, or forged.
    #[error("TTL or hop limit {0}, not 255")]
    Ttl(u8),
    /// Version is not 3 (VRRPv2 included) or type is not ADVERTISEMENT.
    #[error("version {version} type {kind}, not a VRRPv3 advertisement")]
    Version {
        /// The version field.
        version: u8,
        /// The type field.
        kind: u8,
    },
    /// The checksum does not verify.
    #[error("bad checksum")]
    Checksum,
    /// The address count does not fit the packet, or an address of the
    /// other family is announced (an IPv4 group carries IPv4 addresses).
    #[error("{count} addresses do not match a {len}-byte message")]
    Count {
        /// The count field.
        count: u8,
        /// The message's length.
        len: usize,
    },
}

impl From<ParseError> for VrrpError {
    fn from(e: ParseError) -> Self {
        VrrpError::Malformed(e)
    }
}

/// A received advertisement: a view into the frame it came in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Advert<'a> {
    /// The sender's address (its primary address on the link).
    pub src: IpAddr,
    /// The sender's MAC.
    pub mac: MacAddr,
    /// Virtual router ID.
    pub vrid: u8,
    /// Priority: 0 the master resigns, 255 the addresses' owner.
    pub priority: u8,
    /// Advertisement interval in centiseconds.
    pub interval_cs: u16,
    addrs: &'a [u8],
}

impl Advert<'_> {
    /// How many addresses it announces.
    pub fn count(&self) -> usize {
        self.addrs.len() / self.addr_len()
    }

    fn addr_len(&self) -> usize {
        if self.src.is_ipv4() { 4 } else { 16 }
    }

    /// The addresses it announces, in its order.
    pub fn addrs(&self) -> impl Iterator<Item = IpAddr> + '_ {
        let v4 = self.src.is_ipv4();
        self.addrs.chunks_exact(self.addr_len()).map(move |c| {
            match (v4, <[u8; 4]>::try_from(c), <[u8; 16]>::try_from(c)) {
                (true, Ok(b), _) => IpAddr::V4(Ipv4Addr::from(b)),
                (false, _, Ok(b)) => IpAddr::V6(Ipv6Addr::from(b)),
                // chunks_exact gives 4 bytes for IPv4, 16 for IPv6.
                _ => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            }
        })
    }
}

/// Whether `frame` looks like a VRRP advertisement from its first bytes
/// alone (the VRRP group's MAC, IPv4 or IPv6, protocol 112 right after the
/// IP header): the data plane's test before it hands a frame over; every
/// check is [`parse_frame`]'s.
pub fn looks_like(frame: &[u8]) -> bool {
    let Some(h) = frame.get(..ethernet::HEADER_LEN) else {
        return false;
    };
    let et = u16::from_be_bytes([h[12], h[13]]);
    if h[..6] == MAC_V4 && et == ethertype::IPV4 {
        frame.get(ethernet::HEADER_LEN + 9) == Some(&PROTOCOL)
    } else if h[..6] == MAC_V6 && et == ethertype::IPV6 {
        frame.get(ethernet::HEADER_LEN + 6) == Some(&PROTOCOL)
    } else {
        false
    }
}

/// Reads a VRRPv3 advertisement out of an untagged Ethernet frame, checking
/// everything §7.1 checks that needs no configuration, and that it is to
/// the group's multicast MAC (what [`looks_like`] takes, no more).
pub fn parse_frame(frame: &[u8]) -> Result<Advert<'_>, VrrpError> {
    let eth = ethernet::Frame::new_checked(frame)?;
    let mac = eth.src();
    let body = frame
        .get(ethernet::HEADER_LEN..)
        .ok_or(VrrpError::Malformed(ParseError::Truncated))?;
    let (src, ttl, msg, pseudo) = match eth.ethertype() {
        ethertype::IPV4 => {
            let p = ipv4::Packet::new_checked(body)?;
            let ip = Ipv4Repr::parse(&p)?;
            if ip.protocol != PROTOCOL || ip.dst != GROUP_V4 || eth.dst() != MAC_V4 {
                return Err(VrrpError::NotVrrp);
            }
            if p.is_fragment() {
                return Err(VrrpError::Fragment);
            }
            let msg = body
                .get(p.header_len()..usize::from(p.total_len()))
                .ok_or(VrrpError::Malformed(ParseError::Truncated))?;
            let pseudo =
                checksum::pseudo_v4(&ip.src, &ip.dst, PROTOCOL, crate::cast::len16(msg.len()));
            (IpAddr::V4(ip.src), ip.ttl, msg, pseudo)
        }
        ethertype::IPV6 => {
            let p = ipv6::Packet::new_checked(body)?;
            let ip = Ipv6Repr::parse(&p)?;
            if ip.next_header != PROTOCOL || ip.dst != GROUP_V6 || eth.dst() != MAC_V6 {
                return Err(VrrpError::NotVrrp);
            }
            let msg = body
                .get(ipv6::HEADER_LEN..ipv6::HEADER_LEN + usize::from(p.payload_len()))
                .ok_or(VrrpError::Malformed(ParseError::Truncated))?;
            let len = u32::try_from(msg.len()).map_err(|_| ParseError::BadLength)?;
            let pseudo = checksum::pseudo_v6(&ip.src, &ip.dst, PROTOCOL, len);
            (IpAddr::V6(ip.src), ip.hop_limit, msg, pseudo)
        }
        _ => return Err(VrrpError::NotVrrp),
    };
    if ttl != TTL {
        return Err(VrrpError::Ttl(ttl));
    }
    let head: &[u8; HEADER_LEN] = msg
        .first_chunk()
        .ok_or(VrrpError::Malformed(ParseError::Truncated))?;
    if head[0] != VERSION_TYPE {
        return Err(VrrpError::Version {
            version: head[0] >> 4,
            kind: head[0] & 0x0f,
        });
    }
    if checksum::fold(checksum::add(pseudo, msg)) != 0xffff {
        return Err(VrrpError::Checksum);
    }
    let count = head[3];
    let addr_len = if src.is_ipv4() { 4 } else { 16 };
    let addrs = msg
        .get(HEADER_LEN..HEADER_LEN + usize::from(count) * addr_len)
        .filter(|_| count > 0)
        .ok_or(VrrpError::Count {
            count,
            len: msg.len(),
        })?;
    Ok(Advert {
        src,
        mac,
        vrid: head[1],
        priority: head[2],
        interval_cs: u16::from_be_bytes([head[4], head[5]]) & MAX_INTERVAL_CS,
        addrs,
    })
}

/// What an advertisement says, to build one ([`advert_frame`]).
#[derive(Debug, Clone, Copy)]
pub struct AdvertRepr<'a> {
    /// The sender's MAC (the port's).
    pub mac: MacAddr,
    /// The sender's address on the link: IPv4, or an IPv6 link-local address.
    pub src: IpAddr,
    /// Virtual router ID (1–255).
    pub vrid: u8,
    /// Priority (0: resigning).
    pub priority: u8,
    /// Advertisement interval in centiseconds (at most [`MAX_INTERVAL_CS`]).
    pub interval_cs: u16,
    /// The group's addresses, all of `src`'s family.
    pub addrs: &'a [IpAddr],
}

impl AdvertRepr<'_> {
    /// The length of the frame [`advert_frame`] writes.
    pub fn frame_len(&self) -> usize {
        let (ip, addr) = match self.src {
            IpAddr::V4(_) => (ipv4::MIN_HEADER_LEN, 4),
            IpAddr::V6(_) => (ipv6::HEADER_LEN, 16),
        };
        ethernet::HEADER_LEN + ip + HEADER_LEN + addr * self.addrs.len()
    }
}

/// Writes the advertisement `a` as a whole Ethernet frame into `buf`;
/// returns its length ([`AdvertRepr::frame_len`]). Refused: more than
/// [`MAX_ADDRS`] addresses, none, one of the other family, an interval
/// over 12 bits, or a buffer too short.
pub fn advert_frame(buf: &mut [u8], a: &AdvertRepr<'_>) -> Result<usize, ParseError> {
    let v4 = a.src.is_ipv4();
    let count = u8::try_from(a.addrs.len()).map_err(|_| ParseError::BadLength)?;
    if count == 0 || a.interval_cs > MAX_INTERVAL_CS || a.addrs.iter().any(|x| x.is_ipv4() != v4) {
        return Err(ParseError::BadLength);
    }
    let len = a.frame_len();
    let frame = buf.get_mut(..len).ok_or(ParseError::Truncated)?;
    let (dst_mac, et) = if v4 {
        (MAC_V4, ethertype::IPV4)
    } else {
        (MAC_V6, ethertype::IPV6)
    };
    EthernetRepr::untagged(dst_mac, a.mac, et).emit(frame)?;
    let ip_len = if v4 {
        ipv4::MIN_HEADER_LEN
    } else {
        ipv6::HEADER_LEN
    };
    let (ip, msg) = frame
        .get_mut(ethernet::HEADER_LEN..)
        .and_then(|b| b.split_at_mut_checked(ip_len))
        .ok_or(ParseError::Truncated)?;
    let msg_len = crate::cast::len16(msg.len());
    let pseudo = match a.src {
        IpAddr::V4(src) => {
            let mut p = ipv4::Packet::new_unchecked(&mut *ip);
            Ipv4Repr {
                src,
                dst: GROUP_V4,
                protocol: PROTOCOL,
                payload_len: msg_len,
                ttl: TTL,
                dscp_ecn: DSCP_CS6,
                ident: 0,
                dont_frag: false,
                more_frags: false,
                frag_offset: 0,
                options: ipv4::Options::default(),
            }
            .emit(&mut p)?;
            checksum::pseudo_v4(&src, &GROUP_V4, PROTOCOL, msg_len)
        }
        IpAddr::V6(src) => {
            Ipv6Repr {
                src,
                dst: GROUP_V6,
                next_header: PROTOCOL,
                payload_len: msg_len,
                hop_limit: TTL,
                traffic_class: DSCP_CS6,
                flow_label: 0,
            }
            .emit(&mut ipv6::Packet::new_unchecked(&mut *ip))?;
            checksum::pseudo_v6(&src, &GROUP_V6, PROTOCOL, u32::from(msg_len))
        }
    };
    let (head, rest) = msg
        .split_first_chunk_mut::<HEADER_LEN>()
        .ok_or(ParseError::Truncated)?;
    let [hi, lo] = a.interval_cs.to_be_bytes();
    *head = [VERSION_TYPE, a.vrid, a.priority, count, hi, lo, 0, 0];
    let mut at = 0;
    for addr in a.addrs {
        let (bytes, n): ([u8; 16], usize) = match addr {
            IpAddr::V4(x) => {
                let mut b = [0; 16];
                b[..4].copy_from_slice(&x.octets());
                (b, 4)
            }
            IpAddr::V6(x) => (x.octets(), 16),
        };
        rest.get_mut(at..at + n)
            .ok_or(ParseError::Truncated)?
            .copy_from_slice(&bytes[..n]);
        at += n;
    }
    let sum = checksum::fold(checksum::add(pseudo, msg));
    msg[6..8].copy_from_slice(&(!sum).to_be_bytes());
    Ok(len)
}

/// The IPv6 link-local address of a port with MAC `mac` (modified EUI-64,
/// RFC 4291 appendix A): an IPv6 group's advertisements come from it (§5.1.2.1).
pub fn link_local(mac: MacAddr) -> Ipv6Addr {
    Ipv6Addr::from([
        0xfe,
        0x80,
        0,
        0,
        0,
        0,
        0,
        0,
        mac[0] ^ 0x02,
        mac[1],
        mac[2],
        0xff,
        0xfe,
        mac[3],
        mac[4],
        mac[5],
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAC: MacAddr = [0x02, 0, 0, 0, 0, 0x01];

    fn build(a: &AdvertRepr<'_>) -> Vec<u8> {
        let mut buf = vec![0; 2048];
        let n = advert_frame(&mut buf, a).expect("builds");
        buf.truncate(n);
        buf
    }

    fn v4(addrs: &[IpAddr]) -> AdvertRepr<'_> {
        AdvertRepr {
            mac: MAC,
            src: IpAddr::V4(Ipv4Addr::new(198, 18, 1, 2)),
            vrid: 51,
            priority: 150,
            interval_cs: 10,
            addrs,
        }
    }

    #[test]
    fn an_ipv4_advert_reads_back() {
        let addrs = [
            IpAddr::V4(Ipv4Addr::new(198, 18, 10, 10)),
            IpAddr::V4(Ipv4Addr::new(198, 18, 10, 11)),
        ];
        let f = build(&v4(&addrs));
        assert!(looks_like(&f));
        let a = parse_frame(&f).expect("parses");
        assert_eq!(
            (a.vrid, a.priority, a.interval_cs, a.count()),
            (51, 150, 10, 2)
        );
        assert_eq!(a.mac, MAC);
        assert_eq!(a.addrs().collect::<Vec<_>>(), addrs);
        // Fixed bytes: version/type, the group, TTL 255, protocol 112.
        assert_eq!(f[..6], MAC_V4);
        assert_eq!(f[14 + 8], 255);
        assert_eq!(f[14 + 9], 112);
        assert_eq!(f[34], 0x31);
    }

    #[test]
    fn an_ipv6_advert_reads_back() {
        let addrs = [IpAddr::V6("2001:db8::10".parse().expect("v6"))];
        let src = IpAddr::V6(link_local(MAC));
        let f = build(&AdvertRepr { src, ..v4(&addrs) });
        assert!(looks_like(&f));
        let a = parse_frame(&f).expect("parses");
        assert_eq!(a.src, src);
        assert_eq!(a.addrs().collect::<Vec<_>>(), addrs);
        assert_eq!(src.to_string(), "fe80::ff:fe00:1");
    }

    #[test]
    fn every_field_check_refuses() {
        let addrs = [IpAddr::V4(Ipv4Addr::new(198, 18, 10, 10))];
        let good = build(&v4(&addrs));
        let mut ttl = good.clone();
        ttl[14 + 8] = 254;
        // The IPv4 header checksum follows the TTL; fix it.
        ipv4::Packet::new_unchecked(&mut ttl[14..]).fill_checksum();
        assert_eq!(parse_frame(&ttl), Err(VrrpError::Ttl(254)));
        let mut v2 = good.clone();
        v2[34] = 0x21;
        assert_eq!(
            parse_frame(&v2),
            Err(VrrpError::Version {
                version: 2,
                kind: 1
            })
        );
        let mut sum = good.clone();
        sum[34 + 2] ^= 1;
        assert_eq!(parse_frame(&sum), Err(VrrpError::Checksum));
        // A count beyond the message: refused even with a right checksum.
        let mut count = good.clone();
        count[34 + 3] = 2;
        count[34 + 6] = 0;
        count[34 + 7] = 0;
        let s = !checksum::fold(checksum::add(
            checksum::pseudo_v4(&Ipv4Addr::new(198, 18, 1, 2), &GROUP_V4, PROTOCOL, 12),
            &count[34..],
        ));
        count[34 + 6..34 + 8].copy_from_slice(&s.to_be_bytes());
        assert_eq!(
            parse_frame(&count),
            Err(VrrpError::Count { count: 2, len: 12 })
        );
        let mut mac = good.clone();
        mac[3] = 0x80;
        assert_eq!(parse_frame(&mac), Err(VrrpError::NotVrrp), "to another MAC");
        let mut not = good.clone();
        not[14 + 16..14 + 20].copy_from_slice(&[224, 0, 0, 19]);
        ipv4::Packet::new_unchecked(&mut not[14..]).fill_checksum();
        assert_eq!(parse_frame(&not), Err(VrrpError::NotVrrp));
        assert!(parse_frame(&good[..40]).is_err());
    }

    #[test]
    fn the_builder_refuses_what_cannot_be_sent() {
        let mut buf = [0; 2048];
        let v6 = [IpAddr::V6(Ipv6Addr::LOCALHOST)];
        assert!(advert_frame(&mut buf, &v4(&v6)).is_err());
        assert!(advert_frame(&mut buf, &v4(&[])).is_err());
        let many = [IpAddr::V4(Ipv4Addr::LOCALHOST); 256];
        assert!(advert_frame(&mut buf, &v4(&many)).is_err());
        let one = [IpAddr::V4(Ipv4Addr::LOCALHOST)];
        let slow = AdvertRepr {
            interval_cs: 0x1000,
            ..v4(&one)
        };
        assert!(advert_frame(&mut buf, &slow).is_err());
        assert!(advert_frame(&mut buf[..40], &v4(&one)).is_err());
    }
}
