//! `spillway replay`: crafted pcaps through the real pipeline, offline.
//!
//! Every test writes a configuration and a pcap of hand-built packets, runs
//! the `spillway` binary, and checks the transmitted frames byte by byte
//! (outer headers decoded here, not by the `wire` crate under test) and the
//! summary's counters.

#![allow(clippy::cast_possible_truncation)] // test values are small
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use common::*;
use testkit::config::{Config, Table, addrs, endpoint_list, group, node, port, rule, service};
use testkit::mutate::Mutator;
use testkit::pcap;
use wire::encap::{DecapConfig, parse_tunnel};

/// One uplink, one TCP rule to a service of three IPIP endpoints.
fn config() -> Config {
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
fn uplink(addresses: &[&str]) -> Table {
    port("up", "net_pcap0", "uplink")
        .strs("addresses", addresses)
        .str("mac", "02:00:00:00:00:01")
        .str("gateway_mac", "02:00:00:00:00:fe")
}

/// A private directory per test (tests of one binary run in parallel).
fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("spillway-replay-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

/// Ethernet/IPv4/TCP SYN from 192.0.2.x:port to dst:dport.
fn syn(client: u8, port: u16, dst: [u8; 4], dport: u16) -> Vec<u8> {
    tcp_frame(
        IpAddr::from([192, 0, 2, client]),
        IpAddr::from(dst),
        port,
        dport,
        SYN,
        &[],
    )
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

// ---------------------------------------------------------------------------
// Running a replay and reading its summary.

/// Node and ports shared by the crafted-pcap tests: clients arrive on the
/// uplink; packets for backends leave through the `backend` port, whose first
/// address of each family is the tunnel source.
fn base() -> String {
    base_with(port("inside", "net_pcap1", "backend"))
}

/// [`base`] with the backend port `inside` (its name, device and role, and
/// anything else it sets: its MTU, say).
fn base_with(inside: Table) -> String {
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
const OUT_MAC: [u8; 6] = [2, 0, 0, 0, 0, 2];
/// The backend port's next hop (tunnel destinations without their own MAC).
const NEXT_HOP_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0xfd];
/// Outer source addresses: the backend port's first address of each family.
const TUNNEL_SRC4: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 2);
const TUNNEL_SRC6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 2);

/// Counters of one child rule from the summary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct RuleCount {
    packets: u64,
    bytes: u64,
    new_flows: u64,
    drops: u64,
}

/// What a replay transmitted and said.
struct Replayed {
    out: Vec<Vec<u8>>,
    text: String,
}

impl Replayed {
    fn line_value(&self, prefix: &str) -> Option<&str> {
        self.text
            .lines()
            .map(str::trim)
            .find_map(|l| l.strip_prefix(prefix))
    }

    /// Drops counted for `reason` (absent from the summary: 0).
    fn drops(&self, reason: &str) -> u64 {
        self.line_value(&format!("drop {reason}: "))
            .map(|v| v.parse().expect("drop count"))
            .unwrap_or(0)
    }

