//! VRRP version 3 (RFC 5798): failover of VIPs on one L2 segment without a
//! router, management-core state without I/O. Each `[[vrrp]]` group is the
//! RFC's state machine (§6.4) over the core's clock; the data plane hands it
//! the advertisements it receives on the group's port and sends the ones it
//! builds ([`Action`]s the core turns into frames). While a group is not
//! MASTER its VIPs are left out of the snapshot: the node answers no ARP or
//! neighbour solicitation for them and forwards nothing to them (counted as
//! `vrrp_backup` drops), while flow sync keeps its flow table filled.
//!
//! Beyond the RFC, what a load balancer needs:
//!
//! - **Fitness.** A node drained, or whose rules on the group's VIPs are all
//!   UNHEALTHY, advertises priority 1 ([`UNFIT_PRIORITY`]). A master that
//!   becomes unfit resigns once (priority 0, §6.4.3 "Shutdown" without
//!   leaving the group), so that the backup takes over after its skew time
//!   whether it preempts or not; with no backup to take over, it becomes
//!   master again after the master-down interval and stays (a degraded
//!   service over none, as BGP's fail-open). A node shutting down resigns
//!   and leaves the group (INITIALIZE).
//! - **A lower master.** RFC 5798 has a master discard the advertisement of
//!   a lower one; such a node took over because this one's advertisements
//!   did not reach it (lost, late) and its gratuitous ARPs moved the
//!   segment's neighbour caches. The master advertises at once, so that it
//!   steps back, and announces its VIPs again (at most once a master-down
//!   interval), as keepalived does.
//! - **Hostile input.** v3 has no authentication (RFC 5798 §9): an
//!   advertisement must come with TTL 255 (from the link itself), on the
//!   group's port, and, with `peers`, from a listed address; one that names
//!   none of the group's addresses is refused (a misconfigured or forged
//!   peer never silences a master that serves other VIPs), one that names
//!   some of them and others too is taken and counted (a reload done on one
//!   node and not yet on the other must not make two masters). Every
//!   refusal is counted by reason.

use std::net::IpAddr;
use std::time::Duration;

use wire::ethernet::MacAddr;

/// The priority an unfit node advertises (drained, its rules unhealthy).
pub const UNFIT_PRIORITY: u8 = 1;

/// One group, as configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupSpec {
    /// Virtual router ID (1–255).
    pub vrid: u8,
    /// Index of its port in `[[ports]]`.
    pub port: usize,
    /// Priority when fit (1–254).
    pub priority: u8,
    /// Advertisement interval, in centiseconds.
    pub interval_cs: u16,
    /// Whether a higher priority takes over from a lower master.
    pub preempt: bool,
    /// The group's VIPs, sorted.
    pub vips: Vec<IpAddr>,
    /// The address advertisements come from (this node's primary address on
    /// the link: IPv4, or the port's IPv6 link-local address).
    pub src: IpAddr,
    /// The port's MAC.
    pub mac: MacAddr,
    /// The only senders taken; empty: any on the link.
    pub peers: Vec<IpAddr>,
}

impl GroupSpec {
    /// The group's name in logs and status: `vrid 51 on port 0`.
    pub fn name(&self) -> String {
        format!("vrid {} ({})", self.vrid, family(self.src))
    }
}

fn family(a: IpAddr) -> &'static str {
    if a.is_ipv4() { "IPv4" } else { "IPv6" }
}

/// The RFC's states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Not taking part (shutting down).
    Initialize,
    /// Listening; takes over when the master falls silent.
    Backup,
    /// Serving the VIPs and advertising.
    Master,
}

impl State {
    /// Lower-case name (status, logs).
    pub fn name(self) -> &'static str {
        match self {
            State::Initialize => "initialize",
            State::Backup => "backup",
            State::Master => "master",
        }
    }

    /// Gauge value of `spillway_vrrp_state`.
    pub fn gauge(self) -> u8 {
        match self {
            State::Initialize => 0,
            State::Backup => 1,
            State::Master => 2,
        }
    }
}

/// What the node says about itself, whatever the peers say.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Fitness {
    /// The node is drained (M37).
    pub drained: bool,
    /// The node is shutting down (M39).
    pub shutting_down: bool,
}

