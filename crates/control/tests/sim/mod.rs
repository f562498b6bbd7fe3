//! A deterministic simulation of the management core: a virtual clock,
//! scripted health and remote verdicts, and N data-plane pipelines (the real
//! `dataplane::Engine` over in-memory bursts) sharing one flow table, run
//! against the snapshots the core publishes. No DPDK, no root, no threads,
//! no sleeps: a scenario is a script of inputs and a check of what every
//! flow experienced.
//!
//! Scenarios build a [`World`] from configuration text (written with
//! `testkit::config`), open [`Flow`]s (a SYN, then data packets), change the
//! world (health, reloads, time) and ask where each flow's packets went
//! ([`World::send`]). Reloads, drains, `status` and the exported rule
//! states go to the core's typed commands, as the daemon's do; what the
//! core logs is in [`World::logs`].

#![allow(clippy::cast_possible_truncation)] // test values are small
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly
#![allow(dead_code)]

use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

use config::schema::PortRole;
use control::{Core, FlowUse, Published, Recorder, ReloadError, ScriptedProbes};
use dataplane::snapshot::TableKey;
use dataplane::{Engine, Local, PacketIo, Pipeline, Snapshot, VecBurst, WorkerCounters};
use flowtable::FlowTable;
use health::State;
use wire::buf::{MemBuf, PacketBuf};
use wire::burst::PacketBurst;

pub type Pkt = MemBuf<Vec<u8>>;

pub const LB_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
pub const CLIENT_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0x77];

/// A small, seeded generator (SplitMix64): the same seed, the same run.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// When the core asks for Maglev tables off the loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Builds {
    /// Built and handed back at once (the next input sees them).
    Inline,
    /// Held until [`World::finish_builds`]: a build "in progress".
    Held,
}

/// One packet I/O per pipeline: a queue in, what went out.
#[derive(Default)]
pub struct MemIo {
    pub rx: VecDeque<Vec<u8>>,
    pub tx: Vec<Vec<u8>>,
}

impl PacketIo for MemIo {
    type Burst = VecBurst<Pkt>;

    fn rx_burst(&mut self, _port: usize, burst: &mut VecBurst<Pkt>) -> usize {
        let mut n = 0;
        while let Some(f) = self.rx.pop_front() {
            let p = MemBuf::new(vec![0u8; 2048], 128, &f).expect("fits");
            if let Err(p) = burst.push(p) {
                self.rx.push_front(p.data().to_vec());
                break;
            }
            n += 1;
        }
        n
    }

    fn tx_burst(&mut self, _port: usize, burst: &mut VecBurst<Pkt>) -> usize {
        let out = &mut self.tx;
        burst.drain_each(|_, p| out.push(p.data().to_vec()));
        0
    }
}

/// A client connection (or UDP exchange) to a VIP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Flow {
    pub client: Ipv4Addr,
    pub sport: u16,
    pub vip: Ipv4Addr,
    pub dport: u16,
    pub udp: bool,
}

/// What became of one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Went {
    /// Encapsulated to this backend (the outer destination).
    To(IpAddr),
    /// Not forwarded (dropped, answered, handed to the host).
    Nowhere,
}

impl Went {
    pub fn addr(self) -> Option<IpAddr> {
        match self {
            Went::To(a) => Some(a),
            Went::Nowhere => None,
        }
    }
}

