//! What the core asks of its shell: the [`Output`]s it drains after each
//! input (a snapshot to publish, tables to build, a frame or datagram to
//! send, a log line…), the `say!` macro that writes a log line as one, the
//! [`Probes`] port through which it tells the probers what to probe and
//! reads their verdicts, and the [`Shell`] every driver of the core (the
//! daemon, `spillway replay`, the simulation) is: what carries the outputs
//! out.
//!
//! Its own module, below [`crate::core`] and [`crate::balance`] (the core's
//! health and locality part), which both write outputs: neither imports
//! the other for them, so the two make no circle.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use dataplane::Snapshot;
use dataplane::snapshot::TableKey;
use health::{HealthSnapshot, State};
use maglev::MaglevTable;

/// A remote rule: where its state is published, and its name there.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RemoteKey {
    /// `http://host:port/status`.
    pub url: String,
    /// The rule's name on the remote.
    pub rule: String,
}

/// What the core asks its shell to do.
#[derive(Debug)]
pub enum Output {
    /// Make this snapshot the one workers use.
    Publish(Arc<Snapshot>),
    /// Build these Maglev tables (off the loop: they are large) and hand
    /// them back with [`Core::tables_built`](crate::Core::tables_built)
    /// and the same `build`.
    BuildTables {
        /// Names this build in
        /// [`Core::tables_built`](crate::Core::tables_built).
        build: u64,
        /// The tables to build.
        tables: Vec<TableKey>,
    },
    /// Reload when the configuration file changes, or stop doing so (the
    /// accepted configuration's `[control] watch_config`).
    Watch(bool),
    /// Send this Ethernet frame on port `port` (neighbour requests and
    /// announcements, M47): the shell queues it for a worker, which owns
    /// the port.
    Transmit {
        /// Index of the port in `[[ports]]`.
        port: usize,
        /// The whole frame (at most [`dataplane::neighbour::FRAME_MAX`]
        /// bytes).
        frame: Vec<u8>,
    },
    /// Send this flow-sync datagram (M36) to peer `to` from the
    /// `[flow_sync] listen` socket.
    SyncSend {
        /// The peer.
        to: std::net::SocketAddr,
        /// The datagram.
        datagram: Vec<u8>,
    },
    /// Write this log line (`log::log!` with this level and target: the
    /// core's module, as if it had logged it itself).
    Log {
        /// Its level.
        level: log::Level,
        /// The module that wrote it (`control::core`, `control::balance`).
        target: &'static str,
        /// The message.
        text: String,
    },
    /// Make the BGP speaker announce exactly the VIPs this decision marks
    /// announced (M34, M35): given once at start and whenever it changes,
    /// only with `[bgp]`; with the routes that announces
    /// ([`crate::announce::routes`]).
    Announce(crate::announce::Desired, Vec<config::values::Prefix>),
}

/// Writes a log line into `$out` (a `Vec<Output>`) as [`Output::Log`], the
/// calling module as its target ([`log_target`]): `say!(out, Warn, "…{x}")`
/// is what `log::warn!("…{x}")` was.
macro_rules! say {
    ($out:expr, $level:ident, $($arg:tt)+) => {
        $out.push($crate::ports::Output::Log {
            level: log::Level::$level,
            target: $crate::ports::log_target(module_path!()),
            text: format!($($arg)+),
        })
    };
}
pub(crate) use say;

