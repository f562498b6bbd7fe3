#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly
#![allow(clippy::cast_possible_truncation)] // test values are small
//! The pipeline end to end on in-memory buffers: a compiled configuration, a
//! snapshot, a real flow table, crafted frames in, verdicts and bytes out.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use dataplane::{DropReason, EndpointHealth, Local, Snapshot, SnapshotBuilder, Verdict, Worker};
use flowtable::FlowTable;
use testkit::config::{Config, Table, endpoint_list, group, port, rule, service};
use testkit::packet::{ACK, FIN, PSH, Packet, RST, SYN, arp_request, v6};
use wire::buf::{MemBuf, PacketBuf};
use wire::encap::{DecapConfig, TunnelKind, parse_tunnel};

const VIP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 10);
const CLIENT: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 7);
const LB_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
const ROUTER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0xfe];
const CLIENT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x77];

/// The web service's endpoints, and with a fourth that joins or leaves.
const THREE: [&str; 3] = ["10.0.1.11", "10.0.1.12", "10.0.1.13"];
const FOUR: [&str; 4] = ["10.0.1.11", "10.0.1.12", "10.0.1.13", "10.0.1.14"];

/// The uplink with `addresses`.
fn uplink<S: AsRef<str>>(addresses: &[S]) -> Table {
    port("up", "net_ring0", "uplink").strs("addresses", addresses)
}

/// Group `name` (region "r", zone "z") of `endpoints`.
fn group_of<S: AsRef<str>>(name: &str, endpoints: &[S]) -> Table {
    group(name, "r", "z").set("endpoints", endpoint_list(endpoints))
}

/// Service `web`: `delivery`, 10 s of draining, group "a" of `endpoints`.
fn web(delivery: &str, endpoints: &[&str]) -> Table {
    service("web", delivery)
        .str("connection_persistence", "DEFAULT_FOR_PROTOCOL")
        .str("connection_draining_timeout", "10s")
        .child(group_of("a", endpoints))
}

/// The uplink; rules `web` (TCP 80) and `dns` (UDP `dns_ports`) on the VIP,
/// both to the service `web`.
fn with_web(web: Table, dns_ports: &str) -> Config {
    // l2dsr endpoints are resolved on the port's segment (M47): give it theirs.
    let l2dsr = web.to_string().contains("l2dsr");
    let addrs: &[&str] = if l2dsr {
        &["10.0.0.2/24", "10.0.1.2/24"]
    } else {
        &["10.0.0.2/24"]
    };
    Config::new()
        .port(uplink(addrs))
        .rule(rule("web", &["10.0.0.10"], "TCP", "80", "web"))
        .rule(rule("dns", &["10.0.0.10"], "UDP", dns_ports, "web"))
        .service(web)
}

/// [`with_web`] with UDP 53 and [`web`] over `delivery` to `endpoints`.
fn config(delivery: &str, endpoints: &[&str]) -> Config {
    with_web(web(delivery, endpoints), "53")
}

fn compiled(cfg: &Config) -> Arc<config::Compiled> {
    match config::load_str("test.toml", &cfg.build(), &config::Env::default()) {
        Ok(l) => Arc::new(l.compiled),
        Err(e) => panic!("test config rejected:\n{e}"),
    }
}

/// [`local`] with every next hop of `c` resolved to the router's MAC.
fn resolved(c: &config::Compiled) -> Local {
    Local {
        neighbours: dataplane::nexthop::next_hops(c)
            .into_iter()
            .map(|h| (h, ROUTER_MAC))
            .collect(),
        ..local()
    }
}

fn local() -> Local {
    Local {
        mac: LB_MAC,
        next_hop_mac: ROUTER_MAC,
        tunnel_src_v4: Some(Ipv4Addr::new(10, 0, 1, 2)),
        tunnel_src_v6: None,
        own_addrs: vec![IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2))],
        port_macs: Vec::new(),
        egress_mtu: None,
        neighbours: Vec::new(),
    }
}

struct Lab {
    builder: SnapshotBuilder,
    snap: Snapshot,
    flows: FlowTable,
    worker: Worker,
}

