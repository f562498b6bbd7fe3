//! `spillway replay` decides as the daemon: random configurations and
//! traffic through replay and through the daemon's pipeline fed packet by
//! packet by the same management core.
//!
//! Every test writes a configuration and a pcap of hand-built packets, runs
//! the `spillway` binary, and checks the transmitted frames byte by byte
//! (outer headers decoded by `common::replay`, not by the `wire` crate under
//! test) and the summary's counters.

#![allow(clippy::cast_possible_truncation)] // test values are small
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

mod common;

use std::path::Path;
use std::time::Duration;

use common::replay::*;
use common::*;
use testkit::config::{Config, Table, group, node, rule, service};
use testkit::pcap;

/// SplitMix64: a seeded generator for the random cases below.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

/// A random configuration: 1-3 regions of 1-2 zones, a group per zone of
/// 1-3 endpoints with random weights and capacity scalers, RATE or
/// UTILIZATION balancing, zonal affinity or not; and its endpoints.
fn random_config(rng: &mut Rng) -> (String, Vec<String>) {
    // Small Maglev tables: a debug build makes them quickly.
    let mut svc = service("web", "ipip")
        .str("connection_draining_timeout", "2s")
        .set("maglev_table_size", 1021);
    if rng.below(2) == 0 {
        svc = svc
            .str("balancing_mode", "RATE")
            .set("max_rate_per_endpoint", rng.pick(&[5, 20, 1000]));
    }
    let zonal = rng.below(2) == 0;
    if zonal {
        svc = svc.child(
            Table::new("backend_services.locality")
                .set("zonal_affinity", true)
                .set("zonal_spill_ratio", rng.pick(&["0.0", "0.3", "1.0"])),
        );
    }
    let mut endpoints = Vec::new();
    let regions = 1 + rng.below(3);
    let mut zones0 = 0;
    for r in 0..regions {
        let zones = 1 + rng.below(2);
        if r == 0 {
            zones0 = zones;
        }
        for z in 0..zones {
            let list: Vec<String> = (0..1 + rng.below(3))
                .map(|e| {
                    let a = format!("10.{}.{z}.{}", r + 1, e + 1);
                    endpoints.push(a.clone());
                    format!(
                        "{{ address = \"{a}\", weight = {} }}",
                        rng.pick(&[0, 50, 100, 200])
                    )
                })
                .collect();
            svc = svc.child(
                group(&format!("g{r}{z}"), &format!("r{r}"), &format!("r{r}-z{z}"))
                    .set("endpoints", format!("[{}]", list.join(", ")))
                    .set("capacity_scaler", rng.pick(&["0.0", "0.5", "1.0"])),
            );
        }
    }
    let mut cfg = Config::new()
        .node(node("replay", "r0", "r0-z0"))
        .dataplane("flow_table_capacity", 4096)
        .port(uplink(&["10.0.0.2/24"]))
        .rule(rule("web", &["10.0.0.10"], "TCP", "80", "web"))
        .service(svc);
    if zonal {
        for z in 0..zones0 {
            cfg = cfg.raw(&format!(
                "[[client_zones]]\nzone = \"r0-z{z}\"\nprefixes = [\"192.0.{}.0/24\"]\n",
                z + 1
            ));
        }
    }
    (cfg.build(), endpoints)
}

