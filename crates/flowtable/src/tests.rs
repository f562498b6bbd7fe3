#![allow(clippy::cast_possible_truncation)] // test keys, counters and ticks are small
use super::*;
use std::ops::ControlFlow;

fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn key(i: u64) -> FlowKey {
    FlowKey([i, !i, 0x0a00_0001, 0x1f90_c350, 6])
}

fn hash(i: u64) -> u64 {
    mix64(i.wrapping_add(0x9e37_79b9_7f4a_7c15))
}

fn entry(backend: u32, flags: EntryFlags) -> NewEntry {
    NewEntry {
        backend,
        generation: 7,
        cookie: backend.wrapping_mul(2_654_435_761),
        flags,
    }
}

fn tcp() -> EntryFlags {
    EntryFlags::new(ProtoClass::Tcp)
}
fn established() -> EntryFlags {
    tcp().with(EntryFlags::ESTABLISHED)
}
fn udp() -> EntryFlags {
    EntryFlags::new(ProtoClass::Udp)
}

fn inserted(o: InsertOutcome) -> (SlotRef, Evicted) {
    match o {
        InsertOutcome::Inserted { slot, evicted } => (slot, evicted),
        other => panic!("expected Inserted, got {other:?}"),
    }
}

/// The smallest table: two buckets, 14 slots, every key's candidates are both buckets.
fn tiny(timeouts: Timeouts) -> FlowTable {
    let t = FlowTable::new(Config {
        timeouts,
        ..Config::with_capacity(1)
    })
    .unwrap();
    assert_eq!(t.slot_count(), 14);
    t
}

#[test]
fn insert_lookup_and_existing() {
    let t = FlowTable::new(Config::with_capacity(1000)).unwrap();
    assert_eq!(t.lookup(&key(1), hash(1)), None);
    let (slot, ev) = inserted(t.insert(&key(1), hash(1), entry(42, tcp()), 100));
    assert_eq!(ev, Evicted::Nothing);
    let hit = t.lookup(&key(1), hash(1)).unwrap();
    assert_eq!(hit.slot, slot);
    assert_eq!(
        hit.entry,
        Entry {
            backend: 42,
            generation: 7,
            cookie: 42u32.wrapping_mul(2_654_435_761),
            flags: tcp(),
            created: 100,
            last_seen: 100,
            marks: 0,
        }
    );
    // A second insert of the same key returns the first entry, not its own value.
    match t.insert(&key(1), hash(1), entry(99, udp()), 101) {
        InsertOutcome::Existing(h) => assert_eq!(h, hit),
        other => panic!("{other:?}"),
    }
    assert_eq!(t.count_key(&key(1), hash(1)), 1);
    assert_eq!(t.occupancy().live, 1);
}

#[test]
fn keys_with_the_same_hash_are_told_apart() {
    let t = FlowTable::new(Config::with_capacity(100)).unwrap();
    let h = hash(5);
    let _ = inserted(t.insert(&key(1), h, entry(1, udp()), 0));
    assert_eq!(t.lookup(&key(2), h), None);
    let _ = inserted(t.insert(&key(2), h, entry(2, udp()), 0));
    assert_eq!(t.lookup(&key(1), h).unwrap().entry.backend, 1);
    assert_eq!(t.lookup(&key(2), h).unwrap().entry.backend, 2);
    // Differing only in the last word.
    let mut k3 = key(1);
    k3.0[4] = 17;
    assert_eq!(t.lookup(&k3, h), None);
}

#[test]
fn full_table_signals_full_and_never_evicts_established() {
    let t = tiny(Timeouts::default());
    for i in 0..14 {
        let _ = inserted(t.insert(&key(i), hash(i), entry(i as u32, established()), 0));
    }
    assert_eq!(
        t.insert(&key(100), hash(100), entry(0, established()), 1),
        InsertOutcome::Full
    );
    assert_eq!(
        t.insert(&key(101), hash(101), entry(0, tcp()), 1),
        InsertOutcome::Full
    );
    assert_eq!(
        t.insert(&key(102), hash(102), entry(0, udp()), 1),
        InsertOutcome::Full
    );
    for i in 0..14 {
        assert_eq!(t.lookup(&key(i), hash(i)).unwrap().entry.backend, i as u32);
    }
}

#[test]
fn half_open_floods_only_displace_half_open_entries_oldest_first() {
    let t = tiny(Timeouts::default());
    // 7 established flows and 7 half-open ones, the half-open ones seen at ticks 0..7.
    for i in 0..7 {
        let _ = inserted(t.insert(&key(i), hash(i), entry(1, established()), 0));
    }
    for i in 7..14 {
        let _ = inserted(t.insert(&key(i), hash(i), entry(2, tcp()), (i - 7) as Tick));
    }
    // A flood of new half-open flows at tick 8: each displaces the oldest half-open entry.
    for (n, i) in (1000..1007).enumerate() {
        let (_, ev) = inserted(t.insert(&key(i), hash(i), entry(3, tcp()), 8));
        assert_eq!(ev, Evicted::HalfOpen);
        // The victim was key(7 + n), seen at tick n.
        assert_eq!(
            t.lookup(&key(7 + n as u64), hash(7 + n as u64)),
            None,
            "n={n}"
        );
    }
    for i in 0..7 {
        assert!(
            t.lookup(&key(i), hash(i)).is_some(),
            "established {i} evicted"
        );
    }
    // New UDP flows may displace half-open ones too, but never established ones.
    let (_, ev) = inserted(t.insert(&key(2000), hash(2000), entry(4, udp()), 9));
    assert_eq!(ev, Evicted::HalfOpen);
    let o = t.occupancy();
    assert_eq!((o.live, o.half_open), (14, 6));
}

