//! VRRPv3 scenarios (RFC 5798) between two nodes' management cores, driven
//! by the simulation harness: each node's advertisements are carried to
//! the other over a simulated segment that a scenario can cut, and a node
//! can die (its core no longer stepped). Checked each time: which node is
//! master, when it took over (virtual time, exact), that only the master
//! answers ARP for the VIP and forwards to it, and that a node taking over
//! announces the VIP with gratuitous ARP.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

mod sim;

use std::net::IpAddr;
use std::time::Duration;

use control_core::vrrp::State;
use health::State as Health;
use sim::{World, ip};
use testkit::config::{Config, endpoint_list, group, health_check, node, port, rule, service};

const MS: Duration = Duration::from_millis(1);
const VIP: &str = "10.0.0.10";

/// Node `name` at `addr` in VRRP group 51 for the VIP with `priority`,
/// `preempt`, an advertisement every 100 ms.
fn cfg(name: &str, addr: &str, priority: u8, preempt: bool) -> String {
    Config::new()
        .node(node(name, "r1", "r1-a"))
        .dataplane("flow_table_capacity", 8192)
        .port(port("up", "net_ring0", "uplink").strs("addresses", &[&format!("{addr}/24")]))
        .rule(rule("web", &[VIP], "TCP", "80", "web").set("ports", 80))
        .service(
            service("web", "ipip")
                .str("health_check", "tcp")
                .child(group("a", "r1", "r1-a").set("endpoints", endpoint_list(&["10.1.0.1"]))),
        )
        .health_check(health_check("tcp", "TCP").set("port", 80))
        .raw(&format!(
            "[[vrrp]]\nvrid = 51\nport = \"up\"\npriority = {priority}\npreempt = {preempt}\nadvert_interval = \"100ms\"\nvips = [\"{VIP}\"]\n"
        ))
        .build()
}

/// A node started at `start`, stepped every 10 ms of virtual time, its
/// endpoint healthy.
fn world(text: &str, seed: u64, start: Duration) -> World {
    let mut w = World::started(text, 1, seed, true, start);
    w.period = 10 * MS;
    w.all_health(Health::Healthy);
    w
}

/// Two nodes on one segment.
struct Pair {
    n: [World; 2],
    /// Whether each node runs (a dead one is not stepped).
    alive: [bool; 2],
    /// Whether the segment carries advertisements.
    linked: bool,
}

fn is_vrrp(f: &[u8]) -> bool {
    wire::vrrp::looks_like(f)
}

impl Pair {
    fn new(a: &str, b: &str) -> Pair {
        Pair {
            n: [world(a, 1, Duration::ZERO), world(b, 2, Duration::ZERO)],
            alive: [true, true],
            linked: true,
        }
    }

    /// Lets `d` pass in 10 ms steps, advertisements crossing the segment
    /// after each.
    fn run(&mut self, d: Duration) {
        let end = self.n[0].now + d;
        while self.n[0].now < end {
            for (w, alive) in self.n.iter_mut().zip(self.alive) {
                if alive {
                    w.advance(10 * MS);
                } else {
                    w.now += 10 * MS;
                }
            }
            for from in 0..2 {
                let frames: Vec<(usize, Vec<u8>)> = self.n[from]
                    .sent
                    .iter()
                    .filter(|(_, _, f)| is_vrrp(f))
                    .map(|(_, p, f)| (*p, f.clone()))
                    .collect();
                self.n[from].sent.retain(|(_, _, f)| !is_vrrp(f));
                if self.linked && self.alive[from] {
                    self.n[1 - from].vrrp_in.extend(frames);
                }
            }
        }
    }

    /// Each node's group state.
    fn states(&self) -> [State; 2] {
        [0, 1].map(|i| self.n[i].core.vrrp().groups()[0].state())
    }

    /// Runs until `which` is master, at most `within`; how long it took.
    fn until_master(&mut self, which: usize, within: Duration) -> Duration {
        let t0 = self.n[0].now;
        while self.states()[which] != State::Master {
            assert!(
                self.n[0].now - t0 < within,
                "node {which} not master after {within:?}: {:?}",
                self.states()
            );
            self.run(10 * MS);
        }
        self.n[0].now - t0
    }
}

