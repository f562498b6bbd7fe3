//! net_ring loopback with hugepage-backed memory (`--in-memory`).
//! Needs free hugepages: scripts/setup.sh reserves them.

mod common;

#[path = "common/loopback.rs"]
mod loopback;

fn eal() -> &'static dpdk::Eal {
    let free = common::free_hugepages();
    assert!(
        free >= 64,
        "{free} free 2 MB hugepages; run scripts/setup.sh (or skip this test with --no-huge)"
    );
    common::eal(common::HUGEPAGE_ARGS)
}

#[test]
fn hugepages_burst_round_trip_is_byte_identical_without_leaks() {
    loopback::burst_round_trip(eal());
}

#[test]
fn hugepages_tx_overflow_frees_untaken_mbufs() {
    loopback::tx_overflow_does_not_leak(eal());
}

#[test]
fn hugepages_mbuf_length_operations() {
    loopback::mbuf_length_operations(eal());
}

#[test]
fn hugepages_hold_the_flow_table() {
    loopback::flow_table_memory(eal(), true);
}
