//! The table itself: its memory layout (buckets of a header line and seven slot lines, the
//! control word of each slot) and geometry here; lookups, entry updates, inserts and the
//! sweep in submodules. Written against `super::sync` (std atomics, or shuttle's with the
//! `shuttle` feature that the concurrency tests build it with).

use super::sync::{Array, AtomicU64, AtomicUsize, Ordering, alloc_slice, allocated_bytes, padded};
use crate::memory::MemoryProvider;
use crate::placement::PlacementKey;

mod insert;
mod lookup;
mod sweep;
mod types;
mod update;

pub use lookup::Lookup;
pub use types::{
    Config, ConfigError, Entry, EntryFlags, Evicted, FlowKey, Hit, InsertOutcome, NewEntry,
    Occupancy, ProtoClass, SlotRef, SweepStats, Tick, Timeouts, tick_age, tick_reached,
};

/// Slots per bucket: seven 8-byte control words plus the bucket's meta word (insert lock and
/// tag hints) fill one 64-byte cache line.
pub const BUCKET_SLOTS: usize = 7;

/// Slots are provisioned for `capacity × 5/4`, so a table holding its nominal capacity is 80 %
/// full — where two-choice bucketed hashing still places almost every key.
const HEADROOM_NUM: usize = 5;
const HEADROOM_DEN: usize = 4;

/// Largest accepted capacity (slot indices must fit in `u32`).
pub const MAX_CAPACITY: usize = 1 << 30;

/// Bounded retries for a reader that keeps seeing a slot change under it.
const READ_RETRIES: u32 = 8;
/// Bounded rounds for an inserter whose chosen slot is claimed by someone else first.
const CLAIM_ROUNDS: u32 = 8;

// Control word layout (one per slot, in the bucket's header line):
//   bits  0..8   state (EMPTY / BUSY / LIVE)
//   bits  8..16  entry flags (`EntryFlags`)
//   bits 16..32  tag: 16 bits derived from the flow hash, to skip non-matching slots cheaply
//   bits 32..64  version: bumped on every transition to BUSY and to EMPTY
const EMPTY: u64 = 0;
const BUSY: u64 = 1;
const LIVE: u64 = 2;
const STATE_MASK: u64 = 0xff;

#[inline]
const fn state(c: u64) -> u64 {
    c & STATE_MASK
}
#[inline]
#[allow(clippy::cast_possible_truncation, reason = "a field of the word")]
const fn flags_of(c: u64) -> u8 {
    (c >> 8) as u8
}
#[inline]
#[allow(clippy::cast_possible_truncation, reason = "a field of the word")]
const fn tag_of(c: u64) -> u16 {
    (c >> 16) as u16
}

// Narrowing casts of the per-packet code, each the plain `as` under a name
// that says why nothing is lost (or why dropping bits is the point).

/// The low half of a packed data word (backend, cookie, last seen).
#[inline(always)]
#[allow(clippy::cast_possible_truncation, reason = "takes the low half")]
const fn lo32(w: u64) -> u32 {
    w as u32
}

/// A bucket or slot index: below the table's slot count, at most
/// `MAX_CAPACITY` × 5/4, far below 2^32.
#[inline(always)]
#[allow(clippy::cast_possible_truncation, reason = "indices are below 2^31")]
const fn index32(i: usize) -> u32 {
    i as u32
}

/// A slot's hint byte in [`Header::meta`]: the low 8 bits of its tag.
#[inline(always)]
#[allow(
    clippy::cast_possible_truncation,
    reason = "the hint is the tag's low byte"
)]
const fn hint_of(tag: u16) -> u8 {
    tag as u8
}

/// A per-bucket slot mask: one bit per slot, `BUCKET_SLOTS` (7) bits.
#[inline(always)]
#[allow(clippy::cast_possible_truncation, reason = "BUCKET_SLOTS < 8")]
const fn slot_mask(m: u32) -> u8 {
    m as u8
}
#[inline]
const fn version(c: u64) -> u32 {
    (c >> 32) as u32
}
#[inline]
const fn pack(version: u32, tag: u16, flags: u8, state: u64) -> u64 {
    ((version as u64) << 32) | ((tag as u64) << 16) | ((flags as u64) << 8) | state
}

