//! A `net_memif` port in the server role (what `perf/bare-metal/dut-config.sh`
//! advertises for a generator over memif) forwarding under traffic while its
//! peer, a real `dpdk-testpmd` in memif client mode flooding it
//! (`--forward-mode=txonly`), connects and goes away again and again: half the
//! time with SIGTERM (testpmd closes its port: a memif disconnect message),
//! half with SIGKILL (the control socket just ends).
//!
//! The driver tears a connection down on DPDK's interrupt thread, unmapping
//! the rings the data path reads, without synchronising with it: before the
//! port gate (`dpdk::port`) a worker polling the port through
//! [`dpdk::RxQueue`]/[`dpdk::TxQueue`] died with SIGSEGV within a few peer
//! restarts, killing this test's process. Now the test must see every
//! restart come and go, traffic arrive after each reconnect, and every mbuf
//! return to the pool.
//!
//! `SPILLWAY_MEMIF_CYCLES` overrides the number of peer restarts (100: before
//! the gate a run of 50 still passed now and then).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

mod common;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use dpdk::{MbufBurst, Port, PortConfig, create_vdev};
use testkit::testpmd::MemifPeer;

/// A directory for the memif socket, removed on drop (also on failure).
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> TempDir {
        let dir = std::env::temp_dir().join(common::unique("spw-memif-"));
        std::fs::create_dir_all(&dir).expect("create temp dir");
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Waits (generously: the machine may be loaded) until `cond` holds.
fn wait_for(what: &str, mut check: impl FnMut(), mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !cond() {
        check();
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn memif_server_survives_peer_restarts_under_traffic() {
    let cycles: usize = std::env::var("SPILLWAY_MEMIF_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let eal = common::eal(common::NO_HUGE_ARGS);
    let dir = TempDir::new();
    let socket = dir.0.join("memif.sock");
    let name = common::unique("net_memif_t");
    let id = create_vdev(
        eal,
        &name,
        &format!("role=server,id=0,socket={}", socket.display()),
    )
    .expect("create memif server");
    let pool = common::pool(eal, 4096);
    let start_in_use = pool.in_use();
    let cfg = PortConfig {
        rx_descriptors: 256,
        tx_descriptors: 256,
        rss: false,
        ..PortConfig::default()
    };
    let mut port = Port::configure(eal, id, &cfg, &pool).expect("configure memif port");
    port.start().expect("start memif port");

    let stop = AtomicBool::new(false);
    let received = AtomicU64::new(0);
    let sent = AtomicU64::new(0);
    std::thread::scope(|s| {
        let worker = s.spawn(|| {
            dpdk::thread_register(eal).expect("register worker");
            let mut rx = port.rx_queue(0).expect("rx queue");
            let mut tx = port.tx_queue(0).expect("tx queue");
            let mut burst = MbufBurst::<32>::new();
            while !stop.load(Ordering::Relaxed) {
                let n = rx.rx_burst(&mut burst);
                if n > 0 {
                    received.fetch_add(n as u64, Ordering::Relaxed);
                }
                // Back out of the port it came in on: the TX ring is read
                // and written too (testpmd's txonly never drains it, so it
                // fills and the rest is dropped).
                let (ok, _dropped) = tx.tx_burst_or_drop(&mut burst);
                sent.fetch_add(ok as u64, Ordering::Relaxed);
            }
        });
        let alive = || assert!(!worker.is_finished(), "the worker stopped");
        for cycle in 0..cycles {
            let mut peer = MemifPeer::start::<&str>(&socket, &[]);
            let before = received.load(Ordering::Relaxed);
            wait_for(
                &format!("traffic from peer {cycle}"),
                || {
                    alive();
                    peer.check_running(&format!("before cycle {cycle} carried traffic"));
                },
                || received.load(Ordering::Relaxed) > before + 1000,
            );
            assert!(
                port.link().up,
                "link up while traffic flows (cycle {cycle})"
            );
            let signal = if cycle % 2 == 0 { "-TERM" } else { "-KILL" };
            peer.stop(signal);
            wait_for(&format!("link down after peer {cycle}"), alive, || {
                !port.link().up
            });
        }
        // Still forwarding after the last restart.
        let mut peer = MemifPeer::start::<&str>(&socket, &[]);
        let before = received.load(Ordering::Relaxed);
        wait_for(
            "traffic after the last restart",
            || {
                alive();
                peer.check_running("after the last restart");
            },
            || received.load(Ordering::Relaxed) > before + 1000,
        );
        peer.stop("-TERM");
        stop.store(true, Ordering::Relaxed);
        worker.join().expect("worker");
    });
    eprintln!(
        "{cycles} peer restarts: {} packets received, {} sent",
        received.load(Ordering::Relaxed),
        sent.load(Ordering::Relaxed)
    );
    drop(port);
    assert_eq!(
        pool.in_use(),
        start_in_use,
        "every mbuf is back in the pool"
    );
}
