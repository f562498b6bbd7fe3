//! Packet sets for the `perf/` harness (M46): one minimum-size frame per
//! flow (two for connection churn), all to one VIP, written as a pcap that
//! DPDK's `net_pcap` replays forever (`infinite_rx=1`).
//!
//! Flows differ by client address and port, so they hash apart: flow `i`
//! comes from `100.64.0.0 + (i mod 2^22)` (IPv6: `2001:db8:c11e::` + `i`)
//! and a port derived from `i`. Every frame carries valid IPv4 header and
//! TCP/UDP checksums (the pipeline checks the IPv4 one). IPv4 frames are
//! exactly 60 bytes (Ethernet minimum without FCS, zero padded); IPv6 TCP
//! frames are 74 bytes (their headers alone exceed 60).
//!
//! [`Kind::Gateway`] sets are gateway-mode traffic (M31): not to a VIP but
//! between clients and servers anywhere, routed through the balancer by a
//! gateway endpoint, whose gratuitous ARP opens the set (the balancer
//! recognises the endpoint's frames by the MAC it resolved).

pub mod flood;

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use pcap_file::pcap::{PcapPacket, PcapWriter};

/// Ethernet header length.
pub const ETH_LEN: usize = 14;
/// The Ethernet minimum frame length without FCS.
pub const MIN_FRAME: usize = 60;

/// What each flow's packet is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    /// IPv4 TCP segment with only ACK set (an established flow).
    Ack,
    /// IPv4 TCP SYN without options (a new connection).
    Syn,
    /// IPv4 UDP datagram with an 18-byte zero payload.
    Udp,
    /// IPv6 TCP segment with only ACK set (`ipv6` also works, as in
    /// perf/BARE-METAL.md).
    #[value(alias = "ipv6")]
    V6,
    /// Connection churn: per flow an IPv4 TCP SYN, and later in the set a
    /// RST+ACK. Replayed, every SYN finds its flow closed by the RST and
    /// opens a new one: two packets per flow, one flow entry created per
    /// SYN.
    Churn,
    /// Gateway mode: the gateway endpoint's gratuitous ARP, then per flow
    /// an IPv4 TCP ACK from a client to a server (any address, not the
    /// balancer's), and later in the set the server's ACK back: two packets
    /// per flow, every frame from the endpoint's MAC.
    Gateway,
    /// A SYN flood beside established flows (`synflood`): per flow, in
    /// [`SYNFLOOD_ROUNDS`] rounds, its IPv4 TCP ACK (as [`Kind::Ack`]) each
    /// followed by [`SYNFLOOD_SYNS_PER_ACK`] SYNs from spoofed sources
    /// ([`spoofed`]), every SYN of the set from a source (address and port)
    /// no other packet of the set has.
    #[value(name = "synflood")]
    SynFlood,
}

/// Rounds of a [`Kind::SynFlood`] set: each of its flows sends this many ACKs
/// per pass over the set.
pub const SYNFLOOD_ROUNDS: u32 = 16;
/// Spoofed SYNs after every ACK of a [`Kind::SynFlood`] set: with 4,096 flows
/// a pass holds 131,072 distinct spoofed sources, more than the slots of
/// the benchmark's flow table (65,536 entries and 25 % headroom), so when
/// the set comes round again a SYN's half-open entry has almost always been
/// displaced by the newer ones and the flood keeps creating entries.
pub const SYNFLOOD_SYNS_PER_ACK: u32 = 2;

impl Kind {
    /// Whether the kind's packets are IPv6.
    pub fn is_v6(self) -> bool {
        self == Kind::V6
    }

    /// Packets per flow in a set of this kind.
    pub fn packets_per_flow(self) -> u32 {
        match self {
            Kind::Churn | Kind::Gateway => 2,
            Kind::SynFlood => SYNFLOOD_ROUNDS * (1 + SYNFLOOD_SYNS_PER_ACK),
            _ => 1,
        }
    }

    /// Frame length of every packet of this kind.
    pub fn frame_len(self) -> usize {
        match self {
            Kind::V6 => ETH_LEN + 40 + 20,
            _ => MIN_FRAME,
        }
    }

    /// The VIP used when none is given.
    pub fn default_vip(self) -> IpAddr {
        if self.is_v6() {
            IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0x18, 0, 0, 0, 0, 0x10))
        } else {
            IpAddr::V4(Ipv4Addr::new(198, 18, 10, 10))
        }
    }
}

