//! The decision function: one service, one interval, inputs in, plan out.

use config::compiled::{RegionId, ZoneId};

use crate::aggregate::{AggregateHealth, aggregate};
use crate::input::{CapacityMode, Health, InputError, NodeSpec, Observation, ServiceSpec, Tuning};
use crate::plan::{
    Eligibility, Plan, RegionShare, RegionStatus, Weighted, ZoneVariant, thresholds,
};

/// Base weights are `weight × capacity_scaler × 1000`, rounded: integers, so
/// that nodes with the same configuration and health build identical tables
/// (M34).
const SCALER_RESOLUTION: f64 = 1000.0;
/// Zone variants blend weights; they are rescaled so the largest is this.
const VARIANT_SCALE: f64 = (1u32 << 20) as f64;
/// `UTILIZATION`: utilization below this is treated as this (avoids
/// dividing by ~0 for an almost idle group).
const UTIL_FLOOR: f64 = 0.01;
/// `UTILIZATION`: a group carrying less than this share of the demand has no
/// usable capacity estimate (see [`Tuning::idle_rate`]).
const IDLE_SHARE: f64 = 0.001;

/// Per-group tallies of one round.
#[derive(Clone, Copy, Debug, Default)]
struct GroupAgg {
    total: u32,
    healthy: u32,
    unknown: u32,
    eligible: u32,
    /// Measured rate of all its endpoints (status).
    load_all: f64,
    /// Measured rate of its eligible endpoints (capacity estimate).
    load: f64,
    util_sum: f64,
    util_weight: f64,
    capacity: f64,
}

/// Per (region, zone) tallies over eligible endpoints.
#[derive(Clone, Copy, Debug)]
struct ZoneAgg {
    zone: ZoneId,
    weight: f64,
    capacity: f64,
}

/// Per-region tallies.
#[derive(Clone, Debug, Default)]
struct RegionAgg {
    total: u32,
    healthy: u32,
    unknown: u32,
    eligible: u32,
    capacity: f64,
    load_all: f64,
    util_sum: f64,
    util_weight: f64,
    weight: f64,
    /// Eligible endpoints with their base weight, in endpoint order.
    members: Vec<(u32, u32, ZoneId)>,
    /// Zones with eligible endpoints, sorted by id.
    zones: Vec<ZoneAgg>,
}

fn finite_nonneg(x: f64) -> f64 {
    if x.is_finite() && x > 0.0 { x } else { 0.0 }
}

/// The arguments of one [`decide`] call, for the steps that need more than
/// the service.
struct Round<'a> {
    node: &'a NodeSpec,
    svc: &'a ServiceSpec,
    obs: &'a Observation,
    prev: Option<&'a Plan>,
    tuning: &'a Tuning,
}

/// Decides how `svc`'s new connections are shared out this round.
///
/// `obs` holds one observation per endpoint (already smoothed when called
/// from [`crate::Planner`]); `prev` is the plan published last round (for
/// hysteresis; `None` on the first round). Pure and deterministic: the same
/// arguments give the same plan. The semantics are in the crate
/// documentation; the body is the list of steps, each a function below.
pub fn decide(
    node: &NodeSpec,
    svc: &ServiceSpec,
    obs: &Observation,
    prev: Option<&Plan>,
    tuning: &Tuning,
) -> Result<Plan, InputError> {
    check(svc, obs)?;
    let round = Round {
        node,
        svc,
        obs,
        prev,
        tuning,
    };
    let regions = region_order(node, svc);
    let group_region = group_regions(svc, &regions);
    let scaler = group_scalers(svc);
    let health = resolved_health(svc, obs);
    let base = base_weights(svc, obs, &scaler);
    let eligibility = eligibility(svc, &base, &health);
    let eligible = eligible_endpoints(eligibility, &base, &health);
    let demand = demand(obs);
    let mut groups = group_tallies(svc, obs, &health, &base, &eligible);
    group_capacities(&round, &mut groups, &scaler, demand);
    let agg = region_tallies(svc, &groups, &group_region, regions.len(), &base, &eligible);
    let (candidates, degraded) = candidates(svc, eligibility, &agg);
    let (frac, overloaded) = region_fractions(&round, &regions, &agg, &candidates, demand);
    let shares = region_shares(&round, &regions, &agg, &frac, demand);
    let status = region_status(svc, &regions, &agg, &candidates, &frac);
    let fractions: Vec<f64> = shares.iter().map(|s| s.fraction).collect();
    Ok(Plan {
        thresholds: thresholds(&fractions),
        regions: shares,
        status,
        demand,
        eligibility: if candidates.is_empty() {
            Eligibility::Nothing
        } else {
            eligibility
        },
        degraded,
        overloaded,
        health: service_health(svc, &health),
    })
}

