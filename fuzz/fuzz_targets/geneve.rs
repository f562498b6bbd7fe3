//! GENEVE view, repr, option iteration and Spillway's gateway options.
#![no_main]
use libfuzzer_sys::fuzz_target;
use wire::geneve::{GatewayOptions, GeneveRepr, OptionIds, Packet};

fuzz_target!(|data: &[u8]| {
    let Ok(p) = Packet::new_checked(data) else {
        return;
    };
    let n = p.option_iter().count();
    assert!(n <= p.options_len() / 4);
    let _ = GatewayOptions::parse(&OptionIds::default(), p.options());
    if let Ok(r) = GeneveRepr::parse(&p) {
        let mut out = data[..r.header_len()].to_vec();
        out[..8].fill(0xa5);
        r.emit(&mut Packet::new_unchecked(&mut out[..])).unwrap();
        let mut off = 8;
        for o in p.option_iter() {
            off += o.unwrap().emit(&mut out[off..]).unwrap();
        }
        assert_eq!(off, r.header_len());
        assert_eq!(
            GeneveRepr::parse(&Packet::new_checked(&out[..]).unwrap()).unwrap(),
            r
        );
    }
});
