//! Zone demand measured with real traffic (M27), in the namespace lab of
//! scripts/lab.sh with `LAB_CLIENT_ZONES`: the client's two addresses are
//! in client zones lab-a (198.18.0.100) and lab-b (198.18.0.200); backend1
//! and backend2 form group lab-a in zone lab-a, backend3 group lab-b in zone
//! lab-b, each group [`CAPACITY`] packets per second (RATE), zonal affinity
//! without spill below capacity. Zone a's clients open new one-datagram UDP
//! flows at 1.5 times its capacity, zone b's at a fifth of its own: the
//! data plane counts each zone's new flows, the planner sizes zone a's
//! pinned share from them, and zone a's excess (a third of its flows) goes
//! to backend3 while the rest and all of zone b's flows stay in their zones.
//! Counts are compared with generous tolerances; no timing is asserted.
//! Needs root.

#![allow(
    clippy::cast_possible_truncation,
    clippy::cast_precision_loss,
    clippy::cast_sign_loss
)] // test values are small and positive
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

mod common;

use std::collections::VecDeque;
use std::io::ErrorKind;
use std::net::{Ipv4Addr, UdpSocket};
use std::time::{Duration, Instant};

use common::lab::{self, LAB_SH, Lab};

/// Each zone's group capacity (`max_rate`, packets per second).
const CAPACITY: f64 = 200.0;
/// The UDP port of the VIP's rule and of the backends' servers.
const PORT: u16 = 7777;
/// New flows per second from zone a's and zone b's clients.
const OFFERED: [f64; 2] = [300.0, 40.0];
/// The client's address in each zone.
const CLIENTS: [Ipv4Addr; 2] = [
    Ipv4Addr::new(198, 18, 0, 100),
    Ipv4Addr::new(198, 18, 0, 200),
];
/// Flows before the counted window: the planner's smoothing settles.
const WARM_UP: f64 = 12.0;
/// The counted window after it.
const WINDOW: f64 = 12.0;
/// Each zone's client binds its flows' source ports from here up, one each,
/// so that no two flows share a 5-tuple (below the kernel's ephemeral range).
const FIRST_PORT: u16 = 20_000;

/// Where one flow went: backend `1..=3`, or `None` (no answer within 1 s).
#[derive(Debug, Clone, Copy)]
struct Sent {
    at: f64,
    backend: Option<u8>,
}

