//! Bursts: the fixed-capacity groups of packets a data-plane worker receives, processes and
//! transmits together, and the packet I/O that fills and drains them. DPDK's `MbufBurst`
//! implements [`PacketBurst`]; the data plane has an in-memory one for `replay`, tests and
//! benches.

use crate::buf::PacketBuf;

/// A fixed-capacity, ordered group of owned packets.
pub trait PacketBurst {
    /// The packet type.
    type Pkt: PacketBuf;
    /// Packets held.
    fn len(&self) -> usize;
    /// The most packets it holds.
    fn capacity(&self) -> usize;
    /// Whether it holds no packet.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The held packets, mutably (processed in place).
    fn packets_mut(&mut self) -> &mut [Self::Pkt];
    /// Adds a packet at the end, or hands it back when the burst is full.
    fn push(&mut self, pkt: Self::Pkt) -> Result<(), Self::Pkt>;
    /// Moves every packet out in order to `f(index, packet)`; empty afterwards.
    fn drain_each(&mut self, f: impl FnMut(usize, Self::Pkt));
}

/// A worker's packet I/O: one RX and one TX queue on each of its ports,
/// numbered in `[[ports]]` order. DPDK's queues implement it in the daemon
/// (`dpdk::DpdkIo`); `replay`, tests and benches have in-memory ones. It lives
/// here, beside [`PacketBurst`], so that the DPDK layer implements it without
/// depending on the data plane.
pub trait PacketIo {
    /// The burst type its queues fill and drain.
    type Burst: PacketBurst;
    /// Receives up to a burst from `port` into `burst` (empty on entry);
    /// returns how many packets arrived.
    fn rx_burst(&mut self, port: usize, burst: &mut Self::Burst) -> usize;
    /// Transmits `burst` on `port`; what the port does not take is freed.
    /// The burst is empty afterwards. Returns the number not taken.
    fn tx_burst(&mut self, port: usize, burst: &mut Self::Burst) -> usize;
    /// An empty packet buffer (with headroom) for a frame the worker builds
    /// itself to send on `port` (neighbour requests and announcements);
    /// `None` when there is none (the default: such I/O sends nothing of
    /// its own).
    fn alloc(&mut self, port: usize) -> Option<<Self::Burst as PacketBurst>::Pkt> {
        let _ = port;
        None
    }
}
