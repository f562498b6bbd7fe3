//! Probes 10,000 loopback listeners at a 1 s interval and reports the
//! health thread's CPU share, probe latency percentiles and how evenly the
//! probes are spread over the interval.
//!
//! ```text
//! cargo run --release -p health --example probe_10k -- [--endpoints 10000] \
//!     [--seconds 20] [--interval-ms 1000] [--http]
//! ```
//!
//! The listeners run in a child process (the same binary with `--serve`) so
//! that their sockets count against its own descriptor limit and its CPU is
//! not the checker's: 10,000 listeners spread over 127.0.1.1–127.0.1.100
//! (ephemeral ports) served by a one-worker tokio runtime. The checker runs
//! on its own `spillway-health` thread as in production. After a warm-up
//! (every endpoint HEALTHY, at least two intervals) the figures cover the
//! next `--seconds`:
//!
//! - CPU: the health thread's time from `/proc/self/task/<tid>/schedstat`
//!   (on loopback this includes the kernel's work for the server side of
//!   each connection, so it is an upper bound for a real network);
//! - latency: the checker's own measure of each probe (connect, and for
//!   `--http` request and response head), sampled from snapshots every
//!   250 ms;
//! - spread: the server counts accepts per 10 ms of wall-clock time; the
//!   counts folded by phase within the interval show how evenly probe starts
//!   are spread.

// A load test of the probers: sockets and clocks are its own.
#![allow(clippy::disallowed_types, clippy::disallowed_methods)]
#![allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // example: small values
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // example: fail loudly

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use config::compiled::EndpointId;
use health::{Check, HealthChecker, State, THREAD_NAME, Target};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

struct Args {
    endpoints: usize,
    seconds: u64,
    interval: Duration,
    http: bool,
    serve: bool,
}

fn args() -> Args {
    let mut a = Args {
        endpoints: 10_000,
        seconds: 20,
        interval: Duration::from_secs(1),
        http: false,
        serve: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut num = |what: &str| -> u64 {
            it.next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{what} needs a number"))
        };
        match arg.as_str() {
            "--endpoints" => a.endpoints = num("--endpoints") as usize,
            "--seconds" => a.seconds = num("--seconds"),
            "--interval-ms" => a.interval = Duration::from_millis(num("--interval-ms")),
            "--http" => a.http = true,
            "--serve" => a.serve = true,
            other => panic!("unknown argument {other:?}"),
        }
    }
    a
}

/// Lets this process open `want` descriptors (as far as the hard limit
/// allows without privileges).
fn raise_nofile(want: u64) {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return;
    };
    if soft >= want {
        return;
    }
    // Raising the hard limit needs CAP_SYS_RESOURCE and fails cleanly
    // without it; the soft limit may always rise to the hard one.
    if setrlimit(Resource::RLIMIT_NOFILE, want, want.max(hard)).is_err() {
        let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
    }
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The child: listeners, an accept counter per 10 ms of wall-clock time,
/// and a tiny protocol on stdin/stdout (`addr` lines, `READY`; then
/// `report FROM_MS TO_MS` answered with one line of counts).
fn serve(a: &Args) {
    raise_nofile(a.endpoints as u64 * 2 + 4096);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("bench-servers")
        .enable_all()
        .build()
        .expect("server runtime");
    let start_ms = unix_ms();
    let span_ms = (a.seconds + 60) * 1000 + a.interval.as_millis() as u64 * 10;
    let slots: Arc<Vec<AtomicU32>> =
        Arc::new((0..span_ms / 10 + 1).map(|_| AtomicU32::new(0)).collect());
    let mut out = std::io::stdout().lock();
    for i in 0..a.endpoints {
        let ip = Ipv4Addr::new(127, 0, 1, 1 + (i % 100) as u8);
        let listener = rt
            .block_on(TcpListener::bind(SocketAddr::new(IpAddr::V4(ip), 0)))
            .unwrap_or_else(|e| panic!("listener {i} on {ip}: {e}"));
        writeln!(out, "{}", listener.local_addr().expect("local addr")).expect("stdout");
        let slots = Arc::clone(&slots);
        let http = a.http;
        rt.spawn(async move {
            loop {
                let Ok((mut s, _)) = listener.accept().await else {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    continue;
                };
                let slot = (unix_ms().saturating_sub(start_ms) / 10) as usize;
                if let Some(c) = slots.get(slot) {
                    c.fetch_add(1, Ordering::Relaxed);
                }
                if !http {
                    continue; // dropped: the prober has reset it anyway
                }
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    let mut seen = 0;
                    while let Ok(n) = s.read(&mut buf[seen..]).await {
                        if n == 0 {
                            return;
                        }
                        seen += n;
                        if buf[..seen].windows(4).any(|w| w == b"\r\n\r\n") || seen == buf.len() {
                            break;
                        }
                    }
                    let _ = s
                        .write_all(
                            b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                        )
                        .await;
                    let _ = s.shutdown().await;
                });
            }
        });
    }
    writeln!(out, "READY").expect("stdout");
    out.flush().expect("stdout");
    drop(out);
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let f: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .filter_map(|x| x.parse().ok())
            .collect();
        if let [from, to] = f[..] {
            let lo = (from.saturating_sub(start_ms) / 10) as usize;
            let hi = (to.saturating_sub(start_ms) / 10) as usize;
            let counts: Vec<String> = (lo..hi.min(slots.len()))
                .map(|s| slots[s].load(Ordering::Relaxed).to_string())
                .collect();
            println!("{} {}", (start_ms / 10) as usize + lo, counts.join(" "));
        }
    }
}

