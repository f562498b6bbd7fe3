//! The namespace labs of scripts/lab.sh, lab-tunnels.sh, lab-gateway.sh,
//! lab-bgp.sh and lab-vrrp.sh, as the lab tests drive them: a [`Lab`] is
//! built by `bash SCRIPT up ARGS… DIR BIN` and taken down when dropped (also
//! when the test fails), and the helpers here run clients, the balancer's
//! CLI and commands inside its namespaces. What only one test file needs
//! stays in that file (`impl Lab` blocks or free functions there).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddrV4, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A lab script and how it names its namespaces (`PREFIX TAG NAME`).
pub struct Script {
    /// Relative to the repository.
    pub path: &'static str,
    pub ns_prefix: &'static str,
}

/// `scripts/lab.sh up MODE DIR BIN`: client, router, balancer, 3 backends.
pub const LAB_SH: Script = Script {
    path: "scripts/lab.sh",
    ns_prefix: "spw",
};

/// `scripts/lab-tunnels.sh up DIR BIN`: client, router, two balancers, 2 backends.
pub const LAB_TUNNELS_SH: Script = Script {
    path: "scripts/lab-tunnels.sh",
    ns_prefix: "spt",
};

/// `scripts/lab-bgp.sh up DIR BIN`: client, a router with BIRD (ECMP), two
/// balancers each with its own BIRD, 2 backends.
pub const LAB_BGP_SH: Script = Script {
    path: "scripts/lab-bgp.sh",
    ns_prefix: "spb",
};

/// `scripts/lab-gateway.sh up DIR BIN`: client, router, server, a gateway-mode
/// balancer and two appliances (`spillway nva`).
pub const LAB_GATEWAY_SH: Script = Script {
    path: "scripts/lab-gateway.sh",
    ns_prefix: "spg",
};

/// `scripts/lab-vrrp.sh up keepalived|pair DIR BIN`: one L2 segment (a
/// bridge) with a client, a balancer and its VRRP peer (keepalived or a
/// second balancer), 3 backends.
pub const LAB_VRRP_SH: Script = Script {
    path: "scripts/lab-vrrp.sh",
    ns_prefix: "spv",
};

/// The VIP's HTTP service in both labs.
pub const VIP_HTTP: &str = "198.18.10.10:80";

/// How long a client step (connect, read) may take unless a test says otherwise.
pub const TIMEOUT: Duration = Duration::from_secs(5);

/// A running lab; dropping it takes the lab down.
pub struct Lab {
    dir: PathBuf,
    script: PathBuf,
    ns_prefix: &'static str,
    tag: String,
}

