//! `GET /metrics`: the management core's view of the counters as
//! OpenMetrics text (M42). Each scrape gathers its families into an
//! [`Exposition`] from state the shell and the core hold (nothing here is
//! updated per packet), and the admin floor's writer
//! ([`admin::openmetrics`]) writes them: the format's rules (family
//! headers, `_total` counters, `# EOF`) are kept there, for every
//! `/metrics` of the project.

use std::time::SystemTime;

pub use admin::openmetrics::{Exposition, Labels, Value};
use config::Compiled;
use dataplane::{BURST, ChildCounters, DropReason, WorkerCounters};
use health::{Aggregate, EndpointStatus, State};
use locality::{AggregateHealth, Eligibility, Plan};

fn label(k: &'static str, v: impl ToString) -> Labels {
    vec![(k, v.to_string())]
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

fn plan_health(a: AggregateHealth) -> i8 {
    gauge(match a {
        AggregateHealth::Healthy => State::Healthy,
        AggregateHealth::Unhealthy => State::Unhealthy,
        AggregateHealth::Unknown => State::Unknown,
    })
}

/// The data plane's counters summed over workers: every scalar counter,
/// drops by reason, and per child rule (M5).
pub fn counters(x: &mut Exposition, c: &WorkerCounters, compiled: &Compiled) {
    for (name, help, v) in c.metrics() {
        x.one_counter(name, help, v);
    }
    x.counter(
        "dropped_packets_total",
        "Packets dropped, by reason.",
        DropReason::ALL.map(|r| (label("reason", r.name()), c.dropped(r))),
    );
    for k in ChildCounters::ALL {
        if let Some((name, help)) = k.metric {
            let samples = compiled.children.iter().zip(&c.children);
            x.counter(
                name,
                help,
                samples.map(|(child, cc)| (label("rule", &child.name), (k.get)(cc))),
            );
        }
    }
    // Only the reasons a child rule has seen: a sample per rule and reason
    // would be thousands of zeros on a large configuration.
    x.counter(
        "rule_drops_by_reason_total",
        "A child rule's drops by reason (no_backend also when answered with a reset, too_big also when answered with ICMP); reasons not seen have no sample.",
        compiled
            .children
            .iter()
            .zip(&c.children)
            .flat_map(|(child, cc)| {
                DropReason::ALL.into_iter().filter_map(|r| {
                    let n = cc.drop_reasons[r as usize];
                    (n > 0).then(|| {
                        let mut l = label("rule", &child.name);
                        l.push(("reason", r.name().to_owned()));
                        (l, n)
                    })
                })
            }),
    );
}

/// Per worker (label `worker`, its index): each counter of the traffic,
/// flow and loop tables, drops by reason, and two ratios of the loop's
/// counters since start (use `rate()` of the counters for recent ones).
pub fn workers(x: &mut Exposition, workers: &[WorkerCounters]) {
    let w = |i: usize| label("worker", i);
    for k in WorkerCounters::TRAFFIC
        .iter()
        .chain(WorkerCounters::FLOWS)
        .chain(WorkerCounters::LOOP)
    {
        if let Some((name, help)) = k.metric {
            x.counter(
                &format!("worker_{name}"),
                help,
                workers.iter().enumerate().map(|(i, c)| (w(i), (k.get)(c))),
            );
        }
    }
    x.counter(
        "worker_dropped_packets_total",
        "Packets dropped, by worker and reason.",
        workers.iter().enumerate().flat_map(|(i, c)| {
            DropReason::ALL.map(|r| {
                let mut l = w(i);
                l.push(("reason", r.name().to_owned()));
                (l, c.dropped(r))
            })
        }),
    );
    x.gauge(
        "worker_busy_cycles_per_packet",
        "TSC cycles per packet received, over the passes that received (since start).",
        workers.iter().enumerate().map(|(i, c)| {
            let packets = c.rx_packets + c.from_host;
            (w(i), c.busy_cycles as f64 / packets as f64)
        }),
    );
    x.gauge(
        "worker_burst_fill_ratio",
        "Packets per receive burst that returned any, as a fraction of the burst size (since start).",
        workers.iter().enumerate().map(|(i, c)| {
            let packets = c.rx_packets + c.from_host;
            (w(i), packets as f64 / (c.rx_bursts as f64 * BURST as f64))
        }),
    );
}

/// Exported rule states (M21).
pub fn rules(x: &mut Exposition, rules: &[(String, Aggregate)]) {
    x.gauge(
        "rule_healthy",
        "Exported state of each rule and served child rule (M21): 1 healthy, 0 unhealthy, -1 unknown.",
        rules
            .iter()
            .map(|(rule, a)| (label("rule", rule), aggregate_gauge(*a))),
    );
}

/// Transitions of derived and consumed health states (M20, M21): a
/// composite's sources, composites, rules' exported states, followed
/// remote rules.
pub fn transitions(x: &mut Exposition, t: &crate::transitions::Transitions) {
    x.counter(
        "state_transitions_total",
        "Transitions of composite sources (in the node's region), composites, rules' and child rules' exported states and followed remote rules, by kind, name, from and to.",
        t.counts().map(|((kind, name, from, to), v)| {
            (
                vec![
                    ("kind", kind.as_str().to_owned()),
                    ("name", name.clone()),
                    ("from", (*from).to_owned()),
                    ("to", (*to).to_owned()),
                ],
                v,
            )
        }),
    );
}

/// The management listeners (M50): how their connections ended.
pub fn listeners(x: &mut Exposition, listeners: &[crate::listen::ListenerInfo]) {
    x.counter(
        "listener_connections_total",
        "Management listener connections by outcome (answered, refused over max_connections, per_client_limit over max_connections_per_client from one client, denied by allow-list or peer credentials, timed_out, oversized, bad, busy).",
        listeners.iter().flat_map(|l| {
            l.counters.values().pairs().map(|(what, v)| {
                let mut labels = label("listener", l.name);
                labels.push(("outcome", what.to_owned()));
                (labels, v)
            })
        }),
    );
}

/// Health checks (M18): state, transitions and probes per endpoint.
pub fn health(x: &mut Exposition, probed: &[EndpointStatus]) {
    if probed.is_empty() {
        return;
    }
    let ep = |s: &EndpointStatus, more: Option<(&'static str, &str)>| {
        let mut l = vec![
            ("service", s.service.to_string()),
            ("endpoint", s.addr.to_string()),
        ];
        if let Some(v) = s.vip {
            l.push(("vip", v.to_string()));
        }
        if let Some((k, v)) = more {
            l.push((k, v.to_owned()));
        }
        l
    };
    x.gauge(
        "endpoint_healthy",
        "Health-check state: 1 healthy, 0 unhealthy, -1 unknown.",
        probed.iter().map(|s| (ep(s, None), gauge(s.state))),
    );
    x.counter(
        "health_transitions_total",
        "Health-state transitions (M18).",
        probed.iter().flat_map(|s| {
            [
                (ep(s, Some(("to", "healthy"))), s.counters.to_healthy),
                (ep(s, Some(("to", "unhealthy"))), s.counters.to_unhealthy),
            ]
        }),
    );
    x.counter(
        "health_probes_total",
        "Health-check probes by result.",
        probed.iter().flat_map(|s| {
            [
                (ep(s, Some(("result", "ok"))), s.counters.probes_ok),
                (ep(s, Some(("result", "failed"))), s.counters.probes_failed),
            ]
        }),
    );
}

/// What the services section reads.
pub struct Services<'a> {
    /// The management core's configuration (its plans are indexed by its
    /// services).
    pub compiled: &'a Compiled,
    /// Each service's latest locality plan.
    pub plans: &'a [Option<Plan>],
    /// The live snapshot (backend slots, eligible slots, child rules).
    pub snap: &'a dataplane::Snapshot,
    /// The counters summed over workers (indexed like the snapshot).
    pub counters: &'a WorkerCounters,
    /// Health-check statuses (reported weights).
    pub probed: &'a [EndpointStatus],
    /// An endpoint's backend slot: (service, identity) to slot.
    pub slot_of: &'a dyn Fn(&str, &str) -> Option<u32>,
}

