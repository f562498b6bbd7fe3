//! Real kernel TCP clients through the balancer to real HTTP servers, in a
//! namespace lab built by scripts/lab.sh (the same lab as the demo): every
//! request answered, the spread across backends within 10 % of their equal
//! weights, and replies going to the client directly from the backends (the
//! balancer transmits nothing client-ward but ARP replies). Needs root.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

mod common;

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpStream};
use std::process::Command;
use std::time::Duration;

use common::lab::{self, LAB_SH, Lab, TIMEOUT, http_get};
use testkit::packet::{self, Packet};

/// The lab of scripts/lab.sh in `mode` (gue, ipip, l2dsr), with `env`.
fn up(mode: &str, env: &[(&str, &str)]) -> Lab {
    Lab::up(&LAB_SH, &[mode], env)
}

fn through_the_balancer(mode: &str) {
    let lab = up(mode, &[]);
    let (_, up_tx_before) = lab.link_packets("lb", &format!("s{}up", lab.tag()));
    let n = 3000;
    let answers = lab.requests(n);
    let failed = lab::failed(&answers);
    assert!(
        failed.is_empty(),
        "{mode}: {} of {n} requests failed, e.g. {:?}",
        failed.len(),
        failed.first()
    );
    let per = lab::spread(&answers);
    assert_eq!(per.len(), 3, "{mode}: every backend answered: {per:?}");
    for (backend, count) in &per {
        assert!(
            (900..=1100).contains(count),
            "{mode}: {backend} got {count} of {n} (equal weights: 1000 ± 10 %): {per:?}"
        );
    }
    // DSR: the balancer's uplink sent at most a few ARP replies while
    // thousands of responses reached the client.
    let (_, up_tx_after) = lab.link_packets("lb", &format!("s{}up", lab.tag()));
    assert!(
        up_tx_after - up_tx_before < 20,
        "{mode}: the balancer sent {} frames client-ward",
        up_tx_after - up_tx_before
    );
    eprintln!("{mode}: {per:?}");
}

#[test]
fn lab_gue_real_tcp_clients_reach_real_servers() {
    through_the_balancer("gue");
}

#[test]
fn lab_ipip_real_tcp_clients_reach_real_servers() {
    through_the_balancer("ipip");
}

