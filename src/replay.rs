//! `spillway replay`: push a pcap through the exact data-plane pipeline
//! offline and write what it transmits to a pcap (M40).
//!
//! Deterministic: the clock is the packets' own timestamps (one tick per
//! second since the first packet), flow cookies come from a fixed seed, and
//! every endpoint counts as healthy unless `--down` says otherwise (for the
//! whole capture, or from one second of it to another: a backend that fails
//! or joins mid-capture, as the health checker would report it).

use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use config::schema::PortRole;
use dataplane::counters::{Text, line};
use dataplane::{
    BURST, ChildCounters, DropReason, EndpointHealth, Engine, Local, PacketIo, Snapshot,
    SnapshotBuilder, VecBurst, Worker, WorkerCounters,
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

/// Which endpoints (by index in the configuration) fail their health check
/// in second `second` of the capture.
fn down_at(compiled: &config::compiled::Compiled, down: &[Down], second: u32) -> Vec<bool> {
    compiled
        .endpoints
        .iter()
        .map(|e| down.iter().any(|d| d.covers(e.address, second)))
        .collect()
}

/// The snapshot for second `now` with endpoints `down` (by index) failing.
fn snapshot(
    builder: &mut SnapshotBuilder,
    compiled: &Arc<config::compiled::Compiled>,
    local: &Local,
    down: &[bool],
    now: u32,
) -> Result<Snapshot> {
    builder
        .build(
            compiled.clone(),
            local.clone(),
            |id| EndpointHealth {
                healthy: !down.get(id.index()).copied().unwrap_or(false),
                weight: None,
            },
            now,
            1,
        )
        .context("building the snapshot")
}

pub fn run(args: &Args) -> Result<()> {
    let loaded = config::load(&args.config).map_err(|e| anyhow::anyhow!("{e}"))?;
    let compiled = Arc::new(loaded.compiled);
    for d in &args.down {
        if !compiled.endpoints.iter().any(|e| e.address == d.address) {
            bail!("--down {}: no endpoint has that address", d.address);
        }
    }
    let local = Local::from_config(&compiled, |_| None);
    let mut builder = SnapshotBuilder::new();
    let mut down = down_at(&compiled, &args.down, 0);
    let mut snap = snapshot(&mut builder, &compiled, &local, &down, 0)?;
    let mut health_changes = Vec::new();
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
        // A burst holds packets of one tick: the clock advances between
        // bursts, as it does between a DPDK worker's polls.
        let pkt_tick = pkt.as_ref().map(|p| {
            let start = *first_ts.get_or_insert(p.timestamp);
            u32::try_from(p.timestamp.saturating_sub(start).as_secs()).unwrap_or(u32::MAX)
        });
        if !io.staged.is_empty() && (pkt.is_none() || io.staged.len() == BURST || pkt_tick != tick)
        {
            engine.poll(&mut io, &snap, &flows, tick.unwrap_or(0));
            if let Some(e) = io.error.take() {
                return Err(e);
            }
        }
        let Some(pkt) = pkt else { break };
        seen += 1;
        if let Some(t) = pkt_tick.filter(|&t| Some(t) != tick) {
            // A new second: endpoints whose `--down` window began or ended
            // change health, as the management core would publish it.
            let now_down = down_at(&compiled, &args.down, t);
            if now_down != down {
                for (e, (&was, &is)) in compiled.endpoints.iter().zip(down.iter().zip(&now_down)) {
                    if was != is {
                        let state = if is { "down" } else { "up" };
                        health_changes.push(format!("second {t}: {} {state}", e.address));
                    }
                }
                down = now_down;
                snap = snapshot(&mut builder, &compiled, &local, &down, t)?;
            }
        }
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
    for change in &health_changes {
        println!("health: {change}");
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
