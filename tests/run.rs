//! `spillway run` as a process: DPDK net_pcap ports, real workers, the
//! control socket, reloads (valid and invalid), clean shutdown on SIGTERM.

#![allow(clippy::cast_possible_truncation)] // test values are small
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

use common::{read_pcap, spillway, text, write_pcap};
use std::net::Ipv4Addr;
use testkit::config::{endpoint_list, group, rule, service as service_table};
use testkit::mutate::Mutator;
use testkit::packet::{Packet, arp_request, v4};
use wire::encap::{DecapConfig, parse_tunnel};

fn config(dir: &Path, service: &str) -> String {
    common::pcap_daemon_config(dir, service, false)
}

struct Daemon(Child);

impl Daemon {
    /// `spillway run --config cfg`, stdout piped (its exit report), stderr
    /// piped or discarded.
    fn start(cfg: &Path, keep_stderr: bool) -> Daemon {
        let stderr = if keep_stderr {
            std::process::Stdio::piped()
        } else {
            std::process::Stdio::null()
        };
        Daemon(
            Command::new(env!("CARGO_BIN_EXE_spillway"))
                .args(["run", "--config", cfg.to_str().expect("utf-8")])
                .env("RUST_LOG", "info")
                .stdout(std::process::Stdio::piped())
                .stderr(stderr)
                .spawn()
                .expect("start spillway run"),
        )
    }

