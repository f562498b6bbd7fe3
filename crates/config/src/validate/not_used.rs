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
        if self.map.contains("dataplane.burst_size") {
            self.warn(
                "dataplane.burst_size",
                format!("{NOT_USED}: workers receive and send bursts of {FIXED_BURST} packets"),
            );
        }
        if let Some(b) = &cfg.bgp
            && b.speaker != crate::schema::BgpSpeaker::Bird
        {
            self.warn(
                "bgp.speaker",
                format!("{NOT_USED}: only BIRD is driven; with GoBGP or ExaBGP no VIP is announced or withdrawn (docs/operating.md shows how to drive them from outside)"),
            );
        }
    }
}
