//! Inserts: serialised per key by its primary bucket's lock, two-choice placement, and
//! eviction of expired, then displaceable entries when both buckets are full (M15).

use super::lookup::Found;
use super::{
    BUCKET_SLOTS, BUSY, CLAIM_ROUNDS, EMPTY, EntryFlags, Evicted, FlowKey, FlowTable,
    InsertOutcome, LIVE, LOCK, NewEntry, Place, SlotRef, Tick, Timeouts, W_BACKEND, W_COOKIE,
    W_SEEN, flags_of, hint_of, hint_shift, index32, lo32, pack, second_first, state, tick_age,
    used_bit, version,
};
use crate::sync::{AtomicU64, Ordering, fence, spin_loop};

/// Every slot of a bucket, as a slot mask.
const ALL_SLOTS: u32 = (1 << BUCKET_SLOTS) - 1;

/// The rank of a displaceable entry of `age` ticks (higher goes first): those not opened by a
/// SYN (a mid-stream segment, a datagram, a fragment: what spoofed one-packet floods send)
/// before any opened by a SYN; among each, the oldest first, and among SYN-opened ones of one
/// age the half-open before those whose handshake completed. The new-entry budgets keep
/// one-packet floods of either kind from filling the table; what this order decides is who
/// gives way when something does (packet pairs, a flood beyond the table): the flood's older
/// entries before a real connection's new one.
const fn eviction_rank(flags: EntryFlags, age: i64) -> i64 {
    if !flags.contains(EntryFlags::OPENED_BY_SYN) {
        (2 << 40) + age
    } else {
        (1 << 40) + 2 * age + flags.is_half_open() as i64
    }
}

/// Rank of an expired entry: above every displaceable one, most overdue first.
const EXPIRED_RANK: i64 = 4 << 40;

/// What the victim scan needs of an entry's flags, for each of the 256 flag bytes, worked
/// out once per table from its timeouts: an insert that evicts ranks 14 entries, and
/// deriving each one's timeout and rank from its flags bit by bit was most of its cost.
pub(super) struct Fates([Fate; 256]);

/// See [`Fates`]: an entry's timeout, and its rank as `base + step × age` if it is
/// displaceable before it expires (`step` 0: it is not).
#[derive(Clone, Copy, Default)]
struct Fate {
    timeout: u32,
    step: u8,
    base: i64,
}

impl Fates {
    pub(super) fn new(timeouts: &Timeouts) -> Box<Fates> {
        let mut fates = Box::new(Fates([Fate::default(); 256]));
        for (bits, f) in (0..=u8::MAX).zip(fates.0.iter_mut()) {
            let flags = EntryFlags(bits);
            let base = eviction_rank(flags, 0);
            *f = Fate {
                timeout: timeouts.for_flags(flags),
                // 1 or 2 (`eviction_rank`); `fates_rank_as_the_flags_say` checks it.
                step: if flags.is_evictable() {
                    u8::try_from(eviction_rank(flags, 1) - base).unwrap_or(0)
                } else {
                    0
                },
                base,
            };
        }
        fates
    }

    #[inline(always)]
    fn of(&self, flags: u8) -> Fate {
        self.0[usize::from(flags)]
    }

    /// The idle timeout of an entry with flag byte `flags` ([`Timeouts::for_flags`]).
    #[inline(always)]
    pub(super) fn timeout(&self, flags: u8) -> Tick {
        self.of(flags).timeout
    }

    /// Whether a rank is an expired entry's or a displaced one's.
    fn kind(rank: i64) -> Evicted {
        if rank >= EXPIRED_RANK {
            Evicted::Expired
        } else {
            Evicted::HalfOpen
        }
    }
}

impl Fate {
    /// The rank of an entry of `age` ticks with these flags as a victim, `None` if it may not
    /// be displaced.
    #[inline(always)]
    fn rank(self, age: i64) -> Option<i64> {
        let timeout = i64::from(self.timeout);
        if age >= timeout {
            Some(EXPIRED_RANK + age - timeout)
        } else if self.step != 0 {
            Some(self.base + i64::from(self.step) * age)
        } else {
            None
        }
    }
}

