//! The management core's decisions, without I/O (sans-I/O): a state machine
//! fed with time and inputs — a management step ([`Core::step`]: the flow
//! table aged, health and remote verdicts, periodic work), Maglev tables
//! built, control commands (a configuration loaded or not, `status`, a
//! drain) — that says what to do as [`Output`]s its [`Shell`] carries out:
//! publish a snapshot, build tables off the loop, follow the file or not,
//! log a line; and answers each command with a typed result.
//!
//! Nothing here reads a clock, sleeps, spawns a thread or touches a file or
//! socket: time is always an argument (`now`, since the daemon started), and
//! the probers are reached through the [`Probes`] port. The daemon
//! (`control::daemon`) owns threads, sockets, clocks and files and feeds
//! this; the simulation harness (`tests/sim`) feeds it a virtual clock and
//! scripted verdicts. Log lines are outputs too ([`Output::Log`]): the shell
//! writes them, the harness reads them.
//!
//! # Layout
//!
//! The [`Core`] type, its state, its start and its periodic work are here; each
//! other concern is a file of its own, with the `impl Core` block of its
//! inputs and accessors:
//!
//! - what the core asks of its shell — [`Output`]s, the [`Shell`] that
//!   carries them out, the `say!` macro that writes log lines as outputs,
//!   the [`Probes`] port — is
//!   [`crate::ports`], below both the core and its health part
//!   ([`crate::balance`]), re-exported here;
//! - `step`: one management tick in the order every driver shares
//!   ([`Core::step`]) and the one drain of outputs ([`Core::carry_out`]);
//! - `commands`: the control commands, one typed method each
//!   ([`Core::reload`], [`Core::file_changed`], [`Core::status`],
//!   [`Core::drain`]), their errors ([`ReloadError`], [`DrainError`]) and
//!   how their answers are worded;
//! - `reload`: a configuration loaded, validated, guarded
//!   ([`destructive_change`], [`watch_refusal`]) and made live, or refused;
//! - `publish`: snapshots made of the configuration, health and plans, at
//!   once or once their Maglev tables are built off the loop
//!   ([`Output::BuildTables`], [`build_tables`], [`Core::tables_built`]);
//! - `health_states`: health and remote verdicts in, rule states out, and
//!   the transitions of derived states;
//! - `draining`: drain and undrain (M37), shutdown (M39);
//! - `bgp`: which VIPs the BGP speaker announces (M35);
//! - `neighbours`: next hops resolved and addresses announced on L2 (M47);
//! - `flow_sync`: flow-state sync with the peers (M36) and the cluster's
//!   rates (M25);
//! - `vrrp`: VRRP groups (`[[vrrp]]`) fed with advertisements and time;
//! - `status`: the `spillway status` report.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use config::Compiled;
use dataplane::{BackendState, Local, Snapshot, SnapshotBuilder, Tick, WorkerCounters};

use crate::balance::Balance;
use crate::neighbours::{Announcer, Neighbours, Timings};

mod bgp;
mod commands;
mod draining;
mod flow_sync;
mod health_states;
mod neighbours;
mod publish;
mod reload;
mod status;
mod step;
mod vrrp;

pub(crate) use crate::ports::say;
pub use crate::ports::{Output, Probes, Shell};
pub use commands::{DrainError, FlowUse, ReloadError, reload_text, rule_states_text};
pub use publish::{BuiltTables, INLINE_TABLE_SLOTS, Published, build_tables};
pub use reload::{destructive_change, watch_refusal};
pub use step::{Ageing, Inputs, SWEEP_BUDGET};

use self::neighbours::{announced, next_hops};
use self::publish::PendingBuild;

/// The management core's state.
pub struct Core {
    /// The configuration file's name, for messages (never read here).
    path: PathBuf,
    builder: SnapshotBuilder,
    local: Local,
    now: Duration,
    compiled: Arc<Compiled>,
    live: Arc<Snapshot>,
    reloads_ok: u64,
    reloads_failed: u64,
    /// File changes the watch did not apply ([`watch_refusal`]), also
    /// counted in `reloads_failed`.
    watch_refused: u64,
    /// What the file the running configuration came from defines, once
    /// known (the shell tells it at start, every reload after).
    outline: Option<config::Outline>,
    last_error: Option<String>,
    /// When the last reload was accepted or refused (metrics).
    last_reload: Option<Duration>,
    balance: Balance,
    /// Maglev tables being built off the loop, and what the snapshot
    /// waiting for them is made of.
    pending: Option<PendingBuild>,
    builds: u64,
    /// A rebuild was asked for while one was pending: do it after.
    dirty: bool,
    inline_slots: u64,
    /// Next hops and their MACs (M47).
    neighbours: Neighbours,
    /// Gratuitous ARP / unsolicited NA under way.
    announcer: Announcer,
    /// Drained node, zones and regions (M37), by name.
    drained: crate::drain::Drained,
    /// Shutting down (M39): when forwarding stops.
    shutdown_at: Option<Duration>,
    /// The VIPs' BGP announcement (M35).
    announcements: crate::announce::Announcements,
    /// Derived and consumed health states, for their transitions.
    transitions: crate::transitions::Transitions,
    /// Flow-state sync with the peers (M36); `None` without `[flow_sync]`.
    sync: Option<crate::sync::SyncState>,
    /// What the flow table's ageing counted.
    ageing: Ageing,
    /// The VRRP groups (`[[vrrp]]`); none without.
    vrrp: crate::vrrp::Vrrp,
    out: Vec<Output>,
}

