//! Flood scenarios for `perf/flood.sh` (M15): real TCP connections
//! among a flood of spoofed new flows, as a pcap whose timestamps
//! `spillway replay` uses as its clock, and the analysis of what the replay
//! transmitted.
//!
//! The timeline of a [`Scenario`] (seconds of the capture):
//!
//! - `[0, warmup)`: the handshakes (SYN, then ACK one RTT later) of
//!   `established` real connections, evenly spread;
//! - `[warmup, seconds)`: the flood, `rate` packets per second evenly spaced,
//!   each from a random spoofed source (or, for [`FloodKind::Ack2`], each
//!   spoofed flow twice); meanwhile `opens` new real connections per second
//!   open until `join`;
//! - every real connection sends one ACK in each second-long window after
//!   its handshake, at a random point of it (so that its packets meet the
//!   flood at every point of replay's one-second clock ticks), until the end;
//! - at `join` a backend that was down joins the service (`spillway replay
//!   --down ADDRESS@0-JOIN`): Maglev then sends about 1/N of the flows
//!   without an entry to it, so a real connection that is forwarded without
//!   its entry at some point after that moves to another backend.
//!
//! Real clients come from 100.64.0.0/16 (established) and 100.65.0.0/16
//! (opened during the flood); spoofed sources from 1.0.0.0–99.255.255.255,
//! so an output packet's inner source says which it is.
//!
//! The analysis reads the outputs of two replays of one input that differ
//! only in `--seed`, which seeds the cookies of new flow entries and nothing
//! else. A packet forwarded through an entry carries that entry's GENEVE flow
//! cookie, different between the two runs; a packet forwarded without one
//! (table full, over the new-entry budget) carries a cookie derived from its
//! flow's hash, the same in both. So each packet tells whether it had an
//! entry, and a real connection whose entry cookie changes lost its entry.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use pcap_file::pcap::{PcapPacket, PcapReader, PcapWriter};
use wire::encap::{DecapConfig, parse_tunnel};

use crate::{DEFAULT_DST_MAC, DEFAULT_SRC_MAC, ETH_LEN, MIN_FRAME, add, fold, pseudo_sum};

/// The VIP every packet goes to.
pub const VIP: Ipv4Addr = Ipv4Addr::new(198, 18, 10, 10);
/// The destination port of every packet (TCP and UDP).
pub const DPORT: u16 = 80;
/// Backends are `10.0.1.1` … `10.0.1.N`; the last one joins at `join`.
pub const BACKEND_NET: [u8; 3] = [10, 0, 1];
/// Capture time of the first packet (any fixed date: replay counts seconds
/// from the first packet).
const EPOCH: Duration = Duration::from_secs(1_700_000_000);
const NS: u64 = 1_000_000_000;

/// What the flood sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FloodKind {
    /// No flood: the real connections alone.
    None,
    /// TCP ACKs from random spoofed sources, one per flow.
    Ack,
    /// TCP ACKs from random spoofed sources, two per flow (back to back: the
    /// second does not confirm the entry the first made, which only a packet
    /// in a later second does).
    Ack2,
    /// TCP SYNs from random spoofed sources.
    Syn,
    /// A TCP SYN and its ACK per spoofed flow, back to back (a handshake as
    /// the balancer sees it: the entry is established but unconfirmed).
    Synack,
    /// One-packet UDP flows from random spoofed sources.
    Udp,
}

impl FloodKind {
    /// The name used on the command line and in tables.
    pub fn name(self) -> &'static str {
        match self {
            FloodKind::None => "none",
            FloodKind::Ack => "ack",
            FloodKind::Ack2 => "ack2",
            FloodKind::Syn => "syn",
            FloodKind::Synack => "synack",
            FloodKind::Udp => "udp",
        }
    }
}

/// One flood scenario (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scenario {
    /// The flood's packets.
    pub flood: FloodKind,
    /// Flood packets per second.
    pub rate: u32,
    /// Length of the capture in seconds.
    pub seconds: u32,
    /// Seconds in which the established connections open; the flood starts
    /// after them.
    pub warmup: u32,
    /// Real connections opened before the flood.
    pub established: u32,
    /// Real connections opened per second during the flood, until `join`.
    pub opens: u32,
    /// The second at which the last backend joins.
    pub join: u32,
    /// Time from a real connection's SYN to its ACK, in microseconds.
    pub rtt_us: u32,
    /// Seed of the spoofed sources.
    pub seed: u64,
}

/// A real connection: opened before the flood, or during it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Real {
    /// Opened in the warm-up (index from 0).
    Established(u32),
    /// Opened during the flood (index from 0).
    Opened(u32),
}

impl Real {
    /// The client's address and port.
    pub fn client(self) -> (Ipv4Addr, u16) {
        let (net, i) = match self {
            Real::Established(i) => (100 << 24 | 64 << 16, i),
            Real::Opened(i) => (100 << 24 | 65 << 16, i),
        };
        (
            Ipv4Addr::from(net | (i & 0xffff)),
            1024 + (i.wrapping_mul(7919) % 60000) as u16,
        )
    }

