//! `spillway replay` on the capture's clock: endpoint health windows,
//! locality (zonal affinity, region failover, spillover, remote rules),
//! reloads and neighbours changing mid-capture as the daemon's management
//! core would change them.
//!
//! Every test writes a configuration and a pcap of hand-built packets, runs
//! the `spillway` binary, and checks the transmitted frames byte by byte
//! (outer headers decoded by `common::replay`, not by the `wire` crate under
//! test) and the summary's counters.

#![allow(clippy::cast_possible_truncation)] // test values are small
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

mod common;

use std::collections::BTreeSet;
use std::net::IpAddr;

use common::replay::*;
use common::*;
use testkit::config::{Config, Table, endpoint_list, group, node, port, rule, service};
use wire::encap::{DecapConfig, parse_tunnel};

/// `--down ADDRESS@FROM-UNTIL` and `@FROM`: the endpoint fails its health
/// check for those seconds of the capture only. A backend that joins takes
/// new connections and none of the existing ones; one that fails keeps its
/// TCP connections (persistence, M11) and takes no new ones.
#[test]
fn replay_down_windows_change_health_mid_capture() {
    let d = dir("down-window");
    let cfg = d.join("c.toml");
    std::fs::write(&cfg, config().build()).expect("config");
    let vip = [10, 0, 0, 10];
    let conn = |set: u8, i: u16, flags: u8| {
        tcp_frame(
            IpAddr::from([192, 0, set, (i % 250) as u8 + 1]),
            IpAddr::from(vip),
            20000 + i,
            80,
            flags,
            &[],
        )
    };
    // Second 0: connections A open (10.0.1.13 down until second 2).
    // Second 2: A's ACKs; connections B open. Second 3 (10.0.1.12 down from
    // then on): A's ACKs again; connections C open.
    let mut frames = Vec::new();
    frames.extend((0..60).map(|i| (0, conn(1, i, SYN))));
    frames.extend((0..60).map(|i| (2, conn(1, i, ACK))));
    frames.extend((0..60).map(|i| (2, conn(2, i, SYN))));
    frames.extend((0..60).map(|i| (3, conn(1, i, ACK))));
    frames.extend((0..60).map(|i| (3, conn(3, i, SYN))));
    let input = d.join("in.pcap");
    write_timed_pcap(&input, &frames);
    let out = d.join("out.pcap");
    let r = replay(
        &cfg,
        &input,
        &out,
        &["--down", "10.0.1.13@0-2", "--down", "10.0.1.12@3"],
    );
    let text = String::from_utf8_lossy(&r.stdout).to_string() + &String::from_utf8_lossy(&r.stderr);
    assert!(r.status.success(), "{text}");
    assert!(
        text.contains("health: second 2: 10.0.1.13 up")
            && text.contains("health: second 3: 10.0.1.12 down"),
        "{text}"
    );
    let got = read_pcap(&out);
    assert_eq!(got.len(), frames.len(), "{text}");
    let backend = |f: &Vec<u8>| {
        parse_tunnel(f, &DecapConfig::default())
            .expect("an IPIP frame")
            .dst_ip
            .to_string()
    };
    let of =
        |range: std::ops::Range<usize>| -> Vec<String> { got[range].iter().map(backend).collect() };
    let (a_syn, a_ack2, b_syn, a_ack3, c_syn) = (
        of(0..60),
        of(60..120),
        of(120..180),
        of(180..240),
        of(240..300),
    );
    assert!(!a_syn.contains(&"10.0.1.13".to_string()), "{a_syn:?}");
    assert_eq!(a_ack2, a_syn, "A stays where it was when 10.0.1.13 joins");
    assert!(b_syn.contains(&"10.0.1.13".to_string()), "{b_syn:?}");
    assert_eq!(a_ack3, a_syn, "A's TCP connections stay on 10.0.1.12");
    assert!(a_syn.contains(&"10.0.1.12".to_string()), "{a_syn:?}");
    assert!(!c_syn.contains(&"10.0.1.12".to_string()), "{c_syn:?}");

    // Windows that cannot be read are refused.
    for bad in ["10.0.1.13@5-2", "10.0.1.13@x", "10.0.1.13@1-", "nope@1"] {
        let r = replay(&cfg, &input, &out, &["--down", bad]);
        let err = String::from_utf8_lossy(&r.stderr);
        assert_eq!(r.status.code(), Some(2), "{bad}: {err}");
        assert!(err.contains("--down"), "{bad}: {err}");
    }
    let _ = std::fs::remove_dir_all(&d);
}

