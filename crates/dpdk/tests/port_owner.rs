//! One `Port` owns a device: configuring a port that a live `Port` owns
//! fails (two owners could reconfigure, stop, close or poll it under each
//! other), and the device is free again once its owner is dropped or its
//! configuration failed. Runs without hugepages.

mod common;

use dpdk::{MbufBurst, Port, PortConfig, PortError, create_vdev};

#[test]
fn a_port_that_is_owned_cannot_be_configured_again() {
    let eal = common::eal(common::NO_HUGE_ARGS);
    let pool = common::pool(eal, 1023);
    let name = common::unique("net_ring_o");
    let id = create_vdev(eal, &name, "").expect("create net_ring vdev");

    let mut first = Port::configure(eal, id, &PortConfig::default(), &pool).expect("configure");
    let second_owner = |when: &str| match Port::configure(eal, id, &PortConfig::default(), &pool) {
        Err(e @ PortError::InUse { .. }) => {
            let msg = e.to_string();
            assert!(
                msg.contains(&name) && msg.contains("already configured"),
                "{msg}"
            );
        }
        Err(e) => panic!("{when}: a second configure must say the port is in use, not: {e}"),
        Ok(second) => panic!("{when}: a second owner of {id}: {second:?}"),
    };
    // Configured, not started yet (DPDK itself would reconfigure it), and
    // started.
    second_owner("before start");
    first.start().expect("start");
    second_owner("started");
    // The refused attempts left the first owner's port alone: started,
    // still moving frames.
    let mut tx = MbufBurst::<4>::new();
    let mut m = pool.alloc().expect("alloc");
    m.set_data(&common::test_frame(1)).expect("frame");
    tx.push(m).expect("room");
    let mut txq = first.tx_queue(0).expect("tx queue");
    let mut rxq = first.rx_queue(0).expect("rx queue");
    assert_eq!(txq.tx_burst(&mut tx), 1);
    let mut rx = MbufBurst::<4>::new();
    assert_eq!(rxq.rx_burst(&mut rx), 1, "the ring loops the frame back");
    assert!(first.link().up);
    drop((txq, rxq, rx));

    // Dropping the owner closes the device and frees its id: a new device
    // that gets the same id can be configured.
    drop(first);
    let again = create_vdev(eal, &common::unique("net_ring_o"), "").expect("create");
    assert_eq!(again, id, "DPDK hands out the lowest free port id");
    let port = Port::configure(eal, again, &PortConfig::default(), &pool)
        .expect("configure the id a dropped Port owned");
    drop(port);
}

#[test]
fn a_failed_configure_leaves_the_port_free() {
    let eal = common::eal(common::NO_HUGE_ARGS);
    let pool = common::pool(eal, 1023);
    let id = create_vdev(eal, &common::unique("net_ring_o"), "").expect("create");
    let too_many = PortConfig {
        rx_queues: 1024,
        ..PortConfig::default()
    };
    match Port::configure(eal, id, &too_many, &pool) {
        Err(PortError::TooManyQueues { .. }) => {}
        other => panic!("1024 RX queues on net_ring: {other:?}"),
    }
    let mut port = Port::configure(eal, id, &PortConfig::default(), &pool)
        .expect("configure after a failed attempt");
    port.start().expect("start");
}