    /// The real connection a client address belongs to, if any.
    pub fn of(src: Ipv4Addr) -> Option<Real> {
        let o = src.octets();
        let i = u32::from(u16::from_be_bytes([o[2], o[3]]));
        match (o[0], o[1]) {
            (100, 64) => Some(Real::Established(i)),
            (100, 65) => Some(Real::Opened(i)),
            _ => None,
        }
    }
}

/// One packet of the capture.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Event {
    /// A real connection's SYN (`true`) or ACK.
    Real(Real, bool),
    /// The flood's packet number `k`.
    Flood(u64),
}

/// What a frame carries above IPv4.
#[derive(Debug, Clone, Copy)]
enum L4 {
    Tcp { flags: u8, seq: u32, ack: u32 },
    Udp,
}

const SYN: u8 = 0x02;
const ACK: u8 = 0x10;

/// splitmix64: a small, well-mixed, seedable generator (no dependency).
#[derive(Debug, Clone)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// A spoofed source: an address in 1.0.0.0–99.255.255.255 and a port from
/// 1024.
#[allow(
    clippy::cast_possible_truncation,
    reason = "hash bits and small frame lengths"
)]
fn spoofed(r: u64) -> (Ipv4Addr, u16) {
    let first = 1 + (r >> 56) as u32 % 99;
    let addr = first << 24 | (r >> 32) as u32 & 0x00ff_ffff;
    (Ipv4Addr::from(addr), 1024 + (r as u32 % 64512) as u16)
}

impl Scenario {
    /// Checks that the timeline holds together and the client ranges
    /// suffice.
    pub fn validate(&self) -> Result<()> {
        ensure!(self.seconds > 0, "the capture needs at least one second");
        ensure!(
            self.warmup > 0 && self.warmup < self.join && self.join < self.seconds,
            "need 0 < warm-up ({}) < join ({}) < seconds ({})",
            self.warmup,
            self.join,
            self.seconds
        );
        ensure!(
            self.established >= 1 && self.established <= 1 << 16,
            "established connections: 1 to 65,536"
        );
        ensure!(
            u64::from(self.opens) * u64::from(self.join - self.warmup) <= 1 << 16,
            "at most 65,536 connections opened during the flood (opens x (join - warm-up))"
        );
        ensure!(
            u64::from(self.rtt_us) < NS / 1000,
            "the RTT must be shorter than a second"
        );
        ensure!(
            self.flood != FloodKind::None || self.rate == 0,
            "no flood: rate 0"
        );
        ensure!(
            self.rate <= 10_000_000,
            "at most 10,000,000 flood packets per second"
        );
        Ok(())
    }

    /// Connections opened during the flood.
    pub fn opened(&self) -> u32 {
        self.opens * (self.join - self.warmup)
    }

    /// Flood packets in the capture.
    pub fn flood_packets(&self) -> u64 {
        u64::from(self.rate) * u64::from(self.seconds - self.warmup)
    }

    /// When a real connection opens, in ns from the first packet.
    fn opens_at(&self, c: Real) -> u64 {
        match c {
            Real::Established(i) => {
                u64::from(i) * u64::from(self.warmup) * NS / u64::from(self.established)
            }
            Real::Opened(j) => {
                u64::from(self.warmup) * NS + u64::from(j) * NS / u64::from(self.opens.max(1))
            }
        }
    }

    /// The packets of a real connection: (ns from the first packet, SYN).
    /// After the handshake one ACK in each second-long window, at a point
    /// of it drawn from the connection, the window and the seed.
    fn real_times(&self, c: Real) -> impl Iterator<Item = (u64, bool)> + use<> {
        let open = self.opens_at(c);
        let rtt = u64::from(self.rtt_us) * 1000;
        let end = u64::from(self.seconds) * NS;
        let id = match c {
            Real::Established(i) => u64::from(i),
            Real::Opened(j) => 1 << 32 | u64::from(j),
        };
        let seed = self.seed;
        let jitter = move |k: u64| Rng(seed ^ id << 20 ^ k).next() % NS;
        [(open, true), (open + rtt, false)]
            .into_iter()
            .chain((0..).map(move |k| (open + rtt + k * NS + jitter(k), false)))
            .take_while(move |&(t, _)| t < end)
    }

    /// Packets each real connection sends.
    pub fn real_packets(&self, c: Real) -> u64 {
        self.real_times(c).count() as u64
    }

    fn reals(&self) -> impl Iterator<Item = Real> + use<> {
        (0..self.established)
            .map(Real::Established)
            .chain((0..self.opened()).map(Real::Opened))
    }

    /// When flood packet `k` is sent.
    fn flood_at(&self, k: u64) -> u64 {
        u64::from(self.warmup) * NS + k * NS / u64::from(self.rate.max(1))
    }

