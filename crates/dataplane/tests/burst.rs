#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly
#![allow(clippy::cast_possible_truncation)] // test values are small
//! `process_burst` (classify a group, look its flows up together, finish in
//! order) must decide exactly what processing the packets one at a time
//! decides: same bytes out, same verdicts, same counters, same table —
//! including bursts that open, close and reschedule one flow several times.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use dataplane::trace::{TraceFilter, Tracer};
use dataplane::{EndpointHealth, EntryUse, Local, Pipeline, Snapshot, SnapshotBuilder, Verdict};
use flowtable::FlowTable;
use proptest::prelude::*;
use testkit::config::{Config, endpoint_list, group, port, rule, service};
use testkit::packet::{DST_MAC, Packet, SRC_MAC, v4};
use wire::buf::{MemBuf, PacketBuf};

/// One uplink; TCP 80 and UDP 53 on 10.0.0.10 go by `delivery` (`geneve`,
/// `l2dsr`) to three endpoints (10.0.1.11, .12, .13; for `l2dsr` on the
/// port's subnet, 10.0.0.x, each with its own static MAC), drained for 5 s.
fn config(delivery: &str) -> String {
    let eps: Vec<String> = (11..14)
        .map(|i| {
            if delivery == "l2dsr" {
                format!("{{ address = \"10.0.0.{i}\", mac = \"02:00:00:00:01:{i:02x}\" }}")
            } else {
                format!("10.0.1.{i}")
            }
        })
        .collect();
    Config::new()
        .port(
            port("up", "net_null0", "uplink")
                .strs("addresses", &["10.0.0.2/24"])
                .str("gateway_mac", "02:00:00:00:00:fe"),
        )
        .rule(rule("tcp", &["10.0.0.10"], "TCP", "80", "web"))
        .rule(rule("udp", &["10.0.0.10"], "UDP", "53", "web"))
        .service(
            service("web", delivery)
                .str("connection_draining_timeout", "5s")
                .child(group("a", "r", "z").set("endpoints", endpoint_list(&eps))),
        )
        .build()
}

/// One of a few clients/ports/protocols/flags/destinations, so that flows
/// repeat often within a burst.
#[derive(Debug, Clone, Copy)]
struct Pkt {
    client: u8,
    port: u8,
    udp: bool,
    flags: u8,
    wrong_port: bool,
}

/// The frame of `p`: from 192.0.2.`client`, without DF; TCP with seq and
/// ack 1; checksums left zero (the pipeline forwards without checking them).
fn frame(p: Pkt) -> Vec<u8> {
    let client = IpAddr::V4(Ipv4Addr::new(192, 0, 2, p.client));
    let vip = v4("10.0.0.10");
    let sport = 40000 + u16::from(p.port);
    let dport: u16 = match (p.udp, p.wrong_port) {
        (_, true) => 81,
        (true, false) => 53,
        (false, false) => 80,
    };
    let packet = if p.udp {
        Packet::udp(client, vip, sport, dport).udp_checksum(false)
    } else {
        Packet::tcp(client, vip, sport, dport, p.flags)
            .ack(1)
            .tcp_checksum(false)
    };
    packet.dont_frag(false).macs(DST_MAC, SRC_MAC).frame()
}

fn pkt() -> impl Strategy<Value = Pkt> {
    (
        0u8..3,
        0u8..3,
        any::<bool>(),
        prop::sample::select(vec![0x02u8, 0x10, 0x12, 0x11, 0x04, 0x18]),
        prop::bool::weighted(0.05),
    )
        .prop_map(|(client, port, udp, flags, wrong_port)| Pkt {
            client,
            port,
            udp,
            flags,
            wrong_port,
        })
}

struct Side {
    snap: Snapshot,
    builder: SnapshotBuilder,
    flows: FlowTable,
    worker: Pipeline,
}

fn side(delivery: &str) -> Side {
    let compiled = match config::load_str("t.toml", &config(delivery), &config::Env::default()) {
        Ok(l) => Arc::new(l.compiled),
        Err(e) => panic!("{e}"),
    };
    let local = Local::from_config(&compiled, |_| Some([2, 0, 0, 0, 0, 1]));
    let mut builder = SnapshotBuilder::new();
    let snap = builder
        .build(compiled.clone(), local, |_| EndpointHealth::HEALTHY, 0, 1)
        .expect("snapshot");
    Side {
        snap,
        builder,
        flows: FlowTable::new(flowtable::Config::with_capacity(64)).expect("table"),
        worker: Pipeline::new(9, compiled.children.len()),
    }
}

/// Marks one endpoint unhealthy (its UDP flows move, TCP ones stay).
fn degrade(s: &mut Side) {
    let compiled = s.snap.compiled.clone();
    let local = s.snap.local.clone();
    let c2 = compiled.clone();
    s.snap = s
        .builder
        .build(
            compiled,
            local,
            move |id| EndpointHealth {
                healthy: !c2
                    .endpoints
                    .get(id.index())
                    .is_some_and(|e| e.address.to_string().ends_with(".12")),
                weight: None,
            },
            0,
            1,
        )
        .expect("rebuild");
}

type Out = (
    Vec<(Verdict, Vec<u8>)>,
    dataplane::WorkerCounters,
    Vec<([u64; 5], u32, u32)>,
);

fn table(flows: &FlowTable) -> Vec<([u64; 5], u32, u32)> {
    let mut v = Vec::new();
    flows.scan(|k, e| {
        v.push((k.0, e.backend, u32::from(e.flags.bits())));
        std::ops::ControlFlow::Continue(())
    });
    v.sort();
    v
}

/// Phase `i` runs at tick `i`.
fn tick(i: usize) -> u32 {
    u32::try_from(i).expect("a few phases")
}

