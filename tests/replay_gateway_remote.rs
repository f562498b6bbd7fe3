//! `spillway replay` with remote gateway endpoints (M31): gateway ingress
//! that arrives in Geneve from an endpoint in another network, its flows
//! under that endpoint's identity, and the appliances' returns sent back to
//! it in the same tunnel.
//!
//! The frames are built and decoded here, byte by byte, not by the `wire`
//! crate under test.

#![allow(clippy::cast_possible_truncation)] // test values are small
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

mod common;

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use common::replay::*;
use common::*;
use testkit::config::{rule, service};
use testkit::packet::{csum, v4};

/// Two remote gateway endpoints (off every subnet: reached by the backend
/// port's gateway) and their IDs.
const REMOTE: [(Ipv4Addr, u64); 2] = [
    (Ipv4Addr::new(192, 0, 2, 77), 0x77),
    (Ipv4Addr::new(192, 0, 2, 88), 0x88),
];
/// A source that is no remote endpoint.
const STRANGER: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 99);
const NVAS: [&str; 3] = ["10.1.0.11", "10.1.0.12", "10.1.0.13"];
const GENEVE: u16 = 6081;
const OPTION_CLASS: u16 = 0x0139;

fn nva_mac(i: usize) -> [u8; 6] {
    [2, 0, 0, 0, 0xa0, i as u8 + 1]
}

fn config() -> String {
    let eps: Vec<String> = REMOTE
        .iter()
        .map(|(a, id)| format!("{{ address = \"{a}\", id = {id:#x}, tunnel = \"geneve\" }}"))
        .collect();
    [
        base(),
        rule("gw", &["10.0.0.40"], "L3_DEFAULT", "all", "nva")
            .str("mode", "gateway")
            .set("gateway_endpoints", format!("[{}]", eps.join(", ")))
            .to_string(),
        service("nva", "geneve").endpoints(&NVAS).to_string(),
    ]
    .concat()
}

fn neighbours() -> Vec<String> {
    NVAS.iter()
        .enumerate()
        .flat_map(|(i, n)| {
            [
                "--neighbour".to_string(),
                format!("{n}={}", mac_str(&nva_mac(i))),
            ]
        })
        .collect()
}

/// An IPv4 header (checksum filled in) and `payload`.
fn ipv4(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, ttl: u8, payload: &[u8]) -> Vec<u8> {
    let mut h = vec![0x45, 0];
    h.extend(((20 + payload.len()) as u16).to_be_bytes());
    h.extend([0, 0, 0x40, 0, ttl, proto, 0, 0]);
    h.extend(src.octets());
    h.extend(dst.octets());
    let c = csum(0, &h);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    h.extend(payload);
    h
}

/// A Geneve frame (no options, VNI 0, UDP without checksum) from `src`
/// to `dst`, from `macs.0` to `macs.1`, carrying the IP packet `inner`.
fn geneve(
    macs: ([u8; 6], [u8; 6]),
    (src, dst): (Ipv4Addr, Ipv4Addr),
    sport: u16,
    inner: &[u8],
) -> Vec<u8> {
    let et: u16 = if inner[0] >> 4 == 6 { 0x86dd } else { 0x0800 };
    let mut udp = sport.to_be_bytes().to_vec();
    udp.extend(GENEVE.to_be_bytes());
    udp.extend(((8 + 8 + inner.len()) as u16).to_be_bytes());
    udp.extend([0, 0]);
    udp.extend([0, 0]);
    udp.extend(et.to_be_bytes());
    udp.extend([0, 0, 0, 0]);
    udp.extend(inner);
    let mut f = macs.1.to_vec();
    f.extend(macs.0);
    f.extend(0x0800u16.to_be_bytes());
    f.extend(ipv4(src, dst, UDP, 64, &udp));
    f
}

/// What a remote endpoint sends: `inner` in Geneve to the node's tunnel
/// address, through the router on the uplink.
fn from_remote(src: Ipv4Addr, inner: &[u8]) -> Vec<u8> {
    geneve((ROUTER_MAC, LB_MAC), (src, TUNNEL_SRC4), 50000, inner)
}