#[test]
fn a_completed_handshake_protects_the_entry() {
    let t = tiny(Timeouts::default());
    let mut slots = Vec::new();
    for i in 0..14 {
        slots.push(inserted(t.insert(&key(i), hash(i), entry(1, tcp()), 0)).0);
    }
    for s in &slots {
        let f = t.update_flags(*s, EntryFlags::ESTABLISHED, 0).unwrap();
        assert!(!f.is_half_open());
    }
    assert_eq!(
        t.insert(&key(99), hash(99), entry(0, tcp()), 1),
        InsertOutcome::Full
    );
}

/// M15: entries created by one packet that proves nothing (a spoofed ACK, a one-packet
/// UDP flow) are displaced by new flows before confirmed ones, and expire after the
/// first-packet timeout; once confirmed they are protected like any established entry.
#[test]
fn unconfirmed_entries_yield_to_new_flows_and_expire_early() {
    let to = Timeouts {
        first_packet: 3,
        ..Timeouts::default()
    };
    let t = tiny(to);
    let spoofed = established().with(EntryFlags::UNCONFIRMED);
    let mut slots = Vec::new();
    for i in 0..14 {
        slots.push(inserted(t.insert(&key(i), hash(i), entry(1, spoofed), i as u32 % 2)).0);
    }
    // Seven get their second packet: confirmed.
    for s in &slots[..7] {
        let f = t.update_flags(*s, 0, EntryFlags::UNCONFIRMED).unwrap();
        assert!(!f.is_evictable());
    }
    // New flows displace the unconfirmed ones, oldest first, never the confirmed.
    for i in 100..107 {
        let (_, ev) = inserted(t.insert(&key(i), hash(i), entry(2, udp()), 2));
        assert_eq!(ev, Evicted::HalfOpen, "flow {i}");
    }
    assert_eq!(
        t.insert(&key(200), hash(200), entry(2, udp()), 2),
        InsertOutcome::Full
    );
    for i in 0..7 {
        assert!(t.lookup(&key(i), hash(i)).is_some(), "confirmed {i} kept");
    }
    // An unconfirmed entry expires after `first_packet`, not `udp`.
    let t = tiny(to);
    let _ = inserted(t.insert(
        &key(1),
        hash(1),
        entry(1, udp().with(EntryFlags::UNCONFIRMED)),
        0,
    ));
    let _ = inserted(t.insert(&key(2), hash(2), entry(1, udp()), 0));
    assert_eq!(t.sweep(2, usize::MAX).expired, 0);
    assert_eq!(t.sweep(3, usize::MAX).expired, 1);
    assert!(t.lookup(&key(1), hash(1)).is_none());
    assert!(t.lookup(&key(2), hash(2)).is_some());
}

/// Displaceable entries not opened by a SYN (what spoofed ACK and datagram floods make) go
/// before those opened by a SYN; within each, the oldest first; among SYN-opened ones of one
/// age, half-open before completed handshakes.
#[test]
fn displaceable_entries_go_by_kind_then_age() {
    let t = tiny(Timeouts::default());
    let u = EntryFlags::UNCONFIRMED;
    let syn = EntryFlags::OPENED_BY_SYN;
    let kinds = [
        (established().with(u | syn), "handshake done"),
        (tcp().with(u | syn), "half-open"),
        (established().with(u), "mid-stream ACK"),
        (udp().with(u), "datagram"),
    ];
    // 14 slots: every kind at ticks 0 and 5.
    let mut order = Vec::new();
    for i in 0..14u64 {
        let (f, name) = kinds[(i % 4) as usize];
        let now = if i < 7 { 0 } else { 5 };
        let _ = inserted(t.insert(&key(i), hash(i), entry(1, f), now));
        order.push((i, name, now));
    }
    let rank = |(_, name, now): (u64, &str, u32)| -> (u32, i64, u32) {
        let by_syn = !matches!(name, "mid-stream ACK" | "datagram");
        // Larger goes first.
        (
            u32::from(!by_syn),
            i64::from(6 - now),
            u32::from(name == "half-open"),
        )
    };
    // New flows displace them one by one, in that order.
    let mut gone = Vec::new();
    for j in 100..114u64 {
        let (_, ev) = inserted(t.insert(&key(j), hash(j), entry(2, udp()), 6));
        assert_eq!(ev, Evicted::HalfOpen);
        let now_gone: Vec<_> = order
            .iter()
            .copied()
            .filter(|(i, _, _)| t.lookup(&key(*i), hash(*i)).is_none())
            .filter(|g| !gone.contains(g))
            .collect();
        assert_eq!(now_gone.len(), 1);
        gone.push(now_gone[0]);
    }
    for w in gone.windows(2) {
        assert!(
            rank(w[0]) >= rank(w[1]),
            "{:?} went before {:?}",
            w[0],
            w[1]
        );
    }
}

