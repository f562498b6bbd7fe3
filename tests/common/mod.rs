//! The packets the binary's tests send, built with `testkit` in this
//! directory's own profile (router -> balancer MACs, TTL 61, IPv4 id 0x1234
//! with DF, IPv6 flow label 0x12345, TCP seq 0x10000000 + source port),
//! pcap files to carry them, and running the programs the tests need with
//! failures that say what happened; `lab` drives the namespace labs.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly
#![allow(dead_code, unused_imports)]

pub mod lab;
pub mod replay;

use std::net::{IpAddr, Ipv4Addr};
use std::process::{Command, Output};

use testkit::packet::Packet;
pub use testkit::packet::{
    ACK, ESP, FIN, ICMP, ICMPV6, PSH, RST, SYN, TCP, UDP, csum, pseudo, sum16, v4, v6,
};
pub use testkit::pcap::{read as read_pcap, write as write_pcap};

/// The balancer's MAC in the test configurations (`[[ports]] mac`).
pub const LB_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
/// The upstream router that hands packets to the balancer.
pub const ROUTER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x77];

/// This directory's profile on top of a kit packet.
fn profile(p: Packet) -> Packet {
    p.macs(ROUTER_MAC, LB_MAC)
        .ttl(61)
        .ident(0x1234)
        .flow_label(0x12345)
}

/// A TCP segment (20-byte header, no options) with its checksum.
pub fn tcp(src: IpAddr, dst: IpAddr, sport: u16, dport: u16, flags: u8, payload: &[u8]) -> Vec<u8> {
    tcp_packet(src, dst, sport, dport, flags, payload).l4_bytes()
}

fn tcp_packet(
    src: IpAddr,
    dst: IpAddr,
    sport: u16,
    dport: u16,
    flags: u8,
    payload: &[u8],
) -> Packet {
    let ack = if flags & ACK != 0 { 0x2000_0000 } else { 0 };
    profile(Packet::tcp(src, dst, sport, dport, flags))
        .seq(0x1000_0000u32.wrapping_add(u32::from(sport)))
        .ack(ack)
        .payload(payload)
}

/// A UDP datagram with its checksum (never 0: RFC 768's 0xffff stands in).
pub fn udp(src: IpAddr, dst: IpAddr, sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    Packet::udp(src, dst, sport, dport)
        .payload(payload)
        .l4_bytes()
}

/// An ICMP (IPv4) message: type, code, rest-of-header word, data.
pub fn icmpv4(msg_type: u8, code: u8, rest: u32, data: &[u8]) -> Vec<u8> {
    let any = IpAddr::V4(Ipv4Addr::UNSPECIFIED);
    Packet::icmp(any, any, msg_type, code, rest)
        .payload(data)
        .l4_bytes()
}

/// An ICMPv6 message (checksum over the pseudo-header).
pub fn icmpv6(src: IpAddr, dst: IpAddr, msg_type: u8, code: u8, rest: u32, data: &[u8]) -> Vec<u8> {
    Packet::icmp(src, dst, msg_type, code, rest)
        .payload(data)
        .l4_bytes()
}

/// An unfragmented IP packet of the addresses' family (IPv4 with DF)
/// carrying `payload` as protocol `proto`.
pub fn ip(src: IpAddr, dst: IpAddr, proto: u8, payload: &[u8]) -> Vec<u8> {
    profile(Packet::raw(src, dst, proto)).payload(payload).ip()
}

/// An Ethernet frame from the router to the balancer around an IP packet.
pub fn eth(ip_packet: &[u8]) -> Vec<u8> {
    testkit::packet::frame(ROUTER_MAC, LB_MAC, &[], ethertype(ip_packet), ip_packet, 0)
}

fn ethertype(ip_packet: &[u8]) -> u16 {
    match ip_packet[0] >> 4 {
        4 => 0x0800,
        6 => 0x86dd,
        v => panic!("IP version {v}"),
    }
}

/// Ethernet/IP/TCP.
pub fn tcp_frame(
    src: IpAddr,
    dst: IpAddr,
    sport: u16,
    dport: u16,
    flags: u8,
    payload: &[u8],
) -> Vec<u8> {
    tcp_packet(src, dst, sport, dport, flags, payload).frame()
}

/// Ethernet/IP/UDP.
pub fn udp_frame(src: IpAddr, dst: IpAddr, sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    profile(Packet::udp(src, dst, sport, dport))
        .payload(payload)
        .frame()
}

/// Ethernet/IP/ICMP (or ICMPv6) echo request.
pub fn echo_frame(src: IpAddr, dst: IpAddr, id: u16, seq: u16) -> Vec<u8> {
    profile(Packet::echo(src, dst, id, seq))
        .payload(b"ping-data")
        .frame()
}

