//! Explaining a flow's decision without forwarding it (`spillway
//! simulate`): which rule, service and backend a flow's first packet would
//! take, and why.
//!
//! Nothing here decides anything of its own. A synthetic packet of the flow
//! goes through the pipeline's own passes on a throwaway [`Pipeline`] (its
//! counters, cookie generator and rule run are discarded): `classify` (rule
//! selection, the flow key and hash, the client's zone), then the flow
//! table's read-only `lookup`, then the `finish` pass's own decisions —
//! whether the entry is followed (`Pipeline::follows`), the backend of a new
//! flow ([`crate::snapshot::ServicePlan::pick_detail`], which
//! [`crate::snapshot::ServicePlan::pick`] is), the delivery
//! (`Pipeline::deliver`) and the no-backend answer (`no_backend`, on the
//! synthetic packet). What is left
//! out is what changes state: no entry is inserted, touched, flagged or
//! removed, no shared counter moves, no real packet is touched.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use config::compiled::ZoneId;
use flowtable::{EntryFlags, FlowTable, Tick};
use wire::buf::MemBuf;
use wire::checksum;
use wire::ip::proto::{ICMP, ICMPV6};
use wire::tcp::Flags;

use super::answer::no_backend;
use super::flow::answerable;
use super::{Ctx, Pending, Pipeline, Stage, TCP, UDP, Verdict};
use crate::snapshot::{Pick, Snapshot};

/// The flow to explain: its first packet's addresses, protocol and ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probe {
    /// The client.
    pub src: IpAddr,
    /// The destination (a VIP; any address through a gateway rule).
    pub dst: IpAddr,
    /// IP protocol number (ICMP is an echo request: 1 over IPv4, 58 over
    /// IPv6).
    pub proto: u8,
    /// Source port (TCP and UDP).
    pub sport: u16,
    /// Destination port (TCP and UDP).
    pub dport: u16,
    /// TCP: an ACK of an established connection instead of a bare SYN.
    pub established: bool,
}

/// What became of the flow's entry in the flow table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryUse {
    /// No entry: a new flow.
    None,
    /// An entry pins the flow to its backend, which still takes it.
    Pinned {
        /// The entry's backend slot.
        slot: u32,
        /// Its flags (half-open, established, unconfirmed, …).
        flags: EntryFlags,
    },
    /// An entry exists but its backend no longer takes the flow (gone,
    /// unhealthy beyond persistence, or a SYN on a closed or inactive
    /// backend's tuple): it would be replaced by a new pick.
    Stale {
        /// The entry's backend slot.
        slot: u32,
        /// Its flags.
        flags: EntryFlags,
    },
}

/// A flow's decision, explained.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Explanation {
    /// What would be done with its packet.
    pub verdict: Verdict,
    /// The child rule (index into `Compiled::children`) that took it.
    pub child: Option<usize>,
    /// The backend service (index into `Compiled::services`).
    pub service: Option<usize>,
    /// The gateway endpoint (index into [`Snapshot::gateways`]) the packet
    /// was taken to come from, when a gateway rule took it (M31).
    pub gateway: Option<usize>,
    /// The flow's hash (its flow-table key's, and Maglev's).
    pub hash: u64,
    /// The client's zone, when the service has zonal affinity (M27).
    pub client_zone: Option<ZoneId>,
    /// The flow table's part.
    pub entry: EntryUse,
    /// How a new flow's backend was picked (region, table, slot); `None`
    /// for a pinned flow or without an eligible backend.
    pub pick: Option<Pick>,
    /// The backend slot the packet would go to.
    pub backend: Option<u32>,
    /// The flow's key in the flow table, when a rule took it.
    pub key: Option<flowtable::FlowKey>,
}

