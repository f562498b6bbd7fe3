//! VRRP version 3 (`[[vrrp]]`) on a real L2 segment, built by
//! scripts/lab-vrrp.sh: a client, Spillway node 1 (priority 150) and a peer
//! in VRID 51 for VIP 198.18.10.10, backends behind l2dsr.
//!
//! - With Debian's keepalived as the peer (priority 100): Spillway is
//!   master, keepalived backup, the client's neighbour entry for the VIP is
//!   Spillway's port MAC and its connections reach the backends.
//!   keepalived cut off from Spillway's advertisements takes over; healed,
//!   it steps back and the client's entry names Spillway again (Spillway
//!   announces the VIP on hearing a lower master). Spillway killed (KILL),
//!   keepalived takes the VIP and its gratuitous ARPs move the client's
//!   entry without any traffic; Spillway started again preempts and its own
//!   gratuitous ARPs move the entry back. Every advertisement on the
//!   segment, Spillway's and keepalived's, parsed as VRRPv3 by tcpdump and
//!   by scapy (whose checksum must equal the one received).
//! - keepalived with the higher priority (200): it is master, Spillway
//!   backup names it, answers no ARP for the VIP and announces nothing, and
//!   a packet to the VIP that reaches it anyway (a client with a stale
//!   neighbour entry) is a `vrrp_backup` drop.
//! - Two Spillway nodes (150 and 100) syncing flows: 60 long-lived
//!   connections through node 1, a backend joins (Maglev would now send
//!   about a third of them elsewhere), node 1 killed mid-stream: node 2
//!   takes over, the client follows its gratuitous ARP, no connection
//!   breaks. The takeover time (to node 2's metric saying master, and to
//!   the client's neighbour entry moving) and the longest stall of any
//!   connection are printed beside the RFC's bound, never asserted.
//!
//! Needs root, keepalived, tcpdump and python3-scapy (scripts/setup.sh).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddrV4, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::lab::{self, LAB_VRRP_SH, Lab};

const VIP: &str = "198.18.10.10";
/// The nodes' uplink addresses (scripts/lab-vrrp.sh).
const NODE_ADDR: [&str; 2] = ["198.18.1.2", "198.18.1.3"];
/// The nodes' port MACs (their veths', which net_af_packet takes).
const NODE_MAC: [&str; 2] = [NODE_MAC_0, "02:53:56:00:00:03"];
const NODE_MAC_0: &str = "02:53:56:00:00:02";
/// keepalived's address and interface MAC (it sends from that MAC, as
/// Spillway does, without use_vmac).
const KEEPALIVED_ADDR: &str = "198.18.1.3";
const KEEPALIVED_MAC: &str = "02:53:56:00:00:4b";
/// The VRRP group of the lab: VRID, advertisement interval (both sides),
/// node 2's and keepalived's default priority.
const VRID: u8 = 51;
const INTERVAL_CS: u16 = 10;
const BACKUP_PRIORITY: u8 = 100;
/// The management loop's period: a takeover is seen up to one tick late.
const TICK_MS: u32 = 50;
/// The long-lived connections of the pair's takeover.
const STREAMS: usize = 60;
/// Between two requests on each of them.
const STREAM_PERIOD: Duration = Duration::from_millis(50);

impl Lab {
    /// Node `n`'s VRRP status line (`vrrp vrid 51 (IPv4) on port 0: …`).
    fn vrrp_line(&self, n: u8) -> String {
        let status = self.node(n, &["status"]);
        status
            .lines()
            .find(|l| l.starts_with(&format!("vrrp vrid {VRID} ")))
            .unwrap_or_else(|| panic!("no vrrp line in node {n}'s status:\n{status}"))
            .to_owned()
    }

    /// Waits (at most 30 s) until node `n`'s VRRP line has each of `parts`.
    fn wait_vrrp(&self, n: u8, parts: &[&str]) -> String {
        let mut all = vec![format!("vrrp vrid {VRID} ")];
        all.extend(parts.iter().map(|p| (*p).to_owned()));
        let all: Vec<&str> = all.iter().map(String::as_str).collect();
        let status = self.wait_status_on(
            &format!("n{n}/control.sock"),
            &format!("node{n}.log"),
            &all,
            Duration::from_secs(30),
        );
        status
            .lines()
            .find(|l| all.iter().all(|p| l.contains(p)))
            .unwrap_or("")
            .to_owned()
    }

    /// The MAC of the client's neighbour entry for the VIP, if it has one
    /// with a MAC (`ip neigh show`).
    fn client_neighbour(&self) -> Option<String> {
        neighbour_in(&self.ns("c"))
    }

