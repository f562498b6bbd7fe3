//! `spillway replay` in gateway mode (M30-M32): byte-exact Geneve to
//! appliances and the return path, with the answers that must not pass.
//!
//! Every test writes a configuration and a pcap of hand-built packets, runs
//! the `spillway` binary, and checks the transmitted frames byte by byte
//! (outer headers decoded by `common::replay`, not by the `wire` crate under
//! test) and the summary's counters.

#![allow(clippy::cast_possible_truncation)] // test values are small
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::net::{IpAddr, Ipv4Addr};

use common::replay::*;
use common::*;
use testkit::config::{rule, service};

// ---------------------------------------------------------------------------
// Gateway mode (M30-M32): byte-exact Geneve to appliances and the return.

/// The gateway endpoint (a router on the uplink's subnet): `--neighbour`
/// resolves it to [`ROUTER_MAC`], the source MAC of every crafted frame, so
/// every client packet here comes from it.
const GW_ENDPOINT: &str = "10.0.0.1";
const GW_ID: u64 = 0x0123_4567_89ab_cdef;
/// Appliances on the backend port's subnets: next hops themselves.
const NVAS4: [&str; 3] = ["10.1.0.11", "10.1.0.12", "10.1.0.13"];
const NVAS6: [&str; 3] = ["2001:db8:1::11", "2001:db8:1::12", "2001:db8:1::13"];

fn nva_mac(i: usize) -> [u8; 6] {
    [2, 0, 0, 0, 0xa0, i as u8 + 1]
}

/// Option class, endpoint-ID type and cookie type of a Geneve service.
#[derive(Debug, Clone, Copy)]
struct Ids {
    port: u16,
    class: u16,
    id_type: u8,
    cookie_type: u8,
}

const DEFAULT_IDS: Ids = Ids {
    port: 6081,
    class: 0x0139,
    id_type: 1,
    cookie_type: 3,
};

/// A gateway rule for [`GW_ENDPOINT`] to a Geneve service of `nvas` (with
/// `ids`, written out unless the defaults).
fn gateway_config(nvas: &[&str], ids: Ids) -> String {
    let mut svc = service("nva", "geneve").endpoints(nvas);
    if ids.port != DEFAULT_IDS.port
        || ids.class != DEFAULT_IDS.class
        || ids.id_type != DEFAULT_IDS.id_type
        || ids.cookie_type != DEFAULT_IDS.cookie_type
    {
        svc = svc.set(
            "geneve",
            format!(
                "{{ port = {}, option_class = {:#06x}, endpoint_id_type = {}, flow_cookie_type = {} }}",
                ids.port, ids.class, ids.id_type, ids.cookie_type
            ),
        );
    }
    [
        base(),
        rule("gw", &["10.0.0.40"], "L3_DEFAULT", "all", "nva")
            .str("mode", "gateway")
            .set(
                "gateway_endpoints",
                format!("[{{ address = \"{GW_ENDPOINT}\", id = {GW_ID:#x} }}]"),
            )
            .to_string(),
        svc.to_string(),
    ]
    .concat()
}

/// `--neighbour` for the gateway endpoint and every appliance.
fn gateway_neighbours(nvas: &[&str]) -> Vec<String> {
    let mut a = vec![
        "--neighbour".to_string(),
        format!("{GW_ENDPOINT}={}", mac_str(&ROUTER_MAC)),
    ];
    for (i, n) in nvas.iter().enumerate() {
        a.push("--neighbour".into());
        a.push(format!("{n}={}", mac_str(&nva_mac(i))));
    }
    a
}

/// A TCP segment the gateway endpoint routes through the balancer, with a
/// DS byte that the outer header must copy.
fn routed(src: IpAddr, dst: IpAddr, ports: (u16, u16), flags: u8, ds: u8, data: &[u8]) -> Vec<u8> {
    testkit::packet::Packet::tcp(src, dst, ports.0, ports.1, flags)
        .macs(ROUTER_MAC, LB_MAC)
        .ttl(61)
        .ident(0x1234)
        .flow_label(0x12345)
        .tos(ds)
        .payload(data)
        .frame()
}