/// Two zones of region "r", two endpoints each; clients from 192.0.1.0/24
/// are in zone "za", from 192.0.2.0/24 in "zb"; zonal affinity with
/// `spill` as the spill ratio.
fn zonal_config(spill: &str) -> String {
    Config::new()
        .node(node("replay", "r", "za"))
        .port(uplink(&["10.0.0.2/24"]))
        .rule(rule("web", &["10.0.0.10"], "TCP", "80", "web"))
        .service(
            service("web", "ipip")
                .child(
                    group("a", "r", "za")
                        .set("endpoints", endpoint_list(&["10.0.1.11", "10.0.1.12"])),
                )
                .child(
                    group("b", "r", "zb")
                        .set("endpoints", endpoint_list(&["10.0.1.21", "10.0.1.22"])),
                )
                .child(
                    Table::new("backend_services.locality")
                        .set("zonal_affinity", true)
                        .set("zonal_spill_ratio", spill),
                ),
        )
        .raw(
            "[[client_zones]]\nzone = \"za\"\nprefixes = [\"192.0.1.0/24\"]\n\n\
             [[client_zones]]\nzone = \"zb\"\nprefixes = [\"192.0.2.0/24\"]\n",
        )
        .build()
}

/// SYNs of 100 connections from clients of zone `set` (192.0.`set`.x).
fn zone_syns(set: u8) -> Vec<Vec<u8>> {
    (0..100u16)
        .map(|i| {
            tcp_frame(
                IpAddr::from([192, 0, set, (i % 250) as u8 + 1]),
                IpAddr::from([10, 0, 0, 10]),
                30000 + i,
                80,
                SYN,
                &[],
            )
        })
        .collect()
}

/// Zonal affinity (M27) as the daemon plans it: with spill ratio 0 every
/// client stays in its own zone; a replay that built its snapshots without
/// the management core's plans spread both zones over all four endpoints.
#[test]
fn replay_keeps_clients_in_their_zone_under_zonal_affinity() {
    // Connections that left their zone, of 200, by spill ratio: none at
    // 0; at 1 the region is one pool (about half leave: the other zone
    // is half of it); at 0.5 half as many as at 1 (the spilled share is
    // spread over the region, own zone included).
    for (spill, fewest, most) in [("0.0", 0, 0), ("0.5", 25, 75), ("1.0", 75, 125)] {
        let mut frames = zone_syns(1);
        frames.extend(zone_syns(2));
        let r = run(
            &format!("zonal-{spill}"),
            &zonal_config(spill),
            &frames,
            &[],
        );
        let got = backends_of(&r.out);
        assert_eq!(got.len(), 200, "{}", r.text);
        let (a, b) = got.split_at(100);
        let left = a.iter().filter(|x| !x.starts_with("10.0.1.1")).count()
            + b.iter().filter(|x| !x.starts_with("10.0.1.2")).count();
        assert!(
            (fewest..=most).contains(&left),
            "spill ratio {spill}: {left} of 200 left their zone\n{}",
            r.text
        );
        let a: BTreeSet<&str> = a.iter().map(String::as_str).collect();
        let b: BTreeSet<&str> = b.iter().map(String::as_str).collect();
        if most == 0 {
            assert_eq!(a, BTreeSet::from(["10.0.1.11", "10.0.1.12"]), "{}", r.text);
            assert_eq!(b, BTreeSet::from(["10.0.1.21", "10.0.1.22"]), "{}", r.text);
        } else {
            assert_eq!(a.len(), 4, "spill ratio {spill}: {a:?}");
            assert_eq!(b.len(), 4, "spill ratio {spill}: {b:?}");
        }
    }
}

/// The node's region "r1" (10.0.1.11-12) and a second region "r2"
/// (10.0.2.11-12) of one service.
fn two_region_config() -> String {
    two_region_config_with(&[])
}