impl Lab {
    /// Runs `bash SCRIPT up ARGS… DIR BIN` with `env` added, where DIR is a
    /// new directory of this lab and BIN the directory of the spillway
    /// binary under test; panics (after taking down what was built) when
    /// that fails.
    pub fn up(script: &Script, args: &[&str], env: &[(&str, &str)]) -> Lab {
        // Unique per lab, also for labs of one test process.
        static LABS: AtomicUsize = AtomicUsize::new(0);
        let name = Path::new(script.path)
            .file_stem()
            .expect("script name")
            .to_string_lossy()
            .into_owned();
        let dir = std::env::temp_dir().join(format!(
            "spillway-{}-{}-{}",
            std::iter::once(name.as_str())
                .chain(args.iter().copied())
                .collect::<Vec<_>>()
                .join("-"),
            std::process::id(),
            LABS.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        let bin = Path::new(env!("CARGO_BIN_EXE_spillway"))
            .parent()
            .expect("bin dir")
            .to_owned();
        // Made before anything runs: from here on, whatever `up` built (it
        // writes DIR/tag first) is taken down when the test ends, also when
        // `up` fails half-way or the tag cannot be read.
        let mut lab = Lab {
            dir,
            script: PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(script.path),
            ns_prefix: script.ns_prefix,
            tag: String::new(),
        };
        let mut up = Command::new("bash");
        up.envs(env.iter().copied())
            .arg(&lab.script)
            .arg("up")
            .args(args)
            .arg(&lab.dir)
            .arg(&bin);
        let out = super::output(&mut up);
        assert!(
            out.status.success(),
            "lab up failed: {}",
            super::report(&up, &out)
        );
        lab.tag = std::fs::read_to_string(lab.dir.join("tag"))
            .expect("tag")
            .trim()
            .to_owned();
        lab
    }

    /// The lab's directory (configuration, logs, pid files, control sockets).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The per-run tag in every namespace and interface name of the lab.
    pub fn tag(&self) -> &str {
        &self.tag
    }

    /// The full name of the lab's namespace `name` ("c", "r", "lb", "b1"…).
    pub fn ns(&self, name: &str) -> String {
        format!("{}{}{name}", self.ns_prefix, self.tag)
    }

    /// Runs `f` on a new thread inside the lab's namespace `name`.
    pub fn in_ns<T: Send + 'static>(
        &self,
        name: &str,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> JoinHandle<T> {
        let path = format!("/var/run/netns/{}", self.ns(name));
        std::thread::spawn(move || {
            let fd = std::fs::File::open(&path).expect("open netns");
            nix::sched::setns(&fd, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
            f()
        })
    }

    /// Runs `f` on a new thread inside the lab's client namespace.
    pub fn in_client<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> JoinHandle<T> {
        self.in_ns("c", f)
    }

    /// `n` HTTP requests to the VIP on fresh TCP connections from the
    /// client namespace ([`TIMEOUT`] for each step); the body of each
    /// answer, or "FAILED: …".
    pub fn requests(&self, n: usize) -> Vec<String> {
        self.requests_within(n, TIMEOUT)
    }

    /// [`Lab::requests`] with `timeout` for each step.
    pub fn requests_within(&self, n: usize, timeout: Duration) -> Vec<String> {
        self.in_client(move || (0..n).map(|_| http_get(timeout)).collect())
            .join()
            .expect("client thread")
    }

    /// The control socket of the lab's (first) balancer.
    pub fn socket(&self) -> PathBuf {
        self.dir.join("control.sock")
    }

    /// `spillway ARGS… --socket DIR/control.sock`: what it printed.
    pub fn ctl(&self, args: &[&str]) -> String {
        self.ctl_on("control.sock", args)
    }

    /// `spillway ARGS… --socket DIR/SOCKET` (for a lab of several balancers).
    pub fn ctl_on(&self, socket: &str, args: &[&str]) -> String {
        let out = super::run_ok(
            Command::new(env!("CARGO_BIN_EXE_spillway"))
                .args(args)
                .arg("--socket")
                .arg(self.dir.join(socket)),
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `spillway ARGS…` on node `n`'s control socket (`n{n}/control.sock`:
    /// the labs of more than one node, scripts/lab-bgp.sh,
    /// scripts/lab-tunnels.sh and scripts/lab-vrrp.sh).
    pub fn node(&self, n: u8, args: &[&str]) -> String {
        self.ctl_on(&format!("n{n}/control.sock"), args)
    }

    /// Adds backend 3 (the endpoint line marked `# b3`) to web's group in
    /// both nodes' files of a two-node lab and reloads both; waits until
    /// both use it.
    pub fn add_backend3(&self) {
        for n in 1..=2u8 {
            let path = self.dir().join(format!("node{n}.toml"));
            let text = std::fs::read_to_string(&path).expect("node toml");
            assert!(text.contains("# b3"), "no backend 3 line in {path:?}");
            let text: String = text
                .lines()
                .map(|l| match l.strip_suffix("# b3") {
                    Some(line) => format!("{}\n", line.replacen('#', "", 1)),
                    None => format!("{l}\n"),
                })
                .collect();
            std::fs::write(&path, text).expect("write node toml");
            let said = self.node(n, &["reload"]);
            eprintln!("node {n} reload: {}", said.trim());
        }
        for n in 1..=2u8 {
            self.wait_status_on(
                &format!("n{n}/control.sock"),
                &format!("node{n}.log"),
                &["service web: ", "(3 eligible backends)"],
                Duration::from_secs(30),
            );
        }
    }

    /// The log of the lab's (first) balancer.
    pub fn log(&self) -> String {
        self.log_of("spillway.log")
    }

    /// The log file `name` of the lab's directory ("" when there is none).
    pub fn log_of(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.join(name)).unwrap_or_default()
    }

    /// Waits (at most `within`) until `spillway status` has a line
    /// containing every one of `parts`; the status then.
    pub fn wait_status(&self, parts: &[&str], within: Duration) -> String {
        self.wait_status_on("control.sock", "spillway.log", parts, within)
    }

    /// [`Lab::wait_status`] for the balancer of `socket`, whose log `log`
    /// the failure shows.
    pub fn wait_status_on(
        &self,
        socket: &str,
        log: &str,
        parts: &[&str],
        within: Duration,
    ) -> String {
        let end = Instant::now() + within;
        loop {
            let s = self.ctl_on(socket, &["status"]);
            if s.lines().any(|l| parts.iter().all(|p| l.contains(p))) {
                return s;
            }
            assert!(
                Instant::now() < end,
                "no status line with {parts:?} within {within:?}:\n{s}\n{log}:\n{}",
                self.log_of(log)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Runs `ip ARGS…` in the lab's namespace `ns`; what it printed.
    pub fn ip(&self, ns: &str, args: &[&str]) -> String {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns(ns), "ip"]).args(args);
        let out = super::run_ok(&mut c);
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Five pings (0.2 s apart) from the lab's namespace `ns` to `dst`: what
    /// ping printed, and for messages how it ran and ended (a ping that is
    /// missing or fails says so on stderr only).
    pub fn ping(&self, ns: &str, dst: &str) -> (String, String) {
        let mut ping = Command::new("ip");
        ping.args([
            "netns",
            "exec",
            &self.ns(ns),
            "ping",
            "-c",
            "5",
            "-i",
            "0.2",
            "-W",
            "2",
            dst,
        ]);
        let out = super::output(&mut ping);
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            super::report(&ping, &out),
        )
    }

    /// Link counters of `dev` in the lab's namespace `ns`: (rx packets, tx
    /// packets). For a TAP, rx is what the data plane handed the kernel.
    pub fn link_packets(&self, ns: &str, dev: &str) -> (u64, u64) {
        let read = |what: &str| {
            let mut cat = Command::new("ip");
            cat.args([
                "netns",
                "exec",
                &self.ns(ns),
                "cat",
                &format!("/sys/class/net/{dev}/statistics/{what}_packets"),
            ]);
            let out = super::run_ok(&mut cat);
            String::from_utf8_lossy(&out.stdout)
                .trim()
                .parse::<u64>()
                .unwrap_or_else(|e| panic!("{e}: {}", super::report(&cat, &out)))
        };
        (read("rx"), read("tx"))
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        // `down` reads DIR/tag itself, so it also removes a lab whose tag
        // this process never read; without a tag it does nothing.
        let _ = Command::new("bash")
            .arg(&self.script)
            .arg("down")
            .arg(&self.dir)
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One HTTP/1.0 request to the VIP on a new connection (`timeout` for each
/// step): the answer's body, or "FAILED: …".
pub fn http_get(timeout: Duration) -> String {
    let vip: SocketAddrV4 = VIP_HTTP.parse().expect("vip");
    answer(TcpStream::connect_timeout(&vip.into(), timeout).and_then(|s| get_on(s, timeout)))
}

/// `GET /` on connection `s` (HTTP/1.0, `timeout` for each read): the
/// answer's body.
pub fn get_on(mut s: TcpStream, timeout: Duration) -> std::io::Result<String> {
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
}

/// An answer's body, or "FAILED: …".
pub fn answer(r: std::io::Result<String>) -> String {
    r.unwrap_or_else(|e| format!("FAILED: {e}"))
}

/// `GET /metrics` (on `[metrics].listen`'s default 127.0.0.1:9469) of the
/// balancer whose namespace the calling thread is in: the whole answer.
pub fn metrics_here() -> String {
    let mut s =
        TcpStream::connect_timeout(&"127.0.0.1:9469".parse().expect("metrics address"), TIMEOUT)
            .expect("connect to the metrics endpoint");
    s.set_read_timeout(Some(TIMEOUT)).expect("timeout");
    s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n")
        .expect("metrics request");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("metrics answer");
    out
}

/// The samples of a `/metrics` answer (headers, then OpenMetrics text), by
/// series (`name{labels}`).
pub fn metric_samples(answer: &str) -> BTreeMap<String, f64> {
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or(answer);
    body.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (series, v) = l.rsplit_once(' ').unwrap_or_else(|| panic!("{l}"));
            (
                series.to_owned(),
                v.parse().unwrap_or_else(|_| panic!("{l}")),
            )
        })
        .collect()
}

/// The answers of [`Lab::requests`] that are failures.
pub fn failed(answers: &[String]) -> Vec<&String> {
    answers.iter().filter(|a| a.starts_with("FAILED")).collect()
}

/// How many of `answers` each backend (or failure) gave.
pub fn spread(answers: &[String]) -> BTreeMap<String, usize> {
    let mut per = BTreeMap::new();
    for a in answers {
        *per.entry(a.clone()).or_insert(0usize) += 1;
    }
    per
}

/// The number right after the first `label` in `text` (`spillway stats`:
/// `counter(s, "to host ")`, `counter(s, " gue ")`).
pub fn counter(text: &str, label: &str) -> u64 {
    let at = text
        .find(label)
        .unwrap_or_else(|| panic!("no {label:?} in:\n{text}"));
    text[at + label.len()..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no number after {label:?} in:\n{text}"))
}