    /// Asserts that the client's neighbour entry for the VIP is `mac`;
    /// `more` adds to the message what the caller knows.
    fn assert_client_on(&self, mac: &str, more: &str) {
        assert_eq!(
            self.client_neighbour().as_deref(),
            Some(mac),
            "{}{more}",
            self.ip("c", &["neigh"])
        );
    }

    /// Whether keepalived's interface holds the VIP (it is master).
    fn keepalived_holds_vip(&self) -> bool {
        self.ip("k", &["-o", "addr", "show"])
            .contains(&format!("inet {VIP}/32"))
    }

    /// The pid of node `n`'s spillway.
    fn node_pid(&self, n: u8) -> String {
        std::fs::read_to_string(self.dir().join(format!("node{n}.pid")))
            .expect("node pid")
            .trim()
            .to_owned()
    }

    /// Kills node `n`'s spillway with KILL (no resignation, no drain) and
    /// waits until it is gone; the moment the signal was sent.
    fn kill_node(&self, n: u8) -> Instant {
        let pid = self.node_pid(n);
        let st = Command::new("kill")
            .args(["-KILL", &pid])
            .status()
            .expect("kill");
        let at = Instant::now();
        assert!(st.success(), "kill -KILL node {n}");
        wait_exit(&pid, Duration::from_secs(10)).expect("node killed with KILL still runs");
        // Gone: teardown has nothing to signal (the pid may be reused).
        let _ = std::fs::remove_file(self.dir().join(format!("node{n}.pid")));
        at
    }

    /// Starts node `n` again (`scripts/lab-vrrp.sh start`): its spillway
    /// and the host stack behind its new exception TAP.
    fn start_node(&self, n: u8) {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join(LAB_VRRP_SH.path);
        let bin = Path::new(env!("CARGO_BIN_EXE_spillway"))
            .parent()
            .expect("bin dir");
        let mut start = Command::new("bash");
        start
            .arg(script)
            .arg("start")
            .arg(n.to_string())
            .arg(self.dir())
            .arg(bin);
        common::run_ok(&mut start);
    }

    /// `nft ARGS…` in the lab's namespace `ns`.
    fn nft(&self, ns: &str, args: &[&str]) {
        let mut nft = Command::new("ip");
        nft.args(["netns", "exec", &self.ns(ns), "nft"]).args(args);
        common::run_ok(&mut nft);
    }

    /// The state keepalived last said it entered ("BACKUP", "MASTER").
    fn keepalived_state(&self) -> String {
        let log = self.keepalived_log();
        log.lines()
            .filter_map(|l| l.split_once(") Entering ").map(|(_, rest)| rest))
            .filter_map(|rest| rest.split(' ').next())
            .next_back()
            .unwrap_or("")
            .to_owned()
    }

    /// What keepalived logged.
    fn keepalived_log(&self) -> String {
        self.log_of("keepalived.log")
    }
}

/// How long a VRRP status line says its group has been master (0 if it
/// is not).
fn master_for(line: &str) -> f64 {
    line.split_once(": master for ")
        .and_then(|(_, rest)| rest.split_once(" s,"))
        .and_then(|(secs, _)| secs.parse().ok())
        .unwrap_or(0.0)
}

/// The MAC of namespace `ns`'s neighbour entry for the VIP.
fn neighbour_in(ns: &str) -> Option<String> {
    let out = Command::new("ip")
        .args(["-n", ns, "neigh", "show", VIP])
        .output()
        .expect("ip neigh");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut words = text.split_whitespace();
    words.find(|w| *w == "lladdr")?;
    words.next().map(str::to_owned)
}

