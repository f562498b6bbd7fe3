//! Property tests: emit → parse round trips for every header, encapsulate → decapsulate
//! round trips for every delivery mode, flow-key laws, "arbitrary bytes never panic", and the
//! replies built in place (neighbor advertisements, TCP resets) against their RFCs.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use proptest::collection::vec;
use proptest::prelude::*;
use wire::buf::{MemBuf, PacketBuf};
use wire::encap::{
    DecapConfig, InnerIp, Outer, Template, Tunnel, TunnelKind, UdpChecksum, decapsulate,
    encapsulate, encapsulate_with, encapsulate_with_endpoint, parse_geneve_return_v4, parse_tunnel,
    strip_outer,
};
use wire::ethernet::{EthernetRepr, VlanTag, ethertype};
use wire::flow::{Affinity, FlowKey};
use wire::geneve::{GatewayOptions, GeneveOption, OptionIds};
use wire::ip::proto;
use wire::packet::{
    Fragment, Frame, IpVersion, PacketInfo, V4Flow, parse_frame, parse_ip, parse_ip_v4_flow,
    parse_v4_flow, parse_v6_flow,
};

/// A fast IPv4 parse's facts are the general parse's (addresses as it maps them).
fn same_v4_facts(v: &V4Flow, info: &PacketInfo) -> Result<(), TestCaseError> {
    let mapped = |x: u32| wire::ip::mapped_v4(x.to_be_bytes());
    prop_assert_eq!(info.src, mapped(v.src));
    prop_assert_eq!(info.dst, mapped(v.dst));
    prop_assert_eq!(info.proto, v.proto);
    prop_assert_eq!(info.ports, Some((v.src_port, v.dst_port)));
    prop_assert_eq!(info.tcp_flags, v.tcp_flags);
    prop_assert_eq!(info.l3_len, u32::from(v.total_len));
    prop_assert_eq!(info.ttl, v.ttl);
    Ok(())
}
use wire::{arp, esp, geneve, gre, gue, icmpv4, icmpv6, ipv4, ipv6, ndp, reply, tcp, udp, vxlan};

fn mac() -> impl Strategy<Value = [u8; 6]> {
    any::<[u8; 6]>()
}

fn v4() -> impl Strategy<Value = Ipv4Addr> {
    any::<[u8; 4]>().prop_map(Ipv4Addr::from)
}

fn v6() -> impl Strategy<Value = Ipv6Addr> {
    any::<[u8; 16]>().prop_map(Ipv6Addr::from)
}

fn options40() -> impl Strategy<Value = ipv4::Options> {
    (0usize..=10)
        .prop_flat_map(|words| vec(any::<u8>(), words * 4))
        .prop_map(|b| ipv4::Options::new(&b).unwrap())
}

fn eth_repr() -> impl Strategy<Value = EthernetRepr> {
    (mac(), mac(), 0u8..=2, any::<[u16; 2]>(), any::<u16>()).prop_map(|(d, s, n, tci, et)| {
        let mut e = EthernetRepr::untagged(d, s, et);
        // The payload EtherType must not itself look like a tag.
        if et == ethertype::VLAN || et == ethertype::QINQ {
            e.ethertype = ethertype::IPV4;
        }
        e.vlan_count = n;
        let tpids = if n == 2 {
            [ethertype::QINQ, ethertype::VLAN]
        } else {
            [ethertype::VLAN, ethertype::VLAN]
        };
        for i in 0..usize::from(n) {
            e.vlans[i] = VlanTag {
                tpid: tpids[i],
                tci: tci[i],
            };
        }
        e
    })
}

fn ipv4_repr() -> impl Strategy<Value = ipv4::Ipv4Repr> {
    (
        (
            v4(),
            v4(),
            any::<u8>(),
            0u16..1000,
            any::<u8>(),
            any::<u8>(),
        ),
        (
            any::<u16>(),
            any::<bool>(),
            any::<bool>(),
            0u16..8192,
            options40(),
        ),
    )
        .prop_map(
            |((src, dst, protocol, payload_len, ttl, ds), (id, df, mf, off, options))| {
                ipv4::Ipv4Repr {
                    src,
                    dst,
                    protocol,
                    payload_len,
                    ttl,
                    dscp_ecn: ds,
                    ident: id,
                    dont_frag: df,
                    more_frags: mf,
                    frag_offset: off * 8,
                    options,
                }
            },
        )
}

fn ipv6_repr() -> impl Strategy<Value = ipv6::Ipv6Repr> {
    (
        v6(),
        v6(),
        any::<u8>(),
        0u16..1000,
        any::<u8>(),
        any::<u8>(),
        0u32..0x10_0000,
    )
        .prop_map(|(src, dst, nh, pl, hl, tc, fl)| ipv6::Ipv6Repr {
            src,
            dst,
            next_header: nh,
            payload_len: pl,
            hop_limit: hl,
            traffic_class: tc,
            flow_label: fl,
        })
}

/// The Internet checksum's sum the plain way: big-endian 16-bit words added
/// one by one, odd length padded with zero.
fn plain_sum(acc: u64, data: &[u8]) -> u64 {
    data.chunks(2)
        .map(|p| u64::from(u16::from_be_bytes([p[0], p.get(1).copied().unwrap_or(0)])))
        .fold(acc, |a, w| a + w)
}

