//! Gateway mode (M30–M32): traffic that a gateway endpoint (a router)
//! routes through the balancer, to any destination, goes to an appliance
//! in Geneve; what the appliance returns is checked and sent back to that
//! endpoint.
//!
//! - **Ingress**: a frame whose destination is not the node's (`not_ours`)
//!   takes a gateway rule when its source MAC is one of that rule's gateway
//!   endpoints' resolved MACs, on the endpoint's port (M47 resolves them).
//!   Its flow key is symmetric (both directions of a connection share one
//!   entry, one appliance, one cookie) and carries the endpoint's flow tag,
//!   so tenants behind different endpoints never share an entry (M31).
//! - **Return**: Geneve to an own address from an appliance is taken only
//!   with both options, an endpoint ID of that appliance's rule, and the
//!   cookie of the flow's entry held by that appliance (or, for a flow
//!   forwarded without an entry, the keyed cookie such a flow carries).
//!   The inner packet then leaves, unchanged, to the endpoint's MAC. No
//!   other packet is ever relayed: an appliance cannot reach an arbitrary
//!   destination through the balancer (M6).
//!
//! Both branches are out of line: the passthrough fast path never comes
//! here. Each has a short way for the usual packet, deciding exactly as the
//! general one: a fast-path frame's facts come from the fast parsers, an
//! established flow's packet takes `gateway_established` (from
//! `finish_established`), and a return in the layout the balancer sent is
//! read at fixed offsets (`wire::encap::parse_geneve_return_v4`), its inner
//! packet parsed once.

use std::net::IpAddr;

use config::compiled::Delivery;
use flowtable::Hit;
use wire::buf::PacketBuf;
use wire::buf::RxChecksum;
use wire::encap::{
    DecapConfig, InnerIp, TunnelKind, encapsulate_with, parse_geneve_return_v4, parse_tunnel,
    strip_outer,
};
use wire::ethernet::MacAddr;
use wire::flow::{FlowKey, hash_words, with_service_tag};
use wire::geneve::OptionIds;
use wire::ip::is_mapped_v4;
use wire::packet::{
    Frame, IcmpInfo, IpVersion, PacketInfo, QuotedFlow, parse_frame, parse_ip, parse_v4_flow,
    parse_v6_flow,
};
use wire::tcp::Flags;

use super::classify::{class_of, ip_header_ok, is_link_control, martian_source, store_key};
use super::flow::{admits, sent_mark};
use super::{Ctx, Inner, Outcome, Pending, Pipeline, Stage};
use crate::counters::DropReason;
use crate::snapshot::{GatewayHop, ServicePlan, Snapshot};

/// An untagged Ethernet header's length.
const ETH_HEADER: usize = wire::ethernet::HEADER_LEN;

/// An untagged Ethernet header's length, as [`Inner`] stores it.
#[allow(clippy::cast_possible_truncation, reason = "14 bytes")]
const ETH_LEN: u8 = wire::ethernet::HEADER_LEN as u8;

/// What [`Pipeline::gateway_flow`] needs of a fast-path packet
/// ([`parse_v4_flow`], [`parse_v6_flow`]: unfragmented TCP or UDP, never
/// an ICMP error, never an IPv4-mapped address).
struct FlowFacts<'a> {
    /// Source and destination.
    addrs: Addrs<'a>,
    proto: u8,
    ports: (u16, u16),
    tcp_flags: Flags,
    inner: Inner,
}

/// A fast-path packet's addresses, as its parser gives them.
enum Addrs<'a> {
    V4(u32, u32),
    V6(&'a [u8; 16], &'a [u8; 16]),
}

