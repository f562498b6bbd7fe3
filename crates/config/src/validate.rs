//! Every semantic rule of the configuration, checked in one pass that
//! collects all problems (an operator fixing a file wants the whole list,
//! not one error per attempt).
//!
//! Rules speak in field paths; `SourceMap` turns them into `file:line:col`.
//! Problems that make the config wrong are errors (the config is rejected);
//! things that are allowed but probably not meant are warnings.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;

use crate::Env;
use crate::error::{ConfigError, ConfigErrors, SourceMap};
use crate::schema::{
    BackendService, BalancingMode, Config, DeliveryMode, GroupKind, HealthCheckType, LoadBalancing,
    Protocol, RuleMode,
};

/// The burst size the data plane's workers use whatever `burst_size` says
/// (`dataplane::BURST`; a test of the binary checks that they agree).
pub const FIXED_BURST: usize = 32;
/// Most endpoints' weight (relative, like the health-check header of M17).
pub const MAX_WEIGHT: u16 = 1000;
/// Most sources of a composite health check (M20).
pub const MAX_COMPOSITE_SOURCES: usize = 10;
/// Largest Maglev table accepted (the table is rebuilt on every health
/// change; one of this size takes about 2 s to build, see
/// `memory::BUILD_NS_PER_SLOT`, and validation warns of rebuilds over
/// [`MAX_REBUILD_TIME`]).
pub const MAX_TABLE_SIZE: u32 = 16_777_216;
/// Longest a full rebuild of every Maglev table may take before
/// validation warns: the management core republishes locality decisions
/// every second (M29).
pub const MAX_REBUILD_TIME: std::time::Duration = std::time::Duration::from_secs(1);
/// Most connections a management listener serves at once (M50).
pub const MAX_LISTENER_CONNECTIONS: u32 = 4096;
/// Longest a management listener waits for a request (M50): longer only
/// lets slow clients hold connection slots longer.
pub const MAX_LISTENER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// Whether an endpoint of family `endpoint` can carry traffic to a VIP of
/// family `vip` with `delivery` (M4, M8).
pub fn family_compatible(delivery: DeliveryMode, vip: IpAddr, endpoint: IpAddr) -> bool {
    match delivery {
        // Only the MAC is rewritten: the endpoint answers on the VIP's family.
        DeliveryMode::L2dsr => vip.is_ipv4() == endpoint.is_ipv4(),
        // IPv4-in-IPv4, IPv6-in-IPv6 and 4-in-6; no 6-in-4 (M8).
        DeliveryMode::Ipip => vip.is_ipv4() || endpoint.is_ipv6(),
        // The outer header's family is the endpoint's; the inner may be any.
        DeliveryMode::Gre | DeliveryMode::Gue | DeliveryMode::Geneve => true,
    }
}

fn family(a: IpAddr) -> &'static str {
    if a.is_ipv4() { "IPv4" } else { "IPv6" }
}

fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

struct Checker<'a> {
    map: &'a SourceMap,
    cfg: &'a Config,
    env: &'a Env,
    errors: Vec<ConfigError>,
    warnings: Vec<ConfigError>,
}

/// Checks `cfg`; returns its warnings, or every error.
pub fn validate(cfg: &Config, map: &SourceMap, env: &Env) -> Result<Vec<String>, ConfigErrors> {
    let mut c = Checker {
        map,
        cfg,
        env,
        errors: Vec::new(),
        warnings: Vec::new(),
    };
    c.node();
    c.dataplane();
    c.ports();
    c.rules();
    c.services();
    c.health_checks();
    c.composites();
    c.client_zones();
    c.bgp();
    c.flow_sync();
    c.control();
    c.not_used();
    // Last: it leaves out sizes that are already in error.
    c.memory();
    let order = |e: &ConfigError| (e.line, e.col);
    c.errors.sort_by_key(order);
    c.errors.dedup();
    c.warnings.sort_by_key(order);
    c.warnings.dedup();
    if c.errors.is_empty() {
        Ok(c.warnings.iter().map(|w| format!("warning: {w}")).collect())
    } else {
        Err(ConfigErrors { errors: c.errors })
    }
}

