//! `spillway replay`: a rule's `source_ranges` admit only their clients
//! (M6): every packet from elsewhere is dropped and counted, whichever path
//! it takes through the pipeline — a first packet, one of a run to the same
//! destination, a fragment, an ICMP error about a refused client's flow.
//!
//! Every test writes a configuration and a pcap of hand-built packets, runs
//! the `spillway` binary, and checks the transmitted frames byte by byte
//! (outer headers decoded by `common::replay`) and the summary's counters.

#![allow(clippy::cast_possible_truncation)] // test values are small
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

mod common;

use std::net::IpAddr;

use common::replay::*;
use common::*;
use testkit::config::{addrs, rule, service};

fn config() -> String {
    [
        base(),
        rule("web", &["10.0.0.10"], "TCP", "80", "web")
            .strs("source_ranges", &["192.0.2.0/25", "198.51.100.7"])
            .to_string(),
        // Unrestricted, on the same VIP: the list is the rule's, not the VIP's.
        rule("dns", &["10.0.0.10"], "UDP", "53", "dns").to_string(),
        rule("rest", &["10.0.0.20"], "L3_DEFAULT", "all", "rest")
            .strs("source_ranges", &["192.0.2.0/24"])
            .to_string(),
        rule("web6", &["2001:db8:f00::10"], "TCP", "80", "web6")
            .strs("source_ranges", &["2001:db8:c::/48"])
            .to_string(),
        service("web", "ipip")
            .endpoints(&addrs("10.1.1.", 3))
            .to_string(),
        service("dns", "ipip")
            .endpoints(&addrs("10.1.2.", 2))
            .to_string(),
        service("rest", "ipip")
            .endpoints(&addrs("10.1.3.", 2))
            .to_string(),
        service("web6", "ipip")
            .endpoints(&addrs("2001:db8:200::", 2))
            .to_string(),
    ]
    .concat()
}

/// An ICMP "fragmentation needed" from a router about the reply the VIP
/// sent to `client` (`vport` → `cport`).
fn frag_needed(vip: IpAddr, client: IpAddr, vport: u16, cport: u16) -> Vec<u8> {
    let mut q = ip(vip, client, TCP, &tcp(vip, client, vport, cport, ACK, &[]));
    q.truncate(28);
    eth(&ip(v4("203.0.113.1"), vip, ICMP, &icmpv4(3, 4, 1400, &q)))
}

#[test]
fn a_rule_with_source_ranges_drops_and_counts_every_other_client() {
    let (web, rest, web6) = (v4("10.0.0.10"), v4("10.0.0.20"), v6("2001:db8:f00::10"));
    let inside = v4("192.0.2.1");
    let listed = v4("198.51.100.7");
    // In 192.0.2.0/24 (the L3_DEFAULT rule's list) but not in /25.
    let outside = v4("192.0.2.200");
    let far = v4("203.0.113.9");
    let (inside6, outside6) = (v6("2001:db8:c::1"), v6("2001:db8:d::1"));

    // (frame, delivered?) in order. Packets to one destination follow each
    // other, so the fast path's run of one rule sees both kinds of client.
    let mut cases: Vec<(Vec<u8>, bool)> = vec![
        (tcp_frame(inside, web, 40001, 80, SYN, &[]), true),
        (tcp_frame(outside, web, 40002, 80, SYN, &[]), false),
        (tcp_frame(inside, web, 40001, 80, ACK, &[]), true),
        (tcp_frame(far, web, 40003, 80, SYN, &[]), false),
        (tcp_frame(listed, web, 40004, 80, SYN, &[]), true),
        (
            tcp_frame(v4("198.51.100.8"), web, 40005, 80, SYN, &[]),
            false,
        ),
        // The unrestricted rule beside it takes everyone.
        (udp_frame(far, web, 5353, 53, b"query"), true),
        (udp_frame(outside, web, 5353, 53, b"query"), true),
        // An ICMP error belongs to the client of the flow it quotes.
        (frag_needed(web, inside, 80, 40001), true),
        (frag_needed(web, outside, 80, 40002), false),
        (tcp_frame(inside6, web6, 40001, 80, SYN, &[]), true),
        (tcp_frame(outside6, web6, 40001, 80, SYN, &[]), false),
        (tcp_frame(outside, rest, 40006, 22, SYN, &[]), true),
        (tcp_frame(far, rest, 40006, 22, SYN, &[]), false),
    ];
    // Fragments (first and later) prove no ports but carry their source.
    let datagram = |src: IpAddr| {
        let l4 = udp(src, rest, 30000, 5000, &[0x5a; 1800]);
        fragments(src, rest, UDP, 0x77, &l4, 1000)
    };
    cases.extend(datagram(inside).into_iter().map(|f| (f, true)));
    cases.extend(datagram(far).into_iter().map(|f| (f, false)));
    let frames: Vec<Vec<u8>> = cases.iter().map(|(f, _)| f.clone()).collect();

    let r = run("source-ranges", &config(), &frames, &[]);
    let admitted: Vec<&Vec<u8>> = cases.iter().filter(|c| c.1).map(|c| &c.0).collect();
    assert_eq!(r.out.len(), admitted.len(), "{}", r.text);
    for (want, out) in admitted.iter().zip(&r.out) {
        assert_eq!(delivered(out, Mode::Ipip).inner, want[14..], "{}", r.text);
    }
    let refused = cases.iter().filter(|c| !c.1).count() as u64;
    assert_eq!(r.drops("source_not_allowed"), refused, "{}", r.text);
    // Each rule counts what it refused among its packets and drops.
    for (child, packets, drops) in [
        ("web-ag0", 8, 4),
        ("dns-ag0", 2, 0),
        ("rest-ag0", 6, 3),
        ("web6-ag0", 2, 1),
    ] {
        let rc = r.rule(child);
        assert_eq!(
            (rc.packets, rc.drops),
            (packets, drops),
            "{child}: {}",
            r.text
        );
    }
}

#[test]
fn an_address_outside_every_range_reaches_no_rule_through_a_tunnel_either() {
    // Tunnelled ingress (M49) classifies the inner packet again: its
    // source is the client, and the rule's list applies to it.
    let config = [
        base(),
        rule("web", &["10.0.0.10"], "TCP", "80", "web")
            .strs("source_ranges", &["192.0.2.0/24"])
            .to_string(),
        service("web", "ipip")
            .endpoints(&addrs("10.1.1.", 2))
            .to_string(),
        "\n[tunnel_ingress]\nallow = [\"10.9.0.1/32\"]\n".to_string(),
    ]
    .concat();
    let web = v4("10.0.0.10");
    let tunnelled = |client: IpAddr| {
        let inner = tcp_frame(client, web, 40000, 80, SYN, &[]);
        let mut o = testkit::packet::outer(v4("10.9.0.1"), v4("10.0.0.2"));
        (o.src_mac, o.dst_mac) = (ROUTER_MAC, LB_MAC);
        testkit::packet::encap(&inner, &o, &wire::encap::Tunnel::IpIp)
    };
    let frames = vec![tunnelled(v4("192.0.2.1")), tunnelled(v4("203.0.113.9"))];
    let r = run("source-ranges-tunnel", &config, &frames, &[]);
    assert_eq!(r.out.len(), 1, "{}", r.text);
    assert_eq!(r.drops("source_not_allowed"), 1, "{}", r.text);
}
