//! The running health checker: one thread (`spillway-health`) with a tokio
//! current-thread runtime, one task per endpoint, and a handle the
//! management core polls without ever waiting on a probe.
//!
//! # Threading
//!
//! Every endpoint is its own task with its own interval timer, so a slow or
//! silent endpoint only ever delays itself: its probe waits (at most the
//! timeout) while the runtime keeps driving the others. Probe starts are
//! spread over the interval by a phase derived from the endpoint's index in
//! the target list (the golden-ratio sequence `frac(i · 0.618…)`, evenly
//! spread for any number of endpoints and stable when endpoints are added),
//! not by random jitter, so runs are reproducible.
//!
//! Each task publishes its results into its own small slot (a `Mutex` held
//! only to copy a few fields, never across an `.await`). The handle's
//! [`HealthChecker::generation`] is an atomic counter bumped whenever a
//! state, weight or utilization changes (or the targets do): the management
//! core compares it with the generation of its last rebuild and calls
//! [`HealthChecker::snapshot`] only on a change. Counters and latencies do
//! not bump it (metrics read them with `snapshot` at their own pace).

// The I/O part of the crate (feature `probers`): clippy.toml keeps sockets,
// clocks and threads out of the decisions, not out of here.
#![allow(clippy::disallowed_types, clippy::disallowed_methods)]

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use config::compiled::EndpointId;
use tokio::runtime::Handle;
use tokio::sync::oneshot;
use tokio::task::AbortHandle;
use tokio::time::MissedTickBehavior;

use crate::error::HealthError;
use crate::probe::{Prepared, ProbeError, ProbeOk, Prober};
use crate::state::{State, Tracker};
pub use crate::status::{Counters, EndpointStatus, HealthSnapshot};
use crate::target::{Check, Target};

/// Name of the health-check thread (as in `/proc/self/task/*/comm`).
pub const THREAD_NAME: &str = "spillway-health";

/// A probe's published state.
#[derive(Debug, Default)]
struct SlotStatus {
    state: State,
    weight: Option<u16>,
    utilization: Option<f64>,
    last_latency: Option<Duration>,
    last_reason: String,
    counters: Counters,
}

/// One probe task's shared half.
#[derive(Debug)]
struct Slot {
    service: Arc<str>,
    addr: SocketAddr,
    vip: Option<IpAddr>,
    /// Through a VIP: the source port, which a reload may move (0: none).
    source_port: AtomicU16,
    status: Mutex<SlotStatus>,
}

impl Slot {
    fn lock(&self) -> MutexGuard<'_, SlotStatus> {
        // A panic elsewhere cannot leave these plain fields half-written in
        // a way that matters; keep serving them.
        self.status.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records one probe result; returns whether anything the management
    /// core decides on changed.
    fn record(
        &self,
        tracker: &mut Tracker,
        result: &Result<ProbeOk, ProbeError>,
        latency: Duration,
    ) -> bool {
        let transition = tracker.record(result.is_ok());
        let reason = match result {
            Ok(ok) => ok.reason(),
            Err(e) => e.to_string(),
        };
        let changed = {
            let mut s = self.lock();
            let mut changed = false;
            s.last_latency = Some(latency);
            match result {
                Ok(ok) => {
                    s.counters.probes_ok += 1;
                    changed |= s.weight != ok.weight || s.utilization != ok.utilization;
                    s.weight = ok.weight;
                    s.utilization = ok.utilization;
                }
                Err(_) => s.counters.probes_failed += 1,
            }
            if let Some(t) = transition {
                s.state = t.to;
                match t.to {
                    State::Healthy => s.counters.to_healthy += 1,
                    State::Unhealthy => s.counters.to_unhealthy += 1,
                    State::Unknown => {}
                }
                changed = true;
            }
            if s.last_reason != reason {
                s.last_reason.clone_from(&reason);
            }
            changed
        };
        if let Some(t) = transition {
            let via = self.vip.map(|v| format!(" via {v}")).unwrap_or_default();
            log::info!(
                "health: {}/{}{via} {} -> {} ({reason})",
                self.service,
                self.addr,
                t.from,
                t.to
            );
        }
        changed
    }
}

