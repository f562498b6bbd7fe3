//! `spillway run`: the daemon (docs/requirements.md §1). The main thread becomes the
//! management core (EAL pins it to `management_core`); one poll-mode worker
//! per `worker_cores` entry, pinned and registered with DPDK, owns queue `i`
//! of every port. SIGHUP or `spillway reload` reloads the configuration
//! without stopping the workers. The first SIGINT/SIGTERM withdraws the
//! node's VIPs and keeps forwarding for `[node] shutdown_drain`, then stops
//! it cleanly; a second one stops it at once (M39).

use crate::output::{err, errln, out, outln};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use config::schema::PortRole;
use control::socket::Request;
use control::{Manager, Shared};
use dataplane::{BURST, BusyPoll, Engine, Local, Pipeline, Routes, WorkerLoop};
use dpdk::{DpdkIo, Eal, MbufBurst, Mempool, MempoolConfig, Port, PortConfig};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The configuration file.
    #[arg(long, short)]
    config: PathBuf,
    /// Seed worker 0's flow-cookie generator with this, as `spillway replay
    /// --seed` does (worker i: SEED + i), instead of the OS's random source.
    /// Makes every cookie predictable (M32): for perf/bench.sh's gateway
    /// return case, whose appliance answers are computed in advance. Hidden.
    #[arg(long, value_name = "SEED", hide = true)]
    fixed_cookie_seed: Option<u64>,
}

