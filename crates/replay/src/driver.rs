//! The management core driven on the capture's clock ([`Mgmt`]): its
//! shell is [`Recorder`] (outputs kept, tables built at once), its probers
//! are scripted ([`ScriptedProbes`]: every endpoint and remote rule healthy
//! unless the [`Script`] says otherwise), and the script's reloads are
//! handed to it as `spillway reload` hands them. [`load_script`] reads the
//! reloaded files and checks the script's addresses before the replay
//! starts.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use control_core::scripted::State;
use control_core::{Core, Inputs, Recorder, ScriptedProbes};
use dataplane::{Local, Snapshot, Tick, WorkerCounters};
use flowtable::FlowTable;
use wire::ethernet::MacAddr;

use crate::script::{Change, Down, Event, Script};
use crate::{PERIOD, Replay, ReplayError};

/// A stretch of the capture without packets longer than this is not ticked
/// through whole: after [`SETTLE`] of ticks (plans see the rates fall) the
/// clock jumps to [`SETTLE`] before the next packet. A capture with a gap of
/// days is replayed in seconds; nothing the core decides in a quiet stretch
/// outlives it except drains ending and health changes, which the ticks
/// after the jump still see.
const LONG_GAP: Duration = Duration::from_secs(10);
const SETTLE: Duration = Duration::from_secs(2);

/// A timed change, with a reload's file as loaded at the start.
pub(crate) type Timed = (Event, Option<Result<config::Loaded, String>>);

/// The script's timed changes, each reload's file loaded now: a missing one
/// fails the replay before it starts; one that does not validate is refused
/// at its time, as `spillway reload` refuses it. Every address `--down` or
/// `--up` names must be an endpoint's, in `compiled` or a reloaded file.
pub(crate) fn load_script(
    script: &Script,
    compiled: &config::compiled::Compiled,
) -> Result<Vec<Timed>, ReplayError> {
    let mut known = addresses(compiled);
    let mut events = Vec::new();
    for e in script.events() {
        let file = match &e.what {
            Change::Reload(path) => {
                if !path.is_file() {
                    return Err(ReplayError::ReloadMissing(path.clone()));
                }
                let l = config::load(path).map_err(|e| e.to_string());
                if let Ok(l) = &l {
                    known.extend(addresses(&l.compiled));
                }
                Some(l)
            }
            _ => None,
        };
        events.push((e.clone(), file));
    }
    let timed = script.events().iter().filter_map(|e| match e.what {
        Change::Down(a) => Some(("--down", a)),
        Change::Up(a) => Some(("--up", a)),
        Change::Reload(_) | Change::Remote(..) => None,
    });
    for (option, address) in script
        .windows()
        .iter()
        .map(|d| ("--down", d.address))
        .chain(timed)
    {
        if !known.contains(&address) {
            return Err(ReplayError::UnknownAddress { option, address });
        }
    }
    Ok(events)
}

/// Every endpoint address of `compiled`, once each, in configuration order.
fn addresses(compiled: &config::compiled::Compiled) -> Vec<IpAddr> {
    let mut out: Vec<IpAddr> = Vec::new();
    for e in &compiled.endpoints {
        if !out.contains(&e.address) {
            out.push(e.address);
        }
    }
    out
}

/// `--neighbour`'s next hops answer, each on the port it is resolved on.
fn neighbour_answers(
    core: &Core,
    neighbours: &[(IpAddr, MacAddr)],
) -> Vec<(usize, IpAddr, MacAddr)> {
    if neighbours.is_empty() {
        return Vec::new();
    }
    let hops = dataplane::nexthop::next_hops(core.compiled());
    neighbours
        .iter()
        .flat_map(|(ip, mac)| {
            hops.iter()
                .filter(move |h| h.addr == *ip)
                .map(move |h| (h.port, *ip, *mac))
        })
        .collect()
}

