//! Gateway mode (M30-M33) end to end, in the namespace lab of
//! scripts/lab-gateway.sh: a router sends all it forwards between a client
//! and a server through Spillway, which hands each connection to one of two
//! `spillway nva` appliances in GENEVE and sends what they return back to
//! the router. Real kernel TCP, IPv4 and IPv6; which appliance saw which
//! connection is read from the appliances' flow logs. Needs root.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use common::lab::{self, LAB_GATEWAY_SH, Lab};

const SERVER_V4: &str = "198.18.3.100";
const SERVER_V6: &str = "2001:db8:3::100";
const CLIENT_V4: &str = "198.18.0.100";
const CLIENT_V6: &str = "2001:db8::100";
/// The gateway endpoint ID of the router in the lab's configuration.
const ENDPOINT_ID: &str = "endpoint_id=0000000000000100";
/// The remote router's, in the lab's `remote` mode (M31).
const REMOTE_ENDPOINT_ID: &str = "endpoint_id=0000000000000500";
const NVA: [&str; 2] = ["198.18.1.21", "198.18.1.22"];

/// One side of a connection as the appliance's flow log writes it.
fn side(ip: IpAddr, port: u16) -> String {
    match ip {
        IpAddr::V4(a) => format!("{a}:{port}"),
        IpAddr::V6(a) => format!("[{a}]:{port}"),
    }
}

/// A client connection: its two sides in flow-log form.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Conn {
    client: String,
    server: String,
}

impl Conn {
    fn of(s: &TcpStream) -> Conn {
        let (l, p) = (s.local_addr().expect("local"), s.peer_addr().expect("peer"));
        Conn {
            client: side(l.ip().to_canonical(), l.port()),
            server: side(p.ip().to_canonical(), p.port()),
        }
    }
}

/// One line of an appliance's flow log.
#[derive(Debug, Clone)]
struct Line {
    verdict: String,
    conn: (String, String),
    direction: String,
    rest: String,
}

impl Line {
    fn is(&self, c: &Conn) -> bool {
        (self.conn.0 == c.client && self.conn.1 == c.server)
            || (self.conn.0 == c.server && self.conn.1 == c.client)
    }
}

impl Lab {
    /// `lab-gateway.sh nva DIR N ACTION ARGS…`: stops or (re)starts appliance n.
    fn nva(&self, n: u8, action: &str, args: &[&str]) {
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(LAB_GATEWAY_SH.path);
        let mut c = Command::new("bash");
        c.arg(script)
            .arg("nva")
            .arg(self.dir())
            .arg(n.to_string())
            .arg(action)
            .args(args);
        common::run_ok(&mut c);
    }

    /// The flow log of appliance n (1 or 2), parsed.
    fn flows(&self, n: u8) -> Vec<Line> {
        self.log_of(&format!("nva{n}.flows"))
            .lines()
            .filter_map(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                // verdict from=… proto a b direction endpoint_id=… cookie=…
                let [verdict, _from, _proto, a, b, dir, ..] = w.as_slice() else {
                    return None;
                };
                Some(Line {
                    verdict: (*verdict).to_owned(),
                    conn: ((*a).to_owned(), (*b).to_owned()),
                    direction: (*dir).to_owned(),
                    rest: w[6..].join(" "),
                })
            })
            .collect()
    }

    /// `spillway stats`.
    fn stats(&self) -> String {
        self.ctl(&["stats"])
    }

    /// Waits until the health line of appliance n says `state` (`HEALTHY`,
    /// `UNHEALTHY`); how long that took.
    fn wait_health(&self, n: usize, state: &str, within: Duration) -> Duration {
        let t0 = Instant::now();
        let line = format!("nvas/{}:8080: {state} ", NVA[n - 1]);
        self.wait_status(&[line.as_str()], within);
        t0.elapsed()
    }

    /// TCP segments the server's namespace has received (`Tcp: InSegs`).
    fn server_segments(&self) -> u64 {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns("s"), "cat", "/proc/net/snmp"]);
        let out = String::from_utf8_lossy(&common::run_ok(&mut c).stdout).into_owned();
        let rows: Vec<Vec<&str>> = out
            .lines()
            .filter(|l| l.starts_with("Tcp:"))
            .map(|l| l.split_whitespace().collect())
            .collect();
        let [head, vals] = rows.as_slice() else {
            panic!("no Tcp rows in:\n{out}");
        };
        let at = head.iter().position(|h| *h == "InSegs").expect("InSegs");
        vals[at].parse().expect("InSegs value")
    }
}

