//! `spillway-decap` for real, in a network namespace of its own: tunnel
//! packets of every kind over IPv4 and IPv6 loopback, from an allowed
//! balancer address and from strangers, to the VIP and to the host's other
//! addresses. A UDP server on the inner destination port sees exactly the
//! legitimate ones; the daemon's exit line counts the rest by reason. The
//! VIPs list their one UDP port (issue 38 item 13): packets from a balancer
//! to the VIP's other ports never reach the server listening there. Needs
//! root (namespaces, TUN, raw sockets).

#![allow(clippy::cast_possible_truncation)] // test values are small
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

use std::io::Read;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, Socket, Type};

const VIP4: &str = "192.0.2.10";
const VIP6: &str = "2001:db8::10";
/// Addresses of the host that are not VIPs.
const OTHER4: &str = "192.0.2.99";
const OTHER6: &str = "2001:db8::99";
const CLIENT4: &str = "198.51.100.7";
const CLIENT6: &str = "2001:db8:c::7";
/// Allowed balancers: the namespace's loopback addresses.
const BAL4: &str = "127.0.0.1";
const BAL6: &str = "::1";
/// Strangers, also on the namespace's loopback.
const STRANGER4: &str = "127.0.0.2";
const STRANGER6: &str = "2001:db8:bad::2";
/// The inner packets' destination port, where the test listens, and the
/// only port the VIPs list.
const PORT: u16 = 7777;
/// Another port the test listens on, which the VIPs do not list.
const UNLISTED: u16 = 7778;

fn ip(s: &str) -> IpAddr {
    s.parse().expect("address")
}

/// A namespace of this test run, removed (with what runs in it) on drop.
struct Netns {
    name: String,
    daemon: Option<Child>,
}

impl Netns {
    fn new() -> Netns {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let name = format!("spwdecap{}x{:x}", std::process::id(), nanos & 0xffff);
        run(ip_cmd(&["netns", "add", &name]));
        Netns { name, daemon: None }
    }

    fn ip(&self, args: &[&str]) {
        let mut a = vec!["-n", &self.name];
        a.extend_from_slice(args);
        run(ip_cmd(&a));
    }

