//! The management core's daemon shell: everything of the management core
//! that is not a decision. It owns the threads (Maglev builds, health
//! probes, remote polls, the listeners'), the sockets, the clock, the
//! configuration file and its watch, and the publication of snapshots to
//! workers; it feeds [`Core`] with time and inputs and carries out its
//! [`Output`]s.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::{Duration, Instant};

use config::Compiled;
use dataplane::{Local, Tick, WorkerCounters};
use flowtable::FlowTable;
use health::{HealthChecker, HealthSnapshot};

use crate::core::{BuiltTables, Core, FlowUse, Inputs, Probes, Published, ReloadError, Shell};
use crate::remote::{RemoteKey, RemotePoller};
use crate::{Shared, StartError, flows, listen, metrics, report, socket};

/// The probers of a running daemon: the health checker (no thread when no
/// service has a health check) and the remote rule poller.
struct LiveProbes {
    checker: Option<HealthChecker>,
    remote: RemotePoller,
}

impl Probes for LiveProbes {
    fn set_targets(
        &mut self,
        targets: Vec<health::Target>,
    ) -> Result<HealthSnapshot, health::HealthError> {
        match (&mut self.checker, targets.is_empty()) {
            (Some(c), false) => c.update(targets)?,
            (Some(_), true) => {
                if let Some(c) = self.checker.take() {
                    c.stop()?;
                }
            }
            (None, false) => self.checker = Some(HealthChecker::start(targets)?),
            (None, true) => {}
        }
        Ok(self
            .checker
            .as_ref()
            .map_or_else(HealthSnapshot::default, HealthChecker::snapshot))
    }

    fn poll_remotes(&mut self, keys: Vec<RemoteKey>) {
        self.remote = RemotePoller::start(keys);
    }

    fn verdicts_since(&self, generation: u64) -> Option<HealthSnapshot> {
        self.checker.as_ref()?.changed_since(generation)
    }

    fn remote_verdict(&self, key: &RemoteKey) -> (health::State, String) {
        self.remote.state(key)
    }
}

impl LiveProbes {
    fn stop(&mut self) {
        if let Some(c) = self.checker.take() {
            if let Err(e) = c.stop() {
                log::warn!("health checker: {e}");
            }
        }
    }
}

/// The management core of a running daemon.
pub struct Manager {
    path: PathBuf,
    core: Core,
    shared: Arc<Shared>,
    started: Instant,
    watch: FileWatch,
    /// A reload being read, validated and compiled off the loop.
    loading: Option<Loading>,
    /// An operator's reload asked for while one was being read: it reads
    /// the file again once that one is done.
    queued: Option<Queued>,
    probes: LiveProbes,
    listeners: Option<listen::Listeners>,
    /// The thread building the tables of a pending [`Output::BuildTables`].
    build: Option<(u64, Receiver<Result<BuiltTables, String>>)>,
    /// Where the drain state is saved (M37), if anywhere.
    drain_file: Option<PathBuf>,
    /// The BIRD driver (`[bgp] speaker = "bird"`, M34).
    speaker: Option<crate::bird::Speaker>,
    /// The flow-sync sockets (`[flow_sync] listen`, non-blocking; M36).
    sync_socket: Option<SyncSockets>,
    /// The summed counters once a second, for the rates of `stats`.
    rates: report::RateSampler,
    /// The `spillway trace` being taken, if any (one at a time).
    trace: Option<ActiveTrace>,
    /// The last trace's session number.
    trace_session: u32,
}