impl FlowTable {
    /// Inserts `key` unless present. See [`InsertOutcome`] for the results.
    ///
    /// If both candidate buckets are full, makes room by evicting, in this order, an entry
    /// already past its idle timeout, then the least recently seen half-open TCP or
    /// [`EntryFlags::UNCONFIRMED`] entry. Confirmed established TCP, UDP and other entries are
    /// never evicted before they expire, so a flood of half-open or one-packet flows only ever
    /// competes with its own kind (M15).
    pub fn insert(&self, key: &FlowKey, hash: u64, new: NewEntry, now: Tick) -> InsertOutcome {
        let p = self.place(hash);
        let Some(lock) = self.header(p.b1).map(|h| &h.meta) else {
            return InsertOutcome::Full;
        };
        // Inserts of one key are serialised by its primary bucket's insert lock, which makes
        // "check absent, then claim a slot" atomic with respect to other inserts of the same
        // key (two workers racing on a flow's first packets must end with one entry). Readers,
        // touches, flag updates and removals never take it.
        let mut spins = 0u32;
        loop {
            // Test, then test-and-set: the other bits of the word are tag bytes that
            // concurrent claims in this bucket may change meanwhile.
            if lock.load(Ordering::Relaxed) & LOCK == 0
                && lock.fetch_or(LOCK, Ordering::Acquire) & LOCK == 0
            {
                break;
            }
            spins += 1;
            if spins > self.spin_limit {
                return InsertOutcome::Contended;
            }
            spin_loop();
        }
        let out = self.insert_locked(key, p, new, now);
        lock.fetch_and(!LOCK, Ordering::Release);
        out
    }

    fn insert_locked(&self, key: &FlowKey, p: Place, new: NewEntry, now: Tick) -> InsertOutcome {
        // Any earlier insert of this key published its entry before releasing the lock we now
        // hold, so a present key is visible here — unless its slot kept changing (flag
        // updates) for every bounded re-read; then inserting could duplicate it, so give up.
        for b in [p.b1, p.b2] {
            match self.probe(b, self.match_mask(b, p.tag), p.tag, key) {
                Found::Hit(hit) => return InsertOutcome::Existing(hit),
                Found::GaveUp => return InsertOutcome::Contended,
                Found::Absent => {}
            }
        }
        let (Some(h1), Some(h2)) = (self.header(p.b1), self.header(p.b2)) else {
            return InsertOutcome::Full;
        };
        // Set once a victim scan has seen an EMPTY slot the occupancy hints did not name (a
        // removal between its two steps): from then on every slot is tried.
        let mut every_slot = false;
        for _ in 0..CLAIM_ROUNDS {
            // Two-choice placement, see `second_first`, by the occupancy hints (see `Header`).
            let (f1, f2) = (h1.free_hint(), h2.free_hint());
            let order = if second_first(f1.count_ones() as usize, f2.count_ones() as usize) {
                [(p.b2, h2, f2), (p.b1, h1, f1)]
            } else {
                [(p.b1, h1, f1), (p.b2, h2, f2)]
            };
            for (b, h, free) in order {
                let mut candidates = if every_slot { ALL_SLOTS } else { free };
                while candidates != 0 {
                    let i = candidates.trailing_zeros() as usize;
                    candidates &= candidates - 1;
                    let Some(ctrl) = h.ctrl.get(i) else {
                        break;
                    };
                    let c = ctrl.load(Ordering::Acquire);
                    if state(c) == EMPTY
                        && let Some(slot) =
                            self.claim(ctrl, c, b * BUCKET_SLOTS + i, key, p, new, now)
                    {
                        return InsertOutcome::Inserted {
                            slot,
                            evicted: Evicted::Nothing,
                        };
                    }
                }
            }
            // No free slot: look for a victim among the 14 live entries, the highest ranked
            // (the first of equals): expired entries first (most overdue first), then the
            // displaceable ones by what they proved, each kind oldest first.
            let mut best: Option<(i64, usize, usize, u64)> = None;
            let mut saw_empty = false;
            for (b, _, _) in order {
                let Some(k) = self.buckets.get(b) else {
                    continue;
                };
                for (i, (ctrl, s)) in k.header.ctrl.iter().zip(&k.slots).enumerate() {
                    let c = ctrl.load(Ordering::Acquire);
                    if state(c) != LIVE {
                        // Freed since the first scan (removal, sweep): claim it next round.
                        saw_empty |= state(c) == EMPTY;
                        continue;
                    }
                    let seen = lo32(s.words[W_SEEN].load(Ordering::Relaxed));
                    let age = i64::from(tick_age(now, seen));
                    let Some(score) = self.fates.of(flags_of(c)).rank(age) else {
                        continue;
                    };
                    if best.is_none_or(|v| score > v.0) {
                        best = Some((score, b, i, c));
                    }
                }
            }
            // An EMPTY slot the hints did not name: try every slot before evicting anyone.
            if saw_empty && !every_slot {
                every_slot = true;
                continue;
            }
            // The victim's control word is found again from its place, not kept as a
            // reference through the scan: that cost every insert 14 instructions (registers).
            let Some((idx, ctrl, c, kind)) = best.and_then(|(score, b, i, c)| {
                let ctrl = self.header(b)?.ctrl.get(i)?;
                Some((b * BUCKET_SLOTS + i, ctrl, c, Fates::kind(score)))
            }) else {
                if saw_empty {
                    continue;
                }
                return InsertOutcome::Full;
            };
            // The claim's compare-exchange fails if the victim changed meanwhile (touched into
            // ESTABLISHED by a flag update, removed, …); then look again.
            if let Some(slot) = self.claim(ctrl, c, idx, key, p, new, now) {
                return InsertOutcome::Inserted {
                    slot,
                    evicted: kind,
                };
            }
        }
        InsertOutcome::Contended
    }

