//! What the `spillway replay` tests (`tests/replay_*.rs`) share: the node
//! and ports of their configurations, running the binary on a pcap and
//! reading its summary ([`Replayed`]), decoding the frames it sent towards
//! backends ([`delivered`]: outer headers checked here, not by the `wire`
//! crate under test), and captures on a clock ([`run_timed`]). Helpers of
//! one topic stay in that topic's file.

#![allow(clippy::cast_possible_truncation)] // test values are small

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use testkit::config::{Config, Table, addrs, endpoint_list, group, node, port, rule, service};
use testkit::pcap;
use wire::encap::{DecapConfig, parse_tunnel};

use super::*;

/// One uplink, one TCP rule to a service of three IPIP endpoints.
pub fn config() -> Config {
    Config::new()
        .node(node("replay", "r", "z"))
        .port(uplink(&["10.0.0.2/24"]))
        .rule(rule("web", &["10.0.0.10"], "TCP", "80", "web"))
        .service(service("web", "ipip").child(group("a", "r", "z").set(
            "endpoints",
            endpoint_list(&["10.0.1.11", "10.0.1.12", "10.0.1.13"]),
        )))
}

/// The uplink with `addresses`, our MAC and the router's.
pub fn uplink(addresses: &[&str]) -> Table {
    port("up", "net_pcap0", "uplink")
        .strs("addresses", addresses)
        .str("mac", "02:00:00:00:00:01")
        .str("gateway_mac", "02:00:00:00:00:fe")
}

/// A private directory per test (tests of one binary run in parallel).
pub fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("spillway-replay-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

/// Ethernet/IPv4/TCP SYN from 192.0.2.x:port to dst:dport.
pub fn syn(client: u8, port: u16, dst: [u8; 4], dport: u16) -> Vec<u8> {
    tcp_frame(
        IpAddr::from([192, 0, 2, client]),
        IpAddr::from(dst),
        port,
        dport,
        SYN,
        &[],
    )
}

pub fn replay(cfg: &Path, input: &Path, output: &Path, extra: &[&str]) -> Output {
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

// ---------------------------------------------------------------------------
// Running a replay and reading its summary.

/// Node and ports shared by the crafted-pcap tests: clients arrive on the
/// uplink; packets for backends leave through the `backend` port, whose first
/// address of each family is the tunnel source.
pub fn base() -> String {
    base_with(port("inside", "net_pcap1", "backend"))
}

/// [`base`] with the backend port `inside` (its name, device and role, and
/// anything else it sets: its MTU, say).
pub fn base_with(inside: Table) -> String {
    Config::new()
        .node(node("replay", "r", "z"))
        .port(uplink(&["10.0.0.2/24", "2001:db8::2/64"]))
        .port(
            inside
                .strs("addresses", &["10.1.0.2/24", "2001:db8:1::2/48"])
                .str("mac", "02:00:00:00:00:02")
                .str("gateway_mac", "02:00:00:00:00:fd"),
        )
        .build()
}

/// Source MAC of everything sent towards backends (the backend port's).
pub const OUT_MAC: [u8; 6] = [2, 0, 0, 0, 0, 2];
/// The backend port's next hop (tunnel destinations without their own MAC).
pub const NEXT_HOP_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0xfd];
/// Outer source addresses: the backend port's first address of each family.
pub const TUNNEL_SRC4: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 2);
pub const TUNNEL_SRC6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 2);

/// Counters of one child rule from the summary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RuleCount {
    pub packets: u64,
    pub bytes: u64,
    pub new_flows: u64,
    pub drops: u64,
}

/// What a replay transmitted and said.
pub struct Replayed {
    pub out: Vec<Vec<u8>>,
    pub text: String,
}

impl Replayed {
    pub fn line_value(&self, prefix: &str) -> Option<&str> {
        self.text
            .lines()
            .map(str::trim)
            .find_map(|l| l.strip_prefix(prefix))
    }

    /// Drops counted for `reason` (absent from the summary: 0).
    pub fn drops(&self, reason: &str) -> u64 {
        self.line_value(&format!("drop {reason}: "))
            .map(|v| v.parse().expect("drop count"))
            .unwrap_or(0)
    }

    /// Counters of a child rule (absent from the summary: all 0).
    pub fn rule(&self, child: &str) -> RuleCount {
        let Some(v) = self.line_value(&format!("rule {child}: ")) else {
            return RuleCount::default();
        };
        let n: Vec<u64> = v
            .split(", ")
            .map(|f| f.split(' ').next().unwrap().parse().expect("count"))
            .collect();
        RuleCount {
            packets: n[0],
            bytes: n[1],
            new_flows: n[2],
            drops: n[3],
        }
    }
}

