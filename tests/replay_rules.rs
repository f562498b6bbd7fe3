//! `spillway replay`: rule selection (M2, M3, M5) and what no rule takes:
//! drops by reason (M3, M6, M14, M55), and deterministic forwarding.
//!
//! Every test writes a configuration and a pcap of hand-built packets, runs
//! the `spillway` binary, and checks the transmitted frames byte by byte
//! (outer headers decoded by `common::replay`, not by the `wire` crate under
//! test) and the summary's counters.

#![allow(clippy::cast_possible_truncation)] // test values are small
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

mod common;

use std::net::IpAddr;

use common::replay::*;
use common::*;
use testkit::config::{addrs, rule, service};
use wire::encap::{DecapConfig, parse_tunnel};

/// Counters a child rule should show for `frames`, each a new flow unless
/// `new_flows` says otherwise.
fn expect_count(frames: &[&Vec<u8>], new_flows: u64) -> RuleCount {
    RuleCount {
        packets: frames.len() as u64,
        bytes: frames.iter().map(|f| f.len() as u64).sum(),
        new_flows,
        drops: 0,
    }
}

// ---------------------------------------------------------------------------
// Rule selection (M2, M3, M5).

#[test]
fn rule_selection_prefers_the_port_specific_rule_and_falls_back_to_l3_default() {
    let vips = ["10.0.0.10", "10.0.0.11"];
    let config = [
        base(),
        rule("http", &vips, "TCP", "80", "http").to_string(),
        rule("alt", &vips, "TCP", "8000-8100", "alt").to_string(),
        rule("rest", &vips, "L3_DEFAULT", "all", "rest").to_string(),
        service("http", "ipip")
            .endpoints(&addrs("10.1.1.", 3))
            .to_string(),
        service("alt", "gre")
            .endpoints(&addrs("10.1.2.", 3))
            .to_string(),
        service("rest", "gue")
            .set("gue_port", 6080)
            .endpoints(&addrs("10.1.3.", 3))
            .to_string(),
    ]
    .concat();
    let (ag0, ag1) = (v4("10.0.0.10"), v4("10.0.0.11"));
    let c = |i: u8| IpAddr::from([192, 0, 2, i]);
    // (frame, service, child rule) in order; each its own flow unless noted.
    let mut cases: Vec<(Vec<u8>, &str, &str)> = vec![
        (
            tcp_frame(c(1), ag0, 40001, 80, SYN, &[]),
            "http",
            "http-ag0",
        ),
        (
            tcp_frame(c(2), ag0, 40002, 80, SYN, &[]),
            "http",
            "http-ag0",
        ),
        (
            tcp_frame(c(3), ag0, 40003, 8000, SYN, &[]),
            "alt",
            "alt-ag0",
        ),
        (
            tcp_frame(c(4), ag0, 40004, 8050, SYN, &[]),
            "alt",
            "alt-ag0",
        ),
        (
            tcp_frame(c(5), ag0, 40005, 8100, SYN, &[]),
            "alt",
            "alt-ag0",
        ),
        (
            tcp_frame(c(6), ag0, 40006, 7999, SYN, &[]),
            "rest",
            "rest-ag0",
        ),
        (
            tcp_frame(c(7), ag0, 40007, 8101, SYN, &[]),
            "rest",
            "rest-ag0",
        ),
        (
            tcp_frame(c(8), ag0, 40008, 9999, SYN, &[]),
            "rest",
            "rest-ag0",
        ),
        // UDP 80 and 53: no UDP rule, so L3_DEFAULT (the TCP rule on port 80
        // is of another protocol).
        (udp_frame(c(9), ag0, 5353, 53, b"dns?"), "rest", "rest-ag0"),
        (
            udp_frame(c(10), ag0, 5353, 80, b"not-http"),
            "rest",
            "rest-ag0",
        ),
        // ICMP echo: two requests of one flow (3-tuple).
        (echo_frame(c(11), ag0, 7, 1), "rest", "rest-ag0"),
        (echo_frame(c(11), ag0, 7, 2), "rest", "rest-ag0"),
        // ESP and GRE have no ports: L3_DEFAULT.
        (
            eth(&ip(
                c(12),
                ag0,
                ESP,
                &[0, 0, 0x10, 0x01, 0, 0, 0, 1, 0xaa, 0xbb],
            )),
            "rest",
            "rest-ag0",
        ),
        (
            eth(&ip(c(13), ag0, 47, &[0, 0, 0x08, 0x00, 0x45, 0, 0, 20])),
            "rest",
            "rest-ag0",
        ),
        // The second availability group's VIP: the same rules, their -ag1 children.
        (
            tcp_frame(c(14), ag1, 40014, 80, SYN, &[]),
            "http",
            "http-ag1",
        ),
        (
            tcp_frame(c(15), ag1, 40015, 8080, SYN, &[]),
            "alt",
            "alt-ag1",
        ),
        (udp_frame(c(16), ag1, 5353, 53, b"dns?"), "rest", "rest-ag1"),
    ];
    // A data packet of the first flow: follows its entry, no new flow.
    cases.push((
        tcp_frame(c(1), ag0, 40001, 80, ACK | PSH, b"GET / HTTP/1.0\r\n\r\n"),
        "http",
        "http-ag0",
    ));
    let mut frames: Vec<Vec<u8>> = cases.iter().map(|(f, ..)| f.clone()).collect();
    // SCTP (132) is none of L3_DEFAULT's protocols (M2): no rule.
    frames.push(eth(&ip(c(17), ag0, 132, &[0u8; 12])));

    let r = run("rules", &config, &frames, &[]);
    assert_eq!(r.out.len(), cases.len(), "{}", r.text);
    assert_eq!(r.drops("no_rule"), 1, "{}", r.text);
    let mode = |svc: &str| match svc {
        "http" => Mode::Ipip,
        "alt" => Mode::Gre(None),
        _ => Mode::Gue(6080),
    };
    let backends = |svc: &str| match svc {
        "http" => addrs("10.1.1.", 3),
        "alt" => addrs("10.1.2.", 3),
        _ => addrs("10.1.3.", 3),
    };
    for ((frame, svc, child), out) in cases.iter().zip(&r.out) {
        let d = delivered(out, mode(svc));
        assert!(
            backends(svc).contains(&d.backend),
            "{child}: {} is not a backend of {svc}",
            d.backend
        );
        assert_eq!(d.inner, frame[14..], "{child}: inner packet unchanged");
    }
    // The first flow's data packet went where its SYN went.
    assert_eq!(
        delivered(&r.out[0], Mode::Ipip).backend,
        delivered(r.out.last().unwrap(), Mode::Ipip).backend
    );
    for child in [
        "http-ag0", "alt-ag0", "rest-ag0", "http-ag1", "alt-ag1", "rest-ag1",
    ] {
        let mine: Vec<&Vec<u8>> = cases
            .iter()
            .filter(|(_, _, ch)| *ch == child)
            .map(|(f, ..)| f)
            .collect();
        // Repeated flows: the http data packet and the second echo request.
        let repeats = match child {
            "http-ag0" | "rest-ag0" => 1,
            _ => 0,
        };
        let want = expect_count(&mine, mine.len() as u64 - repeats);
        assert_eq!(r.rule(child), want, "{child}:\n{}", r.text);
    }
}