/// Identity of a probe across updates.
type Key = (Arc<str>, SocketAddr, Check, Option<IpAddr>);

struct Entry {
    slot: Arc<Slot>,
    task: AbortHandle,
}

/// Start offset of the `index`th target within `interval`: the golden-ratio
/// (Fibonacci hashing) sequence, low-discrepancy for every prefix.
pub fn phase(index: usize, interval: Duration) -> Duration {
    const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15; // 2^64 / φ
    let frac = u128::from((index as u64).wrapping_mul(GOLDEN));
    let nanos = (interval.as_nanos() * frac) >> 64;
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}

/// Probes a set of targets on its own thread until stopped or dropped.
pub struct HealthChecker {
    handle: Handle,
    prober: Prober,
    generation: Arc<AtomicU64>,
    entries: HashMap<Key, Entry>,
    /// Sorted by endpoint handle, then VIP.
    list: Vec<(EndpointId, Arc<Slot>)>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for HealthChecker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HealthChecker")
            .field("targets", &self.list.len())
            .field("generation", &self.generation())
            .finish_non_exhaustive()
    }
}

impl HealthChecker {
    /// Starts the `spillway-health` thread and probes `targets`.
    pub fn start(targets: Vec<Target>) -> Result<Self, HealthError> {
        validate(&targets)?;
        let prober = Prober::new()?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(HealthError::Runtime)?;
        let handle = runtime.handle().clone();
        let (stop, stopped) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name(THREAD_NAME.to_owned())
            .spawn(move || {
                // Either a stop message or the sender's drop ends it; the
                // runtime's drop then cancels every probe task.
                runtime.block_on(async {
                    let _ = stopped.await;
                });
            })
            .map_err(HealthError::Thread)?;
        let mut checker = Self {
            handle,
            prober,
            generation: Arc::new(AtomicU64::new(0)),
            entries: HashMap::new(),
            list: Vec::new(),
            stop: Some(stop),
            thread: Some(thread),
        };
        checker.apply(targets);
        Ok(checker)
    }

    /// Replaces the targets (reload). A target whose service, address, port
    /// and check settings all equal a running one's keeps its state,
    /// counters and probe cadence (its `endpoint` handle is updated); others
    /// start UNKNOWN; targets no longer listed stop. Nothing changes if a
    /// target is invalid.
    pub fn update(&mut self, targets: Vec<Target>) -> Result<(), HealthError> {
        validate(&targets)?;
        self.apply(targets);
        Ok(())
    }

