#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly
//! Tunnelled ingress (M49) end to end on in-memory buffers: IP-in-IP, GRE,
//! GUE and GENEVE packets to the node's own address, from an allowed
//! source, to a VIP, are forwarded exactly like their inner packet would
//! be; every other tunnel packet to an own address is dropped by reason.

use std::net::IpAddr;
use std::sync::Arc;

use dataplane::{DropReason, EndpointHealth, Local, Pipeline, Snapshot, SnapshotBuilder, Verdict};
use flowtable::FlowTable;
use testkit::config::{Config, endpoint_list, group, port, rule, service};
use testkit::packet::{Packet, SYN, encap, outer, v4, v6};
use wire::buf::{MemBuf, PacketBuf};
use wire::encap::{DecapConfig, Tunnel, TunnelKind, parse_tunnel};
use wire::geneve::{GatewayOptions, OptionIds};
use wire::gre::GreRepr;
use wire::ip::proto;

const LB_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
const ROUTER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0xfe];
const PEER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x99];

/// The node's own addresses, the VIPs, the allowed peer, a client.
const OWN4: &str = "10.0.0.2";
const OWN6: &str = "fd00::2";
const VIP4: &str = "10.0.0.10";
const VIP6: &str = "fd00::10";
const PEER4: &str = "192.0.2.200";
const PEER6: &str = "2001:db8:99::1";
const CLIENT4: &str = "198.51.100.7";
const CLIENT6: &str = "2001:db8:c::7";

/// The uplink with both own addresses; TCP 80 and UDP 53 rules on both
/// VIPs to a GUE service of three IPv4 endpoints; `ingress` as the
/// `[tunnel_ingress]` table.
fn config(ingress: &str) -> Config {
    Config::new()
        .port(port("up", "net_ring0", "uplink").strs("addresses", &["10.0.0.2/24", "fd00::2/64"]))
        .rule(rule("web", &[VIP4], "TCP", "80", "web"))
        .rule(rule("web6", &[VIP6], "TCP", "80", "web"))
        .rule(rule("dns", &[VIP4], "UDP", "53", "web"))
        .service(service("web", "gue").child(group("a", "r", "z").set(
            "endpoints",
            endpoint_list(&["10.0.1.11", "10.0.1.12", "10.0.1.13"]),
        )))
        .raw(ingress)
}

const ALLOW: &str = "[tunnel_ingress]\nallow = [\"192.0.2.200/32\", \"2001:db8:99::/64\"]\n";

struct Lab {
    snap: Snapshot,
    flows: FlowTable,
    worker: Pipeline,
}

impl Lab {
    fn new(ingress: &str) -> Lab {
        Lab::of(&config(ingress))
    }

    fn of(cfg: &Config) -> Lab {
        let compiled = match config::load_str("test.toml", &cfg.build(), &config::Env::default()) {
            Ok(l) => Arc::new(l.compiled),
            Err(e) => panic!("test config rejected:\n{e}"),
        };
        let local = Local {
            mac: LB_MAC,
            next_hop_mac: ROUTER_MAC,
            tunnel_src_v4: Some("10.0.1.2".parse().unwrap()),
            own_addrs: vec![v4(OWN4), v6(OWN6)],
            ..Local::default()
        };
        let snap = SnapshotBuilder::new()
            .build(compiled, local, |_| EndpointHealth::HEALTHY, 0, 1)
            .expect("snapshot");
        let flows = FlowTable::new(flowtable::Config::with_capacity(4096)).expect("flow table");
        let worker = Pipeline::new(7, snap.compiled.children.len());
        Lab {
            snap,
            flows,
            worker,
        }
    }

    fn run(&mut self, frame: &[u8]) -> (Verdict, Vec<u8>) {
        let mut buf = MemBuf::new([0u8; 2048], 128, frame).expect("fits");
        let v = self.worker.process(&self.snap, &self.flows, 1, &mut buf);
        (v, buf.data().to_vec())
    }
}

/// A client's TCP SYN to `vip`:80 from `sport`, as an Ethernet frame.
fn syn(client: &str, vip: &str, sport: u16) -> Packet {
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    Packet::tcp(ip(client), ip(vip), sport, 80, SYN).macs(PEER_MAC, LB_MAC)
}

/// `inner` (an Ethernet frame) in `tunnel` from `src` to `dst`, sent to
/// our MAC.
fn tunnelled(inner: &[u8], src: &str, dst: &str, tunnel: &Tunnel) -> Vec<u8> {
    let mut o = outer(src.parse().unwrap(), dst.parse().unwrap());
    o.src_mac = PEER_MAC;
    o.dst_mac = LB_MAC;
    encap(inner, &o, tunnel)
}

