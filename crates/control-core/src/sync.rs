//! Flow-state sync between the nodes of a cluster (M36), the management
//! core's part, without I/O: the shell owns the UDP sockets; this batches the
//! workers' new entries into datagrams for the peers, checks and applies
//! what peers send, and paces dumps for a peer that (re)started.
//!
//! Every datagram is sealed for one peer in its session
//! ([`flowsync::session`], M54): a peer is sent nothing before a handshake
//! confirmed its current epoch, and what it sends is taken only once, only
//! in that session, only from its configured address. Each refusal is
//! counted by reason ([`SyncCounters`]).
//!
//! A backend travels by endpoint identity within its flow tag's service, so
//! a node resolves it to its own slot; an entry is inserted only where the
//! key is absent, never over a local one, and only for a backend that takes
//! flows here (an unknown or removed endpoint is counted, not applied).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::ops::ControlFlow;
use std::time::Duration;

use config::Compiled;
use dataplane::sync::{LEARNED, NewFlow, SyncQueue};
use dataplane::{BackendState, Snapshot, SnapshotBuilder};
use flowsync::session::{Accepted, Peers, Refusal};
use flowsync::window::Replay;
use flowsync::{Cipher, DecodeError, Kind, PushError, Rate, SyncEntry, Writer};
use flowtable::{
    EntryFlags, FlowKey, FlowTable, InsertOutcome, NewEntry, Tick, Timeouts, tick_age, tick_reached,
};

/// New entries taken from the workers' queue per call (bounds one pass of
/// the management loop).
pub const DRAIN_PER_CALL: usize = 8192;
/// Dump datagrams sent per call and peer: a restarted node's requests do not
/// flood the link or stall the loop.
pub const DUMP_DATAGRAMS_PER_CALL: usize = 16;
/// Entries one dump carries at most (collected when asked; the rest are
/// learned again as their packets arrive).
pub const DUMP_MAX: usize = 262_144;
/// Refresh datagrams sent per call (each to every peer).
pub const REFRESH_DATAGRAMS_PER_CALL: usize = 64;
/// How often a starting node repeats its dump request to a peer that has
/// not said its dump is complete (its first request is usually lost: the
/// node's own address comes up with its exception port, after it starts).
pub const DUMP_RETRY: Duration = Duration::from_secs(1);
/// How long a starting node keeps asking (a peer that is down too is not
/// asked for ever).
pub const DUMP_ASK_FOR: Duration = Duration::from_secs(60);

pub use crate::report::SyncCounters;

/// A dump under way to one peer (by index); [`Kind::DumpDone`] follows its
/// last entries.
#[derive(Debug)]
struct Dump {
    to: usize,
    entries: Vec<SyncEntry>,
}

/// The dump requests of a starting node: the peers (by index) that have
/// not answered [`Kind::DumpDone`] yet.
#[derive(Debug, Default)]
struct Asking {
    peers: Vec<usize>,
    next: Duration,
    until: Duration,
}

/// The sync state of the management core.
#[derive(Debug)]
pub struct SyncState {
    /// The sessions with the peers, indexed as `peers`.
    sessions: Peers,
    peers: Vec<SocketAddr>,
    batch_size: usize,
    batch_interval: Duration,
    batch: Vec<SyncEntry>,
    /// When the oldest entry of `batch` was taken.
    batch_since: Option<Duration>,
    dumps: Vec<Dump>,
    /// Per peer: the epoch of the peer a full dump was made for. A peer
    /// gets one per life (its requests are repeated until the dump's end
    /// arrives; a repeat is answered with the end alone).
    dumped: Vec<Option<u64>>,
    asking: Asking,
    /// The refresh under way (to every peer) and when the next is due.
    refresh: Vec<SyncEntry>,
    next_refresh: Option<Tick>,
    /// Slot → (service, identity), from the builder at the last publish.
    identity: Vec<Option<(String, String)>>,
    /// Flow tag → service name (services' and gateway endpoints' tags).
    service_of_tag: HashMap<u16, String>,
    scratch: Vec<NewFlow>,
    /// Hellos and their replies to send, by peer index.
    handshake_out: Vec<(usize, Vec<u8>)>,
    counters: SyncCounters,
}

