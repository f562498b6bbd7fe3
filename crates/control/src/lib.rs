//! The management core (SPEC §1): everything slow, on its own thread.
//!
//! It owns the configuration and the [`SnapshotBuilder`]; it publishes each
//! new [`Snapshot`] with `arc-swap`, which workers load once per burst
//! (RCU-style: a worker finishes its burst on the snapshot it started with,
//! the old one is freed when the last worker lets go). It advances the coarse
//! clock workers stamp flows with, ages the flow table a slice at a time, and
//! reads the counters workers publish. Workers never call into it.
//!
//! A reload that fails validation changes nothing: the running snapshot
//! stays, the errors are returned to the caller and logged (SPEC M38).

#![forbid(unsafe_code)]
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

pub mod balance;
pub mod flows;
pub mod http;
pub mod listen;
pub mod metrics;
pub mod remote;
pub mod socket;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use config::Compiled;
use dataplane::snapshot::TableKey;
use dataplane::snapshot::tick_reached;
use dataplane::{BackendState, DropReason, EndpointHealth, Local, SnapshotBuilder, WorkerCounters};
use flowtable::FlowTable;
use maglev::MaglevTable;

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
}

/// The management core's state.
pub struct Manager {
    path: PathBuf,
    builder: SnapshotBuilder,
    shared: Arc<Shared>,
    local: Local,
    started: Instant,
    compiled: Arc<Compiled>,
    reloads_ok: u64,
    reloads_failed: u64,
    last_error: Option<String>,
    sweep_stats: flowtable::SweepStats,
    watch: FileWatch,
    balance: balance::Balance,
    listeners: Option<listen::Listeners>,
    /// Maglev tables being built off the management loop, and what the
    /// snapshot waiting for them is made of.
    pending: Option<PendingBuild>,
    /// A rebuild was asked for while one was pending: do it after.
    dirty: bool,
    /// Builds whose missing tables hold at most this many slots in all are
    /// made on the management loop itself; larger ones on a thread.
    inline_slots: u64,
}

/// Missing Maglev tables of at most this many slots in all (a few tens of
/// milliseconds of building) are built on the management loop itself.
pub const INLINE_TABLE_SLOTS: u64 = 1 << 21;

/// Maglev tables built by a thread, with what each was built from.
type BuiltTables = Vec<(TableKey, Arc<MaglevTable>)>;

/// A snapshot waiting for its Maglev tables, which a thread builds so that
/// the management loop goes on ageing flows, applying health and answering
/// while they are large (SPEC M38, M50).
struct PendingBuild {
    compiled: Arc<Compiled>,
    /// Health of every endpoint of `compiled` and the plans, as they were
    /// when the build started: the snapshot is made of these.
    health: Vec<EndpointHealth>,
    plans: Vec<Option<locality::Plan>>,
    started: Instant,
    tables: usize,
    slots: u64,
    done: std::sync::mpsc::Receiver<Result<BuiltTables, String>>,
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

/// What identifies a version of the configuration file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    modified: Option<std::time::SystemTime>,
    len: u64,
    inode: u64,
}

fn stamp(path: &Path) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some(Stamp {
        modified: m.modified().ok(),
        len: m.len(),
        inode: m.ino(),
    })
}

/// Polls the configuration file (SPEC M38 "file watch"): a change is acted on
/// once the file has stayed unchanged for [`SETTLE`], so an editor's or a
/// deployment tool's multi-step write is read whole.
#[derive(Debug)]
struct FileWatch {
    enabled: bool,
    seen: Option<Stamp>,
    changed_at: Option<Instant>,
}

/// How long a changed file must stay unchanged before it is reloaded.
const SETTLE: Duration = Duration::from_millis(300);

impl FileWatch {
    /// Whether the file changed and has settled since the last call that
    /// returned true (or since the last [`FileWatch::reset`]).
    fn due(&mut self, path: &Path) -> bool {
        if !self.enabled {
            return false;
        }
        let now = stamp(path);
        if now != self.seen {
            self.seen = now;
            self.changed_at = Some(Instant::now());
            return false;
        }
        match self.changed_at {
            Some(t) if t.elapsed() >= SETTLE => {
                self.changed_at = None;
                // A file that vanished (mid-rename) is not a new configuration.
                now.is_some()
            }
            _ => false,
        }
    }

