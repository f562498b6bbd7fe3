#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly
//! The worker loop (`Engine`) over an in-memory `PacketIo`: what each verdict
//! does to a packet's way out, the exception path in both directions, and the
//! accounting of everything a port does not take.

use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use config::schema::PortRole;
use dataplane::{
    DropReason, EndpointHealth, Engine, HostPath, Local, PacketIo, Pipeline, Routes,
    SnapshotBuilder, VecBurst,
};
use flowtable::FlowTable;
use testkit::config::{Config, endpoint_list, group, port, rule, service};
use testkit::packet::{Packet, arp_request};
use wire::buf::{MemBuf, PacketBuf};
use wire::burst::PacketBurst;

type Pkt = MemBuf<Vec<u8>>;

const LB_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
const BE_MAC: [u8; 6] = [2, 0, 0, 0, 0, 2];
const CLIENT_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0x77];

/// Ports with queued input and recorded output; `accept[p]` limits how many
/// packets one TX call of port `p` takes.
struct MemIo {
    rx: Vec<VecDeque<Vec<u8>>>,
    tx: Vec<Vec<Vec<u8>>>,
    accept: Vec<usize>,
    /// Per port, the number of packets each TX call carried.
    calls: Vec<Vec<usize>>,
    /// Buffers `alloc` still gives.
    buffers: usize,
}

impl MemIo {
    fn new(ports: usize) -> MemIo {
        MemIo {
            rx: vec![VecDeque::new(); ports],
            tx: vec![Vec::new(); ports],
            accept: vec![usize::MAX; ports],
            calls: vec![Vec::new(); ports],
            buffers: usize::MAX,
        }
    }
}

impl PacketIo for MemIo {
    type Burst = VecBurst<Pkt>;

    fn rx_burst(&mut self, port: usize, burst: &mut VecBurst<Pkt>) -> usize {
        let mut n = 0;
        while let Some(f) = self.rx[port].pop_front() {
            let p = MemBuf::new(vec![0u8; 2048], 128, &f).expect("fits");
            if let Err(p) = burst.push(p) {
                self.rx[port].push_front(p.data().to_vec());
                break;
            }
            n += 1;
        }
        n
    }

    fn alloc(&mut self, _port: usize) -> Option<Pkt> {
        self.buffers = self.buffers.checked_sub(1)?;
        MemBuf::new(vec![0u8; 2048], 128, &[]).ok()
    }

    fn tx_burst(&mut self, port: usize, burst: &mut VecBurst<Pkt>) -> usize {
        self.calls[port].push(burst.len());
        let (mut taken, mut refused) = (0, 0);
        let accept = self.accept[port];
        let out = &mut self.tx[port];
        burst.drain_each(|_, p| {
            if taken < accept {
                out.push(p.data().to_vec());
                taken += 1;
            } else {
                refused += 1;
            }
        });
        refused
    }
}

/// An uplink and a backend port (and the exception port if `exception`);
/// UDP 53 on 10.0.0.10 goes over GUE to two endpoints.
fn config(exception: bool) -> String {
    let mut c = Config::new()
        .port(port("up", "net_ring0", "uplink").strs("addresses", &["10.0.0.2/24"]))
        .port(
            port("be", "net_ring1", "backend")
                .strs("addresses", &["10.0.1.2/30"])
                .str("gateway_mac", "02:00:00:00:00:fe"),
        )
        .rule(rule("dns", &["10.0.0.10"], "UDP", "", "dns").set("ports", 53))
        .service(service("dns", "gue").child(
            group("a", "r", "z").set("endpoints", endpoint_list(&["10.0.1.11", "10.0.1.12"])),
        ));
    if exception {
        c = c.port(port("kernel", "net_tap0", "exception"));
    }
    c.build()
}

const CLIENT: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 7);

/// Ethernet/IPv4/UDP from 192.0.2.7:`sport` to `dst`:`dport`.
fn udp(dst: [u8; 4], sport: u16, dport: u16) -> Vec<u8> {
    Packet::udp(CLIENT.into(), IpAddr::from(dst), sport, dport)
        .payload(&[1, 2, 3, 4])
        .dont_frag(false)
        .udp_checksum(false)
        .macs(CLIENT_MAC, LB_MAC)
        .frame()
}

/// A broadcast ARP request from 10.0.0.1 for `target`.
fn arp_request_to(target: [u8; 4]) -> Vec<u8> {
    arp_request(CLIENT_MAC, Ipv4Addr::new(10, 0, 0, 1), target.into())
}