#[test]
fn lab_reload_under_load_is_hitless() {
    use std::io::BufRead;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    let lab = up("gue", &[]);
    let stop = Arc::new(AtomicBool::new(false));
    let reloaded = Arc::new(AtomicBool::new(false));

    // 30 long-lived connections, each echoing a line every 20 ms.
    let stop_l = stop.clone();
    let long = lab.in_client(move || {
        let vip: SocketAddrV4 = "198.18.10.10:7".parse().expect("vip");
        let mut conns = Vec::new();
        for _ in 0..30 {
            let s =
                TcpStream::connect_timeout(&vip.into(), Duration::from_secs(5)).expect("connect");
            s.set_read_timeout(Some(Duration::from_secs(5)))
                .expect("timeout");
            let r = std::io::BufReader::new(s.try_clone().expect("clone"));
            conns.push((s, r, String::new()));
        }
        let (mut rounds, mut failures) = (0u64, Vec::new());
        while !stop_l.load(Ordering::Relaxed) {
            for (i, (s, r, backend)) in conns.iter_mut().enumerate() {
                let mut line = String::new();
                let ok = s.write_all(format!("ping {rounds}\n").as_bytes()).is_ok()
                    && r.read_line(&mut line).is_ok();
                let name = line.split(' ').next().unwrap_or("").to_owned();
                if !ok || !line.ends_with(&format!("ping {rounds}\n")) {
                    failures.push(format!("connection {i} round {rounds}: {line:?}"));
                } else if backend.is_empty() {
                    *backend = name;
                } else if *backend != name {
                    failures.push(format!("connection {i} moved from {backend} to {name}"));
                }
            }
            rounds += 1;
            std::thread::sleep(Duration::from_millis(20));
        }
        let backends: Vec<String> = conns.into_iter().map(|c| c.2).collect();
        (rounds, failures, backends)
    });

    // New HTTP connections all along; remember which came after the reload.
    let (stop_n, reloaded_n) = (stop.clone(), reloaded.clone());
    let fresh = lab.in_client(move || {
        let mut seen = Vec::new();
        while !stop_n.load(Ordering::Relaxed) {
            let after = reloaded_n.load(Ordering::Acquire);
            seen.push((after, http_get(TIMEOUT)));
        }
        seen
    });

    std::thread::sleep(Duration::from_secs(2));
    // Change weights and remove backend3, then reload through the socket.
    let cfg_path = lab.dir().join("lab.toml");
    let cfg = std::fs::read_to_string(&cfg_path)
        .expect("lab.toml")
        .replace("{ address = \"198.18.2.13\" },\n", "")
        .replace(
            "{ address = \"198.18.2.11\" }",
            "{ address = \"198.18.2.11\", weight = 300 }",
        );
    assert!(!cfg.contains("198.18.2.13"));
    std::fs::write(&cfg_path, cfg).expect("write lab.toml");
    let before = lab.ctl(&["stats"]);
    lab.ctl(&["reload"]);
    reloaded.store(true, Ordering::Release);
    // An invalid configuration during the same run is rejected; traffic goes on.
    std::fs::write(lab.dir().join("bad.toml"), "[node]\nname = 1\n").expect("bad");
    let mut check = Command::new(env!("CARGO_BIN_EXE_spillway"));
    check.args(["check-config"]).arg(lab.dir().join("bad.toml"));
    let bad = common::output(&mut check);
    assert_eq!(
        bad.status.code(),
        Some(1),
        "{}",
        common::report(&check, &bad)
    );
    let good = std::fs::read_to_string(&cfg_path).expect("cfg");
    std::fs::write(&cfg_path, "[node]\nname = 1\n").expect("break config");
    let mut reload = Command::new(env!("CARGO_BIN_EXE_spillway"));
    reload.args(["reload", "--socket"]).arg(lab.socket());
    let r = common::output(&mut reload);
    assert_eq!(
        r.status.code(),
        Some(1),
        "an invalid reload is refused: {}",
        common::report(&reload, &r)
    );
    std::fs::write(&cfg_path, good).expect("restore config");
    std::thread::sleep(Duration::from_secs(5));
    stop.store(true, Ordering::Release);

    let (rounds, failures, backends) = long.join().expect("long-lived connections");
    let seen = fresh.join().expect("new connections");
    assert!(rounds >= 5, "{rounds} rounds");
    assert!(
        failures.is_empty(),
        "established connections broke: {failures:?}"
    );
    assert!(
        backends.iter().any(|b| b == "backend3"),
        "some long-lived connection was on the removed backend: {backends:?}"
    );
    let failed: Vec<_> = seen
        .iter()
        .filter(|(_, b)| b.starts_with("FAILED"))
        .collect();
    assert!(failed.is_empty(), "new connections failed: {failed:?}");
    let after: Vec<_> = seen.iter().filter(|(a, _)| *a).collect();
    assert!(
        after.len() >= 10 && seen.len() >= after.len() + 10,
        "{} before, {} after",
        seen.len() - after.len(),
        after.len()
    );
    let to_removed: Vec<usize> = seen
        .iter()
        .enumerate()
        .filter(|(_, (a, b))| *a && b == "backend3")
        .map(|(i, _)| i)
        .collect();
    assert!(
        to_removed.is_empty(),
        "a new connection reached the removed backend: requests {to_removed:?} of {} ({} before the reload); flows to it:\n{}\nstatus:\n{}",
        seen.len(),
        seen.len() - after.len(),
        lab.ctl(&["flows", "--backend", "198.18.2.13", "--limit", "50"]),
        lab.ctl(&["status"])
    );
    let after_stats = lab.ctl(&["stats"]);
    for reason in ["malformed", "no_rule", "no_backend", "encap_failed"] {
        let line = |s: &str| {
            s.lines()
                .find(|l| l.starts_with(&format!("drop {reason}:")))
                .map(str::to_owned)
        };
        assert_eq!(
            line(&before),
            line(&after_stats),
            "drop {reason} changed over the reload"
        );
        assert_eq!(line(&after_stats), Some(format!("drop {reason}: 0")));
    }
    assert!(after_stats.contains("tx dropped 0"), "{after_stats}");
}

