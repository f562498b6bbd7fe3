//! Health as the core sees it: the probers' and remote rules' verdicts in
//! (acted on at the next tick, by [`crate::balance`]), every rule's and
//! served child rule's exported state out (HTTP `/status`, M21), and the
//! transitions of the derived and consumed states, logged once and
//! counted.

use std::time::Duration;

use health::{Aggregate, HealthSnapshot, State};

use super::{Core, say};
use crate::ports::RemoteKey;

impl Core {
    /// The remote rules to poll.
    pub fn remote_keys(&self) -> &[RemoteKey] {
        self.balance.remote_keys()
    }

    /// The health generation the core last saw (the shell hands over a new
    /// [`HealthSnapshot`] only when the checker's moved past it).
    pub fn health_generation(&self) -> u64 {
        self.balance.health_generation()
    }

    /// Every forwarding rule's exported state (M21), in rule order.
    pub fn rule_states(&self) -> Vec<(String, Aggregate)> {
        self.balance.rule_states(&self.compiled)
    }

    /// Every served child rule's exported state (M5, M21), in child order.
    pub fn child_rule_states(&self) -> Vec<(String, Aggregate)> {
        self.balance.served_child_states(&self.compiled)
    }

    /// What HTTP `/status` and the metrics export (M21): every rule's
    /// state, then every served child rule's.
    pub fn exported_states(&self) -> Vec<(String, Aggregate)> {
        let mut all = self.rule_states();
        all.extend(self.child_rule_states());
        all
    }

    /// Every probed endpoint's latest status.
    pub fn probed(&self) -> &[health::EndpointStatus] {
        self.balance.probed()
    }

    /// Input of [`Core::step`]: new health statuses.
    pub(super) fn health(&mut self, now: Duration, h: HealthSnapshot) {
        self.advance(now);
        self.balance.health(h);
    }

    /// Input of [`Core::step`]: the latest verdict on each remote rule and
    /// why.
    pub(super) fn remote_verdicts(
        &mut self,
        now: Duration,
        state: impl Fn(&RemoteKey) -> (State, String),
    ) {
        self.advance(now);
        self.balance.remote(state);
    }

    /// Logs (once) and counts every change of a composite's source, a
    /// composite, a rule's exported state and a followed remote rule.
    pub(super) fn track_states(&mut self) {
        let states = self.balance.derived_states(&self.compiled);
        let names: std::collections::HashSet<(crate::transitions::Kind, &str)> =
            states.iter().map(|(k, n, _)| (*k, n.as_str())).collect();
        self.transitions.retain(|k, n| names.contains(&(k, n)));
        for (kind, name, now) in &states {
            if let Some(from) = self.transitions.observe(*kind, name, *now) {
                say!(
                    self.out,
                    Info,
                    "health: {} {name} {from} -> {now}",
                    kind.as_str()
                );
            }
        }
    }

    /// The transitions of derived and consumed health states (metrics).
    pub fn transitions(&self) -> &crate::transitions::Transitions {
        &self.transitions
    }
}