/// A packet set: `flows` flows of `kind` to `vip:dport`.
#[derive(Debug, Clone)]
pub struct Spec {
    /// Packet kind.
    pub kind: Kind,
    /// Distinct flows (one packet each; two for churn).
    pub flows: u32,
    /// Destination address; of the kind's IP version.
    pub vip: IpAddr,
    /// Destination port.
    pub dport: u16,
    /// Ethernet source (the router in front of the balancer).
    pub src_mac: [u8; 6],
    /// Ethernet destination (the balancer's port).
    pub dst_mac: [u8; 6],
}

/// Router MAC used as the frames' source by default.
pub const DEFAULT_SRC_MAC: [u8; 6] = [0x02, 0x00, 0x00, 0x00, 0x00, 0xfe];
/// Balancer MAC used as the frames' destination by default.
pub const DEFAULT_DST_MAC: [u8; 6] = [0x02, 0x00, 0x00, 0x00, 0x00, 0x01];
/// The gateway endpoint of [`Kind::Gateway`] sets: the router in front of
/// the balancer (its MAC is [`DEFAULT_SRC_MAC`]), announced by the set's
/// first frame.
pub const GATEWAY_ENDPOINT: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
/// Servers of [`Kind::Gateway`] flows: `198.19.0.0 + (i mod 2^16)`, in the
/// benchmarking range and never the balancer's.
const GATEWAY_SERVERS: u32 = 0xc613_0000;

const ADDR_BITS: u32 = 22;
const ADDR_MASK: u32 = (1 << ADDR_BITS) - 1;
const FIRST_PORT: u32 = 1024;
const PORTS: u32 = 65536 - FIRST_PORT;

/// Client address and port of flow `i` (distinct for every `i`).
#[allow(
    clippy::cast_possible_truncation,
    reason = "flow bits, checksum folds and small frame lengths"
)]
pub fn client(kind: Kind, i: u32) -> (IpAddr, u16) {
    let a = i & ADDR_MASK;
    // For a fixed address, `i >> 22` (at most 1023) picks distinct ports.
    let port = FIRST_PORT + ((i >> ADDR_BITS) + a.wrapping_mul(7919)) % PORTS;
    let addr = if kind.is_v6() {
        IpAddr::V6(Ipv6Addr::new(
            0x2001,
            0xdb8,
            0xc11e,
            0,
            0,
            0,
            (i >> 16) as u16,
            i as u16,
        ))
    } else {
        IpAddr::V4(Ipv4Addr::from(u32::from(Ipv4Addr::new(100, 64, 0, 0)) + a))
    };
    (addr, port as u16)
}

/// Source address and port of the spoofed SYN `j` of a [`Kind::SynFlood`]
/// set: `172.16.0.0 + (j mod 2^20)`, apart from every [`client`] address,
/// with a port derived from `j` as [`client`]'s (distinct for every `j`
/// below 2^20 x 1,023).
#[allow(clippy::cast_possible_truncation, reason = "a port below 65,536")]
pub fn spoofed(j: u32) -> (Ipv4Addr, u16) {
    const BITS: u32 = 20;
    let a = j & ((1 << BITS) - 1);
    let port = FIRST_PORT + ((j >> BITS) + a.wrapping_mul(7919)) % PORTS;
    (
        Ipv4Addr::from(u32::from(Ipv4Addr::new(172, 16, 0, 0)) + a),
        port as u16,
    )
}

/// Server address of [`Kind::Gateway`] flow `i` (its port is the set's
/// `dport`).
pub fn server(i: u32) -> Ipv4Addr {
    Ipv4Addr::from(GATEWAY_SERVERS + (i & 0xffff))
}

fn add(mut acc: u32, data: &[u8]) -> u32 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        acc += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        acc += u32::from(*last) << 8;
    }
    acc
}

#[allow(
    clippy::cast_possible_truncation,
    reason = "flow bits, checksum folds and small frame lengths"
)]
fn fold(mut acc: u32) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    !(acc as u16)
}

/// The Internet checksum (RFC 1071) of `data`.
pub fn checksum(data: &[u8]) -> u16 {
    fold(add(0, data))
}

