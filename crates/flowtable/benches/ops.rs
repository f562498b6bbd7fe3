//! Flow-table throughput (docs/requirements.md §9: 10M entries, mixed lookup+insert, 2 threads ≥
//! 20M ops/s).
//!
//! `cargo bench -p flowtable --bench ops` (1M and 10M entries: ~4 min, ~1.1 GB of RAM at 10M).
//! `FLOWTABLE_BENCH_SIZES=1M` (or `10M`) restricts the sizes; criterion filters work as usual.
//!
//! Workloads, per operation (one operation = one packet's table work):
//! * `hit`: look up a random present flow and touch it (same tick: no write), one at a time.
//! * `hit_burst`: the same through [`FlowTable::lookup_burst`] in bursts of 32, as the pipeline
//!   processes an RX burst.
//! * `miss_insert`: look up a new flow (miss) and insert it. Inserted flows are removed again,
//!   untimed, after every chunk of N/50 operations (all threads pause together), so the table
//!   stays at about N entries.
//! * `mixed` / `mixed_burst`: 1/16 new flows (miss + insert), 1/32 flow ends (removal of the
//!   oldest flow this thread inserted), the rest hits of random present flows with a touch (the
//!   tick advances every 2^16 operations, so touches do write). Steady state at N entries;
//!   everything timed. `mixed_burst` looks each burst of 32 up with `lookup_burst` first.
//!
//! The table has nominal capacity 1.1·N and is prefilled with N flows. Multi-threaded figures
//! are total operations over wall time on one shared table: all threads start at a barrier and
//! the clock stops at a second barrier after the last one finishes.

#![allow(clippy::cast_possible_truncation)] // bench keys, counters and ticks are small
#![allow(missing_docs)] // criterion_group! makes an undocumented `pub fn`
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
// bench code: fail loudly

// Filling several parallel burst arrays by index reads clearer than zipped iterators.
#![allow(clippy::needless_range_loop)]

use std::sync::Barrier;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, black_box, criterion_group, criterion_main};
use flowtable::{
    Config, EntryFlags, FlowKey, FlowTable, Hit, InsertOutcome, NewEntry, ProtoClass, SlotRef,
};

fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[inline]
fn key(i: u64) -> FlowKey {
    FlowKey([i, i ^ 0x5a5a_5a5a, 0x0a00_0001_0a00_0002, 0x1f90_c350, 6])
}

#[inline]
fn hash(i: u64) -> u64 {
    mix64(i ^ 0x1234_5678)
}

#[inline]
fn pick(r: u64, n: u64) -> u64 {
    ((u128::from(r) * u128::from(n)) >> 64) as u64
}

fn new_entry(i: u64) -> NewEntry {
    NewEntry {
        backend: i as u32,
        generation: 1,
        cookie: (i >> 32) as u32,
        flags: EntryFlags::new(ProtoClass::Tcp).with(EntryFlags::ESTABLISHED),
    }
}

fn prefill(n: u64) -> FlowTable {
    let Ok(t) = FlowTable::new(Config::with_capacity((n as usize) * 11 / 10)) else {
        panic!("table")
    };
    let start = Instant::now();
    let mut full = 0;
    for i in 0..n {
        if !matches!(
            t.insert(&key(i), hash(i), new_entry(i), 0),
            InsertOutcome::Inserted { .. }
        ) {
            full += 1;
        }
    }
    eprintln!(
        "prefilled {n} in {:?}: {full} not inserted, {} slots",
        start.elapsed(),
        t.slot_count()
    );
    t
}

#[derive(Clone, Copy, Debug)]
enum Work {
    Hit,
    HitBurst,
    MissInsert,
    Mixed,
    MixedBurst,
}

const BURST: usize = 32;

/// Per-thread state of the mixed workloads: a ring of this thread's inserted flows.
struct Churn {
    ring: Vec<Option<SlotRef>>,
    head: usize,
    next_key: u64,
}

impl Churn {
    fn new(fresh_base: u64) -> Self {
        Self {
            ring: vec![None; 4096],
            head: 0,
            next_key: fresh_base,
        }
    }

