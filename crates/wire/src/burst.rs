//! Bursts: the fixed-capacity groups of packets a data-plane worker receives, processes and
//! transmits together. DPDK's `MbufBurst` implements [`PacketBurst`]; the data plane has an
//! in-memory one for `replay`, tests and benches.

use crate::buf::PacketBuf;

/// A fixed-capacity, ordered group of owned packets.
pub trait PacketBurst {
    /// The packet type.
    type Pkt: PacketBuf;
    /// Packets held.
    fn len(&self) -> usize;
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
