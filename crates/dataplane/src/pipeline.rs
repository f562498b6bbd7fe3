//! The per-packet decisions: classify, select a rule (SPEC M3), follow or
//! create a flow (M10, M11, M15), pick a backend by Maglev (M12), deliver
//! (M8), and count everything by outcome.
//!
//! Besides forwarding, the pipeline answers a few packets itself by rewriting
//! them in place into a reply to their sender (SPEC §1, M14): ARP requests and
//! IPv6 neighbor solicitations for a VIP or one of the balancer's own
//! addresses, and — for services with `no_backend_action = "reset"` — TCP
//! segments that match a rule whose service has no eligible backend. Other
//! neighbor-discovery and multicast-listener messages belong to the host's
//! kernel and go to the exception path whatever their address.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use config::compiled::ZoneId;
use config::schema::{ConnectionPersistence, NoBackendAction};
use flowtable::{EntryFlags, FlowTable, Hit, InsertOutcome, Lookup, NewEntry, ProtoClass, Tick};
use wire::arp::{self, ArpRepr};
use wire::buf::PacketBuf;
use wire::encap::InnerIp;
use wire::ethernet::{self, EthernetRepr, MacAddr};
use wire::flow::{FlowKey, LastWord};
use wire::icmpv6::msg;
use wire::ip::{is_mapped_v4, proto as ipproto, unmap};
use wire::packet::{
    Frame, IcmpInfo, IpVersion, PacketInfo, V4Flow, V6Flow, parse_frame, parse_v4_flow,
    parse_v6_flow,
};
use wire::tcp::Flags;
use wire::{ReplyError, ndp, reply};

use crate::counters::{DropReason, WorkerCounters};
use crate::delivery;
use crate::snapshot::{BackendState, ServicePlan, Snapshot, tick_reached};

use wire::ip::proto::{TCP, UDP};

/// What to do with a processed packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Rewritten or encapsulated for a backend: transmit it.
    Forward,
    /// Turned into a reply to its sender (ARP reply, neighbor advertisement,
    /// TCP reset): transmit it.
    Reply,
    /// Not for the data plane: hand it to the host (exception path).
    ToHost,
    /// Dropped (and counted) for this reason.
    Drop(DropReason),
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
}

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
    /// The client's zone, when the service has zonal affinity (M27).
    client_zone: Option<ZoneId>,
    /// The packet as parsed, for encapsulation.
    inner: Inner,
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
        client_zone: Option<ZoneId>,
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
            client_zone,
            inner,
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
        client_zone: None,
        inner: Inner {
            l2_len: 0,
            v6: false,
            ds: 0,
            ip_len: 0,
        },
    };
}

/// Hashes a packed flow key, adds the service to it and stores it in
/// `key_out`; returns the hash (that of the key without the service, as
/// `wire::flow::FlowKey::hash64` gives it).
#[inline(always)]
fn store_key(mut words: [u64; 5], flow_tag: u16, key_out: &mut flowtable::FlowKey) -> u64 {
    let hash = wire::flow::hash_words(&words, 0);
    // The service is part of the flow's identity: with 2-tuple affinity a
    // TCP and a UDP rule on one VIP may feed different services. Its stable
    // tag, not its position in the file: reordering services keeps flows.
    words[4] |= u64::from(flow_tag);
    *key_out = flowtable::FlowKey(words);
    hash
}

