//! Tunnelled ingress (M49): the ingress decapsulation (`parse_tunnel`, then
//! `strip_outer`) on arbitrary frames, and the pipeline on tunnel packets to
//! the node's own address whose inner frame is arbitrary (every source
//! allowed, so that the fuzzer reaches past the source check). The first
//! byte picks the tunnel the rest is wrapped in (or none). Never a panic;
//! every packet counted once; a stripped frame is the link-layer header
//! followed by exactly the inner packet; at most one decapsulation, and a
//! forwarded packet carries bytes that were received.
#![no_main]
use std::net::{IpAddr, Ipv4Addr};
use std::sync::OnceLock;

use dataplane::{Pipeline, Verdict};
use libfuzzer_sys::fuzz_target;
use wire::buf::{MemBuf, PacketBuf};
use wire::encap::{
    DecapConfig, Outer, Tunnel, UdpChecksum, encapsulate, parse_tunnel, strip_outer,
};
use wire::geneve::{GatewayOptions, OptionIds};

#[path = "common/world.rs"]
mod world;
use world::World;

fn world() -> &'static World {
    static W: OnceLock<World> = OnceLock::new();
    W.get_or_init(|| {
        world::build(&world::Options {
            extra: "\n[tunnel_ingress]\nallow = [\"0.0.0.0/0\", \"::/0\"]\n",
            egress_mtu: None,
            down_unhealthy: false,
            neighbours: &[],
        })
    })
}

/// The tunnel selected by `sel`, if any.
fn tunnel(sel: u8) -> Option<Tunnel> {
    Some(match sel % 6 {
        0 => return None,
        1 => Tunnel::IpIp,
        2 => Tunnel::Gre { key: None },
        3 => Tunnel::Gre { key: Some(7) },
        4 => Tunnel::Gue { port: 6080 },
        _ => Tunnel::Geneve {
            port: 6081,
            vni: 0,
            ids: OptionIds::DEFAULT,
            options: GatewayOptions {
                endpoint_id: None,
                cookie: Some(1),
            },
        },
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    // The ingress decapsulation on the bytes as they are.
    if let Ok(info) = parse_tunnel(rest, &DecapConfig::default()) {
        let mut buf = MemBuf::new([0u8; 4096], 0, rest).expect("fits");
        strip_outer(&mut buf, &info).expect("a parsed tunnel strips");
        let l2 = info.eth.header_len();
        assert_eq!(buf.len(), l2 + info.inner_len);
        assert_eq!(
            &buf.data()[l2..],
            &rest[info.inner_offset..][..info.inner_len]
        );
        assert_eq!(&buf.data()[..l2 - 2], &rest[..l2 - 2]);
    }
    // The pipeline on the bytes, or on them wrapped in a tunnel to us.
    let Ok(mut buf) = MemBuf::new([0u8; 4096 + 512], 256, rest) else {
        return;
    };
    if let Some(t) = tunnel(sel) {
        let v6 = sel & 0x80 != 0;
        let (src, dst): (IpAddr, IpAddr) = if v6 {
            (
                "2001:db8::99".parse().expect("v6"),
                "fd00::2".parse().expect("v6"),
            )
        } else {
            (
                Ipv4Addr::new(192, 0, 2, 99).into(),
                Ipv4Addr::new(10, 0, 0, 2).into(),
            )
        };
        let outer = Outer {
            src_mac: [2, 0, 0, 0, 0, 9],
            dst_mac: [2, 0, 0, 0, 0, 1],
            src_ip: src,
            dst_ip: dst,
            ttl: 64,
            dont_fragment: true,
            flow_hash: u64::from(sel),
            src_port_min: 49152,
            src_port_max: 65535,
            udp_checksum: UdpChecksum::Auto,
        };
        // Only a frame that holds an IP packet can be wrapped.
        if encapsulate(&mut buf, &outer, &t).is_err() {
            return;
        }
    }
    let received = buf.data().to_vec();
    let w = world();
    let mut worker = Pipeline::new(1, w.snap.compiled.children.len());
    let v = worker.process(&w.snap, &w.flows, 1, &mut buf);
    let c = &worker.counters;
    assert_eq!(c.rx_packets, 1);
    assert_eq!(c.forwarded + c.total_drops() + c.to_host + c.replies(), 1);
    let decapsulated = c.decap_ipip + c.decap_gre + c.decap_gue + c.decap_geneve;
    assert!(decapsulated <= 1, "one decapsulation at most");
    if decapsulated == 1 {
        assert_ne!(
            v,
            Verdict::ToHost,
            "a decapsulated packet is never the host's"
        );
    }
    if v == Verdict::Forward {
        let out = buf.data();
        if let Ok(t) = parse_tunnel(out, &DecapConfig::default()) {
            let inner = &out[t.inner_offset..t.inner_offset + t.inner_len];
            assert!(
                received.windows(inner.len()).any(|w| w == inner),
                "the inner packet is one that was received"
            );
        }
    }
});
