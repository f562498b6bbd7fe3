//! The table itself. Written against `super::sync` (std atomics, or shuttle's with the
//! `shuttle` feature that the concurrency tests build it with).

use super::sync::{
    Array, AtomicU64, AtomicUsize, Ordering, alloc_slice, allocated_bytes, fence, padded, spin_loop,
};
use std::ops::ControlFlow;

/// Coarse time as supplied by the caller (its unit is the caller's; the timeouts use the same
/// unit). Compared with wrapping arithmetic, so it may wrap as long as timeouts stay below 2^31.
pub type Tick = u32;

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
const fn flags_of(c: u64) -> u8 {
    (c >> 8) as u8
}
#[inline]
const fn tag_of(c: u64) -> u16 {
    (c >> 16) as u16
}
#[inline]
const fn version(c: u64) -> u32 {
    (c >> 32) as u32
}
#[inline]
const fn pack(version: u32, tag: u16, flags: u8, state: u64) -> u64 {
    ((version as u64) << 32) | ((tag as u64) << 16) | ((flags as u64) << 8) | state
}

/// A flow key as packed by the `wire` crate (addresses, ports, protocol, VIP / symmetric key).
/// The table only compares it for equality.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FlowKey(pub [u64; 5]);

/// Protocol class of an entry; selects its idle timeout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProtoClass {
    /// TCP: half-open until [`EntryFlags::ESTABLISHED`] is set.
    Tcp,
    /// UDP.
    Udp,
    /// Everything else (ESP, GRE, ICMP, …).
    Other,
}

/// State flags of an entry, stored in its control word (so they change atomically and can be
/// checked against the entry's version).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct EntryFlags(u8);

impl EntryFlags {
    const PROTO_MASK: u8 = 0x03;
    const PROTO_TCP: u8 = 0x01;
    const PROTO_UDP: u8 = 0x02;
    /// TCP: the handshake completed (the entry is protected from half-open floods).
    pub const ESTABLISHED: u8 = 0x04;
    /// TCP: a FIN was seen; the entry gets the (shorter) FIN timeout.
    pub const FIN: u8 = 0x08;
    /// TCP: a RST was seen; the entry gets the (shortest) RST timeout.
    pub const RST: u8 = 0x10;
    /// Not yet seen in a tick after the one that created it: the entry lives at most
    /// [`Timeouts::first_packet`] and may be displaced by a new flow like a half-open one, so
    /// floods of spoofed flows — one packet each, or a burst of packets within one tick —
    /// neither linger nor crowd out established flows (SPEC M15). The caller sets it on every
    /// new entry and clears it when a packet of the flow arrives in a later tick.
    pub const UNCONFIRMED: u8 = 0x20;
    /// Opened by a TCP SYN (the normal start of a connection): among displaceable entries of
    /// the same age, those without it (a mid-stream ACK, a UDP datagram, a fragment) go first.
    pub const OPENED_BY_SYN: u8 = 0x40;
    /// Free for the caller (e.g. "learned from a peer", SPEC M36); the table ignores it.
    pub const APP_MASK: u8 = 0x80;

    /// Flags of a new entry of protocol class `proto` (TCP starts half-open).
    #[must_use]
    pub const fn new(proto: ProtoClass) -> Self {
        Self(match proto {
            ProtoClass::Tcp => Self::PROTO_TCP,
            ProtoClass::Udp => Self::PROTO_UDP,
            ProtoClass::Other => 0,
        })
    }

    /// Raw bits (protocol class in bits 0–1).
    #[must_use]
    pub const fn bits(self) -> u8 {
        self.0
    }

    /// From raw bits, as returned by [`EntryFlags::bits`].
    #[must_use]
    pub const fn from_bits(bits: u8) -> Self {
        Self(bits)
    }

    /// These flags with `bits` also set.
    #[must_use]
    pub const fn with(self, bits: u8) -> Self {
        Self(self.0 | bits)
    }

    /// Whether all of `bits` are set.
    #[must_use]
    pub const fn contains(self, bits: u8) -> bool {
        self.0 & bits == bits
    }