    /// Claims slot `idx` (control word currently `c`, EMPTY or a LIVE victim) and publishes the
    /// new entry in it. `None` if the control word changed first.
    #[allow(clippy::too_many_arguments)]
    fn claim(
        &self,
        ctrl: &AtomicU64,
        c: u64,
        idx: usize,
        key: &FlowKey,
        p: Place,
        new: NewEntry,
        now: Tick,
    ) -> Option<SlotRef> {
        let slot = self.slot(idx)?;
        let header = self.header(idx / BUCKET_SLOTS)?;
        let v = version(c).wrapping_add(1);
        ctrl.compare_exchange(
            c,
            pack(v, p.tag, 0, BUSY),
            Ordering::AcqRel,
            Ordering::Relaxed,
        )
        .ok()?;
        // The slot's tag byte and occupancy bit, while it is BUSY and before it turns LIVE
        // (see `Header`). Only the holder of a slot's claim writes its byte; other bytes, bits
        // and the lock bit may change concurrently, hence the compare-exchange loop (it never
        // waits for anyone).
        let shift = hint_shift(idx % BUCKET_SLOTS);
        let byte = (u64::from(hint_of(p.tag)) << shift) | used_bit(idx % BUCKET_SLOTS);
        let mask = (0xff << shift) | used_bit(idx % BUCKET_SLOTS);
        let _ = header
            .meta
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |m| {
                (m & mask != byte).then_some(m & !mask | byte)
            });
        // Seqlock write side: the release fence keeps the data stores below from becoming
        // visible before the BUSY claim, so a reader that sees any of them re-reads a changed
        // control word.
        fence(Ordering::Release);
        let w = &slot.words;
        for (i, k) in key.0.iter().enumerate() {
            w[i].store(*k, Ordering::Relaxed);
        }
        w[W_BACKEND].store(
            u64::from(new.backend) | (u64::from(new.generation) << 32),
            Ordering::Relaxed,
        );
        w[W_COOKIE].store(
            u64::from(new.cookie) | (u64::from(now) << 32),
            Ordering::Relaxed,
        );
        w[W_SEEN].store(u64::from(now), Ordering::Relaxed);
        // Publish: the release store makes the data visible to readers that acquire LIVE.
        ctrl.store(pack(v, p.tag, new.flags.0, LIVE), Ordering::Release);
        Some(SlotRef {
            index: index32(idx),
            version: v,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table gives every flag byte and age the rank the flags themselves give.
    #[test]
    fn fates_rank_as_the_flags_say() {
        let timeouts = Timeouts::default();
        let fates = Fates::new(&timeouts);
        for bits in 0..=u8::MAX {
            let flags = EntryFlags(bits);
            let timeout = i64::from(timeouts.for_flags(flags));
            for age in [
                0,
                1,
                2,
                3,
                7,
                30,
                119,
                120,
                121,
                3_599,
                3_600,
                86_400,
                1 << 30,
            ] {
                let want = if age >= timeout {
                    Some(EXPIRED_RANK + age - timeout)
                } else if flags.is_evictable() {
                    Some(eviction_rank(flags, age))
                } else {
                    None
                };
                assert_eq!(fates.of(bits).rank(age), want, "flags {bits:#x}, age {age}");
                assert_eq!(i64::from(fates.timeout(bits)), timeout, "flags {bits:#x}");
            }
        }
    }
}
