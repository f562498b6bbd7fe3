//! M38, issue 38 item 7: no prefix of a valid configuration goes live
//! through the file watch. A file cut at a line boundary (a writer that
//! stopped half-way: a full disk, a copy cut off) is valid TOML, and often
//! a valid configuration whose sections past the cut fall back to their
//! defaults (health checks probing `/`, client zones, metrics, BGP, flow
//! sync gone); before the fix 36 of lab.toml's 96 line prefixes and 392 of
//! reference.toml's 620 were valid, and those the rule and VIP guard let
//! through went live unasked.
//!
//! Each file runs in a daemon's management core (the `Manager` the daemon
//! runs, in a network namespace of the test's own so that its health
//! probes and flow-sync socket reach nothing), with the file watch on;
//! every line prefix of the file is written in its place in turn and goes
//! through the watch as in the daemon's loop (`poll_watch`, `poll_load`:
//! settle, read off the loop, decide), and none may go live. Then an
//! edit that removes nothing goes live through the watch, and a prefix
//! the watch refused goes live when an operator reloads it.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use control::{Manager, Published};

mod common;

struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The test thread (and the threads the manager starts from it) in a
/// network namespace of its own, with nothing in it: whatever the files'
/// health checks, BGP and flow-sync peers name, nothing leaves the host.
fn isolate() {
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET)
        .expect("a network namespace of the test's own (needs root)");
}

/// The repository's `config/NAME`, with the paths it names under /run
/// moved into `dir`.
fn config_file(name: &str, dir: &Path) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("config")
        .join(name);
    let d = dir.display();
    std::fs::read_to_string(&path)
        .unwrap()
        .replace("/run/bird/", &format!("{d}/"))
        .replace("/run/spillway/", &format!("{d}/"))
}

/// Runs the watch until it has read and decided on the file as it is
/// now: what became of it.
fn watched(mgr: &mut Manager, what: &str) -> Result<Published, String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        mgr.poll_watch();
        if let Some(r) = mgr.poll_load() {
            return r.map_err(|e| e.to_string());
        }
        assert!(Instant::now() < deadline, "{what}: the watch never acted");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn every_prefix_is_refused(name: &str) {
    let dir =
        Dir(std::env::temp_dir().join(format!("spillway-watch-{}-{name}", std::process::id())));
    std::fs::create_dir_all(&dir.0).unwrap();
    let full = config_file(name, &dir.0);
    let path = dir.0.join(name);
    std::fs::write(&path, &full).unwrap();
    let loaded = config::load(&path).unwrap_or_else(|e| panic!("{e}"));
    let (mut mgr, shared) =
        Manager::start(&path, loaded.compiled, dataplane::Local::default(), 1, None)
            .unwrap_or_else(|e| panic!("{e}"));
    mgr.watch_file(true);
    // The daemon waits 300 ms for a changed file to settle; the test
    // writes each prefix at once, whole.
    mgr.watch_settle(Duration::from_millis(20));
    let live = || shared.snapshot.load().generation;
    let generation = live();
    let running = shared.snapshot.load().compiled.clone();

    let lines: Vec<&str> = full.split_inclusive('\n').collect();
    let (mut invalid, mut refused) = (0, 0);
    let mut refused_valid = std::collections::BTreeSet::new();
    for k in 0..lines.len() {
        let prefix = lines[..k].concat();
        std::fs::write(&path, &prefix).unwrap();
        let what = format!("{name}, its first {k} of {} lines", lines.len());
        match watched(&mut mgr, &what) {
            Ok(p) => panic!("{what}: went live through the file watch ({p})"),
            Err(e) if e.contains("the file watch does not apply it") => {
                refused += 1;
                if config::load(&path).is_ok() {
                    refused_valid.insert(k);
                }
            }
            Err(_) => invalid += 1,
        }
        assert_eq!(live(), generation, "{what}: a new snapshot");
        assert!(
            std::sync::Arc::ptr_eq(&shared.snapshot.load().compiled, &running),
            "{what}: the running configuration changed"
        );
    }
    println!(
        "{name}: {} line prefixes through the watch: {invalid} invalid, {refused} refused by the watch, none live",
        lines.len()
    );

    // An edit that removes nothing goes live through the watch.
    std::fs::write(&path, format!("{full}\n# edited\n")).unwrap();
    let r = watched(&mut mgr, "an edit");
    assert!(matches!(r, Ok(Published::Live(_))), "an edit: {r:?}");
    assert!(live() > generation);

    // A prefix the watch refused goes live when an operator reloads it
    // (a reload guard of its own still applies: rules and VIPs): the file
    // without its last two sections.
    let headers: Vec<usize> = (0..lines.len())
        .filter(|&i| lines[i].starts_with('['))
        .collect();
    let k = headers[headers.len() - 2];
    assert!(
        refused_valid.contains(&k),
        "{name}: its first {k} lines are valid and the watch refused them"
    );
    std::fs::write(&path, lines[..k].concat()).unwrap();
    let before = live();
    let r = mgr.reload();
    println!("{name}: its first {k} lines, reloaded by an operator: {r:?}");
    assert!(matches!(r, Ok(Published::Live(_))), "{r:?}");
    assert!(live() > before);
}

