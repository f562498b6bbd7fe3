//! Measures Maglev disruption (fraction of slots that change owner when one endpoint is removed
//! or added), in units of 1/N, over a grid of N and M.
//!
//! `cargo run --release -p maglev --example disruption` for the default grid, or
//! `… --example disruption -- M N [N …]` for one table size (rounded up to a prime).

use maglev::{Endpoint, EndpointId, MaglevTable, is_prime, mix64};

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
            .map(|m| (m, vec![5, 10, 20, 50, 100, 200, 500, 1000, 2000]))
            .collect(),
    };
    println!("| M | N | remove: mean × 1/N | remove: worst | add: worst |");
    println!("| --- | --- | --- | --- | --- |");
    for (m, ns) in grid {
        for n in ns {
            let (mut sum, mut worst_rm, mut worst_add) = (0.0, 0.0f64, 0.0f64);
            for trial in 0..TRIALS {
                let all: Vec<Endpoint> = (0..=n as u64)
                    .map(|i| Endpoint {
                        id: EndpointId(mix64((trial << 32) | i)),
                        weight: 1,
                    })
                    .collect();
                let base = &all[..n];
                let t = MaglevTable::build_v1(m, base)?;
                let mut removed = base.to_vec();
                removed.remove(usize::try_from(trial * 7919).unwrap_or(0) % n);
                let rm = MaglevTable::build_v1(m, &removed)?
                    .diff(&t)
                    .fraction_moved()
                    * n as f64;
                let add =
                    MaglevTable::build_v1(m, &all)?.diff(&t).fraction_moved() * (n + 1) as f64;
                sum += rm;
                worst_rm = worst_rm.max(rm);
                worst_add = worst_add.max(add);
            }
            println!(
                "| {m} | {n} | {:.3} | {worst_rm:.3} | {worst_add:.3} |",
                sum / TRIALS as f64
            );
        }
    }
    Ok(())
}
