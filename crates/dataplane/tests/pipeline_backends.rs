//! The pipeline as backends change: removed backends drain (M11), their
//! slots reused; health and fail-open (M23); reloads that reorder services
//! (M38); no eligible backend (M14); unresolved next hops (M47).
//!
//! The pipeline end to end on in-memory buffers (the lab in `common`): a
//! compiled configuration, a snapshot, a real flow table, crafted frames
//! in, verdicts and bytes out.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly
#![allow(clippy::cast_possible_truncation)] // test values are small

mod common;

use common::*;
use dataplane::{DropReason, EndpointHealth, Local, Verdict};
use testkit::config::{Config, rule, service};
use testkit::packet::{ACK, SYN};

#[test]
fn a_removed_backend_drains_then_its_flows_move_and_it_gets_no_new_ones() {
    let four = config("ipip", &FOUR);
    let mut lab = Lab::with(&four, 4096);
    // Find flows on 10.0.1.14.
    let mut on_removed = Vec::new();
    for port in 0..200u16 {
        let f = tcp(CLIENT, 30000 + port, VIP, 80, SYN).frame();
        let (_, out) = lab.run(&f, 1);
        if backend_of(&out, &f).to_string() == "10.0.1.14" {
            on_removed.push(30000 + port);
        }
    }
    assert!(!on_removed.is_empty());
    // Reload without 10.0.1.14 at tick 5: draining for 10 s (10 ticks).
    lab.rebuild(&config("ipip", &THREE), |_| true, 5);
    for &p in &on_removed {
        let f = tcp(CLIENT, p, VIP, 80, ACK).frame();
        let (_, out) = lab.run(&f, 10);
        assert_eq!(
            backend_of(&out, &f).to_string(),
            "10.0.1.14",
            "established flows keep draining backends"
        );
    }
    for port in 0..200u16 {
        let f = tcp(CLIENT, 50000 + port, VIP, 80, SYN).frame();
        let (_, out) = lab.run(&f, 10);
        assert_ne!(
            backend_of(&out, &f).to_string(),
            "10.0.1.14",
            "no new flow goes to a removed backend"
        );
    }
    // After the draining period the next rebuild retires it; its flows move.
    lab.rebuild(&config("ipip", &THREE), |_| true, 16);
    for &p in &on_removed {
        let f = tcp(CLIENT, p, VIP, 80, ACK).frame();
        let (_, out) = lab.run(&f, 17);
        assert_ne!(backend_of(&out, &f).to_string(), "10.0.1.14");
    }
    assert_eq!(
        lab.worker.counters.flows_rescheduled,
        u64::try_from(on_removed.len()).expect("a few")
    );
}

