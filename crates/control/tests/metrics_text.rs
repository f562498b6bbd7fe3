//! `/metrics` byte for byte (issue 40): the OpenMetrics text the
//! management loop computes for a two-service configuration, as recorded
//! in `metrics_text.golden` while `prometheus-client` wrote it. Operators
//! scrape it and external checks read it: its writer may change, its text
//! may not. `SPILLWAY_BLESS=1` rewrites the file (for a deliberate change).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

use std::path::{Path, PathBuf};

use control::Manager;

struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Two services, one of them RATE-balanced over three groups in two
/// regions (capacity gauges with fractions), rules with two VIPs.
const CONFIG: &str = r#"
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
vips = ["198.51.100.10", "198.51.100.11"]
protocol = "TCP"
ports = 443
backend_service = "api"

[[forwarding_rules]]
name = "dns"
vips = ["198.51.100.53"]
protocol = "UDP"
ports = 53
backend_service = "dns"

[[backend_services]]
name = "api"
delivery = "gue"
balancing_mode = "RATE"
max_rate_per_endpoint = 50000

[[backend_services.groups]]
name = "r1-a"
region = "r1"
zone = "z1"
endpoints = [
  { address = "10.201.1.11" },
  { address = "10.201.1.12", weight = 200 },
]

[[backend_services.groups]]
name = "r1-b"
region = "r1"
zone = "z2"
capacity_scaler = 0.5
endpoints = [{ address = "10.201.2.11" }]

[[backend_services.groups]]
name = "r2-a"
region = "r2"
zone = "z3"
max_rate = 70000
endpoints = [{ address = "10.202.1.11" }, { address = "10.202.1.12" }]

[[backend_services]]
name = "dns"
delivery = "ipip"

[[backend_services.groups]]
name = "g"
region = "r1"
zone = "z1"
endpoints = [{ address = "10.203.0.1" }]
"#;

#[test]
fn metrics_text_is_the_one_recorded() {
    let dir = Dir(std::env::temp_dir().join(format!("spillway-metrics-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).unwrap();
    let path = dir.0.join("spillway.toml");
    std::fs::write(&path, CONFIG).unwrap();
    let loaded = config::load(&path).unwrap_or_else(|e| panic!("{e}"));
    let (mut mgr, _shared) =
        Manager::start(&path, loaded.compiled, dataplane::Local::default(), 2, None)
            .unwrap_or_else(|e| panic!("{e}"));
    mgr.tick();
    // A drained zone: a family whose samples come and go.
    let (ok, text) = mgr.request(
        control::socket::Request::parse("drain zone z2").unwrap(),
        false,
    );
    assert!(ok, "{text}");
    mgr.tick();
    let got = mgr.metrics();
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/metrics_text.golden");
    if std::env::var_os("SPILLWAY_BLESS").is_some() {
        std::fs::write(&golden, &got).unwrap();
    }
    let want = std::fs::read_to_string(&golden).unwrap();
    if got != want {
        let (g, w): (Vec<_>, Vec<_>) = (got.lines().collect(), want.lines().collect());
        let first = g
            .iter()
            .zip(&w)
            .position(|(a, b)| a != b)
            .unwrap_or(g.len().min(w.len()));
        panic!(
            "/metrics differs from metrics_text.golden from line {}:\n got: {:?}\nwant: {:?}",
            first + 1,
            g.get(first),
            w.get(first)
        );
    }
}