#[test]
fn expired_entries_are_reclaimed_by_inserts() {
    let to = Timeouts::default();
    let t = tiny(to);
    for i in 0..14 {
        let _ = inserted(t.insert(&key(i), hash(i), entry(1, udp()), 0));
    }
    assert_eq!(
        t.insert(&key(50), hash(50), entry(0, udp()), to.udp - 1),
        InsertOutcome::Full
    );
    let (_, ev) = inserted(t.insert(&key(50), hash(50), entry(0, udp()), to.udp));
    assert_eq!(ev, Evicted::Expired);
    assert_eq!(t.occupancy().live, 14);
}

#[test]
fn timeouts_follow_class_and_fin_rst_shorten() {
    let to = Timeouts {
        tcp_established: 100,
        tcp_half_open: 20,
        tcp_fin: 10,
        tcp_rst: 2,
        udp: 50,
        other: 30,
        first_packet: 5,
    };
    assert_eq!(to.for_flags(established()), 100);
    assert_eq!(to.for_flags(tcp()), 20);
    assert_eq!(to.for_flags(established().with(EntryFlags::FIN)), 10);
    assert_eq!(to.for_flags(established().with(EntryFlags::RST)), 2);
    assert_eq!(
        to.for_flags(established().with(EntryFlags::FIN | EntryFlags::RST)),
        2
    );
    assert_eq!(to.for_flags(udp()), 50);
    assert_eq!(to.for_flags(EntryFlags::new(ProtoClass::Other)), 30);
    // An unconfirmed entry lives at most the first-packet timeout.
    let unconfirmed = EntryFlags::UNCONFIRMED;
    assert_eq!(to.for_flags(udp().with(unconfirmed)), 5);
    assert_eq!(to.for_flags(established().with(unconfirmed)), 5);
    assert_eq!(
        to.for_flags(established().with(unconfirmed | EntryFlags::RST)),
        2
    );
    // One opened by a SYN keeps its class's timeouts while unconfirmed.
    let by_syn = unconfirmed | EntryFlags::OPENED_BY_SYN;
    assert_eq!(to.for_flags(established().with(by_syn)), 100);
    assert_eq!(to.for_flags(tcp().with(by_syn)), 20);
    assert!(established().with(by_syn).is_evictable());
    assert!(udp().with(unconfirmed).is_evictable());
    assert!(established().with(unconfirmed).is_evictable());
    assert!(!established().is_evictable() && !udp().is_evictable());
    assert!(tcp().is_evictable());
    // FIN never lengthens a shorter class timeout.
    let long_fin = Timeouts {
        tcp_fin: 1000,
        ..to
    };
    assert_eq!(long_fin.for_flags(tcp().with(EntryFlags::FIN)), 20);
    assert_eq!(Timeouts::default().scaled(10).udp, 1200);
    assert!(tcp().is_half_open());
    assert!(!established().is_half_open());
    assert!(!tcp().with(EntryFlags::RST).is_half_open());
    assert!(!udp().is_half_open());
    assert_eq!(tcp().with(EntryFlags::APP_MASK).proto(), ProtoClass::Tcp);
    assert_eq!(EntryFlags::from_bits(udp().bits()), udp());
}

#[test]
fn sweep_expires_idle_entries_per_class() {
    let to = Timeouts {
        tcp_established: 100,
        tcp_half_open: 20,
        tcp_fin: 10,
        tcp_rst: 2,
        udp: 50,
        other: 30,
        first_packet: 5,
    };
    let t = FlowTable::new(Config {
        timeouts: to,
        ..Config::with_capacity(64)
    })
    .unwrap();
    let flags = [
        established(),
        tcp(),
        established().with(EntryFlags::FIN),
        established().with(EntryFlags::RST),
        udp(),
        EntryFlags::new(ProtoClass::Other),
    ];
    for (i, f) in flags.iter().enumerate() {
        let _ = inserted(t.insert(&key(i as u64), hash(i as u64), entry(1, *f), 0));
    }
    let all = usize::MAX;
    let present = |t: &FlowTable| -> Vec<bool> {
        (0..6u64)
            .map(|i| t.lookup(&key(i), hash(i)).is_some())
            .collect()
    };
    let s = t.sweep(1, all);
    assert_eq!((s.expired, s.live, s.half_open), (0, 6, 1));
    assert!(s.wrapped);
    assert_eq!(t.sweep(2, all).expired, 1); // RST
    assert_eq!(present(&t), [true, true, true, false, true, true]);
    assert_eq!(t.sweep(10, all).expired, 1); // FIN
    assert_eq!(t.sweep(29, all).expired, 1); // half-open
    assert_eq!(present(&t), [true, false, false, false, true, true]);
    assert_eq!(t.sweep(49, all).expired, 1); // other
    assert_eq!(t.sweep(99, all).expired, 1); // UDP
    let s = t.sweep(100, all);
    assert_eq!((s.expired, s.live), (1, 0));
    assert_eq!(t.occupancy().live, 0);
}

