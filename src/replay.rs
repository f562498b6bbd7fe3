//! `spillway replay`: push a pcap through the exact data-plane pipeline
//! offline and write what it transmits to a pcap (SPEC M40).
//!
//! Deterministic: the clock is the packets' own timestamps (one tick per
//! second since the first packet), flow cookies come from a fixed seed, and
//! every endpoint counts as healthy unless `--down` says otherwise.

use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use dataplane::{DropReason, EndpointHealth, Local, SnapshotBuilder, Verdict, Worker};
use flowtable::FlowTable;
use pcap_file::pcap::{PcapPacket, PcapReader, PcapWriter};
use wire::buf::{MemBuf, PacketBuf};

/// Headroom in front of each packet, as DPDK mbufs have.
const HEADROOM: usize = 128;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The configuration file.
    #[arg(long, short)]
    config: PathBuf,
    /// Packets to process (pcap, Ethernet).
    #[arg(long, short)]
    input: PathBuf,
    /// Where transmitted packets go (pcap), in processing order.
    #[arg(long, short)]
    output: PathBuf,
    /// Treat this endpoint address as failing its health check (repeatable).
    #[arg(long, value_name = "ADDRESS")]
    down: Vec<IpAddr>,
    /// Seed of the flow-cookie generator.
    #[arg(long, default_value_t = 0x5350_494c_4c57_4159)]
    seed: u64,
}

pub fn run(args: &Args) -> Result<()> {
    let loaded = config::load(&args.config).map_err(|e| anyhow::anyhow!("{e}"))?;
    let compiled = Arc::new(loaded.compiled);
    for d in &args.down {
        if !compiled.endpoints.iter().any(|e| e.address == *d) {
            bail!("--down {d}: no endpoint has that address");
        }
    }
    let local = Local::from_config(&compiled, |_| None);
    let down = args.down.clone();
    let c2 = compiled.clone();
    let snap = SnapshotBuilder::new()
        .build(
            compiled.clone(),
            local,
            move |id| EndpointHealth {
                healthy: c2
                    .endpoints
                    .get(id.index())
                    .is_none_or(|e| !down.contains(&e.address)),
                weight: None,
            },
            0,
            1,
        )
        .context("building the snapshot")?;
    let capacity = compiled.settings.dataplane.flow_table_capacity;
    let flows = FlowTable::new(dataplane::flow_table_config(&compiled.settings.dataplane))
        .with_context(|| format!("flow table of {capacity} entries"))?;
    let mut worker = Worker::new(args.seed, compiled.children.len());

    let input =
        File::open(&args.input).with_context(|| format!("opening {}", args.input.display()))?;
    let mut reader = PcapReader::new(BufReader::new(input))
        .with_context(|| format!("{}: not a pcap file", args.input.display()))?;
    let output = File::create(&args.output)
        .with_context(|| format!("creating {}", args.output.display()))?;
    let mut writer = PcapWriter::new(BufWriter::new(output))?;

    let mut first_ts = None;
    let mut buf = MemBuf::new([0u8; HEADROOM + 65536], HEADROOM, &[])?;
    let (mut seen, mut written, mut too_big) = (0u64, 0u64, 0u64);
    while let Some(pkt) = reader.next_packet() {
        let pkt = pkt.with_context(|| format!("{}: packet {}", args.input.display(), seen + 1))?;
        seen += 1;
        let start = *first_ts.get_or_insert(pkt.timestamp);
        let now = u32::try_from(pkt.timestamp.saturating_sub(start).as_secs()).unwrap_or(u32::MAX);
        if buf.reset(HEADROOM, &pkt.data).is_err() {
            too_big += 1;
            continue;
        }
        match worker.process(&snap, &flows, now, &mut buf) {
            Verdict::Forward | Verdict::Reply => {
                let data = buf.data();
                writer.write_packet(&PcapPacket::new(pkt.timestamp, data.len() as u32, data))?;
                written += 1;
            }
            Verdict::ToHost | Verdict::Drop(_) => {}
        }
    }
    drop(writer);

    let c = &worker.counters;
    println!(
        "{}: {seen} packets in, {written} out to {}",
        args.input.display(),
        args.output.display()
    );
    println!(
        "forwarded {}, ARP replies {}, to host {}, dropped {}{}",
        c.forwarded,
        c.arp_replies,
        c.to_host,
        c.total_drops(),
        if too_big > 0 {
            format!(", {too_big} larger than 64 KiB skipped")
        } else {
            String::new()
        }
    );
    println!(
        "flows: {} new, {} hits, {} rescheduled, {} stateless (table full)",
        c.new_flows, c.flow_hits, c.flows_rescheduled, c.stateless
    );
    for r in DropReason::ALL {
        if c.dropped(r) > 0 {
            println!("  drop {}: {}", r.name(), c.dropped(r));
        }
    }
    for (child, cc) in compiled.children.iter().zip(&c.children) {
        if cc.packets > 0 {
            println!(
                "  rule {}: {} packets, {} bytes, {} new flows, {} drops",
                child.name, cc.packets, cc.bytes, cc.new_flows, cc.drops
            );
        }
    }
    Ok(())
}