/// One observation per endpoint, and a service shape [`ServiceSpec::check`]
/// accepts: the later steps index by endpoint and group without checking.
fn check(svc: &ServiceSpec, obs: &Observation) -> Result<(), InputError> {
    let n = svc.endpoints.len();
    if obs.endpoints.len() != n {
        return Err(InputError::EndpointCount {
            got: obs.endpoints.len(),
            want: n,
        });
    }
    svc.check()
}

/// The service's regions nearest first: the node's order, then the rest by
/// id. A region's place in this list is its index in every later step.
fn region_order(node: &NodeSpec, svc: &ServiceSpec) -> Vec<RegionId> {
    let mut regions: Vec<RegionId> = Vec::new();
    for r in &node.region_order {
        if !regions.contains(r) && svc.groups.iter().any(|g| g.region == *r) {
            regions.push(*r);
        }
    }
    let mut rest: Vec<RegionId> = svc
        .groups
        .iter()
        .map(|g| g.region)
        .filter(|r| !regions.contains(r))
        .collect();
    rest.sort_unstable();
    rest.dedup();
    regions.extend(rest);
    regions
}

/// Each group's index in `regions`.
fn group_regions(svc: &ServiceSpec, regions: &[RegionId]) -> Vec<usize> {
    svc.groups
        .iter()
        .map(|g| regions.iter().position(|r| *r == g.region).unwrap_or(0))
        .collect()
}

/// Each group's `capacity_scaler` clamped to [0, 1] (NaN: 0, drained).
fn group_scalers(svc: &ServiceSpec) -> Vec<f64> {
    svc.groups
        .iter()
        .map(|g| {
            if g.capacity_scaler.is_nan() {
                0.0
            } else {
                g.capacity_scaler.clamp(0.0, 1.0)
            }
        })
        .collect()
}

/// Health as far as eligibility goes: without anything resolving it, an
/// endpoint is healthy.
fn resolved_health(svc: &ServiceSpec, obs: &Observation) -> Vec<Health> {
    obs.endpoints
        .iter()
        .map(|o| match o.health {
            Health::Unknown if !svc.health_checked => Health::Healthy,
            h => h,
        })
        .collect()
}

/// Base weights: (weight, or 1 when unweighted) × scaler × 1000; 0 for a
/// weight-0 endpoint or a drained group.
fn base_weights(svc: &ServiceSpec, obs: &Observation, scaler: &[f64]) -> Vec<u32> {
    svc.endpoints
        .iter()
        .zip(&obs.endpoints)
        .map(|(e, o)| {
            let w = o.weight.unwrap_or(e.weight);
            let w = if svc.weighted {
                f64::from(w)
            } else {
                f64::from(u8::from(w > 0))
            };
            let s = scaler[e.group as usize];
            if w <= 0.0 || s <= 0.0 {
                0
            } else {
                positive_weight(w * s * SCALER_RESOLUTION)
            }
        })
        .collect()
}

/// Which health qualifies this round, decided service-wide in tiers over
/// the endpoints that could take connections at all (positive weight,
/// group not drained).
fn eligibility(svc: &ServiceSpec, base: &[u32], health: &[Health]) -> Eligibility {
    let usable_with = |want: Health| (0..base.len()).any(|i| base[i] > 0 && health[i] == want);
    if usable_with(Health::Healthy) {
        Eligibility::Healthy
    } else if usable_with(Health::Unknown) {
        Eligibility::Unknown
    } else if svc.fail_open && base.iter().any(|&b| b > 0) {
        Eligibility::FailOpen
    } else {
        Eligibility::Nothing
    }
}

