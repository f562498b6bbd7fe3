//! A burst while a trace is armed ([`crate::trace`]): its packets one at a
//! time through [`Pipeline::process_burst`] — so each decides exactly
//! what it decides in a burst — each packet the trace's filter takes
//! explained first, on a copy, by the passes `simulate` uses. Out of line
//! and cold, and called only by the worker loop ([`crate::Engine`]) after
//! its one test per burst: `process_burst` itself is unchanged.

use std::sync::Arc;

use flowtable::{FlowTable, Tick};
use wire::buf::PacketBuf;

use super::explain::EntryUse;
use super::fragment::FragJob;
use super::{Ctx, Pipeline, Verdict};
use crate::snapshot::Snapshot;
use crate::trace::{PacketHead, TraceRecord, Tracer};

/// What a traced burst works with, allocated once when the worker is
/// given its tracer: a throwaway worker for the explanations, room for a
/// frame's copy, and the burst's fragmentation jobs.
#[derive(Debug)]
pub(super) struct TraceScratch {
    explainer: Pipeline,
    frame: Vec<u8>,
    jobs: Vec<FragJob>,
}

/// The largest frame a trace explains, with the copy's headroom and room
/// to grow (an encapsulation, a reply).
const FRAME_ROOM: usize = 16 * 1024;

impl Pipeline {
    /// Decisions of this worker are traced through `t` while it is armed;
    /// `worker` is this worker's queue.
    pub fn set_tracer(&mut self, t: Arc<Tracer>, worker: usize) {
        self.tracer = Some(t);
        self.worker_index = u16::try_from(worker).unwrap_or(u16::MAX);
        self.trace_scratch = Some(Box::new(TraceScratch {
            explainer: Pipeline::new(0, 0),
            frame: vec![0; FRAME_ROOM],
            jobs: Vec::with_capacity(self.frag_jobs.capacity()),
        }));
    }

    /// Whether a trace is armed: the worker loop's one test per burst.
    #[inline(always)]
    pub fn tracing(&self) -> bool {
        self.tracer.as_ref().is_some_and(|t| t.armed())
    }

    /// [`Pipeline::process_burst`] while a trace is armed: the burst one
    /// packet at a time through `process_burst` itself (so the code that
    /// decides is the very code that decides untraced bursts), each packet
    /// the filter takes explained first on a copy, read-only, with the
    /// passes `simulate` uses, then recorded with its real verdict.
    #[cold]
    #[inline(never)]
    pub fn process_burst_traced<B: PacketBuf>(
        &mut self,
        snap: &Snapshot,
        flows: &FlowTable,
        now: Tick,
        pkts: &mut [B],
        verdicts: &mut [Verdict],
    ) {
        let (Some(tracer), Some(mut scratch)) = (self.tracer.clone(), self.trace_scratch.take())
        else {
            return self.process_burst(snap, flows, now, pkts, verdicts);
        };
        let filter = tracer.filter();
        scratch.jobs.clear();
        // Grows only with a snapshot of more rules than any before.
        scratch
            .explainer
            .counters
            .resize_children(snap.rules.children());
        let cx = Ctx { snap, flows, now };
        let n = pkts.len().min(verdicts.len());
        for i in 0..n {
            let (Some(pkt), Some(v)) = (pkts.get_mut(i), verdicts.get_mut(i)) else {
                break;
            };
            let head = PacketHead::of(pkt.data());
            let wanted = filter.as_ref().filter(|f| f.takes_head(&head));
            let before = wanted.map(|_| {
                let TraceScratch {
                    explainer, frame, ..
                } = &mut *scratch;
                explainer.explain_frame(cx, self.rx_port, pkt.data(), frame)
            });
            self.process_burst(
                snap,
                flows,
                now,
                std::slice::from_mut(pkt),
                std::slice::from_mut(v),
            );
            // Its fragmentation job, renumbered in the burst's.
            if let Verdict::Fragment(_) = *v {
                match (self.frag_jobs.first(), u16::try_from(scratch.jobs.len())) {
                    (Some(job), Ok(index)) if scratch.jobs.len() < scratch.jobs.capacity() => {
                        scratch.jobs.push(*job);
                        *v = Verdict::Fragment(index);
                    }
                    _ => *v = Verdict::Drop(crate::DropReason::FragmentFailed),
                }
            }
            let (Some(f), Some(mut e)) = (wanted, before) else {
                continue;
            };
            // The entry as the packet left it: a new flow's, or the one it
            // followed.
            let after = e.key.and_then(|k| flows.lookup(&k, flows.hash(&k)));
            let created = !matches!(e.entry, EntryUse::Pinned { .. }) && after.is_some();
            e.backend = match (e.entry, after, *v) {
                (_, _, Verdict::Drop(_)) => None,
                (EntryUse::Pinned { slot, .. }, ..) => Some(slot),
                (_, Some(a), _) if created => Some(a.entry.backend),
                (..) => e.backend,
            };
            e.verdict = *v;
            let rec = TraceRecord {
                worker: self.worker_index,
                port: u16::try_from(self.rx_port).unwrap_or(u16::MAX),
                generation: snap.generation,
                head,
                decision: e,
                created,
            };
            if f.takes_record(&rec) && tracer.take_one() {
                tracer.push(usize::from(self.worker_index), rec);
            }
        }
        // The burst's jobs, as process_burst would have left them.
        std::mem::swap(&mut self.frag_jobs, &mut scratch.jobs);
        self.trace_scratch = Some(scratch);
    }
}
