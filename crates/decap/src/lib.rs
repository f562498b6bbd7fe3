//! The backend side of Spillway's tunnels, for hosts whose kernel has no
//! GUE/GENEVE/IPIP/GRE decapsulation (or where an operator prefers not to
//! configure it): the functions here find the original IP packet inside
//! what a socket received, so that `spillway-decap` can hand it to the kernel
//! through a TUN device and the real server sees the client's packet, byte
//! for byte, addressed to the VIP.
//!
//! All parsing is `wire`'s, the same code that built the tunnels.

#![forbid(unsafe_code)]
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

pub mod daemon;

use wire::encap::{DecapConfig, parse_tunnel};
use wire::ethernet::ethertype;
use wire::packet::parse_ip;
use wire::{geneve, gue};

/// Why a received datagram or packet held no packet to deliver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DecapError {
    /// the tunnel header is malformed
    #[error("malformed tunnel header")]
    Malformed,
    /// the tunnel carries something other than an IP packet
    #[error("the tunnel does not carry an IP packet")]
    NotIp,
    /// the inner IP packet is malformed
    #[error("malformed inner IP packet")]
    BadInner,
    /// the packet is not a tunnel packet this decapsulator accepts
    #[error("not a GUE, GENEVE, IPIP or GRE packet")]
    NotATunnel,
}

/// The inner IP packet of a GUE datagram's UDP payload (variant 1: the
/// payload is the IP packet; variant 0: after the GUE header, protocol 4 or
/// 41 only).
pub fn gue_inner(payload: &[u8]) -> Result<&[u8], DecapError> {
    let inner = match gue::GueRepr::parse(payload).map_err(|_| DecapError::Malformed)? {
        gue::GueRepr::DirectIp { .. } => payload,
        gue::GueRepr::Header {
            control: false,
            proto: 4 | 41,
            hlen,
            ..
        } => payload
            .get(4 + 4 * usize::from(hlen)..)
            .ok_or(DecapError::Malformed)?,
        gue::GueRepr::Header { .. } => return Err(DecapError::NotIp),
    };
    checked_ip(inner)
}

/// The inner IP packet of a GENEVE datagram's UDP payload (protocol type
/// 0x0800 or 0x86DD, as Spillway sends; options are skipped).
pub fn geneve_inner(payload: &[u8]) -> Result<&[u8], DecapError> {
    let p = geneve::Packet::new_checked(payload).map_err(|_| DecapError::Malformed)?;
    if p.version() != 0 || !matches!(p.protocol(), ethertype::IPV4 | ethertype::IPV6) {
        return Err(DecapError::NotIp);
    }
    let start = p.header_len();
    checked_ip(payload.get(start..).ok_or(DecapError::Malformed)?)
}

/// The inner IP packet of an IPv4 IPIP or GRE packet as a raw IPv4 socket
/// delivers it (outer header included). `scratch` must hold the packet plus
/// 14 bytes; it lets the full tunnel parser of `wire` check the outer header.
pub fn ip_tunnel_inner<'a>(packet: &[u8], scratch: &'a mut [u8]) -> Result<&'a [u8], DecapError> {
    let frame = scratch
        .get_mut(..packet.len() + 14)
        .ok_or(DecapError::Malformed)?;
    frame[..12].fill(0);
    frame[12..14].copy_from_slice(&ethertype::IPV4.to_be_bytes());
    frame[14..].copy_from_slice(packet);
    let cfg = DecapConfig {
        gue_port: None,
        geneve_port: None,
        ..DecapConfig::default()
    };
    let t = parse_tunnel(frame, &cfg).map_err(|_| DecapError::NotATunnel)?;
    let inner = frame
        .get(t.inner_offset..t.inner_offset + t.inner_len)
        .ok_or(DecapError::Malformed)?;
    checked_ip(inner)
}

