//! Maglev consistent-hashing lookup tables (M12, M34).
//!
//! # Why it looks like this
//!
//! A table maps a flow hash to an endpoint with one array index, so the data plane never walks a
//! ring or a tree. The management core builds a new immutable [`MaglevTable`] whenever the set of
//! eligible endpoints or their weights change, and publishes it in the snapshot; workers only call
//! [`MaglevTable::lookup`].
//!
//! Every balancer node of a cluster must build the *same* table from the same configuration and
//! health (M34, ECMP scale-out), so the construction depends only on the **set** of
//! `(endpoint id, weight)` pairs and on the table size, never on the order the caller gives, on a
//! per-process random seed, or on the platform. The algorithm is versioned ([`Algorithm::V1`],
//! config name `"maglev-v1"`; [`Algorithm::V2`], `"maglev-v2"`): a change of the fill or of the
//! hashes gets a new variant, so it can be rolled out per service while nodes running the old one
//! keep agreeing.
//!
//! # Algorithm `maglev-v1` (normative; changing anything below needs a new [`Algorithm`])
//!
//! 1. Endpoints with weight 0 are dropped. The others are sorted by [`EndpointId`] (ascending);
//!    duplicate ids are an error.
//! 2. For each endpoint with id `x` (a `u64`):
//!    `offset = mix64(x ^ 0x6d61676c65762d31) mod M` and
//!    `skip = mix64(x ^ 0x736b69702d763100) mod (M - 1) + 1`,
//!    where `mix64` is the SplitMix64 finaliser ([`mix64`]). Because `M` is prime and
//!    `1 <= skip < M`, `offset, offset + skip, offset + 2·skip, … (mod M)` visits every slot once —
//!    the endpoint's *preference list* of the Maglev paper.
//! 3. Weighted turns (Katran's "weighted Maglev"): let `W = max weight`. Rounds are repeated; in
//!    each round every endpoint, in id order, adds its weight to its credit (starting at 0); if the
//!    credit reaches `W` it subtracts `W` and takes one turn: it claims the next slot of its
//!    preference list that is still empty. The fill stops when all `M` slots are claimed. With
//!    equal weights this is exactly the paper's round-robin population.
//!
//! Weights are **relative**: only their ratios matter (`{1, 2}` builds the same table as
//! `{10, 20}`). Each endpoint ends up within about one slot of its weighted share `M·w/Σw`
//! (measured: equal weights give exactly ⌊M/N⌋ or ⌈M/N⌉; the largest relative error is 0.82 %
//! at N = 1,000, M = 65537, and 0.1 % at N = 1,000, M = 655373). Keep `M ≥ 100·N` so one slot is
//! at most 1 % of a share.
//!
//! # Disruption
//!
//! Removing one of N endpoints moves its own ~M/N slots plus some others, because the last
//! empty slots of the fill are found late and by whichever endpoint's turn comes — about 90 %
//! of the extra moves are slots filled in the last 10 % of the fill. The extra is small when
//! `M/N` is large: measured (mean of 10 trials, in units of 1/N) 1.02 at N = 10 and 1.06 at
//! N = 20 for M = 65537, 1.14 at N = 100 for M = 655373, but 1.56 at N = 100 / M = 65537,
//! 4.3 at N = 1,000 / M = 655373 and 6.8 at N = 1,000 / M = 65537 (the full grid comes from
//! `cargo run --release -p maglev --example disruption`). Flows with a flow-table entry do not
//! move either way (M10); the extra only affects stateless choices.
//!
//! # Algorithm `maglev-v2` (normative; selectable per service, v1 stays the default)
//!
//! The same endpoints, ids and preference lists as v1 (steps 1 and 2 above); the fill differs.
//!
//! 1. **Quotas.** Endpoint `i` gets `q_i = ⌊M·w_i / Σw⌋` slots; the `M − Σq_i` slots left go one
//!    each to the endpoints with the largest remainders `M·w_i mod Σw`, equal remainders ordered
//!    by `mix64(id ^ 0x72616e6b2d763200)` ascending. So every endpoint is within one slot of its
//!    weighted share (v1 gets there by credits; here it is exact by construction), and with
//!    equal weights the endpoints given one more slot form a nested set as N changes.
//! 2. **Lockstep fill.** Position `p = 0, 1, 2, …`: every endpoint (in id order) that has not yet
//!    filled its quota looks at entry `p` of its preference list, `offset + p·skip (mod M)`, and
//!    claims that slot if it is empty; it misses otherwise (v1 instead walks on to its next empty
//!    slot in the same turn). It ends when every quota is filled, which is when every slot is.
//!
//! The result is the assignment in which a slot belongs to the endpoint whose list reaches it
//! first, among those with room (the one stable matching when both sides rank by list
//! position), so it does not depend on turns. When one endpoint goes, its slots are claimed by
//! the first endpoints with room to reach them, each of which then leaves its own last slot, and
//! so on until an endpoint given one more slot takes one: short chains instead of v1's
//! reshuffled tail. Measured (`cargo run --release -p maglev --example disruption`, mean of 10
//! removals, units of 1/N), v1 → v2: N = 100, M = 65537: 1.56 → 1.29; N = 1,000, M = 65537:
//! 6.79 → 4.36; N = 1,000, M = 655373: 4.27 → 2.75; N = 10: 1.02 → 1.01. The largest share
//! error is the same (the rounding of one slot). Build time is about v1's (the `build` bench).
//! It does not reach 2/N at N = 1,000, M = 65537: with every endpoint held to its share ±1
//! slot (1 % balance there), a freed slot starts a chain; the variants tried and the frontier
//! of disruption against balance are in perf/MAGLEV.md.
//!
//! [`EndpointId::from_bytes`] gives callers a documented stable id for an endpoint described by
//! bytes (e.g. a 16-byte address and a port): FNV-1a 64 over the bytes, then [`mix64`].
//!
//! # Lookup
//!
//! `lookup(hash)` reduces a 64-bit flow hash to a slot with a multiply-shift,
//! `slot = (hash · M) >> 64`, which avoids a per-packet division and is exact and portable (it
//! uses the high bits of the hash, so the flow hash must be well mixed in its high bits).
//!
//! # Cost
//!
//! Building costs about `M · ln M` probes of a bitmap (the last empty slots are found late) plus
//! `rounds · N` credit updates, where `rounds ≈ M · max_weight / sum_weight`; with equal weights
//! that is `M`. Very skewed weights (one endpoint at 1000, thousands at 1) make the credit loop the
//! dominant cost, still linear in `M`. Measured (`cargo bench -p maglev`): M = 65537 with 1,000
//! endpoints 1.24 ms; M = 655373 with 1,000 endpoints 16.1 ms, with 10,000 endpoints 16.8 ms.
//! Per slot it gets slower as the table outgrows the caches: on a 2-core VM
//! (`cargo run --release -p maglev --example build_time`) about 25 ns a slot at M = 65537,
//! 35 at 655373, 70-100 at 4194301, 120 at 16777213 (2 s) and 400-500 at 67108859 (30 s).
//!
//! A table holds 4 bytes a slot and 8 an endpoint ([`MaglevTable::memory_bytes_for`]: 256 MiB
//! at `MAX_TABLE_SIZE`); building one needs a bitmap of `M / 8` bytes and the endpoints'
//! permutation state besides ([`MaglevTable::build_scratch_bytes`]).