struct Setup {
    engine: Engine<VecBurst<Pkt>>,
    snap: dataplane::Snapshot,
    flows: FlowTable,
    io: MemIo,
}

fn setup(exception: bool) -> Setup {
    setup_text(&config(exception))
}

/// [`config`] with two exception ports: "kernel" (port 2) for the uplink,
/// "kernel-be" (port 3) for the backend port.
fn setup_per_port() -> Setup {
    let text = format!(
        "{}\n{}",
        config(true),
        port("kernel-be", "net_tap1", "exception").str("for_port", "be")
    );
    setup_text(&text)
}

fn setup_text(text: &str) -> Setup {
    let compiled = match config::load_str("t.toml", text, &config::Env::default()) {
        Ok(l) => Arc::new(l.compiled),
        Err(e) => panic!("{e}"),
    };
    let roles: Vec<PortRole> = compiled.settings.ports.iter().map(|p| p.role).collect();
    let routes = Routes::with_exceptions(&roles, &compiled.settings.exception_for);
    // As `spillway run` sets them: an exception port has its data port's MAC.
    let local = Local::from_config(&compiled, |device| {
        Some(if device == "net_ring1" || device == "net_tap1" {
            BE_MAC
        } else {
            LB_MAC
        })
    });
    let snap = SnapshotBuilder::new()
        .build(compiled.clone(), local, |_| EndpointHealth::HEALTHY, 0, 1)
        .expect("snapshot");
    let flows = FlowTable::new(flowtable::Config::with_capacity(1024)).expect("flows");
    let worker = Pipeline::new(1, compiled.children.len());
    Setup {
        engine: Engine::with_routes(worker, &roles, routes, 32, || VecBurst::with_capacity(32)),
        snap,
        flows,
        io: MemIo::new(roles.len()),
    }
}

impl Setup {
    fn poll(&mut self) -> usize {
        self.engine.poll(&mut self.io, &self.snap, &self.flows, 0)
    }
}

#[test]
fn each_verdict_leaves_by_its_port_in_order() {
    let mut s = setup(true);
    let (up, be, kernel) = (0, 1, 2);
    let vip_frames: Vec<Vec<u8>> = (0..40).map(|i| udp([10, 0, 0, 10], 1000 + i, 53)).collect();
    s.io.rx[up].extend(vip_frames.iter().cloned());
    s.io.rx[up].push_back(arp_request_to([10, 0, 0, 10]));
    s.io.rx[up].push_back(udp([10, 0, 0, 2], 5000, 22)); // the host's own address
    s.io.rx[up].push_back(udp([10, 0, 0, 10], 5000, 54)); // no rule: dropped
    s.io.rx[kernel].push_back(udp([198, 51, 100, 1], 179, 179)); // the host talking
    // 43 frames on the uplink: a burst of 32, then 11; one from the host.
    assert_eq!(s.poll(), 33);
    assert_eq!(s.poll(), 11);
    assert_eq!(s.poll(), 0);

    // Forwarded: encapsulated, on the backend port, in arrival order.
    assert_eq!(s.io.tx[be].len(), 40);
    for (out, inp) in s.io.tx[be].iter().zip(&vip_frames) {
        assert!(
            out.ends_with(&inp[14..]),
            "the inner packet is the received one"
        );
        assert_eq!(&out[12..14], &[0x08, 0x00]);
        assert_eq!(out[14 + 9], 17, "GUE over UDP");
    }
    // ARP answered on the port it came in on; the host's packet went out the
    // uplink as sent.
    assert_eq!(s.io.tx[up].len(), 2);
    assert_eq!(s.io.tx[up][0], udp([198, 51, 100, 1], 179, 179));
    assert_eq!(&s.io.tx[up][1][12..14], &[0x08, 0x06]);
    assert_eq!(&s.io.tx[up][1][20..22], &[0, 2], "an ARP reply");
    // To the host: exactly the frame received.
    assert_eq!(s.io.tx[kernel], vec![udp([10, 0, 0, 2], 5000, 22)]);

    let c = &s.engine.worker.counters;
    assert_eq!(c.rx_packets, 43);
    assert_eq!(
        (c.forwarded, c.arp_replies, c.to_host, c.from_host),
        (40, 1, 1, 1)
    );
    assert_eq!(c.dropped(dataplane::DropReason::NoRule), 1);
    assert_eq!((c.tx_dropped, c.host_dropped), (0, 0));
}

