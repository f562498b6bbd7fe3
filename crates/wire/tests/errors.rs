//! Every kind of malformed header yields its typed error (never a panic).

use wire::ParseError::{self, *};
use wire::ethernet::EthernetRepr;
use wire::packet::{IpVersion, parse_frame, parse_ip, parse_quoted};
use wire::{arp, esp, geneve, gre, gue, icmpv4, ipv4, ipv6, tcp, udp, vxlan};

fn ipv4_hdr() -> [u8; 20] {
    let mut b = [0u8; 20];
    b[0] = 0x45;
    b[3] = 20;
    b
}

#[test]
fn ipv4_errors() {
    let ok = ipv4_hdr();
    assert!(ipv4::Packet::new_checked(&ok[..]).is_ok());
    let e = |b: &[u8]| ipv4::Packet::new_checked(b).err();
    assert_eq!(e(&ok[..19]), Some(Truncated));
    let mut b = ok;
    b[0] = 0x65;
    assert_eq!(e(&b), Some(BadVersion));
    b[0] = 0x44;
    assert_eq!(e(&b), Some(BadHeaderLength));
    b[0] = 0x46;
    assert_eq!(e(&b), Some(Truncated));
    let mut b = ok;
    b[3] = 19;
    assert_eq!(e(&b), Some(BadLength));
    b[3] = 21;
    assert_eq!(e(&b), Some(Truncated));
    let mut b = ok;
    b[6] = 0x80; // reserved flag
    let c = wire::checksum::checksum(&b);
    b[10..12].copy_from_slice(&c.to_be_bytes());
    let p = ipv4::Packet::new_checked(&b[..]).unwrap();
    assert_eq!(ipv4::Ipv4Repr::parse(&p), Err(BadFlags));
    b[6] = 0;
    let p = ipv4::Packet::new_checked(&b[..]).unwrap();
    assert_eq!(ipv4::Ipv4Repr::parse(&p), Err(BadChecksum));
}

#[test]
fn ipv6_and_frame_errors() {
    let mut b = [0u8; 40];
    b[0] = 0x60;
    b[5] = 1;
    assert_eq!(ipv6::Packet::new_checked(&b[..]).err(), Some(Truncated));
    b[0] = 0x40;
    assert_eq!(ipv6::Packet::new_checked(&b[..]).err(), Some(BadVersion));
    assert_eq!(parse_ip(&[]).err(), Some(Truncated));
    assert_eq!(parse_ip(&[0x70; 40]).err(), Some(BadVersion));
    // EtherType IPv6 carrying an IPv4 header.
    let mut f = [0u8; 54];
    f[12..14].copy_from_slice(&[0x86, 0xdd]);
    f[14..34].copy_from_slice(&ipv4_hdr());
    assert_eq!(parse_frame(&f).err(), Some(BadVersion));
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    f[14] = 0x60;
    assert_eq!(parse_frame(&f).err(), Some(BadVersion));
    assert_eq!(EthernetRepr::parse(&f[..13]).err(), Some(Truncated));
    // A quoted packet of the wrong version.
    assert_eq!(
        parse_quoted(&ipv4_hdr(), IpVersion::V6).err(),
        Some(Truncated)
    );
    assert_eq!(
        parse_quoted(&[0x60; 40], IpVersion::V4).err(),
        Some(BadVersion)
    );
    let q = parse_quoted(&ipv4_hdr(), IpVersion::V4).unwrap();
    assert_eq!(q.ports, None);
}

#[test]
fn l4_errors() {
    let mut t = [0u8; 20];
    t[12] = 0x40;
    assert_eq!(
        tcp::Packet::new_checked(&t[..]).err(),
        Some(BadHeaderLength)
    );
    t[12] = 0x60;
    assert_eq!(tcp::Packet::new_checked(&t[..]).err(), Some(Truncated));
    t[12] = 0x52; // reserved bit
    let p = tcp::Packet::new_checked(&t[..]).unwrap();
    assert_eq!(tcp::TcpRepr::parse(&p), Err(BadFlags));
    let mut u = [0u8; 8];
    u[5] = 7;
    assert_eq!(udp::Packet::new_checked(&u[..]).err(), Some(BadLength));
    u[5] = 9;
    assert_eq!(udp::Packet::new_checked(&u[..]).err(), Some(Truncated));
    assert_eq!(
        icmpv4::Packet::new_checked(&[0u8; 7][..]).err(),
        Some(Truncated)
    );
    let p = icmpv4::Packet::new_checked(&[8u8, 0, 0, 0, 0, 0, 0, 0][..]).unwrap();
    assert_eq!(icmpv4::Icmpv4Repr::parse(&p), Err(BadChecksum));
    let p = esp::Packet::new_checked(&[0u8; 8][..]).unwrap();
    assert_eq!(esp::EspRepr::parse(&p), Err(Unsupported));
}

