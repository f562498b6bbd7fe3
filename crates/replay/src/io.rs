//! The replay's packet I/O: the input capture read record by record
//! ([`Capture`], [`Record`]), the packets as in-memory buffers
//! ([`ReplayPkt`]), the port each frame arrives on ([`arrival_ports`],
//! [`arrival_port`]), and the pipeline's RX and TX queues over them, whose
//! TX writes the output pcap ([`ReplayIo`]).

use std::borrow::Cow;
use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::path::{Path, PathBuf};
use std::time::Duration;

use config::schema::PortRole;
use dataplane::{BURST, PacketIo, VecBurst};
use pcap_file::TsResolution;
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapReader, PcapWriter};
use wire::buf::{MemBuf, PacketBuf};
use wire::burst::PacketBurst;
use wire::error::BufError;
use wire::ethernet::MacAddr;

use crate::ReplayError;

/// Headroom in front of each packet, as DPDK mbufs have.
const HEADROOM: usize = 128;
/// Largest frame replayed: an IP packet of 65535 bytes behind an Ethernet
/// header and a VLAN tag.
pub(crate) const MAX_PACKET: usize = 65535 + 14 + 4;
/// Snaplen of the output pcap (libpcap's largest): what encapsulation adds
/// may take a frame past the input's snaplen and past 65535 bytes, and every
/// transmitted frame is written whole.
const OUTPUT_SNAPLEN: u32 = 262_144;
const _: () = assert!(HEADROOM + MAX_PACKET <= OUTPUT_SNAPLEN as usize);

/// The input capture, read a record at a time.
pub(crate) struct Capture {
    path: PathBuf,
    reader: PcapReader<BufReader<File>>,
}

impl Capture {
    /// Opens `path`, a pcap file.
    pub(crate) fn open(path: &Path) -> Result<Capture, ReplayError> {
        let input = File::open(path).map_err(|source| ReplayError::OpenInput {
            path: path.to_owned(),
            source,
        })?;
        let reader =
            PcapReader::new(BufReader::new(input)).map_err(|source| ReplayError::NotPcap {
                path: path.to_owned(),
                source,
            })?;
        Ok(Capture {
            path: path.to_owned(),
            reader,
        })
    }

    /// The file's header (its snaplen and timestamp resolution).
    pub(crate) fn header(&self) -> PcapHeader {
        self.reader.header()
    }

    /// The next record, `number` (from 1, for errors); `None` at the end.
    ///
    /// Raw records: pcap-file's checks of each record against the file's
    /// snaplen would turn a capture's truncated records (legal: a capture
    /// with a small snaplen) into a failed replay.
    pub(crate) fn next(&mut self, number: u64) -> Option<Result<Record<'_>, ReplayError>> {
        let resolution = self.reader.header().ts_resolution;
        let raw = match self.reader.next_raw_packet()? {
            Ok(raw) => raw,
            Err(source) => {
                return Some(Err(ReplayError::Record {
                    path: self.path.clone(),
                    packet: number,
                    source,
                }));
            }
        };
        let Some(timestamp) = timestamp(raw.ts_sec, raw.ts_frac, resolution) else {
            return Some(Err(ReplayError::Timestamp {
                path: self.path.clone(),
                packet: number,
                fraction: raw.ts_frac,
            }));
        };
        Some(Ok(Record {
            timestamp,
            truncated: raw.incl_len < raw.orig_len,
            data: raw.data,
        }))
    }
}

/// An input record.
pub(crate) struct Record<'a> {
    pub(crate) timestamp: Duration,
    /// Captured shorter than it was on the wire.
    pub(crate) truncated: bool,
    pub(crate) data: Cow<'a, [u8]>,
}

/// A record's capture time (`None`: a fraction of a second out of range).
fn timestamp(sec: u32, frac: u32, resolution: TsResolution) -> Option<Duration> {
    let nanos = match resolution {
        TsResolution::MicroSecond => frac.checked_mul(1000),
        TsResolution::NanoSecond => Some(frac),
    };
    match nanos {
        Some(n) if n < 1_000_000_000 => Some(Duration::new(u64::from(sec), n)),
        _ => None,
    }
}