    /// The file as it is now is what the running configuration came from.
    fn reset(&mut self, path: &Path) {
        self.seen = stamp(path);
        self.changed_at = None;
    }
}

/// Buckets aged per management tick: bounded so a tick stays short.
const SWEEP_BUDGET: usize = 1 << 14;

impl Manager {
    /// Starts from a loaded configuration (`path` is re-read on reload).
    pub fn start(
        path: &Path,
        compiled: Compiled,
        local: Local,
        workers: usize,
    ) -> Result<(Manager, Arc<Shared>), StartError> {
        let compiled = Arc::new(compiled);
        let flows = FlowTable::new(dataplane::flow_table_config(&compiled.settings.dataplane))?;
        let balance = balance::Balance::start(&compiled)?;
        // The secret behind the cookies of flows forwarded without an entry:
        // the standard library's per-process random hash keys.
        let cookie_key = {
            use std::hash::BuildHasher;
            std::collections::hash_map::RandomState::new().hash_one(std::process::id())
        };
        let mut builder = SnapshotBuilder::with_cookie_key(cookie_key);
        let snap = builder.build_with_plans(
            compiled.clone(),
            local.clone(),
            |id| balance.endpoint_health(id),
            balance.plans(),
            0,
            1,
        )?;
        let children = snap.compiled.children.len();
        let shared = Arc::new(Shared {
            snapshot: ArcSwap::from_pointee(snap),
            flows,
            now: AtomicU32::new(0),
            stop: AtomicBool::new(false),
            published: (0..workers)
                .map(|_| Mutex::new(WorkerCounters::new(children)))
                .collect(),
        });
        let mgr = Manager {
            path: path.to_owned(),
            builder,
            shared: shared.clone(),
            local,
            started: Instant::now(),
            compiled,
            reloads_ok: 0,
            reloads_failed: 0,
            last_error: None,
            sweep_stats: flowtable::SweepStats::default(),
            watch: FileWatch {
                enabled: false,
                seen: stamp(path),
                changed_at: None,
            },
            balance,
            listeners: None,
            pending: None,
            dirty: false,
            inline_slots: INLINE_TABLE_SLOTS,
        };
        Ok((mgr, shared))
    }

    /// Sets the size of table builds made on the management loop itself
    /// (default [`INLINE_TABLE_SLOTS`]; 0 builds every missing table on a
    /// thread).
    pub fn build_inline_up_to(&mut self, slots: u64) {
        self.inline_slots = slots;
    }

    /// Turns reloading on file change on or off (the daemon follows
    /// `[control] watch_config`, re-read at every reload).
    pub fn watch_file(&mut self, on: bool) {
        self.watch.enabled = on;
    }

    /// The current tick.
    pub fn now(&self) -> u32 {
        u32::try_from(self.started.elapsed().as_secs()).unwrap_or(u32::MAX)
    }

    /// Re-reads, validates and compiles the configuration file and, if it is
    /// valid, publishes a snapshot built from it. Returns what became of it
    /// (live, or waiting for large Maglev tables), or every error (the
    /// running configuration stays).
    pub fn reload(&mut self) -> Result<Published, String> {
        self.reload_with(false)
    }

