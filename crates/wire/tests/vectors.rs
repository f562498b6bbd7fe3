//! Tests against byte vectors built by scapy (`testdata/gen_vectors.py`), an implementation
//! independent of this crate: parsing, emitting, encapsulation, decapsulation, the GENEVE
//! return rewrite, ICMP-error flow keys, and the `spillway-flow-v1` hash.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use wire::buf::{MemBuf, PacketBuf};
use wire::encap::{
    self, DecapConfig, Outer, Tunnel, TunnelKind, UdpChecksum, decapsulate, encapsulate,
    geneve_return_rewrite, parse_tunnel,
};
use wire::ethernet::{EthernetRepr, ethertype};
use wire::flow::{Affinity, FlowKey, Tuple, hash_words};
use wire::geneve::{GatewayOptions, OptionIds};
use wire::ip::proto;
use wire::packet::{Fragment, Frame, IpVersion, PacketInfo, parse_frame};
use wire::{
    DecapError, NdpError, ParseError, ReplyError, arp, esp, geneve, gre, gue, icmpv4, icmpv6, ipv4,
    ipv6, ndp, reply, tcp, udp, vxlan,
};

const VECTORS: &str = include_str!("../testdata/vectors.txt");

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn v(name: &str) -> Vec<u8> {
    for line in VECTORS.lines() {
        let mut it = line.split_whitespace();
        if it.next() == Some(name) {
            return hex(it.next().unwrap());
        }
    }
    panic!("no vector {name}");
}

const CLIENT_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
const LB_MAC: [u8; 6] = [2, 0, 0, 0, 0, 2];
const BE_MAC: [u8; 6] = [2, 0, 0, 0, 0, 3];
const CLIENT4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 10);
const VIP4: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 1);
const LB4: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const BE4: Ipv4Addr = Ipv4Addr::new(10, 0, 1, 7);
const CLIENT6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x10);
const VIP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0, 0, 0, 0, 1);
const LB6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1);
const BE6: Ipv6Addr = Ipv6Addr::new(0xfd00, 1, 0, 0, 0, 0, 0, 7);

fn ip_info(frame: &[u8]) -> (EthernetRepr, PacketInfo) {
    match parse_frame(frame).unwrap() {
        Frame::Ip(e, i) => (e, i),
        other => panic!("not IP: {other:?}"),
    }
}

fn m4(a: Ipv4Addr) -> [u8; 16] {
    a.to_ipv6_mapped().octets()
}

// ------------------------------------------------------------------ parsing

#[test]
fn qinq_and_tcp() {
    let f = v("eth_qinq_ipv4_tcp");
    let (e, i) = ip_info(&f);
    assert_eq!(e.vlan_count, 2);
    assert_eq!(e.vlans[0].tpid, ethertype::QINQ);
    assert_eq!(e.vlans[0].vid(), 100);
    assert_eq!(e.vlans[0].pcp(), 3);
    assert_eq!(e.vlans[1].tpid, ethertype::VLAN);
    assert_eq!(e.vlans[1].vid(), 200);
    assert_eq!(e.header_len(), 22);
    assert_eq!(i.l3_offset, 22);
    assert_eq!(i.ports, Some((40000, 80)));
    assert_eq!(i.tcp_flags, tcp::Flags::SYN);
    // Emitting the parsed Ethernet header reproduces scapy's bytes.
    let mut out = [0xa5u8; 22];
    e.emit(&mut out).unwrap();
    assert_eq!(&out[..], &f[..22]);
    let p = ipv4::Packet::new_checked(&f[22..]).unwrap();
    let r = ipv4::Ipv4Repr::parse(&p).unwrap();
    let t = tcp::Packet::new_checked(p.payload()).unwrap();
    assert!(t.verify_checksum(&IpAddr::V4(r.src), &IpAddr::V4(r.dst)));
    assert_eq!(t.seq(), 1000);
}

#[test]
fn vlan_ipv6_udp() {
    let f = v("eth_vlan_ipv6_udp");
    let (e, i) = ip_info(&f);
    assert_eq!((e.vlan_count, e.vlans[0].vid()), (1, 42));
    assert_eq!(i.version, IpVersion::V6);
    assert_eq!(i.ports, Some((5353, 53)));
    let p = ipv6::Packet::new_checked(&f[18..]).unwrap();
    let u = udp::Packet::new_checked(p.payload()).unwrap();
    assert!(u.verify_checksum(&IpAddr::V6(p.src()), &IpAddr::V6(p.dst())));
    assert_eq!(u.payload(), b"query");
}

#[test]
fn arp_parse_and_emit() {
    let f = v("arp_request");
    let Frame::Arp(_, a) = parse_frame(&f).unwrap() else {
        panic!("not ARP")
    };
    assert_eq!(a.oper, arp::op::REQUEST);
    assert_eq!(a.sha, CLIENT_MAC);
    assert_eq!(a.spa, CLIENT4);
    assert_eq!(a.tpa, VIP4);
    let mut out = [0xa5u8; arp::PACKET_LEN];
    a.emit(&mut arp::Packet::new_unchecked(&mut out[..]))
        .unwrap();
    assert_eq!(&out[..], &f[14..42]);
}

