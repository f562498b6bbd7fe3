//! Issue 38's must-show for the gateway return path (M53): an appliance that
//! holds valid cookies of the flows it was sent fuzzes what it sends back —
//! ≥ 200,000 frames: valid returns, returns with other addresses, directions,
//! protocols and ports, ICMP errors with any source, destination, quote and
//! padding, other cookies and endpoint IDs, random bit flips — and not one
//! frame leaves the balancer for an address that is not a party of a flow
//! the balancer sent that appliance (a stricter check holds too: a relayed
//! packet travels a way the balancer sent the flow, a relayed ICMP error goes
//! to the sender of the packet it quotes). Sent over the client-facing
//! uplink instead, none is taken at all.
//!
//! Once through `spillway replay` (its frames reach the port whose MAC they
//! are addressed to), once through the DPDK daemon, whose two ports are
//! `net_pcap` devices on live interfaces in a namespace the test makes: the
//! test plays the router and the appliance there, learning the cookies from
//! what the daemon sends. Both need root for the daemon's part only.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly
#![allow(clippy::cast_possible_truncation)] // test values are small

mod common;

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{LB_MAC, ROUTER_MAC, read_pcap};
use testkit::config::{Config, endpoint_list, group, node, port, rule, service, strings};
use testkit::mutate::Mutator;
use testkit::packet::{ACK, PSH, Packet, SYN, v4};
use wire::encap::{DecapConfig, TunnelKind, parse_tunnel};
use wire::geneve::GatewayOptions;
use wire::packet::{Frame, IcmpInfo, PacketInfo, parse_frame};

/// The backend port's MAC and address (the tunnel source).
const BACK_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];
const TUNNEL_SRC: &str = "10.0.1.2";
/// The gateway endpoint (the router on the uplink) and its ID.
const ROUTER: &str = "10.0.0.1";
const ENDPOINT_ID: u64 = 0x100;
/// The appliances, on the backend port's subnet; the first one is the
/// attacker.
const NVAS: [&str; 3] = ["10.0.1.11", "10.0.1.12", "10.0.1.13"];
fn nva_mac(i: usize) -> [u8; 6] {
    [0x02, 0, 0, 0, 0xa0, i as u8 + 1]
}

