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
//! The decisions are the `control-core` crate's ([`control_core`]: the
//! [`Core`], a state machine without I/O, and its parts), re-exported here
//! under their old paths ([`core`], [`balance`], [`announce`] …). This
//! crate is the shell around it:
//!
//! - [`daemon`]: the shell ([`Manager`]): clock, threads, the configuration
//!   file and its watch, the probers, the listeners ([`listen`], [`socket`],
//!   [`http`]); it answers from state it owns itself (the flow table for
//!   `flows`, the workers' and listeners' counters for `stats` and
//!   [`metrics`]) and hands the other commands to the core.
//! - [`bird`]: the driver of BIRD, which announces what [`announce`]
//!   decides.
//! - [`remote`]: the `remote_rule` poller (threads and HTTP).
//! - [`drain`]: the drain state file; [`report`]: the rates of `stats`,
//!   sampled on the daemon's clock.

pub mod admission;
pub mod bird;
pub mod daemon;
pub mod drain;
pub mod flows;
pub mod http;
pub mod job;
pub mod listen;
pub mod metrics;
pub mod remote;
pub mod report;
pub mod simulate;
pub mod socket;
pub mod trace;

pub use crate::daemon::Manager;
pub use control_core::core::{
    Ageing, BuiltTables, Core, DrainError, FlowUse, INLINE_TABLE_SLOTS, Inputs, Output, Probes,
    Published, ReloadError, SWEEP_BUDGET, Shell, build_tables, destructive_change, reload_text,
    rule_states_text, watch_refusal,
};
pub use control_core::{
    announce, balance, cluster, core, neighbours, ports, scripted, sync, transitions, vrrp,
};

pub use crate::scripted::{Recorder, ScriptedProbes};
pub use control_core::TICK_PERIOD;

pub use dataplane::worker::Shared;

/// Why the daemon's management core could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// the flow table could not be allocated
    #[error("flow table: {0}")]
    FlowTable(#[from] flowtable::ConfigError),
    /// the core could not start (its first snapshot, its health checks)
    #[error(transparent)]
    Core(#[from] control_core::StartError),
    /// the BGP speaker's driver could not start
    #[error("bgp: {0}")]
    Speaker(crate::bird::BirdError),
    /// the flow-sync socket could not be opened (M36)
    #[error("flow sync: cannot listen on {0}: {1}")]
    FlowSync(std::net::SocketAddr, std::io::Error),
    /// no random key from the operating system (M53)
    #[error("no random number from the operating system: {0}")]
    Random(getrandom::Error),
}