/// A trace being taken: its query, its client and what arrived so far.
struct ActiveTrace {
    query: crate::trace::TraceQuery,
    started: Instant,
    waiter: Waiter,
    records: Vec<dataplane::trace::TraceRecord>,
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

/// Polls the configuration file (M38 "file watch"): a change is acted on
/// once the file has stayed unchanged for [`SETTLE`], so an editor's or a
/// deployment tool's multi-step write is read whole, and read again if it
/// changes while it is read. What the watch reads is applied only if it
/// removes nothing the running file sets and is not that file cut short
/// ([`crate::watch_refusal`]): a writer that stopped half-way (a full disk,
/// a copy cut off) leaves a file that has settled all the same.
#[derive(Debug)]
struct FileWatch {
    enabled: bool,
    seen: Option<Stamp>,
    changed_at: Option<Instant>,
    settle: Duration,
}

/// How long a changed file must stay unchanged before it is reloaded.
pub const SETTLE: Duration = Duration::from_millis(300);

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
            Some(t) if t.elapsed() >= self.settle => {
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

/// A reload being read, validated and compiled on a thread of its own
/// (`spillway-load`): a large file takes seconds, and the loop must go on
/// ticking and answering meanwhile (M50).
struct Loading {
    /// Asked for by the file watch (else by an operator).
    watch: bool,
    /// `spillway reload --force`.
    force: bool,
    done: Receiver<Read>,
    /// Control-socket clients waiting for its answer (and whether they
    /// asked for JSON).
    waiting: Vec<Waiter>,
    started: Instant,
}

/// An operator's reload waiting for the one being read.
struct Queued {
    force: bool,
    waiting: Vec<Waiter>,
}

/// A client waiting for a reload's answer: where it goes, and whether it
/// is JSON.
type Waiter = (tokio::sync::oneshot::Sender<String>, bool);

/// What a load thread read.
struct Read {
    loaded: Result<config::Loaded, String>,
    /// The file changed while it was read: what was read may be torn.
    torn: bool,
}

/// Reads, validates and compiles the file at `path` (on a load thread, or
/// for [`Manager::reload_with`] on the caller's).
fn read_config(path: &Path) -> Read {
    let before = stamp(path);
    let loaded = config::load(path).map_err(|e| e.to_string());
    Read {
        loaded,
        torn: stamp(path) != before,
    }
}

/// How long a reload's answer waits for the workers to pick up its
/// snapshot ([`Manager::reload_with`]).
const WORKER_PICKUP: Duration = Duration::from_millis(200);

/// Flow-sync datagrams read per tick at most from each peer's socket, and
/// from the listening socket (M36, M54): a flood cannot hold the management
/// loop, and one source's flood costs no other its datagrams.
const SYNC_RECV_PER_TICK: usize = 1024;

impl Manager {
    /// Starts from a loaded configuration (`path` is re-read on reload).
    /// The flow table's memory comes from `table_memory` when it gives a
    /// block (the daemon: DPDK's hugepage heap), else from the heap.
    pub fn start(
        path: &Path,
        compiled: Compiled,
        local: Local,
        workers: usize,
        table_memory: Option<&flowtable::MemoryProvider<'_>>,
    ) -> Result<(Manager, Arc<Shared>), StartError> {
        let table_config = dataplane::flow_table_config(&compiled.settings.dataplane);
        let flows = match table_memory {
            Some(provider) => FlowTable::new_in(table_config, provider)?,
            None => FlowTable::new(table_config)?,
        };
        log::info!(
            "flow table: {} entries, {} MiB in {}",
            flows.capacity(),
            flows.allocated_bytes() >> 20,
            flows.memory()
        );
        // The secret behind the cookies no flow entry stores (M53): 128
        // bits from the OS, for this process only.
        let cookie_key = dataplane::CookieKey::random().map_err(StartError::Random)?;
        let mut probes = LiveProbes {
            checker: None,
            remote: RemotePoller::start(Vec::new()),
        };
        let started = Instant::now();
        // Before the core's first decision: empties the routes file, which
        // a crashed predecessor may have left full.
        let speaker = match &compiled.settings.bgp {
            Some(b) if b.speaker == config::schema::BgpSpeaker::Bird => Some(
                crate::bird::Speaker::start(b.control.clone().into(), b.routes_file.clone())
                    .map_err(StartError::Speaker)?,
            ),
            _ => None,
        };
        let mut core = Core::start(
            path,
            compiled,
            local,
            cookie_key,
            Duration::ZERO,
            &mut probes,
        )?;
        // What the running file defines, for the file watch to compare
        // changes with (the file as it is now: the watch takes its stamp
        // now too).
        match std::fs::read_to_string(path)
            .ok()
            .and_then(|t| config::Outline::of(&t))
        {
            Some(outline) => core.set_outline(outline),
            None => log::warn!(
                "{}: cannot read it again; the file watch compares changes with the first reload's file",
                path.display()
            ),
        }
        let mut shared = Shared::new(core.live().clone(), flows, workers);
        let mut sync_socket = None;
        if let Some(f) = &core.compiled().settings.flow_sync {
            shared = shared.with_flow_sync();
            let s = SyncSockets::bind(f.listen, &f.peers, Duration::ZERO)
                .map_err(|e| StartError::FlowSync(f.listen, e))?;
            sync_socket = Some(s);
        }
        let shared = Arc::new(shared);
        let mut mgr = Manager {
            path: path.to_owned(),
            core,
            shared: shared.clone(),
            started,
            watch: FileWatch {
                enabled: false,
                seen: stamp(path),
                changed_at: None,
                settle: SETTLE,
            },
            loading: None,
            queued: None,
            probes,
            listeners: None,
            build: None,
            drain_file: None,
            speaker,
            sync_socket,
            rates: report::RateSampler::default(),
            trace: None,
            trace_session: 0,
        };
        // What the core logged starting.
        mgr.pump();
        Ok((mgr, shared))
    }

    /// Sets the size of table builds made on the management loop itself
    /// (default [`crate::INLINE_TABLE_SLOTS`]; 0 builds every missing table
    /// on a thread).
    pub fn build_inline_up_to(&mut self, slots: u64) {
        self.core.build_inline_up_to(slots);
    }

    /// Turns reloading on file change on or off (the daemon follows
    /// `[control] watch_config`, re-read at every reload).
    pub fn watch_file(&mut self, on: bool) {
        self.watch.enabled = on;
    }

    /// How long a changed file must stay unchanged before the watch reads
    /// it (default [`SETTLE`]).
    pub fn watch_settle(&mut self, settle: Duration) {
        self.watch.settle = settle;
    }

    /// Keeps the drain state (M37) in `path`: restores what it holds now
    /// and saves every change. A file that cannot be read is reported and
    /// nothing is restored (the daemon serves rather than refuse to start).
    pub fn keep_drain_state(&mut self, path: &Path) {
        match crate::drain::load(path) {
            Ok(d) => {
                let now = self.clock();
                self.core.restore_drained(now, d);
                self.pump();
            }
            Err(e) => log::error!("drain state not restored: {e}"),
        }
        self.drain_file = Some(path.to_owned());
    }

    /// Whether this node is drained (M37).
    pub fn node_drained(&self) -> bool {
        self.core.node_drained()
    }

    /// Whether the daemon is shutting down (M39).
    pub fn shutting_down(&self) -> bool {
        self.core.shutting_down()
    }

    /// The current tick.
    pub fn now(&self) -> u32 {
        Tick::at(self.clock()).get()
    }

    /// The core's clock: time since start.
    fn clock(&self) -> Duration {
        self.started.elapsed()
    }

    /// Carries out what the core asked for.
    fn pump(&mut self) {
        let (core, mut shell) = self.split();
        core.carry_out(&mut shell);
    }

    /// The core, and the daemon's shell around it.
    fn split(&mut self) -> (&mut Core, DaemonShell<'_>) {
        let shell = DaemonShell {
            shared: &self.shared,
            watch: &mut self.watch,
            probes: &mut self.probes,
            build: &mut self.build,
            speaker: &mut self.speaker,
            sync_socket: &mut self.sync_socket,
        };
        (&mut self.core, shell)
    }

    /// Re-reads, validates and compiles the configuration file and, if it is
    /// valid, publishes a snapshot built from it. Returns what became of it
    /// (live, or waiting for large Maglev tables), or every error (the
    /// running configuration stays).
    pub fn reload(&mut self) -> Result<Published, ReloadError> {
        self.reload_with(false)
    }

    /// [`Manager::reload`]; with `force`, also a configuration that
    /// [`crate::destructive_change`] would refuse (`spillway reload --force`).
    /// The file is read on the calling thread; the daemon's loop
    /// ([`Manager::run`]) reads it on a thread of its own.
    pub fn reload_with(&mut self, force: bool) -> Result<Published, ReloadError> {
        let t0 = Instant::now();
        // Whatever this reload makes of the file, the watcher need not
        // reload it again.
        self.watch.reset(&self.path);
        let read = read_config(&self.path);
        self.apply(read, false, force, t0)
    }

    /// Hands a file read to the core: an operator's reload (`force` or
    /// not) or the watch's ([`Core::file_changed`]); waits for the
    /// workers to pick up what went live.
    fn apply(
        &mut self,
        read: Read,
        watch: bool,
        force: bool,
        t0: Instant,
    ) -> Result<Published, ReloadError> {
        let loaded = if read.torn && read.loaded.is_ok() {
            Err(format!(
                "{} changed while it was read; try again",
                self.path.display()
            ))
        } else {
            read.loaded
        };
        let now = self.clock();
        let result = if watch {
            self.core.file_changed(now, loaded, &mut self.probes)
        } else {
            self.core.reload(now, loaded, force, &mut self.probes)
        };
        self.pump();
        if let Ok(published) = &result {
            // The peers always served over HTTP follow the configuration.
            if let Some(l) = &self.listeners {
                l.set_peers(crate::admission::configured_peers(self.core.compiled()));
            }
            if let Published::Live(generation) = published {
                self.wait_for_workers(*generation);
            }
            log::info!(
                "reload: {published} ({:.1} ms)",
                t0.elapsed().as_secs_f64() * 1e3
            );
        }
        result
    }

    /// Starts a reload on a `spillway-load` thread, which reads, validates
    /// and compiles the file while the loop goes on; [`Manager::poll_load`]
    /// applies it when it is done and answers `waiter` (a control-socket
    /// client), if any. By an operator (`watch` false: `spillway reload`,
    /// SIGHUP) or by the file watch. An operator's reload asked for while
    /// one is being read reads the file again after it (so it sees the file
    /// as it was when asked, or later); several such are one (forced if any
    /// was).
    fn begin_reload(&mut self, watch: bool, force: bool, waiter: Option<Waiter>) {
        if self.loading.is_some() {
            if watch {
                // (The watch does not ask while a reload is read.)
                return;
            }
            let q = self.queued.get_or_insert(Queued {
                force: false,
                waiting: Vec::new(),
            });
            q.force |= force;
            q.waiting.extend(waiter);
            return;
        }
        // Whatever this reload makes of the file, the watcher need not
        // reload it again.
        self.watch.reset(&self.path);
        let (tx, done) = std::sync::mpsc::channel();
        let path = self.path.clone();
        let spawned = std::thread::Builder::new()
            .name("spillway-load".into())
            .spawn(move || {
                let _ = tx.send(read_config(&path));
            });
        let mut loading = Loading {
            watch,
            force,
            done,
            waiting: waiter.into_iter().collect(),
            started: Instant::now(),
        };
        if let Err(e) = spawned {
            // No thread to spare: read it here, as before.
            log::warn!("reload: no load thread ({e}); reading the file on the loop");
            let read = read_config(&self.path);
            let result = self.apply(read, watch, force, loading.started);
            answer_waiting(std::mem::take(&mut loading.waiting), &result);
            return;
        }
        self.loading = Some(loading);
    }

    /// When the reload being read is done, applies it, answers the clients
    /// waiting for it and starts the one queued meanwhile; what became of
    /// it (`None` while none was done, or when the watch's read was torn
    /// by a write: the watch reads it again once it settles). Called by
    /// the loop every turn.
    pub fn poll_load(&mut self) -> Option<Result<Published, ReloadError>> {
        let read = match self.loading.as_ref()?.done.try_recv() {
            Ok(r) => r,
            Err(TryRecvError::Empty) => return None,
            Err(TryRecvError::Disconnected) => Read {
                loaded: Err("the load thread ended without the configuration".to_owned()),
                torn: false,
            },
        };
        let loading = self.loading.take()?;
        let result = if loading.watch && read.torn {
            log::debug!("{} changed while it was read", self.path.display());
            None
        } else {
            let r = self.apply(read, loading.watch, loading.force, loading.started);
            answer_waiting(loading.waiting, &r);
            Some(r)
        };
        if let Some(q) = self.queued.take() {
            let mut waiting = q.waiting.into_iter();
            self.begin_reload(false, q.force, waiting.next());
            if let Some(l) = &mut self.loading {
                l.waiting.extend(waiting);
            }
        }
        result
    }

    /// The file watch's turn: when the file changed and settled (and no
    /// reload is being read), starts reading it; whether it did.
    pub fn poll_watch(&mut self) -> bool {
        if self.loading.is_some() || !self.watch.due(&self.path) {
            return false;
        }
        log::info!("{} changed; reloading", self.path.display());
        self.begin_reload(true, false, None);
        true
    }

    /// Waits (briefly) until every running worker's pass uses snapshot
    /// `generation`, so that once a reload is answered "live" no packet is
    /// processed with the configuration it replaced. A worker finishes its
    /// pass on the snapshot it started with: microseconds on its own core,
    /// longer only when its core is shared and it was preempted.
    fn wait_for_workers(&self, generation: u32) {
        let deadline = Instant::now() + WORKER_PICKUP;
        while !self.shared.workers_on(generation) {
            if Instant::now() >= deadline {
                log::warn!(
                    "reload: a worker has not picked up generation {generation} within {} ms (a worker core shared or stalled?); it does at its next pass",
                    WORKER_PICKUP.as_millis()
                );
                return;
            }
            std::thread::sleep(Duration::from_micros(100));
        }
    }

    /// When the pending build's tables are done, hands them to the core
    /// (which publishes what is current). Called by the loop every tick.
    pub fn poll_build(&mut self) {
        let Some((build, done)) = &self.build else {
            return;
        };
        let build = *build;
        let built = match done.try_recv() {
            Ok(r) => r,
            Err(TryRecvError::Empty) => return,
            Err(TryRecvError::Disconnected) => {
                Err("the Maglev build thread ended without its tables".to_owned())
            }
        };
        self.build = None;
        let now = self.clock();
        self.core.tables_built(now, build, built, &mut self.probes);
        self.pump();
    }

    /// Whether a snapshot is waiting for Maglev tables a thread builds.
    pub fn building(&self) -> bool {
        self.core.building()
    }

    /// Periodic work: advances the workers' clock and has the core take a
    /// management step ([`Core::step`]: the flow table aged, the probers'
    /// verdicts, what workers saw of neighbours, plans, flow sync).
    pub fn tick(&mut self) {
        let now = self.clock();
        self.shared.set_tick(Tick::at(now));
        // What workers saw of neighbours (M47); at most a queue's worth.
        let q = &self.shared.neighbours;
        let sightings: Vec<_> = std::iter::from_fn(|| q.sightings.pop())
            .take(dataplane::neighbour::SIGHTINGS)
            .map(|s| (usize::from(s.port), s.ip, s.mac))
            .collect();
        // VRRP advertisements workers copied (at most a queue's worth).
        let vrrp: Vec<_> = std::iter::from_fn(|| q.vrrp.pop())
            .take(dataplane::neighbour::VRRP_QUEUE)
            .map(|f| (usize::from(f.port), f.bytes().to_vec()))
            .collect();
        let shared = self.shared.clone();
        let children = shared.snapshot.load().compiled.children.len();
        let counters = || sum_published(&shared, children);
        let inputs = Inputs {
            flows: &shared.flows,
            sightings,
            vrrp,
            counters: &counters,
            sync_queue: shared.flow_sync.as_deref(),
        };
        let (core, mut shell) = self.split();
        core.step(now, inputs, &mut shell);
        let at = Instant::now();
        if self.rates.due(at) {
            self.rates.push(at, sum_published(&shared, children));
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
    pub fn status(&mut self) -> report::Status {
        let flows = FlowUse::of(&self.shared.flows);
        let now = self.clock();
        let mut st = self.core.status(now, flows);
        st.speaker = self.speaker.as_ref().map(|sp| sp.status().report());
        st
    }

    /// One control-socket request: `ok` (or not) and the answer, for
    /// people or (`json`) as one JSON object. `status` and `reload` are
    /// the core's to answer; `stats` and `flows` are made of state the
    /// shell owns (counters, the flow table).
    pub fn request(&mut self, r: socket::Request, json: bool) -> (bool, String) {
        fn ok<T: serde::Serialize + std::fmt::Display>(json: bool, a: &T) -> (bool, String) {
            (
                true,
                if json {
                    report::json_ok(a)
                } else {
                    a.to_string()
                },
            )
        }
        let err = |text: String| {
            (
                false,
                if json {
                    report::json_error(&text)
                } else {
                    text
                },
            )
        };
        match r {
            socket::Request::Status => ok(json, &self.status()),
            socket::Request::Reload { force } => reload_reply(&self.reload_with(force), json),
            socket::Request::Stats => ok(json, &self.stats()),
            socket::Request::Flows(q) => ok(json, &self.flows(&q)),
            socket::Request::Simulate(q) => ok(json, &self.simulate(&q)),
            // Taken over time: the loop answers it when it ends
            // (`Manager::begin_trace`); here there is no loop to wait on.
            socket::Request::Trace(_) => {
                err("trace: only a running daemon's control socket takes a trace\n".into())
            }
            socket::Request::Drain { scope, name, on } => {
                let now = self.clock();
                let answer = self.core.drain(now, scope, &name, on);
                self.pump();
                let message = match answer {
                    Ok(t) => t,
                    Err(e) => return err(format!("{e}\n")),
                };
                let mut warning = None;
                if let Some(path) = &self.drain_file
                    && let Err(e) = crate::drain::save(path, self.core.drained())
                {
                    let e = format!(
                        "the drain state could not be saved to {} ({e}): it holds until the daemon stops",
                        path.display()
                    );
                    log::error!("{e}");
                    warning = Some(e);
                }
                ok(
                    json,
                    &report::Drain {
                        scope: scope.to_string(),
                        drained: self.core.drained().contains(scope, &name),
                        name,
                        message,
                        warning,
                    },
                )
            }
        }
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

    /// Every forwarding rule's and served child rule's exported state
    /// (M21), one `rule <name> <STATE>` line each.
    pub fn exported_status(&mut self) -> String {
        crate::rule_states_text(&self.core.exported_states())
    }

    /// Counters as OpenMetrics text (M42).
    pub fn metrics(&self) -> String {
        let snap = self.shared.snapshot.load();
        // One read of the workers' slots: the total is their sum, so the
        // two never disagree.
        let workers = published(&self.shared);
        let total = sum(&self.shared, &workers, snap.compiled.children.len());
        let core = &self.core;
        let mut x = metrics::Exposition::new();
        metrics::counters(&mut x, &total, &snap.compiled);
        metrics::workers(&mut x, &workers);
        metrics::rules(&mut x, &core.exported_states());
        metrics::transitions(&mut x, core.transitions());
        metrics::listeners(&mut x, self.listener_info());
        metrics::health(&mut x, core.probed());
        metrics::services(
            &mut x,
            &metrics::Services {
                compiled: core.compiled(),
                plans: core.plans(),
                snap: &snap,
                counters: &total,
                probed: core.probed(),
                slot_of: &|svc, id| core.slot_of(svc, id),
            },
        );
        metrics::flow_table(
            &mut x,
            self.shared.flows.capacity(),
            self.core.ageing().last_pass,
            self.core.ageing().expired as u64,
        );
        let (ok, rejected, last_error) = core.reloads();
        // The core's clock counts from start; the wall clock dates it.
        let last_reload = core
            .last_reload()
            .and_then(|at| std::time::SystemTime::now().checked_sub(core.now().saturating_sub(at)));
        metrics::config(
            &mut x,
            &metrics::ConfigState {
                generation: snap.generation,
                reloads: (ok, rejected),
                watch_refused: core.watch_refused(),
                reading: self.loading.is_some(),
                last_error,
                last_reload,
            },
        );
        metrics::neighbours(&mut x, core.neighbours(), &snap);
        metrics::vrrp(&mut x, core.vrrp());
        metrics::drain(&mut x, core.drained(), core.shutting_down());
        metrics::sync(&mut x, core.sync_counters());
        metrics::cluster(&mut x, &core.cluster());
        metrics::bgp(
            &mut x,
            core.announcement(),
            core.announcement_counts(),
            self.speaker
                .as_ref()
                .map(crate::bird::Speaker::status)
                .as_ref(),
        );
        x.text()
    }

    /// `spillway stats`.
    pub fn stats(&self) -> report::Stats {
        let c = self.counters();
        let live = self.shared.snapshot.load().compiled.clone();
        let listeners = self
            .listener_info()
            .iter()
            .map(|l| {
                let c = l.counters.values();
                report::Listener {
                    name: l.name.to_owned(),
                    answered: c.answered,
                    refused: c.refused,
                    max_connections: l.limits.max_connections,
                    per_client_refused: c.per_client_limit,
                    per_client_limit: l.limits.per_client,
                    denied: c.denied,
                    timed_out: c.timed_out,
                    oversized: c.oversized,
                    bad: c.bad,
                    busy: c.busy,
                    evicted: c.evicted,
                }
            })
            .collect();
        report::Stats {
            rates: self.rates.rates(Instant::now(), &c),
            counters: c,
            expired: self.core.ageing().expired,
            rules: live.children.iter().map(|ch| ch.name.clone()).collect(),
            listeners,
        }
    }

    /// `spillway flows`: the connection table filtered by `q`.
    pub fn flows(&self, q: &flows::FlowQuery) -> flows::FlowList {
        let snap = self.shared.snapshot.load();
        flows::list(q, &self.shared.flows, &snap, &snap.compiled, self.now())
    }

    /// `spillway simulate`: flow `q`'s decision from the live snapshot and
    /// the flow table, read only.
    pub fn simulate(&self, q: &crate::simulate::SimQuery) -> crate::simulate::Report {
        let snap = self.shared.snapshot.load();
        crate::simulate::answer(
            q,
            &snap,
            &self.shared.flows,
            self.now(),
            self.core.drained(),
        )
    }

    /// Runs the management loop on the calling thread until it stops:
    /// ticks every `period`, reloads when `reload` is set (SIGHUP) or the
    /// file changed, and between ticks answers the listeners' requests as
    /// they come. The loop never reads from or writes to a client (M50):
    /// the listeners' thread does, and a tick waits for at most one answer
    /// being computed.
    ///
    /// `stop` set (SIGTERM, SIGINT) starts the shutdown (M39): the core
    /// says it is shutting down (VIPs withdrawn) and the loop goes on for
    /// `[node] shutdown_drain`; `stop` set again meanwhile (a second
    /// signal) ends it at once. Two signals before the loop sees the first
    /// count as one.
    pub fn run(&mut self, period: Duration, reload: &AtomicBool, stop: &AtomicBool) {
        loop {
            if stop.swap(false, Ordering::AcqRel) {
                if self.core.shutting_down() {
                    log::warn!("second stop signal: exiting at once");
                    break;
                }
                let now = self.clock();
                let drain = self.core.compiled().node.shutdown_drain;
                self.core.shutdown(now, drain);
                self.pump();
            }
            if self.core.shutdown_due() {
                log::info!("shutdown drain period over: exiting");
                break;
            }
            let next_tick = Instant::now() + period;
            if reload.swap(false, Ordering::AcqRel) {
                self.begin_reload(false, false, None);
            }
            self.poll_watch();
            self.poll_load();
            self.poll_build();
            self.tick();
            self.poll_trace();
            self.answer_until(next_tick);
        }
        // Peers stop holding this node's share of capacity.
        let now = self.clock();
        self.core.leave(now);
        self.pump();
        if let Some(l) = &mut self.listeners {
            l.stop();
        }
        self.shared.stop.store(true, Ordering::Release);
        self.probes.stop();
        // Every VIP withdrawn before the process goes.
        if let Some(sp) = &mut self.speaker {
            sp.stop();
        }
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
            // A trace is taken over ticks: its client is answered when
            // it ends (`poll_trace`).
            if let listen::Job::Command(line) = &call.job
                && let Some((q, json)) = socket::trace_request(line)
            {
                self.begin_trace(q, (call.reply, json));
                continue;
            }
            // A reload is read off the loop: its client is answered when
            // it is done (`poll_load`).
            if let listen::Job::Command(line) = &call.job
                && let Some((force, json)) = socket::reload_request(line)
            {
                self.begin_reload(false, force, Some((call.reply, json)));
                continue;
            }
            let answer = self.answer(&call.job);
            // The client may have given up meanwhile; nothing to do then.
            let _ = call.reply.send(answer);
        }
    }
}

impl Manager {
    /// Arms the workers' tracer for `q`, or answers why not (one trace at
    /// a time; an unknown rule).
    fn begin_trace(&mut self, q: crate::trace::TraceQuery, waiter: Waiter) {
        let (reply, json) = waiter;
        let refuse = |reply: tokio::sync::oneshot::Sender<String>, e: String| {
            let text = if json {
                report::json_error(&e)
            } else {
                format!("{e}\n")
            };
            let _ = reply.send(socket::answer_line(false, &text));
        };
        if self.trace.is_some() {
            return refuse(
                reply,
                "a trace is being taken; try again when it ends".into(),
            );
        }
        let snap = self.shared.snapshot.load_full();
        let filter = match q.filter(&snap) {
            Ok(f) => f,
            Err(e) => return refuse(reply, e),
        };
        self.trace_session = self.trace_session.wrapping_add(1).max(1);
        self.shared.tracer.arm(self.trace_session, filter);
        log::info!("trace started: {}", q.to_command());
        self.trace = Some(ActiveTrace {
            query: q,
            started: Instant::now(),
            waiter: (reply, json),
            records: Vec::new(),
        });
    }

    /// Collects the workers' records; answers the trace's client once it
    /// has its count or its time is up.
    fn poll_trace(&mut self) {
        let Some(t) = &mut self.trace else {
            return;
        };
        let tracer = &self.shared.tracer;
        tracer.drain(&mut t.records);
        let (remaining, lost) = tracer.progress();
        let count = t.query.count as usize;
        let complete = t.records.len() >= count
            || (remaining == 0 && t.records.len() as u64 + lost >= count as u64);
        let timed_out = t.started.elapsed() >= Duration::from_secs(u64::from(t.query.seconds));
        // The client gone (it gave up): nothing to answer.
        let gone = t.waiter.0.is_closed();
        if !(complete || timed_out || gone) {
            return;
        }
        tracer.disarm();
        tracer.drain(&mut t.records);
        let Some(t) = self.trace.take() else {
            return;
        };
        let snap = self.shared.snapshot.load_full();
        let ports: Vec<String> = snap
            .compiled
            .settings
            .ports
            .iter()
            .map(|p| p.name.clone())
            .collect();
        let drained = self.core.drained();
        let packets: Vec<_> = t
            .records
            .iter()
            .take(count)
            .map(|r| crate::trace::TracedPacket::of(r, &snap, &ports, drained))
            .collect();
        let r = crate::trace::TraceReport {
            query: t.query.to_command(),
            stopped_by: if complete { "count" } else { "time" },
            seconds: t.started.elapsed().as_secs_f64(),
            lost,
            packets,
        };
        log::info!(
            "trace ended: {} packets in {:.1} s",
            r.packets.len(),
            r.seconds
        );
        let (reply, json) = t.waiter;
        let text = if json {
            report::json_ok(&r)
        } else {
            r.to_string()
        };
        let _ = reply.send(socket::answer_line(true, &text));
    }
}

/// The flow-sync sockets (M36, M54): one bound to `listen` for anything,
/// and one per peer, bound to `listen` too and connected to the peer, so
/// that the kernel sorts datagrams by source: a peer's go to its own socket
/// (and its own receive buffer), everything else to the listening one. A
/// flood from anywhere but a peer's address therefore never takes a peer's
/// place in a buffer or in a tick's reading ([`SYNC_RECV_PER_TICK`] each).
#[derive(Debug)]
struct SyncSockets {
    listen: std::net::SocketAddr,
    listener: std::net::UdpSocket,
    peers: Vec<PeerSocket>,
}

#[derive(Debug)]
struct PeerSocket {
    addr: std::net::SocketAddr,
    socket: Option<std::net::UdpSocket>,
    /// When connecting is tried again (it fails until `listen` is this
    /// host's address: see [`sync_socket`]).
    retry: Duration,
}

/// Connecting a peer's socket is tried this often until it succeeds.
const SYNC_CONNECT_RETRY: Duration = Duration::from_secs(1);

impl SyncSockets {
    /// The listening socket, and the peers' sockets that can be connected
    /// already (the others are tried again from [`SyncSockets::connect_due`]).
    fn bind(
        listen: std::net::SocketAddr,
        peers: &[std::net::SocketAddr],
        now: Duration,
    ) -> std::io::Result<SyncSockets> {
        let mut s = SyncSockets {
            listen,
            listener: sync_socket(listen, None)?,
            peers: peers
                .iter()
                .map(|&addr| PeerSocket {
                    addr,
                    socket: None,
                    retry: now,
                })
                .collect(),
        };
        s.connect_due(now);
        Ok(s)
    }

    /// Connects the peers' sockets not connected yet, if due.
    fn connect_due(&mut self, now: Duration) {
        for p in self.peers.iter_mut().filter(|p| p.socket.is_none()) {
            if now < p.retry {
                continue;
            }
            p.retry = now.saturating_add(SYNC_CONNECT_RETRY);
            match sync_socket(self.listen, Some(p.addr)) {
                Ok(s) => p.socket = Some(s),
                Err(e) => log::debug!("flow sync: socket for peer {}: {e}", p.addr),
            }
        }
    }

    /// Sends `datagram` to `to` (from the peer's socket when it has one).
    fn send(&self, to: std::net::SocketAddr, datagram: &[u8]) -> std::io::Result<usize> {
        match self
            .peers
            .iter()
            .find(|p| p.addr == to)
            .and_then(|p| p.socket.as_ref())
        {
            Some(s) => s.send(datagram),
            None => self.listener.send_to(datagram, to),
        }
    }

    /// Hands `take` what arrived: at most [`SYNC_RECV_PER_TICK`] datagrams
    /// from each peer's socket, then as many from the listening one (what a
    /// peer sent before its socket was connected, and everything from
    /// elsewhere: the core counts and drops that).
    fn receive(&self, mut take: impl FnMut(std::net::SocketAddr, &[u8])) {
        let mut buf = [0u8; 2048];
        for p in &self.peers {
            let Some(s) = &p.socket else { continue };
            for _ in 0..SYNC_RECV_PER_TICK {
                match s.recv(&mut buf) {
                    Ok(n) => take(p.addr, buf.get(..n).unwrap_or(&[])),
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) => {
                        // E.g. ECONNREFUSED: the peer's port unreachable
                        // (it is down). Read on next tick.
                        log::debug!("flow sync from {}: {e}", p.addr);
                        break;
                    }
                }
            }
        }
        for _ in 0..SYNC_RECV_PER_TICK {
            match self.listener.recv_from(&mut buf) {
                Ok((n, from)) => take(from, buf.get(..n).unwrap_or(&[])),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    log::debug!("flow sync: {e}");
                    break;
                }
            }
        }
    }
}

/// A reload's answer to a control-socket client: `ok` (or not) and the
/// text, for people or as JSON.
fn reload_reply(result: &Result<Published, ReloadError>, json: bool) -> (bool, String) {
    match (result, json) {
        (Ok(p), false) => (true, report::Reload::of(*p).to_string()),
        (Ok(p), true) => (true, report::json_ok(&report::Reload::of(*p))),
        (Err(e), json) => {
            let text = crate::reload_text(&Err(e.clone()));
            (
                false,
                if json {
                    report::json_error(&text)
                } else {
                    text
                },
            )
        }
    }
}

/// Answers the clients waiting for a reload (a client that gave up is
/// not there to read it).
fn answer_waiting(waiting: Vec<Waiter>, result: &Result<Published, ReloadError>) {
    for (reply, json) in waiting {
        let (ok, text) = reload_reply(result, json);
        let _ = reply.send(socket::answer_line(ok, &text));
    }
}

/// A flow-sync socket (non-blocking) bound to `listen`, connected to `peer`
/// if given. Bound also while `listen` is not (yet) the host's address: it
/// usually lives on the exception TAP, which this very process creates, so
/// it is configured only after the daemon started (IP_FREEBIND; until then
/// sends fail and are lost, and a peer's socket cannot be connected).
/// SO_REUSEPORT lets the listening socket and the peers' share the address
/// (only sockets of this user can join); the kernel gives a datagram to the
/// socket connected to its source before the unconnected one.
fn sync_socket(
    listen: std::net::SocketAddr,
    peer: Option<std::net::SocketAddr>,
) -> std::io::Result<std::net::UdpSocket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let s = Socket::new(
        Domain::for_address(listen),
        Type::DGRAM,
        Some(Protocol::UDP),
    )?;
    if listen.is_ipv4() {
        s.set_freebind_v4(true)?;
    } else {
        s.set_freebind_v6(true)?;
    }
    s.set_reuse_port(true)?;
    s.bind(&listen.into())?;
    if let Some(p) = peer {
        s.connect(&p.into())?;
    }
    s.set_nonblocking(true)?;
    Ok(s.into())
}

/// Every worker's last published counters, in worker order.
fn published(shared: &Shared) -> Vec<WorkerCounters> {
    shared
        .published
        .iter()
        .map(|slot| match slot.lock() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
        })
        .collect()
}

