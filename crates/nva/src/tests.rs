//! [`answer`] on GENEVE packets as the balancer builds them: the return
//! rewrite, every tamper mode, the rules, the flow facts; and a property test
//! over arbitrary GENEVE.

#![allow(clippy::cast_possible_truncation)] // test values are small

use super::*;
use proptest::prelude::*;
use testkit::packet::{Packet, v4, v6};
use wire::geneve::{GatewayOptions, GeneveOption};

const OPTS: GatewayOptions = GatewayOptions {
    endpoint_id: Some(0x0102_0304_0506_0708),
    cookie: Some(0xdead_beef),
};

/// A GENEVE payload (what follows the outer UDP header): base header, the
/// options as given (raw TLV bytes), then `inner`.
fn geneve_raw(options: &[u8], protocol: u16, oam: bool, inner: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; 8];
    b.extend_from_slice(options);
    b.extend_from_slice(inner);
    let mut p = geneve::Packet::new_unchecked(&mut b[..]);
    p.set_options_len(options.len());
    p.set_flags(oam, false);
    p.set_protocol(protocol);
    p.set_vni(0);
    b
}

/// What the balancer sends: Spillway's two options, then `inner`.
fn geneve(inner: &[u8]) -> Vec<u8> {
    let mut o = vec![0u8; OPTS.wire_len()];
    OPTS.emit(&OptionIds::DEFAULT, &mut o).expect("options");
    let et = if inner[0] >> 4 == 6 { 0x86dd } else { 0x0800 };
    geneve_raw(&o, et, false, inner)
}

fn tcp4() -> Vec<u8> {
    Packet::tcp(v4("198.51.100.7"), v4("192.0.2.10"), 40000, 22, 0x02)
        .payload(b"hello")
        .ip()
}

fn tcp6() -> Vec<u8> {
    Packet::tcp(v6("2001:db8:c::7"), v6("2001:db8::10"), 40000, 443, 0x10).ip()
}

#[test]
fn returns_the_packet_unchanged_with_its_flow() {
    for inner in [tcp4(), tcp6()] {
        let g = geneve(&inner);
        let a = answer(&Config::default(), &g).expect("returned");
        assert_eq!(a.payload, g, "every byte, options included");
        assert_eq!(a.flow.proto, wire::ip::proto::TCP);
        assert_eq!(a.flow.endpoint_id, OPTS.endpoint_id);
        assert_eq!(a.flow.cookie, OPTS.cookie);
    }
}

#[test]
fn unknown_and_critical_options_are_returned_too() {
    // An appliance returns every option, not only Spillway's.
    let mut o = vec![0u8; 12];
    GeneveOption {
        class: 0x0200,
        opt_type: 0x85,
        data: &[1, 2, 3, 4, 5, 6, 7, 8],
    }
    .emit(&mut o)
    .expect("emit");
    let g = geneve_raw(&o, 0x0800, false, &tcp4());
    assert_eq!(answer(&Config::default(), &g).expect("returned").payload, g);
}

#[test]
fn tamper_cookie_changes_only_the_cookie() {
    let g = geneve(&tcp4());
    let cfg = Config {
        tamper: Tamper::Cookie,
        ..Config::default()
    };
    let a = answer(&cfg, &g).expect("returned");
    assert_eq!(a.payload.len(), g.len());
    let back = geneve::Packet::new_checked(&a.payload[..]).expect("geneve");
    let got = GatewayOptions::parse(&OptionIds::DEFAULT, back.options()).expect("options");
    assert_eq!(got.endpoint_id, OPTS.endpoint_id);
    assert_eq!(got.cookie, Some(!0xdead_beef));
    let diff: Vec<usize> = (0..g.len()).filter(|&i| g[i] != a.payload[i]).collect();
    // Base header 8 + endpoint TLV 12 + cookie TLV header 4: bytes 24..28.
    assert_eq!(diff, vec![24, 25, 26, 27]);
    // The flow log shows what came in.
    assert_eq!(a.flow.cookie, OPTS.cookie);
}