/// What a group asks of the core.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Send an advertisement with this priority.
    Advertise(u8),
    /// Announce the VIPs on the port (gratuitous ARP, unsolicited NA).
    Announce,
}

/// Why an advertisement was refused; its discriminant is its index in
/// [`Refusal::ALL`] and in [`Vrrp::refused`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Refusal {
    /// Not a valid VRRPv3 advertisement (TTL, version, checksum, length).
    Invalid,
    /// No group of this VRID and family on the port it came in on.
    UnknownGroup,
    /// From an address `peers` does not list.
    NotPeer,
    /// It names none of the group's addresses (another group's, or a
    /// forgery).
    Addresses,
    /// An interval of 0.
    Interval,
    /// From this node's own address (a loop, or a forgery).
    Own,
}

impl Refusal {
    /// Every reason, in label order.
    pub const ALL: [Refusal; 6] = [
        Refusal::Invalid,
        Refusal::UnknownGroup,
        Refusal::NotPeer,
        Refusal::Addresses,
        Refusal::Interval,
        Refusal::Own,
    ];

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Refusal::Invalid => "invalid",
            Refusal::UnknownGroup => "unknown_group",
            Refusal::NotPeer => "not_peer",
            Refusal::Addresses => "addresses",
            Refusal::Interval => "interval",
            Refusal::Own => "own_address",
        }
    }
}

/// A received advertisement, as the state machine reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Heard {
    /// The sender's address.
    pub src: IpAddr,
    /// Its priority.
    pub priority: u8,
    /// Its interval, in centiseconds.
    pub interval_cs: u16,
    /// The addresses it names, sorted.
    pub addrs: Vec<IpAddr>,
}

/// What a group counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GroupCounts {
    /// Advertisements sent.
    pub sent: u64,
    /// Advertisements taken.
    pub received: u64,
    /// Times it became master.
    pub became_master: u64,
    /// Times it left master.
    pub left_master: u64,
    /// Advertisements with priority 0 (a master resigning) taken.
    pub resignations_heard: u64,
    /// Advertisements taken that name other addresses than the group's
    /// besides some of them (configurations out of step).
    pub addresses_differ: u64,
}

/// One group's state machine.
#[derive(Debug, Clone)]
pub struct Group {
    spec: GroupSpec,
    state: State,
    /// The interval learnt from the master (§6.1: a backup adopts it).
    master_interval_cs: u16,
    /// BACKUP: when the master is presumed down.
    down_at: Duration,
    /// MASTER: when the next advertisement is due.
    advert_at: Duration,
    /// Since when it is in its state.
    since: Duration,
    /// The master as last heard (`None`: none heard, or this node).
    master: Option<IpAddr>,
    /// Unfit (drained, unhealthy): advertises [`UNFIT_PRIORITY`]; a master
    /// resigns when it becomes so, once a spell.
    unfit: bool,
    /// When, as MASTER, it last announced the VIPs again because a lower
    /// master advertised.
    reasserted_at: Option<Duration>,
    /// What it counted.
    pub counts: GroupCounts,
}

/// Centiseconds as a duration.
fn cs(n: u32) -> Duration {
    Duration::from_millis(u64::from(n) * 10)
}

impl Group {
    /// A group started at `now` (§6.4.1: a non-owner starts as BACKUP and
    /// waits the master-down interval before taking over).
    pub fn start(spec: GroupSpec, now: Duration) -> Group {
        let mut g = Group {
            master_interval_cs: spec.interval_cs,
            spec,
            state: State::Initialize,
            down_at: now,
            advert_at: now,
            since: now,
            master: None,
            unfit: false,
            reasserted_at: None,
            counts: GroupCounts::default(),
        };
        g.become_backup(now, None);
        g
    }

    /// Its configuration.
    pub fn spec(&self) -> &GroupSpec {
        &self.spec
    }

    /// Its state.
    pub fn state(&self) -> State {
        self.state
    }

    /// Since when it is in its state.
    pub fn since(&self) -> Duration {
        self.since
    }

    /// The master as last heard; `None` when this node is master or none
    /// was heard.
    pub fn master(&self) -> Option<IpAddr> {
        self.master
    }

