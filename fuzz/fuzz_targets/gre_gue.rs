//! GRE and GUE views and reprs.
#![no_main]
use libfuzzer_sys::fuzz_target;
use wire::{gre, gue};

fuzz_target!(|data: &[u8]| {
    if let Ok(p) = gre::Packet::new_checked(data) {
        let _ = (p.payload(), p.key(), p.seq(), p.checksum());
        if let Ok(r) = gre::GreRepr::parse(&p) {
            let mut out = data.to_vec();
            out[..r.header_len()].fill(0xa5);
            r.emit(&mut out).unwrap();
            // Reserved1 is ignored on receipt and emitted as zero; the checksum may come
            // out as the other one's complement zero. Everything else round-trips.
            let q = gre::Packet::new_checked(&out[..]).unwrap();
            assert_eq!(gre::GreRepr::parse(&q).unwrap(), r);
            assert_eq!(q.payload(), p.payload());
        }
    }
    if let Ok(r) = gue::GueRepr::parse(data) {
        let mut out = vec![0xa5u8; r.header_len()];
        r.emit(&mut out).unwrap();
        assert_eq!(gue::GueRepr::parse(&out).is_ok(), r.header_len() > 0);
    }
});
