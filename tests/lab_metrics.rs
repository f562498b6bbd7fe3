//! `/metrics` (M42) scraped while real TCP clients go through the balancer
//! of scripts/lab.sh: the counters add up — every received packet has
//! exactly one outcome, and every packet handed to a port was sent or
//! counted as not taken — per worker and in total; and the health,
//! locality (spillover) and drain series move as the test drains a zone and
//! kills backends. Needs root.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

mod common;

use std::collections::BTreeMap;
use std::net::{SocketAddrV4, TcpStream};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::lab::{self, LAB_SH, Lab};

/// Samples by series (`name{labels}`), from OpenMetrics text that ends as
/// it must.
fn parse(text: &str) -> BTreeMap<String, f64> {
    let body = text.split("\r\n\r\n").nth(1).unwrap_or(text);
    assert!(
        body.ends_with("# EOF\n"),
        "an OpenMetrics answer ends with # EOF:\n{body}"
    );
    lab::metric_samples(text)
}

fn scrape(lab: &Lab) -> (String, BTreeMap<String, f64>) {
    let text = lab.in_ns("lb", lab::metrics_here).join().expect("scrape");
    assert!(
        text.contains("Content-Type: application/openmetrics-text; version=1.0.0"),
        "{text}"
    );
    let m = parse(&text);
    (text, m)
}