#[test]
fn ipv4_options_parse_and_emit() {
    let f = v("ipv4_options_udp");
    let p = ipv4::Packet::new_checked(&f[14..]).unwrap();
    let r = ipv4::Ipv4Repr::parse(&p).unwrap();
    assert_eq!(p.header_len(), 24);
    assert_eq!(r.options.as_bytes(), &[0x94, 0x04, 0x00, 0x00]);
    assert_eq!((r.ttl, r.dscp_ecn, r.ident), (17, 0xb8, 0xbeef));
    assert!(r.dont_frag && !r.more_frags);
    let mut out = [0xa5u8; 24];
    r.emit(&mut ipv4::Packet::new_unchecked(&mut out[..]))
        .unwrap();
    assert_eq!(&out[..], &f[14..38]);
    let u = udp::Packet::new_checked(p.payload()).unwrap();
    let ur = udp::UdpRepr::parse(&u).unwrap();
    let mut out = [0xa5u8; 8];
    ur.emit(&mut udp::Packet::new_unchecked(&mut out[..]))
        .unwrap();
    assert_eq!(&out[..6], &f[38..44]);
    let mut whole = f[38..].to_vec();
    udp::Packet::new_unchecked(&mut whole[..])
        .fill_checksum(&IpAddr::V4(r.src), &IpAddr::V4(r.dst))
        .unwrap();
    assert_eq!(whole, &f[38..]);
    // A corrupted checksum is rejected.
    let mut bad = f[14..].to_vec();
    bad[10] ^= 1;
    assert_eq!(
        ipv4::Ipv4Repr::parse(&ipv4::Packet::new_checked(&bad[..]).unwrap()),
        Err(ParseError::BadChecksum)
    );
}

#[test]
fn ipv6_extension_walk() {
    let f = v("ipv6_ext_tcp");
    let p = ipv6::Packet::new_checked(&f[14..]).unwrap();
    let r = ipv6::Ipv6Repr::parse(&p).unwrap();
    assert_eq!(
        (r.traffic_class, r.flow_label, r.hop_limit),
        (0x20, 0xabcde, 33)
    );
    let mut out = [0xa5u8; 40];
    r.emit(&mut ipv6::Packet::new_unchecked(&mut out[..]))
        .unwrap();
    assert_eq!(&out[..], &f[14..54]);
    let w = ipv6::walk_extensions(p.payload(), p.next_header()).unwrap();
    assert_eq!(w.upper, proto::TCP);
    assert_eq!(w.count, 3);
    assert_eq!(w.offset, 8 + 24 + 8);
    let (_, i) = ip_info(&f);
    assert_eq!(i.proto, proto::TCP);
    assert_eq!(i.ports, Some((50000, 443)));
    assert_eq!(i.tcp_flags, tcp::Flags::PSH.union(tcp::Flags::ACK));
    let t = tcp::Packet::new_checked(&p.payload()[w.offset..]).unwrap();
    assert!(t.verify_checksum(&IpAddr::V6(r.src), &IpAddr::V6(r.dst)));
    assert_eq!((t.ack(), t.window()), (9, 512));
}

#[test]
fn tcp_options_parse_and_emit() {
    let f = v("tcp_syn_opts");
    let ip = ipv4::Packet::new_checked(&f[14..]).unwrap();
    let t = tcp::Packet::new_checked(ip.payload()).unwrap();
    let r = tcp::TcpRepr::parse(&t).unwrap();
    assert!(
        r.flags.contains(
            tcp::Flags::SYN
                .union(tcp::Flags::ECE)
                .union(tcp::Flags::CWR)
        )
    );
    assert_eq!(r.options.as_bytes().len(), 12);
    assert_eq!(r.seq, 0x01020304);
    let mut out = vec![0xa5u8; ip.payload().len()];
    let mut p = tcp::Packet::new_unchecked(&mut out[..]);
    r.emit(&mut p).unwrap();
    p.fill_checksum(&IpAddr::V4(ip.src()), &IpAddr::V4(ip.dst()))
        .unwrap();
    assert_eq!(&out[..], ip.payload());
    let f = v("tcp_rst_v6");
    let (_, i) = ip_info(&f);
    assert!(i.tcp_flags.contains(tcp::Flags::RST));
}

