//! The control socket's answers as data: one struct per command, from
//! which both the text for people ([`std::fmt::Display`]) and the JSON
//! answer (`serde`) are made, so the two cannot disagree. Field names are
//! the JSON's, documented in docs/operating.md ("Inspecting"); they are
//! stable.

use std::fmt::{self, Display, Write as _};
use std::net::IpAddr;
use std::time::Duration;

use dataplane::{ChildCounters, DropReason, WorkerCounters};
use serde::Serialize;
use serde::ser::{SerializeMap, Serializer};

/// A successful answer as JSON: `{"ok": true, …the answer's fields}`, one
/// line.
pub fn json_ok<T: Serialize>(body: &T) -> String {
    #[derive(Serialize)]
    struct Ok<'a, T: Serialize> {
        ok: bool,
        #[serde(flatten)]
        body: &'a T,
    }
    match serde_json::to_string(&Ok { ok: true, body }) {
        Ok(s) => s + "\n",
        // Only a map with non-string keys or a failing custom impl could
        // fail; none is used, but an answer must still be JSON.
        Err(e) => json_error(&format!("the answer could not be written as JSON: {e}")),
    }
}

/// A failed answer as JSON: `{"ok": false, "error": TEXT}`, one line.
pub fn json_error(text: &str) -> String {
    #[derive(Serialize)]
    struct Err<'a> {
        ok: bool,
        error: &'a str,
    }
    serde_json::to_string(&Err {
        ok: false,
        error: text.trim_end(),
    })
    .unwrap_or_else(|_| "{\"ok\":false,\"error\":\"?\"}".to_owned())
        + "\n"
}

/// Lays rows out in columns two spaces apart, each line indented by two
/// spaces (the first row is the header).
fn table(out: &mut String, rows: &[Vec<String>]) {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let width: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for r in rows {
        let mut line = String::from(" ");
        for (c, cell) in r.iter().enumerate() {
            let pad = width.get(c).copied().unwrap_or(0);
            let _ = write!(line, " {cell:<pad$}");
            line.push(' ');
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
}

/// `spillway status`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Status {
    /// `[node] name`.
    pub node: String,
    /// The node's region.
    pub region: String,
    /// The node's zone.
    pub zone: String,
    /// The availability group served (`null`: both).
    pub availability_group: Option<u8>,
    /// Seconds since the daemon started.
    pub uptime_s: u32,
    /// The live snapshot's generation.
    pub generation: u32,
    /// Reloads accepted.
    pub reloads_ok: u64,
    /// Reloads refused.
    pub reloads_rejected: u64,
    /// The flow table's use.
    pub flow_table: FlowTable,
    /// Maglev tables being built for the next generation.
    pub building: Option<Building>,
    /// The forwarding rules.
    pub rules: Vec<Rule>,
    /// The backend services.
    pub services: Vec<Service>,
    /// Services whose every group is drained: the drain is not applied.
    pub drain_ignored: Vec<String>,
    /// The live snapshot's backend slots.
    pub backends: Vec<Backend>,
    /// Gateway endpoints (M31).
    pub gateways: Vec<Gateway>,
    /// Next hops (M47).
    pub neighbours: Vec<Neighbour>,
    /// Neighbour resolution's totals (`null`: no next hop, nothing seen).
    pub neighbour_totals: Option<NeighbourTotals>,
    /// VRRP groups (`[[vrrp]]`).
    pub vrrp: Vec<VrrpGroup>,
    /// VRRP advertisements refused before reaching a group's state
    /// machine, by reason (`null` without `[[vrrp]]`).
    pub vrrp_refused: Option<std::collections::BTreeMap<&'static str, u64>>,
    /// `remote_rule` groups' verdicts.
    pub remote_rules: Vec<RemoteRule>,
    /// Health-checked endpoints.
    pub health: Vec<Health>,
    /// Seconds of the shutdown drain left (`null`: not shutting down).
    pub shutting_down_s: Option<f64>,
    /// Drained node, zones and regions.
    pub drained: Vec<Drained>,
    /// Flow-state sync (`null` without `[flow_sync]`).
    pub flow_sync: Option<FlowSync>,
    /// The cluster's rates and the capacity share planned with (M25, M34).
    pub cluster: Cluster,
    /// BGP announcements (`null` without `[bgp]`).
    pub bgp: Option<Bgp>,
    /// The BGP speaker (`null` without `[bgp] speaker`).
    pub speaker: Option<Speaker>,
    /// The last refused reload's errors.
    pub last_reload_error: Option<String>,
}

/// The flow table's use.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct FlowTable {
    /// Live entries.
    pub live: usize,
    /// Entries it holds at most.
    pub capacity: usize,
    /// Live entries of half-open TCP connections.
    pub half_open: usize,
    /// Where its memory is: `DPDK hugepages`, or `heap` (transparent huge pages advised).
    pub memory: &'static str,
}

/// Maglev tables being built off the management loop.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Building {
    /// Tables.
    pub tables: usize,
    /// Their slots in all.
    pub slots: u64,
    /// Seconds so far.
    pub seconds: f64,
}

/// A forwarding rule.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Rule {
    /// Its name.
    pub name: String,
    /// Its exported health (`HEALTHY`, `UNHEALTHY`, `UNKNOWN`; M21).
    pub state: String,
    /// Its service.
    pub service: String,
    /// One per VIP (child rule).
    pub vips: Vec<RuleVip>,
    /// The clients it admits (`source_ranges`); absent: every client.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source_ranges: Option<Vec<String>>,
}

