//! `spillway replay`: crafted pcaps through the real pipeline, offline.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use pcap_file::pcap::{PcapPacket, PcapReader, PcapWriter};
use wire::encap::{DecapConfig, parse_tunnel};

const CONFIG: &str = r#"
[node]
name = "replay"
region = "r"
zone = "z"

[[ports]]
name = "up"
device = "net_pcap0"
role = "uplink"
addresses = ["10.0.0.2/24"]
mac = "02:00:00:00:00:01"
gateway_mac = "02:00:00:00:00:fe"

[[forwarding_rules]]
name = "web"
vips = ["10.0.0.10"]
protocol = "TCP"
ports = "80"
backend_service = "web"

[[backend_services]]
name = "web"
delivery = "ipip"
[[backend_services.groups]]
name = "a"
region = "r"
zone = "z"
endpoints = [{ address = "10.0.1.11" }, { address = "10.0.1.12" }, { address = "10.0.1.13" }]
"#;

fn dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("spillway-replay-{}", std::process::id()));
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

fn csum(mut sum: u32, data: &[u8]) -> u16 {
    for c in data.chunks(2) {
        sum += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Ethernet/IPv4/TCP SYN from 192.0.2.x:port to dst:dport.
fn syn(client: u8, port: u16, dst: [u8; 4], dport: u16) -> Vec<u8> {
    let src = [192, 0, 2, client];
    let mut tcp = vec![0u8; 20];
    tcp[0..2].copy_from_slice(&port.to_be_bytes());
    tcp[2..4].copy_from_slice(&dport.to_be_bytes());
    tcp[12] = 0x50;
    tcp[13] = 0x02;
    let pseudo: u32 = [src, dst]
        .iter()
        .flat_map(|a| {
            [
                u16::from_be_bytes([a[0], a[1]]),
                u16::from_be_bytes([a[2], a[3]]),
            ]
        })
        .map(u32::from)
        .sum::<u32>()
        + 6
        + 20;
    let c = csum(pseudo, &tcp);
    tcp[16..18].copy_from_slice(&c.to_be_bytes());
    let mut ip = vec![0x45, 0, 0, 40, 0, 1, 0x40, 0, 64, 6, 0, 0];
    ip.extend_from_slice(&src);
    ip.extend_from_slice(&dst);
    let c = csum(0, &ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 0x77, 0x08, 0x00];
    f.extend_from_slice(&ip);
    f.extend_from_slice(&tcp);
    f
}

fn write_pcap(path: &Path, frames: &[Vec<u8>]) {
    let mut w = PcapWriter::new(std::fs::File::create(path).expect("create")).expect("pcap writer");
    for (i, f) in frames.iter().enumerate() {
        w.write_packet(&PcapPacket::new(
            Duration::from_millis(1_000_000 + 10 * i as u64),
            f.len() as u32,
            f,
        ))
        .expect("write");
    }
}

fn read_pcap(path: &Path) -> Vec<Vec<u8>> {
    let mut r = PcapReader::new(std::fs::File::open(path).expect("open")).expect("pcap reader");
    let mut out = Vec::new();
    while let Some(p) = r.next_packet() {
        out.push(p.expect("packet").data.into_owned());
    }
    out
}

fn replay(cfg: &Path, input: &Path, output: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "replay".to_string(),
        "--config".into(),
        cfg.display().to_string(),
        "--input".into(),
        input.display().to_string(),
        "--output".into(),
        output.display().to_string(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(&args)
        .output()
        .expect("run spillway replay")
}

#[test]
fn replay_forwards_vip_traffic_deterministically_and_counts_the_rest() {
    let d = dir();
    let cfg = d.join("c.toml");
    std::fs::write(&cfg, CONFIG).expect("config");
    let mut frames: Vec<Vec<u8>> = (0..90u16)
        .map(|i| syn((i % 30) as u8 + 1, 30000 + i, [10, 0, 0, 10], 80))
        .collect();
    frames.push(syn(1, 1, [10, 0, 0, 10], 81)); // no rule
    frames.push(syn(1, 1, [10, 0, 0, 99], 80)); // not ours
    frames.push(syn(1, 1, [10, 0, 0, 10], 80)[..24].to_vec()); // truncated IPv4: malformed
    let input = d.join("in.pcap");
    write_pcap(&input, &frames);

    let (out1, out2) = (d.join("out1.pcap"), d.join("out2.pcap"));
    let r1 = replay(&cfg, &input, &out1, &[]);
    let text =
        String::from_utf8_lossy(&r1.stdout).to_string() + &String::from_utf8_lossy(&r1.stderr);
    assert!(r1.status.success(), "{text}");
    assert!(text.contains("93 packets in, 90 out"), "{text}");
    assert!(
        text.contains("drop no_rule: 1")
            && text.contains("drop not_ours: 1")
            && text.contains("drop malformed: 1"),
        "{text}"
    );
    assert!(text.contains("rule web-ag0: 90 packets"), "{text}");

    let got = read_pcap(&out1);
    assert_eq!(got.len(), 90);
    let mut per_backend = std::collections::BTreeMap::new();
    for (out, original) in got.iter().zip(&frames) {
        let t = parse_tunnel(out, &DecapConfig::default()).expect("an IPIP frame");
        assert_eq!(
            &out[t.inner_offset..t.inner_offset + t.inner_len],
            &original[14..],
            "inner packet unchanged"
        );
        assert_eq!(
            &out[0..6],
            &[2, 0, 0, 0, 0, 0xfe],
            "to the configured gateway MAC"
        );
        *per_backend.entry(t.dst_ip.to_string()).or_insert(0) += 1;
    }
    assert_eq!(per_backend.len(), 3, "{per_backend:?}");

    let r2 = replay(&cfg, &input, &out2, &[]);
    assert!(r2.status.success());
    assert_eq!(
        std::fs::read(&out1).expect("out1"),
        std::fs::read(&out2).expect("out2"),
        "replays are deterministic"
    );

    // With one backend down, nothing goes to it.
    let out3 = d.join("out3.pcap");
    let r3 = replay(&cfg, &input, &out3, &["--down", "10.0.1.12"]);
    assert!(
        r3.status.success(),
        "{}",
        String::from_utf8_lossy(&r3.stderr)
    );
    for out in read_pcap(&out3) {
        let t = parse_tunnel(&out, &DecapConfig::default()).expect("tunnel");
        assert_ne!(t.dst_ip.to_string(), "10.0.1.12");
    }
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn replay_rejects_bad_inputs_with_clear_errors() {
    let d = dir().join("bad");
    std::fs::create_dir_all(&d).expect("dir");
    let cfg = d.join("c.toml");
    std::fs::write(&cfg, CONFIG).expect("config");
    let not_pcap = d.join("x.pcap");
    std::fs::write(&not_pcap, b"definitely not a capture").expect("write");
    let r = replay(&cfg, &not_pcap, &d.join("o.pcap"), &[]);
    assert_eq!(r.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&r.stderr).contains("not a pcap file"));
    let r = replay(&cfg, &not_pcap, &d.join("o.pcap"), &["--down", "10.9.9.9"]);
    assert!(String::from_utf8_lossy(&r.stderr).contains("no endpoint has that address"));
    let bad_cfg = d.join("bad.toml");
    std::fs::write(&bad_cfg, "[node]\nname = 1\n").expect("write");
    let r = replay(&bad_cfg, &not_pcap, &d.join("o.pcap"), &[]);
    assert_eq!(r.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&r.stderr).contains("bad.toml:2:"),
        "{}",
        String::from_utf8_lossy(&r.stderr)
    );
    let _ = std::fs::remove_dir_all(&d);
}
