//! `spillway replay`: the delivery modes (M8, M30) byte by byte, IPv6 VIPs
//! and IPv6 tunnels (M1, M8), and dual-stack services.
//!
//! Every test writes a configuration and a pcap of hand-built packets, runs
//! the `spillway` binary, and checks the transmitted frames byte by byte
//! (outer headers decoded by `common::replay`, not by the `wire` crate under
//! test) and the summary's counters.

#![allow(clippy::cast_possible_truncation)] // test values are small
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use common::replay::*;
use common::*;
use testkit::config::{addrs, rule, service};

/// 24 TCP connections to `vip`:80 (SYN, ACK, data), interleaved.
fn connections(vip: IpAddr) -> Vec<Vec<u8>> {
    let mut frames = Vec::new();
    for step in 0..3 {
        for i in 1..=24u8 {
            let (c, port) = (IpAddr::from([192, 0, 2, i]), 41000 + u16::from(i));
            frames.push(match step {
                0 => tcp_frame(c, vip, port, 80, SYN, &[]),
                1 => tcp_frame(c, vip, port, 80, ACK, &[]),
                _ => tcp_frame(c, vip, port, 80, ACK | PSH, b"GET / HTTP/1.1\r\n\r\n"),
            });
        }
    }
    frames
}

/// Replays 24 connections to `vip`, checks every frame per `mode` and that
/// the inner packet is the received IP packet byte for byte, each
/// connection sticks to one backend, and all three backends get some.
/// Returns the delivered packets by connection (client index).
fn check_delivery(name: &str, vip: &str, mode: Mode, backends: &[String]) -> Vec<(u8, Delivered)> {
    let frames = connections(v4(vip));
    let r = run(name, &delivery_config(), &frames, &[]);
    assert_eq!(r.out.len(), frames.len(), "{}", r.text);
    let mut per_flow = BTreeMap::new();
    let mut all = Vec::new();
    for (i, (frame, out)) in frames.iter().zip(&r.out).enumerate() {
        let d = delivered(out, mode);
        if mode == Mode::L2dsr {
            // Only the MACs change; everything from the EtherType on is as received.
            assert_eq!(out[12..], frame[12..], "l2dsr frame body unchanged");
        }
        assert_eq!(
            d.inner,
            frame[14..],
            "inner packet is the received IP packet"
        );
        assert!(
            backends.contains(&d.backend),
            "{} is not a backend",
            d.backend
        );
        let client = (i % 24) as u8 + 1;
        same_per_key(&mut per_flow, client, d.backend.clone(), "backend");
        all.push((client, d));
    }
    assert_eq!(distinct(&per_flow).len(), backends.len(), "{per_flow:?}");
    assert_eq!(r.rule(&format!("{name}-ag0")).new_flows, 24, "{}", r.text);
    all
}

/// Outer UDP source ports: one per connection, not one for all (entropy for
/// RSS and ECMP).
fn check_udp_entropy(all: &[(u8, Delivered)]) {
    let mut ports = BTreeMap::new();
    for (c, d) in all {
        same_per_key(
            &mut ports,
            *c,
            d.udp_src.expect("outer UDP"),
            "outer source port",
        );
    }
    assert!(distinct(&ports).len() >= 20, "{ports:?}");
}

#[test]
fn l2dsr_delivery_rewrites_only_the_macs_to_the_backend() {
    let macs: Vec<String> = (1..=3).map(|i| format!("02:00:00:00:01:0{i}")).collect();
    check_delivery("dsr", "10.0.0.21", Mode::L2dsr, &macs);
}

#[test]
fn ipip_delivery_wraps_the_packet_in_ipv4_protocol_4() {
    check_delivery("ipip", "10.0.0.22", Mode::Ipip, &addrs("10.1.2.", 3));
}

#[test]
fn ipip_delivery_strips_ethernet_padding_from_the_inner_packet() {
    let (c, vip) = (v4("192.0.2.1"), v4("10.0.0.22"));
    let ip_packet = ip(c, vip, TCP, &tcp(c, vip, 40000, 80, SYN, &[]));
    let mut frame = eth(&ip_packet);
    assert_eq!(frame.len(), 54);
    frame.resize(60, 0); // the Ethernet minimum
    let r = run("padding", &delivery_config(), &[frame], &[]);
    assert_eq!(r.out.len(), 1, "{}", r.text);
    let d = delivered(&r.out[0], Mode::Ipip);
    assert_eq!(d.inner, ip_packet);
}