/// One bucket's header: a cache line with the control words of its seven slots and a meta
/// word: the insert lock for keys whose primary bucket this is (bit 0), one occupancy bit per
/// slot (bit `1 + i` for slot `i`, see [`used_bit`]) and one byte per slot (byte `1 + i`)
/// holding the low byte of the tag its last occupant was claimed with.
///
/// The tag bytes let a lookup pick its candidate slots from one word instead of seven control
/// words. They are hints, never trusted alone: a candidate's control word is still checked
/// (LIVE, full tag) before its slot is read, so a stale byte (the slot was emptied since) or a
/// colliding one only costs that check. What must not happen is a LIVE slot whose byte is not
/// its tag's: `claim` writes the byte while it holds the slot BUSY (only the claimer of a slot
/// writes its byte) and before the release store that makes it LIVE, so any lookup ordered
/// after that store sees the byte (and one that is not may linearise before the insert).
///
/// The occupancy bits let an insert (and the screening that prefetches the slot it will
/// claim) count a bucket's free slots and find its first from one word instead of seven
/// control words. They are hints too: `claim` sets a slot's bit (with its tag byte) once it
/// holds the slot, and a removal clears it after emptying the slot. So a bit can be set over
/// an EMPTY slot only for the moment between a removal's two steps, and (when a claim of the
/// emptied slot sets its bit before the removal clears it) a bit can stay clear over an
/// occupied slot until that occupant is removed. Neither costs more than time: an insert
/// claims only a slot whose control word it read EMPTY, and one that finds no free slot its
/// hints name reads every control word (the victim scan) before it evicts or gives up.
#[repr(C, align(64))]
struct Header {
    ctrl: [AtomicU64; BUCKET_SLOTS],
    meta: AtomicU64,
}

impl Header {
    /// The slots the occupancy bits say are free (bit `i`: slot `i`), from the meta word alone.
    #[inline(always)]
    #[allow(clippy::cast_possible_truncation, reason = "seven bits")]
    fn free_hint(&self) -> u32 {
        ((!self.meta.load(Ordering::Relaxed) & USED_BITS) >> 1) as u32
    }
}

/// The insert-lock bit of [`Header::meta`].
const LOCK: u64 = 1;

/// Slot `i`'s occupancy bit in [`Header::meta`] (byte 0, above the lock bit).
#[inline(always)]
const fn used_bit(i: usize) -> u64 {
    1 << (1 + i)
}

/// All seven occupancy bits of [`Header::meta`].
const USED_BITS: u64 = 0xfe;

/// Bit offset of slot `i`'s tag byte in [`Header::meta`].
#[inline]
const fn hint_shift(i: usize) -> usize {
    8 + 8 * i
}

/// One entry: a cache line with the key and the value.
///   words 0..5  key
///   word  5     backend | generation << 32
///   word  6     cookie | created << 32
///   word  7     last_seen | marks << 32
#[repr(C, align(64))]
struct Slot {
    words: [AtomicU64; 8],
}

const W_BACKEND: usize = 5;
const W_COOKIE: usize = 6;
const W_SEEN: usize = 7;

/// A bucket: its header, then its slots, in one 512-byte block. A lookup touches the header
/// and one slot of the same block (one page, and with the header and slot 0 in one 128-byte
/// aligned pair, which the CPU's adjacent-line prefetch fetches together: at light load most
/// keys are alone in their bucket, in slot 0).
#[repr(C, align(128))]
struct Bucket {
    header: Header,
    slots: [Slot; BUCKET_SLOTS],
}

/// The bounded lock-free flow table. `Sync`: share it by reference or `Arc`.
pub struct FlowTable {
    buckets: Array<Bucket>,
    nbuckets: u64,
    capacity: usize,
    timeouts: Timeouts,
    /// The victim scan's view of `timeouts` ([`insert::Fates`]).
    fates: Box<insert::Fates>,
    spin_limit: u32,
    /// Next bucket for [`FlowTable::sweep`].
    sweep_cursor: AtomicUsize,
    /// The secret behind [`FlowTable::hash`].
    placement: PlacementKey,
}

