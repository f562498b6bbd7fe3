//! Zone demand on a simulated node (`sim`: the real management core and
//! data plane), offered new one-packet UDP flows from clients of two zones
//! (M27): the data plane counts each zone's new flows, the planner sizes
//! each zone's share from them, so a zone whose clients bring more than its
//! endpoints' capacity spills its excess to the other zone, and only its
//! excess; a zone within capacity keeps its clients. Without the
//! measurement the planner would assume demand follows capacity (900 pps a
//! zone here) and keep every client in its zone, overloading zone a.
//!
//! The figures are printed.

#![allow(
    clippy::cast_possible_truncation,
    clippy::cast_precision_loss,
    clippy::cast_sign_loss
)] // test values are small and positive
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

mod sim;

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use health::State;
use sim::{Flow, Rng, World};

/// Each zone's group capacity (`max_rate`, packets per second).
const CAPACITY: f64 = 1000.0;
const VIP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 10);

/// One node in zone `a` of region r1; service `web` (RATE) with a group of
/// two endpoints in zone `a` (10.1.0.x) and one in zone `b` (10.2.0.x),
/// [`CAPACITY`] each; zonal affinity, no spill allowed below capacity;
/// clients of 100.64.0.0/16 in zone `a`, of 100.65.0.0/16 in zone `b`.
fn config() -> String {
    format!(
        r#"[node]
name = "lb"
region = "r1"
zone = "a"

[dataplane]
flow_table_capacity = 65536
timeouts = {{ udp = "5s" }}

[[ports]]
name = "up"
device = "net_ring0"
role = "uplink"
addresses = ["10.0.0.2/24"]

[[forwarding_rules]]
name = "dns"
vips = ["{VIP}"]
protocol = "UDP"
ports = 53
backend_service = "web"

[[backend_services]]
name = "web"
delivery = "ipip"
maglev_table_size = 1021
balancing_mode = "RATE"
locality = {{ zonal_affinity = true, zonal_spill_ratio = 0.0 }}
groups = [
  {{ name = "ga", region = "r1", zone = "a", max_rate = {CAPACITY}, endpoints = [{{ address = "10.1.0.1", port = 53 }}, {{ address = "10.1.0.2", port = 53 }}] }},
  {{ name = "gb", region = "r1", zone = "b", max_rate = {CAPACITY}, endpoints = [{{ address = "10.2.0.1", port = 53 }}, {{ address = "10.2.0.2", port = 53 }}] }},
]

[[client_zones]]
zone = "a"
prefixes = ["100.64.0.0/16"]

[[client_zones]]
zone = "b"
prefixes = ["100.65.0.0/16"]
"#
    )
}

/// Where one zone's clients' flows went, in flows per second.
#[derive(Debug, Clone, Copy, Default)]
struct Went {
    to_a: f64,
    to_b: f64,
    dropped: f64,
}

struct Offer {
    w: World,
    rng: Rng,
    carry: [f64; 2],
}

impl Offer {
    fn new() -> Offer {
        let mut o = Offer {
            w: World::new(&config(), 2, 43),
            rng: Rng::new(19),
            carry: [0.0; 2],
        };
        o.w.all_health(State::Healthy);
        o.run([0.0; 2], Duration::from_secs(2));
        o
    }

    /// Offers `pps[z]` new one-packet flows a second from clients of zone
    /// `z` (0: a, 1: b) for `d`; where each zone's flows went.
    fn run(&mut self, pps: [f64; 2], d: Duration) -> [Went; 2] {
        let mut got = [Went::default(); 2];
        let secs = self.w.offer(
            &mut self.rng,
            &mut self.carry,
            pps,
            d,
            |z, r| Flow {
                client: Ipv4Addr::new(100, 64 + z as u8, (r >> 8) as u8, (r >> 16) as u8),
                sport: 1024 + ((r >> 24) as u16 % 60000),
                vip: VIP,
                dport: 53,
                udp: true,
            },
            |z, to| match to {
                Some(IpAddr::V4(a)) if a.octets()[1] == 1 => got[z].to_a += 1.0,
                Some(_) => got[z].to_b += 1.0,
                None => got[z].dropped += 1.0,
            },
        );
        got.map(|g| Went {
            to_a: g.to_a / secs,
            to_b: g.to_b / secs,
            dropped: g.dropped / secs,
        })
    }
}

/// Zone a's clients bring 1500 new flows a second against its 1000 pps:
/// 500 a second (its excess, a third) go to zone b, the rest stay; zone
/// b's 300 stay in b.
#[test]
fn an_overloaded_zone_spills_its_excess_and_only_its_excess() {
    let mut o = Offer::new();
    let offered = [1500.0, 300.0];
    o.run(offered, Duration::from_secs(12));
    let [a, b] = o.run(offered, Duration::from_secs(6));
    println!("zone a clients: {a:?}\nzone b clients: {b:?}");
    let status = o.w.status();
    println!("{status}");
    assert_eq!(a.dropped + b.dropped, 0.0);
    let excess = offered[0] - CAPACITY;
    // Zone a's endpoints carry their capacity, within 5 %; what left the
    // zone is the excess, within 10 % of it.
    assert!(
        (a.to_a + b.to_a - CAPACITY).abs() < 0.05 * CAPACITY,
        "zone a's endpoints got {:.0} pps",
        a.to_a + b.to_a
    );
    assert!(
        (a.to_b - excess).abs() < 0.1 * excess,
        "zone a's clients spilled {:.0} pps, excess {excess}",
        a.to_b
    );
    // Zone b's clients stay in b.
    assert!(b.to_a < 0.01 * offered[1], "zone b's clients left: {b:?}");
    // Status shows the measured demand and the pinned shares.
    assert!(
        status.contains("client zone a: 1"),
        "status lacks zone a's demand:\n{status}"
    );
    let line = |z: &str| {
        status
            .lines()
            .find(|l| l.contains(&format!("client zone {z}:")))
            .unwrap_or_default()
            .to_owned()
    };
    assert!(line("b").contains("in zone 100.0 %") || line("b").contains("in zone -"));
    assert!(!line("a").contains("in zone 100.0 %"), "{}", line("a"));
}

/// Demand within each zone's capacity: nothing leaves its zone.
#[test]
fn a_zone_within_capacity_keeps_its_clients() {
    let mut o = Offer::new();
    let offered = [800.0, 300.0];
    o.run(offered, Duration::from_secs(12));
    let [a, b] = o.run(offered, Duration::from_secs(6));
    println!("zone a clients: {a:?}\nzone b clients: {b:?}");
    assert_eq!(a.dropped + b.dropped, 0.0);
    assert!(a.to_b < 0.01 * offered[0], "zone a's clients left: {a:?}");
    assert!(b.to_a < 0.01 * offered[1], "zone b's clients left: {b:?}");
}

/// The surge passes: zone a's clients come back to their zone.
#[test]
fn a_zone_takes_its_clients_back_when_its_demand_falls() {
    let mut o = Offer::new();
    o.run([1500.0, 300.0], Duration::from_secs(10));
    o.run([600.0, 300.0], Duration::from_secs(20));
    let [a, _] = o.run([600.0, 300.0], Duration::from_secs(5));
    println!("zone a clients after the surge: {a:?}");
    assert!(a.to_b < 0.01 * 600.0, "zone a's clients still spill: {a:?}");
}
