//! The demo (M45), `scripts/demo.sh` on the binary under test: it narrates
//! every step, sees what it shows happen (a killed backend marked unhealthy
//! and back, a reload under load losing no connection, both appliances on
//! the gateway path, a drained node taking no new connection), draws its
//! PNG, and leaves nothing behind: no namespace of its labs, no process, no
//! work directory. The quick run and the whole one with plain progress lines
//! (output not a terminal); a quick one on a terminal (spinners, the status
//! table redrawn in place) interrupted with Ctrl-C half-way. Needs root, and
//! BIRD for the whole one (scripts/setup.sh installs bird2).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

/// How long a demo may take before the test gives up on it (the quick one
/// takes about 20 s, the whole one 40 s; a debug build and a busy machine
/// take longer).
const LIMIT: Duration = Duration::from_secs(170);

/// A running `scripts/demo.sh [--quick]`, in a process group of its own (as
/// a terminal's foreground job), its output read line by line.
struct Demo {
    child: Child,
    lines: Receiver<String>,
    seen: Vec<String>,
    out: PathBuf,
}

impl Demo {
    /// `bash scripts/demo.sh [--quick]`; with `tty`, on a terminal of its
    /// own: under `script`, which gives it a pseudo-terminal and passes
    /// what the test writes (Ctrl-C) to it as typed.
    fn start(name: &str, quick: bool, tty: bool) -> Demo {
        let out = std::env::temp_dir().join(format!("spillway-demo-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&out);
        let bin = Path::new(env!("CARGO_BIN_EXE_spillway"))
            .parent()
            .expect("bin dir")
            .to_owned();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/demo.sh");
        let quick = if quick { " --quick" } else { "" };
        let mut cmd = if tty {
            let mut c = Command::new("script");
            // -e: its exit status is the demo's; -f: output as it comes.
            c.args([
                "-qfec",
                &format!("bash '{}'{quick}", script.display()),
                "/dev/null",
            ]);
            c
        } else {
            let mut c = Command::new("bash");
            c.arg(&script).args(quick.split_whitespace());
            c
        };
        let mut child = cmd
            .env("DEMO_BIN", &bin)
            .env("DEMO_OUT", &out)
            .stdin(if tty { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .process_group(0)
            .spawn()
            .expect("run scripts/demo.sh");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Demo {
            child,
            lines,
            seen: Vec::new(),
            out,
        }
    }

    fn text(&self) -> String {
        self.seen.join("\n")
    }

    /// Reads output until a line contains `what`; false if the demo ended
    /// (or `until` passed) first.
    fn read_until(&mut self, what: &str, until: Instant) -> bool {
        loop {
            let left = until.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let hit = line.contains(what);
                    self.seen.push(line);
                    if hit {
                        return true;
                    }
                }
                Err(_) => return false,
            }
        }
    }

    /// Waits for the demo to end (all its output read); its exit status.
    fn wait(&mut self, until: Instant) -> ExitStatus {
        while self.read_until("\u{0}never printed", until) {}
        loop {
            if let Some(st) = self.child.try_wait().expect("wait for the demo") {
                return st;
            }
            if Instant::now() > until {
                let _ = self.interrupt();
                let _ = self.child.wait();
                panic!("the demo did not end in {LIMIT:?}:\n{}", self.text());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Ctrl-C: typed on its terminal, or SIGINT to its whole process
    /// group (what a terminal does); whether that went through.
    fn interrupt(&mut self) -> bool {
        if let Some(tty) = self.child.stdin.as_mut() {
            if tty.write_all(b"\x03").and_then(|()| tty.flush()).is_ok() {
                return true;
            }
        }
        Command::new("kill")
            .args(["-INT", "--", &format!("-{}", self.child.id())])
            .status()
            .is_ok_and(|st| st.success())
    }

    /// The namespace prefix (`spw`, `spg` or `spb` and a tag) of each lab
    /// the narration named ("namespaces PREFIXc (client), …").
    fn lab_prefixes(&self) -> Vec<String> {
        let text = self.text();
        let prefixes: Vec<String> = text
            .match_indices("namespaces sp")
            .map(|(at, _)| {
                let name = text[at + "namespaces ".len()..]
                    .split_whitespace()
                    .next()
                    .expect("a namespace");
                name.strip_suffix('c')
                    .unwrap_or_else(|| panic!("{name}: not a client namespace"))
                    .to_owned()
            })
            .collect();
        assert!(!prefixes.is_empty(), "no namespaces named in:\n{text}");
        prefixes
    }

    /// The work directory the demo named.
    fn work_dir(&self) -> String {
        let text = self.text();
        text.lines()
            .find_map(|l| l.trim().strip_prefix("work directory: "))
            .unwrap_or_else(|| panic!("no work directory named in:\n{text}"))
            .trim()
            .to_owned()
    }

    /// Nothing of the demo is left: no namespace of its labs, no process
    /// whose command line names its work directory (every lab's processes
    /// do), not the directory, no DPDK file of its labs.
    fn assert_nothing_left(&self) -> Vec<String> {
        let prefixes = self.lab_prefixes();
        let work = self.work_dir();
        let out = Command::new("ip")
            .args(["netns", "list"])
            .output()
            .expect("ip netns list");
        let left: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| prefixes.iter().any(|p| l.starts_with(p)))
            .map(str::to_owned)
            .collect();
        assert!(left.is_empty(), "namespaces left: {left:?}");
        assert!(!Path::new(&work).exists(), "{work} is left");
        let procs: Vec<String> = std::fs::read_dir("/proc")
            .expect("/proc")
            .flatten()
            .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
            .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
            .filter(|c| c.contains(&work))
            .collect();
        assert!(procs.is_empty(), "processes left: {procs:?}");
        // DPDK's runtime directories and hugepage files, named by the labs'
        // --file-prefix (their namespace prefix).
        for dir in ["/var/run/dpdk", "/dev/hugepages"] {
            let left: Vec<String> = std::fs::read_dir(dir)
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| prefixes.iter().any(|p| n.starts_with(p)))
                .collect();
            assert!(left.is_empty(), "left in {dir}: {left:?}");
        }
        prefixes
    }
}

impl Drop for Demo {
    fn drop(&mut self) {
        // A test that failed half-way: the demo cleans up on SIGINT.
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.interrupt();
            let _ = self.child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.out);
    }
}

/// Runs a demo to its end and checks what every run shows: the first lab's
/// steps (headings 1 to 6 of `total`, a "look at" each), progress as plain
/// lines off a terminal, the outcomes it reports, its PNG; then that nothing
/// is left. The narration and the labs' namespace prefixes, for more checks.
fn run_and_check(name: &str, quick: bool, total: usize) -> (String, Vec<String>) {
    let mut demo = Demo::start(name, quick, false);
    let st = demo.wait(Instant::now() + LIMIT);
    let text = demo.text();
    assert!(st.success(), "the demo failed ({st}):\n{text}");
    eprintln!("{text}");

    for (n, step) in [
        "The lab",
        "Traffic, and the live status table",
        "How the connections spread",
        "A backend fails and comes back",
        "Reloading the configuration under load",
        "A picture of the spread",
    ]
    .iter()
    .enumerate()
    {
        let heading = format!("== [{}/{total}] {step}", n + 1);
        assert!(text.contains(&heading), "no heading {heading:?}:\n{text}");
    }
    assert_eq!(
        text.matches("   look at: ").count(),
        total,
        "one 'look at' per step:\n{text}"
    );
    // Not a terminal: progress as plain lines, each step that waits says so.
    assert!(
        text.contains("   ... waiting for the health checks"),
        "{text}"
    );
    assert!(text.contains("   done: traffic for "), "{text}");
    assert!(!text.contains('\r'), "no spinner off a terminal:\n{text}");
    // What the steps show happened.
    assert!(!text.contains("UNEXPECTED"), "{text}");
    for shown in [
        "health web/198.18.2.12:80: UNHEALTHY",
        "health web/198.18.2.12:80: HEALTHY",
        "ok: no failure once backend2 was marked unhealthy",
        "30 connections, ",
        " 0 broken",
        "ok: no connection lost",
        "== cleaning up ==",
    ] {
        assert!(text.contains(shown), "{shown:?} not shown:\n{text}");
    }

    // The picture: a PNG of some size, where the demo said.
    let png = demo.out.join("spillway-demo.png");
    assert!(
        text.contains(&format!("picture: {}", png.display())),
        "{text}"
    );
    let bytes = std::fs::read(&png).unwrap_or_else(|e| panic!("{}: {e}", png.display()));
    assert!(
        bytes.starts_with(b"\x89PNG\r\n\x1a\n") && &bytes[12..16] == b"IHDR",
        "{} is not a PNG",
        png.display()
    );
    let width = u32::from_be_bytes(bytes[16..20].try_into().expect("width"));
    let height = u32::from_be_bytes(bytes[20..24].try_into().expect("height"));
    assert!(width >= 400 && height >= 300, "{width}x{height}");
    // Its data: every backend answered.
    let log = std::fs::read_to_string(demo.out.join("requests.log")).expect("requests.log");
    for b in ["backend1", "backend2", "backend3"] {
        assert!(log.lines().any(|l| l.ends_with(&format!(" {b}"))), "{b}");
    }

    let labs = demo.assert_nothing_left();
    (text, labs)
}

#[test]
fn demo_quick_narrates_each_step_draws_its_png_and_leaves_nothing() {
    let (text, labs) = run_and_check("quick", true, 6);
    assert!(!text.contains("Gateway mode"), "{text}");
    assert_eq!(labs.len(), 1, "{labs:?}");
}

#[test]
fn demo_whole_shows_the_gateway_path_and_a_drained_node() {
    let (text, labs) = run_and_check("whole", false, 8);
    // The three labs, each checked for leftovers.
    assert_eq!(labs.len(), 3, "{labs:?}");
    for (lab, kind) in labs.iter().zip(["spw", "spg", "spb"]) {
        assert!(lab.starts_with(kind), "{labs:?}");
    }
    for shown in [
        "== [7/8] Gateway mode",
        "server 200",
        "ok: every connection through one appliance, both directions",
        "== [8/8] Two nodes behind BIRD",
        "drained: node node1",
        "new connections: node1 0, node2 200",
        "ok: every new connection through node2",
    ] {
        assert!(text.contains(shown), "{shown:?} not shown:\n{text}");
    }
    // Both appliances and both nodes carried connections before the drain.
    for n in 1..=2 {
        let line = text
            .lines()
            .find(|l| l.contains(&format!("nva{n} carried ")))
            .unwrap_or_else(|| panic!("nva{n}:\n{text}"));
        assert!(!line.contains("carried 0 "), "{line}");
    }
    let first = text
        .lines()
        .find(|l| l.contains("new connections: node1 "))
        .expect("a round through both nodes");
    assert!(
        !first.contains("node1 0,") && !first.contains("node2 0 "),
        "{first}"
    );
}

#[test]
fn demo_on_a_terminal_interrupted_with_ctrl_c_leaves_nothing() {
    let mut demo = Demo::start("ctrl-c", true, true);
    let until = Instant::now() + LIMIT;
    // Half-way: the lab up, traffic running, a backend being killed.
    assert!(
        demo.read_until("== [4/6] A backend fails", until),
        "the demo did not get to step 4:\n{}",
        demo.text()
    );
    assert!(demo.interrupt(), "Ctrl-C to the demo");
    let st = demo.wait(until);
    let text = demo.text();
    assert_eq!(st.code(), Some(130), "exit status after Ctrl-C:\n{text}");
    // On a terminal: spinners (each redrawn after a carriage return) and
    // the status table redrawn in place (cursor up, clear to the end).
    assert!(
        text.contains("\r   | waiting for the health checks"),
        "no spinner:\n{text}"
    );
    assert!(
        text.contains("\x1b[J     node lab"),
        "no live status:\n{text}"
    );
    assert!(
        !text.contains("   ... waiting"),
        "plain progress lines:\n{text}"
    );
    assert!(text.contains("== cleaning up =="), "{text}");
    assert!(
        text.contains("lab.sh: lab ")
            && text.contains(" removed (namespaces, processes, DPDK files)"),
        "{text}"
    );
    let labs = demo.assert_nothing_left();
    assert_eq!(labs.len(), 1, "{labs:?}");
}
