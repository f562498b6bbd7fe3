//! `spillway replay` and its input: bad files and arguments refused,
//! fuzzed packets survived and accounted for, captures' snaplen (frames
//! larger than it written out, records it truncated skipped).
//!
//! Every test writes a configuration and a pcap of hand-built packets, runs
//! the `spillway` binary, and checks the transmitted frames byte by byte
//! (outer headers decoded by `common::replay`, not by the `wire` crate under
//! test) and the summary's counters.

#![allow(clippy::cast_possible_truncation)] // test values are small
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

mod common;

use std::net::IpAddr;
use std::path::Path;
use std::time::Duration;

use common::replay::*;
use common::*;
use testkit::config::{endpoint_list, group, port, rule, service};
use testkit::mutate::Mutator;
use testkit::pcap;

#[test]
fn replay_rejects_bad_inputs_with_clear_errors() {
    let d = dir("bad");
    let cfg = d.join("c.toml");
    std::fs::write(&cfg, config().build()).expect("config");
    let not_pcap = d.join("x.pcap");
    std::fs::write(&not_pcap, b"definitely not a capture").expect("write");
    let r = replay(&cfg, &not_pcap, &d.join("o.pcap"), &[]);
    assert_eq!(
        r.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&r.stderr)
    );
    assert!(String::from_utf8_lossy(&r.stderr).contains("not a pcap file"));
    let r = replay(&cfg, &not_pcap, &d.join("o.pcap"), &["--down", "10.9.9.9"]);
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(
        err.contains("no endpoint has that address"),
        "{:?}: {err}",
        r.status
    );
    let bad_cfg = d.join("bad.toml");
    std::fs::write(&bad_cfg, "[node]\nname = 1\n").expect("write");
    let r = replay(&bad_cfg, &not_pcap, &d.join("o.pcap"), &[]);
    assert_eq!(
        r.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&r.stderr)
    );
    assert!(
        String::from_utf8_lossy(&r.stderr).contains("bad.toml:2:"),
        "{}",
        String::from_utf8_lossy(&r.stderr)
    );
    let _ = std::fs::remove_dir_all(&d);
}

// ---------------------------------------------------------------------------
// Fuzzed input: the replay survives anything and accounts for every packet.

/// Valid frames of every kind the tests above use, then mutated by the kit's
/// mutator (bit flips, truncations, noise, tails, rewritten EtherTypes,
/// protocols, header bytes and lengths).
fn fuzzed_frames(n: usize, seed: u64) -> Vec<Vec<u8>> {
    let vip4 = v4("10.0.0.10");
    let vip6 = v6("2001:db8::10");
    let client4 = v4("192.0.2.9");
    let client6 = v6("2001:db8:c::9");
    let mut base = vec![
        tcp_frame(client4, vip4, 4000, 80, SYN, &[]),
        tcp_frame(
            client4,
            vip4,
            4000,
            80,
            ACK | PSH,
            b"GET / HTTP/1.0\r\n\r\n",
        ),
        udp_frame(client4, vip4, 4000, 53, b"query"),
        tcp_frame(client6, vip6, 4000, 80, SYN, &[]),
        echo_frame(client4, vip4, 1, 1),
        syn(9, 1234, [10, 0, 0, 2], 22),
    ];
    base.extend(fragments(client4, vip4, UDP, 7, &[0x55; 64], 16));
    base.extend(fragments(client6, vip6, UDP, 7, &[0x55; 64], 16));
    let quoted = ip(vip4, client4, TCP, &[0, 80, 0x0f, 0xa0, 0, 0, 0, 1]);
    base.push(eth(&ip(
        v4("203.0.113.1"),
        vip4,
        ICMP,
        &icmpv4(3, 4, 1400, &quoted),
    )));
    Mutator::new(seed).mutants(&base, n)
}

