//! Scenarios of the management core driven by the simulation harness
//! (`sim`): each scripts health, reloads and time, sends real packets
//! through N pipelines, and checks what every flow experienced.

#![allow(clippy::cast_possible_truncation)] // test values are small

mod sim;

use std::net::IpAddr;
use std::time::Duration;

use control::{Published, reload_text};
use dataplane::BackendState;
use health::{Aggregate, State};
use log::Level;
use sim::{Builds, Flow, World, ip};
use testkit::config::{
    Config, Table, endpoint_list, group, health_check, node, port, rule, service,
};

const SEC: Duration = Duration::from_secs(1);

/// A node `name` in region r1 (r2 next), zone r1-a, one uplink.
fn node_r1(name: &str) -> Config {
    Config::new()
        .node(node(name, "r1", "r1-a").strs("region_preference", &["r1", "r2"]))
        .dataplane("flow_table_capacity", 8192)
        .port(port("up", "net_ring0", "uplink").strs("addresses", &["10.0.0.2/24"]))
}

/// Service `web` (`persistence`, 10 s draining), health-checked by `tcp`,
/// with `endpoints` in r1 (group `a`).
fn web_service<S: AsRef<str>>(persistence: &str, endpoints: &[S]) -> Table {
    service("web", "ipip")
        .str("health_check", "tcp")
        .str("connection_persistence", persistence)
        .str("connection_draining_timeout", "10s")
        .set("maglev_table_size", 1021)
        .child(group("a", "r1", "r1-a").set("endpoints", endpoint_list(endpoints)))
}

/// Node `n` (see [`node_r1`]) with a TCP and a UDP rule on 10.0.0.10 to
/// `web`, and health check `tcp`.
fn with_web(web: Table) -> Config {
    node_r1("n")
        .rule(rule("web", &["10.0.0.10"], "TCP", "80", "web").set("ports", 80))
        .rule(rule("dns", &["10.0.0.10"], "UDP", "53", "web").set("ports", 53))
        .service(web)
        .health_check(health_check("tcp", "TCP").set("port", 80))
}

/// [`with_web`] with [`web_service`] (`persistence`, `endpoints`).
fn web<S: AsRef<str>>(persistence: &str, endpoints: &[S]) -> String {
    with_web(web_service(persistence, endpoints)).build()
}

const FOUR: [&str; 4] = ["10.1.0.1", "10.1.0.2", "10.1.0.3", "10.1.0.4"];

/// A world on `text` with every endpoint HEALTHY, a second in.
fn healthy_world(text: &str, seed: u64) -> World {
    let mut w = World::new(text, 3, seed);
    w.all_health(State::Healthy);
    w.advance(SEC);
    w
}

/// Composite `web-composite` of service `api` (at least 50 % and
/// `min_count` endpoints healthy), exported by rule `web` (M20).
fn api_composite(min_count: u32) -> String {
    format!(
        r#"[[composite_health_checks]]
name = "web-composite"
sources = [
  {{ backend_service = "api", aggregation = {{ min_healthy_percent = 50, min_healthy_count = {min_count} }} }},
]
destination = "web"
"#
    )
}

/// A `remote_rule` group `name` in `region` (zone `<region>-a`) following
/// rule `rule` of the Spillway at `url`, whose VIP is `vip` (M21).
fn remote_group(name: &str, region: &str, url: &str, rule: &str, vip: &str) -> Table {
    group(name, region, &format!("{region}-a"))
        .str("kind", "remote_rule")
        .set(
            "remote",
            format!("{{ status_url = {url:?}, rule = {rule:?}, vip = {vip:?} }}"),
        )
}

/// Flows whose backend is `a`.
fn on(flows: &[(Flow, Option<IpAddr>)], a: IpAddr) -> usize {
    flows.iter().filter(|(_, b)| *b == Some(a)).count()
}

/// Flaps one endpoint down and up under each persistence policy: TCP flows
/// on it stay under DEFAULT_FOR_PROTOCOL (UDP ones move), all move under
/// NEVER_PERSIST, all stay under ALWAYS_PERSIST; no new flow ever goes to
/// it while it is down, no flow on another endpoint ever moves, and the
/// persisted flows leave when its draining period is over.
#[test]
fn endpoint_flaps_under_each_persistence_policy() {
    for (policy, tcp_stays, udp_stays) in [
        ("DEFAULT_FOR_PROTOCOL", true, false),
        ("NEVER_PERSIST", false, false),
        ("ALWAYS_PERSIST", true, true),
    ] {
        let mut w = healthy_world(&web(policy, &FOUR), 11);
        let tcp = w.open(200, "10.0.0.10", 80);
        let udp = w.open_proto(200, "10.0.0.10", 53, true);
        let sick = ip("10.1.0.2");
        assert!(
            on(&tcp, sick) > 10 && on(&udp, sick) > 10,
            "{policy}: spread"
        );

        w.set_health("10.1.0.2", State::Unhealthy);
        w.advance(SEC);
        for (flows, stays) in [(&tcp, tcp_stays), (&udp, udp_stays)] {
            for ((f, before), now) in flows.iter().zip(w.where_now(flows)) {
                if *before == Some(sick) {
                    if stays {
                        assert_eq!(now, Some(sick), "{policy}: {f:?} persists");
                    } else {
                        assert!(now.is_some() && now != Some(sick), "{policy}: {f:?} moves");
                    }
                } else {
                    assert_eq!(now, *before, "{policy}: {f:?} on a healthy endpoint");
                }
            }
        }
        let fresh = w.open(100, "10.0.0.10", 80);
        assert_eq!(on(&fresh, sick), 0, "{policy}: no new flow to a sick one");
        assert!(fresh.iter().all(|(_, b)| b.is_some()), "{policy}");

        // Back up within its draining period: where each flow is now, it stays.
        let during: Vec<_> = w.where_now(&tcp);
        w.set_health("10.1.0.2", State::Healthy);
        w.advance(SEC);
        assert_eq!(
            w.where_now(&tcp),
            during,
            "{policy}: the flap moved flows back"
        );

        // Down again, past its draining period: persisted flows leave too.
        w.set_health("10.1.0.2", State::Unhealthy);
        w.advance(12 * SEC);
        for ((f, before), now) in tcp.iter().zip(w.where_now(&tcp)) {
            assert!(
                now.is_some() && now != Some(sick),
                "{policy}: {f:?} after the deadline"
            );
            if *before != Some(sick) {
                assert_eq!(now, *before, "{policy}: {f:?}");
            }
        }
    }
}

/// An endpoint removed by a reload drains: its flows stay until the end of
/// the draining period and then move; new flows never go to it; every
/// other flow stays put throughout.
#[test]
fn a_removed_endpoint_drains_until_its_deadline() {
    let mut w = healthy_world(&web("DEFAULT_FOR_PROTOCOL", &FOUR), 12);
    let flows = w.open(300, "10.0.0.10", 80);
    let gone = ip("10.1.0.3");
    assert!(on(&flows, gone) > 20);
    let p = w
        .reload(
            &web(
                "DEFAULT_FOR_PROTOCOL",
                &["10.1.0.1", "10.1.0.2", "10.1.0.4"],
            ),
            false,
        )
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(p, Published::Live(_)), "{p:?}");
    let start = w.tick();
    let until = w
        .live
        .backends
        .iter()
        .find_map(|b| match b.state {
            BackendState::Draining { until } if b.addr == gone => Some(until),
            _ => None,
        })
        .expect("draining");
    assert_eq!(until, start + 10, "the configured draining period");
    for second in 0..14 {
        let fresh = w.open(20, "10.0.0.10", 80);
        assert_eq!(
            on(&fresh, gone),
            0,
            "second {second}: a new flow drained to"
        );
        let draining = w.tick() < until;
        for ((f, before), now) in flows.iter().zip(w.where_now(&flows)) {
            if *before == Some(gone) && !draining {
                assert!(
                    now.is_some() && now != Some(gone),
                    "{f:?} past the deadline"
                );
            } else {
                assert_eq!(now, *before, "second {second}: {f:?}");
            }
        }
        w.advance(SEC);
    }
    assert!(
        w.live
            .backends
            .iter()
            .all(|b| b.addr != gone || b.state == BackendState::Removed),
        "retired after its deadline"
    );
}

/// Region r2 as the failover of r1's endpoints; `settings` (raw TOML
/// values) added to `web`.
fn two_regions(persistence: &str, settings: &[(&str, &str)]) -> String {
    let mut web = web_service(persistence, &["10.1.0.1", "10.1.0.2"])
        .child(group("b", "r2", "r2-a").set("endpoints", endpoint_list(&["10.2.0.1", "10.2.0.2"])));
    for (k, v) in settings {
        web = web.set(k, v);
    }
    with_web(web).build()
}

fn region_of(a: Option<IpAddr>) -> Option<u8> {
    match a {
        Some(IpAddr::V4(v)) => Some(v.octets()[1]),
        _ => None,
    }
}

