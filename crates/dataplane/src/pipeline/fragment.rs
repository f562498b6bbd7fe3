//! Fragmentation (M48): an IPv4 packet without DF that is too big for the
//! egress MTU once encapsulated is split into fragments that fit, and each
//! fragment is encapsulated and sent to the flow's backend on its own —
//! RFC 4459 §4's inner fragmentation. Sent whole, with the outer DF set, it
//! would be 20 to 60 bytes over the link MTU and dropped silently by the
//! next hop; fragmenting the outer packet instead would leave the
//! reassembly to the tunnel's receiver, which Spillway's own tunnel ingress
//! (M49) and the gateway return path (M32) do not do. The backend's stack
//! reassembles the inner datagram after decapsulation, as it does one
//! fragmented by a router.
//!
//! The fragments need buffers of their own, which the pipeline does not
//! have (it works in place, over a burst). So [`Pipeline::finish`] decides
//! everything about the packet (its flow, backend and cookie) and leaves a
//! job ([`Verdict::Fragment`]); the worker loop, which has the packet I/O,
//! then calls [`Pipeline::fragment`] with a way to take buffers from the pool
//! (on DPDK, mbufs from the port's mempool: a rare path, counted, no heap)
//! and sends the fragments together, in order, in one TX burst.
//!
//! [`Pipeline::finish`]: super::Pipeline
//! [`Verdict::Fragment`]: super::Verdict::Fragment

use wire::buf::PacketBuf;
use wire::encap::InnerIp;
use wire::frag::{self, FragError};

use super::{Outcome, Pending, Pipeline};
use crate::counters::DropReason;
use crate::delivery;
use crate::snapshot::Snapshot;

/// Fragmentation jobs one burst can hold (more are dropped and counted):
/// twice the largest burst the worker loop receives.
pub(super) const FRAG_JOBS: usize = 2 * super::BURST;

/// The most fragments a packet is split into ([`wire::frag::MAX_FRAGMENTS`]).
pub const MAX_FRAGMENTS: usize = frag::MAX_FRAGMENTS;

/// What [`Pipeline::finish`](super::Pipeline) decided about a packet to
/// fragment.
#[derive(Debug, Clone, Copy)]
pub(super) struct FragJob {
    /// Backend slot and the flow's cookie.
    slot: u32,
    cookie: u32,
    /// The flow's hash (the outer source port, as for every packet of the
    /// flow).
    hash: u64,
    child: usize,
    svc: usize,
    /// As [`Pending::gateway`].
    gateway: u16,
    /// The largest inner packet that fits once encapsulated.
    max: u32,
}

impl Pipeline {
    /// Leaves packet `p`, too big for backend `to` (slot, cookie) once
    /// encapsulated (more than `max` bytes) and without DF, to be
    /// fragmented after the burst.
    #[cold]
    #[inline(never)]
    pub(super) fn fragment_later(&mut self, p: &Pending, to: (u32, u32), max: u32) -> Outcome {
        let job = FragJob {
            slot: to.0,
            cookie: to.1,
            hash: p.hash,
            child: p.child,
            svc: p.svc,
            gateway: p.gateway,
            max,
        };
        let index = self.frag_jobs.len();
        match u16::try_from(index) {
            Ok(i) if index < self.frag_jobs.capacity() => {
                self.frag_jobs.push(job);
                Outcome::Fragment(i)
            }
            _ => {
                self.child_drop(p.child, DropReason::FragmentFailed);
                Outcome::Drop(DropReason::FragmentFailed)
            }
        }
    }

