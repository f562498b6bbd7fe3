#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly
//! Gateway mode (M30–M32) on in-memory buffers: traffic from a gateway
//! endpoint (by its resolved MAC) to any destination goes to an appliance
//! in Geneve, both directions of a connection to the same one with the same
//! cookie; what an appliance returns is taken only with the flow's cookie
//! and options, and goes back to the endpoint it came from. Everything else
//! is dropped by reason.

use std::net::IpAddr;
use std::sync::Arc;

use dataplane::nexthop::NextHop;
use dataplane::{DropReason, EndpointHealth, Local, Pipeline, Snapshot, SnapshotBuilder, Verdict};
use flowtable::FlowTable;
use testkit::config::{Config, endpoint_list, group, port, rule, service};
use testkit::packet::{ACK, Packet, SYN, encap, outer, v4, v6};
use wire::buf::{MemBuf, PacketBuf};
use wire::encap::{DecapConfig, Tunnel, TunnelInfo, TunnelKind, parse_tunnel};
use wire::geneve::{GatewayOptions, OptionIds};

const LB_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
/// Gateway endpoints (routers) 1 and 2, and a stranger on the segment.
const R1_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0xf1];
const R2_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0xf2];
const STRANGER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x55];
/// Appliances.
const NVA_MACS: [[u8; 6]; 3] = [
    [0x02, 0, 0, 0, 0, 0xa1],
    [0x02, 0, 0, 0, 0, 0xa2],
    [0x02, 0, 0, 0, 0, 0xa3],
];

const OWN4: &str = "10.0.0.2";
const OWN6: &str = "fd00::2";
const R1: &str = "10.0.0.1";
const R2: &str = "10.0.0.3";
const ID1: u64 = 0x0000_0001_0000_0001;
const ID2: u64 = 0x0000_0001_0000_0002;
const NVAS4: [&str; 3] = ["10.0.0.11", "10.0.0.12", "10.0.0.13"];
const NVAS6: [&str; 3] = ["fd00::11", "fd00::12", "fd00::13"];

/// Client and server, of both families: any addresses, not the node's.
const CLIENT4: &str = "172.16.1.7";
const SERVER4: &str = "172.16.2.9";
const CLIENT6: &str = "2001:db8:1::7";
const SERVER6: &str = "2001:db8:2::9";

/// One port with both own addresses; a gateway rule for endpoints R1 and R2
/// to a Geneve service of `nvas` appliances with `affinity`.
fn config(nvas: &[&str], affinity: &str) -> Config {
    let eps = endpoint_list(nvas);
    Config::new()
        .port(port("up", "net_ring0", "uplink").strs("addresses", &["10.0.0.2/24", "fd00::2/64"]))
        .rule(
            rule("gw", &["10.0.0.10"], "L3_DEFAULT", "all", "nva")
                .str("mode", "gateway")
                .set(
                    "gateway_endpoints",
                    format!("[{{ address = \"{R1}\", id = {ID1:#x} }}, {{ address = \"{R2}\", id = {ID2:#x} }}]"),
                ),
        )
        .service(
            service("nva", "geneve")
                .str("session_affinity", affinity)
                .child(group("a", "r", "z").set("endpoints", eps)),
        )
}

struct Lab {
    snap: Snapshot,
    builder: SnapshotBuilder,
    flows: FlowTable,
    worker: Pipeline,
    now: u32,
}

fn neighbours(nvas: &[&str], r1: bool) -> Vec<(NextHop, [u8; 6])> {
    let hop = |a: &str| NextHop {
        port: 0,
        addr: a.parse().unwrap(),
    };
    let mut n: Vec<(NextHop, [u8; 6])> = nvas.iter().map(|a| (hop(a), nva_mac(a))).collect();
    if r1 {
        n.push((hop(R1), R1_MAC));
    }
    n.push((hop(R2), R2_MAC));
    n
}

fn local(nvas: &[&str], r1_resolved: bool) -> Local {
    Local {
        mac: LB_MAC,
        port_macs: vec![LB_MAC],
        tunnel_src_v4: Some(OWN4.parse().unwrap()),
        tunnel_src_v6: Some(OWN6.parse().unwrap()),
        own_addrs: vec![v4(OWN4), v6(OWN6), v4("10.0.0.10")],
        neighbours: neighbours(nvas, r1_resolved),
        ..Local::default()
    }
}

fn compile(cfg: &Config) -> Arc<config::Compiled> {
    match config::load_str("test.toml", &cfg.build(), &config::Env::default()) {
        Ok(l) => Arc::new(l.compiled),
        Err(e) => panic!("test config rejected:\n{e}"),
    }
}

impl Lab {
    fn new(nvas: &[&str], affinity: &str) -> Lab {
        Lab::of(&config(nvas, affinity), local(nvas, true))
    }

    /// The node running `cfg` on `local`, every endpoint healthy.
    fn of(cfg: &Config, local: Local) -> Lab {
        let mut builder = SnapshotBuilder::new();
        let snap = builder
            .build(compile(cfg), local, |_| EndpointHealth::HEALTHY, 0, 1)
            .expect("snapshot");
        let flows = FlowTable::new(flowtable::Config::with_capacity(4096)).expect("flow table");
        let worker = Pipeline::new(7, snap.compiled.children.len());
        Lab {
            snap,
            builder,
            flows,
            worker,
            now: 1,
        }
    }

    /// Rebuilds the snapshot from `nvas` (the appliance set changes).
    fn reconfigure(&mut self, nvas: &[&str], affinity: &str, r1_resolved: bool) {
        self.snap = self
            .builder
            .build(
                compile(&config(nvas, affinity)),
                local(nvas, r1_resolved),
                |_| EndpointHealth::HEALTHY,
                self.now,
                1,
            )
            .expect("snapshot");
    }

    fn run(&mut self, frame: &[u8]) -> (Verdict, Vec<u8>) {
        self.run_on(0, frame)
    }

    /// `frame` as received on port `port`.
    fn run_on(&mut self, port: usize, frame: &[u8]) -> (Verdict, Vec<u8>) {
        let mut buf = MemBuf::new(vec![0u8; 2048 + frame.len()], 128, frame).expect("fits");
        self.worker.set_rx_port(port);
        let v = self
            .worker
            .process(&self.snap, &self.flows, self.now, &mut buf);
        (v, buf.data().to_vec())
    }

    /// `frames` as one burst ([`Pipeline::process_burst`]).
    fn run_burst(&mut self, frames: &[Vec<u8>]) -> Vec<(Verdict, Vec<u8>)> {
        let mut bufs: Vec<_> = frames
            .iter()
            .map(|f| MemBuf::new(vec![0u8; 2048 + f.len()], 128, f).expect("fits"))
            .collect();
        let mut verdicts = vec![Verdict::ToHost; frames.len()];
        self.worker.set_rx_port(0);
        self.worker
            .process_burst(&self.snap, &self.flows, self.now, &mut bufs, &mut verdicts);
        verdicts
            .into_iter()
            .zip(bufs.iter().map(|b| b.data().to_vec()))
            .collect()
    }

