//! `spillway-nva` for real, in network namespaces of its own (unique per run,
//! removed on drop, also when the test fails): a "balancer" socket in one
//! sends GENEVE over IPv4 and IPv6 with IPv4 and IPv6 inner packets, through
//! a veth pair, to three appliances in the other — a plain one with a drop
//! rule and a flow log, one tampering with the cookie, one stripping options
//! and answering from another address — and checks each answer byte for
//! byte, with the address and port it came from. Checksum offload is off on
//! the veth pair (transmit on the appliances' side, receive on the
//! balancer's), so the appliances' kernel computes the outer checksums in
//! software and the balancer's verifies them: an answer with a wrong one
//! never reaches the socket. The appliances answer only the balancer's
//! addresses (`--allow-source`): the same packets from a stranger's address
//! are neither answered nor logged, only counted; appliance B's flow log is
//! limited to a line and rotated (issue 38 item 10). Needs root
//! (namespaces, ethtool).

#![allow(clippy::cast_possible_truncation)] // test values are small
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use testkit::packet::{Packet, v4, v6};

const BAL4: &str = "192.0.2.1";
const BAL6: &str = "2001:db8::1";
/// Another address in the balancer's namespace: no balancer.
const STRANGER4: &str = "192.0.2.9";
const STRANGER6: &str = "2001:db8::9";
/// Appliance A (plain), B (cookie), C (strip options, answers from C2).
const A4: &str = "192.0.2.3";
const A6: &str = "2001:db8::3";
const B4: &str = "192.0.2.4";
const B6: &str = "2001:db8::4";
const C4: &str = "192.0.2.5";
const C6: &str = "2001:db8::5";
const C24: &str = "192.0.2.6";
const C26: &str = "2001:db8::6";

/// Spillway's options: endpoint ID 0x0102030405060708, cookie 0xa1b2c3d4.
const OURS: &[u8] = &[
    0x01, 0x39, 0x01, 0x02, 1, 2, 3, 4, 5, 6, 7, 8, 0x01, 0x39, 0x03, 0x01, 0xa1, 0xb2, 0xc3, 0xd4,
];

/// The run's two namespaces (balancer, appliances) and the appliances.
struct Netns {
    bal: String,
    name: String,
    daemons: Vec<Child>,
}

impl Netns {
    fn new() -> Netns {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let tag = format!("spwnva{}x{:x}", std::process::id(), nanos & 0xffff);
        let ns = Netns {
            bal: format!("{tag}b"),
            name: format!("{tag}a"),
            daemons: Vec::new(),
        };
        // Made after `ns`, so that its Drop removes whichever exist.
        run(Command::new("ip").args(["netns", "add", &ns.bal]));
        run(Command::new("ip").args(["netns", "add", &ns.name]));
        ns
    }

    /// `ip ARGS` in the appliances' namespace.
    fn ip(&self, args: &[&str]) {
        run(Command::new("ip").args(["-n", &self.name]).args(args));
    }

    /// `ip ARGS` in the balancer's namespace.
    fn ip_bal(&self, args: &[&str]) {
        run(Command::new("ip").args(["-n", &self.bal]).args(args));
    }

    /// `ethtool -K ARGS` in namespace `ns`.
    fn ethtool(&self, ns: &str, args: &[&str]) {
        run(Command::new("ip")
            .args(["netns", "exec", ns, "ethtool", "-K"])
            .args(args));
    }

    /// Starts `spillway-nva ARGS` in the namespace, logging to `log`.
    fn nva(&mut self, log: &std::path::Path, args: &[&str]) {
        let f = std::fs::File::create(log).expect("log file");
        let child = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.name,
                env!("CARGO_BIN_EXE_spillway-nva"),
            ])
            .args(args)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(f)
            .spawn()
            .expect("start spillway-nva");
        self.daemons.push(child);
    }

    /// Runs `f` on a thread inside the balancer's namespace.
    fn enter<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> std::thread::JoinHandle<T> {
        let path = format!("/var/run/netns/{}", self.bal);
        std::thread::spawn(move || {
            let fd = std::fs::File::open(&path).expect("open netns");
            nix::sched::setns(&fd, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
            f()
        })
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for d in &mut self.daemons {
            let _ = d.kill();
            let _ = d.wait();
        }
        for n in [&self.name, &self.bal] {
            let _ = Command::new("ip").args(["netns", "del", n]).status();
        }
    }
}