    /// SIGTERM, then wait (at most 10 s) for the exit status.
    fn terminate(&mut self) -> std::process::ExitStatus {
        let pid = self.0.id().to_string();
        common::run_ok(Command::new("kill").args(["-TERM", &pid]));
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(s) = self.0.try_wait().expect("wait") {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "spillway run did not stop on SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn read_stdout(d: &mut Daemon) -> String {
    let mut out = String::new();
    if let Some(mut o) = d.0.stdout.take() {
        let _ = std::io::Read::read_to_string(&mut o, &mut out);
    }
    out
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `spillway status` once it contains `what` (within 20 s; fails if the
/// daemon exits first).
fn status_with(daemon: &mut Daemon, socket: &str, what: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let status = text(&spillway(&["status", "--socket", socket]));
        if status.contains(what) {
            return status;
        }
        if let Ok(Some(s)) = daemon.0.try_wait() {
            panic!("spillway run exited: {s}");
        }
        assert!(Instant::now() < deadline, "never saw {what:?}:\n{status}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn stat(socket: &str, key: &str) -> Option<u64> {
    let out = spillway(&["stats", "--socket", socket]);
    let t = text(&out);
    t.lines().find_map(|l| {
        l.split(';').find_map(|part| {
            let part = part.trim();
            part.strip_prefix(key)
                .and_then(|v| v.trim().split(' ').next()?.parse().ok())
        })
    })
}

#[test]
fn the_daemon_forwards_reloads_and_stops_cleanly() {
    let dir: PathBuf = std::env::temp_dir().join(format!("spillway-run-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let frames: Vec<Vec<u8>> = (0..500).map(common::dns_query).collect();
    write_pcap(&dir.join("in.pcap"), &frames);
    write_pcap(&dir.join("empty.pcap"), &[]);
    let cfg = dir.join("spillway.toml");
    std::fs::write(&cfg, config(&dir, "dns")).expect("config");
    let check = spillway(&["check-config", cfg.to_str().expect("utf-8")]);
    assert!(check.status.success(), "{}", text(&check));

    let mut daemon = Daemon::start(&cfg, true);
    let socket = dir.join("ctl.sock");
    let socket_s = socket.to_str().expect("utf-8").to_owned();

    let deadline = Instant::now() + Duration::from_secs(20);
    let mut forwarded = None;
    while Instant::now() < deadline {
        if let Some(n) = stat(&socket_s, "forwarded") {
            forwarded = Some(n);
            if n >= 500 {
                break;
            }
        }
        if let Ok(Some(status)) = daemon.0.try_wait() {
            panic!("spillway run exited early: {status}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(forwarded, Some(500), "every datagram forwarded");

    // The worker runs pinned to its configured core (worker_cores = [1]),
    // the management thread on core 0.
    if std::thread::available_parallelism().map_or(1, |n| n.get()) >= 2 {
        let pid = daemon.0.id();
        let affinity = |comm: &str| {
            std::fs::read_dir(format!("/proc/{pid}/task"))
                .expect("tasks")
                .flatten()
                .find(|t| {
                    std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim() == comm)
                })
                .and_then(|t| std::fs::read_to_string(t.path().join("status")).ok())
                .and_then(|st| {
                    st.lines().find_map(|l| {
                        l.strip_prefix("Cpus_allowed_list:")
                            .map(|v| v.trim().to_owned())
                    })
                })
        };
        assert_eq!(affinity("spillway-w0").as_deref(), Some("1"));
        assert_eq!(affinity("spillway").as_deref(), Some("0"));
    }

    // `spillway flows`: one entry per client port, filters combine.
    let all = text(&spillway(&["flows", "--socket", &socket_s, "--limit", "3"]));
    assert!(
        all.contains("500 matching flows of 500 live entries (3 listed"),
        "{all}"
    );
    let first = all.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("udp 192.0.2.1:")
            && first.contains(" -> 10.0.0.10:53 service dns backend 10.0.1.1"),
        "{first}"
    );
    let count = |args: &[&str]| -> u64 {
        let mut a = vec!["flows", "--socket", &socket_s, "--limit", "0"];
        a.extend_from_slice(args);
        let out = spillway(&a);
        assert!(out.status.success(), "{}", text(&out));
        let t = text(&out);
        t.split(' ')
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{t}"))
    };
    let (b1, b2) = (
        count(&["--backend", "10.0.1.11"]),
        count(&["--backend", "10.0.1.12"]),
    );
    assert_eq!(b1 + b2, 500);
    assert!(b1 > 150 && b2 > 150, "both backends have flows: {b1}/{b2}");
    assert_eq!(count(&["--client", "192.0.2.1", "--vip", "10.0.0.10"]), 500);
    assert_eq!(count(&["--vip", "10.0.0.99"]), 0);
    assert_eq!(count(&["--service", "dns", "--backend", "10.0.1.11"]), b1);
    let bad = spillway(&["flows", "--socket", &socket_s, "--service", "a b"]);
    assert_eq!(bad.status.code(), Some(1), "{}", text(&bad));

    let status = spillway(&["status", "--socket", &socket_s]);
    assert!(status.status.success(), "{}", text(&status));
    assert!(
        text(&status).contains("snapshot generation 1"),
        "{}",
        text(&status)
    );

    // A valid reload (the service renamed) goes live ...
    std::fs::write(&cfg, config(&dir, "dns2")).expect("config");
    let r = spillway(&["reload", "--socket", &socket_s]);
    assert!(r.status.success(), "{}", text(&r));
    assert!(text(&r).contains("generation 2"), "{}", text(&r));
    // ... an invalid one is rejected with its errors, and changes nothing.
    std::fs::write(&cfg, "[node]\nname = 3\n").expect("config");
    let r = spillway(&["reload", "--socket", &socket_s]);
    assert_eq!(r.status.code(), Some(1), "{}", text(&r));
    assert!(text(&r).contains("spillway.toml:2:"), "{}", text(&r));
    let status = text(&spillway(&["status", "--socket", &socket_s]));
    assert!(
        status.contains("snapshot generation 2") && status.contains("reloads 1 ok / 1 rejected"),
        "{status}"
    );
    assert!(status.contains("service dns2"), "{status}");

    let code = daemon.terminate();
    assert!(code.success(), "clean exit: {code}");
    let out = read_stdout(&mut daemon);
    assert!(out.contains("mbufs in use at start, 0 at exit"), "{out}");
    assert!(!socket.exists(), "the control socket is removed on exit");

    let (mut n, mut announced) = (0, 0);
    for p in read_pcap(&dir.join("out.pcap")) {
        // M47: the backend port's own address is announced on its segment
        // (gratuitous ARP) at start.
        if p.get(12..14) == Some(&[0x08, 0x06]) {
            assert_eq!(&p[28..32], &[10, 0, 1, 2], "announces the port's address");
            announced += 1;
            continue;
        }
        let t = parse_tunnel(&p, &DecapConfig::default()).expect("GUE frame");
        assert_eq!(
            &p[t.inner_offset..t.inner_offset + t.inner_len],
            &frames[n][14..]
        );
        assert_eq!(&p[0..6], &[2, 0, 0, 0, 0, 0xfe]);
        n += 1;
    }
    assert_eq!(n, 500, "every datagram left the backend port encapsulated");
    assert!(announced > 0, "the backend port's address was announced");
    let _ = std::fs::remove_dir_all(&dir);
}

/// [`common::looping_pcap_daemon_config`] (M39's test needs traffic after
/// the signal) with `[node] shutdown_drain = drain`.
fn looping_config(dir: &Path, drain: &str) -> String {
    let text = common::looping_pcap_daemon_config(dir, "dns").replace(
        "shutdown_drain = \"0s\"",
        &format!("shutdown_drain = \"{drain}\""),
    );
    assert!(text.contains(&format!("\"{drain}\"")), "{text}");
    text
}

fn kill(daemon: &Daemon, signal: &str) {
    let pid = daemon.0.id().to_string();
    common::run_ok(Command::new("kill").args([signal, &pid]));
}

/// Waits (at most `within`) for the daemon to exit; its status.
fn exited(daemon: &mut Daemon, within: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + within;
    loop {
        if let Some(s) = daemon.0.try_wait().expect("wait") {
            return s;
        }
        assert!(Instant::now() < deadline, "spillway run did not exit");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// M37 and M39 on the daemon: `spillway drain` over the socket (unknown
/// names refused, the state saved next to the socket and restored by the
/// next run); the first SIGTERM keeps forwarding for `shutdown_drain`
/// (status says so), then the daemon exits cleanly; a second SIGTERM exits
/// at once.
#[test]
fn drain_survives_a_restart_and_sigterm_drains_before_exiting() {
    let dir: PathBuf =
        std::env::temp_dir().join(format!("spillway-shutdown-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let frames: Vec<Vec<u8>> = (0..64).map(common::dns_query).collect();
    write_pcap(&dir.join("in.pcap"), &frames);
    write_pcap(&dir.join("empty.pcap"), &[]);
    let cfg = dir.join("spillway.toml");
    std::fs::write(&cfg, looping_config(&dir, "3s")).expect("config");
    let socket = dir.join("ctl.sock");
    let sock = socket.to_str().expect("utf-8").to_owned();

    let mut daemon = Daemon::start(&cfg, false);
    status_with(&mut daemon, &sock, "node t");
    let forwarded = || stat(&sock, "forwarded").unwrap_or(0);

    // Drain over the socket.
    let bad = spillway(&["drain", "zone", "nope", "--socket", &sock]);
    assert_eq!(bad.status.code(), Some(1), "{}", text(&bad));
    assert!(
        text(&bad).contains("unknown zone \"nope\""),
        "{}",
        text(&bad)
    );
    for args in [
        ["drain", "zone", "z"],
        ["undrain", "zone", "z"],
        ["drain", "node", "t"],
    ] {
        let out = spillway(&[args[0], args[1], args[2], "--socket", &sock]);
        assert!(out.status.success(), "{args:?}: {}", text(&out));
    }
    let status = text(&spillway(&["status", "--socket", &sock]));
    assert!(
        status.contains("drained: node t\n") && !status.contains("drained: zone"),
        "{status}"
    );
    let saved = std::fs::read_to_string(dir.join("ctl.sock.drain")).expect("state file");
    assert!(saved.contains("\nnode t\n"), "{saved}");

    // First SIGTERM: still forwarding, then a clean exit.
    let t0 = Instant::now();
    kill(&daemon, "-TERM");
    let status = status_with(&mut daemon, &sock, "shutting down, ");
    let left = status
        .lines()
        .find(|l| l.starts_with("shutting down"))
        .unwrap_or_default()
        .to_owned();
    let before = forwarded();
    std::thread::sleep(Duration::from_millis(500));
    let after = forwarded();
    println!(
        "after SIGTERM: {left:?}; forwarded {before} then {after} 0.5 s later ({:.2} s since the signal)",
        t0.elapsed().as_secs_f64()
    );
    assert!(after > before, "still forwarding after the first signal");
    let code = exited(&mut daemon, Duration::from_secs(20));
    println!(
        "exited {:.2} s after SIGTERM (shutdown_drain 3 s)",
        t0.elapsed().as_secs_f64()
    );
    assert!(code.success(), "clean exit: {code}");
    let out = read_stdout(&mut daemon);
    assert!(out.contains("mbufs in use at start, 0 at exit"), "{out}");

    // The next run restores the drain; a second SIGTERM exits at once
    // (shutdown_drain 60 s would outlast the wait below).
    std::fs::write(&cfg, looping_config(&dir, "60s")).expect("config");
    let mut daemon = Daemon::start(&cfg, false);
    status_with(&mut daemon, &sock, "drained: node t\n");
    kill(&daemon, "-TERM");
    status_with(&mut daemon, &sock, "shutting down, ");
    let t1 = Instant::now();
    kill(&daemon, "-TERM");
    let code = exited(&mut daemon, Duration::from_secs(20));
    println!(
        "exited {:.2} s after the second SIGTERM (shutdown_drain 60 s)",
        t1.elapsed().as_secs_f64()
    );
    assert!(code.success(), "clean exit: {code}");
    let out = read_stdout(&mut daemon);
    assert!(out.contains("mbufs in use at start, 0 at exit"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Valid frames of many kinds, then mutated by the kit's mutator (flipped
/// bits, truncations, random tails, rewritten EtherTypes / protocols /
/// header bytes / lengths, pure noise), and a few jumbo frames (which span
/// several chained mbufs on net_pcap).
fn fuzzed_frames(n: usize, seed: u64) -> Vec<Vec<u8>> {
    let mut m = Mutator::new(seed);
    let arp = arp_request(
        common::ROUTER_MAC,
        Ipv4Addr::new(10, 0, 0, 1),
        Ipv4Addr::new(10, 0, 0, 10),
    );
    (0..n)
        .map(|i| {
            let mut f = match m.below(4) {
                0 => arp.clone(),
                _ => common::dns_query(i as u16),
            };
            if i % 97 == 0 && m.below(8) == 0 {
                m.grow(&mut f, 3000..9000, 0x5a);
            } else {
                m.mutate(&mut f);
            }
            f
        })
        .collect()
}

#[test]
fn the_daemon_survives_fuzzed_frames_on_dpdk_ports_without_leaking_mbufs() {
    let dir: PathBuf =
        std::env::temp_dir().join(format!("spillway-run-fuzz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let frames = fuzzed_frames(20_000, 0x5eed_f00d);
    write_pcap(&dir.join("in.pcap"), &frames);
    write_pcap(&dir.join("empty.pcap"), &[]);
    let cfg = dir.join("spillway.toml");
    std::fs::write(&cfg, config(&dir, "dns")).expect("config");
    let mut daemon = Daemon::start(&cfg, true);
    let socket_s = dir.join("ctl.sock").to_str().expect("utf-8").to_owned();

    // Every frame is received and accounted for; the daemon stays up.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut rx = None;
    while Instant::now() < deadline {
        rx = stat(&socket_s, "rx");
        if rx == Some(frames.len() as u64) {
            break;
        }
        if let Ok(Some(status)) = daemon.0.try_wait() {
            panic!("spillway run died on fuzzed input: {status}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(rx, Some(frames.len() as u64), "every frame received");
    let stats = text(&spillway(&["stats", "--socket", &socket_s]));
    assert!(stats.contains("drop malformed: "), "{stats}");
    assert!(
        !stats.contains("drop malformed: 0\n"),
        "mutations were seen as malformed: {stats}"
    );

    let code = daemon.terminate();
    let out = read_stdout(&mut daemon);
    assert!(code.success(), "clean exit: {code}\n{out}");
    assert!(out.contains("mbufs in use at start, 0 at exit"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// M38: editing the file is enough; a broken edit is refused and the
/// running configuration stays; an edit that removes something the
/// running file sets (here: a service renamed) waits for `spillway
/// reload`, since a file cut short looks like that too.
#[test]
fn the_daemon_reloads_when_its_file_changes() {
    let dir: PathBuf =
        std::env::temp_dir().join(format!("spillway-run-watch-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    write_pcap(&dir.join("in.pcap"), &[]);
    write_pcap(&dir.join("empty.pcap"), &[]);
    let cfg = dir.join("spillway.toml");
    let first = common::pcap_daemon_config(&dir, "dns", true);
    std::fs::write(&cfg, &first).expect("config");
    let mut daemon = Daemon::start(&cfg, false);
    let socket_s = dir.join("ctl.sock").to_str().expect("utf-8").to_owned();
    let wait_for = |what: &str, daemon: &mut Daemon| status_with(daemon, &socket_s, what);
    wait_for("snapshot generation 1", &mut daemon);

    // A service and its rule added.
    let added = first.replace(
        "[control]",
        "[[forwarding_rules]]\nname = \"dns2\"\nvips = [\"10.0.0.11\"]\nprotocol = \"UDP\"\nports = 53\nbackend_service = \"dns2\"\n\n\
         [[backend_services]]\nname = \"dns2\"\ndelivery = \"gue\"\ngroups = [{ name = \"a\", region = \"r\", zone = \"z\", endpoints = [{ address = \"10.0.1.13\" }] }]\n\n[control]",
    );
    std::fs::write(&cfg, &added).expect("config");
    let s = wait_for("service dns2", &mut daemon);
    assert!(
        s.contains("snapshot generation 2, reloads 1 ok / 0 rejected")
            && s.contains("service dns:"),
        "{s}"
    );

    // Renamed: the watch does not apply it; `spillway reload` does.
    std::fs::write(&cfg, common::pcap_daemon_config(&dir, "dns3", true)).expect("config");
    let s = wait_for("reloads 1 ok / 1 rejected", &mut daemon);
    assert!(
        s.contains("the file watch does not apply it")
            && s.contains("backend_services[dns]")
            && s.contains("service dns2"),
        "{s}"
    );
    let out = spillway(&["reload", "--socket", &socket_s]);
    assert!(out.status.success(), "{}", text(&out));
    let s = wait_for("service dns3", &mut daemon);
    assert!(s.contains("reloads 2 ok / 1 rejected"), "{s}");

    std::fs::write(&cfg, "[node]\nname = 3\n").expect("config");
    let s = wait_for("reloads 2 ok / 2 rejected", &mut daemon);
    assert!(s.contains("service dns3"), "{s}");
    assert!(s.contains("spillway.toml:2:"), "the error is shown: {s}");
    // Nothing more happens while the file stays as it is.
    std::thread::sleep(Duration::from_millis(800));
    let s = text(&spillway(&["status", "--socket", &socket_s]));
    assert!(s.contains("reloads 2 ok / 2 rejected"), "{s}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// M38: a file cut short right after `[node]` is a valid
/// configuration without rules; going live it would withdraw every VIP. The
/// file watch refuses it (it removes what the running file sets), and so
/// does `spillway reload` (no rules); `spillway reload --force` applies it.
#[test]
fn a_half_written_file_never_goes_live_unless_forced() {
    let dir: PathBuf =
        std::env::temp_dir().join(format!("spillway-run-truncated-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    write_pcap(&dir.join("in.pcap"), &[]);
    write_pcap(&dir.join("empty.pcap"), &[]);
    let cfg = dir.join("spillway.toml");
    let full = common::pcap_daemon_config(&dir, "dns", true);
    std::fs::write(&cfg, &full).expect("config");
    let mut daemon = Daemon::start(&cfg, false);
    let socket_s = dir.join("ctl.sock").to_str().expect("utf-8").to_owned();
    let wait_for = |what: &str, daemon: &mut Daemon| status_with(daemon, &socket_s, what);
    wait_for("snapshot generation 1", &mut daemon);
    // The file as an editor or a copy might leave it halfway: `[node]` only.
    let cut = &full[..full.find("[dataplane]").expect("dataplane section")];
    assert!(
        spillway(&["check-config", cfg.to_str().expect("utf-8")])
            .status
            .success(),
        "the full file checks"
    );
    std::fs::write(&cfg, cut).expect("config");
    let s = wait_for("reloads 0 ok / 1 rejected", &mut daemon);
    assert!(
        s.contains("snapshot generation 1") && s.contains("service dns"),
        "{s}"
    );
    assert!(
        s.contains("the file watch does not apply it") && s.contains("spillway reload"),
        "{s}"
    );
    // The CLI (and SIGHUP) refuse it as well: no rules.
    let out = spillway(&["reload", "--socket", &socket_s]);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("no forwarding rules") && text(&out).contains("reload --force"),
        "{}",
        text(&out)
    );
    let s = wait_for("reloads 0 ok / 2 rejected", &mut daemon);
    assert!(s.contains("snapshot generation 1"), "{s}");
    // Forced, it goes live.
    let out = spillway(&["reload", "--force", "--socket", &socket_s]);
    assert!(out.status.success(), "{}", text(&out));
    let s = wait_for("reloads 1 ok / 2 rejected", &mut daemon);
    assert!(
        s.contains("snapshot generation 2") && !s.contains("service dns"),
        "{s}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A fake remote Spillway: answers `GET /status` with `rule web <state>`.
fn fake_remote(healthy: std::sync::Arc<std::sync::atomic::AtomicBool>) -> u16 {
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            let mut buf = [0u8; 512];
            let _ = s.read(&mut buf);
            let state = if healthy.load(std::sync::atomic::Ordering::Relaxed) {
                "HEALTHY"
            } else {
                "UNHEALTHY"
            };
            let _ = write!(
                s,
                "HTTP/1.0 200 OK\r\n\r\nrule other HEALTHY\nrule web {state}\n"
            );
        }
    });
    port
}

fn http_get(port: u16, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    write!(s, "GET {path} HTTP/1.0\r\n\r\n").expect("send");
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

/// M21: the daemon exports every rule's state over HTTP, and a
/// `remote_rule` group follows the state another Spillway exports.
#[test]
fn rule_states_are_exported_and_remote_rules_are_followed() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let dir: PathBuf =
        std::env::temp_dir().join(format!("spillway-run-remote-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    write_pcap(&dir.join("in.pcap"), &[]);
    write_pcap(&dir.join("empty.pcap"), &[]);
    let healthy = Arc::new(AtomicBool::new(true));
    let remote = fake_remote(healthy.clone());
    let http_port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let cfg = dir.join("spillway.toml");
    let toml = config(&dir, "dns").replace(
        "[control]",
        &format!(
            r#"[[forwarding_rules]]
name = "far"
vips = ["10.0.0.11"]
protocol = "UDP"
ports = 53
backend_service = "far"

[[backend_services]]
name = "far"
delivery = "gue"
[[backend_services.groups]]
name = "tier2"
region = "r"
zone = "z"
kind = "remote_rule"
remote = {{ status_url = "http://127.0.0.1:{remote}/status", rule = "web", vip = "10.9.9.9" }}

[metrics]
listen = "127.0.0.1:{http_port}"

[control]"#
        ),
    );
    std::fs::write(&cfg, toml).expect("config");
    let check = spillway(&["check-config", cfg.to_str().expect("utf-8")]);
    assert!(check.status.success(), "{}", text(&check));
    let mut daemon = Daemon::start(&cfg, false);
    let socket_s = dir.join("ctl.sock").to_str().expect("utf-8").to_owned();
    let mut wait_for = |what: &str| -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let status = text(&spillway(&["status", "--socket", &socket_s]));
            if status.contains(what) {
                return status;
            }
            if let Ok(Some(s)) = daemon.0.try_wait() {
                panic!("spillway run exited: {s}");
            }
            assert!(Instant::now() < deadline, "never saw {what:?}:\n{status}");
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let s = wait_for("rule far: HEALTHY");
    assert!(s.contains("remote rule web at http://127.0.0.1:"), "{s}");
    assert!(
        s.contains("service far: gue (port 6080) (1 eligible backends)"),
        "{s}"
    );
    let st = http_get(http_port, "/status");
    assert!(st.starts_with("HTTP/1.0 200"), "{st}");
    assert!(
        st.contains("rule dns HEALTHY\n") && st.contains("rule far HEALTHY\n"),
        "{st}"
    );
    let m = http_get(http_port, "/metrics");
    assert!(m.contains("spillway_rx_packets_total 0"), "{m}");
    assert!(m.contains("spillway_rule_healthy{rule=\"far\"} 1"), "{m}");
    assert!(http_get(http_port, "/nope").starts_with("HTTP/1.0 404"));

    // The remote rule turns UNHEALTHY: so does ours, and its group takes
    // no new connections.
    healthy.store(false, Ordering::Relaxed);
    let s = wait_for("rule far: UNHEALTHY");
    assert!(
        s.contains("service far: gue (port 6080) (0 eligible backends)"),
        "{s}"
    );
    assert!(http_get(http_port, "/status").contains("rule far UNHEALTHY\n"));
    healthy.store(true, Ordering::Relaxed);
    wait_for("rule far: HEALTHY");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Where a slow client trickles its bytes.
#[derive(Clone)]
enum Listener {
    Socket(PathBuf),
    Http(u16),
}

/// A slowloris: connects to `to` and sends one byte per second of a
/// request that never ends; when the daemon closes the connection, connects
/// again; until `until` or `stop`. Returns how many connections it made.
fn trickler(
    to: Listener,
    until: Instant,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<u32> {
    use std::io::Write;
    use std::sync::atomic::Ordering;
    std::thread::spawn(move || {
        let mut connections = 0;
        let running = || Instant::now() < until && !stop.load(Ordering::Relaxed);
        while running() {
            let (mut s, request): (Box<dyn Write>, &[u8]) = match &to {
                Listener::Socket(p) => match std::os::unix::net::UnixStream::connect(p) {
                    Ok(s) => {
                        let _ = s.set_write_timeout(Some(Duration::from_secs(1)));
                        (Box::new(s), b"stats ")
                    }
                    Err(_) => {
                        std::thread::sleep(Duration::from_millis(200));
                        continue;
                    }
                },
                Listener::Http(port) => {
                    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], *port));
                    match std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)) {
                        Ok(s) => {
                            let _ = s.set_write_timeout(Some(Duration::from_secs(1)));
                            (Box::new(s), b"GET /status HTTP/1.0\r\nX-Slow: ")
                        }
                        Err(_) => {
                            std::thread::sleep(Duration::from_millis(200));
                            continue;
                        }
                    }
                }
            };
            connections += 1;
            // The request never ends: after its start, one 'a' a second.
            let bytes = request.iter().copied().chain(std::iter::repeat(b'a'));
            for b in bytes {
                if !running() || s.write_all(&[b]).is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_secs(1));
            }
        }
        connections
    })
}

/// `GET path` on 127.0.0.1:port with a deadline of its own; "" on failure.
fn http_get_within(port: u16, path: &str, within: Duration) -> String {
    use std::io::{Read, Write};
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let Ok(mut s) = std::net::TcpStream::connect_timeout(&addr, within) else {
        return String::new();
    };
    let _ = s.set_read_timeout(Some(within));
    let _ = s.set_write_timeout(Some(within));
    if write!(s, "GET {path} HTTP/1.0\r\n\r\n").is_err() {
        return String::new();
    }
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

/// An HTTP server for health checks: 200 while `healthy`, else 503.
fn health_server(healthy: std::sync::Arc<std::sync::atomic::AtomicBool>) -> u16 {
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf);
            let code = if healthy.load(std::sync::atomic::Ordering::Relaxed) {
                "200 OK"
            } else {
                "503 Service Unavailable"
            };
            let _ = write!(s, "HTTP/1.0 {code}\r\nContent-Length: 0\r\n\r\n");
        }
    });
    port
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

/// M50: 50 connections trickling one byte a second to each listener
/// (the control socket and HTTP) delay neither reloads, nor health
/// transitions, nor SIGTERM, nor the answers to other clients. Each is
/// timed once without and once with the slow clients, and printed; what is
/// asserted is only that each happened while the trickle was still going.
#[test]
fn slow_clients_do_not_stall_the_management_core() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let dir: PathBuf =
        std::env::temp_dir().join(format!("spillway-run-slow-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    write_pcap(&dir.join("in.pcap"), &[]);
    write_pcap(&dir.join("empty.pcap"), &[]);
    let healthy = Arc::new(AtomicBool::new(true));
    let hc_port = health_server(healthy.clone());
    let http_port = free_port();
    let with_extras = |service: &str| {
        common::pcap_daemon_config(&dir, service, true).replace(
            "[control]",
            &format!(
                r#"[[forwarding_rules]]
name = "hc"
vips = ["10.0.0.12"]
protocol = "UDP"
ports = 53
backend_service = "hc"

[[backend_services]]
name = "hc"
delivery = "gue"
health_check = "probe"
[[backend_services.groups]]
name = "a"
region = "r"
zone = "z"
endpoints = [{{ address = "127.0.0.1" }}]

[[health_checks]]
name = "probe"
type = "HTTP"
port = {hc_port}
interval = "1s"
timeout = "500ms"
healthy_threshold = 1
unhealthy_threshold = 1

[metrics]
listen = "127.0.0.1:{http_port}"
# The 50 slow clients and the timed ones all come from 127.0.0.1 here:
# the per-client cap (one_client_cannot_hold_every_status_slot) stays out
# of the way.
max_connections_per_client = 60

[control]"#
            ),
        )
    };
    let cfg = dir.join("spillway.toml");
    std::fs::write(&cfg, with_extras("dns")).expect("config");
    let check = spillway(&["check-config", cfg.to_str().expect("utf-8")]);
    assert!(check.status.success(), "{}", text(&check));
    let mut daemon = Daemon::start(&cfg, false);
    let socket = dir.join("ctl.sock");
    let socket_s = socket.to_str().expect("utf-8").to_owned();
    let status = || text(&spillway(&["status", "--socket", &socket_s]));
    let exported = || http_get_within(http_port, "/status", Duration::from_secs(2));
    let wait_until = |what: &str, done: &dyn Fn() -> bool, deadline: Instant| -> Instant {
        while !done() {
            assert!(Instant::now() < deadline, "{what}: never happened");
            std::thread::sleep(Duration::from_millis(100));
        }
        Instant::now()
    };
    let startup = Instant::now() + Duration::from_secs(20);
    wait_until(
        "healthy at start",
        &|| exported().contains("rule hc HEALTHY\n"),
        startup,
    );

    // A reload (the file changes, a service renamed: which the file
    // watch leaves to an operator, so SIGHUP) and a health transition (the
    // checked server answers 503), timed.
    let pid = daemon.0.id().to_string();
    let reload_to = |service: &str, deadline: Instant| {
        let t0 = Instant::now();
        std::fs::write(&cfg, with_extras(service)).expect("config");
        common::run_ok(Command::new("kill").args(["-HUP", &pid]));
        let seen = format!("service {service}:");
        let what = format!("the reload to {service}");
        let at = wait_until(&what, &|| status().contains(&seen), deadline);
        (at, at - t0)
    };
    let health_down = |deadline: Instant| {
        let t0 = Instant::now();
        healthy.store(false, Ordering::Relaxed);
        let at = wait_until(
            "the health transition",
            &|| exported().contains("rule hc UNHEALTHY\n"),
            deadline,
        );
        (at, at - t0)
    };
    let (_, reload_alone) = reload_to("dns1", startup);
    let (_, health_alone) = health_down(startup);
    healthy.store(true, Ordering::Relaxed);
    wait_until(
        "healthy again",
        &|| exported().contains("rule hc HEALTHY\n"),
        startup + Duration::from_secs(10),
    );

    // 50 slow clients on each listener, for at most 40 s.
    let trickle_start = Instant::now();
    let trickle_end = trickle_start + Duration::from_secs(40);
    let stop = Arc::new(AtomicBool::new(false));
    let tricklers: Vec<_> = (0..100)
        .map(|i| {
            let to = if i % 2 == 0 {
                Listener::Socket(socket.clone())
            } else {
                Listener::Http(http_port)
            };
            trickler(to, trickle_end, stop.clone())
        })
        .collect();
    std::thread::sleep(Duration::from_secs(2));

    let (reloaded, reload_slowed) = reload_to("dns2", trickle_end);
    let (unhealthy, health_slowed) = health_down(trickle_end);
    println!(
        "reload live after the file changed: {:.2} s alone, {:.2} s with 2 x 50 slow clients",
        reload_alone.as_secs_f64(),
        reload_slowed.as_secs_f64()
    );
    println!(
        "health transition exported after the server failed: {:.2} s alone, {:.2} s with slow clients",
        health_alone.as_secs_f64(),
        health_slowed.as_secs_f64()
    );
    assert!(reloaded < trickle_end && unhealthy < trickle_end);

    // The listeners cut the slow clients off at their deadline (5 s by
    // default) and count them.
    let timed_out = |listener: &str| -> u64 {
        let s = text(&spillway(&["stats", "--socket", &socket_s]));
        s.lines()
            .find_map(|l| l.strip_prefix(&format!("listener {listener}: ")))
            .and_then(|l| {
                l.split("; ")
                    .find_map(|p| p.strip_suffix(" timed out")?.parse().ok())
            })
            .unwrap_or_else(|| panic!("no listener {listener} in stats:\n{s}"))
    };
    wait_until(
        "50 slow clients cut off on each listener",
        &|| timed_out("control") >= 50 && timed_out("http") >= 50,
        trickle_end,
    );
    let m = http_get_within(http_port, "/metrics", Duration::from_secs(5));
    assert!(
        m.contains("spillway_listener_connections_total{listener=\"http\",outcome=\"timed_out\"}"),
        "{m}"
    );

    // SIGTERM stops the daemon at once, slow clients or not.
    let t0 = Instant::now();
    let code = daemon.terminate();
    let stopped = Instant::now();
    println!(
        "stopped {:.2} s after SIGTERM, with slow clients",
        (stopped - t0).as_secs_f64()
    );
    assert!(code.success(), "clean exit: {code}");
    assert!(
        stopped < trickle_end,
        "stopped only after the slow clients were done"
    );
    stop.store(true, Ordering::Relaxed);
    let connections: u32 = tricklers
        .into_iter()
        .map(|t| t.join().expect("trickler"))
        .sum();
    println!("slow clients made {connections} connections in all");
    assert!(!socket.exists(), "the control socket is removed on exit");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A client at 127.0.0.1 grabbing every HTTP slot it can: each of its
/// threads opens a connection, sends nothing and waits for the daemon to
/// close it (408 at the deadline, or 503 at once), then opens the next at
/// once (after a 503: 100 ms later). (Sending nothing: a connection closed
/// with its request unread is reset, and its 503 with it.) Returns how
/// many 503s it got; `refusals` counts them as they come.
fn slot_grabber(
    port: u16,
    refusals: std::sync::Arc<std::sync::atomic::AtomicU64>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<u64> {
    use std::io::Read;
    use std::sync::atomic::Ordering;
    std::thread::spawn(move || {
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        let mut busy = 0;
        while !stop.load(Ordering::Relaxed) {
            let Ok(mut s) = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1))
            else {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            };
            let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
            let mut answer = [0u8; 12];
            let n = s.read(&mut answer).unwrap_or(0);
            if answer
                .get(..n)
                .is_some_and(|a| a.starts_with(b"HTTP/1.0 503"))
            {
                busy += 1;
                refusals.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        busy
    })
}

/// `GET path` on 127.0.0.1:port from 127.0.0.2 (another client to the
/// daemon; the whole 127/8 is this host), within `within`; "" on failure.
fn http_get_from_another_address(port: u16, path: &str, within: Duration) -> String {
    use std::io::{Read, Write};
    let s =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("socket");
    let from = std::net::SocketAddr::from(([127, 0, 0, 2], 0));
    s.bind(&from.into()).expect("bind 127.0.0.2");
    let to = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    if s.connect_timeout(&to.into(), within).is_err() {
        return String::new();
    }
    let mut s: std::net::TcpStream = s.into();
    let _ = s.set_read_timeout(Some(within));
    let _ = s.set_write_timeout(Some(within));
    if write!(s, "GET {path} HTTP/1.0\r\n\r\n").is_err() {
        return String::new();
    }
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

/// M50, M21: one client on an allowed address that opens as many slow
/// connections as it can (more than `max_connections`) holds at most
/// `max_connections_per_client` of the HTTP slots (the defaults: 8 of 64);
/// another client (as another Spillway polling `/status` for a
/// `remote_rule` group) is still answered, within the poll deadline, every
/// time; the first client's extra connections are refused and counted.
#[test]
fn one_client_cannot_hold_every_status_slot() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let dir: PathBuf =
        std::env::temp_dir().join(format!("spillway-run-per-client-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    write_pcap(&dir.join("in.pcap"), &[]);
    write_pcap(&dir.join("empty.pcap"), &[]);
    let http_port = free_port();
    let cfg = dir.join("spillway.toml");
    let toml = config(&dir, "dns").replace(
        "[control]",
        &format!("[metrics]\nlisten = \"127.0.0.1:{http_port}\"\n\n[control]"),
    );
    std::fs::write(&cfg, toml).expect("config");
    let mut daemon = Daemon::start(&cfg, false);
    let socket_s = dir.join("ctl.sock").to_str().expect("utf-8").to_owned();
    wait_until_up(&mut daemon, &socket_s);
    let within = control::remote::DEADLINE;
    assert!(
        http_get_from_another_address(http_port, "/status", within).contains("rule dns HEALTHY\n"),
        "/status from 127.0.0.2 before the grab"
    );

    // 96 connections at once from 127.0.0.1: more than the 64 the listener
    // serves.
    let refusals = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let grabbers: Vec<_> = (0..96)
        .map(|_| slot_grabber(http_port, refusals.clone(), stop.clone()))
        .collect();
    let end = Instant::now() + Duration::from_secs(60);
    // Until the grabber is turned away: it holds all it can get.
    while refusals.load(Ordering::Relaxed) < 100 {
        assert!(Instant::now() < end, "the grabber was never turned away");
        std::thread::sleep(Duration::from_millis(50));
    }
    let http_stats = || -> String {
        let stats = text(&spillway(&["stats", "--socket", &socket_s]));
        stats
            .lines()
            .find_map(|l| l.strip_prefix("listener http: "))
            .unwrap_or_else(|| panic!("no listener http in stats:\n{stats}"))
            .to_owned()
    };
    let count = |line: &str, suffix: &str| -> u64 {
        line.split("; ")
            .find_map(|p| p.strip_suffix(suffix)?.parse().ok())
            .unwrap_or_else(|| panic!("no {suffix:?} in {line}"))
    };
    // Polled like a remote_rule group does (within its deadline), and
    // answered every time: at least 5 times, and until the grabber's
    // connections were cut off at their deadline (5 s) and it grabbed
    // again.
    let mut poll = 0;
    let line = loop {
        let t0 = Instant::now();
        let st = http_get_from_another_address(http_port, "/status", within);
        println!(
            "poll {poll} from 127.0.0.2 while 127.0.0.1 grabbed slots: {:?} after {} refusals: {:?}",
            t0.elapsed(),
            refusals.load(Ordering::Relaxed),
            st.lines().next().unwrap_or("no answer")
        );
        assert!(
            st.starts_with("HTTP/1.0 200 ") && st.contains("rule dns HEALTHY\n"),
            "poll {poll}: {st:?}"
        );
        poll += 1;
        let line = http_stats();
        if poll >= 5 && count(&line, " timed out") >= 8 {
            break line;
        }
        assert!(
            Instant::now() < end,
            "the grabber was never cut off: {line}"
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    println!("listener http: {line}");
    assert!(
        count(&line, " refused per client (over 8 from one client)") >= 100,
        "{line}"
    );
    assert_eq!(count(&line, " refused (over 64 connections)"), 0, "{line}");
    let m = http_get_from_another_address(http_port, "/metrics", Duration::from_secs(5));
    assert!(
        m.contains(
            "spillway_listener_connections_total{listener=\"http\",outcome=\"per_client_limit\"} "
        ),
        "{m}"
    );
    // Stopped first: it closes the grabber's connections.
    stop.store(true, Ordering::Relaxed);
    assert!(daemon.terminate().success());
    let busy: u64 = grabbers
        .into_iter()
        .map(|g| g.join().expect("grabber"))
        .sum();
    println!("the grabber was answered 503 {busy} times");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Whether this process runs as root (needed to act as another user).
fn root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// `spillway args…` as user and group nobody (65534).
fn spillway_as_nobody(args: &[&str]) -> Output {
    use std::os::unix::process::CommandExt;
    Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(args)
        .uid(65534)
        .gid(65534)
        .output()
        .expect("run spillway as nobody")
}

/// Waits until `spillway status` answers on `socket`.
fn wait_until_up(daemon: &mut Daemon, socket: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let out = spillway(&["status", "--socket", socket]);
        if out.status.success() {
            return;
        }
        if let Ok(Some(s)) = daemon.0.try_wait() {
            panic!("spillway run exited: {s}");
        }
        assert!(Instant::now() < deadline, "never up: {}", text(&out));
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// M50: the control socket is 0660, in its configured group, and
/// only root, the daemon's user and the group's members may use it, even
/// when its mode is loosened by hand. A `flows` listing is bounded.
#[test]
fn the_control_socket_is_0660_and_checks_its_peers() {
    use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
    assert!(root(), "this test runs a client as nobody: it needs root");
    let dir: PathBuf =
        std::env::temp_dir().join(format!("spillway-run-perm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    // nobody must reach the socket's directory to be refused by the socket.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    write_pcap(&dir.join("in.pcap"), &[]);
    write_pcap(&dir.join("empty.pcap"), &[]);
    let cfg = dir.join("spillway.toml");
    let socket = dir.join("ctl.sock");
    let socket_s = socket.to_str().expect("utf-8").to_owned();

    // The daemon's own group (root): nobody may not connect.
    std::fs::write(&cfg, config(&dir, "dns")).expect("config");
    let mut daemon = Daemon::start(&cfg, false);
    wait_until_up(&mut daemon, &socket_s);
    let m = std::fs::symlink_metadata(&socket).expect("socket");
    assert!(m.file_type().is_socket());
    assert_eq!(m.mode() & 0o7777, 0o660, "mode {:o}", m.mode() & 0o7777);
    assert_eq!((m.uid(), m.gid()), (0, 0));
    let out = spillway_as_nobody(&["status", "--socket", &socket_s]);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("Permission denied"), "{}", text(&out));
    // Loosened by hand, the socket lets nobody connect; the daemon still
    // refuses the peer by its credentials, and counts it.
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    let out = spillway_as_nobody(&["status", "--socket", &socket_s]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("permission denied: uid 65534 is not root, the daemon's user (uid 0) or in the socket's group (gid 0)"),
        "{}",
        text(&out)
    );
    let stats = text(&spillway(&["stats", "--socket", &socket_s]));
    assert!(stats.contains("; 1 denied;"), "{stats}");
    // A flows listing is bounded.
    let out = spillway(&["flows", "--socket", &socket_s, "--limit", "100001"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("at most 100000 entries are listed; narrow the filter"),
        "{}",
        text(&out)
    );
    assert!(daemon.terminate().success());
    assert!(!socket.exists(), "the control socket is removed on exit");

    // socket_group = "nogroup": nobody's group may use it.
    let grouped =
        config(&dir, "dns").replace("[control]\n", "[control]\nsocket_group = \"nogroup\"\n");
    std::fs::write(&cfg, grouped).expect("config");
    let mut daemon = Daemon::start(&cfg, false);
    wait_until_up(&mut daemon, &socket_s);
    let m = std::fs::symlink_metadata(&socket).expect("socket");
    assert_eq!(m.mode() & 0o7777, 0o660);
    assert_eq!(m.gid(), 65534, "the socket is in group nogroup");
    let out = spillway_as_nobody(&["status", "--socket", &socket_s]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("snapshot generation 1"),
        "{}",
        text(&out)
    );
    assert!(daemon.terminate().success());
    let _ = std::fs::remove_dir_all(&dir);
}

/// M50: the daemon never deletes what is not a socket at its socket
/// path, and names a group that does not exist.
#[test]
fn the_daemon_refuses_a_socket_path_that_is_not_a_socket_or_an_unknown_group() {
    let dir: PathBuf =
        std::env::temp_dir().join(format!("spillway-run-path-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    write_pcap(&dir.join("in.pcap"), &[]);
    write_pcap(&dir.join("empty.pcap"), &[]);
    let cfg = dir.join("spillway.toml");
    let socket = dir.join("ctl.sock");
    let run = || {
        let mut d = Daemon::start(&cfg, true);
        let deadline = Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(s) = d.0.try_wait().expect("wait") {
                break s;
            }
            if Instant::now() > deadline {
                d.terminate();
                panic!("spillway run started anyway");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let mut err = String::new();
        if let Some(mut e) = d.0.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut e, &mut err);
        }
        (status, err)
    };

    std::fs::write(&cfg, config(&dir, "dns")).expect("config");
    std::fs::write(&socket, "operator's notes\n").expect("file");
    let (status, err) = run();
    assert!(!status.success());
    assert!(
        err.contains(&format!(
            "control socket {}: a regular file is in the way; it is not removed",
            socket.display()
        )),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(&socket).expect("still there"),
        "operator's notes\n"
    );
    std::fs::remove_file(&socket).expect("rm");

    let unknown = config(&dir, "dns").replace(
        "[control]\n",
        "[control]\nsocket_group = \"no-such-group-spw\"\n",
    );
    std::fs::write(&cfg, unknown).expect("config");
    let (status, err) = run();
    assert!(!status.success());
    assert!(
        err.contains("[control] socket_group \"no-such-group-spw\": no such group"),
        "{err}"
    );
    assert!(!socket.exists());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A daemon serving TCP 80 on 10.0.0.10 from two regions (the node's own,
/// "r", with two endpoints; "far" with one), GUE; no traffic of its own.
fn simulate_config(dir: &Path) -> String {
    let d = dir.display();
    common::pcap_daemon_base(dir, "empty.pcap")
        .rule(rule("web", &["10.0.0.10"], "TCP", "80", "web"))
        .service(
            service_table("web", "gue")
                .child(
                    group("a", "r", "z")
                        .set("endpoints", endpoint_list(&["10.0.1.11", "10.0.1.12"])),
                )
                .child(group("b", "far", "z2").set("endpoints", endpoint_list(&["10.0.1.13"]))),
        )
        .raw(&format!(
            "[control]\nsocket = \"{d}/ctl.sock\"\nwatch_config = false\n"
        ))
        .build()
}

/// The value of `"key":"…"` in a JSON answer (the tests' reading of it).
fn json_field<'a>(json: &'a str, key: &str) -> Option<&'a str> {
    let at = json.find(&format!("\"{key}\":\""))? + key.len() + 4;
    json[at..].split('"').next()
}

/// `spillway simulate` against a running daemon agrees with `spillway
/// replay` of the same configuration for 1,000 random new TCP flows: the
/// backend it names is the one the replayed SYN went to. Human and JSON
/// answers, and bad input answered with an error, never a crash.
#[test]
fn simulate_names_the_backend_replay_sends_each_flow_to() {
    let dir: PathBuf =
        std::env::temp_dir().join(format!("spillway-simulate-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    write_pcap(&dir.join("empty.pcap"), &[]);
    let cfg = dir.join("spillway.toml");
    std::fs::write(&cfg, simulate_config(&dir)).expect("config");

    // 1,000 random SYNs to the VIP (a fixed seed: xorshift).
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let flows: Vec<(Ipv4Addr, u16)> = (0..1000)
        .map(|_| {
            let r = next();
            (
                Ipv4Addr::from(0xc612_0000 | (r as u32 & 0xffff)),
                1024 + (r >> 32) as u16 % 60000,
            )
        })
        .collect();
    let frames: Vec<Vec<u8>> = flows
        .iter()
        .map(|&(c, p)| {
            // Replayed, so to replay's uplink MAC without a `mac` (M55).
            Packet::tcp(c.into(), v4("10.0.0.10"), p, 80, testkit::packet::SYN)
                .macs(common::ROUTER_MAC, dataplane::snapshot::DEFAULT_MAC)
                .frame()
        })
        .collect();
    write_pcap(&dir.join("syn.pcap"), &frames);
    let out = Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(["replay", "--config"])
        .arg(&cfg)
        .arg("--input")
        .arg(dir.join("syn.pcap"))
        .arg("--output")
        .arg(dir.join("replayed.pcap"))
        .output()
        .expect("run spillway replay");
    assert!(out.status.success(), "{}", text(&out));
    let mut replayed = std::collections::BTreeMap::new();
    for f in read_pcap(&dir.join("replayed.pcap")) {
        let t = parse_tunnel(&f, &DecapConfig::default()).expect("GUE");
        let inner = &f[t.inner_offset..t.inner_offset + t.inner_len];
        let src = Ipv4Addr::new(inner[12], inner[13], inner[14], inner[15]);
        let sport = u16::from_be_bytes([inner[20], inner[21]]);
        replayed.insert((src, sport), t.dst_ip.to_string());
    }
    assert_eq!(
        replayed.len(),
        flows.len(),
        "every SYN forwarded: {}",
        text(&out)
    );

    let mut daemon = Daemon::start(&cfg, false);
    let socket = dir.join("ctl.sock");
    let socket_s = socket.to_str().expect("utf-8").to_owned();
    wait_until_up(&mut daemon, &socket_s);

    // Every flow through the daemon's socket (in process: 1,000 requests).
    for &(c, p) in &flows {
        let cmd = format!("simulate src={c} dst=10.0.0.10 proto=tcp sport={p} dport=80 json");
        let (ok, json) = control::socket::request(&socket, &cmd).expect("ask");
        assert!(ok, "{json}");
        assert_eq!(json_field(&json, "outcome"), Some("forward"), "{json}");
        assert_eq!(json_field(&json, "flow_entry"), Some("new"), "{json}");
        assert_eq!(
            json_field(&json, "region"),
            Some("r"),
            "nearest region: {json}"
        );
        assert_eq!(
            json_field(&json, "address"),
            replayed.get(&(c, p)).map(String::as_str),
            "flow {c}:{p}: {json}"
        );
    }

    // A few through the command line, for people and as JSON.
    for &(c, p) in flows.iter().take(3) {
        let (c, p) = (c.to_string(), p.to_string());
        let args = [
            "simulate",
            "--socket",
            &socket_s,
            "--src",
            &c,
            "--dst",
            "10.0.0.10",
            "--sport",
            &p,
            "--dport",
            "80",
        ];
        let human = spillway(&args);
        let h = text(&human);
        assert!(human.status.success(), "{h}");
        let want = &replayed[&(c.parse().unwrap(), p.parse().unwrap())];
        assert!(h.starts_with("outcome: forward\n"), "{h}");
        assert!(h.contains("rule: web (web-ag0), service web"), "{h}");
        assert!(h.contains(&format!("backend: {want} (active, new)")), "{h}");
        assert!(h.contains("region r (1 of 1 regions"), "{h}");
        let mut json_args = args.to_vec();
        json_args.push("--json");
        let j = spillway(&json_args);
        let js = String::from_utf8_lossy(&j.stdout).into_owned();
        assert!(j.status.success(), "{}", text(&j));
        assert!(js.starts_with('{') && js.trim_end().ends_with('}'), "{js}");
        assert_eq!(json_field(&js, "address"), Some(want.as_str()), "{js}");
        assert_eq!(json_field(&js, "service"), Some("web"), "{js}");
        assert_eq!(json_field(&js, "affinity"), Some("5-tuple"), "{js}");
    }
    // No rule, not ours.
    let h = text(&spillway(&[
        "simulate",
        "--socket",
        &socket_s,
        "--src",
        "192.0.2.1",
        "--dst",
        "10.0.0.10",
        "--dport",
        "81",
    ]));
    assert!(h.starts_with("outcome: drop (no_rule)"), "{h}");
    let h = text(&spillway(&[
        "simulate",
        "--socket",
        &socket_s,
        "--src",
        "192.0.2.1",
        "--dst",
        "10.9.9.9",
        "--dport",
        "80",
    ]));
    assert!(h.starts_with("outcome: drop (not_ours)"), "{h}");

    // Bad input: an error answer, and the daemon answers on.
    for (line, says) in [
        (
            "simulate src=1.2.3.4 dst=nonsense dport=80",
            "not an IP address",
        ),
        ("simulate src=1.2.3.4 dst=10.0.0.10", "dport=N is required"),
        (
            "simulate src=1.2.3.4 dst=10.0.0.10 dport=99999",
            "not a port",
        ),
        (
            "simulate src=1.2.3.4 dst=10.0.0.10 dport=80 proto=xyz",
            "protocol number",
        ),
        ("simulate src=::1 dst=10.0.0.10 dport=80", "address family"),
        ("simulate", "usage"),
    ] {
        let (ok, e) = control::socket::request(&socket, line).expect("ask");
        assert!(!ok, "{line}: {e}");
        assert!(e.contains(says), "{line}: {e}");
    }
    let long = format!("simulate src={} dst=10.0.0.10 dport=80", "9".repeat(3000));
    let (ok, e) = control::socket::request(&socket, &long).expect("ask");
    assert!(!ok && e.contains("too long"), "{e}");
    let bad = spillway(&[
        "simulate", "--socket", &socket_s, "--src", "1.2.3.4", "--dst", "x",
    ]);
    assert!(!bad.status.success());
    wait_until_up(&mut daemon, &socket_s);
    let _ = std::fs::remove_dir_all(&dir);
}