fn mac_str(m: [u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}
/// Fuzzed returns per run (the issue asks for at least 200,000).
const FUZZED: usize = 200_000;

/// The gateway rule, its appliances and both ports; `eal_args` and the
/// ports' devices for the daemon. Refused returns are not rate limited
/// here: the fuzz must reach every check, not the budget (which
/// `crates/dataplane/tests/gateway.rs` tests).
fn config(devices: (&str, &str), eal_args: &[String]) -> String {
    Config::new()
        .node(node("fuzz", "r", "z").str("shutdown_drain", "0s"))
        .dataplane("management_core", 0)
        .dataplane("worker_cores", "[1]")
        .dataplane("mbufs", 8191)
        .dataplane("queue_descriptors", 512)
        .dataplane("flow_table_capacity", 4096)
        .dataplane("new_flow_budget", 100_000)
        .dataplane("gateway_mismatch_rate", 100_000_000)
        .dataplane("eal_args", strings(eal_args))
        .port(with_mac(
            port("up", devices.0, "uplink").strs("addresses", &["10.0.0.2/24"]),
            LB_MAC,
            eal_args,
        ))
        .port(with_mac(
            port("be", devices.1, "backend").strs("addresses", &[&format!("{TUNNEL_SRC}/24")]),
            BACK_MAC,
            eal_args,
        ))
        .rule(
            rule("gw", &["10.0.0.40"], "L3_DEFAULT", "all", "nva")
                .str("mode", "gateway")
                .set(
                    "gateway_endpoints",
                    format!("[{{ address = \"{ROUTER}\", id = {ENDPOINT_ID:#x} }}]"),
                ),
        )
        .service(
            service("nva", "geneve")
                .child(group("a", "r", "z").set("endpoints", endpoint_list(&NVAS))),
        )
        .build()
}

/// A port with `mac`: configured for a replay (no EAL arguments); a live
/// net_pcap device keeps its own (it cannot set one), which the test learns
/// from the daemon's ARP requests.
fn with_mac(
    p: testkit::config::Table,
    mac: [u8; 6],
    eal_args: &[String],
) -> testkit::config::Table {
    if eal_args.is_empty() {
        p.str("mac", &mac_str(mac))
    } else {
        p
    }
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// What the router sends through the balancer: per connection the client's
/// SYN, the server's SYN-ACK and the client's data; UDP both ways; an ICMP
/// error from a router on the path about a client's packet. IPv4 and IPv6.
fn forward_traffic(lb_mac: [u8; 6]) -> Vec<Vec<u8>> {
    let mut frames = Vec::new();
    let r = |p: Packet| p.macs(ROUTER_MAC, lb_mac).frame();
    for i in 0..48u16 {
        let (c, s) = if i % 4 == 3 {
            (
                ip(&format!("2001:db8:c::{:x}", i + 1)),
                ip(&format!("2001:db8:d::{:x}", i % 5 + 1)),
            )
        } else {
            (
                IpAddr::from([198, 51, 100, i as u8 + 1]),
                IpAddr::from([203, 0, 113, i as u8 % 5 + 1]),
            )
        };
        let cp = 40000 + i;
        frames.push(r(Packet::tcp(c, s, cp, 443, SYN)));
        frames.push(r(Packet::tcp(s, c, 443, cp, SYN | ACK)));
        frames.push(r(Packet::tcp(c, s, cp, 443, ACK | PSH).payload(b"hello")));
        if i % 3 == 0 {
            frames.push(r(Packet::udp(c, s, cp, 53).payload(b"query")));
            frames.push(r(Packet::udp(s, c, 53, cp).payload(b"answer")));
        }
        if i % 6 == 1 {
            // A router on the way to the server: the client's packet was too big.
            let quoted = Packet::tcp(c, s, cp, 443, ACK).ip();
            let (path, t, code) = if c.is_ipv4() {
                (v4("192.0.2.254"), 3, 4)
            } else {
                (ip("2001:db8:ff::fe"), 2, 0)
            };
            let q = if c.is_ipv4() { 28 } else { 48 };
            frames.push(r(Packet::icmp(path, c, t, code, 1280).payload(&quoted[..q])));
        }
    }
    frames
}

/// The inner IP packet of a frame to an appliance, and its Geneve facts.
fn geneve(frame: &[u8]) -> Option<(wire::encap::TunnelInfo, Vec<u8>)> {
    let cfg = DecapConfig {
        geneve_port: Some(6081),
        ..DecapConfig::default()
    };
    let t = parse_tunnel(frame, &cfg).ok()?;
    (t.kind == TunnelKind::Geneve).then(|| {
        let inner = frame[t.inner_offset..t.inner_offset + t.inner_len].to_vec();
        (t, inner)
    })
}

fn info_of(ip_packet: &[u8]) -> Option<PacketInfo> {
    let frame = Packet::raw(v4("0.0.0.1"), v4("0.0.0.2"), 0).eth(ip_packet);
    match parse_frame(&frame) {
        Ok(Frame::Ip(_, info)) => Some(info),
        _ => None,
    }
}

fn addr(a: &[u8; 16]) -> IpAddr {
    wire::ip::unmap(a)
}

/// What the balancer sent the attacker: the directed address pairs of the
/// flows' packets, the (source, destination) of the ICMP errors, every
/// party, and the frames themselves (with their cookies).
#[derive(Default)]
struct Sent {
    pairs: BTreeSet<(IpAddr, IpAddr)>,
    errors: BTreeSet<(IpAddr, IpAddr)>,
    parties: BTreeSet<IpAddr>,
    frames: Vec<Vec<u8>>,
}

impl Sent {
    fn learn(&mut self, frame: &[u8]) {
        let Some((t, inner)) = geneve(frame) else {
            return;
        };
        if t.dst_ip != ip(NVAS[0]) {
            return;
        }
        let info = info_of(&inner).expect("the balancer sends IP");
        let (s, d) = (addr(&info.src), addr(&info.dst));
        match &info.icmp {
            Some(IcmpInfo {
                quoted: Some(q), ..
            }) => {
                self.errors.insert((s, d));
                self.parties.extend([addr(&q.src), addr(&q.dst)]);
            }
            _ => {
                self.pairs.insert((s, d));
                self.parties.extend([s, d]);
            }
        }
        self.frames.push(frame.to_vec());
    }

    /// Whether a frame the balancer emitted towards the router is one it
    /// may relay for the attacker: to a party of a flow it sent it; a
    /// packet the way the flow was sent; an ICMP error to the sender of the
    /// packet it quotes, about a packet sent that way, from that flow's
    /// other end or as the balancer forwarded it.
    fn allows(&self, ip_packet: &[u8]) -> Result<(), String> {
        let info = info_of(ip_packet).ok_or("not IP")?;
        let (s, d) = (addr(&info.src), addr(&info.dst));
        if !self.parties.contains(&d) {
            return Err(format!(
                "{s} -> {d}: {d} is no party of the appliance's flows"
            ));
        }
        match &info.icmp {
            Some(IcmpInfo {
                quoted: Some(q), ..
            }) => {
                let (qs, qd) = (addr(&q.src), addr(&q.dst));
                if d != qs {
                    return Err(format!("ICMP error {s} -> {d} about {qs} -> {qd}"));
                }
                if !self.pairs.contains(&(qs, qd)) {
                    return Err(format!(
                        "ICMP error about {qs} -> {qd}, never sent that way"
                    ));
                }
                if s != qd && !self.errors.contains(&(s, d)) {
                    return Err(format!(
                        "ICMP error {s} -> {d}: a source it never forwarded"
                    ));
                }
                Ok(())
            }
            _ if self.pairs.contains(&(s, d)) => Ok(()),
            _ => Err(format!("{s} -> {d}: never sent that way")),
        }
    }
}

/// An appliance's answer to `sent` per the contract (MACs and outer
/// addresses swapped, every other byte kept).
fn echo(sent: &[u8]) -> Vec<u8> {
    let mut f = sent.to_vec();
    f[..6].copy_from_slice(&sent[6..12]);
    f[6..12].copy_from_slice(&sent[..6]);
    f[26..30].copy_from_slice(&sent[30..34]);
    f[30..34].copy_from_slice(&sent[26..30]);
    f
}

/// `inner` (any bytes, an IP packet or not) in Geneve from the attacker to
/// the balancer's tunnel source, addressed to `dst_mac`, with `options`:
/// written out here, so that any inner bytes can be carried.
fn wrap(inner: &[u8], dst_mac: [u8; 6], options: GatewayOptions) -> Vec<u8> {
    let mut g = vec![0u8; 8];
    let mut opts = Vec::new();
    if let Some(id) = options.endpoint_id {
        opts.extend([0x01, 0x39, 0x01, 0x02]);
        opts.extend(id.to_be_bytes());
    }
    if let Some(c) = options.cookie {
        opts.extend([0x01, 0x39, 0x03, 0x01]);
        opts.extend(c.to_be_bytes());
    }
    g[0] = (opts.len() / 4) as u8;
    let proto: u16 = if inner.first().is_some_and(|b| b >> 4 == 6) {
        0x86dd
    } else {
        0x0800
    };
    g[2..4].copy_from_slice(&proto.to_be_bytes());
    g.extend(opts);
    g.extend_from_slice(inner);
    let udp_len = 8 + g.len();
    let mut f = Vec::with_capacity(14 + 20 + udp_len);
    f.extend(dst_mac);
    f.extend(nva_mac(0));
    f.extend([0x08, 0x00]);
    let total = (20 + udp_len) as u16;
    let mut iph = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0];
    iph[2..4].copy_from_slice(&total.to_be_bytes());
    iph.extend(
        v4(NVAS[0])
            .to_string()
            .parse::<std::net::Ipv4Addr>()
            .unwrap()
            .octets(),
    );
    iph.extend(TUNNEL_SRC.parse::<std::net::Ipv4Addr>().unwrap().octets());
    let c = common::csum(0, &iph);
    iph[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend(iph);
    f.extend(50_000u16.to_be_bytes());
    f.extend(6081u16.to_be_bytes());
    f.extend((udp_len as u16).to_be_bytes());
    f.extend([0, 0]);
    f.extend(g);
    f
}

/// `n` returns the attacker makes of what it was sent, to `dst_mac`.
fn fuzz(sent: &Sent, n: usize, dst_mac: [u8; 6], seed: u64) -> Vec<Vec<u8>> {
    let mut m = Mutator::new(seed);
    let seeds: Vec<(wire::encap::TunnelInfo, Vec<u8>, Vec<u8>)> = sent
        .frames
        .iter()
        .map(|f| {
            let (t, inner) = geneve(f).expect("geneve");
            (t, inner, f.clone())
        })
        .collect();
    assert!(seeds.len() >= 10, "the attacker holds flows");
    let cookies: Vec<u32> = seeds.iter().filter_map(|s| s.0.gateway.cookie).collect();
    // Addresses to aim at: the flows' own, the other appliances' flows'
    // (in the same ranges), strangers of both families.
    let mut pool: Vec<IpAddr> = sent.parties.iter().copied().collect();
    pool.extend(
        [
            "198.51.100.200",
            "203.0.113.77",
            "192.0.2.254",
            "10.0.0.1",
            "10.0.1.12",
            "8.8.8.8",
            "2001:db8:c::99",
            "2001:db8:d::77",
            "2001:db8:ff::fe",
            "2606:4700::1111",
        ]
        .into_iter()
        .map(ip),
    );
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let (t, inner, frame) = &seeds[m.below(seeds.len())];
        let info = info_of(inner).expect("IP");
        let v4 = info.src[..12] == wire::ip::mapped_v4([0; 4])[..12];
        let same_family: Vec<IpAddr> = pool.iter().copied().filter(|a| a.is_ipv4() == v4).collect();
        let pick = |m: &mut Mutator| same_family[m.below(same_family.len())];
        let mut options = t.gateway;
        let (s, d) = (addr(&info.src), addr(&info.dst));
        let ports = info.ports.unwrap_or((7, 7));
        let new_inner: Vec<u8> = match m.below(10) {
            // The valid echo, as is.
            0 => {
                out.push({
                    let mut e = echo(frame);
                    e[..6].copy_from_slice(&dst_mac);
                    e
                });
                continue;
            }
            // Other addresses, same payload and ports.
            1 => Packet::tcp(pick(&mut m), pick(&mut m), ports.0, ports.1, ACK)
                .payload(b"forged")
                .ip(),
            // The other direction.
            2 => Packet::tcp(d, s, ports.1, ports.0, SYN | ACK)
                .payload(b"not from the server")
                .ip(),
            3 => Packet::udp(d, s, ports.1, ports.0).payload(b"reply").ip(),
            // An ICMP error with any source and destination, quoting the
            // packet (or a part of it, or more), padded with the
            // appliance's own bytes.
            4..=6 => {
                let (t4, c4) = [(3u8, 1u8), (3, 4), (11, 0), (3, 13)][m.below(4)];
                let (t6, c6) = [(1u8, 4u8), (2, 0), (3, 0), (1, 1)][m.below(4)];
                let (ty, code) = if v4 { (t4, c4) } else { (t6, c6) };
                let src = match m.below(3) {
                    0 => d,
                    1 => s,
                    _ => pick(&mut m),
                };
                let dst = match m.below(3) {
                    0 => s,
                    1 => d,
                    _ => pick(&mut m),
                };
                let quote = m.in_range(20..inner.len() + 1);
                let mut body = inner[..quote].to_vec();
                let pad = [0, 0, 8, 64, 500, 1400][m.below(6)];
                body.extend(m.bytes(pad));
                Packet::icmp(src, dst, ty, code, 1280).payload(&body).ip()
            }
            // The original packet with another protocol or ports.
            7 => Packet::udp(s, d, m.below(65535) as u16, m.below(65535) as u16)
                .payload(b"x")
                .ip(),
            8 => {
                let mut p = inner.clone();
                m.flip_bits(&mut p, 8);
                p
            }
            _ => inner.clone(),
        };
        // The cookie: mostly the flow's own, else another flow's or a
        // guess; now and then another endpoint ID.
        match m.below(8) {
            0 => options.cookie = Some(cookies[m.below(cookies.len())]),
            1 => options.cookie = Some(m.next_u64() as u32),
            2 => options.endpoint_id = Some(m.next_u64()),
            _ => {}
        }
        let mut f = wrap(&new_inner, dst_mac, options);
        if f.len() > 1514 {
            // Beyond the links' MTU: never on the wire.
            continue;
        }
        if m.below(16) == 0 {
            // Bits flipped anywhere past the Ethernet header.
            let mut tail = f[14..].to_vec();
            m.flip_bits(&mut tail, 4);
            f.truncate(14);
            f.extend(tail);
        }
        out.push(f);
    }
    out
}

/// The frames of `out` the balancer (its uplink's MAC `lb_mac`) sent back
/// towards the router (the decapsulated returns): the IP packets.
fn returned(out: &[Vec<u8>], lb_mac: [u8; 6]) -> Vec<Vec<u8>> {
    out.iter()
        .filter(|f| f[..6] == ROUTER_MAC && f[6..12] == lb_mac)
        .map(|f| f[14..].to_vec())
        .collect()
}

/// Checks every return against what the attacker was sent; the number
/// that passed.
fn check(sent: &Sent, back: &[Vec<u8>]) -> usize {
    let bad: Vec<String> = back
        .iter()
        .filter_map(|p| sent.allows(p).err())
        .take(10)
        .collect();
    assert!(bad.is_empty(), "relayed where it must not: {bad:#?}");
    back.len()
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("spillway-gwfuzz-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

fn replay(dir: &Path, cfg: &str, frames: &[Vec<u8>]) -> (Vec<Vec<u8>>, String) {
    let (c, i, o) = (
        dir.join("c.toml"),
        dir.join("in.pcap"),
        dir.join("out.pcap"),
    );
    std::fs::write(&c, cfg).expect("config");
    // 2 µs apart: the whole run within a second, well inside every idle
    // timeout (an entry not confirmed in a later second lives 10 s).
    let timed: Vec<(std::time::Duration, &Vec<u8>)> = frames
        .iter()
        .enumerate()
        .map(|(n, f)| (std::time::Duration::from_micros(2 * n as u64), f))
        .collect();
    testkit::pcap::write_timed(&i, &testkit::pcap::Format::default(), &timed);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_spillway"));
    cmd.args(["replay", "--config"])
        .arg(&c)
        .arg("--input")
        .arg(&i)
        .arg("--output")
        .arg(&o)
        .args(["--neighbour", &format!("{ROUTER}={}", mac_str(ROUTER_MAC))]);
    for (i, a) in NVAS.iter().enumerate() {
        cmd.args(["--neighbour", &format!("{a}={}", mac_str(nva_mac(i)))]);
    }
    let out = common::run_ok(&mut cmd);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    (read_pcap(&o), text)
}

#[test]
fn replay_relays_no_fuzzed_return_outside_the_appliances_flows() {
    let dir = tmp("replay");
    let cfg = config(("net_pcap0", "net_pcap1"), &[]);
    let fwd = forward_traffic(LB_MAC);
    let (out, text) = replay(&dir, &cfg, &fwd);
    assert_eq!(out.len(), fwd.len(), "every forward frame sent on:\n{text}");
    let mut sent = Sent::default();
    for f in &out {
        sent.learn(f);
    }
    // From the appliances' side: the same forward traffic (the same seed,
    // the same cookies), then the fuzz.
    let attack = fuzz(&sent, FUZZED, BACK_MAC, 38);
    let mut frames = fwd.clone();
    frames.extend(attack.iter().cloned());
    let (out2, text2) = replay(&dir, &cfg, &frames);
    let passed = check(&sent, &returned(&out2, LB_MAC));
    assert!(
        passed >= FUZZED / 20,
        "the fuzz reached the relay ({passed} relayed):\n{text2}"
    );
    println!(
        "replay: {} fuzzed returns from {}, {passed} relayed, every one to a party of its flows",
        attack.len(),
        NVAS[0]
    );
    // Over the client-facing uplink: nothing is taken.
    let uplink = fuzz(&sent, FUZZED, LB_MAC, 38);
    let mut frames = fwd;
    frames.extend(uplink);
    let (out3, text3) = replay(&dir, &cfg, &frames);
    assert_eq!(returned(&out3, LB_MAC).len(), 0, "{text3}");
    assert!(text3.contains("drop gateway_return_wrong_port"), "{text3}");
    println!("replay: {FUZZED} fuzzed returns over the uplink, 0 taken");
    let _ = std::fs::remove_dir_all(&dir);
}

// ---------------------------------------------------------------------------
// The daemon: two net_pcap ports on live veths in a namespace of the test's;
// the test is the router on the uplink's peer and the appliances on the
// backend port's peer.

/// A network namespace with two veth pairs (`uA`–`uB`, `bA`–`bB`), removed
/// when dropped.
struct Netns(String);

impl Netns {
    fn new() -> Netns {
        let name = format!("spwgf{}", std::process::id());
        let _ = Command::new("ip").args(["netns", "del", &name]).output();
        common::run_ok(Command::new("ip").args(["netns", "add", &name]));
        let ns = Netns(name);
        for (a, b) in [("uA", "uB"), ("bA", "bB")] {
            ns.ip(&["link", "add", a, "type", "veth", "peer", "name", b]);
            for i in [a, b] {
                ns.ip(&["link", "set", i, "up"]);
            }
        }
        ns.sysctl("net.ipv6.conf.all.disable_ipv6=1");
        ns
    }

    fn ip(&self, args: &[&str]) {
        common::run_ok(Command::new("ip").arg("-n").arg(&self.0).args(args));
    }

    /// Sets a sysctl in the namespace.
    fn sysctl(&self, setting: &str) {
        common::run_ok(
            Command::new("ip").args(["netns", "exec", &self.0, "sysctl", "-q", "-w", setting]),
        );
    }

    /// A raw Ethernet channel on interface `iface` of the namespace.
    fn channel(
        &self,
        iface: &'static str,
    ) -> (
        Box<dyn pnet_datalink::DataLinkSender>,
        Box<dyn pnet_datalink::DataLinkReceiver>,
    ) {
        let path = format!("/var/run/netns/{}", self.0);
        std::thread::spawn(move || {
            let fd = std::fs::File::open(&path).expect("open netns");
            nix::sched::setns(&fd, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
            let i = pnet_datalink::interfaces()
                .into_iter()
                .find(|i| i.name == iface)
                .expect("the veth");
            let cfg = pnet_datalink::Config {
                read_timeout: Some(std::time::Duration::from_millis(20)),
                read_buffer_size: 65536,
                write_buffer_size: 65536,
                ..pnet_datalink::Config::default()
            };
            match pnet_datalink::channel(&i, cfg) {
                Ok(pnet_datalink::Channel::Ethernet(tx, rx)) => (tx, rx),
                Ok(_) => panic!("not an Ethernet channel"),
                Err(e) => panic!("{iface}: {e}"),
            }
        })
        .join()
        .expect("namespace thread")
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).output();
    }
}

/// Frames one side heard.
type Heard = std::sync::Arc<std::sync::Mutex<Vec<Vec<u8>>>>;

/// An ARP reply from `mac` (`ip`) to the requester in `req`, if `req` is a
/// request for `ip`.
fn arp_reply(req: &[u8], ip: std::net::Ipv4Addr, mac: [u8; 6]) -> Option<Vec<u8>> {
    let is_request = req.len() >= 42
        && req[12..14] == [0x08, 0x06]
        && req[20..22] == [0, 1]
        && req[38..42] == ip.octets();
    is_request.then(|| {
        let mut r = Vec::with_capacity(42);
        r.extend_from_slice(&req[6..12]);
        r.extend(mac);
        r.extend([0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 2]);
        r.extend(mac);
        r.extend(ip.octets());
        r.extend_from_slice(&req[22..32]);
        r
    })
}

/// What the test's side of one veth heard, answering ARP for `answers`
/// (address, MAC) as it listens, until `stop`; `port_mac` becomes the MAC
/// the daemon's port asks from.
fn listen(
    mut tx: Box<dyn pnet_datalink::DataLinkSender>,
    mut rx: Box<dyn pnet_datalink::DataLinkReceiver>,
    answers: Vec<(std::net::Ipv4Addr, [u8; 6])>,
    (heard, port_mac): (Heard, std::sync::Arc<std::sync::Mutex<Option<[u8; 6]>>>),
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            let Ok(f) = rx.next() else { continue };
            if let Some(r) = answers.iter().find_map(|&(ip, mac)| arp_reply(f, ip, mac)) {
                port_mac
                    .lock()
                    .unwrap()
                    .get_or_insert([f[6], f[7], f[8], f[9], f[10], f[11]]);
                let _ = tx.send_to(&r, None);
            } else if f.len() >= 14 && f[6..12] != ROUTER_MAC && f[6..12] != nva_mac(0) {
                heard.lock().unwrap().push(f.to_vec());
            }
        }
    })
}

