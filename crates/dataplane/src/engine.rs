//! A worker's poll loop over a packet-I/O trait (docs/requirements.md §1, "I/O
//! independence"): receive a burst per port, run the pipeline over it, sort
//! the packets into one TX burst per port by verdict, transmit. DPDK queues
//! implement [`PacketIo`] in the daemon; `replay`, tests and benches use
//! in-memory implementations and run exactly this code.

use config::schema::PortRole;
use flowtable::{FlowTable, Tick};
use wire::burst::PacketBurst;
pub use wire::burst::PacketIo;

use crate::pipeline::{Verdict, Worker};
use crate::snapshot::Snapshot;

/// Default burst size (docs/requirements.md §1).
pub const BURST: usize = 32;

/// Where each kind of packet leaves, from the ports' roles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Routes {
    /// Towards clients and the fabric; also where the host's packets go out.
    pub uplink: Option<usize>,
    /// Towards backends (the uplink when there is no backend port).
    pub backend: Option<usize>,
    /// The host's TAP (exception path).
    pub exception: Option<usize>,
}

impl Routes {
    /// Routes for ports with these roles (in port order).
    pub fn new(roles: &[PortRole]) -> Routes {
        let find = |r: PortRole| roles.iter().position(|&x| x == r);
        let uplink = find(PortRole::Uplink);
        Routes {
            uplink,
            backend: find(PortRole::Backend).or(uplink),
            exception: find(PortRole::Exception),
        }
    }
}

/// One worker's loop state: the pipeline, its bursts and routes. Allocates
/// only in [`Engine::new`].
pub struct Engine<B: PacketBurst> {
    /// The pipeline and its counters.
    pub worker: Worker,
    roles: Vec<PortRole>,
    routes: Routes,
    rx: B,
    tx: Vec<B>,
    verdicts: Vec<Verdict>,
}

impl<B: PacketBurst> Engine<B> {
    /// An engine over ports with `roles`, with bursts made by `burst` (each
    /// holding at most `capacity` packets).
    pub fn new(worker: Worker, roles: &[PortRole], capacity: usize, burst: impl Fn() -> B) -> Self {
        Engine {
            worker,
            roles: roles.to_vec(),
            routes: Routes::new(roles),
            rx: burst(),
            tx: roles.iter().map(|_| burst()).collect(),
            verdicts: vec![Verdict::ToHost; capacity],
        }
    }

    /// The routes in use.
    pub fn routes(&self) -> Routes {
        self.routes
    }

    /// One pass over every port: receive, process, transmit. Returns the
    /// number of packets received.
    pub fn poll<I: PacketIo<Burst = B>>(
        &mut self,
        io: &mut I,
        snap: &Snapshot,
        flows: &FlowTable,
        now: Tick,
    ) -> usize {
        self.worker.counters.resize_children(snap.rules.children());
        self.worker.counters.resize_backends(snap.backends.len());
        let mut received = 0;
        for p in 0..self.roles.len() {
            let n = io.rx_burst(p, &mut self.rx);
            if n == 0 {
                continue;
            }
            received += n;
            let (tx, counters, routes) = (&mut self.tx, &mut self.worker.counters, self.routes);
            if self.roles.get(p) == Some(&PortRole::Exception) {
                // From the host's stack (ARP, BGP, SSH, probes): out the uplink.
                counters.from_host += n as u64;
                match routes.uplink {
                    Some(out) => self
                        .rx
                        .drain_each(|_, m| push(tx, out, m, &mut counters.tx_dropped)),
                    None => self.rx.drain_each(|_, _| counters.host_dropped += 1),
                }
            } else {
                let Some(verdicts) = self.verdicts.get_mut(..n) else {
                    // A burst larger than the engine was built for: never
                    // happens with matching capacities; drop and count it.
                    self.rx.drain_each(|_, _| counters.tx_dropped += 1);
                    continue;
                };
                self.worker.set_rx_port(p);
                self.worker
                    .process_burst(snap, flows, now, self.rx.packets_mut(), verdicts);
                let counters = &mut self.worker.counters;
                // The usual burst: every packet forwarded, to one port, in order.
                // It is sent as it is (the TX bursts are empty between ports),
                // without moving each packet into a TX burst.
                if let Some(b) = routes.backend
                    && verdicts.iter().all(|v| *v == Verdict::Forward)
                {
                    counters.tx_dropped += io.tx_burst(b, &mut self.rx) as u64;
                    continue;
                }
                self.rx.drain_each(|i, m| match verdicts.get(i) {
                    Some(Verdict::Forward) => match routes.backend {
                        Some(b) => push(tx, b, m, &mut counters.tx_dropped),
                        None => counters.tx_dropped += 1,
                    },
                    Some(Verdict::Reply) => push(tx, p, m, &mut counters.tx_dropped),
                    Some(Verdict::ToHost) => match routes.exception {
                        Some(e) => push(tx, e, m, &mut counters.tx_dropped),
                        None => counters.host_dropped += 1,
                    },
                    Some(Verdict::Drop(_)) | None => {}
                });
            }
            // Send before the next port's burst, so that no TX burst ever
            // holds more than one RX burst's worth.
            for (q, burst) in self.tx.iter_mut().enumerate() {
                if !burst.is_empty() {
                    self.worker.counters.tx_dropped += io.tx_burst(q, burst) as u64;
                }
            }
        }
        received
    }
}

impl<B: PacketBurst> Engine<B> {
    /// Sends a few of the frames the management core queued (neighbour
    /// requests and announcements, M47) on their ports.
    pub fn send_queued<I: PacketIo<Burst = B>>(
        &mut self,
        io: &mut I,
        q: &crate::neighbour::NeighbourQueues,
    ) {
        if let Some(tx) = self.tx.first_mut() {
            q.send(io, tx, self.roles.len(), &mut self.worker.counters);
        }
    }
}

/// Adds a packet to port `port`'s TX burst; one that does not fit is freed
/// and counted.
fn push<B: PacketBurst>(tx: &mut [B], port: usize, m: B::Pkt, dropped: &mut u64) {
    let taken = match tx.get_mut(port) {
        Some(b) => b.push(m).is_ok(),
        None => false,
    };
    if !taken {
        *dropped += 1;
    }
}

/// An in-memory burst (replay, tests, benches): a `Vec` whose capacity is
/// reserved once and never exceeded.
#[derive(Debug)]
pub struct VecBurst<P> {
    pkts: Vec<P>,
    cap: usize,
}

impl<P> VecBurst<P> {
    /// A burst of at most `cap` packets.
    pub fn with_capacity(cap: usize) -> Self {
        VecBurst {
            pkts: Vec::with_capacity(cap),
            cap,
        }
    }
}

impl<P: wire::buf::PacketBuf> PacketBurst for VecBurst<P> {
    type Pkt = P;

    fn len(&self) -> usize {
        self.pkts.len()
    }

    fn packets_mut(&mut self) -> &mut [P] {
        &mut self.pkts
    }

    fn push(&mut self, pkt: P) -> Result<(), P> {
        if self.pkts.len() >= self.cap {
            return Err(pkt);
        }
        self.pkts.push(pkt);
        Ok(())
    }

    fn drain_each(&mut self, mut f: impl FnMut(usize, P)) {
        for (i, p) in self.pkts.drain(..).enumerate() {
            f(i, p);
        }
    }
}