#[test]
fn lab_l2dsr_real_tcp_clients_reach_real_servers() {
    through_the_balancer("l2dsr");
}

/// docs/requirements.md §1 exception path: what the data plane does not own (here: traffic
/// for the balancer's own address, ARP replies to the host) reaches the
/// kernel through the TAP, and what the kernel sends leaves by the uplink.
#[test]
fn lab_the_host_stack_is_reachable_through_the_exception_tap() {
    let lab = up("ipip", &[]);
    // Client -> the balancer's own address: answered by the host's kernel,
    // once per request (the data plane hands it over exactly once).
    let (p, ran) = lab.ping("c", "198.18.1.2");
    assert!(
        p.contains("5 packets transmitted, 5 received") && !p.contains("duplicates"),
        "{ran}"
    );
    // The host's own connections go out through the uplink and come back.
    let (p, ran) = lab.ping("lb", "198.18.0.100");
    assert!(p.contains("5 packets transmitted, 5 received"), "{ran}");
    // A TCP service of the host (BGP/SSH stand-in) on the uplink address.
    let echo = lab
        .in_client(|| {
            let addr: SocketAddrV4 = "198.18.1.2:179".parse().expect("addr");
            let mut s = TcpStream::connect_timeout(&addr.into(), Duration::from_secs(5))?;
            s.set_read_timeout(Some(Duration::from_secs(5)))?;
            s.write_all(b"hello\n")?;
            let mut buf = [0u8; 64];
            let n = s.read(&mut buf)?;
            Ok::<_, std::io::Error>(String::from_utf8_lossy(&buf[..n]).into_owned())
        })
        .join()
        .expect("client thread");
    assert_eq!(
        echo.expect("connect to the host's port 179"),
        "host hello\n"
    );
    // And VIP traffic still goes to the backends meanwhile.
    let answers = lab.requests(30);
    assert!(
        answers.iter().all(|a| a.starts_with("backend")),
        "{answers:?}"
    );
    let s = lab.ctl(&["stats"]);
    let to_host = lab::counter(&s, "to host ");
    assert!(to_host >= 10, "{s}");
    assert!(s.contains("(dropped without exception port 0)"), "{s}");
}

