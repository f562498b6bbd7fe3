//! IPv6 view, repr and the extension-header walk.
#![no_main]
use libfuzzer_sys::fuzz_target;
use wire::ipv6::{FragmentRepr, Ipv6Repr, Packet, srh_segments_left, walk_extensions};

fuzz_target!(|data: &[u8]| {
    if let Some((&nh, rest)) = data.split_first() {
        if let Ok(w) = walk_extensions(rest, nh) {
            assert!(w.offset <= rest.len());
            // The routing header lies within the chain; an SRH's segments
            // left are at most its Segments Left.
            if let Some(r) = w.routing {
                assert!(r.offset + r.len <= w.offset);
                if let Ok(s) = srh_segments_left(&rest[r.offset..r.offset + r.len]) {
                    assert!(s.count() <= usize::from(r.segments_left));
                }
            }
        }
        if let Ok(f) = FragmentRepr::parse(rest) {
            let mut out = [0xa5u8; 8];
            f.emit(&mut out).unwrap();
            assert_eq!(FragmentRepr::parse(&out).unwrap(), f);
        }
    }
    let Ok(p) = Packet::new_checked(data) else {
        return;
    };
    let r = Ipv6Repr::parse(&p).unwrap();
    let mut out = [0xa5u8; 40];
    r.emit(&mut Packet::new_unchecked(&mut out[..])).unwrap();
    assert_eq!(&out[..], &data[..40]);
    let _ = walk_extensions(p.payload(), p.next_header());
});