#[allow(
    clippy::cast_possible_truncation,
    reason = "flow bits, checksum folds and small frame lengths"
)]
fn pseudo_sum(src: &IpAddr, dst: &IpAddr, proto: u8, len: usize) -> u32 {
    let mut acc = 0;
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            acc = add(acc, &s.octets());
            acc = add(acc, &d.octets());
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            acc = add(acc, &s.octets());
            acc = add(acc, &d.octets());
        }
        _ => {}
    }
    acc + u32::from(proto) + len as u32
}

impl Spec {
    /// A set with the default MACs.
    pub fn new(kind: Kind, flows: u32, vip: IpAddr, dport: u16) -> Result<Spec> {
        if vip.is_ipv6() != kind.is_v6() {
            bail!(
                "VIP {vip} is not of the IP version of kind {:?} (IPv{})",
                kind,
                if kind.is_v6() { 6 } else { 4 }
            );
        }
        if flows == 0 {
            bail!("a packet set needs at least one flow");
        }
        // Spoofed sources stay distinct up to 2^20 x 1,023 SYNs.
        if kind == Kind::SynFlood && flows > 1 << 24 {
            bail!("a synflood set takes at most 2^24 flows");
        }
        Ok(Spec {
            kind,
            flows,
            vip,
            dport,
            src_mac: DEFAULT_SRC_MAC,
            dst_mac: DEFAULT_DST_MAC,
        })
    }

    /// Writes flow `i`'s frame into `out` (cleared first); for
    /// [`Kind::Churn`], its SYN.
    pub fn frame(&self, i: u32, out: &mut Vec<u8>) {
        self.frame_with(i, false, out);
    }