/// A replayed packet: its bytes and its capture time (kept for the output).
pub(crate) struct ReplayPkt {
    buf: MemBuf<Box<[u8]>>,
    ts: Duration,
}

impl ReplayPkt {
    /// An empty buffer, room for [`MAX_PACKET`] behind the headroom.
    fn new() -> Result<ReplayPkt, BufError> {
        Ok(ReplayPkt {
            buf: MemBuf::new(
                vec![0u8; HEADROOM + MAX_PACKET].into_boxed_slice(),
                HEADROOM,
                &[],
            )?,
            ts: Duration::ZERO,
        })
    }
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
pub(crate) fn arrival_ports(roles: &[PortRole], port_macs: &[MacAddr]) -> Vec<(MacAddr, usize)> {
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
pub(crate) fn arrival_port(arrival: &[(MacAddr, usize)], uplink: usize, frame: &[u8]) -> usize {
    frame
        .get(..6)
        .and_then(|dst| arrival.iter().find(|(m, _)| m[..] == *dst))
        .map_or(uplink, |&(_, p)| p)
}

/// The pcap as the RX queues of the ports its frames are addressed to
/// ([`arrival_port`]); every port's TX writes the output pcap in transmit
/// order (the exception port's, which goes to the host and not to the
/// network, is counted but not written).
pub(crate) struct ReplayIo {
    /// The port the staged frames arrive on.
    pub(crate) staged_port: usize,
    /// Capture time of the latest packet received: what a packet the
    /// worker builds (a fragment, M48) is written with.
    burst_ts: Duration,
    roles: Vec<PortRole>,
    /// The frames of the next burst, in capture order.
    pub(crate) staged: Vec<ReplayPkt>,
    free: Vec<ReplayPkt>,
    writer: PcapWriter<BufWriter<File>>,
    /// Frames written to the output.
    pub(crate) written: u64,
    /// The first write that failed.
    pub(crate) error: Option<ReplayError>,
}

impl ReplayIo {
    /// Creates the output pcap at `path` (its header written), for ports of
    /// `roles`; the frames staged first arrive on `uplink`.
    pub(crate) fn create(
        path: &Path,
        roles: Vec<PortRole>,
        uplink: usize,
    ) -> Result<ReplayIo, ReplayError> {
        let output = File::create(path).map_err(|source| ReplayError::CreateOutput {
            path: path.to_owned(),
            source,
        })?;
        let header = PcapHeader {
            snaplen: OUTPUT_SNAPLEN,
            ..PcapHeader::default()
        };
        let writer = PcapWriter::with_header(BufWriter::new(output), header).map_err(|source| {
            ReplayError::WriteHeader {
                path: path.to_owned(),
                source,
            }
        })?;
        Ok(ReplayIo {
            staged_port: uplink,
            burst_ts: Duration::ZERO,
            roles,
            staged: Vec::with_capacity(BURST),
            free: Vec::new(),
            writer,
            written: 0,
            error: None,
        })
    }

    /// Stages `frame`, captured at `ts`, to arrive on `port` in the next
    /// burst; `false` if it is larger than [`MAX_PACKET`] (not staged).
    pub(crate) fn stage(
        &mut self,
        port: usize,
        ts: Duration,
        frame: &[u8],
    ) -> Result<bool, ReplayError> {
        let mut buf = match self.free.pop() {
            Some(b) => b,
            None => ReplayPkt::new()?,
        };
        if buf.buf.reset(HEADROOM, frame).is_err() {
            self.free.push(buf);
            return Ok(false);
        }
        buf.ts = ts;
        self.staged_port = port;
        self.staged.push(buf);
        Ok(true)
    }
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
            None => ReplayPkt::new().ok()?,
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
                    Err(e) => self.error = Some(ReplayError::WriteOutput(e)),
                }
            }
            self.free.push(p);
        });
        0
    }
}
