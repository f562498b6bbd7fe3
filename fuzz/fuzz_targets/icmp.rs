//! ICMPv4 and ICMPv6 views, reprs and the quoted-packet parser of errors.
#![no_main]
use libfuzzer_sys::fuzz_target;
use wire::packet::{IpVersion, parse_quoted};
use wire::{icmpv4, icmpv6};

fuzz_target!(|data: &[u8]| {
    let (a, b) = (
        core::net::Ipv6Addr::LOCALHOST,
        core::net::Ipv6Addr::UNSPECIFIED,
    );
    if let Ok(p) = icmpv4::Packet::new_checked(data) {
        let _ = (
            p.is_frag_needed(),
            p.next_hop_mtu(),
            icmpv4::Icmpv4Repr::parse(&p),
        );
        let _ = parse_quoted(p.data(), IpVersion::V4);
    }
    if let Ok(p) = icmpv6::Packet::new_checked(data) {
        let _ = (p.mtu(), icmpv6::Icmpv6Repr::parse(&p, &a, &b));
        if let Ok(q) = parse_quoted(p.data(), IpVersion::V6) {
            let _ = wire::flow::FlowKey::from_quoted(&q, wire::flow::Affinity::None);
        }
    }
});
