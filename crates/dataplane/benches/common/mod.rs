#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly
//! The pipeline benchmark's set-up, shared by benches/pipeline.rs and
//! examples/pipeline_cycles.rs: a one-rule configuration, 60-byte TCP
//! frames of N flows (74-byte IPv6 ones for [`Kind::V6`]), and a burst
//! driver over in-memory buffers.
//!
//! Two modes are gateway mode's (M30-M32) rather than a delivery mode:
//! `gateway` (frames from the gateway endpoint's MAC to servers anywhere,
//! both directions of each flow, to appliances in Geneve) and
//! `gateway-return` (the appliances' answers to what `gateway` sent them,
//! made by running its frames through the same worker first: the cookies
//! are the worker's own).

#![allow(dead_code)]

use std::hint::black_box;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use dataplane::nexthop::NextHop;
use dataplane::{EndpointHealth, Local, Pipeline, Snapshot, SnapshotBuilder, Verdict};
use flowtable::FlowTable;
use testkit::config::{Config, endpoint_list, group, node, port, rule, service};
use testkit::packet::{ACK, DST_MAC, Packet, RST, SRC_MAC, SYN, v4};
use wire::buf::{MemBuf, PacketBuf};

pub const BURST: usize = 32;

/// What a set's packets are (perf/README.md's packet-set kinds, where they
/// share a name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// TCP ACKs of established flows.
    Ack,
    /// SYNs of known flows: after the first pass each finds its half-open
    /// entry (with more flows than the table holds, each is a new flow that
    /// evicts one: the full-table insert).
    Syn,
    /// IPv6 TCP ACKs to an IPv6 VIP, IPv6 endpoints (74-byte frames).
    V6,
    /// Each flow's SYN, then each flow's RST: every SYN after the first pass
    /// finds its flow closed and opens it again (half the packets insert).
    Churn,
    /// A SYN of a flow never seen: every packet inserts into a table with
    /// room. The set is not repeated (the caller sends at most one pass).
    New,
    /// [`Kind::New`] to a rule that admits only [`SOURCE_RANGES`]: a
    /// flow's source is asked when it begins (its later packets cost what
    /// [`Kind::Ack`]'s do), so every packet here asks.
    Ranges,
}

impl Kind {
    /// The kind named `s` (`ack`, `syn`, `v6`, `churn`, `new`).
    pub fn parse(s: &str) -> Option<Kind> {
        Some(match s {
            "ack" => Kind::Ack,
            "syn" => Kind::Syn,
            "v6" => Kind::V6,
            "churn" => Kind::Churn,
            "new" => Kind::New,
            "ranges" => Kind::Ranges,
            _ => return None,
        })
    }
}

/// The web rule's `source_ranges` in [`Kind::Ranges`] sets: as many as
/// a firewall's list of client networks might hold, the bench's clients
/// (10.100.0.0/16) in the middle of them.
pub const SOURCE_RANGES: [&str; 8] = [
    "10.20.0.0/16",
    "10.40.0.0/14",
    "10.64.0.0/11",
    "10.100.0.0/16",
    "172.16.0.0/12",
    "192.0.2.0/24",
    "198.51.100.0/24",
    "203.0.113.0/24",
];

/// The IPv6 VIP of [`Kind::V6`] sets.
pub const VIP6: &str = "2001:db8:18::10";

/// One TCP rule on 198.18.10.10:80 (`v6`: [`VIP6`] port 80) to `endpoints`
/// endpoints (10.1.0.0, 10.1.0.1, …; `v6`: fd00:0:1::1, fd00:0:1::2, …)
/// delivered by `delivery` (`l2dsr` ones with a static MAC each: off the
/// port's subnet, nothing could resolve them); for [`Kind::Ranges`] the
/// rule admits only [`SOURCE_RANGES`].
pub fn config(delivery: &str, endpoints: usize, kind: Kind) -> String {
    let v6 = kind == Kind::V6;
    let web = rule(
        "web",
        &[if v6 { VIP6 } else { "198.18.10.10" }],
        "TCP",
        "80",
        "web",
    );
    let web = if kind == Kind::Ranges {
        web.strs("source_ranges", &SOURCE_RANGES)
    } else {
        web
    };
    let eps: Vec<String> = (0..endpoints)
        .map(|i| {
            let addr = if v6 {
                format!("fd00:0:1::{:x}", i + 1)
            } else {
                format!("10.{}.{}.{}", 1 + i / 65536, (i / 256) % 256, i % 256)
            };
            if delivery == "l2dsr" {
                let [_, a, b, c] = u32::try_from(i).unwrap_or(u32::MAX).to_be_bytes();
                format!("{{ address = \"{addr}\", mac = \"02:00:00:{a:02x}:{b:02x}:{c:02x}\" }}")
            } else {
                addr
            }
        })
        .collect();
    Config::new()
        .node(node("bench", "r", "z"))
        // The benchmark measures the stateful path: no new-entry budget.
        .dataplane("new_flow_budget", u32::MAX)
        .port(
            port("up", "net_null0", "uplink")
                .strs("addresses", &["198.18.1.2/24", "fd00::2/64"])
                .str("gateway_mac", "02:00:00:00:00:fe"),
        )
        .rule(web)
        .service(
            service("web", delivery)
                .child(group("a", "r", "z").set("endpoints", endpoint_list(&eps))),
        )
        .build()
}

