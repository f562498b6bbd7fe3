//! Turns between the data path and DPDK's interrupt thread, for the drivers
//! whose connection handling runs on that thread and changes what the data
//! path reads ([`GATED_DRIVERS`]).
//!
//! `net_memif` (DPDK 22.11) serves its control socket from callbacks on
//! EAL's interrupt thread. When the peer goes away (a disconnect message, or
//! the socket just ends), `memif_disconnect` marks the link down, closes the
//! queues' eventfds and unmaps the shared memory that holds the rings and
//! buffers, while a worker may be inside `rte_eth_rx_burst` or
//! `rte_eth_tx_burst` reading them: SIGSEGV in `librte_net_memif`. Nothing
//! the driver offers orders the two. It raises no link-state event (it never
//! calls `rte_eth_dev_callback_process`, nor advertises
//! `RTE_ETH_DEV_INTR_LSC`, so `intr_conf.lsc` is refused), and its link
//! status goes down only microseconds before the unmap, so a check before
//! each burst would narrow the window without closing it.
//!
//! So the two take turns:
//! - A callback of ours on the interrupt thread (on a socket that is always
//!   readable, so it runs every time round the thread's epoll loop) holds
//!   the thread: it opens the gate, sleeps [`HOLD`], closes the gate, waits
//!   until no worker is inside a burst on a gated queue, and returns. The
//!   interrupt thread then runs whatever else is due (the driver's
//!   callbacks among them) with the gate closed, and comes back to ours.
//! - A burst on a gated queue marks the queue's slot busy, then looks at the
//!   gate: open, it polls the driver and clears the slot; closed, it clears
//!   the slot and does not call the driver (RX receives nothing: the frames
//!   wait in the ring; TX takes nothing: the caller drops the burst). Both
//!   sides use sequentially consistent operations (Dekker's handshake):
//!   either the closer sees the slot busy and waits, or the worker sees the
//!   gate closed.
//! - Control operations on a gated port (configure, start, stop, close) run
//!   while our callback holds the interrupt thread ([`exclusive`]), so they
//!   never overlap the driver's own callbacks either.
//!
//! Cost: one atomic exchange per burst on a gated queue; gated queues are
//! skipped for the few microseconds per [`HOLD`] that the interrupt thread
//! takes to go round its loop; other work on the interrupt thread (alarms,
//! other devices' link events, the memif handshake's messages) waits up to
//! [`HOLD`]. Ports of other drivers never touch the gate.

use std::ffi::c_void;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use crate::{Eal, Errno};

/// Drivers whose control path runs on the interrupt thread and unmaps or
/// frees what their RX/TX functions read: their queues go through the gate.
pub const GATED_DRIVERS: &[&str] = &["net_memif"];

/// How long the interrupt thread is held per turn: the most its other work
/// waits.
pub const HOLD: Duration = Duration::from_millis(5);

/// Whether ports of `driver` go through the gate.
pub(crate) fn gated(driver: &str) -> bool {
    GATED_DRIVERS.contains(&driver)
}

/// Why the gate could not be set up.
#[derive(Debug, Clone, thiserror::Error)]
#[error("cannot take turns with DPDK's interrupt thread: {0}")]
pub struct GateError(String);

/// One queue handle's "inside a burst" flag, on a cache line of its own so
/// that workers never share one.
#[derive(Debug, Default)]
#[repr(align(64))]
pub(crate) struct Slot(AtomicBool);

impl Slot {
    /// Marks the queue busy if the gate is open; `false` (and not busy) if
    /// it is closed.
    #[inline]
    pub(crate) fn enter(&self) -> bool {
        // SeqCst store then SeqCst load, against close()'s SeqCst store then
        // SeqCst load of this slot: one of the two sees the other.
        self.0.store(true, Ordering::SeqCst);
        if GATE.open.load(Ordering::SeqCst) {
            true
        } else {
            self.0.store(false, Ordering::Release);
            false
        }
    }

    /// Clears the mark: everything the burst did happens before the
    /// interrupt thread's next callback.
    #[inline]
    pub(crate) fn leave(&self) {
        self.0.store(false, Ordering::Release);
    }
}

struct Gate {
    /// Workers may call gated drivers.
    open: AtomicBool,
    /// Our callback is holding the interrupt thread.
    holding: AtomicBool,
    /// Times the interrupt thread went round (our callback returned).
    turns: AtomicU64,
    /// The slots of every gated port that exists.
    ports: Mutex<Vec<Arc<[Slot]>>>,
    /// Held by a control operation on a gated port: our callback does not
    /// leave the interrupt thread meanwhile.
    control: Mutex<()>,
}

static GATE: Gate = Gate {
    open: AtomicBool::new(false),
    holding: AtomicBool::new(false),
    turns: AtomicU64::new(0),
    ports: Mutex::new(Vec::new()),
    control: Mutex::new(()),
};

