//! ICMP "fragmentation needed" / "packet too big" built in place (M48): any frame either is
//! left unchanged or becomes a valid ICMP error (checksums verify, at most 576 / 1280 bytes
//! of IP, quoting the start of the original IP packet) that is itself never answered.
//! With the first byte odd, the frame's IPv4 header checksum is fixed up first so the
//! fuzzer gets past it; the second and third bytes are the MTU to advertise.
#![no_main]
use libfuzzer_sys::fuzz_target;
use wire::buf::{MemBuf, PacketBuf};
use wire::ethernet::ethertype;
use wire::packet::{Frame, IpVersion, parse_frame};
use wire::{ReplyError, icmpv4, icmpv6, ipv4, ipv6, reply};

const LB_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];

fuzz_target!(|data: &[u8]| {
    let Some((&[mode, m0, m1], rest)) = data.split_first_chunk::<3>() else {
        return;
    };
    let mtu = u16::from_be_bytes([m0, m1]);
    let mut frame = rest.to_vec();
    if mode & 1 == 1
        && let Ok(Frame::Ip(_, info)) = parse_frame(&frame)
        && info.version == IpVersion::V4
    {
        ipv4::Packet::new_unchecked(&mut frame[info.l3_offset as usize..]).fill_checksum();
    }
    let Ok(mut buf) = MemBuf::new([0u8; 9300 + 256], 128, &frame) else {
        return;
    };
    if reply::too_big(&mut buf, LB_MAC, mtu).is_err() {
        assert_eq!(buf.data(), &frame[..]);
        return;
    }
    let out = buf.data().to_vec();
    let eth = wire::ethernet::EthernetRepr::parse(&out).unwrap();
    assert_eq!(eth.src, LB_MAC);
    let l2 = eth.header_len();
    let l3 = &out[l2..];
    if eth.ethertype == ethertype::IPV4 {
        let ip = ipv4::Packet::new_checked(l3).unwrap();
        assert!(ip.verify_checksum());
        assert!(l3.len() <= reply::TOO_BIG_V4_MAX);
        let m = icmpv4::Packet::new_checked(ip.payload()).unwrap();
        assert!(m.verify_checksum() && m.is_frag_needed());
        assert_eq!(m.data(), &frame[l2..l2 + m.data().len()]);
    } else {
        let ip = ipv6::Packet::new_checked(l3).unwrap();
        assert!(l3.len() <= reply::TOO_BIG_V6_MAX);
        let m = icmpv6::Packet::new_checked(ip.payload()).unwrap();
        assert!(m.verify_checksum(&ip.src(), &ip.dst()));
        assert!(m.mtu() >= 1280);
        assert_eq!(m.data(), &frame[l2..l2 + m.data().len()]);
    }
    let mut again = MemBuf::new([0u8; 2048], 0, &out).unwrap();
    assert_eq!(
        reply::too_big(&mut again, [2; 6], mtu),
        Err(ReplyError::IcmpError)
    );
});
