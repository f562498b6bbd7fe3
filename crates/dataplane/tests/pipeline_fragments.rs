//! The pipeline's ICMP errors and fragments (M13): errors follow the flow
//! they quote, fragments of a datagram share a backend, and fragments take
//! only rules that accept every port.
//!
//! The pipeline end to end on in-memory buffers (the lab in `common`): a
//! compiled configuration, a snapshot, a real flow table, crafted frames
//! in, verdicts and bytes out.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly
#![allow(clippy::cast_possible_truncation)] // test values are small

mod common;

use std::net::{IpAddr, Ipv4Addr};

use common::*;
use dataplane::{DropReason, Verdict};
use testkit::packet::{ACK, Packet, SYN};

#[test]
fn icmp_fragmentation_needed_follows_the_flow_it_quotes() {
    let mut lab = Lab::new("ipip");
    for port in [40000u16, 40001, 40002, 40003, 40004, 40005] {
        let syn = tcp(CLIENT, port, VIP, 80, SYN).frame();
        let (_, out) = lab.run(&syn, 1);
        let be = backend_of(&out, &syn);
        // A router on the way back to the client reports "fragmentation
        // needed" about the backend's VIP:80 -> client packet.
        let quoted = tcp(VIP, 80, CLIENT, port, ACK).ip();
        let router = Ipv4Addr::new(198, 51, 100, 1);
        let err = Packet::icmp(router.into(), VIP.into(), 3, 4, 1500)
            .payload(&quoted[..28])
            .macs(CLIENT_MAC, LB_MAC)
            .frame();
        let (v, out) = lab.run(&err, 2);
        assert_eq!(v, Verdict::Forward, "port {port}");
        assert_eq!(
            backend_of(&out, &err),
            be,
            "the error reaches the flow's backend"
        );
    }
    assert_eq!(
        lab.worker.counters.new_flows, 6,
        "ICMP errors create no flow entries"
    );
}

/// The two fragments of a UDP datagram (5000 -> 53, no checksum) with IPv4
/// identification `id`: the UDP header and 8 bytes, then 8 bytes at offset 16.
fn udp_fragments(id: u16) -> Vec<Vec<u8>> {
    let payload = [[0xaa; 8], [0xbb; 8]].concat();
    Packet::udp(CLIENT.into(), VIP.into(), 5000, 53)
        .payload(&payload)
        .udp_checksum(false)
        .ident(u32::from(id))
        .macs(CLIENT_MAC, LB_MAC)
        .fragments(16)
}