/// A removed backend's slot goes to the next new endpoint (the slot table
/// does not grow with every endpoint that ever was), and the old backend's
/// flows never follow their entries to the newcomer.
#[test]
fn a_removed_backends_slot_is_reused_and_its_old_flows_do_not_follow_it() {
    let four = config("ipip", &FOUR);
    let mut lab = Lab::with(&four, 4096);
    let mut on_removed = Vec::new();
    for port in 0..200u16 {
        let f = tcp(CLIENT, 30000 + port, VIP, 80, SYN).frame();
        let (_, out) = lab.run(&f, 1);
        if backend_of(&out, &f).to_string() == "10.0.1.14" {
            on_removed.push(30000 + port);
        }
    }
    assert!(!on_removed.is_empty());
    let slot = |lab: &Lab, addr: &str| {
        lab.snap
            .backends
            .iter()
            .position(|b| b.addr.to_string() == addr && b.state == dataplane::BackendState::Active)
    };
    let old_slot = slot(&lab, "10.0.1.14").expect("slot of 10.0.1.14");
    let slots = lab.snap.backends.len();
    // 10.0.1.14 leaves; after its 10 s of draining it is removed.
    let three = config("ipip", &THREE);
    lab.rebuild(&three, |_| true, 5);
    lab.rebuild(&three, |_| true, 16);
    assert_eq!(
        lab.snap.backends[old_slot].state,
        dataplane::BackendState::Removed
    );
    // A new endpoint takes the free slot.
    let newcomer = config(
        "ipip",
        &["10.0.1.11", "10.0.1.12", "10.0.1.13", "10.0.1.99"],
    );
    lab.rebuild(&newcomer, |_| true, 17);
    assert_eq!(
        slot(&lab, "10.0.1.99"),
        Some(old_slot),
        "the free slot is reused"
    );
    assert_eq!(lab.snap.backends.len(), slots, "no slot was added");
    // The removed backend's flows are rescheduled, by Maglev over the new
    // set: never to 10.0.1.99 through their old entries.
    let fresh = Lab::with(&newcomer, 4096);
    let mut fresh = fresh;
    for &p in &on_removed {
        let f = tcp(CLIENT, p, VIP, 80, ACK).frame();
        let (_, out) = lab.run(&f, 18);
        let (_, want) = fresh.run(&f, 18);
        assert_eq!(
            backend_of(&out, &f),
            backend_of(&want, &f),
            "port {p}: Maglev's choice"
        );
    }
    assert_eq!(
        lab.worker.counters.flows_rescheduled,
        u64::try_from(on_removed.len()).expect("a few")
    );
}

/// M23: failing open, every endpoint serves as if healthy — flows keep
/// their entries instead of being re-created at every packet.
#[test]
fn failing_open_keeps_flows_on_their_backends() {
    let cfg = with_web(web("ipip", &THREE).set("fail_open", true), "53");
    let mut lab = Lab::with(&cfg, 4096);
    lab.rebuild(&cfg, |_| false, 1);
    let mut first = Vec::new();
    for port in 0..50u16 {
        let f = udp(CLIENT, 40000 + port, VIP, 53).frame();
        let (v, out) = lab.run(&f, 2);
        assert_eq!(v, Verdict::Forward, "fail-open forwards");
        first.push(backend_of(&out, &f));
    }
    for round in 0..3 {
        for port in 0..50u16 {
            let f = udp(CLIENT, 40000 + port, VIP, 53).frame();
            let (_, out) = lab.run(&f, 3 + round);
            assert_eq!(backend_of(&out, &f), first[usize::from(port)]);
        }
    }
    let c = &lab.worker.counters;
    assert_eq!(
        (c.new_flows, c.flow_hits, c.flows_rescheduled),
        (50, 150, 0)
    );
}

#[test]
fn unhealthy_backends_keep_tcp_but_not_udp_by_default() {
    let mut lab = Lab::new("ipip");
    let mut tcp_flows = Vec::new();
    let mut udp_flows = Vec::new();
    for port in 0..60u16 {
        let t = tcp(CLIENT, 30000 + port, VIP, 80, SYN).frame();
        let (_, out) = lab.run(&t, 1);
        tcp_flows.push((30000 + port, backend_of(&out, &t)));
        let u = udp(CLIENT, 30000 + port, VIP, 53).frame();
        let (_, out) = lab.run(&u, 1);
        udp_flows.push((30000 + port, backend_of(&out, &u)));
    }
    let sick = tcp_flows[0].1.to_string();
    let sick2 = sick.clone();
    lab.rebuild(&config("ipip", &THREE), move |a| a != sick2, 2);
    for (p, be) in &tcp_flows {
        let f = tcp(CLIENT, *p, VIP, 80, ACK).frame();
        let (_, out) = lab.run(&f, 3);
        assert_eq!(
            backend_of(&out, &f),
            *be,
            "TCP stays (DEFAULT_FOR_PROTOCOL)"
        );
    }
    for (p, _) in &udp_flows {
        let f = udp(CLIENT, *p, VIP, 53).frame();
        let (_, out) = lab.run(&f, 3);
        assert_ne!(
            backend_of(&out, &f).to_string(),
            sick,
            "UDP moves off the unhealthy backend"
        );
    }
}

