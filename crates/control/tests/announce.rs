//! The management core's announcement output (M34, M35): one
//! [`Output::Announce`] at start and one per change, none without `[bgp]`,
//! driven by scripted health verdicts on a virtual clock.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

mod sim;

use std::net::IpAddr;
use std::time::Duration;

use control::announce::Why;
use control::{Core, Recorder, ScriptedProbes};
use dataplane::Local;
use health::State;

const TEXT: &str = r#"
[node]
name = "n"
region = "r"
zone = "z"

[[backend_services]]
name = "s"
delivery = "ipip"
health_check = "tcp"
groups = [{ name = "g", region = "r", zone = "z", endpoints = [{ address = "10.1.0.1" }, { address = "10.1.0.2" }] }]

[[health_checks]]
name = "tcp"
type = "TCP"
port = 80

[[forwarding_rules]]
name = "web"
vips = ["198.51.100.1"]
protocol = "TCP"
ports = 80
backend_service = "s"
"#;

const BGP: &str = r#"
[bgp]
speaker = "bird"
control = "/run/bird/bird.ctl"
local_asn = 65001
"#;

fn local() -> Local {
    Local {
        mac: [2, 0, 0, 0, 0, 1],
        next_hop_mac: [2, 0, 0, 0, 0, 0xfe],
        tunnel_src_v4: Some("10.0.1.2".parse().unwrap()),
        tunnel_src_v6: None,
        own_addrs: vec!["10.0.0.2".parse().unwrap()],
        port_macs: Vec::new(),
        egress_mtu: None,
        neighbours: Vec::new(),
    }
}

/// The announcements among the core's outputs since the last call.
fn announced(core: &mut Core, shell: &mut Recorder) -> Vec<Vec<(IpAddr, Why)>> {
    core.carry_out(shell);
    shell.announced.drain(..).collect()
}

/// A core on `text`, every endpoint UNKNOWN, and its shell.
fn start(text: &str) -> (Core, Recorder) {
    let mut probes = ScriptedProbes::new(State::Unknown);
    let core = sim::start_core(sim::loaded(text).compiled, local(), 1, &mut probes);
    (core, Recorder::new(probes))
}

/// Sets both endpoints to `s` and steps at `secs`.
fn verdict(core: &mut Core, shell: &mut Recorder, s: State, secs: u64) {
    for a in ["10.1.0.1", "10.1.0.2"] {
        shell.probes.set_state(a.parse().unwrap(), s);
    }
    sim::step_alone(core, shell, Duration::from_secs(secs));
}

#[test]
fn the_decision_is_output_at_start_and_at_each_change_only() {
    let vip: IpAddr = "198.51.100.1".parse().unwrap();
    let (mut core, mut shell) = start(&format!("{TEXT}{BGP}"));
    let a = announced(&mut core, &mut shell);
    assert_eq!(
        a,
        [vec![(vip, Why::NotHealthy(health::Aggregate::Unknown))]],
        "at start, before any verdict: withdrawn"
    );
    verdict(&mut core, &mut shell, State::Healthy, 1);
    assert_eq!(
        announced(&mut core, &mut shell),
        [vec![(vip, Why::Healthy)]]
    );
    verdict(&mut core, &mut shell, State::Healthy, 2);
    assert!(
        announced(&mut core, &mut shell).is_empty(),
        "no change, no output"
    );
    // The node's only VIP unhealthy: fail-open keeps it.
    verdict(&mut core, &mut shell, State::Unhealthy, 3);
    assert_eq!(
        announced(&mut core, &mut shell),
        [vec![(vip, Why::FailOpen)]]
    );
    assert_eq!(core.announcement_counts(), (1, 0));
    let status = core
        .status(Duration::from_secs(4), control::FlowUse::default())
        .to_string();
    assert!(
        status.contains("VIP 198.51.100.1: announced (fail-open"),
        "{status}"
    );
}

#[test]
fn without_bgp_nothing_is_output() {
    let (mut core, mut shell) = start(TEXT);
    verdict(&mut core, &mut shell, State::Healthy, 1);
    assert!(announced(&mut core, &mut shell).is_empty());
    assert!(core.announcement().is_none());
}

/// M1, M35: an IPv6 VIP prefix is announced as that prefix, its decision
/// keyed by (and its health probed through) the first address after its
/// network one.
#[test]
fn a_vip_prefix_is_announced_as_the_prefix_and_probed_through_one_address() {
    let text = r#"
[node]
name = "n"
region = "r"
zone = "z"

[[backend_services]]
name = "s6"
delivery = "ipip"
health_check = "tcp"
groups = [{ name = "g", region = "r", zone = "z", endpoints = [{ address = "10.1.0.1", address6 = "fd00:1::1" }, { address = "10.1.0.2", address6 = "fd00:1::2" }] }]

[[health_checks]]
name = "tcp"
type = "TCP"
port = 80
target = "vip"

[[forwarding_rules]]
name = "web6"
vips = ["2001:db8:f00::/96"]
protocol = "TCP"
ports = 80
backend_service = "s6"
"#;
    let loaded = sim::loaded(&format!("{text}{BGP}"));
    let probe: IpAddr = "2001:db8:f00::1".parse().unwrap();
    assert!(!loaded.compiled.vip_probes.is_empty());
    assert!(
        loaded.compiled.vip_probes.iter().all(|p| p.vip == probe),
        "{:?}",
        loaded.compiled.vip_probes
    );
    let (mut core, mut shell) = start(&format!("{text}{BGP}"));
    core.carry_out(&mut shell);
    shell.announced.clear();
    for a in ["10.1.0.1", "10.1.0.2", "fd00:1::1", "fd00:1::2"] {
        shell.probes.set_state(a.parse().unwrap(), State::Healthy);
    }
    for (via, ep) in [(probe, "fd00:1::1"), (probe, "fd00:1::2")] {
        shell
            .probes
            .set_state_via(ep.parse().unwrap(), via, State::Healthy);
    }
    sim::step_alone(&mut core, &mut shell, Duration::from_secs(1));
    assert_eq!(
        announced(&mut core, &mut shell),
        [vec![(probe, Why::Healthy)]]
    );
    let routes: Vec<String> = shell.routes.iter().map(ToString::to_string).collect();
    assert_eq!(routes, ["2001:db8:f00::/96"]);
    let status = core
        .status(Duration::from_secs(2), control::FlowUse::default())
        .to_string();
    assert!(
        status.contains("child rule web6-ag0 (VIP 2001:db8:f00::/96): HEALTHY"),
        "{status}"
    );
}