impl Pipeline {
    /// [`Pipeline::gateway`] for a frame of the fast path, parsed again by
    /// the fast path's parser (fixed offsets: cheaper than passing its
    /// facts through the passthrough path's code, which stays as it was).
    #[cold]
    #[inline(never)]
    pub(super) fn gateway_frame<B: PacketBuf>(
        &mut self,
        cx: Ctx<'_>,
        pkt: &mut B,
        key: &mut flowtable::FlowKey,
        pend: &mut Pending,
    ) -> Stage {
        if let Some(f) = parse_v4_flow(pkt.data()) {
            let facts = FlowFacts {
                proto: f.proto,
                tcp_flags: f.tcp_flags,
                inner: Inner {
                    l2_len: ETH_LEN,
                    v6: false,
                    ds: f.ds,
                    ip_len: u32::from(f.total_len),
                },
                addrs: Addrs::V4(f.src, f.dst),
                ports: (f.src_port, f.dst_port),
            };
            return self.gateway_flow(cx, pkt, facts, key, pend);
        }
        if let Some(f) = parse_v6_flow(pkt.data()) {
            let facts = FlowFacts {
                proto: f.proto,
                tcp_flags: f.tcp_flags,
                inner: Inner {
                    l2_len: ETH_LEN,
                    v6: true,
                    ds: f.traffic_class,
                    ip_len: 40 + u32::from(f.payload_len),
                },
                addrs: Addrs::V6(&f.src, &f.dst),
                ports: (f.src_port, f.dst_port),
            };
            return self.gateway_flow(cx, pkt, facts, key, pend);
        }
        // Not reached from the fast path's callers; kept so that any frame
        // gets the general decisions.
        match parse_frame(pkt.data()) {
            Ok(Frame::Ip(_, info)) => self.gateway(cx, pkt, &info, key, pend),
            Ok(_) => Stage::Done(Outcome::Drop(DropReason::NotOurs)),
            Err(_) => Stage::Done(Outcome::Drop(DropReason::Malformed)),
        }
    }

    /// [`Pipeline::gateway`] for a packet of the fast path: the same decisions
    /// and the same key and facts, from the fast parse (`tests/gateway.rs`
    /// and the wire crate's fast-parse property tests hold them equal).
    #[inline(always)]
    fn gateway_flow<B: PacketBuf>(
        &mut self,
        cx: Ctx<'_>,
        pkt: &mut B,
        f: FlowFacts<'_>,
        key_out: &mut flowtable::FlowKey,
        pend: &mut Pending,
    ) -> Stage {
        let snap = cx.snap;
        let from = pkt
            .data()
            .get(6..12)
            .and_then(|mac| snap.gateway_from(self.rx_port, mac));
        let Some((index, hop)) = from else {
            return Stage::Done(Outcome::Drop(DropReason::NotOurs));
        };
        if !hop.takes(f.proto) {
            return Stage::Done(Outcome::Drop(DropReason::GatewayNoRule));
        }
        let (Some(plan), Ok(gateway)) = (snap.services.get(hop.svc), u16::try_from(index + 1))
        else {
            return Stage::Done(Outcome::Drop(DropReason::NoRule));
        };
        self.count_child(hop.child, pkt.len());
        let words = match f.addrs {
            Addrs::V4(src, dst) => FlowKey::pack_v4(src, dst, f.proto, f.ports, plan.affinity),
            Addrs::V6(src, dst) => FlowKey::pack_v6(src, dst, f.proto, f.ports, plan.affinity),
        };
        let (sym, reversed) = FlowKey::symmetric_packed_dir(words);
        let hash = store_key(sym, hop.flow_tag, key_out);
        *pend = Pending {
            tcp_flags: f.tcp_flags,
            child: hop.child,
            svc: hop.svc,
            proto: f.proto,
            fragment: false,
            is_icmp_error: false,
            hash,
            class: class_of(f.proto),
            inner: f.inner,
            tunnelled: false,
            gateway,
            reversed,
        };
        Stage::Lookup
    }

    /// [`Pipeline::finish_established`] for a gateway rule's packet (M30): the
    /// same tests, then the appliance's template with the packet's endpoint
    /// ID filled in. `None`, having done nothing, when the packet needs
    /// [`Pipeline::finish`] (which decides exactly as this does where both
    /// apply).
    #[cold]
    #[inline(never)]
    pub(super) fn gateway_established<B: PacketBuf>(
        &mut self,
        cx: Ctx<'_>,
        pkt: &mut B,
        p: &Pending,
        hit: &Hit,
    ) -> Option<Outcome> {
        let Ctx { snap, flows, now } = cx;
        let hop = snap.gateways.get(usize::from(p.gateway).checked_sub(1)?)?;
        let slot = hit.entry.backend as usize;
        let be = snap.backends.get(slot)?;
        let t = be.gateway_encap.as_ref()?;
        // The first packet this way (the long way marks the entry, M53), or
        // an ICMP error (its cookie is its own): the long way.
        if hit.entry.marks & sent_mark(p.reversed) == 0
            || p.is_icmp_error
            || !admits(snap, be, p, hit, be.max_ip_len)
        {
            return None;
        }
        self.counters.flow_hits += 1;
        if hit.entry.last_seen != now {
            flows.touch(hit.slot, now);
        }
        let sent = wire::encap::encapsulate_with_endpoint(
            pkt,
            t,
            &p.inner.ip(),
            p.hash,
            hit.entry.cookie,
            hop.id,
        )
        .map(|_| ())
        .map_err(|_| DropReason::EncapFailed);
        Some(self.delivered(sent, slot, p.child, pkt.len()))
    }

