//! `spillway run`: the daemon (SPEC §1). The main thread becomes the
//! management core (EAL pins it to `management_core`); one poll-mode worker
//! per `worker_cores` entry, pinned and registered with DPDK, owns queue `i`
//! of every port. SIGHUP or `spillway reload` reloads the configuration
//! without stopping the workers; SIGINT/SIGTERM stop it cleanly.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use config::schema::PortRole;
use control::{Manager, Shared};
use dataplane::{Local, Verdict, Worker};
use dpdk::{Eal, MbufBurst, Mempool, MempoolConfig, Port, PortConfig, RxQueue, TxQueue};

const BURST: usize = 32;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The configuration file.
    #[arg(long, short)]
    config: PathBuf,
}

/// A worker's view of one port.
struct WorkerPort<'p> {
    role: PortRole,
    rx: RxQueue<'p>,
    tx: TxQueue<'p>,
}

pub fn run(args: &Args) -> Result<()> {
    let loaded = config::load(&args.config).map_err(|e| anyhow::anyhow!("{e}"))?;
    for w in &loaded.warnings {
        log::warn!("{}: {w}", args.config.display());
    }
    let compiled = loaded.compiled;
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
        // EAL pins the main thread (our management core) to the first lcore.
        eal_args.splice(0..0, ["-l".to_string(), dp.management_core.to_string()]);
    }
    let eal = Eal::init(eal_args).context("cannot start DPDK")?;
    let pool = Mempool::new(eal, &MempoolConfig::new("spillway_rx", dp.mbufs))
        .context("cannot create the packet pool (too few hugepages? try --no-huge in eal_args)")?;
    let start_in_use = pool.in_use();

    let port_cfg = PortConfig {
        rx_queues: workers as u16,
        tx_queues: workers as u16,
        rx_descriptors: dp.queue_descriptors,
        tx_descriptors: dp.queue_descriptors,
        ..PortConfig::default()
    };
    let mut ports = Vec::new();
    for p in &compiled.settings.ports {
        let id = Port::find(eal, &p.device).with_context(|| format!("port {:?}", p.name))?;
        let mut port = Port::configure(eal, id, &port_cfg, &pool)
            .with_context(|| format!("port {:?}", p.name))?;
        port.start().with_context(|| format!("port {:?}", p.name))?;
        log::info!(
            "port {} ({}, {}): {:?}, {} queue pairs, RSS {:#x}",
            p.name,
            port.name(),
            port.driver(),
            p.role,
            workers,
            port.rss_hash_functions()
        );
        ports.push((p.role, port));
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
    let socket_path = compiled.settings.control.socket.clone();
    let (mut mgr, shared) = Manager::start(&args.config, compiled, local, workers)?;
    let socket = control::socket::ControlSocket::bind(&socket_path)
        .with_context(|| format!("control socket {}", socket_path.display()))?;

    let reload = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGHUP, reload.clone())?;
    signal_hook::flag::register(signal_hook::consts::SIGINT, stop.clone())?;
    signal_hook::flag::register(signal_hook::consts::SIGTERM, stop.clone())?;

    let cores = core_affinity::get_core_ids().unwrap_or_default();
    std::thread::scope(|s| -> Result<()> {
        for (i, &core) in dp.worker_cores.iter().enumerate() {
            let mut wports = Vec::new();
            for (role, port) in &ports {
                let (Some(rx), Some(tx)) = (port.rx_queue(i as u16), port.tx_queue(i as u16))
                else {
                    bail!("queue {i} of {} is taken", port.name());
                };
                wports.push(WorkerPort {
                    role: *role,
                    rx,
                    tx,
                });
            }
            let shared = shared.clone();
            let pin = cores.iter().copied().find(|c| c.id == core as usize);
            std::thread::Builder::new()
                .name(format!("spillway-w{i}"))
                .spawn_scoped(s, move || {
                    if let Some(c) = pin {
                        core_affinity::set_for_current(c);
                    }
                    if let Err(e) = dpdk::thread_register(eal) {
                        log::warn!(
                            "worker {i}: not registered with DPDK ({e}); mempool caches unused"
                        );
                    }
                    worker_loop(i, &shared, wports);
                })?;
        }
        log::info!(
            "spillway running: {workers} workers; control socket {}",
            socket_path.display()
        );
        mgr.run(Duration::from_millis(50), &reload, &stop, Some(&socket));
        Ok(())
    })?;
    shared.stop.store(true, Ordering::Release);
    print!("{}", mgr.stats());
    // Closing the ports returns the mbufs their rings hold (and flushes
    // file-backed devices); then every mbuf must be back in the pool.
    drop(ports);
    let end_in_use = pool.in_use();
    println!(
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

/// The poll loop of one worker: rx burst -> pipeline -> tx bursts.
fn worker_loop(index: usize, shared: &Shared, mut ports: Vec<WorkerPort<'_>>) {
    let mut worker = Worker::new(0x5350_494c_0000_0000 ^ (index as u64) << 8 ^ dpdk::tsc(), 0);
    let mut rx = MbufBurst::<BURST>::new();
    let mut verdicts = [Verdict::ToHost; BURST];
    // One TX burst per port; a received burst is sorted into them.
    let mut tx: Vec<MbufBurst<BURST>> = ports.iter().map(|_| MbufBurst::new()).collect();
    let uplink = ports.iter().position(|p| p.role == PortRole::Uplink);
    let backend = ports
        .iter()
        .position(|p| p.role == PortRole::Backend)
        .or(uplink);
    let exception = ports.iter().position(|p| p.role == PortRole::Exception);
    let publish_every = dpdk::tsc_hz(match Eal::get() {
        Some(e) => e,
        None => return,
    }) / 10;
    let mut last_publish = dpdk::tsc();

    while !shared.stop.load(Ordering::Relaxed) {
        let snap = shared.snapshot.load();
        worker
            .counters
            .resize_children(snap.compiled.children.len());
        let now = shared.now.load(Ordering::Relaxed);
        for p in 0..ports.len() {
            if ports[p].rx.rx_burst(&mut rx) == 0 {
                continue;
            }
            let dropped = &mut worker.counters.tx_dropped;
            if ports[p].role == PortRole::Exception {
                // From the host's stack (ARP, BGP, health probes): out the uplink.
                let out = uplink.unwrap_or(p);
                rx.drain_each(|_, m| push(&mut tx[out], m, dropped));
            } else {
                let n = rx.len();
                worker.process_burst(
                    &snap,
                    &shared.flows,
                    now,
                    rx.as_mut_slice(),
                    &mut verdicts[..n],
                );
                let counters = &mut worker.counters;
                rx.drain_each(|i, m| match verdicts[i] {
                    Verdict::Forward => match backend {
                        Some(b) => push(&mut tx[b], m, &mut counters.tx_dropped),
                        None => counters.tx_dropped += 1,
                    },
                    Verdict::Reply => push(&mut tx[p], m, &mut counters.tx_dropped),
                    Verdict::ToHost => match exception {
                        Some(e) => push(&mut tx[e], m, &mut counters.tx_dropped),
                        None => counters.host_dropped += 1,
                    },
                    Verdict::Drop(_) => {}
                });
            }
            // Send before the next port's burst, so that no TX burst ever
            // holds more than one RX burst's worth.
            flush(&mut ports, &mut tx, &mut worker.counters.tx_dropped);
        }
        let t = dpdk::tsc();
        if t.wrapping_sub(last_publish) >= publish_every {
            last_publish = t;
            if let Some(slot) = shared.published.get(index) {
                if let Ok(mut g) = slot.try_lock() {
                    g.clone_from(&worker.counters);
                }
            }
        }
    }
    if let Some(slot) = shared.published.get(index) {
        if let Ok(mut g) = slot.lock() {
            g.clone_from(&worker.counters);
        }
    }
}

/// Offers every non-empty TX burst to its port; frees and counts what a
/// device does not take.
fn flush(ports: &mut [WorkerPort<'_>], tx: &mut [MbufBurst<BURST>], dropped: &mut u64) {
    for (q, burst) in ports.iter_mut().zip(tx.iter_mut()) {
        if !burst.is_empty() {
            let (_, d) = q.tx.tx_burst_or_drop(burst);
            *dropped += d as u64;
        }
    }
}

/// Adds an mbuf to a TX burst; a full burst (more than one RX burst's worth
/// for one port cannot happen, but stay safe) frees and counts it.
fn push(burst: &mut MbufBurst<BURST>, m: dpdk::Mbuf, dropped: &mut u64) {
    if burst.push(m).is_err() {
        *dropped += 1;
    }
}

/// `spillway status|stats|reload`: ask the running daemon.
pub fn client(command: &str, args: &ClientArgs) -> Result<std::process::ExitCode> {
    let socket = match (&args.socket, &args.config) {
        (Some(s), _) => s.clone(),
        (None, Some(c)) => {
            config::load(c)
                .map_err(|e| anyhow::anyhow!("{e}"))?
                .compiled
                .settings
                .control
                .socket
        }
        (None, None) => PathBuf::from("/run/spillway/control.sock"),
    };
    let (ok, text) = control::socket::request(&socket, command).with_context(|| {
        format!(
            "cannot reach spillway at {} (is it running?)",
            socket.display()
        )
    })?;
    if ok {
        print!("{text}");
        Ok(std::process::ExitCode::SUCCESS)
    } else {
        eprint!("{text}");
        Ok(std::process::ExitCode::FAILURE)
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
}

/// `spillway flows` arguments: where the daemon is, and which flows.
#[derive(clap::Args, Debug)]
pub struct FlowsArgs {
    #[command(flatten)]
    daemon: ClientArgs,
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
        limit: args.limit,
    };
    client(&q.to_command(), &args.daemon)
}