/// Writes `config` and `frames` into a fresh directory, replays them and
/// returns what came out (the run must succeed).
pub fn run(name: &str, config: &str, frames: &[Vec<u8>], extra: &[&str]) -> Replayed {
    let d = dir(name);
    let (cfg, input, output) = (d.join("c.toml"), d.join("in.pcap"), d.join("out.pcap"));
    std::fs::write(&cfg, config).expect("config");
    write_pcap(&input, frames);
    let r = replay(&cfg, &input, &output, extra);
    let text = String::from_utf8_lossy(&r.stdout).to_string() + &String::from_utf8_lossy(&r.stderr);
    assert!(
        r.status.success(),
        "replay failed:\n{text}\nconfig:\n{config}"
    );
    let out = read_pcap(&output);
    assert!(
        text.contains(&format!("{} packets in, {} out", frames.len(), out.len())),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&d);
    Replayed { out, text }
}

// ---------------------------------------------------------------------------
// Decoding what was transmitted.

/// A delivery mode and the parameters the test configured for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    L2dsr,
    Ipip,
    Gre(Option<u32>),
    Gue(u16),
    Geneve {
        port: u16,
        class: u16,
        cookie_type: u8,
    },
}

/// One transmitted packet, checked against its mode.
#[derive(Debug, Clone)]
pub struct Delivered {
    /// The backend: outer destination IP (tunnels) or destination MAC (l2dsr).
    pub backend: String,
    /// The inner IP packet (l2dsr: the frame after the Ethernet header).
    pub inner: Vec<u8>,
    /// Outer UDP source port (GUE, GENEVE).
    pub udp_src: Option<u16>,
    /// Outer IPv6 flow label.
    pub flow_label: Option<u32>,
    /// GENEVE flow cookie option.
    pub cookie: Option<u32>,
}

pub fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

pub fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