    /// An IP packet not addressed to the node: a gateway rule's if it came
    /// from one of the rule's gateway endpoints, else `not_ours` (M6).
    #[cold]
    #[inline(never)]
    pub(super) fn gateway<B: PacketBuf>(
        &mut self,
        cx: Ctx<'_>,
        pkt: &mut B,
        info: &PacketInfo,
        key_out: &mut flowtable::FlowKey,
        pend: &mut Pending,
    ) -> Stage {
        let from = pkt
            .data()
            .get(6..12)
            .and_then(|mac| cx.snap.gateway_from(self.rx_port, mac));
        let Some((index, _)) = from else {
            return Stage::Done(Outcome::Drop(DropReason::NotOurs));
        };
        self.gateway_ingress(cx, pkt, info, index, key_out, pend)
    }

    /// Geneve from remote gateway endpoint `index` (M31) to an own address
    /// (`fragment`: an IP fragment of it): its outer headers checked and
    /// removed, its inner packet makes the edge checks a packet that
    /// arrived directly makes, then is that endpoint's gateway ingress —
    /// under its flow tag, so that the same 5-tuple behind two endpoints
    /// is two flows.
    #[cold]
    #[inline(never)]
    pub(super) fn gateway_remote<B: PacketBuf>(
        &mut self,
        cx: Ctx<'_>,
        pkt: &mut B,
        index: usize,
        fragment: bool,
        key_out: &mut flowtable::FlowKey,
        pend: &mut Pending,
    ) -> Stage {
        match remote_inner(cx.snap, pkt, index, fragment) {
            Ok(info) => {
                self.counters.decap_geneve += 1;
                self.gateway_ingress(cx, pkt, &info, index, key_out, pend)
            }
            Err(r) => Stage::Done(Outcome::Drop(r)),
        }
    }

    /// An IP packet of gateway endpoint `index` (found by its MAC, or by
    /// its tunnel): its rule's, keyed symmetrically under its flow tag.
    fn gateway_ingress<B: PacketBuf>(
        &mut self,
        cx: Ctx<'_>,
        pkt: &mut B,
        info: &PacketInfo,
        index: usize,
        key_out: &mut flowtable::FlowKey,
        pend: &mut Pending,
    ) -> Stage {
        let snap = cx.snap;
        let Some(hop) = snap.gateways.get(index) else {
            return Stage::Done(Outcome::Drop(DropReason::NotOurs));
        };
        if info.version == IpVersion::V6 && (is_mapped_v4(&info.dst) || is_mapped_v4(&info.src)) {
            return Stage::Done(Outcome::Drop(DropReason::BadAddress));
        }
        // An ICMP error belongs to the flow it quotes (as for a VIP, M13).
        let (proto, fragment, is_icmp_error) = match &info.icmp {
            Some(IcmpInfo {
                quoted: Some(q), ..
            }) => (q.proto, q.fragment && q.ports.is_none(), true),
            _ => (info.proto, info.fragment.is_fragment(), false),
        };
        if !hop.takes(proto) {
            return Stage::Done(Outcome::Drop(DropReason::GatewayNoRule));
        }
        let (Some(plan), Ok(gateway)) = (snap.services.get(hop.svc), u16::try_from(index + 1))
        else {
            return Stage::Done(Outcome::Drop(DropReason::NoRule));
        };
        self.count_child(hop.child, pkt.len());
        // The direction the appliance gets the packet in (M53); an ICMP
        // error's is that of the packet it quotes (its key is that packet's,
        // reversed).
        let key = FlowKey::from_packet(info, plan.affinity);
        let directed = if is_icmp_error { key.reversed() } else { key };
        let reversed = directed.symmetric() != directed;
        let hash = store_key(key.symmetric().pack(), hop.flow_tag, key_out);
        *pend = Pending {
            tcp_flags: info.tcp_flags,
            child: hop.child,
            svc: hop.svc,
            proto,
            fragment,
            is_icmp_error,
            hash,
            class: class_of(proto),
            inner: Inner::of(info, pkt.data()),
            tunnelled: false,
            gateway,
            reversed,
        };
        Stage::Lookup
    }

