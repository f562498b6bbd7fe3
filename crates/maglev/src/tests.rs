#![allow(clippy::cast_possible_truncation)] // test sizes and indices are small
use super::*;

/// Deterministic pseudo-random ids (SplitMix64 sequence) so tests are reproducible.
/// `n` endpoints with ids from `seed`, weighted by `weights` in turn.
fn weighted(n: usize, seed: u64, weights: &[u32]) -> Vec<Endpoint> {
    ids(n, seed)
        .into_iter()
        .zip(weights.iter().cycle())
        .map(|(id, &weight)| Endpoint { id, weight })
        .collect()
}

fn ids(n: usize, seed: u64) -> Vec<EndpointId> {
    (0..n as u64)
        .map(|i| {
            EndpointId(mix64(
                seed.wrapping_add(i.wrapping_mul(0x9e37_79b9_7f4a_7c15)),
            ))
        })
        .collect()
}

fn equal(n: usize, seed: u64) -> Vec<Endpoint> {
    ids(n, seed)
        .into_iter()
        .map(|id| Endpoint { id, weight: 1 })
        .collect()
}

/// Fisher–Yates with a SplitMix64 stream.
fn shuffle<T>(v: &mut [T], mut seed: u64) {
    for i in (1..v.len()).rev() {
        seed = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let j = (mix64(seed) % (i as u64 + 1)) as usize;
        v.swap(i, j);
    }
}

/// Slot owners by id, independent of the caller's order.
fn owners(t: &MaglevTable) -> Vec<EndpointId> {
    (0..t.size()).map(|i| t.id_at(i).unwrap()).collect()
}

/// Largest relative deviation of an endpoint's slot share from its weight share.
fn max_share_error(t: &MaglevTable, eps: &[Endpoint]) -> f64 {
    let total_w: u64 = eps.iter().map(|e| u64::from(e.weight)).sum();
    let counts = t.slot_counts();
    let m = t.size() as f64;
    eps.iter()
        .zip(&counts)
        .filter(|(e, _)| e.weight > 0)
        .map(|(e, &c)| {
            let want = f64::from(e.weight) / total_w as f64;
            ((f64::from(c) / m) - want).abs() / want
        })
        .fold(0.0, f64::max)
}

#[test]
fn table_size_rejects_non_primes_and_out_of_range() {
    assert_eq!(TableSize::new(65_536), Err(BuildError::NotPrime(65_536)));
    assert_eq!(TableSize::new(65_535), Err(BuildError::NotPrime(65_535)));
    assert_eq!(TableSize::new(1), Err(BuildError::SizeOutOfRange(1)));
    assert_eq!(
        TableSize::new(MAX_TABLE_SIZE + 1),
        Err(BuildError::SizeOutOfRange(MAX_TABLE_SIZE + 1))
    );
    assert_eq!(TableSize::new(65_537).unwrap().get(), 65_537);
    assert_eq!(TableSize::new(655_373).unwrap().get(), 655_373);
    assert_eq!(TableSize::default().get(), DEFAULT_TABLE_SIZE);
    let msg = MaglevTable::build_v1(1000, &equal(3, 1))
        .unwrap_err()
        .to_string();
    assert!(msg.contains("1000") && msg.contains("not prime"), "{msg}");
}

#[test]
fn primality_matches_a_sieve() {
    const LIMIT: usize = 20_000;
    let mut sieve = vec![true; LIMIT];
    sieve[0] = false;
    sieve[1] = false;
    for i in 2..LIMIT {
        if sieve[i] {
            for j in (i * i..LIMIT).step_by(i) {
                sieve[j] = false;
            }
        }
    }
    for (n, &p) in sieve.iter().enumerate() {
        assert_eq!(is_prime(n as u32), p, "{n}");
    }
    // A square of a prime near the top of the range.
    assert!(!is_prime(8191 * 8191));
    assert!(is_prime(MAX_TABLE_SIZE - 5)); // 67108859 is prime
}

