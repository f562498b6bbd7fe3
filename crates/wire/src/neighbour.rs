//! Neighbour resolution frames (M47): the requests the balancer sends to learn
//! a next hop's MAC (ARP request, IPv6 neighbor solicitation), the
//! announcements of its own addresses (gratuitous ARP, unsolicited neighbor
//! advertisement), and [`parse_sighting`], which reads the (address, MAC) pair
//! a received ARP or NDP frame vouches for.
//!
//! The builders write whole Ethernet frames into a caller's buffer and return
//! their length; nothing here allocates. Frames are not padded to 60 bytes:
//! the NIC pads short frames.

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::arp::{self, ArpRepr};
use crate::error::{NdpError, ParseError};
use crate::ethernet::{self, EthernetRepr, MacAddr, ethertype};
use crate::icmpv6::msg;
use crate::ip::proto;
use crate::ipv6::{self, Ipv6Repr};
use crate::ndp::{
    self, HOP_LIMIT, LL_OPTION_LEN, MESSAGE_LEN, NaFlags, NeighborAdvertRepr, NeighborSolicitRepr,
};

/// Length of an ARP frame built here (untagged Ethernet + ARP).
pub const ARP_FRAME_LEN: usize = ethernet::HEADER_LEN + arp::PACKET_LEN;
/// Length of an NDP frame built here (untagged Ethernet + IPv6 + a message
/// with one link-layer address option).
pub const NDP_FRAME_LEN: usize = ethernet::HEADER_LEN + ipv6::HEADER_LEN + NDP_MESSAGE_LEN;
const NDP_MESSAGE_LEN: usize = MESSAGE_LEN + LL_OPTION_LEN;

/// The Ethernet broadcast address.
pub const BROADCAST: MacAddr = [0xff; 6];

fn arp_frame(buf: &mut [u8], dst: MacAddr, a: &ArpRepr) -> Result<usize, ParseError> {
    let frame = buf.get_mut(..ARP_FRAME_LEN).ok_or(ParseError::Truncated)?;
    EthernetRepr::untagged(dst, a.sha, ethertype::ARP).emit(frame)?;
    let body = frame
        .get_mut(ethernet::HEADER_LEN..)
        .ok_or(ParseError::Truncated)?;
    a.emit(&mut arp::Packet::new_checked(body)?)?;
    Ok(ARP_FRAME_LEN)
}

/// Writes a broadcast ARP request from (`mac`, `spa`) asking for `tpa` into
/// `buf`; returns the frame's length ([`ARP_FRAME_LEN`]).
pub fn arp_request(
    buf: &mut [u8],
    mac: MacAddr,
    spa: Ipv4Addr,
    tpa: Ipv4Addr,
) -> Result<usize, ParseError> {
    arp_frame(
        buf,
        BROADCAST,
        &ArpRepr {
            oper: arp::op::REQUEST,
            sha: mac,
            spa,
            tha: [0; 6],
            tpa,
        },
    )
}

/// Writes a gratuitous ARP for `ip` at `mac` (a broadcast request whose
/// sender and target address are both `ip`, RFC 5227 §3) into `buf`; returns
/// the frame's length.
pub fn gratuitous_arp(buf: &mut [u8], mac: MacAddr, ip: Ipv4Addr) -> Result<usize, ParseError> {
    arp_request(buf, mac, ip, ip)
}

fn ndp_frame(
    buf: &mut [u8],
    dst_mac: MacAddr,
    mac: MacAddr,
    src: Ipv6Addr,
    dst: Ipv6Addr,
    emit: impl FnOnce(&mut [u8]) -> Result<(), ParseError>,
) -> Result<usize, ParseError> {
    let frame = buf.get_mut(..NDP_FRAME_LEN).ok_or(ParseError::Truncated)?;
    EthernetRepr::untagged(dst_mac, mac, ethertype::IPV6).emit(frame)?;
    let (ip, body) = frame
        .get_mut(ethernet::HEADER_LEN..)
        .and_then(|b| b.split_at_mut_checked(ipv6::HEADER_LEN))
        .ok_or(ParseError::Truncated)?;
    Ipv6Repr {
        src,
        dst,
        next_header: proto::ICMPV6,
        payload_len: crate::cast::len16(NDP_MESSAGE_LEN),
        hop_limit: HOP_LIMIT,
        traffic_class: 0,
        flow_label: 0,
    }
    .emit(&mut ipv6::Packet::new_unchecked(ip))?;
    emit(body)?;
    Ok(NDP_FRAME_LEN)
}

/// Writes a neighbor solicitation from (`mac`, `src`) for `target` into
/// `buf`: to the target's solicited-node group (and its 33:33:ff:… MAC), with
/// the source link-layer address option, hop limit 255 (RFC 4861 §7.2.2).
/// Returns the frame's length ([`NDP_FRAME_LEN`]).
pub fn neighbour_solicitation(
    buf: &mut [u8],
    mac: MacAddr,
    src: Ipv6Addr,
    target: Ipv6Addr,
) -> Result<usize, ParseError> {
    let dst = ndp::solicited_node(&target);
    ndp_frame(buf, ndp::multicast_mac(&dst), mac, src, dst, |m| {
        NeighborSolicitRepr {
            target,
            source_ll: Some(mac),
        }
        .emit(m, &src, &dst)
    })
}

/// Writes an unsolicited neighbor advertisement of `target` at `mac` into
/// `buf`: from `target` to all nodes, Override set, with the target
/// link-layer address option (RFC 4861 §7.2.6). Returns the frame's length.
pub fn unsolicited_advert(
    buf: &mut [u8],
    mac: MacAddr,
    target: Ipv6Addr,
) -> Result<usize, ParseError> {
    let dst = ndp::ALL_NODES;
    ndp_frame(buf, ndp::multicast_mac(&dst), mac, target, dst, |m| {
        NeighborAdvertRepr {
            flags: NaFlags::OVERRIDE,
            target,
            target_ll: Some(mac),
        }
        .emit(m, &target, &dst)
    })
}