/// Whether each endpoint may take new connections: a positive base weight
/// and a health the tier admits.
fn eligible_endpoints(eligibility: Eligibility, base: &[u32], health: &[Health]) -> Vec<bool> {
    let health_ok = |h: Health| match eligibility {
        Eligibility::Healthy => h == Health::Healthy,
        Eligibility::Unknown => h == Health::Unknown,
        Eligibility::FailOpen => true,
        Eligibility::Nothing => false,
    };
    (0..base.len())
        .map(|i| base[i] > 0 && health_ok(health[i]))
        .collect()
}

/// The service's demand: the data plane's figure when it gives one, else
/// the sum of the endpoints' measured rates.
fn demand(obs: &Observation) -> f64 {
    match obs.demand {
        Some(d) => finite_nonneg(d),
        None => obs.endpoints.iter().map(|o| finite_nonneg(o.rate)).sum(),
    }
}

/// Per-group counts, loads and utilization sums; capacity is left at 0
/// for [`group_capacities`].
fn group_tallies(
    svc: &ServiceSpec,
    obs: &Observation,
    health: &[Health],
    base: &[u32],
    eligible: &[bool],
) -> Vec<GroupAgg> {
    let mut groups = vec![GroupAgg::default(); svc.groups.len()];
    for (i, (e, o)) in svc.endpoints.iter().zip(&obs.endpoints).enumerate() {
        let g = &mut groups[e.group as usize];
        g.total += 1;
        match health[i] {
            Health::Healthy => g.healthy += 1,
            Health::Unknown => g.unknown += 1,
            Health::Unhealthy => {}
        }
        let rate = finite_nonneg(o.rate);
        g.load_all += rate;
        if eligible[i] {
            g.eligible += 1;
            g.load += rate;
            if let Some(u) = o.utilization.filter(|u| u.is_finite()) {
                let w = f64::from(base[i]);
                g.util_sum += u.max(0.0) * w;
                g.util_weight += w;
            }
        }
    }
    groups
}

/// Each group's capacity ([`group_capacity`]). A step after the tallies:
/// `UTILIZATION` scales from the group's measured load, and what counts as
/// too little load to scale from depends on the demand.
fn group_capacities(round: &Round<'_>, groups: &mut [GroupAgg], scaler: &[f64], demand: f64) {
    let idle = round.tuning.idle_rate.max(demand * IDLE_SHARE);
    for (gi, g) in groups.iter_mut().enumerate() {
        g.capacity = group_capacity(
            round.svc,
            gi,
            g,
            scaler[gi],
            round.node.capacity_share,
            idle,
        );
    }
}

/// Per-region tallies: the groups' counts and loads summed, capacity per
/// region and per zone over groups with eligible endpoints, and the
/// eligible endpoints with their base weights (in endpoint order, zones
/// sorted by id).
fn region_tallies(
    svc: &ServiceSpec,
    groups: &[GroupAgg],
    group_region: &[usize],
    regions: usize,
    base: &[u32],
    eligible: &[bool],
) -> Vec<RegionAgg> {
    let mut agg: Vec<RegionAgg> = (0..regions).map(|_| RegionAgg::default()).collect();
    for (gi, g) in groups.iter().enumerate() {
        let r = &mut agg[group_region[gi]];
        r.total += g.total;
        r.healthy += g.healthy;
        r.unknown += g.unknown;
        r.eligible += g.eligible;
        r.load_all += g.load_all;
        r.util_sum += g.util_sum;
        r.util_weight += g.util_weight;
        if g.eligible > 0 {
            r.capacity += g.capacity;
            let zone = svc.groups[gi].zone;
            match r.zones.iter_mut().find(|z| z.zone == zone) {
                Some(z) => z.capacity += g.capacity,
                None => r.zones.push(ZoneAgg {
                    zone,
                    weight: 0.0,
                    capacity: g.capacity,
                }),
            }
        }
    }
    for (i, e) in svc.endpoints.iter().enumerate() {
        if eligible[i] {
            let gi = e.group as usize;
            let r = &mut agg[group_region[gi]];
            let zone = svc.groups[gi].zone;
            r.members
                .push((u32::try_from(i).unwrap_or(u32::MAX), base[i], zone));
            r.weight += f64::from(base[i]);
            if let Some(z) = r.zones.iter_mut().find(|z| z.zone == zone) {
                z.weight += f64::from(base[i]);
            }
        }
    }
    for r in &mut agg {
        r.zones.sort_by_key(|z| z.zone);
    }
    agg
}