impl Lab {
    fn new(delivery: &str) -> Lab {
        Lab::with(&config(delivery, &THREE), 4096)
    }

    fn with(cfg: &Config, capacity: usize) -> Lab {
        let mut builder = SnapshotBuilder::new();
        let snap = builder
            .build(
                compiled(cfg),
                resolved(&compiled(cfg)),
                |_| EndpointHealth::HEALTHY,
                0,
                1,
            )
            .expect("snapshot");
        // A fixed placement: a table filled to its capacity fills alike on
        // every run.
        let flows = FlowTable::new(flowtable::Config {
            placement: Some(flowtable::PlacementKey::fixed(7, 7)),
            ..flowtable::Config::with_capacity(capacity)
        })
        .expect("flow table");
        let worker = Worker::new(7, snap.compiled.children.len());
        Lab {
            builder,
            snap,
            flows,
            worker,
        }
    }

    fn run(&mut self, frame: &[u8], now: u32) -> (Verdict, Vec<u8>) {
        let mut buf = MemBuf::new([0u8; 2048], 128, frame).expect("fits");
        let v = self.worker.process(&self.snap, &self.flows, now, &mut buf);
        (v, buf.data().to_vec())
    }

    fn rebuild(&mut self, cfg: &Config, health: impl Fn(&str) -> bool, now: u32) {
        let compiled = compiled(cfg);
        let c2 = compiled.clone();
        self.snap = self
            .builder
            .build(
                compiled.clone(),
                resolved(&compiled),
                move |id| EndpointHealth {
                    healthy: health(&c2.endpoints[id.index()].address.to_string()),
                    weight: None,
                },
                now,
                1,
            )
            .expect("snapshot");
    }
}

/// TCP (seq 1000, window 8192) from the client's MAC to ours.
fn tcp(
    src: impl Into<IpAddr>,
    sport: u16,
    dst: impl Into<IpAddr>,
    dport: u16,
    flags: u8,
) -> Packet {
    Packet::tcp(src.into(), dst.into(), sport, dport, flags)
        .seq(1000)
        .window(8192)
        .macs(CLIENT_MAC, LB_MAC)
}

/// UDP carrying "ping" from the client's MAC to ours.
fn udp(src: impl Into<IpAddr>, sport: u16, dst: impl Into<IpAddr>, dport: u16) -> Packet {
    Packet::udp(src.into(), dst.into(), sport, dport)
        .payload(b"ping")
        .macs(CLIENT_MAC, LB_MAC)
}

/// Address `i` of the /16 `net` (`i` < 65536).
fn host(net: [u8; 2], i: u32) -> Ipv4Addr {
    let [a, b] = net;
    Ipv4Addr::from(u32::from_be_bytes([a, b, 0, 0]) | i)
}

/// The backend a forwarded IPIP/GRE/GUE/GENEVE frame was sent to, after
/// checking that the inner packet is the original IP packet, byte for byte.
fn backend_of(out: &[u8], original: &[u8]) -> IpAddr {
    let t = parse_tunnel(out, &DecapConfig::default()).expect("a valid tunnel frame");
    assert_eq!(
        &out[t.inner_offset..t.inner_offset + t.inner_len],
        &original[14..],
        "inner packet unchanged"
    );
    assert_eq!(
        &out[0..6],
        &ROUTER_MAC,
        "outer destination MAC is the next hop"
    );
    assert_eq!(&out[6..12], &LB_MAC);
    assert_eq!(t.src_ip, IpAddr::V4(Ipv4Addr::new(10, 0, 1, 2)));
    t.dst_ip
}

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
fn a_removed_backend_drains_then_its_flows_move_and_it_gets_no_new_ones() {
    let four = config("ipip", &FOUR);
    let mut lab = Lab::with(&four, 4096);
    // Find flows on 10.0.1.14.
    let mut on_removed = Vec::new();
    for port in 0..200u16 {
        let f = tcp(CLIENT, 30000 + port, VIP, 80, SYN).frame();
        let (_, out) = lab.run(&f, 1);
        if backend_of(&out, &f).to_string() == "10.0.1.14" {
            on_removed.push(30000 + port);
        }
    }
    assert!(!on_removed.is_empty());
    // Reload without 10.0.1.14 at tick 5: draining for 10 s (10 ticks).
    lab.rebuild(&config("ipip", &THREE), |_| true, 5);
    for &p in &on_removed {
        let f = tcp(CLIENT, p, VIP, 80, ACK).frame();
        let (_, out) = lab.run(&f, 10);
        assert_eq!(
            backend_of(&out, &f).to_string(),
            "10.0.1.14",
            "established flows keep draining backends"
        );
    }
    for port in 0..200u16 {
        let f = tcp(CLIENT, 50000 + port, VIP, 80, SYN).frame();
        let (_, out) = lab.run(&f, 10);
        assert_ne!(
            backend_of(&out, &f).to_string(),
            "10.0.1.14",
            "no new flow goes to a removed backend"
        );
    }
    // After the draining period the next rebuild retires it; its flows move.
    lab.rebuild(&config("ipip", &THREE), |_| true, 16);
    for &p in &on_removed {
        let f = tcp(CLIENT, p, VIP, 80, ACK).frame();
        let (_, out) = lab.run(&f, 17);
        assert_ne!(backend_of(&out, &f).to_string(), "10.0.1.14");
    }
    assert_eq!(
        lab.worker.counters.flows_rescheduled,
        u64::try_from(on_removed.len()).expect("a few")
    );
}