#[test]
fn every_slot_is_filled_by_an_eligible_endpoint() {
    for (n, m) in [
        (1, 7),
        (2, 3),
        (3, 3),
        (7, 101),
        (100, 65_537),
        (1000, 65_537),
    ] {
        // Endpoint 0 has weight 0: a slot left at its initial value 0 would point at it.
        let mut eps = equal(n + 1, 7);
        eps[0].weight = 0;
        let t = MaglevTable::build_v1(m, &eps).unwrap();
        assert_eq!(t.size(), m as usize);
        assert!(
            t.slots().iter().all(|&s| s != 0 && (s as usize) <= n),
            "n={n} m={m}"
        );
        let counts = t.slot_counts();
        assert_eq!(counts[0], 0);
        assert_eq!(
            counts.iter().map(|&c| c as usize).sum::<usize>(),
            m as usize
        );
        assert!(counts[1..].iter().all(|&c| c > 0), "n={n} m={m}");
    }
}

/// The Maglev paper's population written the obvious way (division, `Vec<bool>`, explicit
/// permutation index), plus the documented credit rule for weights: the optimised builder must
/// produce exactly this.
fn reference_build(m: u32, eps: &[Endpoint]) -> Vec<u32> {
    let mut order: Vec<usize> = (0..eps.len()).filter(|&i| eps[i].weight > 0).collect();
    order.sort_by_key(|&i| eps[i].id);
    let m64 = u64::from(m);
    let offset: Vec<u64> = order
        .iter()
        .map(|&i| mix64(eps[i].id.0 ^ OFFSET_SEED) % m64)
        .collect();
    let skip: Vec<u64> = order
        .iter()
        .map(|&i| mix64(eps[i].id.0 ^ SKIP_SEED) % (m64 - 1) + 1)
        .collect();
    let max_w = order
        .iter()
        .map(|&i| u64::from(eps[i].weight))
        .max()
        .unwrap();
    let mut next = vec![0u64; order.len()];
    let mut credit = vec![0u64; order.len()];
    let mut entry: Vec<Option<u32>> = vec![None; m as usize];
    let mut n = 0;
    while n < m {
        for (k, &i) in order.iter().enumerate() {
            credit[k] += u64::from(eps[i].weight);
            if credit[k] < max_w {
                continue;
            }
            credit[k] -= max_w;
            let mut c = (offset[k] + next[k] * skip[k]) % m64;
            while entry[c as usize].is_some() {
                next[k] += 1;
                c = (offset[k] + next[k] * skip[k]) % m64;
            }
            entry[c as usize] = Some(i as u32);
            next[k] += 1;
            n += 1;
            if n == m {
                break;
            }
        }
    }
    entry.into_iter().map(Option::unwrap).collect()
}

#[test]
fn matches_the_reference_population() {
    for (n, m, wmax) in [
        (1, 7, 1),
        (3, 7, 1),
        (13, 1009, 1),
        (13, 1009, 5),
        (200, 65_537, 3),
    ] {
        let eps: Vec<Endpoint> = ids(n, 3)
            .into_iter()
            .enumerate()
            .map(|(i, id)| Endpoint {
                id,
                weight: (i as u32 % wmax) + 1,
            })
            .collect();
        let t = MaglevTable::build_v1(m, &eps).unwrap();
        assert_eq!(t.slots(), &reference_build(m, &eps)[..], "n={n} m={m}");
    }
}

#[test]
fn equal_weight_shares_are_within_one_percent() {
    let mut report = Vec::new();
    for (n, m) in [
        (10, 65_537),
        (100, 65_537),
        (500, 65_537),
        (1000, 65_537),
        (1000, 655_373),
        (5000, 655_373),
    ] {
        let eps = equal(n, 11);
        let t = MaglevTable::build_v1(m, &eps).unwrap();
        let err = max_share_error(&t, &eps);
        let counts = t.slot_counts();
        let (lo, hi) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
        report.push(format!(
            "N={n} M={m}: slots {lo}..={hi}, max share error {:.3}%",
            err * 100.0
        ));
        // Equal weights: round-robin turns give every endpoint floor(M/N) or ceil(M/N).
        assert!(hi - lo <= 1, "N={n} M={m} {lo}..{hi}");
        assert!(err <= 0.01, "N={n} M={m}: {err}");
    }
    println!("{}", report.join("\n"));
}