/// A backend slot's state as a gauge: 0 active, 1 unhealthy, 2 draining,
/// 3 removed.
fn slot_state(s: dataplane::BackendState) -> i8 {
    match s {
        dataplane::BackendState::Active => 0,
        dataplane::BackendState::Unhealthy { .. } => 1,
        dataplane::BackendState::Draining { .. } => 2,
        dataplane::BackendState::Removed => 3,
    }
}

/// Per service, region, group and endpoint (M42): traffic, health,
/// eligibility, weights, measured rate against capacity, and where new
/// connections go (spillover). The families come in this order: each
/// section below adds its own.
pub fn services(x: &mut Exposition, s: &Services<'_>) {
    service_traffic(x, s);
    service_zones(x, s);
    service_plans(x, s);
    service_regions(x, s);
    let slots = endpoint_slots(s);
    endpoint_families(x, s, &slots);
    group_families(x, s, &slots);
}

/// `v[i]`, or `?` for an index past the list.
fn name_of(v: &[String], i: usize) -> String {
    v.get(i).cloned().unwrap_or_else(|| "?".into())
}

/// Each service with its plan, for the services that have one.
fn planned<'a>(
    s: &'a Services<'_>,
) -> impl Iterator<Item = (&'a config::compiled::Service, &'a Plan)> {
    s.compiled
        .services
        .iter()
        .zip(s.plans)
        .filter_map(|(svc, p)| p.as_ref().map(|p| (svc, p)))
}

/// Traffic per service: the sum of its child rules' counters (the live
/// snapshot's children, which the counters are indexed by, matched to
/// the management core's services by name).
fn service_traffic(x: &mut Exposition, s: &Services<'_>) {
    let c = &s.compiled;
    let snap = s.snap;
    let per_service = |get: fn(&ChildCounters) -> u64| {
        c.services.iter().map(move |svc| {
            let n: u64 = snap
                .compiled
                .children
                .iter()
                .zip(&s.counters.children)
                .filter(|(child, _)| {
                    snap.compiled
                        .rules
                        .get(child.rule.index())
                        .and_then(|r| snap.compiled.services.get(r.service.index()))
                        .is_some_and(|rs| rs.name == svc.name)
                })
                .map(|(_, cc)| get(cc))
                .sum();
            (label("service", &svc.name), n)
        })
    };
    x.counter(
        "service_packets_total",
        "Packets to the service's rules (its child rules' sum).",
        per_service(|cc| cc.packets),
    );
    x.counter(
        "service_bytes_total",
        "Bytes to the service's rules.",
        per_service(|cc| cc.bytes),
    );
    x.counter(
        "service_new_flows_total",
        "New flows to the service's rules.",
        per_service(|cc| cc.new_flows),
    );
}