    /// Writes the capture; returns its packet count.
    #[allow(
        clippy::cast_possible_truncation,
        reason = "hash bits and small frame lengths"
    )]
    pub fn write_pcap<W: Write>(&self, w: W) -> Result<u64> {
        self.validate()?;
        let mut reals: Vec<(u64, Event)> = self
            .reals()
            .flat_map(|c| {
                self.real_times(c)
                    .map(move |(t, syn)| (t, Event::Real(c, syn)))
            })
            .collect();
        reals.sort_by_key(|&(t, _)| t);
        let floods = (0..self.flood_packets()).map(|k| (self.flood_at(k), Event::Flood(k)));
        let mut writer = PcapWriter::new(w).context("cannot write the pcap header")?;
        let mut rng = Rng(self.seed);
        let mut spoof = (Ipv4Addr::UNSPECIFIED, 0u16, 0u32);
        let mut buf = Vec::with_capacity(64);
        let mut n = 0u64;
        for (t, ev) in merge(reals.into_iter(), floods) {
            match ev {
                Event::Real(c, syn) => {
                    let (src, sport) = c.client();
                    let seq = u32::from(src) ^ 0x5eed_0000;
                    let l4 = if syn {
                        L4::Tcp {
                            flags: SYN,
                            seq,
                            ack: 0,
                        }
                    } else {
                        L4::Tcp {
                            flags: ACK,
                            seq: seq.wrapping_add(1),
                            ack: !seq,
                        }
                    };
                    ipv4_frame(&mut buf, src, sport, l4, n as u16);
                }
                Event::Flood(k) => {
                    // A new spoofed flow per packet, or per two for ack2
                    // and synack.
                    let pairs = matches!(self.flood, FloodKind::Ack2 | FloodKind::Synack);
                    if !pairs || k % 2 == 0 {
                        let r = rng.next();
                        let (a, p) = spoofed(r);
                        spoof = (a, p, (r >> 16) as u32);
                    }
                    let (src, sport, seq) = spoof;
                    let l4 = match self.flood {
                        FloodKind::Syn => L4::Tcp {
                            flags: SYN,
                            seq,
                            ack: 0,
                        },
                        FloodKind::Synack if k % 2 == 0 => L4::Tcp {
                            flags: SYN,
                            seq,
                            ack: 0,
                        },
                        FloodKind::Udp => L4::Udp,
                        _ => L4::Tcp {
                            flags: ACK,
                            seq,
                            ack: !seq,
                        },
                    };
                    ipv4_frame(&mut buf, src, sport, l4, n as u16);
                }
            }
            let ts = EPOCH + Duration::from_nanos(t);
            writer
                .write_packet(&PcapPacket::new(ts, u32::try_from(buf.len())?, &buf))
                .context("cannot write a packet")?;
            n += 1;
        }
        writer
            .into_writer()
            .flush()
            .context("cannot flush the pcap")?;
        Ok(n)
    }

    /// Analyses the outputs of two replays of this scenario's capture that
    /// differ only in `--seed` (see the module docs).
    pub fn analyse<A: Read, B: Read>(&self, a: A, b: B) -> Result<Analysis> {
        let mut ra = PcapReader::new(a).context("first output: not a pcap")?;
        let mut rb = PcapReader::new(b).context("second output: not a pcap")?;
        let cfg = DecapConfig::default();
        let join_ts = EPOCH + Duration::from_secs(u64::from(self.join));
        let ns_per_frac = match ra.header().ts_resolution {
            pcap_file::TsResolution::MicroSecond => 1000,
            pcap_file::TsResolution::NanoSecond => 1,
        };
        let mut conns: std::collections::HashMap<Real, ConnTrack> = Default::default();
        let mut out = Analysis::default();
        let mut n = 0u64;
        loop {
            let (pa, pb) = match (ra.next_raw_packet(), rb.next_raw_packet()) {
                (None, None) => break,
                (Some(a), Some(b)) => (a.context("first output")?, b.context("second output")?),
                _ => bail!("the two replays transmitted different numbers of packets"),
            };
            n += 1;
            let ta = parse_tunnel(&pa.data, &cfg)
                .map_err(|e| anyhow::anyhow!("output packet {n}: not GENEVE: {e:?}"))?;
            let tb = parse_tunnel(&pb.data, &cfg)
                .map_err(|e| anyhow::anyhow!("second output packet {n}: not GENEVE: {e:?}"))?;
            let inner = |d: &[u8], off: usize| -> Option<Ipv4Addr> {
                let s: [u8; 4] = d.get(off + 12..off + 16)?.try_into().ok()?;
                Some(Ipv4Addr::from(s))
            };
            let (IpAddr::V4(backend), Some(src)) = (ta.dst_ip, inner(&pa.data, ta.inner_offset))
            else {
                bail!("output packet {n}: not IPv4 in IPv4");
            };
            if tb.dst_ip != ta.dst_ip || inner(&pb.data, tb.inner_offset) != Some(src) {
                bail!(
                    "output packet {n}: the two replays differ in more than cookies \
                     ({} from {src} vs {} from {:?})",
                    ta.dst_ip,
                    tb.dst_ip,
                    inner(&pb.data, tb.inner_offset)
                );
            }
            let (ca, cb) = (ta.gateway.cookie, tb.gateway.cookie);
            let Some(ca) = ca else {
                bail!("output packet {n}: no flow cookie (is the GENEVE cookie option on?)");
            };
            let with_entry = Some(ca) != cb;
            match Real::of(src) {
                Some(c) => {
                    let ts = Duration::from_secs(u64::from(pa.ts_sec))
                        + Duration::from_nanos(u64::from(pa.ts_frac) * ns_per_frac);
                    let after_join = ts >= join_ts;
                    conns.entry(c).or_default().packet(
                        u32::from(backend),
                        with_entry.then_some(ca),
                        after_join,
                    );
                }
                None => {
                    out.flood_out += 1;
                    out.flood_with_entry += u64::from(with_entry);
                }
            }
        }
        for c in self.reals() {
            let expected = self.real_packets(c);
            let stats = match c {
                Real::Established(_) => &mut out.established,
                Real::Opened(_) => &mut out.opened,
            };
            stats.add(expected, conns.get(&c));
        }
        Ok(out)
    }
}

