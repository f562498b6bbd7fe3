//! The per-packet decisions: classify, select a rule (M3), follow or
//! create a flow (M10, M11, M15), pick a backend by Maglev (M12), deliver
//! (M8), and count everything by outcome.
//!
//! Besides forwarding, the pipeline answers a few packets itself by rewriting
//! them in place into a reply to their sender (docs/requirements.md §1, M14): ARP requests and
//! IPv6 neighbor solicitations for a VIP or one of the balancer's own
//! addresses, and — for services with `no_backend_action = "reset"` — TCP
//! segments that match a rule whose service has no eligible backend. Other
//! neighbor-discovery and multicast-listener messages belong to the host's
//! kernel and go to the exception path whatever their address.
//!
//! # How to read this
//!
//! Start with [`Pipeline::process`]: one packet, start to finish. It is the
//! reference behaviour; everything else here is a faster way to the same
//! result (`tests/burst.rs` checks that a burst decides exactly what its
//! packets decide one at a time). A packet goes through the passes in order,
//! one file each:
//!
//! 1. `classify`: parse, select the rule, compute the flow key and its
//!    hash. A packet that needs no flow entry (ARP, link control, no rule,
//!    not ours) ends here with its `Outcome`; the others leave a
//!    `Pending` (the facts the next pass needs) and their key.
//! 2. `flow`: follow the flow's entry or create one (M10, M11, M15), pick
//!    the backend by Maglev (M12), deliver (M8).
//! 3. `answer`: the replies built in place — ARP, neighbor advertisements,
//!    TCP resets, ICMP too-big (M48) — reached from the two passes above;
//!    `fragment`: an IPv4 packet without DF too big once encapsulated is
//!    split after the burst, when the worker loop has buffers (M48).
//! 4. `count`: every packet's one outcome under its counter, and the
//!    per-rule and per-backend counts.
//!
//! [`explain`] runs these same passes on a synthetic packet with a
//! throwaway worker and a read-only flow-table lookup (`spillway
//! simulate`): the decisions are the ones above, shared, not copies.
//!
//! What exists only for speed, and can be skipped on a first reading:
//! [`Pipeline::process_burst`] runs the passes over groups of [`GROUP`]
//! packets so that the flow table's cache misses overlap (staged lookups;
//! a bitmap of changed hashes sends a packet whose flow an earlier one of
//! its group changed to a fresh lookup); IPv4 and IPv6 TCP/UDP take parsers
//! of their own (`v4_flow`, `v6_flow`), and consecutive IPv4 packets to one
//! destination reuse its rule (`RuleRun`); an established flow to an
//! active backend takes `finish_established`, a short path through the
//! backend's precomputed headers; rare outcomes are counted out of line.

use std::sync::Arc;

use flowtable::{FlowTable, Lookup, ProtoClass, Tick};
use wire::buf::PacketBuf;
use wire::encap::InnerIp;
use wire::ethernet::MacAddr;
use wire::flow::LastWord;
use wire::packet::PacketInfo;
use wire::tcp::Flags;

use crate::counters::{DropReason, WorkerCounters};
use crate::neighbour::NeighbourQueues;
use crate::snapshot::Snapshot;
use crate::sync::SyncQueue;

mod answer;
mod budget;
mod classify;
mod count;
pub mod explain;
mod flow;
mod fragment;
mod gateway;
mod trace;

pub use fragment::MAX_FRAGMENTS;

use wire::ip::proto::{TCP, UDP};

/// What to do with a processed packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Rewritten or encapsulated for a backend: transmit it.
    Forward,
    /// Returned by an appliance and decapsulated (M32): transmit it on this
    /// port, to the gateway endpoint it came from.
    ForwardTo(u16),
    /// Turned into a reply to its sender (ARP reply, neighbor advertisement,
    /// TCP reset): transmit it.
    Reply,
    /// Not for the data plane: hand it to the host (exception path).
    ToHost,
    /// Dropped (and counted) for this reason.
    Drop(DropReason),
    /// Too big once encapsulated and allowed to be fragmented (IPv4 without
    /// DF, M48): [`Pipeline::fragment`] with this job splits it, encapsulates
    /// each fragment and counts the outcome; the worker loop sends them
    /// together, in order. Not counted until then.
    Fragment(u16),
}