/// New flows per service with zonal affinity and client zone (M27), as
/// the data plane counts them (indexed like the live snapshot's
/// configuration); no samples without client zones.
fn service_zones(x: &mut Exposition, s: &Services<'_>) {
    let c = &s.snap.compiled;
    let mut zones: Vec<config::compiled::ZoneId> = c.client_zones.iter().map(|&(_, z)| z).collect();
    zones.sort_unstable();
    zones.dedup();
    let zones = &zones;
    x.counter(
        "service_zone_new_flows_total",
        "New flows of a service with zonal affinity per client zone (M27): the demand each zone's share is sized from.",
        c.services
            .iter()
            .enumerate()
            .filter(|(_, svc)| c.measures_client_zones(svc))
            .flat_map(move |(i, svc)| {
                zones.iter().map(move |&z| {
                    let mut l = label("service", &svc.name);
                    l.push(("zone", name_of(&c.zones, z.index())));
                    (l, s.counters.zone_flows_of(i, Some(z)))
                })
            }),
    );
}

/// Each planned service's plan as a whole: health, eligibility tier,
/// degraded, overloaded, spillover.
fn service_plans(x: &mut Exposition, s: &Services<'_>) {
    x.gauge(
        "service_healthy",
        "The service's aggregated health over all its endpoints (M19): 1 healthy, 0 unhealthy, -1 unknown.",
        planned(s).map(|(svc, p)| (label("service", &svc.name), plan_health(p.health))),
    );
    x.gauge(
        "service_eligibility",
        "Which endpoints take new connections: 1 for the current one of healthy, unknown (no verdict yet), fail_open (all unhealthy, all used), nothing.",
        planned(s).flat_map(|(svc, p)| {
            [
                (Eligibility::Healthy, "healthy"),
                (Eligibility::Unknown, "unknown"),
                (Eligibility::FailOpen, "fail_open"),
                (Eligibility::Nothing, "nothing"),
            ]
            .map(|(e, name)| {
                let mut l = label("service", &svc.name);
                l.push(("eligibility", name.to_owned()));
                (l, p.eligibility == e)
            })
        }),
    );
    x.gauge(
        "service_degraded",
        "1 when every region is unhealthy and the healthy endpoints left are used anyway.",
        planned(s).map(|(svc, p)| (label("service", &svc.name), p.degraded)),
    );
    x.gauge(
        "service_overloaded",
        "1 when every candidate region is at capacity (new connections shared by capacity).",
        planned(s).map(|(svc, p)| (label("service", &svc.name), p.overloaded)),
    );
    x.gauge(
        "service_last_resort",
        "1 when no configured endpoint of the service is eligible and its new connections go to endpoints still draining (no_backend_fallback = draining, M14).",
        s.snap
            .compiled
            .services
            .iter()
            .zip(&s.snap.services)
            .map(|(svc, p)| (label("service", &svc.name), p.last_resort)),
    );
    x.gauge(
        "service_spillover_ratio",
        "Fraction of new connections sent past the service's nearest region (spillover and failover, M24-M26).",
        planned(s).filter(|(_, p)| p.is_serving()).map(|(svc, p)| {
            let nearest = p.status.first().map_or(0.0, |r| r.fraction);
            (label("service", &svc.name), (1.0 - nearest).max(0.0))
        }),
    );
}

/// Each planned service's regions as its plan reports them: health,
/// endpoint counts, rate, capacity, utilization, share of new
/// connections.
fn service_regions(x: &mut Exposition, s: &Services<'_>) {
    let c = &s.compiled;
    let region = |svc: &config::compiled::Service, r: &locality::RegionStatus| {
        vec![
            ("service", svc.name.clone()),
            ("region", name_of(&c.regions, r.region.index())),
        ]
    };
    let regions = || planned(s).flat_map(move |(svc, p)| p.status.iter().map(move |r| (svc, r)));
    x.gauge(
        "service_region_healthy",
        "The service's aggregated health in the region: 1 healthy, 0 unhealthy, -1 unknown.",
        regions().map(|(svc, r)| (region(svc, r), plan_health(r.health))),
    );
    x.gauge(
        "service_region_endpoints",
        "The service's endpoints in the region: total, healthy, unknown (no verdict), eligible (for new connections).",
        regions().flat_map(|(svc, r)| {
            [
                ("total", r.endpoints),
                ("healthy", r.healthy),
                ("unknown", r.unknown),
                ("eligible", r.eligible),
            ]
            .map(|(k, v)| {
                let mut l = region(svc, r);
                l.push(("state", k.to_owned()));
                (l, v)
            })
        }),
    );
    x.gauge(
        "service_region_rate_pps",
        "Measured (smoothed) packets per second to the service's endpoints in the region.",
        regions().map(|(svc, r)| (region(svc, r), r.load)),
    );
    x.gauge(
        "service_region_capacity_pps",
        "Capacity in packets per second available to this node in the region (no sample while unlimited).",
        regions().map(|(svc, r)| (region(svc, r), r.capacity)),
    );
    x.gauge(
        "service_region_utilization_ratio",
        "RATE: measured rate / capacity; UTILIZATION: the mean utilization its endpoints report.",
        regions().filter_map(|(svc, r)| r.utilization.map(|u| (region(svc, r), u))),
    );
    x.gauge(
        "service_region_utilization_known",
        "UTILIZATION services: 1 while the region's eligible endpoints report a utilization, 0 while none does (unknown: no utilization limit applies; only an HTTP(S) health check can carry one).",
        regions()
            .filter(|(svc, _)| svc.balancing.mode == config::schema::BalancingMode::Utilization)
            .map(|(svc, r)| (region(svc, r), r.utilization.is_some())),
    );
    x.gauge(
        "service_region_new_flows_ratio",
        "The region's share of the service's new connections.",
        regions().map(|(svc, r)| (region(svc, r), r.fraction)),
    );
}