#[test]
fn all_fragments_of_a_datagram_reach_one_backend_in_any_order() {
    // Fragments match only all-port rules (M13): UDP on every port here.
    let cfg = with_web(web("ipip", &THREE), "all");
    let mut lab = Lab::with(&cfg, 4096);
    for id in 0..40u16 {
        // First fragment: UDP header (port 53) + 8 bytes; second: the rest.
        let frags = udp_fragments(1000 + id);
        let (first, second) = (&frags[0], &frags[1]);
        let (order_a, order_b) = if id % 2 == 0 {
            (first, second)
        } else {
            (second, first)
        };
        let (va, out_a) = lab.run(order_a, 1);
        let (vb, out_b) = lab.run(order_b, 1);
        assert_eq!(
            (va, vb),
            (Verdict::Forward, Verdict::Forward),
            "datagram {id}"
        );
        assert_eq!(
            backend_of(&out_a, order_a),
            backend_of(&out_b, order_b),
            "datagram {id}: one backend for both fragments"
        );
    }
    // With only `UDP 53` on the VIP no fragment can be placed: it could
    // belong to any port.
    let mut lab = Lab::new("ipip");
    let frag = &udp_fragments(7)[1];
    assert_eq!(
        lab.run(frag, 1).0,
        Verdict::Drop(DropReason::FragmentNoRule)
    );
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Piece {
    /// An unfragmented packet.
    Whole,
    /// A first fragment (offset 0, more fragments): the TCP header and 4
    /// bytes.
    First,
    /// A later fragment (offset 24 bytes, last): no TCP header.
    Later,
    /// An IPv6 atomic fragment (offset 0, M = 0; RFC 6946): a whole packet.
    Atomic,
}

/// A TCP SYN from the client to the VIP's `port`, cut as `piece` says
/// (checksum left zero; IPv6 fragments with identification 0x0badcafe).
fn tcp_piece(v6: bool, piece: Piece, port: u16) -> Vec<u8> {
    let (src, dst, ident): (IpAddr, IpAddr, u32) = if v6 {
        (CLIENT6.into(), VIP6.into(), 0x0bad_cafe)
    } else {
        assert_ne!(piece, Piece::Atomic, "IPv4 has no atomic fragments");
        (CLIENT.into(), VIP.into(), 1)
    };
    let syn = Packet::tcp(src, dst, 40000, port, SYN)
        .seq(0)
        .window(0)
        .tcp_checksum(false)
        .ident(ident)
        .macs(CLIENT_MAC, LB_MAC);
    // With 12 bytes of data, in 24-byte pieces: [header, 4 bytes] then
    // [8 bytes] at offset 24.
    let cut = || {
        syn.clone()
            .payload(&[[0xaa; 4].as_slice(), &[0xbb; 8]].concat())
            .fragments(24)
    };
    match piece {
        Piece::Whole => syn.frame(),
        Piece::Atomic => syn.fragments(24).remove(0),
        Piece::First => cut().remove(0),
        Piece::Later => cut().remove(1),
    }
}

/// M13: a real fragment (first or later, IPv4 or IPv6) can never prove
/// its ports, so it matches only a TCP `all` rule or `L3_DEFAULT`; an IPv6
/// atomic fragment is a whole packet and is classified with its ports. The
/// hole this closes: a fragmented SYN to port 22 reached the backends of a
/// VIP whose only rule is `TCP 80`.
#[test]
fn fragments_take_only_rules_that_accept_every_port() {
    use Piece::*;
    let no_rule = Err(DropReason::NoRule);
    let frag_drop = Err(DropReason::FragmentNoRule);
    // (rules, IPv6?, piece, destination port, expected child rule or drop)
    type Expect = Result<&'static str, DropReason>;
    let cases: Vec<(&str, bool, Piece, u16, Expect)> = vec![
        // Only `TCP 80`: whole packets by their port, fragments never.
        ("80", false, Whole, 80, Ok("t4")),
        ("80", false, Whole, 22, no_rule),
        ("80", false, First, 80, frag_drop),
        ("80", false, First, 22, frag_drop),
        ("80", false, Later, 22, frag_drop),
        ("80", true, Whole, 80, Ok("t6")),
        ("80", true, Whole, 22, no_rule),
        ("80", true, First, 80, frag_drop),
        ("80", true, First, 22, frag_drop),
        ("80", true, Later, 22, frag_drop),
        ("80", true, Atomic, 80, Ok("t6")),
        ("80", true, Atomic, 22, no_rule),
        // `TCP all`: every piece, to the all-port rule.
        ("all", false, Whole, 22, Ok("t4")),
        ("all", false, First, 22, Ok("t4")),
        ("all", false, Later, 22, Ok("t4")),
        ("all", true, First, 22, Ok("t6")),
        ("all", true, Later, 22, Ok("t6")),
        ("all", true, Atomic, 22, Ok("t6")),
        // `TCP 80` beside `L3_DEFAULT`: fragments (even of port 80) to
        // L3_DEFAULT, so that every fragment of a datagram takes one rule.
        ("80+l3", false, Whole, 80, Ok("t4")),
        ("80+l3", false, Whole, 22, Ok("l3v4")),
        ("80+l3", false, First, 80, Ok("l3v4")),
        ("80+l3", false, Later, 80, Ok("l3v4")),
        ("80+l3", true, First, 80, Ok("l3v6")),
        ("80+l3", true, Later, 80, Ok("l3v6")),
        ("80+l3", true, Atomic, 80, Ok("t6")),
        ("80+l3", true, Atomic, 22, Ok("l3v6")),
    ];
    for (rules, v6, piece, port, expect) in cases {
        let cfg = match rules {
            "80" => fragment_config("80", false),
            "all" => fragment_config("all", false),
            _ => fragment_config("80", true),
        };
        let mut lab = Lab::with(&cfg, 4096);
        lab.snap.local.tunnel_src_v6 = Some("fd00:1::2".parse().expect("v6"));
        let f = tcp_piece(v6, piece, port);
        let (v, _) = lab.run(&f, 1);
        let what = format!(
            "rules {rules}, IPv{}, {piece:?} to port {port}",
            if v6 { 6 } else { 4 }
        );
        match expect {
            Ok(rule) => {
                assert_eq!(v, Verdict::Forward, "{what}");
                let c = child(&lab, &format!("{rule}-ag0"));
                assert_eq!(
                    lab.worker.counters.children[c].packets, 1,
                    "{what}: taken by {rule}"
                );
            }
            Err(reason) => {
                assert_eq!(v, Verdict::Drop(reason), "{what}");
                assert_eq!(lab.worker.counters.dropped(reason), 1, "{what}: counted");
                assert_eq!(lab.worker.counters.forwarded, 0, "{what}");
            }
        }
    }
}
