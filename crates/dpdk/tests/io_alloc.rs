//! `DpdkIo::alloc` (M47): a worker takes a buffer from its port's RX pool
//! for a frame it builds itself (a neighbour request) and sends it through
//! the same queues. Runs without hugepages.

mod common;

use dpdk::{DpdkIo, MbufBurst, Port, PortConfig, create_vdev};
use wire::buf::PacketBuf;
use wire::burst::{PacketBurst, PacketIo};

#[test]
fn a_worker_builds_a_frame_in_a_buffer_of_its_port_and_sends_it() {
    let eal = common::eal(common::NO_HUGE_ARGS);
    let pool = common::pool(eal, 1023);
    let id = create_vdev(eal, &common::unique("net_ring_a"), "").expect("create net_ring vdev");
    let mut port = Port::configure(eal, id, &PortConfig::default(), &pool).expect("configure");
    port.start().expect("start");
    let in_use = pool.in_use();
    let queues = vec![(
        port.rx_queue(0).expect("rx queue"),
        port.tx_queue(0).expect("tx queue"),
    )];
    let mut io: DpdkIo<'_, 4> = DpdkIo::new(queues);
    assert!(io.alloc(1).is_none(), "no such port");
    let mut m = io.alloc(0).expect("a buffer");
    assert!(m.is_empty());
    let frame = common::test_frame(7);
    assert!(
        m.headroom() >= 128,
        "a neighbour frame fits in the headroom"
    );
    m.prepend(frame.len())
        .expect("room")
        .copy_from_slice(&frame);
    let mut tx = MbufBurst::<4>::new();
    tx.push(m).expect("room");
    assert_eq!(io.tx_burst(0, &mut tx), 0, "taken");
    let mut rx = MbufBurst::<4>::new();
    assert_eq!(io.rx_burst(0, &mut rx), 1, "the ring loops it back");
    assert_eq!(rx.packets_mut()[0].data(), &frame[..]);
    drop(rx);
    // A fragment (M48) is built at the tail of a fresh buffer: the room
    // behind its headroom, and no more.
    let mut f = io.alloc(0).expect("a buffer");
    let room = f.tailroom();
    assert!(room >= 1514, "a 1,500-byte frame fits: {room}");
    PacketBuf::append(&mut f, 1514).expect("tailroom").fill(7);
    assert_eq!(PacketBuf::data(&f), &[7u8; 1514][..]);
    assert_eq!(
        PacketBuf::append(&mut f, room),
        Err(wire::BufError::NoTailroom)
    );
    assert_eq!(PacketBuf::len(&f), 1514, "unchanged on error");
    assert_eq!(PacketBurst::capacity(&tx), 4);
    drop(f);
    assert_eq!(pool.in_use(), in_use, "the buffer went back to the pool");
}