proptest! {
    /// `checksum::add` sums words as they lie in memory and folds them
    /// byte-swapped: folded, it is the plain sum's fold, also when a sum is
    /// built in pieces (split at an even offset) and when it is all ones.
    #[test]
    fn checksum_add_folds_to_the_plain_sum(
        acc in prop_oneof![Just(0u64), 0u64..1 << 40],
        data in prop_oneof![
            vec(any::<u8>(), 0..200),
            vec(Just(0xffu8), 0..40),
            vec(Just(0u8), 0..40),
        ],
        split in 0usize..100,
    ) {
        use wire::checksum::{add, fold};
        prop_assert_eq!(fold(add(acc, &data)), fold(plain_sum(acc, &data)));
        let at = (2 * split).min(data.len() & !1);
        let (a, b) = data.split_at(at);
        prop_assert_eq!(fold(add(add(acc, a), b)), fold(plain_sum(acc, &data)));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn ethernet_round_trip(e in eth_repr()) {
        let mut b = [0xa5u8; 64];
        e.emit(&mut b).unwrap();
        prop_assert_eq!(EthernetRepr::parse(&b[..e.header_len()]).unwrap(), e);
    }

    #[test]
    fn arp_round_trip(oper in any::<u16>(), sha in mac(), spa in v4(), tha in mac(), tpa in v4()) {
        let r = arp::ArpRepr { oper, sha, spa, tha, tpa };
        let mut b = [0xa5u8; arp::PACKET_LEN];
        r.emit(&mut arp::Packet::new_unchecked(&mut b[..])).unwrap();
        prop_assert_eq!(arp::ArpRepr::parse(&arp::Packet::new_checked(&b[..]).unwrap()).unwrap(), r);
    }

    #[test]
    fn ipv4_round_trip(r in ipv4_repr()) {
        let mut b = vec![0xa5u8; r.header_len() + usize::from(r.payload_len)];
        r.emit(&mut ipv4::Packet::new_unchecked(&mut b[..])).unwrap();
        let p = ipv4::Packet::new_checked(&b[..]).unwrap();
        prop_assert_eq!(ipv4::Ipv4Repr::parse(&p).unwrap(), r);
        prop_assert!(p.verify_checksum());
    }

    #[test]
    fn ipv4_incremental_ttl_matches_recompute(r in ipv4_repr(), ttl in any::<u8>()) {
        let mut b = vec![0xa5u8; r.header_len() + usize::from(r.payload_len)];
        let mut p = ipv4::Packet::new_unchecked(&mut b[..]);
        r.emit(&mut p).unwrap();
        p.set_ttl_incremental(ttl);
        prop_assert!(p.verify_checksum());
        p.swap_addrs();
        prop_assert!(p.verify_checksum());
    }

    #[test]
    fn ipv6_round_trip(r in ipv6_repr()) {
        let mut b = vec![0xa5u8; 40 + usize::from(r.payload_len)];
        r.emit(&mut ipv6::Packet::new_unchecked(&mut b[..])).unwrap();
        prop_assert_eq!(ipv6::Ipv6Repr::parse(&ipv6::Packet::new_checked(&b[..]).unwrap()).unwrap(), r);
    }

    #[test]
    fn ipv6_extension_chain_round_trip(
        exts in vec((prop_oneof![Just(proto::HOPOPT), Just(proto::IPV6_ROUTE), Just(proto::IPV6_OPTS)], 0u8..4), 0..5),
        frag in proptest::option::of((0u16..8192, any::<bool>(), any::<u32>())),
        upper in prop_oneof![Just(proto::TCP), Just(proto::UDP), Just(proto::ESP)],
    ) {
        // Build the chain back to front.
        let mut b = [0xa5u8; 512];
        let mut kinds: Vec<u8> = exts.iter().map(|e| e.0).collect();
        if frag.is_some() { kinds.push(proto::IPV6_FRAG); }
        let mut off = 0;
        for (i, kind) in kinds.iter().enumerate() {
            let next = kinds.get(i + 1).copied().unwrap_or(upper);
            if *kind == proto::IPV6_FRAG {
                let (o, m, id) = frag.unwrap();
                let f = ipv6::FragmentRepr { next_header: next, offset: o * 8, more_frags: m, ident: id };
                f.emit(&mut b[off..]).unwrap();
                prop_assert_eq!(ipv6::FragmentRepr::parse(&b[off..]).unwrap(), f);
                off += 8;
            } else {
                let e = ipv6::ExtHeaderRepr { next_header: next, len_units: exts[i].1 };
                e.emit(&mut b[off..]).unwrap();
                prop_assert_eq!(ipv6::ExtHeaderRepr::parse(&b[off..]).unwrap(), e);
                off += e.header_len();
            }
        }
        let first = kinds.first().copied().unwrap_or(upper);
        let walk = ipv6::walk_extensions(&b[..off], first);
        // A second routing header is refused (RFC 8200 §4.1: at most one).
        if kinds.iter().filter(|k| **k == proto::IPV6_ROUTE).count() > 1 {
            prop_assert_eq!(walk, Err(wire::ParseError::BadOption));
            return Ok(());
        }
        let w = walk.unwrap();
        prop_assert_eq!(w.upper, upper);
        prop_assert_eq!(w.offset, off);
        prop_assert_eq!(usize::from(w.count), kinds.len());
        prop_assert_eq!(w.fragment.map(|f| f.ident), frag.map(|f| f.2));
        // The routing header, where it is: its type and segments left are the
        // (zero-filled) body's first bytes.
        let at = kinds.iter().position(|k| *k == proto::IPV6_ROUTE).map(|i| {
            kinds[..i].iter().enumerate().map(|(j, k)| match *k {
                proto::IPV6_FRAG => 8,
                _ => (usize::from(exts[j].1) + 1) * 8,
            }).sum::<usize>()
        });
        prop_assert_eq!(w.routing.map(|r| (r.offset, r.routing_type, r.segments_left)), at.map(|o| (o, 0, 0)));
    }

    #[test]
    fn tcp_round_trip(
        sp in any::<u16>(), dp in any::<u16>(), seq in any::<u32>(), ack in any::<u32>(),
        flags in 0u16..0x200, window in any::<u16>(), urgent in any::<u16>(),
        options in options40(), payload in vec(any::<u8>(), 0..64), src in v4(), dst in v4(),
    ) {
        let r = tcp::TcpRepr { src_port: sp, dst_port: dp, seq, ack, flags: tcp::Flags(flags), window, urgent, options };
        let mut b = vec![0xa5u8; r.header_len() + payload.len()];
        b[r.header_len()..].copy_from_slice(&payload);
        let mut p = tcp::Packet::new_unchecked(&mut b[..]);
        r.emit(&mut p).unwrap();
        p.fill_checksum(&IpAddr::V4(src), &IpAddr::V4(dst)).unwrap();
        let p = tcp::Packet::new_checked(&b[..]).unwrap();
        prop_assert_eq!(tcp::TcpRepr::parse(&p).unwrap(), r);
        prop_assert!(p.verify_checksum(&IpAddr::V4(src), &IpAddr::V4(dst)));
        prop_assert_eq!(p.payload(), &payload[..]);
    }

    #[test]
    fn udp_round_trip(sp in any::<u16>(), dp in any::<u16>(), payload in vec(any::<u8>(), 0..64), src in v6(), dst in v6()) {
        let r = udp::UdpRepr { src_port: sp, dst_port: dp, payload_len: u16::try_from(payload.len()).unwrap() };
        let mut b = vec![0xa5u8; 8 + payload.len()];
        b[8..].copy_from_slice(&payload);
        let mut p = udp::Packet::new_unchecked(&mut b[..]);
        r.emit(&mut p).unwrap();
        p.fill_checksum(&IpAddr::V6(src), &IpAddr::V6(dst)).unwrap();
        let p = udp::Packet::new_checked(&b[..]).unwrap();
        prop_assert_eq!(udp::UdpRepr::parse(&p).unwrap(), r);
        prop_assert!(p.checksum() != 0);
        prop_assert!(p.verify_checksum(&IpAddr::V6(src), &IpAddr::V6(dst)));
    }

    #[test]
    fn icmp_round_trip(t in any::<u8>(), c in any::<u8>(), rest in any::<u32>(), data in vec(any::<u8>(), 0..64), src in v6(), dst in v6()) {
        let mut b = vec![0xa5u8; 8 + data.len()];
        b[8..].copy_from_slice(&data);
        let r = icmpv4::Icmpv4Repr { msg_type: t, code: c, rest };
        r.emit(&mut icmpv4::Packet::new_unchecked(&mut b[..])).unwrap();
        prop_assert_eq!(icmpv4::Icmpv4Repr::parse(&icmpv4::Packet::new_checked(&b[..]).unwrap()).unwrap(), r);
        let r6 = icmpv6::Icmpv6Repr { msg_type: t, code: c, rest };
        b[..8].fill(0xa5);
        r6.emit(&mut icmpv6::Packet::new_unchecked(&mut b[..]), &src, &dst).unwrap();
        prop_assert_eq!(icmpv6::Icmpv6Repr::parse(&icmpv6::Packet::new_checked(&b[..]).unwrap(), &src, &dst).unwrap(), r6);
    }

    #[test]
    fn esp_vxlan_round_trip(spi in 1u32.., seq in any::<u32>(), vni in 0u32..0x100_0000) {
        let r = esp::EspRepr { spi, seq };
        let mut b = [0xa5u8; 8];
        r.emit(&mut esp::Packet::new_unchecked(&mut b[..])).unwrap();
        prop_assert_eq!(esp::EspRepr::parse(&esp::Packet::new_checked(&b[..]).unwrap()).unwrap(), r);
        let x = vxlan::VxlanRepr { vni };
        let mut b = [0xa5u8; 8];
        x.emit(&mut vxlan::Packet::new_unchecked(&mut b[..])).unwrap();
        prop_assert_eq!(vxlan::VxlanRepr::parse(&vxlan::Packet::new_checked(&b[..]).unwrap()).unwrap(), x);
    }

    #[test]
    fn gre_round_trip(protocol in any::<u16>(), checksum in any::<bool>(), key in proptest::option::of(any::<u32>()),
                      seq in proptest::option::of(any::<u32>()), payload in vec(any::<u8>(), 0..32)) {
        let r = gre::GreRepr { protocol, checksum, key, seq };
        let mut b = vec![0xa5u8; r.header_len() + payload.len()];
        b[r.header_len()..].copy_from_slice(&payload);
        r.emit(&mut b).unwrap();
        let p = gre::Packet::new_checked(&b[..]).unwrap();
        prop_assert_eq!(gre::GreRepr::parse(&p).unwrap(), r);
        prop_assert_eq!(p.payload(), &payload[..]);
    }

    #[test]
    fn gue_round_trip(control in any::<bool>(), p in any::<u8>(), flags in any::<u16>(), hlen in 0u8..32) {
        let r = gue::GueRepr::Header { control, proto: p, flags, hlen };
        let mut b = vec![0xa5u8; r.header_len()];
        r.emit(&mut b).unwrap();
        prop_assert_eq!(gue::GueRepr::parse(&b).unwrap(), r);
        for (first, v6) in [(0x45u8, false), (0x60, true)] {
            prop_assert_eq!(gue::GueRepr::parse(&[first]).unwrap(), gue::GueRepr::DirectIp { ipv6: v6 });
        }
    }

    #[test]
    fn geneve_round_trip(
        oam in any::<bool>(), critical in any::<bool>(), protocol in any::<u16>(), vni in 0u32..0x100_0000,
        opts in vec((any::<u16>(), any::<u8>(), 0usize..8), 0..6),
        gw in (proptest::option::of(any::<u64>()), proptest::option::of(any::<u32>())),
    ) {
        let datas: Vec<Vec<u8>> = opts.iter().map(|o| vec![o.1; o.2 * 4]).collect();
        let options: Vec<GeneveOption> = opts.iter().zip(&datas)
            .map(|(o, d)| GeneveOption { class: if o.0 == 0x0139 { 0x013a } else { o.0 }, opt_type: o.1, data: d })
            .collect();
        let gwo = GatewayOptions { endpoint_id: gw.0, cookie: gw.1 };
        let ids = OptionIds::default();
        let ol = options.iter().map(|o| o.wire_len()).sum::<usize>() + gwo.wire_len();
        let r = geneve::GeneveRepr { oam, critical, protocol, vni, options_len: u16::try_from(ol).unwrap() };
        let mut b = vec![0xa5u8; r.header_len()];
        r.emit(&mut geneve::Packet::new_unchecked(&mut b[..])).unwrap();
        let mut off = 8;
        for o in &options { off += o.emit(&mut b[off..]).unwrap(); }
        off += gwo.emit(&ids, &mut b[off..]).unwrap();
        prop_assert_eq!(off, b.len());
        let p = geneve::Packet::new_checked(&b[..]).unwrap();
        prop_assert_eq!(geneve::GeneveRepr::parse(&p).unwrap(), r);
        let parsed: Vec<GeneveOption> = p.option_iter().map(Result::unwrap).collect();
        prop_assert_eq!(&parsed[..options.len()], &options[..]);
        prop_assert_eq!(GatewayOptions::parse(&ids, p.options()).unwrap(), gwo);
    }

    #[test]
    fn flow_key_laws(src in any::<[u8; 16]>(), dst in any::<[u8; 16]>(), p in any::<u8>(), sp in any::<u16>(), dp in any::<u16>(), seed in any::<u64>()) {
        for k in [FlowKey::five(src, dst, p, sp, dp), FlowKey::three(src, dst, p), FlowKey::two(src, dst)] {
            prop_assert_eq!(FlowKey::unpack(&k.pack()), Some(k));
            prop_assert_eq!(k.symmetric(), k.reversed().symmetric());
            prop_assert_eq!(k.reversed().reversed(), k);
            prop_assert_eq!(k.hash64_seeded(seed), k.hash64_seeded(seed));
        }
        // The packed symmetric key, also between equal addresses and addresses equal in
        // their first 8 bytes (where the later words and the ports decide the order).
        let mut near = src;
        near[8..].copy_from_slice(&dst[8..]);
        for (a, b) in [(src, dst), (src, src), (src, near)] {
            for k in [FlowKey::five(a, b, p, sp, dp), FlowKey::three(a, b, p), FlowKey::two(a, b)] {
                for k in [k, k.reversed()] {
                    prop_assert_eq!(FlowKey::symmetric_packed(k.pack()), k.symmetric().pack());
                }
            }
        }
        let a = FlowKey::with_affinity(src, dst, p, Some((sp, dp)), false, Affinity::None);
        let b = FlowKey::with_affinity(src, dst, p, Some((sp, dp)), true, Affinity::None);
        prop_assert_eq!(b, FlowKey::three(src, dst, p));
        prop_assert_eq!(a, FlowKey::five(src, dst, p, sp, dp));
        prop_assert_eq!(FlowKey::with_affinity(src, dst, p, None, false, Affinity::ClientIpPortProto), FlowKey::three(src, dst, p));
    }

    #[test]
    fn port_in_range_stays_in_range(h in any::<u64>(), lo in any::<u16>(), span in any::<u16>()) {
        let hi = lo.saturating_add(span);
        let p = wire::flow::port_in_range(h, lo, hi);
        prop_assert!(p >= lo && p <= hi);
    }

    #[test]
    fn arbitrary_bytes_never_panic(b in vec(any::<u8>(), 0..200)) {
        let _ = parse_frame(&b);
        let _ = wire::packet::parse_ip(&b);
        let _ = parse_tunnel(&b, &DecapConfig::default());
        let mut buf = MemBuf::new([0u8; 512], 128, &b).unwrap();
        let _ = decapsulate(&mut buf, &DecapConfig::default(), &[]);
    }
}

// ------------------------------------------------------------------ encap/decap

#[derive(Debug, Clone)]
struct InnerSpec {
    eth: EthernetRepr,
    v6: bool,
    src: [u8; 16],
    dst: [u8; 16],
    l4: u8,
    ds: u8,
    ports: (u16, u16),
    payload: Vec<u8>,
}

fn inner_spec() -> impl Strategy<Value = InnerSpec> {
    (
        eth_repr(),
        any::<bool>(),
        any::<[u8; 16]>(),
        any::<[u8; 16]>(),
        prop_oneof![
            Just(proto::TCP),
            Just(proto::UDP),
            Just(proto::ESP),
            Just(proto::GRE)
        ],
        any::<u8>(),
        any::<(u16, u16)>(),
        vec(any::<u8>(), 0..200),
    )
        .prop_map(|(eth, v6, src, dst, l4, ds, ports, payload)| InnerSpec {
            eth,
            v6,
            src,
            dst,
            l4,
            ds,
            ports,
            payload,
        })
}

/// Builds an inner frame with this crate's emitters (themselves checked against scapy).
fn build_inner(s: &InnerSpec) -> Vec<u8> {
    let mut eth = s.eth;
    eth.ethertype = if s.v6 {
        ethertype::IPV6
    } else {
        ethertype::IPV4
    };
    let l2 = eth.header_len();
    let ip_hdr = if s.v6 { 40 } else { 20 };
    let l4_len = match s.l4 {
        proto::TCP => 20,
        proto::UDP => 8,
        _ => 0,
    };
    let total = l2 + ip_hdr + l4_len + s.payload.len();
    let mut f = vec![0xa5u8; total];
    eth.emit(&mut f).unwrap();
    let pl = u16::try_from(l4_len + s.payload.len()).unwrap();
    let (src, dst): (IpAddr, IpAddr) = if s.v6 {
        let r = ipv6::Ipv6Repr {
            src: Ipv6Addr::from(s.src),
            dst: Ipv6Addr::from(s.dst),
            next_header: s.l4,
            payload_len: pl,
            hop_limit: 64,
            traffic_class: s.ds,
            flow_label: 0,
        };
        r.emit(&mut ipv6::Packet::new_unchecked(&mut f[l2..]))
            .unwrap();
        (r.src.into(), r.dst.into())
    } else {
        let a = |x: &[u8; 16]| Ipv4Addr::new(x[0], x[1], x[2], x[3]);
        let r = ipv4::Ipv4Repr {
            src: a(&s.src),
            dst: a(&s.dst),
            protocol: s.l4,
            payload_len: pl,
            ttl: 64,
            dscp_ecn: s.ds,
            ident: 7,
            dont_frag: true,
            more_frags: false,
            frag_offset: 0,
            options: ipv4::Options::default(),
        };
        r.emit(&mut ipv4::Packet::new_unchecked(&mut f[l2..]))
            .unwrap();
        (r.src.into(), r.dst.into())
    };
    let l4 = l2 + ip_hdr;
    f[l4 + l4_len..].copy_from_slice(&s.payload);
    match s.l4 {
        proto::TCP => {
            let r = tcp::TcpRepr {
                src_port: s.ports.0,
                dst_port: s.ports.1,
                seq: 1,
                ack: 2,
                flags: tcp::Flags::ACK,
                window: 100,
                urgent: 0,
                options: ipv4::Options::default(),
            };
            let mut p = tcp::Packet::new_unchecked(&mut f[l4..]);
            r.emit(&mut p).unwrap();
            p.fill_checksum(&src, &dst).unwrap();
        }
        proto::UDP => {
            let r = udp::UdpRepr {
                src_port: s.ports.0,
                dst_port: s.ports.1,
                payload_len: u16::try_from(s.payload.len()).unwrap(),
            };
            let mut p = udp::Packet::new_unchecked(&mut f[l4..]);
            r.emit(&mut p).unwrap();
            p.fill_checksum(&src, &dst).unwrap();
        }
        _ => {}
    }
    f
}

fn tunnel() -> impl Strategy<Value = Tunnel> {
    prop_oneof![
        Just(Tunnel::IpIp),
        proptest::option::of(any::<u32>()).prop_map(|key| Tunnel::Gre { key }),
        (1u16..)
            .prop_filter("not GENEVE's port", |p| *p != 6081)
            .prop_map(|port| Tunnel::Gue { port }),
        (
            proptest::option::of(any::<u64>()),
            proptest::option::of(any::<u32>()),
            any::<u16>(),
            any::<u8>(),
            0u32..0x100_0000
        )
            .prop_map(|(e, c, class, t, vni)| Tunnel::Geneve {
                port: 6081,
                vni,
                ids: OptionIds {
                    class,
                    endpoint_type: t,
                    cookie_type: t.wrapping_add(1),
                },
                options: GatewayOptions {
                    endpoint_id: e,
                    cookie: c,
                },
            }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    #[test]
    fn encap_decap_round_trip(
        s in inner_spec(), t in tunnel(), outer_v6 in any::<bool>(), smac in mac(), dmac in mac(),
        a in any::<[u8; 16]>(), b in any::<[u8; 16]>(), hash in any::<u64>(), ttl in 1u8..,
        csum in prop_oneof![Just(UdpChecksum::Auto), Just(UdpChecksum::Full), Just(UdpChecksum::Zero)],
    ) {
        let orig = build_inner(&s);
        let (src_ip, dst_ip): (IpAddr, IpAddr) = if outer_v6 {
            (Ipv6Addr::from(a).into(), Ipv6Addr::from(b).into())
        } else {
            (Ipv4Addr::new(a[0], a[1], a[2], a[3]).into(), Ipv4Addr::new(b[0], b[1], b[2], b[3]).into())
        };
        let outer = Outer {
            src_mac: smac, dst_mac: dmac, src_ip, dst_ip, ttl, dont_fragment: hash & 1 == 0,
            flow_hash: hash, src_port_min: 49152, src_port_max: 65535, udp_checksum: csum,
        };
        let mut buf = MemBuf::new([0u8; 600], 128, &orig).unwrap();
        encapsulate(&mut buf, &outer, &t).unwrap();
        // The outer frame parses as an IP packet to the outer destination.
        match parse_frame(buf.data()).unwrap() {
            Frame::Ip(e, info) => {
                prop_assert_eq!(e.dst, dmac);
                prop_assert_eq!(info.dst, wire::ip::to_mapped(&dst_ip));
                if let Some((sp, _)) = info.ports { prop_assert!(sp >= 49152); }
            }
            other => prop_assert!(false, "{:?}", other),
        }
        let cfg = DecapConfig {
            gue_port: match t { Tunnel::Gue { port } => Some(port), _ => Some(6080) },
            geneve_port: Some(6081),
            allow_zero_udp_checksum_v6: true,
            geneve_ids: match t { Tunnel::Geneve { ids, .. } => ids, _ => OptionIds::default() },
        };
        let l2 = orig[..s.eth.header_len()].to_vec();
        let info = decapsulate(&mut buf, &cfg, &l2).unwrap();
        prop_assert_eq!(buf.data(), &orig[..]);
        prop_assert_eq!(info.src_ip, src_ip);
        if let Tunnel::Geneve { options, .. } = t {
            prop_assert_eq!(info.gateway, options);
        }
    }
}

// ------------------------------------------------------------------ tunnelled ingress (M49)

/// The outer frame as the balancer's tunnelled ingress leaves it: the outer link-layer
/// header (its EtherType set for the inner packet), then the inner IP packet.
fn stripped(outer_l2: &[u8], inner_v6: bool, ip: &[u8]) -> Vec<u8> {
    let mut want = outer_l2.to_vec();
    let n = want.len();
    let et = if inner_v6 {
        ethertype::IPV6
    } else {
        ethertype::IPV4
    };
    want[n - 2..].copy_from_slice(&et.to_be_bytes());
    want.extend_from_slice(ip);
    want
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    /// Spillway's own encapsulation of every mode, outer and inner IPv4 or IPv6, then the
    /// ingress decapsulation: the inner packet comes back, byte for byte, behind the
    /// frame's own link-layer header.
    #[test]
    fn encap_then_ingress_strip_gives_back_the_inner_packet(
        s in inner_spec(), t in tunnel(), outer_v6 in any::<bool>(), smac in mac(), dmac in mac(),
        a in any::<[u8; 16]>(), b in any::<[u8; 16]>(), hash in any::<u64>(), ttl in 1u8..,
        pad in 0usize..20,
    ) {
        let orig = build_inner(&s);
        let (src_ip, dst_ip): (IpAddr, IpAddr) = if outer_v6 {
            (Ipv6Addr::from(a).into(), Ipv6Addr::from(b).into())
        } else {
            (Ipv4Addr::new(a[0], a[1], a[2], a[3]).into(), Ipv4Addr::new(b[0], b[1], b[2], b[3]).into())
        };
        let outer = Outer {
            src_mac: smac, dst_mac: dmac, src_ip, dst_ip, ttl, dont_fragment: true,
            flow_hash: hash, src_port_min: 49152, src_port_max: 65535,
            udp_checksum: UdpChecksum::Auto,
        };
        let mut buf = MemBuf::new([0u8; 700], 128, &orig).unwrap();
        encapsulate(&mut buf, &outer, &t).unwrap();
        // Link padding after the outer packet is not part of it.
        let mut framed = buf.data().to_vec();
        framed.extend(std::iter::repeat_n(0u8, pad));
        let cfg = DecapConfig {
            gue_port: match t { Tunnel::Gue { port } => Some(port), _ => Some(6080) },
            geneve_port: Some(6081),
            allow_zero_udp_checksum_v6: false,
            geneve_ids: match t { Tunnel::Geneve { ids, .. } => ids, _ => OptionIds::default() },
        };
        let mut buf = MemBuf::new([0u8; 700], 0, &framed).unwrap();
        let info = parse_tunnel(buf.data(), &cfg).unwrap();
        prop_assert_eq!(info.src_ip, src_ip);
        prop_assert_eq!(info.inner_v6, s.v6);
        prop_assert!(!info.geneve_oam);
        prop_assert!(!info.geneve_unknown_critical);
        strip_outer(&mut buf, &info).unwrap();
        let l2 = s.eth.header_len();
        prop_assert_eq!(buf.data(), &stripped(&framed[..14], s.v6, &orig[l2..])[..]);
        // What is left parses as the inner packet arriving directly (ESP and GRE inner
        // packets here carry arbitrary bytes, which may not parse).
        if matches!(s.l4, proto::TCP | proto::UDP) {
            match parse_frame(buf.data()).unwrap() {
                Frame::Ip(e, info) => {
                    prop_assert_eq!((e.dst, e.src), (dmac, smac));
                    prop_assert_eq!(info.l3_len as usize, orig.len() - l2);
                }
                other => prop_assert!(false, "{:?}", other),
            }
        }
    }

    /// GRE as RFC 2784/2890 allow it (checksum, key, sequence number, each optional) around
    /// an IPv4 or IPv6 packet: parsed, checksum verified, stripped; a changed byte under the
    /// checksum is refused.
    #[test]
    fn gre_with_every_optional_field_strips_and_checks_its_checksum(
        s in inner_spec(), checksum in any::<bool>(), key in proptest::option::of(any::<u32>()),
        seq in proptest::option::of(any::<u32>()), src in v4(), dst in v4(), flip in any::<usize>(),
    ) {
        let orig = build_inner(&s);
        let ip = &orig[s.eth.header_len()..];
        let g = gre::GreRepr { protocol: if s.v6 { ethertype::IPV6 } else { ethertype::IPV4 }, checksum, key, seq };
        let hl = g.header_len();
        let total = 14 + 20 + hl + ip.len();
        let mut f = vec![0u8; total];
        EthernetRepr::untagged([2, 0, 0, 0, 0, 2], [2, 0, 0, 0, 0, 1], ethertype::IPV4).emit(&mut f).unwrap();
        ipv4::Ipv4Repr {
            src, dst, protocol: proto::GRE, payload_len: u16::try_from(hl + ip.len()).unwrap(),
            ttl: 64, dscp_ecn: 0, ident: 0, dont_frag: true, more_frags: false, frag_offset: 0,
            options: ipv4::Options::default(),
        }.emit(&mut ipv4::Packet::new_unchecked(&mut f[14..])).unwrap();
        f[34 + hl..].copy_from_slice(ip);
        g.emit(&mut f[34..]).unwrap();
        let info = parse_tunnel(&f, &DecapConfig::default()).unwrap();
        prop_assert_eq!(info.gre_key, key);
        let mut buf = MemBuf::new([0u8; 700], 0, &f).unwrap();
        strip_outer(&mut buf, &info).unwrap();
        prop_assert_eq!(buf.data(), &stripped(&f[..14], s.v6, ip)[..]);
        if checksum {
            // One byte of the GRE header (not the flags) or of the payload changed.
            let at = 34 + 2 + flip % (f.len() - 36);
            f[at] ^= 0x10;
            prop_assert!(parse_tunnel(&f, &DecapConfig::default()).is_err());
        }
    }

    /// Whatever the bytes, stripping after a successful parse leaves exactly the inner
    /// packet behind the link-layer header, and never panics.
    #[test]
    fn ingress_strip_never_panics(b in vec(any::<u8>(), 0..300)) {
        let mut buf = MemBuf::new([0u8; 400], 0, &b).unwrap();
        if let Ok(info) = parse_tunnel(&b, &DecapConfig::default()) {
            strip_outer(&mut buf, &info).unwrap();
            prop_assert_eq!(buf.len(), info.eth.header_len() + info.inner_len);
        }
    }
}

// ------------------------------------------------------------------ the data plane's fast path

/// Flips bits at some offsets and cuts a few bytes (or none) off the end: near-valid frames.
fn damage(f: &mut Vec<u8>, flips: &[(usize, u8)], cut: usize) {
    for &(i, x) in flips {
        if let Some(b) = f.get_mut(i) {
            *b ^= x;
        }
    }
    f.truncate(f.len().saturating_sub(cut % 4 * cut));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    /// A template made once and used with the facts of the data plane's parse
    /// (`InnerIp::from_parsed`) gives the bytes `encapsulate` gives, and fails where it
    /// fails. (`encapsulate` builds its own template per call; the scapy vectors and the
    /// encap/decap round trips check those bytes independently.)
    #[test]
    fn template_encap_matches_encapsulate(
        s in inner_spec(), t in tunnel(), smac in mac(), dmac in mac(), outer_v6 in any::<bool>(),
        a in any::<[u8; 16]>(), b in any::<[u8; 16]>(),
        hash in any::<u64>(), ttl in 1u8.., df in any::<bool>(), pad in vec(any::<u8>(), 0..8),
        headroom in 0usize..100, lo in any::<u16>(), span in any::<u16>(),
        csum in prop_oneof![Just(UdpChecksum::Auto), Just(UdpChecksum::Full), Just(UdpChecksum::Zero)],
    ) {
        let mut frame = build_inner(&s);
        frame.extend_from_slice(&pad);
        let (src_ip, dst_ip): (IpAddr, IpAddr) = if outer_v6 {
            (Ipv6Addr::from(a).into(), Ipv6Addr::from(b).into())
        } else {
            (Ipv4Addr::new(a[0], a[1], a[2], a[3]).into(), Ipv4Addr::new(b[0], b[1], b[2], b[3]).into())
        };
        let outer = Outer {
            src_mac: smac, dst_mac: dmac, src_ip, dst_ip, ttl,
            dont_fragment: df, flow_hash: hash, src_port_min: lo,
            src_port_max: lo.saturating_add(span), udp_checksum: csum,
        };
        let tmpl = Template::new(&outer, &t).expect("a template for every valid outer");
        let cookie = match t { Tunnel::Geneve { options, .. } => options.cookie.unwrap_or(0), _ => 0 };
        let mut want = MemBuf::new([0u8; 700], headroom, &frame).unwrap();
        let mut got = MemBuf::new([0u8; 700], headroom, &frame).unwrap();
        let mut inner = InnerIp::of(&frame).unwrap();
        if let Ok(Frame::Ip(_, info)) = parse_frame(&frame) {
            let parsed = InnerIp::from_parsed(&info, &frame);
            prop_assert_eq!(parsed, inner);
            inner = parsed;
        }
        let w = encapsulate(&mut want, &outer, &t);
        let g = encapsulate_with(&mut got, &tmpl, &inner, hash, cookie);
        prop_assert_eq!(w.is_ok(), g.is_ok(), "{:?} vs {:?}", w, g);
        if w.is_ok() {
            prop_assert_eq!(w.unwrap(), g.unwrap());
            prop_assert_eq!(want.data(), got.data());
        }
    }

    /// A gateway template (M30: an endpoint-ID placeholder) filled in per packet gives
    /// the bytes `encapsulate` gives with that endpoint ID and cookie.
    #[test]
    fn gateway_template_matches_encapsulate_with_the_endpoint(
        s in inner_spec(), smac in mac(), dmac in mac(), outer_v6 in any::<bool>(),
        a in any::<[u8; 16]>(), b in any::<[u8; 16]>(), hash in any::<u64>(),
        placeholder in any::<u64>(), id in any::<u64>(), cookie in any::<u32>(),
        class in any::<u16>(), types in (any::<u8>(), any::<u8>()).prop_filter("distinct", |(e, c)| e != c),
    ) {
        let frame = build_inner(&s);
        let (src_ip, dst_ip): (IpAddr, IpAddr) = if outer_v6 {
            (Ipv6Addr::from(a).into(), Ipv6Addr::from(b).into())
        } else {
            (Ipv4Addr::new(a[0], a[1], a[2], a[3]).into(), Ipv4Addr::new(b[0], b[1], b[2], b[3]).into())
        };
        let outer = Outer {
            src_mac: smac, dst_mac: dmac, src_ip, dst_ip, ttl: 64,
            dont_fragment: true, flow_hash: hash, src_port_min: 49152,
            src_port_max: 65535, udp_checksum: UdpChecksum::Auto,
        };
        let ids = OptionIds { class, endpoint_type: types.0, cookie_type: types.1 };
        let geneve = |endpoint_id: u64, cookie: u32| Tunnel::Geneve {
            port: 6081, vni: 0, ids,
            options: GatewayOptions { endpoint_id: Some(endpoint_id), cookie: Some(cookie) },
        };
        let tmpl = Template::new(&outer, &geneve(placeholder, 0)).expect("a template");
        let inner = InnerIp::of(&frame).unwrap();
        let mut want = MemBuf::new([0u8; 700], 100, &frame).unwrap();
        let mut got = MemBuf::new([0u8; 700], 100, &frame).unwrap();
        let w = encapsulate(&mut want, &outer, &geneve(id, cookie));
        let g = encapsulate_with_endpoint(&mut got, &tmpl, &inner, hash, cookie, id);
        prop_assert_eq!(w.is_ok(), g.is_ok(), "{:?} vs {:?}", w, g);
        if w.is_ok() {
            prop_assert_eq!(want.data(), got.data());
        }
    }

    /// No template where `encapsulate` refuses the outer headers themselves.
    #[test]
    fn no_template_for_mixed_families_or_empty_port_ranges(t in tunnel(), a in v6(), c in v4()) {
        let mut outer = Outer {
            src_mac: [2; 6], dst_mac: [4; 6], src_ip: a.into(), dst_ip: c.into(), ttl: 64,
            dont_fragment: true, flow_hash: 0, src_port_min: 1, src_port_max: 2,
            udp_checksum: UdpChecksum::Auto,
        };
        prop_assert_eq!(Template::new(&outer, &t).err(), Some(wire::EncapError::MixedFamilies));
        outer.dst_ip = a.into();
        prop_assert!(Template::new(&outer, &t).is_ok());
        outer.src_port_min = 3;
        prop_assert_eq!(Template::new(&outer, &t).err(), Some(wire::EncapError::BadPortRange));
    }

    /// `parse_v4_flow` says yes to exactly the untagged, option-less, unfragmented IPv4
    /// TCP/UDP frames `parse_frame` accepts, with the same facts.
    #[test]
    fn v4_fast_parse_agrees_with_parse_frame(
        s in inner_spec(), cut in 0usize..80, flips in vec((0usize..64, any::<u8>()), 0..4),
        plain in any::<bool>(), tcp in any::<bool>(), mutate in any::<bool>(),
    ) {
        // Half the cases are frames the fast path takes, before any mutation.
        let mut s = s;
        if plain {
            s.eth.vlan_count = 0;
            s.v6 = false;
            s.l4 = if tcp { proto::TCP } else { proto::UDP };
        }
        let mut f = build_inner(&s);
        if mutate {
            damage(&mut f, &flips, cut);
        }
        let fast = parse_v4_flow(&f);
        let canonical = match parse_frame(&f) {
            Ok(Frame::Ip(eth, info)) => {
                let yes = eth.vlan_count == 0
                    && info.version == IpVersion::V4
                    && info.l4_offset == 34
                    && info.fragment == Fragment::No
                    && matches!(info.proto, proto::TCP | proto::UDP);
                yes.then_some(info)
            }
            _ => None,
        };
        prop_assert_eq!(fast.is_some(), canonical.is_some(), "{:?} vs {:?}", fast, canonical);
        if let (Some(v), Some(info)) = (fast, canonical) {
            same_v4_facts(&v, &info)?;
            prop_assert_eq!(f[15], v.ds);
        }
    }

    /// `parse_v6_flow` says yes to exactly the untagged IPv6 frames with TCP/UDP right after
    /// the fixed header, between addresses that are not IPv4-mapped, that `parse_frame`
    /// accepts, with the same facts.
    #[test]
    fn v6_fast_parse_agrees_with_parse_frame(
        s in inner_spec(), cut in 0usize..80, flips in vec((0usize..80, any::<u8>()), 0..4),
        plain in any::<bool>(), tcp in any::<bool>(), mutate in any::<bool>(), mapped in any::<u8>(),
    ) {
        let mut s = s;
        if plain {
            s.eth.vlan_count = 0;
            s.v6 = true;
            s.l4 = if tcp { proto::TCP } else { proto::UDP };
        }
        // Now and then an IPv4-mapped source or destination.
        if mapped < 16 {
            let a = if mapped & 1 == 0 { &mut s.src } else { &mut s.dst };
            a[..12].copy_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff]);
        }
        let mut f = build_inner(&s);
        if mutate {
            damage(&mut f, &flips, cut);
        }
        let fast = parse_v6_flow(&f);
        let canonical = match parse_frame(&f) {
            Ok(Frame::Ip(eth, info)) => {
                let yes = eth.vlan_count == 0
                    && info.version == IpVersion::V6
                    && info.l4_offset == 54
                    && info.fragment == Fragment::No
                    && matches!(info.proto, proto::TCP | proto::UDP)
                    && !wire::ip::is_mapped_v4(&info.src)
                    && !wire::ip::is_mapped_v4(&info.dst);
                yes.then_some(info)
            }
            _ => None,
        };
        prop_assert_eq!(fast.is_some(), canonical.is_some(), "{:?} vs {:?}", fast, canonical);
        if let (Some(v), Some(info)) = (fast, canonical) {
            prop_assert_eq!(info.src, v.src);
            prop_assert_eq!(info.dst, v.dst);
            prop_assert_eq!(info.proto, v.proto);
            prop_assert_eq!(info.ports, Some((v.src_port, v.dst_port)));
            prop_assert_eq!(info.tcp_flags, v.tcp_flags);
            prop_assert_eq!(info.l3_len, 40 + u32::from(v.payload_len));
            prop_assert_eq!(info.ttl, v.hop_limit);
            prop_assert_eq!(InnerIp::from_parsed(&info, &f).ds, v.traffic_class);
            for a in [Affinity::None, Affinity::ClientIpPortProto, Affinity::ClientIpProto, Affinity::ClientIp] {
                let k = FlowKey::from_packet(&info, a);
                prop_assert_eq!(FlowKey::pack_v6(&v.src, &v.dst, v.proto, (v.src_port, v.dst_port), a), k.pack());
            }
        }
    }

    /// The fast IPv4 header checksum test says what `verify_checksum` says, for headers
    /// with their checksum right, wrong, or right and then changed anywhere.
    #[test]
    fn fast_ipv4_checksum_is_verify_checksum(
        mut h in any::<[u8; 20]>(), fill in any::<bool>(), at in 0usize..20, xor in any::<u8>(),
    ) {
        h[0] = 0x45;
        if fill {
            ipv4::Packet::new_unchecked(&mut h[..]).fill_checksum();
        }
        if at > 0 {
            h[at] ^= xor;
        }
        let want = ipv4::Packet::new_unchecked(&h[..]).verify_checksum();
        prop_assert_eq!(ipv4::header_checksum_ok(&h), want);
        prop_assert_eq!(ipv4::ChecksumTest::NEW.verifies(ipv4::header_sum(&h)), want);
    }

    /// `parse_ip_v4_flow` says yes to exactly the option-less, unfragmented IPv4 TCP/UDP
    /// packets `parse_ip` accepts, with the same facts.
    #[test]
    fn bare_v4_fast_parse_agrees_with_parse_ip(
        s in inner_spec(), cut in 0usize..80, flips in vec((0usize..50, any::<u8>()), 0..4),
        plain in any::<bool>(), tcp in any::<bool>(), mutate in any::<bool>(),
    ) {
        let mut s = s;
        if plain {
            s.v6 = false;
            s.l4 = if tcp { proto::TCP } else { proto::UDP };
        }
        let f = build_inner(&s);
        let l2 = s.eth.header_len();
        let mut ip = f[l2..].to_vec();
        if mutate {
            damage(&mut ip, &flips, cut);
        }
        let fast = parse_ip_v4_flow(&ip);
        let canonical = parse_ip(&ip).ok().filter(|info| {
            info.version == IpVersion::V4
                && info.l4_offset == 20
                && info.fragment == Fragment::No
                && matches!(info.proto, proto::TCP | proto::UDP)
        });
        prop_assert_eq!(fast.is_some(), canonical.is_some(), "{:?} vs {:?}", fast, canonical);
        if let (Some(v), Some(info)) = (fast, canonical) {
            same_v4_facts(&v, &info)?;
            prop_assert_eq!(ip[1], v.ds);
        }
    }

    /// The fast path's flow key is the general one, packed.
    #[test]
    fn v4_key_packs_like_the_general_key(
        src in any::<u32>(), dst in any::<u32>(), p in any::<u8>(), ports in any::<(u16, u16)>(),
        affinity in prop_oneof![Just(Affinity::None), Just(Affinity::ClientIpPortProto),
            Just(Affinity::ClientIpProto), Just(Affinity::ClientIp)],
    ) {
        let mapped = |x: u32| wire::ip::mapped_v4(x.to_be_bytes());
        let k = FlowKey::with_affinity(mapped(src), mapped(dst), p, Some(ports), false, affinity);
        prop_assert_eq!(FlowKey::pack_v4(src, dst, p, ports, affinity), k.pack());
    }
}

proptest! {
    // Many cases: each of the few dozen header bytes the fast parse checks is damaged in
    // some of them.
    #![proptest_config(ProptestConfig { cases: 8192, ..ProptestConfig::default() })]

    /// `parse_geneve_return_v4` (gateway mode's returns, M32) takes only frames that
    /// `parse_tunnel` takes as Geneve with both options, neither OAM nor with an unknown
    /// critical option, whose inner packet `parse_ip` takes, with the same facts; and it
    /// takes every frame in the layout the balancer sends, unchanged.
    #[test]
    fn geneve_return_fast_parse_agrees_with_parse_tunnel(
        s in inner_spec(), plain in 0u8..4, tcp in any::<bool>(),
        outer_v6 in 0u8..4, a in any::<[u8; 16]>(), b in any::<[u8; 16]>(),
        id in any::<u64>(), cookie in any::<u32>(), class in any::<u16>(),
        types in (0u8..0x80, 0u8..0x80), critical in 0u8..4, hash in any::<u64>(),
        csum in prop_oneof![Just(UdpChecksum::Auto), Just(UdpChecksum::Full), Just(UdpChecksum::Zero)],
        mutate in any::<bool>(), cut in 0usize..80, flips in vec((0usize..90, any::<u8>()), 1..4),
        pad in vec(any::<u8>(), 0..8),
    ) {
        // Mostly the layout the fast path takes (before any mutation), damaged in the
        // headers it reads half the time.
        let (plain, outer_v6) = (plain != 0, outer_v6 == 0);
        let types = if critical == 0 { (types.0 | 0x80, types.1) } else { types };
        let mut s = s;
        if plain {
            s.v6 = false;
            s.l4 = if tcp { proto::TCP } else { proto::UDP };
        }
        let frame = build_inner(&s);
        let (src_ip, dst_ip): (IpAddr, IpAddr) = if outer_v6 {
            (Ipv6Addr::from(a).into(), Ipv6Addr::from(b).into())
        } else {
            (Ipv4Addr::new(a[0], a[1], a[2], a[3]).into(), Ipv4Addr::new(b[0], b[1], b[2], b[3]).into())
        };
        let outer = Outer {
            src_mac: [2; 6], dst_mac: [4; 6], src_ip, dst_ip, ttl: 64,
            dont_fragment: true, flow_hash: hash, src_port_min: 49152,
            src_port_max: 65535, udp_checksum: csum,
        };
        let ids = OptionIds { class, endpoint_type: types.0, cookie_type: types.1 };
        let t = Tunnel::Geneve {
            port: 6081, vni: 0, ids,
            options: GatewayOptions { endpoint_id: Some(id), cookie: Some(cookie) },
        };
        let mut buf = MemBuf::new([0u8; 700], 128, &frame).unwrap();
        prop_assume!(encapsulate(&mut buf, &outer, &t).is_ok());
        let mut f = buf.data().to_vec();
        f.extend_from_slice(&pad);
        if mutate {
            damage(&mut f, &flips, cut);
        }
        let fast = parse_geneve_return_v4(&f, &ids);
        let sent_layout = !mutate && plain && !outer_v6 && types.0 != types.1 && (types.0 | types.1) & 0x80 == 0;
        if sent_layout {
            prop_assert!(fast.is_some(), "the balancer's own layout is taken");
        }
        if let Some(r) = fast {
            let cfg = DecapConfig {
                gue_port: None,
                geneve_port: Some(u16::from_be_bytes([f[36], f[37]])),
                allow_zero_udp_checksum_v6: false,
                geneve_ids: ids,
            };
            let t = parse_tunnel(&f, &cfg);
            prop_assert!(t.is_ok(), "{:?}", t);
            let t = t.unwrap();
            prop_assert_eq!(t.kind, TunnelKind::Geneve);
            prop_assert!(!t.geneve_oam && !t.geneve_unknown_critical);
            prop_assert_eq!(t.gateway, GatewayOptions { endpoint_id: Some(r.endpoint_id), cookie: Some(r.cookie) });
            prop_assert_eq!((t.inner_offset, t.inner_len, t.inner_v6), (r.inner_offset, r.inner_len, false));
            let info = parse_ip(&f[t.inner_offset..t.inner_offset + t.inner_len]);
            prop_assert!(info.is_ok());
            let info = info.unwrap();
            prop_assert_eq!(info.version, IpVersion::V4);
            prop_assert_eq!(info.fragment, Fragment::No);
            prop_assert!(info.icmp.is_none());
            same_v4_facts(&r.inner, &info)?;
        }
    }
}

// ------------------------------------------------------------------ replies (NDP, M14)

fn unicast_v6() -> impl Strategy<Value = Ipv6Addr> {
    v6().prop_filter("unicast", |a| !a.is_multicast() && !a.is_unspecified())
}

fn unicast_v4() -> impl Strategy<Value = Ipv4Addr> {
    v4().prop_filter("unicast", |a| {
        !a.is_multicast() && !a.is_broadcast() && !a.is_unspecified()
    })
}

fn unicast_mac() -> impl Strategy<Value = [u8; 6]> {
    mac().prop_map(|mut m| {
        m[0] &= 0xfe;
        m
    })
}

/// An Ethernet header from a unicast source (a frame a reply may answer).
fn unicast_eth() -> impl Strategy<Value = EthernetRepr> {
    eth_repr().prop_map(|mut e| {
        e.src[0] &= 0xfe;
        e
    })
}

fn na_flags() -> impl Strategy<Value = ndp::NaFlags> {
    (0u8..8).prop_map(|b| ndp::NaFlags(b << 5))
}

/// A frame around an ICMPv6 message, hop limit 255.
fn nd_frame(eth: &EthernetRepr, src: Ipv6Addr, dst: Ipv6Addr, msg: &[u8]) -> Vec<u8> {
    let mut eth = *eth;
    eth.ethertype = ethertype::IPV6;
    let l2 = eth.header_len();
    let mut f = vec![0xa5u8; l2 + 40 + msg.len()];
    eth.emit(&mut f).unwrap();
    ipv6::Ipv6Repr {
        src,
        dst,
        next_header: proto::ICMPV6,
        payload_len: u16::try_from(msg.len()).unwrap(),
        hop_limit: ndp::HOP_LIMIT,
        traffic_class: 0,
        flow_label: 0,
    }
    .emit(&mut ipv6::Packet::new_unchecked(&mut f[l2..]))
    .unwrap();
    f[l2 + 40..].copy_from_slice(msg);
    f
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn neighbor_solicit_round_trip(target in unicast_v6(), ll in proptest::option::of(unicast_mac()), src in unicast_v6(), dst in v6()) {
        let r = ndp::NeighborSolicitRepr { target, source_ll: ll };
        let mut b = vec![0xa5u8; r.buffer_len()];
        r.emit(&mut b, &src, &dst).unwrap();
        prop_assert_eq!(ndp::NeighborSolicitRepr::parse(&b, &src, &dst, 255), Ok(r));
        prop_assert_eq!(ndp::NeighborSolicitRepr::parse(&b, &src, &dst, 64), Err(wire::NdpError::HopLimit));
    }

    #[test]
    fn neighbor_advert_round_trip(flags in na_flags(), target in unicast_v6(), ll in proptest::option::of(mac()), src in v6(), dst in unicast_v6()) {
        let r = ndp::NeighborAdvertRepr { flags, target, target_ll: ll };
        let mut b = vec![0xa5u8; r.buffer_len()];
        r.emit(&mut b, &src, &dst).unwrap();
        prop_assert_eq!(ndp::NeighborAdvertRepr::parse(&b, &src, &dst, 255), Ok(r));
    }

    #[test]
    fn every_valid_solicitation_gets_a_valid_advertisement(
        eth in unicast_eth(), target in unicast_v6(), src in unicast_v6(), dad in any::<bool>(),
        ll in proptest::option::of(unicast_mac()), unicast_dst in any::<bool>(), lb in mac(),
    ) {
        let (src, ll) = if dad { (Ipv6Addr::UNSPECIFIED, None) } else { (src, ll) };
        let dst = if unicast_dst && !dad { target } else { ndp::solicited_node(&target) };
        let ns = ndp::NeighborSolicitRepr { target, source_ll: ll };
        let mut m = vec![0xa5u8; ns.buffer_len()];
        ns.emit(&mut m, &src, &dst).unwrap();
        let f = nd_frame(&eth, src, dst, &m);
        let sol = ndp::parse_solicitation(&f).unwrap();
        prop_assert_eq!(sol.ns, ns);
        let mut buf = MemBuf::new([0u8; 512], 128, &f).unwrap();
        ndp::answer_solicitation(&mut buf, &sol, lb).unwrap();
        let out = buf.data();
        let e = EthernetRepr::parse(out).unwrap();
        prop_assert_eq!(&e.vlans[..usize::from(e.vlan_count)], &eth.vlans[..usize::from(eth.vlan_count)]);
        prop_assert_eq!(e.src, lb);
        prop_assert_eq!(e.ethertype, ethertype::IPV6);
        let l2 = e.header_len();
        prop_assert_eq!(out.len(), l2 + 40 + 32);
        let ip = ipv6::Packet::new_checked(&out[l2..]).unwrap();
        prop_assert_eq!(ip.src(), target);
        prop_assert_eq!(ip.hop_limit(), 255);
        let na = ndp::NeighborAdvertRepr::parse(ip.payload(), &ip.src(), &ip.dst(), 255).unwrap();
        prop_assert_eq!(na.target, target);
        prop_assert_eq!(na.target_ll, Some(lb));
        prop_assert!(!na.flags.contains(ndp::NaFlags::ROUTER));
        prop_assert!(na.flags.contains(ndp::NaFlags::OVERRIDE));
        if dad {
            prop_assert_eq!(ip.dst(), ndp::ALL_NODES);
            prop_assert_eq!(e.dst, ndp::multicast_mac(&ndp::ALL_NODES));
            prop_assert!(!na.flags.contains(ndp::NaFlags::SOLICITED));
        } else {
            prop_assert_eq!(ip.dst(), src);
            prop_assert_eq!(e.dst, ll.unwrap_or(eth.src));
            prop_assert!(na.flags.contains(ndp::NaFlags::SOLICITED));
        }
    }

    #[test]
    fn tcp_reset_answers_every_segment_per_rfc_9293(
        eth in unicast_eth(), v6 in any::<bool>(), a4 in (unicast_v4(), unicast_v4()),
        a6 in (unicast_v6(), unicast_v6()), ports in any::<(u16, u16)>(), seq in any::<u32>(),
        ack in any::<u32>(), flags in (0u16..0x200).prop_map(|f| tcp::Flags(f & !tcp::Flags::RST.0)),
        options in options40(), payload in vec(any::<u8>(), 0..100), lb in mac(), pad in 0usize..20,
    ) {
        let (src, dst): (IpAddr, IpAddr) = if v6 { (a6.0.into(), a6.1.into()) } else { (a4.0.into(), a4.1.into()) };
        let mut eth = eth;
        eth.ethertype = if v6 { ethertype::IPV6 } else { ethertype::IPV4 };
        let l2 = eth.header_len();
        let ip_len = if v6 { 40 } else { 20 };
        let t = tcp::TcpRepr { src_port: ports.0, dst_port: ports.1, seq, ack, flags, window: 9, urgent: 3, options };
        let tl = t.header_len() + payload.len();
        // Link padding after the IP packet must not count as payload.
        let mut f = vec![0u8; l2 + ip_len + tl + pad];
        eth.emit(&mut f).unwrap();
        match (src, dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => ipv4::Ipv4Repr {
                src: s, dst: d, protocol: proto::TCP, payload_len: u16::try_from(tl).unwrap(), ttl: 3, dscp_ecn: 0xb8,
                ident: 5, dont_frag: false, more_frags: false, frag_offset: 0, options: ipv4::Options::default(),
            }.emit(&mut ipv4::Packet::new_unchecked(&mut f[l2..])).unwrap(),
            (IpAddr::V6(s), IpAddr::V6(d)) => ipv6::Ipv6Repr {
                src: s, dst: d, next_header: proto::TCP, payload_len: u16::try_from(tl).unwrap(), hop_limit: 3,
                traffic_class: 0xb8, flow_label: 0x12345,
            }.emit(&mut ipv6::Packet::new_unchecked(&mut f[l2..])).unwrap(),
            _ => unreachable!(),
        }
        let l4 = l2 + ip_len;
        f[l4 + t.header_len()..l4 + tl].copy_from_slice(&payload);
        let mut p = tcp::Packet::new_unchecked(&mut f[l4..l4 + tl]);
        t.emit(&mut p).unwrap();
        p.fill_checksum(&src, &dst).unwrap();

        let mut buf = MemBuf::new([0u8; 512], 128, &f).unwrap();
        reply::tcp_reset(&mut buf, lb).unwrap();
        let out = buf.data();
        prop_assert_eq!(out.len(), l2 + ip_len + 20);
        let e = EthernetRepr::parse(out).unwrap();
        prop_assert_eq!((e.dst, e.src, e.ethertype), (eth.src, lb, eth.ethertype));
        prop_assert_eq!(&e.vlans[..usize::from(e.vlan_count)], &eth.vlans[..usize::from(eth.vlan_count)]);
        let seg = if v6 {
            let ip = ipv6::Packet::new_checked(&out[l2..]).unwrap();
            let r = ipv6::Ipv6Repr::parse(&ip).unwrap();
            prop_assert_eq!((IpAddr::V6(r.src), IpAddr::V6(r.dst)), (dst, src));
            prop_assert_eq!((r.hop_limit, r.next_header, r.payload_len), (64, proto::TCP, 20));
            &out[l2 + 40..]
        } else {
            let ip = ipv4::Packet::new_checked(&out[l2..]).unwrap();
            let r = ipv4::Ipv4Repr::parse(&ip).unwrap();
            prop_assert_eq!((IpAddr::V4(r.src), IpAddr::V4(r.dst)), (dst, src));
            prop_assert_eq!((r.ttl, r.ident, r.dont_frag, r.protocol, r.payload_len), (64, 0, true, proto::TCP, 20));
            &out[l2 + 20..]
        };
        let p = tcp::Packet::new_checked(seg).unwrap();
        prop_assert!(p.verify_checksum(&dst, &src));
        let r = tcp::TcpRepr::parse(&p).unwrap();
        prop_assert_eq!((r.src_port, r.dst_port, r.window, r.header_len()), (ports.1, ports.0, 0, 20));
        if flags.contains(tcp::Flags::ACK) {
            prop_assert_eq!((r.seq, r.ack, r.flags), (ack, 0, tcp::Flags::RST));
        } else {
            let len = u32::try_from(payload.len()).unwrap()
                + u32::from(flags.contains(tcp::Flags::SYN))
                + u32::from(flags.contains(tcp::Flags::FIN));
            prop_assert_eq!((r.seq, r.ack, r.flags), (0, seq.wrapping_add(len), tcp::Flags::RST.union(tcp::Flags::ACK)));
        }
        // The reset itself is never answered (unless from a group MAC, refused first).
        let want = if lb[0] & 1 == 0 { wire::ReplyError::Reset } else { wire::ReplyError::BadSource };
        prop_assert_eq!(reply::tcp_reset(&mut buf, [2; 6]), Err(want));
    }

    #[test]
    fn replies_never_panic_on_arbitrary_frames(b in vec(any::<u8>(), 0..200)) {
        let mut buf = MemBuf::new([0u8; 512], 128, &b).unwrap();
        if reply::tcp_reset(&mut buf, [2; 6]).is_err() {
            prop_assert_eq!(buf.data(), &b[..]);
        }
        if let Ok(sol) = ndp::parse_solicitation(&b) {
            let mut buf = MemBuf::new([0u8; 512], 128, &b).unwrap();
            prop_assert!(ndp::answer_solicitation(&mut buf, &sol, [2; 6]).is_ok());
        }
        let mut buf = MemBuf::new([0u8; 512], 128, &b).unwrap();
        if reply::too_big(&mut buf, [2; 6], 1400).is_err() {
            prop_assert_eq!(buf.data(), &b[..]);
        }
    }
}

// ------------------------------------------------------------------ too big (M48)

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Build a packet, turn it into its ICMP too-big error, parse the error back: the
    /// fields, the quoted packet and the checksums.
    #[test]
    fn too_big_quotes_the_packet_and_advertises_the_mtu(
        eth in unicast_eth(), v6 in any::<bool>(), a4 in (unicast_v4(), unicast_v4()),
        a6 in (unicast_v6(), unicast_v6()), l4 in prop_oneof![Just(proto::TCP), Just(proto::UDP)],
        df in any::<bool>(), payload_len in 0usize..9000, fill in any::<u8>(), mtu in any::<u16>(),
        lb in unicast_mac(), pad in 0usize..20,
    ) {
        let (src, dst): (IpAddr, IpAddr) = if v6 { (a6.0.into(), a6.1.into()) } else { (a4.0.into(), a4.1.into()) };
        let mut eth = eth;
        eth.ethertype = if v6 { ethertype::IPV6 } else { ethertype::IPV4 };
        let l2 = eth.header_len();
        let hl = if v6 { 40 } else { 20 };
        let mut f = vec![fill; l2 + hl + payload_len + pad];
        eth.emit(&mut f).unwrap();
        let pl = u16::try_from(payload_len).unwrap();
        match (src, dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => ipv4::Ipv4Repr {
                src: s, dst: d, protocol: l4, payload_len: pl, ttl: 3, dscp_ecn: 0xb8,
                ident: 5, dont_frag: df, more_frags: false, frag_offset: 0, options: ipv4::Options::default(),
            }.emit(&mut ipv4::Packet::new_unchecked(&mut f[l2..])).unwrap(),
            (IpAddr::V6(s), IpAddr::V6(d)) => ipv6::Ipv6Repr {
                src: s, dst: d, next_header: l4, payload_len: pl, hop_limit: 3,
                traffic_class: 0xb8, flow_label: 0x12345,
            }.emit(&mut ipv6::Packet::new_unchecked(&mut f[l2..])).unwrap(),
            _ => unreachable!(),
        }
        let ip_len = hl + payload_len;
        let mut buf = MemBuf::new(vec![0u8; 128 + f.len()], 128, &f).unwrap();
        reply::too_big(&mut buf, lb, mtu).unwrap();
        let out = buf.data();
        let e = EthernetRepr::parse(out).unwrap();
        prop_assert_eq!((e.dst, e.src, e.ethertype), (eth.src, lb, eth.ethertype));
        prop_assert_eq!(&e.vlans[..usize::from(e.vlan_count)], &eth.vlans[..usize::from(eth.vlan_count)]);
        let max = if v6 { reply::TOO_BIG_V6_MAX } else { reply::TOO_BIG_V4_MAX };
        let quoted = ip_len.min(max - hl - 8);
        prop_assert_eq!(out.len(), l2 + hl + 8 + quoted);
        let icmp = if v6 {
            let ip = ipv6::Packet::new_checked(&out[l2..]).unwrap();
            let r = ipv6::Ipv6Repr::parse(&ip).unwrap();
            prop_assert_eq!((IpAddr::V6(r.src), IpAddr::V6(r.dst)), (dst, src));
            prop_assert_eq!((r.hop_limit, r.next_header), (64, proto::ICMPV6));
            let m = icmpv6::Packet::new_checked(ip.payload()).unwrap();
            prop_assert!(m.verify_checksum(&r.src, &r.dst));
            prop_assert_eq!((m.msg_type(), m.code()), (icmpv6::msg::PACKET_TOO_BIG, 0));
            prop_assert_eq!(m.mtu(), u32::from(mtu.max(1280)));
            m.data().to_vec()
        } else {
            let ip = ipv4::Packet::new_checked(&out[l2..]).unwrap();
            prop_assert!(ip.verify_checksum());
            let r = ipv4::Ipv4Repr::parse(&ip).unwrap();
            prop_assert_eq!((IpAddr::V4(r.src), IpAddr::V4(r.dst)), (dst, src));
            prop_assert_eq!((r.ttl, r.ident, r.dont_frag, r.protocol), (64, 0, false, proto::ICMP));
            let m = icmpv4::Packet::new_checked(ip.payload()).unwrap();
            prop_assert!(m.verify_checksum());
            prop_assert!(m.is_frag_needed());
            prop_assert_eq!(m.next_hop_mtu(), mtu.max(68));
            prop_assert_eq!(m.rest() >> 16, 0);
            m.data().to_vec()
        };
        prop_assert_eq!(&icmp[..], &f[l2..l2 + quoted]);
        // An ICMP error is never answered with another.
        let again = reply::too_big(&mut buf, [2; 6], mtu);
        prop_assert!(matches!(again, Err(wire::ReplyError::IcmpError | wire::ReplyError::BadSource)), "{:?}", again);
    }
}