/// Merges two time-ordered event streams (`a` first on ties).
fn merge(
    a: impl Iterator<Item = (u64, Event)>,
    b: impl Iterator<Item = (u64, Event)>,
) -> impl Iterator<Item = (u64, Event)> {
    let (mut a, mut b) = (a.peekable(), b.peekable());
    std::iter::from_fn(move || match (a.peek(), b.peek()) {
        (Some(x), Some(y)) if y.0 < x.0 => b.next(),
        (Some(_), _) => a.next(),
        (None, _) => b.next(),
    })
}

/// A 60-byte Ethernet/IPv4 frame from `src:sport` to [`VIP`]:[`DPORT`]
/// with valid checksums.
#[allow(
    clippy::cast_possible_truncation,
    reason = "hash bits and small frame lengths"
)]
fn ipv4_frame(out: &mut Vec<u8>, src: Ipv4Addr, sport: u16, l4: L4, id: u16) {
    let (proto, l4_len) = match l4 {
        L4::Tcp { .. } => (6u8, 20usize),
        L4::Udp => (17u8, 8 + 18),
    };
    out.clear();
    out.extend_from_slice(&DEFAULT_DST_MAC);
    out.extend_from_slice(&DEFAULT_SRC_MAC);
    out.extend_from_slice(&[0x08, 0x00]);
    let ip = out.len();
    out.extend_from_slice(&[0x45, 0]);
    out.extend_from_slice(&((20 + l4_len) as u16).to_be_bytes());
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(&[0x40, 0, 64, proto, 0, 0]);
    out.extend_from_slice(&src.octets());
    out.extend_from_slice(&VIP.octets());
    let c = fold(add(0, &out[ip..]));
    out[ip + 10..ip + 12].copy_from_slice(&c.to_be_bytes());
    let l4_start = out.len();
    out.extend_from_slice(&sport.to_be_bytes());
    out.extend_from_slice(&DPORT.to_be_bytes());
    let csum_at = match l4 {
        L4::Tcp { flags, seq, ack } => {
            out.extend_from_slice(&seq.to_be_bytes());
            out.extend_from_slice(&ack.to_be_bytes());
            out.extend_from_slice(&[0x50, flags]);
            out.extend_from_slice(&64240u16.to_be_bytes());
            out.extend_from_slice(&[0, 0, 0, 0]);
            l4_start + 16
        }
        L4::Udp => {
            out.extend_from_slice(&(l4_len as u16).to_be_bytes());
            out.extend_from_slice(&[0, 0]);
            out.resize(l4_start + l4_len, 0);
            l4_start + 6
        }
    };
    let (s, d) = (IpAddr::V4(src), IpAddr::V4(VIP));
    let mut c = fold(add(pseudo_sum(&s, &d, proto, l4_len), &out[l4_start..]));
    if proto == 17 && c == 0 {
        c = 0xffff;
    }
    out[csum_at..csum_at + 2].copy_from_slice(&c.to_be_bytes());
    if out.len() < MIN_FRAME {
        out.resize(MIN_FRAME, 0);
    }
    debug_assert_eq!(out.len(), MIN_FRAME.max(ETH_LEN + 20 + l4_len));
}

/// What one real connection's output packets showed.
#[derive(Debug, Default)]
struct ConnTrack {
    packets: u64,
    first_backend: Option<u32>,
    /// Some packet went to another backend than the first.
    moved: bool,
    /// Cookie of the entry its last packet with an entry went through.
    entry: Option<u32>,
    /// Packets forwarded with an entry whose cookie differed from the
    /// previous entry's: the entry was lost and a new one made.
    new_entries: u64,
    /// Packets forwarded without an entry.
    stateless: u64,
    /// … of them after the join.
    stateless_after_join: u64,
}

