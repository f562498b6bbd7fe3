//! Properties over random services and observations, and the statistics of
//! the per-flow region pick.

#![allow(clippy::cast_possible_truncation)] // test values are small

use locality::{
    Aggregation, CapacityMode, Eligibility, EndpointObs, EndpointSpec, GroupSpec, Health, Locality,
    NodeSpec, Observation, Plan, RegionId, ServiceSpec, Tuning, ZoneId, decide, pick_index,
    pick_region, thresholds,
};
use proptest::prelude::*;

#[derive(Clone, Debug)]
struct Case {
    node: NodeSpec,
    svc: ServiceSpec,
    obs: Observation,
    /// A second round's rate scale (exercises hysteresis with a previous
    /// plan).
    again: f64,
}

fn health() -> impl Strategy<Value = Health> {
    prop_oneof![
        3 => Just(Health::Healthy),
        2 => Just(Health::Unhealthy),
        1 => Just(Health::Unknown),
    ]
}

fn scaler() -> impl Strategy<Value = f64> {
    prop_oneof![Just(0.0), Just(1.0), 0.0f64..=1.0]
}

fn case() -> impl Strategy<Value = Case> {
    let group = (
        0u32..4,
        0u32..3,
        scaler(),
        proptest::option::of(0u64..5000),
        0usize..6,
    );
    let mode = prop_oneof![
        proptest::option::of(1u64..1000).prop_map(|r| CapacityMode::Rate {
            max_rate_per_endpoint: r
        }),
        (0.05f64..=1.0).prop_map(|t| CapacityMode::Utilization {
            max_utilization: t,
            max_rate_per_endpoint: None,
        }),
    ];
    let svc_knobs = (
        mode,
        (0u8..=100, 0u32..4),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        (any::<bool>(), 0.0f64..=1.0, any::<bool>()),
    );
    (
        proptest::collection::vec(group, 1..6),
        svc_knobs,
        (
            0u32..4,
            0u32..3,
            proptest::collection::vec(0u32..5, 0..5),
            0.1f64..=1.0,
        ),
        0.0f64..3.0,
        any::<u64>(),
    )
        .prop_flat_map(|(groups, knobs, node, again, seed)| {
            let (mode, (pct, count), fail_open, checked, weighted, (aff, spill, cross)) = knobs;
            let mut svc = ServiceSpec::new(mode);
            svc.aggregation = Aggregation {
                min_healthy_percent: pct,
                min_healthy_count: count,
            };
            svc.fail_open = fail_open;
            svc.health_checked = checked;
            svc.weighted = weighted;
            svc.locality = Locality {
                zonal_affinity: aff,
                zonal_spill_ratio: if aff { spill } else { 0.0 },
                cross_zone: cross,
            };
            for (gi, &(region, zone, scaler, max_rate, n)) in groups.iter().enumerate() {
                svc.groups.push(GroupSpec {
                    region: RegionId(region),
                    zone: ZoneId(region * 10 + zone),
                    capacity_scaler: scaler,
                    max_rate,
                    max_utilization: None,
                });
                for k in 0..n {
                    let weight = [100u16, 0, 1, 1000, 250][(seed as usize + gi + k) % 5];
                    svc.endpoints.push(EndpointSpec {
                        group: gi as u32,
                        weight,
                    });
                }
            }
            let (region, zone, order, share) = node;
            let node = NodeSpec {
                region: RegionId(region),
                zone: ZoneId(region * 10 + zone),
                region_order: order.into_iter().map(RegionId).collect(),
                capacity_share: share,
            };
            let n = svc.endpoints.len();
            let ep = (
                health(),
                proptest::option::of(0u16..=1000),
                prop_oneof![Just(0.0), 0.0f64..2000.0],
                proptest::option::of(0.0f64..1.5),
            )
                .prop_map(|(health, weight, rate, utilization)| EndpointObs {
                    health,
                    weight,
                    rate,
                    utilization,
                });
            let zones = proptest::collection::vec((0u32..40, 0.0f64..1.0), 0..4);
            (
                Just(svc),
                Just(node),
                proptest::collection::vec(ep, n..=n),
                zones,
                Just(again),
            )
        })
        .prop_map(|(svc, node, endpoints, zones, again)| Case {
            node,
            svc,
            obs: Observation {
                endpoints,
                demand: None,
                zone_demand: zones.into_iter().map(|(z, s)| (ZoneId(z), s)).collect(),
            },
            again,
        })
}

/// Whether endpoint `i` may take new connections under `plan`'s eligibility.
fn may_use(c: &Case, plan: &Plan, i: usize) -> bool {
    let spec = c.svc.endpoints[i];
    let o = c.obs.endpoints[i];
    let weight = o.weight.unwrap_or(spec.weight);
    let scaler = c.svc.groups[spec.group as usize].capacity_scaler;
    let h = match o.health {
        Health::Unknown if !c.svc.health_checked => Health::Healthy,
        h => h,
    };
    let health_ok = match plan.eligibility {
        Eligibility::Healthy => h == Health::Healthy,
        Eligibility::Unknown => h == Health::Unknown,
        Eligibility::FailOpen => true,
        Eligibility::Nothing => false,
    };
    weight > 0 && scaler > 0.0 && health_ok
}

