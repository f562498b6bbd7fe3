//! The first pass: parse a packet, select its rule (M3), compute its
//! flow key and hash. Packets that need no flow entry end here with their
//! outcome (answered, handed to the host, dropped); the others leave their
//! key and [`Pending`] for the flow pass.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use config::compiled::ZoneId;
use flowtable::ProtoClass;
use wire::buf::PacketBuf;
use wire::encap::{DecapConfig, TunnelKind, parse_tunnel, strip_outer};
use wire::error::DecapError;
use wire::ethernet;
use wire::flow::FlowKey;
use wire::geneve::OptionIds;
use wire::ip::{is_mapped_v4, proto as ipproto, unmap};
use wire::packet::{
    Frame, IcmpInfo, IpVersion, PacketInfo, V4Flow, V6Flow, parse_frame, parse_ip, parse_v4_flow,
    parse_v6_flow,
};

use super::{Ctx, Inner, Outcome, Pending, RuleRun, Stage, TCP, UDP, Worker};
use crate::counters::DropReason;
use crate::snapshot::{ServicePlan, Snapshot};

/// An untagged Ethernet header's length, as [`Inner`] stores it.
#[allow(clippy::cast_possible_truncation, reason = "14 bytes")]
const ETH_LEN: u8 = ethernet::HEADER_LEN as u8;

impl Worker {
    /// Everything up to the flow table: parse, answer what is answered in
    /// place, select the rule, compute the flow key.
    pub(super) fn classify<B: PacketBuf>(
        &mut self,
        cx: Ctx<'_>,
        pkt: &mut B,
        key: &mut flowtable::FlowKey,
        pend: &mut Pending,
    ) -> Stage {
        self.counters.rx_packets += 1;
        self.counters.rx_bytes += pkt.len() as u64;
        self.classify_frame(cx, pkt, key, pend)
    }

    /// [`Worker::classify`] after the counting: also what a decapsulated
    /// packet goes through, exactly as if it had arrived directly (M49).
    #[inline(always)]
    fn classify_frame<B: PacketBuf>(
        &mut self,
        cx: Ctx<'_>,
        pkt: &mut B,
        key: &mut flowtable::FlowKey,
        pend: &mut Pending,
    ) -> Stage {
        let snap = cx.snap;
        if let Some(f) = parse_v4_flow(pkt.data()) {
            return self.v4_flow(cx, pkt, &f, key, pend);
        }
        if let Some(f) = parse_v6_flow(pkt.data()) {
            return self.v6_flow(cx, pkt, &f, key, pend);
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
                _ => return self.ip(cx, pkt, &info, key, pend),
            },
        })
    }

    /// Rule selection and flow key of an IP packet (not link control).
    fn ip<B: PacketBuf>(
        &mut self,
        cx: Ctx<'_>,
        pkt: &mut B,
        info: &PacketInfo,
        key_out: &mut flowtable::FlowKey,
        pend: &mut Pending,
    ) -> Stage {
        let snap = cx.snap;
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
        // backend (M13). A real fragment can never prove its ports: it
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
            Err(Outcome::ToHost) => {
                let outer = OuterFacts {
                    src: match info.version {
                        IpVersion::V4 => unmap(&info.src),
                        IpVersion::V6 => IpAddr::V6(Ipv6Addr::from(info.src)),
                    },
                    proto: info.proto,
                    src_port: info.ports.map(|(s, _)| s),
                    dst_port: info.ports.map(|(_, d)| d),
                    fragment: info.fragment.is_fragment(),
                };
                return self.own(cx, pkt, outer, key_out, pend);
            }
            Err(Outcome::Drop(DropReason::NotOurs)) if !snap.gateways.is_empty() => {
                return self.gateway(cx, pkt, info, key_out, pend);
            }
            Err(Outcome::Drop(DropReason::NoRule))
                if is_echo_request(info) && snap.rules.answers_echo(dst) =>
            {
                return Stage::Done(self.echo(cx, pkt));
            }
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
            tunnelled: false,
            gateway: 0,
            reversed: false,
        };
        Stage::Lookup
    }

    /// [`Worker::ip`] for a packet of the fast path ([`parse_v4_flow`]):
    /// the same decisions, from the facts in registers.
    #[inline(always)]
    fn v4_flow<B: PacketBuf>(
        &mut self,
        cx: Ctx<'_>,
        pkt: &mut B,
        f: &V4Flow,
        key_out: &mut flowtable::FlowKey,
        pend: &mut Pending,
    ) -> Stage {
        let snap = cx.snap;
        // Packets of a burst mostly go to the same service: the previous
        // fast-path packet's rule is reused when its destination, protocol
        // and port are this one's (the snapshot is the same within a group).
        let len = pkt.len();
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
                        Err(Outcome::ToHost) => {
                            let outer = OuterFacts {
                                src: IpAddr::V4(Ipv4Addr::from(f.src)),
                                proto: f.proto,
                                src_port: Some(f.src_port),
                                dst_port: Some(f.dst_port),
                                fragment: false,
                            };
                            return self.own(cx, pkt, outer, key_out, pend);
                        }
                        Err(Outcome::Drop(DropReason::NotOurs)) if !snap.gateways.is_empty() => {
                            return self.gateway_frame(cx, pkt, key_out, pend);
                        }
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
            snap.rules.client_zone(IpAddr::V4(Ipv4Addr::from(f.src)))
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
                l2_len: ETH_LEN,
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
    fn v6_flow<B: PacketBuf>(
        &mut self,
        cx: Ctx<'_>,
        pkt: &mut B,
        f: &V6Flow,
        key_out: &mut flowtable::FlowKey,
        pend: &mut Pending,
    ) -> Stage {
        let snap = cx.snap;
        let dst = IpAddr::V6(Ipv6Addr::from(f.dst));
        let len = pkt.len();
        let (child, svc, plan) = match self.select(snap, dst, f.proto, Some(f.dst_port), false, len)
        {
            Ok(x) => x,
            Err(Outcome::ToHost) => {
                let outer = OuterFacts {
                    src: IpAddr::V6(Ipv6Addr::from(f.src)),
                    proto: f.proto,
                    src_port: Some(f.src_port),
                    dst_port: Some(f.dst_port),
                    fragment: false,
                };
                return self.own(cx, pkt, outer, key_out, pend);
            }
            Err(Outcome::Drop(DropReason::NotOurs)) if !snap.gateways.is_empty() => {
                return self.gateway_frame(cx, pkt, key_out, pend);
            }
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
                l2_len: ETH_LEN,
                v6: true,
                ds: f.traffic_class,
                ip_len: 40 + u32::from(f.payload_len),
            },
        );
        Stage::Lookup
    }

    /// Rule selection (M3) for a packet to `dst`: the child rule's
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
        let index = &snap.rules;
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
            return Err(Outcome::Drop(DropReason::GatewayVip));
        }
        let svc = m.service.index();
        let Some(plan) = snap.plan_for(m.child.index(), svc) else {
            return Err(Outcome::Drop(DropReason::NoRule));
        };
        self.count_child(m.child.index(), len);
        Ok((m.child.index(), svc, plan))
    }
}