impl Checker<'_> {
    fn err(&mut self, path: &str, msg: impl Into<String>) {
        self.errors.push(self.map.error(path, msg.into()));
    }

    fn warn(&mut self, path: &str, msg: impl Into<String>) {
        self.warnings.push(self.map.error(path, msg.into()));
    }

    fn at(&self, path: &str) -> String {
        self.map.location(path)
    }

    /// Checks names of one kind: well-formed and unique. Returns name → index.
    fn names<'n>(
        &mut self,
        what: &str,
        items: impl Iterator<Item = (String, &'n str)>,
    ) -> HashMap<&'n str, usize> {
        let mut seen: HashMap<&str, (usize, String)> = HashMap::new();
        for (i, (path, name)) in items.enumerate() {
            if !valid_name(name) {
                self.err(
                    &path,
                    format!("{what} name {name:?} must be 1-63 characters of letters, digits, '-', '_' or '.'"),
                );
            }
            match seen.get(name) {
                Some((_, first)) => {
                    let at = self.at(first);
                    self.err(
                        &path,
                        format!("duplicate {what} name {name:?} (first defined at {at})"),
                    );
                }
                None => {
                    seen.insert(name, (i, path));
                }
            }
        }
        seen.into_iter().map(|(k, (i, _))| (k, i)).collect()
    }

    fn node(&mut self) {
        let n = &self.cfg.node;
        for (f, v) in [("name", &n.name), ("region", &n.region), ("zone", &n.zone)] {
            if !valid_name(v) {
                self.err(
                    &format!("node.{f}"),
                    format!("{v:?} must be 1-63 characters of letters, digits, '-', '_' or '.'"),
                );
            }
        }
        if let Some(ag) = n.availability_group
            && ag > 1
        {
            self.err("node.availability_group", format!("availability group {ag} does not exist: write 0 or 1, or leave it out to serve both"));
        }
        let mut seen = HashSet::new();
        for (i, r) in n.region_preference.iter().enumerate() {
            if !seen.insert(r.as_str()) {
                self.err(
                    &format!("node.region_preference[{i}]"),
                    format!("region {r:?} is listed twice"),
                );
            }
        }
        if !n.region_preference.is_empty() && !seen.contains(n.region.as_str()) {
            self.err(
                "node.region_preference",
                format!(
                    "the node's own region {:?} is missing from its preference order",
                    n.region
                ),
            );
        }
    }

    fn dataplane(&mut self) {
        let d = &self.cfg.dataplane;
        let online = self.env.online_cpus.clone();
        let exists = |c: u32| online.as_ref().is_none_or(|o| o.contains(&c));
        let online_list = || {
            online
                .as_ref()
                .map(|o| o.iter().map(u32::to_string).collect::<Vec<_>>().join(","))
                .unwrap_or_default()
        };
        if d.worker_cores.is_empty() {
            self.err(
                "dataplane.worker_cores",
                "at least one worker core is needed",
            );
        }
        let mut seen = HashSet::new();
        for (i, &c) in d.worker_cores.iter().enumerate() {
            let p = format!("dataplane.worker_cores[{i}]");
            if !exists(c) {
                self.err(
                    &p,
                    format!(
                        "core {c} does not exist on this machine (online: {})",
                        online_list()
                    ),
                );
            }
            if !seen.insert(c) {
                self.err(&p, format!("core {c} is listed twice"));
            }
            if c == d.management_core {
                self.warn(
                    &p,
                    format!(
                        "core {c} is also the management core: this worker shares it (fine for a \
                         lab or a small machine; in production give workers cores of their own)"
                    ),
                );
            }
        }
        if !exists(d.management_core) {
            self.err(
                "dataplane.management_core",
                format!(
                    "core {} does not exist on this machine (online: {})",
                    d.management_core,
                    online_list()
                ),
            );
        }
        if !(1..=512).contains(&d.burst_size) {
            self.err(
                "dataplane.burst_size",
                format!("burst size {} is out of range 1-512", d.burst_size),
            );
        }
        if !d.queue_descriptors.is_power_of_two() || !(64..=4096).contains(&d.queue_descriptors) {
            self.err(
                "dataplane.queue_descriptors",
                format!(
                    "{} descriptors: expected a power of two from 64 to 4096",
                    d.queue_descriptors
                ),
            );
        }
        let need = u64::from(d.queue_descriptors)
            * 2
            * d.worker_cores.len() as u64
            * self.cfg.ports.len().max(1) as u64
            + u64::from(d.burst_size) * d.worker_cores.len() as u64;
        if u64::from(d.mbufs) < need {
            self.err(
                "dataplane.mbufs",
                format!(
                    "{} mbufs cannot fill the RX and TX rings: at least {need} are needed (descriptors × 2 × workers × ports + bursts)",
                    d.mbufs
                ),
            );
        }
        if d.flow_table_capacity == 0 {
            self.err(
                "dataplane.flow_table_capacity",
                "the flow table needs a capacity of at least 1",
            );
        } else if d.flow_table_capacity as usize > flowtable::MAX_CAPACITY {
            self.err(
                "dataplane.flow_table_capacity",
                format!(
                    "{} entries: the flow table holds at most {}",
                    d.flow_table_capacity,
                    flowtable::MAX_CAPACITY
                ),
            );
        }
        if d.new_flow_budget == Some(0) {
            self.err(
                "dataplane.new_flow_budget",
                "a budget of 0 would make every flow stateless: at least 1 new entry per second per worker",
            );
        }
        let t = &d.timeouts;
        for (f, v) in [
            ("tcp_established", t.tcp_established),
            ("tcp_half_open", t.tcp_half_open),
            ("tcp_closing", t.tcp_closing),
            ("udp", t.udp),
            ("other", t.other),
            ("first_packet", t.first_packet),
        ] {
            if v.is_zero() {
                self.err(
                    &format!("dataplane.timeouts.{f}"),
                    "a timeout must be longer than 0s",
                );
            }
        }
        if t.tcp_closing > t.tcp_established {
            self.err(
                "dataplane.timeouts.tcp_closing",
                format!(
                    "{} is longer than tcp_established ({}): FIN/RST must shorten a flow's life",
                    t.tcp_closing, t.tcp_established
                ),
            );
        }
        if t.tcp_half_open > t.tcp_established {
            self.err(
                "dataplane.timeouts.tcp_half_open",
                format!(
                    "{} is longer than tcp_established ({}): half-open flows must age out first",
                    t.tcp_half_open, t.tcp_established
                ),
            );
        }
    }

    fn ports(&mut self) {
        let ports = &self.cfg.ports;
        self.names(
            "port",
            ports
                .iter()
                .enumerate()
                .map(|(i, p)| (format!("ports[{i}].name"), p.name.as_str())),
        );
        let mut addrs: HashMap<IpAddr, String> = HashMap::new();
        let mut exception = None;
        for (i, p) in ports.iter().enumerate() {
            if p.device.trim().is_empty() {
                self.err(
                    &format!("ports[{i}].device"),
                    "a DPDK device name or PCI address is needed",
                );
            }
            if p.role == crate::schema::PortRole::Exception {
                if let Some(first) = exception {
                    let at = self.at(&format!("ports[{first}].role"));
                    self.err(
                        &format!("ports[{i}].role"),
                        format!(
                            "only one exception port is supported (ports[{first}] at {at} is one)"
                        ),
                    );
                }
                exception = Some(i);
            }
            for (j, a) in p.addresses.iter().enumerate() {
                let path = format!("ports[{i}].addresses[{j}]");
                if let Some(first) = addrs.get(&a.addr) {
                    let at = self.at(first);
                    self.err(
                        &path,
                        format!("address {} is already assigned at {at}", a.addr),
                    );
                } else {
                    addrs.insert(a.addr, path);
                }
            }
            if let Some(gw) = p.gateway {
                if !p.addresses.is_empty() && !p.addresses.iter().any(|a| a.contains(gw)) {
                    self.err(
                        &format!("ports[{i}].gateway"),
                        format!(
                            "gateway {gw} is not on any subnet of this port ({})",
                            join(&p.addresses)
                        ),
                    );
                }
            }
            let min = if p.addresses.iter().any(|a| a.addr.is_ipv6()) {
                1280
            } else {
                576
            };
            if !(min..=9216).contains(&p.mtu) {
                self.err(
                    &format!("ports[{i}].mtu"),
                    format!("MTU {} is out of range {min}-9216", p.mtu),
                );
            }
        }
        for (r, rule) in self.cfg.forwarding_rules.iter().enumerate() {
            for (k, v) in rule.vips.iter().enumerate() {
                if let Some(port_addr) = addrs.get(v) {
                    let at = self.at(port_addr);
                    self.err(
                        &format!("forwarding_rules[{r}].vips[{k}]"),
                        format!("VIP {v} is also the balancer's own address at {at}; host traffic to it would be load-balanced"),
                    );
                }
            }
        }
        if !self.cfg.forwarding_rules.is_empty()
            && !ports.is_empty()
            && !ports
                .iter()
                .any(|p| p.role == crate::schema::PortRole::Uplink)
        {
            self.warn(
                "ports",
                "no port has role \"uplink\": no VIP traffic can arrive",
            );
        }
    }

    fn rules(&mut self) {
        let cfg = self.cfg;
        let rules = &cfg.forwarding_rules;
        self.names(
            "forwarding rule",
            rules
                .iter()
                .enumerate()
                .map(|(i, r)| (format!("forwarding_rules[{i}].name"), r.name.as_str())),
        );
        let services: HashMap<&str, usize> = cfg
            .backend_services
            .iter()
            .enumerate()
            .map(|(i, s)| (s.name.as_str(), i))
            .collect();
        let mut gateway_sources: HashMap<IpAddr, String> = HashMap::new();
        for (i, r) in rules.iter().enumerate() {
            let p = format!("forwarding_rules[{i}]");
            match r.vips.len() {
                1 | 2 => {}
                0 => self.err(
                    &format!("{p}.vips"),
                    "a rule needs one VIP (availability group 0) or two (groups 0 and 1)",
                ),
                n => self.err(
                    &format!("{p}.vips"),
                    format!("{n} VIPs: a rule has one VIP per availability group, at most two"),
                ),
            }
            if let [a, b] = r.vips[..] {
                if a.is_ipv4() != b.is_ipv4() {
                    self.err(
                        &format!("{p}.vips[1]"),
                        format!(
                            "{b} is {} but {a} is {}: both VIPs of a rule are of one IP version",
                            family(b),
                            family(a)
                        ),
                    );
                } else if a == b {
                    self.err(
                        &format!("{p}.vips[1]"),
                        format!("{b} is given twice: each availability group needs its own VIP"),
                    );
                }
            }
            for (k, v) in r.vips.iter().enumerate() {
                if v.is_unspecified() || v.is_multicast() || v.is_loopback() {
                    self.err(&format!("{p}.vips[{k}]"), format!("{v} cannot be a VIP"));
                } else if let Some(v4) = ipv4_mapped(v) {
                    self.err(
                        &format!("{p}.vips[{k}]"),
                        format!("{v} is an IPv4-mapped IPv6 address, which never appears on the wire: write {v4}"),
                    );
                }
            }
            if r.protocol == Protocol::L3Default && !r.ports.is_all() {
                self.err(&format!("{p}.ports"), format!("L3_DEFAULT matches every port and protocol: ports must be \"all\", not \"{}\"", r.ports));
            }
            if let Some(ag) = cfg.node.availability_group
                && usize::from(ag) >= r.vips.len()
                && !r.vips.is_empty()
            {
                self.warn(&format!("{p}.vips"), format!("this node serves availability group {ag} only, and the rule has no VIP for it"));
            }
            let svc = services.get(r.backend_service.as_str()).copied();
            match svc {
                None => {
                    let known = cfg
                        .backend_services
                        .iter()
                        .map(|s| s.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ");
                    self.err(
                        &format!("{p}.backend_service"),
                        format!(
                            "no backend service is named {:?} (known: {known})",
                            r.backend_service
                        ),
                    );
                }
                Some(s) => self.rule_families(i, s),
            }
            // Gateway mode (M31): the NVAs are reached with Geneve only.
            match r.mode {
                RuleMode::Gateway => {
                    if let Some(s) = svc
                        && cfg.backend_services[s].delivery != DeliveryMode::Geneve
                    {
                        self.err(
                            &format!("{p}.mode"),
                            format!("a gateway rule sends to its appliances with Geneve, but service {:?} delivers with {}", r.backend_service, cfg.backend_services[s].delivery),
                        );
                    }
                    if r.gateway_endpoints.is_empty() {
                        self.err(
                            &format!("{p}.gateway_endpoints"),
                            "a gateway rule needs at least one gateway endpoint",
                        );
                    }
                    let mut ids = HashSet::new();
                    for (k, g) in r.gateway_endpoints.iter().enumerate() {
                        if !ids.insert(g.id) {
                            self.err(
                                &format!("{p}.gateway_endpoints[{k}].id"),
                                format!("endpoint ID {:#x} is used twice", g.id),
                            );
                        }
                        // The source address selects the rule (M31), so it
                        // may belong to one rule only.
                        let path = format!("{p}.gateway_endpoints[{k}].address");
                        if let Some(first) = gateway_sources.get(&g.address) {
                            let at = self.at(first);
                            self.err(
                                &path,
                                format!("gateway endpoint {} is already listed at {at}", g.address),
                            );
                        } else {
                            gateway_sources.insert(g.address, path);
                        }
                    }
                }
                RuleMode::Passthrough => {
                    if !r.gateway_endpoints.is_empty() {
                        self.err(
                            &format!("{p}.gateway_endpoints"),
                            "gateway endpoints only apply to rules with mode = \"gateway\"",
                        );
                    }
                }
            }
        }
        self.rule_overlaps();
    }

    /// M4: no two rules on one address pair share a protocol and a port; at
    /// most one L3_DEFAULT per pair. Rules sharing any VIP address count as
    /// one pair, because the data plane selects by destination address.
    fn rule_overlaps(&mut self) {
        let rules = &self.cfg.forwarding_rules;
        // Only rules sharing a VIP can conflict: pair them per VIP rather
        // than comparing every rule with every other.
        let mut by_vip: HashMap<IpAddr, Vec<usize>> = HashMap::new();
        for (i, r) in rules.iter().enumerate() {
            for v in &r.vips {
                let list = by_vip.entry(*v).or_default();
                if !list.contains(&i) {
                    list.push(i);
                }
            }
        }
        let mut pairs = std::collections::BTreeSet::new();
        for list in by_vip.values() {
            for (x, &j) in list.iter().enumerate() {
                for &i in &list[..x] {
                    pairs.insert((i.min(j), i.max(j)));
                }
            }
        }
        for (i, j) in pairs {
            {
                let (a, b) = (&rules[i], &rules[j]);
                let shared: Vec<String> = b
                    .vips
                    .iter()
                    .filter(|v| a.vips.contains(v))
                    .map(ToString::to_string)
                    .collect();
                if shared.is_empty() || a.protocol != b.protocol {
                    continue;
                }
                let pb = format!("forwarding_rules[{j}]");
                let at = self.at(&format!("forwarding_rules[{i}]"));
                let on = shared.join("/");
                if b.protocol == Protocol::L3Default {
                    self.err(
                        &format!("{pb}.protocol"),
                        format!("a second L3_DEFAULT rule on {on}: rule {:?} ({at}) already is the L3_DEFAULT rule there", a.name),
                    );
                    continue;
                }
                let common = a.ports.intersection(&b.ports);
                if !common.is_empty() {
                    let ports = crate::values::PortSpec::Ranges(common).to_string();
                    let ports = if ports == "0-65535" {
                        "all".to_owned()
                    } else {
                        ports
                    };
                    self.err(
                        &format!("{pb}.ports"),
                        format!(
                            "{} ports {ports} overlap rule {:?} ({at}) on {on}",
                            b.protocol, a.name
                        ),
                    );
                }
            }
        }
    }

    /// M4/M8: every endpoint can carry the rule's address family.
    fn rule_families(&mut self, r: usize, s: usize) {
        let rule = &self.cfg.forwarding_rules[r];
        let svc = &self.cfg.backend_services[s];
        let Some(&vip) = rule.vips.first() else {
            return;
        };
        for (g, group) in svc.groups.iter().enumerate() {
            let mut targets: Vec<(String, IpAddr)> = group
                .endpoints
                .iter()
                .enumerate()
                .map(|(e, ep)| {
                    (
                        format!("backend_services[{s}].groups[{g}].endpoints[{e}].address"),
                        ep.address,
                    )
                })
                .collect();
            if let Some(rem) = &group.remote {
                targets.push((
                    format!("backend_services[{s}].groups[{g}].remote.vip"),
                    rem.vip,
                ));
            }
            for (path, addr) in targets {
                if !family_compatible(svc.delivery, vip, addr) {
                    let why = match svc.delivery {
                        DeliveryMode::L2dsr => {
                            "l2dsr only rewrites the MAC, so endpoints need the VIP's address family"
                        }
                        _ => {
                            "ipip carries IPv4 in IPv4, IPv6 in IPv6 and IPv4 in IPv6, not IPv6 in IPv4"
                        }
                    };
                    let at = self.at(&format!("forwarding_rules[{r}].vips"));
                    self.err(
                        &path,
                        format!("{} endpoint {addr} cannot take the {} traffic of rule {:?} ({at}): {why}", family(addr), family(vip), rule.name),
                    );
                }
            }
        }
    }

    fn services(&mut self) {
        let cfg = self.cfg;
        self.names(
            "backend service",
            cfg.backend_services
                .iter()
                .enumerate()
                .map(|(i, s)| (format!("backend_services[{i}].name"), s.name.as_str())),
        );
        let checks: HashMap<&str, &crate::schema::HealthCheck> = cfg
            .health_checks
            .iter()
            .map(|h| (h.name.as_str(), h))
            .collect();
        let zones_known = !cfg.client_zones.is_empty();
        for (i, s) in cfg.backend_services.iter().enumerate() {
            let p = format!("backend_services[{i}]");
            self.delivery_options(&p, s);
            if !maglev::is_prime(s.maglev_table_size) || s.maglev_table_size > MAX_TABLE_SIZE {
                self.err(
                    &format!("{p}.maglev_table_size"),
                    format!("{} is not a prime up to {MAX_TABLE_SIZE}: Maglev needs a prime table size (e.g. 65537 or 655373)", s.maglev_table_size),
                );
            }
            let n_endpoints: usize = s
                .groups
                .iter()
                .map(|g| g.endpoints.len() + usize::from(g.remote.is_some()))
                .sum();
            if maglev::is_prime(s.maglev_table_size) && (s.maglev_table_size as usize) < n_endpoints
            {
                self.err(
                    &format!("{p}.maglev_table_size"),
                    format!("{} slots cannot hold {n_endpoints} endpoints: choose a prime larger than the endpoint count", s.maglev_table_size),
                );
            } else if (s.maglev_table_size as usize) < n_endpoints.saturating_mul(100) {
                self.warn(
                    &format!("{p}.maglev_table_size"),
                    format!("{} slots for {n_endpoints} endpoints: below 100 slots per endpoint, Maglev's balance degrades", s.maglev_table_size),
                );
            }
            if let Some(hc) = &s.health_check {
                match checks.get(hc.as_str()) {
                    None => {
                        let known = cfg
                            .health_checks
                            .iter()
                            .map(|h| h.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ");
                        self.err(
                            &format!("{p}.health_check"),
                            format!("no health check is named {hc:?} (known: {known})"),
                        );
                    }
                    Some(h) if h.port.is_none() => {
                        for (g, group) in s.groups.iter().enumerate() {
                            for (e, ep) in group.endpoints.iter().enumerate() {
                                if ep.port.is_none() {
                                    self.err(
                                        &format!("{p}.groups[{g}].endpoints[{e}].port"),
                                        format!("health check {hc:?} names no port, so endpoint {} needs one", ep.address),
                                    );
                                }
                            }
                        }
                    }
                    Some(_) => {}
                }
            }
            if s.aggregation.min_healthy_percent > 100 {
                self.err(
                    &format!("{p}.aggregation.min_healthy_percent"),
                    format!(
                        "{}% is not a percentage (0-100)",
                        s.aggregation.min_healthy_percent
                    ),
                );
            }
            if s.aggregation.min_healthy_count as usize > n_endpoints && n_endpoints > 0 {
                self.warn(
                    &format!("{p}.aggregation.min_healthy_count"),
                    format!("{} healthy endpoints required but the service has {n_endpoints}: it can never be healthy", s.aggregation.min_healthy_count),
                );
            }
            self.capacity(&p, s);
            let l = &s.locality;
            if !(0.0..=1.0).contains(&l.zonal_spill_ratio) {
                self.err(
                    &format!("{p}.locality.zonal_spill_ratio"),
                    format!("{} is out of range 0.0-1.0", l.zonal_spill_ratio),
                );
            }
            if l.zonal_affinity && !zones_known {
                self.err(
                    &format!("{p}.locality.zonal_affinity"),
                    "zonal affinity needs [[client_zones]] to map clients to zones",
                );
            }
            if !l.zonal_affinity && l.zonal_spill_ratio != 0.0 {
                self.err(
                    &format!("{p}.locality.zonal_spill_ratio"),
                    "a spill ratio only applies with zonal_affinity = true",
                );
            }
            if s.load_balancing == LoadBalancing::Maglev
                && s.groups
                    .iter()
                    .flat_map(|g| &g.endpoints)
                    .any(|e| e.weight != 100)
            {
                self.warn(
                    &format!("{p}.load_balancing"),
                    "endpoint weights are ignored with MAGLEV; use WEIGHTED_MAGLEV",
                );
            }
            let used = cfg
                .forwarding_rules
                .iter()
                .any(|r| r.backend_service == s.name)
                || cfg
                    .composite_health_checks
                    .iter()
                    .any(|c| c.sources.iter().any(|x| x.backend_service == s.name));
            if !used {
                self.warn(
                    &format!("{p}.name"),
                    format!(
                        "backend service {:?} is used by no forwarding rule or composite",
                        s.name
                    ),
                );
            }
            self.groups(&p, s);
        }
    }

    fn delivery_options(&mut self, p: &str, s: &BackendService) {
        let d = s.delivery;
        if s.gre_key.is_some() && d != DeliveryMode::Gre {
            self.err(
                &format!("{p}.gre_key"),
                format!("gre_key applies to delivery \"gre\", not \"{d}\""),
            );
        }
        if let Some(port) = s.gue_port {
            if d != DeliveryMode::Gue {
                self.err(
                    &format!("{p}.gue_port"),
                    format!("gue_port applies to delivery \"gue\", not \"{d}\""),
                );
            } else if port == 0 {
                self.err(&format!("{p}.gue_port"), "port 0 is not a UDP port");
            }
        }
        if let Some(g) = &s.geneve {
            if d != DeliveryMode::Geneve {
                self.err(
                    &format!("{p}.geneve"),
                    format!("geneve options apply to delivery \"geneve\", not \"{d}\""),
                );
            }
            if g.port == 0 {
                self.err(&format!("{p}.geneve.port"), "port 0 is not a UDP port");
            }
            if g.endpoint_id_type == g.flow_cookie_type {
                self.err(
                    &format!("{p}.geneve.flow_cookie_type"),
                    format!("option type {} is also endpoint_id_type: the two options need distinct types", g.flow_cookie_type),
                );
            }
        }
    }

    fn capacity(&mut self, p: &str, s: &BackendService) {
        match s.balancing_mode {
            BalancingMode::Rate => {
                if s.max_utilization.is_some() {
                    self.err(
                        &format!("{p}.max_utilization"),
                        "max_utilization applies to balancing_mode UTILIZATION, not RATE",
                    );
                }
                if s.max_rate_per_endpoint == Some(0) {
                    self.err(&format!("{p}.max_rate_per_endpoint"), "a rate of 0 would refuse every connection; use capacity_scaler = 0 to drain");
                }
                if s.max_rate_per_endpoint.is_none() {
                    for (g, group) in s.groups.iter().enumerate() {
                        if group.max_rate.is_none() {
                            self.err(
                                &format!("{p}.groups[{g}].max_rate"),
                                "balancing_mode RATE needs max_rate on every group, or max_rate_per_endpoint on the service",
                            );
                        }
                    }
                }
            }
            BalancingMode::Utilization => {
                if let Some(u) = s.max_utilization
                    && !(u > 0.0 && u <= 1.0)
                {
                    self.err(
                        &format!("{p}.max_utilization"),
                        format!("{u} is out of range: 0 < max_utilization <= 1.0"),
                    );
                }
                if s.max_rate_per_endpoint.is_some() {
                    self.err(
                        &format!("{p}.max_rate_per_endpoint"),
                        "max_rate_per_endpoint applies to balancing_mode RATE, not UTILIZATION",
                    );
                }
                for (g, group) in s.groups.iter().enumerate() {
                    if group.max_rate.is_some() {
                        self.err(
                            &format!("{p}.groups[{g}].max_rate"),
                            "max_rate applies to balancing_mode RATE, not UTILIZATION",
                        );
                    }
                }
            }
        }
    }

    fn groups(&mut self, p: &str, s: &BackendService) {
        if s.groups.is_empty() {
            self.err(
                &format!("{p}.groups"),
                "a backend service needs at least one group",
            );
            return;
        }
        self.names(
            "group",
            s.groups
                .iter()
                .enumerate()
                .map(|(g, gr)| (format!("{p}.groups[{g}].name"), gr.name.as_str())),
        );
        let first_kind = s.groups[0].kind;
        let prefs = &self.cfg.node.region_preference;
        let mut seen: HashMap<(IpAddr, Option<u16>), String> = HashMap::new();
        for (g, group) in s.groups.iter().enumerate() {
            let gp = format!("{p}.groups[{g}]");
            for (f, v) in [("region", &group.region), ("zone", &group.zone)] {
                if !valid_name(v) {
                    self.err(
                        &format!("{gp}.{f}"),
                        format!(
                            "{v:?} must be 1-63 characters of letters, digits, '-', '_' or '.'"
                        ),
                    );
                }
            }
            if group.kind != first_kind {
                self.err(
                    &format!("{gp}.kind"),
                    format!(
                        "all groups of a service are of one kind: this one is {:?} but {} is {:?}",
                        group.kind, s.groups[0].name, first_kind
                    ),
                );
            }
            if !(0.0..=1.0).contains(&group.capacity_scaler) {
                self.err(
                    &format!("{gp}.capacity_scaler"),
                    format!(
                        "{} is out of range 0.0-1.0 (0 drains the group)",
                        group.capacity_scaler
                    ),
                );
            }
            if group.max_rate == Some(0) {
                self.err(
                    &format!("{gp}.max_rate"),
                    "a rate of 0 would refuse every connection; use capacity_scaler = 0 to drain",
                );
            }
            if !prefs.is_empty() && !prefs.contains(&group.region) {
                self.warn(
                    &format!("{gp}.region"),
                    format!(
                        "region {:?} is not in node.region_preference: it is used last",
                        group.region
                    ),
                );
            }
            match group.kind {
                GroupKind::Endpoints => {
                    if group.remote.is_some() {
                        self.err(
                            &format!("{gp}.remote"),
                            "a group of kind \"endpoints\" lists endpoints, not a remote rule",
                        );
                    }
                    if group.endpoints.is_empty() {
                        self.warn(&format!("{gp}.endpoints"), "the group has no endpoints");
                    }
                }
                GroupKind::RemoteRule => {
                    if group.remote.is_none() {
                        self.err(&format!("{gp}.remote"), "a group of kind \"remote_rule\" needs remote = { status_url, rule, vip }");
                    }
                    if !group.endpoints.is_empty() {
                        self.err(
                            &format!("{gp}.endpoints"),
                            "a group of kind \"remote_rule\" has no endpoints of its own",
                        );
                    }
                    if let Some(r) = &group.remote
                        && !(r.status_url.starts_with("http://")
                            || r.status_url.starts_with("https://"))
                    {
                        self.err(
                            &format!("{gp}.remote.status_url"),
                            format!("{:?} is not an http:// or https:// URL", r.status_url),
                        );
                    }
                }
            }
            for (e, ep) in group.endpoints.iter().enumerate() {
                let ep_p = format!("{gp}.endpoints[{e}]");
                if ep.weight > MAX_WEIGHT {
                    self.err(
                        &format!("{ep_p}.weight"),
                        format!("weight {} is out of range 0-{MAX_WEIGHT}", ep.weight),
                    );
                }
                if ep.port == Some(0) {
                    self.err(&format!("{ep_p}.port"), "port 0 is not a port");
                }
                if ep.address.is_unspecified() || ep.address.is_multicast() {
                    self.err(
                        &format!("{ep_p}.address"),
                        format!("{} cannot be an endpoint", ep.address),
                    );
                } else if let Some(v4) = ipv4_mapped(&ep.address) {
                    self.err(
                        &format!("{ep_p}.address"),
                        format!("{} is an IPv4-mapped IPv6 address: write {v4}", ep.address),
                    );
                }
                if ep.mac.is_some() && s.delivery != DeliveryMode::L2dsr {
                    self.err(
                        &format!("{ep_p}.mac"),
                        format!(
                            "an endpoint MAC applies to delivery \"l2dsr\", not \"{}\"",
                            s.delivery
                        ),
                    );
                }
                let key = (ep.address, ep.port);
                if let Some(first) = seen.get(&key) {
                    let at = self.at(first);
                    self.err(
                        &format!("{ep_p}.address"),
                        format!("endpoint {} is already in this service at {at}", ep.address),
                    );
                } else {
                    seen.insert(key, ep_p);
                }
            }
        }
    }

    fn health_checks(&mut self) {
        let cfg = self.cfg;
        self.names(
            "health check",
            cfg.health_checks
                .iter()
                .enumerate()
                .map(|(i, h)| (format!("health_checks[{i}].name"), h.name.as_str())),
        );
        for (i, h) in cfg.health_checks.iter().enumerate() {
            let p = format!("health_checks[{i}]");
            let http = h.kind != HealthCheckType::Tcp;
            if h.interval.is_zero() {
                self.err(
                    &format!("{p}.interval"),
                    "the interval must be longer than 0s",
                );
            }
            if h.timeout.is_zero() {
                self.err(
                    &format!("{p}.timeout"),
                    "the timeout must be longer than 0s",
                );
            } else if !h.interval.is_zero() && h.timeout > h.interval {
                self.err(
                    &format!("{p}.timeout"),
                    format!(
                        "timeout {} exceeds interval {}: a probe must end before the next starts",
                        h.timeout, h.interval
                    ),
                );
            }
            if h.healthy_threshold == 0 {
                self.err(
                    &format!("{p}.healthy_threshold"),
                    "a threshold must be at least 1",
                );
            }
            if h.unhealthy_threshold == 0 {
                self.err(
                    &format!("{p}.unhealthy_threshold"),
                    "a threshold must be at least 1",
                );
            }
            if h.port == Some(0) {
                self.err(&format!("{p}.port"), "port 0 is not a port");
            }
            if !http {
                for (f, set) in [
                    ("path", h.path.is_some()),
                    ("host", h.host.is_some()),
                    ("weight_from_header", h.weight_from_header),
                ] {
                    if set {
                        self.err(
                            &format!("{p}.{f}"),
                            format!("{f} applies to HTTP and HTTPS health checks, not TCP"),
                        );
                    }
                }
            }
            // Path and Host go into the probe's request line and header:
            // nothing that could split them.
            let clean =
                |v: &str| !v.is_empty() && !v.chars().any(|c| c.is_whitespace() || c.is_control());
            if let Some(path) = &h.path
                && (!path.starts_with('/') || !clean(path))
            {
                self.err(
                    &format!("{p}.path"),
                    format!(
                        "{path:?} must start with '/' and have no spaces or control characters"
                    ),
                );
            }
            if let Some(host) = &h.host
                && !clean(host)
            {
                self.err(
                    &format!("{p}.host"),
                    format!("{host:?}: a host name has no spaces or control characters"),
                );
            }
            // Probes bind to source_address: endpoints of the other family
            // could never be reached from it.
            if let Some(src) = h.source_address {
                let other = cfg
                    .backend_services
                    .iter()
                    .filter(|s| s.health_check.as_deref() == Some(h.name.as_str()))
                    .flat_map(|s| s.groups.iter().flat_map(|g| g.endpoints.iter()))
                    .find(|e| e.address.is_ipv4() != src.is_ipv4());
                if let Some(e) = other {
                    self.err(
                        &format!("{p}.source_address"),
                        format!(
                            "{src} cannot probe endpoint {} (another IP version): use one check per family",
                            e.address
                        ),
                    );
                }
            }
            if !cfg
                .backend_services
                .iter()
                .any(|s| s.health_check.as_deref() == Some(h.name.as_str()))
            {
                self.warn(
                    &format!("{p}.name"),
                    format!("health check {:?} is used by no backend service", h.name),
                );
            }
        }
    }

    fn composites(&mut self) {
        let cfg = self.cfg;
        self.names(
            "composite health check",
            cfg.composite_health_checks
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    (
                        format!("composite_health_checks[{i}].name"),
                        c.name.as_str(),
                    )
                }),
        );
        let services: HashSet<&str> = cfg
            .backend_services
            .iter()
            .map(|s| s.name.as_str())
            .collect();
        let composites: HashSet<&str> = cfg
            .composite_health_checks
            .iter()
            .map(|c| c.name.as_str())
            .collect();
        let mut destinations: HashMap<&str, usize> = HashMap::new();
        for (i, c) in cfg.composite_health_checks.iter().enumerate() {
            let p = format!("composite_health_checks[{i}]");
            if services.contains(c.name.as_str()) {
                self.err(
                    &format!("{p}.name"),
                    format!(
                        "{:?} already names a backend service; sources would be ambiguous",
                        c.name
                    ),
                );
            }
            if c.sources.is_empty() || c.sources.len() > MAX_COMPOSITE_SOURCES {
                self.err(
                    &format!("{p}.sources"),
                    format!(
                        "{} sources: a composite health check has 1 to {MAX_COMPOSITE_SOURCES}",
                        c.sources.len()
                    ),
                );
            }
            let mut seen = HashSet::new();
            for (k, s) in c.sources.iter().enumerate() {
                let sp = format!("{p}.sources[{k}]");
                let name = s.backend_service.as_str();
                if composites.contains(name) && !services.contains(name) {
                    self.err(
                        &format!("{sp}.backend_service"),
                        format!("{name:?} is a composite health check: a composite may not use another composite's state as a source"),
                    );
                } else if !services.contains(name) {
                    self.err(
                        &format!("{sp}.backend_service"),
                        format!("no backend service is named {name:?}"),
                    );
                }
                if !seen.insert(name) {
                    self.err(
                        &format!("{sp}.backend_service"),
                        format!("{name:?} is already a source of this composite"),
                    );
                }
                if let Some(a) = &s.aggregation
                    && a.min_healthy_percent > 100
                {
                    self.err(
                        &format!("{sp}.aggregation.min_healthy_percent"),
                        format!("{}% is not a percentage (0-100)", a.min_healthy_percent),
                    );
                }
            }
            if !cfg.forwarding_rules.iter().any(|r| r.name == c.destination) {
                self.err(
                    &format!("{p}.destination"),
                    format!("no forwarding rule is named {:?}", c.destination),
                );
            } else if let Some(&first) = destinations.get(c.destination.as_str()) {
                let at = self.at(&format!("composite_health_checks[{first}]"));
                self.err(
                    &format!("{p}.destination"),
                    format!(
                        "rule {:?} already takes its state from composite {:?} ({at})",
                        c.destination, cfg.composite_health_checks[first].name
                    ),
                );
            } else {
                destinations.insert(c.destination.as_str(), i);
            }
        }
    }

    fn client_zones(&mut self) {
        let cfg = self.cfg;
        let mut seen: HashMap<crate::values::Prefix, String> = HashMap::new();
        let group_zones: HashSet<&str> = cfg
            .backend_services
            .iter()
            .flat_map(|s| &s.groups)
            .map(|g| g.zone.as_str())
            .collect();
        for (i, z) in cfg.client_zones.iter().enumerate() {
            let p = format!("client_zones[{i}]");
            if z.prefixes.is_empty() {
                self.err(
                    &format!("{p}.prefixes"),
                    "a client zone needs at least one prefix",
                );
            }
            if !group_zones.contains(z.zone.as_str()) {
                self.warn(
                    &format!("{p}.zone"),
                    format!("no backend group is in zone {:?}", z.zone),
                );
            }
            for (k, pre) in z.prefixes.iter().enumerate() {
                let pp = format!("{p}.prefixes[{k}]");
                if pre.has_host_bits() {
                    self.err(
                        &pp,
                        format!(
                            "{pre} has bits set beyond /{}: write the network address",
                            pre.len
                        ),
                    );
                }
                if let Some(first) = seen.get(pre) {
                    let at = self.at(first);
                    self.err(&pp, format!("prefix {pre} is already mapped at {at}"));
                } else {
                    seen.insert(*pre, pp);
                }
            }
        }
    }

    fn bgp(&mut self) {
        let Some(b) = &self.cfg.bgp else { return };
        let asn_ok = |a: u32| a != 0 && a != u32::MAX && a != 23_456;
        if !asn_ok(b.local_asn) {
            self.err("bgp.local_asn", format!("AS {} is reserved", b.local_asn));
        }
        if b.control.trim().is_empty() {
            self.err(
                "bgp.control",
                "how to reach the speaker is needed: a socket path or host:port",
            );
        }
        let mut seen = HashSet::new();
        for (i, peer) in b.peers.iter().enumerate() {
            if !asn_ok(peer.asn) {
                self.err(
                    &format!("bgp.peers[{i}].asn"),
                    format!("AS {} is reserved", peer.asn),
                );
            }
            if !seen.insert(peer.address) {
                self.err(
                    &format!("bgp.peers[{i}].address"),
                    format!("peer {} is listed twice", peer.address),
                );
            }
        }
    }

    fn flow_sync(&mut self) {
        let Some(f) = &self.cfg.flow_sync else { return };
        if f.peers.is_empty() {
            self.err("flow_sync.peers", "flow sync needs at least one peer");
        }
        let mut seen = HashSet::new();
        for (i, peer) in f.peers.iter().enumerate() {
            if *peer == f.listen {
                self.err(
                    &format!("flow_sync.peers[{i}]"),
                    format!("{peer} is this node's own listen address"),
                );
            }
            if !seen.insert(*peer) {
                self.err(
                    &format!("flow_sync.peers[{i}]"),
                    format!("peer {peer} is listed twice"),
                );
            }
        }
        if !(1..=1024).contains(&f.batch_size) {
            self.err(
                "flow_sync.batch_size",
                format!("{} entries per batch: expected 1-1024", f.batch_size),
            );
        }
        if f.batch_interval.is_zero() {
            self.err(
                "flow_sync.batch_interval",
                "the batch interval must be longer than 0s",
            );
        }
    }

    /// Fields this version parses and checks but does not act on yet: each
    /// one the file writes gets a warning, so that none silently does
    /// nothing. (Remove an entry when its feature lands.)
    fn not_used(&mut self) {
        const NOT_USED: &str = "not used by this version";
        let cfg = self.cfg;
        if self.map.contains("node.shutdown_drain") {
            self.warn(
                "node.shutdown_drain",
                format!("{NOT_USED}: `spillway run` stops forwarding as soon as it gets SIGTERM or SIGINT (there is no drain on shutdown)"),
            );
        }
        if self.map.contains("dataplane.burst_size") {
            self.warn(
                "dataplane.burst_size",
                format!("{NOT_USED}: workers receive and send bursts of {FIXED_BURST} packets"),
            );
        }
        for (i, _) in cfg.ports.iter().enumerate() {
            let gateway = format!("ports[{i}].gateway");
            if self.map.contains(&gateway) {
                self.warn(
                    &gateway,
                    format!("{NOT_USED}: the next hop is not resolved with ARP/NDP; traffic leaving this port goes to gateway_mac"),
                );
            }
            let mtu = format!("ports[{i}].mtu");
            if self.map.contains(&mtu) {
                self.warn(
                    &mtu,
                    format!("{NOT_USED}: Spillway sets no MTU on the device, which keeps its own"),
                );
            }
        }
        for (i, r) in cfg.forwarding_rules.iter().enumerate() {
            if r.mode == RuleMode::Gateway {
                self.warn(
                    &format!("forwarding_rules[{i}].mode"),
                    format!("gateway mode is {NOT_USED}: the rule's packets are dropped and counted (drop gateway_unsupported), its gateway_endpoints are ignored"),
                );
            }
        }
        for (i, _) in cfg.backend_services.iter().enumerate() {
            let p = format!("backend_services[{i}].geneve.endpoint_id_type");
            if self.map.contains(&p) {
                self.warn(
                    &p,
                    format!("{NOT_USED}: only gateway mode, which is not built, sends the gateway endpoint ID option"),
                );
            }
        }
        if cfg.bgp.is_some() {
            self.warn(
                "bgp",
                format!("{NOT_USED}: no VIP is announced or withdrawn; announce them from the BGP speaker's own configuration"),
            );
        }
        if cfg.flow_sync.is_some() {
            self.warn(
                "flow_sync",
                format!("{NOT_USED}: flow state is not shared; a flow that moves to another node is scheduled there anew"),
            );
        }
    }

    /// The memory the sizes ask for fits this machine (`crate::memory`),
    /// and a full rebuild of the Maglev tables does not take long.
    fn memory(&mut self) {
        // A size already in error would only be reported twice.
        let in_error = |p: &str| {
            p == "dataplane.flow_table_capacity"
                || p == "dataplane.mbufs"
                || p.ends_with(".maglev_table_size")
        };
        if self.errors.iter().any(|e| in_error(&e.path)) {
            return;
        }
        let est = crate::memory::estimate(self.cfg);
        let parts = est.parts();
        // The largest consumer is where the error points.
        let at = parts
            .iter()
            .find(|(path, _, _)| !path.is_empty())
            .map_or("dataplane", |(path, _, _)| path.as_str())
            .to_owned();
        let listed = || {
            let shown: Vec<&str> = parts.iter().take(5).map(|(_, _, d)| d.as_str()).collect();
            let rest = parts.len().saturating_sub(5);
            let more = if rest > 0 {
                format!(" and {rest} smaller ones")
            } else {
                String::new()
            };
            format!("{}{more}", shown.join(", "))
        };
        use crate::memory::Bytes;
        if let Some(m) = self.env.memory {
            let (total, ordinary) = (est.total_bytes(), est.ordinary_bytes());
            if total > m.total {
                self.err(
                    &at,
                    format!(
                        "this configuration needs about {} of memory but this machine has {}: {}",
                        Bytes(total),
                        Bytes(m.total),
                        listed()
                    ),
                );
            } else if ordinary > m.ordinary() {
                self.err(
                    &at,
                    format!(
                        "this configuration needs about {} of ordinary memory but this machine has {} outside the {} reserved as hugepages: {}",
                        Bytes(ordinary),
                        Bytes(m.ordinary()),
                        Bytes(m.hugepages),
                        listed()
                    ),
                );
            } else if ordinary > m.available {
                self.warn(
                    &at,
                    format!(
                        "this configuration needs about {} of memory but only {} is available now: {}",
                        Bytes(ordinary),
                        Bytes(m.available),
                        listed()
                    ),
                );
            } else if total > m.total / 5 * 4 {
                self.warn(
                    &at,
                    format!(
                        "this configuration needs about {}, more than 80 % of this machine's {}, which leaves little for the kernel and everything else: {}",
                        Bytes(total),
                        Bytes(m.total),
                        listed()
                    ),
                );
            }
        }
        let time = est.rebuild_time();
        if time > MAX_REBUILD_TIME {
            let biggest = est
                .services
                .iter()
                // The first of the slowest.
                .min_by_key(|s| std::cmp::Reverse(s.build_ns()))
                .map(|s| format!("backend_services[{}].maglev_table_size", s.service));
            if let Some(path) = biggest {
                self.warn(
                    &path,
                    format!(
                        "a full rebuild of the Maglev tables (at start, or when every service changes) builds {}, {} slots in all: about {} on the management core, more than the {} s in which it republishes locality decisions; smaller tables, or fewer regions and zones per service, build faster",
                        plural(est.rebuild_tables(), "table"),
                        est.rebuild_slots(),
                        crate::memory::seconds(time),
                        MAX_REBUILD_TIME.as_secs()
                    ),
                );
            }
        }
    }

    fn control(&mut self) {
        if !self.cfg.control.socket.is_absolute() {
            self.err(
                "control.socket",
                format!(
                    "{} is not an absolute path",
                    self.cfg.control.socket.display()
                ),
            );
        }
        if let Some(g) = &self.cfg.control.socket_group
            && (g.is_empty() || g.chars().any(|c| c.is_whitespace() || c.is_control()))
        {
            self.err("control.socket_group", format!("{g:?} is not a group name"));
        }
        let m = &self.cfg.metrics;
        if m.listen.port() == 0 {
            self.err("metrics.listen", "port 0 is not a port to listen on");
        }
        match &m.allow {
            Some(allow) if allow.is_empty() => self.err(
                "metrics.allow",
                "an empty allow-list admits nobody: leave `allow` out to admit every address",
            ),
            Some(allow) => {
                for (k, pre) in allow.iter().enumerate() {
                    if pre.has_host_bits() {
                        self.err(
                            &format!("metrics.allow[{k}]"),
                            format!(
                                "{pre} has bits set beyond /{}: write the network address",
                                pre.len
                            ),
                        );
                    }
                }
            }
            None => {}
        }
        // M50: /status and /metrics tell anyone who can reach them the
        // node's rules, backends and traffic.
        if !m.listen.ip().to_canonical().is_loopback() {
            let who = match &m.allow {
                Some(allow) => format!("clients in {}", join(allow)),
                None => "any address (set [metrics] allow to narrow it)".to_owned(),
            };
            self.warn(
                "metrics.listen",
                format!(
                    "{} is not a loopback address: /status and /metrics are served to {who}",
                    m.listen
                ),
            );
        }
        for (section, max, timeout) in [
            ("metrics", m.max_connections, m.timeout),
            (
                "control",
                self.cfg.control.max_connections,
                self.cfg.control.timeout,
            ),
        ] {
            if !(1..=MAX_LISTENER_CONNECTIONS).contains(&max) {
                self.err(
                    &format!("{section}.max_connections"),
                    format!("{max}: expected 1-{MAX_LISTENER_CONNECTIONS}"),
                );
            }
            if timeout.is_zero() || timeout.0 > MAX_LISTENER_TIMEOUT {
                self.err(
                    &format!("{section}.timeout"),
                    format!(
                        "{timeout}: expected more than 0s and at most {}s",
                        MAX_LISTENER_TIMEOUT.as_secs()
                    ),
                );
            }
        }
        // One client may hold at most this many of the HTTP slots: what is
        // left is what other clients (other nodes polling /status) keep.
        match m.max_connections_per_client {
            Some(n) if n == 0 || n > m.max_connections => self.err(
                "metrics.max_connections_per_client",
                format!(
                    "{n}: expected 1-{} (at most max_connections)",
                    m.max_connections
                ),
            ),
            set if m.max_connections > 1 && m.per_client() >= m.max_connections => self.warn(
                if set.is_some() {
                    "metrics.max_connections_per_client"
                } else {
                    "metrics.max_connections"
                },
                format!(
                    "max_connections_per_client {} of max_connections {}: one client can hold every slot and keep other nodes from reading /status; set max_connections_per_client below max_connections",
                    m.per_client(),
                    m.max_connections
                ),
            ),
            _ => {}
        }
    }
}

