//! The `spillway status` report, made of the live snapshot, the core's
//! counters and its parts' state.

use dataplane::BackendState;

use super::neighbours::mac_text;
use super::{Core, FlowUse};

impl Core {
    /// `spillway status`.
    pub(super) fn status_report(&self, flows: FlowUse) -> crate::report::Status {
        use crate::report;
        let snap = &self.live;
        let name = |v: &[String], i: usize| v.get(i).map_or("?", String::as_str).to_owned();
        let mut st = report::Status {
            node: self.compiled.node.name.clone(),
            region: name(&self.compiled.regions, self.compiled.node.region.index()),
            zone: name(&self.compiled.zones, self.compiled.node.zone.index()),
            availability_group: self.compiled.node.availability_group,
            uptime_s: self.tick_now().get(),
            generation: snap.generation,
            reloads_ok: self.reloads_ok,
            reloads_rejected: self.reloads_failed,
            flow_table: report::FlowTable {
                live: flows.live,
                capacity: flows.capacity,
                half_open: flows.half_open,
                memory: flows.memory,
            },
            building: self.pending.as_ref().map(|p| report::Building {
                tables: p.tables,
                slots: p.slots,
                seconds: self.now.saturating_sub(p.started).as_secs_f64(),
            }),
            rules: Vec::new(),
            // The live snapshot's own configuration names its services (a
            // reloaded one may still be waiting for its tables).
            services: snap
                .compiled
                .services
                .iter()
                .zip(&snap.services)
                .map(|(svc, plan)| report::Service {
                    name: svc.name.clone(),
                    delivery: svc.delivery.to_string(),
                    eligible_backends: Some(if plan.last_resort {
                        0
                    } else {
                        plan.eligible_slots().len()
                    }),
                    last_resort_backends: if plan.last_resort {
                        plan.eligible_slots().len()
                    } else {
                        0
                    },
                    health: None,
                    eligibility: None,
                    degraded: false,
                    overloaded: false,
                    capacity: None,
                    regions: Vec::new(),
                    zones: Vec::new(),
                })
                .collect(),
            drain_ignored: Vec::new(),
            backends: snap
                .backends
                .iter()
                .enumerate()
                .map(|(i, b)| {
                    let (state, until) = (b.state.name(), b.state.until());
                    report::Backend {
                        index: i,
                        address: b.addr,
                        address6: b.v6.as_ref().map(|p| p.addr),
                        state,
                        until,
                        // M47: its next hop has no MAC: no new flows, its
                        // packets dropped.
                        neighbour_resolved: (b.mac != [0; 6]
                            && b.v6.as_ref().is_none_or(|p| p.mac != [0; 6]))
                            || b.state == BackendState::Removed,
                    }
                })
                .collect(),
            // M31: an unresolved endpoint's traffic is not recognised.
            gateways: snap
                .gateways
                .iter()
                .map(|g| report::Gateway {
                    address: g.address,
                    id: g.id,
                    rule: snap
                        .compiled
                        .children
                        .get(g.child)
                        .map_or("?", |c| c.name.as_str())
                        .to_owned(),
                    port: g.port,
                    mac: (g.mac != [0; 6]).then(|| mac_text(g.mac)),
                    tunnel: g.remote.as_ref().map(|_| "geneve"),
                })
                .collect(),
            neighbours: self
                .neighbours
                .entries()
                .iter()
                .map(|e| report::Neighbour {
                    address: e.hop.addr,
                    port: e.hop.port,
                    state: e.state.name(),
                    mac: e.mac.map(mac_text),
                })
                .collect(),
            neighbour_totals: None,
            vrrp: self
                .vrrp
                .groups()
                .iter()
                .map(|g| report::VrrpGroup {
                    vrid: g.spec().vrid,
                    family: if g.spec().src.is_ipv4() {
                        "IPv4"
                    } else {
                        "IPv6"
                    },
                    port: g.spec().port,
                    state: g.state().name(),
                    since_s: self.now.saturating_sub(g.since()).as_secs_f64(),
                    priority: g.priority(),
                    configured_priority: g.spec().priority,
                    unfit: g.unfit().then_some("drained or its rules unhealthy"),
                    master: g.master(),
                    vips: g.spec().vips.clone(),
                    sent: g.counts.sent,
                    received: g.counts.received,
                    became_master: g.counts.became_master,
                    addresses_differ: g.counts.addresses_differ,
                })
                .collect(),
            vrrp_refused: (!self.vrrp.groups().is_empty()).then(|| {
                crate::vrrp::Refusal::ALL
                    .iter()
                    .zip(self.vrrp.refused)
                    .map(|(r, n)| (r.label(), n))
                    .collect()
            }),
            remote_rules: Vec::new(),
            health: Vec::new(),
            shutting_down_s: self
                .shutdown_at
                .map(|t| t.saturating_sub(self.now).as_secs_f64().ceil()),
            drained: self
                .drained
                .iter()
                .map(|(scope, name)| report::Drained {
                    scope: scope.to_string(),
                    name: name.to_string(),
                })
                .collect(),
            flow_sync: self.sync.as_ref().map(crate::sync::SyncState::status),
            cluster: self.balance.cluster(self.now),
            bgp: None,
            speaker: None,
            last_reload_error: self.last_error.clone(),
        };
        let n = &self.neighbours;
        if !n.entries().is_empty() || n.ignored > 0 {
            st.neighbour_totals = Some(report::NeighbourTotals {
                resolved: n.resolved_total,
                failed: n.failed_total,
                mac_changes: n.mac_changes,
                ignored: n.ignored,
            });
        }
        self.balance.status(&self.compiled, &mut st);
        if let Some(d) = self.announcements.current() {
            let (up, down) = self.announcement_counts();
            st.bgp = Some(report::Bgp {
                announcements: up,
                withdrawals: down,
                vips: d
                    .iter()
                    .map(|(vip, why)| report::BgpVip {
                        vip: *vip,
                        announced: why.announced(),
                        why: why.to_string(),
                    })
                    .collect(),
            });
            for v in st.rules.iter_mut().flat_map(|r| r.vips.iter_mut()) {
                if v.served {
                    v.bgp = d
                        .iter()
                        .find(|(a, _)| *a == v.vip)
                        .map(|(_, w)| w.to_string());
                }
            }
        }
        st
    }
}