pub fn run(args: &Args) -> Result<()> {
    let loaded = config::load(&args.config).map_err(|e| anyhow::anyhow!("{e}"))?;
    for w in &loaded.warnings {
        log::warn!("{}: {w}", args.config.display());
    }
    let compiled = loaded.compiled;
    if let Some(seed) = args.fixed_cookie_seed {
        log::warn!(
            "--fixed-cookie-seed {seed}: flow cookies are predictable; for benchmarks only, never in service"
        );
    }
    let cookie_seed = args.fixed_cookie_seed;
    let dp = compiled.settings.dataplane.clone();
    let workers = dp.worker_cores.len();
    if compiled.settings.ports.is_empty() {
        bail!(
            "{}: no [[ports]] configured; the daemon needs at least an uplink port",
            args.config.display()
        );
    }

    let mut eal_args = dp.eal_args.clone();
    if !eal_args
        .iter()
        .any(|a| a == "-l" || a.starts_with("--lcores") || a == "-c")
    {
        // The management core is EAL's main lcore (the main thread, pinned
        // there); every worker core is one of EAL's worker lcores, whose
        // threads run the workers. DPDK's capture and inspection tools can
        // attach to EAL's own lcores, not to threads registered later.
        let cores: Vec<String> = std::iter::once(dp.management_core)
            .chain(dp.worker_cores.iter().copied())
            .map(|c| c.to_string())
            .collect();
        eal_args.splice(
            0..0,
            [
                "-l".to_string(),
                cores.join(","),
                "--main-lcore".to_string(),
                dp.management_core.to_string(),
            ],
        );
    }
    let eal = Eal::init(eal_args).context("cannot start DPDK")?;
    // Every buffer holds a whole frame of the largest port MTU (M48).
    let pool_cfg = MempoolConfig {
        data_room: config::memory::data_room(
            compiled
                .settings
                .ports
                .iter()
                .map(|p| p.mtu)
                .max()
                .unwrap_or(1500),
        ),
        ..MempoolConfig::new("spillway_rx", dp.mbufs)
    };
    let pool = Mempool::new(eal, &pool_cfg)
        .context("cannot create the packet pool (too few hugepages? try --no-huge in eal_args)")?;
    let start_in_use = pool.in_use();
    // DPDK's capture tools (dpdk-dumpcap, dpdk-pdump) attach as secondary
    // processes; nothing runs on the workers' path until one does.
    let capture = match dpdk::CaptureServer::start(eal) {
        Ok(c) => {
            log::info!(
                "packet capture: `dpdk-dumpcap --file-prefix={} -i PORT` attaches to this daemon",
                eal.file_prefix()
            );
            Some(c)
        }
        Err(e) => {
            log::info!("packet capture by DPDK's tools is off: {e}");
            None
        }
    };

    let queues = u16::try_from(workers).context("too many worker cores")?;
    let port_cfg = PortConfig {
        rx_queues: queues,
        tx_queues: queues,
        rx_descriptors: dp.queue_descriptors,
        tx_descriptors: dp.queue_descriptors,
        ..PortConfig::default()
    };
    let mut ports = Vec::new();
    for p in &compiled.settings.ports {
        let id = Port::find(eal, &p.device).with_context(|| format!("port {:?}", p.name))?;
        let cfg = PortConfig {
            mtu: Some(p.mtu),
            ..port_cfg.clone()
        };
        let mut port =
            Port::configure(eal, id, &cfg, &pool).with_context(|| format!("port {:?}", p.name))?;
        // A device that cannot change its MAC (net_pcap) may still be
        // configured with the one it has.
        if let Some(mac) = p.mac
            && port.mac() != mac.0
        {
            port.set_mac(mac.0)
                .with_context(|| format!("port {:?}: mac {mac}", p.name))?;
        }
        port.start().with_context(|| format!("port {:?}", p.name))?;
        log::info!(
            "port {} ({}, {}): {:?}, {} queue pairs, RSS {:#x}, MTU {}",
            p.name,
            port.name(),
            port.driver(),
            p.role,
            workers,
            port.rss_hash_functions(),
            port.mtu()
                .map_or_else(|| "unknown".to_owned(), |m| m.to_string())
        );
        ports.push((p.role, port));
    }
    // The kernel behind an exception interface answers as its data port's
    // NIC would (ARP, TCP to the host's own addresses), so by default it
    // gets that port's MAC: frames the data plane hands it are addressed to
    // that MAC (M47).
    let exception_for = compiled.settings.exception_for.clone();
    let macs: Vec<_> = ports.iter().map(|(_, port)| port.mac()).collect();
    for (i, (p, (role, port))) in compiled
        .settings
        .ports
        .iter()
        .zip(ports.iter_mut())
        .enumerate()
    {
        let data = exception_for.get(i).copied().flatten();
        if *role == PortRole::Exception
            && p.mac.is_none()
            && let Some((d, &mac)) = data.and_then(|d| Some((d, macs.get(d)?)))
        {
            port.set_mac(mac).with_context(|| {
                format!(
                    "exception port {:?}: cannot take the MAC of port {:?}",
                    p.name, compiled.settings.ports[d].name
                )
            })?;
        }
    }
    let local = Local::from_config(&compiled, |device| {
        compiled
            .settings
            .ports
            .iter()
            .zip(&ports)
            .find(|(p, _)| p.device == device)
            .map(|(_, (_, port))| port.mac())
    });
    let names: Vec<String> = compiled
        .settings
        .ports
        .iter()
        .map(|p| p.name.clone())
        .collect();
    let socket_path = compiled.settings.control.socket.clone();
    let watch = compiled.settings.control.watch_config;
    // Bound before the workers start: a control socket that cannot be set
    // up (in use, something else at its path, unknown group) stops here.
    let listeners = control::listen::Listeners::start(
        &compiled.settings.metrics,
        &compiled.settings.control,
        control::admission::configured_peers(&compiled),
    )?;
    // The flow table in the EAL's hugepages (DPDK's heap), so that it is on huge pages
    // whether or not the kernel grants transparent ones; on the heap under `--no-huge` or
    // when the hugepages left cannot hold it (`status` and the log say which).
    let huge = |bytes: usize, align: usize| {
        dpdk::HugeBlock::alloc(eal, bytes, align)
            .map(|b| Box::new(b) as Box<dyn flowtable::TableMemory>)
    };
    let (mut mgr, shared) = Manager::start(&args.config, compiled, local, workers, Some(&huge))?;
    mgr.watch_file(watch);
    // Next to the control socket: one file per daemon, in a directory that
    // is the daemon's (M37).
    mgr.keep_drain_state(&control::drain::state_path(&socket_path));
    mgr.serve(listeners);
    crate::telemetry::register(eal, &socket_path);

    let reload = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGHUP, reload.clone())?;
    signal_hook::flag::register(signal_hook::consts::SIGINT, stop.clone())?;
    signal_hook::flag::register(signal_hook::consts::SIGTERM, stop.clone())?;

    let links = std::thread::scope(|s| -> Result<Vec<LinkLog>> {
        dpdk::lcore_scope(eal, |lcores| -> Result<Vec<LinkLog>> {
            let started = start_workers(
                s,
                lcores,
                eal,
                &dp,
                &ports,
                &exception_for,
                &shared,
                cookie_seed,
            );
            if started.is_err() {
                shared.stop.store(true, Ordering::Release);
            }
            started?;
            // Every port's link, logged once per change and counted (a memif
            // port's peer restarting, a cable pulled): the workers keep polling.
            let links = std::thread::Builder::new()
                .name("spillway-links".into())
                .spawn_scoped(s, || watch_links(&ports, &names, &shared.stop))
                .inspect_err(|_| shared.stop.store(true, Ordering::Release))?;
            log::info!(
                "spillway running: {workers} workers; control socket {}",
                socket_path.display()
            );
            mgr.run(control::TICK_PERIOD, &reload, &stop);
            // Also when run() returned early: the link watcher waits for it.
            shared.stop.store(true, Ordering::Release);
            links
                .join()
                .map_err(|_| anyhow::anyhow!("the link watcher panicked"))
        })
    })?;
    shared.stop.store(true, Ordering::Release);
    out!("{}", mgr.stats());
    for l in &links {
        outln!(
            "port {}: link went down {} times, came up {} times",
            l.name,
            l.downs,
            l.ups
        );
    }
    // No capture tool is served past this point; then closing the ports
    // returns the mbufs their rings hold (and flushes file-backed devices),
    // and every mbuf must be back in the pool.
    drop(capture);
    drop(ports);
    let end_in_use = pool.in_use();
    outln!(
        "mempool {}: {start_in_use} mbufs in use at start, {end_in_use} at exit",
        pool.name()
    );
    if end_in_use != start_in_use {
        bail!(
            "{} mbufs did not come back to the pool (a leak: please report it)",
            end_in_use.abs_diff(start_in_use)
        );
    }
    Ok(())
}