/// [`two_region_config`], the service's settings `set` (raw TOML values).
fn two_region_config_with(set: &[(&str, &str)]) -> String {
    let svc = set
        .iter()
        .fold(service("web", "ipip"), |s, (k, v)| s.set(k, v));
    Config::new()
        .node(node("replay", "r1", "z1"))
        .port(uplink(&["10.0.0.2/24"]))
        .rule(rule("web", &["10.0.0.10"], "TCP", "80", "web"))
        .service(
            svc.child(
                group("near", "r1", "z1")
                    .set("endpoints", endpoint_list(&["10.0.1.11", "10.0.1.12"])),
            )
            .child(
                group("far", "r2", "z2")
                    .set("endpoints", endpoint_list(&["10.0.2.11", "10.0.2.12"])),
            ),
        )
        .build()
}

/// Region preference and failover at given times (M26): new connections
/// go to the node's own region while it is healthy, to the other one from
/// when both of its endpoints fail (`--at 2s --down`), and back from when
/// they recover (`--at 5s --up`); connections keep their backend through
/// it all. A replay without the core's plans spread them over both regions.
#[test]
fn replay_fails_over_to_the_next_region_at_the_given_time() {
    let mut frames = Vec::new();
    frames.extend((0..50).map(|i| (0, conn(1, i, SYN))));
    frames.extend((0..50).map(|i| (3, conn(1, i, ACK))));
    frames.extend((0..50).map(|i| (3, conn(2, i, SYN))));
    frames.extend((0..50).map(|i| (6, conn(1, i, ACK))));
    frames.extend((0..50).map(|i| (6, conn(2, i, ACK))));
    frames.extend((0..50).map(|i| (6, conn(3, i, SYN))));
    let r = run_timed(
        "failover",
        &two_region_config(),
        &[],
        &frames,
        &[
            "--at",
            "2s",
            "--down",
            "10.0.1.11",
            "--down",
            "10.0.1.12",
            "--at",
            "5s",
            "--up",
            "10.0.1.11",
            "--up",
            "10.0.1.12",
        ],
    );
    let got = backends_of(&r.out);
    assert_eq!(got.len(), frames.len(), "{}", r.text);
    let part = |k: usize| -> Vec<String> { got[k * 50..(k + 1) * 50].to_vec() };
    let in_region = |v: &[String], prefix: &str| v.iter().all(|b| b.starts_with(prefix));
    let (a_syn, a_ack3, b_syn, a_ack6, b_ack6, c_syn) =
        (part(0), part(1), part(2), part(3), part(4), part(5));
    assert!(in_region(&a_syn, "10.0.1."), "{a_syn:?}\n{}", r.text);
    assert!(in_region(&b_syn, "10.0.2."), "{b_syn:?}\n{}", r.text);
    assert!(in_region(&c_syn, "10.0.1."), "{c_syn:?}\n{}", r.text);
    assert_eq!(a_ack3, a_syn, "A keeps its backends while they fail");
    assert_eq!(a_ack6, a_syn, "A keeps its backends after they recover");
    assert_eq!(b_ack6, b_syn, "B stays in the far region");
    assert!(
        r.text.contains("health: second 2: 10.0.1.11 down")
            && r.text.contains("health: second 5: 10.0.1.12 up"),
        "{}",
        r.text
    );
}

