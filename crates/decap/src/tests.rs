//! The decisions of [`decide`] and [`decide_ipv4`], one by one, on tunnels
//! built by `wire`'s encapsulation (what the balancer sends), and a property
//! test over arbitrary bytes.

#![allow(clippy::cast_possible_truncation)] // test values are small

use super::*;
use proptest::prelude::*;
use std::net::Ipv4Addr;
use testkit::packet::{self, Packet};
use wire::encap::Tunnel;
use wire::geneve::GatewayOptions;

fn ip(s: &str) -> IpAddr {
    s.parse().expect("address")
}

fn prefix(s: &str) -> Prefix {
    s.parse().expect("prefix")
}

const BALANCER4: &str = "198.18.2.2";
const BALANCER6: &str = "2001:db8:b::2";
const VIP4: &str = "192.0.2.10";
const VIP6: &str = "2001:db8::10";
const CLIENT4: &str = "198.51.100.7";
const CLIENT6: &str = "2001:db8:c::7";

fn policy() -> Policy {
    Policy {
        sources: Some(vec![prefix(BALANCER4), prefix("2001:db8:b::/64")]),
        vips: vec![Vip::any_port(prefix(VIP4)), Vip::any_port(prefix(VIP6))],
        geneve_ids: OptionIds::default(),
        tunnel_ports: vec![6080, 6081],
    }
}

/// A UDP packet from `src`:5555 to `dst`:7777 with valid checksums.
fn udp_packet(src: IpAddr, dst: IpAddr, data: &[u8]) -> Vec<u8> {
    Packet::udp(src, dst, 5555, 7777).payload(data).ip()
}

/// `inner` encapsulated by `wire` (as the balancer does) from `outer_src` to
/// `outer_dst`: the whole frame, Ethernet header included.
fn encap(inner: &[u8], outer_src: IpAddr, outer_dst: IpAddr, tunnel: Tunnel) -> Vec<u8> {
    let et: u16 = if inner[0] >> 4 == 6 { 0x86dd } else { 0x0800 };
    let frame = packet::frame([2, 0, 0, 0, 0, 2], [2, 0, 0, 0, 0, 1], &[], et, inner, 0);
    packet::encap(&frame, &packet::outer(outer_src, outer_dst), &tunnel)
}

fn geneve() -> Tunnel {
    Tunnel::Geneve {
        port: 6081,
        vni: 0,
        ids: OptionIds::default(),
        options: GatewayOptions {
            endpoint_id: Some(7),
            cookie: Some(9),
        },
    }
}

/// What a socket delivers for `frame` (built by [`encap`]) and the carrier
/// to pass to [`decide`]: the UDP payload for GUE and GENEVE, the outer IP
/// payload for IPIP and GRE.
fn as_received(frame: &[u8], tunnel: &Tunnel) -> (Carrier, Vec<u8>) {
    let v6 = frame[14] >> 4 == 6;
    let l4 = 14 + if v6 { 40 } else { 20 };
    match tunnel {
        Tunnel::Gue { .. } => (Carrier::Gue, frame[l4 + 8..].to_vec()),
        Tunnel::Geneve { .. } => (Carrier::Geneve, frame[l4 + 8..].to_vec()),
        Tunnel::Gre { .. } => (Carrier::Gre, frame[l4..].to_vec()),
        Tunnel::IpIp => {
            let proto = frame[14 + if v6 { 6 } else { 9 }];
            (
                Carrier::IpInIp {
                    inner_v6: proto == 41,
                },
                frame[l4..].to_vec(),
            )
        }
    }
}

fn tunnels() -> [Tunnel; 5] {
    [
        Tunnel::IpIp,
        Tunnel::Gre { key: Some(5) },
        Tunnel::Gre { key: None },
        Tunnel::Gue { port: 6080 },
        geneve(),
    ]
}

/// Client packets of both families to the VIPs.
fn client_packets() -> [Vec<u8>; 2] {
    [
        udp_packet(ip(CLIENT4), ip(VIP4), b"hello"),
        udp_packet(ip(CLIENT6), ip(VIP6), b"hello"),
    ]
}

