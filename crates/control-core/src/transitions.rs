//! Every change of a derived health state is logged once and counted (M18
//! covers endpoints; this covers what is derived from them and what is
//! consumed from other nodes, M20, M21): a composite's sources (each
//! aggregated in the node's region), composites, the rules' exported
//! states, and the remote rules this node follows. Everything starts
//! UNKNOWN, so the first verdict is a transition too.

use std::collections::{BTreeMap, HashMap};

use locality::AggregateHealth as Aggregate;

/// What a state belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// A composite's source: `composite/service`.
    Source,
    /// A composite health check.
    Composite,
    /// A forwarding rule's exported state.
    Rule,
    /// A remote rule followed by a `remote_rule` group: `rule@url`.
    Remote,
}

impl Kind {
    /// Its label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Source => "source",
            Kind::Composite => "composite",
            Kind::Rule => "rule",
            Kind::Remote => "remote",
        }
    }
}

/// A counted transition: kind, name, from, to.
pub type Key = (Kind, String, &'static str, &'static str);

/// The last state of each, and the transitions counted.
#[derive(Debug, Default)]
pub struct Transitions {
    last: HashMap<(Kind, String), Aggregate>,
    counts: BTreeMap<Key, u64>,
}

impl Transitions {
    /// Takes the current state of `name`; the state it left, if it changed.
    pub fn observe(&mut self, kind: Kind, name: &str, now: Aggregate) -> Option<Aggregate> {
        let last = self
            .last
            .entry((kind, name.to_owned()))
            .or_insert(Aggregate::Unknown);
        if *last == now {
            return None;
        }
        let from = std::mem::replace(last, now);
        *self
            .counts
            .entry((kind, name.to_owned(), from.as_str(), now.as_str()))
            .or_default() += 1;
        Some(from)
    }

    /// Forgets the states of what `keep` says no longer exists (a reload
    /// removed it); their counts stay.
    pub fn retain(&mut self, keep: impl Fn(Kind, &str) -> bool) {
        self.last.retain(|(k, n), _| keep(*k, n));
    }

    /// The counts, in (kind, name, from, to) order.
    pub fn counts(&self) -> impl Iterator<Item = (&Key, u64)> {
        self.counts.iter().map(|(k, &v)| (k, v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_are_counted_once_from_unknown_on() {
        let mut t = Transitions::default();
        assert_eq!(t.observe(Kind::Composite, "c", Aggregate::Unknown), None);
        assert_eq!(
            t.observe(Kind::Composite, "c", Aggregate::Healthy),
            Some(Aggregate::Unknown)
        );
        assert_eq!(t.observe(Kind::Composite, "c", Aggregate::Healthy), None);
        assert_eq!(
            t.observe(Kind::Composite, "c", Aggregate::Unhealthy),
            Some(Aggregate::Healthy)
        );
        assert_eq!(
            t.observe(Kind::Rule, "c", Aggregate::Healthy),
            Some(Aggregate::Unknown),
            "kinds apart"
        );
        let got: Vec<(String, u64)> = t
            .counts()
            .map(|((k, n, f, to), v)| (format!("{} {n} {f}->{to}", k.as_str()), v))
            .collect();
        assert_eq!(
            got,
            [
                ("composite c HEALTHY->UNHEALTHY".to_owned(), 1),
                ("composite c UNKNOWN->HEALTHY".to_owned(), 1),
                ("rule c UNKNOWN->HEALTHY".to_owned(), 1),
            ]
        );
        t.retain(|k, _| k != Kind::Composite);
        assert_eq!(
            t.observe(Kind::Composite, "c", Aggregate::Healthy),
            Some(Aggregate::Unknown),
            "forgotten: UNKNOWN again"
        );
    }
}
