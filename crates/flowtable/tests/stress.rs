//! Multi-threaded stress test on real threads: several workers race to look up and insert the
//! same flows in different orders while a churn thread removes and re-inserts other flows
//! (so slots are reused under the readers) and flips their flags. Checks that
//!
//! * no read is torn: every hit's value matches what is derived from its key;
//! * workers agree: for each flow, every worker used the entry of the one worker that
//!   inserted it (`Existing` returns the winner's entry);
//! * nothing is lost or duplicated: at the end every flow is present exactly once, with the
//!   value the workers agreed on.
#![allow(clippy::cast_possible_truncation)]
// test keys, counters and ticks are small
// Real threads need std's atomics: the `shuttle` feature swaps them for shuttle's.
#![cfg(not(feature = "shuttle"))]

use std::sync::Arc;
use std::thread;

use flowtable::{
    Config, Entry, EntryFlags, FlowKey, FlowTable, InsertOutcome, NewEntry, ProtoClass,
};

const FLOWS: u64 = 30_000;
const CHURN_FLOWS: u64 = 2_000;
const WORKERS: usize = 3;

fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn key(i: u64) -> FlowKey {
    FlowKey([i, mix64(i), !i, i << 7, 0x11])
}

fn hash(i: u64) -> u64 {
    mix64(i ^ 0x5555)
}

fn value(i: u64, writer: u32) -> NewEntry {
    NewEntry {
        backend: mix64(i) as u32,
        generation: writer,
        cookie: (mix64(i) >> 32) as u32,
        flags: EntryFlags::new(ProtoClass::Tcp),
    }
}

fn check(i: u64, e: &Entry) {
    assert_eq!(e.backend, mix64(i) as u32, "torn entry for {i}: {e:?}");
    assert_eq!(
        e.cookie,
        (mix64(i) >> 32) as u32,
        "torn entry for {i}: {e:?}"
    );
}

#[test]
fn concurrent_workers_lose_nothing_and_never_see_torn_entries() {
    let t = Arc::new(FlowTable::new(Config::with_capacity(100_000)).unwrap());
    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let t = Arc::clone(&t);
            thread::spawn(move || {
                let mut used = vec![u32::MAX; FLOWS as usize];
                // Workers 0 and 1 walk the flows in the same order, so they race on the same
                // flow's first packet all the time; worker 2 walks backwards and meets them.
                for n in 0..FLOWS {
                    let i = if w == 2 { FLOWS - 1 - n } else { n };
                    // Readers of churning slots must never see a torn entry either; worker 2
                    // reads them in bursts of 8 through `lookup_burst`.
                    let c = FLOWS + (n % CHURN_FLOWS);
                    if w == 2 {
                        if n % 8 == 0 {
                            let ids: [u64; 8] = std::array::from_fn(|j| {
                                FLOWS + (c - FLOWS + j as u64) % CHURN_FLOWS
                            });
                            let keys = ids.map(key);
                            let hashes = ids.map(hash);
                            let mut out = [None; 8];
                            t.lookup_burst(&keys, &hashes, &mut out);
                            for (id, hit) in ids.iter().zip(out) {
                                if let Some(hit) = hit {
                                    check(*id, &hit.entry);
                                }
                            }
                        }
                    } else if let Some(hit) = t.lookup(&key(c), hash(c)) {
                        check(c, &hit.entry);
                    }
                    used[i as usize] = loop {
                        if let Some(hit) = t.lookup_touch(&key(i), hash(i), 1) {
                            check(i, &hit.entry);
                            break hit.entry.generation;
                        }
                        match t.insert(&key(i), hash(i), value(i, w as u32), 1) {
                            InsertOutcome::Inserted { .. } => break w as u32,
                            InsertOutcome::Existing(hit) => {
                                check(i, &hit.entry);
                                break hit.entry.generation;
                            }
                            // Lock holder descheduled: try again, as the next packet would.
                            InsertOutcome::Contended => thread::yield_now(),
                            InsertOutcome::Full => panic!("full at {i}"),
                        }
                    };
                }
                used
            })
        })
        .collect();
    let churn = {
        let t = Arc::clone(&t);
        thread::spawn(move || {
            for round in 0..6u64 {
                for c in FLOWS..FLOWS + CHURN_FLOWS {
                    match t.insert(&key(c), hash(c), value(c, 9), round as u32) {
                        InsertOutcome::Inserted { slot, .. } => {
                            let _ = t.update_flags(slot, EntryFlags::ESTABLISHED, 0);
                        }
                        InsertOutcome::Existing(hit) => {
                            check(c, &hit.entry);
                            let _ = t.remove(hit.slot);
                        }
                        InsertOutcome::Contended => {}
                        InsertOutcome::Full => panic!("full at churn {c}"),
                    }
                }
            }
        })
    };
    let used: Vec<Vec<u32>> = workers.into_iter().map(|h| h.join().unwrap()).collect();
    churn.join().unwrap();
    for i in 0..FLOWS {
        let hit = t
            .lookup(&key(i), hash(i))
            .unwrap_or_else(|| panic!("flow {i} lost"));
        check(i, &hit.entry);
        assert_eq!(t.count_key(&key(i), hash(i)), 1, "flow {i} duplicated");
        for (w, u) in used.iter().enumerate() {
            assert_eq!(
                u[i as usize], hit.entry.generation,
                "worker {w} used another entry for flow {i}"
            );
        }
    }
}