    fn apply(&mut self, targets: Vec<Target>) {
        let mut old = std::mem::take(&mut self.entries);
        let mut list = Vec::with_capacity(targets.len());
        for (index, t) in targets.into_iter().enumerate() {
            let vip = t.via.map(|v| v.vip);
            let source_port = t.via.map_or(0, |v| v.source_port);
            let key: Key = (Arc::clone(&t.service), t.addr, t.check.clone(), vip);
            let slot = if let Some(e) = self.entries.get(&key) {
                Arc::clone(&e.slot) // listed twice
            } else if let Some(e) = old.remove(&key) {
                let slot = Arc::clone(&e.slot);
                slot.source_port.store(source_port, Ordering::Relaxed);
                self.entries.insert(key, e);
                slot
            } else {
                let slot = Arc::new(Slot {
                    service: Arc::clone(&t.service),
                    addr: t.addr,
                    vip,
                    source_port: AtomicU16::new(source_port),
                    status: Mutex::new(SlotStatus::default()),
                });
                let offset = phase(index, t.check.interval);
                let task = self.handle.spawn(run(
                    Arc::clone(&slot),
                    Prepared::new(t.connect_to(), t.check),
                    self.prober.clone(),
                    Arc::clone(&self.generation),
                    offset,
                ));
                self.entries.insert(
                    key,
                    Entry {
                        slot: Arc::clone(&slot),
                        task: task.abort_handle(),
                    },
                );
                slot
            };
            list.push((t.endpoint, slot));
        }
        for e in old.values() {
            e.task.abort();
        }
        list.sort_by_key(|(id, slot)| (*id, slot.vip));
        self.list = list;
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// Changes whenever a state, weight or utilization changes or the
    /// targets are replaced. One atomic load.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Number of probes running (targets after deduplication).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// No targets.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Copies every target's status (one short uncontended lock per target;
    /// never waits on a probe).
    pub fn snapshot(&self) -> HealthSnapshot {
        let generation = self.generation();
        let endpoints = self
            .list
            .iter()
            .map(|(id, slot)| {
                let s = slot.lock();
                EndpointStatus {
                    endpoint: *id,
                    service: Arc::clone(&slot.service),
                    addr: slot.addr,
                    vip: slot.vip,
                    state: s.state,
                    weight: s.weight,
                    utilization: s.utilization,
                    last_latency: s.last_latency,
                    last_reason: s.last_reason.clone(),
                    counters: s.counters,
                }
            })
            .collect();
        HealthSnapshot {
            generation,
            endpoints,
        }
    }

    /// The snapshot if the generation moved past `generation`, else `None`
    /// (one atomic load).
    pub fn changed_since(&self, generation: u64) -> Option<HealthSnapshot> {
        (self.generation() != generation).then(|| self.snapshot())
    }

    /// Stops every probe and joins the thread.
    pub fn stop(mut self) -> Result<(), HealthError> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<(), HealthError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match self.thread.take() {
            Some(t) => t.join().map_err(|_| HealthError::Panicked),
            None => Ok(()),
        }
    }
}

impl Drop for HealthChecker {
    fn drop(&mut self) {
        if let Err(e) = self.shutdown() {
            log::error!("health: {e}");
        }
    }
}

fn validate(targets: &[Target]) -> Result<(), HealthError> {
    for t in targets {
        t.check
            .validate()
            .map_err(|reason| HealthError::InvalidCheck {
                name: format!("{}/{}", t.service, t.addr),
                reason,
            })?;
    }
    Ok(())
}

/// One endpoint's probe loop.
async fn run(
    slot: Arc<Slot>,
    probe: Prepared,
    prober: Prober,
    generation: Arc<AtomicU64>,
    offset: Duration,
) {
    let mut probe = probe;
    let check = probe.check().clone();
    let mut tracker = Tracker::new(check.healthy_threshold, check.unhealthy_threshold);
    let start = tokio::time::Instant::now() + offset;
    let mut ticker = tokio::time::interval_at(start, check.interval);
    // A probe never outlasts the interval (timeout ≤ interval), but a
    // stalled thread could: then skip the missed starts and keep the phase.
    ticker.set_missed_tick_behavior(MissedTickBehavior::Skip);
    loop {
        ticker.tick().await;
        let port = slot.source_port.load(Ordering::Relaxed);
        probe.set_source_port((port != 0).then_some(port));
        let began = Instant::now();
        let result = prober.run(&probe).await;
        let latency = began.elapsed();
        if slot.record(&mut tracker, &result, latency) {
            generation.fetch_add(1, Ordering::AcqRel);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_spread_evenly() {
        let interval = Duration::from_secs(1);
        for n in [1usize, 7, 100, 10_000] {
            let mut buckets = [0usize; 10];
            for i in 0..n {
                let p = phase(i, interval);
                assert!(p < interval);
                buckets[(p.as_nanos() * 10 / interval.as_nanos()) as usize] += 1;
            }
            let (lo, hi) = (buckets.iter().min().unwrap(), buckets.iter().max().unwrap());
            // Every tenth of the interval gets its share, give or take one.
            if n >= 10 {
                assert!(hi - lo <= 2, "{n}: {buckets:?}");
            }
        }
        assert_eq!(phase(0, interval), Duration::ZERO);
    }
}
