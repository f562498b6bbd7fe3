//! Delivery to a backend (M8): the tunnel and outer headers of each
//! mode, precomputed per backend (`wire::encap::Template`) when the snapshot
//! is built.

use std::net::IpAddr;

use config::compiled::Delivery;
use wire::buf::PacketBuf;
use wire::encap::{self, InnerIp, Outer, Template, Tunnel, UdpChecksum};
use wire::ethernet::MacAddr;
use wire::geneve::{GatewayOptions, OptionIds};

use crate::counters::DropReason;
use crate::snapshot::{Backend, Local, ServicePlan, Snapshot};

/// The tunnel of a delivery mode (`None` for `l2dsr`), carrying `cookie`
/// where the mode has one, and for gateway rules (M30) the gateway
/// endpoint's ID.
fn tunnel(delivery: Delivery, cookie: u32, endpoint_id: Option<u64>) -> Option<Tunnel> {
    Some(match delivery {
        Delivery::L2dsr => return None,
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
                endpoint_id,
                cookie: Some(cookie),
            },
        },
    })
}

/// The outer headers towards `addr` (next hop `mac`), from this node's
/// tunnel source of that family.
fn outer(local: &Local, (addr, mac): (IpAddr, MacAddr), hash: u64) -> Result<Outer, DropReason> {
    let src_ip = match addr {
        IpAddr::V4(_) => local.tunnel_src_v4.map(IpAddr::V4),
        IpAddr::V6(_) => local.tunnel_src_v6.map(IpAddr::V6),
    }
    .ok_or(DropReason::NoTunnelSource)?;
    Ok(Outer {
        src_mac: local.mac,
        dst_mac: mac,
        src_ip,
        dst_ip: addr,
        ttl: 64,
        dont_fragment: true,
        flow_hash: hash,
        src_port_min: encap::DEFAULT_SRC_PORTS.0,
        src_port_max: encap::DEFAULT_SRC_PORTS.1,
        udp_checksum: UdpChecksum::Auto,
    })
}

/// The precomputed outer headers for packets of `delivery` to `be` (`None`
/// for `l2dsr`, or without a tunnel source of the backend's family); with
/// room for the endpoint-ID option for an appliance of a gateway rule.
pub(crate) fn template(
    local: &Local,
    be: &Backend,
    delivery: Delivery,
    gateway: bool,
) -> Option<Template> {
    let t = tunnel(delivery, 0, gateway.then_some(0))?;
    Template::new(&outer(local, (be.addr, be.mac), 0).ok()?, &t).ok()
}

/// The precomputed outer headers for packets of `delivery` to `addr` by next
/// hop `mac` (a dual-stack backend's IPv6 path).
pub(crate) fn template_to(
    local: &Local,
    addr: IpAddr,
    mac: MacAddr,
    delivery: Delivery,
) -> Option<Template> {
    let t = tunnel(delivery, 0, None)?;
    Template::new(&outer(local, (addr, mac), 0).ok()?, &t).ok()
}

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
