//! Replies built in place: ARP and neighbor advertisements for our
//! addresses (docs/requirements.md §1), echo replies from VIPs (M51) and TCP
//! resets for services without a backend (M14). The expected frames are
//! built by the test kit (checked against scapy), not by the code under
//! test.
//!
//! On the pipeline's in-memory lab (`common`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly
#![allow(clippy::cast_possible_truncation)] // test values are small

mod common;

use std::net::{IpAddr, Ipv6Addr};

use common::*;
use dataplane::{DropReason, Verdict};
use testkit::config::{Config, rule};
use testkit::packet::{ACK, FIN, PSH, Packet, RST, SYN, arp_request, v6};

#[test]
fn arp_requests_for_vips_are_answered_in_place() {
    let mut lab = Lab::new("ipip");
    let req = arp_request(CLIENT_MAC, CLIENT, VIP);
    let (v, out) = lab.run(&req, 1);
    assert_eq!(v, Verdict::Reply);
    assert_eq!(&out[0..6], &CLIENT_MAC);
    assert_eq!(&out[6..12], &LB_MAC);
    assert_eq!(&out[20..22], &[0, 2], "an ARP reply");
    assert_eq!(&out[22..28], &LB_MAC, "sender hardware address: ours");
    assert_eq!(&out[28..32], &VIP.octets(), "for the VIP");
    assert_eq!(&out[32..38], &CLIENT_MAC);
    assert_eq!(&out[38..42], &CLIENT.octets());
    let mut other = req.clone();
    other[38..42].copy_from_slice(&[10, 0, 0, 99]);
    assert_eq!(
        lab.run(&other, 1).0,
        Verdict::ToHost,
        "ARP for someone else goes to the host"
    );
}

/// An echo request from the client to `dst`.
fn ping(dst: impl Into<IpAddr>, seq: u16) -> Vec<u8> {
    let dst = dst.into();
    let src: IpAddr = if dst.is_ipv4() {
        CLIENT.into()
    } else {
        CLIENT6.into()
    };
    Packet::echo(src, dst, 0x4242, seq)
        .payload(b"zone probe")
        .macs(CLIENT_MAC, LB_MAC)
        .frame()
}

