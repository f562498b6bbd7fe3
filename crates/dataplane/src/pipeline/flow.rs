//! The flow pass: follow a packet's flow entry or create one (M10,
//! M11, M15), pick its backend by Maglev (M12), deliver it (M8).

use config::schema::ConnectionPersistence;
use flowtable::{EntryFlags, Hit, InsertOutcome, NewEntry, ProtoClass, Tick};
use wire::buf::PacketBuf;
use wire::tcp::Flags;

use config::compiled::{Delivery, ZoneId};

use super::answer::no_backend;
use super::{Ctx, Outcome, Pending, Pipeline, TCP};
use crate::counters::DropReason;
use crate::delivery;
use crate::snapshot::{BackendState, ServicePlan, Snapshot, tick_reached};
use crate::sync::NewFlow;

impl Pipeline {
    /// [`Pipeline::finish`] for the usual packet, kept apart so that the
    /// general path's many live values do not crowd the usual one's
    /// registers: an entry to an active backend that this packet neither
    /// changes (no new TCP flag bits) nor replaces (not a SYN reopening a
    /// closed tuple), delivered through the backend's precomputed outer
    /// headers. `None`, having done nothing, when the packet needs
    /// [`Pipeline::finish`].
    #[inline(always)]
    pub(super) fn finish_established<B: PacketBuf>(
        &mut self,
        cx: Ctx<'_>,
        pkt: &mut B,
        p: &Pending,
        hit: &Hit,
    ) -> Option<Outcome> {
        let Ctx { snap, flows, now } = cx;
        let slot = hit.entry.backend as usize;
        let be = snap.backends.get(slot)?;
        let (encap, max_ip_len) = be.encap_for(p.inner.v6);
        let Some(t) = encap else {
            // Not a gateway rule's packet: an `l2dsr` backend's, perhaps.
            if p.gateway == 0 {
                return self.l2dsr_established(cx, pkt, p, hit);
            }
            // An appliance of a gateway rule (its template has the endpoint).
            return self.gateway_established(cx, pkt, p, hit);
        };
        // `admits`, written out: through the helper these tests cost the
        // tunnelled rows of perf/budget.toml (gue, ipip, gre, geneve at
        // 4,096 flows) 9 to 15 instructions a packet. Keep the two equal.
        if !matches!(be.state, BackendState::Active)
            || be.service as usize != p.svc
            || p.svc >= snap.services.len()
            || hit.entry.flags.bits() & (EntryFlags::UNCONFIRMED | crate::sync::LEARNED) != 0
            || !be.holds_entry_of(hit.entry.generation)
            || p.inner.ip_len > max_ip_len
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
        Some(self.delivered(sent, slot, p.child, pkt.len()))
    }

    /// [`Pipeline::finish_established`] to a backend of an `l2dsr` service
    /// ([`crate::snapshot::Backend::l2dsr`]): the same checks, then the
    /// frame's MACs rewritten in place, to the backend's next hop from the
    /// node's, as [`crate::delivery::deliver`] does on the long way (which
    /// an unresolved next hop takes, to be dropped as `no_neighbour`). Out
    /// of line: the tunnelled modes' path stays as it was.
    #[cold]
    #[inline(never)]
    fn l2dsr_established<B: PacketBuf>(
        &mut self,
        cx: Ctx<'_>,
        pkt: &mut B,
        p: &Pending,
        hit: &Hit,
    ) -> Option<Outcome> {
        let Ctx { snap, flows, now } = cx;
        let slot = hit.entry.backend as usize;
        let be = snap.backends.get(slot)?;
        let (_, max_ip_len) = be.encap_for(p.inner.v6);
        let (_, mac) = be.address_for(p.inner.v6);
        if !be.l2dsr || mac == [0; 6] || !admits(snap, be, p, hit, max_ip_len) {
            return None;
        }
        self.counters.flow_hits += 1;
        if hit.entry.last_seen != now {
            flows.touch(hit.slot, now);
        }
        let sent = wire::encap::l2dsr_rewrite(pkt.data_mut(), mac, snap.local.mac)
            .map_err(|_| DropReason::Malformed);
        Some(self.delivered(sent, slot, p.child, pkt.len()))
    }

