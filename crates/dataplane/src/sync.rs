//! The data plane's part of flow-state sync (M36): a worker that creates a
//! flow entry pushes a copy of it to a bounded lock-free queue
//! ([`SyncQueue`], in [`crate::worker::Shared`] when `[flow_sync]` is set);
//! the management core drains it, batches the entries into datagrams and
//! sends them to the peers. A full queue loses the entry (counted,
//! `sync_lost`), never waits; without sync there is no queue and a new
//! entry costs one untaken branch.

use crossbeam::queue::ArrayQueue;
use flowtable::{FlowKey, Tick};

use crate::counters::WorkerCounters;

/// Entries queued at most: about a second of new flows at a high rate,
/// between two drains of the management core (64 B each: 4 MiB).
pub const SYNC_QUEUE: usize = 65_536;

/// The entry flag of an entry learned from a peer, not created here: the
/// management core refreshes peers only with entries it does not carry this
/// on (so two nodes never keep an idle flow alive for each other). A worker
/// that forwards a packet of the flow clears it: this node carries the flow
/// now.
pub const LEARNED: u8 = flowtable::EntryFlags::APP_MASK;

/// A flow entry a worker created, as the table holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NewFlow {
    /// The table key (packed flow with its flow tag).
    pub key: FlowKey,
    /// Its table hash.
    pub hash: u64,
    /// The backend slot (in the snapshot of `generation`).
    pub backend: u32,
    /// The snapshot generation the backend was chosen in.
    pub generation: u32,
    /// Flow cookie (M32; 0 outside gateway mode).
    pub cookie: u32,
    /// The entry's flag bits.
    pub flags: u8,
    /// The tick it was created at.
    pub created: Tick,
}

/// New flow entries from the workers to the management core.
#[derive(Debug)]
pub struct SyncQueue {
    /// The entries.
    pub entries: ArrayQueue<NewFlow>,
}

impl Default for SyncQueue {
    fn default() -> Self {
        SyncQueue::with_capacity(SYNC_QUEUE)
    }
}

impl SyncQueue {
    /// A queue of `capacity` entries (at least 1).
    pub fn with_capacity(capacity: usize) -> SyncQueue {
        SyncQueue {
            entries: ArrayQueue::new(capacity.max(1)),
        }
    }

    /// Queues `flow`. Never waits, never allocates: a full queue is counted.
    #[inline]
    pub fn push(&self, flow: NewFlow, counters: &mut WorkerCounters) {
        match self.entries.push(flow) {
            Ok(()) => counters.sync_queued += 1,
            Err(_) => counters.sync_lost += 1,
        }
    }

    /// Takes up to `max` queued entries into `out` (the management core).
    pub fn drain_into(&self, out: &mut Vec<NewFlow>, max: usize) {
        for _ in 0..max {
            let Some(f) = self.entries.pop() else { return };
            out.push(f);
        }
    }
}
