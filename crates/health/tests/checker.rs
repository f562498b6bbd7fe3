//! The checker against real servers on 127.0.0.1 ephemeral ports. Timings
//! are short (50–150 ms intervals); assertions are about outcomes and
//! tolerant counts, never about speed.

// Tests drive the probers against real servers: sockets and clocks are
// theirs (clippy.toml keeps them out of the crate's decisions only).
#![allow(clippy::disallowed_types, clippy::disallowed_methods)]
#![allow(clippy::cast_possible_truncation)] // test values are small
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

mod common;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use common::*;
use config::compiled::EndpointId;
use health::{Check, EndpointStatus, HealthChecker, HealthSnapshot, State, WEIGHT_HEADER};

fn ep(s: &HealthSnapshot, id: u32) -> &EndpointStatus {
    s.get(EndpointId(id))
        .unwrap_or_else(|| panic!("endpoint {id} in {s:#?}"))
}

fn is(id: u32, state: State) -> impl Fn(&HealthSnapshot) -> bool {
    move |s| s.get(EndpointId(id)).is_some_and(|e| e.state == state)
}

#[test]
fn tcp_listener_up_down_up() {
    let rt = runtime();
    let server = serve(&rt, |_| Reply::Close);
    let addr = server.addr;
    let check = fast(Check::tcp(), 100, 2, 2);
    let checker = HealthChecker::start(vec![target(0, "svc", addr, &check)]).unwrap();

    let s = wait_for(&checker, "healthy", is(0, State::Healthy));
    assert_eq!(ep(&s, 0).last_reason, "connected");

    server.stop(&rt);
    let s = wait_for(&checker, "unhealthy, refused", |s| {
        ep(s, 0).state == State::Unhealthy && ep(s, 0).last_reason == "connect refused"
    });
    assert_eq!(ep(&s, 0).counters.to_unhealthy, 1);

    let _server = serve_on(&rt, addr, |_| Reply::Close);
    let s = wait_for(&checker, "healthy again", is(0, State::Healthy));
    let c = ep(&s, 0).counters;
    assert!(c.to_healthy >= 2 && c.to_unhealthy >= 1, "{c:?}");
    assert!(c.probes_ok >= 4 && c.probes_failed >= 2, "{c:?}");
    checker.stop().unwrap();
}

#[test]
fn http_status_classes() {
    let rt = runtime();
    let cases = [
        (ok(), State::Healthy, "HTTP 200"),
        (status(302), State::Healthy, "HTTP 302"),
        (status(404), State::Unhealthy, "HTTP 404"),
        (status(503), State::Unhealthy, "HTTP 503"),
        (
            Reply::Drop,
            State::Unhealthy,
            "connection closed before the response headers",
        ),
    ];
    let check = fast(Check::http("/healthz"), 50, 1, 1);
    let mut servers = Vec::new();
    let mut targets = Vec::new();
    for (i, (reply, _, _)) in cases.iter().enumerate() {
        let reply = reply.clone();
        let s = serve(&rt, move |_| reply.clone());
        targets.push(target(i as u32, "web", s.addr, &check));
        servers.push(s);
    }
    let checker = HealthChecker::start(targets).unwrap();
    let s = wait_for(&checker, "each case's state and reason", |s| {
        cases.iter().enumerate().all(|(i, (_, state, reason))| {
            let e = ep(s, i as u32);
            (e.state, e.last_reason.as_str()) == (*state, *reason)
        })
    });
    for (i, (_, state, reason)) in cases.iter().enumerate() {
        let e = ep(&s, i as u32);
        assert_eq!(
            (e.state, e.last_reason.as_str()),
            (*state, *reason),
            "case {i}"
        );
        assert!(e.last_latency.is_some());
    }
}