impl ConnTrack {
    fn packet(&mut self, backend: u32, entry: Option<u32>, after_join: bool) {
        self.packets += 1;
        match self.first_backend {
            None => self.first_backend = Some(backend),
            Some(b) if b != backend => self.moved = true,
            Some(_) => {}
        }
        match (entry, self.entry) {
            (None, _) => {
                self.stateless += 1;
                self.stateless_after_join += u64::from(after_join);
            }
            (Some(e), Some(prev)) if e != prev => {
                self.new_entries += 1;
                self.entry = Some(e);
            }
            (Some(e), _) => self.entry = Some(e),
        }
    }
}

/// Figures for one class of real connections.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RealStats {
    /// Connections.
    pub conns: u64,
    /// Packets they sent.
    pub sent: u64,
    /// … that came out (to some backend).
    pub out: u64,
    /// … forwarded without a flow entry.
    pub stateless: u64,
    /// Connections with every packet through one entry, from the SYN on.
    pub one_entry: u64,
    /// Connections that lost their entry at least once (a later packet went
    /// through a new entry).
    pub lost_entry: u64,
    /// Connections with some packet forwarded without an entry after the
    /// backend joined (exposed to Maglev's new mapping).
    pub stateless_after_join: u64,
    /// Connections with a packet to another backend than their SYN's.
    pub moved: u64,
}

impl RealStats {
    fn add(&mut self, expected: u64, t: Option<&ConnTrack>) {
        self.conns += 1;
        self.sent += expected;
        let Some(t) = t else { return };
        self.out += t.packets;
        self.stateless += t.stateless;
        self.one_entry += u64::from(t.stateless == 0 && t.new_entries == 0);
        self.lost_entry += u64::from(t.new_entries > 0);
        self.stateless_after_join += u64::from(t.stateless_after_join > 0);
        self.moved += u64::from(t.moved);
    }
}

/// What the replays transmitted.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Analysis {
    /// Connections opened before the flood.
    pub established: RealStats,
    /// Connections opened during the flood.
    pub opened: RealStats,
    /// Flood packets transmitted.
    pub flood_out: u64,
    /// … forwarded through a flow entry.
    pub flood_with_entry: u64,
}

/// The counters of a `spillway replay` summary.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    /// Packets read.
    pub packets_in: u64,
    /// Packets written.
    pub out: u64,
    /// Packets dropped.
    pub dropped: u64,
    /// Flow entries created.
    pub new: u64,
    /// Packets that found their flow's entry.
    pub hits: u64,
    /// New flows forwarded without an entry because the table was full.
    pub stateless: u64,
    /// New flows forwarded without an entry because the worker's new-entry
    /// budget for the second was spent.
    pub over_budget: u64,
}

/// The number right before `label` in `line` (`"… 12 hits, …"`).
fn count_before(line: &str, label: &str) -> Option<u64> {
    let at = line.find(label)?;
    line[..at].split_whitespace().last()?.parse().ok()
}

/// The number right after `label` in `line` (`"dropped 3, …"`).
fn count_after(line: &str, label: &str) -> Option<u64> {
    let at = line.find(label)? + label.len();
    line[at..]
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

impl Summary {
    /// Reads the counters from `spillway replay`'s standard output.
    pub fn parse(text: &str) -> Result<Summary> {
        let line = |has: &str| {
            text.lines()
                .find(|l| l.contains(has))
                .with_context(|| format!("no {has:?} in the replay summary:\n{text}"))
        };
        let io = line(" packets in, ")?;
        let fwd = line("forwarded ")?;
        let flows = line("flows: ")?;
        let missing = |l: &str, label: &str| format!("no {label:?} count in {l:?}");
        let before =
            |l: &str, label: &str| count_before(l, label).with_context(|| missing(l, label));
        Ok(Summary {
            packets_in: before(io, " packets in")?,
            out: before(io, " out to")?,
            dropped: count_after(fwd, "dropped ").with_context(|| missing(fwd, "dropped"))?,
            new: before(flows, " new,")?,
            hits: before(flows, " hits,")?,
            stateless: before(flows, " stateless")?,
            over_budget: before(flows, " over budget")?,
        })
    }
}

/// The flood defences of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Defences {
    /// `first_packet = "10s"` (the default) and a new-entry budget: the
    /// default when `None` (capacity / first_packet seconds / workers, at
    /// least 1000, for each of SYN-opened and other flows), else
    /// `new_flow_budget` set to it.
    On(Option<u32>),
    /// `new_flow_budget = 4294967295` and `first_packet = "600s"`: every new
    /// flow may make an entry and unconfirmed ones live as long as
    /// established ones (they may still be displaced by new flows: that is
    /// the table's, not a setting).
    Off,
}

impl Defences {
    /// The name used in tables.
    pub fn name(self) -> String {
        match self {
            Defences::On(None) => "on".into(),
            Defences::On(Some(b)) => format!("on, budget {b}"),
            Defences::Off => "off".into(),
        }
    }

    /// The name in file names.
    pub fn tag(self) -> String {
        self.name().replace(", ", "-").replace(' ', "-")
    }

    /// New entries a worker may create per second with a table of
    /// `capacity` (the config crate's default for one worker and a 10 s
    /// first-packet timeout, unless set).
    pub fn budget(self, capacity: u32) -> u32 {
        match self {
            Defences::On(None) => (capacity / 10).max(1000),
            Defences::On(Some(b)) => b,
            Defences::Off => u32::MAX,
        }
    }
}

