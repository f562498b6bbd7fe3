//! Lookups: one at a time, or in stages over a burst so that its cache misses overlap, each
//! slot read under its seqlock so that a lookup never waits for a writer.

use super::Header;
use super::{
    BUCKET_SLOTS, Entry, EntryFlags, FlowKey, FlowTable, Hit, LIVE, Place, READ_RETRIES, SlotRef,
    W_BACKEND, W_COOKIE, W_SEEN, flags_of, hint_of, index32, lo32, second_first, slot_mask, state,
    tag_of, version,
};
use crate::sync::{AtomicU64, Ordering, fence};

/// A flow-table lookup in stages (see [`FlowTable::begin`], [`FlowTable::screen`],
/// [`FlowTable::complete`]): the key's two buckets, its tag, and the candidate slots found in
/// each bucket's tag bytes. Small and `Copy`, to sit in a caller's per-burst scratch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lookup {
    b1: u32,
    b2: u32,
    tag: u16,
    m1: u8,
    m2: u8,
}

impl Lookup {
    /// A placeholder for scratch arrays; [`FlowTable::begin`] makes real ones.
    pub const NONE: Lookup = Lookup {
        b1: 0,
        b2: 0,
        tag: 0,
        m1: 0,
        m2: 0,
    };
}

impl FlowTable {
    /// Hints the CPU to fetch both candidate bucket headers of `hash` (e.g. before an insert
    /// that follows other work). [`FlowTable::lookup_burst`] does this and more by itself.
    #[inline]
    pub fn prefetch(&self, hash: u64) {
        let p = self.place(hash);
        for b in [p.b1, p.b2] {
            if let Some(h) = self.header(b) {
                prefetch_line(h);
            }
        }
    }

    /// Reads slot `i` of bucket `b`, whose control word was `c1`, returning its key and value words only if
    /// the control word is unchanged afterwards (seqlock validation). `None`: changed, retry.
    #[inline(always)]
    pub(super) fn read_validated(
        &self,
        ctrl: &AtomicU64,
        (b, i): (usize, usize),
        c1: u64,
        key: &FlowKey,
    ) -> Read {
        let Some(slot) = self.slot_in(b, i) else {
            return Read::Mismatch;
        };
        let w = &slot.words;
        let mut same = true;
        for (i, k) in key.0.iter().enumerate() {
            same &= w[i].load(Ordering::Relaxed) == *k;
        }
        let (w5, w6, w7) = if same {
            (
                w[W_BACKEND].load(Ordering::Relaxed),
                w[W_COOKIE].load(Ordering::Relaxed),
                w[W_SEEN].load(Ordering::Relaxed),
            )
        } else {
            (0, 0, 0)
        };
        // Seqlock read side: the acquire fence orders the data loads above before the re-read
        // of the control word; if any of them saw a later writer's store, that writer's release
        // fence (after its claim) makes the re-read see the claim, so `c2 != c1`.
        fence(Ordering::Acquire);
        let c2 = ctrl.load(Ordering::Relaxed);
        if c2 != c1 {
            return Read::Changed;
        }
        if !same {
            return Read::Mismatch;
        }
        Read::Hit(Hit {
            slot: SlotRef {
                index: index32(b * BUCKET_SLOTS + i),
                version: version(c1),
            },
            entry: Entry {
                backend: lo32(w5),
                generation: (w5 >> 32) as u32,
                cookie: lo32(w6),
                created: (w6 >> 32) as u32,
                flags: EntryFlags(flags_of(c1)),
                last_seen: lo32(w7),
                marks: (w7 >> 32) as u32,
            },
        })
    }

    /// Bit `i` set if slot `i` of bucket `b` may be LIVE with tag `tag`: every such slot, and
    /// now and then another (see [`Header`]), which the probe's check of its control word
    /// drops. From the header's meta word alone: a SWAR compare of its seven tag bytes with the
    /// tag's low byte, where the seven control words cost seven loads and compares. Relaxed
    /// load: it only selects candidates, each is re-read with acquire ordering before its slot
    /// is read.
    #[inline]
    pub(super) fn match_mask(&self, b: usize, tag: u16) -> u32 {
        const ONES: u64 = 0x0101_0101_0101_0101;
        const HIGHS: u64 = 0x8080_8080_8080_8080;
        // Moves bit 8i to bit 56 + i for i in 0..7; no two products land on one bit (8i - 7j
        // differs for every pair), so nothing carries into the result.
        const GATHER: u64 =
            (1 << 56) | (1 << 49) | (1 << 42) | (1 << 35) | (1 << 28) | (1 << 21) | (1 << 14);
        let Some(h) = self.header(b) else {
            return 0;
        };
        let x = h.meta.load(Ordering::Relaxed) ^ (u64::from(hint_of(tag)) * ONES);
        // The high bit of every zero byte of `x` (a byte equal to the tag's), and possibly of a
        // byte just above one (a borrow): a superset, as wanted.
        let zero = x.wrapping_sub(ONES) & !x & HIGHS;
        // Tag bytes are bytes 1..=7 (byte 0 is the lock): their high bits are bits 15, 23, ….
        let lanes = (zero >> 15) & 0x0001_0101_0101_0101;
        (lanes.wrapping_mul(GATHER) >> 56) as u32
    }