#[test]
fn weighted_shares_are_within_one_percent() {
    let mut report = Vec::new();
    for (n, m, weights) in [
        (100, 65_537, &[1u32, 2, 3, 4][..]),
        (20, 655_373, &[1, 10, 100][..]),
        (200, 655_373, &[1, 2, 5, 7, 13][..]),
        (1000, 655_373, &[1, 2, 3, 4][..]),
    ] {
        let eps = weighted(n, 5, weights);
        let t = MaglevTable::build_v1(m, &eps).unwrap();
        let err = max_share_error(&t, &eps);
        report.push(format!(
            "N={n} M={m} weights {weights:?}: max share error {:.3}%",
            err * 100.0
        ));
        assert!(err <= 0.01, "N={n} M={m} {weights:?}: {err}");
    }
    println!("{}", report.join("\n"));
}

#[test]
fn weight_zero_gets_no_slots_and_weights_are_relative() {
    let base = ids(20, 9);
    let a: Vec<Endpoint> = base
        .iter()
        .enumerate()
        .map(|(i, &id)| Endpoint {
            id,
            weight: (i % 3) as u32,
        })
        .collect();
    let b: Vec<Endpoint> = a
        .iter()
        .map(|e| Endpoint {
            id: e.id,
            weight: e.weight * 10,
        })
        .collect();
    let ta = MaglevTable::build_v1(65_537, &a).unwrap();
    let tb = MaglevTable::build_v1(65_537, &b).unwrap();
    assert_eq!(ta.slots(), tb.slots());
    for (e, c) in a.iter().zip(ta.slot_counts()) {
        assert_eq!(e.weight == 0, c == 0);
    }
    // Dropping the weight-0 endpoints entirely gives the same owners.
    let c: Vec<Endpoint> = a.iter().copied().filter(|e| e.weight > 0).collect();
    let tc = MaglevTable::build_v1(65_537, &c).unwrap();
    assert_eq!(owners(&ta), owners(&tc));
}

/// Fraction of slots moved when one endpoint is removed from / added to N.
fn disruption(n: usize, m: u32, seed: u64, victim: usize) -> (f64, f64) {
    let all = equal(n + 1, seed);
    let base: Vec<Endpoint> = all[..n].to_vec();
    let t = MaglevTable::build_v1(m, &base).unwrap();
    let mut removed = base.clone();
    removed.remove(victim % n);
    let tr = MaglevTable::build_v1(m, &removed).unwrap();
    let ta = MaglevTable::build_v1(m, &all).unwrap();
    (tr.diff(&t).fraction_moved(), ta.diff(&t).fraction_moved())
}

#[test]
fn removing_or_adding_one_endpoint_moves_at_most_1_2_over_n() {
    let mut report = Vec::new();
    for (n, m) in [
        (3, 65_537),
        (5, 65_537),
        (10, 65_537),
        (20, 65_537),
        (10, 655_373),
        (50, 655_373),
        (100, 655_373),
    ] {
        let mut worst_rm: f64 = 0.0;
        let mut worst_add: f64 = 0.0;
        for trial in 0..3u64 {
            let (rm, add) = disruption(n, m, 100 + trial, (trial as usize * 7919) % n);
            worst_rm = worst_rm.max(rm);
            worst_add = worst_add.max(add);
        }
        let bound = 1.2 / n as f64;
        report.push(format!(
            "N={n} M={m}: remove {:.3}/N, add {:.3}/N (worst of 3)",
            worst_rm * n as f64,
            worst_add * (n + 1) as f64
        ));
        assert!(
            worst_rm <= bound,
            "remove N={n} M={m}: {worst_rm} > {bound}"
        );
        // Adding the (N+1)th endpoint: compare against 1.2/(N+1), its ideal share.
        let bound_add = 1.2 / (n + 1) as f64;
        assert!(
            worst_add <= bound_add,
            "add N={n} M={m}: {worst_add} > {bound_add}"
        );
    }
    println!("{}", report.join("\n"));
}