/// A real connection that did all its talking in its first second and then
/// went quiet (a pooled keep-alive connection) keeps its entry past the
/// first-packet timeout: entries opened by a SYN keep TCP's timeouts while
/// unconfirmed. A backend joining meanwhile does not move it.
#[test]
fn a_connection_idle_after_its_first_second_keeps_its_backend() {
    let mut lab = Lab::new("ipip");
    let mut conns = Vec::new();
    for port in 30000..30100u16 {
        let syn = tcp(CLIENT, port, VIP, 80, SYN).frame();
        let (_, out) = lab.run(&syn, 1);
        lab.run(&tcp(CLIENT, port, VIP, 80, ACK).frame(), 1);
        conns.push((port, backend_of(&out, &syn)));
    }
    // Quiet until second 40 (the sweeper runs meanwhile); a fourth backend joins.
    assert_eq!(lab.flows.sweep(30, usize::MAX).expired, 0);
    lab.rebuild(&config("ipip", &FOUR), |_| true, 35);
    for (port, backend) in &conns {
        let ack = tcp(CLIENT, *port, VIP, 80, ACK).frame();
        let (_, out) = lab.run(&ack, 40);
        assert_eq!(backend_of(&out, &ack), *backend, "port {port}");
    }
    assert_eq!(lab.worker.counters.flows_rescheduled, 0);
}

#[test]
fn without_eligible_backends_new_flows_are_dropped_and_counted() {
    let mut lab = Lab::new("ipip");
    lab.rebuild(&config("ipip", &THREE), |_| false, 1);
    let f = tcp(CLIENT, 1234, VIP, 80, SYN).frame();
    assert_eq!(lab.run(&f, 2).0, Verdict::Drop(DropReason::NoBackend));
    let web = lab
        .snap
        .compiled
        .children
        .iter()
        .position(|ch| ch.name == "web-ag0")
        .expect("child");
    let cc = &lab.worker.counters.children[web];
    assert_eq!(cc.drops, 1);
    assert_eq!(cc.drop_reasons[DropReason::NoBackend as usize], 1);
    assert_eq!(cc.drop_reasons.iter().sum::<u64>(), 1, "one reason");
}

/// Two services in the order given; `web` has `web_eps` endpoints
/// 10.0.1.11… and takes TCP 80, `other` takes UDP 53.
fn two_services(web_first: bool, web_eps: usize) -> Config {
    let eps: Vec<String> = (0..web_eps).map(|i| format!("10.0.1.{}", 11 + i)).collect();
    let web = service("web", "ipip").child(group_of("a", &eps));
    let other = service("other", "ipip").child(group_of("b", &["10.0.2.21"]));
    let cfg = Config::new()
        .port(uplink(&["10.0.0.2/24"]))
        .rule(rule("web", &["10.0.0.10"], "TCP", "80", "web"))
        .rule(rule("dns", &["10.0.0.10"], "UDP", "53", "other"));
    if web_first {
        cfg.service(web).service(other)
    } else {
        cfg.service(other).service(web)
    }
}

/// M38: flow identity does not depend on the order of services in the
/// file. A reload that moves `web` from the first to the second
/// `[[backend_services]]` block (and adds an endpoint, so that Maglev now
/// picks other backends for some of its flows) keeps every established flow
/// on its backend. (The flow key used to carry the service's position.)
#[test]
fn reordering_services_keeps_every_flow_on_its_backend() {
    let mut lab = Lab::with(&two_services(true, 3), 4096);
    let mut before = Vec::new();
    for port in 20000..20200u16 {
        let f = tcp(CLIENT, port, VIP, 80, SYN).frame();
        let (_, out) = lab.run(&f, 1);
        before.push((port, backend_of(&out, &f)));
    }
    let reordered = two_services(false, 4);
    lab.rebuild(&reordered, |_| true, 2);
    // Where the new configuration would put each connection without entries.
    let mut fresh = Lab::with(&reordered, 4096);
    let mut moved_by_maglev = 0;
    for (port, backend) in &before {
        let ack = tcp(CLIENT, *port, VIP, 80, ACK).frame();
        let (v, out) = lab.run(&ack, 3);
        assert_eq!(v, Verdict::Forward, "port {port}");
        assert_eq!(
            backend_of(&out, &ack),
            *backend,
            "port {port} stays on its backend"
        );
        let (_, out) = fresh.run(&ack, 3);
        if backend_of(&out, &ack) != *backend {
            moved_by_maglev += 1;
        }
    }
    assert!(
        moved_by_maglev > 0,
        "some flows sit where Maglev would no longer send them"
    );
    let c = &lab.worker.counters;
    assert_eq!(
        (c.new_flows, c.flows_rescheduled),
        (200, 0),
        "no flow was re-created"
    );
}