/// The GUE/GENEVE/IPIP/GRE frame the balancer forwarded: its inner packet
/// must be `inner`'s IP packet, byte for byte; returns the backend.
fn backend_of(out: &[u8], inner: &[u8]) -> IpAddr {
    let t = parse_tunnel(out, &DecapConfig::default()).expect("a tunnel to a backend");
    assert_eq!(t.kind, TunnelKind::Gue, "the service delivers with GUE");
    assert_eq!(
        &out[t.inner_offset..t.inner_offset + t.inner_len],
        &inner[14..],
        "inner packet unchanged"
    );
    assert_eq!(&out[..6], &ROUTER_MAC);
    t.dst_ip
}

fn geneve() -> Tunnel {
    Tunnel::Geneve {
        port: 6081,
        vni: 0,
        ids: OptionIds::DEFAULT,
        options: GatewayOptions {
            endpoint_id: None,
            cookie: Some(0x1234),
        },
    }
}

fn tunnels() -> Vec<(Tunnel, TunnelKind)> {
    vec![
        (Tunnel::IpIp, TunnelKind::IpIp),
        (Tunnel::Gre { key: None }, TunnelKind::Gre),
        (Tunnel::Gre { key: Some(77) }, TunnelKind::Gre),
        (Tunnel::Gue { port: 6080 }, TunnelKind::Gue),
        (geneve(), TunnelKind::Geneve),
    ]
}

fn decapsulated(w: &Pipeline, kind: TunnelKind) -> u64 {
    let c = &w.counters;
    match kind {
        TunnelKind::IpIp => c.decap_ipip,
        TunnelKind::Gre => c.decap_gre,
        TunnelKind::Gue => c.decap_gue,
        TunnelKind::Geneve => c.decap_geneve,
    }
}

#[test]
fn every_tunnel_type_reaches_the_backend_its_inner_packet_would() {
    let mut sport = 30000;
    for (tunnel, kind) in tunnels() {
        for (peer, own) in [(PEER4, OWN4), (PEER6, OWN6)] {
            for (client, vip) in [(CLIENT4, VIP4), (CLIENT6, VIP6)] {
                sport += 1;
                let what = format!("{kind:?} {tunnel:?} from {peer}, inner to {vip}");
                let inner = syn(client, vip, sport).frame();
                // Where the packet goes when it comes directly (a lab of its own).
                let mut direct = Lab::new(ALLOW);
                let (v, out) = direct.run(&inner);
                assert_eq!(v, Verdict::Forward, "{what}: direct");
                let want = backend_of(&out, &inner);

                let mut lab = Lab::new(ALLOW);
                let (v, out) = lab.run(&tunnelled(&inner, peer, own, &tunnel));
                assert_eq!(v, Verdict::Forward, "{what}");
                assert_eq!(backend_of(&out, &inner), want, "{what}");
                assert_eq!(decapsulated(&lab.worker, kind), 1, "{what}");
                let c = &lab.worker.counters;
                assert_eq!(
                    (c.rx_packets, c.forwarded, c.new_flows),
                    (1, 1, 1),
                    "{what}"
                );
                // The same connection, now direct, follows the entry the
                // tunnelled packet made.
                let (v, out) = lab.run(&inner);
                assert_eq!(v, Verdict::Forward);
                assert_eq!(backend_of(&out, &inner), want);
                assert_eq!(lab.worker.counters.flow_hits, 1, "{what}");
            }
        }
    }
}

/// A GRE frame (IPv4 outer, from the peer to us) with checksum, key and
/// sequence number (RFC 2784, 2890) around `inner`; `bad` spoils the
/// checksum.
fn gre_full(inner: &[u8], bad: bool) -> Vec<u8> {
    let ip = &inner[14..];
    let g = GreRepr {
        protocol: 0x0800,
        checksum: true,
        key: Some(9),
        seq: Some(12345),
    };
    let mut gre = vec![0u8; g.header_len() + ip.len()];
    gre[g.header_len()..].copy_from_slice(ip);
    g.emit(&mut gre).unwrap();
    if bad {
        gre[4] ^= 0x55;
    }
    Packet::raw(v4(PEER4), v4(OWN4), proto::GRE)
        .payload(&gre)
        .macs(PEER_MAC, LB_MAC)
        .frame()
}