/// The DS byte of an IP packet (IPv4 TOS, IPv6 traffic class).
fn ds_of(ip: &[u8]) -> u8 {
    match ip[0] >> 4 {
        4 => ip[1],
        _ => (ip[0] << 4) | (ip[1] >> 4),
    }
}

/// What a Geneve frame to an appliance must be, byte for byte, written out
/// field by field here: Ethernet from the backend port to the appliance's
/// MAC; outer IPv4 (DS of the inner, id 0, DF, TTL 64, checksum) or IPv6
/// (DS of the inner, `flow_label`, hop limit 64) from the tunnel source;
/// UDP from `sport` to the Geneve port (no checksum over IPv4, computed
/// over IPv6); Geneve version 0, Opt Len 5, no flags, the inner protocol,
/// VNI 0; the endpoint-ID option (2 words) then the cookie option (1
/// word); the inner IP packet unchanged.
#[allow(clippy::too_many_arguments)]
fn expected_geneve(
    frame: &[u8],
    nva: IpAddr,
    nva_mac: [u8; 6],
    ids: Ids,
    sport: u16,
    flow_label: u32,
    cookie: u32,
) -> Vec<u8> {
    let inner = &frame[14..];
    let inner_et: u16 = if inner[0] >> 4 == 6 { 0x86dd } else { 0x0800 };
    let mut geneve = vec![5, 0];
    geneve.extend(inner_et.to_be_bytes());
    geneve.extend([0, 0, 0, 0]);
    geneve.extend(ids.class.to_be_bytes());
    geneve.extend([ids.id_type, 2]);
    geneve.extend(GW_ID.to_be_bytes());
    geneve.extend(ids.class.to_be_bytes());
    geneve.extend([ids.cookie_type, 1]);
    geneve.extend(cookie.to_be_bytes());
    geneve.extend(inner);
    let udp_len = 8 + geneve.len();
    let mut udp = sport.to_be_bytes().to_vec();
    udp.extend(ids.port.to_be_bytes());
    udp.extend((udp_len as u16).to_be_bytes());
    udp.extend([0, 0]);
    udp.extend(&geneve);
    let ds = ds_of(inner);
    let mut out = nva_mac.to_vec();
    out.extend(OUT_MAC);
    match nva {
        IpAddr::V4(dst) => {
            out.extend(0x0800u16.to_be_bytes());
            let mut h = vec![0x45, ds];
            h.extend(((20 + udp_len) as u16).to_be_bytes());
            h.extend([0, 0, 0x40, 0, 64, UDP, 0, 0]);
            h.extend(TUNNEL_SRC4.octets());
            h.extend(dst.octets());
            let c = csum(0, &h);
            h[10..12].copy_from_slice(&c.to_be_bytes());
            out.extend(h);
        }
        IpAddr::V6(dst) => {
            out.extend(0x86ddu16.to_be_bytes());
            let w = (6u32 << 28) | (u32::from(ds) << 20) | flow_label;
            out.extend(w.to_be_bytes());
            out.extend((udp_len as u16).to_be_bytes());
            out.extend([UDP, 64]);
            out.extend(TUNNEL_SRC6.octets());
            out.extend(dst.octets());
            let c = csum(pseudo(IpAddr::V6(TUNNEL_SRC6), nva, UDP, udp_len), &udp);
            let c = if c == 0 { 0xffff } else { c };
            udp[6..8].copy_from_slice(&c.to_be_bytes());
        }
    }
    out.extend(udp);
    out
}

/// Offsets of an outer frame's fields: (outer IP header length, where the
/// Geneve header starts).
fn geneve_at(out: &[u8]) -> (usize, usize) {
    let l3 = if be16(out, 12) == 0x86dd { 40 } else { 20 };
    (l3, 14 + l3 + 8)
}