#[test]
fn fragments_share_a_key_and_later_has_no_ports() {
    for (first, later, whole) in [
        (
            "ipv4_frag_first",
            "ipv4_frag_later",
            "ipv4_udp_unfragmented",
        ),
        (
            "ipv6_frag_first",
            "ipv6_frag_later",
            "flow6_udp_client_to_vip",
        ),
    ] {
        let (_, a) = ip_info(&v(first));
        let (_, b) = ip_info(&v(later));
        assert!(matches!(a.fragment, Fragment::First { .. }), "{first}");
        assert!(matches!(b.fragment, Fragment::Later { .. }), "{later}");
        assert!(a.ports.is_some());
        assert_eq!(b.ports, None);
        for aff in [
            Affinity::None,
            Affinity::ClientIpPortProto,
            Affinity::ClientIpProto,
            Affinity::ClientIp,
        ] {
            let (ka, kb) = (FlowKey::from_packet(&a, aff), FlowKey::from_packet(&b, aff));
            assert_eq!(ka, kb);
            assert_ne!(ka.tuple, Tuple::Five);
        }
        let (_, w) = ip_info(&v(whole));
        assert_eq!(FlowKey::from_packet(&w, Affinity::None).tuple, Tuple::Five);
    }
    let (_, a) = ip_info(&v("ipv6_frag_first"));
    assert_eq!(a.fragment, Fragment::First { ident: 0xcafe });
    assert_eq!(a.proto, proto::UDP);
}

/// RFC 6946: an atomic fragment (offset 0, M = 0) is a whole packet: it keeps
/// its ports and its 5-tuple key, and is not a fragment for rule selection.
#[test]
fn an_ipv6_atomic_fragment_is_a_whole_packet() {
    let (_, a) = ip_info(&v("ipv6_atomic_frag_tcp"));
    assert_eq!(a.fragment, Fragment::Atomic { ident: 0xa70 });
    assert!(!a.fragment.is_fragment());
    assert!(a.fragment.has_fragment_header());
    assert_eq!((a.proto, a.ports), (proto::TCP, Some((40022, 22))));
    assert_eq!(FlowKey::from_packet(&a, Affinity::None).tuple, Tuple::Five);
}

#[test]
fn icmp_echo_and_esp() {
    let f = v("icmp4_echo");
    let (_, i) = ip_info(&f);
    let ic = i.icmp.unwrap();
    assert_eq!((ic.msg_type, ic.quoted), (icmpv4::msg::ECHO_REQUEST, None));
    let p = icmpv4::Packet::new_checked(&f[34..]).unwrap();
    let r = icmpv4::Icmpv4Repr::parse(&p).unwrap();
    assert_eq!(p.echo_ident(), 0x77);
    let mut out = f[34..].to_vec();
    out[..8].fill(0xa5);
    r.emit(&mut icmpv4::Packet::new_unchecked(&mut out[..]))
        .unwrap();
    assert_eq!(out, &f[34..]);
    assert_eq!(FlowKey::from_packet(&i, Affinity::None).tuple, Tuple::Three);

    let f = v("icmp6_echo");
    let (_, i) = ip_info(&f);
    assert_eq!(i.icmp.unwrap().msg_type, icmpv6::msg::ECHO_REQUEST);
    let p = icmpv6::Packet::new_checked(&f[54..]).unwrap();
    let r = icmpv6::Icmpv6Repr::parse(&p, &CLIENT6, &VIP6).unwrap();
    assert_eq!(p.echo_ident(), 5);
    let mut out = f[54..].to_vec();
    out[..8].fill(0xa5);
    r.emit(
        &mut icmpv6::Packet::new_unchecked(&mut out[..]),
        &CLIENT6,
        &VIP6,
    )
    .unwrap();
    assert_eq!(out, &f[54..]);

    let f = v("esp4");
    let (_, i) = ip_info(&f);
    assert_eq!(i.spi, Some(0x11223344));
    assert_eq!(i.ports, None);
    let r = esp::EspRepr::parse(&esp::Packet::new_checked(&f[34..]).unwrap()).unwrap();
    assert_eq!((r.spi, r.seq), (0x11223344, 5));
    let mut out = [0xa5u8; 8];
    r.emit(&mut esp::Packet::new_unchecked(&mut out[..]))
        .unwrap();
    assert_eq!(&out[..], &f[34..42]);
}

#[test]
fn gre_with_key_seq_checksum() {
    let f = v("gre_key_seq_csum");
    let ip = ipv4::Packet::new_checked(&f[14..]).unwrap();
    let p = gre::Packet::new_checked(ip.payload()).unwrap();
    let r = gre::GreRepr::parse(&p).unwrap();
    assert_eq!(r.key, Some(0xdeadbeef));
    assert_eq!(r.seq, Some(42));
    assert!(r.checksum);
    assert_eq!(r.protocol, ethertype::IPV4);
    let mut out = ip.payload().to_vec();
    out[..r.header_len()].fill(0xa5);
    r.emit(&mut out).unwrap();
    assert_eq!(out, ip.payload());
    let mut bad = ip.payload().to_vec();
    *bad.last_mut().unwrap() ^= 0x40;
    assert_eq!(
        gre::GreRepr::parse(&gre::Packet::new_checked(&bad[..]).unwrap()),
        Err(ParseError::BadChecksum)
    );
}

