//! Config → snapshot: names resolved to dense indices, regions ordered by
//! preference, zones interned, and the rule index built.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;

use super::rules::build_index;
use super::{
    Balancing, ChildRule, ChildRuleId, Compiled, Composite, CompositeId, DEFAULT_MAX_UTILIZATION,
    Delivery, Endpoint, GUE_PORT, GatewayEndpoint, Group, GroupId, HealthCheckId, NodeInfo,
    RegionId, Rule, RuleId, Service, ServiceId, Settings, VipProbe, ZoneId, dense, flow_tags,
};
use super::{IngressPolicy, url_host};
use crate::schema::{
    BackendService, Config, DeliveryMode, HealthCheckTarget, Protocol, RemoteRule, RuleMode,
};
use crate::values::Prefix;

/// Names in order of first appearance, each with its index.
#[derive(Default)]
struct Interned {
    list: Vec<String>,
    index: HashMap<String, u32>,
}

impl Interned {
    fn intern(&mut self, name: &str) -> u32 {
        if let Some(&i) = self.index.get(name) {
            return i;
        }
        let i = dense(self.list.len());
        self.list.push(name.to_owned());
        self.index.insert(name.to_owned(), i);
        i
    }
}

/// Name -> index of the first entry of that name (validation made names
/// unique): looked up once per reference, so compiling stays O(n log n).
fn positions<'a, T>(items: &'a [T], name: impl Fn(&'a T) -> &'a str) -> HashMap<&'a str, usize> {
    let mut m = HashMap::with_capacity(items.len());
    for (i, x) in items.iter().enumerate() {
        m.entry(name(x)).or_insert(i);
    }
    m
}

/// Compiles a config that passed `validate` (unresolvable names cannot
/// occur; should one, it would resolve to index 0 rather than panic).
///
/// Read it as the list of stages, in order. Zones are interned as they are
/// met (the node's, then the groups', then the client zones'), so that
/// order is part of the output.
pub(crate) fn compile(cfg: &Config) -> Compiled {
    let regions = region_order(cfg);
    let names = Names::new(cfg, &regions);
    let mut zones = Interned::default();
    let node_zone = ZoneId(zones.intern(&cfg.node.zone));
    let Backends {
        mut services,
        groups,
        endpoints,
    } = backends(cfg, &names, &mut zones);
    let (rules, children) = forwarding_rules(cfg, &names, &mut services);
    let rule_index = build_index(&rules, &children);
    let mut gateways = gateway_endpoints(&rules);
    assign_flow_tags(&mut services, &mut gateways, &rules);
    gateways.sort_by_key(|g| g.address);
    let composites = composites(cfg, &names, &services);
    let client_zones = client_zones(cfg, &mut zones);
    let vip_probes = vip_probes(cfg, &services, &endpoints, &rules, &children);
    let node = node_info(cfg, &names, node_zone);
    Compiled {
        node,
        rules,
        children,
        rule_index,
        services,
        groups,
        endpoints,
        health_checks: cfg.health_checks.clone(),
        composites,
        regions,
        zones: zones.list,
        client_zones,
        gateways,
        settings: settings(cfg),
        vip_probes,
        tunnel_ingress: ingress_policy(cfg),
    }
}

/// The regions in the order a [`RegionId`] numbers them: the node's
/// preference (its own region when none is given), then every other
/// region a group or the node names, by name.
fn region_order(cfg: &Config) -> Vec<String> {
    let mut regions: Vec<String> = cfg.node.region_preference.clone();
    if regions.is_empty() {
        regions.push(cfg.node.region.clone());
    }
    let preferred: HashSet<&str> = regions.iter().map(String::as_str).collect();
    let mut others: Vec<&str> = cfg
        .backend_services
        .iter()
        .flat_map(|s| &s.groups)
        .map(|g| g.region.as_str())
        .chain([cfg.node.region.as_str()])
        .filter(|r| !preferred.contains(r))
        .collect();
    others.sort_unstable();
    others.dedup();
    regions.extend(others.into_iter().map(str::to_owned));
    regions
}

