//! The control commands against one running daemon (DPDK net_pcap ports),
//! each for people and with `--json`: the JSON is parsed and its values
//! checked against the configuration and the traffic replayed, and the
//! human text is checked to say the same.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

mod common;

use std::io::BufRead;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::write_pcap;
use serde_json::Value;

/// Datagrams replayed: 192.0.2.1:(1000+i) -> 10.0.0.10:53.
const FLOWS: u16 = 200;

fn spillway(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(args)
        .output()
        .expect("run spillway")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn show(o: &Output) -> String {
    format!(
        "{:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn config(dir: &Path) -> String {
    common::pcap_daemon_config(dir, "dns", false)
}

/// A client command with `--socket`, for people: its output.
fn human(socket: &str, args: &[&str]) -> Output {
    let mut a = args.to_vec();
    a.extend(["--socket", socket]);
    spillway(&a)
}

/// The same with `--json`: the exit status and the one JSON object printed
/// on stdout (whatever the outcome).
fn json(socket: &str, args: &[&str]) -> (bool, Value) {
    let mut a = args.to_vec();
    a.extend(["--socket", socket, "--json"]);
    let o = spillway(&a);
    let out = stdout(&o);
    assert_eq!(out.lines().count(), 1, "one line: {}", show(&o));
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {}", show(&o)));
    assert_eq!(
        v["ok"].as_bool(),
        Some(o.status.success()),
        "\"ok\" says what the exit status says: {}",
        show(&o)
    );
    (o.status.success(), v)
}

/// A successful `--json` answer.
fn json_ok(socket: &str, args: &[&str]) -> Value {
    let (ok, v) = json(socket, args);
    assert!(ok, "{args:?}: {v}");
    v
}

/// A successful answer for people.
fn human_ok(socket: &str, args: &[&str]) -> String {
    let o = human(socket, args);
    assert!(o.status.success(), "{args:?}: {}", show(&o));
    stdout(&o)
}

#[test]
fn every_control_command_answers_for_people_and_in_json() {
    let dir = std::env::temp_dir().join(format!("spillway-cli-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let frames: Vec<Vec<u8>> = (0..FLOWS).map(common::dns_query).collect();
    write_pcap(&dir.join("in.pcap"), &frames);
    write_pcap(&dir.join("empty.pcap"), &[]);
    let cfg = dir.join("spillway.toml");
    std::fs::write(&cfg, config(&dir)).expect("config");
    let mut daemon = common::Daemon::start(&dir, &cfg, None);
    let socket = dir.join("ctl.sock").to_str().expect("utf-8").to_owned();
    let s = socket.as_str();

    // Until every datagram is forwarded (and a second more, so that the
    // rates have a sample a second old).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(Some(st)) = daemon.child.try_wait() {
            panic!("spillway run exited: {st}");
        }
        let (ok, v) = json(s, &["stats"]);
        if ok && v["traffic"]["forwarded"] == u64::from(FLOWS) && !v["rates"].is_null() {
            break;
        }
        assert!(Instant::now() < deadline, "not forwarded: {v}");
        std::thread::sleep(Duration::from_millis(200));
    }

    // stats
    let st = json_ok(s, &["stats"]);
    let n = u64::from(FLOWS);
    assert_eq!(st["traffic"]["rx_packets"], n, "{st}");
    assert_eq!(st["traffic"]["forwarded"], n, "{st}");
    assert_eq!(st["traffic"]["tx_dropped"], 0, "{st}");
    assert_eq!(st["flows"]["new_flows"], n, "{st}");
    assert!(
        st["drops"]
            .as_object()
            .unwrap()
            .values()
            .all(|d| d == &Value::from(0)),
        "{st}"
    );
    assert_eq!(st["rules"][0]["name"], "dns-ag0", "{st}");
    assert_eq!(st["rules"][0]["packets"], n, "{st}");
    assert_eq!(st["listeners"][0]["name"], "control", "{st}");
    let rates = &st["rates"];
    assert!(rates["interval_s"].as_f64().unwrap() >= 1.0, "{st}");
    assert!(rates["forwarded"].as_f64().unwrap() >= 0.0, "{st}");
    let text = human_ok(s, &["stats"]);
    assert!(
        text.starts_with(&format!("rx {n} packets ")),
        "the first line is the traffic's: {text}"
    );
    assert!(text.contains(&format!("; forwarded {n};")), "{text}");
    assert!(text.contains("tx dropped 0"), "{text}");
    assert!(
        text.contains(&format!("rule dns-ag0: {n} packets")),
        "{text}"
    );
    assert!(text.contains("rates over the last "), "{text}");
    // The forwarded rate beside its total (how much is a matter of time).
    assert!(
        text.lines().any(|l| {
            let w: Vec<_> = l.split_whitespace().collect();
            w.len() == 3
                && w[..2] == ["forwarded", n.to_string().as_str()]
                && w[2].parse::<f64>().is_ok()
        }),
        "{text}"
    );

    // status
    let v = json_ok(s, &["status"]);
    assert_eq!(
        (&v["node"], &v["region"], &v["zone"]),
        (&"t".into(), &"r".into(), &"z".into()),
        "{v}"
    );
    assert_eq!(v["availability_group"], Value::Null, "{v}");
    assert_eq!(v["generation"], 1, "{v}");
    assert_eq!(v["flow_table"]["live"], n, "{v}");
    assert_eq!(v["flow_table"]["capacity"], 4096, "{v}");
    let rule = &v["rules"][0];
    assert_eq!(rule["name"], "dns", "{v}");
    assert_eq!(rule["state"], "HEALTHY", "{v}");
    assert_eq!(rule["service"], "dns", "{v}");
    assert_eq!(rule["vips"][0]["vip"], "10.0.0.10", "{v}");
    assert_eq!(rule["vips"][0]["child_rule"], "dns-ag0", "{v}");
    assert_eq!(rule["vips"][0]["served"], true, "{v}");
    assert_eq!(rule["vips"][0]["state"], "HEALTHY", "{v}");
    let svc = &v["services"][0];
    assert_eq!(svc["name"], "dns", "{v}");
    assert_eq!(svc["eligible_backends"], 2, "{v}");
    assert_eq!(svc["health"], "Healthy", "{v}");
    let region = &svc["regions"][0];
    assert_eq!(region["name"], "r", "{v}");
    assert_eq!(
        (
            &region["endpoints"],
            &region["healthy"],
            &region["eligible"]
        ),
        (&2.into(), &2.into(), &2.into()),
        "{v}"
    );
    assert_eq!(region["new_flows_fraction"], 1.0, "{v}");
    // UTILIZATION (the default) with no health check: nothing reports a
    // utilization, and status says so (M25).
    assert_eq!(region["utilization"], "unknown", "{v}");
    assert_eq!(
        svc["capacity"], "unlimited (utilization unknown: no health check)",
        "{v}"
    );
    let backends: Vec<&str> = v["backends"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["address"].as_str().unwrap())
        .collect();
    assert_eq!(backends, ["10.0.1.11", "10.0.1.12"], "{v}");
    assert_eq!(v["drained"], Value::Array(vec![]), "{v}");
    let text = human_ok(s, &["status"]);
    for want in [
        "node t (region r, zone z)\n",
        "snapshot generation 1, reloads 0 ok / 0 rejected",
        "availability group both; drain state: none",
        &format!("flow table: {n} live of 4096 (0 half-open)"),
        "service dns: gue (port 6080) (2 eligible backends)",
        "region r: Healthy, 2 endpoints (2 healthy, 0 unknown, 2 eligible)",
        "of capacity unlimited, utilization unknown, new flows 100.0 %",
        "eligibility Healthy, capacity unlimited (utilization unknown: no health check)\n",
        "rule dns: HEALTHY",
        "  child rule dns-ag0 (VIP 10.0.0.10): HEALTHY",
    ] {
        assert!(text.contains(want), "{want:?} in:\n{text}");
    }
    // The tables: a rule row, a service row.
    let row = |first: &str| {
        text.lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .find(|w| w.first() == Some(&first))
            .unwrap_or_else(|| panic!("no {first} row in:\n{text}"))
    };
    assert_eq!(row("RULE")[..4], ["RULE", "STATE", "SERVICE", "VIP"]);
    assert_eq!(row("dns")[..4], ["dns", "HEALTHY", "dns", "10.0.0.10"]);
    assert_eq!(row("SERVICE")[..3], ["SERVICE", "REGION", "HEALTH"]);

    // flows, with and without filters
    let f = json_ok(s, &["flows", "--limit", "3"]);
    assert_eq!((&f["matched"], &f["live"]), (&n.into(), &n.into()), "{f}");
    let listed = f["flows"].as_array().unwrap();
    assert_eq!(listed.len(), 3, "{f}");
    let first = &listed[0];
    assert_eq!(first["proto"], "udp", "{f}");
    assert_eq!(first["client"], "192.0.2.1", "{f}");
    assert_eq!(first["vip"], "10.0.0.10", "{f}");
    assert_eq!(first["vip_port"], 53, "{f}");
    assert_eq!(first["service"], "dns", "{f}");
    let port = first["client_port"].as_u64().unwrap();
    assert!((1000..1000 + n).contains(&port), "{f}");
    let backend = first["backend"].as_str().unwrap();
    assert!(backends.contains(&backend), "{f}");
    let text = human_ok(s, &["flows", "--limit", "3"]);
    assert!(
        text.starts_with(&format!(
            "udp 192.0.2.1:{port} -> 10.0.0.10:53 service dns backend {backend} "
        )),
        "the same first entry: {text}"
    );
    assert!(
        text.contains(&format!("{n} matching flows of {n} live entries (3 listed")),
        "{text}"
    );
    let count = |args: &[&str]| {
        let mut a = vec!["flows", "--limit", "0"];
        a.extend(args);
        json_ok(s, &a)["matched"].as_u64().unwrap()
    };
    assert_eq!(count(&["--proto", "udp"]), n);
    assert_eq!(count(&["--proto", "tcp"]), 0);
    assert_eq!(count(&["--service", "dns", "--vip", "10.0.0.10"]), n);
    let by_state: u64 = control::flows::STATES
        .iter()
        .map(|st| count(&["--state", st]))
        .sum();
    assert_eq!(by_state, n, "every entry is in exactly one state");
    assert_eq!(
        count(&[
            "--state",
            first["state"].as_str().unwrap(),
            "--proto",
            "udp"
        ]),
        n,
        "one datagram each: every entry in the same state"
    );

    // simulate: the flow of the first entry listed follows its entry.
    let sport = port.to_string();
    let sim = [
        "simulate",
        "--src",
        "192.0.2.1",
        "--dst",
        "10.0.0.10",
        "--proto",
        "udp",
        "--sport",
        &sport,
        "--dport",
        "53",
    ];
    let v = json_ok(s, &sim);
    assert_eq!(v["outcome"], "forward", "{v}");
    assert_eq!(v["rule"], "dns", "{v}");
    assert_eq!(v["child_rule"], "dns-ag0", "{v}");
    assert_eq!(v["service"], "dns", "{v}");
    assert_eq!(v["flow_entry"], "pinned", "{v}");
    assert_eq!(v["backend"]["address"], backend, "{v}");
    assert_eq!(v["backend"]["region"], "r", "{v}");
    assert_eq!(v["flow_hash"].as_str().unwrap().len(), 16, "{v}");
    let text = human_ok(s, &sim);
    assert!(text.starts_with("outcome: forward\n"), "{text}");
    assert!(
        text.contains(&format!("backend: {backend} (active, pinned)")),
        "{text}"
    );

    // reload: accepted, then refused.
    let text = human_ok(s, &["reload"]);
    assert_eq!(text, "reloaded: generation 2 is live\n");
    let v = json_ok(s, &["reload"]);
    assert_eq!(
        (&v["result"], &v["generation"]),
        (&"live".into(), &3.into()),
        "{v}"
    );
    std::fs::write(&cfg, "[node\n").expect("config");
    let o = human(s, &["reload"]);
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("reload rejected"),
        "{}",
        show(&o)
    );
    let (ok, v) = json(s, &["reload"]);
    assert!(!ok);
    let error = v["error"].as_str().unwrap();
    assert!(
        error.starts_with("reload rejected") && error.contains("spillway.toml"),
        "{v}"
    );
    let v = json_ok(s, &["status"]);
    assert_eq!(
        (&v["generation"], &v["reloads_ok"], &v["reloads_rejected"]),
        (&3.into(), &2.into(), &2.into()),
        "{v}"
    );
    assert!(
        v["last_reload_error"]
            .as_str()
            .unwrap()
            .contains("spillway.toml"),
        "{v}"
    );

    // drain and undrain
    let text = human_ok(s, &["drain", "node", "t"]);
    assert!(text.contains("node t"), "{text}");
    let v = json_ok(s, &["drain", "node", "t"]);
    assert_eq!(
        (&v["scope"], &v["name"], &v["drained"]),
        (&"node".into(), &"t".into(), &true.into()),
        "{v}"
    );
    let st = json_ok(s, &["status"]);
    assert_eq!(st["drained"][0]["scope"], "node", "{st}");
    assert_eq!(st["drained"][0]["name"], "t", "{st}");
    let text = human_ok(s, &["status"]);
    assert!(text.contains("drained: node t\n"), "{text}");
    assert!(text.contains("drain state: node t drained"), "{text}");
    let v = json_ok(s, &["undrain", "node", "t"]);
    assert_eq!(v["drained"], false, "{v}");
    assert_eq!(json_ok(s, &["status"])["drained"], Value::Array(vec![]));
    let (ok, v) = json(s, &["drain", "zone", "nope"]);
    assert!(!ok);
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("unknown zone \"nope\""),
        "{v}"
    );
    let o = human(s, &["undrain", "zone", "nope"]);
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("unknown zone \"nope\""),
        "{}",
        show(&o)
    );
    // A zone named `json` is a name, not the flag.
    let (ok, v) = json(s, &["drain", "zone", "json"]);
    assert!(!ok);
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("unknown zone \"json\""),
        "{v}"
    );
    // Refused by the client already: the same JSON error.
    let (ok, v) = json(s, &["drain", "zone", "a\"b"]);
    assert!(
        !ok && v["error"].as_str().unwrap().contains("not a name"),
        "{v}"
    );

    // The socket's line protocol: `json` as the last word; without it the
    // answer is text as before.
    let sock = Path::new(s);
    let (ok, text) = control::socket::request(sock, "status").expect("ask");
    assert!(ok && text.starts_with("node t "), "{text}");
    let (ok, text) = control::socket::request(sock, "flows limit=1 json").expect("ask");
    let v: Value = serde_json::from_str(&text).expect("JSON");
    assert!(ok && v["flows"].as_array().unwrap().len() == 1, "{text}");
    let (ok, text) = control::socket::request(sock, "frobnicate json").expect("ask");
    let v: Value = serde_json::from_str(&text).expect("JSON");
    assert!(!ok, "{text}");
    assert_eq!(v["ok"], false, "{text}");
    assert!(
        v["error"].as_str().unwrap().contains("unknown command"),
        "{text}"
    );
    let (ok, text) = control::socket::request(sock, "flows limit=x json").expect("ask");
    assert!(
        !ok && text.contains("\"error\":\"limit=\\\"x\\\": not a count\""),
        "{text}"
    );

    // stats --watch, not on a terminal: one answer after another (one JSON
    // object a line under --json) until stopped.
    for (extra, starts) in [(None, "rx "), (Some("--json"), "{\"ok\":true,")] {
        let mut args = vec!["stats", "--socket", s, "--watch", "0.2"];
        args.extend(extra);
        let mut w = Command::new(env!("CARGO_BIN_EXE_spillway"))
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("stats --watch");
        let out = w.stdout.take().expect("stdout");
        let answers = std::io::BufReader::new(out)
            .lines()
            .map(|l| l.expect("a line"))
            .filter(|l| l.starts_with(starts))
            .take(3)
            .count();
        let _ = w.kill();
        let _ = w.wait();
        assert_eq!(answers, 3, "{args:?}");
    }

    // Without a daemon: the same JSON error object.
    let (ok, v) = json("/nonexistent/spillway.sock", &["status"]);
    assert!(!ok);
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("cannot reach spillway at /nonexistent/spillway.sock"),
        "{v}"
    );
}
