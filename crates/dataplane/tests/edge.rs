#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly
#![allow(clippy::cast_possible_truncation)] // test values are small
//! Edge hygiene (M55) on in-memory buffers: every frame a router would not
//! take is dropped and counted by its reason — another host's MAC, a VLAN
//! tag on an untagged port, a bad IPv4 header checksum, TTL 0, a source
//! route, a martian source — whichever way it comes: the fast path, the
//! general one, to the host, in a tunnel to an own address, through a
//! gateway rule. What still passes is shown next to each: the same frame
//! made right, ARP broadcasts and neighbour discovery multicast.
//!
//! Each frame goes through [`Pipeline::process`] and, on a twin worker,
//! through [`Pipeline::process_burst`]: both must decide alike. Verdicts are
//! compared by their names (`"drop ttl_zero"`).

use std::net::{IpAddr, Ipv6Addr};
use std::sync::Arc;

use dataplane::nexthop::NextHop;
use dataplane::{DropReason, EndpointHealth, Local, Pipeline, Snapshot, SnapshotBuilder, Verdict};
use flowtable::FlowTable;
use testkit::config::{Config, endpoint_list, group, port, rule, service};
use testkit::packet::{ACK, Packet, SYN, arp_request, encap, outer, v4, v6};
use wire::buf::{MemBuf, PacketBuf};
use wire::encap::Tunnel;

const LB_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
const ROUTER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0xfe];
const PEER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x99];
/// Another host on the segment.
const OTHER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x55];

const OWN4: &str = "10.0.0.2";
const OWN6: &str = "fd00::2";
const VIP4: &str = "10.0.0.10";
const VIP6: &str = "fd00::10";
/// Another VIP of the node, of each family.
const VIP4B: &str = "10.0.0.11";
const VIP6B: &str = "fd00::11";
const CLIENT4: &str = "198.51.100.7";
const CLIENT6: &str = "2001:db8:c::7";
/// A tunnel peer `[tunnel_ingress]` allows.
const PEER4: &str = "192.0.2.200";

/// The uplink with both own addresses; TCP 80 on both VIPs of each family
/// and UDP 53 on the first, to a GUE service; tunnels from the peer taken.
fn config() -> Config {
    Config::new()
        .port(port("up", "net_ring0", "uplink").strs("addresses", &["10.0.0.2/24", "fd00::2/64"]))
        .rule(rule("web", &[VIP4, VIP4B], "TCP", "80", "web"))
        .rule(rule("web6", &[VIP6, VIP6B], "TCP", "80", "web"))
        .rule(rule("dns", &[VIP4], "UDP", "53", "web"))
        .service(service("web", "gue").child(group("a", "r", "z").set(
            "endpoints",
            endpoint_list(&["10.0.1.11", "10.0.1.12", "10.0.1.13"]),
        )))
        .raw("[tunnel_ingress]\nallow = [\"192.0.2.200/32\"]\n")
}

fn compile(cfg: &Config) -> Arc<config::Compiled> {
    match config::load_str("test.toml", &cfg.build(), &config::Env::default()) {
        Ok(l) => Arc::new(l.compiled),
        Err(e) => panic!("test config rejected:\n{e}"),
    }
}

/// A snapshot, and two workers with a flow table each: one processes
/// packets one at a time, the other in bursts.
struct Lab {
    snap: Snapshot,
    one: (Pipeline, FlowTable),
    burst: (Pipeline, FlowTable),
    rx_port: Option<usize>,
}

impl Lab {
    fn new() -> Lab {
        let local = Local {
            mac: LB_MAC,
            next_hop_mac: ROUTER_MAC,
            tunnel_src_v4: Some("10.0.1.2".parse().unwrap()),
            own_addrs: vec![v4(OWN4), v6(OWN6)],
            ..Local::default()
        };
        Lab::of(&config(), local, None)
    }

    fn of(cfg: &Config, local: Local, rx_port: Option<usize>) -> Lab {
        let snap = SnapshotBuilder::new()
            .build(compile(cfg), local, |_| EndpointHealth::HEALTHY, 0, 1)
            .expect("snapshot");
        let side = || {
            (
                Pipeline::new(7, snap.compiled.children.len()),
                FlowTable::new(flowtable::Config::with_capacity(4096)).expect("flow table"),
            )
        };
        Lab {
            one: side(),
            burst: side(),
            snap,
            rx_port,
        }
    }