/// A group's labels: service, group, region, zone.
fn group_labels(c: &Compiled, g: &config::compiled::Group) -> Labels {
    let svc = c
        .services
        .get(g.service.index())
        .map_or("?", |s| s.name.as_str());
    vec![
        ("service", svc.to_owned()),
        ("group", g.name.clone()),
        ("region", name_of(&c.regions, g.region.index())),
        ("zone", name_of(&c.zones, g.zone.index())),
    ]
}

/// Each endpoint's backend slot (indexed like the management core's
/// endpoints), looked up once for the endpoint and group families.
fn endpoint_slots(s: &Services<'_>) -> Vec<Option<u32>> {
    let c = &s.compiled;
    c.endpoints
        .iter()
        .map(|e| {
            let svc = c.services.get(e.service.index())?;
            (s.slot_of)(&svc.name, &e.identity)
        })
        .collect()
}

/// Per endpoint: its backend slot's traffic, its weight, whether it
/// takes new connections, and its slot's state.
fn endpoint_families(x: &mut Exposition, s: &Services<'_>, slots: &[Option<u32>]) {
    let c = &s.compiled;
    let snap = s.snap;
    let weights: std::collections::HashMap<usize, u16> = s
        .probed
        .iter()
        .filter_map(|p| p.weight.map(|w| (p.endpoint.index(), w)))
        .collect();
    let eligible: std::collections::HashSet<(String, u32)> = snap
        .compiled
        .services
        .iter()
        .zip(&snap.services)
        .flat_map(|(svc, plan)| {
            plan.eligible_slots()
                .into_iter()
                .map(|slot| (svc.name.clone(), slot))
        })
        .collect();
    let backends = &s.counters.backends;
    let endpoints = || {
        c.endpoints.iter().enumerate().filter_map(|(i, e)| {
            let g = c.groups.get(e.group.index())?;
            let svc = c.services.get(e.service.index())?;
            let mut l = group_labels(c, g);
            l.push(("endpoint", e.identity.clone()));
            Some((i, e, svc, slots.get(i).copied().flatten(), l))
        })
    };
    type Field = fn(&dataplane::counters::BackendCounters) -> u64;
    let families: [(&str, &str, Field); 3] = [
        (
            "endpoint_packets_total",
            "Packets forwarded to the endpoint (its backend slot).",
            |b| b.packets,
        ),
        (
            "endpoint_bytes_total",
            "Bytes forwarded to the endpoint, as sent (outer headers included).",
            |b| b.bytes,
        ),
        (
            "endpoint_new_flows_total",
            "Flow entries created for connections to the endpoint.",
            |b| b.new_flows,
        ),
    ];
    for (name, help, field) in families {
        x.counter(
            name,
            help,
            endpoints().map(|(_, _, _, slot, l)| {
                let n = slot.and_then(|i| backends.get(i as usize)).map(field);
                (l, n.unwrap_or(0))
            }),
        );
    }
    x.gauge(
        "endpoint_weight",
        "The endpoint's weight: the one its health check reports, else the configured one.",
        endpoints()
            .map(|(i, e, _, _, l)| (l, u32::from(weights.get(&i).copied().unwrap_or(e.weight)))),
    );
    x.gauge(
        "endpoint_eligible",
        "1 when the endpoint is in its service's Maglev tables (takes new connections).",
        endpoints().map(|(_, _, svc, slot, l)| {
            let on = slot.is_some_and(|i| eligible.contains(&(svc.name.clone(), i)));
            (l, on)
        }),
    );
    x.gauge(
        "endpoint_state",
        "The endpoint's backend slot: 0 active, 1 unhealthy, 2 draining (removed, keeping its flows), 3 removed.",
        endpoints().filter_map(|(_, _, _, slot, l)| {
            let b = snap.backends.get(slot? as usize)?;
            Some((l, slot_state(b.state)))
        }),
    );
}

/// Per group: its endpoints' packets together, and its configured
/// capacity_scaler and max_rate.
fn group_families(x: &mut Exposition, s: &Services<'_>, slots: &[Option<u32>]) {
    let c = &s.compiled;
    let backends = &s.counters.backends;
    x.counter(
        "group_packets_total",
        "Packets forwarded to the group's endpoints.",
        c.groups.iter().map(|g| {
            let n: u64 = slots
                .get(g.endpoints.start as usize..g.endpoints.end as usize)
                .unwrap_or_default()
                .iter()
                .filter_map(|slot| backends.get((*slot)? as usize).map(|b| b.packets))
                .sum();
            (group_labels(c, g), n)
        }),
    );
    x.gauge(
        "group_capacity_scaler",
        "The group's configured capacity_scaler (a drain does not change it: see spillway_drained).",
        c.groups
            .iter()
            .map(|g| (group_labels(c, g), g.capacity_scaler)),
    );
    x.gauge(
        "group_max_rate_pps",
        "RATE: the group's configured max_rate (no sample without one).",
        c.groups
            .iter()
            .filter_map(|g| g.max_rate.map(|r| (group_labels(c, g), r))),
    );
}

/// The flow table's use (M15): live entries counted by the last full
/// ageing pass, capacity, and entries aged out.
pub fn flow_table(x: &mut Exposition, capacity: usize, pass: Option<(usize, usize)>, expired: u64) {
    x.one_gauge(
        "flow_table_capacity",
        "Entries the flow table holds at most.",
        capacity as u64,
    );
    if let Some((live, half_open)) = pass {
        x.one_gauge(
            "flow_table_entries",
            "Live flow entries, as counted by the last full ageing pass.",
            live as u64,
        );
        x.one_gauge(
            "flow_table_half_open_entries",
            "Half-open TCP entries among them.",
            half_open as u64,
        );
        x.one_gauge(
            "flow_table_occupancy_ratio",
            "Live entries / capacity, at the last full ageing pass.",
            live as f64 / capacity.max(1) as f64,
        );
    }
    x.one_counter(
        "flows_expired_total",
        "Flow entries the ageing removed (idle past their timeout).",
        expired,
    );
}

