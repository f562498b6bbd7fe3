//! `GET /metrics`: the management core's view of the counters in the
//! Prometheus text exposition format (M42). Every metric family is
//! written whole — HELP, TYPE, then all its samples — as the format wants.

use std::fmt::Write as _;

use config::Compiled;
use dataplane::{ChildCounters, DropReason, WorkerCounters};
use health::{Aggregate, EndpointStatus, State};

/// One metric family: its header, then each (labels, value) sample.
fn family<V: std::fmt::Display>(
    out: &mut String,
    name: &str,
    kind: &str,
    help: &str,
    samples: impl IntoIterator<Item = (String, V)>,
) {
    let _ = writeln!(
        out,
        "# HELP spillway_{name} {help}\n# TYPE spillway_{name} {kind}"
    );
    for (labels, v) in samples {
        if labels.is_empty() {
            let _ = writeln!(out, "spillway_{name} {v}");
        } else {
            let _ = writeln!(out, "spillway_{name}{{{labels}}} {v}");
        }
    }
}

/// 1 healthy, 0 unhealthy, -1 unknown.
fn gauge(s: State) -> i8 {
    match s {
        State::Healthy => 1,
        State::Unhealthy => 0,
        State::Unknown => -1,
    }
}

fn aggregate_gauge(a: Aggregate) -> i8 {
    gauge(match a {
        Aggregate::Healthy => State::Healthy,
        Aggregate::Unhealthy => State::Unhealthy,
        Aggregate::Unknown => State::Unknown,
    })
}

/// The whole exposition.
pub fn render(
    c: &WorkerCounters,
    compiled: &Compiled,
    rules: &[(String, Aggregate)],
    probed: &[EndpointStatus],
    listeners: &[crate::listen::ListenerInfo],
) -> String {
    let mut out = String::new();
    let o = &mut out;
    for (name, help, v) in c.metrics() {
        family(o, name, "counter", help, [(String::new(), v)]);
    }
    family(
        o,
        "dropped_packets_total",
        "counter",
        "Packets dropped, by reason.",
        DropReason::ALL.map(|r| (format!("reason=\"{}\"", r.name()), c.dropped(r))),
    );
    // Per child rule (M5), one family per counter.
    for k in ChildCounters::ALL {
        if let Some((name, help)) = k.metric {
            let samples = compiled.children.iter().zip(&c.children);
            let samples =
                samples.map(|(child, cc)| (format!("rule=\"{}\"", child.name), (k.get)(cc)));
            family(o, name, "counter", help, samples);
        }
    }
    family(
        o,
        "rule_healthy",
        "gauge",
        "Exported rule state (M21): 1 healthy, 0 unhealthy, -1 unknown.",
        rules
            .iter()
            .map(|(rule, a)| (format!("rule=\"{rule}\""), aggregate_gauge(*a))),
    );
    // The management listeners (M50): how their connections ended.
    family(
        o,
        "listener_connections_total",
        "counter",
        "Management listener connections by outcome (answered, refused over max_connections, per_client_limit over max_connections_per_client from one client, denied by allow-list or peer credentials, timed_out, oversized, bad, busy).",
        listeners.iter().flat_map(|l| {
            l.counters
                .values()
                .pairs()
                .map(|(what, v)| (format!("listener=\"{}\",outcome=\"{what}\"", l.name), v))
        }),
    );
    // Health checks (M18): state, transitions and probes per endpoint.
    if !probed.is_empty() {
        let ep = |s: &EndpointStatus| format!("service=\"{}\",endpoint=\"{}\"", s.service, s.addr);
        family(
            o,
            "endpoint_healthy",
            "gauge",
            "Health-check state: 1 healthy, 0 unhealthy, -1 unknown.",
            probed.iter().map(|s| (ep(s), gauge(s.state))),
        );
        family(
            o,
            "health_transitions_total",
            "counter",
            "Health-state transitions (M18).",
            probed.iter().flat_map(|s| {
                [
                    (format!("{},to=\"healthy\"", ep(s)), s.counters.to_healthy),
                    (
                        format!("{},to=\"unhealthy\"", ep(s)),
                        s.counters.to_unhealthy,
                    ),
                ]
            }),
        );
        family(
            o,
            "health_probes_total",
            "counter",
            "Health-check probes by result.",
            probed.iter().flat_map(|s| {
                [
                    (format!("{},result=\"ok\"", ep(s)), s.counters.probes_ok),
                    (
                        format!("{},result=\"failed\"", ep(s)),
                        s.counters.probes_failed,
                    ),
                ]
            }),
        );
    }
    out
}

