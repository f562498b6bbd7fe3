//! The bounded, shared, lock-free connection table (M10, M11, M15, M32).
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
//!   tag from the hash, a 32-bit version) and one meta word: the insert-lock bit and, per slot,
//!   the low byte of its tag, so that a lookup finds its candidate slots in one word;
//! * seven **slot** lines: the 40-byte key (`[u64; 5]`) and three value words
//!   (backend | generation, cookie | created, last-seen).
//!
//! Each key has two candidate buckets chosen from its 64-bit hash by multiply-shift (no
//! division, any bucket count) — the table's own keyed hash of the key ([`FlowTable::hash`],
//! [`placement`]: a folded-multiply hash under a per-table random 512-bit key, so nobody
//! outside can aim keys at chosen buckets), and the 16-bit tag lets a probe skip non-matching slots without
//! touching their slot lines. A hit costs the header line and one slot line (a third and fourth
//! line if the key sits in its second bucket). Slots are provisioned for 125 % of the nominal
//! capacity — an 80 % load at capacity, where two-choice placement still places essentially
//! every key (a key goes to its primary bucket while that holds at most one entry, else to the
//! emptier of the two, so at light load lookups rarely need the second header). Memory: 64 B +
//! 64/7 B per slot, **≈ 91.4 B per nominal entry**, so 10 M entries take 0.91 GB (0.85 GiB).
//! [`FlowTable::memory_bytes_for`] computes it.
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
//!   So no operation waits unboundedly, and lookups never take the lock (they read the tag bytes
//!   beside it, which a claim sets while it holds the slot BUSY, before publishing it). Without this lock a
//!   lock-free "claim, then check for a duplicate" protocol needs a tie-break that both racers
//!   can observe, which costs an extra pass and still leaves the loser waiting for the winner's
//!   value; the per-bucket bit is simpler to argue and costs nothing on the lookup path.
//!
//! # Speed
//!
//! A lookup is two dependent cache misses (header, then slot), plus the second header for keys
//! in their second bucket. A lookup in stages ([`Lookup`]: [`FlowTable::begin`] prefetches the
//! primary header, [`FlowTable::screen`] the matching slot lines — or the second header, and
//! for certain misses the slot the following insert will claim — and [`FlowTable::complete`]
//! compares keys) lets a caller overlap those misses across a whole RX burst and its own work in
//! between; [`FlowTable::lookup_burst`] runs the stages back to back. A bucket's header and
//! slots are one 512-byte block, so both lines of a hit lie in one page, and a key alone in its
//! bucket (slot 0, the usual case at light load) shares an aligned 128-byte pair with the
//! header. The table is one array, allocated once, 2 MiB aligned and padded, with
//! transparent-huge-page advice, so the TLB covers it.
//!
//! # Testing
//!
//! The concurrency tests run this same code under `shuttle` (the `shuttle` feature builds it
//! against shuttle's atomics; randomised and PCT schedules of racing inserts, lookups,
//! evictions, flag updates and removals), and a multi-threaded stress
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
//! flood only competes with half-open flows (M15). If nothing can be evicted the insert
//! returns [`InsertOutcome::Full`]: the pipeline forwards by stateless Maglev and counts it.
// `unsafe` (denied workspace-wide) is allowed in two places only: the cache prefetch hint
// (`table/lookup.rs`) and the table's huge-page backed arrays (`sync::Array`).