/// What the own-address branch needs of a packet's outer headers.
#[derive(Clone, Copy)]
pub(super) struct OuterFacts {
    src: IpAddr,
    proto: u8,
    src_port: Option<u16>,
    dst_port: Option<u16>,
    fragment: bool,
}

impl Worker {
    /// A packet to one of the node's own addresses: a tunnel packet of a
    /// kind `[tunnel_ingress]` accepts loses its outer headers and is
    /// classified again as if its inner packet had arrived directly (M49),
    /// or is dropped; everything else goes to the host. Out of line: the
    /// fast path never comes here.
    #[cold]
    #[inline(never)]
    fn own<B: PacketBuf>(
        &mut self,
        cx: Ctx<'_>,
        pkt: &mut B,
        outer: OuterFacts,
        key: &mut flowtable::FlowKey,
        pend: &mut Pending,
    ) -> Stage {
        let snap = cx.snap;
        // Returned by an appliance (M32): checked and sent back, never
        // classified again.
        // The contract keeps the ports (to the Geneve port); an appliance
        // that answers from a UDP socket sends from it instead: both taken.
        if outer.proto == UDP
            && let Some(slot) = snap.appliance(outer.src)
            && let Some(port) = snap.gateway_geneve_port(slot)
            && (outer.dst_port == Some(port) || outer.src_port == Some(port) || outer.fragment)
        {
            return Stage::Done(self.gateway_return(cx, pkt, slot, outer.dst_port));
        }
        let policy = &snap.tunnel_ingress;
        let tunnel = match outer.proto {
            ipproto::IPIP | ipproto::IPV6 => policy.ipip,
            ipproto::GRE => policy.gre,
            // A later fragment shows no port: it cannot be told from the
            // host's own UDP and goes to the host.
            UDP => outer
                .dst_port
                .is_some_and(|p| Some(p) == policy.gue_port || Some(p) == policy.geneve_port),
            _ => false,
        };
        // The appliances' port takes appliances only (M32), and peers
        // that tunnelled ingress allows.
        if outer.proto == UDP
            && outer
                .dst_port
                .is_some_and(|p| snap.is_gateway_geneve_port(p))
            && !(tunnel && policy.allows(outer.src))
        {
            return Stage::Done(Outcome::Drop(DropReason::GatewayUnknownSource));
        }
        if !tunnel {
            return Stage::Done(Outcome::ToHost);
        }
        match self.decapsulate(snap, pkt, outer) {
            Ok(()) => {
                let stage = self.classify_frame(cx, pkt, key, pend);
                if matches!(stage, Stage::Lookup) {
                    pend.tunnelled = true;
                }
                stage
            }
            Err(reason) => Stage::Done(Outcome::Drop(reason)),
        }
    }

