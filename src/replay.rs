//! `spillway replay`: push a pcap through the exact data-plane pipeline
//! offline and write what it transmits to a pcap (M40).
//!
//! The snapshots come from the management core itself ([`control::Core`]),
//! as the daemon's do: region order, zonal affinity, spillover from the
//! rates the replayed traffic makes, capacity scalers, drains. The core runs
//! on the capture's clock (time 0 is the first packet; a management tick
//! every [`PERIOD`] of capture time, as the daemon ticks), its probers are
//! scripted ([`control::ScriptedProbes`]): every endpoint and remote rule
//! healthy unless `--down` says otherwise (for the whole capture, or from
//! one second of it to another: a backend that fails or joins mid-capture,
//! as the health checker would report it). Flow cookies come from a fixed
//! seed. What is not modelled: real probe timing (a verdict takes effect at
//! the next tick, with no thresholds or intervals), neighbour resolution
//! (the configured MACs are used), and the workers' counter publication
//! delay (the core reads the pipeline's counters as they are).

use crate::output::outln;
use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use config::schema::PortRole;
use control::scripted::State;
use control::{Core, Inputs, Recorder, ScriptedProbes};
use dataplane::counters::{Text, line};
use dataplane::{
    BURST, ChildCounters, DropReason, Engine, Local, PacketIo, Pipeline, Routes, Snapshot, Tick,
    VecBurst, WorkerCounters,
};
use flowtable::FlowTable;
use pcap_file::TsResolution;
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapReader, PcapWriter};
use wire::buf::{MemBuf, PacketBuf};
use wire::burst::PacketBurst;
use wire::error::BufError;
use wire::ethernet::MacAddr;

/// Headroom in front of each packet, as DPDK mbufs have.
const HEADROOM: usize = 128;
/// Largest frame replayed: an IP packet of 65535 bytes behind an Ethernet
/// header and a VLAN tag.
const MAX_PACKET: usize = 65535 + 14 + 4;
/// Snaplen of the output pcap (libpcap's largest): what encapsulation adds
/// may take a frame past the input's snaplen and past 65535 bytes, and every
/// transmitted frame is written whole.
const OUTPUT_SNAPLEN: u32 = 262_144;
const _: () = assert!(HEADROOM + MAX_PACKET <= OUTPUT_SNAPLEN as usize);
/// Capture time between management ticks: the daemon's period.
pub const PERIOD: Duration = control::TICK_PERIOD;
/// A stretch of the capture without packets longer than this is not ticked
/// through whole: after [`SETTLE`] of ticks (plans see the rates fall) the
/// clock jumps to [`SETTLE`] before the next packet. A capture with a gap of
/// days is replayed in seconds; nothing the core decides in a quiet stretch
/// outlives it except drains ending and health changes, which the ticks
/// after the jump still see.
const LONG_GAP: Duration = Duration::from_secs(10);
const SETTLE: Duration = Duration::from_secs(2);

/// `spillway replay`'s arguments: the options as clap parses them, and the
/// timed changes (`--at T` followed by `--down`, `--up`, `--reload`) read
/// from their order on the command line.
#[derive(Debug)]
pub struct Args {
    opts: Opts,
    /// The changes at given capture times, in time order (ties: command
    /// line order).
    events: Vec<Event>,
    /// `--down` without a preceding `--at`: windows of whole seconds.
    windows: Vec<Down>,
}

