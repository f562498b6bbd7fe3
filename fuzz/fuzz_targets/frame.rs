//! parse_frame / parse_ip and every flow key derived from the result.
#![no_main]
use libfuzzer_sys::fuzz_target;
use wire::flow::{Affinity, FlowKey};
use wire::packet::{Frame, parse_frame, parse_ip};

fuzz_target!(|data: &[u8]| {
    if let Ok(Frame::Ip(_, info)) = parse_frame(data) {
        assert!(info.l4_offset as usize <= data.len());
        for a in [
            Affinity::None,
            Affinity::ClientIpPortProto,
            Affinity::ClientIpProto,
            Affinity::ClientIp,
        ] {
            let k = FlowKey::from_packet(&info, a);
            assert_eq!(FlowKey::unpack(&k.pack()), Some(k));
            assert_eq!(k.symmetric(), k.reversed().symmetric());
            let _ = k.hash64();
        }
    }
    let _ = parse_ip(data);
});