    /// [`Manager::reload`]; with `force`, also a configuration that
    /// [`destructive_change`] would refuse (`spillway reload --force`).
    pub fn reload_with(&mut self, force: bool) -> Result<Published, String> {
        let t0 = Instant::now();
        // Whatever this reload makes of the file, the watcher need not
        // reload it again.
        self.watch.reset(&self.path);
        let loaded = match config::load(&self.path) {
            Ok(l) => l,
            Err(e) => return Err(self.reload_failed(e.to_string())),
        };
        if let Some(why) = destructive_change(&self.compiled, &loaded.compiled) {
            if !force {
                return Err(self.reload_failed(format!(
                    "{}: {why}. A half-written or truncated file looks like this; if the change is meant, run `spillway reload --force`",
                    self.path.display()
                )));
            }
            log::warn!("reload forced although {why}");
        }
        let restart_needed = settings_needing_restart(&self.compiled, &loaded.compiled);
        let compiled = Arc::new(loaded.compiled);
        if let Err(e) = self.balance.reload(&compiled) {
            // Health checks the prober refuses: the whole reload is refused.
            if let Err(h) = self.balance.reload(&self.compiled) {
                log::error!("health checks: {h}");
            }
            return Err(self.reload_failed(format!("health checks: {e}")));
        }
        let previous = std::mem::replace(&mut self.compiled, compiled.clone());
        match self.publish() {
            Ok(published) => {
                self.watch.enabled = compiled.settings.control.watch_config;
                self.reloads_ok += 1;
                self.last_error = None;
                for w in &loaded.warnings {
                    log::warn!("{}: {w}", self.path.display());
                }
                if let Some(what) = restart_needed {
                    log::warn!("reload: {what} changed; that takes effect at the next restart");
                }
                log::info!(
                    "reload: {published} ({:.1} ms)",
                    t0.elapsed().as_secs_f64() * 1e3
                );
                Ok(published)
            }
            Err(e) => {
                // The new configuration did not go live: health and
                // locality follow the running one again.
                self.compiled = previous;
                if let Err(h) = self.balance.reload(&self.compiled) {
                    log::error!("health checks: {h}");
                }
                Err(self.reload_failed(e))
            }
        }
    }

    fn reload_failed(&mut self, e: String) -> String {
        self.reloads_failed += 1;
        log::error!("reload rejected; the running configuration stays:\n{e}");
        self.last_error = Some(e.clone());
        e
    }

    /// Publishes a snapshot of the current configuration, health and plans:
    /// at once when the Maglev tables it lacks are small, else once a thread
    /// has built them. While a build is pending, a new request is noted and
    /// served when it ends (the latest state then).
    fn publish(&mut self) -> Result<Published, String> {
        if self.pending.is_some() {
            self.dirty = true;
            return Ok(Published::Queued);
        }
        let compiled = self.compiled.clone();
        let health: Vec<EndpointHealth> = (0..compiled.endpoints.len())
            .map(|i| {
                self.balance
                    .endpoint_health(config::compiled::EndpointId(i as u32))
            })
            .collect();
        let plans = self.balance.plans().to_vec();
        let missing = self
            .builder
            .missing_tables(&compiled, captured(&health), &plans);
        let slots: u64 = missing.iter().map(|k| u64::from(k.size)).sum();
        if slots <= self.inline_slots {
            return self
                .assemble(compiled, &health, &plans)
                .map(Published::Live);
        }
        let (tx, done) = std::sync::mpsc::channel();
        let tables = missing.len();
        let spawned = std::thread::Builder::new()
            .name("spillway-maglev".into())
            .spawn(move || {
                let built: Result<Vec<_>, String> = missing
                    .into_iter()
                    .map(|k| match k.build() {
                        Ok(t) => Ok((k, Arc::new(t))),
                        Err(e) => Err(format!("a Maglev table of {} slots: {e}", k.size)),
                    })
                    .collect();
                let _ = tx.send(built);
            });
        if let Err(e) = spawned {
            return Err(format!("starting a Maglev build thread: {e}"));
        }
        log::info!("building {tables} Maglev table(s), {slots} slots, off the management loop");
        self.pending = Some(PendingBuild {
            compiled,
            health,
            plans,
            started: Instant::now(),
            tables,
            slots,
            done,
        });
        Ok(Published::Building { tables, slots })
    }

    /// Builds the snapshot of `compiled` with this health and these plans
    /// (its Maglev tables at hand, or built here) and makes it live.
    fn assemble(
        &mut self,
        compiled: Arc<Compiled>,
        health: &[EndpointHealth],
        plans: &[Option<locality::Plan>],
    ) -> Result<u32, String> {
        let now = self.now();
        let snap = self
            .builder
            .build_with_plans(
                compiled,
                self.local.clone(),
                captured(health),
                plans,
                now,
                1,
            )
            .map_err(|e| e.to_string())?;
        let generation = snap.generation;
        self.shared.snapshot.store(Arc::new(snap));
        Ok(generation)
    }