/// All of r1 fails: new flows fail over to r2 while r1's TCP flows persist
/// (for their draining period); r1 recovers: new flows come back, r2's
/// flows stay on r2.
#[test]
fn failover_to_the_next_region_and_back() {
    let mut w = healthy_world(&two_regions("DEFAULT_FOR_PROTOCOL", &[]), 13);
    let first = w.open(100, "10.0.0.10", 80);
    assert!(
        first.iter().all(|(_, b)| region_of(*b) == Some(1)),
        "local first"
    );

    // At start, the rule's exported state left UNKNOWN (logged once).
    assert_eq!(
        w.take_logs(),
        [
            (
                Level::Info,
                "health: rule web UNKNOWN -> HEALTHY".to_owned()
            ),
            (
                Level::Info,
                "health: rule dns UNKNOWN -> HEALTHY".to_owned()
            )
        ]
    );
    w.advance(SEC);
    assert_eq!(w.take_logs(), [], "nothing to say while r1 is fine");
    w.set_health("10.1.0.1", State::Unhealthy);
    w.set_health("10.1.0.2", State::Unhealthy);
    w.advance(SEC);
    // The change of where new connections go is logged, once (M20, M24),
    // and so are the rules' exported states (web's service counts every
    // region: 2 of 4 healthy is under 60 %).
    assert_eq!(
        w.take_logs(),
        [
            (
                Level::Info,
                "locality: service web: new connections [r1 100.0 %] -> [r2 100.0 %]".to_owned()
            ),
            (
                Level::Info,
                "health: rule web HEALTHY -> UNHEALTHY".to_owned()
            ),
            (
                Level::Info,
                "health: rule dns HEALTHY -> UNHEALTHY".to_owned()
            )
        ]
    );
    let failed_over = w.open(100, "10.0.0.10", 80);
    assert!(
        failed_over.iter().all(|(_, b)| region_of(*b) == Some(2)),
        "new flows in r2"
    );
    let now: Vec<_> = w.where_now(&first);
    assert_eq!(
        now,
        first.iter().map(|(_, b)| *b).collect::<Vec<_>>(),
        "TCP persists"
    );

    w.set_health("10.1.0.1", State::Healthy);
    w.set_health("10.1.0.2", State::Healthy);
    w.advance(2 * SEC);
    assert_eq!(
        w.take_logs(),
        [
            (
                Level::Info,
                "locality: service web: new connections [r2 100.0 %] -> [r1 100.0 %]".to_owned()
            ),
            (
                Level::Info,
                "health: rule web UNHEALTHY -> HEALTHY".to_owned()
            ),
            (
                Level::Info,
                "health: rule dns UNHEALTHY -> HEALTHY".to_owned()
            )
        ]
    );
    let back = w.open(100, "10.0.0.10", 80);
    assert!(
        back.iter().all(|(_, b)| region_of(*b) == Some(1)),
        "back to r1"
    );
    let now: Vec<_> = w.where_now(&failed_over);
    assert_eq!(
        now,
        failed_over.iter().map(|(_, b)| *b).collect::<Vec<_>>(),
        "r2's flows stay in r2"
    );
}

/// Load beyond r1's capacity (RATE, 20 pps per endpoint) spills part of the
/// new flows to r2; established flows never move.
#[test]
fn load_beyond_capacity_spills_to_the_next_region() {
    let text = two_regions(
        "DEFAULT_FOR_PROTOCOL",
        &[
            ("balancing_mode", "\"RATE\""),
            ("max_rate_per_endpoint", "20"),
        ],
    );
    let mut w = healthy_world(&text, 14);
    let established = w.open(50, "10.0.0.10", 80);
    assert!(established.iter().all(|(_, b)| region_of(*b) == Some(1)));
    // 200 packets a second on r1's two endpoints (capacity 40 pps).
    for _ in 0..6 {
        for _ in 0..4 {
            let now = w.where_now(&established);
            assert_eq!(now, established.iter().map(|(_, b)| *b).collect::<Vec<_>>());
        }
        w.advance(SEC);
    }
    let new = w.open(200, "10.0.0.10", 80);
    let spilled = new.iter().filter(|(_, b)| region_of(*b) == Some(2)).count();
    assert!(
        spilled > 20 && spilled < 200,
        "{spilled} of 200 new flows spilled"
    );
}

/// A rule exporting a composite of another service's health (M20), and a
/// second node whose `remote_rule` group follows that export (M21): when
/// the composite fails, the peer's new flows fail over to its own r2.
#[test]
fn a_composite_exported_to_a_rule_drives_a_peers_failover() {
    let a_text = with_web(web_service("DEFAULT_FOR_PROTOCOL", &FOUR))
        .rule(rule("api", &["10.0.0.11"], "TCP", "80", "api").set("ports", 80))
        .service(
            service("api", "ipip")
                .str("health_check", "tcp")
                .set("maglev_table_size", 1021)
                .child(group("a", "r1", "r1-a").set(
                    "endpoints",
                    endpoint_list(&["10.3.0.1", "10.3.0.2", "10.3.0.3"]),
                )),
        )
        .raw(&api_composite(2))
        .build();
    let mut a = healthy_world(&a_text, 15);
    assert_eq!(a.rule_state("web"), Aggregate::Healthy);

    // Its r1 group is A's rule `web`; its r2 group another peer's.
    let b_text = node_r1("peer")
        .rule(rule("front", &["10.0.0.20"], "TCP", "80", "front").set("ports", 80))
        .service(
            service("front", "ipip")
                .set("maglev_table_size", 1021)
                .child(remote_group(
                    "remote",
                    "r1",
                    "http://10.9.0.1:9469/status",
                    "web",
                    "10.0.0.10",
                ))
                .child(remote_group(
                    "other",
                    "r2",
                    "http://10.9.0.2:9469/status",
                    "web2",
                    "10.2.0.1",
                )),
        )
        .build();
    let mut b = World::new(&b_text, 2, 16);
    b.set_remote("web2", State::Healthy);
    // The peer reads A's export every poll.
    let follow = |a: &mut World, b: &mut World| {
        let s = match a.rule_state("web") {
            Aggregate::Healthy => State::Healthy,
            Aggregate::Unhealthy => State::Unhealthy,
            Aggregate::Unknown => State::Unknown,
        };
        b.set_remote("web", s);
        b.advance(SEC);
    };
    follow(&mut a, &mut b);
    let via_a = b.open(50, "10.0.0.20", 80);
    assert!(
        via_a.iter().all(|(_, t)| *t == Some(ip("10.0.0.10"))),
        "{via_a:?}"
    );

    // One of api's three fails: 2 healthy still meet the composite's policy.
    a.set_health("10.3.0.1", State::Unhealthy);
    a.advance(SEC);
    assert_eq!(a.rule_state("web"), Aggregate::Healthy);
    // A second fails: web's own endpoints are fine, but it exports UNHEALTHY.
    a.set_health("10.3.0.2", State::Unhealthy);
    a.advance(SEC);
    assert_eq!(a.rule_state("web"), Aggregate::Unhealthy);
    assert_eq!(a.rule_state("api"), Aggregate::Unhealthy);
    follow(&mut a, &mut b);
    let failed_over = b.open(50, "10.0.0.20", 80);
    assert!(
        failed_over.iter().all(|(_, t)| *t == Some(ip("10.2.0.1"))),
        "{failed_over:?}"
    );
    // TCP flows through A stay (DEFAULT_FOR_PROTOCOL).
    assert!(
        b.where_now(&via_a)
            .iter()
            .all(|t| *t == Some(ip("10.0.0.10")))
    );
}

/// Composites are regional (M20): a source counts only its endpoints in
/// the node's own region, so a dead local region makes the composite
/// UNHEALTHY even while a far region of the same service is fine. The
/// service's own export (no composite) still counts every region.
#[test]
fn a_composite_fails_with_its_local_region_even_when_another_is_fine() {
    let text = with_web(web_service("DEFAULT_FOR_PROTOCOL", &FOUR))
        .rule(rule("api", &["10.0.0.11"], "TCP", "80", "api").set("ports", 80))
        .service(
            service("api", "ipip")
                .str("health_check", "tcp")
                .set("maglev_table_size", 1021)
                .child(
                    group("near", "r1", "r1-a")
                        .set("endpoints", endpoint_list(&["10.3.0.1", "10.3.0.2"])),
                )
                .child(group("far", "r2", "r2-a").set(
                    "endpoints",
                    endpoint_list(&["10.4.0.1", "10.4.0.2", "10.4.0.3"]),
                )),
        )
        .raw(&api_composite(1))
        .build();
    let mut w = healthy_world(&text, 18);
    assert_eq!(w.rule_state("web"), Aggregate::Healthy);
    // Half of the local region: still meets 50 %.
    w.set_health("10.3.0.1", State::Unhealthy);
    w.advance(SEC);
    assert_eq!(w.rule_state("web"), Aggregate::Healthy);
    // The whole local region: UNHEALTHY, though 3 of api's 5 endpoints
    // (60 %, in r2) are healthy.
    w.set_health("10.3.0.2", State::Unhealthy);
    w.advance(SEC);
    assert_eq!(w.rule_state("web"), Aggregate::Unhealthy);
    assert_eq!(
        w.rule_state("api"),
        Aggregate::Healthy,
        "the service's own export counts every region"
    );
    // Each transition is logged once (and counted for the metrics).
    for line in [
        "health: source web-composite/api HEALTHY -> UNHEALTHY",
        "health: composite web-composite HEALTHY -> UNHEALTHY",
        "health: rule web HEALTHY -> UNHEALTHY",
    ] {
        assert!(w.logged(Level::Info, line), "{line} in {:?}", w.take_logs());
    }
    w.take_logs();
    w.advance(SEC);
    assert_eq!(w.take_logs(), [], "once");
    w.set_health("10.3.0.2", State::Healthy);
    w.advance(SEC);
    assert_eq!(w.rule_state("web"), Aggregate::Healthy);
}

