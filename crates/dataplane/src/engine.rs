//! A worker's poll loop over a packet-I/O trait (docs/requirements.md §1, "I/O
//! independence"): receive a burst per port, run the pipeline over it, sort
//! the packets into one TX burst per port by verdict, transmit. DPDK queues
//! implement [`PacketIo`] in the daemon; `replay`, tests and benches use
//! in-memory implementations and run exactly this code.

use config::schema::PortRole;
use flowtable::{FlowTable, Tick};
use wire::buf::PacketBuf;
use wire::burst::PacketBurst;
pub use wire::burst::PacketIo;
use wire::ethernet::MacAddr;

pub use crate::pipeline::BURST;
use crate::pipeline::{Pipeline, Verdict};
use crate::snapshot::{Local, Snapshot};

/// Where each kind of packet leaves, from the ports' roles and the data port
/// each exception port stands for (M47). Computed once; a burst costs one
/// index into it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Routes {
    /// Towards clients and the fabric.
    pub uplink: Option<usize>,
    /// Towards backends (the uplink when there is no backend port).
    pub backend: Option<usize>,
    /// The default exception port: the uplink's, which also takes the host
    /// packets of data ports without their own.
    pub exception: Option<usize>,
    /// Per port, in port order.
    host: Vec<HostPath>,
}

/// A port's part in the exception path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostPath {
    /// An exception port: what the kernel sends on it leaves by this data
    /// port, unchanged (`None`: it stands for no port; dropped and counted
    /// as `host_dropped`).
    FromHost(Option<usize>),
    /// A data port: packets for the host go to exception port `port`. With
    /// `readdress` it is the default one standing in for the data port's
    /// own: a unicast frame to the data port's MAC gets the exception
    /// port's MAC instead, or the kernel would ignore it.
    ToHost {
        /// The exception port.
        port: usize,
        /// The exception port is not this data port's own.
        readdress: bool,
    },
    /// A data port with no exception port to take its host packets: they are
    /// dropped and counted as `host_dropped`.
    NoHost,
}

impl Routes {
    /// Routes for ports with these roles (in port order), every exception
    /// port standing for the uplink.
    pub fn new(roles: &[PortRole]) -> Routes {
        let uplink = roles.iter().position(|&r| r == PortRole::Uplink);
        let stands_for: Vec<Option<usize>> = roles
            .iter()
            .map(|&r| {
                if r == PortRole::Exception {
                    uplink
                } else {
                    None
                }
            })
            .collect();
        Routes::with_exceptions(roles, &stands_for)
    }

    /// Routes for ports with these roles where exception port `e` stands
    /// for data port `exception_for[e]` (`config`'s
    /// `Settings::exception_for`; missing entries stand for nothing).
    pub fn with_exceptions(roles: &[PortRole], exception_for: &[Option<usize>]) -> Routes {
        let find = |r: PortRole| roles.iter().position(|&x| x == r);
        let uplink = find(PortRole::Uplink);
        let stands_for = |e: usize| {
            exception_for.get(e).copied().flatten().filter(|&d| {
                roles
                    .get(d)
                    .is_some_and(|&r| r != PortRole::Exception && d != e)
            })
        };
        // A data port's own exception port: the first standing for it.
        let own = |d: usize| {
            (0..roles.len())
                .find(|&e| roles.get(e) == Some(&PortRole::Exception) && stands_for(e) == Some(d))
        };
        let exception = uplink.and_then(own);
        let host = roles
            .iter()
            .enumerate()
            .map(|(p, &role)| match (role, own(p), exception) {
                (PortRole::Exception, _, _) => HostPath::FromHost(stands_for(p)),
                (_, Some(port), _) => HostPath::ToHost {
                    port,
                    readdress: false,
                },
                (_, None, Some(port)) => HostPath::ToHost {
                    port,
                    readdress: true,
                },
                (_, None, None) => HostPath::NoHost,
            })
            .collect();
        Routes {
            uplink,
            backend: find(PortRole::Backend).or(uplink),
            exception,
            host,
        }
    }