/// A TCP connection to `addr` from a client port no earlier connection of
/// this test used: the flow logs tell connections apart by their ports,
/// and a reused port is a new connection (a new flow entry, a new cookie,
/// maybe another appliance) under the same name.
fn connect(addr: SocketAddr, timeout: Duration) -> std::io::Result<TcpStream> {
    use std::sync::atomic::{AtomicU16, Ordering};
    static NEXT: AtomicU16 = AtomicU16::new(20000);
    let port = NEXT.fetch_add(1, Ordering::Relaxed);
    let s = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )?;
    let any: IpAddr = if addr.is_ipv4() {
        std::net::Ipv4Addr::UNSPECIFIED.into()
    } else {
        std::net::Ipv6Addr::UNSPECIFIED.into()
    };
    s.bind(&SocketAddr::new(any, port).into())?;
    s.connect_timeout(&addr.into(), timeout)?;
    Ok(s.into())
}

/// An HTTP GET to `server` port 80 from the client namespace: the
/// connection and the answer's body, or what failed.
fn get(lab: &Lab, server: &'static str, timeout: Duration) -> Result<(Conn, String), String> {
    lab.in_client(move || {
        let addr = SocketAddr::new(server.parse().expect("server"), 80);
        let mut s = connect(addr, timeout).map_err(|e| e.to_string())?;
        let conn = Conn::of(&s);
        s.set_read_timeout(Some(timeout))
            .map_err(|e| e.to_string())?;
        s.write_all(b"GET / HTTP/1.0\r\nHost: lab\r\n\r\n")
            .map_err(|e| e.to_string())?;
        let mut resp = String::new();
        s.read_to_string(&mut resp)
            .map_err(|e| format!("{conn:?}: {e}"))?;
        let body = resp
            .rsplit("\r\n\r\n")
            .next()
            .unwrap_or("")
            .trim()
            .to_owned();
        Ok((conn, body))
    })
    .join()
    .expect("client thread")
}

/// `n` requests to `server`; every one must succeed. The connections.
fn requests(lab: &Lab, server: &'static str, n: usize) -> Vec<Conn> {
    let t0 = Instant::now();
    let mut conns = Vec::new();
    let mut failed = Vec::new();
    for _ in 0..n {
        match get(lab, server, lab::TIMEOUT) {
            Ok((c, body)) if body == "server" => conns.push(c),
            other => failed.push(format!("{other:?}")),
        }
        // A broken path fails every request: no need to wait for them all.
        if failed.len() == 3 {
            break;
        }
    }
    eprintln!(
        "{n} requests to {server} through the appliances in {:?}",
        t0.elapsed()
    );
    assert!(
        failed.is_empty(),
        "{} of {n} requests to {server} failed (then stopped), e.g. {:?}\nstats:\n{}\nlog:\n{}",
        failed.len(),
        failed.first(),
        lab.stats(),
        lab.log()
    );
    conns
}

/// The appliance (1 or 2) each connection passed, checking that it passed
/// exactly one, both ways, returned, with the router's endpoint ID and one
/// cookie for both directions.
fn appliances_of(lab: &Lab, conns: &[Conn]) -> BTreeMap<Conn, u8> {
    appliances_of_endpoint(lab, conns, ENDPOINT_ID)
}