    /// Runs `f` on a thread inside the namespace (sockets made there stay in it).
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
        if let Some(mut d) = self.daemon.take() {
            let _ = d.kill();
            let _ = d.wait();
        }
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// Runs `c`, failing the test with its command line, status and output if it fails.
fn run(mut c: Command) {
    let out = c.output().unwrap_or_else(|e| panic!("{c:?}: {e}"));
    assert!(
        out.status.success(),
        "{c:?} exited with {}: stdout {:?}, stderr {:?}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `ip ARGS…`.
fn ip_cmd(args: &[&str]) -> Command {
    let mut c = Command::new("ip");
    c.args(args);
    c
}

/// A UDP packet from `src`:5555 to `dst`:`port` carrying `data`, valid checksums.
fn udp_packet(src: IpAddr, dst: IpAddr, port: u16, data: &[u8]) -> Vec<u8> {
    testkit::packet::Packet::udp(src, dst, 5555, port)
        .payload(data)
        .ip()
}

/// How a test packet travels.
#[derive(Clone, Copy, Debug)]
enum How {
    Gue,
    /// GENEVE with this flags byte and these options.
    Geneve(u8, &'static [u8]),
    /// Raw IP with this protocol (4, 41, 47); GRE gets its header here.
    Raw(i32),
}

/// Spillway's own GENEVE options (endpoint ID, cookie).
const OURS: &[u8] = &[
    0x01, 0x39, 0x01, 0x02, 0, 0, 0, 0, 0, 0, 0, 7, 0x01, 0x39, 0x03, 0x01, 0, 0, 0, 9,
];
/// A critical option nobody here understands.
const ALIEN: &[u8] = &[0x12, 0x34, 0x85, 0x01, 1, 2, 3, 4];

/// Tag (the inner payload), how it travels, outer source, inner source,
/// inner destination.
type Case = (&'static str, How, &'static str, &'static str, &'static str);

fn send(c: &Case) {
    send_to(c, PORT);
}

/// [`send`] to inner destination port `port`.
fn send_to(&(tag, how, outer_src, inner_src, inner_dst): &Case, port: u16) {
    let inner = udp_packet(ip(inner_src), ip(inner_dst), port, tag.as_bytes());
    let src = ip(outer_src);
    let dst = if src.is_ipv4() { ip(BAL4) } else { ip(BAL6) };
    match how {
        How::Gue | How::Geneve(..) => {
            let (port, payload) = match how {
                How::Geneve(flags, options) => {
                    let et: u16 = if inner[0] >> 4 == 6 { 0x86dd } else { 0x0800 };
                    let mut g = vec![(options.len() / 4) as u8, flags];
                    g.extend_from_slice(&et.to_be_bytes());
                    g.extend_from_slice(&[0, 0, 0, 0]);
                    g.extend_from_slice(options);
                    g.extend_from_slice(&inner);
                    (6081, g)
                }
                _ => (6080, inner),
            };
            let s = UdpSocket::bind(SocketAddr::new(src, 0)).expect("bind sender");
            s.send_to(&payload, SocketAddr::new(dst, port))
                .expect("send");
        }
        How::Raw(proto) => {
            let payload = if proto == 47 {
                let et: u16 = if inner[0] >> 4 == 6 { 0x86dd } else { 0x0800 };
                let mut g = vec![0, 0];
                g.extend_from_slice(&et.to_be_bytes());
                g.extend_from_slice(&inner);
                g
            } else {
                inner
            };
            let domain = if src.is_ipv4() {
                Domain::IPV4
            } else {
                Domain::IPV6
            };
            let s = Socket::new(domain, Type::RAW, Some(Protocol::from(proto))).expect("raw");
            s.bind(&SocketAddr::new(src, 0).into()).expect("bind raw");
            s.send_to(&payload, &SocketAddr::new(dst, 0).into())
                .expect("send raw");
        }
    }
}

#[test]
fn only_balancers_tunnels_to_the_vips_reach_the_kernel() {
    let ns = Netns::new();
    ns.ip(&["link", "set", "lo", "up"]);
    for a in [VIP4, OTHER4] {
        ns.ip(&["addr", "add", &format!("{a}/32"), "dev", "lo"]);
    }
    for a in [VIP6, OTHER6, STRANGER6] {
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
    // Clients have no route back here; the packets are still for this host.
    let mut sysctl = Command::new("ip");
    sysctl.args([
        "netns",
        "exec",
        &ns.name,
        "sysctl",
        "-qw",
        "net.ipv4.conf.all.rp_filter=0",
        "net.ipv4.conf.default.rp_filter=0",
    ]);
    run(sysctl);

    let log_path = std::env::temp_dir().join(format!("{}.log", ns.name));
    let log = std::fs::File::create(&log_path).expect("log file");
    let mut ns = ns;
    ns.daemon = Some(
        Command::new("ip")
            .args([
                "netns",
                "exec",
                &ns.name,
                env!("CARGO_BIN_EXE_spillway-decap"),
            ])
            .args([
                "--tun",
                "decap0",
                "--ipip",
                "--gre",
                "--stats-interval",
                "0",
            ])
            .args(["--allow-source", BAL4, "--allow-source", BAL6])
            .args([
                "--vip",
                &format!("{VIP4}:udp/{PORT}"),
                "--vip",
                &format!("[{VIP6}]:udp/{PORT}"),
            ])
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start spillway-decap"),
    );
    let log_text = || std::fs::read_to_string(&log_path).unwrap_or_default();
    // The TUN device comes after the sockets: once it is there, packets queue.
    let started = Instant::now();
    loop {
        let up = Command::new("ip")
            .args(["-n", &ns.name, "link", "show", "decap0"])
            .output()
            .expect("ip link")
            .status
            .success();
        if up {
            break;
        }
        let exited = ns.daemon.as_mut().and_then(|d| d.try_wait().ok().flatten());
        assert!(exited.is_none(), "spillway-decap exited:\n{}", log_text());
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no TUN device:\n{}",
            log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    // The server behind the VIP (and the host's other addresses).
    let listen = ns.enter(|| {
        let bind = |port: u16| {
            let v4 = UdpSocket::bind(("0.0.0.0", port)).expect("bind v4");
            let v6 = Socket::new(Domain::IPV6, Type::DGRAM, Some(Protocol::UDP)).expect("v6");
            v6.set_only_v6(true).expect("v6only");
            v6.bind(&SocketAddr::new(ip("::"), port).into())
                .expect("bind v6");
            let v6: UdpSocket = v6.into();
            for s in [&v4, &v6] {
                s.set_nonblocking(true).expect("nonblocking");
            }
            (v4, v6)
        };
        (bind(PORT), bind(UNLISTED))
    });
    let ((v4, v6), (u4, u6)) = listen.join().expect("listener");

    use How::*;
    // From a balancer to the VIP, but to a port the VIP does not list (a
    // service on the backend the balancer does not forward to).
    let unlisted: [Case; 2] = [
        ("gue4-unlisted", Gue, BAL4, CLIENT4, VIP4),
        ("ipip6-unlisted", Raw(41), BAL6, CLIENT6, VIP6),
    ];
    let bad: [Case; 9] = [
        // From strangers: every kind of tunnel.
        ("gue4-stranger", Gue, STRANGER4, CLIENT4, VIP4),
        ("gue6-stranger", Gue, STRANGER6, CLIENT6, VIP6),
        ("ipip4-stranger", Raw(4), STRANGER4, CLIENT4, VIP4),
        ("ipip6-stranger", Raw(4), STRANGER6, CLIENT4, VIP4),
        // From a balancer, but to the host's other addresses.
        ("gue4-notowned", Gue, BAL4, CLIENT4, OTHER4),
        ("ipip6-notowned", Raw(41), BAL6, CLIENT6, OTHER6),
        // From a balancer, to the VIP, posing as the host.
        ("gue4-spoof", Gue, BAL4, VIP4, VIP4),
        // GENEVE control packets and options nobody here understands.
        ("gnv4-oam", Geneve(0x80, OURS), BAL4, CLIENT4, VIP4),
        ("gnv6-critical", Geneve(0x40, ALIEN), BAL6, CLIENT6, VIP6),
    ];
    // Then on every socket the bad ones used (each socket is read in order,
    // so once these arrive the bad ones were dealt with) and the rest.
    let good: [Case; 12] = [
        ("gue4-ok", Gue, BAL4, CLIENT4, VIP4),
        ("gue4-6-ok", Gue, BAL4, CLIENT6, VIP6),
        ("gue6-ok", Gue, BAL6, CLIENT6, VIP6),
        ("gue6-4-ok", Gue, BAL6, CLIENT4, VIP4),
        ("gnv4-ok", Geneve(0, OURS), BAL4, CLIENT4, VIP4),
        ("gnv6-ok", Geneve(0, OURS), BAL6, CLIENT6, VIP6),
        ("ipip4-ok", Raw(4), BAL4, CLIENT4, VIP4),
        ("ipip4-6-ok", Raw(41), BAL4, CLIENT6, VIP6),
        ("ipip6-4-ok", Raw(4), BAL6, CLIENT4, VIP4),
        ("ipip6-ok", Raw(41), BAL6, CLIENT6, VIP6),
        ("gre4-ok", Raw(47), BAL4, CLIENT4, VIP4),
        ("gre6-ok", Raw(47), BAL6, CLIENT6, VIP6),
    ];
    ns.enter(move || {
        for c in &unlisted {
            send_to(c, UNLISTED);
        }
        for c in bad.iter().chain(good.iter()) {
            send(c);
        }
    })
    .join()
    .expect("sender");
    let want: Vec<&str> = [
        "gue4-ok",
        "gue4-6-ok",
        "gue6-ok",
        "gue6-4-ok",
        "gnv4-ok",
        "gnv6-ok",
        "ipip4-ok",
        "ipip4-6-ok",
        "ipip6-4-ok",
        "ipip6-ok",
        "gre4-ok",
        "gre6-ok",
    ]
    .to_vec();

    // Receive until every legitimate packet is in, then a moment more for
    // anything that should not have come.
    let mut got = Vec::new();
    let mut buf = [0u8; 256];
    let mut settle: Option<Instant> = None;
    let started = Instant::now();
    loop {
        for s in [&v4, &v6, &u4, &u6] {
            while let Ok(n) = s.recv(&mut buf) {
                got.push(String::from_utf8_lossy(&buf[..n]).into_owned());
            }
        }
        if settle.is_none() && want.iter().all(|w| got.iter().any(|g| g == w)) {
            settle = Some(Instant::now());
        }
        if settle.is_some_and(|t| t.elapsed() > Duration::from_millis(500)) {
            break;
        }
        if started.elapsed() > Duration::from_secs(20) {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!("the server got {got:?}");
    let mut sorted = got.clone();
    sorted.sort();
    let mut expected: Vec<String> = want.iter().map(|s| s.to_string()).collect();
    expected.sort();
    assert_eq!(
        sorted,
        expected,
        "exactly the legitimate packets reach the server\n{}",
        log_text()
    );

    // The exit line counts the rest, by reason.
    let pid = ns.daemon.as_ref().map(|d| d.id()).expect("daemon");
    let mut kill = Command::new("kill");
    kill.args(["-TERM", &pid.to_string()]);
    run(kill);
    let status = ns.daemon.take().map(|mut d| d.wait().expect("wait"));
    let mut text = String::new();
    std::fs::File::open(&log_path)
        .expect("log")
        .read_to_string(&mut text)
        .expect("read log");
    let _ = std::fs::remove_file(&log_path);
    eprintln!("{text}");
    assert!(status.is_some_and(|s| s.success()), "{text}");
    let exit = text
        .lines()
        .find(|l| l.contains("spillway-decap: exiting: "))
        .unwrap_or_else(|| panic!("no exit line:\n{text}"));
    for counter in [
        "delivered 12,",
        "dropped 11 (",
        "source_not_allowed 4,",
        "inner_dst_not_owned 2,",
        "inner_src_refused 1,",
        "geneve_oam 1,",
        "geneve_critical_option 1,",
        "malformed 0,",
        "malformed_inner 0,",
        "port_not_allowed 2,",
        "tun_write_failed 0)",
    ] {
        assert!(exit.contains(counter), "{counter:?} in {exit}");
    }
    // The first drop of each kind is named in the log, with its source:
    // a stranger's (IPv4 and IPv6 tunnels arrive on different sockets, so
    // either may be read first).
    assert!(
        [STRANGER4, STRANGER6]
            .iter()
            .any(|s| text.contains(&format!(
                "dropped a packet from {s}: the outer source is not an allowed"
            ))),
        "{text}"
    );
}