/// An (address, MAC) pair a received frame vouches for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Sighting {
    /// The neighbour's address.
    pub ip: IpAddr,
    /// Its MAC.
    pub mac: MacAddr,
}

/// A usable neighbour MAC: unicast and not all zero.
fn unicast(mac: MacAddr) -> bool {
    mac[0] & 1 == 0 && mac != [0; 6]
}

/// What a received frame says about a neighbour, if anything: an ARP request
/// or reply (gratuitous ones included) gives its sender; a valid neighbor
/// solicitation gives its source and source link-layer address, a valid
/// neighbor advertisement its target and target link-layer address. Probes
/// (from 0.0.0.0 or `::`), multicast or zero MACs and anything invalid give
/// nothing. The caller decides whether the address is one it asked about.
pub fn parse_sighting(frame: &[u8]) -> Option<Sighting> {
    let eth = EthernetRepr::parse(frame).ok()?;
    if !unicast(eth.src) {
        return None;
    }
    let l3 = frame.get(eth.header_len()..)?;
    match eth.ethertype {
        ethertype::ARP => {
            let a = ArpRepr::parse(&arp::Packet::new_checked(l3).ok()?).ok()?;
            let known = a.oper == arp::op::REQUEST || a.oper == arp::op::REPLY;
            (known && unicast(a.sha) && !a.spa.is_unspecified()).then_some(Sighting {
                ip: IpAddr::V4(a.spa),
                mac: a.sha,
            })
        }
        ethertype::IPV6 => ndp_sighting(l3).ok().flatten(),
        _ => None,
    }
}

fn ndp_sighting(l3: &[u8]) -> Result<Option<Sighting>, NdpError> {
    let ip = ipv6::Packet::new_checked(l3)?;
    let end = ipv6::HEADER_LEN + usize::from(ip.payload_len());
    let payload = l3.get(ipv6::HEADER_LEN..end).ok_or(ParseError::Truncated)?;
    let walk = ipv6::walk_extensions(payload, ip.next_header())?;
    if walk.fragment.is_some() || walk.upper != proto::ICMPV6 {
        return Ok(None);
    }
    let m = payload.get(walk.offset..).ok_or(ParseError::Truncated)?;
    let (src, dst, hops) = (ip.src(), ip.dst(), ip.hop_limit());
    let found = match m.first() {
        Some(&msg::NEIGHBOR_SOLICIT) => {
            let ns = NeighborSolicitRepr::parse(m, &src, &dst, hops)?;
            ns.source_ll.map(|mac| (src, mac))
        }
        Some(&msg::NEIGHBOR_ADVERT) => {
            let na = NeighborAdvertRepr::parse(m, &src, &dst, hops)?;
            na.target_ll.map(|mac| (na.target, mac))
        }
        _ => None,
    };
    Ok(found
        .filter(|(a, mac)| !a.is_unspecified() && !a.is_multicast() && unicast(*mac))
        .map(|(a, mac)| Sighting {
            ip: IpAddr::V6(a),
            mac,
        }))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAC: MacAddr = [2, 0, 0, 0, 0, 1];

    #[test]
    fn requests_and_announcements_parse_back() {
        let mut b = [0u8; 128];
        let a: Ipv4Addr = "10.0.0.2".parse().unwrap();
        let t: Ipv4Addr = "10.0.0.1".parse().unwrap();
        let n = arp_request(&mut b, MAC, a, t).unwrap();
        assert_eq!(n, 42);
        assert_eq!(&b[..6], &BROADCAST);
        assert_eq!(
            parse_sighting(&b[..n]),
            Some(Sighting {
                ip: IpAddr::V4(a),
                mac: MAC
            })
        );
        let v6: Ipv6Addr = "2001:db8::2".parse().unwrap();
        let n = unsolicited_advert(&mut b, MAC, v6).unwrap();
        assert_eq!(n, NDP_FRAME_LEN);
        assert_eq!(
            parse_sighting(&b[..n]),
            Some(Sighting {
                ip: IpAddr::V6(v6),
                mac: MAC
            })
        );
        let target: Ipv6Addr = "2001:db8::1".parse().unwrap();
        let n = neighbour_solicitation(&mut b, MAC, v6, target).unwrap();
        assert_eq!(&b[..6], &[0x33, 0x33, 0xff, 0, 0, 1]);
        assert_eq!(parse_sighting(&b[..n]).map(|s| s.ip), Some(IpAddr::V6(v6)));
        // Too small a buffer is an error, not a panic.
        assert!(neighbour_solicitation(&mut b[..40], MAC, v6, target).is_err());
        assert!(arp_request(&mut b[..41], MAC, a, t).is_err());
    }

    #[test]
    fn probes_and_group_macs_are_no_sightings() {
        let mut b = [0u8; 128];
        let n = arp_request(&mut b, MAC, Ipv4Addr::UNSPECIFIED, [10, 0, 0, 1].into()).unwrap();
        assert_eq!(parse_sighting(&b[..n]), None);
        let n = arp_request(
            &mut b,
            [3, 0, 0, 0, 0, 1],
            [10, 0, 0, 2].into(),
            [10, 0, 0, 1].into(),
        )
        .unwrap();
        assert_eq!(parse_sighting(&b[..n]), None);
        for len in 0..n {
            assert_eq!(parse_sighting(&b[..len]), None);
        }
    }
}
