#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly
//! The zone health service against a real authoritative server: Knot DNS
//! (`knotd`) on loopback, with a TSIG key that allows dynamic updates. The
//! zones' "VIPs" are loopback addresses with TCP listeners: closing one is
//! a zone failing. Runs as root (ICMP probes use a raw socket).

use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use dnsupdate::client::ClientError;
use dnsupdate::{Client, Key, Name, Op, Prereq, Rcode, Rdata, rtype};

const SECRET: &str = "c3BpbGx3YXktem9uZS1oZWFsdGgtdGVzdC1rZXkhIQ==";
const WRONG: &str = "d3Jvbmctd3Jvbmctd3Jvbmctd3Jvbmctd3Jvbmc=";

/// A knotd serving `lab.test.` from a directory of its own, stopped and
/// removed when dropped.
struct Knot {
    child: Child,
    dir: PathBuf,
    addr: SocketAddr,
}

impl Drop for Knot {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A free TCP port on 127.0.0.1 (Knot takes UDP and TCP on it).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("spillway-zh-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

impl Knot {
    fn start(tag: &str) -> Knot {
        let dir = scratch(tag);
        let port = free_port();
        let d = dir.display();
        std::fs::write(
            dir.join("knot.conf"),
            format!(
                "server:\n    rundir: {d}\n    listen: 127.0.0.1@{port}\n\
                 database:\n    storage: {d}\n\
                 key:\n  - id: spillway-zones\n    algorithm: hmac-sha256\n    secret: {SECRET}\n\
                 acl:\n  - id: update\n    key: spillway-zones\n    action: update\n\
                 zone:\n  - domain: lab.test\n    storage: {d}\n    file: lab.test.zone\n    acl: update\n    zonefile-sync: -1\n    journal-content: changes\n\
                 log:\n  - target: {d}/knot.log\n    any: info\n"
            ),
        )
        .unwrap();
        std::fs::write(
            dir.join("lab.test.zone"),
            "$ORIGIN lab.test.\n$TTL 300\n@ SOA ns hostmaster 1 3600 600 86400 300\n@ NS ns\nns A 127.0.0.1\n",
        )
        .unwrap();
        let child = Command::new("knotd")
            .arg("-c")
            .arg(dir.join("knot.conf"))
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(dir.join("knotd.err")).unwrap())
            .spawn()
            .expect("knotd (Debian package knot; scripts/setup.sh installs it)");
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let k = Knot { child, dir, addr };
        wait_for("knotd to answer", Duration::from_secs(20), || {
            k.client(SECRET)
                .rrset(&name("ns.lab.test"), rtype::A)
                .is_ok()
        });
        k
    }

    fn client(&self, secret: &str) -> Client {
        Client::new(
            self.addr,
            Key::new("spillway-zones", "hmac-sha256", secret).unwrap(),
            Duration::from_secs(2),
        )
    }

    /// The name's A set.
    fn published(&self) -> Vec<IpAddr> {
        let mut v: Vec<IpAddr> = self
            .client(SECRET)
            .rrset(&name("www.lab.test"), rtype::A)
            .unwrap()
            .into_iter()
            .filter_map(|r| match r.rdata {
                Rdata::A(a) => Some(IpAddr::V4(a)),
                _ => None,
            })
            .collect();
        v.sort();
        v
    }
}

fn name(s: &str) -> Name {
    Name::parse(s).unwrap()
}

fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !f() {
        assert!(
            start.elapsed() < limit,
            "gave up waiting for {what} after {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    start.elapsed()
}

#[test]
fn updates_reach_a_real_server_and_a_wrong_key_is_refused() {
    let knot = Knot::start("client");
    let c = knot.client(SECRET);
    let (www, removed) = (name("www.lab.test"), name("_spillway-removed.www.lab.test"));
    let a = |x: u8| Rdata::A(Ipv4Addr::new(198, 18, 10, x));
    let add = |x| Op::Add {
        name: www.clone(),
        ttl: 60,
        rdata: a(x),
    };
    c.update(&name("lab.test"), &[], &[add(20), add(21)])
        .unwrap();
    let got: Vec<(Rdata, u32)> = c
        .rrset(&www, rtype::A)
        .unwrap()
        .into_iter()
        .map(|r| (r.rdata, r.ttl))
        .collect();
    assert_eq!(got.len(), 2);
    assert!(
        got.contains(&(a(20), 60)) && got.contains(&(a(21), 60)),
        "{got:?}"
    );

    // IPv6 VIPs are AAAA records.
    let v6 = Rdata::Aaaa("2001:db8::20".parse().unwrap());
    c.update(
        &name("lab.test"),
        &[],
        &[Op::Add {
            name: www.clone(),
            ttl: 30,
            rdata: v6.clone(),
        }],
    )
    .unwrap();
    let got: Vec<(Rdata, u32)> = c
        .rrset(&www, rtype::AAAA)
        .unwrap()
        .into_iter()
        .map(|r| (r.rdata, r.ttl))
        .collect();
    assert_eq!(got, [(v6.clone(), 30)]);
    c.update(
        &name("lab.test"),
        &[],
        &[Op::Delete {
            name: www.clone(),
            rdata: v6,
        }],
    )
    .unwrap();
    assert!(c.rrset(&www, rtype::AAAA).unwrap().is_empty());

    // The guard: an update that expects a removal the server does not hold
    // changes nothing.
    let guard = Prereq::RrsetIs {
        name: removed.clone(),
        rdatas: vec![Rdata::txt("a")],
    };
    let del = Op::Delete {
        name: www.clone(),
        rdata: a(20),
    };
    match c.update(&name("lab.test"), &[guard], std::slice::from_ref(&del)) {
        Err(ClientError::Changed(Rcode::NXRRSET)) => {}
        other => panic!("expected NXRRSET, got {other:?}"),
    }
    assert_eq!(knot.published().len(), 2);
    let absent = Prereq::RrsetAbsent {
        name: removed,
        rtype: rtype::TXT,
    };
    c.update(&name("lab.test"), &[absent], &[del]).unwrap();
    assert_eq!(knot.published(), [IpAddr::from([198, 18, 10, 21])]);

    // A wrong secret, an unknown key: refused by the server and said so;
    // nothing changes.
    match knot
        .client(WRONG)
        .update(&name("lab.test"), &[], &[add(99)])
    {
        Err(ClientError::KeyRefused(r)) => assert_eq!(r, Rcode::BADSIG),
        other => panic!("expected BADSIG, got {other:?}"),
    }
    let stranger = Client::new(
        knot.addr,
        Key::new("nobody", "hmac-sha256", SECRET).unwrap(),
        Duration::from_secs(2),
    );
    match stranger.update(&name("lab.test"), &[], &[add(99)]) {
        Err(ClientError::KeyRefused(r)) => assert_eq!(r, Rcode::BADKEY),
        other => panic!("expected BADKEY, got {other:?}"),
    }
    // A name outside the zone.
    let out = Op::Add {
        name: name("www.other.test"),
        ttl: 60,
        rdata: a(1),
    };
    assert!(matches!(
        c.update(&name("lab.test"), &[], &[out]),
        Err(ClientError::Rcode(Rcode::NOTZONE))
    ));
    assert_eq!(knot.published(), [IpAddr::from([198, 18, 10, 21])]);

    // The server gone: an I/O error, transient.
    let addr = knot.addr;
    drop(knot);
    let e = Client::new(
        addr,
        Key::new("spillway-zones", "hmac-sha256", SECRET).unwrap(),
        Duration::from_millis(500),
    )
    .rrset(&www, rtype::A)
    .unwrap_err();
    assert!(e.is_transient(), "{e}");
}

/// A zone's VIP: a loopback address with (while it is up) a TCP listener.
struct Vip {
    addr: SocketAddr,
    listener: Option<TcpListener>,
}

impl Vip {
    fn new(last: u8) -> Vip {
        let l = TcpListener::bind((Ipv4Addr::new(127, 0, 0, last), 0)).unwrap();
        Vip {
            addr: l.local_addr().unwrap(),
            listener: Some(l),
        }
    }
    fn down(&mut self) {
        self.listener = None;
    }
    fn up(&mut self) {
        self.listener = Some(TcpListener::bind(self.addr).unwrap());
    }
    fn ip(&self) -> IpAddr {
        self.addr.ip()
    }
}

fn service_config(knot: &Knot, dir: &Path, secret: &str, sock: &str, a: &Vip, b: &Vip) -> PathBuf {
    let path = dir.join(format!("{sock}.toml"));
    std::fs::write(
        &path,
        format!(
            "[dns]\nserver = \"{}\"\nzone = \"lab.test\"\nname = \"www.lab.test\"\nttl = 60\ntimeout = \"1s\"\n\
             [dns.tsig]\nname = \"spillway-zones\"\nsecret = \"{secret}\"\n\
             [probe]\ninterval = \"200ms\"\ntimeout = \"150ms\"\nunhealthy_threshold = 3\nhealthy_threshold = 2\nicmp = true\nkind = \"tcp\"\n\
             [control]\nsocket = \"{}\"\n\
             [metrics]\nlisten = \"127.0.0.1:{}\"\n\
             [[zones]]\nname = \"a\"\nvips = [\"{}\"]\nport = {}\n\
             [[zones]]\nname = \"b\"\nvips = [\"{}\"]\nport = {}\n",
            knot.addr,
            dir.join(format!("{sock}.sock")).display(),
            free_port(),
            a.ip(),
            a.addr.port(),
            b.ip(),
            b.addr.port()
        ),
    )
    .unwrap();
    path
}

/// Starts a service (it runs until the test process ends); its socket.
fn start_service(config: &Path) -> PathBuf {
    let settings = zonehealth::Settings::load(config).unwrap();
    let sock = settings.socket.clone();
    std::thread::spawn(move || zonehealth::run(settings));
    wait_for("the control socket", Duration::from_secs(10), || {
        sock.exists()
    });
    sock
}

fn ask(sock: &Path, command: &str) -> (bool, String) {
    admin::unix::request(sock, command, std::time::Duration::from_secs(35)).unwrap()
}

fn status(sock: &Path) -> serde_json::Value {
    let (ok, text) = ask(sock, "status json");
    assert!(ok, "{text}");
    serde_json::from_str(&text).unwrap()
}

#[test]
fn the_service_fails_over_fails_open_and_keeps_manual_removals() {
    let knot = Knot::start("service");
    let dir = knot.dir.clone();
    let (mut a, mut b) = (Vip::new(21), Vip::new(22));
    let sock = start_service(&service_config(&knot, &dir, SECRET, "one", &a, &b));
    let (ia, ib) = (a.ip(), b.ip());
    let limit = Duration::from_secs(20);

    let t = wait_for("both zones published", limit, || {
        knot.published() == [ia, ib]
    });
    println!("both zones published {:.1} s after start", t.as_secs_f64());
    // The scrapers' endpoint.
    let settings = zonehealth::Settings::load(&dir.join("one.toml")).unwrap();
    let http = settings.metrics_listen.unwrap();
    let metrics = http_get(http, "/metrics");
    assert!(metrics.starts_with("HTTP/1.1 200"), "{metrics}");
    for line in [
        "spillway_zone_health_zone_state{zone=\"a\",state=\"healthy\"} 1",
        "spillway_zone_health_published_records 2",
        "spillway_zone_health_updates_total 1",
        "# EOF",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in\n{metrics}");
    }
    assert!(http_get(http, "/status").contains("\"fail_open\":false"));
    assert!(http_get(http, "/").starts_with("HTTP/1.1 404"));

    b.down();
    let t = wait_for("b withdrawn", limit, || knot.published() == [ia]);
    println!(
        "zone b withdrawn {:.2} s after it failed (interval 0.2 s x 3 + update)",
        t.as_secs_f64()
    );

    a.down();
    let t = wait_for("fail-open", limit, || knot.published() == [ia, ib]);
    println!(
        "fail-open {:.2} s after the last zone failed",
        t.as_secs_f64()
    );
    assert_eq!(status(&sock)["fail_open"], true);

    a.up();
    wait_for("a alone once it recovers", limit, || {
        knot.published() == [ia]
    });
    b.up();
    wait_for("both again", limit, || knot.published() == [ia, ib]);
    assert_eq!(status(&sock)["fail_open"], false);

    // Manual removal of a healthy zone: effective at once, recorded in the
    // DNS zone, never undone by fail-open.
    let start = Instant::now();
    let (ok, text) = ask(&sock, "remove a");
    assert!(ok, "{text}");
    assert_eq!(knot.published(), [ib]);
    println!(
        "zone a removed by hand: withdrawn {:.2} s after the command",
        start.elapsed().as_secs_f64()
    );
    let (ok, text) = ask(&sock, "remove b");
    assert!(
        !ok && text.contains("--force"),
        "the last zone stays unless forced: {text}"
    );
    b.down();
    wait_for("fail-open without the removed zone", limit, || {
        status(&sock)["fail_open"] == true
    });
    assert_eq!(
        knot.published(),
        [ib],
        "fail-open never re-adds a removed zone"
    );
    let s = status(&sock);
    assert_eq!(s["zones"][0]["state"], "removed");

    // Another instance (a restart, or a redundant service) sees the removal.
    let sock2 = start_service(&service_config(&knot, &dir, SECRET, "two", &a, &b));
    wait_for("the second service to read the removal", limit, || {
        status(&sock2)["removed"][0] == "a"
    });
    assert_eq!(knot.published(), [ib]);

    let (ok, text) = ask(&sock, "restore a");
    assert!(ok, "{text}");
    wait_for("a back after restore", limit, || knot.published() == [ia]);
    // The other instance sees it at its next read of the server.
    wait_for("the second service to read the restore", limit, || {
        status(&sock2)["removed"].as_array().map(Vec::len) == Some(0)
    });

    // Bad commands answer errors; the service carries on.
    for bad in ["remove nosuch", "restore", "frobnicate"] {
        let (ok, text) = ask(&sock, bad);
        assert!(!ok, "{bad}: {text}");
    }
    // An endless line is cut off (answered, or the connection reset while
    // the client still writes).
    if let Ok((ok, text)) =
        admin::unix::request(&sock, &"x".repeat(5000), std::time::Duration::from_secs(35))
    {
        assert!(!ok && text.contains("too long"), "{text}");
    }
    assert_eq!(status(&sock)["removed"].as_array().map(Vec::len), Some(0));

    // A service with a wrong key: refused by the server and reported;
    // nothing changes and it keeps running.
    let sock3 = start_service(&service_config(&knot, &dir, WRONG, "wrong", &a, &b));
    wait_for("the refusal to be reported", limit, || {
        status(&sock3)["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("BADSIG"))
    });
    let s = status(&sock3);
    println!("with a wrong key: {}", s["last_error"]);
    assert_eq!(
        (s["updates"].as_u64(), s["last_sync_ok"].as_bool()),
        (Some(0), Some(false))
    );
    assert_eq!(knot.published(), [ia]);
}

/// `GET path` on `addr`: the whole answer.
fn http_get(addr: SocketAddr, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

#[test]
fn ping_is_answered_on_loopback() {
    let rtt = zonehealth::probe::ping(IpAddr::from([127, 0, 0, 1]), Duration::from_secs(2))
        .expect("needs root (raw ICMP)");
    println!("ICMP echo from 127.0.0.1 in {rtt:?}");
}
