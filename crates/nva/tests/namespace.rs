//! `spillway-nva` for real, in a network namespace of its own (unique per
//! run, removed on drop, also when the test fails): a "balancer" socket sends
//! GENEVE over IPv4 and IPv6 with IPv4 and IPv6 inner packets to three
//! appliances — a plain one with a drop rule and a flow log, one tampering
//! with the cookie, one stripping options and answering from another
//! address — and checks each answer byte for byte, with the address and port
//! it came from (the kernel only delivers it if the outer checksums are
//! right). Needs root (namespaces).

#![allow(clippy::cast_possible_truncation)] // test values are small
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use testkit::packet::{Packet, v4, v6};

const BAL4: &str = "192.0.2.1";
const BAL6: &str = "2001:db8::1";
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

struct Netns {
    name: String,
    daemons: Vec<Child>,
}

impl Netns {
    fn new() -> Netns {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let name = format!("spwnva{}x{:x}", std::process::id(), nanos & 0xffff);
        run(Command::new("ip").args(["netns", "add", &name]));
        Netns {
            name,
            daemons: Vec::new(),
        }
    }

    fn ip(&self, args: &[&str]) {
        run(Command::new("ip").args(["-n", &self.name]).args(args));
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

    fn enter<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> std::thread::JoinHandle<T> {
        let path = format!("/var/run/netns/{}", self.name);
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
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
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

/// Sends `payload` from the balancer socket of `to`'s family to `to`:6081
/// and returns the answer and where it came from, if any within a second.
fn exchange(
    socks: &(UdpSocket, UdpSocket),
    to: &str,
    payload: &[u8],
) -> Option<(Vec<u8>, SocketAddr)> {
    let to = SocketAddr::new(ip(to), 6081);
    let s = if to.is_ipv4() { &socks.0 } else { &socks.1 };
    s.send_to(payload, to).expect("send");
    let mut buf = [0u8; 2048];
    let (n, from) = s.recv_from(&mut buf).ok()?;
    Some((buf[..n].to_vec(), from))
}

#[test]
fn answers_are_the_contract_byte_for_byte() {
    let mut ns = Netns::new();
    ns.ip(&["link", "set", "lo", "up"]);
    for a in [BAL4, A4, B4, C4, C24] {
        ns.ip(&["addr", "add", &format!("{a}/32"), "dev", "lo"]);
    }
    for a in [BAL6, A6, B6, C6, C26] {
        ns.ip(&[
            "-6",
            "addr",
            "add",
            &format!("{a}/128"),
            "dev",
            "lo",
            "nodad",
        ]);
    }
    let dir = std::env::temp_dir();
    let log = |x: &str| dir.join(format!("{}-{x}.log", ns.name));
    let (la, lb, lc, flows) = (log("a"), log("b"), log("c"), log("flows"));
    let a6 = format!("[{A6}]:6081");
    ns.nva(
        &la,
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
    );
    ns.nva(&lb, &["--listen", B4, "--listen", B6, "--tamper", "cookie"]);
    ns.nva(
        &lc,
        &[
            "--listen",
            C4,
            "--listen",
            C6,
            "--tamper",
            "strip-options",
            "--reply-from",
            C24,
            "--reply-from",
            C26,
        ],
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
            let s4 = UdpSocket::bind((ip(BAL4), 0)).expect("bind v4");
            let s6 = UdpSocket::bind((ip(BAL6), 0)).expect("bind v6");
            for s in [&s4, &s6] {
                s.set_read_timeout(Some(Duration::from_secs(1)))
                    .expect("timeout");
            }
            let socks = (s4, s6);
            let mut out = Vec::new();
            for (outer, inner6) in [(A4, false), (A4, true), (A6, false), (A6, true)] {
                let g = geneve(&inner_tcp(inner6, 443));
                out.push(("plain", outer, g.clone(), exchange(&socks, outer, &g)));
            }
            for (outer, inner6) in [(A4, false), (A6, true)] {
                let g = geneve(&inner_tcp(inner6, 23));
                out.push(("rule", outer, g.clone(), exchange(&socks, outer, &g)));
            }
            let junk = vec![0x40, 0, 0, 0];
            out.push(("junk", A4, junk.clone(), exchange(&socks, A4, &junk)));
            for outer in [B4, B6, C4, C6] {
                let g = geneve(&inner_tcp(outer.contains(':'), 443));
                out.push(("tamper", outer, g.clone(), exchange(&socks, outer, &g)));
            }
            out
        })
        .join()
        .expect("namespace thread");

    for (what, to, sent, got) in results {
        let ctx = format!("{what} to {to}");
        match (what, to) {
            ("plain", _) => {
                let (bytes, from) = got.unwrap_or_else(|| panic!("{ctx}: no answer"));
                assert_eq!(
                    from,
                    SocketAddr::new(ip(to), 6081),
                    "{ctx}: swapped, port kept"
                );
                assert_eq!(bytes, sent, "{ctx}: byte for byte");
            }
            ("rule" | "junk", _) => assert!(got.is_none(), "{ctx}: answered"),
            (_, B4 | B6) => {
                let (bytes, from) = got.unwrap_or_else(|| panic!("{ctx}: no answer"));
                assert_eq!(from, SocketAddr::new(ip(to), 6081), "{ctx}");
                let mut want = sent.clone();
                for b in &mut want[24..28] {
                    *b = !*b;
                }
                assert_eq!(bytes, want, "{ctx}: cookie inverted, nothing else");
            }
            _ => {
                let (bytes, from) = got.unwrap_or_else(|| panic!("{ctx}: no answer"));
                let other = if to == C4 { C24 } else { C26 };
                assert_eq!(
                    from,
                    SocketAddr::new(ip(other), 6081),
                    "{ctx}: other address"
                );
                let mut want = vec![0, 0, sent[2], sent[3], 0, 0, 0, 0];
                want.extend_from_slice(&sent[8 + OURS.len()..]);
                assert_eq!(bytes, want, "{ctx}: options stripped");
            }
        }
    }

    // Appliance A's exit line and flow log.
    let pid = ns.daemons[0].id();
    run(Command::new("kill").args(["-TERM", &pid.to_string()]));
    let status = ns.daemons[0].wait().expect("wait");
    let exit_text = text(&la);
    let flow_text = text(&flows);
    for p in [&la, &lb, &lc, &flows] {
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
            "received 7, returned 4, malformed 1, dropped 2 (not_ip 0, oam 0, rule 2, send_failed 0)"
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
