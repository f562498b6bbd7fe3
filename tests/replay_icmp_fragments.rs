//! `spillway replay`: ICMP errors and IP fragments follow their flows (M13);
//! packets too big once encapsulated leave in fragments or are answered
//! (M48).
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
use testkit::config::{Config, addrs, node, port, rule, service};

// ---------------------------------------------------------------------------
// ICMP errors follow their flow (M13).

/// The first `len` bytes of a packet the backend sent from the VIP to the
/// client (as an ICMP error quotes it).
fn quoted_reply(vip: IpAddr, client: IpAddr, vport: u16, cport: u16, len: usize) -> Vec<u8> {
    let mut p = ip(
        vip,
        client,
        TCP,
        &tcp(vip, client, vport, cport, ACK | PSH, &[0x5a; 1400]),
    );
    p.truncate(len);
    p
}

#[test]
fn icmp_frag_needed_reaches_the_backend_of_the_quoted_tcp_flow() {
    let vip = v4("10.0.0.10");
    let router = v4("198.51.100.1");
    let config = [
        base(),
        rule("web", &["10.0.0.10"], "TCP", "80", "web").to_string(),
        rule("dns", &["10.0.0.10"], "UDP", "53", "dns").to_string(),
        service("web", "ipip")
            .endpoints(&addrs("10.1.1.", 8))
            .to_string(),
        service("dns", "ipip")
            .endpoints(&addrs("10.1.2.", 8))
            .to_string(),
    ]
    .concat();
    let client = |i: u8| IpAddr::from([192, 0, 2, i]);
    let port = |i: u8| 42000 + u16::from(i);
    let n = 24u8;
    let mut frames = Vec::new();
    for i in 1..=n {
        frames.push(tcp_frame(client(i), vip, port(i), 80, SYN, &[]));
        frames.push(tcp_frame(client(i), vip, port(i), 80, ACK, &[]));
    }
    let flow_packets = frames.len();
    // Fragmentation needed (type 3 code 4, next-hop MTU 1400) from a router on
    // the way back, in another order than the flows started; half quote the
    // minimum (IP header + 8 bytes), half much more.
    let errors: Vec<u8> = (1..=n).rev().collect();
    for &i in &errors {
        let len = if i % 2 == 0 { 28 } else { 548 };
        let q = quoted_reply(vip, client(i), 80, port(i), len);
        frames.push(eth(&ip(router, vip, ICMP, &icmpv4(3, 4, 1400, &q))));
    }
    // A UDP flow and a port unreachable (type 3 code 3) about its reply.
    let (dc, dport) = (client(200), 5353);
    frames.push(udp_frame(dc, vip, dport, 53, b"query"));
    let mut q = ip(vip, dc, UDP, &udp(vip, dc, 53, dport, b"answer"));
    q.truncate(28);
    frames.push(eth(&ip(router, vip, ICMP, &icmpv4(3, 3, 0, &q))));
    // An error to the VIP quoting a packet from elsewhere is not forwarded.
    let q = quoted_reply(v4("10.0.0.99"), client(1), 80, port(1), 28);
    frames.push(eth(&ip(router, vip, ICMP, &icmpv4(3, 4, 1400, &q))));

    let r = run("icmp4", &config, &frames, &[]);
    assert_eq!(r.out.len(), frames.len() - 1, "{}", r.text);
    assert_eq!(r.drops("icmp_mismatch"), 1, "{}", r.text);
    let mut flow_backend = BTreeMap::new();
    for (k, out) in r.out[..flow_packets].iter().enumerate() {
        let d = delivered(out, Mode::Ipip);
        same_per_key(&mut flow_backend, k / 2 + 1, d.backend, "backend");
    }
    assert!(distinct(&flow_backend).len() >= 6, "{flow_backend:?}");
    for (j, &i) in errors.iter().enumerate() {
        let at = flow_packets + j;
        let d = delivered(&r.out[at], Mode::Ipip);
        assert_eq!(
            d.inner,
            frames[at][14..],
            "the ICMP error is delivered unchanged"
        );
        assert_eq!(
            d.backend,
            flow_backend[&usize::from(i)],
            "frag-needed about client {i} goes to its flow's backend"
        );
    }
    let udp_flow = delivered(&r.out[flow_packets + errors.len()], Mode::Ipip);
    let unreachable = delivered(&r.out[flow_packets + errors.len() + 1], Mode::Ipip);
    assert!(addrs("10.1.2.", 8).contains(&udp_flow.backend));
    assert_eq!(
        unreachable.backend, udp_flow.backend,
        "port unreachable follows the UDP flow"
    );
    // ICMP errors are counted on the flow's rule but never create flows.
    let web = r.rule("web-ag0");
    assert_eq!(
        (web.packets, web.new_flows),
        (3 * u64::from(n), u64::from(n)),
        "{}",
        r.text
    );
    let dns = r.rule("dns-ag0");
    assert_eq!((dns.packets, dns.new_flows), (2, 1), "{}", r.text);
}

