//! Who gets a management HTTP listener's connection slots (M50): one set
//! of rules for the daemon's `/status` and `/metrics` listener and for
//! `spillway zone-health`'s.
//!
//! A client is an IPv4 address, or an IPv6 /64 ([`client_of`]). Clients
//! come in three classes:
//!
//! - **peers**: the other Spillways this node is configured with (the
//!   hosts of its `remote_rule` groups' status URLs, its flow-sync peers),
//!   which read `/status` once a second and fail this node's rules over
//!   after two failed reads;
//! - **allowed**: clients in `[metrics] allow`, when it is set;
//! - **others** (when `allow` is absent).
//!
//! A client outside `allow` is denied at once. A client at its
//! `max_connections_per_client` is refused. When all `max_connections`
//! slots are taken, a newcomer takes one from a connection of a lower
//! class (of those, the client holding the most, its oldest connection),
//! which is closed (`evicted`); failing that, from a client of its own
//! class that holds at least two more connections than the newcomer's
//! client does (its fair share). Nothing else is evicted: an "other" never
//! evicts an allowed client or a peer, and a peer never another peer. So
//! a configured peer is served however many addresses hold connections,
//! and of equals no client holds much more than another while they
//! compete — idle connections included: one that never sends its request
//! holds its slot until its deadline at most, and is the first to go.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::oneshot;
use values::Prefix;

/// Whose connections a per-client cap counts together: an IPv4 address
/// (seen as such on an IPv6 listener too), or an IPv6 /64, the least a
/// host is given (SLAAC, privacy addresses): one host can pick any of its
/// 2^64 addresses, so a cap per IPv6 address would cap nobody.
pub fn client_of(addr: IpAddr) -> IpAddr {
    match addr.to_canonical() {
        IpAddr::V6(a) => IpAddr::V6((a.to_bits() & !u128::from(u64::MAX)).into()),
        v4 => v4,
    }
}

/// A client's class; a higher one may take a lower one's slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Class {
    /// Neither a peer nor in `allow` (`allow` absent).
    Other,
    /// In `[metrics] allow`.
    Allowed,
    /// A configured peer.
    Peer,
}

/// Who may connect, and who are peers.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    /// `[metrics] allow`: absent, every address.
    pub allow: Option<Vec<Prefix>>,
    /// The configured peers' addresses (also subject to `allow`).
    pub peers: Vec<Prefix>,
}

impl Policy {
    /// The class of a client at `addr`; `None` when `allow` denies it.
    pub fn class(&self, addr: IpAddr) -> Option<Class> {
        // A listener on [::] sees IPv4 clients as ::ffff:a.b.c.d.
        let addr = addr.to_canonical();
        let allowed = match &self.allow {
            None => false,
            Some(list) if list.iter().any(|p| p.contains(addr)) => true,
            Some(_) => return None,
        };
        Some(if self.peers.iter().any(|p| p.contains(addr)) {
            Class::Peer
        } else if allowed {
            Class::Allowed
        } else {
            Class::Other
        })
    }
}

/// Why a connection was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Its address is not in `allow`.
    Denied,
    /// Its client holds `max_connections_per_client` already.
    PerClient,
    /// Every slot is taken, by connections it may not evict.
    Full,
}

/// One listener's slots.
#[derive(Debug)]
pub struct Admission {
    max: usize,
    per_client: usize,
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Inner {
    policy: Policy,
    next: u64,
    /// Live connections by admission order (the oldest first).
    conns: BTreeMap<u64, Conn>,
    /// Connections held per client (only clients holding some).
    held: HashMap<IpAddr, usize>,
}

#[derive(Debug)]
struct Conn {
    client: IpAddr,
    class: Class,
    evict: Option<oneshot::Sender<()>>,
}

/// A connection's slot, given back when dropped however the connection
/// ends (each early return, a timeout, an error, a panic, the runtime
/// going away), so no slot can leak.
#[derive(Debug)]
pub struct Slot {
    admission: Arc<Admission>,
    id: u64,
    class: Class,
    notice: oneshot::Receiver<()>,
}

impl Slot {
    /// Resolves when the connection is evicted (its slot given to
    /// another); never, while it is not.
    pub async fn evicted(&mut self) {
        if (&mut self.notice).await.is_err() {
            // The sender went without a word: only when the admission
            // itself is gone. Nothing will evict this connection now.
            std::future::pending::<()>().await;
        }
    }

