//! The pipeline and its flow table (M10, M15): a full table forwards
//! statelessly, floods never displace established flows, entries closed by
//! a FIN are replaced, and flows sharing one public hash are spread.
//!
//! The pipeline end to end on in-memory buffers (the lab in `common`): a
//! compiled configuration, a snapshot, a real flow table, crafted frames
//! in, verdicts and bytes out.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly
#![allow(clippy::cast_possible_truncation)] // test values are small

mod common;

use std::net::{Ipv4Addr, Ipv6Addr};

use common::*;
use dataplane::Verdict;
use flowtable::FlowTable;
use testkit::packet::{ACK, SYN};
use wire::encap::{DecapConfig, parse_tunnel};

/// Address `i` of the /16 `net` (`i` < 65536).
fn host(net: [u8; 2], i: u32) -> Ipv4Addr {
    let [a, b] = net;
    Ipv4Addr::from(u32::from_be_bytes([a, b, 0, 0]) | i)
}

/// A flow forwarded without an entry (the table is full) keeps one GENEVE
/// flow cookie for all its packets.
#[test]
fn a_stateless_flow_keeps_one_cookie() {
    let mut lab = Lab::with(&config("geneve", &THREE), 16);
    for port in 0..100u16 {
        let f = udp(CLIENT, 10000 + port, VIP, 53).frame();
        lab.run(&f, 1);
        lab.run(&f, 2);
    }
    let before = lab.worker.counters.stateless;
    let cookie = |out: &[u8]| {
        let t = parse_tunnel(out, &DecapConfig::default()).expect("geneve");
        t.gateway.cookie.expect("cookie option")
    };
    let mut cookies = Vec::new();
    for _ in 0..5 {
        let f = udp(CLIENT, 20000, VIP, 53).frame();
        let (_, out) = lab.run(&f, 2);
        cookies.push(cookie(&out));
    }
    assert_eq!(
        lab.worker.counters.stateless - before,
        5,
        "the table is full"
    );
    assert!(cookies.iter().all(|c| *c == cookies[0]), "{cookies:x?}");
    // Another flow gets another cookie.
    let (_, out) = lab.run(&udp(CLIENT, 20001, VIP, 53).frame(), 2);
    assert_ne!(cookie(&out), cookies[0]);
}

#[test]
fn a_full_flow_table_still_forwards_statelessly_and_counts_it() {
    let mut lab = Lab::with(&config("ipip", &THREE), 16);
    for port in 0..400u16 {
        // Two packets each, a second apart: the second confirms the entry
        // the first made, so the table fills with entries no new flow may
        // displace.
        let f = udp(CLIENT, 10000 + port, VIP, 53).frame();
        assert_eq!(lab.run(&f, 1).0, Verdict::Forward);
        assert_eq!(lab.run(&f, 2).0, Verdict::Forward);
    }
    let c = &lab.worker.counters;
    assert!(
        c.stateless > 0,
        "a 16-entry table cannot hold 400 UDP flows"
    );
    // A flow is either in the table (one new entry, then a hit) or not
    // (both packets stateless).
    assert_eq!(c.new_flows + c.stateless / 2, 400);
    assert_eq!(c.flow_hits, c.new_flows);
}

