//! Criterion benches: parse + flow key, the hash, and each encapsulation (ns/packet).
//!
//! Run: `cargo bench -p wire --bench wire`
//! Every encapsulation bench includes re-loading the 78-byte inner frame into the buffer
//! (`buffer_reset` measures that alone).

#![allow(missing_docs)] // criterion_group! makes an undocumented `pub fn`
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // bench code: fail loudly

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use wire::buf::{MemBuf, PacketBuf};
use wire::encap::{
    DecapConfig, InnerIp, Outer, Template, Tunnel, UdpChecksum, decapsulate, encapsulate,
    encapsulate_with, geneve_return_rewrite, l2dsr_rewrite,
};
use wire::ethernet::{EthernetRepr, ethertype};
use wire::flow::{Affinity, FlowKey};
use wire::geneve::{GatewayOptions, OptionIds};
use wire::ip::proto;
use wire::packet::{Frame, parse_frame, parse_v4_flow};
use wire::{ipv4, ipv6, tcp};

fn frame(v6: bool) -> Vec<u8> {
    let et = if v6 { ethertype::IPV6 } else { ethertype::IPV4 };
    let ip_len = if v6 { 40 } else { 20 };
    let payload = 24usize;
    let mut f = vec![0u8; 14 + ip_len + 20 + payload];
    EthernetRepr::untagged([2, 0, 0, 0, 0, 2], [2, 0, 0, 0, 0, 1], et)
        .emit(&mut f)
        .unwrap();
    let (src, dst): (IpAddr, IpAddr) = if v6 {
        let r = ipv6::Ipv6Repr {
            src: Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x10),
            dst: Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0, 0, 0, 0, 1),
            next_header: proto::TCP,
            payload_len: u16::try_from(20 + payload).unwrap(),
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
        };
        r.emit(&mut ipv6::Packet::new_unchecked(&mut f[14..]))
            .unwrap();
        (r.src.into(), r.dst.into())
    } else {
        let r = ipv4::Ipv4Repr {
            src: Ipv4Addr::new(192, 0, 2, 10),
            dst: Ipv4Addr::new(198, 51, 100, 1),
            protocol: proto::TCP,
            payload_len: u16::try_from(20 + payload).unwrap(),
            ttl: 64,
            dscp_ecn: 0,
            ident: 1,
            dont_frag: true,
            more_frags: false,
            frag_offset: 0,
            options: ipv4::Options::default(),
        };
        r.emit(&mut ipv4::Packet::new_unchecked(&mut f[14..]))
            .unwrap();
        (r.src.into(), r.dst.into())
    };
    let l4 = 14 + ip_len;
    let t = tcp::TcpRepr {
        src_port: 40000,
        dst_port: 80,
        seq: 1,
        ack: 1,
        flags: tcp::Flags::ACK,
        window: 1000,
        urgent: 0,
        options: ipv4::Options::default(),
    };
    let mut p = tcp::Packet::new_unchecked(&mut f[l4..]);
    t.emit(&mut p).unwrap();
    p.fill_checksum(&src, &dst).unwrap();
    f
}

fn outer(v6: bool) -> Outer {
    Outer {
        src_mac: [2, 0, 0, 0, 0, 2],
        dst_mac: [2, 0, 0, 0, 0, 3],
        src_ip: if v6 {
            IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1))
        } else {
            IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1))
        },
        dst_ip: if v6 {
            IpAddr::V6(Ipv6Addr::new(0xfd00, 1, 0, 0, 0, 0, 0, 7))
        } else {
            IpAddr::V4(Ipv4Addr::new(10, 0, 1, 7))
        },
        ttl: 64,
        dont_fragment: true,
        flow_hash: 0x0123_4567_89ab_cdef,
        src_port_min: 49152,
        src_port_max: 65535,
        udp_checksum: UdpChecksum::Auto,
    }
}

fn geneve() -> Tunnel {
    Tunnel::Geneve {
        port: 6081,
        vni: 0,
        ids: OptionIds::default(),
        options: GatewayOptions {
            endpoint_id: Some(0x1122_3344_5566_7788),
            cookie: Some(0x99aa_bbcc),
        },
    }
}