// ---------------------------------------------------------------------------
// Drops (M3, M6, M14).

fn drops_config() -> String {
    [
        base(),
        rule("web", &["10.0.0.10"], "TCP", "80", "web").to_string(),
        rule("dns", &["10.0.0.20"], "UDP", "53", "dns").to_string(),
        rule("web6", &["2001:db8:f00::10"], "TCP", "80", "web6").to_string(),
        service("web", "ipip")
            .endpoints(&addrs("10.1.1.", 3))
            .to_string(),
        service("dns", "ipip")
            .endpoints(&addrs("10.1.2.", 2))
            .to_string(),
        service("web6", "ipip")
            .endpoints(&addrs("2001:db8:200::", 2))
            .to_string(),
    ]
    .concat()
}

#[test]
fn unmatched_vip_traffic_and_foreign_destinations_are_dropped_and_counted() {
    let c = v4("192.0.2.1");
    let c6 = v6("2001:db8:c::1");
    let (web, dns, web6) = (v4("10.0.0.10"), v4("10.0.0.20"), v6("2001:db8:f00::10"));
    let good = [
        tcp_frame(c, web, 40000, 80, SYN, &[]),
        udp_frame(c, dns, 40000, 53, b"query"),
        tcp_frame(c6, web6, 40000, 80, SYN, &[]),
    ];
    let no_rule = [
        tcp_frame(c, web, 40000, 81, SYN, &[]),
        udp_frame(c, web, 40000, 80, b"udp to a tcp rule"),
        eth(&ip(c, web, ESP, &[0, 0, 0, 1, 0, 0, 0, 1])),
        tcp_frame(c, dns, 40000, 53, SYN, &[]),
        tcp_frame(c6, web6, 40000, 443, SYN, &[]),
    ];
    // Echo requests to a VIP no rule takes ICMP for: answered by the
    // balancer itself (`answer_ping`, on by default).
    let answered = [echo_frame(c, web, 1, 1), echo_frame(c6, web6, 1, 1)];
    let not_ours = [
        tcp_frame(c, v4("10.0.0.99"), 40000, 80, SYN, &[]),
        udp_frame(c, v4("203.0.113.7"), 40000, 53, b"query"),
        tcp_frame(c6, v6("2001:db8:f00::99"), 40000, 80, SYN, &[]),
    ];
    // The balancer's own address goes to the host, not to a backend.
    let own = tcp_frame(c, v4("10.0.0.2"), 40000, 22, SYN, &[]);
    let mut frames = vec![good[0].clone()];
    for (k, f) in no_rule.iter().chain(&not_ours).enumerate() {
        frames.push(f.clone());
        if k == 3 {
            frames.push(good[1].clone());
        }
    }
    frames.push(own);
    frames.extend(answered.iter().cloned());
    frames.push(good[2].clone());

    let r = run("drops", &drops_config(), &frames, &[]);
    let is_echo_reply = |o: &&Vec<u8>| {
        matches!(
            (o.get(12..14), o.get(23), o.get(34), o.get(20), o.get(54)),
            (Some([0x08, 0x00]), Some(1), Some(0), _, _)
                | (Some([0x86, 0xdd]), _, _, Some(58), Some(129))
        )
    };
    let (replies, out): (Vec<&Vec<u8>>, Vec<&Vec<u8>>) = r.out.iter().partition(is_echo_reply);
    assert_eq!(replies.len(), answered.len(), "{}", r.text);
    assert!(r.text.contains("echo replies 2"), "{}", r.text);
    assert_eq!(out.len(), good.len(), "only the good packets: {}", r.text);
    for (g, o) in good.iter().zip(out) {
        assert_eq!(delivered(o, Mode::Ipip).inner, g[14..]);
    }
    assert_eq!(r.drops("no_rule"), no_rule.len() as u64, "{}", r.text);
    assert_eq!(r.drops("not_ours"), not_ours.len() as u64, "{}", r.text);
    assert_eq!(r.drops("no_backend"), 0, "{}", r.text);
    assert!(r.text.contains("to host 1"), "{}", r.text);
    for child in ["web-ag0", "dns-ag0", "web6-ag0"] {
        let rc = r.rule(child);
        assert_eq!(
            (rc.packets, rc.new_flows, rc.drops),
            (1, 1, 0),
            "{child}: {}",
            r.text
        );
    }
}