/// Splits the upper-layer bytes `l4` (header included, checksum over the whole
/// datagram) into fragments carrying `chunk` bytes each (a multiple of 8),
/// as Ethernet frames in offset order. IPv4 uses `ident`'s low 16 bits; IPv6
/// uses a fragment extension header.
pub fn fragments(
    src: IpAddr,
    dst: IpAddr,
    proto: u8,
    ident: u32,
    l4: &[u8],
    chunk: usize,
) -> Vec<Vec<u8>> {
    profile(Packet::raw(src, dst, proto))
        .ident(ident)
        .payload(l4)
        .fragments(chunk)
}

// ---------------------------------------------------------------------------
// Running programs: a failure names the command line, how it ended and what
// it printed (a program that is not installed fails to start, and `ip netns
// exec` then says so only on stderr).

/// `cmd` as a shell command line, for messages.
pub fn command_line(cmd: &Command) -> String {
    std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|a| {
            let a = a.to_string_lossy();
            if !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./:=,@%+".contains(c))
            {
                a.into_owned()
            } else {
                format!("'{}'", a.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// How a finished command ended and what it printed.
pub fn report(cmd: &Command, out: &Output) -> String {
    format!(
        "`{}` {}\n--- stdout:\n{}--- stderr:\n{}---",
        command_line(cmd),
        match out.status.code() {
            Some(c) => format!("exited with status {c}"),
            None => format!("ended by {}", out.status),
        },
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs `cmd` to its end; panics naming it when it cannot be started.
pub fn output(cmd: &mut Command) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot run `{}`: {e}", command_line(cmd)))
}

/// Runs `cmd`; panics with [`report`] unless it exits with status 0.
pub fn run_ok(cmd: &mut Command) -> Output {
    let out = output(cmd);
    assert!(out.status.success(), "{}", report(cmd, &out));
    out
}

/// For [`pcap_daemon_config`]'s rule: Ethernet/IPv4/UDP 192.0.2.1:(1000+i)
/// -> 10.0.0.10:53 from the router, UDP checksum zero (the IPv4 header
/// checksum is right: the pipeline relies on it).
pub fn dns_query(i: u16) -> Vec<u8> {
    Packet::udp(v4("192.0.2.1"), v4("10.0.0.10"), 1000 + i, 53)
        .payload(b"quer")
        .udp_checksum(false)
        .dont_frag(false)
        .macs(ROUTER_MAC, PCAP0_MAC)
        .frame()
}

/// The MAC DPDK's `net_pcap` gives the first device a process creates
/// (02:70:63:61:70, "\x02pcap", then the device's index; it cannot be
/// changed): the uplink's of the `net_pcap` daemons below, which takes
/// only frames to it (M55).
pub const PCAP0_MAC: [u8; 6] = [0x02, 0x70, 0x63, 0x61, 0x70, 0x00];

/// The EAL arguments of a test daemon without hugepages (256 MB of
/// ordinary memory, no PCI, no telemetry, EAL's warnings only), with
/// `vdevs` (each what follows `--vdev=`).
pub fn test_eal_args<S: AsRef<str>>(vdevs: &[S]) -> Vec<String> {
    let mut a: Vec<String> = [
        "--no-huge",
        "--no-shconf",
        "-m",
        "256",
        "--no-pci",
        "--no-telemetry",
        "--log-level=lib.eal:warning",
    ]
    .map(String::from)
    .to_vec();
    a.extend(vdevs.iter().map(|v| format!("--vdev={}", v.as_ref())));
    a
}

/// The node, data plane and ports of a test daemon with `--no-huge`: one
/// worker on core 1, a small pool and table, the uplink (10.0.0.2/24) on
/// `uplink` and the backend port (10.0.1.2/30, its next hop a static MAC) on
/// `backend`, each `(device, what follows --vdev=)`. Rules, services and
/// `[control]` are the caller's.
pub fn daemon_base(uplink: (&str, String), backend: (&str, String)) -> testkit::config::Config {
    use testkit::config::{Config, node, port, strings};
    let eal_args = test_eal_args(&[uplink.1, backend.1]);
    Config::new()
        // Exit at the first SIGTERM (the shutdown test sets its own).
        .node(node("t", "r", "z").str("shutdown_drain", "0s"))
        .dataplane("management_core", 0)
        .dataplane("worker_cores", "[1]")
        .dataplane("mbufs", 4095)
        .dataplane("queue_descriptors", 256)
        .dataplane("flow_table_capacity", 4096)
        .dataplane("eal_args", strings(&eal_args))
        .port(port("up", uplink.0, "uplink").strs("addresses", &["10.0.0.2/24"]))
        .port(
            port("be", backend.0, "backend")
                .strs("addresses", &["10.0.1.2/30"])
                .str("gateway_mac", "02:00:00:00:00:fe"),
        )
}

/// [`daemon_base`] on two `net_pcap` ports in `dir`: the uplink reads
/// `uplink_rx` (in `dir`) and writes `up-out.pcap`, the backend port reads
/// `empty.pcap` and writes `out.pcap`.
pub fn pcap_daemon_base(dir: &std::path::Path, uplink_rx: &str) -> testkit::config::Config {
    let d = dir.display();
    daemon_base(
        (
            "net_pcap0",
            format!("net_pcap0,rx_pcap={d}/{uplink_rx},tx_pcap={d}/up-out.pcap"),
        ),
        (
            "net_pcap1",
            format!("net_pcap1,rx_pcap={d}/empty.pcap,tx_pcap={d}/out.pcap"),
        ),
    )
    // The tests' bursts of new flows in one second all get entries,
    // whatever the default budget for this small table.
    .dataplane("new_flow_budget", 100000)
}

/// A daemon on two `net_pcap` ports in `dir` (`in.pcap` in on the uplink,
/// `up-out.pcap` and `out.pcap` out), with `--no-huge`: UDP rule `dns` on
/// 10.0.0.10:53 to a GUE service named `service` of two backends, and its
/// control socket `ctl.sock` (`watch`: `watch_config`).
pub fn pcap_daemon_config(dir: &std::path::Path, service: &str, watch: bool) -> String {
    use testkit::config::{endpoint_list, group, rule, service as service_table};
    let d = dir.display();
    pcap_daemon_base(dir, "in.pcap")
        .rule(rule("dns", &["10.0.0.10"], "UDP", "53", service).set("ports", 53))
        .service(service_table(service, "gue").child(
            group("a", "r", "z").set("endpoints", endpoint_list(&["10.0.1.11", "10.0.1.12"])),
        ))
        .raw(&format!(
            "[control]\nsocket = \"{d}/ctl.sock\"\nwatch_config = {watch}\n"
        ))
        .build()
}

/// `spillway ARGS` (the binary under test), its output.
pub fn spillway(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(args)
        .output()
        .expect("run spillway")
}

/// An output's stdout, then its stderr, as text.
pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A fresh directory for one test's daemon (its configuration, pcaps,
/// socket, log), holding `in.pcap` with `frames` and an empty `empty.pcap`.
pub fn pcap_daemon_dir(name: &str, frames: &[Vec<u8>]) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("spillway-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    write_pcap(&dir.join("in.pcap"), frames);
    write_pcap(&dir.join("empty.pcap"), &[]);
    dir
}

/// [`pcap_daemon_config`] with the uplink replaying `in.pcap` without end
/// (a tool or query started later still sees traffic) and nothing written
/// (net_pcap drops what it sends without a tx file).
pub fn looping_pcap_daemon_config(dir: &std::path::Path, service: &str) -> String {
    let d = dir.display();
    let text = pcap_daemon_config(dir, service, false)
        .replace(
            &format!("rx_pcap={d}/in.pcap,tx_pcap={d}/up-out.pcap"),
            &format!("rx_pcap={d}/in.pcap,infinite_rx=1"),
        )
        .replace(
            &format!("rx_pcap={d}/empty.pcap,tx_pcap={d}/out.pcap"),
            &format!("rx_pcap={d}/empty.pcap"),
        );
    assert!(
        text.contains("infinite_rx") && !text.contains("out.pcap"),
        "{text}"
    );
    text
}

/// A daemon a test started, killed when the test ends however it ends,
/// and its directory removed.
pub struct Daemon {
    pub child: std::process::Child,
    pub dir: std::path::PathBuf,
}

impl Daemon {
    /// `spillway run --config cfg`, its output dropped, or with `log` its
    /// log (at `info`) written there; `dir` is removed when it ends.
    pub fn start(
        dir: &std::path::Path,
        cfg: &std::path::Path,
        log: Option<&std::path::Path>,
    ) -> Daemon {
        use std::process::Stdio;
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_spillway"));
        cmd.args(["run", "--config", cfg.to_str().expect("utf-8")])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if let Some(log) = log {
            cmd.env("RUST_LOG", "info")
                .stderr(std::fs::File::create(log).expect("log file"));
        }
        Daemon {
            child: cmd.spawn().expect("start spillway run"),
            dir: dir.to_owned(),
        }
    }
}

impl Daemon {
    /// Waits (30 s at most) until its control socket at `socket` answers
    /// `status`; fails with its log (`log`) if it exits first.
    pub fn wait_answering(&mut self, socket: &std::path::Path, log: &std::path::Path) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let socket = socket.to_str().expect("utf-8");
        while !spillway(&["status", "--socket", socket]).status.success() {
            if let Ok(Some(s)) = self.child.try_wait() {
                panic!(
                    "spillway run exited: {s}\n{}",
                    std::fs::read_to_string(log).unwrap_or_default()
                );
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the daemon never answered"
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
