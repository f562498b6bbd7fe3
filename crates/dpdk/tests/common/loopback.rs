//! The net_ring loopback checks, shared by the hugepage and no-hugepage
//! test binaries.

#![allow(clippy::cast_possible_truncation)] // test values are small
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

use dpdk::{Eal, MBUF_HEADROOM, MbufBurst, MbufError, Port, PortConfig, create_vdev};

use crate::common::{assert_frame_builder_matches_scapy, pool, test_frame, unique};

fn ring_port(eal: &Eal, pool: &dpdk::Mempool) -> Port {
    let name = unique("net_ring_t");
    let id = create_vdev(eal, &name, "").expect("create net_ring vdev");
    let mut port = Port::configure(eal, id, &PortConfig::default(), pool).expect("configure port");
    port.start().expect("start port");
    assert!(port.link().up, "net_ring link is up once started");
    port
}

/// A burst of crafted Ethernet/IPv4/UDP frames sent on a net_ring port comes
/// back byte-identical and in order, and every mbuf returns to the pool.
pub fn burst_round_trip(eal: &Eal) {
    assert_frame_builder_matches_scapy();
    let pool = pool(eal, 1023);
    let start = pool.in_use();
    let port = ring_port(eal, &pool);
    let mut rxq = port.rx_queue(0).expect("rx queue 0");
    let mut txq = port.tx_queue(0).expect("tx queue 0");
    assert!(port.rx_queue(0).is_none(), "a queue is handed out once");

    let frames: Vec<Vec<u8>> = (0..32).map(test_frame).collect();
    let mut tx = MbufBurst::<32>::new();
    for f in &frames {
        let mut m = pool.alloc().expect("alloc mbuf");
        m.set_data(f).expect("frame fits");
        tx.push(m).expect("burst has room");
    }
    assert!(tx.is_full());
    assert_eq!(pool.in_use(), start + 32);
    assert_eq!(txq.tx_burst(&mut tx), 32, "the ring takes the whole burst");
    assert!(tx.is_empty(), "sent mbufs leave the burst");
    assert_eq!(pool.in_use(), start + 32, "the ring now holds them");

    let mut rx = MbufBurst::<64>::new();
    for _ in 0..1000 {
        if rx.len() >= 32 {
            break;
        }
        rxq.rx_burst(&mut rx);
    }
    assert_eq!(rx.len(), 32, "every frame comes back");
    for (i, (m, f)) in rx.as_slice().iter().zip(&frames).enumerate() {
        assert_eq!(m.data(), f.as_slice(), "frame {i} is byte-identical");
        assert_eq!(m.pkt_len(), f.len());
        assert!(m.is_contiguous());
    }
    let stats = port.stats().expect("stats");
    assert_eq!((stats.tx_packets, stats.rx_packets), (32, 32));
    let xstats = port.xstats().expect("xstats");
    assert!(
        xstats
            .iter()
            .any(|(n, v)| n == "rx_good_packets" && *v == 32),
        "xstats carry rx_good_packets=32: {xstats:?}"
    );
    drop(rx);
    assert_eq!(pool.in_use(), start, "no mbuf leaked");
    drop((rxq, txq));
    drop(port);
    assert_eq!(pool.in_use(), start);
}

/// When the device cannot take a whole burst, the untaken mbufs stay with the
/// caller and are freed, never leaked.
pub fn tx_overflow_does_not_leak(eal: &Eal) {
    let pool = pool(eal, 4095);
    let start = pool.in_use();
    let port = ring_port(eal, &pool);
    let mut rxq = port.rx_queue(0).expect("rx queue 0");
    let mut txq = port.tx_queue(0).expect("tx queue 0");

    let (mut offered, mut sent, mut dropped) = (0usize, 0usize, 0usize);
    for _ in 0..40 {
        let mut tx = MbufBurst::<32>::new();
        while !tx.is_full() {
            let mut m = pool.alloc().expect("alloc mbuf");
            m.set_data(&test_frame(offered)).expect("frame fits");
            tx.push(m).expect("room");
            offered += 1;
        }
        let (s, d) = txq.tx_burst_or_drop(&mut tx);
        assert!(tx.is_empty());
        sent += s;
        dropped += d;
    }
    assert_eq!(offered, 40 * 32);
    assert!(
        dropped > 0,
        "a 1280-packet flood overflows the ring ({sent} sent)"
    );
    assert_eq!(sent + dropped, offered);
    assert_eq!(
        pool.in_use(),
        start + sent as u32,
        "only the sent mbufs are out"
    );

    let mut received = 0;
    let mut rx = MbufBurst::<32>::new();
    while rxq.rx_burst(&mut rx) > 0 {
        // Frames come back in the order sent, starting with frame 0.
        assert_eq!(rx.as_slice()[0].data(), test_frame(received).as_slice());
        received += rx.len();
        rx.clear();
    }
    assert_eq!(received, sent);
    assert_eq!(pool.in_use(), start, "no mbuf leaked");
}