/// What a peer said of itself (M25 across a cluster).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeerNews {
    /// Its measured rates.
    Rates(Vec<Rate>),
    /// It leaves the cluster.
    Leaving,
}

/// What the core sends: a datagram to a peer.
pub type Datagram = (SocketAddr, Vec<u8>);

/// A random epoch for this start (M54): from the operating system, never 0
/// (0 means "unknown" on the wire).
///
/// # Errors
/// The OS has no randomness to give.
pub fn random_epoch() -> Result<u64, getrandom::Error> {
    let mut b = [0u8; 8];
    getrandom::fill(&mut b)?;
    Ok(u64::from_be_bytes(b).max(1))
}

impl SyncState {
    /// Sync for node `node_name` with `compiled`'s `[flow_sync]`, at
    /// `epoch` ([`random_epoch`]); `None` without it (or without a usable
    /// key, which validation refused).
    pub fn new(compiled: &Compiled, node_name: &str, epoch: u64) -> Option<SyncState> {
        let f = compiled.settings.flow_sync.as_ref()?;
        let key = compiled.settings.flow_sync_key.as_ref()?;
        Some(SyncState {
            sessions: Peers::new(
                flowsync::node_id(node_name),
                epoch,
                Cipher::new(key),
                f.peers.len(),
            ),
            peers: f.peers.clone(),
            batch_size: usize::from(f.batch_size.max(1)),
            batch_interval: f.batch_interval.0,
            batch: Vec::new(),
            batch_since: None,
            dumps: Vec::new(),
            dumped: vec![None; f.peers.len()],
            asking: Asking::default(),
            refresh: Vec::new(),
            next_refresh: None,
            identity: Vec::new(),
            service_of_tag: HashMap::new(),
            scratch: Vec::new(),
            handshake_out: Vec::new(),
            counters: SyncCounters::default(),
        })
    }

    /// The counters so far.
    pub fn counters(&self) -> SyncCounters {
        self.counters
    }

    /// The peers datagrams go to.
    pub fn peers(&self) -> &[SocketAddr] {
        &self.peers
    }

    /// This node's epoch (random per start).
    pub fn epoch(&self) -> u64 {
        self.sessions.epoch()
    }

    /// After a publish: the slots' identities and the flow tags' services.
    pub fn learn(&mut self, compiled: &Compiled, builder: &SnapshotBuilder) {
        self.identity.clear();
        for (svc, id, slot) in builder.identities() {
            let i = slot as usize;
            if self.identity.len() <= i {
                self.identity.resize(i + 1, None);
            }
            if let Some(s) = self.identity.get_mut(i) {
                *s = Some((svc.to_owned(), id.to_owned()));
            }
        }
        self.service_of_tag.clear();
        for s in &compiled.services {
            self.service_of_tag.insert(s.flow_tag, s.name.clone());
        }
        for g in &compiled.gateways {
            if let Some(s) = compiled.services.get(g.service.0 as usize) {
                self.service_of_tag.insert(g.flow_tag, s.name.clone());
            }
        }
    }

    /// At start (`now`): hellos to every peer, and a request for its
    /// current entries once in session with it; asked again every
    /// [`DUMP_RETRY`] until it answers that its dump is done, for at most
    /// [`DUMP_ASK_FOR`].
    pub fn request_dumps(&mut self, now: Duration, out: &mut Vec<Datagram>) {
        self.asking = Asking {
            peers: (0..self.peers.len()).collect(),
            next: now,
            until: now.saturating_add(DUMP_ASK_FOR),
        };
        self.handshakes(now, out);
        self.ask(now, out);
    }

    /// Hellos due, and the replies and hellos that received datagrams
    /// called for.
    fn handshakes(&mut self, now: Duration, out: &mut Vec<Datagram>) {
        let mut hs = std::mem::take(&mut self.handshake_out);
        self.sessions.poll(now, &mut hs);
        for (i, d) in hs.drain(..) {
            if let Some(&to) = self.peers.get(i) {
                self.counters.sent += 1;
                out.push((to, d));
            }
        }
        self.handshake_out = hs;
    }