/// What became of a packet: a [`Verdict`], with the kinds of reply told
/// apart so that each is counted under its own counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Forward,
    ToHost,
    Drop(DropReason),
    ArpReply,
    NeighborAdvert,
    Reset,
    /// Answered with ICMP too-big (M48).
    TooBig,
    /// An echo request to a VIP, answered with its echo reply.
    EchoReply,
    /// Returned by an appliance, sent back out this port (M32).
    Returned(u16),
    /// To be fragmented after the burst (M48): job `0` of
    /// [`Pipeline::fragment`].
    Fragment(u16),
}

/// Default burst size (docs/requirements.md §1): packets the engine
/// receives and hands the pipeline at a time.
pub const BURST: usize = 32;

/// Packets classified together before their flow-table lookups (the
/// prefetch distance of the staged lookups, [`FlowTable::begin`]).
pub const GROUP: usize = 32;

/// A packet after classification.
#[derive(Clone, Copy)]
enum Stage {
    /// Finished without the flow table.
    Done(Outcome),
    /// Matched a rule; needs its flow entry. Its key and [`Pending`] were
    /// written in place (moving them between the passes by value cost more
    /// than the rest of the bookkeeping together).
    Lookup,
}

/// What the flow-table part of the pipeline needs to know about a packet.
struct Pending {
    tcp_flags: Flags,
    child: usize,
    svc: usize,
    proto: u8,
    fragment: bool,
    is_icmp_error: bool,
    hash: u64,
    class: ProtoClass,
    /// The packet as parsed, for encapsulation.
    inner: Inner,
    /// It arrived in a tunnel to an own address (M49): never sent on to a
    /// remote rule ([`crate::snapshot::Backend::remote`]).
    tunnelled: bool,
    /// From gateway endpoint `gateway - 1` of [`Snapshot::gateways`] (M31);
    /// 0: not a gateway rule's packet.
    gateway: u16,
    /// A gateway rule's packet travels against its symmetric key's order
    /// (for an ICMP error: the packet it quotes did); the direction the
    /// appliance receives it in (M53).
    reversed: bool,
}

impl Pending {
    /// The facts of a fast-path packet ([`parse_v4_flow`], [`parse_v6_flow`]):
    /// unfragmented TCP or UDP, never an ICMP error.
    #[inline(always)]
    fn fast(
        tcp_flags: Flags,
        (proto, class): (u8, ProtoClass),
        (child, svc): (usize, usize),
        hash: u64,
        inner: Inner,
    ) -> Pending {
        Pending {
            tcp_flags,
            child,
            svc,
            proto,
            fragment: false,
            is_icmp_error: false,
            hash,
            class,
            inner,
            tunnelled: false,
            gateway: 0,
            reversed: false,
        }
    }

    const BLANK: Pending = Pending {
        tcp_flags: Flags(0),
        child: 0,
        svc: 0,
        proto: 0,
        fragment: false,
        is_icmp_error: false,
        hash: 0,
        class: ProtoClass::Other,
        inner: Inner {
            l2_len: 0,
            v6: false,
            ds: 0,
            ip_len: 0,
        },
        tunnelled: false,
        gateway: 0,
        reversed: false,
    };
}

/// [`InnerIp`], compact (it travels between the passes).
#[derive(Clone, Copy)]
struct Inner {
    l2_len: u8,
    v6: bool,
    ds: u8,
    ip_len: u32,
}