/// Headroom, prepend/adj/append/trim on a real mbuf, with refusals that leave
/// the packet unchanged.
pub fn mbuf_length_operations(eal: &Eal) {
    let pool = pool(eal, 63);
    let start = pool.in_use();
    let frame = test_frame(3);
    let mut m = pool.alloc().expect("alloc");
    m.set_data(&frame).expect("fits");
    assert_eq!(m.headroom(), MBUF_HEADROOM);
    assert_eq!(MBUF_HEADROOM, 128);

    m.prepend(36)
        .expect("room for a GUE header")
        .copy_from_slice(&[0xab; 36]);
    assert_eq!(m.headroom(), MBUF_HEADROOM - 36);
    assert_eq!(&m.data()[..36], &[0xab; 36]);
    assert_eq!(&m.data()[36..], frame.as_slice());
    let have = m.headroom();
    assert_eq!(
        m.prepend(have + 1).unwrap_err(),
        MbufError::NoHeadroom {
            need: have + 1,
            have
        }
    );
    assert_eq!(
        &m.data()[36..],
        frame.as_slice(),
        "a refused prepend changes nothing"
    );

    m.adj(36).expect("strip the header again");
    assert_eq!(m.data(), frame.as_slice());
    assert!(matches!(
        m.adj(frame.len() + 1),
        Err(MbufError::TooShort { .. })
    ));

    let tail = m.tailroom();
    m.append(4).expect("tailroom").copy_from_slice(b"FCS!");
    assert_eq!(m.tailroom(), tail - 4);
    assert_eq!(&m.data()[frame.len()..], b"FCS!");
    m.trim(4).expect("trim");
    assert_eq!(m.data(), frame.as_slice());
    assert!(matches!(
        m.append(tail + 1),
        Err(MbufError::NoTailroom { .. })
    ));

    m.data_mut()[0] = 0xff;
    assert_eq!(m.data()[0], 0xff);
    assert_eq!(pool.in_use(), start + 1);
    drop(m);
    assert_eq!(pool.in_use(), start);
}

/// A flow table built through [`dpdk::HugeBlock`]: in DPDK's heap when the EAL has
/// hugepages (`huge`), else on the process heap; it works the same either way.
pub fn flow_table_memory(eal: &'static dpdk::Eal, huge: bool) {
    use flowtable::{Config, EntryFlags, FlowKey, FlowTable, InsertOutcome, NewEntry, ProtoClass};
    let provider = |bytes: usize, align: usize| {
        dpdk::HugeBlock::alloc(eal, bytes, align)
            .map(|b| Box::new(b) as Box<dyn flowtable::TableMemory>)
    };
    assert_eq!(dpdk::HugeBlock::alloc(eal, 4096, 64).is_some(), huge);
    // Refused, not rounded: an alignment that is not a power of two.
    assert!(dpdk::HugeBlock::alloc(eal, 4096, 48).is_none());
    let t = FlowTable::new_in(Config::with_capacity(100_000), &provider).unwrap();
    assert_eq!(t.memory(), if huge { "DPDK hugepages" } else { "heap" });
    let key = |i: u64| FlowKey([i, !i, 1, 2, 6]);
    let hash = |i: u64| i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    for i in 0..20_000u64 {
        let e = NewEntry {
            backend: i as u32,
            generation: 1,
            cookie: 0,
            flags: EntryFlags::new(ProtoClass::Tcp),
        };
        assert!(matches!(
            t.insert(&key(i), hash(i), e, 1),
            InsertOutcome::Inserted { .. }
        ));
    }
    for i in 0..20_000u64 {
        assert_eq!(
            t.lookup(&key(i), hash(i)).map(|h| h.entry.backend),
            Some(i as u32)
        );
    }
    // Dropped and built again: the block went back to DPDK's heap and is given again.
    drop(t);
    let t = FlowTable::new_in(Config::with_capacity(100_000), &provider).unwrap();
    assert_eq!(t.memory(), if huge { "DPDK hugepages" } else { "heap" });
}
