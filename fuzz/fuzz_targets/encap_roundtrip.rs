//! encapsulate → decapsulate returns the original frame (minus link padding), for every
//! tunnel mode, outer family and checksum policy; where a template covers the case, its
//! encapsulation gives the same bytes. The first byte selects the parameters.
#![no_main]
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use libfuzzer_sys::fuzz_target;
use wire::buf::{MemBuf, PacketBuf};
use wire::encap::{
    DecapConfig, InnerIp, Outer, Template, Tunnel, UdpChecksum, decapsulate, encapsulate,
    encapsulate_with,
};
use wire::ethernet::EthernetRepr;
use wire::geneve::{GatewayOptions, OptionIds};

fuzz_target!(|input: &[u8]| {
    let Some((&sel, frame)) = input.split_first() else {
        return;
    };
    let v6 = sel & 1 != 0;
    let tunnel = match (sel >> 1) & 3 {
        0 => Tunnel::IpIp,
        1 => Tunnel::Gre {
            key: (sel & 8 != 0).then_some(0xabcd_ef01),
        },
        2 => Tunnel::Gue { port: 6080 },
        _ => Tunnel::Geneve {
            port: 6081,
            vni: 0,
            ids: OptionIds::default(),
            options: GatewayOptions {
                endpoint_id: (sel & 8 != 0).then_some(42),
                cookie: (sel & 16 != 0).then_some(7),
            },
        },
    };
    let udp_checksum = match sel >> 5 {
        0 | 1 => UdpChecksum::Auto,
        2 | 3 => UdpChecksum::Full,
        _ => UdpChecksum::Zero,
    };
    let outer = Outer {
        src_mac: [2, 0, 0, 0, 0, 1],
        dst_mac: [2, 0, 0, 0, 0, 2],
        src_ip: if v6 {
            IpAddr::V6(Ipv6Addr::LOCALHOST)
        } else {
            IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1))
        },
        dst_ip: if v6 {
            IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2))
        } else {
            IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2))
        },
        ttl: 64,
        dont_fragment: true,
        flow_hash: u64::from(sel).wrapping_mul(0x9e37_79b9_7f4a_7c15),
        src_port_min: 49152,
        src_port_max: 65535,
        udp_checksum,
    };
    let Ok(mut buf) = MemBuf::new([0u8; 4400], 128, frame) else {
        return;
    };
    let templated = Template::new(&outer, &tunnel).ok().and_then(|t| {
        let inner = InnerIp::of(frame).ok()?;
        let mut b = MemBuf::new([0u8; 4400], 128, frame).ok()?;
        let cookie = match tunnel {
            Tunnel::Geneve { options, .. } => options.cookie.unwrap_or(0),
            _ => 0,
        };
        let r = encapsulate_with(&mut b, &t, &inner, outer.flow_hash, cookie);
        Some((r.ok(), b.data().to_vec()))
    });
    let result = encapsulate(&mut buf, &outer, &tunnel);
    if let Some((r, bytes)) = &templated {
        assert_eq!(r.is_some(), result.is_ok(), "template and encapsulate disagree");
        if r.is_some() {
            assert_eq!(bytes.as_slice(), buf.data(), "template bytes differ");
        }
    }
    let Ok(hdr) = result else {
        assert_eq!(
            buf.data(),
            frame,
            "a failed encapsulation must not change the frame"
        );
        return;
    };
    let ip_len = buf.len() - hdr;
    let l2_len = EthernetRepr::parse(frame).unwrap().header_len();
    let cfg = DecapConfig {
        allow_zero_udp_checksum_v6: true,
        ..DecapConfig::default()
    };
    let info = decapsulate(&mut buf, &cfg, &frame[..l2_len]).unwrap();
    assert_eq!(info.inner_len, ip_len);
    assert_eq!(buf.data(), &frame[..l2_len + ip_len]);
});
