#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly
#![allow(clippy::cast_possible_truncation)] // test values are small
//! `process_burst` (classify a group, look its flows up together, finish in
//! order) must decide exactly what processing the packets one at a time
//! decides: same bytes out, same verdicts, same counters, same table —
//! including bursts that open, close and reschedule one flow several times.

use std::sync::Arc;

use dataplane::{EndpointHealth, Local, Snapshot, SnapshotBuilder, Verdict, Worker};
use flowtable::FlowTable;
use proptest::prelude::*;
use wire::buf::{MemBuf, PacketBuf};

const CONFIG: &str = r#"
[node]
name = "t"
region = "r"
zone = "z"

[[ports]]
name = "up"
device = "net_null0"
role = "uplink"
addresses = ["10.0.0.2/24"]
gateway_mac = "02:00:00:00:00:fe"

[[forwarding_rules]]
name = "tcp"
vips = ["10.0.0.10"]
protocol = "TCP"
ports = 80
backend_service = "web"

[[forwarding_rules]]
name = "udp"
vips = ["10.0.0.10"]
protocol = "UDP"
ports = 53
backend_service = "web"

[[backend_services]]
name = "web"
delivery = "geneve"
connection_draining_timeout = "5s"
[[backend_services.groups]]
name = "a"
region = "r"
zone = "z"
endpoints = [{ address = "10.0.1.11" }, { address = "10.0.1.12" }, { address = "10.0.1.13" }]
"#;

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

fn frame(p: Pkt) -> Vec<u8> {
    let proto = if p.udp { 17 } else { 6 };
    let l4 = if p.udp { 8 } else { 20 };
    let mut ip = vec![
        0x45,
        0,
        0,
        20 + l4,
        0,
        1,
        0,
        0,
        64,
        proto,
        0,
        0,
        192,
        0,
        2,
        p.client,
    ];
    ip.extend_from_slice(&[10, 0, 0, 10]);
    let c = wire::checksum::checksum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x08, 0x00];
    f.extend_from_slice(&ip);
    let dport: u16 = match (p.udp, p.wrong_port) {
        (_, true) => 81,
        (true, false) => 53,
        (false, false) => 80,
    };
    f.extend_from_slice(&(40000 + u16::from(p.port)).to_be_bytes());
    f.extend_from_slice(&dport.to_be_bytes());
    if p.udp {
        f.extend_from_slice(&[0, 8, 0, 0]);
    } else {
        f.extend_from_slice(&[
            0, 0, 0, 1, 0, 0, 0, 1, 0x50, p.flags, 0xff, 0xff, 0, 0, 0, 0,
        ]);
    }
    f
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
    worker: Worker,
}

fn side() -> Side {
    let compiled = match config::load_str("t.toml", CONFIG, &config::Env::default()) {
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
        worker: Worker::new(9, compiled.children.len()),
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
                healthy: c2.endpoints.get(id.index()).map(|e| e.address.to_string())
                    != Some("10.0.1.12".into()),
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

fn one_at_a_time(phases: &[Vec<Pkt>]) -> Out {
    let mut s = side();
    let mut out = Vec::new();
    for (i, phase) in phases.iter().enumerate() {
        if i == 1 {
            degrade(&mut s);
        }
        for p in phase {
            let mut b = MemBuf::new(vec![0u8; 512], 128, &frame(*p)).expect("fits");
            let v = s.worker.process(&s.snap, &s.flows, i as u32, &mut b);
            out.push((v, b.data().to_vec()));
        }
    }
    (out, s.worker.counters.clone(), table(&s.flows))
}

fn in_bursts(phases: &[Vec<Pkt>], burst: usize) -> Out {
    let mut s = side();
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
            s.worker
                .process_burst(&s.snap, &s.flows, i as u32, &mut bufs, &mut verdicts);
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
    ) {
        let phases = vec![before, after];
        let single = one_at_a_time(&phases);
        let batched = in_bursts(&phases, burst);
        prop_assert_eq!(&single.0, &batched.0);
        prop_assert_eq!(&single.1, &batched.1);
        prop_assert_eq!(&single.2, &batched.2);
    }
}
