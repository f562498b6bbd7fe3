//! Every semantic rule of the configuration, checked in one pass that
//! collects all problems (an operator fixing a file wants the whole list,
//! not one error per attempt).
//!
//! Rules speak in field paths; `SourceMap` turns them into `file:line:col`.
//! Problems that make the config wrong are errors (the config is rejected);
//! things that are allowed but probably not meant are warnings.
//!
//! Each section of the file has its own submodule, adding its rules as
//! methods of the one `Checker`; this module runs them and holds what
//! several share.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;

use crate::Env;
use crate::error::{ConfigError, ConfigErrors, SourceMap};
use crate::schema::{Config, DeliveryMode};

mod capacity;
mod health;
mod listeners;
mod locality;
mod memory;
mod mtu;
mod neighbours;
mod node;
mod not_used;
mod peers;
mod rules;
mod services;
mod tunnels;
mod vrrp;

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
pub use values::listener::MAX_CONNECTIONS as MAX_LISTENER_CONNECTIONS;
/// Longest a management listener waits for a request (M50).
pub use values::listener::MAX_TIMEOUT as MAX_LISTENER_TIMEOUT;

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
    index: &'a Index<'a>,
    errors: Vec<ConfigError>,
    warnings: Vec<ConfigError>,
}

/// Who refers to whom, by name, built once: the checks that relate
/// services, rules, health checks and composites look here rather than
/// scan every other entry, so validation stays O(n log n) in the size of
/// the file (a reload of tens of thousands of services runs it).
#[derive(Default)]
struct Index<'a> {
    /// Service name -> its rules' indices, in file order.
    rules_of: HashMap<&'a str, Vec<usize>>,
    /// Health check name -> the indices of the services using it.
    services_of_check: HashMap<&'a str, Vec<usize>>,
    /// Services some composite takes as a source.
    composite_sources: HashSet<&'a str>,
    /// Rule names.
    rule_names: HashSet<&'a str>,
}

impl<'a> Index<'a> {
    fn new(cfg: &'a Config) -> Self {
        let mut ix = Index::default();
        for (i, r) in cfg.forwarding_rules.iter().enumerate() {
            ix.rules_of
                .entry(r.backend_service.as_str())
                .or_default()
                .push(i);
            ix.rule_names.insert(r.name.as_str());
        }
        for (i, s) in cfg.backend_services.iter().enumerate() {
            if let Some(h) = &s.health_check {
                ix.services_of_check.entry(h.as_str()).or_default().push(i);
            }
        }
        ix.composite_sources = cfg
            .composite_health_checks
            .iter()
            .flat_map(|c| &c.sources)
            .map(|x| x.backend_service.as_str())
            .collect();
        ix
    }

    /// The rules of service `name`, in file order.
    fn rules_of<'c>(
        &'c self,
        cfg: &'c Config,
        name: &str,
    ) -> impl Iterator<Item = &'c crate::schema::ForwardingRule> {
        self.rules_of
            .get(name)
            .map_or(&[][..], Vec::as_slice)
            .iter()
            .filter_map(|&i| cfg.forwarding_rules.get(i))
    }

    /// The services using health check `name`, with their indices.
    fn services_of_check<'c>(
        &'c self,
        cfg: &'c Config,
        name: &str,
    ) -> impl Iterator<Item = (usize, &'c crate::schema::BackendService)> {
        self.services_of_check
            .get(name)
            .map_or(&[][..], Vec::as_slice)
            .iter()
            .filter_map(|&i| cfg.backend_services.get(i).map(|s| (i, s)))
    }

    /// The distinct VIPs of the rules of service `name`, in rule order.
    fn service_vips(&self, cfg: &Config, name: &str) -> Vec<IpAddr> {
        self.served_vips(cfg, name, None)
    }

    /// The distinct VIPs of the rules of service `name` in availability
    /// group `ag` (a rule's `vips[g]` is group g's, M5; `None`: both), in
    /// rule order.
    fn served_vips(&self, cfg: &Config, name: &str, ag: Option<u8>) -> Vec<IpAddr> {
        let mut seen = HashSet::new();
        self.rules_of(cfg, name)
            .flat_map(|r| {
                r.vips
                    .iter()
                    .enumerate()
                    .filter(move |(g, _)| ag.is_none_or(|a| usize::from(a) == *g))
                    // A prefix is probed through one address (M1).
                    .map(|(_, v)| v.probe_addr())
            })
            .filter(|v| seen.insert(*v))
            .collect()
    }
}

/// Checks `cfg`; returns its warnings, or every error.
pub fn validate(cfg: &Config, map: &SourceMap, env: &Env) -> Result<Vec<String>, ConfigErrors> {
    let index = Index::new(cfg);
    let mut c = Checker {
        map,
        cfg,
        env,
        index: &index,
        errors: Vec::new(),
        warnings: Vec::new(),
    };
    c.node();
    c.dataplane();
    c.ports();
    c.rules();
    c.services();
    c.mtu();
    c.health_checks();
    c.vip_probe_ports();
    c.composites();
    c.client_zones();
    c.bgp();
    c.flow_sync();
    c.vrrp();
    c.control();
    c.tunnel_ingress();
    c.neighbours();
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
