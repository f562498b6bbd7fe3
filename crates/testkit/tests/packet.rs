//! Built packets against scapy's bytes (`crates/wire/testdata`, an
//! implementation independent of `wire` and of this kit) and against
//! `wire`'s parser.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

use std::net::IpAddr;

use testkit::packet::{self, ACK, Packet, SYN, UDP, v4, v6};
use wire::encap::{DecapConfig, Tunnel, TunnelKind, parse_tunnel};
use wire::packet::{Fragment, Frame, IpVersion, parse_frame};

const VECTORS: &str = include_str!("../../wire/testdata/vectors.txt");

fn vector(name: &str) -> Vec<u8> {
    let hex = VECTORS
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no vector {name}"));
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect()
}

const CLIENT_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
const LB_MAC: [u8; 6] = [2, 0, 0, 0, 0, 2];

fn client4() -> IpAddr {
    v4("192.0.2.10")
}
fn vip4() -> IpAddr {
    v4("198.51.100.1")
}
fn client6() -> IpAddr {
    v6("2001:db8::10")
}
fn vip6() -> IpAddr {
    v6("2001:db8:100::1")
}

/// scapy's defaults: IPv4 id 1 without DF, TCP window 8192, seq 0.
fn scapy(p: Packet) -> Packet {
    p.dont_frag(false).macs(CLIENT_MAC, LB_MAC)
}

#[test]
fn frames_match_scapy() {
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "eth_qinq_ipv4_tcp",
            scapy(Packet::tcp(client4(), vip4(), 40000, 80, SYN))
                .seq(1000)
                .window(8192)
                .vlan(0x88a8, 3 << 13 | 100)
                .vlan(0x8100, 200)
                .frame(),
        ),
        (
            "eth_vlan_ipv6_udp",
            scapy(Packet::udp(client6(), vip6(), 5353, 53))
                .payload(b"query")
                .vlan(0x8100, 42)
                .frame(),
        ),
        (
            "ipv4_options_udp",
            scapy(Packet::udp(client4(), vip4(), 1234, 5678))
                .payload(b"payload!")
                .ttl(17)
                .tos(0xb8)
                .ident(0xbeef)
                .dont_frag(true)
                .ip_options(&[0x94, 0x04, 0, 0])
                .frame(),
        ),
        (
            "ipv4_udp_unfragmented",
            scapy(Packet::udp(client4(), vip4(), 3333, 4444))
                .payload(b"AAAAAAAA")
                .frame(),
        ),
        (
            "tcp_syn_opts",
            scapy(Packet::tcp(client4(), vip4(), 40001, 80, SYN | 0x40 | 0x80))
                .seq(0x0102_0304)
                .window(64240)
                .tcp_options(&[2, 4, 0x05, 0xb4, 4, 2, 3, 3, 7, 1, 0, 0])
                .frame(),
        ),
        (
            "tcp_rst_v6",
            scapy(Packet::tcp(client6(), vip6(), 1, 2, 0x04 | ACK))
                .seq(0)
                .window(8192)
                .frame(),
        ),
        (
            "icmp4_echo",
            scapy(Packet::echo(client4(), vip4(), 0x77, 1))
                .payload(b"ping")
                .frame(),
        ),
        (
            "icmp6_echo",
            scapy(Packet::echo(client6(), vip6(), 5, 6)).frame(),
        ),
        (
            "esp4",
            scapy(Packet::raw(client4(), vip4(), packet::ESP))
                .payload(&[&[0x11, 0x22, 0x33, 0x44, 0, 0, 0, 5][..], &[0; 16]].concat())
                .frame(),
        ),
    ];
    for (name, built) in cases {
        assert_eq!(hex(&built), hex(&vector(name)), "{name}");
    }
}

