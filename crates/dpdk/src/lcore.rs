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

/// Whether `lcore` is one of EAL's worker lcores (enabled by `-l`, `-c` or
/// `--lcores`, and not the main one): a function can be launched on it.
pub fn is_worker_lcore(_eal: &Eal, lcore: u32) -> bool {
    // SAFETY: EAL is initialised; reads its configuration.
    let enabled = unsafe { dpdk_sys::rte_lcore_is_enabled(lcore) } != 0;
    // SAFETY: as above.
    let main = unsafe { dpdk_sys::rte_get_main_lcore() };
    enabled && main != lcore
}

/// Runs `f` with a [`LcoreScope`] that launches closures on EAL's worker
/// lcores (EAL's own threads, pinned by EAL: DPDK counts them as its
/// lcores, which keeps multi-process attachment possible, unlike a thread
/// registered with [`thread_register`]); returns once every closure
/// launched has returned, as `std::thread::scope` does.
///
/// # Panics
/// After waiting for all of them, if a launched closure panicked.
pub fn lcore_scope<'env, R>(eal: &'env Eal, f: impl FnOnce(&LcoreScope<'env>) -> R) -> R {
    let scope = LcoreScope {
        _eal: eal,
        launched: std::sync::Mutex::new(Vec::new()),
        _env: std::marker::PhantomData,
    };
    let r = f(&scope);
    let failed = scope.wait_all();
    assert!(
        failed.is_empty(),
        "closures launched on lcores {failed:?} panicked"
    );
    r
}

/// Launches closures on EAL's worker lcores; see [`lcore_scope`].
pub struct LcoreScope<'env> {
    _eal: &'env Eal,
    launched: std::sync::Mutex<Vec<u32>>,
    /// Invariant over 'env, as std's scope: closures borrow from it.
    _env: std::marker::PhantomData<&'env mut &'env ()>,
}

/// A closure waiting to run on an lcore.
type Job<'env> = Box<dyn FnOnce() + Send + 'env>;

/// Why a closure could not be launched.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// not a worker lcore of EAL's
    #[error("lcore {0} is not one of EAL's worker lcores (-l, -c or --lcores)")]
    NotWorker(u32),
    /// rte_eal_remote_launch refused (the lcore is busy)
    #[error("lcore {lcore}: {errno}")]
    Launch {
        /// The lcore.
        lcore: u32,
        /// Why.
        errno: Errno,
    },
}

impl<'env> LcoreScope<'env> {
    /// Runs `f` on worker lcore `lcore`.
    pub fn spawn<F: FnOnce() + Send + 'env>(&self, lcore: u32, f: F) -> Result<(), LaunchError> {
        if !is_worker_lcore(self._eal, lcore) {
            return Err(LaunchError::NotWorker(lcore));
        }
        let job: Box<Job<'env>> = Box::new(Box::new(f));
        let raw = Box::into_raw(job).cast::<std::ffi::c_void>();
        // SAFETY: `raw` is a leaked Box<Job> that `run_job` takes back
        // exactly once, on the lcore; the borrows it holds outlive the
        // call because `lcore_scope` waits for every launched lcore before
        // 'env can end. A refused launch never runs it, so it is reclaimed
        // here.
        let ret = unsafe { dpdk_sys::rte_eal_remote_launch(Some(run_job), raw, lcore) };
        if ret < 0 {
            // SAFETY: not launched: this is the only owner of `raw`.
            drop(unsafe { Box::from_raw(raw.cast::<Job<'env>>()) });
            return Err(LaunchError::Launch {
                lcore,
                errno: Errno::from_ret(ret),
            });
        }
        self.launched
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(lcore);
        Ok(())
    }

    /// Waits for every launched lcore; the ones whose closure panicked.
    fn wait_all(&self) -> Vec<u32> {
        let launched = std::mem::take(
            &mut *self
                .launched
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        launched
            .into_iter()
            // SAFETY: EAL is initialised and each lcore was launched by
            // `spawn`; waiting reads its state until it finishes.
            .filter(|&l| unsafe { dpdk_sys::rte_eal_wait_lcore(l) } != 0)
            .collect()
    }
}

impl Drop for LcoreScope<'_> {
    /// Also when `f` unwinds: nothing launched may outlive what it borrows.
    fn drop(&mut self) {
        let _ = self.wait_all();
    }
}

/// Runs a [`Job`] on an lcore: 0, or -1 when it panicked.
///
/// # Safety
/// `arg` is a `Box<Job>` leaked by [`LcoreScope::spawn`], taken back once.
unsafe extern "C" fn run_job(arg: *mut std::ffi::c_void) -> std::ffi::c_int {
    // SAFETY: see the function's contract.
    let job = unsafe { Box::from_raw(arg.cast::<Job<'static>>()) };
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(job)) {
        Ok(()) => 0,
        Err(_) => -1,
    }
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
