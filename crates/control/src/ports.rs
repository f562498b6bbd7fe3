//! What the core asks of its shell: the [`Output`]s it drains after each
//! input (a snapshot to publish, tables to build, a frame or datagram to
//! send, a log line…), the `say!` macro that writes a log line as one, and
//! the [`Probes`] port through which it tells the probers what to probe.
//!
//! Its own module, below [`crate::core`] and [`crate::balance`] (the core's
//! health and locality part), which both write outputs: neither imports
//! the other for them, so the two make no circle.

use dataplane::Snapshot;
use dataplane::snapshot::TableKey;
use health::HealthSnapshot;
use std::sync::Arc;

use crate::remote::RemoteKey;

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
    /// only with `[bgp]`.
    Announce(crate::announce::Desired),
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
/// own files (`control::core::…`) all write as `control::core`, the module
/// they were before the core was split in files, so that one target still
/// names (and filters) every line the core writes; other modules
/// (`control::balance`) write as themselves.
pub(crate) fn log_target(module: &'static str) -> &'static str {
    if module.starts_with("control::core::") {
        "control::core"
    } else {
        module
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
                target: "control::ports::tests",
                ..
            }]
        ));
        assert_eq!(log_target("control::core::reload"), "control::core");
        assert_eq!(log_target("control::core"), "control::core");
        assert_eq!(log_target("control::balance"), "control::balance");
        assert_eq!(log_target("control::core_x"), "control::core_x");
    }
}
