//! parse_frame / parse_ip and every flow key derived from the result; the data plane's fast
//! paths (parse_v4_flow / parse_v6_flow, FlowKey::pack_v4 / pack_v6) against them.
#![no_main]
use libfuzzer_sys::fuzz_target;
use wire::flow::{Affinity, FlowKey};
use wire::packet::{
    Fragment, Frame, IpVersion, parse_frame, parse_ip, parse_v4_flow, parse_v6_flow,
};

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
        assert_eq!(info.ttl, f.ttl);
        // The fast header checksum test agrees with the definition (M55).
        let header: &[u8; 20] = data[14..34].try_into().unwrap();
        assert_eq!(
            wire::ipv4::header_checksum_ok(header),
            wire::ipv4::Packet::new_unchecked(&data[14..]).verify_checksum()
        );
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
    let fast6 = parse_v6_flow(data);
    let canonical6 = match parse_frame(data) {
        Ok(Frame::Ip(eth, info))
            if eth.vlan_count == 0
                && info.version == IpVersion::V6
                && info.l4_offset == 54
                && info.fragment == Fragment::No
                && matches!(info.proto, 6 | 17)
                && !wire::ip::is_mapped_v4(&info.src)
                && !wire::ip::is_mapped_v4(&info.dst) =>
        {
            Some(info)
        }
        _ => None,
    };
    assert_eq!(fast6.is_some(), canonical6.is_some(), "{fast6:?} vs {canonical6:?}");
    if let (Some(f), Some(info)) = (fast6, canonical6) {
        assert_eq!((info.src, info.dst), (f.src, f.dst));
        assert_eq!(info.ports, Some((f.src_port, f.dst_port)));
        assert_eq!((info.proto, info.tcp_flags), (f.proto, f.tcp_flags));
        assert_eq!(info.l3_len, 40 + u32::from(f.payload_len));
        assert_eq!(info.ttl, f.hop_limit);
        let ports = (f.src_port, f.dst_port);
        for a in [
            Affinity::None,
            Affinity::ClientIpPortProto,
            Affinity::ClientIpProto,
            Affinity::ClientIp,
        ] {
            let k = FlowKey::from_packet(&info, a);
            assert_eq!(FlowKey::pack_v6(&f.src, &f.dst, f.proto, ports, a), k.pack());
        }
    }
    if let Ok(Frame::Ip(_, info)) = parse_frame(data) {
        assert!(info.l4_offset as usize <= data.len());
        // A source route lies within the IP header it was found in.
        if let Some(wire::packet::SourceRoute::V6 { offset, len, .. }) = info.source_route {
            assert!(offset >= info.l3_offset && offset + len <= info.l4_offset);
        }
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