/// The simulated node.
pub struct World {
    pub core: Core,
    /// The core's shell: scripted probers, outputs recorded (and moved to
    /// the fields below after each input).
    pub shell: Recorder,
    pub flows: FlowTable,
    pub live: Arc<Snapshot>,
    pub now: Duration,
    pub rng: Rng,
    pub builds: Builds,
    engines: Vec<Engine<VecBurst<Pkt>>>,
    ios: Vec<MemIo>,
    /// Every snapshot published, in order.
    pub published: Vec<Arc<Snapshot>>,
    /// `[control] watch_config` as last asked for.
    pub watching: Option<bool>,
    /// Virtual time between management ticks in [`World::advance`] (the
    /// daemon's are 50 ms; nothing the core decides depends on it).
    pub period: Duration,
    /// Every line the core logged, in order, with its level.
    pub logs: Vec<(log::Level, String)>,
    /// Every frame the core asked to send (neighbour requests and
    /// announcements, M47): (time, port, frame).
    pub sent: Vec<(Duration, usize, Vec<u8>)>,
    /// The simulated segment: neighbours that answer ARP requests for
    /// their address on their port, with their MAC.
    pub segment: Vec<(usize, IpAddr, [u8; 6])>,
    /// Answers (port, address, MAC) the data plane passes on at the next
    /// step.
    answers: Vec<(usize, IpAddr, [u8; 6])>,
    /// VRRP advertisements (port, frame) the data plane hands over at the
    /// next step.
    pub vrrp_in: Vec<(usize, Vec<u8>)>,
    /// The last frame a pipeline sent, if [`World::send`] sent one.
    pub last_frame: Option<Vec<u8>>,
    /// The second of virtual time of the probers' last round.
    last_round: u64,
    /// With `[flow_sync]` (M36): the queue the pipelines push new entries
    /// to, and every datagram the core asked to send, (peer, bytes), until
    /// a scenario delivers it.
    pub sync_queue: Option<Arc<dataplane::sync::SyncQueue>>,
    pub sync_out: Vec<(std::net::SocketAddr, Vec<u8>)>,
}

/// The MAC a neighbour on the simulated segment answers with at first.
pub fn peer_mac(ip: IpAddr) -> [u8; 6] {
    let o = match ip {
        IpAddr::V4(v) => v.octets(),
        IpAddr::V6(v) => {
            let o = v.octets();
            [o[12], o[13], o[14], o[15]]
        }
    };
    [2, 0xee, o[0], o[1], o[2], o[3]]
}

/// The address an ARP request frame asks for.
fn arp_request_target(frame: &[u8]) -> Option<IpAddr> {
    let p = wire::arp::Packet::new_checked(frame.get(14..)?).ok()?;
    let a = wire::arp::ArpRepr::parse(&p).ok()?;
    (a.oper == wire::arp::op::REQUEST && a.spa != a.tpa).then_some(IpAddr::V4(a.tpa))
}

/// Parses a configuration (panics on a bad one: scenarios' own texts).
pub fn loaded(text: &str) -> config::Loaded {
    config::load_str("sim.toml", text, &config::Env::default()).unwrap_or_else(|e| panic!("{e}"))
}

/// A core started on `compiled` at time zero with `local`, its probes
/// scripted by `probes`.
pub fn start_core(
    compiled: config::Compiled,
    local: Local,
    seed: u64,
    probes: &mut ScriptedProbes,
) -> Core {
    start_core_at(compiled, local, seed, probes, Duration::ZERO)
}

/// [`start_core`] at `start`.
pub fn start_core_at(
    compiled: config::Compiled,
    local: Local,
    seed: u64,
    probes: &mut ScriptedProbes,
    start: Duration,
) -> Core {
    Core::start(
        std::path::Path::new("sim.toml"),
        compiled,
        local,
        dataplane::CookieKey::fixed(seed, 0),
        start,
        probes,
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

/// One management step at `now` of a core without pipelines: no traffic,
/// an empty flow table, no flow sync.
pub fn step_alone(core: &mut Core, shell: &mut Recorder, now: Duration) {
    let flows = FlowTable::new(flowtable::Config::with_capacity(64)).expect("flow table");
    let inputs = control::Inputs {
        flows: &flows,
        sightings: Vec::new(),
        vrrp: Vec::new(),
        counters: &WorkerCounters::default,
        sync_queue: None,
    };
    core.step(now, inputs, shell);
}

/// The node's addresses: tunnels leave from 10.0.1.2.
pub fn local() -> Local {
    Local {
        mac: LB_MAC,
        next_hop_mac: [2, 0, 0, 0, 0, 0xfe],
        tunnel_src_v4: Some(Ipv4Addr::new(10, 0, 1, 2)),
        tunnel_src_v6: None,
        own_addrs: vec![IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2))],
        port_macs: Vec::new(),
        egress_mtu: None,
        neighbours: Vec::new(),
    }
}

impl World {
    /// A node running `text` with `pipelines` workers, seeded.
    pub fn new(text: &str, pipelines: usize, seed: u64) -> World {
        World::with_segment(text, pipelines, seed, true)
    }