/// Failover (M19, M24, M26): the candidate regions, nearest first — usable
/// regions not UNHEALTHY by aggregation; if there are none, every usable
/// region, and the plan is degraded (the `bool`).
fn candidates(
    svc: &ServiceSpec,
    eligibility: Eligibility,
    agg: &[RegionAgg],
) -> (Vec<usize>, bool) {
    let effective_health: Vec<AggregateHealth> = agg
        .iter()
        .map(|r| match eligibility {
            Eligibility::FailOpen => AggregateHealth::Healthy,
            _ => aggregate(
                r.healthy.into(),
                r.unknown.into(),
                r.total.into(),
                &svc.aggregation,
            ),
        })
        .collect();
    let usable: Vec<bool> = agg.iter().map(|r| r.eligible > 0).collect();
    let preferred: Vec<bool> = (0..agg.len())
        .map(|r| usable[r] && effective_health[r] != AggregateHealth::Unhealthy)
        .collect();
    let degraded = !preferred.contains(&true) && usable.contains(&true);
    let candidates: Vec<usize> = (0..agg.len())
        .filter(|&r| if degraded { usable[r] } else { preferred[r] })
        .collect();
    (candidates, degraded)
}

/// Each region's fraction of new connections: spilled over the candidates
/// ([`spill`]), small fractions dropped ([`normalize`]), then held at last
/// round's when they barely moved ([`hold`]). All 0 without candidates;
/// the `bool` says the candidates together are overloaded.
fn region_fractions(
    round: &Round<'_>,
    regions: &[RegionId],
    agg: &[RegionAgg],
    candidates: &[usize],
    demand: f64,
) -> (Vec<f64>, bool) {
    let mut frac = vec![0.0f64; regions.len()];
    let mut overloaded = false;
    if let Some(&first) = candidates.first() {
        overloaded = spill(&mut frac, agg, candidates, first, demand);
        normalize(&mut frac, round.tuning.min_fraction);
        hold(
            &mut frac,
            regions,
            candidates,
            round.prev,
            round.tuning.region_band(demand),
        );
    }
    (frac, overloaded)
}

/// Spillover (M24, M26): water-fills `demand` over the candidates nearest
/// first (`first` is the nearest); when even all of them cannot take it,
/// shares it in proportion to capacity and returns `true` (overloaded).
fn spill(
    frac: &mut [f64],
    agg: &[RegionAgg],
    candidates: &[usize],
    first: usize,
    demand: f64,
) -> bool {
    if demand <= 0.0 {
        frac[first] = 1.0;
        return false;
    }
    let mut remaining = demand;
    for &r in candidates {
        if remaining <= 0.0 {
            break;
        }
        let take = remaining.min(agg[r].capacity);
        frac[r] = take / demand;
        remaining -= take;
    }
    let overloaded = remaining > demand * 1e-12;
    if overloaded {
        let total: f64 = candidates.iter().map(|&r| agg[r].capacity).sum();
        for &r in candidates {
            frac[r] = if total > 0.0 {
                agg[r].capacity / total
            } else {
                // No capacity anywhere (UTILIZATION: every region
                // reports itself beyond target): keep to the nearest.
                f64::from(u8::from(r == first))
            };
        }
    }
    overloaded
}

/// The selection sets of each region with a positive fraction, in region
/// order.
fn region_shares(
    round: &Round<'_>,
    regions: &[RegionId],
    agg: &[RegionAgg],
    frac: &[f64],
    demand: f64,
) -> Vec<RegionShare> {
    let mut shares = Vec::new();
    for (r, &f) in frac.iter().enumerate() {
        if f <= 0.0 {
            continue;
        }
        let a = &agg[r];
        let prev_share = round
            .prev
            .and_then(|p| p.regions.iter().find(|s| s.region == regions[r]));
        let to_region = demand * f;
        let (endpoints, node_zone_share) = default_set(round, a, prev_share, to_region);
        let zone_variants = zone_variants(round, a, prev_share, to_region, &endpoints);
        shares.push(RegionShare {
            region: regions[r],
            fraction: f,
            endpoints,
            node_zone_share,
            zone_variants,
        });
    }
    shares
}