/// A rule on one VIP.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RuleVip {
    /// The VIP; of a VIP prefix, the address it is probed through.
    pub vip: IpAddr,
    /// The VIP prefix (`2001:db8:1::/96`), when the VIP is one: every
    /// address in it is taken alike.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// Allocated from its availability group's `vip_pool`.
    pub allocated: bool,
    /// The child rule (`<rule>-ag<N>`).
    pub child_rule: String,
    /// Its availability group.
    pub availability_group: u8,
    /// Whether this node serves it.
    pub served: bool,
    /// The child rule's exported state (`HEALTHY`, `UNHEALTHY`, `UNKNOWN`,
    /// as HTTP `/status` exports it: M5, M21), which its VIP's announcement
    /// follows (M35); `null` when not served.
    pub state: Option<String>,
    /// Its BGP announcement (`announced (healthy)`, `withdrawn (…)`;
    /// `null` without `[bgp]` or when not served).
    pub bgp: Option<String>,
}

/// A backend service.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Service {
    /// Its name.
    pub name: String,
    /// Its delivery mode.
    pub delivery: String,
    /// Backends eligible for new connections in the live snapshot (`null`:
    /// not in it yet).
    pub eligible_backends: Option<usize>,
    /// Draining backends taking its new connections as the last resort
    /// (`no_backend_fallback = "draining"`, M14): none of its configured
    /// endpoints is eligible. 0 otherwise.
    pub last_resort_backends: usize,
    /// Health over all its endpoints (`Healthy`, `Unhealthy`, `Unknown`;
    /// `null`: no plan yet).
    pub health: Option<String>,
    /// Which endpoints are eligible (`Healthy`, `Unknown`, `FailOpen`,
    /// `Nothing`).
    pub eligibility: Option<String>,
    /// Every region unhealthy: their healthy endpoints used anyway.
    pub degraded: bool,
    /// Every candidate region at capacity.
    pub overloaded: bool,
    /// What limits its capacity (M25): `by rate`, `by utilization (target
    /// 0.8)`, `by rate or utilization (…), whichever is reached first`, or
    /// `by rate only` / `unlimited` with why its utilization is unknown.
    /// `null`: no plan yet.
    pub capacity: Option<String>,
    /// Per region, nearest first.
    pub regions: Vec<Region>,
    /// With zonal affinity (M27): each client zone's measured demand and
    /// how much of it stays in the zone (omitted when empty).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub zones: Vec<ZoneDemand>,
}

/// A client zone of a service with zonal affinity (M27), as the data plane
/// measured it over the last planning interval.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ZoneDemand {
    /// The zone (`"-"`: clients in no zone).
    pub zone: String,
    /// New flows per second from its clients.
    pub new_flows_per_s: f64,
    /// Its share of the service's demand the plan sized the zone with,
    /// smoothed, 0 to 1 (`null`: not measured yet, demand assumed to follow
    /// capacity; and for clients in no zone).
    pub demand_share: Option<f64>,
    /// Share of its clients' new connections pinned to the zone's own
    /// endpoints in the nearest region serving it (the rest spreads over
    /// the region; `null`: no zone variant, the region's default set).
    pub in_zone_share: Option<f64>,
}

/// A service in one region.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Region {
    /// The region.
    pub name: String,
    /// Its aggregated health (`Healthy`, `Unhealthy`, `Unknown`).
    pub health: String,
    /// Endpoints.
    pub endpoints: u32,
    /// Of which healthy.
    pub healthy: u32,
    /// Of which without a verdict.
    pub unknown: u32,
    /// Of which eligible for new connections.
    pub eligible: u32,
    /// Measured packets per second.
    pub load_pps: f64,
    /// Capacity in packets per second (`null`: unlimited).
    pub capacity_pps: Option<f64>,
    /// `RATE`: load ÷ capacity; `UTILIZATION`: the mean its eligible
    /// endpoints report, or `"unknown"` while none reports one (no
    /// utilization limit applies then). `null`: `RATE` without a limit.
    pub utilization: Option<Utilization>,
    /// Its share of new connections, 0 to 1 (spillover, M26).
    pub new_flows_fraction: f64,
}

/// A region's utilization in `status` (M25): a number, or `"unknown"`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Utilization {
    /// Measured or reported, 0 to 1 (above 1: overloaded).
    Known(f64),
    /// `UTILIZATION` mode, and no eligible endpoint reports one.
    Unknown,
}

impl Utilization {
    /// A region's utilization as its plan has it, in a service of balancing
    /// mode `mode`: `None` from the plan is unknown under `UTILIZATION`,
    /// and means no limit under `RATE`.
    pub fn of(mode: config::schema::BalancingMode, planned: Option<f64>) -> Option<Self> {
        match (planned, mode) {
            (Some(u), _) => Some(Utilization::Known(u)),
            (None, config::schema::BalancingMode::Utilization) => Some(Utilization::Unknown),
            (None, config::schema::BalancingMode::Rate) => None,
        }
    }
}

impl Serialize for Utilization {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Utilization::Known(u) => s.serialize_f64(*u),
            Utilization::Unknown => s.serialize_str("unknown"),
        }
    }
}