    /// What becomes of `frame`, by name; both ways must agree.
    fn run(&mut self, frame: &[u8]) -> String {
        let mut a = MemBuf::new(vec![0u8; 2048 + frame.len()], 128, frame).expect("fits");
        let mut b = vec![MemBuf::new(vec![0u8; 2048 + frame.len()], 128, frame).expect("fits")];
        let mut vb = [Verdict::ToHost];
        if let Some(p) = self.rx_port {
            self.one.0.set_rx_port(p);
            self.burst.0.set_rx_port(p);
        }
        let va = self.one.0.process(&self.snap, &self.one.1, 1, &mut a);
        self.burst
            .0
            .process_burst(&self.snap, &self.burst.1, 1, &mut b, &mut vb);
        assert_eq!(va, vb[0], "process and process_burst disagree");
        assert_eq!(a.data(), b[0].data(), "process and process_burst disagree");
        name(va)
    }

    /// Drops counted under `reason` (by name) by the one-at-a-time worker.
    fn dropped(&self, reason: &str) -> u64 {
        let c = &self.one.0.counters;
        DropReason::ALL
            .iter()
            .find(|r| r.name() == reason)
            .map_or(0, |r| c.dropped(*r))
    }

    /// Checks each `(what, frame, verdict)`, and that every drop among
    /// them was counted once under its reason.
    fn expect(&mut self, cases: &[(&str, Vec<u8>, &str)]) {
        let before: Vec<(&str, u64)> = cases
            .iter()
            .filter_map(|(_, _, v)| v.strip_prefix("drop "))
            .map(|r| (r, self.dropped(r)))
            .collect();
        for (what, frame, want) in cases {
            assert_eq!(self.run(frame), *want, "{what}");
        }
        for (r, n) in before {
            let more = cases
                .iter()
                .filter(|c| c.2.strip_prefix("drop ") == Some(r));
            assert_eq!(self.dropped(r), n + more.count() as u64, "counted as {r}");
        }
    }
}

