//! Neighbour resolution in the namespace lab (M47), with no MAC in the
//! configuration (scripts/lab.sh with LAB_RESOLVE=1, short `[neighbours]`
//! timings: reachable 2 s, retransmit 500 ms, 2 probes): a router whose MAC
//! changes is followed without a reload, and an l2dsr backend that stops
//! answering ARP gets no new connections. Real kernels on every side.
//! Needs root.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddrV4, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

struct Lab {
    dir: PathBuf,
    script: PathBuf,
    tag: String,
}

impl Lab {
    fn up(mode: &str, env: &[(&str, &str)]) -> Lab {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let script = root.join("scripts/lab.sh");
        let dir =
            std::env::temp_dir().join(format!("spillway-labnbr-{mode}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let bin = Path::new(env!("CARGO_BIN_EXE_spillway"))
            .parent()
            .expect("bin dir")
            .to_owned();
        let mut up = Command::new("bash");
        up.env("LAB_RESOLVE", "1")
            .envs(env.iter().copied())
            .arg(&script)
            .args(["up", mode])
            .arg(&dir)
            .arg(&bin);
        let out = common::output(&mut up);
        // Built before checking, so that a failed start is cleaned up too.
        let mut lab = Lab {
            dir: dir.clone(),
            script,
            tag: String::new(),
        };
        assert!(
            out.status.success(),
            "lab up failed: {}",
            common::report(&up, &out)
        );
        lab.tag = std::fs::read_to_string(dir.join("tag"))
            .expect("tag")
            .trim()
            .to_owned();
        lab
    }

    fn ns(&self, name: &str) -> String {
        format!("spw{}{name}", self.tag)
    }

    /// Runs `ip ARGS` in namespace `ns` of the lab.
    fn ip(&self, ns: &str, args: &[&str]) {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns(ns), "ip"]).args(args);
        common::run_ok(&mut c);
    }