/// M15: a flood of spoofed ACKs or one-packet UDP flows neither evicts
/// nor crowds out established flows: its entries are unconfirmed (evictable,
/// short-lived), and each worker creates at most its new-entry budget of
/// entries per tick; the rest is forwarded statelessly and counted.
#[test]
fn spoofed_floods_never_displace_established_flows() {
    let cfg = config("ipip", &THREE).dataplane("new_flow_budget", 100);
    let mut lab = Lab::with(&cfg, 64);
    // 40 real connections: handshake, then data a second later (which
    // confirms their entries).
    let mut real = Vec::new();
    for port in 30000..30040u16 {
        let syn = tcp(CLIENT, port, VIP, 80, SYN).frame();
        let (_, out) = lab.run(&syn, 1);
        lab.run(&tcp(CLIENT, port, VIP, 80, ACK).frame(), 1);
        real.push((port, backend_of(&out, &syn)));
    }
    for (port, _) in &real {
        lab.run(&tcp(CLIENT, *port, VIP, 80, ACK).frame(), 2);
    }
    let before = lab.worker.counters.clone();
    assert_eq!(before.new_flows, 40);
    // Tick 2: 5,000 spoofed ACKs and one-packet UDP flows from 5,000 sources.
    for i in 0..5000u32 {
        let src = host([198, 51], i);
        let f = if i % 2 == 0 {
            let sport = u16::try_from(1024 + i % 60000).expect("a port");
            tcp(src, sport, VIP, 80, ACK).frame()
        } else {
            udp(src, 2048, VIP, 53).frame()
        };
        assert_eq!(lab.run(&f, 2).0, Verdict::Forward, "flood packet {i}");
    }
    let c = lab.worker.counters.clone();
    let flood_entries = c.new_flows - before.new_flows;
    assert_eq!(flood_entries, 100, "the budget of tick 2");
    assert_eq!(c.over_budget, 4900);
    // Every real connection still follows its entry to its backend.
    for (port, backend) in &real {
        let ack = tcp(CLIENT, *port, VIP, 80, ACK).frame();
        let (_, out) = lab.run(&ack, 3);
        assert_eq!(backend_of(&out, &ack), *backend, "port {port}");
    }
    let c = lab.worker.counters.clone();
    assert_eq!(c.flow_hits - before.flow_hits, 40, "all 40 were hits");
    assert_eq!(c.flows_rescheduled, 0);
    // Next tick the budget is back; the flood's entries (unconfirmed) are
    // displaced by new flows, the established ones never are.
    for i in 0..3000u32 {
        let src = host([203, 0], i);
        lab.run(&tcp(src, 4000, VIP, 80, ACK).frame(), 4 + i / 100);
    }
    for (port, backend) in &real {
        let ack = tcp(CLIENT, *port, VIP, 80, ACK).frame();
        let (_, out) = lab.run(&ack, 40);
        assert_eq!(
            backend_of(&out, &ack),
            *backend,
            "port {port} after the second flood"
        );
    }
    assert_eq!(lab.worker.counters.flow_hits - c.flow_hits, 40);
    // Unconfirmed entries live only the first-packet timeout (10 s): a sweep
    // at tick 100 leaves exactly the 40 established connections.
    assert_eq!(lab.flows.sweep(100, usize::MAX).live, 40);
}

/// M15: spoofed flows that send their packets together (two ACKs, a
/// SYN and its ACK) do not confirm their entries — only a packet in a later
/// second does — so such a flood cannot fill the table with protected
/// entries. Flows opened by a SYN have a new-entry budget of their own, so
/// connections opened during a flood of spoofed ACKs get entries.
#[test]
fn floods_of_packet_pairs_confirm_nothing_and_real_syns_get_entries() {
    let cfg = config("ipip", &THREE).dataplane("new_flow_budget", 100);
    // Room for twice the real connections: at a load near the table's
    // capacity, a bucket pair full of their half-open entries could lose one
    // to a spoofed packet by placement alone.
    let mut lab = Lab::with(&cfg, 128);
    // Tick 1: 1,000 spoofed flows of two ACKs, and 1,000 of SYN + ACK.
    for i in 0..1000u32 {
        let src = host([198, 51], i);
        let ack = tcp(src, 1024, VIP, 80, ACK).frame();
        lab.run(&ack, 1);
        lab.run(&ack, 1);
        let src = host([203, 0], i);
        lab.run(&tcp(src, 1024, VIP, 80, SYN).frame(), 1);
        lab.run(&tcp(src, 1024, VIP, 80, ACK).frame(), 1);
    }
    // Every entry is still displaceable: 64 real connections opened at
    // tick 2, beside a fresh flood of spoofed ACKs that spends the budget,
    // all get entries.
    let before = lab.worker.counters.clone();
    for i in 0..64u16 {
        for j in 0..20u16 {
            let src = host([198, 18], u32::from((i >> 2) << 8 | (j + 20 * (i & 3))));
            lab.run(&tcp(src, 4000, VIP, 80, ACK).frame(), 2);
        }
        lab.run(&tcp(CLIENT, 30000 + i, VIP, 80, SYN).frame(), 2);
    }
    let c = lab.worker.counters.clone();
    assert!(
        c.over_budget > before.over_budget,
        "the flood spent the budget"
    );
    // Each real connection's next packets follow an entry.
    for i in 0..64u16 {
        lab.run(&tcp(CLIENT, 30000 + i, VIP, 80, ACK).frame(), 2);
    }
    let after = lab.worker.counters.clone();
    assert_eq!(
        after.flow_hits - c.flow_hits,
        64,
        "every real SYN got an entry"
    );
    assert_eq!(after.flows_rescheduled, 0);
    // Confirmed a second later, they survive the next flood; the pairs'
    // entries expire after the first-packet timeout.
    for i in 0..64u16 {
        lab.run(&tcp(CLIENT, 30000 + i, VIP, 80, ACK).frame(), 3);
    }
    for i in 0..5000u32 {
        let src = host([100, 64], i);
        lab.run(&tcp(src, 5000, VIP, 80, SYN).frame(), 4 + i / 1000);
    }
    let hits = lab.worker.counters.flow_hits;
    for i in 0..64u16 {
        lab.run(&tcp(CLIENT, 30000 + i, VIP, 80, ACK).frame(), 10);
    }
    assert_eq!(
        lab.worker.counters.flow_hits - hits,
        64,
        "all kept their entries"
    );
    assert_eq!(lab.flows.sweep(20, usize::MAX).live, 64);
}