use std::fmt;
use std::str::FromStr;

/// Default table size: the Maglev paper's prime, fine for services of up to a few hundred
/// endpoints (at least ~100 slots per endpoint keeps the weight error and disruption small).
pub const DEFAULT_TABLE_SIZE: u32 = 65_537;

/// A larger prime for services with thousands of endpoints.
pub const LARGE_TABLE_SIZE: u32 = 655_373;

/// Largest accepted table size. Bounds memory (4 bytes a slot) and build time.
pub const MAX_TABLE_SIZE: u32 = 1 << 26;

/// Seed xor-ed into the endpoint id before hashing for the offset ("maglev-1" in ASCII).
const OFFSET_SEED: u64 = 0x6d61_676c_6576_2d31;
/// Seed xor-ed into the endpoint id before hashing for the skip ("skip-v1\0" in ASCII).
const SKIP_SEED: u64 = 0x736b_6970_2d76_3100;

/// FNV-1a 64-bit offset basis.
const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
/// FNV-1a 64-bit prime.
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// The SplitMix64 finaliser (Steele, Lea, Flood 2014): a fixed, portable 64-bit bijection with
/// good avalanche. Part of the `maglev-v1` definition.
#[must_use]
pub const fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The table-construction algorithm. Versioned so a change can be rolled out per VIP.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Algorithm {
    /// `maglev-v1`, described in the crate documentation.
    #[default]
    V1,
    /// `maglev-v2`: exact quotas, filled by preference position.
    V2,
}