/// A lock that a panic elsewhere cannot make unusable (the data under
/// these locks stays consistent whatever panicked).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Our callback on the interrupt thread: one turn.
extern "C" fn hold(_arg: *mut c_void) {
    GATE.holding.store(true, Ordering::SeqCst);
    // Everything the driver's callbacks did before this one happens before
    // a worker that sees the gate open calls the driver.
    GATE.open.store(true, Ordering::SeqCst);
    std::thread::sleep(HOLD);
    GATE.open.store(false, Ordering::SeqCst);
    for slots in lock(&GATE.ports).iter() {
        for slot in slots.iter() {
            let mut spins = 0u32;
            while slot.0.load(Ordering::SeqCst) {
                // A burst takes microseconds, unless its thread was
                // preempted: then let it run.
                if spins < 1000 {
                    std::hint::spin_loop();
                    spins += 1;
                } else {
                    std::thread::yield_now();
                }
            }
        }
    }
    // Not while a control operation runs (exclusive()).
    let guard = lock(&GATE.control);
    GATE.holding.store(false, Ordering::SeqCst);
    GATE.turns.fetch_add(1, Ordering::Relaxed);
    drop(guard);
}

/// Registers our callback on the interrupt thread, once per process.
fn start(_eal: &Eal) -> Result<(), GateError> {
    static STARTED: OnceLock<Result<(), GateError>> = OnceLock::new();
    STARTED
        .get_or_init(|| {
            let err = |what: &str, e: &dyn std::fmt::Display| GateError(format!("{what}: {e}"));
            // One end with a byte never read: always readable, so the
            // interrupt thread's epoll returns it every time round.
            let (mut writer, reader) =
                UnixStream::pair().map_err(|e| err("socket pair", &e))?;
            std::io::Write::write_all(&mut writer, &[1])
                .map_err(|e| err("writing to the socket pair", &e))?;
            let flags = dpdk_sys::SPW_INTR_INSTANCE_F_PRIVATE;
            // SAFETY: EAL is initialised; allocates a handle in process memory.
            let handle = unsafe { dpdk_sys::rte_intr_instance_alloc(flags) };
            if handle.is_null() {
                return Err(err("rte_intr_instance_alloc", &Errno::last()));
            }
            // SAFETY: handle is a valid, fresh interrupt handle; the fd stays
            // open for the process's lifetime (the sockets are leaked below).
            let ret = unsafe { dpdk_sys::rte_intr_fd_set(handle, reader.as_raw_fd()) };
            if ret < 0 {
                return Err(err("rte_intr_fd_set", &Errno::last()));
            }
            let ext = dpdk_sys::rte_intr_handle_type::RTE_INTR_HANDLE_EXT;
            // SAFETY: as above; EXT: EAL reads nothing from the fd and just
            // calls the callback.
            let ret = unsafe { dpdk_sys::rte_intr_type_set(handle, ext) };
            if ret < 0 {
                return Err(err("rte_intr_type_set", &Errno::last()));
            }
            // SAFETY: handle is valid and never freed (the registration is
            // for the process's lifetime); hold() is an extern "C" fn that
            // ignores its argument and does not unwind (sleep, atomics and
            // poison-tolerant locks only).
            let ret = unsafe {
                dpdk_sys::rte_intr_callback_register(handle, Some(hold), std::ptr::null_mut())
            };
            if ret < 0 {
                return Err(err("rte_intr_callback_register", &Errno::from_ret(ret)));
            }
            std::mem::forget(writer);
            std::mem::forget(reader);
            log::debug!(
                "taking turns with DPDK's interrupt thread every {HOLD:?} for {GATED_DRIVERS:?} ports"
            );
            Ok(())
        })
        .clone()
}

/// The slots of one gated port; removed from the gate on drop.
#[derive(Debug)]
pub(crate) struct PortSlots(Arc<[Slot]>);

impl PortSlots {
    /// `n` slots for a port, the interrupt thread's callback started first.
    pub(crate) fn new(eal: &Eal, n: usize) -> Result<PortSlots, GateError> {
        start(eal)?;
        let slots: Arc<[Slot]> = (0..n).map(|_| Slot::default()).collect();
        lock(&GATE.ports).push(slots.clone());
        Ok(PortSlots(slots))
    }

    pub(crate) fn get(&self, i: usize) -> Option<&Slot> {
        self.0.get(i)
    }
}

impl Drop for PortSlots {
    fn drop(&mut self) {
        lock(&GATE.ports).retain(|s| !Arc::ptr_eq(s, &self.0));
    }
}

/// Runs `f` while our callback holds the interrupt thread, so that no
/// driver callback runs meanwhile (waits for the thread's next turn: at
/// most about [`HOLD`]). Only once [`PortSlots::new`] has started the gate.
pub(crate) fn exclusive<T>(f: impl FnOnce() -> T) -> T {
    loop {
        let guard = lock(&GATE.control);
        // Under the lock: hold() cannot pass its own lock() and return.
        if GATE.holding.load(Ordering::SeqCst) {
            let out = f();
            drop(guard);
            return out;
        }
        drop(guard);
        std::thread::sleep(Duration::from_micros(100));
    }
}

/// How many times DPDK's interrupt thread went round since the gate started
/// (0 while no gated port was ever configured).
pub fn interrupt_thread_turns() -> u64 {
    GATE.turns.load(Ordering::Relaxed)
}