fn sum_published(shared: &Shared, children: usize) -> WorkerCounters {
    sum(shared, &published(shared), children)
}

/// The workers' counters summed (`workers`, as [`published`] read them).
fn sum(shared: &Shared, workers: &[WorkerCounters], children: usize) -> WorkerCounters {
    let mut total = WorkerCounters::new(children);
    for c in workers {
        total.add(c);
    }
    // The management core's own failed sends: frames a full outbox lost.
    total.nbr_send_failed += shared
        .neighbours
        .outbox_lost
        .load(std::sync::atomic::Ordering::Relaxed);
    total
}

/// The daemon's shell, as the core's outputs reach it: snapshots stored
/// where workers load them, frames queued for workers, Maglev builds on a
/// thread, the BGP speaker, the flow-sync sockets, the file watch, the
/// `log` crate.
struct DaemonShell<'a> {
    shared: &'a Shared,
    watch: &'a mut FileWatch,
    probes: &'a mut LiveProbes,
    build: &'a mut Option<(u64, Receiver<Result<BuiltTables, String>>)>,
    speaker: &'a mut Option<crate::bird::Speaker>,
    sync_socket: &'a mut Option<SyncSockets>,
}

impl Shell for DaemonShell<'_> {
    fn probes(&mut self) -> &mut dyn Probes {
        self.probes
    }

    fn publish(&mut self, snapshot: Arc<dataplane::Snapshot>) {
        self.shared.snapshot.store(snapshot);
    }

    fn build_tables(
        &mut self,
        build: u64,
        tables: Vec<dataplane::snapshot::TableKey>,
    ) -> Option<Result<BuiltTables, String>> {
        let (tx, done) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("spillway-maglev".into())
            .spawn(move || {
                let _ = tx.send(crate::core::build_tables(tables));
            });
        match spawned {
            Ok(_) => {
                *self.build = Some((build, done));
                None
            }
            // Fed back: the core reverts and may ask for more.
            Err(e) => Some(Err(format!("starting a Maglev build thread: {e}"))),
        }
    }

    fn transmit(&mut self, port: usize, frame: Vec<u8>) {
        // A worker sends it; a full outbox loses it (the next request or
        // announcement follows within seconds).
        let n = &self.shared.neighbours;
        let queued = dataplane::neighbour::OutFrame::new(port, &frame)
            .is_some_and(|f| n.outbox.push(f).is_ok());
        if !queued {
            n.outbox_lost.fetch_add(1, Ordering::Relaxed);
            log::debug!("neighbour frame for port {port} not queued");
        }
    }

    fn sync_send(&mut self, to: std::net::SocketAddr, datagram: Vec<u8>) {
        // Never waits: a datagram the socket does not take is lost (the
        // flow's entry is re-created from its packets there).
        if let Some(s) = self.sync_socket
            && let Err(e) = s.send(to, &datagram)
        {
            log::debug!("flow sync to {to}: {e}");
        }
    }

    fn sync_receive(&mut self, now: Duration, take: &mut dyn FnMut(std::net::SocketAddr, &[u8])) {
        if let Some(s) = self.sync_socket {
            s.connect_due(now);
            s.receive(take);
        }
    }

    fn announce(
        &mut self,
        _desired: crate::announce::Desired,
        routes: Vec<config::values::Prefix>,
    ) {
        if let Some(sp) = self.speaker {
            sp.set(routes);
        }
    }

    fn watch(&mut self, on: bool) {
        self.watch.enabled = on;
    }

    fn log(&mut self, _now: Duration, level: log::Level, target: &'static str, text: String) {
        log::log!(target: target, level, "{text}");
    }
}