/// "1 table", "2 tables".
fn plural(n: u64, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

fn join(p: &[crate::values::Prefix]) -> String {
    p.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The IPv4 address inside an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`).
fn ipv4_mapped(a: &IpAddr) -> Option<std::net::Ipv4Addr> {
    match a {
        IpAddr::V6(v6) => v6.to_ipv4_mapped(),
        IpAddr::V4(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn primes() {
        let primes: Vec<u32> = (0..50).filter(|&n| maglev::is_prime(n)).collect();
        assert_eq!(
            primes,
            [2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47]
        );
        for p in [65_537, 655_373, 4_294_967_291] {
            assert!(maglev::is_prime(p), "{p}");
        }
        for c in [
            65_536,
            65_535,
            655_371,
            25,
            49,
            4_294_967_295,
            4_294_836_225,
        ] {
            assert!(!maglev::is_prime(c), "{c}");
        }
    }

    #[test]
    fn families_per_delivery_mode() {
        let v4: IpAddr = "10.0.0.1".parse().unwrap();
        let v6: IpAddr = "fd00::1".parse().unwrap();
        use DeliveryMode::*;
        for (mode, vip, ep, ok) in [
            (L2dsr, v4, v4, true),
            (L2dsr, v6, v6, true),
            (L2dsr, v4, v6, false),
            (L2dsr, v6, v4, false),
            (Ipip, v4, v4, true),
            (Ipip, v6, v6, true),
            (Ipip, v4, v6, true),
            (Ipip, v6, v4, false),
            (Gre, v6, v4, true),
            (Gue, v4, v6, true),
            (Geneve, v6, v4, true),
        ] {
            assert_eq!(family_compatible(mode, vip, ep), ok, "{mode} {vip} -> {ep}");
        }
    }
}
