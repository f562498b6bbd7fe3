//! Ethernet ports, their queues and virtual devices.

use std::ffi::{CStr, CString, c_char};
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::gate::{self, GateError, PortSlots, Slot};
use crate::{Eal, Errno, MbufBurst, Mempool};

/// A DPDK ethdev port number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PortId(pub u16);

impl std::fmt::Display for PortId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "port {}", self.0)
    }
}

/// Why a port operation failed. Each variant names the operation.
#[derive(Debug, thiserror::Error)]
pub enum PortError {
    /// no ethdev has this name
    #[error("no DPDK port named {name:?} (available: {available})")]
    NotFound {
        /// The name looked up.
        name: String,
        /// Names of the ports that do exist.
        available: String,
    },
    /// a name or argument string contains a NUL byte
    #[error("{0:?} contains a NUL byte")]
    Nul(String),
    /// creating a virtual device failed
    #[error("cannot create virtual device {name:?} with args {args:?}: {errno}")]
    VdevCreate {
        /// Device name, e.g. `net_ring0`.
        name: String,
        /// Device arguments.
        args: String,
        /// The error DPDK returned.
        errno: Errno,
    },
    /// rte_eth_dev_info_get failed
    #[error("{port}: cannot read device info: {errno}")]
    Info {
        /// The port.
        port: PortId,
        /// The error DPDK returned.
        errno: Errno,
    },
    /// more queues were asked for than the device has
    #[error("{port} ({driver}): {what} queues requested: {requested}, device maximum: {max}")]
    TooManyQueues {
        /// The port.
        port: PortId,
        /// Driver name.
        driver: String,
        /// "RX" or "TX".
        what: &'static str,
        /// Requested count.
        requested: u16,
        /// Device maximum.
        max: u16,
    },
    /// the port is already configured: another `Port` owns it
    #[error(
        "{port} ({name}) is already configured in this process: one Port owns a device until it is dropped"
    )]
    InUse {
        /// The port.
        port: PortId,
        /// Its device name.
        name: String,
    },
    /// rte_eth_dev_configure failed
    #[error("{port}: configure failed: {errno}")]
    Configure {
        /// The port.
        port: PortId,
        /// The error DPDK returned.
        errno: Errno,
    },
    /// a queue could not be set up
    #[error("{port}: {what} queue {queue} setup failed: {errno}")]
    QueueSetup {
        /// The port.
        port: PortId,
        /// "RX" or "TX".
        what: &'static str,
        /// Queue index.
        queue: u16,
        /// The error DPDK returned.
        errno: Errno,
    },
    /// setting the MTU failed
    #[error("{port}: cannot set MTU {mtu}: {errno}")]
    Mtu {
        /// The port.
        port: PortId,
        /// The MTU asked for.
        mtu: u16,
        /// The error DPDK returned.
        errno: Errno,
    },
    /// the MTU is outside what the device takes
    #[error("{port} ({driver}): MTU {mtu} is out of the device's range {min}-{max}")]
    MtuRange {
        /// The port.
        port: PortId,
        /// Driver name.
        driver: String,
        /// The MTU asked for.
        mtu: u16,
        /// The device's smallest MTU.
        min: u16,
        /// The device's largest MTU.
        max: u16,
    },
    /// setting the MAC address failed
    #[error("{port}: cannot set the MAC address: {errno}")]
    Mac {
        /// The port.
        port: PortId,
        /// The error DPDK returned.
        errno: Errno,
    },
    /// rte_eth_dev_start failed
    #[error("{port}: start failed: {errno}")]
    Start {
        /// The port.
        port: PortId,
        /// The error DPDK returned.
        errno: Errno,
    },
    /// rte_eth_dev_stop failed
    #[error("{port}: stop failed: {errno}")]
    Stop {
        /// The port.
        port: PortId,
        /// The error DPDK returned.
        errno: Errno,
    },
    /// the port's driver needs turns with the interrupt thread, which could
    /// not be set up
    #[error("{port}: {source}")]
    Gate {
        /// The port.
        port: PortId,
        /// What failed.
        source: GateError,
    },
    /// reading counters failed
    #[error("{port}: cannot read {what}: {errno}")]
    Stats {
        /// The port.
        port: PortId,
        /// "stats", "xstats" or "xstat names".
        what: &'static str,
        /// The error DPDK returned.
        errno: Errno,
    },
}

