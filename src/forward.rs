//! `spillway forward`: plain port-to-port forwarding on DPDK.
//!
//! The first thing to run on a new host: it proves that EAL starts, memory
//! (hugepages or `--no-huge`) works, the drivers probe, and packets move,
//! and it reports exactly what happened — counts, device counters, drops,
//! mempool balance and cycles per packet.

use crate::output::outln;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use dpdk::{Eal, MbufBurst, Mempool, MempoolConfig, Port, PortConfig};

const BURST: usize = 32;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Port to receive from: DPDK device name (e.g. net_pcap0) or number.
    #[arg(long, default_value = "0")]
    rx: String,
    /// Port to transmit on: device name or number (may equal --rx).
    #[arg(long, default_value = "1")]
    tx: String,
    /// Stop after forwarding this many packets.
    #[arg(long)]
    count: Option<u64>,
    /// Stop once no packet has arrived for this many milliseconds.
    #[arg(long, default_value_t = 500)]
    idle_ms: u64,
    /// Stop after this many seconds in any case.
    #[arg(long, default_value_t = 30)]
    max_seconds: u64,
    /// Mbufs in the packet pool.
    #[arg(long, default_value_t = 8191)]
    mbufs: u32,
    /// EAL arguments, after `--` (e.g. `-- -l 0 --in-memory --vdev=net_ring0`).
    #[arg(last = true)]
    eal: Vec<String>,
}

#[derive(Debug, Default)]
struct Counters {
    rx: u64,
    rx_bytes: u64,
    tx: u64,
    tx_dropped: u64,
    bursts: u64,
    busy_cycles: u64,
}

pub fn run(args: &Args) -> Result<()> {
    let eal = Eal::init(args.eal.iter().cloned()).context("cannot start DPDK")?;
    let rx_id = Port::find(eal, &args.rx).context("--rx")?;
    let tx_id = Port::find(eal, &args.tx).context("--tx")?;
    let pool = Mempool::new(eal, &MempoolConfig::new("spillway_fwd", args.mbufs))
        .context("cannot create the packet pool (too few hugepages? try --no-huge)")?;
    let start_in_use = pool.in_use();

    let cfg = PortConfig::default();
    let mut rx_port =
        Port::configure(eal, rx_id, &cfg, &pool).context("configuring the RX port")?;
    let mut tx_port = if tx_id == rx_id {
        None
    } else {
        Some(Port::configure(eal, tx_id, &cfg, &pool).context("configuring the TX port")?)
    };
    rx_port.start()?;
    if let Some(p) = tx_port.as_mut() {
        p.start()?;
    }
    let tx_ref = tx_port.as_ref().unwrap_or(&rx_port);
    outln!(
        "spillway forward: {} ({}, {}) -> {} ({}, {}); {}; burst {BURST}",
        rx_port.name(),
        rx_port.driver(),
        mac_str(rx_port.mac()),
        tx_ref.name(),
        tx_ref.driver(),
        mac_str(tx_ref.mac()),
        dpdk::version(),
    );

    let counters = forward_loop(&rx_port, tx_ref, args)?;

    let rx_stats = rx_port.stats()?;
    let tx_stats = tx_ref.stats()?;
    let secs = counters.elapsed.as_secs_f64();
    outln!(
        "forwarded {} of {} packets ({} bytes) in {:.3} s: {:.3} Mpps; {} dropped at TX (device full)",
        counters.c.tx,
        counters.c.rx,
        counters.c.rx_bytes,
        secs,
        if secs > 0.0 {
            counters.c.tx as f64 / secs / 1e6
        } else {
            0.0
        },
        counters.c.tx_dropped,
    );
    if counters.c.rx > 0 {
        outln!(
            "busy cycles per packet: {:.1} over {} bursts (TSC {} MHz)",
            counters.c.busy_cycles as f64 / counters.c.rx as f64,
            counters.c.bursts,
            dpdk::tsc_hz(eal) / 1_000_000
        );
    }
    outln!(
        "rx port {}: rx {} pkts / {} bytes, missed {}, errors {}, no-mbuf {}",
        rx_port.name(),
        rx_stats.rx_packets,
        rx_stats.rx_bytes,
        rx_stats.rx_missed,
        rx_stats.rx_errors,
        rx_stats.rx_nombuf
    );
    outln!(
        "tx port {}: tx {} pkts / {} bytes, errors {}",
        tx_ref.name(),
        tx_stats.tx_packets,
        tx_stats.tx_bytes,
        tx_stats.tx_errors
    );
    // Closing the ports flushes file-backed devices (net_pcap writes its
    // output file on close) and returns queued mbufs to the pool.
    drop(tx_port);
    drop(rx_port);
    let end_in_use = pool.in_use();
    outln!(
        "mempool {}: {} mbufs in use before, {} after",
        pool.name(),
        start_in_use,
        end_in_use
    );
    if end_in_use != start_in_use {
        bail!(
            "{} mbufs did not come back to the pool",
            end_in_use.abs_diff(start_in_use)
        );
    }
    Ok(())
}

struct Outcome {
    c: Counters,
    elapsed: Duration,
}

fn forward_loop(rx_port: &Port, tx_port: &Port, args: &Args) -> Result<Outcome> {
    let Some(mut rxq) = rx_port.rx_queue(0) else {
        bail!("RX queue 0 of {} is in use", rx_port.name())
    };
    let Some(mut txq) = tx_port.tx_queue(0) else {
        bail!("TX queue 0 of {} is in use", tx_port.name())
    };
    let mut c = Counters::default();
    let mut burst = MbufBurst::<BURST>::new();
    let idle = Duration::from_millis(args.idle_ms);
    let started = Instant::now();
    let deadline = started + Duration::from_secs(args.max_seconds);
    let mut last_rx = started;
    let mut first_rx = None;
    loop {
        let t0 = dpdk::tsc();
        let n = rxq.rx_burst(&mut burst);
        if n > 0 {
            c.rx += n as u64;
            c.rx_bytes += burst
                .as_slice()
                .iter()
                .map(|m| m.pkt_len() as u64)
                .sum::<u64>();
            let (sent, dropped) = txq.tx_burst_or_drop(&mut burst);
            c.tx += sent as u64;
            c.tx_dropped += dropped as u64;
            c.bursts += 1;
            c.busy_cycles += dpdk::tsc().wrapping_sub(t0);
            last_rx = Instant::now();
            first_rx.get_or_insert(last_rx);
            if args.count.is_some_and(|limit| c.rx >= limit) {
                break;
            }
        } else {
            // Only look at the clock when idle: no syscall per busy burst.
            let now = Instant::now();
            if now >= deadline || (first_rx.is_some() && now.duration_since(last_rx) >= idle) {
                break;
            }
            if first_rx.is_none() && now.duration_since(started) >= idle.max(Duration::from_secs(5))
            {
                break;
            }
        }
    }
    let elapsed = first_rx.map_or(Duration::ZERO, |f| last_rx.duration_since(f));
    Ok(Outcome { c, elapsed })
}

fn mac_str(mac: [u8; 6]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}