pub fn mac_str(m: &[u8]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// Decodes and checks a frame sent to a backend: Ethernet addresses, the
/// outer IPv4 header (checksum, length, id 0, DF, TTL 64) or IPv6 header
/// (payload length, hop limit 64), the tunnel source, and the mode's tunnel
/// header. Returns the backend and the inner packet.
pub fn delivered(frame: &[u8], mode: Mode) -> Delivered {
    assert_eq!(&frame[6..12], &OUT_MAC, "source MAC: the backend port's");
    if mode == Mode::L2dsr {
        return Delivered {
            backend: mac_str(&frame[0..6]),
            inner: frame[14..].to_vec(),
            udp_src: None,
            flow_label: None,
            cookie: None,
        };
    }
    assert_eq!(&frame[0..6], &NEXT_HOP_MAC, "destination MAC: the next hop");
    let ip = &frame[14..];
    let (dst, proto, l4, flow_label) = match be16(frame, 12) {
        0x0800 => {
            assert_eq!(ip[0], 0x45, "outer IPv4 header without options");
            assert_eq!(usize::from(be16(ip, 2)), ip.len(), "outer total length");
            assert_eq!(csum(0, &ip[..20]), 0, "outer IPv4 header checksum");
            assert_eq!(be16(ip, 4), 0, "outer identification");
            assert_eq!(be16(ip, 6), 0x4000, "outer DF set, not a fragment");
            assert_eq!(ip[8], 64, "outer TTL");
            assert_eq!(&ip[12..16], &TUNNEL_SRC4.octets(), "tunnel source");
            let dst = Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]);
            (IpAddr::V4(dst), ip[9], &ip[20..], None)
        }
        0x86dd => {
            assert_eq!(ip[0] >> 4, 6);
            assert_eq!(
                usize::from(be16(ip, 4)),
                ip.len() - 40,
                "outer payload length"
            );
            assert_eq!(ip[7], 64, "outer hop limit");
            assert_eq!(&ip[8..24], &TUNNEL_SRC6.octets(), "tunnel source");
            let dst: [u8; 16] = ip[24..40].try_into().unwrap();
            let label = be32(ip, 0) & 0x000f_ffff;
            (IpAddr::from(dst), ip[6], &ip[40..], Some(label))
        }
        et => panic!("outer EtherType {et:#06x}"),
    };
    let src = match dst {
        IpAddr::V4(_) => IpAddr::V4(TUNNEL_SRC4),
        IpAddr::V6(_) => IpAddr::V6(TUNNEL_SRC6),
    };
    let inner_ethertype = |inner: &[u8]| if inner[0] >> 4 == 6 { 0x86dd } else { 0x0800 };
    // The outer UDP header of GUE and GENEVE: ports, length, checksum (zero
    // over IPv4, computed over IPv6).
    let check_udp = |dport: u16| -> u16 {
        assert_eq!(proto, UDP, "outer protocol UDP");
        let sport = be16(l4, 0);
        assert!(
            sport >= 49152,
            "outer source port {sport} in the ephemeral range"
        );
        assert_eq!(be16(l4, 2), dport, "outer destination port");
        assert_eq!(usize::from(be16(l4, 4)), l4.len(), "outer UDP length");
        if dst.is_ipv4() {
            assert_eq!(be16(l4, 6), 0, "no outer UDP checksum over IPv4");
        } else {
            assert_ne!(be16(l4, 6), 0, "outer UDP checksum over IPv6");
            assert_eq!(
                csum(pseudo(src, dst, UDP, l4.len()), l4),
                0,
                "outer UDP checksum"
            );
        }
        sport
    };
    let (inner, udp_src, cookie) = match mode {
        Mode::L2dsr => unreachable!(),
        Mode::Ipip => {
            let want = if l4[0] >> 4 == 6 { 41 } else { 4 };
            assert_eq!(proto, want, "outer protocol IP-in-IP");
            (l4, None, None)
        }
        Mode::Gre(key) => {
            assert_eq!(proto, 47, "outer protocol GRE");
            let flags = be16(l4, 0);
            let hl = match key {
                None => {
                    assert_eq!(flags, 0, "GRE without checksum, key or sequence");
                    4
                }
                Some(k) => {
                    assert_eq!(flags, 0x2000, "GRE with the key bit only");
                    assert_eq!(be32(l4, 4), k, "GRE key");
                    8
                }
            };
            let inner = &l4[hl..];
            assert_eq!(be16(l4, 2), inner_ethertype(inner), "GRE protocol");
            (inner, None, None)
        }
        Mode::Gue(port) => {
            let sport = check_udp(port);
            let inner = &l4[8..];
            // Variant 1: the first two bits are 01, i.e. the IP version nibble.
            assert_eq!(inner[0] >> 6, 1, "GUE variant 1");
            (inner, Some(sport), None)
        }
        Mode::Geneve {
            port,
            class,
            cookie_type,
        } => {
            let sport = check_udp(port);
            let g = &l4[8..];
            assert_eq!(g[0] >> 6, 0, "GENEVE version 0");
            let opt_len = usize::from(g[0] & 0x3f) * 4;
            assert_eq!(g[1], 0, "GENEVE flags: not OAM, no critical options");
            assert_eq!(&g[4..8], &[0, 0, 0, 0], "VNI 0, reserved 0");
            let inner = &g[8 + opt_len..];
            assert_eq!(be16(g, 2), inner_ethertype(inner), "GENEVE protocol type");
            // The options: exactly the flow cookie TLV in passthrough mode.
            let opts = &g[8..8 + opt_len];
            assert_eq!(opt_len, 8, "one option of 4 data bytes: {opts:02x?}");
            assert_eq!(be16(opts, 0), class, "option class");
            assert_eq!(opts[2], cookie_type, "flow cookie option type");
            assert_eq!(opts[3], 1, "option length in 4-byte words");
            (inner, Some(sport), Some(be32(opts, 4)))
        }
    };
    Delivered {
        backend: dst.to_string(),
        inner: inner.to_vec(),
        udp_src,
        flow_label,
        cookie,
    }
}

/// Records `value` for `key`, asserting that a key never sees two values.
pub fn same_per_key<K: Ord + Debug, V: Eq + Debug>(
    map: &mut BTreeMap<K, V>,
    key: K,
    value: V,
    what: &str,
) {
    match map.get(&key) {
        Some(v) => assert_eq!(v, &value, "{what} of {key:?}"),
        None => {
            map.insert(key, value);
        }
    }
}

pub fn distinct<K, V: Ord + Clone>(map: &BTreeMap<K, V>) -> BTreeSet<V> {
    map.values().cloned().collect()
}

// ---------------------------------------------------------------------------
// Configurations and traffic more than one topic uses.

/// One VIP per delivery mode, each TCP port 80 to its own service.
pub fn delivery_config() -> String {
    delivery_config_on(base())
}