/// How to set up a port.
#[derive(Debug, Clone)]
pub struct PortConfig {
    /// RX queues (one per worker).
    pub rx_queues: u16,
    /// TX queues (one per worker).
    pub tx_queues: u16,
    /// RX descriptors per queue (adjusted to the device's limits).
    pub rx_descriptors: u16,
    /// TX descriptors per queue (adjusted to the device's limits).
    pub tx_descriptors: u16,
    /// Spread flows over RX queues by hashing IP addresses and TCP/UDP
    /// ports, where the device supports it.
    pub rss: bool,
    /// Receive frames for any destination MAC.
    pub promiscuous: bool,
    /// MTU to set, if not the device default: checked against the device's
    /// range, given to `rte_eth_dev_configure` and set with
    /// `rte_eth_dev_set_mtu` (a driver without that, `ENOTSUP`, is logged and
    /// keeps its own).
    pub mtu: Option<u16>,
}

impl Default for PortConfig {
    fn default() -> Self {
        PortConfig {
            rx_queues: 1,
            tx_queues: 1,
            rx_descriptors: 1024,
            tx_descriptors: 1024,
            rss: true,
            promiscuous: true,
            mtu: None,
        }
    }
}

/// Link state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Link {
    /// Carrier up.
    pub up: bool,
    /// Speed in Mbit/s (0 if unknown).
    pub speed_mbps: u32,
    /// Full duplex.
    pub full_duplex: bool,
}

/// Basic device counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortStats {
    /// Packets received.
    pub rx_packets: u64,
    /// Packets sent.
    pub tx_packets: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Packets dropped by the device because RX queues were full.
    pub rx_missed: u64,
    /// Receive errors.
    pub rx_errors: u64,
    /// Transmit errors.
    pub tx_errors: u64,
    /// RX mbuf allocation failures.
    pub rx_nombuf: u64,
}

/// Ports a [`Port`] owns in this process (`RTE_MAX_ETHPORTS` of them).
static CLAIMED: [AtomicBool; dpdk_sys::RTE_MAX_ETHPORTS as usize] =
    [const { AtomicBool::new(false) }; dpdk_sys::RTE_MAX_ETHPORTS as usize];

/// Ownership of one port id by one [`Port`]; released on drop (after the
/// port's own drop has stopped and closed the device).
struct Claim(PortId);

impl Claim {
    fn take(eal: &Eal, id: PortId) -> Result<Claim, PortError> {
        let in_use = || PortError::InUse {
            port: id,
            name: Port::name_of(eal, id).unwrap_or_default(),
        };
        let slot = CLAIMED.get(usize::from(id.0)).ok_or_else(in_use)?;
        if slot.swap(true, Ordering::AcqRel) {
            return Err(in_use());
        }
        Ok(Claim(id))
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        if let Some(slot) = CLAIMED.get(usize::from(self.0.0)) {
            slot.store(false, Ordering::Release);
        }
    }
}

/// A configured ethdev port. Stopped and closed on drop. At most one `Port`
/// per device exists in a process: configuring a port that one already owns
/// fails with [`PortError::InUse`].
///
/// Queue handles borrow the port, so it cannot be stopped, reconfigured or
/// dropped while a worker is still polling one of its queues. The queues of
/// a driver that tears its rings down on DPDK's interrupt thread (`net_memif`
/// when its peer goes away) take turns with that thread (`gate`), so that no
/// burst runs while the driver unmaps them.
pub struct Port {
    id: PortId,
    name: String,
    driver: String,
    rss_hf: u64,
    started: bool,
    rx_taken: Vec<AtomicBool>,
    tx_taken: Vec<AtomicBool>,
    // For a gated driver: one slot per RX queue, then one per TX queue.
    gate: Option<PortSlots>,
    // RX queues allocate from this pool; keep it alive as long as the port.
    // Workers take buffers from it for the frames they send themselves
    // (neighbour requests, M47).
    pool: Mempool,
    // Released when the fields drop, after Drop for Port closed the device.
    _claim: Claim,
}

impl std::fmt::Debug for Port {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Port")
            .field("id", &self.id)
            .field("name", &self.name)
            .field("driver", &self.driver)
            .field("rx_queues", &self.rx_taken.len())
            .field("tx_queues", &self.tx_taken.len())
            .field("rss_hf", &format_args!("{:#x}", self.rss_hf))
            .field("started", &self.started)
            .field("gated", &self.gate.is_some())
            .finish()
    }
}