#[test]
fn slow_endpoints_time_out_without_delaying_others() {
    let rt = runtime();
    let check = fast(Check::http("/"), 100, 1, 3);
    let fast_server = serve(&rt, |_| ok());
    let mut targets = vec![target(0, "web", fast_server.addr, &check)];
    let mut slow = Vec::new();
    // One answers after the timeout, thirty never answer.
    let late = serve(&rt, |_| Reply::Delayed(Duration::from_millis(400), 200));
    targets.push(target(1, "web", late.addr, &check));
    slow.push(late);
    for i in 0..30 {
        let s = serve(&rt, |_| Reply::Hang);
        targets.push(target(2 + i, "web", s.addr, &check));
        slow.push(s);
    }
    let checker = HealthChecker::start(targets).unwrap();
    let s = wait_for(&checker, "slow ones unhealthy, fast healthy", |s| {
        s.endpoints.iter().all(|e| {
            (e.endpoint == EndpointId(0)) == (e.state == State::Healthy)
                && e.state != State::Unknown
        })
    });
    for e in &s.endpoints[1..] {
        assert_eq!(e.last_reason, "timeout after 100ms");
    }

    let before = checker.snapshot();
    std::thread::sleep(Duration::from_secs(2));
    let after = checker.snapshot();
    // 2 s at 100 ms is 20 probes; a blocked prober would make ~0.
    let fast_probes = ep(&after, 0).counters.probes() - ep(&before, 0).counters.probes();
    assert!(
        fast_probes >= 10,
        "fast endpoint probed {fast_probes} times in 2 s"
    );
    assert_eq!(ep(&after, 0).state, State::Healthy);
    // The hanging ones are probed concurrently, each at its own cadence
    // (every probe lasts the whole timeout).
    for id in 1..32 {
        let n = ep(&after, id).counters.probes() - ep(&before, id).counters.probes();
        assert!(n >= 5, "slow endpoint {id} probed {n} times in 2 s");
    }
}

#[test]
fn flapping_endpoint_respects_thresholds() {
    let rt = runtime();
    // Probe n: alternate for 10 probes, then 3 passes, 3 failures, passes.
    let server = serve(&rt, |n| match n {
        0..=9 if n % 2 == 0 => ok(),
        0..=9 => status(503),
        10..=12 => ok(),
        13..=15 => status(500),
        _ => ok(),
    });
    let check = fast(Check::http("/"), 150, 3, 3);
    let checker = HealthChecker::start(vec![target(0, "web", server.addr, &check)]).unwrap();

    let s = wait_for(&checker, "8 probes", |s| ep(s, 0).counters.probes() >= 8);
    let e = ep(&s, 0);
    assert_eq!(e.state, State::Unknown, "{e:?}");
    assert_eq!(e.counters.transitions(), 0, "{e:?}");
    assert!(
        e.counters.probes_ok >= 4 && e.counters.probes_failed >= 4,
        "{e:?}"
    );

    let s = wait_for(&checker, "first healthy", |s| {
        ep(s, 0).counters.to_healthy >= 1
    });
    assert!(ep(&s, 0).counters.probes() >= 13);
    let s = wait_for(
        &checker,
        "unhealthy after 3 failures",
        is(0, State::Unhealthy),
    );
    assert_eq!(ep(&s, 0).last_reason, "HTTP 500");
    assert!(ep(&s, 0).counters.probes() >= 16);
    let s = wait_for(&checker, "healthy again", |s| {
        ep(s, 0).counters.to_healthy == 2
    });
    let c = ep(&s, 0).counters;
    assert_eq!((c.to_healthy, c.to_unhealthy), (2, 1), "{c:?}");
    assert!(c.probes() >= 19, "{c:?}");
}

#[test]
fn weight_and_utilization_from_headers() {
    let rt = runtime();
    let mut check = fast(Check::http("/"), 50, 1, 1);
    check.weight_from_header = true;
    let replies = [
        with_header(200, WEIGHT_HEADER, "250"),
        with_header(200, WEIGHT_HEADER, "0"),
        ok(),
        with_header(200, WEIGHT_HEADER, "abc"),
        with_header(200, WEIGHT_HEADER, "1001"),
        with_header(200, "X-Load-Balancing-Endpoint-Utilization", "0.42"),
    ];
    let mut servers = Vec::new();
    let mut targets = Vec::new();
    for (i, r) in replies.iter().enumerate() {
        let r = r.clone();
        let s = serve(&rt, move |_| r.clone());
        targets.push(target(i as u32, "web", s.addr, &check));
        servers.push(s);
    }
    // The same header is ignored when the check does not ask for weights.
    let mut plain = check.clone();
    plain.weight_from_header = false;
    targets.push(target(6, "web", servers[0].addr, &plain));

    let checker = HealthChecker::start(targets).unwrap();
    let want = [
        State::Healthy,
        State::Healthy,
        State::Healthy,
        State::Unhealthy,
        State::Unhealthy,
        State::Healthy,
        State::Healthy,
    ];
    let s = wait_for(&checker, "expected states", |s| {
        want.iter()
            .enumerate()
            .all(|(i, w)| ep(s, i as u32).state == *w)
    });
    let e = |i| ep(&s, i);
    assert_eq!((e(0).state, e(0).weight), (State::Healthy, Some(250)));
    assert_eq!(e(0).effective_weight(100), 250);
    assert!(e(0).is_eligible(100));
    assert_eq!((e(1).state, e(1).weight), (State::Healthy, Some(0)));
    assert!(!e(1).is_eligible(100), "weight 0: healthy but not eligible");
    assert_eq!((e(2).state, e(2).weight), (State::Healthy, None));
    assert_eq!(e(2).effective_weight(100), 100);
    assert_eq!(e(3).state, State::Unhealthy);
    assert_eq!(
        e(3).last_reason,
        "invalid X-Load-Balancing-Endpoint-Weight \"abc\" (expected an integer 0-1000)"
    );
    assert_eq!(e(4).state, State::Unhealthy);
    assert_eq!((e(5).state, e(5).utilization), (State::Healthy, Some(0.42)));
    assert_eq!((e(6).state, e(6).weight), (State::Healthy, None));
}