mod sync {
    // The `shuttle` feature swaps in shuttle's atomics (and spin hint), so that
    // tests/shuttle.rs controls every atomic access of the very same table code.
    #[cfg(feature = "shuttle")]
    pub(crate) use shuttle::hint::spin_loop;
    #[cfg(feature = "shuttle")]
    pub(crate) use shuttle::sync::atomic::{AtomicU64, AtomicUsize, Ordering, fence};
    #[cfg(not(feature = "shuttle"))]
    pub(crate) use std::hint::spin_loop;
    #[cfg(not(feature = "shuttle"))]
    pub(crate) use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering, fence};

    #[allow(unsafe_code)]
    mod array {
        use std::alloc::{Layout, alloc, dealloc, handle_alloc_error};
        use std::ptr::NonNull;

        use crate::memory::{MemoryProvider, TableMemory};

        /// Transparent huge pages are this size (x86-64, and arm64 with 4 KiB pages).
        const HUGE: usize = 2 << 20;

        /// Arrays of at least this size get huge pages (so padding wastes at most 3/4 of one).
        pub(crate) const HUGE_FROM: usize = HUGE / 4;

        /// Bytes allocated for an array of `bytes`.
        pub(crate) const fn padded(bytes: usize) -> usize {
            if bytes >= HUGE_FROM {
                bytes.next_multiple_of(HUGE)
            } else {
                bytes
            }
        }

        /// A fixed-size array, allocated once. One of 512 KiB or more is aligned and padded
        /// to 2 MiB and advised for transparent huge pages, so that every part of it can be
        /// backed by them: a lookup touches two random cache lines of a table of up to
        /// gigabytes, and with 4 KiB pages each would also miss the TLB (doubly expensive
        /// under virtualisation). Plain heap memory only gets huge pages for the aligned 2 MiB
        /// stretches that happen to lie inside it (for a 5 MB array, two of three pages).
        pub(crate) struct Array<T> {
            ptr: NonNull<T>,
            len: usize,
            layout: Layout,
            /// The block the elements live in when it came from a [`TableMemory`]
            /// provider; `None`: from the global allocator (`layout`).
            block: Option<Box<dyn TableMemory>>,
        }

        // SAFETY: `Array<T>` owns its elements like `Box<[T]>` does (no shared ownership, no
        // interior pointers handed out beyond borrows of `self`), so it may cross and be
        // shared between threads exactly when `T` may.
        unsafe impl<T: Send> Send for Array<T> {}
        // SAFETY: as above; `&Array<T>` only gives out `&[T]`.
        unsafe impl<T: Sync> Sync for Array<T> {}

        impl<T> Array<T> {
            /// `n` elements made by `init`, in order, in a block from `provider` when it
            /// gives one (large arrays only), else on the heap.
            pub(crate) fn new(
                n: usize,
                provider: Option<&MemoryProvider<'_>>,
                mut init: impl FnMut() -> T,
            ) -> Array<T> {
                let bytes = n.saturating_mul(size_of::<T>());
                let size = padded(bytes);
                let align = if size == bytes { align_of::<T>() } else { HUGE };
                let Ok(layout) = Layout::from_size_align(size, align.max(align_of::<T>())) else {
                    handle_alloc_error(Layout::new::<T>())
                };
                // A provided block must hold the whole padded layout at its alignment; one
                // that does not is returned (dropped) and the heap used instead.
                let block = provider
                    .filter(|_| size != bytes)
                    .and_then(|p| p(layout.size(), layout.align()))
                    .filter(|b| {
                        b.len() >= layout.size() && b.ptr().as_ptr().addr() % layout.align() == 0
                    });
                let ptr = if let Some(b) = &block {
                    b.ptr().cast::<T>()
                } else if layout.size() == 0 {
                    NonNull::dangling()
                } else {
                    // SAFETY: `layout` has a non-zero size.
                    let raw = unsafe { alloc(layout) };
                    let Some(p) = NonNull::new(raw.cast::<T>()) else {
                        handle_alloc_error(layout)
                    };
                    if size != bytes {
                        advise_huge_pages(raw, layout.size());
                    }
                    p
                };
                let mut a = Array {
                    ptr,
                    len: 0,
                    layout,
                    block,
                };
                for i in 0..n {
                    // SAFETY: `i < n` and the allocation holds `n` elements of `T` (at least
                    // `n * size_of::<T>()` bytes, aligned for `T`); slot `i` is not
                    // initialised yet. `len` only counts initialised elements, so a panic in
                    // `init` drops exactly those.
                    let v = init();
                    // SAFETY: see above; `add(i)` stays inside the allocation.
                    let slot = unsafe { a.ptr.as_ptr().add(i) };
                    // SAFETY: see above.
                    unsafe { slot.write(v) };
                    a.len = i + 1;
                }
                a
            }
        }

        impl<T> Array<T> {
            /// Bytes allocated for the array, padding included.
            pub(crate) fn allocated_bytes(&self) -> usize {
                self.layout.size()
            }

            /// The provided block the elements live in, if any ([`TableMemory`]).
            pub(crate) fn provided(&self) -> Option<&dyn TableMemory> {
                self.block.as_deref()
            }
        }

        impl<T> std::ops::Deref for Array<T> {
            type Target = [T];
            #[inline(always)]
            fn deref(&self) -> &[T] {
                // SAFETY: `ptr` is aligned for `T`, non-null, and its first `len` elements are
                // initialised (`new`); they live until `drop`.
                unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
            }
        }

        impl<T> Drop for Array<T> {
            fn drop(&mut self) {
                let elems = std::ptr::slice_from_raw_parts_mut(self.ptr.as_ptr(), self.len);
                // SAFETY: the first `len` elements are initialised and dropped once, here.
                unsafe { std::ptr::drop_in_place(elems) };
                // A provided block frees itself when `self.block` drops, after this.
                if self.block.is_none() && self.layout.size() != 0 {
                    // SAFETY: the memory was allocated with `layout` (a zero-sized array is
                    // dangling and was never allocated).
                    unsafe { dealloc(self.ptr.as_ptr().cast(), self.layout) };
                }
            }
        }

        #[cfg(target_os = "linux")]
        fn advise_huge_pages(ptr: *mut u8, len: usize) {
            // SAFETY: `ptr..ptr + len` is an allocation this module just made and owns
            // (2 MiB aligned, a multiple of 2 MiB long). MADV_HUGEPAGE is advice only: it
            // never changes the contents or validity of the memory, just how the kernel backs
            // it. A failure (e.g. THP disabled) is ignored on purpose: the table then works on
            // normal pages.
            let _ = unsafe { libc::madvise(ptr.cast(), len, libc::MADV_HUGEPAGE) };
        }

        #[cfg(not(target_os = "linux"))]
        fn advise_huge_pages(_ptr: *mut u8, _len: usize) {}

        #[cfg(test)]
        mod tests {
            use super::{Array, HUGE, HUGE_FROM};
            use std::sync::atomic::{AtomicUsize, Ordering};

            #[test]
            fn large_arrays_are_huge_page_aligned_small_ones_are_not_padded() {
                let big = Array::new(HUGE / 64 + 1, None, || [0u64; 8]);
                assert_eq!(big.as_ptr().addr() % HUGE, 0);
                assert_eq!(big.len(), HUGE / 64 + 1);
                assert_eq!(big.layout.size(), 2 * HUGE);
                let quarter = Array::new(HUGE_FROM / 64, None, || [0u64; 8]);
                assert_eq!(quarter.as_ptr().addr() % HUGE, 0);
                assert_eq!(quarter.layout.size(), HUGE);
                let small = Array::new(100, None, || [1u64; 8]);
                assert_eq!(small.len(), 100);
                assert_eq!(small.layout.size(), 100 * 64);
                assert!(small.iter().all(|w| *w == [1; 8]));
                let none = Array::new(0, None, || 0u8);
                assert!(none.is_empty());
            }

            #[test]
            fn elements_are_made_in_order_and_dropped_once() {
                static DROPS: AtomicUsize = AtomicUsize::new(0);
                struct D(usize);
                impl Drop for D {
                    fn drop(&mut self) {
                        DROPS.fetch_add(1, Ordering::Relaxed);
                    }
                }
                let mut i = 0;
                let a = Array::new(1000, None, || {
                    i += 1;
                    D(i)
                });
                assert!(a.iter().enumerate().all(|(j, d)| d.0 == j + 1));
                drop(a);
                assert_eq!(DROPS.load(Ordering::Relaxed), 1000);
            }
        }
    }

    pub(crate) use array::{Array, padded};

    /// Allocates one of the table's arrays (see [`Array`]).
    pub(crate) fn alloc_slice<T>(
        n: usize,
        provider: Option<&crate::memory::MemoryProvider<'_>>,
        init: impl FnMut() -> T,
    ) -> Array<T> {
        Array::new(n, provider, init)
    }

    /// Bytes allocated for `a`.
    pub(crate) fn allocated_bytes<T>(a: &Array<T>) -> usize {
        a.allocated_bytes()
    }
}

mod memory;
pub mod placement;
mod table;

pub use memory::{MemoryProvider, TableMemory};
pub use placement::PlacementKey;
pub use table::{
    BUCKET_SLOTS, Config, ConfigError, Entry, EntryFlags, Evicted, FlowKey, FlowTable, Hit,
    InsertOutcome, Lookup, MAX_CAPACITY, NewEntry, Occupancy, ProtoClass, SlotRef, SweepStats,
    Tick, Timeouts, tick_age, tick_reached,
};

// Not with shuttle's atomics: they work only inside a shuttle execution. (Two
// attributes, not `all(..)`: clippy's allow-*-in-tests sees a plain `cfg(test)`.)
#[cfg(test)]
#[cfg(not(feature = "shuttle"))]
mod tests;
