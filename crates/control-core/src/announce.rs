//! Which VIPs this node announces through its BGP speaker (M34, M35): a
//! pure decision, with the counts and log lines of its changes.
//!
//! A VIP is a served child rule's VIP (M5: a node of availability group `g`
//! serves, so announces, group `g`'s VIPs only). It is announced while
//! - the node is neither drained nor shutting down (these always withdraw),
//!   and
//! - `announce = "always"`, or at least one of the child rules on it is
//!   HEALTHY (the child rule's exported state,
//!   [`crate::Core::child_rule_states`]: its rule's composite's, else its
//!   service's aggregated health, from the probes through that VIP; the
//!   same state `/status` exports). Each VIP follows its own child rules
//!   only, so a path broken through one availability group's VIP
//!   withdraws that VIP and leaves the other group's alone (M5). A VIP
//!   carrying two rules (TCP 80 and 443, say) stays up while either is
//!   healthy: withdrawing the /32 would take the healthy one down too.
//!
//! Fail-open (`[bgp] fail_open`, default true): when health alone would
//! withdraw every VIP of the node and every one of them is known UNHEALTHY,
//! all are announced: if every node sees the same, a withdrawal would only
//! trade a degraded service for none (M35). While some rule is still
//! UNKNOWN (right after start, before the first probes), fail-open waits:
//! a starting node does not announce what it has not checked yet.

use std::collections::BTreeMap;
use std::net::IpAddr;

use config::Compiled;
use config::schema::AnnouncePolicy;
use config::values::Prefix;
use health::Aggregate;

/// What the node itself says about announcing, whatever its rules' health
/// (drain M37, shutdown M39).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeState {
    /// An operator drained this node.
    pub drained: bool,
    /// The node is stopping.
    pub shutting_down: bool,
}

/// How health turns into announcements (`[bgp] announce`, `fail_open`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// `when_healthy` or `always`.
    pub announce: AnnouncePolicy,
    /// Announce every VIP when health alone would withdraw them all.
    pub fail_open: bool,
}

impl Policy {
    /// The policy of `[bgp]`; `None` when there is no `[bgp]`.
    pub fn of(compiled: &Compiled) -> Option<Policy> {
        compiled.settings.bgp.as_ref().map(|b| Policy {
            announce: b.announce,
            fail_open: b.fail_open,
        })
    }
}

/// Why a VIP is (not) announced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Why {
    /// A rule on it is healthy.
    Healthy,
    /// `announce = "always"`.
    Always,
    /// Health would withdraw every VIP: fail-open keeps them (M35).
    FailOpen,
    /// No rule on it is healthy (`state`: the best of their states).
    NotHealthy(Aggregate),
    /// The node is drained.
    Drained,
    /// The node is shutting down.
    ShuttingDown,
}

impl Why {
    /// Whether the VIP is announced.
    pub fn announced(self) -> bool {
        matches!(self, Why::Healthy | Why::Always | Why::FailOpen)
    }
}

impl std::fmt::Display for Why {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Why::Healthy => f.write_str("announced (healthy)"),
            Why::Always => f.write_str("announced (announce = always)"),
            Why::FailOpen => f.write_str("announced (fail-open: every VIP is unhealthy)"),
            Why::NotHealthy(a) => write!(f, "withdrawn (rule {a})"),
            Why::Drained => f.write_str("withdrawn (node drained)"),
            Why::ShuttingDown => f.write_str("withdrawn (shutting down)"),
        }
    }
}

/// The decision: each VIP of the node once, in address order.
pub type Desired = Vec<(IpAddr, Why)>;

/// The VIPs `desired` announces.
pub fn announced(desired: &Desired) -> Vec<IpAddr> {
    desired
        .iter()
        .filter(|(_, w)| w.announced())
        .map(|(v, _)| *v)
        .collect()
}