    /// The protocol class.
    #[must_use]
    pub const fn proto(self) -> ProtoClass {
        match self.0 & Self::PROTO_MASK {
            Self::PROTO_TCP => ProtoClass::Tcp,
            Self::PROTO_UDP => ProtoClass::Udp,
            _ => ProtoClass::Other,
        }
    }

    /// TCP entry that has not completed its handshake and is not closing.
    #[must_use]
    pub const fn is_half_open(self) -> bool {
        matches!(self.proto(), ProtoClass::Tcp)
            && self.0 & (Self::ESTABLISHED | Self::FIN | Self::RST) == 0
    }

    /// Whether an insert may displace the entry before it expires: half-open TCP and
    /// [`EntryFlags::UNCONFIRMED`] entries (both proved nothing beyond one packet).
    #[must_use]
    pub const fn is_evictable(self) -> bool {
        self.is_half_open() || self.0 & Self::UNCONFIRMED != 0
    }
}

/// Idle timeouts per protocol class, in ticks. FIN and RST only ever shorten an entry's life:
/// the effective timeout is the minimum of the class timeout and the FIN/RST one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// TCP after the handshake.
    pub tcp_established: Tick,
    /// TCP before the handshake completes (SYN seen).
    pub tcp_half_open: Tick,
    /// TCP after a FIN.
    pub tcp_fin: Tick,
    /// TCP after a RST.
    pub tcp_rst: Tick,
    /// UDP.
    pub udp: Tick,
    /// Other protocols.
    pub other: Tick,
    /// An [`EntryFlags::UNCONFIRMED`] entry, whatever its class (it only ever shortens).
    pub first_packet: Tick,
}

impl Default for Timeouts {
    /// Defaults in seconds (1 tick = 1 s); see [`Timeouts::scaled`] for finer ticks.
    fn default() -> Self {
        Self {
            tcp_established: 350,
            tcp_half_open: 10,
            tcp_fin: 10,
            tcp_rst: 2,
            udp: 120,
            other: 60,
            first_packet: 10,
        }
    }
}

impl Timeouts {
    /// Every timeout multiplied by `ticks_per_unit` (saturating), e.g. defaults in seconds to
    /// 100 ms ticks with `scaled(10)`.
    #[must_use]
    pub fn scaled(self, ticks_per_unit: u32) -> Self {
        let s = |t: Tick| t.saturating_mul(ticks_per_unit);
        Self {
            tcp_established: s(self.tcp_established),
            tcp_half_open: s(self.tcp_half_open),
            tcp_fin: s(self.tcp_fin),
            tcp_rst: s(self.tcp_rst),
            udp: s(self.udp),
            other: s(self.other),
            first_packet: s(self.first_packet),
        }
    }

    /// The idle timeout of an entry with these flags. An unconfirmed entry not opened by a
    /// SYN lives at most [`Timeouts::first_packet`]; one opened by a SYN keeps its class's
    /// timeouts (half-open, then established), so a real connection that went quiet after its
    /// first second keeps its entry — it is only displaceable until confirmed.
    #[must_use]
    pub fn for_flags(&self, flags: EntryFlags) -> Tick {
        let class = self.for_class(flags);
        if flags.contains(EntryFlags::UNCONFIRMED) && !flags.contains(EntryFlags::OPENED_BY_SYN) {
            class.min(self.first_packet)
        } else {
            class
        }
    }

    fn for_class(&self, flags: EntryFlags) -> Tick {
        match flags.proto() {
            ProtoClass::Udp => self.udp,
            ProtoClass::Other => self.other,
            ProtoClass::Tcp => {
                let mut t = if flags.contains(EntryFlags::ESTABLISHED) {
                    self.tcp_established
                } else {
                    self.tcp_half_open
                };
                if flags.contains(EntryFlags::FIN) {
                    t = t.min(self.tcp_fin);
                }
                if flags.contains(EntryFlags::RST) {
                    t = t.min(self.tcp_rst);
                }
                t
            }
        }
    }

    fn max(&self) -> Tick {
        [
            self.tcp_established,
            self.tcp_half_open,
            self.tcp_fin,
            self.tcp_rst,
            self.udp,
            self.other,
            self.first_packet,
        ]
        .into_iter()
        .max()
        .unwrap_or(0)
    }
}