/// Region and service names → their dense ids, for the stages that
/// resolve references.
struct Names<'a> {
    regions: HashMap<&'a str, usize>,
    services: HashMap<&'a str, usize>,
}

impl<'a> Names<'a> {
    fn new(cfg: &'a Config, regions: &'a [String]) -> Self {
        Names {
            regions: positions(regions, String::as_str),
            services: positions(&cfg.backend_services, |s| s.name.as_str()),
        }
    }

    fn region(&self, name: &str) -> RegionId {
        RegionId(self.regions.get(name).map_or(0, |&i| dense(i)))
    }

    fn service(&self, name: &str) -> ServiceId {
        ServiceId(self.services.get(name).map_or(0, |&i| dense(i)))
    }
}

/// Services, groups and endpoints, each dense and in file order: a
/// service's groups and a group's endpoints are contiguous ranges.
#[derive(Default)]
struct Backends {
    services: Vec<Service>,
    groups: Vec<Group>,
    endpoints: Vec<Endpoint>,
}

/// The backend services with their groups and endpoints. Services have
/// no rules and no flow tag yet: [`forwarding_rules`] and
/// [`assign_flow_tags`] fill those in.
fn backends(cfg: &Config, names: &Names<'_>, zones: &mut Interned) -> Backends {
    let checks = positions(&cfg.health_checks, |h| h.name.as_str());
    let hc_id = |name: &str| checks.get(name).map(|&i| HealthCheckId(dense(i)));
    // Services an appliance (gateway) rule sends to: fail open by default.
    let gateway_services: HashSet<&str> = cfg
        .forwarding_rules
        .iter()
        .filter(|r| r.mode == RuleMode::Gateway)
        .map(|r| r.backend_service.as_str())
        .collect();

    let mut b = Backends::default();
    for (si, s) in cfg.backend_services.iter().enumerate() {
        let sid = ServiceId(dense(si));
        let check = s.health_check.as_deref().and_then(hc_id);
        let check_port = check.and_then(|c| cfg.health_checks[c.index()].port);
        let g_start = dense(b.groups.len());
        let e_start = dense(b.endpoints.len());
        for g in &s.groups {
            let gid = GroupId(dense(b.groups.len()));
            let ge_start = dense(b.endpoints.len());
            b.endpoints.extend(
                g.endpoints
                    .iter()
                    .map(|e| endpoint(e, check_port, gid, sid)),
            );
            if let Some(r) = &g.remote {
                b.endpoints.push(remote_endpoint(r, gid, sid));
            }
            b.groups.push(Group {
                name: g.name.clone(),
                service: sid,
                region: names.region(&g.region),
                zone: ZoneId(zones.intern(&g.zone)),
                capacity_scaler: g.capacity_scaler,
                max_rate: g.max_rate,
                max_utilization: g.max_utilization,
                endpoints: ge_start..dense(b.endpoints.len()),
                remote: g.remote.clone(),
            });
        }
        b.services.push(Service {
            name: s.name.clone(),
            delivery: delivery(s),
            session_affinity: s.session_affinity,
            connection_persistence: s.connection_persistence,
            connection_draining_timeout: s.connection_draining_timeout.get(),
            load_balancing: s.load_balancing,
            maglev_table_size: s.maglev_table_size,
            hash: s.hash,
            health_check: check,
            aggregation: s.aggregation,
            fail_open: s
                .fail_open
                .unwrap_or_else(|| gateway_services.contains(s.name.as_str())),
            no_backend_action: s.no_backend_action,
            no_backend_fallback: s.no_backend_fallback,
            balancing: Balancing {
                mode: s.balancing_mode,
                max_rate_per_endpoint: s.max_rate_per_endpoint,
                max_utilization: s.max_utilization.unwrap_or(DEFAULT_MAX_UTILIZATION),
            },
            locality: s.locality,
            kind: s.groups.first().map(|g| g.kind).unwrap_or_default(),
            groups: g_start..dense(b.groups.len()),
            endpoints: e_start..dense(b.endpoints.len()),
            rules: Vec::new(),
            flow_tag: 0,
        });
    }
    b
}