#[test]
fn a_new_syn_never_follows_an_entry_to_a_draining_backend() {
    let four = config("ipip", &FOUR);
    let mut lab = Lab::with(&four, 4096);
    let mut port = 30000u16;
    let port = loop {
        let f = tcp(CLIENT, port, VIP, 80, SYN).frame();
        let (_, out) = lab.run(&f, 1);
        if backend_of(&out, &f).to_string() == "10.0.1.14" {
            break port;
        }
        port += 1;
    };
    lab.rebuild(&config("ipip", &THREE), |_| true, 2);
    let ack = tcp(CLIENT, port, VIP, 80, ACK).frame();
    let (_, out) = lab.run(&ack, 3);
    assert_eq!(
        backend_of(&out, &ack).to_string(),
        "10.0.1.14",
        "the established connection drains"
    );
    // The client reuses the port for a new connection: a SYN on the tuple.
    let syn = tcp(CLIENT, port, VIP, 80, SYN).frame();
    let (_, out) = lab.run(&syn, 4);
    assert_ne!(
        backend_of(&out, &syn).to_string(),
        "10.0.1.14",
        "a new connection never goes to a draining backend"
    );
    assert_eq!(lab.worker.counters.flows_rescheduled, 1);
}

#[test]
fn persisted_flows_on_an_unhealthy_backend_last_only_its_draining_period() {
    // connection_draining_timeout is 10 s: TCP flows persist on a backend
    // that turned unhealthy at tick 2 until tick 12 (M11), however often the
    // snapshot is rebuilt meanwhile; then they move.
    let mut lab = Lab::new("ipip");
    let mut flows = Vec::new();
    for port in 0..60u16 {
        let t = tcp(CLIENT, 40000 + port, VIP, 80, SYN).frame();
        let (_, out) = lab.run(&t, 1);
        flows.push((40000 + port, backend_of(&out, &t)));
    }
    let sick = flows[0].1.to_string();
    let cfg = config("ipip", &THREE);
    let s2 = sick.clone();
    lab.rebuild(&cfg, move |a| a != s2, 2);
    let s3 = sick.clone();
    lab.rebuild(&cfg, move |a| a != s3, 8);
    let on_sick: Vec<u16> = flows
        .iter()
        .filter(|(_, b)| b.to_string() == sick)
        .map(|(p, _)| *p)
        .collect();
    assert!(!on_sick.is_empty());
    for p in &on_sick {
        let f = tcp(CLIENT, *p, VIP, 80, ACK).frame();
        let (_, out) = lab.run(&f, 11);
        assert_eq!(
            backend_of(&out, &f).to_string(),
            sick,
            "still draining at 11"
        );
    }
    for p in &on_sick {
        let f = tcp(CLIENT, *p, VIP, 80, ACK).frame();
        let (_, out) = lab.run(&f, 12);
        assert_ne!(backend_of(&out, &f).to_string(), sick, "moved at 12");
    }
}