fn name(v: Verdict) -> String {
    match v {
        Verdict::Forward => "forward".into(),
        Verdict::ForwardTo(p) => format!("forward to {p}"),
        Verdict::Reply => "reply".into(),
        Verdict::ToHost => "to_host".into(),
        Verdict::Drop(r) => format!("drop {}", r.name()),
        Verdict::Fragment(_) => "fragment".into(),
    }
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// A TCP SYN `src` → `dst`:80 from a neighbour's MAC to ours.
fn syn(src: &str, dst: &str, sport: u16) -> Packet {
    Packet::tcp(ip(src), ip(dst), sport, 80, SYN).macs(PEER_MAC, LB_MAC)
}

/// UDP `src` → `dst`:`dport` from a neighbour's MAC to ours.
fn udp(src: &str, dst: &str, dport: u16) -> Packet {
    Packet::udp(ip(src), ip(dst), 40000, dport)
        .payload(b"x")
        .macs(PEER_MAC, LB_MAC)
}

/// `p` sent to `mac` instead of ours.
fn to(p: Packet, mac: [u8; 6]) -> Vec<u8> {
    p.macs(PEER_MAC, mac).frame()
}

/// An IPv4 frame with its header checksum broken.
fn bad_checksum(mut frame: Vec<u8>) -> Vec<u8> {
    frame[24] ^= 0x5a;
    frame
}

/// `frame` (Ethernet, then IPv6 without extension headers) with a routing
/// header inserted after the IPv6 header: `routing_type`, `left` segments
/// left, `segments` (Segment List\[0\] first) in an SRH's layout (type 4)
/// or after 4 reserved bytes (the others).
fn with_routing(frame: &[u8], routing_type: u8, left: u8, segments: &[&str]) -> Vec<u8> {
    let mut rh = vec![frame[20], (segments.len() * 2) as u8, routing_type, left];
    if routing_type == 4 {
        rh.extend([segments.len().saturating_sub(1) as u8, 0, 0, 0]);
    } else {
        rh.extend([0; 4]);
    }
    for s in segments {
        rh.extend(s.parse::<Ipv6Addr>().unwrap().octets());
    }
    let mut f = frame[..54].to_vec();
    f[20] = 43;
    let len = u16::from_be_bytes([f[18], f[19]]) + rh.len() as u16;
    f[18..20].copy_from_slice(&len.to_be_bytes());
    f.extend(rh);
    f.extend(&frame[54..]);
    f
}

/// `inner` (an Ethernet frame) in IP-in-IP from the allowed peer to our
/// own address, to our MAC.
fn tunnelled(inner: &[u8]) -> Vec<u8> {
    let mut o = outer(ip(PEER4), ip(OWN4));
    o.src_mac = PEER_MAC;
    o.dst_mac = LB_MAC;
    encap(inner, &o, &Tunnel::IpIp)
}

#[test]
fn frames_to_another_mac_are_dropped_but_arp_and_neighbour_discovery_pass() {
    let mut lab = Lab::new();
    let ns = {
        // A solicitation for the v6 VIP to its solicited-node group.
        let mut body = VIP6.parse::<Ipv6Addr>().unwrap().octets().to_vec();
        body.extend([1, 1]);
        body.extend(PEER_MAC);
        Packet::icmp(ip(CLIENT6), ip("ff02::1:ff00:10"), 135, 0, 0)
            .payload(&body)
            .ttl(255)
            .macs(PEER_MAC, [0x33, 0x33, 0xff, 0, 0, 0x10])
            .frame()
    };
    let ra = Packet::icmp(ip("fe80::1"), ip("ff02::1"), 134, 0, 0x4000_0708)
        .payload(&[0; 8])
        .ttl(255)
        .macs(ROUTER_MAC, [0x33, 0x33, 0, 0, 0, 1])
        .frame();
    let mut lldp = vec![0x01, 0x80, 0xc2, 0, 0, 0x0e];
    lldp.extend(PEER_MAC);
    lldp.extend([0x88, 0xcc]);
    lldp.extend([0u8; 46]);
    let mut arp_unicast_elsewhere = arp_request(
        PEER_MAC,
        "10.0.0.7".parse().unwrap(),
        "10.0.0.10".parse().unwrap(),
    );
    arp_unicast_elsewhere[..6].copy_from_slice(&OTHER_MAC);
    lab.expect(&[
        ("to our MAC", syn(CLIENT4, VIP4, 1000).frame(), "forward"),
        (
            "another host's",
            to(syn(CLIENT4, VIP4, 1001), OTHER_MAC),
            "drop l2_foreign_dst",
        ),
        (
            "broadcast",
            to(syn(CLIENT4, VIP4, 1002), [0xff; 6]),
            "drop l2_foreign_dst",
        ),
        (
            "IPv4 multicast MAC",
            to(udp(CLIENT4, VIP4, 53), [0x01, 0, 0x5e, 0, 0, 1]),
            "drop l2_foreign_dst",
        ),
        (
            "IPv6 multicast MAC, TCP",
            to(syn(CLIENT6, VIP6, 1003), [0x33, 0x33, 0, 0, 0, 0x10]),
            "drop l2_foreign_dst",
        ),
        (
            "v6 to another host's MAC",
            to(syn(CLIENT6, VIP6, 1004), OTHER_MAC),
            "drop l2_foreign_dst",
        ),
        (
            "to the host, another host's MAC",
            to(udp(CLIENT4, OWN4, 5000), OTHER_MAC),
            "drop l2_foreign_dst",
        ),
        (
            "to the host, broadcast",
            to(udp(CLIENT4, OWN4, 5000), [0xff; 6]),
            "drop l2_foreign_dst",
        ),
        (
            "to the host, our MAC",
            udp(CLIENT4, OWN4, 5000).frame(),
            "to_host",
        ),
        ("LLDP (link-local multicast)", lldp, "drop l2_foreign_dst"),
        (
            "ARP to another host's MAC",
            arp_unicast_elsewhere,
            "drop l2_foreign_dst",
        ),
        (
            "ARP broadcast for the VIP",
            arp_request(
                PEER_MAC,
                "10.0.0.7".parse().unwrap(),
                "10.0.0.10".parse().unwrap(),
            ),
            "reply",
        ),
        ("NS to the VIP's solicited-node group", ns, "reply"),
        ("RA to all nodes", ra, "to_host"),
    ]);
}

#[test]
fn vlan_tagged_frames_are_dropped_on_untagged_ports() {
    let mut lab = Lab::new();
    let mut arp_vlan3 = arp_request(
        PEER_MAC,
        "10.0.0.7".parse().unwrap(),
        "10.0.0.10".parse().unwrap(),
    );
    arp_vlan3.splice(12..12, [0x81, 0x00, 0x00, 0x03]);
    let mut three_tags = syn(CLIENT4, VIP4, 2003).frame();
    three_tags.splice(12..12, [0x88, 0xa8, 0, 1, 0x81, 0, 0, 2, 0x81, 0, 0, 3]);
    lab.expect(&[
        ("untagged", syn(CLIENT4, VIP4, 2000).frame(), "forward"),
        (
            "802.1Q",
            syn(CLIENT4, VIP4, 2001).vlan(0x8100, 3).frame(),
            "drop vlan_untagged_port",
        ),
        (
            "QinQ",
            syn(CLIENT4, VIP4, 2002)
                .vlan(0x88a8, 10)
                .vlan(0x8100, 3)
                .frame(),
            "drop vlan_untagged_port",
        ),
        ("three tags", three_tags, "drop vlan_untagged_port"),
        (
            "802.1Q IPv6",
            syn(CLIENT6, VIP6, 2004).vlan(0x8100, 3).frame(),
            "drop vlan_untagged_port",
        ),
        (
            "ARP for a VIP on VLAN 3",
            arp_vlan3,
            "drop vlan_untagged_port",
        ),
        (
            "to the host on VLAN 3",
            udp(CLIENT4, OWN4, 22).vlan(0x8100, 3).frame(),
            "drop vlan_untagged_port",
        ),
    ]);
}

#[test]
fn ipv4_headers_whose_checksum_fails_are_dropped() {
    let mut lab = Lab::new();
    let options = [7, 7, 4, 0, 0, 0, 0, 0]; // record route: harmless
    lab.expect(&[
        ("right", syn(CLIENT4, VIP4, 3000).frame(), "forward"),
        (
            "wrong",
            bad_checksum(syn(CLIENT4, VIP4, 3001).frame()),
            "drop ipv4_bad_checksum",
        ),
        (
            "zero",
            {
                let mut f = syn(CLIENT4, VIP4, 3002).frame();
                f[24..26].copy_from_slice(&[0, 0]);
                f
            },
            "drop ipv4_bad_checksum",
        ),
        (
            "UDP",
            bad_checksum(udp(CLIENT4, VIP4, 53).frame()),
            "drop ipv4_bad_checksum",
        ),
        (
            "with options, right",
            syn(CLIENT4, VIP4, 3003).ip_options(&options).frame(),
            "forward",
        ),
        (
            "with options, wrong",
            bad_checksum(syn(CLIENT4, VIP4, 3004).ip_options(&options).frame()),
            "drop ipv4_bad_checksum",
        ),
        (
            "to the host",
            bad_checksum(udp(CLIENT4, OWN4, 5000).frame()),
            "drop ipv4_bad_checksum",
        ),
        (
            "ICMP",
            bad_checksum(
                Packet::echo(ip(CLIENT4), ip(VIP4), 1, 1)
                    .macs(PEER_MAC, LB_MAC)
                    .frame(),
            ),
            "drop ipv4_bad_checksum",
        ),
    ]);
}

#[test]
fn ttl_or_hop_limit_zero_is_dropped() {
    let mut lab = Lab::new();
    lab.expect(&[
        ("TTL 1", syn(CLIENT4, VIP4, 4000).ttl(1).frame(), "forward"),
        (
            "TTL 0",
            syn(CLIENT4, VIP4, 4001).ttl(0).frame(),
            "drop ttl_zero",
        ),
        (
            "TTL 0, UDP",
            udp(CLIENT4, VIP4, 53).ttl(0).frame(),
            "drop ttl_zero",
        ),
        (
            "TTL 0 with options",
            syn(CLIENT4, VIP4, 4002)
                .ttl(0)
                .ip_options(&[1, 1, 1, 0])
                .frame(),
            "drop ttl_zero",
        ),
        (
            "TTL 0 to the host",
            udp(CLIENT4, OWN4, 5000).ttl(0).frame(),
            "drop ttl_zero",
        ),
        (
            "hop limit 1",
            syn(CLIENT6, VIP6, 4003).ttl(1).frame(),
            "forward",
        ),
        (
            "hop limit 0",
            syn(CLIENT6, VIP6, 4004).ttl(0).frame(),
            "drop ttl_zero",
        ),
        (
            "hop limit 0 to the host",
            udp(CLIENT6, OWN6, 5000).ttl(0).frame(),
            "drop ttl_zero",
        ),
    ]);
}

#[test]
fn ipv4_source_routes_are_dropped() {
    let mut lab = Lab::new();
    // Route: 192.0.2.1 then the VIP (the pointer at the first address).
    let route = |kind: u8| [1, kind, 11, 4, 192, 0, 2, 1, 10, 0, 0, 10];
    lab.expect(&[
        ("no options", syn(CLIENT4, VIP4, 5000).frame(), "forward"),
        (
            "record route",
            syn(CLIENT4, VIP4, 5001)
                .ip_options(&[7, 7, 4, 0, 0, 0, 0, 0])
                .frame(),
            "forward",
        ),
        (
            "loose source route",
            syn(CLIENT4, VIP4, 5002).ip_options(&route(0x83)).frame(),
            "drop ip_source_route",
        ),
        (
            "strict source route",
            syn(CLIENT4, VIP4, 5003).ip_options(&route(0x89)).frame(),
            "drop ip_source_route",
        ),
        (
            "loose, to the host",
            udp(CLIENT4, OWN4, 5000).ip_options(&route(0x83)).frame(),
            "drop ip_source_route",
        ),
        (
            "an option longer than the options",
            syn(CLIENT4, VIP4, 5004).ip_options(&[7, 9, 4, 0]).frame(),
            "drop malformed",
        ),
    ]);
}

#[test]
fn ipv6_type_0_routing_headers_are_dropped() {
    let mut lab = Lab::new();
    let plain = syn(CLIENT6, VIP6, 6000).frame();
    lab.expect(&[
        ("no routing header", plain.clone(), "forward"),
        (
            "RH0, a segment left",
            with_routing(&syn(CLIENT6, VIP6, 6001).frame(), 0, 1, &["2001:db8:66::1"]),
            "drop ipv6_rh0",
        ),
        (
            "RH0, none left",
            with_routing(&syn(CLIENT6, VIP6, 6002).frame(), 0, 0, &["2001:db8:66::1"]),
            "drop ipv6_rh0",
        ),
        (
            "RH0 to the host",
            with_routing(&udp(CLIENT6, OWN6, 5000).frame(), 0, 1, &["2001:db8:66::1"]),
            "drop ipv6_rh0",
        ),
    ]);
}

#[test]
fn ipv6_segment_routing_only_on_to_our_vips() {
    let mut lab = Lab::new();
    let f = |sport: u16| syn(CLIENT6, VIP6, sport).frame();
    lab.expect(&[
        (
            "SRH, the next segment another host",
            with_routing(&f(7000), 4, 1, &["2001:db8:66::1", VIP6]),
            "drop ipv6_srh_foreign",
        ),
        (
            "SRH, a later segment another host",
            with_routing(&f(7001), 4, 2, &["2001:db8:66::1", VIP6B, VIP6]),
            "drop ipv6_srh_foreign",
        ),
        (
            "SRH, every segment left a VIP",
            with_routing(&f(7002), 4, 2, &[VIP6B, VIP6B, VIP6]),
            "forward",
        ),
        (
            "SRH, no segment left",
            with_routing(&f(7003), 4, 0, &["2001:db8:66::1", VIP6]),
            "forward",
        ),
        (
            "SRH, more segments left than listed",
            with_routing(&f(7004), 4, 3, &[VIP6B, VIP6]),
            "drop malformed",
        ),
        (
            "type 3, a segment left",
            with_routing(&f(7005), 3, 1, &["2001:db8:66::1"]),
            "drop ip_source_route",
        ),
        (
            "type 2, none left",
            with_routing(&f(7006), 2, 0, &["2001:db8:66::1"]),
            "forward",
        ),
    ]);
}

#[test]
fn martian_sources_are_dropped_whichever_way_they_come() {
    let mut lab = Lab::new();
    let mut cases = Vec::new();
    let v4_martians = [
        "0.0.0.0",
        "0.1.2.3",
        "127.0.0.1",
        "224.0.0.5",
        "239.1.2.3",
        "240.0.0.1",
        "255.255.255.255",
    ];
    let v6_martians = ["::", "::1", "ff02::1", "ff0e::1"];
    let ours4 = [VIP4, VIP4B, OWN4];
    let ours6 = [VIP6, VIP6B, OWN6];
    for (i, src) in v4_martians.iter().chain(&ours4).enumerate() {
        let sport = 8000 + i as u16;
        cases.push((*src, syn(src, VIP4, sport).frame(), "drop martian_source"));
        cases.push((*src, udp(src, VIP4, 53).frame(), "drop martian_source"));
        cases.push((*src, udp(src, OWN4, 5000).frame(), "drop martian_source"));
        // The general path: an option, an echo request.
        cases.push((
            *src,
            syn(src, VIP4, sport).ip_options(&[1, 1, 1, 0]).frame(),
            "drop martian_source",
        ));
        cases.push((
            *src,
            Packet::echo(ip(src), ip(VIP4), 1, 1)
                .macs(PEER_MAC, LB_MAC)
                .frame(),
            "drop martian_source",
        ));
    }
    for (i, src) in v6_martians.iter().chain(&ours6).enumerate() {
        let sport = 8100 + i as u16;
        cases.push((*src, syn(src, VIP6, sport).frame(), "drop martian_source"));
        cases.push((*src, udp(src, OWN6, 5000).frame(), "drop martian_source"));
        cases.push((
            *src,
            Packet::echo(ip(src), ip(VIP6), 1, 1)
                .macs(PEER_MAC, LB_MAC)
                .frame(),
            "drop martian_source",
        ));
    }
    // What is not martian: private, link-local, NAT64 and documentation
    // addresses.
    for (i, src) in ["10.9.9.9", "169.254.1.1", "192.0.2.9", "198.51.100.250"]
        .iter()
        .enumerate()
    {
        cases.push((*src, syn(src, VIP4, 8200 + i as u16).frame(), "forward"));
    }
    for (i, src) in ["fe80::1", "64:ff9b::a00:1", "2001:db8::9"]
        .iter()
        .enumerate()
    {
        cases.push((*src, syn(src, VIP6, 8300 + i as u16).frame(), "forward"));
    }
    lab.expect(&cases);
    // Dropped after the rule matched: its child rule counts the drops.
    let web = lab
        .snap
        .compiled
        .children
        .iter()
        .position(|c| c.name == "web-ag0")
        .unwrap();
    let c = &lab.one.0.counters.children[web];
    let martian = DropReason::ALL
        .iter()
        .position(|r| r.name() == "martian_source")
        .unwrap();
    assert_eq!(
        c.drop_reasons[martian],
        (v4_martians.len() + ours4.len()) as u64
    );
}

/// A flow's packets keep flowing; its source was checked once, when its
/// entry was made (a martian's never is).
#[test]
fn an_established_flow_is_not_checked_again_and_a_martian_never_gets_one() {
    let mut lab = Lab::new();
    let c = |flags| {
        Packet::tcp(ip(CLIENT4), ip(VIP4), 9000, 80, flags)
            .macs(PEER_MAC, LB_MAC)
            .frame()
    };
    assert_eq!(lab.run(&c(SYN)), "forward");
    for _ in 0..3 {
        assert_eq!(lab.run(&c(ACK)), "forward");
    }
    let m = |flags| {
        Packet::tcp(ip(VIP4B), ip(VIP4), 9000, 80, flags)
            .macs(PEER_MAC, LB_MAC)
            .frame()
    };
    for flags in [SYN, ACK, ACK] {
        assert_eq!(lab.run(&m(flags)), "drop martian_source");
    }
    assert_eq!(lab.one.0.counters.new_flows, 1);
    assert_eq!(lab.burst.0.counters.new_flows, 1);
}

/// M49: a decapsulated packet passes the same checks as one that arrived
/// directly.
#[test]
fn inner_packets_of_tunnels_pass_the_same_checks() {
    let mut lab = Lab::new();
    let inner = |p: Packet| p.macs(PEER_MAC, LB_MAC).frame();
    lab.expect(&[
        (
            "right",
            tunnelled(&inner(syn(CLIENT4, VIP4, 10_000))),
            "forward",
        ),
        (
            "inner TTL 0",
            tunnelled(&inner(syn(CLIENT4, VIP4, 10_001).ttl(0))),
            "drop ttl_zero",
        ),
        (
            "inner source loopback",
            tunnelled(&inner(syn("127.0.0.1", VIP4, 10_002))),
            "drop martian_source",
        ),
        (
            "inner source a VIP",
            tunnelled(&inner(syn(VIP4B, VIP4, 10_003))),
            "drop martian_source",
        ),
        (
            "inner checksum wrong",
            tunnelled(&bad_checksum(inner(syn(CLIENT4, VIP4, 10_004)))),
            "drop ipv4_bad_checksum",
        ),
        (
            "inner source route",
            tunnelled(&inner(
                syn(CLIENT4, VIP4, 10_005).ip_options(&[0x83, 7, 4, 10, 0, 0, 10, 0]),
            )),
            "drop ip_source_route",
        ),
        (
            "outer TTL 0",
            {
                let mut f = tunnelled(&inner(syn(CLIENT4, VIP4, 10_006)));
                f[22] = 0;
                // The outer checksum follows the TTL (RFC 1624).
                let c = u16::from_be_bytes([f[24], f[25]]);
                let sum = u32::from(!c)
                    + u32::from(!u16::from_be_bytes([64, 4]))
                    + u32::from(u16::from_be_bytes([0, 4]));
                let sum = (sum & 0xffff) + (sum >> 16);
                f[24..26].copy_from_slice(&(!((sum & 0xffff) + (sum >> 16)) as u16).to_be_bytes());
                f
            },
            "drop ttl_zero",
        ),
        (
            "outer source loopback",
            {
                let mut o = outer(ip("127.0.0.1"), ip(OWN4));
                o.src_mac = PEER_MAC;
                o.dst_mac = LB_MAC;
                encap(&inner(syn(CLIENT4, VIP4, 10_007)), &o, &Tunnel::IpIp)
            },
            "drop martian_source",
        ),
    ]);
    assert_eq!(
        lab.one.0.counters.decap_ipip, 6,
        "the first six were decapsulated"
    );
}

/// M31: through a gateway rule every source is checked, at both ends of a
/// flow (both directions share one entry).
#[test]
fn martian_sources_never_pass_a_gateway_rule() {
    const R1: &str = "10.0.0.1";
    const R1_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0xf1];
    let cfg = Config::new()
        .port(port("up", "net_ring0", "uplink").strs("addresses", &["10.0.0.2/24", "fd00::2/64"]))
        .rule(
            rule("gw", &[VIP4], "L3_DEFAULT", "all", "nva")
                .str("mode", "gateway")
                .set(
                    "gateway_endpoints",
                    format!("[{{ address = \"{R1}\", id = 1 }}]"),
                ),
        )
        .service(service("nva", "geneve").child(
            group("a", "r", "z").set("endpoints", endpoint_list(&["10.0.0.21", "10.0.0.22"])),
        ));
    let hop = |a: &str| NextHop {
        port: 0,
        addr: a.parse().unwrap(),
    };
    let local = Local {
        mac: LB_MAC,
        port_macs: vec![LB_MAC],
        tunnel_src_v4: Some(OWN4.parse().unwrap()),
        tunnel_src_v6: Some(OWN6.parse().unwrap()),
        own_addrs: vec![v4(OWN4), v6(OWN6)],
        neighbours: vec![
            (hop(R1), R1_MAC),
            (hop("10.0.0.21"), [2, 0, 0, 0, 0, 0xa1]),
            (hop("10.0.0.22"), [2, 0, 0, 0, 0, 0xa2]),
        ],
        ..Local::default()
    };
    let mut lab = Lab::of(&cfg, local, Some(0));
    let routed = |src: &str, dst: &str, sport: u16, dport: u16| {
        Packet::tcp(ip(src), ip(dst), sport, dport, SYN)
            .macs(R1_MAC, LB_MAC)
            .frame()
    };
    lab.expect(&[
        (
            "client to server",
            routed("172.16.1.7", "172.16.2.9", 1000, 80),
            "forward",
        ),
        (
            "the server's answer",
            routed("172.16.2.9", "172.16.1.7", 80, 1000),
            "forward",
        ),
        (
            "from loopback",
            routed("127.0.0.1", "172.16.2.9", 1001, 80),
            "drop martian_source",
        ),
        (
            "from multicast",
            routed("224.0.0.5", "172.16.2.9", 1002, 80),
            "drop martian_source",
        ),
        (
            "from our own address",
            routed(OWN4, "172.16.2.9", 1003, 80),
            "drop martian_source",
        ),
        (
            "from ::1",
            routed("::1", "2001:db8:2::9", 1004, 80),
            "drop martian_source",
        ),
        // A flow to a martian address is made from its good end; its other
        // end's packets still find no way back.
        (
            "to multicast",
            routed("172.16.1.8", "224.0.0.6", 1005, 80),
            "forward",
        ),
        (
            "multicast's answer",
            routed("224.0.0.6", "172.16.1.8", 80, 1005),
            "drop martian_source",
        ),
        (
            "bad checksum",
            bad_checksum(routed("172.16.1.9", "172.16.2.9", 1006, 80)),
            "drop ipv4_bad_checksum",
        ),
        (
            "TTL 0",
            Packet::tcp(ip("172.16.1.9"), ip("172.16.2.9"), 1007, 80, SYN)
                .ttl(0)
                .macs(R1_MAC, LB_MAC)
                .frame(),
            "drop ttl_zero",
        ),
        (
            "to another MAC",
            Packet::tcp(ip("172.16.1.9"), ip("172.16.2.9"), 1008, 80, SYN)
                .macs(R1_MAC, OTHER_MAC)
                .frame(),
            "drop l2_foreign_dst",
        ),
    ]);
}

