//! The data-plane pipeline on arbitrary frames: never a panic, every packet
//! counted exactly once, a forwarded packet always leaves as a valid frame
//! (l2dsr) or tunnel frame whose inner packet is the received IP packet, and a
//! reply (ARP, neighbor advertisement, TCP reset for the backend-less "down"
//! service) is a well-formed frame.
#![no_main]
use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, OnceLock};

use dataplane::{EndpointHealth, Local, Snapshot, SnapshotBuilder, Verdict, Worker};
use flowtable::FlowTable;
use libfuzzer_sys::fuzz_target;
use wire::buf::{MemBuf, PacketBuf};

const CONFIG: &str = r#"
[node]
name = "fuzz"
region = "r"
zone = "z"

[[forwarding_rules]]
name = "web"
vips = ["10.0.0.10"]
protocol = "TCP"
ports = "80,443"
backend_service = "web"

[[forwarding_rules]]
name = "any"
vips = ["10.0.0.10"]
protocol = "L3_DEFAULT"
backend_service = "any"

[[forwarding_rules]]
name = "down"
vips = ["10.0.0.11"]
protocol = "TCP"
ports = "all"
backend_service = "down"

[[forwarding_rules]]
name = "web6"
vips = ["fd00::10"]
protocol = "L3_DEFAULT"
backend_service = "web6"

[[backend_services]]
name = "down"
delivery = "ipip"
no_backend_action = "reset"
[[backend_services.groups]]
name = "d"
region = "r"
zone = "z"
endpoints = [{ address = "10.0.3.11" }]

[[backend_services]]
name = "web6"
delivery = "gue"
no_backend_action = "reset"
[[backend_services.groups]]
name = "e"
region = "r"
zone = "z"
endpoints = [{ address = "fd00:1::11" }]

[[backend_services]]
name = "web"
delivery = "gue"
[[backend_services.groups]]
name = "a"
region = "r"
zone = "z"
endpoints = [{ address = "10.0.1.11" }, { address = "10.0.1.12" }]

[[backend_services]]
name = "any"
delivery = "geneve"
session_affinity = "CLIENT_IP"
[[backend_services.groups]]
name = "b"
region = "r"
zone = "z"
endpoints = [{ address = "10.0.2.11" }, { address = "10.0.2.12" }]
"#;

struct World {
    snap: Snapshot,
    flows: FlowTable,
}

fn world() -> &'static World {
    static W: OnceLock<World> = OnceLock::new();
    W.get_or_init(|| {
        let loaded =
            config::load_str("fuzz.toml", CONFIG, &config::Env::default()).expect("config");
        let local = Local {
            mac: [2, 0, 0, 0, 0, 1],
            next_hop_mac: [2, 0, 0, 0, 0, 2],
            tunnel_src_v4: Some(Ipv4Addr::new(10, 0, 1, 2)),
            tunnel_src_v6: Some("fd00:1::2".parse().expect("v6")),
            own_addrs: vec![
                IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
                "fd00::2".parse().expect("v6"),
            ],
            port_macs: Vec::new(),
            // Small enough that fuzzed packets reach the too-big path (M48).
            egress_mtu: Some(576),
            neighbours: Vec::new(),
        };
        let compiled = Arc::new(loaded.compiled);
        let c2 = compiled.clone();
        // The "down" service's only endpoint is unhealthy: no eligible backend.
        let health = move |id: config::compiled::EndpointId| EndpointHealth {
            healthy: c2.endpoints[id.index()].address.to_string() != "10.0.3.11",
            weight: None,
        };
        let snap = SnapshotBuilder::new()
            .build(compiled, local, health, 0, 1)
            .expect("snapshot");
        World {
            snap,
            flows: FlowTable::new(flowtable::Config::with_capacity(1024)).expect("table"),
        }
    })
}

fuzz_target!(|data: &[u8]| {
    let w = world();
    let mut worker = Worker::new(1, w.snap.compiled.children.len());
    let Ok(mut buf) = MemBuf::new([0u8; 4096 + 256], 128, data) else {
        return;
    };
    let v = worker.process(&w.snap, &w.flows, 1, &mut buf);
    let c = &worker.counters;
    assert_eq!(c.rx_packets, 1);
    assert_eq!(c.forwarded + c.total_drops() + c.to_host + c.replies(), 1);
    if v == Verdict::Reply {
        assert!(
            wire::packet::parse_frame(buf.data()).is_ok(),
            "a reply is a well-formed frame"
        );
    }
    if v == Verdict::Forward {
        let out = buf.data();
        if let Ok(t) = wire::encap::parse_tunnel(out, &wire::encap::DecapConfig::default()) {
            let inner = &out[t.inner_offset..t.inner_offset + t.inner_len];
            assert!(
                data.windows(inner.len()).any(|w| w == inner),
                "the inner packet is the received one"
            );
        }
    }
});