/// A removed backend's slot goes to the next new endpoint (the slot table
/// does not grow with every endpoint that ever was), and the old backend's
/// flows never follow their entries to the newcomer.
#[test]
fn a_removed_backends_slot_is_reused_and_its_old_flows_do_not_follow_it() {
    let four = config("ipip", &FOUR);
    let mut lab = Lab::with(&four, 4096);
    let mut on_removed = Vec::new();
    for port in 0..200u16 {
        let f = tcp(CLIENT, 30000 + port, VIP, 80, SYN).frame();
        let (_, out) = lab.run(&f, 1);
        if backend_of(&out, &f).to_string() == "10.0.1.14" {
            on_removed.push(30000 + port);
        }
    }
    assert!(!on_removed.is_empty());
    let slot = |lab: &Lab, addr: &str| {
        lab.snap
            .backends
            .iter()
            .position(|b| b.addr.to_string() == addr && b.state == dataplane::BackendState::Active)
    };
    let old_slot = slot(&lab, "10.0.1.14").expect("slot of 10.0.1.14");
    let slots = lab.snap.backends.len();
    // 10.0.1.14 leaves; after its 10 s of draining it is removed.
    let three = config("ipip", &THREE);
    lab.rebuild(&three, |_| true, 5);
    lab.rebuild(&three, |_| true, 16);
    assert_eq!(
        lab.snap.backends[old_slot].state,
        dataplane::BackendState::Removed
    );
    // A new endpoint takes the free slot.
    let newcomer = config(
        "ipip",
        &["10.0.1.11", "10.0.1.12", "10.0.1.13", "10.0.1.99"],
    );
    lab.rebuild(&newcomer, |_| true, 17);
    assert_eq!(
        slot(&lab, "10.0.1.99"),
        Some(old_slot),
        "the free slot is reused"
    );
    assert_eq!(lab.snap.backends.len(), slots, "no slot was added");
    // The removed backend's flows are rescheduled, by Maglev over the new
    // set: never to 10.0.1.99 through their old entries.
    let fresh = Lab::with(&newcomer, 4096);
    let mut fresh = fresh;
    for &p in &on_removed {
        let f = tcp(CLIENT, p, VIP, 80, ACK).frame();
        let (_, out) = lab.run(&f, 18);
        let (_, want) = fresh.run(&f, 18);
        assert_eq!(
            backend_of(&out, &f),
            backend_of(&want, &f),
            "port {p}: Maglev's choice"
        );
    }
    assert_eq!(
        lab.worker.counters.flows_rescheduled,
        u64::try_from(on_removed.len()).expect("a few")
    );
}

