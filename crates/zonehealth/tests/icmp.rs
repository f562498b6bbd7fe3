//! Issue 38 item 11: the ICMP probe of a VIP cannot be answered by a
//! forger. Before, a probe's echo request had an identifier a forger could
//! guess (a counter and the process id) and sequence number 1, and any
//! reply with those was taken: someone who could send packets from a dead
//! VIP's address kept its zone published by spraying replies. Now the
//! identifier, the sequence number and a 128-bit token in the data are the
//! OS's random numbers, drawn for each probe, and the reply must echo all
//! three.
//!
//! In a network namespace of the test's own, a "VIP" on loopback that
//! answers pings is found alive; one that does not (the kernel told to
//! ignore echo requests there) is found dead, while a forger sprays echo
//! replies from its address for every identifier, with sequence number 1
//! (and now and then another), the whole probe long.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

/// The test thread (and the processes and threads it starts) in a network
/// namespace of its own, its loopback up.
fn isolate() {
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET)
        .expect("a network namespace of the test's own (needs root)");
    let st = std::process::Command::new("ip")
        .args(["link", "set", "lo", "up"])
        .status()
        .expect("ip");
    assert!(st.success(), "ip link set lo up");
}

/// Whether this namespace's kernel answers echo requests.
fn answer_pings(on: bool) {
    std::fs::write(
        "/proc/sys/net/ipv4/icmp_echo_ignore_all",
        if on { "0" } else { "1" },
    )
    .expect("icmp_echo_ignore_all");
}

/// An echo reply (type 0) with `ident`, `seq` and `data`, checksummed.
fn reply(ident: u16, seq: u16, data: &[u8]) -> Vec<u8> {
    let mut m = vec![0u8, 0, 0, 0];
    m.extend(ident.to_be_bytes());
    m.extend(seq.to_be_bytes());
    m.extend(data);
    let mut sum: u32 = m
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c.get(1).copied().unwrap_or(0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    let sum = !u16::try_from(sum).unwrap();
    m[2..4].copy_from_slice(&sum.to_be_bytes());
    m
}

#[test]
fn forged_echo_replies_do_not_make_a_dead_vip_alive() {
    isolate();
    let vip = Ipv4Addr::new(127, 0, 0, 9);
    let timeout = Duration::from_secs(8);

    // A VIP that answers is alive.
    answer_pings(true);
    let rtt = zonehealth::probe::ping(IpAddr::V4(vip), timeout);
    assert!(rtt.is_ok(), "a live VIP: {rtt:?}");

    // One that does not, while replies are forged from its address.
    answer_pings(false);
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let forger = {
        let (stop, sent) = (stop.clone(), sent.clone());
        std::thread::spawn(move || {
            let s = Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::ICMPV4)).unwrap();
            // From the VIP's address to the prober's (the address it
            // sends from to the VIP: 127.0.0.1 on loopback).
            s.bind(&SockAddr::from(SocketAddr::from((vip, 0)))).unwrap();
            let to = SockAddr::from(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)));
            let data = b"spillway zone-health";
            let mut round: u16 = 0;
            while !stop.load(Ordering::Relaxed) {
                round = round.wrapping_add(1);
                for ident in 0..=u16::MAX {
                    // The old probe's data and sequence number 1 (and
                    // another sequence number every 16th, each round).
                    let seq = if ident % 16 == 15 { round } else { 1 };
                    if s.send_to(&reply(ident, seq, data), &to).is_ok() {
                        sent.fetch_add(1, Ordering::Relaxed);
                    }
                    // At most about 40,000 a second: what the probe's
                    // socket buffer takes while it reads, so that none is
                    // dropped before the probe sees it.
                    if ident % 400 == 399 {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                }
            }
        })
    };
    // The forger is spraying before the probe starts.
    while sent.load(Ordering::Relaxed) < 1000 {
        std::thread::sleep(Duration::from_millis(5));
    }
    let before = sent.load(Ordering::Relaxed);
    let verdict = zonehealth::probe::ping(IpAddr::V4(vip), timeout);
    let during = sent.load(Ordering::Relaxed) - before;
    stop.store(true, Ordering::Relaxed);
    forger.join().unwrap();
    println!("{during} forged replies during the probe: {verdict:?}");
    assert!(verdict.is_err(), "a dead VIP taken for alive: {verdict:?}");
    assert!(
        during >= 65_536,
        "the forger covered every identifier during the probe ({during} replies)"
    );
}