/// A reload mid-capture (`--at 2s --reload FILE`), as `spillway reload`
/// does it: connections open before it keep their backends, new ones use
/// the new endpoints; a file that does not validate is refused at its
/// time and changes nothing.
#[test]
fn replay_reloads_mid_capture_and_keeps_flows() {
    let before = config().build();
    let after = Config::new()
        .node(node("replay", "r", "z"))
        .port(uplink(&["10.0.0.2/24"]))
        .rule(rule("web", &["10.0.0.10"], "TCP", "80", "web"))
        .service(service("web", "ipip").child(group("a", "r", "z").set(
            "endpoints",
            endpoint_list(&["10.0.1.11", "10.0.1.21", "10.0.1.22", "10.0.1.23"]),
        )))
        .build();
    let mut frames = Vec::new();
    frames.extend((0..60).map(|i| (0, conn(1, i, SYN))));
    frames.extend((0..60).map(|i| (1, conn(1, i, ACK))));
    frames.extend((0..60).map(|i| (3, conn(1, i, ACK))));
    frames.extend((0..60).map(|i| (3, conn(2, i, SYN))));
    frames.extend((0..60).map(|i| (5, conn(1, i, ACK))));
    frames.extend((0..60).map(|i| (5, conn(2, i, ACK))));
    let r = run_timed(
        "reload",
        &before,
        &[("after.toml", &after), ("broken.toml", "[node\nname = 1")],
        &frames,
        &[
            "--at",
            "1500ms",
            "--reload",
            "{dir}/broken.toml",
            "--at",
            "2s",
            "--reload",
            "{dir}/after.toml",
        ],
    );
    let got = backends_of(&r.out);
    assert_eq!(got.len(), frames.len(), "{}", r.text);
    let part = |k: usize| -> Vec<String> { got[k * 60..(k + 1) * 60].to_vec() };
    let old: BTreeSet<String> = ["10.0.1.11", "10.0.1.12", "10.0.1.13"]
        .map(String::from)
        .into();
    let new: BTreeSet<String> = ["10.0.1.11", "10.0.1.21", "10.0.1.22", "10.0.1.23"]
        .map(String::from)
        .into();
    let (a_syn, a1, a3, b_syn, a5, b5) = (part(0), part(1), part(2), part(3), part(4), part(5));
    assert!(a_syn.iter().all(|b| old.contains(b)), "{a_syn:?}");
    assert_eq!(a1, a_syn, "the refused reload changed nothing");
    assert_eq!(a3, a_syn, "A keeps its backends across the reload");
    assert_eq!(a5, a_syn);
    assert!(b_syn.iter().all(|b| new.contains(b)), "{b_syn:?}");
    assert!(
        b_syn.iter().any(|b| b.starts_with("10.0.1.2")),
        "new connections reach the new endpoints: {b_syn:?}"
    );
    assert_eq!(b5, b_syn);
    assert!(
        r.text.contains("1.500 s: reload") && r.text.contains("reload rejected"),
        "{}",
        r.text
    );
    assert!(
        r.text.contains("2.000 s: reload") && r.text.contains("is live"),
        "{}",
        r.text
    );
}

/// Spillover under RATE balancing (M24, M25) from the rate the replayed
/// traffic itself makes: 200 packets a second on r1's two endpoints
/// (capacity 20 pps each) spill part of the new connections to r2, while
/// the established ones stay; without that load nothing spills.
#[test]
fn replay_spills_over_from_the_rate_of_the_replayed_traffic() {
    let cfg = two_region_config_with(&[
        ("balancing_mode", "\"RATE\""),
        ("max_rate_per_endpoint", "20"),
    ]);
    for (loaded, name) in [(true, "rate-high"), (false, "rate-low")] {
        let mut frames: Vec<(u64, Vec<u8>)> = (0..50).map(|i| (0, conn(1, i, SYN))).collect();
        if loaded {
            for sec in 1..=6 {
                for _ in 0..4 {
                    frames.extend((0..50).map(|i| (sec, conn(1, i, ACK))));
                }
            }
        }
        let first_new = frames.len();
        frames.extend((0..200).map(|i| (7, conn(2, i, SYN))));
        let r = run_timed(name, &cfg, &[], &frames, &[]);
        let got = backends_of(&r.out);
        assert_eq!(got.len(), frames.len(), "{}", r.text);
        let established: BTreeSet<&String> = got[..50].iter().collect();
        assert!(
            established.iter().all(|b| b.starts_with("10.0.1.")),
            "{established:?}"
        );
        for (k, b) in got[50..first_new].iter().enumerate() {
            assert_eq!(b, &got[k % 50], "established connections stay");
        }
        let spilled = got[first_new..]
            .iter()
            .filter(|b| b.starts_with("10.0.2."))
            .count();
        if loaded {
            assert!(
                spilled > 20 && spilled < 200,
                "{spilled} of 200 new connections spilled\n{}",
                r.text
            );
        } else {
            assert_eq!(spilled, 0, "{}", r.text);
        }
    }
}