#[derive(clap::Args, Debug)]
#[command(
    after_long_help = "Timed changes: `--at 2s --down 10.0.1.12 --at 5s --up 10.0.1.12 --at 3s --reload new.toml`. \
Each `--at TIME` (capture time since the first packet: 500ms, 2s, 1m30s) applies to the `--down`, `--up`, \
`--remote` and `--reload` options after it, up to the next `--at`. Health changes take effect at the next management tick \
(every 50 ms of capture time), as a prober's verdict would; a reload goes through the same validation as \
`spillway reload` (a rejected one leaves the running configuration, and the summary says why).\n\n\
Not modelled: real probe timing (intervals, thresholds, timeouts: a scripted verdict is the checker's \
verdict at once), ARP/NDP (a next hop without a static MAC stays unresolved: its packets are dropped as \
no_neighbour and its endpoints get no new flows, unless `--neighbour IP=MAC` says it answers, from the first \
tick on), remote rules' polling (a remote \
rule's state is what `--remote` says, HEALTHY unless told), and the delay before workers publish their counters (the core reads the \
pipeline's counters as they are at each tick)."
)]
struct Opts {
    /// The configuration file.
    #[arg(long, short)]
    config: PathBuf,
    /// Packets to process (pcap, Ethernet).
    #[arg(long, short)]
    input: PathBuf,
    /// Where transmitted packets go (pcap), in processing order.
    #[arg(long, short)]
    output: PathBuf,
    /// Treat this endpoint address as failing its health check
    /// (repeatable): for the whole capture, or with `@FROM` from second FROM
    /// of the capture on, or with `@FROM-UNTIL` from second FROM until
    /// second UNTIL (healthy again from then; `@0-20` joins at 20 s).
    /// Seconds count from the capture's first packet, as the clock does.
    /// After an `--at TIME`: failing from TIME on (no window then).
    #[arg(long, value_name = "ADDRESS[@FROM[-UNTIL]]", value_parser = parse_down)]
    down: Vec<Down>,
    /// After an `--at TIME`: this endpoint address passes its health check
    /// from TIME on (repeatable).
    #[arg(long, value_name = "ADDRESS")]
    up: Vec<IpAddr>,
    /// After an `--at TIME`: reload this configuration file at TIME, as
    /// `spillway reload` would (repeatable).
    #[arg(long, value_name = "FILE")]
    reload: Vec<PathBuf>,
    /// A remote rule's exported state as its peer answers it (`RULE` is
    /// the rule's name on the peer; HEALTHY, UNHEALTHY or UNKNOWN):
    /// for the whole capture, or after an `--at TIME` from TIME on
    /// (repeatable). Unscripted remote rules are HEALTHY.
    #[arg(long, value_name = "RULE=STATE", value_parser = parse_remote)]
    remote: Vec<(String, State)>,
    /// Capture time (since the first packet) of the `--down`, `--up`,
    /// `--remote` and `--reload` options that follow it.
    #[arg(long, value_name = "TIME")]
    at: Vec<config::values::Duration>,
    /// A next hop (gateway or endpoint without a static MAC) that answers
    /// ARP/NDP at this MAC for the whole capture (repeatable); a next hop
    /// not named stays unresolved (M47).
    #[arg(long, value_name = "IP=MAC", value_parser = parse_neighbour)]
    neighbour: Vec<(IpAddr, config::values::MacAddr)>,
    /// Seed of the flow-cookie generator (and of the flow table's
    /// placement, unless `--placement-seed` gives that its own).
    #[arg(long, default_value_t = 0x5350_494c_4c57_4159)]
    seed: u64,
    /// Seed of the flow table's placement key alone: two replays that
    /// differ only in `--seed` then fill the table alike, and only their
    /// cookies differ (perf/flood.sh tells an entry's packets by that).
    #[arg(long)]
    placement_seed: Option<u64>,
}

/// A change at a given capture time.
#[derive(Debug, Clone)]
struct Event {
    at: Duration,
    what: Change,
}

#[derive(Debug, Clone)]
enum Change {
    Down(IpAddr),
    Up(IpAddr),
    Reload(PathBuf),
    Remote(String, State),
}

/// `--neighbour`'s next hops answer, each on the port it is resolved on.
fn neighbour_answers(core: &Core, args: &Args) -> Vec<(usize, IpAddr, MacAddr)> {
    if args.opts.neighbour.is_empty() {
        return Vec::new();
    }
    let hops = dataplane::nexthop::next_hops(core.compiled());
    args.opts
        .neighbour
        .iter()
        .flat_map(|(ip, mac)| {
            hops.iter()
                .filter(move |h| h.addr == *ip)
                .map(move |h| (h.port, *ip, mac.0))
        })
        .collect()
}

/// `--neighbour IP=MAC`.
fn parse_neighbour(s: &str) -> Result<(IpAddr, config::values::MacAddr), String> {
    let Some((ip, mac)) = s.split_once('=') else {
        return Err(format!("{s:?}: write IP=MAC"));
    };
    let ip: IpAddr = ip.parse().map_err(|e| format!("{ip:?}: {e}"))?;
    let mac: config::values::MacAddr = mac.parse().map_err(|e| format!("{mac:?}: {e}"))?;
    Ok((ip, mac))
}

