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

use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use config::schema::PortRole;
use control::scripted::State;
use control::{Core, Output, ScriptedProbes};
use dataplane::counters::{Text, line};
use dataplane::{
    BURST, ChildCounters, DropReason, Engine, Local, PacketIo, Snapshot, VecBurst, Worker,
    WorkerCounters,
};
use flowtable::FlowTable;
use pcap_file::TsResolution;
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapReader, PcapWriter};
use wire::buf::{MemBuf, PacketBuf};
use wire::burst::PacketBurst;
use wire::error::BufError;

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
pub const PERIOD: Duration = Duration::from_millis(50);
/// A stretch of the capture without packets longer than this is not ticked
/// through whole: after [`SETTLE`] of ticks (plans see the rates fall) the
/// clock jumps to [`SETTLE`] before the next packet. A capture with a gap of
/// days is replayed in seconds; nothing the core decides in a quiet stretch
/// outlives it except drains ending and health changes, which the ticks
/// after the jump still see.
const LONG_GAP: Duration = Duration::from_secs(10);
const SETTLE: Duration = Duration::from_secs(2);

#[derive(clap::Args, Debug)]
pub struct Args {
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
    #[arg(long, value_name = "ADDRESS[@FROM[-UNTIL]]", value_parser = parse_down)]
    down: Vec<Down>,
    /// Seed of the flow-cookie generator.
    #[arg(long, default_value_t = 0x5350_494c_4c57_4159)]
    seed: u64,
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

/// The management core on the capture's clock, its probers scripted, and
/// the snapshot it last published.
struct Mgmt {
    core: Core,
    probes: ScriptedProbes,
    snap: Arc<Snapshot>,
    /// The capture time of the next tick.
    next_tick: Duration,
    /// Endpoint addresses, and whether each is down now (by `--down`).
    addresses: Vec<(IpAddr, bool)>,
    /// "second S: ADDRESS down|up" for each scripted change, in order.
    health_changes: Vec<String>,
    /// What the core logged, with the capture time.
    logs: Vec<String>,
}

impl Mgmt {
    fn start(args: &Args, compiled: config::compiled::Compiled) -> Result<Mgmt> {
        let local = Local::from_config(&compiled, |_| None);
        let mut probes = ScriptedProbes::new(State::Healthy);
        probes.report_unchecked(&compiled);
        let addresses: Vec<(IpAddr, bool)> = addresses(&compiled)
            .into_iter()
            .map(|a| (a, args.down.iter().any(|d| d.covers(a, 0))))
            .collect();
        for &(a, down) in &addresses {
            if down {
                probes.set_state(a, State::Unhealthy);
            }
        }
        // Cookie key 0, as the builder of tests and replays: a replay's
        // cookies depend on `--seed` only.
        let core = Core::start(
            &args.config,
            compiled,
            local,
            0,
            Duration::ZERO,
            &mut probes,
        )
        .context("starting the management core")?;
        let snap = core.live().clone();
        let mut m = Mgmt {
            core,
            probes,
            snap,
            next_tick: PERIOD,
            addresses,
            health_changes: Vec::new(),
            logs: Vec::new(),
        };
        m.pump();
        Ok(m)
    }

