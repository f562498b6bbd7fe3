//! Neighbour sightings (M47): any frame through `parse_sighting`; what it finds must be a
//! usable unicast MAC for a specified address, and an announcement rebuilt from it must be
//! found again.
#![no_main]
use core::net::IpAddr;

use libfuzzer_sys::fuzz_target;
use wire::neighbour;

fuzz_target!(|data: &[u8]| {
    let Some(s) = neighbour::parse_sighting(data) else {
        return;
    };
    assert!(s.mac[0] & 1 == 0 && s.mac != [0; 6]);
    assert!(!s.ip.is_unspecified());
    let mut b = [0u8; 128];
    let n = match s.ip {
        IpAddr::V4(a) => neighbour::gratuitous_arp(&mut b, s.mac, a).unwrap(),
        IpAddr::V6(a) => neighbour::unsolicited_advert(&mut b, s.mac, a).unwrap(),
    };
    assert_eq!(neighbour::parse_sighting(&b[..n]), Some(s));
});