/// The daemon's pipeline on the same inputs, packet by packet: the
/// management core stepping every 50 ms of capture time
/// ([`control::Core::step`]: the flow table aged, health and remote
/// verdicts, periodic work with the workers' counters) and one worker polling each packet alone with the snapshot last
/// published. Where each packet went (in transmit order).
fn daemon_model(
    text: &str,
    packets: &[(Duration, Vec<u8>)],
    events: &[(Duration, String, bool)],
    seed: u64,
) -> Vec<String> {
    use control::scripted::State;
    use control::{Core, Inputs, Recorder, ScriptedProbes};
    use dataplane::{Engine, Local, PacketIo, Pipeline, VecBurst};
    use wire::buf::{MemBuf, PacketBuf};
    use wire::burst::PacketBurst;

    struct One(Option<Vec<u8>>, Vec<Vec<u8>>);
    impl PacketIo for One {
        type Burst = VecBurst<MemBuf<Vec<u8>>>;
        fn rx_burst(&mut self, _: usize, burst: &mut Self::Burst) -> usize {
            match self.0.take() {
                Some(f) => {
                    let p = MemBuf::new(vec![0u8; 4096], 128, &f).expect("fits");
                    usize::from(burst.push(p).is_ok())
                }
                None => 0,
            }
        }
        fn tx_burst(&mut self, _: usize, burst: &mut Self::Burst) -> usize {
            let out = &mut self.1;
            burst.drain_each(|_, p| out.push(p.data().to_vec()));
            0
        }
    }

    let loaded = config::load_str("p.toml", text, &config::Env::default()).expect("valid");
    let local = Local::from_config(&loaded.compiled, |_| None);
    let mut probes = ScriptedProbes::new(State::Healthy);
    probes.report_unchecked(&loaded.compiled);
    // Placed as `replay` places them (its `--seed`).
    let flows = flowtable::FlowTable::new(flowtable::Config {
        placement: Some(flowtable::PlacementKey::fixed(seed, 0)),
        ..dataplane::flow_table_config(&loaded.compiled.settings.dataplane)
    })
    .expect("flow table");
    let children = loaded.compiled.children.len();
    let mut core = Core::start(
        Path::new("p.toml"),
        loaded.compiled,
        local,
        dataplane::CookieKey::default(),
        Duration::ZERO,
        &mut probes,
    )
    .expect("core");
    let mut live = core.live().clone();
    let mut shell = Recorder::new(probes);
    let mut engine = Engine::new(
        Pipeline::new(seed, children),
        &[config::schema::PortRole::Uplink],
        dataplane::BURST,
        || VecBurst::with_capacity(dataplane::BURST),
    );
    let mut io = One(None, Vec::new());
    let period = Duration::from_millis(50);
    let (mut next, mut done) = (period, 0);
    for (t, frame) in packets {
        while next <= *t {
            while let Some((at, addr, down)) = events.get(done)
                && *at <= next
            {
                let s = if *down {
                    State::Unhealthy
                } else {
                    State::Healthy
                };
                shell.probes.set_state(addr.parse().expect("address"), s);
                done += 1;
            }
            let counters = engine.worker.counters.clone();
            let inputs = Inputs {
                flows: &flows,
                sightings: Vec::new(),
                vrrp: Vec::new(),
                counters: &|| counters.clone(),
                sync_queue: None,
            };
            core.step(next, inputs, &mut shell);
            if let Some(s) = shell.published.drain(..).next_back() {
                live = s;
            }
            next += period;
        }
        io.0 = Some(frame.clone());
        engine.poll(&mut io, &live, &flows, t.as_secs() as u32);
    }
    backends_of(&io.1)
}

/// For random configurations (regions, zones, weights, capacity scalers,
/// zonal affinity, RATE limits) and random traffic with health changes at
/// random times, `spillway replay` (bursts, its own loop) and the daemon's
/// pipeline fed by the same management core packet by packet send every
/// packet to the same backend.
#[test]
fn replay_decides_as_the_daemon_for_random_configurations_and_traffic() {
    let (mut tested, mut forwarded) = (0, 0);
    for seed in 0..64u64 {
        let mut rng = Rng(seed);
        let (text, endpoints) = random_config(&mut rng);
        if config::load_str("p.toml", &text, &config::Env::default()).is_err() {
            continue;
        }
        tested += 1;
        // Connections: a SYN at a random time, then 1-4 ACKs after it.
        let mut packets: Vec<(Duration, Vec<u8>)> = Vec::new();
        for i in 0..20 + rng.below(60) as u16 {
            let set = 1 + rng.below(3) as u8;
            let mut t = if i == 0 { 0 } else { rng.below(4000) };
            packets.push((Duration::from_millis(t), conn(set, i, SYN)));
            for _ in 0..1 + rng.below(4) {
                t += 1 + rng.below(1500);
                packets.push((Duration::from_millis(t), conn(set, i, ACK)));
            }
        }
        packets.sort_by_key(|(t, _)| *t);
        let mut events: Vec<(Duration, String, bool)> = (0..rng.below(4))
            .map(|_| {
                (
                    Duration::from_millis(100 + rng.below(5000)),
                    rng.pick(&endpoints).clone(),
                    rng.below(2) == 0,
                )
            })
            .collect();
        events.sort_by_key(|e| e.0);
        let mut args = vec!["--seed".to_string(), "7".into()];
        for (at, addr, down) in &events {
            args.extend([
                "--at".into(),
                format!("{}ms", at.as_millis()),
                if *down { "--down" } else { "--up" }.into(),
                addr.clone(),
            ]);
        }
        let d = dir(&format!("prop-{seed}"));
        let (cfg, input, output) = (d.join("c.toml"), d.join("in.pcap"), d.join("out.pcap"));
        std::fs::write(&cfg, &text).expect("config");
        let base = Duration::from_secs(1_000_000);
        let timed: Vec<(Duration, &Vec<u8>)> =
            packets.iter().map(|(t, f)| (base + *t, f)).collect();
        pcap::write_timed(&input, &pcap::Format::default(), &timed);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let r = replay(&cfg, &input, &output, &args);
        let said =
            String::from_utf8_lossy(&r.stdout).to_string() + &String::from_utf8_lossy(&r.stderr);
        assert!(r.status.success(), "seed {seed}: {said}\n{text}");
        let replayed = backends_of(&read_pcap(&output));
        let _ = std::fs::remove_dir_all(&d);
        let model = daemon_model(&text, &packets, &events, 7);
        forwarded += model.len();
        assert_eq!(
            replayed, model,
            "seed {seed}: replay and the daemon's pipeline differ\n{said}\n{text}\nevents {events:?}"
        );
    }
    eprintln!("{tested} of 64 random configurations valid, {forwarded} packets compared");
    assert!(
        tested >= 32,
        "only {tested} of 64 random configurations valid"
    );
}
