//! The per-packet decisions: classify, select a rule (SPEC M3), follow or
//! create a flow (M10, M11, M15), pick a backend by Maglev (M12), deliver
//! (M8), and count everything by outcome.

use std::net::IpAddr;

use config::compiled::Delivery;
use config::schema::{ConnectionPersistence, RuleMode};
use flowtable::{EntryFlags, FlowTable, InsertOutcome, NewEntry, ProtoClass, Tick};
use wire::arp::{self, ArpRepr};
use wire::buf::PacketBuf;
use wire::encap::{self, Outer, Tunnel, UdpChecksum};
use wire::ethernet::{self, EthernetRepr};
use wire::flow::FlowKey;
use wire::geneve::{GatewayOptions, OptionIds};
use wire::ip::unmap;
use wire::packet::{Frame, IcmpInfo, PacketInfo, parse_frame};
use wire::tcp::Flags;

use crate::counters::{DropReason, WorkerCounters};
use crate::snapshot::{BackendState, ServicePlan, Snapshot, tick_reached};

const TCP: u8 = 6;
const UDP: u8 = 17;

/// What to do with a processed packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Rewritten or encapsulated for a backend: transmit it.
    Forward,
    /// Turned into a reply (ARP) to its sender: transmit it.
    Reply,
    /// Not for the data plane: hand it to the host (exception path).
    ToHost,
    /// Dropped (and counted) for this reason.
    Drop(DropReason),
}

/// One worker's private state: counters and the generator of flow cookies.
#[derive(Debug)]
pub struct Worker {
    /// What this worker did.
    pub counters: WorkerCounters,
    rng: u64,
}

impl Worker {
    /// A worker whose flow cookies come from `seed` (distinct per worker;
    /// fixed for deterministic replays).
    pub fn new(seed: u64, children: usize) -> Worker {
        Worker {
            counters: WorkerCounters::new(children),
            rng: seed | 1,
        }
    }

