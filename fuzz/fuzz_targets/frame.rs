//! parse_frame / parse_ip and every flow key derived from the result; the data plane's fast
//! path (parse_v4_flow, FlowKey::pack_v4) against them.
#![no_main]
use libfuzzer_sys::fuzz_target;
use wire::flow::{Affinity, FlowKey};
use wire::packet::{Fragment, Frame, IpVersion, parse_frame, parse_ip, parse_v4_flow};

fuzz_target!(|data: &[u8]| {
    let fast = parse_v4_flow(data);
    // The fast path takes exactly the untagged, option-less, unfragmented IPv4 TCP/UDP
    // frames parse_frame accepts, and finds the same facts.
    let canonical = match parse_frame(data) {
        Ok(Frame::Ip(eth, info))
            if eth.vlan_count == 0
                && info.version == IpVersion::V4
                && info.l4_offset == 34
                && info.fragment == Fragment::No
                && matches!(info.proto, 6 | 17) =>
        {
            Some(info)
        }
        _ => None,
    };
    assert_eq!(fast.is_some(), canonical.is_some(), "{fast:?} vs {canonical:?}");
    if let (Some(f), Some(info)) = (fast, canonical) {
        let mapped = |x: u32| wire::ip::mapped_v4(x.to_be_bytes());
        assert_eq!((info.src, info.dst), (mapped(f.src), mapped(f.dst)));
        assert_eq!(info.ports, Some((f.src_port, f.dst_port)));
        assert_eq!((info.proto, info.tcp_flags), (f.proto, f.tcp_flags));
        assert_eq!(info.l3_len, u32::from(f.total_len));
        let ports = (f.src_port, f.dst_port);
        for a in [
            Affinity::None,
            Affinity::ClientIpPortProto,
            Affinity::ClientIpProto,
            Affinity::ClientIp,
        ] {
            let k = FlowKey::from_packet(&info, a);
            assert_eq!(FlowKey::pack_v4(f.src, f.dst, f.proto, ports, a), k.pack());
        }
    }
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
