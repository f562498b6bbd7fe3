//! EAL initialisation: once per process.

use std::ffi::{CString, c_char, c_int};
use std::sync::atomic::{AtomicU8, Ordering};

use crate::Errno;

/// Proof that the DPDK Environment Abstraction Layer is initialised in this
/// process. Obtained once from [`Eal::init`]; lives for the rest of the process.
#[derive(Debug)]
pub struct Eal {
    args: Vec<String>,
}

/// Why EAL initialisation failed.
#[derive(Debug, thiserror::Error)]
pub enum EalError {
    /// EAL is already initialised in this process (DPDK allows one init per process)
    #[error("DPDK EAL is already initialised in this process (rte_eal_init runs once per process)")]
    AlreadyInitialized,
    /// an earlier EAL initialisation in this process failed; DPDK cannot retry it
    #[error("an earlier DPDK EAL initialisation in this process failed; it cannot be retried")]
    EarlierInitFailed,
    /// an EAL argument contains a NUL byte
    #[error("EAL argument {0:?} contains a NUL byte")]
    NulInArgument(String),
    /// rte_eal_init rejected the arguments or could not set up the environment
    #[error("DPDK EAL initialisation failed with arguments {args:?}: {errno}")]
    InitFailed {
        /// The arguments given (without argv[0]).
        args: Vec<String>,
        /// `rte_errno` after the failure.
        errno: Errno,
    },
}

const UNINIT: u8 = 0;
const RUNNING: u8 = 1;
const READY: u8 = 2;
const FAILED: u8 = 3;

static STATE: AtomicU8 = AtomicU8::new(UNINIT);
static EAL: std::sync::OnceLock<Eal> = std::sync::OnceLock::new();

impl Eal {
    /// Initialises EAL with `args` (EAL's own command line, without a program
    /// name: e.g. `["-l", "0", "--in-memory", "--vdev=net_ring0"]`).
    ///
    /// Succeeds at most once per process; later calls return
    /// [`EalError::AlreadyInitialized`]. The calling thread becomes EAL's main
    /// lcore (EAL pins it to that lcore's CPU set).
    pub fn init<I, S>(args: I) -> Result<&'static Eal, EalError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let args: Vec<String> = args.into_iter().map(Into::into).collect();
        let mut c_args = Vec::with_capacity(args.len() + 1);
        c_args.push(c"spillway".to_owned());
        for a in &args {
            c_args.push(CString::new(a.as_str()).map_err(|_| EalError::NulInArgument(a.clone()))?);
        }

        match STATE.compare_exchange(UNINIT, RUNNING, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => {}
            Err(FAILED) => return Err(EalError::EarlierInitFailed),
            Err(_) => return Err(EalError::AlreadyInitialized),
        }

        // EAL keeps pointers into argv (getopt permutes it in place and some
        // drivers keep devargs strings), so argv and its strings must outlive
        // the process: leak them. This happens once per process.
        let argv: &'static mut [*mut c_char] = Vec::leak(
            c_args
                .into_iter()
                .map(CString::into_raw)
                .chain(std::iter::once(std::ptr::null_mut()))
                .collect(),
        );
        let argc = c_int::try_from(argv.len() - 1).unwrap_or(c_int::MAX);

        // SAFETY: argv holds argc valid, NUL-terminated, writable C strings
        // followed by a NULL, all leaked so they stay valid for the process's
        // lifetime; the STATE guard ensures this is the only call to
        // rte_eal_init in the process.
        let ret = unsafe { dpdk_sys::rte_eal_init(argc, argv.as_mut_ptr()) };
        if ret < 0 {
            let errno = Errno::last();
            STATE.store(FAILED, Ordering::Release);
            return Err(EalError::InitFailed { args, errno });
        }
        let eal = EAL.get_or_init(|| Eal { args });
        STATE.store(READY, Ordering::Release);
        Ok(eal)
    }

    /// The EAL if it has been initialised in this process.
    pub fn get() -> Option<&'static Eal> {
        EAL.get()
    }

    /// The arguments EAL was initialised with.
    pub fn args(&self) -> &[String] {
        &self.args
    }

    /// Whether this is DPDK's primary process (the one that owns the
    /// ports; the capture and inspection tools attach as secondaries).
    pub fn is_primary(&self) -> bool {
        // SAFETY: EAL is initialised (self proves it); the call reads its
        // configuration.
        let t = unsafe { dpdk_sys::rte_eal_process_type() };
        t == dpdk_sys::rte_proc_type_t::RTE_PROC_PRIMARY
    }

    /// Whether EAL runs without its multi-process channel and shared
    /// configuration (`--in-memory`, `--no-shconf`): no secondary process
    /// can attach then.
    pub fn without_multi_process(&self) -> bool {
        self.args
            .iter()
            .any(|a| a == "--in-memory" || a == "--no-shconf")
    }

    /// The `--file-prefix` a secondary process must give to attach (DPDK's
    /// default `rte` when none was given).
    pub fn file_prefix(&self) -> &str {
        let mut prefix = "rte";
        let mut it = self.args.iter();
        while let Some(a) = it.next() {
            if let Some(p) = a.strip_prefix("--file-prefix=") {
                prefix = p;
            } else if a == "--file-prefix"
                && let Some(p) = it.next()
            {
                prefix = p;
            }
        }
        prefix
    }
}
