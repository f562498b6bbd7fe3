//! The loop a worker thread runs in production (docs/requirements.md §1): poll its queues
//! through the [`Engine`], load the current snapshot for each pass (a reload
//! is picked up between passes, never within one), publish its counters
//! every so often (never per packet), and return when told to stop.
//!
//! It is generic over everything outside the data plane, so that tests run
//! exactly this loop over in-memory queues with a fake clock:
//! - the packet I/O ([`PacketIo`]; the daemon's is `dpdk::DpdkIo`);
//! - the [`Clock`] that paces publishing (the daemon's is the CPU's cycle
//!   counter);
//! - the [`Idle`] policy for a pass that received nothing.
//!
//! What the loop shares with the management core is [`Shared`]; data flows
//! one way: the management core writes the snapshot, the tick and the stop
//! flag, workers write their counter slots.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use flowtable::FlowTable;

use crate::counters::WorkerCounters;
use crate::engine::{Engine, PacketIo};
use crate::neighbour::NeighbourQueues;
use crate::snapshot::Snapshot;
use crate::sync::SyncQueue;

/// What workers and the management core share.
pub struct Shared {
    /// The snapshot workers use; replaced whole on reload.
    pub snapshot: ArcSwap<Snapshot>,
    /// The connection table.
    pub flows: FlowTable,
    /// Current coarse tick (seconds since start).
    pub now: AtomicU32,
    /// Set to stop the workers.
    pub stop: AtomicBool,
    /// Each worker's last published counters (written by that worker with
    /// `try_lock` every ~100 ms, never per packet).
    pub published: Vec<Mutex<WorkerCounters>>,
    /// The snapshot generation each worker's current pass uses
    /// ([`NOT_RUNNING`] when its loop is not running): written by that
    /// worker when it changes, so that a reload can be answered once every
    /// running worker uses the new snapshot ([`Shared::workers_on`]).
    pub using: Vec<Using>,
    /// Neighbour sightings from workers, frames for workers to send (M47).
    pub neighbours: Arc<NeighbourQueues>,
    /// New flow entries from workers for flow-state sync (M36); `None`
    /// (no queue, nothing pushed) without `[flow_sync]`.
    pub flow_sync: Option<Arc<SyncQueue>>,
    /// Live traces of the workers' decisions (`spillway trace`).
    pub tracer: Arc<crate::trace::Tracer>,
}

impl Shared {
    /// Advances the coarse tick workers stamp flows with.
    pub fn set_tick(&self, tick: crate::Tick) {
        self.now.store(tick.get(), Ordering::Relaxed);
    }
}

/// A worker's [`Shared::using`] slot, on a cache line of its own so that its
/// writes never disturb another worker's.
#[derive(Debug)]
#[repr(align(64))]
pub struct Using(AtomicU64);

/// What [`Shared::using`] holds while a worker's loop is not running.
pub const NOT_RUNNING: u64 = u64::MAX;

impl Using {
    fn new() -> Using {
        Using(AtomicU64::new(NOT_RUNNING))
    }

    /// The generation the worker's current pass uses, or [`NOT_RUNNING`].
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }

    fn set(&self, v: u64) {
        self.0.store(v, Ordering::Release);
    }
}

impl Shared {
    /// State for `workers` workers starting on `snapshot` at tick 0.
    pub fn new(snapshot: Arc<Snapshot>, flows: FlowTable, workers: usize) -> Shared {
        let children = snapshot.rules.children();
        Shared {
            snapshot: ArcSwap::new(snapshot),
            flows,
            now: AtomicU32::new(0),
            stop: AtomicBool::new(false),
            published: (0..workers)
                .map(|_| Mutex::new(WorkerCounters::new(children)))
                .collect(),
            using: (0..workers).map(|_| Using::new()).collect(),
            neighbours: Arc::new(NeighbourQueues::default()),
            flow_sync: None,
            tracer: Arc::new(crate::trace::Tracer::new(workers)),
        }
    }

    /// With a queue of new flow entries for flow-state sync (M36).
    #[must_use]
    pub fn with_flow_sync(mut self) -> Shared {
        self.flow_sync = Some(Arc::new(SyncQueue::default()));
        self
    }

