//! `[node]`, `[dataplane]` and `[[ports]]`: this node's identity, its cores
//! and sizes, and the ports it forwards on — what the daemon needs to start.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;

use super::{Checker, join, valid_name};

impl Checker<'_> {
    pub(super) fn node(&mut self) {
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
        self.capacity_share();
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

    /// `node.capacity_share`: in (0, 1]; and a node that announces its VIPs
    /// (so may be one of several behind ECMP) but neither hears peers nor
    /// sets a share would budget every `RATE` capacity for itself alone.
    fn capacity_share(&mut self) {
        let cfg = self.cfg;
        match cfg.node.capacity_share {
            Some(s) if !(s > 0.0 && s <= 1.0) => self.err(
                "node.capacity_share",
                format!("{s} is not a share: write a number above 0 and at most 1 (1/N for N nodes behind ECMP)"),
            ),
            None if cfg.bgp.is_some()
                && cfg.flow_sync.is_none()
                && cfg
                    .backend_services
                    .iter()
                    .any(|s| s.balancing_mode == crate::schema::BalancingMode::Rate) =>
            {
                self.warn(
                    "node.capacity_share",
                    "this node announces its VIPs but has no [flow_sync] peers: each RATE capacity is budgeted for this node alone; with N nodes behind ECMP set capacity_share = 1/N, or configure [flow_sync] so the nodes count the cluster's rates",
                );
            }
            _ => {}
        }
    }

    pub(super) fn dataplane(&mut self) {
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
        if d.gateway_mismatch_rate == 0 {
            self.err(
                "dataplane.gateway_mismatch_rate",
                "a budget of 0 would refuse every appliance's returns: at least 1 refused return per second per worker",
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

    pub(super) fn ports(&mut self) {
        let ports = &self.cfg.ports;
        self.names(
            "port",
            ports
                .iter()
                .enumerate()
                .map(|(i, p)| (format!("ports[{i}].name"), p.name.as_str())),
        );
        let mut addrs: HashMap<IpAddr, String> = HashMap::new();
        self.exception_ports();
        for (i, p) in ports.iter().enumerate() {
            if p.device.trim().is_empty() {
                self.err(
                    &format!("ports[{i}].device"),
                    "a DPDK device name or PCI address is needed",
                );
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
                // A VIP prefix must not hold one either.
                let own = addrs
                    .iter()
                    .filter(|(a, _)| v.contains(**a))
                    .min_by_key(|(a, _)| **a);
                if let Some((own, port_addr)) = own {
                    let at = self.at(port_addr);
                    let what = if v.is_range() {
                        format!("VIP {v} holds the balancer's own address {own} at {at}")
                    } else {
                        format!("VIP {v} is also the balancer's own address at {at}")
                    };
                    self.err(
                        &format!("forwarding_rules[{r}].vips[{k}]"),
                        format!("{what}; host traffic to it would be load-balanced"),
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

    /// M47: each exception port carries the host traffic of one data port
    /// (its `for_port`, else the first uplink), and no data port has two.
    fn exception_ports(&mut self) {
        use crate::schema::PortRole;
        let ports = &self.cfg.ports;
        // Data port index -> the field path of the exception port taking it.
        let mut taken: HashMap<usize, String> = HashMap::new();
        for (i, p) in ports.iter().enumerate() {
            let path = format!("ports[{i}].for_port");
            if p.role != PortRole::Exception {
                if p.for_port.is_some() {
                    self.err(
                        &path,
                        format!("for_port applies to role \"exception\", not {:?}", p.role),
                    );
                }
                continue;
            }
            let data = match &p.for_port {
                Some(name) => match ports.iter().position(|q| &q.name == name) {
                    Some(d) if ports[d].role == PortRole::Exception => {
                        self.err(
                            &path,
                            format!("port {name:?} is an exception port; for_port names an \"uplink\" or \"backend\" port"),
                        );
                        continue;
                    }
                    Some(d) => d,
                    None => {
                        self.err(&path, format!("no port is named {name:?}"));
                        continue;
                    }
                },
                None => match ports.iter().position(|q| q.role == PortRole::Uplink) {
                    Some(d) => d,
                    None => {
                        self.warn(
                            &format!("ports[{i}].role"),
                            "no port has role \"uplink\" and for_port names none: what the host sends on this exception port is dropped",
                        );
                        continue;
                    }
                },
            };
            let here = if p.for_port.is_some() {
                path
            } else {
                format!("ports[{i}].role")
            };
            if let Some(first) = taken.get(&data) {
                let at = self.at(first);
                self.err(
                    &here,
                    format!(
                        "port {:?} already has an exception port ({at}); one exception port per data port",
                        ports[data].name
                    ),
                );
            } else {
                taken.insert(data, here);
            }
        }
    }
}