    fn ask(&mut self, now: Duration, out: &mut Vec<Datagram>) {
        if self.asking.peers.is_empty() || now < self.asking.next || now >= self.asking.until {
            return;
        }
        self.asking.next = now.saturating_add(DUMP_RETRY);
        let w = Writer::new(Kind::RequestDump);
        for i in self.asking.peers.clone() {
            // A peer not in session yet is asked once it is.
            self.send_to(i, &w, out);
        }
    }

    /// Peers asked for a dump that have not finished it.
    pub fn dumps_awaited(&self) -> usize {
        self.asking.peers.len()
    }

    /// `w` sealed for peer `i` into `out`; false when not in session.
    fn send_to(&mut self, i: usize, w: &Writer, out: &mut Vec<Datagram>) -> bool {
        let Some(&to) = self.peers.get(i) else {
            return false;
        };
        let Some(d) = self.sessions.seal(i, w) else {
            return false;
        };
        self.counters.sent += 1;
        out.push((to, d));
        true
    }

    /// `w` sealed for every peer in session into `out` (each copy with a
    /// sequence of its own); the copies sent.
    fn send_all(&mut self, w: &Writer, out: &mut Vec<Datagram>) -> u64 {
        let mut n = 0;
        for i in 0..self.peers.len() {
            n += u64::from(self.send_to(i, w, out));
        }
        n
    }

    /// Periodic work at `now` (tick `tick`): takes the workers' new entries,
    /// sends full batches and a partial one older than the batch interval,
    /// the next datagrams of every dump under way, and the hellos due.
    pub fn poll(
        &mut self,
        now: Duration,
        tick: Tick,
        queue: &SyncQueue,
        flows: &FlowTable,
        out: &mut Vec<Datagram>,
    ) {
        self.handshakes(now, out);
        let mut taken = std::mem::take(&mut self.scratch);
        taken.clear();
        queue.drain_into(&mut taken, DRAIN_PER_CALL);
        for f in &taken {
            if let Some(e) = self.entry(
                &f.key, f.hash, f.backend, f.cookie, f.flags, tick, f.created,
            ) {
                if self.batch.is_empty() {
                    self.batch_since = Some(now);
                }
                self.batch.push(e);
                if self.batch.len() >= self.batch_size {
                    self.flush(out);
                }
            }
        }
        self.scratch = taken;
        if self
            .batch_since
            .is_some_and(|t| now.saturating_sub(t) >= self.batch_interval)
        {
            self.flush(out);
        }
        self.pace_dumps(out);
        self.ask(now, out);
        self.refresh_due(tick, flows);
        self.pace_refresh(out);
    }

    /// Every [`refresh_period`]: the entries this node carried since the
    /// last refresh (seen since, not learned from a peer) go to the peers
    /// again, with their state now. Peers hold an entry they learned only
    /// as long as its idle timeout from the last refresh, and take its
    /// state (established, closing) from it: without refreshes a learned
    /// entry would expire as the half-open or first-packet entry it was
    /// sent as, long before the connection ends.
    fn refresh_due(&mut self, tick: Tick, flows: &FlowTable) {
        let period = refresh_period(&flows.timeouts());
        match self.next_refresh {
            Some(t) if !tick_reached(tick, t) => return,
            None => {
                self.next_refresh = Some(tick.wrapping_add(period));
                return;
            }
            Some(_) => self.next_refresh = Some(tick.wrapping_add(period)),
        }
        if !self.refresh.is_empty() {
            // The previous one is still being sent: it carries them.
            return;
        }
        let window = i32::try_from(period).unwrap_or(i32::MAX);
        let mut entries = std::mem::take(&mut self.refresh);
        let carried = |e: &flowtable::Entry| {
            !e.flags.contains(LEARNED) && tick_age(tick, e.last_seen) <= window
        };
        self.collect(flows, tick, carried, &mut entries);
        if !entries.is_empty() {
            self.counters.refreshes += 1;
        }
        self.refresh = entries;
    }