    /// Whether every running worker's pass uses snapshot `generation` or a
    /// later one: from then on, no packet is processed with an older one.
    pub fn workers_on(&self, generation: u32) -> bool {
        self.using.iter().all(|u| match u.get() {
            NOT_RUNNING => true,
            g => u32::try_from(g).is_ok_and(|g| flowtable::tick_reached(g, generation)),
        })
    }
}

/// A free-running counter that paces the loop's housekeeping (the daemon's
/// is the CPU's time-stamp counter). Only differences are used, wrapping.
pub trait Clock {
    /// The counter's current value.
    fn ticks(&mut self) -> u64;
}

impl<F: FnMut() -> u64> Clock for F {
    #[inline]
    fn ticks(&mut self) -> u64 {
        self()
    }
}

/// What a worker does after a pass over its ports that received nothing:
/// the place to trade latency for CPU (pause, back off, sleep).
pub trait Idle {
    /// Called after each empty pass, with no snapshot held.
    fn idle(&mut self);
}

/// Poll again at once: the worker's core is its own (the daemon's policy).
#[derive(Debug, Clone, Copy, Default)]
pub struct BusyPoll;

impl Idle for BusyPoll {
    #[inline(always)]
    fn idle(&mut self) {}
}

/// One worker's loop: which worker it is, what it shares, and its pacing.
pub struct WorkerLoop<'s, C, D = BusyPoll> {
    /// The worker's index: its slot in [`Shared::published`].
    pub index: usize,
    /// State shared with the management core.
    pub shared: &'s Shared,
    /// Paces the publishing of counters.
    pub clock: C,
    /// [`Clock`] ticks between two publications of the counters (~100 ms).
    pub publish_every: u64,
    /// What to do after a pass that received nothing.
    pub idle: D,
}

impl<C: Clock, D: Idle> WorkerLoop<'_, C, D> {
    /// Polls `io` through `engine` until [`Shared::stop`] is set, then
    /// publishes the counters a last time (waiting for the slot).
    pub fn run<I: PacketIo>(&mut self, engine: &mut Engine<I::Burst>, io: &mut I) {
        let shared = self.shared;
        let using = shared.using.get(self.index);
        let mut last_publish = self.clock.ticks();
        // The end of the previous pass: one clock read a pass paces the
        // publishing and measures how long passes that received took.
        let mut pass_start = last_publish;
        let mut generation = NOT_RUNNING;
        engine
            .worker
            .set_neighbour_queues(shared.neighbours.clone());
        if let Some(q) = &shared.flow_sync {
            engine.worker.set_sync_queue(q.clone());
        }
        engine.worker.set_tracer(shared.tracer.clone(), self.index);
        while !shared.stop.load(Ordering::Relaxed) {
            let received = {
                let snap = shared.snapshot.load();
                if u64::from(snap.generation) != generation {
                    // Written only when it changes: no shared write per pass.
                    generation = u64::from(snap.generation);
                    if let Some(u) = using {
                        u.set(generation);
                    }
                }
                let now = shared.now.load(Ordering::Relaxed);
                engine.poll(io, &snap, &shared.flows, now)
            };
            engine.send_queued(io, &shared.neighbours);
            let t = self.clock.ticks();
            let c = &mut engine.worker.counters;
            c.polls += 1;
            if received == 0 {
                c.idle_polls += 1;
            } else {
                c.busy_cycles += t.wrapping_sub(pass_start);
            }
            pass_start = t;
            if t.wrapping_sub(last_publish) >= self.publish_every {
                last_publish = t;
                // Never waits: the management core reading the slot just
                // means this publication is skipped.
                if let Some(Ok(mut slot)) = shared.published.get(self.index).map(Mutex::try_lock) {
                    slot.clone_from(&engine.worker.counters);
                }
            }
            if received == 0 {
                self.idle.idle();
            }
        }
        if let Some(Ok(mut slot)) = shared.published.get(self.index).map(Mutex::lock) {
            slot.clone_from(&engine.worker.counters);
        }
        if let Some(u) = using {
            u.set(NOT_RUNNING);
        }
    }
}
