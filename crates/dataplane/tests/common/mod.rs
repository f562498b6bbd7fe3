//! The lab the pipeline tests (`tests/pipeline_*.rs`) share: the test
//! configuration's pieces (the uplink, the `web` service, a node with an
//! address of each family), a [`Lab`] of one worker with a snapshot and a
//! real flow table processing frames on in-memory buffers, the frames the
//! client sends, and [`backend_of`], which reads where a frame went.
//! Helpers of one topic stay in that topic's file.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly
#![allow(dead_code, unused_imports)] // each test file uses some of it

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use dataplane::{DropReason, EndpointHealth, Local, Pipeline, Snapshot, SnapshotBuilder, Verdict};
use flowtable::FlowTable;
use testkit::config::{Config, Table, endpoint_list, group, port, rule, service};
use testkit::packet::{ACK, FIN, PSH, Packet, RST, SYN, arp_request, v6};
use wire::buf::{MemBuf, PacketBuf};
use wire::encap::{DecapConfig, TunnelKind, parse_tunnel};

pub const VIP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 10);
pub const CLIENT: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 7);
pub const LB_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
pub const ROUTER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0xfe];
pub const CLIENT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x77];

/// The web service's endpoints, and with a fourth that joins or leaves.
pub const THREE: [&str; 3] = ["10.0.1.11", "10.0.1.12", "10.0.1.13"];
pub const FOUR: [&str; 4] = ["10.0.1.11", "10.0.1.12", "10.0.1.13", "10.0.1.14"];

/// The uplink with `addresses`.
pub fn uplink<S: AsRef<str>>(addresses: &[S]) -> Table {
    port("up", "net_ring0", "uplink").strs("addresses", addresses)
}

/// Group `name` (region "r", zone "z") of `endpoints`.
pub fn group_of<S: AsRef<str>>(name: &str, endpoints: &[S]) -> Table {
    group(name, "r", "z").set("endpoints", endpoint_list(endpoints))
}

/// Service `web`: `delivery`, 10 s of draining, group "a" of `endpoints`.
pub fn web(delivery: &str, endpoints: &[&str]) -> Table {
    service("web", delivery)
        .str("connection_persistence", "DEFAULT_FOR_PROTOCOL")
        .str("connection_draining_timeout", "10s")
        .child(group_of("a", endpoints))
}

/// The uplink; rules `web` (TCP 80) and `dns` (UDP `dns_ports`) on the VIP,
/// both to the service `web`.
pub fn with_web(web: Table, dns_ports: &str) -> Config {
    // l2dsr endpoints are resolved on the port's segment (M47): give it theirs.
    let l2dsr = web.to_string().contains("l2dsr");
    let addrs: &[&str] = if l2dsr {
        &["10.0.0.2/24", "10.0.1.2/24"]
    } else {
        &["10.0.0.2/24"]
    };
    Config::new()
        .port(uplink(addrs))
        .rule(rule("web", &["10.0.0.10"], "TCP", "80", "web"))
        .rule(rule("dns", &["10.0.0.10"], "UDP", dns_ports, "web"))
        .service(web)
}

/// [`with_web`] with UDP 53 and [`web`] over `delivery` to `endpoints`.
pub fn config(delivery: &str, endpoints: &[&str]) -> Config {
    with_web(web(delivery, endpoints), "53")
}

/// `cfg` loaded and compiled (a rejected configuration fails the test).
pub fn compiled(cfg: &Config) -> Arc<config::Compiled> {
    match config::load_str("test.toml", &cfg.build(), &config::Env::default()) {
        Ok(l) => Arc::new(l.compiled),
        Err(e) => panic!("test config rejected:\n{e}"),
    }
}

/// [`local`] with every next hop of `c` resolved to the router's MAC.
pub fn resolved(c: &config::Compiled) -> Local {
    Local {
        neighbours: dataplane::nexthop::next_hops(c)
            .into_iter()
            .map(|h| (h, ROUTER_MAC))
            .collect(),
        ..local()
    }
}

/// The node's own addresses, MACs and tunnel source; no neighbours.
pub fn local() -> Local {
    Local {
        mac: LB_MAC,
        next_hop_mac: ROUTER_MAC,
        tunnel_src_v4: Some(Ipv4Addr::new(10, 0, 1, 2)),
        tunnel_src_v6: None,
        own_addrs: vec![IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2))],
        port_macs: Vec::new(),
        egress_mtu: None,
        neighbours: Vec::new(),
    }
}

/// One worker with the snapshot it runs (and the builder that made it)
/// and a real flow table.
pub struct Lab {
    pub builder: SnapshotBuilder,
    pub snap: Snapshot,
    pub flows: FlowTable,
    pub worker: Pipeline,
}

impl Lab {
    pub fn new(delivery: &str) -> Lab {
        Lab::with(&config(delivery, &THREE), 4096)
    }

    pub fn with(cfg: &Config, capacity: usize) -> Lab {
        let mut builder = SnapshotBuilder::new();
        let snap = builder
            .build(
                compiled(cfg),
                resolved(&compiled(cfg)),
                |_| EndpointHealth::HEALTHY,
                0,
                1,
            )
            .expect("snapshot");
        // A fixed placement: a table filled to its capacity fills alike on
        // every run.
        let flows = FlowTable::new(flowtable::Config {
            placement: Some(flowtable::PlacementKey::fixed(7, 7)),
            ..flowtable::Config::with_capacity(capacity)
        })
        .expect("flow table");
        let worker = Pipeline::new(7, snap.compiled.children.len());
        Lab {
            builder,
            snap,
            flows,
            worker,
        }
    }