    /// [`World::new`]; with `answered` false, no next hop has answered yet
    /// and the segment is empty (scenarios add its neighbours).
    pub fn with_segment(text: &str, pipelines: usize, seed: u64, answered: bool) -> World {
        World::started(text, pipelines, seed, answered, Duration::ZERO)
    }

    /// [`World::with_segment`] for a node whose daemon starts at `start`
    /// of virtual time (a node joining others that already run).
    pub fn started(
        text: &str,
        pipelines: usize,
        seed: u64,
        answered: bool,
        start: Duration,
    ) -> World {
        let loaded = loaded(text);
        // A fixed placement: the simulation replays exactly.
        let flows = FlowTable::new(flowtable::Config {
            placement: Some(flowtable::PlacementKey::fixed(seed, 0)),
            ..dataplane::flow_table_config(&loaded.compiled.settings.dataplane)
        })
        .expect("flow table");
        let mut probes = ScriptedProbes::default();
        let mut core = start_core_at(loaded.compiled, local(), seed, &mut probes, start);
        // Every next hop is on the segment and has answered before the
        // first packet (M47); scenarios take them away or change them.
        let segment: Vec<(usize, IpAddr, [u8; 6])> = dataplane::nexthop::next_hops(core.compiled())
            .into_iter()
            .map(|h| (h.port, h.addr, peer_mac(h.addr)))
            .collect();
        let segment = if answered {
            core.sightings(start, segment.clone());
            segment
        } else {
            Vec::new()
        };
        let live = core.live().clone();
        let children = live.compiled.children.len();
        let sync_queue = core
            .compiled()
            .settings
            .flow_sync
            .is_some()
            .then(|| Arc::new(dataplane::sync::SyncQueue::default()));
        let engines = (0..pipelines)
            .map(|i| {
                let mut e = Engine::new(
                    Pipeline::new(seed ^ (i as u64) << 8, children),
                    &[PortRole::Uplink],
                    dataplane::BURST,
                    || VecBurst::with_capacity(dataplane::BURST),
                );
                if let Some(q) = &sync_queue {
                    e.worker.set_sync_queue(q.clone());
                }
                e
            })
            .collect();
        let mut w = World {
            core,
            shell: Recorder::new(probes),
            flows,
            published: vec![live.clone()],
            live,
            now: start,
            rng: Rng::new(seed),
            builds: Builds::Inline,
            engines,
            ios: (0..pipelines).map(|_| MemIo::default()).collect(),
            watching: None,
            period: Duration::from_millis(250),
            logs: Vec::new(),
            sent: Vec::new(),
            segment,
            answers: Vec::new(),
            vrrp_in: Vec::new(),
            last_frame: None,
            sync_queue,
            sync_out: Vec::new(),
            last_round: 0,
        };
        w.pump();
        w
    }

    /// The coarse tick workers use.
    pub fn tick(&self) -> u32 {
        dataplane::Tick::at(self.now).get()
    }

    /// Carries out what the core asked for.
    fn pump(&mut self) {
        self.shell.hold_builds = self.builds == Builds::Held;
        self.core.carry_out(&mut self.shell);
        self.took_outputs();
    }

    /// Moves what the shell recorded into the world: snapshots published,
    /// log lines, frames sent (a neighbour on the segment answers a request
    /// for it at the next step), datagrams to the peers.
    fn took_outputs(&mut self) {
        for s in self.shell.published.drain(..) {
            self.live = s.clone();
            self.published.push(s);
        }
        self.watching = self.shell.watching;
        self.logs.extend(
            self.shell
                .logs
                .drain(..)
                .map(|(_, level, text)| (level, text)),
        );
        for (port, frame) in self.shell.sent.drain(..) {
            if let Some(arp) = arp_request_target(&frame) {
                let segment = &self.segment;
                self.answers
                    .extend(segment.iter().filter(|n| n.0 == port && n.1 == arp));
            }
            self.sent.push((self.now, port, frame));
        }
        self.sync_out.append(&mut self.shell.sync_out);
        self.shell.announced.clear();
    }