/// Starts one worker per `worker_cores` entry: on EAL's worker lcore of
/// that core, or, when the EAL arguments did not make it one (an
/// operator's own `-l`), on a thread of `s` pinned there and registered
/// with DPDK (which shuts DPDK's multi-process tools out).
#[allow(clippy::too_many_arguments)]
fn start_workers<'scope, 'env>(
    s: &'scope std::thread::Scope<'scope, 'env>,
    lcores: &dpdk::LcoreScope<'env>,
    eal: &'env Eal,
    dp: &config::schema::Dataplane,
    ports: &'env [(PortRole, Port)],
    exception_for: &[Option<usize>],
    shared: &Arc<Shared>,
    cookie_seed: Option<u64>,
) -> Result<()> {
    for (i, &core) in dp.worker_cores.iter().enumerate() {
        let mut queues = Vec::new();
        for (_, port) in ports {
            let q = u16::try_from(i).context("too many worker cores")?;
            let (Some(rx), Some(tx)) = (port.rx_queue(q), port.tx_queue(q)) else {
                bail!("queue {i} of {} is taken", port.name());
            };
            queues.push((rx, tx));
        }
        let roles: Vec<PortRole> = ports.iter().map(|(role, _)| *role).collect();
        let routes = Routes::with_exceptions(&roles, exception_for);
        let shared = shared.clone();
        let seed = cookie_seed.map(|s| s.wrapping_add(i as u64));
        let job = move || worker(i, seed, &shared, eal, &roles, routes, DpdkIo::new(queues));
        if dpdk::is_worker_lcore(eal, core) {
            lcores
                .spawn(core, move || {
                    // EAL's name for it is `lcore-worker-N`; `top -H` and
                    // the tests know the workers as spillway-wI.
                    let _ = std::fs::write("/proc/thread-self/comm", format!("spillway-w{i}"));
                    job();
                })
                .with_context(|| format!("worker {i} on core {core}"))?;
            continue;
        }
        log::warn!(
            "worker {i}: core {core} is not among EAL's lcores (eal_args names its own): \
             running on a registered thread, so DPDK's capture tools cannot attach"
        );
        // Not core_affinity::get_core_ids(): after EAL init it lists only
        // the main thread's (management) core.
        let pin = core_affinity::CoreId { id: core as usize };
        std::thread::Builder::new()
            .name(format!("spillway-w{i}"))
            .spawn_scoped(s, move || {
                // Register first: DPDK gives a registered thread the main
                // lcore's CPU set, which would undo the pinning.
                if let Err(e) = dpdk::thread_register(eal) {
                    log::warn!("worker {i}: not registered with DPDK ({e}); mempool caches unused");
                }
                if !core_affinity::set_for_current(pin) {
                    log::warn!("worker {i}: cannot pin to core {core}; not pinned");
                }
                job();
            })?;
    }
    Ok(())
}