/// Creates a virtual device at runtime (like `--vdev` on the EAL command
/// line), e.g. `create_vdev(eal, "net_af_packet0", "iface=veth0")`, and
/// returns its port.
pub fn create_vdev(_eal: &Eal, name: &str, args: &str) -> Result<PortId, PortError> {
    let cname = CString::new(name).map_err(|_| PortError::Nul(name.to_owned()))?;
    let cargs = CString::new(args).map_err(|_| PortError::Nul(args.to_owned()))?;
    // SAFETY: EAL is initialised; both strings are valid C strings that DPDK
    // copies (devargs) before returning.
    let ret = unsafe { dpdk_sys::rte_vdev_init(cname.as_ptr(), cargs.as_ptr()) };
    if ret < 0 {
        return Err(PortError::VdevCreate {
            name: name.to_owned(),
            args: args.to_owned(),
            errno: Errno::from_ret(ret),
        });
    }
    Port::find(_eal, name)
}

/// `ENOTSUP` as DPDK returns it (Linux's value).
const ENOTSUP: i32 = 95;

/// The driver of `net_af_packet` devices.
const AF_PACKET: &str = "net_af_packet";

/// The largest MTU a device takes: its `max_mtu`, and no more than its largest
/// frame less the link-layer overhead (as `rte_eth_dev_configure` checks it).
fn max_mtu(info: &dpdk_sys::rte_eth_dev_info) -> u16 {
    let overhead = if info.max_mtu != u16::MAX && info.max_rx_pktlen > u32::from(info.max_mtu) {
        info.max_rx_pktlen - u32::from(info.max_mtu)
    } else {
        // RTE_ETHER_HDR_LEN + RTE_ETHER_CRC_LEN
        18
    };
    let by_frame = info.max_rx_pktlen.saturating_sub(overhead);
    info.max_mtu
        .min(u16::try_from(by_frame).unwrap_or(u16::MAX))
}

/// Runs `f` while the interrupt thread is held if `gated`.
fn guarded<T>(gated: bool, f: impl FnOnce() -> T) -> T {
    if gated { gate::exclusive(f) } else { f() }
}

fn ret_ok(ret: i32, err: impl FnOnce(Errno) -> PortError) -> Result<(), PortError> {
    if ret < 0 {
        Err(err(Errno::from_ret(ret)))
    } else {
        Ok(())
    }
}

impl Port {
    /// Every port DPDK has probed, in id order.
    pub fn all(_eal: &Eal) -> Vec<PortId> {
        let mut ids = Vec::new();
        let mut next = 0u16;
        loop {
            // SAFETY: EAL is initialised; the call only scans the port table.
            let id = unsafe {
                dpdk_sys::rte_eth_find_next_owned_by(
                    next,
                    u64::from(dpdk_sys::RTE_ETH_DEV_NO_OWNER),
                )
            };
            // Past the last port the answer is RTE_MAX_ETHPORTS (a u16 value).
            let Ok(port) = u16::try_from(id) else {
                break;
            };
            if id >= u64::from(dpdk_sys::RTE_MAX_ETHPORTS) {
                break;
            }
            ids.push(PortId(port));
            next = port + 1;
        }
        ids
    }

    /// The name of a port (its device name, e.g. `net_ring0` or a PCI address).
    pub fn name_of(_eal: &Eal, id: PortId) -> Option<String> {
        let mut buf = [0 as c_char; 64];
        // SAFETY: EAL is initialised; buf has room for RTE_ETH_NAME_MAX_LEN (64)
        // bytes including the NUL, which DPDK writes.
        let ret = unsafe { dpdk_sys::rte_eth_dev_get_name_by_port(id.0, buf.as_mut_ptr()) };
        if ret < 0 {
            return None;
        }
        // SAFETY: DPDK wrote a NUL-terminated string into buf.
        Some(
            unsafe { CStr::from_ptr(buf.as_ptr()) }
                .to_string_lossy()
                .into_owned(),
        )
    }