/// The reference parser (the Prometheus project's Python client, Debian's
/// python3-prometheus-client) reads the whole exposition: strict
/// OpenMetrics, or it raises. Returns its count of families and samples.
fn reference_parse(text: &str) -> (usize, usize) {
    use std::io::Write;
    let body = text.split("\r\n\r\n").nth(1).unwrap_or(text);
    let mut py = Command::new("/usr/bin/python3")
        .args([
            "-c",
            "import sys\n\
             from prometheus_client.openmetrics.parser import text_string_to_metric_families as p\n\
             fs = list(p(sys.stdin.read()))\n\
             print(len(fs), sum(len(f.samples) for f in fs))",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run /usr/bin/python3");
    py.stdin
        .take()
        .expect("stdin")
        .write_all(body.as_bytes())
        .expect("write the exposition");
    let out = py.wait_with_output().expect("python3");
    assert!(
        out.status.success(),
        "the OpenMetrics parser refused the exposition: {}\n{body}",
        String::from_utf8_lossy(&out.stderr)
    );
    let counts = String::from_utf8_lossy(&out.stdout);
    let mut n = counts.split_whitespace().map(|w| w.parse().expect("count"));
    (n.next().expect("families"), n.next().expect("samples"))
}

/// A sample that must be there.
fn get(m: &BTreeMap<String, f64>, series: &str) -> f64 {
    *m.get(series)
        .unwrap_or_else(|| panic!("no {series} in {:#?}", m.keys().collect::<Vec<_>>()))
}

/// The sum of the samples of `family` whose labels contain `with`.
fn sum(m: &BTreeMap<String, f64>, family: &str, with: &str) -> f64 {
    m.iter()
        .filter(|(k, _)| k.starts_with(&format!("{family}{{")) && k.contains(with))
        .map(|(_, v)| v)
        .sum()
}

/// The two identities, for the series of one worker (`prefix`
/// `spillway_worker_`, labels `{worker="0"}`) or of the total
/// (`spillway_`, no labels): what was received has one outcome each, and
/// what was handed to a port was sent or dropped at TX.
fn check_identities(m: &BTreeMap<String, f64>, prefix: &str, labels: &str) {
    let v = |name: &str| get(m, &format!("{prefix}{name}{labels}"));
    let drops = if labels.is_empty() {
        sum(m, "spillway_dropped_packets_total", "")
    } else {
        sum(
            m,
            "spillway_worker_dropped_packets_total",
            &labels[1..labels.len() - 1],
        )
    };
    let rx = v("rx_packets_total");
    let outcomes = v("forwarded_packets_total")
        + v("arp_replies_total")
        + v("nd_replies_total")
        + v("no_backend_resets_total")
        + v("icmp_too_big_total")
        + v("gateway_returned_packets_total")
        + v("to_host_packets_total")
        + drops;
    assert_eq!(
        rx, outcomes,
        "{prefix}{labels}: rx = forwarded + replies + resets + too-big + returned + to host + drops"
    );
    let handed = outcomes - drops - v("to_host_dropped_packets_total")
        + v("from_host_packets_total")
        - v("from_host_dropped_packets_total");
    assert_eq!(
        v("tx_packets_total") + v("tx_dropped_packets_total"),
        handed,
        "{prefix}{labels}: tx + tx dropped = every packet handed to a port"
    );
    assert!(rx > 0.0 && v("tx_packets_total") > 0.0, "{prefix}{labels}");
    eprintln!(
        "{prefix}{labels}: rx {rx} = {outcomes} outcomes ({drops} drops); tx {} + tx dropped {} = {handed} handed",
        v("tx_packets_total"),
        v("tx_dropped_packets_total")
    );
}

/// Waits (20 s at most) until every `(series, value)` holds; the samples then.
fn wait_for(lab: &Lab, want: &[(&str, f64)]) -> BTreeMap<String, f64> {
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        let (text, m) = scrape(lab);
        if want.iter().all(|(s, v)| m.get(*s) == Some(v)) {
            return m;
        }
        assert!(
            Instant::now() < end,
            "not {want:?} within 20 s:\n{text}\n{}",
            lab.ctl(&["status"])
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn lab_metrics_add_up_and_follow_health_drain_and_spillover() {
    let lab = Lab::up(&LAB_SH, &["gue"], &[("LAB_REGIONS", "2")]);
    let web = "service=\"web\"";
    let region = |r: &str| format!("{{{web},region=\"{r}\"}}");
    let lab_ratio = format!("spillway_service_region_new_flows_ratio{}", region("lab"));
    let far_ratio = format!("spillway_service_region_new_flows_ratio{}", region("far"));
    let spill = format!("spillway_service_spillover_ratio{{{web}}}");
    let drained = "spillway_drained{scope=\"zone\",name=\"lab-a\"}";
    wait_for(
        &lab,
        &[
            (
                &format!("spillway_service_region_healthy{}", region("lab")),
                1.0,
            ),
            (
                &format!("spillway_service_region_healthy{}", region("far")),
                1.0,
            ),
            (&lab_ratio, 1.0),
            (&spill, 0.0),
        ],
    );

    // Traffic all along: new connections, and SYNs to a port no rule
    // takes (drops), while the test scrapes.
    let stop = Arc::new(AtomicBool::new(false));
    let stop_c = stop.clone();
    let traffic = lab.in_client(move || {
        let (mut answered, mut failed) = (0, 0);
        while !stop_c.load(Ordering::Relaxed) {
            if lab::http_get(Duration::from_secs(2)).starts_with("backend") {
                answered += 1;
            } else {
                failed += 1;
            }
            let closed: SocketAddrV4 = "198.18.10.10:9".parse().expect("addr");
            let _ = TcpStream::connect_timeout(&closed.into(), Duration::from_millis(20));
        }
        (answered, failed)
    });
    for round in 0..5 {
        std::thread::sleep(Duration::from_millis(700));
        let (text, m) = scrape(&lab);
        if round == 0 {
            let (families, samples) = reference_parse(&text);
            assert!(
                families > 50 && samples == m.len(),
                "{families} families, {samples} samples"
            );
        }
        check_identities(&m, "spillway_", "");
        check_identities(&m, "spillway_worker_", "{worker=\"0\"}");
        assert!(get(&m, "spillway_worker_polls_total{worker=\"0\"}") > 0.0);
        assert!(get(&m, "spillway_worker_busy_cycles_per_packet{worker=\"0\"}") > 0.0);
        let fill = get(&m, "spillway_worker_burst_fill_ratio{worker=\"0\"}");
        assert!(fill > 0.0 && fill <= 1.0, "burst fill {fill}");
        assert!(get(&m, "spillway_service_packets_total{service=\"web\"}") > 0.0);
        assert!(get(&m, "spillway_config_generation") >= 1.0);
    }

    // Drain zone lab-a: its share spills to region far; undrain: back.
    lab.ctl(&["drain", "zone", "lab-a"]);
    wait_for(&lab, &[(drained, 1.0), (&far_ratio, 1.0), (&spill, 1.0)]);
    lab.ctl(&["undrain", "zone", "lab-a"]);
    let m = wait_for(&lab, &[(&lab_ratio, 1.0), (&spill, 0.0)]);
    assert!(!m.contains_key(drained), "undrained: no sample");

    // A reload that fails is counted, and says so.
    let (_, m) = scrape(&lab);
    let rejected = get(&m, "spillway_config_reloads_total{result=\"rejected\"}");
    let config = std::fs::read_to_string(lab.dir().join("lab.toml")).expect("config");
    std::fs::write(lab.dir().join("lab.toml"), "[node]\nname = 3\n").expect("break config");
    let out = Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(["reload", "--socket"])
        .arg(lab.socket())
        .output()
        .expect("reload");
    assert!(!out.status.success(), "a broken config is refused");
    std::fs::write(lab.dir().join("lab.toml"), config).expect("restore config");
    let m = wait_for(&lab, &[("spillway_config_last_reload_success", 0.0)]);
    assert_eq!(
        get(&m, "spillway_config_reloads_total{result=\"rejected\"}"),
        rejected + 1.0
    );
    assert!(get(&m, "spillway_config_last_reload_timestamp_seconds") > 1.7e9);

    // Region lab's web servers die: their health, the region's and the
    // spillover follow.
    for i in 1..=2 {
        let pid = std::fs::read_to_string(lab.dir().join(format!("http{i}.pid"))).expect("pid");
        common::run_ok(Command::new("kill").arg(pid.trim()));
    }
    let m = wait_for(
        &lab,
        &[
            (
                "spillway_endpoint_healthy{service=\"web\",endpoint=\"198.18.2.11:80\"}",
                0.0,
            ),
            (
                "spillway_endpoint_healthy{service=\"web\",endpoint=\"198.18.2.12:80\"}",
                0.0,
            ),
            (
                &format!("spillway_service_region_healthy{}", region("lab")),
                0.0,
            ),
            (&far_ratio, 1.0),
            (&spill, 1.0),
        ],
    );
    let eligible =
        format!("spillway_service_region_endpoints{{{web},region=\"lab\",state=\"eligible\"}}");
    assert_eq!(get(&m, &eligible), 0.0);
    stop.store(true, Ordering::Relaxed);
    let (answered, _) = traffic.join().expect("traffic");
    assert!(answered > 0);
    let (_, m) = scrape(&lab);
    check_identities(&m, "spillway_", "");
    check_identities(&m, "spillway_worker_", "{worker=\"0\"}");
    let far = "spillway_endpoint_packets_total{service=\"web\",group=\"far-a\",region=\"far\",zone=\"far-a\",endpoint=\"198.18.2.13\"}";
    assert!(get(&m, far) > 0.0, "region far took the traffic");
    // Every flow entry was created for one endpoint, and what an endpoint
    // was sent is at least its packets' inner minimum (a 20-byte header).
    assert_eq!(
        sum(&m, "spillway_endpoint_new_flows_total", ""),
        get(&m, "spillway_flows_new_total"),
        "endpoints' new flows add up to the flow table's"
    );
    for (k, packets) in m
        .iter()
        .filter(|(k, _)| k.starts_with("spillway_endpoint_packets_total{"))
    {
        let bytes = k.replace("endpoint_packets_total", "endpoint_bytes_total");
        assert!(
            get(&m, &bytes) >= 20.0 * packets,
            "{bytes}: {} for {packets} packets",
            get(&m, &bytes)
        );
    }
}