#[test]
fn gue_variant0_and_geneve_and_vxlan() {
    let f = v("gue_v0_ipv4");
    let u = udp::Packet::new_checked(&f[34..]).unwrap();
    let r = gue::GueRepr::parse(u.payload()).unwrap();
    assert_eq!(
        r,
        gue::GueRepr::Header {
            control: false,
            proto: proto::IPIP,
            flags: 0x1234,
            hlen: 1
        }
    );
    let mut out = [0xa5u8; 8];
    r.emit(&mut out).unwrap();
    assert_eq!(&out[..], &u.payload()[..8]);
    // The decapsulator accepts variant 0 too.
    let info = parse_tunnel(&f, &DecapConfig::default()).unwrap();
    assert_eq!(info.kind, TunnelKind::Gue);
    assert_eq!(info.inner_offset, 34 + 8 + 8);

    let f = v("geneve_opts");
    let u = udp::Packet::new_checked(&f[34..]).unwrap();
    let g = geneve::Packet::new_checked(u.payload()).unwrap();
    let r = geneve::GeneveRepr::parse(&g).unwrap();
    assert_eq!(
        (r.vni, r.protocol, r.options_len),
        (0x123456, ethertype::IPV4, 24)
    );
    let opts: Vec<_> = g.option_iter().map(Result::unwrap).collect();
    assert_eq!(opts.len(), 3);
    assert!(opts[1].is_critical() && opts[1].data.is_empty());
    let gw = GatewayOptions::parse(&OptionIds::default(), g.options()).unwrap();
    assert_eq!(gw.endpoint_id, Some(0x0102030405060708));
    assert_eq!(gw.cookie, Some(0xa1b2c3d4));
    let mut out = [0xa5u8; 32];
    r.emit(&mut geneve::Packet::new_unchecked(&mut out[..]))
        .unwrap();
    let mut off = 8;
    for o in &opts {
        off += o.emit(&mut out[off..]).unwrap();
    }
    assert_eq!(&out[..], &u.payload()[..32]);

    let f = v("vxlan");
    let u = udp::Packet::new_checked(&f[34..]).unwrap();
    let x = vxlan::Packet::new_checked(u.payload()).unwrap();
    let r = vxlan::VxlanRepr::parse(&x).unwrap();
    assert_eq!(r.vni, 0xabcdef);
    let mut out = [0xa5u8; 8];
    r.emit(&mut vxlan::Packet::new_unchecked(&mut out[..]))
        .unwrap();
    assert_eq!(&out[..], &u.payload()[..8]);
    let (inner_eth, _) = ip_info(x.payload());
    assert_eq!(inner_eth.dst, BE_MAC);
}

// ------------------------------------------------------------------ ICMP errors (M13)

#[test]
fn icmp_errors_map_to_the_original_flow() {
    let cases = [
        ("icmp4_frag_needed", "flow4_client_to_vip"),
        ("icmp4_time_exceeded", "flow4_client_to_vip"),
        ("icmp4_port_unreachable", "flow4_udp_client_to_vip"),
        ("icmp6_packet_too_big", "flow6_client_to_vip"),
        ("icmp6_dest_unreachable", "flow6_udp_client_to_vip"),
        ("icmp6_time_exceeded", "flow6_client_to_vip"),
    ];
    for (err, orig) in cases {
        let (_, e) = ip_info(&v(err));
        let (_, o) = ip_info(&v(orig));
        assert!(e.icmp.unwrap().quoted.is_some(), "{err}");
        for aff in [
            Affinity::None,
            Affinity::ClientIpPortProto,
            Affinity::ClientIpProto,
            Affinity::ClientIp,
        ] {
            let ke = FlowKey::from_packet(&e, aff);
            assert_eq!(ke, FlowKey::from_packet(&o, aff), "{err} {aff:?}");
            assert_eq!(ke.hash64(), FlowKey::from_packet(&o, aff).hash64());
        }
        // The error itself does not look like the flow: its source is a router.
        assert_ne!(e.src, o.src);
    }
    let f = v("icmp4_frag_needed");
    let p = icmpv4::Packet::new_checked(&f[34..]).unwrap();
    assert!(p.is_frag_needed());
    assert_eq!(p.next_hop_mtu(), 1400);
    icmpv4::Icmpv4Repr::parse(&p).unwrap();
    let f = v("icmp6_packet_too_big");
    let p = icmpv6::Packet::new_checked(&f[54..]).unwrap();
    let ip = ipv6::Packet::new_checked(&f[14..]).unwrap();
    let r = icmpv6::Icmpv6Repr::parse(&p, &ip.src(), &ip.dst()).unwrap();
    assert_eq!(r, icmpv6::Icmpv6Repr::packet_too_big(1280));
    let (_, i) = ip_info(&f);
    assert_eq!(i.icmp.unwrap().rest, 1280);
}

// ------------------------------------------------------------------ encapsulation (M8, M30)

const FLOW_HASH: u64 = 0x12345;
const EID: u64 = 0x1122334455667788;
const COOKIE: u32 = 0x99aabbcc;

