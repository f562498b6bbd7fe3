#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly
#![allow(clippy::cast_possible_truncation)] // test values are small
//! `Pipeline::explain` (`spillway simulate`): the pipeline's decision for a
//! flow, without forwarding it — checked against what the pipeline then
//! does with that flow's real first packet.

mod common;

use std::net::{IpAddr, Ipv4Addr};

use dataplane::{
    DropReason, EndpointHealth, EntryUse, Explanation, Pipeline, Probe, SnapshotBuilder, Verdict,
};
use flowtable::FlowTable;
use testkit::config::{Config, endpoint_list, group, port, rule, service};
use testkit::packet::{ACK, Packet, SYN};
use wire::buf::{MemBuf, PacketBuf};
use wire::encap::{DecapConfig, parse_tunnel};

use common::{CLIENT_MAC, LB_MAC, Lab, THREE, VIP, compiled, config, resolved, web, with_web};

/// What these tests ask of the pipeline tests' lab besides running
/// packets: the explanation of a flow, the entries the table holds, a
/// slot's address.
trait Explain {
    fn explain(&self, p: &Probe, now: u32) -> Explanation;
    fn live(&self) -> usize;
    fn addr(&self, slot: u32) -> IpAddr;
}

impl Explain for Lab {
    fn explain(&self, p: &Probe, now: u32) -> Explanation {
        Pipeline::explain(&self.snap, &self.flows, now, p)
    }

    fn live(&self) -> usize {
        let mut n = 0;
        self.flows.scan(|_, _| {
            n += 1;
            std::ops::ControlFlow::Continue(())
        });
        n
    }

    fn addr(&self, slot: u32) -> IpAddr {
        self.snap.backends[slot as usize].addr
    }
}

/// The lab on `cfg`, its flow table of 4,096 entries.
fn lab_on(cfg: &Config) -> Lab {
    Lab::with(cfg, 4096)
}

fn probe(src: Ipv4Addr, sport: u16, proto: u8, dport: u16) -> Probe {
    Probe {
        src: src.into(),
        dst: VIP.into(),
        proto,
        sport,
        dport,
        established: false,
    }
}

fn syn(src: Ipv4Addr, sport: u16, flags: u8) -> Vec<u8> {
    Packet::tcp(src.into(), VIP.into(), sport, 80, flags)
        .seq(1000)
        .window(8192)
        .macs(CLIENT_MAC, LB_MAC)
        .frame()
}

fn backend_of(out: &[u8]) -> IpAddr {
    parse_tunnel(out, &DecapConfig::default())
        .expect("a tunnel frame")
        .dst_ip
}

fn client(i: u32) -> Ipv4Addr {
    Ipv4Addr::from(0xc633_0000 | i)
}

#[test]
fn no_rule_not_ours_and_own_addresses_end_before_the_flow_table() {
    let lab = lab_on(&config("gue", &THREE));
    let e = lab.explain(&probe(client(1), 1000, 6, 81), 1);
    assert_eq!(e.verdict, Verdict::Drop(DropReason::NoRule));
    assert_eq!((e.child, e.backend), (None, None));
    let mut p = probe(client(1), 1000, 6, 80);
    p.dst = IpAddr::V4(Ipv4Addr::new(10, 9, 9, 9));
    assert_eq!(
        lab.explain(&p, 1).verdict,
        Verdict::Drop(DropReason::NotOurs)
    );
    p.dst = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
    assert_eq!(lab.explain(&p, 1).verdict, Verdict::ToHost);
    // An ICMP echo to the VIP: no rule takes ICMP, the balancer answers it
    // (`answer_ping`), before the flow table.
    let e = lab.explain(&probe(client(1), 0, 1, 0), 1);
    assert_eq!((e.verdict, e.child), (Verdict::Reply, None));
}

/// Every delivery mode: explain names the backend the real first packet
/// then goes to, and changes nothing (no entry, no counter).
#[test]
fn each_delivery_explains_the_backend_the_packet_then_takes() {
    for delivery in ["gue", "ipip", "gre", "geneve"] {
        let mut lab = lab_on(&config(delivery, &THREE));
        for i in 0..40 {
            let p = probe(client(i), 2000 + i as u16, 6, 80);
            let e = lab.explain(&p, 1);
            assert_eq!(e.verdict, Verdict::Forward, "{delivery}");
            assert_eq!(e.entry, EntryUse::None);
            let pick = e.pick.expect("a new flow's pick");
            assert_eq!(Some(pick.slot), e.backend);
            assert_eq!((pick.region, pick.table), (0, 0));
            assert_eq!(lab.live(), i as usize, "explain inserts nothing");
            let (v, out) = lab.run(&syn(client(i), 2000 + i as u16, SYN), 1);
            assert_eq!(v, Verdict::Forward);
            assert_eq!(backend_of(&out), lab.addr(pick.slot), "{delivery} flow {i}");
        }
        assert_eq!(lab.worker.counters.new_flows, 40);
    }
    // l2dsr: rewritten to the backend's MAC (all one router here): forwarded.
    let lab = lab_on(&config("l2dsr", &THREE));
    let e = lab.explain(&probe(client(1), 1, 17, 53), 1);
    assert_eq!(e.verdict, Verdict::Forward);
}