/// `spillway stats --json` of the daemon: packets received.
fn rx_packets(socket: &Path) -> u64 {
    let o = Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(["stats", "--json", "--socket"])
        .arg(socket)
        .output()
        .expect("spillway stats");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
    v["traffic"]["rx_packets"].as_u64().unwrap_or(0)
}

/// Sends `frames` on `tx` in chunks of 1000, each once the daemon has taken
/// in what came before (its received count reaches what was sent, or stops
/// growing: an interface may drop a frame under load), with the forward
/// traffic again on `up` every second (its flows stay live and confirmed).
/// How many frames the daemon received meanwhile.
fn send_paced(
    tx: &mut Box<dyn pnet_datalink::DataLinkSender>,
    up: &mut Box<dyn pnet_datalink::DataLinkSender>,
    frames: &[Vec<u8>],
    fwd: &[Vec<u8>],
    socket: &Path,
) -> u64 {
    let start = rx_packets(socket);
    let mut want = start;
    let mut last_fwd = std::time::Instant::now();
    for chunk in frames.chunks(1000) {
        if last_fwd.elapsed() >= std::time::Duration::from_secs(1) {
            for f in fwd {
                up.send_to(f, None).expect("send").expect("sent");
            }
            want += fwd.len() as u64;
            last_fwd = std::time::Instant::now();
        }
        for f in chunk {
            tx.send_to(f, None).expect("send").expect("sent");
        }
        want += chunk.len() as u64;
        let mut got = rx_packets(socket);
        loop {
            std::thread::sleep(std::time::Duration::from_millis(150));
            let now = rx_packets(socket);
            if now >= want || now == got {
                break;
            }
            got = now;
        }
    }
    rx_packets(socket) - start
}