    /// A new flow: its lookup missed (done by the caller), insert it.
    #[inline]
    fn new_flow(&mut self, t: &FlowTable, k: u64, now: u32) {
        if let InsertOutcome::Inserted { slot, .. } = t.insert(&key(k), hash(k), new_entry(k), now)
        {
            if let Some(old) = self.ring[self.head].replace(slot) {
                t.remove(old);
            }
            self.head = (self.head + 1) % self.ring.len();
        }
    }

    #[inline]
    fn end_flow(&mut self, t: &FlowTable) {
        if let Some(old) = self.ring[self.head].take() {
            t.remove(old);
        }
        self.head = (self.head + 1) % self.ring.len();
    }

    fn finish(self, t: &FlowTable) {
        for s in self.ring.into_iter().flatten() {
            t.remove(s);
        }
    }
}

/// What operation `j` of a mixed run does: 0 = hit, 1 = new flow, 2 = flow end.
#[inline]
fn mixed_kind(r: u64) -> u8 {
    match r & 31 {
        0 | 1 => 1,
        2 => 2,
        _ => 0,
    }
}

/// Runs `iters` operations split over `threads`, returns the timed wall-clock duration.
fn run(t: &FlowTable, n: u64, work: Work, threads: u64, iters: u64, epoch: u64) -> Duration {
    let barrier = Barrier::new(threads as usize);
    let per = iters.div_ceil(threads);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|th| {
                let barrier = &barrier;
                s.spawn(move || {
                    // Fresh keys live above `n`, disjoint per thread and per call.
                    let fresh_base = n + (epoch << 36) + (th << 32);
                    let seed = epoch.wrapping_mul(0x9e37_79b9) ^ (th << 48);
                    let mut acc = 0u32;
                    let d = match work {
                        Work::Hit => {
                            barrier.wait();
                            let start = Instant::now();
                            for j in 0..per {
                                let i = pick(mix64(seed + j), n);
                                if let Some(h) = t.lookup_touch(&key(i), hash(i), 0) {
                                    acc = acc.wrapping_add(h.entry.backend);
                                }
                            }
                            barrier.wait();
                            start.elapsed()
                        }
                        Work::HitBurst => {
                            let mut keys = [FlowKey::default(); BURST];
                            let mut hashes = [0u64; BURST];
                            let mut out: [Option<Hit>; BURST] = [None; BURST];
                            barrier.wait();
                            let start = Instant::now();
                            let mut j = 0;
                            while j < per {
                                let len = (per - j).min(BURST as u64) as usize;
                                for b in 0..len {
                                    let i = pick(mix64(seed + j + b as u64), n);
                                    keys[b] = key(i);
                                    hashes[b] = hash(i);
                                }
                                t.lookup_burst(&keys[..len], &hashes[..len], &mut out[..len]);
                                for h in out[..len].iter().flatten() {
                                    if h.entry.last_seen != 0 {
                                        t.touch(h.slot, 0);
                                    }
                                    acc = acc.wrapping_add(h.entry.backend);
                                }
                                j += len as u64;
                            }
                            barrier.wait();
                            start.elapsed()
                        }
                        Work::MissInsert => {
                            let chunk = (n / 50).max(1);
                            let mut slots: Vec<SlotRef> = Vec::with_capacity(chunk as usize);
                            let mut timed = Duration::ZERO;
                            let mut done = 0;
                            let mut k = fresh_base;
                            // Every thread runs the same number of chunks (barriers pair up).
                            while done < per {
                                let todo = (per - done).min(chunk);
                                barrier.wait();
                                let start = Instant::now();
                                for _ in 0..todo {
                                    if t.lookup(&key(k), hash(k)).is_none()
                                        && let InsertOutcome::Inserted { slot, .. } =
                                            t.insert(&key(k), hash(k), new_entry(k), 0)
                                    {
                                        slots.push(slot);
                                    }
                                    k += 1;
                                }
                                barrier.wait();
                                timed += start.elapsed();
                                for s in slots.drain(..) {
                                    t.remove(s);
                                }
                                done += todo;
                            }
                            timed
                        }
                        Work::Mixed => {
                            let mut churn = Churn::new(fresh_base);
                            barrier.wait();
                            let start = Instant::now();
                            for j in 0..per {
                                let r = mix64(seed + j);
                                let now = ((epoch << 8) + (j >> 16)) as u32;
                                match mixed_kind(r) {
                                    1 => {
                                        let k = churn.next_key;
                                        churn.next_key += 1;
                                        if t.lookup(&key(k), hash(k)).is_none() {
                                            churn.new_flow(t, k, now);
                                        }
                                    }
                                    2 => churn.end_flow(t),
                                    _ => {
                                        let i = pick(r, n);
                                        if let Some(h) = t.lookup_touch(&key(i), hash(i), now) {
                                            acc = acc.wrapping_add(h.entry.backend);
                                        }
                                    }
                                }
                            }
                            barrier.wait();
                            let d = start.elapsed();
                            churn.finish(t);
                            d
                        }
                        Work::MixedBurst => {
                            let mut churn = Churn::new(fresh_base);
                            let mut keys = [FlowKey::default(); BURST];
                            let mut hashes = [0u64; BURST];
                            let mut idx = [0u64; BURST];
                            let mut kinds = [0u8; BURST];
                            let mut out: [Option<Hit>; BURST] = [None; BURST];
                            barrier.wait();
                            let start = Instant::now();
                            let mut j = 0;
                            while j < per {
                                let len = (per - j).min(BURST as u64) as usize;
                                let now = ((epoch << 8) + (j >> 16)) as u32;
                                let mut m = 0;
                                for b in 0..len {
                                    let r = mix64(seed + j + b as u64);
                                    kinds[b] = mixed_kind(r);
                                    let i = match kinds[b] {
                                        2 => continue,
                                        1 => {
                                            churn.next_key += 1;
                                            churn.next_key - 1
                                        }
                                        _ => pick(r, n),
                                    };
                                    idx[m] = i;
                                    keys[m] = key(i);
                                    hashes[m] = hash(i);
                                    m += 1;
                                }
                                t.lookup_burst(&keys[..m], &hashes[..m], &mut out[..m]);
                                for (o, &i) in out[..m].iter().zip(&idx[..m]) {
                                    match o {
                                        Some(h) => {
                                            if h.entry.last_seen != now {
                                                t.touch(h.slot, now);
                                            }
                                            acc = acc.wrapping_add(h.entry.backend);
                                        }
                                        None => churn.new_flow(t, i, now),
                                    }
                                }
                                for &k in &kinds[..len] {
                                    if k == 2 {
                                        churn.end_flow(t);
                                    }
                                }
                                j += len as u64;
                            }
                            barrier.wait();
                            let d = start.elapsed();
                            churn.finish(t);
                            d
                        }
                    };
                    black_box(acc);
                    d
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .max()
            .unwrap_or_default()
    })
}

fn bench(c: &mut Criterion) {
    let only = std::env::var("FLOWTABLE_BENCH_SIZES").unwrap_or_default();
    for (n, label) in [(1_000_000u64, "1M"), (10_000_000, "10M")] {
        if !only.is_empty() && !only.split(',').any(|s| s == label) {
            continue;
        }
        let t = prefill(n);
        let mut g = c.benchmark_group(format!("flowtable/{label}"));
        g.sample_size(10)
            .warm_up_time(Duration::from_secs(1))
            .measurement_time(Duration::from_secs(3))
            .throughput(Throughput::Elements(1));
        let mut epoch = 1u64;
        for work in [
            Work::Hit,
            Work::HitBurst,
            Work::MissInsert,
            Work::Mixed,
            Work::MixedBurst,
        ] {
            for threads in [1u64, 2] {
                g.bench_function(
                    BenchmarkId::new(format!("{work:?}"), format!("{threads}t")),
                    |b| {
                        b.iter_custom(|iters| {
                            epoch += 1;
                            run(&t, n, work, threads, iters, epoch)
                        })
                    },
                );
            }
        }
        g.finish();
        eprintln!("after {label}: {} live", t.occupancy().live);
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
