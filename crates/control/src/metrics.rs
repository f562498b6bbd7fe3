//! `GET /metrics`: the management core's view of the counters in the
//! Prometheus text exposition format (SPEC M42). Every metric family is
//! written whole — HELP, TYPE, then all its samples — as the format wants.

use std::fmt::Write as _;

use config::Compiled;
use dataplane::{DropReason, WorkerCounters};
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
    let one = |v: u64| [(String::new(), v)];
    let o = &mut out;
    family(
        o,
        "rx_packets_total",
        "counter",
        "Packets received on data ports.",
        one(c.rx_packets),
    );
    family(
        o,
        "rx_bytes_total",
        "counter",
        "Bytes received on data ports.",
        one(c.rx_bytes),
    );
    family(
        o,
        "forwarded_packets_total",
        "counter",
        "Packets sent towards backends.",
        one(c.forwarded),
    );
    family(
        o,
        "to_host_packets_total",
        "counter",
        "Packets handed to the exception port.",
        one(c.to_host),
    );
    family(
        o,
        "from_host_packets_total",
        "counter",
        "Packets from the exception port.",
        one(c.from_host),
    );
    family(
        o,
        "tx_dropped_packets_total",
        "counter",
        "Packets a port did not take.",
        one(c.tx_dropped),
    );
    family(
        o,
        "flows_new_total",
        "counter",
        "Flow entries created.",
        one(c.new_flows),
    );
    family(
        o,
        "flows_stateless_total",
        "counter",
        "Packets of new flows forwarded without an entry because the table was full or contended.",
        one(c.stateless),
    );
    family(
        o,
        "flows_over_budget_total",
        "counter",
        "Packets of new flows forwarded without an entry because their worker had spent its new-entry budget for the second.",
        one(c.over_budget),
    );
    family(
        o,
        "dropped_packets_total",
        "counter",
        "Packets dropped, by reason.",
        DropReason::ALL.map(|r| (format!("reason=\"{}\"", r.name()), c.dropped(r))),
    );
    // Per child rule (M5), one family per figure.
    let children = || compiled.children.iter().zip(&c.children);
    let per_child = |f: fn(&dataplane::ChildCounters) -> u64| {
        children()
            .map(move |(child, cc)| (format!("rule=\"{}\"", child.name), f(cc)))
            .collect::<Vec<_>>()
    };
    family(
        o,
        "rule_packets_total",
        "counter",
        "Packets per child rule (M5).",
        per_child(|cc| cc.packets),
    );
    family(
        o,
        "rule_bytes_total",
        "counter",
        "Bytes per child rule.",
        per_child(|cc| cc.bytes),
    );
    family(
        o,
        "rule_new_flows_total",
        "counter",
        "New flows per child rule.",
        per_child(|cc| cc.new_flows),
    );
    family(
        o,
        "rule_dropped_packets_total",
        "counter",
        "Packets dropped after matching, per child rule.",
        per_child(|cc| cc.drops),
    );
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
