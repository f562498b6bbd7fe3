//! The management core's decisions, without I/O (sans-I/O): a state machine
//! fed with time and inputs — a tick, health verdicts, remote rule verdicts,
//! Maglev tables built, control [`Command`]s (a configuration loaded or not,
//! `status`) — that says what to do as [`Output`]s: publish a snapshot,
//! build tables off the loop, follow the file or not, log a line; and
//! answers each command ([`Answer`]) with the text the daemon sends.
//!
//! Nothing here reads a clock, sleeps, spawns a thread or touches a file or
//! socket: time is always an argument (`now`, since the daemon started), and
//! the probers are reached through the [`Probes`] port. The daemon
//! ([`crate::daemon`]) owns threads, sockets, clocks and files and feeds
//! this; the simulation harness (`tests/sim`) feeds it a virtual clock and
//! scripted verdicts. Log lines are outputs too ([`Output::Log`]): the shell
//! writes them, the harness reads them.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use config::Compiled;
use dataplane::snapshot::{TableKey, tick_reached};
use dataplane::{BackendState, EndpointHealth, Local, Snapshot, SnapshotBuilder, WorkerCounters};
use flowtable::FlowTable;
use health::{Aggregate, HealthSnapshot, State};
use maglev::MaglevTable;

use crate::balance::Balance;
use crate::neighbours::{Announcer, Neighbours, Timings};
use crate::remote::RemoteKey;

/// Missing Maglev tables of at most this many slots in all (a few tens of
/// milliseconds of building) are built on the management loop itself.
pub const INLINE_TABLE_SLOTS: u64 = 1 << 21;

/// Maglev tables built off the loop, with what each was built from.
pub type BuiltTables = Vec<(TableKey, Arc<MaglevTable>)>;

/// Builds the Maglev tables an [`Output::BuildTables`] asks for (the shell
/// does it on a thread, `replay` and the simulation at once); the result is
/// what [`Core::tables_built`] takes.
pub fn build_tables(keys: Vec<TableKey>) -> Result<BuiltTables, String> {
    keys.into_iter()
        .map(|k| match k.build() {
            Ok(t) => Ok((k, Arc::new(t))),
            Err(e) => Err(format!("a Maglev table of {} slots: {e}", k.size)),
        })
        .collect()
}

/// What the core asks its shell to do.
#[derive(Debug)]
pub enum Output {
    /// Make this snapshot the one workers use.
    Publish(Arc<Snapshot>),
    /// Build these Maglev tables (off the loop: they are large) and hand
    /// them back with [`Core::tables_built`] and the same `build`.
    BuildTables {
        /// Names this build in [`Core::tables_built`].
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
        $out.push($crate::core::Output::Log {
            level: log::Level::$level,
            target: $crate::core::log_target(module_path!()),
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
    /// [`destructive_change`] would refuse.
    Reload {
        /// The file, loaded.
        loaded: Result<config::Loaded, String>,
        /// `spillway reload --force`.
        force: bool,
    },
    /// The file watch saw the configuration file change and settle, and
    /// read it (or could not): applied like a reload, unless it removes a
    /// section or key of the file running or is that file cut short
    /// ([`watch_refusal`]); never forced. An operator's reload (`spillway
    /// reload`, SIGHUP) applies such a file.
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
    /// [`Core::remote_verdicts`]; UNKNOWN until the first).
    fn poll_remotes(&mut self, keys: Vec<RemoteKey>);
}

/// What became of a snapshot to publish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Published {
    /// Live now, as this generation.
    Live(u32),
    /// Waiting for `tables` Maglev tables (`slots` slots in all) that a
    /// thread is building; it goes live when they are built.
    Building {
        /// Tables being built.
        tables: usize,
        /// Their slots in all.
        slots: u64,
    },
    /// Noted while a build is in progress; published (with whatever tables
    /// it needs) when that build ends.
    Queued,
}

impl std::fmt::Display for Published {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Published::Live(g) => write!(f, "generation {g} is live"),
            Published::Building { tables, slots } => write!(
                f,
                "accepted; it goes live when its {tables} new Maglev table(s) ({slots} slots) are built (see `spillway status`)"
            ),
            Published::Queued => write!(
                f,
                "accepted; it goes live after the Maglev build in progress (see `spillway status`)"
            ),
        }
    }
}

/// A snapshot waiting for its Maglev tables, which the shell builds so that
/// the management loop goes on ageing flows, applying health and answering
/// while they are large (M38, M50).
/// Plans of VIPs of their own: (service index, VIP, plan).
type VipPlans = Vec<(usize, std::net::IpAddr, locality::Plan)>;