/// `--remote RULE=STATE`.
fn parse_remote(s: &str) -> Result<(String, State), String> {
    let Some((rule, state)) = s.split_once('=') else {
        return Err(format!("{s:?}: write RULE=STATE"));
    };
    let state = match state.to_ascii_uppercase().as_str() {
        "HEALTHY" => State::Healthy,
        "UNHEALTHY" => State::Unhealthy,
        "UNKNOWN" => State::Unknown,
        _ => return Err(format!("{state:?}: HEALTHY, UNHEALTHY or UNKNOWN")),
    };
    if rule.is_empty() {
        return Err(format!("{s:?}: no rule name"));
    }
    Ok((rule.to_owned(), state))
}

impl clap::FromArgMatches for Args {
    fn from_arg_matches(m: &clap::ArgMatches) -> Result<Self, clap::Error> {
        let opts = Opts::from_arg_matches(m)?;
        let index = |id: &str| -> Vec<usize> {
            m.indices_of(id).map(Iterator::collect).unwrap_or_default()
        };
        // Every option in command-line order.
        let mut order: Vec<(usize, &str, usize)> = Vec::new();
        for id in ["at", "down", "up", "reload", "remote"] {
            order.extend(index(id).into_iter().enumerate().map(|(i, at)| (at, id, i)));
        }
        order.sort_unstable();
        let err = |msg: String| clap::Error::raw(clap::error::ErrorKind::ArgumentConflict, msg);
        let (mut events, mut windows, mut at) = (Vec::new(), Vec::new(), None);
        for (_, id, i) in order {
            let (when, what) = match (id, at) {
                ("at", _) => {
                    at = opts.at.get(i).map(|d| d.get());
                    continue;
                }
                ("down", None) => {
                    windows.extend(opts.down.get(i).cloned());
                    continue;
                }
                ("down", Some(t)) => {
                    let Some(d) = opts.down.get(i) else { continue };
                    if d.from != 0 || d.until.is_some() {
                        return Err(err(format!(
                            "--down {}@…: after --at, the time is --at's (no window)\n",
                            d.address
                        )));
                    }
                    (t, Change::Down(d.address))
                }
                ("up", Some(t)) => match opts.up.get(i) {
                    Some(a) => (t, Change::Up(*a)),
                    None => continue,
                },
                ("remote", t) => match opts.remote.get(i) {
                    Some((rule, state)) => (
                        t.unwrap_or(Duration::ZERO),
                        Change::Remote(rule.clone(), *state),
                    ),
                    None => continue,
                },
                ("reload", Some(t)) => match opts.reload.get(i) {
                    Some(p) => (t, Change::Reload(p.clone())),
                    None => continue,
                },
                (id, _) => return Err(err(format!("--{id} needs an --at TIME before it"))),
            };
            events.push(Event { at: when, what });
        }
        events.sort_by_key(|e| e.at);
        Ok(Args {
            opts,
            events,
            windows,
        })
    }

    fn update_from_arg_matches(&mut self, m: &clap::ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
}

impl clap::Args for Args {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        Opts::augment_args(cmd)
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Opts::augment_args_for_update(cmd)
    }
}

/// `--down ADDRESS[@FROM[-UNTIL]]`: an endpoint failing its health check
/// for seconds `from..until` of the capture.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Down {
    address: IpAddr,
    from: u32,
    until: Option<u32>,
}

impl Down {
    fn covers(&self, address: IpAddr, second: u32) -> bool {
        self.address == address && second >= self.from && self.until.is_none_or(|u| second < u)
    }
}

fn parse_down(s: &str) -> Result<Down, String> {
    let (addr, window) = match s.split_once('@') {
        Some((a, w)) => (a, Some(w)),
        None => (s, None),
    };
    let address = addr
        .parse()
        .map_err(|_| format!("{addr:?} is not an IP address"))?;
    let second = |v: &str| {
        v.parse::<u32>()
            .map_err(|_| format!("{v:?} is not a whole number of seconds"))
    };
    let (from, until) = match window {
        None => (0, None),
        Some(w) => match w.split_once('-') {
            None => (second(w)?, None),
            Some((from, until)) => {
                let (from, until) = (second(from)?, second(until)?);
                if until <= from {
                    return Err(format!("UNTIL ({until}) must come after FROM ({from})"));
                }
                (from, Some(until))
            }
        },
    };
    Ok(Down {
        address,
        from,
        until,
    })
}

/// Every endpoint address of `compiled`, once each, in configuration order.
fn addresses(compiled: &config::compiled::Compiled) -> Vec<IpAddr> {
    let mut out: Vec<IpAddr> = Vec::new();
    for e in &compiled.endpoints {
        if !out.contains(&e.address) {
            out.push(e.address);
        }
    }
    out
}