fn outer(v6: bool, csum: UdpChecksum) -> Outer {
    Outer {
        src_mac: LB_MAC,
        dst_mac: BE_MAC,
        src_ip: if v6 { IpAddr::V6(LB6) } else { IpAddr::V4(LB4) },
        dst_ip: if v6 { IpAddr::V6(BE6) } else { IpAddr::V4(BE4) },
        ttl: 64,
        dont_fragment: true,
        flow_hash: FLOW_HASH,
        src_port_min: 50000,
        src_port_max: 50000,
        udp_checksum: csum,
    }
}

fn geneve_tunnel() -> Tunnel {
    Tunnel::Geneve {
        port: geneve::PORT,
        vni: 0,
        ids: OptionIds::default(),
        options: GatewayOptions {
            endpoint_id: Some(EID),
            cookie: Some(COOKIE),
        },
    }
}

fn encap_cases() -> Vec<(&'static str, &'static str, bool, UdpChecksum, Tunnel)> {
    use UdpChecksum::*;
    let gre_k = Tunnel::Gre {
        key: Some(0xfeedbeef),
    };
    let gue = Tunnel::Gue { port: gue::PORT };
    vec![
        ("inner4", "encap_ipip_4in4", false, Auto, Tunnel::IpIp),
        (
            "inner4_padded",
            "encap_ipip_padded_4in4",
            false,
            Auto,
            Tunnel::IpIp,
        ),
        ("inner6", "encap_ipip_6in6", true, Auto, Tunnel::IpIp),
        ("inner4", "encap_ipip_4in6", true, Auto, Tunnel::IpIp),
        ("inner4", "encap_gre_4in4", false, Auto, gre_k),
        (
            "inner6",
            "encap_gre_6in6",
            true,
            Auto,
            Tunnel::Gre { key: None },
        ),
        ("inner4", "encap_gue_4in4", false, Auto, gue),
        ("inner4", "encap_gue_4in4_full", false, Full, gue),
        ("inner6", "encap_gue_6in6", true, Auto, gue),
        ("inner4", "encap_gue_4in6", true, Full, gue),
        ("inner4", "encap_geneve_4in4", false, Auto, geneve_tunnel()),
        (
            "inner4_tagged",
            "encap_geneve_4in4_tagged",
            false,
            Zero,
            geneve_tunnel(),
        ),
        (
            "inner4",
            "encap_geneve_4in4_full",
            false,
            Full,
            geneve_tunnel(),
        ),
        ("inner6", "encap_geneve_6in6", true, Auto, geneve_tunnel()),
    ]
}

#[test]
fn encapsulation_matches_scapy_and_decapsulates_back() {
    for (inner, expected, v6, csum, tunnel) in encap_cases() {
        let orig = v(inner);
        let want = v(expected);
        let mut buf = MemBuf::new([0u8; 512], 128, &orig).unwrap();
        let hdr = encapsulate(&mut buf, &outer(v6, csum), &tunnel).unwrap();
        assert_eq!(buf.data(), &want[..], "{expected}");
        assert_eq!(hdr, want.len() - (buf.len() - hdr), "{expected}");
        // Decapsulate with the original link-layer header: byte for byte the original frame
        // (minus link padding, which encapsulation drops).
        let l2_len = EthernetRepr::parse(&orig).unwrap().header_len();
        let (_, info) = ip_info(&orig);
        let end = l2_len + info.l3_len as usize;
        let t = decapsulate(&mut buf, &DecapConfig::default(), &orig[..l2_len]).unwrap();
        assert_eq!(buf.data(), &orig[..end], "{expected}");
        assert_eq!(t.dst_ip, outer(v6, csum).dst_ip);
        if let Tunnel::Geneve { .. } = tunnel {
            assert_eq!(t.kind, TunnelKind::Geneve);
            assert_eq!(t.gateway.endpoint_id, Some(EID));
            assert_eq!(t.gateway.cookie, Some(COOKIE));
            assert_eq!(t.udp_ports, Some((50000, geneve::PORT)));
        }
        if let Tunnel::Gre { key } = tunnel {
            assert_eq!(t.gre_key, key);
        }
    }
}

#[test]
fn l2dsr_rewrites_only_macs() {
    let orig = v("inner4");
    let mut f = orig.clone();
    encap::l2dsr_rewrite(&mut f, BE_MAC, LB_MAC).unwrap();
    assert_eq!(&f[..6], &BE_MAC);
    assert_eq!(&f[6..12], &LB_MAC);
    assert_eq!(&f[12..], &orig[12..]);
    encap::l2dsr_rewrite(&mut f, LB_MAC, CLIENT_MAC).unwrap();
    assert_eq!(f, orig);
    assert!(encap::l2dsr_rewrite(&mut f[..10], BE_MAC, LB_MAC).is_err());
}