    fn build(&mut self, build: u64, tables: Vec<TableKey>) {
        let built = control::build_tables(tables);
        self.core
            .tables_built(self.now, build, built, &mut self.shell.probes);
    }

    /// Completes every held table build.
    pub fn finish_builds(&mut self) {
        for (b, t) in std::mem::take(&mut self.shell.held) {
            self.build(b, t);
        }
        self.pump();
    }

    /// Whether a build is held.
    pub fn builds_held(&self) -> bool {
        !self.shell.held.is_empty()
    }

    fn counters(engines: &[Engine<VecBurst<Pkt>>], children: usize) -> WorkerCounters {
        let mut total = WorkerCounters::new(children);
        // Summed as the daemon sums the workers' published counters.
        for e in engines {
            total.add(&e.worker.counters);
        }
        total
    }

    /// One management tick at the current time, as the daemon takes it
    /// ([`Core::step`]), the probers having gone round once a second.
    pub fn step(&mut self) {
        let now = self.now;
        // The probers go round once a second of virtual time.
        if now.as_secs() != self.last_round {
            self.last_round = now.as_secs();
            self.shell.probes.probe_round();
        }
        let engines = &self.engines;
        let children = self.live.compiled.children.len();
        let inputs = control::Inputs {
            flows: &self.flows,
            sightings: std::mem::take(&mut self.answers),
            vrrp: std::mem::take(&mut self.vrrp_in),
            counters: &|| Self::counters(engines, children),
            sync_queue: self.sync_queue.as_deref(),
        };
        self.shell.hold_builds = self.builds == Builds::Held;
        self.core.step(now, inputs, &mut self.shell);
        self.took_outputs();
    }

    /// Hands the core a flow-sync datagram from `from` (M36).
    pub fn sync_receive(&mut self, from: std::net::SocketAddr, datagram: &[u8]) {
        self.core
            .sync_received(self.now, from, datagram, &self.flows);
        self.pump();
    }

    /// Tells the flow-sync peers this node leaves, as the daemon does
    /// before it exits.
    pub fn leave(&mut self) {
        self.core.leave(self.now);
        self.pump();
    }

    /// Lets `d` of virtual time pass, a management tick every `period`.
    pub fn advance(&mut self, d: Duration) {
        let end = self.now + d;
        while self.now < end {
            self.now = (self.now + self.period).min(end);
            self.step();
        }
    }

    /// Scripts endpoint `addr`'s health verdict (seen at the next step).
    pub fn set_health(&mut self, addr: &str, s: State) {
        self.shell
            .probes
            .set_state(addr.parse().expect("address"), s);
    }

    /// Scripts endpoint `addr`'s reported utilization (M25; seen at the
    /// next step).
    pub fn set_utilization(&mut self, addr: &str, u: Option<f64>) {
        self.shell
            .probes
            .set_utilization(addr.parse().expect("address"), u);
    }

    /// Scripts every endpoint's verdict.
    pub fn all_health(&mut self, s: State) {
        let addrs: Vec<IpAddr> = self
            .shell
            .probes
            .targets()
            .iter()
            .map(|t| t.addr.ip())
            .collect();
        for a in addrs {
            self.shell.probes.set_state(a, s);
        }
    }

    /// Scripts remote rule `rule`'s exported state.
    pub fn set_remote(&mut self, rule: &str, s: State) {
        self.shell.probes.set_remote(rule, s);
    }

    /// A reload with `text` (`Err` for a text that does not load), as the
    /// daemon hands `spillway reload` to the core; what became of it
    /// ([`control::reload_text`] is what `spillway reload` prints).
    pub fn reload_answer(&mut self, text: &str, force: bool) -> Result<Published, ReloadError> {
        self.reload_named("sim.toml", text, force)
    }

    /// [`World::reload_answer`] of a file named `name` (its messages name
    /// it).
    pub fn reload_named(
        &mut self,
        name: &str,
        text: &str,
        force: bool,
    ) -> Result<Published, ReloadError> {
        let loaded =
            config::load_str(name, text, &config::Env::default()).map_err(|e| e.to_string());
        let r = self
            .core
            .reload(self.now, loaded, force, &mut self.shell.probes);
        self.pump();
        r
    }