/// How often the link watcher reads the ports' link state.
const LINK_POLL: Duration = Duration::from_millis(100);

/// One port's link as the daemon saw it.
#[derive(Debug)]
struct LinkLog {
    name: String,
    up: Option<bool>,
    downs: u64,
    ups: u64,
}

impl LinkLog {
    fn new(name: &str) -> LinkLog {
        LinkLog {
            name: name.to_owned(),
            up: None,
            downs: 0,
            ups: 0,
        }
    }

    /// Records a reading; `Some(up)` when it is news (the first reading, or
    /// a change), counting changes.
    fn observe(&mut self, up: bool) -> Option<bool> {
        let was = self.up.replace(up);
        match was {
            Some(w) if w == up => None,
            None => Some(up),
            Some(_) => {
                if up {
                    self.ups += 1;
                } else {
                    self.downs += 1;
                }
                Some(up)
            }
        }
    }
}

/// Reads every port's link each [`LINK_POLL`] until `stop`; logs each
/// change once. A port whose link is down stays polled: its driver receives
/// nothing and takes nothing (`net_memif` while its peer is away), and
/// forwarding resumes when the link comes back.
fn watch_links(ports: &[(PortRole, Port)], names: &[String], stop: &AtomicBool) -> Vec<LinkLog> {
    let mut logs: Vec<LinkLog> = names.iter().map(|n| LinkLog::new(n)).collect();
    loop {
        for ((_, port), log) in ports.iter().zip(logs.iter_mut()) {
            let first = log.up.is_none();
            match (log.observe(port.link().up), first) {
                (Some(up), true) => log::info!(
                    "port {} ({}): link {} at start",
                    log.name,
                    port.name(),
                    if up { "is up" } else { "is down" }
                ),
                (Some(true), false) => {
                    log::info!("port {} ({}): link up", log.name, port.name());
                }
                (Some(false), false) => log::warn!(
                    "port {} ({}): link down; the port stays polled and forwards again when its link is back",
                    log.name,
                    port.name()
                ),
                (None, _) => {}
            }
        }
        if stop.load(Ordering::Acquire) {
            return logs;
        }
        std::thread::sleep(LINK_POLL);
    }
}

/// Eight bytes from the OS's random source (the one every random value of
/// the project comes from: `getrandom`).
fn os_random() -> Option<u64> {
    let mut b = [0u8; 8];
    getrandom::fill(&mut b).ok()?;
    Some(u64::from_ne_bytes(b))
}

/// One worker thread: its engine over its queues, run by the data plane's
/// loop, its counters published every ~100 ms of the CPU's cycle counter.
fn worker(
    index: usize,
    fixed_seed: Option<u64>,
    shared: &Shared,
    eal: &Eal,
    roles: &[PortRole],
    routes: Routes,
    mut io: DpdkIo<'_, BURST>,
) {
    // Flow cookies (M32) must not be guessable: the generator is seeded
    // from the OS, once, before the loop (the cycle counter only if the OS
    // has no random source to give).
    let seed = fixed_seed
        .or_else(os_random)
        .unwrap_or_else(|| dpdk::tsc() ^ (index as u64) << 8);
    let pipeline = Pipeline::new(seed, 0);
    let mut engine = Engine::with_routes(pipeline, roles, routes, BURST, MbufBurst::<BURST>::new);
    WorkerLoop {
        index,
        shared,
        clock: dpdk::tsc,
        publish_every: dpdk::tsc_hz(eal) / 10,
        idle: BusyPoll,
    }
    .run(&mut engine, &mut io);
}