/// The management core on the capture's clock, its shell (probers
/// scripted, outputs recorded), and the snapshot it last published.
struct Mgmt {
    core: Core,
    shell: Recorder,
    snap: Arc<Snapshot>,
    /// The capture time of the next tick.
    next_tick: Duration,
    /// Endpoint addresses, and whether each is down now (by `--down`).
    addresses: Vec<(IpAddr, bool)>,
    /// "second S: ADDRESS down|up" for each scripted change, in order.
    health_changes: Vec<String>,
    /// The timed changes, each reload's file as loaded at the start, and
    /// how many have happened.
    events: Vec<(Event, Option<Result<config::Loaded, String>>)>,
    done: usize,
    /// Health set by `--at`, by address: down or not (over `--down`
    /// windows from then on).
    set: Vec<(IpAddr, bool)>,
}

impl Mgmt {
    fn start(
        args: &Args,
        compiled: config::compiled::Compiled,
        events: Vec<(Event, Option<Result<config::Loaded, String>>)>,
    ) -> Result<Mgmt> {
        let local = Local::from_config(&compiled, |_| None);
        let mut probes = ScriptedProbes::new(State::Healthy);
        probes.report_unchecked(&compiled);
        // Health set at time 0 holds from the first packet on (a reload
        // at 0 waits for the first tick).
        let mut set: Vec<(IpAddr, bool)> = Vec::new();
        let mut done = 0;
        for (e, _) in &events {
            let (a, down) = match &e.what {
                Change::Down(a) if e.at.is_zero() => (*a, true),
                Change::Up(a) if e.at.is_zero() => (*a, false),
                Change::Remote(rule, state) if e.at.is_zero() => {
                    probes.set_remote(rule, *state);
                    done += 1;
                    continue;
                }
                _ => break,
            };
            set.retain(|(x, _)| *x != a);
            set.push((a, down));
            done += 1;
        }
        let addresses: Vec<(IpAddr, bool)> = addresses(&compiled)
            .into_iter()
            .map(|a| match set.iter().find(|(x, _)| *x == a) {
                Some(&(_, d)) => (a, d),
                None => (a, args.windows.iter().any(|d| d.covers(a, 0))),
            })
            .collect();
        for &(a, down) in &addresses {
            if down {
                probes.set_state(a, State::Unhealthy);
            }
        }
        // The all-zero cookie key, as the builder of tests and replays: a
        // replay's cookies depend on `--seed` only.
        let mut core = Core::start(
            &args.opts.config,
            compiled,
            local,
            dataplane::CookieKey::default(),
            Duration::ZERO,
            &mut probes,
        )
        .context("starting the management core")?;
        core.sightings(Duration::ZERO, neighbour_answers(&core, args));
        let snap = core.live().clone();
        let mut m = Mgmt {
            core,
            shell: Recorder::new(probes),
            snap,
            next_tick: PERIOD,
            addresses,
            health_changes: Vec::new(),
            events,
            done,
            set,
        };
        m.pump();
        Ok(m)
    }

    /// Carries out what the core asked for: the last snapshot published
    /// is the one the pipeline uses; tables are built at once; log lines
    /// are kept for the report. No ports to send on (`--neighbour` stands
    /// for the answers), no BGP speaker to drive, no sync peers.
    fn pump(&mut self) {
        self.core.carry_out(&mut self.shell);
        self.took_published();
    }

    fn took_published(&mut self) {
        if let Some(s) = self.shell.published.drain(..).next_back() {
            self.snap = s;
        }
        self.shell.sent.clear();
    }