    /// Splits `pkt`, left as [`Verdict::Fragment`]`(job)` by the burst just
    /// processed (against the same `snap`), into fragments that fit the
    /// egress MTU once encapsulated, and encapsulates each for the flow's
    /// backend: the first in `pkt` itself, the others in buffers from
    /// `alloc`. Writes them to `out` in order and returns how many; counts
    /// the packet as forwarded and fragmented (each fragment among its
    /// backend's packets and bytes).
    ///
    /// Returns 0 when it cannot be done — no buffer, malformed IPv4 options,
    /// more fragments than `out` holds (at most [`MAX_FRAGMENTS`] are ever
    /// needed), a fragment that cannot be encapsulated — and then counts a
    /// drop (`fragment_failed`, or the delivery's reason) and frees every
    /// buffer.
    ///
    /// [`Verdict::Fragment`]: super::Verdict::Fragment
    pub fn fragment<B: PacketBuf>(
        &mut self,
        snap: &Snapshot,
        job: u16,
        pkt: B,
        alloc: &mut impl FnMut() -> Option<B>,
        out: &mut [Option<B>],
    ) -> usize {
        let Some(j) = self.frag_jobs.get(usize::from(job)).copied() else {
            self.counters.drops[DropReason::FragmentFailed as usize] += 1;
            return 0;
        };
        match self.split(snap, &j, pkt, alloc, out) {
            Ok(n) => {
                self.counters.forwarded += 1;
                self.counters.fragmented += 1;
                if let Some(b) = self.counters.backends.get_mut(j.slot as usize) {
                    for f in out.iter().take(n).flatten() {
                        b.packets += 1;
                        b.bytes += f.len() as u64;
                    }
                }
                n
            }
            Err(reason) => {
                // Every buffer taken goes back to its pool.
                out.iter_mut().for_each(|o| *o = None);
                self.child_drop(j.child, reason);
                self.counters.drops[reason as usize] += 1;
                0
            }
        }
    }

    /// Counts job `job`'s packet as dropped without an attempt (no port to
    /// send it on).
    pub fn fragment_unsent(&mut self, job: u16) {
        if let Some(j) = self.frag_jobs.get(usize::from(job)).copied() {
            self.child_drop(j.child, DropReason::FragmentFailed);
        }
        self.counters.drops[DropReason::FragmentFailed as usize] += 1;
    }

    fn split<B: PacketBuf>(
        &mut self,
        snap: &Snapshot,
        j: &FragJob,
        mut pkt: B,
        alloc: &mut impl FnMut() -> Option<B>,
        out: &mut [Option<B>],
    ) -> Result<usize, DropReason> {
        let inner = InnerIp::of(pkt.data()).map_err(|_| DropReason::Malformed)?;
        let l2 = inner.l2_len;
        let plan = frag::plan(
            pkt.data().get(l2..).ok_or(DropReason::Malformed)?,
            j.max as usize,
        )
        .map_err(|e| match e {
            FragError::Malformed(_) => DropReason::Malformed,
            _ => DropReason::FragmentFailed,
        })?;
        if inner.v6 || plan.count() > out.len() {
            return Err(DropReason::FragmentFailed);
        }
        let plan_svc = snap.plan_for(j.child, j.svc).ok_or(DropReason::NoRule)?;
        let endpoint_id = match j.gateway {
            0 => None,
            g => snap.gateways.get(usize::from(g) - 1).map(|h| h.id),
        };
        let send = |f: &mut B, ip_len: usize| {
            let ip = InnerIp { ip_len, ..inner };
            delivery::deliver(
                snap,
                plan_svc,
                j.svc,
                (j.slot, j.cookie),
                endpoint_id,
                j.hash,
                &ip,
                f,
            )
        };
        // The later fragments first: they are read from the packet's bytes
        // behind the first fragment, which is then cut to its length.
        for (k, slot) in out.iter_mut().enumerate().take(plan.count()).skip(1) {
            let mut f = alloc().ok_or(DropReason::FragmentFailed)?;
            let len = plan.len(k);
            let frame = f.append(l2 + len).map_err(|_| DropReason::FragmentFailed)?;
            let (Some(hdr), Some(ip)) = (pkt.data().get(..l2), pkt.data().get(l2..)) else {
                return Err(DropReason::Malformed);
            };
            frame[..l2].copy_from_slice(hdr);
            plan.write_later(ip, k, &mut frame[l2..])
                .map_err(|_| DropReason::FragmentFailed)?;
            send(&mut f, len)?;
            *slot = Some(f);
        }
        let first = plan.len(0);
        plan.make_first(pkt.data_mut().get_mut(l2..).ok_or(DropReason::Malformed)?)
            .map_err(|_| DropReason::Malformed)?;
        let excess = pkt.len().saturating_sub(l2 + first);
        pkt.trim(excess).map_err(|_| DropReason::Malformed)?;
        send(&mut pkt, first)?;
        if let Some(o) = out.first_mut() {
            *o = Some(pkt);
        }
        Ok(plan.count())
    }
}