/// The configuration: the live generation, reloads by result, and the
/// last one's outcome and time.
pub struct ConfigState<'a> {
    /// The live snapshot's generation.
    pub generation: u32,
    /// Reloads accepted and refused.
    pub reloads: (u64, u64),
    /// File changes the watch did not apply (M38; also refused reloads).
    pub watch_refused: u64,
    /// A reload's file is being read, validated and compiled off the loop.
    pub reading: bool,
    /// The last refusal's reason, while the last reload was refused.
    pub last_error: Option<&'a str>,
    /// When the last reload was decided.
    pub last_reload: Option<SystemTime>,
}

/// [`ConfigState`]'s families.
pub fn config(x: &mut Exposition, s: &ConfigState<'_>) {
    x.one_gauge(
        "config_generation",
        "Generation of the live snapshot (each published configuration or state change adds one).",
        s.generation,
    );
    x.counter(
        "config_reloads_total",
        "Configuration reloads by result: ok (live, or waiting for its tables), rejected (the running configuration stays).",
        [
            (label("result", "ok"), s.reloads.0),
            (label("result", "rejected"), s.reloads.1),
        ],
    );
    x.one_gauge(
        "config_reload_reading",
        "1 while a reload's file is being read, validated and compiled (off the management loop, which goes on answering).",
        s.reading,
    );
    x.one_counter(
        "config_watch_refused_total",
        "File changes the file watch did not apply: the running file cut short, or a change removing a section or setting it has (run `spillway reload` to apply one); also counted as rejected reloads.",
        s.watch_refused,
    );
    x.one_gauge(
        "config_last_reload_success",
        "1 when the last reload was accepted (or none was tried), 0 when it was rejected.",
        s.last_error.is_none(),
    );
    if let Some(e) = s.last_error {
        // The first line only, bounded: a label, not a log.
        let first: String = e.lines().next().unwrap_or("").chars().take(200).collect();
        x.gauge(
            "config_last_reload_error",
            "The last rejected reload's first error line (while the last reload was rejected).",
            [(label("error", first), 1u8)],
        );
    }
    if let Some(t) = s.last_reload {
        let secs = t
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        x.one_gauge(
            "config_last_reload_timestamp_seconds",
            "When the last reload was accepted or rejected (Unix time).",
            secs,
        );
    }
}

/// VRRP (`[[vrrp]]`): each group's state and priority, what it sent and
/// took, and the advertisements refused by reason.
pub fn vrrp(x: &mut Exposition, v: &crate::vrrp::Vrrp) {
    if v.groups().is_empty() {
        return;
    }
    let labels = |g: &crate::vrrp::Group| {
        vec![
            ("vrid", g.spec().vrid.to_string()),
            (
                "family",
                if g.spec().src.is_ipv4() {
                    "ipv4"
                } else {
                    "ipv6"
                }
                .to_owned(),
            ),
        ]
    };
    x.gauge(
        "vrrp_state",
        "VRRP group state: 0 initialize, 1 backup, 2 master.",
        v.groups().iter().map(|g| (labels(g), g.state().gauge())),
    );
    x.gauge(
        "vrrp_priority",
        "The priority the VRRP group advertises now (1 while the node is drained or its rules unhealthy).",
        v.groups().iter().map(|g| (labels(g), g.priority())),
    );
    x.counter(
        "vrrp_adverts_sent_total",
        "VRRP advertisements sent.",
        v.groups().iter().map(|g| (labels(g), g.counts.sent)),
    );
    x.counter(
        "vrrp_adverts_received_total",
        "VRRP advertisements taken by the group.",
        v.groups().iter().map(|g| (labels(g), g.counts.received)),
    );
    x.counter(
        "vrrp_became_master_total",
        "Times the VRRP group became master.",
        v.groups()
            .iter()
            .map(|g| (labels(g), g.counts.became_master)),
    );
    x.counter(
        "vrrp_adverts_addresses_differ_total",
        "VRRP advertisements taken that named other VIPs besides some of the group's (configurations out of step).",
        v.groups().iter().map(|g| (labels(g), g.counts.addresses_differ)),
    );
    x.counter(
        "vrrp_adverts_refused_total",
        "VRRP advertisements refused, by reason.",
        crate::vrrp::Refusal::ALL
            .iter()
            .zip(v.refused)
            .map(|(r, n)| (vec![("reason", r.label().to_owned())], n)),
    );
}

/// Neighbour resolution (M47): each next hop's state, what the table did,
/// and which backends are ineligible for want of a MAC.
pub fn neighbours(
    x: &mut Exposition,
    n: &crate::neighbours::Neighbours,
    snap: &dataplane::Snapshot,
) {
    x.gauge(
        "neighbour_state",
        "Next-hop state (M47): 0 incomplete, 1 reachable, 2 stale, 3 failed.",
        n.entries().iter().map(|e| {
            (
                vec![
                    ("port", e.hop.port.to_string()),
                    ("address", e.hop.addr.to_string()),
                ],
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
        x.one_counter(name, help, v);
    }
    x.gauge(
        "backend_neighbour_resolved",
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
                    vec![("service", svc.to_owned()), ("backend", b.addr.to_string())],
                    b.mac != [0; 6],
                )
            }),
    );
}

