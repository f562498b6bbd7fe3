//! Live tracing of the pipeline's decisions (`spillway trace`): the
//! management core arms a [`Tracer`] with a [`TraceFilter`]; a worker that
//! sees it armed processes its bursts one packet at a time through the
//! same passes (`Pipeline::process_traced`), noting for each packet the
//! filter takes what each pass decided ([`TraceRecord`]) into its own
//! bounded queue; the management core drains the queues and words the
//! records as `simulate` words its explanations.
//!
//! Off, it costs a worker one test of [`Tracer::armed`] per burst (a
//! relaxed load of one word and a branch that is never taken). Armed, the
//! cost is bounded: at most [`TraceFilter::count`] records are taken in
//! all, the queues never wait (a full one loses the record, counted), and
//! the management core disarms it after its time.

use std::net::IpAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use arc_swap::ArcSwapOption;
use crossbeam::queue::ArrayQueue;

use crate::counters::DropReason;
use crate::pipeline::Verdict;
use crate::pipeline::explain::Explanation;

/// Records a worker's queue holds between two drains of the management
/// core.
pub const TRACE_QUEUE: usize = 1024;

/// Records a trace takes at most.
pub const MAX_TRACE_COUNT: u32 = 10_000;

/// An address and prefix length to match.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddrMatch {
    /// The network (IPv4 addresses as such, never mapped).
    pub addr: IpAddr,
    /// Its prefix length.
    pub len: u8,
}

impl AddrMatch {
    /// Whether `a` is in the prefix.
    pub fn contains(&self, a: IpAddr) -> bool {
        match (self.addr, a.to_canonical()) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let shift = 32 - u32::from(self.len.min(32));
                u32::from(n).checked_shr(shift) == u32::from(a).checked_shr(shift)
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let shift = 128 - u32::from(self.len.min(128));
                u128::from(n).checked_shr(shift) == u128::from(a).checked_shr(shift)
            }
            _ => false,
        }
    }
}

/// Which outcomes a trace keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutcomeMatch {
    /// Dropped, for any reason.
    AnyDrop,
    /// Dropped for this reason.
    Drop(DropReason),
    /// Not dropped.
    NotDropped,
}

/// What a packet must carry to be taken: every field set must match.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HeadMatch {
    /// Source address or prefix.
    pub src: Option<AddrMatch>,
    /// Destination address or prefix.
    pub dst: Option<AddrMatch>,
    /// Either address.
    pub host: Option<AddrMatch>,
    /// IP protocol.
    pub proto: Option<u8>,
    /// Source port.
    pub sport: Option<u16>,
    /// Destination port.
    pub dport: Option<u16>,
    /// Either port.
    pub port: Option<u16>,
}

/// Which packets a trace takes: every field set must match.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TraceFilter {
    /// What the packet carries.
    pub head: HeadMatch,
    /// Child rules (indices into the snapshot's children) whose packets
    /// are taken: a rule's, resolved against snapshot `generation`.
    pub children: Option<(u32, Vec<usize>)>,
    /// The outcome.
    pub outcome: Option<OutcomeMatch>,
    /// Records to take in all.
    pub count: u32,
}

/// What a packet carried, as it arrived (before the pipeline rewrote it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketHead {
    /// Its length.
    pub len: u16,
    /// IP source (`None`: not IP, e.g. ARP).
    pub src: Option<IpAddr>,
    /// IP destination.
    pub dst: Option<IpAddr>,
    /// IP protocol (0 when not IP).
    pub proto: u8,
    /// Ports (TCP and UDP, not a later fragment).
    pub ports: Option<(u16, u16)>,
    /// TCP flags.
    pub tcp_flags: u8,
    /// The EtherType when it is not IP.
    pub ethertype: u16,
}