    /// Looks a port up by device name, or by number (`"0"`).
    pub fn find(eal: &Eal, name: &str) -> Result<PortId, PortError> {
        let not_found = || PortError::NotFound {
            name: name.to_owned(),
            available: {
                let names: Vec<String> = Port::all(eal)
                    .into_iter()
                    .map(|id| format!("{} ({})", Port::name_of(eal, id).unwrap_or_default(), id.0))
                    .collect();
                if names.is_empty() {
                    "none".into()
                } else {
                    names.join(", ")
                }
            },
        };
        if let Ok(n) = name.parse::<u16>() {
            // SAFETY: EAL is initialised; the call only checks the port table.
            let valid = unsafe { dpdk_sys::rte_eth_dev_is_valid_port(n) } == 1;
            return if valid {
                Ok(PortId(n))
            } else {
                Err(not_found())
            };
        }
        let cname = CString::new(name).map_err(|_| PortError::Nul(name.to_owned()))?;
        let mut id = 0u16;
        // SAFETY: EAL is initialised; cname is a valid C string and id a valid
        // out-pointer.
        let ret = unsafe { dpdk_sys::rte_eth_dev_get_port_by_name(cname.as_ptr(), &mut id) };
        if ret < 0 {
            Err(not_found())
        } else {
            Ok(PortId(id))
        }
    }

