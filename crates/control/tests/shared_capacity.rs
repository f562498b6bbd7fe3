//! Two forwarding rules on one `RATE` service share its capacity in
//! proportion to their demand (M25, M26, M4): the data plane measures rates
//! per backend, whichever rule sent the packets, so both rules' demand adds
//! up against the service's capacity, and the planner's shares apply to the
//! service, so each rule spills the same fraction. A simulated node (`sim`:
//! the real management core and data plane) is offered new UDP flows on
//! rule `a` at three times rule `b`'s rate, together twice the near
//! group's `max_rate`. The figures are printed.

#![allow(
    clippy::cast_possible_truncation,
    clippy::cast_precision_loss,
    clippy::cast_sign_loss
)] // test values are small and positive
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

mod sim;

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use sim::{Flow, Rng, World};

/// The near group's `max_rate` (packets per second).
const MAX_RATE: f64 = 1000.0;
/// Rule `a`'s VIP and rule `b`'s.
const VIP_A: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 10);
const VIP_B: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 11);

/// One node in r1 (r2 next): rules `a` and `b` (UDP 53, a VIP each) on
/// service `web` (RATE), group `near` in r1 ([`MAX_RATE`]) and `far` in
/// r2 (room for everything).
fn config() -> String {
    format!(
        r#"[node]
name = "lb"
region = "r1"
zone = "r1-a"
region_preference = ["r1", "r2"]

[dataplane]
flow_table_capacity = 65536
timeouts = {{ udp = "5s" }}

[[ports]]
name = "up"
device = "net_ring0"
role = "uplink"
addresses = ["10.0.0.2/24"]

[[forwarding_rules]]
name = "a"
vips = ["{VIP_A}"]
protocol = "UDP"
ports = 53
backend_service = "web"

[[forwarding_rules]]
name = "b"
vips = ["{VIP_B}"]
protocol = "UDP"
ports = 53
backend_service = "web"

[[backend_services]]
name = "web"
delivery = "ipip"
balancing_mode = "RATE"
maglev_table_size = 1021
groups = [
  {{ name = "near", region = "r1", zone = "r1-a", max_rate = {MAX_RATE}, endpoints = [{{ address = "10.1.0.1" }}, {{ address = "10.1.0.2" }}] }},
  {{ name = "far", region = "r2", zone = "r2-a", max_rate = 1000000, endpoints = [{{ address = "10.2.0.1" }}, {{ address = "10.2.0.2" }}] }},
]
"#
    )
}

/// What one rule's flows reached over a window, in packets per second.
#[derive(Debug, Clone, Copy, Default)]
struct Delivered {
    near: f64,
    far: f64,
    dropped: f64,
}

impl Delivered {
    fn total(&self) -> f64 {
        self.near + self.far + self.dropped
    }

    /// The share of its flows kept in r1.
    fn kept(&self) -> f64 {
        self.near / self.total()
    }
}

/// The node and the offered load's generator.
struct Offer {
    w: World,
    rng: Rng,
    /// Fractional flows carried to the next tick, per rule.
    carry: [f64; 2],
}

impl Offer {
    fn new() -> Offer {
        let mut o = Offer {
            w: World::new(&config(), 2, 41),
            rng: Rng::new(17),
            carry: [0.0; 2],
        };
        o.run([0.0; 2], Duration::from_secs(2));
        o
    }

