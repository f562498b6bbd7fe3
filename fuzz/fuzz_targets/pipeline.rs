//! The data-plane pipeline on arbitrary frames (and on each addressed to
//! the port, its IPv4 header checksum made right): never a panic, every packet
//! counted exactly once, a forwarded packet always leaves as a valid frame
//! (l2dsr) or tunnel frame whose inner packet is the received IP packet, and a
//! reply (ARP, neighbor advertisement, TCP reset for the backend-less "down"
//! service) is a well-formed frame.
#![no_main]
use std::sync::OnceLock;

use dataplane::{Pipeline, Verdict};
use libfuzzer_sys::fuzz_target;

#[path = "common/world.rs"]
mod world;
use wire::buf::{MemBuf, PacketBuf};
use world::World;

fn world() -> &'static World {
    static W: OnceLock<World> = OnceLock::new();
    W.get_or_init(|| {
        world::build(&world::Options {
            extra: "",
            // Small enough that fuzzed packets reach the too-big path (M48).
            egress_mtu: Some(576),
            down_unhealthy: true,
            neighbours: &[],
        })
    })
}

fuzz_target!(|data: &[u8]| {
    // As received, and addressed to the port with a right IPv4 header
    // checksum: mutants the fuzzer has not fixed up still reach past the
    // edge's MAC and checksum checks (M55).
    one(data);
    if data.len() >= 6 {
        let mut to_port = data.to_vec();
        to_port[..6].copy_from_slice(&world().snap.local.mac);
        if let Ok(wire::packet::Frame::Ip(_, info)) = wire::packet::parse_frame(&to_port)
            && info.version == wire::packet::IpVersion::V4
        {
            let l3 = info.l3_offset as usize;
            wire::ipv4::Packet::new_unchecked(&mut to_port[l3..]).fill_checksum();
        }
        one(&to_port);
    }
});

fn one(data: &[u8]) {
    let w = world();
    let mut worker = Pipeline::new(1, w.snap.compiled.children.len());
    let Ok(mut buf) = MemBuf::new([0u8; 4096 + 256], 128, data) else {
        return;
    };
    let v = worker.process(&w.snap, &w.flows, 1, &mut buf);
    if let Verdict::Fragment(job) = v {
        // IPv4 without DF too big once encapsulated (M48): its fragments,
        // each a tunnel frame within the MTU carrying a piece of the packet.
        let frags = world::fragments(&mut worker, &w.snap, job, buf, || {
            MemBuf::new([0u8; 4096 + 256], 128, &[]).expect("empty")
        });
        for f in &frags {
            assert!(f.len() <= 14 + 576, "a fragment over the MTU: {}", f.len());
            let t = wire::encap::parse_tunnel(f, &wire::encap::DecapConfig::default())
                .expect("a fragment is a tunnel frame");
            let ip = &f[t.inner_offset..t.inner_offset + t.inner_len];
            let payload = &ip[usize::from(ip[0] & 0x0f) * 4..];
            assert!(
                data.windows(payload.len()).any(|w| w == payload),
                "a fragment's payload is part of the received packet"
            );
        }
        let c = &worker.counters;
        assert_eq!(c.forwarded + c.total_drops(), 1);
        assert_eq!(c.fragmented, u64::from(!frags.is_empty()));
        return;
    }
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
}