impl Display for Utilization {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Utilization::Known(u) => write!(f, "{u:.2}"),
            Utilization::Unknown => f.write_str("unknown"),
        }
    }
}

/// A backend slot of the live snapshot.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Backend {
    /// Its slot.
    pub index: usize,
    /// Its address.
    pub address: IpAddr,
    /// A dual-stack endpoint's IPv6 address (M8).
    pub address6: Option<IpAddr>,
    /// `active`, `unhealthy`, `draining` or `removed`.
    pub state: &'static str,
    /// Last tick its flows may stay (unhealthy, draining).
    pub until: Option<u32>,
    /// Its next hop has a MAC (M47); else it takes no new flows.
    pub neighbour_resolved: bool,
}

/// A gateway endpoint.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Gateway {
    /// Its address.
    pub address: IpAddr,
    /// Its 64-bit ID.
    pub id: u64,
    /// Its gateway rule.
    pub rule: String,
    /// Its port.
    pub port: usize,
    /// Its MAC (`null`: unresolved, its traffic is not taken); of a
    /// remote endpoint, its tunnel's next hop's (its returns wait for it).
    pub mac: Option<String>,
    /// A remote endpoint's tunnel (`geneve`): its traffic arrives
    /// encapsulated from its address, not from an L2 neighbour.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tunnel: Option<&'static str>,
}

/// A next hop.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Neighbour {
    /// Its address.
    pub address: IpAddr,
    /// The port it is on.
    pub port: usize,
    /// `incomplete`, `reachable`, `stale` or `failed`.
    pub state: &'static str,
    /// Its MAC, when known.
    pub mac: Option<String>,
}

/// A VRRP group.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VrrpGroup {
    /// Virtual router ID.
    pub vrid: u8,
    /// `IPv4` or `IPv6`.
    pub family: &'static str,
    /// The port it runs on.
    pub port: usize,
    /// `initialize`, `backup` or `master`.
    pub state: &'static str,
    /// Seconds in that state.
    pub since_s: f64,
    /// The priority it advertises now.
    pub priority: u8,
    /// The priority configured.
    pub configured_priority: u8,
    /// Why it advertises below it (`null`: it does not).
    pub unfit: Option<&'static str>,
    /// The master as last heard (`null`: this node, or none heard).
    pub master: Option<IpAddr>,
    /// Its VIPs.
    pub vips: Vec<IpAddr>,
    /// Advertisements sent.
    pub sent: u64,
    /// Advertisements taken.
    pub received: u64,
    /// Times it became master.
    pub became_master: u64,
    /// Advertisements taken that named other VIPs besides some of its own.
    pub addresses_differ: u64,
}

/// Neighbour resolution's totals.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct NeighbourTotals {
    /// Resolutions.
    pub resolved: u64,
    /// Failures.
    pub failed: u64,
    /// MAC changes.
    pub mac_changes: u64,
    /// Sightings of addresses that are no next hop.
    pub ignored: u64,
}

/// A `remote_rule` group's verdict.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RemoteRule {
    /// The remote rule.
    pub rule: String,
    /// Where its state is read.
    pub url: String,
    /// The VIP it is reached at.
    pub vip: IpAddr,
    /// Its state (`HEALTHY`, `UNHEALTHY`, `UNKNOWN`).
    pub state: String,
    /// Why (`null`: no answer yet).
    pub why: Option<String>,
}

/// A health-checked endpoint.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Health {
    /// Its service.
    pub service: String,
    /// The endpoint's address and the port probed.
    pub address: String,
    /// The VIP it is probed through (M52); `null`: its own address.
    pub vip: Option<IpAddr>,
    /// `HEALTHY`, `UNHEALTHY` or `UNKNOWN`.
    pub state: String,
    /// The last probe's verdict (`null`: no probe yet).
    pub reason: Option<String>,
    /// The weight it reported (M17).
    pub weight: Option<u16>,
    /// Probes passed.
    pub probes_ok: u64,
    /// Probes failed.
    pub probes_failed: u64,
    /// State changes.
    pub transitions: u64,
}

/// A drained node, zone or region.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Drained {
    /// `node`, `zone` or `region`.
    pub scope: String,
    /// Its name.
    pub name: String,
}

/// Flow-state sync (M36).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FlowSync {
    /// Peers.
    pub peers: usize,
    /// Peers in session (a handshake confirmed their epoch, M54).
    pub sessions: usize,
    /// Its counters.
    pub counters: SyncCounters,
    /// Peers whose entries this node still waits for.
    pub waiting_for: usize,
}

/// The cluster as this node counts it for `RATE` capacity.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Cluster {
    /// This node and its flow-sync peers.
    pub nodes: usize,
    /// Peers whose rates arrived within the last 3 s.
    pub peers_heard: usize,
    /// Peers not heard from: each is assumed to use `fallback_share`.
    pub silent: Vec<std::net::SocketAddr>,
    /// Peers that said they were leaving (shut down) and have not been
    /// heard since: no share is held for them.
    pub left: Vec<std::net::SocketAddr>,
    /// Share of each `RATE` group's capacity planned with (1: every peer
    /// heard, the cluster's total counted against the whole capacity).
    pub capacity_share: f64,
    /// `node.capacity_share`, or its default 1 / nodes.
    pub fallback_share: f64,
    /// Whether `fallback_share` was configured.
    pub fallback_configured: bool,
}