// ------------------------------------------------------------ neighbour resolution (M47)

mod neighbour_frames {
    use super::*;
    use wire::neighbour::{self, Sighting};

    fn unicast_mac() -> impl Strategy<Value = [u8; 6]> {
        mac().prop_filter("unicast, not zero", |m| m[0] & 1 == 0 && *m != [0; 6])
    }

    fn unicast_v6() -> impl Strategy<Value = Ipv6Addr> {
        v6().prop_filter("unicast, specified", |a| {
            !a.is_multicast() && !a.is_unspecified()
        })
    }

    proptest! {
        #[test]
        fn arp_requests_parse_back(m in unicast_mac(), spa in v4(), tpa in v4()) {
            let mut b = [0u8; 128];
            let n = neighbour::arp_request(&mut b, m, spa, tpa).unwrap();
            let eth = EthernetRepr::parse(&b[..n]).unwrap();
            prop_assert_eq!(eth.dst, neighbour::BROADCAST);
            prop_assert_eq!(eth.ethertype, ethertype::ARP);
            let a = arp::ArpRepr::parse(&arp::Packet::new_checked(&b[14..n]).unwrap()).unwrap();
            prop_assert_eq!((a.oper, a.sha, a.spa, a.tpa), (arp::op::REQUEST, m, spa, tpa));
            let want = (!spa.is_unspecified()).then_some(Sighting { ip: IpAddr::V4(spa), mac: m });
            prop_assert_eq!(neighbour::parse_sighting(&b[..n]), want);
        }

        #[test]
        fn gratuitous_arps_name_themselves(m in unicast_mac(), ip in v4()) {
            let mut b = [0u8; 64];
            let n = neighbour::gratuitous_arp(&mut b, m, ip).unwrap();
            let a = arp::ArpRepr::parse(&arp::Packet::new_checked(&b[14..n]).unwrap()).unwrap();
            prop_assert_eq!((a.spa, a.tpa, a.sha), (ip, ip, m));
        }

        #[test]
        fn solicitations_parse_back(m in unicast_mac(), src in unicast_v6(), target in unicast_v6()) {
            let mut b = [0u8; 128];
            let n = neighbour::neighbour_solicitation(&mut b, m, src, target).unwrap();
            let sol = ndp::parse_solicitation(&b[..n]).unwrap();
            prop_assert_eq!(sol.ns.target, target);
            prop_assert_eq!(sol.ns.source_ll, Some(m));
            prop_assert_eq!(sol.src, src);
            prop_assert_eq!(sol.dst, ndp::solicited_node(&target));
            prop_assert_eq!(sol.eth.dst, ndp::multicast_mac(&sol.dst));
            prop_assert_eq!(
                neighbour::parse_sighting(&b[..n]),
                Some(Sighting { ip: IpAddr::V6(src), mac: m })
            );
        }

        #[test]
        fn unsolicited_adverts_parse_back(m in unicast_mac(), target in unicast_v6()) {
            let mut b = [0u8; 128];
            let n = neighbour::unsolicited_advert(&mut b, m, target).unwrap();
            let ip = ipv6::Packet::new_checked(&b[14..n]).unwrap();
            prop_assert_eq!((ip.src(), ip.dst(), ip.hop_limit()), (target, ndp::ALL_NODES, 255));
            let na = ndp::NeighborAdvertRepr::parse(ip.payload(), &ip.src(), &ip.dst(), 255).unwrap();
            prop_assert_eq!(na.target, target);
            prop_assert_eq!(na.target_ll, Some(m));
            prop_assert_eq!(na.flags, ndp::NaFlags::OVERRIDE);
            prop_assert_eq!(
                neighbour::parse_sighting(&b[..n]),
                Some(Sighting { ip: IpAddr::V6(target), mac: m })
            );
        }

        #[test]
        fn sightings_of_arbitrary_bytes_never_panic(b in vec(any::<u8>(), 0..200)) {
            let _ = neighbour::parse_sighting(&b);
        }

        #[test]
        fn sightings_of_mutated_frames_never_panic(
            m in unicast_mac(), t in unicast_v6(), at in 0usize..86, x in any::<u8>(), cut in 0usize..=86
        ) {
            let mut b = [0u8; 128];
            let n = neighbour::unsolicited_advert(&mut b, m, t).unwrap();
            b[at] ^= x;
            if let Some(s) = neighbour::parse_sighting(&b[..cut.min(n)]) {
                prop_assert!(s.mac[0] & 1 == 0 && s.mac != [0; 6]);
            }
        }
    }
}