/// The management core on the capture's clock, its shell (probers
/// scripted, outputs recorded), and the snapshot it last published.
pub(crate) struct Mgmt {
    core: Core,
    shell: Recorder,
    /// The snapshot the pipeline uses.
    pub(crate) snap: Arc<Snapshot>,
    /// The capture time of the next tick.
    pub(crate) next_tick: Duration,
    /// The `--down` windows (read at every tick).
    windows: Vec<Down>,
    /// The next hops that answer ARP/NDP (`--neighbour`).
    neighbours: Vec<(IpAddr, MacAddr)>,
    /// Endpoint addresses, and whether each is down now (by `--down`).
    addresses: Vec<(IpAddr, bool)>,
    /// "second S: ADDRESS down|up" for each scripted change, in order.
    pub(crate) health_changes: Vec<String>,
    /// The timed changes, each reload's file as loaded at the start, and
    /// how many have happened.
    events: Vec<Timed>,
    done: usize,
    /// Health set by `--at`, by address: down or not (over `--down`
    /// windows from then on).
    set: Vec<(IpAddr, bool)>,
}

impl Mgmt {
    /// Starts the core on `compiled` (loaded from `replay.config`) at
    /// capture time 0, with the health the script gives at 0.
    pub(crate) fn start(
        replay: &Replay,
        compiled: config::compiled::Compiled,
        events: Vec<Timed>,
    ) -> Result<Mgmt, ReplayError> {
        let local = Local::from_config(&compiled, |_| None);
        let mut probes = ScriptedProbes::new(State::Healthy);
        probes.report_unchecked(&compiled);
        // Health set at time 0 holds from the first packet on (a reload
        // at 0 waits for the first tick).
        let mut set: Vec<(IpAddr, bool)> = Vec::new();
        let mut done = 0;
        for (e, _) in &events {
            let (a, down) = match &e.what {
                Change::Down(a) if e.at.is_zero() => (*a, true),
                Change::Up(a) if e.at.is_zero() => (*a, false),
                Change::Remote(rule, state) if e.at.is_zero() => {
                    probes.set_remote(rule, *state);
                    done += 1;
                    continue;
                }
                _ => break,
            };
            set.retain(|(x, _)| *x != a);
            set.push((a, down));
            done += 1;
        }
        let addresses: Vec<(IpAddr, bool)> = addresses(&compiled)
            .into_iter()
            .map(|a| match set.iter().find(|(x, _)| *x == a) {
                Some(&(_, d)) => (a, d),
                None => (a, replay.script.windows().iter().any(|d| d.covers(a, 0))),
            })
            .collect();
        for &(a, down) in &addresses {
            if down {
                probes.set_state(a, State::Unhealthy);
            }
        }
        // The all-zero cookie key, as the builder of tests and replays: a
        // replay's cookies depend on `--seed` only.
        let mut core = Core::start(
            &replay.config,
            compiled,
            local,
            dataplane::CookieKey::default(),
            Duration::ZERO,
            &mut probes,
        )
        .map_err(ReplayError::Start)?;
        core.sightings(Duration::ZERO, neighbour_answers(&core, &replay.neighbours));
        let snap = core.live().clone();
        let mut m = Mgmt {
            core,
            shell: Recorder::new(probes),
            snap,
            next_tick: PERIOD,
            windows: replay.script.windows().to_vec(),
            neighbours: replay.neighbours.clone(),
            addresses,
            health_changes: Vec::new(),
            events,
            done,
            set,
        };
        m.pump();
        Ok(m)
    }

    /// Carries out what the core asked for: the last snapshot published
    /// is the one the pipeline uses; tables are built at once; log lines
    /// are kept for the report. No ports to send on (`--neighbour` stands
    /// for the answers), no BGP speaker to drive, no sync peers.
    fn pump(&mut self) {
        self.core.carry_out(&mut self.shell);
        self.took_published();
    }

    fn took_published(&mut self) {
        if let Some(s) = self.shell.published.drain(..).next_back() {
            self.snap = s;
        }
        // Nothing carries these out here; kept, they would only grow.
        self.shell.sent.clear();
        self.shell.announced.clear();
        self.shell.sync_out.clear();
    }