#[test]
fn weight_change_bumps_the_generation() {
    let rt = runtime();
    let weight = Arc::new(AtomicU8::new(25));
    let w = Arc::clone(&weight);
    let server = serve(&rt, move |_| {
        with_header(200, WEIGHT_HEADER, &w.load(Ordering::Relaxed).to_string())
    });
    let mut check = fast(Check::http("/"), 50, 1, 1);
    check.weight_from_header = true;
    let checker = HealthChecker::start(vec![target(0, "web", server.addr, &check)]).unwrap();
    let s = wait_for(&checker, "weight 25", |s| ep(s, 0).weight == Some(25));
    weight.store(200, Ordering::Relaxed);
    let s2 = wait_for(&checker, "weight 200", |s| ep(s, 0).weight == Some(200));
    assert!(s2.generation > s.generation);
    assert_eq!(ep(&s2, 0).state, State::Healthy);
}

#[test]
fn generation_moves_only_on_changes() {
    let rt = runtime();
    let server = serve(&rt, |_| ok());
    // A single spurious failure must not flip the state during the test.
    let check = fast(Check::http("/"), 50, 1, 3);
    let checker = HealthChecker::start(vec![target(0, "web", server.addr, &check)]).unwrap();
    let s = wait_for(&checker, "healthy", is(0, State::Healthy));
    let g = checker.generation();
    assert!(checker.changed_since(g).is_none());
    std::thread::sleep(Duration::from_millis(500));
    // Probes went on, nothing the management core decides on changed.
    assert!(checker.changed_since(g).is_none());
    assert!(checker.snapshot().endpoints[0].counters.probes() > ep(&s, 0).counters.probes());

    server.stop(&rt);
    wait_for(&checker, "unhealthy", is(0, State::Unhealthy));
    let changed = checker
        .changed_since(g)
        .expect("a transition bumps the generation");
    assert!(changed.generation > g);
}

#[test]
fn https_checks_certificate_validity_not_names() {
    let rt = runtime();
    // Names that are not the probed address: host names are not verified.
    let valid = TestCert::valid("backend.invalid");
    let expired = TestCert::new("backend.invalid", (2000, 1, 1), (2001, 1, 1));
    let future = TestCert::new("backend.invalid", (2090, 1, 1), (2100, 1, 1));
    let check = fast(Check::https("/"), 150, 1, 1);
    let mut weighted = check.clone();
    weighted.weight_from_header = true;

    let servers = [
        serve_tls(&rt, &valid, |_| ok()),
        serve_tls(&rt, &expired, |_| ok()),
        serve_tls(&rt, &future, |_| ok()),
        serve_tls(&rt, &valid, |_| status(503)),
        serve_tls(&rt, &valid, |_| with_header(200, WEIGHT_HEADER, "7")),
        serve(&rt, |_| Reply::Close), // not TLS
    ];
    let mut targets: Vec<_> = servers[..4]
        .iter()
        .enumerate()
        .map(|(i, s)| target(i as u32, "tls", s.addr, &check))
        .collect();
    targets.push(target(4, "tls", servers[4].addr, &weighted));
    targets.push(target(5, "tls", servers[5].addr, &check));
    let checker = HealthChecker::start(targets).unwrap();
    let want = [
        State::Healthy,
        State::Unhealthy,
        State::Unhealthy,
        State::Unhealthy,
        State::Healthy,
        State::Unhealthy,
    ];
    let s = wait_for(&checker, "expected states", |s| {
        want.iter()
            .enumerate()
            .all(|(i, w)| ep(s, i as u32).state == *w)
    });
    let e = |i| ep(&s, i);
    assert_eq!(
        (e(0).state, e(0).last_reason.as_str()),
        (State::Healthy, "HTTP 200")
    );
    assert_eq!(
        (e(1).state, e(1).last_reason.as_str()),
        (State::Unhealthy, "certificate expired")
    );
    assert_eq!(
        (e(2).state, e(2).last_reason.as_str()),
        (State::Unhealthy, "certificate not yet valid")
    );
    assert_eq!(
        (e(3).state, e(3).last_reason.as_str()),
        (State::Unhealthy, "HTTP 503")
    );
    assert_eq!((e(4).state, e(4).weight), (State::Healthy, Some(7)));
    assert_eq!(e(5).state, State::Unhealthy);
    assert!(
        e(5).last_reason.starts_with("TLS handshake failed")
            || e(5).last_reason == "connection reset",
        "{}",
        e(5).last_reason
    );
}