    /// The priority it advertises now.
    pub fn priority(&self) -> u8 {
        if self.unfit {
            UNFIT_PRIORITY
        } else {
            self.spec.priority
        }
    }

    /// Whether it advertises below its configured priority.
    pub fn unfit(&self) -> bool {
        self.unfit
    }

    /// When, as BACKUP, it takes over if nothing is heard (status).
    pub fn down_at(&self) -> Option<Duration> {
        (self.state == State::Backup).then_some(self.down_at)
    }

    /// Skew_Time (§6.1): a higher priority waits less, so it wins a race.
    fn skew_cs(&self) -> u32 {
        (256 - u32::from(self.priority())) * u32::from(self.master_interval_cs) / 256
    }

    /// Master_Down_Interval (§6.1), as a duration.
    pub fn master_down_interval(&self) -> Duration {
        cs(3 * u32::from(self.master_interval_cs) + self.skew_cs())
    }

    fn become_backup(&mut self, now: Duration, master: Option<IpAddr>) {
        if self.state == State::Master {
            self.counts.left_master += 1;
        }
        if self.state != State::Backup {
            self.since = now;
        }
        self.state = State::Backup;
        self.master = master;
        self.down_at = now + self.master_down_interval();
    }

    fn become_master(&mut self, now: Duration, out: &mut Vec<Action>) {
        self.state = State::Master;
        self.since = now;
        self.master = None;
        self.master_interval_cs = self.spec.interval_cs;
        self.counts.became_master += 1;
        self.advertise(now, self.priority(), out);
        out.push(Action::Announce);
    }

    fn advertise(&mut self, now: Duration, priority: u8, out: &mut Vec<Action>) {
        out.push(Action::Advertise(priority));
        self.counts.sent += 1;
        self.advert_at = now + cs(u32::from(self.spec.interval_cs));
    }

    /// Timers at `now`, with the node's `fitness` and whether every rule on
    /// the group's VIPs is UNHEALTHY: what to send. A change of state is
    /// seen in [`Group::state`].
    pub fn tick(
        &mut self,
        now: Duration,
        fitness: Fitness,
        unhealthy: bool,
        out: &mut Vec<Action>,
    ) {
        if fitness.shutting_down {
            if self.state == State::Master {
                // §6.4.3: stop the timer, send priority 0, leave.
                self.advertise(now, 0, out);
                self.counts.left_master += 1;
            }
            if self.state != State::Initialize {
                self.state = State::Initialize;
                self.since = now;
                self.master = None;
            }
            return;
        }
        let unfit = fitness.drained || unhealthy;
        if unfit != self.unfit {
            self.unfit = unfit;
            if unfit && self.state == State::Master {
                // Resign once: the backup takes over after its skew time,
                // whether it preempts or not.
                self.advertise(now, 0, out);
                self.become_backup(now, None);
                return;
            }
        }
        match self.state {
            State::Initialize => self.become_backup(now, None),
            State::Backup if now >= self.down_at => self.become_master(now, out),
            State::Master if now >= self.advert_at => self.advertise(now, self.priority(), out),
            State::Backup | State::Master => {}
        }
    }