#[test]
fn fragments_match_scapy() {
    let f4 = scapy(Packet::udp(client4(), vip4(), 3333, 4444))
        .payload(&[b'A'; 120])
        .ident(0x4242)
        .fragments(48);
    assert_eq!(f4.len(), 3);
    assert_eq!(hex(&f4[0]), hex(&vector("ipv4_frag_first")));
    assert_eq!(hex(&f4[1]), hex(&vector("ipv4_frag_later")));
    let f6 = scapy(Packet::udp(client6(), vip6(), 7777, 8888))
        .payload(&[b'B'; 200])
        .ident(0xcafe)
        .fragments(72);
    assert_eq!(hex(&f6[0]), hex(&vector("ipv6_frag_first")));
    assert_eq!(hex(&f6[1]), hex(&vector("ipv6_frag_later")));
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[test]
fn built_packets_parse_with_wire() {
    let (c4, d4, c6, d6) = (client4(), vip4(), client6(), vip6());
    for (p, proto, ports) in [
        (Packet::tcp(c4, d4, 1, 2, SYN), 6, Some((1, 2))),
        (
            Packet::tcp(c6, d6, 3, 4, ACK).payload(b"data"),
            6,
            Some((3, 4)),
        ),
        (Packet::udp(c4, d4, 5, 6).payload(b"x"), 17, Some((5, 6))),
        (Packet::udp(c6, d6, 7, 8), 17, Some((7, 8))),
        (Packet::echo(c4, d4, 9, 1), 1, None),
        (Packet::echo(c6, d6, 9, 1), 58, None),
        (Packet::raw(c4, d4, 50).payload(&[0; 12]), 50, None),
    ] {
        let f = p.frame();
        let Ok(Frame::Ip(_, info)) = parse_frame(&f) else {
            panic!("{p:?} does not parse: {:?}", parse_frame(&f));
        };
        assert_eq!(info.proto, proto, "{p:?}");
        if ports.is_some() {
            assert_eq!(info.ports, ports, "{p:?}");
        }
        let v = if p.src.is_ipv4() {
            IpVersion::V4
        } else {
            IpVersion::V6
        };
        assert_eq!(info.version, v);
        assert_eq!(info.fragment, Fragment::No);
        let l4 = &f[info.l4_offset as usize..];
        match proto {
            6 => assert!(wire::tcp::Packet::new_unchecked(l4).verify_checksum(&p.src, &p.dst)),
            17 => assert!(wire::udp::Packet::new_unchecked(l4).verify_checksum(&p.src, &p.dst)),
            _ => {}
        }
    }
}

#[test]
fn padding_zero_checksums_and_fragment_flags() {
    let p = Packet::udp(client4(), vip4(), 1, 2)
        .udp_checksum(false)
        .min_frame(60);
    let f = p.frame();
    assert_eq!(f.len(), 60);
    assert_eq!(&f[40..42], &[0, 0], "UDP checksum left 0");
    assert!(f[42..].iter().all(|&b| b == 0), "zero padding");
    let syn = |on| {
        Packet::tcp(client4(), vip4(), 1, 2, SYN)
            .tcp_checksum(on)
            .frame()
    };
    assert_eq!(&syn(false)[50..52], &[0, 0], "TCP checksum left 0");
    assert_ne!(&syn(true)[50..52], &[0, 0]);
    assert_eq!(syn(false)[..50], syn(true)[..50], "nothing else changes");
    let frags = Packet::udp(client4(), vip4(), 1, 2)
        .payload(&[7; 40])
        .fragments(16);
    assert_eq!(frags.len(), 3);
    for (i, f) in frags.iter().enumerate() {
        let word = u16::from_be_bytes([f[20], f[21]]);
        assert_eq!(word & 0x4000, 0, "no DF on fragments");
        assert_eq!(word & 0x2000 != 0, i < 2, "MF on all but the last");
        assert_eq!(usize::from(word & 0x1fff) * 8, i * 16);
    }
    let Ok(Frame::Ip(_, info)) = parse_frame(&frags[1]) else {
        panic!("fragment does not parse")
    };
    assert_eq!(info.proto, UDP);
    assert_ne!(info.fragment, Fragment::No);
}

#[test]
fn tunnels_are_wires_and_carry_the_frame() {
    let inner = Packet::udp(client4(), vip4(), 5555, 7777)
        .payload(b"hello")
        .frame();
    for (tunnel, kind) in [
        (Tunnel::IpIp, TunnelKind::IpIp),
        (Tunnel::Gre { key: Some(5) }, TunnelKind::Gre),
        (Tunnel::Gue { port: 6080 }, TunnelKind::Gue),
    ] {
        let f = packet::encap(
            &inner,
            &packet::outer(v4("198.18.2.2"), v4("198.18.2.11")),
            &tunnel,
        );
        let t = parse_tunnel(&f, &DecapConfig::default()).expect("a tunnel");
        assert_eq!(t.kind, kind);
        assert!(
            f.ends_with(&inner[14..]),
            "{tunnel:?} carries the IP packet"
        );
    }
}

#[test]
fn the_independent_checksum_agrees_with_built_packets() {
    let (c, v) = (client6(), vip6());
    let p = Packet::tcp(c, v, 1, 2, SYN).payload(b"odd");
    let l4 = p.l4_bytes();
    assert_eq!(packet::csum(packet::pseudo(c, v, 6, l4.len()), &l4), 0);
    let ip = Packet::udp(client4(), vip4(), 1, 2).ip();
    assert_eq!(packet::csum(0, &ip[..20]), 0);
    assert_ne!(packet::csum(0, &ip[..19]), 0);
}

#[test]
fn arp_requests_match_scapy() {
    let f = packet::arp_request(
        CLIENT_MAC,
        "192.0.2.10".parse().unwrap(),
        "198.51.100.1".parse().unwrap(),
    );
    assert_eq!(hex(&f), hex(&vector("arp_request")));
}
