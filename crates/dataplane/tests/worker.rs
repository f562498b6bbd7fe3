#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly
//! The production worker loop (`WorkerLoop`) over in-memory I/O and a fake
//! clock: a new snapshot is picked up at the next pass (never within one),
//! counters are published when the clock says so and once more at the end,
//! an empty pass goes to the idle policy, and the stop flag ends the loop.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use config::schema::PortRole;
use dataplane::{
    DropReason, EndpointHealth, Engine, Idle, Local, PacketIo, Pipeline, Shared, Snapshot,
    SnapshotBuilder, VecBurst, WorkerLoop,
};
use flowtable::FlowTable;
use testkit::config::{Config, endpoint_list, group, port, rule, service};
use testkit::packet::{Packet, v4};
use wire::buf::{MemBuf, PacketBuf};
use wire::burst::PacketBurst;

type Pkt = MemBuf<Vec<u8>>;

/// One uplink; UDP 53 on `vip` goes over GUE to one endpoint.
fn config(vip: &str) -> String {
    Config::new()
        .port(
            port("up", "net_ring0", "uplink")
                .strs("addresses", &["10.0.0.2/24"])
                .str("gateway_mac", "02:00:00:00:00:fe"),
        )
        .rule(rule("dns", &[vip], "UDP", "53", "dns"))
        .service(
            service("dns", "gue")
                .child(group("a", "r", "z").set("endpoints", endpoint_list(&["10.0.1.11"]))),
        )
        .build()
}

/// Ethernet/IPv4/UDP from 192.0.2.7:5000 to 10.0.0.10:53.
fn udp_to_vip() -> Vec<u8> {
    Packet::udp(v4("192.0.2.7"), v4("10.0.0.10"), 5000, 53)
        .payload(&[1, 2, 3, 4])
        .dont_frag(false)
        .udp_checksum(false)
        .macs([2, 0, 0, 0, 0, 0x77], [2, 0, 0, 0, 0, 1])
        .frame()
}

fn snapshot(builder: &mut SnapshotBuilder, vip: &str) -> Snapshot {
    let compiled = match config::load_str("t.toml", &config(vip), &config::Env::default()) {
        Ok(l) => Arc::new(l.compiled),
        Err(e) => panic!("{e}"),
    };
    let local = Local::from_config(&compiled, |_| Some([2, 0, 0, 0, 0, 1]));
    builder
        .build(compiled, local, |_| EndpointHealth::HEALTHY, 0, 1)
        .expect("snapshot")
}

/// One uplink port whose RX calls script the run: every pass polls it once,
/// so its n-th RX call is the n-th pass of the loop.
struct ScriptIo<'s> {
    shared: &'s Shared,
    pass: usize,
    /// Installed (as a reload would) during pass 2's receive.
    next: Option<Snapshot>,
    /// Packets sent, per pass.
    sent: Vec<usize>,
    /// `rx_packets` in the published slot, seen at the start of each pass.
    published: Vec<u64>,
    /// Whether the worker said it uses the new snapshot, at each pass.
    on_new: Vec<bool>,
    /// The new snapshot's generation.
    new_generation: u32,
}

impl PacketIo for ScriptIo<'_> {
    type Burst = VecBurst<Pkt>;

    fn rx_burst(&mut self, _port: usize, burst: &mut VecBurst<Pkt>) -> usize {
        self.pass += 1;
        self.sent.push(0);
        let slot = self.shared.published[0].lock().expect("slot");
        self.published.push(slot.rx_packets);
        drop(slot);
        self.on_new
            .push(self.shared.workers_on(self.new_generation));
        if self.pass == 2
            && let Some(s) = self.next.take()
        {
            self.shared.snapshot.store(Arc::new(s));
        }
        if self.pass == 4 {
            // Nothing received: an idle pass, after which the loop stops.
            self.shared.stop.store(true, Ordering::Relaxed);
            return 0;
        }
        let p = MemBuf::new(vec![0u8; 512], 128, &udp_to_vip()).expect("fits");
        assert!(burst.push(p).is_ok());
        1
    }

    fn tx_burst(&mut self, _port: usize, burst: &mut VecBurst<Pkt>) -> usize {
        if let Some(n) = self.sent.last_mut() {
            *n += burst.len();
        }
        burst.drain_each(|_, p| assert!(!p.data().is_empty()));
        0
    }
}

/// Counts the idle calls.
struct CountIdle(usize);

impl Idle for CountIdle {
    fn idle(&mut self) {
        self.0 += 1;
    }
}

#[test]
fn the_loop_swaps_snapshots_between_passes_publishes_by_its_clock_and_stops() {
    let mut builder = SnapshotBuilder::new();
    let first = snapshot(&mut builder, "10.0.0.10");
    // The reload moves the VIP: 10.0.0.10 is no longer ours.
    let second = snapshot(&mut builder, "10.0.0.20");
    let flows = FlowTable::new(flowtable::Config::with_capacity(1024)).expect("flows");
    let new_generation = second.generation;
    let shared = Shared::new(Arc::new(first), flows, 1);
    // Not running yet: nobody to wait for.
    assert!(shared.workers_on(new_generation));
    let mut engine = Engine::new(Pipeline::new(1, 0), &[PortRole::Uplink], 32, || {
        VecBurst::with_capacity(32)
    });
    let mut io = ScriptIo {
        shared: &shared,
        pass: 0,
        next: Some(second),
        sent: Vec::new(),
        published: Vec::new(),
        on_new: Vec::new(),
        new_generation,
    };
    // The fake clock advances 5 per reading; publishing every 10: after
    // pass 2 (clock 10) and pass 4 (clock 20), not after passes 1 and 3.
    let mut t = 0u64;
    let clock = move || {
        t += 5;
        t - 5
    };
    let mut worker = WorkerLoop {
        index: 0,
        shared: &shared,
        clock,
        publish_every: 10,
        idle: CountIdle(0),
    };
    worker.run(&mut engine, &mut io);

    // Stopped during pass 4: no fifth pass.
    assert_eq!(io.pass, 4);
    // Pass 2 kept the snapshot it started with although a new one was
    // installed meanwhile; pass 3 used the new one (not our VIP: dropped).
    assert_eq!(io.sent, [1, 1, 0, 0]);
    let c = &engine.worker.counters;
    assert_eq!((c.rx_packets, c.forwarded), (3, 2));
    assert_eq!(c.drops[DropReason::NotOurs as usize], 1);
    // Published after pass 2 only, while running; at the end, everything.
    assert_eq!(io.published, [0, 0, 2, 2]);
    let last = shared.published[0].lock().expect("slot");
    assert_eq!((last.rx_packets, last.forwarded), (3, 2));
    // One pass received nothing.
    assert_eq!(worker.idle.0, 1);
    // The worker said which snapshot it used: the old one in passes 1 and 2
    // (stored during pass 2), the new one from pass 3; not running after.
    assert_eq!(io.on_new, [false, false, true, true]);
    assert_eq!(shared.using[0].get(), dataplane::worker::NOT_RUNNING);
}
