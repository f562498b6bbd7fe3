//! The probers, scripted: health verdicts by endpoint address and remote
//! rule verdicts by rule name, set by hand instead of probed; and a shell
//! that records what the core asks for ([`Recorder`]). What drives the
//! [`Core`](crate::Core) without a network: `spillway replay` (on the
//! capture's clock) and the simulation tests.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use config::compiled::{Compiled, EndpointId};
use config::schema::GroupKind;

use health::HealthSnapshot;
pub use health::State;

use dataplane::Snapshot;
use dataplane::snapshot::TableKey;

use crate::announce::Desired;
use crate::ports::RemoteKey;
use crate::ports::{BuiltTables, Probes, Shell, build_tables};

/// Scripted verdicts: an endpoint's state by address, a remote rule's by
/// rule name, [`ScriptedProbes::default_state`] for whatever is not
/// scripted (UNKNOWN, as a real prober's before its first verdict, unless
/// made with [`ScriptedProbes::new`]).
#[derive(Debug, Default)]
pub struct ScriptedProbes {
    targets: Vec<health::Target>,
    states: HashMap<IpAddr, State>,
    /// Verdicts of probes through a VIP (M52), by (endpoint, VIP); others
    /// take the endpoint's.
    via: HashMap<(IpAddr, IpAddr), State>,
    weights: HashMap<IpAddr, u16>,
    /// Utilizations reported to HTTP(S) checks (M25), by address.
    utilizations: HashMap<IpAddr, f64>,
    /// Endpoints of services without a health check, reported as if probed.
    unchecked: Vec<(EndpointId, Arc<str>, SocketAddr)>,
    remote_keys: Vec<RemoteKey>,
    remote: HashMap<String, State>,
    default_state: State,
    generation: u64,
    /// Probe rounds so far: every target reports this many probes.
    rounds: u64,
}

impl ScriptedProbes {
    /// Probes whose unscripted endpoints and remote rules are `default`.
    pub fn new(default: State) -> ScriptedProbes {
        ScriptedProbes {
            default_state: default,
            ..ScriptedProbes::default()
        }
    }

    /// Also reports the endpoints of `compiled`'s services that have no
    /// health check (instead of those of the configuration given before),
    /// so that a script may fail an endpoint no prober would check: a
    /// replay's `--down` on any endpoint. The core acts on a reported
    /// verdict whether or not the service has a check.
    pub fn report_unchecked(&mut self, compiled: &Compiled) {
        self.unchecked.clear();
        for svc in &compiled.services {
            if svc.health_check.is_some() || svc.kind == GroupKind::RemoteRule {
                continue;
            }
            let name: Arc<str> = Arc::from(svc.name.as_str());
            for id in svc.endpoint_ids() {
                if let Some(ep) = compiled.endpoints.get(id.index()) {
                    self.unchecked
                        .push((id, name.clone(), SocketAddr::new(ep.address, 0)));
                }
            }
        }
        self.generation += 1;
    }

    /// The state of what is not scripted.
    pub fn default_state(&self) -> State {
        self.default_state
    }

    /// The targets the core asked to probe.
    pub fn targets(&self) -> &[health::Target] {
        &self.targets
    }

    /// The remote rules the core asked to poll.
    pub fn remote_keys(&self) -> &[RemoteKey] {
        &self.remote_keys
    }

    /// Scripts endpoint `addr`'s verdict (a new generation): a probe round
    /// that found it.
    pub fn set_state(&mut self, addr: IpAddr, s: State) {
        self.states.insert(addr, s);
        self.probe_round();
    }

    /// Every target is probed once more, with its scripted verdict (a new
    /// generation): what a prober does every interval.
    pub fn probe_round(&mut self) {
        self.rounds += 1;
        self.generation += 1;
    }

    /// Scripts the verdict of endpoint `addr`'s probe through `vip` (a
    /// new generation).
    pub fn set_state_via(&mut self, addr: IpAddr, vip: IpAddr, s: State) {
        self.via.insert((addr, vip), s);
        self.probe_round();
    }

    /// Scripts endpoint `addr`'s reported weight (a new generation).
    pub fn set_weight(&mut self, addr: IpAddr, weight: Option<u16>) {
        match weight {
            Some(w) => self.weights.insert(addr, w),
            None => self.weights.remove(&addr),
        };
        self.generation += 1;
    }

    /// Scripts endpoint `addr`'s reported utilization (a new generation);
    /// `None`: none reported.
    pub fn set_utilization(&mut self, addr: IpAddr, utilization: Option<f64>) {
        match utilization {
            Some(u) => self.utilizations.insert(addr, u),
            None => self.utilizations.remove(&addr),
        };
        self.generation += 1;
    }

    /// Endpoint `addr`'s scripted verdict.
    pub fn state(&self, addr: IpAddr) -> State {
        self.states
            .get(&addr)
            .copied()
            .unwrap_or(self.default_state)
    }

    /// Scripts remote rule `rule`'s exported state.
    pub fn set_remote(&mut self, rule: &str, s: State) {
        self.remote.insert(rule.to_owned(), s);
    }

    /// The verdict on remote rule `key`, as [`crate::Core::remote_verdicts`]
    /// takes it.
    pub fn remote_state(&self, key: &RemoteKey) -> (State, String) {
        (
            self.remote
                .get(&key.rule)
                .copied()
                .unwrap_or(self.default_state),
            "scripted".into(),
        )
    }