/// Drain (M37) and shutdown (M39): one sample per drained node, zone or
/// region, and whether the node is shutting down.
pub fn drain(x: &mut Exposition, drained: &crate::drain::Drained, shutting_down: bool) {
    x.gauge(
        "drained",
        "A node, zone or region drained by the operator (M37): 1 while drained (no sample once undrained).",
        drained.iter().map(|(scope, name)| {
            (
                vec![("scope", scope.to_string()), ("name", name.to_string())],
                1u8,
            )
        }),
    );
    x.one_gauge(
        "shutting_down",
        "1 from the first SIGTERM or SIGINT until exit (M39): VIPs withdrawn, still forwarding.",
        shutting_down,
    );
}

/// Flow-state sync (M36), one counter family per [`crate::sync::SyncCounters`]
/// field; nothing without `[flow_sync]`.
pub fn sync(x: &mut Exposition, counters: Option<crate::sync::SyncCounters>) {
    let Some(c) = counters else {
        return;
    };
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
        (
            "flow_sync_handshakes_total",
            "Flow-sync handshakes completed: a peer's current epoch confirmed, its session (re)established.",
            c.handshakes,
        ),
        (
            "flow_sync_hellos_answered_total",
            "Flow-sync hellos of peers answered.",
            c.hellos,
        ),
        (
            "flow_sync_rates_sent_total",
            "Rate summaries sent to peers (datagrams of this node's measured rates per endpoint).",
            c.rates_sent,
        ),
        (
            "flow_sync_rates_received_total",
            "Rate summaries received from peers.",
            c.rates_received,
        ),
    ] {
        x.one_counter(name, help, v);
    }
    x.counter(
        "flow_sync_dropped_total",
        "Flow-sync datagrams dropped, by reason: source (no configured peer), auth (another key or altered), version (another release), malformed, own, identity (sender ID not the peer's), stale (made before this node started), epoch (not the peer's confirmed epoch), old (below the replay window), replay (seen before), handshake (a reply to no outstanding hello), limited (a hello not answered).",
        [
            ("source", c.drop_source),
            ("auth", c.drop_auth),
            ("version", c.drop_version),
            ("malformed", c.drop_malformed),
            ("own", c.drop_own),
            ("identity", c.drop_identity),
            ("stale", c.drop_stale),
            ("epoch", c.drop_epoch),
            ("old", c.drop_old),
            ("replay", c.drop_replay),
            ("handshake", c.drop_handshake),
            ("limited", c.drop_limited),
        ]
        .map(|(r, v)| (label("reason", r), v)),
    );
}

/// The cluster as counted for `RATE` capacity (M25 with M34): the share of
/// every capacity planned with, and the peers heard and silent.
pub fn cluster(x: &mut Exposition, c: &crate::report::Cluster) {
    x.one_gauge(
        "capacity_share",
        "Share of each RATE group's capacity this node plans with: 1 while every flow-sync peer is heard (the cluster's rates count), less for each silent peer or without peers (node.capacity_share).",
        c.capacity_share,
    );
    x.one_gauge(
        "capacity_share_fallback",
        "1 while the capacity share is a fallback (a peer silent, or node.capacity_share without peers), 0 while the cluster's rates are counted.",
        u8::from(!c.silent.is_empty() || (c.nodes == 1 && c.fallback_configured)),
    );
    x.gauge(
        "cluster_peers",
        "Flow-sync peers by state: heard (their rates arrived within 3 s), silent, or left (said they shut down; no share held).",
        [
            ("heard", c.peers_heard),
            ("silent", c.silent.len()),
            ("left", c.left.len()),
        ]
        .map(|(s, v)| (label("state", s), u64::try_from(v).unwrap_or(u64::MAX))),
    );
}