#[test]
fn gre_checksum_key_and_sequence_are_accepted_and_a_bad_checksum_is_not() {
    let inner = syn(CLIENT4, VIP4, 4242).frame();
    let mut lab = Lab::new(ALLOW);
    let (v, out) = lab.run(&gre_full(&inner, false));
    assert_eq!(v, Verdict::Forward);
    backend_of(&out, &inner);
    assert_eq!(lab.worker.counters.decap_gre, 1);
    let (v, _) = lab.run(&gre_full(&inner, true));
    assert_eq!(v, Verdict::Drop(DropReason::TunnelMalformed));
}

/// GENEVE (IPv4 outer, IPv4 inner) with `edit` applied to the GENEVE
/// header (which starts at byte 42; the outer UDP checksum is zero over
/// IPv4, so it needs no update).
fn geneve_edited(tunnel: &Tunnel, edit: impl Fn(&mut [u8])) -> Vec<u8> {
    let inner = syn(CLIENT4, VIP4, 5555).frame();
    let mut f = tunnelled(&inner, PEER4, OWN4, tunnel);
    assert_eq!(&f[40..42], &[0, 0], "outer UDP checksum is zero");
    edit(&mut f[42..]);
    f
}

#[test]
fn bad_tunnel_packets_to_an_own_address_are_dropped_by_reason() {
    let inner = syn(CLIENT4, VIP4, 6000).frame();
    let critical = Tunnel::Geneve {
        port: 6081,
        vni: 0,
        // Type 0x81 in Spillway's class: critical, and not one this node
        // knows (it knows types 1 and 3).
        ids: OptionIds {
            class: 0x0139,
            endpoint_type: 0x81,
            cookie_type: 3,
        },
        options: GatewayOptions {
            endpoint_id: Some(1),
            cookie: None,
        },
    };
    let frag = {
        // IPIP whose outer packet is fragmented.
        let p = Packet::raw(v4(PEER4), v4(OWN4), proto::IPIP)
            .payload(&inner[14..])
            .macs(PEER_MAC, LB_MAC);
        p.fragments(24)
    };
    let cases: Vec<(&str, Vec<u8>, DropReason)> = vec![
        (
            "source not allowed",
            tunnelled(&inner, "192.0.2.201", OWN4, &Tunnel::IpIp),
            DropReason::TunnelSourceDenied,
        ),
        (
            "source not allowed (IPv6)",
            tunnelled(&inner, "2001:db8:98::1", OWN6, &Tunnel::Gue { port: 6080 }),
            DropReason::TunnelSourceDenied,
        ),
        (
            "inner destination not a VIP",
            tunnelled(
                &syn(CLIENT4, "10.0.0.99", 1).frame(),
                PEER4,
                OWN4,
                &Tunnel::Gre { key: None },
            ),
            DropReason::TunnelNotVip,
        ),
        (
            "inner destination is the node itself",
            tunnelled(&syn(CLIENT4, OWN4, 1).frame(), PEER4, OWN4, &Tunnel::IpIp),
            DropReason::TunnelNotVip,
        ),
        (
            "IPIP inside IPIP",
            tunnelled(
                &Packet::raw(v4(CLIENT4), v4(VIP4), proto::IPIP)
                    .payload(&inner[14..])
                    .frame(),
                PEER4,
                OWN4,
                &Tunnel::IpIp,
            ),
            DropReason::TunnelNested,
        ),
        (
            "GENEVE inside GUE",
            tunnelled(
                &Packet::udp(v4(CLIENT4), v4(VIP4), 1000, 6081)
                    .payload(&[0u8; 16])
                    .frame(),
                PEER4,
                OWN4,
                &Tunnel::Gue { port: 6080 },
            ),
            DropReason::TunnelNested,
        ),
        (
            "GRE with a bad checksum",
            gre_full(&inner, true),
            DropReason::TunnelMalformed,
        ),
        (
            "GRE version 1",
            {
                let mut f = tunnelled(&inner, PEER4, OWN4, &Tunnel::Gre { key: None });
                f[35] |= 1;
                f
            },
            DropReason::TunnelMalformed,
        ),
        (
            "inner packet cut short",
            {
                let mut f = tunnelled(&inner, PEER4, OWN4, &Tunnel::IpIp);
                // Inner total length one more than there is.
                f[34 + 3] += 1;
                f
            },
            DropReason::TunnelMalformed,
        ),
        (
            "GENEVE OAM",
            geneve_edited(&geneve(), |g| g[1] |= 0x80),
            DropReason::TunnelUnsupported,
        ),
        (
            "GENEVE unknown critical option",
            geneve_edited(&critical, |_| {}),
            DropReason::TunnelUnsupported,
        ),
        (
            "GENEVE carrying Ethernet",
            geneve_edited(&geneve(), |g| g[2..4].copy_from_slice(&[0x65, 0x58])),
            DropReason::TunnelUnsupported,
        ),
        (
            "first fragment of a tunnel packet",
            frag[0].clone(),
            DropReason::TunnelFragment,
        ),
        (
            "later fragment of a tunnel packet",
            frag[1].clone(),
            DropReason::TunnelFragment,
        ),
    ];
    for (what, frame, reason) in cases {
        let mut lab = Lab::new(ALLOW);
        let (v, _) = lab.run(&frame);
        assert_eq!(v, Verdict::Drop(reason), "{what}");
        let c = &lab.worker.counters;
        assert_eq!(c.dropped(reason), 1, "{what}");
        assert_eq!(
            c.decap_ipip + c.decap_gre + c.decap_gue + c.decap_geneve,
            0,
            "{what}"
        );
    }
}