impl Algorithm {
    /// The name used in configuration files.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::V1 => "maglev-v1",
            Self::V2 => "maglev-v2",
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Parsing an unknown algorithm name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
/// unknown Maglev algorithm "{0}" (known: "maglev-v1", "maglev-v2")
#[error("unknown Maglev algorithm \"{0}\" (known: \"maglev-v1\", \"maglev-v2\")")]
pub struct UnknownAlgorithm(pub String);

impl FromStr for Algorithm {
    type Err = UnknownAlgorithm;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "maglev-v1" => Ok(Self::V1),
            "maglev-v2" => Ok(Self::V2),
            other => Err(UnknownAlgorithm(other.to_owned())),
        }
    }
}

/// A stable endpoint identity. Tables depend on ids, never on the caller's order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EndpointId(pub u64);

impl EndpointId {
    /// A stable id for an endpoint described by bytes (e.g. a 16-byte address followed by a
    /// big-endian port): FNV-1a 64 over the bytes, then [`mix64`]. Identical on every machine
    /// and release.
    #[must_use]
    pub fn from_bytes(bytes: &[u8]) -> Self {
        let mut h = FNV_OFFSET;
        for &b in bytes {
            h ^= u64::from(b);
            h = h.wrapping_mul(FNV_PRIME);
        }
        Self(mix64(h))
    }

    /// [`EndpointId::from_bytes`] over the 16-byte address (IPv4 as IPv4-mapped IPv6 is the
    /// caller's convention) followed by the big-endian port.
    #[must_use]
    pub fn from_addr_port(addr: [u8; 16], port: u16) -> Self {
        let mut buf = [0u8; 18];
        buf[..16].copy_from_slice(&addr);
        buf[16..].copy_from_slice(&port.to_be_bytes());
        Self::from_bytes(&buf)
    }
}

/// One endpoint as given to [`MaglevTable::build`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Endpoint {
    /// Stable identity; decides the endpoint's preference list.
    pub id: EndpointId,
    /// Relative weight; 0 means "no slots".
    pub weight: u32,
}

/// A validated table size: a prime in `3..=MAX_TABLE_SIZE`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TableSize(u32);

impl TableSize {
    /// Validates `m`.
    pub fn new(m: u32) -> Result<Self, BuildError> {
        if !(3..=MAX_TABLE_SIZE).contains(&m) {
            return Err(BuildError::SizeOutOfRange(m));
        }
        if !is_prime(m) {
            return Err(BuildError::NotPrime(m));
        }
        Ok(Self(m))
    }

    /// The number of slots.
    #[must_use]
    pub const fn get(self) -> u32 {
        self.0
    }
}

impl Default for TableSize {
    fn default() -> Self {
        Self(DEFAULT_TABLE_SIZE)
    }
}

/// Why a table could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    /// Maglev table size {0} is not prime (use e.g. 65537 or 655373)
    #[error("Maglev table size {0} is not prime (use e.g. 65537 or 655373)")]
    NotPrime(u32),
    /// Maglev table size {0} is out of range (3..=67108864)
    #[error("Maglev table size {0} is out of range (3..=67108864)")]
    SizeOutOfRange(u32),
    /// no endpoint with a positive weight
    #[error("no endpoint with a positive weight")]
    NoEligibleEndpoints,
    /// {endpoints} endpoints with positive weight do not fit a table of {size} slots
    #[error("{endpoints} endpoints with positive weight do not fit a table of {size} slots")]
    TooManyEndpoints {
        /// Eligible endpoints given.
        endpoints: usize,
        /// Table size.
        size: u32,
    },
    /// endpoint id {0:#018x} given twice
    #[error("endpoint id {0:#018x} given twice")]
    DuplicateEndpoint(u64),
}

/// Deterministic primality test by trial division; `m <= 2^26` needs at most ~4,100 divisions.
#[must_use]
pub fn is_prime(m: u32) -> bool {
    if m < 2 {
        return false;
    }
    if m % 2 == 0 {
        return m == 2;
    }
    let m = u64::from(m);
    let mut d = 3u64;
    while d * d <= m {
        if m % d == 0 {
            return false;
        }
        d += 2;
    }
    true
}

