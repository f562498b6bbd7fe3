//! Table build time (docs/requirements.md §9: M = 65537, N = 1,000 < 1.8 ms; M = 655373, N = 1,000
//! < 22.9 ms;
//! N = 10,000 reported) and lookup cost.
//!
//! `cargo bench -p maglev --bench build`

#![allow(missing_docs)] // criterion_group! makes an undocumented `pub fn`

use criterion::{BenchmarkId, Criterion, black_box, criterion_group, criterion_main};
use maglev::{Algorithm, Endpoint, EndpointId, MaglevTable, TableSize, mix64};

fn endpoints(n: usize, weighted: bool) -> Vec<Endpoint> {
    (0..n as u64)
        .map(|i| Endpoint {
            id: EndpointId(mix64(i)),
            weight: if weighted { 1 + (i % 4) as u32 } else { 1 },
        })
        .collect()
}

fn build(c: &mut Criterion) {
    let mut g = c.benchmark_group("maglev_build");
    g.sample_size(20);
    for (m, n, weighted) in [
        (65_537u32, 100usize, false),
        (65_537, 1_000, false),
        (65_537, 1_000, true),
        (655_373, 1_000, false),
        (655_373, 10_000, false),
        (655_373, 10_000, true),
    ] {
        let eps = endpoints(n, weighted);
        let size = TableSize::new(m).unwrap_or_default();
        let label = format!("M={m}/N={n}/{}", if weighted { "w1-4" } else { "equal" });
        for alg in [Algorithm::V1, Algorithm::V2] {
            g.bench_function(BenchmarkId::new(alg.name(), &label), |b| {
                b.iter(|| MaglevTable::build(alg, size, black_box(&eps)))
            });
        }
    }
    g.finish();
}

fn lookup(c: &mut Criterion) {
    let eps = endpoints(1_000, false);
    let Ok(t) = MaglevTable::build_v1(65_537, &eps) else {
        return;
    };
    c.bench_function("maglev_lookup_1k_hashes", |b| {
        b.iter(|| {
            let mut acc = 0u32;
            for i in 0..1_000u64 {
                acc = acc.wrapping_add(t.lookup(black_box(mix64(i))));
            }
            acc
        })
    });
}

criterion_group!(benches, build, lookup);
criterion_main!(benches);
