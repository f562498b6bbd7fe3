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