#[test]
fn without_an_exception_port_host_traffic_is_dropped_and_counted() {
    let mut s = setup(false);
    s.io.rx[0].push_back(udp([10, 0, 0, 2], 5000, 22));
    s.io.rx[0].push_back(udp([10, 0, 0, 10], 5000, 53));
    assert_eq!(s.poll(), 2);
    let c = &s.engine.worker.counters;
    assert_eq!((c.to_host, c.host_dropped, c.forwarded), (1, 1, 1));
    assert_eq!(s.io.tx[0].len(), 0);
    assert_eq!(s.io.tx[1].len(), 1);
}

#[test]
fn what_a_port_refuses_is_freed_and_counted() {
    let mut s = setup(true);
    s.io.accept[1] = 5;
    s.io.rx[0].extend((0..20).map(|i| udp([10, 0, 0, 10], 2000 + i, 53)));
    assert_eq!(s.poll(), 20);
    assert_eq!(s.io.tx[1].len(), 5);
    let c = &s.engine.worker.counters;
    assert_eq!((c.forwarded, c.tx_dropped), (20, 15));
}

#[test]
fn replies_carry_the_mac_of_the_port_the_request_came_in_on() {
    let mut s = setup(true);
    s.io.rx[0].push_back(arp_request_to([10, 0, 0, 10]));
    s.io.rx[1].push_back(arp_request(
        CLIENT_MAC,
        Ipv4Addr::new(10, 0, 1, 11),
        Ipv4Addr::new(10, 0, 1, 2),
    ));
    assert_eq!(s.poll(), 2);
    let (up, be) = (&s.io.tx[0], &s.io.tx[1]);
    assert_eq!((up.len(), be.len()), (1, 1));
    // Ethernet source and ARP sender hardware address.
    assert_eq!(&up[0][6..12], &LB_MAC);
    assert_eq!(&up[0][22..28], &LB_MAC);
    assert_eq!(&be[0][6..12], &BE_MAC);
    assert_eq!(&be[0][22..28], &BE_MAC);
    assert_eq!(&be[0][28..32], &[10, 0, 1, 2]);
    assert_eq!(s.engine.worker.counters.arp_replies, 2);
}

/// M47: ARP/NDP frames received on a data port are reported to the
/// management core's queue (the frame still goes where it went: the host),
/// and the frames it queues are sent on their port; a full queue is a
/// counted loss, never a wait.
#[test]
fn neighbour_sightings_are_queued_and_queued_frames_are_sent() {
    use dataplane::neighbour::{NeighbourQueues, OutFrame, SEND_PER_PASS};
    let mut s = setup(true);
    let q = Arc::new(NeighbourQueues::default());
    s.engine.worker.set_neighbour_queues(q.clone());
    let (up, be, kernel) = (0, 1, 2);
    // The gateway asks for our address (answered in place), a backend
    // answers our request (to the host too).
    s.io.rx[up].push_back(arp_request_to([10, 0, 0, 2]));
    let mut reply = [0u8; 64];
    let n = wire::neighbour::arp_request(
        &mut reply,
        BE_MAC,
        [10, 0, 1, 11].into(),
        [10, 0, 1, 2].into(),
    )
    .expect("frame");
    reply[21] = 2; // a reply
    s.io.rx[be].push_back(reply[..n].to_vec());
    s.poll();
    let seen: Vec<_> = std::iter::from_fn(|| q.sightings.pop()).collect();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(
        (seen[0].port, seen[0].ip, seen[0].mac),
        (0, IpAddr::from([10, 0, 0, 1]), CLIENT_MAC)
    );
    assert_eq!(
        (seen[1].port, seen[1].ip, seen[1].mac),
        (1, IpAddr::from([10, 0, 1, 11]), BE_MAC)
    );
    assert_eq!(s.io.tx[kernel].len(), 1, "the reply also reaches the host");
    assert_eq!(s.engine.worker.counters.nbr_sightings, 2);

    // Queued frames leave on their port, a few per pass.
    for i in 0..SEND_PER_PASS + 1 {
        let mut f = [0u8; 64];
        let n = wire::neighbour::gratuitous_arp(
            &mut f,
            LB_MAC,
            [10, 0, 0, u8::try_from(i).expect("small")].into(),
        )
        .expect("frame");
        q.outbox
            .push(OutFrame::new(up, &f[..n]).expect("fits"))
            .expect("room");
    }
    s.io.tx[up].clear();
    s.engine.send_queued(&mut s.io, &q);
    assert_eq!(s.io.tx[up].len(), SEND_PER_PASS);
    s.engine.send_queued(&mut s.io, &q);
    assert_eq!(s.io.tx[up].len(), SEND_PER_PASS + 1);
    assert_eq!(&s.io.tx[up][0][..6], &[0xff; 6]);
    assert_eq!(s.engine.worker.counters.nbr_sent, SEND_PER_PASS as u64 + 1);

    // A full sightings queue loses what does not fit, and counts it.
    while !q.sightings.is_full() {
        let _ = q.sightings.push(seen[0]);
    }
    s.io.rx[up].push_back(arp_request_to([10, 0, 0, 2]));
    s.poll();
    assert_eq!(s.engine.worker.counters.nbr_sightings_lost, 1);
}