/// The control socket `args` name.
fn socket_of(args: &ClientArgs) -> Result<PathBuf> {
    Ok(match (&args.socket, &args.config) {
        (Some(s), _) => s.clone(),
        (None, Some(c)) => {
            config::load(c)
                .map_err(|e| anyhow::anyhow!("{e}"))?
                .compiled
                .settings
                .control
                .socket
        }
        (None, None) => PathBuf::from(config::schema::DEFAULT_CONTROL_SOCKET),
    })
}

/// Sends `request` (with the word `json` after it under `--json`); whether
/// the daemon said ok, and its answer.
fn ask(request: &Request, args: &ClientArgs) -> Result<(bool, String)> {
    let socket = socket_of(args)?;
    let mut command = request.to_line();
    if args.json {
        command += " json";
    }
    control::socket::request(&socket, &command).with_context(|| {
        format!(
            "cannot reach spillway at {} (is it running?)",
            socket.display()
        )
    })
}

/// `spillway status|stats|reload|…`: asks the running daemon and prints its
/// answer (an error on stderr, or under `--json` on stdout as the JSON
/// object it is).
pub fn client(request: &Request, args: &ClientArgs) -> Result<std::process::ExitCode> {
    let (ok, text) = ask(request, args)?;
    if ok {
        out!("{text}");
        Ok(std::process::ExitCode::SUCCESS)
    } else {
        if args.json {
            out!("{text}");
        } else {
            err!("{text}");
        }
        Ok(std::process::ExitCode::FAILURE)
    }
}