    /// Offers `pps[i]` new one-packet UDP flows a second to rule `i`'s VIP
    /// for `d`, interleaved tick by tick; what each rule's flows reached.
    fn run(&mut self, pps: [f64; 2], d: Duration) -> [Delivered; 2] {
        let period = self.w.period;
        let steps = (d.as_secs_f64() / period.as_secs_f64()).round() as usize;
        let mut got = [Delivered::default(); 2];
        for _ in 0..steps {
            let mut due = [0usize; 2];
            for i in 0..2 {
                self.carry[i] += pps[i] * period.as_secs_f64();
                let n = self.carry[i].floor();
                self.carry[i] -= n;
                due[i] = n as usize;
            }
            // Alternate the rules within the tick, as their clients would.
            while due.iter().any(|&n| n > 0) {
                for (i, vip) in [VIP_A, VIP_B].into_iter().enumerate() {
                    if due[i] == 0 {
                        continue;
                    }
                    due[i] -= 1;
                    let r = self.rng.next();
                    let f = Flow {
                        client: Ipv4Addr::new(
                            100,
                            64 | (r >> 58) as u8,
                            (r >> 8) as u8,
                            (r >> 16) as u8,
                        ),
                        sport: 1024 + ((r >> 24) as u16 % 60000),
                        vip,
                        dport: 53,
                        udp: true,
                    };
                    match self.w.send(&f, true).addr() {
                        Some(IpAddr::V4(a)) if a.octets()[1] == 1 => got[i].near += 1.0,
                        Some(_) => got[i].far += 1.0,
                        None => got[i].dropped += 1.0,
                    }
                }
            }
            self.w.advance(period);
        }
        let secs = d.as_secs_f64();
        got.map(|g| Delivered {
            near: g.near / secs,
            far: g.far / secs,
            dropped: g.dropped / secs,
        })
    }
}

/// Rule `a` at 1500 pps and `b` at 500 (3 : 1, together twice the near
/// group's 1000): r1 gets its max_rate within 5 %, `a` three times what
/// `b` gets there, each rule keeping the same share in r1 (about half) and
/// spilling the rest to r2; nothing is dropped.
#[test]
fn two_rules_share_a_rate_service_in_proportion_to_their_demand() {
    let offered = [1.5 * MAX_RATE, 0.5 * MAX_RATE];
    let mut o = Offer::new();
    o.run(offered, Duration::from_secs(8));
    let [a, b] = o.run(offered, Duration::from_secs(6));
    let status = o.w.status();
    println!(
        "rule a: offered {:.0} pps -> near {:.1}, far {:.1}, kept {:.3}\n\
         rule b: offered {:.0} pps -> near {:.1}, far {:.1}, kept {:.3}\n\
         near together {:.1} pps of max_rate {MAX_RATE}; a / b in r1 {:.3}\n{status}",
        offered[0],
        a.near,
        a.far,
        a.kept(),
        offered[1],
        b.near,
        b.far,
        b.kept(),
        a.near + b.near,
        a.near / b.near,
    );
    for (name, d, want) in [("a", a, offered[0]), ("b", b, offered[1])] {
        assert!(d.dropped == 0.0, "rule {name}: {d:?}");
        assert!(
            (d.total() - want).abs() <= 1.0,
            "rule {name}: {:.1} of {want} pps delivered",
            d.total()
        );
        assert!(d.far > 0.0, "rule {name} spills too: {d:?}");
    }
    // Together the rules fill the near group to its capacity, no more.
    let near = a.near + b.near;
    assert!(
        (near - MAX_RATE).abs() / MAX_RATE <= 0.05,
        "r1 got {near:.1} pps of max_rate {MAX_RATE}"
    );
    // Each rule keeps the same share in r1, so the capacity is split as
    // the demand is: 3 : 1.
    assert!(
        (a.kept() - b.kept()).abs() <= 0.05,
        "rule a keeps {:.3} in r1, rule b {:.3}",
        a.kept(),
        b.kept()
    );
    let ratio = a.near / b.near;
    assert!(
        (ratio - 3.0).abs() / 3.0 <= 0.1,
        "rule a got {ratio:.2} times rule b's rate in r1"
    );
    // Status shows the service's one capacity, the two rules' load on it.
    assert!(status.contains("capacity by rate"), "{status}");
    let r1 = status
        .lines()
        .find(|l| l.trim_start().starts_with("region r1:"))
        .unwrap_or_else(|| panic!("no region r1 in\n{status}"));
    assert!(r1.contains("of capacity 1000 pps, utilization "), "{r1}");
}
