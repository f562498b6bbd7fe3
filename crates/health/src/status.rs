//! What the probers report, as the decisions read it: each target's
//! status ([`EndpointStatus`]: state, reported weight and utilization, the
//! last verdict, counters) and a copy of them all ([`HealthSnapshot`]). The
//! checker (feature `probers`) writes them; scripted probers make them by
//! hand.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use config::compiled::EndpointId;

use crate::state::State;

/// Per-endpoint counters (M18), monotonic while the endpoint is kept.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Probes that passed.
    pub probes_ok: u64,
    /// Probes that failed.
    pub probes_failed: u64,
    /// Transitions to HEALTHY.
    pub to_healthy: u64,
    /// Transitions to UNHEALTHY.
    pub to_unhealthy: u64,
}

impl Counters {
    /// All state transitions.
    pub const fn transitions(&self) -> u64 {
        self.to_healthy + self.to_unhealthy
    }

    /// All probes.
    pub const fn probes(&self) -> u64 {
        self.probes_ok + self.probes_failed
    }
}

/// What the checker knows about one target.
#[derive(Clone, Debug, PartialEq)]
pub struct EndpointStatus {
    /// The target's `endpoint` handle.
    pub endpoint: EndpointId,
    /// Its service.
    pub service: Arc<str>,
    /// The endpoint's address and the port probed.
    pub addr: SocketAddr,
    /// The VIP probed through (M52); `None`: the endpoint's own address.
    pub vip: Option<IpAddr>,
    /// Current state.
    pub state: State,
    /// Weight reported by the last passing probe's header (M17); `None`:
    /// the configured weight applies (no header, or not asked for).
    pub weight: Option<u16>,
    /// Utilization reported by the last passing probe's header; `None`: not
    /// reported.
    pub utilization: Option<f64>,
    /// Duration of the last probe, passing or failing.
    pub last_latency: Option<Duration>,
    /// The last probe's verdict (`HTTP 200`, `connect refused`, …); empty
    /// before the first probe.
    pub last_reason: String,
    /// Counters.
    pub counters: Counters,
}

impl EndpointStatus {
    /// The weight to use: the reported one, else `configured`.
    pub fn effective_weight(&self, configured: u16) -> u16 {
        self.weight.unwrap_or(configured)
    }

    /// Eligible for new flows (M17): HEALTHY with a positive effective
    /// weight. UNKNOWN is not eligible (a new endpoint gets traffic once it
    /// has proved healthy); fail-open (M23) is the caller's decision.
    pub fn is_eligible(&self, configured_weight: u16) -> bool {
        self.state == State::Healthy && self.effective_weight(configured_weight) > 0
    }
}

/// A consistent-enough copy of every target's status.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HealthSnapshot {
    /// The checker's generation read before the statuses were copied:
    /// a change racing the copy may already show, and then shows again with
    /// the next generation — never lost.
    pub generation: u64,
    /// One per target (deduplicated), sorted by `endpoint`, then VIP.
    pub endpoints: Vec<EndpointStatus>,
}

impl HealthSnapshot {
    /// The status that decides `endpoint`'s health (binary search): its
    /// probe's, or of an endpoint probed through several VIPs (M52) the
    /// first UNHEALTHY one, else the first UNKNOWN, else the first — an
    /// endpoint counts as unhealthy for its service when any VIP fails it
    /// ([`HealthSnapshot::all`] gives each VIP's, for per-VIP decisions).
    pub fn get(&self, endpoint: EndpointId) -> Option<&EndpointStatus> {
        let all = self.all(endpoint);
        all.iter()
            .find(|s| s.state == State::Unhealthy)
            .or_else(|| all.iter().find(|s| s.state == State::Unknown))
            .or_else(|| all.first())
    }

    /// Every status of `endpoint`: one per VIP it is probed through, else
    /// at most one.
    pub fn all(&self, endpoint: EndpointId) -> &[EndpointStatus] {
        let lo = self.endpoints.partition_point(|s| s.endpoint < endpoint);
        let hi = self.endpoints.partition_point(|s| s.endpoint <= endpoint);
        self.endpoints.get(lo..hi).unwrap_or_default()
    }
}