/// BGP announcements (M35).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Bgp {
    /// Announcements since start.
    pub announcements: u64,
    /// Withdrawals since start.
    pub withdrawals: u64,
    /// Each VIP's decision.
    pub vips: Vec<BgpVip>,
}

/// One VIP's announcement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BgpVip {
    /// The VIP.
    pub vip: IpAddr,
    /// Whether it is announced.
    pub announced: bool,
    /// Why, for people.
    pub why: String,
}

/// The BGP speaker (BIRD, M34).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Speaker {
    /// `bird`.
    pub kind: &'static str,
    /// Its control socket.
    pub socket: String,
    /// Its state, for people.
    pub state: String,
    /// Whether it answered last time (`null`: not tried yet).
    pub reachable: Option<bool>,
    /// Whether it runs the latest decision.
    pub in_sync: bool,
    /// Reconfigurations it accepted.
    pub updates: u64,
    /// Failed attempts.
    pub failures: u64,
    /// The VIPs in its routes file.
    pub routes_file_vips: usize,
}

impl Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "node {} (region {}, zone {})\nuptime {} s, snapshot generation {}, reloads {} ok / {} rejected",
            self.node,
            self.region,
            self.zone,
            self.uptime_s,
            self.generation,
            self.reloads_ok,
            self.reloads_rejected
        );
        let drain = if self.drained.is_empty() {
            "none".to_owned()
        } else {
            self.drained
                .iter()
                .map(|d| format!("{} {}", d.scope, d.name))
                .collect::<Vec<_>>()
                .join(", ")
                + " drained"
        };
        let _ = writeln!(
            out,
            "availability group {}; drain state: {drain}",
            self.availability_group
                .map_or_else(|| "both".to_owned(), |g| g.to_string())
        );
        let t = &self.flow_table;
        let _ = writeln!(
            out,
            "flow table: {} live of {} ({} half-open); memory: {}",
            t.live, t.capacity, t.half_open, t.memory
        );
        if let Some(b) = &self.building {
            let _ = writeln!(
                out,
                "building {} Maglev table(s), {} slots, for the next generation: {:.1} s so far (generation {} stays live meanwhile)",
                b.tables, b.slots, b.seconds, self.generation
            );
        }
        self.tables(&mut out);
        for s in &self.services {
            if let Some(n) = s.eligible_backends {
                let last_resort = match s.last_resort_backends {
                    0 => String::new(),
                    d => format!("; last resort: {d} draining backends take new connections"),
                };
                let _ = writeln!(
                    out,
                    "service {}: {} ({n} eligible backends{last_resort})",
                    s.name, s.delivery
                );
            }
        }
        for b in &self.backends {
            let state = match b.until {
                Some(t) => format!("{} until tick {t}", b.state),
                None => b.state.to_owned(),
            };
            // M47: its next hop has no MAC: no new flows, its packets dropped.
            let unresolved = if b.neighbour_resolved {
                ""
            } else {
                ", ineligible (neighbour unresolved)"
            };
            let _ = writeln!(
                out,
                "  backend {}: {}{} {state}{unresolved}",
                b.index,
                b.address,
                b.address6.map_or(String::new(), |a| format!(" and {a}"))
            );
        }
        for g in &self.gateways {
            let state = match (&g.mac, g.tunnel) {
                (None, None) => "unresolved, its traffic is not taken".to_owned(),
                (Some(m), None) => format!("from {m}"),
                (None, Some(t)) => {
                    format!("remote in {t}, next hop unresolved: its returns wait for it")
                }
                (Some(m), Some(t)) => format!("remote in {t}, via next hop {m}"),
            };
            let _ = writeln!(
                out,
                "gateway endpoint {} (id {:#x}, rule {}) on port {}: {state}",
                g.address, g.id, g.rule, g.port
            );
        }
        for n in &self.neighbours {
            let _ = writeln!(
                out,
                "neighbour {} on port {}: {}{}",
                n.address,
                n.port,
                n.state,
                n.mac.as_ref().map(|m| format!(" {m}")).unwrap_or_default()
            );
        }
        if let Some(n) = &self.neighbour_totals {
            let _ = writeln!(
                out,
                "neighbours: {} resolved, {} failed, {} MAC changes, {} sightings of others ignored",
                n.resolved, n.failed, n.mac_changes, n.ignored
            );
        }
        for g in &self.vrrp {
            let master = match (g.state, g.master) {
                ("backup", Some(m)) => format!(", master {m}"),
                _ => String::new(),
            };
            let unfit = g
                .unfit
                .map(|u| format!(" ({u}; configured {})", g.configured_priority))
                .unwrap_or_default();
            let vips: Vec<String> = g.vips.iter().map(IpAddr::to_string).collect();
            let _ = writeln!(
                out,
                "vrrp vrid {} ({}) on port {}: {}{master} for {:.1} s, priority {}{unfit}; VIPs {}; {} advertisements sent, {} received, master {} times{}",
                g.vrid,
                g.family,
                g.port,
                g.state,
                g.since_s,
                g.priority,
                vips.join(", "),
                g.sent,
                g.received,
                g.became_master,
                if g.addresses_differ > 0 {
                    format!(
                        "; {} advertisements named other VIPs: the nodes' groups differ",
                        g.addresses_differ
                    )
                } else {
                    String::new()
                }
            );
        }
        if let Some(r) = &self.vrrp_refused {
            let parts: Vec<String> = r.iter().map(|(k, v)| format!("{k} {v}")).collect();
            let _ = writeln!(out, "vrrp advertisements refused: {}", parts.join(", "));
        }
        if let Some(s) = self.shutting_down_s {
            let _ = writeln!(out, "shutting down, {s} s left");
        }
        for d in &self.drained {
            let _ = writeln!(out, "drained: {} {}", d.scope, d.name);
        }
        if let Some(s) = &self.flow_sync {
            let c = &s.counters;
            let _ = writeln!(
                out,
                "flow sync: {} peers, {} in session; sent {} datagrams ({} entries, {} refreshes); received {}, applied {}, refreshed {}, existing {}, unresolved {}; dumps {}; handshakes {}, hellos {}; dropped: source {}, auth {}, version {}, malformed {}, own {}, identity {}, stale {}, epoch {}, old {}, replay {}, handshake {}, limited {}",
                s.peers,
                s.sessions,
                c.sent,
                c.entries_sent,
                c.refreshes,
                c.received,
                c.applied,
                c.refreshed,
                c.existing,
                c.unresolved,
                c.dumps,
                c.handshakes,
                c.hellos,
                c.drop_source,
                c.drop_auth,
                c.drop_version,
                c.drop_malformed,
                c.drop_own,
                c.drop_identity,
                c.drop_stale,
                c.drop_epoch,
                c.drop_old,
                c.drop_replay,
                c.drop_handshake,
                c.drop_limited
            );
            if s.waiting_for > 0 {
                let _ = writeln!(
                    out,
                    "flow sync: waiting for the entries of {} peers",
                    s.waiting_for
                );
            }
        }
        let c = &self.cluster;
        if c.nodes > 1 || c.fallback_configured {
            let silent: Vec<String> = c.silent.iter().map(ToString::to_string).collect();
            let basis = if c.nodes == 1 {
                format!(
                    "no flow-sync peers: this node's rates against capacity_share {:.2} of each RATE capacity",
                    c.capacity_share
                )
            } else if c.silent.is_empty() {
                "the cluster's rates against each RATE capacity".to_owned()
            } else {
                format!(
                    "fallback share {:.2} of each RATE capacity for this node and the peers heard ({:.2} held for each silent peer)",
                    c.capacity_share, c.fallback_share
                )
            };
            let list = |v: &[String]| {
                if v.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", v.join(", "))
                }
            };
            let left: Vec<String> = c.left.iter().map(ToString::to_string).collect();
            let _ = writeln!(
                out,
                "cluster: {} nodes, {} peers heard, {} silent{}{}; planning with {basis}",
                c.nodes,
                c.peers_heard,
                c.silent.len(),
                list(&silent),
                if left.is_empty() {
                    String::new()
                } else {
                    format!(", {} left{}", left.len(), list(&left))
                }
            );
        }
        for s in &self.services {
            let Some(health) = &s.health else { continue };
            let _ = writeln!(
                out,
                "service {}: health {health}, eligibility {}{}{}{}",
                s.name,
                s.eligibility.as_deref().unwrap_or("?"),
                if s.degraded { ", degraded" } else { "" },
                if s.overloaded { ", overloaded" } else { "" },
                s.capacity
                    .as_deref()
                    .map_or_else(String::new, |c| format!(", capacity {c}"))
            );
            for r in &s.regions {
                let _ = writeln!(
                    out,
                    "  region {}: {}, {} endpoints ({} healthy, {} unknown, {} eligible), load {:.0} pps of capacity {}{}, new flows {:.1} %",
                    r.name,
                    r.health,
                    r.endpoints,
                    r.healthy,
                    r.unknown,
                    r.eligible,
                    r.load_pps,
                    r.capacity_pps
                        .map_or_else(|| "unlimited".to_owned(), |c| format!("{c:.0} pps")),
                    r.utilization
                        .map_or_else(String::new, |u| format!(", utilization {u}")),
                    r.new_flows_fraction * 100.0
                );
            }
            for z in &s.zones {
                let _ = writeln!(
                    out,
                    "  client zone {}: {:.1} new flows/s, demand share {}, in zone {}",
                    z.zone,
                    z.new_flows_per_s,
                    z.demand_share.map_or_else(
                        || "unmeasured".to_owned(),
                        |d| format!("{:.1} %", d * 100.0)
                    ),
                    z.in_zone_share
                        .map_or_else(|| "-".to_owned(), |p| format!("{:.1} %", p * 100.0)),
                );
            }
        }
        for name in &self.drain_ignored {
            let _ = writeln!(
                out,
                "service {name}: every group is in a drained zone or region; the drain is not applied to it"
            );
        }
        for r in &self.rules {
            let _ = writeln!(out, "rule {}: {}", r.name, r.state);
            for v in &r.vips {
                if let Some(state) = &v.state {
                    let _ = writeln!(
                        out,
                        "  child rule {} (VIP {}{}): {state}",
                        v.child_rule,
                        v.prefix.clone().unwrap_or_else(|| v.vip.to_string()),
                        if v.allocated { ", from vip_pool" } else { "" }
                    );
                }
            }
        }
        for r in &self.remote_rules {
            let _ = writeln!(
                out,
                "  remote rule {} at {} (VIP {}): {} ({})",
                r.rule,
                r.url,
                r.vip,
                r.state,
                r.why.as_deref().unwrap_or("no answer yet")
            );
        }
        for h in &self.health {
            let _ = writeln!(
                out,
                "  health {}/{}{}: {} ({}){}; {} ok / {} failed probes, {} transitions",
                h.service,
                h.address,
                h.vip.map_or(String::new(), |v| format!(" via {v}")),
                h.state,
                h.reason.as_deref().unwrap_or("no probe yet"),
                h.weight.map_or(String::new(), |w| format!(", weight {w}")),
                h.probes_ok,
                h.probes_failed,
                h.transitions
            );
        }
        if let Some(b) = &self.bgp {
            let _ = writeln!(
                out,
                "bgp: {} announcements, {} withdrawals since start",
                b.announcements, b.withdrawals
            );
            for v in &b.vips {
                let _ = writeln!(out, "  VIP {}: {}", v.vip, v.why);
            }
        }
        if let Some(e) = &self.last_reload_error {
            let _ = writeln!(out, "last reload error:\n{e}");
        }
        if let Some(s) = &self.speaker {
            let _ = writeln!(
                out,
                "bgp speaker {} at {}: {}; {} updates, {} failures; {} VIPs in the routes file",
                s.kind, s.socket, s.state, s.updates, s.failures, s.routes_file_vips
            );
        }
        f.write_str(&out)
    }
}

