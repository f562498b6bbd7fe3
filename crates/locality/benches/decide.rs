//! The decision for 10 regions × 1,000 endpoints (budget: well under the
//! management core's 1 s cycle) and the per-flow region pick.
//!
//! `cargo bench -p locality --bench decide`

#![allow(clippy::cast_possible_truncation)] // bench values are small
#![allow(missing_docs)] // criterion_group! makes an undocumented `pub fn`
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // bench code: fail loudly

use std::time::Duration;

use criterion::{Criterion, black_box, criterion_group, criterion_main};
use locality::{
    CapacityMode, EndpointObs, EndpointSpec, GroupSpec, Health, Locality, NodeSpec, Observation,
    Planner, RegionId, ServiceSpec, Tuning, ZoneId, decide, pick_region,
};

const REGIONS: u32 = 10;
const PER_REGION: usize = 1_000;
/// Groups per region (2 zones × 5 groups of 100 endpoints).
const GROUPS: u32 = 10;

fn service(capacity: CapacityMode, locality: Locality) -> (NodeSpec, ServiceSpec, Observation) {
    let mut svc = ServiceSpec::new(capacity);
    svc.locality = locality;
    let mut obs = Vec::new();
    let per_group = PER_REGION / GROUPS as usize;
    for r in 0..REGIONS {
        for g in 0..GROUPS {
            let gi = svc.groups.len() as u32;
            svc.groups.push(GroupSpec {
                region: RegionId(r),
                zone: ZoneId(r * 10 + g % 2),
                capacity_scaler: if g == 3 { 0.5 } else { 1.0 },
                max_rate: None,
                max_utilization: None,
            });
            for k in 0..per_group {
                svc.endpoints.push(EndpointSpec {
                    group: gi,
                    weight: 100 + (k % 4) as u16 * 50,
                });
                let i = svc.endpoints.len();
                obs.push(EndpointObs {
                    health: if i % 17 == 0 {
                        Health::Unhealthy
                    } else {
                        Health::Healthy
                    },
                    weight: None,
                    // All traffic sits in the first region: 3.5× its capacity.
                    rate: if r == 0 { 350.0 } else { 0.0 },
                    utilization: Some(if r == 0 { 0.95 } else { 0.2 }),
                });
            }
        }
    }
    let node = NodeSpec {
        region: RegionId(0),
        zone: ZoneId(0),
        region_order: (0..REGIONS).map(RegionId).collect(),
        capacity_share: 1.0,
    };
    let mut o = Observation::new(obs);
    if locality.zonal_affinity {
        o.zone_demand = vec![(ZoneId(0), 0.7), (ZoneId(1), 0.3)];
    }
    (node, svc, o)
}

fn bench_decide(c: &mut Criterion) {
    let rate = CapacityMode::Rate {
        max_rate_per_endpoint: Some(100),
    };
    let util = CapacityMode::Utilization {
        max_utilization: 0.8,
        max_rate_per_endpoint: None,
    };
    let affinity = Locality {
        zonal_affinity: true,
        zonal_spill_ratio: 0.2,
        cross_zone: true,
    };
    let t = Tuning::default();
    let mut g = c.benchmark_group("decide_10x1000");
    for (name, mode, loc) in [
        ("rate_cross_zone", rate, Locality::default()),
        ("rate_zonal_affinity", rate, affinity),
        ("utilization_cross_zone", util, Locality::default()),
    ] {
        let (node, svc, obs) = service(mode, loc);
        let first = decide(&node, &svc, &obs, None, &t).unwrap();
        assert!(
            first.regions.len() >= 2,
            "{name}: {} regions",
            first.regions.len()
        );
        g.bench_function(name, |b| {
            b.iter(|| {
                decide(
                    black_box(&node),
                    black_box(&svc),
                    black_box(&obs),
                    Some(&first),
                    &t,
                )
            })
        });
    }
    let (node, svc, obs) = service(rate, affinity);
    let mut planner = Planner::new(t);
    g.bench_function("planner_update_rate_zonal_affinity", |b| {
        b.iter(|| {
            planner
                .update(&node, &svc, black_box(&obs), Duration::from_secs(1))
                .map(|p| p.regions.len())
        })
    });
    g.finish();
}

fn bench_pick(c: &mut Criterion) {
    let (node, svc, obs) = service(
        CapacityMode::Rate {
            max_rate_per_endpoint: Some(100),
        },
        Locality::default(),
    );
    let plan = decide(&node, &svc, &obs, None, &Tuning::default()).unwrap();
    let mut g = c.benchmark_group("pick_region");
    g.bench_function(format!("{}_regions_1k_flows", plan.regions.len()), |b| {
        b.iter(|| {
            let mut h = 0x1234_5678u64;
            let mut acc = 0usize;
            for _ in 0..1000 {
                h = h.wrapping_add(0x9e37_79b9_7f4a_7c15);
                acc += pick_region(black_box(&plan), h).unwrap_or(0);
            }
            acc
        })
    });
    g.finish();
}

criterion_group!(benches, bench_decide, bench_pick);
criterion_main!(benches);