/// A composite's source starts over at UNKNOWN when a reload changes it
/// (M20), until each of its endpoints has been probed again; a reload that
/// leaves it alone keeps its state.
#[test]
fn a_reload_that_changes_a_source_makes_it_unknown_until_probed() {
    // Two table sizes of web's (primes): a change elsewhere.
    let text = |api: &[&str], web_size: u32| {
        with_web(web_service("DEFAULT_FOR_PROTOCOL", &FOUR).set("maglev_table_size", web_size))
            .rule(rule("api", &["10.0.0.11"], "TCP", "80", "api").set("ports", 80))
            .service(
                service("api", "ipip")
                    .str("health_check", "tcp")
                    .set("maglev_table_size", 1021)
                    .child(group("near", "r1", "r1-a").set("endpoints", endpoint_list(api))),
            )
            .raw(&api_composite(1))
            .build()
    };
    let two = ["10.3.0.1", "10.3.0.2"];
    let mut w = healthy_world(&text(&two, 1021), 19);
    assert_eq!(w.rule_state("web"), Aggregate::Healthy);
    w.take_logs();
    // Another service changes: the source keeps its state.
    w.reload(&text(&two, 1031), false)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(w.rule_state("web"), Aggregate::Healthy);
    // The source gains an endpoint: UNKNOWN at once, though its two old
    // endpoints are healthy and would meet the policy already.
    w.reload(&text(&["10.3.0.1", "10.3.0.2", "10.3.0.3"], 1031), false)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(w.rule_state("web"), Aggregate::Unknown);
    for line in [
        "health: source web-composite/api HEALTHY -> UNKNOWN",
        "health: composite web-composite HEALTHY -> UNKNOWN",
        "health: rule web HEALTHY -> UNKNOWN",
    ] {
        assert!(w.logged(Level::Info, line), "{line} in {:?}", w.take_logs());
    }
    // The next probe round settles it: 2 of 3 healthy (the new one not yet
    // known) meet 50 %.
    w.advance(SEC);
    assert_eq!(w.rule_state("web"), Aggregate::Healthy);
    assert!(
        w.logged(
            Level::Info,
            "health: source web-composite/api UNKNOWN -> HEALTHY"
        ),
        "{:?}",
        w.take_logs()
    );
}

/// The consumer's side of exported states (M21): a `remote_rule` group
/// fails over only on UNHEALTHY. UNKNOWN (the peer just started, or a
/// reload changed its rule) keeps it eligible: failing over on it would
/// move every client at every restart of a peer. (An unreachable status
/// endpoint is UNHEALTHY after `remote::FAILURES` failed polls:
/// control/tests/remote.rs.)
#[test]
fn remote_rule_groups_fail_over_on_unhealthy_only() {
    let text = node_r1("peer")
        .rule(rule("front", &["10.0.0.20"], "TCP", "80", "front").set("ports", 80))
        .service(
            service("front", "ipip")
                .set("maglev_table_size", 1021)
                .child(remote_group(
                    "near",
                    "r1",
                    "http://10.9.0.1:9469/status",
                    "web",
                    "10.0.0.10",
                ))
                .child(remote_group(
                    "far",
                    "r2",
                    "http://10.9.0.2:9469/status",
                    "web2",
                    "10.2.0.1",
                )),
        )
        .build();
    let mut w = World::new(&text, 2, 19);
    w.set_remote("web2", State::Healthy);
    let goes_to = |w: &mut World, want: &str, what: &str| {
        w.advance(SEC);
        let flows = w.open(40, "10.0.0.20", 80);
        assert!(
            flows.iter().all(|(_, t)| *t == Some(ip(want))),
            "{what}: {flows:?}"
        );
    };
    w.set_remote("web", State::Healthy);
    goes_to(&mut w, "10.0.0.10", "HEALTHY: the near remote");
    w.set_remote("web", State::Unknown);
    goes_to(&mut w, "10.0.0.10", "UNKNOWN stays eligible");
    w.set_remote("web", State::Unhealthy);
    goes_to(&mut w, "10.2.0.1", "UNHEALTHY fails over");
    w.set_remote("web", State::Healthy);
    goes_to(&mut w, "10.0.0.10", "and back");
}

/// Reloads: accepted (flows stay, the new endpoint takes new flows),
/// rejected (a broken or destructive file changes nothing: same snapshot,
/// nothing published), and rolled back (a configuration reverted while its
/// tables are built never goes live; the revert does).
#[test]
fn reloads_accepted_rejected_and_rolled_back() {
    let three = ["10.1.0.1", "10.1.0.2", "10.1.0.3"];
    let base = web("DEFAULT_FOR_PROTOCOL", &three);
    let mut w = healthy_world(&base, 17);
    let flows = w.open(200, "10.0.0.10", 80);
    let keep = |w: &mut World, what: &str| {
        let now = w.where_now(&flows);
        assert_eq!(
            now,
            flows.iter().map(|(_, b)| *b).collect::<Vec<_>>(),
            "{what}"
        );
    };

    // Rejected: a file that does not parse, and one that drops every rule.
    let live = w.live.clone();
    let published = w.published.len();
    w.take_logs();
    let e = w
        .reload("[node\nname = ", false)
        .expect_err("does not parse");
    // Each refusal is logged with every error (M38).
    assert_eq!(
        w.take_logs(),
        [(
            Level::Error,
            format!("reload rejected; the running configuration stays:\n{e}")
        )]
    );
    let no_rules = node_r1("n")
        .service(
            service("web", "ipip")
                .child(group("a", "r1", "r1-a").set("endpoints", endpoint_list(&["10.1.0.1"]))),
        )
        .build();
    let answer = w.reload_answer(&no_rules, false);
    let why = "sim.toml: the new configuration has no forwarding rules (the running one has 2). \
               A half-written or truncated file looks like this; if the change is meant, run \
               `spillway reload --force`";
    // What `spillway reload` prints, and the log line.
    assert!(answer.is_err());
    assert_eq!(
        reload_text(&answer),
        format!("reload rejected; the running configuration stays:\n{why}\n")
    );
    assert_eq!(
        w.take_logs(),
        [(
            Level::Error,
            format!("reload rejected; the running configuration stays:\n{why}")
        )]
    );
    w.advance(SEC);
    assert!(
        std::sync::Arc::ptr_eq(&w.live.compiled, &live.compiled),
        "nothing changed"
    );
    assert_eq!(w.published.len(), published, "nothing published");
    assert_eq!(w.core.reloads().1, 2);
    let status = w.status();
    assert!(
        status.contains("reloads 0 ok / 2 rejected\n")
            && status.ends_with(&format!("last reload error:\n{why}\n")),
        "{status}"
    );
    keep(&mut w, "after rejected reloads");

    // Accepted: a fourth endpoint.
    let four = web("DEFAULT_FOR_PROTOCOL", &FOUR);
    w.set_health("10.1.0.4", State::Healthy);
    let generation = w.live.generation + 1;
    let answer = w.reload_answer(&four, false);
    assert_eq!(
        answer,
        Ok(Published::Live(generation)),
        "{}",
        reload_text(&answer)
    );
    assert_eq!(
        reload_text(&answer),
        format!("reloaded: generation {generation} is live\n")
    );
    let status = w.status();
    assert!(
        status.contains(&format!(
            "snapshot generation {generation}, reloads 1 ok / 2 rejected\n"
        )) && !status.contains("last reload error"),
        "{status}"
    );
    w.advance(SEC);
    keep(&mut w, "after an accepted reload");
    assert!(on(&w.open(200, "10.0.0.10", 80), ip("10.1.0.4")) > 10);

    // Rolled back: five endpoints (tables built off the loop, held), then
    // the four again before the build ends.
    w.core.build_inline_up_to(0);
    w.builds = Builds::Held;
    let five = web(
        "DEFAULT_FOR_PROTOCOL",
        &["10.1.0.1", "10.1.0.2", "10.1.0.3", "10.1.0.4", "10.1.0.5"],
    );
    w.set_health("10.1.0.5", State::Healthy);
    let p = w.reload(&five, false).unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(p, Published::Building { .. }), "{p:?}");
    w.advance(SEC);
    assert_eq!(w.reload(&four, false), Ok(Published::Queued));
    w.advance(SEC);
    keep(&mut w, "while building");
    w.take_logs();
    w.finish_builds();
    assert!(
        w.logged(
            Level::Info,
            "1 Maglev table(s) built for a configuration replaced meanwhile; publishing the current one"
        ),
        "{:?}",
        w.logs
    );
    w.advance(SEC);
    assert!(!w.core.building() && !w.builds_held());
    for s in &w.published {
        assert!(
            s.backends.iter().all(|b| b.addr != ip("10.1.0.5")),
            "the superseded configuration went live (generation {})",
            s.generation
        );
    }
    assert_eq!(w.live.compiled.endpoints.len(), 4);
    keep(&mut w, "after the revert");
}

/// A backend set churning under load: every few seconds one endpoint is
/// replaced by a new one. Established flows on endpoints that stay never
/// move, flows on a removed one move only after its draining period, and
/// each change remaps at most a bounded share of the Maglev table.
#[test]
fn a_backend_set_churning_under_load() {
    let mut addrs: Vec<String> = (1..=12).map(|i| format!("10.1.0.{i}")).collect();
    let text = |a: &[String]| web("DEFAULT_FOR_PROTOCOL", a);
    let mut w = healthy_world(&text(&addrs), 18);
    let mut flows = w.open(400, "10.0.0.10", 80);
    let mut removed_at: Vec<(IpAddr, u32)> = Vec::new();
    let table = |w: &World| -> Vec<IpAddr> {
        let s = &w.live;
        let t = &s.services[0].regions[0].tables[0];
        t.table
            .slots()
            .iter()
            .map(|&e| s.backends[t.slots[e as usize] as usize].addr)
            .collect()
    };
    for round in 0..8u32 {
        let before = table(&w);
        let out = w.rng.below(addrs.len() as u64) as usize;
        let gone = ip(&addrs.remove(out));
        let new = format!("10.1.1.{round}");
        w.set_health(&new, State::Healthy);
        addrs.push(new);
        w.reload(&text(&addrs), false)
            .unwrap_or_else(|e| panic!("{e}"));
        removed_at.push((gone, w.tick()));
        w.advance(SEC);
        let after = table(&w);
        let moved = before
            .iter()
            .zip(&after)
            .filter(|(b, a)| b != a && **b != gone)
            .count();
        // Beyond the slots of the one that left, about 1/12 go to the new
        // one; more would be churn Maglev avoids.
        assert!(
            moved * 100 < before.len() * 20,
            "round {round}: {moved} of {} slots remapped",
            before.len()
        );
        for _ in 0..3 {
            for ((f, b), now) in flows.iter().zip(w.where_now(&flows)) {
                let drained = removed_at
                    .iter()
                    .any(|(g, t)| Some(*g) == *b && w.tick() >= t + 10);
                if drained {
                    assert!(now.is_some() && now != *b, "round {round}: {f:?} drained");
                } else {
                    assert_eq!(now, *b, "round {round}: {f:?} moved");
                }
            }
            w.advance(SEC);
        }
        // The flows of drained endpoints are elsewhere now: follow them.
        let now = w.where_now(&flows);
        for ((_, b), n) in flows.iter_mut().zip(now) {
            *b = n;
        }
        flows.extend(w.open(50, "10.0.0.10", 80));
    }
}

