//! The first pass: parse a packet, select its rule (M3), compute its
//! flow key and hash. Packets that need no flow entry end here with their
//! outcome (answered, handed to the host, dropped); the others leave their
//! key and [`Pending`] for the flow pass.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use flowtable::ProtoClass;
use wire::buf::{PacketBuf, RxChecksum};
use wire::encap::{DecapConfig, TunnelKind, parse_tunnel, strip_outer};
use wire::error::DecapError;
use wire::ethernet::{self, ethertype};
use wire::flow::FlowKey;
use wire::geneve::OptionIds;
use wire::ip::{is_mapped_v4, is_martian_v4, is_martian_v6, proto as ipproto, unmap};
use wire::packet::{
    Frame, IcmpInfo, IpVersion, PacketInfo, SourceRoute, V4Flow, V6Flow, parse_frame, parse_ip,
    parse_v4_flow, parse_v6_flow,
};
use wire::{ipv4, ipv6};

use super::{Ctx, Inner, Outcome, Pending, Pipeline, RuleRun, Stage, TCP, UDP};
use crate::counters::DropReason;
use crate::snapshot::{ServicePlan, Snapshot};

/// An untagged Ethernet header's length, as [`Inner`] stores it.
#[allow(clippy::cast_possible_truncation, reason = "14 bytes")]
const ETH_LEN: u8 = ethernet::HEADER_LEN as u8;