/// M47: a backend whose next hop is unresolved gets no new flows, its
/// established flows are dropped `no_neighbour`, and nothing ever leaves
/// for a zero MAC; once resolved (to a new MAC, say) its flows carry on.
#[test]
fn an_unresolved_next_hop_is_a_counted_drop_never_a_zero_mac() {
    for delivery in ["l2dsr", "gue"] {
        // gue endpoints on the port's segment are resolved themselves.
        let cfg = with_web(web(delivery, &THREE), "53");
        let cfg = if delivery == "gue" {
            Config::new()
                .port(uplink(&["10.0.0.2/24", "10.0.1.2/24"]))
                .rule(rule("web", &["10.0.0.10"], "TCP", "80", "web"))
                .service(web(delivery, &THREE))
        } else {
            cfg
        };
        let mut lab = Lab::with(&cfg, 4096);
        let c = compiled(&cfg);
        let dst_mac = |out: &[u8]| -> [u8; 6] { out[..6].try_into().expect("6 bytes") };
        let syn = tcp(CLIENT, 40000, VIP, 80, SYN).frame();
        let (v, out) = lab.run(&syn, 1);
        assert_eq!(v, Verdict::Forward, "{delivery}");
        assert_eq!(dst_mac(&out), ROUTER_MAC, "{delivery}");
        let backend = lab.worker.counters.backends.clone();
        // Every next hop forgotten (failed): established flows drop, new
        // ones find no eligible backend.
        lab.snap = lab
            .builder
            .build(c.clone(), local(), |_| EndpointHealth::HEALTHY, 2, 1)
            .expect("snapshot");
        assert!(lab.snap.backends.iter().all(|b| b.encap.is_none()));
        assert!(lab.snap.services[0].eligible_slots().is_empty());
        let ack = tcp(CLIENT, 40000, VIP, 80, ACK).frame();
        let (v, out) = lab.run(&ack, 2);
        assert_eq!(v, Verdict::Drop(DropReason::NoNeighbour), "{delivery}");
        assert_ne!(dst_mac(&out), [0; 6]);
        let other = tcp(CLIENT, 40001, VIP, 80, SYN).frame();
        assert_eq!(
            lab.run(&other, 2).0,
            Verdict::Drop(DropReason::NoBackend),
            "{delivery}"
        );
        assert_eq!(lab.worker.counters.dropped(DropReason::NoNeighbour), 1);
        assert_eq!(lab.worker.counters.backends, backend);
        // Resolved again, to a new MAC: the flow follows at once.
        let new_mac = [2, 0, 0, 0, 0, 0x77];
        let moved = Local {
            neighbours: dataplane::nexthop::next_hops(&c)
                .into_iter()
                .map(|h| (h, new_mac))
                .collect(),
            ..local()
        };
        lab.snap = lab
            .builder
            .build(c.clone(), moved, |_| EndpointHealth::HEALTHY, 3, 1)
            .expect("snapshot");
        let (v, out) = lab.run(&ack, 3);
        assert_eq!(v, Verdict::Forward, "{delivery}");
        assert_eq!(dst_mac(&out), new_mac, "{delivery}");
    }
}

/// `web` over ipip with `no_backend_fallback = fallback`, 10 s of
/// draining, endpoints `eps`.
fn with_fallback(fallback: &str, eps: &[&str]) -> Config {
    with_web(web("ipip", eps).str("no_backend_fallback", fallback), "53")
}

/// Backends new SYNs from 200 client ports (from `first`) reach at `now`,
/// and how many of them were dropped for want of one.
fn new_flows(lab: &mut Lab, first: u16, now: u32) -> (Vec<String>, usize) {
    let (mut to, mut dropped) = (Vec::new(), 0);
    for port in first..first + 200 {
        let f = tcp(CLIENT, port, VIP, 80, SYN).frame();
        match lab.run(&f, now) {
            (Verdict::Drop(DropReason::NoBackend), _) => dropped += 1,
            (_, out) => to.push(backend_of(&out, &f).to_string()),
        }
    }
    to.sort();
    to.dedup();
    (to, dropped)
}