    /// Geneve to an own address from appliance `slot` (M32), to UDP port
    /// `udp_port` (`None`: a fragment): sent back to its gateway endpoint
    /// if every check passes, else dropped by reason.
    #[cold]
    #[inline(never)]
    pub(super) fn gateway_return<B: PacketBuf>(
        &mut self,
        cx: Ctx<'_>,
        pkt: &mut B,
        slot: u32,
        udp_port: Option<u16>,
    ) -> Outcome {
        match self.returned(cx, pkt, slot, udp_port) {
            Ok(port) => Outcome::Returned(port),
            Err(r) => Outcome::Drop(r),
        }
    }

    /// Where a return came from, then what it carries (M32, M53). Before
    /// anything is parsed or looked up: it came in on the port the
    /// appliance is reached through, from the appliance's resolved MAC, to
    /// the address the balancer sends to it from, and the appliance is not
    /// over its budget of refused returns. Every return refused after that
    /// spends the budget.
    fn returned<B: PacketBuf>(
        &mut self,
        cx: Ctx<'_>,
        pkt: &mut B,
        slot: u32,
        udp_port: Option<u16>,
    ) -> Result<u16, DropReason> {
        let snap = cx.snap;
        let be = snap
            .backends
            .get(slot as usize)
            .ok_or(DropReason::GatewayUnknownSource)?;
        return_source(snap, be, self.rx_port, pkt.data())?;
        let budget = snap.gateway_mismatch_budget;
        if let Some(b) = self.return_budget.get_mut(slot as usize)
            && !b.available(cx.now, budget)
        {
            return Err(DropReason::GatewayMismatchBudget);
        }
        let r = self.return_checked(cx, pkt, (slot, be), udp_port);
        if r.is_err()
            && let Some(b) = self.return_budget.get_mut(slot as usize)
        {
            b.spend();
        }
        r
    }