struct PendingBuild {
    build: u64,
    compiled: Arc<Compiled>,
    /// Health of every endpoint of `compiled` and the plans, as they were
    /// when the build started: the snapshot is made of these.
    health: Vec<EndpointHealth>,
    plans: Vec<Option<locality::Plan>>,
    /// The VIPs' own plans (M52, M8), as they were then.
    vip_plans: VipPlans,
    started: Duration,
    tables: usize,
    slots: u64,
}

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
    sync: Option<crate::sync::Sync>,
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
        let mut builder = SnapshotBuilder::with_cookie_key(cookie_key);
        builder.set_vip_plans(balance.vip_plans());
        let snap = builder.build_with_plans(
            compiled.clone(),
            local.clone(),
            |id| balance.endpoint_health(id),
            balance.plans(),
            tick(now),
            1,
        )?;
        let sync = match &compiled.settings.flow_sync {
            Some(_) => {
                let epoch = crate::sync::random_epoch().map_err(crate::StartError::Random)?;
                crate::sync::Sync::new(&compiled, &compiled.node.name, epoch)
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

    /// Takes what the core asked for since the last call, in order.
    pub fn outputs(&mut self) -> Vec<Output> {
        std::mem::take(&mut self.out)
    }

    /// Hands every output to `carry_out`, in order, until none is left:
    /// carrying one out may give the core an input (tables built at once, a
    /// build that could not start) that asks for more. What every driver of
    /// the core (the daemon's shell, `replay`, the simulation) runs after an
    /// input.
    pub fn drain(&mut self, mut carry_out: impl FnMut(&mut Core, Output)) {
        loop {
            let outs = self.outputs();
            if outs.is_empty() {
                return;
            }
            for out in outs {
                carry_out(self, out);
            }
        }
    }

    /// Sets the size of table builds made by the core itself (default
    /// [`INLINE_TABLE_SLOTS`]; 0 asks for every missing table with
    /// [`Output::BuildTables`]).
    pub fn build_inline_up_to(&mut self, slots: u64) {
        self.inline_slots = slots;
    }

    /// The time of the latest input.
    pub fn now(&self) -> Duration {
        self.now
    }

    /// The coarse tick workers stamp flows with (seconds since start).
    pub fn tick_now(&self) -> u32 {
        tick(self.now)
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

    /// Whether a snapshot is waiting for Maglev tables built off the loop.
    pub fn building(&self) -> bool {
        self.pending.is_some()
    }

    /// The remote rules to poll.
    pub fn remote_keys(&self) -> &[RemoteKey] {
        self.balance.remote_keys()
    }

    /// The health generation the core last saw (the shell hands over a new
    /// [`HealthSnapshot`] only when the checker's moved past it).
    pub fn health_generation(&self) -> u64 {
        self.balance.health_generation()
    }

    /// Every forwarding rule's exported state (M21).
    pub fn rule_states(&self) -> Vec<(String, Aggregate)> {
        self.balance.rule_states(&self.compiled)
    }

    /// Every probed endpoint's latest status.
    pub fn probed(&self) -> &[health::EndpointStatus] {
        self.balance.probed()
    }

    /// Input: new health statuses (acted on at the next [`Core::tick`]).
    pub fn health(&mut self, now: Duration, h: HealthSnapshot) {
        self.advance(now);
        self.balance.health(h);
    }

    /// Input: the latest verdict on each remote rule and why (acted on at
    /// the next [`Core::tick`]).
    pub fn remote_verdicts(
        &mut self,
        now: Duration,
        state: impl Fn(&RemoteKey) -> (State, String),
    ) {
        self.advance(now);
        self.balance.remote(state);
    }

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

    /// Whether this node is drained (M37): its VIPs are to be withdrawn
    /// from its routers; it forwards as before.
    pub fn node_drained(&self) -> bool {
        self.drained
            .contains(crate::drain::Scope::Node, &self.compiled.node.name)
    }

    /// Whether the daemon is shutting down (M39): its VIPs are to be
    /// withdrawn; it forwards until [`Core::shutdown_due`].
    pub fn shutting_down(&self) -> bool {
        self.shutdown_at.is_some()
    }

    /// What is drained, by name (the shell saves it).
    pub fn drained(&self) -> &crate::drain::Drained {
        &self.drained
    }

    /// Input: the drain state saved by a previous run (names this
    /// configuration lacks are kept: they apply if they come back).
    pub fn restore_drained(&mut self, now: Duration, drained: crate::drain::Drained) {
        self.advance(now);
        for (scope, name) in drained.iter() {
            say!(self.out, Info, "{scope} {name} drained (saved state)");
        }
        self.drained = drained;
        self.balance.set_drained(&self.compiled, &self.drained);
        self.announce();
    }

    /// Input: a shutdown was asked for at `now` (the first SIGTERM): the
    /// node forwards for `period` more, then [`Core::shutdown_due`].
    pub fn shutdown(&mut self, now: Duration, period: Duration) {
        self.advance(now);
        if self.shutdown_at.is_none() {
            self.shutdown_at = Some(self.now.saturating_add(period));
            say!(
                self.out,
                Info,
                "shutting down: VIPs withdrawn, forwarding for {:.1} s more",
                period.as_secs_f64()
            );
            self.announce();
        }
    }

    /// Whether the shutdown's drain period is over (as of the latest input).
    pub fn shutdown_due(&self) -> bool {
        self.shutdown_at.is_some_and(|t| self.now >= t)
    }

    /// `drain` / `undrain`: checks the name against the running
    /// configuration; the plans follow at the next tick.
    fn set_drain(
        &mut self,
        scope: crate::drain::Scope,
        name: &str,
        on: bool,
    ) -> Result<String, String> {
        use crate::drain::Scope;
        let c = &self.compiled;
        let known: Vec<&str> = match scope {
            Scope::Node => vec![c.node.name.as_str()],
            Scope::Zone => c.zones.iter().map(String::as_str).collect(),
            Scope::Region => c.regions.iter().map(String::as_str).collect(),
        };
        // One that a reload removed may still be undrained.
        let undrain_removed = !on && self.drained.contains(scope, name);
        if !known.contains(&name) && !undrain_removed {
            return Err(match scope {
                Scope::Node => format!("this is node {:?}, not {name:?}", c.node.name),
                _ => format!(
                    "unknown {scope} {name:?} (the configuration's {scope}s: {})",
                    known.join(", ")
                ),
            });
        }
        let verb = if on { "drained" } else { "undrained" };
        if !self.drained.set(scope, name, on) {
            return Ok(format!("{scope} {name} was already {verb}"));
        }
        self.balance.set_drained(&self.compiled, &self.drained);
        let what = match (scope, on) {
            (Scope::Node, true) => "its VIPs are withdrawn; forwarding goes on",
            (Scope::Node, false) => "its VIPs are announced again",
            (_, true) => "new connections go elsewhere; established ones stay",
            (_, false) => "it takes new connections again",
        };
        say!(self.out, Info, "{scope} {name} {verb}: {what}");
        // The announcement follows at once, not at the next tick.
        self.announce();
        Ok(format!("{scope} {name} {verb}: {what}"))
    }

    /// A configuration was read (or could not be). Validates it against
    /// the running one and, if it may go live, publishes a snapshot built
    /// from it. Returns what became of it (live, or waiting for large
    /// Maglev tables), or every error (the running configuration stays).
    /// With `force`, also a configuration that [`destructive_change`] would
    /// refuse (`spillway reload --force`). From the file watch (`watch`),
    /// not a file that [`watch_refusal`] refuses.
    fn config_loaded(
        &mut self,
        loaded: Result<config::Loaded, String>,
        force: bool,
        watch: bool,
        probes: &mut dyn Probes,
    ) -> Result<Published, String> {
        let loaded = match loaded {
            Ok(l) => l,
            Err(e) => return Err(self.reload_failed(e)),
        };
        if watch
            && let Some(running) = &self.outline
            && let Some(why) = watch_refusal(running, &loaded.outline)
        {
            self.watch_refused += 1;
            return Err(self.reload_failed(format!(
                "{} changed, and the file watch does not apply it: {why}. A file cut short by a half-done write looks like this; if the change is meant, run `spillway reload` (or send SIGHUP)",
                self.path.display()
            )));
        }
        if let Some(why) = destructive_change(&self.compiled, &loaded.compiled) {
            if !force {
                return Err(self.reload_failed(format!(
                    "{}: {why}. A half-written or truncated file looks like this; if the change is meant, run `spillway reload --force`",
                    self.path.display()
                )));
            }
            say!(self.out, Warn, "reload forced although {why}");
        }
        let restart_needed = settings_needing_restart(&self.compiled, &loaded.compiled);
        let compiled = Arc::new(loaded.compiled);
        if let Err(e) = self
            .balance
            .reload(&compiled, self.now, probes, &mut self.out)
        {
            // Health checks the prober refuses: the whole reload is refused.
            if let Err(h) = self
                .balance
                .reload(&self.compiled, self.now, probes, &mut self.out)
            {
                say!(self.out, Error, "health checks: {h}");
            }
            return Err(self.reload_failed(format!("health checks: {e}")));
        }
        let previous = std::mem::replace(&mut self.compiled, compiled.clone());
        self.neighbours.set_hops(
            Timings::from_config(&compiled.settings.neighbours),
            &next_hops(&compiled),
            self.now,
        );
        self.neighbours_changed();
        match self.publish() {
            Ok(published) => {
                // Addresses served from now on (new VIPs, or those of an
                // availability group this node took over) are announced.
                let old = announced(&previous);
                for (port, addr) in announced(&compiled) {
                    if !old.contains(&(port, addr)) {
                        self.announcer.announce(
                            self.now,
                            compiled.settings.neighbours.announce_count,
                            port,
                            addr,
                        );
                    }
                }
                self.out
                    .push(Output::Watch(compiled.settings.control.watch_config));
                self.outline = Some(loaded.outline);
                self.reloads_ok += 1;
                self.last_error = None;
                self.last_reload = Some(self.now);
                // A changed composite source is UNKNOWN from now (M20).
                self.track_states();
                for w in &loaded.warnings {
                    say!(self.out, Warn, "{}: {w}", self.path.display());
                }
                if let Some(what) = restart_needed {
                    say!(
                        self.out,
                        Warn,
                        "reload: {what} changed; that takes effect at the next restart"
                    );
                }
                Ok(published)
            }
            Err(e) => {
                // The new configuration did not go live: health, locality
                // and next hops follow the running one again.
                self.compiled = previous;
                self.neighbours.set_hops(
                    Timings::from_config(&self.compiled.settings.neighbours),
                    &next_hops(&self.compiled),
                    self.now,
                );
                self.neighbours_changed();
                if let Err(h) = self
                    .balance
                    .reload(&self.compiled, self.now, probes, &mut self.out)
                {
                    say!(self.out, Error, "health checks: {h}");
                }
                Err(self.reload_failed(e))
            }
        }
    }

    fn reload_failed(&mut self, e: String) -> String {
        self.reloads_failed += 1;
        self.last_reload = Some(self.now);
        say!(
            self.out,
            Error,
            "reload rejected; the running configuration stays:\n{e}"
        );
        self.last_error = Some(e.clone());
        e
    }

    /// Publishes a snapshot of the current configuration, health and plans:
    /// at once when the Maglev tables it lacks are small, else once they are
    /// built off the loop. While a build is pending, a new request is noted
    /// and served when it ends (the latest state then).
    fn publish(&mut self) -> Result<Published, String> {
        if self.pending.is_some() {
            self.dirty = true;
            return Ok(Published::Queued);
        }
        let compiled = self.compiled.clone();
        let health: Vec<EndpointHealth> = (0..u32::try_from(compiled.endpoints.len())
            .unwrap_or(u32::MAX))
            .map(|i| {
                self.balance
                    .endpoint_health(config::compiled::EndpointId(i))
            })
            .collect();
        let plans = self.balance.plans().to_vec();
        let vip_plans = self.balance.vip_plans();
        let missing =
            self.builder
                .missing_tables(&compiled, &self.local, captured(&health), &plans);
        let slots: u64 = missing.iter().map(|k| u64::from(k.size)).sum();
        if slots <= self.inline_slots {
            return self
                .assemble(compiled, &health, &plans, vip_plans)
                .map(Published::Live);
        }
        let tables = missing.len();
        self.builds += 1;
        let build = self.builds;
        self.out.push(Output::BuildTables {
            build,
            tables: missing,
        });
        say!(
            self.out,
            Info,
            "building {tables} Maglev table(s), {slots} slots, off the management loop"
        );
        self.pending = Some(PendingBuild {
            build,
            compiled,
            health,
            plans,
            vip_plans,
            started: self.now,
            tables,
            slots,
        });
        Ok(Published::Building { tables, slots })
    }

    /// Builds the snapshot of `compiled` with this health and these plans
    /// (its Maglev tables at hand, or built here) and publishes it.
    fn assemble(
        &mut self,
        compiled: Arc<Compiled>,
        health: &[EndpointHealth],
        plans: &[Option<locality::Plan>],
        vip_plans: VipPlans,
    ) -> Result<u32, String> {
        self.builder.set_vip_plans(vip_plans);
        let snap = self
            .builder
            .build_with_plans(
                compiled,
                self.local.clone(),
                captured(health),
                plans,
                self.tick_now(),
                1,
            )
            .map_err(|e| e.to_string())?;
        let generation = snap.generation;
        let snap = Arc::new(snap);
        self.live = snap.clone();
        self.out.push(Output::Publish(snap));
        if let Some(s) = &mut self.sync {
            s.learn(&self.compiled, &self.builder);
        }
        Ok(generation)
    }

    fn send(&mut self, datagrams: Vec<crate::sync::Datagram>) {
        for (to, datagram) in datagrams {
            self.out.push(Output::SyncSend { to, datagram });
        }
    }

    /// Input: periodic flow-sync work at `now` (M36): the workers' new
    /// entries from `queue` are batched into [`Output::SyncSend`]s, and
    /// dumps asked for continue. Nothing without `[flow_sync]`.
    pub fn flow_sync(
        &mut self,
        now: Duration,
        queue: &dataplane::sync::SyncQueue,
        flows: &FlowTable,
    ) {
        self.advance(now);
        let tick = self.tick_now();
        let Some(s) = &mut self.sync else { return };
        let mut sends = Vec::new();
        s.poll(self.now, tick, queue, flows, &mut sends);
        self.send(sends);
    }

    /// Input: a flow-sync datagram received from `from` (M36). Only a
    /// configured peer's, authentic, in its session and never seen before
    /// (M54), is taken: its entries go into `flows` where their key is
    /// absent, a dump request starts a paced dump, its measured rates count
    /// at the next planning (M25); a hello is answered.
    pub fn sync_received(
        &mut self,
        now: Duration,
        from: std::net::SocketAddr,
        datagram: &[u8],
        flows: &FlowTable,
    ) {
        self.advance(now);
        let tick = self.tick_now();
        let Some(s) = &mut self.sync else { return };
        let mut sends = Vec::new();
        let news = s.received(
            self.now,
            from,
            datagram,
            &self.live,
            &self.builder,
            flows,
            tick,
            &mut sends,
        );
        self.send(sends);
        match news {
            Some(crate::sync::PeerNews::Rates(rates)) => {
                self.balance.peer_rates(from, self.now, &rates);
            }
            Some(crate::sync::PeerNews::Leaving) => {
                self.balance.peer_left(from);
                say!(
                    self.out,
                    Info,
                    "cluster: peer {from} is leaving; its share of capacity is released"
                );
            }
            None => {}
        }
    }

    /// The node is about to exit (graceful or not): tells the flow-sync
    /// peers, so they stop holding its share of capacity (M25).
    pub fn leave(&mut self, now: Duration) {
        self.advance(now);
        if let Some(s) = &mut self.sync {
            let mut sends = Vec::new();
            s.leave(&mut sends);
            self.send(sends);
        }
    }

    /// The cluster as counted for `RATE` capacity now (M25 with M34).
    pub fn cluster(&self) -> crate::report::Cluster {
        self.balance.cluster(self.now)
    }

    /// The flow-sync counters, with `[flow_sync]`.
    pub fn sync_counters(&self) -> Option<crate::sync::SyncCounters> {
        self.sync.as_ref().map(crate::sync::Sync::counters)
    }

    /// Input: the tables of [`Output::BuildTables`] `build` are built (or
    /// could not be). Publishes the snapshot waiting for them, unless a
    /// newer configuration was accepted meanwhile (then that one, never the
    /// superseded one); then whatever was asked for meanwhile.
    pub fn tables_built(
        &mut self,
        now: Duration,
        build: u64,
        built: Result<BuiltTables, String>,
        probes: &mut dyn Probes,
    ) {
        self.advance(now);
        if self.pending.as_ref().is_none_or(|p| p.build != build) {
            return;
        }
        let Some(p) = self.pending.take() else {
            return;
        };
        let asked = std::mem::take(&mut self.dirty);
        // A reload accepted while the tables were built (a revert, say)
        // replaces the configuration they were built for.
        let superseded = !Arc::ptr_eq(&p.compiled, &self.compiled);
        let result = built.and_then(|tables| {
            self.builder.add_tables(tables);
            if superseded {
                return Ok(None);
            }
            self.assemble(p.compiled.clone(), &p.health, &p.plans, p.vip_plans.clone())
                .map(Some)
        });
        match result {
            Ok(Some(generation)) => say!(
                self.out,
                Info,
                "generation {generation} live: {} Maglev table(s) built in {:.1} s",
                p.tables,
                self.now.saturating_sub(p.started).as_secs_f64()
            ),
            Ok(None) => say!(
                self.out,
                Info,
                "{} Maglev table(s) built for a configuration replaced meanwhile; publishing the current one",
                p.tables
            ),
            Err(e) if superseded => say!(
                self.out,
                Warn,
                "building Maglev tables for a configuration replaced meanwhile: {e}"
            ),
            Err(e) => {
                self.build_failed(&e, probes);
                if !asked {
                    return;
                }
            }
        }
        if asked || superseded {
            if let Err(e) = self.publish() {
                self.build_failed(&e, probes);
            }
        }
    }

    /// The current configuration cannot go live (cannot happen with a
    /// validated one): the running snapshot stays, and health and locality
    /// follow its configuration again.
    fn build_failed(&mut self, e: &str, probes: &mut dyn Probes) {
        say!(self.out, Error, "building the snapshot: {e}");
        let live = self.live.compiled.clone();
        if !Arc::ptr_eq(&live, &self.compiled) {
            self.compiled = live;
            if let Err(h) = self
                .balance
                .reload(&self.compiled, self.now, probes, &mut self.out)
            {
                say!(self.out, Error, "health checks: {h}");
            }
            self.reloads_failed += 1;
            self.last_reload = Some(self.now);
            self.last_error = Some(format!("the reloaded configuration could not go live: {e}"));
        }
    }

    /// Input: periodic work at `now`: retire draining backends whose period
    /// is over, act on health and remote verdicts, replan (every
    /// [`crate::balance::PLAN_PERIOD`]). `counters`, the workers' counters
    /// summed, is asked for only when plans are recomputed.
    pub fn tick(&mut self, now: Duration, counters: impl FnOnce() -> WorkerCounters) {
        self.advance(now);
        let tick = self.tick_now();
        // Rebuild only when a draining backend's period is over (the builder
        // then retires it), not every tick of the draining period.
        let retire_due = self.live.backends.iter().any(
            |b| matches!(b.state, BackendState::Draining { until } if tick_reached(tick, until)),
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
        let resolved = self.neighbours_tick();
        if retire_due || replan || resolved {
            if let Err(e) = self.publish() {
                say!(self.out, Error, "rebuilding the snapshot: {e}");
            }
        }
        self.announce();
        self.track_states();
    }

    /// Logs (once) and counts every change of a composite's source, a
    /// composite, a rule's exported state and a followed remote rule.
    fn track_states(&mut self) {
        let states = self.balance.derived_states(&self.compiled);
        let names: std::collections::HashSet<(crate::transitions::Kind, &str)> =
            states.iter().map(|(k, n, _)| (*k, n.as_str())).collect();
        self.transitions.retain(|k, n| names.contains(&(k, n)));
        for (kind, name, now) in &states {
            if let Some(from) = self.transitions.observe(*kind, name, *now) {
                say!(
                    self.out,
                    Info,
                    "health: {} {name} {from} -> {now}",
                    kind.as_str()
                );
            }
        }
    }

    /// The transitions of derived and consumed health states (metrics).
    pub fn transitions(&self) -> &crate::transitions::Transitions {
        &self.transitions
    }

    /// Decides the VIPs' announcement (M35) from the rules' exported
    /// states; a change is logged (once per VIP) and output as
    /// [`Output::Announce`]. Without `[bgp]` nothing is announced (and
    /// what was, after a reload dropped `[bgp]`, is withdrawn).
    fn announce(&mut self) {
        use crate::announce::{NodeState, Policy, desired};
        let next = match Policy::of(&self.compiled) {
            Some(policy) => {
                let health: Vec<Aggregate> =
                    self.rule_states().into_iter().map(|(_, a)| a).collect();
                let node = NodeState {
                    drained: self.node_drained(),
                    shutting_down: self.shutting_down(),
                };
                desired(&self.compiled, &health, node, policy)
            }
            None if self.announcements.current().is_none() => return,
            None => Vec::new(),
        };
        if let Some(lines) = self.announcements.update(next.clone()) {
            for l in lines {
                say!(self.out, Info, "bgp: {l}");
            }
            self.out.push(Output::Announce(next));
        }
    }

    /// VIPs announced and withdrawn since start (M35).
    pub fn announcement_counts(&self) -> (u64, u64) {
        (
            self.announcements.announced_total,
            self.announcements.withdrawn_total,
        )
    }

    /// The announcement decision in force (`None`: no `[bgp]`).
    pub fn announcement(&self) -> Option<&crate::announce::Desired> {
        self.announcements.current()
    }

    /// Input: what the data plane saw of neighbours, as (port, address,
    /// MAC) (M47). A next hop resolved, or a new MAC, republishes the
    /// snapshot at once.
    pub fn sightings(
        &mut self,
        now: Duration,
        seen: impl IntoIterator<Item = (usize, std::net::IpAddr, wire::ethernet::MacAddr)>,
    ) {
        self.advance(now);
        let mut changed = false;
        for (port, ip, mac) in seen {
            if self.neighbours.sighting(self.now, port, ip, mac) {
                say!(
                    self.out,
                    Info,
                    "neighbour {ip} on port {port} is at {}",
                    mac_text(mac)
                );
                changed = true;
            }
        }
        if changed {
            self.neighbours_changed();
            if let Err(e) = self.publish() {
                say!(self.out, Error, "rebuilding the snapshot: {e}");
            }
        }
    }

    /// The neighbour table (status, metrics).
    pub fn neighbours(&self) -> &Neighbours {
        &self.neighbours
    }

    /// Requests and announcements due now; whether the resolved MACs
    /// changed (a next hop failed).
    fn neighbours_tick(&mut self) -> bool {
        let mut ask = Vec::new();
        let changed = self.neighbours.tick(self.now, &mut ask);
        let ports = &self.compiled.settings.ports;
        for hop in ask {
            let Some(p) = ports.get(hop.port) else {
                continue;
            };
            let mac = self.port_mac(hop.port);
            let mut buf = [0u8; dataplane::neighbour::FRAME_MAX];
            let built = match hop.addr {
                std::net::IpAddr::V4(target) => {
                    let src = first_v4(p).unwrap_or(std::net::Ipv4Addr::UNSPECIFIED);
                    wire::neighbour::arp_request(&mut buf, mac, src, target)
                }
                std::net::IpAddr::V6(target) => match first_v6(p) {
                    Some(src) => {
                        wire::neighbour::neighbour_solicitation(&mut buf, mac, src, target)
                    }
                    None => continue,
                },
            };
            if let Ok(n) = built {
                self.out.push(Output::Transmit {
                    port: hop.port,
                    frame: buf[..n].to_vec(),
                });
            }
        }
        let mut due = Vec::new();
        self.announcer.tick(
            self.now,
            self.compiled.settings.neighbours.announce_interval.0,
            &mut due,
        );
        for (port, addr) in due {
            let mac = self.port_mac(port);
            let mut buf = [0u8; dataplane::neighbour::FRAME_MAX];
            let built = match addr {
                std::net::IpAddr::V4(a) => wire::neighbour::gratuitous_arp(&mut buf, mac, a),
                std::net::IpAddr::V6(a) => wire::neighbour::unsolicited_advert(&mut buf, mac, a),
            };
            if let Ok(n) = built {
                self.out.push(Output::Transmit {
                    port,
                    frame: buf[..n].to_vec(),
                });
            }
        }
        if changed {
            for e in self.neighbours.entries() {
                if e.state == crate::neighbours::State::Failed && e.mac.is_none() {
                    say!(
                        self.out,
                        Warn,
                        "neighbour {} on port {} does not answer: packets for it are dropped (no_neighbour)",
                        e.hop.addr,
                        e.hop.port
                    );
                }
            }
            self.neighbours_changed();
        }
        changed
    }

    /// The neighbour table changed: the snapshot's MACs, and locality's
    /// view of which endpoints can take flows.
    fn neighbours_changed(&mut self) {
        self.local.neighbours = self.neighbours.resolved();
        let unresolved = self
            .compiled
            .endpoints
            .iter()
            .map(|ep| !self.local.endpoint_resolved(&self.compiled, ep))
            .collect();
        self.balance.set_unresolved(unresolved);
    }

    fn port_mac(&self, port: usize) -> wire::ethernet::MacAddr {
        self.local
            .port_macs
            .get(port)
            .copied()
            .unwrap_or(self.local.mac)
    }

    /// `spillway status`.
    fn status(&self, flows: FlowUse) -> crate::report::Status {
        use crate::report;
        let snap = &self.live;
        let name = |v: &[String], i: usize| v.get(i).map_or("?", String::as_str).to_owned();
        let mut st = report::Status {
            node: self.compiled.node.name.clone(),
            region: name(&self.compiled.regions, self.compiled.node.region.index()),
            zone: name(&self.compiled.zones, self.compiled.node.zone.index()),
            availability_group: self.compiled.node.availability_group,
            uptime_s: self.tick_now(),
            generation: snap.generation,
            reloads_ok: self.reloads_ok,
            reloads_rejected: self.reloads_failed,
            flow_table: report::FlowTable {
                live: flows.live,
                capacity: flows.capacity,
                half_open: flows.half_open,
                memory: flows.memory,
            },
            building: self.pending.as_ref().map(|p| report::Building {
                tables: p.tables,
                slots: p.slots,
                seconds: self.now.saturating_sub(p.started).as_secs_f64(),
            }),
            rules: Vec::new(),
            // The live snapshot's own configuration names its services (a
            // reloaded one may still be waiting for its tables).
            services: snap
                .compiled
                .services
                .iter()
                .zip(&snap.services)
                .map(|(svc, plan)| report::Service {
                    name: svc.name.clone(),
                    delivery: svc.delivery.to_string(),
                    eligible_backends: Some(plan.eligible_slots().len()),
                    health: None,
                    eligibility: None,
                    degraded: false,
                    overloaded: false,
                    regions: Vec::new(),
                })
                .collect(),
            drain_ignored: Vec::new(),
            backends: snap
                .backends
                .iter()
                .enumerate()
                .map(|(i, b)| {
                    let (state, until) = match b.state {
                        BackendState::Active => ("active", None),
                        BackendState::Unhealthy { until } => ("unhealthy", Some(until)),
                        BackendState::Draining { until } => ("draining", Some(until)),
                        BackendState::Removed => ("removed", None),
                    };
                    report::Backend {
                        index: i,
                        address: b.addr,
                        address6: b.v6.as_ref().map(|p| p.addr),
                        state,
                        until,
                        // M47: its next hop has no MAC: no new flows, its
                        // packets dropped.
                        neighbour_resolved: (b.mac != [0; 6]
                            && b.v6.as_ref().is_none_or(|p| p.mac != [0; 6]))
                            || b.state == BackendState::Removed,
                    }
                })
                .collect(),
            // M31: an unresolved endpoint's traffic is not recognised.
            gateways: snap
                .gateways
                .iter()
                .map(|g| report::Gateway {
                    address: g.address,
                    id: g.id,
                    rule: snap
                        .compiled
                        .children
                        .get(g.child)
                        .map_or("?", |c| c.name.as_str())
                        .to_owned(),
                    port: g.port,
                    mac: (g.mac != [0; 6]).then(|| mac_text(g.mac)),
                })
                .collect(),
            neighbours: self
                .neighbours
                .entries()
                .iter()
                .map(|e| report::Neighbour {
                    address: e.hop.addr,
                    port: e.hop.port,
                    state: e.state.name(),
                    mac: e.mac.map(mac_text),
                })
                .collect(),
            neighbour_totals: None,
            remote_rules: Vec::new(),
            health: Vec::new(),
            shutting_down_s: self
                .shutdown_at
                .map(|t| t.saturating_sub(self.now).as_secs_f64().ceil()),
            drained: self
                .drained
                .iter()
                .map(|(scope, name)| report::Drained {
                    scope: scope.to_string(),
                    name: name.to_string(),
                })
                .collect(),
            flow_sync: self.sync.as_ref().map(crate::sync::Sync::status),
            cluster: self.balance.cluster(self.now),
            bgp: None,
            speaker: None,
            last_reload_error: self.last_error.clone(),
        };
        let n = &self.neighbours;
        if !n.entries().is_empty() || n.ignored > 0 {
            st.neighbour_totals = Some(report::NeighbourTotals {
                resolved: n.resolved_total,
                failed: n.failed_total,
                mac_changes: n.mac_changes,
                ignored: n.ignored,
            });
        }
        self.balance.status(&self.compiled, &mut st);
        if let Some(d) = self.announcements.current() {
            let (up, down) = self.announcement_counts();
            st.bgp = Some(report::Bgp {
                announcements: up,
                withdrawals: down,
                vips: d
                    .iter()
                    .map(|(vip, why)| report::BgpVip {
                        vip: *vip,
                        announced: why.announced(),
                        why: why.to_string(),
                    })
                    .collect(),
            });
            for v in st.rules.iter_mut().flat_map(|r| r.vips.iter_mut()) {
                if v.served {
                    v.bgp = d
                        .iter()
                        .find(|(a, _)| *a == v.vip)
                        .map(|(_, w)| w.to_string());
                }
            }
        }
        st
    }

    /// When (core time) the last reload was accepted or refused.
    pub fn last_reload(&self) -> Option<Duration> {
        self.last_reload
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

    /// What the file the running configuration came from defines (the
    /// shell reads the file at start; every accepted reload sets it after).
    pub fn set_outline(&mut self, outline: config::Outline) {
        self.outline = Some(outline);
    }

    /// File changes the watch did not apply (also counted as rejected
    /// reloads).
    pub fn watch_refused(&self) -> u64 {
        self.watch_refused
    }

    /// Reloads accepted and refused, and the last refusal's reason.
    pub fn reloads(&self) -> (u64, u64, Option<&str>) {
        (
            self.reloads_ok,
            self.reloads_failed,
            self.last_error.as_deref(),
        )
    }
}

/// The next hops of `compiled` (M47).
fn next_hops(compiled: &Compiled) -> Vec<dataplane::nexthop::NextHop> {
    dataplane::nexthop::next_hops(compiled)
}

fn first_v4(p: &config::schema::Port) -> Option<std::net::Ipv4Addr> {
    p.addresses.iter().find_map(|a| match a.addr {
        std::net::IpAddr::V4(v) => Some(v),
        std::net::IpAddr::V6(_) => None,
    })
}

fn first_v6(p: &config::schema::Port) -> Option<std::net::Ipv6Addr> {
    p.addresses.iter().find_map(|a| match a.addr {
        std::net::IpAddr::V6(v) => Some(v),
        std::net::IpAddr::V4(_) => None,
    })
}

fn mac_text(m: wire::ethernet::MacAddr) -> String {
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        m[0], m[1], m[2], m[3], m[4], m[5]
    )
}

/// What this node announces on L2 (M47): every VIP it serves on the uplink
/// and on each data port whose subnet holds it, and each port's own
/// addresses on that port; as (port, address), each once.
fn announced(compiled: &Compiled) -> Vec<(usize, std::net::IpAddr)> {
    use config::schema::PortRole;
    let ports = &compiled.settings.ports;
    let mut out: Vec<(usize, std::net::IpAddr)> = Vec::new();
    let mut vips: Vec<std::net::IpAddr> = compiled
        .children
        .iter()
        .filter(|ch| ch.served)
        .map(|ch| ch.vip)
        .collect();
    vips.sort_unstable();
    vips.dedup();
    for (i, p) in ports.iter().enumerate() {
        if p.role == PortRole::Exception {
            continue;
        }
        for v in &vips {
            if p.role == PortRole::Uplink || p.addresses.iter().any(|a| a.contains(*v)) {
                out.push((i, *v));
            }
        }
        for a in &p.addresses {
            out.push((i, a.addr));
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// Whole seconds since start, as workers count.
fn tick(now: Duration) -> u32 {
    u32::try_from(now.as_secs()).unwrap_or(u32::MAX)
}

/// Endpoint health as captured for a build (indexed like the configuration's
/// endpoints), in the form the snapshot builder asks for it.
fn captured(
    health: &[EndpointHealth],
) -> impl Fn(config::compiled::EndpointId) -> EndpointHealth + '_ {
    |id| {
        health
            .get(id.index())
            .copied()
            .unwrap_or(EndpointHealth::HEALTHY)
    }
}

/// Why replacing `old` by `new` looks like an accident rather than an edit
/// (M38): it removes every forwarding rule, or more than half of the
/// VIPs this node serves. `None` when the change may go live unforced.
pub fn destructive_change(old: &Compiled, new: &Compiled) -> Option<String> {
    if new.rules.is_empty() && !old.rules.is_empty() {
        return Some(format!(
            "the new configuration has no forwarding rules (the running one has {})",
            old.rules.len()
        ));
    }
    let served = |c: &Compiled| -> Vec<std::net::IpAddr> {
        let mut v: Vec<_> = c
            .children
            .iter()
            .filter(|ch| ch.served)
            .map(|ch| ch.vip)
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    };
    let (before, after) = (served(old), served(new));
    let gone: Vec<String> = before
        .iter()
        .filter(|v| after.binary_search(v).is_err())
        .map(ToString::to_string)
        .collect();
    if gone.len() * 2 > before.len() {
        const SHOWN: usize = 8;
        let mut list = gone
            .iter()
            .take(SHOWN)
            .cloned()
            .collect::<Vec<_>>()
            .join(", ");
        if gone.len() > SHOWN {
            list += &format!(" and {} more", gone.len() - SHOWN);
        }
        return Some(format!(
            "it would stop serving {} of the {} VIPs this node serves ({list})",
            gone.len(),
            before.len()
        ));
    }
    None
}

/// Why the file watch does not apply a changed file on its own (M38): it
/// is the running file cut short (a strict prefix of its text), or it
/// removes a section or key the running file has (a section, a service,
/// a group, a health check, a setting; [`config::Outline`]). A file cut
/// short at a line boundary is often a valid configuration whose missing
/// sections fall back to their defaults: an unasked reload must not take
/// it for an edit. `None` when the watch may apply it (the reload guard,
/// [`destructive_change`], still applies).
pub fn watch_refusal(running: &config::Outline, new: &config::Outline) -> Option<String> {
    if running.truncated_in(new) {
        return Some("it is the running file cut short".to_owned());
    }
    let removed = running.removed_in(new);
    if removed.is_empty() {
        return None;
    }
    const SHOWN: usize = 8;
    let mut list = removed
        .iter()
        .take(SHOWN)
        .copied()
        .collect::<Vec<_>>()
        .join(", ");
    if removed.len() > SHOWN {
        list += &format!(" and {} more", removed.len() - SHOWN);
    }
    Some(format!("it removes what the running file sets: {list}"))
}

/// Settings a reload cannot change in a running process (cores, ports, EAL).
fn settings_needing_restart(old: &Compiled, new: &Compiled) -> Option<&'static str> {
    let (a, b) = (&old.settings.dataplane, &new.settings.dataplane);
    if a.eal_args != b.eal_args {
        Some("[dataplane].eal_args")
    } else if a.worker_cores != b.worker_cores || a.management_core != b.management_core {
        Some("[dataplane] cores")
    } else if a.flow_table_capacity != b.flow_table_capacity || a.mbufs != b.mbufs {
        Some("[dataplane] sizes")
    } else if a.timeouts != b.timeouts {
        // The flow table is made with them (new_flow_budget, read from each
        // snapshot, applies at once).
        Some("[dataplane.timeouts]")
    } else if old.settings.ports.len() != new.settings.ports.len()
        || old
            .settings
            .ports
            .iter()
            .zip(&new.settings.ports)
            .any(|(x, y)| x.device != y.device)
        // Workers route host traffic by the exception ports they started with.
        || old.settings.exception_for != new.settings.exception_for
    {
        Some("[[ports]]")
    } else if listeners_differ(old, new) {
        Some("[metrics] or [control] listener settings")
    } else if old.settings.flow_sync != new.settings.flow_sync
        || old.settings.flow_sync_key != new.settings.flow_sync_key
    {
        // The sync socket, peers and key are set up once, at start.
        Some("[flow_sync]")
    } else {
        None
    }
}

/// The listeners are set up once, at start.
fn listeners_differ(old: &Compiled, new: &Compiled) -> bool {
    let (a, b) = (&old.settings.metrics, &new.settings.metrics);
    let (c, d) = (&old.settings.control, &new.settings.control);
    a.listen != b.listen
        || a.allow != b.allow
        || a.max_connections != b.max_connections
        || a.per_client() != b.per_client()
        || a.timeout != b.timeout
        || c.socket != d.socket
        || c.socket_group != d.socket_group
        || c.max_connections != d.max_connections
        || c.timeout != d.timeout
}

#[cfg(test)]
mod log_target_tests {
    use super::{Output, log_target};

    /// The core's lines keep the target they had when the core was one
    /// file; other modules' lines are their own.
    #[test]
    fn the_core_logs_as_one_module() {
        let mut out = Vec::new();
        say!(out, Info, "a line");
        assert!(matches!(
            out.as_slice(),
            [Output::Log {
                target: "control::core",
                ..
            }]
        ));
        assert_eq!(log_target("control::core"), "control::core");
        assert_eq!(log_target("control::balance"), "control::balance");
        assert_eq!(log_target("control::core_x"), "control::core_x");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A node serving `vips` (one TCP rule each), availability group `ag`.
    fn serving(vips: &[&str], ag: Option<u8>) -> Compiled {
        let mut text = String::from("[node]\nname = \"n\"\nregion = \"r\"\nzone = \"z\"\n");
        if let Some(g) = ag {
            text += &format!("availability_group = {g}\n");
        }
        text += "\n[[backend_services]]\nname = \"s\"\ndelivery = \"ipip\"\ngroups = [{ name = \"g\", region = \"r\", zone = \"z\", endpoints = [{ address = \"10.1.0.1\" }] }]\n";
        for (i, v) in vips.iter().enumerate() {
            text += &format!(
                "\n[[forwarding_rules]]\nname = \"r{i}\"\nvips = [{v}]\nprotocol = \"TCP\"\nports = 80\nbackend_service = \"s\"\n"
            );
        }
        match config::load_str("t.toml", &text, &config::Env::default()) {
            Ok(l) => l.compiled,
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn reloads_that_remove_every_rule_or_most_vips_are_refused() {
        let four = serving(
            &[
                "\"10.0.0.1\"",
                "\"10.0.0.2\"",
                "\"10.0.0.3\"",
                "\"10.0.0.4\"",
            ],
            None,
        );
        let none = serving(&[], None);
        let why = destructive_change(&four, &none).expect("refused");
        assert!(why.contains("no forwarding rules"), "{why}");
        // Half of the VIPs may go; more than half may not.
        let two = serving(&["\"10.0.0.1\"", "\"10.0.0.2\""], None);
        assert_eq!(destructive_change(&four, &two), None);
        let one = serving(&["\"10.0.0.1\""], None);
        let why = destructive_change(&four, &one).expect("refused");
        assert!(
            why.contains("3 of the 4 VIPs") && why.contains("10.0.0.4"),
            "{why}"
        );
        // Rules that move to other VIPs count as removals of the old ones.
        let moved = serving(
            &[
                "\"10.0.9.1\"",
                "\"10.0.9.2\"",
                "\"10.0.0.3\"",
                "\"10.0.0.4\"",
            ],
            None,
        );
        assert_eq!(destructive_change(&four, &moved), None);
        let moved3 = serving(
            &[
                "\"10.0.9.1\"",
                "\"10.0.9.2\"",
                "\"10.0.9.3\"",
                "\"10.0.0.4\"",
            ],
            None,
        );
        assert!(destructive_change(&four, &moved3).is_some());
        // Growing, and starting from nothing, are always fine.
        assert_eq!(destructive_change(&two, &four), None);
        assert_eq!(destructive_change(&none, &four), None);
        assert_eq!(destructive_change(&none, &none), None);
        // Only served VIPs count: a node of group 0 does not serve AG1's VIP.
        let ag0 = serving(&["\"10.0.0.1\", \"10.0.1.1\""], Some(0));
        let ag0_other = serving(&["\"10.0.0.1\", \"10.0.1.9\""], Some(0));
        assert_eq!(destructive_change(&ag0, &ag0_other), None);
    }

    /// M38, issue 38 item 7: a file change the watch reads is applied if
    /// it removes nothing the running file sets; the running file cut
    /// short, or a change removing a section, is refused, counted and
    /// applied only by an operator's reload.
    #[test]
    fn the_watch_applies_edits_and_leaves_removals_to_an_operator() {
        let base = "[node]\nname = \"n\"\nregion = \"r\"\nzone = \"z\"\n\n\
            [[backend_services]]\nname = \"s\"\ndelivery = \"ipip\"\nhealth_check = \"hc\"\ngroups = [{ name = \"g\", region = \"r\", zone = \"z\", endpoints = [{ address = \"10.1.0.1\", port = 80 }] }]\n\n\
            [[forwarding_rules]]\nname = \"r\"\nvips = [\"10.0.0.1\"]\nprotocol = \"TCP\"\nports = 80\nbackend_service = \"s\"\n\n\
            [[health_checks]]\nname = \"hc\"\ntype = \"HTTP\"\n";
        let full = format!("{base}path = \"/healthz\"\n\n[metrics]\nlisten = \"127.0.0.1:9999\"\n");
        let load = |t: &str| match config::load_str("t.toml", t, &config::Env::default()) {
            Ok(l) => l,
            Err(e) => panic!("{e}"),
        };
        let running = load(&full);
        let mut probes = crate::scripted::ScriptedProbes::new(crate::scripted::State::Healthy);
        let mut core = match Core::start(
            Path::new("t.toml"),
            running.compiled.clone(),
            Local::default(),
            dataplane::CookieKey::fixed(1, 0),
            Duration::ZERO,
            &mut probes,
        ) {
            Ok(c) => c,
            Err(e) => panic!("{e}"),
        };
        core.set_outline(running.outline.clone());
        let now = Duration::from_secs(1);
        let watch =
            |core: &mut Core, probes: &mut crate::scripted::ScriptedProbes, text: &str| match core
                .command(
                    now,
                    Command::FileChanged {
                        loaded: Ok(load(text)),
                    },
                    probes,
                ) {
                Answer::Reload(r) => r,
                other => panic!("{other:?}"),
            };
        // Cut short after the health check's type: valid (its path falls
        // back to "/"), and [metrics] gone.
        let e = watch(&mut core, &mut probes, base).expect_err("the file cut short");
        assert!(
            e.contains("does not apply it: it is the running file cut short"),
            "{e}"
        );
        // Removing the path only (not a truncation): refused too.
        let e = watch(
            &mut core,
            &mut probes,
            &full.replace("path = \"/healthz\"\n", ""),
        )
        .expect_err("a removal");
        assert!(
            e.contains("it removes what the running file sets: health_checks[hc].path"),
            "{e}"
        );
        assert_eq!(
            (core.watch_refused(), core.reloads().0, core.reloads().1),
            (2, 0, 2)
        );
        assert_eq!(core.live().generation, 1, "the running configuration stays");
        // An edit that removes nothing goes live.
        let edited = full.replace("/healthz", "/ready");
        assert!(matches!(
            watch(&mut core, &mut probes, &edited),
            Ok(Published::Live(_))
        ));
        // An operator's reload applies what the watch refused, and the
        // watch compares with that file from then on.
        let r = core.command(
            now,
            Command::Reload {
                loaded: Ok(load(base)),
                force: false,
            },
            &mut probes,
        );
        assert!(matches!(r, Answer::Reload(Ok(Published::Live(_)))), "{r:?}");
        assert!(
            matches!(watch(&mut core, &mut probes, &full), Ok(Published::Live(_))),
            "adding back"
        );
        assert_eq!(core.watch_refused(), 2);
    }

    /// M47: the data port an exception port stands for is fixed at start.
    #[test]
    fn a_new_for_port_takes_effect_at_the_next_restart() {
        let with = |for_port: &str| {
            let text = format!(
                "[node]\nname = \"n\"\nregion = \"r\"\nzone = \"z\"\n{}",
                [
                    "[[ports]]\nname = \"up\"\ndevice = \"d0\"\nrole = \"uplink\"\n",
                    "[[ports]]\nname = \"be\"\ndevice = \"d1\"\nrole = \"backend\"\n",
                    &format!(
                        "[[ports]]\nname = \"k\"\ndevice = \"t0\"\nrole = \"exception\"\n{for_port}"
                    ),
                ]
                .concat()
            );
            match config::load_str("t.toml", &text, &config::Env::default()) {
                Ok(l) => l.compiled,
                Err(e) => panic!("{e}"),
            }
        };
        let (uplink, backend) = (with(""), with("for_port = \"be\"\n"));
        assert_eq!(
            settings_needing_restart(&uplink, &with("for_port = \"up\"\n")),
            None
        );
        assert_eq!(
            settings_needing_restart(&uplink, &backend),
            Some("[[ports]]")
        );
    }
}
