//! Capacity is the cluster's (M25 with M34): N balancer nodes behind ECMP
//! each see about 1/N of a service's traffic, but a `RATE` group's
//! `max_rate` is for all of them together. Every planning interval each
//! node sends its peers (over flow sync) what its data plane forwarded to
//! every endpoint; each node adds the rates it last heard from every peer
//! to its own and plans on the cluster's total against the group's whole
//! capacity. Every node then computes the same fractions from the same
//! figures, so ECMP's choice of node does not change where a new
//! connection goes.
//!
//! A peer that has not been heard from for [`SILENT_AFTER`] (dead,
//! partitioned, or never started) is assumed to use its fallback share of
//! every capacity — `node.capacity_share`, by default 1 / (peers + 1) — as
//! a node that cannot hear its peers does itself. The nodes heard from
//! plan with the rest: `1 − silent × share`, and never less than `share`
//! (so a node on its own budgets exactly its fallback share). A node with
//! peers therefore never assumes the whole capacity unless it hears them
//! all. Without `[flow_sync]` a node knows no peers: it budgets
//! `capacity_share` (default 1).
//!
//! No I/O and no clock: time is an argument; the datagrams are
//! [`crate::sync`]'s.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::time::Duration;

use config::Compiled;
use flowsync::Rate;

/// A peer not heard from for this long is silent: its rates no longer
/// count and its fallback share is held for it. Three planning intervals:
/// one lost datagram does not make a peer silent.
pub const SILENT_AFTER: Duration = Duration::from_secs(3);

/// What one peer said last.
#[derive(Debug, Default)]
struct Peer {
    /// When its last rates arrived.
    heard: Option<Duration>,
    /// It said it was leaving (a graceful shutdown) and has not been heard
    /// since: neither counted nor holding a share.
    left: bool,
    /// Service → endpoint identity → (packets per second, when heard).
    rates: HashMap<String, HashMap<String, (f64, Duration)>>,
}

/// The share of every `RATE` capacity this node plans with, and why.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Budget {
    /// Fraction (0, 1] of each group's capacity that the demand this node
    /// counts (its own and its heard peers') may use.
    pub share: f64,
    /// Configured peers, but those that left.
    pub peers: usize,
    /// Peers heard from within [`SILENT_AFTER`].
    pub heard: usize,
}

impl Budget {
    /// Peers not heard from.
    pub fn silent(&self) -> usize {
        self.peers - self.heard
    }
}

/// The cluster as this node knows it.
#[derive(Debug)]
pub struct Cluster {
    /// The fallback share (`node.capacity_share` or its default).
    fallback: f64,
    /// Whether it was configured.
    fallback_set: bool,
    /// The flow-sync peers, as at start (a change of `[flow_sync]` takes
    /// effect at the next restart, for the socket and for this alike).
    peers: Vec<(SocketAddr, Peer)>,
    /// Service → endpoint identities of this configuration: a peer's
    /// record of anything else is not kept, so a peer cannot grow this
    /// node's memory beyond its own configuration.
    known: HashMap<String, HashSet<String>>,
}

impl Cluster {
    /// The cluster of `compiled`: its flow-sync peers, none heard yet.
    pub fn new(compiled: &Compiled) -> Cluster {
        let peers = compiled
            .settings
            .flow_sync
            .as_ref()
            .map_or(&[][..], |f| &f.peers[..]);
        let mut c = Cluster {
            fallback: 1.0,
            fallback_set: false,
            peers: Vec::new(),
            known: HashMap::new(),
        };
        for a in peers {
            if !c.peers.iter().any(|(p, _)| p == a) {
                c.peers.push((*a, Peer::default()));
            }
        }
        c.reconfigure(compiled);
        c
    }

    /// Follows a new configuration's share and endpoints; the peers and
    /// what they said stay.
    pub fn reconfigure(&mut self, compiled: &Compiled) {
        #[allow(clippy::cast_precision_loss)] // a handful of peers
        let share = if compiled.node.capacity_share_set {
            compiled.node.capacity_share
        } else {
            1.0 / (self.peers.len() as f64 + 1.0)
        };
        self.fallback = if share.is_finite() && share > 0.0 {
            share.min(1.0)
        } else {
            1.0
        };
        self.fallback_set = compiled.node.capacity_share_set;
        self.known.clear();
        for (i, s) in compiled.services.iter().enumerate() {
            let id = config::compiled::ServiceId(u32::try_from(i).unwrap_or(u32::MAX));
            self.known.entry(s.name.clone()).or_default().extend(
                compiled
                    .service_endpoints(id)
                    .iter()
                    .map(|ep| ep.identity.clone()),
            );
        }
        let known = &self.known;
        for (_, p) in &mut self.peers {
            p.rates.retain(|svc, eps| {
                let ids = known.get(svc);
                eps.retain(|id, _| ids.is_some_and(|k| k.contains(id)));
                !eps.is_empty()
            });
        }
    }

