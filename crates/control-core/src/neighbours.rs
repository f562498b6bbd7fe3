//! Neighbour resolution and L2 announcements (M47), management-core state
//! without I/O: the next hops of the configuration
//! ([`dataplane::nexthop::next_hops`]) are resolved with ARP / IPv6 neighbour
//! discovery. The core feeds this module the time and the data plane's
//! sightings; it says which requests and announcements to send (the shell
//! hands them to a worker, which sends them on the port) and which MACs the
//! snapshot carries.
//!
//! Per next hop, like Linux's neighbour table: INCOMPLETE (asked every
//! `retransmit`) → REACHABLE on an answer → STALE after `reachable` (its MAC
//! still used, asked again) → REACHABLE, or FAILED after `probes` unanswered
//! requests (its MAC dropped: its packets are counted drops, its endpoints
//! get no new flows); a FAILED next hop is asked again with back-off
//! (doubling from `retransmit` to `failed_retry`). Any ARP or NDP frame from
//! the next hop on its port (a reply, its own request, a gratuitous ARP or
//! an unsolicited advertisement) confirms it, a new MAC taken at once.
//! Sightings of any other address, or on another port, are ignored and
//! counted: a host on the segment cannot grow the table.

use std::net::IpAddr;
use std::time::Duration;

use dataplane::nexthop::NextHop;
use wire::ethernet::MacAddr;

/// The timings of `[neighbours]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timings {
    /// How long an answer is trusted.
    pub reachable: Duration,
    /// Between two unanswered requests.
    pub retransmit: Duration,
    /// Unanswered requests before a next hop fails.
    pub probes: u32,
    /// Longest interval between requests to a failed next hop.
    pub failed_retry: Duration,
}

impl Timings {
    /// The timings a configuration sets.
    pub fn from_config(n: &config::schema::Neighbours) -> Timings {
        Timings {
            reachable: n.reachable.0,
            retransmit: n.retransmit.0,
            probes: n.probes.max(1),
            failed_retry: n.failed_retry.0.max(n.retransmit.0),
        }
    }
}

/// A next hop's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Never answered yet: asked every `retransmit`.
    Incomplete,
    /// Answered within `reachable`.
    Reachable,
    /// Answered longer ago than `reachable`: its MAC still used while it
    /// is asked again.
    Stale,
    /// `probes` requests went unanswered: no MAC; asked again with back-off.
    Failed,
}

impl State {
    /// Lower-case name (status, metrics).
    pub fn name(self) -> &'static str {
        match self {
            State::Incomplete => "incomplete",
            State::Reachable => "reachable",
            State::Stale => "stale",
            State::Failed => "failed",
        }
    }

    /// Gauge value of `spillway_neighbour_state`.
    pub fn gauge(self) -> u8 {
        match self {
            State::Incomplete => 0,
            State::Reachable => 1,
            State::Stale => 2,
            State::Failed => 3,
        }
    }
}

/// One next hop's entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The next hop.
    pub hop: NextHop,
    /// Its state.
    pub state: State,
    /// Its MAC while REACHABLE or STALE.
    pub mac: Option<MacAddr>,
    /// When it last answered.
    pub confirmed: Option<Duration>,
    /// When to ask next (INCOMPLETE, STALE, FAILED).
    next: Duration,
    /// Requests unanswered in this round.
    sent: u32,
    /// The current back-off of a FAILED next hop.
    backoff: Duration,
}

/// The neighbour table.
#[derive(Debug)]
pub struct Neighbours {
    t: Timings,
    entries: Vec<Entry>,
    /// Sightings of addresses that are no configured next hop (or on
    /// another port).
    pub ignored: u64,
    /// Next hops that became resolved (from INCOMPLETE or FAILED).
    pub resolved_total: u64,
    /// Next hops that failed.
    pub failed_total: u64,
    /// MAC changes seen for resolved next hops.
    pub mac_changes: u64,
}

impl Neighbours {
    /// A table for `hops`, each INCOMPLETE and asked at once (`now`).
    pub fn new(t: Timings, hops: &[NextHop], now: Duration) -> Neighbours {
        let mut n = Neighbours {
            t,
            entries: Vec::new(),
            ignored: 0,
            resolved_total: 0,
            failed_total: 0,
            mac_changes: 0,
        };
        n.set_hops(t, hops, now);
        n
    }

    /// A reload: the next hops of the new configuration. Those kept keep
    /// their state; new ones are asked at once. Returns whether a resolved
    /// next hop went away (the snapshot's MACs change).
    pub fn set_hops(&mut self, t: Timings, hops: &[NextHop], now: Duration) -> bool {
        self.t = t;
        let mut old = std::mem::take(&mut self.entries);
        for h in hops {
            match old.iter().position(|e| e.hop == *h) {
                Some(i) => self.entries.push(old.swap_remove(i)),
                None => self.entries.push(Entry {
                    hop: *h,
                    state: State::Incomplete,
                    mac: None,
                    confirmed: None,
                    next: now,
                    sent: 0,
                    backoff: t.retransmit,
                }),
            }
        }
        // What is left of `old` is gone: a resolved one gone is a change.
        old.iter().any(|e| e.mac.is_some())
    }