/// An immutable Maglev lookup table.
///
/// Slots hold indices into the endpoint slice given to [`MaglevTable::build`] (the caller's
/// order), so the data plane can index its own backend array directly; which *endpoint id* owns
/// a slot does not depend on that order.
#[derive(Clone, PartialEq, Eq)]
pub struct MaglevTable {
    algorithm: Algorithm,
    slots: Box<[u32]>,
    /// Endpoint ids in the caller's order (index = value stored in `slots`).
    ids: Box<[EndpointId]>,
}

impl fmt::Debug for MaglevTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MaglevTable")
            .field("algorithm", &self.algorithm)
            .field("size", &self.slots.len())
            .field("endpoints", &self.ids.len())
            .finish_non_exhaustive()
    }
}

/// Result of [`MaglevTable::diff`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TableDiff {
    /// Slots whose endpoint id differs (all slots if the sizes differ).
    pub slots_moved: usize,
    /// Slots in the new table.
    pub size: usize,
}

impl TableDiff {
    /// `slots_moved / size`.
    #[must_use]
    pub fn fraction_moved(&self) -> f64 {
        if self.size == 0 {
            0.0
        } else {
            self.slots_moved as f64 / self.size as f64
        }
    }
}

/// Per-endpoint construction state, sorted by id.
struct Perm {
    /// Caller index of the endpoint.
    index: u32,
    weight: u64,
    credit: u64,
    skip: u32,
    /// Next position of the preference list to try.
    next: u32,
}

impl MaglevTable {
    /// Builds the table for `endpoints` (any order) with `size` slots.
    pub fn build(
        algorithm: Algorithm,
        size: TableSize,
        endpoints: &[Endpoint],
    ) -> Result<Self, BuildError> {
        match algorithm {
            Algorithm::V1 => build_v1(size, endpoints),
            Algorithm::V2 => build_v2(size, endpoints),
        }
    }

    /// [`MaglevTable::build`] with [`Algorithm::V2`] and a size given as a number.
    pub fn build_v2(m: u32, endpoints: &[Endpoint]) -> Result<Self, BuildError> {
        Self::build(Algorithm::V2, TableSize::new(m)?, endpoints)
    }

    /// [`MaglevTable::build`] with [`Algorithm::V1`] and a size given as a number.
    pub fn build_v1(m: u32, endpoints: &[Endpoint]) -> Result<Self, BuildError> {
        Self::build(Algorithm::V1, TableSize::new(m)?, endpoints)
    }

    /// The endpoint (index into the slice given to `build`) for a flow hash: one multiply-shift
    /// and one array index.
    #[inline]
    #[must_use]
    pub fn lookup(&self, hash: u64) -> u32 {
        // `(hash * M) >> 64 < M` for every hash, so the index is always in bounds; `get` keeps
        // the code panic-free without relying on that argument.
        let slot = self.slot_of(hash);
        self.slots.get(slot).copied().unwrap_or(0)
    }