/// The gateway endpoint of the gateway modes: the router in front of the
/// balancer, on the port's subnet, and the MAC it resolved to.
pub const GATEWAY_ENDPOINT: &str = "198.18.1.1";
pub const GATEWAY_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0xfe];

/// A gateway rule for [`GATEWAY_ENDPOINT`] to `appliances` Geneve
/// appliances (10.1.0.0, 10.1.0.1, …, off the port's subnet: reached by
/// the gateway MAC, nothing to resolve).
pub fn gateway_config(appliances: usize) -> String {
    let eps: Vec<String> = (0..appliances)
        .map(|i| format!("10.{}.{}.{}", 1 + i / 65536, (i / 256) % 256, i % 256))
        .collect();
    Config::new()
        .node(node("bench", "r", "z"))
        .dataplane("new_flow_budget", u32::MAX)
        .port(
            port("up", "net_null0", "uplink")
                .strs("addresses", &["198.18.1.2/24"])
                .str("gateway_mac", "02:00:00:00:00:fd"),
        )
        .rule(
            rule("gw", &["198.18.10.10"], "L3_DEFAULT", "all", "nva")
                .str("mode", "gateway")
                .set(
                    "gateway_endpoints",
                    format!("[{{ address = \"{GATEWAY_ENDPOINT}\", id = 0x1 }}]"),
                ),
        )
        .service(
            service("nva", "geneve")
                .child(group("a", "r", "z").set("endpoints", endpoint_list(&eps))),
        )
        .build()
}

/// Gateway flow `i`'s packet (`back`: the server's answer) as the endpoint
/// routes it through the balancer: client 10.100.0.0 + `i` / 256, port 1024 +
/// `i` % 256, to server 198.19.0.0 + `i` % 65536, port 80; 60-byte ACKs.
pub fn gateway_frame(i: u32, back: bool) -> Vec<u8> {
    let client = Ipv4Addr::from(0x0a64_0000 + (i >> 8));
    let server = Ipv4Addr::from(0xc613_0000 + (i & 0xffff));
    let sport = 1024 + u16::from(i.to_le_bytes()[0]);
    let p = if back {
        Packet::tcp(server.into(), client.into(), 80, sport, ACK)
    } else {
        Packet::tcp(client.into(), server.into(), sport, 80, ACK)
    };
    p.ack(1)
        .tcp_checksum(false)
        .macs(GATEWAY_MAC, SRC_MAC)
        .min_frame(60)
        .frame()
}

/// An appliance's answer to `sent` (Geneve over IPv4): Ethernet and IP
/// source and destination swapped, every other byte kept.
pub fn echo(sent: &[u8]) -> Vec<u8> {
    let mut f = sent.to_vec();
    f[..6].copy_from_slice(&sent[6..12]);
    f[6..12].copy_from_slice(&sent[..6]);
    f[26..30].copy_from_slice(&sent[30..34]);
    f[30..34].copy_from_slice(&sent[26..30]);
    f
}

/// A 60-byte TCP segment with `flags` of flow `i` to the VIP: from
/// 10.100.0.0 + `i` / 256, port 1024 + `i` % 256; seq and ack 1, checksum
/// left zero (the pipeline forwards without checking it).
pub fn tcp_frame(i: u32, flags: u8) -> Vec<u8> {
    let client = Ipv4Addr::from(0x0a64_0000 + (i >> 8));
    let sport = 1024 + u16::from(i.to_le_bytes()[0]);
    Packet::tcp(client.into(), v4("198.18.10.10"), sport, 80, flags)
        .ack(1)
        .tcp_checksum(false)
        .macs(DST_MAC, SRC_MAC)
        .min_frame(60)
        .frame()
}

/// Flow `i`'s IPv6 TCP ACK to [`VIP6`]: from 2001:db8:c11e:: + `i` / 256,
/// port 1024 + `i` % 256 (74 bytes, the IPv6 minimum).
pub fn v6_frame(i: u32) -> Vec<u8> {
    let client = Ipv6Addr::from(0x2001_0db8_c11e_u128 << 80 | u128::from(i >> 8));
    let sport = 1024 + u16::from(i.to_le_bytes()[0]);
    let vip: Ipv6Addr = VIP6.parse().expect("VIP6");
    Packet::tcp(client.into(), vip.into(), sport, 80, ACK)
        .ack(1)
        .tcp_checksum(false)
        .macs(DST_MAC, SRC_MAC)
        .frame()
}

/// The frames of `flows` flows of `kind`, in the order they are sent.
pub fn frames(kind: Kind, flows: u32) -> Vec<Vec<u8>> {
    match kind {
        Kind::Ack => (0..flows).map(|i| tcp_frame(i, ACK)).collect(),
        Kind::Syn | Kind::New | Kind::Ranges => (0..flows).map(|i| tcp_frame(i, SYN)).collect(),
        Kind::V6 => (0..flows).map(v6_frame).collect(),
        Kind::Churn => (0..flows)
            .map(|i| tcp_frame(i, SYN))
            .chain((0..flows).map(|i| tcp_frame(i, RST | ACK)))
            .collect(),
    }
}