    /// Configures port `id` with `cfg`, its RX queues drawing from `pool`.
    /// The port is left stopped; call [`Port::start`]. Fails with
    /// [`PortError::InUse`] while another `Port` owns `id` (two owners could
    /// reconfigure, stop or close the device under each other).
    pub fn configure(
        eal: &Eal,
        id: PortId,
        cfg: &PortConfig,
        pool: &Mempool,
    ) -> Result<Port, PortError> {
        let mut info = MaybeUninit::<dpdk_sys::rte_eth_dev_info>::zeroed();
        // SAFETY: EAL is initialised; info is a valid out-pointer to a zeroed
        // (valid for this plain C struct) rte_eth_dev_info.
        let ret = unsafe { dpdk_sys::rte_eth_dev_info_get(id.0, info.as_mut_ptr()) };
        ret_ok(ret, |errno| PortError::Info { port: id, errno })?;
        // SAFETY: zero-initialised and then filled in by DPDK.
        let info = unsafe { info.assume_init() };
        // Before anything changes the device: a port someone owns is left
        // alone. Released again if configuring fails below.
        let claim = Claim::take(eal, id)?;
        let driver = if info.driver_name.is_null() {
            String::from("?")
        } else {
            // SAFETY: DPDK's driver_name is a static NUL-terminated string.
            unsafe { CStr::from_ptr(info.driver_name) }
                .to_string_lossy()
                .into_owned()
        };
        for (what, requested, max) in [
            ("RX", cfg.rx_queues, info.max_rx_queues),
            ("TX", cfg.tx_queues, info.max_tx_queues),
        ] {
            if requested == 0 || requested > max {
                return Err(PortError::TooManyQueues {
                    port: id,
                    driver,
                    what,
                    requested,
                    max,
                });
            }
        }

        let mut conf = dpdk_sys::rte_eth_conf::default();
        let mut set_mtu = cfg.mtu;
        if let Some(mtu) = cfg.mtu {
            let max = max_mtu(&info);
            if (info.min_mtu..=max).contains(&mtu) {
                // Drivers that size their RX buffers at start read it here.
                conf.rxmode.mtu = u32::from(mtu);
            } else if driver == AF_PACKET {
                // It reports a fixed 1518-byte frame limit, but the frames of
                // its ring (`framesz`) are what limit it: nothing to set.
                log::warn!(
                    "{id} ({driver}) takes no MTU above {max} through DPDK; MTU {mtu} is only the data plane's limit (give the device framesz={} or more and its interface MTU {mtu})",
                    u32::from(mtu) + 52
                );
                set_mtu = None;
            } else {
                return Err(PortError::MtuRange {
                    port: id,
                    driver,
                    mtu,
                    min: info.min_mtu,
                    max,
                });
            }
        }
        // Before the device is touched: its driver's callbacks may run on the
        // interrupt thread from now on.
        let gate = if gate::gated(&driver) {
            let slots = usize::from(cfg.rx_queues) + usize::from(cfg.tx_queues);
            Some(
                PortSlots::new(eal, slots)
                    .map_err(|source| PortError::Gate { port: id, source })?,
            )
        } else {
            None
        };
        let wanted_rss =
            dpdk_sys::SPW_ETH_RSS_IP | dpdk_sys::SPW_ETH_RSS_TCP | dpdk_sys::SPW_ETH_RSS_UDP;
        let rss_hf = if cfg.rss {
            wanted_rss & info.flow_type_rss_offloads
        } else {
            0
        };
        if rss_hf != 0 {
            conf.rxmode.mq_mode = dpdk_sys::rte_eth_rx_mq_mode::RTE_ETH_MQ_RX_RSS;
            conf.rx_adv_conf.rss_conf.rss_hf = rss_hf;
            // A null key selects the driver's default key.
            conf.rx_adv_conf.rss_conf.rss_key = std::ptr::null_mut();
        } else if cfg.rss && cfg.rx_queues > 1 {
            log::warn!(
                "{id} ({driver}) cannot hash TCP/UDP flows (RSS); all traffic lands on RX queue 0"
            );
        }
        // The NIC verifies IPv4 header checksums where it can (M55): the data
        // plane then skips its own check (`Mbuf::rx_ipv4_checksum`).
        conf.rxmode.offloads |= dpdk_sys::SPW_ETH_RX_OFFLOAD_IPV4_CKSUM & info.rx_offload_capa;
        let setup = || -> Result<(), PortError> {
            // SAFETY: EAL is initialised; conf is a fully initialised rte_eth_conf
            // that DPDK copies.
            let ret = unsafe {
                dpdk_sys::rte_eth_dev_configure(id.0, cfg.rx_queues, cfg.tx_queues, &conf)
            };
            ret_ok(ret, |errno| PortError::Configure { port: id, errno })?;

            let (mut nb_rx, mut nb_tx) = (cfg.rx_descriptors, cfg.tx_descriptors);
            // SAFETY: port configured; both are valid in/out pointers.
            let ret =
                unsafe { dpdk_sys::rte_eth_dev_adjust_nb_rx_tx_desc(id.0, &mut nb_rx, &mut nb_tx) };
            ret_ok(ret, |errno| PortError::Configure { port: id, errno })?;

            // SAFETY: EAL initialised; reads the port's NUMA node.
            let socket = unsafe { dpdk_sys::rte_eth_dev_socket_id(id.0) };
            #[allow(clippy::cast_sign_loss, reason = "SOCKET_ID_ANY as C's unsigned")]
            let socket = if socket < 0 {
                dpdk_sys::SOCKET_ID_ANY
            } else {
                socket
            } as u32;
            for q in 0..cfg.rx_queues {
                // SAFETY: port configured with rx_queues queues; a null rxconf means
                // the driver's defaults; the pool outlives the port (held below).
                let ret = unsafe {
                    dpdk_sys::rte_eth_rx_queue_setup(
                        id.0,
                        q,
                        nb_rx,
                        socket,
                        std::ptr::null(),
                        pool.as_ptr(),
                    )
                };
                ret_ok(ret, |errno| PortError::QueueSetup {
                    port: id,
                    what: "RX",
                    queue: q,
                    errno,
                })?;
            }
            for q in 0..cfg.tx_queues {
                // SAFETY: port configured with tx_queues queues; a null txconf means
                // the driver's defaults.
                let ret = unsafe {
                    dpdk_sys::rte_eth_tx_queue_setup(id.0, q, nb_tx, socket, std::ptr::null())
                };
                ret_ok(ret, |errno| PortError::QueueSetup {
                    port: id,
                    what: "TX",
                    queue: q,
                    errno,
                })?;
            }
            if let Some(mtu) = set_mtu {
                // SAFETY: port configured and stopped; plain integer arguments.
                let ret = unsafe { dpdk_sys::rte_eth_dev_set_mtu(id.0, mtu) };
                if ret == -ENOTSUP {
                    // Nothing to set (ring and null devices): the pipeline still
                    // takes the configured MTU as the egress limit.
                    log::warn!(
                        "{id} ({driver}) cannot set an MTU; it keeps its own, MTU {mtu} is only the data plane's limit"
                    );
                } else {
                    ret_ok(ret, |errno| PortError::Mtu {
                        port: id,
                        mtu,
                        errno,
                    })?;
                }
            }
            if cfg.promiscuous {
                // SAFETY: port configured. Devices without the mode (ENOTSUP) are
                // fine: virtual devices receive everything anyway.
                let ret = unsafe { dpdk_sys::rte_eth_promiscuous_enable(id.0) };
                if ret < 0 {
                    log::debug!(
                        "{id} ({driver}): promiscuous mode unavailable: {}",
                        Errno::from_ret(ret)
                    );
                }
            }
            Ok(())
        };
        guarded(gate.is_some(), setup)?;
        Ok(Port {
            id,
            name: Port::name_of(eal, id).unwrap_or_default(),
            driver,
            rss_hf,
            started: false,
            rx_taken: (0..cfg.rx_queues).map(|_| AtomicBool::new(false)).collect(),
            tx_taken: (0..cfg.tx_queues).map(|_| AtomicBool::new(false)).collect(),
            gate,
            pool: pool.clone(),
            _claim: claim,
        })
    }