    /// [`Pipeline::returned`] after the source checks: the Geneve headers, the
    /// flow and what the inner packet claims to be.
    fn return_checked<B: PacketBuf>(
        &mut self,
        cx: Ctx<'_>,
        pkt: &mut B,
        (slot, be): (u32, &crate::snapshot::Backend),
        udp_port: Option<u16>,
    ) -> Result<u16, DropReason> {
        let snap = cx.snap;
        // A fragment (no port): tunnels are not reassembled.
        let Some(udp_port) = udp_port else {
            return Err(DropReason::GatewayMalformed);
        };
        let svc = be.service as usize;
        let plan = snap
            .services
            .get(svc)
            .ok_or(DropReason::GatewayUnknownSource)?;
        let Delivery::Geneve {
            option_class,
            endpoint_id_type,
            flow_cookie_type,
            ..
        } = plan.delivery
        else {
            return Err(DropReason::GatewayUnknownSource);
        };
        let ids = OptionIds {
            class: option_class,
            endpoint_type: endpoint_id_type,
            cookie_type: flow_cookie_type,
        };
        // The layout the balancer sent, returned as the contract says: read
        // at fixed offsets, with every check of the general parse (both
        // checksums, every length) and the inner packet parsed once.
        if let Some(r) = parse_geneve_return_v4(pkt.data(), &ids) {
            let hop = endpoint_of(snap, svc, r.endpoint_id)?;
            let f = r.inner;
            let words = FlowKey::pack_v4(
                f.src,
                f.dst,
                f.proto,
                (f.src_port, f.dst_port),
                plan.affinity,
            );
            let (sym, reversed) = FlowKey::symmetric_packed_dir(words);
            let claim = Claim::Packet { reversed };
            let (out, dst_mac, src_mac) =
                self.accepted(cx, plan, slot, hop, (sym, f.proto), r.cookie, claim)?;
            // What `strip_outer` and `set_macs` make of it, in one write: the
            // endpoint's Ethernet header right before the inner packet.
            let start = r
                .inner_offset
                .checked_sub(ETH_HEADER)
                .ok_or(DropReason::GatewayMalformed)?;
            let excess = pkt
                .len()
                .checked_sub(r.inner_offset + r.inner_len)
                .ok_or(DropReason::GatewayMalformed)?;
            let eth = pkt
                .data_mut()
                .get_mut(start..r.inner_offset)
                .ok_or(DropReason::GatewayMalformed)?;
            eth[..6].copy_from_slice(&dst_mac);
            eth[6..12].copy_from_slice(&src_mac);
            eth[12..].copy_from_slice(&wire::ethernet::ethertype::IPV4.to_be_bytes());
            pkt.trim(excess)
                .and_then(|()| pkt.adj(start))
                .map_err(|_| DropReason::GatewayMalformed)?;
            if hop.remote.is_some() {
                tunnel_back(pkt, hop)?;
            }
            return Ok(out);
        }
        // Parsed as Geneve to the port it came to (the Geneve port, or the
        // balancer's source port of a socket's answer).
        let cfg = DecapConfig {
            gue_port: None,
            geneve_port: Some(udp_port),
            allow_zero_udp_checksum_v6: false,
            geneve_ids: ids,
        };
        let t = parse_tunnel(pkt.data(), &cfg).map_err(|_| DropReason::GatewayMalformed)?;
        if t.kind != TunnelKind::Geneve || t.geneve_oam || t.geneve_unknown_critical {
            return Err(DropReason::GatewayMalformed);
        }
        let (Some(endpoint_id), Some(cookie)) = (t.gateway.endpoint_id, t.gateway.cookie) else {
            return Err(DropReason::GatewayOptionsMissing);
        };
        let hop = endpoint_of(snap, svc, endpoint_id)?;
        let inner = pkt
            .data()
            .get(t.inner_offset..t.inner_offset.saturating_add(t.inner_len))
            .ok_or(DropReason::GatewayMalformed)?;
        let info = parse_ip(inner).map_err(|_| DropReason::GatewayMalformed)?;
        if info.version == IpVersion::V6 && (is_mapped_v4(&info.dst) || is_mapped_v4(&info.src)) {
            return Err(DropReason::BadAddress);
        }
        // The flow's key as its forward packets made it (symmetric, the
        // endpoint's tag): the one entry of both directions.
        let key = FlowKey::from_packet(&info, plan.affinity);
        let sym = key.symmetric();
        let (proto, claim) = match &info.icmp {
            Some(IcmpInfo {
                quoted: Some(q), ..
            }) => {
                // The key is the quoted packet's, reversed: the direction
                // it travelled in is that of its own key.
                let quoted = key.reversed();
                (
                    q.proto,
                    icmp_claim(&info, q, inner, quoted.symmetric() != quoted)?,
                )
            }
            _ => (
                info.proto,
                Claim::Packet {
                    reversed: sym != key,
                },
            ),
        };
        let (out, dst_mac, src_mac) =
            self.accepted(cx, plan, slot, hop, (sym.pack(), proto), cookie, claim)?;
        strip_outer(pkt, &t).map_err(|_| DropReason::GatewayMalformed)?;
        set_macs(pkt, dst_mac, src_mac)?;
        if hop.remote.is_some() {
            tunnel_back(pkt, hop)?;
        }
        Ok(out)
    }