/// Whether node `w` answers an ARP request for the VIP.
fn answers_arp(w: &mut World) -> bool {
    let mut f = vec![0u8; 42];
    let req = wire::arp::ArpRepr {
        oper: wire::arp::op::REQUEST,
        sha: [2, 0, 0, 0, 0, 0x99],
        spa: "10.0.0.99".parse().expect("v4"),
        tha: [0; 6],
        tpa: VIP.parse().expect("v4"),
    };
    wire::ethernet::EthernetRepr::untagged([0xff; 6], req.sha, wire::ethernet::ethertype::ARP)
        .emit(&mut f[..])
        .expect("eth");
    req.emit(&mut wire::arp::Packet::new_checked(&mut f[14..]).expect("arp"))
        .expect("arp");
    w.send_raw(f).iter().any(|r| {
        wire::arp::Packet::new_checked(&r[14..])
            .ok()
            .and_then(|p| wire::arp::ArpRepr::parse(&p).ok())
            .is_some_and(|a| a.oper == wire::arp::op::REPLY && a.spa == req.tpa)
    })
}

/// Whether node `w` forwards a new connection to the VIP.
fn forwards(w: &mut World) -> bool {
    let f = sim::Flow {
        client: "10.9.0.1".parse().expect("v4"),
        sport: 40_000,
        vip: VIP.parse().expect("v4"),
        dport: 80,
        udp: false,
    };
    w.send(&f, true).addr().is_some()
}

/// The gratuitous ARPs for the VIP node `w` sent.
fn garps(w: &World) -> usize {
    w.sent
        .iter()
        .filter(|(_, _, f)| {
            wire::arp::Packet::new_checked(&f[14..])
                .ok()
                .and_then(|p| wire::arp::ArpRepr::parse(&p).ok())
                .is_some_and(|a| a.spa == a.tpa && IpAddr::V4(a.spa) == ip(VIP))
        })
        .count()
}

/// Checks that exactly node `m` serves the VIP.
fn served_by(p: &mut Pair, m: usize) {
    for i in 0..2 {
        if !p.alive[i] {
            continue;
        }
        let w = &mut p.n[i];
        assert_eq!(answers_arp(w), i == m, "node {i} answers ARP for the VIP");
        assert_eq!(forwards(w), i == m, "node {i} forwards to the VIP");
    }
}

/// Start: both listen for the master-down interval, the higher priority
/// wins (its skew is shorter), the other hears it and stays backup. Then
/// the master dies: the backup takes over after exactly its master-down
/// interval, 3 × 100 ms + (256 − 100) × 100 / 256 ms = 360 ms (to the next
/// 10 ms step), and announces the VIP.
#[test]
fn master_down() {
    let mut p = Pair::new(
        &cfg("a", "10.0.0.2", 150, true),
        &cfg("b", "10.0.0.3", 100, true),
    );
    assert_eq!(p.states(), [State::Backup, State::Backup]);
    served_by_none(&mut p);
    let took = p.until_master(0, Duration::from_secs(1));
    // A's master-down interval: 300 ms + 106 × 10 / 256 cs (4 cs) = 340 ms.
    assert_eq!(took, 340 * MS, "node a's start");
    p.run(Duration::from_secs(1));
    assert_eq!(p.states(), [State::Master, State::Backup]);
    served_by(&mut p, 0);
    assert!(garps(&p.n[0]) >= 1, "a announced the VIP");
    assert_eq!(garps(&p.n[1]), 0, "b never announced it");
    assert!(p.n[1].live.standby.contains(&ip(VIP)));

    p.alive[0] = false;
    let took = p.until_master(1, Duration::from_secs(2));
    println!("backup b took over {took:?} after a died");
    // The last advertisement a sent reached b at most 100 ms before the
    // death; b's timer (360 ms) ran from then.
    assert!(took > 250 * MS && took <= 370 * MS, "{took:?}");
    p.run(100 * MS);
    served_by(&mut p, 1);
    assert!(garps(&p.n[1]) >= 1, "b announced the VIP on taking over");
    assert!(
        p.n[1]
            .logs
            .iter()
            .any(|(_, l)| l.contains("vrrp vrid 51 (IPv4): backup -> master")),
        "{:?}",
        p.n[1].logs
    );
}