/// Table configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// Nominal number of entries (slots are provisioned 25 % above it).
    pub capacity: usize,
    /// Idle timeouts.
    pub timeouts: Timeouts,
    /// How many times an insert retries a busy bucket insert-lock before giving up with
    /// [`InsertOutcome::Contended`]. The lock is held for a few dozen instructions, so this only
    /// matters if the holder was descheduled.
    pub insert_spin_limit: u32,
}

impl Config {
    /// A configuration with default timeouts and spin limit.
    #[must_use]
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            capacity,
            timeouts: Timeouts::default(),
            insert_spin_limit: 4096,
        }
    }
}

/// Invalid table configuration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// flow table capacity must be at least 1
    #[error("flow table capacity must be at least 1")]
    ZeroCapacity,
    /// flow table capacity {0} exceeds the maximum of 1073741824 entries
    #[error("flow table capacity {0} exceeds the maximum of 1073741824 entries")]
    CapacityTooLarge(usize),
    /// flow table timeouts must be below 2^31 ticks (got {0})
    #[error("flow table timeouts must be below 2^31 ticks (got {0})")]
    TimeoutTooLarge(Tick),
}

/// Value of a new entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NewEntry {
    /// Backend / endpoint index chosen for the flow.
    pub backend: u32,
    /// Snapshot generation the choice was made in.
    pub generation: u32,
    /// Flow cookie (SPEC M32, gateway mode; 0 otherwise).
    pub cookie: u32,
    /// Protocol class and state flags.
    pub flags: EntryFlags,
}

/// A consistent snapshot of an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Backend / endpoint index.
    pub backend: u32,
    /// Snapshot generation of the choice.
    pub generation: u32,
    /// Flow cookie.
    pub cookie: u32,
    /// Protocol class and state flags.
    pub flags: EntryFlags,
    /// Tick at insertion.
    pub created: Tick,
    /// Tick of the last refresh (see [`FlowTable::touch`]).
    pub last_seen: Tick,
}

/// Names one occupant of one slot: the slot index plus the version of the control word, so a
/// handle to an entry that has since been removed (and the slot reused) is recognised as stale.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SlotRef {
    index: u32,
    version: u32,
}

impl SlotRef {
    /// The slot index (diagnostics).
    #[must_use]
    pub const fn index(self) -> u32 {
        self.index
    }
}

/// A successful lookup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hit {
    /// Handle for [`FlowTable::touch`], [`FlowTable::update_flags`], [`FlowTable::remove`].
    pub slot: SlotRef,
    /// The entry as read (consistent: never mixes two occupants of the slot).
    pub entry: Entry,
}

/// What an insert displaced to make room.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Evicted {
    /// Nothing: a free slot was used.
    Nothing,
    /// An entry already past its idle timeout (the sweeper had not reached it yet).
    Expired,
    /// The least recently seen half-open TCP or unconfirmed entry of the two candidate
    /// buckets.
    HalfOpen,
}

/// Result of [`FlowTable::insert`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub enum InsertOutcome {
    /// The entry was inserted.
    Inserted {
        /// Handle of the new entry.
        slot: SlotRef,
        /// What made room for it.
        evicted: Evicted,
    },
    /// The key was already present (typically another worker won a race for the flow's first
    /// packet): the caller must use this entry's backend and cookie, not its own choice.
    Existing(Hit),
    /// No room: both candidate buckets hold only live entries that may not be evicted. The
    /// caller forwards by stateless Maglev selection and counts it (SPEC M15).
    Full,
    /// The bucket's insert lock stayed taken for `insert_spin_limit` spins, or the candidate
    /// slots kept changing under the inserter. Treat like [`InsertOutcome::Full`] for this
    /// packet; the next packet of the flow will normally find or insert the entry.
    Contended,
}

/// Result of one [`FlowTable::sweep`] step.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SweepStats {
    /// Buckets examined.
    pub buckets: usize,
    /// Live entries left in them.
    pub live: usize,
    /// … of which half-open TCP.
    pub half_open: usize,
    /// Entries removed because they were idle past their timeout.
    pub expired: usize,
    /// This step reached the end of the table (a full pass ended; the next step starts at
    /// bucket 0). A step never crosses the end, so summing steps up to `wrapped` gives a pass.
    pub wrapped: bool,
}

