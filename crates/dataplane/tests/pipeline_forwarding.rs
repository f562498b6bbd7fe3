//! The pipeline forwarding: a flow to one backend and its spread over them,
//! rule selection and no open relay (M3, M6), every delivery mode (M8),
//! IPv6 VIPs and addresses, services sharing a VIP, the Maglev version.
//!
//! The pipeline end to end on in-memory buffers (the lab in `common`): a
//! compiled configuration, a snapshot, a real flow table, crafted frames
//! in, verdicts and bytes out.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly
#![allow(clippy::cast_possible_truncation)] // test values are small

mod common;

use std::net::Ipv6Addr;

use common::*;
use dataplane::{DropReason, EndpointHealth, Pipeline, SnapshotBuilder, Verdict};
use flowtable::FlowTable;
use testkit::config::{Config, rule, service};
use testkit::packet::{ACK, Packet, SYN};
use wire::buf::{MemBuf, PacketBuf};
use wire::encap::{DecapConfig, TunnelKind, parse_tunnel};

#[test]
fn a_tcp_flow_is_encapsulated_to_one_backend_and_stays_there() {
    let mut lab = Lab::new("ipip");
    let syn = tcp(CLIENT, 40000, VIP, 80, SYN).frame();
    let (v, out) = lab.run(&syn, 1);
    assert_eq!(v, Verdict::Forward);
    let be = backend_of(&out, &syn);
    assert!(["10.0.1.11", "10.0.1.12", "10.0.1.13"].contains(&be.to_string().as_str()));
    for i in 0..5 {
        let ack = tcp(CLIENT, 40000, VIP, 80, ACK).frame();
        let (v, out) = lab.run(&ack, 2 + i);
        assert_eq!(v, Verdict::Forward);
        assert_eq!(
            backend_of(&out, &ack),
            be,
            "later packets follow the flow entry"
        );
    }
    let c = &lab.worker.counters;
    assert_eq!(
        (c.new_flows, c.flow_hits, c.forwarded, c.total_drops()),
        (1, 5, 6, 0)
    );
    let web = lab
        .snap
        .compiled
        .children
        .iter()
        .position(|ch| ch.name == "web-ag0")
        .expect("child rule");
    assert_eq!(c.children[web].packets, 6);
    assert_eq!(c.children[web].new_flows, 1);
}

#[test]
fn many_clients_spread_over_every_backend() {
    let mut lab = Lab::new("gue");
    let mut seen = std::collections::HashMap::new();
    for port in 0..600u16 {
        let f = tcp(CLIENT, 20000 + port, VIP, 80, SYN).frame();
        let (v, out) = lab.run(&f, 1);
        assert_eq!(v, Verdict::Forward);
        let t = parse_tunnel(&out, &DecapConfig::default()).expect("tunnel");
        assert_eq!(t.kind, TunnelKind::Gue);
        *seen.entry(t.dst_ip).or_insert(0u32) += 1;
    }
    assert_eq!(seen.len(), 3, "{seen:?}");
    for (be, n) in &seen {
        assert!((150..=250).contains(n), "{be} got {n} of 600 new flows");
    }
}

#[test]
fn rule_selection_and_no_open_relay() {
    let mut lab = Lab::new("ipip");
    let cases: Vec<(&str, Vec<u8>, Verdict)> = vec![
        (
            "TCP to a VIP port without a rule",
            tcp(CLIENT, 1, VIP, 81, SYN).frame(),
            Verdict::Drop(DropReason::NoRule),
        ),
        (
            "UDP 53 matches the dns rule",
            udp(CLIENT, 5353, VIP, 53).frame(),
            Verdict::Forward,
        ),
        (
            "UDP to another port",
            udp(CLIENT, 5353, VIP, 54).frame(),
            Verdict::Drop(DropReason::NoRule),
        ),
        (
            "to a non-VIP address: never relayed",
            tcp(CLIENT, 1, [10, 0, 0, 99], 80, SYN).frame(),
            Verdict::Drop(DropReason::NotOurs),
        ),
        (
            "to the balancer itself: the host",
            tcp(CLIENT, 1, [10, 0, 0, 2], 22, SYN).frame(),
            Verdict::ToHost,
        ),
        (
            "ICMP echo to a TCP/UDP VIP: answered by the balancer",
            Packet::echo(CLIENT.into(), VIP.into(), 0, 0)
                .macs(CLIENT_MAC, LB_MAC)
                .frame(),
            Verdict::Reply,
        ),
        (
            "truncated IPv4",
            {
                let p = tcp(CLIENT, 1, VIP, 80, SYN);
                p.eth(&p.ip()[..30])
            },
            Verdict::Drop(DropReason::Malformed),
        ),
        (
            "not IP, not ARP",
            testkit::packet::frame(CLIENT_MAC, LB_MAC, &[], 0x88cc, &[0; 46], 0),
            Verdict::ToHost,
        ),
    ];
    for (name, frame, want) in &cases {
        assert_eq!(lab.run(frame, 1).0, *want, "{name}");
    }
    let c = &lab.worker.counters;
    assert_eq!(c.rx_packets, u64::try_from(cases.len()).expect("a few"));
    assert_eq!(
        c.rx_packets,
        c.forwarded + c.total_drops() + c.to_host + c.replies(),
        "every packet is counted once"
    );
}

