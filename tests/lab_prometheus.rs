//! Debian's Prometheus scrapes the balancer of scripts/lab.sh (a scrape a
//! second, the shipped `scripts/deploy/prometheus/alerts.yml` as its rule
//! file) while real TCP clients go through it, and its HTTP API answers
//! what an operator asks (docs/operating.md, "Monitoring with
//! Prometheus"): packets per rule and per second, through the recording
//! rules too; drops by reason; health per endpoint — each equal to what the
//! daemon's own `/metrics` says once the traffic stops. Every rule group
//! of alerts.yml is loaded and evaluated with health "ok", and a rejected
//! reload fires SpillwayReloadRejected. Needs root; Prometheus runs in the
//! balancer's namespace, on its loopback, with storage in the lab's
//! directory.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddrV4, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::lab::{self, LAB_SH, Lab};
use serde_json::Value;

/// Prometheus's address inside the balancer's namespace.
const PROMETHEUS: &str = "127.0.0.1:9090";

fn alerts_yml() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/deploy/prometheus/alerts.yml")
}

/// A Prometheus server of its own for the lab; stopped when dropped.
struct Prometheus {
    child: Child,
    log: PathBuf,
}

impl Prometheus {
    /// Starts `prometheus` in the lab's balancer namespace, scraping the
    /// daemon's `/metrics` (job `spillway`) every second and evaluating
    /// alerts.yml every second.
    fn start(lab: &Lab) -> Prometheus {
        let dir = lab.dir().join("prometheus");
        std::fs::create_dir_all(&dir).expect("prometheus dir");
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
                 rule_files:\n  - {}\n\
                 scrape_configs:\n  - job_name: spillway\n    static_configs:\n      - targets: ['127.0.0.1:9469']\n",
                alerts_yml().display()
            ),
        )
        .expect("prometheus.yml");
        let log = dir.join("prometheus.log");
        let out = std::fs::File::create(&log).expect("log");
        let child = Command::new("ip")
            .args(["netns", "exec", &lab.ns("lb"), "prometheus"])
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={PROMETHEUS}"))
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("log"))
            .stderr(out)
            .spawn()
            .expect("run prometheus in the lab");
        Prometheus { child, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `%XX` for everything but RFC 3986's unreserved characters.
fn percent(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// `GET path` of Prometheus (from the balancer's namespace): the status
/// code and the body, or `None` while it does not accept connections.
fn get(lab: &Lab, path: &str) -> Option<(u16, String)> {
    let path = path.to_owned();
    lab.in_ns("lb", move || {
        let addr: SocketAddrV4 = PROMETHEUS.parse().expect("address");
        let mut s = TcpStream::connect_timeout(&addr.into(), lab::TIMEOUT).ok()?;
        s.set_read_timeout(Some(lab::TIMEOUT)).ok()?;
        s.write_all(format!("GET {path} HTTP/1.0\r\nHost: prometheus\r\n\r\n").as_bytes())
            .ok()?;
        let mut answer = String::new();
        s.read_to_string(&mut answer).ok()?;
        let (head, body) = answer.split_once("\r\n\r\n")?;
        let code = head.split(' ').nth(1)?.parse().ok()?;
        Some((code, body.to_owned()))
    })
    .join()
    .expect("prometheus client")
}

/// An API answer's `data`; panics unless Prometheus says "success".
fn api(lab: &Lab, path: &str) -> Value {
    let (code, body) = get(lab, path).unwrap_or_else(|| panic!("no answer to {path}"));
    let v: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body}"));
    assert!(
        code == 200 && v["status"] == "success",
        "{path}: {code} {body}"
    );
    v["data"].clone()
}

/// An instant query's samples, by their labels (`{k="v",…}` in label
/// order, the metric name left out).
fn query(lab: &Lab, promql: &str) -> BTreeMap<String, f64> {
    let data = api(lab, &format!("/api/v1/query?query={}", percent(promql)));
    data["result"]
        .as_array()
        .expect("a vector")
        .iter()
        .map(|s| {
            let labels: Vec<String> = s["metric"]
                .as_object()
                .expect("metric")
                .iter()
                .filter(|(k, _)| *k != "__name__")
                .map(|(k, v)| format!("{k}={}", v.as_str().expect("label value")))
                .collect();
            let v = s["value"][1].as_str().expect("value");
            (labels.join(","), v.parse().expect("a number"))
        })
        .collect()
}

/// The daemon's own samples of `family`, keyed like [`query`]'s (with the
/// target's labels Prometheus adds).
fn daemon(m: &BTreeMap<String, f64>, family: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for (series, v) in m {
        let Some(rest) = series.strip_prefix(family) else {
            continue;
        };
        let mut labels: Vec<String> = vec!["instance=127.0.0.1:9469".into(), "job=spillway".into()];
        if let Some(inner) = rest.strip_prefix('{').and_then(|r| r.strip_suffix('}')) {
            // The lab's label values hold no comma or quote.
            labels.extend(inner.split(',').map(|kv| kv.replace('"', "")));
        } else if !rest.is_empty() {
            continue;
        }
        labels.sort();
        out.insert(labels.join(","), *v);
    }
    out
}

/// The daemon's `/metrics`, by series.
fn scrape(lab: &Lab) -> BTreeMap<String, f64> {
    lab::metric_samples(&lab.in_ns("lb", lab::metrics_here).join().expect("scrape"))
}

/// Waits (20 s at most, checking every 300 ms) until `ok` returns `Ok`;
/// on time out, says what its last `Err` saw.
fn wait<T>(what: &str, p: &Prometheus, mut ok: impl FnMut() -> Result<T, String>) -> T {
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        match ok() {
            Ok(v) => return v,
            Err(seen) if Instant::now() >= end => panic!(
                "{what}: not within 20 s; last seen:\n{seen}\nprometheus.log:\n{}",
                p.log()
            ),
            Err(_) => std::thread::sleep(Duration::from_millis(300)),
        }
    }
}