impl Inner {
    #[allow(
        clippy::cast_possible_truncation,
        reason = "an L2 header is at most 22 bytes, an IP packet under 64 KiB"
    )]
    fn of(info: &PacketInfo, frame: &[u8]) -> Inner {
        let i = InnerIp::from_parsed(info, frame);
        Inner {
            l2_len: i.l2_len as u8,
            v6: i.v6,
            ds: i.ds,
            ip_len: i.ip_len as u32,
        }
    }

    fn ip(self) -> InnerIp {
        InnerIp {
            l2_len: usize::from(self.l2_len),
            ip_len: self.ip_len as usize,
            v6: self.v6,
            ds: self.ds,
        }
    }
}

/// What a group of packets is processed against: the snapshot loaded for
/// the burst, the shared flow table and the coarse tick.
#[derive(Clone, Copy)]
struct Ctx<'a> {
    snap: &'a Snapshot,
    flows: &'a FlowTable,
    now: Tick,
}

/// The per-packet pipeline of one worker thread (the thread's loop is
/// [`crate::WorkerLoop`]): its private state — counters, the generator of
/// flow cookies, per-tick budgets, scratch — and the passes packets go
/// through.
#[derive(Debug)]
pub struct Pipeline {
    /// What this worker did.
    pub counters: WorkerCounters,
    rng: u64,
    /// Port the packets being processed arrived on (index into
    /// `Local::port_macs`), for the source MAC of replies.
    rx_port: usize,
    /// That port's MAC as the high 48 bits of a little-endian word (shifted
    /// as `classify`'s compare shifts a frame's first 8 bytes): what the
    /// destination MAC of a frame it received must be (M55). Set from the
    /// snapshot for each group ([`Pipeline::load_port_mac`]).
    rx_mac: u64,
    /// The IPv4 header checksum's test, read from here as memory operands
    /// ([`wire::ipv4::ChecksumTest`]).
    checksum_test: wire::ipv4::ChecksumTest,
    /// The passes' working arrays, allocated once: on the stack they were
    /// cleared for every group (some 4 KB per burst).
    scratch: Option<Box<Scratch>>,
    /// The rule of the group's last fast-path packet. Cleared (and its
    /// counts added to its child rule's) at the end of every group.
    last_rule: Option<RuleRun>,
    /// New flow entries this worker may still create in a tick (M15): for
    /// flows opened by a SYN (`[1]`), and for all others (`[0]`).
    new_flows: [budget::TickBudget; 2],
    /// ICMP too-big errors it may still send in a tick (M48).
    too_big: budget::TickBudget,
    /// ICMP echo replies it may still send in a tick.
    echoes: budget::TickBudget,
    /// Where ARP/NDP sightings go (M47); none in replays and tests that
    /// do not resolve.
    neighbours: Option<Arc<NeighbourQueues>>,
    /// Where new flow entries go for flow-state sync (M36); none without
    /// `[flow_sync]`.
    sync: Option<Arc<SyncQueue>>,
    /// Per backend slot (appliances): the returns it may still refuse in a
    /// tick, against [`Snapshot::gateway_mismatch_budget`] (M53). Grown
    /// with the snapshot, between bursts.
    return_budget: Vec<budget::TickBudget>,
    /// Packets of the current burst to fragment (M48), by
    /// [`Verdict::Fragment`] index: capacity reserved once, never grown.
    frag_jobs: Vec<fragment::FragJob>,
    /// Where this worker's decisions are traced while a trace is armed
    /// (`spillway trace`); none in replays and tests that do not trace.
    tracer: Option<Arc<crate::trace::Tracer>>,
    /// This worker's queue of the tracer.
    worker_index: u16,
    /// What a traced burst works with (allocated with the tracer).
    trace_scratch: Option<Box<trace::TraceScratch>>,
}