    /// Input: peer `from` sent these rates at `now` (authenticated by flow
    /// sync). Records of endpoints this configuration lacks are ignored.
    /// Returns false for a source that is no configured peer.
    pub fn heard(&mut self, from: SocketAddr, now: Duration, rates: &[Rate]) -> bool {
        let Some((_, peer)) = self.peers.iter_mut().find(|(a, _)| *a == from) else {
            return false;
        };
        peer.heard = Some(now);
        peer.left = false;
        for r in rates {
            let known = self.known.get(&r.service);
            if !known.is_some_and(|ids| ids.contains(&r.identity)) {
                continue;
            }
            peer.rates
                .entry(r.service.clone())
                .or_default()
                .insert(r.identity.clone(), (r.pps(), now));
        }
        true
    }

    /// Input: peer `from` said it leaves the cluster. Until it is heard
    /// again it is no member: its rates do not count and no share is held
    /// for it (its traffic has moved to the others). A replayed "leaving"
    /// lasts until the live peer's next rates, a second.
    pub fn left(&mut self, from: SocketAddr) {
        if let Some((_, p)) = self.peers.iter_mut().find(|(a, _)| *a == from) {
            p.left = true;
            p.heard = None;
            p.rates.clear();
        }
    }

    fn fresh(heard: Option<Duration>, now: Duration) -> bool {
        heard.is_some_and(|t| now.saturating_sub(t) < SILENT_AFTER)
    }

    /// The share to plan with at `now`.
    pub fn budget(&self, now: Duration) -> Budget {
        let members = self.peers.iter().filter(|(_, p)| !p.left).count();
        let heard = self
            .peers
            .iter()
            .filter(|(_, p)| Self::fresh(p.heard, now))
            .count();
        let silent = members - heard;
        let share = if self.peers.is_empty() {
            self.fallback
        } else if silent == 0 {
            1.0
        } else {
            #[allow(clippy::cast_precision_loss)] // a handful of peers
            let rest = 1.0 - silent as f64 * self.fallback;
            rest.clamp(self.fallback, 1.0)
        };
        Budget {
            share,
            peers: members,
            heard,
        }
    }

    /// Per configured peer: whether its rates count at `now`.
    pub fn counted(&self, now: Duration) -> Vec<bool> {
        self.peers
            .iter()
            .map(|(_, p)| Self::fresh(p.heard, now))
            .collect()
    }

    /// What the peers heard from at `now` forwarded to endpoint `identity`
    /// of `service`, in packets per second, together.
    pub fn peers_rate(&self, now: Duration, service: &str, identity: &str) -> f64 {
        self.peers
            .iter()
            .filter(|(_, p)| Self::fresh(p.heard, now))
            .filter_map(|(_, p)| p.rates.get(service)?.get(identity))
            .filter(|(_, t)| Self::fresh(Some(*t), now))
            .map(|(r, _)| r)
            .sum()
    }