/// The rule names of alerts.yml, by group, as written there.
fn shipped_groups() -> BTreeMap<String, Vec<String>> {
    let text = std::fs::read_to_string(alerts_yml()).expect("alerts.yml");
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut group = String::new();
    for l in text.lines().map(str::trim) {
        if let Some(g) = l.strip_prefix("- name: ") {
            group = g.to_owned();
        } else if let Some(r) = l
            .strip_prefix("- record: ")
            .or_else(|| l.strip_prefix("- alert: "))
        {
            out.entry(group.clone()).or_default().push(r.to_owned());
        }
    }
    out
}

#[test]
fn prometheus_scrapes_the_lab_and_evaluates_the_shipped_rules() {
    let lab = Lab::up(&LAB_SH, &["gue"], &[("LAB_HEALTH", "1")]);
    let prom = Prometheus::start(&lab);
    wait("Prometheus ready", &prom, || match get(&lab, "/-/ready") {
        Some((200, _)) => Ok(()),
        other => Err(format!("{other:?}")),
    });

    // Every group of alerts.yml is loaded, each rule evaluated without error.
    let shipped = shipped_groups();
    assert!(
        shipped.len() == 2 && shipped.values().map(Vec::len).sum::<usize>() > 20,
        "{shipped:?}"
    );
    wait(
        "every rule of alerts.yml evaluated, health ok",
        &prom,
        || {
            let data = api(&lab, "/api/v1/rules");
            let loaded: BTreeMap<String, Vec<(String, String)>> = data["groups"]
                .as_array()
                .expect("groups")
                .iter()
                .map(|g| {
                    let rules = g["rules"]
                        .as_array()
                        .expect("rules")
                        .iter()
                        .map(|r| {
                            (
                                r["name"].as_str().expect("name").to_owned(),
                                r["health"].as_str().expect("health").to_owned(),
                            )
                        })
                        .collect();
                    (g["name"].as_str().expect("group").to_owned(), rules)
                })
                .collect();
            let names: BTreeMap<String, Vec<String>> = loaded
                .iter()
                .map(|(g, r)| (g.clone(), r.iter().map(|(n, _)| n.clone()).collect()))
                .collect();
            assert_eq!(names, shipped, "the rules Prometheus loaded");
            if loaded.values().flatten().all(|(_, health)| health == "ok") {
                Ok(())
            } else {
                Err(format!("{data:#}"))
            }
        },
    );

    // Every endpoint healthy, as Prometheus saw it.
    let health = "spillway_endpoint_healthy";
    wait("three healthy endpoints", &prom, || {
        let h = query(&lab, health);
        if h.len() == 3 && h.values().all(|v| *v == 1.0) {
            Ok(())
        } else {
            Err(format!("{h:#?}"))
        }
    });

    // Traffic: new connections through the VIP, and SYNs to a port no rule
    // takes (drops for no_rule), for as long as the rates take to show.
    let stop = Arc::new(AtomicBool::new(false));
    let stop_c = stop.clone();
    let traffic = lab.in_client(move || {
        let mut answered = 0;
        while !stop_c.load(Ordering::Relaxed) {
            if lab::http_get(Duration::from_secs(2)).starts_with("backend") {
                answered += 1;
            }
            let closed: SocketAddrV4 = "198.18.10.10:9".parse().expect("addr");
            let _ = TcpStream::connect_timeout(&closed.into(), Duration::from_millis(20));
        }
        answered
    });
    let rates = wait("per-rule and drop rates", &prom, || {
        let per_rule = query(&lab, "instance_rule:spillway_rule_packets:rate1m > 0");
        let direct = query(
            &lab,
            "sum by (rule) (rate(spillway_rule_packets_total[5s])) > 0",
        );
        let drops = query(
            &lab,
            "instance_reason:spillway_dropped_packets:rate1m{reason=\"no_rule\"} > 0",
        );
        let all = (per_rule, direct, drops);
        if all.0.is_empty() || all.1.is_empty() || all.2.is_empty() {
            Err(format!("{all:#?}"))
        } else {
            Ok(all)
        }
    });
    stop.store(true, Ordering::Relaxed);
    let answered = traffic.join().expect("traffic");
    assert!(answered > 0, "no request answered through the VIP");
    eprintln!("rates while {answered} requests were answered: {rates:#?}");
    let (per_rule, direct, _) = &rates;
    assert!(
        per_rule.keys().all(|k| k.contains("rule=web"))
            && direct.keys().all(|k| k.contains("rule=web")),
        "only rule web had traffic: {rates:?}"
    );

    // Once the traffic stopped, Prometheus's latest samples are what the
    // daemon says: per rule, by drop reason, per endpoint's health.
    let families = [
        "spillway_rule_packets_total",
        "spillway_rule_new_flows_total",
        "spillway_dropped_packets_total",
        health,
    ];
    let agreed = wait("Prometheus's samples equal the daemon's", &prom, || {
        let m = scrape(&lab);
        let mut seen = Vec::new();
        for f in families {
            let (ours, theirs) = (daemon(&m, f), query(&lab, f));
            if ours != theirs {
                return Err(format!("{f}: daemon {ours:#?}\nprometheus {theirs:#?}"));
            }
            seen.push((f, ours));
        }
        Ok(seen)
    });
    for (f, samples) in &agreed {
        assert!(!samples.is_empty(), "{f}: no sample");
    }
    let value = |f: &str, with: &str| -> f64 {
        agreed
            .iter()
            .filter(|(name, _)| *name == f)
            .flat_map(|(_, s)| s.iter())
            .filter(|(k, _)| k.contains(with))
            .map(|(_, v)| v)
            .sum()
    };
    assert!(value("spillway_rule_packets_total", "rule=web") > 0.0);
    assert!(value("spillway_dropped_packets_total", "reason=no_rule") > 0.0);
    // By reason, summed as a dashboard does: the same figures.
    let by_reason = query(&lab, "sum by (reason) (spillway_dropped_packets_total)");
    assert_eq!(
        by_reason.get("reason=no_rule"),
        Some(&value("spillway_dropped_packets_total", "reason=no_rule")),
        "{by_reason:?}"
    );

    // A rejected reload fires SpillwayReloadRejected (no `for`). The file
    // stays broken meanwhile: the daemon's file watch would reload a
    // restored one, and the alert would end.
    std::fs::write(lab.dir().join("lab.toml"), "[node]\nname = 3\n").expect("break config");
    let out = common::output(
        Command::new(env!("CARGO_BIN_EXE_spillway"))
            .args(["reload", "--socket"])
            .arg(lab.socket()),
    );
    assert!(
        !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("name"),
        "a broken config is refused: {out:?}"
    );
    wait("SpillwayReloadRejected firing", &prom, || {
        let alerts = api(&lab, "/api/v1/alerts");
        let firing = alerts["alerts"]
            .as_array()
            .expect("alerts")
            .iter()
            .any(|a| {
                a["labels"]["alertname"] == "SpillwayReloadRejected" && a["state"] == "firing"
            });
        if firing {
            Ok(())
        } else {
            Err(format!("{alerts:#}"))
        }
    });
}