#[test]
fn sweep_is_incremental_and_touch_keeps_entries_alive() {
    let t = FlowTable::new(Config::with_capacity(1000)).unwrap();
    let buckets = t.slot_count() / BUCKET_SLOTS;
    let mut slots = Vec::new();
    for i in 0..500 {
        slots.push(inserted(t.insert(&key(i), hash(i), entry(1, udp()), 0)).0);
    }
    // Keep the even ones fresh.
    for (i, s) in slots.iter().enumerate() {
        if i % 2 == 0 {
            assert!(t.touch(*s, 100));
        }
    }
    assert_eq!(t.lookup(&key(0), hash(0)).unwrap().entry.last_seen, 100);
    let now = 130; // odd ones idle 130 > 120 ticks; even ones 30
    let mut total = SweepStats::default();
    let mut steps = 0;
    loop {
        let s = t.sweep(now, 10);
        assert!(s.buckets <= 10);
        total.buckets += s.buckets;
        total.expired += s.expired;
        total.live += s.live;
        steps += 1;
        if s.wrapped {
            break;
        }
    }
    assert_eq!(steps, buckets.div_ceil(10));
    assert_eq!(total.buckets, buckets);
    assert_eq!((total.expired, total.live), (250, 250));
    for i in 0..500u64 {
        assert_eq!(t.lookup(&key(i), hash(i)).is_some(), i % 2 == 0, "{i}");
    }
}

#[test]
fn stale_handles_are_refused() {
    let t = tiny(Timeouts::default());
    let (s1, _) = inserted(t.insert(&key(1), hash(1), entry(1, tcp()), 0));
    assert!(t.remove(s1));
    assert!(!t.remove(s1));
    assert_eq!(t.lookup(&key(1), hash(1)), None);
    // Refill every slot so the old one is certainly reused.
    let mut new_slots = Vec::new();
    for i in 10..24 {
        new_slots.push(inserted(t.insert(&key(i), hash(i), entry(2, tcp()), 5)).0);
    }
    assert!(new_slots.iter().any(|s| s.index() == s1.index()));
    assert!(!new_slots.contains(&s1));
    assert_eq!(t.update_flags(s1, EntryFlags::RST, 0), None);
    assert!(!t.touch(s1, 50));
    assert!(!t.remove(s1));
    for i in 10..24 {
        let e = t.lookup(&key(i), hash(i)).unwrap().entry;
        assert_eq!((e.flags, e.last_seen), (tcp(), 5));
    }
}

#[test]
fn flag_updates_keep_the_protocol_class() {
    let t = tiny(Timeouts::default());
    let (s, _) = inserted(t.insert(&key(1), hash(1), entry(1, tcp()), 0));
    let f = t
        .update_flags(s, EntryFlags::ESTABLISHED | EntryFlags::FIN, 0xff)
        .unwrap();
    // `clear` cannot touch the protocol bits; set-and-clear of the same bit clears it.
    assert_eq!(f, tcp());
    let f = t.update_flags(s, EntryFlags::ESTABLISHED, 0).unwrap();
    assert_eq!(f, established());
    let f = t.update_flags(s, EntryFlags::FIN, 0).unwrap();
    assert_eq!(t.lookup(&key(1), hash(1)).unwrap().entry.flags, f);
    assert_eq!(t.update_flags(s, 0, EntryFlags::FIN), Some(established()));
}

#[test]
fn ticks_may_wrap() {
    let t = tiny(Timeouts::default());
    let start = u32::MAX - 5;
    let _ = inserted(t.insert(&key(1), hash(1), entry(1, udp()), start));
    // 100 ticks later, across the wrap: still alive (UDP timeout 120).
    assert_eq!(t.sweep(start.wrapping_add(100), usize::MAX).expired, 0);
    // A worker's tick slightly behind the sweeper's does not look like a huge age.
    assert_eq!(t.sweep(start.wrapping_sub(3), usize::MAX).expired, 0);
    assert_eq!(t.sweep(start.wrapping_add(120), usize::MAX).expired, 1);
}

#[test]
fn configuration_is_validated() {
    assert_eq!(
        FlowTable::new(Config::with_capacity(0)).unwrap_err(),
        ConfigError::ZeroCapacity
    );
    assert_eq!(
        FlowTable::new(Config::with_capacity(MAX_CAPACITY + 1)).unwrap_err(),
        ConfigError::CapacityTooLarge(MAX_CAPACITY + 1)
    );
    let bad = Config {
        timeouts: Timeouts {
            udp: 1 << 31,
            ..Timeouts::default()
        },
        ..Config::with_capacity(10)
    };
    assert_eq!(
        FlowTable::new(bad).unwrap_err(),
        ConfigError::TimeoutTooLarge(1 << 31)
    );
    assert!(ConfigError::ZeroCapacity.to_string().contains("capacity"));
}