    #[inline]
    fn find_masked(&self, b: usize, mask: u32, tag: u16, key: &FlowKey) -> Option<Hit> {
        match self.probe(b, mask, tag, key) {
            Found::Hit(hit) => Some(hit),
            Found::Absent | Found::GaveUp => None,
        }
    }

    /// Probes the candidate slots `mask` of bucket `b` for `key`. Always inlined: returned
    /// through memory, its result's narrow stores stall the caller's wider loads (store
    /// forwarding fails), which cost a burst lookup a third of its time.
    #[inline(always)]
    pub(super) fn probe(&self, b: usize, mut mask: u32, tag: u16, key: &FlowKey) -> Found {
        let Some(h) = self.header(b) else {
            return Found::Absent;
        };
        let mut gave_up = false;
        while mask != 0 {
            let i = mask.trailing_zeros() as usize;
            mask &= mask - 1;
            let Some(ctrl) = h.ctrl.get(i) else {
                break;
            };
            let mut tries = 0;
            loop {
                let c1 = ctrl.load(Ordering::Acquire);
                // EMPTY and BUSY slots are not (yet) visible: a lookup racing an insert of
                // the same key linearises before it.
                if state(c1) != LIVE || tag_of(c1) != tag {
                    break;
                }
                match self.read_validated(ctrl, (b, i), c1, key) {
                    Read::Hit(hit) => return Found::Hit(hit),
                    Read::Mismatch => break,
                    Read::Changed => {
                        // Someone completed a change of this slot: lock-free progress. Retry a
                        // bounded number of times; past that the slot is churning and a lookup
                        // treats the key as absent (an insert must not: it gives up instead).
                        tries += 1;
                        if tries >= READ_RETRIES {
                            gave_up = true;
                            break;
                        }
                    }
                }
            }
        }
        if gave_up {
            Found::GaveUp
        } else {
            Found::Absent
        }
    }

    #[inline]
    fn prefetch_slots(&self, b: usize, mut mask: u32) {
        while mask != 0 {
            let i = mask.trailing_zeros() as usize;
            mask &= mask - 1;
            if let Some(s) = self.slot_in(b, i) {
                prefetch_line(s);
            }
        }
    }

    /// Prefetches the slot line an insert of a key placed at `p` would most likely claim (by
    /// the occupancy hints, as the insert chooses).
    #[inline]
    fn prefetch_free_slot(&self, p: &Place) {
        let free = |b: usize| -> u32 { self.header(b).map_or(0, Header::free_hint) };
        let (f1, f2) = (free(p.b1), free(p.b2));
        // Same preference as `insert_locked`.
        let (b, f) = if second_first(f1.count_ones() as usize, f2.count_ones() as usize) {
            (p.b2, f2)
        } else {
            (p.b1, f1)
        };
        if f != 0
            && let Some(s) = self.slot_in(b, f.trailing_zeros() as usize)
        {
            prefetch_line(s);
        }
    }

    #[inline]
    fn find_in(&self, b: usize, tag: u16, key: &FlowKey) -> Option<Hit> {
        self.find_masked(b, self.match_mask(b, tag), tag, key)
    }

    /// Looks `key` up. `hash` is the caller's 64-bit hash of the key (well mixed, computed once
    /// per packet; the same key must always come with the same hash). Never blocks, never
    /// writes shared memory.
    #[inline]
    pub fn lookup(&self, key: &FlowKey, hash: u64) -> Option<Hit> {
        let p = self.place(hash);
        // Keys of fuller buckets sit in their second bucket (see `second_first`), and every
        // miss probes it: start fetching its header while the first one is probed.
        if let Some(h2) = self.header(p.b2) {
            prefetch_line(h2);
        }
        self.find_in(p.b1, p.tag, key)
            .or_else(|| self.find_in(p.b2, p.tag, key))
    }

