//! Measures how long building one table takes, per slot, over a range of table sizes: the
//! calibration of the build-time estimate `spillway check-config` prints
//! (`config::memory::BUILD_NS_PER_SLOT`).
//!
//! `cargo run --release -p maglev --example build_time` for the default grid, or
//! `… --example build_time -- M N [N …]` for one table size (rounded up to a prime).

use std::time::Instant;

use maglev::{Endpoint, EndpointId, MaglevTable, is_prime, mix64};

fn main() -> Result<(), maglev::BuildError> {
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
        _ => [65_537u32, 655_373, 4_194_301, 16_777_213, 67_108_859]
            .into_iter()
            .map(|m| (m, vec![10, 1_000, 10_000]))
            .collect(),
    };
    println!("| M | N | build (best of 3) | ns per slot | table bytes | build scratch bytes |");
    println!("| --- | --- | --- | --- | --- | --- |");
    for (m, ns) in grid {
        for n in ns {
            if n as u64 >= u64::from(m) {
                continue;
            }
            let eps: Vec<Endpoint> = (0..n as u64)
                .map(|i| Endpoint {
                    id: EndpointId(mix64(i)),
                    weight: 1,
                })
                .collect();
            let mut best = f64::INFINITY;
            for _ in 0..3 {
                let t0 = Instant::now();
                let t = MaglevTable::build_v1(m, &eps)?;
                best = best.min(t0.elapsed().as_secs_f64());
                std::hint::black_box(&t);
            }
            println!(
                "| {m} | {n} | {:.1} ms | {:.1} | {} | {} |",
                best * 1e3,
                best * 1e9 / f64::from(m),
                MaglevTable::memory_bytes_for(m, n),
                MaglevTable::build_scratch_bytes(m, n),
            );
        }
    }
    Ok(())
}