/// The target of a log line that [`say!`] writes from `module`: the core's
/// own files (`control_core::core::…`) all write as `control::core`, and
/// its health part as `control::balance`: the targets they had when the
/// core was one file of the `control` crate, which operators' log filters
/// name; other modules write as themselves.
pub(crate) fn log_target(module: &'static str) -> &'static str {
    match module {
        "control_core::core" => "control::core",
        m if m.starts_with("control_core::core::") => "control::core",
        "control_core::balance" => "control::balance",
        m => m,
    }
}

/// The probers, as the core reaches them: health checks and remote rule
/// polls run elsewhere (threads, sockets); the core only says what to probe.
pub trait Probes {
    /// Probe `targets` from now on (a target that stays keeps its state);
    /// returns the statuses as they are now, keyed by the targets'
    /// endpoints. An error leaves the previous targets probed.
    fn set_targets(
        &mut self,
        targets: Vec<health::Target>,
    ) -> Result<HealthSnapshot, health::HealthError>;

    /// Poll these remote rules from now on (their verdicts come back with
    /// [`Core::remote_verdicts`](crate::Core::remote_verdicts); UNKNOWN
    /// until the first).
    fn poll_remotes(&mut self, keys: Vec<RemoteKey>);

    /// Every target's status, if any changed since `generation` (the
    /// health generation the core last saw); `None` when none did.
    fn verdicts_since(&self, generation: u64) -> Option<HealthSnapshot>;

    /// Remote rule `key`'s latest verdict, and why.
    fn remote_verdict(&self, key: &RemoteKey) -> (State, String);
}

/// Maglev tables built off the loop, with what each was built from.
pub type BuiltTables = Vec<(TableKey, Arc<MaglevTable>)>;

/// Builds the Maglev tables an [`Output::BuildTables`] asks for (the daemon
/// does it on a thread, `replay` and the simulation at once); the result is
/// what [`Core::tables_built`](crate::Core::tables_built) takes.
pub fn build_tables(keys: Vec<TableKey>) -> Result<BuiltTables, String> {
    keys.into_iter()
        .map(|k| match k.build() {
            Ok(t) => Ok((k, Arc::new(t))),
            Err(e) => Err(format!("a Maglev table of {} slots: {e}", k.size)),
        })
        .collect()
}

/// A driver of the core: what carries out its [`Output`]s, one method
/// each, and owns its probers. The daemon, `spillway replay` and the
/// simulation each implement it, and [`Core::step`](crate::Core::step) and
/// [`Core::carry_out`](crate::Core::carry_out) call it: the order of a
/// management tick and of its outputs is the core's, not each driver's.
pub trait Shell {
    /// The probers the core tells what to probe and reads verdicts from.
    fn probes(&mut self) -> &mut dyn Probes;

    /// Makes `snapshot` the one workers use.
    fn publish(&mut self, snapshot: Arc<Snapshot>);

    /// Builds `tables` for `build`. `Some` is what became of them when that
    /// is known at once (built on the spot, or a build that could not
    /// start); `None` when they come later, through
    /// [`Core::tables_built`](crate::Core::tables_built).
    fn build_tables(
        &mut self,
        build: u64,
        tables: Vec<TableKey>,
    ) -> Option<Result<BuiltTables, String>>;

    /// Sends `frame` on port `port` ([`Output::Transmit`]).
    fn transmit(&mut self, port: usize, frame: Vec<u8>);

    /// Sends a flow-sync `datagram` to peer `to` ([`Output::SyncSend`]).
    fn sync_send(&mut self, to: SocketAddr, datagram: Vec<u8>);

    /// Hands each flow-sync datagram received since the last step to
    /// `take` (a bounded number). Nothing, for a shell without peers.
    fn sync_receive(&mut self, _now: Duration, _take: &mut dyn FnMut(SocketAddr, &[u8])) {}

    /// Makes the BGP speaker announce `routes`: the VIPs `desired` marks
    /// announced, each as its prefix (/32, /128, or a VIP prefix's own).
    fn announce(&mut self, desired: crate::announce::Desired, routes: Vec<config::values::Prefix>);

    /// Reloads when the configuration file changes, or stops doing so.
    fn watch(&mut self, on: bool);

    /// Writes a log line the core wrote at `now`.
    fn log(&mut self, now: Duration, level: log::Level, target: &'static str, text: String);
}

#[cfg(test)]
mod tests {
    use super::{Output, log_target};

    /// The core's lines keep the target they had when the core was one
    /// file; other modules' lines are their own.
    #[test]
    fn the_core_logs_as_one_module() {
        // A line written here is this module's; one written in any of the
        // core's files is the core's.
        let mut out = Vec::new();
        say!(out, Info, "a line");
        assert!(matches!(
            out.as_slice(),
            [Output::Log {
                target: "control_core::ports::tests",
                ..
            }]
        ));
        assert_eq!(log_target("control_core::core::reload"), "control::core");
        assert_eq!(log_target("control_core::core"), "control::core");
        assert_eq!(log_target("control_core::balance"), "control::balance");
        assert_eq!(log_target("control_core::core_x"), "control_core::core_x");
    }
}
