//! How long `config::load_str` (parse, validate, compile) takes for
//! configurations of many services: each service with a forwarding rule of
//! its own (a VIP each), a group of two endpoints and a health check, a
//! tenth of them dual-stack, a hundredth feeding a composite health check.
//! Validation must stay O(n log n) in services (a reload of a large file
//! runs it).
//!
//! `cargo run --release -p config --example validate_scale [N …]`
//! (default: 5000 10000 20000 40000).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // an example: fail loudly

use std::fmt::Write as _;
use std::time::Instant;

/// The configuration text of `n` services.
fn config(n: usize) -> String {
    let mut t = String::with_capacity(n * 400);
    t.push_str(
        "[node]\nname = \"n1\"\nregion = \"r1\"\nzone = \"z1\"\n\n\
         [dataplane]\nmanagement_core = 0\nworker_cores = [1]\nflow_table_capacity = 65536\n\n\
         [[health_checks]]\nname = \"hc\"\ntype = \"TCP\"\nport = 80\n\n",
    );
    for i in 0..n {
        let (hi, a, b) = (i >> 16, (i >> 8) & 0xff, i & 0xff);
        let _ = write!(
            t,
            "[[forwarding_rules]]\nname = \"r{i}\"\nvips = [\"10.{}.{a}.{b}\"]\nprotocol = \"TCP\"\nports = 80\nbackend_service = \"s{i}\"\n\n",
            100 + hi
        );
    }
    for i in 0..n {
        let (hi, a, b) = (i >> 16, (i >> 8) & 0xff, i & 0xff);
        let _ = write!(
            t,
            "[[backend_services]]\nname = \"s{i}\"\ndelivery = \"gue\"\nhealth_check = \"hc\"\nmaglev_table_size = 251\n\n\
             [[backend_services.groups]]\nname = \"g\"\nregion = \"r1\"\nzone = \"z1\"\nendpoints = [\n"
        );
        for e in 1..=2 {
            let six = if i % 10 == 0 {
                format!(", address6 = \"fd00::{hi:x}:{a:x}:{b:x}:{e}\"")
            } else {
                String::new()
            };
            let _ = writeln!(
                t,
                "  {{ address = \"172.{}.{a}.{b}\", port = {}{six} }},",
                16 + hi,
                8000 + e
            );
        }
        t.push_str("]\n\n");
    }
    for c in 0..n / 100 {
        let _ = write!(
            t,
            "[[composite_health_checks]]\nname = \"c{c}\"\ndestination = \"r{}\"\nsources = [{{ backend_service = \"s{}\" }}]\n\n",
            c * 100,
            c * 100 + 1
        );
    }
    t
}

fn main() {
    let sizes: Vec<usize> = {
        let args: Vec<usize> = std::env::args()
            .skip(1)
            .map(|a| a.parse().expect("a number of services"))
            .collect();
        if args.is_empty() {
            vec![5_000, 10_000, 20_000, 40_000]
        } else {
            args
        }
    };
    let env = config::Env::with_cpus(2);
    for n in sizes {
        let text = config(n);
        let t0 = Instant::now();
        let loaded = config::load_str("scale.toml", &text, &env);
        let took = t0.elapsed();
        let (ok, detail) = match &loaded {
            Ok(l) => (true, format!("{} warnings", l.warnings.len())),
            Err(e) => (
                false,
                format!("{} errors, first: {}", e.errors.len(), e.errors[0]),
            ),
        };
        println!(
            "{n:>6} services, {:>5.1} MB of TOML: load_str {:>8.3} s ({}; {detail})",
            text.len() as f64 / 1e6,
            took.as_secs_f64(),
            if ok { "valid" } else { "INVALID" }
        );
    }
}