/// A configured endpoint; probed on the service's check port if it has
/// one, else on its own port.
fn endpoint(
    e: &crate::schema::Endpoint,
    check_port: Option<u16>,
    group: GroupId,
    service: ServiceId,
) -> Endpoint {
    let identity = match (e.address, e.port) {
        (a, None) => a.to_string(),
        (IpAddr::V4(a), Some(p)) => format!("{a}:{p}"),
        (IpAddr::V6(a), Some(p)) => format!("[{a}]:{p}"),
    };
    Endpoint {
        address: e.address,
        address6: e.address6,
        port: e.port,
        health_port: check_port.or(e.port),
        weight: e.weight,
        mac: e.mac,
        identity,
        group,
        service,
    }
}

/// The endpoint standing for a `remote_rule` group: the peer's VIP, last
/// in its group, never probed here.
fn remote_endpoint(r: &RemoteRule, group: GroupId, service: ServiceId) -> Endpoint {
    Endpoint {
        address: r.vip,
        address6: None,
        port: None,
        health_port: None,
        weight: 100,
        mac: None,
        identity: format!("remote:{}", r.rule),
        group,
        service,
    }
}

/// A service's delivery mode with its defaults resolved.
fn delivery(s: &BackendService) -> Delivery {
    let geneve = s.geneve.unwrap_or_default();
    match s.delivery {
        DeliveryMode::L2dsr => Delivery::L2dsr,
        DeliveryMode::Ipip => Delivery::Ipip,
        DeliveryMode::Gre => Delivery::Gre { key: s.gre_key },
        DeliveryMode::Gue => Delivery::Gue {
            port: s.gue_port.unwrap_or(GUE_PORT),
        },
        DeliveryMode::Geneve => Delivery::Geneve {
            port: geneve.port,
            option_class: geneve.option_class,
            endpoint_id_type: geneve.endpoint_id_type,
            flow_cookie_type: geneve.flow_cookie_type,
        },
    }
}

/// The forwarding rules and their child rules (one per VIP, M5), in file
/// order; each rule is recorded in its service's `rules`.
fn forwarding_rules(
    cfg: &Config,
    names: &Names<'_>,
    services: &mut [Service],
) -> (Vec<Rule>, Vec<ChildRule>) {
    let destinations = positions(&cfg.composite_health_checks, |c| c.destination.as_str());
    let composite_of = |rule: &str| destinations.get(rule).map(|&i| CompositeId(dense(i)));
    let mut rules = Vec::new();
    let mut children = Vec::new();
    for (ri, r) in cfg.forwarding_rules.iter().enumerate() {
        let rid = RuleId(dense(ri));
        let service = names.service(&r.backend_service);
        if let Some(s) = services.get_mut(service.index()) {
            s.rules.push(rid);
        }
        let mut kids = Vec::new();
        for (ag, vip) in r.vips.iter().enumerate() {
            // Validation allows one or two VIPs a rule.
            let ag = u8::try_from(ag).unwrap_or(u8::MAX);
            kids.push(ChildRuleId(dense(children.len())));
            children.push(ChildRule {
                name: format!("{}-ag{ag}", r.name),
                rule: rid,
                availability_group: ag,
                // A prefix is keyed, probed and reported by one address.
                vip: vip.probe_addr(),
                vip_len: vip.len,
                allocated: r.vips_from_pool,
                served: cfg.node.availability_group.is_none_or(|g| g == ag),
            });
        }
        rules.push(Rule {
            name: r.name.clone(),
            protocol: r.protocol,
            ports: r.ports.clone(),
            mode: r.mode,
            service,
            children: kids,
            gateway_endpoints: r.gateway_endpoints.clone(),
            composite: composite_of(&r.name),
            answer_ping: r
                .answer_ping
                .unwrap_or(r.mode == RuleMode::Passthrough && r.protocol != Protocol::L3Default),
            source_ranges: r.source_ranges.clone(),
        });
    }
    (rules, children)
}

