//! Every metric family `/metrics` can carry, by the name a query uses, its
//! type and its label names, as recorded in `metrics_families.golden`. The
//! shipped Prometheus rules and Grafana dashboard (`scripts/deploy/`) are
//! checked against that file (`tests/prometheus.rs`), so a renamed metric
//! or label fails here first and there next. `metrics_text.golden` pins the
//! text of one plain configuration; this configuration turns on what that
//! one leaves out (health checks, `[bgp]`, `[flow_sync]`, a rejected
//! reload), and this test also checks that no family of that golden is
//! missing here. `SPILLWAY_BLESS=1` rewrites the file (for a deliberate
//! change).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

use std::collections::{BTreeMap, BTreeSet};
use std::net::UdpSocket;
use std::path::{Path, PathBuf};

use control::Manager;

struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A loopback UDP port nothing listens on (for flow sync's own and peer
/// addresses: its datagrams stay on this machine).
fn free_udp_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// Two services, one RATE-balanced over two regions with a capped group,
/// the other health-checked, BGP through BIRD (whose control socket does
/// not exist: the speaker is down) and flow sync to one peer. Endpoints and
/// peers are loopback addresses: the probes and datagrams this test's
/// daemon sends stay on this machine.
fn config(dir: &Path) -> String {
    let (listen, peer) = (free_udp_port(), free_udp_port());
    format!(
        r#"
[node]
name = "n1"
region = "r1"
zone = "z1"
region_preference = ["r1", "r2"]
shutdown_drain = "0s"

[dataplane]
flow_table_capacity = 1024

[[forwarding_rules]]
name = "api"
vips = ["198.51.100.10"]
protocol = "TCP"
ports = 443
backend_service = "api"

[[forwarding_rules]]
name = "web"
vips = ["198.51.100.80"]
protocol = "TCP"
ports = 80
backend_service = "web"

[[backend_services]]
name = "api"
delivery = "gue"
balancing_mode = "RATE"
max_rate_per_endpoint = 50000

[[backend_services.groups]]
name = "r1-a"
region = "r1"
zone = "z1"
endpoints = [{{ address = "127.0.1.11" }}]

[[backend_services.groups]]
name = "r2-a"
region = "r2"
zone = "z3"
max_rate = 70000
endpoints = [{{ address = "127.0.2.11" }}]

[[backend_services]]
name = "web"
delivery = "ipip"
health_check = "tcp"

[[backend_services.groups]]
name = "g"
region = "r1"
zone = "z1"
endpoints = [{{ address = "127.0.3.11" }}]

[[health_checks]]
name = "tcp"
type = "TCP"
port = 9

[bgp]
speaker = "bird"
control = "{dir}/bird.ctl"
local_asn = 64512
routes_file = "{dir}/bird-vips.conf"

[flow_sync]
listen = "127.0.0.1:{listen}"
peers = ["127.0.0.1:{peer}"]
key = "hex:00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"
"#,
        dir = dir.display()
    )
}

/// The node's addresses: a next hop with a MAC (so endpoints are eligible
/// and services planned) and a tunnel source.
fn local() -> dataplane::Local {
    dataplane::Local {
        mac: [2, 0, 0, 0, 0, 1],
        next_hop_mac: [2, 0, 0, 0, 0, 0xfe],
        tunnel_src_v4: Some("127.0.0.2".parse().unwrap()),
        tunnel_src_v6: None,
        own_addrs: vec!["127.0.0.2".parse().unwrap()],
        port_macs: Vec::new(),
        egress_mtu: None,
        neighbours: Vec::new(),
    }
}

/// A family: its type and its label names (`None` while it has no sample
/// to show them).
type Family = (String, Option<BTreeSet<String>>);

/// Each family of an OpenMetrics text, by the name its samples carry
/// (`_total` for counters), with its type and the labels its samples show.
fn families(text: &str) -> BTreeMap<String, Family> {
    let mut out: BTreeMap<String, Family> = BTreeMap::new();
    let mut types: BTreeMap<String, String> = BTreeMap::new();
    for l in text.lines() {
        if let Some(t) = l.strip_prefix("# TYPE ") {
            let (name, kind) = t.split_once(' ').expect("TYPE name kind");
            let sample = if kind == "counter" {
                format!("{name}_total")
            } else {
                name.to_owned()
            };
            types.insert(name.to_owned(), sample.clone());
            out.insert(sample, (kind.to_owned(), None));
        } else if !l.starts_with('#') && !l.is_empty() {
            let series = l.rsplit_once(' ').expect("sample value").0;
            let (name, labels) = series.split_once('{').unwrap_or((series, ""));
            let family = out
                .get_mut(name)
                .unwrap_or_else(|| panic!("{name}: no TYPE"))
                .1
                .get_or_insert_default();
            // Label values are quoted and may hold commas: take each
            // `key="` up to its closing quote.
            let mut rest = labels.trim_end_matches('}');
            while let Some((key, after)) = rest.split_once("=\"") {
                family.insert(key.trim_start_matches(',').to_owned());
                let mut end = 0;
                let b = after.as_bytes();
                while end < b.len() && b[end] != b'"' {
                    end += if b[end] == b'\\' { 2 } else { 1 };
                }
                rest = after.get(end + 1..).unwrap_or("");
            }
        }
    }
    out
}

fn catalogue(f: &BTreeMap<String, Family>) -> String {
    let mut s = String::from(
        "# Every family /metrics can carry: the name queries use, its type, its labels\n\
         # (\"-\": none; \"?\": not seen, the family had no sample).\n\
         # Written by crates/control/tests/metrics_families.rs (SPILLWAY_BLESS=1).\n",
    );
    for (name, (kind, labels)) in f {
        let labels = match labels {
            None => "?".to_owned(),
            Some(l) if l.is_empty() => "-".to_owned(),
            Some(l) => l.iter().cloned().collect::<Vec<_>>().join(","),
        };
        s.push_str(&format!("{name} {kind} {labels}\n"));
    }
    s
}

#[test]
fn every_family_is_catalogued() {
    let dir = Dir(std::env::temp_dir().join(format!("spillway-families-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).unwrap();
    let path = dir.0.join("spillway.toml");
    let text = config(&dir.0);
    std::fs::write(&path, &text).unwrap();
    let loaded = config::load(&path).unwrap_or_else(|e| panic!("{e}"));
    let (mut mgr, _shared) =
        Manager::start(&path, loaded.compiled, local(), 2, None).unwrap_or_else(|e| panic!("{e}"));
    mgr.tick();
    let (ok, answer) = mgr.request(
        control::socket::Request::parse("drain zone z3").unwrap(),
        false,
    );
    assert!(ok, "{answer}");
    // A rejected reload: the error's own family.
    std::fs::write(&path, "[node]\nname = 3\n").unwrap();
    assert!(mgr.reload().is_err(), "a broken file is refused");
    std::fs::write(&path, &text).unwrap();
    mgr.tick();
    let got = families(&mgr.metrics());

    // Nothing the plain configuration's golden shows is missing here.
    let plain = families(
        &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/metrics_text.golden"),
        )
        .unwrap(),
    );
    let missing: Vec<_> = plain.keys().filter(|k| !got.contains_key(*k)).collect();
    assert!(
        missing.is_empty(),
        "in metrics_text.golden, not here: {missing:?}"
    );
    // The sections this configuration turns on are there.
    for name in [
        "spillway_endpoint_healthy",
        "spillway_health_probes_total",
        "spillway_bgp_speaker_up",
        "spillway_bgp_vip_announced",
        "spillway_flow_sync_dropped_total",
        "spillway_config_last_reload_error",
    ] {
        assert!(got.contains_key(name), "{name} in {:?}", got.keys());
    }

    let got = catalogue(&got);
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/metrics_families.golden");
    if std::env::var_os("SPILLWAY_BLESS").is_some() {
        std::fs::write(&golden, &got).unwrap();
    }
    let want = std::fs::read_to_string(&golden).unwrap_or_default();
    if got != want {
        let (g, w): (BTreeSet<_>, BTreeSet<_>) = (got.lines().collect(), want.lines().collect());
        panic!(
            "the families differ from metrics_families.golden (SPILLWAY_BLESS=1 rewrites it for a deliberate change):\n only now: {:?}\n only recorded: {:?}",
            g.difference(&w).collect::<Vec<_>>(),
            w.difference(&g).collect::<Vec<_>>()
        );
    }
}