/// The share of the service's demand from client zone `z` (by the data
/// plane's figures; 0 for a zone it does not name).
fn zone_share(obs: &Observation, z: ZoneId) -> f64 {
    obs.zone_demand
        .iter()
        .filter(|(x, _)| *x == z)
        .map(|(_, s)| finite_nonneg(*s))
        .sum::<f64>()
}

/// A region's default selection set: cross-zone, or the node's zone first
/// (M28 off), with the share pinned to the node's zone (`None`: none,
/// plain cross-zone).
fn default_set(
    round: &Round<'_>,
    a: &RegionAgg,
    prev_share: Option<&RegionShare>,
    to_region: f64,
) -> (Vec<Weighted>, Option<f64>) {
    if !round.svc.locality.cross_zone
        && let Some(z) = a.zones.iter().find(|z| z.zone == round.node.zone)
    {
        // All of this node's traffic to the region counts as the node
        // zone's unless the data plane says otherwise.
        let share = if round.obs.zone_demand.is_empty() {
            1.0
        } else {
            zone_share(round.obs, z.zone)
        };
        let p = pinned_share(1.0, z, a, to_region * share);
        let p = held(
            p,
            prev_share.and_then(|s| s.node_zone_share),
            round.tuning.hysteresis,
        );
        if let Some(set) = blend(&a.members, z, a.weight, p) {
            return (set, Some(p));
        }
    }
    let all = a
        .members
        .iter()
        .map(|&(endpoint, weight, _)| Weighted { endpoint, weight })
        .collect();
    (all, None)
}

/// Zone variants (M27): for each zone of the region under zonal
/// affinity, the set its clients use, kept only where it differs from
/// the region's default set `endpoints`.
fn zone_variants(
    round: &Round<'_>,
    a: &RegionAgg,
    prev_share: Option<&RegionShare>,
    to_region: f64,
    endpoints: &[Weighted],
) -> Vec<ZoneVariant> {
    let mut zone_variants = Vec::new();
    let locality = &round.svc.locality;
    if !locality.zonal_affinity {
        return zone_variants;
    }
    let spill_ratio = if locality.zonal_spill_ratio.is_nan() {
        0.0
    } else {
        locality.zonal_spill_ratio.clamp(0.0, 1.0)
    };
    let zone_share_known = !round.obs.zone_demand.is_empty();
    for z in &a.zones {
        let zone_demand = if zone_share_known {
            to_region * zone_share(round.obs, z.zone)
        } else if a.capacity.is_finite() && z.capacity.is_finite() && a.capacity > 0.0 {
            // Unknown: assume clients sit where capacity is.
            to_region * z.capacity / a.capacity
        } else {
            0.0
        };
        let p = pinned_share(1.0 - spill_ratio, z, a, zone_demand);
        let prev_p = prev_share
            .and_then(|s| s.zone_variants.iter().find(|v| v.zone == z.zone))
            .map(|v| v.in_zone_share);
        let p = held(p, prev_p, round.tuning.hysteresis);
        if let Some(set) = blend(&a.members, z, a.weight, p)
            && set != endpoints
        {
            zone_variants.push(ZoneVariant {
                zone: z.zone,
                in_zone_share: p,
                endpoints: set,
            });
        }
    }
    zone_variants
}