/// The gateway endpoints (M31) of every rule, in rule order, untagged.
fn gateway_endpoints(rules: &[Rule]) -> Vec<GatewayEndpoint> {
    rules
        .iter()
        .enumerate()
        .flat_map(|(i, r)| {
            r.gateway_endpoints.iter().map(move |g| GatewayEndpoint {
                address: g.address,
                id: g.id,
                tunnel: g.tunnel,
                rule: RuleId(dense(i)),
                service: r.service,
                flow_tag: 0,
            })
        })
        .collect()
}

/// Flow tags for the services and the gateway endpoints, each a tag of its
/// own: tenants behind different endpoints never share a flow entry. Tags
/// are drawn with the services' from one set of names, so none collides
/// with a service's; an endpoint's name is its rule's and its ID, so it
/// keeps its tag (and its flows) across reloads that reorder the file.
/// `gateways` in rule order, as [`gateway_endpoints`] made them.
fn assign_flow_tags(services: &mut [Service], gateways: &mut [GatewayEndpoint], rules: &[Rule]) {
    let gateway_names: Vec<String> = gateways
        .iter()
        .map(|g| {
            let rule = rules.get(g.rule.index()).map_or("", |r| r.name.as_str());
            format!("{rule}\0gateway\0{:#x}", g.id)
        })
        .collect();
    let names: Vec<&str> = services
        .iter()
        .map(|s| s.name.as_str())
        .chain(gateway_names.iter().map(String::as_str))
        .collect();
    let tags = flow_tags(&names);
    let (svc_tags, gw_tags) = tags.split_at(services.len().min(tags.len()));
    for (s, &t) in services.iter_mut().zip(svc_tags) {
        s.flow_tag = t;
    }
    for (g, &t) in gateways.iter_mut().zip(gw_tags) {
        g.flow_tag = t;
    }
}

/// The composite health checks, each source's aggregation defaulting to
/// its service's.
fn composites(cfg: &Config, names: &Names<'_>, services: &[Service]) -> Vec<Composite> {
    let rule_names = positions(&cfg.forwarding_rules, |r| r.name.as_str());
    cfg.composite_health_checks
        .iter()
        .map(|c| Composite {
            name: c.name.clone(),
            sources: c
                .sources
                .iter()
                .map(|s| {
                    let sid = names.service(&s.backend_service);
                    let own = services
                        .get(sid.index())
                        .map(|x| x.aggregation)
                        .unwrap_or_default();
                    (sid, s.aggregation.unwrap_or(own))
                })
                .collect(),
            destination: RuleId(
                rule_names
                    .get(c.destination.as_str())
                    .map_or(0, |&i| dense(i)),
            ),
        })
        .collect()
}

/// Client prefixes with their zones, longest prefix first (the order
/// [`Compiled::client_zone`] matches in).
fn client_zones(cfg: &Config, zones: &mut Interned) -> Vec<(Prefix, ZoneId)> {
    let mut client_zones: Vec<(Prefix, ZoneId)> = cfg
        .client_zones
        .iter()
        .flat_map(|z| z.prefixes.iter().map(move |p| (*p, z.zone.as_str())))
        .map(|(p, z)| (p, ZoneId(zones.intern(z))))
        .collect();
    client_zones.sort_by(|a, b| b.0.len.cmp(&a.0.len).then(a.0.cmp(&b.0)));
    client_zones
}