fn one_at_a_time(phases: &[Vec<Pkt>], delivery: &str) -> Out {
    let mut s = side(delivery);
    let mut out = Vec::new();
    for (i, phase) in phases.iter().enumerate() {
        if i == 1 {
            degrade(&mut s);
        }
        for p in phase {
            let mut b = MemBuf::new(vec![0u8; 512], 128, &frame(*p)).expect("fits");
            let v = s.worker.process(&s.snap, &s.flows, tick(i), &mut b);
            out.push((v, b.data().to_vec()));
        }
    }
    (out, s.worker.counters.clone(), table(&s.flows))
}

fn in_bursts(phases: &[Vec<Pkt>], burst: usize, delivery: &str) -> Out {
    in_bursts_traced(phases, burst, delivery, None)
}

/// [`in_bursts`], its worker tracing through `tracer` when given.
fn in_bursts_traced(
    phases: &[Vec<Pkt>],
    burst: usize,
    delivery: &str,
    tracer: Option<Arc<Tracer>>,
) -> Out {
    let mut s = side(delivery);
    let traced = tracer.is_some();
    if let Some(t) = tracer {
        s.worker.set_tracer(t, 0);
    }
    let mut out = Vec::new();
    for (i, phase) in phases.iter().enumerate() {
        if i == 1 {
            degrade(&mut s);
        }
        for chunk in phase.chunks(burst) {
            let mut bufs: Vec<_> = chunk
                .iter()
                .map(|p| MemBuf::new(vec![0u8; 512], 128, &frame(*p)).expect("fits"))
                .collect();
            let mut verdicts = vec![Verdict::ToHost; bufs.len()];
            if traced && s.worker.tracing() {
                s.worker
                    .process_burst_traced(&s.snap, &s.flows, tick(i), &mut bufs, &mut verdicts);
            } else {
                s.worker
                    .process_burst(&s.snap, &s.flows, tick(i), &mut bufs, &mut verdicts);
            }
            for (v, b) in verdicts.into_iter().zip(&bufs) {
                out.push((v, b.data().to_vec()));
            }
        }
    }
    (out, s.worker.counters.clone(), table(&s.flows))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn bursts_decide_exactly_what_single_packets_decide(
        before in prop::collection::vec(pkt(), 1..120),
        after in prop::collection::vec(pkt(), 0..80),
        burst in 1usize..70,
        // A tunnel's established flows and l2dsr's take fast paths of their own.
        delivery in prop_oneof![Just("geneve"), Just("l2dsr")],
    ) {
        let phases = vec![before, after];
        let single = one_at_a_time(&phases, delivery);
        let batched = in_bursts(&phases, burst, delivery);
        prop_assert_eq!(&single.0, &batched.0);
        prop_assert_eq!(&single.1, &batched.1);
        prop_assert_eq!(&single.2, &batched.2);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// A traced burst (`spillway trace`) is processed one packet at a time
    /// through the same passes: it decides exactly what an untraced one
    /// does, and its records say what each packet became.
    #[test]
    fn traced_bursts_decide_exactly_what_untraced_ones_decide(
        before in prop::collection::vec(pkt(), 1..120),
        after in prop::collection::vec(pkt(), 0..80),
        burst in 1usize..70,
        delivery in prop_oneof![Just("geneve"), Just("l2dsr")],
    ) {
        let phases = vec![before, after];
        let plain = in_bursts(&phases, burst, delivery);
        let tracer = Arc::new(Tracer::new(1));
        tracer.arm(1, TraceFilter { count: 1000, ..TraceFilter::default() });
        let traced = in_bursts_traced(&phases, burst, delivery, Some(tracer.clone()));
        prop_assert_eq!(&plain.0, &traced.0);
        prop_assert_eq!(&plain.1, &traced.1);
        prop_assert_eq!(&plain.2, &traced.2);
        let mut records = Vec::new();
        tracer.drain(&mut records);
        prop_assert_eq!(records.len(), plain.0.len());
        for (r, (v, _)) in records.iter().zip(&plain.0) {
            prop_assert_eq!(r.decision.verdict, *v);
            // A forwarded packet of a rule names its backend; a new
            // entry is one the packet did not find followed.
            if *v == Verdict::Forward {
                prop_assert!(r.decision.backend.is_some() && r.decision.child.is_some(), "{:?}", r);
            }
            if r.created {
                prop_assert!(!matches!(r.decision.entry, EntryUse::Pinned { .. }), "{:?}", r);
            }
        }
    }
}

#[test]
fn a_filter_takes_only_its_packets_and_only_its_count() {
    let phases = vec![
        (0..40u8)
            .map(|i| Pkt {
                client: i % 4,
                port: i,
                udp: true,
                flags: 0,
                wrong_port: false,
            })
            .collect::<Vec<_>>(),
    ];
    let tracer = Arc::new(Tracer::new(1));
    tracer.arm(
        1,
        TraceFilter {
            head: dataplane::trace::HeadMatch {
                src: Some(dataplane::trace::AddrMatch {
                    addr: IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)),
                    len: 32,
                }),
                ..Default::default()
            },
            count: 5,
            ..TraceFilter::default()
        },
    );
    let plain = in_bursts(&phases, 32, "geneve");
    let traced = in_bursts_traced(&phases, 32, "geneve", Some(tracer.clone()));
    assert_eq!(plain, traced);
    let mut records = Vec::new();
    tracer.drain(&mut records);
    assert_eq!(records.len(), 5, "the count bounds the records");
    assert!(
        records
            .iter()
            .all(|r| r.head.src == Some(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1))))
    );
    assert_eq!(tracer.progress().0, 0);
}