    /// [`World::reload_answer`], its error as text.
    pub fn reload(&mut self, text: &str, force: bool) -> Result<Published, String> {
        self.reload_answer(text, force).map_err(|e| e.to_string())
    }

    /// `spillway drain|undrain` now, as the daemon hands it to the core:
    /// what it did, or why not.
    pub fn drain(
        &mut self,
        scope: control::drain::Scope,
        name: &str,
        on: bool,
    ) -> Result<String, control::DrainError> {
        let r = self.core.drain(self.now, scope, name, on);
        self.pump();
        r
    }

    /// `spillway status`, as the daemon answers it.
    pub fn status(&mut self) -> String {
        let flows = FlowUse::of(&self.flows);
        let st = self.core.status(self.now, flows);
        self.pump();
        st.to_string()
    }

    /// Sends `frame` through a pipeline; the frames it sent out.
    pub fn send_raw(&mut self, frame: Vec<u8>) -> Vec<Vec<u8>> {
        let i = self.rng.below(self.engines.len() as u64) as usize;
        let tick = self.tick();
        let (engine, io) = (&mut self.engines[i], &mut self.ios[i]);
        io.rx.push_back(frame);
        engine.poll(io, &self.live, &self.flows, tick);
        std::mem::take(&mut io.tx)
    }

    /// Sends one packet of `flow` (a SYN when `syn`, else an ACK for TCP)
    /// through a pipeline picked at random: every pipeline shares the flow
    /// table, so which one must not matter.
    pub fn send(&mut self, flow: &Flow, syn: bool) -> Went {
        let frame = frame(flow, syn);
        let i = self.rng.below(self.engines.len() as u64) as usize;
        let tick = self.tick();
        let (engine, io) = (&mut self.engines[i], &mut self.ios[i]);
        io.rx.push_back(frame);
        engine.poll(io, &self.live, &self.flows, tick);
        let out = std::mem::take(&mut io.tx);
        self.last_frame = out.first().cloned();
        match out.as_slice() {
            [f] => match wire::encap::parse_tunnel(f, &wire::encap::DecapConfig::default()) {
                Ok(t) => Went::To(t.dst_ip),
                Err(_) => Went::Nowhere,
            },
            _ => Went::Nowhere,
        }
    }

    /// Offers `pps[i]` new one-packet flows a second of stream `i` for
    /// `d`, tick by tick, the streams interleaved within a tick as their
    /// clients would be; a stream's fractions of a flow carry to the next
    /// tick (and the next call) in `carry`. `flow(i, r)` makes stream `i`'s
    /// next flow from a word `r` of `rng`; `went(i, to)` hears where it
    /// went. Returns the seconds offered.
    #[allow(clippy::cast_sign_loss, clippy::cast_precision_loss)] // rates and counts are small and positive
    pub fn offer<const N: usize>(
        &mut self,
        rng: &mut Rng,
        carry: &mut [f64; N],
        pps: [f64; N],
        d: Duration,
        mut flow: impl FnMut(usize, u64) -> Flow,
        mut went: impl FnMut(usize, Option<IpAddr>),
    ) -> f64 {
        let period = self.period;
        let steps = (d.as_secs_f64() / period.as_secs_f64()).round() as usize;
        for _ in 0..steps {
            let mut due = [0usize; N];
            for ((due, carry), pps) in due.iter_mut().zip(carry.iter_mut()).zip(pps) {
                *carry += pps * period.as_secs_f64();
                let n = carry.floor();
                *carry -= n;
                *due = n as usize;
            }
            while due.iter().any(|&n| n > 0) {
                for (i, due) in due.iter_mut().enumerate() {
                    if *due == 0 {
                        continue;
                    }
                    *due -= 1;
                    let f = flow(i, rng.next());
                    went(i, self.send(&f, true).addr());
                }
            }
            self.advance(period);
        }
        d.as_secs_f64()
    }

    /// Opens `n` TCP flows to `vip`:80 from random clients (SYN, then one
    /// data packet); returns each with its backend.
    pub fn open(&mut self, n: usize, vip: &str, port: u16) -> Vec<(Flow, Option<IpAddr>)> {
        self.open_proto(n, vip, port, false)
    }

