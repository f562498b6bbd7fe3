//! Gateway mode (M30-M32): the ingress from gateway endpoints and the
//! return path from appliances, on frames from the fuzzer. Per input, on a
//! fresh flow table: first (optionally) a fuzzed frame from a gateway
//! endpoint's MAC (or a stranger's), then Geneve from an appliance (or an
//! unknown source) whose options and inner frame the fuzzer wrote, either
//! encoded by `wire` or as raw bytes after the outer UDP header.
//!
//! Invariants: never a panic; every packet exactly one outcome; a forwarded
//! frame from an endpoint is Geneve to an appliance carrying its received
//! IP packet, and the appliance's echo of it (addresses swapped, options
//! kept) comes back byte-identical to that IP packet, to the endpoint's
//! MAC; and a returned packet (`ForwardTo`) is only ever sent when it came
//! from the appliance that holds the flow, with the endpoint's ID and the
//! cookie the flow was given: the fuzzer's options never open the relay.
#![no_main]
use std::net::{IpAddr, Ipv4Addr};
use std::sync::OnceLock;

use dataplane::{Pipeline, Verdict};
use flowtable::FlowTable;
use libfuzzer_sys::fuzz_target;
use wire::buf::{MemBuf, PacketBuf};
use wire::encap::{DecapConfig, Outer, Tunnel, UdpChecksum, encapsulate, parse_tunnel};
use wire::geneve::{GatewayOptions, OptionIds};

#[path = "common/world.rs"]
mod world;
use world::World;

const LB_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
/// Gateway endpoints 1 and 2 (IDs 1 and 2), a stranger, the appliances.
const R1_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0xf1];
const R2_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0xf2];
const STRANGER_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0x55];
const NVA4: [&str; 2] = ["10.0.0.21", "10.0.0.22"];
const NVA6: &str = "fd00::21";

/// A port (the appliances and gateway endpoints on its subnets; other
/// services' endpoints through its static gateway MAC), a gateway rule for
/// two endpoints to a Geneve service of three appliances.
const EXTRA: &str = r#"
[[ports]]
name = "up"
device = "net_null0"
role = "uplink"
addresses = ["10.0.0.2/24", "fd00::2/64"]
gateway_mac = "02:00:00:00:00:02"

[[forwarding_rules]]
name = "gw"
vips = ["10.0.0.40"]
protocol = "L3_DEFAULT"
backend_service = "nva"
mode = "gateway"
gateway_endpoints = [{ address = "10.0.0.1", id = 1 }, { address = "10.0.0.3", id = 2 }]

[[backend_services]]
name = "nva"
delivery = "geneve"
[[backend_services.groups]]
name = "n"
region = "r"
zone = "z"
endpoints = [{ address = "10.0.0.21" }, { address = "10.0.0.22" }, { address = "fd00::21" }]
"#;

fn world() -> &'static World {
    static W: OnceLock<World> = OnceLock::new();
    W.get_or_init(|| {
        world::build(&world::Options {
            extra: EXTRA,
            egress_mtu: None,
            down_unhealthy: false,
            neighbours: &[
                ("10.0.0.1", R1_MAC),
                ("10.0.0.3", R2_MAC),
                ("10.0.0.21", [2, 0, 0, 0, 0, 0xa1]),
                ("10.0.0.22", [2, 0, 0, 0, 0, 0xa2]),
                ("fd00::21", [2, 0, 0, 0, 0, 0xa3]),
            ],
        })
    })
}

/// One packet through the pipeline; checks it had exactly one outcome.
fn run(worker: &mut Pipeline, flows: &FlowTable, buf: &mut MemBuf<Vec<u8>>) -> Verdict {
    let w = world();
    let before = outcomes(worker);
    let rx = worker.counters.rx_packets;
    let v = worker.process(&w.snap, flows, 1, buf);
    assert_eq!(worker.counters.rx_packets, rx + 1);
    assert_eq!(outcomes(worker), before + 1, "one outcome: {v:?}");
    v
}

fn outcomes(w: &Pipeline) -> u64 {
    let c = &w.counters;
    c.forwarded + c.total_drops() + c.to_host + c.replies() + c.gateway_returned
}

fn buf(frame: &[u8]) -> Option<MemBuf<Vec<u8>>> {
    MemBuf::new(vec![0u8; 4096 + 512], 256, frame).ok()
}

/// The IP packet a Geneve frame carries.
fn inner_of(frame: &[u8]) -> Option<&[u8]> {
    let cfg = DecapConfig {
        geneve_port: Some(6081),
        ..DecapConfig::default()
    };
    let t = parse_tunnel(frame, &cfg).ok()?;
    frame.get(t.inner_offset..t.inner_offset + t.inner_len)
}

