//! lcore identity and the time-stamp counter.

use crate::{Eal, Errno};

/// The calling thread's DPDK lcore id, or `None` for a thread DPDK does not
/// know (call [`thread_register`] from worker threads you start yourself, so
/// that mempool per-lcore caches work for them).
#[inline]
pub fn lcore_id() -> Option<u32> {
    // SAFETY: reads the calling thread's per-lcore variable; no preconditions.
    let id = unsafe { dpdk_sys::rte_lcore_id() };
    (id != dpdk_sys::LCORE_ID_ANY).then_some(id)
}

/// `SOCKET_ID_ANY` (-1) as the unsigned `rte_socket_id` returns it.
#[allow(clippy::cast_sign_loss, reason = "C's (unsigned)SOCKET_ID_ANY")]
const ANY_SOCKET: u32 = dpdk_sys::SOCKET_ID_ANY as u32;

/// NUMA socket of the calling thread (0 where DPDK cannot tell).
pub fn socket_id(_eal: &Eal) -> u32 {
    // SAFETY: EAL is initialised (witnessed by `_eal`); reads per-thread state.
    let id = unsafe { dpdk_sys::rte_socket_id() };
    if id == ANY_SOCKET { 0 } else { id }
}

/// Registers the calling (non-EAL) thread with DPDK and returns the lcore id
/// it was given. Idempotent for a thread that already has one.
pub fn thread_register(_eal: &Eal) -> Result<u32, Errno> {
    if let Some(id) = lcore_id() {
        return Ok(id);
    }
    // SAFETY: EAL is initialised; registering only sets this thread's
    // per-lcore variables.
    let ret = unsafe { dpdk_sys::rte_thread_register() };
    if ret < 0 {
        return Err(Errno::last());
    }
    lcore_id().ok_or_else(Errno::last)
}

/// Current value of the CPU time-stamp counter (what `rte_rdtsc` reads; that
/// static inline function would be a call through the bindings' wrapper).
#[inline(always)]
pub fn tsc() -> u64 {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: RDTSC is part of the x86_64 baseline; it reads the counter and
    // touches no memory.
    unsafe {
        std::arch::x86_64::_rdtsc()
    }
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: reads the TSC; no memory is touched.
    unsafe {
        dpdk_sys::rte_rdtsc()
    }
}

/// TSC frequency in Hz as measured by EAL at init.
pub fn tsc_hz(_eal: &Eal) -> u64 {
    // SAFETY: EAL is initialised (it calibrates the TSC during init).
    unsafe { dpdk_sys::rte_get_tsc_hz() }
}