/// The rule that IPv4 fast-path packets to one destination, protocol and
/// port select, with what their flow keys need from its service, and the
/// packets and bytes it took since it was selected (added to its child
/// rule's counters when the run ends: one update per group, not per packet).
#[derive(Debug, Clone, Copy)]
struct RuleRun {
    dest: (u32, u8, u16),
    child: usize,
    svc: usize,
    /// The service's affinity, as it shapes the flow key.
    key_word: LastWord,
    /// The service's [`ServicePlan::flow_tag`].
    flow_tag: u16,
    class: ProtoClass,
    packets: u64,
    bytes: u64,
}

/// What [`Pipeline::process_group`]'s passes hand each other. Entries are
/// written before they are read within a group, never read from an earlier
/// group.
struct Scratch {
    stages: [Stage; GROUP],
    /// Per lookup (not per packet): key, facts, the flow table's staged
    /// lookup.
    pending: [Pending; GROUP],
    keys: [flowtable::FlowKey; GROUP],
    lookups: [Lookup; GROUP],
}

impl Scratch {
    fn new() -> Box<Scratch> {
        Box::new(Scratch {
            stages: [Stage::Done(Outcome::ToHost); GROUP],
            pending: [Pending::BLANK; GROUP],
            keys: [flowtable::FlowKey([0; 5]); GROUP],
            lookups: [Lookup::NONE; GROUP],
        })
    }
}

impl std::fmt::Debug for Scratch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Scratch")
    }
}

impl Pipeline {
    /// A worker whose flow cookies come from `seed` (distinct per worker;
    /// fixed for deterministic replays).
    pub fn new(seed: u64, children: usize) -> Pipeline {
        Pipeline {
            counters: WorkerCounters::new(children),
            rng: seed | 1,
            rx_port: usize::MAX,
            rx_mac: 0,
            checksum_test: wire::ipv4::ChecksumTest::NEW,
            scratch: Some(Scratch::new()),
            last_rule: None,
            new_flows: Default::default(),
            too_big: budget::TickBudget::default(),
            echoes: budget::TickBudget::default(),
            neighbours: None,
            sync: None,
            return_budget: Vec::new(),
            frag_jobs: Vec::with_capacity(fragment::FRAG_JOBS),
            tracer: None,
            worker_index: 0,
            trace_scratch: None,
        }
    }

    /// Makes room for `snap`'s backend slots: once per burst, allocating
    /// only when a snapshot has more slots than any before.
    #[inline]
    fn fit(&mut self, snap: &Snapshot) {
        if self.return_budget.len() < snap.backends.len() {
            self.return_budget
                .resize(snap.backends.len(), budget::TickBudget::default());
        }
    }

    /// New flow entries this worker creates are queued to `q` for
    /// flow-state sync (M36).
    pub fn set_sync_queue(&mut self, q: Arc<SyncQueue>) {
        self.sync = Some(q);
    }

    /// ARP/NDP frames this worker receives are reported to `q` (M47).
    pub fn set_neighbour_queues(&mut self, q: Arc<NeighbourQueues>) {
        self.neighbours = Some(q);
    }

    /// Reports what an ARP/NDP `frame` says about a neighbour (M47). Out
    /// of line: the fast path's code stays as it was.
    #[cold]
    #[inline(never)]
    fn sighting(&mut self, frame: &[u8]) {
        if let Some(q) = &self.neighbours {
            q.observe(self.rx_port, frame, &mut self.counters);
        }
    }

    /// The packets processed next arrived on port `port` (in `[[ports]]`
    /// order); replies to them carry that port's MAC.
    pub fn set_rx_port(&mut self, port: usize) {
        self.rx_port = port;
    }

    /// Source MAC of a reply to the packet being processed: its port's MAC.
    fn reply_mac(&self, snap: &Snapshot) -> MacAddr {
        snap.local
            .port_macs
            .get(self.rx_port)
            .copied()
            .unwrap_or(snap.local.mac)
    }