    /// Looks up a burst of keys, `out[i]` for `keys[i]` / `hashes[i]` (up to the shortest of
    /// the three slices). Same results as [`FlowTable::lookup`] one by one, but in the three
    /// stages of a [`Lookup`] ([`FlowTable::begin`], [`FlowTable::screen`],
    /// [`FlowTable::complete`]) over groups of 32, so that the burst's cache misses overlap
    /// instead of queueing. The pipeline runs the same stages spread over its own passes.
    pub fn lookup_burst(&self, keys: &[FlowKey], hashes: &[u64], out: &mut [Option<Hit>]) {
        const GROUP: usize = 32;
        let n = keys.len().min(hashes.len()).min(out.len());
        let mut start = 0;
        while start < n {
            let end = (start + GROUP).min(n);
            let mut staged = [Lookup::NONE; GROUP];
            let staged = &mut staged[..end - start];
            for (l, &h) in staged.iter_mut().zip(&hashes[start..end]) {
                *l = self.begin(h);
            }
            self.screen(staged);
            for ((o, k), l) in out[start..end]
                .iter_mut()
                .zip(&keys[start..end])
                .zip(staged.iter())
            {
                *o = self.complete(l, k);
            }
            start = end;
        }
    }

    /// First stage of a staged lookup of the key with `hash`: where it may live, with its
    /// primary bucket's header prefetched. Do other work (other keys' `begin`s) before
    /// [`FlowTable::screen`].
    #[inline]
    #[must_use]
    pub fn begin(&self, hash: u64) -> Lookup {
        let p = self.place(hash);
        if let Some(h1) = self.header(p.b1) {
            prefetch_line(h1);
        }
        Lookup {
            b1: index32(p.b1),
            b2: index32(p.b2),
            tag: p.tag,
            m1: 0,
            m2: 0,
        }
    }

    /// Second stage, over a burst of [`FlowTable::begin`] results: reads each primary
    /// header's tag bytes and prefetches the candidate slot lines there; keys with no
    /// candidate there (misses, and keys placed in their second bucket: few at light load,
    /// see `second_first`) have their second header read and its candidates prefetched. A key
    /// with no candidate in either bucket is a certain miss: the caller will most likely
    /// insert it next, into the first free slot of a candidate bucket, so that slot's line is
    /// fetched now and the insert's write will not stall on it. Do other work before
    /// [`FlowTable::complete`].
    pub fn screen(&self, lookups: &mut [Lookup]) {
        let mut seconds = false;
        for l in lookups.iter_mut() {
            let (b1, b2) = (l.b1 as usize, l.b2 as usize);
            let m = self.match_mask(b1, l.tag);
            l.m1 = slot_mask(m);
            if m == 0 {
                seconds = true;
                if let Some(h2) = self.header(b2) {
                    prefetch_line(h2);
                }
            } else {
                self.prefetch_slots(b1, m);
            }
        }
        if !seconds {
            return;
        }
        // Second buckets, after the other keys' work has given their headers time to arrive.
        for l in lookups.iter_mut().filter(|l| l.m1 == 0) {
            let b2 = l.b2 as usize;
            let m = self.match_mask(b2, l.tag);
            l.m2 = slot_mask(m);
            if m == 0 {
                self.prefetch_free_slot(&Place {
                    b1: l.b1 as usize,
                    b2,
                    tag: l.tag,
                });
            } else {
                self.prefetch_slots(b2, m);
            }
        }
    }

    /// Last stage: the entry of `key` (whose hash began `l`), comparing keys in the candidate
    /// slots [`FlowTable::screen`] found. A key whose primary candidates all mismatch (a tag
    /// collision) is probed in its second bucket the ordinary way. The same result as
    /// [`FlowTable::lookup`] as of the screening: an entry inserted into one of the key's
    /// buckets after it may be missed (as if this lookup had happened first), so a caller that
    /// itself changed entries of this hash since the screening looks up afresh. Always
    /// inlined, for the reason given at `probe`.
    #[inline(always)]
    #[must_use]
    pub fn complete(&self, l: &Lookup, key: &FlowKey) -> Option<Hit> {
        let (b1, b2) = (l.b1 as usize, l.b2 as usize);
        if l.m1 != 0 {
            self.find_masked(b1, u32::from(l.m1), l.tag, key)
                .or_else(|| self.find_in(b2, l.tag, key))
        } else {
            self.find_masked(b2, u32::from(l.m2), l.tag, key)
        }
    }
}

pub(super) enum Found {
    Hit(Hit),
    Absent,
    /// A candidate slot changed on every one of the bounded re-reads.
    GaveUp,
}

pub(super) enum Read {
    Hit(Hit),
    Mismatch,
    Changed,
}

#[inline]
#[allow(unsafe_code)]
fn prefetch_line<T>(p: &T) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        // SAFETY: `_mm_prefetch` needs the `sse` target feature, which every x86_64 target has
        // (it is part of the baseline ABI). The pointer comes from a live reference, and a
        // prefetch is only a hint: it never faults and has no effect a program can observe
        // other than timing.
        unsafe { _mm_prefetch::<_MM_HINT_T0>((p as *const T).cast::<i8>()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}