/// The appliance's answer per the contract: outer IP addresses swapped,
/// UDP ports and every Geneve byte kept (the checksums stay right: both
/// sums are over the swapped pair); from the appliance's MAC to the
/// backend port's, where replay receives it (a frame arrives on the port
/// its destination MAC names).
fn nva_echo(out: &[u8]) -> Vec<u8> {
    let mut f = out.to_vec();
    f[..6].copy_from_slice(&out[6..12]);
    f[6..12].copy_from_slice(&out[..6]);
    let (src, len) = if be16(out, 12) == 0x86dd {
        (22, 16)
    } else {
        (26, 4)
    };
    f[src..src + len].copy_from_slice(&out[src + len..src + 2 * len]);
    f[src + len..src + 2 * len].copy_from_slice(&out[src..src + len]);
    f
}

/// Rewrites an IPv4-outer frame's source address (header checksum fixed).
fn with_outer_src4(f: &[u8], src: Ipv4Addr) -> Vec<u8> {
    let mut f = f.to_vec();
    f[26..30].copy_from_slice(&src.octets());
    f[24..26].copy_from_slice(&[0, 0]);
    let c = csum(0, &f[14..34]);
    f[24..26].copy_from_slice(&c.to_be_bytes());
    f
}

/// Rewrites an IPv4-outer frame's destination address (header checksum
/// fixed).
fn with_outer_dst4(f: &[u8], dst: Ipv4Addr) -> Vec<u8> {
    let mut f = f.to_vec();
    f[30..34].copy_from_slice(&dst.octets());
    with_outer_src4(&f, Ipv4Addr::new(f[26], f[27], f[28], f[29]))
}

/// An IPv4-outer Geneve frame without its options (lengths and checksum
/// fixed): what an appliance that strips them sends.
fn without_options4(f: &[u8]) -> Vec<u8> {
    let (_, g) = geneve_at(f);
    let opt_len = usize::from(f[g] & 0x3f) * 4;
    let mut o = f[..g + 8].to_vec();
    o.extend(&f[g + 8 + opt_len..]);
    o[g] &= 0xc0;
    let ip_len = (o.len() - 14) as u16;
    o[16..18].copy_from_slice(&ip_len.to_be_bytes());
    o[38..40].copy_from_slice(&(ip_len - 20).to_be_bytes());
    with_outer_src4(&o, Ipv4Addr::new(o[26], o[27], o[28], o[29]))
}

/// The connections of one inner family: per connection, the client's SYN,
/// the server's SYN-ACK and the client's data (DS byte 0x2a), all routed by
/// the gateway endpoint. Returns (connection, frame).
fn gateway_traffic(v6: bool, n: u16) -> Vec<(u16, Vec<u8>)> {
    let ends = |i: u16| -> (IpAddr, IpAddr) {
        if v6 {
            (
                format!("2001:db8:c::{}", i + 1).parse().unwrap(),
                format!("2001:db8:d::{}", i % 3 + 1).parse().unwrap(),
            )
        } else {
            (
                IpAddr::from([198, 51, 100, i as u8 + 1]),
                IpAddr::from([203, 0, 113, i as u8 % 3 + 1]),
            )
        }
    };
    let mut frames = Vec::new();
    for i in 0..n {
        let (c, s) = ends(i);
        let (cp, sp) = (40000 + i, 443);
        frames.push((i, routed(c, s, (cp, sp), SYN, 0, &[])));
        frames.push((i, routed(s, c, (sp, cp), SYN | ACK, 0, &[])));
        frames.push((i, routed(c, s, (cp, sp), ACK | PSH, 0x2a, b"client hello")));
    }
    frames
}

/// The outer destination of a frame to an appliance.
fn outer_dst(out: &[u8]) -> IpAddr {
    if be16(out, 12) == 0x86dd {
        IpAddr::from(<[u8; 16]>::try_from(&out[38..54]).unwrap())
    } else {
        IpAddr::from(<[u8; 4]>::try_from(&out[30..34]).unwrap())
    }
}

