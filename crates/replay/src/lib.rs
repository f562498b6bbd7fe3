//! The engine of `spillway replay` (M40): a pcap pushed through the exact
//! data-plane pipeline offline, what it transmits written to a pcap.
//!
//! The snapshots come from the management core itself ([`control_core::Core`]),
//! as the daemon's do: region order, zonal affinity, spillover from the
//! rates the replayed traffic makes, capacity scalers, drains. The core runs
//! on the capture's clock (time 0 is the first packet; a management tick
//! every [`PERIOD`] of capture time, as the daemon ticks), its probers are
//! scripted ([`control_core::ScriptedProbes`]): every endpoint and remote rule
//! healthy unless the [`Script`] says otherwise (`--down` for the whole
//! capture, or from one second of it to another: a backend that fails or
//! joins mid-capture, as the health checker would report it). Flow cookies
//! come from a fixed seed. What is not modelled: real probe timing (a
//! verdict takes effect at the next tick, with no thresholds or intervals),
//! neighbour resolution (the configured MACs are used, and `--neighbour`'s
//! answers), and the workers' counter publication delay (the core reads the
//! pipeline's counters as they are).
//!
//! # Layout
//!
//! - [`run`] (here): a [`Replay`] in, a [`Summary`] (the lines `spillway
//!   replay` prints) or a [`ReplayError`] out; the loop that reads the
//!   capture, ticks the core between bursts and polls the pipeline. This
//!   crate prints nothing: the command line (`src/replay.rs`) does.
//! - [`script`]: what happens when (timed changes, `--down` windows), as
//!   plain data.
//! - `driver`: the management core stepped on the capture's clock, its
//!   probers scripted, the reloads handed in.
//! - `io`: the input's records, the packets as in-memory buffers, the port
//!   each frame arrives on, the pipeline's packet I/O writing the output.
//! - `summary`: the report; [`ReplayError`]: why a replay failed.

mod driver;
mod error;
mod io;
pub mod script;
mod summary;

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use config::schema::PortRole;
use dataplane::{BURST, Engine, Pipeline, Routes, Tick, VecBurst};
use flowtable::FlowTable;
use wire::ethernet::MacAddr;

use crate::driver::Mgmt;
use crate::io::{Capture, ReplayIo, arrival_port, arrival_ports};
use crate::summary::Tally;

pub use crate::error::ReplayError;
pub use crate::script::Script;
pub use crate::summary::Summary;

/// Capture time between management ticks: the daemon's period.
pub const PERIOD: Duration = control_core::TICK_PERIOD;

/// A replay to run: the configuration, the capture in and out, the script
/// of health and configuration changes, and the seeds.
#[derive(Debug, Clone)]
pub struct Replay {
    /// The configuration file.
    pub config: PathBuf,
    /// Packets to process (pcap, Ethernet).
    pub input: PathBuf,
    /// Where transmitted packets go (pcap), in processing order.
    pub output: PathBuf,
    /// The health and configuration changes.
    pub script: Script,
    /// Next hops that answer ARP/NDP at these MACs for the whole capture
    /// (`--neighbour`); one not named stays unresolved (M47).
    pub neighbours: Vec<(IpAddr, MacAddr)>,
    /// Seed of the flow-cookie generator (and of the flow table's
    /// placement, unless `placement_seed` gives that its own).
    pub seed: u64,
    /// Seed of the flow table's placement key alone.
    pub placement_seed: Option<u64>,
}

/// Runs `replay`: the whole capture through the pipeline, the output pcap
/// written; what happened as the lines `spillway replay` prints.
pub fn run(replay: &Replay) -> Result<Summary, ReplayError> {
    let loaded = config::load(&replay.config).map_err(ReplayError::Config)?;
    let events = driver::load_script(&replay.script, &loaded.compiled)?;
    let mut mgmt = Mgmt::start(replay, loaded.compiled, events)?;
    let compiled = mgmt.snap.compiled.clone();
    let capacity = compiled.settings.dataplane.flow_table_capacity;
    // A placement fixed by the seeds: the output depends on the input and
    // the seeds only, also where the table fills (a daemon's is random).
    let placement = replay.placement_seed.unwrap_or(replay.seed);
    let flows = FlowTable::new(flowtable::Config {
        placement: Some(flowtable::PlacementKey::fixed(placement, 0)),
        ..dataplane::flow_table_config(&compiled.settings.dataplane)
    })
    .map_err(|source| ReplayError::FlowTable { capacity, source })?;
    let worker = Pipeline::new(replay.seed, compiled.children.len());
    // The configured ports, plus an uplink when none is configured; a frame
    // arrives on the data port it is addressed to (`arrival_ports`), else
    // on the (first) uplink.
    let mut roles: Vec<PortRole> = compiled.settings.ports.iter().map(|p| p.role).collect();
    if !roles.contains(&PortRole::Uplink) {
        roles.push(PortRole::Uplink);
    }
    let routes = Routes::with_exceptions(&roles, &compiled.settings.exception_for);
    let mut engine = Engine::with_routes(worker, &roles, routes, BURST, || {
        VecBurst::with_capacity(BURST)
    });
    let uplink = engine.routes().uplink.unwrap_or(0);

    let mut capture = Capture::open(&replay.input)?;
    let arrival = arrival_ports(&roles, &mgmt.snap.local.port_macs);
    let mut io = ReplayIo::create(&replay.output, roles, uplink)?;

    let mut first_ts = None;
    let (mut seen, mut too_big, mut truncated) = (0u64, 0u64, 0u64);
    let mut tick = None;
    let mut last_packet = Duration::ZERO;
    loop {
        let pkt = capture.next(seen + 1).transpose()?;
        // Capture time since the first packet: the core's clock.
        let rel = pkt.as_ref().map(|p| {
            let start = *first_ts.get_or_insert(p.timestamp);
            p.timestamp.saturating_sub(start)
        });
        let pkt_tick = rel.map(|r| Tick::at(r).get());
        // A burst holds packets of one management period: the core ticks
        // (and may publish) between bursts, as it does between a DPDK
        // worker's polls.
        // A burst holds the frames of one port: a frame for another port
        // waits for the next (the order of the capture is kept).
        let port = pkt
            .as_ref()
            .map(|p| arrival_port(&arrival, uplink, &p.data));
        if !io.staged.is_empty()
            && (io.staged.len() == BURST
                || rel.is_none_or(|r| r >= mgmt.next_tick)
                || port.is_some_and(|p| p != io.staged_port))
        {
            engine.poll(&mut io, &mgmt.snap, &flows, tick.unwrap_or(0));
            if let Some(e) = io.error.take() {
                return Err(e);
            }
        }
        let (Some(pkt), Some(rel)) = (pkt, rel) else {
            break;
        };
        seen += 1;
        mgmt.advance(rel, last_packet, &flows, &engine.worker.counters);
        last_packet = rel;
        tick = pkt_tick;
        if pkt.truncated {
            // Only part of the frame was captured: nothing to forward.
            truncated += 1;
            continue;
        }
        if !io.stage(port.unwrap_or(uplink), pkt.timestamp, &pkt.data)? {
            too_big += 1;
        }
    }
    let written = io.written;
    // The output flushed and closed before the report.
    drop(io);

    let tally = Tally {
        seen,
        written,
        too_big,
        truncated,
        snaplen: capture.header().snaplen,
    };
    Ok(Summary::new(
        replay,
        &tally,
        &engine.worker.counters,
        &mgmt,
        uplink,
        &compiled,
    ))
}