#[test]
fn tamper_cookie_follows_configured_ids() {
    let ids = OptionIds {
        class: 0xff01,
        endpoint_type: 9,
        cookie_type: 10,
    };
    let mut o = vec![0u8; OPTS.wire_len()];
    OPTS.emit(&ids, &mut o).expect("options");
    let g = geneve_raw(&o, 0x0800, false, &tcp4());
    // Default ids: the cookie is not found, nothing changes.
    let default = Config {
        tamper: Tamper::Cookie,
        ..Config::default()
    };
    assert_eq!(answer(&default, &g).expect("returned").payload, g);
    let cfg = Config { ids, ..default };
    let a = answer(&cfg, &g).expect("returned");
    assert_ne!(a.payload, g);
    assert_eq!(a.flow.cookie, OPTS.cookie);
}

#[test]
fn strip_options_leaves_the_base_header_and_inner_packet() {
    for inner in [tcp4(), tcp6()] {
        let g = geneve(&inner);
        let cfg = Config {
            tamper: Tamper::StripOptions,
            ..Config::default()
        };
        let a = answer(&cfg, &g).expect("returned");
        let back = geneve::Packet::new_checked(&a.payload[..]).expect("geneve");
        assert_eq!(back.options_len(), 0);
        assert!(!back.critical());
        assert_eq!(
            back.protocol(),
            if inner[0] >> 4 == 6 { 0x86dd } else { 0x0800 }
        );
        assert_eq!(back.payload(), &inner[..]);
        assert_eq!(a.payload.len(), 8 + inner.len());
    }
}

#[test]
fn rules_drop_as_written() {
    let rule = |s: &str| s.parse::<Rule>().expect("rule");
    let g = geneve(&tcp4());
    let drops = |rules: Vec<Rule>| {
        let cfg = Config {
            rules,
            ..Config::default()
        };
        matches!(answer(&cfg, &g), Err((DropReason::Rule, Some(_))))
    };
    assert!(drops(vec![rule("tcp 198.51.100.7:* -> *:22")]));
    assert!(drops(vec![rule("any 198.51.100.0/24 -> 192.0.2.10")]));
    assert!(drops(vec![rule("6 * -> 192.0.2.10:22")]));
    assert!(!drops(vec![rule("udp * -> *:22")]));
    assert!(!drops(vec![rule("tcp * -> *:23")]));
    assert!(!drops(vec![rule("tcp *:22 -> *")]), "one direction only");
    assert!(drops(vec![rule("tcp *:22 <-> *")]), "either direction");
    assert!(!drops(vec![rule("tcp [2001:db8::/32]:* -> *:22")]));
    let g6 = geneve(&tcp6());
    let cfg = Config {
        rules: vec![rule("tcp [2001:db8:c::/48]:40000 -> [2001:db8::10]:443")],
        ..Config::default()
    };
    assert!(matches!(answer(&cfg, &g6), Err((DropReason::Rule, _))));
    let icmp6 = Packet::echo(v6("2001:db8:c::7"), v6("2001:db8::10"), 1, 1).ip();
    let cfg = Config {
        rules: vec![rule("icmp * -> *")],
        ..Config::default()
    };
    assert!(matches!(
        answer(&cfg, &geneve(&icmp6)),
        Err((DropReason::Rule, _))
    ));
}

#[test]
fn bad_rules_are_refused() {
    for s in [
        "",
        "tcp * *:22",
        "tcp * => *",
        "tcpx * -> *",
        "tcp *:99999 -> *",
        "tcp 10.0.0.1/24 -> *",
        "tcp [2001:db8::1 -> *",
        "tcp * -> * extra",
    ] {
        assert!(s.parse::<Rule>().is_err(), "{s:?}");
    }
    let r: Rule = "udp 2001:db8::1 -> *:53".parse().expect("bare v6, no port");
    assert_eq!(r.src.port, None);
    assert_eq!(r.dst.port, Some(53));
}

#[test]
fn flow_direction_is_symmetric() {
    let fwd = answer(&Config::default(), &geneve(&tcp4()))
        .expect("fwd")
        .flow;
    let rev_inner = Packet::tcp(v4("192.0.2.10"), v4("198.51.100.7"), 22, 40000, 0x12).ip();
    let rev = answer(&Config::default(), &geneve(&rev_inner))
        .expect("rev")
        .flow;
    assert_eq!(fwd.key(), rev.key());
    assert_ne!(fwd.direction(), rev.direction());
    assert_eq!(
        fwd.to_string(),
        "6 192.0.2.10:22 198.51.100.7:40000 b->a endpoint_id=0102030405060708 cookie=deadbeef"
    );
}

