//! Issue 38 item 11: zone-health's HTTP endpoint (`[metrics]`) admits
//! clients as the daemon's does ([`admin::admission`]). Before, it served
//! 16 connections at once with no cap per client and no allow-list: one
//! address holding 16 idle connections kept every scraper out. Now one
//! client holds at most `max_connections_per_client` (default 8) and the
//! others are served; `allow` closes other addresses at once; and when
//! every slot is taken, a client below its fair share takes one from a
//! client holding two more.
//!
//! The service runs (its DNS server is nowhere: its syncs fail, which does
//! not matter here); clients come from addresses of 127/8.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// Starts a service whose `[metrics]` is `metrics` (it runs until the test
/// process ends); its HTTP port.
fn start(dir: &Path, metrics: &str) -> u16 {
    let port = free_port();
    let path = dir.join("zh.toml");
    std::fs::write(
        &path,
        format!(
            "[dns]\nserver = \"127.0.0.1:1\"\nzone = \"lab.test\"\nname = \"www.lab.test\"\ntimeout = \"200ms\"\n\
             [dns.tsig]\nname = \"k\"\nsecret = \"c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0ISE=\"\n\
             [probe]\nicmp = false\nkind = \"tcp\"\nport = 9\ninterval = \"1s\"\ntimeout = \"200ms\"\n\
             [control]\nsocket = \"{}\"\n\
             [metrics]\nlisten = \"127.0.0.1:{port}\"\n{metrics}\n\
             [[zones]]\nname = \"a\"\nvips = [\"127.0.0.9\"]\n",
            dir.join("zh.sock").display()
        ),
    )
    .unwrap();
    let settings = zonehealth::Settings::load(&path).unwrap_or_else(|e| panic!("{e}"));
    std::thread::spawn(move || zonehealth::run(settings));
    let deadline = Instant::now() + Duration::from_secs(20);
    while !get_from(Ipv4Addr::new(127, 0, 0, 1), port, "/metrics").starts_with("HTTP/1.1 200") {
        assert!(Instant::now() < deadline, "the endpoint never answered");
        std::thread::sleep(Duration::from_millis(50));
    }
    port
}

fn try_connect_from(from: Ipv4Addr, port: u16) -> Option<TcpStream> {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).ok()?;
    s.bind(&SocketAddr::from((from, 0)).into()).ok()?;
    s.connect(&SocketAddr::from(([127, 0, 0, 1], port)).into())
        .ok()?;
    Some(s.into())
}

fn connect_from(from: Ipv4Addr, port: u16) -> TcpStream {
    try_connect_from(from, port).expect("connect")
}

/// `GET path` from `from`: the whole answer ("" if the connection was
/// closed without one, or refused; a generous deadline).
fn get_from(from: Ipv4Addr, port: u16, path: &str) -> String {
    let Some(mut s) = try_connect_from(from, port) else {
        return String::new();
    };
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes());
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

#[test]
fn one_client_cannot_hold_every_slot() {
    let dir = Dir(std::env::temp_dir().join(format!("spillway-zh-http-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).unwrap();
    // The defaults.
    let port = start(&dir.0, "");
    // One address opens 20 connections and sends nothing.
    let greedy = Ipv4Addr::new(127, 0, 0, 1);
    let idle: Vec<TcpStream> = (0..20).map(|_| connect_from(greedy, port)).collect();
    std::thread::sleep(Duration::from_millis(300));
    // Another is answered.
    let other = get_from(Ipv4Addr::new(127, 0, 0, 2), port, "/metrics");
    assert!(
        other.starts_with("HTTP/1.1 200") && other.contains("# EOF"),
        "another client: {:?}",
        other.lines().next()
    );
    // The greedy one got 8 slots; its 12 others were answered 503.
    let mut busy = 0;
    for mut s in idle.into_iter().skip(8) {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        busy += usize::from(out.starts_with("HTTP/1.1 503"));
    }
    assert_eq!(busy, 12, "connections over the cap of one client refused");
}

#[test]
fn the_allow_list_and_the_limits_are_the_daemons() {
    let dir = Dir(std::env::temp_dir().join(format!("spillway-zh-allow-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).unwrap();
    let port = start(
        &dir.0,
        "allow = [\"127.0.0.1/32\", \"127.0.1.0/24\"]\nmax_connections = 4\nmax_connections_per_client = 2",
    );
    // Outside the allow-list: closed at once, no answer.
    assert_eq!(get_from(Ipv4Addr::new(127, 0, 0, 2), port, "/metrics"), "");
    // Inside: four clients hold every slot, one each; a fifth holding none
    // may not take one from them (none holds two more than it does) …
    let held: Vec<TcpStream> = [1, 2, 4, 5]
        .iter()
        .map(|&c| connect_from(Ipv4Addr::new(127, 0, 1, c), port))
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let fifth = get_from(Ipv4Addr::new(127, 0, 1, 3), port, "/metrics");
    assert!(
        fifth.starts_with("HTTP/1.1 503"),
        "{:?}",
        fifth.lines().next()
    );
    drop(held);
    std::thread::sleep(Duration::from_millis(300));
    // … but from two clients holding two each it may: it is answered, and
    // the oldest connection of one of them is told 503 and closed.
    let mut held: Vec<TcpStream> = [1, 1, 2, 2]
        .iter()
        .map(|&c| connect_from(Ipv4Addr::new(127, 0, 1, c), port))
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let third = get_from(Ipv4Addr::new(127, 0, 1, 3), port, "/metrics");
    assert!(
        third.starts_with("HTTP/1.1 200"),
        "{:?}",
        third.lines().next()
    );
    let oldest = &mut held[0];
    oldest
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut out = String::new();
    let _ = oldest.read_to_string(&mut out);
    assert!(out.starts_with("HTTP/1.1 503"), "{out:?}");
    drop(held);

    // The same rules as the daemon's file: wrong values are errors.
    let bad = dir.0.join("bad.toml");
    let good = std::fs::read_to_string(dir.0.join("zh.toml")).unwrap();
    for (what, field) in [
        ("allow = []", "metrics.allow"),
        ("allow = [\"127.0.0.1/8\"]", "metrics.allow[0]"),
        ("max_connections = 0", "metrics.max_connections"),
        (
            "max_connections = 4\nmax_connections_per_client = 5",
            "metrics.max_connections_per_client",
        ),
        ("timeout = \"2m\"", "metrics.timeout"),
    ] {
        let text = good.replace(
            "allow = [\"127.0.0.1/32\", \"127.0.1.0/24\"]\nmax_connections = 4\nmax_connections_per_client = 2",
            what,
        );
        std::fs::write(&bad, text).unwrap();
        let e = zonehealth::Settings::load(&bad).unwrap_err().to_string();
        assert!(e.contains(field), "{what}: {e}");
    }
}
