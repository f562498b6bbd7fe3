//! IPv4 fragmentation (M48) on arbitrary packets and limits: `wire::frag` never panics, and
//! when it plans a split, every fragment is a valid IPv4 packet within the limit, and together
//! (in offset order) they carry the packet's payload from its offset on, MF only on the last
//! if the packet had it. The first two bytes are the limit, the rest the IPv4 packet.
#![no_main]
use libfuzzer_sys::fuzz_target;
use wire::frag;
use wire::ipv4;

fuzz_target!(|data: &[u8]| {
    let Some((&[m0, m1], ip)) = data.split_first_chunk::<2>() else {
        return;
    };
    let max = usize::from(u16::from_be_bytes([m0, m1]));
    let Ok(plan) = frag::plan(ip, max) else {
        return;
    };
    let orig = ipv4::Packet::new_checked(ip).unwrap();
    let (hl, total) = (orig.header_len(), usize::from(orig.total_len()));
    assert!(!orig.dont_frag() && total > max);
    assert!((2..=frag::MAX_FRAGMENTS).contains(&plan.count()));
    let mut frags = Vec::new();
    for k in 1..plan.count() {
        let mut out = vec![0u8; plan.len(k)];
        plan.write_later(ip, k, &mut out).unwrap();
        frags.push(out);
    }
    let mut first = ip.to_vec();
    plan.make_first(&mut first).unwrap();
    first.truncate(plan.len(0));
    frags.insert(0, first);
    let mut payload = Vec::new();
    for (k, f) in frags.iter().enumerate() {
        assert!(f.len() <= max, "fragment {k}: {} over {max}", f.len());
        let p = ipv4::Packet::new_checked(&f[..]).unwrap();
        assert!(p.verify_checksum());
        assert_eq!(usize::from(p.total_len()), f.len());
        assert_eq!((p.ident(), p.protocol(), p.src(), p.dst()), (orig.ident(), orig.protocol(), orig.src(), orig.dst()));
        assert_eq!(usize::from(p.frag_offset()), usize::from(orig.frag_offset()) + payload.len());
        let last = k + 1 == frags.len();
        assert_eq!(p.more_frags(), !last || orig.more_frags());
        if !last {
            assert_eq!((f.len() - p.header_len()) % 8, 0);
        }
        payload.extend_from_slice(&f[p.header_len()..]);
    }
    assert_eq!(payload, &ip[hl..total]);
});