/// The client's zone, when the service has zonal affinity (M27).
#[inline(always)]
fn client_zone(snap: &Snapshot, plan: &ServicePlan, client: IpAddr) -> Option<ZoneId> {
    if plan.zonal {
        snap.compiled.client_zone(client)
    } else {
        None
    }
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

/// ICMPv6 messages of the link that the host's kernel needs (RFC 4861 router
/// and neighbor discovery and redirects, RFC 2710/3810 multicast listener
/// discovery). They go to the host unless the data plane answers them itself
/// (a neighbor solicitation for a VIP or an own address), never to the
/// "not ours" drop.
const fn is_link_control(msg_type: u8) -> bool {
    matches!(msg_type, 130..=137 | 143)
}

/// One worker's private state: counters and the generator of flow cookies.
#[derive(Debug)]
pub struct Worker {
    /// What this worker did.
    pub counters: WorkerCounters,
    rng: u64,
    /// Port the packets being processed arrived on (index into
    /// `Local::port_macs`), for the source MAC of replies.
    rx_port: usize,
    /// The passes' working arrays, allocated once: on the stack they were
    /// cleared for every group (some 4 KB per burst).
    scratch: Option<Box<Scratch>>,
    /// The rule of the group's last fast-path packet. Cleared (and its
    /// counts added to its child rule's) at the end of every group.
    last_rule: Option<RuleRun>,
    /// The tick `budget_left` belongs to.
    budget_tick: Option<Tick>,
    /// New flow entries this worker may still create in `budget_tick`
    /// (SPEC M15): for flows opened by a SYN, and for all others.
    budget_left: [u32; 2],
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
    zonal: bool,
    class: ProtoClass,
    packets: u64,
    bytes: u64,
}

/// What [`Worker::process_group`]'s passes hand each other. Entries are
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

impl Worker {
    /// A worker whose flow cookies come from `seed` (distinct per worker;
    /// fixed for deterministic replays).
    pub fn new(seed: u64, children: usize) -> Worker {
        Worker {
            counters: WorkerCounters::new(children),
            rng: seed | 1,
            rx_port: usize::MAX,
            scratch: Some(Scratch::new()),
            last_rule: None,
            budget_tick: None,
            budget_left: [0; 2],
        }
    }

    /// The packets processed next arrived on port `port` (in `[[ports]]`
    /// order); replies to them carry that port's MAC.
    pub fn set_rx_port(&mut self, port: usize) {
        self.rx_port = port;
    }

    /// Source MAC of a reply to the packet being processed.
    fn reply_mac(&self, snap: &Snapshot) -> MacAddr {
        snap.local
            .port_macs
            .get(self.rx_port)
            .copied()
            .unwrap_or(snap.local.mac)
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
        let mut sc = self.scratch.take().unwrap_or_else(Scratch::new);
        self.end_rule_run();
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
            *stage = self.classify(snap, pkt, key, pend);
            if let Stage::Lookup = stage {
                *lk = flows.begin(pend.hash);
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
                        flows.lookup(key, p.hash)
                    } else {
                        flows.complete(lk, key)
                    };
                    let fast = match &hit {
                        Some(h) => self.finish_established(snap, flows, now, pkt, p, h),
                        None => None,
                    };
                    match fast {
                        Some(o) => o,
                        None => {
                            let (o, wrote) = self.finish(snap, flows, now, pkt, p, key, hit);
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

    /// Ends the current [`RuleRun`], adding its counts to its child rule.
    fn end_rule_run(&mut self) {
        if let Some(run) = self.last_rule.take()
            && let Some(c) = self.counters.children.get_mut(run.child)
        {
            c.packets += run.packets;
            c.bytes += run.bytes;
        }
    }

    /// Processes one packet in place.
    pub fn process<B: PacketBuf>(
        &mut self,
        snap: &Snapshot,
        flows: &FlowTable,
        now: Tick,
        pkt: &mut B,
    ) -> Verdict {
        self.end_rule_run();
        let mut key = flowtable::FlowKey([0; 5]);
        let mut p = Pending::BLANK;
        let outcome = match self.classify(snap, pkt, &mut key, &mut p) {
            Stage::Done(o) => o,
            Stage::Lookup => {
                let hit = flows.lookup(&key, p.hash);
                self.finish(snap, flows, now, pkt, &p, &key, hit).0
            }
        };
        self.count(outcome)
    }

    /// Everything up to the flow table: parse, answer what is answered in
    /// place, select the rule, compute the flow key.
    fn classify<B: PacketBuf>(
        &mut self,
        snap: &Snapshot,
        pkt: &mut B,
        key: &mut flowtable::FlowKey,
        pend: &mut Pending,
    ) -> Stage {
        self.counters.rx_packets += 1;
        self.counters.rx_bytes += pkt.len() as u64;
        if let Some(f) = parse_v4_flow(pkt.data()) {
            return self.v4_flow(snap, pkt.len(), &f, key, pend);
        }
        if let Some(f) = parse_v6_flow(pkt.data()) {
            return self.v6_flow(snap, pkt.len(), &f, key, pend);
        }
        Stage::Done(match parse_frame(pkt.data()) {
            Err(_) => Outcome::Drop(DropReason::Malformed),
            Ok(Frame::Arp(eth, req)) => self.arp(snap, pkt, &eth, &req),
            Ok(Frame::Other(_)) => Outcome::ToHost,
            Ok(Frame::Ip(_, info)) => match info.icmp {
                Some(icmp)
                    if info.version == IpVersion::V6
                        && info.proto == ipproto::ICMPV6
                        && is_link_control(icmp.msg_type) =>
                {
                    self.link_control(snap, pkt, &info, icmp.msg_type)
                }
                _ => return self.ip(snap, pkt, &info, key, pend),
            },
        })
    }

    /// Counts an outcome once, under its own counter.
    #[inline(always)]
    fn count(&mut self, outcome: Outcome) -> Verdict {
        // The usual outcome alone, the others out of line (as arms of one
        // match they were a jump through a table for every packet).
        if let Outcome::Forward = outcome {
            self.counters.forwarded += 1;
            return Verdict::Forward;
        }
        self.count_other(outcome)
    }

    #[cold]
    #[inline(never)]
    fn count_other(&mut self, outcome: Outcome) -> Verdict {
        let c = &mut self.counters;
        match outcome {
            Outcome::Forward => {
                c.forwarded += 1;
                Verdict::Forward
            }
            Outcome::ToHost => {
                c.to_host += 1;
                Verdict::ToHost
            }
            Outcome::Drop(r) => {
                c.drops[r as usize] += 1;
                Verdict::Drop(r)
            }
            Outcome::ArpReply => {
                c.arp_replies += 1;
                Verdict::Reply
            }
            Outcome::NeighborAdvert => {
                c.nd_replies += 1;
                Verdict::Reply
            }
            Outcome::Reset => {
                c.no_backend_resets += 1;
                Verdict::Reply
            }
        }
    }

    /// Answers ARP requests for VIPs and the balancer's own addresses.
    fn arp<B: PacketBuf>(
        &mut self,
        snap: &Snapshot,
        pkt: &mut B,
        eth: &EthernetRepr,
        req: &ArpRepr,
    ) -> Outcome {
        let target = IpAddr::V4(req.tpa);
        if req.oper != arp::op::REQUEST || !answers_for(snap, target) {
            return Outcome::ToHost;
        }
        let reply = ArpRepr {
            oper: arp::op::REPLY,
            sha: self.reply_mac(snap),
            spa: req.tpa,
            tha: req.sha,
            tpa: req.spa,
        };
        let data = pkt.data_mut();
        let Ok(mut frame) = ethernet::Frame::new_checked(&mut *data) else {
            return Outcome::Drop(DropReason::Malformed);
        };
        frame.set_dst(req.sha);
        frame.set_src(self.reply_mac(snap));
        let Some(body) = data.get_mut(eth.header_len()..) else {
            return Outcome::Drop(DropReason::Malformed);
        };
        match arp::Packet::new_checked(body).and_then(|mut p| reply.emit(&mut p)) {
            Ok(()) => Outcome::ArpReply,
            Err(_) => Outcome::Drop(DropReason::Malformed),
        }
    }

    /// Neighbor discovery and multicast listener discovery (see
    /// [`is_link_control`]): answers valid neighbor solicitations for VIPs and
    /// the balancer's own addresses in place (RFC 4861 §7.2.4), drops invalid
    /// ones (§7.1.1; fragmented ones, RFC 6980) as malformed, and hands
    /// everything else to the host.
    fn link_control<B: PacketBuf>(
        &mut self,
        snap: &Snapshot,
        pkt: &mut B,
        info: &PacketInfo,
        msg_type: u8,
    ) -> Outcome {
        // RFC 6980: neighbor discovery never uses fragmentation, atomic
        // fragments included.
        if info.fragment.has_fragment_header() {
            return Outcome::Drop(DropReason::Malformed);
        }
        if msg_type != msg::NEIGHBOR_SOLICIT {
            return Outcome::ToHost;
        }
        let Ok(sol) = ndp::parse_solicitation(pkt.data()) else {
            return Outcome::Drop(DropReason::Malformed);
        };
        if !answers_for(snap, IpAddr::V6(sol.ns.target)) {
            return Outcome::ToHost;
        }
        match ndp::answer_solicitation(pkt, &sol, self.reply_mac(snap)) {
            Ok(()) => Outcome::NeighborAdvert,
            // The answer may be 8 bytes longer than the solicitation: only a
            // buffer without headroom fails here.
            Err(_) => Outcome::Drop(DropReason::EncapFailed),
        }
    }

    /// Rule selection and flow key of an IP packet (not link control).
    fn ip<B: PacketBuf>(
        &mut self,
        snap: &Snapshot,
        pkt: &mut B,
        info: &PacketInfo,
        key_out: &mut flowtable::FlowKey,
        pend: &mut Pending,
    ) -> Stage {
        let dst = match info.version {
            IpVersion::V4 => unmap(&info.dst),
            IpVersion::V6 => {
                // IPv4-mapped addresses (::ffff:a.b.c.d) never appear on the
                // wire (RFC 4291 §2.5.5.2): as a destination such a packet
                // must not reach the IPv4 VIP a.b.c.d, as a source it would
                // share flow keys with IPv4 clients.
                if is_mapped_v4(&info.dst) || is_mapped_v4(&info.src) {
                    return Stage::Done(Outcome::Drop(DropReason::BadAddress));
                }
                IpAddr::V6(Ipv6Addr::from(info.dst))
            }
        };
        // An ICMP error to a VIP is routed by the packet it quotes (which the
        // backend sent from the VIP), so PMTU discovery reaches the flow's
        // backend (SPEC M13). A real fragment can never prove its ports: it
        // takes only an all-port rule (M13, `RuleIndex::lookup_fragment`),
        // and all fragments of a datagram take one path.
        let (proto, port, fragment, is_icmp_error) = match &info.icmp {
            Some(IcmpInfo {
                quoted: Some(q), ..
            }) => {
                if unmap(&q.src) != dst {
                    return Stage::Done(Outcome::Drop(DropReason::IcmpMismatch));
                }
                // A quoted first fragment (a large reply) still shows its
                // ports: it belongs to that 5-tuple flow, not to the 3-tuple
                // path of fragments (same rule as `FlowKey::from_quoted`).
                (
                    q.proto,
                    q.ports.map(|(s, _)| s),
                    q.fragment && q.ports.is_none(),
                    true,
                )
            }
            _ => (
                info.proto,
                info.ports.map(|(_, d)| d),
                info.fragment.is_fragment(),
                false,
            ),
        };
        let (child, svc, plan) = match self.select(snap, dst, proto, port, fragment, pkt.len()) {
            Ok(x) => x,
            Err(o) => return Stage::Done(o),
        };
        let key = FlowKey::from_packet(info, plan.affinity);
        let hash = store_key(key.pack(), plan.flow_tag, key_out);
        *pend = Pending {
            tcp_flags: info.tcp_flags,
            child,
            svc,
            proto,
            fragment,
            is_icmp_error,
            hash,
            class: class_of(proto),
            client_zone: client_zone(snap, plan, key.src_addr()),
            inner: Inner::of(info, pkt.data()),
        };
        Stage::Lookup
    }

    /// [`Worker::ip`] for a packet of the fast path ([`parse_v4_flow`]):
    /// the same decisions, from the facts in registers.
    #[inline(always)]
    fn v4_flow(
        &mut self,
        snap: &Snapshot,
        len: usize,
        f: &V4Flow,
        key_out: &mut flowtable::FlowKey,
        pend: &mut Pending,
    ) -> Stage {
        // Packets of a burst mostly go to the same service: the previous
        // fast-path packet's rule is reused when its destination, protocol
        // and port are this one's (the snapshot is the same within a group).
        let dest = (f.dst, f.proto, f.dst_port);
        let (child, svc, key_word, flow_tag, zonal, class) = match &mut self.last_rule {
            Some(run) if run.dest == dest => {
                run.packets += 1;
                run.bytes += len as u64;
                (
                    run.child,
                    run.svc,
                    run.key_word,
                    run.flow_tag,
                    run.zonal,
                    run.class,
                )
            }
            _ => {
                let dst = IpAddr::V4(Ipv4Addr::from(f.dst));
                let (child, svc, plan) =
                    match self.select(snap, dst, f.proto, Some(f.dst_port), false, len) {
                        Ok(x) => x,
                        Err(o) => return Stage::Done(o),
                    };
                let run = RuleRun {
                    dest,
                    child,
                    svc,
                    key_word: plan.affinity.last_word(),
                    flow_tag: plan.flow_tag,
                    zonal: plan.zonal,
                    class: class_of(f.proto),
                    packets: 0,
                    bytes: 0,
                };
                self.end_rule_run();
                self.last_rule = Some(run);
                (
                    child,
                    svc,
                    run.key_word,
                    run.flow_tag,
                    plan.zonal,
                    run.class,
                )
            }
        };
        let words =
            FlowKey::pack_v4_with(f.src, f.dst, f.proto, (f.src_port, f.dst_port), key_word);
        let hash = store_key(words, flow_tag, key_out);
        let client_zone = if zonal {
            snap.compiled.client_zone(IpAddr::V4(Ipv4Addr::from(f.src)))
        } else {
            None
        };
        *pend = Pending::fast(
            f.tcp_flags,
            (f.proto, class),
            (child, svc),
            hash,
            client_zone,
            Inner {
                l2_len: ethernet::HEADER_LEN as u8,
                v6: false,
                ds: f.ds,
                ip_len: u32::from(f.total_len),
            },
        );
        Stage::Lookup
    }

    /// [`Worker::ip`] for an IPv6 packet of the fast path
    /// ([`parse_v6_flow`]).
    #[inline(always)]
    fn v6_flow(
        &mut self,
        snap: &Snapshot,
        len: usize,
        f: &V6Flow,
        key_out: &mut flowtable::FlowKey,
        pend: &mut Pending,
    ) -> Stage {
        let dst = IpAddr::V6(Ipv6Addr::from(f.dst));
        let (child, svc, plan) = match self.select(snap, dst, f.proto, Some(f.dst_port), false, len)
        {
            Ok(x) => x,
            Err(o) => return Stage::Done(o),
        };
        let words = FlowKey::pack_v6(
            &f.src,
            &f.dst,
            f.proto,
            (f.src_port, f.dst_port),
            plan.affinity,
        );
        let hash = store_key(words, plan.flow_tag, key_out);
        *pend = Pending::fast(
            f.tcp_flags,
            (f.proto, class_of(f.proto)),
            (child, svc),
            hash,
            client_zone(snap, plan, IpAddr::V6(Ipv6Addr::from(f.src))),
            Inner {
                l2_len: ethernet::HEADER_LEN as u8,
                v6: true,
                ds: f.traffic_class,
                ip_len: 40 + u32::from(f.payload_len),
            },
        );
        Stage::Lookup
    }

    /// Rule selection (SPEC M3) for a packet to `dst`: the child rule's
    /// index (counted), the service's index and plan, or the outcome of a
    /// packet no rule takes.
    #[inline(always)]
    fn select<'s>(
        &mut self,
        snap: &'s Snapshot,
        dst: IpAddr,
        proto: u8,
        port: Option<u16>,
        fragment: bool,
        len: usize,
    ) -> Result<(usize, usize, &'s ServicePlan), Outcome> {
        let index = &snap.compiled.rule_index;
        let rule = if fragment {
            index.lookup_fragment(dst, proto)
        } else {
            index.lookup(dst, proto, port)
        };
        let Some(m) = rule else {
            let vip = index.is_vip(dst);
            return Err(if vip && fragment {
                Outcome::Drop(DropReason::FragmentNoRule)
            } else if vip {
                Outcome::Drop(DropReason::NoRule)
            } else if snap.is_own(dst) {
                Outcome::ToHost
            } else {
                Outcome::Drop(DropReason::NotOurs)
            });
        };
        if m.gateway {
            return Err(Outcome::Drop(DropReason::GatewayUnsupported));
        }
        let svc = m.service.index();
        let Some(plan) = snap.services.get(svc) else {
            return Err(Outcome::Drop(DropReason::NoRule));
        };
        self.count_child(m.child.index(), len);
        Ok((m.child.index(), svc, plan))
    }

    #[inline(always)]
    fn count_child(&mut self, child: usize, len: usize) {
        if let Some(c) = self.counters.children.get_mut(child) {
            c.packets += 1;
            c.bytes += len as u64;
        }
    }

    /// [`Worker::finish`] for the usual packet, kept apart so that the
    /// general path's many live values do not crowd the usual one's
    /// registers: an entry to an active backend that this packet neither
    /// changes (no new TCP flag bits) nor replaces (not a SYN reopening a
    /// closed tuple), delivered through the backend's precomputed outer
    /// headers. `None`, having done nothing, when the packet needs
    /// [`Worker::finish`].
    #[inline(always)]
    fn finish_established<B: PacketBuf>(
        &mut self,
        snap: &Snapshot,
        flows: &FlowTable,
        now: Tick,
        pkt: &mut B,
        p: &Pending,
        hit: &Hit,
    ) -> Option<Outcome> {
        let slot = hit.entry.backend as usize;
        let be = snap.backends.get(slot)?;
        let Some(t) = &be.encap else {
            return None;
        };
        if !matches!(be.state, BackendState::Active)
            || be.service as usize != p.svc
            || p.svc >= snap.services.len()
            || hit.entry.flags.contains(EntryFlags::UNCONFIRMED)
            || !be.holds_entry_of(hit.entry.generation)
        {
            return None;
        }
        if p.class == ProtoClass::Tcp && !p.is_icmp_error {
            let set = tcp_flag_bits(p.tcp_flags);
            let (syn_only, was_closed) = (bare_syn(p.tcp_flags), closed(hit.entry.flags));
            if set & !hit.entry.flags.bits() != 0 || syn_only && was_closed {
                return None;
            }
        }
        self.counters.flow_hits += 1;
        if hit.entry.last_seen != now {
            flows.touch(hit.slot, now);
        }
        let sent = wire::encap::encapsulate_with(pkt, t, &p.inner.ip(), p.hash, hit.entry.cookie)
            .map(|_| ())
            .map_err(|_| DropReason::EncapFailed);
        Some(self.delivered(sent, slot, p.child))
    }

    /// Counts a delivery to backend `slot` for child rule `child`: the
    /// backend's packets, or the rule's drops.
    #[inline(always)]
    fn delivered(&mut self, sent: Result<(), DropReason>, slot: usize, child: usize) -> Outcome {
        match sent {
            Ok(()) => {
                if let Some(n) = self.counters.backend_packets.get_mut(slot) {
                    *n += 1;
                }
                Outcome::Forward
            }
            Err(reason) => {
                self.child_drop(child);
                Outcome::Drop(reason)
            }
        }
    }

    /// The flow-table part of an IP packet: follow its entry (`hit`) or
    /// create one, then deliver. Returns the outcome and whether the flow's
    /// entry was inserted or removed.
    #[allow(clippy::too_many_arguments)]
    #[inline(never)]
    fn finish<B: PacketBuf>(
        &mut self,
        snap: &Snapshot,
        flows: &FlowTable,
        now: Tick,
        pkt: &mut B,
        p: &Pending,
        fkey: &flowtable::FlowKey,
        hit: Option<Hit>,
    ) -> (Outcome, bool) {
        let Some(plan) = snap.services.get(p.svc) else {
            return (Outcome::Drop(DropReason::NoRule), false);
        };
        let mut wrote = false;
        // A bare SYN opens a new connection even when an entry exists for its
        // 5-tuple (a reused client port, a closed predecessor, a retried
        // handshake): it may only follow the entry to a backend that still
        // takes new connections, and never revives a closed one.
        let syn_only = p.class == ProtoClass::Tcp && !p.is_icmp_error && bare_syn(p.tcp_flags);
        let chosen = match hit {
            Some(hit)
                if self.keeps(snap, plan, &hit, p.class, now)
                    && (!syn_only
                        || self.takes_new_connection(snap, hit.entry.backend, hit.entry.flags)) =>
            {
                self.counters.flow_hits += 1;
                if hit.entry.last_seen != now {
                    flows.touch(hit.slot, now);
                }
                let set = if p.class == ProtoClass::Tcp && !p.is_icmp_error {
                    tcp_flag_bits(p.tcp_flags)
                } else {
                    0
                };
                let bits = hit.entry.flags.bits();
                // One test for the usual packet: no new flag, confirmed.
                if (set & !bits) | (bits & EntryFlags::UNCONFIRMED) != 0 {
                    // A packet of the flow in a later tick than its entry's
                    // creation confirms the entry (M15): spoofed packets
                    // sent together prove nothing, nor does an ICMP error.
                    let clear = if p.is_icmp_error || hit.entry.created == now {
                        0
                    } else {
                        bits & EntryFlags::UNCONFIRMED
                    };
                    if set & !bits != 0 || clear != 0 {
                        let _ = flows.update_flags(hit.slot, set, clear);
                        wrote = true;
                    }
                }
                Some((hit.entry.backend, hit.entry.cookie))
            }
            stale => {
                // No entry, or one whose backend no longer takes this packet.
                if let Some(hit) = stale {
                    flows.remove(hit.slot);
                    self.counters.flows_rescheduled += 1;
                }
                wrote = !p.is_icmp_error;
                self.new_flow(
                    snap,
                    flows,
                    now,
                    plan,
                    fkey,
                    p.hash,
                    p.class,
                    p.tcp_flags,
                    p.is_icmp_error,
                    p.child,
                    p.client_zone,
                )
            }
        };
        let Some((slot, cookie)) = chosen else {
            // The client's packet reaches no backend either way: its child
            // rule counts a drop, whether or not it is answered.
            self.child_drop(p.child);
            let answerable = p.proto == TCP
                && !p.is_icmp_error
                && !p.fragment
                && !p.tcp_flags.contains(Flags::RST);
            return (
                no_backend(self.reply_mac(snap), plan, pkt, answerable),
                wrote,
            );
        };
        let sent = delivery::deliver(
            &snap.backends,
            &snap.local,
            plan,
            p.svc,
            slot,
            cookie,
            p.hash,
            &p.inner.ip(),
            pkt,
        );
        let outcome = self.delivered(sent, slot as usize, p.child);
        (outcome, wrote)
    }

    fn child_drop(&mut self, child: usize) {
        if let Some(c) = self.counters.children.get_mut(child) {
            c.drops += 1;
        }
    }

    /// Whether a flow entry's backend still takes that flow (SPEC M11).
    #[inline(always)]
    fn keeps(
        &self,
        snap: &Snapshot,
        plan: &ServicePlan,
        hit: &Hit,
        class: ProtoClass,
        now: Tick,
    ) -> bool {
        let Some(be) = snap.backends.get(hit.entry.backend as usize) else {
            return false;
        };
        // The usual case is tested alone, the others out of line: as arms of
        // one match they made a jump through a table for every packet.
        be.holds_entry_of(hit.entry.generation)
            && (matches!(be.state, BackendState::Active)
                || keeps_inactive(be.state, plan, class, now))
    }

    /// Whether a SYN may follow an existing entry: its backend is active and
    /// the previous connection on the tuple was not closed.
    fn takes_new_connection(&self, snap: &Snapshot, slot: u32, flags: EntryFlags) -> bool {
        let active = matches!(
            snap.backends.get(slot as usize).map(|b| b.state),
            Some(BackendState::Active)
        );
        active && !closed(flags)
    }

    /// Picks a backend for a flow without a usable entry and records it.
    /// ICMP errors never create entries. Returns (backend slot, cookie).
    #[allow(clippy::too_many_arguments)]
    fn new_flow(
        &mut self,
        snap: &Snapshot,
        flows: &FlowTable,
        now: Tick,
        plan: &ServicePlan,
        fkey: &flowtable::FlowKey,
        hash: u64,
        class: ProtoClass,
        tcp_flags: Flags,
        is_icmp_error: bool,
        child: usize,
        client_zone: Option<ZoneId>,
    ) -> Option<(u32, u32)> {
        let slot = plan.pick(hash, client_zone)?;
        if is_icmp_error {
            return Some((slot, 0));
        }
        // Every new entry is unconfirmed (displaceable, and short-lived unless
        // opened by a SYN) until the flow shows up again in a later tick
        // (M15), and each worker
        // creates at most its new-entry budget per tick — one budget for
        // flows opened by a bare SYN, one for the rest (a TCP flow first
        // seen mid-stream — after a failover, an ECMP change, or spoofed —,
        // a datagram, a fragment), so that a flood of one kind does not
        // deny entries to real connections of the other. Beyond it, a new
        // flow is forwarded by Maglev alone.
        let syn = class == ProtoClass::Tcp && bare_syn(tcp_flags);
        if self.budget_tick != Some(now) {
            self.budget_tick = Some(now);
            self.budget_left = [snap.new_flow_budget; 2];
        }
        let budget = &mut self.budget_left[usize::from(syn)];
        if *budget == 0 {
            self.counters.over_budget += 1;
            return Some((slot, stateless_cookie(hash, snap.cookie_key)));
        }
        let cookie = self.next_cookie();
        let mut flags = EntryFlags::new(class).with(EntryFlags::UNCONFIRMED);
        if syn {
            // Half-open (its own short timeout) until the handshake's ACK.
            flags = flags.with(
                tcp_flag_bits(tcp_flags) & !EntryFlags::ESTABLISHED | EntryFlags::OPENED_BY_SYN,
            );
        } else if class == ProtoClass::Tcp {
            flags = flags.with(tcp_flag_bits(tcp_flags) | EntryFlags::ESTABLISHED);
        }
        let new = NewEntry {
            backend: slot,
            generation: snap.generation,
            cookie,
            flags,
        };
        match flows.insert(fkey, hash, new, now) {
            InsertOutcome::Inserted { .. } => {
                let left = &mut self.budget_left[usize::from(syn)];
                *left = left.saturating_sub(1);
                self.counters.new_flows += 1;
                if let Some(c) = self.counters.children.get_mut(child) {
                    c.new_flows += 1;
                }
                Some((slot, cookie))
            }
            InsertOutcome::Existing(hit) => {
                self.counters.flow_races += 1;
                Some((hit.entry.backend, hit.entry.cookie))
            }
            InsertOutcome::Full | InsertOutcome::Contended => {
                self.counters.stateless += 1;
                Some((slot, stateless_cookie(hash, snap.cookie_key)))
            }
        }
    }

    /// xorshift64*: cheap, per worker, no syscalls on the packet path.
    fn next_cookie(&mut self) -> u32 {
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32) as u32
    }
}

/// The cookie of a flow forwarded without an entry: the same for every
/// packet of the flow (it is derived from the flow's hash), unpredictable
/// without the snapshot's secret.
fn stateless_cookie(hash: u64, key: u64) -> u32 {
    (maglev::mix64(hash ^ key) >> 32) as u32
}

/// A SYN without ACK: the first segment of a new connection.
#[inline(always)]
fn bare_syn(f: Flags) -> bool {
    f.contains(Flags::SYN) && !f.contains(Flags::ACK)
}

/// Whether an entry's connection was closed (a FIN or RST was seen).
#[inline(always)]
fn closed(flags: EntryFlags) -> bool {
    flags.contains(EntryFlags::FIN) || flags.contains(EntryFlags::RST)
}

/// [`Worker::keeps`] for a backend that is not active.
#[cold]
#[inline(never)]
fn keeps_inactive(state: BackendState, plan: &ServicePlan, class: ProtoClass, now: Tick) -> bool {
    match state {
        BackendState::Active => true,
        // Persistence (M11), bounded by the draining period.
        BackendState::Unhealthy { until } => {
            !tick_reached(now, until)
                && match plan.persistence {
                    ConnectionPersistence::AlwaysPersist => true,
                    ConnectionPersistence::NeverPersist => false,
                    ConnectionPersistence::DefaultForProtocol => class == ProtoClass::Tcp,
                }
        }
        BackendState::Draining { until } => !tick_reached(now, until),
        BackendState::Removed => false,
    }
}

/// Whether the data plane answers ARP / neighbor solicitations for `addr`.
fn answers_for(snap: &Snapshot, addr: IpAddr) -> bool {
    snap.compiled.rule_index.is_vip(addr) || snap.is_own(addr)
}

/// A rule matched but its service has no eligible backend (SPEC M14): drop,
/// or, with `no_backend_action = "reset"`, turn an `answerable` TCP segment
/// (not a reset, an ICMP error or a fragment) into the reset that answers it.
///
/// Counting: an answered segment counts as `no_backend_resets`, an
/// unanswered one as `drops[NoBackend]` (both visible in `spillway stats`,
/// and [`WorkerCounters::no_backend`] sums them), so that every received
/// packet has exactly one outcome; the child rule counts a drop in both cases.
/// A segment the reset cannot be built from (bad checksum, truncated) is
/// malformed.
///
/// [`WorkerCounters::no_backend`]: crate::WorkerCounters::no_backend
fn no_backend<B: PacketBuf>(
    reply_mac: MacAddr,
    plan: &ServicePlan,
    pkt: &mut B,
    answerable: bool,
) -> Outcome {
    if plan.no_backend_action != NoBackendAction::Reset || !answerable {
        return Outcome::Drop(DropReason::NoBackend);
    }
    match reply::tcp_reset(pkt, reply_mac) {
        Ok(()) => Outcome::Reset,
        Err(ReplyError::Parse(_)) => Outcome::Drop(DropReason::Malformed),
        Err(_) => Outcome::Drop(DropReason::NoBackend),
    }
}

/// Flow-entry flag bits implied by a TCP segment's flags.
#[inline(always)]
fn tcp_flag_bits(f: Flags) -> u8 {
    // FIN, SYN, RST and ACK are the low five bits (with PSH): a table of 32
    // instead of three tests per packet.
    TCP_FLAG_BITS[usize::from(f.0 & 0x1f)]
}

/// [`tcp_flag_bits`] of every combination of the five low TCP flag bits.
const TCP_FLAG_BITS: [u8; 32] = {
    let mut t = [0u8; 32];
    let mut i = 0;
    while i < 32 {
        t[i] = flag_bits_of(Flags(i as u16));
        i += 1;
    }
    t
};

/// Flow-entry flag bits implied by a TCP segment's flags: RST and FIN as
/// they are, ESTABLISHED for an ACK without SYN.
const fn flag_bits_of(f: Flags) -> u8 {
    let mut set = 0;
    if f.contains(Flags::RST) {
        set |= EntryFlags::RST;
    }
    if f.contains(Flags::FIN) {
        set |= EntryFlags::FIN;
    }
    if f.contains(Flags::ACK) && !f.contains(Flags::SYN) {
        set |= EntryFlags::ESTABLISHED;
    }
    set
}

/// Flow-table class of an IP protocol.
fn class_of(proto: u8) -> ProtoClass {
    match proto {
        TCP => ProtoClass::Tcp,
        UDP => ProtoClass::Udp,
        _ => ProtoClass::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flag_bits_come_from_fin_rst_and_a_bare_ack_whatever_the_other_bits() {
        for v in 0..0x200u16 {
            let f = Flags(v);
            let mut want = 0;
            if v & 0x004 != 0 {
                want |= EntryFlags::RST;
            }
            if v & 0x001 != 0 {
                want |= EntryFlags::FIN;
            }
            if v & 0x010 != 0 && v & 0x002 == 0 {
                want |= EntryFlags::ESTABLISHED;
            }
            assert_eq!(tcp_flag_bits(f), want, "flags {v:#05x}");
        }
    }
}