    /// Port number.
    pub fn id(&self) -> PortId {
        self.id
    }

    /// Whether this port's queues take turns with DPDK's interrupt thread
    /// (its driver is one of [`gate::GATED_DRIVERS`]).
    pub fn gated(&self) -> bool {
        self.gate.is_some()
    }

    /// Runs a control operation on the device: for a gated driver, while
    /// none of its callbacks can run on the interrupt thread.
    fn guarded<T>(&self, f: impl FnOnce() -> T) -> T {
        guarded(self.gate.is_some(), f)
    }

    /// Device name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Driver name (e.g. `net_ring`, `net_ice`).
    pub fn driver(&self) -> &str {
        &self.driver
    }

    /// The RSS hash functions in use (`RTE_ETH_RSS_*` bits); 0 when the
    /// device does not spread flows over queues.
    pub fn rss_hash_functions(&self) -> u64 {
        self.rss_hf
    }

    /// The device's MTU now (`None` if it cannot tell).
    pub fn mtu(&self) -> Option<u16> {
        let mut mtu = 0u16;
        // SAFETY: valid port; mtu is a valid out-pointer.
        let ret = unsafe { dpdk_sys::rte_eth_dev_get_mtu(self.id.0, &mut mtu) };
        (ret == 0).then_some(mtu)
    }

    /// Starts the port.
    pub fn start(&mut self) -> Result<(), PortError> {
        // SAFETY: the port is configured with its queues set up.
        let ret = self.guarded(|| unsafe { dpdk_sys::rte_eth_dev_start(self.id.0) });
        ret_ok(ret, |errno| PortError::Start {
            port: self.id,
            errno,
        })?;
        self.started = true;
        Ok(())
    }

    /// Stops the port (`&mut self`: no queue handle can be in use).
    pub fn stop(&mut self) -> Result<(), PortError> {
        if !self.started {
            return Ok(());
        }
        // SAFETY: the port is started and, with &mut self, no queue is polled.
        let ret = self.guarded(|| unsafe { dpdk_sys::rte_eth_dev_stop(self.id.0) });
        ret_ok(ret, |errno| PortError::Stop {
            port: self.id,
            errno,
        })?;
        self.started = false;
        Ok(())
    }

    /// The port's MAC address.
    pub fn mac(&self) -> [u8; 6] {
        let mut addr = dpdk_sys::rte_ether_addr::default();
        // SAFETY: valid port; addr is a valid out-pointer.
        let ret = unsafe { dpdk_sys::rte_eth_macaddr_get(self.id.0, &mut addr) };
        if ret < 0 { [0; 6] } else { addr.addr_bytes }
    }

    /// Sets the port's MAC address (for a TAP exception port this is also
    /// the kernel interface's address).
    pub fn set_mac(&mut self, mac: [u8; 6]) -> Result<(), PortError> {
        let mut addr = dpdk_sys::rte_ether_addr { addr_bytes: mac };
        // SAFETY: valid port; addr is a valid pointer for the call.
        let ret = unsafe { dpdk_sys::rte_eth_dev_default_mac_addr_set(self.id.0, &mut addr) };
        if ret < 0 {
            return Err(PortError::Mac {
                port: self.id,
                errno: Errno::from_ret(ret),
            });
        }
        Ok(())
    }

