//! The control commands whose answers are the core's business
//! ([`Command`]), what it answers ([`Answer`]), and [`Core::command`],
//! which hands each command to the concern it belongs to (status, rule
//! states, reload, drain).

use std::time::Duration;

use flowtable::FlowTable;
use health::Aggregate;

use super::{Core, Probes, Published};

/// A control command whose answer is the core's business: `spillway
/// status`, HTTP `/status`, and reloads (`spillway reload [--force]`,
/// SIGHUP, the file watch). The shell parses requests and answers those
/// made of state it owns itself (`stats`, `flows`, `/metrics`).
// A command is made once per request and moved once: boxing the loaded
// configuration would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Command {
    /// `spillway status`, with the flow table's use now (the table is the
    /// shell's, shared with workers).
    Status {
        /// The flow table's use.
        flows: FlowUse,
    },
    /// HTTP `GET /status`: every forwarding rule's exported state (M21).
    RuleStates,
    /// A reload: the configuration file as the shell read it (or why it
    /// could not). With `force`, also a configuration that
    /// [`destructive_change`](super::destructive_change) would refuse.
    Reload {
        /// The file, loaded.
        loaded: Result<config::Loaded, String>,
        /// `spillway reload --force`.
        force: bool,
    },
    /// The file watch saw the configuration file change and settle, and
    /// read it (or could not): applied like a reload, unless it removes a
    /// section or key of the file running or is that file cut short
    /// ([`watch_refusal`](super::watch_refusal)); never forced. An
    /// operator's reload (`spillway reload`, SIGHUP) applies such a file.
    FileChanged {
        /// The file, loaded.
        loaded: Result<config::Loaded, String>,
    },
    /// `spillway drain|undrain node|zone|region NAME` (M37).
    Drain {
        /// What it names.
        scope: crate::drain::Scope,
        /// The node's, zone's or region's name.
        name: String,
        /// Drain (true) or undrain.
        on: bool,
    },
}

/// The core's answer to a [`Command`]: what it found or did, and
/// ([`Answer::text`]) how the daemon words it.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// The `status` report.
    Status(Box<crate::report::Status>),
    /// Every forwarding rule's exported state, in configuration order.
    RuleStates(Vec<(String, Aggregate)>),
    /// What became of a reload: live, or waiting for large Maglev tables;
    /// or every error (the running configuration stays).
    Reload(Result<Published, String>),
    /// What a drain or undrain did, or why it was refused (an unknown
    /// name).
    Drain(Result<String, String>),
}

impl Answer {
    /// Whether the command succeeded (the control socket's `ok` / `error`).
    pub fn ok(&self) -> bool {
        !matches!(self, Answer::Reload(Err(_)) | Answer::Drain(Err(_)))
    }

    /// The answer for people: what the control socket sends after its
    /// `ok` / `error` line, and the body of HTTP `/status` (`rule <name>
    /// <STATE>` lines, what `remote_rule` groups read).
    pub fn text(&self) -> String {
        match self {
            Answer::Status(s) => s.to_string(),
            Answer::RuleStates(states) => states
                .iter()
                .map(|(rule, state)| format!("rule {rule} {state}\n"))
                .collect(),
            Answer::Reload(Ok(p)) => format!("reloaded: {p}\n"),
            Answer::Reload(Err(e)) => {
                format!("reload rejected; the running configuration stays:\n{e}\n")
            }
            Answer::Drain(Ok(t) | Err(t)) => format!("{t}\n"),
        }
    }
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
    /// Input: a control command at `now`; its answer. A reload may ask the
    /// probers to follow the new configuration.
    pub fn command(&mut self, now: Duration, cmd: Command, probes: &mut dyn Probes) -> Answer {
        self.advance(now);
        match cmd {
            Command::Status { flows } => Answer::Status(Box::new(self.status(flows))),
            Command::RuleStates => Answer::RuleStates(self.rule_states()),
            Command::Reload { loaded, force } => {
                Answer::Reload(self.config_loaded(loaded, force, false, probes))
            }
            Command::FileChanged { loaded } => {
                Answer::Reload(self.config_loaded(loaded, false, true, probes))
            }
            Command::Drain { scope, name, on } => Answer::Drain(self.set_drain(scope, &name, on)),
        }
    }
}
