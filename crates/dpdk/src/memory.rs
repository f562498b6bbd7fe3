//! Blocks of DPDK's own heap (`rte_malloc`), which lies in the EAL's hugepages: for the
//! flow table, so that it is on huge pages whatever the kernel's transparent-huge-page
//! policy (a lookup touches two random lines of a table of up to gigabytes; with 4 KiB
//! pages each also misses the TLB).

use std::ptr::NonNull;

use crate::Eal;

/// An owned block of DPDK heap memory, freed on drop.
#[derive(Debug)]
pub struct HugeBlock {
    ptr: NonNull<u8>,
    len: usize,
}

impl HugeBlock {
    /// `len` bytes aligned to `align` (a power of two) from the EAL's heap, preferring the
    /// calling thread's NUMA socket. `None` when the EAL runs without hugepages
    /// (`--no-huge`: its heap is then ordinary pages, no better than the process heap) or
    /// the heap cannot give that much (the caller falls back to its own memory).
    pub fn alloc(_eal: &Eal, len: usize, align: usize) -> Option<HugeBlock> {
        // SAFETY: EAL is initialised (witnessed by `_eal`); a query without side effects.
        if unsafe { dpdk_sys::rte_eal_has_hugepages() } == 0 {
            return None;
        }
        if len == 0 || !align.is_power_of_two() {
            return None;
        }
        let align = u32::try_from(align).ok()?;
        // SAFETY: EAL is initialised; a NULL type name is allowed (it is only a debug
        // label); `align` is a power of two; SOCKET_ID_ANY lets DPDK pick the socket.
        let raw = unsafe {
            dpdk_sys::rte_malloc_socket(std::ptr::null(), len, align, dpdk_sys::SOCKET_ID_ANY)
        };
        NonNull::new(raw.cast::<u8>()).map(|ptr| HugeBlock { ptr, len })
    }
}

impl Drop for HugeBlock {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from rte_malloc_socket and is freed once, here. The EAL is
        // never cleaned up while the process runs (`Eal` is a process-wide static).
        unsafe { dpdk_sys::rte_free(self.ptr.as_ptr().cast()) };
    }
}

// SAFETY: the block is plain memory this value owns alone; DPDK's heap may be freed from
// any thread.
unsafe impl Send for HugeBlock {}
// SAFETY: `&HugeBlock` only hands out the pointer and length; whoever writes through the
// pointer (the flow table) synchronises its own accesses.
unsafe impl Sync for HugeBlock {}

// SAFETY: `ptr` is fixed for the value's life and points to `len` bytes of DPDK heap that
// this value owns alone until its drop frees them.
unsafe impl flowtable::TableMemory for HugeBlock {
    fn ptr(&self) -> NonNull<u8> {
        self.ptr
    }

    fn len(&self) -> usize {
        self.len
    }

    fn describe(&self) -> &'static str {
        "DPDK hugepages"
    }
}
