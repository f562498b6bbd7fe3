//! Targets built from a compiled configuration (never probed here: the
//! reference configuration's addresses are documentation prefixes).

// Tests drive the probers against real servers: sockets and clocks are
// theirs (clippy.toml keeps them out of the crate's decisions only).
#![allow(clippy::disallowed_types, clippy::disallowed_methods)]

use std::time::Duration;

use config::{Env, load_str};
use health::{ProbeKind, targets_from_compiled};

#[test]
fn reference_config_targets() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../config/reference.toml");
    let text = std::fs::read_to_string(path).unwrap();
    let loaded = load_str("reference.toml", &text, &Env::with_cpus(64)).unwrap();
    let c = &loaded.compiled;
    let targets = targets_from_compiled(c).unwrap();

    // Every endpoint of every checked endpoints-kind service, none other.
    let want: Vec<_> = c
        .services
        .iter()
        .filter(|s| s.health_check.is_some() && s.kind == config::schema::GroupKind::Endpoints)
        .flat_map(|s| s.endpoint_ids())
        .collect();
    assert!(!want.is_empty());
    assert_eq!(targets.iter().map(|t| t.endpoint).collect::<Vec<_>>(), want);

    for t in &targets {
        let ep = &c.endpoints[t.endpoint.index()];
        let svc = &c.services[ep.service.index()];
        assert_eq!(&*t.service, svc.name);
        assert_eq!(t.addr.ip(), ep.address);
        assert_eq!(Some(t.addr.port()), ep.health_port);
        let hc = &c.health_checks[svc.health_check.unwrap().index()];
        assert_eq!(t.check.kind, ProbeKind::from(hc.kind));
        assert_eq!(t.check.path, hc.path.clone().unwrap_or_else(|| "/".into()));
        assert_eq!(t.check.host, hc.host);
        assert_eq!(t.check.interval, hc.interval.get());
        assert_eq!(t.check.timeout, hc.timeout.get());
        assert_eq!(t.check.source_address, hc.source_address);
        assert!(t.check.interval >= Duration::from_millis(1));
    }
}

#[test]
fn a_dual_stack_endpoint_is_probed_at_each_address() {
    let text = r#"
[node]
name = "n"
region = "r"
zone = "z"

[[forwarding_rules]]
name = "web"
vips = ["192.0.2.10"]
protocol = "TCP"
ports = 80
backend_service = "web"

[[backend_services]]
name = "web"
delivery = "gue"
health_check = "h"
[[backend_services.groups]]
name = "g"
region = "r"
zone = "z"
endpoints = [{ address = "198.51.100.1", address6 = "2001:db8:1::1" }, { address = "198.51.100.2" }]

[[health_checks]]
name = "h"
type = "TCP"
port = 80
source_address = "198.51.100.250"
"#;
    let loaded = load_str("t.toml", text, &Env::with_cpus(4)).unwrap();
    let targets = targets_from_compiled(&loaded.compiled).unwrap();
    let got: Vec<(u32, String, Option<String>)> = targets
        .iter()
        .map(|t| {
            (
                t.endpoint.0,
                t.addr.to_string(),
                t.check.source_address.map(|a| a.to_string()),
            )
        })
        .collect();
    let src = Some("198.51.100.250".to_owned());
    assert_eq!(
        got,
        [
            (0, "198.51.100.1:80".to_owned(), src.clone()),
            // The IPv4 source address cannot reach the IPv6 address.
            (0, "[2001:db8:1::1]:80".to_owned(), None),
            (1, "198.51.100.2:80".to_owned(), src),
        ]
    );
}