/// [`appliances_of`] for connections of the endpoint whose ID the flow logs
/// show as `endpoint_id`.
fn appliances_of_endpoint(lab: &Lab, conns: &[Conn], endpoint_id: &str) -> BTreeMap<Conn, u8> {
    // The last segments (ACK of FIN) may still be on their way.
    std::thread::sleep(Duration::from_millis(500));
    let logs = [lab.flows(1), lab.flows(2)];
    let mut of = BTreeMap::new();
    for c in conns {
        let seen: Vec<(u8, Vec<&Line>)> = (1..=2u8)
            .map(|n| (n, logs[n as usize - 1].iter().filter(|l| l.is(c)).collect()))
            .filter(|(_, ls): &(u8, Vec<&Line>)| !ls.is_empty())
            .collect();
        let [(n, lines)] = seen.as_slice() else {
            panic!(
                "{c:?} is in the flow logs of {} appliances: {seen:?}",
                seen.len()
            );
        };
        let dirs: BTreeSet<&str> = lines.iter().map(|l| l.direction.as_str()).collect();
        assert_eq!(
            dirs.len(),
            2,
            "{c:?}: both directions through nva{n}: {lines:?}"
        );
        assert!(lines.iter().all(|l| l.verdict == "returned"), "{lines:?}");
        assert!(
            lines.iter().all(|l| l.rest.starts_with(endpoint_id)),
            "{c:?}: the endpoint's ID on every packet: {lines:?}"
        );
        let cookies: BTreeSet<&str> = lines
            .iter()
            .filter_map(|l| l.rest.split_whitespace().find(|w| w.starts_with("cookie=")))
            .collect();
        assert!(
            cookies.len() == 1 && !cookies.contains("cookie=-"),
            "{c:?}: one cookie for both directions: {lines:?}"
        );
        of.insert(c.clone(), *n);
    }
    of
}

fn per_appliance(of: &BTreeMap<Conn, u8>) -> [usize; 2] {
    let mut per = [0; 2];
    for n in of.values() {
        per[*n as usize - 1] += 1;
    }
    per
}

/// A long-lived connection to the server's echo service (port 7).
struct Echo {
    s: TcpStream,
    conn: Conn,
}

/// Opens an echo connection from the client namespace (a socket made there
/// stays in it).
fn echo_connect(lab: &Lab) -> Echo {
    lab.in_client(|| {
        let addr = SocketAddr::new(SERVER_V4.parse().expect("server"), 7);
        let s = connect(addr, lab::TIMEOUT).expect("echo connect");
        let conn = Conn::of(&s);
        Echo { s, conn }
    })
    .join()
    .expect("client thread")
}

impl Echo {
    /// Sends a line and reads the echo within `timeout`: whether it came.
    fn echoes(&mut self, timeout: Duration) -> bool {
        self.s.set_read_timeout(Some(timeout)).expect("timeout");
        if self.s.write_all(b"ping\n").is_err() {
            return false;
        }
        let mut line = String::new();
        let mut r = BufReader::new(&self.s);
        matches!(r.read_line(&mut line), Ok(n) if n > 0) && line == "echo ping\n"
    }

    /// Closes with a reset: no FIN retransmitted into a dead path.
    fn abort(self) {
        let _ = socket2::SockRef::from(&self.s).set_linger(Some(Duration::ZERO));
    }
}