/// `[node]`, resolved.
fn node_info(cfg: &Config, names: &Names<'_>, zone: ZoneId) -> NodeInfo {
    NodeInfo {
        name: cfg.node.name.clone(),
        region: names.region(&cfg.node.region),
        zone,
        availability_group: cfg.node.availability_group,
        shutdown_drain: cfg.node.shutdown_drain.get(),
        capacity_share: cfg
            .node
            .capacity_share
            .unwrap_or_else(|| default_capacity_share(cfg)),
        capacity_share_set: cfg.node.capacity_share.is_some(),
    }
}

/// The node-wide sections, carried over with what they imply resolved
/// (exception ports' data ports, the flow-sync key).
fn settings(cfg: &Config) -> Settings {
    Settings {
        dataplane: cfg.dataplane.clone(),
        ports: cfg.ports.clone(),
        exception_for: exception_for(&cfg.ports),
        bgp: cfg.bgp.clone(),
        flow_sync: cfg.flow_sync.clone(),
        vrrp: cfg.vrrp.clone(),
        flow_sync_key: cfg.flow_sync.as_ref().and_then(|f| f.resolve_key().ok()),
        metrics: cfg.metrics.clone(),
        control: cfg.control.clone(),
        neighbours: cfg.neighbours.clone(),
    }
}

/// `[tunnel_ingress]` with its defaults resolved (M49).
fn ingress_policy(cfg: &Config) -> IngressPolicy {
    use crate::schema::{GroupKind, TunnelProtocol};
    let t = cfg.tunnel_ingress.clone().unwrap_or_default();
    let on = |p: TunnelProtocol| t.enabled && t.protocols.contains(&p);
    let allow = match &t.allow {
        Some(list) => list.clone(),
        // The remote_rule peers: where this node sends its own spillover,
        // which in a symmetric pair is also where spillover comes from.
        None => {
            let mut peers: Vec<Prefix> = cfg
                .backend_services
                .iter()
                .flat_map(|s| &s.groups)
                .filter(|g| g.kind == GroupKind::RemoteRule)
                .filter_map(|g| g.remote.as_ref())
                .flat_map(|r| [Some(r.vip), url_host(&r.status_url)])
                .flatten()
                .map(Prefix::host)
                .collect();
            peers.sort_unstable();
            peers.dedup();
            peers
        }
    };
    IngressPolicy {
        ipip: on(TunnelProtocol::Ipip),
        gre: on(TunnelProtocol::Gre),
        gue_port: on(TunnelProtocol::Gue).then_some(t.gue_port),
        geneve_port: on(TunnelProtocol::Geneve).then_some(t.geneve_port),
        tunnel_ports: [t.gue_port, t.geneve_port],
        allow,
    }
}

/// The data port each exception port stands for (validated: a data port,
/// at most one exception port each).
fn exception_for(ports: &[crate::schema::Port]) -> Vec<Option<usize>> {
    use crate::schema::PortRole;
    let uplink = ports.iter().position(|p| p.role == PortRole::Uplink);
    ports
        .iter()
        .map(|p| match (&p.role, &p.for_port) {
            (PortRole::Exception, Some(name)) => ports
                .iter()
                .position(|q| &q.name == name && q.role != PortRole::Exception),
            (PortRole::Exception, None) => uplink,
            _ => None,
        })
        .collect()
}

/// `node.capacity_share` when absent: an even share of a cluster of this
/// node and its flow-sync peers (1 for a node without peers).
fn default_capacity_share(cfg: &Config) -> f64 {
    let peers = cfg.flow_sync.as_ref().map_or(0, |f| f.peers.len());
    1.0 / (peers as f64 + 1.0)
}