    /// Carries out what the core asked for: snapshots to publish, Maglev
    /// tables to build (built here, at once), log lines.
    fn pump(&mut self) {
        loop {
            let outs = self.core.outputs();
            if outs.is_empty() {
                return;
            }
            for out in outs {
                match out {
                    Output::Publish(s) => self.snap = s,
                    Output::Watch(_) => {}
                    Output::Log { level, text, .. } => self.logs.push(format!(
                        "{:.3} s: {}: {text}",
                        self.core.now().as_secs_f64(),
                        level.as_str().to_lowercase()
                    )),
                    Output::BuildTables { build, tables } => {
                        let built = tables
                            .into_iter()
                            .map(|k| {
                                k.build()
                                    .map(|t| (k, Arc::new(t)))
                                    .map_err(|e| e.to_string())
                            })
                            .collect();
                        let now = self.core.now();
                        self.core.tables_built(now, build, built, &mut self.probes);
                    }
                }
            }
        }
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

    fn step(&mut self, args: &Args, now: Duration, flows: &FlowTable, counters: &WorkerCounters) {
        let second = u32::try_from(now.as_secs()).unwrap_or(u32::MAX);
        for (a, down) in &mut self.addresses {
            let is = args.down.iter().any(|d| d.covers(*a, second));
            if is != *down {
                *down = is;
                let (state, word) = if is {
                    (State::Unhealthy, "down")
                } else {
                    (State::Healthy, "up")
                };
                self.probes.set_state(*a, state);
                self.health_changes
                    .push(format!("second {second}: {a} {word}"));
            }
        }
        if self.probes.generation() != self.core.health_generation() {
            self.core.health(now, self.probes.snapshot());
        }
        let probes = &self.probes;
        self.core.remote_verdicts(now, |k| probes.remote_state(k));
        self.core.tick(now, || counters.clone());
        self.pump();
        flows.sweep(self.core.tick_now(), control::daemon::SWEEP_BUDGET);
    }
}

pub fn run(args: &Args) -> Result<()> {
    let loaded = config::load(&args.config).map_err(|e| anyhow::anyhow!("{e}"))?;
    for d in &args.down {
        if !loaded
            .compiled
            .endpoints
            .iter()
            .any(|e| e.address == d.address)
        {
            bail!("--down {}: no endpoint has that address", d.address);
        }
    }
    let mut mgmt = Mgmt::start(args, loaded.compiled)?;
    let compiled = mgmt.snap.compiled.clone();
    let capacity = compiled.settings.dataplane.flow_table_capacity;
    let flows = FlowTable::new(dataplane::flow_table_config(&compiled.settings.dataplane))
        .with_context(|| format!("flow table of {capacity} entries"))?;
    let worker = Worker::new(args.seed, compiled.children.len());
    // The configured ports, plus an uplink when none is configured; input
    // arrives on the (first) uplink.
    let mut roles: Vec<PortRole> = compiled.settings.ports.iter().map(|p| p.role).collect();
    if !roles.contains(&PortRole::Uplink) {
        roles.push(PortRole::Uplink);
    }
    let mut engine = Engine::new(worker, &roles, BURST, || VecBurst::with_capacity(BURST));
    let uplink = engine.routes().uplink.unwrap_or(0);

    let input =
        File::open(&args.input).with_context(|| format!("opening {}", args.input.display()))?;
    let mut reader = PcapReader::new(BufReader::new(input))
        .with_context(|| format!("{}: not a pcap file", args.input.display()))?;
    let in_header = reader.header();
    let output = File::create(&args.output)
        .with_context(|| format!("creating {}", args.output.display()))?;
    let out_header = PcapHeader {
        snaplen: OUTPUT_SNAPLEN,
        ..PcapHeader::default()
    };
    let mut io = ReplayIo {
        uplink,
        roles: roles.clone(),
        staged: Vec::with_capacity(BURST),
        free: Vec::new(),
        writer: PcapWriter::with_header(BufWriter::new(output), out_header)
            .with_context(|| format!("writing {}", args.output.display()))?,
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
                let at = || format!("{}: packet {}", args.input.display(), seen + 1);
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
        let pkt_tick = rel.map(|r| u32::try_from(r.as_secs()).unwrap_or(u32::MAX));
        // A burst holds packets of one management period: the core ticks
        // (and may publish) between bursts, as it does between a DPDK
        // worker's polls.
        if !io.staged.is_empty()
            && (io.staged.len() == BURST || rel.is_none_or(|r| r >= mgmt.next_tick))
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
        io.staged.push(buf);
    }
    let written = io.written;
    drop(io);

    let c = &engine.worker.counters;
    println!(
        "{}: {seen} packets in, {written} out to {}",
        args.input.display(),
        args.output.display()
    );
    println!(
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
        println!("health: {change}");
    }
    for l in &mgmt.logs {
        println!("core: {l}");
    }
    if truncated > 0 {
        println!(
            "{truncated} truncated by the capture (snaplen {}) skipped",
            in_header.snaplen
        );
    }
    println!("flows: {}", line(c, WorkerCounters::FLOWS, Text::Replay));
    for r in DropReason::ALL {
        if c.dropped(r) > 0 {
            println!("  drop {}: {}", r.name(), c.dropped(r));
        }
    }
    for (child, cc) in compiled.children.iter().zip(&c.children) {
        if cc.packets > 0 {
            println!(
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
}

/// The pcap as the uplink's RX queue; every port's TX writes the output pcap
/// in transmit order (the exception port's, which goes to the host and not
/// to the network, is counted but not written).
struct ReplayIo {
    uplink: usize,
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
        if port != self.uplink {
            return 0;
        }
        let mut n = 0;
        for p in self.staged.drain(..) {
            match burst.push(p) {
                Ok(()) => n += 1,
                Err(p) => self.free.push(p),
            }
        }
        n
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