#[test]
fn gre_delivery_without_key_carries_the_packet_after_a_four_byte_header() {
    check_delivery("gre", "10.0.0.23", Mode::Gre(None), &addrs("10.1.3.", 3));
}

#[test]
fn gre_delivery_with_key_carries_the_configured_key() {
    check_delivery(
        "grekey",
        "10.0.0.24",
        Mode::Gre(Some(0xdead_beef)),
        &addrs("10.1.4.", 3),
    );
}

#[test]
fn gue_delivery_puts_the_packet_right_after_udp_to_the_configured_port() {
    let all = check_delivery("gue", "10.0.0.25", Mode::Gue(7777), &addrs("10.1.5.", 3));
    check_udp_entropy(&all);
}

#[test]
fn geneve_delivery_sends_a_flow_cookie_option_per_connection() {
    let mode = Mode::Geneve {
        port: 6081,
        class: 0x0139,
        cookie_type: 3,
    };
    let all = check_delivery("geneve", "10.0.0.26", mode, &addrs("10.1.6.", 3));
    check_udp_entropy(&all);
    let mut cookies = BTreeMap::new();
    for (c, d) in &all {
        same_per_key(&mut cookies, *c, d.cookie.expect("cookie"), "flow cookie");
    }
    assert_eq!(
        distinct(&cookies).len(),
        24,
        "one random cookie per flow: {cookies:?}"
    );
}

#[test]
fn geneve_delivery_uses_the_configured_option_class_and_type() {
    let mode = Mode::Geneve {
        port: 6081,
        class: 0x0105,
        cookie_type: 7,
    };
    check_delivery("geneve-ids", "10.0.0.27", mode, &addrs("10.1.7.", 3));
}

// ---------------------------------------------------------------------------
// IPv6 (M1, M8).

#[test]
fn ipv6_vips_are_delivered_6in6_and_over_gue_and_ipv4_vips_4in6() {
    let config = [
        base(),
        rule("tls6", &["2001:db8:f00::10"], "TCP", "443", "tls6").to_string(),
        rule("quic6", &["2001:db8:f00::20"], "UDP", "443", "quic6").to_string(),
        rule("web4", &["10.0.0.40"], "TCP", "80", "web4").to_string(),
        rule("rest6", &["2001:db8:f00::10"], "L3_DEFAULT", "all", "quic6").to_string(),
        service("tls6", "ipip")
            .endpoints(&addrs("2001:db8:200::", 4))
            .to_string(),
        service("quic6", "gue")
            .endpoints(&addrs("2001:db8:300::", 4))
            .to_string(),
        service("web4", "ipip")
            .endpoints(&addrs("2001:db8:400::", 4))
            .to_string(),
    ]
    .concat();
    let c6 = |i: u16| IpAddr::from([0x2001, 0xdb8, 0xc, 0, 0, 0, 0, i]);
    let n = 16u16;
    let mut cases: Vec<(Vec<u8>, &str, u16)> = Vec::new();
    for step in 0..2 {
        for i in 1..=n {
            let flags = if step == 0 { SYN } else { ACK };
            let tls = tcp_frame(c6(i), v6("2001:db8:f00::10"), 44000 + i, 443, flags, &[]);
            cases.push((tls, "tls6", i));
            let quic = udp_frame(c6(i), v6("2001:db8:f00::20"), 45000 + i, 443, &[0xc0; 1200]);
            cases.push((quic, "quic6", i));
            let c4 = IpAddr::from([192, 0, 2, i as u8]);
            cases.push((
                tcp_frame(c4, v4("10.0.0.40"), 46000 + i, 80, flags, &[]),
                "web4",
                i,
            ));
            // ICMPv6 to the IPv6 VIP: its L3_DEFAULT rule, which shares the GUE service.
            let echo = echo_frame(c6(i), v6("2001:db8:f00::10"), i, step);
            cases.push((echo, "rest6", i));
        }
    }
    let frames: Vec<Vec<u8>> = cases.iter().map(|(f, ..)| f.clone()).collect();
    let r = run("ipv6", &config, &frames, &[]);
    assert_eq!(r.out.len(), frames.len(), "{}", r.text);
    let mut per_flow = BTreeMap::new();
    let mut labels = BTreeMap::new();
    let mut ports = BTreeMap::new();
    for ((frame, svc, i), out) in cases.iter().zip(&r.out) {
        assert_eq!(be16(out, 12), 0x86dd, "{svc}: outer IPv6");
        let (mode, prefix, next_header) = match *svc {
            "tls6" => (Mode::Ipip, "2001:db8:200::", 41),
            "quic6" | "rest6" => (Mode::Gue(6080), "2001:db8:300::", 17),
            _ => (Mode::Ipip, "2001:db8:400::", 4),
        };
        assert_eq!(out[14 + 6], next_header, "{svc}: outer next header");
        let d = delivered(out, mode);
        assert_eq!(d.inner, frame[14..], "{svc}: inner packet unchanged");
        assert!(
            addrs(prefix, 4).contains(&d.backend),
            "{svc}: {}",
            d.backend
        );
        same_per_key(&mut per_flow, (*svc, *i), d.backend.clone(), "backend");
        same_per_key(&mut labels, (*svc, *i), d.flow_label.unwrap(), "flow label");
        if let Some(p) = d.udp_src {
            same_per_key(&mut ports, (*svc, *i), p, "outer UDP source port");
        }
    }
    for svc in ["tls6", "quic6", "web4", "rest6"] {
        let used: BTreeSet<&String> = per_flow
            .iter()
            .filter(|((s, _), _)| *s == svc)
            .map(|(_, b)| b)
            .collect();
        assert!(used.len() >= 3, "{svc}: {used:?}");
        assert_eq!(
            r.rule(&format!("{svc}-ag0")).new_flows,
            u64::from(n),
            "{}",
            r.text
        );
    }
    assert!(
        distinct(&labels).len() >= 56,
        "flow labels carry flow entropy"
    );
    assert!(
        distinct(&ports).len() >= 28,
        "outer UDP source ports carry flow entropy"
    );
}