/// The daemon, killed if the test fails before it stops it.
struct Daemon(std::process::Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

#[test]
fn daemon_relays_no_fuzzed_return_outside_the_appliances_flows() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    let dir = tmp("daemon");
    let ns = Netns::new();
    let eal = common::test_eal_args(&[
        "net_pcap0,rx_iface_in=uA,tx_iface=uA",
        "net_pcap1,rx_iface_in=bA,tx_iface=bA",
    ]);
    let socket = dir.join("ctl.sock");
    let cfg = config(("net_pcap0", "net_pcap1"), &eal)
        + &format!("[control]\nsocket = \"{}\"\n", socket.display());
    std::fs::write(dir.join("c.toml"), &cfg).expect("config");
    let (mut up_tx, up_rx) = ns.channel("uB");
    let (mut be_tx, be_rx) = ns.channel("bB");
    let stop = Arc::new(AtomicBool::new(false));
    let (up_heard, be_heard) = (
        Arc::new(Mutex::new(Vec::new())),
        Arc::new(Mutex::new(Vec::new())),
    );
    let router_arp = vec![(ROUTER.parse().unwrap(), ROUTER_MAC)];
    let nva_arp: Vec<_> = NVAS
        .iter()
        .enumerate()
        .map(|(i, a)| (a.parse().unwrap(), nva_mac(i)))
        .collect();
    let (up_answer_tx, _) = ns.channel("uB");
    let (be_answer_tx, _) = ns.channel("bB");
    let (up_mac, be_mac) = (Arc::new(Mutex::new(None)), Arc::new(Mutex::new(None)));
    let listeners = [
        listen(
            up_answer_tx,
            up_rx,
            router_arp,
            (up_heard.clone(), up_mac.clone()),
            stop.clone(),
        ),
        listen(
            be_answer_tx,
            be_rx,
            nva_arp,
            (be_heard.clone(), be_mac.clone()),
            stop.clone(),
        ),
    ];
    let mut daemon = Daemon(
        Command::new("ip")
            .args([
                "netns",
                "exec",
                &ns.0,
                env!("CARGO_BIN_EXE_spillway"),
                "run",
                "--config",
            ])
            .arg(dir.join("c.toml"))
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(dir.join("daemon.log")).expect("log"))
            .spawn()
            .expect("spillway run"),
    );
    let log = || std::fs::read_to_string(dir.join("daemon.log")).unwrap_or_default();

    // The ports' MACs, from the daemon's first ARP requests (it resolves the
    // router and the appliances first).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let (lb_mac, back_mac) = loop {
        if let (Some(u), Some(b)) = (*up_mac.lock().unwrap(), *be_mac.lock().unwrap()) {
            break (u, b);
        }
        assert!(
            daemon.0.try_wait().unwrap().is_none(),
            "daemon exited:\n{}",
            log()
        );
        assert!(
            std::time::Instant::now() < deadline,
            "no ARP request:\n{}",
            log()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    // The forward traffic, until every frame of it reached an appliance.
    let fwd = forward_traffic(lb_mac);
    let mut sent = loop {
        assert!(
            daemon.0.try_wait().unwrap().is_none(),
            "daemon exited:\n{}",
            log()
        );
        for f in &fwd {
            let _ = up_tx.send_to(f, None);
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
        let to_nvas: Vec<Vec<u8>> = be_heard
            .lock()
            .unwrap()
            .iter()
            .filter(|f| geneve(f).is_some())
            .cloned()
            .collect();
        if to_nvas.len() >= fwd.len() {
            let mut sent = Sent::default();
            for f in &to_nvas {
                sent.learn(f);
            }
            break sent;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{} of {} forwarded:\n{}",
            to_nvas.len(),
            fwd.len(),
            log()
        );
    };
    // Of each flow, one frame per distinct packet is enough to fuzz from.
    sent.frames.sort();
    sent.frames.dedup();

    // Over the uplink: nothing is taken.
    up_heard.lock().unwrap().clear();
    let uplink = fuzz(&sent, FUZZED + FUZZED / 20, lb_mac, 39);
    let got = send_paced(&mut up_tx, &mut up_tx_clone(&ns), &uplink, &fwd, &socket);
    assert!(
        got >= FUZZED as u64,
        "the daemon received {got}, not {FUZZED}:\n{}",
        log()
    );
    let back: Vec<Vec<u8>> = returned(&up_heard.lock().unwrap(), lb_mac);
    assert_eq!(back.len(), 0, "returns taken over the uplink");
    println!("daemon: {got} frames received as the fuzz went over the uplink, 0 returns taken");

    // From the appliances' side.
    let attack = fuzz(&sent, FUZZED + FUZZED / 20, back_mac, 40);
    let got = send_paced(&mut be_tx, &mut up_tx, &attack, &fwd, &socket);
    assert!(
        got >= FUZZED as u64,
        "the daemon received {got}, not {FUZZED}:\n{}",
        log()
    );
    std::thread::sleep(std::time::Duration::from_millis(500));
    let back = returned(&up_heard.lock().unwrap(), lb_mac);
    let passed = check(&sent, &back);
    let stats = || {
        let o = Command::new(env!("CARGO_BIN_EXE_spillway"))
            .args(["stats", "--socket"])
            .arg(&socket)
            .output()
            .expect("spillway stats");
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    assert!(
        passed >= FUZZED / 20,
        "the fuzz reached the relay ({passed} relayed):\n{}\nheard on the uplink: {:02x?}",
        stats(),
        up_heard
            .lock()
            .unwrap()
            .iter()
            .take(3)
            .map(|f| f[..14].to_vec())
            .collect::<Vec<_>>()
    );
    println!(
        "daemon: {got} frames received as {} fuzzed its returns, {passed} relayed, every one to a party of its flows",
        NVAS[0]
    );

    stop.store(true, Ordering::Relaxed);
    for l in listeners {
        l.join().expect("listener");
    }
    common::run_ok(Command::new("kill").args(["-TERM", &daemon.0.id().to_string()]));
    let status = daemon.0.wait().expect("wait");
    assert!(status.success(), "daemon: {status}\n{}", log());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A second sender on the uplink's peer (the forward traffic during the
/// uplink phase goes out beside the fuzz).
fn up_tx_clone(ns: &Netns) -> Box<dyn pnet_datalink::DataLinkSender> {
    ns.channel("uB").0
}