    pub fn run(&mut self, frame: &[u8], now: u32) -> (Verdict, Vec<u8>) {
        let mut buf = MemBuf::new([0u8; 2048], 128, frame).expect("fits");
        let v = self.worker.process(&self.snap, &self.flows, now, &mut buf);
        (v, buf.data().to_vec())
    }

    pub fn rebuild(&mut self, cfg: &Config, health: impl Fn(&str) -> bool, now: u32) {
        let compiled = compiled(cfg);
        let c2 = compiled.clone();
        self.snap = self
            .builder
            .build(
                compiled.clone(),
                resolved(&compiled),
                move |id| EndpointHealth {
                    healthy: health(&c2.endpoints[id.index()].address.to_string()),
                    weight: None,
                },
                now,
                1,
            )
            .expect("snapshot");
    }
}

/// TCP (seq 1000, window 8192) from the client's MAC to ours.
pub fn tcp(
    src: impl Into<IpAddr>,
    sport: u16,
    dst: impl Into<IpAddr>,
    dport: u16,
    flags: u8,
) -> Packet {
    Packet::tcp(src.into(), dst.into(), sport, dport, flags)
        .seq(1000)
        .window(8192)
        .macs(CLIENT_MAC, LB_MAC)
}

/// UDP carrying "ping" from the client's MAC to ours.
pub fn udp(src: impl Into<IpAddr>, sport: u16, dst: impl Into<IpAddr>, dport: u16) -> Packet {
    Packet::udp(src.into(), dst.into(), sport, dport)
        .payload(b"ping")
        .macs(CLIENT_MAC, LB_MAC)
}

/// The backend a forwarded IPIP/GRE/GUE/GENEVE frame was sent to, after
/// checking that the inner packet is the original IP packet, byte for byte.
pub fn backend_of(out: &[u8], original: &[u8]) -> IpAddr {
    let t = parse_tunnel(out, &DecapConfig::default()).expect("a valid tunnel frame");
    assert_eq!(
        &out[t.inner_offset..t.inner_offset + t.inner_len],
        &original[14..],
        "inner packet unchanged"
    );
    assert_eq!(
        &out[0..6],
        &ROUTER_MAC,
        "outer destination MAC is the next hop"
    );
    assert_eq!(&out[6..12], &LB_MAC);
    assert_eq!(t.src_ip, IpAddr::V4(Ipv4Addr::new(10, 0, 1, 2)));
    t.dst_ip
}

/// The IPv6 VIP, the node's own IPv6 address and the IPv6 client.
pub const VIP6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 0x10);
pub const OWN6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2);
pub const CLIENT6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 7);

pub fn a6(s: &str) -> Ipv6Addr {
    s.parse().expect("v6")
}

/// The node, with an uplink address of each family.
pub fn dual_node() -> Config {
    Config::new().port(uplink(&["10.0.0.2/24".to_string(), format!("{OWN6}/64")]))
}

/// The balancer with an IPv4 and an IPv6 VIP, both served by services whose
/// `no_backend_action` is `action`, and an own address of each family.
pub fn dual_config(action: &str) -> Config {
    dual_node()
        .rule(rule("web", &["10.0.0.10"], "TCP", "80", "web"))
        .rule(rule("dns", &["10.0.0.10"], "UDP", "53", "web"))
        .rule(rule("web6", &[VIP6.to_string()], "TCP", "443", "web6"))
        .service(
            service("web", "ipip")
                .str("no_backend_action", action)
                .child(group_of("a", &["10.0.1.11", "10.0.1.12"])),
        )
        .service(
            service("web6", "ipip")
                .str("no_backend_action", action)
                .child(group_of("b", &["fd00:1::11", "fd00:1::12"])),
        )
}

/// A lab of [`dual_config`] with an own IPv6 address and IPv6 tunnel
/// source; its backends unhealthy unless `healthy`.
pub fn dual_lab(action: &str, healthy: bool) -> Lab {
    let cfg = dual_config(action);
    let mut lab = Lab::with(&cfg, 4096);
    lab.snap.local.own_addrs.push(OWN6.into());
    lab.snap.local.tunnel_src_v6 = Some("fd00:1::2".parse().expect("v6"));
    if !healthy {
        let local = lab.snap.local.clone();
        lab.rebuild(&cfg, |_| false, 1);
        lab.snap.local = local;
    }
    lab
}

/// The index of child rule `name` in the lab's configuration.
pub fn child(lab: &Lab, name: &str) -> usize {
    lab.snap
        .compiled
        .children
        .iter()
        .position(|ch| ch.name == name)
        .expect("child rule")
}

/// A VIP of each family with TCP rules `t4`/`t6` on `tcp_ports`, and
/// `L3_DEFAULT` rules `l3v4`/`l3v6` beside them if `l3_default`.
pub fn fragment_config(tcp_ports: &str, l3_default: bool) -> Config {
    let vip6 = [VIP6.to_string()];
    let mut cfg = dual_node()
        .rule(rule("t4", &["10.0.0.10"], "TCP", tcp_ports, "s4"))
        .rule(rule("t6", &vip6, "TCP", tcp_ports, "s6"));
    if l3_default {
        cfg = cfg
            .rule(rule("l3v4", &["10.0.0.10"], "L3_DEFAULT", "all", "s4"))
            .rule(rule("l3v6", &vip6, "L3_DEFAULT", "all", "s6"));
    }
    cfg.service(service("s4", "ipip").child(group_of("a", &["10.0.1.11", "10.0.1.12"])))
        .service(service("s6", "ipip").child(group_of("b", &["fd00:1::11", "fd00:1::12"])))
}