    /// Port `port`'s part in the exception path.
    pub fn host(&self, port: usize) -> HostPath {
        self.host.get(port).copied().unwrap_or(HostPath::NoHost)
    }
}

/// One worker's loop state: the pipeline, its bursts and routes. Allocates
/// only in [`Engine::new`].
pub struct Engine<B: PacketBurst> {
    /// The pipeline and its counters.
    pub worker: Pipeline,
    roles: Vec<PortRole>,
    routes: Routes,
    rx: B,
    tx: Vec<B>,
    verdicts: Vec<Verdict>,
}

impl<B: PacketBurst> Engine<B> {
    /// An engine over ports with `roles`, every exception port standing for
    /// the uplink, with bursts made by `burst` (each holding at most
    /// `capacity` packets).
    pub fn new(
        worker: Pipeline,
        roles: &[PortRole],
        capacity: usize,
        burst: impl Fn() -> B,
    ) -> Self {
        Engine::with_routes(worker, roles, Routes::new(roles), capacity, burst)
    }

    /// An engine over ports with `roles` that sends packets by `routes`
    /// (`Routes::with_exceptions` for several exception ports).
    pub fn with_routes(
        worker: Pipeline,
        roles: &[PortRole],
        routes: Routes,
        capacity: usize,
        burst: impl Fn() -> B,
    ) -> Self {
        Engine {
            worker,
            roles: roles.to_vec(),
            routes,
            rx: burst(),
            tx: roles.iter().map(|_| burst()).collect(),
            verdicts: vec![Verdict::ToHost; capacity],
        }
    }