    /// The slot a hash maps to (also for diagnostics, e.g. `simulate`).
    #[inline]
    #[must_use]
    #[allow(
        clippy::cast_possible_truncation,
        reason = "below slots.len(), a usize"
    )]
    pub fn slot_of(&self, hash: u64) -> usize {
        ((u128::from(hash) * self.slots.len() as u128) >> 64) as usize
    }

    /// All slots (endpoint indices).
    #[must_use]
    pub fn slots(&self) -> &[u32] {
        &self.slots
    }

    /// Number of slots, `M`.
    #[must_use]
    pub fn size(&self) -> usize {
        self.slots.len()
    }

    /// The algorithm that built the table.
    #[must_use]
    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// Endpoint ids in the caller's order.
    #[must_use]
    pub fn endpoint_ids(&self) -> &[EndpointId] {
        &self.ids
    }

    /// The endpoint id owning slot `slot`, if in range.
    #[must_use]
    pub fn id_at(&self, slot: usize) -> Option<EndpointId> {
        let idx = *self.slots.get(slot)?;
        self.ids.get(idx as usize).copied()
    }

    /// Number of slots per endpoint, in the caller's order.
    #[must_use]
    pub fn slot_counts(&self) -> Vec<u32> {
        let mut counts = vec![0u32; self.ids.len()];
        for &s in self.slots.iter() {
            if let Some(c) = counts.get_mut(s as usize) {
                *c += 1;
            }
        }
        counts
    }

    /// Heap bytes this table holds: its slots and its endpoint ids.
    #[must_use]
    pub fn heap_bytes(&self) -> usize {
        size_of_val::<[u32]>(&self.slots) + size_of_val::<[EndpointId]>(&self.ids)
    }

    /// Heap bytes a table of `m` slots over `endpoints` endpoints holds
    /// ([`MaglevTable::heap_bytes`] of the table [`MaglevTable::build`] returns): 4 bytes a slot
    /// and 8 an endpoint.
    #[must_use]
    pub const fn memory_bytes_for(m: u32, endpoints: usize) -> u64 {
        m as u64 * size_of::<u32>() as u64 + endpoints as u64 * size_of::<EndpointId>() as u64
    }

    /// Heap bytes building a table of `m` slots over `endpoints` endpoints needs on top of
    /// [`MaglevTable::memory_bytes_for`], freed when the build returns: the bitmap of filled
    /// slots (`m / 8` bytes) and the per-endpoint state: the eligible endpoints sorted by id,
    /// then v1's permutation state (offset, skip, next, credit; v2's quota state and order are
    /// no larger).
    #[must_use]
    pub const fn build_scratch_bytes(m: u32, endpoints: usize) -> u64 {
        let bitmap = (m as u64).div_ceil(64) * size_of::<u64>() as u64;
        let per_endpoint = size_of::<Eligible>() + size_of::<Perm>();
        bitmap + endpoints as u64 * per_endpoint as u64
    }

    /// How many slots changed owner (by endpoint id) from `previous` to `self`.
    #[must_use]
    pub fn diff(&self, previous: &MaglevTable) -> TableDiff {
        let size = self.slots.len();
        if previous.slots.len() != size {
            return TableDiff {
                slots_moved: size,
                size,
            };
        }
        let slots_moved = (0..size)
            .filter(|&i| self.id_at(i) != previous.id_at(i))
            .count();
        TableDiff { slots_moved, size }
    }
}

/// An endpoint with a positive weight, as both fills see it.
struct Eligible {
    id: EndpointId,
    /// Caller index.
    index: u32,
    weight: u64,
}

/// Step 1 of both algorithms: the endpoints with a positive weight, sorted by id (order
/// independence: the fills visit endpoints in id order), none twice, at most `m`.
fn eligible(m: u32, endpoints: &[Endpoint]) -> Result<Vec<Eligible>, BuildError> {
    let too_many = |n: usize| BuildError::TooManyEndpoints {
        endpoints: n,
        size: m,
    };
    let mut eps: Vec<Eligible> = Vec::with_capacity(endpoints.len());
    for (index, ep) in endpoints.iter().enumerate() {
        if ep.weight > 0 {
            eps.push(Eligible {
                id: ep.id,
                index: u32::try_from(index).map_err(|_| too_many(endpoints.len()))?,
                weight: u64::from(ep.weight),
            });
        }
    }
    if eps.is_empty() {
        return Err(BuildError::NoEligibleEndpoints);
    }
    if eps.len() > m as usize {
        return Err(too_many(eps.len()));
    }
    eps.sort_unstable_by_key(|e| e.id);
    if let Some(w) = eps.windows(2).find(|w| w[0].id == w[1].id) {
        return Err(BuildError::DuplicateEndpoint(w[0].id.0));
    }
    Ok(eps)
}

/// Step 2 of both algorithms: the start and stride of `id`'s preference list.
fn preference(id: EndpointId, m: u32) -> (u32, u32) {
    #[allow(clippy::cast_possible_truncation, reason = "below m, a u32")]
    (
        (mix64(id.0 ^ OFFSET_SEED) % u64::from(m)) as u32,
        (mix64(id.0 ^ SKIP_SEED) % u64::from(m - 1)) as u32 + 1,
    )
}