#[test]
fn ten_million_entries_fit_well_under_two_gib() {
    let bytes = FlowTable::memory_bytes_for(10_000_000).unwrap();
    let per_entry = bytes as f64 / 10_000_000.0;
    println!("10M entries: {bytes} bytes, {per_entry:.1} B/entry");
    assert!(bytes < 1 << 30, "{bytes}");
    assert!((per_entry - 91.4).abs() < 0.5, "{per_entry}");
    // The small case allocates what it says.
    let t = FlowTable::new(Config::with_capacity(1000)).unwrap();
    assert_eq!(
        FlowTable::memory_bytes_for(1000).unwrap(),
        t.slot_count() / BUCKET_SLOTS * 64 * 8
    );
}

#[test]
fn memory_bytes_for_is_what_the_table_allocates() {
    // Small (unpadded), just below and above the huge-page threshold, and padded to 2 MiB.
    for cap in [1, 1000, 7_000, 8_000, 100_000, 1 << 20, 3_000_001] {
        let t = FlowTable::new(Config::with_capacity(cap)).unwrap();
        assert_eq!(
            t.allocated_bytes(),
            FlowTable::memory_bytes_for(cap).unwrap(),
            "capacity {cap}"
        );
    }
}

#[test]
fn a_table_fills_to_its_nominal_capacity() {
    let cap = 100_000;
    let t = FlowTable::new(Config::with_capacity(cap)).unwrap();
    let mut full = 0;
    for i in 0..cap as u64 {
        match t.insert(&key(i), hash(i), entry(i as u32, udp()), 0) {
            InsertOutcome::Inserted { .. } => {}
            InsertOutcome::Full => full += 1,
            other => panic!("{other:?}"),
        }
    }
    println!("filling to capacity {cap}: {full} inserts found both buckets full");
    assert!(full <= cap / 1000, "{full}");
    assert_eq!(t.occupancy().live, cap - full);
    for i in (0..cap as u64).step_by(97) {
        if let Some(h) = t.lookup(&key(i), hash(i)) {
            assert_eq!(h.entry.backend, i as u32);
        }
    }
}

#[test]
fn occupancy_hints_follow_every_insert_removal_sweep_and_eviction() {
    // A tiny table: evictions, and every slot filled and emptied many times over.
    let t = tiny(Timeouts::default());
    let mut held: Vec<(u64, SlotRef)> = Vec::new();
    let mut now = 0;
    for step in 0..5_000u64 {
        let r = mix64(step);
        match r % 4 {
            0 | 1 => {
                let i = r >> 8;
                let flags = if r & 0x10 == 0 { tcp() } else { udp() };
                if let InsertOutcome::Inserted { slot, .. } =
                    t.insert(&key(i), hash(i), entry(i as u32, flags), now)
                {
                    held.push((i, slot));
                }
            }
            2 if !held.is_empty() => {
                let (_, slot) = held.swap_remove((r >> 8) as usize % held.len());
                let _ = t.remove(slot);
            }
            _ => {
                now += (r >> 8) as u32 % 200;
                let _ = t.sweep(now, 2);
            }
        }
        assert!(t.occupancy_hints_exact(), "step {step}");
    }
    // The hints choose where a key goes exactly as the control words did: the 100,000-key
    // fill of `a_table_fills_to_its_nominal_capacity` still finds 64 full pairs (checked
    // there), and a table filled then emptied is free again everywhere.
    for (_, slot) in held.drain(..) {
        let _ = t.remove(slot);
    }
    let _ = t.sweep(now + 1_000_000, 2);
    assert_eq!(t.occupancy().live, 0);
    assert!(t.occupancy_hints_exact());
}

#[test]
fn stale_occupancy_hints_never_lose_a_free_slot_nor_overwrite_an_entry() {
    let t = tiny(Timeouts::default());
    // Hints saying "full" over empty buckets (two removals caught between their steps): the
    // insert still finds a free slot (the victim scan sees them EMPTY) and evicts nothing.
    t.force_occupancy_hints(0, 0x7f);
    t.force_occupancy_hints(1, 0x7f);
    let (slot, ev) = inserted(t.insert(&key(1), hash(1), entry(1, tcp()), 5));
    assert_eq!(ev, Evicted::Nothing);
    assert_eq!(t.lookup(&key(1), hash(1)).map(|h| h.slot), Some(slot));
    // Hints saying "free" over occupied slots (claims that raced removals): no entry is
    // overwritten, and the new keys go to slots that were EMPTY.
    for i in 2..10u64 {
        let _ = inserted(t.insert(&key(i), hash(i), entry(i as u32, established()), 5));
    }
    t.force_occupancy_hints(0, 0);
    t.force_occupancy_hints(1, 0);
    for i in 10..14u64 {
        let _ = inserted(t.insert(&key(i), hash(i), entry(i as u32, established()), 5));
    }
    assert_eq!(t.occupancy().live, 13);
    for i in 1..14u64 {
        assert_eq!(
            t.lookup(&key(i), hash(i)).map(|h| h.entry.backend),
            Some(i as u32),
            "key {i}"
        );
    }
}