impl Status {
    /// The rules and services as tables, after the summary lines.
    fn tables(&self, out: &mut String) {
        if !self.rules.is_empty() {
            let mut rows = vec![
                [
                    "RULE",
                    "STATE",
                    "SERVICE",
                    "VIP",
                    "AG",
                    "SERVED",
                    "VIP STATE",
                    "BGP",
                ]
                .map(String::from)
                .to_vec(),
            ];
            for r in &self.rules {
                for (i, v) in r.vips.iter().enumerate() {
                    let first = i == 0;
                    rows.push(vec![
                        if first { r.name.clone() } else { String::new() },
                        if first {
                            r.state.clone()
                        } else {
                            String::new()
                        },
                        if first {
                            r.service.clone()
                        } else {
                            String::new()
                        },
                        v.prefix.clone().unwrap_or_else(|| v.vip.to_string()),
                        v.availability_group.to_string(),
                        if v.served { "yes" } else { "no" }.to_owned(),
                        v.state.clone().unwrap_or_else(|| "-".to_owned()),
                        v.bgp.clone().unwrap_or_else(|| "-".to_owned()),
                    ]);
                }
            }
            table(out, &rows);
        }
        let regions = self.services.iter().any(|s| !s.regions.is_empty());
        if regions {
            let mut rows = vec![
                [
                    "SERVICE",
                    "REGION",
                    "HEALTH",
                    "ELIGIBLE",
                    "HEALTHY",
                    "TOTAL",
                    "NEW FLOWS",
                ]
                .map(String::from)
                .to_vec(),
            ];
            for s in &self.services {
                for (i, r) in s.regions.iter().enumerate() {
                    rows.push(vec![
                        if i == 0 {
                            s.name.clone()
                        } else {
                            String::new()
                        },
                        r.name.clone(),
                        r.health.clone(),
                        r.eligible.to_string(),
                        r.healthy.to_string(),
                        r.endpoints.to_string(),
                        format!("{:.1} %", r.new_flows_fraction * 100.0),
                    ]);
                }
            }
            table(out, &rows);
        }
    }
}

