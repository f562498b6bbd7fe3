//! One driver: the same scripted inputs through the three drivers of the
//! management core — the daemon's shell (DPDK `net_pcap` ports, `spillway
//! reload` on its control socket), `spillway replay` and the simulation
//! harness — give the same answers, the same published generations and the
//! same decisions logged by the core. Each driver is only a `Shell` and a
//! source of inputs; the order of a management tick is the core's
//! (`Core::step`).
//!
//! The script: a configuration of two endpoints, then reloads one after
//! the other — one adding an endpoint, one that does not parse, one whose
//! configuration does not validate, one taking an endpoint away (it
//! drains) — and the state of the live snapshot after each.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

mod common;
#[path = "../crates/control/tests/sim/mod.rs"]
#[allow(unreachable_pub, clippy::all)]
mod sim;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;
use testkit::config::{endpoint_list, group, rule, service};

const FILE: &str = "spillway.toml";

/// The configuration every driver starts with (in `dir`: the daemon's
/// `net_pcap` files and control socket, which only the daemon uses), or
/// one of the reloads: the same text for each driver.
fn config(dir: &Path, endpoints: &[&str], mode: &str) -> String {
    let d = dir.display();
    common::pcap_daemon_base(dir, "in.pcap")
        .rule(rule("dns", &["10.0.0.10"], "UDP", "53", "dns").set("ports", 53))
        .service(
            service("dns", mode)
                .child(group("a", "r", "z").set("endpoints", endpoint_list(endpoints))),
        )
        .raw(&format!(
            "[control]\nsocket = \"{d}/ctl.sock\"\nwatch_config = false\n"
        ))
        .build()
}

/// The script's reloads, in order (each a whole file), for a driver whose
/// files are in `dir`.
fn reloads(dir: &Path) -> Vec<String> {
    vec![
        config(dir, &["10.0.1.11", "10.0.1.12", "10.0.1.13"], "gue"),
        "[node\nname = 1\n".to_owned(),
        config(
            dir,
            &["10.0.1.11", "10.0.1.12", "10.0.1.13"],
            "no-such-mode",
        ),
        config(dir, &["10.0.1.12", "10.0.1.13"], "gue"),
    ]
}

/// What one driver saw: each reload's answer, the live generation and its
/// backends after each step of the script, and the core's log lines, with
/// the drivers' own directories taken out.
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    answers: Vec<String>,
    generations: Vec<u64>,
    backends: Vec<Vec<String>>,
    logs: Vec<String>,
}

/// `text` without the directories the drivers' files are in, on one line
/// (its lines trimmed: a log indents the lines after the first).
fn plain(text: &str, dirs: &[&Path]) -> String {
    let mut t = text.lines().map(str::trim).collect::<Vec<_>>().join(" ");
    for d in dirs {
        t = t.replace(&format!("{}/", d.display()), "");
    }
    t
}

fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("spillway-1drv-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("dir");
    d
}

fn client(socket: &str, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(args)
        .args(["--socket", socket])
        .output()
        .expect("run spillway")
}