#[test]
fn burst_lookups_match_single_lookups() {
    let t = FlowTable::new(Config::with_capacity(10_000)).unwrap();
    // Present: even keys below 2000; absent: odd ones and everything above.
    for i in (0..2000).step_by(2) {
        let _ = inserted(t.insert(&key(i), hash(i), entry(i as u32, udp()), 3));
    }
    // 100 keys: more than one internal group of 32, with a ragged end.
    let ids: Vec<u64> = (0..100u64).map(|j| (j * 37) % 2100).collect();
    let keys: Vec<FlowKey> = ids.iter().map(|&i| key(i)).collect();
    let hashes: Vec<u64> = ids.iter().map(|&i| hash(i)).collect();
    let mut out = vec![None; 100];
    t.lookup_burst(&keys, &hashes, &mut out);
    let mut hits = 0;
    for (j, &i) in ids.iter().enumerate() {
        assert_eq!(out[j], t.lookup(&key(i), hash(i)), "key {i}");
        assert_eq!(out[j].is_some(), i < 2000 && i % 2 == 0, "key {i}");
        if let Some(h) = out[j] {
            assert_eq!(h.entry.backend, i as u32);
            hits += 1;
        }
    }
    assert!(hits > 30);
    // Slices of different lengths: only the common prefix is written.
    let mut short = vec![None; 10];
    t.lookup_burst(&keys, &hashes[..5], &mut short);
    assert_eq!(&short[..5], &out[..5]);
    assert!(short[5..].iter().all(Option::is_none));
    // Prefetching is only a hint.
    t.prefetch(hash(0));
    assert!(t.lookup(&key(0), hash(0)).is_some());
}

#[test]
fn staged_lookups_match_single_lookups_in_a_full_table() {
    // Filled to nominal capacity many keys sit in their second bucket and tag bytes collide:
    // every path of `screen` / `complete` is taken.
    let cap = 3000u64;
    let t = FlowTable::new(Config::with_capacity(cap as usize)).unwrap();
    for i in 0..cap {
        let _ = t.insert(&key(i), hash(i), entry(i as u32, udp()), 3);
    }
    let (mut hits, mut misses) = (0, 0);
    let ids: Vec<u64> = (0..cap + 1000).collect();
    for chunk in ids.chunks(32) {
        let mut staged: Vec<Lookup> = chunk.iter().map(|&i| t.begin(hash(i))).collect();
        t.screen(&mut staged);
        for (l, &i) in staged.iter().zip(chunk) {
            let got = t.complete(l, &key(i));
            assert_eq!(got, t.lookup(&key(i), hash(i)), "key {i}");
            match got {
                Some(h) => {
                    assert_eq!(h.entry.backend, i as u32);
                    hits += 1;
                }
                None => misses += 1,
            }
        }
    }
    assert!(
        hits > 2900 && misses >= 1000,
        "{hits} hits, {misses} misses"
    );
}

#[test]
fn a_staged_lookup_sees_changes_made_after_its_screening() {
    let t = FlowTable::new(Config::with_capacity(100)).unwrap();
    inserted(t.insert(&key(1), hash(1), entry(1, udp()), 3));
    let mut staged = [t.begin(hash(1)), t.begin(hash(2))];
    t.screen(&mut staged);
    // Removed after screening: its candidate slot is re-validated, never read stale.
    let hit = t.lookup(&key(1), hash(1)).unwrap();
    assert!(t.remove(hit.slot));
    assert_eq!(t.complete(&staged[0], &key(1)), None);
    // Re-inserted with another backend into the same slot: the new occupant is what is read.
    inserted(t.insert(&key(1), hash(1), entry(7, udp()), 4));
    let again = t.complete(&staged[0], &key(1));
    assert!(again.is_none() || again.unwrap().entry.backend == 7);
    // Inserted after screening found no candidate: a fresh lookup (what the pipeline does
    // after its own writes) finds it.
    inserted(t.insert(&key(2), hash(2), entry(2, udp()), 4));
    assert_eq!(t.lookup(&key(2), hash(2)).unwrap().entry.backend, 2);
}