impl PacketHead {
    /// The head of `frame` (the outer packet: a tunnel's own addresses).
    pub fn of(frame: &[u8]) -> PacketHead {
        let len = u16::try_from(frame.len()).unwrap_or(u16::MAX);
        let mut h = PacketHead {
            len,
            src: None,
            dst: None,
            proto: 0,
            ports: None,
            tcp_flags: 0,
            ethertype: 0,
        };
        match wire::packet::parse_frame(frame) {
            Ok(wire::packet::Frame::Ip(_, p)) => {
                h.src = Some(IpAddr::from(p.src).to_canonical());
                h.dst = Some(IpAddr::from(p.dst).to_canonical());
                h.proto = p.proto;
                h.ports = p.ports;
                h.tcp_flags = u8::try_from(p.tcp_flags.0 & 0xff).unwrap_or(0);
            }
            Ok(wire::packet::Frame::Arp(e, _) | wire::packet::Frame::Other(e)) => {
                h.ethertype = e.ethertype;
            }
            Err(_) => {
                h.ethertype = frame
                    .get(12..14)
                    .map_or(0, |b| u16::from_be_bytes([b[0], b[1]]));
            }
        }
        h
    }
}

impl HeadMatch {
    /// Whether a packet with `head` matches.
    pub fn takes(&self, head: &PacketHead) -> bool {
        let addr = |m: &Option<AddrMatch>, a: Option<IpAddr>| match m {
            None => true,
            Some(m) => a.is_some_and(|a| m.contains(a)),
        };
        let port = |want: Option<u16>, got: Option<u16>| want.is_none() || want == got;
        addr(&self.src, head.src)
            && addr(&self.dst, head.dst)
            && (self.host.is_none() || addr(&self.host, head.src) || addr(&self.host, head.dst))
            && self
                .proto
                .is_none_or(|p| p == head.proto && head.src.is_some())
            && port(self.sport, head.ports.map(|p| p.0))
            && port(self.dport, head.ports.map(|p| p.1))
            && (self.port.is_none()
                || port(self.port, head.ports.map(|p| p.0))
                || port(self.port, head.ports.map(|p| p.1)))
    }
}

impl TraceFilter {
    /// Whether a packet with `head` may be taken (before it is processed).
    pub fn takes_head(&self, head: &PacketHead) -> bool {
        self.head.takes(head)
    }

    /// Whether a processed packet's record is kept.
    pub fn takes_record(&self, r: &TraceRecord) -> bool {
        let rule = match &self.children {
            None => true,
            Some((generation, children)) => {
                *generation == r.generation
                    && r.decision.child.is_some_and(|c| children.contains(&c))
            }
        };
        let outcome = match (self.outcome, r.decision.verdict) {
            (None, _) => true,
            (Some(OutcomeMatch::AnyDrop), Verdict::Drop(_)) => true,
            (Some(OutcomeMatch::Drop(want)), Verdict::Drop(got)) => want == got,
            (Some(OutcomeMatch::NotDropped), v) => !matches!(v, Verdict::Drop(_)),
            _ => false,
        };
        rule && outcome
    }
}

/// One packet's decision, as each pass made it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceRecord {
    /// The worker.
    pub worker: u16,
    /// The port it arrived on (index into `[[ports]]`).
    pub port: u16,
    /// The snapshot generation it was decided with.
    pub generation: u32,
    /// What it carried.
    pub head: PacketHead,
    /// The decision, as `simulate` explains one: its verdict the packet's
    /// real one, its backend the one the packet went to.
    pub decision: Explanation,
    /// Whether it created a flow entry.
    pub created: bool,
}

/// The trace shared by the management core and the workers.
#[derive(Debug)]
pub struct Tracer {
    /// The session being taken (0: none): what a worker tests per burst.
    session: AtomicU32,
    filter: ArcSwapOption<TraceFilter>,
    /// Records still to take in this session.
    remaining: AtomicU32,
    /// Records lost to a full queue.
    lost: AtomicU64,
    queues: Vec<ArrayQueue<TraceRecord>>,
}