    /// The checks of a returned packet after its parse (M32, M53): the flow
    /// (packed symmetric key `words`, protocol `proto`) was sent to
    /// appliance `slot` (of service `plan`), and `cookie` proves what the
    /// packet claims to be (`claim`); its endpoint `hop` is resolved.
    /// Returns the endpoint's port and the MACs (destination, source) the
    /// inner packet leaves with.
    #[allow(clippy::too_many_arguments, reason = "the facts of one return")]
    fn accepted(
        &mut self,
        cx: Ctx<'_>,
        plan: &ServicePlan,
        slot: u32,
        hop: &GatewayHop,
        (words, proto): ([u64; 5], u8),
        cookie: u32,
        claim: Claim,
    ) -> Result<(u16, MacAddr, MacAddr), DropReason> {
        let Ctx { snap, flows, now } = cx;
        let key = flowtable::FlowKey(with_service_tag(words, hop.flow_tag));
        let reversed = claim.reversed();
        let keys = &snap.cookie_key;
        // What the balancer derived for packets of the flow it sent this
        // way without an entry (or before its entry was made, by the other
        // direction, with packets of before still at the appliance), and for
        // an ICMP error it forwarded: worked out only where the entry does
        // not decide.
        let stateless = || cookie == keys.flow(&key.0, reversed);
        let forwarded_error = |c: &Claim| match *c {
            Claim::IcmpError { addrs, ip_len, .. } => {
                cookie == keys.icmp_error(&key.0, reversed, (&addrs.0, &addrs.1), ip_len)
            }
            Claim::Packet { .. } => false,
        };
        // Only a flow's other participant may be the source of an ICMP error
        // that the balancer did not forward itself.
        let from_peer = match claim {
            Claim::Packet { .. } => true,
            Claim::IcmpError { from_peer, .. } => from_peer,
        };
        match flows.lookup(&key, flows.hash(&key)) {
            Some(hit) => {
                if hit.entry.backend != slot || !self.keeps(snap, plan, &hit, class_of(proto), now)
                {
                    return Err(DropReason::GatewayWrongAppliance);
                }
                let of_flow = hit.entry.cookie == cookie;
                let sent_this_way = hit.entry.marks & sent_mark(reversed) != 0;
                let proven = (from_peer && of_flow && sent_this_way)
                    || forwarded_error(&claim)
                    || (from_peer && stateless());
                if !proven {
                    return Err(if of_flow && !from_peer {
                        DropReason::GatewayIcmpForeignSource
                    } else if of_flow {
                        DropReason::GatewayWrongDirection
                    } else {
                        DropReason::GatewayCookieMismatch
                    });
                }
            }
            // Without an entry, the appliance Maglev picks for the flow is
            // the one it was sent to: another, even with the cookie, did not
            // get it from this node.
            None => {
                if !(forwarded_error(&claim) || (from_peer && stateless())) {
                    return Err(DropReason::GatewayNoFlow);
                }
                if plan.pick(hash_words(&words, 0), None) != Some(slot) {
                    return Err(DropReason::GatewayWrongAppliance);
                }
            }
        }
        if hop.mac == [0; 6] {
            return Err(DropReason::GatewayEndpointUnresolved);
        }
        let out = u16::try_from(hop.port).map_err(|_| DropReason::GatewayEndpointUnresolved)?;
        let src_mac = snap
            .local
            .port_macs
            .get(hop.port)
            .copied()
            .unwrap_or(snap.local.mac);
        Ok((out, hop.mac, src_mac))
    }
}

/// What a returned inner packet claims to be (M53).
#[derive(Clone, Copy)]
enum Claim {
    /// A packet of the flow, travelling against its key's order if
    /// `reversed`: the balancer must have sent the flow's packets that way
    /// to this appliance.
    Packet { reversed: bool },
    /// An ICMP error about a packet of the flow that travelled against the
    /// key's order if `reversed`, addressed to that packet's sender; from
    /// the flow's other participant (`from_peer`) or exactly as the
    /// balancer forwarded it (its addresses and length are in its cookie).
    IcmpError {
        reversed: bool,
        addrs: ([u8; 16], [u8; 16]),
        ip_len: u32,
        from_peer: bool,
    },
}

impl Claim {
    fn reversed(&self) -> bool {
        match *self {
            Claim::Packet { reversed } | Claim::IcmpError { reversed, .. } => reversed,
        }
    }
}

/// The longest ICMP error relayed: RFC 1812 §4.3.2.3 (IPv4, 576 bytes) and
/// RFC 4443 §2.4 (IPv6, the minimum MTU).
const MAX_ICMP_ERROR_V4: u32 = 576;
const MAX_ICMP_ERROR_V6: u32 = 1280;