pub struct Bench {
    snap: Snapshot,
    flows: FlowTable,
    worker: Pipeline,
    frames: Vec<Vec<u8>>,
    bufs: Vec<MemBuf<[u8; 256]>>,
    verdicts: [Verdict; BURST],
    next: usize,
    /// The tick: 1 for the first pass over the flows, 2 after — a flow's
    /// entry is confirmed (and takes the established fast path) once it is
    /// seen in a later tick than its first packet's, as in a running
    /// balancer after the flow's first second.
    now: u32,
}

impl Bench {
    /// `delivery`: a delivery mode, or `gateway` / `gateway-return` (then
    /// `endpoints` appliances, and `flows` flows of two packets each, and
    /// `kind` is ignored).
    pub fn new(delivery: &str, endpoints: usize, flows: u32, kind: Kind, capacity: usize) -> Bench {
        let gateway = delivery.starts_with("gateway");
        let text = if gateway {
            gateway_config(endpoints)
        } else {
            config(delivery, endpoints, kind)
        };
        let loaded = config::load_str("bench.toml", &text, &config::Env::default())
            .unwrap_or_else(|e| panic!("{e}"));
        let compiled = Arc::new(loaded.compiled);
        let mut local = Local::from_config(&compiled, |_| Some([2, 0, 0, 0, 0, 1]));
        if gateway {
            // The endpoint's ARP answered: its frames are recognised by it.
            let hop = NextHop {
                port: 0,
                addr: GATEWAY_ENDPOINT.parse().expect("address"),
            };
            local.neighbours.push((hop, GATEWAY_MAC));
        }
        let snap = SnapshotBuilder::new()
            .build(compiled.clone(), local, |_| EndpointHealth::HEALTHY, 0, 1)
            .expect("snapshot");
        // A fixed placement key: instruction counts do not depend on where
        // a random one puts the flows.
        let table = FlowTable::new(flowtable::Config {
            placement: Some(flowtable::PlacementKey::fixed(1, 2)),
            ..flowtable::Config::with_capacity(capacity)
        })
        .expect("table");
        let frames = if gateway {
            // Every flow one way, then every answer.
            (0..2 * flows)
                .map(|i| gateway_frame(i % flows, i >= flows))
                .collect()
        } else {
            frames(kind, flows)
        };
        let mut worker = Pipeline::new(1, compiled.children.len());
        if gateway {
            // The port the endpoint's frames arrive on, as the engine sets
            // it (the other modes keep the set-up they were measured with).
            worker.set_rx_port(0);
        }
        let mut b = Bench {
            snap,
            flows: table,
            worker,
            frames,
            bufs: (0..BURST)
                .map(|_| MemBuf::new([0u8; 256], 128, &[]).expect("buf"))
                .collect(),
            verdicts: [Verdict::ToHost; BURST],
            next: 0,
            now: 1,
        };
        if delivery == "gateway-return" {
            b.frames = b.answers();
        }
        b
    }

    /// The appliances' answers to one pass over the frames (which makes
    /// the flows' entries, and their cookies, in this worker's table).
    fn answers(&mut self) -> Vec<Vec<u8>> {
        let mut out = Vec::with_capacity(self.frames.len());
        for chunk in self.frames.chunks(BURST) {
            let bufs = &mut self.bufs[..chunk.len()];
            for (b, f) in bufs.iter_mut().zip(chunk) {
                b.reset(128, f).expect("fits");
            }
            let verdicts = &mut self.verdicts[..chunk.len()];
            self.worker
                .process_burst(&self.snap, &self.flows, 1, bufs, verdicts);
            for (b, v) in bufs.iter().zip(verdicts.iter()) {
                assert_eq!(*v, Verdict::Forward, "a gateway frame not forwarded");
                out.push(echo(b.data()));
            }
        }
        out
    }

    /// Packets in one pass over the set.
    pub fn packets(&self) -> usize {
        self.frames.len()
    }

    /// The last burst's verdicts if any was not a forward (or, for
    /// returned packets, a forward to the endpoint's port).
    pub fn not_forwarded(&self) -> Option<Vec<Verdict>> {
        let ok = |v: &Verdict| matches!(v, Verdict::Forward | Verdict::ForwardTo(_));
        (!self.verdicts.iter().all(ok)).then(|| self.verdicts.to_vec())
    }

    pub fn burst(&mut self) {
        for b in &mut self.bufs {
            let f = &self.frames[self.next];
            // No `%`: a division per packet, chained through `next`, would
            // be timed along with the pipeline.
            self.next += 1;
            if self.next == self.frames.len() {
                self.next = 0;
                self.now = 2;
            }
            b.reset(128, f).expect("fits");
        }
        self.worker.process_burst(
            &self.snap,
            &self.flows,
            self.now,
            &mut self.bufs,
            &mut self.verdicts,
        );
        black_box(&self.verdicts);
    }
}
