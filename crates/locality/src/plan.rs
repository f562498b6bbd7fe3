//! The decision for one service, and the per-flow helpers the data plane
//! calls on a flow-table miss.

use config::compiled::{RegionId, ZoneId};
use maglev::mix64;

use crate::aggregate::AggregateHealth;

/// An eligible endpoint and its relative weight in one selection set (the
/// input of one weighted Maglev table). Weights are relative: only ratios
/// matter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Weighted {
    /// Index into [`crate::ServiceSpec::endpoints`].
    pub endpoint: u32,
    /// Relative weight, > 0.
    pub weight: u32,
}

/// The selection set for clients of one zone in one region (M27, M28).
#[derive(Clone, Debug, PartialEq)]
pub struct ZoneVariant {
    /// The client zone it is for.
    pub zone: ZoneId,
    /// Share of the new connections pinned to the zone's own endpoints
    /// (the rest is spread over the whole region by weight, the zone
    /// included).
    pub in_zone_share: f64,
    /// The endpoints and weights that realise it.
    pub endpoints: Vec<Weighted>,
}

/// One region's share of a service's new connections.
#[derive(Clone, Debug, PartialEq)]
pub struct RegionShare {
    /// The region.
    pub region: RegionId,
    /// Fraction of new connections, in (0, 1].
    pub fraction: f64,
    /// The default selection set: every eligible endpoint of the region by
    /// weight (cross-zone, M28), or — with `cross_zone = false` — the
    /// node's zone first (`node_zone_share`).
    pub endpoints: Vec<Weighted>,
    /// `cross_zone = false`: share of the default set pinned to the node's
    /// zone; `None` when the default set is plain cross-zone.
    pub node_zone_share: Option<f64>,
    /// Zonal affinity (M27): selection sets for clients of these zones,
    /// sorted by zone. A client zone without an entry uses `endpoints`.
    pub zone_variants: Vec<ZoneVariant>,
}

impl RegionShare {
    /// Which of [`RegionShare::tables`] serves a client of `client_zone`:
    /// 0 for the default set, `1 + i` for `zone_variants[i]`. A short scan
    /// (a region has a handful of zones); no allocation.
    #[inline]
    pub fn table_index(&self, client_zone: Option<ZoneId>) -> usize {
        match client_zone {
            Some(z) => self
                .zone_variants
                .iter()
                .position(|v| v.zone == z)
                .map_or(0, |i| i + 1),
            None => 0,
        }
    }

    /// The selection sets, default first, then the zone variants in order:
    /// build one weighted Maglev table for each.
    pub fn tables(&self) -> impl Iterator<Item = &[Weighted]> + '_ {
        std::iter::once(self.endpoints.as_slice())
            .chain(self.zone_variants.iter().map(|v| v.endpoints.as_slice()))
    }
}

/// Which endpoints were eligible (M23 and the UNKNOWN rule).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Eligibility {
    /// Healthy endpoints (the normal case).
    Healthy,
    /// No endpoint is healthy yet but some have no verdict: those are used
    /// (start-up, before the first health results).
    Unknown,
    /// Every endpoint is unhealthy and the service fails open: all are used.
    FailOpen,
    /// Nothing is eligible (M14 applies).
    Nothing,
}

/// One region of the service as the status output shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct RegionStatus {
    /// The region.
    pub region: RegionId,
    /// Aggregated health of the service in this region (M19), from the
    /// endpoints' real health (fail-open does not make it HEALTHY).
    pub health: AggregateHealth,
    /// Endpoints of the service in the region.
    pub endpoints: u32,
    /// Of which healthy.
    pub healthy: u32,
    /// Of which without a verdict.
    pub unknown: u32,
    /// Of which eligible for new connections.
    pub eligible: u32,
    /// Capacity in packets per second available to this node; infinite when
    /// unlimited or not (yet) estimable.
    pub capacity: f64,
    /// Measured (smoothed) packets per second to the region's endpoints.
    pub load: f64,
    /// `RATE`: load ÷ capacity; `UTILIZATION` (with a rate or not): the
    /// weighted mean utilization its eligible endpoints report. `None` when
    /// not defined: `RATE` without a limit, or `UTILIZATION` that no
    /// endpoint reports (unknown: no utilization limit applies).
    pub utilization: Option<f64>,
    /// Whether it was a candidate for new connections this round.
    pub candidate: bool,
    /// Its published fraction of new connections.
    pub fraction: f64,
}