fn benches(c: &mut Criterion) {
    let f4 = frame(false);
    let f6 = frame(true);

    let mut g = c.benchmark_group("parse");
    g.throughput(Throughput::Elements(1));
    for (name, f) in [("ipv4_tcp", &f4), ("ipv6_tcp", &f6)] {
        g.bench_function(format!("parse_frame+flow_key+hash/{name}"), |b| {
            b.iter(|| match parse_frame(black_box(f)) {
                Ok(Frame::Ip(_, info)) => FlowKey::from_packet(&info, Affinity::None).hash64(),
                _ => 0,
            })
        });
    }
    // The data plane's fast path for the same IPv4 frame.
    g.bench_function("parse_v4_flow+pack_v4+hash/ipv4_tcp", |b| {
        b.iter(|| match parse_v4_flow(black_box(&f4)) {
            Some(f) => wire::flow::hash_words(
                &FlowKey::pack_v4(
                    f.src,
                    f.dst,
                    f.proto,
                    (f.src_port, f.dst_port),
                    Affinity::None,
                ),
                0,
            ),
            None => 0,
        })
    });
    let key = FlowKey::five([7; 16], [9; 16], 6, 1234, 80);
    g.bench_function("hash64", |b| b.iter(|| black_box(&key).hash64()));
    g.bench_function("symmetric+hash64", |b| {
        b.iter(|| black_box(&key).symmetric().hash64())
    });
    g.finish();

    let mut g = c.benchmark_group("encap");
    g.throughput(Throughput::Elements(1));
    let mut buf = MemBuf::new([0u8; 2048], 128, &f4).unwrap();
    g.bench_function("buffer_reset", |b| {
        b.iter(|| buf.reset(128, black_box(&f4)).unwrap())
    });
    let gre = Tunnel::Gre {
        key: Some(0xfeed_beef),
    };
    let gue = Tunnel::Gue { port: 6080 };
    let cases: [(&str, &[u8], bool, Tunnel); 7] = [
        ("ipip_4in4", &f4, false, Tunnel::IpIp),
        ("ipip_6in6", &f6, true, Tunnel::IpIp),
        ("gre_key_4in4", &f4, false, gre),
        ("gue_4in4", &f4, false, gue),
        ("gue_6in6_udp_csum", &f6, true, gue),
        ("geneve_4in4", &f4, false, geneve()),
        ("geneve_6in6_udp_csum", &f6, true, geneve()),
    ];
    for (name, f, v6, t) in cases {
        let o = outer(v6);
        g.bench_function(name, |b| {
            b.iter(|| {
                buf.reset(128, f).unwrap();
                encapsulate(&mut buf, black_box(&o), black_box(&t)).unwrap()
            })
        });
    }
    // Per-backend templates (IPv4 outer headers), as the data plane delivers.
    let inner4 = InnerIp::of(&f4).unwrap();
    for (name, t) in [
        ("template/ipip_4in4", Tunnel::IpIp),
        ("template/gre_key_4in4", gre),
        ("template/gue_4in4", gue),
        ("template/geneve_4in4", geneve()),
    ] {
        let tmpl = Template::new(&outer(false), &t).unwrap();
        g.bench_function(name, |b| {
            b.iter(|| {
                buf.reset(128, &f4).unwrap();
                encapsulate_with(&mut buf, black_box(&tmpl), &inner4, black_box(7), 9).unwrap()
            })
        });
    }
    let mut l2 = f4.clone();
    g.bench_function("l2dsr", |b| {
        b.iter(|| l2dsr_rewrite(black_box(&mut l2), [2, 0, 0, 0, 0, 3], [2, 0, 0, 0, 0, 2]))
    });
    g.finish();

    let mut g = c.benchmark_group("decap");
    g.throughput(Throughput::Elements(1));
    let cfg = DecapConfig::default();
    for (name, f, v6, t) in [
        ("gue_4in4", &f4, false, gue),
        ("geneve_4in4", &f4, false, geneve()),
        ("geneve_6in6_udp_csum", &f6, true, geneve()),
    ] {
        let mut tmp = MemBuf::new([0u8; 2048], 128, f).unwrap();
        encapsulate(&mut tmp, &outer(v6), &t).unwrap();
        let enc = tmp.data().to_vec();
        let l2 = f[..14].to_vec();
        g.bench_function(name, |b| {
            b.iter(|| {
                buf.reset(128, &enc).unwrap();
                decapsulate(&mut buf, black_box(&cfg), &l2).unwrap()
            })
        });
        if matches!(t, Tunnel::Geneve { .. }) {
            g.bench_function(format!("geneve_return_rewrite/{name}"), |b| {
                let mut e = enc.clone();
                b.iter(|| geneve_return_rewrite(black_box(&mut e), &cfg, None).unwrap())
            });
        }
    }
    g.finish();
}

criterion_group!(wire_benches, benches);
criterion_main!(wire_benches);