#[test]
fn other_packets_to_own_addresses_still_go_to_the_host() {
    let mut lab = Lab::new(ALLOW);
    let cases = [
        Packet::tcp(v4(PEER4), v4(OWN4), 40000, 22, SYN)
            .macs(PEER_MAC, LB_MAC)
            .frame(),
        Packet::udp(v4(PEER4), v4(OWN4), 40000, 5000)
            .payload(b"x")
            .macs(PEER_MAC, LB_MAC)
            .frame(),
        Packet::udp(v6(PEER6), v6(OWN6), 40000, 179)
            .payload(b"x")
            .macs(PEER_MAC, LB_MAC)
            .frame(),
        Packet::raw(v4(PEER4), v4(OWN4), proto::ESP)
            .payload(&[0u8; 16])
            .macs(PEER_MAC, LB_MAC)
            .frame(),
    ];
    for f in &cases {
        assert_eq!(lab.run(f).0, Verdict::ToHost);
    }
    // With tunnelled ingress off, or without the protocol, tunnels go to
    // the host too, as before.
    let inner = syn(CLIENT4, VIP4, 7000).frame();
    for ingress in [
        "[tunnel_ingress]\nenabled = false\n",
        "[tunnel_ingress]\nallow = [\"192.0.2.200/32\"]\nprotocols = [\"gre\"]\n",
    ] {
        let mut lab = Lab::new(ingress);
        for t in [Tunnel::IpIp, Tunnel::Gue { port: 6080 }, geneve()] {
            let f = tunnelled(&inner, PEER4, OWN4, &t);
            assert_eq!(lab.run(&f).0, Verdict::ToHost, "{ingress} {t:?}");
        }
    }
}

#[test]
fn without_an_allow_list_no_peer_means_no_tunnel_source() {
    // No remote_rule group: the default allow-list is empty, so tunnels
    // are dropped, never handed to the host.
    let inner = syn(CLIENT4, VIP4, 7001).frame();
    let mut lab = Lab::new("");
    let (v, _) = lab.run(&tunnelled(&inner, PEER4, OWN4, &Tunnel::IpIp));
    assert_eq!(v, Verdict::Drop(DropReason::TunnelSourceDenied));
}

#[test]
fn a_tunnel_to_a_vip_is_not_decapsulated() {
    // Addressed to a VIP, not to the node: an ordinary packet of protocol
    // 4 or UDP 6080, for the VIP's rules (none here).
    let inner = syn(CLIENT4, VIP4, 7002).frame();
    let mut lab = Lab::new(ALLOW);
    for t in [Tunnel::IpIp, Tunnel::Gue { port: 6080 }] {
        let (v, _) = lab.run(&tunnelled(&inner, PEER4, VIP4, &t));
        assert_eq!(v, Verdict::Drop(DropReason::NoRule), "{t:?}");
    }
    let c = &lab.worker.counters;
    assert_eq!(c.decap_ipip + c.decap_gue, 0);
}