/// A returned ICMP error's claim (M53): addressed to the sender of the
/// packet it quotes, no longer than an error may be, quoting no more of
/// that packet than the packet's own length (an appliance cannot append
/// bytes of its own). `reversed`: the quoted packet's direction.
fn icmp_claim(
    info: &PacketInfo,
    q: &QuotedFlow,
    packet: &[u8],
    reversed: bool,
) -> Result<Claim, DropReason> {
    if info.dst != q.src {
        return Err(DropReason::GatewayIcmpWrongDestination);
    }
    let v6 = info.version == IpVersion::V6;
    let max = if v6 {
        MAX_ICMP_ERROR_V6
    } else {
        MAX_ICMP_ERROR_V4
    };
    // The quoted packet starts after the 8-byte ICMP header; its header
    // says how long it was.
    let quoted_at = usize::try_from(info.l4_offset)
        .ok()
        .and_then(|o| o.checked_add(8))
        .ok_or(DropReason::GatewayMalformed)?;
    let quoted = packet
        .get(quoted_at..)
        .ok_or(DropReason::GatewayMalformed)?;
    let be16 = |i: usize| {
        quoted
            .get(i..i + 2)
            .map(|b| u32::from(u16::from_be_bytes([b[0], b[1]])))
    };
    let quoted_len =
        if v6 { be16(4).map(|l| l + 40) } else { be16(2) }.ok_or(DropReason::GatewayMalformed)?;
    let carried = u32::try_from(quoted.len()).map_err(|_| DropReason::GatewayIcmpTooLong)?;
    if info.l3_len > max || carried > quoted_len {
        return Err(DropReason::GatewayIcmpTooLong);
    }
    Ok(Claim::IcmpError {
        reversed,
        addrs: (info.src, info.dst),
        ip_len: info.l3_len,
        from_peer: info.src == q.dst,
    })
}

/// Whether a frame returned by appliance `be` came from where the balancer
/// reaches it (M53, before anything else is believed): in on the port it is
/// reached through, from its resolved MAC (or its next hop's), to the
/// address the balancer sends to it from. Untagged frames only (the ports
/// carry no VLANs), read at fixed offsets.
#[inline]
fn return_source(
    snap: &Snapshot,
    be: &crate::snapshot::Backend,
    rx_port: usize,
    frame: &[u8],
) -> Result<(), DropReason> {
    if snap.appliance_port.is_some_and(|p| p != rx_port) {
        return Err(DropReason::GatewayWrongPort);
    }
    let h: &[u8; 34] = frame.first_chunk().ok_or(DropReason::GatewayMalformed)?;
    let src_mac = [h[6], h[7], h[8], h[9], h[10], h[11]];
    let (mac, ours) = match u16::from_be_bytes([h[12], h[13]]) {
        wire::ethernet::ethertype::IPV4 => {
            let src = [h[26], h[27], h[28], h[29]];
            let dst = [h[30], h[31], h[32], h[33]];
            let mac = match be.addr {
                IpAddr::V4(a) if a.octets() == src => be.mac,
                _ => return Err(DropReason::GatewayUnknownSource),
            };
            (
                mac,
                snap.local.tunnel_src_v4.is_some_and(|t| t.octets() == dst),
            )
        }
        wire::ethernet::ethertype::IPV6 => {
            let h: &[u8; 54] = frame.first_chunk().ok_or(DropReason::GatewayMalformed)?;
            let src: &[u8; 16] = h[22..38]
                .try_into()
                .map_err(|_| DropReason::GatewayMalformed)?;
            let dst: &[u8; 16] = h[38..54]
                .try_into()
                .map_err(|_| DropReason::GatewayMalformed)?;
            let mac = match (&be.addr, &be.v6) {
                (IpAddr::V6(a), _) if a.octets() == *src => be.mac,
                (_, Some(p)) if p.addr == IpAddr::from(*src) => p.mac,
                _ => return Err(DropReason::GatewayUnknownSource),
            };
            (
                mac,
                snap.local.tunnel_src_v6.is_some_and(|t| t.octets() == *dst),
            )
        }
        _ => return Err(DropReason::GatewayMalformed),
    };
    if mac == [0; 6] || src_mac != mac {
        return Err(DropReason::GatewayWrongMac);
    }
    if !ours {
        return Err(DropReason::GatewayWrongDestination);
    }
    Ok(())
}

/// The gateway endpoint of service `svc` whose ID a returned packet
/// carries.
fn endpoint_of(snap: &Snapshot, svc: usize, id: u64) -> Result<&GatewayHop, DropReason> {
    snap.gateways
        .iter()
        .find(|g| g.svc == svc && g.id == id)
        .ok_or(DropReason::GatewayEndpointUnknown)
}