#[test]
fn icmpv6_packet_too_big_reaches_the_backend_of_the_quoted_flow() {
    let vip = v6("2001:db8:f00::10");
    let router = v6("2001:db8:ffff::1");
    let config = [
        base(),
        rule("web6", &["2001:db8:f00::10"], "TCP", "443", "web6").to_string(),
        service("web6", "ipip")
            .endpoints(&addrs("2001:db8:200::", 8))
            .to_string(),
    ]
    .concat();
    let client = |i: u16| IpAddr::from([0x2001, 0xdb8, 0xc, 0, 0, 0, 0, i]);
    let port = |i: u16| 43000 + i;
    let n = 24u16;
    let mut frames = Vec::new();
    for i in 1..=n {
        frames.push(tcp_frame(client(i), vip, port(i), 443, SYN, &[]));
        frames.push(tcp_frame(
            client(i),
            vip,
            port(i),
            443,
            ACK | PSH,
            &[0x17; 200],
        ));
    }
    let flow_packets = frames.len();
    let errors: Vec<u16> = (1..=n).rev().collect();
    for &i in &errors {
        // As much of the offending packet as fits in 1280 bytes, or less.
        let len = if i % 2 == 0 { 1280 - 48 } else { 64 };
        let q = quoted_reply(vip, client(i), 443, port(i), len);
        frames.push(eth(&ip(
            router,
            vip,
            ICMPV6,
            &icmpv6(router, vip, 2, 0, 1280, &q),
        )));
    }
    let r = run("icmp6", &config, &frames, &[]);
    assert_eq!(r.out.len(), frames.len(), "{}", r.text);
    let mut flow_backend = BTreeMap::new();
    for (k, (frame, out)) in frames.iter().zip(&r.out).enumerate() {
        let d = delivered(out, Mode::Ipip);
        assert_eq!(d.inner, frame[14..], "6in6: the inner packet unchanged");
        if k < flow_packets {
            same_per_key(&mut flow_backend, k as u16 / 2 + 1, d.backend, "backend");
        } else {
            let i = errors[k - flow_packets];
            assert_eq!(
                d.backend, flow_backend[&i],
                "packet-too-big about client {i} goes to its flow's backend"
            );
        }
    }
    assert!(distinct(&flow_backend).len() >= 6, "{flow_backend:?}");
    let web = r.rule("web6-ag0");
    assert_eq!(
        (web.packets, web.new_flows),
        (3 * u64::from(n), u64::from(n)),
        "{}",
        r.text
    );
}