    pub fn open_proto(
        &mut self,
        n: usize,
        vip: &str,
        port: u16,
        udp: bool,
    ) -> Vec<(Flow, Option<IpAddr>)> {
        let vip: Ipv4Addr = vip.parse().expect("vip");
        (0..n)
            .map(|_| {
                let r = self.rng.next();
                let f = Flow {
                    client: Ipv4Addr::new(192, 168, (r >> 8) as u8, (r >> 16) as u8 | 1),
                    sport: 1024 + (r >> 24) as u16 % 60000,
                    vip,
                    dport: port,
                    udp,
                };
                let first = self.send(&f, true).addr();
                let second = self.send(&f, false).addr();
                assert_eq!(first, second, "{f:?}: its second packet went elsewhere");
                (f, first)
            })
            .collect()
    }

    /// Where each flow's next data packet goes now.
    pub fn where_now(&mut self, flows: &[(Flow, Option<IpAddr>)]) -> Vec<Option<IpAddr>> {
        flows
            .iter()
            .map(|(f, _)| self.send(f, false).addr())
            .collect()
    }

    /// The lines logged since the last call (and forgets them).
    pub fn take_logs(&mut self) -> Vec<(log::Level, String)> {
        std::mem::take(&mut self.logs)
    }

    /// Whether a line logged (and not taken yet) at `level` is `text`.
    pub fn logged(&self, level: log::Level, text: &str) -> bool {
        self.logs.iter().any(|(l, t)| *l == level && t == text)
    }

    /// The exported state of `rule` (or served child rule), as HTTP
    /// `/status` gives it.
    pub fn rule_state(&mut self, rule: &str) -> health::Aggregate {
        self.core
            .exported_states()
            .into_iter()
            .find(|(r, _)| r == rule)
            .map(|(_, s)| s)
            .unwrap_or_else(|| panic!("no rule {rule}"))
    }
}

/// An address.
pub fn ip(s: &str) -> IpAddr {
    s.parse().expect("address")
}

fn csum(mut sum: u32, data: &[u8]) -> u16 {
    for c in data.chunks(2) {
        sum += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Ethernet/IPv4/TCP (SYN or ACK) or UDP for `f`.
pub fn frame(f: &Flow, syn: bool) -> Vec<u8> {
    let (src, dst) = (f.client.octets(), f.vip.octets());
    let proto = if f.udp { 17u8 } else { 6 };
    let mut seg = if f.udp {
        let mut s = vec![0u8; 12];
        s[4..6].copy_from_slice(&12u16.to_be_bytes());
        s[8..12].copy_from_slice(b"ping");
        s
    } else {
        let mut s = vec![0u8; 20];
        s[4..8].copy_from_slice(&1000u32.to_be_bytes());
        s[12] = 5 << 4;
        s[13] = if syn { 0x02 } else { 0x10 };
        s[14..16].copy_from_slice(&8192u16.to_be_bytes());
        s
    };
    seg[0..2].copy_from_slice(&f.sport.to_be_bytes());
    seg[2..4].copy_from_slice(&f.dport.to_be_bytes());
    let at = if f.udp { 6 } else { 16 };
    let pseudo: u32 = [src, dst]
        .iter()
        .flat_map(|a| {
            [
                u16::from_be_bytes([a[0], a[1]]),
                u16::from_be_bytes([a[2], a[3]]),
            ]
        })
        .map(u32::from)
        .sum::<u32>()
        + u32::from(proto)
        + seg.len() as u32;
    let c = csum(pseudo, &seg);
    seg[at..at + 2].copy_from_slice(&c.to_be_bytes());
    let mut ip = vec![0x45, 0, 0, 0, 0, 1, 0x40, 0, 64, proto, 0, 0];
    ip[2..4].copy_from_slice(&((20 + seg.len()) as u16).to_be_bytes());
    ip.extend_from_slice(&src);
    ip.extend_from_slice(&dst);
    let c = csum(0, &ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    ip.extend_from_slice(&seg);
    let mut fr = LB_MAC.to_vec();
    fr.extend_from_slice(&CLIENT_MAC);
    fr.extend_from_slice(&[0x08, 0x00]);
    fr.extend_from_slice(&ip);
    fr
}