    /// What the core logged, with the capture time.
    pub(crate) fn logs(&self) -> impl Iterator<Item = String> + '_ {
        self.shell.logs.iter().map(|(at, level, text)| {
            format!(
                "{:.3} s: {}: {text}",
                at.as_secs_f64(),
                level.as_str().to_lowercase()
            )
        })
    }

    /// Ticks through capture time up to `until` (every tick due by then),
    /// as the daemon's loop would: scripted health in, then the core's
    /// periodic work with the pipeline's counters, then a slice of the flow
    /// table aged. `last_packet` is the capture time of the latest packet.
    pub(crate) fn advance(
        &mut self,
        until: Duration,
        last_packet: Duration,
        flows: &FlowTable,
        counters: &WorkerCounters,
    ) {
        while self.next_tick <= until {
            if until.saturating_sub(self.next_tick) > LONG_GAP
                && self.next_tick.saturating_sub(last_packet) > SETTLE
            {
                let to = until.saturating_sub(SETTLE);
                let periods = to.as_nanos() / PERIOD.as_nanos();
                let jump = PERIOD.saturating_mul(u32::try_from(periods).unwrap_or(u32::MAX));
                self.next_tick = self.next_tick.max(jump);
            }
            let now = self.next_tick;
            self.step(now, flows, counters);
            self.next_tick = now + PERIOD;
        }
    }

    /// Carries out the timed changes due by `now`: health set, reloads
    /// handed to the core as `spillway reload` hands them.
    fn changes(&mut self, now: Duration) {
        while let Some((e, loaded)) = self.events.get_mut(self.done)
            && e.at <= now
        {
            self.done += 1;
            let (what, loaded) = (e.what.clone(), loaded.take());
            match what {
                Change::Remote(rule, state) => {
                    self.health_changes.push(format!(
                        "{:.3} s: remote rule {rule} {state}",
                        now.as_secs_f64()
                    ));
                    self.shell.probes.set_remote(&rule, state);
                }
                Change::Down(a) | Change::Up(a) => {
                    let down = matches!(what, Change::Down(_));
                    self.set.retain(|(x, _)| *x != a);
                    self.set.push((a, down));
                }
                Change::Reload(path) => {
                    let loaded = loaded.unwrap_or_else(|| Err("not loaded".into()));
                    // The endpoints of services without a check follow the
                    // configuration the core runs (back if refused).
                    if let Ok(l) = &loaded {
                        self.shell.probes.report_unchecked(&l.compiled);
                    }
                    let answer = self.core.reload(now, loaded, false, &mut self.shell.probes);
                    if answer.is_err() {
                        let running = self.core.compiled().clone();
                        self.shell.probes.report_unchecked(&running);
                    }
                    for a in addresses(self.core.compiled()) {
                        if !self.addresses.iter().any(|(x, _)| *x == a) {
                            self.addresses.push((a, false));
                        }
                    }
                    self.health_changes.push(format!(
                        "{:.3} s: reload {}: {}",
                        now.as_secs_f64(),
                        path.display(),
                        control_core::reload_text(&answer)
                            .trim_end()
                            .replace('\n', " ")
                    ));
                    self.pump();
                }
            }
        }
    }

    /// One management tick at `now`: the changes due, the scripted health,
    /// then the core's step with the pipeline's counters.
    fn step(&mut self, now: Duration, flows: &FlowTable, counters: &WorkerCounters) {
        self.changes(now);
        let second = Tick::at(now).get();
        for (a, down) in &mut self.addresses {
            let is = match self.set.iter().find(|(x, _)| x == a) {
                Some(&(_, d)) => d,
                None => self.windows.iter().any(|d| d.covers(*a, second)),
            };
            if is != *down {
                *down = is;
                let (state, word) = if is {
                    (State::Unhealthy, "down")
                } else {
                    (State::Healthy, "up")
                };
                self.shell.probes.set_state(*a, state);
                // Whole seconds (`--down` windows, most `--at`s), or to
                // the millisecond.
                let when = if now.subsec_nanos() == 0 {
                    format!("second {second}")
                } else {
                    format!("{:.3} s", now.as_secs_f64())
                };
                self.health_changes.push(format!("{when}: {a} {word}"));
            }
        }
        let inputs = Inputs {
            flows,
            // `--neighbour`: the next hop answers every tick (so it never
            // ages out).
            sightings: neighbour_answers(&self.core, &self.neighbours),
            // A capture is replayed by one node: no VRRP peer speaks, so
            // each group takes over after its master-down interval.
            vrrp: Vec::new(),
            counters: &|| counters.clone(),
            sync_queue: None,
        };
        self.core.step(now, inputs, &mut self.shell);
        self.took_published();
    }
}