/// Time a thread of this process spent waiting for a CPU while runnable
/// (schedstat's second field): how much the machine starved it.
fn thread_run_delay(tid: &str) -> Option<Duration> {
    let s = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).ok()?;
    let ns: u64 = s.split_whitespace().nth(1)?.parse().ok()?;
    Some(Duration::from_nanos(ns))
}

/// CPU time of a thread of this process: schedstat (ns), else stat (clock
/// ticks, assumed 100 Hz).
fn thread_cpu(tid: &str) -> Option<Duration> {
    if let Ok(s) = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")) {
        let ns: u64 = s.split_whitespace().next()?.parse().ok()?;
        return Some(Duration::from_nanos(ns));
    }
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
    // After the parenthesised command: utime and stime are the 12th and
    // 13th fields (14th and 15th of the line).
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks * 10))
}

fn find_thread(name: &str) -> Option<String> {
    std::fs::read_dir("/proc/self/task").ok()?.find_map(|e| {
        let e = e.ok()?;
        let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
        (comm.trim() == name).then(|| e.file_name().to_string_lossy().into_owned())
    })
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Mean, coefficient of variation, min, max.
fn stats(v: &[u64]) -> (f64, f64, u64, u64) {
    let n = v.len().max(1) as f64;
    let mean = v.iter().sum::<u64>() as f64 / n;
    let var = v.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / n;
    let lo = v.iter().copied().min().unwrap_or(0);
    let hi = v.iter().copied().max().unwrap_or(0);
    (mean, var.sqrt() / mean.max(f64::MIN_POSITIVE), lo, hi)
}

fn main() {
    let a = args();
    if a.serve {
        serve(&a);
        return;
    }
    raise_nofile(a.endpoints as u64 + 4096);
    let mode = if a.http { "HTTP" } else { "TCP" };

    let exe = std::env::current_exe().expect("current exe");
    let mut child_args = vec![
        "--serve".to_owned(),
        "--endpoints".to_owned(),
        a.endpoints.to_string(),
        "--seconds".to_owned(),
        a.seconds.to_string(),
        "--interval-ms".to_owned(),
        a.interval.as_millis().to_string(),
    ];
    if a.http {
        child_args.push("--http".to_owned());
    }
    let mut child = Command::new(exe)
        .args(&child_args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("server process");
    let mut to_child = child.stdin.take().expect("child stdin");
    let mut from_child = BufReader::new(child.stdout.take().expect("child stdout"));
    let mut addrs: Vec<SocketAddr> = Vec::with_capacity(a.endpoints);
    let mut line = String::new();
    loop {
        line.clear();
        if from_child.read_line(&mut line).expect("child output") == 0 {
            panic!("server process ended early");
        }
        let l = line.trim();
        if l == "READY" {
            break;
        }
        addrs.push(l.parse().expect("listener address"));
    }
    println!(
        "{} {mode} listeners on 127.0.1.1-127.0.1.{} (server process {})",
        addrs.len(),
        addrs.len().min(100),
        child.id()
    );

    let mut check = if a.http {
        Check::http("/healthz")
    } else {
        Check::tcp()
    };
    check.interval = a.interval;
    check.timeout = a.interval;
    let targets: Vec<Target> = addrs
        .iter()
        .enumerate()
        .map(|(i, &addr)| Target {
            endpoint: EndpointId(i as u32),
            service: Arc::from("bench"),
            addr,
            check: check.clone(),
            via: None,
        })
        .collect();
    let started = Instant::now();
    let checker = HealthChecker::start(targets).expect("checker");
    let tid = find_thread(THREAD_NAME).expect("health thread");

    // Warm-up: everyone healthy (two passes), at least two intervals.
    let deadline = started + a.interval * 10;
    loop {
        std::thread::sleep(Duration::from_millis(100));
        let s = checker.snapshot();
        let healthy = s
            .endpoints
            .iter()
            .filter(|e| e.state == State::Healthy)
            .count();
        if healthy == a.endpoints && started.elapsed() >= a.interval * 2 {
            println!(
                "all {healthy} HEALTHY after {:.2} s",
                started.elapsed().as_secs_f64()
            );
            break;
        }
        if Instant::now() > deadline {
            println!("warm-up: only {healthy}/{} HEALTHY", a.endpoints);
            break;
        }
    }

    // Measurement window.
    let window = Duration::from_secs(a.seconds);
    let cpu0 = thread_cpu(&tid).expect("thread CPU time");
    let wait0 = thread_run_delay(&tid).unwrap_or_default();
    let load0 = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let t0 = Instant::now();
    let from_ms = unix_ms();
    let first = checker.snapshot();
    let mut last: Vec<u64> = first
        .endpoints
        .iter()
        .map(|e| e.counters.probes())
        .collect();
    let mut last_failed: Vec<u64> = first
        .endpoints
        .iter()
        .map(|e| e.counters.probes_failed)
        .collect();
    let mut failures: BTreeMap<String, u64> = BTreeMap::new();
    let mut latencies = Vec::with_capacity(a.endpoints * a.seconds as usize);
    let mut missed = 0u64;
    let mut snapshot_time = Duration::ZERO;
    let mut snapshots = 0u32;
    while t0.elapsed() < window {
        std::thread::sleep(Duration::from_millis(250));
        let before = Instant::now();
        let snap = checker.snapshot();
        snapshot_time += before.elapsed();
        snapshots += 1;
        for (i, e) in snap.endpoints.iter().enumerate() {
            let f = e.counters.probes_failed;
            if f > last_failed[i] {
                *failures.entry(e.last_reason.clone()).or_default() += f - last_failed[i];
                last_failed[i] = f;
            }
            let p = e.counters.probes();
            let new = p - last[i];
            if new > 0 {
                if let Some(l) = e.last_latency {
                    latencies.push(l);
                }
                missed += new - 1;
                last[i] = p;
            }
        }
    }
    let elapsed = t0.elapsed();
    let cpu = thread_cpu(&tid)
        .expect("thread CPU time")
        .saturating_sub(cpu0);
    let waited = thread_run_delay(&tid)
        .unwrap_or_default()
        .saturating_sub(wait0);
    let to_ms = unix_ms();
    let end = checker.snapshot();
    let healthy = end
        .endpoints
        .iter()
        .filter(|e| e.state == State::Healthy)
        .count();
    checker.stop().expect("stop");

    // Accept counts from the server.
    writeln!(to_child, "report {from_ms} {to_ms}").expect("to child");
    line.clear();
    from_child.read_line(&mut line).expect("report");
    drop(to_child);
    let _ = child.wait();
    let mut fields = line
        .split_whitespace()
        .map(|x| x.parse::<u64>().unwrap_or(0));
    let first_slot = fields.next().unwrap_or(0);
    let per_10ms: Vec<u64> = fields.collect();

    latencies.sort_unstable();
    let n = latencies.len();
    let failed: u64 = failures.values().sum();
    println!(
        "window {:.1} s: {n} probes sampled ({:.0}/s), {missed} more not sampled, {failed} failed, {healthy}/{} HEALTHY at the end",
        elapsed.as_secs_f64(),
        (n as u64 + missed) as f64 / elapsed.as_secs_f64(),
        a.endpoints
    );
    if !failures.is_empty() {
        println!("failures by reason: {failures:?}");
    }
    println!(
        "health thread CPU: {:.3} s in {:.1} s = {:.1} % of one core ({:.1} µs per probe)",
        cpu.as_secs_f64(),
        elapsed.as_secs_f64(),
        100.0 * cpu.as_secs_f64() / elapsed.as_secs_f64(),
        cpu.as_secs_f64() * 1e6 / ((n as u64 + missed) as f64).max(1.0)
    );
    println!(
        "health thread waited {:.3} s for a CPU while runnable (machine load: {} at the start of the window)",
        waited.as_secs_f64(),
        load0
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!(
        "snapshot() of {} endpoints: {:?} on average",
        a.endpoints,
        snapshot_time / snapshots.max(1)
    );
    println!(
        "probe latency: p50 {:?}  p90 {:?}  p99 {:?}  max {:?}",
        percentile(&latencies, 0.50),
        percentile(&latencies, 0.90),
        percentile(&latencies, 0.99),
        latencies.last().copied().unwrap_or_default()
    );

    let interval_slots = (a.interval.as_millis() / 10).max(1) as usize;
    let mut phase = vec![0u64; interval_slots];
    for (k, &c) in per_10ms.iter().enumerate() {
        phase[(first_slot as usize + k) % interval_slots] += c;
    }
    let (mean, cv, lo, hi) = stats(&phase);
    println!(
        "spread: accepts by phase in the interval ({interval_slots} x 10 ms): mean {mean:.0}, min {lo}, max {hi}, CV {:.1} %",
        cv * 100.0
    );
    let (mean, cv, lo, hi) = stats(&per_10ms);
    println!(
        "        accepts per 10 ms of the window: mean {mean:.1}, min {lo}, max {hi}, CV {:.1} %",
        cv * 100.0
    );
    let per_100: Vec<u64> = per_10ms
        .chunks(10)
        .filter(|c| c.len() == 10)
        .map(|c| c.iter().sum())
        .collect();
    let (mean, cv, lo, hi) = stats(&per_100);
    println!(
        "        accepts per 100 ms of the window: mean {mean:.0}, min {lo}, max {hi}, CV {:.1} %",
        cv * 100.0
    );
}