#[test]
fn every_delivery_mode_reaches_the_backend() {
    for (mode, kind) in [
        ("ipip", TunnelKind::IpIp),
        ("gre", TunnelKind::Gre),
        ("gue", TunnelKind::Gue),
        ("geneve", TunnelKind::Geneve),
    ] {
        let mut lab = Lab::new(mode);
        let syn = tcp(CLIENT, 40000, VIP, 80, SYN).frame();
        let (v, out) = lab.run(&syn, 1);
        assert_eq!(v, Verdict::Forward, "{mode}");
        let t = parse_tunnel(&out, &DecapConfig::default()).expect("tunnel");
        assert_eq!(t.kind, kind, "{mode}");
        backend_of(&out, &syn);
        if mode == "geneve" {
            assert!(
                t.gateway.cookie.is_some(),
                "the flow cookie rides in the GENEVE options"
            );
        }
    }
    let mut lab = Lab::new("l2dsr");
    let syn = tcp(CLIENT, 40000, VIP, 80, SYN).frame();
    let (v, out) = lab.run(&syn, 1);
    assert_eq!(v, Verdict::Forward);
    let mut want = ROUTER_MAC.to_vec();
    want.extend_from_slice(&LB_MAC);
    want.extend_from_slice(&syn[12..]);
    assert_eq!(out, want, "l2dsr rewrites the MACs and nothing else");
}

#[test]
fn two_services_on_one_vip_never_share_flow_entries() {
    // CLIENT_IP affinity keys flows on (client, VIP) only: the TCP flow of
    // service "web" and the UDP flow of service "dns" from one client must
    // still be separate entries, each reaching its own service's backends.
    let cfg = Config::new()
        .rule(rule("web", &["10.0.0.10"], "TCP", "80", "web"))
        .rule(rule("dns", &["10.0.0.10"], "UDP", "53", "dns"))
        .service(
            service("web", "ipip")
                .str("session_affinity", "CLIENT_IP")
                .child(group_of("a", &["10.0.1.11"])),
        )
        .service(
            service("dns", "ipip")
                .str("session_affinity", "CLIENT_IP")
                .child(group_of("b", &["10.0.2.22"])),
        );
    let mut lab = Lab::with(&cfg, 4096);
    let t = tcp(CLIENT, 40000, VIP, 80, SYN).frame();
    let (_, out) = lab.run(&t, 1);
    assert_eq!(backend_of(&out, &t).to_string(), "10.0.1.11");
    let u = udp(CLIENT, 40000, VIP, 53).frame();
    let (_, out) = lab.run(&u, 1);
    assert_eq!(backend_of(&out, &u).to_string(), "10.0.2.22");
    assert_eq!(lab.worker.counters.new_flows, 2);
}

/// An IPv6 packet to `::ffff:10.0.0.10` is not a packet to the IPv4 VIP
/// 10.0.0.10, and an IPv4-mapped source never shares an IPv4 client's flows.
#[test]
fn ipv4_mapped_ipv6_addresses_never_match_ipv4_vips() {
    let mut lab = dual_lab("drop", true);
    // A SYN (seq 0, window 0) from `src` to `dst`:`dport`.
    let syn6 = |src: &str, dst: Ipv6Addr, dport| {
        Packet::tcp(a6(src).into(), dst.into(), 40000, dport, SYN)
            .seq(0)
            .window(0)
            .macs(CLIENT_MAC, LB_MAC)
            .frame()
    };
    let to_mapped = syn6("2001:db8::7", a6("::ffff:10.0.0.10"), 80);
    assert_eq!(
        lab.run(&to_mapped, 1).0,
        Verdict::Drop(DropReason::BadAddress)
    );
    let from_mapped = syn6("::ffff:192.0.2.7", VIP6, 443);
    assert_eq!(
        lab.run(&from_mapped, 1).0,
        Verdict::Drop(DropReason::BadAddress)
    );
    assert_eq!(lab.worker.counters.dropped(DropReason::BadAddress), 2);
    assert_eq!(lab.worker.counters.forwarded, 0);
    // The same SYN to the real VIPs is forwarded.
    assert_eq!(
        lab.run(&tcp(CLIENT, 40000, VIP, 80, SYN).frame(), 1).0,
        Verdict::Forward
    );
    let real6 = syn6("2001:db8::7", VIP6, 443);
    assert_eq!(lab.run(&real6, 1).0, Verdict::Forward);
}