/// The backend that joins at `join`: the last of `endpoints`.
pub fn joining_backend(endpoints: u8) -> Ipv4Addr {
    let [a, b, c] = BACKEND_NET;
    Ipv4Addr::new(a, b, c, endpoints)
}

/// The configuration of a run: one worker, a table of `capacity`, GENEVE
/// (whose flow cookie tells entries apart) to `endpoints` backends, TCP and
/// UDP to [`VIP`]:[`DPORT`].
pub fn config(capacity: u32, endpoints: u8, defences: Defences) -> String {
    let [a, b, c] = BACKEND_NET;
    let eps: Vec<String> = (1..=endpoints)
        .map(|i| format!("{{ address = \"{a}.{b}.{c}.{i}\" }}"))
        .collect();
    let defences = match defences {
        Defences::On(None) => {
            "# Flood defences: the defaults (new_flow_budget unset, first_packet = \"10s\").\n"
                .to_string()
        }
        Defences::On(Some(b)) => format!(
            "# Flood defences: first_packet = \"10s\" (the default), this budget.\n\
             new_flow_budget = {b}\n"
        ),
        Defences::Off => format!(
            "# Flood defences off: no new-entry budget, unconfirmed entries live long.\n\
             new_flow_budget = {}\n\n[dataplane.timeouts]\nfirst_packet = \"600s\"\n",
            u32::MAX
        ),
    };
    format!(
        r#"# Written by perf/flood.sh (the flood figures, perf/README.md).
[node]
name = "flood"
region = "r"
zone = "z"

[dataplane]
worker_cores = [1]
flow_table_capacity = {capacity}
{defences}
[[ports]]
name = "uplink"
device = "net_pcap0"
role = "uplink"
# The frames' destination (DEFAULT_DST_MAC): others are dropped (M55).
mac = "02:00:00:00:00:01"
# The endpoints (10.0.1.0/24) are off this subnet, reached through the
# gateway: a replay resolves no on-link neighbour (M47).
addresses = ["10.0.0.2/24"]
gateway = "10.0.0.1"
gateway_mac = "02:00:00:00:00:fe"

[[forwarding_rules]]
name = "web"
vips = ["{VIP}"]
protocol = "TCP"
ports = "{DPORT}"
backend_service = "web"

[[forwarding_rules]]
name = "dgram"
vips = ["{VIP}"]
protocol = "UDP"
ports = "{DPORT}"
backend_service = "web"

[[backend_services]]
name = "web"
delivery = "geneve"

[[backend_services.groups]]
name = "a"
region = "r"
zone = "z"
endpoints = [{}]
"#,
        eps.join(", ")
    )
}

#[cfg(test)]
#[allow(clippy::cast_possible_truncation, reason = "test sizes are small")]
mod tests {
    use super::*;
    use wire::buf::{MemBuf, PacketBuf};
    use wire::encap::{Outer, Tunnel, UdpChecksum, encapsulate};
    use wire::geneve::{GatewayOptions, OptionIds};

    fn scenario(flood: FloodKind, rate: u32) -> Scenario {
        Scenario {
            flood,
            rate,
            seconds: 6,
            warmup: 1,
            established: 20,
            opens: 5,
            join: 4,
            rtt_us: 50_000,
            seed: 7,
        }
    }

    fn frames(s: &Scenario) -> Vec<(Duration, Vec<u8>)> {
        let mut out = Vec::new();
        let n = s.write_pcap(&mut out).unwrap();
        let mut r = PcapReader::new(&out[..]).unwrap();
        let mut v = Vec::new();
        while let Some(p) = r.next_packet() {
            let p = p.unwrap();
            v.push((p.timestamp, p.data.into_owned()));
        }
        assert_eq!(v.len() as u64, n);
        v
    }

