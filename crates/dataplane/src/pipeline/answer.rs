//! The replies the data plane builds in place of the packet they answer
//! (docs/requirements.md §1, M14): ARP replies and neighbor advertisements for VIPs and the
//! balancer's own addresses, TCP resets for services without a backend, ICMP
//! too-big errors for packets that would exceed the egress MTU once
//! encapsulated (M48).

use std::net::IpAddr;

use config::schema::NoBackendAction;
use wire::arp::{self, ArpRepr};
use wire::buf::PacketBuf;
use wire::ethernet::{self, EthernetRepr, MacAddr};
use wire::icmpv6::msg;
use wire::packet::PacketInfo;
use wire::{ReplyError, ndp, reply};

use super::{Ctx, Outcome, Pending, Pipeline};
use crate::counters::DropReason;
use crate::snapshot::{ServicePlan, Snapshot};

impl Pipeline {
    /// Answers ARP requests for VIPs and the balancer's own addresses.
    pub(super) fn arp<B: PacketBuf>(
        &mut self,
        snap: &Snapshot,
        pkt: &mut B,
        eth: &EthernetRepr,
        req: &ArpRepr,
    ) -> Outcome {
        self.sighting(pkt.data());
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
    pub(super) fn link_control<B: PacketBuf>(
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
        if msg_type == msg::NEIGHBOR_SOLICIT || msg_type == msg::NEIGHBOR_ADVERT {
            self.sighting(pkt.data());
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
}

impl Pipeline {
    /// An echo request to a VIP no rule takes ICMP for, whose rules let it
    /// answer ping: the echo reply, back out the port it came in on, within
    /// the worker's budget per tick; beyond it, or when it cannot be
    /// answered in place, dropped and counted.
    #[cold]
    #[inline(never)]
    pub(super) fn echo<B: PacketBuf>(&mut self, cx: Ctx<'_>, pkt: &mut B) -> Outcome {
        let Ctx { snap, now, .. } = cx;
        if !self.echoes.available(now, snap.echo_budget) {
            return Outcome::Drop(DropReason::EchoRateLimited);
        }
        match reply::echo_reply(pkt, self.reply_mac(snap)) {
            Ok(()) => {
                self.echoes.spend();
                Outcome::EchoReply
            }
            Err(_) => Outcome::Drop(DropReason::EchoUnanswerable),
        }
    }

    /// A packet whose encapsulation would exceed the egress MTU: `max` is the
    /// largest inner IP packet that fits (M48). IPv4 without DF is split
    /// into fragments that fit, each sent to backend `to` (slot, cookie) in
    /// a tunnel of its own (RFC 4459 §4, see [`Pipeline::fragment`]);
    /// IPv4 with DF and every IPv6 packet are turned into the ICMP error
    /// advertising `max`, back out the port they came in on, within the
    /// worker's budget per tick; beyond it they are dropped and counted.
    /// Their child rule counts a drop either way.
    #[cold]
    #[inline(never)]
    pub(super) fn too_big<B: PacketBuf>(
        &mut self,
        cx: Ctx<'_>,
        pkt: &mut B,
        p: &Pending,
        max: u32,
        to: (u32, u32),
    ) -> Outcome {
        let Ctx { snap, now, .. } = cx;
        if !p.inner.v6 {
            // The flags byte of the IPv4 header; DF is 0x40.
            let flags = pkt.data().get(usize::from(p.inner.l2_len) + 6);
            if flags.is_some_and(|f| f & 0x40 == 0) {
                return self.fragment_later(p, to, max);
            }
        }
        self.child_drop(p.child, DropReason::TooBig);
        if !self.too_big.available(now, snap.too_big_budget) {
            return Outcome::Drop(DropReason::TooBigRateLimited);
        }
        let mtu = u16::try_from(max).unwrap_or(u16::MAX);
        match reply::too_big(pkt, self.reply_mac(snap), mtu) {
            Ok(()) => {
                self.too_big.spend();
                Outcome::TooBig
            }
            Err(ReplyError::Parse(_)) => Outcome::Drop(DropReason::Malformed),
            Err(_) => Outcome::Drop(DropReason::TooBig),
        }
    }
}

/// Whether the data plane answers ARP / neighbor solicitations for `addr`.
fn answers_for(snap: &Snapshot, addr: IpAddr) -> bool {
    snap.rules.is_vip(addr) || snap.is_own(addr)
}

/// A rule matched but its service has no eligible backend (M14): drop,
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
pub(super) fn no_backend<B: PacketBuf>(
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