#[test]
fn replay_survives_fuzzed_packets_and_accounts_for_each() {
    let config = config()
        .rule(rule("web6", &["2001:db8::10"], "L3_DEFAULT", "all", "web6"))
        .service(
            service("web6", "gue")
                .child(group("b", "r", "z").set("endpoints", endpoint_list(&["2001:db8:1::11"]))),
        )
        .build();
    let frames = fuzzed_frames(20_000, 0x0123_4567_89ab_cdef);
    let r = run("fuzz", &config, &frames, &[]);
    // forwarded + replies + to host + drops = every packet.
    let line = r
        .text
        .lines()
        .find(|l| l.starts_with("forwarded "))
        .unwrap_or_else(|| panic!("{}", r.text));
    let total: u64 = line
        .split(", ")
        .filter_map(|part| part.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    assert_eq!(total, frames.len() as u64, "{}", r.text);
    assert!(r.text.contains("drop malformed: "), "{}", r.text);
    assert!(!r.out.is_empty(), "valid survivors were forwarded");
}

// ---------------------------------------------------------------------------
// Capture sizes.

/// Writes `frames` to a pcap whose header says `snaplen` (records whole).
fn write_pcap_with_snaplen(path: &Path, frames: &[Vec<u8>], snaplen: u32) {
    let format = pcap::Format {
        snaplen,
        ..pcap::Format::default()
    };
    let timed: Vec<(Duration, &Vec<u8>)> = frames
        .iter()
        .enumerate()
        .map(|(i, f)| (pcap::default_ts(i), f))
        .collect();
    pcap::write_timed(path, &format, &timed);
}

/// A TCP frame to `vip`:80 whose IP packet is `ip_len` bytes long.
fn tcp_frame_of(vip: IpAddr, client: u8, ip_len: usize) -> Vec<u8> {
    let c = IpAddr::from([192, 0, 2, client]);
    let header = if vip.is_ipv4() { 20 + 20 } else { 40 + 20 };
    let frame = tcp_frame(
        c,
        vip,
        40000 + u16::from(client),
        80,
        ACK,
        &vec![0x5a; ip_len - header],
    );
    assert_eq!(frame.len(), 14 + ip_len);
    frame
}

/// Frames as big as a capture holds leave whole (l2dsr) or encapsulated
/// whole, as big as the backend port's MTU (9216) takes: the output pcap is
/// not limited by the input's snaplen. Packets as big as IP allows (65,535
/// bytes, without DF) leave in fragments within that MTU (M48), 8 each,
/// which are the packet again.
#[test]
fn replay_writes_encapsulated_frames_larger_than_the_input_snaplen() {
    let dsr_macs: Vec<String> = (1..=3).map(|i| format!("02:00:00:00:01:0{i}")).collect();
    let modes = [
        ("10.0.0.21", Mode::L2dsr, 0),
        ("10.0.0.22", Mode::Ipip, 20),
        ("10.0.0.25", Mode::Gue(7777), 28),
        (
            "10.0.0.26",
            Mode::Geneve {
                port: 6081,
                class: 0x0139,
                cookie_type: 3,
            },
            44,
        ),
    ];
    const MTU: usize = 9216;
    for (snaplen, ip_len) in [(1514u32, None), (65535, None), (262_144, Some(65535))] {
        let mut frames = Vec::new();
        for (i, (vip, _, overhead)) in modes.iter().enumerate() {
            // The largest IP packet the capture holds, or whose encapsulation
            // the MTU still takes; or IP's largest.
            let fits = usize::try_from(snaplen).expect("snaplen") - 14;
            let len = ip_len.unwrap_or_else(|| fits.min(MTU - overhead));
            // Without DF: over the port's MTU once encapsulated, they are
            // sent in fragments, not answered (M48).
            let mut f = tcp_frame_of(v4(vip), i as u8 + 1, len);
            f[14 + 6] &= !0x40;
            let sum = csum(
                0,
                &[&f[14..14 + 10], &[0, 0], &f[14 + 12..14 + 20]].concat(),
            );
            f[14 + 10..14 + 12].copy_from_slice(&sum.to_be_bytes());
            frames.push(f);
        }
        let d = dir(&format!("snaplen-{snaplen}"));
        let (cfg, input, output) = (d.join("c.toml"), d.join("in.pcap"), d.join("out.pcap"));
        let config = delivery_config_on(base_with(
            port("inside", "net_pcap1", "backend").set("mtu", MTU as u64),
        ));
        std::fs::write(&cfg, config).expect("config");
        write_pcap_with_snaplen(&input, &frames, snaplen);
        let r = replay(&cfg, &input, &output, &[]);
        let text =
            String::from_utf8_lossy(&r.stdout).to_string() + &String::from_utf8_lossy(&r.stderr);
        assert!(
            r.status.success(),
            "snaplen {snaplen}: replay failed:\n{text}"
        );
        let out = read_pcap(&output);
        let per_packet = if ip_len.is_some() { 8 } else { 1 };
        assert_eq!(
            out.len(),
            frames.len() * per_packet,
            "snaplen {snaplen}:\n{text}"
        );
        for ((frame, (vip, mode, overhead)), o) in
            frames.iter().zip(&modes).zip(out.chunks(per_packet))
        {
            if per_packet == 1 {
                assert_eq!(o[0].len(), frame.len() + overhead, "{vip}: frame length");
                if snaplen == 1514 && *overhead > 0 {
                    assert!(o[0].len() > 1514, "{vip}: over the input's snaplen");
                }
            }
            let mut payload = Vec::new();
            for f in o {
                assert!(f.len() <= 14 + MTU, "{vip}: {} bytes", f.len());
                let del = delivered(f, *mode);
                if *mode == Mode::L2dsr {
                    assert!(dsr_macs.contains(&del.backend), "{}", del.backend);
                }
                // In offset order, each fragment's payload behind its header.
                let inner = &del.inner;
                assert_eq!(usize::from(be16(inner, 6) & 0x1fff) * 8, payload.len());
                payload.extend_from_slice(&inner[20..]);
            }
            assert_eq!(payload, frame[14 + 20..], "{vip}: the whole inner packet");
        }
        eprintln!(
            "snaplen {snaplen}: in {:?}, out {:?}",
            frames.iter().map(Vec::len).collect::<Vec<_>>(),
            out.iter().map(Vec::len).collect::<Vec<_>>()
        );
        let _ = std::fs::remove_dir_all(&d);
    }
}

/// A capture with a small snaplen holds records cut short (legal pcap): they
/// are skipped and counted, the whole ones replayed.
#[test]
fn replay_skips_and_counts_records_the_capture_truncated() {
    let d = dir("truncated");
    let (cfg, input, output) = (d.join("c.toml"), d.join("in.pcap"), d.join("out.pcap"));
    std::fs::write(&cfg, delivery_config()).expect("config");
    let whole = tcp_frame_of(v4("10.0.0.25"), 1, 40);
    let cut = tcp_frame_of(v4("10.0.0.25"), 2, 1500);
    let format = pcap::Format {
        snaplen: 96,
        ..pcap::Format::default()
    };
    let records: Vec<pcap::Record> = [(&whole, 54), (&cut, 1514), (&whole, 54)]
        .iter()
        .enumerate()
        .map(|(i, (f, orig_len))| pcap::Record {
            ts: Duration::new(1000, i as u32 * 1000),
            orig_len: *orig_len,
            data: f[..f.len().min(96)].to_vec(),
        })
        .collect();
    pcap::write_records(&input, &format, &records);
    let r = replay(&cfg, &input, &output, &[]);
    let text = String::from_utf8_lossy(&r.stdout).to_string() + &String::from_utf8_lossy(&r.stderr);
    assert!(r.status.success(), "replay failed:\n{text}");
    assert!(text.contains("3 packets in, 2 out"), "{text}");
    assert!(
        text.contains("1 truncated by the capture (snaplen 96) skipped"),
        "{text}"
    );
    let out = read_pcap(&output);
    for o in &out {
        assert_eq!(delivered(o, Mode::Gue(7777)).inner, whole[14..]);
    }
    let _ = std::fs::remove_dir_all(&d);
}