/// BGP announcements (M34, M35): each VIP's state, the changes, and the
/// speaker driver's view; nothing without `[bgp]`.
pub fn bgp(
    x: &mut Exposition,
    desired: Option<&crate::announce::Desired>,
    (announced, withdrawn): (u64, u64),
    speaker: Option<&crate::bird::SpeakerStatus>,
) {
    let Some(desired) = desired else {
        return;
    };
    x.gauge(
        "bgp_vip_announced",
        "1 while this node decides to announce the VIP (M35), else 0.",
        desired
            .iter()
            .map(|(vip, why)| (label("vip", vip), why.announced())),
    );
    x.one_counter(
        "bgp_announcements_total",
        "VIPs that went from withdrawn to announced.",
        announced,
    );
    x.one_counter(
        "bgp_withdrawals_total",
        "VIPs that went from announced to withdrawn.",
        withdrawn,
    );
    if let Some(s) = speaker {
        x.one_gauge(
            "bgp_speaker_up",
            "1 when the BGP speaker answered last time, 0 when not, -1 before the first try.",
            s.reachable.map_or(-1, i8::from),
        );
        x.one_gauge(
            "bgp_speaker_in_sync",
            "1 when the speaker runs the latest decision.",
            s.in_sync,
        );
        x.one_counter(
            "bgp_speaker_updates_total",
            "Updates the speaker accepted.",
            s.updates,
        );
        x.one_counter(
            "bgp_speaker_failures_total",
            "Failed updates or checks (speaker unreachable or refusing; retried).",
            s.failures,
        );
    }
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
# HELP spillway_fragmented_packets_total IPv4 packets without DF too big for the egress MTU once encapsulated, sent in fragments (M48; also counted as forwarded).
# TYPE spillway_fragmented_packets_total counter
spillway_fragmented_packets_total 0
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

    /// Every shape of family and value the writer takes (counters and
    /// gauges, with and without labels, empty, integers at their bounds,
    /// fractions, non-finite values left out, label values to escape) and
    /// the families not in `tests/metrics_text.rs`, as recorded in
    /// `tests/metrics_shapes.golden` while `prometheus-client` wrote them
    /// (issue 40). `SPILLWAY_BLESS=1` rewrites the file.
    #[test]
    fn every_value_shape_is_written_as_recorded() {
        let mut x = Exposition::new();
        x.one_counter("plain_total", "A counter.", 7);
        x.one_counter("no_suffix", "A counter named without _total.", u64::MAX);
        x.counter("empty_total", "No samples.", []);
        x.gauge::<u64>("empty_gauge", "No samples.", []);
        x.gauge(
            "counts",
            "Counts as gauges.",
            [0, 1, i64::MAX as u64, i64::MAX as u64 + 1, u64::MAX].map(|v| (label("v", v), v)),
        );
        x.gauge(
            "ints",
            "Signed.",
            [i64::MIN, -1, 0, 1, i64::MAX].map(|v| (label("v", v), v)),
        );
        let reals = [
            0.0,
            -0.0,
            1.0,
            -1.0,
            0.5,
            0.1,
            0.3,
            1.0 / 3.0,
            2.0 / 3.0,
            1e-7,
            1.5e-5,
            0.000123,
            123456.789,
            12345678.9,
            1e15,
            1e16,
            1e17,
            1e21,
            1e22,
            1.7976931348623157e308,
            2.2250738585072014e-308,
            5e-324,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
        ];
        x.gauge(
            "reals",
            "Fractions.",
            reals.iter().enumerate().map(|(i, &v)| (label("i", i), v)),
        );
        // Bit patterns spread over the range (an LCG), finite ones only.
        let mut seed: u64 = 0x5eed;
        let spread: Vec<(Labels, f64)> = (0..200)
            .map(|i| {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (label("i", i), f64::from_bits(seed))
            })
            .collect();
        x.gauge("spread", "Fractions of all sizes.", spread);
        // Rates and ratios as scrapes show them: fractions of 1e-3 to 1e9.
        let moderate: Vec<(Labels, f64)> = (0..200)
            .map(|i| {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let unit = (seed >> 11) as f64 / (1u64 << 53) as f64;
                (label("i", i), unit * 10f64.powi(i % 13 - 3))
            })
            .collect();
        x.gauge("moderate", "Fractions of usual sizes.", moderate);
        x.gauge(
            "labels",
            "Label values to escape.",
            [
                (label("v", ""), 1u8),
                (label("v", "a\\b\"c\nd"), 2),
                (label("v", "zürich ✓"), 3),
                (
                    vec![
                        ("a", "1".to_owned()),
                        ("b", "2".to_owned()),
                        ("c", "3".to_owned()),
                    ],
                    4,
                ),
            ],
        );
        x.one_gauge("bool", "A flag.", true);
        x.one_gauge("small", "An i8.", -1i8);
        flow_table(&mut x, 1000, Some((333, 7)), 12);
        config(
            &mut x,
            &ConfigState {
                generation: 9,
                reloads: (3, 1),
                watch_refused: 1,
                reading: false,
                last_error: Some("spillway.toml:3: bad \"thing\"\nsecond line"),
                last_reload: Some(
                    SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(1_700_000_000_123),
                ),
            },
        );
        listeners(
            &mut x,
            &[crate::listen::ListenerInfo {
                name: "http",
                limits: crate::listen::Limits {
                    max_connections: 4,
                    per_client: Some(2),
                    timeout: std::time::Duration::from_secs(1),
                },
                counters: std::sync::Arc::default(),
            }],
        );
        sync(
            &mut x,
            Some(crate::sync::SyncCounters {
                applied: 7,
                drop_auth: 3,
                handshakes: 8,
                ..Default::default()
            }),
        );
        cluster(
            &mut x,
            &crate::report::Cluster {
                nodes: 3,
                peers_heard: 1,
                silent: vec!["192.0.2.3:7700".parse().unwrap()],
                left: Vec::new(),
                capacity_share: 2.0 / 3.0,
                fallback_share: 1.0 / 3.0,
                fallback_configured: false,
            },
        );
        let speaker = crate::bird::SpeakerStatus {
            reachable: Some(true),
            in_sync: true,
            updates: 4,
            failures: 1,
            ..Default::default()
        };
        bgp(
            &mut x,
            Some(&vec![(
                "198.51.100.1".parse().unwrap(),
                crate::announce::Why::Healthy,
            )]),
            (2, 1),
            Some(&speaker),
        );
        let got = x.text();
        let golden =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/metrics_shapes.golden");
        if std::env::var_os("SPILLWAY_BLESS").is_some() {
            std::fs::write(&golden, &got).unwrap();
        }
        let want = std::fs::read_to_string(&golden).unwrap();
        assert!(got == want, "differs from {}:\n{got}", golden.display());
    }

    /// Every counter family's name ends with `_total` (the encoder would
    /// add it to the sample name otherwise) and no family comes twice.
    #[test]
    fn counter_names_end_with_total_and_families_are_distinct() {
        let (c, compiled) = sample();
        let mut x = Exposition::new();
        counters(&mut x, &c, &compiled);
        workers(&mut x, &[c.clone(), c]);
        let mut seen = std::collections::HashSet::new();
        for (name, kind) in x.families() {
            let counter = kind == admin::openmetrics::Kind::Counter;
            assert!(!counter || name.ends_with("_total"), "{name}");
            assert!(seen.insert(name.to_owned()), "{name} twice");
        }
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
        // The reasons the golden samples knew, numbered as then; later ones
        // after the child rules, so that the golden values stay put.
        const GOLDEN_REASONS: usize = 29;
        for d in c.drops.iter_mut().take(GOLDEN_REASONS) {
            *d = next();
        }
        for cc in &mut c.children {
            cc.packets = next();
            cc.bytes = next();
            cc.new_flows = next();
            cc.drops = next();
        }
        for d in c.drops.iter_mut().skip(GOLDEN_REASONS) {
            *d = next();
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
        c.children[1].drop_reasons[DropReason::NoBackend as usize] = 4;
        let mut x = Exposition::new();
        counters(&mut x, &c, &compiled);
        let out = x.text();
        for line in [
            "spillway_rule_packets_total{rule=\"web-ag0\"} 10\n",
            "spillway_rule_packets_total{rule=\"web-ag1\"} 11\n",
            "spillway_rule_new_flows_total{rule=\"web-ag1\"} 0\n",
            "spillway_rule_drops_by_reason_total{rule=\"web-ag1\",reason=\"no_backend\"} 4\n",
        ] {
            assert!(out.contains(line), "{line}{out}");
        }
        assert!(
            !out.contains("spillway_rule_drops_by_reason_total{rule=\"web-ag0\""),
            "no zero samples: {out}"
        );
    }

    #[test]
    fn drain_and_shutdown_are_exported() {
        use crate::drain::{Drained, Scope};
        let mut d = Drained::new();
        d.set(Scope::Zone, "eu1-a", true);
        d.set(Scope::Node, "lb1", true);
        let mut x = Exposition::new();
        drain(&mut x, &d, true);
        let out = x.text();
        assert!(
            out.contains("spillway_drained{scope=\"node\",name=\"lb1\"} 1\n")
                && out.contains("spillway_drained{scope=\"zone\",name=\"eu1-a\"} 1\n")
                && out.contains("spillway_shutting_down 1\n"),
            "{out}"
        );
        let mut x = Exposition::new();
        drain(&mut x, &Drained::new(), false);
        let out = x.text();
        assert!(
            !out.contains("spillway_drained{") && out.contains("spillway_shutting_down 0\n"),
            "{out}"
        );
    }

    #[test]
    fn sync_families_count_each_drop_reason() {
        let mut x = Exposition::new();
        sync(&mut x, None);
        assert_eq!(x.names().count(), 0, "nothing without [flow_sync]");
        let c = crate::sync::SyncCounters {
            applied: 7,
            drop_source: 2,
            drop_auth: 3,
            drop_replay: 4,
            drop_stale: 5,
            drop_epoch: 6,
            handshakes: 8,
            ..Default::default()
        };
        sync(&mut x, Some(c));
        let m = x.text();
        for line in [
            "spillway_flow_sync_entries_applied_total 7",
            "spillway_flow_sync_handshakes_total 8",
            "spillway_flow_sync_dropped_total{reason=\"source\"} 2",
            "spillway_flow_sync_dropped_total{reason=\"auth\"} 3",
            "spillway_flow_sync_dropped_total{reason=\"replay\"} 4",
            "spillway_flow_sync_dropped_total{reason=\"stale\"} 5",
            "spillway_flow_sync_dropped_total{reason=\"epoch\"} 6",
            "spillway_flow_sync_dropped_total{reason=\"malformed\"} 0",
            "spillway_flow_sync_dropped_total{reason=\"old\"} 0",
            "spillway_flow_sync_dropped_total{reason=\"version\"} 0",
            "spillway_flow_sync_dropped_total{reason=\"identity\"} 0",
            "spillway_flow_sync_dropped_total{reason=\"handshake\"} 0",
            "spillway_flow_sync_dropped_total{reason=\"limited\"} 0",
        ] {
            assert!(m.lines().any(|l| l == line), "{line} in\n{m}");
        }
    }

    #[test]
    fn state_transitions_are_counted_by_kind_name_from_and_to() {
        use crate::transitions::{Kind, Transitions};
        let mut t = Transitions::default();
        t.observe(Kind::Composite, "web-composite", Aggregate::Healthy);
        t.observe(Kind::Composite, "web-composite", Aggregate::Unhealthy);
        t.observe(
            Kind::Remote,
            "web@http://10.9.0.1:9469/status",
            Aggregate::Healthy,
        );
        let mut x = Exposition::new();
        transitions(&mut x, &t);
        let m = x.text();
        for line in [
            "spillway_state_transitions_total{kind=\"composite\",name=\"web-composite\",from=\"UNKNOWN\",to=\"HEALTHY\"} 1",
            "spillway_state_transitions_total{kind=\"composite\",name=\"web-composite\",from=\"HEALTHY\",to=\"UNHEALTHY\"} 1",
            "spillway_state_transitions_total{kind=\"remote\",name=\"web@http://10.9.0.1:9469/status\",from=\"UNKNOWN\",to=\"HEALTHY\"} 1",
        ] {
            assert!(m.lines().any(|l| l == line), "{line} in\n{m}");
        }
    }

    /// The samples `/metrics` had before OpenMetrics, by name and value:
    /// dashboards and alerts keep working.
    #[test]
    fn counter_samples_are_unchanged() {
        let (c, compiled) = sample();
        let mut x = Exposition::new();
        counters(&mut x, &c, &compiled);
        let out = x.text();
        let samples: std::collections::HashSet<&str> = out.lines().collect();
        for line in GOLDEN.lines().filter(|l| !l.starts_with('#')) {
            assert!(samples.contains(line), "{line} missing from\n{out}");
        }
    }

    #[test]
    fn bgp_families_show_each_vip_and_the_speaker() {
        use crate::announce::Why;
        let mut x = Exposition::new();
        bgp(&mut x, None, (0, 0), None);
        assert_eq!(x.names().count(), 0, "nothing without [bgp]");
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
        bgp(&mut x, Some(&d), (4, 1), Some(&sp));
        let m = x.text();
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
