//! Tunnel parsing, decapsulation and the GENEVE return rewrite on arbitrary frames, the
//! gateway return's fast parse against the general one, and the backend-side decapsulator's
//! verdict on the same bytes as socket payloads.
#![no_main]
use libfuzzer_sys::fuzz_target;
use wire::buf::{MemBuf, PacketBuf};
use wire::encap::{
    DecapConfig, TunnelKind, decapsulate, geneve_return_rewrite, parse_geneve_return_v4,
    parse_tunnel,
};
use wire::geneve::{GatewayOptions, OptionIds};

fuzz_target!(|data: &[u8]| {
    let cfg = DecapConfig {
        allow_zero_udp_checksum_v6: data.first() == Some(&0),
        ..DecapConfig::default()
    };
    let parsed = parse_tunnel(data, &cfg);
    decap_policy(data);
    gateway_return(data);
    let Ok(mut buf) = MemBuf::new([0u8; 4096], 128, data) else {
        return;
    };
    let l2 = [0u8, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 0x08, 0x00];
    let r = decapsulate(&mut buf, &cfg, &l2);
    assert_eq!(
        parsed.is_ok(),
        r.is_ok() || r == Err(wire::DecapError::L2Mismatch)
    );
    if let Ok(info) = r {
        assert_eq!(buf.len(), 14 + info.inner_len);
    }
    let mut copy = data.to_vec();
    if let Ok(info) = geneve_return_rewrite(&mut copy, &cfg, Some(1)) {
        // The rewritten frame still validates (checksums kept valid), from the other side.
        let back = parse_tunnel(&copy, &cfg).unwrap();
        assert_eq!(back.src_ip, info.dst_ip);
        assert_eq!(back.gateway, info.gateway);
    }
});

/// The fast parse of an appliance's return takes only what `parse_tunnel` takes (as GENEVE
/// to the frame's UDP port, both options, not OAM, no unknown critical option), with the
/// same facts, and an inner packet `parse_ip` takes.
fn gateway_return(data: &[u8]) {
    let ids = OptionIds::DEFAULT;
    let Some(r) = parse_geneve_return_v4(data, &ids) else {
        return;
    };
    let cfg = DecapConfig {
        gue_port: None,
        geneve_port: Some(u16::from_be_bytes([data[36], data[37]])),
        allow_zero_udp_checksum_v6: false,
        geneve_ids: ids,
    };
    let t = parse_tunnel(data, &cfg).unwrap();
    assert!(t.kind == TunnelKind::Geneve && !t.geneve_oam && !t.geneve_unknown_critical);
    let options = GatewayOptions {
        endpoint_id: Some(r.endpoint_id),
        cookie: Some(r.cookie),
    };
    assert_eq!(t.gateway, options);
    assert_eq!((t.inner_offset, t.inner_len), (r.inner_offset, r.inner_len));
    let info = wire::packet::parse_ip(&data[r.inner_offset..r.inner_offset + r.inner_len]).unwrap();
    assert_eq!(info.proto, r.inner.proto);
    assert_eq!(info.ports, Some((r.inner.src_port, r.inner.dst_port)));
    assert_eq!(info.l3_len, u32::from(r.inner.total_len));
}

/// `decap::decide` on the frame's bytes as the payload every socket could deliver (the frame
/// itself, after Ethernet, after Ethernet + IPv4/IPv6 + UDP), under every carrier, and
/// `decide_ipv4` on what follows the Ethernet header: a delivered packet is a well-formed IP
/// packet to a VIP from a client, lying inside the bytes.
fn decap_policy(data: &[u8]) {
    use decap::{Carrier, Policy, client_source, decide, decide_ipv4};
    let policy = Policy {
        // The balancer's prefixes; inner sources outside them may be clients.
        sources: Some(vec!["198.18.2.0/24".parse().unwrap(), "2001:db8:b::/64".parse().unwrap()]),
        vips: ["10.0.0.0/8", "192.0.2.0/24:tcp/80,443,udp/53", "198.18.0.0/15", "[2001:db8::/32]:tcp/80"]
            .iter()
            .map(|p| p.parse().unwrap())
            .collect(),
        geneve_ids: Default::default(),
        tunnel_ports: vec![6080, 6081],
    };
    let src = "198.18.2.2".parse().unwrap();
    let check = |payload: &[u8], r: Result<&[u8], decap::DropReason>| {
        if let Ok(inner) = r {
            let range = payload.as_ptr_range();
            assert!(range.contains(&inner.as_ptr()) || inner.is_empty());
            let info = wire::packet::parse_ip(inner).unwrap();
            assert_eq!(info.l3_len as usize, inner.len());
            assert!(policy.owns(wire::ip::unmap(&info.dst)));
            assert!(client_source(&policy, wire::ip::unmap(&info.src)));
        }
    };
    for off in [0, 14, 42, 62] {
        let Some(payload) = data.get(off..) else {
            continue;
        };
        for c in [
            Carrier::Gue,
            Carrier::Geneve,
            Carrier::Gre,
            Carrier::IpInIp { inner_v6: false },
            Carrier::IpInIp { inner_v6: true },
        ] {
            check(payload, decide(&policy, src, c, payload));
        }
    }
    if let Some(ip) = data.get(14..) {
        check(ip, decide_ipv4(&policy, ip));
    }
}
