//! Classic pcap files (libpcap format): writing with microsecond or
//! nanosecond timestamps in either byte order and any snaplen, records cut
//! short by a capture included; reading all four magics.
//!
//! A thin layer over the `pcap-file` crate (which the binary uses too).
//! Reading goes through its raw records, so records the capture truncated
//! (`orig_len` beyond the snaplen) are read as they are instead of refused.
//!
//! The functions panic with the path on I/O errors: this is a test kit.

use std::path::Path;
use std::time::Duration;

use pcap_file::pcap::{PcapHeader, PcapReader, PcapWriter, RawPcapPacket};
use pcap_file::{DataLink, Endianness, TsResolution};

/// Timestamp of record `i` in [`write`]: from 1000 s on, 10 ms apart.
pub fn default_ts(i: usize) -> Duration {
    Duration::from_millis(1_000_000 + 10 * i as u64)
}

/// The global header's choices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Format {
    /// Largest record the capture holds (`incl_len` never exceeds it when writing frames).
    pub snaplen: u32,
    /// Nanosecond timestamps (magic a1b23c4d) instead of microseconds (a1b2c3d4).
    pub nanos: bool,
    /// Big-endian file instead of little-endian.
    pub big_endian: bool,
    /// Link type (1: Ethernet).
    pub linktype: u32,
}

impl Default for Format {
    /// Ethernet, microseconds, little-endian, snaplen 65535.
    fn default() -> Format {
        Format {
            snaplen: 65535,
            nanos: false,
            big_endian: false,
            linktype: 1,
        }
    }
}

impl Format {
    fn header(&self) -> PcapHeader {
        PcapHeader {
            snaplen: self.snaplen,
            datalink: DataLink::from(self.linktype),
            ts_resolution: if self.nanos {
                TsResolution::NanoSecond
            } else {
                TsResolution::MicroSecond
            },
            endianness: if self.big_endian {
                Endianness::Big
            } else {
                Endianness::Little
            },
            ..PcapHeader::default()
        }
    }
}

/// One record: when, the length on the wire and the bytes captured
/// (`data.len() < orig_len`: the capture cut it short).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Timestamp since the epoch.
    pub ts: Duration,
    /// Length of the packet on the wire.
    pub orig_len: u32,
    /// The captured bytes.
    pub data: Vec<u8>,
}

impl Record {
    /// A whole frame captured at `ts`.
    pub fn new(ts: Duration, data: &[u8]) -> Record {
        Record {
            ts,
            orig_len: u32::try_from(data.len()).expect("a frame under 4 GiB"),
            data: data.to_vec(),
        }
    }
}

/// A read capture: its header's choices and its records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capture {
    /// The global header.
    pub format: Format,
    /// The records in file order.
    pub records: Vec<Record>,
}

/// The pcap file of `records` as bytes (records written as given, even
/// beyond the snaplen: to test readers).
pub fn to_bytes(format: &Format, records: &[Record]) -> Vec<u8> {
    let mut w = PcapWriter::with_header(Vec::new(), format.header()).expect("pcap header");
    for r in records {
        let frac = if format.nanos {
            r.ts.subsec_nanos()
        } else {
            r.ts.subsec_micros()
        };
        w.write_raw_packet(&RawPcapPacket {
            ts_sec: u32::try_from(r.ts.as_secs()).expect("timestamp fits 32 bits"),
            ts_frac: frac,
            incl_len: u32::try_from(r.data.len()).expect("a frame under 4 GiB"),
            orig_len: r.orig_len,
            data: r.data.as_slice().into(),
        })
        .expect("pcap record");
    }
    w.into_writer()
}

/// Writes `records` to `path` in `format`.
pub fn write_records(path: &Path, format: &Format, records: &[Record]) {
    std::fs::write(path, to_bytes(format, records))
        .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
}

/// Writes `frames` (whole) at `(timestamp, frame)` to `path`.
pub fn write_timed<F: AsRef<[u8]>>(path: &Path, format: &Format, frames: &[(Duration, F)]) {
    let records: Vec<Record> = frames
        .iter()
        .map(|(ts, f)| Record::new(*ts, f.as_ref()))
        .collect();
    write_records(path, format, &records);
}

/// Writes `frames` to `path`: default [`Format`], timestamps [`default_ts`].
pub fn write(path: &Path, frames: &[Vec<u8>]) {
    let records: Vec<Record> = frames
        .iter()
        .enumerate()
        .map(|(i, f)| Record::new(default_ts(i), f))
        .collect();
    write_records(path, &Format::default(), &records);
}

/// Parses a pcap file (any magic, either byte order).
pub fn parse(bytes: &[u8]) -> Result<Capture, pcap_file::PcapError> {
    let mut r = PcapReader::new(bytes)?;
    let h = r.header();
    let nanos = h.ts_resolution == TsResolution::NanoSecond;
    let format = Format {
        snaplen: h.snaplen,
        nanos,
        big_endian: h.endianness == Endianness::Big,
        linktype: u32::from(h.datalink),
    };
    let mut records = Vec::new();
    while let Some(p) = r.next_raw_packet() {
        let p = p?;
        let nsec = if nanos {
            p.ts_frac
        } else {
            p.ts_frac.saturating_mul(1000)
        };
        records.push(Record {
            ts: Duration::from_secs(u64::from(p.ts_sec)) + Duration::from_nanos(u64::from(nsec)),
            orig_len: p.orig_len,
            data: p.data.into_owned(),
        });
    }
    Ok(Capture { format, records })
}

/// Reads the capture at `path` (panics naming it if it is not one).
pub fn read_capture(path: &Path) -> Capture {
    let bytes =
        std::fs::read(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    parse(&bytes).unwrap_or_else(|e| panic!("{}: not a pcap file: {e}", path.display()))
}

/// The frames (captured bytes) of the capture at `path`.
pub fn read(path: &Path) -> Vec<Vec<u8>> {
    read_capture(path)
        .records
        .into_iter()
        .map(|r| r.data)
        .collect()
}