/// A frame from the backend segment to the balancer's backend address
/// (10.0.1.2), addressed to `dst_mac`.
fn udp_on_backend_segment(dst_mac: [u8; 6], sport: u16) -> Vec<u8> {
    Packet::udp(
        Ipv4Addr::new(10, 0, 1, 11).into(),
        Ipv4Addr::new(10, 0, 1, 2).into(),
        sport,
        179,
    )
    .payload(&[5, 6, 7])
    .udp_checksum(false)
    .macs([2, 0, 0, 0, 1, 11], dst_mac)
    .frame()
}

/// M47: with one exception port per data port, what the kernel sends on
/// an exception port leaves by the data port it stands for, and what a data
/// port hands to the host reaches that port's own exception port, untouched.
#[test]
fn each_exception_port_carries_the_host_traffic_of_its_data_port() {
    let mut s = setup_per_port();
    let (up, be, kernel, kernel_be) = (0, 1, 2, 3);
    assert_eq!(
        (0..4)
            .map(|p| s.engine.routes().host(p))
            .collect::<Vec<_>>(),
        vec![
            HostPath::ToHost {
                port: kernel,
                readdress: false
            },
            HostPath::ToHost {
                port: kernel_be,
                readdress: false
            },
            HostPath::FromHost(Some(up)),
            HostPath::FromHost(Some(be)),
        ]
    );
    // The kernel probing a backend (ARP, then TCP) on its backend interface,
    // and talking to a router on its uplink interface.
    let probe_arp = arp_request(
        BE_MAC,
        Ipv4Addr::new(10, 0, 1, 2),
        Ipv4Addr::new(10, 0, 1, 11),
    );
    let probe = udp_on_backend_segment(BE_MAC, 4000);
    let bgp = udp([198, 51, 100, 1], 179, 179);
    s.io.rx[kernel_be].extend([probe_arp.clone(), probe.clone()]);
    s.io.rx[kernel].push_back(bgp.clone());
    // Answers for the host: from the backend segment, and from the uplink.
    let answer = udp_on_backend_segment(BE_MAC, 5000);
    let arp_answer = arp_request(
        CLIENT_MAC,
        Ipv4Addr::new(10, 0, 1, 11),
        Ipv4Addr::new(10, 0, 1, 2),
    );
    let mut arp_reply = arp_answer.clone();
    arp_reply[20..22].copy_from_slice(&[0, 2]); // a reply: for the host
    arp_reply[..6].copy_from_slice(&BE_MAC);
    let own = udp([10, 0, 0, 2], 5000, 22);
    s.io.rx[be].extend([answer.clone(), arp_reply.clone()]);
    s.io.rx[up].push_back(own.clone());
    assert_eq!(s.poll(), 6);

    assert_eq!(
        s.io.tx[be],
        vec![probe_arp, probe],
        "out the backend port, as sent"
    );
    assert_eq!(s.io.tx[up], vec![bgp], "out the uplink, as sent");
    assert_eq!(
        s.io.tx[kernel_be],
        vec![answer, arp_reply],
        "the backend port's, untouched"
    );
    assert_eq!(s.io.tx[kernel], vec![own]);
    let c = &s.engine.worker.counters;
    assert_eq!(
        (c.to_host, c.from_host, c.host_dropped, c.tx_dropped),
        (3, 3, 0, 0)
    );
}

