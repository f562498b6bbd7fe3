//! ARP, ESP, VXLAN and Ethernet/VLAN views and reprs.
#![no_main]
use libfuzzer_sys::fuzz_target;
use wire::ethernet::EthernetRepr;
use wire::{arp, esp, vxlan};

fuzz_target!(|data: &[u8]| {
    if let Ok(p) = arp::Packet::new_checked(data) {
        if let Ok(r) = arp::ArpRepr::parse(&p) {
            let mut out = [0xa5u8; arp::PACKET_LEN];
            r.emit(&mut arp::Packet::new_unchecked(&mut out[..]))
                .unwrap();
            assert_eq!(&out[..], &data[..arp::PACKET_LEN]);
        }
    }
    if let Ok(p) = esp::Packet::new_checked(data) {
        let _ = esp::EspRepr::parse(&p);
    }
    if let Ok(p) = vxlan::Packet::new_checked(data) {
        let _ = (vxlan::VxlanRepr::parse(&p), p.payload());
    }
    if let Ok(e) = EthernetRepr::parse(data) {
        let mut out = [0xa5u8; 22];
        e.emit(&mut out).unwrap();
        assert_eq!(&out[..e.header_len()], &data[..e.header_len()]);
    }
});