    /// Input: the data plane saw `ip` at `mac` on `port`. Returns whether
    /// the MACs the snapshot carries changed (a next hop resolved, or its
    /// MAC changed).
    pub fn sighting(&mut self, now: Duration, port: usize, ip: IpAddr, mac: MacAddr) -> bool {
        let Some(e) = self
            .entries
            .iter_mut()
            .find(|e| e.hop.addr == ip && e.hop.port == port)
        else {
            self.ignored += 1;
            return false;
        };
        let changed = e.mac != Some(mac);
        if e.mac.is_none() {
            self.resolved_total += 1;
        } else if changed {
            self.mac_changes += 1;
        }
        e.state = State::Reachable;
        e.mac = Some(mac);
        e.confirmed = Some(now);
        e.sent = 0;
        e.backoff = self.t.retransmit;
        changed
    }

    /// Input: time passes. The next hops to ask now go to `ask`. Returns
    /// whether the MACs the snapshot carries changed (a next hop failed).
    pub fn tick(&mut self, now: Duration, ask: &mut Vec<NextHop>) -> bool {
        let t = self.t;
        let mut changed = false;
        for e in &mut self.entries {
            if e.state == State::Reachable
                && e.confirmed
                    .is_none_or(|c| now.saturating_sub(c) >= t.reachable)
            {
                // Refresh: asked again while its MAC stays in use.
                e.state = State::Stale;
                e.sent = 0;
                e.next = now;
            }
            if e.state == State::Reachable || now < e.next {
                continue;
            }
            match e.state {
                State::Incomplete | State::Stale if e.sent >= t.probes => {
                    e.state = State::Failed;
                    changed |= e.mac.take().is_some();
                    self.failed_total += 1;
                    e.backoff = t.retransmit.saturating_mul(2).min(t.failed_retry);
                    e.next = now + e.backoff;
                }
                State::Incomplete | State::Stale => {
                    ask.push(e.hop);
                    e.sent += 1;
                    e.next = now + t.retransmit;
                }
                State::Failed => {
                    ask.push(e.hop);
                    e.backoff = e.backoff.saturating_mul(2).min(t.failed_retry);
                    e.next = now + e.backoff;
                }
                State::Reachable => {}
            }
        }
        changed
    }

    /// The MACs of the resolved next hops (REACHABLE and STALE), for the
    /// snapshot.
    pub fn resolved(&self) -> Vec<(NextHop, MacAddr)> {
        self.entries
            .iter()
            .filter_map(|e| e.mac.map(|m| (e.hop, m)))
            .collect()
    }

    /// Every entry, in the configuration's order of next hops.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }
}

/// Repeated gratuitous ARP / unsolicited advertisements (M47 item 2): each
/// address announced `count` times, `interval` apart, as keepalived does.
#[derive(Debug, Default)]
pub struct Announcer {
    /// (when next, repeats left, port, address).
    pending: Vec<(Duration, u32, usize, IpAddr)>,
    /// Announcements handed out.
    pub sent: u64,
}

impl Announcer {
    /// Announces `addr` on `port` `count` times from `now`, `interval`
    /// apart (replacing an announcement of it under way; a `count` of 0
    /// only ends that).
    pub fn announce(&mut self, now: Duration, count: u32, port: usize, addr: IpAddr) {
        self.pending.retain(|p| (p.2, p.3) != (port, addr));
        if count > 0 {
            self.pending.push((now, count, port, addr));
        }
    }

    /// The announcements due at `now` go to `out` as (port, address).
    pub fn tick(&mut self, now: Duration, interval: Duration, out: &mut Vec<(usize, IpAddr)>) {
        for p in &mut self.pending {
            if p.0 <= now && p.1 > 0 {
                out.push((p.2, p.3));
                p.1 -= 1;
                p.0 = now + interval;
                self.sent += 1;
            }
        }
        self.pending.retain(|p| p.1 > 0);
    }

