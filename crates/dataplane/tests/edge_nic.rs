#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly
//! M55 with the NIC's verdict on the IPv4 header checksum (DPDK's
//! `RTE_MBUF_F_RX_IP_CKSUM_*`, [`PacketBuf::rx_ipv4_checksum`]): where the
//! NIC verified the header the data plane does not verify it again, a
//! header the NIC found wrong is dropped, and the verdict is the outer
//! header's only: a decapsulated packet's header is verified in software.

use std::net::IpAddr;
use std::sync::Arc;

use dataplane::{DropReason, EndpointHealth, Local, Pipeline, Snapshot, SnapshotBuilder, Verdict};
use flowtable::FlowTable;
use testkit::config::{Config, endpoint_list, group, port, rule, service};
use testkit::packet::{Packet, SYN, encap, outer, v4};
use wire::BufError;
use wire::buf::{MemBuf, PacketBuf, RxChecksum};
use wire::encap::Tunnel;

const LB_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
const PEER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x99];

/// A buffer as a NIC that checks IPv4 header checksums fills it.
struct NicBuf {
    buf: MemBuf<Vec<u8>>,
    verdict: RxChecksum,
}

impl PacketBuf for NicBuf {
    fn data(&self) -> &[u8] {
        self.buf.data()
    }
    fn data_mut(&mut self) -> &mut [u8] {
        self.buf.data_mut()
    }
    fn headroom(&self) -> usize {
        self.buf.headroom()
    }
    fn prepend(&mut self, n: usize) -> Result<&mut [u8], BufError> {
        self.buf.prepend(n)
    }
    fn adj(&mut self, n: usize) -> Result<(), BufError> {
        self.buf.adj(n)
    }
    fn trim(&mut self, n: usize) -> Result<(), BufError> {
        self.buf.trim(n)
    }
    fn append(&mut self, n: usize) -> Result<&mut [u8], BufError> {
        self.buf.append(n)
    }
    fn rx_ipv4_checksum(&self) -> RxChecksum {
        self.verdict
    }
}

struct Lab {
    snap: Snapshot,
    flows: FlowTable,
    worker: Pipeline,
}

impl Lab {
    fn new() -> Lab {
        let cfg = Config::new()
            .port(port("up", "net_ring0", "uplink").strs("addresses", &["10.0.0.2/24"]))
            .rule(rule("web", &["10.0.0.10"], "TCP", "80", "web"))
            .service(service("web", "gue").child(
                group("a", "r", "z").set("endpoints", endpoint_list(&["10.0.1.11", "10.0.1.12"])),
            ))
            .raw("[tunnel_ingress]\nallow = [\"192.0.2.200/32\"]\n");
        let compiled = match config::load_str("t.toml", &cfg.build(), &config::Env::default()) {
            Ok(l) => Arc::new(l.compiled),
            Err(e) => panic!("{e}"),
        };
        let local = Local {
            mac: LB_MAC,
            next_hop_mac: [0x02, 0, 0, 0, 0, 0xfe],
            tunnel_src_v4: Some("10.0.1.2".parse().unwrap()),
            own_addrs: vec![v4("10.0.0.2")],
            ..Local::default()
        };
        let snap = SnapshotBuilder::new()
            .build(compiled, local, |_| EndpointHealth::HEALTHY, 0, 1)
            .expect("snapshot");
        Lab {
            flows: FlowTable::new(flowtable::Config::with_capacity(1024)).expect("flows"),
            worker: Pipeline::new(3, snap.compiled.children.len()),
            snap,
        }
    }

    /// `frame` with the NIC's `verdict`, one at a time and as a burst.
    fn run(&mut self, frame: &[u8], verdict: RxChecksum) -> Verdict {
        let buf = || NicBuf {
            buf: MemBuf::new(vec![0u8; 2048 + frame.len()], 128, frame).expect("fits"),
            verdict,
        };
        let mut one = buf();
        let v = self.worker.process(&self.snap, &self.flows, 1, &mut one);
        let mut burst = [buf()];
        let mut vb = [Verdict::ToHost];
        let mut w = Pipeline::new(3, self.snap.compiled.children.len());
        let flows = FlowTable::new(flowtable::Config::with_capacity(1024)).expect("flows");
        w.process_burst(&self.snap, &flows, 1, &mut burst, &mut vb);
        assert_eq!(v, vb[0], "process and process_burst disagree");
        v
    }
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn syn(sport: u16) -> Packet {
    Packet::tcp(ip("198.51.100.7"), ip("10.0.0.10"), sport, 80, SYN).macs(PEER_MAC, LB_MAC)
}

fn bad_checksum(mut frame: Vec<u8>) -> Vec<u8> {
    frame[24] ^= 0x5a;
    frame
}

const BAD: Verdict = Verdict::Drop(DropReason::Ipv4BadChecksum);

#[test]
fn the_nics_verdict_on_the_ipv4_header_is_taken() {
    let mut lab = Lab::new();
    let options = [1, 1, 1, 0];
    for (what, frame, verdict, want) in [
        (
            "unverified, right",
            syn(1).frame(),
            RxChecksum::Unknown,
            Verdict::Forward,
        ),
        (
            "unverified, wrong",
            bad_checksum(syn(2).frame()),
            RxChecksum::Unknown,
            BAD,
        ),
        // The NIC said right: not verified again (no NIC says so of a
        // wrong one; this shows the software check is skipped).
        (
            "verified right",
            bad_checksum(syn(3).frame()),
            RxChecksum::Good,
            Verdict::Forward,
        ),
        ("verified wrong", syn(4).frame(), RxChecksum::Bad, BAD),
        // The general path (IPv4 options) takes the verdict too.
        (
            "options, verified right",
            bad_checksum(syn(5).ip_options(&options).frame()),
            RxChecksum::Good,
            Verdict::Forward,
        ),
        (
            "options, verified wrong",
            syn(6).ip_options(&options).frame(),
            RxChecksum::Bad,
            BAD,
        ),
        (
            "options, unverified, wrong",
            bad_checksum(syn(7).ip_options(&options).frame()),
            RxChecksum::Unknown,
            BAD,
        ),
    ] {
        assert_eq!(lab.run(&frame, verdict), want, "{what}");
    }
    assert_eq!(lab.worker.counters.dropped(DropReason::Ipv4BadChecksum), 4);
}

/// The NIC verified the outer header of a tunnel to an own address; the
/// inner packet's header is verified in software (M49, M55).
#[test]
fn a_decapsulated_header_is_verified_in_software() {
    let mut lab = Lab::new();
    let wrap = |inner: &[u8]| {
        let mut o = outer(ip("192.0.2.200"), ip("10.0.0.2"));
        o.src_mac = PEER_MAC;
        o.dst_mac = LB_MAC;
        encap(inner, &o, &Tunnel::IpIp)
    };
    assert_eq!(
        lab.run(&wrap(&syn(10).frame()), RxChecksum::Good),
        Verdict::Forward
    );
    let inner_wrong = wrap(&bad_checksum(syn(11).frame()));
    assert_eq!(lab.run(&inner_wrong, RxChecksum::Good), BAD);
    assert_eq!(lab.worker.counters.decap_ipip, 2);
}
