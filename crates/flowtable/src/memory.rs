//! Where the table's array lives when not on the heap: a block from another
//! allocator, such as DPDK's hugepage memory (the daemon's choice when the
//! EAL has hugepages), so that the table is on huge pages whether or not the
//! kernel grants transparent ones.

use std::ptr::NonNull;

/// A block of memory the table's array is built in, owned by the table and
/// freed when the implementor is dropped.
///
/// # Safety
///
/// `ptr()` must return the same pointer for the life of the value, to `len()`
/// bytes that are valid for reads and writes, owned by this value alone (no
/// other code reads or writes them) and stay allocated until it is dropped.
/// The table checks size and alignment itself; the contents may be anything.
#[allow(
    unsafe_code,
    reason = "the contract the table's unsafe array relies on"
)]
pub unsafe trait TableMemory: Send + Sync {
    /// Start of the block.
    fn ptr(&self) -> NonNull<u8>;
    /// Length of the block in bytes.
    fn len(&self) -> usize;
    /// Whether the block is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// What the block is, for the operator ("DPDK hugepages").
    fn describe(&self) -> &'static str;
}

/// Gives a block of at least `bytes` bytes aligned to `align`, or `None` to
/// use the heap. Asked only for arrays of 512 KiB or more.
pub type MemoryProvider<'a> = dyn Fn(usize, usize) -> Option<Box<dyn TableMemory>> + 'a;
