//! The management core's side: ageing entries out in bounded steps, and full scans for
//! occupancy, dumps and diagnostics. None of it blocks the workers.

use std::ops::ControlFlow;

use super::lookup::Read;
use super::{
    EMPTY, Entry, EntryFlags, FlowKey, FlowTable, LIVE, Occupancy, READ_RETRIES, SweepStats, Tick,
    W_BACKEND, W_COOKIE, W_SEEN, flags_of, lo32, pack, state, tick_age, used_bit, version,
};
use crate::sync::{Ordering, fence};

impl FlowTable {
    /// Removes entries idle past their timeout in the next `max_buckets` buckets (7 slots each),
    /// continuing where the previous call stopped. Called periodically by the management core;
    /// never blocks workers (removal is one compare-exchange per expired entry).
    ///
    /// An entry refreshed by a worker between the sweeper's read of its last-seen tick and the
    /// removal is removed anyway; that flow's next packet inserts it again (with the same
    /// Maglev choice unless the backend set changed).
    pub fn sweep(&self, now: Tick, max_buckets: usize) -> SweepStats {
        let n = self.buckets.len();
        let mut stats = SweepStats::default();
        let mut b = self.sweep_cursor.load(Ordering::Relaxed) % n.max(1);
        for _ in 0..max_buckets.min(n) {
            let Some(h) = self.header(b) else {
                break;
            };
            for (i, ctrl) in h.ctrl.iter().enumerate() {
                let c = ctrl.load(Ordering::Acquire);
                if state(c) != LIVE {
                    continue;
                }
                let Some(s) = self.slot_in(b, i) else {
                    continue;
                };
                let seen = lo32(s.words[W_SEEN].load(Ordering::Relaxed));
                let flags = EntryFlags(flags_of(c));
                let age = tick_age(now, seen);
                if i64::from(age) >= i64::from(self.fates.timeout(flags.bits())) {
                    let empty = pack(version(c).wrapping_add(1), 0, 0, EMPTY);
                    if ctrl
                        .compare_exchange(c, empty, Ordering::AcqRel, Ordering::Relaxed)
                        .is_ok()
                    {
                        // After the slot is EMPTY, never before (see `Header`).
                        h.meta.fetch_and(!used_bit(i), Ordering::Relaxed);
                        stats.expired += 1;
                        continue;
                    }
                }
                stats.live += 1;
                if flags.is_half_open() {
                    stats.half_open += 1;
                }
            }
            stats.buckets += 1;
            b += 1;
            if b == n {
                // End of a pass: stop here so per-pass totals (occupancy metrics) add up.
                b = 0;
                stats.wrapped = true;
                break;
            }
        }
        self.sweep_cursor.store(b, Ordering::Relaxed);
        stats
    }

    /// Counts live entries with a full scan (management core; O(slots)).
    #[must_use]
    pub fn occupancy(&self) -> Occupancy {
        let mut o = Occupancy::default();
        for h in self.buckets.iter().map(|k| &k.header) {
            for c in &h.ctrl {
                let c = c.load(Ordering::Relaxed);
                if state(c) == LIVE {
                    o.live += 1;
                    if EntryFlags(flags_of(c)).is_half_open() {
                        o.half_open += 1;
                    }
                }
            }
        }
        o
    }

    /// Calls `f` with every live entry, reading each slot consistently (a slot that keeps
    /// changing under the reader is skipped after a bounded number of re-reads). Management
    /// core only: O(slots), never writes. Stops early when `f` returns `Break`. Returns the
    /// number of entries visited.
    pub fn scan(&self, mut f: impl FnMut(&FlowKey, &Entry) -> ControlFlow<()>) -> usize {
        let mut visited = 0;
        for (b, h) in self.buckets.iter().map(|k| &k.header).enumerate() {
            for (i, ctrl) in h.ctrl.iter().enumerate() {
                let Some(slot) = self.slot_in(b, i) else {
                    continue;
                };
                for _ in 0..READ_RETRIES {
                    let c1 = ctrl.load(Ordering::Acquire);
                    if state(c1) != LIVE {
                        break;
                    }
                    let w: [u64; 8] =
                        std::array::from_fn(|k| slot.words[k].load(Ordering::Relaxed));
                    // Seqlock validation as in `read_validated`.
                    fence(Ordering::Acquire);
                    if ctrl.load(Ordering::Relaxed) != c1 {
                        continue;
                    }
                    let key = FlowKey([w[0], w[1], w[2], w[3], w[4]]);
                    let entry = Entry {
                        backend: lo32(w[W_BACKEND]),
                        generation: (w[W_BACKEND] >> 32) as u32,
                        cookie: lo32(w[W_COOKIE]),
                        created: (w[W_COOKIE] >> 32) as u32,
                        flags: EntryFlags(flags_of(c1)),
                        last_seen: lo32(w[W_SEEN]),
                        marks: (w[W_SEEN] >> 32) as u32,
                    };
                    visited += 1;
                    if f(&key, &entry).is_break() {
                        return visited;
                    }
                    break;
                }
            }
        }
        visited
    }

    /// How many live slots hold `key` (diagnostics and tests: the table's invariant is that this
    /// is never more than 1).
    #[must_use]
    pub fn count_key(&self, key: &FlowKey, hash: u64) -> usize {
        let p = self.place(hash);
        let mut n = 0;
        for b in [p.b1, p.b2] {
            let Some(h) = self.header(b) else {
                continue;
            };
            for (i, ctrl) in h.ctrl.iter().enumerate() {
                let c = ctrl.load(Ordering::Acquire);
                if state(c) == LIVE
                    && matches!(self.read_validated(ctrl, (b, i), c, key), Read::Hit(_))
                {
                    n += 1;
                }
            }
        }
        n
    }
}
