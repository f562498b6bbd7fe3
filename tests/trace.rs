//! `spillway trace` against a live daemon (net_pcap ports replaying a
//! capture without end): the decisions of the packets a filter takes, in
//! simulate's words, bounded by a count or a time; filters by address,
//! port, rule and drop reason; bad queries refused; one trace at a time.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

mod common;

use std::process::Command;
use std::time::Duration;

use common::{spillway, text};

#[test]
fn trace_shows_live_decisions_for_the_packets_a_filter_takes() {
    // Queries to the VIP, and datagrams to an address that is no VIP.
    let mut frames: Vec<Vec<u8>> = (0..32).map(common::dns_query).collect();
    frames.extend((0..8).map(|i| {
        testkit::packet::Packet::udp(
            testkit::packet::v4("192.0.2.7"),
            testkit::packet::v4("10.0.0.99"),
            2000 + i,
            53,
        )
        .payload(b"quer")
        .macs(common::ROUTER_MAC, common::PCAP0_MAC)
        .frame()
    }));
    let dir = common::pcap_daemon_dir("trace", &frames);
    let cfg = dir.join("spillway.toml");
    std::fs::write(&cfg, common::looping_pcap_daemon_config(&dir, "dns")).expect("config");
    let log = dir.join("daemon.log");
    let mut daemon = common::Daemon::start(&dir, &cfg, Some(&log));
    let socket = dir.join("ctl.sock");
    let sock = socket.to_str().expect("utf-8").to_owned();
    daemon.wait_answering(&socket, &log);

    // Five queries of one client port: rule, service, backend, entry.
    let o = spillway(&[
        "trace",
        "--socket",
        &sock,
        "--src",
        "192.0.2.1",
        "--dst",
        "10.0.0.10",
        "--sport",
        "1003",
        "--count",
        "5",
        "--seconds",
        "20",
    ]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert_eq!(
        t.matches("worker 0 port up: 192.0.2.1:1003 > 10.0.0.10:53 udp, 46 bytes")
            .count(),
        5,
        "{t}"
    );
    assert_eq!(t.matches("outcome: forward").count(), 5, "{t}");
    assert_eq!(
        t.matches("rule: dns (dns-ag0), service dns").count(),
        5,
        "{t}"
    );
    assert!(t.contains("5 packets traced in "), "{t}");
    assert!(t.contains("(stopped by count)"), "{t}");
    assert!(t.contains("pinned"), "the flow's entry pins it: {t}");
    assert!(t.contains("delivery gue (port 6080)"), "{t}");
    assert!(
        !t.contains("192.0.2.7"),
        "the filter leaves other clients out: {t}"
    );

    // JSON, by rule and outcome: one backend for the one flow.
    let o = spillway(&[
        "trace",
        "--socket",
        &sock,
        "--rule",
        "dns",
        "--sport",
        "1010",
        "--forwarded",
        "--count",
        "3",
        "--json",
    ]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    let v: serde_json::Value =
        serde_json::from_str(t.trim()).unwrap_or_else(|e| panic!("{e}: {t}"));
    let packets = v["packets"].as_array().expect("packets");
    assert_eq!(packets.len(), 3, "{t}");
    let backends: std::collections::BTreeSet<_> = packets
        .iter()
        .map(|p| {
            p["decision"]["backend"]["address"]
                .as_str()
                .unwrap_or("none")
                .to_owned()
        })
        .collect();
    assert_eq!(backends.len(), 1, "one flow, one backend: {t}");
    assert!(
        backends
            .iter()
            .all(|b| b == "10.0.1.11" || b == "10.0.1.12"),
        "{t}"
    );
    assert!(
        packets
            .iter()
            .all(|p| p["decision"]["flow_entry"] == "pinned" && p["sport"] == 1010),
        "{t}"
    );

    // Drops, by their counter's name.
    let o = spillway(&[
        "trace", "--socket", &sock, "--drop", "not_ours", "--count", "4",
    ]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert_eq!(t.matches("outcome: drop (not_ours)").count(), 4, "{t}");
    assert_eq!(t.matches("> 10.0.0.99:53 udp").count(), 4, "{t}");
    assert!(
        t.contains("10.0.0.99 is not a VIP or an own address of this node"),
        "{t}"
    );

    // Nothing matches: it ends by its time, with nothing.
    let o = spillway(&[
        "trace",
        "--socket",
        &sock,
        "--dst",
        "10.0.0.10",
        "--dport",
        "80",
        "--seconds",
        "1",
    ]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(
        t.contains("0 packets traced in ") && t.contains("(stopped by time)"),
        "{t}"
    );

    // Bad queries: refused before or by the daemon, with the reason.
    let o = spillway(&["trace", "--socket", &sock, "--rule", "nope"]);
    assert!(
        !o.status.success() && text(&o).contains("rule=nope: no such rule"),
        "{}",
        text(&o)
    );
    let o = spillway(&["trace", "--socket", &sock, "--drop", "bogus"]);
    assert!(
        !o.status.success() && text(&o).contains("not a drop reason"),
        "{}",
        text(&o)
    );
    let o = spillway(&["trace", "--socket", &sock, "--seconds", "99"]);
    assert!(
        !o.status.success() && text(&o).contains("not 1 to 25"),
        "{}",
        text(&o)
    );

    // One at a time: a second trace while one runs is refused.
    let mut first = Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(["trace", "--socket", &sock, "--dport", "9", "--seconds", "3"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("first trace");
    std::thread::sleep(Duration::from_millis(500));
    let o = spillway(&["trace", "--socket", &sock, "--seconds", "1"]);
    assert!(
        !o.status.success() && text(&o).contains("a trace is being taken"),
        "{}",
        text(&o)
    );
    assert!(first.wait().expect("wait").success());
    // The daemon forwards on, and says what it traced.
    assert!(
        daemon.child.try_wait().expect("wait").is_none(),
        "the daemon is still running"
    );
    let logged = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        logged.contains("trace started: trace src=192.0.2.1/32 dst=10.0.0.10/32 sport=1003"),
        "{logged}"
    );
}
