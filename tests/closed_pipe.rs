//! No command panics when its reader goes away (`spillway … | head -1`):
//! writing to a pipe or socket whose reader is gone fails with EPIPE (Rust
//! ignores SIGPIPE), and `print!` panics on that (an abort in a release
//! build). Every command that prints is run with its stdout (and, where it
//! prints there, its stderr) already closed at the other end, and again
//! with a reader that takes one line and leaves, many times; each must end
//! with its own exit status, no panic.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// A directory of its own, removed however the test ends.
struct Tmp(PathBuf);

impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tmp(name: &str) -> Tmp {
    let d = std::env::temp_dir().join(format!("spillway-pipe-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    Tmp(d)
}

fn repo(path: &str) -> String {
    format!("{}/{path}", env!("CARGO_MANIFEST_DIR"))
}

/// A stream whose reader is already gone: writing to it is EPIPE.
fn closed() -> Stdio {
    let (ours, theirs) = UnixStream::pair().unwrap();
    drop(ours);
    Stdio::from(OwnedFd::from(theirs))
}

/// A fake control socket answering every connection `ok` and `lines` lines
/// of text (more than a pipe buffer holds, so that a reader leaving early
/// is seen while writing), until the test ends.
fn fake_daemon(dir: &Path, lines: usize) -> PathBuf {
    let path = dir.join("ctl.sock");
    let listener = UnixListener::bind(&path).unwrap();
    let answer: String = std::iter::once("ok\n".to_owned())
        .chain((0..lines).map(|i| format!("line {i} of the answer\n")))
        .collect();
    std::thread::spawn(move || {
        for s in listener.incoming() {
            let Ok(mut s) = s else { return };
            let answer = answer.clone();
            std::thread::spawn(move || {
                let mut line = Vec::new();
                let mut b = [0u8; 1];
                while s.read(&mut b).unwrap_or(0) == 1 && b[0] != b'\n' {
                    line.push(b[0]);
                }
                let _ = s.write_all(answer.as_bytes());
            });
        }
    });
    path
}

/// What a run came to: its status and what it wrote on stderr (when
/// stderr was not the closed stream).
fn check(what: &str, status: ExitStatus, stderr: &str, want: i32) {
    assert!(
        !stderr.contains("panicked") && !stderr.contains("failed printing"),
        "{what}: {status:?}\n{stderr}"
    );
    assert_eq!(
        status.code(),
        Some(want),
        "{what}: exit status (a signal or 101 is a panic)\n{stderr}"
    );
}

/// Runs `args` with stdout closed (and stderr too if `both`); stderr is
/// read otherwise.
fn run_closed(args: &[String], both: bool, want: i32) {
    let what = format!(
        "spillway {} (stdout closed{})",
        args.join(" "),
        if both { ", stderr closed" } else { "" }
    );
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_spillway"));
    cmd.args(args)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(closed());
    if both {
        cmd.stderr(closed());
        let status = cmd.status().unwrap();
        check(&what, status, "", want);
    } else {
        let out = cmd.stderr(Stdio::piped()).output().unwrap();
        check(
            &what,
            out.status,
            &String::from_utf8_lossy(&out.stderr),
            want,
        );
    }
}

/// Runs `args` with a reader that takes the first line and leaves (what
/// `| head -1` does), `times` times.
fn run_head(args: &[String], want: i32, times: usize) {
    for i in 0..times {
        let what = format!("spillway {} | head -1 (run {i})", args.join(" "));
        let mut child = Command::new(env!("CARGO_BIN_EXE_spillway"))
            .args(args)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut first = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut first)
            .unwrap();
        // (The reader is dropped here: the pipe is closed.)
        let mut stderr = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        let status = wait(&mut child, &what);
        assert!(!first.is_empty(), "{what}: no first line\n{stderr}");
        check(&what, status, &stderr, want);
    }
}

/// Waits (generously) for `child`; a command that never ends is a failure.
fn wait(child: &mut std::process::Child, what: &str) -> ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{what}: still running after its reader left");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn args(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| (*s).to_owned()).collect()
}

#[test]
fn no_command_panics_when_its_reader_goes_away() {
    let dir = tmp("commands");
    let reference = repo("config/reference.toml");
    let bad = dir.0.join("bad.toml");
    std::fs::write(&bad, "[node]\nname = 5\n").unwrap();
    let bad = bad.display().to_string();
    let socket = fake_daemon(&dir.0, 20_000);
    let socket = socket.display().to_string();

    // Commands with their exit status: check-config (valid: stdout;
    // invalid: stderr), bird-config, the daemon's clients (their answers
    // on stdout; `stats --watch` prints until its reader leaves),
    // zone-health's client, and clap's own help.
    let cases: Vec<(Vec<String>, i32)> = vec![
        (args(&["check-config", &reference]), 0),
        (args(&["check-config", &bad]), 1),
        (args(&["bird-config", "--config", &reference]), 0),
        (args(&["status", "--socket", &socket]), 0),
        (args(&["stats", "--socket", &socket]), 0),
        (args(&["stats", "--socket", &socket, "--watch", "0.1"]), 0),
        (
            args(&["stats", "--socket", &socket, "--json", "--watch", "0.1"]),
            0,
        ),
        (args(&["flows", "--socket", &socket]), 0),
        (args(&["reload", "--socket", &socket]), 0),
        (args(&["drain", "node", "n1", "--socket", &socket]), 0),
        (args(&["zone-health", "--socket", &socket, "status"]), 0),
        (args(&["--help"]), 0),
    ];
    for (a, want) in &cases {
        run_closed(a, false, *want);
        run_closed(a, true, *want);
    }
    // Those whose first line comes before more output: a reader that
    // leaves after it, again and again (the issue saw 4 aborts in 6).
    for (a, want) in &cases[..10] {
        if a[0] != "check-config" || *want == 0 {
            run_head(a, *want, if a[0] == "check-config" { 12 } else { 3 });
        }
    }
}

#[test]
fn replay_does_not_panic_when_its_reader_goes_away() {
    use testkit::config::{Config, endpoint_list, group, node, port, rule, service};
    let dir = tmp("replay");
    let config = Config::new()
        .node(node("replay", "r", "z"))
        .port(
            port("up", "net_pcap0", "uplink")
                .strs("addresses", &["10.0.0.2/24"])
                .str("mac", "02:00:00:00:00:01")
                .str("gateway_mac", "02:00:00:00:00:fe"),
        )
        .rule(rule("web", &["10.0.0.10"], "TCP", "80", "web"))
        .service(
            service("web", "ipip")
                .child(group("a", "r", "z").set("endpoints", endpoint_list(&["10.0.1.11"]))),
        )
        .build();
    let cfg = dir.0.join("c.toml");
    std::fs::write(&cfg, config).unwrap();
    let input = dir.0.join("in.pcap");
    let frames: Vec<Vec<u8>> = (0..20u16)
        .map(|i| {
            common::tcp_frame(
                [192, 0, 2, 1].into(),
                [10, 0, 0, 10].into(),
                1000 + i,
                80,
                common::SYN,
                b"",
            )
        })
        .collect();
    common::write_pcap(&input, &frames);
    let output = dir.0.join("out.pcap");
    let a = args(&[
        "replay",
        "--config",
        &cfg.display().to_string(),
        "--input",
        &input.display().to_string(),
        "--output",
        &output.display().to_string(),
    ]);
    run_closed(&a, false, 0);
    run_closed(&a, true, 0);
    run_head(&a, 0, 5);
}