    fn dropped(&self, r: DropReason) -> u64 {
        self.worker.counters.dropped(r)
    }
}

const SICK: EndpointHealth = EndpointHealth {
    healthy: false,
    weight: None,
};

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// A TCP segment `src:sport → dst:dport` as the router with `mac` sends it
/// to the balancer.
fn tcp(mac: [u8; 6], src: &str, dst: &str, ports: (u16, u16), flags: u8) -> Packet {
    Packet::tcp(ip(src), ip(dst), ports.0, ports.1, flags).macs(mac, LB_MAC)
}

/// What the balancer sent an appliance: its Geneve facts, which must wrap
/// `inner`'s IP packet unchanged.
fn geneve_of(out: &[u8], inner: &[u8]) -> TunnelInfo {
    let cfg = DecapConfig {
        geneve_port: Some(6081),
        ..DecapConfig::default()
    };
    let t = parse_tunnel(out, &cfg).expect("Geneve to an appliance");
    assert_eq!(t.kind, TunnelKind::Geneve);
    assert_eq!(
        &out[t.inner_offset..t.inner_offset + t.inner_len],
        &inner[14..],
        "inner packet unchanged"
    );
    t
}

/// Which appliance (index) got it.
fn nva_of(t: &TunnelInfo) -> usize {
    NVAS4
        .iter()
        .chain(NVAS6.iter())
        .position(|a| ip(a) == t.dst_ip)
        .expect("an appliance")
        % 3
}

/// The appliance's answer per the contract: outer addresses (and MACs)
/// swapped, ports and every Geneve byte kept: a copy of the forwarded frame.
fn echo(out: &[u8]) -> Vec<u8> {
    let mut f = out.to_vec();
    let (dst, src) = (f[..6].to_vec(), f[6..12].to_vec());
    f[..6].copy_from_slice(&src);
    f[6..12].copy_from_slice(&dst);
    match f[14] >> 4 {
        4 => {
            let (s, d) = (f[26..30].to_vec(), f[30..34].to_vec());
            f[26..30].copy_from_slice(&d);
            f[30..34].copy_from_slice(&s);
        }
        _ => {
            let (s, d) = (f[22..38].to_vec(), f[38..54].to_vec());
            f[22..38].copy_from_slice(&d);
            f[38..54].copy_from_slice(&s);
        }
    }
    f
}

/// The MAC of appliance `addr` (`NVAS4[i]` and `NVAS6[i]` have
/// `NVA_MACS[i]`), or a stranger's.
fn nva_mac(addr: &str) -> [u8; 6] {
    NVAS4
        .iter()
        .position(|a| *a == addr)
        .or_else(|| NVAS6.iter().position(|a| *a == addr))
        .map_or(STRANGER_MAC, |i| NVA_MACS[i])
}

/// A Geneve packet from `src` to `dst` (checksums right) carrying `inner`
/// (an Ethernet frame) with `options`, from `src`'s MAC.
fn returned(inner: &[u8], src: &str, dst: &str, options: GatewayOptions) -> Vec<u8> {
    let mut o = outer(ip(src), ip(dst));
    o.src_mac = nva_mac(src);
    o.dst_mac = LB_MAC;
    encap(
        inner,
        &o,
        &Tunnel::Geneve {
            port: 6081,
            vni: 0,
            ids: OptionIds::DEFAULT,
            options,
        },
    )
}

fn opts(endpoint_id: Option<u64>, cookie: Option<u32>) -> GatewayOptions {
    GatewayOptions {
        endpoint_id,
        cookie,
    }
}

#[test]
fn both_directions_reach_one_appliance_with_one_cookie_under_every_affinity() {
    for affinity in ["NONE", "CLIENT_IP_PROTO", "CLIENT_IP"] {
        let mut lab = Lab::new(&NVAS4, affinity);
        let mut used = [0usize; 3];
        for i in 0..64u16 {
            let client = format!("172.16.1.{}", 1 + i % 200);
            // Whichever direction arrives first.
            let (a, b) = (
                tcp(R1_MAC, &client, SERVER4, (40000 + i, 443), SYN).frame(),
                tcp(R1_MAC, SERVER4, &client, (443, 40000 + i), SYN | ACK).frame(),
            );
            let (first, second) = if i % 2 == 0 { (&a, &b) } else { (&b, &a) };
            let (v1, o1) = lab.run(first);
            let (v2, o2) = lab.run(second);
            assert_eq!((v1, v2), (Verdict::Forward, Verdict::Forward), "{affinity}");
            let (t1, t2) = (geneve_of(&o1, first), geneve_of(&o2, second));
            assert_eq!(
                nva_of(&t1),
                nva_of(&t2),
                "{affinity}: one appliance per connection"
            );
            assert_eq!(
                t1.gateway.cookie, t2.gateway.cookie,
                "{affinity}: one cookie"
            );
            assert_eq!(t1.gateway.endpoint_id, Some(ID1));
            assert_eq!((t1.vni, t1.src_ip), (Some(0), ip(OWN4)));
            assert_eq!(&o1[..6], &NVA_MACS[nva_of(&t1)]);
            used[nva_of(&t1)] += 1;
        }
        assert!(
            used.iter().all(|&n| n > 0),
            "{affinity}: every appliance used: {used:?}"
        );
        // One entry per connection, not one per direction.
        assert_eq!(lab.worker.counters.new_flows, 64, "{affinity}");
    }
}

#[test]
fn geneve_header_and_options_are_the_contracts() {
    let mut lab = Lab::new(&NVAS4, "NONE");
    let f = tcp(R1_MAC, CLIENT4, SERVER4, (40000, 80), SYN).frame();
    let (v, out) = lab.run(&f);
    assert_eq!(v, Verdict::Forward);
    let t = geneve_of(&out, &f);
    let g = &out[14 + 20 + 8..];
    // Version 0, Opt Len 5 (endpoint ID 4 + 8 bytes, cookie 4 + 4), O and C
    // clear, protocol 0x0800, VNI 0.
    assert_eq!(&g[..8], &[5, 0, 0x08, 0x00, 0, 0, 0, 0]);
    // Endpoint ID first: class 0x0139, type 1, length 2 words.
    assert_eq!(&g[8..12], &[0x01, 0x39, 0x01, 0x02]);
    assert_eq!(&g[12..20], &ID1.to_be_bytes());
    assert_eq!(&g[20..24], &[0x01, 0x39, 0x03, 0x01]);
    assert_eq!(&g[24..28], &t.gateway.cookie.unwrap().to_be_bytes());
    assert_eq!(t.udp_ports.unwrap().1, 6081);
    // IPv6 inner: protocol 0x86DD.
    let f6 = tcp(R1_MAC, CLIENT6, SERVER6, (40000, 80), SYN).frame();
    let (v, out) = lab.run(&f6);
    assert_eq!(v, Verdict::Forward);
    geneve_of(&out, &f6);
    assert_eq!(&out[14 + 20 + 8 + 2..14 + 20 + 8 + 4], &[0x86, 0xdd]);
}

