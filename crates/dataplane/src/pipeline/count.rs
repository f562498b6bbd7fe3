//! Counting: every packet's one outcome under its own counter, and what
//! each child rule and backend took. Counters are the worker's own (no
//! atomics); the worker loop publishes them.

use super::{Outcome, Pipeline, Verdict};
use crate::counters::DropReason;

impl Pipeline {
    /// Counts an outcome once, under its own counter.
    #[inline(always)]
    pub(super) fn count(&mut self, outcome: Outcome) -> Verdict {
        // The usual outcome alone, the others out of line (as arms of one
        // match they were a jump through a table for every packet).
        if let Outcome::Forward = outcome {
            self.counters.forwarded += 1;
            return Verdict::Forward;
        }
        self.count_other(outcome)
    }

    #[cold]
    #[inline(never)]
    fn count_other(&mut self, outcome: Outcome) -> Verdict {
        let c = &mut self.counters;
        match outcome {
            Outcome::Forward => {
                c.forwarded += 1;
                Verdict::Forward
            }
            Outcome::ToHost => {
                c.to_host += 1;
                Verdict::ToHost
            }
            Outcome::Drop(r) => {
                c.drops[r as usize] += 1;
                Verdict::Drop(r)
            }
            Outcome::ArpReply => {
                c.arp_replies += 1;
                Verdict::Reply
            }
            Outcome::NeighborAdvert => {
                c.nd_replies += 1;
                Verdict::Reply
            }
            Outcome::Reset => {
                c.no_backend_resets += 1;
                Verdict::Reply
            }
            Outcome::TooBig => {
                c.icmp_too_big += 1;
                Verdict::Reply
            }
            Outcome::EchoReply => {
                c.echo_replies += 1;
                Verdict::Reply
            }
            Outcome::Returned(port) => {
                c.gateway_returned += 1;
                Verdict::ForwardTo(port)
            }
            // Counted by `Pipeline::fragment`, which decides it.
            Outcome::Fragment(job) => Verdict::Fragment(job),
        }
    }

    #[inline(always)]
    pub(super) fn count_child(&mut self, child: usize, len: usize) {
        if let Some(c) = self.counters.children.get_mut(child) {
            c.packets += 1;
            c.bytes += len as u64;
        }
    }

    /// Counts a delivery of `len` bytes to backend `slot` for child rule
    /// `child`: the backend's packets and bytes, or the rule's drops.
    #[inline(always)]
    pub(super) fn delivered(
        &mut self,
        sent: Result<(), DropReason>,
        slot: usize,
        child: usize,
        len: usize,
    ) -> Outcome {
        match sent {
            Ok(()) => {
                if let Some(b) = self.counters.backends.get_mut(slot) {
                    b.packets += 1;
                    b.bytes += len as u64;
                }
                Outcome::Forward
            }
            Err(reason) => {
                self.child_drop(child, reason);
                Outcome::Drop(reason)
            }
        }
    }

    /// Counts a drop (or an answer instead of a delivery) for child rule
    /// `child`, by reason.
    pub(super) fn child_drop(&mut self, child: usize, reason: DropReason) {
        if let Some(c) = self.counters.children.get_mut(child) {
            c.drops += 1;
            c.drop_reasons[reason as usize] += 1;
        }
    }

    /// Ends the current [`RuleRun`], adding its counts to its child rule.
    pub(super) fn end_rule_run(&mut self) {
        if let Some(run) = self.last_rule.take()
            && let Some(c) = self.counters.children.get_mut(run.child)
        {
            c.packets += run.packets;
            c.bytes += run.bytes;
        }
    }
}