fn served_by_none(p: &mut Pair) {
    for w in &mut p.n {
        assert!(!answers_arp(w), "no ARP answered before a master is chosen");
        assert!(!forwards(w), "nothing forwarded before a master is chosen");
    }
}

/// A reload lowers the master's priority below the backup's: the backup,
/// which preempts, lets the master's lower advertisements time out and
/// takes over; the old master hears it and steps back. Then the new
/// master is drained: it resigns (priority 0) and the other takes over
/// after its skew time alone, well under a master-down interval.
#[test]
fn priority_change_and_drain() {
    let mut p = Pair::new(
        &cfg("a", "10.0.0.2", 150, true),
        &cfg("b", "10.0.0.3", 100, true),
    );
    p.until_master(0, Duration::from_secs(1));
    p.run(500 * MS);
    p.n[0]
        .reload(&cfg("a", "10.0.0.2", 50, true), false)
        .expect("reload");
    let took = p.until_master(1, Duration::from_secs(2));
    println!("b preempted a lowered master after {took:?}");
    p.run(200 * MS);
    assert_eq!(p.states(), [State::Backup, State::Master]);
    served_by(&mut p, 1);

    p.n[1]
        .drain(control::drain::Scope::Node, "b", true)
        .expect("drain");
    let took = p.until_master(0, Duration::from_secs(2));
    println!("a took over from a drained b after {took:?}");
    // b resigned: a waits its skew time only ((256 − 50) × 10 / 256 cs).
    assert!(took <= 100 * MS, "{took:?}");
    p.run(500 * MS);
    assert_eq!(p.states(), [State::Master, State::Backup]);
    served_by(&mut p, 0);
}

/// B is master alone; A, of higher priority, comes up: with preemption it
/// takes over once its master-down interval has passed; without, it
/// follows B.
#[test]
fn preemption() {
    for preempt in [true, false] {
        let mut p = Pair::new(
            &cfg("a", "10.0.0.2", 200, preempt),
            &cfg("b", "10.0.0.3", 100, true),
        );
        p.alive[0] = false;
        p.until_master(1, Duration::from_secs(1));
        // A starts now: a fresh core.
        p.n[0] = world(&cfg("a", "10.0.0.2", 200, preempt), 3, p.n[1].now);
        p.alive[0] = true;
        p.run(Duration::from_secs(2));
        if preempt {
            assert_eq!(p.states(), [State::Master, State::Backup], "preempt");
            served_by(&mut p, 0);
        } else {
            assert_eq!(p.states(), [State::Backup, State::Master], "no preempt");
            served_by(&mut p, 1);
        }
    }
}

/// A master preempted before its takeover's announcements are over
/// ([neighbours] announce_count 3, 1 s apart) sends no more of them: they
/// would move the clients back to a node that drops the VIP's packets. The
/// new master's go on.
#[test]
fn a_preempted_master_stops_announcing() {
    let mut p = Pair::new(
        &cfg("a", "10.0.0.2", 200, true),
        &cfg("b", "10.0.0.3", 100, true),
    );
    p.alive[0] = false;
    p.until_master(1, Duration::from_secs(1));
    p.n[0] = world(&cfg("a", "10.0.0.2", 200, true), 3, p.n[1].now);
    p.alive[0] = true;
    p.until_master(0, Duration::from_secs(1));
    p.run(50 * MS);
    assert_eq!(p.states(), [State::Master, State::Backup]);
    let (a, b) = (garps(&p.n[0]), garps(&p.n[1]));
    assert!(b >= 1, "b announced the VIP on taking over");
    p.run(Duration::from_secs(3));
    assert_eq!(garps(&p.n[1]), b, "b announced the VIP after stepping back");
    assert!(garps(&p.n[0]) >= a + 2, "a's announcements go on");
    served_by(&mut p, 0);
}