#[test]
fn diff_counts_moved_slots() {
    let eps = equal(10, 1);
    let t = MaglevTable::build_v1(65_537, &eps).unwrap();
    assert_eq!(t.diff(&t).slots_moved, 0);
    let mut rev = eps.clone();
    rev.reverse();
    let tr = MaglevTable::build_v1(65_537, &rev).unwrap();
    // Different indices, same owners: nothing moved.
    assert_ne!(t.slots(), tr.slots());
    assert_eq!(tr.diff(&t).slots_moved, 0);
    // The removed endpoint's slots always move.
    let t9 = MaglevTable::build_v1(65_537, &eps[1..]).unwrap();
    let d = t9.diff(&t);
    assert!(d.slots_moved >= t.slot_counts()[0] as usize);
    let big = MaglevTable::build_v1(655_373, &eps).unwrap();
    assert_eq!(big.diff(&t).slots_moved, 655_373);
}

#[test]
fn table_does_not_depend_on_endpoint_order() {
    for (n, m) in [(3, 7), (50, 65_537), (1000, 65_537)] {
        let eps: Vec<Endpoint> = ids(n, 21)
            .into_iter()
            .enumerate()
            .map(|(i, id)| Endpoint {
                id,
                weight: 1 + (i % 5) as u32,
            })
            .collect();
        let reference = owners(&MaglevTable::build_v1(m, &eps).unwrap());
        for seed in 0..5 {
            let mut p = eps.clone();
            shuffle(&mut p, seed);
            let t = MaglevTable::build_v1(m, &p).unwrap();
            assert_eq!(owners(&t), reference, "n={n} m={m} seed={seed}");
            // Indices follow the caller's order.
            for (i, id) in t.endpoint_ids().iter().enumerate() {
                assert_eq!(*id, p[i].id);
            }
        }
    }
}

/// FNV-1a 64 over a byte string, for checking the golden values below independently.
fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

#[test]
fn hashes_are_the_documented_stable_functions() {
    // Published SplitMix64 test vector: the first output for seed 0 is mix64(0x9e3779b97f4a7c15).
    assert_eq!(mix64(0x9e37_79b9_7f4a_7c15), 0xe220_a839_7b1d_cdaf);
    assert_eq!(mix64(0), 0);
    // FNV-1a 64 reference values ("" and "a").
    assert_eq!(fnv(b""), 0xcbf2_9ce4_8422_2325);
    assert_eq!(fnv(b"a"), 0xaf63_dc4c_8601_ec8c);
    assert_eq!(
        EndpointId::from_bytes(b"a"),
        EndpointId(mix64(0xaf63_dc4c_8601_ec8c))
    );
    let mut addr = [0u8; 16];
    addr[10] = 0xff;
    addr[11] = 0xff;
    addr[12..].copy_from_slice(&[10, 0, 0, 1]);
    let mut bytes = addr.to_vec();
    bytes.extend_from_slice(&8080u16.to_be_bytes());
    assert_eq!(
        EndpointId::from_addr_port(addr, 8080),
        EndpointId(mix64(fnv(&bytes)))
    );
}

#[test]
fn table_contents_are_stable_across_releases() {
    // Golden checksum of a table: if this changes, nodes running different releases would
    // disagree (M34) — that needs a new `Algorithm` variant, not an edit here.
    let t = MaglevTable::build_v1(65_537, &golden_endpoints()).unwrap();
    let sum = checksum(&t);
    assert_eq!(sum, GOLDEN, "got {sum:#018x}");
    assert_eq!(t.lookup(0), t.slots()[0]);
}