/// M14, Kubernetes' terminating endpoints: with `no_backend_fallback =
/// "draining"`, a service none of whose configured endpoints is ready (a
/// rolling update whose new endpoint is not healthy yet) sends new
/// connections to the endpoints that left while healthy and are still
/// draining — never to one that left unhealthy — until a configured one
/// is ready or their draining period ends. Without it they are dropped.
#[test]
fn without_a_ready_endpoint_new_connections_go_to_draining_ones_as_the_last_resort() {
    let old = ["10.0.1.11", "10.0.1.12", "10.0.1.13", "10.0.1.14"];
    let new = ["10.0.1.21"];
    for fallback in ["draining", "none"] {
        let mut lab = Lab::with(&with_fallback(fallback, &old), 4096);
        // 10.0.1.14 fails its checks before the update.
        lab.rebuild(&with_fallback(fallback, &old), |a| a != "10.0.1.14", 1);
        assert!(!lab.snap.services[0].last_resort);
        let established = tcp(CLIENT, 1000, VIP, 80, SYN).frame();
        let (_, out) = lab.run(&established, 2);
        let before = backend_of(&out, &established).to_string();
        // The update at tick 5: the old endpoints leave, the new one is
        // not healthy yet.
        lab.rebuild(&with_fallback(fallback, &new), |_| false, 5);
        let (to, dropped) = new_flows(&mut lab, 30000, 6);
        if fallback == "draining" {
            assert!(lab.snap.services[0].last_resort);
            assert_eq!(dropped, 0, "every new connection has a backend");
            assert_eq!(
                to,
                ["10.0.1.11", "10.0.1.12", "10.0.1.13"],
                "spread over the draining endpoints that left healthy"
            );
        } else {
            assert!(!lab.snap.services[0].last_resort);
            assert_eq!(
                (to.len(), dropped),
                (0, 200),
                "dropped without the fallback"
            );
        }
        // Established flows keep their backends either way.
        let ack = tcp(CLIENT, 1000, VIP, 80, ACK).frame();
        let (_, out) = lab.run(&ack, 6);
        assert_eq!(backend_of(&out, &ack).to_string(), before);
        if fallback == "none" {
            continue;
        }
        // A connection opened on a draining endpoint stays on it.
        let syn = tcp(CLIENT, 2000, VIP, 80, SYN).frame();
        let (_, out) = lab.run(&syn, 6);
        let on = backend_of(&out, &syn);
        let ack = tcp(CLIENT, 2000, VIP, 80, ACK).frame();
        let (_, out) = lab.run(&ack, 7);
        assert_eq!(backend_of(&out, &ack), on);
        // Every node picks alike: a fresh builder given the same history
        // sends each new flow to the same draining endpoint.
        let mut twin = Lab::with(&with_fallback(fallback, &old), 4096);
        twin.rebuild(&with_fallback(fallback, &old), |a| a != "10.0.1.14", 1);
        twin.rebuild(&with_fallback(fallback, &new), |_| false, 5);
        for port in 40000..40050u16 {
            let f = tcp(CLIENT, port, VIP, 80, SYN).frame();
            let (_, a) = lab.run(&f, 7);
            let (_, b) = twin.run(&f, 7);
            assert_eq!(backend_of(&a, &f), backend_of(&b, &f));
        }
        // The new endpoint turns healthy: new flows go to it alone.
        lab.rebuild(&with_fallback(fallback, &new), |_| true, 8);
        assert!(!lab.snap.services[0].last_resort);
        assert_eq!(
            new_flows(&mut lab, 50000, 9),
            (vec!["10.0.1.21".to_string()], 0)
        );
        // Unhealthy again after the draining period (tick 15): nothing is
        // left to fall back on.
        lab.rebuild(&with_fallback(fallback, &new), |_| false, 16);
        assert!(!lab.snap.services[0].last_resort);
        assert_eq!(new_flows(&mut lab, 60000, 17), (Vec::new(), 200));
    }
}
