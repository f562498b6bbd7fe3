//! `[[client_zones]]`: client prefixes mapped to zones, unambiguously, for
//! zone-local balancing (M27).

use std::collections::{HashMap, HashSet};

use super::Checker;

impl Checker<'_> {
    pub(super) fn client_zones(&mut self) {
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
}
