//! A dual-stack service (M8) on the management core: each family's rule
//! takes new flows by the health of the endpoints' addresses of that
//! family, while an endpoint alive on either keeps its flows.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

mod sim;

use std::net::IpAddr;
use std::time::Duration;

use control::{Core, Recorder, ScriptedProbes};
use dataplane::{BackendState, Local};
use health::State;

const TEXT: &str = r#"
[node]
name = "n"
region = "r"
zone = "z"

[[backend_services]]
name = "s"
delivery = "gue"
health_check = "tcp"
groups = [{ name = "g", region = "r", zone = "z", endpoints = [
  { address = "10.1.0.1", address6 = "fd01::1" },
  { address = "10.1.0.2", address6 = "fd01::2" },
  { address = "10.1.0.3", address6 = "fd01::3" },
] }]

[[health_checks]]
name = "tcp"
type = "TCP"
port = 80

[[forwarding_rules]]
name = "web4"
vips = ["198.51.100.1"]
protocol = "TCP"
ports = 80
backend_service = "s"

[[forwarding_rules]]
name = "web6"
vips = ["2001:db8::1"]
protocol = "TCP"
ports = 80
backend_service = "s"
"#;

/// The simulation's node, with an IPv6 tunnel source too.
fn local() -> Local {
    Local {
        tunnel_src_v6: Some("fd00::2".parse().unwrap()),
        ..sim::local()
    }
}

/// The addresses of the backends rule `child` (its first child rule)
/// gives new flows to.
fn eligible(core: &Core, child: usize) -> Vec<IpAddr> {
    let snap = core.live();
    let svc = 0;
    let mut v: Vec<IpAddr> = snap
        .plan_for(child, svc)
        .unwrap()
        .eligible_slots()
        .into_iter()
        .map(|s| snap.backends[s as usize].addr)
        .collect();
    v.sort();
    v.dedup();
    v
}

#[test]
fn each_family_takes_new_flows_by_its_own_addresses_health() {
    let mut probes = ScriptedProbes::new(State::Healthy);
    let mut core = sim::start_core(sim::loaded(TEXT).compiled, local(), 1, &mut probes);
    // Both addresses of each endpoint are probed.
    assert_eq!(probes.targets().len(), 6);
    let mut shell = Recorder::new(probes);
    let step = |core: &mut Core, shell: &mut Recorder, secs: u64| {
        sim::step_alone(core, shell, Duration::from_secs(secs));
    };
    step(&mut core, &mut shell, 1);
    let all: Vec<IpAddr> = ["10.1.0.1", "10.1.0.2", "10.1.0.3"]
        .iter()
        .map(|a| a.parse().unwrap())
        .collect();
    assert_eq!(eligible(&core, 0), all);
    assert_eq!(eligible(&core, 1), all);

    // Endpoint 1's IPv6 address stops answering: the IPv6 rule's new flows
    // leave it, the IPv4 rule's do not, and it stays active.
    shell
        .probes
        .set_state("fd01::1".parse().unwrap(), State::Unhealthy);
    step(&mut core, &mut shell, 2);
    assert_eq!(eligible(&core, 0), all, "IPv4 rule");
    assert_eq!(eligible(&core, 1), all[1..], "IPv6 rule");
    assert_eq!(core.live().backends[0].state, BackendState::Active);
    let flows = control::FlowUse {
        live: 0,
        half_open: 0,
        capacity: 0,
        memory: "heap",
    };
    let status = core.status(Duration::from_secs(2), flows).to_string();
    assert!(
        status.contains("health s/[fd01::1]:80: UNHEALTHY"),
        "{status}"
    );

    // Both of its addresses fail: no rule's new flows, and it is unhealthy.
    shell
        .probes
        .set_state("10.1.0.1".parse().unwrap(), State::Unhealthy);
    step(&mut core, &mut shell, 3);
    assert_eq!(eligible(&core, 0), all[1..]);
    assert_eq!(eligible(&core, 1), all[1..]);
    assert!(matches!(
        core.live().backends[0].state,
        BackendState::Unhealthy { .. }
    ));

    // Back: every rule takes it again.
    shell
        .probes
        .set_state("10.1.0.1".parse().unwrap(), State::Healthy);
    shell
        .probes
        .set_state("fd01::1".parse().unwrap(), State::Healthy);
    step(&mut core, &mut shell, 4);
    assert_eq!(eligible(&core, 0), all);
    assert_eq!(eligible(&core, 1), all);
}
