//! The safe layer over DPDK, and (with `dpdk-sys`) the only home of `unsafe`
//! in Spillway.
//!
//! Design:
//! - [`Eal`] is a process-wide token: every other constructor takes `&Eal`, so
//!   nothing can touch DPDK before `rte_eal_init` has succeeded.
//! - [`Mbuf`] owns one `rte_mbuf` and frees it on drop; [`MbufBurst`] is a
//!   fixed array of them (no heap per burst) whose layout is exactly the
//!   `struct rte_mbuf *[]` that `rte_eth_rx_burst`/`rte_eth_tx_burst` take.
//!   Ownership passes to the driver only for the mbufs `tx_burst` reports as
//!   sent; everything else stays owned by Rust and is freed by `Drop`, so no
//!   code path can leak or double-free an mbuf.
//! - [`Port`] configures and starts an ethdev; its [`RxQueue`]/[`TxQueue`]
//!   handles borrow it, so a port cannot be stopped or closed while a worker
//!   still polls one of its queues.
//! - The queues of a driver that tears its rings down on DPDK's interrupt
//!   thread (`net_memif`, when its peer goes away) take turns with that
//!   thread ([`gate`]): no burst runs while the driver's callbacks do.
//! - [`DpdkIo`] presents one worker's queues as the data plane's packet I/O
//!   (`wire::burst::PacketIo`).
//! - Errors are one enum per kind of operation, decoded from DPDK's negative
//!   errno / `rte_errno` with `rte_strerror`'s text.

// The safe layer over DPDK's C API: `unsafe` is this crate's job (each block
// says why it holds in a `// SAFETY:` comment).
#![allow(unsafe_code)]

mod capture;
mod eal;
mod errno;
pub mod gate;
mod io;
mod lcore;
mod mbuf;
mod memory;
mod mempool;
mod port;
mod telemetry;

pub use capture::{CaptureError, CaptureServer};
pub use eal::{Eal, EalError};
pub use errno::Errno;
pub use io::DpdkIo;
pub use lcore::{
    LaunchError, LcoreScope, is_worker_lcore, lcore_id, lcore_scope, socket_id, thread_register,
    tsc, tsc_hz,
};
pub use mbuf::{Mbuf, MbufBurst, MbufError};
pub use memory::HugeBlock;
pub use mempool::{Mempool, MempoolConfig, MempoolError};
pub use port::{
    Link, Port, PortConfig, PortError, PortId, PortStats, RxQueue, TxQueue, create_vdev,
};
pub use telemetry::{TelValue, TelemetryError, register_telemetry};

/// Version string of the DPDK library this process is linked against, e.g.
/// `"DPDK 22.11.11"`. Usable before EAL initialisation.
pub fn version() -> String {
    // SAFETY: rte_version returns a pointer to a static NUL-terminated string
    // owned by the library; it is never freed or mutated.
    let ptr = unsafe { dpdk_sys::rte_version() };
    if ptr.is_null() {
        return String::from("DPDK (unknown version)");
    }
    // SAFETY: non-null, NUL-terminated, 'static (see above).
    unsafe { std::ffi::CStr::from_ptr(ptr) }
        .to_string_lossy()
        .into_owned()
}

/// Default headroom DPDK reserves in front of packet data in each mbuf
/// (`RTE_PKTMBUF_HEADROOM`): the space encapsulation prepends into.
pub const MBUF_HEADROOM: usize = dpdk_sys::RTE_PKTMBUF_HEADROOM as usize;