#[test]
fn ipv6_appliances_get_ipv6_outer_headers_for_both_inner_families() {
    let mut lab = Lab::new(&NVAS6, "NONE");
    for (c, s) in [(CLIENT4, SERVER4), (CLIENT6, SERVER6)] {
        let f = tcp(R1_MAC, c, s, (40001, 80), SYN).frame();
        let (v, out) = lab.run(&f);
        assert_eq!(v, Verdict::Forward, "{c}");
        let t = geneve_of(&out, &f);
        assert_eq!(t.src_ip, ip(OWN6));
        // And the appliance's answer comes back, byte for byte the inner.
        let (v, back) = lab.run(&echo(&out));
        assert_eq!(v, Verdict::ForwardTo(0), "{c}");
        assert_eq!(&back[14..], &f[14..], "{c}: inner packet unchanged");
        assert_eq!(&back[..6], &R1_MAC);
        assert_eq!(&back[6..12], &LB_MAC);
    }
    assert_eq!(lab.worker.counters.gateway_returned, 2);
}

#[test]
fn flows_stay_on_their_appliance_while_the_set_changes() {
    let mut lab = Lab::new(&NVAS4[..2], "NONE");
    let mut first = Vec::new();
    for i in 0..32u16 {
        let f = tcp(R1_MAC, CLIENT4, SERVER4, (41000 + i, 80), SYN).frame();
        let (_, out) = lab.run(&f);
        first.push(nva_of(&geneve_of(&out, &f)));
    }
    lab.now += 1;
    lab.reconfigure(&NVAS4, "NONE", true);
    for (port, nva) in (41000u16..).zip(&first) {
        let i = port - 41000;
        let back = tcp(R1_MAC, SERVER4, CLIENT4, (80, port), SYN | ACK).frame();
        let (v, out) = lab.run(&back);
        assert_eq!(v, Verdict::Forward);
        assert_eq!(
            nva_of(&geneve_of(&out, &back)),
            *nva,
            "flow {i} kept its appliance"
        );
    }
}

#[test]
fn tenants_behind_different_endpoints_never_share_an_entry() {
    let mut lab = Lab::new(&NVAS4, "NONE");
    let f1 = tcp(R1_MAC, CLIENT4, SERVER4, (40000, 80), SYN).frame();
    let f2 = tcp(R2_MAC, CLIENT4, SERVER4, (40000, 80), SYN).frame();
    let (_, o1) = lab.run(&f1);
    let (_, o2) = lab.run(&f2);
    let (t1, t2) = (geneve_of(&o1, &f1), geneve_of(&o2, &f2));
    assert_eq!(lab.worker.counters.new_flows, 2);
    assert_eq!(
        (t1.gateway.endpoint_id, t2.gateway.endpoint_id),
        (Some(ID1), Some(ID2))
    );
    assert_ne!(t1.gateway.cookie, t2.gateway.cookie);
    // Each returns to its own router.
    let (v, b1) = lab.run(&echo(&o1));
    assert_eq!(v, Verdict::ForwardTo(0));
    assert_eq!(&b1[..6], &R1_MAC);
    let (v, b2) = lab.run(&echo(&o2));
    assert_eq!(v, Verdict::ForwardTo(0));
    assert_eq!(&b2[..6], &R2_MAC);
    // Router 1's cookie with router 2's ID: that is tenant 2's flow.
    let forged = returned(
        &f1,
        NVAS4[nva_of(&t2)],
        OWN4,
        opts(Some(ID2), t1.gateway.cookie),
    );
    let (v, _) = lab.run(&forged);
    assert!(
        matches!(v, Verdict::Drop(DropReason::GatewayCookieMismatch)),
        "{v:?}"
    );
}

#[test]
fn only_gateway_endpoints_are_taken_and_only_what_their_rule_takes() {
    let mut lab = Lab::new(&NVAS4, "NONE");
    let f = tcp(STRANGER_MAC, CLIENT4, SERVER4, (40000, 80), SYN).frame();
    assert_eq!(lab.run(&f).0, Verdict::Drop(DropReason::NotOurs));
    // The gateway rule's own address takes nothing.
    let f = tcp(R1_MAC, CLIENT4, "10.0.0.10", (40000, 80), SYN).frame();
    assert_eq!(lab.run(&f).0, Verdict::Drop(DropReason::GatewayVip));
    // L3_DEFAULT takes ICMP, not an unknown protocol.
    let f = Packet::echo(ip(CLIENT4), ip(SERVER4), 1, 1)
        .macs(R1_MAC, LB_MAC)
        .frame();
    assert_eq!(lab.run(&f).0, Verdict::Forward);
    let f = Packet::raw(ip(CLIENT4), ip(SERVER4), 200)
        .macs(R1_MAC, LB_MAC)
        .frame();
    assert_eq!(lab.run(&f).0, Verdict::Drop(DropReason::GatewayNoRule));
    // An endpoint whose MAC is not resolved is not recognised.
    lab.reconfigure(&NVAS4, "NONE", false);
    let f = tcp(R1_MAC, CLIENT4, SERVER4, (40000, 80), SYN).frame();
    assert_eq!(lab.run(&f).0, Verdict::Drop(DropReason::NotOurs));
}

#[test]
fn a_returned_packet_goes_back_to_its_endpoint_unchanged() {
    let mut lab = Lab::new(&NVAS4, "NONE");
    let f = tcp(R1_MAC, CLIENT4, SERVER4, (40000, 80), SYN)
        .payload(b"hello")
        .frame();
    let (_, out) = lab.run(&f);
    let (v, back) = lab.run(&echo(&out));
    assert_eq!(v, Verdict::ForwardTo(0));
    assert_eq!(&back[..6], &R1_MAC);
    assert_eq!(&back[6..12], &LB_MAC);
    assert_eq!(
        &back[12..],
        &f[12..],
        "the router gets its packet back as it sent it"
    );
    assert_eq!(lab.worker.counters.gateway_returned, 1);
    assert_eq!(lab.worker.counters.forwarded, 1);
}

