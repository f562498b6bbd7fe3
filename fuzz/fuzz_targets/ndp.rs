//! Neighbor discovery: solicitation/advertisement reprs on raw ICMPv6 messages (checksum
//! fixed up so the fuzzer gets past it), and whole frames through `parse_solicitation` and
//! `answer_solicitation`, whose output must be a valid advertisement.
#![no_main]
use core::net::Ipv6Addr;

use libfuzzer_sys::fuzz_target;
use wire::buf::{MemBuf, PacketBuf};
use wire::ethernet::EthernetRepr;
use wire::{icmpv6, ipv6, ndp};

const LB_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode & 1 == 0 {
        // A bare message between fixed addresses; bit 1 picks duplicate address detection.
        let src = if mode & 2 == 0 {
            "2001:db8::1".parse().unwrap()
        } else {
            Ipv6Addr::UNSPECIFIED
        };
        let dst: Ipv6Addr = "ff02::1:ff00:1".parse().unwrap();
        let mut msg = rest.to_vec();
        if let Ok(mut p) = icmpv6::Packet::new_checked(&mut msg[..]) {
            p.fill_checksum(&src, &dst);
        }
        if let Ok(ns) = ndp::NeighborSolicitRepr::parse(&msg, &src, &dst, 255) {
            let mut out = vec![0xa5u8; ns.buffer_len()];
            ns.emit(&mut out, &src, &dst).unwrap();
            assert_eq!(
                ndp::NeighborSolicitRepr::parse(&out, &src, &dst, 255),
                Ok(ns)
            );
        }
        if let Ok(na) = ndp::NeighborAdvertRepr::parse(&msg, &src, &dst, 255) {
            let mut out = vec![0xa5u8; na.buffer_len()];
            na.emit(&mut out, &src, &dst).unwrap();
            assert_eq!(
                ndp::NeighborAdvertRepr::parse(&out, &src, &dst, 255),
                Ok(na)
            );
        }
        return;
    }
    let Ok(sol) = ndp::parse_solicitation(rest) else {
        return;
    };
    let Ok(mut buf) = MemBuf::new([0u8; 4096 + 256], 128, rest) else {
        return;
    };
    ndp::answer_solicitation(&mut buf, &sol, LB_MAC).unwrap();
    let out = buf.data();
    let eth = EthernetRepr::parse(out).unwrap();
    assert_eq!(eth.src, LB_MAC);
    assert_eq!(eth.vlan_count, sol.eth.vlan_count);
    let ip = ipv6::Packet::new_checked(&out[eth.header_len()..]).unwrap();
    assert_eq!(ip.src(), sol.ns.target);
    let na =
        ndp::NeighborAdvertRepr::parse(ip.payload(), &ip.src(), &ip.dst(), ip.hop_limit()).unwrap();
    assert_eq!((na.target, na.target_ll), (sol.ns.target, Some(LB_MAC)));
});