#[test]
fn a_burst_decides_tunnels_as_one_packet_at_a_time() {
    let mut frames = Vec::new();
    for i in 0..40u16 {
        let inner = syn(CLIENT4, VIP4, 8000 + i % 7).frame();
        frames.push(match i % 4 {
            0 => inner,
            1 => tunnelled(&inner, PEER4, OWN4, &Tunnel::Gue { port: 6080 }),
            2 => tunnelled(&inner, "192.0.2.9", OWN4, &Tunnel::IpIp),
            _ => tunnelled(&inner, PEER6, OWN6, &geneve()),
        });
    }
    let mut one = Lab::new(ALLOW);
    let singles: Vec<(Verdict, Vec<u8>)> = frames.iter().map(|f| one.run(f)).collect();
    let mut lab = Lab::new(ALLOW);
    let mut bufs: Vec<MemBuf<[u8; 2048]>> = frames
        .iter()
        .map(|f| MemBuf::new([0u8; 2048], 128, f).unwrap())
        .collect();
    let mut verdicts = vec![Verdict::ToHost; bufs.len()];
    lab.worker
        .process_burst(&lab.snap, &lab.flows, 1, &mut bufs, &mut verdicts);
    for (i, ((v, out), (b, bv))) in singles.iter().zip(bufs.iter().zip(&verdicts)).enumerate() {
        assert_eq!(v, bv, "packet {i}");
        if *v == Verdict::Forward {
            assert_eq!(out.as_slice(), b.data(), "packet {i}");
        }
    }
    assert_eq!(one.worker.counters, lab.worker.counters);
}

/// Ports are untagged (M55): a VLAN-tagged tunnel is dropped before it is
/// looked at, the same tunnel untagged is taken.
#[test]
fn a_vlan_tagged_tunnel_is_dropped_at_the_edge() {
    let inner = syn(CLIENT4, VIP4, 9000).frame();
    let plain = tunnelled(&inner, PEER4, OWN4, &Tunnel::Gre { key: None });
    let mut tagged = plain[..12].to_vec();
    tagged.extend_from_slice(&[0x81, 0x00, 0x00, 0x05]);
    tagged.extend_from_slice(&plain[12..]);
    let mut direct = Lab::new(ALLOW);
    let want = backend_of(&direct.run(&inner).1, &inner);
    let mut lab = Lab::new(ALLOW);
    let (v, _) = lab.run(&tagged);
    assert_eq!(v, Verdict::Drop(DropReason::VlanUntaggedPort));
    assert_eq!(lab.worker.counters.decap_gre, 0);
    let (v, out) = lab.run(&plain);
    assert_eq!(v, Verdict::Forward);
    assert_eq!(backend_of(&out, &inner), want);
    assert_eq!(lab.worker.counters.decap_gre, 1);
}

/// Two nodes spilling over to each other (M21) would bounce a packet
/// between them for ever (the inner packet's TTL is not touched): a packet
/// that arrived tunnelled is never sent on to a remote rule, whatever the
/// tunnel; a direct one is, and the peer's tunnels are still taken.
#[test]
fn a_tunnelled_packet_is_never_sent_on_to_a_remote_rule() {
    const PEER: &str = "192.0.2.60";
    let cfg = Config::new()
        .port(port("up", "net_ring0", "uplink").strs("addresses", &["10.0.0.2/24", "fd00::2/64"]))
        .rule(rule("web", &[VIP4], "TCP", "80", "web"))
        .service(
            service("web", "gue").child(
                group("peer", "r", "z").str("kind", "remote_rule").set(
                    "remote",
                    format!(
                        "{{ status_url = \"http://{PEER}:9469/status\", rule = \"web\", vip = \"{PEER}\" }}"
                    ),
                ),
            ),
        );
    let mut lab = Lab::of(&cfg);
    let direct = syn(CLIENT4, VIP4, 40001).frame();
    let (v, out) = lab.run(&direct);
    assert_eq!(
        v,
        Verdict::Forward,
        "a direct packet spills over to the peer"
    );
    assert_eq!(backend_of(&out, &direct), v4(PEER));
    let mut sport = 41000;
    for (tunnel, kind) in tunnels() {
        sport += 1;
        let inner = syn(CLIENT4, VIP4, sport).frame();
        // Twice: once creating the flow, once following its entry.
        for _ in 0..2 {
            let (v, _) = lab.run(&tunnelled(&inner, PEER, OWN4, &tunnel));
            assert_eq!(v, Verdict::Drop(DropReason::TunnelLoop), "{kind:?}");
        }
    }
    let c = &lab.worker.counters;
    assert_eq!(c.dropped(DropReason::TunnelLoop), 10);
    assert_eq!(
        c.dropped(DropReason::TunnelSourceDenied),
        0,
        "the peer is allowed"
    );
    // The direct connection still follows its entry to the peer.
    let (v, out) = lab.run(&direct);
    assert_eq!(v, Verdict::Forward);
    assert_eq!(backend_of(&out, &direct), v4(PEER));
}