/// A service of `remote_rule` groups (M21): the node's region's peer
/// (rule "web" at VIP 203.0.113.10) takes new connections while its rule
/// is HEALTHY; from when `--remote web=UNHEALTHY` says it fails, the next
/// region's peer (203.0.113.20) does; connections stay where they were.
#[test]
fn replay_follows_scripted_remote_rule_verdicts() {
    let remote = |url: &str, rule: &str, vip: &str| {
        format!("{{ status_url = \"{url}\", rule = \"{rule}\", vip = \"{vip}\" }}")
    };
    let cfg = Config::new()
        .node(node("replay", "r1", "z1"))
        .port(uplink(&["10.0.0.2/24"]))
        .rule(rule("web", &["10.0.0.10"], "TCP", "80", "web"))
        .service(
            service("web", "ipip")
                .child(group("near", "r1", "z1").str("kind", "remote_rule").set(
                    "remote",
                    remote("http://192.0.2.50:9469/status", "web", "203.0.113.10"),
                ))
                .child(group("far", "r2", "z2").str("kind", "remote_rule").set(
                    "remote",
                    remote("http://192.0.2.60:9469/status", "web-eu", "203.0.113.20"),
                )),
        )
        .build();
    let mut frames = Vec::new();
    frames.extend((0..40).map(|i| (0, conn(1, i, SYN))));
    frames.extend((0..40).map(|i| (3, conn(1, i, ACK))));
    frames.extend((0..40).map(|i| (3, conn(2, i, SYN))));
    let r = run_timed(
        "remote",
        &cfg,
        &[],
        &frames,
        &["--at", "2s", "--remote", "web=UNHEALTHY"],
    );
    let got = backends_of(&r.out);
    assert_eq!(got.len(), frames.len(), "{}", r.text);
    let all = |v: &[String], vip: &str| v.iter().all(|b| b == vip);
    assert!(
        all(&got[..40], "203.0.113.10"),
        "{:?}\n{}",
        &got[..40],
        r.text
    );
    assert_eq!(got[40..80], got[..40], "connections stay with their peer");
    assert!(
        all(&got[80..], "203.0.113.20"),
        "{:?}\n{}",
        &got[80..],
        r.text
    );
    assert!(r.text.contains("remote rule web UNHEALTHY"), "{}", r.text);
}

// ---------------------------------------------------------------------------
// Neighbours (M47).

/// M47 in replay: a next hop without a static MAC is unresolved (replay has
/// no ports to ask on) unless `--neighbour IP=MAC` says it answers. Without
/// it nothing is forwarded (new flows: no eligible backend); with it,
/// frames go to that MAC; a reload moving the gateway to one that does not
/// answer drops the established flows as `no_neighbour`, never sending to
/// a zero MAC.
#[test]
fn unresolved_next_hops_are_counted_drops_and_neighbour_resolves_them() {
    let gw = |g: &str| {
        Config::new()
            .node(node("replay", "r", "z"))
            .port(uplink(&["10.0.0.2/24"]))
            .port(
                port("inside", "net_pcap1", "backend")
                    .strs("addresses", &["10.1.0.2/24"])
                    .str("mac", "02:00:00:00:00:02")
                    .str("gateway", g),
            )
            .rule(rule("web", &["10.0.0.10"], "TCP", "80", "web"))
            .service(service("web", "ipip").child(group("a", "r", "z").set(
                "endpoints",
                endpoint_list(&["10.1.1.11", "10.1.1.12", "10.1.1.13"]),
            )))
            .build()
    };
    let (before, after) = (gw("10.1.0.1"), gw("10.1.0.254"));
    let mut frames = Vec::new();
    frames.extend((0..20).map(|i| (0, conn(1, i, SYN))));
    frames.extend((0..20).map(|i| (1, conn(1, i, ACK))));
    frames.extend((0..20).map(|i| (3, conn(1, i, ACK))));
    frames.extend((0..20).map(|i| (3, conn(2, i, SYN))));

    // Nobody answers: no backend is eligible, nothing leaves.
    let r = run_timed("nbr-none", &before, &[], &frames, &[]);
    assert!(r.out.is_empty(), "{}", r.text);
    assert_eq!(r.drops("no_backend"), 80, "{}", r.text);

    // The gateway answers; after the reload its successor does not.
    let mac = [2, 0, 0, 0, 0, 0x99];
    let r = run_timed(
        "nbr-moved",
        &before,
        &[("after.toml", &after)],
        &frames,
        &[
            "--neighbour",
            "10.1.0.1=02:00:00:00:00:99",
            "--at",
            "2s",
            "--reload",
            "{dir}/after.toml",
        ],
    );
    assert_eq!(r.out.len(), 40, "{}", r.text);
    for out in &r.out {
        assert_eq!(&out[..6], &mac, "to the resolved gateway, never to zero");
    }
    assert_eq!(r.drops("no_neighbour"), 20, "{}", r.text);
    assert_eq!(r.drops("no_backend"), 20, "{}", r.text);
}