impl Pipeline {
    /// Explains what the pipeline would do with `probe`'s first packet
    /// against `snap` and `flows` at tick `now`, changing nothing: see the
    /// module's documentation.
    pub fn explain(snap: &Snapshot, flows: &FlowTable, now: Tick, probe: &Probe) -> Explanation {
        let mut w = Pipeline::new(0, snap.rules.children());
        // Through a gateway rule (M31) the packet must come from one of
        // the rule's endpoints: the first that takes the protocol stands
        // for them. Its source MAC is read only for a destination no
        // other rule takes.
        let gateway = snap
            .gateways
            .iter()
            .position(|h| h.takes(probe.proto) && h.mac != [0; 6]);
        let (src_mac, port) = gateway
            .and_then(|g| snap.gateways.get(g))
            .map_or(([0; 6], 0), |h| (h.mac, h.port));
        w.set_rx_port(port);
        w.load_port_mac(snap);
        let mut frame = [0u8; 128];
        let len = synthetic_frame(&mut frame, w.reply_mac(snap), src_mac, probe);
        let mut storage = [0u8; 512];
        let cx = Ctx { snap, flows, now };
        w.explain_frame(cx, port, frame.get(..len).unwrap_or(&[]), &mut storage)
    }

    /// What the pipeline would do with `frame`, received on port `port`,
    /// done on this throwaway worker (its counters and budgets are
    /// spent, nothing else): `storage` holds a copy of the frame, with
    /// 256 bytes of headroom and room to grow, or the frame is explained
    /// as malformed.
    pub(super) fn explain_frame(
        &mut self,
        cx: Ctx<'_>,
        port: usize,
        frame: &[u8],
        storage: &mut [u8],
    ) -> Explanation {
        let w = self;
        let Ctx { snap, flows, now } = cx;
        w.set_rx_port(port);
        w.load_port_mac(snap);
        let mut out = Explanation {
            verdict: Verdict::Drop(crate::DropReason::Malformed),
            child: None,
            service: None,
            gateway: None,
            hash: 0,
            client_zone: None,
            entry: EntryUse::None,
            pick: None,
            backend: None,
            key: None,
        };
        let Ok(mut pkt) = MemBuf::new(storage, 256, frame) else {
            return out;
        };
        let mut key = flowtable::FlowKey([0; 5]);
        let mut p = Pending::BLANK;
        let p = match w.classify(cx, &mut pkt, &mut key, &mut p) {
            Stage::Done(o) => {
                out.verdict = w.count(o);
                return out;
            }
            Stage::Lookup => p,
        };
        out.key = Some(key);
        out.child = Some(p.child);
        out.service = Some(p.svc);
        out.gateway = usize::from(p.gateway).checked_sub(1);
        out.hash = p.hash;
        let Some(plan) = snap.plan_for(p.child, p.svc) else {
            out.verdict = Verdict::Drop(crate::DropReason::NoRule);
            return out;
        };
        out.client_zone = super::flow::client_zone(snap, plan, &key, &p);
        // Read-only: `lookup` neither touches nor confirms the entry.
        let hit = flows.lookup(&key, flows.hash(&key));
        if hit.is_none()
            && let Err(reason) = w.source_ok(snap, &pkt, &p)
        {
            out.verdict = w.count(super::Outcome::Drop(reason));
            return out;
        }
        let chosen = match hit {
            Some(hit) if w.follows(snap, plan, &hit, &p, now) => {
                out.entry = EntryUse::Pinned {
                    slot: hit.entry.backend,
                    flags: hit.entry.flags,
                };
                Some((hit.entry.backend, hit.entry.cookie))
            }
            stale => {
                if let Some(hit) = stale {
                    out.entry = EntryUse::Stale {
                        slot: hit.entry.backend,
                        flags: hit.entry.flags,
                    };
                }
                // `Pipeline::new_flow`'s pick (budgets and the insert aside).
                out.pick = plan.pick_detail(p.hash, out.client_zone);
                out.pick.map(|pk| (pk.slot, 0))
            }
        };
        let Some((slot, cookie)) = chosen else {
            let o = no_backend(w.reply_mac(snap), plan, &mut pkt, answerable(&p));
            out.verdict = w.count(o);
            return out;
        };
        out.backend = Some(slot);
        // `Pipeline::finish`'s delivery, on the synthetic packet (a new
        // flow's cookie would be random: 0 stands for it).
        let o = w.deliver(snap, plan, &p, (slot, cookie), &mut pkt);
        out.verdict = w.count(o);
        out
    }
}

