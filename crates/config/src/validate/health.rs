//! `[[health_checks]]` and `[[composite_health_checks]]`: probe timings and HTTP
//! fields a prober can use, and composites whose sources and destination rule exist (M20).

use std::collections::{HashMap, HashSet};

use super::{Checker, MAX_COMPOSITE_SOURCES};
use std::net::IpAddr;

use crate::schema::{HealthCheck, HealthCheckTarget, HealthCheckType, PortRole, RuleMode};

impl Checker<'_> {
    pub(super) fn health_checks(&mut self) {
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
            if h.target == HealthCheckTarget::Vip {
                self.vip_target(&p, h);
            }
            // Probes bind to source_address: endpoints of the other family
            // could never be reached from it.
            if let Some(src) = h.source_address
                && h.target == HealthCheckTarget::Endpoint
            {
                let ix = self.index;
                let other = ix
                    .services_of_check(cfg, &h.name)
                    .flat_map(|(_, s)| s.groups.iter().flat_map(|g| g.endpoints.iter()))
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
            if !self.index.services_of_check.contains_key(h.name.as_str()) {
                self.warn(
                    &format!("{p}.name"),
                    format!("health check {:?} is used by no backend service", h.name),
                );
            }
        }
    }

    /// A check through VIPs (M52): every service using it has passthrough
    /// rules to take its VIPs from, the source address (if any) is of their
    /// family, and `vip_probe_ports` has a port for every (endpoint, VIP).
    fn vip_target(&mut self, p: &str, h: &HealthCheck) {
        let cfg = self.cfg;
        // The probes leave the host's stack through an exception port; the
        // data plane takes them from there. Without one every probe would
        // fail and every endpoint turn unhealthy.
        if !cfg.ports.is_empty() && !cfg.ports.iter().any(|x| x.role == PortRole::Exception) {
            self.err(
                &format!("{p}.target"),
                "probes through VIPs leave the host through an exception port, and no [[ports]] entry has role \"exception\"",
            );
        }
        let mut vips: Vec<IpAddr> = Vec::new();
        let mut seen = HashSet::new();
        let ix = self.index;
        for (si, s) in ix.services_of_check(cfg, &h.name) {
            let rules: Vec<_> = ix.rules_of(cfg, &s.name).collect();
            if let Some(g) = rules.iter().find(|r| r.mode == RuleMode::Gateway) {
                self.err(
                    &format!("backend_services[{si}].health_check"),
                    format!(
                        "target \"vip\" cannot probe through gateway rule {:?}: its appliances see no VIP",
                        g.name
                    ),
                );
            }
            if rules.is_empty() {
                self.err(
                    &format!("backend_services[{si}].health_check"),
                    format!(
                        "check {:?} probes through VIPs (target = \"vip\") but no forwarding rule uses service {:?}",
                        h.name, s.name
                    ),
                );
            }
            for v in ix.service_vips(cfg, &s.name) {
                if seen.insert(v) {
                    vips.push(v);
                }
            }
        }
        if let Some(src) = h.source_address
            && let Some(v) = vips.iter().find(|v| v.is_ipv4() != src.is_ipv4())
        {
            self.err(
                &format!("{p}.source_address"),
                format!("{src} cannot probe through VIP {v} (another IP version): use one check per family"),
            );
        }
    }

    /// `[dataplane] vip_probe_ports`: real ports above the privileged
    /// ones, enough of them for every probe through a VIP this node serves
    /// (M52).
    pub(super) fn vip_probe_ports(&mut self) {
        let cfg = self.cfg;
        let path = "dataplane.vip_probe_ports";
        let spec = &cfg.dataplane.vip_probe_ports;
        if spec.is_all() || spec.ranges().iter().any(|r| r.lo < 1024) {
            self.err(
                path,
                "probe source ports must be a range of ports from 1024 up, outside the kernel's ip_local_port_range",
            );
            return;
        }
        let available: usize = spec
            .ranges()
            .iter()
            .map(|r| usize::from(r.hi - r.lo) + 1)
            .sum();
        let mut needed = 0usize;
        let vip_checks: HashSet<&str> = cfg
            .health_checks
            .iter()
            .filter(|h| h.target == HealthCheckTarget::Vip)
            .map(|h| h.name.as_str())
            .collect();
        for s in &cfg.backend_services {
            if !s
                .health_check
                .as_deref()
                .is_some_and(|h| vip_checks.contains(h))
            {
                continue;
            }
            let endpoints: usize = s.groups.iter().map(|g| g.endpoints.len()).sum();
            // Only the VIPs this node serves are probed (M5).
            let vips = self
                .index
                .served_vips(cfg, &s.name, cfg.node.availability_group)
                .len();
            needed = needed.saturating_add(endpoints.saturating_mul(vips));
        }
        if needed > available {
            self.err(
                path,
                format!("{needed} probes through VIPs need a source port each, and the range has {available}"),
            );
        }
    }

    pub(super) fn composites(&mut self) {
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
            if !self.index.rule_names.contains(c.destination.as_str()) {
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
}