/// A client command's error before or instead of an answer (bad
/// arguments, no daemon): under `--json`, `{"ok": false, "error": …}` on
/// stdout; else on stderr.
pub fn client_exit(json: bool, r: Result<std::process::ExitCode>) -> std::process::ExitCode {
    match r {
        Ok(code) => code,
        Err(e) if json => {
            out!("{}", control::report::json_error(&format!("{e:#}")));
            std::process::ExitCode::FAILURE
        }
        Err(e) => {
            errln!("spillway: error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[derive(clap::Args, Debug)]
pub struct ClientArgs {
    /// Control socket of the daemon.
    #[arg(long)]
    socket: Option<PathBuf>,
    /// Read the control socket path from this configuration file.
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// Answer with one JSON object, `"ok": true` or `"ok": false` with an
    /// `"error"` (field names: docs/operating.md, "Inspecting").
    #[arg(long)]
    pub json: bool,
}

/// `spillway stats` arguments.
#[derive(clap::Args, Debug)]
pub struct StatsArgs {
    #[command(flatten)]
    pub daemon: ClientArgs,
    /// Ask again every SECS seconds (default 2) until interrupted: on a
    /// terminal the screen is redrawn, otherwise each answer follows the
    /// last (under --json: one JSON object a line).
    #[arg(long, value_name = "SECS", num_args = 0..=1, default_missing_value = "2")]
    watch: Option<f64>,
}

/// `spillway stats [--watch [SECS]]`.
pub fn stats(args: &StatsArgs) -> Result<std::process::ExitCode> {
    use std::io::IsTerminal;
    let Some(every) = args.watch else {
        return client(&Request::Stats, &args.daemon);
    };
    if !(0.1..=86400.0).contains(&every) {
        bail!("--watch {every}: between 0.1 and 86400 seconds");
    }
    let redraw = std::io::stdout().is_terminal() && !args.daemon.json;
    loop {
        let (ok, text) = ask(&Request::Stats, &args.daemon)?;
        // Cursor home, clear the screen: the next answer replaces it.
        let clear = if redraw { "\x1b[H\x1b[2J" } else { "" };
        if !ok {
            if args.daemon.json {
                out!("{clear}{text}");
            } else {
                out!("{clear}");
                err!("{text}");
            }
            return Ok(std::process::ExitCode::FAILURE);
        }
        let gap = if !redraw && !args.daemon.json {
            "\n"
        } else {
            ""
        };
        // One write an answer; a reader gone (`… | head`) ends the loop.
        if !out!("{clear}{text}{gap}") {
            return Ok(std::process::ExitCode::SUCCESS);
        }
        std::thread::sleep(std::time::Duration::from_secs_f64(every));
    }
}

/// `spillway reload` arguments.
#[derive(clap::Args, Debug)]
pub struct ReloadArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    /// Apply the file even if it removes every forwarding rule or more than
    /// half of the served VIPs (refused otherwise: it looks like a
    /// half-written file).
    #[arg(long)]
    pub force: bool,
}

/// `spillway flows` arguments: where the daemon is, and which flows.
#[derive(clap::Args, Debug)]
pub struct FlowsArgs {
    #[command(flatten)]
    pub daemon: ClientArgs,
    /// Only flows to this VIP.
    #[arg(long)]
    vip: Option<std::net::IpAddr>,
    /// Only flows from this client address.
    #[arg(long)]
    client: Option<std::net::IpAddr>,
    /// Only flows on this backend (endpoint address).
    #[arg(long)]
    backend: Option<std::net::IpAddr>,
    /// Only flows of this backend service.
    #[arg(long)]
    service: Option<String>,
    /// Only flows of this protocol: tcp, udp, icmp, icmpv6 or a number.
    #[arg(long, value_parser = control::simulate::parse_proto)]
    proto: Option<u8>,
    /// Only entries in this state.
    #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(control::flows::STATES))]
    state: Option<String>,
    /// List at most this many entries (all matches are counted).
    #[arg(long, default_value_t = control::flows::DEFAULT_LIMIT)]
    limit: usize,
}

/// `spillway flows`: asks the daemon for its matching flow entries.
pub fn flows(args: &FlowsArgs) -> Result<std::process::ExitCode> {
    if let Some(s) = &args.service
        && (s.is_empty() || s.chars().any(|c| c.is_whitespace() || c == '='))
    {
        anyhow::bail!("--service {s:?}: a service name has no spaces or '='");
    }
    let q = control::flows::FlowQuery {
        vip: args.vip,
        client: args.client,
        backend: args.backend,
        service: args.service.clone(),
        proto: args.proto,
        state: args
            .state
            .as_deref()
            .and_then(|s| control::flows::STATES.into_iter().find(|x| *x == s)),
        limit: args.limit,
    };
    client(&Request::Flows(q), &args.daemon)
}

/// `spillway simulate` arguments: where the daemon is, and the flow.
#[derive(clap::Args, Debug)]
pub struct SimulateArgs {
    #[command(flatten)]
    pub daemon: ClientArgs,
    /// The client's address.
    #[arg(long)]
    src: std::net::IpAddr,
    /// The destination: a VIP (any address through a gateway rule).
    #[arg(long)]
    dst: std::net::IpAddr,
    /// tcp, udp, icmp, icmpv6 or a protocol number.
    #[arg(long, default_value = "tcp", value_parser = control::simulate::parse_proto)]
    proto: u8,
    /// The client's port (tcp, udp).
    #[arg(long)]
    sport: Option<u16>,
    /// The destination port (required for tcp and udp).
    #[arg(long)]
    dport: Option<u16>,
    /// TCP: an ACK of an established connection instead of a new
    /// connection's SYN.
    #[arg(long)]
    established: bool,
}

/// `spillway simulate`: asks the daemon how it would take a flow.
pub fn simulate(args: &SimulateArgs) -> Result<std::process::ExitCode> {
    let mut words = format!("src={} dst={} proto={}", args.src, args.dst, args.proto);
    if let Some(p) = args.sport {
        words += &format!(" sport={p}");
    }
    if let Some(p) = args.dport {
        words += &format!(" dport={p}");
    }
    if args.established {
        words += " established";
    }
    // Checked here too, so that a mistake is told before the daemon is asked.
    let q = control::simulate::SimQuery::parse(&words).map_err(|e| anyhow::anyhow!(e))?;
    client(&Request::Simulate(q), &args.daemon)
}

/// `spillway trace` arguments: which packets, and for how long.
#[derive(clap::Args, Debug)]
pub struct TraceArgs {
    #[command(flatten)]
    pub daemon: ClientArgs,
    /// Source address or prefix (ADDR or ADDR/LEN).
    #[arg(long)]
    src: Option<String>,
    /// Destination address or prefix.
    #[arg(long)]
    dst: Option<String>,
    /// Either address.
    #[arg(long)]
    host: Option<String>,
    /// tcp, udp, icmp, icmpv6 or a protocol number.
    #[arg(long)]
    proto: Option<String>,
    /// Source port.
    #[arg(long)]
    sport: Option<u16>,
    /// Destination port.
    #[arg(long)]
    dport: Option<u16>,
    /// Either port.
    #[arg(long)]
    port: Option<u16>,
    /// The forwarding rule's name.
    #[arg(long)]
    rule: Option<String>,
    /// Only dropped packets; with a reason (a drop counter's name, e.g.
    /// no_backend), only those.
    #[arg(long, value_name = "REASON", num_args = 0..=1, default_missing_value = "")]
    drop: Option<String>,
    /// Only packets not dropped.
    #[arg(long, conflicts_with = "drop")]
    forwarded: bool,
    /// Stop after this many packets (at most 10000).
    #[arg(long, default_value_t = control::trace::DEFAULT_COUNT)]
    count: u32,
    /// Stop after this many seconds (at most 25).
    #[arg(long, default_value_t = control::trace::DEFAULT_SECONDS)]
    seconds: u32,
}

/// `spillway trace`: the daemon's live decisions for matching packets.
pub fn trace(args: &TraceArgs) -> Result<std::process::ExitCode> {
    let mut words = Vec::new();
    for (k, v) in [
        ("src", &args.src),
        ("dst", &args.dst),
        ("host", &args.host),
        ("proto", &args.proto),
        ("rule", &args.rule),
    ] {
        if let Some(v) = v {
            words.push(format!("{k}={v}"));
        }
    }
    for (k, v) in [
        ("sport", args.sport),
        ("dport", args.dport),
        ("port", args.port),
    ] {
        if let Some(v) = v {
            words.push(format!("{k}={v}"));
        }
    }
    match args.drop.as_deref() {
        Some("") => words.push("drop".into()),
        Some(r) => words.push(format!("drop={r}")),
        None if args.forwarded => words.push("forwarded".into()),
        None => {}
    }
    words.push(format!("count={} seconds={}", args.count, args.seconds));
    // Checked here too, so that a mistake is told before the daemon is asked.
    let q = control::trace::TraceQuery::parse(&words.join(" ")).map_err(|e| anyhow::anyhow!(e))?;
    client(&Request::Trace(q), &args.daemon)
}

/// What `spillway drain` and `undrain` name.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum DrainScope {
    /// This node: its VIPs are withdrawn, forwarding goes on.
    Node,
    /// A zone: no new connections to its backends.
    Zone,
    /// A region: no new connections to its backends.
    Region,
}

/// `spillway drain|undrain` arguments.
#[derive(clap::Args, Debug)]
pub struct DrainArgs {
    /// What to drain.
    #[arg(value_enum)]
    scope: DrainScope,
    /// Its name, as the configuration writes it.
    name: String,
    #[command(flatten)]
    pub daemon: ClientArgs,
}

/// `spillway drain|undrain`: asks the daemon.
pub fn drain(on: bool, args: &DrainArgs) -> Result<std::process::ExitCode> {
    if !control::drain::valid_name(&args.name) {
        bail!(
            "{:?}: not a name (printable, no spaces, quotes or backslashes, at most {} bytes)",
            args.name,
            control::drain::MAX_NAME
        );
    }
    let scope = match args.scope {
        DrainScope::Node => control::drain::Scope::Node,
        DrainScope::Zone => control::drain::Scope::Zone,
        DrainScope::Region => control::drain::Scope::Region,
    };
    let request = Request::Drain {
        scope,
        name: args.name.clone(),
        on,
    };
    client(&request, &args.daemon)
}

#[cfg(test)]
mod tests {
    use super::LinkLog;

    #[test]
    fn link_changes_are_reported_once_and_counted() {
        let mut l = LinkLog::new("up");
        assert_eq!(l.observe(false), Some(false), "the first reading is news");
        assert_eq!(l.observe(false), None);
        assert_eq!(l.observe(true), Some(true));
        assert_eq!(l.observe(true), None);
        assert_eq!(l.observe(false), Some(false));
        assert_eq!(l.observe(true), Some(true));
        assert_eq!((l.downs, l.ups), (1, 2), "the first reading is no change");
    }
}