    /// Processes a burst in place; `verdicts[i]` says what to do with `pkts[i]`.
    pub fn process_burst<B: PacketBuf>(
        &mut self,
        snap: &Snapshot,
        flows: &FlowTable,
        now: Tick,
        pkts: &mut [B],
        verdicts: &mut [Verdict],
    ) {
        for (pkt, v) in pkts.iter_mut().zip(verdicts.iter_mut()) {
            *v = self.process(snap, flows, now, pkt);
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
        self.counters.rx_packets += 1;
        self.counters.rx_bytes += pkt.len() as u64;
        let verdict = match parse_frame(pkt.data()) {
            Err(_) => Verdict::Drop(DropReason::Malformed),
            Ok(Frame::Arp(eth, req)) => self.arp(snap, pkt, &eth, &req),
            Ok(Frame::Other(_)) => Verdict::ToHost,
            Ok(Frame::Ip(_, info)) => self.ip(snap, flows, now, pkt, &info),
        };
        match verdict {
            Verdict::Drop(r) => self.counters.drops[r as usize] += 1,
            Verdict::ToHost => self.counters.to_host += 1,
            Verdict::Reply => self.counters.arp_replies += 1,
            Verdict::Forward => self.counters.forwarded += 1,
        }
        verdict
    }

    /// Answers ARP requests for VIPs and the balancer's own addresses.
    fn arp<B: PacketBuf>(
        &mut self,
        snap: &Snapshot,
        pkt: &mut B,
        eth: &EthernetRepr,
        req: &ArpRepr,
    ) -> Verdict {
        let target = IpAddr::V4(req.tpa);
        if req.oper != arp::op::REQUEST
            || !(snap.compiled.rule_index.is_vip(target) || snap.is_own(target))
        {
            return Verdict::ToHost;
        }
        let reply = ArpRepr {
            oper: arp::op::REPLY,
            sha: snap.local.mac,
            spa: req.tpa,
            tha: req.sha,
            tpa: req.spa,
        };
        let data = pkt.data_mut();
        let Ok(mut frame) = ethernet::Frame::new_checked(&mut *data) else {
            return Verdict::Drop(DropReason::Malformed);
        };
        frame.set_dst(req.sha);
        frame.set_src(snap.local.mac);
        let Some(body) = data.get_mut(eth.header_len()..) else {
            return Verdict::Drop(DropReason::Malformed);
        };
        match arp::Packet::new_checked(body).and_then(|mut p| reply.emit(&mut p)) {
            Ok(()) => Verdict::Reply,
            Err(_) => Verdict::Drop(DropReason::Malformed),
        }
    }

    fn ip<B: PacketBuf>(
        &mut self,
        snap: &Snapshot,
        flows: &FlowTable,
        now: Tick,
        pkt: &mut B,
        info: &PacketInfo,
    ) -> Verdict {
        let dst = unmap(&info.dst);
        // An ICMP error to a VIP is routed by the packet it quotes (which the
        // backend sent from the VIP), so PMTU discovery reaches the flow's
        // backend (SPEC M13). Fragments carry no usable port (M13: all
        // fragments of a datagram take one path).
        let (proto, port, fragment, is_icmp_error) = match &info.icmp {
            Some(IcmpInfo {
                quoted: Some(q), ..
            }) => {
                if unmap(&q.src) != dst {
                    return Verdict::Drop(DropReason::IcmpMismatch);
                }
                (q.proto, q.ports.map(|(s, _)| s), q.fragment, true)
            }
            _ => (
                info.proto,
                info.ports.map(|(_, d)| d),
                info.fragment.is_fragment(),
                false,
            ),
        };
        let index = &snap.compiled.rule_index;
        let rule = if fragment {
            index.lookup_fragment(dst, proto)
        } else {
            index.lookup(dst, proto, port)
        };
        let Some(m) = rule else {
            return if index.is_vip(dst) {
                Verdict::Drop(DropReason::NoRule)
            } else if snap.is_own(dst) {
                Verdict::ToHost
            } else {
                Verdict::Drop(DropReason::NotOurs)
            };
        };
        let Some(rule) = snap.compiled.rules.get(m.rule.index()) else {
            return Verdict::Drop(DropReason::NoRule);
        };
        if rule.mode == RuleMode::Gateway {
            return Verdict::Drop(DropReason::GatewayUnsupported);
        }
        let svc = rule.service.index();
        let Some(plan) = snap.services.get(svc) else {
            return Verdict::Drop(DropReason::NoRule);
        };
        if let Some(child) = self.counters.children.get_mut(m.child.index()) {
            child.packets += 1;
            child.bytes += pkt.len() as u64;
        }

        let key = FlowKey::from_packet(info, plan.affinity);
        let mut words = key.pack();
        // `key.hash64()`, without packing the key a second time.
        let hash = wire::flow::hash_words(&words, 0);
        // The service is part of the flow's identity: with 2-tuple affinity a
        // TCP and a UDP rule on one VIP may feed different services.
        words[4] |= (svc & 0xffff) as u64;
        let fkey = flowtable::FlowKey(words);
        let class = match proto {
            TCP => ProtoClass::Tcp,
            UDP => ProtoClass::Udp,
            _ => ProtoClass::Other,
        };

        // A bare SYN opens a new connection even when an entry exists for its
        // 5-tuple (a reused client port, a closed predecessor, a retried
        // handshake): it may only follow the entry to a backend that still
        // takes new connections, and never revives a closed one.
        let syn_only = class == ProtoClass::Tcp
            && !is_icmp_error
            && info.tcp_flags.contains(Flags::SYN)
            && !info.tcp_flags.contains(Flags::ACK);
        let chosen = match flows.lookup_touch(&fkey, hash, now) {
            Some(hit)
                if self.keeps(snap, plan, hit.entry.backend, class, now)
                    && (!syn_only
                        || self.takes_new_connection(snap, hit.entry.backend, hit.entry.flags)) =>
            {
                self.counters.flow_hits += 1;
                if class == ProtoClass::Tcp && !is_icmp_error {
                    let set = tcp_flag_bits(info.tcp_flags);
                    if set & !hit.entry.flags.bits() != 0 {
                        let _ = flows.update_flags(hit.slot, set, 0);
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
                self.new_flow(
                    snap,
                    flows,
                    now,
                    plan,
                    &fkey,
                    hash,
                    class,
                    info,
                    is_icmp_error,
                    m.child.index(),
                )
            }
        };
        let Some((slot, cookie)) = chosen else {
            self.child_drop(m.child.index());
            return Verdict::Drop(DropReason::NoBackend);
        };
        match deliver(snap, plan, slot, cookie, hash, pkt) {
            Ok(()) => Verdict::Forward,
            Err(reason) => {
                self.child_drop(m.child.index());
                Verdict::Drop(reason)
            }
        }
    }

    fn child_drop(&mut self, child: usize) {
        if let Some(c) = self.counters.children.get_mut(child) {
            c.drops += 1;
        }
    }

    /// Whether a flow entry's backend still takes that flow (SPEC M11).
    fn keeps(
        &self,
        snap: &Snapshot,
        plan: &ServicePlan,
        slot: u32,
        class: ProtoClass,
        now: Tick,
    ) -> bool {
        match snap.backends.get(slot as usize).map(|b| b.state) {
            Some(BackendState::Active) => true,
            Some(BackendState::Unhealthy) => match plan.persistence {
                ConnectionPersistence::AlwaysPersist => true,
                ConnectionPersistence::NeverPersist => false,
                ConnectionPersistence::DefaultForProtocol => class == ProtoClass::Tcp,
            },
            Some(BackendState::Draining { until }) => !tick_reached(now, until),
            Some(BackendState::Removed) | None => false,
        }
    }

    /// Whether a SYN may follow an existing entry: its backend is active and
    /// the previous connection on the tuple was not closed.
    fn takes_new_connection(&self, snap: &Snapshot, slot: u32, flags: EntryFlags) -> bool {
        let active = matches!(
            snap.backends.get(slot as usize).map(|b| b.state),
            Some(BackendState::Active)
        );
        active && !flags.contains(EntryFlags::FIN) && !flags.contains(EntryFlags::RST)
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
        info: &PacketInfo,
        is_icmp_error: bool,
        child: usize,
    ) -> Option<(u32, u32)> {
        let slot = plan.pick(hash)?;
        if is_icmp_error {
            return Some((slot, 0));
        }
        let cookie = self.next_cookie();
        let mut flags = EntryFlags::new(class);
        if class == ProtoClass::Tcp {
            // A flow first seen mid-stream (after a failover or an ECMP change)
            // is established; only a bare SYN opens a half-open entry.
            let set = tcp_flag_bits(info.tcp_flags);
            let syn_only =
                info.tcp_flags.contains(Flags::SYN) && !info.tcp_flags.contains(Flags::ACK);
            flags = flags.with(if syn_only {
                set & !EntryFlags::ESTABLISHED
            } else {
                set | EntryFlags::ESTABLISHED
            });
        }
        let new = NewEntry {
            backend: slot,
            generation: snap.generation,
            cookie,
            flags,
        };
        match flows.insert(fkey, hash, new, now) {
            InsertOutcome::Inserted { .. } => {
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
                Some((slot, cookie))
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

/// Flow-entry flag bits implied by a TCP segment's flags.
fn tcp_flag_bits(f: Flags) -> u8 {
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

/// Sends the packet on its way to backend `slot` per the service's delivery mode.
fn deliver<B: PacketBuf>(
    snap: &Snapshot,
    plan: &ServicePlan,
    slot: u32,
    cookie: u32,
    hash: u64,
    pkt: &mut B,
) -> Result<(), DropReason> {
    let Some(be) = snap.backends.get(slot as usize) else {
        return Err(DropReason::NoBackend);
    };
    let tunnel = match plan.delivery {
        Delivery::L2dsr => {
            return encap::l2dsr_rewrite(pkt.data_mut(), be.mac, snap.local.mac)
                .map_err(|_| DropReason::Malformed);
        }
        Delivery::Ipip => Tunnel::IpIp,
        Delivery::Gre { key } => Tunnel::Gre { key },
        Delivery::Gue { port } => Tunnel::Gue { port },
        Delivery::Geneve {
            port,
            option_class,
            endpoint_id_type,
            flow_cookie_type,
        } => Tunnel::Geneve {
            port,
            vni: 0,
            ids: OptionIds {
                class: option_class,
                endpoint_type: endpoint_id_type,
                cookie_type: flow_cookie_type,
            },
            options: GatewayOptions {
                endpoint_id: None,
                cookie: Some(cookie),
            },
        },
    };
    let src_ip = match be.addr {
        IpAddr::V4(_) => snap.local.tunnel_src_v4.map(IpAddr::V4),
        IpAddr::V6(_) => snap.local.tunnel_src_v6.map(IpAddr::V6),
    }
    .ok_or(DropReason::NoTunnelSource)?;
    let outer = Outer {
        src_mac: snap.local.mac,
        dst_mac: be.mac,
        src_ip,
        dst_ip: be.addr,
        ttl: 64,
        dont_fragment: true,
        flow_hash: hash,
        src_port_min: encap::DEFAULT_SRC_PORTS.0,
        src_port_max: encap::DEFAULT_SRC_PORTS.1,
        udp_checksum: UdpChecksum::Auto,
    };
    encap::encapsulate(pkt, &outer, &tunnel)
        .map(|_| ())
        .map_err(|_| DropReason::EncapFailed)
}