    /// Current link state, without waiting for negotiation.
    pub fn link(&self) -> Link {
        let mut link = dpdk_sys::rte_eth_link::default();
        // SAFETY: valid port; link is a valid out-pointer.
        let ret = unsafe { dpdk_sys::rte_eth_link_get_nowait(self.id.0, &mut link) };
        if ret < 0 {
            return Link {
                up: false,
                speed_mbps: 0,
                full_duplex: false,
            };
        }
        Link {
            up: u32::from(link.link_status()) == dpdk_sys::RTE_ETH_LINK_UP,
            speed_mbps: link.link_speed,
            full_duplex: u32::from(link.link_duplex()) == dpdk_sys::RTE_ETH_LINK_FULL_DUPLEX,
        }
    }

    /// Basic counters.
    pub fn stats(&self) -> Result<PortStats, PortError> {
        let mut s = MaybeUninit::<dpdk_sys::rte_eth_stats>::zeroed();
        // SAFETY: valid port; s is a valid out-pointer to a zeroed struct.
        let ret = unsafe { dpdk_sys::rte_eth_stats_get(self.id.0, s.as_mut_ptr()) };
        ret_ok(ret, |errno| PortError::Stats {
            port: self.id,
            what: "stats",
            errno,
        })?;
        // SAFETY: zero-initialised, then filled by DPDK.
        let s = unsafe { s.assume_init() };
        Ok(PortStats {
            rx_packets: s.ipackets,
            tx_packets: s.opackets,
            rx_bytes: s.ibytes,
            tx_bytes: s.obytes,
            rx_missed: s.imissed,
            rx_errors: s.ierrors,
            tx_errors: s.oerrors,
            rx_nombuf: s.rx_nombuf,
        })
    }

    /// Extended (driver-specific) counters, by name.
    pub fn xstats(&self) -> Result<Vec<(String, u64)>, PortError> {
        let err = |what, ret| PortError::Stats {
            port: self.id,
            what,
            errno: Errno::from_ret(ret),
        };
        // SAFETY: valid port; a null array with size 0 asks only for the count.
        let n = unsafe { dpdk_sys::rte_eth_xstats_get_names(self.id.0, std::ptr::null_mut(), 0) };
        if n < 0 {
            return Err(err("xstat names", n));
        }
        let n = n.unsigned_abs();
        let mut names = vec![dpdk_sys::rte_eth_xstat_name::default(); n as usize];
        let mut values = vec![dpdk_sys::rte_eth_xstat::default(); n as usize];
        // SAFETY: names has room for n entries.
        let got = unsafe { dpdk_sys::rte_eth_xstats_get_names(self.id.0, names.as_mut_ptr(), n) };
        if got < 0 {
            return Err(err("xstat names", got));
        }
        // SAFETY: values has room for n entries.
        let got_v = unsafe { dpdk_sys::rte_eth_xstats_get(self.id.0, values.as_mut_ptr(), n) };
        if got_v < 0 {
            return Err(err("xstats", got_v));
        }
        let count = got.min(got_v).unsigned_abs() as usize;
        Ok(values[..count]
            .iter()
            .filter_map(|v| {
                let name = names.get(usize::try_from(v.id).ok()?)?;
                // SAFETY: DPDK NUL-terminates every name within its fixed array.
                let name = unsafe { CStr::from_ptr(name.name.as_ptr()) };
                Some((name.to_string_lossy().into_owned(), v.value))
            })
            .collect())
    }

    /// The handle for RX queue `q`, once: a second request while the first
    /// handle lives returns `None`.
    pub fn rx_queue(&self, q: u16) -> Option<RxQueue<'_>> {
        let slot = self.rx_taken.get(usize::from(q))?;
        (!slot.swap(true, Ordering::AcqRel)).then_some(RxQueue {
            port: self,
            queue: q,
            gate: self.gate.as_ref().and_then(|g| g.get(usize::from(q))),
        })
    }

    /// The handle for TX queue `q`, once (see [`Port::rx_queue`]).
    pub fn tx_queue(&self, q: u16) -> Option<TxQueue<'_>> {
        let slot = self.tx_taken.get(usize::from(q))?;
        (!slot.swap(true, Ordering::AcqRel)).then_some(TxQueue {
            port: self,
            queue: q,
            gate: self
                .gate
                .as_ref()
                .and_then(|g| g.get(self.rx_taken.len() + usize::from(q))),
        })
    }
}