impl Tracer {
    /// A tracer for `workers` workers, off.
    pub fn new(workers: usize) -> Tracer {
        Tracer {
            session: AtomicU32::new(0),
            filter: ArcSwapOption::empty(),
            remaining: AtomicU32::new(0),
            lost: AtomicU64::new(0),
            queues: (0..workers.max(1))
                .map(|_| ArrayQueue::new(TRACE_QUEUE))
                .collect(),
        }
    }

    /// Whether a trace is being taken: a worker's one test per burst.
    #[inline(always)]
    pub fn armed(&self) -> bool {
        self.session.load(Ordering::Relaxed) != 0
    }

    /// Starts taking session `session` (non-zero) with `filter`, dropping
    /// what an earlier one left queued.
    pub fn arm(&self, session: u32, filter: TraceFilter) {
        self.disarm();
        for q in &self.queues {
            while q.pop().is_some() {}
        }
        self.lost.store(0, Ordering::Relaxed);
        self.remaining
            .store(filter.count.min(MAX_TRACE_COUNT), Ordering::Relaxed);
        self.filter.store(Some(std::sync::Arc::new(filter)));
        self.session.store(session.max(1), Ordering::Release);
    }

    /// Stops taking records (queued ones stay for [`Tracer::drain`]).
    pub fn disarm(&self) {
        self.session.store(0, Ordering::Release);
    }

    /// The filter of the session being taken.
    pub fn filter(&self) -> Option<std::sync::Arc<TraceFilter>> {
        self.filter.load_full()
    }

    /// Takes one of the records left to take: false when none is left
    /// (the trace is complete).
    pub fn take_one(&self) -> bool {
        self.remaining
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
            .is_ok()
    }

    /// Queues worker `worker`'s record; a full queue loses it (counted).
    pub fn push(&self, worker: usize, r: TraceRecord) {
        let q = self.queues.get(worker).or_else(|| self.queues.last());
        if q.is_none_or(|q| q.push(r).is_err()) {
            self.lost.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Records queued, every worker's, into `out`.
    pub fn drain(&self, out: &mut Vec<TraceRecord>) {
        for q in &self.queues {
            while let Some(r) = q.pop() {
                out.push(r);
            }
        }
    }

    /// Records still to take, and records lost to full queues.
    pub fn progress(&self) -> (u32, u64) {
        (
            self.remaining.load(Ordering::Relaxed),
            self.lost.load(Ordering::Relaxed),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(s: &str, len: u8) -> AddrMatch {
        AddrMatch {
            addr: s.parse().unwrap_or(IpAddr::from([0, 0, 0, 0])),
            len,
        }
    }

    #[test]
    fn prefixes_match_their_addresses_only() {
        assert!(m("10.0.0.0", 8).contains("10.200.1.1".parse().unwrap_or(IpAddr::from([0; 4]))));
        assert!(!m("10.0.0.0", 8).contains("11.0.0.1".parse().unwrap_or(IpAddr::from([0; 4]))));
        assert!(
            m("10.0.0.1", 32).contains("::ffff:10.0.0.1".parse().unwrap_or(IpAddr::from([0; 4])))
        );
        assert!(m("0.0.0.0", 0).contains("192.0.2.1".parse().unwrap_or(IpAddr::from([0; 4]))));
        assert!(!m("2001:db8::", 32).contains("10.0.0.1".parse().unwrap_or(IpAddr::from([0; 4]))));
        assert!(
            m("2001:db8::", 32).contains("2001:db8:1::5".parse().unwrap_or(IpAddr::from([0; 4])))
        );
    }

    #[test]
    fn the_count_bounds_the_records_taken() {
        let t = Tracer::new(2);
        assert!(!t.armed());
        t.arm(
            7,
            TraceFilter {
                count: 2,
                ..TraceFilter::default()
            },
        );
        assert!(t.armed());
        assert!(t.take_one() && t.take_one());
        assert!(!t.take_one(), "a third is over the count");
        t.disarm();
        assert!(!t.armed());
    }
}