#[test]
fn everything_else_an_appliance_might_send_is_dropped_by_reason() {
    let mut lab = Lab::new(&NVAS4, "NONE");
    let f = tcp(R1_MAC, CLIENT4, SERVER4, (40000, 80), SYN).frame();
    let (_, out) = lab.run(&f);
    let t = geneve_of(&out, &f);
    let (nva, other) = (NVAS4[nva_of(&t)], NVAS4[(nva_of(&t) + 1) % 3]);
    let cookie = t.gateway.cookie.unwrap();
    let cases: Vec<(&str, Vec<u8>, DropReason)> = vec![
        (
            "tampered cookie",
            returned(&f, nva, OWN4, opts(Some(ID1), Some(cookie ^ 1))),
            DropReason::GatewayCookieMismatch,
        ),
        (
            "options stripped",
            returned(&f, nva, OWN4, opts(None, None)),
            DropReason::GatewayOptionsMissing,
        ),
        (
            "no cookie",
            returned(&f, nva, OWN4, opts(Some(ID1), None)),
            DropReason::GatewayOptionsMissing,
        ),
        (
            "no endpoint ID",
            returned(&f, nva, OWN4, opts(None, Some(cookie))),
            DropReason::GatewayOptionsMissing,
        ),
        (
            "endpoint ID altered",
            returned(&f, nva, OWN4, opts(Some(0xdead), Some(cookie))),
            DropReason::GatewayEndpointUnknown,
        ),
        (
            "from an unknown source",
            returned(&f, "10.0.0.99", OWN4, opts(Some(ID1), Some(cookie))),
            DropReason::GatewayUnknownSource,
        ),
        (
            "from another appliance",
            returned(&f, other, OWN4, opts(Some(ID1), Some(cookie))),
            DropReason::GatewayWrongAppliance,
        ),
        (
            "a flow that does not exist",
            returned(
                &tcp(R1_MAC, CLIENT4, SERVER4, (40001, 80), SYN).frame(),
                nva,
                OWN4,
                opts(Some(ID1), Some(cookie)),
            ),
            DropReason::GatewayNoFlow,
        ),
    ];
    for (what, frame, reason) in cases {
        let before = lab.dropped(reason);
        let (v, _) = lab.run(&frame);
        assert_eq!(v, Verdict::Drop(reason), "{what}");
        assert_eq!(lab.dropped(reason), before + 1, "{what}: counted");
    }
    // Malformed: truncated inside the options.
    let good = returned(&f, nva, OWN4, opts(Some(ID1), Some(cookie)));
    let mut bad = good.clone();
    bad[14 + 20 + 8] = 0x3f; // Opt Len far beyond the packet
    assert_eq!(lab.run(&bad).0, Verdict::Drop(DropReason::GatewayMalformed));
    // An OAM packet.
    let mut oam = good.clone();
    oam[14 + 20 + 8 + 1] |= 0x80;
    assert_eq!(lab.run(&oam).0, Verdict::Drop(DropReason::GatewayMalformed));
    // Nothing was sent back; the good one still is.
    assert_eq!(lab.worker.counters.gateway_returned, 0);
    assert_eq!(lab.run(&good).0, Verdict::ForwardTo(0));
}

#[test]
fn an_appliance_is_never_a_relay() {
    // Its own inner packet to anywhere, with made-up options: no entry, so
    // no cookie it could know.
    let mut lab = Lab::new(&NVAS4, "NONE");
    let inner = tcp(NVA_MACS[0], "10.0.0.11", "192.0.2.80", (5555, 25), SYN).frame();
    for cookie in [0u32, 1, 0xffff_ffff, 0x1234_5678] {
        let f = returned(&inner, NVAS4[0], OWN4, opts(Some(ID1), Some(cookie)));
        assert_eq!(lab.run(&f).0, Verdict::Drop(DropReason::GatewayNoFlow));
    }
    // Plain traffic from an appliance to anywhere is not ours either.
    assert_eq!(lab.run(&inner).0, Verdict::Drop(DropReason::NotOurs));
}

#[test]
fn the_return_to_an_unresolved_endpoint_is_held_back() {
    let mut lab = Lab::new(&NVAS4, "NONE");
    let f = tcp(R1_MAC, CLIENT4, SERVER4, (40000, 80), SYN).frame();
    let (_, out) = lab.run(&f);
    lab.reconfigure(&NVAS4, "NONE", false);
    assert_eq!(
        lab.run(&echo(&out)).0,
        Verdict::Drop(DropReason::GatewayEndpointUnresolved)
    );
}

#[test]
fn an_unhealthy_appliance_keeps_its_flows_by_persistence_and_fails_open() {
    let mut lab = Lab::new(&NVAS4[..2], "NONE");
    let f = tcp(R1_MAC, CLIENT4, SERVER4, (40000, 80), SYN).frame();
    let (_, out) = lab.run(&f);
    let t = geneve_of(&out, &f);
    let sick = ip(NVAS4[nva_of(&t)]);
    let compiled = compile(&config(&NVAS4[..2], "NONE"));
    // Its appliance fails its checks: a TCP flow persists (M11), in both
    // directions, and its returns are still taken.
    let health = |id: config::compiled::EndpointId| {
        if compiled.endpoints[id.0 as usize].address == sick {
            SICK
        } else {
            EndpointHealth::HEALTHY
        }
    };
    lab.now += 1;
    lab.snap = lab
        .builder
        .build(
            compiled.clone(),
            local(&NVAS4[..2], true),
            health,
            lab.now,
            1,
        )
        .expect("snapshot");
    let ack = tcp(R1_MAC, CLIENT4, SERVER4, (40000, 80), ACK).frame();
    let (v, out2) = lab.run(&ack);
    assert_eq!(v, Verdict::Forward);
    assert_eq!(geneve_of(&out2, &ack).dst_ip, sick);
    assert_eq!(lab.run(&echo(&out2)).0, Verdict::ForwardTo(0));
    // A new connection goes to the healthy one.
    let f = tcp(R1_MAC, CLIENT4, SERVER4, (40001, 80), SYN).frame();
    let (_, out3) = lab.run(&f);
    assert_ne!(geneve_of(&out3, &f).dst_ip, sick);
    // Every appliance unhealthy: a gateway service fails open by default.
    let all_sick = |_| SICK;
    lab.snap = lab
        .builder
        .build(compiled, local(&NVAS4[..2], true), all_sick, lab.now, 1)
        .expect("snapshot");
    let f = tcp(R1_MAC, CLIENT4, SERVER4, (40002, 80), SYN).frame();
    assert_eq!(lab.run(&f).0, Verdict::Forward);
}

#[test]
fn an_icmp_error_about_a_flow_follows_it_and_comes_back() {
    let mut lab = Lab::new(&NVAS4, "NONE");
    let f = tcp(R1_MAC, CLIENT4, SERVER4, (40000, 80), SYN).frame();
    let (_, out) = lab.run(&f);
    let nva = nva_of(&geneve_of(&out, &f));
    // A router on the way to the server says the client's packet was too
    // big: it quotes the client → server packet and goes to the client.
    let quoted = tcp(R1_MAC, CLIENT4, SERVER4, (40000, 80), ACK).ip();
    let err = Packet::icmp(ip("172.16.9.1"), ip(CLIENT4), 3, 4, 1400)
        .payload(&quoted[..28])
        .macs(R1_MAC, LB_MAC)
        .frame();
    let (v, out) = lab.run(&err);
    assert_eq!(v, Verdict::Forward);
    assert_eq!(nva_of(&geneve_of(&out, &err)), nva);
    let (v, back) = lab.run(&echo(&out));
    assert_eq!(v, Verdict::ForwardTo(0));
    assert_eq!(&back[14..], &err[14..]);
}