#[test]
fn scan_visits_every_live_entry_once_and_can_stop_early() {
    let t = FlowTable::new(Config::with_capacity(1000)).unwrap();
    for i in 0..500u64 {
        inserted(t.insert(&key(i), hash(i), entry(i as u32, udp()), 10 + i as u32));
    }
    // Removed entries are not visited.
    for i in 0..100u64 {
        let hit = t.lookup(&key(i), hash(i)).unwrap();
        assert!(t.remove(hit.slot));
    }
    let mut seen = std::collections::HashMap::new();
    let visited = t.scan(|k, e| {
        assert!(seen.insert(k.0, *e).is_none(), "visited twice: {k:?}");
        ControlFlow::Continue(())
    });
    assert_eq!(visited, 400);
    assert_eq!(seen.len(), 400);
    for i in 100..500u64 {
        let e = seen[&key(i).0];
        assert_eq!(e.backend, i as u32);
        assert_eq!(e.cookie, (i as u32).wrapping_mul(2_654_435_761));
        assert_eq!(e.generation, 7);
        assert_eq!(e.created, 10 + i as u32);
        assert_eq!(e.last_seen, 10 + i as u32);
        assert_eq!(e.flags, udp());
    }
    let mut n = 0;
    assert_eq!(
        t.scan(|_, _| {
            n += 1;
            if n == 3 {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        }),
        3
    );
}

/// The tag bytes in a bucket's meta word only pick candidates: every entry stays findable
/// through slot reuse (removal, eviction of half-open entries, re-insertion), in full buckets
/// where many tags share their low byte, and lookups of absent keys find nothing.
#[test]
fn every_live_entry_is_found_through_slot_reuse() {
    // Tiny: two buckets, so every slot is reused many times. Hashes from few seeds share
    // their tag's low byte (the meta word's hint) while the top byte varies the buckets.
    let t = tiny(Timeouts::default());
    let h = |i: u64| hash(i % 8) ^ (i << 56);
    let mut live: std::collections::HashMap<u64, (SlotRef, u32)> = std::collections::HashMap::new();
    let mut evictions = 0;
    for round in 0..2000u64 {
        let i = mix64(round) % 40;
        if let Some(&(_, b)) = live.get(&i) {
            let hit = t.lookup(&key(i), h(i)).expect("a live entry is found");
            assert_eq!(hit.entry.backend, b);
            if round % 3 == 0 {
                assert!(t.remove(hit.slot));
                live.remove(&i);
            }
        } else {
            assert_eq!(t.lookup(&key(i), h(i)), None, "absent key {i}");
            // Half-open entries may be evicted to make room, established ones not.
            let flags = if round % 4 == 0 { established() } else { tcp() };
            match t.insert(&key(i), h(i), entry(round as u32, flags), round as u32) {
                InsertOutcome::Inserted { slot, evicted } => {
                    if evicted != Evicted::Nothing {
                        // The evicted entry's handle went stale (its slot has a new version).
                        evictions += 1;
                        live.retain(|_, (s, _)| t.update_flags(*s, 0, 0).is_some());
                    }
                    live.insert(i, (slot, round as u32));
                }
                InsertOutcome::Full => {}
                other => panic!("{other:?}"),
            }
        }
        for (&j, &(_, b)) in &live {
            let hit = t.lookup(&key(j), h(j)).expect("a live entry is found");
            assert_eq!(hit.entry.backend, b);
        }
        assert_eq!(t.occupancy().live, live.len());
    }
    assert!(evictions > 10, "{evictions}");
}

#[test]
fn tick_comparisons_wrap() {
    use crate::{tick_age, tick_reached};
    assert_eq!(tick_age(5, 3), 2);
    assert_eq!(tick_age(3, 5), -2);
    // Across the wrap: 2 is 4 ticks after u32::MAX - 1.
    assert_eq!(tick_age(2, u32::MAX - 1), 4);
    assert_eq!(tick_age(u32::MAX - 1, 2), -4);
    assert!(tick_reached(7, 7));
    assert!(tick_reached(2, u32::MAX - 1));
    assert!(!tick_reached(u32::MAX - 1, 2));
    // Up to 2^31 - 1 ticks apart either way.
    assert!(tick_reached(i32::MAX as u32, 0));
    assert!(!tick_reached(0, i32::MAX as u32));
}

/// A block from the global allocator that counts its frees, standing in for DPDK's memory.
mod provided {
    #![allow(
        unsafe_code,
        reason = "a test implementation of the unsafe TableMemory contract"
    )]
    use super::*;
    use std::alloc::{Layout, alloc, dealloc};
    use std::ptr::NonNull;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    pub(super) struct Block {
        ptr: NonNull<u8>,
        layout: Layout,
        /// Bytes the block claims (may differ from `layout` to test the checks).
        claims: usize,
        offset: usize,
        freed: Arc<AtomicUsize>,
    }

    impl Block {
        pub(super) fn new(bytes: usize, align: usize, freed: &Arc<AtomicUsize>) -> Block {
            Block::skewed(bytes, align, 0, 0, freed)
        }

        /// `offset` bytes past an aligned start, claiming `short` bytes fewer than asked.
        pub(super) fn skewed(
            bytes: usize,
            align: usize,
            offset: usize,
            short: usize,
            freed: &Arc<AtomicUsize>,
        ) -> Block {
            let layout = Layout::from_size_align(bytes + offset, align).unwrap();
            // SAFETY: non-zero size (tables ask for at least 512 KiB).
            let raw = unsafe { alloc(layout) };
            Block {
                ptr: NonNull::new(raw).unwrap(),
                layout,
                claims: bytes - short,
                offset,
                freed: freed.clone(),
            }
        }
    }

    // SAFETY: the block is this value's own allocation, freed only in `drop`; `ptr()` is
    // fixed and `len()` bytes from it lie inside the allocation.
    unsafe impl TableMemory for Block {
        fn ptr(&self) -> NonNull<u8> {
            // SAFETY: `offset` lies inside the allocation (it was sized `bytes + offset`).
            unsafe { self.ptr.add(self.offset) }
        }
        fn len(&self) -> usize {
            self.claims
        }
        fn describe(&self) -> &'static str {
            "test block"
        }
    }

    // SAFETY: the block is plain memory owned by this value.
    unsafe impl Send for Block {}
    // SAFETY: as above; it is only written through the table, which synchronises itself.
    unsafe impl Sync for Block {}

    impl Drop for Block {
        fn drop(&mut self) {
            self.freed.fetch_add(1, Ordering::Relaxed);
            // SAFETY: allocated with `layout` in `skewed`, freed once, here.
            unsafe { dealloc(self.ptr.as_ptr(), self.layout) };
        }
    }
}