/// Writes the first packet of `probe`'s flow (Ethernet, IP, TCP SYN or
/// ACK, UDP, ICMP echo request, or a bare IP header) into `buf`; its length.
fn synthetic_frame(
    buf: &mut [u8; 128],
    dst_mac: [u8; 6],
    src_mac: [u8; 6],
    probe: &Probe,
) -> usize {
    buf[0..6].copy_from_slice(&dst_mac);
    buf[6..12].copy_from_slice(&src_mac);
    let v6 = matches!(
        (probe.src, probe.dst),
        (_, IpAddr::V6(_)) | (IpAddr::V6(_), _)
    );
    let proto = match probe.proto {
        ICMP | ICMPV6 if v6 => ICMPV6,
        ICMP | ICMPV6 => ICMP,
        p => p,
    };
    let l4_len: u16 = match proto {
        TCP => 20,
        UDP | ICMP | ICMPV6 => 8,
        _ => 0,
    };
    let ip_len = if v6 { 40 } else { 20 };
    let l3 = 14;
    let l4 = l3 + ip_len;
    let l4_end = l4 + usize::from(l4_len);
    {
        let h = &mut buf[l4..l4_end];
        match proto {
            TCP => {
                h[0..2].copy_from_slice(&probe.sport.to_be_bytes());
                h[2..4].copy_from_slice(&probe.dport.to_be_bytes());
                h[4..8].copy_from_slice(&1u32.to_be_bytes());
                h[12] = 5 << 4;
                let flags = if probe.established {
                    Flags::ACK
                } else {
                    Flags::SYN
                };
                h[13] = u8::try_from(flags.0).unwrap_or(0);
                h[14..16].copy_from_slice(&65535u16.to_be_bytes());
            }
            UDP => {
                h[0..2].copy_from_slice(&probe.sport.to_be_bytes());
                h[2..4].copy_from_slice(&probe.dport.to_be_bytes());
                h[4..6].copy_from_slice(&8u16.to_be_bytes());
            }
            ICMP => h[0] = 8,
            ICMPV6 => h[0] = 128,
            _ => {}
        }
    }
    let (src6, dst6) = (v6_of(probe.src), v6_of(probe.dst));
    if v6 {
        buf[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
        let h = &mut buf[l3..l4];
        h[0] = 0x60;
        h[4..6].copy_from_slice(&l4_len.to_be_bytes());
        h[6] = proto;
        h[7] = 64;
        h[8..24].copy_from_slice(&src6.octets());
        h[24..40].copy_from_slice(&dst6.octets());
    } else {
        buf[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        let (s, d) = (v4_of(probe.src), v4_of(probe.dst));
        let h = &mut buf[l3..l4];
        h[0] = 0x45;
        h[2..4].copy_from_slice(&(20 + l4_len).to_be_bytes());
        h[6] = 0x40; // DF
        h[8] = 64;
        h[9] = proto;
        h[12..16].copy_from_slice(&s.octets());
        h[16..20].copy_from_slice(&d.octets());
        let c = checksum::checksum(h);
        h[10..12].copy_from_slice(&c.to_be_bytes());
    }
    // The L4 checksum, over the pseudo header where it has one.
    let len16 = l4_len;
    let acc = match proto {
        ICMP => Some(0),
        _ if l4_len == 0 => None,
        _ if v6 => Some(checksum::pseudo_v6(&src6, &dst6, proto, u32::from(len16))),
        _ => Some(checksum::pseudo_v4(
            &v4_of(probe.src),
            &v4_of(probe.dst),
            proto,
            len16,
        )),
    };
    if let Some(acc) = acc {
        let at = match proto {
            TCP => 16,
            UDP => 6,
            _ => 2,
        };
        let h = &mut buf[l4..l4_end];
        let c = !checksum::fold(checksum::add(acc, h));
        let c = if proto == UDP && c == 0 { 0xffff } else { c };
        h[at..at + 2].copy_from_slice(&c.to_be_bytes());
    }
    l4_end
}

fn v6_of(a: IpAddr) -> Ipv6Addr {
    match a {
        IpAddr::V6(a) => a,
        IpAddr::V4(a) => a.to_ipv6_mapped(),
    }
}

fn v4_of(a: IpAddr) -> Ipv4Addr {
    match a {
        IpAddr::V4(a) => a,
        IpAddr::V6(a) => a.to_ipv4_mapped().unwrap_or(Ipv4Addr::UNSPECIFIED),
    }
}