#[test]
fn a_flow_without_entry_is_returned_by_its_keyed_cookie_to_its_own_endpoint_only() {
    let mut lab = Lab::new(&NVAS4, "NONE");
    // One new entry per tick: the second flow is forwarded without one.
    lab.snap.new_flow_budget = 1;
    let f1 = tcp(R1_MAC, CLIENT4, SERVER4, (40000, 80), SYN).frame();
    let f2 = tcp(R1_MAC, CLIENT4, SERVER4, (40001, 80), SYN).frame();
    lab.run(&f1);
    let (v, out) = lab.run(&f2);
    assert_eq!(v, Verdict::Forward);
    assert_eq!(lab.worker.counters.over_budget, 1);
    let t = geneve_of(&out, &f2);
    assert_eq!(lab.run(&echo(&out)).0, Verdict::ForwardTo(0));
    // The answer makes the flow's entry (the other budget): same appliance;
    // a packet sent before it, still at the appliance, is still taken.
    let back = tcp(R1_MAC, SERVER4, CLIENT4, (80, 40001), SYN | ACK).frame();
    let (_, out_b) = lab.run(&back);
    assert_eq!(geneve_of(&out_b, &back).dst_ip, t.dst_ip);
    assert_eq!(lab.worker.counters.new_flows, 2);
    assert_eq!(lab.run(&echo(&out)).0, Verdict::ForwardTo(0));
    assert_eq!(lab.run(&echo(&out_b)).0, Verdict::ForwardTo(0));
    // The same tuple under the other endpoint's ID: another tenant's flow,
    // whose keyed cookie differs.
    let nva = NVAS4[nva_of(&t)];
    let forged = returned(&f2, nva, OWN4, opts(Some(ID2), t.gateway.cookie));
    assert_eq!(lab.run(&forged).0, Verdict::Drop(DropReason::GatewayNoFlow));
}

#[test]
fn an_answer_from_a_udp_socket_with_the_ports_swapped_is_taken_too() {
    for nvas in [NVAS4, NVAS6] {
        let mut lab = Lab::new(&nvas, "NONE");
        let f = tcp(R1_MAC, CLIENT4, SERVER4, (40000, 80), SYN).frame();
        let (_, out) = lab.run(&f);
        let mut answer = echo(&out);
        let udp = if answer[14] >> 4 == 4 { 34 } else { 54 };
        let (s, d) = (
            answer[udp..udp + 2].to_vec(),
            answer[udp + 2..udp + 4].to_vec(),
        );
        answer[udp..udp + 2].copy_from_slice(&d);
        answer[udp + 2..udp + 4].copy_from_slice(&s);
        assert_eq!(u16::from_be_bytes([answer[udp], answer[udp + 1]]), 6081);
        let (v, back) = lab.run(&answer);
        assert_eq!(v, Verdict::ForwardTo(0));
        assert_eq!(&back[14..], &f[14..]);
    }
}

/// Random connections for the property below: (IPv6?, address A, address
/// B, port A, port B, UDP?, through endpoint 2?). Addresses are outside the
/// node's subnets (any unicast IPv4 but 10/8 and 127/8; IPv6 in
/// 2001:db8::/32).
fn connection()
-> impl proptest::strategy::Strategy<Value = (bool, IpAddr, IpAddr, u16, u16, bool, bool)> {
    use proptest::prelude::*;
    let v4 = (1u8..=223, any::<[u8; 3]>())
        .prop_filter("not ours", |(o, _)| *o != 10 && *o != 127)
        .prop_map(|(o, r)| IpAddr::from([o, r[0], r[1], r[2]]));
    let v6 = any::<[u8; 12]>().prop_map(|r| {
        let mut a = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        a[4..].copy_from_slice(&r);
        IpAddr::from(a)
    });
    any::<bool>()
        .prop_flat_map(move |is6| {
            let addr = if is6 {
                v6.clone().boxed()
            } else {
                v4.clone().boxed()
            };
            (
                Just(is6),
                addr.clone(),
                addr,
                1u16..,
                1u16..,
                any::<bool>(),
                any::<bool>(),
            )
        })
        .prop_filter("two ends", |c| c.1 != c.2)
}

#[test]
fn property_both_directions_share_appliance_and_cookie_and_echoes_return_unchanged() {
    use proptest::test_runner::{Config as RunnerConfig, TestCaseError, TestRunner};
    for affinity in [
        "NONE",
        "CLIENT_IP_PORT_PROTO",
        "CLIENT_IP_PROTO",
        "CLIENT_IP",
    ] {
        for nvas in [&NVAS4, &NVAS6] {
            let lab = std::cell::RefCell::new(Lab::new(nvas, affinity));
            let mut runner = TestRunner::new(RunnerConfig {
                cases: 64,
                failure_persistence: None,
                ..RunnerConfig::default()
            });
            let result = runner.run(&connection(), |(_, a, b, pa, pb, udp, via_r2)| {
                let mut lab = lab.borrow_mut();
                let (mac, id) = if via_r2 { (R2_MAC, ID2) } else { (R1_MAC, ID1) };
                let frame = |src: IpAddr, dst: IpAddr, sp: u16, dp: u16, flags: u8| {
                    let p = if udp {
                        Packet::udp(src, dst, sp, dp).payload(b"datagram")
                    } else {
                        Packet::tcp(src, dst, sp, dp, flags)
                    };
                    p.macs(mac, LB_MAC).frame()
                };
                let there = frame(a, b, pa, pb, SYN);
                let back = frame(b, a, pb, pa, SYN | ACK);
                let mut seen = Vec::new();
                for f in [&there, &back] {
                    let (v, out) = lab.run(f);
                    if v != Verdict::Forward {
                        return Err(TestCaseError::fail(format!("{affinity}: {v:?}")));
                    }
                    let t = geneve_of(&out, f);
                    proptest::prop_assert_eq!(t.gateway.endpoint_id, Some(id));
                    seen.push((nva_of(&t), t.gateway.cookie));
                    // The appliance's echo comes back as the endpoint sent
                    // it, MACs swapped.
                    let (v, ret) = lab.run(&echo(&out));
                    proptest::prop_assert_eq!(v, Verdict::ForwardTo(0), "{}", affinity);
                    proptest::prop_assert_eq!(&ret[..6], &mac[..]);
                    proptest::prop_assert_eq!(&ret[6..12], &LB_MAC[..]);
                    proptest::prop_assert_eq!(&ret[12..], &f[12..]);
                }
                proptest::prop_assert_eq!(
                    seen[0],
                    seen[1],
                    "{}: one appliance, one cookie for both directions",
                    affinity
                );
                Ok(())
            });
            if let Err(e) = result {
                panic!("{affinity}, {} appliances: {e}", nvas[0]);
            }
        }
    }
}

