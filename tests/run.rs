//! `spillway run` as a process: DPDK net_pcap ports, real workers, the
//! control socket, reloads (valid and invalid), clean shutdown on SIGTERM.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

use pcap_file::pcap::{PcapPacket, PcapReader, PcapWriter};
use wire::encap::{DecapConfig, parse_tunnel};

fn spillway(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(args)
        .output()
        .expect("run spillway")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn frame(i: u16) -> Vec<u8> {
    // Ethernet/IPv4/UDP 192.0.2.1:(1000+i) -> 10.0.0.10:53, checksums zero
    // (IPv4 header checksum computed: the pipeline relies on it).
    let mut ip = vec![
        0x45, 0, 0, 32, 0, 1, 0, 0, 64, 17, 0, 0, 192, 0, 2, 1, 10, 0, 0, 10,
    ];
    let mut sum: u32 = ip
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    ip[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 0x77, 0x08, 0x00];
    f.extend_from_slice(&ip);
    f.extend_from_slice(&(1000 + i).to_be_bytes());
    f.extend_from_slice(&53u16.to_be_bytes());
    f.extend_from_slice(&[0, 12, 0, 0, b'q', b'u', b'e', b'r']);
    f
}

fn write_pcap(path: &Path, frames: &[Vec<u8>]) {
    let mut w = PcapWriter::new(std::fs::File::create(path).expect("create")).expect("writer");
    for f in frames {
        w.write_packet(&PcapPacket::new(Duration::ZERO, f.len() as u32, f))
            .expect("write");
    }
}

fn config(dir: &Path, service: &str) -> String {
    config_watching(dir, service, false)
}

fn config_watching(dir: &Path, service: &str, watch: bool) -> String {
    format!(
        r#"
[node]
name = "t"
region = "r"
zone = "z"

[dataplane]
management_core = 0
worker_cores = [1]
mbufs = 4095
queue_descriptors = 256
flow_table_capacity = 4096
eal_args = ["--no-huge", "--no-shconf", "-m", "256", "--no-pci", "--no-telemetry",
  "--log-level=lib.eal:warning",
  "--vdev=net_pcap0,rx_pcap={d}/in.pcap,tx_pcap={d}/up-out.pcap",
  "--vdev=net_pcap1,rx_pcap={d}/empty.pcap,tx_pcap={d}/out.pcap"]

[[ports]]
name = "up"
device = "net_pcap0"
role = "uplink"
addresses = ["10.0.0.2/24"]

[[ports]]
name = "be"
device = "net_pcap1"
role = "backend"
addresses = ["10.0.1.2/24"]
gateway_mac = "02:00:00:00:00:fe"

[[forwarding_rules]]
name = "dns"
vips = ["10.0.0.10"]
protocol = "UDP"
ports = 53
backend_service = "{service}"

[[backend_services]]
name = "{service}"
delivery = "gue"
[[backend_services.groups]]
name = "a"
region = "r"
zone = "z"
endpoints = [{{ address = "10.0.1.11" }}, {{ address = "10.0.1.12" }}]

[control]
socket = "{d}/ctl.sock"
watch_config = {watch}
"#,
        d = dir.display()
    )
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
    let frames: Vec<Vec<u8>> = (0..500).map(frame).collect();
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

    let mut r = PcapReader::new(std::fs::File::open(dir.join("out.pcap")).expect("out.pcap"))
        .expect("pcap");
    let mut n = 0;
    while let Some(p) = r.next_packet() {
        let p = p.expect("packet");
        let t = parse_tunnel(&p.data, &DecapConfig::default()).expect("GUE frame");
        assert_eq!(
            &p.data[t.inner_offset..t.inner_offset + t.inner_len],
            &frames[n][14..]
        );
        assert_eq!(&p.data[0..6], &[2, 0, 0, 0, 0, 0xfe]);
        n += 1;
    }
    assert_eq!(n, 500, "every datagram left the backend port encapsulated");
    let _ = std::fs::remove_dir_all(&dir);
}

/// xorshift64*: reproducible mutations without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Valid frames of many kinds, then mutated: flipped bytes, truncations,
/// random tails, rewritten EtherTypes / protocols / lengths, pure noise and
/// a few jumbo frames (which span several chained mbufs on net_pcap).
fn fuzzed_frames(n: usize, seed: u64) -> Vec<Vec<u8>> {
    let mut rng = Rng(seed | 1);
    let arp = {
        let mut f = vec![0xff; 6];
        f.extend_from_slice(&[2, 0, 0, 0, 0, 0x77, 0x08, 0x06, 0, 1, 8, 0, 6, 4, 0, 1]);
        f.extend_from_slice(&[
            2, 0, 0, 0, 0, 0x77, 10, 0, 0, 1, 0, 0, 0, 0, 0, 0, 10, 0, 0, 10,
        ]);
        f
    };
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let mut f = match rng.below(4) {
            0 => arp.clone(),
            _ => frame(i as u16),
        };
        match rng.below(8) {
            0 => {
                let len = 1 + rng.below(200);
                f = (0..len).map(|_| rng.next() as u8).collect();
            }
            1 => f.truncate(1 + rng.below(f.len())),
            2 => {
                let et: [u16; 6] = [0x0800, 0x86dd, 0x0806, 0x8100, 0x88a8, 0x9999];
                f[12..14].copy_from_slice(&et[rng.below(et.len())].to_be_bytes());
            }
            3 if f.len() > 23 => f[23] = [1, 4, 6, 17, 41, 47, 50, 58][rng.below(8)],
            4 if f.len() > 17 => {
                f[14] = rng.next() as u8;
                f[16] = rng.next() as u8;
                f[17] = rng.next() as u8;
            }
            5 if i % 97 == 0 => f.resize(3000 + rng.below(6000), 0x5a),
            _ => {
                for _ in 0..1 + rng.below(4) {
                    let at = rng.below(f.len());
                    f[at] ^= 1 << rng.below(8);
                }
            }
        }
        if f.len() > 40 && rng.below(3) == 0 {
            let extra = rng.below(64);
            f.extend((0..extra).map(|_| rng.next() as u8));
        }
        out.push(f);
    }
    out
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

/// SPEC M38: editing the file is enough; a broken edit is refused and the
/// running configuration stays.
#[test]
fn the_daemon_reloads_when_its_file_changes() {
    let dir: PathBuf =
        std::env::temp_dir().join(format!("spillway-run-watch-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    write_pcap(&dir.join("in.pcap"), &[]);
    write_pcap(&dir.join("empty.pcap"), &[]);
    let cfg = dir.join("spillway.toml");
    std::fs::write(&cfg, config_watching(&dir, "dns", true)).expect("config");
    let mut daemon = Daemon::start(&cfg, false);
    let socket_s = dir.join("ctl.sock").to_str().expect("utf-8").to_owned();
    let wait_for = |what: &str, daemon: &mut Daemon| -> String {
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
    wait_for("snapshot generation 1", &mut daemon);

    std::fs::write(&cfg, config_watching(&dir, "dns2", true)).expect("config");
    let s = wait_for("service dns2", &mut daemon);
    assert!(
        s.contains("snapshot generation 2, reloads 1 ok / 0 rejected"),
        "{s}"
    );

    std::fs::write(&cfg, "[node]\nname = 3\n").expect("config");
    let s = wait_for("reloads 1 ok / 1 rejected", &mut daemon);
    assert!(
        s.contains("snapshot generation 2") && s.contains("service dns2"),
        "{s}"
    );
    assert!(s.contains("spillway.toml:2:"), "the error is shown: {s}");
    // Nothing more happens while the file stays as it is.
    std::thread::sleep(Duration::from_millis(800));
    let s = text(&spillway(&["status", "--socket", &socket_s]));
    assert!(s.contains("reloads 1 ok / 1 rejected"), "{s}");
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

/// SPEC M21: the daemon exports every rule's state over HTTP, and a
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