#[test]
fn flow_line_marks_absent_options() {
    let inner = Packet::udp(v4("198.51.100.7"), v4("192.0.2.10"), 5, 6).ip();
    let a = answer(&Config::default(), &geneve_raw(&[], 0x0800, false, &inner)).expect("ok");
    assert_eq!(
        a.flow.to_string(),
        "17 192.0.2.10:6 198.51.100.7:5 b->a endpoint_id=- cookie=-"
    );
    let echo = Packet::echo(v6("2001:db8:c::7"), v6("2001:db8::10"), 1, 1).ip();
    let a = answer(&Config::default(), &geneve(&echo)).expect("ok");
    assert_eq!(
        a.flow.to_string(),
        "58 [2001:db8::10]:0 [2001:db8:c::7]:0 b->a endpoint_id=0102030405060708 cookie=deadbeef"
    );
}

#[test]
fn what_is_not_a_gateway_packet_is_dropped() {
    let cfg = Config::default();
    let inner = tcp4();
    let reason = |b: &[u8]| answer(&cfg, b).map(|_| ()).map_err(|e| e.0);
    assert_eq!(reason(&[0u8; 7]), Err(DropReason::Malformed));
    let mut v1 = geneve(&inner);
    v1[0] |= 0x40;
    assert_eq!(reason(&v1), Err(DropReason::Malformed), "version 1");
    assert_eq!(
        reason(&geneve_raw(&[], 0x6558, false, &inner)),
        Err(DropReason::NotIp)
    );
    assert_eq!(
        reason(&geneve_raw(&[], 0x0800, true, &inner)),
        Err(DropReason::Oam)
    );
    assert_eq!(
        reason(&geneve_raw(&[], 0x86dd, false, &inner)),
        Err(DropReason::Malformed),
        "IPv4 inner announced as IPv6"
    );
    let mut long = geneve(&inner);
    long.push(0);
    assert_eq!(reason(&long), Err(DropReason::Malformed), "trailing byte");
    // A cookie option of the wrong length.
    let mut o = vec![0u8; 12];
    GeneveOption {
        class: 0x0139,
        opt_type: 3,
        data: &[0; 8],
    }
    .emit(&mut o)
    .expect("emit");
    assert_eq!(
        reason(&geneve_raw(&o, 0x0800, false, &inner)),
        Err(DropReason::Malformed)
    );
    // An option overrunning the options area.
    let mut bad = geneve(&inner);
    bad[11] = 0x1f;
    assert_eq!(reason(&bad), Err(DropReason::Malformed));
}

fn tamper() -> impl Strategy<Value = Tamper> {
    prop_oneof![
        Just(Tamper::None),
        Just(Tamper::Cookie),
        Just(Tamper::StripOptions)
    ]
}

/// Arbitrary option TLVs, some of them Spillway's.
fn options() -> impl Strategy<Value = Vec<u8>> {
    let one = (
        prop_oneof![Just(0x0139u16), any::<u16>()],
        prop_oneof![Just(1u8), Just(3u8), any::<u8>()],
        0usize..4,
        any::<[u8; 12]>(),
    )
        .prop_map(|(class, opt_type, words, data)| {
            let data = &data[..words * 4];
            let mut b = vec![0u8; 4 + data.len()];
            GeneveOption {
                class,
                opt_type,
                data,
            }
            .emit(&mut b)
            .expect("emit");
            b
        });
    prop::collection::vec(one, 0..5).prop_map(|v| v.concat())
}