#[test]
fn a_rule_without_healthy_backends_drops_and_counts_per_rule() {
    let c = |i: u8| IpAddr::from([192, 0, 2, i]);
    let (web, dns) = (v4("10.0.0.10"), v4("10.0.0.20"));
    let mut frames: Vec<Vec<u8>> = (1..=5)
        .map(|i| tcp_frame(c(i), web, 40000, 80, SYN, &[]))
        .collect();
    frames.push(tcp_frame(c(1), web, 40000, 80, ACK, &[]));
    let web_bytes: u64 = frames.iter().map(|f| f.len() as u64).sum();
    let query = udp_frame(c(1), dns, 40000, 53, b"query");
    frames.push(query.clone());
    let down = [
        "--down", "10.1.1.1", "--down", "10.1.1.2", "--down", "10.1.1.3",
    ];
    let r = run("nobackend", &drops_config(), &frames, &down);
    assert_eq!(
        r.out.len(),
        1,
        "only the other service's packet: {}",
        r.text
    );
    assert_eq!(delivered(&r.out[0], Mode::Ipip).inner, query[14..]);
    assert_eq!(r.drops("no_backend"), 6, "{}", r.text);
    assert_eq!(
        r.rule("web-ag0"),
        RuleCount {
            packets: 6,
            bytes: web_bytes,
            new_flows: 0,
            drops: 6,
        },
        "{}",
        r.text
    );
    assert_eq!(r.rule("dns-ag0").drops, 0);

    // One backend left: everything goes to it.
    let r = run("onebackend", &drops_config(), &frames, &down[..4]);
    assert_eq!(r.out.len(), frames.len(), "{}", r.text);
    for (frame, out) in frames.iter().zip(&r.out).take(6) {
        let d = delivered(out, Mode::Ipip);
        assert_eq!(d.backend, "10.1.1.3");
        assert_eq!(d.inner, frame[14..]);
    }
}