    /// When the pending build's tables are done: publishes its snapshot,
    /// unless a newer configuration was accepted meanwhile (then that one,
    /// never the superseded one); then whatever was asked for meanwhile.
    /// Called by the loop every tick.
    pub fn poll_build(&mut self) {
        let Some(p) = &self.pending else {
            return;
        };
        let built = match p.done.try_recv() {
            Ok(r) => r,
            Err(std::sync::mpsc::TryRecvError::Empty) => return,
            Err(std::sync::mpsc::TryRecvError::Disconnected) => {
                Err("the Maglev build thread ended without its tables".to_owned())
            }
        };
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
            self.assemble(p.compiled.clone(), &p.health, &p.plans)
                .map(Some)
        });
        match result {
            Ok(Some(generation)) => log::info!(
                "generation {generation} live: {} Maglev table(s) built in {:.1} s",
                p.tables,
                p.started.elapsed().as_secs_f64()
            ),
            Ok(None) => log::info!(
                "{} Maglev table(s) built for a configuration replaced meanwhile; publishing the current one",
                p.tables
            ),
            Err(e) if superseded => {
                log::warn!("building Maglev tables for a configuration replaced meanwhile: {e}")
            }
            Err(e) => {
                self.build_failed(&e);
                if !asked {
                    return;
                }
            }
        }
        if asked || superseded {
            if let Err(e) = self.publish() {
                self.build_failed(&e);
            }
        }
    }

    /// The current configuration cannot go live (cannot happen with a
    /// validated one): the running snapshot stays, and health and locality
    /// follow its configuration again.
    fn build_failed(&mut self, e: &str) {
        log::error!("building the snapshot: {e}");
        let live = self.shared.snapshot.load().compiled.clone();
        if !Arc::ptr_eq(&live, &self.compiled) {
            self.compiled = live;
            if let Err(h) = self.balance.reload(&self.compiled) {
                log::error!("health checks: {h}");
            }
            self.reloads_failed += 1;
            self.last_error = Some(format!("the reloaded configuration could not go live: {e}"));
        }
    }

    /// Whether a snapshot is waiting for Maglev tables a thread builds.
    pub fn building(&self) -> bool {
        self.pending.is_some()
    }

    /// Periodic work: advance the clock, age a slice of the flow table, and
    /// retire draining backends whose period is over.
    pub fn tick(&mut self) {
        let now = self.now();
        self.shared.now.store(now, Ordering::Relaxed);
        let s = self.shared.flows.sweep(now, SWEEP_BUDGET);
        self.sweep_stats.expired += s.expired;
        // Rebuild only when a draining backend's period is over (the builder
        // then retires it), not every tick of the draining period.
        let retire_due = self.shared.snapshot.load().backends.iter().any(
            |b| matches!(b.state, BackendState::Draining { until } if tick_reached(now, until)),
        );
        let shared = &self.shared;
        let children = shared.snapshot.load().compiled.children.len();
        let replan = self.balance.tick(&self.compiled, &self.builder, || {
            sum_published(shared, children)
        });
        if retire_due || replan {
            if let Err(e) = self.publish() {
                log::error!("rebuilding the snapshot: {e}");
            }
        }
    }

    /// Sum of every worker's last published counters (indexed like the live
    /// snapshot's configuration, which workers count by).
    pub fn counters(&self) -> WorkerCounters {
        sum_published(
            &self.shared,
            self.shared.snapshot.load().compiled.children.len(),
        )
    }

    /// `spillway status`.
    pub fn status(&self) -> String {
        let snap = self.shared.snapshot.load();
        let occ = self.shared.flows.occupancy();
        let mut out = format!(
            "node {} (region {}, zone {})\nuptime {} s, snapshot generation {}, reloads {} ok / {} rejected\n",
            self.compiled.node.name,
            self.compiled
                .regions
                .get(self.compiled.node.region.index())
                .map_or("?", String::as_str),
            self.compiled
                .zones
                .get(self.compiled.node.zone.index())
                .map_or("?", String::as_str),
            self.now(),
            snap.generation,
            self.reloads_ok,
            self.reloads_failed
        );
        out += &format!(
            "flow table: {} live of {} ({} half-open)\n",
            occ.live,
            self.shared.flows.capacity(),
            occ.half_open
        );
        if let Some(p) = &self.pending {
            out += &format!(
                "building {} Maglev table(s), {} slots, for the next generation: {:.1} s so far (generation {} stays live meanwhile)\n",
                p.tables,
                p.slots,
                p.started.elapsed().as_secs_f64(),
                snap.generation
            );
        }
        // The live snapshot's own configuration names its services (a
        // reloaded one may still be waiting for its tables).
        for (svc, plan) in snap.compiled.services.iter().zip(&snap.services) {
            let eligible = plan.eligible_slots().len();
            out += &format!(
                "service {}: {} ({eligible} eligible backends)\n",
                svc.name, svc.delivery
            );
        }
        for (i, b) in snap.backends.iter().enumerate() {
            out += &format!("  backend {i}: {} {:?}\n", b.addr, b.state);
        }
        out += &self.balance.status(&self.compiled);
        if let Some(e) = &self.last_error {
            out += &format!("last reload error:\n{e}\n");
        }
        out
    }

    /// Answers the requests of `listeners` from the management loop
    /// (see [`Manager::run`]).
    pub fn serve(&mut self, listeners: listen::Listeners) {
        self.listeners = Some(listeners);
    }

    /// The address of the HTTP endpoint, if it is listening.
    pub fn http_addr(&self) -> Option<std::net::SocketAddr> {
        self.listeners
            .as_ref()
            .and_then(listen::Listeners::http_addr)
    }

    /// The answer to one request of a listener. Each is computed from state
    /// at hand; `reload` and a `flows` scan are the slow ones.
    pub fn answer(&mut self, job: &listen::Job) -> String {
        match job {
            listen::Job::Command(line) => socket::dispatch(self, line),
            listen::Job::ExportedStatus => self.exported_status(),
            listen::Job::Metrics => self.metrics(),
        }
    }

    fn listener_info(&self) -> &[listen::ListenerInfo] {
        self.listeners.as_ref().map_or(&[], |l| l.info())
    }

    /// Every forwarding rule's exported state (M21), one `rule <name>
    /// <STATE>` line each.
    pub fn exported_status(&self) -> String {
        self.balance
            .rule_states(&self.compiled)
            .into_iter()
            .map(|(rule, state)| format!("rule {rule} {state}\n"))
            .collect()
    }

    /// Counters in Prometheus text format (M42).
    pub fn metrics(&self) -> String {
        metrics::render(
            &self.counters(),
            &self.shared.snapshot.load().compiled,
            &self.balance.rule_states(&self.compiled),
            self.balance.probed(),
            self.listener_info(),
        )
    }

    /// `spillway stats`.
    pub fn stats(&self) -> String {
        let c = self.counters();
        let mut out = format!(
            "rx {} packets {} bytes; forwarded {}; arp replies {}; nd replies {}; no-backend resets {}; to host {} (dropped without exception port {}); from host {}; tx dropped {}\n",
            c.rx_packets,
            c.rx_bytes,
            c.forwarded,
            c.arp_replies,
            c.nd_replies,
            c.no_backend_resets,
            c.to_host,
            c.host_dropped,
            c.from_host,
            c.tx_dropped
        );
        out += &format!(
            "flows: {} new, {} hits, {} races, {} rescheduled, {} stateless, {} over budget; {} expired by ageing\n",
            c.new_flows,
            c.flow_hits,
            c.flow_races,
            c.flows_rescheduled,
            c.stateless,
            c.over_budget,
            self.sweep_stats.expired
        );
        for r in DropReason::ALL {
            out += &format!("drop {}: {}\n", r.name(), c.dropped(r));
        }
        let live = self.shared.snapshot.load().compiled.clone();
        for (child, cc) in live.children.iter().zip(&c.children) {
            out += &format!(
                "rule {}: {} packets {} bytes {} new flows {} drops\n",
                child.name, cc.packets, cc.bytes, cc.new_flows, cc.drops
            );
        }
        for l in self.listener_info() {
            let c = l.counters.values();
            let per_client = match l.limits.per_client {
                Some(n) => format!(
                    "{} refused per client (over {n} from one client); ",
                    c.per_client_limit
                ),
                None => String::new(),
            };
            out += &format!(
                "listener {}: {} answered; {} refused (over {} connections); {per_client}{} denied; {} timed out; {} oversized; {} bad; {} busy\n",
                l.name,
                c.answered,
                c.refused,
                l.limits.max_connections,
                c.denied,
                c.timed_out,
                c.oversized,
                c.bad,
                c.busy
            );
        }
        out
    }

    /// `spillway flows`: the connection table filtered by `q`.
    pub fn flows(&self, q: &flows::FlowQuery) -> String {
        let snap = self.shared.snapshot.load();
        flows::list(q, &self.shared.flows, &snap, &snap.compiled, self.now())
    }

    /// Runs the management loop on the calling thread until `stop` is set:
    /// ticks every `period`, reloads when `reload` is set (SIGHUP) or the
    /// file changed, and between ticks answers the listeners' requests as
    /// they come. The loop never reads from or writes to a client (M50):
    /// the listeners' thread does, and a tick waits for at most one answer
    /// being computed.
    pub fn run(&mut self, period: Duration, reload: &AtomicBool, stop: &AtomicBool) {
        while !stop.load(Ordering::Relaxed) {
            let next_tick = Instant::now() + period;
            if reload.swap(false, Ordering::AcqRel) {
                let _ = self.reload();
            }
            if self.watch.due(&self.path) {
                log::info!("{} changed; reloading", self.path.display());
                let _ = self.reload();
            }
            self.poll_build();
            self.tick();
            self.answer_until(next_tick);
        }
        if let Some(l) = &mut self.listeners {
            l.stop();
        }
        self.shared.stop.store(true, Ordering::Release);
        self.balance.stop();
    }

    /// Answers requests until `deadline` (sleeps when there is no listener).
    fn answer_until(&mut self, deadline: Instant) {
        loop {
            let wait = deadline.saturating_duration_since(Instant::now());
            if wait.is_zero() {
                return;
            }
            let call = match &self.listeners {
                Some(l) => match l.calls().recv_timeout(wait) {
                    Ok(call) => call,
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => return,
                    Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                        std::thread::sleep(wait);
                        return;
                    }
                },
                None => {
                    std::thread::sleep(wait);
                    return;
                }
            };
            let answer = self.answer(&call.job);
            // The client may have given up meanwhile; nothing to do then.
            let _ = call.reply.send(answer);
        }
    }
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