    /// What the core logged, with the capture time.
    fn logs(&self) -> impl Iterator<Item = String> + '_ {
        self.shell.logs.iter().map(|(at, level, text)| {
            format!(
                "{:.3} s: {}: {text}",
                at.as_secs_f64(),
                level.as_str().to_lowercase()
            )
        })
    }

    /// Ticks through capture time up to `until` (every tick due by then),
    /// as the daemon's loop would: scripted health in, then the core's
    /// periodic work with the pipeline's counters, then a slice of the flow
    /// table aged. `last_packet` is the capture time of the latest packet.
    fn advance(
        &mut self,
        args: &Args,
        until: Duration,
        last_packet: Duration,
        flows: &FlowTable,
        counters: &WorkerCounters,
    ) {
        while self.next_tick <= until {
            if until.saturating_sub(self.next_tick) > LONG_GAP
                && self.next_tick.saturating_sub(last_packet) > SETTLE
            {
                let to = until.saturating_sub(SETTLE);
                let periods = to.as_nanos() / PERIOD.as_nanos();
                let jump = PERIOD.saturating_mul(u32::try_from(periods).unwrap_or(u32::MAX));
                self.next_tick = self.next_tick.max(jump);
            }
            let now = self.next_tick;
            self.step(args, now, flows, counters);
            self.next_tick = now + PERIOD;
        }
    }

    /// Carries out the timed changes due by `now`: health set, reloads
    /// handed to the core as `spillway reload` hands them.
    fn changes(&mut self, now: Duration) {
        while let Some((e, loaded)) = self.events.get_mut(self.done)
            && e.at <= now
        {
            self.done += 1;
            let (what, loaded) = (e.what.clone(), loaded.take());
            match what {
                Change::Remote(rule, state) => {
                    self.health_changes.push(format!(
                        "{:.3} s: remote rule {rule} {state}",
                        now.as_secs_f64()
                    ));
                    self.shell.probes.set_remote(&rule, state);
                }
                Change::Down(a) | Change::Up(a) => {
                    let down = matches!(what, Change::Down(_));
                    self.set.retain(|(x, _)| *x != a);
                    self.set.push((a, down));
                }
                Change::Reload(path) => {
                    let loaded = loaded.unwrap_or_else(|| Err("not loaded".into()));
                    // The endpoints of services without a check follow the
                    // configuration the core runs (back if refused).
                    if let Ok(l) = &loaded {
                        self.shell.probes.report_unchecked(&l.compiled);
                    }
                    let answer = self.core.reload(now, loaded, false, &mut self.shell.probes);
                    if answer.is_err() {
                        let running = self.core.compiled().clone();
                        self.shell.probes.report_unchecked(&running);
                    }
                    for a in addresses(self.core.compiled()) {
                        if !self.addresses.iter().any(|(x, _)| *x == a) {
                            self.addresses.push((a, false));
                        }
                    }
                    self.health_changes.push(format!(
                        "{:.3} s: reload {}: {}",
                        now.as_secs_f64(),
                        path.display(),
                        control::reload_text(&answer).trim_end().replace('\n', " ")
                    ));
                    self.pump();
                }
            }
        }
    }

    fn step(&mut self, args: &Args, now: Duration, flows: &FlowTable, counters: &WorkerCounters) {
        self.changes(now);
        let second = Tick::at(now).get();
        for (a, down) in &mut self.addresses {
            let is = match self.set.iter().find(|(x, _)| x == a) {
                Some(&(_, d)) => d,
                None => args.windows.iter().any(|d| d.covers(*a, second)),
            };
            if is != *down {
                *down = is;
                let (state, word) = if is {
                    (State::Unhealthy, "down")
                } else {
                    (State::Healthy, "up")
                };
                self.shell.probes.set_state(*a, state);
                // Whole seconds (`--down` windows, most `--at`s), or to
                // the millisecond.
                let when = if now.subsec_nanos() == 0 {
                    format!("second {second}")
                } else {
                    format!("{:.3} s", now.as_secs_f64())
                };
                self.health_changes.push(format!("{when}: {a} {word}"));
            }
        }
        let inputs = Inputs {
            flows,
            // `--neighbour`: the next hop answers every tick (so it never
            // ages out).
            sightings: neighbour_answers(&self.core, args),
            counters: &|| counters.clone(),
            sync_queue: None,
        };
        self.core.step(now, inputs, &mut self.shell);
        self.took_published();
    }
}