/// M23: failing open, every endpoint serves as if healthy — flows keep
/// their entries instead of being re-created at every packet.
#[test]
fn failing_open_keeps_flows_on_their_backends() {
    let cfg = with_web(web("ipip", &THREE).set("fail_open", true), "53");
    let mut lab = Lab::with(&cfg, 4096);
    lab.rebuild(&cfg, |_| false, 1);
    let mut first = Vec::new();
    for port in 0..50u16 {
        let f = udp(CLIENT, 40000 + port, VIP, 53).frame();
        let (v, out) = lab.run(&f, 2);
        assert_eq!(v, Verdict::Forward, "fail-open forwards");
        first.push(backend_of(&out, &f));
    }
    for round in 0..3 {
        for port in 0..50u16 {
            let f = udp(CLIENT, 40000 + port, VIP, 53).frame();
            let (_, out) = lab.run(&f, 3 + round);
            assert_eq!(backend_of(&out, &f), first[usize::from(port)]);
        }
    }
    let c = &lab.worker.counters;
    assert_eq!(
        (c.new_flows, c.flow_hits, c.flows_rescheduled),
        (50, 150, 0)
    );
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
fn unhealthy_backends_keep_tcp_but_not_udp_by_default() {
    let mut lab = Lab::new("ipip");
    let mut tcp_flows = Vec::new();
    let mut udp_flows = Vec::new();
    for port in 0..60u16 {
        let t = tcp(CLIENT, 30000 + port, VIP, 80, SYN).frame();
        let (_, out) = lab.run(&t, 1);
        tcp_flows.push((30000 + port, backend_of(&out, &t)));
        let u = udp(CLIENT, 30000 + port, VIP, 53).frame();
        let (_, out) = lab.run(&u, 1);
        udp_flows.push((30000 + port, backend_of(&out, &u)));
    }
    let sick = tcp_flows[0].1.to_string();
    let sick2 = sick.clone();
    lab.rebuild(&config("ipip", &THREE), move |a| a != sick2, 2);
    for (p, be) in &tcp_flows {
        let f = tcp(CLIENT, *p, VIP, 80, ACK).frame();
        let (_, out) = lab.run(&f, 3);
        assert_eq!(
            backend_of(&out, &f),
            *be,
            "TCP stays (DEFAULT_FOR_PROTOCOL)"
        );
    }
    for (p, _) in &udp_flows {
        let f = udp(CLIENT, *p, VIP, 53).frame();
        let (_, out) = lab.run(&f, 3);
        assert_ne!(
            backend_of(&out, &f).to_string(),
            sick,
            "UDP moves off the unhealthy backend"
        );
    }
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

/// A real connection that did all its talking in its first second and then
/// went quiet (a pooled keep-alive connection) keeps its entry past the
/// first-packet timeout: entries opened by a SYN keep TCP's timeouts while
/// unconfirmed. A backend joining meanwhile does not move it.
#[test]
fn a_connection_idle_after_its_first_second_keeps_its_backend() {
    let mut lab = Lab::new("ipip");
    let mut conns = Vec::new();
    for port in 30000..30100u16 {
        let syn = tcp(CLIENT, port, VIP, 80, SYN).frame();
        let (_, out) = lab.run(&syn, 1);
        lab.run(&tcp(CLIENT, port, VIP, 80, ACK).frame(), 1);
        conns.push((port, backend_of(&out, &syn)));
    }
    // Quiet until second 40 (the sweeper runs meanwhile); a fourth backend joins.
    assert_eq!(lab.flows.sweep(30, usize::MAX).expired, 0);
    lab.rebuild(&config("ipip", &FOUR), |_| true, 35);
    for (port, backend) in &conns {
        let ack = tcp(CLIENT, *port, VIP, 80, ACK).frame();
        let (_, out) = lab.run(&ack, 40);
        assert_eq!(backend_of(&out, &ack), *backend, "port {port}");
    }
    assert_eq!(lab.worker.counters.flows_rescheduled, 0);
}

#[test]
fn without_eligible_backends_new_flows_are_dropped_and_counted() {
    let mut lab = Lab::new("ipip");
    lab.rebuild(&config("ipip", &THREE), |_| false, 1);
    let f = tcp(CLIENT, 1234, VIP, 80, SYN).frame();
    assert_eq!(lab.run(&f, 2).0, Verdict::Drop(DropReason::NoBackend));
    let web = lab
        .snap
        .compiled
        .children
        .iter()
        .position(|ch| ch.name == "web-ag0")
        .expect("child");
    let cc = &lab.worker.counters.children[web];
    assert_eq!(cc.drops, 1);
    assert_eq!(cc.drop_reasons[DropReason::NoBackend as usize], 1);
    assert_eq!(cc.drop_reasons.iter().sum::<u64>(), 1, "one reason");
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

/// A VIP of each family with TCP rules `t4`/`t6` on `tcp_ports`, and
/// `L3_DEFAULT` rules `l3v4`/`l3v6` beside them if `l3_default`.
fn fragment_config(tcp_ports: &str, l3_default: bool) -> Config {
    let vip6 = [VIP6.to_string()];
    let mut cfg = dual_node()
        .rule(rule("t4", &["10.0.0.10"], "TCP", tcp_ports, "s4"))
        .rule(rule("t6", &vip6, "TCP", tcp_ports, "s6"));
    if l3_default {
        cfg = cfg
            .rule(rule("l3v4", &["10.0.0.10"], "L3_DEFAULT", "all", "s4"))
            .rule(rule("l3v6", &vip6, "L3_DEFAULT", "all", "s6"));
    }
    cfg.service(service("s4", "ipip").child(group_of("a", &["10.0.1.11", "10.0.1.12"])))
        .service(service("s6", "ipip").child(group_of("b", &["fd00:1::11", "fd00:1::12"])))
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
    let mut worker = Worker::new(1, snap.compiled.children.len());
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

/// Two services in the order given; `web` has `web_eps` endpoints
/// 10.0.1.11… and takes TCP 80, `other` takes UDP 53.
fn two_services(web_first: bool, web_eps: usize) -> Config {
    let eps: Vec<String> = (0..web_eps).map(|i| format!("10.0.1.{}", 11 + i)).collect();
    let web = service("web", "ipip").child(group_of("a", &eps));
    let other = service("other", "ipip").child(group_of("b", &["10.0.2.21"]));
    let cfg = Config::new()
        .port(uplink(&["10.0.0.2/24"]))
        .rule(rule("web", &["10.0.0.10"], "TCP", "80", "web"))
        .rule(rule("dns", &["10.0.0.10"], "UDP", "53", "other"));
    if web_first {
        cfg.service(web).service(other)
    } else {
        cfg.service(other).service(web)
    }
}

/// M38: flow identity does not depend on the order of services in the
/// file. A reload that moves `web` from the first to the second
/// `[[backend_services]]` block (and adds an endpoint, so that Maglev now
/// picks other backends for some of its flows) keeps every established flow
/// on its backend. (The flow key used to carry the service's position.)
#[test]
fn reordering_services_keeps_every_flow_on_its_backend() {
    let mut lab = Lab::with(&two_services(true, 3), 4096);
    let mut before = Vec::new();
    for port in 20000..20200u16 {
        let f = tcp(CLIENT, port, VIP, 80, SYN).frame();
        let (_, out) = lab.run(&f, 1);
        before.push((port, backend_of(&out, &f)));
    }
    let reordered = two_services(false, 4);
    lab.rebuild(&reordered, |_| true, 2);
    // Where the new configuration would put each connection without entries.
    let mut fresh = Lab::with(&reordered, 4096);
    let mut moved_by_maglev = 0;
    for (port, backend) in &before {
        let ack = tcp(CLIENT, *port, VIP, 80, ACK).frame();
        let (v, out) = lab.run(&ack, 3);
        assert_eq!(v, Verdict::Forward, "port {port}");
        assert_eq!(
            backend_of(&out, &ack),
            *backend,
            "port {port} stays on its backend"
        );
        let (_, out) = fresh.run(&ack, 3);
        if backend_of(&out, &ack) != *backend {
            moved_by_maglev += 1;
        }
    }
    assert!(
        moved_by_maglev > 0,
        "some flows sit where Maglev would no longer send them"
    );
    let c = &lab.worker.counters;
    assert_eq!(
        (c.new_flows, c.flows_rescheduled),
        (200, 0),
        "no flow was re-created"
    );
}

#[test]
fn a_new_syn_never_follows_an_entry_to_a_draining_backend() {
    let four = config("ipip", &FOUR);
    let mut lab = Lab::with(&four, 4096);
    let mut port = 30000u16;
    let port = loop {
        let f = tcp(CLIENT, port, VIP, 80, SYN).frame();
        let (_, out) = lab.run(&f, 1);
        if backend_of(&out, &f).to_string() == "10.0.1.14" {
            break port;
        }
        port += 1;
    };
    lab.rebuild(&config("ipip", &THREE), |_| true, 2);
    let ack = tcp(CLIENT, port, VIP, 80, ACK).frame();
    let (_, out) = lab.run(&ack, 3);
    assert_eq!(
        backend_of(&out, &ack).to_string(),
        "10.0.1.14",
        "the established connection drains"
    );
    // The client reuses the port for a new connection: a SYN on the tuple.
    let syn = tcp(CLIENT, port, VIP, 80, SYN).frame();
    let (_, out) = lab.run(&syn, 4);
    assert_ne!(
        backend_of(&out, &syn).to_string(),
        "10.0.1.14",
        "a new connection never goes to a draining backend"
    );
    assert_eq!(lab.worker.counters.flows_rescheduled, 1);
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

// ---------------------------------------------------------------------------
// Replies built in place: neighbor advertisements for our IPv6 addresses
// (docs/requirements.md §1) and TCP resets for services without a backend (M14). The
// expected frames are built by the test kit (checked against scapy), not
// by the code under test.

const VIP6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 0x10);
const OWN6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2);
const CLIENT6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 7);

fn a6(s: &str) -> Ipv6Addr {
    s.parse().expect("v6")
}

/// The node, with an uplink address of each family.
fn dual_node() -> Config {
    Config::new().port(uplink(&["10.0.0.2/24".to_string(), format!("{OWN6}/64")]))
}

/// The balancer with an IPv4 and an IPv6 VIP, both served by services whose
/// `no_backend_action` is `action`, and an own address of each family.
fn dual_config(action: &str) -> Config {
    dual_node()
        .rule(rule("web", &["10.0.0.10"], "TCP", "80", "web"))
        .rule(rule("dns", &["10.0.0.10"], "UDP", "53", "web"))
        .rule(rule("web6", &[VIP6.to_string()], "TCP", "443", "web6"))
        .service(
            service("web", "ipip")
                .str("no_backend_action", action)
                .child(group_of("a", &["10.0.1.11", "10.0.1.12"])),
        )
        .service(
            service("web6", "ipip")
                .str("no_backend_action", action)
                .child(group_of("b", &["fd00:1::11", "fd00:1::12"])),
        )
}

fn dual_lab(action: &str, healthy: bool) -> Lab {
    let cfg = dual_config(action);
    let mut lab = Lab::with(&cfg, 4096);
    lab.snap.local.own_addrs.push(OWN6.into());
    lab.snap.local.tunnel_src_v6 = Some("fd00:1::2".parse().expect("v6"));
    if !healthy {
        let local = lab.snap.local.clone();
        lab.rebuild(&cfg, |_| false, 1);
        lab.snap.local = local;
    }
    lab
}

fn child(lab: &Lab, name: &str) -> usize {
    lab.snap
        .compiled
        .children
        .iter()
        .position(|ch| ch.name == name)
        .expect("child rule")
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

#[test]
fn persisted_flows_on_an_unhealthy_backend_last_only_its_draining_period() {
    // connection_draining_timeout is 10 s: TCP flows persist on a backend
    // that turned unhealthy at tick 2 until tick 12 (M11), however often the
    // snapshot is rebuilt meanwhile; then they move.
    let mut lab = Lab::new("ipip");
    let mut flows = Vec::new();
    for port in 0..60u16 {
        let t = tcp(CLIENT, 40000 + port, VIP, 80, SYN).frame();
        let (_, out) = lab.run(&t, 1);
        flows.push((40000 + port, backend_of(&out, &t)));
    }
    let sick = flows[0].1.to_string();
    let cfg = config("ipip", &THREE);
    let s2 = sick.clone();
    lab.rebuild(&cfg, move |a| a != s2, 2);
    let s3 = sick.clone();
    lab.rebuild(&cfg, move |a| a != s3, 8);
    let on_sick: Vec<u16> = flows
        .iter()
        .filter(|(_, b)| b.to_string() == sick)
        .map(|(p, _)| *p)
        .collect();
    assert!(!on_sick.is_empty());
    for p in &on_sick {
        let f = tcp(CLIENT, *p, VIP, 80, ACK).frame();
        let (_, out) = lab.run(&f, 11);
        assert_eq!(
            backend_of(&out, &f).to_string(),
            sick,
            "still draining at 11"
        );
    }
    for p in &on_sick {
        let f = tcp(CLIENT, *p, VIP, 80, ACK).frame();
        let (_, out) = lab.run(&f, 12);
        assert_ne!(backend_of(&out, &f).to_string(), sick, "moved at 12");
    }
}

/// M47: a backend whose next hop is unresolved gets no new flows, its
/// established flows are dropped `no_neighbour`, and nothing ever leaves
/// for a zero MAC; once resolved (to a new MAC, say) its flows carry on.
#[test]
fn an_unresolved_next_hop_is_a_counted_drop_never_a_zero_mac() {
    for delivery in ["l2dsr", "gue"] {
        // gue endpoints on the port's segment are resolved themselves.
        let cfg = with_web(web(delivery, &THREE), "53");
        let cfg = if delivery == "gue" {
            Config::new()
                .port(uplink(&["10.0.0.2/24", "10.0.1.2/24"]))
                .rule(rule("web", &["10.0.0.10"], "TCP", "80", "web"))
                .service(web(delivery, &THREE))
        } else {
            cfg
        };
        let mut lab = Lab::with(&cfg, 4096);
        let c = compiled(&cfg);
        let dst_mac = |out: &[u8]| -> [u8; 6] { out[..6].try_into().expect("6 bytes") };
        let syn = tcp(CLIENT, 40000, VIP, 80, SYN).frame();
        let (v, out) = lab.run(&syn, 1);
        assert_eq!(v, Verdict::Forward, "{delivery}");
        assert_eq!(dst_mac(&out), ROUTER_MAC, "{delivery}");
        let backend = lab.worker.counters.backends.clone();
        // Every next hop forgotten (failed): established flows drop, new
        // ones find no eligible backend.
        lab.snap = lab
            .builder
            .build(c.clone(), local(), |_| EndpointHealth::HEALTHY, 2, 1)
            .expect("snapshot");
        assert!(lab.snap.backends.iter().all(|b| b.encap.is_none()));
        assert!(lab.snap.services[0].eligible_slots().is_empty());
        let ack = tcp(CLIENT, 40000, VIP, 80, ACK).frame();
        let (v, out) = lab.run(&ack, 2);
        assert_eq!(v, Verdict::Drop(DropReason::NoNeighbour), "{delivery}");
        assert_ne!(dst_mac(&out), [0; 6]);
        let other = tcp(CLIENT, 40001, VIP, 80, SYN).frame();
        assert_eq!(
            lab.run(&other, 2).0,
            Verdict::Drop(DropReason::NoBackend),
            "{delivery}"
        );
        assert_eq!(lab.worker.counters.dropped(DropReason::NoNeighbour), 1);
        assert_eq!(lab.worker.counters.backends, backend);
        // Resolved again, to a new MAC: the flow follows at once.
        let new_mac = [2, 0, 0, 0, 0, 0x77];
        let moved = Local {
            neighbours: dataplane::nexthop::next_hops(&c)
                .into_iter()
                .map(|h| (h, new_mac))
                .collect(),
            ..local()
        };
        lab.snap = lab
            .builder
            .build(c.clone(), moved, |_| EndpointHealth::HEALTHY, 3, 1)
            .expect("snapshot");
        let (v, out) = lab.run(&ack, 3);
        assert_eq!(v, Verdict::Forward, "{delivery}");
        assert_eq!(dst_mac(&out), new_mac, "{delivery}");
    }
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
