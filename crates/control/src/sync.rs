//! Flow-state sync between the nodes of a cluster (M36), the management
//! core's part, without I/O: the shell owns the UDP socket; this batches the
//! workers' new entries into datagrams for the peers, checks and applies
//! what peers send, and paces dumps for a peer that (re)started.
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
use flowsync::{DecodeError, Header, Kind, PushError, Rate, SyncEntry, SyncKey, Writer};
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

/// Sync counters, for `status` and the metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct SyncCounters {
    /// Datagrams sent (entries and requests, dumps included).
    pub sent: u64,
    /// Entries sent.
    pub entries_sent: u64,
    /// Datagrams received and accepted.
    pub received: u64,
    /// Entries inserted into the flow table.
    pub applied: u64,
    /// Entries whose flow already had a local entry (kept).
    pub existing: u64,
    /// Entries that refreshed one learned before (its idle timer and state).
    pub refreshed: u64,
    /// Refreshes sent (each: the entries this node carried since the last).
    pub refreshes: u64,
    /// Entries not inserted: no local slot for their endpoint, a backend
    /// that takes no flows here, or a full / contended table.
    pub unresolved: u64,
    /// Dump requests answered.
    pub dumps: u64,
    /// Dropped: from a source that is no configured peer.
    pub drop_source: u64,
    /// Dropped: a bad HMAC (another key, or altered).
    pub drop_mac: u64,
    /// Dropped: authenticated but malformed (length, magic, version, kind,
    /// entries, key or hash).
    pub drop_malformed: u64,
    /// Dropped: this node's own datagram (a peer list naming itself).
    pub drop_own: u64,
    /// Rate summaries sent (datagrams, each to one peer).
    pub rates_sent: u64,
    /// Rate summaries received (datagrams).
    pub rates_received: u64,
}

/// A dump under way to one peer; [`Kind::DumpDone`] follows its last
/// entries.
#[derive(Debug)]
struct Dump {
    to: SocketAddr,
    entries: Vec<SyncEntry>,
}

/// The dump requests of a starting node: the peers that have not answered
/// [`Kind::DumpDone`] yet.
#[derive(Debug, Default)]
struct Asking {
    peers: Vec<SocketAddr>,
    next: Duration,
    until: Duration,
}

