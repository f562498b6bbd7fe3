//! Changes to an entry through its handle: refreshing its last-seen tick, its state flags,
//! its removal — each a single store or compare-exchange, conditional on the handle's version.

use super::{
    BUCKET_SLOTS, EMPTY, EntryFlags, FlowKey, FlowTable, Hit, LIVE, SlotRef, Tick, W_SEEN,
    flags_of, lo32, pack, state, tag_of, used_bit, version,
};
use crate::sync::Ordering;

impl FlowTable {
    /// Refreshes an entry's last-seen tick. Writes only when the tick changed, so a flow's
    /// packets within one tick leave its cache line clean (shared, not bounced between cores).
    /// Returns `false` if the handle is stale.
    ///
    /// A handle that goes stale between the version check and the store can at worst refresh
    /// the new occupant's last-seen to `now` — the tick at which that occupant was just
    /// inserted or refreshed, so its expiry moves by at most the race window.
    #[inline]
    pub fn touch(&self, slot: SlotRef, now: Tick) -> bool {
        let idx = slot.index as usize;
        let (Some(h), Some(s)) = (self.header(idx / BUCKET_SLOTS), self.slot(idx)) else {
            return false;
        };
        let c = h.ctrl[idx % BUCKET_SLOTS].load(Ordering::Relaxed);
        if state(c) != LIVE || version(c) != slot.version {
            return false;
        }
        let w = &s.words[W_SEEN];
        let old = w.load(Ordering::Relaxed);
        if lo32(old) != now {
            // The marks beside it stay. One attempt: if another worker refreshed the entry
            // (to about `now`) or marked it in between, this refresh is not needed for long —
            // the flow's next packet refreshes it.
            let new = (old & !u64::from(u32::MAX)) | u64::from(now);
            let _ = w.compare_exchange(old, new, Ordering::Relaxed, Ordering::Relaxed);
        }
        true
    }

    /// Sets `bits` in an entry's marks ([`crate::Entry::marks`]: the caller's, never cleared
    /// while the entry lives) if the handle still names it. Returns `false` if it is stale.
    ///
    /// A handle that goes stale between the version check and the write can at worst set
    /// the bits on the slot's next occupant, in the instant of the slot's reuse.
    pub fn mark(&self, slot: SlotRef, bits: u32) -> bool {
        let idx = slot.index as usize;
        let (Some(h), Some(s)) = (self.header(idx / BUCKET_SLOTS), self.slot(idx)) else {
            return false;
        };
        let c = h.ctrl[idx % BUCKET_SLOTS].load(Ordering::Acquire);
        if state(c) != LIVE || version(c) != slot.version {
            return false;
        }
        s.words[W_SEEN].fetch_or(u64::from(bits) << 32, Ordering::Relaxed);
        true
    }

    /// [`FlowTable::lookup`] then [`FlowTable::touch`]: the per-packet call for a known flow.
    #[inline]
    pub fn lookup_touch(&self, key: &FlowKey, hash: u64, now: Tick) -> Option<Hit> {
        let hit = self.lookup(key, hash)?;
        if hit.entry.last_seen != now {
            self.touch(hit.slot, now);
        }
        Some(hit)
    }

    /// Sets and clears state flags of an entry (e.g. [`EntryFlags::ESTABLISHED`] on the
    /// handshake's ACK, [`EntryFlags::FIN`] / [`EntryFlags::RST`]), atomically and only if the
    /// handle still names the same occupant. Returns the new flags, or `None` if stale.
    pub fn update_flags(&self, slot: SlotRef, set: u8, clear: u8) -> Option<EntryFlags> {
        let idx = slot.index as usize;
        let h = self.header(idx / BUCKET_SLOTS)?;
        let ctrl = &h.ctrl[idx % BUCKET_SLOTS];
        let mut c = ctrl.load(Ordering::Acquire);
        loop {
            if state(c) != LIVE || version(c) != slot.version {
                return None;
            }
            // The protocol class is fixed for the entry's life.
            let keep = EntryFlags::PROTO_MASK;
            let old = flags_of(c);
            let new = (old & keep) | ((old | set) & !clear & !keep);
            if new == old {
                return Some(EntryFlags(old));
            }
            let next = pack(version(c), tag_of(c), new, LIVE);
            match ctrl.compare_exchange(c, next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Some(EntryFlags(new)),
                // Another flag update won; recompute from what it wrote.
                Err(actual) => c = actual,
            }
        }
    }

    /// Removes an entry if the handle still names it. Returns whether it removed it.
    pub fn remove(&self, slot: SlotRef) -> bool {
        let idx = slot.index as usize;
        let Some(h) = self.header(idx / BUCKET_SLOTS) else {
            return false;
        };
        let ctrl = &h.ctrl[idx % BUCKET_SLOTS];
        let mut c = ctrl.load(Ordering::Acquire);
        loop {
            if state(c) != LIVE || version(c) != slot.version {
                return false;
            }
            let empty = pack(version(c).wrapping_add(1), 0, 0, EMPTY);
            match ctrl.compare_exchange(c, empty, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    // After the slot is EMPTY, never before (see `Header`).
                    h.meta
                        .fetch_and(!used_bit(idx % BUCKET_SLOTS), Ordering::Relaxed);
                    return true;
                }
                // A concurrent flag update of the same occupant: try again with its flags.
                Err(actual) => c = actual,
            }
        }
    }
}