/// The inner IP packet of a client's TCP segment.
fn segment(c: (&str, u16), s: (&str, u16), flags: u8, data: &[u8]) -> Vec<u8> {
    tcp_frame(v4(c.0), v4(s.0), c.1, s.1, flags, data)[14..].to_vec()
}

/// A frame to an appliance: (appliance, endpoint ID, cookie, inner packet).
fn to_appliance(out: &[u8]) -> (Ipv4Addr, u64, u32, Vec<u8>) {
    assert_eq!(be16(out, 12), 0x0800, "IPv4 outer: {out:02x?}");
    assert_eq!(out[6..12], OUT_MAC, "from the backend port");
    let dst = Ipv4Addr::new(out[30], out[31], out[32], out[33]);
    assert_eq!(be16(out, 36), GENEVE, "to the Geneve port");
    let g = 42;
    assert_eq!(out[g] & 0x3f, 5, "endpoint ID and cookie options");
    assert_eq!(be16(out, g + 8), OPTION_CLASS);
    let id = u64::from(be32(out, g + 12)) << 32 | u64::from(be32(out, g + 16));
    let cookie = be32(out, g + 24);
    (dst, id, cookie, out[g + 28..].to_vec())
}

/// The appliance's answer per the contract: outer addresses swapped, every
/// other byte kept, from its MAC to the backend port's.
fn nva_echo(out: &[u8]) -> Vec<u8> {
    let mut f = out.to_vec();
    f[..6].copy_from_slice(&out[6..12]);
    f[6..12].copy_from_slice(&out[..6]);
    f[26..30].copy_from_slice(&out[30..34]);
    f[30..34].copy_from_slice(&out[26..30]);
    f
}

