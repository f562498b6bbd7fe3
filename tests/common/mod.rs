//! Crafting test packets byte by byte (Ethernet, IPv4, IPv6 with fragment
//! headers, TCP, UDP, ICMP, ICMPv6) with correct checksums, independently of
//! the `wire` crate under test, and pcap files to carry them; running the
//! programs the tests need with failures that say what happened.

#![allow(dead_code)]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use pcap_file::pcap::{PcapPacket, PcapReader, PcapWriter};

/// The balancer's MAC in the test configurations (`[[ports]] mac`).
pub const LB_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
/// The upstream router that hands packets to the balancer.
pub const ROUTER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x77];

pub const TCP: u8 = 6;
pub const UDP: u8 = 17;
pub const ICMP: u8 = 1;
pub const ICMPV6: u8 = 58;
pub const ESP: u8 = 50;

/// TCP flag bits.
pub const FIN: u8 = 0x01;
pub const SYN: u8 = 0x02;
pub const RST: u8 = 0x04;
pub const PSH: u8 = 0x08;
pub const ACK: u8 = 0x10;

pub fn v4(s: &str) -> IpAddr {
    IpAddr::V4(s.parse::<Ipv4Addr>().expect("IPv4 address"))
}

pub fn v6(s: &str) -> IpAddr {
    IpAddr::V6(s.parse::<Ipv6Addr>().expect("IPv6 address"))
}

/// Adds `data` as big-endian 16-bit words to a one's-complement sum.
pub fn sum16(mut sum: u32, data: &[u8]) -> u32 {
    for c in data.chunks(2) {
        sum += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
    }
    sum
}