#[test]
fn a_provided_block_holds_the_table_and_is_freed_with_it() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let freed = Arc::new(AtomicUsize::new(0));
    let asked = Arc::new(AtomicUsize::new(0));
    let provider = |bytes: usize, align: usize| -> Option<Box<dyn TableMemory>> {
        asked.fetch_add(1, Ordering::Relaxed);
        assert_eq!(align, 2 << 20);
        assert_eq!(bytes % (2 << 20), 0);
        Some(Box::new(provided::Block::new(bytes, align, &freed)))
    };
    let t = FlowTable::new_in(Config::with_capacity(100_000), &provider).unwrap();
    assert_eq!(t.memory(), "test block");
    assert_eq!(asked.load(Ordering::Relaxed), 1);
    for i in 0..50_000 {
        inserted(t.insert(&key(i), hash(i), entry(i as u32, tcp()), 1));
    }
    for i in 0..50_000 {
        assert_eq!(
            t.lookup(&key(i), hash(i)).map(|h| h.entry.backend),
            Some(i as u32)
        );
    }
    assert_eq!(freed.load(Ordering::Relaxed), 0);
    drop(t);
    assert_eq!(freed.load(Ordering::Relaxed), 1);
}

#[test]
fn small_tables_and_unfit_blocks_stay_on_the_heap() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let freed = Arc::new(AtomicUsize::new(0));
    // Under 512 KiB the provider is not asked.
    let never = |_: usize, _: usize| -> Option<Box<dyn TableMemory>> { panic!("asked") };
    let t = FlowTable::new_in(Config::with_capacity(1000), &never).unwrap();
    assert_eq!(t.memory(), "heap");
    // No block, a misaligned one, a short one: the heap, and a refused block is freed.
    let none = |_: usize, _: usize| -> Option<Box<dyn TableMemory>> { None };
    assert_eq!(
        FlowTable::new_in(Config::with_capacity(100_000), &none)
            .unwrap()
            .memory(),
        "heap"
    );
    for (offset, short) in [(64, 0), (0, 4096)] {
        let unfit = |bytes: usize, align: usize| -> Option<Box<dyn TableMemory>> {
            Some(Box::new(provided::Block::skewed(
                bytes, align, offset, short, &freed,
            )))
        };
        let before = freed.load(Ordering::Relaxed);
        let t = FlowTable::new_in(Config::with_capacity(100_000), &unfit).unwrap();
        assert_eq!(t.memory(), "heap");
        assert_eq!(freed.load(Ordering::Relaxed), before + 1);
        inserted(t.insert(&key(1), hash(1), entry(1, tcp()), 1));
        assert!(t.lookup(&key(1), hash(1)).is_some());
    }
}

/// Marks are set by the caller, survive refreshes and flag updates, refuse a stale handle, and
/// start empty for the slot's next occupant.
#[test]
fn marks_accumulate_survive_touches_and_die_with_the_entry() {
    let t = FlowTable::new(Config::with_capacity(1000)).unwrap();
    let (slot, _) = inserted(t.insert(&key(1), hash(1), entry(1, udp()), 10));
    assert!(t.mark(slot, 0b01));
    assert!(t.touch(slot, 11));
    assert!(t.mark(slot, 0b10));
    let _ = t.update_flags(slot, EntryFlags::FIN, 0);
    assert!(t.touch(slot, 12));
    let hit = t.lookup(&key(1), hash(1)).unwrap();
    assert_eq!((hit.entry.marks, hit.entry.last_seen), (0b11, 12));
    assert!(t.remove(slot));
    assert!(!t.mark(slot, 0b100), "stale handle");
    let (again, _) = inserted(t.insert(&key(1), hash(1), entry(1, udp()), 13));
    assert_eq!(t.lookup(&key(1), hash(1)).unwrap().entry.marks, 0);
    assert!(t.mark(again, 0b100));
    assert_eq!(t.lookup(&key(1), hash(1)).unwrap().entry.marks, 0b100);
}

/// The placement hash is the table's own: two tables place one key differently unless given
/// the same key.
#[test]
fn placement_is_keyed_per_table() {
    let cfg = |k: Option<crate::PlacementKey>| Config {
        placement: k,
        ..Config::with_capacity(1000)
    };
    let (a, b) = (
        FlowTable::new(cfg(None)).unwrap(),
        FlowTable::new(cfg(None)).unwrap(),
    );
    let k = key(9);
    assert_ne!(a.hash(&k), b.hash(&k));
    let fixed = crate::PlacementKey::fixed(3, 4);
    let (c, d) = (
        FlowTable::new(cfg(Some(fixed))).unwrap(),
        FlowTable::new(cfg(Some(fixed))).unwrap(),
    );
    assert_eq!(c.hash(&k), d.hash(&k));
    assert_eq!(c.hash(&k), fixed.hash(&k));
}