/// M47: a data port without its own exception port hands its host packets
/// to the uplink's, readdressed to that port's MAC when they were for the
/// data port's (the kernel ignores unicast frames for other MACs);
/// broadcasts (ARP) go unchanged. Frames for other MACs, and IP in
/// broadcast frames, never reach the host (M55).
#[test]
fn without_its_own_exception_port_a_data_port_falls_back_to_the_uplinks() {
    let mut s = setup(true);
    let (up, be, kernel) = (0, 1, 2);
    assert_eq!(
        s.engine.routes().host(be),
        HostPath::ToHost {
            port: kernel,
            readdress: true
        }
    );
    let for_be = udp_on_backend_segment(BE_MAC, 5000);
    let for_other = udp_on_backend_segment([2, 0, 0, 0, 9, 9], 5001);
    let broadcast = udp_on_backend_segment([0xff; 6], 5002);
    // Who has 10.0.1.99 (not ours): the host's kernel decides.
    let arp = arp_request(
        [2, 0, 0, 0, 1, 11],
        Ipv4Addr::new(10, 0, 1, 11),
        Ipv4Addr::new(10, 0, 1, 99),
    );
    s.io.rx[be].extend([
        for_be.clone(),
        for_other.clone(),
        broadcast.clone(),
        arp.clone(),
    ]);
    assert_eq!(s.poll(), 4);
    let mut readdressed = for_be;
    readdressed[..6].copy_from_slice(&LB_MAC);
    assert_eq!(s.io.tx[kernel], vec![readdressed, arp]);
    assert!(s.io.tx[up].is_empty() && s.io.tx[be].is_empty());
    let c = &s.engine.worker.counters;
    assert_eq!(c.to_host, 2);
    assert_eq!(c.dropped(DropReason::L2ForeignDst), 2);
}

/// An exception port that stands for no data port (no uplink, no
/// for_port): what the kernel sends on it is dropped and counted.
#[test]
fn an_exception_port_without_a_data_port_drops_and_counts() {
    let roles = [PortRole::Backend, PortRole::Exception];
    let routes = Routes::with_exceptions(&roles, &[None, None]);
    assert_eq!(routes.host(1), HostPath::FromHost(None));
    assert_eq!(routes.host(0), HostPath::NoHost);
    let mut s = setup(true);
    s.engine = Engine::with_routes(Pipeline::new(1, 1), &roles, routes, 32, || {
        VecBurst::with_capacity(32)
    });
    s.io = MemIo::new(2);
    s.io.rx[1].push_back(udp([198, 51, 100, 1], 179, 179));
    // To port 0's MAC (the configuration's uplink, as the snapshot has it).
    s.io.rx[0].push_back(udp_on_backend_segment(LB_MAC, 5000));
    assert_eq!(s.poll(), 2);
    assert!(s.io.tx.iter().all(Vec::is_empty));
    let c = &s.engine.worker.counters;
    assert_eq!((c.from_host, c.from_host_dropped), (1, 1));
    assert_eq!((c.to_host, c.host_dropped), (1, 1));
}

/// M36: an entry learned from a peer is marked; the first packet of its flow
/// this node forwards makes it this node's (the mark goes; the management
/// core then refreshes peers with it), and the packet follows the entry.
#[test]
fn a_forwarded_packet_takes_over_a_learned_entry() {
    use dataplane::sync::{LEARNED, SyncQueue};
    let mut s = setup(false);
    let q = Arc::new(SyncQueue::with_capacity(8));
    s.engine.worker.set_sync_queue(q.clone());
    s.io.rx[0].push_back(udp([10, 0, 0, 10], 1000, 53));
    s.poll();
    let mut got = Vec::new();
    q.drain_into(&mut got, 10);
    let f = got.first().expect("queued");
    let hit = s.flows.lookup(&f.key, s.flows.hash(&f.key)).expect("entry");
    s.flows.update_flags(hit.slot, LEARNED, 0).expect("live");
    let sent = s.engine.worker.counters.forwarded;
    s.io.rx[0].push_back(udp([10, 0, 0, 10], 1000, 53));
    s.poll();
    let after = s.flows.lookup(&f.key, s.flows.hash(&f.key)).expect("entry");
    assert_eq!(after.entry.flags.bits() & LEARNED, 0, "no longer learned");
    assert_eq!(after.entry.backend, hit.entry.backend);
    assert_eq!(s.engine.worker.counters.forwarded, sent + 1);
    q.drain_into(&mut got, 10);
    assert_eq!(got.len(), 1, "not a new flow");
}