    /// An advertisement for this group heard at `now` (already checked for
    /// validity, port, VRID and family); `Err` when refused.
    pub fn heard(
        &mut self,
        now: Duration,
        h: &Heard,
        out: &mut Vec<Action>,
    ) -> Result<(), Refusal> {
        if h.src == self.spec.src {
            return Err(Refusal::Own);
        }
        if !self.spec.peers.is_empty() && !self.spec.peers.contains(&h.src) {
            return Err(Refusal::NotPeer);
        }
        if !h.addrs.iter().any(|a| self.spec.vips.contains(a)) {
            return Err(Refusal::Addresses);
        }
        if h.addrs != self.spec.vips {
            // Overlapping but different: a reload done on one node and not
            // yet on the other. Taken, so that the election goes on (two
            // masters would answer for the common VIPs), and counted.
            self.counts.addresses_differ += 1;
        }
        if h.interval_cs == 0 {
            return Err(Refusal::Interval);
        }
        self.counts.received += 1;
        if h.priority == 0 {
            self.counts.resignations_heard += 1;
        }
        match self.state {
            State::Initialize => {}
            State::Backup => {
                if h.priority == 0 {
                    // §6.4.2: the master resigned; take over after the skew.
                    self.down_at = now + cs(self.skew_cs());
                    self.master = None;
                } else if !self.spec.preempt || h.priority >= self.priority() {
                    self.master_interval_cs = h.interval_cs;
                    self.become_backup(now, Some(h.src));
                }
                // Else: a lower master this node preempts; the timer runs out.
            }
            State::Master => {
                if h.priority == 0 {
                    // Another master resigned: make this one known at once.
                    self.advertise(now, self.priority(), out);
                } else if h.priority > self.priority()
                    || (h.priority == self.priority() && addr_key(h.src) > addr_key(self.spec.src))
                {
                    // One last advertisement before stepping back: if this
                    // node was master because the other's advertisements
                    // did not reach it (a healed split brain), its
                    // gratuitous ARPs moved the segment's caches here, and
                    // the other announces again only on hearing a lower
                    // master (below), which it may never have, if its
                    // advertisement crossed first.
                    self.advertise(now, self.priority(), out);
                    self.master_interval_cs = h.interval_cs;
                    self.become_backup(now, Some(h.src));
                } else {
                    // A lower master: it took over while this node's
                    // advertisements did not reach it (lost, late: split
                    // brain), and its gratuitous ARPs moved the segment's
                    // neighbour caches to it. Advertise at once so that it
                    // steps back, and announce the VIPs again so that the
                    // caches come back (keepalived does both,
                    // garp_lower_prio_repeat): the RFC's "discard" would
                    // leave the clients with a node that no longer serves
                    // the VIPs. Announced at most once a master-down
                    // interval (a peer that never hears this node goes on
                    // advertising).
                    self.advertise(now, self.priority(), out);
                    if self
                        .reasserted_at
                        .is_none_or(|t| now >= t + self.master_down_interval())
                    {
                        self.reasserted_at = Some(now);
                        out.push(Action::Announce);
                    }
                }
            }
        }
        Ok(())
    }
}

