//! Tunnelled ingress (M49) between two real Spillway processes, in a
//! namespace lab built by scripts/lab-tunnels.sh: the first node's rule
//! spills over to the second node's through a `remote_rule` group (GUE to
//! the second node's own address); the second decapsulates and delivers to
//! its own backends, which answer the client directly. Real kernel TCP
//! connections from a client namespace must complete through both nodes.
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
    fn up() -> Lab {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let script = root.join("scripts/lab-tunnels.sh");
        let dir = std::env::temp_dir().join(format!("spillway-lab-tunnels-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let bin = Path::new(env!("CARGO_BIN_EXE_spillway"))
            .parent()
            .expect("bin dir")
            .to_owned();
        let mut up = Command::new("bash");
        up.arg(&script).arg("up").arg(&dir).arg(&bin);
        let out = common::output(&mut up);
        // From here on the lab is removed when the test ends, failed or not
        // (a failed `up` removes what it built itself).
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
        format!("spt{}{name}", self.tag)
    }

    /// `spillway CMD` on node `n`'s control socket.
    fn ctl(&self, n: u8, args: &[&str]) -> String {
        let out = common::run_ok(
            Command::new(env!("CARGO_BIN_EXE_spillway"))
                .args(args)
                .arg("--socket")
                .arg(self.dir.join(format!("n{n}/control.sock"))),
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `n` HTTP requests to the VIP on fresh TCP connections from the
    /// client namespace; the body of each answer, or "FAILED: …".
    fn requests(&self, n: usize, timeout: Duration) -> Vec<String> {
        let path = format!("/var/run/netns/{}", self.ns("c"));
        std::thread::spawn(move || {
            let fd = std::fs::File::open(&path).expect("open netns");
            nix::sched::setns(&fd, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
            (0..n).map(|_| http_get(timeout)).collect()
        })
        .join()
        .expect("client thread")
    }

    /// Waits until node 1 sees node 2's rule HEALTHY (its /status polled
    /// through both nodes' exception paths).
    fn wait_for_the_peer(&self) {
        let t0 = Instant::now();
        loop {
            let status = self.ctl(1, &["status"]);
            if status
                .lines()
                .any(|l| l.contains("198.18.1.3:9469") && l.contains("): HEALTHY"))
            {
                eprintln!("node 1 sees node 2's rule HEALTHY after {:?}", t0.elapsed());
                return;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "node 1 never saw node 2's rule healthy:\n{status}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Replaces node 2's `[tunnel_ingress] allow` and reloads it.
    fn allow_on_node2(&self, prefix: &str) {
        let path = self.dir.join("node2.toml");
        let text = std::fs::read_to_string(&path).expect("node2.toml");
        let text: String = text
            .lines()
            .map(|l| {
                if l.starts_with("allow = ") {
                    format!("allow = [\"{prefix}\"]\n")
                } else {
                    format!("{l}\n")
                }
            })
            .collect();
        std::fs::write(&path, text).expect("write node2.toml");
        let said = self.ctl(2, &["reload"]);
        eprintln!("node 2 reload: {}", said.trim());
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

/// One HTTP/1.0 request to the VIP: the answer's body.
fn http_get(timeout: Duration) -> String {
    let vip: SocketAddrV4 = "198.18.10.10:80".parse().expect("vip");
    let get = || -> std::io::Result<String> {
        let mut s = TcpStream::connect_timeout(&vip.into(), timeout)?;
        s.set_read_timeout(Some(timeout))?;
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

/// The number after `label` in `stats` text ("decapsulated ipip 0 gre 0
/// gue 5" → `counter(t, " gue ")` = 5).
fn counter(stats: &str, label: &str) -> u64 {
    let at = stats
        .find(label)
        .unwrap_or_else(|| panic!("no {label:?} in:\n{stats}"));
    stats[at + label.len()..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no number after {label:?} in:\n{stats}"))
}

#[test]
fn lab_tcp_spills_over_through_a_second_spillway() {
    let lab = Lab::up();
    lab.wait_for_the_peer();

    let n = 200;
    let t0 = Instant::now();
    let answers = lab.requests(n, Duration::from_secs(5));
    let took = t0.elapsed();
    let failed: Vec<&String> = answers.iter().filter(|a| a.starts_with("FAILED")).collect();
    let mut per = std::collections::BTreeMap::new();
    for a in &answers {
        *per.entry(a.clone()).or_insert(0usize) += 1;
    }
    let s1 = lab.ctl(1, &["stats"]);
    let s2 = lab.ctl(2, &["stats"]);
    eprintln!(
        "{n} connections through both nodes in {took:?} ({:.1} ms each); answers {per:?}",
        took.as_secs_f64() * 1000.0 / n as f64
    );
    eprintln!(
        "node 1:\n{}",
        s1.lines().take(2).collect::<Vec<_>>().join("\n")
    );
    eprintln!(
        "node 2:\n{}",
        s2.lines().take(2).collect::<Vec<_>>().join("\n")
    );
    assert!(
        failed.is_empty(),
        "{} of {n} requests failed, e.g. {:?}",
        failed.len(),
        failed.first()
    );
    assert_eq!(
        per.keys().cloned().collect::<Vec<_>>(),
        ["backend1", "backend2"],
        "node 2 spreads over both of its backends: {per:?}"
    );
    // Every client packet (at least SYN, request, ACK, FIN per connection)
    // went through node 1 in GUE and was decapsulated by node 2. (The two
    // nodes' counters are read at different moments: each is checked on
    // its own.)
    let least = 3 * n as u64;
    let gue = counter(&s2, " gue ");
    assert!(gue >= least, "node 2 decapsulated {gue}:\n{s2}");
    assert!(counter(&s1, "forwarded ") >= least, "node 1:\n{s1}");
    assert!(counter(&s2, "forwarded ") >= least, "node 2:\n{s2}");
    assert_eq!(counter(&s2, "drop tunnel_source_denied: "), 0, "{s2}");

    // Node 2 no longer accepts node 1's tunnels: connections fail, and the
    // tunnels are counted as denied (not handed to node 2's host).
    lab.allow_on_node2("198.18.1.99/32");
    let answers = lab.requests(3, Duration::from_secs(2));
    assert!(
        answers.iter().all(|a| a.starts_with("FAILED")),
        "{answers:?}"
    );
    let s2 = lab.ctl(2, &["stats"]);
    let denied = counter(&s2, "drop tunnel_source_denied: ");
    eprintln!("with node 1 not allowed: {denied} tunnels denied");
    assert!(denied >= 3, "{s2}");

    // Allowed again: traffic flows again.
    lab.allow_on_node2("198.18.1.2/32");
    let answers = lab.requests(20, Duration::from_secs(5));
    assert!(
        answers.iter().all(|a| a.starts_with("backend")),
        "{answers:?}"
    );
}