#[test]
fn no_prefix_of_lab_toml_goes_live_through_the_watch() {
    isolate();
    every_prefix_is_refused("lab.toml");
}

#[test]
fn no_prefix_of_reference_toml_goes_live_through_the_watch() {
    isolate();
    every_prefix_is_refused("reference.toml");
}

/// `spillway run`, killed when the test ends however it ends.
struct Daemon(std::process::Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The daemon's `status --json`.
fn status(socket: &str) -> Option<serde_json::Value> {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(["status", "--json", "--socket", socket])
        .output()
        .ok()?;
    serde_json::from_slice(&out.stdout).ok()
}

/// The same end to end: a running daemon (DPDK `net_pcap` ports) with the
/// file watch on, every line prefix of its file written in its place. The
/// daemon's reload counters say when the watch has decided, and that it
/// applied none.
#[test]
fn no_prefix_goes_live_through_a_running_daemons_watch() {
    let dir =
        Dir(std::env::temp_dir().join(format!("spillway-watch-daemon-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).unwrap();
    testkit::pcap::write(&dir.0.join("in.pcap"), &[]);
    testkit::pcap::write(&dir.0.join("empty.pcap"), &[]);
    let d = dir.0.display();
    // A health check and [metrics] after the rules, as in the files.
    let http_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let full = format!(
        "{}\n[[health_checks]]\nname = \"hc\"\ntype = \"HTTP\"\nport = 80\npath = \"/healthz\"\ninterval = \"5s\"\n\n[metrics]\nlisten = \"127.0.0.1:{http_port}\"\n",
        common::pcap_daemon_config(&dir.0, "dns", true).replace(
            "delivery = \"gue\"",
            "delivery = \"gue\"\nhealth_check = \"hc\""
        )
    );
    let cfg = dir.0.join("spillway.toml");
    std::fs::write(&cfg, &full).unwrap();
    let socket = format!("{d}/ctl.sock");
    let _daemon = Daemon(
        std::process::Command::new(env!("CARGO_BIN_EXE_spillway"))
            .args(["run", "--config", cfg.to_str().unwrap()])
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(dir.0.join("daemon.log")).unwrap())
            .spawn()
            .unwrap(),
    );
    let decided = |s: &serde_json::Value| {
        s["reloads_ok"].as_u64().unwrap() + s["reloads_rejected"].as_u64().unwrap()
    };
    let wait = |what: &str, done: &dyn Fn(&serde_json::Value) -> bool| -> serde_json::Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(s) = status(&socket)
                && done(&s)
            {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: never; the daemon said:\n{}",
                std::fs::read_to_string(dir.0.join("daemon.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let s = wait("the daemon up", &|s| s["generation"] == 1);
    let mut seen = decided(&s);
    let lines: Vec<&str> = full.split_inclusive('\n').collect();
    for k in 0..lines.len() {
        std::fs::write(&cfg, lines[..k].concat()).unwrap();
        let what = format!("its first {k} of {} lines", lines.len());
        let s = wait(&what, &|s| decided(s) > seen);
        seen = decided(&s);
        // (The generation moves with health too: the reload counters
        // tell what became of the file.)
        assert_eq!(
            s["reloads_ok"], 0,
            "{what}: went live through the file watch"
        );
    }
    println!(
        "{} line prefixes through a running daemon's watch: none live",
        lines.len()
    );
}