/// An address as a number (§6.4.3 compares primary addresses).
fn addr_key(a: IpAddr) -> u128 {
    match a {
        IpAddr::V4(v4) => u128::from(u32::from(v4)),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

/// Every group of the node, and what was refused before reaching one.
#[derive(Debug, Clone, Default)]
pub struct Vrrp {
    groups: Vec<Group>,
    /// Refused advertisements, by reason.
    pub refused: [u64; Refusal::ALL.len()],
}

impl Vrrp {
    /// The groups of `specs`, started at `now`; a group of `old` with the
    /// same port, VRID and family keeps its state (a reload changes its
    /// priority, interval or VIPs without a takeover).
    pub fn new(specs: Vec<GroupSpec>, now: Duration, old: Option<Vrrp>) -> Vrrp {
        let mut old = old.unwrap_or_default();
        let groups = specs
            .into_iter()
            .map(|spec| {
                let same = old.groups.iter().position(|g| {
                    g.spec.port == spec.port
                        && g.spec.vrid == spec.vrid
                        && g.spec.src.is_ipv4() == spec.src.is_ipv4()
                });
                match same {
                    Some(i) => {
                        let mut g = old.groups.swap_remove(i);
                        g.spec = spec;
                        g
                    }
                    None => Group::start(spec, now),
                }
            })
            .collect();
        Vrrp {
            groups,
            refused: old.refused,
        }
    }

    /// The groups.
    pub fn groups(&self) -> &[Group] {
        &self.groups
    }

    /// The VIPs of groups this node is not master of, sorted: left out of
    /// the snapshot.
    pub fn standby(&self) -> Vec<IpAddr> {
        let mut v: Vec<IpAddr> = self
            .groups
            .iter()
            .filter(|g| g.state != State::Master)
            .flat_map(|g| g.spec.vips.iter().copied())
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// The (port, VIP) pairs of groups this node is master of.
    pub fn served(&self) -> Vec<(usize, IpAddr)> {
        self.groups
            .iter()
            .filter(|g| g.state == State::Master)
            .flat_map(|g| g.spec.vips.iter().map(|v| (g.spec.port, *v)))
            .collect()
    }

    /// A frame handed over by the data plane from `port` at `now`: parsed,
    /// checked and given to its group; a refusal is counted by reason
    /// (`refused`, indexed like [`Refusal::ALL`]). `out` gets (group index,
    /// action).
    pub fn frame(
        &mut self,
        now: Duration,
        port: usize,
        frame: &[u8],
        out: &mut Vec<(usize, Action)>,
    ) -> Result<(), Refusal> {
        self.take(now, port, frame, out).inspect_err(|&r| {
            if let Some(c) = self.refused.get_mut(r as usize) {
                *c += 1;
            }
        })
    }

    fn take(
        &mut self,
        now: Duration,
        port: usize,
        frame: &[u8],
        out: &mut Vec<(usize, Action)>,
    ) -> Result<(), Refusal> {
        let a = wire::vrrp::parse_frame(frame).map_err(|_| Refusal::Invalid)?;
        let i = self
            .groups
            .iter()
            .position(|g| {
                g.spec.port == port
                    && g.spec.vrid == a.vrid
                    && g.spec.src.is_ipv4() == a.src.is_ipv4()
            })
            .ok_or(Refusal::UnknownGroup)?;
        let mut addrs: Vec<IpAddr> = a.addrs().collect();
        addrs.sort_unstable();
        let heard = Heard {
            src: a.src,
            priority: a.priority,
            interval_cs: a.interval_cs,
            addrs,
        };
        let mut acts = Vec::new();
        let g = self.groups.get_mut(i).ok_or(Refusal::UnknownGroup)?;
        let r = g.heard(now, &heard, &mut acts);
        out.extend(acts.into_iter().map(|x| (i, x)));
        r
    }

    /// Every group's timers at `now`; `unhealthy(vips)` says whether every
    /// rule on those VIPs is UNHEALTHY.
    pub fn tick(
        &mut self,
        now: Duration,
        fitness: Fitness,
        unhealthy: impl Fn(&[IpAddr]) -> bool,
        out: &mut Vec<(usize, Action)>,
    ) {
        for (i, g) in self.groups.iter_mut().enumerate() {
            let mut acts = Vec::new();
            let bad = unhealthy(&g.spec.vips);
            g.tick(now, fitness, bad, &mut acts);
            out.extend(acts.into_iter().map(|x| (i, x)));
        }
    }

    /// The frame of group `i`'s advertisement with `priority`.
    pub fn advert(&self, i: usize, priority: u8) -> Option<Vec<u8>> {
        let g = self.groups.get(i)?;
        let a = wire::vrrp::AdvertRepr {
            mac: g.spec.mac,
            src: g.spec.src,
            vrid: g.spec.vrid,
            priority,
            interval_cs: g.spec.interval_cs,
            addrs: &g.spec.vips,
        };
        let mut buf = vec![0; a.frame_len()];
        let n = wire::vrrp::advert_frame(&mut buf, &a).ok()?;
        buf.truncate(n);
        Some(buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn spec(last: u8, priority: u8, preempt: bool) -> GroupSpec {
        GroupSpec {
            vrid: 51,
            port: 0,
            priority,
            interval_cs: 10,
            preempt,
            vips: vec![IpAddr::V4(Ipv4Addr::new(198, 18, 10, 10))],
            src: IpAddr::V4(Ipv4Addr::new(198, 18, 1, last)),
            mac: [2, 0, 0, 0, 0, last],
            peers: Vec::new(),
        }
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn refusals_index_their_counters() {
        for (i, r) in Refusal::ALL.iter().enumerate() {
            assert_eq!(*r as usize, i, "{}", r.label());
        }
    }

    #[test]
    fn the_rfc_intervals() {
        let g = Group::start(spec(2, 100, true), ms(0));
        // 3 × 10 cs + (256 − 100) × 10 / 256 cs = 30 + 6 cs.
        assert_eq!(g.master_down_interval(), ms(360));
        assert_eq!(g.down_at(), Some(ms(360)));
        let g = Group::start(spec(2, 254, true), ms(0));
        assert_eq!(g.master_down_interval(), ms(300));
    }

    #[test]
    fn a_lone_backup_takes_over_after_the_master_down_interval() {
        let mut g = Group::start(spec(2, 100, true), ms(0));
        let mut out = Vec::new();
        g.tick(ms(350), Fitness::default(), false, &mut out);
        assert_eq!(g.state(), State::Backup);
        g.tick(ms(360), Fitness::default(), false, &mut out);
        assert_eq!(g.state(), State::Master);
        assert_eq!(out, [Action::Advertise(100), Action::Announce]);
    }

    fn heard(last: u8, priority: u8) -> Heard {
        Heard {
            src: IpAddr::V4(Ipv4Addr::new(198, 18, 1, last)),
            priority,
            interval_cs: 10,
            addrs: vec![IpAddr::V4(Ipv4Addr::new(198, 18, 10, 10))],
        }
    }

    #[test]
    fn a_master_hearing_a_lower_master_advertises_and_announces_again() {
        let mut g = Group::start(spec(3, 150, true), ms(0));
        let mut out = Vec::new();
        g.tick(ms(340), Fitness::default(), false, &mut out);
        assert_eq!(g.state(), State::Master);
        out.clear();
        // The peer took over while it did not hear this node: its
        // gratuitous ARPs moved the clients; it steps back once it hears
        // this node, and the clients must come back.
        g.heard(ms(400), &heard(2, 100), &mut out).expect("taken");
        assert_eq!(g.state(), State::Master);
        assert_eq!(out, [Action::Advertise(150), Action::Announce]);
        // A peer that goes on advertising (it never hears this node): an
        // advertisement for each, an announcement once a master-down
        // interval (340 ms at priority 150).
        out.clear();
        g.heard(ms(500), &heard(2, 100), &mut out).expect("taken");
        assert_eq!(out, [Action::Advertise(150)]);
        out.clear();
        assert_eq!(g.master_down_interval(), ms(340));
        g.heard(ms(740), &heard(2, 100), &mut out).expect("taken");
        assert_eq!(out, [Action::Advertise(150), Action::Announce]);
        // Equal priority, lower address: a lower master too.
        out.clear();
        g.heard(ms(2000), &heard(1, 150), &mut out).expect("taken");
        assert_eq!(out, [Action::Advertise(150), Action::Announce]);
        assert_eq!(g.state(), State::Master);
    }

    #[test]
    fn frames_are_refused_by_reason() {
        let mut v = Vrrp::new(vec![spec(2, 100, true)], ms(0), None);
        let mut peer = Vrrp::new(vec![spec(3, 100, true)], ms(0), None);
        let f = peer.advert(0, 200).expect("frame");
        let mut out = Vec::new();
        assert_eq!(v.frame(ms(1), 1, &f, &mut out), Err(Refusal::UnknownGroup));
        assert_eq!(v.frame(ms(1), 0, &f[..30], &mut out), Err(Refusal::Invalid));
        v.frame(ms(1), 0, &f, &mut out).expect("taken");
        // Its own frame: a loop or a forgery.
        let own = v.advert(0, 100).expect("frame");
        assert_eq!(v.frame(ms(1), 0, &own, &mut out), Err(Refusal::Own));
        // One more address: taken, counted as differing.
        peer.groups[0]
            .spec
            .vips
            .push(IpAddr::V4(Ipv4Addr::new(198, 18, 10, 99)));
        let more = peer.advert(0, 200).expect("frame");
        v.frame(ms(1), 0, &more, &mut out).expect("taken");
        assert_eq!(v.groups[0].counts.addresses_differ, 1);
        // None of the group's: refused.
        peer.groups[0].spec.vips = vec![IpAddr::V4(Ipv4Addr::new(198, 18, 10, 99))];
        let other = peer.advert(0, 200).expect("frame");
        assert_eq!(v.frame(ms(1), 0, &other, &mut out), Err(Refusal::Addresses));
        assert_eq!(v.refused, [1, 1, 0, 1, 0, 1]);
        v.groups[0].spec.peers = vec![IpAddr::V4(Ipv4Addr::new(198, 18, 1, 9))];
        assert_eq!(v.frame(ms(1), 0, &f, &mut out), Err(Refusal::NotPeer));
    }
}