/// Zone health services ping VIPs (M51): a VIP whose rules take only TCP
/// or UDP answers echo requests itself, rate-limited and counted; a rule
/// can turn it off, and an `L3_DEFAULT` rule forwards ICMP as before.
#[test]
fn vips_of_tcp_and_udp_rules_answer_ping_themselves() {
    let mut lab = Lab::new("gue");
    let req = ping(VIP, 1);
    let (v, out) = lab.run(&req, 1);
    assert_eq!(v, Verdict::Reply);
    assert_eq!((&out[0..6], &out[6..12]), (&CLIENT_MAC[..], &LB_MAC[..]));
    let ip = &out[14..34];
    assert_eq!(
        (&ip[12..16], &ip[16..20]),
        (&VIP.octets()[..], &CLIENT.octets()[..])
    );
    assert_eq!(out[34], 0, "an echo reply");
    assert_eq!(
        &out[38..],
        &req[38..],
        "identifier, sequence and data echoed"
    );
    assert_eq!(lab.worker.counters.echo_replies, 1);
    assert_eq!(
        lab.run(&ping([10, 0, 0, 99], 2), 1).0,
        Verdict::Drop(DropReason::NotOurs),
        "never for an address that is not a VIP"
    );

    // IPv6 VIPs too; with L3_DEFAULT the backends get ICMP, as before.
    let mut lab = Lab::with(&fragment_config("80", false), 4096);
    let (v, out) = lab.run(&ping(VIP6, 1), 1);
    assert_eq!(v, Verdict::Reply);
    assert_eq!(out[54], 129, "an ICMPv6 echo reply");
    let mut lab = Lab::with(&fragment_config("80", true), 4096);
    assert_eq!(lab.run(&ping(VIP, 1), 1).0, Verdict::Forward);
    // (This lab's node has no IPv6 tunnel source: taken by the rule, not answered.)
    assert_eq!(
        lab.run(&ping(VIP6, 1), 1).0,
        Verdict::Drop(DropReason::NoTunnelSource)
    );

    // One rule of the VIP saying no is enough.
    let cfg = Config::new()
        .port(uplink(&["10.0.0.2/24"]))
        .rule(rule("web", &["10.0.0.10"], "TCP", "80", "web"))
        .rule(rule("dns", &["10.0.0.10"], "UDP", "53", "web").set("answer_ping", false))
        .service(web("gue", &THREE));
    let mut lab = Lab::with(&cfg, 4096);
    assert_eq!(
        lab.run(&ping(VIP, 1), 1).0,
        Verdict::Drop(DropReason::NoRule)
    );

    // The budget per worker and tick (one tick a second here).
    let mut lab = Lab::with(&config("gue", &THREE).dataplane("icmp_echo_rate", 2), 4096);
    let got: Vec<Verdict> = (0..3).map(|i| lab.run(&ping(VIP, i), 5).0).collect();
    assert_eq!(
        got,
        [
            Verdict::Reply,
            Verdict::Reply,
            Verdict::Drop(DropReason::EchoRateLimited)
        ]
    );
    assert_eq!(
        lab.run(&ping(VIP, 4), 6).0,
        Verdict::Reply,
        "a new tick, a new budget"
    );
    let mut lab = Lab::with(&config("gue", &THREE).dataplane("icmp_echo_rate", 0), 4096);
    assert_eq!(
        lab.run(&ping(VIP, 1), 1).0,
        Verdict::Drop(DropReason::EchoRateLimited),
        "0: never answered"
    );

    // A corrupted request is dropped and counted, not answered.
    let mut bad = ping(VIP, 9);
    *bad.last_mut().expect("byte") ^= 0xff;
    assert_eq!(
        lab.run(&bad, 1).0,
        Verdict::Drop(DropReason::EchoRateLimited)
    );
    let mut lab = Lab::new("gue");
    assert_eq!(
        lab.run(&bad, 1).0,
        Verdict::Drop(DropReason::EchoUnanswerable)
    );
}

/// `p` with an 802.1Q tag `vlan`, if any.
fn tagged(p: Packet, vlan: Option<u16>) -> Packet {
    match vlan {
        Some(vid) => p.vlan(0x8100, vid),
        None => p,
    }
}

/// An ICMPv6 neighbor discovery message (hop limit 255): type, a flags
/// byte (the top of the first word), the target, and an optional link-layer
/// address option (kind, MAC).
fn nd(
    (src, dst): (Ipv6Addr, Ipv6Addr),
    ty: u8,
    flags: u8,
    target: Ipv6Addr,
    ll: Option<(u8, [u8; 6])>,
) -> Packet {
    let mut body = target.octets().to_vec();
    if let Some((kind, mac)) = ll {
        body.extend_from_slice(&[kind, 1]);
        body.extend_from_slice(&mac);
    }
    Packet::icmp(src.into(), dst.into(), ty, 0, u32::from(flags) << 24)
        .payload(&body)
        .ttl(255)
}

fn solicited_node(target: Ipv6Addr) -> Ipv6Addr {
    let mut a = a6("ff02::1:ff00:0").octets();
    a[13..].copy_from_slice(&target.octets()[13..]);
    a.into()
}

/// A neighbor solicitation frame for `target` from `src` to `dst`.
fn ns(
    src: Ipv6Addr,
    dst: Ipv6Addr,
    target: Ipv6Addr,
    sll: bool,
    hop: u8,
    vlan: Option<u16>,
) -> Vec<u8> {
    let ll = sll.then_some((1, CLIENT_MAC));
    let d = dst.octets();
    let mac = if d[0] == 0xff {
        [0x33, 0x33, d[12], d[13], d[14], d[15]]
    } else {
        LB_MAC
    };
    let p = nd((src, dst), 135, 0, target, ll).ttl(hop);
    tagged(p.macs(CLIENT_MAC, mac), vlan).frame()
}