/// An ICMP error may quote the first fragment of a reply the backend
/// fragmented (a large UDP answer; e.g. an ICMPv6 packet-too-big on a path
/// with a smaller MTU, or an IPv4 host unreachable). The quoted first fragment
/// carries the ports, and the client's request was not fragmented, so the
/// flow is keyed on its 5-tuple. (This test found the pipeline keying such
/// errors on the 3-tuple, as if they belonged to a fragmented flow.)
#[test]
fn icmp_error_quoting_the_first_fragment_of_a_reply_reaches_the_flows_backend() {
    let config = [
        base(),
        rule("dns6", &["2001:db8:f00::10"], "UDP", "53", "dns6").to_string(),
        rule("dns4", &["10.0.0.10"], "UDP", "53", "dns4").to_string(),
        service("dns6", "ipip")
            .endpoints(&addrs("2001:db8:200::", 8))
            .to_string(),
        service("dns4", "ipip")
            .endpoints(&addrs("10.1.1.", 8))
            .to_string(),
    ]
    .concat();
    let mut frames = Vec::new();
    for i in 1..=16u16 {
        let v6_flow = (
            v6("2001:db8:f00::10"),
            IpAddr::from([0x2001, 0xdb8, 0xc, 0, 0, 0, 0, i]),
            v6("2001:db8:ffff::1"),
        );
        let v4_flow = (
            v4("10.0.0.10"),
            IpAddr::from([192, 0, 2, i as u8]),
            v4("198.51.100.1"),
        );
        for (vip, client, router) in [v6_flow, v4_flow] {
            let port = 50000 + i;
            frames.push(udp_frame(client, vip, port, 53, b"query"));
            // The backend's answer in fragments; the error quotes the first.
            let answer = udp(vip, client, 53, port, &[0x42; 3000]);
            let first = fragments(vip, client, UDP, 77, &answer, 1232)[0][14..].to_vec();
            frames.push(if vip.is_ipv6() {
                let quoted = &first[..1232];
                eth(&ip(
                    router,
                    vip,
                    ICMPV6,
                    &icmpv6(router, vip, 2, 0, 1280, quoted),
                ))
            } else {
                eth(&ip(router, vip, ICMP, &icmpv4(3, 1, 0, &first[..28])))
            });
        }
    }
    let r = run("icmp-fragment", &config, &frames, &[]);
    assert_eq!(r.out.len(), frames.len(), "{}", r.text);
    let mut wrong = Vec::new();
    for pair in r.out.chunks(2) {
        let flow = delivered(&pair[0], Mode::Ipip);
        let error = delivered(&pair[1], Mode::Ipip);
        if flow.backend != error.backend {
            wrong.push(format!(
                "flow to {}, its error to {}",
                flow.backend, error.backend
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of 32 errors misrouted: {wrong:#?}",
        wrong.len()
    );
}

// ---------------------------------------------------------------------------
// Too big once encapsulated (M48).

/// Issue 38 item 14, offline: a 1,500-byte UDP datagram without DF through a
/// backend port of MTU 1,500 leaves as two GUE packets, each within the MTU
/// (outer DF set: they fit), of one outer flow, whose inner fragments are
/// the datagram again; the packet after it follows them. Replay's packet
/// I/O gives the second fragment its buffer.
#[test]
fn a_datagram_without_df_too_big_once_in_gue_leaves_in_fragments() {
    let base = Config::new()
        .node(node("replay", "r", "z"))
        .port(uplink(&["10.0.0.2/24"]))
        .port(
            port("inside", "net_pcap1", "backend")
                .strs("addresses", &["10.1.0.2/24"])
                .str("mac", "02:00:00:00:00:02")
                .str("gateway_mac", "02:00:00:00:00:fd")
                .set("mtu", 1500),
        )
        .build();
    let config = [
        base,
        rule("dns", &["10.0.0.10"], "UDP", "53", "dns").to_string(),
        service("dns", "gue")
            .endpoints(&addrs("10.1.1.", 4))
            .to_string(),
    ]
    .concat();
    let datagram = |len: usize| {
        let payload: Vec<u8> = (0..len - 28).map(|i| i as u8).collect();
        testkit::packet::Packet::udp(v4("192.0.2.7"), v4("10.0.0.10"), 40000, 53)
            .payload(&payload)
            .ident(0x1234)
            .dont_frag(false)
            .macs(ROUTER_MAC, LB_MAC)
            .frame()
    };
    let (big, small) = (datagram(1500), datagram(100));
    let r = run("fragmented", &config, &[big.clone(), small.clone()], &[]);
    assert_eq!(
        r.out.len(),
        3,
        "two fragments and the small one:\n{}",
        r.text
    );
    let frags: Vec<Delivered> = r.out[..2]
        .iter()
        .map(|f| {
            assert!(f.len() <= 14 + 1500, "{} bytes: over the MTU", f.len());
            delivered(f, Mode::Gue(6080))
        })
        .collect();
    assert_eq!(frags[0].backend, frags[1].backend, "one backend");
    assert_eq!(frags[0].udp_src, frags[1].udp_src, "one outer flow");
    // The inner fragments: same identification, offsets 0 and 1,448, MF on
    // the first; their payloads are the datagram's.
    let (a, b) = (&frags[0].inner, &frags[1].inner);
    assert_eq!((be16(a, 4), be16(b, 4)), (0x1234, 0x1234));
    assert_eq!((be16(a, 6), be16(b, 6)), (0x2000, 1448 / 8));
    assert_eq!(
        (usize::from(be16(a, 2)), usize::from(be16(b, 2))),
        (a.len(), b.len())
    );
    assert_eq!(csum(0, &a[..20]), 0);
    assert_eq!(csum(0, &b[..20]), 0);
    let mut payload = a[20..].to_vec();
    payload.extend_from_slice(&b[20..]);
    assert_eq!(payload, big[14 + 20..], "the datagram, reassembled");
    assert_eq!(delivered(&r.out[2], Mode::Gue(6080)).inner, small[14..]);
}

// ---------------------------------------------------------------------------
// Fragments (M13).

#[test]
fn fragments_of_a_datagram_share_a_backend_in_any_order() {
    // A fragment matches only an all-port rule (M13): UDP on every port.
    let config = [
        base(),
        rule("video", &["10.0.0.10"], "UDP", "all", "video").to_string(),
        rule("web", &["10.0.0.10"], "TCP", "80", "web").to_string(),
        rule("video6", &["2001:db8:f00::10"], "UDP", "all", "video6").to_string(),
        service("video", "ipip")
            .endpoints(&addrs("10.1.1.", 8))
            .to_string(),
        service("web", "ipip")
            .endpoints(&addrs("10.1.2.", 8))
            .to_string(),
        service("video6", "ipip")
            .endpoints(&addrs("2001:db8:200::", 8))
            .to_string(),
    ]
    .concat();
    let n = 30u16;
    // Each datagram: 2,500 bytes of payload in fragments of 1,000, 1,000 and
    // 508 bytes; the UDP header (with the checksum over the whole datagram)
    // is only in the first.
    let mut datagrams: Vec<(String, Vec<Vec<u8>>)> = Vec::new();
    for i in 1..=n {
        for (family, src, vip) in [
            ("v4", IpAddr::from([192, 0, 2, i as u8]), v4("10.0.0.10")),
            (
                "v6",
                IpAddr::from([0x2001, 0xdb8, 0xc, 0, 0, 0, 0, i]),
                v6("2001:db8:f00::10"),
            ),
        ] {
            let payload: Vec<u8> = (0..2500u32).map(|b| (b * u32::from(i)) as u8).collect();
            let l4 = udp(src, vip, 30000 + i, 5000, &payload);
            let ident = 0x100 + u32::from(i);
            let mut frags = fragments(src, vip, UDP, ident, &l4, 1000);
            assert_eq!(frags.len(), 3);
            match i % 4 {
                0 => {}                    // in order
                1 => frags.reverse(),      // last fragment first
                2 => frags.swap(0, 1),     // a later fragment first
                _ => frags.rotate_left(1), // first fragment last
            }
            datagrams.push((format!("{family} client {i}"), frags));
        }
    }
    // Interleave the datagrams' fragments.
    let mut frames = Vec::new();
    let mut owner = Vec::new();
    for k in 0..3 {
        for (d, (_, frags)) in datagrams.iter().enumerate() {
            frames.push(frags[k].clone());
            owner.push(d);
        }
    }
    let r = run("fragments", &config, &frames, &[]);
    assert_eq!(r.out.len(), frames.len(), "{}", r.text);
    let mut backend_of = BTreeMap::new();
    for ((frame, out), &d) in frames.iter().zip(&r.out).zip(&owner) {
        let got = delivered(out, Mode::Ipip);
        assert_eq!(got.inner, frame[14..], "fragment delivered unchanged");
        same_per_key(
            &mut backend_of,
            datagrams[d].0.clone(),
            got.backend,
            "backend",
        );
    }
    for family in ["v4", "v6"] {
        let used: BTreeSet<&String> = backend_of
            .iter()
            .filter(|(k, _)| k.starts_with(family))
            .map(|(_, b)| b)
            .collect();
        assert!(
            used.len() >= 5,
            "{family} datagrams spread over backends: {used:?}"
        );
    }
    // Fragments hash on the 3-tuple: one flow per client and family.
    for child in ["video-ag0", "video6-ag0"] {
        let c = r.rule(child);
        assert_eq!(
            (c.packets, c.new_flows),
            (3 * u64::from(n), u64::from(n)),
            "{}",
            r.text
        );
    }
    assert_eq!(r.rule("web-ag0"), RuleCount::default());
    // With `UDP 5000` rules instead, no fragment can prove its port: every
    // one is dropped and counted, none reaches a backend.
    let config = config.replace("ports = \"all\"", "ports = \"5000\"");
    let d = dir("fragments-port-rule");
    let (cfg, input, output) = (d.join("c.toml"), d.join("in.pcap"), d.join("out.pcap"));
    std::fs::write(&cfg, &config).expect("config");
    write_pcap(&input, &frames);
    let out = replay(&cfg, &input, &output, &[]);
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    assert!(read_pcap(&output).is_empty(), "{text}");
    assert!(
        text.contains(&format!("drop fragment_no_rule: {}", frames.len())),
        "{text}"
    );
}

// ---------------------------------------------------------------------------
// MTU (M48).

/// On a 1500-byte uplink, IPIP adds 20 bytes: a 1480-byte DF packet goes
/// out encapsulated, a 1481-byte one comes back as ICMP "fragmentation
/// needed" advertising 1480, from the VIP to the client.
#[test]
fn replay_answers_a_df_packet_too_big_once_encapsulated() {
    let vip = IpAddr::from([10, 0, 0, 10]);
    let client = IpAddr::from([192, 0, 2, 7]);
    let fits = tcp_frame(client, vip, 40000, 80, ACK, &[7; 1480 - 40]);
    let over = tcp_frame(client, vip, 40000, 80, ACK, &[7; 1481 - 40]);
    let r = run("mtu", &config().build(), &[fits, over.clone()], &[]);
    assert_eq!(r.out.len(), 2, "{}", r.text);
    assert_eq!(r.out[0].len(), 14 + 20 + 1480, "encapsulated to the MTU");
    let icmp = &r.out[1];
    assert_eq!(&icmp[0..6], &ROUTER_MAC, "back to the sender's MAC");
    assert_eq!(&icmp[6..12], &LB_MAC);
    assert_eq!(&icmp[14 + 12..14 + 16], &[10, 0, 0, 10], "from the VIP");
    assert_eq!(&icmp[14 + 16..14 + 20], &[192, 0, 2, 7], "to the client");
    assert_eq!(icmp[14 + 9], ICMP);
    let m = &icmp[14 + 20..];
    assert_eq!((m[0], m[1]), (3, 4), "fragmentation needed");
    assert_eq!(u16::from_be_bytes([m[6], m[7]]), 1480, "next-hop MTU");
    assert_eq!(
        &m[8..],
        &over[14..14 + 548],
        "quotes 548 bytes of the packet"
    );
    assert!(r.text.contains("ICMP too big 1"), "{}", r.text);
}