/// The live generation and its backends (`address state`, sorted), as
/// `spillway status --json` shows them.
fn daemon_state(socket: &str) -> Option<(u64, Vec<String>)> {
    let o = client(socket, &["status", "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).ok()?;
    let generation = v["generation"].as_u64()?;
    let mut backends: Vec<String> = v["backends"]
        .as_array()?
        .iter()
        .map(|b| format!("{} {}", b["address"], b["state"]).replace('"', ""))
        .collect();
    backends.sort();
    Some((generation, backends))
}

/// The core's lines in the daemon's log (`[… LEVEL control::core] text`,
/// continuation lines joined): level and text.
fn daemon_core_lines(log: &str) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut inside = false;
    for l in log.lines() {
        if l.starts_with('[') {
            inside = false;
            let Some((head, text)) = l.split_once("] ") else {
                continue;
            };
            let mut words = head.split_whitespace().rev();
            let (Some(target), Some(level)) = (words.next(), words.next()) else {
                continue;
            };
            if target.starts_with("control::core") || target.starts_with("control::balance") {
                lines.push(format!("{}: {text}", level.to_lowercase()));
                inside = true;
            }
        } else if inside && let Some(last) = lines.last_mut() {
            last.push('\n');
            last.push_str(l);
        }
    }
    lines
}

fn through_the_daemon() -> Seen {
    let dir = temp_dir("daemon");
    common::write_pcap(&dir.join("in.pcap"), &[]);
    common::write_pcap(&dir.join("empty.pcap"), &[]);
    let cfg = dir.join(FILE);
    std::fs::write(&cfg, config(&dir, &["10.0.1.11", "10.0.1.12"], "gue")).expect("config");
    let log = dir.join("daemon.log");
    let mut daemon = common::Daemon::start(&dir, &cfg, Some(&log));
    let socket = dir.join("ctl.sock").to_str().expect("utf-8").to_owned();
    let deadline = Instant::now() + Duration::from_secs(60);
    let first = loop {
        if let Ok(Some(st)) = daemon.child.try_wait() {
            panic!(
                "spillway run exited: {st}\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        if let Some(s) = daemon_state(&socket) {
            break s;
        }
        assert!(Instant::now() < deadline, "the daemon never answered");
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut seen = Seen {
        answers: Vec::new(),
        generations: vec![first.0],
        backends: vec![first.1],
        logs: Vec::new(),
    };
    for text in reloads(&dir) {
        std::fs::write(&cfg, text).expect("config");
        let o = client(&socket, &["reload"]);
        let answer =
            String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
        seen.answers.push(plain(&answer, &[&dir]));
        let (generation, backends) = daemon_state(&socket).expect("status");
        seen.generations.push(generation);
        seen.backends.push(backends);
    }
    // Every line the core wrote so far is in the log once `status` has
    // answered after the last reload (the loop logs before it answers).
    let text = std::fs::read_to_string(&log).expect("log");
    seen.logs = daemon_core_lines(&text)
        .iter()
        .map(|l| plain(l, &[&dir]))
        .collect();
    drop(daemon);
    seen
}

/// `spillway replay` with each reload at second 1, 2, 3…, and a datagram
/// every half second so that its core steps through them.
fn through_replay() -> Seen {
    let dir = temp_dir("replay");
    let cfg = dir.join(FILE);
    std::fs::write(&cfg, config(&dir, &["10.0.1.11", "10.0.1.12"], "gue")).expect("config");
    let texts = reloads(&dir);
    let mut args: Vec<String> = Vec::new();
    let mut dirs = vec![dir.clone()];
    for (i, text) in texts.iter().enumerate() {
        let d = dir.join(format!("r{i}"));
        std::fs::create_dir_all(&d).expect("dir");
        std::fs::write(d.join(FILE), text).expect("reload file");
        args.extend([
            "--at".to_owned(),
            format!("{}s", i + 1),
            "--reload".to_owned(),
            d.join(FILE).display().to_string(),
        ]);
        dirs.push(d);
    }
    let last = texts.len() as u64 + 1;
    let frames: Vec<(u64, Vec<u8>)> = (0..=last).map(|s| (s, common::dns_query(1))).collect();
    let input = dir.join("in.pcap");
    common::replay::write_timed_pcap(&input, &frames);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let r = common::replay::replay(&cfg, &input, &dir.join("out.pcap"), &args);
    let text = String::from_utf8_lossy(&r.stdout).into_owned();
    assert!(
        r.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&r.stderr)
    );
    // Longest first: a reload's directory is inside the replay's.
    dirs.reverse();
    let dirs: Vec<&Path> = dirs.iter().map(PathBuf::as_path).collect();
    let mut seen = Seen {
        answers: Vec::new(),
        generations: Vec::new(),
        backends: Vec::new(),
        logs: Vec::new(),
    };
    let mut core_lines: Vec<String> = Vec::new();
    let mut inside = false;
    for l in text.lines() {
        if let Some(rest) = l.strip_prefix("health: ") {
            inside = false;
            // "1.000 s: reload FILE: ANSWER"
            if let Some((_, answer)) = rest.split_once(&format!("{FILE}: ")) {
                seen.answers.push(plain(answer, &dirs));
            }
        } else if let Some(rest) = l.strip_prefix("core: ") {
            // "1.000 s: info: TEXT"
            let line = rest.split_once(" s: ").map_or(rest, |(_, t)| t);
            core_lines.push(line.to_owned());
            inside = true;
        } else if inside
            && !["flows: ", "tunnels: ", " "]
                .iter()
                .any(|p| l.starts_with(p))
        {
            // The rest of a line of several (what follows the core's
            // lines starts so).
            if let Some(last) = core_lines.last_mut() {
                last.push('\n');
                last.push_str(l);
            }
        } else {
            inside = false;
        }
    }
    seen.logs = core_lines.iter().map(|l| plain(l, &dirs)).collect();
    let _ = std::fs::remove_dir_all(&dir);
    seen
}

/// The live snapshot's generation and backends (`address state`, as
/// `status` names them), sorted.
fn sim_state(w: &sim::World) -> (u64, Vec<String>) {
    let mut backends: Vec<String> = w
        .live
        .backends
        .iter()
        .map(|b| format!("{} {}", b.addr, b.state.name()))
        .collect();
    backends.sort();
    (u64::from(w.live.generation), backends)
}

/// The simulation harness, a management step every 250 ms of virtual time
/// between reloads a second apart.
fn through_the_simulation() -> Seen {
    let dir = PathBuf::from("/nonexistent/spillway-1drv");
    let mut w = sim::World::new(&config(&dir, &["10.0.1.11", "10.0.1.12"], "gue"), 1, 7);
    let (g, b) = sim_state(&w);
    let mut seen = Seen {
        answers: Vec::new(),
        generations: vec![g],
        backends: vec![b],
        logs: Vec::new(),
    };
    for text in reloads(&dir) {
        w.advance(Duration::from_secs(1));
        let answer = w.reload_named(FILE, &text, false);
        seen.answers
            .push(plain(&control::reload_text(&answer), &[&dir]));
        let (g, b) = sim_state(&w);
        seen.generations.push(g);
        seen.backends.push(b);
    }
    // The simulated core's own file is `sim.toml`, the daemon's FILE: the
    // lines that name it (a reload's warnings) name FILE here too.
    seen.logs = w
        .logs
        .iter()
        .map(|(level, text)| {
            let text = text.replacen("sim.toml: ", &format!("{FILE}: "), 1);
            plain(
                &format!("{}: {text}", level.as_str().to_lowercase()),
                &[&dir],
            )
        })
        .collect();
    seen
}

#[test]
fn the_daemon_replay_and_the_simulation_decide_alike() {
    let sim = through_the_simulation();
    // The script decides something: two reloads live, two refused, the
    // endpoint taken away drains.
    assert_eq!(sim.generations, [1, 2, 2, 2, 3], "{sim:#?}");
    assert!(sim.answers[1].starts_with("reload rejected"), "{sim:#?}");
    assert!(sim.answers[2].starts_with("reload rejected"), "{sim:#?}");
    assert!(
        sim.backends[4]
            .iter()
            .any(|b| b.starts_with("10.0.1.11 draining")),
        "{sim:#?}"
    );
    let replay = through_replay();
    assert_eq!(
        replay.answers, sim.answers,
        "replay and simulation answer alike"
    );
    assert_eq!(replay.logs, sim.logs, "replay and simulation log alike");
    let daemon = through_the_daemon();
    assert_eq!(
        daemon.answers, sim.answers,
        "daemon and simulation answer alike"
    );
    assert_eq!(daemon.generations, sim.generations, "{daemon:#?}");
    assert_eq!(daemon.backends, sim.backends, "{daemon:#?}");
    assert_eq!(daemon.logs, sim.logs, "daemon and simulation log alike");
}