const GOLDEN: u64 = 0x1795_30a5_2051_e186;

/// The golden tables' endpoints: 10.0.0.0-99 port 80, weights 1 to 4.
fn golden_endpoints() -> Vec<Endpoint> {
    (0..100u16)
        .map(|i| Endpoint {
            id: EndpointId::from_addr_port(
                [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, i as u8],
                80,
            ),
            weight: 1 + u32::from(i % 4),
        })
        .collect()
}

/// FNV-1a 64 over a table's slots.
fn checksum(t: &MaglevTable) -> u64 {
    t.slots().iter().fold(FNV_OFFSET, |h, &s| {
        (h ^ u64::from(s)).wrapping_mul(FNV_PRIME)
    })
}

#[test]
fn lookup_is_a_multiply_shift_over_the_slots() {
    let t = MaglevTable::build_v1(65_537, &equal(17, 2)).unwrap();
    assert_eq!(t.lookup(0), t.slots()[0]);
    assert_eq!(t.lookup(u64::MAX), t.slots()[65_536]);
    assert_eq!(t.slot_of(u64::MAX), 65_536);
    for i in 0..1000u64 {
        let h = mix64(i);
        let slot = ((u128::from(h) * 65_537) >> 64) as usize;
        assert_eq!(t.slot_of(h), slot);
        assert_eq!(t.lookup(h), t.slots()[slot]);
    }
}

#[test]
fn invalid_endpoint_sets_are_rejected() {
    assert_eq!(
        MaglevTable::build_v1(7, &[]),
        Err(BuildError::NoEligibleEndpoints)
    );
    let zero = [Endpoint {
        id: EndpointId(1),
        weight: 0,
    }];
    assert_eq!(
        MaglevTable::build_v1(7, &zero),
        Err(BuildError::NoEligibleEndpoints)
    );
    let dup = [
        Endpoint {
            id: EndpointId(5),
            weight: 1,
        },
        Endpoint {
            id: EndpointId(6),
            weight: 1,
        },
        Endpoint {
            id: EndpointId(5),
            weight: 2,
        },
    ];
    assert_eq!(
        MaglevTable::build_v1(7, &dup),
        Err(BuildError::DuplicateEndpoint(5))
    );
    assert_eq!(
        MaglevTable::build_v1(7, &equal(8, 1)),
        Err(BuildError::TooManyEndpoints {
            endpoints: 8,
            size: 7
        })
    );
}

#[test]
fn algorithm_names_round_trip() {
    assert_eq!("maglev-v1".parse::<Algorithm>(), Ok(Algorithm::V1));
    assert_eq!(Algorithm::V1.to_string(), "maglev-v1");
    let err = "maglev-v9".parse::<Algorithm>().unwrap_err();
    assert!(err.to_string().contains("maglev-v9"));
}

#[test]
fn a_table_holds_the_memory_that_memory_bytes_for_says() {
    for (m, n) in [(7u32, 3usize), (65_537, 1_000), (655_373, 10)] {
        let mut eps = equal(n, 9);
        // An endpoint of weight 0 gets no slots but keeps its id.
        eps[0].weight = 0;
        let t = MaglevTable::build_v1(m, &eps).unwrap();
        assert_eq!(t.heap_bytes() as u64, MaglevTable::memory_bytes_for(m, n));
        // Scratch: at least the bitmap and the permutation state.
        assert!(MaglevTable::build_scratch_bytes(m, n) >= u64::from(m) / 8 + 24 * n as u64);
    }
    assert_eq!(
        MaglevTable::memory_bytes_for(65_537, 1_000),
        65_537 * 4 + 8_000
    );
}

// ---- maglev-v2 ----