    #[test]
    fn captures_follow_the_timeline() {
        use wire::packet::{Frame, parse_frame};
        use wire::tcp::Flags;
        for kind in [
            FloodKind::Ack,
            FloodKind::Ack2,
            FloodKind::Syn,
            FloodKind::Synack,
            FloodKind::Udp,
        ] {
            let s = scenario(kind, 100);
            let v = frames(&s);
            let reals: u64 = s.reals().map(|c| s.real_packets(c)).sum();
            assert_eq!(v.len() as u64, reals + 500, "{kind:?}");
            assert!(v.windows(2).all(|w| w[0].0 <= w[1].0), "in time order");
            assert_eq!(v[0].0, EPOCH);
            assert!(v.last().unwrap().0 < EPOCH + Duration::from_secs(6));
            let mut flood_flows = std::collections::HashSet::new();
            let mut flood_packets = 0;
            for (ts, f) in &v {
                assert_eq!(f.len(), 60);
                assert_eq!(crate::checksum(&f[14..34]), 0, "IPv4 header checksum");
                let total = usize::from(u16::from_be_bytes([f[16], f[17]]));
                let (s4, d4) = (
                    IpAddr::from(<[u8; 4]>::try_from(&f[26..30]).unwrap()),
                    IpAddr::from(<[u8; 4]>::try_from(&f[30..34]).unwrap()),
                );
                let l4 = &f[34..14 + total];
                let sum = add(pseudo_sum(&s4, &d4, f[23], l4.len()), l4);
                assert_eq!(fold(sum), 0, "L4 checksum");
                let Ok(Frame::Ip(_, info)) = parse_frame(f) else {
                    panic!("{kind:?}: does not parse")
                };
                let v4 = |a: [u8; 16]| std::net::Ipv6Addr::from(a).to_ipv4_mapped().unwrap();
                let src = v4(info.src);
                let (sport, dport) = info.ports.unwrap();
                assert_eq!((v4(info.dst), dport), (VIP, DPORT));
                match Real::of(src) {
                    Some(c) => {
                        assert_eq!(c.client(), (src, sport));
                        assert_eq!(info.proto, 6);
                        let syn = info.tcp_flags.contains(Flags::SYN);
                        assert_eq!(syn, !info.tcp_flags.contains(Flags::ACK));
                        if syn {
                            let at = EPOCH + Duration::from_nanos(s.opens_at(c));
                            assert!(*ts <= at && at - *ts < Duration::from_micros(1));
                        }
                    }
                    None => {
                        assert!(*ts >= EPOCH + Duration::from_secs(1), "flood after warm-up");
                        assert!(src.octets()[0] >= 1 && src.octets()[0] <= 99);
                        flood_packets += 1;
                        flood_flows.insert((src, sport));
                        let want = match kind {
                            FloodKind::Udp => 17,
                            _ => 6,
                        };
                        assert_eq!(info.proto, want);
                        if kind == FloodKind::Syn {
                            assert!(info.tcp_flags.contains(Flags::SYN));
                        }
                    }
                }
            }
            assert_eq!(flood_packets, 500);
            let flows = if matches!(kind, FloodKind::Ack2 | FloodKind::Synack) {
                250
            } else {
                500
            };
            assert_eq!(flood_flows.len(), flows, "{kind:?}");
        }
        // Each real connection: the handshake, then one ACK in each second
        // after it (the last window may end after the capture).
        let s = scenario(FloodKind::None, 0);
        assert_eq!(s.opens_at(Real::Opened(14)), 3_800_000_000);
        for c in [
            Real::Established(0),
            Real::Established(19),
            Real::Opened(14),
        ] {
            let t: Vec<(u64, bool)> = s.real_times(c).collect();
            let open = s.opens_at(c);
            assert_eq!(t[..2], [(open, true), (open + 50_000_000, false)]);
            for (k, &(at, syn)) in t[2..].iter().enumerate() {
                let from = open + 50_000_000 + k as u64 * NS;
                assert!(!syn && at >= from && at < from + NS, "{c:?} {k}");
            }
            let windows = (6 * NS - open - 50_000_000).div_ceil(NS) as usize;
            assert!(t.len() == 2 + windows || t.len() == 1 + windows, "{c:?}");
        }
        let phases: std::collections::HashSet<u64> = s
            .real_times(Real::Established(0))
            .skip(2)
            .map(|(t, _)| t % NS)
            .collect();
        assert!(
            phases.len() > 1,
            "ACKs at different points of their seconds"
        );
    }

    #[test]
    fn bad_scenarios_are_refused() {
        let mut s = scenario(FloodKind::Ack, 10);
        s.join = 6;
        assert!(s.validate().is_err());
        let mut s = scenario(FloodKind::None, 10);
        assert!(s.validate().is_err());
        s.rate = 0;
        assert!(s.validate().is_ok());
        s.opens = 30_000;
        assert!(s.validate().is_err());
    }

    #[test]
    fn clients_map_back_to_their_connections() {
        for c in [
            Real::Established(0),
            Real::Established(65535),
            Real::Opened(3),
        ] {
            assert_eq!(Real::of(c.client().0), Some(c));
        }
        for r in [0u64, u64::MAX, 0x6440_0000_0000_0000, 12345] {
            let (a, p) = spoofed(r);
            assert_eq!(Real::of(a), None);
            assert!(p >= 1024);
        }
    }