/// The advertisement answering a solicitation for `target`: to `dst`
/// (solicited) or all nodes (not), from our MAC with our link-layer address.
fn na(target: Ipv6Addr, dst: Option<(Ipv6Addr, [u8; 6])>) -> Vec<u8> {
    let (ip_dst, mac, flags) = match dst {
        Some((a, m)) => (a, m, 0x60),
        None => (a6("ff02::1"), [0x33, 0x33, 0, 0, 0, 1], 0x20),
    };
    nd((target, ip_dst), 136, flags, target, Some((2, LB_MAC)))
        .macs(LB_MAC, mac)
        .frame()
}

/// A fixture: a frame in, the verdict, and the reply's exact bytes if any.
type Case = (&'static str, Vec<u8>, Verdict, Option<Vec<u8>>);

#[test]
fn neighbor_solicitations_for_our_ipv6_addresses_are_answered_in_place() {
    let (vip, own, client) = (VIP6, OWN6, CLIENT6);
    let router = a6("fd00::1");
    let mut bad_sum = ns(client, solicited_node(vip), vip, true, 255, None);
    *bad_sum.last_mut().expect("byte") ^= 0xff;
    let rs = Packet::icmp(client.into(), v6("ff02::2"), 133, 0, 0)
        .ttl(255)
        .macs(CLIENT_MAC, [0x33, 0x33, 0, 0, 0, 2])
        .frame();
    let ra = Packet::icmp(router.into(), v6("ff02::1"), 134, 0, 0x4000_0708)
        .payload(&[0; 8])
        .ttl(255)
        .macs(ROUTER_MAC, [0x33, 0x33, 0, 0, 0, 1])
        .frame();
    let na_in = nd((router, own), 136, 0x60, router, Some((2, ROUTER_MAC)))
        .macs(ROUTER_MAC, LB_MAC)
        .frame();
    let echo_all = Packet::echo(client.into(), v6("ff02::1"), 1, 1)
        .macs(CLIENT_MAC, [0x33, 0x33, 0, 0, 0, 1])
        .frame();
    let cases: Vec<Case> = vec![
        (
            "NS for the v6 VIP to its solicited-node group",
            ns(client, solicited_node(vip), vip, true, 255, None),
            Verdict::Reply,
            Some(na(vip, Some((client, CLIENT_MAC)))),
        ),
        (
            "NS for our own v6 address: answered",
            ns(client, solicited_node(own), own, true, 255, None),
            Verdict::Reply,
            Some(na(own, Some((client, CLIENT_MAC)))),
        ),
        (
            "NS for our own v6 address, VLAN-tagged: the port is untagged (M55)",
            ns(client, solicited_node(own), own, true, 255, Some(42)),
            Verdict::Drop(DropReason::VlanUntaggedPort),
            None,
        ),
        (
            "unicast reachability probe without a source link-layer option",
            ns(client, vip, vip, false, 255, None),
            Verdict::Reply,
            Some(na(vip, Some((client, CLIENT_MAC)))),
        ),
        (
            "duplicate address detection from ::, answered to all nodes",
            ns(a6("::"), solicited_node(vip), vip, false, 255, None),
            Verdict::Reply,
            Some(na(vip, None)),
        ),
        (
            "NS for another host's address: the host's kernel decides",
            ns(client, solicited_node(router), router, true, 255, None),
            Verdict::ToHost,
            None,
        ),
        (
            "NS that crossed a router (hop limit 64)",
            ns(client, solicited_node(vip), vip, true, 64, None),
            Verdict::Drop(DropReason::Malformed),
            None,
        ),
        (
            "NS with a bad checksum",
            bad_sum,
            Verdict::Drop(DropReason::Malformed),
            None,
        ),
        (
            "NS for a multicast target",
            ns(client, vip, a6("ff02::1"), true, 255, None),
            Verdict::Drop(DropReason::Malformed),
            None,
        ),
        ("router solicitation", rs, Verdict::ToHost, None),
        ("router advertisement", ra, Verdict::ToHost, None),
        (
            "neighbor advertisement for the host",
            na_in,
            Verdict::ToHost,
            None,
        ),
        (
            "echo request to all nodes: a multicast frame that is no neighbour discovery (M55)",
            echo_all,
            Verdict::Drop(DropReason::L2ForeignDst),
            None,
        ),
    ];
    let mut lab = dual_lab("drop", true);
    for (name, frame, want, reply) in &cases {
        let (v, out) = lab.run(frame, 1);
        assert_eq!(v, *want, "{name}");
        if let Some(reply) = reply {
            assert_eq!(&out, reply, "{name}");
        }
    }
    let c = &lab.worker.counters;
    assert_eq!((c.nd_replies, c.arp_replies, c.forwarded), (4, 0, 0));
    assert_eq!(c.dropped(DropReason::Malformed), 3);
    assert_eq!(c.dropped(DropReason::VlanUntaggedPort), 1);
    assert_eq!(c.dropped(DropReason::L2ForeignDst), 1);
    assert_eq!(
        c.rx_packets,
        c.forwarded + c.total_drops() + c.to_host + c.replies(),
        "every packet is counted once"
    );
}

/// A TCP segment (window 8192) with sequence and acknowledgment numbers and
/// a payload, from the client's MAC to ours.
fn segment(
    (src, sport): (impl Into<IpAddr>, u16),
    (dst, dport): (impl Into<IpAddr>, u16),
    flags: u8,
    seq: u32,
    ack: u32,
    payload: &[u8],
) -> Packet {
    Packet::tcp(src.into(), dst.into(), sport, dport, flags)
        .seq(seq)
        .ack(ack)
        .window(8192)
        .payload(payload)
        .macs(CLIENT_MAC, LB_MAC)
}

/// The reset we expect, from `vip`:`vport` to `client`:`cport`: IPv4 with
/// ID 0, DF, TTL 64 or IPv6 with hop limit 64; window 0, no options.
fn expected_reset(
    (vip, vport): (impl Into<IpAddr>, u16),
    (client, cport): (impl Into<IpAddr>, u16),
    flags: u8,
    seq: u32,
    ack: u32,
) -> Vec<u8> {
    Packet::tcp(vip.into(), client.into(), vport, cport, flags)
        .seq(seq)
        .ack(ack)
        .window(0)
        .ident(0)
        .macs(LB_MAC, CLIENT_MAC)
        .frame()
}

#[test]
fn without_backends_tcp_is_answered_with_a_reset_when_the_service_says_so() {
    let (vip6, client6) = (VIP6, CLIENT6);
    let tagged = segment((CLIENT, 40003), (VIP, 80), SYN, 7, 0, &[])
        .vlan(0x8100, 300)
        .frame();
    let untagged = segment((CLIENT, 40003), (VIP, 80), SYN, 7, 0, &[]).frame();
    let mut bad_sum = segment((CLIENT, 40004), (VIP, 80), SYN, 7, 0, b"x").frame();
    *bad_sum.last_mut().expect("byte") ^= 0xff;
    let cases: Vec<Case> = vec![
        (
            "SYN over IPv4: RST|ACK acknowledging the SYN",
            segment((CLIENT, 40000), (VIP, 80), SYN, 1000, 0, &[]).frame(),
            Verdict::Reply,
            Some(expected_reset(
                (VIP, 80),
                (CLIENT, 40000),
                RST | ACK,
                0,
                1001,
            )),
        ),
        (
            "ACK with data over IPv4: RST at the acknowledged sequence number",
            segment(
                (CLIENT, 40001),
                (VIP, 80),
                ACK | PSH,
                5000,
                0x8000_0001,
                b"GET / HTTP/1.1\r\n\r\n",
            )
            .frame(),
            Verdict::Reply,
            Some(expected_reset(
                (VIP, 80),
                (CLIENT, 40001),
                RST,
                0x8000_0001,
                0,
            )),
        ),
        (
            "FIN with data and no ACK: payload and FIN acknowledged, wrapping",
            segment((CLIENT, 40002), (VIP, 80), FIN, u32::MAX - 1, 0, b"bye").frame(),
            Verdict::Reply,
            Some(expected_reset((VIP, 80), (CLIENT, 40002), RST | ACK, 0, 2)),
        ),
        (
            "VLAN-tagged SYN: the port is untagged, never answered (M55)",
            tagged,
            Verdict::Drop(DropReason::VlanUntaggedPort),
            None,
        ),
        (
            "the same SYN untagged",
            untagged,
            Verdict::Reply,
            Some(expected_reset((VIP, 80), (CLIENT, 40003), RST | ACK, 0, 8)),
        ),
        (
            "SYN over IPv6",
            segment((client6, 50000), (vip6, 443), SYN, 0xdead_beef, 0, &[]).frame(),
            Verdict::Reply,
            Some(expected_reset(
                (vip6, 443),
                (client6, 50000),
                RST | ACK,
                0,
                0xdead_bef0,
            )),
        ),
        (
            "ACK over IPv6",
            segment((client6, 50001), (vip6, 443), ACK, 1, 99, b"data").frame(),
            Verdict::Reply,
            Some(expected_reset((vip6, 443), (client6, 50001), RST, 99, 0)),
        ),
        (
            "a reset is never answered",
            segment((CLIENT, 40005), (VIP, 80), RST | ACK, 1, 2, &[]).frame(),
            Verdict::Drop(DropReason::NoBackend),
            None,
        ),
        (
            "UDP is dropped",
            udp(CLIENT, 5353, VIP, 53).frame(),
            Verdict::Drop(DropReason::NoBackend),
            None,
        ),
        (
            "a segment whose checksum fails is malformed",
            bad_sum,
            Verdict::Drop(DropReason::Malformed),
            None,
        ),
    ];
    let mut lab = dual_lab("reset", false);
    for (name, frame, want, reply) in &cases {
        let (v, out) = lab.run(frame, 2);
        assert_eq!(v, *want, "{name}");
        if let Some(reply) = reply {
            assert_eq!(&out, reply, "{name}");
        }
    }
    let c = &lab.worker.counters;
    assert_eq!(c.no_backend_resets, 6);
    assert_eq!(c.dropped(DropReason::NoBackend), 2);
    assert_eq!(
        c.no_backend(),
        8,
        "every match without a backend is counted"
    );
    assert_eq!((c.forwarded, c.new_flows), (0, 0));
    assert_eq!(
        c.rx_packets,
        c.forwarded + c.total_drops() + c.to_host + c.replies()
    );
    // Child rules count every one of their packets that reached no backend,
    // answered or not.
    assert_eq!(c.children[child(&lab, "web-ag0")].drops, 6);
    assert_eq!(
        c.children[child(&lab, "web-ag0")].drop_reasons[DropReason::NoBackend as usize],
        6,
        "a reset answer counts under no_backend"
    );
    assert_eq!(c.children[child(&lab, "web6-ag0")].drops, 2);
    assert_eq!(c.children[child(&lab, "dns-ag0")].drops, 1);
}

#[test]
fn without_backends_the_default_action_drops_tcp_too() {
    let (vip6, client6) = (VIP6, CLIENT6);
    let mut lab = dual_lab("drop", false);
    let cases = [
        segment((CLIENT, 40000), (VIP, 80), SYN, 1000, 0, &[]).frame(),
        segment((CLIENT, 40001), (VIP, 80), ACK, 1000, 5, b"x").frame(),
        segment((client6, 50000), (vip6, 443), SYN, 1, 0, &[]).frame(),
    ];
    for f in &cases {
        assert_eq!(lab.run(f, 2).0, Verdict::Drop(DropReason::NoBackend));
    }
    let c = &lab.worker.counters;
    assert_eq!(
        (c.no_backend_resets, c.dropped(DropReason::NoBackend)),
        (0, 3)
    );
    // With healthy backends the reset action changes nothing.
    let mut lab = dual_lab("reset", true);
    for f in &cases {
        assert_eq!(lab.run(f, 2).0, Verdict::Forward);
    }
    assert_eq!(lab.worker.counters.no_backend_resets, 0);
}
