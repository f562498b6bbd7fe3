//! M50, M21, issue 38 item 6: eight source addresses, each holding its
//! eight idle connections (`max_connections_per_client`) and opening them
//! again as soon as they close, held all 64 HTTP slots; `/status` then
//! answered nobody, and the other Spillways' `remote_rule` polls marked
//! this node's rules UNHEALTHY and failed its traffic over. A configured
//! peer (here: the host of a `remote_rule` group's status URL) is now
//! always served: when every slot is taken it takes the slot of the client
//! holding the most.
//!
//! A daemon (DPDK `net_pcap` ports) runs with the default limits (64
//! slots, 8 per client); sixteen addresses hold every slot and open each
//! connection again the moment it closes; the peer reads `/status` 100
//! times in a row. Every read must be answered `200` with the rule states.
//! The deadline of each read is generous (10 s): what is asserted is that
//! the peer is answered, every time, not how fast; the latencies are
//! printed (the poller of a `remote_rule` group gives a read 800 ms).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

mod common;

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The peer: the host of the `remote_rule` group's status URL.
const PEER: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 200);

struct Daemon(Child, PathBuf);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
        let _ = std::fs::remove_dir_all(&self.1);
    }
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

/// A TCP connection to `port` on 127.0.0.1 from `from`.
fn connect_from(from: Ipv4Addr, port: u16, within: Duration) -> Option<TcpStream> {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).ok()?;
    s.bind(&SocketAddr::from((from, 0)).into()).ok()?;
    let to = SocketAddr::from(([127, 0, 0, 1], port));
    s.connect_timeout(&to.into(), within).ok()?;
    Some(s.into())
}

/// `GET path` from `from`: the whole answer ("" when none came within
/// `within`).
fn get_from(from: Ipv4Addr, port: u16, path: &str, within: Duration) -> String {
    let Some(mut s) = connect_from(from, port, within) else {
        return String::new();
    };
    let _ = s.set_read_timeout(Some(within));
    if write!(s, "GET {path} HTTP/1.0\r\n\r\n").is_err() {
        return String::new();
    }
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

/// A connection from `from` that sends nothing and is opened again as
/// soon as the daemon closes it, until `stop`; how many it opened.
fn idler(
    from: Ipv4Addr,
    port: u16,
    stop: Arc<AtomicBool>,
    held: Arc<AtomicU64>,
) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        let mut opened = 0;
        while !stop.load(Ordering::Relaxed) {
            let Some(mut s) = connect_from(from, port, Duration::from_secs(1)) else {
                std::thread::sleep(Duration::from_millis(10));
                continue;
            };
            opened += 1;
            held.fetch_add(1, Ordering::Relaxed);
            // Until the daemon closes it (a 503, its deadline, or its slot
            // given to another), or the test ends.
            let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
            let mut buf = [0u8; 256];
            loop {
                match s.read(&mut buf) {
                    Ok(0) => break,
                    Ok(_) => {}
                    Err(_) if stop.load(Ordering::Relaxed) => break,
                    Err(e)
                        if e.kind() == std::io::ErrorKind::WouldBlock
                            || e.kind() == std::io::ErrorKind::TimedOut => {}
                    Err(_) => break,
                }
            }
            held.fetch_sub(1, Ordering::Relaxed);
        }
        opened
    })
}

/// The value of a `/metrics` sample (0 when absent).
fn sample(metrics: &str, name: &str) -> u64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or(0)
}