/// `spillway stats`: the workers' counters summed, the listeners' and the
/// rates since the daemon's sample of a second or two ago.
#[derive(Debug, Clone)]
pub struct Stats {
    /// The counters.
    pub counters: WorkerCounters,
    /// Flow entries the management core aged out.
    pub expired: usize,
    /// The child rules' names, in counter order.
    pub rules: Vec<String>,
    /// The control listeners' counters.
    pub listeners: Vec<Listener>,
    /// Per-second rates (`None`: no sample yet).
    pub rates: Option<Rates>,
}

/// A control listener's connections.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Listener {
    /// `control` or `http`.
    pub name: String,
    /// Requests answered.
    pub answered: u64,
    /// Refused: over `max_connections`.
    pub refused: u64,
    /// The limit.
    pub max_connections: usize,
    /// Refused: over the per-client limit.
    pub per_client_refused: u64,
    /// That limit (`null`: none).
    pub per_client_limit: Option<usize>,
    /// Denied (peer credentials).
    pub denied: u64,
    /// Timed out.
    pub timed_out: u64,
    /// Over the size limit.
    pub oversized: u64,
    /// Malformed requests.
    pub bad: u64,
    /// The management core did not answer in time.
    pub busy: u64,
    /// Closed to give their slot to a client that may take it (HTTP).
    pub evicted: u64,
}

