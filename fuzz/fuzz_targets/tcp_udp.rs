//! TCP and UDP views and reprs.
#![no_main]
use libfuzzer_sys::fuzz_target;
use wire::{tcp, udp};

fuzz_target!(|data: &[u8]| {
    if let Ok(p) = tcp::Packet::new_checked(data) {
        let _ = (
            p.payload(),
            p.flags(),
            p.verify_checksum(&[1u8, 2, 3, 4].into(), &[5u8, 6, 7, 8].into()),
        );
        if let Ok(r) = tcp::TcpRepr::parse(&p) {
            let mut out = vec![0xa5u8; r.header_len()];
            r.emit(&mut tcp::Packet::new_unchecked(&mut out[..]))
                .unwrap();
            assert_eq!(&out[..16], &data[..16]);
            assert_eq!(&out[18..], &data[18..r.header_len()]);
        }
    }
    if let Ok(p) = udp::Packet::new_checked(data) {
        let _ = (
            p.payload(),
            p.verify_checksum(&[0u16; 8].into(), &[1u16; 8].into()),
        );
        let r = udp::UdpRepr::parse(&p).unwrap();
        let mut out = [0xa5u8; 8];
        r.emit(&mut udp::Packet::new_unchecked(&mut out[..]))
            .unwrap();
        assert_eq!(&out[..6], &data[..6]);
    }
});