fn checked_ip(inner: &[u8]) -> Result<&[u8], DecapError> {
    parse_ip(inner).map_err(|_| DecapError::BadInner)?;
    Ok(inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::IpAddr;
    use wire::buf::{MemBuf, PacketBuf};
    use wire::encap::{Outer, Tunnel, UdpChecksum, encapsulate};
    use wire::geneve::{GatewayOptions, OptionIds};

    /// Ethernet + IPv4 + UDP "hello" from 192.0.2.1:1234 to 10.0.0.10:80.
    fn client_frame() -> Vec<u8> {
        let mut ip = vec![
            0x45, 0, 0, 33, 0, 1, 0, 0, 64, 17, 0, 0, 192, 0, 2, 1, 10, 0, 0, 10,
        ];
        let mut sum: u32 = ip
            .chunks(2)
            .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
            .sum();
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        ip[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
        ip.extend_from_slice(&[0x04, 0xd2, 0, 80, 0, 13, 0, 0, b'h', b'e', b'l', b'l', b'o']);
        let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 8, 0];
        f.extend_from_slice(&ip);
        f
    }

    fn encap(tunnel: Tunnel) -> Vec<u8> {
        let frame = client_frame();
        let mut buf = MemBuf::new([0u8; 512], 128, &frame).expect("fits");
        let outer = Outer {
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            src_ip: IpAddr::from([198, 18, 2, 2]),
            dst_ip: IpAddr::from([198, 18, 3, 11]),
            ttl: 64,
            dont_fragment: true,
            flow_hash: 42,
            src_port_min: 49152,
            src_port_max: 65535,
            udp_checksum: UdpChecksum::Auto,
        };
        encapsulate(&mut buf, &outer, &tunnel).expect("encapsulate");
        buf.data().to_vec()
    }

    #[test]
    fn every_tunnel_gives_back_the_client_packet() {
        let original = client_frame()[14..].to_vec();
        // GUE and GENEVE: what a UDP socket delivers is the UDP payload.
        let gue = encap(Tunnel::Gue { port: 6080 });
        assert_eq!(
            gue_inner(&gue[14 + 20 + 8..]).expect("gue"),
            original.as_slice()
        );
        let gnv = encap(Tunnel::Geneve {
            port: 6081,
            vni: 0,
            ids: OptionIds::default(),
            options: GatewayOptions {
                endpoint_id: Some(7),
                cookie: Some(9),
            },
        });
        assert_eq!(
            geneve_inner(&gnv[14 + 20 + 8..]).expect("geneve"),
            original.as_slice()
        );
        // IPIP and GRE: a raw IPv4 socket delivers the outer IP packet.
        let mut scratch = [0u8; 1024];
        for t in [
            Tunnel::IpIp,
            Tunnel::Gre { key: Some(5) },
            Tunnel::Gre { key: None },
        ] {
            let pkt = encap(t);
            assert_eq!(
                ip_tunnel_inner(&pkt[14..], &mut scratch).expect("ip tunnel"),
                original.as_slice(),
                "{t:?}"
            );
        }
    }

    #[test]
    fn junk_is_refused_not_delivered() {
        let mut scratch = [0u8; 256];
        assert_eq!(gue_inner(&[]), Err(DecapError::Malformed));
        assert_eq!(
            gue_inner(&[0x45, 0, 0, 20]),
            Err(DecapError::BadInner),
            "variant 1 but not a whole IPv4 packet"
        );
        assert_eq!(
            geneve_inner(&[0; 8]).err(),
            Some(DecapError::NotIp),
            "protocol 0 is not IP"
        );
        assert!(geneve_inner(&[0; 3]).is_err());
        assert_eq!(
            ip_tunnel_inner(&[0x45; 40], &mut scratch).err(),
            Some(DecapError::NotATunnel)
        );
        assert_eq!(
            ip_tunnel_inner(&[0; 300], &mut scratch).err(),
            Some(DecapError::Malformed),
            "too big for scratch"
        );
        // A plain UDP packet is not an IP tunnel.
        let plain = client_frame();
        assert_eq!(
            ip_tunnel_inner(&plain[14..], &mut scratch).err(),
            Some(DecapError::NotATunnel)
        );
    }
}