#[test]
fn a_flow_without_entry_is_returned_only_by_the_appliance_it_went_to() {
    let mut lab = Lab::new(&NVAS4, "NONE");
    lab.snap.new_flow_budget = 1;
    lab.run(&tcp(R1_MAC, CLIENT4, SERVER4, (40000, 80), SYN).frame());
    let f = tcp(R1_MAC, CLIENT4, SERVER4, (40001, 80), SYN).frame();
    let (_, out) = lab.run(&f);
    assert_eq!(lab.worker.counters.over_budget, 1);
    let t = geneve_of(&out, &f);
    let other = NVAS4[(nva_of(&t) + 1) % 3];
    // Another appliance that learnt the cookie.
    let leaked = returned(&f, other, OWN4, opts(Some(ID1), t.gateway.cookie));
    assert_eq!(
        lab.run(&leaked).0,
        Verdict::Drop(DropReason::GatewayWrongAppliance)
    );
    assert_eq!(lab.run(&echo(&out)).0, Verdict::ForwardTo(0));
}

#[test]
fn an_appliance_removed_from_the_file_takes_back_its_draining_flows() {
    let mut lab = Lab::new(&NVAS4[..2], "NONE");
    // Flows on both appliances.
    let mut on = [None, None];
    for port in 40000..40064u16 {
        let f = tcp(R1_MAC, CLIENT4, SERVER4, (port, 80), SYN).frame();
        let (_, out) = lab.run(&f);
        let n = nva_of(&geneve_of(&out, &f));
        on[n].get_or_insert((port, out));
    }
    let (port, out) = on[1].clone().expect("a flow on the second appliance");
    // The second appliance leaves the file: its flows drain (300 s default).
    lab.now += 1;
    lab.reconfigure(&NVAS4[..1], "NONE", true);
    let ack = tcp(R1_MAC, CLIENT4, SERVER4, (port, 80), ACK).frame();
    let (v, out2) = lab.run(&ack);
    assert_eq!(v, Verdict::Forward);
    assert_eq!(geneve_of(&out2, &ack).dst_ip, ip(NVAS4[1]));
    assert_eq!(lab.run(&echo(&out2)).0, Verdict::ForwardTo(0));
    assert_eq!(lab.run(&echo(&out)).0, Verdict::ForwardTo(0));
}

/// Bursts (the established flows' short path, the appliances' returns as
/// they come back) decide what the same packets decide one at a time, byte
/// for byte: forward and return, both families, both endpoints, SYNs, ACKs,
/// FINs and UDP, over the ticks that create, confirm and then follow the
/// flows' entries.
#[test]
fn bursts_of_gateway_flows_decide_what_packets_one_at_a_time_do() {
    for affinity in ["NONE", "CLIENT_IP_PROTO", "CLIENT_IP"] {
        let (mut one, mut burst) = (Lab::new(&NVAS4, affinity), Lab::new(&NVAS4, affinity));
        let mut frames = Vec::new();
        for i in 0..24u16 {
            let (mac, flags) = match i % 4 {
                0 => (R1_MAC, SYN),
                1 => (R2_MAC, ACK),
                2 => (R1_MAC, ACK | 0x01),
                _ => (R2_MAC, ACK),
            };
            let (c4, c6) = (
                format!("172.16.1.{}", 1 + i),
                format!("2001:db8:1::{}", 1 + i),
            );
            frames.push(tcp(mac, &c4, SERVER4, (40000 + i, 443), flags).frame());
            frames.push(tcp(mac, SERVER4, &c4, (443, 40000 + i), ACK).frame());
            frames.push(tcp(mac, &c6, SERVER6, (40000 + i, 80), flags).frame());
            frames.push(
                Packet::udp(ip(&c4), ip(SERVER4), 5000 + i, 53)
                    .macs(mac, LB_MAC)
                    .frame(),
            );
        }
        for tick in 1..=3 {
            one.now = tick;
            burst.now = tick;
            let want: Vec<_> = frames.iter().map(|f| one.run(f)).collect();
            let got = burst.run_burst(&frames);
            assert_eq!(got, want, "{affinity}, tick {tick}: forward");
            // What the appliances send back.
            let answers: Vec<_> = want
                .iter()
                .filter(|(v, _)| *v == Verdict::Forward)
                .map(|(_, out)| echo(out))
                .collect();
            assert_eq!(answers.len(), frames.len(), "{affinity}: all forwarded");
            let want: Vec<_> = answers.iter().map(|f| one.run(f)).collect();
            let got = burst.run_burst(&answers);
            assert_eq!(got, want, "{affinity}, tick {tick}: return");
            assert!(
                want.iter().all(|(v, _)| matches!(v, Verdict::ForwardTo(_))),
                "{affinity}, tick {tick}: all returned: {want:?}"
            );
        }
        assert_eq!(
            one.worker.counters.flow_hits,
            burst.worker.counters.flow_hits
        );
    }
}

// ---------------------------------------------------------------------------
// Trust (M53): what an appliance hands back is a packet of a flow the
// balancer sent it, the way it was sent, or an ICMP error about such a flow
// addressed to the packet's sender — from the appliance's own side. Every
// test below passed its forged packets through at 561821f.
// ---------------------------------------------------------------------------

/// Appliances behind a backend port of their own (port 1, 10.0.1.0/24);
/// the routers on the uplink (port 0).
const BACK4: &str = "10.0.1.2";
const FAR_NVAS: [&str; 3] = ["10.0.1.11", "10.0.1.12", "10.0.1.13"];

impl Lab {
    /// The gateway rule of [`config`] with its appliances behind a backend
    /// port.
    fn two_ports() -> Lab {
        let eps = endpoint_list(&FAR_NVAS);
        let cfg = Config::new()
            .port(port("up", "net_ring0", "uplink").strs("addresses", &["10.0.0.2/24"]))
            .port(port("back", "net_ring1", "backend").strs("addresses", &["10.0.1.2/24"]))
            .rule(
                rule("gw", &["10.0.0.10"], "L3_DEFAULT", "all", "nva")
                    .str("mode", "gateway")
                    .set(
                        "gateway_endpoints",
                        format!("[{{ address = \"{R1}\", id = {ID1:#x} }}]"),
                    ),
            )
            .service(service("nva", "geneve").child(group("a", "r", "z").set("endpoints", eps)));
        let hop = |port: usize, a: &str| NextHop {
            port,
            addr: a.parse().unwrap(),
        };
        let mut neighbours: Vec<(NextHop, [u8; 6])> = FAR_NVAS
            .iter()
            .zip(NVA_MACS)
            .map(|(a, m)| (hop(1, a), m))
            .collect();
        neighbours.push((hop(0, R1), R1_MAC));
        let local = Local {
            mac: LB_MAC,
            port_macs: vec![LB_MAC, LB_MAC],
            tunnel_src_v4: Some(BACK4.parse().unwrap()),
            own_addrs: vec![v4(OWN4), v4(BACK4), v4("10.0.0.10")],
            neighbours,
            ..Local::default()
        };
        Lab::of(&cfg, local)
    }
}

/// Which of [`FAR_NVAS`] got a packet.
fn far_nva_of(t: &TunnelInfo) -> usize {
    FAR_NVAS
        .iter()
        .position(|a| ip(a) == t.dst_ip)
        .expect("an appliance")
}

