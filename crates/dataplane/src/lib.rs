//! Spillway's data-plane pipeline, written against `wire::buf::PacketBuf` and
//! the [`PacketIo`] trait so that DPDK workers, `replay`, tests and fuzzers
//! all run the same code.
//!
//! Data flows one way: the management core builds an immutable [`Snapshot`]
//! (compiled rules, per-service Maglev tables over stable backend slots,
//! backend states); a worker processes each packet against the snapshot it
//! loaded for the burst, the shared flow table and a coarse tick, and counts
//! what it did in its own [`WorkerCounters`]. Nothing here reads a clock,
//! allocates per packet, locks, or panics on packet contents.
//!
//! Layers, inside out: [`pipeline`] decides per packet, [`engine`] runs it
//! over one pass of a worker's ports, [`worker`] is the loop a worker thread
//! runs (snapshot swaps, counter publishing, idling, stopping) with the
//! clock and the I/O passed in.

pub mod cookie;
pub mod counters;
mod delivery;
pub mod engine;
pub mod neighbour;
pub mod nexthop;
pub mod pipeline;
pub mod snapshot;
pub mod sync;
pub mod tick;
pub mod trace;
pub mod worker;

pub use cookie::CookieKey;
pub use counters::{ChildCounters, DropReason, WorkerCounters};
pub use engine::{BURST, Engine, HostPath, PacketIo, Routes, VecBurst};
pub use pipeline::explain::{EntryUse, Explanation, Probe};
pub use pipeline::{Pipeline, Verdict};
pub use snapshot::{
    Backend, BackendState, EndpointHealth, Local, Pick, Rules, ServicePlan, Snapshot,
    SnapshotBuilder, SnapshotError, flow_table_config,
};
pub use tick::Tick;
pub use worker::{BusyPoll, Clock, Idle, Shared, WorkerLoop};
