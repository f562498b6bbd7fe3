//! The world the pipeline fuzz targets share: one configuration (TCP and
//! L3_DEFAULT rules on an IPv4 VIP, a backend-less "down" service answering
//! with resets, an IPv6 VIP; GUE, GENEVE and IP-in-IP delivery), the node's
//! own addresses, and a snapshot and flow table built once per process.
//! Each target includes it with `#[path = "common/world.rs"] mod world;`.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use dataplane::{EndpointHealth, Local, Snapshot, SnapshotBuilder};
use flowtable::FlowTable;

/// The configuration; a target may append tables (`extra`).
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

/// A snapshot and a flow table to run the pipeline on.
/// What the worker loop does with a [`dataplane::Verdict::Fragment`] (M48):
/// [`dataplane::Pipeline::fragment`] with in-memory buffers. The fragments
/// sent (none when it was dropped, and counted); each is a tunnel frame
/// whose inner packet is at most `max_inner` bytes.
#[allow(dead_code)] // only the targets with an egress MTU reach it
pub fn fragments<S: AsRef<[u8]> + AsMut<[u8]>>(
    worker: &mut dataplane::Pipeline,
    snap: &Snapshot,
    job: u16,
    pkt: wire::buf::MemBuf<S>,
    mut more: impl FnMut() -> wire::buf::MemBuf<S>,
) -> Vec<Vec<u8>> {
    use wire::buf::PacketBuf;
    let mut out: [Option<wire::buf::MemBuf<S>>; dataplane::pipeline::MAX_FRAGMENTS] =
        std::array::from_fn(|_| None);
    let n = worker.fragment(snap, job, pkt, &mut || Some(more()), &mut out);
    out[..n]
        .iter()
        .map(|f| f.as_ref().expect("n fragments").data().to_vec())
        .collect()
}

pub struct World {
    pub snap: Snapshot,
    #[allow(dead_code)] // the gateway target makes a fresh one per input
    pub flows: FlowTable,
}

/// What a target changes in the shared world.
pub struct Options {
    /// TOML appended to the configuration.
    pub extra: &'static str,
    /// MTU of the egress port (`None`: no limit).
    pub egress_mtu: Option<u16>,
    /// The "down" service's only endpoint is unhealthy: no eligible backend.
    pub down_unhealthy: bool,
    /// Next hops resolved on port 0 (address, MAC): for a target whose
    /// `extra` configures a port (gateway endpoints, appliances).
    pub neighbours: &'static [(&'static str, [u8; 6])],
}

/// Builds the world (call once, from a `OnceLock`).
pub fn build(o: &Options) -> World {
    let text = format!("{CONFIG}{}", o.extra);
    let loaded = config::load_str("fuzz.toml", &text, &config::Env::default()).expect("config");
    let local = Local {
        mac: [2, 0, 0, 0, 0, 1],
        next_hop_mac: [2, 0, 0, 0, 0, 2],
        tunnel_src_v4: Some(Ipv4Addr::new(10, 0, 1, 2)),
        tunnel_src_v6: Some("fd00:1::2".parse().expect("v6")),
        // The tunnel sources too, as a port's first addresses are: what
        // appliances return to (M32).
        own_addrs: vec![
            IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
            "fd00::2".parse().expect("v6"),
            IpAddr::V4(Ipv4Addr::new(10, 0, 1, 2)),
            "fd00:1::2".parse().expect("v6"),
        ],
        egress_mtu: o.egress_mtu,
        neighbours: o
            .neighbours
            .iter()
            .map(|(a, m)| {
                let addr = a.parse().expect("neighbour address");
                (dataplane::nexthop::NextHop { port: 0, addr }, *m)
            })
            .collect(),
        ..Local::default()
    };
    let compiled = Arc::new(loaded.compiled);
    let c2 = compiled.clone();
    let down_unhealthy = o.down_unhealthy;
    let health = move |id: config::compiled::EndpointId| EndpointHealth {
        healthy: !down_unhealthy || c2.endpoints[id.index()].address.to_string() != "10.0.3.11",
        weight: None,
    };
    let snap = SnapshotBuilder::new()
        .build(compiled, local, health, 0, 1)
        .expect("snapshot");
    World {
        snap,
        flows: FlowTable::new(flowtable::Config::with_capacity(1024)).expect("table"),
    }
}