/// Both inner families' connections through a gateway rule to `nvas` in
/// one replay: every frame to an appliance compared whole with the one
/// [`expected_geneve`] writes out; both directions of a connection to one
/// appliance with one cookie, source port and flow label. Then a second
/// replay of the same forward traffic (the fixed seed: the same cookies)
/// followed by each appliance's answer, and, over IPv4, the answers that
/// must not pass: each must come back as the very frame the endpoint sent,
/// to its MAC from the uplink's, and the others be counted drops. Returns
/// the cookies by connection.
fn check_gateway(name: &str, nvas: &[&str], ids: Ids, extra: &[&str]) -> BTreeMap<u16, u32> {
    let cfg = gateway_config(nvas, ids);
    let mut args = gateway_neighbours(nvas);
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut traffic = gateway_traffic(false, 6);
    traffic.extend(
        gateway_traffic(true, 6)
            .into_iter()
            .map(|(i, f)| (i + 100, f)),
    );
    // Forwarded in the first replay only: in the second, its answer finds
    // no flow.
    let gone = routed(
        v4("198.51.100.99"),
        v4("203.0.113.9"),
        (40999, 443),
        SYN,
        0,
        &[],
    );
    let mut frames: Vec<Vec<u8>> = traffic.iter().map(|(_, f)| f.clone()).collect();
    frames.push(gone);
    let r = run(name, &cfg, &frames, &args);
    assert_eq!(r.out.len(), frames.len(), "{}", r.text);
    let mut per_conn = BTreeMap::new();
    let mut cookies = BTreeMap::new();
    for ((conn, frame), out) in traffic.iter().zip(&r.out) {
        // What the flow hash and the cookie generator chose is read from
        // the output; everything else is as written out here.
        let nva = outer_dst(out);
        let k = nvas
            .iter()
            .position(|a| v4_or_v6(a) == nva)
            .unwrap_or_else(|| panic!("{nva} is no appliance"));
        let (l3, g) = geneve_at(out);
        let sport = be16(out, 14 + l3);
        assert!(
            sport >= 49152,
            "outer source port {sport} in the default range 49152-65535"
        );
        let label = if l3 == 40 {
            be32(out, 14) & 0xf_ffff
        } else {
            0
        };
        let cookie = be32(out, g + 24);
        let want = expected_geneve(frame, nva, nva_mac(k), ids, sport, label, cookie);
        assert_eq!(
            out, &want,
            "{name}: connection {conn}, the whole frame\n got {out:02x?}\nwant {want:02x?}"
        );
        same_per_key(
            &mut per_conn,
            *conn,
            (nva, sport, label, cookie),
            "appliance, outer source port, flow label and cookie (both directions)",
        );
        cookies.insert(*conn, cookie);
    }
    let used: BTreeSet<IpAddr> = per_conn.values().map(|v| v.0).collect();
    assert!(used.len() > 1, "{name}: appliances used {used:?}");
    assert_eq!(
        distinct(&cookies).len(),
        cookies.len(),
        "{name}: one cookie per connection: {cookies:?}"
    );
    assert_eq!(r.rule("gw-ag0").new_flows, 13, "{}", r.text);

    // The return path: the same forward traffic, then every answer.
    let n = traffic.len();
    let mut frames2: Vec<Vec<u8>> = frames[..n].to_vec();
    frames2.extend(r.out[..n].iter().map(|o| nva_echo(o)));
    let mut refused: Vec<(&str, Vec<u8>)> = Vec::new();
    if nvas[0].contains('.') {
        let echo = nva_echo(&r.out[0]);
        let (_, g) = geneve_at(&echo);
        let mut tampered = echo.clone();
        tampered[g + 27] ^= 1;
        let holder = outer_dst(&r.out[0]);
        let other = nvas
            .iter()
            .map(|a| v4_or_v6(a))
            .find(|a| *a != holder)
            .unwrap();
        let other_mac = nva_mac(nvas.iter().position(|a| v4_or_v6(a) == other).unwrap());
        let IpAddr::V4(other) = other else {
            unreachable!()
        };
        // Another appliance, from its own MAC.
        let mut theirs = with_outer_src4(&echo, other);
        theirs[6..12].copy_from_slice(&other_mac);
        // The holder's frame from a stranger's MAC, over the client-facing
        // uplink (to its MAC), to another own address (M53).
        let mut stranger = echo.clone();
        stranger[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 0x55]);
        let mut uplink = echo.clone();
        uplink[..6].copy_from_slice(&LB_MAC);
        let elsewhere = with_outer_dst4(&echo, Ipv4Addr::new(10, 0, 0, 2));
        refused = vec![
            ("gateway_cookie_mismatch", tampered),
            ("gateway_options_missing", without_options4(&echo)),
            (
                "gateway_unknown_source",
                with_outer_src4(&echo, Ipv4Addr::new(10, 1, 0, 99)),
            ),
            ("gateway_wrong_appliance", theirs),
            ("gateway_no_flow", nva_echo(&r.out[n])),
            ("gateway_return_wrong_mac", stranger),
            ("gateway_return_wrong_port", uplink),
            ("gateway_return_wrong_destination", elsewhere),
        ];
    }
    frames2.extend(refused.iter().map(|(_, f)| f.clone()));
    let r2 = run(&format!("{name}-return"), &cfg, &frames2, &args);
    assert_eq!(r2.out.len(), 2 * n, "{}", r2.text);
    // Each port's frames in processing order (a burst's frames are written
    // port by port): to appliances from the backend port, returns from the
    // uplink.
    let (fwd2, back2): (Vec<&Vec<u8>>, Vec<&Vec<u8>>) =
        r2.out.iter().partition(|f| f[6..12] == OUT_MAC);
    assert_eq!((fwd2.len(), back2.len()), (n, n), "{}", r2.text);
    for (i, (a, b)) in fwd2.iter().zip(&r.out[..n]).enumerate() {
        assert!(
            *a == b,
            "{name}: frame {i}: the same seed, the same frame (cookie)\n{}",
            r2.text
        );
    }
    for ((conn, frame), back) in traffic.iter().zip(back2) {
        // The endpoint's own frame, Ethernet addresses swapped: to its MAC,
        // from the uplink's.
        let mut want = ROUTER_MAC.to_vec();
        want.extend(LB_MAC);
        want.extend(&frame[12..]);
        assert_eq!(back, &want, "{name}: connection {conn} returned");
    }
    assert!(
        r2.text.contains(&format!("gateway returned {n},")),
        "{}",
        r2.text
    );
    for (reason, _) in &refused {
        assert_eq!(r2.drops(reason), 1, "{reason}: {}", r2.text);
    }
    assert_eq!(
        r2.line_value("forwarded ")
            .map(|l| l.split(',').next().unwrap()),
        Some(n.to_string().as_str()),
        "{}",
        r2.text
    );
    cookies
}

fn v4_or_v6(a: &str) -> IpAddr {
    a.parse().unwrap()
}

#[test]
fn gateway_geneve_to_ipv4_appliances_is_byte_exact_and_returns_for_both_inner_families() {
    check_gateway("gw4", &NVAS4, DEFAULT_IDS, &[]);
}

#[test]
fn gateway_geneve_to_ipv6_appliances_is_byte_exact_and_returns_for_both_inner_families() {
    check_gateway("gw6", &NVAS6, DEFAULT_IDS, &[]);
}

#[test]
fn gateway_geneve_uses_the_configured_port_option_class_and_types() {
    let ids = Ids {
        port: 7081,
        class: 0x0105,
        id_type: 9,
        cookie_type: 7,
    };
    check_gateway("gw-ids", &NVAS4, ids, &[]);
}

#[test]
fn gateway_cookies_follow_the_replay_seed() {
    let a = check_gateway("gw-seed-a", &NVAS4, DEFAULT_IDS, &["--seed", "7"]);
    let b = check_gateway("gw-seed-b", &NVAS4, DEFAULT_IDS, &["--seed", "8"]);
    assert_ne!(a, b, "another seed, other cookies");
}