impl Pipeline {
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
        let nic = pkt.rx_ipv4_checksum();
        self.classify_frame(cx, pkt, key, pend, nic)
    }

    /// [`Pipeline::classify`] after the counting: also what a decapsulated
    /// packet goes through, exactly as if it had arrived directly (M49),
    /// its IPv4 header checksum unverified (`nic`: what the NIC found of
    /// the frame's as received).
    ///
    /// The fast parsers' frames take the fast path only when they pass the
    /// edge checks (M55) every packet must — to this port's MAC, TTL above
    /// 0, a right IPv4 header checksum — told by a few fixed-offset reads
    /// (their sources are checked when a flow entry is made,
    /// [`Pipeline::source_ok`]); any other frame takes [`Pipeline::general`],
    /// which makes every check and names the reason of a drop.
    #[inline(always)]
    fn classify_frame<B: PacketBuf>(
        &mut self,
        cx: Ctx<'_>,
        pkt: &mut B,
        key: &mut flowtable::FlowKey,
        pend: &mut Pending,
        nic: RxChecksum,
    ) -> Stage {
        let data = pkt.data();
        if let Some(f) = parse_v4_flow(data) {
            if self.clean_v4(data, &f, nic) {
                return self.v4_flow(cx, pkt, &f, key, pend);
            }
        } else if let Some(f) = parse_v6_flow(data)
            && self.clean_v6(data, &f)
        {
            return self.v6_flow(cx, pkt, &f, key, pend);
        }
        self.general(cx, pkt, key, pend, nic)
    }

    /// Whether a frame of [`parse_v4_flow`] passes the edge checks (M55)
    /// that every packet must: to this port's MAC (one 8-byte compare), TTL
    /// not 0, a right header checksum unless the NIC verified it. Its
    /// source is checked where a flow entry is about to be made
    /// ([`Pipeline::source_ok`]): a packet from a martian source, a VIP or an
    /// own address never finds an entry, since none is made for it.
    #[inline(always)]
    fn clean_v4(&self, data: &[u8], f: &V4Flow, nic: RxChecksum) -> bool {
        // Read after the parser's reads (whole words: see `header_sum`).
        let header = data
            .get(ethernet::HEADER_LEN..ethernet::HEADER_LEN + ipv4::MIN_HEADER_LEN)
            .and_then(|h| <&[u8; 20]>::try_from(h).ok());
        let checksum_ok = match nic {
            RxChecksum::Good => true,
            RxChecksum::Bad => false,
            RxChecksum::Unknown => {
                header.is_some_and(|h| self.checksum_test.verifies(ipv4::header_sum(h)))
            }
        };
        self.to_port_mac(data) && f.ttl != 0 && checksum_ok
    }

    /// [`Pipeline::clean_v4`] for a frame of [`parse_v6_flow`]: to this
    /// port's MAC, hop limit not 0.
    #[inline(always)]
    fn clean_v6(&self, data: &[u8], f: &V6Flow) -> bool {
        self.to_port_mac(data) && f.hop_limit != 0
    }

    /// Whether `frame` is to this port's MAC: its first 8 bytes (the parsers
    /// have checked there are more), the source MAC's two shifted out,
    /// against the MAC kept shifted the same way.
    #[inline(always)]
    fn to_port_mac(&self, frame: &[u8]) -> bool {
        frame
            .first_chunk::<8>()
            .is_some_and(|b| u64::from_le_bytes(*b) << 16 == self.rx_mac)
    }

    /// Every frame the fast path does not take: the edge checks (M55) in
    /// the order a router makes them — the port's VLAN (none), the
    /// destination MAC, the IP header (checksum, TTL, source routes), the
    /// source address — each drop under its own reason; then ARP, neighbour
    /// discovery and the IP packet's rule. Frames to the host (own
    /// addresses) pass the same checks first.
    #[inline(never)]
    fn general<B: PacketBuf>(
        &mut self,
        cx: Ctx<'_>,
        pkt: &mut B,
        key: &mut flowtable::FlowKey,
        pend: &mut Pending,
        nic: RxChecksum,
    ) -> Stage {
        let snap = cx.snap;
        let Some(l2) = pkt.data().first_chunk::<{ ethernet::HEADER_LEN }>() else {
            return Stage::Done(Outcome::Drop(DropReason::Malformed));
        };
        if matches!(
            u16::from_be_bytes([l2[12], l2[13]]),
            ethertype::VLAN | ethertype::QINQ
        ) {
            return Stage::Done(Outcome::Drop(DropReason::VlanUntaggedPort));
        }
        let Some(dst) = self.l2_destination(l2) else {
            return Stage::Done(self.foreign_l2(snap, pkt.data()));
        };
        let foreign = Outcome::Drop(DropReason::L2ForeignDst);
        Stage::Done(match parse_frame(pkt.data()) {
            Err(_) => Outcome::Drop(DropReason::Malformed),
            Ok(Frame::Arp(eth, req)) => match dst {
                L2Dst::Port | L2Dst::Broadcast => self.arp(snap, pkt, &eth, &req),
                L2Dst::NdMulticast => foreign,
            },
            Ok(Frame::Other(_)) => match dst {
                L2Dst::Port => Outcome::ToHost,
                L2Dst::Broadcast | L2Dst::NdMulticast => foreign,
            },
            Ok(Frame::Ip(_, info)) => {
                if dst == L2Dst::Broadcast {
                    return Stage::Done(foreign);
                }
                if let Err(reason) = ip_header_ok(snap, pkt.data(), &info, nic) {
                    return Stage::Done(Outcome::Drop(reason));
                }
                match info.icmp {
                    Some(icmp)
                        if info.version == IpVersion::V6
                            && info.proto == ipproto::ICMPV6
                            && is_link_control(icmp.msg_type) =>
                    {
                        self.link_control(snap, pkt, &info, icmp.msg_type)
                    }
                    _ if dst == L2Dst::NdMulticast => self.foreign_l2(snap, pkt.data()),
                    _ if martian_source(snap, &info) => Outcome::Drop(DropReason::MartianSource),
                    _ => return self.ip(cx, pkt, &info, key, pend),
                }
            }
        })
    }

    /// A frame to a MAC this port takes nothing from (M55), but for the
    /// VRRP groups' advertisements on their ports: a copy to the
    /// management core, the frame to the host.
    #[cold]
    #[inline(never)]
    fn foreign_l2(&mut self, snap: &Snapshot, frame: &[u8]) -> Outcome {
        if snap.vrrp_ports.contains(&self.rx_port) && wire::vrrp::looks_like(frame) {
            if let Some(q) = &self.neighbours {
                q.observe_vrrp(self.rx_port, frame, &mut self.counters);
            }
            return Outcome::ToHost;
        }
        Outcome::Drop(DropReason::L2ForeignDst)
    }

    /// What a frame's destination MAC is to this port (`None`: another
    /// host's unicast, or a multicast the port takes nothing from).
    fn l2_destination(&self, l2: &[u8; ethernet::HEADER_LEN]) -> Option<L2Dst> {
        if self.to_port_mac(l2) {
            Some(L2Dst::Port)
        } else if l2[..6] == [0xff; 6] {
            Some(L2Dst::Broadcast)
        } else if l2[..2] == [0x33, 0x33] {
            // IPv6 multicast (RFC 2464 §7): solicited-node, all-nodes, …
            Some(L2Dst::NdMulticast)
        } else {
            None
        }
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
        let src = match info.version {
            IpVersion::V4 => unmap(&info.src),
            IpVersion::V6 => IpAddr::V6(Ipv6Addr::from(info.src)),
        };
        // An ICMP error to a VIP is routed by the packet it quotes (which the
        // backend sent from the VIP), so PMTU discovery reaches the flow's
        // backend (M13); its client is the quoted packet's destination, as a
        // stateful firewall relates the error to that client's flow. A real
        // fragment can never prove its ports: it takes only an all-port rule
        // (M13, `RuleIndex::lookup_fragment`), and all fragments of a
        // datagram take one path.
        let (proto, port, fragment, is_icmp_error, client) = match &info.icmp {
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
                    unmap(&q.dst),
                )
            }
            _ => (
                info.proto,
                info.ports.map(|(_, d)| d),
                info.fragment.is_fragment(),
                false,
                src,
            ),
        };
        let (child, svc, plan) = match self.select(snap, dst, proto, port, fragment, pkt.len()) {
            Ok(x) => x,
            Err(Outcome::ToHost) => {
                let outer = OuterFacts {
                    src,
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
        // Off the fast path, every packet's client is asked (the fast path
        // asks once a flow, `Pipeline::source_ok`).
        if !snap.rules.admits(child, client) {
            self.child_drop(child, DropReason::SourceNotAllowed);
            return Stage::Done(Outcome::Drop(DropReason::SourceNotAllowed));
        }
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
            inner: Inner::of(info, pkt.data()),
            tunnelled: false,
            gateway: 0,
            reversed: false,
        };
        Stage::Lookup
    }

    /// [`Pipeline::ip`] for a packet of the fast path ([`parse_v4_flow`]):
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
        let (child, svc, key_word, flow_tag, class) = match &mut self.last_rule {
            Some(run) if run.dest == dest => {
                run.packets += 1;
                run.bytes += len as u64;
                (run.child, run.svc, run.key_word, run.flow_tag, run.class)
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
                            // Both ends of a gateway flow find its entry.
                            if is_martian_v4(f.src) {
                                return Stage::Done(Outcome::Drop(DropReason::MartianSource));
                            }
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
                    class: class_of(f.proto),
                    packets: 0,
                    bytes: 0,
                };
                self.end_rule_run();
                self.last_rule = Some(run);
                (child, svc, run.key_word, run.flow_tag, run.class)
            }
        };
        let words =
            FlowKey::pack_v4_with(f.src, f.dst, f.proto, (f.src_port, f.dst_port), key_word);
        let hash = store_key(words, flow_tag, key_out);
        *pend = Pending::fast(
            f.tcp_flags,
            (f.proto, class),
            (child, svc),
            hash,
            Inner {
                l2_len: ETH_LEN,
                v6: false,
                ds: f.ds,
                ip_len: u32::from(f.total_len),
            },
        );
        Stage::Lookup
    }

    /// [`Pipeline::ip`] for an IPv6 packet of the fast path
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
                // Both ends of a gateway flow find its entry.
                if is_martian_v6(&f.src) {
                    return Stage::Done(Outcome::Drop(DropReason::MartianSource));
                }
                return self.gateway_frame(cx, pkt, key_out, pend);
            }
            Err(o) => return Stage::Done(o),
        };
        let words = FlowKey::pack_v6_with(
            &f.src,
            &f.dst,
            f.proto,
            (f.src_port, f.dst_port),
            plan.affinity.last_word(),
        );
        let hash = store_key(words, plan.flow_tag, key_out);
        *pend = Pending::fast(
            f.tcp_flags,
            (f.proto, class_of(f.proto)),
            (child, svc),
            hash,
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
        // A fragment matches as a packet without ports
        // (`RuleIndex::lookup_fragment`); a packet no rule takes is told
        // apart by whether its destination is a VIP, from the same search.
        let m = match snap.rules.select(dst, proto, port.filter(|_| !fragment)) {
            Ok(m) => m,
            Err(vip) => {
                return Err(if vip && fragment {
                    Outcome::Drop(DropReason::FragmentNoRule)
                } else if vip {
                    Outcome::Drop(DropReason::NoRule)
                } else if snap.is_own(dst) {
                    Outcome::ToHost
                } else if snap.standby.is_empty() {
                    // Gateway traffic comes this way: no call for it.
                    Outcome::Drop(DropReason::NotOurs)
                } else {
                    not_ours(snap, dst)
                });
            }
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

impl Pipeline {
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
        self.own_not_returned(cx, pkt, outer, key, pend)
    }

    /// [`Pipeline::own`] for what no appliance returned: a tunnel or a packet
    /// for the host. Apart, so that the returns' way stays as it was.
    #[inline(never)]
    fn own_not_returned<B: PacketBuf>(
        &mut self,
        cx: Ctx<'_>,
        pkt: &mut B,
        outer: OuterFacts,
        key: &mut flowtable::FlowKey,
        pend: &mut Pending,
    ) -> Stage {
        let snap = cx.snap;
        // The fast path leaves the source's check to packets without a flow
        // entry (M55); to the host or a tunnel there is none.
        if martian(snap, outer.src) && !probe_answer(snap, outer.src, outer.proto, outer.dst_port) {
            return Stage::Done(Outcome::Drop(DropReason::MartianSource));
        }
        // Tunnelled by a remote gateway endpoint (M31): its inner packet is
        // that endpoint's gateway ingress. A later fragment shows no port.
        if outer.proto == UDP
            && let Some((index, hop)) = snap.remote_gateway(outer.src)
            && hop
                .remote
                .as_ref()
                .is_some_and(|t| outer.dst_port == Some(t.geneve_port) || outer.fragment)
        {
            return self.gateway_remote(cx, pkt, index, outer.fragment, key, pend);
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
                // The NIC's checksum verdict was the outer header's.
                let stage = self.classify_frame(cx, pkt, key, pend, RxChecksum::Unknown);
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

/// What a frame's destination MAC is to the port it arrived on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum L2Dst {
    /// The port's own MAC.
    Port,
    /// Broadcast: ARP only.
    Broadcast,
    /// An IPv6 multicast MAC (`33:33:…`): neighbour and multicast listener
    /// discovery only.
    NdMulticast,
}

/// The IP header checks of the edge (M55), in order: the IPv4 header
/// checksum (the NIC's verdict where it gives one), TTL or hop limit 0,
/// source routes (IPv4 LSRR/SSRR, IPv6 RH0, an SRH sending the packet on to
/// what is not a VIP of this node, any other routing header with segments
/// left).
pub(super) fn ip_header_ok(
    snap: &Snapshot,
    frame: &[u8],
    info: &PacketInfo,
    nic: RxChecksum,
) -> Result<(), DropReason> {
    if info.version == IpVersion::V4 {
        let header = frame.get(info.l3_offset as usize..info.l4_offset as usize);
        let right = match nic {
            RxChecksum::Good => true,
            RxChecksum::Bad => false,
            RxChecksum::Unknown => {
                header.is_some_and(|h| ipv4::Packet::new_unchecked(h).verify_checksum())
            }
        };
        if !right {
            return Err(DropReason::Ipv4BadChecksum);
        }
    }
    if info.ttl == 0 {
        return Err(DropReason::TtlZero);
    }
    match info.source_route {
        None => Ok(()),
        Some(SourceRoute::V4(_)) => Err(DropReason::IpSourceRoute),
        Some(SourceRoute::V6 { routing_type, .. }) if routing_type == ipv6::routing::TYPE0 => {
            Err(DropReason::Ipv6Rh0)
        }
        // RFC 8200 §4.4: a routing header with no segment left is ignored.
        Some(SourceRoute::V6 {
            segments_left: 0, ..
        }) => Ok(()),
        Some(SourceRoute::V6 {
            routing_type,
            offset,
            len,
            ..
        }) if routing_type == ipv6::routing::SRH => {
            let srh = frame.get(offset as usize..offset as usize + len as usize);
            let segments = srh.and_then(|h| ipv6::srh_segments_left(h).ok());
            let Some(mut segments) = segments else {
                return Err(DropReason::Malformed);
            };
            if segments.all(|s| snap.rules.is_vip(IpAddr::V6(Ipv6Addr::from(s)))) {
                Ok(())
            } else {
                Err(DropReason::Ipv6SrhForeign)
            }
        }
        Some(SourceRoute::V6 { .. }) => Err(DropReason::IpSourceRoute),
    }
}

/// Whether the source of a packet the general path parsed is martian
/// ([`martian`]), unless it answers a probe of the host's ([`probe_answer`]).
/// IPv4-mapped IPv6 sources are left to [`Pipeline::ip`]'s `bad_address`.
pub(super) fn martian_source(snap: &Snapshot, info: &PacketInfo) -> bool {
    let (src, dst) = match info.version {
        IpVersion::V4 => (unmap(&info.src), unmap(&info.dst)),
        IpVersion::V6 => (
            IpAddr::V6(Ipv6Addr::from(info.src)),
            IpAddr::V6(Ipv6Addr::from(info.dst)),
        ),
    };
    martian(snap, src)
        && !(snap.is_own(dst) && probe_answer(snap, src, info.proto, info.ports.map(|p| p.1)))
}

/// Whether a packet from `src` to an own address answers one of the
/// host's health probes through a VIP (M52): TCP from that VIP to the
/// probe's source port, which the backend sends back directly. The one
/// packet from a VIP that comes from outside.
fn probe_answer(snap: &Snapshot, src: IpAddr, proto: u8, dst_port: Option<u16>) -> bool {
    proto == TCP
        && dst_port
            .and_then(|p| snap.probe_steer(p))
            .is_some_and(|s| s.vip == wire::ip::to_mapped(&src))
}

/// Whether `src` may not be the source of a packet from outside (M55):
/// never a source on the wire ([`is_martian_v4`], [`is_martian_v6`]), or
/// one of this node's VIPs or own addresses — such a packet has a forged
/// source (its answer would go to this node, or a backend would answer
/// itself).
pub(super) fn martian(snap: &Snapshot, src: IpAddr) -> bool {
    let never = match src {
        IpAddr::V4(a) => is_martian_v4(u32::from(a)),
        IpAddr::V6(a) => is_martian_v6(&a.octets()),
    };
    never || snap.rules.is_vip(src) || snap.is_own(src)
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

/// A packet to an address that is neither a served VIP nor the node's own:
/// a VRRP backup's VIP (the master serves it), or not ours at all.
#[cold]
#[inline(never)]
fn not_ours(snap: &Snapshot, dst: IpAddr) -> Outcome {
    if snap.standby.binary_search(&dst).is_ok() {
        Outcome::Drop(DropReason::VrrpBackup)
    } else {
        Outcome::Drop(DropReason::NotOurs)
    }
}