#[test]
fn ipv6_vips_are_served_over_ipv6_tunnels() {
    let cfg = Config::new()
        .port(uplink(&["fd00::2/64"]))
        .rule(rule("web6", &["fd00::10"], "TCP", "443", "web6"))
        .service(service("web6", "ipip").child(group_of("a", &["fd00:1::11", "fd00:1::12"])));
    let mut builder = SnapshotBuilder::new();
    let mut v6_local = local();
    v6_local.tunnel_src_v6 = Some("fd00:1::2".parse().expect("v6"));
    let snap = builder
        .build(compiled(&cfg), v6_local, |_| EndpointHealth::HEALTHY, 0, 1)
        .expect("snapshot");
    let flows = FlowTable::new(flowtable::Config::with_capacity(64)).expect("table");
    let mut worker = Pipeline::new(1, snap.compiled.children.len());
    // Ethernet/IPv6/TCP SYN [2001:db8::7]:40000 -> [fd00::10]:443.
    let frame = Packet::tcp(CLIENT6.into(), VIP6.into(), 40000, 443, SYN)
        .seq(0)
        .window(0)
        .tcp_checksum(false)
        .macs(CLIENT_MAC, LB_MAC)
        .frame();
    let mut buf = MemBuf::new([0u8; 2048], 128, &frame).expect("fits");
    assert_eq!(worker.process(&snap, &flows, 1, &mut buf), Verdict::Forward);
    let out = buf.data().to_vec();
    let t = parse_tunnel(&out, &DecapConfig::default()).expect("6in6 tunnel");
    assert_eq!(t.kind, TunnelKind::IpIp);
    assert!(t.inner_v6);
    assert!(["fd00:1::11", "fd00:1::12"].contains(&t.dst_ip.to_string().as_str()));
    assert_eq!(
        &out[t.inner_offset..t.inner_offset + t.inner_len],
        &frame[14..]
    );
    // The same VIP over IPv4 tunnels has no source address: counted, not sent.
    let mut no_src = local();
    no_src.tunnel_src_v6 = None;
    let snap = SnapshotBuilder::new()
        .build(compiled(&cfg), no_src, |_| EndpointHealth::HEALTHY, 0, 1)
        .expect("snapshot");
    let mut buf = MemBuf::new([0u8; 2048], 128, &frame).expect("fits");
    let flows = FlowTable::new(flowtable::Config::with_capacity(64)).expect("table");
    assert_eq!(
        worker.process(&snap, &flows, 1, &mut buf),
        Verdict::Drop(DropReason::NoTunnelSource)
    );
}

/// `hash = "maglev-v2"` builds the service's tables with maglev-v2 (the
/// default, v1, is what every other test here runs).
#[test]
fn a_service_may_choose_maglev_v2() {
    let table = |hash: &str| {
        let lab = Lab::with(&with_web(web("gue", &THREE).str("hash", hash), "53"), 64);
        lab.snap.services[0].regions[0].tables[0].table.clone()
    };
    let (v1, v2) = (table("maglev-v1"), table("maglev-v2"));
    assert_eq!(v1.algorithm(), maglev::Algorithm::V1);
    assert_eq!(v2.algorithm(), maglev::Algorithm::V2);
    let eps: Vec<maglev::Endpoint> = v2
        .endpoint_ids()
        .iter()
        .map(|&id| maglev::Endpoint { id, weight: 1 })
        .collect();
    let expected = maglev::MaglevTable::build_v2(v2.size() as u32, &eps).expect("v2 table");
    assert_eq!(v2.slots(), expected.slots());
    assert_ne!(v1.slots(), v2.slots());
    let bad = with_web(web("gue", &THREE).str("hash", "maglev-v3"), "53").build();
    let err = config::load_str("t.toml", &bad, &config::Env::default())
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("maglev-v3"), "{err}");
}