/// Per-second rates of the scalar counters over `interval_s`.
#[derive(Debug, Clone, PartialEq)]
pub struct Rates {
    /// Seconds between the two samples.
    pub interval_s: f64,
    /// Per counter of [`WorkerCounters::TRAFFIC`] and
    /// [`WorkerCounters::FLOWS`], then `drops` (all reasons).
    pub per_second: Vec<(&'static str, f64)>,
}

impl Rates {
    /// The rates from `then` to `now`, `interval` apart.
    pub fn between(then: &WorkerCounters, now: &WorkerCounters, interval: Duration) -> Rates {
        let secs = interval.as_secs_f64().max(1e-3);
        // Counters only grow; saturating keeps a restarted one harmless.
        let rate = |a: u64, b: u64| b.saturating_sub(a) as f64 / secs;
        let mut per_second: Vec<_> = WorkerCounters::TRAFFIC
            .iter()
            .chain(WorkerCounters::FLOWS)
            .map(|k| (k.name, rate((k.get)(then), (k.get)(now))))
            .collect();
        per_second.push(("drops", rate(then.total_drops(), now.total_drops())));
        Rates {
            interval_s: secs,
            per_second,
        }
    }
}

impl Serialize for Rates {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.per_second.len() + 1))?;
        m.serialize_entry("interval_s", &self.interval_s)?;
        for (k, v) in &self.per_second {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

/// A counters table of `T` as a JSON object, in declaration order.
struct Counts<'a, T: 'static>(
    &'a T,
    &'static [dataplane::counters::Counter<T>],
    Option<u64>,
);

impl<T> Serialize for Counts<'_, T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        for k in self.1 {
            m.serialize_entry(k.name, &(k.get)(self.0))?;
        }
        if let Some(e) = self.2 {
            m.serialize_entry("expired", &e)?;
        }
        m.end()
    }
}

struct Drops<'a>(&'a WorkerCounters);

impl Serialize for Drops<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(DropReason::ALL.len()))?;
        for r in DropReason::ALL {
            m.serialize_entry(r.name(), &self.0.dropped(r))?;
        }
        m.end()
    }
}

struct RuleCounts<'a>(&'a str, &'a ChildCounters);

impl Serialize for RuleCounts<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("name", self.0)?;
        for k in ChildCounters::ALL {
            m.serialize_entry(k.name, &(k.get)(self.1))?;
        }
        m.end()
    }
}

impl Serialize for Stats {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let c = &self.counters;
        let expired = u64::try_from(self.expired).unwrap_or(u64::MAX);
        let rules: Vec<_> = self
            .rules
            .iter()
            .zip(&c.children)
            .map(|(n, cc)| RuleCounts(n, cc))
            .collect();
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("traffic", &Counts(c, WorkerCounters::TRAFFIC, None))?;
        m.serialize_entry("flows", &Counts(c, WorkerCounters::FLOWS, Some(expired)))?;
        m.serialize_entry("drops", &Drops(c))?;
        m.serialize_entry("rules", &rules)?;
        m.serialize_entry("neighbours", &Counts(c, WorkerCounters::NEIGHBOURS, None))?;
        m.serialize_entry("listeners", &self.listeners)?;
        m.serialize_entry("rates", &self.rates)?;
        m.end()
    }
}

impl Display for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = self
            .counters
            .stats(self.expired, self.rules.iter().map(String::as_str));
        for l in &self.listeners {
            // Only HTTP has a per-client cap, and evicts.
            let (per_client, evicted) = match l.per_client_limit {
                Some(n) => (
                    format!(
                        "{} refused per client (over {n} from one client); ",
                        l.per_client_refused
                    ),
                    format!("; {} evicted", l.evicted),
                ),
                None => (String::new(), String::new()),
            };
            let _ = writeln!(
                out,
                "listener {}: {} answered; {} refused (over {} connections); {per_client}{} denied; {} timed out; {} oversized; {} bad; {} busy{evicted}",
                l.name,
                l.answered,
                l.refused,
                l.max_connections,
                l.denied,
                l.timed_out,
                l.oversized,
                l.bad,
                l.busy
            );
        }
        match &self.rates {
            None => out += "rates: no sample yet (the daemon samples its counters every second)\n",
            Some(r) => {
                let _ = writeln!(
                    out,
                    "rates over the last {:.1} s, beside the totals:",
                    r.interval_s
                );
                let total = |name: &str| {
                    WorkerCounters::TRAFFIC
                        .iter()
                        .chain(WorkerCounters::FLOWS)
                        .find(|k| k.name == name)
                        .map_or(self.counters.total_drops(), |k| (k.get)(&self.counters))
                };
                let mut rows = vec![
                    ["COUNTER", "TOTAL", "PER SECOND"]
                        .map(String::from)
                        .to_vec(),
                ];
                for (name, v) in &r.per_second {
                    rows.push(vec![
                        (*name).to_owned(),
                        total(name).to_string(),
                        format!("{v:.1}"),
                    ]);
                }
                table(&mut out, &rows);
            }
        }
        f.write_str(&out)
    }
}

/// `spillway reload`'s answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Reload {
    /// `live`, `building` or `queued`.
    pub result: &'static str,
    /// The live generation (`live`).
    pub generation: Option<u32>,
    /// Maglev tables being built (`building`).
    pub tables: Option<usize>,
    /// Their slots (`building`).
    pub slots: Option<u64>,
    /// For people.
    pub message: String,
}

impl Reload {
    /// The answer for a reload that went through.
    pub fn of(p: crate::Published) -> Reload {
        use crate::Published;
        let (result, generation, tables, slots) = match p {
            Published::Live(g) => ("live", Some(g), None, None),
            Published::Building { tables, slots } => ("building", None, Some(tables), Some(slots)),
            Published::Queued => ("queued", None, None, None),
        };
        Reload {
            result,
            generation,
            tables,
            slots,
            message: format!("reloaded: {p}"),
        }
    }
}

