//! `wire`'s in-place encapsulation running on real DPDK mbufs (through the
//! `PacketBuf` impl): every delivery mode is encapsulated into the mbuf's
//! headroom, sent through a net_ring device, received, decapsulated, and must
//! give back the original frame byte for byte — without leaking an mbuf.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

mod common;

use std::net::IpAddr;

use dpdk::{MBUF_HEADROOM, MbufBurst, Port, PortConfig, create_vdev};
use wire::buf::PacketBuf;
use wire::encap::{DecapConfig, Outer, Tunnel, UdpChecksum, decapsulate, encapsulate};
use wire::geneve::{GatewayOptions, OptionIds};

fn outer(v6: bool, hash: u64) -> Outer {
    let (src_ip, dst_ip): (IpAddr, IpAddr) = if v6 {
        (
            "fd00::2".parse().expect("v6"),
            "fd00::11".parse().expect("v6"),
        )
    } else {
        (
            "198.18.1.2".parse().expect("v4"),
            "198.18.1.11".parse().expect("v4"),
        )
    };
    Outer {
        src_mac: [0x02, 0, 0, 0, 0, 0x10],
        dst_mac: [0x02, 0, 0, 0, 0, 0x11],
        src_ip,
        dst_ip,
        ttl: 64,
        dont_fragment: true,
        flow_hash: hash,
        src_port_min: 49152,
        src_port_max: 65535,
        udp_checksum: UdpChecksum::Auto,
    }
}

#[test]
fn every_delivery_mode_round_trips_on_mbufs_through_a_device() {
    let eal = common::eal(common::best_args());
    let pool = common::pool(eal, 1023);
    let start = pool.in_use();
    let id = create_vdev(eal, &common::unique("net_ring_e"), "").expect("net_ring");
    let mut port = Port::configure(eal, id, &PortConfig::default(), &pool).expect("configure");
    port.start().expect("start");
    let mut rxq = port.rx_queue(0).expect("rxq");
    let mut txq = port.tx_queue(0).expect("txq");

    let tunnels = [
        Tunnel::IpIp,
        Tunnel::Gre { key: None },
        Tunnel::Gre {
            key: Some(0xdead_beef),
        },
        Tunnel::Gue { port: 6080 },
        Tunnel::Geneve {
            port: 6081,
            vni: 0,
            ids: OptionIds::default(),
            options: GatewayOptions {
                endpoint_id: Some(0x0102_0304_0506_0708),
                cookie: Some(0xc0ff_ee00),
            },
        },
    ];
    let decap = DecapConfig {
        gue_port: Some(6080),
        ..DecapConfig::default()
    };
    let mut cases = 0;
    for (t, tunnel) in tunnels.iter().enumerate() {
        for v6 in [false, true] {
            let frame = common::test_frame(t * 2 + usize::from(v6));
            let mut m = pool.alloc().expect("alloc");
            m.set_data(&frame).expect("fits");
            let added = encapsulate(&mut m, &outer(v6, 0x1234_5678_9abc_def0 ^ t as u64), tunnel)
                .unwrap_or_else(|e| panic!("{tunnel:?} v6={v6}: {e}"));
            assert!(
                added > 0 && m.headroom() < MBUF_HEADROOM,
                "{tunnel:?}: headers went into the headroom"
            );
            let mut tx = MbufBurst::<1>::new();
            tx.push(m).expect("room");
            assert_eq!(txq.tx_burst(&mut tx), 1);

            let mut rx = MbufBurst::<1>::new();
            while rx.is_empty() {
                rxq.rx_burst(&mut rx);
            }
            let mut m = rx.pop().expect("one frame");
            let info = decapsulate(&mut m, &decap, &frame[..14])
                .unwrap_or_else(|e| panic!("{tunnel:?} v6={v6}: {e}"));
            assert!(!info.inner_v6, "the test frames are IPv4 inside");
            assert_eq!(
                PacketBuf::data(&m),
                frame.as_slice(),
                "{tunnel:?} v6={v6}: original frame back"
            );
            cases += 1;
        }
    }
    assert_eq!(cases, 10);
    drop((rxq, txq));
    drop(port);
    assert_eq!(pool.in_use(), start, "no mbuf leaked");
}

#[test]
fn encapsulation_beyond_the_headroom_is_refused_without_damage() {
    let eal = common::eal(common::best_args());
    let pool = common::pool(eal, 63);
    let frame = common::test_frame(1);
    let mut m = pool.alloc().expect("alloc");
    m.set_data(&frame).expect("fits");
    // Move the frame 118 bytes forward so that only 10 bytes of headroom
    // remain: grow at the front, copy the frame there, cut the old tail.
    let shift = m.headroom() - 10;
    m.prepend(shift).expect("grow at the front");
    m.data_mut()[..frame.len()].copy_from_slice(&frame);
    m.trim(shift).expect("cut the tail");
    assert_eq!((m.headroom(), PacketBuf::data(&m)), (10, frame.as_slice()));
    let before = PacketBuf::data(&m).to_vec();
    let r = encapsulate(&mut m, &outer(false, 1), &Tunnel::Gue { port: 6080 });
    assert!(
        r.is_err(),
        "a GUE header does not fit in 10 bytes of headroom"
    );
    assert_eq!(
        PacketBuf::data(&m),
        before.as_slice(),
        "the packet is untouched"
    );
}

#[test]
fn ethernet_padding_is_dropped_and_the_mbuf_lengths_agree() {
    // A short frame padded to Ethernet's minimum: the encapsulation keeps the
    // IP packet only, in one update of the mbuf's lengths (`reframe`), and
    // must give the bytes the in-memory buffer gives.
    let eal = common::eal(common::best_args());
    let pool = common::pool(eal, 63);
    let start = pool.in_use();
    let frame = common::test_frame(3);
    let mut padded = frame.clone();
    padded.extend_from_slice(&[0xee; 9]);
    for tunnel in [Tunnel::IpIp, Tunnel::Gue { port: 6080 }] {
        let mut m = pool.alloc().expect("alloc");
        m.set_data(&padded).expect("fits");
        let mut mem = wire::buf::MemBuf::new([0u8; 512], MBUF_HEADROOM, &padded).expect("fits");
        let a = encapsulate(&mut m, &outer(false, 7), &tunnel).expect("mbuf");
        let b = encapsulate(&mut mem, &outer(false, 7), &tunnel).expect("memory");
        assert_eq!(a, b);
        assert_eq!(PacketBuf::data(&m), mem.data(), "{tunnel:?}");
        assert_eq!(m.pkt_len(), PacketBuf::data(&m).len());
        assert_eq!(
            m.pkt_len(),
            a + frame.len() - 14,
            "{tunnel:?}: no padding left"
        );
    }
    assert_eq!(pool.in_use(), start, "no mbuf leaked");
}