#[test]
fn a_configured_peer_is_answered_while_sixteen_addresses_hold_every_slot() {
    let dir: PathBuf =
        std::env::temp_dir().join(format!("spillway-status-slots-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    common::write_pcap(&dir.join("in.pcap"), &[]);
    common::write_pcap(&dir.join("empty.pcap"), &[]);
    let http_port = free_port();
    let d = dir.display();
    // A rule whose service is another Spillway's (the peer): its
    // `remote_rule` group names the peer's status URL.
    let cfg_text = common::pcap_daemon_base(&dir, "in.pcap")
        .raw(&format!(
            r#"[[forwarding_rules]]
name = "dns"
vips = ["10.0.0.10"]
protocol = "UDP"
ports = 53
backend_service = "dns"

[[forwarding_rules]]
name = "spill"
vips = ["10.0.0.11"]
protocol = "UDP"
ports = 53
backend_service = "spill"

[[backend_services]]
name = "dns"
delivery = "gue"
[[backend_services.groups]]
name = "a"
region = "r"
zone = "z"
endpoints = [{{ address = "10.0.1.11" }}]

[[backend_services]]
name = "spill"
delivery = "gue"
[[backend_services.groups]]
name = "there"
region = "r2"
zone = "z2"
kind = "remote_rule"
remote = {{ status_url = "http://{PEER}:9/status", rule = "dns", vip = "10.0.9.1" }}

[metrics]
listen = "127.0.0.1:{http_port}"

[control]
socket = "{d}/ctl.sock"
watch_config = false
"#
        ))
        .build();
    let cfg = dir.join("spillway.toml");
    std::fs::write(&cfg, cfg_text).expect("config");
    let _daemon = Daemon(
        Command::new(env!("CARGO_BIN_EXE_spillway"))
            .args(["run", "--config", cfg.to_str().unwrap()])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("daemon.log")).unwrap())
            .spawn()
            .expect("start spillway run"),
        dir.clone(),
    );
    let within = Duration::from_secs(10);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !get_from(PEER, http_port, "/status", within).contains("rule dns ") {
        assert!(
            Instant::now() < deadline,
            "the daemon never answered /status:\n{}",
            std::fs::read_to_string(dir.join("daemon.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    // Sixteen addresses, eight connections each: 128 for 64 slots.
    let stop = Arc::new(AtomicBool::new(false));
    let held = Arc::new(AtomicU64::new(0));
    let idlers: Vec<_> = (0..16u8)
        .flat_map(|a| (0..8).map(move |_| a))
        .map(|a| {
            idler(
                Ipv4Addr::new(127, 0, 0, 10 + a),
                http_port,
                stop.clone(),
                held.clone(),
            )
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    while held.load(Ordering::Relaxed) < 100 {
        assert!(Instant::now() < deadline, "the idlers never connected");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Every slot taken: another address (no peer) is turned away.
    std::thread::sleep(Duration::from_millis(300));
    let other = get_from(Ipv4Addr::new(127, 0, 0, 99), http_port, "/status", within);
    println!(
        "another address while the slots are held: {:?}",
        other.lines().next()
    );

    let mut took = Vec::new();
    for poll in 0..100 {
        let t0 = Instant::now();
        let st = get_from(PEER, http_port, "/status", within);
        let t = t0.elapsed();
        assert!(
            st.starts_with("HTTP/1.0 200 ") && st.contains("rule dns "),
            "poll {poll} of the peer, after {t:?}: {:?}",
            st.lines().next()
        );
        took.push(t);
        // The evicted idler comes back meanwhile.
        std::thread::sleep(Duration::from_millis(20));
    }
    let m = get_from(PEER, http_port, "/metrics", within);
    let evicted = sample(
        &m,
        "spillway_listener_connections_total{listener=\"http\",outcome=\"evicted\"}",
    );
    let refused = sample(
        &m,
        "spillway_listener_connections_total{listener=\"http\",outcome=\"refused\"}",
    );
    took.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "100 polls of the peer, all answered: min {:.1} ms, median {:.1} ms, 99th {:.1} ms, max {:.1} ms; \
         {} connections held by 16 addresses; {evicted} evicted, {refused} refused over 64",
        ms(took[0]),
        ms(took[50]),
        ms(took[98]),
        ms(took[99]),
        held.load(Ordering::Relaxed)
    );
    // Each poll took a slot from an idler: the listener was full each time.
    assert!(evicted >= 100, "{evicted} evicted:\n{m}");
    stop.store(true, Ordering::Relaxed);
    drop(_daemon);
    let opened: u64 = idlers.into_iter().map(|h| h.join().unwrap()).sum();
    println!("the idlers opened {opened} connections");
}
