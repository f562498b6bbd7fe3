//! `spillway run` with its uplink on `net_memif` in the server role (the set-up
//! `perf/bare-metal/dut-config.sh` advertises for a generator over memif),
//! forwarding a real `dpdk-testpmd` memif client's flood (`txonly`, UDP to a
//! VIP) while that peer connects and goes away 100 times, half the time with
//! SIGTERM (testpmd closes its port: a memif disconnect message), half with
//! SIGKILL (the control socket just ends).
//!
//! Before the port gate (crates/dpdk/src/gate.rs) the daemon's worker died
//! with SIGSEGV inside `librte_net_memif` a few restarts in. Now the daemon
//! must forward after every reconnect, log each link change once, count
//! them in its exit report, and exit with status 0 on SIGTERM (which also
//! means every mbuf came back to the pool).
//!
//! `SPILLWAY_MEMIF_CYCLES` overrides the number of peer restarts (100).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

mod common;

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use testkit::config::{endpoint_list, group, rule, service};
use testkit::testpmd::MemifPeer;

const DAEMON_MAC: &str = "02:00:00:00:00:01";

/// A directory for the test's files, removed on drop (also on failure).
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A daemon whose uplink is a memif server at `dir/memif.sock` and whose
/// backend port is `net_null` (receives nothing; what is sent there is
/// counted and freed):
/// UDP 10.0.0.10:53 to a GUE service of two endpoints.
fn memif_config(dir: &Path) -> String {
    let d = dir.display();
    common::daemon_base(
        (
            "net_memif0",
            format!("net_memif0,role=server,id=0,socket={d}/memif.sock,mac={DAEMON_MAC}"),
        ),
        ("net_null0", "net_null0,no-rx=1".into()),
    )
    .rule(rule("dns", &["10.0.0.10"], "UDP", "53", "dns").set("ports", 53))
    .service(
        service("dns", "gue").child(
            group("a", "r", "z").set("endpoints", endpoint_list(&["10.0.1.11", "10.0.1.12"])),
        ),
    )
    .raw(&format!("[control]\nsocket = \"{d}/ctl.sock\"\n"))
    .build()
}

/// What the peer floods: UDP from 192.0.2.1:1024 to the VIP's port 53, to
/// the daemon's MAC.
fn peer_tx_args() -> [String; 3] {
    [
        format!("--eth-peer=0,{DAEMON_MAC}"),
        "--tx-ip=192.0.2.1,10.0.0.10".into(),
        "--tx-udp=1024,53".into(),
    ]
}

/// `spillway run`, its log lines read as they come.
struct Daemon {
    child: Child,
    log: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Daemon {
    fn start(cfg: &Path) -> Daemon {
        let mut child = Command::new(env!("CARGO_BIN_EXE_spillway"))
            .args(["run", "--config", cfg.to_str().expect("utf-8")])
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start spillway run");
        let (tx, log) = mpsc::channel();
        let stderr = child.stderr.take().expect("stderr");
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Daemon {
            child,
            log,
            seen: Vec::new(),
        }
    }

    fn check_running(&mut self) {
        if let Some(status) = self.child.try_wait().expect("wait for spillway") {
            self.drain();
            panic!(
                "spillway run exited ({status}); its log:\n{}",
                self.seen.join("\n")
            );
        }
    }

    fn drain(&mut self) {
        while let Ok(line) = self.log.try_recv() {
            self.seen.push(line);
        }
    }

    /// Log lines containing `what` so far.
    fn count(&mut self, what: &str) -> usize {
        self.drain();
        self.seen.iter().filter(|l| l.contains(what)).count()
    }

    /// SIGTERM, then the exit status and the exit report (stdout).
    fn terminate(mut self) -> (std::process::ExitStatus, String) {
        common::run_ok(Command::new("kill").args(["-TERM", &self.child.id().to_string()]));
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(s) = self.child.try_wait().expect("wait") {
                break s;
            }
            assert!(
                Instant::now() < deadline,
                "spillway run did not stop on SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        let mut out = String::new();
        if let Some(mut o) = self.child.stdout.take() {
            let _ = o.read_to_string(&mut out);
        }
        self.drain();
        (status, format!("{out}--- log:\n{}", self.seen.join("\n")))
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.drain();
            eprintln!("--- spillway run's log:\n{}", self.seen.join("\n"));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The `forwarded` counter of `spillway stats`.
fn forwarded(socket: &str) -> u64 {
    let out = Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(["stats", "--socket", socket])
        .output()
        .expect("run spillway stats");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| {
            l.split(';').find_map(|part| {
                part.trim()
                    .strip_prefix("forwarded")
                    .and_then(|v| v.trim().split(' ').next()?.parse().ok())
            })
        })
        .unwrap_or(0)
}

/// Waits (generously: the machine may be loaded) until `cond` holds
/// (`cond` panics if a process it watches has died).
fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn daemon_forwards_through_100_memif_peer_restarts() {
    let cycles: usize = std::env::var("SPILLWAY_MEMIF_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let dir = TempDir(std::env::temp_dir().join(format!("spillway-memif-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).unwrap();
    let cfg = dir.0.join("spillway.toml");
    std::fs::write(&cfg, memif_config(&dir.0)).unwrap();
    let memif = dir.0.join("memif.sock");
    let ctl = dir.0.join("ctl.sock").display().to_string();

    let mut daemon = Daemon::start(&cfg);
    // DPDK 22.11's memif socket is abstract by default (no file): the
    // control socket says the daemon is up, with its ports started.
    wait_for("the daemon's control socket", || {
        daemon.check_running();
        Path::new(&ctl).exists()
    });
    // Peers 0..cycles come and go; the last one stays until the daemon stops.
    for cycle in 0..=cycles {
        let mut peer = MemifPeer::start(&memif, &peer_tx_args());
        wait_for(&format!("link up with peer {cycle}"), || {
            daemon.check_running();
            peer.check_running(&format!("in cycle {cycle}"));
            daemon.count("link up") > cycle
        });
        let before = forwarded(&ctl);
        wait_for(&format!("forwarding from peer {cycle}"), || {
            daemon.check_running();
            peer.check_running(&format!("in cycle {cycle}"));
            forwarded(&ctl) > before + 100
        });
        if cycle == cycles {
            // Closing a memif port whose peer is connected is the daemon's
            // own disconnect.
            let (status, report) = daemon.terminate();
            peer.stop("-TERM");
            assert!(
                status.success(),
                "spillway run exit status {status}:\n{report}"
            );
            assert!(
                report.contains(&format!(
                    "port up: link went down {cycles} times, came up {} times",
                    cycles + 1
                )),
                "every link change counted once:\n{report}"
            );
            return;
        }
        peer.stop(if cycle % 2 == 0 { "-TERM" } else { "-KILL" });
        wait_for(&format!("link down after peer {cycle}"), || {
            daemon.check_running();
            daemon.count("link down") > cycle
        });
    }
}
