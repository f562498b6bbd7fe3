#![allow(missing_docs)] // criterion_group! makes an undocumented `pub fn`
//! Criterion benches of the whole per-packet pipeline (parse, rule, flow
//! table, Maglev, encapsulation) over bursts of 32 in-memory packets: the
//! data plane's cost without any I/O. Each iteration re-loads the 60-byte
//! frames into their buffers (included in the figure, ~1-2 ns/packet).
//!
//! Run: `cargo bench -p dataplane --bench pipeline`

mod common;

use common::{BURST, Bench, Kind};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};

fn modes(c: &mut Criterion) {
    let mut g = c.benchmark_group("pipeline/established_4096_flows_8_endpoints");
    g.throughput(Throughput::Elements(BURST as u64));
    for mode in ["l2dsr", "ipip", "gre", "gue", "geneve"] {
        let mut b = Bench::new(mode, 8, 4096, Kind::Ack, 1 << 20);
        for _ in 0..200 {
            b.burst(); // establish every flow
        }
        g.bench_function(mode, |bench| bench.iter(|| b.burst()));
    }
    g.finish();
}

fn flow_counts(c: &mut Criterion) {
    let mut g = c.benchmark_group("pipeline/gue_established_by_flows");
    g.throughput(Throughput::Elements(BURST as u64));
    for flows in [1u32, 4096, 65536, 1 << 20] {
        let mut b = Bench::new("gue", 8, flows, Kind::Ack, 2 << 20);
        for _ in 0..(flows as usize / BURST + 1) {
            b.burst();
        }
        g.bench_with_input(BenchmarkId::from_parameter(flows), &flows, |bench, _| {
            bench.iter(|| b.burst())
        });
    }
    g.finish();
}

fn new_flows(c: &mut Criterion) {
    let mut g = c.benchmark_group("pipeline/gue_syn_new_flows");
    g.throughput(Throughput::Elements(BURST as u64));
    // 1M distinct SYNs against a 64k table: every packet is a new flow that
    // displaces the oldest half-open entry (a SYN flood's cost).
    let mut b = Bench::new("gue", 8, 1 << 20, Kind::Syn, 1 << 16);
    g.bench_function("1M_flows_64k_table", |bench| bench.iter(|| b.burst()));
    let mut b = Bench::new("gue", 1000, 4096, Kind::Ack, 1 << 20);
    for _ in 0..200 {
        b.burst();
    }
    g.bench_function("established_4096_flows_1000_endpoints", |bench| {
        bench.iter(|| b.burst())
    });
    g.finish();
}

criterion_group!(benches, modes, flow_counts, new_flows);
criterion_main!(benches);