/// The appliance's answer: Ethernet and outer IP addresses swapped, ports
/// and every Geneve byte kept.
fn echo(out: &[u8]) -> Vec<u8> {
    let mut f = out.to_vec();
    f[..6].copy_from_slice(&out[6..12]);
    f[6..12].copy_from_slice(&out[..6]);
    let (at, len) = if out[12..14] == [0x86, 0xdd] {
        (22, 16)
    } else {
        (26, 4)
    };
    f[at..at + len].copy_from_slice(&out[at + len..at + 2 * len]);
    f[at + len..at + 2 * len].copy_from_slice(&out[at..at + len]);
    f
}

/// Ethernet, IPv4 (checksum right) and UDP to the Geneve port from `src`,
/// then `payload` as it is.
fn raw_geneve(src: Ipv4Addr, sport: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = LB_MAC.to_vec();
    f.extend([2, 0, 0, 0, 0, 0xa1, 0x08, 0x00]);
    let total = u16::try_from(28 + payload.len()).unwrap_or(u16::MAX);
    let mut ip = vec![0x45, 0];
    ip.extend(total.to_be_bytes());
    ip.extend([0, 0, 0x40, 0, 64, 17, 0, 0]);
    ip.extend(src.octets());
    ip.extend([10, 0, 0, 2]);
    let mut sum: u32 = ip
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    ip[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    f.extend(ip);
    f.extend(sport.to_be_bytes());
    f.extend(6081u16.to_be_bytes());
    f.extend(total.saturating_sub(20).to_be_bytes());
    f.extend([0, 0]);
    f.extend(payload);
    f
}

/// Whether IP packet `ip` is addressed to a VIP of a rule that is not a
/// gateway rule.
fn vip_of(snap: &dataplane::Snapshot, ip: &[u8]) -> bool {
    let dst: Option<IpAddr> = match ip.first().map(|b| b >> 4) {
        Some(4) => ip
            .get(16..20)
            .and_then(|d| <[u8; 4]>::try_from(d).ok())
            .map(|d| IpAddr::from(d)),
        Some(6) => ip
            .get(24..40)
            .and_then(|d| <[u8; 16]>::try_from(d).ok())
            .map(|d| IpAddr::from(d)),
        _ => None,
    };
    let c = &snap.compiled;
    dst.is_some_and(|dst| {
        c.children.iter().any(|ch| {
            ch.vip == dst && c.rules.get(ch.rule.index()).is_some_and(|r| r.gateway_endpoints.is_empty())
        })
    })
}

/// What step 1 left behind: the flow's appliance, endpoint ID and cookie.
struct Sent {
    nva: IpAddr,
    id: u64,
    cookie: u32,
}

fuzz_target!(|data: &[u8]| {
    // sel, split, endpoint ID (8), cookie (4), then two frames.
    if data.len() < 14 {
        return;
    }
    let (sel, split) = (data[0], usize::from(data[1]));
    let id = u64::from_be_bytes(data[2..10].try_into().expect("8 bytes"));
    let cookie = u32::from_be_bytes(data[10..14].try_into().expect("4 bytes"));
    let rest = &data[14..];
    let (a, b) = rest.split_at(split.min(rest.len()));
    let w = world();
    let flows = FlowTable::new(flowtable::Config::with_capacity(64)).expect("table");
    let mut worker = Pipeline::new(1, w.snap.compiled.children.len());
    worker.set_rx_port(0);

    // Step 1: `a` from an endpoint (or a stranger).
    let mut sent = None;
    let from = match sel & 3 {
        0 => None,
        1 => Some((R1_MAC, 1)),
        2 => Some((R2_MAC, 2)),
        _ => Some((STRANGER_MAC, 0)),
    };
    if let Some((mac, endpoint)) = from
        && a.len() >= 14
    {
        let mut f = a.to_vec();
        f[..6].copy_from_slice(&LB_MAC);
        f[6..12].copy_from_slice(&mac);
        let Some(mut p) = buf(&f) else { return };
        let v = run(&mut worker, &flows, &mut p);
        assert!(!matches!(v, Verdict::ForwardTo(_)), "only returns go back");
        if v == Verdict::Forward {
            let out = p.data().to_vec();
            let cfg = DecapConfig {
                geneve_port: Some(6081),
                ..DecapConfig::default()
            };
            let t = parse_tunnel(&out, &cfg);
            // Anyone, a router that is a gateway endpoint too, may send
            // clients' traffic to one of the node's own VIPs: that is served
            // by the VIP's rule (not necessarily in GENEVE, never with a
            // gateway endpoint's ID).
            if vip_of(&w.snap, &f[14..]) {
                let id = t.as_ref().ok().and_then(|t| t.gateway.endpoint_id);
                assert_eq!(id, None, "VIP traffic is no gateway traffic");
                return;
            }
            assert_ne!(endpoint, 0, "a stranger's frame is not ours");
            let t = t.expect("Geneve to an appliance");
            let inner = &out[t.inner_offset..t.inner_offset + t.inner_len];
            assert!(
                f.windows(inner.len()).any(|x| x == inner),
                "the inner packet is the received one"
            );
            assert_eq!(t.gateway.endpoint_id, Some(endpoint));
            let c = t.gateway.cookie.expect("a cookie");
            // The appliance's echo comes back as the packet it carries.
            let inner = inner.to_vec();
            let Some(mut e) = buf(&echo(&out)) else {
                return;
            };
            let v = run(&mut worker, &flows, &mut e);
            assert_eq!(v, Verdict::ForwardTo(0), "the echo is taken");
            let back = e.data();
            assert_eq!(&back[..6], &mac, "to the endpoint");
            assert_eq!(&back[6..12], &LB_MAC);
            assert_eq!(&back[14..], &inner[..], "byte-identical");
            sent = Some(Sent {
                nva: t.dst_ip,
                id: endpoint,
                cookie: c,
            });
        }
    }

    // Step 2: `b` returned by an appliance (or not) with the fuzzer's
    // options, or as raw bytes after UDP.
    let src: IpAddr = match (sel >> 2) & 3 {
        0 => NVA4[0].parse().expect("v4"),
        1 => NVA4[1].parse().expect("v4"),
        2 => NVA6.parse().expect("v6"),
        _ => Ipv4Addr::new(10, 0, 0, 99).into(),
    };
    let frame = if sel & 0x10 != 0 {
        let IpAddr::V4(s4) = src else { return };
        raw_geneve(s4, u16::from_be_bytes([data[1], data[0]]), b)
    } else {
        // Options present by two bits; bit 6: the cookie step 1 gave.
        let cookie = match (&sent, sel & 0x40 != 0) {
            (Some(s), true) => s.cookie,
            _ => cookie,
        };
        let options = GatewayOptions {
            endpoint_id: (sel & 0x20 != 0 || sel & 0x80 != 0).then_some(id % 4),
            cookie: (sel & 0x80 != 0).then_some(cookie),
        };
        let dst: IpAddr = if src.is_ipv4() {
            Ipv4Addr::new(10, 0, 0, 2).into()
        } else {
            "fd00::2".parse().expect("v6")
        };
        let outer = Outer {
            src_mac: [2, 0, 0, 0, 0, 0xa1],
            dst_mac: LB_MAC,
            src_ip: src,
            dst_ip: dst,
            ttl: 64,
            dont_fragment: true,
            flow_hash: id,
            src_port_min: 49152,
            src_port_max: 65535,
            udp_checksum: UdpChecksum::Auto,
        };
        let tunnel = Tunnel::Geneve {
            port: 6081,
            vni: 0,
            ids: OptionIds::DEFAULT,
            options,
        };
        let Some(mut p) = buf(b) else { return };
        // Only a frame that holds an IP packet can be wrapped.
        if encapsulate(&mut p, &outer, &tunnel).is_err() {
            return;
        }
        p.data().to_vec()
    };
    let Some(mut p) = buf(&frame) else { return };
    let v = run(&mut worker, &flows, &mut p);
    if let Verdict::ForwardTo(port) = v {
        assert_eq!(port, 0);
        let cfg = DecapConfig {
            geneve_port: Some(6081),
            ..DecapConfig::default()
        };
        let t = parse_tunnel(&frame, &cfg).expect("returned Geneve");
        let inner = inner_of(&frame).expect("an inner packet");
        let (id, cookie) = (t.gateway.endpoint_id, t.gateway.cookie);
        let of_step_1 = sent
            .as_ref()
            .is_some_and(|s| src == s.nva && id == Some(s.id) && cookie == Some(s.cookie));
        // Else only by the keyed cookie a flow forwarded without an entry
        // carries (keyed by its endpoint too): libFuzzer may learn it from
        // the comparison, a network attacker cannot (the key is secret).
        let tag = w.snap.gateways.iter().find(|g| Some(g.id) == id);
        assert!(
            of_step_1 || tag.is_some_and(|g| cookie == Some(stateless_cookie(inner, g.flow_tag))),
            "returned without the flow's appliance, endpoint ID and cookie: \
             from {src}, options {id:?} {cookie:?}"
        );
        let mac = match id {
            Some(1) => R1_MAC,
            Some(2) => R2_MAC,
            other => panic!("returned for endpoint ID {other:?}"),
        };
        let back = p.data();
        assert_eq!(&back[..6], &mac, "to the endpoint of the ID");
        assert_eq!(&back[6..12], &LB_MAC);
        assert_eq!(&back[14..], inner, "the inner packet, unchanged");
    }
});

/// The cookie of a gateway flow forwarded without an entry (the snapshot's
/// key is 0: `SnapshotBuilder::new`), computed apart from the pipeline from
/// the flow's symmetric 5-tuple (the service's affinity is NONE) and its
/// endpoint's flow tag.
fn stateless_cookie(inner: &[u8], tag: u16) -> u32 {
    let Ok(info) = wire::packet::parse_ip(inner) else {
        return 0;
    };
    let words = wire::flow::FlowKey::from_packet(&info, wire::flow::Affinity::None)
        .symmetric()
        .pack();
    let hash =
        wire::flow::hash_words(&words, 0) ^ u64::from(tag).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (maglev::mix64(hash) >> 32) as u32
}