    /// Reads the receiving port's MAC ([`Pipeline::reply_mac`]) from `snap`
    /// for the frames processed next (once a group, not per packet).
    fn load_port_mac(&mut self, snap: &Snapshot) {
        let [a, b, c, d, e, f] = self.reply_mac(snap);
        self.rx_mac = u64::from_le_bytes([0, 0, a, b, c, d, e, f]);
    }

    /// Whether the source of a packet about to make a flow entry (or be
    /// forwarded without one) is acceptable: no martian (M55:
    /// [`wire::ip::is_martian_v4`], [`wire::ip::is_martian_v6`]), none of
    /// this node's VIPs or own addresses, and a client its rule's
    /// `source_ranges` admit (M6). Otherwise the reason it is dropped for,
    /// counted on its child rule. The fast path makes the checks here, once
    /// a flow, not per packet: a packet from such a source never finds an
    /// entry, since none is made for it (a gateway flow's entry is found
    /// from both ends: `classify` checks its packets' sources each time; an
    /// ICMP error's client, the packet it quotes, was asked in `classify`).
    fn source_ok<B: PacketBuf>(
        &mut self,
        snap: &Snapshot,
        pkt: &B,
        p: &Pending,
    ) -> Result<(), DropReason> {
        let (data, l3) = (pkt.data(), usize::from(p.inner.l2_len));
        let src = if p.inner.v6 {
            data.get(l3 + 8..l3 + 24)
                .and_then(|a| <[u8; 16]>::try_from(a).ok())
                .map(std::net::IpAddr::from)
        } else {
            data.get(l3 + 12..l3 + 16)
                .and_then(|a| <[u8; 4]>::try_from(a).ok())
                .map(std::net::IpAddr::from)
        };
        let Some(src) = src else {
            return Ok(());
        };
        let reason = if classify::martian(snap, src) {
            DropReason::MartianSource
        } else if !p.is_icmp_error && !snap.rules.admits(p.child, src) {
            DropReason::SourceNotAllowed
        } else {
            return Ok(());
        };
        self.child_drop(p.child, reason);
        Err(reason)
    }

    /// [`Pipeline::finish`] of a packet whose source [`Pipeline::source_ok`]
    /// has checked if it has no flow entry (`hit`). Out of line, as
    /// `finish` is: the passes' loop stays as it was.
    #[inline(never)]
    fn finish_checked<B: PacketBuf>(
        &mut self,
        cx: Ctx<'_>,
        pkt: &mut B,
        p: &Pending,
        key: &flowtable::FlowKey,
        hit: Option<flowtable::Hit>,
    ) -> (Outcome, bool) {
        if hit.is_none()
            && let Err(reason) = self.source_ok(cx.snap, pkt, p)
        {
            return (Outcome::Drop(reason), false);
        }
        self.finish(cx, pkt, p, key, hit)
    }

    /// Processes one packet in place: the reference behaviour, which
    /// [`Pipeline::process_burst`] reproduces exactly, faster.
    pub fn process<B: PacketBuf>(
        &mut self,
        snap: &Snapshot,
        flows: &FlowTable,
        now: Tick,
        pkt: &mut B,
    ) -> Verdict {
        self.end_rule_run();
        self.fit(snap);
        self.frag_jobs.clear();
        self.load_port_mac(snap);
        let mut key = flowtable::FlowKey([0; 5]);
        let mut p = Pending::BLANK;
        let cx = Ctx { snap, flows, now };
        let outcome = match self.classify(cx, pkt, &mut key, &mut p) {
            Stage::Done(o) => o,
            Stage::Lookup => {
                let hit = flows.lookup(&key, flows.hash(&key));
                self.finish_checked(cx, pkt, &p, &key, hit).0
            }
        };
        self.count(outcome)
    }