/// From `src`, `rate` new flows a second for `secs` seconds, each one
/// datagram from a port of its own to the VIP's [`PORT`]; where each went
/// (the backend's server answers "backendN LENGTH"). Answers are collected
/// while further flows go out, so a slow answer does not slow the offer.
fn offer(src: Ipv4Addr, rate: f64, secs: f64) -> Vec<Sent> {
    let vip = (Ipv4Addr::new(198, 18, 10, 10), PORT);
    let start = Instant::now();
    let mut pending: VecDeque<(UdpSocket, f64, f64)> = VecDeque::new();
    let mut done = Vec::new();
    let mut next = 0u32;
    let mut buf = [0u8; 64];
    loop {
        let now = start.elapsed().as_secs_f64();
        if now >= secs && pending.is_empty() {
            return done;
        }
        while now < secs && f64::from(next) < now * rate {
            let at = f64::from(next) / rate;
            let port = FIRST_PORT + u16::try_from(next).expect("ports for the run");
            next += 1;
            let sent = UdpSocket::bind((src, port)).and_then(|s| {
                s.set_nonblocking(true)?;
                s.send_to(b"zone demand", vip)?;
                Ok(s)
            });
            match sent {
                Ok(s) => pending.push_back((s, at, now)),
                Err(_) => done.push(Sent { at, backend: None }),
            }
        }
        pending.retain(|(s, at, out)| match s.recv_from(&mut buf) {
            Ok((n, _)) => {
                let text = String::from_utf8_lossy(&buf[..n]);
                let backend = text
                    .strip_prefix("backend")
                    .and_then(|r| r.split(' ').next())
                    .and_then(|b| b.parse().ok());
                done.push(Sent { at: *at, backend });
                false
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock && now - *out < 1.0 => true,
            Err(_) => {
                done.push(Sent {
                    at: *at,
                    backend: None,
                });
                false
            }
        });
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Flows of one zone's clients in the counted window: (to zone a's
/// backends, to zone b's, unanswered).
fn went(sent: &[Sent]) -> (usize, usize, usize) {
    let window = sent.iter().filter(|s| s.at >= WARM_UP);
    let (mut a, mut b, mut lost) = (0, 0, 0);
    for s in window {
        match s.backend {
            Some(1 | 2) => a += 1,
            Some(_) => b += 1,
            None => lost += 1,
        }
    }
    (a, b, lost)
}

/// The number after `name{service="web",zone="ZONE"} ` in the metrics.
fn zone_flows(metrics: &str, zone: &str) -> u64 {
    lab::counter(
        metrics,
        &format!("spillway_service_zone_new_flows_total{{service=\"web\",zone=\"{zone}\"}} "),
    )
}

#[test]
fn lab_an_overloaded_zone_spills_its_excess_and_only_its_excess() {
    let rate = format!("{}", CAPACITY as u64);
    let lab = Lab::up(
        &LAB_SH,
        &["gue"],
        &[("LAB_CLIENT_ZONES", &rate), ("LAB_UDP", "7777")],
    );
    let secs = WARM_UP + WINDOW;
    let zones: Vec<_> = (0..2)
        .map(|z| lab.in_client(move || offer(CLIENTS[z], OFFERED[z], secs)))
        .collect();
    let sent: Vec<Vec<Sent>> = zones
        .into_iter()
        .map(|t| t.join().expect("client thread"))
        .collect();
    let status = lab.ctl(&["status"]);
    let [(a_to_a, a_to_b, a_lost), (b_to_a, b_to_b, b_lost)] = [went(&sent[0]), went(&sent[1])];
    eprintln!(
        "zone a's clients: {a_to_a} to zone a, {a_to_b} to zone b, {a_lost} unanswered; \
         zone b's clients: {b_to_a} to zone a, {b_to_b} to zone b, {b_lost} unanswered \
         (in {WINDOW} s)\n{status}"
    );
    let a_total = (a_to_a + a_to_b + a_lost) as f64;
    let b_total = (b_to_a + b_to_b + b_lost) as f64;
    assert!(
        a_total >= 0.9 * OFFERED[0] * WINDOW && b_total >= 0.9 * OFFERED[1] * WINDOW,
        "the clients offered {a_total} and {b_total} flows in the window\n{status}"
    );
    assert!(
        (a_lost + b_lost) as f64 <= 0.02 * (a_total + b_total),
        "{a_lost} and {b_lost} flows unanswered\n{status}"
    );
    // Zone a's backends carry about their capacity (± 20 %); what left
    // zone a is its excess (a third of its clients' flows), ± 40 % of it:
    // neither nothing (no measurement: demand assumed to follow capacity)
    // nor everything.
    let in_a = (a_to_a + b_to_a) as f64 / WINDOW;
    assert!(
        (in_a - CAPACITY).abs() <= 0.2 * CAPACITY,
        "zone a's backends got {in_a:.0} flows/s against {CAPACITY}\n{status}"
    );
    let excess = OFFERED[0] - CAPACITY;
    let spilled = a_to_b as f64 / WINDOW;
    assert!(
        (spilled - excess).abs() <= 0.4 * excess,
        "zone a's clients spilled {spilled:.0} flows/s, their excess is {excess}\n{status}"
    );
    // Zone b's clients stay in zone b.
    assert!(
        b_to_a as f64 <= 0.05 * b_total,
        "{b_to_a} of zone b's {b_total} flows went to zone a\n{status}"
    );

    // Status: each zone's measured demand; zone a's clients are not all
    // pinned to it, zone b's are.
    let line = |z: &str| {
        status
            .lines()
            .find(|l| l.contains(&format!("client zone {z}:")))
            .unwrap_or_else(|| panic!("no client zone {z} in the status:\n{status}"))
            .to_owned()
    };
    let share = |l: &str| -> f64 {
        l.split("demand share ")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no demand share in {l:?}"))
    };
    let expected = 100.0 * OFFERED[0] / (OFFERED[0] + OFFERED[1]);
    assert!(
        (share(&line("lab-a")) - expected).abs() <= 8.0,
        "zone a's demand share, about {expected:.1} %: {}",
        line("lab-a")
    );
    assert!(
        !line("lab-a").contains("in zone 100.0 %"),
        "{}",
        line("lab-a")
    );
    assert!(
        line("lab-b").contains("in zone 100.0 %") || line("lab-b").contains("in zone -"),
        "{}",
        line("lab-b")
    );

    // The metric counts each zone's new flows once each: what its clients
    // sent and got answered, at most what they sent (the counters reach
    // the management core within a planning round or two).
    let answered = |s: &[Sent]| s.iter().filter(|s| s.backend.is_some()).count() as u64;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let metrics = lab.in_ns("lb", lab::metrics_here).join().expect("metrics");
        let (a, b) = (zone_flows(&metrics, "lab-a"), zone_flows(&metrics, "lab-b"));
        let (a_min, b_min) = (answered(&sent[0]), answered(&sent[1]));
        let (a_max, b_max) = (sent[0].len() as u64, sent[1].len() as u64);
        if a >= a_min && b >= b_min {
            assert!(
                a <= a_max && b <= b_max,
                "counted {a} and {b} new flows, the clients sent {a_max} and {b_max}"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "counted {a} and {b} new flows, the clients had {a_min} and {b_min} answered"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}