/// The probes through VIPs (M52): for each service whose check targets
/// `vip`, each endpoint with a port to probe, each distinct VIP of the
/// service's rules that this node serves (in rule order); source ports in
/// `vip_probe_ports` order. The other availability group's VIPs are left
/// out (M5): their nodes probe them, and a failure on that path must not
/// touch this node's group. Validation made sure there are ports enough;
/// past them probes are left out rather than given a port twice.
fn vip_probes(
    cfg: &Config,
    services: &[Service],
    endpoints: &[Endpoint],
    rules: &[Rule],
    children: &[ChildRule],
) -> Vec<VipProbe> {
    let mut ports = cfg
        .dataplane
        .vip_probe_ports
        .ranges()
        .into_iter()
        .flat_map(|r| r.lo..=r.hi);
    let mut out = Vec::new();
    for svc in services {
        let vip_check = svc
            .health_check
            .and_then(|c| cfg.health_checks.get(c.index()))
            .is_some_and(|h| h.target == HealthCheckTarget::Vip);
        if !vip_check {
            continue;
        }
        let vips = super::rules::service_vips(rules, children, &svc.rules, true);
        for id in svc.endpoint_ids() {
            let Some(port) = endpoints.get(id.index()).and_then(|e| e.health_port) else {
                continue;
            };
            for &vip in &vips {
                let Some(source_port) = ports.next() else {
                    return out;
                };
                out.push(VipProbe {
                    endpoint: id,
                    vip,
                    port,
                    source_port,
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compiled::fixture::load;

    #[test]
    fn services_groups_and_endpoints_are_dense_and_resolved() {
        let text = r#"
[node]
name = "n1"
region = "eu"
zone = "eu-a"
region_preference = ["eu", "us"]

[[health_checks]]
name = "hc"
type = "TCP"
port = 8080

[[backend_services]]
name = "a"
delivery = "gue"
health_check = "hc"
[[backend_services.groups]]
name = "us"
region = "us"
zone = "us-a"
endpoints = [{ address = "10.2.0.1", weight = 7 }]
[[backend_services.groups]]
name = "eu"
region = "eu"
zone = "eu-b"
endpoints = [{ address = "10.1.0.1", port = 80 }, { address = "fd00::1", port = 80 }]

[[backend_services]]
name = "b"
delivery = "geneve"
geneve = { option_class = 0x0200 }
[[backend_services.groups]]
name = "g"
region = "ap"
zone = "ap-a"
endpoints = [{ address = "10.3.0.1" }]

[[forwarding_rules]]
name = "r1"
vips = ["10.0.0.1"]
protocol = "TCP"
ports = 80
backend_service = "a"
[[forwarding_rules]]
name = "r2"
vips = ["10.0.0.2"]
protocol = "UDP"
backend_service = "a"
"#;
        let c = load(text).unwrap().compiled;
        assert_eq!(c.regions, ["eu", "us", "ap"]);
        assert_eq!(c.services.len(), 2);
        let a = &c.services[0];
        assert_eq!(a.delivery, Delivery::Gue { port: GUE_PORT });
        assert_eq!(a.rules, [RuleId(0), RuleId(1)]);
        assert_eq!(a.health_check, Some(HealthCheckId(0)));
        assert_eq!(a.group_ids().collect::<Vec<_>>(), [GroupId(0), GroupId(1)]);
        let eps: Vec<(&str, u16, Option<u16>)> = c
            .service_endpoints(ServiceId(0))
            .iter()
            .map(|e| (e.identity.as_str(), e.weight, e.health_port))
            .collect();
        assert_eq!(
            eps,
            [
                ("10.2.0.1", 7, Some(8080)),
                ("10.1.0.1:80", 100, Some(8080)),
                ("[fd00::1]:80", 100, Some(8080))
            ]
        );
        assert_eq!(c.groups[0].region, RegionId(1));
        assert_eq!(c.groups[1].region, RegionId(0));
        assert_eq!(c.node.region, RegionId(0));
        assert_eq!(c.endpoints[2].group, GroupId(1));
        let b = &c.services[1];
        assert_eq!(
            b.delivery,
            Delivery::Geneve {
                port: 6081,
                option_class: 0x0200,
                endpoint_id_type: 1,
                flow_cookie_type: 3
            }
        );
        assert_eq!(c.service_endpoints(ServiceId(1))[0].service, ServiceId(1));
        assert_eq!(c.groups[2].region.index(), 2);
    }
}
