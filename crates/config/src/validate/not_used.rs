//! Warnings for fields this version accepts but does not act on, so that none
//! silently does nothing.

use super::{Checker, FIXED_BURST};

impl Checker<'_> {
    /// Fields this version parses and checks but does not act on yet: each
    /// one the file writes gets a warning, so that none silently does
    /// nothing. (Remove an entry when its feature lands.)
    pub(super) fn not_used(&mut self) {
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
        if cfg.bgp.is_some() {
            self.warn(
                "bgp",
                format!("{NOT_USED}: no VIP is announced or withdrawn; announce them from the BGP speaker's own configuration"),
            );
        }
    }
}
