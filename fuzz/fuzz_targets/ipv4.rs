//! IPv4 view and repr: parse, then emit must reproduce the header bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;
use wire::ipv4::{Ipv4Repr, Packet};

fuzz_target!(|data: &[u8]| {
    let Ok(p) = Packet::new_checked(data) else {
        return;
    };
    let _ = (
        p.payload(),
        p.options(),
        p.is_fragment(),
        p.verify_checksum(),
    );
    if let Ok(Some(kind)) = wire::ipv4::source_route(p.options()) {
        assert!(kind == wire::ipv4::option::LSRR || kind == wire::ipv4::option::SSRR);
    }
    if let Some(h) = data.first_chunk::<20>().filter(|h| h[0] == 0x45) {
        assert_eq!(wire::ipv4::header_checksum_ok(h), p.verify_checksum());
    }
    if let Ok(r) = Ipv4Repr::parse(&p) {
        let mut out = vec![0xa5u8; r.header_len()];
        r.emit(&mut Packet::new_unchecked(&mut out[..])).unwrap();
        // Equal except the checksum, which may differ only as one's complement -0 / +0.
        assert_eq!(&out[..10], &data[..10]);
        assert_eq!(&out[12..], &data[12..r.header_len()]);
        let p2 = Packet::new_unchecked(&out[..]);
        assert!(p2.verify_checksum());
    }
});