#[test]
fn update_keeps_the_state_of_endpoints_that_stay() {
    let rt = runtime();
    let a = serve(&rt, |_| ok());
    let b = serve(&rt, |_| ok());
    let c = serve(&rt, |_| ok());
    let check = fast(Check::http("/"), 50, 2, 3);
    let mut checker = HealthChecker::start(vec![
        target(0, "web", a.addr, &check),
        target(1, "web", b.addr, &check),
    ])
    .unwrap();
    let s = wait_for(&checker, "both healthy", |s| {
        s.endpoints.iter().all(|e| e.state == State::Healthy)
    });
    let a_probes = ep(&s, 0).counters.probes();

    // Reload: A stays (under a new handle), B goes, C comes.
    checker
        .update(vec![
            target(5, "web", a.addr, &check),
            target(6, "web", c.addr, &check),
        ])
        .unwrap();
    assert_eq!(checker.len(), 2);
    let s = checker.snapshot();
    assert_eq!(s.endpoints.len(), 2);
    assert_eq!(ep(&s, 5).state, State::Healthy);
    assert!(ep(&s, 5).counters.probes() >= a_probes);
    assert_eq!(ep(&s, 5).counters.to_healthy, 1);
    assert_eq!(ep(&s, 6).state, State::Unknown);
    assert!(s.get(EndpointId(0)).is_none() && s.get(EndpointId(1)).is_none());
    wait_for(&checker, "C healthy", is(6, State::Healthy));
    let b_seen = b.accepted();
    std::thread::sleep(Duration::from_millis(300));
    assert!(b.accepted() <= b_seen + 1, "B is no longer probed");

    // A changed check is a new probe: UNKNOWN again.
    let mut slower = check.clone();
    slower.healthy_threshold = 3;
    checker
        .update(vec![
            target(5, "web", a.addr, &slower),
            target(6, "web", c.addr, &check),
        ])
        .unwrap();
    let s = checker.snapshot();
    assert_eq!(ep(&s, 5).state, State::Unknown);
    assert_eq!(ep(&s, 6).state, State::Healthy);

    // An invalid target changes nothing.
    let g = checker.generation();
    let bad = Check {
        path: "no-slash".to_owned(),
        ..check.clone()
    };
    assert!(
        checker
            .update(vec![target(9, "web", a.addr, &bad)])
            .is_err()
    );
    assert_eq!(checker.generation(), g);
    assert_eq!(checker.len(), 2);
}

#[test]
fn probes_come_from_the_source_address() {
    let rt = runtime();
    let server = serve(&rt, |_| ok());
    let mut check = fast(Check::http("/"), 50, 1, 1);
    check.source_address = Some("127.0.0.2".parse().unwrap());
    let mut unassigned = check.clone();
    unassigned.source_address = Some("192.0.2.1".parse().unwrap()); // TEST-NET-1, not ours
    let mut v6 = check.clone();
    v6.source_address = Some("::1".parse().unwrap());
    let checker = HealthChecker::start(vec![
        target(0, "web", server.addr, &check),
        target(1, "web", server.addr, &unassigned),
        target(2, "web", server.addr, &v6),
    ])
    .unwrap();
    let s = wait_for(&checker, "expected states", |s| {
        ep(s, 0).state == State::Healthy
            && ep(s, 1).state == State::Unhealthy
            && ep(s, 2).state == State::Unhealthy
    });
    let want: IpAddr = "127.0.0.2".parse().unwrap();
    let peers: Vec<SocketAddr> = server.peers.lock().unwrap().clone();
    assert!(
        !peers.is_empty() && peers.iter().all(|p| p.ip() == want),
        "{peers:?}"
    );

    assert_eq!(ep(&s, 1).state, State::Unhealthy);
    assert!(
        ep(&s, 1)
            .last_reason
            .starts_with("cannot bind source address 192.0.2.1"),
        "{}",
        ep(&s, 1).last_reason
    );
    assert_eq!(
        ep(&s, 2).last_reason,
        "cannot bind source address ::1: not the endpoint's IP version"
    );
}