/// [`delivery_config`] on the node and ports of `base`.
pub fn delivery_config_on(base: String) -> String {
    let dsr_eps: Vec<String> = (1..=3)
        .map(|i| format!("{{ address = \"10.1.1.{i}\", mac = \"02:00:00:00:01:0{i}\" }}"))
        .collect();
    [
        base,
        rule("dsr", &["10.0.0.21"], "TCP", "80", "dsr").to_string(),
        rule("ipip", &["10.0.0.22"], "TCP", "80", "ipip").to_string(),
        rule("gre", &["10.0.0.23"], "TCP", "80", "gre").to_string(),
        rule("grekey", &["10.0.0.24"], "TCP", "80", "grekey").to_string(),
        rule("gue", &["10.0.0.25"], "TCP", "80", "gue").to_string(),
        rule("geneve", &["10.0.0.26"], "TCP", "80", "geneve").to_string(),
        rule("geneve-ids", &["10.0.0.27"], "TCP", "80", "geneve-ids").to_string(),
        service("dsr", "l2dsr").endpoints(&dsr_eps).to_string(),
        service("ipip", "ipip").endpoints(&addrs("10.1.2.", 3)).to_string(),
        service("gre", "gre").endpoints(&addrs("10.1.3.", 3)).to_string(),
        service("grekey", "gre").set("gre_key", 3_735_928_559u32).endpoints(&addrs("10.1.4.", 3)).to_string(),
        service("gue", "gue").set("gue_port", 7777).endpoints(&addrs("10.1.5.", 3)).to_string(),
        service("geneve", "geneve").endpoints(&addrs("10.1.6.", 3)).to_string(),
        service("geneve-ids", "geneve")
            .set(
                "geneve",
                "{ port = 6081, option_class = 0x0105, endpoint_id_type = 9, flow_cookie_type = 7 }",
            )
            .endpoints(&addrs("10.1.7.", 3))
            .to_string(),
    ]
    .concat()
}

// ---------------------------------------------------------------------------
// Captures on a clock: frames at given seconds, replayed with `--at`.

/// Writes `(second, frame)` records to a pcap, each at that second of the
/// capture (in order; frames of one second 1 ms apart).
pub fn write_timed_pcap(path: &Path, frames: &[(u64, Vec<u8>)]) {
    let timed: Vec<(Duration, &Vec<u8>)> = frames
        .iter()
        .enumerate()
        .map(|(i, (sec, f))| {
            let ms = 1_000_000 * 1000 + sec * 1000 + i as u64 % 1000;
            (Duration::from_millis(ms), f)
        })
        .collect();
    pcap::write_timed(path, &pcap::Format::default(), &timed);
}

/// The backend (outer destination) of each IPIP frame.
pub fn backends_of(frames: &[Vec<u8>]) -> Vec<String> {
    frames
        .iter()
        .map(|f| {
            parse_tunnel(f, &DecapConfig::default())
                .expect("an IPIP frame")
                .dst_ip
                .to_string()
        })
        .collect()
}

/// Replays `frames` (each at its second of the capture) with `config` and
/// `extra` arguments, in which `{dir}` is the test's directory (for files
/// written there from `files`); what came out and what it said.
pub fn run_timed(
    name: &str,
    config: &str,
    files: &[(&str, &str)],
    frames: &[(u64, Vec<u8>)],
    extra: &[&str],
) -> Replayed {
    let d = dir(name);
    let (cfg, input, output) = (d.join("c.toml"), d.join("in.pcap"), d.join("out.pcap"));
    std::fs::write(&cfg, config).expect("config");
    for (file, text) in files {
        std::fs::write(d.join(file), text).expect("file");
    }
    write_timed_pcap(&input, frames);
    let dir_s = d.display().to_string();
    let extra: Vec<String> = extra.iter().map(|a| a.replace("{dir}", &dir_s)).collect();
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    let r = replay(&cfg, &input, &output, &extra);
    let text = String::from_utf8_lossy(&r.stdout).to_string() + &String::from_utf8_lossy(&r.stderr);
    assert!(r.status.success(), "replay failed:\n{text}");
    let out = read_pcap(&output);
    let _ = std::fs::remove_dir_all(&d);
    Replayed { out, text }
}

/// A TCP packet of connection `i` of set `set` (client 192.0.`set`.x) to
/// 10.0.0.10:80.
pub fn conn(set: u8, i: u16, flags: u8) -> Vec<u8> {
    tcp_frame(
        IpAddr::from([192, 0, set, (i % 250) as u8 + 1]),
        IpAddr::from([10, 0, 0, 10]),
        20000 + i,
        80,
        flags,
        &[],
    )
}