fn check(c: &Case, plan: &Plan) -> Result<(), TestCaseError> {
    // Fractions in (0, 1], summing to 1 when anything is eligible.
    let sum: f64 = plan.regions.iter().map(|r| r.fraction).sum();
    if plan.regions.is_empty() {
        prop_assert_eq!(plan.eligibility, Eligibility::Nothing);
        prop_assert!(plan.thresholds.is_empty());
    } else {
        prop_assert!((sum - 1.0).abs() < 1e-9, "sum {}", sum);
        prop_assert_eq!(plan.thresholds.len(), plan.regions.len());
        prop_assert_eq!(plan.thresholds.last().copied(), Some(u32::MAX));
        prop_assert!(plan.thresholds.windows(2).all(|w| w[0] <= w[1]));
    }
    for r in &plan.regions {
        prop_assert!(r.fraction > 0.0 && r.fraction <= 1.0, "{}", r.fraction);
        if let Some(p) = r.node_zone_share {
            prop_assert!((0.0..=1.0).contains(&p));
        }
        for v in &r.zone_variants {
            prop_assert!(v.in_zone_share > 0.0 && v.in_zone_share <= 1.0);
            if c.svc.locality.zonal_affinity {
                prop_assert!(v.in_zone_share <= 1.0 - c.svc.locality.zonal_spill_ratio + 1e-12);
            }
        }
        for t in r.tables() {
            prop_assert!(!t.is_empty());
            for w in t {
                let i = w.endpoint as usize;
                prop_assert!(w.weight > 0);
                // Right region; never unhealthy (unless failing open),
                // never drained, never weight 0.
                let g = c.svc.endpoints[i].group as usize;
                prop_assert_eq!(c.svc.groups[g].region, r.region);
                prop_assert!(may_use(c, plan, i), "endpoint {} used: {:?}", i, plan);
                if plan.eligibility != Eligibility::FailOpen {
                    prop_assert!(c.obs.endpoints[i].health != Health::Unhealthy);
                }
            }
        }
    }
    for s in &plan.status {
        prop_assert!((0.0..=1.0).contains(&s.fraction));
        prop_assert!(s.capacity >= 0.0);
    }
    // Something eligible ⇔ the plan serves.
    let any = (0..c.svc.endpoints.len()).any(|i| may_use(c, plan, i));
    prop_assert_eq!(
        plan.is_serving(),
        any && plan.eligibility != Eligibility::Nothing
    );
    if plan.eligibility == Eligibility::Nothing {
        prop_assert!(!plan.is_serving());
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn plans_are_well_formed(c in case()) {
        let t = Tuning::default();
        let p1 = decide(&c.node, &c.svc, &c.obs, None, &t).unwrap();
        check(&c, &p1)?;
        // Deterministic.
        prop_assert_eq!(&decide(&c.node, &c.svc, &c.obs, None, &t).unwrap(), &p1);
        // A second round with other rates and the first plan as previous.
        let mut c2 = c.clone();
        for o in &mut c2.obs.endpoints {
            o.rate *= c.again;
        }
        let p2 = decide(&c2.node, &c2.svc, &c2.obs, Some(&p1), &t).unwrap();
        check(&c2, &p2)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn pick_region_follows_the_fractions(
        raw in proptest::collection::vec(0.01f64..1.0, 1..7),
        seed in any::<u64>(),
    ) {
        let total: f64 = raw.iter().sum();
        let fractions: Vec<f64> = raw.iter().map(|f| f / total).collect();
        let t = thresholds(&fractions);
        const N: usize = 100_000;
        let mut counts = vec![0usize; fractions.len()];
        let mut h = seed;
        for _ in 0..N {
            // Any hash sequence will do; consecutive flow hashes are not
            // random, so walk with an odd constant.
            h = h.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let i = pick_index(&t, h).unwrap();
            prop_assert_eq!(pick_index(&t, h), Some(i));
            counts[i] += 1;
        }
        for (f, n) in fractions.iter().zip(&counts) {
            let got = *n as f64 / N as f64;
            let sigma = (f * (1.0 - f) / N as f64).sqrt();
            prop_assert!((got - f).abs() <= 5.0 * sigma + 1e-4,
                "fraction {} got {} ({:?})", f, got, counts);
        }
    }
}

#[test]
fn pick_is_stable_and_the_last_region_catches_everything() {
    let t = thresholds(&[0.5, 0.25, 0.25]);
    assert_eq!(t[2], u32::MAX);
    assert_eq!(t[0], (1u32 << 31) - 1);
    assert_eq!(t[1], 3 * (1u32 << 30) - 1);
    assert_eq!(pick_index(&[], 7), None);
    assert_eq!(thresholds(&[1.0]), [u32::MAX]);
    // Empty regions between (rounding): never picked, never panics.
    let t = thresholds(&[0.0, 1.0]);
    for h in 0..1000u64 {
        assert_eq!(
            pick_index(&t, h.wrapping_mul(0x9e37_79b9_7f4a_7c15)),
            Some(1)
        );
    }
    let plan = Plan::empty();
    assert_eq!(pick_region(&plan, 1), None);
}

/// The region key must not correlate with the Maglev slot of the same
/// hash (Maglev reduces by the hash's high bits): the flows of a 5 %
/// region spread evenly over the table.
#[test]
fn region_choice_does_not_bias_the_maglev_slot() {
    const M: u64 = 65_537;
    let t = thresholds(&[0.05, 0.95]);
    let mut buckets = [0usize; 10];
    let mut n = 0usize;
    let mut h = 12345u64;
    for _ in 0..400_000 {
        h = h.wrapping_add(0x9e37_79b9_7f4a_7c15);
        if pick_index(&t, h) == Some(0) {
            let slot = ((u128::from(h) * u128::from(M)) >> 64) as u64;
            buckets[(slot * 10 / M) as usize] += 1;
            n += 1;
        }
    }
    assert!((n as f64 / 400_000.0 - 0.05).abs() < 0.003, "{n}");
    for b in buckets {
        let share = b as f64 / n as f64;
        assert!((share - 0.1).abs() < 0.015, "{buckets:?}");
    }
}
