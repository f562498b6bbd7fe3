//! DPDK's own capture tools (`dpdk-dumpcap`, `dpdk-pdump`) against this
//! process.
//!
//! They run as DPDK secondary processes of the same `--file-prefix` and ask
//! the primary, over EAL's multi-process channel, to copy the packets of a
//! port's queues to them. The primary's side is `rte_pdump_init`: it
//! registers that request's handler, nothing more. While no tool is
//! attached nothing runs on the workers' path: the copy is an RX/TX
//! callback of the queue, installed only for a capture's duration, and
//! `rte_eth_rx_burst` checks for callbacks whether or not this was called.

use crate::{Eal, Errno};

/// Why DPDK's capture tools cannot attach to this process.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// this process is not DPDK's primary process
    #[error("this process is a DPDK secondary process: only the primary serves captures")]
    NotPrimary,
    /// EAL runs without its multi-process channel
    #[error(
        "EAL runs without its multi-process channel (--in-memory or --no-shconf among the EAL \
         arguments): DPDK's capture and inspection tools cannot attach; use --file-prefix=NAME \
         instead"
    )]
    NoMultiProcess,
    /// rte_pdump_init failed otherwise
    #[error("rte_pdump_init failed: {0}")]
    Init(Errno),
}

/// The packet-capture server of this primary process: DPDK's capture
/// tools can attach while it lives. Dropping it stops serving them.
#[derive(Debug)]
pub struct CaptureServer {
    _eal: &'static Eal,
}

impl CaptureServer {
    /// Lets `dpdk-dumpcap` and `dpdk-pdump` capture this process's ports.
    pub fn start(eal: &'static Eal) -> Result<CaptureServer, CaptureError> {
        if !eal.is_primary() {
            return Err(CaptureError::NotPrimary);
        }
        if eal.without_multi_process() {
            return Err(CaptureError::NoMultiProcess);
        }
        // SAFETY: EAL is initialised (the &Eal proves it) and this is the
        // primary process; rte_pdump_init only registers a multi-process
        // action and allocates its statistics memzone.
        let ret = unsafe { dpdk_sys::rte_pdump_init() };
        if ret < 0 {
            return Err(CaptureError::Init(Errno::last()));
        }
        Ok(CaptureServer { _eal: eal })
    }
}

impl Drop for CaptureServer {
    fn drop(&mut self) {
        // SAFETY: rte_pdump_init succeeded in `start`; uninit unregisters
        // the action it registered.
        unsafe {
            dpdk_sys::rte_pdump_uninit();
        }
    }
}