#[test]
fn tunnel_header_errors() {
    let g = |b: &[u8]| -> Result<gre::GreRepr, ParseError> {
        gre::GreRepr::parse(&gre::Packet::new_checked(b)?)
    };
    assert_eq!(g(&[0x00, 0x01, 0x08, 0x00]), Err(BadFlags)); // version 1 (PPTP)
    assert_eq!(g(&[0x40, 0x00, 0x08, 0x00]), Err(BadFlags)); // routing present
    assert_eq!(g(&[0x20, 0x00, 0x08, 0x00]), Err(Truncated)); // key missing
    assert_eq!(gue::GueRepr::parse(&[]), Err(Truncated));
    assert_eq!(gue::GueRepr::parse(&[0x80]), Err(Unsupported));
    assert_eq!(gue::GueRepr::parse(&[0x50]), Err(BadVersion));
    assert_eq!(gue::GueRepr::parse(&[0x01, 0, 0, 0]), Err(Truncated));
    let v = vxlan::Packet::new_checked(&[0u8; 8][..]).unwrap();
    assert_eq!(vxlan::VxlanRepr::parse(&v), Err(BadFlags));
    let mut gn = [0u8; 8];
    gn[0] = 0x40;
    let p = geneve::Packet::new_checked(&gn[..]).unwrap();
    assert_eq!(geneve::GeneveRepr::parse(&p), Err(BadVersion));
    gn[0] = 0x01;
    assert_eq!(geneve::Packet::new_checked(&gn[..]).err(), Some(Truncated));
    let mut a = [0u8; 28];
    a[1] = 6; // htype 6
    let p = arp::Packet::new_checked(&a[..]).unwrap();
    assert_eq!(arp::ArpRepr::parse(&p), Err(Unsupported));
}

#[test]
fn error_messages_are_the_doc_lines() {
    assert_eq!(
        Truncated.to_string(),
        "buffer too short for the header or the length it announces"
    );
    assert_eq!(
        wire::DecapError::ZeroUdpChecksum.to_string(),
        "outer UDP checksum is zero over IPv6 and zero checksums are not allowed"
    );
    assert_eq!(
        wire::EncapError::from(BadChecksum).to_string(),
        "inner frame is malformed: checksum does not verify"
    );
}

#[test]
fn maximal_ipv6_payload_does_not_overflow_offsets() {
    // QinQ-tagged frame with an IPv6 packet of payload length 65535 and a long extension
    // chain: offsets exceed u16 range once the link-layer header is added.
    let mut f = vec![0u8; 22 + 40 + 65535];
    f[12..14].copy_from_slice(&[0x88, 0xa8]);
    f[16..18].copy_from_slice(&[0x81, 0x00]);
    f[20..22].copy_from_slice(&[0x86, 0xdd]);
    f[22] = 0x60;
    f[26..28].copy_from_slice(&[0xff, 0xff]);
    f[28] = 60; // destination options
    let ext = 62;
    let mut off = ext;
    for _ in 0..7 {
        f[off] = 60;
        f[off + 1] = 255; // 2048 bytes each
        off += 2048;
    }
    f[off - 2048] = 59; // last one: no next header
    let wire::packet::Frame::Ip(_, info) = parse_frame(&f).unwrap() else {
        panic!("not IP")
    };
    assert_eq!(info.l3_len, 40 + 65535);
    assert_eq!(info.proto, 59);
    assert_eq!(info.l4_offset as usize, 62 + 7 * 2048);
}