/// A Geneve packet from `src` (with `mac`) to `dst` carrying `inner` with
/// `options`.
fn returned_from(
    inner: &[u8],
    (src, mac): (&str, [u8; 6]),
    dst: &str,
    options: GatewayOptions,
) -> Vec<u8> {
    let mut f = returned(inner, src, dst, options);
    f[6..12].copy_from_slice(&mac);
    f
}

/// An ICMP error `src → dst` (destination unreachable, port unreachable)
/// quoting the first `quote` bytes of `quoted` (an IP packet), then `extra`
/// bytes of the sender's own; as an Ethernet frame.
fn icmp_error(src: &str, dst: &str, quoted: &[u8], quote: usize, extra: usize) -> Vec<u8> {
    let mut body = quoted[..quote.min(quoted.len())].to_vec();
    body.extend(std::iter::repeat_n(0x5a, extra));
    let (t, code) = if ip(src).is_ipv4() { (3, 3) } else { (1, 4) };
    Packet::icmp(ip(src), ip(dst), t, code, 0)
        .payload(&body)
        .macs(R1_MAC, LB_MAC)
        .frame()
}

/// Item 1: an appliance holding a flow's cookie can hand back an ICMP error
/// about that flow only to the sender of the packet it quotes, from the
/// flow's other participant, no longer than the quoted packet allows; an
/// error the balancer forwarded comes back as it went, and only so.
#[test]
fn an_appliance_relays_icmp_errors_only_about_its_flow_to_the_quoted_sender() {
    for (client, server, stranger) in [
        (CLIENT4, SERVER4, "198.51.100.66"),
        (CLIENT6, SERVER6, "2001:db8:66::1"),
    ] {
        let nvas = if ip(client).is_ipv4() { &NVAS4 } else { &NVAS6 };
        let mut lab = Lab::new(nvas, "NONE");
        let f = tcp(R1_MAC, client, server, (40000, 80), SYN).frame();
        let (_, out) = lab.run(&f);
        let t = geneve_of(&out, &f);
        let nva = nvas[nva_of(&t)];
        let own = if ip(client).is_ipv4() { OWN4 } else { OWN6 };
        let ok = opts(Some(ID1), t.gateway.cookie);
        let quoted = tcp(R1_MAC, client, server, (40000, 80), SYN).ip();
        // The quoted IP header and the first 8 bytes after it.
        let q = if ip(client).is_ipv4() { 28 } else { 48 };
        let back = |lab: &mut Lab, err: &[u8]| lab.run(&returned(err, nva, own, ok)).0;
        let refused = |r: DropReason| Verdict::Drop(r);
        // To anyone but the client, whatever the source.
        for (src, dst) in [(server, stranger), (stranger, stranger), (server, server)] {
            let e = icmp_error(src, dst, &quoted, q, 0);
            assert_eq!(
                back(&mut lab, &e),
                refused(DropReason::GatewayIcmpWrongDestination),
                "{src} → {dst}"
            );
        }
        // To the client, from a stranger: the balancer forwarded no such
        // error.
        let e = icmp_error(stranger, client, &quoted, q, 0);
        assert_eq!(
            back(&mut lab, &e),
            refused(DropReason::GatewayIcmpForeignSource)
        );
        // With 500 bytes of the appliance's own after what it quotes, or
        // longer than an error may be.
        let e = icmp_error(server, client, &quoted, quoted.len(), 500);
        assert_eq!(back(&mut lab, &e), refused(DropReason::GatewayIcmpTooLong));
        let big = tcp(R1_MAC, client, server, (40000, 80), SYN)
            .payload(&[7; 1400])
            .ip();
        let e = icmp_error(server, client, &big, big.len(), 0);
        assert_eq!(back(&mut lab, &e), refused(DropReason::GatewayIcmpTooLong));
        // About the server's direction, which the balancer never sent.
        let reply = tcp(R1_MAC, server, client, (80, 40000), SYN | ACK).ip();
        let e = icmp_error(client, server, &reply, q, 0);
        assert_eq!(
            back(&mut lab, &e),
            refused(DropReason::GatewayWrongDirection)
        );
        // The one an appliance may make: from the server to the client,
        // quoting the client's packet.
        let e = icmp_error(server, client, &quoted, q + 20, 0);
        let (v, out_e) = lab.run(&returned(&e, nva, own, ok));
        assert_eq!(v, Verdict::ForwardTo(0));
        assert_eq!(&out_e[14..], &e[14..]);
        // A router's error the balancer forwarded comes back as it went; its
        // source or length changed, it does not.
        let router = if ip(client).is_ipv4() {
            "172.16.9.1"
        } else {
            "2001:db8:9::1"
        };
        let e = icmp_error(router, client, &quoted, q, 0);
        let (v, fwd) = lab.run(&e);
        assert_eq!(v, Verdict::Forward);
        let te = geneve_of(&fwd, &e);
        assert_ne!(te.gateway.cookie, t.gateway.cookie, "an error's own cookie");
        assert_eq!(lab.run(&echo(&fwd)).0, Verdict::ForwardTo(0));
        // Its cookie is bound to its source and length: changed, it is no
        // cookie the balancer gave.
        let its = opts(Some(ID1), te.gateway.cookie);
        let moved = icmp_error(stranger, client, &quoted, q, 0);
        assert_eq!(
            lab.run(&returned(&moved, nva, own, its)).0,
            refused(DropReason::GatewayCookieMismatch)
        );
        let longer = icmp_error(router, client, &quoted, q + 12, 0);
        assert_eq!(
            lab.run(&returned(&longer, nva, own, its)).0,
            refused(DropReason::GatewayCookieMismatch)
        );
    }
}

/// Item 1: a packet of the flow comes back only the way the balancer sent
/// the flow's packets to the appliance; once the other direction was sent,
/// that way too.
#[test]
fn a_packet_is_returned_only_in_a_direction_the_appliance_was_sent() {
    let mut lab = Lab::new(&NVAS4, "NONE");
    let f = tcp(R1_MAC, CLIENT4, SERVER4, (40000, 443), SYN).frame();
    let (_, out) = lab.run(&f);
    let t = geneve_of(&out, &f);
    let nva = NVAS4[nva_of(&t)];
    let ok = opts(Some(ID1), t.gateway.cookie);
    // The server's answer, made up by the appliance with the flow's cookie.
    let forged = tcp(R1_MAC, SERVER4, CLIENT4, (443, 40000), SYN | ACK)
        .payload(b"not from the server")
        .frame();
    assert_eq!(
        lab.run(&returned(&forged, nva, OWN4, ok)).0,
        Verdict::Drop(DropReason::GatewayWrongDirection)
    );
    // In a burst too (the established flow's short path).
    let got = lab.run_burst(&[returned(&forged, nva, OWN4, ok), echo(&out)]);
    assert_eq!(
        got.iter().map(|(v, _)| *v).collect::<Vec<_>>(),
        [
            Verdict::Drop(DropReason::GatewayWrongDirection),
            Verdict::ForwardTo(0)
        ]
    );
    // The server answers through the balancer: now that way is the flow's.
    let answer = tcp(R1_MAC, SERVER4, CLIENT4, (443, 40000), SYN | ACK).frame();
    let (v, out_b) = lab.run(&answer);
    assert_eq!(v, Verdict::Forward);
    assert_eq!(lab.run(&echo(&out_b)).0, Verdict::ForwardTo(0));
    assert_eq!(
        lab.run(&returned(&forged, nva, OWN4, ok)).0,
        Verdict::ForwardTo(0)
    );
}