#[test]
fn remote_endpoints_tunnel_in_keep_their_identity_and_get_their_returns_in_the_tunnel() {
    let cfg = config();
    let args = neighbours();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let client = ("198.51.100.1", 40000);
    let server = ("203.0.113.1", 443);
    let syn = segment(client, server, SYN, &[]);
    let data = segment(client, server, ACK | PSH, b"hello");
    // The same 5-tuple behind both endpoints (tenants with overlapping
    // addresses), then what must not pass.
    let mut frames = vec![
        from_remote(REMOTE[0].0, &syn),
        from_remote(REMOTE[1].0, &syn),
        from_remote(REMOTE[0].0, &data),
        from_remote(REMOTE[1].0, &data),
    ];
    let forwarded = frames.len();
    let mut bad_version = from_remote(REMOTE[0].0, &syn);
    bad_version[42] |= 0x40;
    let to_vip = segment(client, ("10.0.0.40", 443), SYN, &[]);
    let refused = [
        ("gateway_unknown_source", from_remote(STRANGER, &syn)),
        ("gateway_tunnel_malformed", bad_version),
        ("gateway_tunnel_to_node", from_remote(REMOTE[0].0, &to_vip)),
        (
            "ttl_zero",
            from_remote(REMOTE[0].0, &{
                let mut p = syn.clone();
                p[8] = 0;
                p[10..12].copy_from_slice(&[0, 0]);
                let c = csum(0, &p[..20]);
                p[10..12].copy_from_slice(&c.to_be_bytes());
                p
            }),
        ),
    ];
    frames.extend(refused.iter().map(|(_, f)| f.clone()));
    let r = run("gw-remote", &cfg, &frames, &args);
    assert_eq!(r.out.len(), forwarded, "{}", r.text);
    // Per endpoint: one appliance and one cookie for its flow; the two
    // endpoints' flows are two (their own IDs, their own cookies).
    let mut per_endpoint: BTreeMap<u64, (Ipv4Addr, u32)> = BTreeMap::new();
    for (i, out) in r.out.iter().enumerate() {
        let (nva, id, cookie, inner) = to_appliance(out);
        assert!(NVAS.contains(&nva.to_string().as_str()), "{nva}");
        assert_eq!(id, REMOTE[i % 2].1, "frame {i}: the endpoint it came from");
        let sent = if i < 2 { &syn } else { &data };
        assert_eq!(&inner, sent, "frame {i}: the inner packet unchanged");
        same_per_key(&mut per_endpoint, id, (nva, cookie), "appliance and cookie");
    }
    let cookies: Vec<u32> = per_endpoint.values().map(|v| v.1).collect();
    assert_ne!(cookies[0], cookies[1], "two flows: {per_endpoint:?}");
    assert_eq!(r.rule("gw-ag0").new_flows, 2, "{}", r.text);
    for (reason, _) in &refused {
        assert_eq!(r.drops(reason), 1, "{reason}: {}", r.text);
    }

    // The returns: the same forward traffic again (the same seed: the same
    // cookies), then each appliance's answer, which must go back to the
    // endpoint whose ID it carries, in Geneve from the tunnel source by the
    // backend port's gateway.
    let mut frames2 = frames[..forwarded].to_vec();
    frames2.extend(r.out.iter().map(|o| nva_echo(o)));
    let r2 = run("gw-remote-return", &cfg, &frames2, &args);
    assert_eq!(r2.out.len(), 2 * forwarded, "{}", r2.text);
    let back: Vec<&Vec<u8>> = r2.out.iter().filter(|f| f[..6] == NEXT_HOP_MAC).collect();
    assert_eq!(back.len(), forwarded, "{}", r2.text);
    let mut seen: BTreeMap<Ipv4Addr, usize> = BTreeMap::new();
    for (i, f) in back.iter().enumerate() {
        assert_eq!(f[6..12], OUT_MAC, "return {i}: from the backend port");
        assert_eq!(be16(f, 12), 0x0800);
        let ip = &f[14..34];
        assert_eq!(csum(0, ip), 0, "return {i}: outer IPv4 checksum");
        assert_eq!(ip[9], UDP);
        assert_eq!(ip[12..16], TUNNEL_SRC4.octets(), "return {i}: outer source");
        let to = Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]);
        assert!(REMOTE.iter().any(|(a, _)| *a == to), "return {i} to {to}");
        *seen.entry(to).or_default() += 1;
        assert!(be16(f, 34) >= 49152, "return {i}: outer source port");
        assert_eq!(be16(f, 36), GENEVE, "return {i}: to the Geneve port");
        assert_eq!(be16(f, 38) as usize, f.len() - 34, "return {i}: UDP length");
        assert_eq!(
            f[42..50],
            [0, 0, 0x08, 0, 0, 0, 0, 0],
            "return {i}: no options, VNI 0"
        );
        let inner = &f[50..];
        assert!(
            inner == syn || inner == data,
            "return {i}: the inner packet unchanged"
        );
    }
    // Each endpoint got back what it sent, and only that: the appliances
    // answered in order, so return k is frame k's, of endpoint k % 2.
    let order: Vec<Ipv4Addr> = back
        .iter()
        .map(|f| Ipv4Addr::new(f[30], f[31], f[32], f[33]))
        .collect();
    let want: Vec<Ipv4Addr> = (0..forwarded).map(|i| REMOTE[i % 2].0).collect();
    assert_eq!(order, want, "{}", r2.text);
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert!(
        r2.text.contains(&format!("gateway returned {forwarded},")),
        "{}",
        r2.text
    );
}

#[test]
fn a_tunnel_from_a_remote_endpoint_to_another_port_or_fragmented_is_not_its_traffic() {
    let cfg = config();
    let args = neighbours();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let syn = segment(("198.51.100.1", 40000), ("203.0.113.1", 443), SYN, &[]);
    // To another UDP port: the host's, not a tunnel the node takes.
    let mut other_port = from_remote(REMOTE[0].0, &syn);
    other_port[36..38].copy_from_slice(&6082u16.to_be_bytes());
    // The first fragment of a tunnel packet (more fragments): tunnels are
    // not reassembled.
    let mut fragment = from_remote(REMOTE[0].0, &syn);
    fragment[20] = 0x20;
    fragment[24..26].copy_from_slice(&[0, 0]);
    let c = csum(0, &fragment[14..34]);
    fragment[24..26].copy_from_slice(&c.to_be_bytes());
    let r = run("gw-remote-odd", &cfg, &[other_port, fragment], &args);
    assert!(r.out.is_empty(), "{}", r.text);
    assert_eq!(r.drops("gateway_tunnel_malformed"), 1, "{}", r.text);
    assert_eq!(r.rule("gw-ag0").new_flows, 0, "{}", r.text);
}