impl std::fmt::Debug for FlowTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlowTable")
            .field("capacity", &self.capacity)
            .field("buckets", &self.nbuckets)
            .field("timeouts", &self.timeouts)
            .finish_non_exhaustive()
    }
}

/// Where a key may live and how to recognise it quickly.
#[derive(Clone, Copy)]
struct Place {
    b1: usize,
    b2: usize,
    tag: u16,
}

/// Whether an insert tries a key's second bucket before its primary, given the free slots
/// of each: the primary while it holds at most one entry, else the emptier one (ties: the
/// primary). Lookups probe the primary first and the second bucket only when the primary has
/// no candidate, so at light load almost every key is one header away from its slot (with
/// the plain emptier-bucket rule about half were two); filling buckets evenly above that
/// keeps the table's reach (`a_table_fills_to_its_nominal_capacity`: 64 of 100,000 inserts
/// found both buckets full at nominal capacity, against 79 with the plain rule).
#[inline]
fn second_first(free1: usize, free2: usize) -> bool {
    free1 + 2 <= BUCKET_SLOTS && free2 > free1
}

#[inline]
fn mul_hi(x: u64, n: u64) -> u64 {
    ((u128::from(x) * u128::from(n)) >> 64) as u64
}

impl FlowTable {
    /// Allocates a table for `config.capacity` entries. All memory is allocated here; nothing
    /// allocates afterwards.
    pub fn new(config: Config) -> Result<Self, ConfigError> {
        Self::build(config, None)
    }

    /// [`FlowTable::new`], with the array in a block from `provider` when it gives one
    /// (tables of 512 KiB or more; smaller ones, or when it gives none, on the heap):
    /// [`FlowTable::memory`] says which.
    pub fn new_in(config: Config, provider: &MemoryProvider<'_>) -> Result<Self, ConfigError> {
        Self::build(config, Some(provider))
    }

    fn build(config: Config, provider: Option<&MemoryProvider<'_>>) -> Result<Self, ConfigError> {
        let nbuckets = Self::buckets_for(config.capacity)?;
        let t = config.timeouts.max();
        if t >= 1 << 31 {
            return Err(ConfigError::TimeoutTooLarge(t));
        }
        let placement = match config.placement {
            Some(k) => k,
            None => PlacementKey::random().map_err(|e| ConfigError::NoRandomKey(e.to_string()))?,
        };
        let buckets: Array<Bucket> = alloc_slice(nbuckets, provider, || Bucket {
            header: Header {
                ctrl: std::array::from_fn(|_| AtomicU64::new(0)),
                meta: AtomicU64::new(0),
            },
            slots: std::array::from_fn(|_| Slot {
                words: std::array::from_fn(|_| AtomicU64::new(0)),
            }),
        });
        Ok(Self {
            buckets,
            nbuckets: nbuckets as u64,
            capacity: config.capacity,
            timeouts: config.timeouts,
            fates: insert::Fates::new(&config.timeouts),
            spin_limit: config.insert_spin_limit,
            sweep_cursor: AtomicUsize::new(0),
            placement,
        })
    }

    /// The hash this table places `key` by, for every operation that takes a `hash`: keyed
    /// per table ([`crate::placement`]), so nobody outside can aim keys at chosen buckets.
    /// Not the public flow hash the key's backend is chosen by.
    #[inline]
    #[must_use]
    pub fn hash(&self, key: &FlowKey) -> u64 {
        self.placement.hash(key)
    }

    fn buckets_for(capacity: usize) -> Result<usize, ConfigError> {
        if capacity == 0 {
            return Err(ConfigError::ZeroCapacity);
        }
        if capacity > MAX_CAPACITY {
            return Err(ConfigError::CapacityTooLarge(capacity));
        }
        let slots = capacity * HEADROOM_NUM / HEADROOM_DEN;
        // At least two buckets so that every key has two distinct candidates.
        Ok(slots.div_ceil(BUCKET_SLOTS).max(2))
    }

