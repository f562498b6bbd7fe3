//! TCP resets built in place: any frame either is left unchanged or becomes a valid reset
//! (checksums verify, RST set) that is itself never answered. With the first byte odd, the
//! frame's IPv4 header and TCP checksums are fixed up first so the fuzzer gets past them.
#![no_main]
use core::net::IpAddr;

use libfuzzer_sys::fuzz_target;
use wire::buf::{MemBuf, PacketBuf};
use wire::ip::unmap;
use wire::packet::{Frame, IpVersion, parse_frame};
use wire::tcp::Flags;
use wire::{ReplyError, ipv4, reply, tcp};

const LB_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];

fn fix_checksums(f: &mut [u8]) {
    let Ok(Frame::Ip(_, info)) = parse_frame(f) else {
        return;
    };
    let (l3, l4, end) = (
        info.l3_offset as usize,
        info.l4_offset as usize,
        (info.l3_offset + info.l3_len) as usize,
    );
    if info.version == IpVersion::V4 {
        ipv4::Packet::new_unchecked(&mut f[l3..]).fill_checksum();
    }
    if info.proto == wire::ip::proto::TCP && l4 <= end {
        let (s, d): (IpAddr, IpAddr) = (unmap(&info.src), unmap(&info.dst));
        if let Ok(mut t) = tcp::Packet::new_checked(&mut f[l4..end]) {
            let _ = t.fill_checksum(&s, &d);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let mut frame = rest.to_vec();
    if mode & 1 == 1 {
        fix_checksums(&mut frame);
    }
    let Ok(mut buf) = MemBuf::new([0u8; 4096 + 256], 128, &frame) else {
        return;
    };
    if reply::tcp_reset(&mut buf, LB_MAC).is_err() {
        assert_eq!(buf.data(), &frame[..]);
        return;
    }
    let out = buf.data().to_vec();
    let Ok(Frame::Ip(eth, info)) = parse_frame(&out) else {
        panic!("a reset is an IP frame");
    };
    assert_eq!(eth.src, LB_MAC);
    assert!(info.tcp_flags.contains(Flags::RST));
    let l4 = info.l4_offset as usize;
    let t = tcp::Packet::new_checked(&out[l4..]).unwrap();
    assert!(t.verify_checksum(&unmap(&info.src), &unmap(&info.dst)));
    if info.version == IpVersion::V4 {
        assert!(
            ipv4::Packet::new_checked(&out[info.l3_offset as usize..])
                .unwrap()
                .verify_checksum()
        );
    }
    let mut again = MemBuf::new([0u8; 512], 0, &out).unwrap();
    assert_eq!(reply::tcp_reset(&mut again, [2; 6]), Err(ReplyError::Reset));
});