/// A flow with an entry is pinned to its backend; after a rebuild where
/// its backend is unhealthy, TCP stays (persistence) while a new SYN on
/// the tuple, and UDP, are picked anew.
#[test]
fn a_pinned_flow_keeps_its_backend_and_a_stale_one_is_picked_anew() {
    let cfg = config("gue", &THREE);
    let mut lab = lab_on(&cfg);
    let c = client(7);
    let (_, out) = lab.run(&syn(c, 3333, SYN), 1);
    let first = backend_of(&out);
    lab.run(&syn(c, 3333, ACK), 2);
    let mut est = probe(c, 3333, 6, 80);
    est.established = true;
    let e = lab.explain(&est, 2);
    let EntryUse::Pinned { slot, .. } = e.entry else {
        panic!("pinned: {e:?}")
    };
    assert_eq!(lab.addr(slot), first);
    assert_eq!(e.pick, None);
    // Its backend fails: the established connection stays (TCP persists
    // by default), a new SYN on its tuple does not follow it.
    let failed = first.to_string();
    lab.rebuild(&cfg, |a| a != failed, 3);
    let e = lab.explain(&est, 3);
    assert!(matches!(e.entry, EntryUse::Pinned { .. }), "{e:?}");
    assert_eq!(e.backend.map(|s| lab.addr(s)), Some(first));
    let e = lab.explain(&probe(c, 3333, 6, 80), 3);
    assert!(matches!(e.entry, EntryUse::Stale { .. }), "{e:?}");
    let chosen = lab.addr(e.backend.expect("picked"));
    assert_ne!(chosen, first);
    let (_, out) = lab.run(&syn(c, 3333, SYN), 3);
    assert_eq!(backend_of(&out), chosen);
}

#[test]
fn without_an_eligible_backend_it_is_dropped_or_reset() {
    let cfg = config("gue", &THREE);
    let mut lab = lab_on(&cfg);
    lab.rebuild(&cfg, |_| false, 1);
    let e = lab.explain(&probe(client(1), 1, 6, 80), 2);
    assert_eq!(e.verdict, Verdict::Drop(DropReason::NoBackend));
    assert_eq!((e.pick, e.backend), (None, None));
    let cfg = with_web(web("gue", &THREE).str("no_backend_action", "reset"), "53");
    let mut lab = lab_on(&cfg);
    lab.rebuild(&cfg, |_| false, 1);
    assert_eq!(
        lab.explain(&probe(client(1), 1, 6, 80), 2).verdict,
        Verdict::Reply
    );
    // UDP is never answered.
    let e = lab.explain(&probe(client(1), 1, 17, 53), 2);
    assert_eq!(e.verdict, Verdict::Drop(DropReason::NoBackend));
    // Fail-open: every endpoint unhealthy, all used.
    let cfg = with_web(web("gue", &THREE).set("fail_open", true), "53");
    let mut lab = lab_on(&cfg);
    lab.rebuild(&cfg, |_| false, 1);
    let e = lab.explain(&probe(client(1), 1, 6, 80), 2);
    assert_eq!(e.verdict, Verdict::Forward);
    assert!(lab.snap.services[0].fail_open);
}

/// Two regions sharing new connections half and half (a spillover plan):
/// explain says which region each flow goes to, and the packet goes there.
#[test]
fn a_spilling_plan_sends_each_flow_to_the_region_explain_names() {
    let cfg = Config::new()
        .port(port("up", "net_ring0", "uplink").strs("addresses", &["10.0.0.2/24"]))
        .rule(rule("web", &["10.0.0.10"], "TCP", "80", "web"))
        .service(
            service("web", "gue")
                .child(group("a", "r", "z").set("endpoints", endpoint_list(&THREE[..2])))
                .child(group("b", "far", "z2").set("endpoints", endpoint_list(&THREE[2..]))),
        );
    let c = compiled(&cfg);
    let region =
        |n: &str| locality::RegionId(c.regions.iter().position(|r| r == n).expect("region") as u32);
    let share = |r, eps: &[u32]| locality::RegionShare {
        region: r,
        fraction: 0.5,
        endpoints: eps
            .iter()
            .map(|&endpoint| locality::Weighted {
                endpoint,
                weight: 1,
            })
            .collect(),
        node_zone_share: None,
        zone_variants: Vec::new(),
    };
    let plan = locality::Plan {
        regions: vec![share(region("r"), &[0, 1]), share(region("far"), &[2])],
        thresholds: locality::thresholds(&[0.5, 0.5]),
        status: Vec::new(),
        demand: 0.0,
        eligibility: locality::Eligibility::Healthy,
        degraded: false,
        overloaded: true,
        health: locality::AggregateHealth::Healthy,
    };
    let mut builder = SnapshotBuilder::new();
    let snap = builder
        .build_with_plans(
            c.clone(),
            resolved(&c),
            |_| EndpointHealth::HEALTHY,
            &[Some(plan)],
            0,
            1,
        )
        .expect("snapshot");
    let flows = FlowTable::new(flowtable::Config::with_capacity(4096)).expect("flows");
    let mut w = Pipeline::new(3, snap.compiled.children.len());
    let mut per_region = [0; 2];
    for i in 0..200 {
        let p = probe(client(i), 1000 + i as u16, 6, 80);
        let e = Pipeline::explain(&snap, &flows, 1, &p);
        let pick = e.pick.expect("pick");
        per_region[pick.region] += 1;
        let far = snap.backends[pick.slot as usize].addr == IpAddr::from([10, 0, 1, 13]);
        assert_eq!(far, pick.region == 1, "flow {i}: the region's backend");
        let f = syn(client(i), 1000 + i as u16, SYN);
        let mut buf = MemBuf::new([0u8; 2048], 128, &f).expect("fits");
        assert_eq!(w.process(&snap, &flows, 1, &mut buf), Verdict::Forward);
        assert_eq!(
            backend_of(buf.data()),
            snap.backends[pick.slot as usize].addr
        );
    }
    assert!(per_region.iter().all(|&n| n > 60), "{per_region:?}");
    assert!(snap.services[0].locality.is_some());
}