    /// Checks a tunnel packet to an own address and removes its outer
    /// headers in place (the Ethernet header stays in front), or says why
    /// it is dropped. The source is checked before anything is parsed.
    fn decapsulate<B: PacketBuf>(
        &mut self,
        snap: &Snapshot,
        pkt: &mut B,
        outer: OuterFacts,
    ) -> Result<(), DropReason> {
        let policy = &snap.tunnel_ingress;
        if outer.fragment {
            return Err(DropReason::TunnelFragment);
        }
        if !policy.allows(outer.src) {
            return Err(DropReason::TunnelSourceDenied);
        }
        let cfg = DecapConfig {
            gue_port: policy.gue_port,
            geneve_port: policy.geneve_port,
            allow_zero_udp_checksum_v6: false,
            geneve_ids: OptionIds::DEFAULT,
        };
        let t = parse_tunnel(pkt.data(), &cfg).map_err(|e| match e {
            DecapError::NotIp => DropReason::TunnelUnsupported,
            _ => DropReason::TunnelMalformed,
        })?;
        if t.geneve_oam || t.geneve_unknown_critical {
            return Err(DropReason::TunnelUnsupported);
        }
        let inner = pkt
            .data()
            .get(t.inner_offset..t.inner_offset + t.inner_len)
            .ok_or(DropReason::TunnelMalformed)?;
        let info = parse_ip(inner).map_err(|_| DropReason::TunnelMalformed)?;
        let nested = match info.proto {
            ipproto::IPIP | ipproto::IPV6 | ipproto::GRE => true,
            UDP => info
                .ports
                .is_some_and(|(_, d)| policy.tunnel_ports.contains(&d)),
            // Neighbour discovery is of the link, never of a tunnel.
            ipproto::ICMPV6 => info.icmp.is_some_and(|i| is_link_control(i.msg_type)),
            _ => false,
        };
        if nested {
            return Err(if info.proto == ipproto::ICMPV6 {
                DropReason::TunnelUnsupported
            } else {
                DropReason::TunnelNested
            });
        }
        let dst = match info.version {
            IpVersion::V4 => unmap(&info.dst),
            IpVersion::V6 => IpAddr::V6(Ipv6Addr::from(info.dst)),
        };
        if !snap.rules.is_vip(dst) {
            return Err(DropReason::TunnelNotVip);
        }
        strip_outer(pkt, &t).map_err(|_| DropReason::TunnelMalformed)?;
        let c = &mut self.counters;
        *match t.kind {
            TunnelKind::IpIp => &mut c.decap_ipip,
            TunnelKind::Gre => &mut c.decap_gre,
            TunnelKind::Gue => &mut c.decap_gue,
            TunnelKind::Geneve => &mut c.decap_geneve,
        } += 1;
        Ok(())
    }
}

/// Hashes a packed flow key, adds the service's tag to it
/// ([`wire::flow::with_service_tag`]) and stores it in `key_out`; returns
/// the hash (that of the key without the service, as
/// `wire::flow::FlowKey::hash64` gives it).
#[inline(always)]
pub(super) fn store_key(words: [u64; 5], flow_tag: u16, key_out: &mut flowtable::FlowKey) -> u64 {
    let hash = wire::flow::hash_words(&words, 0);
    // The service's stable tag, not its position in the file: reordering
    // services keeps flows.
    *key_out = flowtable::FlowKey(wire::flow::with_service_tag(words, flow_tag));
    hash
}

/// The client's zone, when the service has zonal affinity (M27).
#[inline(always)]
fn client_zone(snap: &Snapshot, plan: &ServicePlan, client: IpAddr) -> Option<ZoneId> {
    if plan.zonal {
        snap.rules.client_zone(client)
    } else {
        None
    }
}

/// Whether `info` is an ICMP (IPv4) or ICMPv6 echo request.
fn is_echo_request(info: &PacketInfo) -> bool {
    info.icmp.is_some_and(|i| {
        (info.proto == ipproto::ICMP && i.msg_type == wire::icmpv4::msg::ECHO_REQUEST)
            || (info.proto == ipproto::ICMPV6 && i.msg_type == wire::icmpv6::msg::ECHO_REQUEST)
    })
}

/// ICMPv6 messages of the link that the host's kernel needs (RFC 4861 router
/// and neighbor discovery and redirects, RFC 2710/3810 multicast listener
/// discovery). They go to the host unless the data plane answers them itself
/// (a neighbor solicitation for a VIP or an own address), never to the
/// "not ours" drop.
pub(super) const fn is_link_control(msg_type: u8) -> bool {
    matches!(msg_type, 130..=137 | 143)
}

/// Flow-table class of an IP protocol.
pub(super) fn class_of(proto: u8) -> ProtoClass {
    match proto {
        TCP => ProtoClass::Tcp,
        UDP => ProtoClass::Udp,
        _ => ProtoClass::Other,
    }
}
