//! `[[backend_services]]`: delivery, Maglev table, capacity, and their groups and
//! endpoints — what a service needs to place and deliver every flow it is sent.

use std::collections::HashMap;
use std::net::IpAddr;

use super::{Checker, MAX_TABLE_SIZE, MAX_WEIGHT, ipv4_mapped, valid_name};
use crate::schema::{BackendService, DeliveryMode, GroupKind, LoadBalancing, NoBackendFallback};

impl Checker<'_> {
    pub(super) fn services(&mut self) {
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
            if s.no_backend_fallback == NoBackendFallback::Draining
                && s.connection_draining_timeout.0.is_zero()
            {
                self.warn(
                    &format!("{p}.no_backend_fallback"),
                    "\"draining\" with connection_draining_timeout = 0: an endpoint that leaves is gone at once, so no endpoint is ever draining to fall back on",
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
            let check = s
                .health_check
                .as_deref()
                .and_then(|h| checks.get(h))
                .copied();
            self.capacity(&p, s, check);
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
            let used = self.index.rules_of.contains_key(s.name.as_str())
                || self.index.composite_sources.contains(s.name.as_str());
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
        // Appliances of a gateway rule have one address each.
        let gateway = self
            .index
            .rules_of(self.cfg, &s.name)
            .any(|r| r.mode == crate::schema::RuleMode::Gateway);
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
                if let Some(a6) = ep.address6 {
                    if !a6.is_ipv6()
                        || a6.is_unspecified()
                        || a6.is_multicast()
                        || ipv4_mapped(&a6).is_some()
                    {
                        self.err(
                            &format!("{ep_p}.address6"),
                            format!("{a6} is no IPv6 unicast address: address6 is a dual-stack endpoint's IPv6 address"),
                        );
                    }
                    if !ep.address.is_ipv4() {
                        self.err(
                            &format!("{ep_p}.address"),
                            format!(
                                "{}: with address6, address is the endpoint's IPv4 address",
                                ep.address
                            ),
                        );
                    }
                    if gateway {
                        self.err(
                            &format!("{ep_p}.address6"),
                            "appliances of a gateway rule have one address each: list the IPv6 one as an endpoint of its own",
                        );
                    }
                    if let Some(first) = seen.get(&(a6, ep.port)) {
                        let at = self.at(first);
                        self.err(
                            &format!("{ep_p}.address6"),
                            format!("endpoint {a6} is already in this service at {at}"),
                        );
                    }
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
                    if let Some(a6) = ep.address6 {
                        seen.entry((a6, ep.port))
                            .or_insert_with(|| format!("{ep_p}.address6"));
                    }
                    seen.insert(key, ep_p);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
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
}
