//! A junk flood cannot starve flow sync (M36, M54): two real managers sync
//! over loopback UDP while a third socket floods one of them with junk from
//! an address that is no peer. Every entry the peer sends is applied; the
//! junk is counted. Counts only: nothing here depends on how fast anything
//! runs (the flood outpaces the reader, which is the point, but the
//! assertion holds whatever the speeds).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

use std::net::{SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use control::Manager;
use control::sync::SyncCounters;
use dataplane::Local;
use dataplane::sync::NewFlow;
use flowtable::FlowKey;
use testkit::config::{Config, addrs, node, rule, service};

const KEY: &str = "hex:000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
/// Entries the peer sends.
const ENTRIES: u32 = 3000;

struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A loopback UDP port free now.
fn free_port() -> SocketAddr {
    UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .expect("a free port")
}

/// Node `name` syncing from `listen` with `peer`.
fn config(name: &str, listen: SocketAddr, peer: SocketAddr) -> String {
    let c = Config::new()
        .node(node(name, "r", "z"))
        .dataplane("flow_table_capacity", 65536)
        .rule(rule("web", &["10.0.0.10"], "UDP", "53", "web").set("ports", 53))
        .service(service("web", "ipip").endpoints(&addrs("10.1.0.", 2)))
        .raw("[control]\nsocket = \"/nonexistent/not-used.sock\"\nwatch_config = false\n")
        .build();
    format!("{c}\n[flow_sync]\nlisten = \"{listen}\"\npeers = [\"{peer}\"]\nkey = \"{KEY}\"\n")
}

fn manager(
    dir: &Dir,
    name: &str,
    listen: SocketAddr,
    peer: SocketAddr,
) -> (Manager, Arc<control::Shared>) {
    let path = dir.0.join(format!("{name}.toml"));
    std::fs::write(&path, config(name, listen, peer)).expect("config");
    let loaded = config::load(&path).unwrap_or_else(|e| panic!("{e}"));
    let local = Local {
        next_hop_mac: [2, 0, 0, 0, 0, 0xfe],
        ..Local::default()
    };
    Manager::start(&path, loaded.compiled, local, 1, None).unwrap_or_else(|e| panic!("{e}"))
}

fn counters(m: &mut Manager) -> SyncCounters {
    m.status().flow_sync.expect("flow sync on").counters
}

/// New flow `i` of service `web` to backend slot `slot` at tick `now`, as a
/// worker would queue it.
fn new_flow(i: u32, tag: u16, slot: u32, now: u32) -> NewFlow {
    let mut src = [0u8; 16];
    src[10] = 0xff;
    src[11] = 0xff;
    src[12..].copy_from_slice(&(0x6440_0000 + i).to_be_bytes());
    let mut dst = [0u8; 16];
    dst[10] = 0xff;
    dst[11] = 0xff;
    dst[12..].copy_from_slice(&[10, 0, 0, 10]);
    let packed = wire::flow::FlowKey::five(
        src,
        dst,
        17,
        1024 + u16::try_from(i % 60000).expect("a port"),
        53,
    )
    .pack();
    let key = wire::flow::with_service_tag(packed, tag);
    NewFlow {
        key: FlowKey(key),
        hash: wire::flow::hash_words(&wire::flow::without_service_tag(key), 0),
        backend: slot,
        generation: 1,
        cookie: 0,
        flags: 0,
        created: now,
    }
}

/// Ticks both managers, with a pause between rounds as the daemon's loop
/// has (its period), until `done` or a generous deadline.
fn tick_until(
    a: &mut Manager,
    b: &mut Manager,
    what: &str,
    mut done: impl FnMut(&mut Manager, &mut Manager) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while !done(a, b) {
        assert!(Instant::now() < deadline, "never: {what}");
        b.tick();
        a.tick();
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_junk_flood_from_a_non_peer_costs_the_peer_nothing() {
    let dir = Dir(std::env::temp_dir().join(format!("spillway-sync-flood-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).expect("dir");
    let (la, lb) = (free_port(), free_port());
    let (mut a, _) = manager(&dir, "a", la, lb);
    let (mut b, b_shared) = manager(&dir, "b", lb, la);
    // In touch: each has taken a datagram of the other (rates, every
    // planning interval).
    tick_until(&mut a, &mut b, "in touch", |a, b| {
        counters(a).received > 0 && counters(b).received > 0
    });

    // The flood: junk from a socket that is no peer, until told to stop
    // (or at most 10 million datagrams).
    let stop = Arc::new(AtomicBool::new(false));
    let flooded = Arc::new(AtomicU64::new(0));
    let flood = {
        let (stop, flooded) = (stop.clone(), flooded.clone());
        let junk = UdpSocket::bind("127.0.0.1:0").expect("junk socket");
        std::thread::spawn(move || {
            let bytes = [0x5a; 200];
            for _ in 0..10_000_000u32 {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                if junk.send_to(&bytes, la).is_ok() {
                    flooded.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
    };
    // The flood is on: a has read some of it.
    tick_until(&mut a, &mut b, "junk read", |a, _| {
        counters(a).drop_source >= 10_000
    });

    // b's workers made ENTRIES new flows: b sends them to a, while the
    // flood goes on.
    let (tag, slot) = {
        let s = b_shared.snapshot.load();
        let tag = s.compiled.services[0].flow_tag;
        let slot = s
            .backends
            .iter()
            .position(|be| be.addr.to_string() == "10.1.0.1")
            .expect("backend 10.1.0.1");
        let slot = u32::try_from(slot).expect("a slot");
        (tag, slot)
    };
    let before = counters(&mut a);
    let q = b_shared.flow_sync.clone().expect("sync queue");
    let mut queued = 0;
    tick_until(&mut a, &mut b, "every entry sent", |_, b| {
        let now = b.now();
        for _ in 0..50 {
            if queued < ENTRIES {
                q.entries
                    .push(new_flow(queued, tag, slot, now))
                    .expect("room");
                queued += 1;
            }
        }
        counters(b).entries_sent >= u64::from(ENTRIES)
    });
    // Every entry b sent arrives and is applied (or the test times out).
    let sent = counters(&mut b).entries_sent;
    let deadline = Instant::now() + Duration::from_secs(60);
    let last = loop {
        a.tick();
        b.tick();
        let c = counters(&mut a);
        if c.applied - before.applied >= sent || Instant::now() > deadline {
            break c;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    stop.store(true, Ordering::Relaxed);
    flood.join().expect("flood");
    let junk = last.drop_source - before.drop_source;
    println!(
        "flood of {} junk datagrams ({junk} read and counted while b sent): b sent {sent} entries, a applied {}",
        flooded.load(Ordering::Relaxed),
        last.applied - before.applied,
    );
    assert_eq!(sent, u64::from(ENTRIES));
    assert_eq!(
        last.applied - before.applied,
        sent,
        "every entry b sent is applied\n{last:?}"
    );
    assert!(junk > 0, "the junk is counted");
}