/// A dual-stack service (M8): three endpoints with an IPv4 `address` and
/// an IPv6 `address6`, behind an IPv4 and an IPv6 rule. IPv4 clients reach
/// each endpoint at its IPv4 address, IPv6 clients at its IPv6 address
/// (IPv6 in IPv6, GUE), and both families reach the same three endpoints.
#[test]
fn ipv4_and_ipv6_clients_of_a_dual_stack_service_reach_the_same_endpoints() {
    let endpoints: Vec<String> = (1..=3)
        .map(|i| format!("{{ address = \"10.1.8.{i}\", address6 = \"2001:db8:8::{i}\" }}"))
        .collect();
    let config = [
        base(),
        rule("dual4", &["10.0.0.28"], "TCP", "80", "dual").to_string(),
        rule("dual6", &["2001:db8::28"], "TCP", "80", "dual").to_string(),
        service("dual", "gue")
            .set("gue_port", 7777)
            .endpoints(&endpoints)
            .to_string(),
    ]
    .concat();
    let mut reached = Vec::new();
    for (vip, rule) in [(v4("10.0.0.28"), "dual4"), (v6("2001:db8::28"), "dual6")] {
        // 24 connections from clients of the VIP's family.
        let mut frames = Vec::new();
        for step in 0..2u8 {
            for i in 1..=24u8 {
                let client = if vip.is_ipv6() {
                    IpAddr::from([0x2001, 0xdb8, 0xc, 0, 0, 0, 0, u16::from(i)])
                } else {
                    IpAddr::from([192, 0, 2, i])
                };
                let flags = if step == 0 { SYN } else { ACK };
                frames.push(tcp_frame(client, vip, 41000 + u16::from(i), 80, flags, &[]));
            }
        }
        let r = run(rule, &config, &frames, &[]);
        assert_eq!(r.out.len(), frames.len(), "{}", r.text);
        let mut per_flow = BTreeMap::new();
        for (i, (frame, out)) in frames.iter().zip(&r.out).enumerate() {
            let d = delivered(out, Mode::Gue(7777));
            assert_eq!(d.inner, frame[14..], "the inner packet is the client's");
            same_per_key(&mut per_flow, i % 24, d.backend.clone(), "backend");
        }
        let backends = distinct(&per_flow);
        let want: BTreeSet<String> = (1..=3)
            .map(|i| {
                if vip.is_ipv6() {
                    format!("2001:db8:8::{i}")
                } else {
                    format!("10.1.8.{i}")
                }
            })
            .collect();
        assert_eq!(
            backends, want,
            "{rule}: each endpoint at its {vip} family's address"
        );
        assert_eq!(r.rule(&format!("{rule}-ag0")).new_flows, 24, "{}", r.text);
        // The endpoints reached, by their number.
        let numbers: BTreeSet<String> = backends
            .iter()
            .map(|b| b.rsplit(['.', ':']).next().unwrap_or("").to_owned())
            .collect();
        reached.push(numbers);
    }
    assert_eq!(
        reached[0], reached[1],
        "both families reach the same endpoints"
    );
}