    /// Announcements still to send.
    pub fn pending(&self) -> usize {
        self.pending.iter().map(|p| p.1 as usize).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Timings = Timings {
        reachable: Duration::from_secs(30),
        retransmit: Duration::from_secs(1),
        probes: 3,
        failed_retry: Duration::from_secs(8),
    };
    const MAC: MacAddr = [2, 0, 0, 0, 0, 1];
    const MAC2: MacAddr = [2, 0, 0, 0, 0, 2];

    fn hop(s: &str) -> NextHop {
        NextHop {
            port: 1,
            addr: s.parse().unwrap(),
        }
    }

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    /// Runs the table second by second from `from` to `to` (inclusive);
    /// returns the seconds at which `h` was asked and whether anything
    /// changed.
    fn run(n: &mut Neighbours, from: u64, to: u64) -> (Vec<u64>, bool) {
        let mut asked = Vec::new();
        let mut changed = false;
        for s in from..=to {
            let mut ask = Vec::new();
            changed |= n.tick(secs(s), &mut ask);
            if !ask.is_empty() {
                asked.push(s);
            }
        }
        (asked, changed)
    }

    #[test]
    fn asked_until_answered_then_refreshed_before_expiry() {
        let gw = hop("10.0.0.1");
        let mut n = Neighbours::new(T, &[gw], secs(0));
        assert_eq!(n.entries()[0].state, State::Incomplete);
        let (asked, changed) = run(&mut n, 0, 1);
        assert_eq!((asked, changed), (vec![0, 1], false));
        assert!(n.resolved().is_empty());
        assert!(n.sighting(secs(1), 1, gw.addr, MAC));
        assert_eq!(n.resolved(), [(gw, MAC)]);
        assert_eq!(n.resolved_total, 1);
        // Trusted for 30 s, then asked again while its MAC stays in use.
        let (asked, changed) = run(&mut n, 2, 31);
        assert_eq!((asked, changed), (vec![31], false));
        assert_eq!(n.entries()[0].state, State::Stale);
        assert_eq!(n.resolved(), [(gw, MAC)]);
        // Its answer: reachable again, nothing changes for the snapshot.
        assert!(!n.sighting(secs(31), 1, gw.addr, MAC));
        assert_eq!(n.entries()[0].state, State::Reachable);
    }

    #[test]
    fn a_silent_next_hop_fails_and_is_retried_with_back_off() {
        let gw = hop("10.0.0.1");
        let mut n = Neighbours::new(T, &[gw], secs(0));
        n.sighting(secs(0), 1, gw.addr, MAC);
        // Stale at 30, asked at 30, 31, 32, failed at 33: its MAC goes.
        let (asked, changed) = run(&mut n, 1, 33);
        assert_eq!((asked, changed), (vec![30, 31, 32], true));
        assert_eq!(n.entries()[0].state, State::Failed);
        assert!(n.resolved().is_empty());
        assert_eq!(n.failed_total, 1);
        // Back-off: 2 s, then 4, then 8 (the cap), 8…
        let (asked, _) = run(&mut n, 34, 70);
        assert_eq!(asked, vec![35, 39, 47, 55, 63]);
        // It answers at last.
        assert!(n.sighting(secs(70), 1, gw.addr, MAC));
        assert_eq!(n.entries()[0].state, State::Reachable);
    }

    #[test]
    fn a_new_mac_is_taken_at_once() {
        let gw = hop("10.0.0.1");
        let mut n = Neighbours::new(T, &[gw], secs(0));
        assert!(n.sighting(secs(0), 1, gw.addr, MAC));
        // A gratuitous ARP from the peer with a new MAC.
        assert!(n.sighting(secs(5), 1, gw.addr, MAC2));
        assert_eq!(n.resolved(), [(gw, MAC2)]);
        assert_eq!(n.mac_changes, 1);
    }

    #[test]
    fn only_configured_next_hops_on_their_port_are_learned() {
        let gw = hop("10.0.0.1");
        let mut n = Neighbours::new(T, &[gw], secs(0));
        for i in 0..1000u32 {
            let ip = IpAddr::from(std::net::Ipv4Addr::from(0x0a00_1000 + i));
            assert!(!n.sighting(secs(1), 1, ip, MAC));
        }
        // The right address on the wrong port is no sighting either.
        assert!(!n.sighting(secs(1), 0, gw.addr, MAC));
        assert_eq!(n.entries().len(), 1);
        assert_eq!(n.ignored, 1001);
        assert!(n.resolved().is_empty());
    }

    #[test]
    fn a_reload_keeps_known_next_hops_and_asks_new_ones() {
        let (a, b) = (hop("10.0.0.1"), hop("10.0.0.2"));
        let mut n = Neighbours::new(T, &[a], secs(0));
        n.sighting(secs(0), 1, a.addr, MAC);
        assert!(!n.set_hops(T, &[a, b], secs(5)));
        assert_eq!(n.entries()[0].state, State::Reachable);
        assert_eq!(n.entries()[1].state, State::Incomplete);
        let mut ask = Vec::new();
        n.tick(secs(5), &mut ask);
        assert_eq!(ask, [b]);
        // The resolved one leaves: the snapshot's MACs change.
        assert!(n.set_hops(T, &[b], secs(6)));
        assert!(n.resolved().is_empty());
    }

    #[test]
    fn announcements_repeat_then_stop() {
        let mut a = Announcer::default();
        let vip: IpAddr = "192.0.2.10".parse().unwrap();
        a.announce(secs(0), 3, 0, vip);
        let mut at = Vec::new();
        for s in 0..10 {
            let mut out = Vec::new();
            a.tick(secs(s), secs(1), &mut out);
            if !out.is_empty() {
                at.push(s);
            }
        }
        assert_eq!(at, [0, 1, 2]);
        assert_eq!(a.pending(), 0);
        assert_eq!(a.sent, 3);
    }
}
