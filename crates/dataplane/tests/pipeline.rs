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
        c.forwarded + c.total_drops() + c.to_host + c.arp_replies,
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
        let f = eth(&udp(CLIENT, 10000 + port, VIP, 53));
        assert_eq!(lab.run(&f, 1).0, Verdict::Forward);
    }
    let c = &lab.worker.counters;
    assert!(
        c.stateless > 0,
        "a 16-entry table cannot hold 400 UDP flows"
    );
    assert_eq!(c.new_flows + c.stateless, 400);
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
    let mut lab = Lab::new("ipip");
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
    // A fragment for a protocol with two rules on the VIP cannot be placed.
    let cfg = config("ipip", false, "DEFAULT_FOR_PROTOCOL").replace(
        "[[backend_services]]",
        "[[forwarding_rules]]\nname = \"dns2\"\nvips = [\"10.0.0.10\"]\nprotocol = \"UDP\"\nports = 5353\nbackend_service = \"web\"\n\n[[backend_services]]",
    );
    let mut lab = Lab::with(&cfg, 64);
    let frag = udp_fragment(7, 2, false, &[0xbb; 8]);
    assert_eq!(lab.run(&frag, 1).0, Verdict::Drop(DropReason::NoRule));
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