    /// A replay's output frame: the 60-byte client frame in GENEVE to
    /// `backend` with `cookie`.
    fn out(client: &[u8], backend: u8, cookie: u32) -> Vec<u8> {
        let mut buf = MemBuf::new(vec![0u8; 256].into_boxed_slice(), 128, client).unwrap();
        let outer = Outer {
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 0xfe],
            src_ip: "10.0.0.2".parse().unwrap(),
            dst_ip: IpAddr::V4(joining_backend(backend)),
            ttl: 64,
            dont_fragment: true,
            flow_hash: 1,
            src_port_min: 49152,
            src_port_max: 65535,
            udp_checksum: UdpChecksum::Auto,
        };
        let tunnel = Tunnel::Geneve {
            port: 6081,
            vni: 0,
            ids: OptionIds::default(),
            options: GatewayOptions {
                endpoint_id: None,
                cookie: Some(cookie),
            },
        };
        encapsulate(&mut buf, &outer, &tunnel).unwrap();
        buf.data().to_vec()
    }

    fn pcap(frames: &[(Duration, Vec<u8>)]) -> Vec<u8> {
        let mut w = PcapWriter::new(Vec::new()).unwrap();
        for (ts, f) in frames {
            w.write_packet(&PcapPacket::new(*ts, f.len() as u32, f))
                .unwrap();
        }
        w.into_writer()
    }

    /// Two replays' outputs, classified: one entry throughout; an entry
    /// lost (new cookie); stateless packets (the same cookie in both runs);
    /// a backend change.
    #[test]
    fn analysis_tells_entries_from_stateless_packets() {
        let mut s = scenario(FloodKind::Ack, 1);
        s.established = 4;
        s.opens = 1;
        s.join = 2;
        s.warmup = 1;
        s.seconds = 3;
        let v = frames(&s);
        // Per connection: (backend, cookie in run A, cookie in run B) of
        // each of its packets in order.
        let plan = |c: Real, k: usize| -> (u8, u32, u32) {
            match c {
                Real::Established(0) => (1, 10, 20), // one entry
                Real::Established(1) => (2, 11 + u32::from(k >= 2), 21 + u32::from(k >= 2) * 2), // lost at k = 2
                Real::Established(2) if k == 3 => (3, 99, 99), // stateless once...
                Real::Established(2) => (3, 12, 22),
                Real::Established(3) if k >= 3 => (8, 77, 77), // ...and moved
                Real::Established(3) => (4, 13, 23),
                Real::Opened(_) => (5, 55, 55), // stateless throughout
                Real::Established(_) => unreachable!(),
            }
        };
        let mut seen: std::collections::HashMap<Real, usize> = Default::default();
        let (mut a, mut b) = (Vec::new(), Vec::new());
        let mut flood = 0;
        for (ts, f) in &v {
            let src = Ipv4Addr::new(f[26], f[27], f[28], f[29]);
            let (be, ca, cb) = match Real::of(src) {
                Some(c) => {
                    let k = seen.entry(c).or_default();
                    *k += 1;
                    plan(c, *k - 1)
                }
                None => {
                    flood += 1;
                    if flood == 1 { (6, 1, 2) } else { (6, 3, 3) }
                }
            };
            a.push((*ts, out(f, be, ca)));
            b.push((*ts, out(f, be, cb)));
        }
        let got = s.analyse(&pcap(&a)[..], &pcap(&b)[..]).unwrap();
        let sent: u64 = (0..4).map(|i| s.real_packets(Real::Established(i))).sum();
        assert_eq!(
            got.established,
            RealStats {
                conns: 4,
                sent,
                out: sent,
                stateless: 1 + (s.real_packets(Real::Established(3)) - 3),
                one_entry: 1,
                lost_entry: 1,
                stateless_after_join: 2,
                moved: 1,
            }
        );
        assert_eq!(got.opened.conns, 1);
        assert_eq!(got.opened.stateless, got.opened.sent);
        assert_eq!((got.opened.one_entry, got.opened.moved), (0, 0));
        assert_eq!((got.flood_out, got.flood_with_entry), (2, 1));

        // Outputs that differ in more than cookies are an error.
        let mut c = b.clone();
        c.pop();
        assert!(s.analyse(&pcap(&a)[..], &pcap(&c)[..]).is_err());
    }

    #[test]
    fn replay_summaries_parse() {
        let text = "in.pcap: 100 packets in, 97 out to out.pcap\n\
            forwarded 97, ARP replies 0, ND replies 0, no-backend resets 0, to host 0, dropped 3\n\
            flows: 40 new, 50 hits, 0 rescheduled, 2 stateless (table full), 5 over budget\n  \
            rule web-ag0: 100 packets, 6000 bytes, 40 new flows, 0 drops\n";
        assert_eq!(
            Summary::parse(text).unwrap(),
            Summary {
                packets_in: 100,
                out: 97,
                dropped: 3,
                new: 40,
                hits: 50,
                stateless: 2,
                over_budget: 5,
            }
        );
        assert!(Summary::parse("nothing").is_err());
    }

    #[test]
    fn configs_state_their_defences() {
        let on = config(65536, 8, Defences::On(None));
        assert!(!on.contains("new_flow_budget =") && on.contains("10.0.1.8"));
        let set = config(65536, 8, Defences::On(Some(20000)));
        assert!(set.contains("new_flow_budget = 20000") && !set.contains("[dataplane.timeouts]"));
        let off = config(65536, 8, Defences::Off);
        assert!(
            off.contains("new_flow_budget = 4294967295") && off.contains("first_packet = \"600s\"")
        );
        assert_eq!(Defences::On(None).budget(65536), 6553);
        assert_eq!(Defences::On(None).budget(1024), 1000);
        assert_eq!(Defences::On(Some(7)).budget(1024), 7);
    }
}