    /// Processes a burst in place; `verdicts[i]` says what to do with `pkts[i]`.
    ///
    /// In three passes over groups of [`GROUP`] packets, so that the flow
    /// table's cache misses overlap instead of stalling one packet at a time:
    /// classify every packet (parse, rule, flow key and hash; its primary
    /// bucket is prefetched), screen all buckets at once (the candidate slot
    /// lines are prefetched), then finish each packet in order, comparing its
    /// key first. A packet whose flow an earlier packet of
    /// the same group changed (a new entry, a removed one) is looked up again,
    /// so the outcome is the one packet-at-a-time processing gives.
    pub fn process_burst<B: PacketBuf>(
        &mut self,
        snap: &Snapshot,
        flows: &FlowTable,
        now: Tick,
        pkts: &mut [B],
        verdicts: &mut [Verdict],
    ) {
        let n = pkts.len().min(verdicts.len());
        self.fit(snap);
        // The previous burst's fragmentation jobs were done (or dropped).
        self.frag_jobs.clear();
        let mut start = 0;
        while start < n {
            let end = (start + GROUP).min(n);
            self.process_group(
                snap,
                flows,
                now,
                &mut pkts[start..end],
                &mut verdicts[start..end],
            );
            start = end;
        }
    }

    fn process_group<B: PacketBuf>(
        &mut self,
        snap: &Snapshot,
        flows: &FlowTable,
        now: Tick,
        pkts: &mut [B],
        verdicts: &mut [Verdict],
    ) {
        // Taken out for the group (and put back) so that `self` stays free
        // for the passes; a worker is never re-entered.
        let cx = Ctx { snap, flows, now };
        let mut sc = self.scratch.take().unwrap_or_else(Scratch::new);
        self.end_rule_run();
        self.load_port_mac(snap);
        let Scratch {
            stages,
            pending,
            keys,
            lookups,
        } = &mut *sc;
        // Keys and facts are written in place by `classify` (no copies of
        // them between passes: copying freshly written keys stalls store
        // forwarding). The flow table's lookups run in stages spread over
        // the passes, so that each cache miss has the rest of a pass to
        // arrive in: the primary header is fetched as soon as the hash is
        // known, the slot lines in between, the keys compared when the
        // packet is finished.
        let mut n = 0;
        for (pkt, stage) in pkts.iter_mut().zip(stages.iter_mut()) {
            let (Some(key), Some(pend), Some(lk)) =
                (keys.get_mut(n), pending.get_mut(n), lookups.get_mut(n))
            else {
                break;
            };
            *stage = self.classify(cx, pkt, key, pend);
            if let Stage::Lookup = stage {
                *lk = flows.begin(flows.hash(key));
                n += 1;
            }
        }
        flows.screen(&mut lookups[..n]);
        // Bit (hash % 64) set: an earlier packet of this group changed an
        // entry with that hash; later packets with it look up afresh (the
        // screening may have missed that entry).
        let mut changed = 0u64;
        let mut looked = keys[..n].iter().zip(&lookups[..n]).zip(&pending[..n]);
        for ((pkt, v), stage) in pkts.iter_mut().zip(verdicts.iter_mut()).zip(stages.iter()) {
            let outcome = match *stage {
                Stage::Done(o) => o,
                Stage::Lookup => {
                    let Some(((key, lk), p)) = looked.next() else {
                        break;
                    };
                    let bit = 1u64 << (p.hash & 63);
                    let hit = if changed & bit != 0 {
                        flows.lookup(key, flows.hash(key))
                    } else {
                        flows.complete(lk, key)
                    };
                    let fast = match &hit {
                        Some(h) => self.finish_established(cx, pkt, p, h),
                        None => None,
                    };
                    match fast {
                        Some(o) => o,
                        None => {
                            let (o, wrote) = self.finish_checked(cx, pkt, p, key, hit);
                            if wrote {
                                changed |= bit;
                            }
                            o
                        }
                    }
                }
            };
            *v = self.count(outcome);
        }
        self.scratch = Some(sc);
        self.end_rule_run();
    }
}