/// The harness is deterministic: the same seed gives the same flows on the
/// same backends through the same script.
#[test]
fn the_same_seed_gives_the_same_run() {
    let run = |seed: u64| {
        let mut w = healthy_world(&web("NEVER_PERSIST", &FOUR), seed);
        let flows = w.open(100, "10.0.0.10", 80);
        w.set_health("10.1.0.1", State::Unhealthy);
        w.advance(SEC);
        let after = w.where_now(&flows);
        (flows, after, w.live.generation)
    };
    assert_eq!(run(7), run(7));
    assert_ne!(run(7).0, run(8).0, "the seed decides the clients");
}

/// M47: next hops resolved from what the segment answers. Nothing is
/// forwarded before anything answers; an endpoint that answers late joins
/// then; a gateway whose MAC changes is followed at its next refresh; an
/// endpoint that stops answering fails, its flows are dropped (never sent
/// to a zero MAC) and new flows avoid it.
#[test]
fn next_hops_resolve_late_change_mac_and_fail_and_flows_follow() {
    let text = node_r1("n")
        .raw(
            "[neighbours]\nreachable = \"5s\"\nretransmit = \"1s\"\nprobes = 2\nfailed_retry = \"4s\"\n",
        )
        .rule(rule("web", &["10.0.0.10"], "TCP", "80", "web").set("ports", 80))
        .service(service("web", "ipip").child(group("a", "r1", "r1-a").set(
            "endpoints",
            endpoint_list(&["10.0.0.21", "10.0.0.22", "10.0.0.23", "10.9.0.1"]),
        )))
        .build()
        .replace(
            "addresses = [\"10.0.0.2/24\"]",
            "addresses = [\"10.0.0.2/24\"]\ngateway = \"10.0.0.1\"",
        );
    let mut w = World::with_segment(&text, 2, 31, false);
    let (gw, late, far) = (ip("10.0.0.1"), ip("10.0.0.23"), ip("10.9.0.1"));
    w.advance(SEC);
    // Requests went out (ARP, broadcast, on the uplink), nobody answered.
    assert!(
        w.sent
            .iter()
            .any(|(_, port, f)| *port == 0 && f[..6] == [0xff; 6])
    );
    let none = w.open(20, "10.0.0.10", 80);
    assert!(none.iter().all(|(_, b)| b.is_none()), "{none:?}");
    assert!(
        w.status().contains("10.0.0.1 on port 0: incomplete"),
        "{}",
        w.status()
    );

    // Everyone but `late` answers.
    for a in ["10.0.0.1", "10.0.0.21", "10.0.0.22"] {
        w.segment.push((0, ip(a), sim::peer_mac(ip(a))));
    }
    w.advance(2 * SEC);
    let early = w.open(200, "10.0.0.10", 80);
    assert!(early.iter().all(|(_, b)| b.is_some() && *b != Some(late)));
    assert!(on(&early, far) > 0, "through the gateway too");
    assert!(
        w.status().contains("ineligible (neighbour unresolved)"),
        "{}",
        w.status()
    );
    // `late` answers its next (backed-off) request.
    w.segment.push((0, late, sim::peer_mac(late)));
    w.advance(5 * SEC);
    let all = w.open(200, "10.0.0.10", 80);
    assert!(on(&all, late) > 0, "the late one takes new flows");

    // The gateway's MAC changes: followed at its next refresh, no reload.
    let moved = [2, 0, 0, 0, 0, 0x42];
    w.segment.retain(|n| n.1 != gw);
    w.segment.push((0, gw, moved));
    w.advance(8 * SEC);
    let (via_gw, _) = early
        .iter()
        .find(|(_, b)| *b == Some(far))
        .expect("a flow via the gateway");
    assert_eq!(w.send(via_gw, false).addr(), Some(far));
    assert_eq!(
        w.last_frame.as_ref().map(|f| f[..6].to_vec()),
        Some(moved.to_vec())
    );

    // `late` stops answering: after its refresh and two probes it fails.
    w.segment.retain(|n| n.1 != late);
    w.advance(10 * SEC);
    assert!(
        w.logged(
            Level::Warn,
            "neighbour 10.0.0.23 on port 0 does not answer: packets for it are dropped (no_neighbour)"
        ),
        "{}\n{:?}",
        w.status(),
        w.logs
    );
    let on_late: Vec<_> = all
        .iter()
        .filter(|(_, b)| *b == Some(late))
        .cloned()
        .collect();
    assert!(
        w.where_now(&on_late).iter().all(Option::is_none),
        "dropped: no_neighbour"
    );
    assert!(w.last_frame.is_none(), "nothing sent to a zero MAC");
    let after = w.open(200, "10.0.0.10", 80);
    assert!(after.iter().all(|(_, b)| b.is_some() && *b != Some(late)));
    assert!(
        w.status().contains("10.0.0.23 on port 0: failed"),
        "{}",
        w.status()
    );
    // Locality plans without it too (its share spills over, M47).
    assert!(
        w.status()
            .contains("4 endpoints (3 healthy, 0 unknown, 3 eligible)"),
        "{}",
        w.status()
    );
    let mut x = control::metrics::Exposition::new();
    control::metrics::neighbours(&mut x, w.core.neighbours(), &w.live);
    let m = x.text();
    for line in [
        "spillway_neighbour_state{port=\"0\",address=\"10.0.0.23\"} 3",
        "spillway_neighbour_state{port=\"0\",address=\"10.0.0.1\"} 1",
        "spillway_backend_neighbour_resolved{service=\"web\",backend=\"10.0.0.23\"} 0",
        "spillway_backend_neighbour_resolved{service=\"web\",backend=\"10.9.0.1\"} 1",
        "spillway_neighbour_mac_changes_total 1",
    ] {
        assert!(m.lines().any(|l| l == line), "{line}\n{m}");
    }
    // Others' flows stayed where they were throughout.
    let others: Vec<_> = all
        .iter()
        .filter(|(_, b)| *b != Some(late))
        .cloned()
        .collect();
    let now: Vec<_> = w.where_now(&others);
    assert_eq!(now, others.iter().map(|(_, b)| *b).collect::<Vec<_>>());
}

/// M47 item 2: gratuitous ARP for every VIP served and own address, three
/// times a second apart, at start; a reload announces only the VIPs it
/// adds.
#[test]
fn vips_are_announced_at_start_and_when_a_reload_adds_them() {
    let cfg = |vips: &[&str]| {
        let mut c = node_r1("n");
        for (i, v) in vips.iter().enumerate() {
            c = c.rule(rule(&format!("web{i}"), &[v], "TCP", "80", "web").set("ports", 80));
        }
        c.service(
            service("web", "ipip")
                .child(group("a", "r1", "r1-a").set("endpoints", endpoint_list(&["10.1.0.1"]))),
        )
        .build()
    };
    // The gratuitous ARPs sent, as (second, address).
    let garps = |w: &World| -> Vec<(u64, IpAddr)> {
        w.sent
            .iter()
            .filter_map(|(t, port, f)| {
                let a = wire::arp::ArpRepr::parse(&wire::arp::Packet::new_checked(&f[14..]).ok()?)
                    .ok()?;
                (*port == 0 && a.spa == a.tpa && f[..6] == [0xff; 6])
                    .then_some((t.as_secs(), IpAddr::V4(a.spa)))
            })
            .collect()
    };
    let mut w = World::new(&cfg(&["10.0.0.10"]), 1, 41);
    w.advance(5 * SEC);
    let (vip, own) = (ip("10.0.0.10"), ip("10.0.0.2"));
    let start = garps(&w);
    for a in [vip, own] {
        let at: Vec<u64> = start.iter().filter(|g| g.1 == a).map(|g| g.0).collect();
        assert_eq!(at.len(), 3, "{a}: {start:?}");
        assert!(
            at.windows(2).all(|p| p[1] == p[0] + 1),
            "a second apart: {at:?}"
        );
    }
    w.sent.clear();
    w.reload(&cfg(&["10.0.0.10", "10.0.0.11"]), false)
        .expect("reload");
    w.advance(5 * SEC);
    let after = garps(&w);
    assert_eq!(after.len(), 3, "{after:?}");
    assert!(after.iter().all(|g| g.1 == ip("10.0.0.11")), "{after:?}");
}

