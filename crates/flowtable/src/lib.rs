//! The bounded, shared, lock-free connection table (SPEC M10, M11, M15, M32).
//!
//! Every worker looks flows up and inserts new ones in one table shared by all workers; the
//! management core ages it. The table never allocates after [`FlowTable::new`], nothing in it
//! reads a clock (the caller passes coarse ticks), and no operation waits unboundedly on another
//! thread.
//!
//! # Layout
//!
//! Open addressing over `B` buckets of 7 slots. A bucket is eight 64-byte cache lines:
//!
//! * a **header** line: seven 8-byte control words (state EMPTY/BUSY/LIVE, 8 flag bits, a 16-bit
//!   tag from the hash, a 32-bit version) and one insert-lock word;
//! * seven **slot** lines: the 40-byte key (`[u64; 5]`) and three value words
//!   (backend | generation, cookie | created, last-seen).
//!
//! Each key has two candidate buckets chosen from its 64-bit hash by multiply-shift (no
//! division, any bucket count), and the 16-bit tag lets a probe skip non-matching slots without
//! touching their slot lines. A hit costs the header line and one slot line (a third and fourth
//! line if the key sits in its second bucket). Slots are provisioned for 125 % of the nominal
//! capacity — an 80 % load at capacity, where two-choice placement into the emptier bucket
//! still places essentially every key. Memory: 64 B + 64/7 B per slot, **≈ 91.4 B per nominal
//! entry**, so 10 M entries take 0.91 GB (0.85 GiB). [`FlowTable::memory_bytes_for`] computes it.
//!
//! # Concurrency
//!
//! * **Readers** (lookups) use a per-slot seqlock: load the control word (acquire), read the key
//!   and value words (relaxed atomics), acquire fence, re-load the control word; the read counts
//!   only if it is unchanged. Every change of a slot's occupant goes EMPTY/LIVE → BUSY (version
//!   incremented, by compare-exchange) → write → LIVE (release), and removal is LIVE → EMPTY
//!   (version incremented), so a reader can never return a key of one occupant with a value of
//!   another (no torn entries), and a handle ([`SlotRef`]) to a removed entry is recognised as
//!   stale. A reader
//!   retries only when another operation *completed* a change to that slot, and gives up after a
//!   few retries (treating the key as absent), so readers never wait for a stalled thread.
//! * **Per-packet writes** are rare: [`FlowTable::touch`] stores last-seen only when the tick
//!   changed, so packets of a flow within one tick leave every shared line clean.
//! * **Flag updates** (ESTABLISHED, FIN, RST) and **removals** are single compare-exchanges on
//!   the control word, conditional on the handle's version.
//! * **Inserts** of the same key must not race into two slots (two workers seeing a flow's
//!   first packets must agree on one backend and one cookie). Each key's inserts are serialised
//!   by a try-lock bit in its primary bucket's header: under it the inserter checks both
//!   candidate buckets for the key (if a candidate slot kept changing under every bounded
//!   re-read it gives up with [`InsertOutcome::Contended`] rather than risk a duplicate), then
//!   claims a slot by compare-exchange (other keys' inserts may compete for the same slot) and
//!   publishes. A racing loser gets [`InsertOutcome::Existing`] with the winner's entry. The
//!   lock covers ~100 instructions and is only spun on a bounded number of times; a worker that
//!   cannot get it returns [`InsertOutcome::Contended`] and forwards that packet statelessly.
//!   So no operation waits unboundedly, and lookups never touch the lock. Without this lock a
//!   lock-free "claim, then check for a duplicate" protocol needs a tie-break that both racers
//!   can observe, which costs an extra pass and still leaves the loser waiting for the winner's
//!   value; the per-bucket bit is simpler to argue and costs nothing on the lookup path.
//!
//! # Speed
//!
//! A lookup is two dependent cache misses (header, then slot), plus the second header for keys
//! in their second bucket. [`FlowTable::lookup_burst`] takes a whole RX burst and overlaps those
//! misses across it (prefetch the headers, then the matching slot lines, and for certain misses
//! the slot the following insert will claim), which is what the pipeline should call. The
//! arrays are allocated once with transparent-huge-page advice, so the TLB covers the table.
//!
//! # Testing
//!
//! The concurrency tests run this same file under `shuttle` (randomised and PCT schedules of
//! racing inserts, lookups, evictions, flag updates and removals), and a multi-threaded stress
//! test checks for lost and torn entries on real threads. Shuttle explores interleavings of
//! sequentially consistent executions; the weaker orderings used (acquire/release, the seqlock
//! fences) follow the standard seqlock pattern (Boehm, "Can seqlocks get along with programming
//! language memory models?", 2012) and are argued at each use.
//!
//! # Policies
//!
//! Idle timeouts per class ([`Timeouts`]): TCP established, TCP half-open, UDP, other; FIN and
//! RST shorten them. The management core calls [`FlowTable::sweep`] with a bucket budget to
//! remove idle entries incrementally. When an insert finds both buckets full it evicts an
//! already expired entry if there is one, otherwise the least recently seen *half-open* entry;
//! established TCP, UDP and other entries are never displaced before their timeout, so a SYN
//! flood only competes with half-open flows (SPEC M15). If nothing can be evicted the insert
//! returns [`InsertOutcome::Full`]: the pipeline forwards by stateless Maglev and counts it.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]
// Two small `unsafe` blocks: the cache prefetch hint (`table.rs`) and the huge-page advice
// (`sync::alloc_slice`).
#![deny(unsafe_code)]

