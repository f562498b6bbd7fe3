//! The management core (docs/requirements.md §1): everything slow, on its own thread.
//!
//! It owns the configuration and the [`SnapshotBuilder`](dataplane::SnapshotBuilder);
//! it publishes each new [`Snapshot`] with `arc-swap`, which workers load once
//! per burst (RCU-style: a worker finishes its burst on the snapshot it
//! started with, the old one is freed when the last worker lets go). It
//! advances the coarse clock workers stamp flows with, ages the flow table a
//! slice at a time, and reads the counters workers publish. Workers never
//! call into it.
//!
//! A reload that fails validation changes nothing: the running snapshot
//! stays, the errors are returned to the caller and logged (M38).
//!
//! # Layout
//!
//! - [`core`]: the decisions, as a state machine without I/O: time and
//!   inputs in (tick, health and remote verdicts, tables built, the control
//!   [`Command`]s whose answers are its business: `status`, `/status`,
//!   reloads), [`Output`]s out (publish, build tables, watch the file, log
//!   a line) and an [`Answer`] to each command.
//!   [`balance`] is its health and locality part; [`cluster`] the peers'
//!   measured rates it plans `RATE` capacity with.
//! - [`daemon`]: the shell ([`Manager`]): clock, threads, the configuration
//!   file and its watch, the probers, the listeners ([`listen`], [`socket`],
//!   [`http`]); it answers from state it owns itself (the flow table for
//!   `flows`, the workers' and listeners' counters for `stats` and
//!   [`metrics`]) and hands the other commands to the core.
//! - [`announce`]: which VIPs the node announces (M35), the core's
//!   decision; [`bird`]: the shell's driver of BIRD, which announces them.
//! - [`remote`]: the `remote_rule` poller (threads and HTTP), the shell's.
//! - [`scripted`]: verdicts set by hand instead of probed, for driving the
//!   core without a network (`spillway replay`, simulations).

pub mod admission;
pub mod announce;
pub mod balance;
pub mod bird;
pub mod cluster;
pub mod core;
pub mod daemon;
pub mod drain;
pub mod flows;
pub mod http;
pub mod job;
pub mod listen;
pub mod metrics;
pub mod neighbours;
pub mod ports;
pub mod remote;
pub mod report;
pub mod scripted;
pub mod simulate;
pub mod socket;
pub mod sync;
pub mod transitions;

pub use crate::core::{
    Ageing, Answer, BuiltTables, Command, Core, FlowUse, INLINE_TABLE_SLOTS, Inputs, Output,
    Probes, Published, SWEEP_BUDGET, Shell, build_tables, destructive_change, watch_refusal,
};
pub use crate::daemon::Manager;

/// How often the management core ticks: the daemon's loop period, and the
/// capture-time period at which `spillway replay` ticks its core.
pub const TICK_PERIOD: std::time::Duration = std::time::Duration::from_millis(50);
pub use crate::scripted::{Recorder, ScriptedProbes};

pub use dataplane::worker::Shared;

/// Why the management core could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// the flow table could not be allocated
    #[error("flow table: {0}")]
    FlowTable(#[from] flowtable::ConfigError),
    /// the first snapshot could not be built
    #[error("{0}")]
    Snapshot(#[from] dataplane::SnapshotError),
    /// health checking could not start
    #[error("health checks: {0}")]
    Health(#[from] health::HealthError),
    /// the BGP speaker's driver could not start
    #[error("bgp: {0}")]
    Speaker(crate::bird::BirdError),
    /// the flow-sync socket could not be opened (M36)
    #[error("flow sync: cannot listen on {0}: {1}")]
    FlowSync(std::net::SocketAddr, std::io::Error),
    /// no random key or epoch from the operating system (M53, M54)
    #[error("no random number from the operating system: {0}")]
    Random(getrandom::Error),
}