proptest! {
    /// Arbitrary GENEVE in: what comes back is the input but for what the
    /// mode changes (cookie bytes inverted, or options removed); never a panic.
    #[test]
    fn returned_equals_input_but_for_the_mode(
        opts in options(),
        v6 in any::<bool>(),
        data in prop::collection::vec(any::<u8>(), 0..64),
        mode in tamper(),
    ) {
        let inner = if v6 {
            Packet::udp(v6_("2001:db8:c::7"), v6_("2001:db8::10"), 1, 2).payload(&data).ip()
        } else {
            Packet::udp(v4("198.51.100.7"), v4("192.0.2.10"), 1, 2).payload(&data).ip()
        };
        let g = geneve_raw(&opts, if v6 { 0x86dd } else { 0x0800 }, false, &inner);
        let cfg = Config { tamper: mode, ..Config::default() };
        let hdr = 8 + opts.len();
        match answer(&cfg, &g) {
            Ok(a) => {
                match mode {
                    Tamper::None => prop_assert_eq!(&a.payload, &g),
                    Tamper::StripOptions => {
                        prop_assert_eq!(&a.payload[..2], &[0u8, g[1] & 0x80][..]);
                        prop_assert_eq!(&a.payload[2..8], &g[2..8]);
                        prop_assert_eq!(&a.payload[8..], &g[hdr..]);
                    }
                    Tamper::Cookie => {
                        prop_assert_eq!(a.payload.len(), g.len());
                        prop_assert_eq!(&a.payload[hdr..], &g[hdr..]);
                        let back = geneve::Packet::new_checked(&a.payload[..]).expect("geneve");
                        let was = GatewayOptions::parse(&OptionIds::DEFAULT, &opts).expect("ok");
                        let now = GatewayOptions::parse(&OptionIds::DEFAULT, back.options())
                            .expect("still well formed");
                        prop_assert_eq!(now.endpoint_id, was.endpoint_id);
                        prop_assert_eq!(now.cookie, was.cookie.map(|c| !c));
                    }
                }
            }
            // Only a Spillway option of the wrong length makes it malformed.
            Err((reason, _)) => {
                prop_assert_eq!(reason, DropReason::Malformed);
                prop_assert!(GatewayOptions::parse(&OptionIds::DEFAULT, &opts).is_err());
            }
        }
    }

    /// Any bytes: an answer or a counted reason, never a panic.
    #[test]
    fn arbitrary_bytes_never_panic(
        b in prop::collection::vec(any::<u8>(), 0..200),
        mode in tamper(),
    ) {
        let cfg = Config { tamper: mode, ..Config::default() };
        let _ = answer(&cfg, &b);
    }
}

fn v6_(s: &str) -> IpAddr {
    v6(s)
}

proptest! {
    /// The contract's answer (M32): from the balancer's source port to the
    /// appliance's Geneve port, the payload whole, a checksum the balancer
    /// verifies over the swapped addresses.
    #[test]
    fn kept_ports_datagrams_verify_and_keep_the_ports(
        v6_outer in any::<bool>(),
        a in any::<[u8; 16]>(),
        b in any::<[u8; 16]>(),
        sport in 1u16..,
        payload in proptest::collection::vec(any::<u8>(), 0..300),
    ) {
        let (appliance, balancer): (IpAddr, IpAddr) = if v6_outer {
            (Ipv6Addr::from(a).into(), Ipv6Addr::from(b).into())
        } else {
            (
                std::net::Ipv4Addr::new(a[0], a[1], a[2], a[3]).into(),
                std::net::Ipv4Addr::new(b[0], b[1], b[2], b[3]).into(),
            )
        };
        let d = kept_ports_datagram(
            SocketAddr::new(appliance, 6081),
            SocketAddr::new(balancer, sport),
            &payload,
        )
        .expect("a datagram");
        let u = wire::udp::Packet::new_checked(&d[..]).expect("UDP");
        prop_assert_eq!((u.src_port(), u.dst_port()), (sport, 6081));
        prop_assert_eq!(usize::from(u.len()), d.len());
        prop_assert_eq!(u.payload(), &payload[..]);
        prop_assert!(u.verify_checksum(&appliance, &balancer));
        prop_assert!(u.checksum() != 0);
    }
}

#[test]
fn kept_ports_datagrams_need_one_family() {
    let a = SocketAddr::new(v4("192.0.2.3"), 6081);
    let b = SocketAddr::new(v6("2001:db8::1"), 40000);
    assert_eq!(kept_ports_datagram(a, b, b"x"), None);
}