    /// The connection's class.
    pub fn class(&self) -> Class {
        self.class
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut inner = self.admission.lock();
        // (An evicted connection's slot was given back when it was.)
        if let Some(c) = inner.conns.remove(&self.id) {
            inner.release(c.client);
        }
    }
}

impl Inner {
    fn release(&mut self, client: IpAddr) {
        if let Some(n) = self.held.get_mut(&client) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.held.remove(&client);
            }
        }
    }

    fn held(&self, client: &IpAddr) -> usize {
        self.held.get(client).copied().unwrap_or(0)
    }

    /// The connection a newcomer of `class` whose client holds `has`
    /// connections may take the slot of: of a lower class first (the
    /// lowest, then the client holding the most, then the oldest), else of
    /// its own class from a client holding at least `has + 2`.
    fn victim(&self, class: Class, has: usize) -> Option<u64> {
        // (class, most held first, oldest first): the least is the victim.
        let mut best: Option<(Class, std::cmp::Reverse<usize>, u64)> = None;
        for (&id, c) in &self.conns {
            let held = self.held(&c.client);
            let eligible = c.class < class || (c.class == class && held >= has + 2);
            if !eligible {
                continue;
            }
            let key = (c.class, std::cmp::Reverse(held), id);
            if best.is_none_or(|k| key < k) {
                best = Some(key);
            }
        }
        best.map(|(_, _, id)| id)
    }
}