/// The routes announcing what `desired` marks announced: each VIP as its
/// prefix — /32 or /128, or a VIP prefix's own (`2001:db8:1::/96`, whose
/// decision is keyed by the address it is probed through) — in order.
pub fn routes(compiled: &Compiled, desired: &Desired) -> Vec<Prefix> {
    let mut out: Vec<Prefix> = announced(desired)
        .into_iter()
        .map(|vip| {
            compiled
                .children
                .iter()
                .find(|ch| ch.vip == vip)
                .map_or_else(|| Prefix::host(vip), |ch| ch.vip_spec().prefix())
        })
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// Decides each served VIP's announcement (see the module docs).
/// `child_health` is indexed like `compiled.children` (a missing entry
/// counts as UNKNOWN).
pub fn desired(
    compiled: &Compiled,
    child_health: &[Aggregate],
    node: NodeState,
    policy: Policy,
) -> Desired {
    // Per VIP, the best state of its child rules: HEALTHY over UNKNOWN over
    // UNHEALTHY.
    let mut best: BTreeMap<IpAddr, Aggregate> = BTreeMap::new();
    for (i, ch) in compiled.children.iter().enumerate() {
        if !ch.served {
            continue;
        }
        let h = child_health.get(i).copied().unwrap_or(Aggregate::Unknown);
        let e = best.entry(ch.vip).or_insert(Aggregate::Unhealthy);
        *e = better(*e, h);
    }
    let all_unhealthy = !best.is_empty() && best.values().all(|a| *a == Aggregate::Unhealthy);
    best.into_iter()
        .map(|(vip, h)| {
            let why = if node.shutting_down {
                Why::ShuttingDown
            } else if node.drained {
                Why::Drained
            } else if policy.announce == AnnouncePolicy::Always {
                Why::Always
            } else if h == Aggregate::Healthy {
                Why::Healthy
            } else if policy.fail_open && all_unhealthy {
                Why::FailOpen
            } else {
                Why::NotHealthy(h)
            };
            (vip, why)
        })
        .collect()
}

fn better(a: Aggregate, b: Aggregate) -> Aggregate {
    let rank = |x: Aggregate| match x {
        Aggregate::Healthy => 2,
        Aggregate::Unknown => 1,
        Aggregate::Unhealthy => 0,
    };
    if rank(b) > rank(a) { b } else { a }
}

/// The decision in force and what its changes added up to.
#[derive(Debug, Default)]
pub struct Announcements {
    current: Option<Desired>,
    /// VIPs that went from withdrawn (or nothing) to announced.
    pub announced_total: u64,
    /// VIPs that went from announced to withdrawn.
    pub withdrawn_total: u64,
}

impl Announcements {
    /// Takes `next`; `Some(log lines)` when the set of announced VIPs or a
    /// reason changed (or on the first call), `None` when nothing did.
    pub fn update(&mut self, next: Desired) -> Option<Vec<String>> {
        if self.current.as_ref() == Some(&next) {
            return None;
        }
        let old = self.current.take().unwrap_or_default();
        let was = |vip: IpAddr| old.iter().find(|(v, _)| *v == vip).map(|(_, w)| *w);
        let mut lines = Vec::new();
        for (vip, why) in &next {
            let before = was(*vip);
            if before == Some(*why) {
                continue;
            }
            let up_before = before.is_some_and(Why::announced);
            match (up_before, why.announced()) {
                (false, true) => self.announced_total += 1,
                (true, false) => self.withdrawn_total += 1,
                _ => {}
            }
            lines.push(format!("VIP {vip}: {why}"));
        }
        for (vip, why) in &old {
            if !next.iter().any(|(v, _)| v == vip) {
                if why.announced() {
                    self.withdrawn_total += 1;
                }
                lines.push(format!("VIP {vip}: withdrawn (no longer served)"));
            }
        }
        self.current = Some(next);
        Some(lines)
    }

    /// The decision in force (`None` before the first).
    pub fn current(&self) -> Option<&Desired> {
        self.current.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: Aggregate = Aggregate::Healthy;
    const U: Aggregate = Aggregate::Unhealthy;
    const K: Aggregate = Aggregate::Unknown;

    /// A node of availability group `ag` with one TCP rule per entry of
    /// `rules`: (its `vips` as TOML, its port).
    fn node(rules: &[(&str, u16)], ag: Option<u8>) -> Compiled {
        let mut text = String::from("[node]\nname = \"n\"\nregion = \"r\"\nzone = \"z\"\n");
        if let Some(g) = ag {
            text += &format!("availability_group = {g}\n");
        }
        text += "\n[[backend_services]]\nname = \"s\"\ndelivery = \"ipip\"\ngroups = [{ name = \"g\", region = \"r\", zone = \"z\", endpoints = [{ address = \"10.1.0.1\" }] }]\n";
        for (i, (vips, port)) in rules.iter().enumerate() {
            text += &format!(
                "\n[[forwarding_rules]]\nname = \"r{i}\"\nvips = [{vips}]\nprotocol = \"TCP\"\nports = {port}\nbackend_service = \"s\"\n"
            );
        }
        match config::load_str("t.toml", &text, &config::Env::default()) {
            Ok(l) => l.compiled,
            Err(e) => panic!("{e}"),
        }
    }

    fn pol(announce: AnnouncePolicy, fail_open: bool) -> Policy {
        Policy {
            announce,
            fail_open,
        }
    }

    fn up(d: &Desired) -> Vec<String> {
        announced(d).iter().map(ToString::to_string).collect()
    }

    #[test]
    fn every_combination_of_health_node_state_and_policy() {
        // Two VIPs, one rule each.
        let c = node(&[("\"198.51.100.1\"", 80), ("\"198.51.100.2\"", 80)], None);
        let healths = [H, U, K];
        for &h0 in &healths {
            for &h1 in &healths {
                for drained in [false, true] {
                    for shutting_down in [false, true] {
                        for announce in [AnnouncePolicy::WhenHealthy, AnnouncePolicy::Always] {
                            for fail_open in [false, true] {
                                let node = NodeState {
                                    drained,
                                    shutting_down,
                                };
                                let d = desired(&c, &[h0, h1], node, pol(announce, fail_open));
                                let got = up(&d);
                                let want: Vec<String> = if drained || shutting_down {
                                    vec![]
                                } else if announce == AnnouncePolicy::Always
                                    || (fail_open && h0 == U && h1 == U)
                                {
                                    vec!["198.51.100.1".into(), "198.51.100.2".into()]
                                } else {
                                    [(h0, "198.51.100.1"), (h1, "198.51.100.2")]
                                        .iter()
                                        .filter(|(h, _)| *h == H)
                                        .map(|(_, v)| (*v).to_owned())
                                        .collect()
                                };
                                assert_eq!(
                                    got, want,
                                    "{h0:?} {h1:?} {node:?} {announce:?} fail_open={fail_open}: {d:?}"
                                );
                                assert_eq!(d.len(), 2, "each VIP has a decision");
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn reasons_name_what_decided() {
        let c = node(&[("\"198.51.100.1\"", 80), ("\"198.51.100.2\"", 80)], None);
        let p = pol(AnnouncePolicy::WhenHealthy, true);
        let d = desired(&c, &[H, K], NodeState::default(), p);
        assert_eq!(d[0].1, Why::Healthy);
        assert_eq!(d[1].1, Why::NotHealthy(K));
        let d = desired(&c, &[U, U], NodeState::default(), p);
        assert!(d.iter().all(|(_, w)| *w == Why::FailOpen), "{d:?}");
        let node = NodeState {
            drained: true,
            shutting_down: true,
        };
        let d = desired(&c, &[H, H], node, p);
        assert!(d.iter().all(|(_, w)| *w == Why::ShuttingDown), "{d:?}");
    }

    #[test]
    fn only_served_children_count_and_a_shared_vip_follows_its_best_rule() {
        // Rules 0 and 1 share a VIP (group 0); each has another VIP in group
        // 1, which this node (group 0) neither serves nor announces; so
        // does rule 2.
        let c = node(
            &[
                ("\"198.51.100.1\", \"198.51.100.5\"", 80),
                ("\"198.51.100.1\", \"198.51.100.6\"", 443),
                ("\"198.51.100.8\", \"198.51.100.9\"", 80),
            ],
            Some(0),
        );
        let p = pol(AnnouncePolicy::WhenHealthy, false);
        let v1: IpAddr = "198.51.100.1".parse().unwrap();
        let v8: IpAddr = "198.51.100.8".parse().unwrap();
        // Per child rule: r0-ag0, r0-ag1, r1-ag0, r1-ag1, r2-ag0, r2-ag1;
        // the group 1 children's states (served elsewhere) never count.
        let d = desired(&c, &[U, H, H, H, U, H], NodeState::default(), p);
        assert_eq!(d, vec![(v1, Why::Healthy), (v8, Why::NotHealthy(U))]);
        let d = desired(&c, &[U, H, K, H, H, U], NodeState::default(), p);
        assert_eq!(d, vec![(v1, Why::NotHealthy(K)), (v8, Why::Healthy)]);
        // A missing health entry is UNKNOWN, never a panic.
        let d = desired(
            &c,
            &[],
            NodeState::default(),
            pol(AnnouncePolicy::WhenHealthy, true),
        );
        assert!(up(&d).is_empty(), "{d:?}");
    }

    #[test]
    fn each_vip_of_a_node_of_both_groups_follows_its_own_child_rule() {
        // One rule, a VIP per availability group; the node serves both.
        let c = node(&[("\"198.51.100.1\", \"198.51.100.5\"", 80)], None);
        let v0: IpAddr = "198.51.100.1".parse().unwrap();
        let v1: IpAddr = "198.51.100.5".parse().unwrap();
        let p = pol(AnnouncePolicy::WhenHealthy, true);
        // Group 1's path is broken: its VIP alone is withdrawn (no
        // fail-open: group 0's VIP is healthy).
        let d = desired(&c, &[H, U], NodeState::default(), p);
        assert_eq!(d, vec![(v0, Why::Healthy), (v1, Why::NotHealthy(U))]);
        let d = desired(&c, &[U, H], NodeState::default(), p);
        assert_eq!(d, vec![(v0, Why::NotHealthy(U)), (v1, Why::Healthy)]);
        let d = desired(&c, &[U, U], NodeState::default(), p);
        assert_eq!(d, vec![(v0, Why::FailOpen), (v1, Why::FailOpen)]);
    }

    #[test]
    fn changes_are_counted_and_logged_once() {
        let c = node(&[("\"198.51.100.1\"", 80), ("\"198.51.100.2\"", 80)], None);
        let p = pol(AnnouncePolicy::WhenHealthy, false);
        let mut a = Announcements::default();
        let first = a.update(desired(&c, &[H, U], NodeState::default(), p));
        assert_eq!(
            first.map(|l| l.len()),
            Some(2),
            "the first decision is logged"
        );
        assert_eq!((a.announced_total, a.withdrawn_total), (1, 0));
        assert_eq!(
            a.update(desired(&c, &[H, U], NodeState::default(), p)),
            None
        );
        let lines = a
            .update(desired(&c, &[U, H], NodeState::default(), p))
            .unwrap();
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert_eq!((a.announced_total, a.withdrawn_total), (2, 1));
        // A VIP no longer served is withdrawn.
        let c1 = node(&[("\"198.51.100.1\"", 80)], None);
        let lines = a
            .update(desired(&c1, &[U], NodeState::default(), p))
            .unwrap();
        assert!(
            lines.iter().any(|l| l.contains("no longer served")),
            "{lines:?}"
        );
        assert_eq!((a.announced_total, a.withdrawn_total), (2, 2));
    }
}
