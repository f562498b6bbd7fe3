//! Tunnel parsing, decapsulation and the GENEVE return rewrite on arbitrary frames.
#![no_main]
use libfuzzer_sys::fuzz_target;
use wire::buf::{MemBuf, PacketBuf};
use wire::encap::{DecapConfig, decapsulate, geneve_return_rewrite, parse_tunnel};

fuzz_target!(|data: &[u8]| {
    let cfg = DecapConfig {
        allow_zero_udp_checksum_v6: data.first() == Some(&0),
        ..DecapConfig::default()
    };
    let parsed = parse_tunnel(data, &cfg);
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
