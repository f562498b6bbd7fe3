//! Measures Maglev disruption (fraction of slots that change owner when one endpoint is removed
//! or added), in units of 1/N, balance (the largest share error) and build time, for `maglev-v1`
//! and `maglev-v2` side by side, over a grid of N and M.
//!
//! `cargo run --release -p maglev --example disruption` for the default grid, or
//! `… --example disruption -- M N [N …]` for one table size (rounded up to a prime).

use maglev::{Algorithm, Endpoint, EndpointId, MaglevTable, TableSize, is_prime, mix64};

/// One algorithm's figures for one (M, N).
#[derive(Default)]
struct Figures {
    remove_mean: f64,
    remove_worst: f64,
    add_worst: f64,
    balance_worst: f64,
    build_ms: f64,
}

fn measure(alg: Algorithm, m: u32, n: usize, trials: u64) -> Result<Figures, maglev::BuildError> {
    let size = TableSize::new(m)?;
    let mut f = Figures::default();
    for trial in 0..trials {
        let all: Vec<Endpoint> = (0..=n as u64)
            .map(|i| Endpoint {
                id: EndpointId(mix64((trial << 32) | i)),
                weight: 1,
            })
            .collect();
        let base = &all[..n];
        let t0 = std::time::Instant::now();
        let t = MaglevTable::build(alg, size, base)?;
        f.build_ms += t0.elapsed().as_secs_f64() * 1e3 / trials as f64;
        let share = f64::from(m) / n as f64;
        for c in t.slot_counts() {
            f.balance_worst = f
                .balance_worst
                .max((f64::from(c) - share).abs() / share * 100.0);
        }
        let mut removed = base.to_vec();
        removed.remove(usize::try_from(trial * 7919).unwrap_or(0) % n);
        let rm = MaglevTable::build(alg, size, &removed)?
            .diff(&t)
            .fraction_moved()
            * n as f64;
        let add = MaglevTable::build(alg, size, &all)?
            .diff(&t)
            .fraction_moved()
            * (n + 1) as f64;
        f.remove_mean += rm / trials as f64;
        f.remove_worst = f.remove_worst.max(rm);
        f.add_worst = f.add_worst.max(add);
    }
    Ok(f)
}

fn main() -> Result<(), maglev::BuildError> {
    const TRIALS: u64 = 10;
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let grid: Vec<(u32, Vec<usize>)> = match args.split_first() {
        Some((&m, ns)) if !ns.is_empty() => {
            let mut m = u32::try_from(m).unwrap_or(maglev::MAX_TABLE_SIZE);
            while !is_prime(m) {
                m += 1;
            }
            vec![(
                m,
                ns.iter().filter_map(|&n| usize::try_from(n).ok()).collect(),
            )]
        }
        _ => [65_537u32, 655_373]
            .into_iter()
            .map(|m| (m, vec![10, 20, 50, 100, 200, 500, 1000, 2000]))
            .collect(),
    };
    println!(
        "| M | N | remove: mean × 1/N (v1 → v2) | remove: worst | add: worst | balance: worst % | build ms |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    for (m, ns) in grid {
        for n in ns {
            let a = measure(Algorithm::V1, m, n, TRIALS)?;
            let b = measure(Algorithm::V2, m, n, TRIALS)?;
            println!(
                "| {m} | {n} | {:.3} → **{:.3}** | {:.3} → {:.3} | {:.3} → {:.3} | {:.2} → {:.2} | {:.2} → {:.2} |",
                a.remove_mean,
                b.remove_mean,
                a.remove_worst,
                b.remove_worst,
                a.add_worst,
                b.add_worst,
                a.balance_worst,
                b.balance_worst,
                a.build_ms,
                b.build_ms
            );
        }
    }
    Ok(())
}