#[test]
fn lab_gateway_tcp_goes_through_one_appliance_both_ways() {
    let lab = Lab::up(&LAB_GATEWAY_SH, &[], &[]);
    for n in 1..=2 {
        let t = lab.wait_health(n, "HEALTHY", Duration::from_secs(20));
        eprintln!("nva{n} healthy after {t:?}");
    }

    // Both families, every connection through one appliance both ways, and
    // both appliances used.
    let mut conns = requests(&lab, SERVER_V4, 40);
    conns.extend(requests(&lab, SERVER_V6, 40));
    let of = appliances_of(&lab, &conns);
    let per = per_appliance(&of);
    let v6: usize = of.keys().filter(|c| c.client.starts_with('[')).count();
    eprintln!("connections per appliance {per:?} ({v6} of them IPv6)");
    assert!(
        per[0] > 0 && per[1] > 0,
        "both appliances get flows: {per:?}"
    );
    assert_eq!(v6, 40);
    assert!(
        of.keys()
            .all(|c| c.client.starts_with(CLIENT_V4)
                || c.client.starts_with(&format!("[{CLIENT_V6}]"))),
        "{of:?}"
    );
    // Every packet of them (at least SYN, SYN-ACK, request and answer)
    // came back from an appliance and was sent on.
    let s = lab.stats();
    eprintln!("{}", s.lines().take(2).collect::<Vec<_>>().join("\n"));
    let returned = lab::counter(&s, "gateway returned ");
    assert!(returned >= 4 * 80, "{s}");

    // Long-lived connections on both appliances.
    let mut echoes: Vec<Echo> = Vec::new();
    let on = |lab: &Lab, echoes: &[Echo]| {
        let conns: Vec<Conn> = echoes.iter().map(|e| e.conn.clone()).collect();
        appliances_of(lab, &conns)
    };
    let mut placed = BTreeMap::new();
    while echoes.len() < 64 {
        let mut e = echo_connect(&lab);
        assert!(e.echoes(lab::TIMEOUT), "echo through {:?}", e.conn);
        echoes.push(e);
        if echoes.len() >= 4 {
            placed = on(&lab, &echoes);
            let per = per_appliance(&placed);
            if per[0] >= 2 && per[1] >= 2 {
                break;
            }
        }
    }
    let per = per_appliance(&placed);
    assert!(per[0] >= 2 && per[1] >= 2, "{per:?}");
    eprintln!("long-lived connections per appliance {per:?}");

    // Appliance 1 stops: once its check fails, new connections all go to
    // appliance 2.
    let before = lab.flows(1).len();
    lab.nva(1, "stop", &[]);
    let t = lab.wait_health(1, "UNHEALTHY", Duration::from_secs(20));
    eprintln!("nva1 stopped: UNHEALTHY after {t:?}");
    let mut conns = requests(&lab, SERVER_V4, 20);
    conns.extend(requests(&lab, SERVER_V6, 10));
    let of = appliances_of(&lab, &conns);
    assert_eq!(per_appliance(&of), [0, 30], "{of:?}");
    assert_eq!(lab.flows(1).len(), before, "nva1 is gone");

    // Existing connections follow the persistence policy: TCP flows stay on
    // their appliance while it is unhealthy (DEFAULT_FOR_PROTOCOL, draining
    // timeout 300 s). Those on appliance 2 go on; those on the stopped one
    // stay there (and so get no answer), never moved to appliance 2.
    let nva2_before = lab.flows(2).len();
    let (mut kept, mut stuck) = (0, 0);
    for e in &mut echoes {
        match placed[&e.conn] {
            2 => {
                assert!(e.echoes(lab::TIMEOUT), "{:?} on nva2 goes on", e.conn);
                kept += 1;
            }
            _ => {
                assert!(
                    !e.echoes(Duration::from_secs(1)),
                    "{:?} stayed on the stopped nva1, yet answered",
                    e.conn
                );
                stuck += 1;
            }
        }
    }
    eprintln!("after nva1 stopped: {kept} connections on nva2 go on, {stuck} stay on nva1");
    std::thread::sleep(Duration::from_millis(300));
    let moved: Vec<Line> = lab.flows(2)[nva2_before..]
        .iter()
        .filter(|l| echoes.iter().any(|e| placed[&e.conn] == 1 && l.is(&e.conn)))
        .cloned()
        .collect();
    assert!(moved.is_empty(), "flows of nva1 moved to nva2: {moved:?}");
    for e in echoes {
        e.abort();
    }

    // Back: appliance 1 healthy again gets new flows again.
    lab.nva(1, "start", &[]);
    let t = lab.wait_health(1, "HEALTHY", Duration::from_secs(20));
    eprintln!("nva1 restarted: HEALTHY after {t:?}");
    let conns = requests(&lab, SERVER_V4, 40);
    let per = per_appliance(&appliances_of(&lab, &conns));
    eprintln!("after the restart: {per:?}");
    assert!(per[0] > 0 && per[1] > 0, "{per:?}");
}

/// A GENEVE packet as an appliance returns one (endpoint ID and a cookie,
/// options as Spillway sends them), around a TCP SYN of a flow Spillway
/// never saw, sent from appliance 1's address to ARGV[2]:ARGV[3] (with the
/// ports kept, as an appliance returns: to the GENEVE port).
const FORGED_RETURN: &str = r#"
import socket, struct, sys
def csum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16:
        s = (s & 0xffff) + (s >> 16)
    return ~s & 0xffff