/// What the plan reports of every region, candidate or not.
fn region_status(
    svc: &ServiceSpec,
    regions: &[RegionId],
    agg: &[RegionAgg],
    candidates: &[usize],
    frac: &[f64],
) -> Vec<RegionStatus> {
    (0..regions.len())
        .map(|r| {
            let a = &agg[r];
            let utilization = match svc.capacity {
                CapacityMode::Rate { .. } => {
                    (a.capacity.is_finite() && a.capacity > 0.0).then(|| a.load_all / a.capacity)
                }
                CapacityMode::Utilization { .. } => {
                    (a.util_weight > 0.0).then(|| a.util_sum / a.util_weight)
                }
            };
            RegionStatus {
                region: regions[r],
                health: aggregate(
                    a.healthy.into(),
                    a.unknown.into(),
                    a.total.into(),
                    &svc.aggregation,
                ),
                endpoints: a.total,
                healthy: a.healthy,
                unknown: a.unknown,
                eligible: a.eligible,
                capacity: a.capacity,
                load: a.load_all,
                utilization,
                candidate: candidates.contains(&r),
                fraction: frac[r],
            }
        })
        .collect()
}

/// The service's health by aggregation over all its endpoints.
fn service_health(svc: &ServiceSpec, health: &[Health]) -> AggregateHealth {
    let (healthy, unknown) = health.iter().fold((0u32, 0u32), |(h, u), x| match x {
        Health::Healthy => (h + 1, u),
        Health::Unknown => (h, u + 1),
        Health::Unhealthy => (h, u),
    });
    aggregate(
        healthy.into(),
        unknown.into(),
        u64::try_from(health.len()).unwrap_or(u64::MAX),
        &svc.aggregation,
    )
}

/// A group's capacity in packets per second (M25); infinite when unlimited
/// or not estimable. Under `UTILIZATION` with a rate set too, the smaller
/// of the two: the group is full when either limit is reached.
fn group_capacity(
    svc: &ServiceSpec,
    gi: usize,
    g: &GroupAgg,
    scaler: f64,
    capacity_share: f64,
    idle: f64,
) -> f64 {
    if g.eligible == 0 || scaler <= 0.0 {
        return 0.0;
    }
    let group = &svc.groups[gi];
    match svc.capacity {
        CapacityMode::Rate {
            max_rate_per_endpoint,
        } => rate_capacity(
            max_rate_per_endpoint,
            group.max_rate,
            g,
            scaler,
            capacity_share,
        ),
        CapacityMode::Utilization {
            max_utilization,
            max_rate_per_endpoint,
        } => {
            let target = group.max_utilization.unwrap_or(max_utilization);
            let by_utilization = utilization_capacity(target, g, scaler, idle);
            let by_rate = rate_capacity(
                max_rate_per_endpoint,
                group.max_rate,
                g,
                scaler,
                capacity_share,
            );
            by_utilization.min(by_rate)
        }
    }
}

/// The capacity the rates allow: `per_endpoint × eligible endpoints`,
/// capped by the group's `max_rate` pro rata to its eligible endpoints,
/// times the scaler and this node's share of the cluster's capacity;
/// infinite with neither rate set.
fn rate_capacity(
    per_endpoint: Option<u64>,
    group_max: Option<u64>,
    g: &GroupAgg,
    scaler: f64,
    capacity_share: f64,
) -> f64 {
    let mut cap = f64::INFINITY;
    if let Some(r) = per_endpoint {
        cap = r as f64 * f64::from(g.eligible);
    }
    if let Some(m) = group_max {
        // The group's rate is its endpoints' together: an ineligible
        // endpoint takes its share of it away.
        cap = cap.min(m as f64 * f64::from(g.eligible) / f64::from(g.total.max(1)));
    }
    let share = if capacity_share.is_finite() && capacity_share > 0.0 {
        capacity_share.min(1.0)
    } else {
        1.0
    };
    cap * scaler * share
}

/// The capacity the utilization target allows: the group's load scaled
/// from its reported utilization to `target × scaler`; infinite while
/// nothing reports a utilization. No capacity share: the utilization
/// already counts every node's traffic.
fn utilization_capacity(target: f64, g: &GroupAgg, scaler: f64, idle: f64) -> f64 {
    if g.util_weight <= 0.0 {
        // Nothing reported yet: no limit known.
        return f64::INFINITY;
    }
    let target = finite_nonneg(target).min(1.0) * scaler;
    let u = g.util_sum / g.util_weight;
    if g.load <= idle {
        // Too little of our traffic to scale from: room while below
        // target (the next rounds measure how much), none otherwise.
        return if u < target { f64::INFINITY } else { 0.0 };
    }
    g.load * target / u.max(UTIL_FLOOR)
}

