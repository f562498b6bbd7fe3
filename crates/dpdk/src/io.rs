//! DPDK queues as a worker's packet I/O ([`wire::burst::PacketIo`]): the
//! adapter the data plane's worker loop polls in the daemon. Safe code over
//! [`RxQueue`]/[`TxQueue`]; the trait lives in `wire` so that this layer does
//! not depend on the data plane.

use wire::burst::PacketIo;

use crate::mbuf::MbufBurst;
use crate::port::{RxQueue, TxQueue};

/// One worker's queue pair on each of its ports, in port order, moving
/// bursts of at most `N` mbufs.
#[derive(Debug)]
pub struct DpdkIo<'p, const N: usize> {
    queues: Vec<(RxQueue<'p>, TxQueue<'p>)>,
}

impl<'p, const N: usize> DpdkIo<'p, N> {
    /// I/O over these queue pairs; port `i` of [`PacketIo`] is `queues[i]`.
    pub fn new(queues: Vec<(RxQueue<'p>, TxQueue<'p>)>) -> Self {
        DpdkIo { queues }
    }
}

impl<const N: usize> PacketIo for DpdkIo<'_, N> {
    type Burst = MbufBurst<N>;

    #[inline]
    fn rx_burst(&mut self, port: usize, burst: &mut MbufBurst<N>) -> usize {
        self.queues
            .get_mut(port)
            .map_or(0, |(rx, _)| rx.rx_burst(burst))
    }

    fn alloc(&mut self, port: usize) -> Option<crate::Mbuf> {
        self.queues.get(port).and_then(|(rx, _)| rx.alloc())
    }

    #[inline]
    fn tx_burst(&mut self, port: usize, burst: &mut MbufBurst<N>) -> usize {
        match self.queues.get_mut(port) {
            Some((_, tx)) => tx.tx_burst_or_drop(burst).1,
            None => {
                let n = burst.len();
                burst.clear();
                n
            }
        }
    }
}