pub fn run(args: &Args) -> Result<()> {
    let loaded = config::load(&args.opts.config).map_err(|e| anyhow::anyhow!("{e}"))?;
    // Reloaded files are read now: a missing one fails the replay before
    // it starts; one that does not validate is refused at its time, as
    // `spillway reload` refuses it.
    let mut known = addresses(&loaded.compiled);
    let mut events = Vec::new();
    for e in &args.events {
        let file = match &e.what {
            Change::Reload(path) => {
                if !path.is_file() {
                    bail!("--reload {}: no such file", path.display());
                }
                let l = config::load(path).map_err(|e| e.to_string());
                if let Ok(l) = &l {
                    known.extend(addresses(&l.compiled));
                }
                Some(l)
            }
            _ => None,
        };
        events.push((e.clone(), file));
    }
    let timed = args.events.iter().filter_map(|e| match e.what {
        Change::Down(a) => Some(("--down", a)),
        Change::Up(a) => Some(("--up", a)),
        Change::Reload(_) | Change::Remote(..) => None,
    });
    for (opt, a) in args
        .windows
        .iter()
        .map(|d| ("--down", d.address))
        .chain(timed)
    {
        if !known.contains(&a) {
            bail!("{opt} {a}: no endpoint has that address");
        }
    }
    let mut mgmt = Mgmt::start(args, loaded.compiled, events)?;
    let compiled = mgmt.snap.compiled.clone();
    let capacity = compiled.settings.dataplane.flow_table_capacity;
    // A placement fixed by the seeds: the output depends on the input and
    // the seeds only, also where the table fills (a daemon's is random).
    let placement = args.opts.placement_seed.unwrap_or(args.opts.seed);
    let flows = FlowTable::new(flowtable::Config {
        placement: Some(flowtable::PlacementKey::fixed(placement, 0)),
        ..dataplane::flow_table_config(&compiled.settings.dataplane)
    })
    .with_context(|| format!("flow table of {capacity} entries"))?;
    let worker = Pipeline::new(args.opts.seed, compiled.children.len());
    // The configured ports, plus an uplink when none is configured; a frame
    // arrives on the data port it is addressed to (`arrival_ports`), else
    // on the (first) uplink.
    let mut roles: Vec<PortRole> = compiled.settings.ports.iter().map(|p| p.role).collect();
    if !roles.contains(&PortRole::Uplink) {
        roles.push(PortRole::Uplink);
    }
    let routes = Routes::with_exceptions(&roles, &compiled.settings.exception_for);
    let mut engine = Engine::with_routes(worker, &roles, routes, BURST, || {
        VecBurst::with_capacity(BURST)
    });
    let uplink = engine.routes().uplink.unwrap_or(0);

    let input = File::open(&args.opts.input)
        .with_context(|| format!("opening {}", args.opts.input.display()))?;
    let mut reader = PcapReader::new(BufReader::new(input))
        .with_context(|| format!("{}: not a pcap file", args.opts.input.display()))?;
    let in_header = reader.header();
    let output = File::create(&args.opts.output)
        .with_context(|| format!("creating {}", args.opts.output.display()))?;
    let out_header = PcapHeader {
        snaplen: OUTPUT_SNAPLEN,
        ..PcapHeader::default()
    };
    let arrival = arrival_ports(&roles, &mgmt.snap.local.port_macs);
    let mut io = ReplayIo {
        staged_port: uplink,
        burst_ts: Duration::ZERO,
        roles: roles.clone(),
        staged: Vec::with_capacity(BURST),
        free: Vec::new(),
        writer: PcapWriter::with_header(BufWriter::new(output), out_header)
            .with_context(|| format!("writing {}", args.opts.output.display()))?,
        written: 0,
        error: None,
    };

    let mut first_ts = None;
    let (mut seen, mut too_big, mut truncated) = (0u64, 0u64, 0u64);
    let mut tick = None;
    let mut last_packet = Duration::ZERO;
    loop {
        // Raw records: pcap-file's checks of each record against the file's
        // snaplen would turn a capture's truncated records (legal: a
        // capture with a small snaplen) into a failed replay.
        let pkt = match reader.next_raw_packet() {
            Some(p) => {
                let at = || format!("{}: packet {}", args.opts.input.display(), seen + 1);
                let raw = p.with_context(at)?;
                let timestamp =
                    timestamp(raw.ts_sec, raw.ts_frac, in_header.ts_resolution).with_context(at)?;
                Some(Record {
                    timestamp,
                    truncated: raw.incl_len < raw.orig_len,
                    data: raw.data,
                })
            }
            None => None,
        };
        // Capture time since the first packet: the core's clock.
        let rel = pkt.as_ref().map(|p| {
            let start = *first_ts.get_or_insert(p.timestamp);
            p.timestamp.saturating_sub(start)
        });
        let pkt_tick = rel.map(|r| Tick::at(r).get());
        // A burst holds packets of one management period: the core ticks
        // (and may publish) between bursts, as it does between a DPDK
        // worker's polls.
        // A burst holds the frames of one port: a frame for another port
        // waits for the next (the order of the capture is kept).
        let port = pkt
            .as_ref()
            .map(|p| arrival_port(&arrival, uplink, &p.data));
        if !io.staged.is_empty()
            && (io.staged.len() == BURST
                || rel.is_none_or(|r| r >= mgmt.next_tick)
                || port.is_some_and(|p| p != io.staged_port))
        {
            engine.poll(&mut io, &mgmt.snap, &flows, tick.unwrap_or(0));
            if let Some(e) = io.error.take() {
                return Err(e);
            }
        }
        let (Some(pkt), Some(rel)) = (pkt, rel) else {
            break;
        };
        seen += 1;
        mgmt.advance(args, rel, last_packet, &flows, &engine.worker.counters);
        last_packet = rel;
        tick = pkt_tick;
        if pkt.truncated {
            // Only part of the frame was captured: nothing to forward.
            truncated += 1;
            continue;
        }
        let mut buf = match io.free.pop() {
            Some(b) => b,
            None => ReplayPkt {
                buf: MemBuf::new(
                    vec![0u8; HEADROOM + MAX_PACKET].into_boxed_slice(),
                    HEADROOM,
                    &[],
                )?,
                ts: Duration::ZERO,
            },
        };
        if buf.buf.reset(HEADROOM, &pkt.data).is_err() {
            too_big += 1;
            io.free.push(buf);
            continue;
        }
        buf.ts = pkt.timestamp;
        io.staged_port = port.unwrap_or(uplink);
        io.staged.push(buf);
    }
    let written = io.written;
    drop(io);

    let c = &engine.worker.counters;
    outln!(
        "{}: {seen} packets in, {written} out to {}",
        args.opts.input.display(),
        args.opts.output.display()
    );
    outln!(
        "{}, dropped {}{}",
        line(c, WorkerCounters::TRAFFIC, Text::Replay),
        c.total_drops(),
        if too_big > 0 {
            format!(", {too_big} larger than {MAX_PACKET} bytes skipped")
        } else {
            String::new()
        }
    );
    for change in &mgmt.health_changes {
        outln!("health: {change}");
    }
    for l in mgmt.logs() {
        outln!("core: {l}");
    }
    if truncated > 0 {
        outln!(
            "{truncated} truncated by the capture (snaplen {}) skipped",
            in_header.snaplen
        );
    }
    outln!("flows: {}", line(c, WorkerCounters::FLOWS, Text::Replay));
    if c.decap_ipip + c.decap_gre + c.decap_gue + c.decap_geneve > 0 {
        outln!(
            "tunnels: decapsulated ipip {}, gre {}, gue {}, geneve {}",
            c.decap_ipip,
            c.decap_gre,
            c.decap_gue,
            c.decap_geneve
        );
    }
    for r in DropReason::ALL {
        if c.dropped(r) > 0 {
            outln!("  drop {}: {}", r.name(), c.dropped(r));
        }
    }
    if c.dropped(DropReason::L2ForeignDst) > 0 {
        // Replay has no device to ask for the uplink's MAC (M55).
        let local = &mgmt.snap.local;
        let mac = local.port_macs.get(uplink).copied().unwrap_or(local.mac);
        outln!(
            "  (frames to another MAC than the uplink's, {}: give the uplink the capture's destination MAC as its `mac`)",
            mac.map(|b| format!("{b:02x}")).join(":")
        );
    }
    for (child, cc) in compiled.children.iter().zip(&c.children) {
        if cc.packets > 0 {
            outln!(
                "  rule {}:{}",
                child.name,
                line(cc, ChildCounters::ALL, Text::Replay)
            );
        }
    }
    Ok(())
}

