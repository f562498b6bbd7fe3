//! The outer headers of each delivery mode (M8): the tunnel and outer IP
//! headers towards a backend, and the templates the builder precomputes from
//! them for each backend (`Backend::encap`, `Path::encap`). Per packet,
//! `delivery::deliver` builds from the same pieces for a backend without a
//! template.

use std::net::IpAddr;

use config::compiled::Delivery;
use wire::encap::{self, Outer, Template, Tunnel, UdpChecksum};
use wire::ethernet::MacAddr;
use wire::geneve::{GatewayOptions, OptionIds};

use super::{Backend, Local};
use crate::counters::DropReason;

/// The tunnel of a delivery mode (`None` for `l2dsr`), carrying `cookie`
/// where the mode has one, and for gateway rules (M30) the gateway
/// endpoint's ID.
pub(crate) fn tunnel(delivery: Delivery, cookie: u32, endpoint_id: Option<u64>) -> Option<Tunnel> {
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
pub(crate) fn outer(
    local: &Local,
    (addr, mac): (IpAddr, MacAddr),
    hash: u64,
) -> Result<Outer, DropReason> {
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
pub(super) fn template(
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
pub(super) fn template_to(
    local: &Local,
    addr: IpAddr,
    mac: MacAddr,
    delivery: Delivery,
) -> Option<Template> {
    let t = tunnel(delivery, 0, None)?;
    Template::new(&outer(local, (addr, mac), 0).ok()?, &t).ok()
}
