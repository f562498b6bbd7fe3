//! Neighbour resolution in the namespace lab (M47), with no MAC in the
//! configuration (scripts/lab.sh with LAB_RESOLVE=1, short `[neighbours]`
//! timings: reachable 2 s, retransmit 500 ms, 2 probes): a router whose MAC
//! changes is followed without a reload, and an l2dsr backend that stops
//! answering ARP gets no new connections. Real kernels on every side.
//! Needs root.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

mod common;

use std::time::{Duration, Instant};

use common::lab::{LAB_SH, Lab, failed, http_get};

/// The lab of scripts/lab.sh in `mode` with no MAC in its configuration.
fn up(mode: &str, env: &[(&str, &str)]) -> Lab {
    let mut env = env.to_vec();
    env.insert(0, ("LAB_RESOLVE", "1"));
    Lab::up(&LAB_SH, &[mode], &env)
}

/// (a) The backends sit off the balancer's backend subnet (/30), so tunnels
/// go through the router, whose MAC is not configured: Spillway resolves
/// it, real TCP flows, then the router's MAC changes and traffic recovers
/// at the next refresh, without a reload. The gap is printed.
#[test]
fn lab_a_router_is_resolved_and_followed_when_its_mac_changes() {
    let lab = up("gue", &[("LAB_BE_PREFIX", "30")]);
    lab.wait_status(
        &[
            "neighbour 198.18.2.1 on port 1: reachable",
            "02:53:50:00:00:fe",
        ],
        Duration::from_secs(10),
    );
    let answers = lab.requests(200);
    assert!(failed(&answers).is_empty(), "{:?}", failed(&answers));

    // A client asking all the time, on short timeouts: when each request
    // started and whether it was answered.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s2 = stop.clone();
    let t0 = Instant::now();
    let client = lab.in_client(move || {
        let mut log = Vec::new();
        while !s2.load(std::sync::atomic::Ordering::Relaxed) {
            let at = t0.elapsed();
            let ok = !http_get(Duration::from_secs(1)).starts_with("FAILED");
            log.push((at, ok));
            std::thread::sleep(Duration::from_millis(20));
        }
        log
    });
    std::thread::sleep(Duration::from_secs(1));
    let changed_at = t0.elapsed();
    let moved = "02:53:50:00:00:fd";
    let br = format!("s{}br", lab.tag());
    lab.ip("r", &["link", "set", "dev", &br, "address", moved]);
    // The backends' kernels would keep sending replies to the old MAC for
    // their own reachable time: forget it there, so that what is measured
    // is the balancer's side.
    for b in ["b1", "b2", "b3"] {
        lab.ip(b, &["neigh", "flush", "all"]);
    }
    let status = lab.wait_status(
        &["neighbour 198.18.2.1 on port 1: reachable", moved],
        Duration::from_secs(15),
    );
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let log = client.join().expect("client");
    let last_ok_before = log
        .iter()
        .filter(|(at, ok)| *ok && *at < changed_at)
        .map(|(at, _)| *at)
        .max()
        .expect("answered before the change");
    let first_ok_after = log
        .iter()
        .find(|(at, ok)| *ok && *at > changed_at)
        .map(|(at, _)| *at)
        .unwrap_or_else(|| panic!("never answered after the MAC change:\n{status}"));
    let lost = log
        .iter()
        .filter(|(at, ok)| !*ok && *at > changed_at)
        .count();
    eprintln!(
        "router MAC changed at {:.2} s: last answer before {:.2} s, first after {:.2} s: gap {:.2} s ({lost} requests failed; refresh: reachable 2 s + up to 2 probes 500 ms apart)",
        changed_at.as_secs_f64(),
        last_ok_before.as_secs_f64(),
        first_ok_after.as_secs_f64(),
        (first_ok_after - last_ok_before).as_secs_f64()
    );
    assert!(status.contains("reloads 0 ok / 0 rejected"), "{status}");
    let answers = lab.requests(100);
    assert!(failed(&answers).is_empty(), "{:?}", failed(&answers));
}

/// (b) l2dsr backends without `mac`: resolved, traffic flows to all three;
/// backend1 stops answering ARP and becomes ineligible for new
/// connections (status shows it), which go to the other two.
#[test]
fn lab_l2dsr_backends_are_resolved_and_one_that_stops_answering_gets_no_new_flows() {
    let lab = up("l2dsr", &[]);
    for b in ["198.18.2.11", "198.18.2.12", "198.18.2.13"] {
        lab.wait_status(
            &[&format!("neighbour {b} on port 1: reachable")],
            Duration::from_secs(10),
        );
    }
    let answers = lab.requests(300);
    assert!(failed(&answers).is_empty(), "{:?}", failed(&answers));
    let per = common::lab::spread(&answers);
    assert_eq!(per.len(), 3, "every backend answered: {per:?}");

    lab.ip(
        "b1",
        &[
            "link",
            "set",
            "dev",
            &format!("s{}b1", lab.tag()),
            "arp",
            "off",
        ],
    );
    let t = Instant::now();
    let status = lab.wait_status(
        &["neighbour 198.18.2.11 on port 1: failed"],
        Duration::from_secs(15),
    );
    eprintln!(
        "backend1 failed {:.2} s after it stopped answering ARP",
        t.elapsed().as_secs_f64()
    );
    assert!(
        status
            .lines()
            .any(|l| l.contains("198.18.2.11") && l.contains("ineligible (neighbour unresolved)")),
        "{status}"
    );
    let answers = lab.requests(300);
    assert!(failed(&answers).is_empty(), "{:?}", failed(&answers));
    assert!(
        answers.iter().all(|a| a != "backend1"),
        "new connections avoid backend1: {answers:?}"
    );
    eprintln!("{}", lab.ctl(&["stats"]));
}
