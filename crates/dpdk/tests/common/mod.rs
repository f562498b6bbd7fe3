//! Shared helpers for the DPDK integration tests: EAL set-up and frames.
#![allow(clippy::cast_possible_truncation)] // test values are small
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly
#![allow(dead_code)]

use std::sync::Mutex;

use dpdk::{Eal, Mempool, MempoolConfig};

/// EAL arguments for a test process that uses hugepages.
pub const HUGEPAGE_ARGS: &[&str] = &[
    "-l",
    "0",
    "--in-memory",
    "--no-pci",
    "--no-telemetry",
    "--log-level=lib.eal:warning",
];

/// EAL arguments for a test process without hugepages.
pub const NO_HUGE_ARGS: &[&str] = &[
    "-l",
    "0",
    "--no-huge",
    "--no-shconf",
    "-m",
    "256",
    "--no-pci",
    "--no-telemetry",
    "--log-level=lib.eal:warning",
];

/// Free 2 MB hugepages on this machine (from /proc/meminfo).
pub fn free_hugepages() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines().find_map(|l| {
                l.strip_prefix("HugePages_Free:")
                    .map(|v| v.trim().parse().unwrap_or(0))
            })
        })
        .unwrap_or(0)
}

/// Hugepage arguments when enough hugepages are free, otherwise `--no-huge`.
pub fn best_args() -> &'static [&'static str] {
    if free_hugepages() >= 64 {
        HUGEPAGE_ARGS
    } else {
        NO_HUGE_ARGS
    }
}

static INIT: Mutex<()> = Mutex::new(());

/// The process's EAL, initialised with `args` on first use. Tests in one
/// binary share it (cargo test runs them as threads of one process; nextest
/// gives each its own process).
pub fn eal(args: &[&str]) -> &'static Eal {
    let _guard = INIT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(eal) = Eal::get() {
        return eal;
    }
    match Eal::init(args.iter().copied()) {
        Ok(eal) => eal,
        Err(e) => panic!("EAL init failed: {e}"),
    }
}

/// A name unique to this process and call, for pools and devices.
pub fn unique(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "{prefix}{}x{}",
        std::process::id() % 100_000,
        N.fetch_add(1, Ordering::Relaxed)
    )
}

pub fn pool(eal: &Eal, size: u32) -> Mempool {
    Mempool::new(eal, &MempoolConfig::new(unique("tp"), size)).expect("create mempool")
}

/// An Ethernet/IPv4/UDP frame (id 1, DF, TTL 64) with right IPv4 and UDP
/// checksums.
pub fn udp_frame(
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    src: [u8; 4],
    dst: [u8; 4],
    sport: u16,
    dport: u16,
    payload: &[u8],
) -> Vec<u8> {
    testkit::packet::Packet::udp(src.into(), dst.into(), sport, dport)
        .payload(payload)
        .macs(src_mac, dst_mac)
        .frame()
}

/// The `i`-th test frame: distinct ports and payload per index, 60..~300 bytes.
pub fn test_frame(i: usize) -> Vec<u8> {
    let payload: Vec<u8> = (0..(18 + (i * 37) % 240))
        .map(|b| (b as u8) ^ (i as u8))
        .collect();
    udp_frame(
        [0x02, 0, 0, 0, 0, 1],
        [0x02, 0, 0, 0, 0, 2],
        [198, 18, 0, 1],
        [198, 18, 1, (i % 250) as u8 + 1],
        1024 + i as u16,
        5000 + (i % 7) as u16,
        &payload,
    )
}

/// Checks the helper itself against a frame built independently (by scapy:
/// `Ether(src="02:00:00:00:00:01",dst="02:00:00:00:00:02")/IP(src="198.18.0.1",
/// dst="198.18.0.2",id=1,flags="DF")/UDP(sport=1234,dport=5678)/b"spillway"`).
pub fn assert_frame_builder_matches_scapy() {
    let f = udp_frame(
        [2, 0, 0, 0, 0, 1],
        [2, 0, 0, 0, 0, 2],
        [198, 18, 0, 1],
        [198, 18, 0, 2],
        1234,
        5678,
        b"spillway",
    );
    let scapy = "020000000002020000000001080045000024000140004011aea0c6120001c612000204d2162e0010add87370696c6c776179";
    let hex: String = f.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(hex, scapy);
}

/// Runs `ip ARGS…` (iproute2); panics with the command line, its exit status
/// and what it printed unless it succeeds.
pub fn ip(args: &[&str]) {
    let line = format!("ip {}", args.join(" "));
    let out = std::process::Command::new("ip")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run `{line}` (iproute2): {e}"));
    assert!(
        out.status.success(),
        "`{line}` exited with {}\n--- stdout:\n{}--- stderr:\n{}---",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
