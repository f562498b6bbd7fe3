//! net_ring loopback without hugepages (`--no-huge`), as on machines where
//! none can be reserved.

mod common;

#[path = "common/loopback.rs"]
mod loopback;

fn eal() -> &'static dpdk::Eal {
    common::eal(common::NO_HUGE_ARGS)
}

#[test]
fn no_huge_burst_round_trip_is_byte_identical_without_leaks() {
    loopback::burst_round_trip(eal());
}

#[test]
fn no_huge_tx_overflow_frees_untaken_mbufs() {
    loopback::tx_overflow_does_not_leak(eal());
}

#[test]
fn no_huge_mbuf_length_operations() {
    loopback::mbuf_length_operations(eal());
}

#[test]
fn eal_init_runs_once_per_process() {
    let eal = eal();
    assert!(eal.args().iter().any(|a| a == "--no-huge"));
    match dpdk::Eal::init(["-l", "0"]) {
        Err(dpdk::EalError::AlreadyInitialized) => {}
        other => panic!("second init must be refused, got {other:?}"),
    }
}

#[test]
fn worker_threads_register_as_lcores_and_read_the_tsc() {
    let eal = eal();
    let hz = dpdk::tsc_hz(eal);
    assert!(hz > 1_000_000, "TSC runs at more than 1 MHz: {hz}");
    let ids = std::thread::scope(|s| {
        let workers: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| {
                    assert_eq!(dpdk::lcore_id(), None, "a new thread is unknown to DPDK");
                    let id = dpdk::thread_register(eal).expect("register");
                    assert_eq!(dpdk::lcore_id(), Some(id));
                    assert_eq!(dpdk::thread_register(eal).expect("again"), id, "idempotent");
                    let (a, b) = (dpdk::tsc(), dpdk::tsc());
                    assert!(b >= a, "the TSC does not run backwards");
                    id
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("worker"))
            .collect::<Vec<_>>()
    });
    assert_ne!(ids[0], ids[1], "each worker gets its own lcore id");
    assert!(ids.iter().all(|&id| id != 0));
}

/// `check-config`'s memory estimate counts the packet pool at
/// `config::memory::MBUF_BYTES` an mbuf: what DPDK lays out for the pool
/// `spillway run` creates (`MempoolConfig::new`).
#[test]
fn an_mbuf_takes_what_the_memory_estimate_counts() {
    let pool = common::pool(eal(), 1023);
    assert_eq!(pool.object_bytes() as u64, config::memory::MBUF_BYTES);
    // Jumbo ports (M48): a larger data room, and what DPDK pads it to.
    for mtu in [1500u16, 4000, 9000, 9216] {
        let data_room = config::memory::data_room(mtu);
        let cfg = dpdk::MempoolConfig {
            data_room,
            ..dpdk::MempoolConfig::new(common::unique("tj"), 63)
        };
        let pool = dpdk::Mempool::new(eal(), &cfg).expect("pool");
        assert_eq!(
            pool.object_bytes() as u64,
            config::memory::mbuf_bytes(data_room),
            "MTU {mtu}"
        );
        let m = pool.alloc().expect("an mbuf");
        assert!(
            m.tailroom() >= 18 + usize::from(mtu),
            "a whole frame of MTU {mtu} fits one segment behind the headroom"
        );
    }
}

/// M48: a port takes an MTU within its device's range (net_ring sets none:
/// `ENOTSUP` is logged, not an error); one outside it is refused with an
/// error naming the port and the range.
#[test]
fn a_port_takes_an_mtu_in_its_range_and_refuses_one_outside() {
    let eal = eal();
    let pool = common::pool(eal, 1023);
    let id = dpdk::create_vdev(eal, &common::unique("net_ring_m"), "").expect("vdev");
    let cfg = |mtu| dpdk::PortConfig {
        mtu: Some(mtu),
        ..dpdk::PortConfig::default()
    };
    let Err(err) = dpdk::Port::configure(eal, id, &cfg(10), &pool) else {
        panic!("MTU 10 is below every device's minimum");
    };
    let text = err.to_string();
    assert!(
        matches!(err, dpdk::PortError::MtuRange { mtu: 10, .. }),
        "{text}"
    );
    assert!(
        text.contains(&id.to_string()) && text.contains("MTU 10"),
        "{text}"
    );
    println!("{text}");
    let mut port = dpdk::Port::configure(eal, id, &cfg(9000), &pool).expect("MTU 9000");
    port.start().expect("start");
    println!("net_ring MTU after asking for 9000: {:?}", port.mtu());
}

#[test]
fn no_huge_leaves_the_flow_table_on_the_heap() {
    loopback::flow_table_memory(eal(), false);
}