/// Neighbour resolution (M47): each next hop's state, what the table did,
/// and which backends are ineligible for want of a MAC.
pub fn neighbours(n: &crate::neighbours::Neighbours, snap: &dataplane::Snapshot) -> String {
    let mut out = String::new();
    let o = &mut out;
    family(
        o,
        "neighbour_state",
        "gauge",
        "Next-hop state (M47): 0 incomplete, 1 reachable, 2 stale, 3 failed.",
        n.entries().iter().map(|e| {
            (
                format!("port=\"{}\",address=\"{}\"", e.hop.port, e.hop.addr),
                e.state.gauge(),
            )
        }),
    );
    for (name, help, v) in [
        (
            "neighbours_resolved_total",
            "Next hops that became resolved.",
            n.resolved_total,
        ),
        (
            "neighbours_failed_total",
            "Next hops that stopped answering (failed).",
            n.failed_total,
        ),
        (
            "neighbour_mac_changes_total",
            "New MACs taken for resolved next hops.",
            n.mac_changes,
        ),
        (
            "neighbour_sightings_ignored_total",
            "ARP/NDP sightings of addresses that are no next hop (or on another port).",
            n.ignored,
        ),
    ] {
        family(o, name, "counter", help, [(String::new(), v)]);
    }
    family(
        o,
        "backend_neighbour_resolved",
        "gauge",
        "Whether a backend's next hop has a MAC (M47): 0 means no new flows and its packets dropped.",
        snap.backends
            .iter()
            .filter(|b| b.state != dataplane::BackendState::Removed)
            .map(|b| {
                let svc = snap
                    .compiled
                    .services
                    .get(b.service as usize)
                    .map_or("?", |s| s.name.as_str());
                (
                    format!("service=\"{svc}\",backend=\"{}\"", b.addr),
                    u8::from(b.mac != [0; 6]),
                )
            }),
    );
    out
}

/// Drain (M37) and shutdown (M39): one sample per drained node, zone or
/// region, and whether the node is shutting down.
pub fn drain(drained: &crate::drain::Drained, shutting_down: bool) -> String {
    let mut out = String::new();
    family(
        &mut out,
        "drained",
        "gauge",
        "A node, zone or region drained by the operator (M37): 1 while drained (no sample once undrained).",
        drained
            .iter()
            .map(|(scope, name)| (format!("scope=\"{scope}\",name=\"{name}\""), 1)),
    );
    family(
        &mut out,
        "shutting_down",
        "gauge",
        "1 from the first SIGTERM or SIGINT until exit (M39): VIPs withdrawn, still forwarding.",
        [(String::new(), u8::from(shutting_down))],
    );
    out
}

/// Flow-state sync (M36), one counter family per [`crate::sync::SyncCounters`]
/// field; nothing without `[flow_sync]`.
pub fn sync(counters: Option<crate::sync::SyncCounters>) -> String {
    let mut out = String::new();
    let Some(c) = counters else {
        return out;
    };
    let drops = [
        ("source", c.drop_source),
        ("hmac", c.drop_mac),
        ("malformed", c.drop_malformed),
        ("own", c.drop_own),
    ];
    for (name, help, v) in [
        (
            "flow_sync_datagrams_sent_total",
            "Flow-sync datagrams sent (entries, requests and dumps).",
            c.sent,
        ),
        (
            "flow_sync_entries_sent_total",
            "Flow entries sent to peers.",
            c.entries_sent,
        ),
        (
            "flow_sync_datagrams_received_total",
            "Flow-sync datagrams accepted from peers.",
            c.received,
        ),
        (
            "flow_sync_entries_applied_total",
            "Peers' flow entries inserted into the flow table.",
            c.applied,
        ),
        (
            "flow_sync_entries_refreshed_total",
            "Peers' flow entries that refreshed one learned before (idle timer, state).",
            c.refreshed,
        ),
        (
            "flow_sync_refreshes_total",
            "Refreshes sent: the entries this node carried since the last one, again.",
            c.refreshes,
        ),
        (
            "flow_sync_entries_existing_total",
            "Peers' flow entries not inserted: the flow had a local entry.",
            c.existing,
        ),
        (
            "flow_sync_entries_unresolved_total",
            "Peers' flow entries not inserted: no local backend for them, or the table was full.",
            c.unresolved,
        ),
        (
            "flow_sync_dumps_total",
            "Dump requests of restarted peers answered.",
            c.dumps,
        ),
    ] {
        family(&mut out, name, "counter", help, [(String::new(), v)]);
    }
    family(
        &mut out,
        "flow_sync_dropped_total",
        "counter",
        "Flow-sync datagrams dropped, by reason: source (no configured peer), hmac (another key or altered), malformed, own.",
        drops.iter().map(|(r, v)| (format!("reason=\"{r}\""), *v)),
    );
    out
}