/// `maglev-v2` written the obvious way: quotas by largest remainder (ties by
/// the documented rank), then positions in lockstep, divisions and a
/// `Vec<bool>`.
fn reference_build_v2(m: u32, eps: &[Endpoint]) -> Vec<u32> {
    let mut order: Vec<usize> = (0..eps.len()).filter(|&i| eps[i].weight > 0).collect();
    order.sort_by_key(|&i| eps[i].id);
    let m128 = u128::from(m);
    let total: u128 = order.iter().map(|&i| u128::from(eps[i].weight)).sum();
    let mut quota: Vec<u128> = order
        .iter()
        .map(|&i| m128 * u128::from(eps[i].weight) / total)
        .collect();
    let mut by_remainder: Vec<usize> = (0..order.len()).collect();
    by_remainder.sort_by_key(|&k| {
        let i = order[k];
        (
            std::cmp::Reverse(m128 * u128::from(eps[i].weight) % total),
            mix64(eps[i].id.0 ^ 0x7261_6e6b_2d76_3200),
        )
    });
    let left = m128 - quota.iter().sum::<u128>();
    for &k in by_remainder.iter().take(left as usize) {
        quota[k] += 1;
    }
    let m64 = u64::from(m);
    let mut taken = vec![false; m as usize];
    let mut slots = vec![u32::MAX; m as usize];
    let mut got = vec![0u128; order.len()];
    let mut position = 0u64;
    while got.iter().zip(&quota).any(|(g, q)| g < q) {
        for (k, &i) in order.iter().enumerate() {
            if got[k] == quota[k] {
                continue;
            }
            let x = eps[i].id.0;
            let offset = mix64(x ^ OFFSET_SEED) % m64;
            let skip = mix64(x ^ SKIP_SEED) % (m64 - 1) + 1;
            let slot = ((offset + position * skip) % m64) as usize;
            if !taken[slot] {
                taken[slot] = true;
                slots[slot] = i as u32;
                got[k] += 1;
            }
        }
        position += 1;
    }
    slots
}

fn v2(m: u32, eps: &[Endpoint]) -> MaglevTable {
    MaglevTable::build_v2(m, eps).unwrap()
}

#[test]
fn v2_matches_its_reference_and_fills_every_slot() {
    for (n, m, weights) in [
        (1, 7, &[1u32][..]),
        (3, 3, &[1][..]),
        (7, 101, &[1, 0, 2][..]),
        (100, 65_537, &[1, 2, 3, 4][..]),
        (1000, 65_537, &[1][..]),
    ] {
        let eps = weighted(n, 31, weights);
        let t = v2(m, &eps);
        assert_eq!(t.algorithm(), Algorithm::V2);
        assert_eq!(t.slots(), &reference_build_v2(m, &eps)[..], "n={n} m={m}");
        for (e, c) in eps.iter().zip(t.slot_counts()) {
            assert_eq!(e.weight == 0, c == 0, "n={n} m={m}");
        }
    }
}

/// Exact quotas: every endpoint within one slot of its weighted share.
#[test]
fn v2_gives_every_endpoint_its_share_to_one_slot() {
    for (n, m, weights) in [
        (10, 65_537, &[1u32][..]),
        (1000, 65_537, &[1][..]),
        (100, 65_537, &[1, 2, 3, 4][..]),
        (20, 655_373, &[1, 10, 100][..]),
        (200, 655_373, &[1, 2, 5, 7, 13][..]),
        (5000, 655_373, &[1][..]),
    ] {
        let eps = weighted(n, 5, weights);
        let t = v2(m, &eps);
        let total: f64 = eps.iter().map(|e| f64::from(e.weight)).sum();
        for (e, c) in eps.iter().zip(t.slot_counts()) {
            let share = f64::from(m) * f64::from(e.weight) / total;
            assert!(
                (f64::from(c) - share).abs() < 1.0,
                "n={n} m={m} {weights:?}: {c} slots for a share of {share}"
            );
        }
        assert!(max_share_error(&t, &eps) <= 0.01, "n={n} m={m}");
    }
}