/// The sync state of the management core.
#[derive(Debug)]
pub struct Sync {
    key: SyncKey,
    node: u64,
    peers: Vec<SocketAddr>,
    batch_size: usize,
    batch_interval: Duration,
    sequence: u64,
    batch: Vec<SyncEntry>,
    /// When the oldest entry of `batch` was taken.
    batch_since: Option<Duration>,
    dumps: Vec<Dump>,
    asking: Asking,
    /// The refresh under way (to every peer) and when the next is due.
    refresh: Vec<SyncEntry>,
    next_refresh: Option<Tick>,
    /// Slot → (service, identity), from the builder at the last publish.
    identity: Vec<Option<(String, String)>>,
    /// Flow tag → service name (services' and gateway endpoints' tags).
    service_of_tag: HashMap<u16, String>,
    scratch: Vec<NewFlow>,
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

impl Sync {
    /// Sync for node `node_name` with `compiled`'s `[flow_sync]`; `None`
    /// without it (or without a usable key, which validation refused).
    pub fn new(compiled: &Compiled, node_name: &str) -> Option<Sync> {
        let f = compiled.settings.flow_sync.as_ref()?;
        let key = compiled.settings.flow_sync_key.clone()?;
        Some(Sync {
            key,
            node: flowsync::node_id(node_name),
            peers: f.peers.clone(),
            batch_size: usize::from(f.batch_size.max(1)),
            batch_interval: f.batch_interval.0,
            sequence: 0,
            batch: Vec::new(),
            batch_since: None,
            dumps: Vec::new(),
            asking: Asking::default(),
            refresh: Vec::new(),
            next_refresh: None,
            identity: Vec::new(),
            service_of_tag: HashMap::new(),
            scratch: Vec::new(),
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

    /// At start (`now`): ask every peer for its current entries; asked
    /// again every [`DUMP_RETRY`] until it answers that its dump is done,
    /// for at most [`DUMP_ASK_FOR`].
    pub fn request_dumps(&mut self, now: Duration, out: &mut Vec<Datagram>) {
        self.asking = Asking {
            peers: self.peers.clone(),
            next: now,
            until: now.saturating_add(DUMP_ASK_FOR),
        };
        self.ask(now, out);
    }

    fn ask(&mut self, now: Duration, out: &mut Vec<Datagram>) {
        if self.asking.peers.is_empty() || now < self.asking.next || now >= self.asking.until {
            return;
        }
        self.asking.next = now.saturating_add(DUMP_RETRY);
        for to in self.asking.peers.clone() {
            let d = Writer::new(self.header(Kind::RequestDump)).finish(&self.key);
            self.counters.sent += 1;
            out.push((to, d));
        }
    }

    /// Peers asked for a dump that have not finished it.
    pub fn dumps_awaited(&self) -> usize {
        self.asking.peers.len()
    }

    fn header(&mut self, kind: Kind) -> Header {
        self.sequence = self.sequence.wrapping_add(1);
        Header {
            kind,
            sender: self.node,
            sequence: self.sequence,
        }
    }

    /// Periodic work at `now` (tick `tick`): takes the workers' new entries,
    /// sends full batches and a partial one older than the batch interval,
    /// and the next datagrams of every dump under way.
    pub fn poll(
        &mut self,
        now: Duration,
        tick: Tick,
        queue: &SyncQueue,
        flows: &FlowTable,
        out: &mut Vec<Datagram>,
    ) {
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
        flows.scan(|k, e| {
            if !e.flags.contains(LEARNED)
                && tick_age(tick, e.last_seen) <= window
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
            let mut w = Writer::new(self.header(Kind::Entries));
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
            let d = w.finish(&self.key);
            for &to in &self.peers {
                self.counters.sent += 1;
                self.counters.entries_sent += n;
                out.push((to, d.clone()));
            }
        }
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

    /// Sends the batch to every peer (as many datagrams as it takes).
    fn flush(&mut self, out: &mut Vec<Datagram>) {
        self.batch_since = None;
        let batch = std::mem::take(&mut self.batch);
        for d in self.datagrams(&batch) {
            for &to in &self.peers {
                self.counters.sent += 1;
                out.push((to, d.clone()));
            }
        }
        self.counters.entries_sent += batch.len() as u64;
        self.batch = batch;
        self.batch.clear();
    }

    /// `entries` as datagrams, each as full as it can be.
    fn datagrams(&mut self, entries: &[SyncEntry]) -> Vec<Vec<u8>> {
        // An identity the format cannot carry: that flow is not synced.
        self.pack(Kind::Entries, entries, Writer::push, false)
    }

    /// `items` in datagrams of `kind`, each as full as it can be (an empty
    /// one too when `even_empty`); an item `push` refuses for what it is
    /// (not for a full datagram) is left out.
    fn pack<T>(
        &mut self,
        kind: Kind,
        items: &[T],
        push: impl Fn(&mut Writer, &T) -> Result<(), PushError>,
        even_empty: bool,
    ) -> Vec<Vec<u8>> {
        let mut all = Vec::new();
        let mut w = Writer::new(self.header(kind));
        for item in items {
            if push(&mut w, item) == Err(PushError::Full) {
                let full = std::mem::replace(&mut w, Writer::new(self.header(kind)));
                all.push(full.finish(&self.key));
                // An item fits an empty datagram (names are bounded).
                let _ = push(&mut w, item);
            }
        }
        if w.count() > 0 || even_empty {
            all.push(w.finish(&self.key));
        }
        all
    }

    fn pace_dumps(&mut self, out: &mut Vec<Datagram>) {
        let mut dumps = std::mem::take(&mut self.dumps);
        for dump in &mut dumps {
            for _ in 0..DUMP_DATAGRAMS_PER_CALL {
                if dump.entries.is_empty() {
                    break;
                }
                let mut w = Writer::new(self.header(Kind::Entries));
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
                self.counters.sent += 1;
                self.counters.entries_sent += n;
                out.push((dump.to, w.finish(&self.key)));
            }
        }
        for dump in dumps.iter().filter(|d| d.entries.is_empty()) {
            let done = Writer::new(self.header(Kind::DumpDone)).finish(&self.key);
            self.counters.sent += 1;
            out.push((dump.to, done));
        }
        dumps.retain(|d| !d.entries.is_empty());
        self.dumps = dumps;
    }

    /// Sends this node's measured rates to every peer (as many datagrams as
    /// they take; one even when there are none: it says "heard, carrying
    /// nothing").
    pub fn send_rates(&mut self, rates: &[Rate], out: &mut Vec<Datagram>) {
        for d in self.pack(Kind::Rates, rates, Writer::push_rate, true) {
            for &to in &self.peers {
                self.counters.sent += 1;
                self.counters.rates_sent += 1;
                out.push((to, d.clone()));
            }
        }
    }

    /// Says to every peer that this node leaves the cluster (a graceful
    /// shutdown): they stop holding its share of capacity.
    pub fn leave(&mut self, out: &mut Vec<Datagram>) {
        let d = Writer::new(self.header(Kind::Leaving)).finish(&self.key);
        for &to in &self.peers {
            self.counters.sent += 1;
            out.push((to, d.clone()));
        }
    }

    /// Input: a datagram from `from`. Applies its entries to `flows` (in
    /// snapshot `snap`, at tick `tick`), or starts a dump for a request;
    /// returns what a peer said of itself (rates, leaving) for the caller.
    pub fn received(
        &mut self,
        from: SocketAddr,
        bytes: &[u8],
        snap: &Snapshot,
        builder: &SnapshotBuilder,
        flows: &FlowTable,
        tick: Tick,
    ) -> Option<PeerNews> {
        if !self.peers.contains(&from) {
            self.counters.drop_source += 1;
            return None;
        }
        let d = match flowsync::decode(bytes, &self.key, valid_key) {
            Ok(d) => d,
            Err(DecodeError::Mac) => {
                self.counters.drop_mac += 1;
                return None;
            }
            Err(_) => {
                self.counters.drop_malformed += 1;
                return None;
            }
        };
        if d.header.sender == self.node {
            self.counters.drop_own += 1;
            return None;
        }
        self.counters.received += 1;
        match d.header.kind {
            Kind::RequestDump => self.start_dump(from, flows, tick),
            Kind::DumpDone => self.asking.peers.retain(|p| *p != from),
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
        }
        None
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

    fn start_dump(&mut self, to: SocketAddr, flows: &FlowTable, tick: Tick) {
        // A request repeated while that peer's dump is under way is the
        // same request again (see `ask`): the dump goes on.
        if self.dumps.iter().any(|d| d.to == to) {
            return;
        }
        let mut entries = Vec::new();
        flows.scan(|k, e| {
            let hash = key_hash(&k.0);
            if let Some(s) = self.entry(
                k,
                hash,
                e.backend,
                e.cookie,
                e.flags.bits(),
                tick,
                e.last_seen,
            ) {
                entries.push(s);
            }
            if entries.len() >= DUMP_MAX {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        });
        self.counters.dumps += 1;
        // Even an empty one: its end says "done".
        self.dumps.push(Dump { to, entries });
    }

    /// Its part of `status` (the `flow sync:` lines).
    pub fn status(&self) -> crate::report::FlowSync {
        crate::report::FlowSync {
            peers: self.peers.len(),
            counters: self.counters,
            waiting_for: self.asking.peers.len(),
        }
    }
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
