#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly
#![allow(clippy::cast_possible_truncation)] // test values are small
//! The pipeline end to end on in-memory buffers: a compiled configuration, a
//! snapshot, a real flow table, crafted frames in, verdicts and bytes out.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use dataplane::{DropReason, EndpointHealth, Local, Snapshot, SnapshotBuilder, Verdict, Worker};
use flowtable::FlowTable;
use wire::buf::{MemBuf, PacketBuf};
use wire::encap::{DecapConfig, TunnelKind, parse_tunnel};

const VIP: [u8; 4] = [10, 0, 0, 10];
const CLIENT: [u8; 4] = [192, 0, 2, 7];
const LB_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
const ROUTER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0xfe];
const CLIENT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x77];

fn config(delivery: &str, extra_endpoint: bool, persistence: &str) -> String {
    format!(
        r#"
[node]
name = "t"
region = "r"
zone = "z"

[[ports]]
name = "up"
device = "net_ring0"
role = "uplink"
addresses = ["10.0.0.2/24"]

[[forwarding_rules]]
name = "web"
vips = ["10.0.0.10"]
protocol = "TCP"
ports = "80"
backend_service = "web"

[[forwarding_rules]]
name = "dns"
vips = ["10.0.0.10"]
protocol = "UDP"
ports = 53
backend_service = "web"

[[backend_services]]
name = "web"
delivery = "{delivery}"
connection_persistence = "{persistence}"
connection_draining_timeout = "10s"

[[backend_services.groups]]
name = "a"
region = "r"
zone = "z"
endpoints = [
  {{ address = "10.0.1.11" }},
  {{ address = "10.0.1.12" }},
  {{ address = "10.0.1.13" }},{}
]
"#,
        if extra_endpoint {
            "\n  { address = \"10.0.1.14\" },"
        } else {
            ""
        }
    )
}

