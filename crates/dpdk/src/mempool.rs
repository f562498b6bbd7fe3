//! Packet-buffer pools.

use std::ffi::CString;
use std::ptr::NonNull;
use std::sync::Arc;

use crate::{Eal, Errno, Mbuf};

/// How to size a packet-buffer pool.
#[derive(Debug, Clone)]
pub struct MempoolConfig {
    /// Pool name; unique per process (DPDK limits it to 25 bytes).
    pub name: String,
    /// Number of mbufs. DPDK recommends 2^k - 1.
    pub size: u32,
    /// Per-lcore cache size (0 disables the cache; at most 512).
    pub cache_size: u32,
    /// Bytes per buffer including headroom (`RTE_MBUF_DEFAULT_BUF_SIZE` fits
    /// a 1500-byte MTU frame behind the default 128-byte headroom).
    pub data_room: u16,
    /// NUMA socket to allocate on; `None` for any.
    pub socket: Option<u32>,
}

impl MempoolConfig {
    /// A pool of `size` default-sized mbufs with a 256-entry per-lcore cache.
    pub fn new(name: impl Into<String>, size: u32) -> Self {
        MempoolConfig {
            name: name.into(),
            size,
            cache_size: 256.min(size / 4),
            data_room: u16::try_from(dpdk_sys::RTE_MBUF_DEFAULT_BUF_SIZE).unwrap_or(u16::MAX),
            socket: None,
        }
    }
}

/// Why a pool could not be created.
#[derive(Debug, thiserror::Error)]
pub enum MempoolError {
    /// the pool name contains a NUL byte
    #[error("mempool name {0:?} contains a NUL byte")]
    NulInName(String),
    /// rte_pktmbuf_pool_create failed
    #[error("cannot create mempool {name:?} of {size} mbufs: {errno}")]
    Create {
        /// Pool name.
        name: String,
        /// Requested number of mbufs.
        size: u32,
        /// `rte_errno` after the failure.
        errno: Errno,
    },
}

/// A shared handle to a DPDK packet-buffer pool.
///
/// Cloning is cheap. The pool is freed when the last handle is dropped, but
/// only if every mbuf has come back to it; otherwise it is deliberately leaked
/// (an outstanding mbuf still points into it).
#[derive(Clone)]
pub struct Mempool {
    inner: Arc<PoolInner>,
}

struct PoolInner {
    ptr: NonNull<dpdk_sys::rte_mempool>,
    name: String,
}

// SAFETY: a DPDK packet mempool (default ring ops, multi-producer/multi-
// consumer) is designed to be used from any thread concurrently; the handle
// only stores its address.
unsafe impl Send for PoolInner {}
// SAFETY: as above — every operation we expose is thread-safe in DPDK.
unsafe impl Sync for PoolInner {}

impl Mempool {
    /// Creates a packet-buffer pool.
    pub fn new(_eal: &Eal, cfg: &MempoolConfig) -> Result<Mempool, MempoolError> {
        let cname = CString::new(cfg.name.as_str())
            .map_err(|_| MempoolError::NulInName(cfg.name.clone()))?;
        let socket = cfg
            .socket
            .and_then(|s| i32::try_from(s).ok())
            .unwrap_or(dpdk_sys::SOCKET_ID_ANY);
        // SAFETY: EAL is initialised (witnessed by `_eal`); `cname` is a valid C
        // string that DPDK copies; the remaining arguments are plain integers.
        let ptr = unsafe {
            dpdk_sys::rte_pktmbuf_pool_create(
                cname.as_ptr(),
                cfg.size,
                cfg.cache_size,
                0,
                cfg.data_room,
                socket,
            )
        };
        let ptr = NonNull::new(ptr).ok_or_else(|| MempoolError::Create {
            name: cfg.name.clone(),
            size: cfg.size,
            errno: Errno::last(),
        })?;
        Ok(Mempool {
            inner: Arc::new(PoolInner {
                ptr,
                name: cfg.name.clone(),
            }),
        })
    }

    /// Pool name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Takes one mbuf from the pool (empty, default headroom), or `None` when
    /// the pool is exhausted.
    #[inline]
    pub fn alloc(&self) -> Option<Mbuf> {
        // SAFETY: the pool pointer is valid for as long as this handle lives.
        let m = unsafe { dpdk_sys::rte_pktmbuf_alloc(self.inner.ptr.as_ptr()) };
        // SAFETY: a non-null result is a freshly allocated mbuf that nobody
        // else references; ownership passes to the Mbuf.
        NonNull::new(m).map(|m| unsafe { Mbuf::from_raw(m) })
    }

    /// Mbufs currently taken from the pool (by us, by drivers, or sitting in
    /// device rings). Back to its starting value when nothing leaked.
    pub fn in_use(&self) -> u32 {
        // SAFETY: the pool pointer is valid; the call only reads counters.
        unsafe { dpdk_sys::rte_mempool_in_use_count(self.inner.ptr.as_ptr()) }
    }

    /// Mbufs available in the pool (including per-lcore caches).
    pub fn available(&self) -> u32 {
        // SAFETY: the pool pointer is valid; the call only reads counters.
        unsafe { dpdk_sys::rte_mempool_avail_count(self.inner.ptr.as_ptr()) }
    }

    /// Bytes each mbuf takes in the pool's memory: DPDK's object header, the
    /// `rte_mbuf` with its data room, and any trailer (what
    /// `config::memory::MBUF_BYTES` assumes).
    pub fn object_bytes(&self) -> usize {
        let p = self.inner.ptr.as_ptr();
        // SAFETY: the pool pointer is valid for as long as this handle lives;
        // the sizes are set when the pool is created and never change, and
        // each is read by value without referencing the whole struct.
        let header = unsafe { (*p).header_size };
        // SAFETY: as above.
        let element = unsafe { (*p).elt_size };
        // SAFETY: as above.
        let trailer = unsafe { (*p).trailer_size };
        header as usize + element as usize + trailer as usize
    }

    pub(crate) fn as_ptr(&self) -> *mut dpdk_sys::rte_mempool {
        self.inner.ptr.as_ptr()
    }
}

impl std::fmt::Debug for Mempool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mempool")
            .field("name", &self.inner.name)
            .field("in_use", &self.in_use())
            .field("available", &self.available())
            .finish()
    }
}

impl Drop for PoolInner {
    fn drop(&mut self) {
        // SAFETY: the pointer is valid until freed below; reading counters.
        let in_use = unsafe { dpdk_sys::rte_mempool_in_use_count(self.ptr.as_ptr()) };
        if in_use == 0 {
            // SAFETY: this is the last handle and no mbuf from the pool is
            // outstanding, so nothing can reference the pool after this.
            unsafe { dpdk_sys::rte_mempool_free(self.ptr.as_ptr()) };
        } else {
            log::warn!(
                "mempool {:?} dropped with {in_use} mbufs outstanding; leaking it",
                self.name
            );
        }
    }
}