    /// Writes flow `i`'s frame into `out`; `second`: its second packet,
    /// the RST+ACK that ends a churn flow or a gateway flow's answer from
    /// the server; for [`Kind::SynFlood`], the spoofed SYN `i` instead (see
    /// [`spoofed`]).
    #[allow(
        clippy::cast_possible_truncation,
        reason = "flow bits, checksum folds and small frame lengths"
    )]
    pub fn frame_with(&self, i: u32, second: bool, out: &mut Vec<u8>) {
        let (client, cport) = client(self.kind, i);
        // A gateway flow's second packet goes the other way.
        let (src, sport, dst, dport) = match (self.kind, second) {
            (Kind::Gateway, false) => (client, cport, IpAddr::V4(server(i)), self.dport),
            (Kind::Gateway, true) => (IpAddr::V4(server(i)), self.dport, client, cport),
            (Kind::SynFlood, true) => {
                let (a, p) = spoofed(i);
                (IpAddr::V4(a), p, self.vip, self.dport)
            }
            _ => (client, cport, self.vip, self.dport),
        };
        let close = second && self.kind == Kind::Churn;
        out.clear();
        out.extend_from_slice(&self.dst_mac);
        out.extend_from_slice(&self.src_mac);
        let (proto, l4_len) = match self.kind {
            Kind::Udp => (17u8, 8 + 18),
            _ => (6u8, 20),
        };
        match (src, dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                out.extend_from_slice(&[0x08, 0x00]);
                let ip_start = out.len();
                let total = (20 + l4_len) as u16;
                out.extend_from_slice(&[0x45, 0]);
                out.extend_from_slice(&total.to_be_bytes());
                out.extend_from_slice(&(i as u16).to_be_bytes()); // identification
                out.extend_from_slice(&[0x40, 0]); // DF
                out.extend_from_slice(&[64, proto, 0, 0]);
                out.extend_from_slice(&s.octets());
                out.extend_from_slice(&d.octets());
                let c = checksum(&out[ip_start..]);
                out[ip_start + 10..ip_start + 12].copy_from_slice(&c.to_be_bytes());
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                out.extend_from_slice(&[0x86, 0xdd]);
                out.extend_from_slice(&[0x60, 0, 0, 0]);
                out.extend_from_slice(&(l4_len as u16).to_be_bytes());
                out.extend_from_slice(&[proto, 64]);
                out.extend_from_slice(&s.octets());
                out.extend_from_slice(&d.octets());
            }
            // `Spec::new` keeps the VIP of the kind's version.
            _ => unreachable!("client and VIP of different IP versions"),
        }
        let l4_start = out.len();
        out.extend_from_slice(&sport.to_be_bytes());
        out.extend_from_slice(&dport.to_be_bytes());
        let csum_at = if proto == 17 {
            out.extend_from_slice(&(l4_len as u16).to_be_bytes());
            out.extend_from_slice(&[0, 0]);
            out.resize(l4_start + l4_len, 0);
            l4_start + 6
        } else {
            let seq = i.wrapping_mul(2_654_435_761);
            let syn = matches!(self.kind, Kind::Syn | Kind::Churn) && !close
                || self.kind == Kind::SynFlood && second;
            let (seq, flags): (u32, u8) = match (syn, close) {
                (true, _) => (seq, 0x02),
                (false, true) => (seq.wrapping_add(1), 0x14), // RST+ACK
                (false, false) => (seq, 0x10),
            };
            let ack = if syn { 0 } else { seq ^ 0x5a5a_5a5a };
            // The server's answer: its sequence is what the client
            // acknowledged, and it acknowledges the client's.
            let (seq, ack) = if second && self.kind == Kind::Gateway {
                (ack, seq)
            } else {
                (seq, ack)
            };
            out.extend_from_slice(&seq.to_be_bytes());
            out.extend_from_slice(&ack.to_be_bytes());
            out.extend_from_slice(&[0x50, flags]);
            out.extend_from_slice(&64240u16.to_be_bytes()); // window
            out.extend_from_slice(&[0, 0, 0, 0]); // checksum, urgent pointer
            l4_start + 16
        };
        let sum = add(pseudo_sum(&src, &dst, proto, l4_len), &out[l4_start..]);
        let mut c = fold(sum);
        if proto == 17 && c == 0 {
            c = 0xffff;
        }
        out[csum_at..csum_at + 2].copy_from_slice(&c.to_be_bytes());
        if out.len() < MIN_FRAME {
            out.resize(MIN_FRAME, 0);
        }
    }

    /// Writes the gateway endpoint's gratuitous ARP (from the frames'
    /// source MAC) into `out`, padded to the Ethernet minimum.
    pub fn gratuitous_arp(&self, out: &mut Vec<u8>) -> Result<()> {
        out.clear();
        out.resize(MIN_FRAME, 0);
        wire::neighbour::gratuitous_arp(out, self.src_mac, GATEWAY_ENDPOINT)
            .map_err(|e| anyhow::anyhow!("gratuitous ARP: {e:?}"))?;
        Ok(())
    }

    /// Writes the flows `i` with `i % shards == shard` as a pcap to `w`;
    /// returns how many packets it wrote.
    pub fn write_pcap<W: Write>(&self, w: W, shard: u32, shards: u32) -> Result<u64> {
        if shards == 0 || shard >= shards {
            bail!("shard {shard} of {shards}");
        }
        let mut writer = PcapWriter::new(w).context("cannot write the pcap header")?;
        let mut buf = Vec::with_capacity(128);
        let mut n = 0u64;
        // Churn sets: every flow's SYN, then every flow's RST; gateway sets
        // every flow's first packet, then every answer.
        let passes: &[bool] = if self.kind.packets_per_flow() == 2 {
            &[false, true]
        } else {
            &[false]
        };
        // Each frame at `n` µs: the timestamps count the packets.
        let mut put = |buf: &[u8]| -> Result<()> {
            let ts = Duration::from_micros(n);
            writer
                .write_packet(&PcapPacket::new(ts, u32::try_from(buf.len())?, buf))
                .context("cannot write a packet")?;
            n += 1;
            Ok(())
        };
        if self.kind == Kind::SynFlood {
            // Per round, every flow's ACK, each followed by its spoofed SYNs
            // (numbered through the whole set, so none repeats). A flow and
            // its SYNs stay in one shard, as RSS would keep the flow.
            let per = SYNFLOOD_SYNS_PER_ACK;
            for round in 0..SYNFLOOD_ROUNDS {
                for i in (shard..self.flows).step_by(shards as usize) {
                    let t = u64::from(round) * u64::from(self.flows) + u64::from(i);
                    for k in 0..=per {
                        if k == 0 {
                            self.frame_with(i, false, &mut buf);
                        } else {
                            let j = u32::try_from(t * u64::from(per) + u64::from(k - 1))
                                .context("too many spoofed SYNs for one set")?;
                            self.frame_with(j, true, &mut buf);
                        }
                        put(&buf)?;
                    }
                }
            }
        } else {
            if self.kind == Kind::Gateway {
                // The endpoint announces itself first (every shard: each is a
                // port's whole input).
                self.gratuitous_arp(&mut buf)?;
                put(&buf)?;
            }
            for &close in passes {
                for i in (shard..self.flows).step_by(shards as usize) {
                    self.frame_with(i, close, &mut buf);
                    put(&buf)?;
                }
            }
        }
        writer
            .into_writer()
            .flush()
            .context("cannot flush the pcap")?;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{HashMap, HashSet};

    fn spec(kind: Kind, flows: u32) -> Spec {
        Spec::new(kind, flows, kind.default_vip(), 80).unwrap()
    }

    #[test]
    fn clients_are_distinct() {
        for kind in [Kind::Ack, Kind::V6] {
            let seen: HashSet<_> = (0..70_000).map(|i| client(kind, i)).collect();
            assert_eq!(seen.len(), 70_000);
        }
        // Beyond 2^22 flows addresses repeat, ports tell them apart.
        let base = 1u32 << ADDR_BITS;
        let seen: HashSet<_> = [0, 1, 7, base, base + 1, base + 7, 2 * base, 2 * base + 7]
            .into_iter()
            .map(|i| client(Kind::Ack, i))
            .collect();
        assert_eq!(seen.len(), 8);
        assert!((0..1 << 16).all(|i| client(Kind::Ack, i).1 >= 1024));
    }

    #[test]
    fn ipv4_frames_are_60_bytes_with_valid_checksums() {
        for kind in [Kind::Ack, Kind::Syn, Kind::Udp, Kind::Churn] {
            let s = spec(kind, 4096);
            let mut f = Vec::new();
            for i in [0, 1, 2, 1000, 4095] {
                s.frame(i, &mut f);
                assert_eq!(f.len(), 60, "{kind:?}");
                assert_eq!(checksum(&f[14..34]), 0, "IPv4 header checksum");
                let total = usize::from(u16::from_be_bytes([f[16], f[17]]));
                let l4 = &f[34..14 + total];
                let (IpAddr::V4(src), IpAddr::V4(dst)) = (client(kind, i).0, s.vip) else {
                    panic!()
                };
                let proto = f[23];
                let sum = add(pseudo_sum(&src.into(), &dst.into(), proto, l4.len()), l4);
                assert_eq!(fold(sum), 0, "{kind:?} L4 checksum");
            }
        }
    }

    #[test]
    fn ipv6_frames_have_valid_checksums() {
        let s = spec(Kind::V6, 10);
        let mut f = Vec::new();
        s.frame(3, &mut f);
        assert_eq!(f.len(), 74);
        assert_eq!(&f[12..14], &[0x86, 0xdd]);
        let sum = add(pseudo_sum(&client(Kind::V6, 3).0, &s.vip, 6, 20), &f[54..]);
        assert_eq!(fold(sum), 0);
    }

    /// The frames parse with the balancer's own parser into the intended
    /// flows (an independent check of lengths, checksums and flags).
    #[test]
    fn wire_parses_every_kind() {
        use wire::packet::{Frame, parse_frame};
        for kind in [Kind::Ack, Kind::Syn, Kind::Udp, Kind::V6] {
            let s = spec(kind, 1 << 12);
            let mut f = Vec::new();
            let mut tuples = HashSet::new();
            for i in 0..s.flows {
                s.frame(i, &mut f);
                let Ok(Frame::Ip(_, info)) = parse_frame(&f) else {
                    panic!("{kind:?} flow {i} does not parse");
                };
                let (sport, dport) = info.ports.expect("ports");
                assert_eq!(dport, 80);
                assert_eq!(info.proto, if kind == Kind::Udp { 17 } else { 6 });
                if kind != Kind::Udp {
                    let syn = info.tcp_flags.contains(wire::tcp::Flags::SYN);
                    let ack = info.tcp_flags.contains(wire::tcp::Flags::ACK);
                    assert_eq!((syn, ack), (kind == Kind::Syn, kind != Kind::Syn));
                }
                tuples.insert((info.src, sport));
            }
            assert_eq!(tuples.len(), 1 << 12, "{kind:?}: distinct flows");
        }
    }

    #[test]
    fn pcap_shards_partition_the_flows() {
        let s = spec(Kind::Ack, 1001);
        let mut total = 0;
        for shard in 0..3 {
            let mut out = Vec::new();
            let n = s.write_pcap(&mut out, shard, 3).unwrap();
            // 24-byte file header, then 16-byte record header + 60 bytes each.
            assert_eq!(out.len() as u64, 24 + n * 76);
            total += n;
        }
        assert_eq!(total, 1001);
        let mut out = Vec::new();
        assert_eq!(s.write_pcap(&mut out, 0, 1).unwrap(), 1001);
        assert!(s.write_pcap(Vec::new(), 3, 3).is_err());
    }

    #[test]
    fn churn_sets_open_then_reset_every_flow() {
        use wire::packet::{Frame, parse_frame};
        use wire::tcp::Flags;
        let s = spec(Kind::Churn, 100);
        let mut out = Vec::new();
        assert_eq!(s.write_pcap(&mut out, 0, 1).unwrap(), 200);
        let mut f = Vec::new();
        for (close, want) in [(false, Flags::SYN), (true, Flags::RST)] {
            s.frame_with(7, close, &mut f);
            assert_eq!(f.len(), 60);
            let Ok(Frame::Ip(_, info)) = parse_frame(&f) else {
                panic!("does not parse")
            };
            assert!(info.tcp_flags.contains(want));
            assert_eq!(info.tcp_flags.contains(Flags::ACK), close);
            assert_eq!(info.ports.map(|p| p.0), Some(client(Kind::Churn, 7).1));
        }
    }

    /// A gateway set: the endpoint's gratuitous ARP, then both directions
    /// of every flow, from the endpoint's MAC, to addresses that are not
    /// the VIP, with valid checksums; the answer is the first packet's
    /// flow reversed (the balancer's symmetric key maps both to one entry).
    #[test]
    fn gateway_sets_announce_the_endpoint_then_both_directions() {
        use wire::packet::{Frame, parse_frame};
        let s = spec(Kind::Gateway, 300);
        let mut out = Vec::new();
        assert_eq!(s.write_pcap(&mut out, 0, 1).unwrap(), 601);
        let mut f = Vec::new();
        s.gratuitous_arp(&mut f).unwrap();
        assert_eq!(f.len(), 60);
        assert_eq!(&f[6..12], &DEFAULT_SRC_MAC);
        assert!(
            matches!(parse_frame(&f), Ok(Frame::Arp(..))),
            "an ARP frame"
        );
        // The ARP's sender and target are the endpoint.
        assert_eq!(&f[28..32], &GATEWAY_ENDPOINT.octets());
        assert_eq!(&f[38..42], &GATEWAY_ENDPOINT.octets());
        let mut servers = HashSet::new();
        for i in [0, 1, 7, 299] {
            let mut back = Vec::new();
            s.frame_with(i, false, &mut f);
            s.frame_with(i, true, &mut back);
            for frame in [&f, &back] {
                assert_eq!(frame.len(), 60);
                assert_eq!(&frame[6..12], &DEFAULT_SRC_MAC);
                assert_eq!(checksum(&frame[14..34]), 0, "IPv4 header checksum");
                let (src, dst): ([u8; 4], [u8; 4]) = (
                    frame[26..30].try_into().unwrap(),
                    frame[30..34].try_into().unwrap(),
                );
                let sum = add(
                    pseudo_sum(
                        &Ipv4Addr::from(src).into(),
                        &Ipv4Addr::from(dst).into(),
                        6,
                        20,
                    ),
                    &frame[34..54],
                );
                assert_eq!(fold(sum), 0, "TCP checksum");
            }
            let (Ok(Frame::Ip(_, a)), Ok(Frame::Ip(_, b))) = (parse_frame(&f), parse_frame(&back))
            else {
                panic!("flow {i} does not parse");
            };
            assert_eq!((a.src, a.dst), (b.dst, b.src));
            assert_eq!(a.ports.map(|(s, d)| (d, s)), b.ports);
            // Addresses as the parser keeps them: IPv4-mapped IPv6.
            let IpAddr::V4(vip) = s.vip else { panic!() };
            assert_ne!(a.dst, vip.to_ipv6_mapped().octets());
            assert_eq!(a.dst, server(i).to_ipv6_mapped().octets());
            // The answer acknowledges the client's sequence number.
            assert_eq!(&f[38..42], &back[42..46]);
            assert_eq!(&f[42..46], &back[38..42]);
            servers.insert(a.dst);
        }
        assert_eq!(servers.len(), 4);
    }

    /// A SYN-flood set: per round every flow's ACK (the `ack` kind's frame),
    /// each followed by its spoofed SYNs; no SYN's source repeats anywhere
    /// in the set (shards included) or is an established client's.
    #[test]
    fn synflood_sets_interleave_acks_with_unseen_spoofed_syns() {
        use wire::packet::{Frame, parse_frame};
        use wire::tcp::Flags;
        let flows = 100;
        let s = spec(Kind::SynFlood, flows);
        let per_flow = Kind::SynFlood.packets_per_flow();
        assert_eq!(per_flow, SYNFLOOD_ROUNDS * (1 + SYNFLOOD_SYNS_PER_ACK));
        let ack = spec(Kind::Ack, flows);
        let clients: HashSet<_> = (0..flows).map(|i| client(Kind::Ack, i)).collect();
        let mut sources = HashSet::new();
        let mut acks = HashMap::new();
        let mut total = 0;
        for shard in 0..2 {
            let mut out = Vec::new();
            let n = s.write_pcap(&mut out, shard, 2).unwrap();
            total += n;
            let mut reader = pcap_file::pcap::PcapReader::new(&out[..]).unwrap();
            let mut k = 0u64;
            while let Some(pkt) = reader.next_packet() {
                let pkt = pkt.unwrap();
                let f = &pkt.data;
                assert_eq!(f.len(), 60);
                assert_eq!(checksum(&f[14..34]), 0, "IPv4 header checksum");
                let Ok(Frame::Ip(_, info)) = parse_frame(f) else {
                    panic!("packet {k} of shard {shard} does not parse");
                };
                let (sport, dport) = info.ports.expect("ports");
                assert_eq!(dport, 80);
                let src = IpAddr::from(info.src).to_canonical();
                let sum = add(pseudo_sum(&src, &s.vip, 6, 20), &f[34..54]);
                assert_eq!(fold(sum), 0, "TCP checksum");
                let syn = info.tcp_flags.contains(Flags::SYN);
                assert_eq!(syn, !info.tcp_flags.contains(Flags::ACK));
                // Every third packet is an established flow's ACK.
                assert_eq!(syn, k % u64::from(1 + SYNFLOOD_SYNS_PER_ACK) != 0);
                if syn {
                    assert!(!clients.contains(&(src, sport)), "a SYN from a client");
                    assert!(sources.insert((src, sport)), "a spoofed source repeats");
                } else {
                    assert!(clients.contains(&(src, sport)));
                    let i = (0..flows)
                        .find(|&i| client(Kind::Ack, i) == (src, sport))
                        .unwrap();
                    assert_eq!(i % 2, shard, "a flow stays in its shard");
                    let mut want = Vec::new();
                    ack.frame(i, &mut want);
                    assert_eq!(f, &want, "the ack kind's frame");
                    *acks.entry(i).or_insert(0u32) += 1;
                }
                k += 1;
            }
            assert_eq!(k, n);
        }
        assert_eq!(total, u64::from(flows * per_flow));
        assert_eq!(acks.len(), flows as usize);
        assert!(acks.values().all(|&n| n == SYNFLOOD_ROUNDS));
        assert_eq!(
            u32::try_from(sources.len()).unwrap(),
            flows * SYNFLOOD_ROUNDS * SYNFLOOD_SYNS_PER_ACK
        );
    }

    #[test]
    fn spoofed_sources_are_distinct() {
        let seen: HashSet<_> = (0..300_000).map(spoofed).collect();
        assert_eq!(seen.len(), 300_000);
        let base = 1u32 << 20;
        let seen: HashSet<_> = [0, 5, base, base + 5, 1022 * base + 5]
            .into_iter()
            .map(spoofed)
            .collect();
        assert_eq!(seen.len(), 5);
        assert!(Spec::new(Kind::SynFlood, (1 << 24) + 1, Kind::Ack.default_vip(), 80).is_err());
    }

    #[test]
    fn vip_must_match_the_kind() {
        assert!(Spec::new(Kind::V6, 1, "198.18.10.10".parse().unwrap(), 80).is_err());
        assert!(Spec::new(Kind::Ack, 1, "2001:db8::1".parse().unwrap(), 80).is_err());
        assert!(Spec::new(Kind::Ack, 0, Kind::Ack.default_vip(), 80).is_err());
    }
}