/// M31, M47: a gateway endpoint is resolved like any next hop; until it
/// answers, status says its traffic is not taken; then it names its MAC.
#[test]
fn gateway_endpoints_are_resolved_and_shown() {
    let text = node_r1("n")
        .rule(
            rule("gw", &["10.0.0.10"], "L3_DEFAULT", "all", "nva")
                .str("mode", "gateway")
                .set(
                    "gateway_endpoints",
                    "[{ address = \"10.0.0.1\", id = 0x42 }]",
                ),
        )
        .service(
            service("nva", "geneve")
                .child(group("a", "r1", "r1-a").set("endpoints", endpoint_list(&["10.0.0.21"]))),
        )
        .build();
    let mut w = World::with_segment(&text, 1, 5, false);
    w.advance(SEC);
    assert!(
        w.status()
            .contains("gateway endpoint 10.0.0.1 (id 0x42, rule gw-ag0) on port 0: unresolved"),
        "{}",
        w.status()
    );
    let gw = ip("10.0.0.1");
    w.segment.push((0, gw, sim::peer_mac(gw)));
    w.advance(2 * SEC);
    assert!(
        w.status().contains(
            "gateway endpoint 10.0.0.1 (id 0x42, rule gw-ag0) on port 0: from 02:ee:0a:00:00:01"
        ),
        "{}",
        w.status()
    );
    assert_eq!(w.live.gateways[0].mac, sim::peer_mac(gw));
}

/// `web` with r1's endpoints in two zones: 10.1.0.1-2 in r1-a, 10.1.0.3-4
/// in r1-b (cross-zone, the default: every endpoint of r1 takes new flows).
fn two_zones() -> String {
    with_web(
        web_service("DEFAULT_FOR_PROTOCOL", &["10.1.0.1", "10.1.0.2"]).child(
            group("c", "r1", "r1-b").set("endpoints", endpoint_list(&["10.1.0.3", "10.1.0.4"])),
        ),
    )
    .build()
}

fn zone_of(a: Option<IpAddr>) -> Option<char> {
    match a {
        Some(IpAddr::V4(v)) if v.octets()[1] == 1 => {
            Some(if v.octets()[3] <= 2 { 'a' } else { 'b' })
        }
        _ => None,
    }
}

/// A drain's answer as the control socket words it: ok or not, and the
/// text.
fn drain(w: &mut World, scope: control::drain::Scope, name: &str, on: bool) -> Drained {
    match w.drain(scope, name, on) {
        Ok(t) => Drained(true, format!("{t}\n")),
        Err(e) => Drained(false, format!("{e}\n")),
    }
}

#[derive(Debug)]
struct Drained(bool, String);

impl Drained {
    fn ok(&self) -> bool {
        self.0
    }

    fn text(&self) -> String {
        self.1.clone()
    }
}

/// What counts toward a service's health percentage (M19, M20): its
/// configured endpoints, not those of a drained zone or region (they take
/// no new connections, so an operator draining a broken zone restores the
/// rule's exported state).
#[test]
fn drained_endpoints_do_not_count_toward_the_health_percentage() {
    use control::drain::Scope;
    let mut w = healthy_world(&two_zones(), 38);
    assert_eq!(w.rule_state("web"), Aggregate::Healthy);
    w.set_health("10.1.0.3", State::Unhealthy);
    w.set_health("10.1.0.4", State::Unhealthy);
    w.advance(SEC);
    assert_eq!(
        w.rule_state("web"),
        Aggregate::Unhealthy,
        "2 of 4 is under 60 %"
    );
    assert!(drain(&mut w, Scope::Zone, "r1-b", true).ok());
    w.advance(SEC);
    assert_eq!(
        w.rule_state("web"),
        Aggregate::Healthy,
        "r1-b drained: 2 of 2"
    );
    assert!(drain(&mut w, Scope::Zone, "r1-b", false).ok());
    w.advance(SEC);
    assert_eq!(w.rule_state("web"), Aggregate::Unhealthy);
}

/// M37: a drained zone takes no new connections from the next tick on (they
/// go to the other zone), its established flows stay; undrained, it takes
/// new ones again. The drain survives a reload; unknown names are refused.
#[test]
fn a_drained_zone_takes_no_new_connections_and_keeps_its_flows() {
    use control::drain::Scope;
    let text = two_zones();
    let mut w = healthy_world(&text, 37);
    let before = w.open(200, "10.0.0.10", 80);
    let in_b = before
        .iter()
        .filter(|(_, b)| zone_of(*b) == Some('b'))
        .count();
    assert!(in_b > 20, "both zones take flows: {in_b} of 200 in r1-b");

    let a = drain(&mut w, Scope::Zone, "r1-b", true);
    assert!(a.ok(), "{a:?}");
    assert_eq!(
        a.text(),
        "zone r1-b drained: new connections go elsewhere; established ones stay\n"
    );
    assert!(w.logged(
        Level::Info,
        "zone r1-b drained: new connections go elsewhere; established ones stay"
    ));
    let p = w.period;
    w.advance(p);
    let after = w.open(200, "10.0.0.10", 80);
    assert!(
        after.iter().all(|(_, b)| zone_of(*b) == Some('a')),
        "new flows only in r1-a after one tick"
    );
    assert_eq!(
        w.where_now(&before),
        before.iter().map(|(_, b)| *b).collect::<Vec<_>>(),
        "established flows stay, r1-b's included"
    );
    let status = w.status();
    assert!(status.contains("drained: zone r1-b\n"), "{status}");
    // Already drained: said, not an error.
    let again = drain(&mut w, Scope::Zone, "r1-b", true);
    assert!(
        again.ok() && again.text().contains("already drained"),
        "{again:?}"
    );

    // A reload keeps it.
    w.reload(&text.replace("10.1.0.4", "10.1.0.5"), false)
        .expect("reloaded");
    w.advance(p);
    let reloaded = w.open(200, "10.0.0.10", 80);
    assert!(
        reloaded.iter().all(|(_, b)| zone_of(*b) == Some('a')),
        "still drained after a reload"
    );

    // Unknown names are refused with the known ones.
    let bad = drain(&mut w, Scope::Zone, "r9-z", true);
    assert!(!bad.ok());
    assert_eq!(
        bad.text(),
        "unknown zone \"r9-z\" (the configuration's zones: r1-a, r1-b)\n"
    );
    let bad = drain(&mut w, Scope::Node, "other", true);
    assert_eq!(bad.text(), "this is node \"n\", not \"other\"\n");

    let a = drain(&mut w, Scope::Zone, "r1-b", false);
    assert!(a.ok(), "{a:?}");
    w.advance(p);
    let back = w.open(200, "10.0.0.10", 80);
    let in_b = back
        .iter()
        .filter(|(_, b)| zone_of(*b) == Some('b'))
        .count();
    assert!(in_b > 20, "r1-b takes new flows again: {in_b} of 200");
    assert!(!w.status().contains("drained:"));
}

/// M37: a drained region's new connections fail over to the next region;
/// draining every region a service has is not applied (no black hole).
#[test]
fn a_drained_region_spills_to_the_next_and_all_drained_is_not_applied() {
    use control::drain::Scope;
    let mut w = healthy_world(&two_regions("DEFAULT_FOR_PROTOCOL", &[]), 38);
    let first = w.open(100, "10.0.0.10", 80);
    assert!(first.iter().all(|(_, b)| region_of(*b) == Some(1)));
    assert!(drain(&mut w, Scope::Region, "r1", true).ok());
    let p = w.period;
    w.advance(p);
    let moved = w.open(100, "10.0.0.10", 80);
    assert!(
        moved.iter().all(|(_, b)| region_of(*b) == Some(2)),
        "new flows in r2"
    );
    assert_eq!(
        w.where_now(&first),
        first.iter().map(|(_, b)| *b).collect::<Vec<_>>(),
        "r1's flows stay"
    );
    assert!(drain(&mut w, Scope::Region, "r2", true).ok());
    w.advance(p);
    let all = w.open(100, "10.0.0.10", 80);
    assert!(
        all.iter().all(|(_, b)| b.is_some()),
        "everything drained: still served"
    );
    assert!(
        w.status()
            .contains("service web: every group is in a drained zone or region"),
        "status says the drain is not applied"
    );
}

/// M37, M39: a drained node and a shutdown only flip the accessors the
/// announcements read; forwarding goes on; the shutdown is due after its
/// period.
#[test]
fn node_drain_and_shutdown_flip_the_accessors_and_keep_forwarding() {
    use control::drain::Scope;
    let mut w = healthy_world(&two_zones(), 39);
    assert!(!w.core.node_drained() && !w.core.shutting_down());
    assert!(drain(&mut w, Scope::Node, "n", true).ok());
    assert!(w.core.node_drained());
    let p = w.period;
    w.advance(p);
    assert!(
        w.open(50, "10.0.0.10", 80).iter().all(|(_, b)| b.is_some()),
        "a drained node forwards"
    );
    assert!(drain(&mut w, Scope::Node, "n", false).ok());
    assert!(!w.core.node_drained());

    let now = w.now;
    w.core.shutdown(now, 5 * SEC);
    assert!(w.core.shutting_down() && !w.core.shutdown_due());
    assert!(w.status().contains("shutting down, 5 s left"));
    w.advance(2 * SEC);
    assert!(w.status().contains("shutting down, 3 s left"));
    assert!(
        w.open(50, "10.0.0.10", 80).iter().all(|(_, b)| b.is_some()),
        "forwarding during the shutdown drain"
    );
    // A second shutdown does not move the deadline.
    let now = w.now;
    w.core.shutdown(now, 60 * SEC);
    w.advance(3 * SEC);
    assert!(w.core.shutdown_due());
}

/// M37: the saved drain state restores (names the configuration lacks are
/// kept, and apply if they come back).
#[test]
fn a_restored_drain_state_applies_at_once() {
    use control::drain::{Drained, Scope};
    let mut w = healthy_world(&two_zones(), 40);
    let mut d = Drained::new();
    d.set(Scope::Zone, "r1-b", true);
    d.set(Scope::Region, "gone", true);
    let now = w.now;
    w.core.restore_drained(now, d.clone());
    let p = w.period;
    w.advance(p);
    assert!(
        w.open(100, "10.0.0.10", 80)
            .iter()
            .all(|(_, b)| zone_of(*b) == Some('a'))
    );
    assert_eq!(w.core.drained(), &d);
    // A name no longer configured can still be undrained.
    assert!(drain(&mut w, Scope::Region, "gone", false).ok());
}