impl Drop for Port {
    fn drop(&mut self) {
        if let Err(e) = self.stop() {
            log::warn!("{e}");
        }
        // SAFETY: the port is stopped and no queue handle exists (they borrow
        // self); after close DPDK releases the port and we never use the id.
        let ret = self.guarded(|| unsafe { dpdk_sys::rte_eth_dev_close(self.id.0) });
        if ret < 0 {
            log::warn!("{}: close failed: {}", self.id, Errno::from_ret(ret));
        }
    }
}

/// Exclusive handle to one RX queue of a started port.
#[derive(Debug)]
pub struct RxQueue<'p> {
    port: &'p Port,
    queue: u16,
    // This queue's slot, if the port is gated.
    gate: Option<&'p Slot>,
}

impl RxQueue<'_> {
    /// A fresh mbuf from the pool this queue receives into (for a frame the
    /// worker builds itself); `None` when the pool is empty.
    pub fn alloc(&self) -> Option<crate::Mbuf> {
        self.port.pool.alloc()
    }

    /// Queue index.
    pub fn queue(&self) -> u16 {
        self.queue
    }

    /// Receives up to the burst's free capacity; returns how many arrived
    /// (none while a gated port's driver has the interrupt thread).
    #[inline]
    pub fn rx_burst<const N: usize>(&mut self, burst: &mut MbufBurst<N>) -> usize {
        let (ptr, room) = burst.spare_ptr();
        if room == 0 || !self.port.started {
            return 0;
        }
        if self.gate.is_some_and(|g| !g.enter()) {
            return 0;
        }
        let room = u16::try_from(room).unwrap_or(u16::MAX);
        // SAFETY: this handle is the only user of (port, queue) (taken once);
        // ptr has room for `room` mbuf pointers; the port is started; a gated
        // driver's callbacks are not running (entered above).
        let n = unsafe { dpdk_sys::rte_eth_rx_burst(self.port.id.0, self.queue, ptr, room) };
        if let Some(g) = self.gate {
            g.leave();
        }
        // SAFETY: the driver wrote n owned, valid mbuf pointers into the slots.
        unsafe { burst.commit(usize::from(n)) };
        usize::from(n)
    }
}

impl Drop for RxQueue<'_> {
    fn drop(&mut self) {
        self.port.rx_taken[usize::from(self.queue)].store(false, Ordering::Release);
    }
}

/// Exclusive handle to one TX queue of a started port.
#[derive(Debug)]
pub struct TxQueue<'p> {
    port: &'p Port,
    queue: u16,
    // This queue's slot, if the port is gated.
    gate: Option<&'p Slot>,
}

impl TxQueue<'_> {
    /// Queue index.
    pub fn queue(&self) -> u16 {
        self.queue
    }

    /// Offers every mbuf in the burst to the device. The ones it took leave the
    /// burst (the driver owns them now); the ones it did not stay in the burst,
    /// still owned by the caller, at the front. Returns how many were sent
    /// (none while a gated port's driver has the interrupt thread).
    #[inline]
    pub fn tx_burst<const N: usize>(&mut self, burst: &mut MbufBurst<N>) -> usize {
        let len = burst.len();
        if len == 0 || !self.port.started {
            return 0;
        }
        if self.gate.is_some_and(|g| !g.enter()) {
            return 0;
        }
        let len = u16::try_from(len).unwrap_or(u16::MAX);
        // SAFETY: this handle is the only user of (port, queue); the first len
        // slots hold owned, valid mbufs; the port is started; a gated driver's
        // callbacks are not running (entered above).
        let sent = unsafe {
            dpdk_sys::rte_eth_tx_burst(self.port.id.0, self.queue, burst.held_ptr(), len)
        };
        if let Some(g) = self.gate {
            g.leave();
        }
        // SAFETY: the driver took ownership of exactly the first `sent` mbufs.
        unsafe { burst.forget_front(usize::from(sent)) };
        usize::from(sent)
    }

    /// Sends the burst and frees what the device did not take, leaving the burst
    /// empty. Returns (sent, dropped).
    #[inline]
    pub fn tx_burst_or_drop<const N: usize>(&mut self, burst: &mut MbufBurst<N>) -> (usize, usize) {
        let sent = self.tx_burst(burst);
        let dropped = burst.len();
        burst.clear();
        (sent, dropped)
    }
}

impl Drop for TxQueue<'_> {
    fn drop(&mut self) {
        self.port.tx_taken[usize::from(self.queue)].store(false, Ordering::Release);
    }
}
