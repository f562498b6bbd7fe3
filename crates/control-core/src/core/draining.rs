//! Draining (M37: `spillway drain|undrain node|zone|region NAME`, and the
//! state saved by a previous run) and shutting down (M39: the first
//! SIGTERM starts a period of forwarding with the VIPs withdrawn).

use std::time::Duration;

use super::{Core, say};

impl Core {
    /// Whether this node is drained (M37): its VIPs are to be withdrawn
    /// from its routers; it forwards as before.
    pub fn node_drained(&self) -> bool {
        self.drained
            .contains(crate::drain::Scope::Node, &self.compiled.node.name)
    }

    /// Whether the daemon is shutting down (M39): its VIPs are to be
    /// withdrawn; it forwards until [`Core::shutdown_due`].
    pub fn shutting_down(&self) -> bool {
        self.shutdown_at.is_some()
    }

    /// What is drained, by name (the shell saves it).
    pub fn drained(&self) -> &crate::drain::Drained {
        &self.drained
    }

    /// Input: the drain state saved by a previous run (names this
    /// configuration lacks are kept: they apply if they come back).
    pub fn restore_drained(&mut self, now: Duration, drained: crate::drain::Drained) {
        self.advance(now);
        for (scope, name) in drained.iter() {
            say!(self.out, Info, "{scope} {name} drained (saved state)");
        }
        self.drained = drained;
        self.balance.set_drained(&self.compiled, &self.drained);
        self.announce();
    }

    /// Input: a shutdown was asked for at `now` (the first SIGTERM): the
    /// node forwards for `period` more, then [`Core::shutdown_due`].
    pub fn shutdown(&mut self, now: Duration, period: Duration) {
        self.advance(now);
        if self.shutdown_at.is_none() {
            self.shutdown_at = Some(self.now.saturating_add(period));
            say!(
                self.out,
                Info,
                "shutting down: VIPs withdrawn, forwarding for {:.1} s more",
                period.as_secs_f64()
            );
            self.announce();
        }
    }

    /// Whether the shutdown's drain period is over (as of the latest input).
    pub fn shutdown_due(&self) -> bool {
        self.shutdown_at.is_some_and(|t| self.now >= t)
    }

    /// `drain` / `undrain`: checks the name against the running
    /// configuration; the plans follow at the next tick.
    pub(super) fn set_drain(
        &mut self,
        scope: crate::drain::Scope,
        name: &str,
        on: bool,
    ) -> Result<String, super::DrainError> {
        use super::DrainError;
        use crate::drain::Scope;
        let c = &self.compiled;
        let known: Vec<&str> = match scope {
            Scope::Node => vec![c.node.name.as_str()],
            Scope::Zone => c.zones.iter().map(String::as_str).collect(),
            Scope::Region => c.regions.iter().map(String::as_str).collect(),
        };
        // One that a reload removed may still be undrained.
        let undrain_removed = !on && self.drained.contains(scope, name);
        if !known.contains(&name) && !undrain_removed {
            return Err(match scope {
                Scope::Node => DrainError::NotThisNode {
                    this: c.node.name.clone(),
                    name: name.to_owned(),
                },
                _ => DrainError::Unknown {
                    scope,
                    name: name.to_owned(),
                    known: known.join(", "),
                },
            });
        }
        let verb = if on { "drained" } else { "undrained" };
        if !self.drained.set(scope, name, on) {
            return Ok(format!("{scope} {name} was already {verb}"));
        }
        self.balance.set_drained(&self.compiled, &self.drained);
        let what = match (scope, on) {
            (Scope::Node, true) => "its VIPs are withdrawn; forwarding goes on",
            (Scope::Node, false) => "its VIPs are announced again",
            (_, true) => "new connections go elsewhere; established ones stay",
            (_, false) => "it takes new connections again",
        };
        say!(self.out, Info, "{scope} {name} {verb}: {what}");
        // The announcement follows at once, not at the next tick.
        self.announce();
        Ok(format!("{scope} {name} {verb}: {what}"))
    }
}