/// Node `n` of region r1, zone r1-a, in availability group `ag` (`None`:
/// both groups).
fn group_node(ag: Option<u8>) -> testkit::config::Table {
    let n = node("n", "r1", "r1-a").strs("region_preference", &["r1"]);
    match ag {
        Some(g) => n.set("availability_group", g),
        None => n,
    }
}

/// M5: a node of availability group 1 serves (and announces on L2) only
/// each rule's AG 1 VIP; a node of no group serves both.
#[test]
fn a_node_of_availability_group_1_serves_only_its_groups_vips() {
    let cfg = |ag: Option<u8>| {
        Config::new()
            .node(group_node(ag))
            .dataplane("flow_table_capacity", 8192)
            .port(port("up", "net_ring0", "uplink").strs("addresses", &["10.0.0.2/24"]))
            .rule(rule("web", &["10.0.0.10", "10.0.0.11"], "TCP", "80", "web").set("ports", 80))
            .service(
                service("web", "ipip")
                    .child(group("a", "r1", "r1-a").set("endpoints", endpoint_list(&["10.1.0.1"]))),
            )
            .build()
    };
    let garps = |w: &World| -> Vec<IpAddr> {
        w.sent
            .iter()
            .filter_map(|(_, _, f)| {
                let a = wire::arp::ArpRepr::parse(&wire::arp::Packet::new_checked(&f[14..]).ok()?)
                    .ok()?;
                (a.spa == a.tpa).then_some(IpAddr::V4(a.spa))
            })
            .collect()
    };
    let mut w = World::new(&cfg(Some(1)), 1, 5);
    w.advance(3 * SEC);
    let ag0 = w.open(20, "10.0.0.10", 80);
    assert!(
        ag0.iter().all(|(_, b)| b.is_none()),
        "AG 0's VIP is not served"
    );
    let ag1 = w.open(20, "10.0.0.11", 80);
    assert!(
        ag1.iter().all(|(_, b)| *b == Some(ip("10.1.0.1"))),
        "AG 1's VIP is"
    );
    let sent = garps(&w);
    assert!(sent.contains(&ip("10.0.0.11")), "{sent:?}");
    assert!(!sent.contains(&ip("10.0.0.10")), "{sent:?}");

    let mut both = World::new(&cfg(None), 1, 5);
    both.advance(3 * SEC);
    for vip in ["10.0.0.10", "10.0.0.11"] {
        assert!(
            both.open(20, vip, 80).iter().all(|(_, b)| b.is_some()),
            "{vip} served by a node of no group"
        );
    }
}

// ---- flow-state sync between two nodes (M36) ----

const SYNC_KEY: &str = "hex:000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

#[allow(clippy::expect_used)] // test code: the scenarios' own addresses
fn addr(s: &str) -> std::net::SocketAddr {
    s.parse().expect("socket address")
}

/// Node `name` (see [`with_web`], [`FOUR`], persistence `DEFAULT_FOR_PROTOCOL`) syncing
/// flows from `listen` with `peer` under `key`.
fn synced(name: &str, listen: &str, peer: &str, key: &str) -> String {
    let c = node_r1(name)
        .rule(rule("web", &["10.0.0.10"], "TCP", "80", "web").set("ports", 80))
        .service(web_service("DEFAULT_FOR_PROTOCOL", &FOUR))
        .health_check(health_check("tcp", "TCP").set("port", 80));
    format!(
        "{}\n[flow_sync]\nlisten = \"{listen}\"\npeers = [\"{peer}\"]\nkey = \"{key}\"\n",
        c.build()
    )
}

const N1: &str = "192.0.2.1:7700";
const N2: &str = "192.0.2.2:7700";

/// Carries every datagram `from` (at `from_addr`) sent to `to_addr` into `to`.
fn deliver(from: &mut World, from_addr: &str, to: &mut World, to_addr: &str) -> usize {
    let (mine, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut from.sync_out)
        .into_iter()
        .partition(|(t, _)| *t == addr(to_addr));
    from.sync_out = rest;
    for (_, d) in &mine {
        to.sync_receive(addr(from_addr), d);
    }
    mine.len()
}

fn sync_world(name: &str, listen: &str, peer: &str, key: &str) -> World {
    healthy_world(&synced(name, listen, peer, key), 11)
}

/// Node 1 sees endpoint 10.1.0.4 fail, so its new flows avoid it; node 2
/// still has all four, so Maglev alone would send some of those flows to
/// .4 there. Synced, each of them goes to node 1's backend on node 2 when
/// node 1 dies (ECMP moves its flows); a node that restarts asks node 1 for
/// its entries and gets them too.
#[test]
fn flows_survive_their_nodes_death_on_a_synced_peer() {
    let mut n1 = sync_world("n1", N1, N2, SYNC_KEY);
    let mut n2 = sync_world("n2", N2, N1, SYNC_KEY);
    // At start each asks the other for its entries, every second until the
    // other says its dump (empty here) is done.
    settle(&mut n1, &mut n2);
    n1.set_health("10.1.0.4", State::Unhealthy);
    n1.advance(SEC);
    let flows = n1.open(300, "10.0.0.10", 80);
    assert_eq!(on(&flows, ip("10.1.0.4")), 0);
    n1.advance(SEC);
    let sent = deliver(&mut n1, N1, &mut n2, N2);
    assert!(sent >= 300 / 64, "{sent} datagrams");
    let c = n2.core.sync_counters().expect("sync on");
    assert_eq!(
        (c.applied, c.drop_auth, c.drop_source),
        (300, 0, 0),
        "{c:?}"
    );

    // Maglev alone (a node without the entries) would move some.
    let mut alone = healthy_world(&synced("n3", "192.0.2.3:7700", N1, SYNC_KEY), 11);
    let moved = flows
        .iter()
        .filter(|(f, a)| alone.send(f, false).addr() != *a)
        .count();
    println!("without sync {moved} of {} flows move", flows.len());
    assert!(moved > 0, "the scenario must have flows Maglev moves");

    // Node 1 is gone: every flow continues on node 2, to its backend.
    for (f, a) in &flows {
        assert_eq!(n2.send(f, false).addr(), *a, "{f:?}");
    }
    assert!(
        n2.status().contains("flow sync: 1 peers, 1 in session;"),
        "{}",
        n2.status()
    );

    // Node 2 restarts empty (a new epoch): the two shake hands again, and
    // it asks node 1 for its entries: paced over ticks, they all arrive.
    let mut n2 = sync_world("n2", N2, N1, SYNC_KEY);
    let mut datagrams = 0;
    for _ in 0..20 {
        deliver(&mut n2, N2, &mut n1, N1);
        datagrams += deliver(&mut n1, N1, &mut n2, N2);
        let p = n1.period;
        n1.advance(p);
        n2.advance(p);
    }
    let c = n2.core.sync_counters().expect("sync on");
    println!("dump of {} entries in {datagrams} datagrams", c.applied);
    assert_eq!(c.applied, 300, "{c:?}");
    // (Asked again every second until the dump's end came: one dump.)
    assert_eq!(n1.core.sync_counters().expect("sync on").dumps, 2);
    assert!(!n2.status().contains("waiting for the entries"));
    for (f, a) in &flows {
        assert_eq!(n2.send(f, false).addr(), *a, "{f:?}");
    }
}

/// Carries the datagrams both ways, a period at a time, until neither node
/// waits for the other's entries: hellos and their replies (the sessions,
/// M54), dump requests, then their (empty) dumps' ends.
fn settle(a: &mut World, b: &mut World) {
    for _ in 0..20 {
        deliver(a, N1, b, N2);
        deliver(b, N2, a, N1);
        let p = a.period;
        a.advance(p);
        b.advance(p);
        if [&mut *a, &mut *b]
            .iter_mut()
            .all(|w| !w.status().contains("waiting for the entries"))
        {
            break;
        }
    }
    for w in [a, b] {
        let s = w.status();
        assert!(!s.contains("waiting for the entries"), "{s}");
        assert!(s.contains("flow sync: 1 peers, 1 in session;"), "{s}");
    }
}

/// A starting node's dump request is usually lost (its address comes up
/// after it starts): it asks again every second until the peer's dump
/// ends, then stops asking.
#[test]
fn a_lost_dump_request_is_asked_again_until_the_dump_ends() {
    let mut n1 = sync_world("n1", N1, N2, SYNC_KEY);
    let mut n2 = sync_world("n2", N2, N1, SYNC_KEY);
    settle(&mut n1, &mut n2);
    let flows = n1.open(50, "10.0.0.10", 80);
    n1.advance(SEC);
    deliver(&mut n1, N1, &mut n2, N2);

    let mut n2 = sync_world("n2", N2, N1, SYNC_KEY);
    // Its hello is lost; it asks again, and once in session it asks for
    // the dump.
    n2.sync_out.clear(); // lost
    assert!(
        n2.status()
            .contains("flow sync: waiting for the entries of 1 peers")
    );
    let mut requests = 0;
    for _ in 0..6 {
        n2.advance(n2.period);
        deliver(&mut n2, N2, &mut n1, N1);
        let p = n1.period;
        n1.advance(p);
        deliver(&mut n1, N1, &mut n2, N2);
        requests += dump_requests(&n2);
        if n2.status().contains("1 in session;") && requests > 0 {
            break;
        }
    }
    // The request is lost too: asked again a second later.
    n2.sync_out.retain(|(_, d)| d.get(5) != Some(&2));
    deliver(&mut n2, N2, &mut n1, N1);
    n2.advance(SEC);
    assert!(dump_requests(&n2) >= 1, "asked again");
    deliver(&mut n2, N2, &mut n1, N1);
    for _ in 0..3 {
        let p = n1.period;
        n1.advance(p);
        deliver(&mut n1, N1, &mut n2, N2);
    }
    assert_eq!(
        n2.core.sync_counters().expect("sync on").applied,
        flows.len() as u64
    );
    assert!(!n2.status().contains("waiting for the entries"));
    n2.advance(3 * SEC);
    assert_eq!(dump_requests(&n2), 0, "no more asking");
}