/// M52: the host probes endpoints through a VIP, and the backend answers
/// from the VIP straight to the node's own address. That answer is the one
/// packet from a VIP the edge takes: TCP from the probe's VIP to its
/// source port, to an own address; anything else from a VIP stays martian.
#[test]
fn the_answer_to_a_probe_through_a_vip_is_the_one_packet_from_a_vip_taken() {
    // Endpoint 10.0.1.11 probes 10.0.0.10:80 from port 61000, 10.0.1.12
    // from 61001.
    let cfg = Config::new()
        .port(port("up", "net_ring0", "uplink").strs("addresses", &["10.0.0.2/24"]))
        .port(port("kernel", "net_tap0", "exception"))
        .rule(rule("web", &[VIP4], "TCP", "80", "web"))
        .service(service("web", "gue").str("health_check", "h").child(
            group("a", "r", "z").set("endpoints", endpoint_list(&["10.0.1.11", "10.0.1.12"])),
        ))
        .health_check(
            testkit::config::health_check("h", "TCP")
                .set("port", 80)
                .str("target", "vip"),
        );
    let local = Local {
        mac: LB_MAC,
        next_hop_mac: ROUTER_MAC,
        tunnel_src_v4: Some("10.0.1.2".parse().unwrap()),
        own_addrs: vec![v4(OWN4)],
        ..Local::default()
    };
    let mut lab = Lab::of(&cfg, local, None);
    let answer = |src: &str, sport: u16, dst: &str, dport: u16| {
        Packet::tcp(ip(src), ip(dst), sport, dport, SYN | ACK)
            .macs(ROUTER_MAC, LB_MAC)
            .frame()
    };
    lab.expect(&[
        (
            "the answer to 10.0.1.11's probe",
            answer(VIP4, 80, OWN4, 61000),
            "to_host",
        ),
        (
            "the answer to 10.0.1.12's probe",
            answer(VIP4, 80, OWN4, 61001),
            "to_host",
        ),
        (
            "from the VIP to another port",
            answer(VIP4, 80, OWN4, 40000),
            "drop martian_source",
        ),
        (
            "from the VIP to a port no probe has",
            answer(VIP4, 80, OWN4, 61002),
            "drop martian_source",
        ),
        (
            "from the VIP to the VIP",
            answer(VIP4, 61000, VIP4, 80),
            "drop martian_source",
        ),
        (
            "UDP from the VIP",
            udp(VIP4, OWN4, 61000).frame(),
            "drop martian_source",
        ),
        (
            "from loopback to a probe's port",
            answer("127.0.0.1", 80, OWN4, 61000),
            "drop martian_source",
        ),
    ]);
}