/// M36: with a sync queue, every flow entry a worker creates is queued as
/// the table holds it (a flow's later packets queue nothing); a full queue
/// is a counted loss, never a wait; without a queue nothing is counted.
#[test]
fn new_flow_entries_are_queued_for_sync() {
    use dataplane::sync::SyncQueue;
    let mut plain = setup(false);
    plain.io.rx[0].push_back(udp([10, 0, 0, 10], 999, 53));
    plain.poll();
    assert_eq!(plain.engine.worker.counters.new_flows, 1);
    assert_eq!(plain.engine.worker.counters.sync_queued, 0);

    let mut s = setup(false);
    let q = Arc::new(SyncQueue::with_capacity(3));
    s.engine.worker.set_sync_queue(q.clone());
    for sport in [1000, 1001, 1000] {
        s.io.rx[0].push_back(udp([10, 0, 0, 10], sport, 53));
    }
    s.poll();
    let mut got = Vec::new();
    q.drain_into(&mut got, 10);
    assert_eq!(got.len(), 2, "one per new flow: {got:?}");
    for f in &got {
        let hit = s
            .flows
            .lookup(&f.key, s.flows.hash(&f.key))
            .expect("the entry is in the table");
        assert_eq!(
            (hit.entry.backend, hit.entry.cookie, hit.entry.generation),
            (f.backend, f.cookie, f.generation)
        );
        assert_eq!(hit.entry.flags.bits(), f.flags);
        assert_ne!(
            wire::flow::service_tag(&f.key.0),
            0,
            "the key carries its tag"
        );
    }
    assert_eq!(s.engine.worker.counters.sync_queued, 2);

    // Five more new flows into the (drained) queue of three: two are lost.
    for sport in 2000..2005 {
        s.io.rx[0].push_back(udp([10, 0, 0, 10], sport, 53));
    }
    s.poll();
    assert_eq!(s.engine.worker.counters.sync_queued, 5);
    assert_eq!(s.engine.worker.counters.sync_lost, 2);
    assert_eq!(q.entries.len(), 3);
}

/// TCP from the host (10.0.0.2:`sport`) to `dst`:80, as it leaves the
/// kernel's exception interface.
fn host_tcp(dst: [u8; 4], sport: u16) -> Vec<u8> {
    Packet::tcp(
        Ipv4Addr::new(10, 0, 0, 2).into(),
        IpAddr::from(dst),
        sport,
        80,
        0x02,
    )
    .macs(LB_MAC, [2, 0, 0, 0, 0, 0xfe])
    .frame()
}

#[test]
fn the_hosts_probes_through_a_vip_go_to_their_endpoint_whatever_its_health() {
    // TCP 80 on 10.0.0.10 over GUE to two endpoints, checked through the
    // VIP: endpoint 10.0.1.11 probes from port 61000, 10.0.1.12 from 61001.
    let text = Config::new()
        .port(port("up", "net_ring0", "uplink").strs("addresses", &["10.0.0.2/24"]))
        .port(
            port("be", "net_ring1", "backend")
                .strs("addresses", &["10.0.1.2/30"])
                .str("gateway_mac", "02:00:00:00:00:fe"),
        )
        .port(port("kernel", "net_tap0", "exception"))
        .rule(rule("web", &["10.0.0.10"], "TCP", "", "web").set("ports", 80))
        .service(service("web", "gue").str("health_check", "h").child(
            group("a", "r", "z").set("endpoints", endpoint_list(&["10.0.1.11", "10.0.1.12"])),
        ))
        .health_check(
            testkit::config::health_check("h", "TCP")
                .set("port", 80)
                .str("target", "vip"),
        )
        .build();
    let mut s = setup_text(&text);
    // Both endpoints unhealthy: probes must still reach them, or they
    // could never recover.
    let compiled = Arc::clone(&s.snap.compiled);
    let local = s.snap.local.clone();
    let down = |_| EndpointHealth {
        healthy: false,
        weight: None,
    };
    s.snap = SnapshotBuilder::new()
        .build(compiled, local, down, 0, 1)
        .expect("snapshot");
    let (up, be, kernel) = (0, 1, 2);
    s.io.rx[kernel].extend([
        host_tcp([10, 0, 0, 10], 61001), // endpoint 10.0.1.12's probe
        host_tcp([10, 0, 0, 10], 61000), // endpoint 10.0.1.11's
        host_tcp([10, 0, 0, 11], 61000), // its port, not its VIP
        host_tcp([10, 0, 0, 10], 40000), // the host's own connection
    ]);
    assert_eq!(s.poll(), 4);
    let outer_dst = |f: &[u8]| Ipv4Addr::new(f[30], f[31], f[32], f[33]);
    assert_eq!(s.io.tx[be].len(), 2);
    assert_eq!(outer_dst(&s.io.tx[be][0]), Ipv4Addr::new(10, 0, 1, 12));
    assert_eq!(outer_dst(&s.io.tx[be][1]), Ipv4Addr::new(10, 0, 1, 11));
    for (out, probe) in s.io.tx[be].iter().zip([61001, 61000]) {
        assert_eq!(out[14 + 9], 17, "GUE over UDP");
        assert!(out.ends_with(&host_tcp([10, 0, 0, 10], probe)[14..]));
    }
    // The rest leaves by the uplink as the host sent it.
    assert_eq!(
        s.io.tx[up],
        vec![
            host_tcp([10, 0, 0, 11], 61000),
            host_tcp([10, 0, 0, 10], 40000)
        ]
    );
    let c = &s.engine.worker.counters;
    assert_eq!((c.from_host, c.vip_probes, c.vip_probes_dropped), (4, 2, 0));
    assert_eq!(c.forwarded, 0, "probes are not client traffic");
}