/// Waits (at most `within`, polling every 10 ms) until `f` gives a value:
/// it and how long that took; panics with `what` and `context()` if never.
fn poll<T>(
    what: &str,
    within: Duration,
    mut f: impl FnMut() -> Option<T>,
    context: impl Fn() -> String,
) -> (T, Duration) {
    let t0 = Instant::now();
    loop {
        if let Some(v) = f() {
            return (v, t0.elapsed());
        }
        assert!(
            t0.elapsed() < within,
            "{what}: not within {within:?}\n{}",
            context()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits (at most `within`) until process `pid` is gone (or a zombie: the
/// lab's processes are nobody's children the test could reap).
fn wait_exit(pid: &str, within: Duration) -> Option<Duration> {
    let t0 = Instant::now();
    loop {
        let gone = match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            // The state is the field after the command's closing parenthesis.
            Ok(stat) => stat
                .rsplit_once(") ")
                .is_some_and(|(_, rest)| rest.starts_with('Z')),
            Err(_) => true,
        };
        if gone {
            return Some(t0.elapsed());
        }
        if t0.elapsed() > within {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// tcpdump on the segment's bridge (every frame of the segment), writing
/// VRRP and ARP frames to DIR/segment.pcap; its pid in DIR/tcpdump.pid so
/// that the lab's teardown stops it when the test fails.
struct Capture {
    child: Child,
    _stderr: BufReader<ChildStderr>,
    path: PathBuf,
    pidfile: PathBuf,
}

impl Capture {
    fn start(lab: &Lab) -> Capture {
        let path = lab.dir().join("segment.pcap");
        let mut child = Command::new("ip")
            .args([
                "netns",
                "exec",
                &lab.ns("s"),
                "tcpdump",
                "-i",
                &format!("t{}br", lab.tag()),
                // Each frame written as it comes: stopped, tcpdump would
                // lose what the kernel still holds in its ring's block.
                "--immediate-mode",
                "-U",
                "-n",
                "-w",
            ])
            .arg(&path)
            .arg("vrrp or arp")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run tcpdump");
        let pidfile = lab.dir().join("tcpdump.pid");
        std::fs::write(&pidfile, child.id().to_string()).expect("tcpdump pid file");
        // It says so once the capture runs.
        let mut stderr = BufReader::new(child.stderr.take().expect("stderr"));
        let mut said = String::new();
        loop {
            let mut line = String::new();
            let n = stderr.read_line(&mut line).expect("tcpdump's stderr");
            said.push_str(&line);
            if line.contains("listening on") {
                break;
            }
            assert!(n > 0, "tcpdump did not start: {said}");
        }
        Capture {
            child,
            _stderr: stderr,
            path,
            pidfile,
        }
    }

    /// Stops the capture (TERM: tcpdump writes what it has); the file.
    fn stop(mut self) -> PathBuf {
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.pidfile);
        self.path.clone()
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// One VRRP advertisement of a capture as scapy reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Advert {
    mac: String,
    src: String,
    dst: String,
    ttl: u8,
    version: u8,
    kind: u8,
    vrid: u8,
    priority: u8,
    count: u8,
    interval_cs: u16,
    addrs: String,
    checksum: u16,
    computed: u16,
}

/// Every VRRP packet of `pcap`, read by scapy's VRRPv3 layer (Debian's
/// python3-scapy: /usr/bin/python3), with the checksum scapy computes for
/// it (over the IPv4 pseudo-header, RFC 5798 §5.2.8) beside the one
/// received.
fn scapy_adverts(pcap: &Path) -> Vec<Advert> {
    const SCRIPT: &str = r#"
import sys
from scapy.all import rdpcap, Ether, IP
from scapy.layers.vrrp import VRRPv3
for p in rdpcap(sys.argv[1]):
    if IP not in p or p[IP].proto != 112:
        continue
    if VRRPv3 not in p:
        print("not-v3", p[Ether].src, p[IP].src)
        continue
    v = p[VRRPv3]
    again = IP(bytes(p[IP]))
    del again[VRRPv3].chksum
    computed = IP(bytes(again))[VRRPv3].chksum
    print(p[Ether].src, p[IP].src, p[IP].dst, p[IP].ttl, v.version, v.type, v.vrid,
          v.priority, v.ipcount, v.adv, ",".join(v.addrlist), v.chksum, computed)
"#;
    let mut py = Command::new("/usr/bin/python3");
    py.args(["-c", SCRIPT]).arg(pcap);
    let out = common::run_ok(&mut py);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            assert!(
                w.len() == 13,
                "scapy did not read a VRRPv3 advertisement: {l}"
            );
            fn n<T: std::str::FromStr>(w: &[&str], i: usize) -> T {
                w[i].parse()
                    .unwrap_or_else(|_| panic!("field {i} of {w:?}: not a number"))
            }
            Advert {
                mac: w[0].to_owned(),
                src: w[1].to_owned(),
                dst: w[2].to_owned(),
                ttl: n(&w, 3),
                version: n(&w, 4),
                kind: n(&w, 5),
                vrid: n(&w, 6),
                priority: n(&w, 7),
                count: n(&w, 8),
                interval_cs: n(&w, 9),
                addrs: w[10].to_owned(),
                checksum: n(&w, 11),
                computed: n(&w, 12),
            }
        })
        .collect()
}

/// `tcpdump -v`'s reading of the VRRP packets of `pcap`.
fn tcpdump_adverts(pcap: &Path) -> String {
    let mut td = Command::new("tcpdump");
    td.args(["-n", "-v", "-r"]).arg(pcap).arg("vrrp");
    let out = common::run_ok(&mut td);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `tcpdump -e`'s reading of the ARP frames of `pcap` (with their MACs).
fn tcpdump_arp(pcap: &Path) -> String {
    let mut td = Command::new("tcpdump");
    td.args(["-n", "-e", "-r"]).arg(pcap).arg("arp");
    let out = common::run_ok(&mut td);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Checks the captured advertisements of `src` (MAC `mac`) with
/// `priority`: VRRPv3 (version 3, type 1), VRID 51, one address (the
/// VIP), 10 cs, to 224.0.0.18 with TTL 255, the checksum right; and that
/// tcpdump reads them too. How many there were.
fn check_adverts(adverts: &[Advert], tcpdump: &str, src: &str, mac: &str, priority: u8) -> usize {
    let want = Advert {
        mac: mac.to_owned(),
        src: src.to_owned(),
        dst: "224.0.0.18".to_owned(),
        ttl: 255,
        version: 3,
        kind: 1,
        vrid: VRID,
        priority,
        count: 1,
        interval_cs: INTERVAL_CS,
        addrs: VIP.to_owned(),
        checksum: 0,
        computed: 0,
    };
    let theirs: Vec<&Advert> = adverts
        .iter()
        .filter(|a| a.src == src && a.priority == priority)
        .collect();
    assert!(
        !theirs.is_empty(),
        "no advertisement from {src} with priority {priority} captured: {adverts:#?}"
    );
    for a in &theirs {
        assert_eq!(
            Advert {
                checksum: 0,
                computed: 0,
                ..(*a).clone()
            },
            want,
            "{a:?}"
        );
        assert_eq!(
            a.checksum, a.computed,
            "checksum received {:#06x}, scapy computes {:#06x}: {a:?}",
            a.checksum, a.computed
        );
    }
    let line = format!("VRRPv3, Advertisement, vrid {VRID}, prio {priority}, intvl 10cs");
    let read = tcpdump
        .lines()
        .filter(|l| l.contains(&format!("{src} > 224.0.0.18")) && l.contains(&line))
        .count();
    assert!(
        read > 0 && tcpdump.contains(&format!("addrs: {VIP}")),
        "tcpdump -v has no {line:?} from {src}:\n{tcpdump}"
    );
    eprintln!(
        "{} advertisements from {src} ({mac}) with priority {priority}: VRRPv3, checksums right; tcpdump: {read} read as {line:?}",
        theirs.len()
    );
    theirs.len()
}

/// The RFC's master-down interval of a backup of `priority` (3 intervals and
/// a skew of (256 − priority) / 256 of one, in whole centiseconds as
/// Spillway and keepalived compute it) and the same plus one management
/// tick, as text.
fn bound(priority: u8) -> String {
    let interval_ms = u32::from(INTERVAL_CS) * 10;
    let skew_ms = (256 - u32::from(priority)) * u32::from(INTERVAL_CS) / 256 * 10;
    let down = 3 * interval_ms + skew_ms;
    format!(
        "3 × {interval_ms} ms + {skew_ms} ms skew = {down} ms, {} ms with Spillway's {TICK_MS} ms tick",
        down + TICK_MS
    )
}

/// `n` HTTP requests to the VIP on fresh connections from the client: the
/// answers by body (a backend, "keepalived", or "FAILED: …").
fn answers(lab: &Lab, n: usize) -> std::collections::BTreeMap<String, usize> {
    lab::spread(&lab.requests_within(n, Duration::from_secs(3)))
}

#[test]
fn lab_vrrp_keepalived_backup_takes_over_and_spillway_preempts() {
    let lab = Lab::up(&LAB_VRRP_SH, &["keepalived"], &[]);
    let capture = Capture::start(&lab);

    // Spillway (150) is master once its rules are healthy; keepalived
    // (100) backup: the VIP is not on its interface.
    let line = lab.wait_vrrp(1, &[": master for ", "priority 150"]);
    eprintln!("node 1: {line}");
    poll(
        "keepalived leaves the VIP to Spillway",
        Duration::from_secs(30),
        || (!lab.keepalived_holds_vip()).then_some(()),
        || lab.keepalived_log(),
    );
    assert_eq!(lab.keepalived_state(), "BACKUP", "{}", lab.keepalived_log());
    // The client's connections go through Spillway to the backends, and
    // its neighbour entry for the VIP is Spillway's port MAC.
    let spread = answers(&lab, 20);
    eprintln!("Spillway master: answers {spread:?}");
    assert!(
        spread.keys().all(|a| a.starts_with("backend")),
        "{spread:?}\n{}",
        lab.keepalived_log()
    );
    lab.assert_client_on(NODE_MAC[0], "");

    // Once Spillway's own announcements of its takeover are over
    // ([neighbours] announce_count 3, 1 s apart)…
    poll(
        "Spillway's takeover announcements over",
        Duration::from_secs(30),
        || (master_for(&lab.vrrp_line(1)) >= 3.0).then_some(()),
        || lab.vrrp_line(1),
    );
    // …split brain: Spillway's advertisements stop reaching keepalived (an
    // nftables rule in its namespace), which takes over and announces the
    // VIP. Spillway hears a lower master: it announces the VIP again. Healed,
    // keepalived hears Spillway and steps back; the client's entry names
    // Spillway, with no traffic of its own.
    lab.nft("k", &["add", "table", "ip", "cut"]);
    lab.nft(
        "k",
        &[
            "add",
            "chain",
            "ip",
            "cut",
            "in",
            "{ type filter hook input priority 0; }",
        ],
    );
    lab.nft(
        "k",
        &[
            "add",
            "rule",
            "ip",
            "cut",
            "in",
            "ip",
            "saddr",
            NODE_ADDR[0],
            "ip",
            "protocol",
            "112",
            "drop",
        ],
    );
    let t0 = Instant::now();
    poll(
        "keepalived takes the VIP when it no longer hears Spillway",
        Duration::from_secs(10),
        || lab.keepalived_holds_vip().then_some(()),
        || lab.keepalived_log(),
    );
    let split = t0.elapsed();
    std::thread::sleep(Duration::from_millis(500));
    let during = lab.client_neighbour();
    let line = lab.vrrp_line(1);
    lab.nft("k", &["delete", "table", "ip", "cut"]);
    let t0 = Instant::now();
    poll(
        "keepalived steps back once it hears Spillway again",
        Duration::from_secs(10),
        || (!lab.keepalived_holds_vip()).then_some(()),
        || lab.keepalived_log(),
    );
    let healed = t0.elapsed();
    poll(
        "the client's neighbour entry names Spillway after the split brain",
        Duration::from_secs(10),
        || (lab.client_neighbour().as_deref() == Some(NODE_MAC[0])).then_some(()),
        || format!("{}\nnode 1: {}", lab.ip("c", &["neigh"]), lab.vrrp_line(1)),
    );
    eprintln!(
        "split brain: keepalived master after {split:?} (client's entry then {during:?}; node 1: {line}); healed: keepalived backup after {healed:?}, the client's entry on Spillway after {:?}",
        t0.elapsed()
    );
    let spread = answers(&lab, 10);
    eprintln!("after the split brain: answers {spread:?}");
    assert!(
        spread.keys().all(|a| a.starts_with("backend")),
        "{spread:?}"
    );

    // Spillway dies: keepalived takes the VIP, and its gratuitous ARPs move
    // the client's entry with no traffic from the client.
    let killed = lab.kill_node(1);
    poll(
        "keepalived takes the VIP",
        Duration::from_secs(10),
        || lab.keepalived_holds_vip().then_some(()),
        || lab.keepalived_log(),
    );
    let vip_after = killed.elapsed();
    poll(
        "the client's neighbour entry moves to keepalived",
        Duration::from_secs(10),
        || (lab.client_neighbour().as_deref() == Some(KEEPALIVED_MAC)).then_some(()),
        || lab.ip("c", &["neigh"]),
    );
    let moved_after = killed.elapsed();
    eprintln!(
        "Spillway killed: keepalived holds the VIP after {vip_after:?}, the client's entry names it after {moved_after:?} (keepalived's master-down interval: {})",
        bound(BACKUP_PRIORITY)
    );
    assert_eq!(lab.keepalived_state(), "MASTER", "{}", lab.keepalived_log());
    let spread = answers(&lab, 10);
    eprintln!("keepalived master: answers {spread:?}");
    assert_eq!(
        spread.keys().collect::<Vec<_>>(),
        ["keepalived"],
        "{spread:?}"
    );

    // Spillway again: it preempts (150 > 100) after its master-down
    // interval, keepalived steps back, and the client follows Spillway's
    // gratuitous ARPs, again without traffic of its own.
    let t0 = Instant::now();
    lab.start_node(1);
    let started = t0.elapsed();
    let line = lab.wait_vrrp(1, &[": master for "]);
    let master_after = t0.elapsed();
    poll(
        "the client's neighbour entry moves back to Spillway",
        Duration::from_secs(10),
        || (lab.client_neighbour().as_deref() == Some(NODE_MAC[0])).then_some(()),
        || format!("{}\n{line}", lab.ip("c", &["neigh"])),
    );
    let back_after = t0.elapsed();
    poll(
        "keepalived gives the VIP back",
        Duration::from_secs(10),
        || (!lab.keepalived_holds_vip()).then_some(()),
        || lab.keepalived_log(),
    );
    eprintln!(
        "Spillway started again: up after {started:?}, master after {master_after:?}, the client's entry names it after {back_after:?}, keepalived released the VIP after {:?}",
        t0.elapsed()
    );
    let spread = answers(&lab, 20);
    eprintln!("Spillway master again: answers {spread:?}");
    assert!(
        spread.keys().all(|a| a.starts_with("backend")),
        "{spread:?}"
    );

    // Both sides' advertisements, as tcpdump and scapy read them.
    let pcap = capture.stop();
    let adverts = scapy_adverts(&pcap);
    let tcpdump = tcpdump_adverts(&pcap);
    let mut seen = std::collections::BTreeMap::new();
    for a in &adverts {
        *seen.entry((a.src.as_str(), a.priority)).or_insert(0usize) += 1;
    }
    eprintln!("advertisements captured (sender, priority): {seen:?}");
    check_adverts(&adverts, &tcpdump, NODE_ADDR[0], NODE_MAC[0], 150);
    check_adverts(
        &adverts,
        &tcpdump,
        KEEPALIVED_ADDR,
        KEEPALIVED_MAC,
        BACKUP_PRIORITY,
    );
    eprintln!("node 1 after the restart: {}", lab.vrrp_line(1));
}

#[test]
fn lab_vrrp_spillway_backs_up_a_keepalived_master() {
    let lab = Lab::up(
        &LAB_VRRP_SH,
        &["keepalived"],
        &[("KEEPALIVED_PRIORITY", "200")],
    );

    // keepalived (200) is master and holds the VIP; Spillway (150) is
    // backup and names it.
    let line = lab.wait_vrrp(1, &[": backup, master ", KEEPALIVED_ADDR, "priority 150"]);
    eprintln!("node 1: {line}");
    poll(
        "keepalived holds the VIP",
        Duration::from_secs(30),
        || lab.keepalived_holds_vip().then_some(()),
        || lab.keepalived_log(),
    );
    // The client asks who has the VIP: keepalived answers, Spillway, whose
    // data plane leaves the VIP out as backup, does not.
    let dev = format!("t{}c", lab.tag());
    let capture = Capture::start(&lab);
    let _ = lab.ip("c", &["neigh", "flush", "to", VIP, "dev", &dev]);
    let spread = answers(&lab, 10);
    eprintln!("keepalived master: answers {spread:?}");
    assert_eq!(
        spread.keys().collect::<Vec<_>>(),
        ["keepalived"],
        "{spread:?}"
    );
    lab.assert_client_on(KEEPALIVED_MAC, "");
    // Nor does Spillway announce the VIP as backup (what was left of its
    // announcements if it was master first, 3 of them 1 s apart, would
    // move the client to it): the client's entry stays keepalived's.
    std::thread::sleep(Duration::from_secs(3));
    lab.assert_client_on(KEEPALIVED_MAC, &format!("\nnode 1: {}", lab.vrrp_line(1)));
    let arp = tcpdump_arp(&capture.stop());
    let count = |what: &str| arp.lines().filter(|l| l.contains(what)).count();
    let replies = |mac: &str| count(&format!("Reply {VIP} is-at {mac}"));
    let garps = count(&format!(
        "{NODE_MAC_0} > ff:ff:ff:ff:ff:ff, ethertype ARP (0x0806), length 42: Request who-has {VIP} tell {VIP}"
    ));
    eprintln!(
        "ARP replies for the VIP: keepalived {}, Spillway {}; gratuitous ARPs from Spillway {garps}",
        replies(KEEPALIVED_MAC),
        replies(NODE_MAC[0])
    );
    assert!(
        replies(KEEPALIVED_MAC) > 0 && replies(NODE_MAC[0]) == 0 && garps == 0,
        "only keepalived answers ARP for the VIP, Spillway announces nothing:\n{arp}"
    );
    let metrics = lab.in_ns("n1", lab::metrics_here).join().expect("n1");
    let samples = lab::metric_samples(&metrics);
    let state = format!("spillway_vrrp_state{{vrid=\"{VRID}\",family=\"ipv4\"}}");
    assert_eq!(samples.get(&state), Some(&1.0), "{metrics}");

    // A client whose neighbour entry still names Spillway (as after a
    // takeover it has not heard of): its packets to the VIP reach
    // Spillway, which drops them as vrrp_backup; the connection fails.
    let drops = |lab: &Lab| lab::counter(&lab.node(1, &["stats"]), "drop vrrp_backup: ");
    let before = drops(&lab);
    lab.ip(
        "c",
        &[
            "neigh",
            "replace",
            VIP,
            "lladdr",
            NODE_MAC[0],
            "dev",
            &dev,
            "nud",
            "permanent",
        ],
    );
    let answer = lab
        .in_client(|| lab::http_get(Duration::from_secs(1)))
        .join()
        .expect("client");
    let (after, _) = poll(
        "the SYNs to Spillway counted as vrrp_backup drops",
        Duration::from_secs(10),
        || Some(drops(&lab)).filter(|&d| d > before),
        || lab.node(1, &["stats"]),
    );
    lab.ip("c", &["neigh", "del", VIP, "dev", &dev]);
    eprintln!("through Spillway as backup: {answer:?}; drop vrrp_backup {before} -> {after}");
    assert!(answer.starts_with("FAILED"), "{answer}");
    // The client asks again: keepalived answers, Spillway does not.
    let spread = answers(&lab, 5);
    assert_eq!(
        spread.keys().collect::<Vec<_>>(),
        ["keepalived"],
        "{spread:?}"
    );
    lab.assert_client_on(KEEPALIVED_MAC, "");
}

/// One long-lived connection of the pair's takeover: a line every
/// [`STREAM_PERIOD`] to the VIP's echo port, each answer awaited.
#[derive(Debug)]
struct Stream {
    /// The backend that answers (the first word of each answer).
    backend: String,
    /// Answers received.
    answers: u64,
    /// The longest time between two answers.
    longest: Duration,
    /// Why it broke, if it did.
    broken: Option<String>,
}

/// Opens a connection to the VIP's echo port, then exchanges lines until
/// `stop` (the calling thread must be in the client's namespace).
fn stream(stop: Arc<AtomicBool>, opened: std::sync::mpsc::Sender<()>) -> Stream {
    let mut st = Stream {
        backend: String::new(),
        answers: 0,
        longest: Duration::ZERO,
        broken: None,
    };
    let vip: SocketAddrV4 = "198.18.10.10:7".parse().expect("vip");
    let s = match TcpStream::connect_timeout(&vip.into(), lab::TIMEOUT) {
        Ok(s) => s,
        Err(e) => {
            st.broken = Some(format!("connect: {e}"));
            let _ = opened.send(());
            return st;
        }
    };
    // Generous: a takeover stalls a connection for retransmission
    // timeouts; a broken one is reset or never answered again.
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    s.set_nodelay(true).expect("nodelay");
    let mut w = s.try_clone().expect("clone");
    let mut r = BufReader::new(s);
    let mut last = Instant::now();
    let mut k = 0u64;
    let _ = opened.send(());
    while !stop.load(Ordering::Relaxed) {
        let mut line = String::new();
        let sent = w.write_all(format!("ping {k}\n").as_bytes());
        let read = sent.and_then(|()| r.read_line(&mut line));
        let name = line.split(' ').next().unwrap_or("").to_owned();
        match read {
            Ok(_) if line.ends_with(&format!("ping {k}\n")) => {}
            Ok(_) => {
                st.broken = Some(format!("line {k}: {line:?}"));
                return st;
            }
            Err(e) => {
                st.broken = Some(format!("line {k}: {e}"));
                return st;
            }
        }
        if st.backend.is_empty() {
            st.backend = name;
        } else if st.backend != name {
            st.broken = Some(format!("moved from {} to {name}", st.backend));
            return st;
        }
        let now = Instant::now();
        st.longest = st.longest.max(now - last);
        last = now;
        st.answers += 1;
        k += 1;
        std::thread::sleep(STREAM_PERIOD);
    }
    st
}

impl Lab {
    /// Node `n`'s `flow table:` live entries.
    fn flows(&self, n: u8) -> u64 {
        let status = self.node(n, &["status"]);
        let line = status
            .lines()
            .find(|l| l.starts_with("flow table:"))
            .unwrap_or("");
        lab::counter(line, "flow table: ")
    }
}

/// Node 2's `spillway_vrrp_state` for the group (its namespace is the
/// calling thread's): 2 once master.
fn vrrp_state_here() -> Option<f64> {
    let samples = lab::metric_samples(&lab::metrics_here());
    samples
        .get(&format!(
            "spillway_vrrp_state{{vrid=\"{VRID}\",family=\"ipv4\"}}"
        ))
        .copied()
}

#[test]
fn lab_vrrp_pair_takeover_keeps_synced_connections() {
    let lab = Lab::up(&LAB_VRRP_SH, &["pair"], &[]);
    let line = lab.wait_vrrp(1, &[": master for ", "priority 150"]);
    eprintln!("node 1: {line}");
    let line = lab.wait_vrrp(2, &[": backup, master ", NODE_ADDR[0], "priority 100"]);
    eprintln!("node 2: {line}");

    // Long-lived connections through node 1 (the client's neighbour entry
    // names it), each exchanging a line every 50 ms.
    let stop = Arc::new(AtomicBool::new(false));
    let (opened_tx, opened) = std::sync::mpsc::channel();
    let streams: Vec<_> = (0..STREAMS)
        .map(|_| {
            let (stop, opened_tx) = (stop.clone(), opened_tx.clone());
            lab.in_client(move || stream(stop, opened_tx))
        })
        .collect();
    for _ in 0..STREAMS {
        opened
            .recv_timeout(Duration::from_secs(30))
            .expect("connections opened");
    }
    lab.assert_client_on(NODE_MAC[0], "");
    // Node 2, backup, holds node 1's entries through flow sync.
    poll(
        "node 2 has node 1's flows",
        Duration::from_secs(30),
        || (lab.flows(1) >= STREAMS as u64 && lab.flows(2) >= STREAMS as u64).then_some(()),
        || format!("node 1 {} node 2 {}", lab.flows(1), lab.flows(2)),
    );
    eprintln!(
        "{STREAMS} connections open: node 1 has {} flows, node 2 {}",
        lab.flows(1),
        lab.flows(2)
    );

    // Backend 3 joins on both nodes: Maglev would now send about a third
    // of the connections to it, which never saw them.
    lab.add_backend3();
    let spread = answers(&lab, 30);
    eprintln!("new connections after backend 3 joined: {spread:?}");
    assert!(spread.contains_key("backend3"), "{spread:?}");

    // Node 1 dies mid-stream. Node 2's metric and the client's neighbour
    // entry, each polled every 10 ms from a little before the kill (a
    // change seen before it is a failure, not a takeover); generous
    // deadlines (a takeover takes under half a second).
    const DEADLINE: Duration = Duration::from_secs(10);
    let c = lab.ns("c");
    let seen = std::sync::mpsc::channel();
    let master_poll = {
        let seen = seen.0.clone();
        lab.in_ns("n2", move || {
            let t0 = Instant::now();
            while t0.elapsed() < DEADLINE + Duration::from_secs(1) {
                if vrrp_state_here() == Some(2.0) {
                    let _ = seen.send(("master", Instant::now()));
                    return;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        })
    };
    let neighbour_poll = {
        let seen = seen.0.clone();
        std::thread::spawn(move || {
            let t0 = Instant::now();
            while t0.elapsed() < DEADLINE + Duration::from_secs(1) {
                if neighbour_in(&c).as_deref() == Some(NODE_MAC[1]) {
                    let _ = seen.send(("neighbour", Instant::now()));
                    return;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        })
    };
    std::thread::sleep(Duration::from_millis(200));
    let killed = lab.kill_node(1);
    let mut times = std::collections::BTreeMap::new();
    for _ in 0..2 {
        let (what, at) = seen.1.recv_timeout(DEADLINE).unwrap_or_else(|_| {
            panic!(
                "no takeover seen within {DEADLINE:?} ({times:?}): node 2 {}\nclient {}",
                lab.vrrp_line(2),
                lab.ip("c", &["neigh"])
            )
        });
        assert!(
            at >= killed,
            "{what} changed before node 1 was killed:\nnode 2 {}\nclient {}",
            lab.vrrp_line(2),
            lab.ip("c", &["neigh"])
        );
        times.insert(what, at - killed);
    }
    master_poll.join().expect("master poll");
    neighbour_poll.join().expect("neighbour poll");

    // The connections go on through node 2; a few seconds more for those
    // stalled by retransmission timeouts to come back.
    std::thread::sleep(Duration::from_secs(5));
    stop.store(true, Ordering::Relaxed);
    let streams: Vec<Stream> = streams
        .into_iter()
        .map(|s| s.join().expect("stream"))
        .collect();
    let broken: Vec<&Stream> = streams.iter().filter(|s| s.broken.is_some()).collect();
    let mut stalls: Vec<Duration> = streams.iter().map(|s| s.longest).collect();
    stalls.sort();
    let mut per_backend = std::collections::BTreeMap::new();
    for s in &streams {
        *per_backend.entry(s.backend.as_str()).or_insert(0usize) += 1;
    }
    eprintln!(
        "TAKEOVER: node 2 master {:?} after the kill, the client's neighbour entry on node 2's MAC after {:?} (bound: {}); \
         longest stall of a connection {:?} (median of each connection's longest {:?}); \
         {} of {STREAMS} connections broken; backends {per_backend:?}; answers {}",
        times["master"],
        times["neighbour"],
        bound(BACKUP_PRIORITY),
        stalls.last().copied().unwrap_or_default(),
        stalls.get(stalls.len() / 2).copied().unwrap_or_default(),
        broken.len(),
        streams.iter().map(|s| s.answers).sum::<u64>()
    );
    eprintln!("node 2: {}", lab.vrrp_line(2));
    let status = lab.node(2, &["status"]);
    eprintln!(
        "node 2 {}",
        status
            .lines()
            .find(|l| l.starts_with("flow sync:"))
            .unwrap_or("")
    );
    assert!(
        broken.is_empty(),
        "connections broken despite flow sync: {broken:#?}"
    );
    assert!(
        lab.vrrp_line(2).contains(": master for "),
        "{}",
        lab.vrrp_line(2)
    );
}