fn build_v1(size: TableSize, endpoints: &[Endpoint]) -> Result<MaglevTable, BuildError> {
    let m = size.get();
    let mut perms: Vec<Perm> = eligible(m, endpoints)?
        .iter()
        .map(|e| {
            let (offset, skip) = preference(e.id, m);
            Perm {
                index: e.index,
                weight: e.weight,
                credit: 0,
                skip,
                next: offset,
            }
        })
        .collect();
    let max_weight = perms.iter().map(|p| p.weight).max().unwrap_or(1);

    let mut slots = vec![0u32; m as usize].into_boxed_slice();
    // A bitmap of filled slots: M/8 bytes stays in L1/L2 even for M = 655373, which is what
    // keeps the probe-heavy tail of the fill fast.
    let mut filled = vec![0u64; (m as usize).div_ceil(64)];
    let mut remaining = m as usize;
    'fill: loop {
        for p in perms.iter_mut() {
            p.credit += p.weight;
            if p.credit < max_weight {
                continue;
            }
            p.credit -= max_weight;
            // Walk the preference list to the first empty slot. Positions advance by
            // compare-and-subtract instead of a division: next < M and skip < M.
            let mut pos = p.next;
            loop {
                let (word, bit) = ((pos >> 6) as usize, pos & 63);
                let w = filled[word];
                let step = pos + p.skip;
                let following = if step >= m { step - m } else { step };
                if w & (1u64 << bit) == 0 {
                    filled[word] = w | (1u64 << bit);
                    slots[pos as usize] = p.index;
                    p.next = following;
                    break;
                }
                pos = following;
            }
            remaining -= 1;
            if remaining == 0 {
                break 'fill;
            }
        }
    }
    Ok(MaglevTable {
        algorithm: Algorithm::V1,
        slots,
        ids: endpoints.iter().map(|e| e.id).collect(),
    })
}

/// Seed of the rank that orders equal remainders in `maglev-v2` ("rank-v2\0" in ASCII).
const RANK_SEED: u64 = 0x7261_6e6b_2d76_3200;

/// `maglev-v2`'s state of one endpoint.
struct Claim {
    /// Caller index of the endpoint.
    index: u32,
    /// Slots still to claim.
    left: u32,
    skip: u32,
    /// Next position of the preference list.
    next: u32,
}

fn build_v2(size: TableSize, endpoints: &[Endpoint]) -> Result<MaglevTable, BuildError> {
    let m = size.get();
    let eps = eligible(m, endpoints)?;
    // Quotas: the floor of each weighted share, and one more slot to each of
    // the largest remainders (equal remainders ordered by a rank hashed from
    // the id, so that the endpoints given one more form a nested set as N
    // changes).
    let total: u128 = eps.iter().map(|e| u128::from(e.weight)).sum();
    let share = |w: u64| u128::from(m) * u128::from(w);
    let mut claims: Vec<Claim> = eps
        .iter()
        .map(|e| {
            let (next, skip) = preference(e.id, m);
            #[allow(clippy::cast_possible_truncation, reason = "at most m, a u32")]
            Claim {
                index: e.index,
                left: (share(e.weight) / total) as u32,
                next,
                skip,
            }
        })
        .collect();
    let given: u64 = claims.iter().map(|c| u64::from(c.left)).sum();
    let mut order: Vec<usize> = (0..eps.len()).collect();
    let remainder = |i: usize| share(eps[i].weight) % total;
    let rank = |i: usize| mix64(eps[i].id.0 ^ RANK_SEED);
    order.sort_unstable_by(|&a, &b| {
        remainder(b)
            .cmp(&remainder(a))
            .then_with(|| rank(a).cmp(&rank(b)))
    });
    let extra = usize::try_from(u64::from(m) - given).unwrap_or(0);
    for &i in order.iter().take(extra) {
        claims[i].left += 1;
    }
    claims.retain(|c| c.left > 0);
    let mut slots = vec![0u32; m as usize].into_boxed_slice();
    let mut filled = vec![0u64; (m as usize).div_ceil(64)];
    // Position by position: each endpoint with slots still to claim looks at
    // the next slot of its preference list and takes it if free (endpoints
    // in id order within a position). Quotas sum to M, and every list visits
    // every slot, so the loop ends with every slot taken.
    while !claims.is_empty() {
        let mut done = false;
        for c in &mut claims {
            let pos = c.next;
            let step = pos + c.skip;
            c.next = if step >= m { step - m } else { step };
            let (word, bit) = ((pos >> 6) as usize, pos & 63);
            if filled[word] & (1u64 << bit) == 0 {
                filled[word] |= 1u64 << bit;
                slots[pos as usize] = c.index;
                c.left -= 1;
                done |= c.left == 0;
            }
        }
        if done {
            claims.retain(|c| c.left > 0);
        }
    }
    Ok(MaglevTable {
        algorithm: Algorithm::V2,
        slots,
        ids: endpoints.iter().map(|e| e.id).collect(),
    })
}

#[cfg(test)]
mod tests;
