//! Whether the sizes the file asks for fit this machine's memory, and how long
//! rebuilding the Maglev tables takes; run last, after the sizes' own checks.

use super::{Checker, MAX_REBUILD_TIME, plural};

impl Checker<'_> {
    /// The memory the sizes ask for fits this machine (`crate::memory`),
    /// and a full rebuild of the Maglev tables does not take long.
    pub(super) fn memory(&mut self) {
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
}