mod sync {
    pub(crate) use std::hint::spin_loop;
    pub(crate) use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering, fence};

    /// Allocates the table's arrays once, asking Linux for transparent huge pages first: a
    /// lookup touches two random cache lines of a table of up to gigabytes, and with 4 KiB pages
    /// each would also miss the TLB (doubly expensive under virtualisation).
    pub(crate) fn alloc_slice<T>(n: usize, mut init: impl FnMut() -> T) -> Box<[T]> {
        let mut v: Vec<T> = Vec::with_capacity(n);
        advise_huge_pages(
            v.as_mut_ptr().cast::<u8>(),
            n.saturating_mul(size_of::<T>()),
        );
        v.extend((0..n).map(|_| init()));
        v.into_boxed_slice()
    }

    #[cfg(target_os = "linux")]
    #[allow(unsafe_code)]
    fn advise_huge_pages(ptr: *mut u8, len: usize) {
        const PAGE: usize = 4096;
        if len < 2 * 1024 * 1024 {
            return;
        }
        // madvise wants a page-aligned start; round the range inwards so it only covers pages
        // that lie entirely inside this allocation.
        let skip = ptr.addr().next_multiple_of(PAGE) - ptr.addr();
        let len = (len - skip) & !(PAGE - 1);
        let start = ptr.wrapping_add(skip);
        // SAFETY: `start..start + len` lies inside the allocation `ptr..ptr + len` that the
        // caller owns (a fresh `Vec` buffer nobody else references). MADV_HUGEPAGE is advice
        // only: it never changes the contents or validity of the memory, just how the kernel
        // backs it, so no Rust-visible state changes. A failure (e.g. THP disabled) is ignored
        // on purpose: the table then works on normal pages.
        let _ = unsafe { libc::madvise(start.cast(), len, libc::MADV_HUGEPAGE) };
    }

    #[cfg(not(target_os = "linux"))]
    fn advise_huge_pages(_ptr: *mut u8, _len: usize) {}
}

mod table;

pub use table::{
    BUCKET_SLOTS, Config, ConfigError, Entry, EntryFlags, Evicted, FlowKey, FlowTable, Hit,
    InsertOutcome, MAX_CAPACITY, NewEntry, Occupancy, ProtoClass, SlotRef, SweepStats, Tick,
    Timeouts,
};

#[cfg(test)]
mod tests;