/// The segment is cut: both become master (split brain). Healed: the
/// lower priority hears the higher and steps back within one interval;
/// with equal priorities the higher address wins.
#[test]
fn split_brain_healed() {
    // Healed at each 10 ms of an advertisement interval: whichever node's
    // advertisement crosses first, the loser steps back and the winner
    // announces the VIPs again (the loser's gratuitous ARPs of the split
    // moved the segment's caches to it).
    for (pa, pb, winner) in [(150, 100, 0), (100, 100, 1)] {
        for phase in 0..10u32 {
            let mut p = Pair::new(
                &cfg("a", "10.0.0.2", pa, true),
                &cfg("b", "10.0.0.3", pb, true),
            );
            p.run(Duration::from_secs(1));
            p.linked = false;
            p.run(Duration::from_secs(1) + phase * 10 * MS);
            assert_eq!(p.states(), [State::Master, State::Master], "cut");
            p.n[winner].sent.clear();
            p.linked = true;
            p.run(150 * MS);
            let mut want = [State::Backup, State::Backup];
            want[winner] = State::Master;
            assert_eq!(
                p.states(),
                want,
                "healed, priorities {pa} {pb}, phase {phase}"
            );
            assert!(
                garps(&p.n[winner]) >= 1,
                "the winner announces the VIP again (priorities {pa} {pb}, phase {phase})"
            );
            served_by(&mut p, winner);
        }
    }
}

/// Every rule on the group's VIPs UNHEALTHY: the master resigns and the
/// backup takes over; with no backup left, the node serves again after a
/// master-down interval (a degraded service over none) and stays master.
#[test]
fn an_unhealthy_master_resigns_once() {
    let mut p = Pair::new(
        &cfg("a", "10.0.0.2", 150, true),
        &cfg("b", "10.0.0.3", 100, true),
    );
    p.until_master(0, Duration::from_secs(1));
    p.run(200 * MS);
    p.n[0].all_health(Health::Unhealthy);
    p.until_master(1, Duration::from_secs(3));
    p.run(Duration::from_secs(1));
    assert_eq!(p.states(), [State::Backup, State::Master]);
    p.alive[1] = false;
    p.until_master(0, Duration::from_secs(2));
    p.run(Duration::from_secs(2));
    assert_eq!(p.states()[0], State::Master, "stays master");
}

/// A reload keeps each group's state: the master stays master (no new
/// election), a priority change needs no takeover of its own, and a VIP
/// the reload adds to the group is served and announced at once.
#[test]
fn a_reload_keeps_the_master_and_announces_what_it_adds() {
    let two = |priority: u8| {
        let text = cfg("a", "10.0.0.2", priority, true);
        let (head, group) = text.split_once("[[vrrp]]").expect("a group");
        format!(
            "{head}[[forwarding_rules]]\nname = \"web2\"\nvips = [\"10.0.0.11\"]\nprotocol = \"TCP\"\nports = 80\nbackend_service = \"web\"\n\n[[vrrp]]{}",
            group.replace(
                "vips = [\"10.0.0.10\"]",
                "vips = [\"10.0.0.10\", \"10.0.0.11\"]"
            )
        )
    };
    let mut p = Pair::new(
        &cfg("a", "10.0.0.2", 150, true),
        &cfg("b", "10.0.0.3", 100, true),
    );
    p.until_master(0, Duration::from_secs(1));
    p.run(Duration::from_secs(1));
    let became = p.n[0].core.vrrp().groups()[0].counts.became_master;
    p.n[0].sent.clear();
    // b does not know the new VIP yet: each takes the other's
    // advertisements all the same (they share a VIP), so the election goes
    // on: a stays master all along, b backup.
    p.n[0].reload(&two(200), false).expect("reload");
    p.run(Duration::from_secs(1));
    assert_eq!(p.states()[0], State::Master);
    assert_eq!(p.n[0].core.vrrp().groups()[0].counts.became_master, became);
    assert_eq!(p.n[0].core.vrrp().groups()[0].priority(), 200);
    let new_garps = p.n[0]
        .sent
        .iter()
        .filter(|(_, _, f)| {
            wire::arp::Packet::new_checked(&f[14..])
                .ok()
                .and_then(|p| wire::arp::ArpRepr::parse(&p).ok())
                .is_some_and(|a| a.spa == a.tpa && IpAddr::V4(a.spa) == ip("10.0.0.11"))
        })
        .count();
    assert!(new_garps >= 1, "the added VIP is announced");
    assert!(p.n[0].live.rules.is_vip(ip("10.0.0.11")), "and served");
    assert_eq!(p.states(), [State::Master, State::Backup], "no split brain");
    assert!(
        p.n[1].core.vrrp().groups()[0].counts.addresses_differ > 0,
        "b counts advertisements naming other VIPs"
    );
}
