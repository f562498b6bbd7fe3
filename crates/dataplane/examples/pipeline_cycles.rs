//! A fixed amount of pipeline work, timed by the thread's CPU time rather
//! than the wall clock (a busy shared machine skews wall-clock benches; this
//! VM has no hardware counters for `perf stat`):
//!
//!   cargo build --release -p dataplane --example pipeline_cycles
//!   target/release/examples/pipeline_cycles gue 4096 1000000
//!
//! Arguments: delivery mode, flow count, bursts of 32, flow-table capacity
//! (default 1,048,576; perf/bench.sh uses 65,536 up to 32,768 flows), and
//! the kind of packets (default `ack`): `syn` sends SYNs instead of ACKs
//! (with more flows than the table holds, every SYN is a new flow that
//! evicts an entry: the full-table insert), `v6` IPv6 ACKs to an IPv6 VIP,
//! `churn` every flow's SYN then every flow's RST, `new` a SYN of a flow
//! never seen per packet, `ranges` the same to a rule with `source_ranges`
//! (8 prefixes: a flow's source is asked when it begins) (an insert into a table with room: the set is
//! sent once, with no warm-up pass, so FLOWS must cover the bursts). Same
//! packets and set-up as benches/pipeline.rs (re-loading each frame is
//! included). The mode may also be `gateway` (gateway mode, M31: both
//! directions of every flow from the gateway endpoint to 8 appliances in
//! Geneve) or `gateway-return` (M32: the appliances' answers to those, with
//! the cookies this worker gave them, sent back to the endpoint):
//!
//!   valgrind --tool=callgrind target/release/examples/pipeline_cycles gateway-return 4096 1000 65536

#[path = "../benches/common/mod.rs"]
mod common;

use common::{BURST, Bench, Kind};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mode = args.get(1).map_or("gue", String::as_str);
    let flows: u32 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(4096);
    let bursts: usize = args
        .get(3)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let capacity: usize = args.get(4).and_then(|a| a.parse().ok()).unwrap_or(1 << 20);
    let kind_name = args.get(5).map_or("ack", String::as_str);
    let Some(kind) = Kind::parse(kind_name) else {
        eprintln!("pipeline_cycles: unknown kind '{kind_name}' (ack, syn, v6, churn, new, ranges)");
        std::process::exit(2);
    };
    let mut b = Bench::new(mode, 8, flows, kind, capacity);
    if matches!(kind, Kind::New | Kind::Ranges) {
        // Every packet measured must be a flow's first.
        if bursts.saturating_mul(BURST) > b.packets() {
            eprintln!(
                "pipeline_cycles: `new` needs FLOWS >= 32 x BURSTS ({flows} < {})",
                bursts * BURST
            );
            std::process::exit(2);
        }
    } else {
        // One pass over the set (gateway sets hold two packets per flow).
        for _ in 0..(b.packets() / BURST + 1) {
            b.burst();
        }
    }
    let (t, cpu) = (std::time::Instant::now(), cpu_ns());
    for _ in 0..bursts {
        b.burst();
    }
    let n = (bursts * BURST) as f64;
    let wall = t.elapsed().as_nanos() as f64 / n;
    let cpu = (cpu_ns() - cpu) as f64 / n;
    println!(
        "{mode} {kind_name} {flows} flows: {n} packets, {cpu:.1} ns/packet of CPU time ({wall:.1} wall clock)"
    );
    // Every packet must have been forwarded (sent back, for the return):
    // a mode that drops measures the drop path.
    if let Some(dropped) = b.not_forwarded() {
        eprintln!("pipeline_cycles: the last burst was not all forwarded: {dropped:?}");
        std::process::exit(1);
    }
}

/// This thread's CPU time (ns): /proc/thread-self/schedstat's first field
/// (nanoseconds on the CPU), else stat's utime+stime (10 ms ticks).
fn cpu_ns() -> u64 {
    let sched = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    if let Some(ns) = sched
        .split_whitespace()
        .next()
        .and_then(|x| x.parse::<u64>().ok())
    {
        return ns;
    }
    let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = after.split_whitespace().collect();
    // Fields 14 and 15 (utime, stime, in 10 ms ticks); `f` starts at field 3.
    let tick = |i: usize| f.get(i).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0);
    (tick(11) + tick(12)) * 10_000_000
}
