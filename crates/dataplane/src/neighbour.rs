//! The data plane's part of neighbour resolution (M47): workers own the
//! ports, the management core owns the neighbour table. Two bounded
//! lock-free queues join them ([`NeighbourQueues`], in
//! [`crate::worker::Shared`]):
//!
//! - **sightings**: ARP and NDP frames arriving on a data port give an
//!   (address, MAC) pair (`wire::neighbour::parse_sighting`); the worker
//!   pushes it with its port. A full queue loses the sighting (counted),
//!   never waits. The frame itself goes where it went before (replies to
//!   us also to the host, so the kernel learns too).
//! - **outbox**: requests and announcements the management core built, as
//!   small fixed-size frames; each worker pass pops a few and sends them on
//!   their port in buffers from [`PacketIo::alloc`].
//!
//! - **vrrp**: VRRP advertisements arriving on a data port, copied whole
//!   for the management core's VRRP groups (which parse and check them);
//!   the frame itself goes to the host like other control traffic. A full
//!   queue loses the copy (counted).
//!
//! Only ARP/NDP and VRRP frames (never the fast path) are looked at here.

use std::net::IpAddr;
use std::sync::atomic::AtomicU64;

use crossbeam::queue::ArrayQueue;
use wire::buf::PacketBuf;
use wire::burst::{PacketBurst, PacketIo};
use wire::ethernet::MacAddr;

use crate::counters::WorkerCounters;

/// Largest frame the outbox and the VRRP queue carry: a VRRP advertisement
/// of as many VIPs as validation lets a group have; ARP and NDP frames are
/// far shorter.
pub const FRAME_MAX: usize = wire::vrrp::FRAME_MAX;
/// VRRP advertisements queued at most (groups advertise every 100 ms at
/// the fastest; a flood beyond this is lost and counted).
pub const VRRP_QUEUE: usize = 64;
/// Sightings queued at most (a few bursts' worth).
pub const SIGHTINGS: usize = 1024;
/// Frames queued at most for the workers to send.
pub const OUTBOX: usize = 1024;
/// Frames one worker sends per pass at most: the management core's
/// requests never crowd out forwarding.
pub const SEND_PER_PASS: usize = 4;

/// A neighbour seen on a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sighting {
    /// The port it was seen on (index in `[[ports]]`).
    pub port: u16,
    /// Its address.
    pub ip: IpAddr,
    /// Its MAC.
    pub mac: MacAddr,
}

/// A frame to send on a port.
#[derive(Debug, Clone, Copy)]
pub struct OutFrame {
    /// The port (index in `[[ports]]`).
    pub port: u16,
    len: u16,
    data: [u8; FRAME_MAX],
}

impl OutFrame {
    /// `frame` for `port`, if it fits ([`FRAME_MAX`]).
    pub fn new(port: usize, frame: &[u8]) -> Option<OutFrame> {
        let mut data = [0u8; FRAME_MAX];
        data.get_mut(..frame.len())?.copy_from_slice(frame);
        Some(OutFrame {
            port: u16::try_from(port).ok()?,
            len: u16::try_from(frame.len()).ok()?,
            data,
        })
    }

    /// The frame's bytes.
    pub fn bytes(&self) -> &[u8] {
        self.data.get(..usize::from(self.len)).unwrap_or(&[])
    }
}

/// The two queues between workers and the management core.
#[derive(Debug)]
pub struct NeighbourQueues {
    /// From workers: what ARP/NDP frames showed.
    pub sightings: ArrayQueue<Sighting>,
    /// To workers: frames to send.
    pub outbox: ArrayQueue<OutFrame>,
    /// Frames the management core could not queue (a full outbox), counted
    /// with the workers' failed sends (`nbr_send_failed`).
    pub outbox_lost: AtomicU64,
    /// From workers: VRRP advertisements received, with their port.
    pub vrrp: ArrayQueue<OutFrame>,
}

impl Default for NeighbourQueues {
    fn default() -> Self {
        NeighbourQueues {
            sightings: ArrayQueue::new(SIGHTINGS),
            outbox: ArrayQueue::new(OUTBOX),
            outbox_lost: AtomicU64::new(0),
            vrrp: ArrayQueue::new(VRRP_QUEUE),
        }
    }
}

impl NeighbourQueues {
    /// Records what `frame`, received on `port`, says about a neighbour.
    /// Never waits: a full queue is counted.
    #[inline]
    pub fn observe(&self, port: usize, frame: &[u8], counters: &mut WorkerCounters) {
        let Some(s) = wire::neighbour::parse_sighting(frame) else {
            return;
        };
        let Ok(port) = u16::try_from(port) else {
            return;
        };
        let s = Sighting {
            port,
            ip: s.ip,
            mac: s.mac,
        };
        match self.sightings.push(s) {
            Ok(()) => counters.nbr_sightings += 1,
            Err(_) => counters.nbr_sightings_lost += 1,
        }
    }

    /// Hands a copy of the VRRP advertisement `frame`, received on `port`,
    /// to the management core. Never waits: a full queue, or a frame longer
    /// than [`FRAME_MAX`] (more VIPs than a group may have), is counted
    /// lost.
    pub fn observe_vrrp(&self, port: usize, frame: &[u8], counters: &mut WorkerCounters) {
        let taken = OutFrame::new(port, frame).is_some_and(|f| self.vrrp.push(f).is_ok());
        if taken {
            counters.vrrp_frames += 1;
        } else {
            counters.vrrp_frames_lost += 1;
        }
    }

    /// Sends up to [`SEND_PER_PASS`] frames of the outbox, each on its
    /// port through `tx` (an empty burst, empty again afterwards).
    pub fn send<I: PacketIo>(
        &self,
        io: &mut I,
        tx: &mut I::Burst,
        ports: usize,
        counters: &mut WorkerCounters,
    ) {
        for _ in 0..SEND_PER_PASS {
            let Some(f) = self.outbox.pop() else {
                return;
            };
            let port = usize::from(f.port);
            let Some(mut pkt) = io.alloc(port).filter(|_| port < ports) else {
                counters.nbr_send_failed += 1;
                continue;
            };
            // A fresh buffer is empty: the frame goes into its headroom.
            let bytes = f.bytes();
            match pkt.prepend(bytes.len()) {
                Ok(d) => d.copy_from_slice(bytes),
                Err(_) => {
                    counters.nbr_send_failed += 1;
                    continue;
                }
            }
            if tx.push(pkt).is_err() {
                counters.nbr_send_failed += 1;
                continue;
            }
            match io.tx_burst(port, tx) {
                0 => counters.nbr_sent += 1,
                _ => counters.nbr_send_failed += 1,
            }
        }
    }
}