fn sum_published(shared: &Shared, children: usize) -> WorkerCounters {
    let mut total = WorkerCounters::new(children);
    for slot in &shared.published {
        let c = match slot.lock() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
        };
        add(&mut total, &c);
    }
    total
}

fn add(total: &mut WorkerCounters, c: &WorkerCounters) {
    total.rx_packets += c.rx_packets;
    total.rx_bytes += c.rx_bytes;
    total.forwarded += c.forwarded;
    total.arp_replies += c.arp_replies;
    total.nd_replies += c.nd_replies;
    total.no_backend_resets += c.no_backend_resets;
    total.to_host += c.to_host;
    total.flow_hits += c.flow_hits;
    total.new_flows += c.new_flows;
    total.flow_races += c.flow_races;
    total.flows_rescheduled += c.flows_rescheduled;
    total.stateless += c.stateless;
    total.over_budget += c.over_budget;
    total.tx_dropped += c.tx_dropped;
    total.host_dropped += c.host_dropped;
    total.from_host += c.from_host;
    for (t, d) in total.drops.iter_mut().zip(&c.drops) {
        *t += d;
    }
    total.resize_children(c.children.len());
    total.resize_backends(c.backend_packets.len());
    for (t, n) in total.backend_packets.iter_mut().zip(&c.backend_packets) {
        *t += n;
    }
    for (t, cc) in total.children.iter_mut().zip(&c.children) {
        t.packets += cc.packets;
        t.bytes += cc.bytes;
        t.new_flows += cc.new_flows;
        t.drops += cc.drops;
    }
}

/// Why replacing `old` by `new` looks like an accident rather than an edit
/// (SPEC M38): it removes every forwarding rule, or more than half of the
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
    {
        Some("[[ports]]")
    } else if listeners_differ(old, new) {
        Some("[metrics] or [control] listener settings")
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
}