fn run(c: &mut Command) {
    let out = c.output().unwrap_or_else(|e| panic!("{c:?}: {e}"));
    assert!(
        out.status.success(),
        "{c:?} exited with {}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

fn ip(s: &str) -> IpAddr {
    s.parse().expect("address")
}

/// GENEVE payload: base header (VNI 0), Spillway's options, `inner`.
fn geneve(inner: &[u8]) -> Vec<u8> {
    let et: u8 = if inner[0] >> 4 == 6 { 0xdd } else { 0x00 };
    let mut b = vec![
        (OURS.len() / 4) as u8,
        0,
        if et == 0 { 0x08 } else { 0x86 },
        et,
        0,
        0,
        0,
        0,
    ];
    b.extend_from_slice(OURS);
    b.extend_from_slice(inner);
    b
}

fn inner_tcp(v6_inner: bool, dport: u16) -> Vec<u8> {
    if v6_inner {
        Packet::tcp(
            v6("2001:db8:c::7"),
            v6("2001:db8:10::10"),
            40000,
            dport,
            0x02,
        )
        .payload(b"hello")
        .ip()
    } else {
        Packet::tcp(v4("198.51.100.7"), v4("203.0.113.10"), 40000, dport, 0x02)
            .payload(b"hello")
            .ip()
    }
}

/// Sends `payload` from a new balancer socket (so that a late answer to an
/// earlier packet cannot pass for this one's) to `to`:6081 and returns the
/// answer and where it came from, if any within two seconds.
/// What came back for one packet: its bytes, where from, the balancer
/// socket's port, and whether it came to the balancer's Geneve port (the
/// ports kept) rather than to the sending socket (a socket's reply).
struct Got {
    bytes: Vec<u8>,
    from: SocketAddr,
    sent_from: u16,
    kept: bool,
}

/// Sends `payload` to appliance `to`:6081 from an ephemeral port and waits
/// for the answer on that socket and on the balancer's Geneve port.
fn exchange(to: &str, payload: &[u8]) -> Option<Got> {
    let bal = if to.contains(':') { BAL6 } else { BAL4 };
    exchange_from(bal, to, payload)
}

/// [`exchange`] from address `from` of the balancer's namespace.
fn exchange_from(from: &str, to: &str, payload: &[u8]) -> Option<Got> {
    let to = SocketAddr::new(ip(to), 6081);
    let bal = ip(from);
    let s = UdpSocket::bind((bal, 0)).expect("bind");
    let g = UdpSocket::bind((bal, 6081)).expect("bind the Geneve port");
    for x in [&s, &g] {
        x.set_read_timeout(Some(Duration::from_millis(50)))
            .expect("timeout");
    }
    let sent_from = s.local_addr().expect("address").port();
    s.send_to(payload, to).expect("send");
    let mut buf = [0u8; 2048];
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline {
        for (x, kept) in [(&g, true), (&s, false)] {
            if let Ok((n, from)) = x.recv_from(&mut buf) {
                return Some(Got {
                    bytes: buf[..n].to_vec(),
                    from,
                    sent_from,
                    kept,
                });
            }
        }
    }
    None
}

#[test]
fn answers_are_the_contract_byte_for_byte() {
    let mut ns = Netns::new();
    // No duplicate address detection: addresses (link-local ones included,
    // which neighbour discovery uses) are usable at once.
    for n in [&ns.bal, &ns.name] {
        run(Command::new("ip").args([
            "netns",
            "exec",
            n,
            "sysctl",
            "-qw",
            "net.ipv6.conf.all.accept_dad=0",
            "net.ipv6.conf.default.accept_dad=0",
        ]));
    }
    ns.ip_bal(&[
        "link", "add", "name", "vb", "type", "veth", "peer", "name", "va", "netns", &ns.name,
    ]);
    for a in [BAL4, STRANGER4] {
        ns.ip_bal(&["addr", "add", &format!("{a}/24"), "dev", "vb"]);
    }
    for a in [BAL6, STRANGER6] {
        ns.ip_bal(&[
            "-6",
            "addr",
            "add",
            &format!("{a}/64"),
            "dev",
            "vb",
            "nodad",
        ]);
    }
    for a in [A4, B4, C4, C24] {
        ns.ip(&["addr", "add", &format!("{a}/24"), "dev", "va"]);
    }
    for a in [A6, B6, C6, C26] {
        ns.ip(&[
            "-6",
            "addr",
            "add",
            &format!("{a}/64"),
            "dev",
            "va",
            "nodad",
        ]);
    }
    for (n, dev) in [(&ns.bal, "vb"), (&ns.name, "va")] {
        for d in ["lo", dev] {
            run(Command::new("ip").args(["-n", n, "link", "set", d, "up"]));
        }
    }
    // Software checksums on the way back, verified on arrival.
    ns.ethtool(&ns.name, &["va", "tx", "off"]);
    ns.ethtool(&ns.bal, &["vb", "rx", "off"]);
    let dir = std::env::temp_dir();
    let log = |x: &str| dir.join(format!("{}-{x}.log", ns.name));
    let (la, lb, lc, flows, flows_b) = (log("a"), log("b"), log("c"), log("flows"), log("flows-b"));
    let a6 = format!("[{A6}]:6081");
    let allow = ["--allow-source", BAL4, "--allow-source", BAL6];
    ns.nva(
        &la,
        &[
            &allow[..],
            &[
                "--listen",
                A4,
                "--listen",
                &a6,
                "--flow-log",
                flows.to_str().expect("path"),
                "--drop",
                "tcp * <-> *:23",
            ],
        ]
        .concat(),
    );
    // A flow log of at most 150 bytes (a line is ~110) and one rotated file.
    ns.nva(
        &lb,
        &[
            &allow[..],
            &[
                "--listen",
                B4,
                "--listen",
                B6,
                "--tamper",
                "cookie",
                "--flow-log",
                flows_b.to_str().expect("path"),
                "--flow-log-max-bytes",
                "150",
                "--flow-log-keep",
                "1",
            ],
        ]
        .concat(),
    );
    ns.nva(
        &lc,
        &[
            &allow[..],
            &[
                "--listen",
                C4,
                "--listen",
                C6,
                "--tamper",
                "strip-options",
                "--answer",
                "socket",
                "--reply-from",
                C24,
                "--reply-from",
                C26,
            ],
        ]
        .concat(),
    );
    let text = |p: &std::path::Path| std::fs::read_to_string(p).unwrap_or_default();
    // Sockets are bound before each "listening" line: then packets queue.
    let started = Instant::now();
    for l in [&la, &lb, &lc] {
        while text(l).matches("listening on").count() < 2 {
            for d in &mut ns.daemons {
                let exited = d.try_wait().ok().flatten();
                assert!(exited.is_none(), "spillway-nva exited:\n{}", text(l));
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "no start:\n{}",
                text(l)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    let results = ns
        .enter(|| {
            let mut out = Vec::new();
            for (outer, inner6) in [(A4, false), (A4, true), (A6, false), (A6, true)] {
                let g = geneve(&inner_tcp(inner6, 443));
                out.push(("plain", outer, g.clone(), exchange(outer, &g)));
            }
            for (outer, inner6) in [(A4, false), (A6, true)] {
                let g = geneve(&inner_tcp(inner6, 23));
                out.push(("rule", outer, g.clone(), exchange(outer, &g)));
            }
            let junk = vec![0x40, 0, 0, 0];
            out.push(("junk", A4, junk.clone(), exchange(A4, &junk)));
            // What the plain appliance returns to the balancer, from a
            // stranger: not answered.
            for (from, outer, inner6) in [(STRANGER4, A4, false), (STRANGER6, A6, true)] {
                let g = geneve(&inner_tcp(inner6, 443));
                out.push(("stranger", outer, g.clone(), exchange_from(from, outer, &g)));
            }
            for outer in [B4, B6, C4, C6] {
                let g = geneve(&inner_tcp(outer.contains(':'), 443));
                out.push(("tamper", outer, g.clone(), exchange(outer, &g)));
            }
            out
        })
        .join()
        .expect("namespace thread");

    for (what, to, sent, got) in results {
        let ctx = format!("{what} to {to}");
        match (what, to) {
            ("plain", _) => {
                let g = got.unwrap_or_else(|| panic!("{ctx}: no answer"));
                assert!(g.kept, "{ctx}: to the balancer's Geneve port");
                assert_eq!(
                    g.from,
                    SocketAddr::new(ip(to), g.sent_from),
                    "{ctx}: addresses swapped, ports kept"
                );
                assert_eq!(g.bytes, sent, "{ctx}: byte for byte");
            }
            ("rule" | "junk" | "stranger", _) => assert!(got.is_none(), "{ctx}: answered"),
            (_, B4 | B6) => {
                let g = got.unwrap_or_else(|| panic!("{ctx}: no answer"));
                assert!(g.kept, "{ctx}");
                assert_eq!(g.from, SocketAddr::new(ip(to), g.sent_from), "{ctx}");
                let mut want = sent.clone();
                for b in &mut want[24..28] {
                    *b = !*b;
                }
                assert_eq!(g.bytes, want, "{ctx}: cookie inverted, nothing else");
            }
            _ => {
                let g = got.unwrap_or_else(|| panic!("{ctx}: no answer"));
                let other = if to == C4 { C24 } else { C26 };
                assert!(!g.kept, "{ctx}: --answer socket replies from its socket");
                assert_eq!(
                    g.from,
                    SocketAddr::new(ip(other), 6081),
                    "{ctx}: other address"
                );
                let bytes = g.bytes;
                let mut want = vec![0, 0, sent[2], sent[3], 0, 0, 0, 0];
                want.extend_from_slice(&sent[8 + OURS.len()..]);
                assert_eq!(bytes, want, "{ctx}: options stripped");
            }
        }
    }

    // SIGUSR1 prints the counters and the appliance keeps running.
    let pid_b = ns.daemons[1].id();
    run(Command::new("kill").args(["-USR1", &pid_b.to_string()]));
    let want_b =
        "spillway-nva: received 2, returned 2, malformed 0, dropped 0 (source_not_allowed 0,";
    let asked = Instant::now();
    while !text(&lb).contains(want_b) {
        assert!(
            asked.elapsed() < Duration::from_secs(30),
            "no counters on SIGUSR1:\n{}",
            text(&lb)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        ns.daemons[1].try_wait().expect("wait").is_none(),
        "{}",
        text(&lb)
    );

    // Appliance B's flow log: two lines, one in each file, neither file
    // over its 150 bytes.
    let (b_now, b_old) = (text(&flows_b), text(&flows_b.with_extension("log.1")));
    for f in [&b_now, &b_old] {
        assert!(
            f.len() <= 150 && f.lines().count() == 1,
            "{b_old:?} then {b_now:?}"
        );
        assert!(f.starts_with("returned from="), "{f}");
    }
    assert!(!flows_b.with_extension("log.2").exists());

    // Appliance A's exit line and flow log.
    let pid = ns.daemons[0].id();
    run(Command::new("kill").args(["-TERM", &pid.to_string()]));
    let status = ns.daemons[0].wait().expect("wait");
    let exit_text = text(&la);
    let flow_text = text(&flows);
    for p in [
        &la,
        &lb,
        &lc,
        &flows,
        &flows_b,
        &flows_b.with_extension("log.1"),
    ] {
        let _ = std::fs::remove_file(p);
    }
    eprintln!("{exit_text}\n{flow_text}");
    assert!(status.success(), "{exit_text}");
    let exit = exit_text
        .lines()
        .find(|l| l.contains("spillway-nva: exiting: "))
        .unwrap_or_else(|| panic!("no exit line:\n{exit_text}"));
    assert!(
        exit.contains(
            "received 9, returned 4, malformed 1, dropped 4 (source_not_allowed 2, not_ip 0, oam 0, rule 2, send_failed 0)"
        ),
        "{exit}"
    );
    let lines: Vec<&str> = flow_text.lines().collect();
    assert_eq!(lines.len(), 6, "{flow_text}");
    assert_eq!(
        lines[0],
        "returned from=192.0.2.1 6 198.51.100.7:40000 203.0.113.10:443 a->b \
         endpoint_id=0102030405060708 cookie=a1b2c3d4"
    );
    assert!(
        lines[5].starts_with("dropped:rule from=2001:db8::1 6 [2001:db8:c::7]:40000"),
        "{}",
        lines[5]
    );
}