/// An input record.
struct Record<'a> {
    timestamp: Duration,
    /// Captured shorter than it was on the wire.
    truncated: bool,
    data: std::borrow::Cow<'a, [u8]>,
}

/// A record's capture time.
fn timestamp(sec: u32, frac: u32, resolution: TsResolution) -> Result<Duration> {
    let nanos = match resolution {
        TsResolution::MicroSecond => frac.checked_mul(1000),
        TsResolution::NanoSecond => Some(frac),
    };
    match nanos {
        Some(n) if n < 1_000_000_000 => Ok(Duration::new(u64::from(sec), n)),
        _ => bail!("timestamp fraction {frac} out of range"),
    }
}

/// A replayed packet: its bytes and its capture time (kept for the output).
struct ReplayPkt {
    buf: MemBuf<Box<[u8]>>,
    ts: Duration,
}

impl PacketBuf for ReplayPkt {
    fn data(&self) -> &[u8] {
        self.buf.data()
    }
    fn data_mut(&mut self) -> &mut [u8] {
        self.buf.data_mut()
    }
    fn headroom(&self) -> usize {
        self.buf.headroom()
    }
    fn prepend(&mut self, n: usize) -> Result<&mut [u8], BufError> {
        self.buf.prepend(n)
    }
    fn adj(&mut self, n: usize) -> Result<(), BufError> {
        self.buf.adj(n)
    }
    fn trim(&mut self, n: usize) -> Result<(), BufError> {
        self.buf.trim(n)
    }
    fn append(&mut self, n: usize) -> Result<&mut [u8], BufError> {
        self.buf.append(n)
    }
}