#[test]
fn geneve_return_rewrite_matches_scapy() {
    for (sent, returned) in [
        ("encap_geneve_4in4", "geneve_return_4in4"),
        ("encap_geneve_4in4_full", "geneve_return_4in4_full"),
        ("encap_geneve_6in6", "geneve_return_6in6"),
    ] {
        let mut f = v(sent);
        let info = geneve_return_rewrite(&mut f, &DecapConfig::default(), Some(63)).unwrap();
        assert_eq!(info.gateway.cookie, Some(COOKIE));
        assert_eq!(f, v(returned), "{returned}");
        // Spillway accepts the returned packet: checksums verify, options are intact.
        let back = parse_tunnel(&f, &DecapConfig::default()).unwrap();
        assert_eq!(back.gateway, info.gateway);
        assert_eq!(back.src_ip, info.dst_ip);
        assert_eq!(back.udp_ports, info.udp_ports);
    }
    let mut f = v("encap_gue_4in4");
    assert_eq!(
        geneve_return_rewrite(&mut f, &DecapConfig::default(), None),
        Err(DecapError::NotTunnel)
    );
}

#[test]
fn decap_rejects_bad_input() {
    let cfg = DecapConfig::default();
    // Corrupted UDP checksum (IPv6 GENEVE).
    let mut f = v("encap_geneve_6in6");
    let last = f.len() - 1;
    f[last] ^= 0xff;
    assert_eq!(
        parse_tunnel(&f, &cfg),
        Err(DecapError::Parse(ParseError::BadChecksum))
    );
    // Zero UDP checksum over IPv6 only with explicit permission (RFC 6935/6936).
    let orig = v("inner6");
    let mut buf = MemBuf::new([0u8; 512], 128, &orig).unwrap();
    encapsulate(&mut buf, &outer(true, UdpChecksum::Zero), &geneve_tunnel()).unwrap();
    assert_eq!(
        parse_tunnel(buf.data(), &cfg),
        Err(DecapError::ZeroUdpChecksum)
    );
    let allow = DecapConfig {
        allow_zero_udp_checksum_v6: true,
        ..cfg
    };
    assert!(parse_tunnel(buf.data(), &allow).is_ok());
    // Not a tunnel.
    assert_eq!(parse_tunnel(&v("inner4"), &cfg), Err(DecapError::NotTunnel));
    // Wrong link-layer header supplied.
    let mut buf = MemBuf::new([0u8; 512], 128, &v("encap_gue_6in6")).unwrap();
    assert_eq!(
        decapsulate(&mut buf, &cfg, &v("inner4")[..14]),
        Err(DecapError::L2Mismatch)
    );
    // Truncated outer packet.
    let f = v("encap_gre_4in4");
    for n in 0..f.len() {
        assert!(parse_tunnel(&f[..n], &cfg).is_err(), "len {n}");
    }
}

#[test]
fn encap_errors() {
    let orig = v("inner4");
    let mut buf = MemBuf::new([0u8; 512], 10, &orig).unwrap();
    assert_eq!(
        encapsulate(&mut buf, &outer(false, UdpChecksum::Auto), &geneve_tunnel()),
        Err(wire::EncapError::Buf(wire::BufError::NoHeadroom))
    );
    assert_eq!(
        buf.data(),
        &orig[..],
        "a failed encapsulation leaves the frame alone"
    );
    let mut o = outer(false, UdpChecksum::Auto);
    o.dst_ip = IpAddr::V6(BE6);
    let mut buf = MemBuf::new([0u8; 512], 128, &orig).unwrap();
    assert_eq!(
        encapsulate(&mut buf, &o, &Tunnel::IpIp),
        Err(wire::EncapError::MixedFamilies)
    );
    let mut buf = MemBuf::new([0u8; 512], 128, &v("arp_request")).unwrap();
    assert_eq!(
        encapsulate(&mut buf, &outer(false, UdpChecksum::Auto), &Tunnel::IpIp),
        Err(wire::EncapError::NotIp)
    );
}

// ------------------------------------------------------------------ replies (NDP, M14)

