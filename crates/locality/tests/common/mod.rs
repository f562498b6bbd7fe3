//! Builders shared by the integration tests.
#![allow(clippy::cast_possible_truncation)] // test values are small
#![allow(dead_code)]

use std::ops::Range;

use locality::{
    CapacityMode, EndpointObs, EndpointSpec, GroupSpec, NodeSpec, Observation, Plan, RegionId,
    ServiceSpec, ZoneId,
};

pub const A: RegionId = RegionId(0);
pub const B: RegionId = RegionId(1);
pub const C: RegionId = RegionId(2);

/// Zone `k` of region `r`: id `r * 10 + k`.
pub fn zone(r: RegionId, k: u32) -> ZoneId {
    ZoneId(r.0 * 10 + k)
}

/// A node in region A, zone A/0, preferring A, B, C.
pub fn node() -> NodeSpec {
    NodeSpec {
        region: A,
        zone: zone(A, 0),
        region_order: vec![A, B, C],
        capacity_share: 1.0,
    }
}

/// A RATE service with `per_endpoint` pps per endpoint and no groups yet.
pub fn rate_service(per_endpoint: u64) -> ServiceSpec {
    ServiceSpec::new(CapacityMode::Rate {
        max_rate_per_endpoint: Some(per_endpoint),
    })
}

/// A UTILIZATION service with target `t`.
pub fn util_service(t: f64) -> ServiceSpec {
    ServiceSpec::new(CapacityMode::Utilization {
        max_utilization: t,
        max_rate_per_endpoint: None,
    })
}

/// Adds a group of `n` endpoints of weight 100; returns their indices.
pub fn group(svc: &mut ServiceSpec, region: RegionId, zone: ZoneId, n: usize) -> Range<usize> {
    group_with(svc, region, zone, n, 1.0, None)
}

pub fn group_with(
    svc: &mut ServiceSpec,
    region: RegionId,
    zone: ZoneId,
    n: usize,
    scaler: f64,
    max_rate: Option<u64>,
) -> Range<usize> {
    let g = svc.groups.len() as u32;
    svc.groups.push(GroupSpec {
        region,
        zone,
        capacity_scaler: scaler,
        max_rate,
        max_utilization: None,
    });
    let start = svc.endpoints.len();
    for _ in 0..n {
        svc.endpoints.push(EndpointSpec {
            group: g,
            weight: 100,
        });
    }
    start..svc.endpoints.len()
}

/// Every endpoint healthy and idle.
pub fn all_healthy(svc: &ServiceSpec) -> Vec<EndpointObs> {
    vec![EndpointObs::healthy(0.0); svc.endpoints.len()]
}

/// Spreads `total` pps evenly over `range`.
pub fn load(obs: &mut [EndpointObs], range: Range<usize>, total: f64) {
    let n = range.len() as f64;
    for o in &mut obs[range] {
        o.rate = total / n;
    }
}

pub fn observe(endpoints: Vec<EndpointObs>) -> Observation {
    Observation::new(endpoints)
}

/// The plan's fraction for `region` (0 when absent).
pub fn fraction(plan: &Plan, region: RegionId) -> f64 {
    plan.regions
        .iter()
        .find(|s| s.region == region)
        .map_or(0.0, |s| s.fraction)
}

/// Every endpoint index any selection set of the plan names.
pub fn used(plan: &Plan) -> Vec<u32> {
    let mut v: Vec<u32> = plan
        .regions
        .iter()
        .flat_map(|r| r.tables().flat_map(|t| t.iter().map(|w| w.endpoint)))
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

pub fn close(a: f64, b: f64, eps: f64) -> bool {
    (a - b).abs() <= eps
}
