//! M47, host traffic by port: the namespace lab of scripts/lab.sh with
//! `LAB_EXCEPTION=per-port` gives the backend port an exception TAP of its
//! own, and its router does not route between the uplink and backend
//! subnets. The host's kernel can then reach the backends only by the backend
//! port: health probes pass, ping works through that TAP, and clients reach
//! the backends through the VIP meanwhile. Needs root.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

mod common;

use std::time::{Duration, Instant};

use common::lab::{self, LAB_SH, Lab};

#[test]
fn lab_host_traffic_to_backends_takes_the_backend_ports_exception_tap() {
    let lab = Lab::up(&LAB_SH, &["ipip"], &[("LAB_EXCEPTION", "per-port")]);
    let tap = format!("s{}kb", lab.tag());

    // The router routes nothing between the subnets: the backends are
    // directly connected to the host's backend-port TAP only.
    let route = lab.ip("lb", &["route", "get", "198.18.2.11"]);
    assert!(route.contains(&format!("dev {tap}")), "{route}");

    // M16 through M47: every backend's HTTP probe (from 198.18.2.2 on the
    // TAP, out the backend port, answers back to the TAP) passes.
    let started = Instant::now();
    let status = lab.wait_status(
        &["region lab: Healthy, 3 endpoints (3 healthy"],
        Duration::from_secs(20),
    );
    eprintln!("every backend healthy after {:?}", started.elapsed());
    for b in 1..=3 {
        let probed = format!("198.18.2.1{b}:80");
        assert!(
            status
                .lines()
                .any(|l| l.contains(&probed) && l.contains("HEALTHY") && !l.contains("UNHEALTHY")),
            "{probed} is not HEALTHY:\n{status}"
        );
    }

    // The host's kernel pings a backend through its backend-port TAP.
    let (tap_before, _) = lab.link_packets("lb", &tap);
    let (ping, ran) = lab.ping("lb", "198.18.2.12");
    assert!(ping.contains("5 packets transmitted, 5 received"), "{ran}");
    let handed = lab.link_packets("lb", &tap).0 - tap_before;
    assert!(
        handed >= 5,
        "the pings' replies come in through {tap}, which handed the kernel only {handed} frames"
    );

    // Clients reach the backends through the VIP meanwhile.
    let answers = lab.requests(30);
    assert!(
        answers.iter().all(|a| a.starts_with("backend")),
        "{answers:?}"
    );

    let stats = lab.ctl(&["stats"]);
    eprintln!("{}", stats.lines().next().unwrap_or(""));
    assert!(lab::counter(&stats, "from host ") >= 10, "{stats}");
    assert!(lab::counter(&stats, "to host ") >= 10, "{stats}");
    assert!(
        stats.contains("(dropped without exception port 0)"),
        "{stats}"
    );
}