src, dst = socket.inet_aton("198.18.0.100"), socket.inet_aton("198.18.3.100")
tcp = struct.pack("!HHIIBBHHH", 40404, 80, 1, 0, 5 << 4, 0x02, 65535, 0, 0)
tcp = tcp[:16] + struct.pack("!H", csum(src + dst + struct.pack("!BBH", 0, 6, len(tcp)) + tcp)) + tcp[18:]
ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), 1, 0x4000, 64, 6, 0, src, dst)
ip = ip[:10] + struct.pack("!H", csum(ip)) + ip[12:]
opts = struct.pack("!HBBQ", 0x0139, 1, 2, 0x100) + struct.pack("!HBBI", 0x0139, 3, 1, 0x5eed5eed)
geneve = struct.pack("!BBHI", len(opts) // 4, 0, 0x0800, 0) + opts
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("198.18.1.21", 50000))
for _ in range(int(sys.argv[1])):
    s.sendto(geneve + ip + tcp, (sys.argv[2], int(sys.argv[3])))
"#;

#[test]
fn lab_gateway_return_path_drops_what_no_flow_sent() {
    let lab = Lab::up(&LAB_GATEWAY_SH, &[], &[]);
    for n in 1..=2 {
        lab.wait_health(n, "HEALTHY", Duration::from_secs(20));
    }
    // Working first, so that what follows fails for its own reason.
    let of = appliances_of(&lab, &requests(&lab, SERVER_V4, 10));
    eprintln!("before tampering: {:?}", per_appliance(&of));
    // Addresses on the appliances' segment that are no appliance.
    lab.ip(
        "a1",
        &[
            "addr",
            "add",
            "198.18.1.31/24",
            "dev",
            &format!("g{}a1", lab.tag()),
        ],
    );
    lab.ip(
        "a2",
        &[
            "addr",
            "add",
            "198.18.1.32/24",
            "dev",
            &format!("g{}a2", lab.tag()),
        ],
    );

    let cases: [(&str, [&[&str]; 2], &str); 3] = [
        (
            "cookie inverted",
            [&["--tamper", "cookie"], &["--tamper", "cookie"]],
            "gateway_cookie_mismatch",
        ),
        (
            "options stripped",
            [
                &["--tamper", "strip-options"],
                &["--tamper", "strip-options"],
            ],
            "gateway_options_missing",
        ),
        (
            "answered from no appliance",
            [
                &["--reply-from", "198.18.1.31"],
                &["--reply-from", "198.18.1.32"],
            ],
            "gateway_unknown_source",
        ),
    ];
    for (what, args, reason) in cases {
        for n in 1..=2u8 {
            lab.nva(n, "start", args[n as usize - 1]);
            lab.wait_health(n as usize, "HEALTHY", Duration::from_secs(20));
        }
        let label = format!("drop {reason}: ");
        let s = lab.stats();
        let dropped = lab::counter(&s, &label);
        let sent_on = lab::counter(&s, "gateway returned ");
        let returned: usize = (1..=2).map(|n| lab.flows(n).len()).sum();
        let segments = lab.server_segments();
        let tries = 3;
        for server in [SERVER_V4, SERVER_V6] {
            for _ in 0..tries {
                let r = get(&lab, server, Duration::from_secs(1));
                assert!(r.is_err(), "{what}: a connection to {server} worked: {r:?}");
            }
        }
        std::thread::sleep(Duration::from_millis(300));
        let s = lab.stats();
        let now = lab::counter(&s, &label);
        let returned = (1..=2).map(|n| lab.flows(n).len()).sum::<usize>() - returned;
        let delivered = lab.server_segments() - segments;
        eprintln!(
            "{what}: {returned} packets returned by the appliances, {} dropped as {reason}, \
             {delivered} TCP segments reached the server",
            now - dropped
        );
        // Each connection's SYN (and its retransmissions) was returned by an
        // appliance and dropped by Spillway; none reached the server.
        assert!(
            returned >= 2 * tries,
            "{what}: the appliances returned {returned}"
        );
        assert!(now - dropped >= 2 * tries as u64, "{what}:\n{s}");
        assert_eq!(delivered, 0, "{what}: delivered to the server");
        assert_eq!(
            lab::counter(&s, "gateway returned "),
            sent_on,
            "{what}: accepted returns:\n{s}"
        );
    }

    // A well-formed return for a flow Spillway never saw, from an appliance.
    lab.nva(1, "stop", &[]);
    lab.nva(2, "start", &[]);
    let label = "drop gateway_no_flow: ";
    let dropped = lab::counter(&lab.stats(), label);
    let segments = lab.server_segments();
    let mut py = Command::new("ip");
    py.args([
        "netns",
        "exec",
        &lab.ns("a1"),
        "python3",
        "-c",
        FORGED_RETURN,
        "5",
        "198.18.1.2",
        "6081",
    ]);
    common::run_ok(&mut py);
    std::thread::sleep(Duration::from_millis(300));
    let s = lab.stats();
    let now = lab::counter(&s, label);
    let delivered = lab.server_segments() - segments;
    eprintln!(
        "forged return: {} dropped as gateway_no_flow, {delivered} delivered",
        now - dropped
    );
    assert!(now - dropped >= 5, "{s}");
    assert_eq!(delivered, 0, "forged return delivered to the server");
}

