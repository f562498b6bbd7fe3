//! The table's public value types: keys, state flags, timeouts, configuration, entries
//! and handles, and what its operations return.

// Only the doc links name it.
#[cfg(doc)]
use super::FlowTable;

/// Coarse time as supplied by the caller (its unit is the caller's; the timeouts use the same
/// unit). Compared with wrapping arithmetic, so it may wrap as long as timeouts stay below 2^31.
pub type Tick = u32;

/// Ticks from `then` to `now` on the wrapping clock, negative when `then` is
/// later: the one wrapping comparison (RFC 1982 serial arithmetic) of the
/// table and its users. Exact while the two are less than 2^31 ticks apart.
#[inline]
#[allow(
    clippy::cast_possible_wrap,
    reason = "a wrapping difference, read signed"
)]
pub const fn tick_age(now: Tick, then: Tick) -> i32 {
    now.wrapping_sub(then) as i32
}

/// Whether `now` is at or past `deadline` on the wrapping clock.
#[inline]
pub const fn tick_reached(now: Tick, deadline: Tick) -> bool {
    tick_age(now, deadline) >= 0
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
pub struct EntryFlags(pub(super) u8);

impl EntryFlags {
    pub(super) const PROTO_MASK: u8 = 0x03;
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
    /// neither linger nor crowd out established flows (M15). The caller sets it on every
    /// new entry and clears it when a packet of the flow arrives in a later tick.
    pub const UNCONFIRMED: u8 = 0x20;
    /// Opened by a TCP SYN (the normal start of a connection): among displaceable entries of
    /// the same age, those without it (a mid-stream ACK, a UDP datagram, a fragment) go first.
    pub const OPENED_BY_SYN: u8 = 0x40;
    /// Free for the caller (e.g. "learned from a peer", M36); the table ignores it.
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

    pub(super) fn max(&self) -> Tick {
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
    /// The key of the table's placement hash ([`FlowTable::hash`]); `None`: a random one
    /// from the OS, as every table facing live traffic must have.
    pub placement: Option<crate::PlacementKey>,
}

impl Config {
    /// A configuration with default timeouts and spin limit.
    #[must_use]
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            capacity,
            timeouts: Timeouts::default(),
            insert_spin_limit: 4096,
            placement: None,
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
    /// no random placement key from the operating system: {0}
    #[error("no random placement key from the operating system: {0}")]
    NoRandomKey(String),
}

/// Value of a new entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NewEntry {
    /// Backend / endpoint index chosen for the flow.
    pub backend: u32,
    /// Snapshot generation the choice was made in.
    pub generation: u32,
    /// Flow cookie (M32, gateway mode; 0 otherwise).
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
    /// Bits the caller set with [`FlowTable::mark`] since the entry was inserted (e.g. the
    /// directions of a gateway flow the balancer has sent, M53).
    pub marks: u32,
}

/// Names one occupant of one slot: the slot index plus the version of the control word, so a
/// handle to an entry that has since been removed (and the slot reused) is recognised as stale.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SlotRef {
    pub(super) index: u32,
    pub(super) version: u32,
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
    /// caller forwards by stateless Maglev selection and counts it (M15).
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