/// A UDP datagram of `len` IP bytes without DF from 192.0.2.7:`sport` to
/// the VIP's port 53.
fn big_udp(sport: u16, len: usize) -> Vec<u8> {
    Packet::udp(CLIENT.into(), IpAddr::from([10, 0, 0, 10]), sport, 53)
        .payload(&vec![9; len - 28])
        .dont_frag(false)
        .udp_checksum(false)
        .macs(CLIENT_MAC, LB_MAC)
        .frame()
}

/// Issue 38 item 14 in the worker loop: a datagram without DF too big for
/// the backend port (MTU 1500) once in GUE leaves as its fragments, in its
/// place among the burst's packets and all in one TX burst: behind 31 others
/// in a TX burst of 32 there is no room for both, so those 31 are sent
/// first. Each fragment is a buffer of its own (taken from the I/O), within
/// the MTU.
#[test]
fn a_packet_to_fragment_leaves_as_its_fragments_together_and_in_order() {
    let mut s = setup(false);
    let (up, be) = (0, 1);
    let mut frames: Vec<Vec<u8>> = (0..31).map(|i| udp([10, 0, 0, 10], 3000 + i, 53)).collect();
    frames.push(big_udp(3100, 1500));
    s.io.rx[up].extend(frames.iter().cloned());
    // And one more burst: the big one first, then a small one.
    s.io.rx[up].push_back(big_udp(3101, 1500));
    s.io.rx[up].push_back(udp([10, 0, 0, 10], 3102, 53));
    assert_eq!(s.poll(), 32);
    assert_eq!(
        s.io.calls[be],
        vec![31, 2],
        "the fragments in a TX burst of their own"
    );
    assert_eq!(s.poll(), 2);
    assert_eq!(
        s.io.calls[be],
        vec![31, 2, 3],
        "two fragments and the small one"
    );
    let out = &s.io.tx[be];
    assert_eq!(out.len(), 36);
    for (i, f) in (0u16..).zip(out) {
        assert!(f.len() <= 14 + 1500, "frame {i}: {} bytes", f.len());
        let inner = &f[14 + 28..];
        let flags = u16::from_be_bytes([inner[6], inner[7]]);
        let sport = u16::from_be_bytes([inner[20], inner[21]]);
        match i {
            0..31 => assert_eq!((sport, flags), (3000 + i, 0)),
            // The first fragment carries the UDP header, MF set; the second
            // is at offset 1,448.
            31 | 33 => assert_eq!((sport, flags), (3100 + (i - 31) / 2, 0x2000)),
            32 | 34 => assert_eq!(flags, 1448 / 8),
            _ => assert_eq!((sport, flags), (3102, 0)),
        }
    }
    let c = &s.engine.worker.counters;
    assert_eq!(
        (c.forwarded, c.fragmented, c.tx_packets, c.tx_dropped),
        (34, 2, 36, 0)
    );

    // No buffer for the second fragment: the datagram is dropped and
    // counted, the others go on.
    s.io.buffers = 0;
    s.io.rx[up].push_back(big_udp(3200, 1500));
    s.io.rx[up].push_back(udp([10, 0, 0, 10], 3201, 53));
    assert_eq!(s.poll(), 2);
    assert_eq!(s.io.tx[be].len(), 37);
    let c = &s.engine.worker.counters;
    assert_eq!(c.dropped(dataplane::DropReason::FragmentFailed), 1);
    assert_eq!((c.forwarded, c.fragmented), (35, 2));
}

/// [`config`] (with its exception port) and a VRRP group for the VIP on
/// the uplink.
fn vrrp_config() -> String {
    format!(
        "{}\n[[vrrp]]\nvrid = 51\nport = \"up\"\nvips = [\"10.0.0.10\"]\n",
        config(true)
    )
}

