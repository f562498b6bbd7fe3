//! VIP announcement through BIRD (M34, M35) with two real Spillway nodes in
//! a namespace lab built by scripts/lab-bgp.sh: each node's BIRD announces
//! what its Spillway decides; the router's BIRD merges both nodes' routes
//! into one ECMP kernel route. Shown: the routes appear for healthy VIPs;
//! new connections spread over both nodes; connections that move from one
//! node to the other (its BIRD stopped) keep working, since both send a
//! flow to the same backend; an unhealthy VIP is withdrawn; when every VIP
//! is unhealthy, fail-open announces them again. Times are printed, never
//! asserted. Needs root and BIRD (scripts/setup.sh installs bird2).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddrV4, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use common::lab::{self, LAB_BGP_SH, Lab};

const VIP: &str = "198.18.10.10";
const VIP2: &str = "198.18.10.11";

impl Lab {
    /// `spillway ARGS…` on node `n`'s control socket.
    fn node(&self, n: u8, args: &[&str]) -> String {
        self.ctl_on(&format!("n{n}/control.sock"), args)
    }

    /// The router's kernel route to `vip` (`ip route show`).
    fn route(&self, vip: &str) -> String {
        self.ip("r", &["route", "show", vip])
    }

    /// Which nodes (1, 2) the router's kernel route to `vip` goes through.
    fn via(&self, vip: &str) -> Vec<u8> {
        let r = self.route(vip);
        [1u8, 2]
            .into_iter()
            .filter(|n| r.contains(&format!("via 198.18.1.{} ", n + 1)))
            .collect()
    }