/// Drops fractions below `min` and rescales the rest to sum to 1.
fn normalize(frac: &mut [f64], min: f64) {
    let largest = frac
        .iter()
        .copied()
        .enumerate()
        .fold((0, 0.0), |acc, (i, f)| if f > acc.1 { (i, f) } else { acc });
    for (i, f) in frac.iter_mut().enumerate() {
        if *f < min && i != largest.0 {
            *f = 0.0;
        }
    }
    let sum: f64 = frac.iter().sum();
    if sum > 0.0 {
        for f in frac.iter_mut() {
            *f /= sum;
        }
    }
}

/// Hysteresis: keep last round's fractions when the candidate regions are
/// the same and no fraction moved by `band` or more.
fn hold(
    frac: &mut [f64],
    regions: &[RegionId],
    candidates: &[usize],
    prev: Option<&Plan>,
    band: f64,
) {
    let Some(prev) = prev else { return };
    let was: Vec<RegionId> = prev
        .status
        .iter()
        .filter(|s| s.candidate)
        .map(|s| s.region)
        .collect();
    if was.len() != candidates.len() || was.iter().zip(candidates).any(|(a, &b)| *a != regions[b]) {
        return;
    }
    let old = |r: usize| {
        prev.status
            .iter()
            .find(|s| s.region == regions[r])
            .map_or(0.0, |s| s.fraction)
    };
    let moved = candidates
        .iter()
        .map(|&r| (frac[r] - old(r)).abs())
        .fold(0.0, f64::max);
    if moved < band {
        for &r in candidates {
            frac[r] = old(r);
        }
    }
}

/// `p`, or the previous value when it moved by less than `band`.
fn held(p: f64, prev: Option<f64>, band: f64) -> f64 {
    match prev {
        Some(q) if (p - q).abs() < band => q,
        _ => p,
    }
}

/// The share `p ≤ cap` of a source zone's new connections to pin to its own
/// endpoints so that the zone stays within capacity: its load is
/// `demand · (p + (1 − p)·a)` where `a` is its weight share of the region
/// (the unpinned rest is spread over the region by weight, the zone
/// included).
fn pinned_share(cap: f64, z: &ZoneAgg, region: &RegionAgg, demand: f64) -> f64 {
    if cap <= 0.0 || z.capacity <= 0.0 {
        return 0.0;
    }
    if demand <= 0.0 || !z.capacity.is_finite() {
        return cap;
    }
    let x = z.capacity / demand;
    if x >= 1.0 {
        return cap;
    }
    let a = if region.weight > 0.0 {
        z.weight / region.weight
    } else {
        1.0
    };
    if a >= 1.0 {
        return cap;
    }
    ((x - a) / (1.0 - a)).clamp(0.0, cap)
}

/// The selection set pinning share `p` to zone `z` and spreading the rest
/// over all `members` by weight; `None` for `p = 0` (plain cross-zone).
fn blend(members: &[(u32, u32, ZoneId)], z: &ZoneAgg, total: f64, p: f64) -> Option<Vec<Weighted>> {
    if p <= 0.0 || z.weight <= 0.0 || total <= 0.0 {
        return None;
    }
    if p >= 1.0 {
        return Some(
            members
                .iter()
                .filter(|m| m.2 == z.zone)
                .map(|&(endpoint, weight, _)| Weighted { endpoint, weight })
                .collect(),
        );
    }
    let inside = p / z.weight + (1.0 - p) / total;
    let outside = (1.0 - p) / total;
    let max_base = members.iter().map(|m| m.1).max().unwrap_or(1);
    let scale = VARIANT_SCALE / (f64::from(max_base) * inside.max(outside));
    Some(
        members
            .iter()
            .map(|&(endpoint, weight, zone)| {
                let f = if zone == z.zone { inside } else { outside };
                Weighted {
                    endpoint,
                    weight: positive_weight(f64::from(weight) * f * scale),
                }
            })
            .collect(),
    )
}

/// `x` rounded to a weight of at least 1 (`as` saturates above `u32::MAX`).
#[allow(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "as saturates; callers pass positive values"
)]
fn positive_weight(x: f64) -> u32 {
    (x.round() as u32).max(1)
}
