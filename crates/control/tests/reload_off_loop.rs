//! M50, issue 38 item 12: a reload's file is read, validated and compiled
//! off the management loop. A configuration of thousands of services
//! (here: of tens of thousands of health checks) takes seconds to
//! validate; meanwhile the loop must go on answering, or
//! the other nodes' `remote_rule` polls of `/status` go unanswered and
//! they fail this node's rules over. The daemon's loop runs (`Manager::run`,
//! with its listeners); one client asks it to reload a large file over the
//! control socket while another asks for `/metrics` over HTTP again and
//! again, until the reload is answered. The loop must answer `/metrics`
//! while the reload is being read (its own gauge says so:
//! `spillway_config_reload_reading 1`, an answer computed by the loop after
//! it took the reload and before the reload was done), and the reload when
//! it is done. (Before, the loop read the file itself and answered
//! nothing until it was done; it had no such gauge either.)

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use control::Manager;
use control::listen::Listeners;

/// Health checks in the file: validating them takes seconds in a test
/// build, while the loop's answers stay cheap (no service uses them).
const CHECKS: usize = 30_000;

struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A service with a rule, and `n` health checks no service uses (each
/// one validated, and warned of).
fn config(n: usize) -> String {
    let mut t = String::from(
        "[node]\nname = \"n1\"\nregion = \"r1\"\nzone = \"z1\"\nshutdown_drain = \"0s\"\n\n\
         [dataplane]\nflow_table_capacity = 1024\n\n\
         [[forwarding_rules]]\nname = \"web\"\nvips = [\"10.100.0.1\"]\nprotocol = \"TCP\"\nports = 80\nbackend_service = \"web\"\n\n\
         [[backend_services]]\nname = \"web\"\ndelivery = \"gue\"\n\
         groups = [{ name = \"g\", region = \"r1\", zone = \"z1\", endpoints = [{ address = \"172.16.0.1\" }] }]\n\n",
    );
    for i in 0..n {
        let _ = write!(
            t,
            "[[health_checks]]\nname = \"hc{i}\"\ntype = \"HTTP\"\nport = 80\npath = \"/healthz\"\ninterval = \"5s\"\n\n"
        );
    }
    t
}

/// `GET path`: the body, if an answer came within `limit`.
fn get(addr: SocketAddr, path: &str, limit: Duration) -> Option<String> {
    let mut s = TcpStream::connect_timeout(&addr, limit).ok()?;
    s.set_read_timeout(Some(limit)).ok()?;
    s.write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes())
        .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    out.starts_with("HTTP/1.0 200 ").then_some(out)
}

/// A control-socket command's answer: (ok, text). Waits as long as it
/// takes (a loaded machine may take long to validate the file).
fn ask(socket: &Path, command: &str) -> (bool, String) {
    let mut s = std::os::unix::net::UnixStream::connect(socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(300))).unwrap();
    s.write_all(format!("{command}\n").as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (status, rest) = out.split_once('\n').unwrap_or((out.as_str(), ""));
    (status == "ok", rest.to_owned())
}

/// What the clients saw.
struct Seen {
    reload: (bool, String),
    reload_took: Duration,
    /// `/metrics` answers while the reload was under way, and of those
    /// the ones the loop computed while it was reading the file.
    answers: usize,
    reading: usize,
    longest: Duration,
}

fn clients(socket: &Path, http: SocketAddr, stop: &AtomicBool) -> Seen {
    // The loop is up.
    let deadline = Instant::now() + Duration::from_secs(120);
    while get(http, "/status", Duration::from_secs(5)).is_none() {
        assert!(Instant::now() < deadline, "/status never answered");
        std::thread::sleep(Duration::from_millis(20));
    }
    let done = Arc::new(AtomicBool::new(false));
    let asked = Instant::now();
    let reload = {
        let (socket, done) = (socket.to_owned(), done.clone());
        std::thread::spawn(move || {
            let r = ask(&socket, "reload");
            let took = asked.elapsed();
            done.store(true, Ordering::Release);
            (r, took)
        })
    };
    let (mut answers, mut reading, mut longest) = (0, 0, Duration::ZERO);
    while !done.load(Ordering::Acquire) {
        let t = Instant::now();
        // A generous deadline: this asserts that answers come, not how soon.
        let Some(m) = get(http, "/metrics", Duration::from_secs(60)) else {
            continue;
        };
        answers += 1;
        longest = longest.max(t.elapsed());
        if m.contains("\nspillway_config_reload_reading 1\n") {
            reading += 1;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let (reload, reload_took) = reload.join().unwrap();
    stop.store(true, Ordering::Release);
    Seen {
        reload,
        reload_took,
        answers,
        reading,
        longest,
    }
}

#[test]
fn status_is_answered_while_a_large_reload_is_read() {
    let dir = Dir(std::env::temp_dir().join(format!("spillway-offloop-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).unwrap();
    let path = dir.0.join("spillway.toml");
    std::fs::write(&path, config(CHECKS)).unwrap();
    let t0 = Instant::now();
    let loaded = config::load(&path).unwrap_or_else(|e| panic!("{e}"));
    let load_time = t0.elapsed();
    let (mut mgr, _shared) =
        Manager::start(&path, loaded.compiled, dataplane::Local::default(), 1, None)
            .unwrap_or_else(|e| panic!("{e}"));
    let metrics = config::schema::Metrics {
        listen: "127.0.0.1:0".parse().unwrap(),
        ..Default::default()
    };
    let control = config::schema::Control {
        socket: dir.0.join("ctl.sock"),
        socket_group: None,
        max_connections: 8,
        timeout: config::values::Duration::secs(5),
        watch_config: false,
    };
    let listeners = Listeners::start(&metrics, &control, Vec::new()).unwrap();
    let http = listeners.http_addr().unwrap();
    let socket = listeners.socket_path().unwrap().to_owned();
    mgr.serve(listeners);

    let stop = Arc::new(AtomicBool::new(false));
    let seen = {
        let stop = stop.clone();
        std::thread::spawn(move || clients(&socket, http, &stop))
    };
    let reload_flag = AtomicBool::new(false);
    mgr.run(control::TICK_PERIOD, &reload_flag, &stop);
    let seen = seen.join().unwrap();
    println!(
        "{CHECKS} health checks ({load_time:.2?} to load at start): the reload answered after {:.2?}; \
         {} /metrics answers meanwhile ({} while the file was being read), the slowest in {:.0?}",
        seen.reload_took, seen.answers, seen.reading, seen.longest
    );
    assert!(seen.reload.0, "the reload: {}", seen.reload.1);
    assert!(seen.reload.1.contains("reloaded"), "{}", seen.reload.1);
    assert!(
        seen.reading >= 1,
        "no answer from the loop while the reload was being read ({} answers while it was under way)",
        seen.answers
    );
}