/// Dump requests `w` is about to send (rate summaries go every second).
fn dump_requests(w: &World) -> usize {
    // Byte 5 of a flow-sync datagram is its kind; 2 asks for a dump.
    w.sync_out
        .iter()
        .filter(|(_, d)| d.get(5) == Some(&2))
        .count()
}

/// Datagrams under another key, and from a source that is no configured
/// peer, are dropped and counted; nothing of them is applied.
#[test]
fn foreign_sync_datagrams_are_dropped_and_counted() {
    let other_key = "hex:ffffffffffffffffffffffffffffffff";
    let mut n1 = sync_world("n1", N1, N2, other_key);
    let mut n2 = sync_world("n2", N2, N1, SYNC_KEY);
    let _ = deliver(&mut n2, N2, &mut n1, N1);
    let flows = n1.open(20, "10.0.0.10", 80);
    n1.advance(SEC);
    let all: Vec<_> = n1.sync_out.clone();
    assert!(deliver(&mut n1, N1, &mut n2, N2) >= 1);
    // The same datagrams from an address that is no peer.
    for (_, d) in &all {
        n2.sync_receive(addr("192.0.2.9:7700"), d);
    }
    let c = n2.core.sync_counters().expect("sync on");
    assert_eq!(c.applied, 0, "{c:?}");
    assert!(c.drop_auth >= 2 && c.drop_source >= 2, "{c:?}");
    assert_eq!(c.drop_auth, c.drop_source, "{c:?}");
    let s = n2.status();
    assert!(
        s.contains(&format!("source {}, auth {}", c.drop_source, c.drop_auth)),
        "{s}"
    );
    assert_eq!(flows.len(), 20);
}

/// A reload that changes `[flow_sync]` goes live for everything else and
/// says the sync settings wait for a restart (the socket is set up once).
#[test]
fn a_reload_changing_flow_sync_says_it_needs_a_restart() {
    let mut n1 = sync_world("n1", N1, N2, SYNC_KEY);
    let other = "hex:0f0e0d0c0b0a09080706050403020100";
    n1.reload(&synced("n1", N1, N2, other), false)
        .expect("reloaded");
    assert!(n1.logged(
        Level::Warn,
        "reload: [flow_sync] changed; that takes effect at the next restart"
    ));
}

/// A peer's copy of an entry is refreshed while its carrier sees the flow:
/// it outlives the half-open and first-packet timeouts it was sent with
/// (without refreshes the flows that Maglev moves would break after 10 s),
/// and it expires once the flow goes idle on its carrier: two nodes never
/// keep an idle flow alive for each other.
#[test]
fn learned_entries_live_while_their_carrier_sees_the_flow() {
    let mut n1 = sync_world("n1", N1, N2, SYNC_KEY);
    let mut n2 = sync_world("n2", N2, N1, SYNC_KEY);
    settle(&mut n1, &mut n2);
    n1.set_health("10.1.0.4", State::Unhealthy);
    n1.advance(SEC);
    let flows = n1.open(200, "10.0.0.10", 80);
    for _ in 0..40 {
        n1.where_now(&flows);
        n1.advance(SEC);
        deliver(&mut n1, N1, &mut n2, N2);
        n2.advance(SEC);
        deliver(&mut n2, N2, &mut n1, N1);
    }
    let c = n2.core.sync_counters().expect("sync on");
    println!("after 40 s: {c:?}");
    assert_eq!(c.applied, 200, "{c:?}");
    assert!(c.refreshed >= 200 * 10, "{c:?}");

    // The flows go idle on n1: n1's entries expire, then n2's copies.
    let t = n1
        .core
        .compiled()
        .settings
        .dataplane
        .timeouts
        .tcp_established
        .0;
    for _ in 0..t.as_secs() + 60 {
        n1.advance(SEC);
        deliver(&mut n1, N1, &mut n2, N2);
        n2.advance(SEC);
        deliver(&mut n2, N2, &mut n1, N1);
    }
    for w in [&mut n1, &mut n2] {
        let s = w.status();
        assert!(s.contains("flow table: 0 live"), "{s}");
    }
}

/// The same, then n1 dies while its flows are busy: n2 sends each to n1's
/// backend, long after the half-open timeout.
#[test]
fn a_refreshed_flow_survives_its_carriers_death_after_the_half_open_timeout() {
    let mut n1 = sync_world("n1", N1, N2, SYNC_KEY);
    let mut n2 = sync_world("n2", N2, N1, SYNC_KEY);
    settle(&mut n1, &mut n2);
    n1.set_health("10.1.0.4", State::Unhealthy);
    n1.advance(SEC);
    let flows = n1.open(200, "10.0.0.10", 80);
    for _ in 0..30 {
        n1.where_now(&flows);
        n1.advance(SEC);
        deliver(&mut n1, N1, &mut n2, N2);
        n2.advance(SEC);
    }
    for (f, a) in &flows {
        assert_eq!(n2.send(f, false).addr(), *a, "{f:?}");
    }
}

/// Probes through the VIP (M52): each rule's new flows follow its own VIP's
/// verdicts. A backend that fails on one VIP of its service takes no new
/// flows there, keeps taking them on the other, and keeps its flows.
#[test]
fn a_backend_failing_one_vip_takes_new_flows_only_on_the_other() {
    let text = node_r1("n")
        .port(port("kernel", "net_tap0", "exception"))
        .rule(rule("web", &["10.0.0.10"], "TCP", "80", "web").set("ports", 80))
        .rule(rule("alt", &["10.0.0.11"], "TCP", "80", "web").set("ports", 80))
        .service(web_service("DEFAULT_FOR_PROTOCOL", &FOUR))
        .health_check(
            health_check("tcp", "TCP")
                .set("port", 80)
                .str("target", "vip"),
        )
        .build();
    let mut w = healthy_world(&text, 21);
    let (one, alt) = (ip("10.1.0.1"), ip("10.0.0.11"));
    let before = w.open(200, "10.0.0.11", 80);
    assert!(on(&before, one) > 0, "every backend takes flows at first");
    // 10.1.0.1 lacks 10.0.0.11: its probes through that VIP fail.
    w.shell.probes.set_state_via(one, alt, State::Unhealthy);
    w.advance(SEC);
    let status = w.status();
    assert!(
        status.contains("health web/10.1.0.1:80 via 10.0.0.11: UNHEALTHY"),
        "{status}"
    );
    assert!(
        status.contains("health web/10.1.0.1:80 via 10.0.0.10: HEALTHY"),
        "{status}"
    );
    let on_alt = w.open(200, "10.0.0.11", 80);
    assert_eq!(on(&on_alt, one), 0, "no new flow where it fails");
    assert!(on_alt.iter().all(|(_, b)| b.is_some()), "{on_alt:?}");
    let on_web = w.open(200, "10.0.0.10", 80);
    assert!(
        on(&on_web, one) > 20,
        "it still takes its share on the other VIP"
    );
    // Its established flows stay (it is alive on the other VIP).
    let now = w.where_now(&before);
    for ((_, was), is) in before.iter().zip(&now) {
        if *was == Some(one) {
            assert_eq!(*is, Some(one));
        }
    }
    // Back on 10.0.0.11: new flows there reach it again.
    w.shell.probes.set_state_via(one, alt, State::Healthy);
    w.advance(SEC);
    let again = w.open(200, "10.0.0.11", 80);
    assert!(on(&again, one) > 20, "{again:?}");
}

/// `[bgp]` for the announcement scenarios (M35).
const BGP: &str =
    "[bgp]\nspeaker = \"bird\"\ncontrol = \"/run/bird/bird.ctl\"\nlocal_asn = 65001\n";

/// Rule `web` with a VIP per availability group (10.0.0.10 in group 0,
/// 10.0.0.11 in group 1) to [`FOUR`] backends checked through the VIP
/// (M52), on a node of group `ag` (`None`: both) that announces (M35).
fn two_group_web(ag: Option<u8>) -> String {
    Config::new()
        .node(group_node(ag))
        .dataplane("flow_table_capacity", 8192)
        .port(port("up", "net_ring0", "uplink").strs("addresses", &["10.0.0.2/24"]))
        .port(port("kernel", "net_tap0", "exception"))
        .rule(rule("web", &["10.0.0.10", "10.0.0.11"], "TCP", "80", "web").set("ports", 80))
        .service(web_service("DEFAULT_FOR_PROTOCOL", &FOUR))
        .health_check(
            health_check("tcp", "TCP")
                .set("port", 80)
                .str("target", "vip"),
        )
        .raw(BGP)
        .build()
}

/// Each VIP's announcement, as (VIP, announced); none before the first
/// decision.
fn announced_vips(w: &World) -> Vec<(IpAddr, bool)> {
    w.core
        .announcement()
        .into_iter()
        .flatten()
        .map(|(v, why)| (*v, why.announced()))
        .collect()
}

