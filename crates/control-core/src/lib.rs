//! The management core's decisions, without I/O (sans-I/O, as quinn-proto
//! is to quinn): a state machine fed with time and inputs that says what to
//! do as outputs. It owns the running configuration and the
//! [`SnapshotBuilder`](dataplane::SnapshotBuilder); it decides reloads,
//! health and locality plans, the snapshots to publish, drains, the VIPs'
//! BGP announcement, neighbour resolution and flow-state sync, and writes
//! the reports `status` and `stats` show.
//!
//! Nothing here reads a clock, sleeps, spawns a thread or opens a file or a
//! socket, and none of the crates it stands on does either for it (health
//! without its probers): `clippy.toml` refuses those std types and calls,
//! and `scripts/test.sh` builds this crate alone, so an I/O import breaks
//! the build. Its shells — the daemon (`control`), `spillway replay`, the
//! simulation harness — own the I/O and drive the core through one
//! [`Shell`] trait and [`Core::step`].
//!
//! # Layout
//!
//! - [`core`]: the [`Core`], one file per concern (its module docs list
//!   them); [`ports`]: what it asks of its shell ([`Output`], [`Shell`],
//!   [`Probes`]);
//! - [`balance`]: its health and locality part; [`cluster`]: the peers'
//!   measured rates it plans `RATE` capacity with; [`transitions`]: the
//!   derived health states' transitions;
//! - [`announce`]: which VIPs the node announces (M35); [`drain`]: what is
//!   drained (M37); [`neighbours`]: next hops resolved and addresses
//!   announced on L2 (M47); [`sync`]: flow-state sync with the peers (M36);
//! - [`report`]: `status`, `stats` and the control socket's answers, for
//!   people and as JSON;
//! - [`scripted`]: verdicts set by hand instead of probed, and a shell that
//!   records outputs, for driving the core without a network.

pub mod announce;
pub mod balance;
pub mod cluster;
pub mod core;
pub mod drain;
pub mod neighbours;
pub mod ports;
pub mod report;
pub mod scripted;
pub mod sync;
pub mod transitions;
pub mod vrrp;

pub use crate::core::{
    Ageing, BuiltTables, Core, DrainError, FlowUse, INLINE_TABLE_SLOTS, Inputs, Output, Probes,
    Published, ReloadError, SWEEP_BUDGET, Shell, build_tables, destructive_change, reload_text,
    rule_states_text, watch_refusal,
};
pub use crate::ports::RemoteKey;
pub use crate::scripted::{Recorder, ScriptedProbes};

/// How often the management core steps: the daemon's loop period, and the
/// capture-time period at which `spillway replay` steps its core.
pub const TICK_PERIOD: std::time::Duration = std::time::Duration::from_millis(50);

/// Why the management core could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// the first snapshot could not be built
    #[error("{0}")]
    Snapshot(#[from] dataplane::SnapshotError),
    /// health checking could not start
    #[error("health checks: {0}")]
    Health(#[from] health::HealthError),
    /// no random flow-sync epoch from the operating system (M54)
    #[error("no random number from the operating system: {0}")]
    Random(getrandom::Error),
}
