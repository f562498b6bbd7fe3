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
}