/// M5 with M52: on a node of both availability groups, two of four
/// backends lose group 1's VIP. Group 1's child rule goes UNHEALTHY (2 of
/// 4 is below 60 %) and its VIP is withdrawn; group 0's child rule stays
/// HEALTHY, its VIP announced, and its new flows still reach all four;
/// the rule (what consumers naming it read) is HEALTHY while one child is.
/// Group 1 recovers: announced again.
#[test]
fn availability_groups_fail_independently_on_a_node_of_both() {
    let mut w = healthy_world(&two_group_web(None), 31);
    w.advance(SEC);
    let (v0, v1) = (ip("10.0.0.10"), ip("10.0.0.11"));
    assert_eq!(announced_vips(&w), [(v0, true), (v1, true)]);
    for b in &FOUR[..2] {
        w.shell.probes.set_state_via(ip(b), v1, State::Unhealthy);
    }
    w.advance(SEC);
    assert_eq!(w.rule_state("web-ag1"), Aggregate::Unhealthy);
    assert_eq!(w.rule_state("web-ag0"), Aggregate::Healthy);
    assert_eq!(w.rule_state("web"), Aggregate::Healthy);
    assert_eq!(announced_vips(&w), [(v0, true), (v1, false)]);
    let status = w.status();
    assert!(
        status.contains("child rule web-ag0 (VIP 10.0.0.10): HEALTHY")
            && status.contains("child rule web-ag1 (VIP 10.0.0.11): UNHEALTHY")
            && status.contains("VIP 10.0.0.11: withdrawn (rule UNHEALTHY)"),
        "{status}"
    );
    assert!(
        w.logged(Level::Info, "health: rule web-ag1 HEALTHY -> UNHEALTHY"),
        "{:?}",
        w.take_logs()
    );
    let ag0 = w.open(200, "10.0.0.10", 80);
    for b in FOUR {
        assert!(on(&ag0, ip(b)) > 20, "{b} takes group 0's flows: {ag0:?}");
    }
    let ag1 = w.open(200, "10.0.0.11", 80);
    assert!(ag1.iter().all(|(_, b)| b.is_some()), "{ag1:?}");
    for b in &FOUR[..2] {
        assert_eq!(on(&ag1, ip(b)), 0, "{b} fails through group 1's VIP");
    }
    for b in &FOUR[..2] {
        w.shell.probes.set_state_via(ip(b), v1, State::Healthy);
    }
    w.advance(SEC);
    assert_eq!(w.rule_state("web-ag1"), Aggregate::Healthy);
    assert_eq!(announced_vips(&w), [(v0, true), (v1, true)]);
}

/// M5 with M52: a node of availability group 0 probes only group 0's VIP,
/// so a path broken through group 1's VIP (every backend failing there)
/// cannot reach it: its child rule, its rule and its announcement stay
/// HEALTHY. It exports its served child rule only.
#[test]
fn a_node_of_one_group_never_probes_the_other_groups_vip() {
    let mut w = healthy_world(&two_group_web(Some(0)), 32);
    w.advance(SEC);
    let (v0, v1) = (ip("10.0.0.10"), ip("10.0.0.11"));
    for b in FOUR {
        w.shell.probes.set_state_via(ip(b), v1, State::Unhealthy);
    }
    w.advance(SEC);
    let status = w.status();
    for b in FOUR {
        assert!(
            status.contains(&format!("health web/{b}:80 via 10.0.0.10: HEALTHY")),
            "{status}"
        );
    }
    assert!(!status.contains("via 10.0.0.11"), "{status}");
    assert_eq!(w.rule_state("web"), Aggregate::Healthy);
    assert_eq!(w.rule_state("web-ag0"), Aggregate::Healthy);
    let exported: Vec<String> = w
        .core
        .exported_states()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(exported, ["web", "web-ag0"]);
    assert_eq!(announced_vips(&w), [(v0, true)]);
    let flows = w.open(200, "10.0.0.10", 80);
    for b in FOUR {
        assert!(on(&flows, ip(b)) > 20, "{b}: {flows:?}");
    }
}

/// M5 with M20: a composite's source checked through its own rule's VIPs
/// counts, for each child rule of the composite's rule, its probes through
/// the VIPs of that child's availability group. `db`'s backends fail
/// through group 1's VIP only: `web-ag1` (the composite's) and `db-ag1` go
/// UNHEALTHY, group 0's stay HEALTHY and announced.
#[test]
fn a_composites_child_rules_follow_their_own_groups_probes() {
    let composite = "[[composite_health_checks]]\nname = \"web-composite\"\nsources = [{ backend_service = \"db\" }]\ndestination = \"web\"\n";
    let text = node_r1("n")
        .port(port("kernel", "net_tap0", "exception"))
        .rule(rule("web", &["10.0.0.10", "10.0.0.11"], "TCP", "80", "web").set("ports", 80))
        .rule(rule("db", &["10.0.0.20", "10.0.0.21"], "TCP", "5432", "db").set("ports", 5432))
        .service(
            service("web", "ipip")
                .child(group("a", "r1", "r1-a").set("endpoints", endpoint_list(&FOUR))),
        )
        .service(service("db", "ipip").str("health_check", "db").child(
            group("a", "r1", "r1-a").set("endpoints", endpoint_list(&["10.2.0.1", "10.2.0.2"])),
        ))
        .health_check(
            health_check("db", "TCP")
                .set("port", 5432)
                .str("target", "vip"),
        )
        .raw(composite)
        .raw(BGP)
        .build();
    let mut w = healthy_world(&text, 33);
    w.advance(SEC);
    for b in ["10.2.0.1", "10.2.0.2"] {
        w.shell
            .probes
            .set_state_via(ip(b), ip("10.0.0.21"), State::Unhealthy);
    }
    w.advance(SEC);
    for (rule, want) in [
        ("web-ag0", Aggregate::Healthy),
        ("web-ag1", Aggregate::Unhealthy),
        ("db-ag0", Aggregate::Healthy),
        ("db-ag1", Aggregate::Unhealthy),
        ("web", Aggregate::Healthy),
        ("db", Aggregate::Healthy),
    ] {
        assert_eq!(w.rule_state(rule), want, "{rule}");
    }
    let up: Vec<(IpAddr, bool)> = announced_vips(&w);
    assert_eq!(
        up,
        [
            (ip("10.0.0.10"), true),
            (ip("10.0.0.11"), false),
            (ip("10.0.0.20"), true),
            (ip("10.0.0.21"), false)
        ]
    );
}

/// M14 end to end through the management core: a rolling update replaces
/// every endpoint of a service with `no_backend_fallback = "draining"` by
/// one that fails its checks. New connections go to the old endpoints
/// while they drain (status and the log say so) instead of being dropped,
/// established ones stay, and the new endpoint takes over once healthy.
#[test]
fn a_rolling_update_with_no_ready_endpoint_falls_back_on_the_draining_ones() {
    let text = |eps: &[&str]| {
        with_web(web_service("DEFAULT_FOR_PROTOCOL", eps).str("no_backend_fallback", "draining"))
            .build()
    };
    let mut w = healthy_world(&text(&FOUR), 23);
    let before = w.open(40, "10.0.0.10", 80);
    assert!(before.iter().all(|(_, b)| b.is_some()));
    w.reload(&text(&["10.1.0.9"]), false)
        .unwrap_or_else(|e| panic!("{e}"));
    w.set_health("10.1.0.9", State::Unhealthy);
    w.advance(SEC);
    assert!(
        w.logged(
            Level::Warn,
            "service web: no configured endpoint is eligible; new connections go to its 4 draining endpoint(s) as the last resort"
        ),
        "{:?}",
        w.take_logs()
    );
    let during = w.open(200, "10.0.0.10", 80);
    let mut to: Vec<IpAddr> = during.iter().filter_map(|(_, b)| *b).collect();
    assert_eq!(to.len(), 200, "no new connection dropped");
    to.sort();
    to.dedup();
    assert_eq!(to, FOUR.map(ip), "spread over the draining endpoints");
    let status = w.status();
    assert!(
        status.contains("service web: ipip (0 eligible backends; last resort: 4 draining backends take new connections)"),
        "{status}"
    );
    let established: Vec<_> = before.iter().map(|(_, b)| *b).collect();
    assert_eq!(w.where_now(&before), established, "established flows stay");
    // The new endpoint passes its checks: it alone takes new connections.
    w.set_health("10.1.0.9", State::Healthy);
    w.advance(SEC);
    assert!(
        w.logged(
            Level::Info,
            "service web: no longer on draining endpoints as the last resort"
        ),
        "{:?}",
        w.take_logs()
    );
    let after = w.open(50, "10.0.0.10", 80);
    assert!(after.iter().all(|(_, b)| *b == Some(ip("10.1.0.9"))));
    assert!(
        w.status()
            .contains("service web: ipip (1 eligible backends)")
    );
}

/// M5: a reload that would move a VIP allocated from a pool is refused
/// unless forced (clients and DNS know the address; the file never showed
/// it), while one that keeps it goes live.
#[test]
fn a_reload_that_moves_a_pool_allocated_vip_is_refused_unless_forced() {
    let pool = |prefix: &str| {
        let text = web("DEFAULT_FOR_PROTOCOL", &FOUR).replace("vips = [\"10.0.0.10\"]\n", "");
        format!("{text}\n[[availability_groups]]\ngroup = 0\nvip_pool = [\"{prefix}\"]\n")
    };
    let mut w = healthy_world(&pool("198.18.10.0/24"), 29);
    let before = w.status();
    assert!(before.contains(", from vip_pool): HEALTHY"), "{before}");
    // Another service's change keeps the allocation: accepted.
    w.reload(&pool("198.18.10.0/24").replace("10s", "20s"), false)
        .unwrap_or_else(|e| panic!("{e}"));
    // A new pool moves both rules' VIPs: refused, then forced.
    let why = w
        .reload_answer(&pool("198.18.20.0/24"), false)
        .expect_err("moves allocated VIPs")
        .to_string();
    assert!(
        why.contains("it would move VIPs allocated from a vip_pool: ")
            && why.contains("web-ag0 from 198.18.10.")
            && why.contains(" to 198.18.20."),
        "{why}"
    );
    w.reload(&pool("198.18.20.0/24"), true)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(w.status().contains("(VIP 198.18.20."), "{}", w.status());
}
