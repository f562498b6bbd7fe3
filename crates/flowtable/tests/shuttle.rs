//! Concurrency tests of the table's core algorithm under `shuttle`: the crate built with its
//! `shuttle` feature uses shuttle's atomics, so shuttle controls every atomic access and explores
//! many interleavings (random schedules and PCT, which finds bugs of small "depth" with high
//! probability). Shuttle explores sequentially consistent executions; the memory orderings are
//! argued in the crate documentation and exercised by `stress.rs`.

#![allow(clippy::cast_possible_truncation)] // test keys, counters and ticks are small
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

use flowtable::{
    Config, Entry, EntryFlags, Evicted, FlowKey, FlowTable, InsertOutcome, NewEntry, ProtoClass,
    Timeouts,
};
use shuttle::sync::Arc;
use shuttle::thread;

const ITERATIONS: usize = 500;

fn key(i: u64) -> FlowKey {
    FlowKey([i, !i, i.wrapping_mul(3), 7, 17])
}

fn hash(i: u64) -> u64 {
    let mut z = i.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Values derived from the key, so a reader can tell a torn entry (key of one occupant, value
/// of another) from a good one. `generation` is free for the writer's identity.
fn value(i: u64, writer: u32, flags: EntryFlags) -> NewEntry {
    NewEntry {
        backend: (i as u32).wrapping_mul(31).wrapping_add(5),
        generation: writer,
        cookie: (i as u32) ^ 0xdead_beef,
        flags,
    }
}

fn consistent(i: u64, e: &Entry) -> bool {
    e.backend == (i as u32).wrapping_mul(31).wrapping_add(5) && e.cookie == (i as u32) ^ 0xdead_beef
}

/// Two buckets, 14 slots: every key competes for the same slots.
fn tiny() -> FlowTable {
    FlowTable::new(Config {
        insert_spin_limit: 64,
        ..Config::with_capacity(1)
    })
    .unwrap()
}

fn tcp() -> EntryFlags {
    EntryFlags::new(ProtoClass::Tcp)
}

fn racing_inserts_of_one_key_agree() {
    let t = Arc::new(tiny());
    // Some unrelated entries so slot choice is not trivial.
    for i in 100..104 {
        assert!(matches!(
            t.insert(&key(i), hash(i), value(i, 0, tcp()), 0),
            InsertOutcome::Inserted { .. }
        ));
    }
    let workers: Vec<_> = (1..=2u32)
        .map(|w| {
            let t = Arc::clone(&t);
            thread::spawn(
                move || match t.insert(&key(1), hash(1), value(1, w, tcp()), 0) {
                    InsertOutcome::Inserted { .. } => Some((w, true)),
                    InsertOutcome::Existing(hit) => {
                        assert!(consistent(1, &hit.entry));
                        Some((hit.entry.generation, false))
                    }
                    InsertOutcome::Contended => None,
                    InsertOutcome::Full => panic!("full with free slots"),
                },
            )
        })
        .collect();
    let reader = {
        let t = Arc::clone(&t);
        thread::spawn(move || {
            let mut seen = None;
            for _ in 0..2 {
                if let Some(hit) = t.lookup(&key(1), hash(1)) {
                    assert!(consistent(1, &hit.entry));
                    seen = Some(hit.entry.generation);
                }
            }
            seen
        })
    };
    let results: Vec<_> = workers.into_iter().map(|h| h.join().unwrap()).collect();
    let seen = reader.join().unwrap();
    let final_gen = t.lookup(&key(1), hash(1)).map(|h| h.entry.generation);
    assert_eq!(
        t.count_key(&key(1), hash(1)),
        usize::from(final_gen.is_some())
    );
    let used: Vec<(u32, bool)> = results.into_iter().flatten().collect();
    assert!(used.iter().filter(|(_, ins)| *ins).count() <= 1, "{used:?}");
    for (g, _) in &used {
        assert_eq!(Some(*g), final_gen, "{used:?}");
    }
    if let Some(g) = seen {
        assert_eq!(Some(g), final_gen);
    }
}

#[test]
fn racing_inserts_of_one_key_agree_random() {
    shuttle::check_random(racing_inserts_of_one_key_agree, ITERATIONS);
}

#[test]
fn racing_inserts_of_one_key_agree_pct() {
    shuttle::check_pct(racing_inserts_of_one_key_agree, ITERATIONS, 3);
}

/// A slot is emptied and reused for another key while a reader looks both keys up and a
/// worker holding a handle to the old entry updates and touches it.
fn slot_reuse_is_never_torn() {
    let t = Arc::new(tiny());
    for i in 0..14 {
        assert!(matches!(
            t.insert(&key(i), hash(i), value(i, 0, tcp()), 0),
            InsertOutcome::Inserted { .. }
        ));
    }
    let old = t.lookup(&key(3), hash(3)).unwrap().slot;
    let writer = {
        let t = Arc::clone(&t);
        thread::spawn(move || {
            assert!(t.remove(old));
            // The only free slot is the one just emptied.
            match t.insert(&key(50), hash(50), value(50, 1, tcp()), 1) {
                InsertOutcome::Inserted { slot, evicted } => {
                    assert_eq!(slot.index(), old.index());
                    assert_eq!(evicted, Evicted::Nothing);
                }
                other => panic!("{other:?}"),
            }
        })
    };
    let stale = {
        let t = Arc::clone(&t);
        thread::spawn(move || {
            let _ = t.update_flags(old, EntryFlags::RST, 0);
            let _ = t.touch(old, 0);
        })
    };
    let reader = {
        let t = Arc::clone(&t);
        thread::spawn(move || {
            for i in [3, 50, 3, 50] {
                if let Some(hit) = t.lookup(&key(i), hash(i)) {
                    assert!(consistent(i, &hit.entry), "torn read of {i}: {hit:?}");
                }
            }
        })
    };
    writer.join().unwrap();
    stale.join().unwrap();
    reader.join().unwrap();
    assert_eq!(t.lookup(&key(3), hash(3)), None);
    let new = t.lookup(&key(50), hash(50)).unwrap().entry;
    assert!(consistent(50, &new));
    // The stale flag update never reached the new occupant.
    assert_eq!(new.flags, tcp());
    assert_eq!(t.occupancy().live, 14);
}

#[test]
fn slot_reuse_is_never_torn_random() {
    shuttle::check_random(slot_reuse_is_never_torn, ITERATIONS);
}

#[test]
fn slot_reuse_is_never_torn_pct() {
    shuttle::check_pct(slot_reuse_is_never_torn, ITERATIONS, 3);
}

/// A flood of half-open inserts races a handshake completing: an entry that became
/// established is never evicted, and no key is ever duplicated.
fn established_entries_survive_half_open_floods() {
    let t = Arc::new(
        FlowTable::new(Config {
            timeouts: Timeouts {
                tcp_half_open: 1000,
                ..Timeouts::default()
            },
            insert_spin_limit: 64,
            ..Config::with_capacity(1)
        })
        .unwrap(),
    );
    for i in 0..14 {
        assert!(matches!(
            t.insert(&key(i), hash(i), value(i, 0, tcp()), i as u32),
            InsertOutcome::Inserted { .. }
        ));
    }
    // key(0) is the oldest half-open entry: the first victim unless it becomes established.
    let target = t.lookup(&key(0), hash(0)).unwrap().slot;
    let establish = {
        let t = Arc::clone(&t);
        thread::spawn(move || t.update_flags(target, EntryFlags::ESTABLISHED, 0).is_some())
    };
    let floods: Vec<_> = (0..2u64)
        .map(|f| {
            let t = Arc::clone(&t);
            thread::spawn(move || {
                for j in 0..2 {
                    let i = 1000 + f * 10 + j;
                    match t.insert(&key(i), hash(i), value(i, 2, tcp()), 20) {
                        InsertOutcome::Inserted { evicted, .. } => {
                            assert_eq!(evicted, Evicted::HalfOpen);
                        }
                        InsertOutcome::Contended => {}
                        other => panic!("{other:?}"),
                    }
                }
            })
        })
        .collect();
    let became_established = establish.join().unwrap();
    for f in floods {
        f.join().unwrap();
    }
    let hit = t.lookup(&key(0), hash(0));
    if became_established {
        let hit = hit.expect("established entry evicted");
        assert!(hit.entry.flags.contains(EntryFlags::ESTABLISHED));
    }
    for i in (0..14).chain([1000, 1001, 1010, 1011]) {
        assert!(t.count_key(&key(i), hash(i)) <= 1);
        if let Some(h) = t.lookup(&key(i), hash(i)) {
            assert!(consistent(i, &h.entry));
        }
    }
    assert_eq!(t.occupancy().live, 14);
}

#[test]
fn established_entries_survive_half_open_floods_random() {
    shuttle::check_random(established_entries_survive_half_open_floods, ITERATIONS);
}

#[test]
fn established_entries_survive_half_open_floods_pct() {
    shuttle::check_pct(established_entries_survive_half_open_floods, ITERATIONS, 3);
}

/// The sweeper expires idle entries while workers insert (reclaiming expired slots
/// themselves) and refresh a live entry: fresh entries are never swept, each expired entry
/// disappears exactly once.
fn sweeping_races_inserts() {
    let t = Arc::new(
        FlowTable::new(Config {
            timeouts: Timeouts {
                udp: 10,
                ..Timeouts::default()
            },
            insert_spin_limit: 64,
            ..Config::with_capacity(1)
        })
        .unwrap(),
    );
    let udp = EntryFlags::new(ProtoClass::Udp);
    for i in 0..14 {
        assert!(matches!(
            t.insert(&key(i), hash(i), value(i, 0, udp), 0),
            InsertOutcome::Inserted { .. }
        ));
    }
    let keep = t.lookup(&key(7), hash(7)).unwrap().slot;
    let sweeper = {
        let t = Arc::clone(&t);
        thread::spawn(move || t.sweep(10, usize::MAX).expired)
    };
    let toucher = {
        let t = Arc::clone(&t);
        thread::spawn(move || t.touch(keep, 10))
    };
    let inserter = {
        let t = Arc::clone(&t);
        thread::spawn(move || {
            let mut reclaimed = 0;
            for i in 100..102 {
                match t.insert(&key(i), hash(i), value(i, 1, udp), 10) {
                    InsertOutcome::Inserted { evicted, .. } => {
                        reclaimed += usize::from(evicted == Evicted::Expired);
                    }
                    InsertOutcome::Contended => {}
                    other => panic!("{other:?}"),
                }
            }
            reclaimed
        })
    };
    let swept = sweeper.join().unwrap();
    let touched = toucher.join().unwrap();
    let reclaimed = inserter.join().unwrap();
    // Inserted at tick 10, the new entries are never expired at tick 10.
    let mut new_present = 0;
    for i in 100..102 {
        if let Some(h) = t.lookup(&key(i), hash(i)) {
            assert!(consistent(i, &h.entry));
            new_present += 1;
        }
    }
    let old_present = (0..14)
        .filter(|&i| t.lookup(&key(i), hash(i)).is_some())
        .count();
    // Every old entry was expired at tick 10 unless refreshed first; each one gone was removed
    // by exactly one of sweeper and inserter.
    assert_eq!(old_present + swept + reclaimed, 14);
    assert!(old_present <= usize::from(touched));
    assert_eq!(t.occupancy().live, old_present + new_present);
}

#[test]
fn sweeping_races_inserts_random() {
    shuttle::check_random(sweeping_races_inserts, ITERATIONS);
}

#[test]
fn sweeping_races_inserts_pct() {
    shuttle::check_pct(sweeping_races_inserts, ITERATIONS, 3);
}