    /// Waits (at most 60 s) until the router's route to `vip` goes through
    /// exactly `nodes`; prints how long it took.
    fn wait_via(&self, vip: &str, nodes: &[u8], what: &str) {
        let t0 = Instant::now();
        loop {
            if self.via(vip) == nodes {
                eprintln!("{what}: {vip} via nodes {nodes:?} after {:?}", t0.elapsed());
                return;
            }
            if t0.elapsed() > Duration::from_secs(60) {
                panic!(
                    "{what}: {vip} not via nodes {nodes:?} within 60 s: {:?}\nrouter BIRD:\n{}\nnode 1:\n{}\nnode 2:\n{}\nnode 1 log:\n{}",
                    self.route(vip),
                    self.birdc("r", &["show", "route"]),
                    self.node(1, &["status"]),
                    self.node(2, &["status"]),
                    self.log_of("node1.log")
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `birdc -s DIR/WHO/bird.ctl ARGS…` ("r", "n1", "n2").
    fn birdc(&self, who: &str, args: &[&str]) -> String {
        let out = Command::new("birdc")
            .arg("-s")
            .arg(self.dir().join(who).join("bird.ctl"))
            .args(args)
            .output()
            .expect("birdc");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Sets the port of the health check marked `# mark` in both nodes'
    /// files and reloads both.
    fn check_port(&self, mark: &str, port: u16) {
        for n in 1..=2u8 {
            let path = self.dir().join(format!("node{n}.toml"));
            let text = std::fs::read_to_string(&path).expect("node toml");
            let text: String = text
                .lines()
                .map(|l| {
                    if l.ends_with(&format!("# {mark}")) {
                        format!("port = {port} # {mark}\n")
                    } else {
                        format!("{l}\n")
                    }
                })
                .collect();
            std::fs::write(&path, text).expect("write node toml");
            let said = self.node(n, &["reload"]);
            eprintln!("node {n} reload: {}", said.trim());
        }
    }

    /// Stops node `n`'s BIRD (its sessions close: the router drops its
    /// routes).
    fn stop_bird(&self, n: u8) {
        let pid =
            std::fs::read_to_string(self.dir().join(format!("bird{n}.pid"))).expect("bird pid");
        let st = Command::new("kill").arg(pid.trim()).status().expect("kill");
        assert!(st.success(), "kill BIRD of node {n}");
    }
}

/// Opens `n` connections to the VIP's port 80 without sending anything.
fn open(n: usize) -> Vec<TcpStream> {
    let vip: SocketAddrV4 = lab::VIP_HTTP.parse().expect("vip");
    (0..n)
        .map(|_| TcpStream::connect_timeout(&vip.into(), lab::TIMEOUT).expect("connect"))
        .collect()
}

/// A request on each connection: the answers' bodies (or "FAILED: …").
fn ask(conns: Vec<TcpStream>) -> Vec<String> {
    conns
        .into_iter()
        .map(|mut s| {
            let r = (|| -> std::io::Result<String> {
                s.set_read_timeout(Some(lab::TIMEOUT))?;
                s.write_all(b"GET / HTTP/1.0\r\nHost: lab\r\n\r\n")?;
                let mut resp = String::new();
                s.read_to_string(&mut resp)?;
                Ok(resp
                    .rsplit("\r\n\r\n")
                    .next()
                    .unwrap_or("")
                    .trim()
                    .to_owned())
            })();
            r.unwrap_or_else(|e| format!("FAILED: {e}"))
        })
        .collect()
}

#[test]
fn lab_vips_are_announced_through_bird_and_spread_by_ecmp() {
    let lab = Lab::up(&LAB_BGP_SH, &[], &[]);

    // Both VIPs healthy: both nodes announce both; the router's kernel has
    // one route with two next hops.
    lab.wait_via(VIP, &[1, 2], "healthy");
    lab.wait_via(VIP2, &[1, 2], "healthy");
    eprintln!(
        "router:\n{}{}",
        lab.birdc("r", &["show", "route"]),
        lab.route(VIP)
    );
    let status = lab.node(1, &["status"]);
    assert!(
        status.contains(&format!("VIP {VIP}: announced (healthy)"))
            && status.contains("bgp speaker bird at ")
            && status.contains("reachable, up to date"),
        "{status}"
    );

    // ECMP: new connections spread over both nodes; every one is answered.
    let n = 200;
    let t0 = Instant::now();
    let answers = lab.requests(n);
    eprintln!(
        "{n} connections in {:?}; answers {:?}",
        t0.elapsed(),
        lab::spread(&answers)
    );
    assert!(
        lab::failed(&answers).is_empty(),
        "{:?}",
        lab::spread(&answers)
    );
    let f1 = lab::counter(&lab.node(1, &["stats"]), "forwarded ");
    let f2 = lab::counter(&lab.node(2, &["stats"]), "forwarded ");
    eprintln!("packets forwarded: node 1 {f1}, node 2 {f2}");
    assert!(f1 > 0 && f2 > 0, "ECMP used one node only: {f1} / {f2}");

    // Both nodes send a flow to the same backend: connections opened over
    // both nodes go on through node 2 alone once node 1's BIRD stops (node
    // 2 has no entry for node 1's flows; a different backend would reset
    // them).
    let conns = lab.in_client(|| open(20)).join().expect("client");
    let live1 = lab.node(1, &["status"]);
    eprintln!(
        "node 1 before: {}",
        live1
            .lines()
            .find(|l| l.starts_with("flow table"))
            .unwrap_or("")
    );
    let t0 = Instant::now();
    lab.stop_bird(1);
    lab.wait_via(VIP, &[2], "node 1's BIRD stopped");
    eprintln!("withdrawn from node 1 after {:?}", t0.elapsed());
    let answers = lab.in_client(move || ask(conns)).join().expect("client");
    eprintln!("moved connections: {:?}", lab::spread(&answers));
    assert!(lab::failed(&answers).is_empty(), "{answers:?}");

    // The spare VIP's backends fail their check: withdrawn; the web VIP stays.
    lab.check_port("spare", 81);
    lab.wait_via(VIP2, &[], "spare unhealthy");
    assert_eq!(lab.via(VIP), [2], "{}", lab.route(VIP));
    // (Withdrawn at once while the changed check is UNKNOWN, then for its
    // UNHEALTHY verdict.)
    lab.wait_status_on(
        "n2/control.sock",
        "node2.log",
        &[&format!("VIP {VIP2}: withdrawn (rule UNHEALTHY)")],
        Duration::from_secs(30),
    );
    // Node 1 has a change for its BIRD, which is gone: status says so.
    let t0 = Instant::now();
    lab.wait_status_on(
        "n1/control.sock",
        "node1.log",
        &["bgp speaker bird at ", "UNREACHABLE"],
        Duration::from_secs(30),
    );
    eprintln!(
        "node 1 reports its BIRD unreachable after {:?}",
        t0.elapsed()
    );

    // Every VIP unhealthy: fail-open announces them all again.
    lab.check_port("web", 81);
    // (web is withdrawn while its changed check is UNKNOWN, then both come
    // back: fail-open.)
    lab.wait_via(VIP2, &[2], "all unhealthy (fail-open)");
    lab.wait_via(VIP, &[2], "all unhealthy (fail-open)");
    let status = lab.node(2, &["status"]);
    assert!(status.contains("announced (fail-open"), "{status}");
    eprintln!("node 2 status:\n{status}");
}