impl Core {
    /// The core of a daemon started at `now` with `compiled` (read from
    /// `path`), this node's addresses and the secret of its flow cookies;
    /// its first snapshot is [`Core::live`] (generation 1).
    pub fn start(
        path: &Path,
        compiled: Compiled,
        local: Local,
        cookie_key: dataplane::CookieKey,
        now: Duration,
        probes: &mut dyn Probes,
    ) -> Result<Core, crate::StartError> {
        let compiled = Arc::new(compiled);
        let mut out = Vec::new();
        let balance = Balance::start(&compiled, now, probes, &mut out)?;
        let neighbours = Neighbours::new(
            Timings::from_config(&compiled.settings.neighbours),
            &next_hops(&compiled),
            now,
        );
        let mut local = local;
        local.neighbours = neighbours.resolved();
        let mut announcer = Announcer::default();
        for (port, addr) in announced(&compiled) {
            announcer.announce(now, compiled.settings.neighbours.announce_count, port, addr);
        }
        let vrrp = crate::vrrp::Vrrp::new(self::vrrp::vrrp_specs(&compiled, &local), now, None);
        let mut builder = SnapshotBuilder::with_cookie_key(cookie_key);
        builder.set_vip_plans(balance.vip_plans());
        builder.set_standby(vrrp.standby());
        let snap = builder.build_with_plans(
            compiled.clone(),
            local.clone(),
            |id| balance.endpoint_health(id),
            balance.plans(),
            Tick::at(now).get(),
            1,
        )?;
        let sync = match &compiled.settings.flow_sync {
            Some(_) => {
                let epoch = crate::sync::random_epoch().map_err(crate::StartError::Random)?;
                crate::sync::SyncState::new(&compiled, &compiled.node.name, epoch)
            }
            None => None,
        };
        let mut core = Core {
            path: path.to_owned(),
            builder,
            local,
            now,
            compiled,
            live: Arc::new(snap),
            reloads_ok: 0,
            reloads_failed: 0,
            watch_refused: 0,
            outline: None,
            last_error: None,
            last_reload: None,
            balance,
            pending: None,
            builds: 0,
            dirty: false,
            inline_slots: INLINE_TABLE_SLOTS,
            neighbours,
            announcer,
            drained: crate::drain::Drained::new(),
            shutdown_at: None,
            announcements: crate::announce::Announcements::default(),
            transitions: crate::transitions::Transitions::default(),
            sync,
            ageing: Ageing::default(),
            vrrp,
            out,
        };
        core.neighbours_changed();
        if let Some(s) = &mut core.sync {
            s.learn(&core.compiled, &core.builder);
            let mut sends = Vec::new();
            s.request_dumps(core.now, &mut sends);
            core.send(sends);
        }
        core.announce();
        Ok(core)
    }

    /// The time of the latest input.
    pub fn now(&self) -> Duration {
        self.now
    }

    /// The coarse tick workers stamp flows with (seconds since start).
    pub fn tick_now(&self) -> Tick {
        Tick::at(self.now)
    }

    fn advance(&mut self, now: Duration) {
        // Inputs may come from clocks read at different places: never back.
        self.now = self.now.max(now);
    }

    /// The running configuration (the live one, or the one waiting for its
    /// tables).
    pub fn compiled(&self) -> &Arc<Compiled> {
        &self.compiled
    }

    /// The snapshot last published.
    pub fn live(&self) -> &Arc<Snapshot> {
        &self.live
    }

    /// Each service's latest locality plan (indexed like
    /// [`Core::compiled`]'s services; `None` before the first).
    pub fn plans(&self) -> &[Option<locality::Plan>] {
        self.balance.plans()
    }

    /// The backend slot of `service`'s endpoint `identity`, if it has one.
    pub fn slot_of(&self, service: &str, identity: &str) -> Option<u32> {
        self.builder.slot_of(service, identity)
    }

    /// The periodic part of a [`Core::step`] at `now`: retire draining
    /// backends whose period is over, act on health and remote verdicts,
    /// replan (every [`crate::balance::PLAN_PERIOD`]). `counters`, the
    /// workers' counters summed, is asked for only when plans are
    /// recomputed.
    fn tick(&mut self, now: Duration, counters: impl FnOnce() -> WorkerCounters) {
        self.advance(now);
        let tick = self.tick_now();
        // Rebuild only when a draining backend's period is over (the builder
        // then retires it), not every tick of the draining period.
        let retire_due =
            self.live.backends.iter().any(
                |b| matches!(b.state, BackendState::Draining { until } if tick.reached(until)),
            );
        let replan = self.balance.tick(
            &self.compiled,
            &self.builder,
            self.now,
            counters,
            &mut self.out,
        );
        if let Some(rates) = self.balance.take_measured()
            && let Some(s) = &mut self.sync
        {
            let mut sends = Vec::new();
            s.send_rates(&rates, &mut sends);
            self.send(sends);
        }
        // VRRP first: a group taking over queues its gratuitous ARPs, which
        // the neighbours' announcer sends in this same tick.
        let vrrp = self.vrrp_tick();
        let resolved = self.neighbours_tick();
        if retire_due || replan || resolved || vrrp {
            if let Err(e) = self.publish() {
                say!(self.out, Error, "rebuilding the snapshot: {e}");
            }
        }
        self.announce();
        self.track_states();
    }
}

#[cfg(test)]
mod tests {
    use super::{Output, say};

    /// Every file of the core logs as `control::core` (one target names and
    /// filters all its lines, as when it was one file).
    #[test]
    fn the_core_logs_as_control_core() {
        let mut out = Vec::new();
        say!(out, Info, "a line");
        assert!(matches!(
            out.as_slice(),
            [Output::Log {
                target: "control::core",
                ..
            }]
        ));
    }
}