#[test]
fn neighbor_solicitations_are_answered_as_scapy_builds_the_advertisement() {
    let cases = [
        ("ns_vip6", "na_vip6", VIP6, Some(CLIENT_MAC)),
        ("ns_nud_vlan", "na_nud_vlan", LB6, None),
        ("ns_dad", "na_dad", VIP6, None),
    ];
    for (ns, na, target, source_ll) in cases {
        let f = v(ns);
        let sol = ndp::parse_solicitation(&f).unwrap();
        assert_eq!(sol.ns.target, target, "{ns}");
        assert_eq!(sol.ns.source_ll, source_ll, "{ns}");
        // Emitting the parsed solicitation reproduces scapy's message.
        let l4 = sol.eth.header_len() + 40;
        let mut m = vec![0xa5u8; sol.ns.buffer_len()];
        sol.ns.emit(&mut m, &sol.src, &sol.dst).unwrap();
        assert_eq!(&m[..], &f[l4..], "{ns}");
        // The answer, byte for byte.
        let mut buf = MemBuf::new([0xa5u8; 512], 128, &f).unwrap();
        ndp::answer_solicitation(&mut buf, &sol, LB_MAC).unwrap();
        let want = v(na);
        assert_eq!(buf.data(), &want[..], "{na}");
        // And scapy's advertisement passes our validation.
        let ip = ipv6::Packet::new_checked(&want[l4 - 40..]).unwrap();
        let adv =
            ndp::NeighborAdvertRepr::parse(ip.payload(), &ip.src(), &ip.dst(), ip.hop_limit())
                .unwrap();
        assert_eq!(adv.target, target);
        assert_eq!(adv.target_ll, Some(LB_MAC));
        assert!(adv.flags.contains(ndp::NaFlags::OVERRIDE));
        assert!(!adv.flags.contains(ndp::NaFlags::ROUTER));
        assert_eq!(
            adv.flags.contains(ndp::NaFlags::SOLICITED),
            ns != "ns_dad",
            "{na}"
        );
    }
    // Other frames are not solicitations.
    assert_eq!(
        ndp::parse_solicitation(&v("na_vip6")),
        Err(NdpError::WrongType)
    );
    assert_eq!(
        ndp::parse_solicitation(&v("icmp6_echo")),
        Err(NdpError::WrongType)
    );
    assert_eq!(
        ndp::parse_solicitation(&v("inner4")),
        Err(NdpError::WrongType)
    );
    // A forwarded copy (hop limit decremented) is not answered.
    let mut f = v("ns_vip6");
    f[21] = 254;
    assert_eq!(ndp::parse_solicitation(&f), Err(NdpError::HopLimit));
}

#[test]
fn tcp_resets_match_scapy() {
    for (seg, want) in [
        ("rst_in_syn4", "rst_out_syn4"),
        ("rst_in_ack4_qinq", "rst_out_ack4_qinq"),
        ("rst_in_fin4", "rst_out_fin4"),
        ("rst_in_syn6", "rst_out_syn6"),
        ("rst_in_ack6_vlan_ext", "rst_out_ack6_vlan_ext"),
    ] {
        let f = v(seg);
        let mut buf = MemBuf::new([0xa5u8; 512], 128, &f).unwrap();
        reply::tcp_reset(&mut buf, LB_MAC).unwrap();
        assert_eq!(buf.data(), &v(want)[..], "{want}");
    }
    // A reset is never answered; nor is anything but TCP.
    let mut buf = MemBuf::new([0u8; 512], 128, &v("tcp_rst_v6")).unwrap();
    assert_eq!(reply::tcp_reset(&mut buf, LB_MAC), Err(ReplyError::Reset));
    let mut buf = MemBuf::new([0u8; 512], 128, &v("eth_vlan_ipv6_udp")).unwrap();
    assert_eq!(reply::tcp_reset(&mut buf, LB_MAC), Err(ReplyError::NotTcp));
    let mut buf = MemBuf::new([0u8; 512], 128, &v("arp_request")).unwrap();
    assert_eq!(reply::tcp_reset(&mut buf, LB_MAC), Err(ReplyError::NotTcp));
}

// ------------------------------------------------------------------ hash

#[test]
fn hash_matches_independent_python_transcription() {
    let mut n = 0;
    for line in VECTORS.lines().filter(|l| l.starts_with("hash ")) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let src: [u8; 16] = hex(f[1]).try_into().unwrap();
        let dst: [u8; 16] = hex(f[2]).try_into().unwrap();
        let (sp, dp, pr): (u16, u16, u8) = (
            f[3].parse().unwrap(),
            f[4].parse().unwrap(),
            f[5].parse().unwrap(),
        );
        let key = match f[6] {
            "5" => FlowKey::five(src, dst, pr, sp, dp),
            "3" => FlowKey::three(src, dst, pr),
            "2" => FlowKey::two(src, dst),
            t => panic!("tuple {t}"),
        };
        let seed = u64::from_str_radix(f[7], 16).unwrap();
        let want = u64::from_str_radix(f[8], 16).unwrap();
        assert_eq!(key.hash64_seeded(seed), want, "{line}");
        assert_eq!(hash_words(&key.pack(), seed), want);
        n += 1;
    }
    assert_eq!(n, 7);
    // A golden value pinned in the source as well, so a change to the vectors file alone
    // cannot silently change the algorithm.
    let k = FlowKey::five(m4(CLIENT4), m4(VIP4), proto::TCP, 40000, 80);
    let line = VECTORS.lines().find(|l| l.starts_with("hash ")).unwrap();
    assert!(line.ends_with(&format!("{:016x}", k.hash64())));
}

#[test]
fn symmetric_keys_of_both_directions_agree() {
    let (_, a) = ip_info(&v("flow4_client_to_vip"));
    let k = FlowKey::from_packet(&a, Affinity::None);
    let r = FlowKey::five(m4(VIP4), m4(CLIENT4), proto::TCP, 80, 40000);
    assert_eq!(k.reversed(), r);
    assert_ne!(k.hash64(), r.hash64());
    assert_eq!(k.symmetric(), r.symmetric());
    assert_eq!(k.symmetric().hash64(), r.symmetric().hash64());
}

