#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly
//! The pipeline benchmark's set-up, shared by benches/pipeline.rs and
//! examples/pipeline_cycles.rs: a one-rule configuration, 60-byte TCP
//! frames of N flows, and a burst driver over in-memory buffers.

#![allow(dead_code)]

use std::hint::black_box;
use std::sync::Arc;

use dataplane::{EndpointHealth, Local, Snapshot, SnapshotBuilder, Verdict, Worker};
use flowtable::FlowTable;
use wire::buf::MemBuf;

pub const BURST: usize = 32;

pub fn config(delivery: &str, endpoints: usize) -> String {
    let eps: Vec<String> = (0..endpoints)
        .map(|i| {
            format!(
                "{{ address = \"10.{}.{}.{}\" }}",
                1 + i / 65536,
                (i / 256) % 256,
                i % 256
            )
        })
        .collect();
    format!(
        r#"
[node]
name = "bench"
region = "r"
zone = "z"

# The benchmark measures the stateful path: no new-entry budget.
[dataplane]
new_flow_budget = 4294967295

[[ports]]
name = "up"
device = "net_null0"
role = "uplink"
addresses = ["198.18.1.2/24"]
gateway_mac = "02:00:00:00:00:fe"

[[forwarding_rules]]
name = "web"
vips = ["198.18.10.10"]
protocol = "TCP"
ports = 80
backend_service = "web"

[[backend_services]]
name = "web"
delivery = "{delivery}"
[[backend_services.groups]]
name = "a"
region = "r"
zone = "z"
endpoints = [{}]
"#,
        eps.join(", ")
    )
}

/// A 60-byte TCP segment (ACK, or SYN) of flow `i` to the VIP.
pub fn frame(i: u32, syn: bool) -> Vec<u8> {
    let c = 0x0a64_0000u32 + (i >> 8);
    let mut ip = vec![0x45, 0, 0, 40, 0, 1, 0x40, 0, 64, 6, 0, 0];
    ip.extend_from_slice(&c.to_be_bytes());
    ip.extend_from_slice(&[198, 18, 10, 10]);
    let sum = wire::checksum::checksum(&ip);
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x08, 0x00];
    f.extend_from_slice(&ip);
    f.extend_from_slice(&(1024 + (i & 0xff) as u16).to_be_bytes());
    f.extend_from_slice(&80u16.to_be_bytes());
    f.extend_from_slice(&[
        0,
        0,
        0,
        1,
        0,
        0,
        0,
        1,
        0x50,
        if syn { 0x02 } else { 0x10 },
        0xff,
        0xff,
        0,
        0,
        0,
        0,
    ]);
    f.resize(60, 0);
    f
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