    /// Bytes a table of `capacity` entries allocates (64 B per slot plus a 64 B header per
    /// seven slots, with 25 % headroom: ≈ 91.4 B per nominal entry; from 512 KiB, padded to
    /// whole 2 MiB huge pages).
    pub fn memory_bytes_for(capacity: usize) -> Result<usize, ConfigError> {
        let b = Self::buckets_for(capacity)?;
        Ok(padded(b * std::mem::size_of::<Bucket>()))
    }

    /// Bucket `b`'s header.
    #[inline(always)]
    fn header(&self, b: usize) -> Option<&Header> {
        self.buckets.get(b).map(|k| &k.header)
    }

    /// Slot `idx` (`bucket * BUCKET_SLOTS + slot`, as in [`SlotRef`]).
    #[inline(always)]
    fn slot(&self, idx: usize) -> Option<&Slot> {
        self.slot_in(idx / BUCKET_SLOTS, idx % BUCKET_SLOTS)
    }

    /// Slot `i` of bucket `b`.
    #[inline(always)]
    fn slot_in(&self, b: usize, i: usize) -> Option<&Slot> {
        self.buckets.get(b).and_then(|k| k.slots.get(i))
    }

    /// Whether every bucket's occupancy bits name exactly its non-EMPTY slots (true whenever
    /// no change is in flight and no claim raced a removal of the same slot; tests).
    #[cfg(test)]
    #[cfg(not(feature = "shuttle"))]
    pub(crate) fn occupancy_hints_exact(&self) -> bool {
        self.buckets.iter().all(|k| {
            let h = &k.header;
            let used = h.ctrl.iter().enumerate().fold(0, |m, (i, c)| {
                m | if state(c.load(Ordering::Relaxed)) == EMPTY {
                    0
                } else {
                    used_bit(i)
                }
            });
            h.meta.load(Ordering::Relaxed) & USED_BITS == used
        })
    }

    /// Overwrites bucket `b`'s occupancy bits with `used` (bit `i`: slot `i`), as a removal
    /// caught between its two steps or a claim that raced one leaves them (tests).
    #[cfg(test)]
    #[cfg(not(feature = "shuttle"))]
    pub(crate) fn force_occupancy_hints(&self, b: usize, used: u32) {
        if let Some(h) = self.header(b) {
            let m = h.meta.load(Ordering::Relaxed);
            h.meta.store(
                (m & !USED_BITS) | ((u64::from(used) << 1) & USED_BITS),
                Ordering::Relaxed,
            );
        }
    }

    /// Nominal capacity.
    #[must_use]
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Bytes the table allocated (what [`FlowTable::memory_bytes_for`] predicts).
    #[must_use]
    pub fn allocated_bytes(&self) -> usize {
        allocated_bytes(&self.buckets)
    }

    /// Where the table's memory came from: the provider's description
    /// ([`TableMemory::describe`]) or `"heap"` (with transparent huge pages advised for
    /// tables of 512 KiB or more).
    #[must_use]
    pub fn memory(&self) -> &'static str {
        self.buckets.provided().map_or("heap", |b| b.describe())
    }

    /// Number of slots (capacity plus headroom, rounded to whole buckets).
    #[must_use]
    pub fn slot_count(&self) -> usize {
        self.buckets.len() * BUCKET_SLOTS
    }

    /// The configured timeouts.
    #[must_use]
    pub fn timeouts(&self) -> Timeouts {
        self.timeouts
    }

    #[inline]
    #[allow(clippy::cast_possible_truncation, reason = "bucket indices fit usize")]
    fn place(&self, hash: u64) -> Place {
        let n = self.nbuckets;
        let b1 = mul_hi(hash, n);
        let mut b2 = mul_hi(hash.rotate_left(32), n);
        if b2 == b1 {
            b2 = if b1 + 1 == n { 0 } else { b1 + 1 };
        }
        // Re-mixed so the tag is not correlated with either bucket index.
        let tag = (hash.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 48) as u16;
        Place {
            b1: b1 as usize,
            b2: b2 as usize,
            tag,
        }
    }
}