/// How one service's new connections are shared out.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// Regions that take new connections, nearest first; fractions sum to 1.
    /// Empty when nothing is eligible.
    pub regions: Vec<RegionShare>,
    /// `thresholds[i]`: the largest 32-bit region key that picks
    /// `regions[i]`; the last is `u32::MAX`.
    pub thresholds: Vec<u32>,
    /// Every region of the service, nearest first.
    pub status: Vec<RegionStatus>,
    /// Demand the decision used, in packets per second.
    pub demand: f64,
    /// Which endpoints were eligible.
    pub eligibility: Eligibility,
    /// Every region is UNHEALTHY by aggregation: the healthy endpoints they
    /// still have are used anyway, nearest region first.
    pub degraded: bool,
    /// Every candidate region is at capacity: new connections are shared in
    /// proportion to capacity.
    pub overloaded: bool,
    /// The service's health over all its endpoints (M19).
    pub health: AggregateHealth,
}

impl Plan {
    /// Whether any endpoint is eligible.
    pub fn is_serving(&self) -> bool {
        !self.regions.is_empty()
    }

    /// Whether `other` selects among the same endpoint sets with the same
    /// weights (so the Maglev tables built for it can be kept); fractions
    /// may differ.
    pub fn same_tables(&self, other: &Plan) -> bool {
        self.regions.len() == other.regions.len()
            && self.regions.iter().zip(&other.regions).all(|(a, b)| {
                a.region == b.region
                    && a.endpoints == b.endpoints
                    && a.zone_variants.len() == b.zone_variants.len()
                    && a.zone_variants
                        .iter()
                        .zip(&b.zone_variants)
                        .all(|(x, y)| x.zone == y.zone && x.endpoints == y.endpoints)
            })
    }

    /// The plan of a service with no eligible endpoint and no regions.
    pub fn empty() -> Self {
        Plan {
            regions: Vec::new(),
            thresholds: Vec::new(),
            status: Vec::new(),
            demand: 0.0,
            eligibility: Eligibility::Nothing,
            degraded: false,
            overloaded: false,
            health: AggregateHealth::Unhealthy,
        }
    }
}

/// The region (index into [`Plan::regions`]) for a new flow with
/// `flow_hash`, or `None` when nothing is eligible. See [`pick_index`].
#[inline]
pub fn pick_region(plan: &Plan, flow_hash: u64) -> Option<usize> {
    pick_index(&plan.thresholds, flow_hash)
}

/// Salt of the region key (so that it is independent of other uses of the
/// flow hash).
const REGION_SALT: u64 = 0x7370_696c_6c2d_7631; // "spill-v1"

/// The 32-bit region key of a flow: the high 32 bits of a SplitMix64 remix
/// of `flow_hash`.
///
/// Why remix: Maglev's `lookup` reduces the same flow hash with a
/// multiply-shift, i.e. by its *high* bits. Comparing the raw high bits
/// against the thresholds would send region `i`'s flows only to the slice
/// `[cum_{i-1}·M, cum_i·M)` of that region's table, skewing endpoints for
/// small fractions. The remix makes the key independent of the slot.
#[inline]
pub const fn region_key(flow_hash: u64) -> u32 {
    (mix64(flow_hash ^ REGION_SALT) >> 32) as u32
}

/// The index `i` with `thresholds[i-1] < key ≤ thresholds[i]` for the
/// flow's [`region_key`]; `None` for empty thresholds. No division, no
/// floats, no allocation: a remix and a binary search over a handful of
/// `u32`s. The same hash gives the same index while the thresholds are
/// unchanged.
#[inline]
pub fn pick_index(thresholds: &[u32], flow_hash: u64) -> Option<usize> {
    let last = thresholds.len().checked_sub(1)?;
    let key = region_key(flow_hash);
    Some(thresholds.partition_point(|&t| t < key).min(last))
}

/// Thresholds for cumulative `fractions` (which should sum to 1): region
/// `i` gets `round(cum_i · 2³²) − round(cum_{i−1} · 2³²)` of the 2³² keys;
/// the last threshold is `u32::MAX` whatever the rounding.
#[allow(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "as saturates into 0..=u32::MAX"
)]
pub fn thresholds(fractions: &[f64]) -> Vec<u32> {
    const SPAN: f64 = 4_294_967_296.0; // 2^32
    let mut out = Vec::with_capacity(fractions.len());
    let mut cum = 0.0f64;
    for (i, f) in fractions.iter().enumerate() {
        cum += f.max(0.0);
        let t = if i + 1 == fractions.len() {
            u32::MAX
        } else {
            // `as` saturates: (cum·2³² − 1) clamps into 0..=u32::MAX.
            ((cum.min(1.0) * SPAN).round() - 1.0) as u32
        };
        let floor = out.last().copied().unwrap_or(0);
        out.push(t.max(floor));
    }
    out
}