impl Display for Reload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.message)
    }
}

/// `spillway drain|undrain`'s answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Drain {
    /// `node`, `zone` or `region`.
    pub scope: String,
    /// Its name.
    pub name: String,
    /// Whether it is drained now.
    pub drained: bool,
    /// What was done, for people.
    pub message: String,
    /// The drain state could not be saved (it holds until the daemon
    /// stops).
    pub warning: Option<String>,
}

impl Display for Drain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.message)?;
        if let Some(w) = &self.warning {
            writeln!(f, "warning: {w}")?;
        }
        Ok(())
    }
}

/// Flow-state sync's counters (M36), kept by [`crate::sync`], for
/// `status` and the metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct SyncCounters {
    /// Datagrams sent (entries and requests, dumps included).
    pub sent: u64,
    /// Entries sent.
    pub entries_sent: u64,
    /// Datagrams received and accepted.
    pub received: u64,
    /// Entries inserted into the flow table.
    pub applied: u64,
    /// Entries whose flow already had a local entry (kept).
    pub existing: u64,
    /// Entries that refreshed one learned before (its idle timer and state).
    pub refreshed: u64,
    /// Refreshes sent (each: the entries this node carried since the last).
    pub refreshes: u64,
    /// Entries not inserted: no local slot for their endpoint, a backend
    /// that takes no flows here, or a full / contended table.
    pub unresolved: u64,
    /// Dump requests answered.
    pub dumps: u64,
    /// Handshakes completed: a peer's hello reply took, its session is
    /// (re)established.
    pub handshakes: u64,
    /// Peers' hellos answered.
    pub hellos: u64,
    /// Dropped: from a source that is no configured peer.
    pub drop_source: u64,
    /// Dropped: the tag does not verify (another key, or altered).
    pub drop_auth: u64,
    /// Dropped: another format version (a node of another release).
    pub drop_version: u64,
    /// Dropped: authenticated but malformed (length, magic, kind, entries,
    /// key or hash).
    pub drop_malformed: u64,
    /// Dropped: this node's own datagram (a peer list naming itself).
    pub drop_own: u64,
    /// Dropped: a sender ID that is not the one bound to the source's
    /// address (or is another peer's).
    pub drop_identity: u64,
    /// Dropped: made for an earlier epoch of this node (before it started).
    pub drop_stale: u64,
    /// Dropped: not of the peer's confirmed epoch (an earlier life of the
    /// peer, or one a handshake has not confirmed yet).
    pub drop_epoch: u64,
    /// Dropped: a sequence below the replay window.
    pub drop_old: u64,
    /// Dropped: a sequence seen before in the session (a replay).
    pub drop_replay: u64,
    /// Dropped: a hello reply to no outstanding challenge.
    pub drop_handshake: u64,
    /// Dropped: a hello not answered (one was, for that peer, just before).
    pub drop_limited: u64,
    /// Rate summaries sent (datagrams, each to one peer).
    pub rates_sent: u64,
    /// Rate summaries received (datagrams).
    pub rates_received: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// M25: a region's utilization is a number, `"unknown"` under
    /// UTILIZATION while nothing reports one, and absent under RATE without
    /// a limit.
    #[test]
    fn utilization_is_a_number_or_unknown() {
        use config::schema::BalancingMode::{Rate, Utilization as Util};
        let json = |u: Option<Utilization>| serde_json::to_string(&u).unwrap();
        assert_eq!(
            Utilization::of(Util, Some(0.5)),
            Some(Utilization::Known(0.5))
        );
        assert_eq!(
            Utilization::of(Rate, Some(1.5)),
            Some(Utilization::Known(1.5))
        );
        assert_eq!(Utilization::of(Util, None), Some(Utilization::Unknown));
        assert_eq!(Utilization::of(Rate, None), None);
        assert_eq!(json(Utilization::of(Util, Some(0.5))), "0.5");
        assert_eq!(json(Utilization::of(Util, None)), "\"unknown\"");
        assert_eq!(json(Utilization::of(Rate, None)), "null");
        assert_eq!(Utilization::Known(0.456).to_string(), "0.46");
        assert_eq!(Utilization::Unknown.to_string(), "unknown");
    }

    #[test]
    fn answers_are_one_json_line_with_ok() {
        let r = Reload::of(crate::Published::Live(7));
        assert_eq!(
            json_ok(&r),
            "{\"ok\":true,\"result\":\"live\",\"generation\":7,\"tables\":null,\"slots\":null,\"message\":\"reloaded: generation 7 is live\"}\n"
        );
        assert_eq!(r.to_string(), "reloaded: generation 7 is live\n");
        assert_eq!(
            json_error("bad \"x\"\n"),
            "{\"ok\":false,\"error\":\"bad \\\"x\\\"\"}\n"
        );
    }

    #[test]
    fn tables_line_up() {
        let mut out = String::new();
        table(
            &mut out,
            &[
                vec!["A".into(), "BB".into()],
                vec!["ccc".into(), "d".into()],
            ],
        );
        assert_eq!(out, "  A    BB\n  ccc  d\n");
    }
}
