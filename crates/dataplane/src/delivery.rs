//! Delivery to a backend (M8), per packet: with the outer headers
//! precomputed for the backend when the snapshot was built
//! ([`Backend::encap`](crate::snapshot::Backend::encap), made in
//! `snapshot/templates.rs`), or, for a backend without them, built here from
//! the same pieces. It reads the snapshot; the snapshot never calls it.

use wire::buf::PacketBuf;
use wire::encap::{self, InnerIp};

use crate::counters::DropReason;
use crate::snapshot::templates::{outer, tunnel};
use crate::snapshot::{ServicePlan, Snapshot};

/// Sends the packet on its way to backend `slot` per the delivery mode of
/// service `svc` (`plan`), with the flow's `cookie` where the mode carries
/// one and the gateway endpoint's ID for a gateway rule's packet (M30).
/// `inner` describes the packet as parsed.
#[inline]
#[allow(
    clippy::too_many_arguments,
    reason = "the pipeline's facts, passed as they are"
)]
pub(crate) fn deliver<B: PacketBuf>(
    snap: &Snapshot,
    plan: &ServicePlan,
    svc: usize,
    (slot, cookie): (u32, u32),
    endpoint_id: Option<u64>,
    hash: u64,
    inner: &InnerIp,
    pkt: &mut B,
) -> Result<(), DropReason> {
    let local = &snap.local;
    let Some(be) = snap.backends.get(slot as usize) else {
        return Err(DropReason::NoBackend);
    };
    // A dual-stack backend takes IPv6 packets at its IPv6 address (M8).
    let to = be.address_for(inner.v6);
    // Its next hop is unresolved (M47): never sent to a zero MAC.
    if to.1 == [0; 6] {
        return Err(DropReason::NoNeighbour);
    }
    // The backend's template was made for its own service's delivery mode.
    if be.service as usize == svc
        && let (Some(id), Some(t)) = (endpoint_id, &be.gateway_encap)
    {
        return encap::encapsulate_with_endpoint(pkt, t, inner, hash, cookie, id)
            .map(|_| ())
            .map_err(|_| DropReason::EncapFailed);
    }
    if let (Some(t), true) = (be.encap_for(inner.v6).0, be.service as usize == svc) {
        return encap::encapsulate_with(pkt, t, inner, hash, cookie)
            .map(|_| ())
            .map_err(|_| DropReason::EncapFailed);
    }
    // No template (a remote rule's backend, an appliance of a service that
    // changed delivery): built here.
    let Some(tunnel) = tunnel(plan.delivery, cookie, endpoint_id) else {
        return encap::l2dsr_rewrite(pkt.data_mut(), to.1, local.mac)
            .map_err(|_| DropReason::Malformed);
    };
    encap::encapsulate(pkt, &outer(local, to, hash)?, &tunnel)
        .map(|_| ())
        .map_err(|_| DropReason::EncapFailed)
}

/// A packet the host's stack sent through an exception port, when it is a
/// health probe through a VIP (M52): TCP from a steered source port to that
/// port's VIP. It is delivered to the probed endpoint by its service's
/// delivery mode, as a client's packet would be, so the probe finds out
/// whether the endpoint takes the VIP's traffic. `None`: not a probe (it
/// leaves unchanged, as any host packet).
pub(crate) fn steer_probe<B: PacketBuf>(
    snap: &Snapshot,
    pkt: &mut B,
) -> Option<Result<(), DropReason>> {
    let wire::packet::Frame::Ip(_, info) = wire::packet::parse_frame(pkt.data()).ok()? else {
        return None;
    };
    let (sport, _) = info.ports?;
    if info.proto != wire::ip::proto::TCP || info.fragment != wire::packet::Fragment::No {
        return None;
    }
    let steer = snap.probe_steer(sport)?;
    if steer.vip != info.dst {
        return None;
    }
    let plan = snap.services.get(steer.svc as usize)?;
    let Ok(inner) = InnerIp::of(pkt.data()) else {
        return Some(Err(DropReason::Malformed));
    };
    // One probe connection, one outer flow: its source port is its hash.
    let hash = u64::from(sport).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    Some(deliver(
        snap,
        plan,
        steer.svc as usize,
        (steer.slot, 0),
        None,
        hash,
        &inner,
        pkt,
    ))
}
