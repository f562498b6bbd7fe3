//! M47, host traffic by port: the namespace lab of scripts/lab.sh with
//! `LAB_EXCEPTION=per-port` gives the backend port an exception TAP of its
//! own, and its router does not route between the uplink and backend
//! subnets. The host's kernel can then reach the backends only by the backend
//! port: health probes pass, ping works through that TAP, and clients reach
//! the backends through the VIP meanwhile. Needs root.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddrV4, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The lab, taken down (also when the test fails) when dropped.
struct Lab {
    dir: PathBuf,
    script: PathBuf,
    tag: String,
}

impl Lab {
    fn up(mode: &str, env: &[(&str, &str)]) -> Lab {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let script = root.join("scripts/lab.sh");
        let dir = std::env::temp_dir().join(format!(
            "spillway-lab-exception-{mode}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        let bin = Path::new(env!("CARGO_BIN_EXE_spillway"))
            .parent()
            .expect("bin dir")
            .to_owned();
        let mut up = Command::new("bash");
        up.envs(env.iter().copied())
            .arg(&script)
            .args(["up", mode])
            .arg(&dir)
            .arg(&bin);
        let out = common::output(&mut up);
        // Constructed before the assertion, so that a half-built lab is
        // taken down too.
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
        format!("spw{}{name}", self.tag)
    }

    /// What `cmd` printed, and a report of how it ran for messages.
    fn text(cmd: &mut Command) -> (String, String) {
        let out = common::output(cmd);
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            common::report(cmd, &out),
        )
    }

    /// `spillway <what>` (status, stats) of the lab's daemon.
    fn ask(&self, what: &str) -> String {
        let out = common::run_ok(
            Command::new(env!("CARGO_BIN_EXE_spillway"))
                .args([what, "--socket"])
                .arg(self.dir.join("control.sock")),
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Packets interface `dev` of the balancer's namespace received (for a
    /// TAP: what the data plane handed the kernel through it).
    fn rx_packets(&self, dev: &str) -> u64 {
        let path = format!("/sys/class/net/{dev}/statistics/rx_packets");
        let (out, ran) =
            Lab::text(Command::new("ip").args(["netns", "exec", &self.ns("lb"), "cat", &path]));
        out.trim().parse().unwrap_or_else(|e| panic!("{e}: {ran}"))
    }

    /// The log of the lab's daemon.
    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("spillway.log")).unwrap_or_default()
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

/// Runs `f` on a new thread inside the lab's namespace `name`.
fn in_ns<T: Send + 'static>(
    lab: &Lab,
    name: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::thread::JoinHandle<T> {
    let path = format!("/var/run/netns/{}", lab.ns(name));
    std::thread::spawn(move || {
        let fd = std::fs::File::open(&path).expect("open netns");
        nix::sched::setns(&fd, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
        f()
    })
}

/// One HTTP/1.0 request to the VIP on a new connection: the answer's body.
fn http_get() -> String {
    let vip: SocketAddrV4 = "198.18.10.10:80".parse().expect("vip");
    let get = || -> std::io::Result<String> {
        let mut s = TcpStream::connect_timeout(&vip.into(), Duration::from_secs(5))?;
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
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

/// A counter of `spillway stats`' first line ("to host 12").
fn stat(stats: &str, name: &str) -> u64 {
    stats
        .split(&format!("{name} "))
        .nth(1)
        .and_then(|r| r.split([' ', ';', '\n']).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no {name:?} in {stats}"))
}

#[test]
fn lab_host_traffic_to_backends_takes_the_backend_ports_exception_tap() {
    let lab = Lab::up("ipip", &[("LAB_EXCEPTION", "per-port")]);
    let tap = format!("s{}kb", lab.tag);

    // The router routes nothing between the subnets: the backends are
    // directly connected to the host's backend-port TAP only.
    let (route, ran) = Lab::text(Command::new("ip").args([
        "netns",
        "exec",
        &lab.ns("lb"),
        "ip",
        "route",
        "get",
        "198.18.2.11",
    ]));
    assert!(route.contains(&format!("dev {tap}")), "{ran}");

    // M16 through M47: every backend's HTTP probe (from 198.18.2.2 on the
    // TAP, out the backend port, answers back to the TAP) passes.
    let started = Instant::now();
    let healthy = "region lab: Healthy, 3 endpoints (3 healthy";
    loop {
        let s = lab.ask("status");
        if s.contains(healthy) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "never saw {healthy:?}:\n{s}\nlog:\n{}",
            lab.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("every backend healthy after {:?}", started.elapsed());
    let status = lab.ask("status");
    for b in 1..=3 {
        let probed = format!("198.18.2.1{b}:80");
        assert!(
            status
                .lines()
                .any(|l| l.contains(&probed) && l.contains("HEALTHY") && !l.contains("UNHEALTHY")),
            "{probed} is not HEALTHY:\n{status}"
        );
    }

    // The host's kernel pings a backend through its backend-port TAP.
    let tap_before = lab.rx_packets(&tap);
    let (ping, ran) = Lab::text(Command::new("ip").args([
        "netns",
        "exec",
        &lab.ns("lb"),
        "ping",
        "-c",
        "5",
        "-i",
        "0.2",
        "-W",
        "2",
        "198.18.2.12",
    ]));
    assert!(ping.contains("5 packets transmitted, 5 received"), "{ran}");
    let handed = lab.rx_packets(&tap) - tap_before;
    assert!(
        handed >= 5,
        "the pings' replies come in through {tap}, which handed the kernel only {handed} frames"
    );

    // Clients reach the backends through the VIP meanwhile.
    let answers = in_ns(&lab, "c", || {
        (0..30).map(|_| http_get()).collect::<Vec<_>>()
    })
    .join()
    .expect("client thread");
    assert!(
        answers.iter().all(|a| a.starts_with("backend")),
        "{answers:?}"
    );

    let stats = lab.ask("stats");
    eprintln!("{}", stats.lines().next().unwrap_or(""));
    assert!(stat(&stats, "from host") >= 10, "{stats}");
    assert!(stat(&stats, "to host") >= 10, "{stats}");
    assert!(
        stats.contains("(dropped without exception port 0)"),
        "{stats}"
    );
}