/// M55 in replay: what the edge does not take is dropped by reason (the
/// capture's frames are addressed to the uplink's configured `mac`), and
/// the summary says which MAC frames to another were measured against.
#[test]
fn replay_drops_what_the_edge_does_not_take_by_reason() {
    let client = IpAddr::from([192, 0, 2, 1]);
    let vip = IpAddr::from([10, 0, 0, 10]);
    let ok = |sport: u16| {
        testkit::packet::Packet::tcp(client, vip, sport, 80, SYN).macs(ROUTER_MAC, LB_MAC)
    };
    let mut bad_sum = ok(3).frame();
    bad_sum[24] ^= 0x5a;
    let frames = vec![
        ok(1).frame(),
        ok(2).macs(ROUTER_MAC, [2, 0, 0, 0, 0, 0x55]).frame(),
        bad_sum,
        ok(4).vlan(0x8100, 3).frame(),
        ok(5).ttl(0).frame(),
        ok(6).ip_options(&[0x83, 7, 4, 10, 0, 0, 10, 0]).frame(),
        tcp_frame(IpAddr::from([127, 0, 0, 1]), vip, 7, 80, SYN, &[]),
        tcp_frame(vip, vip, 8, 80, SYN, &[]),
    ];
    let r = run("edge", &config().build(), &frames, &[]);
    assert_eq!(r.out.len(), 1, "{}", r.text);
    for reason in [
        "l2_foreign_dst",
        "ipv4_bad_checksum",
        "vlan_untagged_port",
        "ttl_zero",
        "ip_source_route",
    ] {
        assert_eq!(r.drops(reason), 1, "{reason}: {}", r.text);
    }
    assert_eq!(r.drops("martian_source"), 2, "{}", r.text);
    assert!(
        r.text
            .contains("another MAC than the uplink's, 02:00:00:00:00:01"),
        "{}",
        r.text
    );
}

#[test]
fn replay_forwards_vip_traffic_deterministically_and_counts_the_rest() {
    let d = dir("forwards");
    let cfg = d.join("c.toml");
    std::fs::write(&cfg, config().build()).expect("config");
    let mut frames: Vec<Vec<u8>> = (0..90u16)
        .map(|i| syn((i % 30) as u8 + 1, 30000 + i, [10, 0, 0, 10], 80))
        .collect();
    frames.push(syn(1, 1, [10, 0, 0, 10], 81)); // no rule
    frames.push(syn(1, 1, [10, 0, 0, 99], 80)); // not ours
    frames.push(syn(1, 1, [10, 0, 0, 10], 80)[..24].to_vec()); // truncated IPv4: malformed
    let input = d.join("in.pcap");
    write_pcap(&input, &frames);

    let (out1, out2) = (d.join("out1.pcap"), d.join("out2.pcap"));
    let r1 = replay(&cfg, &input, &out1, &[]);
    let text =
        String::from_utf8_lossy(&r1.stdout).to_string() + &String::from_utf8_lossy(&r1.stderr);
    assert!(r1.status.success(), "{text}");
    assert!(text.contains("93 packets in, 90 out"), "{text}");
    assert!(
        text.contains("drop no_rule: 1")
            && text.contains("drop not_ours: 1")
            && text.contains("drop malformed: 1"),
        "{text}"
    );
    assert!(text.contains("rule web-ag0: 90 packets"), "{text}");

    let got = read_pcap(&out1);
    assert_eq!(got.len(), 90);
    let mut per_backend = std::collections::BTreeMap::new();
    for (out, original) in got.iter().zip(&frames) {
        let t = parse_tunnel(out, &DecapConfig::default()).expect("an IPIP frame");
        assert_eq!(
            &out[t.inner_offset..t.inner_offset + t.inner_len],
            &original[14..],
            "inner packet unchanged"
        );
        assert_eq!(
            &out[0..6],
            &[2, 0, 0, 0, 0, 0xfe],
            "to the configured gateway MAC"
        );
        *per_backend.entry(t.dst_ip.to_string()).or_insert(0) += 1;
    }
    assert_eq!(per_backend.len(), 3, "{per_backend:?}");

    let r2 = replay(&cfg, &input, &out2, &[]);
    assert!(
        r2.status.success(),
        "{}",
        String::from_utf8_lossy(&r2.stderr)
    );
    assert_eq!(
        std::fs::read(&out1).expect("out1"),
        std::fs::read(&out2).expect("out2"),
        "replays are deterministic"
    );

    // With one backend down, nothing goes to it.
    let out3 = d.join("out3.pcap");
    let r3 = replay(&cfg, &input, &out3, &["--down", "10.0.1.12"]);
    assert!(
        r3.status.success(),
        "{}",
        String::from_utf8_lossy(&r3.stderr)
    );
    for out in read_pcap(&out3) {
        let t = parse_tunnel(&out, &DecapConfig::default()).expect("tunnel");
        assert_ne!(t.dst_ip.to_string(), "10.0.1.12");
    }
    let _ = std::fs::remove_dir_all(&d);
}