/// Item 3: a return is believed only from where the balancer reaches the
/// appliance: in on the appliances' port, from the appliance's MAC, to the
/// address the balancer sends to it from.
#[test]
fn returns_come_only_from_the_appliances_port_and_mac_to_the_sending_address() {
    let mut lab = Lab::two_ports();
    let f = tcp(R1_MAC, CLIENT4, SERVER4, (40000, 80), SYN).frame();
    let (v, out) = lab.run_on(0, &f);
    assert_eq!(v, Verdict::Forward);
    let t = geneve_of(&out, &f);
    assert_eq!(t.src_ip, ip(BACK4));
    let n = far_nva_of(&t);
    let ok = opts(Some(ID1), t.gateway.cookie);
    let good = returned_from(&f, (FAR_NVAS[n], NVA_MACS[n]), BACK4, ok);
    // Over the client-facing uplink.
    assert_eq!(
        lab.run_on(0, &good).0,
        Verdict::Drop(DropReason::GatewayWrongPort)
    );
    // From another MAC: a stranger's, another appliance's.
    for mac in [STRANGER_MAC, NVA_MACS[(n + 1) % 3], R1_MAC] {
        let forged = returned_from(&f, (FAR_NVAS[n], mac), BACK4, ok);
        assert_eq!(
            lab.run_on(1, &forged).0,
            Verdict::Drop(DropReason::GatewayWrongMac)
        );
    }
    // To another own address than the one it was sent from.
    let forged = returned_from(&f, (FAR_NVAS[n], NVA_MACS[n]), OWN4, ok);
    assert_eq!(
        lab.run_on(1, &forged).0,
        Verdict::Drop(DropReason::GatewayWrongDestination)
    );
    // As the contract says.
    assert_eq!(lab.run_on(1, &good).0, Verdict::ForwardTo(0));
}

/// Item 3: an appliance's refused returns are bounded per tick; beyond the
/// budget its returns, even good ones, are dropped unread until the next.
#[test]
fn an_appliance_guessing_cookies_is_cut_off_for_the_rest_of_the_tick() {
    let mut lab = Lab::new(&NVAS4, "NONE");
    let budget = lab.snap.gateway_mismatch_budget;
    assert_eq!(budget, 100, "the default gateway_mismatch_rate at 1 tick/s");
    let f = tcp(R1_MAC, CLIENT4, SERVER4, (40000, 80), SYN).frame();
    let (_, out) = lab.run(&f);
    let t = geneve_of(&out, &f);
    let (nva, cookie) = (NVAS4[nva_of(&t)], t.gateway.cookie.unwrap());
    let guess = |i: u32| returned(&f, nva, OWN4, opts(Some(ID1), Some(cookie ^ (i + 1))));
    for i in 0..budget {
        assert_eq!(
            lab.run(&guess(i)).0,
            Verdict::Drop(DropReason::GatewayCookieMismatch)
        );
    }
    for i in budget..budget + 50 {
        assert_eq!(
            lab.run(&guess(i)).0,
            Verdict::Drop(DropReason::GatewayMismatchBudget)
        );
    }
    assert_eq!(
        lab.run(&echo(&out)).0,
        Verdict::Drop(DropReason::GatewayMismatchBudget)
    );
    // Another appliance is not affected; the next tick, this one neither.
    let other = NVAS4[(nva_of(&t) + 1) % 3];
    let theirs = returned(&f, other, OWN4, opts(Some(ID1), Some(cookie)));
    assert_eq!(
        lab.run(&theirs).0,
        Verdict::Drop(DropReason::GatewayWrongAppliance)
    );
    lab.now += 1;
    assert_eq!(lab.run(&echo(&out)).0, Verdict::ForwardTo(0));
    assert_eq!(
        lab.dropped(DropReason::GatewayCookieMismatch),
        u64::from(budget)
    );
}

/// Item 2: the cookie of a flow forwarded without an entry is a keyed PRF
/// of the flow (not of its public hash), its direction and its tenant:
/// flows whose public `spillway-flow-v1` hashes are equal get unrelated
/// cookies, and another key gives another cookie.
#[test]
fn cookies_of_flows_without_entries_are_keyed_and_unrelated() {
    // IPv6 sources whose upper half is the public hash's first constant:
    // the lower half then never reaches it, so all these flows share one
    // public hash.
    const K0: &str = "243f:6a88:85a3:8d3";
    let client = |i: u32| format!("{K0}:0:0:0:{:x}", i + 1);
    // After the clients in the symmetric key's order.
    const SERVER6: &str = "2fff::9";
    let public = |i: u32| {
        let k = wire::flow::FlowKey::from_packet(
            &wire::packet::parse_frame(&tcp(R1_MAC, &client(i), SERVER6, (40000, 80), SYN).frame())
                .map(|f| match f {
                    wire::packet::Frame::Ip(_, info) => info,
                    _ => panic!("IP"),
                })
                .unwrap(),
            wire::flow::Affinity::None,
        );
        k.symmetric().hash64()
    };
    assert_eq!(public(0), public(1), "one public hash");
    let cookies = |key: dataplane::CookieKey| {
        let mut lab = Lab::new(&NVAS6, "NONE");
        lab.builder = SnapshotBuilder::with_cookie_key(key);
        lab.reconfigure(&NVAS6, "NONE", true);
        // No entries: every flow is forwarded with its keyed cookie.
        lab.snap.new_flow_budget = 1;
        lab.run(&tcp(R1_MAC, CLIENT6, SERVER6, (1, 80), SYN).frame());
        lab.run(&tcp(R1_MAC, CLIENT6, SERVER6, (2, 80), ACK).frame());
        let mut c = Vec::new();
        for i in 0..64 {
            let f = tcp(R1_MAC, &client(i), SERVER6, (40000, 80), SYN).frame();
            let (_, out) = lab.run(&f);
            c.push(geneve_of(&out, &f).gateway.cookie.unwrap());
            // The same flow the other way.
            let b = tcp(R1_MAC, SERVER6, &client(i), (80, 40000), SYN | ACK).frame();
            let (_, out_b) = lab.run(&b);
            assert_ne!(
                geneve_of(&out_b, &b).gateway.cookie.unwrap(),
                c[c.len() - 1]
            );
        }
        assert_eq!(
            lab.worker.counters.new_flows, 2,
            "all forwarded without entries"
        );
        c
    };
    let a = cookies(dataplane::CookieKey::fixed(1, 2));
    let mut distinct = a.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), a.len(), "one public hash, 64 cookies");
    let b = cookies(dataplane::CookieKey::fixed(1, 3));
    assert!(a.iter().zip(&b).all(|(x, y)| x != y), "another key");
}