    fn status(&self) -> String {
        let out = common::run_ok(
            Command::new(env!("CARGO_BIN_EXE_spillway"))
                .args(["status", "--socket"])
                .arg(self.dir.join("control.sock")),
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Waits (at most `within`) until the status has a line containing
    /// every one of `parts`; the status then.
    fn wait_status(&self, parts: &[&str], within: Duration) -> String {
        let end = Instant::now() + within;
        loop {
            let s = self.status();
            if s.lines().any(|l| parts.iter().all(|p| l.contains(p))) {
                return s;
            }
            assert!(
                Instant::now() < end,
                "no status line with {parts:?} within {within:?}:\n{s}\n{}",
                std::fs::read_to_string(self.dir.join("spillway.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `n` HTTP requests from the client namespace, each on a new
    /// connection: the answers' bodies (or "FAILED: …").
    fn requests(&self, n: usize) -> Vec<String> {
        in_client(self, move || (0..n).map(|_| http_get(5)).collect())
            .join()
            .expect("client thread")
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(&self.script)
            .arg("down")
            .arg(&self.dir)
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One HTTP/1.0 request to the VIP on a new connection (`timeout` seconds
/// for each step): the answer's body.
fn http_get(timeout: u64) -> String {
    let vip: SocketAddrV4 = "198.18.10.10:80".parse().expect("vip");
    let t = Duration::from_secs(timeout);
    let get = || -> std::io::Result<String> {
        let mut s = TcpStream::connect_timeout(&vip.into(), t)?;
        s.set_read_timeout(Some(t))?;
        s.write_all(b"GET / HTTP/1.0\r\nHost: lab\r\n\r\n")?;
        let mut resp = String::new();
        s.read_to_string(&mut resp)?;
        Ok(resp
            .rsplit("\r\n\r\n")
            .next()
            .unwrap_or("")
            .trim()
            .to_owned())
    };
    get().unwrap_or_else(|e| format!("FAILED: {e}"))
}

/// Runs `f` on a new thread inside the lab's client namespace.
fn in_client<T: Send + 'static>(
    lab: &Lab,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::thread::JoinHandle<T> {
    let path = format!("/var/run/netns/{}", lab.ns("c"));
    std::thread::spawn(move || {
        let fd = std::fs::File::open(&path).expect("open netns");
        nix::sched::setns(&fd, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
        f()
    })
}

fn failed(answers: &[String]) -> Vec<&String> {
    answers.iter().filter(|a| a.starts_with("FAILED")).collect()
}

/// (a) The backends sit off the balancer's backend subnet (/30), so tunnels
/// go through the router, whose MAC is not configured: Spillway resolves
/// it, real TCP flows, then the router's MAC changes and traffic recovers
/// at the next refresh, without a reload. The gap is printed.
#[test]
fn lab_a_router_is_resolved_and_followed_when_its_mac_changes() {
    let lab = Lab::up("gue", &[("LAB_BE_PREFIX", "30")]);
    lab.wait_status(
        &[
            "neighbour 198.18.2.1 on port 1: reachable",
            "02:53:50:00:00:fe",
        ],
        Duration::from_secs(10),
    );
    let answers = lab.requests(200);
    assert!(failed(&answers).is_empty(), "{:?}", failed(&answers));

    // A client asking all the time, on short timeouts: when each request
    // started and whether it was answered.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s2 = stop.clone();
    let t0 = Instant::now();
    let client = in_client(&lab, move || {
        let mut log = Vec::new();
        while !s2.load(std::sync::atomic::Ordering::Relaxed) {
            let at = t0.elapsed();
            let ok = !http_get(1).starts_with("FAILED");
            log.push((at, ok));
            std::thread::sleep(Duration::from_millis(20));
        }
        log
    });
    std::thread::sleep(Duration::from_secs(1));
    let changed_at = t0.elapsed();
    let moved = "02:53:50:00:00:fd";
    let br = format!("s{}br", lab.tag);
    lab.ip("r", &["link", "set", "dev", &br, "address", moved]);
    // The backends' kernels would keep sending replies to the old MAC for
    // their own reachable time: forget it there, so that what is measured
    // is the balancer's side.
    for b in ["b1", "b2", "b3"] {
        lab.ip(b, &["neigh", "flush", "all"]);
    }
    let status = lab.wait_status(
        &["neighbour 198.18.2.1 on port 1: reachable", moved],
        Duration::from_secs(15),
    );
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let log = client.join().expect("client");
    let last_ok_before = log
        .iter()
        .filter(|(at, ok)| *ok && *at < changed_at)
        .map(|(at, _)| *at)
        .max()
        .expect("answered before the change");
    let first_ok_after = log
        .iter()
        .find(|(at, ok)| *ok && *at > changed_at)
        .map(|(at, _)| *at)
        .unwrap_or_else(|| panic!("never answered after the MAC change:\n{status}"));
    let lost = log
        .iter()
        .filter(|(at, ok)| !*ok && *at > changed_at)
        .count();
    eprintln!(
        "router MAC changed at {:.2} s: last answer before {:.2} s, first after {:.2} s: gap {:.2} s ({lost} requests failed; refresh: reachable 2 s + up to 2 probes 500 ms apart)",
        changed_at.as_secs_f64(),
        last_ok_before.as_secs_f64(),
        first_ok_after.as_secs_f64(),
        (first_ok_after - last_ok_before).as_secs_f64()
    );
    assert!(status.contains("reloads 0 ok / 0 rejected"), "{status}");
    let answers = lab.requests(100);
    assert!(failed(&answers).is_empty(), "{:?}", failed(&answers));
}

/// (b) l2dsr backends without `mac`: resolved, traffic flows to all three;
/// backend1 stops answering ARP and becomes ineligible for new
/// connections (status shows it), which go to the other two.
#[test]
fn lab_l2dsr_backends_are_resolved_and_one_that_stops_answering_gets_no_new_flows() {
    let lab = Lab::up("l2dsr", &[]);
    for b in ["198.18.2.11", "198.18.2.12", "198.18.2.13"] {
        lab.wait_status(
            &[&format!("neighbour {b} on port 1: reachable")],
            Duration::from_secs(10),
        );
    }
    let answers = lab.requests(300);
    assert!(failed(&answers).is_empty(), "{:?}", failed(&answers));
    let mut per = std::collections::BTreeMap::new();
    for a in &answers {
        *per.entry(a.clone()).or_insert(0usize) += 1;
    }
    assert_eq!(per.len(), 3, "every backend answered: {per:?}");

    lab.ip(
        "b1",
        &[
            "link",
            "set",
            "dev",
            &format!("s{}b1", lab.tag),
            "arp",
            "off",
        ],
    );
    let t = Instant::now();
    let status = lab.wait_status(
        &["neighbour 198.18.2.11 on port 1: failed"],
        Duration::from_secs(15),
    );
    eprintln!(
        "backend1 failed {:.2} s after it stopped answering ARP",
        t.elapsed().as_secs_f64()
    );
    assert!(
        status
            .lines()
            .any(|l| l.contains("198.18.2.11") && l.contains("ineligible (neighbour unresolved)")),
        "{status}"
    );
    let answers = lab.requests(300);
    assert!(failed(&answers).is_empty(), "{:?}", failed(&answers));
    assert!(
        answers.iter().all(|a| a != "backend1"),
        "new connections avoid backend1: {answers:?}"
    );
    let metrics_sock = lab.dir.join("control.sock");
    let out = common::run_ok(
        Command::new(env!("CARGO_BIN_EXE_spillway"))
            .args(["stats", "--socket"])
            .arg(&metrics_sock),
    );
    eprintln!("{}", String::from_utf8_lossy(&out.stdout));
}