/// Live entries counted by a full scan.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Occupancy {
    /// Live entries.
    pub live: usize,
    /// … of which half-open TCP.
    pub half_open: usize,
}

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

/// One bucket's header: a cache line with the control words of its seven slots and a meta
/// word: the insert lock for keys whose primary bucket this is (bit 0) and one byte per slot
/// (byte `1 + i` for slot `i`) holding the low byte of the tag its last occupant was claimed
/// with.
///
/// The tag bytes let a lookup pick its candidate slots from one word instead of seven control
/// words. They are hints, never trusted alone: a candidate's control word is still checked
/// (LIVE, full tag) before its slot is read, so a stale byte (the slot was emptied since) or a
/// colliding one only costs that check. What must not happen is a LIVE slot whose byte is not
/// its tag's: `claim` writes the byte while it holds the slot BUSY (only the claimer of a slot
/// writes its byte) and before the release store that makes it LIVE, so any lookup ordered
/// after that store sees the byte (and one that is not may linearise before the insert).
#[repr(C, align(64))]
struct Header {
    ctrl: [AtomicU64; BUCKET_SLOTS],
    meta: AtomicU64,
}

/// The insert-lock bit of [`Header::meta`].
const LOCK: u64 = 1;

/// Bit offset of slot `i`'s tag byte in [`Header::meta`].
#[inline]
const fn hint_shift(i: usize) -> usize {
    8 + 8 * i
}

