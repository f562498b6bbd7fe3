//! Zone demand (M27): a service with zonal affinity counts its new flows
//! per client zone, once per flow entry created, never per packet that
//! follows an entry; a service without it counts nothing.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

mod common;

use std::net::Ipv4Addr;

use common::*;
use testkit::config::{Config, Table, endpoint_list, group, node, rule, service};
use testkit::packet::{ACK, SYN};

/// Service `web` with zonal affinity (or not): zone "za" and "zb" with
/// two endpoints each; clients of 192.0.1.0/24 in "za", of 192.0.2.0/24 in
/// "zb"; service `other` (TCP 81) without zonal affinity.
fn zonal(affinity: bool) -> Config {
    Config::new()
        .node(node("lab", "r", "za"))
        .port(uplink(&["10.0.0.2/24"]))
        .rule(rule("web", &["10.0.0.10"], "TCP", "80", "web"))
        .rule(rule("other", &["10.0.0.10"], "TCP", "81", "other"))
        .service(
            service("web", "ipip")
                .child(
                    group("a", "r", "za")
                        .set("endpoints", endpoint_list(&["10.0.1.11", "10.0.1.12"])),
                )
                .child(
                    group("b", "r", "zb")
                        .set("endpoints", endpoint_list(&["10.0.1.21", "10.0.1.22"])),
                )
                .child(Table::new("backend_services.locality").set("zonal_affinity", affinity)),
        )
        .service(
            service("other", "ipip")
                .child(group("c", "r", "za").set("endpoints", endpoint_list(&["10.0.1.31"]))),
        )
        .raw(
            "[[client_zones]]\nzone = \"za\"\nprefixes = [\"192.0.1.0/24\"]\n\n\
             [[client_zones]]\nzone = \"zb\"\nprefixes = [\"192.0.2.0/24\"]\n",
        )
}

fn lab_of(cfg: &Config) -> Lab {
    let mut lab = Lab::with(cfg, 4096);
    let (services, columns) = lab.snap.rules.zone_counters();
    lab.worker.counters.resize_zone_flows(services, columns);
    lab
}

/// Opens `n` connections from 192.0.`net`.x to port `dport` and sends each
/// three more packets.
fn connections(lab: &mut Lab, net: u8, dport: u16, n: u16) {
    for i in 0..n {
        let client = Ipv4Addr::new(192, 0, net, 1 + (i % 200) as u8);
        let sport = 20000 + i;
        lab.run(&tcp(client, sport, VIP, dport, SYN).frame(), 1);
        for t in 2..5 {
            lab.run(&tcp(client, sport, VIP, dport, ACK).frame(), t);
        }
    }
}

#[test]
fn new_flows_are_counted_per_client_zone_once_each() {
    let cfg = zonal(true);
    let mut lab = lab_of(&cfg);
    let zone = |name: &str| {
        let i = lab.snap.compiled.zones.iter().position(|z| z == name);
        config::compiled::ZoneId(u32::try_from(i.expect("zone")).expect("few"))
    };
    let (za, zb) = (zone("za"), zone("zb"));
    let web = 0;
    assert!(lab.snap.services[web].measures_zones);
    assert!(!lab.snap.services[1].measures_zones);
    connections(&mut lab, 1, 80, 30);
    connections(&mut lab, 2, 80, 10);
    // Clients of no zone.
    connections(&mut lab, 3, 80, 5);
    // Another service, without zonal affinity.
    connections(&mut lab, 1, 81, 7);
    let c = &lab.worker.counters;
    assert_eq!(c.zone_flows_of(web, Some(za)), 30);
    assert_eq!(c.zone_flows_of(web, Some(zb)), 10);
    assert_eq!(c.zone_flows_of(web, None), 5);
    assert_eq!(c.zone_flows.get(1).map_or(0, |r| r.iter().sum()), 0);
    // Every packet after the first followed its entry.
    assert_eq!(c.new_flows, 52);
    assert_eq!(c.flow_hits, 3 * 52);
}

#[test]
fn without_zonal_affinity_nothing_is_sized_or_counted() {
    let cfg = zonal(false);
    let mut lab = lab_of(&cfg);
    assert_eq!(lab.snap.rules.zone_counters().1, 0);
    connections(&mut lab, 1, 80, 10);
    assert!(lab.worker.counters.zone_flows.is_empty());
    assert_eq!(lab.worker.counters.new_flows, 10);
}