    /// The flow-table part of an IP packet: follow its entry (`hit`) or
    /// create one, then deliver. Returns the outcome and whether the flow's
    /// entry was inserted or removed.
    #[inline(never)]
    pub(super) fn finish<B: PacketBuf>(
        &mut self,
        cx: Ctx<'_>,
        pkt: &mut B,
        p: &Pending,
        fkey: &flowtable::FlowKey,
        hit: Option<Hit>,
    ) -> (Outcome, bool) {
        let Ctx { snap, flows, now } = cx;
        let Some(plan) = snap.plan_for(p.child, p.svc) else {
            return (Outcome::Drop(DropReason::NoRule), false);
        };
        let mut wrote = false;
        // A bare SYN opens a new connection even when an entry exists for its
        // 5-tuple (a reused client port, a closed predecessor, a retried
        // handshake): it may only follow the entry to a backend that still
        // takes new connections, and never revives a closed one.
        let chosen = match hit {
            Some(hit) if self.follows(snap, plan, &hit, p, now) => {
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
                // One test for the usual packet: no new flag, confirmed,
                // not learned from a peer.
                if (set & !bits) | (bits & (EntryFlags::UNCONFIRMED | crate::sync::LEARNED)) != 0 {
                    // A packet of the flow in a later tick than its entry's
                    // creation confirms the entry (M15): spoofed packets
                    // sent together prove nothing, nor does an ICMP error.
                    // A packet of a learned flow makes it this node's (M36).
                    let clear = if p.is_icmp_error {
                        0
                    } else if hit.entry.created == now {
                        bits & crate::sync::LEARNED
                    } else {
                        bits & (EntryFlags::UNCONFIRMED | crate::sync::LEARNED)
                    };
                    if set & !bits != 0 || clear != 0 {
                        let _ = flows.update_flags(hit.slot, set, clear);
                        wrote = true;
                    }
                }
                if p.gateway != 0 && !p.is_icmp_error {
                    mark_sent(flows, &hit, p);
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
                self.new_flow(cx, plan, fkey, p)
            }
        };
        let Some((slot, mut cookie)) = chosen else {
            // The client's packet reaches no backend either way: its child
            // rule counts a drop, whether or not it is answered.
            self.child_drop(p.child, DropReason::NoBackend);
            return (
                no_backend(self.reply_mac(snap), plan, pkt, answerable(p)),
                wrote,
            );
        };
        if p.tunnelled && snap.backends.get(slot as usize).is_some_and(|be| be.remote) {
            // Tunnelled to us by a peer and bound for another node again:
            // a loop between nodes spilling over to each other (M49).
            self.child_drop(p.child, DropReason::TunnelLoop);
            return (Outcome::Drop(DropReason::TunnelLoop), wrote);
        }
        if let Some(be) = snap.backends.get(slot as usize)
            && let (_, max_ip_len) = be.encap_for(p.inner.v6)
            && p.inner.ip_len > max_ip_len
        {
            return (self.too_big(cx, pkt, p, max_ip_len, (slot, cookie)), wrote);
        }
        // A gateway rule's ICMP error carries a cookie of its own, which
        // binds its addresses and length to the flow it quotes (M53: what
        // the appliance may hand back).
        if p.gateway != 0 && p.is_icmp_error {
            cookie = icmp_error_cookie(snap, p, fkey, pkt.data());
        }
        (self.deliver(snap, plan, p, (slot, cookie), pkt), wrote)
    }

    /// Delivers packet `p` of service `plan` to backend `slot` with flow
    /// cookie `cookie` (M8; a gateway rule's packet with its endpoint's
    /// ID, M30) and counts it: the long way's delivery, [`Pipeline::finish`]'s
    /// and the explanation's ([`super::explain`]).
    pub(super) fn deliver<B: PacketBuf>(
        &mut self,
        snap: &Snapshot,
        plan: &ServicePlan,
        p: &Pending,
        (slot, cookie): (u32, u32),
        pkt: &mut B,
    ) -> Outcome {
        let endpoint_id = match p.gateway {
            0 => None,
            g => snap.gateways.get(usize::from(g) - 1).map(|h| h.id),
        };
        let sent = delivery::deliver(
            snap,
            plan,
            p.svc,
            (slot, cookie),
            endpoint_id,
            p.hash,
            &p.inner.ip(),
            pkt,
        );
        self.delivered(sent, slot as usize, p.child, pkt.len())
    }

    /// Whether packet `p` follows its flow's entry `hit` (else the entry is
    /// stale: removed, and a backend picked anew). Shared by
    /// [`Pipeline::finish`] and the explanation ([`super::explain`]).
    #[inline(always)]
    pub(super) fn follows(
        &self,
        snap: &Snapshot,
        plan: &ServicePlan,
        hit: &Hit,
        p: &Pending,
        now: Tick,
    ) -> bool {
        self.keeps(snap, plan, hit, p.class, now)
            && (!opens_connection(p)
                || self.takes_new_connection(snap, hit.entry.backend, hit.entry.flags))
    }

    /// Whether a flow entry's backend still takes that flow (M11).
    #[inline(always)]
    pub(super) fn keeps(
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
    fn new_flow(
        &mut self,
        cx: Ctx<'_>,
        plan: &ServicePlan,
        fkey: &flowtable::FlowKey,
        p: &Pending,
    ) -> Option<(u32, u32)> {
        let Ctx { snap, flows, now } = cx;
        // A service that measures client zones (M27) picks and counts out
        // of line; every other service's new flows pay this test alone.
        let slot = if plan.measures_zones {
            self.pick_zonal(snap, plan, fkey, p)?
        } else {
            plan.pick(p.hash, None)?
        };
        if p.is_icmp_error {
            // Its cookie, through an appliance, is its own (`finish`).
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
        let syn = p.class == ProtoClass::Tcp && bare_syn(p.tcp_flags);
        let budget = &mut self.new_flows[usize::from(syn)];
        if !budget.available(now, snap.new_flow_budget) {
            self.counters.over_budget += 1;
            return Some((slot, stateless(snap, plan, fkey, p)));
        }
        let cookie = self.next_cookie();
        let mut flags = EntryFlags::new(p.class).with(EntryFlags::UNCONFIRMED);
        if syn {
            // Half-open (its own short timeout) until the handshake's ACK.
            flags = flags.with(
                tcp_flag_bits(p.tcp_flags) & !EntryFlags::ESTABLISHED | EntryFlags::OPENED_BY_SYN,
            );
        } else if p.class == ProtoClass::Tcp {
            flags = flags.with(tcp_flag_bits(p.tcp_flags) | EntryFlags::ESTABLISHED);
        }
        let new = NewEntry {
            backend: slot,
            generation: snap.generation,
            cookie,
            flags,
        };
        match flows.insert(fkey, flows.hash(fkey), new, now) {
            InsertOutcome::Inserted { slot: entry, .. } => {
                if p.gateway != 0 {
                    // Before the packet leaves: its return is accepted only
                    // this way (M53).
                    flows.mark(entry, sent_mark(p.reversed));
                }
                if let Some(q) = &self.sync {
                    let flow = NewFlow {
                        key: *fkey,
                        hash: p.hash,
                        backend: slot,
                        generation: snap.generation,
                        cookie,
                        flags: flags.bits(),
                        created: now,
                    };
                    q.push(flow, &mut self.counters);
                }
                self.new_flows[usize::from(syn)].spend();
                self.counters.new_flows += 1;
                if let Some(c) = self.counters.children.get_mut(p.child) {
                    c.new_flows += 1;
                }
                if let Some(b) = self.counters.backends.get_mut(slot as usize) {
                    b.new_flows += 1;
                }
                Some((slot, cookie))
            }
            InsertOutcome::Existing(hit) => {
                self.counters.flow_races += 1;
                if p.gateway != 0 {
                    mark_sent(flows, &hit, p);
                }
                Some((hit.entry.backend, hit.entry.cookie))
            }
            InsertOutcome::Full | InsertOutcome::Contended => {
                self.counters.stateless += 1;
                Some((slot, stateless(snap, plan, fkey, p)))
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

/// The zone of a new flow's client (M27), for a service that measures
/// client zones ([`ServicePlan::measures_zones`]); `None` otherwise, for a
/// client in no zone, and for a gateway rule's packets (whose symmetric key
/// has no client side). Looked up once per new flow, from its table key,
/// never for a packet that follows an entry.
#[inline]
pub(super) fn client_zone(
    snap: &Snapshot,
    plan: &ServicePlan,
    fkey: &flowtable::FlowKey,
    p: &Pending,
) -> Option<ZoneId> {
    if !plan.measures_zones || p.gateway != 0 {
        return None;
    }
    lookup_client_zone(snap, fkey)
}

/// [`client_zone`]'s lookup.
fn lookup_client_zone(snap: &Snapshot, fkey: &flowtable::FlowKey) -> Option<ZoneId> {
    snap.rules.client_zone(wire::flow::source_of(&fkey.0))
}

impl Pipeline {
    /// [`ServicePlan::pick`] for a new flow of a service that measures
    /// client zones: its client's zone looked up, the flow counted in it
    /// (its demand, M27: whether it then gets an entry or, past the
    /// new-entry budget, is forwarded by Maglev alone; an ICMP error is no
    /// new flow). Out of line: a service without zonal affinity pays only
    /// the test that skips it (perf/budget.toml's `new`).
    #[inline(never)]
    fn pick_zonal(
        &mut self,
        snap: &Snapshot,
        plan: &ServicePlan,
        fkey: &flowtable::FlowKey,
        p: &Pending,
    ) -> Option<u32> {
        let zone = client_zone(snap, plan, fkey, p);
        let slot = plan.pick(p.hash, zone)?;
        if !p.is_icmp_error {
            self.counters.count_zone_flow(p.svc, zone);
        }
        Some(slot)
    }
}

/// The cookie of packet `p`'s flow forwarded without an entry (its table
/// key `fkey`): the same for every packet of the flow and direction, from
/// the keyed PRF of [`crate::cookie`] (M53). Only Geneve carries a cookie;
/// for other deliveries it is not worked out.
fn stateless(snap: &Snapshot, plan: &ServicePlan, fkey: &flowtable::FlowKey, p: &Pending) -> u32 {
    if matches!(plan.delivery, Delivery::Geneve { .. }) {
        snap.cookie_key.flow(&fkey.0, p.reversed)
    } else {
        0
    }
}

/// The cookie of a gateway rule's ICMP error `frame` (M53): its own source,
/// destination and length bound to the flow it quotes (`fkey`, `p`), so
/// that an appliance can return this error and no other.
fn icmp_error_cookie(snap: &Snapshot, p: &Pending, fkey: &flowtable::FlowKey, frame: &[u8]) -> u32 {
    let ip = frame.get(usize::from(p.inner.l2_len)..).unwrap_or_default();
    let v6 = |at: usize| -> Option<[u8; 16]> { ip.get(at..at + 16)?.try_into().ok() };
    let v4 = |at: usize| -> Option<[u8; 16]> {
        Some(wire::ip::mapped_v4(ip.get(at..at + 4)?.try_into().ok()?))
    };
    // Classification parsed these bytes already: never short here.
    let (src, dst) = if p.inner.v6 {
        (v6(8), v6(24))
    } else {
        (v4(12), v4(16))
    };
    snap.cookie_key.icmp_error(
        &fkey.0,
        p.reversed,
        (&src.unwrap_or_default(), &dst.unwrap_or_default()),
        p.inner.ip_len,
    )
}

/// The short paths' admission (`finish_established`, `l2dsr_established`,
/// `gateway_established`): an entry to an active backend of the packet's
/// service, confirmed and this node's, of the backend's generation, a packet
/// that fits once encapsulated (`max_ip_len`, M48) and, for TCP, sets no new
/// flag and does not reopen a closed tuple. Anything else takes
/// [`Pipeline::finish`], which decides exactly as the short paths where both
/// apply.
#[inline(always)]
pub(super) fn admits(
    snap: &Snapshot,
    be: &crate::snapshot::Backend,
    p: &Pending,
    hit: &Hit,
    max_ip_len: u32,
) -> bool {
    let bits = hit.entry.flags.bits();
    if !matches!(be.state, BackendState::Active)
        || be.service as usize != p.svc
        || p.svc >= snap.services.len()
        // Unconfirmed or learned from a peer: the long way updates it.
        || bits & (EntryFlags::UNCONFIRMED | crate::sync::LEARNED) != 0
        || !be.holds_entry_of(hit.entry.generation)
        // Too big once encapsulated (M48): answered on the long way.
        || p.inner.ip_len > max_ip_len
    {
        return false;
    }
    if p.class == ProtoClass::Tcp && !p.is_icmp_error {
        let set = tcp_flag_bits(p.tcp_flags);
        let (syn_only, was_closed) = (bare_syn(p.tcp_flags), closed(hit.entry.flags));
        if set & !bits != 0 || syn_only && was_closed {
            return false;
        }
    }
    true
}

/// The flow-entry mark of packets the balancer sent to an appliance against
/// (`reversed`) or along their key's order (M53): a return the other way
/// than any packet it sent is not the appliance's to send.
#[inline(always)]
pub(super) const fn sent_mark(reversed: bool) -> u32 {
    if reversed { 2 } else { 1 }
}

/// Marks gateway packet `p`'s direction on its flow's entry (M53), once.
#[inline]
fn mark_sent(flows: &flowtable::FlowTable, hit: &Hit, p: &Pending) {
    let bit = sent_mark(p.reversed);
    if hit.entry.marks & bit == 0 {
        flows.mark(hit.slot, bit);
    }
}

/// Whether `p` is a bare SYN opening a new connection (never an ICMP
/// error): it may only follow an entry to a backend that still takes new
/// connections, and never revives a closed one.
#[inline(always)]
pub(super) fn opens_connection(p: &Pending) -> bool {
    p.class == ProtoClass::Tcp && !p.is_icmp_error && bare_syn(p.tcp_flags)
}

/// Whether a packet of `p`'s flow that reaches no backend may be answered
/// (with a TCP reset, where the service says so, M14).
#[inline(always)]
pub(super) fn answerable(p: &Pending) -> bool {
    p.proto == TCP && !p.is_icmp_error && !p.fragment && !p.tcp_flags.contains(Flags::RST)
}

/// A SYN without ACK: the first segment of a new connection.
#[inline(always)]
pub(super) fn bare_syn(f: Flags) -> bool {
    f.contains(Flags::SYN) && !f.contains(Flags::ACK)
}

/// Whether an entry's connection was closed (a FIN or RST was seen).
#[inline(always)]
pub(super) fn closed(flags: EntryFlags) -> bool {
    flags.contains(EntryFlags::FIN) || flags.contains(EntryFlags::RST)
}

/// [`Pipeline::keeps`] for a backend that is not active.
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

/// Flow-entry flag bits implied by a TCP segment's flags.
#[inline(always)]
pub(super) fn tcp_flag_bits(f: Flags) -> u8 {
    // FIN, SYN, RST and ACK are the low five bits (with PSH): a table of 32
    // instead of three tests per packet.
    TCP_FLAG_BITS[usize::from(f.0 & 0x1f)]
}

/// [`tcp_flag_bits`] of every combination of the five low TCP flag bits.
const TCP_FLAG_BITS: [u8; 32] = {
    let mut t = [0u8; 32];
    let mut i: u16 = 0;
    while i < 32 {
        t[i as usize] = flag_bits_of(Flags(i));
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