    /// The generation of the scripted health verdicts (it moves with each
    /// change, as a checker's does).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Every target's status now.
    pub fn snapshot(&self) -> HealthSnapshot {
        let mut endpoints: Vec<health::EndpointStatus> = self
            .targets
            .iter()
            .map(|t| health::EndpointStatus {
                endpoint: t.endpoint,
                service: t.service.clone(),
                addr: t.addr,
                vip: t.via.map(|v| v.vip),
                state: t
                    .via
                    .and_then(|v| self.via.get(&(t.addr.ip(), v.vip)).copied())
                    .unwrap_or_else(|| self.state(t.addr.ip())),
                weight: self.weights.get(&t.addr.ip()).copied(),
                utilization: self.utilizations.get(&t.addr.ip()).copied(),
                last_latency: None,
                last_reason: "scripted".into(),
                counters: health::Counters {
                    probes_ok: self.rounds,
                    ..health::Counters::default()
                },
            })
            .chain(
                self.unchecked
                    .iter()
                    .map(|(id, svc, addr)| health::EndpointStatus {
                        endpoint: *id,
                        service: svc.clone(),
                        addr: *addr,
                        vip: None,
                        state: self.state(addr.ip()),
                        weight: self.weights.get(&addr.ip()).copied(),
                        utilization: None,
                        last_latency: None,
                        last_reason: "scripted".into(),
                        counters: health::Counters::default(),
                    }),
            )
            .collect();
        endpoints.sort_by_key(|s| (s.endpoint, s.vip, s.addr));
        endpoints.dedup_by_key(|s| (s.endpoint, s.vip, s.addr));
        HealthSnapshot {
            generation: self.generation,
            endpoints,
        }
    }
}

impl Probes for ScriptedProbes {
    fn set_targets(
        &mut self,
        targets: Vec<health::Target>,
    ) -> Result<HealthSnapshot, health::HealthError> {
        for t in &targets {
            t.check
                .validate()
                .map_err(|reason| health::HealthError::InvalidCheck {
                    name: format!("{}/{}", t.service, t.addr),
                    reason,
                })?;
        }
        self.targets = targets;
        self.generation += 1;
        Ok(self.snapshot())
    }

    fn poll_remotes(&mut self, keys: Vec<RemoteKey>) {
        self.remote_keys = keys;
    }

    fn verdicts_since(&self, generation: u64) -> Option<HealthSnapshot> {
        (generation != self.generation).then(|| self.snapshot())
    }

    fn remote_verdict(&self, key: &RemoteKey) -> (State, String) {
        self.remote_state(key)
    }
}

/// A shell that keeps what the core asks for instead of doing it, over
/// scripted probers: the snapshots published, the log lines with their
/// time, the frames and datagrams to send, the announcements and the
/// watch. Maglev tables are built at once, or held (a build "in
/// progress") until the driver hands them back. The shell of
/// `spillway replay` and of the simulation tests.
#[derive(Debug, Default)]
pub struct Recorder {
    /// The probers.
    pub probes: ScriptedProbes,
    /// Snapshots published since the driver last took them, in order.
    pub published: Vec<Arc<Snapshot>>,
    /// Log lines: when, level, text.
    pub logs: Vec<(Duration, log::Level, String)>,
    /// Frames to send: port, frame.
    pub sent: Vec<(usize, Vec<u8>)>,
    /// Flow-sync datagrams to send: peer, datagram.
    pub sync_out: Vec<(SocketAddr, Vec<u8>)>,
    /// The BGP announcements asked for, in order.
    pub announced: Vec<Desired>,
    /// The routes of the last announcement asked for.
    pub routes: Vec<config::values::Prefix>,
    /// The last [`crate::Output::Watch`].
    pub watching: Option<bool>,
    /// Whether table builds are held instead of built at once.
    pub hold_builds: bool,
    /// Held table builds, for [`crate::Core::tables_built`].
    pub held: Vec<(u64, Vec<TableKey>)>,
}

impl Recorder {
    /// A recorder over `probes`, building tables at once.
    pub fn new(probes: ScriptedProbes) -> Recorder {
        Recorder {
            probes,
            ..Recorder::default()
        }
    }
}

impl Shell for Recorder {
    fn probes(&mut self) -> &mut dyn Probes {
        &mut self.probes
    }

    fn publish(&mut self, snapshot: Arc<Snapshot>) {
        self.published.push(snapshot);
    }

    fn build_tables(
        &mut self,
        build: u64,
        tables: Vec<TableKey>,
    ) -> Option<Result<BuiltTables, String>> {
        if self.hold_builds {
            self.held.push((build, tables));
            None
        } else {
            Some(build_tables(tables))
        }
    }

    fn transmit(&mut self, port: usize, frame: Vec<u8>) {
        self.sent.push((port, frame));
    }

    fn sync_send(&mut self, to: SocketAddr, datagram: Vec<u8>) {
        self.sync_out.push((to, datagram));
    }

    fn announce(&mut self, desired: Desired, routes: Vec<config::values::Prefix>) {
        self.announced.push(desired);
        self.routes = routes;
    }

    fn watch(&mut self, on: bool) {
        self.watching = Some(on);
    }

    fn log(&mut self, now: Duration, level: log::Level, _target: &'static str, text: String) {
        self.logs.push((now, level, text));
    }
}