    /// Its part of `status`.
    pub fn status(&self, now: Duration) -> crate::report::Cluster {
        let b = self.budget(now);
        crate::report::Cluster {
            nodes: self.peers.len() + 1,
            peers_heard: b.heard,
            silent: self
                .peers
                .iter()
                .filter(|(_, p)| !p.left && !Self::fresh(p.heard, now))
                .map(|(a, _)| *a)
                .collect(),
            left: self
                .peers
                .iter()
                .filter(|(_, p)| p.left)
                .map(|(a, _)| *a)
                .collect(),
            capacity_share: b.share,
            fallback_share: self.fallback,
            fallback_configured: self.fallback_set,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "hex:000102030405060708090a0b0c0d0e0f";

    /// A node with `peers` flow-sync peers (192.0.2.10…), `share` set or
    /// not, and service `web` of endpoints 10.1.0.1 and 10.1.0.2.
    fn compiled(peers: usize, share: Option<f64>) -> Compiled {
        let mut text = String::from("[node]\nname = \"n\"\nregion = \"r\"\nzone = \"z\"\n");
        if let Some(s) = share {
            text += &format!("capacity_share = {s}\n");
        }
        text += "\n[[backend_services]]\nname = \"web\"\ndelivery = \"ipip\"\nbalancing_mode = \"RATE\"\ngroups = [{ name = \"g\", region = \"r\", zone = \"z\", max_rate = 100, endpoints = [{ address = \"10.1.0.1\" }, { address = \"10.1.0.2\" }] }]\n";
        text += "\n[[forwarding_rules]]\nname = \"web\"\nvips = [\"10.0.0.1\"]\nprotocol = \"TCP\"\nports = 80\nbackend_service = \"web\"\n";
        if peers > 0 {
            let list: Vec<String> = (0..peers).map(|i| format!("\"{}\"", peer(i))).collect();
            text += &format!(
                "\n[flow_sync]\nlisten = \"192.0.2.1:7700\"\npeers = [{}]\nkey = \"{KEY}\"\n",
                list.join(", ")
            );
        }
        match config::load_str("t.toml", &text, &config::Env::default()) {
            Ok(l) => l.compiled,
            Err(e) => panic!("{e}"),
        }
    }

    fn peer(i: usize) -> SocketAddr {
        SocketAddr::from(([192, 0, 2, 10 + u8::try_from(i).unwrap_or(0)], 7700))
    }

    const fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn a_lone_node_budgets_its_configured_share_or_all() {
        let c = Cluster::new(&compiled(0, None));
        assert_eq!(
            c.budget(secs(9)),
            Budget {
                share: 1.0,
                peers: 0,
                heard: 0
            }
        );
        let c = Cluster::new(&compiled(0, Some(0.25)));
        assert_eq!(c.budget(secs(9)).share, 0.25);
        assert!(c.status(secs(9)).fallback_configured);
    }

    #[test]
    fn silent_peers_hold_their_share_and_heard_ones_count() {
        let mut c = Cluster::new(&compiled(3, None));
        // None heard yet (start): the fallback, a quarter.
        assert_eq!(c.budget(secs(0)).share, 0.25);
        let r = |pps| [Rate::new("web", "10.1.0.1", pps)];
        let id = r(0.0)[0].identity.clone();
        assert!(c.heard(peer(0), secs(1), &r(10.0)));
        assert!(c.heard(peer(1), secs(1), &r(20.0)));
        let b = c.budget(secs(2));
        assert_eq!((b.heard, b.silent()), (2, 1));
        assert_eq!(b.share, 0.75, "one silent peer holds its quarter");
        assert!((c.peers_rate(secs(2), "web", &id) - 30.0).abs() < 1e-9);
        assert!(c.heard(peer(2), secs(2), &r(5.0)));
        assert_eq!(c.budget(secs(2)).share, 1.0, "all heard: cluster-wide");
        assert!((c.peers_rate(secs(2), "web", &id) - 35.0).abs() < 1e-9);
        // Peers 0 and 1 fall silent: their rates stop counting.
        let b = c.budget(secs(4));
        assert_eq!((b.heard, b.share), (1, 0.5));
        assert!((c.peers_rate(secs(4), "web", &id) - 5.0).abs() < 1e-9);
        assert_eq!(c.status(secs(4)).silent, vec![peer(0), peer(1)]);
        // A stranger is not a peer.
        assert!(!c.heard(peer(7), secs(4), &r(1.0)));
    }

    #[test]
    fn a_peer_that_left_holds_no_share_until_heard_again() {
        let mut c = Cluster::new(&compiled(3, None));
        for i in 0..3 {
            assert!(c.heard(peer(i), secs(1), &[Rate::new("web", "10.1.0.1", 9.0)]));
        }
        c.left(peer(2));
        let b = c.budget(secs(2));
        assert_eq!((b.peers, b.heard, b.share), (2, 2, 1.0));
        assert!((c.peers_rate(secs(2), "web", "10.1.0.1") - 18.0).abs() < 1e-9);
        // Peer 1 falls silent: a quarter held for it, none for peer 2.
        assert!(c.heard(peer(0), secs(4), &[]));
        assert_eq!(c.budget(secs(5)).share, 0.75);
        let st = c.status(secs(5));
        assert_eq!((st.silent, st.left), (vec![peer(1)], vec![peer(2)]));
        // Peer 2 is back.
        assert!(c.heard(peer(2), secs(5), &[]));
        assert_eq!(c.budget(secs(5)).peers, 3);
        assert!(c.status(secs(5)).left.is_empty());
    }

    #[test]
    fn a_generous_share_still_leaves_each_node_its_own() {
        // Three peers at 0.5 each: all silent would leave nothing.
        let c = Cluster::new(&compiled(3, Some(0.5)));
        assert_eq!(c.budget(secs(0)).share, 0.5);
        // Two peers at 0.2 each (conservative): one silent leaves 0.8.
        let mut c = Cluster::new(&compiled(2, Some(0.2)));
        assert!(c.heard(peer(0), secs(0), &[]));
        assert!((c.budget(secs(1)).share - 0.8).abs() < 1e-9);
    }

    #[test]
    fn records_of_unknown_endpoints_are_not_kept_and_reloads_keep_peers() {
        let mut c = Cluster::new(&compiled(1, None));
        let id = Rate::new("web", "10.1.0.2", 0.0).identity;
        let rates = [
            Rate::new("web", "10.1.0.2", 7.0),
            Rate::new("web", "10.9.9.9", 7.0),
            Rate::new("other", "10.1.0.2", 7.0),
        ];
        assert!(c.heard(peer(0), secs(1), &rates));
        let stored: usize = c
            .peers
            .iter()
            .map(|(_, p)| p.rates.values().map(HashMap::len).sum::<usize>())
            .sum();
        assert_eq!(stored, 1);
        // A reload keeps the peers (flow sync's wait for a restart) and
        // what they said, and follows the share.
        c.reconfigure(&compiled(2, Some(0.2)));
        let b = c.budget(secs(2));
        assert_eq!((b.peers, b.heard), (1, 1), "peer 0 is still heard");
        assert!((c.peers_rate(secs(2), "web", &id) - 7.0).abs() < 1e-9);
        assert!((c.budget(secs(9)).share - 0.8).abs() < 1e-9);
    }
}