/// The inner packet of remote gateway endpoint `index`'s Geneve (M31),
/// its outer headers removed (the frame's Ethernet header stays in front),
/// once it passed the checks a gateway endpoint's frame passes on its link
/// (M55); else why it is dropped.
fn remote_inner<B: PacketBuf>(
    snap: &Snapshot,
    pkt: &mut B,
    index: usize,
    fragment: bool,
) -> Result<PacketInfo, DropReason> {
    let malformed = DropReason::GatewayTunnelMalformed;
    let hop = snap.gateways.get(index).ok_or(DropReason::NotOurs)?;
    let tunnel = hop.remote.as_ref().ok_or(DropReason::NotOurs)?;
    // Tunnels are not reassembled.
    if fragment {
        return Err(malformed);
    }
    let ids = match snap.services.get(hop.svc).map(|p| p.delivery) {
        Some(Delivery::Geneve {
            option_class,
            endpoint_id_type,
            flow_cookie_type,
            ..
        }) => OptionIds {
            class: option_class,
            endpoint_type: endpoint_id_type,
            cookie_type: flow_cookie_type,
        },
        _ => return Err(DropReason::NoRule),
    };
    let cfg = DecapConfig {
        gue_port: None,
        geneve_port: Some(tunnel.geneve_port),
        allow_zero_udp_checksum_v6: false,
        geneve_ids: ids,
    };
    let t = parse_tunnel(pkt.data(), &cfg).map_err(|_| malformed)?;
    if t.kind != TunnelKind::Geneve || t.geneve_oam || t.geneve_unknown_critical {
        return Err(malformed);
    }
    strip_outer(pkt, &t).map_err(|_| malformed)?;
    let info = match parse_frame(pkt.data()) {
        Ok(Frame::Ip(_, info)) => info,
        _ => return Err(malformed),
    };
    // Neighbour discovery is of a link, never of a tunnel.
    if info.version == IpVersion::V6
        && info.proto == wire::ip::proto::ICMPV6
        && info.icmp.is_some_and(|i| is_link_control(i.msg_type))
    {
        return Err(malformed);
    }
    ip_header_ok(snap, pkt.data(), &info, RxChecksum::Unknown)?;
    if martian_source(snap, &info) {
        return Err(DropReason::MartianSource);
    }
    let dst = match info.version {
        IpVersion::V4 => wire::ip::unmap(&info.dst),
        IpVersion::V6 => IpAddr::from(info.dst),
    };
    if snap.rules.is_vip(dst) || snap.is_own(dst) {
        return Err(DropReason::GatewayTunnelToNode);
    }
    Ok(info)
}

/// A return to a remote gateway endpoint (M31): the inner packet, now
/// behind an Ethernet header, goes back in the endpoint's tunnel, its
/// outer UDP source port from the flow's symmetric 5-tuple (worked out
/// here from the packet, so that the usual return keeps no key alive for
/// it). Out of line: a neighbour endpoint's returns never come here.
#[cold]
#[inline(never)]
fn tunnel_back<B: PacketBuf>(pkt: &mut B, hop: &GatewayHop) -> Result<(), DropReason> {
    let template = hop
        .remote
        .as_ref()
        .and_then(|t| t.template.as_deref())
        .ok_or(DropReason::GatewayEndpointUnresolved)?;
    let hash = pkt
        .data()
        .get(ETH_HEADER..)
        .and_then(|ip| parse_ip(ip).ok())
        .map_or(0, |info| {
            let key = FlowKey::from_packet(&info, wire::flow::Affinity::None);
            hash_words(&key.symmetric().pack(), 0)
        });
    let inner = InnerIp::of(pkt.data()).map_err(|_| DropReason::GatewayMalformed)?;
    encapsulate_with(pkt, template, &inner, hash, 0)
        .map(|_| ())
        .map_err(|_| DropReason::EncapFailed)
}

/// The MACs of a decapsulated packet on its way back to its endpoint.
fn set_macs<B: PacketBuf>(pkt: &mut B, dst: MacAddr, src: MacAddr) -> Result<(), DropReason> {
    let eth = pkt
        .data_mut()
        .get_mut(..12)
        .ok_or(DropReason::GatewayMalformed)?;
    eth[..6].copy_from_slice(&dst);
    eth[6..].copy_from_slice(&src);
    Ok(())
}