/// The data ports a unicast frame to their MAC arrives on in a replay: those
/// whose MAC no other port has (`port_macs` in port order; exception ports
/// never receive from the network).
fn arrival_ports(roles: &[PortRole], port_macs: &[MacAddr]) -> Vec<(MacAddr, usize)> {
    let data = |i: usize| roles.get(i).is_some_and(|r| *r != PortRole::Exception);
    port_macs
        .iter()
        .enumerate()
        .filter(|&(i, m)| data(i) && port_macs.iter().filter(|o| *o == m).count() == 1)
        .map(|(i, m)| (*m, i))
        .collect()
}

/// The port a frame arrives on: the one its destination MAC names
/// ([`arrival_ports`]), else the uplink — as a switch delivers it, so that
/// what only a port's own side may send (an appliance's return, M53) is
/// replayed from that side.
fn arrival_port(arrival: &[(MacAddr, usize)], uplink: usize, frame: &[u8]) -> usize {
    frame
        .get(..6)
        .and_then(|dst| arrival.iter().find(|(m, _)| m[..] == *dst))
        .map_or(uplink, |&(_, p)| p)
}

/// The pcap as the RX queues of the ports its frames are addressed to
/// ([`arrival_port`]); every port's TX writes the output pcap in transmit
/// order (the exception port's, which goes to the host and not to the
/// network, is counted but not written).
struct ReplayIo {
    /// The port the staged frames arrive on.
    staged_port: usize,
    /// Capture time of the latest packet received: what a packet the
    /// worker builds (a fragment, M48) is written with.
    burst_ts: Duration,
    roles: Vec<PortRole>,
    staged: Vec<ReplayPkt>,
    free: Vec<ReplayPkt>,
    writer: PcapWriter<BufWriter<File>>,
    written: u64,
    error: Option<anyhow::Error>,
}

impl PacketIo for ReplayIo {
    type Burst = VecBurst<ReplayPkt>;

    fn rx_burst(&mut self, port: usize, burst: &mut VecBurst<ReplayPkt>) -> usize {
        if port != self.staged_port {
            return 0;
        }
        let mut n = 0;
        for p in self.staged.drain(..) {
            self.burst_ts = p.ts;
            match burst.push(p) {
                Ok(()) => n += 1,
                Err(p) => self.free.push(p),
            }
        }
        n
    }

    /// A buffer for a frame the worker builds (the later fragments of a
    /// packet too big once encapsulated, M48), from the free list.
    fn alloc(&mut self, _port: usize) -> Option<ReplayPkt> {
        let mut p = match self.free.pop() {
            Some(p) => p,
            None => ReplayPkt {
                buf: MemBuf::new(
                    vec![0u8; HEADROOM + MAX_PACKET].into_boxed_slice(),
                    HEADROOM,
                    &[],
                )
                .ok()?,
                ts: Duration::ZERO,
            },
        };
        p.buf.reset(HEADROOM, &[]).ok()?;
        p.ts = self.burst_ts;
        Some(p)
    }

    fn tx_burst(&mut self, port: usize, burst: &mut VecBurst<ReplayPkt>) -> usize {
        let to_host = self.roles.get(port) == Some(&PortRole::Exception);
        burst.drain_each(|_, p| {
            if !to_host && self.error.is_none() {
                let data = p.data();
                match self.writer.write_packet(&PcapPacket::new(
                    p.ts,
                    u32::try_from(data.len()).unwrap_or(u32::MAX),
                    data,
                )) {
                    Ok(_) => self.written += 1,
                    Err(e) => {
                        self.error = Some(anyhow::Error::new(e).context("writing the output pcap"))
                    }
                }
            }
            self.free.push(p);
        });
        0
    }
}
