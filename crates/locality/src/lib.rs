//! Locality, capacity and spillover (M19, M23–M29): how each backend
//! service's **new** connections are shared out over regions, zones and
//! endpoints.
//!
//! The management core calls this at least once a second (M29) per
//! service; the data plane only reads the result. Pure: no I/O, no threads,
//! no clocks (elapsed time is an argument), deterministic.
//!
//! * [`decide`] — one round: node place + service shape + one observation
//!   (+ the previous plan, for hysteresis) → [`Plan`].
//! * [`Planner`] — the per-service state the management core keeps: it
//!   smooths the raw 1 s measurements and calls [`decide`].
//! * [`pick_region`] / [`pick_index`] — the data plane's per-flow region
//!   choice on a flow-table miss: integer compares only.
//!
//! # Semantics
//!
//! **Eligibility (M16, M17, M11, M23, and UNKNOWN).** An endpoint is
//! eligible for new connections when its effective weight (the health
//! check's header weight if any, else the configured one; `MAGLEV` counts
//! every positive weight as 1) is positive, its group's `capacity_scaler`
//! is positive (0 drains the group: existing flows stay, no new ones), and
//! its health qualifies. Which health qualifies is decided service-wide, in
//! tiers over the endpoints that could serve at all (positive weight, group
//! not drained) ([`Eligibility`]):
//!
//! 1. one of them is **Healthy** → only Healthy endpoints;
//! 2. none is Healthy but some are **Unknown** → the Unknown ones (start-up:
//!    before the first verdicts, serving beats black-holing; as soon as one
//!    endpoint is known healthy, unverified ones stop taking new flows, so
//!    an endpoint added by a reload gets traffic only once it passes, as
//!    with Envoy's and the cloud balancers' "wait for the first pass");
//! 3. all are **Unhealthy** and `fail_open = true` → all of them (M23;
//!    "every endpoint" of the service, drained and weight-0 ones aside);
//! 4. otherwise nothing (M14's drop/reset applies).
//!
//! A service without a health check (and not of kind `remote_rule`) has no
//! Unknown endpoints: Unknown reads as Healthy. A drained group or a weight-0
//! endpoint is never used, fail-open or not.
//!
//! **Aggregation (M19).** Per region, over all the service's endpoints there
//! (drained or not — draining is not ill health): HEALTHY when the healthy
//! ones meet `min_healthy_count` and `min_healthy_percent`; UNHEALTHY when
//! even counting Unknown ones as healthy they do not; UNKNOWN otherwise
//! ([`aggregate`]). Under fail-open every region counts as HEALTHY for
//! routing; [`RegionStatus::health`] still shows the real state.
//!
//! **Candidates and failover (M24, M26).** Regions are taken in the node's
//! preference order ([`NodeSpec::region_order`]; unlisted ones after, by
//! id). A region is a candidate when it has eligible endpoints and is not
//! UNHEALTHY by aggregation. An UNHEALTHY region gets no new connections:
//! they go to the next candidate; when it recovers it is a candidate again
//! and new connections return at once (established flows stay where they
//! are — the flow table keeps them). If *every* region with eligible
//! endpoints is UNHEALTHY, they are all candidates anyway
//! ([`Plan::degraded`]): aggregation chooses between regions, it never
//! refuses traffic a healthy endpoint can take.
//!
//! **Capacity (M25).** In packets per second, per group, summed per zone
//! and region:
//! * `RATE`: `max_rate_per_endpoint × eligible endpoints`, capped by
//!   `max_rate × eligible/total endpoints` of the group (a group's rate is
//!   its endpoints' together, so losing one loses its share), times
//!   `capacity_scaler`, times [`NodeSpec::capacity_share`] (1/N for N
//!   balancer nodes behind ECMP). Neither rate set: unlimited.
//! * `UTILIZATION`: a linear model. A group whose eligible endpoints report
//!   weighted mean utilization `u` while carrying `L` pps can carry
//!   `L · t / u` at target `t = max_utilization × capacity_scaler` (a region
//!   at `u = 0.9` with `t = 0.6` can take 2/3 of its current load). `u` is
//!   floored at 0.01. When a group carries too little to scale from
//!   (≤ [`Tuning::idle_rate`] or 0.1 % of the demand) it is taken to have
//!   room (unlimited) while `u < t` and none otherwise; the next rounds then
//!   measure it. No report at all: unlimited (status shows the
//!   utilization as unknown).
//! * `UTILIZATION` with a rate too (`max_rate_per_endpoint` or the group's
//!   `max_rate`, the clouds' "or both"): the smaller of the two capacities
//!   above, each in packets per second against the same measured rates —
//!   the group is full when either limit is reached. A group's own
//!   `max_utilization` overrides the service's target; the node's capacity
//!   share applies to the rate part only.
//!
//! **Spillover (M26).** Demand `D` is the service's total measured rate
//! over *all* its endpoints (not the nearest region's), so it does not
//! depend on the current split. Water-filling nearest first: each candidate
//! takes `min(remaining, capacity)`; its fraction of new connections is
//! `take / D`. Region A at 150 % of its capacity keeps 2/3 and spills 1/3
//! to B; at 80 % it keeps everything; at 300 % with a small B the rest
//! cascades to C. If every candidate is full ([`Plan::overloaded`]), new
//! connections are shared **in proportion to capacity** (every region
//! equally overloaded — continuous with the water-fill at `D = ΣC`). With no
//! capacity anywhere, or no demand yet, the nearest candidate takes all.
//! Fractions below [`Tuning::min_fraction`] are folded into the others.
//!
//! **Stability.** [`Planner`] smooths the demand, each endpoint's rate and
//! utilization and the zone shares with a first-order filter,
//! `x += dt/(τ+dt) · (sample − x)`, τ = 1 s for rising and 5 s for falling
//! samples ([`Tuning`]): spill fast on a surge, come back slowly. Then
//! hysteresis: the published fractions change only when one moved by at
//! least [`Tuning::hysteresis`] (0.01), or by more than the counting noise
//! of a low demand ([`Tuning::noise_sigmas`]: 1.5 σ of a Poisson count
//! over ~2 s, at most 4 %) — or at once when the candidate set changes
//! (failover, recovery). Because `D` is total traffic, feeding a
//! plan's own resulting rates back in is a fixed point from the first
//! round (`RATE`); in `UTILIZATION` mode `L/u` is the same for any load on a
//! linear backend, so the estimate does not chase the split either.
//! Health and weights are never smoothed.
//!
//! **Zones (M27, M28).** Within a region, the default selection set is every
//! eligible endpoint by weight × `capacity_scaler` (cross-zone, the
//! default). With `cross_zone = false` the node's own zone serves this
//! node's traffic first (as a cloud NLB node without cross-zone balancing):
//! the set pins a share `p` to the node zone's endpoints and spreads the
//! rest over the region. With `zonal_affinity`, each zone with eligible
//! endpoints gets a [`ZoneVariant`] for clients of that zone (the data
//! plane maps the client's source prefix to its zone): `p ≤ 1 −
//! zonal_spill_ratio` of its new connections are pinned to the zone, the
//! rest spread over the whole region by weight (so at most
//! `zonal_spill_ratio` leave the zone; 0 keeps them in the zone, 1 is no
//! affinity). In both cases `p` is lowered below its ceiling when the
//! zone's demand would exceed its capacity (zone load `= demand · (p + (1 −
//! p) · a)`, `a` the zone's weight share), and is 0 — the plain cross-zone
//! set — when the zone has no eligible endpoint. A zone's demand is its
//! share in [`Observation::zone_demand`] times the region's; unknown, a
//! client zone is assumed to bring demand in proportion to its capacity,
//! and the node's zone all of this node's traffic.
//!
//! **Per flow.** [`pick_region`] maps a flow hash to a region by comparing a
//! 32-bit key — the high bits of a SplitMix64 remix of the hash, so that
//! the key does not correlate with the Maglev slot the same hash picks —
//! with the cumulative fractions scaled to 2³². The same hash picks the
//! same region while the fractions are unchanged; hysteresis keeps them
//! unchanged through noise. The flow table pins established flows anyway.

mod aggregate;
mod decide;
mod input;
mod plan;
mod planner;

pub use aggregate::{AggregateHealth, aggregate};
pub use decide::decide;
pub use input::{
    CapacityMode, EndpointObs, EndpointSpec, GroupSpec, Health, InputError, MAX_NOISE_BAND,
    NodeSpec, Observation, ServiceSpec, Tuning, endpoint_id,
};
pub use plan::{
    Eligibility, Plan, RegionShare, RegionStatus, Weighted, ZoneVariant, pick_index, pick_region,
    region_key, thresholds,
};
pub use planner::Planner;

/// Re-exported configuration types the inputs use.
pub use config::compiled::{RegionId, ZoneId};
pub use config::schema::{Aggregation, Locality};
