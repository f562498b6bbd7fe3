//! Written captures read back, in every format; the header bytes are
//! libpcap's.

use std::time::Duration;

use testkit::pcap::{self, Format, Record};

fn records() -> Vec<Record> {
    vec![
        Record::new(Duration::new(1000, 123_456_000), &[1, 2, 3]),
        Record::new(Duration::new(1001, 0), &[0xaa; 1514]),
        Record {
            ts: Duration::new(1002, 999_999_000),
            orig_len: 1514,
            data: vec![0x55; 96],
        },
    ]
}

#[test]
fn every_format_round_trips() {
    for nanos in [false, true] {
        for big_endian in [false, true] {
            let format = Format {
                snaplen: 262_144,
                nanos,
                big_endian,
                linktype: 1,
            };
            let bytes = pcap::to_bytes(&format, &records());
            let magic: [u8; 4] = bytes[..4].try_into().unwrap();
            let want: u32 = if nanos { 0xa1b2_3c4d } else { 0xa1b2_c3d4 };
            let want = if big_endian {
                want.to_be_bytes()
            } else {
                want.to_le_bytes()
            };
            assert_eq!(magic, want, "nanos {nanos}, big endian {big_endian}");
            let c = pcap::parse(&bytes).expect("parses");
            assert_eq!(c.format, format);
            assert_eq!(c.records, records());
        }
    }
}

#[test]
fn files_round_trip_with_default_timestamps() {
    let dir = std::env::temp_dir().join(format!("testkit-pcap-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("x.pcap");
    let frames = vec![vec![1u8; 60], vec![2u8; 100], vec![]];
    pcap::write(&path, &frames);
    assert_eq!(pcap::read(&path), frames);
    let c = pcap::read_capture(&path);
    assert_eq!(c.format, Format::default());
    let ts: Vec<Duration> = c.records.iter().map(|r| r.ts).collect();
    assert_eq!(ts, (0..3).map(pcap::default_ts).collect::<Vec<_>>());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_global_header_is_libpcaps() {
    let bytes = pcap::to_bytes(
        &Format::default(),
        &[Record::new(Duration::new(5, 6000), &[9])],
    );
    let mut want = Vec::new();
    for v in [
        0xa1b2_c3d4u32.to_le_bytes().as_slice(),
        &2u16.to_le_bytes(),
        &4u16.to_le_bytes(),
    ] {
        want.extend_from_slice(v);
    }
    for v in [0u32, 0, 65535, 1, 5, 6, 1, 1] {
        want.extend_from_slice(&v.to_le_bytes());
    }
    want.push(9);
    assert_eq!(bytes, want);
}

#[test]
fn garbage_is_not_a_capture() {
    assert!(pcap::parse(b"definitely not a capture").is_err());
}