#[test]
fn a_syn_after_fin_opens_a_fresh_flow() {
    let mut lab = Lab::new("ipip");
    let f = tcp(CLIENT, 41000, VIP, 80, SYN).frame();
    lab.run(&f, 1);
    lab.run(&tcp(CLIENT, 41000, VIP, 80, ACK | 0x01).frame(), 2); // FIN
    let (v, _) = lab.run(&tcp(CLIENT, 41000, VIP, 80, SYN).frame(), 3);
    assert_eq!(v, Verdict::Forward);
    let c = &lab.worker.counters;
    assert_eq!(
        (c.new_flows, c.flows_rescheduled),
        (2, 1),
        "the closed entry is replaced, not revived"
    );
}

/// Issue 38, item 16: spoofed flows cannot be aimed at one pair of the flow
/// table's buckets. These IPv6 clients all share one public
/// `spillway-flow-v1` hash (a source whose upper half is the hash's first
/// constant zeroes its first multiplication, so the lower half never counts);
/// the table places keys by its own keyed hash, so every one of them keeps
/// an entry. At 561821f, placed by the public hash, they all competed for
/// the same 14 slots: each SYN evicted an earlier one's entry.
#[test]
fn flows_sharing_one_public_hash_are_spread_over_the_table() {
    let cfg = dual_config("drop").dataplane("new_flow_budget", 100_000);
    let mut lab = Lab::with(&cfg, 4096);
    lab.snap.local.own_addrs.push(OWN6.into());
    lab.snap.local.tunnel_src_v6 = Some("fd00:1::2".parse().expect("v6"));
    // Placed as a daemon's table places them: by a random key.
    lab.flows = FlowTable::new(flowtable::Config::with_capacity(4096)).expect("flow table");
    let client = |i: u16| Ipv6Addr::new(0x243f, 0x6a88, 0x85a3, 0x08d3, 0, 0, 0, i + 1);
    let public = |i: u16| {
        wire::flow::FlowKey::from_packet(
            &match wire::packet::parse_frame(&tcp(client(i), 40000, VIP6, 443, SYN).frame()) {
                Ok(wire::packet::Frame::Ip(_, info)) => info,
                other => panic!("{other:?}"),
            },
            wire::flow::Affinity::None,
        )
        .hash64()
    };
    assert_eq!(public(0), public(499), "one public hash");
    for i in 0..500 {
        let (v, _) = lab.run(&tcp(client(i), 40000, VIP6, 443, SYN).frame(), 1);
        assert_eq!(v, Verdict::Forward);
    }
    // Each connection's next packet, a second later, finds its entry.
    for i in 0..500 {
        let (v, _) = lab.run(&tcp(client(i), 40000, VIP6, 443, ACK).frame(), 2);
        assert_eq!(v, Verdict::Forward);
    }
    let c = &lab.worker.counters;
    assert_eq!((c.new_flows, c.stateless, c.flow_hits), (500, 0, 500));
}