    /// The routes in use.
    pub fn routes(&self) -> &Routes {
        &self.routes
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
        let (services, columns) = snap.rules.zone_counters();
        self.worker.counters.resize_zone_flows(services, columns);
        let mut received = 0;
        for p in 0..self.roles.len() {
            let n = io.rx_burst(p, &mut self.rx);
            if n == 0 {
                continue;
            }
            received += n;
            self.worker.counters.rx_bursts += 1;
            let (tx, counters) = (&mut self.tx, &mut self.worker.counters);
            let (host, backend) = (self.routes.host(p), self.routes.backend);
            if let HostPath::FromHost(data_port) = host {
                // From the host's stack (ARP, BGP, SSH, probes): out the
                // data port this exception port stands for.
                counters.from_host += n as u64;
                let steering = !snap.probe_steering.is_empty();
                self.rx.drain_each(|_, mut m| {
                    // A health probe through a VIP (M52) goes to its endpoint.
                    if steering && let Some(steered) = crate::delivery::steer_probe(snap, &mut m) {
                        match (steered, backend) {
                            (Ok(()), Some(b)) => {
                                counters.vip_probes += 1;
                                push(tx, b, m, &mut counters.tx_dropped)
                            }
                            _ => counters.vip_probes_dropped += 1,
                        }
                        return;
                    }
                    match data_port {
                        Some(out) => push(tx, out, m, &mut counters.tx_dropped),
                        None => counters.from_host_dropped += 1,
                    }
                });
            } else {
                let Some(verdicts) = self.verdicts.get_mut(..n) else {
                    // A burst larger than the engine was built for: never
                    // happens with matching capacities; drop and count it.
                    self.rx.drain_each(|_, _| counters.tx_dropped += 1);
                    continue;
                };
                self.worker.set_rx_port(p);
                // `spillway trace`: one test per burst while none is armed.
                if self.worker.tracing() {
                    self.worker.process_burst_traced(
                        snap,
                        flows,
                        now,
                        self.rx.packets_mut(),
                        verdicts,
                    );
                } else {
                    self.worker
                        .process_burst(snap, flows, now, self.rx.packets_mut(), verdicts);
                }
                let worker = &mut self.worker;
                // The usual burst: every packet forwarded, to one port, in order.
                // It is sent as it is (the TX bursts are empty between ports),
                // without moving each packet into a TX burst.
                if let Some(b) = backend
                    && verdicts.iter().all(|v| *v == Verdict::Forward)
                {
                    let (n, dropped) = (self.rx.len(), io.tx_burst(b, &mut self.rx));
                    let counters = &mut worker.counters;
                    counters.tx_dropped += dropped as u64;
                    counters.tx_packets += n.saturating_sub(dropped) as u64;
                    continue;
                }
                let readdress = readdress(host, p, &snap.local);
                self.rx.drain_each(|i, mut m| match verdicts.get(i) {
                    Some(Verdict::Forward) => match backend {
                        Some(b) => push(tx, b, m, &mut worker.counters.tx_dropped),
                        None => worker.counters.tx_dropped += 1,
                    },
                    Some(Verdict::Fragment(job)) => match backend {
                        Some(b) => send_fragments(worker, snap, *job, m, io, tx, b),
                        None => worker.fragment_unsent(*job),
                    },
                    Some(Verdict::Reply) => push(tx, p, m, &mut worker.counters.tx_dropped),
                    Some(Verdict::ForwardTo(out)) => {
                        push(tx, usize::from(*out), m, &mut worker.counters.tx_dropped)
                    }
                    Some(Verdict::ToHost) => match host {
                        HostPath::ToHost { port, .. } => {
                            if let Some((from, to)) = readdress
                                && let Some(dst) = m.data_mut().get_mut(..6)
                                && *dst == from
                            {
                                dst.copy_from_slice(&to);
                            }
                            push(tx, port, m, &mut worker.counters.tx_dropped)
                        }
                        _ => worker.counters.host_dropped += 1,
                    },
                    Some(Verdict::Drop(_)) | None => {}
                });
            }
            // Send before the next port's burst, so that no TX burst ever
            // holds more than one RX burst's worth.
            for (q, burst) in self.tx.iter_mut().enumerate() {
                if !burst.is_empty() {
                    let (n, dropped) = (burst.len(), io.tx_burst(q, burst));
                    let counters = &mut self.worker.counters;
                    counters.tx_dropped += dropped as u64;
                    counters.tx_packets += n.saturating_sub(dropped) as u64;
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

/// For host packets from data port `port` that go to an exception port not
/// its own: its MAC and the exception port's, when they differ.
fn readdress(host: HostPath, port: usize, local: &Local) -> Option<(MacAddr, MacAddr)> {
    let HostPath::ToHost {
        port: exception,
        readdress: true,
    } = host
    else {
        return None;
    };
    let mac = |p: usize| local.port_macs.get(p).copied().unwrap_or(local.mac);
    let (from, to) = (mac(port), mac(exception));
    (from != to).then_some((from, to))
}

/// Sends job `job`'s packet (a [`Verdict::Fragment`], M48) on port `port`
/// as fragments ([`Pipeline::fragment`], which counts the outcome), all in one
/// TX burst and in order: when the burst has no room for them all, what it
/// holds is sent first.
#[cold]
#[inline(never)]
fn send_fragments<I: PacketIo>(
    worker: &mut Pipeline,
    snap: &Snapshot,
    job: u16,
    m: <I::Burst as PacketBurst>::Pkt,
    io: &mut I,
    tx: &mut [I::Burst],
    port: usize,
) {
    let mut out: [Option<<I::Burst as PacketBurst>::Pkt>; crate::pipeline::MAX_FRAGMENTS] =
        std::array::from_fn(|_| None);
    let n = worker.fragment(snap, job, m, &mut || io.alloc(port), &mut out);
    let Some(burst) = tx.get_mut(port) else {
        worker.counters.tx_dropped += n as u64;
        return;
    };
    if n > burst.capacity().saturating_sub(burst.len()) && !burst.is_empty() {
        let (held, dropped) = (burst.len(), io.tx_burst(port, burst));
        worker.counters.tx_dropped += dropped as u64;
        worker.counters.tx_packets += held.saturating_sub(dropped) as u64;
    }
    for f in out.into_iter().flatten() {
        push(tx, port, f, &mut worker.counters.tx_dropped);
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

    fn capacity(&self) -> usize {
        self.cap
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