/// M16, M24, M26: HTTP health checks (probes through the exception
/// TAP) decide where new connections go. Region "lab" (backend1, backend2)
/// is preferred over region "far" (backend3); when lab's servers die, new
/// connections fail over to far within interval × unhealthy_threshold + 1 s
/// (1 s × 2 + 1 s here), established connections stay where they are
/// (TCP persistence, M11), and when the servers return so do new
/// connections.
#[test]
fn lab_failover_between_regions_follows_health_checks() {
    use std::io::BufRead;
    let lab = up("gue", &[("LAB_REGIONS", "2")]);
    let status = || lab.ctl(&["status"]);
    for region in [
        "region lab: Healthy, 2 endpoints (2 healthy",
        "region far: Healthy, 1 endpoints (1 healthy",
    ] {
        lab.wait_status(&[region], Duration::from_secs(20));
    }
    let before = lab.requests(60);
    assert!(
        before.iter().all(|b| b == "backend1" || b == "backend2"),
        "the nearer region takes every new connection: {before:?}"
    );
    // A long-lived connection on region lab (the echo servers stay up).
    let echo = lab
        .in_client(|| {
            let vip: SocketAddrV4 = "198.18.10.10:7".parse().expect("vip");
            let mut s =
                TcpStream::connect_timeout(&vip.into(), Duration::from_secs(5)).expect("connect");
            s.set_read_timeout(Some(Duration::from_secs(5)))
                .expect("timeout");
            s.write_all(b"one\n").expect("write");
            let mut r = std::io::BufReader::new(s.try_clone().expect("clone"));
            let mut line = String::new();
            r.read_line(&mut line).expect("read");
            (s, r, line)
        })
        .join()
        .expect("echo");
    let (mut echo_s, mut echo_r, first) = echo;
    let backend_of_echo = first.split(' ').next().unwrap_or("").to_owned();
    assert!(
        backend_of_echo == "backend1" || backend_of_echo == "backend2",
        "{first}"
    );

    // Region lab's web servers die.
    for i in 1..=2 {
        let pid = std::fs::read_to_string(lab.dir().join(format!("http{i}.pid"))).expect("pid");
        common::run_ok(Command::new("kill").arg(pid.trim()));
    }
    let killed = std::time::Instant::now();
    let failed_over = loop {
        let answers = lab.requests(5);
        if answers.iter().all(|b| b == "backend3") {
            break killed.elapsed();
        }
        assert!(
            killed.elapsed() < Duration::from_secs(20),
            "no failover: {answers:?}\n{}",
            status()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    eprintln!("failover to region far after {failed_over:?}");
    assert!(
        failed_over <= Duration::from_secs(3) + Duration::from_millis(500),
        "failover took {failed_over:?} (interval 1 s x unhealthy threshold 2 + 1 s)"
    );
    let after = lab.requests(40);
    assert!(after.iter().all(|b| b == "backend3"), "{after:?}");
    assert!(status().contains("region lab: Unhealthy"), "{}", status());
    // Transitions are counted in the metrics (M18), served in the balancer's
    // namespace on [metrics].listen's default 127.0.0.1:9469. (Region lab
    // fails over as soon as one of its two endpoints is down, 50 % < 60 %;
    // the other one's verdict may come a probe later.)
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let mut curl = Command::new("ip");
        curl.args([
            "netns",
            "exec",
            &lab.ns("lb"),
            "curl",
            "-s",
            "-S",
            "--max-time",
            "5",
            "http://127.0.0.1:9469/metrics",
        ]);
        let out = common::output(&mut curl);
        let metrics = String::from_utf8_lossy(&out.stdout).into_owned();
        let counted = ["198.18.2.11:80", "198.18.2.12:80"].iter().all(|b| {
            metrics.contains(&format!(
                "spillway_health_transitions_total{{service=\"web\",endpoint=\"{b}\",to=\"unhealthy\"}} 1"
            )) && metrics.contains(&format!(
                "spillway_endpoint_healthy{{service=\"web\",endpoint=\"{b}\"}} 0"
            ))
        });
        if counted {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{}",
            common::report(&curl, &out)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // The established connection stays on its (now unhealthy) backend.
    echo_s.write_all(b"two\n").expect("write");
    let mut line = String::new();
    echo_r
        .read_line(&mut line)
        .expect("the established connection still answers");
    assert_eq!(line, format!("{backend_of_echo} two\n"));

    // The servers come back: so do new connections.
    let ns_b = |i: u32| lab.ns(&format!("b{i}"));
    let mut servers = Vec::new();
    for i in 1..=2u32 {
        let mut server = Command::new("ip");
        server
            .args([
                "netns",
                "exec",
                &ns_b(i),
                "python3",
                "-m",
                "http.server",
                "80",
                "--bind",
                "0.0.0.0",
                "--directory",
            ])
            .arg(lab.dir().join(format!("www{i}")))
            .stdout(std::process::Stdio::null())
            .stderr(
                std::fs::File::create(lab.dir().join(format!("http{i}.restart.log")))
                    .expect("log file"),
            );
        let child = server
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run `{}`: {e}", common::command_line(&server)));
        servers.push(child);
    }
    let restarted = std::time::Instant::now();
    loop {
        let answers = lab.requests(5);
        if answers.iter().all(|b| b == "backend1" || b == "backend2") {
            break;
        }
        assert!(
            restarted.elapsed() < Duration::from_secs(20),
            "no return: {answers:?}\n{}\nrestarted servers' stderr: {:?}",
            status(),
            (1..=2)
                .map(|i| std::fs::read_to_string(lab.dir().join(format!("http{i}.restart.log"))))
                .collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("back to region lab after {:?}", restarted.elapsed());
    for mut s in servers {
        let _ = s.kill();
        let _ = s.wait();
    }
}

#[test]
fn lab_probes_through_the_vip_find_a_backend_that_lacks_it() {
    // Service web is checked through its VIP (target = "vip", M52); web-own
    // checks the same backends at their own addresses.
    let lab = up("gue", &[("LAB_VIP_CHECK", "1")]);
    let line = |svc: &str, b: u32, via: bool| {
        let via = if via { " via 198.18.10.10" } else { "" };
        format!("health {svc}/198.18.2.1{b}:80{via}: ")
    };
    for b in 1..=3 {
        lab.wait_status(&[&line("web", b, true), "HEALTHY"], Duration::from_secs(20));
    }
    let before = lab.requests(60);
    assert_eq!(lab::spread(&before).len(), 3, "{before:?}");

    // Backend 2 loses the VIP from its loopback: its kernel drops what its
    // decapsulator hands it, while its HTTP server still answers at
    // 198.18.2.12.
    lab.ip("b2", &["addr", "del", "198.18.10.10/32", "dev", "lo"]);
    let removed = std::time::Instant::now();
    let status = lab.wait_status(
        &[&line("web", 2, true), "UNHEALTHY"],
        Duration::from_secs(20),
    );
    eprintln!(
        "backend2 unhealthy through the VIP after {:?}",
        removed.elapsed()
    );
    for (svc, via) in [("web", true), ("web-own", false)] {
        for b in [1, 3] {
            assert!(
                status
                    .lines()
                    .any(|l| l.contains(&line(svc, b, via)) && l.contains("HEALTHY")),
                "{status}"
            );
        }
    }
    // The check at its own address still calls it healthy.
    let own = status
        .lines()
        .find(|l| l.contains(&line("web-own", 2, false)))
        .unwrap_or_else(|| panic!("{status}"));
    assert!(own.contains(": HEALTHY"), "{own}");
    // New connections stop going to it.
    let after = lab.requests(60);
    assert!(lab::failed(&after).is_empty(), "{after:?}");
    assert!(
        after.iter().all(|b| b == "backend1" || b == "backend3"),
        "{after:?}"
    );
    let stats = lab.ctl(&["stats"]);
    let probes = stats
        .split("vip probes ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or(0);
    assert!(probes > 0, "{stats}");

    // The VIP comes back: probes (still delivered while it was unhealthy)
    // find it, and it takes new connections again.
    lab.ip("b2", &["addr", "add", "198.18.10.10/32", "dev", "lo"]);
    lab.wait_status(
        &[&line("web", 2, true), ": HEALTHY"],
        Duration::from_secs(20),
    );
    let back = lab.requests(60);
    assert!(back.iter().any(|b| b == "backend2"), "{back:?}");
    assert!(
        lab.log()
            .contains("health: web/198.18.2.12:80 via 198.18.10.10 HEALTHY -> UNHEALTHY"),
        "{}",
        lab.log()
    );
}

/// A UDP packet from `src`:5555 to `dst`:`port` carrying `data` (UDP
/// checksum zero), inside an Ethernet header, as `wire::encap::encapsulate`
/// takes it.
fn udp_frame(src: Ipv4Addr, dst: Ipv4Addr, port: u16, data: &[u8]) -> Vec<u8> {
    Packet::udp(src.into(), dst.into(), 5555, port)
        .payload(data)
        .udp_checksum(false)
        .macs([2, 0, 0, 0, 0, 2], [2, 0, 0, 0, 0, 1])
        .frame()
}

/// `inner` (a frame from [`udp_frame`]) in GUE from `outer_src` to backend1,
/// as an IPv4 packet: what the balancer sends, or someone posing as it.
fn gue_to_backend1(outer_src: Ipv4Addr, inner: &[u8]) -> Vec<u8> {
    let mut outer = packet::outer(outer_src.into(), Ipv4Addr::new(198, 18, 2, 11).into());
    outer.flow_hash = 7;
    packet::encap(inner, &outer, &wire::encap::Tunnel::Gue { port: 6080 })[14..].to_vec()
}

/// M50: a backend's decapsulator takes tunnels only from the balancer
/// and only to the VIP's ports. From the router, on the backends' segment,
/// come a GUE packet from the router's own address (a stranger), one posing
/// as the balancer but for the backend's own address (reaching its other
/// services), one posing as the balancer for a port of the VIP its `--vip`
/// does not list (issue 38 item 13: a service the balancer does not forward
/// to), and one posing as the balancer for the VIP's listed port (the
/// control: the injection itself works). Only the last reaches the
/// backend's server; the other three are counted by reason, and real
/// clients are served through the balancer all along.
#[test]
fn lab_decap_takes_tunnels_only_from_the_balancer_to_the_vip() {
    // The decapsulators list the rules' TCP ports and UDP 7777, where the
    // test listens (no rule forwards it: only the forged packets use it).
    let lab = up(
        "gue",
        &[("LAB_DECAP_VIP", "198.18.10.10:tcp/80,7,udp/7777")],
    );
    let server = lab
        .in_ns("b1", || {
            let s = std::net::UdpSocket::bind("0.0.0.0:7777").expect("bind");
            s.set_read_timeout(Some(Duration::from_millis(100)))
                .expect("timeout");
            // Another port, which the decapsulator does not list.
            let t = std::net::UdpSocket::bind("0.0.0.0:7778").expect("bind");
            t.set_nonblocking(true).expect("nonblocking");
            (s, t)
        })
        .join()
        .expect("server");
    let (server, unlisted) = server;
    let client = Ipv4Addr::new(198, 18, 0, 100);
    let vip = Ipv4Addr::new(198, 18, 10, 10);
    let balancer = Ipv4Addr::new(198, 18, 2, 2);
    let router = Ipv4Addr::new(198, 18, 2, 1);
    let backend1 = Ipv4Addr::new(198, 18, 2, 11);
    let packets = [
        gue_to_backend1(router, &udp_frame(client, vip, 7777, b"stranger")),
        gue_to_backend1(balancer, &udp_frame(client, backend1, 7777, b"not-a-vip")),
        gue_to_backend1(balancer, &udp_frame(client, vip, 7778, b"unlisted-port")),
        gue_to_backend1(balancer, &udp_frame(client, vip, 7777, b"legit")),
    ];
    // A raw socket in the router's namespace sends them as they are (the
    // IPv4 header included), in this order, to the decapsulator's one GUE
    // socket: once "legit" is in, the other three were dealt with.
    let hex: Vec<String> = packets
        .iter()
        .map(|p| p.iter().map(|b| format!("{b:02x}")).collect())
        .collect();
    let out = Command::new("ip")
        .args(["netns", "exec", &lab.ns("r"), "python3", "-c"])
        .arg(
            "import socket, sys\n\
             s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)\n\
             for h in sys.argv[1:]:\n    s.sendto(bytes.fromhex(h), ('198.18.2.11', 0))\n",
        )
        .args(&hex)
        .output()
        .expect("inject");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut got = Vec::new();
    let mut buf = [0u8; 64];
    let mut settle = None;
    let start = std::time::Instant::now();
    while settle.is_none_or(|t: std::time::Instant| t.elapsed() < Duration::from_millis(500))
        && start.elapsed() < Duration::from_secs(10)
    {
        for s in [&server, &unlisted] {
            if let Ok(n) = s.recv(&mut buf) {
                got.push(String::from_utf8_lossy(&buf[..n]).into_owned());
            }
        }
        if settle.is_none() && got.iter().any(|g| g == "legit") {
            settle = Some(std::time::Instant::now());
        }
    }
    assert_eq!(
        got,
        ["legit"],
        "only the packet for the VIP from the balancer"
    );

    // Real clients through the balancer, meanwhile and after.
    let answers = lab.requests(30);
    assert!(
        answers.iter().all(|a| a.starts_with("backend")),
        "{answers:?}"
    );

    // Backend1's decapsulator counts the three at exit.
    let log = lab.dir().join("decap1.log");
    let pid = std::fs::read_to_string(lab.dir().join("decap1.pid")).expect("pid");
    let _ = Command::new("kill").args(["-TERM", pid.trim()]).status();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let exit = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if let Some(l) = text
            .lines()
            .find(|l| l.contains("spillway-decap: exiting: "))
        {
            break l.to_owned();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no exit line:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    eprintln!("{exit}");
    for counter in [
        "dropped 3 (",
        "source_not_allowed 1,",
        "inner_dst_not_owned 1,",
        "port_not_allowed 1,",
    ] {
        assert!(exit.contains(counter), "{counter:?} in {exit}");
    }
}