impl Admission {
    /// `max_connections` slots, at most `per_client` to one client.
    pub fn new(max: usize, per_client: usize, policy: Policy) -> Arc<Admission> {
        Arc::new(Admission {
            max: max.max(1),
            per_client: per_client.max(1),
            inner: Mutex::new(Inner {
                policy,
                next: 0,
                conns: BTreeMap::new(),
                held: HashMap::new(),
            }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Nothing panics while holding it; if something did, the table is
        // still whole (each change is made whole before the next).
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Follows a new configuration's peers (a reload).
    pub fn set_peers(&self, peers: Vec<Prefix>) {
        self.lock().policy.peers = peers;
    }

    /// A slot for a connection from `addr`, if it may have one; and
    /// whether another connection was evicted for it.
    pub fn admit(self: &Arc<Self>, addr: IpAddr) -> Result<(Slot, bool), Refused> {
        let mut inner = self.lock();
        let class = inner.policy.class(addr).ok_or(Refused::Denied)?;
        let client = client_of(addr);
        let has = inner.held(&client);
        let full = inner.conns.len() >= self.max;
        // `Full` says the listener is full, whoever asks; `PerClient`,
        // that this client holds its share while there is room.
        if has >= self.per_client {
            return Err(if full {
                Refused::Full
            } else {
                Refused::PerClient
            });
        }
        let mut evicted = false;
        if full {
            let victim = inner.victim(class, has).ok_or(Refused::Full)?;
            if let Some(mut v) = inner.conns.remove(&victim) {
                inner.release(v.client);
                if let Some(tx) = v.evict.take() {
                    let _ = tx.send(());
                }
                evicted = true;
            }
        }
        let id = inner.next;
        inner.next += 1;
        let (tx, notice) = oneshot::channel();
        inner.conns.insert(
            id,
            Conn {
                client,
                class,
                evict: Some(tx),
            },
        );
        *inner.held.entry(client).or_insert(0) += 1;
        drop(inner);
        Ok((
            Slot {
                admission: self.clone(),
                id,
                class,
                notice,
            },
            evicted,
        ))
    }

    /// Connections held now.
    pub fn len(&self) -> usize {
        self.lock().conns.len()
    }

    /// Whether no connection is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Connections the client of `addr` holds.
    pub fn held(&self, addr: IpAddr) -> usize {
        self.lock().held(&client_of(addr))
    }

    /// Clients holding at least one connection.
    pub fn clients(&self) -> usize {
        self.lock().held.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn policy(allow: Option<&[&str]>, peers: &[&str]) -> Policy {
        Policy {
            allow: allow.map(|a| a.iter().map(|p| p.parse().unwrap()).collect()),
            peers: peers.iter().map(|p| p.parse().unwrap()).collect(),
        }
    }

    /// Whether `slot` was told it is evicted.
    fn was_evicted(slot: &mut Slot) -> bool {
        slot.notice.try_recv().is_ok()
    }

    #[test]
    fn clients_are_addresses_or_ipv6_64s() {
        assert_eq!(client_of(ip("10.1.2.3")), ip("10.1.2.3"));
        assert_eq!(client_of(ip("::ffff:10.1.2.3")), ip("10.1.2.3"));
        assert_eq!(client_of(ip("2001:db8:1:2:aaaa::7")), ip("2001:db8:1:2::"));
    }

    #[test]
    fn classes_follow_allow_and_peers() {
        let p = policy(None, &["192.0.2.7/32"]);
        assert_eq!(p.class(ip("192.0.2.7")), Some(Class::Peer));
        assert_eq!(p.class(ip("::ffff:192.0.2.7")), Some(Class::Peer));
        assert_eq!(p.class(ip("192.0.2.8")), Some(Class::Other));
        let p = policy(Some(&["10.0.0.0/8"]), &["10.0.0.7/32", "192.0.2.7/32"]);
        assert_eq!(p.class(ip("10.0.0.7")), Some(Class::Peer));
        assert_eq!(p.class(ip("10.9.0.1")), Some(Class::Allowed));
        assert_eq!(p.class(ip("192.0.2.9")), None, "outside allow");
        assert_eq!(p.class(ip("192.0.2.7")), None, "a peer outside allow too");
        let p = policy(Some(&["10.1.0.0/16", "2001:db8::/32"]), &[]);
        assert_eq!(
            p.class(ip("::ffff:10.1.2.3")),
            Some(Class::Allowed),
            "IPv4 on an IPv6 listener"
        );
        assert_eq!(p.class(ip("2001:db8::5")), Some(Class::Allowed));
        assert_eq!(p.class(ip("127.0.0.1")), None);
    }

    #[test]
    fn a_peer_takes_the_oldest_slot_of_the_client_holding_most() {
        let a = Admission::new(4, 3, policy(None, &["192.0.2.7/32"]));
        let mut x: Vec<Slot> = (0..3).map(|_| a.admit(ip("10.0.0.1")).unwrap().0).collect();
        let mut y = a.admit(ip("10.0.0.2")).unwrap().0;
        assert_eq!(a.len(), 4);
        // An "other" newcomer holding nothing takes from 10.0.0.1 (3 ≥ 0 + 2).
        let (z, evicted) = a.admit(ip("10.0.0.3")).unwrap();
        assert!(evicted);
        assert!(
            was_evicted(&mut x[0]),
            "the oldest of the client holding most"
        );
        assert!(!was_evicted(&mut x[1]) && !was_evicted(&mut y));
        assert_eq!((a.len(), a.held(ip("10.0.0.1"))), (4, 2));
        // Now 2, 1, 1: a fourth client takes one of 10.0.0.1's too (2 ≥ 0 + 2).
        let (w, evicted) = a.admit(ip("10.0.0.4")).unwrap();
        assert!(evicted && was_evicted(&mut x[1]));
        // 1, 1, 1, 1: no client holds 2 more than another: full.
        assert_eq!(a.admit(ip("10.0.0.5")).unwrap_err(), Refused::Full);
        // A peer takes one all the same: the oldest, all holding one.
        let (p, evicted) = a.admit(ip("192.0.2.7")).unwrap();
        assert!(evicted && was_evicted(&mut x[2]));
        assert!(!was_evicted(&mut y));
        assert_eq!(p.class(), Class::Peer);
        // The evicted connections' slots were given back when evicted:
        // dropping them now gives nothing back twice.
        drop(x);
        assert_eq!((a.len(), a.clients()), (4, 4));
        drop((y, z, w, p));
        assert!(a.is_empty());
        assert_eq!(a.clients(), 0);
    }

    #[test]
    fn nobody_evicts_a_peer_and_a_peer_evicts_no_peer() {
        let a = Admission::new(2, 2, policy(None, &["192.0.2.0/24"]));
        let mut p1 = a.admit(ip("192.0.2.1")).unwrap().0;
        let _p2 = a.admit(ip("192.0.2.1")).unwrap().0;
        // Full of one peer's connections.
        assert_eq!(a.admit(ip("10.0.0.1")).unwrap_err(), Refused::Full);
        // Another peer holding nothing may take from a peer holding 2 more
        // (fair share among equals) …
        let (_p3, evicted) = a.admit(ip("192.0.2.2")).unwrap();
        assert!(evicted && was_evicted(&mut p1));
        // … but not when that takes it below its share.
        assert_eq!(a.admit(ip("192.0.2.3")).unwrap_err(), Refused::Full);
        assert_eq!(a.admit(ip("10.0.0.1")).unwrap_err(), Refused::Full);
    }

    #[test]
    fn allowed_clients_outrank_nobody_but_peers_outrank_them() {
        let a = Admission::new(2, 2, policy(Some(&["10.0.0.0/8"]), &["10.0.0.7/32"]));
        assert_eq!(a.admit(ip("192.0.2.1")).unwrap_err(), Refused::Denied);
        let mut x = a.admit(ip("10.0.0.1")).unwrap().0;
        let _y = a.admit(ip("10.0.0.2")).unwrap().0;
        assert_eq!(a.admit(ip("10.0.0.3")).unwrap_err(), Refused::Full);
        let (_p, evicted) = a.admit(ip("10.0.0.7")).unwrap();
        assert!(evicted && was_evicted(&mut x));
    }

    #[test]
    fn a_client_at_its_cap_is_refused_whatever_its_class() {
        let a = Admission::new(8, 2, policy(None, &["192.0.2.7/32"]));
        let _s: Vec<Slot> = (0..2)
            .map(|_| a.admit(ip("192.0.2.7")).unwrap().0)
            .collect();
        assert_eq!(a.admit(ip("192.0.2.7")).unwrap_err(), Refused::PerClient);
        // An IPv6 /64 is one client.
        let _v = a.admit(ip("2001:db8::1")).unwrap();
        let _w = a.admit(ip("2001:db8::ffff:1")).unwrap();
        assert_eq!(a.admit(ip("2001:db8::2")).unwrap_err(), Refused::PerClient);
        assert!(a.admit(ip("2001:db8:0:1::1")).is_ok(), "another /64");
    }
}