    /// Counters of a child rule (absent from the summary: all 0).
    fn rule(&self, child: &str) -> RuleCount {
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
fn run(name: &str, config: &str, frames: &[Vec<u8>], extra: &[&str]) -> Replayed {
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

/// Counters a child rule should show for `frames`, each a new flow unless
/// `new_flows` says otherwise.
fn expect_count(frames: &[&Vec<u8>], new_flows: u64) -> RuleCount {
    RuleCount {
        packets: frames.len() as u64,
        bytes: frames.iter().map(|f| f.len() as u64).sum(),
        new_flows,
        drops: 0,
    }
}

// ---------------------------------------------------------------------------
// Decoding what was transmitted.

/// A delivery mode and the parameters the test configured for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
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
struct Delivered {
    /// The backend: outer destination IP (tunnels) or destination MAC (l2dsr).
    backend: String,
    /// The inner IP packet (l2dsr: the frame after the Ethernet header).
    inner: Vec<u8>,
    /// Outer UDP source port (GUE, GENEVE).
    udp_src: Option<u16>,
    /// Outer IPv6 flow label.
    flow_label: Option<u32>,
    /// GENEVE flow cookie option.
    cookie: Option<u32>,
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn mac_str(m: &[u8]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// Decodes and checks a frame sent to a backend: Ethernet addresses, the
/// outer IPv4 header (checksum, length, id 0, DF, TTL 64) or IPv6 header
/// (payload length, hop limit 64), the tunnel source, and the mode's tunnel
/// header. Returns the backend and the inner packet.
fn delivered(frame: &[u8], mode: Mode) -> Delivered {
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
fn same_per_key<K: Ord + Debug, V: Eq + Debug>(
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

fn distinct<K, V: Ord + Clone>(map: &BTreeMap<K, V>) -> BTreeSet<V> {
    map.values().cloned().collect()
}

// ---------------------------------------------------------------------------
// Rule selection (M2, M3, M5).

#[test]
fn rule_selection_prefers_the_port_specific_rule_and_falls_back_to_l3_default() {
    let vips = ["10.0.0.10", "10.0.0.11"];
    let config = [
        base(),
        rule("http", &vips, "TCP", "80", "http").to_string(),
        rule("alt", &vips, "TCP", "8000-8100", "alt").to_string(),
        rule("rest", &vips, "L3_DEFAULT", "all", "rest").to_string(),
        service("http", "ipip")
            .endpoints(&addrs("10.1.1.", 3))
            .to_string(),
        service("alt", "gre")
            .endpoints(&addrs("10.1.2.", 3))
            .to_string(),
        service("rest", "gue")
            .set("gue_port", 6080)
            .endpoints(&addrs("10.1.3.", 3))
            .to_string(),
    ]
    .concat();
    let (ag0, ag1) = (v4("10.0.0.10"), v4("10.0.0.11"));
    let c = |i: u8| IpAddr::from([192, 0, 2, i]);
    // (frame, service, child rule) in order; each its own flow unless noted.
    let mut cases: Vec<(Vec<u8>, &str, &str)> = vec![
        (
            tcp_frame(c(1), ag0, 40001, 80, SYN, &[]),
            "http",
            "http-ag0",
        ),
        (
            tcp_frame(c(2), ag0, 40002, 80, SYN, &[]),
            "http",
            "http-ag0",
        ),
        (
            tcp_frame(c(3), ag0, 40003, 8000, SYN, &[]),
            "alt",
            "alt-ag0",
        ),
        (
            tcp_frame(c(4), ag0, 40004, 8050, SYN, &[]),
            "alt",
            "alt-ag0",
        ),
        (
            tcp_frame(c(5), ag0, 40005, 8100, SYN, &[]),
            "alt",
            "alt-ag0",
        ),
        (
            tcp_frame(c(6), ag0, 40006, 7999, SYN, &[]),
            "rest",
            "rest-ag0",
        ),
        (
            tcp_frame(c(7), ag0, 40007, 8101, SYN, &[]),
            "rest",
            "rest-ag0",
        ),
        (
            tcp_frame(c(8), ag0, 40008, 9999, SYN, &[]),
            "rest",
            "rest-ag0",
        ),
        // UDP 80 and 53: no UDP rule, so L3_DEFAULT (the TCP rule on port 80
        // is of another protocol).
        (udp_frame(c(9), ag0, 5353, 53, b"dns?"), "rest", "rest-ag0"),
        (
            udp_frame(c(10), ag0, 5353, 80, b"not-http"),
            "rest",
            "rest-ag0",
        ),
        // ICMP echo: two requests of one flow (3-tuple).
        (echo_frame(c(11), ag0, 7, 1), "rest", "rest-ag0"),
        (echo_frame(c(11), ag0, 7, 2), "rest", "rest-ag0"),
        // ESP and GRE have no ports: L3_DEFAULT.
        (
            eth(&ip(
                c(12),
                ag0,
                ESP,
                &[0, 0, 0x10, 0x01, 0, 0, 0, 1, 0xaa, 0xbb],
            )),
            "rest",
            "rest-ag0",
        ),
        (
            eth(&ip(c(13), ag0, 47, &[0, 0, 0x08, 0x00, 0x45, 0, 0, 20])),
            "rest",
            "rest-ag0",
        ),
        // The second availability group's VIP: the same rules, their -ag1 children.
        (
            tcp_frame(c(14), ag1, 40014, 80, SYN, &[]),
            "http",
            "http-ag1",
        ),
        (
            tcp_frame(c(15), ag1, 40015, 8080, SYN, &[]),
            "alt",
            "alt-ag1",
        ),
        (udp_frame(c(16), ag1, 5353, 53, b"dns?"), "rest", "rest-ag1"),
    ];
    // A data packet of the first flow: follows its entry, no new flow.
    cases.push((
        tcp_frame(c(1), ag0, 40001, 80, ACK | PSH, b"GET / HTTP/1.0\r\n\r\n"),
        "http",
        "http-ag0",
    ));
    let mut frames: Vec<Vec<u8>> = cases.iter().map(|(f, ..)| f.clone()).collect();
    // SCTP (132) is none of L3_DEFAULT's protocols (M2): no rule.
    frames.push(eth(&ip(c(17), ag0, 132, &[0u8; 12])));

    let r = run("rules", &config, &frames, &[]);
    assert_eq!(r.out.len(), cases.len(), "{}", r.text);
    assert_eq!(r.drops("no_rule"), 1, "{}", r.text);
    let mode = |svc: &str| match svc {
        "http" => Mode::Ipip,
        "alt" => Mode::Gre(None),
        _ => Mode::Gue(6080),
    };
    let backends = |svc: &str| match svc {
        "http" => addrs("10.1.1.", 3),
        "alt" => addrs("10.1.2.", 3),
        _ => addrs("10.1.3.", 3),
    };
    for ((frame, svc, child), out) in cases.iter().zip(&r.out) {
        let d = delivered(out, mode(svc));
        assert!(
            backends(svc).contains(&d.backend),
            "{child}: {} is not a backend of {svc}",
            d.backend
        );
        assert_eq!(d.inner, frame[14..], "{child}: inner packet unchanged");
    }
    // The first flow's data packet went where its SYN went.
    assert_eq!(
        delivered(&r.out[0], Mode::Ipip).backend,
        delivered(r.out.last().unwrap(), Mode::Ipip).backend
    );
    for child in [
        "http-ag0", "alt-ag0", "rest-ag0", "http-ag1", "alt-ag1", "rest-ag1",
    ] {
        let mine: Vec<&Vec<u8>> = cases
            .iter()
            .filter(|(_, _, ch)| *ch == child)
            .map(|(f, ..)| f)
            .collect();
        // Repeated flows: the http data packet and the second echo request.
        let repeats = match child {
            "http-ag0" | "rest-ag0" => 1,
            _ => 0,
        };
        let want = expect_count(&mine, mine.len() as u64 - repeats);
        assert_eq!(r.rule(child), want, "{child}:\n{}", r.text);
    }
}

// ---------------------------------------------------------------------------
// Delivery modes (M8, M30).

/// One VIP per delivery mode, each TCP port 80 to its own service.
fn delivery_config() -> String {
    delivery_config_on(base())
}

/// [`delivery_config`] on the node and ports of `base`.
fn delivery_config_on(base: String) -> String {
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

/// 24 TCP connections to `vip`:80 (SYN, ACK, data), interleaved.
fn connections(vip: IpAddr) -> Vec<Vec<u8>> {
    let mut frames = Vec::new();
    for step in 0..3 {
        for i in 1..=24u8 {
            let (c, port) = (IpAddr::from([192, 0, 2, i]), 41000 + u16::from(i));
            frames.push(match step {
                0 => tcp_frame(c, vip, port, 80, SYN, &[]),
                1 => tcp_frame(c, vip, port, 80, ACK, &[]),
                _ => tcp_frame(c, vip, port, 80, ACK | PSH, b"GET / HTTP/1.1\r\n\r\n"),
            });
        }
    }
    frames
}

/// Replays 24 connections to `vip`, checks every frame per `mode` and that
/// the inner packet is the received IP packet byte for byte, each
/// connection sticks to one backend, and all three backends get some.
/// Returns the delivered packets by connection (client index).
fn check_delivery(name: &str, vip: &str, mode: Mode, backends: &[String]) -> Vec<(u8, Delivered)> {
    let frames = connections(v4(vip));
    let r = run(name, &delivery_config(), &frames, &[]);
    assert_eq!(r.out.len(), frames.len(), "{}", r.text);
    let mut per_flow = BTreeMap::new();
    let mut all = Vec::new();
    for (i, (frame, out)) in frames.iter().zip(&r.out).enumerate() {
        let d = delivered(out, mode);
        if mode == Mode::L2dsr {
            // Only the MACs change; everything from the EtherType on is as received.
            assert_eq!(out[12..], frame[12..], "l2dsr frame body unchanged");
        }
        assert_eq!(
            d.inner,
            frame[14..],
            "inner packet is the received IP packet"
        );
        assert!(
            backends.contains(&d.backend),
            "{} is not a backend",
            d.backend
        );
        let client = (i % 24) as u8 + 1;
        same_per_key(&mut per_flow, client, d.backend.clone(), "backend");
        all.push((client, d));
    }
    assert_eq!(distinct(&per_flow).len(), backends.len(), "{per_flow:?}");
    assert_eq!(r.rule(&format!("{name}-ag0")).new_flows, 24, "{}", r.text);
    all
}

/// Outer UDP source ports: one per connection, not one for all (entropy for
/// RSS and ECMP).
fn check_udp_entropy(all: &[(u8, Delivered)]) {
    let mut ports = BTreeMap::new();
    for (c, d) in all {
        same_per_key(
            &mut ports,
            *c,
            d.udp_src.expect("outer UDP"),
            "outer source port",
        );
    }
    assert!(distinct(&ports).len() >= 20, "{ports:?}");
}

#[test]
fn l2dsr_delivery_rewrites_only_the_macs_to_the_backend() {
    let macs: Vec<String> = (1..=3).map(|i| format!("02:00:00:00:01:0{i}")).collect();
    check_delivery("dsr", "10.0.0.21", Mode::L2dsr, &macs);
}

#[test]
fn ipip_delivery_wraps_the_packet_in_ipv4_protocol_4() {
    check_delivery("ipip", "10.0.0.22", Mode::Ipip, &addrs("10.1.2.", 3));
}

#[test]
fn ipip_delivery_strips_ethernet_padding_from_the_inner_packet() {
    let (c, vip) = (v4("192.0.2.1"), v4("10.0.0.22"));
    let ip_packet = ip(c, vip, TCP, &tcp(c, vip, 40000, 80, SYN, &[]));
    let mut frame = eth(&ip_packet);
    assert_eq!(frame.len(), 54);
    frame.resize(60, 0); // the Ethernet minimum
    let r = run("padding", &delivery_config(), &[frame], &[]);
    assert_eq!(r.out.len(), 1, "{}", r.text);
    let d = delivered(&r.out[0], Mode::Ipip);
    assert_eq!(d.inner, ip_packet);
}

#[test]
fn gre_delivery_without_key_carries_the_packet_after_a_four_byte_header() {
    check_delivery("gre", "10.0.0.23", Mode::Gre(None), &addrs("10.1.3.", 3));
}

#[test]
fn gre_delivery_with_key_carries_the_configured_key() {
    check_delivery(
        "grekey",
        "10.0.0.24",
        Mode::Gre(Some(0xdead_beef)),
        &addrs("10.1.4.", 3),
    );
}

#[test]
fn gue_delivery_puts_the_packet_right_after_udp_to_the_configured_port() {
    let all = check_delivery("gue", "10.0.0.25", Mode::Gue(7777), &addrs("10.1.5.", 3));
    check_udp_entropy(&all);
}

#[test]
fn geneve_delivery_sends_a_flow_cookie_option_per_connection() {
    let mode = Mode::Geneve {
        port: 6081,
        class: 0x0139,
        cookie_type: 3,
    };
    let all = check_delivery("geneve", "10.0.0.26", mode, &addrs("10.1.6.", 3));
    check_udp_entropy(&all);
    let mut cookies = BTreeMap::new();
    for (c, d) in &all {
        same_per_key(&mut cookies, *c, d.cookie.expect("cookie"), "flow cookie");
    }
    assert_eq!(
        distinct(&cookies).len(),
        24,
        "one random cookie per flow: {cookies:?}"
    );
}

#[test]
fn geneve_delivery_uses_the_configured_option_class_and_type() {
    let mode = Mode::Geneve {
        port: 6081,
        class: 0x0105,
        cookie_type: 7,
    };
    check_delivery("geneve-ids", "10.0.0.27", mode, &addrs("10.1.7.", 3));
}

// ---------------------------------------------------------------------------
// ICMP errors follow their flow (M13).

/// The first `len` bytes of a packet the backend sent from the VIP to the
/// client (as an ICMP error quotes it).
fn quoted_reply(vip: IpAddr, client: IpAddr, vport: u16, cport: u16, len: usize) -> Vec<u8> {
    let mut p = ip(
        vip,
        client,
        TCP,
        &tcp(vip, client, vport, cport, ACK | PSH, &[0x5a; 1400]),
    );
    p.truncate(len);
    p
}

#[test]
fn icmp_frag_needed_reaches_the_backend_of_the_quoted_tcp_flow() {
    let vip = v4("10.0.0.10");
    let router = v4("198.51.100.1");
    let config = [
        base(),
        rule("web", &["10.0.0.10"], "TCP", "80", "web").to_string(),
        rule("dns", &["10.0.0.10"], "UDP", "53", "dns").to_string(),
        service("web", "ipip")
            .endpoints(&addrs("10.1.1.", 8))
            .to_string(),
        service("dns", "ipip")
            .endpoints(&addrs("10.1.2.", 8))
            .to_string(),
    ]
    .concat();
    let client = |i: u8| IpAddr::from([192, 0, 2, i]);
    let port = |i: u8| 42000 + u16::from(i);
    let n = 24u8;
    let mut frames = Vec::new();
    for i in 1..=n {
        frames.push(tcp_frame(client(i), vip, port(i), 80, SYN, &[]));
        frames.push(tcp_frame(client(i), vip, port(i), 80, ACK, &[]));
    }
    let flow_packets = frames.len();
    // Fragmentation needed (type 3 code 4, next-hop MTU 1400) from a router on
    // the way back, in another order than the flows started; half quote the
    // minimum (IP header + 8 bytes), half much more.
    let errors: Vec<u8> = (1..=n).rev().collect();
    for &i in &errors {
        let len = if i % 2 == 0 { 28 } else { 548 };
        let q = quoted_reply(vip, client(i), 80, port(i), len);
        frames.push(eth(&ip(router, vip, ICMP, &icmpv4(3, 4, 1400, &q))));
    }
    // A UDP flow and a port unreachable (type 3 code 3) about its reply.
    let (dc, dport) = (client(200), 5353);
    frames.push(udp_frame(dc, vip, dport, 53, b"query"));
    let mut q = ip(vip, dc, UDP, &udp(vip, dc, 53, dport, b"answer"));
    q.truncate(28);
    frames.push(eth(&ip(router, vip, ICMP, &icmpv4(3, 3, 0, &q))));
    // An error to the VIP quoting a packet from elsewhere is not forwarded.
    let q = quoted_reply(v4("10.0.0.99"), client(1), 80, port(1), 28);
    frames.push(eth(&ip(router, vip, ICMP, &icmpv4(3, 4, 1400, &q))));

    let r = run("icmp4", &config, &frames, &[]);
    assert_eq!(r.out.len(), frames.len() - 1, "{}", r.text);
    assert_eq!(r.drops("icmp_mismatch"), 1, "{}", r.text);
    let mut flow_backend = BTreeMap::new();
    for (k, out) in r.out[..flow_packets].iter().enumerate() {
        let d = delivered(out, Mode::Ipip);
        same_per_key(&mut flow_backend, k / 2 + 1, d.backend, "backend");
    }
    assert!(distinct(&flow_backend).len() >= 6, "{flow_backend:?}");
    for (j, &i) in errors.iter().enumerate() {
        let at = flow_packets + j;
        let d = delivered(&r.out[at], Mode::Ipip);
        assert_eq!(
            d.inner,
            frames[at][14..],
            "the ICMP error is delivered unchanged"
        );
        assert_eq!(
            d.backend,
            flow_backend[&usize::from(i)],
            "frag-needed about client {i} goes to its flow's backend"
        );
    }
    let udp_flow = delivered(&r.out[flow_packets + errors.len()], Mode::Ipip);
    let unreachable = delivered(&r.out[flow_packets + errors.len() + 1], Mode::Ipip);
    assert!(addrs("10.1.2.", 8).contains(&udp_flow.backend));
    assert_eq!(
        unreachable.backend, udp_flow.backend,
        "port unreachable follows the UDP flow"
    );
    // ICMP errors are counted on the flow's rule but never create flows.
    let web = r.rule("web-ag0");
    assert_eq!(
        (web.packets, web.new_flows),
        (3 * u64::from(n), u64::from(n)),
        "{}",
        r.text
    );
    let dns = r.rule("dns-ag0");
    assert_eq!((dns.packets, dns.new_flows), (2, 1), "{}", r.text);
}

#[test]
fn icmpv6_packet_too_big_reaches_the_backend_of_the_quoted_flow() {
    let vip = v6("2001:db8:f00::10");
    let router = v6("2001:db8:ffff::1");
    let config = [
        base(),
        rule("web6", &["2001:db8:f00::10"], "TCP", "443", "web6").to_string(),
        service("web6", "ipip")
            .endpoints(&addrs("2001:db8:200::", 8))
            .to_string(),
    ]
    .concat();
    let client = |i: u16| IpAddr::from([0x2001, 0xdb8, 0xc, 0, 0, 0, 0, i]);
    let port = |i: u16| 43000 + i;
    let n = 24u16;
    let mut frames = Vec::new();
    for i in 1..=n {
        frames.push(tcp_frame(client(i), vip, port(i), 443, SYN, &[]));
        frames.push(tcp_frame(
            client(i),
            vip,
            port(i),
            443,
            ACK | PSH,
            &[0x17; 200],
        ));
    }
    let flow_packets = frames.len();
    let errors: Vec<u16> = (1..=n).rev().collect();
    for &i in &errors {
        // As much of the offending packet as fits in 1280 bytes, or less.
        let len = if i % 2 == 0 { 1280 - 48 } else { 64 };
        let q = quoted_reply(vip, client(i), 443, port(i), len);
        frames.push(eth(&ip(
            router,
            vip,
            ICMPV6,
            &icmpv6(router, vip, 2, 0, 1280, &q),
        )));
    }
    let r = run("icmp6", &config, &frames, &[]);
    assert_eq!(r.out.len(), frames.len(), "{}", r.text);
    let mut flow_backend = BTreeMap::new();
    for (k, (frame, out)) in frames.iter().zip(&r.out).enumerate() {
        let d = delivered(out, Mode::Ipip);
        assert_eq!(d.inner, frame[14..], "6in6: the inner packet unchanged");
        if k < flow_packets {
            same_per_key(&mut flow_backend, k as u16 / 2 + 1, d.backend, "backend");
        } else {
            let i = errors[k - flow_packets];
            assert_eq!(
                d.backend, flow_backend[&i],
                "packet-too-big about client {i} goes to its flow's backend"
            );
        }
    }
    assert!(distinct(&flow_backend).len() >= 6, "{flow_backend:?}");
    let web = r.rule("web6-ag0");
    assert_eq!(
        (web.packets, web.new_flows),
        (3 * u64::from(n), u64::from(n)),
        "{}",
        r.text
    );
}

/// An ICMP error may quote the first fragment of a reply the backend
/// fragmented (a large UDP answer; e.g. an ICMPv6 packet-too-big on a path
/// with a smaller MTU, or an IPv4 host unreachable). The quoted first fragment
/// carries the ports, and the client's request was not fragmented, so the
/// flow is keyed on its 5-tuple. (This test found the pipeline keying such
/// errors on the 3-tuple, as if they belonged to a fragmented flow.)
#[test]
fn icmp_error_quoting_the_first_fragment_of_a_reply_reaches_the_flows_backend() {
    let config = [
        base(),
        rule("dns6", &["2001:db8:f00::10"], "UDP", "53", "dns6").to_string(),
        rule("dns4", &["10.0.0.10"], "UDP", "53", "dns4").to_string(),
        service("dns6", "ipip")
            .endpoints(&addrs("2001:db8:200::", 8))
            .to_string(),
        service("dns4", "ipip")
            .endpoints(&addrs("10.1.1.", 8))
            .to_string(),
    ]
    .concat();
    let mut frames = Vec::new();
    for i in 1..=16u16 {
        let v6_flow = (
            v6("2001:db8:f00::10"),
            IpAddr::from([0x2001, 0xdb8, 0xc, 0, 0, 0, 0, i]),
            v6("2001:db8:ffff::1"),
        );
        let v4_flow = (
            v4("10.0.0.10"),
            IpAddr::from([192, 0, 2, i as u8]),
            v4("198.51.100.1"),
        );
        for (vip, client, router) in [v6_flow, v4_flow] {
            let port = 50000 + i;
            frames.push(udp_frame(client, vip, port, 53, b"query"));
            // The backend's answer in fragments; the error quotes the first.
            let answer = udp(vip, client, 53, port, &[0x42; 3000]);
            let first = fragments(vip, client, UDP, 77, &answer, 1232)[0][14..].to_vec();
            frames.push(if vip.is_ipv6() {
                let quoted = &first[..1232];
                eth(&ip(
                    router,
                    vip,
                    ICMPV6,
                    &icmpv6(router, vip, 2, 0, 1280, quoted),
                ))
            } else {
                eth(&ip(router, vip, ICMP, &icmpv4(3, 1, 0, &first[..28])))
            });
        }
    }
    let r = run("icmp-fragment", &config, &frames, &[]);
    assert_eq!(r.out.len(), frames.len(), "{}", r.text);
    let mut wrong = Vec::new();
    for pair in r.out.chunks(2) {
        let flow = delivered(&pair[0], Mode::Ipip);
        let error = delivered(&pair[1], Mode::Ipip);
        if flow.backend != error.backend {
            wrong.push(format!(
                "flow to {}, its error to {}",
                flow.backend, error.backend
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of 32 errors misrouted: {wrong:#?}",
        wrong.len()
    );
}

// ---------------------------------------------------------------------------
// Too big once encapsulated (M48).

/// Issue 38 item 14, offline: a 1,500-byte UDP datagram without DF through a
/// backend port of MTU 1,500 leaves as two GUE packets, each within the MTU
/// (outer DF set: they fit), of one outer flow, whose inner fragments are
/// the datagram again; the packet after it follows them. Replay's packet
/// I/O gives the second fragment its buffer.
#[test]
fn a_datagram_without_df_too_big_once_in_gue_leaves_in_fragments() {
    let base = Config::new()
        .node(node("replay", "r", "z"))
        .port(uplink(&["10.0.0.2/24"]))
        .port(
            port("inside", "net_pcap1", "backend")
                .strs("addresses", &["10.1.0.2/24"])
                .str("mac", "02:00:00:00:00:02")
                .str("gateway_mac", "02:00:00:00:00:fd")
                .set("mtu", 1500),
        )
        .build();
    let config = [
        base,
        rule("dns", &["10.0.0.10"], "UDP", "53", "dns").to_string(),
        service("dns", "gue")
            .endpoints(&addrs("10.1.1.", 4))
            .to_string(),
    ]
    .concat();
    let datagram = |len: usize| {
        let payload: Vec<u8> = (0..len - 28).map(|i| i as u8).collect();
        testkit::packet::Packet::udp(v4("192.0.2.7"), v4("10.0.0.10"), 40000, 53)
            .payload(&payload)
            .ident(0x1234)
            .dont_frag(false)
            .macs(ROUTER_MAC, LB_MAC)
            .frame()
    };
    let (big, small) = (datagram(1500), datagram(100));
    let r = run("fragmented", &config, &[big.clone(), small.clone()], &[]);
    assert_eq!(
        r.out.len(),
        3,
        "two fragments and the small one:\n{}",
        r.text
    );
    let frags: Vec<Delivered> = r.out[..2]
        .iter()
        .map(|f| {
            assert!(f.len() <= 14 + 1500, "{} bytes: over the MTU", f.len());
            delivered(f, Mode::Gue(6080))
        })
        .collect();
    assert_eq!(frags[0].backend, frags[1].backend, "one backend");
    assert_eq!(frags[0].udp_src, frags[1].udp_src, "one outer flow");
    // The inner fragments: same identification, offsets 0 and 1,448, MF on
    // the first; their payloads are the datagram's.
    let (a, b) = (&frags[0].inner, &frags[1].inner);
    assert_eq!((be16(a, 4), be16(b, 4)), (0x1234, 0x1234));
    assert_eq!((be16(a, 6), be16(b, 6)), (0x2000, 1448 / 8));
    assert_eq!(
        (usize::from(be16(a, 2)), usize::from(be16(b, 2))),
        (a.len(), b.len())
    );
    assert_eq!(csum(0, &a[..20]), 0);
    assert_eq!(csum(0, &b[..20]), 0);
    let mut payload = a[20..].to_vec();
    payload.extend_from_slice(&b[20..]);
    assert_eq!(payload, big[14 + 20..], "the datagram, reassembled");
    assert_eq!(delivered(&r.out[2], Mode::Gue(6080)).inner, small[14..]);
}

// ---------------------------------------------------------------------------
// Fragments (M13).

#[test]
fn fragments_of_a_datagram_share_a_backend_in_any_order() {
    // A fragment matches only an all-port rule (M13): UDP on every port.
    let config = [
        base(),
        rule("video", &["10.0.0.10"], "UDP", "all", "video").to_string(),
        rule("web", &["10.0.0.10"], "TCP", "80", "web").to_string(),
        rule("video6", &["2001:db8:f00::10"], "UDP", "all", "video6").to_string(),
        service("video", "ipip")
            .endpoints(&addrs("10.1.1.", 8))
            .to_string(),
        service("web", "ipip")
            .endpoints(&addrs("10.1.2.", 8))
            .to_string(),
        service("video6", "ipip")
            .endpoints(&addrs("2001:db8:200::", 8))
            .to_string(),
    ]
    .concat();
    let n = 30u16;
    // Each datagram: 2,500 bytes of payload in fragments of 1,000, 1,000 and
    // 508 bytes; the UDP header (with the checksum over the whole datagram)
    // is only in the first.
    let mut datagrams: Vec<(String, Vec<Vec<u8>>)> = Vec::new();
    for i in 1..=n {
        for (family, src, vip) in [
            ("v4", IpAddr::from([192, 0, 2, i as u8]), v4("10.0.0.10")),
            (
                "v6",
                IpAddr::from([0x2001, 0xdb8, 0xc, 0, 0, 0, 0, i]),
                v6("2001:db8:f00::10"),
            ),
        ] {
            let payload: Vec<u8> = (0..2500u32).map(|b| (b * u32::from(i)) as u8).collect();
            let l4 = udp(src, vip, 30000 + i, 5000, &payload);
            let ident = 0x100 + u32::from(i);
            let mut frags = fragments(src, vip, UDP, ident, &l4, 1000);
            assert_eq!(frags.len(), 3);
            match i % 4 {
                0 => {}                    // in order
                1 => frags.reverse(),      // last fragment first
                2 => frags.swap(0, 1),     // a later fragment first
                _ => frags.rotate_left(1), // first fragment last
            }
            datagrams.push((format!("{family} client {i}"), frags));
        }
    }
    // Interleave the datagrams' fragments.
    let mut frames = Vec::new();
    let mut owner = Vec::new();
    for k in 0..3 {
        for (d, (_, frags)) in datagrams.iter().enumerate() {
            frames.push(frags[k].clone());
            owner.push(d);
        }
    }
    let r = run("fragments", &config, &frames, &[]);
    assert_eq!(r.out.len(), frames.len(), "{}", r.text);
    let mut backend_of = BTreeMap::new();
    for ((frame, out), &d) in frames.iter().zip(&r.out).zip(&owner) {
        let got = delivered(out, Mode::Ipip);
        assert_eq!(got.inner, frame[14..], "fragment delivered unchanged");
        same_per_key(
            &mut backend_of,
            datagrams[d].0.clone(),
            got.backend,
            "backend",
        );
    }
    for family in ["v4", "v6"] {
        let used: BTreeSet<&String> = backend_of
            .iter()
            .filter(|(k, _)| k.starts_with(family))
            .map(|(_, b)| b)
            .collect();
        assert!(
            used.len() >= 5,
            "{family} datagrams spread over backends: {used:?}"
        );
    }
    // Fragments hash on the 3-tuple: one flow per client and family.
    for child in ["video-ag0", "video6-ag0"] {
        let c = r.rule(child);
        assert_eq!(
            (c.packets, c.new_flows),
            (3 * u64::from(n), u64::from(n)),
            "{}",
            r.text
        );
    }
    assert_eq!(r.rule("web-ag0"), RuleCount::default());
    // With `UDP 5000` rules instead, no fragment can prove its port: every
    // one is dropped and counted, none reaches a backend.
    let config = config.replace("ports = \"all\"", "ports = \"5000\"");
    let d = dir("fragments-port-rule");
    let (cfg, input, output) = (d.join("c.toml"), d.join("in.pcap"), d.join("out.pcap"));
    std::fs::write(&cfg, &config).expect("config");
    write_pcap(&input, &frames);
    let out = replay(&cfg, &input, &output, &[]);
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    assert!(read_pcap(&output).is_empty(), "{text}");
    assert!(
        text.contains(&format!("drop fragment_no_rule: {}", frames.len())),
        "{text}"
    );
}

// ---------------------------------------------------------------------------
// IPv6 (M1, M8).

#[test]
fn ipv6_vips_are_delivered_6in6_and_over_gue_and_ipv4_vips_4in6() {
    let config = [
        base(),
        rule("tls6", &["2001:db8:f00::10"], "TCP", "443", "tls6").to_string(),
        rule("quic6", &["2001:db8:f00::20"], "UDP", "443", "quic6").to_string(),
        rule("web4", &["10.0.0.40"], "TCP", "80", "web4").to_string(),
        rule("rest6", &["2001:db8:f00::10"], "L3_DEFAULT", "all", "quic6").to_string(),
        service("tls6", "ipip")
            .endpoints(&addrs("2001:db8:200::", 4))
            .to_string(),
        service("quic6", "gue")
            .endpoints(&addrs("2001:db8:300::", 4))
            .to_string(),
        service("web4", "ipip")
            .endpoints(&addrs("2001:db8:400::", 4))
            .to_string(),
    ]
    .concat();
    let c6 = |i: u16| IpAddr::from([0x2001, 0xdb8, 0xc, 0, 0, 0, 0, i]);
    let n = 16u16;
    let mut cases: Vec<(Vec<u8>, &str, u16)> = Vec::new();
    for step in 0..2 {
        for i in 1..=n {
            let flags = if step == 0 { SYN } else { ACK };
            let tls = tcp_frame(c6(i), v6("2001:db8:f00::10"), 44000 + i, 443, flags, &[]);
            cases.push((tls, "tls6", i));
            let quic = udp_frame(c6(i), v6("2001:db8:f00::20"), 45000 + i, 443, &[0xc0; 1200]);
            cases.push((quic, "quic6", i));
            let c4 = IpAddr::from([192, 0, 2, i as u8]);
            cases.push((
                tcp_frame(c4, v4("10.0.0.40"), 46000 + i, 80, flags, &[]),
                "web4",
                i,
            ));
            // ICMPv6 to the IPv6 VIP: its L3_DEFAULT rule, which shares the GUE service.
            let echo = echo_frame(c6(i), v6("2001:db8:f00::10"), i, step);
            cases.push((echo, "rest6", i));
        }
    }
    let frames: Vec<Vec<u8>> = cases.iter().map(|(f, ..)| f.clone()).collect();
    let r = run("ipv6", &config, &frames, &[]);
    assert_eq!(r.out.len(), frames.len(), "{}", r.text);
    let mut per_flow = BTreeMap::new();
    let mut labels = BTreeMap::new();
    let mut ports = BTreeMap::new();
    for ((frame, svc, i), out) in cases.iter().zip(&r.out) {
        assert_eq!(be16(out, 12), 0x86dd, "{svc}: outer IPv6");
        let (mode, prefix, next_header) = match *svc {
            "tls6" => (Mode::Ipip, "2001:db8:200::", 41),
            "quic6" | "rest6" => (Mode::Gue(6080), "2001:db8:300::", 17),
            _ => (Mode::Ipip, "2001:db8:400::", 4),
        };
        assert_eq!(out[14 + 6], next_header, "{svc}: outer next header");
        let d = delivered(out, mode);
        assert_eq!(d.inner, frame[14..], "{svc}: inner packet unchanged");
        assert!(
            addrs(prefix, 4).contains(&d.backend),
            "{svc}: {}",
            d.backend
        );
        same_per_key(&mut per_flow, (*svc, *i), d.backend.clone(), "backend");
        same_per_key(&mut labels, (*svc, *i), d.flow_label.unwrap(), "flow label");
        if let Some(p) = d.udp_src {
            same_per_key(&mut ports, (*svc, *i), p, "outer UDP source port");
        }
    }
    for svc in ["tls6", "quic6", "web4", "rest6"] {
        let used: BTreeSet<&String> = per_flow
            .iter()
            .filter(|((s, _), _)| *s == svc)
            .map(|(_, b)| b)
            .collect();
        assert!(used.len() >= 3, "{svc}: {used:?}");
        assert_eq!(
            r.rule(&format!("{svc}-ag0")).new_flows,
            u64::from(n),
            "{}",
            r.text
        );
    }
    assert!(
        distinct(&labels).len() >= 56,
        "flow labels carry flow entropy"
    );
    assert!(
        distinct(&ports).len() >= 28,
        "outer UDP source ports carry flow entropy"
    );
}

// ---------------------------------------------------------------------------
// Drops (M3, M6, M14).

fn drops_config() -> String {
    [
        base(),
        rule("web", &["10.0.0.10"], "TCP", "80", "web").to_string(),
        rule("dns", &["10.0.0.20"], "UDP", "53", "dns").to_string(),
        rule("web6", &["2001:db8:f00::10"], "TCP", "80", "web6").to_string(),
        service("web", "ipip")
            .endpoints(&addrs("10.1.1.", 3))
            .to_string(),
        service("dns", "ipip")
            .endpoints(&addrs("10.1.2.", 2))
            .to_string(),
        service("web6", "ipip")
            .endpoints(&addrs("2001:db8:200::", 2))
            .to_string(),
    ]
    .concat()
}

#[test]
fn unmatched_vip_traffic_and_foreign_destinations_are_dropped_and_counted() {
    let c = v4("192.0.2.1");
    let c6 = v6("2001:db8:c::1");
    let (web, dns, web6) = (v4("10.0.0.10"), v4("10.0.0.20"), v6("2001:db8:f00::10"));
    let good = [
        tcp_frame(c, web, 40000, 80, SYN, &[]),
        udp_frame(c, dns, 40000, 53, b"query"),
        tcp_frame(c6, web6, 40000, 80, SYN, &[]),
    ];
    let no_rule = [
        tcp_frame(c, web, 40000, 81, SYN, &[]),
        udp_frame(c, web, 40000, 80, b"udp to a tcp rule"),
        eth(&ip(c, web, ESP, &[0, 0, 0, 1, 0, 0, 0, 1])),
        tcp_frame(c, dns, 40000, 53, SYN, &[]),
        tcp_frame(c6, web6, 40000, 443, SYN, &[]),
    ];
    // Echo requests to a VIP no rule takes ICMP for: answered by the
    // balancer itself (`answer_ping`, on by default).
    let answered = [echo_frame(c, web, 1, 1), echo_frame(c6, web6, 1, 1)];
    let not_ours = [
        tcp_frame(c, v4("10.0.0.99"), 40000, 80, SYN, &[]),
        udp_frame(c, v4("203.0.113.7"), 40000, 53, b"query"),
        tcp_frame(c6, v6("2001:db8:f00::99"), 40000, 80, SYN, &[]),
    ];
    // The balancer's own address goes to the host, not to a backend.
    let own = tcp_frame(c, v4("10.0.0.2"), 40000, 22, SYN, &[]);
    let mut frames = vec![good[0].clone()];
    for (k, f) in no_rule.iter().chain(&not_ours).enumerate() {
        frames.push(f.clone());
        if k == 3 {
            frames.push(good[1].clone());
        }
    }
    frames.push(own);
    frames.extend(answered.iter().cloned());
    frames.push(good[2].clone());

    let r = run("drops", &drops_config(), &frames, &[]);
    let is_echo_reply = |o: &&Vec<u8>| {
        matches!(
            (o.get(12..14), o.get(23), o.get(34), o.get(20), o.get(54)),
            (Some([0x08, 0x00]), Some(1), Some(0), _, _)
                | (Some([0x86, 0xdd]), _, _, Some(58), Some(129))
        )
    };
    let (replies, out): (Vec<&Vec<u8>>, Vec<&Vec<u8>>) = r.out.iter().partition(is_echo_reply);
    assert_eq!(replies.len(), answered.len(), "{}", r.text);
    assert!(r.text.contains("echo replies 2"), "{}", r.text);
    assert_eq!(out.len(), good.len(), "only the good packets: {}", r.text);
    for (g, o) in good.iter().zip(out) {
        assert_eq!(delivered(o, Mode::Ipip).inner, g[14..]);
    }
    assert_eq!(r.drops("no_rule"), no_rule.len() as u64, "{}", r.text);
    assert_eq!(r.drops("not_ours"), not_ours.len() as u64, "{}", r.text);
    assert_eq!(r.drops("no_backend"), 0, "{}", r.text);
    assert!(r.text.contains("to host 1"), "{}", r.text);
    for child in ["web-ag0", "dns-ag0", "web6-ag0"] {
        let rc = r.rule(child);
        assert_eq!(
            (rc.packets, rc.new_flows, rc.drops),
            (1, 1, 0),
            "{child}: {}",
            r.text
        );
    }
}

#[test]
fn a_rule_without_healthy_backends_drops_and_counts_per_rule() {
    let c = |i: u8| IpAddr::from([192, 0, 2, i]);
    let (web, dns) = (v4("10.0.0.10"), v4("10.0.0.20"));
    let mut frames: Vec<Vec<u8>> = (1..=5)
        .map(|i| tcp_frame(c(i), web, 40000, 80, SYN, &[]))
        .collect();
    frames.push(tcp_frame(c(1), web, 40000, 80, ACK, &[]));
    let web_bytes: u64 = frames.iter().map(|f| f.len() as u64).sum();
    let query = udp_frame(c(1), dns, 40000, 53, b"query");
    frames.push(query.clone());
    let down = [
        "--down", "10.1.1.1", "--down", "10.1.1.2", "--down", "10.1.1.3",
    ];
    let r = run("nobackend", &drops_config(), &frames, &down);
    assert_eq!(
        r.out.len(),
        1,
        "only the other service's packet: {}",
        r.text
    );
    assert_eq!(delivered(&r.out[0], Mode::Ipip).inner, query[14..]);
    assert_eq!(r.drops("no_backend"), 6, "{}", r.text);
    assert_eq!(
        r.rule("web-ag0"),
        RuleCount {
            packets: 6,
            bytes: web_bytes,
            new_flows: 0,
            drops: 6,
        },
        "{}",
        r.text
    );
    assert_eq!(r.rule("dns-ag0").drops, 0);

    // One backend left: everything goes to it.
    let r = run("onebackend", &drops_config(), &frames, &down[..4]);
    assert_eq!(r.out.len(), frames.len(), "{}", r.text);
    for (frame, out) in frames.iter().zip(&r.out).take(6) {
        let d = delivered(out, Mode::Ipip);
        assert_eq!(d.backend, "10.1.1.3");
        assert_eq!(d.inner, frame[14..]);
    }
}

/// M55 in replay: what the edge does not take is dropped by reason (the
/// capture's frames are addressed to the uplink's configured `mac`), and
/// the summary says which MAC frames to another were measured against.
#[test]
fn replay_drops_what_the_edge_does_not_take_by_reason() {
    let client = IpAddr::from([192, 0, 2, 1]);
    let vip = IpAddr::from([10, 0, 0, 10]);
    let ok = |sport: u16| {
        testkit::packet::Packet::tcp(client, vip, sport, 80, SYN).macs(ROUTER_MAC, LB_MAC)
    };
    let mut bad_sum = ok(3).frame();
    bad_sum[24] ^= 0x5a;
    let frames = vec![
        ok(1).frame(),
        ok(2).macs(ROUTER_MAC, [2, 0, 0, 0, 0, 0x55]).frame(),
        bad_sum,
        ok(4).vlan(0x8100, 3).frame(),
        ok(5).ttl(0).frame(),
        ok(6).ip_options(&[0x83, 7, 4, 10, 0, 0, 10, 0]).frame(),
        tcp_frame(IpAddr::from([127, 0, 0, 1]), vip, 7, 80, SYN, &[]),
        tcp_frame(vip, vip, 8, 80, SYN, &[]),
    ];
    let r = run("edge", &config().build(), &frames, &[]);
    assert_eq!(r.out.len(), 1, "{}", r.text);
    for reason in [
        "l2_foreign_dst",
        "ipv4_bad_checksum",
        "vlan_untagged_port",
        "ttl_zero",
        "ip_source_route",
    ] {
        assert_eq!(r.drops(reason), 1, "{reason}: {}", r.text);
    }
    assert_eq!(r.drops("martian_source"), 2, "{}", r.text);
    assert!(
        r.text
            .contains("another MAC than the uplink's, 02:00:00:00:00:01"),
        "{}",
        r.text
    );
}

#[test]
fn replay_forwards_vip_traffic_deterministically_and_counts_the_rest() {
    let d = dir("forwards");
    let cfg = d.join("c.toml");
    std::fs::write(&cfg, config().build()).expect("config");
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
    assert!(
        r2.status.success(),
        "{}",
        String::from_utf8_lossy(&r2.stderr)
    );
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

/// Writes `(second, frame)` records to a pcap, each at that second of the
/// capture (in order; frames of one second 1 ms apart).
fn write_timed_pcap(path: &Path, frames: &[(u64, Vec<u8>)]) {
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

/// `--down ADDRESS@FROM-UNTIL` and `@FROM`: the endpoint fails its health
/// check for those seconds of the capture only. A backend that joins takes
/// new connections and none of the existing ones; one that fails keeps its
/// TCP connections (persistence, M11) and takes no new ones.
#[test]
fn replay_down_windows_change_health_mid_capture() {
    let d = dir("down-window");
    let cfg = d.join("c.toml");
    std::fs::write(&cfg, config().build()).expect("config");
    let vip = [10, 0, 0, 10];
    let conn = |set: u8, i: u16, flags: u8| {
        tcp_frame(
            IpAddr::from([192, 0, set, (i % 250) as u8 + 1]),
            IpAddr::from(vip),
            20000 + i,
            80,
            flags,
            &[],
        )
    };
    // Second 0: connections A open (10.0.1.13 down until second 2).
    // Second 2: A's ACKs; connections B open. Second 3 (10.0.1.12 down from
    // then on): A's ACKs again; connections C open.
    let mut frames = Vec::new();
    frames.extend((0..60).map(|i| (0, conn(1, i, SYN))));
    frames.extend((0..60).map(|i| (2, conn(1, i, ACK))));
    frames.extend((0..60).map(|i| (2, conn(2, i, SYN))));
    frames.extend((0..60).map(|i| (3, conn(1, i, ACK))));
    frames.extend((0..60).map(|i| (3, conn(3, i, SYN))));
    let input = d.join("in.pcap");
    write_timed_pcap(&input, &frames);
    let out = d.join("out.pcap");
    let r = replay(
        &cfg,
        &input,
        &out,
        &["--down", "10.0.1.13@0-2", "--down", "10.0.1.12@3"],
    );
    let text = String::from_utf8_lossy(&r.stdout).to_string() + &String::from_utf8_lossy(&r.stderr);
    assert!(r.status.success(), "{text}");
    assert!(
        text.contains("health: second 2: 10.0.1.13 up")
            && text.contains("health: second 3: 10.0.1.12 down"),
        "{text}"
    );
    let got = read_pcap(&out);
    assert_eq!(got.len(), frames.len(), "{text}");
    let backend = |f: &Vec<u8>| {
        parse_tunnel(f, &DecapConfig::default())
            .expect("an IPIP frame")
            .dst_ip
            .to_string()
    };
    let of =
        |range: std::ops::Range<usize>| -> Vec<String> { got[range].iter().map(backend).collect() };
    let (a_syn, a_ack2, b_syn, a_ack3, c_syn) = (
        of(0..60),
        of(60..120),
        of(120..180),
        of(180..240),
        of(240..300),
    );
    assert!(!a_syn.contains(&"10.0.1.13".to_string()), "{a_syn:?}");
    assert_eq!(a_ack2, a_syn, "A stays where it was when 10.0.1.13 joins");
    assert!(b_syn.contains(&"10.0.1.13".to_string()), "{b_syn:?}");
    assert_eq!(a_ack3, a_syn, "A's TCP connections stay on 10.0.1.12");
    assert!(a_syn.contains(&"10.0.1.12".to_string()), "{a_syn:?}");
    assert!(!c_syn.contains(&"10.0.1.12".to_string()), "{c_syn:?}");

    // Windows that cannot be read are refused.
    for bad in ["10.0.1.13@5-2", "10.0.1.13@x", "10.0.1.13@1-", "nope@1"] {
        let r = replay(&cfg, &input, &out, &["--down", bad]);
        let err = String::from_utf8_lossy(&r.stderr);
        assert_eq!(r.status.code(), Some(2), "{bad}: {err}");
        assert!(err.contains("--down"), "{bad}: {err}");
    }
    let _ = std::fs::remove_dir_all(&d);
}

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

/// Two zones of region "r", two endpoints each; clients from 192.0.1.0/24
/// are in zone "za", from 192.0.2.0/24 in "zb"; zonal affinity with
/// `spill` as the spill ratio.
fn zonal_config(spill: &str) -> String {
    Config::new()
        .node(node("replay", "r", "za"))
        .port(uplink(&["10.0.0.2/24"]))
        .rule(rule("web", &["10.0.0.10"], "TCP", "80", "web"))
        .service(
            service("web", "ipip")
                .child(
                    group("a", "r", "za")
                        .set("endpoints", endpoint_list(&["10.0.1.11", "10.0.1.12"])),
                )
                .child(
                    group("b", "r", "zb")
                        .set("endpoints", endpoint_list(&["10.0.1.21", "10.0.1.22"])),
                )
                .child(
                    Table::new("backend_services.locality")
                        .set("zonal_affinity", true)
                        .set("zonal_spill_ratio", spill),
                ),
        )
        .raw(
            "[[client_zones]]\nzone = \"za\"\nprefixes = [\"192.0.1.0/24\"]\n\n\
             [[client_zones]]\nzone = \"zb\"\nprefixes = [\"192.0.2.0/24\"]\n",
        )
        .build()
}

/// SYNs of 100 connections from clients of zone `set` (192.0.`set`.x).
fn zone_syns(set: u8) -> Vec<Vec<u8>> {
    (0..100u16)
        .map(|i| {
            tcp_frame(
                IpAddr::from([192, 0, set, (i % 250) as u8 + 1]),
                IpAddr::from([10, 0, 0, 10]),
                30000 + i,
                80,
                SYN,
                &[],
            )
        })
        .collect()
}

/// The backend (outer destination) of each IPIP frame.
fn backends_of(frames: &[Vec<u8>]) -> Vec<String> {
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

/// Zonal affinity (M27) as the daemon plans it: with spill ratio 0 every
/// client stays in its own zone; a replay that built its snapshots without
/// the management core's plans spread both zones over all four endpoints.
#[test]
fn replay_keeps_clients_in_their_zone_under_zonal_affinity() {
    // Connections that left their zone, of 200, by spill ratio: none at
    // 0; at 1 the region is one pool (about half leave: the other zone
    // is half of it); at 0.5 half as many as at 1 (the spilled share is
    // spread over the region, own zone included).
    for (spill, fewest, most) in [("0.0", 0, 0), ("0.5", 25, 75), ("1.0", 75, 125)] {
        let mut frames = zone_syns(1);
        frames.extend(zone_syns(2));
        let r = run(
            &format!("zonal-{spill}"),
            &zonal_config(spill),
            &frames,
            &[],
        );
        let got = backends_of(&r.out);
        assert_eq!(got.len(), 200, "{}", r.text);
        let (a, b) = got.split_at(100);
        let left = a.iter().filter(|x| !x.starts_with("10.0.1.1")).count()
            + b.iter().filter(|x| !x.starts_with("10.0.1.2")).count();
        assert!(
            (fewest..=most).contains(&left),
            "spill ratio {spill}: {left} of 200 left their zone\n{}",
            r.text
        );
        let a: BTreeSet<&str> = a.iter().map(String::as_str).collect();
        let b: BTreeSet<&str> = b.iter().map(String::as_str).collect();
        if most == 0 {
            assert_eq!(a, BTreeSet::from(["10.0.1.11", "10.0.1.12"]), "{}", r.text);
            assert_eq!(b, BTreeSet::from(["10.0.1.21", "10.0.1.22"]), "{}", r.text);
        } else {
            assert_eq!(a.len(), 4, "spill ratio {spill}: {a:?}");
            assert_eq!(b.len(), 4, "spill ratio {spill}: {b:?}");
        }
    }
}

/// Replays `frames` (each at its second of the capture) with `config` and
/// `extra` arguments, in which `{dir}` is the test's directory (for files
/// written there from `files`); what came out and what it said.
fn run_timed(
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
fn conn(set: u8, i: u16, flags: u8) -> Vec<u8> {
    tcp_frame(
        IpAddr::from([192, 0, set, (i % 250) as u8 + 1]),
        IpAddr::from([10, 0, 0, 10]),
        20000 + i,
        80,
        flags,
        &[],
    )
}

/// The node's region "r1" (10.0.1.11-12) and a second region "r2"
/// (10.0.2.11-12) of one service.
fn two_region_config() -> String {
    two_region_config_with(&[])
}

/// [`two_region_config`], the service's settings `set` (raw TOML values).
fn two_region_config_with(set: &[(&str, &str)]) -> String {
    let svc = set
        .iter()
        .fold(service("web", "ipip"), |s, (k, v)| s.set(k, v));
    Config::new()
        .node(node("replay", "r1", "z1"))
        .port(uplink(&["10.0.0.2/24"]))
        .rule(rule("web", &["10.0.0.10"], "TCP", "80", "web"))
        .service(
            svc.child(
                group("near", "r1", "z1")
                    .set("endpoints", endpoint_list(&["10.0.1.11", "10.0.1.12"])),
            )
            .child(
                group("far", "r2", "z2")
                    .set("endpoints", endpoint_list(&["10.0.2.11", "10.0.2.12"])),
            ),
        )
        .build()
}

/// Region preference and failover at given times (M26): new connections
/// go to the node's own region while it is healthy, to the other one from
/// when both of its endpoints fail (`--at 2s --down`), and back from when
/// they recover (`--at 5s --up`); connections keep their backend through
/// it all. A replay without the core's plans spread them over both regions.
#[test]
fn replay_fails_over_to_the_next_region_at_the_given_time() {
    let mut frames = Vec::new();
    frames.extend((0..50).map(|i| (0, conn(1, i, SYN))));
    frames.extend((0..50).map(|i| (3, conn(1, i, ACK))));
    frames.extend((0..50).map(|i| (3, conn(2, i, SYN))));
    frames.extend((0..50).map(|i| (6, conn(1, i, ACK))));
    frames.extend((0..50).map(|i| (6, conn(2, i, ACK))));
    frames.extend((0..50).map(|i| (6, conn(3, i, SYN))));
    let r = run_timed(
        "failover",
        &two_region_config(),
        &[],
        &frames,
        &[
            "--at",
            "2s",
            "--down",
            "10.0.1.11",
            "--down",
            "10.0.1.12",
            "--at",
            "5s",
            "--up",
            "10.0.1.11",
            "--up",
            "10.0.1.12",
        ],
    );
    let got = backends_of(&r.out);
    assert_eq!(got.len(), frames.len(), "{}", r.text);
    let part = |k: usize| -> Vec<String> { got[k * 50..(k + 1) * 50].to_vec() };
    let in_region = |v: &[String], prefix: &str| v.iter().all(|b| b.starts_with(prefix));
    let (a_syn, a_ack3, b_syn, a_ack6, b_ack6, c_syn) =
        (part(0), part(1), part(2), part(3), part(4), part(5));
    assert!(in_region(&a_syn, "10.0.1."), "{a_syn:?}\n{}", r.text);
    assert!(in_region(&b_syn, "10.0.2."), "{b_syn:?}\n{}", r.text);
    assert!(in_region(&c_syn, "10.0.1."), "{c_syn:?}\n{}", r.text);
    assert_eq!(a_ack3, a_syn, "A keeps its backends while they fail");
    assert_eq!(a_ack6, a_syn, "A keeps its backends after they recover");
    assert_eq!(b_ack6, b_syn, "B stays in the far region");
    assert!(
        r.text.contains("health: second 2: 10.0.1.11 down")
            && r.text.contains("health: second 5: 10.0.1.12 up"),
        "{}",
        r.text
    );
}

/// A reload mid-capture (`--at 2s --reload FILE`), as `spillway reload`
/// does it: connections open before it keep their backends, new ones use
/// the new endpoints; a file that does not validate is refused at its
/// time and changes nothing.
#[test]
fn replay_reloads_mid_capture_and_keeps_flows() {
    let before = config().build();
    let after = Config::new()
        .node(node("replay", "r", "z"))
        .port(uplink(&["10.0.0.2/24"]))
        .rule(rule("web", &["10.0.0.10"], "TCP", "80", "web"))
        .service(service("web", "ipip").child(group("a", "r", "z").set(
            "endpoints",
            endpoint_list(&["10.0.1.11", "10.0.1.21", "10.0.1.22", "10.0.1.23"]),
        )))
        .build();
    let mut frames = Vec::new();
    frames.extend((0..60).map(|i| (0, conn(1, i, SYN))));
    frames.extend((0..60).map(|i| (1, conn(1, i, ACK))));
    frames.extend((0..60).map(|i| (3, conn(1, i, ACK))));
    frames.extend((0..60).map(|i| (3, conn(2, i, SYN))));
    frames.extend((0..60).map(|i| (5, conn(1, i, ACK))));
    frames.extend((0..60).map(|i| (5, conn(2, i, ACK))));
    let r = run_timed(
        "reload",
        &before,
        &[("after.toml", &after), ("broken.toml", "[node\nname = 1")],
        &frames,
        &[
            "--at",
            "1500ms",
            "--reload",
            "{dir}/broken.toml",
            "--at",
            "2s",
            "--reload",
            "{dir}/after.toml",
        ],
    );
    let got = backends_of(&r.out);
    assert_eq!(got.len(), frames.len(), "{}", r.text);
    let part = |k: usize| -> Vec<String> { got[k * 60..(k + 1) * 60].to_vec() };
    let old: BTreeSet<String> = ["10.0.1.11", "10.0.1.12", "10.0.1.13"]
        .map(String::from)
        .into();
    let new: BTreeSet<String> = ["10.0.1.11", "10.0.1.21", "10.0.1.22", "10.0.1.23"]
        .map(String::from)
        .into();
    let (a_syn, a1, a3, b_syn, a5, b5) = (part(0), part(1), part(2), part(3), part(4), part(5));
    assert!(a_syn.iter().all(|b| old.contains(b)), "{a_syn:?}");
    assert_eq!(a1, a_syn, "the refused reload changed nothing");
    assert_eq!(a3, a_syn, "A keeps its backends across the reload");
    assert_eq!(a5, a_syn);
    assert!(b_syn.iter().all(|b| new.contains(b)), "{b_syn:?}");
    assert!(
        b_syn.iter().any(|b| b.starts_with("10.0.1.2")),
        "new connections reach the new endpoints: {b_syn:?}"
    );
    assert_eq!(b5, b_syn);
    assert!(
        r.text.contains("1.500 s: reload") && r.text.contains("reload rejected"),
        "{}",
        r.text
    );
    assert!(
        r.text.contains("2.000 s: reload") && r.text.contains("is live"),
        "{}",
        r.text
    );
}

/// Spillover under RATE balancing (M24, M25) from the rate the replayed
/// traffic itself makes: 200 packets a second on r1's two endpoints
/// (capacity 20 pps each) spill part of the new connections to r2, while
/// the established ones stay; without that load nothing spills.
#[test]
fn replay_spills_over_from_the_rate_of_the_replayed_traffic() {
    let cfg = two_region_config_with(&[
        ("balancing_mode", "\"RATE\""),
        ("max_rate_per_endpoint", "20"),
    ]);
    for (loaded, name) in [(true, "rate-high"), (false, "rate-low")] {
        let mut frames: Vec<(u64, Vec<u8>)> = (0..50).map(|i| (0, conn(1, i, SYN))).collect();
        if loaded {
            for sec in 1..=6 {
                for _ in 0..4 {
                    frames.extend((0..50).map(|i| (sec, conn(1, i, ACK))));
                }
            }
        }
        let first_new = frames.len();
        frames.extend((0..200).map(|i| (7, conn(2, i, SYN))));
        let r = run_timed(name, &cfg, &[], &frames, &[]);
        let got = backends_of(&r.out);
        assert_eq!(got.len(), frames.len(), "{}", r.text);
        let established: BTreeSet<&String> = got[..50].iter().collect();
        assert!(
            established.iter().all(|b| b.starts_with("10.0.1.")),
            "{established:?}"
        );
        for (k, b) in got[50..first_new].iter().enumerate() {
            assert_eq!(b, &got[k % 50], "established connections stay");
        }
        let spilled = got[first_new..]
            .iter()
            .filter(|b| b.starts_with("10.0.2."))
            .count();
        if loaded {
            assert!(
                spilled > 20 && spilled < 200,
                "{spilled} of 200 new connections spilled\n{}",
                r.text
            );
        } else {
            assert_eq!(spilled, 0, "{}", r.text);
        }
    }
}

/// A service of `remote_rule` groups (M21): the node's region's peer
/// (rule "web" at VIP 203.0.113.10) takes new connections while its rule
/// is HEALTHY; from when `--remote web=UNHEALTHY` says it fails, the next
/// region's peer (203.0.113.20) does; connections stay where they were.
#[test]
fn replay_follows_scripted_remote_rule_verdicts() {
    let remote = |url: &str, rule: &str, vip: &str| {
        format!("{{ status_url = \"{url}\", rule = \"{rule}\", vip = \"{vip}\" }}")
    };
    let cfg = Config::new()
        .node(node("replay", "r1", "z1"))
        .port(uplink(&["10.0.0.2/24"]))
        .rule(rule("web", &["10.0.0.10"], "TCP", "80", "web"))
        .service(
            service("web", "ipip")
                .child(group("near", "r1", "z1").str("kind", "remote_rule").set(
                    "remote",
                    remote("http://192.0.2.50:9469/status", "web", "203.0.113.10"),
                ))
                .child(group("far", "r2", "z2").str("kind", "remote_rule").set(
                    "remote",
                    remote("http://192.0.2.60:9469/status", "web-eu", "203.0.113.20"),
                )),
        )
        .build();
    let mut frames = Vec::new();
    frames.extend((0..40).map(|i| (0, conn(1, i, SYN))));
    frames.extend((0..40).map(|i| (3, conn(1, i, ACK))));
    frames.extend((0..40).map(|i| (3, conn(2, i, SYN))));
    let r = run_timed(
        "remote",
        &cfg,
        &[],
        &frames,
        &["--at", "2s", "--remote", "web=UNHEALTHY"],
    );
    let got = backends_of(&r.out);
    assert_eq!(got.len(), frames.len(), "{}", r.text);
    let all = |v: &[String], vip: &str| v.iter().all(|b| b == vip);
    assert!(
        all(&got[..40], "203.0.113.10"),
        "{:?}\n{}",
        &got[..40],
        r.text
    );
    assert_eq!(got[40..80], got[..40], "connections stay with their peer");
    assert!(
        all(&got[80..], "203.0.113.20"),
        "{:?}\n{}",
        &got[80..],
        r.text
    );
    assert!(r.text.contains("remote rule web UNHEALTHY"), "{}", r.text);
}

/// SplitMix64: a seeded generator for the random cases below.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

/// A random configuration: 1-3 regions of 1-2 zones, a group per zone of
/// 1-3 endpoints with random weights and capacity scalers, RATE or
/// UTILIZATION balancing, zonal affinity or not; and its endpoints.
fn random_config(rng: &mut Rng) -> (String, Vec<String>) {
    // Small Maglev tables: a debug build makes them quickly.
    let mut svc = service("web", "ipip")
        .str("connection_draining_timeout", "2s")
        .set("maglev_table_size", 1021);
    if rng.below(2) == 0 {
        svc = svc
            .str("balancing_mode", "RATE")
            .set("max_rate_per_endpoint", rng.pick(&[5, 20, 1000]));
    }
    let zonal = rng.below(2) == 0;
    if zonal {
        svc = svc.child(
            Table::new("backend_services.locality")
                .set("zonal_affinity", true)
                .set("zonal_spill_ratio", rng.pick(&["0.0", "0.3", "1.0"])),
        );
    }
    let mut endpoints = Vec::new();
    let regions = 1 + rng.below(3);
    let mut zones0 = 0;
    for r in 0..regions {
        let zones = 1 + rng.below(2);
        if r == 0 {
            zones0 = zones;
        }
        for z in 0..zones {
            let list: Vec<String> = (0..1 + rng.below(3))
                .map(|e| {
                    let a = format!("10.{}.{z}.{}", r + 1, e + 1);
                    endpoints.push(a.clone());
                    format!(
                        "{{ address = \"{a}\", weight = {} }}",
                        rng.pick(&[0, 50, 100, 200])
                    )
                })
                .collect();
            svc = svc.child(
                group(&format!("g{r}{z}"), &format!("r{r}"), &format!("r{r}-z{z}"))
                    .set("endpoints", format!("[{}]", list.join(", ")))
                    .set("capacity_scaler", rng.pick(&["0.0", "0.5", "1.0"])),
            );
        }
    }
    let mut cfg = Config::new()
        .node(node("replay", "r0", "r0-z0"))
        .dataplane("flow_table_capacity", 4096)
        .port(uplink(&["10.0.0.2/24"]))
        .rule(rule("web", &["10.0.0.10"], "TCP", "80", "web"))
        .service(svc);
    if zonal {
        for z in 0..zones0 {
            cfg = cfg.raw(&format!(
                "[[client_zones]]\nzone = \"r0-z{z}\"\nprefixes = [\"192.0.{}.0/24\"]\n",
                z + 1
            ));
        }
    }
    (cfg.build(), endpoints)
}

/// The daemon's pipeline on the same inputs, packet by packet: the
/// management core ticking every 50 ms of capture time (health, remote
/// verdicts, periodic work with the workers' counters, the flow table
/// aged) and one worker polling each packet alone with the snapshot last
/// published. Where each packet went (in transmit order).
fn daemon_model(
    text: &str,
    packets: &[(Duration, Vec<u8>)],
    events: &[(Duration, String, bool)],
    seed: u64,
) -> Vec<String> {
    use control::scripted::State;
    use control::{Core, Output, ScriptedProbes};
    use dataplane::{Engine, Local, PacketIo, VecBurst, Worker};
    use wire::buf::{MemBuf, PacketBuf};
    use wire::burst::PacketBurst;

    struct One(Option<Vec<u8>>, Vec<Vec<u8>>);
    impl PacketIo for One {
        type Burst = VecBurst<MemBuf<Vec<u8>>>;
        fn rx_burst(&mut self, _: usize, burst: &mut Self::Burst) -> usize {
            match self.0.take() {
                Some(f) => {
                    let p = MemBuf::new(vec![0u8; 4096], 128, &f).expect("fits");
                    usize::from(burst.push(p).is_ok())
                }
                None => 0,
            }
        }
        fn tx_burst(&mut self, _: usize, burst: &mut Self::Burst) -> usize {
            let out = &mut self.1;
            burst.drain_each(|_, p| out.push(p.data().to_vec()));
            0
        }
    }

    let loaded = config::load_str("p.toml", text, &config::Env::default()).expect("valid");
    let local = Local::from_config(&loaded.compiled, |_| None);
    let mut probes = ScriptedProbes::new(State::Healthy);
    probes.report_unchecked(&loaded.compiled);
    // Placed as `replay` places them (its `--seed`).
    let flows = flowtable::FlowTable::new(flowtable::Config {
        placement: Some(flowtable::PlacementKey::fixed(seed, 0)),
        ..dataplane::flow_table_config(&loaded.compiled.settings.dataplane)
    })
    .expect("flow table");
    let children = loaded.compiled.children.len();
    let mut core = Core::start(
        Path::new("p.toml"),
        loaded.compiled,
        local,
        dataplane::CookieKey::default(),
        Duration::ZERO,
        &mut probes,
    )
    .expect("core");
    let mut live = core.live().clone();
    let mut engine = Engine::new(
        Worker::new(seed, children),
        &[config::schema::PortRole::Uplink],
        dataplane::BURST,
        || VecBurst::with_capacity(dataplane::BURST),
    );
    let mut io = One(None, Vec::new());
    let period = Duration::from_millis(50);
    let (mut next, mut done) = (period, 0);
    for (t, frame) in packets {
        while next <= *t {
            while let Some((at, addr, down)) = events.get(done)
                && *at <= next
            {
                let s = if *down {
                    State::Unhealthy
                } else {
                    State::Healthy
                };
                probes.set_state(addr.parse().expect("address"), s);
                done += 1;
            }
            if probes.generation() != core.health_generation() {
                core.health(next, probes.snapshot());
            }
            core.remote_verdicts(next, |k| probes.remote_state(k));
            core.tick(next, || engine.worker.counters.clone());
            loop {
                let outs = core.outputs();
                if outs.is_empty() {
                    break;
                }
                for o in outs {
                    match o {
                        Output::Publish(s) => live = s,
                        Output::BuildTables { build, tables } => {
                            let built = tables
                                .into_iter()
                                .map(|k| {
                                    k.build()
                                        .map(|m| (k, std::sync::Arc::new(m)))
                                        .map_err(|e| e.to_string())
                                })
                                .collect();
                            core.tables_built(next, build, built, &mut probes);
                        }
                        _ => {}
                    }
                }
            }
            flows.sweep(core.tick_now(), 1 << 14);
            next += period;
        }
        io.0 = Some(frame.clone());
        engine.poll(&mut io, &live, &flows, t.as_secs() as u32);
    }
    backends_of(&io.1)
}

/// For random configurations (regions, zones, weights, capacity scalers,
/// zonal affinity, RATE limits) and random traffic with health changes at
/// random times, `spillway replay` (bursts, its own loop) and the daemon's
/// pipeline fed by the same management core packet by packet send every
/// packet to the same backend.
#[test]
fn replay_decides_as_the_daemon_for_random_configurations_and_traffic() {
    let (mut tested, mut forwarded) = (0, 0);
    for seed in 0..64u64 {
        let mut rng = Rng(seed);
        let (text, endpoints) = random_config(&mut rng);
        if config::load_str("p.toml", &text, &config::Env::default()).is_err() {
            continue;
        }
        tested += 1;
        // Connections: a SYN at a random time, then 1-4 ACKs after it.
        let mut packets: Vec<(Duration, Vec<u8>)> = Vec::new();
        for i in 0..20 + rng.below(60) as u16 {
            let set = 1 + rng.below(3) as u8;
            let mut t = if i == 0 { 0 } else { rng.below(4000) };
            packets.push((Duration::from_millis(t), conn(set, i, SYN)));
            for _ in 0..1 + rng.below(4) {
                t += 1 + rng.below(1500);
                packets.push((Duration::from_millis(t), conn(set, i, ACK)));
            }
        }
        packets.sort_by_key(|(t, _)| *t);
        let mut events: Vec<(Duration, String, bool)> = (0..rng.below(4))
            .map(|_| {
                (
                    Duration::from_millis(100 + rng.below(5000)),
                    rng.pick(&endpoints).clone(),
                    rng.below(2) == 0,
                )
            })
            .collect();
        events.sort_by_key(|e| e.0);
        let mut args = vec!["--seed".to_string(), "7".into()];
        for (at, addr, down) in &events {
            args.extend([
                "--at".into(),
                format!("{}ms", at.as_millis()),
                if *down { "--down" } else { "--up" }.into(),
                addr.clone(),
            ]);
        }
        let d = dir(&format!("prop-{seed}"));
        let (cfg, input, output) = (d.join("c.toml"), d.join("in.pcap"), d.join("out.pcap"));
        std::fs::write(&cfg, &text).expect("config");
        let base = Duration::from_secs(1_000_000);
        let timed: Vec<(Duration, &Vec<u8>)> =
            packets.iter().map(|(t, f)| (base + *t, f)).collect();
        pcap::write_timed(&input, &pcap::Format::default(), &timed);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let r = replay(&cfg, &input, &output, &args);
        let said =
            String::from_utf8_lossy(&r.stdout).to_string() + &String::from_utf8_lossy(&r.stderr);
        assert!(r.status.success(), "seed {seed}: {said}\n{text}");
        let replayed = backends_of(&read_pcap(&output));
        let _ = std::fs::remove_dir_all(&d);
        let model = daemon_model(&text, &packets, &events, 7);
        forwarded += model.len();
        assert_eq!(
            replayed, model,
            "seed {seed}: replay and the daemon's pipeline differ\n{said}\n{text}\nevents {events:?}"
        );
    }
    eprintln!("{tested} of 64 random configurations valid, {forwarded} packets compared");
    assert!(
        tested >= 32,
        "only {tested} of 64 random configurations valid"
    );
}

// ---------------------------------------------------------------------------
// Tunnelled ingress (M49).

/// The shared node with a GUE service behind the VIP 10.0.0.30 and its
/// IPv6 twin, and tunnels accepted from one peer of each family.
fn ingress_config() -> String {
    [
        base(),
        rule("spill", &["10.0.0.30"], "TCP", "80", "spill").to_string(),
        rule("spill6", &["2001:db8:30::30"], "TCP", "80", "spill").to_string(),
        service("spill", "gue")
            .set("gue_port", 7777)
            .endpoints(&addrs("10.1.9.", 3))
            .to_string(),
        "\n[tunnel_ingress]\nallow = [\"192.0.2.250/32\", \"2001:db8:ff::/64\"]\n".to_string(),
    ]
    .concat()
}

/// `inner` (a frame) in `tunnel` from `src` to the uplink's address of its
/// family, to our MAC.
fn to_own(inner: &[u8], src: &str, tunnel: &wire::encap::Tunnel) -> Vec<u8> {
    let src: IpAddr = src.parse().unwrap();
    let own = if src.is_ipv4() {
        v4("10.0.0.2")
    } else {
        v6("2001:db8::2")
    };
    let mut o = testkit::packet::outer(src, own);
    (o.src_mac, o.dst_mac) = (ROUTER_MAC, LB_MAC);
    testkit::packet::encap(inner, &o, tunnel)
}

fn ingress_tunnels() -> Vec<(&'static str, wire::encap::Tunnel)> {
    use wire::encap::Tunnel;
    vec![
        ("ipip", Tunnel::IpIp),
        ("gre", Tunnel::Gre { key: None }),
        ("gre", Tunnel::Gre { key: Some(5) }),
        ("gue", Tunnel::Gue { port: 6080 }),
        (
            "geneve",
            Tunnel::Geneve {
                port: 6081,
                vni: 0,
                ids: wire::geneve::OptionIds::DEFAULT,
                options: wire::geneve::GatewayOptions {
                    endpoint_id: None,
                    cookie: Some(9),
                },
            },
        ),
    ]
}

#[test]
fn tunnelled_ingress_of_each_type_is_forwarded_like_the_direct_packet() {
    // Per tunnel type and outer family: a connection (SYN, ACK) arrives
    // tunnelled from the peer, then continues directly; every packet of it
    // leaves for one backend with the client's packet byte for byte inside.
    let mut frames = Vec::new();
    let mut inners = Vec::new();
    let mut port = 42000;
    for (_, t) in ingress_tunnels() {
        for (peer, client, vip) in [
            ("192.0.2.250", v4("198.51.100.1"), v4("10.0.0.30")),
            ("2001:db8:ff::1", v4("198.51.100.2"), v4("10.0.0.30")),
            ("192.0.2.250", v6("2001:db8:c::1"), v6("2001:db8:30::30")),
            ("2001:db8:ff::1", v6("2001:db8:c::2"), v6("2001:db8:30::30")),
        ] {
            port += 1;
            let syn = tcp_frame(client, vip, port, 80, SYN, &[]);
            let ack = tcp_frame(client, vip, port, 80, ACK, &[]);
            frames.push(to_own(&syn, peer, &t));
            frames.push(to_own(&ack, peer, &t));
            frames.push(ack.clone());
            inners.extend([(port, syn), (port, ack.clone()), (port, ack)]);
        }
    }
    let denied = to_own(
        &syn(9, 1, [10, 0, 0, 30], 80),
        "192.0.2.251",
        &wire::encap::Tunnel::IpIp,
    );
    frames.push(denied);
    let r = run("ingress", &ingress_config(), &frames, &[]);
    assert_eq!(r.out.len(), inners.len(), "{}", r.text);
    let mut per_flow = BTreeMap::new();
    for ((port, inner), out) in inners.iter().zip(&r.out) {
        let d = delivered(out, Mode::Gue(7777));
        assert_eq!(d.inner, inner[14..], "the client's packet, byte for byte");
        same_per_key(&mut per_flow, *port, d.backend, "backend");
    }
    assert!(distinct(&per_flow).len() > 1, "{per_flow:?}");
    assert_eq!(r.drops("tunnel_source_denied"), 1, "{}", r.text);
    assert_eq!(
        r.line_value("tunnels: "),
        Some("decapsulated ipip 8, gre 16, gue 8, geneve 8"),
        "{}",
        r.text
    );
    assert_eq!(r.rule("spill-ag0").new_flows, 10, "{}", r.text);
    assert_eq!(r.rule("spill6-ag0").new_flows, 10, "{}", r.text);
}

#[test]
fn tunnelled_ingress_drops_what_it_does_not_take_and_leaves_the_rest_to_the_host() {
    let good = syn(1, 40000, [10, 0, 0, 30], 80);
    let ipip = wire::encap::Tunnel::IpIp;
    let frames = vec![
        // Inner destination not a VIP.
        to_own(&syn(1, 40001, [10, 0, 0, 99], 80), "192.0.2.250", &ipip),
        // IPIP inside IPIP.
        to_own(
            &eth(&ip(v4("198.51.100.1"), v4("10.0.0.30"), 4, &good[14..])),
            "192.0.2.250",
            &ipip,
        ),
        // A fragment of a tunnel packet.
        fragments(v4("192.0.2.250"), v4("10.0.0.2"), 4, 7, &good[14..], 24)[0].clone(),
        // Not a tunnel: the host's.
        tcp_frame(v4("192.0.2.250"), v4("10.0.0.2"), 40000, 22, SYN, &[]),
    ];
    let r = run("ingress-drops", &ingress_config(), &frames, &[]);
    assert_eq!(r.out.len(), 0, "{}", r.text);
    assert_eq!(r.drops("tunnel_not_vip"), 1, "{}", r.text);
    assert_eq!(r.drops("tunnel_nested"), 1, "{}", r.text);
    assert_eq!(r.drops("tunnel_fragment"), 1, "{}", r.text);
    assert!(r.text.contains("to host 1"), "{}", r.text);
}

// ---------------------------------------------------------------------------
// MTU (M48).

/// On a 1500-byte uplink, IPIP adds 20 bytes: a 1480-byte DF packet goes
/// out encapsulated, a 1481-byte one comes back as ICMP "fragmentation
/// needed" advertising 1480, from the VIP to the client.
#[test]
fn replay_answers_a_df_packet_too_big_once_encapsulated() {
    let vip = IpAddr::from([10, 0, 0, 10]);
    let client = IpAddr::from([192, 0, 2, 7]);
    let fits = tcp_frame(client, vip, 40000, 80, ACK, &[7; 1480 - 40]);
    let over = tcp_frame(client, vip, 40000, 80, ACK, &[7; 1481 - 40]);
    let r = run("mtu", &config().build(), &[fits, over.clone()], &[]);
    assert_eq!(r.out.len(), 2, "{}", r.text);
    assert_eq!(r.out[0].len(), 14 + 20 + 1480, "encapsulated to the MTU");
    let icmp = &r.out[1];
    assert_eq!(&icmp[0..6], &ROUTER_MAC, "back to the sender's MAC");
    assert_eq!(&icmp[6..12], &LB_MAC);
    assert_eq!(&icmp[14 + 12..14 + 16], &[10, 0, 0, 10], "from the VIP");
    assert_eq!(&icmp[14 + 16..14 + 20], &[192, 0, 2, 7], "to the client");
    assert_eq!(icmp[14 + 9], ICMP);
    let m = &icmp[14 + 20..];
    assert_eq!((m[0], m[1]), (3, 4), "fragmentation needed");
    assert_eq!(u16::from_be_bytes([m[6], m[7]]), 1480, "next-hop MTU");
    assert_eq!(
        &m[8..],
        &over[14..14 + 548],
        "quotes 548 bytes of the packet"
    );
    assert!(r.text.contains("ICMP too big 1"), "{}", r.text);
}

// ---------------------------------------------------------------------------
// Neighbours (M47).

/// M47 in replay: a next hop without a static MAC is unresolved (replay has
/// no ports to ask on) unless `--neighbour IP=MAC` says it answers. Without
/// it nothing is forwarded (new flows: no eligible backend); with it,
/// frames go to that MAC; a reload moving the gateway to one that does not
/// answer drops the established flows as `no_neighbour`, never sending to
/// a zero MAC.
#[test]
fn unresolved_next_hops_are_counted_drops_and_neighbour_resolves_them() {
    let gw = |g: &str| {
        Config::new()
            .node(node("replay", "r", "z"))
            .port(uplink(&["10.0.0.2/24"]))
            .port(
                port("inside", "net_pcap1", "backend")
                    .strs("addresses", &["10.1.0.2/24"])
                    .str("mac", "02:00:00:00:00:02")
                    .str("gateway", g),
            )
            .rule(rule("web", &["10.0.0.10"], "TCP", "80", "web"))
            .service(service("web", "ipip").child(group("a", "r", "z").set(
                "endpoints",
                endpoint_list(&["10.1.1.11", "10.1.1.12", "10.1.1.13"]),
            )))
            .build()
    };
    let (before, after) = (gw("10.1.0.1"), gw("10.1.0.254"));
    let mut frames = Vec::new();
    frames.extend((0..20).map(|i| (0, conn(1, i, SYN))));
    frames.extend((0..20).map(|i| (1, conn(1, i, ACK))));
    frames.extend((0..20).map(|i| (3, conn(1, i, ACK))));
    frames.extend((0..20).map(|i| (3, conn(2, i, SYN))));

    // Nobody answers: no backend is eligible, nothing leaves.
    let r = run_timed("nbr-none", &before, &[], &frames, &[]);
    assert!(r.out.is_empty(), "{}", r.text);
    assert_eq!(r.drops("no_backend"), 80, "{}", r.text);

    // The gateway answers; after the reload its successor does not.
    let mac = [2, 0, 0, 0, 0, 0x99];
    let r = run_timed(
        "nbr-moved",
        &before,
        &[("after.toml", &after)],
        &frames,
        &[
            "--neighbour",
            "10.1.0.1=02:00:00:00:00:99",
            "--at",
            "2s",
            "--reload",
            "{dir}/after.toml",
        ],
    );
    assert_eq!(r.out.len(), 40, "{}", r.text);
    for out in &r.out {
        assert_eq!(&out[..6], &mac, "to the resolved gateway, never to zero");
    }
    assert_eq!(r.drops("no_neighbour"), 20, "{}", r.text);
    assert_eq!(r.drops("no_backend"), 20, "{}", r.text);
}

// ---------------------------------------------------------------------------
// Gateway mode (M30-M32): byte-exact Geneve to appliances and the return.

/// The gateway endpoint (a router on the uplink's subnet): `--neighbour`
/// resolves it to [`ROUTER_MAC`], the source MAC of every crafted frame, so
/// every client packet here comes from it.
const GW_ENDPOINT: &str = "10.0.0.1";
const GW_ID: u64 = 0x0123_4567_89ab_cdef;
/// Appliances on the backend port's subnets: next hops themselves.
const NVAS4: [&str; 3] = ["10.1.0.11", "10.1.0.12", "10.1.0.13"];
const NVAS6: [&str; 3] = ["2001:db8:1::11", "2001:db8:1::12", "2001:db8:1::13"];

fn nva_mac(i: usize) -> [u8; 6] {
    [2, 0, 0, 0, 0xa0, i as u8 + 1]
}

/// Option class, endpoint-ID type and cookie type of a Geneve service.
#[derive(Debug, Clone, Copy)]
struct Ids {
    port: u16,
    class: u16,
    id_type: u8,
    cookie_type: u8,
}

const DEFAULT_IDS: Ids = Ids {
    port: 6081,
    class: 0x0139,
    id_type: 1,
    cookie_type: 3,
};

/// A gateway rule for [`GW_ENDPOINT`] to a Geneve service of `nvas` (with
/// `ids`, written out unless the defaults).
fn gateway_config(nvas: &[&str], ids: Ids) -> String {
    let mut svc = service("nva", "geneve").endpoints(nvas);
    if ids.port != DEFAULT_IDS.port
        || ids.class != DEFAULT_IDS.class
        || ids.id_type != DEFAULT_IDS.id_type
        || ids.cookie_type != DEFAULT_IDS.cookie_type
    {
        svc = svc.set(
            "geneve",
            format!(
                "{{ port = {}, option_class = {:#06x}, endpoint_id_type = {}, flow_cookie_type = {} }}",
                ids.port, ids.class, ids.id_type, ids.cookie_type
            ),
        );
    }
    [
        base(),
        rule("gw", &["10.0.0.40"], "L3_DEFAULT", "all", "nva")
            .str("mode", "gateway")
            .set(
                "gateway_endpoints",
                format!("[{{ address = \"{GW_ENDPOINT}\", id = {GW_ID:#x} }}]"),
            )
            .to_string(),
        svc.to_string(),
    ]
    .concat()
}

/// `--neighbour` for the gateway endpoint and every appliance.
fn gateway_neighbours(nvas: &[&str]) -> Vec<String> {
    let mut a = vec![
        "--neighbour".to_string(),
        format!("{GW_ENDPOINT}={}", mac_str(&ROUTER_MAC)),
    ];
    for (i, n) in nvas.iter().enumerate() {
        a.push("--neighbour".into());
        a.push(format!("{n}={}", mac_str(&nva_mac(i))));
    }
    a
}

/// A TCP segment the gateway endpoint routes through the balancer, with a
/// DS byte that the outer header must copy.
fn routed(src: IpAddr, dst: IpAddr, ports: (u16, u16), flags: u8, ds: u8, data: &[u8]) -> Vec<u8> {
    testkit::packet::Packet::tcp(src, dst, ports.0, ports.1, flags)
        .macs(ROUTER_MAC, LB_MAC)
        .ttl(61)
        .ident(0x1234)
        .flow_label(0x12345)
        .tos(ds)
        .payload(data)
        .frame()
}

/// The DS byte of an IP packet (IPv4 TOS, IPv6 traffic class).
fn ds_of(ip: &[u8]) -> u8 {
    match ip[0] >> 4 {
        4 => ip[1],
        _ => (ip[0] << 4) | (ip[1] >> 4),
    }
}

/// What a Geneve frame to an appliance must be, byte for byte, written out
/// field by field here: Ethernet from the backend port to the appliance's
/// MAC; outer IPv4 (DS of the inner, id 0, DF, TTL 64, checksum) or IPv6
/// (DS of the inner, `flow_label`, hop limit 64) from the tunnel source;
/// UDP from `sport` to the Geneve port (no checksum over IPv4, computed
/// over IPv6); Geneve version 0, Opt Len 5, no flags, the inner protocol,
/// VNI 0; the endpoint-ID option (2 words) then the cookie option (1
/// word); the inner IP packet unchanged.
#[allow(clippy::too_many_arguments)]
fn expected_geneve(
    frame: &[u8],
    nva: IpAddr,
    nva_mac: [u8; 6],
    ids: Ids,
    sport: u16,
    flow_label: u32,
    cookie: u32,
) -> Vec<u8> {
    let inner = &frame[14..];
    let inner_et: u16 = if inner[0] >> 4 == 6 { 0x86dd } else { 0x0800 };
    let mut geneve = vec![5, 0];
    geneve.extend(inner_et.to_be_bytes());
    geneve.extend([0, 0, 0, 0]);
    geneve.extend(ids.class.to_be_bytes());
    geneve.extend([ids.id_type, 2]);
    geneve.extend(GW_ID.to_be_bytes());
    geneve.extend(ids.class.to_be_bytes());
    geneve.extend([ids.cookie_type, 1]);
    geneve.extend(cookie.to_be_bytes());
    geneve.extend(inner);
    let udp_len = 8 + geneve.len();
    let mut udp = sport.to_be_bytes().to_vec();
    udp.extend(ids.port.to_be_bytes());
    udp.extend((udp_len as u16).to_be_bytes());
    udp.extend([0, 0]);
    udp.extend(&geneve);
    let ds = ds_of(inner);
    let mut out = nva_mac.to_vec();
    out.extend(OUT_MAC);
    match nva {
        IpAddr::V4(dst) => {
            out.extend(0x0800u16.to_be_bytes());
            let mut h = vec![0x45, ds];
            h.extend(((20 + udp_len) as u16).to_be_bytes());
            h.extend([0, 0, 0x40, 0, 64, UDP, 0, 0]);
            h.extend(TUNNEL_SRC4.octets());
            h.extend(dst.octets());
            let c = csum(0, &h);
            h[10..12].copy_from_slice(&c.to_be_bytes());
            out.extend(h);
        }
        IpAddr::V6(dst) => {
            out.extend(0x86ddu16.to_be_bytes());
            let w = (6u32 << 28) | (u32::from(ds) << 20) | flow_label;
            out.extend(w.to_be_bytes());
            out.extend((udp_len as u16).to_be_bytes());
            out.extend([UDP, 64]);
            out.extend(TUNNEL_SRC6.octets());
            out.extend(dst.octets());
            let c = csum(pseudo(IpAddr::V6(TUNNEL_SRC6), nva, UDP, udp_len), &udp);
            let c = if c == 0 { 0xffff } else { c };
            udp[6..8].copy_from_slice(&c.to_be_bytes());
        }
    }
    out.extend(udp);
    out
}

/// Offsets of an outer frame's fields: (outer IP header length, where the
/// Geneve header starts).
fn geneve_at(out: &[u8]) -> (usize, usize) {
    let l3 = if be16(out, 12) == 0x86dd { 40 } else { 20 };
    (l3, 14 + l3 + 8)
}

/// The appliance's answer per the contract: outer IP addresses swapped,
/// UDP ports and every Geneve byte kept (the checksums stay right: both
/// sums are over the swapped pair); from the appliance's MAC to the
/// backend port's, where replay receives it (a frame arrives on the port
/// its destination MAC names).
fn nva_echo(out: &[u8]) -> Vec<u8> {
    let mut f = out.to_vec();
    f[..6].copy_from_slice(&out[6..12]);
    f[6..12].copy_from_slice(&out[..6]);
    let (src, len) = if be16(out, 12) == 0x86dd {
        (22, 16)
    } else {
        (26, 4)
    };
    f[src..src + len].copy_from_slice(&out[src + len..src + 2 * len]);
    f[src + len..src + 2 * len].copy_from_slice(&out[src..src + len]);
    f
}

/// Rewrites an IPv4-outer frame's source address (header checksum fixed).
fn with_outer_src4(f: &[u8], src: Ipv4Addr) -> Vec<u8> {
    let mut f = f.to_vec();
    f[26..30].copy_from_slice(&src.octets());
    f[24..26].copy_from_slice(&[0, 0]);
    let c = csum(0, &f[14..34]);
    f[24..26].copy_from_slice(&c.to_be_bytes());
    f
}

/// Rewrites an IPv4-outer frame's destination address (header checksum
/// fixed).
fn with_outer_dst4(f: &[u8], dst: Ipv4Addr) -> Vec<u8> {
    let mut f = f.to_vec();
    f[30..34].copy_from_slice(&dst.octets());
    with_outer_src4(&f, Ipv4Addr::new(f[26], f[27], f[28], f[29]))
}

/// An IPv4-outer Geneve frame without its options (lengths and checksum
/// fixed): what an appliance that strips them sends.
fn without_options4(f: &[u8]) -> Vec<u8> {
    let (_, g) = geneve_at(f);
    let opt_len = usize::from(f[g] & 0x3f) * 4;
    let mut o = f[..g + 8].to_vec();
    o.extend(&f[g + 8 + opt_len..]);
    o[g] &= 0xc0;
    let ip_len = (o.len() - 14) as u16;
    o[16..18].copy_from_slice(&ip_len.to_be_bytes());
    o[38..40].copy_from_slice(&(ip_len - 20).to_be_bytes());
    with_outer_src4(&o, Ipv4Addr::new(o[26], o[27], o[28], o[29]))
}

/// The connections of one inner family: per connection, the client's SYN,
/// the server's SYN-ACK and the client's data (DS byte 0x2a), all routed by
/// the gateway endpoint. Returns (connection, frame).
fn gateway_traffic(v6: bool, n: u16) -> Vec<(u16, Vec<u8>)> {
    let ends = |i: u16| -> (IpAddr, IpAddr) {
        if v6 {
            (
                format!("2001:db8:c::{}", i + 1).parse().unwrap(),
                format!("2001:db8:d::{}", i % 3 + 1).parse().unwrap(),
            )
        } else {
            (
                IpAddr::from([198, 51, 100, i as u8 + 1]),
                IpAddr::from([203, 0, 113, i as u8 % 3 + 1]),
            )
        }
    };
    let mut frames = Vec::new();
    for i in 0..n {
        let (c, s) = ends(i);
        let (cp, sp) = (40000 + i, 443);
        frames.push((i, routed(c, s, (cp, sp), SYN, 0, &[])));
        frames.push((i, routed(s, c, (sp, cp), SYN | ACK, 0, &[])));
        frames.push((i, routed(c, s, (cp, sp), ACK | PSH, 0x2a, b"client hello")));
    }
    frames
}

/// The outer destination of a frame to an appliance.
fn outer_dst(out: &[u8]) -> IpAddr {
    if be16(out, 12) == 0x86dd {
        IpAddr::from(<[u8; 16]>::try_from(&out[38..54]).unwrap())
    } else {
        IpAddr::from(<[u8; 4]>::try_from(&out[30..34]).unwrap())
    }
}

/// Both inner families' connections through a gateway rule to `nvas` in
/// one replay: every frame to an appliance compared whole with the one
/// [`expected_geneve`] writes out; both directions of a connection to one
/// appliance with one cookie, source port and flow label. Then a second
/// replay of the same forward traffic (the fixed seed: the same cookies)
/// followed by each appliance's answer, and, over IPv4, the answers that
/// must not pass: each must come back as the very frame the endpoint sent,
/// to its MAC from the uplink's, and the others be counted drops. Returns
/// the cookies by connection.
fn check_gateway(name: &str, nvas: &[&str], ids: Ids, extra: &[&str]) -> BTreeMap<u16, u32> {
    let cfg = gateway_config(nvas, ids);
    let mut args = gateway_neighbours(nvas);
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut traffic = gateway_traffic(false, 6);
    traffic.extend(
        gateway_traffic(true, 6)
            .into_iter()
            .map(|(i, f)| (i + 100, f)),
    );
    // Forwarded in the first replay only: in the second, its answer finds
    // no flow.
    let gone = routed(
        v4("198.51.100.99"),
        v4("203.0.113.9"),
        (40999, 443),
        SYN,
        0,
        &[],
    );
    let mut frames: Vec<Vec<u8>> = traffic.iter().map(|(_, f)| f.clone()).collect();
    frames.push(gone);
    let r = run(name, &cfg, &frames, &args);
    assert_eq!(r.out.len(), frames.len(), "{}", r.text);
    let mut per_conn = BTreeMap::new();
    let mut cookies = BTreeMap::new();
    for ((conn, frame), out) in traffic.iter().zip(&r.out) {
        // What the flow hash and the cookie generator chose is read from
        // the output; everything else is as written out here.
        let nva = outer_dst(out);
        let k = nvas
            .iter()
            .position(|a| v4_or_v6(a) == nva)
            .unwrap_or_else(|| panic!("{nva} is no appliance"));
        let (l3, g) = geneve_at(out);
        let sport = be16(out, 14 + l3);
        assert!(
            sport >= 49152,
            "outer source port {sport} in the default range 49152-65535"
        );
        let label = if l3 == 40 {
            be32(out, 14) & 0xf_ffff
        } else {
            0
        };
        let cookie = be32(out, g + 24);
        let want = expected_geneve(frame, nva, nva_mac(k), ids, sport, label, cookie);
        assert_eq!(
            out, &want,
            "{name}: connection {conn}, the whole frame\n got {out:02x?}\nwant {want:02x?}"
        );
        same_per_key(
            &mut per_conn,
            *conn,
            (nva, sport, label, cookie),
            "appliance, outer source port, flow label and cookie (both directions)",
        );
        cookies.insert(*conn, cookie);
    }
    let used: BTreeSet<IpAddr> = per_conn.values().map(|v| v.0).collect();
    assert!(used.len() > 1, "{name}: appliances used {used:?}");
    assert_eq!(
        distinct(&cookies).len(),
        cookies.len(),
        "{name}: one cookie per connection: {cookies:?}"
    );
    assert_eq!(r.rule("gw-ag0").new_flows, 13, "{}", r.text);

    // The return path: the same forward traffic, then every answer.
    let n = traffic.len();
    let mut frames2: Vec<Vec<u8>> = frames[..n].to_vec();
    frames2.extend(r.out[..n].iter().map(|o| nva_echo(o)));
    let mut refused: Vec<(&str, Vec<u8>)> = Vec::new();
    if nvas[0].contains('.') {
        let echo = nva_echo(&r.out[0]);
        let (_, g) = geneve_at(&echo);
        let mut tampered = echo.clone();
        tampered[g + 27] ^= 1;
        let holder = outer_dst(&r.out[0]);
        let other = nvas
            .iter()
            .map(|a| v4_or_v6(a))
            .find(|a| *a != holder)
            .unwrap();
        let other_mac = nva_mac(nvas.iter().position(|a| v4_or_v6(a) == other).unwrap());
        let IpAddr::V4(other) = other else {
            unreachable!()
        };
        // Another appliance, from its own MAC.
        let mut theirs = with_outer_src4(&echo, other);
        theirs[6..12].copy_from_slice(&other_mac);
        // The holder's frame from a stranger's MAC, over the client-facing
        // uplink (to its MAC), to another own address (M53).
        let mut stranger = echo.clone();
        stranger[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 0x55]);
        let mut uplink = echo.clone();
        uplink[..6].copy_from_slice(&LB_MAC);
        let elsewhere = with_outer_dst4(&echo, Ipv4Addr::new(10, 0, 0, 2));
        refused = vec![
            ("gateway_cookie_mismatch", tampered),
            ("gateway_options_missing", without_options4(&echo)),
            (
                "gateway_unknown_source",
                with_outer_src4(&echo, Ipv4Addr::new(10, 1, 0, 99)),
            ),
            ("gateway_wrong_appliance", theirs),
            ("gateway_no_flow", nva_echo(&r.out[n])),
            ("gateway_return_wrong_mac", stranger),
            ("gateway_return_wrong_port", uplink),
            ("gateway_return_wrong_destination", elsewhere),
        ];
    }
    frames2.extend(refused.iter().map(|(_, f)| f.clone()));
    let r2 = run(&format!("{name}-return"), &cfg, &frames2, &args);
    assert_eq!(r2.out.len(), 2 * n, "{}", r2.text);
    // Each port's frames in processing order (a burst's frames are written
    // port by port): to appliances from the backend port, returns from the
    // uplink.
    let (fwd2, back2): (Vec<&Vec<u8>>, Vec<&Vec<u8>>) =
        r2.out.iter().partition(|f| f[6..12] == OUT_MAC);
    assert_eq!((fwd2.len(), back2.len()), (n, n), "{}", r2.text);
    for (i, (a, b)) in fwd2.iter().zip(&r.out[..n]).enumerate() {
        assert!(
            *a == b,
            "{name}: frame {i}: the same seed, the same frame (cookie)\n{}",
            r2.text
        );
    }
    for ((conn, frame), back) in traffic.iter().zip(back2) {
        // The endpoint's own frame, Ethernet addresses swapped: to its MAC,
        // from the uplink's.
        let mut want = ROUTER_MAC.to_vec();
        want.extend(LB_MAC);
        want.extend(&frame[12..]);
        assert_eq!(back, &want, "{name}: connection {conn} returned");
    }
    assert!(
        r2.text.contains(&format!("gateway returned {n},")),
        "{}",
        r2.text
    );
    for (reason, _) in &refused {
        assert_eq!(r2.drops(reason), 1, "{reason}: {}", r2.text);
    }
    assert_eq!(
        r2.line_value("forwarded ")
            .map(|l| l.split(',').next().unwrap()),
        Some(n.to_string().as_str()),
        "{}",
        r2.text
    );
    cookies
}

fn v4_or_v6(a: &str) -> IpAddr {
    a.parse().unwrap()
}

#[test]
fn gateway_geneve_to_ipv4_appliances_is_byte_exact_and_returns_for_both_inner_families() {
    check_gateway("gw4", &NVAS4, DEFAULT_IDS, &[]);
}

#[test]
fn gateway_geneve_to_ipv6_appliances_is_byte_exact_and_returns_for_both_inner_families() {
    check_gateway("gw6", &NVAS6, DEFAULT_IDS, &[]);
}

#[test]
fn gateway_geneve_uses_the_configured_port_option_class_and_types() {
    let ids = Ids {
        port: 7081,
        class: 0x0105,
        id_type: 9,
        cookie_type: 7,
    };
    check_gateway("gw-ids", &NVAS4, ids, &[]);
}

#[test]
fn gateway_cookies_follow_the_replay_seed() {
    let a = check_gateway("gw-seed-a", &NVAS4, DEFAULT_IDS, &["--seed", "7"]);
    let b = check_gateway("gw-seed-b", &NVAS4, DEFAULT_IDS, &["--seed", "8"]);
    assert_ne!(a, b, "another seed, other cookies");
}

/// A dual-stack service (M8): three endpoints with an IPv4 `address` and
/// an IPv6 `address6`, behind an IPv4 and an IPv6 rule. IPv4 clients reach
/// each endpoint at its IPv4 address, IPv6 clients at its IPv6 address
/// (IPv6 in IPv6, GUE), and both families reach the same three endpoints.
#[test]
fn ipv4_and_ipv6_clients_of_a_dual_stack_service_reach_the_same_endpoints() {
    let endpoints: Vec<String> = (1..=3)
        .map(|i| format!("{{ address = \"10.1.8.{i}\", address6 = \"2001:db8:8::{i}\" }}"))
        .collect();
    let config = [
        base(),
        rule("dual4", &["10.0.0.28"], "TCP", "80", "dual").to_string(),
        rule("dual6", &["2001:db8::28"], "TCP", "80", "dual").to_string(),
        service("dual", "gue")
            .set("gue_port", 7777)
            .endpoints(&endpoints)
            .to_string(),
    ]
    .concat();
    let mut reached = Vec::new();
    for (vip, rule) in [(v4("10.0.0.28"), "dual4"), (v6("2001:db8::28"), "dual6")] {
        // 24 connections from clients of the VIP's family.
        let mut frames = Vec::new();
        for step in 0..2u8 {
            for i in 1..=24u8 {
                let client = if vip.is_ipv6() {
                    IpAddr::from([0x2001, 0xdb8, 0xc, 0, 0, 0, 0, u16::from(i)])
                } else {
                    IpAddr::from([192, 0, 2, i])
                };
                let flags = if step == 0 { SYN } else { ACK };
                frames.push(tcp_frame(client, vip, 41000 + u16::from(i), 80, flags, &[]));
            }
        }
        let r = run(rule, &config, &frames, &[]);
        assert_eq!(r.out.len(), frames.len(), "{}", r.text);
        let mut per_flow = BTreeMap::new();
        for (i, (frame, out)) in frames.iter().zip(&r.out).enumerate() {
            let d = delivered(out, Mode::Gue(7777));
            assert_eq!(d.inner, frame[14..], "the inner packet is the client's");
            same_per_key(&mut per_flow, i % 24, d.backend.clone(), "backend");
        }
        let backends = distinct(&per_flow);
        let want: BTreeSet<String> = (1..=3)
            .map(|i| {
                if vip.is_ipv6() {
                    format!("2001:db8:8::{i}")
                } else {
                    format!("10.1.8.{i}")
                }
            })
            .collect();
        assert_eq!(
            backends, want,
            "{rule}: each endpoint at its {vip} family's address"
        );
        assert_eq!(r.rule(&format!("{rule}-ag0")).new_flows, 24, "{}", r.text);
        // The endpoints reached, by their number.
        let numbers: BTreeSet<String> = backends
            .iter()
            .map(|b| b.rsplit(['.', ':']).next().unwrap_or("").to_owned())
            .collect();
        reached.push(numbers);
    }
    assert_eq!(
        reached[0], reached[1],
        "both families reach the same endpoints"
    );
}