/// The Internet checksum of `data` on top of a partial sum.
pub fn csum(sum: u32, data: &[u8]) -> u16 {
    let mut sum = sum16(sum, data);
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

fn octets(a: IpAddr) -> Vec<u8> {
    match a {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    }
}

/// The pseudo-header sum of TCP, UDP and ICMPv6 (IPv4 or IPv6 form).
pub fn pseudo(src: IpAddr, dst: IpAddr, proto: u8, len: usize) -> u32 {
    let mut s = sum16(0, &octets(src));
    s = sum16(s, &octets(dst));
    s + u32::from(proto) + (len as u32 & 0xffff) + (len as u32 >> 16)
}

/// A TCP segment (20-byte header, no options) with its checksum.
pub fn tcp(src: IpAddr, dst: IpAddr, sport: u16, dport: u16, flags: u8, payload: &[u8]) -> Vec<u8> {
    let mut t = vec![0u8; 20];
    t[0..2].copy_from_slice(&sport.to_be_bytes());
    t[2..4].copy_from_slice(&dport.to_be_bytes());
    t[4..8].copy_from_slice(&0x1000_0000u32.wrapping_add(u32::from(sport)).to_be_bytes());
    if flags & ACK != 0 {
        t[8..12].copy_from_slice(&0x2000_0000u32.to_be_bytes());
    }
    t[12] = 0x50;
    t[13] = flags;
    t[14..16].copy_from_slice(&65535u16.to_be_bytes());
    t.extend_from_slice(payload);
    let c = csum(pseudo(src, dst, TCP, t.len()), &t);
    t[16..18].copy_from_slice(&c.to_be_bytes());
    t
}

/// A UDP datagram with its checksum (never 0: RFC 768's 0xffff stands in).
pub fn udp(src: IpAddr, dst: IpAddr, sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let len = 8 + payload.len();
    let mut u = vec![0u8; 8];
    u[0..2].copy_from_slice(&sport.to_be_bytes());
    u[2..4].copy_from_slice(&dport.to_be_bytes());
    u[4..6].copy_from_slice(&(len as u16).to_be_bytes());
    u.extend_from_slice(payload);
    let c = match csum(pseudo(src, dst, UDP, len), &u) {
        0 => 0xffff,
        c => c,
    };
    u[6..8].copy_from_slice(&c.to_be_bytes());
    u
}

/// An ICMP (IPv4) message: type, code, rest-of-header word, data.
pub fn icmpv4(msg_type: u8, code: u8, rest: u32, data: &[u8]) -> Vec<u8> {
    let mut m = vec![msg_type, code, 0, 0];
    m.extend_from_slice(&rest.to_be_bytes());
    m.extend_from_slice(data);
    let c = csum(0, &m);
    m[2..4].copy_from_slice(&c.to_be_bytes());
    m
}

/// An ICMPv6 message (checksum over the pseudo-header).
pub fn icmpv6(src: IpAddr, dst: IpAddr, msg_type: u8, code: u8, rest: u32, data: &[u8]) -> Vec<u8> {
    let mut m = vec![msg_type, code, 0, 0];
    m.extend_from_slice(&rest.to_be_bytes());
    m.extend_from_slice(data);
    let c = csum(pseudo(src, dst, ICMPV6, m.len()), &m);
    m[2..4].copy_from_slice(&c.to_be_bytes());
    m
}

/// An IPv4 packet. `frag` is the flags/fragment-offset word (0x4000: DF;
/// 0x2000 | offset/8: more fragments).
pub fn ipv4(
    src: Ipv4Addr,
    dst: Ipv4Addr,
    proto: u8,
    ident: u16,
    frag: u16,
    payload: &[u8],
) -> Vec<u8> {
    let total = (20 + payload.len()) as u16;
    let mut ip = vec![0x45, 0];
    ip.extend_from_slice(&total.to_be_bytes());
    ip.extend_from_slice(&ident.to_be_bytes());
    ip.extend_from_slice(&frag.to_be_bytes());
    ip.extend_from_slice(&[61, proto, 0, 0]);
    ip.extend_from_slice(&src.octets());
    ip.extend_from_slice(&dst.octets());
    let c = csum(0, &ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    ip.extend_from_slice(payload);
    ip
}

/// An IPv6 packet (traffic class 0, flow label 0x12345, hop limit 61).
pub fn ipv6(src: Ipv6Addr, dst: Ipv6Addr, next_header: u8, payload: &[u8]) -> Vec<u8> {
    let mut ip = vec![0x60, 0x01, 0x23, 0x45];
    ip.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    ip.extend_from_slice(&[next_header, 61]);
    ip.extend_from_slice(&src.octets());
    ip.extend_from_slice(&dst.octets());
    ip.extend_from_slice(payload);
    ip
}

/// An unfragmented IP packet of the addresses' family (IPv4 with DF).
pub fn ip(src: IpAddr, dst: IpAddr, proto: u8, payload: &[u8]) -> Vec<u8> {
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => ipv4(s, d, proto, 0x1234, 0x4000, payload),
        (IpAddr::V6(s), IpAddr::V6(d)) => ipv6(s, d, proto, payload),
        _ => panic!("mixed address families"),
    }
}

/// An Ethernet frame from the router to the balancer around an IP packet.
pub fn eth(ip_packet: &[u8]) -> Vec<u8> {
    let ethertype: u16 = match ip_packet[0] >> 4 {
        4 => 0x0800,
        6 => 0x86dd,
        v => panic!("IP version {v}"),
    };
    let mut f = LB_MAC.to_vec();
    f.extend_from_slice(&ROUTER_MAC);
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(ip_packet);
    f
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
    eth(&ip(
        src,
        dst,
        TCP,
        &tcp(src, dst, sport, dport, flags, payload),
    ))
}

/// Ethernet/IP/UDP.
pub fn udp_frame(src: IpAddr, dst: IpAddr, sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    eth(&ip(src, dst, UDP, &udp(src, dst, sport, dport, payload)))
}

/// Ethernet/IPv4/ICMP echo request.
pub fn echo_frame(src: IpAddr, dst: IpAddr, id: u16, seq: u16) -> Vec<u8> {
    let rest = (u32::from(id) << 16) | u32::from(seq);
    match (src, dst) {
        (IpAddr::V4(_), IpAddr::V4(_)) => {
            eth(&ip(src, dst, ICMP, &icmpv4(8, 0, rest, b"ping-data")))
        }
        _ => eth(&ip(
            src,
            dst,
            ICMPV6,
            &icmpv6(src, dst, 128, 0, rest, b"ping-data"),
        )),
    }
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
    assert_eq!(chunk % 8, 0, "fragment payloads are multiples of 8 bytes");
    let n = l4.len().div_ceil(chunk);
    (0..n)
        .map(|i| {
            let off = i * chunk;
            let part = &l4[off..(off + chunk).min(l4.len())];
            let more = i + 1 < n;
            let ip = match (src, dst) {
                (IpAddr::V4(s), IpAddr::V4(d)) => {
                    let frag = (if more { 0x2000 } else { 0 }) | (off / 8) as u16;
                    ipv4(s, d, proto, ident as u16, frag, part)
                }
                (IpAddr::V6(s), IpAddr::V6(d)) => {
                    let mut fh = vec![proto, 0];
                    fh.extend_from_slice(
                        &(((off / 8) as u16) << 3 | u16::from(more)).to_be_bytes(),
                    );
                    fh.extend_from_slice(&ident.to_be_bytes());
                    fh.extend_from_slice(part);
                    ipv6(s, d, 44, &fh)
                }
                _ => panic!("mixed address families"),
            };
            eth(&ip)
        })
        .collect()
}

pub fn write_pcap(path: &Path, frames: &[Vec<u8>]) {
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

pub fn read_pcap(path: &Path) -> Vec<Vec<u8>> {
    let mut r = PcapReader::new(std::fs::File::open(path).expect("open")).expect("pcap reader");
    let mut out = Vec::new();
    while let Some(p) = r.next_packet() {
        out.push(p.expect("packet").data.into_owned());
    }
    out
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