/// BGP announcements (M34, M35): each VIP's state, the changes, and the
/// speaker driver's view; nothing without `[bgp]`.
pub fn bgp(
    desired: Option<&crate::announce::Desired>,
    (announced, withdrawn): (u64, u64),
    speaker: Option<&crate::bird::SpeakerStatus>,
) -> String {
    let mut out = String::new();
    let Some(desired) = desired else {
        return out;
    };
    let o = &mut out;
    family(
        o,
        "bgp_vip_announced",
        "gauge",
        "1 while this node decides to announce the VIP (M35), else 0.",
        desired
            .iter()
            .map(|(vip, why)| (format!("vip=\"{vip}\""), u8::from(why.announced()))),
    );
    family(
        o,
        "bgp_announcements_total",
        "counter",
        "VIPs that went from withdrawn to announced.",
        [(String::new(), announced)],
    );
    family(
        o,
        "bgp_withdrawals_total",
        "counter",
        "VIPs that went from announced to withdrawn.",
        [(String::new(), withdrawn)],
    );
    if let Some(s) = speaker {
        family(
            o,
            "bgp_speaker_up",
            "gauge",
            "1 when the BGP speaker answered last time, 0 when not, -1 before the first try.",
            [(String::new(), s.reachable.map_or(-1, i8::from))],
        );
        family(
            o,
            "bgp_speaker_in_sync",
            "gauge",
            "1 when the speaker runs the latest decision.",
            [(String::new(), u8::from(s.in_sync))],
        );
        family(
            o,
            "bgp_speaker_updates_total",
            "counter",
            "Updates the speaker accepted.",
            [(String::new(), s.updates)],
        );
        family(
            o,
            "bgp_speaker_failures_total",
            "counter",
            "Failed updates or checks (speaker unreachable or refusing; retried).",
            [(String::new(), s.failures)],
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `render` wrote for [`sample`] before the counter families were
    /// derived from the counter tables (since then, M47's neighbour families
    /// and `no_neighbour` drop, M48's too-big counters and M49's tunnel
    /// counters were added).
    const GOLDEN: &str = r#"# HELP spillway_rx_packets_total Packets received on data ports.
# TYPE spillway_rx_packets_total counter
spillway_rx_packets_total 1
# HELP spillway_rx_bytes_total Bytes received on data ports.
# TYPE spillway_rx_bytes_total counter
spillway_rx_bytes_total 2
# HELP spillway_forwarded_packets_total Packets sent towards backends.
# TYPE spillway_forwarded_packets_total counter
spillway_forwarded_packets_total 3
# HELP spillway_to_host_packets_total Packets handed to the exception port.
# TYPE spillway_to_host_packets_total counter
spillway_to_host_packets_total 7
# HELP spillway_from_host_packets_total Packets from the exception port.
# TYPE spillway_from_host_packets_total counter
spillway_from_host_packets_total 16
# HELP spillway_tx_dropped_packets_total Packets a port did not take.
# TYPE spillway_tx_dropped_packets_total counter
spillway_tx_dropped_packets_total 14
# HELP spillway_decap_ipip_packets_total IP-in-IP packets to the node's own addresses decapsulated (M49).
# TYPE spillway_decap_ipip_packets_total counter
spillway_decap_ipip_packets_total 0
# HELP spillway_decap_gre_packets_total GRE packets to the node's own addresses decapsulated (M49).
# TYPE spillway_decap_gre_packets_total counter
spillway_decap_gre_packets_total 0
# HELP spillway_decap_gue_packets_total GUE packets to the node's own addresses decapsulated (M49).
# TYPE spillway_decap_gue_packets_total counter
spillway_decap_gue_packets_total 0
# HELP spillway_decap_geneve_packets_total GENEVE packets to the node's own addresses decapsulated (M49).
# TYPE spillway_decap_geneve_packets_total counter
spillway_decap_geneve_packets_total 0
# HELP spillway_icmp_too_big_total ICMP fragmentation-needed / packet-too-big errors sent for packets too big once encapsulated.
# TYPE spillway_icmp_too_big_total counter
spillway_icmp_too_big_total 0
# HELP spillway_mtu_exceeded_forwarded_total IPv4 packets without DF forwarded although too big for the egress MTU once encapsulated.
# TYPE spillway_mtu_exceeded_forwarded_total counter
spillway_mtu_exceeded_forwarded_total 0
# HELP spillway_gateway_returned_packets_total Packets returned by appliances, checked and sent back to their gateway endpoint (M32).
# TYPE spillway_gateway_returned_packets_total counter
spillway_gateway_returned_packets_total 0
# HELP spillway_flows_new_total Flow entries created.
# TYPE spillway_flows_new_total counter
spillway_flows_new_total 9
# HELP spillway_flows_stateless_total Packets of new flows forwarded without an entry because the table was full or contended.
# TYPE spillway_flows_stateless_total counter
spillway_flows_stateless_total 12
# HELP spillway_flows_over_budget_total Packets of new flows forwarded without an entry because their worker had spent its new-entry budget for the second.
# TYPE spillway_flows_over_budget_total counter
spillway_flows_over_budget_total 13
# HELP spillway_flow_sync_queued_total New flow entries queued for flow-state sync to the peers (M36).
# TYPE spillway_flow_sync_queued_total counter
spillway_flow_sync_queued_total 0
# HELP spillway_flow_sync_queue_overflow_total New flow entries not synced because the queue to the management core was full.
# TYPE spillway_flow_sync_queue_overflow_total counter
spillway_flow_sync_queue_overflow_total 0
# HELP spillway_neighbour_sightings_total ARP/NDP sightings passed to neighbour resolution.
# TYPE spillway_neighbour_sightings_total counter
spillway_neighbour_sightings_total 0
# HELP spillway_neighbour_sightings_lost_total ARP/NDP sightings lost to a full queue.
# TYPE spillway_neighbour_sightings_lost_total counter
spillway_neighbour_sightings_lost_total 0
# HELP spillway_neighbour_frames_sent_total ARP/NDP requests and announcements sent.
# TYPE spillway_neighbour_frames_sent_total counter
spillway_neighbour_frames_sent_total 0
# HELP spillway_neighbour_frames_failed_total ARP/NDP requests and announcements that could not be sent.
# TYPE spillway_neighbour_frames_failed_total counter
spillway_neighbour_frames_failed_total 0
# HELP spillway_dropped_packets_total Packets dropped, by reason.
# TYPE spillway_dropped_packets_total counter
spillway_dropped_packets_total{reason="malformed"} 17
spillway_dropped_packets_total{reason="no_rule"} 18
spillway_dropped_packets_total{reason="not_ours"} 19
spillway_dropped_packets_total{reason="no_backend"} 20
spillway_dropped_packets_total{reason="icmp_mismatch"} 21
spillway_dropped_packets_total{reason="gateway_vip"} 22
spillway_dropped_packets_total{reason="encap_failed"} 23
spillway_dropped_packets_total{reason="no_tunnel_source"} 24
spillway_dropped_packets_total{reason="fragment_no_rule"} 25
spillway_dropped_packets_total{reason="bad_address"} 26
spillway_dropped_packets_total{reason="tunnel_source_denied"} 27
spillway_dropped_packets_total{reason="tunnel_malformed"} 28
spillway_dropped_packets_total{reason="tunnel_unsupported"} 29
spillway_dropped_packets_total{reason="tunnel_not_vip"} 30
spillway_dropped_packets_total{reason="tunnel_nested"} 31
spillway_dropped_packets_total{reason="tunnel_fragment"} 32
spillway_dropped_packets_total{reason="too_big"} 33
spillway_dropped_packets_total{reason="too_big_rate_limited"} 34
spillway_dropped_packets_total{reason="no_neighbour"} 35
spillway_dropped_packets_total{reason="tunnel_loop"} 36
spillway_dropped_packets_total{reason="gateway_no_rule"} 37
spillway_dropped_packets_total{reason="gateway_unknown_source"} 38
spillway_dropped_packets_total{reason="gateway_malformed"} 39
spillway_dropped_packets_total{reason="gateway_options_missing"} 40
spillway_dropped_packets_total{reason="gateway_endpoint_unknown"} 41
spillway_dropped_packets_total{reason="gateway_no_flow"} 42
spillway_dropped_packets_total{reason="gateway_cookie_mismatch"} 43
spillway_dropped_packets_total{reason="gateway_wrong_appliance"} 44
spillway_dropped_packets_total{reason="gateway_endpoint_unresolved"} 45
# HELP spillway_rule_packets_total Packets per child rule (M5).
# TYPE spillway_rule_packets_total counter
spillway_rule_packets_total{rule="web-ag0"} 46
# HELP spillway_rule_bytes_total Bytes per child rule.
# TYPE spillway_rule_bytes_total counter
spillway_rule_bytes_total{rule="web-ag0"} 47
# HELP spillway_rule_new_flows_total New flows per child rule.
# TYPE spillway_rule_new_flows_total counter
spillway_rule_new_flows_total{rule="web-ag0"} 48
# HELP spillway_rule_dropped_packets_total Packets dropped after matching, per child rule.
# TYPE spillway_rule_dropped_packets_total counter
spillway_rule_dropped_packets_total{rule="web-ag0"} 49
"#;

    #[test]
    fn each_family_is_written_whole_before_the_next() {
        let mut out = String::new();
        family(
            &mut out,
            "a_total",
            "counter",
            "A.",
            [(String::new(), 1u64)],
        );
        family(
            &mut out,
            "b_total",
            "counter",
            "B.",
            [("x=\"1\"".to_owned(), 2u64), ("x=\"2\"".to_owned(), 3)],
        );
        assert_eq!(
            out,
            "# HELP spillway_a_total A.\n# TYPE spillway_a_total counter\nspillway_a_total 1\n\
             # HELP spillway_b_total B.\n# TYPE spillway_b_total counter\n\
             spillway_b_total{x=\"1\"} 2\nspillway_b_total{x=\"2\"} 3\n"
        );
    }
    /// Counters with every value different, for a one-rule configuration.
    fn sample() -> (WorkerCounters, Compiled) {
        let text = "[node]\nname = \"n\"\nregion = \"r\"\nzone = \"z\"\n\n\
            [[backend_services]]\nname = \"s\"\ndelivery = \"ipip\"\n\
            groups = [{ name = \"g\", region = \"r\", zone = \"z\", endpoints = [{ address = \"10.1.0.1\" }] }]\n\n\
            [[forwarding_rules]]\nname = \"web\"\nvips = [\"10.0.0.1\"]\nprotocol = \"TCP\"\nports = 80\nbackend_service = \"s\"\n";
        let compiled = match config::load_str("t.toml", text, &config::Env::default()) {
            Ok(l) => l.compiled,
            Err(e) => panic!("{e}"),
        };
        let mut c = WorkerCounters::new(compiled.children.len());
        let mut n = 0;
        let mut next = || {
            n += 1;
            n
        };
        for v in [
            &mut c.rx_packets,
            &mut c.rx_bytes,
            &mut c.forwarded,
            &mut c.arp_replies,
            &mut c.nd_replies,
            &mut c.no_backend_resets,
            &mut c.to_host,
            &mut c.flow_hits,
            &mut c.new_flows,
            &mut c.flow_races,
            &mut c.flows_rescheduled,
            &mut c.stateless,
            &mut c.over_budget,
            &mut c.tx_dropped,
            &mut c.host_dropped,
            &mut c.from_host,
        ] {
            *v = next();
        }
        for d in &mut c.drops {
            *d = next();
        }
        for cc in &mut c.children {
            cc.packets = next();
            cc.bytes = next();
            cc.new_flows = next();
            cc.drops = next();
        }
        (c, compiled)
    }

    /// M5: a rule with two VIPs is counted as two child rules, both
    /// exported.
    #[test]
    fn both_child_rules_of_a_two_vip_rule_are_exported() {
        let text = "[node]\nname = \"n\"\nregion = \"r\"\nzone = \"z\"\navailability_group = 1\n\n\
            [[backend_services]]\nname = \"s\"\ndelivery = \"ipip\"\n\
            groups = [{ name = \"g\", region = \"r\", zone = \"z\", endpoints = [{ address = \"10.1.0.1\" }] }]\n\n\
            [[forwarding_rules]]\nname = \"web\"\nvips = [\"10.0.0.1\", \"10.0.0.2\"]\nprotocol = \"TCP\"\nports = 80\nbackend_service = \"s\"\n";
        let compiled = match config::load_str("t.toml", text, &config::Env::default()) {
            Ok(l) => l.compiled,
            Err(e) => panic!("{e}"),
        };
        let mut c = WorkerCounters::new(compiled.children.len());
        for (i, cc) in c.children.iter_mut().enumerate() {
            cc.packets = 10 + i as u64;
        }
        let out = render(&c, &compiled, &[], &[], &[]);
        for line in [
            "spillway_rule_packets_total{rule=\"web-ag0\"} 10\n",
            "spillway_rule_packets_total{rule=\"web-ag1\"} 11\n",
            "spillway_rule_new_flows_total{rule=\"web-ag1\"} 0\n",
        ] {
            assert!(out.contains(line), "{line}{out}");
        }
    }

    #[test]
    fn drain_and_shutdown_are_exported() {
        use crate::drain::{Drained, Scope};
        let mut d = Drained::new();
        d.set(Scope::Zone, "eu1-a", true);
        d.set(Scope::Node, "lb1", true);
        let out = drain(&d, true);
        assert!(
            out.contains("spillway_drained{scope=\"node\",name=\"lb1\"} 1\n")
                && out.contains("spillway_drained{scope=\"zone\",name=\"eu1-a\"} 1\n")
                && out.contains("spillway_shutting_down 1\n"),
            "{out}"
        );
        let out = drain(&Drained::new(), false);
        assert!(
            !out.contains("spillway_drained{") && out.contains("spillway_shutting_down 0\n"),
            "{out}"
        );
    }

    #[test]
    fn sync_families_count_each_drop_reason() {
        assert_eq!(sync(None), "", "nothing without [flow_sync]");
        let c = crate::sync::SyncCounters {
            applied: 7,
            drop_source: 2,
            drop_mac: 3,
            ..Default::default()
        };
        let m = sync(Some(c));
        for line in [
            "spillway_flow_sync_entries_applied_total 7",
            "spillway_flow_sync_dropped_total{reason=\"source\"} 2",
            "spillway_flow_sync_dropped_total{reason=\"hmac\"} 3",
            "spillway_flow_sync_dropped_total{reason=\"malformed\"} 0",
        ] {
            assert!(m.lines().any(|l| l == line), "{line} in\n{m}");
        }
    }

    #[test]
    fn counter_families_are_unchanged() {
        let (c, compiled) = sample();
        let out = render(&c, &compiled, &[], &[], &[]);
        let counters = out
            .split("# HELP spillway_rule_healthy")
            .next()
            .unwrap_or("");
        assert_eq!(counters, GOLDEN);
    }

    #[test]
    fn bgp_families_show_each_vip_and_the_speaker() {
        use crate::announce::Why;
        assert_eq!(bgp(None, (0, 0), None), "", "nothing without [bgp]");
        let d = vec![
            ("198.51.100.1".parse().unwrap(), Why::Healthy),
            (
                "198.51.100.2".parse().unwrap(),
                Why::NotHealthy(Aggregate::Unhealthy),
            ),
        ];
        let sp = crate::bird::SpeakerStatus {
            reachable: Some(false),
            failures: 3,
            ..Default::default()
        };
        let m = bgp(Some(&d), (4, 1), Some(&sp));
        for line in [
            "spillway_bgp_vip_announced{vip=\"198.51.100.1\"} 1",
            "spillway_bgp_vip_announced{vip=\"198.51.100.2\"} 0",
            "spillway_bgp_announcements_total 4",
            "spillway_bgp_withdrawals_total 1",
            "spillway_bgp_speaker_up 0",
            "spillway_bgp_speaker_in_sync 0",
            "spillway_bgp_speaker_failures_total 3",
        ] {
            assert!(m.lines().any(|l| l == line), "{line} in\n{m}");
        }
    }
}