/// One entry: a cache line with the key and the value.
///   words 0..5  key
///   word  5     backend | generation << 32
///   word  6     cookie | created << 32
///   word  7     last_seen
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
    spin_limit: u32,
    /// Next bucket for [`FlowTable::sweep`].
    sweep_cursor: AtomicUsize,
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
        let nbuckets = Self::buckets_for(config.capacity)?;
        let t = config.timeouts.max();
        if t >= 1 << 31 {
            return Err(ConfigError::TimeoutTooLarge(t));
        }
        let buckets: Array<Bucket> = alloc_slice(nbuckets, || Bucket {
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
            spin_limit: config.insert_spin_limit,
            sweep_cursor: AtomicUsize::new(0),
        })
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
    fn read_validated(
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
                index: (b * BUCKET_SLOTS + i) as u32,
                version: version(c1),
            },
            entry: Entry {
                backend: w5 as u32,
                generation: (w5 >> 32) as u32,
                cookie: w6 as u32,
                created: (w6 >> 32) as u32,
                flags: EntryFlags(flags_of(c1)),
                last_seen: w7 as u32,
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
    fn match_mask(&self, b: usize, tag: u16) -> u32 {
        const ONES: u64 = 0x0101_0101_0101_0101;
        const HIGHS: u64 = 0x8080_8080_8080_8080;
        // Moves bit 8i to bit 56 + i for i in 0..7; no two products land on one bit (8i - 7j
        // differs for every pair), so nothing carries into the result.
        const GATHER: u64 =
            (1 << 56) | (1 << 49) | (1 << 42) | (1 << 35) | (1 << 28) | (1 << 21) | (1 << 14);
        let Some(h) = self.header(b) else {
            return 0;
        };
        let x = h.meta.load(Ordering::Relaxed) ^ (u64::from(tag as u8) * ONES);
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
    fn probe(&self, b: usize, mut mask: u32, tag: u16, key: &FlowKey) -> Found {
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

    /// Prefetches the slot line an insert of a key placed at `p` would most likely claim.
    #[inline]
    fn prefetch_free_slot(&self, p: &Place) {
        let free = |b: usize| -> u32 {
            self.header(b).map_or(0, |h| {
                h.ctrl.iter().enumerate().fold(0, |m, (i, c)| {
                    m | (u32::from(state(c.load(Ordering::Relaxed)) == EMPTY) << i)
                })
            })
        };
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
            b1: p.b1 as u32,
            b2: p.b2 as u32,
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
            l.m1 = m as u8;
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
            l.m2 = m as u8;
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
        if w.load(Ordering::Relaxed) as u32 != now {
            w.store(u64::from(now), Ordering::Relaxed);
        }
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
                Ok(_) => return true,
                // A concurrent flag update of the same occupant: try again with its flags.
                Err(actual) => c = actual,
            }
        }
    }

    /// Inserts `key` unless present. See [`InsertOutcome`] for the results.
    ///
    /// If both candidate buckets are full, makes room by evicting, in this order, an entry
    /// already past its idle timeout, then the least recently seen half-open TCP or
    /// [`EntryFlags::UNCONFIRMED`] entry. Confirmed established TCP, UDP and other entries are
    /// never evicted before they expire, so a flood of half-open or one-packet flows only ever
    /// competes with its own kind (SPEC M15).
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
        for _ in 0..CLAIM_ROUNDS {
            // Two-choice placement, see `second_first`.
            let free = |h: &Header| {
                h.ctrl
                    .iter()
                    .filter(|c| state(c.load(Ordering::Relaxed)) == EMPTY)
                    .count()
            };
            let order = if second_first(free(h1), free(h2)) {
                [(p.b2, h2), (p.b1, h1)]
            } else {
                [(p.b1, h1), (p.b2, h2)]
            };
            for (b, h) in order {
                for (i, ctrl) in h.ctrl.iter().enumerate() {
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
            // No free slot: look for a victim among the 14 live entries.
            let mut victim: Option<(usize, &AtomicU64, u64, Evicted, i64)> = None;
            let mut saw_empty = false;
            for (b, h) in order {
                for (i, ctrl) in h.ctrl.iter().enumerate() {
                    let c = ctrl.load(Ordering::Acquire);
                    if state(c) != LIVE {
                        // Freed since the first scan (removal, sweep): claim it next round.
                        saw_empty |= state(c) == EMPTY;
                        continue;
                    }
                    let idx = b * BUCKET_SLOTS + i;
                    let Some(s) = self.slot(idx) else {
                        continue;
                    };
                    let seen = s.words[W_SEEN].load(Ordering::Relaxed) as u32;
                    let age = i64::from(now.wrapping_sub(seen) as i32);
                    let flags = EntryFlags(flags_of(c));
                    let timeout = i64::from(self.timeouts.for_flags(flags));
                    // Rank: expired entries first (most overdue first), then the
                    // displaceable ones by what they proved, each kind oldest first.
                    let (kind, score) = if age >= timeout {
                        (Evicted::Expired, (4 << 40) + age - timeout)
                    } else if flags.is_evictable() {
                        (Evicted::HalfOpen, eviction_rank(flags, age))
                    } else {
                        continue;
                    };
                    if victim.is_none_or(|v| score > v.4) {
                        victim = Some((idx, ctrl, c, kind, score));
                    }
                }
            }
            let Some((idx, ctrl, c, kind, _)) = victim else {
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
        // The slot's tag byte, while it is BUSY and before it turns LIVE (see `Header`). Only
        // the holder of a slot's claim writes its byte; other bytes and the lock bit may
        // change concurrently, hence the compare-exchange loop (it never waits for anyone).
        let shift = hint_shift(idx % BUCKET_SLOTS);
        let byte = u64::from(p.tag as u8) << shift;
        let _ = header
            .meta
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |m| {
                (m & (0xff << shift) != byte).then_some(m & !(0xff << shift) | byte)
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
            index: idx as u32,
            version: v,
        })
    }

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
                let seen = s.words[W_SEEN].load(Ordering::Relaxed) as u32;
                let flags = EntryFlags(flags_of(c));
                let age = now.wrapping_sub(seen) as i32;
                if i64::from(age) >= i64::from(self.timeouts.for_flags(flags)) {
                    let empty = pack(version(c).wrapping_add(1), 0, 0, EMPTY);
                    if ctrl
                        .compare_exchange(c, empty, Ordering::AcqRel, Ordering::Relaxed)
                        .is_ok()
                    {
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
                        backend: w[W_BACKEND] as u32,
                        generation: (w[W_BACKEND] >> 32) as u32,
                        cookie: w[W_COOKIE] as u32,
                        created: (w[W_COOKIE] >> 32) as u32,
                        flags: EntryFlags(flags_of(c1)),
                        last_seen: w[W_SEEN] as u32,
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

enum Found {
    Hit(Hit),
    Absent,
    /// A candidate slot changed on every one of the bounded re-reads.
    GaveUp,
}

enum Read {
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