// ---- VRRPv3 advertisements: emit -> parse, and damaged frames never panic or pass unseen

/// An advertisement's fields: IPv4 or IPv6, 1 to 20 addresses of that family.
fn advert() -> impl Strategy<Value = ([u8; 6], IpAddr, u8, u8, u16, Vec<IpAddr>)> {
    prop_oneof![
        (v4(), vec(v4(), 1..20)).prop_map(|(s, a)| (
            IpAddr::V4(s),
            a.into_iter().map(IpAddr::V4).collect::<Vec<_>>()
        )),
        (v6(), vec(v6(), 1..10)).prop_map(|(s, a)| (
            IpAddr::V6(s),
            a.into_iter().map(IpAddr::V6).collect::<Vec<_>>()
        )),
    ]
    .prop_flat_map(|(src, addrs)| {
        (
            mac(),
            Just(src),
            any::<u8>(),
            any::<u8>(),
            0..=wire::vrrp::MAX_INTERVAL_CS,
            Just(addrs),
        )
    })
}

proptest! {
    #[test]
    fn vrrp_adverts_round_trip((m, src, vrid, priority, interval_cs, addrs) in advert()) {
        let a = wire::vrrp::AdvertRepr { mac: m, src, vrid, priority, interval_cs, addrs: &addrs };
        let mut buf = vec![0u8; a.frame_len()];
        let n = wire::vrrp::advert_frame(&mut buf, &a).unwrap();
        prop_assert_eq!(n, buf.len());
        prop_assert!(wire::vrrp::looks_like(&buf));
        let p = wire::vrrp::parse_frame(&buf).unwrap();
        prop_assert_eq!((p.mac, p.src, p.vrid, p.priority, p.interval_cs), (m, src, vrid, priority, interval_cs));
        prop_assert_eq!(p.addrs().collect::<Vec<_>>(), addrs);
    }

    /// One flipped byte past the Ethernet addresses is refused (a checksum,
    /// a length, a field check), or leaves an advertisement that says what
    /// the bytes now say; a cut frame is refused. Never a panic.
    #[test]
    fn damaged_vrrp_adverts_are_refused(
        (m, src, vrid, priority, interval_cs, addrs) in advert(),
        at in any::<prop::sample::Index>(),
        flip in 1u8..,
        cut in any::<prop::sample::Index>(),
    ) {
        let a = wire::vrrp::AdvertRepr { mac: m, src, vrid, priority, interval_cs, addrs: &addrs };
        let mut buf = vec![0u8; a.frame_len()];
        wire::vrrp::advert_frame(&mut buf, &a).unwrap();
        let short = &buf[..cut.index(buf.len())];
        prop_assert!(wire::vrrp::parse_frame(short).is_err());
        let i = 12 + at.index(buf.len() - 12);
        buf[i] ^= flip;
        if let Ok(p) = wire::vrrp::parse_frame(&buf) {
            // Only bytes no check covers may change unseen: the IPv4
            // header's DSCP/ECN and identification, the IPv6 traffic class
            // and flow label.
            let ip = i - 14;
            let uncovered = if src.is_ipv4() { matches!(ip, 1 | 4 | 5) } else { ip < 4 };
            prop_assert!(uncovered, "byte {} changed and still parsed: {:?}", i, p);
        }
    }
}