fn compiled(text: &str) -> Arc<config::Compiled> {
    match config::load_str("test.toml", text, &config::Env::default()) {
        Ok(l) => Arc::new(l.compiled),
        Err(e) => panic!("test config rejected:\n{e}"),
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
        Lab::with(&config(delivery, false, "DEFAULT_FOR_PROTOCOL"), 4096)
    }

    fn with(cfg: &str, capacity: usize) -> Lab {
        let mut builder = SnapshotBuilder::new();
        let snap = builder
            .build(compiled(cfg), local(), |_| EndpointHealth::HEALTHY, 0, 1)
            .expect("snapshot");
        let flows = FlowTable::new(flowtable::Config::with_capacity(capacity)).expect("flow table");
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

    fn rebuild(&mut self, cfg: &str, health: impl Fn(&str) -> bool, now: u32) {
        let compiled = compiled(cfg);
        let c2 = compiled.clone();
        self.snap = self
            .builder
            .build(
                compiled,
                local(),
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

fn csum(mut sum: u32, data: &[u8]) -> u16 {
    for c in data.chunks(2) {
        sum += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

fn ipv4(src: [u8; 4], dst: [u8; 4], proto: u8, l4: &[u8]) -> Vec<u8> {
    let mut ip = vec![0x45, 0, 0, 0, 0, 1, 0x40, 0, 64, proto, 0, 0];
    ip[2..4].copy_from_slice(&((20 + l4.len()) as u16).to_be_bytes());
    ip.extend_from_slice(&src);
    ip.extend_from_slice(&dst);
    let c = csum(0, &ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    ip.extend_from_slice(l4);
    ip
}

fn l4_csum(src: [u8; 4], dst: [u8; 4], proto: u8, seg: &mut [u8], at: usize) {
    let pseudo: u32 = [src, dst]
        .iter()
        .flat_map(|a| {
            [
                u16::from_be_bytes([a[0], a[1]]),
                u16::from_be_bytes([a[2], a[3]]),
            ]
        })
        .map(u32::from)
        .sum::<u32>()
        + u32::from(proto)
        + seg.len() as u32;
    let c = csum(pseudo, seg);
    seg[at..at + 2].copy_from_slice(&c.to_be_bytes());
}

fn tcp(src: [u8; 4], sport: u16, dst: [u8; 4], dport: u16, flags: u8) -> Vec<u8> {
    let mut seg = vec![0u8; 20];
    seg[0..2].copy_from_slice(&sport.to_be_bytes());
    seg[2..4].copy_from_slice(&dport.to_be_bytes());
    seg[4..8].copy_from_slice(&1000u32.to_be_bytes());
    seg[12] = 5 << 4;
    seg[13] = flags;
    seg[14..16].copy_from_slice(&8192u16.to_be_bytes());
    l4_csum(src, dst, 6, &mut seg, 16);
    ipv4(src, dst, 6, &seg)
}

fn udp(src: [u8; 4], sport: u16, dst: [u8; 4], dport: u16) -> Vec<u8> {
    let mut seg = vec![0u8; 12];
    seg[0..2].copy_from_slice(&sport.to_be_bytes());
    seg[2..4].copy_from_slice(&dport.to_be_bytes());
    seg[4..6].copy_from_slice(&12u16.to_be_bytes());
    seg[8..12].copy_from_slice(b"ping");
    l4_csum(src, dst, 17, &mut seg, 6);
    ipv4(src, dst, 17, &seg)
}

fn eth(ip: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(14 + ip.len());
    f.extend_from_slice(&LB_MAC);
    f.extend_from_slice(&CLIENT_MAC);
    f.extend_from_slice(&[0x08, 0x00]);
    f.extend_from_slice(ip);
    f
}

const SYN: u8 = 0x02;
const ACK: u8 = 0x10;

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
    let syn = eth(&tcp(CLIENT, 40000, VIP, 80, SYN));
    let (v, out) = lab.run(&syn, 1);
    assert_eq!(v, Verdict::Forward);
    let be = backend_of(&out, &syn);
    assert!(["10.0.1.11", "10.0.1.12", "10.0.1.13"].contains(&be.to_string().as_str()));
    for i in 0..5 {
        let ack = eth(&tcp(CLIENT, 40000, VIP, 80, ACK));
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
        let f = eth(&tcp(CLIENT, 20000 + port, VIP, 80, SYN));
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
            eth(&tcp(CLIENT, 1, VIP, 81, SYN)),
            Verdict::Drop(DropReason::NoRule),
        ),
        (
            "UDP 53 matches the dns rule",
            eth(&udp(CLIENT, 5353, VIP, 53)),
            Verdict::Forward,
        ),
        (
            "UDP to another port",
            eth(&udp(CLIENT, 5353, VIP, 54)),
            Verdict::Drop(DropReason::NoRule),
        ),
        (
            "to a non-VIP address: never relayed",
            eth(&tcp(CLIENT, 1, [10, 0, 0, 99], 80, SYN)),
            Verdict::Drop(DropReason::NotOurs),
        ),
        (
            "to the balancer itself: the host",
            eth(&tcp(CLIENT, 1, [10, 0, 0, 2], 22, SYN)),
            Verdict::ToHost,
        ),
        (
            "ICMP echo to the VIP: no L3_DEFAULT rule",
            eth(&ipv4(CLIENT, VIP, 1, &[8, 0, 0xf7, 0xff, 0, 0, 0, 0])),
            Verdict::Drop(DropReason::NoRule),
        ),
        (
            "truncated IPv4",
            eth(&tcp(CLIENT, 1, VIP, 80, SYN)[..30]),
            Verdict::Drop(DropReason::Malformed),
        ),
        (
            "not IP, not ARP",
            {
                let mut f = eth(&[0u8; 46]);
                f[12..14].copy_from_slice(&[0x88, 0xcc]);
                f
            },
            Verdict::ToHost,
        ),
    ];
    for (name, frame, want) in &cases {
        assert_eq!(lab.run(frame, 1).0, *want, "{name}");
    }
    let c = &lab.worker.counters;
    assert_eq!(c.rx_packets, cases.len() as u64);
    assert_eq!(
        c.rx_packets,
        c.forwarded + c.total_drops() + c.to_host + c.replies(),
        "every packet is counted once"
    );
}

#[test]
fn arp_requests_for_vips_are_answered_in_place() {
    let mut lab = Lab::new("ipip");
    let mut req = vec![0xff; 6];
    req.extend_from_slice(&CLIENT_MAC);
    req.extend_from_slice(&[0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 1]);
    req.extend_from_slice(&CLIENT_MAC);
    req.extend_from_slice(&CLIENT);
    req.extend_from_slice(&[0; 6]);
    req.extend_from_slice(&VIP);
    let (v, out) = lab.run(&req, 1);
    assert_eq!(v, Verdict::Reply);
    assert_eq!(&out[0..6], &CLIENT_MAC);
    assert_eq!(&out[6..12], &LB_MAC);
    assert_eq!(&out[20..22], &[0, 2], "an ARP reply");
    assert_eq!(&out[22..28], &LB_MAC, "sender hardware address: ours");
    assert_eq!(&out[28..32], &VIP, "for the VIP");
    assert_eq!(&out[32..38], &CLIENT_MAC);
    assert_eq!(&out[38..42], &CLIENT);
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
        let syn = eth(&tcp(CLIENT, port, VIP, 80, SYN));
        let (_, out) = lab.run(&syn, 1);
        let be = backend_of(&out, &syn);
        // A router on the way back to the client reports "fragmentation
        // needed" about the backend's VIP:80 -> client packet.
        let quoted = tcp(VIP, 80, CLIENT, port, ACK);
        let mut icmp = vec![3, 4, 0, 0, 0, 0, 0x05, 0xdc];
        icmp.extend_from_slice(&quoted[..28]);
        let c = csum(0, &icmp);
        icmp[2..4].copy_from_slice(&c.to_be_bytes());
        let err = eth(&ipv4([198, 51, 100, 1], VIP, 1, &icmp));
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
        let syn = eth(&tcp(CLIENT, 40000, VIP, 80, SYN));
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
    let syn = eth(&tcp(CLIENT, 40000, VIP, 80, SYN));
    let (v, out) = lab.run(&syn, 1);
    assert_eq!(v, Verdict::Forward);
    let mut want = ROUTER_MAC.to_vec();
    want.extend_from_slice(&LB_MAC);
    want.extend_from_slice(&syn[12..]);
    assert_eq!(out, want, "l2dsr rewrites the MACs and nothing else");
}

#[test]
fn a_removed_backend_drains_then_its_flows_move_and_it_gets_no_new_ones() {
    let four = config("ipip", true, "DEFAULT_FOR_PROTOCOL");
    let mut lab = Lab::with(&four, 4096);
    // Find flows on 10.0.1.14.
    let mut on_removed = Vec::new();
    for port in 0..200u16 {
        let f = eth(&tcp(CLIENT, 30000 + port, VIP, 80, SYN));
        let (_, out) = lab.run(&f, 1);
        if backend_of(&out, &f).to_string() == "10.0.1.14" {
            on_removed.push(30000 + port);
        }
    }
    assert!(!on_removed.is_empty());
    // Reload without 10.0.1.14 at tick 5: draining for 10 s (10 ticks).
    lab.rebuild(&config("ipip", false, "DEFAULT_FOR_PROTOCOL"), |_| true, 5);
    for &p in &on_removed {
        let f = eth(&tcp(CLIENT, p, VIP, 80, ACK));
        let (_, out) = lab.run(&f, 10);
        assert_eq!(
            backend_of(&out, &f).to_string(),
            "10.0.1.14",
            "established flows keep draining backends"
        );
    }
    for port in 0..200u16 {
        let f = eth(&tcp(CLIENT, 50000 + port, VIP, 80, SYN));
        let (_, out) = lab.run(&f, 10);
        assert_ne!(
            backend_of(&out, &f).to_string(),
            "10.0.1.14",
            "no new flow goes to a removed backend"
        );
    }
    // After the draining period the next rebuild retires it; its flows move.
    lab.rebuild(&config("ipip", false, "DEFAULT_FOR_PROTOCOL"), |_| true, 16);
    for &p in &on_removed {
        let f = eth(&tcp(CLIENT, p, VIP, 80, ACK));
        let (_, out) = lab.run(&f, 17);
        assert_ne!(backend_of(&out, &f).to_string(), "10.0.1.14");
    }
    assert_eq!(
        lab.worker.counters.flows_rescheduled,
        on_removed.len() as u64
    );
}

/// A removed backend's slot goes to the next new endpoint (the slot table
/// does not grow with every endpoint that ever was), and the old backend's
/// flows never follow their entries to the newcomer.
#[test]
fn a_removed_backends_slot_is_reused_and_its_old_flows_do_not_follow_it() {
    let four = config("ipip", true, "DEFAULT_FOR_PROTOCOL");
    let mut lab = Lab::with(&four, 4096);
    let mut on_removed = Vec::new();
    for port in 0..200u16 {
        let f = eth(&tcp(CLIENT, 30000 + port, VIP, 80, SYN));
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
    let three = config("ipip", false, "DEFAULT_FOR_PROTOCOL");
    lab.rebuild(&three, |_| true, 5);
    lab.rebuild(&three, |_| true, 16);
    assert_eq!(
        lab.snap.backends[old_slot].state,
        dataplane::BackendState::Removed
    );
    // A new endpoint takes the free slot.
    let newcomer = three.replace(
        "{ address = \"10.0.1.13\" },",
        "{ address = \"10.0.1.13\" },\n  { address = \"10.0.1.99\" },",
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
        let f = eth(&tcp(CLIENT, p, VIP, 80, ACK));
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
        on_removed.len() as u64
    );
}

/// M23: failing open, every endpoint serves as if healthy — flows keep
/// their entries instead of being re-created at every packet.
#[test]
fn failing_open_keeps_flows_on_their_backends() {
    let cfg = config("ipip", false, "DEFAULT_FOR_PROTOCOL").replace(
        "connection_draining_timeout",
        "fail_open = true\nconnection_draining_timeout",
    );
    let mut lab = Lab::with(&cfg, 4096);
    lab.rebuild(&cfg, |_| false, 1);
    let mut first = Vec::new();
    for port in 0..50u16 {
        let f = eth(&udp(CLIENT, 40000 + port, VIP, 53));
        let (v, out) = lab.run(&f, 2);
        assert_eq!(v, Verdict::Forward, "fail-open forwards");
        first.push(backend_of(&out, &f));
    }
    for round in 0..3 {
        for port in 0..50u16 {
            let f = eth(&udp(CLIENT, 40000 + port, VIP, 53));
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
    let mut lab = Lab::with(&config("geneve", false, "DEFAULT_FOR_PROTOCOL"), 16);
    for port in 0..100u16 {
        let f = eth(&udp(CLIENT, 10000 + port, VIP, 53));
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
        let f = eth(&udp(CLIENT, 20000, VIP, 53));
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
    let (_, out) = lab.run(&eth(&udp(CLIENT, 20001, VIP, 53)), 2);
    assert_ne!(cookie(&out), cookies[0]);
}

#[test]
fn unhealthy_backends_keep_tcp_but_not_udp_by_default() {
    let mut lab = Lab::new("ipip");
    let mut tcp_flows = Vec::new();
    let mut udp_flows = Vec::new();
    for port in 0..60u16 {
        let t = eth(&tcp(CLIENT, 30000 + port, VIP, 80, SYN));
        let (_, out) = lab.run(&t, 1);
        tcp_flows.push((30000 + port, backend_of(&out, &t)));
        let u = eth(&udp(CLIENT, 30000 + port, VIP, 53));
        let (_, out) = lab.run(&u, 1);
        udp_flows.push((30000 + port, backend_of(&out, &u)));
    }
    let sick = tcp_flows[0].1.to_string();
    let sick2 = sick.clone();
    lab.rebuild(
        &config("ipip", false, "DEFAULT_FOR_PROTOCOL"),
        move |a| a != sick2,
        2,
    );
    for (p, be) in &tcp_flows {
        let f = eth(&tcp(CLIENT, *p, VIP, 80, ACK));
        let (_, out) = lab.run(&f, 3);
        assert_eq!(
            backend_of(&out, &f),
            *be,
            "TCP stays (DEFAULT_FOR_PROTOCOL)"
        );
    }
    for (p, _) in &udp_flows {
        let f = eth(&udp(CLIENT, *p, VIP, 53));
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
    let mut lab = Lab::with(&config("ipip", false, "DEFAULT_FOR_PROTOCOL"), 16);
    for port in 0..400u16 {
        // Two packets each, a second apart: the second confirms the entry
        // the first made, so the table fills with entries no new flow may
        // displace.
        let f = eth(&udp(CLIENT, 10000 + port, VIP, 53));
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
    let cfg = config("ipip", false, "DEFAULT_FOR_PROTOCOL").replace(
        "[[ports]]",
        "[dataplane]\nnew_flow_budget = 100\n\n[[ports]]",
    );
    let mut lab = Lab::with(&cfg, 64);
    // 40 real connections: handshake, then data a second later (which
    // confirms their entries).
    let mut real = Vec::new();
    for port in 30000..30040u16 {
        let syn = eth(&tcp(CLIENT, port, VIP, 80, SYN));
        let (_, out) = lab.run(&syn, 1);
        lab.run(&eth(&tcp(CLIENT, port, VIP, 80, ACK)), 1);
        real.push((port, backend_of(&out, &syn)));
    }
    for (port, _) in &real {
        lab.run(&eth(&tcp(CLIENT, *port, VIP, 80, ACK)), 2);
    }
    let before = lab.worker.counters.clone();
    assert_eq!(before.new_flows, 40);
    // Tick 2: 5,000 spoofed ACKs and one-packet UDP flows from 5,000 sources.
    for i in 0..5000u32 {
        let src = [198, 51, (i >> 8) as u8, i as u8];
        let f = if i % 2 == 0 {
            eth(&tcp(src, 1024 + (i % 60000) as u16, VIP, 80, ACK))
        } else {
            eth(&udp(src, 2048, VIP, 53))
        };
        assert_eq!(lab.run(&f, 2).0, Verdict::Forward, "flood packet {i}");
    }
    let c = lab.worker.counters.clone();
    let flood_entries = c.new_flows - before.new_flows;
    assert_eq!(flood_entries, 100, "the budget of tick 2");
    assert_eq!(c.over_budget, 4900);
    // Every real connection still follows its entry to its backend.
    for (port, backend) in &real {
        let ack = eth(&tcp(CLIENT, *port, VIP, 80, ACK));
        let (_, out) = lab.run(&ack, 3);
        assert_eq!(backend_of(&out, &ack), *backend, "port {port}");
    }
    let c = lab.worker.counters.clone();
    assert_eq!(c.flow_hits - before.flow_hits, 40, "all 40 were hits");
    assert_eq!(c.flows_rescheduled, 0);
    // Next tick the budget is back; the flood's entries (unconfirmed) are
    // displaced by new flows, the established ones never are.
    for i in 0..3000u32 {
        let src = [203, 0, (i >> 8) as u8, i as u8];
        lab.run(&eth(&tcp(src, 4000, VIP, 80, ACK)), 4 + i / 100);
    }
    for (port, backend) in &real {
        let ack = eth(&tcp(CLIENT, *port, VIP, 80, ACK));
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
    let cfg = config("ipip", false, "DEFAULT_FOR_PROTOCOL").replace(
        "[[ports]]",
        "[dataplane]\nnew_flow_budget = 100\n\n[[ports]]",
    );
    let mut lab = Lab::with(&cfg, 64);
    // Tick 1: 1,000 spoofed flows of two ACKs, and 1,000 of SYN + ACK.
    for i in 0..1000u32 {
        let src = [198, 51, (i >> 8) as u8, i as u8];
        let ack = eth(&tcp(src, 1024, VIP, 80, ACK));
        lab.run(&ack, 1);
        lab.run(&ack, 1);
        let src = [203, 0, (i >> 8) as u8, i as u8];
        lab.run(&eth(&tcp(src, 1024, VIP, 80, SYN)), 1);
        lab.run(&eth(&tcp(src, 1024, VIP, 80, ACK)), 1);
    }
    // Every entry is still displaceable: 64 real connections opened at
    // tick 2, beside a fresh flood of spoofed ACKs that spends the budget,
    // all get entries.
    let before = lab.worker.counters.clone();
    for i in 0..64u32 {
        for j in 0..20u32 {
            let src = [198, 18, (i >> 2) as u8, (j + 20 * (i & 3)) as u8];
            lab.run(&eth(&tcp(src, 4000, VIP, 80, ACK)), 2);
        }
        lab.run(&eth(&tcp(CLIENT, 30000 + i as u16, VIP, 80, SYN)), 2);
    }
    let c = lab.worker.counters.clone();
    assert!(
        c.over_budget > before.over_budget,
        "the flood spent the budget"
    );
    // Each real connection's next packets follow an entry.
    for i in 0..64u16 {
        lab.run(&eth(&tcp(CLIENT, 30000 + i, VIP, 80, ACK)), 2);
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
        lab.run(&eth(&tcp(CLIENT, 30000 + i, VIP, 80, ACK)), 3);
    }
    for i in 0..5000u32 {
        let src = [100, 64, (i >> 8) as u8, i as u8];
        lab.run(&eth(&tcp(src, 5000, VIP, 80, SYN)), 4 + i / 1000);
    }
    let hits = lab.worker.counters.flow_hits;
    for i in 0..64u16 {
        lab.run(&eth(&tcp(CLIENT, 30000 + i, VIP, 80, ACK)), 10);
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
        let syn = eth(&tcp(CLIENT, port, VIP, 80, SYN));
        let (_, out) = lab.run(&syn, 1);
        lab.run(&eth(&tcp(CLIENT, port, VIP, 80, ACK)), 1);
        conns.push((port, backend_of(&out, &syn)));
    }
    // Quiet until second 40 (the sweeper runs meanwhile); a fourth backend joins.
    assert_eq!(lab.flows.sweep(30, usize::MAX).expired, 0);
    lab.rebuild(&config("ipip", true, "DEFAULT_FOR_PROTOCOL"), |_| true, 35);
    for (port, backend) in &conns {
        let ack = eth(&tcp(CLIENT, *port, VIP, 80, ACK));
        let (_, out) = lab.run(&ack, 40);
        assert_eq!(backend_of(&out, &ack), *backend, "port {port}");
    }
    assert_eq!(lab.worker.counters.flows_rescheduled, 0);
}

#[test]
fn without_eligible_backends_new_flows_are_dropped_and_counted() {
    let mut lab = Lab::new("ipip");
    lab.rebuild(&config("ipip", false, "DEFAULT_FOR_PROTOCOL"), |_| false, 1);
    let f = eth(&tcp(CLIENT, 1234, VIP, 80, SYN));
    assert_eq!(lab.run(&f, 2).0, Verdict::Drop(DropReason::NoBackend));
    let web = lab
        .snap
        .compiled
        .children
        .iter()
        .position(|ch| ch.name == "web-ag0")
        .expect("child");
    assert_eq!(lab.worker.counters.children[web].drops, 1);
}

#[test]
fn two_services_on_one_vip_never_share_flow_entries() {
    // CLIENT_IP affinity keys flows on (client, VIP) only: the TCP flow of
    // service "web" and the UDP flow of service "dns" from one client must
    // still be separate entries, each reaching its own service's backends.
    let cfg = r#"
[node]
name = "t"
region = "r"
zone = "z"

[[forwarding_rules]]
name = "web"
vips = ["10.0.0.10"]
protocol = "TCP"
ports = "80"
backend_service = "web"

[[forwarding_rules]]
name = "dns"
vips = ["10.0.0.10"]
protocol = "UDP"
ports = 53
backend_service = "dns"

[[backend_services]]
name = "web"
delivery = "ipip"
session_affinity = "CLIENT_IP"
[[backend_services.groups]]
name = "a"
region = "r"
zone = "z"
endpoints = [{ address = "10.0.1.11" }]

[[backend_services]]
name = "dns"
delivery = "ipip"
session_affinity = "CLIENT_IP"
[[backend_services.groups]]
name = "b"
region = "r"
zone = "z"
endpoints = [{ address = "10.0.2.22" }]
"#;
    let mut lab = Lab::with(cfg, 4096);
    let t = eth(&tcp(CLIENT, 40000, VIP, 80, SYN));
    let (_, out) = lab.run(&t, 1);
    assert_eq!(backend_of(&out, &t).to_string(), "10.0.1.11");
    let u = eth(&udp(CLIENT, 40000, VIP, 53));
    let (_, out) = lab.run(&u, 1);
    assert_eq!(backend_of(&out, &u).to_string(), "10.0.2.22");
    assert_eq!(lab.worker.counters.new_flows, 2);
}

/// IPv4 fragment of a UDP datagram: `offset` in 8-byte units, `more` = MF.
fn udp_fragment(id: u16, offset: u16, more: bool, payload: &[u8]) -> Vec<u8> {
    let mut ip = vec![0x45, 0, 0, 0, 0, 0, 0, 0, 64, 17, 0, 0];
    ip[2..4].copy_from_slice(&((20 + payload.len()) as u16).to_be_bytes());
    ip[4..6].copy_from_slice(&id.to_be_bytes());
    ip[6..8].copy_from_slice(&(offset | if more { 0x2000 } else { 0 }).to_be_bytes());
    ip.extend_from_slice(&CLIENT);
    ip.extend_from_slice(&VIP);
    let c = csum(0, &ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    ip.extend_from_slice(payload);
    eth(&ip)
}

#[test]
fn all_fragments_of_a_datagram_reach_one_backend_in_any_order() {
    // Fragments match only all-port rules (M13): UDP on every port here.
    let cfg =
        config("ipip", false, "DEFAULT_FOR_PROTOCOL").replace("ports = 53", "ports = \"all\"");
    let mut lab = Lab::with(&cfg, 4096);
    for id in 0..40u16 {
        // First fragment: UDP header (port 53) + 8 bytes; second: the rest.
        let mut first_payload = vec![0x13, 0x88, 0, 53, 0, 24, 0, 0];
        first_payload.extend_from_slice(&[0xaa; 8]);
        let first = udp_fragment(1000 + id, 0, true, &first_payload);
        let second = udp_fragment(1000 + id, 2, false, &[0xbb; 8]);
        let (order_a, order_b) = if id % 2 == 0 {
            (&first, &second)
        } else {
            (&second, &first)
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
    let frag = udp_fragment(7, 2, false, &[0xbb; 8]);
    assert_eq!(
        lab.run(&frag, 1).0,
        Verdict::Drop(DropReason::FragmentNoRule)
    );
}

/// A VIP of each family with TCP rules `t4`/`t6` on `tcp_ports`, and
/// `L3_DEFAULT` rules `l3v4`/`l3v6` beside them if `l3_default`.
fn fragment_config(tcp_ports: &str, l3_default: bool) -> String {
    let mut cfg = dual_node();
    cfg += &format!(
        r#"
[[forwarding_rules]]
name = "t4"
vips = ["10.0.0.10"]
protocol = "TCP"
ports = "{tcp_ports}"
backend_service = "s4"

[[forwarding_rules]]
name = "t6"
vips = ["{VIP6}"]
protocol = "TCP"
ports = "{tcp_ports}"
backend_service = "s6"
"#
    );
    if l3_default {
        cfg += &format!(
            r#"
[[forwarding_rules]]
name = "l3v4"
vips = ["10.0.0.10"]
protocol = "L3_DEFAULT"
ports = "all"
backend_service = "s4"

[[forwarding_rules]]
name = "l3v6"
vips = ["{VIP6}"]
protocol = "L3_DEFAULT"
ports = "all"
backend_service = "s6"
"#
        );
    }
    cfg += r#"
[[backend_services]]
name = "s4"
delivery = "ipip"
[[backend_services.groups]]
name = "a"
region = "r"
zone = "z"
endpoints = [{ address = "10.0.1.11" }, { address = "10.0.1.12" }]

[[backend_services]]
name = "s6"
delivery = "ipip"
[[backend_services.groups]]
name = "b"
region = "r"
zone = "z"
endpoints = [{ address = "fd00:1::11" }, { address = "fd00:1::12" }]
"#;
    cfg
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Piece {
    /// An unfragmented packet.
    Whole,
    /// A first fragment (offset 0, more fragments): carries the TCP header.
    First,
    /// A later fragment (offset 24 bytes, last): no TCP header.
    Later,
    /// An IPv6 atomic fragment (offset 0, M = 0; RFC 6946): a whole packet.
    Atomic,
}

/// A TCP SYN from the client to the VIP's `port`, cut as `piece` says.
fn tcp_piece(v6: bool, piece: Piece, port: u16) -> Vec<u8> {
    let mut seg = vec![0u8; 20];
    seg[0..2].copy_from_slice(&40000u16.to_be_bytes());
    seg[2..4].copy_from_slice(&port.to_be_bytes());
    seg[12] = 5 << 4;
    seg[13] = SYN;
    // The fragment's part of the datagram's payload.
    let (offset, more, body) = match piece {
        Piece::Whole | Piece::Atomic => (0u16, false, seg),
        Piece::First => (0, true, [seg, vec![0xaa; 8]].concat()),
        Piece::Later => (24, false, vec![0xbb; 8]),
    };
    if !v6 {
        assert_ne!(piece, Piece::Atomic, "IPv4 has no atomic fragments");
        let mut ip = ipv4(CLIENT, VIP, 6, &body);
        let flags = if piece == Piece::Whole {
            0x4000 // DF
        } else {
            (offset / 8) | if more { 0x2000 } else { 0 }
        };
        ip[6..8].copy_from_slice(&flags.to_be_bytes());
        ip[10..12].fill(0);
        let c = csum(0, &ip[..20]);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        return eth(&ip);
    }
    let (next, payload) = if piece == Piece::Whole {
        (6, body)
    } else {
        let mut fh = vec![6, 0];
        fh.extend_from_slice(&(offset | u16::from(more)).to_be_bytes());
        fh.extend_from_slice(&0x0bad_cafeu32.to_be_bytes());
        (44, [fh, body].concat())
    };
    let mut ip = vec![0x60, 0, 0, 0];
    ip.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    ip.extend_from_slice(&[next, 64]);
    ip.extend_from_slice(&a6(CLIENT6));
    ip.extend_from_slice(&a6(VIP6));
    ip.extend_from_slice(&payload);
    frame(LB_MAC, CLIENT_MAC, None, 0x86dd, &ip)
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
    let mapped_vip = a6("::ffff:10.0.0.10");
    let mut seg = vec![0u8; 20];
    seg[0..2].copy_from_slice(&40000u16.to_be_bytes());
    seg[2..4].copy_from_slice(&80u16.to_be_bytes());
    seg[12] = 5 << 4;
    seg[13] = SYN;
    let to_mapped = frame(
        LB_MAC,
        CLIENT_MAC,
        None,
        0x86dd,
        &ipv6(a6(CLIENT6), mapped_vip, 6, 64, &seg, 16),
    );
    assert_eq!(
        lab.run(&to_mapped, 1).0,
        Verdict::Drop(DropReason::BadAddress)
    );
    let mut seg6 = seg.clone();
    seg6[2..4].copy_from_slice(&443u16.to_be_bytes());
    let from_mapped = frame(
        LB_MAC,
        CLIENT_MAC,
        None,
        0x86dd,
        &ipv6(a6("::ffff:192.0.2.7"), a6(VIP6), 6, 64, &seg6, 16),
    );
    assert_eq!(
        lab.run(&from_mapped, 1).0,
        Verdict::Drop(DropReason::BadAddress)
    );
    assert_eq!(lab.worker.counters.dropped(DropReason::BadAddress), 2);
    assert_eq!(lab.worker.counters.forwarded, 0);
    // The same SYN to the real VIPs is forwarded.
    assert_eq!(
        lab.run(&eth(&tcp(CLIENT, 40000, VIP, 80, SYN)), 1).0,
        Verdict::Forward
    );
    let real6 = frame(
        LB_MAC,
        CLIENT_MAC,
        None,
        0x86dd,
        &ipv6(a6(CLIENT6), a6(VIP6), 6, 64, &seg6, 16),
    );
    assert_eq!(lab.run(&real6, 1).0, Verdict::Forward);
}

#[test]
fn ipv6_vips_are_served_over_ipv6_tunnels() {
    let cfg = r#"
[node]
name = "t"
region = "r"
zone = "z"

[[ports]]
name = "up"
device = "net_ring0"
role = "uplink"
addresses = ["fd00::2/64"]

[[forwarding_rules]]
name = "web6"
vips = ["fd00::10"]
protocol = "TCP"
ports = "443"
backend_service = "web6"

[[backend_services]]
name = "web6"
delivery = "ipip"
[[backend_services.groups]]
name = "a"
region = "r"
zone = "z"
endpoints = [{ address = "fd00:1::11" }, { address = "fd00:1::12" }]
"#;
    let mut builder = SnapshotBuilder::new();
    let mut v6_local = local();
    v6_local.tunnel_src_v6 = Some("fd00:1::2".parse().expect("v6"));
    let snap = builder
        .build(compiled(cfg), v6_local, |_| EndpointHealth::HEALTHY, 0, 1)
        .expect("snapshot");
    let flows = FlowTable::new(flowtable::Config::with_capacity(64)).expect("table");
    let mut worker = Worker::new(1, snap.compiled.children.len());
    // Ethernet/IPv6/TCP SYN [2001:db8::7]:40000 -> [fd00::10]:443.
    let src: [u8; 16] = "2001:db8::7"
        .parse::<std::net::Ipv6Addr>()
        .expect("v6")
        .octets();
    let dst: [u8; 16] = "fd00::10"
        .parse::<std::net::Ipv6Addr>()
        .expect("v6")
        .octets();
    let mut tcp = vec![0u8; 20];
    tcp[0..2].copy_from_slice(&40000u16.to_be_bytes());
    tcp[2..4].copy_from_slice(&443u16.to_be_bytes());
    tcp[12] = 0x50;
    tcp[13] = SYN;
    let mut frame = LB_MAC.to_vec();
    frame.extend_from_slice(&CLIENT_MAC);
    frame.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0, 0, 20, 6, 64]);
    frame.extend_from_slice(&src);
    frame.extend_from_slice(&dst);
    frame.extend_from_slice(&tcp);
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
        .build(compiled(cfg), no_src, |_| EndpointHealth::HEALTHY, 0, 1)
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
fn two_services(web_first: bool, web_eps: usize) -> String {
    let head = r#"
[node]
name = "t"
region = "r"
zone = "z"

[[ports]]
name = "up"
device = "net_ring0"
role = "uplink"
addresses = ["10.0.0.2/24"]

[[forwarding_rules]]
name = "web"
vips = ["10.0.0.10"]
protocol = "TCP"
ports = "80"
backend_service = "web"

[[forwarding_rules]]
name = "dns"
vips = ["10.0.0.10"]
protocol = "UDP"
ports = 53
backend_service = "other"
"#;
    let eps: Vec<String> = (0..web_eps)
        .map(|i| format!("{{ address = \"10.0.1.{}\" }}", 11 + i))
        .collect();
    let web = format!(
        "\n[[backend_services]]\nname = \"web\"\ndelivery = \"ipip\"\ngroups = [{{ name = \"a\", region = \"r\", zone = \"z\", endpoints = [{}] }}]\n",
        eps.join(", ")
    );
    let other = "\n[[backend_services]]\nname = \"other\"\ndelivery = \"ipip\"\ngroups = [{ name = \"b\", region = \"r\", zone = \"z\", endpoints = [{ address = \"10.0.2.21\" }] }]\n";
    if web_first {
        format!("{head}{web}{other}")
    } else {
        format!("{head}{other}{web}")
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
        let f = eth(&tcp(CLIENT, port, VIP, 80, SYN));
        let (_, out) = lab.run(&f, 1);
        before.push((port, backend_of(&out, &f)));
    }
    let reordered = two_services(false, 4);
    lab.rebuild(&reordered, |_| true, 2);
    // Where the new configuration would put each connection without entries.
    let mut fresh = Lab::with(&reordered, 4096);
    let mut moved_by_maglev = 0;
    for (port, backend) in &before {
        let ack = eth(&tcp(CLIENT, *port, VIP, 80, ACK));
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
    let four = config("ipip", true, "DEFAULT_FOR_PROTOCOL");
    let mut lab = Lab::with(&four, 4096);
    let mut port = 30000u16;
    let port = loop {
        let f = eth(&tcp(CLIENT, port, VIP, 80, SYN));
        let (_, out) = lab.run(&f, 1);
        if backend_of(&out, &f).to_string() == "10.0.1.14" {
            break port;
        }
        port += 1;
    };
    lab.rebuild(&config("ipip", false, "DEFAULT_FOR_PROTOCOL"), |_| true, 2);
    let ack = eth(&tcp(CLIENT, port, VIP, 80, ACK));
    let (_, out) = lab.run(&ack, 3);
    assert_eq!(
        backend_of(&out, &ack).to_string(),
        "10.0.1.14",
        "the established connection drains"
    );
    // The client reuses the port for a new connection: a SYN on the tuple.
    let syn = eth(&tcp(CLIENT, port, VIP, 80, SYN));
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
    let f = eth(&tcp(CLIENT, 41000, VIP, 80, SYN));
    lab.run(&f, 1);
    lab.run(&eth(&tcp(CLIENT, 41000, VIP, 80, ACK | 0x01)), 2); // FIN
    let (v, _) = lab.run(&eth(&tcp(CLIENT, 41000, VIP, 80, SYN)), 3);
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
// expected frames are built here byte by byte, independently of `wire`.

const VIP6: &str = "fd00::10";
const OWN6: &str = "fd00::2";
const CLIENT6: &str = "2001:db8::7";

fn a6(s: &str) -> [u8; 16] {
    s.parse::<std::net::Ipv6Addr>().expect("v6").octets()
}

/// The node, with an uplink address of each family.
fn dual_node() -> String {
    format!(
        r#"
[node]
name = "t"
region = "r"
zone = "z"

[[ports]]
name = "up"
device = "net_ring0"
role = "uplink"
addresses = ["10.0.0.2/24", "{OWN6}/64"]
"#
    )
}

/// The balancer with an IPv4 and an IPv6 VIP, both served by services whose
/// `no_backend_action` is `action`, and an own address of each family.
fn dual_config(action: &str) -> String {
    dual_node()
        + &format!(
            r#"
[[forwarding_rules]]
name = "web"
vips = ["10.0.0.10"]
protocol = "TCP"
ports = "80"
backend_service = "web"

[[forwarding_rules]]
name = "dns"
vips = ["10.0.0.10"]
protocol = "UDP"
ports = 53
backend_service = "web"

[[forwarding_rules]]
name = "web6"
vips = ["{VIP6}"]
protocol = "TCP"
ports = "443"
backend_service = "web6"

[[backend_services]]
name = "web"
delivery = "ipip"
no_backend_action = "{action}"
[[backend_services.groups]]
name = "a"
region = "r"
zone = "z"
endpoints = [{{ address = "10.0.1.11" }}, {{ address = "10.0.1.12" }}]

[[backend_services]]
name = "web6"
delivery = "ipip"
no_backend_action = "{action}"
[[backend_services.groups]]
name = "b"
region = "r"
zone = "z"
endpoints = [{{ address = "fd00:1::11" }}, {{ address = "fd00:1::12" }}]
"#
        )
}

fn dual_lab(action: &str, healthy: bool) -> Lab {
    let cfg = dual_config(action);
    let mut lab = Lab::with(&cfg, 4096);
    lab.snap.local.own_addrs.push(OWN6.parse().expect("v6"));
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

/// One's-complement sum of an IPv6 pseudo header.
fn pseudo6(src: [u8; 16], dst: [u8; 16], next: u8, len: usize) -> u32 {
    let mut sum: u32 = src
        .chunks(2)
        .chain(dst.chunks(2))
        .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
        .sum();
    sum += u32::from(next) + len as u32;
    sum
}

/// An IPv6 packet with hop limit `hop` and the upper-layer checksum at `at`
/// of `l4` filled in.
fn ipv6(src: [u8; 16], dst: [u8; 16], next: u8, hop: u8, l4: &[u8], at: usize) -> Vec<u8> {
    let mut seg = l4.to_vec();
    seg[at..at + 2].fill(0);
    let c = csum(pseudo6(src, dst, next, seg.len()), &seg);
    seg[at..at + 2].copy_from_slice(&c.to_be_bytes());
    let mut ip = vec![0x60, 0, 0, 0];
    ip.extend_from_slice(&(seg.len() as u16).to_be_bytes());
    ip.extend_from_slice(&[next, hop]);
    ip.extend_from_slice(&src);
    ip.extend_from_slice(&dst);
    ip.extend_from_slice(&seg);
    ip
}

/// A frame from `src_mac` to `dst_mac` with optional 802.1Q `vlan`.
fn frame(
    dst_mac: [u8; 6],
    src_mac: [u8; 6],
    vlan: Option<u16>,
    ethertype: u16,
    ip: &[u8],
) -> Vec<u8> {
    let mut f = dst_mac.to_vec();
    f.extend_from_slice(&src_mac);
    if let Some(vid) = vlan {
        f.extend_from_slice(&[0x81, 0x00]);
        f.extend_from_slice(&vid.to_be_bytes());
    }
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(ip);
    f
}

/// An ICMPv6 neighbor discovery message: type, code, a 32-bit flags field,
/// the target, and an optional link-layer address option.
fn nd_msg(ty: u8, code: u8, flags: u8, target: [u8; 16], ll: Option<(u8, [u8; 6])>) -> Vec<u8> {
    let mut m = vec![ty, code, 0, 0, flags, 0, 0, 0];
    m.extend_from_slice(&target);
    if let Some((kind, mac)) = ll {
        m.extend_from_slice(&[kind, 1]);
        m.extend_from_slice(&mac);
    }
    m
}

fn solicited_node(target: [u8; 16]) -> [u8; 16] {
    let mut a = a6("ff02::1:ff00:0");
    a[13..].copy_from_slice(&target[13..]);
    a
}

/// A neighbor solicitation frame for `target` from `src` to `dst`.
fn ns(
    src: [u8; 16],
    dst: [u8; 16],
    target: [u8; 16],
    sll: bool,
    hop: u8,
    vlan: Option<u16>,
) -> Vec<u8> {
    let ll = sll.then_some((1, CLIENT_MAC));
    let ip = ipv6(src, dst, 58, hop, &nd_msg(135, 0, 0, target, ll), 2);
    let mac = if dst[0] == 0xff {
        [0x33, 0x33, dst[12], dst[13], dst[14], dst[15]]
    } else {
        LB_MAC
    };
    frame(mac, CLIENT_MAC, vlan, 0x86dd, &ip)
}

/// The advertisement answering a solicitation for `target`: to `dst`
/// (solicited) or all nodes (not), from our MAC with our link-layer address.
fn na(target: [u8; 16], dst: Option<([u8; 16], [u8; 6])>, vlan: Option<u16>) -> Vec<u8> {
    let (ip_dst, mac, flags) = match dst {
        Some((a, m)) => (a, m, 0x60),
        None => (a6("ff02::1"), [0x33, 0x33, 0, 0, 0, 1], 0x20),
    };
    let m = nd_msg(136, 0, flags, target, Some((2, LB_MAC)));
    frame(
        mac,
        LB_MAC,
        vlan,
        0x86dd,
        &ipv6(target, ip_dst, 58, 255, &m, 2),
    )
}

/// A fixture: a frame in, the verdict, and the reply's exact bytes if any.
type Case = (&'static str, Vec<u8>, Verdict, Option<Vec<u8>>);

#[test]
fn neighbor_solicitations_for_our_ipv6_addresses_are_answered_in_place() {
    let (vip, own, client) = (a6(VIP6), a6(OWN6), a6(CLIENT6));
    let router = a6("fd00::1");
    let mut bad_sum = ns(client, solicited_node(vip), vip, true, 255, None);
    *bad_sum.last_mut().expect("byte") ^= 0xff;
    let rs = frame(
        [0x33, 0x33, 0, 0, 0, 2],
        CLIENT_MAC,
        None,
        0x86dd,
        &ipv6(
            client,
            a6("ff02::2"),
            58,
            255,
            &[133, 0, 0, 0, 0, 0, 0, 0],
            2,
        ),
    );
    let ra = frame(
        [0x33, 0x33, 0, 0, 0, 1],
        ROUTER_MAC,
        None,
        0x86dd,
        &ipv6(
            router,
            a6("ff02::1"),
            58,
            255,
            &[134, 0, 0, 0, 64, 0, 7, 8, 0, 0, 0, 0, 0, 0, 0, 0],
            2,
        ),
    );
    let na_in = frame(
        LB_MAC,
        ROUTER_MAC,
        None,
        0x86dd,
        &ipv6(
            router,
            own,
            58,
            255,
            &nd_msg(136, 0, 0x60, router, Some((2, ROUTER_MAC))),
            2,
        ),
    );
    let echo_all = frame(
        [0x33, 0x33, 0, 0, 0, 1],
        CLIENT_MAC,
        None,
        0x86dd,
        &ipv6(
            client,
            a6("ff02::1"),
            58,
            64,
            &[128, 0, 0, 0, 0, 1, 0, 1],
            2,
        ),
    );
    let cases: Vec<Case> = vec![
        (
            "NS for the v6 VIP to its solicited-node group",
            ns(client, solicited_node(vip), vip, true, 255, None),
            Verdict::Reply,
            Some(na(vip, Some((client, CLIENT_MAC)), None)),
        ),
        (
            "NS for our own v6 address, VLAN-tagged: the tag is kept",
            ns(client, solicited_node(own), own, true, 255, Some(42)),
            Verdict::Reply,
            Some(na(own, Some((client, CLIENT_MAC)), Some(42))),
        ),
        (
            "unicast reachability probe without a source link-layer option",
            ns(client, vip, vip, false, 255, None),
            Verdict::Reply,
            Some(na(vip, Some((client, CLIENT_MAC)), None)),
        ),
        (
            "duplicate address detection from ::, answered to all nodes",
            ns(a6("::"), solicited_node(vip), vip, false, 255, None),
            Verdict::Reply,
            Some(na(vip, None, None)),
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
            "echo request to all nodes is still not ours",
            echo_all,
            Verdict::Drop(DropReason::NotOurs),
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
    assert_eq!(
        c.rx_packets,
        c.forwarded + c.total_drops() + c.to_host + c.replies(),
        "every packet is counted once"
    );
}

/// A TCP segment with sequence and acknowledgment numbers and a payload.
fn segment(
    (src, sport): (&[u8], u16),
    (dst, dport): (&[u8], u16),
    flags: u8,
    seq: u32,
    ack: u32,
    payload: &[u8],
) -> Vec<u8> {
    let mut seg = vec![0u8; 20];
    seg[0..2].copy_from_slice(&sport.to_be_bytes());
    seg[2..4].copy_from_slice(&dport.to_be_bytes());
    seg[4..8].copy_from_slice(&seq.to_be_bytes());
    seg[8..12].copy_from_slice(&ack.to_be_bytes());
    seg[12] = 5 << 4;
    seg[13] = flags;
    seg[14..16].copy_from_slice(&8192u16.to_be_bytes());
    seg.extend_from_slice(payload);
    match (<[u8; 4]>::try_from(src), <[u8; 4]>::try_from(dst)) {
        (Ok(s), Ok(d)) => {
            l4_csum(s, d, 6, &mut seg, 16);
            ipv4(s, d, 6, &seg)
        }
        _ => {
            let (s, d) = (src.try_into().expect("v6"), dst.try_into().expect("v6"));
            ipv6(s, d, 6, 64, &seg, 16)
        }
    }
}

/// The reset we expect, from `vip`:`vport` to `client`:`cport`: IPv4 with
/// ID 0, DF, TTL 64 or IPv6 with hop limit 64; window 0, no options.
fn expected_reset(
    (vip, vport): (&[u8], u16),
    (client, cport): (&[u8], u16),
    flags: u8,
    seq: u32,
    ack: u32,
    vlan: Option<u16>,
) -> Vec<u8> {
    let mut seg = vec![0u8; 20];
    seg[0..2].copy_from_slice(&vport.to_be_bytes());
    seg[2..4].copy_from_slice(&cport.to_be_bytes());
    seg[4..8].copy_from_slice(&seq.to_be_bytes());
    seg[8..12].copy_from_slice(&ack.to_be_bytes());
    seg[12] = 5 << 4;
    seg[13] = flags;
    let (ethertype, ip) = match (<[u8; 4]>::try_from(vip), <[u8; 4]>::try_from(client)) {
        (Ok(v), Ok(c)) => {
            l4_csum(v, c, 6, &mut seg, 16);
            let mut ip = vec![0x45, 0, 0, 40, 0, 0, 0x40, 0, 64, 6, 0, 0];
            ip.extend_from_slice(&v);
            ip.extend_from_slice(&c);
            let sum = csum(0, &ip);
            ip[10..12].copy_from_slice(&sum.to_be_bytes());
            ip.extend_from_slice(&seg);
            (0x0800, ip)
        }
        _ => {
            let (v, c) = (vip.try_into().expect("v6"), client.try_into().expect("v6"));
            (0x86dd, ipv6(v, c, 6, 64, &seg, 16))
        }
    };
    frame(CLIENT_MAC, LB_MAC, vlan, ethertype, &ip)
}

const RST: u8 = 0x04;
const FIN: u8 = 0x01;
const PSH: u8 = 0x08;

#[test]
fn without_backends_tcp_is_answered_with_a_reset_when_the_service_says_so() {
    let (vip6, client6) = (a6(VIP6), a6(CLIENT6));
    let tagged = {
        let f = eth(&segment((&CLIENT, 40003), (&VIP, 80), SYN, 7, 0, &[]));
        frame(LB_MAC, CLIENT_MAC, Some(300), 0x0800, &f[14..])
    };
    let mut bad_sum = eth(&segment((&CLIENT, 40004), (&VIP, 80), SYN, 7, 0, b"x"));
    *bad_sum.last_mut().expect("byte") ^= 0xff;
    let cases: Vec<Case> = vec![
        (
            "SYN over IPv4: RST|ACK acknowledging the SYN",
            eth(&segment((&CLIENT, 40000), (&VIP, 80), SYN, 1000, 0, &[])),
            Verdict::Reply,
            Some(expected_reset(
                (&VIP, 80),
                (&CLIENT, 40000),
                RST | ACK,
                0,
                1001,
                None,
            )),
        ),
        (
            "ACK with data over IPv4: RST at the acknowledged sequence number",
            eth(&segment(
                (&CLIENT, 40001),
                (&VIP, 80),
                ACK | PSH,
                5000,
                0x8000_0001,
                b"GET / HTTP/1.1\r\n\r\n",
            )),
            Verdict::Reply,
            Some(expected_reset(
                (&VIP, 80),
                (&CLIENT, 40001),
                RST,
                0x8000_0001,
                0,
                None,
            )),
        ),
        (
            "FIN with data and no ACK: payload and FIN acknowledged, wrapping",
            eth(&segment(
                (&CLIENT, 40002),
                (&VIP, 80),
                FIN,
                u32::MAX - 1,
                0,
                b"bye",
            )),
            Verdict::Reply,
            Some(expected_reset(
                (&VIP, 80),
                (&CLIENT, 40002),
                RST | ACK,
                0,
                2,
                None,
            )),
        ),
        (
            "VLAN-tagged SYN: the tag is kept",
            tagged,
            Verdict::Reply,
            Some(expected_reset(
                (&VIP, 80),
                (&CLIENT, 40003),
                RST | ACK,
                0,
                8,
                Some(300),
            )),
        ),
        (
            "SYN over IPv6",
            frame(
                LB_MAC,
                CLIENT_MAC,
                None,
                0x86dd,
                &segment((&client6, 50000), (&vip6, 443), SYN, 0xdead_beef, 0, &[]),
            ),
            Verdict::Reply,
            Some(expected_reset(
                (&vip6, 443),
                (&client6, 50000),
                RST | ACK,
                0,
                0xdead_bef0,
                None,
            )),
        ),
        (
            "ACK over IPv6",
            frame(
                LB_MAC,
                CLIENT_MAC,
                None,
                0x86dd,
                &segment((&client6, 50001), (&vip6, 443), ACK, 1, 99, b"data"),
            ),
            Verdict::Reply,
            Some(expected_reset(
                (&vip6, 443),
                (&client6, 50001),
                RST,
                99,
                0,
                None,
            )),
        ),
        (
            "a reset is never answered",
            eth(&segment((&CLIENT, 40005), (&VIP, 80), RST | ACK, 1, 2, &[])),
            Verdict::Drop(DropReason::NoBackend),
            None,
        ),
        (
            "UDP is dropped",
            eth(&udp(CLIENT, 5353, VIP, 53)),
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
    assert_eq!(c.children[child(&lab, "web6-ag0")].drops, 2);
    assert_eq!(c.children[child(&lab, "dns-ag0")].drops, 1);
}

#[test]
fn without_backends_the_default_action_drops_tcp_too() {
    let (vip6, client6) = (a6(VIP6), a6(CLIENT6));
    let mut lab = dual_lab("drop", false);
    let cases = [
        eth(&segment((&CLIENT, 40000), (&VIP, 80), SYN, 1000, 0, &[])),
        eth(&segment((&CLIENT, 40001), (&VIP, 80), ACK, 1000, 5, b"x")),
        frame(
            LB_MAC,
            CLIENT_MAC,
            None,
            0x86dd,
            &segment((&client6, 50000), (&vip6, 443), SYN, 1, 0, &[]),
        ),
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
        let t = eth(&tcp(CLIENT, 40000 + port, VIP, 80, SYN));
        let (_, out) = lab.run(&t, 1);
        flows.push((40000 + port, backend_of(&out, &t)));
    }
    let sick = flows[0].1.to_string();
    let cfg = config("ipip", false, "DEFAULT_FOR_PROTOCOL");
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
        let f = eth(&tcp(CLIENT, *p, VIP, 80, ACK));
        let (_, out) = lab.run(&f, 11);
        assert_eq!(
            backend_of(&out, &f).to_string(),
            sick,
            "still draining at 11"
        );
    }
    for p in &on_sick {
        let f = eth(&tcp(CLIENT, *p, VIP, 80, ACK));
        let (_, out) = lab.run(&f, 12);
        assert_ne!(backend_of(&out, &f).to_string(), sick, "moved at 12");
    }
}
