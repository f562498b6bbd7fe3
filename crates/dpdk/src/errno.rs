//! DPDK error numbers, shown with DPDK's own text.

use std::ffi::CStr;
use std::fmt;

/// A positive errno value reported by DPDK (either a negative return value
/// negated, or `rte_errno`).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Errno(pub i32);

impl Errno {
    /// From a DPDK return value that is `-errno` on failure.
    pub(crate) fn from_ret(ret: i32) -> Self {
        Errno(ret.saturating_neg())
    }

    /// The calling thread's `rte_errno`.
    pub(crate) fn last() -> Self {
        // SAFETY: reads a thread-local integer; no preconditions.
        Errno(unsafe { dpdk_sys::rte_errno() })
    }

    /// DPDK's message for this error (`rte_strerror`).
    pub fn message(self) -> String {
        // SAFETY: rte_strerror accepts any integer and returns a pointer to a
        // NUL-terminated string in static or thread-local storage, valid until
        // the next call on this thread; we copy it out immediately.
        let ptr = unsafe { dpdk_sys::rte_strerror(self.0) };
        if ptr.is_null() {
            return format!("error {}", self.0);
        }
        // SAFETY: non-null and NUL-terminated (see above); copied before return.
        unsafe { CStr::from_ptr(ptr) }
            .to_string_lossy()
            .into_owned()
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (errno {})", self.message(), self.0)
    }
}

impl fmt::Debug for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Errno({}: {})", self.0, self.message())
    }
}