#[test]
fn every_prefix_of_every_vector_is_handled() {
    let cfg = DecapConfig::default();
    let mut vectors = 0;
    for line in VECTORS
        .lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with("hash "))
    {
        let mut it = line.split_whitespace();
        let name = it.next().unwrap();
        let f = hex(it.next().unwrap());
        // Every full vector is a valid frame.
        assert!(parse_frame(&f).is_ok(), "{name}");
        for n in 0..f.len() {
            let p = &f[..n];
            let _ = parse_frame(p);
            let _ = parse_tunnel(p, &cfg);
            let _ = wire::packet::parse_ip(p.get(14..).unwrap_or(&[]));
            let mut buf = MemBuf::new([0u8; 2048], 128, p).unwrap();
            let _ = decapsulate(&mut buf, &cfg, &[]);
            let mut buf = MemBuf::new([0u8; 2048], 128, p).unwrap();
            if encapsulate(&mut buf, &outer(false, UdpChecksum::Full), &geneve_tunnel()).is_err() {
                assert_eq!(buf.data(), p, "{name}[..{n}]");
            }
            let _ = wire::neighbour::parse_sighting(p);
            // A cut frame is never answered: its IP length no longer fits.
            assert!(ndp::parse_solicitation(p).is_err(), "{name}[..{n}]");
            let mut buf = MemBuf::new([0u8; 2048], 128, p).unwrap();
            assert!(reply::tcp_reset(&mut buf, LB_MAC).is_err(), "{name}[..{n}]");
            assert_eq!(buf.data(), p, "{name}[..{n}]");
        }
        vectors += 1;
    }
    assert_eq!(vectors, 73);
}

// ------------------------------------------------ neighbour resolution frames (M47)

#[test]
fn neighbour_requests_and_announcements_match_scapy() {
    use wire::neighbour;
    let mut b = [0u8; 128];
    let n = neighbour::arp_request(&mut b, LB_MAC, LB4, BE4).unwrap();
    assert_eq!(&b[..n], &v("nbr_arp_request")[..]);
    let n = neighbour::gratuitous_arp(&mut b, LB_MAC, VIP4).unwrap();
    assert_eq!(&b[..n], &v("nbr_garp")[..]);
    let n = neighbour::neighbour_solicitation(&mut b, LB_MAC, LB6, BE6).unwrap();
    assert_eq!(&b[..n], &v("nbr_ns")[..]);
    let n = neighbour::unsolicited_advert(&mut b, LB_MAC, VIP6).unwrap();
    assert_eq!(&b[..n], &v("nbr_na")[..]);
    // scapy's frames are sightings of what they announce.
    let s = neighbour::parse_sighting(&v("nbr_na")).unwrap();
    assert_eq!((s.ip, s.mac), (IpAddr::V6(VIP6), LB_MAC));
    let s = neighbour::parse_sighting(&v("nbr_garp")).unwrap();
    assert_eq!((s.ip, s.mac), (IpAddr::V4(VIP4), LB_MAC));
}

// ------------------------------------------------ VRRPv3 advertisements

#[test]
fn vrrp_advertisements_match_scapy() {
    use wire::vrrp::{AdvertRepr, advert_frame, link_local, parse_frame};
    let v4 = [IpAddr::V4(VIP4), IpAddr::V4(Ipv4Addr::new(198, 51, 100, 2))];
    let a = AdvertRepr {
        mac: LB_MAC,
        src: IpAddr::V4(LB4),
        vrid: 51,
        priority: 150,
        interval_cs: 10,
        addrs: &v4,
    };
    let mut b = [0u8; 256];
    let n = advert_frame(&mut b, &a).unwrap();
    assert_eq!(&b[..n], &v("vrrp_v4")[..]);
    let v6 = [IpAddr::V6(VIP6)];
    let a = AdvertRepr {
        src: IpAddr::V6(link_local(LB_MAC)),
        vrid: 7,
        priority: 0,
        interval_cs: 100,
        addrs: &v6,
        ..a
    };
    let n = advert_frame(&mut b, &a).unwrap();
    assert_eq!(&b[..n], &v("vrrp_v6")[..]);
    // scapy's frames read back as what they say.
    let f4 = v("vrrp_v4");
    let p = parse_frame(&f4).unwrap();
    assert_eq!((p.vrid, p.priority, p.interval_cs), (51, 150, 10));
    assert_eq!(p.addrs().collect::<Vec<_>>(), v4);
    let f6 = v("vrrp_v6");
    let p = parse_frame(&f6).unwrap();
    assert_eq!(
        (p.src, p.priority, p.interval_cs),
        (IpAddr::V6(link_local(LB_MAC)), 0, 100)
    );
    assert_eq!(p.addrs().collect::<Vec<_>>(), v6);
}