#[test]
fn reasons_are_indexed_in_order() {
    for (i, r) in DropReason::ALL.iter().enumerate() {
        assert_eq!(r.index(), i, "{r:?}");
    }
}

#[test]
fn everything_the_balancer_sends_is_delivered_unchanged() {
    let p = policy();
    for (src, dst) in [
        (ip(BALANCER4), ip("198.18.2.11")),
        (ip(BALANCER6), ip("2001:db8:b::11")),
    ] {
        for inner in client_packets() {
            for t in tunnels() {
                let frame = encap(&inner, src, dst, t);
                let (carrier, payload) = as_received(&frame, &t);
                assert_eq!(
                    decide(&p, src, carrier, &payload),
                    Ok(inner.as_slice()),
                    "{t:?} over {src}"
                );
                if src.is_ipv4() && !matches!(carrier, Carrier::Gue | Carrier::Geneve) {
                    // What a raw IPv4 socket delivers: the outer header too.
                    assert_eq!(
                        decide_ipv4(&p, &frame[14..]),
                        Ok(inner.as_slice()),
                        "{t:?} raw"
                    );
                }
            }
        }
    }
}

#[test]
fn tunnels_from_other_sources_are_not_even_parsed() {
    let p = policy();
    for stranger in [
        ip("198.18.2.1"),
        ip("2001:db8:bad::2"),
        ip("::ffff:198.18.2.1"),
    ] {
        for inner in client_packets() {
            for t in tunnels() {
                let outer_src = stranger.to_canonical();
                let outer_dst = if outer_src.is_ipv4() {
                    ip("198.18.2.11")
                } else {
                    ip("2001:db8:b::11")
                };
                let frame = encap(&inner, outer_src, outer_dst, t);
                let (carrier, payload) = as_received(&frame, &t);
                assert_eq!(
                    decide(&p, stranger, carrier, &payload),
                    Err(DropReason::SourceNotAllowed),
                    "{t:?} from {stranger}"
                );
                if outer_src.is_ipv4() && !matches!(carrier, Carrier::Gue | Carrier::Geneve) {
                    assert_eq!(
                        decide_ipv4(&p, &frame[14..]),
                        Err(DropReason::SourceNotAllowed)
                    );
                }
            }
        }
        // Junk from a stranger is a stranger's packet, not a malformed one.
        assert_eq!(
            decide(&p, stranger, Carrier::Geneve, &[0xff; 3]),
            Err(DropReason::SourceNotAllowed)
        );
    }
    // An IPv4-mapped IPv6 source claiming the allowed IPv4 balancer is
    // refused (the daemon turns a dual-stack socket's report of a real IPv4
    // peer into the IPv4 address before asking).
    let inner = &client_packets()[0];
    assert_eq!(
        decide(&p, ip("::ffff:198.18.2.2"), Carrier::Gue, inner),
        Err(DropReason::SourceNotAllowed)
    );
    // --allow-any: every source.
    let any = Policy {
        sources: None,
        ..policy()
    };
    assert_eq!(
        decide(&any, ip("203.0.113.1"), Carrier::Gue, inner),
        Ok(inner.as_slice())
    );
}

#[test]
fn inner_packets_must_be_for_a_vip() {
    let p = policy();
    for (src, dst) in [
        (CLIENT4, "192.0.2.11"),
        (CLIENT4, "198.18.2.11"), // the backend's own address: its other services
        (CLIENT4, "127.0.0.1"),
        (CLIENT4, "255.255.255.255"),
        (CLIENT4, "224.0.0.1"),
        (CLIENT6, "2001:db8::11"),
        (CLIENT6, "::1"),
        (CLIENT6, "ff02::1"),
    ] {
        let inner = udp_packet(ip(src), ip(dst), b"x");
        for t in tunnels() {
            let frame = encap(&inner, ip(BALANCER4), ip("198.18.2.11"), t);
            let (carrier, payload) = as_received(&frame, &t);
            assert_eq!(
                decide(&p, ip(BALANCER4), carrier, &payload),
                Err(DropReason::InnerDstNotOwned),
                "{t:?} to {dst}"
            );
        }
    }
    // A VIP prefix owns every address in it.
    let wide = Policy {
        vips: vec![Vip::any_port(prefix("192.0.2.0/24"))],
        ..policy()
    };
    let inner = udp_packet(ip(CLIENT4), ip("192.0.2.77"), b"x");
    assert_eq!(
        decide(&wide, ip(BALANCER4), Carrier::Gue, &inner),
        Ok(inner.as_slice())
    );
}