#[test]
fn stop_ends_probing() {
    let rt = runtime();
    let server = serve(&rt, |_| Reply::Close);
    let check = fast(Check::tcp(), 50, 1, 1);
    let checker = HealthChecker::start(vec![target(0, "svc", server.addr, &check)]).unwrap();
    wait_for(&checker, "healthy", is(0, State::Healthy));
    checker.stop().unwrap();
    // A connection made just before the stop may still be accepted late;
    // a running prober would add one every 50 ms.
    std::thread::sleep(Duration::from_millis(100));
    let seen = server.accepted();
    std::thread::sleep(Duration::from_millis(500));
    let after = server.accepted();
    assert!(after <= seen + 1, "{seen} then {after}");
}

#[test]
fn duplicate_targets_share_one_probe() {
    let rt = runtime();
    let server = serve(&rt, |_| ok());
    let check = fast(Check::http("/"), 50, 1, 1);
    let checker = HealthChecker::start(vec![
        target(0, "web", server.addr, &check),
        target(1, "web", server.addr, &check),
        target(2, "other", server.addr, &check),
    ])
    .unwrap();
    assert_eq!(checker.len(), 2);
    let s = wait_for(&checker, "healthy", |s| {
        s.endpoints.iter().all(|e| e.state == State::Healthy)
    });
    assert_eq!(s.endpoints.len(), 3);
}

/// Ports nothing holds now (bound once and released).
fn free_ports(n: usize) -> Vec<u16> {
    let held: Vec<std::net::TcpListener> = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    held.iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect()
}

#[test]
fn probes_through_a_vip_come_from_their_source_port_and_keep_state_when_it_moves() {
    let rt = runtime();
    // The "VIP" is the server's address; the endpoints' own addresses are
    // never connected to (TEST-NET-1).
    let server = serve(&rt, |_| ok());
    let vip = server.addr.ip();
    let check = fast(Check::http("/"), 50, 1, 1);
    let ports = free_ports(4);
    let via = |id: u32, vip: IpAddr, source_port: u16| health::Target {
        via: Some(health::Via { vip, source_port }),
        ..target(
            id,
            "web",
            SocketAddr::new(
                format!("192.0.2.{}", id + 1).parse().unwrap(),
                server.addr.port(),
            ),
            &check,
        )
    };
    // Endpoint 0 through a second VIP where nothing listens: unhealthy there.
    let dead_vip: IpAddr = "127.0.0.3".parse().unwrap();
    let mut checker = HealthChecker::start(vec![
        via(0, vip, ports[0]),
        via(1, vip, ports[1]),
        via(0, dead_vip, ports[2]),
    ])
    .unwrap();
    let s = wait_for(&checker, "endpoint 1 healthy, 0 unhealthy", |s| {
        is(1, State::Healthy)(s) && is(0, State::Unhealthy)(s)
    });
    // Endpoint 0's probe through the live VIP passes; its other one decides.
    let all: Vec<(Option<IpAddr>, State)> = s
        .all(EndpointId(0))
        .iter()
        .map(|e| (e.vip, e.state))
        .collect();
    assert_eq!(
        all,
        [
            (Some(vip), State::Healthy),
            (Some(dead_vip), State::Unhealthy)
        ]
    );
    assert_eq!(ep(&s, 0).vip, Some(dead_vip));
    // Every connection came from a probe's own port; repeated probes from
    // one port never failed (no TIME_WAIT left behind).
    let used = |p: u16| {
        server
            .peers
            .lock()
            .unwrap()
            .iter()
            .filter(|a| a.port() == p)
            .count()
    };
    wait_for(&checker, "several probes from each port", |_| {
        used(ports[0]) >= 3 && used(ports[1]) >= 3
    });
    assert!(
        server
            .peers
            .lock()
            .unwrap()
            .iter()
            .all(|a| a.port() == ports[0] || a.port() == ports[1] || a.port() == ports[3]),
        "{:?}",
        server.peers.lock().unwrap()
    );
    let failed = ep(&checker.snapshot(), 1).counters.probes_failed;
    assert_eq!(failed, 0);

    // A reload moves endpoint 1's source port: it stays HEALTHY, and its
    // probes come from the new port.
    checker
        .update(vec![
            via(0, vip, ports[0]),
            via(1, vip, ports[3]),
            via(0, dead_vip, ports[2]),
        ])
        .unwrap();
    assert_eq!(ep(&checker.snapshot(), 1).state, State::Healthy);
    wait_for(&checker, "probes from the new port", |_| {
        used(ports[3]) >= 2
    });
    assert_eq!(ep(&checker.snapshot(), 1).state, State::Healthy);
}
