#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly
//! The pipeline benchmark's set-up, shared by benches/pipeline.rs and
//! examples/pipeline_cycles.rs: a one-rule configuration, 60-byte TCP
//! frames of N flows, and a burst driver over in-memory buffers.

#![allow(dead_code)]

use std::hint::black_box;
use std::net::Ipv4Addr;
use std::sync::Arc;

use dataplane::{EndpointHealth, Local, Snapshot, SnapshotBuilder, Verdict, Worker};
use flowtable::FlowTable;
use testkit::config::{Config, endpoint_list, group, node, port, rule, service};
use testkit::packet::{ACK, DST_MAC, Packet, SRC_MAC, SYN, v4};
use wire::buf::MemBuf;

pub const BURST: usize = 32;

/// One TCP rule on 198.18.10.10:80 to `endpoints` endpoints
/// (10.1.0.0, 10.1.0.1, …) delivered by `delivery`.
pub fn config(delivery: &str, endpoints: usize) -> String {
    let eps: Vec<String> = (0..endpoints)
        .map(|i| format!("10.{}.{}.{}", 1 + i / 65536, (i / 256) % 256, i % 256))
        .collect();
    Config::new()
        .node(node("bench", "r", "z"))
        // The benchmark measures the stateful path: no new-entry budget.
        .dataplane("new_flow_budget", u32::MAX)
        .port(
            port("up", "net_null0", "uplink")
                .strs("addresses", &["198.18.1.2/24"])
                .str("gateway_mac", "02:00:00:00:00:fe"),
        )
        .rule(rule("web", &["198.18.10.10"], "TCP", "80", "web"))
        .service(
            service("web", delivery)
                .child(group("a", "r", "z").set("endpoints", endpoint_list(&eps))),
        )
        .build()
}

/// A 60-byte TCP segment (ACK, or SYN) of flow `i` to the VIP: from
/// 10.100.0.0 + `i` / 256, port 1024 + `i` % 256; seq and ack 1, checksum
/// left zero (the pipeline forwards without checking it).
pub fn frame(i: u32, syn: bool) -> Vec<u8> {
    let client = Ipv4Addr::from(0x0a64_0000 + (i >> 8));
    let sport = 1024 + u16::from(i.to_le_bytes()[0]);
    let flags = if syn { SYN } else { ACK };
    Packet::tcp(client.into(), v4("198.18.10.10"), sport, 80, flags)
        .ack(1)
        .tcp_checksum(false)
        .macs(DST_MAC, SRC_MAC)
        .min_frame(60)
        .frame()
}

pub struct Bench {
    snap: Snapshot,
    flows: FlowTable,
    worker: Worker,
    frames: Vec<Vec<u8>>,
    bufs: Vec<MemBuf<[u8; 256]>>,
    verdicts: [Verdict; BURST],
    next: usize,
    /// The tick: 1 for the first pass over the flows, 2 after — a flow's
    /// entry is confirmed (and takes the established fast path) once it is
    /// seen in a later tick than its first packet's, as in a running
    /// balancer after the flow's first second.
    now: u32,
}

impl Bench {
    pub fn new(delivery: &str, endpoints: usize, flows: u32, syn: bool, capacity: usize) -> Bench {
        let loaded = config::load_str(
            "bench.toml",
            &config(delivery, endpoints),
            &config::Env::default(),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let compiled = Arc::new(loaded.compiled);
        let local = Local::from_config(&compiled, |_| Some([2, 0, 0, 0, 0, 1]));
        let snap = SnapshotBuilder::new()
            .build(compiled.clone(), local, |_| EndpointHealth::HEALTHY, 0, 1)
            .expect("snapshot");
        let table = FlowTable::new(flowtable::Config::with_capacity(capacity)).expect("table");
        Bench {
            snap,
            flows: table,
            worker: Worker::new(1, compiled.children.len()),
            frames: (0..flows).map(|i| frame(i, syn)).collect(),
            bufs: (0..BURST)
                .map(|_| MemBuf::new([0u8; 256], 128, &[]).expect("buf"))
                .collect(),
            verdicts: [Verdict::ToHost; BURST],
            next: 0,
            now: 1,
        }
    }

    pub fn burst(&mut self) {
        for b in &mut self.bufs {
            let f = &self.frames[self.next];
            // No `%`: a division per packet, chained through `next`, would
            // be timed along with the pipeline.
            self.next += 1;
            if self.next == self.frames.len() {
                self.next = 0;
                self.now = 2;
            }
            b.reset(128, f).expect("fits");
        }
        self.worker.process_burst(
            &self.snap,
            &self.flows,
            self.now,
            &mut self.bufs,
            &mut self.verdicts,
        );
        black_box(&self.verdicts);
    }
}