/// Issue 38 item 13: a VIP with a port list takes TCP and UDP to those
/// ports only (the forwarding rule's ports), a later fragment of a listed
/// protocol (it carries no port; its first fragment is checked), and ICMP
/// errors about the server's packets from a listed port; nothing else.
#[test]
fn a_vip_with_a_port_list_takes_only_its_ports() {
    use wire::ip::proto::{TCP, UDP};
    let p = Policy {
        vips: vec![
            "192.0.2.10:tcp/80,443,udp/53".parse().expect("vip"),
            "[2001:db8::10]:tcp/8000-8099".parse().expect("vip"),
        ],
        ..policy()
    };
    let gue = |inner: &[u8]| decide(&p, ip(BALANCER4), Carrier::Gue, inner).map(<[u8]>::to_vec);
    let ok = |inner: Vec<u8>| (inner.clone(), Ok(inner));
    let refused = |inner: Vec<u8>| (inner, Err(DropReason::PortNotAllowed));
    let tcp = |src: &str, dst: &str, dport| Packet::tcp(ip(src), ip(dst), 40000, dport, 0x02).ip();
    let udp = |src: &str, dst: &str, dport| {
        Packet::udp(ip(src), ip(dst), 40000, dport)
            .payload(b"x")
            .ip()
    };
    let mut cases = vec![
        ok(tcp(CLIENT4, VIP4, 80)),
        ok(tcp(CLIENT4, VIP4, 443)),
        ok(udp(CLIENT4, VIP4, 53)),
        ok(tcp(CLIENT6, VIP6, 8000)),
        ok(tcp(CLIENT6, VIP6, 8099)),
        // Other ports, or the right port of the other protocol.
        refused(tcp(CLIENT4, VIP4, 22)),
        refused(tcp(CLIENT4, VIP4, 53)),
        refused(udp(CLIENT4, VIP4, 80)),
        refused(udp(CLIENT4, VIP4, 7777)),
        refused(tcp(CLIENT6, VIP6, 8100)),
        refused(tcp(CLIENT6, VIP6, 80)),
        // Other protocols: ping, SCTP.
        refused(Packet::echo(ip(CLIENT4), ip(VIP4), 1, 1).ip()),
        refused(Packet::echo(ip(CLIENT6), ip(VIP6), 1, 1).ip()),
        refused(
            Packet::raw(ip(CLIENT4), ip(VIP4), 132)
                .payload(&[0; 12])
                .ip(),
        ),
    ];
    // A datagram in fragments: the first shows its port, the later ones
    // are taken for a listed protocol (the kernel joins them only to a
    // first fragment, which was checked).
    let big = vec![7u8; 100];
    let frags = Packet::udp(ip(CLIENT4), ip(VIP4), 40000, 53)
        .payload(&big)
        .ident(9)
        .ip_fragments(32);
    assert!(frags.len() > 2);
    cases.extend(frags.iter().cloned().map(ok));
    let frags = Packet::udp(ip(CLIENT4), ip(VIP4), 40000, 54)
        .payload(&big)
        .ip_fragments(32);
    cases.push(refused(frags[0].clone()));
    cases.extend(frags[1..].iter().cloned().map(ok));
    // IPv6 lists TCP only: a later UDP fragment is refused.
    let frags = Packet::udp(ip(CLIENT6), ip(VIP6), 40000, 8000)
        .payload(&big)
        .ip_fragments(32);
    cases.extend(frags.iter().cloned().map(refused));
    // ICMP errors about the server's replies (from VIP:port): taken for a
    // listed port (path-MTU discovery of DSR replies), refused otherwise.
    let quoting = |sport: u16, proto: u8| {
        let reply = if proto == TCP {
            Packet::tcp(ip(VIP4), ip(CLIENT4), sport, 40000, 0x10).ip()
        } else {
            Packet::udp(ip(VIP4), ip(CLIENT4), sport, 40000).ip()
        };
        Packet::icmp(ip(CLIENT4), ip(VIP4), 3, 4, 1400)
            .payload(&reply[..28])
            .ip()
    };
    cases.push(ok(quoting(443, TCP)));
    cases.push(ok(quoting(53, UDP)));
    cases.push(refused(quoting(22, TCP)));
    cases.push(refused(quoting(443, UDP)));
    let reply6 = Packet::tcp(ip(VIP6), ip(CLIENT6), 8080, 40000, 0x10).ip();
    cases.push(ok(Packet::icmp(ip(CLIENT6), ip(VIP6), 2, 0, 1280)
        .payload(&reply6[..48])
        .ip()));
    let reply6 = Packet::tcp(ip(VIP6), ip(CLIENT6), 22, 40000, 0x10).ip();
    cases.push(refused(
        Packet::icmp(ip(CLIENT6), ip(VIP6), 2, 0, 1280)
            .payload(&reply6[..48])
            .ip(),
    ));
    for (i, (inner, want)) in cases.iter().enumerate() {
        assert_eq!(&gue(inner), want, "case {i}: {}", hex(inner));
    }
    // A second --vip for the same address adds its ports; one without a
    // list takes everything.
    let more = Policy {
        vips: vec![
            "192.0.2.10:tcp/80".parse().expect("vip"),
            "192.0.2.10:udp/53".parse().expect("vip"),
        ],
        ..policy()
    };
    let inner = udp(CLIENT4, VIP4, 53);
    assert_eq!(
        decide(&more, ip(BALANCER4), Carrier::Gue, &inner),
        Ok(inner.as_slice())
    );
    let all = Policy {
        vips: vec![
            "192.0.2.10:tcp/80".parse().expect("vip"),
            Vip::any_port(prefix(VIP4)),
        ],
        ..policy()
    };
    let inner = Packet::echo(ip(CLIENT4), ip(VIP4), 1, 1).ip();
    assert_eq!(
        decide(&all, ip(BALANCER4), Carrier::Gue, &inner),
        Ok(inner.as_slice())
    );
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[test]
fn vip_port_lists_parse_print_and_refuse_typos() {
    for (text, shown) in [
        ("192.0.2.10", "192.0.2.10/32"),
        ("2001:db8::10", "2001:db8::10/128"),
        ("[2001:db8::10]", "2001:db8::10/128"),
        (
            "192.0.2.10:tcp/80,443,udp/53",
            "192.0.2.10/32:tcp/80,443,udp/53",
        ),
        ("192.0.2.0/24:tcp/8000-8099", "192.0.2.0/24:tcp/8000-8099"),
        (
            "[2001:db8::/64]:udp/443,tcp/443",
            "[2001:db8::/64]:udp/443,tcp/443",
        ),
    ] {
        let v: Vip = text.parse().unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(v.to_string(), shown);
        assert_eq!(shown.parse::<Vip>().expect("shown form parses"), v);
    }
    for bad in [
        "192.0.2.10:80",
        "192.0.2.10:tcp/",
        "192.0.2.10:tcp/0",
        "192.0.2.10:tcp/70000",
        "192.0.2.10:tcp/90-80",
        "192.0.2.10:sctp/80",
        "192.0.2.10:tcp/80,",
        "192.0.2.10/24:tcp/80",
        "[2001:db8::10]tcp/80",
        "[2001:db8::10:tcp/80",
        "2001:db8::10:tcp/80",
        "vip:tcp/80",
    ] {
        assert!(bad.parse::<Vip>().is_err(), "{bad} accepted");
    }
}

#[test]
fn inner_sources_no_client_can_have_are_refused() {
    let p = policy();
    for (src, dst) in [
        ("0.0.0.0", VIP4),
        ("0.1.2.3", VIP4),
        ("127.0.0.1", VIP4),
        ("127.9.9.9", VIP4),
        ("224.0.0.5", VIP4),
        ("255.255.255.255", VIP4),
        ("169.254.1.1", VIP4),
        (VIP4, VIP4), // poses as the host itself
        ("::", VIP6),
        ("::1", VIP6),
        ("ff02::1", VIP6),
        ("fe80::1", VIP6),
        ("::ffff:198.51.100.7", VIP6),
        (VIP6, VIP6),
        // An allowed balancer's address: what a client would spoof to be
        // trusted as the balancer, or to reach the tunnel sockets.
        (BALANCER4, VIP4),
        ("2001:db8:b::9", VIP6),
    ] {
        let inner = udp_packet(ip(src), ip(dst), b"x");
        assert_eq!(
            decide(&p, ip(BALANCER4), Carrier::Gue, &inner),
            Err(DropReason::InnerSrcRefused),
            "from {src}"
        );
    }
}

/// A tunnel inside the tunnel is never handed to the kernel: unwrapped, it
/// would come back to this decapsulator's own sockets (which listen on the
/// VIPs too) as if a balancer had sent it, and its inner packet could reach
/// a port no forwarding rule lists.
#[test]
fn nested_tunnels_are_refused() {
    let p = policy();
    let client = udp_packet(ip(CLIENT4), ip(VIP4), b"x");
    for port in [6080u16, 6081] {
        let mut nested = udp_packet(ip(CLIENT4), ip(VIP4), &client);
        nested[22..24].copy_from_slice(&port.to_be_bytes());
        nested[26..28].fill(0);
        wire::udp::Packet::new_unchecked(&mut nested[20..])
            .fill_checksum(&ip(CLIENT4), &ip(VIP4))
            .expect("checksum");
        assert_eq!(
            decide(&p, ip(BALANCER4), Carrier::Gue, &nested),
            Err(DropReason::NestedTunnel),
            "UDP to {port}"
        );
    }
    // IP-in-IP and GRE inside: the same packet with protocol 4, 41, 47.
    for proto in [4u8, 41, 47] {
        let mut nested = udp_packet(ip(CLIENT4), ip(VIP4), b"payload!");
        nested[9] = proto;
        nested[10..12].fill(0);
        let c = wire::checksum::checksum(&nested[..20]);
        nested[10..12].copy_from_slice(&c.to_be_bytes());
        assert_eq!(
            decide(&p, ip(BALANCER4), Carrier::Gue, &nested),
            Err(DropReason::NestedTunnel),
            "protocol {proto}"
        );
    }
    // Any other UDP port is a client's packet.
    assert_eq!(
        decide(&p, ip(BALANCER4), Carrier::Gue, &client),
        Ok(client.as_slice())
    );
}

#[test]
fn inner_packets_must_be_well_formed() {
    let p = policy();
    let [v4, v6] = client_packets();
    let mut bad_sum = v4.clone();
    bad_sum[10] ^= 0xff;
    let mut trailing = v4.clone();
    trailing.push(0);
    let mut long = v4.clone();
    long[3] += 1; // total length beyond the bytes
    let mut v5 = v4.clone();
    v5[0] = 0x55;
    for (what, bytes) in [
        ("bad header checksum", bad_sum),
        ("trailing byte", trailing),
        ("total length too long", long),
        ("truncated", v4[..v4.len() - 1].to_vec()),
        ("header only", v4[..20].to_vec()),
        ("empty", vec![]),
        ("IPv6 truncated", v6[..50].to_vec()),
    ] {
        assert_eq!(
            decide(
                &p,
                ip(BALANCER4),
                Carrier::IpInIp { inner_v6: false },
                &bytes
            ),
            Err(DropReason::MalformedInner),
            "{what}"
        );
    }
    // GUE variant 1 with version 5 is no IP packet at all.
    assert_eq!(
        decide(&p, ip(BALANCER4), Carrier::Gue, &v5),
        Err(DropReason::Malformed)
    );
    // The inner version must be the one the tunnel announced.
    assert_eq!(
        decide(&p, ip(BALANCER4), Carrier::IpInIp { inner_v6: true }, &v4),
        Err(DropReason::MalformedInner)
    );
    assert_eq!(
        decide(&p, ip(BALANCER4), Carrier::IpInIp { inner_v6: false }, &v6),
        Err(DropReason::MalformedInner)
    );
    let mut gre = vec![0, 0, 0x86, 0xdd];
    gre.extend_from_slice(&v4);
    assert_eq!(
        decide(&p, ip(BALANCER4), Carrier::Gre, &gre),
        Err(DropReason::MalformedInner)
    );
}

#[test]
fn tunnel_headers_are_checked() {
    let p = policy();
    let [v4, _] = client_packets();
    let b = ip(BALANCER4);
    // GUE variant 0: protocol 4 carries IP; a control message or protocol 17 does not.
    let mut gue0 = vec![0, 4, 0, 0];
    gue0.extend_from_slice(&v4);
    assert_eq!(decide(&p, b, Carrier::Gue, &gue0), Ok(v4.as_slice()));
    let mut control = gue0.clone();
    control[0] = 0x20;
    assert_eq!(
        decide(&p, b, Carrier::Gue, &control),
        Err(DropReason::NotIp)
    );
    let mut udp = gue0.clone();
    udp[1] = 17;
    assert_eq!(decide(&p, b, Carrier::Gue, &udp), Err(DropReason::NotIp));
    assert_eq!(decide(&p, b, Carrier::Gue, &[]), Err(DropReason::Malformed));
    // GRE: reserved bits, a non-IP protocol.
    let mut gre = vec![0, 0, 0x08, 0x00];
    gre.extend_from_slice(&v4);
    assert_eq!(decide(&p, b, Carrier::Gre, &gre), Ok(v4.as_slice()));
    let mut routing = gre.clone();
    routing[0] = 0x40;
    assert_eq!(
        decide(&p, b, Carrier::Gre, &routing),
        Err(DropReason::Malformed)
    );
    let mut eth = gre.clone();
    eth[2..4].copy_from_slice(&[0x65, 0x58]);
    assert_eq!(decide(&p, b, Carrier::Gre, &eth), Err(DropReason::NotIp));
    // Raw IPv4: the outer header must be valid and a tunnel's.
    let frame = encap(&v4, b, ip("198.18.2.11"), Tunnel::IpIp);
    let mut outer_sum = frame[14..].to_vec();
    outer_sum[10] ^= 1;
    assert_eq!(decide_ipv4(&p, &outer_sum), Err(DropReason::Malformed));
    let mut udp_proto = frame[14..].to_vec();
    udp_proto[9] = 17;
    assert_eq!(decide_ipv4(&p, &udp_proto), Err(DropReason::Malformed));
    assert_eq!(decide_ipv4(&p, &frame[14..30]), Err(DropReason::Malformed));
}

/// A GENEVE payload: base header with `flags`, `options`, then `inner`.
fn geneve_payload(flags: u8, protocol: u16, options: &[u8], inner: &[u8]) -> Vec<u8> {
    assert_eq!(options.len() % 4, 0);
    let mut g = vec![(options.len() / 4) as u8, flags];
    g.extend_from_slice(&protocol.to_be_bytes());
    g.extend_from_slice(&[0, 0, 0, 0]);
    g.extend_from_slice(options);
    g.extend_from_slice(inner);
    g
}

#[test]
fn geneve_oam_and_critical_options_follow_rfc_8926() {
    let p = policy();
    let b = ip(BALANCER4);
    let [v4, v6] = client_packets();
    let spillway = [
        0x01, 0x39, 0x01, 0x02, 0, 0, 0, 0, 0, 0, 0, 7, // endpoint ID
        0x01, 0x39, 0x03, 0x01, 0, 0, 0, 9, // cookie
    ];
    let plain = geneve_payload(0, 0x0800, &spillway, &v4);
    assert_eq!(decide(&p, b, Carrier::Geneve, &plain), Ok(v4.as_slice()));
    let v6p = geneve_payload(0, 0x86dd, &[], &v6);
    assert_eq!(decide(&p, b, Carrier::Geneve, &v6p), Ok(v6.as_slice()));

    // The O bit: a control packet, never handed to the kernel.
    let oam = geneve_payload(0x80, 0x0800, &spillway, &v4);
    assert_eq!(
        decide(&p, b, Carrier::Geneve, &oam),
        Err(DropReason::GeneveOam)
    );

    // An unknown option: skipped if not critical, fatal if critical (with or
    // without the C bit, which only announces critical options).
    let unknown = [0x12, 0x34, 0x05, 0x01, 1, 2, 3, 4];
    let critical = [0x12, 0x34, 0x85, 0x01, 1, 2, 3, 4];
    let ok = geneve_payload(0, 0x0800, &unknown, &v4);
    assert_eq!(decide(&p, b, Carrier::Geneve, &ok), Ok(v4.as_slice()));
    for flags in [0x40, 0x00] {
        let mut opts = spillway.to_vec();
        opts.extend_from_slice(&critical);
        let g = geneve_payload(flags, 0x0800, &opts, &v4);
        assert_eq!(
            decide(&p, b, Carrier::Geneve, &g),
            Err(DropReason::GeneveCriticalOption),
            "flags {flags:#x}"
        );
    }
    // Spillway's class with another type is not understood either.
    let other_type = [0x01, 0x39, 0x82, 0x00];
    let g = geneve_payload(0x40, 0x0800, &other_type, &v4);
    assert_eq!(
        decide(&p, b, Carrier::Geneve, &g),
        Err(DropReason::GeneveCriticalOption)
    );
    // The C bit with only understood options is fine; so are Spillway's own
    // options when configured with critical types.
    let g = geneve_payload(0x40, 0x0800, &spillway, &v4);
    assert_eq!(decide(&p, b, Carrier::Geneve, &g), Ok(v4.as_slice()));
    let custom = Policy {
        geneve_ids: OptionIds {
            class: 0x0139,
            endpoint_type: 0x81,
            cookie_type: 0x83,
        },
        ..policy()
    };
    let crit_own = [0x01, 0x39, 0x83, 0x01, 0, 0, 0, 9];
    let g = geneve_payload(0x40, 0x0800, &crit_own, &v4);
    assert_eq!(decide(&custom, b, Carrier::Geneve, &g), Ok(v4.as_slice()));
    assert_eq!(
        decide(&p, b, Carrier::Geneve, &g),
        Err(DropReason::GeneveCriticalOption),
        "not understood under the default types"
    );

    // Malformed: an understood option of the wrong length, an option running
    // past the options area, version 1, a truncated header.
    let bad_len = [0x01, 0x39, 0x03, 0x02, 0, 0, 0, 0, 0, 0, 0, 9];
    let g = geneve_payload(0, 0x0800, &bad_len, &v4);
    assert_eq!(
        decide(&p, b, Carrier::Geneve, &g),
        Err(DropReason::Malformed)
    );
    let overrun = [0x12, 0x34, 0x05, 0x02, 1, 2, 3, 4];
    let g = geneve_payload(0, 0x0800, &overrun, &v4);
    assert_eq!(
        decide(&p, b, Carrier::Geneve, &g),
        Err(DropReason::Malformed)
    );
    let mut v1 = plain.clone();
    v1[0] |= 0x40;
    assert_eq!(
        decide(&p, b, Carrier::Geneve, &v1),
        Err(DropReason::Malformed)
    );
    assert_eq!(
        decide(&p, b, Carrier::Geneve, &plain[..6]),
        Err(DropReason::Malformed)
    );
    // Not IP: Ethernet (0x6558) inside.
    let eth = geneve_payload(0, 0x6558, &[], &v4);
    assert_eq!(decide(&p, b, Carrier::Geneve, &eth), Err(DropReason::NotIp));
}

fn carrier() -> impl Strategy<Value = Carrier> {
    prop_oneof![
        Just(Carrier::Gue),
        Just(Carrier::Geneve),
        Just(Carrier::Gre),
        any::<bool>().prop_map(|inner_v6| Carrier::IpInIp { inner_v6 }),
    ]
}

fn v4() -> impl Strategy<Value = IpAddr> {
    prop_oneof![
        Just(ip(VIP4)),
        Just(ip(CLIENT4)),
        Just(ip(BALANCER4)),
        any::<[u8; 4]>().prop_map(|a| IpAddr::V4(Ipv4Addr::from(a))),
    ]
}

proptest! {
    /// Whatever arrives, from wherever: no panic, and a delivered packet is
    /// a well-formed IP packet inside the bytes, to a VIP, from a client,
    /// through an allowed balancer.
    #[test]
    fn nothing_gets_through_that_should_not(
        src in v4(),
        c in carrier(),
        bytes in proptest::collection::vec(any::<u8>(), 0..256),
    ) {
        let p = policy();
        if let Ok(inner) = decide(&p, src, c, &bytes) {
            prop_assert!(p.source_allowed(src));
            let info = parse_ip(inner).expect("well formed");
            let dst = wire::ip::unmap(&info.dst);
            prop_assert!(p.owns(dst));
            prop_assert!(client_source(&p, wire::ip::unmap(&info.src)));
        }
        if let Ok(inner) = decide_ipv4(&p, &bytes) {
            prop_assert!(parse_ip(inner).is_ok());
        }
    }

    /// A well-formed tunnel packet is delivered exactly when the outer source
    /// is allowed, the inner destination owned and the inner source a client's.
    #[test]
    fn the_verdict_is_the_policy(
        outer in v4(),
        src in v4(),
        dst in v4(),
        t in 0..5usize,
    ) {
        let p = policy();
        let inner = udp_packet(src, dst, b"p");
        let tunnel = tunnels()[t];
        let frame = encap(&inner, outer, ip("198.18.2.11"), tunnel);
        let (c, payload) = as_received(&frame, &tunnel);
        let expect = if !p.source_allowed(outer) {
            Err(DropReason::SourceNotAllowed)
        } else if !p.owns(dst) {
            Err(DropReason::InnerDstNotOwned)
        } else if !client_source(&p, src) {
            Err(DropReason::InnerSrcRefused)
        } else {
            Ok(inner.as_slice())
        };
        prop_assert_eq!(decide(&p, outer, c, &payload), expect);
    }

    /// With a port list, a whole TCP or UDP packet to the VIP is delivered
    /// exactly when its protocol and destination port are listed.
    #[test]
    fn the_port_verdict_is_the_list(dport in any::<u16>(), use_tcp in any::<bool>(), t in 0..5usize) {
        let p = Policy {
            vips: vec!["192.0.2.10:tcp/80,443,1000-2000,udp/53".parse().expect("vip")],
            ..policy()
        };
        let inner = if use_tcp {
            Packet::tcp(ip(CLIENT4), ip(VIP4), 40000, dport, 0x10).ip()
        } else {
            udp_packet(ip(CLIENT4), ip(VIP4), b"p")
        };
        let dport = if use_tcp { dport } else { 7777 };
        let listed = if use_tcp {
            dport == 80 || dport == 443 || (1000..=2000).contains(&dport)
        } else {
            false
        };
        let tunnel = tunnels()[t];
        let frame = encap(&inner, ip(BALANCER4), ip("198.18.2.11"), tunnel);
        let (c, payload) = as_received(&frame, &tunnel);
        let expect = if listed { Ok(inner.as_slice()) } else { Err(DropReason::PortNotAllowed) };
        prop_assert_eq!(decide(&p, ip(BALANCER4), c, &payload), expect);
    }
}