    fn pace_refresh(&mut self, out: &mut Vec<Datagram>) {
        for _ in 0..REFRESH_DATAGRAMS_PER_CALL {
            if self.refresh.is_empty() {
                return;
            }
            let mut w = Writer::new(Kind::Entries);
            let mut n = 0;
            while let Some(e) = self.refresh.last() {
                match w.push(e) {
                    Ok(()) => {
                        n += 1;
                        self.refresh.pop();
                    }
                    Err(PushError::Full) => break,
                    Err(_) => {
                        self.refresh.pop();
                    }
                }
            }
            let copies = self.send_all(&w, out);
            self.counters.entries_sent += n * copies;
        }
    }

    /// The entries of `flows` that `keep` takes, as they travel, added to
    /// `entries` (up to [`DUMP_MAX`] in all): a dump's or a refresh's.
    fn collect(
        &self,
        flows: &FlowTable,
        tick: Tick,
        keep: impl Fn(&flowtable::Entry) -> bool,
        entries: &mut Vec<SyncEntry>,
    ) {
        flows.scan(|k, e| {
            if keep(e)
                && let Some(s) = self.entry(
                    k,
                    key_hash(&k.0),
                    e.backend,
                    e.cookie,
                    e.flags.bits(),
                    tick,
                    e.last_seen,
                )
            {
                entries.push(s);
            }
            if entries.len() >= DUMP_MAX {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        });
    }

    /// An entry for the wire; `None` for a slot without an identity (a
    /// backend removed since).
    #[allow(clippy::too_many_arguments)]
    fn entry(
        &self,
        key: &FlowKey,
        hash: u64,
        slot: u32,
        cookie: u32,
        flags: u8,
        now: Tick,
        last_seen: Tick,
    ) -> Option<SyncEntry> {
        let (_, identity) = self.identity.get(slot as usize)?.as_ref()?;
        let age = u32::try_from(tick_age(now, last_seen).max(0)).unwrap_or(0);
        Some(SyncEntry {
            key: key.0,
            hash,
            identity: identity.clone(),
            cookie,
            flags,
            age_ms: age.saturating_mul(1000),
        })
    }

    /// Sends the batch to every peer in session (as many datagrams as it
    /// takes; a peer not in session yet gets these entries with the next
    /// refresh or its dump).
    fn flush(&mut self, out: &mut Vec<Datagram>) {
        self.batch_since = None;
        let batch = std::mem::take(&mut self.batch);
        let mut copies = 0;
        for w in self.datagrams(&batch) {
            copies = self.send_all(&w, out);
        }
        if copies > 0 {
            self.counters.entries_sent += batch.len() as u64;
        }
        self.batch = batch;
        self.batch.clear();
    }

    /// `entries` as datagrams, each as full as it can be.
    fn datagrams(&mut self, entries: &[SyncEntry]) -> Vec<Writer> {
        // An identity the format cannot carry: that flow is not synced.
        pack(Kind::Entries, entries, Writer::push, false)
    }

    fn pace_dumps(&mut self, out: &mut Vec<Datagram>) {
        let mut dumps = std::mem::take(&mut self.dumps);
        for dump in &mut dumps {
            for _ in 0..DUMP_DATAGRAMS_PER_CALL {
                if dump.entries.is_empty() {
                    break;
                }
                let mut w = Writer::new(Kind::Entries);
                let mut n = 0;
                while let Some(e) = dump.entries.last() {
                    match w.push(e) {
                        Ok(()) => {
                            n += 1;
                            dump.entries.pop();
                        }
                        Err(PushError::Full) => break,
                        Err(_) => {
                            dump.entries.pop();
                        }
                    }
                }
                if self.send_to(dump.to, &w, out) {
                    self.counters.entries_sent += n;
                }
            }
        }
        let done = Writer::new(Kind::DumpDone);
        for dump in dumps.iter().filter(|d| d.entries.is_empty()) {
            self.send_to(dump.to, &done, out);
        }
        dumps.retain(|d| !d.entries.is_empty());
        self.dumps = dumps;
    }

    /// Sends this node's measured rates to every peer in session (as many
    /// datagrams as they take; one even when there are none: it says
    /// "heard, carrying nothing").
    pub fn send_rates(&mut self, rates: &[Rate], out: &mut Vec<Datagram>) {
        for w in pack(Kind::Rates, rates, Writer::push_rate, true) {
            self.counters.rates_sent += self.send_all(&w, out);
        }
    }

    /// Says to every peer in session that this node leaves the cluster (a
    /// graceful shutdown): they stop holding its share of capacity.
    pub fn leave(&mut self, out: &mut Vec<Datagram>) {
        self.send_all(&Writer::new(Kind::Leaving), out);
    }

    /// Input: a datagram from `from` at `now`. Applies its entries to
    /// `flows` (in snapshot `snap`, at tick `tick`), or starts a dump for a
    /// request, or answers a hello into `out`; returns what a peer said of
    /// itself (rates, leaving) for the caller. Refused: counted by reason.
    #[allow(clippy::too_many_arguments)]
    pub fn received(
        &mut self,
        now: Duration,
        from: SocketAddr,
        bytes: &[u8],
        snap: &Snapshot,
        builder: &SnapshotBuilder,
        flows: &FlowTable,
        tick: Tick,
        out: &mut Vec<Datagram>,
    ) -> Option<PeerNews> {
        let Some(i) = self.peers.iter().position(|p| *p == from) else {
            self.counters.drop_source += 1;
            return None;
        };
        let mut hs = std::mem::take(&mut self.handshake_out);
        let opened = self.sessions.open(i, bytes, now, valid_key, &mut hs);
        self.handshake_out = hs;
        self.handshakes(now, out);
        let d = match opened {
            Ok(Accepted::Data(d)) => d,
            Ok(Accepted::Answered) => {
                self.counters.hellos += 1;
                return None;
            }
            Ok(Accepted::Established { .. }) => {
                self.counters.handshakes += 1;
                // A peer asked for a dump that was not in session yet is
                // asked at once.
                if self.asking.peers.contains(&i) {
                    self.asking.next = now;
                    self.ask(now, out);
                }
                return None;
            }
            Err(r) => {
                self.refused(r);
                return None;
            }
        };
        self.counters.received += 1;
        match d.header.kind {
            Kind::RequestDump => self.start_dump(i, d.header.stamp.epoch, flows, tick),
            Kind::DumpDone => self.asking.peers.retain(|p| *p != i),
            Kind::Entries => {
                for e in &d.entries {
                    self.apply(e, snap, builder, flows, tick);
                }
            }
            Kind::Rates => {
                self.counters.rates_received += 1;
                return Some(PeerNews::Rates(d.rates));
            }
            Kind::Leaving => return Some(PeerNews::Leaving),
            // The sessions take these.
            Kind::Hello | Kind::HelloReply => {}
        }
        None
    }

    fn refused(&mut self, r: Refusal) {
        let c = &mut self.counters;
        *match r {
            Refusal::Decode(DecodeError::Auth) => &mut c.drop_auth,
            Refusal::Decode(DecodeError::Version) => &mut c.drop_version,
            Refusal::Decode(_) => &mut c.drop_malformed,
            Refusal::Own => &mut c.drop_own,
            Refusal::Identity => &mut c.drop_identity,
            Refusal::Stale => &mut c.drop_stale,
            Refusal::Epoch => &mut c.drop_epoch,
            Refusal::Window(Replay::TooOld) => &mut c.drop_old,
            Refusal::Window(Replay::Repeated) => &mut c.drop_replay,
            Refusal::Handshake => &mut c.drop_handshake,
            // Not answered either way.
            Refusal::Limited | Refusal::Exhausted => &mut c.drop_limited,
        } += 1;
    }

    fn apply(
        &mut self,
        e: &SyncEntry,
        snap: &Snapshot,
        builder: &SnapshotBuilder,
        flows: &FlowTable,
        tick: Tick,
    ) {
        let tag = wire::flow::service_tag(&e.key);
        let slot = self
            .service_of_tag
            .get(&tag)
            .and_then(|svc| builder.slot_of(svc, &e.identity));
        let usable = slot
            .and_then(|s| snap.backends.get(s as usize))
            .is_some_and(|b| matches!(b.state, BackendState::Active));
        let (Some(slot), true) = (slot, usable) else {
            self.counters.unresolved += 1;
            return;
        };
        let new = NewEntry {
            backend: slot,
            generation: snap.generation,
            cookie: e.cookie,
            flags: EntryFlags::from_bits(e.flags | LEARNED),
        };
        let key = FlowKey(e.key);
        match flows.insert(&key, flows.hash(&key), new, tick) {
            InsertOutcome::Inserted { .. } => self.counters.applied += 1,
            // A refresh of what this node learned before: its idle timer
            // restarts, its state follows the carrier's. (A local entry is
            // left alone: this node's packets keep it.)
            InsertOutcome::Existing(hit)
                if hit.entry.flags.contains(LEARNED) && hit.entry.backend == slot =>
            {
                flows.touch(hit.slot, tick);
                let set = e.flags & (EntryFlags::ESTABLISHED | EntryFlags::FIN | EntryFlags::RST);
                let clear = if e.flags & EntryFlags::UNCONFIRMED == 0 {
                    EntryFlags::UNCONFIRMED
                } else {
                    0
                };
                let _ = flows.update_flags(hit.slot, set, clear);
                self.counters.refreshed += 1;
            }
            InsertOutcome::Existing(_) => self.counters.existing += 1,
            InsertOutcome::Full | InsertOutcome::Contended => self.counters.unresolved += 1,
        }
    }

    /// A dump request of peer `to` at its epoch `epoch`: one full dump per
    /// life of the peer; a request repeated after it (its end was lost) is
    /// answered with the end alone.
    fn start_dump(&mut self, to: usize, epoch: u64, flows: &FlowTable, tick: Tick) {
        // A request repeated while that peer's dump is under way is the
        // same request again (see `ask`): the dump goes on.
        if self.dumps.iter().any(|d| d.to == to) {
            return;
        }
        let mut entries = Vec::new();
        if self.dumped.get(to) != Some(&Some(epoch)) {
            self.collect(flows, tick, |_| true, &mut entries);
            self.counters.dumps += 1;
            if let Some(d) = self.dumped.get_mut(to) {
                *d = Some(epoch);
            }
        }
        // Even an empty one: its end says "done".
        self.dumps.push(Dump { to, entries });
    }

    /// Its part of `status` (the `flow sync:` lines).
    pub fn status(&self) -> crate::report::FlowSync {
        crate::report::FlowSync {
            peers: self.peers.len(),
            sessions: self.sessions.established(),
            counters: self.counters,
            waiting_for: self.asking.peers.len(),
        }
    }
}

/// `items` in datagrams of `kind`, each as full as it can be (an empty one
/// too when `even_empty`); an item `push` refuses for what it is (not for a
/// full datagram) is left out.
fn pack<T>(
    kind: Kind,
    items: &[T],
    push: impl Fn(&mut Writer, &T) -> Result<(), PushError>,
    even_empty: bool,
) -> Vec<Writer> {
    let mut all = Vec::new();
    let mut w = Writer::new(kind);
    for item in items {
        if push(&mut w, item) == Err(PushError::Full) {
            all.push(std::mem::replace(&mut w, Writer::new(kind)));
            // An item fits an empty datagram (names are bounded).
            let _ = push(&mut w, item);
        }
    }
    if w.count() > 0 || even_empty {
        all.push(w);
    }
    all
}

/// How often entries are refreshed, in flow-table ticks: a third of the
/// shortest idle timeout a carried connection can have (half-open,
/// established, UDP, other), so a peer's copy is refreshed at least twice
/// before it would expire.
pub fn refresh_period(t: &Timeouts) -> Tick {
    let shortest = [t.tcp_half_open, t.tcp_established, t.udp, t.other]
        .into_iter()
        .min()
        .unwrap_or(1);
    (shortest / 3).max(1)
}

/// The table hash of a flow-table key: that of the packed flow without its
/// tag, as the data plane computes it.
fn key_hash(key: &[u64; 5]) -> u64 {
    wire::flow::hash_words(&wire::flow::without_service_tag(*key), 0)
}

/// Whether a received entry's key is one the data plane makes (a packed
/// flow with a tag) and `hash` is its hash: else it would sit where no
/// lookup finds it.
fn valid_key(key: &[u64; 5], hash: u64) -> bool {
    wire::flow::FlowKey::unpack(&wire::flow::without_service_tag(*key)).is_some()
        && key_hash(key) == hash
}