/// The lab's remote tunnel helper's counts (`geneve-tun: sent N received N
/// refused N`), once it is stopped: (sent, received, refused).
fn tunnel_counts(lab: &Lab) -> (u64, u64, u64) {
    let pid = std::fs::read_to_string(lab.dir().join("tunnel.pid")).expect("tunnel.pid");
    common::run_ok(Command::new("kill").arg(pid.trim()));
    let t0 = Instant::now();
    loop {
        let log = lab.log_of("tunnel.log");
        if log.contains("geneve-tun: sent") {
            return (
                lab::counter(&log, "sent "),
                lab::counter(&log, "received "),
                lab::counter(&log, "refused "),
            );
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "tunnel.log:\n{log}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// M31, remote gateway endpoints: the client and the server are behind a
/// router in another network that tunnels everything it forwards to the
/// node in Geneve (a userspace tunnel over TUN). Each connection, IPv4 and
/// IPv6 inside, passes one appliance both ways under the remote endpoint's
/// ID, and the node sends what the appliances return back to the remote
/// router in Geneve: the tunnel's own counts show both ways.
#[test]
fn lab_gateway_remote_endpoint_tunnels_tcp_through_one_appliance_both_ways() {
    let lab = Lab::up(&LAB_GATEWAY_SH, &["remote"], &[]);
    for n in 1..=2 {
        let t = lab.wait_health(n, "HEALTHY", Duration::from_secs(20));
        eprintln!("nva{n} healthy after {t:?}");
    }
    // Status says it is a tunnel's endpoint, not an L2 neighbour's MAC.
    lab.wait_status(
        &["(id 0x500, rule ", "remote in geneve, via next hop "],
        Duration::from_secs(10),
    );
    let mut conns = requests(&lab, SERVER_V4, 20);
    conns.extend(requests(&lab, SERVER_V6, 10));
    let of = appliances_of_endpoint(&lab, &conns, REMOTE_ENDPOINT_ID);
    let per = per_appliance(&of);
    eprintln!("connections per appliance {per:?}");
    assert!(
        per[0] > 0 && per[1] > 0,
        "both appliances get flows: {per:?}"
    );
    assert_eq!(of.len(), 30);
    let s = lab.stats();
    // Every segment (at least SYN, SYN-ACK, request and answer of each)
    // came in tunnelled, went to an appliance, and went back in the tunnel.
    let returned = lab::counter(&s, "gateway returned ");
    assert!(returned >= 4 * 30, "{s}");
    let (sent, received, refused) = tunnel_counts(&lab);
    eprintln!(
        "tunnel: sent {sent}, received {received}, refused {refused}; node returned {returned}"
    );
    assert!(
        sent >= 4 * 30 && received >= 4 * 30,
        "tunnel sent {sent}, received {received}\n{s}"
    );
    assert_eq!(
        refused, 0,
        "only the node's tunnel reaches the remote router"
    );
    assert!(
        received <= returned,
        "what the tunnel received, the node returned: {received} > {returned}\n{s}"
    );
    for reason in [
        "gateway_tunnel_malformed",
        "gateway_unknown_source",
        "gateway_tunnel_to_node",
        "martian_source",
    ] {
        assert_eq!(lab::counter(&s, &format!("drop {reason}: ")), 0, "{s}");
    }
}