#[test]
fn v2_does_not_depend_on_endpoint_order_and_weights_are_relative() {
    let eps: Vec<Endpoint> = ids(300, 21)
        .into_iter()
        .enumerate()
        .map(|(i, id)| Endpoint {
            id,
            weight: (i % 5) as u32,
        })
        .collect();
    let reference = owners(&v2(65_537, &eps));
    for seed in 0..3 {
        let mut p = eps.clone();
        shuffle(&mut p, seed);
        assert_eq!(owners(&v2(65_537, &p)), reference, "seed={seed}");
    }
    let scaled: Vec<Endpoint> = eps
        .iter()
        .map(|e| Endpoint {
            id: e.id,
            weight: e.weight * 7,
        })
        .collect();
    assert_eq!(owners(&v2(65_537, &scaled)), reference);
    let positive: Vec<Endpoint> = eps.iter().copied().filter(|e| e.weight > 0).collect();
    assert_eq!(owners(&v2(65_537, &positive)), reference);
}

/// Why v2 exists: removing or adding one of N endpoints moves fewer slots
/// than v1 does where v1 moves most (large N for M), with the same balance.
#[test]
fn v2_moves_fewer_slots_than_v1_when_one_endpoint_goes_or_comes() {
    let mut report = Vec::new();
    for (n, m, bound) in [
        (100, 65_537, 1.4),
        (1000, 65_537, 5.0),
        (1000, 655_373, 3.5),
    ] {
        let (mut v1_rm, mut v2_rm) = (0.0, 0.0);
        for trial in 0..3u64 {
            let all = equal(n + 1, 200 + trial);
            let base = &all[..n];
            let mut removed = base.to_vec();
            removed.remove((trial as usize * 7919) % n);
            let moved = |build: fn(u32, &[Endpoint]) -> MaglevTable| {
                let t = build(m, base);
                let rm = build(m, &removed).diff(&t).fraction_moved() * n as f64;
                let add = build(m, &all).diff(&t).fraction_moved() * (n + 1) as f64;
                (rm, add)
            };
            let (a_rm, a_add) = moved(|m, e| MaglevTable::build_v1(m, e).unwrap());
            let (b_rm, b_add) = moved(v2);
            assert!(
                b_rm <= bound && b_add <= bound,
                "n={n} m={m}: {b_rm}, {b_add}"
            );
            assert!(
                b_rm < a_rm && b_add < a_add,
                "n={n} m={m}: v2 {b_rm}/{b_add}, v1 {a_rm}/{a_add}"
            );
            v1_rm += a_rm / 3.0;
            v2_rm += b_rm / 3.0;
        }
        report.push(format!(
            "N={n} M={m}: remove v1 {v1_rm:.2}/N, v2 {v2_rm:.2}/N"
        ));
    }
    println!("{}", report.join("\n"));
}

#[test]
fn v2_table_contents_are_stable_across_releases() {
    // Like v1's golden checksum: a change needs a new `Algorithm` variant.
    let sum = checksum(&v2(65_537, &golden_endpoints()));
    assert_eq!(sum, GOLDEN_V2, "got {sum:#018x}");
}

const GOLDEN_V2: u64 = 0x2ed5_c9d9_a682_332e;

#[test]
fn v2_rejects_what_v1_rejects() {
    for bad in [
        vec![],
        vec![Endpoint {
            id: EndpointId(1),
            weight: 0,
        }],
        vec![
            Endpoint {
                id: EndpointId(5),
                weight: 1,
            },
            Endpoint {
                id: EndpointId(5),
                weight: 2,
            },
        ],
        equal(8, 1),
    ] {
        assert_eq!(
            MaglevTable::build_v2(7, &bad).map(|_| ()),
            MaglevTable::build_v1(7, &bad).map(|_| ()),
            "{bad:?}"
        );
    }
    assert_eq!("maglev-v2".parse::<Algorithm>(), Ok(Algorithm::V2));
    assert_eq!(Algorithm::V2.to_string(), "maglev-v2");
}