/// A VRRPv3 advertisement of VRID 51 for the VIP from 10.0.0.3.
fn advert() -> Vec<u8> {
    let addrs = [IpAddr::from([10, 0, 0, 10])];
    let a = wire::vrrp::AdvertRepr {
        mac: CLIENT_MAC,
        src: IpAddr::from([10, 0, 0, 3]),
        vrid: 51,
        priority: 100,
        interval_cs: 100,
        addrs: &addrs,
    };
    let mut f = vec![0u8; a.frame_len()];
    wire::vrrp::advert_frame(&mut f, &a).expect("frame");
    f
}

/// VRRP advertisements on the group's port are copied to the management
/// core and go to the host; on another port they are foreign multicast.
#[test]
fn vrrp_adverts_on_their_port_are_handed_to_the_management_core() {
    use dataplane::neighbour::NeighbourQueues;
    let mut s = setup_text(&vrrp_config());
    let q = Arc::new(NeighbourQueues::default());
    s.engine.worker.set_neighbour_queues(q.clone());
    let (up, be, kernel) = (0, 1, 2);
    s.io.rx[up].push_back(advert());
    s.io.rx[be].push_back(advert());
    s.poll();
    let got: Vec<_> = std::iter::from_fn(|| q.vrrp.pop()).collect();
    assert_eq!(got.len(), 1, "one copy, from the uplink");
    assert_eq!((got[0].port, got[0].bytes()), (0, &advert()[..]));
    assert_eq!(
        s.io.tx[kernel].len(),
        1,
        "the advertisement also reaches the host"
    );
    let c = &s.engine.worker.counters;
    assert_eq!(c.vrrp_frames, 1);
    assert_eq!(
        c.drops[DropReason::L2ForeignDst as usize],
        1,
        "on the backend port"
    );

    // Without a group, the uplink takes no such multicast either.
    let mut s = setup(true);
    s.engine.worker.set_neighbour_queues(q.clone());
    s.io.rx[up].push_back(advert());
    s.poll();
    assert!(q.vrrp.is_empty());
    assert_eq!(
        s.engine.worker.counters.drops[DropReason::L2ForeignDst as usize],
        1
    );

    // A full queue loses the copy, counted.
    let mut s = setup_text(&vrrp_config());
    s.engine.worker.set_neighbour_queues(q.clone());
    while !q.vrrp.is_full() {
        let _ = q.vrrp.push(got[0]);
    }
    s.io.rx[up].push_back(advert());
    s.poll();
    assert_eq!(s.engine.worker.counters.vrrp_frames_lost, 1);
}

/// A VIP of a group this node is not master of: no ARP answered, its
/// packets dropped as `vrrp_backup`; served again once master.
#[test]
fn a_backup_answers_and_forwards_nothing_for_its_groups_vips() {
    let mut s = setup_text(&vrrp_config());
    let compiled = s.snap.compiled.clone();
    let local = s.snap.local.clone();
    let snapshot = |standby: Vec<IpAddr>| {
        let mut b = SnapshotBuilder::new();
        b.set_standby(standby);
        b.build(
            compiled.clone(),
            local.clone(),
            |_| EndpointHealth::HEALTHY,
            0,
            1,
        )
        .expect("snapshot")
    };
    let (up, be, kernel) = (0, 1, 2);
    s.snap = snapshot(vec![IpAddr::from([10, 0, 0, 10])]);
    s.io.rx[up].push_back(arp_request_to([10, 0, 0, 10]));
    s.io.rx[up].push_back(udp([10, 0, 0, 10], 4000, 53));
    s.poll();
    assert!(s.io.tx[up].is_empty(), "no ARP reply: {:?}", s.io.tx[up]);
    assert!(s.io.tx[be].is_empty(), "nothing forwarded");
    assert_eq!(s.io.tx[kernel].len(), 1, "the ARP request goes to the host");
    let c = &s.engine.worker.counters;
    assert_eq!(c.drops[DropReason::VrrpBackup as usize], 1);
    assert_eq!(c.arp_replies, 0);

    s.snap = snapshot(Vec::new());
    s.io.rx[up].push_back(arp_request_to([10, 0, 0, 10]));
    s.io.rx[up].push_back(udp([10, 0, 0, 10], 4000, 53));
    s.poll();
    assert_eq!(s.io.tx[up].len(), 1, "the ARP reply");
    assert_eq!(s.io.tx[be].len(), 1, "forwarded");
}
