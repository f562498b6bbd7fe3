//! `spillway replay`: tunnelled ingress (M49), each tunnel type forwarded
//! like the direct packet, and what it does not take.
//!
//! Every test writes a configuration and a pcap of hand-built packets, runs
//! the `spillway` binary, and checks the transmitted frames byte by byte
//! (outer headers decoded by `common::replay`, not by the `wire` crate under
//! test) and the summary's counters.

#![allow(clippy::cast_possible_truncation)] // test values are small
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

mod common;

use std::collections::BTreeMap;
use std::net::IpAddr;

use common::replay::*;
use common::*;
use testkit::config::{addrs, rule, service};

// ---------------------------------------------------------------------------
// Tunnelled ingress (M49).

/// The shared node with a GUE service behind the VIP 10.0.0.30 and its
/// IPv6 twin, and tunnels accepted from one peer of each family.
fn ingress_config() -> String {
    [
        base(),
        rule("spill", &["10.0.0.30"], "TCP", "80", "spill").to_string(),
        rule("spill6", &["2001:db8:30::30"], "TCP", "80", "spill").to_string(),
        service("spill", "gue")
            .set("gue_port", 7777)
            .endpoints(&addrs("10.1.9.", 3))
            .to_string(),
        "\n[tunnel_ingress]\nallow = [\"192.0.2.250/32\", \"2001:db8:ff::/64\"]\n".to_string(),
    ]
    .concat()
}

/// `inner` (a frame) in `tunnel` from `src` to the uplink's address of its
/// family, to our MAC.
fn to_own(inner: &[u8], src: &str, tunnel: &wire::encap::Tunnel) -> Vec<u8> {
    let src: IpAddr = src.parse().unwrap();
    let own = if src.is_ipv4() {
        v4("10.0.0.2")
    } else {
        v6("2001:db8::2")
    };
    let mut o = testkit::packet::outer(src, own);
    (o.src_mac, o.dst_mac) = (ROUTER_MAC, LB_MAC);
    testkit::packet::encap(inner, &o, tunnel)
}

fn ingress_tunnels() -> Vec<(&'static str, wire::encap::Tunnel)> {
    use wire::encap::Tunnel;
    vec![
        ("ipip", Tunnel::IpIp),
        ("gre", Tunnel::Gre { key: None }),
        ("gre", Tunnel::Gre { key: Some(5) }),
        ("gue", Tunnel::Gue { port: 6080 }),
        (
            "geneve",
            Tunnel::Geneve {
                port: 6081,
                vni: 0,
                ids: wire::geneve::OptionIds::DEFAULT,
                options: wire::geneve::GatewayOptions {
                    endpoint_id: None,
                    cookie: Some(9),
                },
            },
        ),
    ]
}

#[test]
fn tunnelled_ingress_of_each_type_is_forwarded_like_the_direct_packet() {
    // Per tunnel type and outer family: a connection (SYN, ACK) arrives
    // tunnelled from the peer, then continues directly; every packet of it
    // leaves for one backend with the client's packet byte for byte inside.
    let mut frames = Vec::new();
    let mut inners = Vec::new();
    let mut port = 42000;
    for (_, t) in ingress_tunnels() {
        for (peer, client, vip) in [
            ("192.0.2.250", v4("198.51.100.1"), v4("10.0.0.30")),
            ("2001:db8:ff::1", v4("198.51.100.2"), v4("10.0.0.30")),
            ("192.0.2.250", v6("2001:db8:c::1"), v6("2001:db8:30::30")),
            ("2001:db8:ff::1", v6("2001:db8:c::2"), v6("2001:db8:30::30")),
        ] {
            port += 1;
            let syn = tcp_frame(client, vip, port, 80, SYN, &[]);
            let ack = tcp_frame(client, vip, port, 80, ACK, &[]);
            frames.push(to_own(&syn, peer, &t));
            frames.push(to_own(&ack, peer, &t));
            frames.push(ack.clone());
            inners.extend([(port, syn), (port, ack.clone()), (port, ack)]);
        }
    }
    let denied = to_own(
        &syn(9, 1, [10, 0, 0, 30], 80),
        "192.0.2.251",
        &wire::encap::Tunnel::IpIp,
    );
    frames.push(denied);
    let r = run("ingress", &ingress_config(), &frames, &[]);
    assert_eq!(r.out.len(), inners.len(), "{}", r.text);
    let mut per_flow = BTreeMap::new();
    for ((port, inner), out) in inners.iter().zip(&r.out) {
        let d = delivered(out, Mode::Gue(7777));
        assert_eq!(d.inner, inner[14..], "the client's packet, byte for byte");
        same_per_key(&mut per_flow, *port, d.backend, "backend");
    }
    assert!(distinct(&per_flow).len() > 1, "{per_flow:?}");
    assert_eq!(r.drops("tunnel_source_denied"), 1, "{}", r.text);
    assert_eq!(
        r.line_value("tunnels: "),
        Some("decapsulated ipip 8, gre 16, gue 8, geneve 8"),
        "{}",
        r.text
    );
    assert_eq!(r.rule("spill-ag0").new_flows, 10, "{}", r.text);
    assert_eq!(r.rule("spill6-ag0").new_flows, 10, "{}", r.text);
}

#[test]
fn tunnelled_ingress_drops_what_it_does_not_take_and_leaves_the_rest_to_the_host() {
    let good = syn(1, 40000, [10, 0, 0, 30], 80);
    let ipip = wire::encap::Tunnel::IpIp;
    let frames = vec![
        // Inner destination not a VIP.
        to_own(&syn(1, 40001, [10, 0, 0, 99], 80), "192.0.2.250", &ipip),
        // IPIP inside IPIP.
        to_own(
            &eth(&ip(v4("198.51.100.1"), v4("10.0.0.30"), 4, &good[14..])),
            "192.0.2.250",
            &ipip,
        ),
        // A fragment of a tunnel packet.
        fragments(v4("192.0.2.250"), v4("10.0.0.2"), 4, 7, &good[14..], 24)[0].clone(),
        // Not a tunnel: the host's.
        tcp_frame(v4("192.0.2.250"), v4("10.0.0.2"), 40000, 22, SYN, &[]),
    ];
    let r = run("ingress-drops", &ingress_config(), &frames, &[]);
    assert_eq!(r.out.len(), 0, "{}", r.text);
    assert_eq!(r.drops("tunnel_not_vip"), 1, "{}", r.text);
    assert_eq!(r.drops("tunnel_nested"), 1, "{}", r.text);
    assert_eq!(r.drops("tunnel_fragment"), 1, "{}", r.text);
    assert!(r.text.contains("to host 1"), "{}", r.text);
}
