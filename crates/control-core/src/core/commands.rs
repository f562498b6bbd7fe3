//! The control commands whose answers are the core's business, one typed
//! method each — [`Core::status`], [`Core::reload`],
//! [`Core::file_changed`], [`Core::drain`] (rule states are
//! [`Core::rule_states`]) — their errors ([`ReloadError`], [`DrainError`])
//! and how the daemon words their answers ([`reload_text`],
//! [`rule_states_text`]).

use std::time::Duration;

use flowtable::FlowTable;
use health::Aggregate;

use super::{Core, Probes, Published};

/// Why a reload was refused: the running configuration stays. Its text is
/// what `spillway reload` prints after "reload rejected; the running
/// configuration stays:" ([`reload_text`]), and what `status` shows as
/// the last error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReloadError {
    /// The file could not be read, parsed or validated: the loader's
    /// message, as the shell passed it in.
    #[error("{0}")]
    Load(String),
    /// The file watch does not apply this change ([`watch_refusal`](super::watch_refusal)).
    #[error(
        "{file} changed, and the file watch does not apply it: {why}. A file cut short by a half-done write looks like this; if the change is meant, run `spillway reload` (or send SIGHUP)"
    )]
    WatchRefused {
        /// The configuration file.
        file: String,
        /// What it lost.
        why: String,
    },
    /// A change that looks like an accident, without `--force`
    /// ([`destructive_change`](super::destructive_change)).
    #[error(
        "{file}: {why}. A half-written or truncated file looks like this; if the change is meant, run `spillway reload --force`"
    )]
    Destructive {
        /// The configuration file.
        file: String,
        /// What it would remove.
        why: String,
    },
    /// The probers refused the new health checks.
    #[error("health checks: {0}")]
    Health(String),
    /// The new snapshot could not be built.
    #[error("{0}")]
    Snapshot(String),
}

/// Why a drain or undrain was refused: a name the configuration does not
/// have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DrainError {
    /// `drain node` names another node.
    #[error("this is node {this:?}, not {name:?}")]
    NotThisNode {
        /// This node's name.
        this: String,
        /// The name given.
        name: String,
    },
    /// No zone or region of that name.
    #[error("unknown {scope} {name:?} (the configuration's {scope}s: {known})")]
    Unknown {
        /// Zone or region.
        scope: crate::drain::Scope,
        /// The name given.
        name: String,
        /// The configuration's names, comma-separated.
        known: String,
    },
}

/// What `spillway reload` says of a reload: its first line and, refused,
/// why.
pub fn reload_text(result: &Result<Published, ReloadError>) -> String {
    match result {
        Ok(p) => format!("reloaded: {p}\n"),
        Err(e) => format!("reload rejected; the running configuration stays:\n{e}\n"),
    }
}

/// The body of HTTP `/status`: `rule <name> <STATE>` lines (rules, then
/// served child rules), what `remote_rule` groups read.
pub fn rule_states_text(states: &[(String, Aggregate)]) -> String {
    states
        .iter()
        .map(|(rule, state)| format!("rule {rule} {state}\n"))
        .collect()
}

/// The flow table's use, as `status` shows it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlowUse {
    /// Live entries.
    pub live: usize,
    /// … of which half-open TCP.
    pub half_open: usize,
    /// Entries it holds at most.
    pub capacity: usize,
    /// Where its memory is ([`FlowTable::memory`]).
    pub memory: &'static str,
}

impl FlowUse {
    /// `table`'s use now (a scan of the whole table: for `status`, not for
    /// every tick).
    pub fn of(table: &FlowTable) -> FlowUse {
        let o = table.occupancy();
        FlowUse {
            live: o.live,
            half_open: o.half_open,
            capacity: table.capacity(),
            memory: table.memory(),
        }
    }
}

impl Core {
    /// `spillway status` at `now`, with the flow table's use (the table is
    /// the shell's, shared with workers).
    pub fn status(&mut self, now: Duration, flows: FlowUse) -> crate::report::Status {
        self.advance(now);
        self.status_report(flows)
    }

    /// A reload at `now` (`spillway reload [--force]`, SIGHUP): the
    /// configuration file as the shell read it, or why it could not. With
    /// `force`, also a configuration that
    /// [`destructive_change`](super::destructive_change) would refuse. May
    /// ask the probers to follow the new configuration.
    pub fn reload(
        &mut self,
        now: Duration,
        loaded: Result<config::Loaded, String>,
        force: bool,
        probes: &mut dyn Probes,
    ) -> Result<Published, ReloadError> {
        self.advance(now);
        self.config_loaded(loaded, force, false, probes)
    }

    /// The file watch saw the configuration file change and settle, and
    /// read it (or could not): applied like a reload, unless it removes a
    /// section or key of the file running or is that file cut short
    /// ([`watch_refusal`](super::watch_refusal)); never forced. An
    /// operator's reload applies such a file.
    pub fn file_changed(
        &mut self,
        now: Duration,
        loaded: Result<config::Loaded, String>,
        probes: &mut dyn Probes,
    ) -> Result<Published, ReloadError> {
        self.advance(now);
        self.config_loaded(loaded, false, true, probes)
    }

    /// `spillway drain|undrain node|zone|region NAME` at `now` (M37): what
    /// it did, or why it was refused; the plans follow at the next tick.
    pub fn drain(
        &mut self,
        now: Duration,
        scope: crate::drain::Scope,
        name: &str,
        on: bool,
    ) -> Result<String, DrainError> {
        self.advance(now);
        self.set_drain(scope, name, on)
    }
}
