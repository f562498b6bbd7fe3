//! One management tick, in the one order every driver of the core runs it
//! ([`Core::step`]), and the one drain of the core's outputs into its shell
//! ([`Core::carry_out`]). The daemon, `spillway replay` and the simulation
//! differ in their [`Shell`] and in where their inputs come from, never in
//! what a tick does first.

use std::net::IpAddr;
use std::time::Duration;

use dataplane::WorkerCounters;
use dataplane::sync::SyncQueue;
use flowtable::{FlowTable, SweepStats};

use super::{Core, Output};
use crate::ports::Shell;

/// Buckets of the flow table aged per management tick: bounded so that a
/// tick stays short, large enough that a table of millions of buckets is
/// swept in well under its shortest timeout.
pub const SWEEP_BUDGET: usize = 1 << 14;

/// What a management tick takes besides time and what the shell's probers
/// say.
pub struct Inputs<'a> {
    /// The flow table, a slice of which each tick ages; flow sync reads and
    /// writes it.
    pub flows: &'a FlowTable,
    /// Neighbours workers saw since the last tick (M47): port, address, MAC.
    pub sightings: Vec<(usize, IpAddr, wire::ethernet::MacAddr)>,
    /// VRRP advertisements workers handed over since the last tick: port,
    /// frame.
    pub vrrp: Vec<(usize, Vec<u8>)>,
    /// The workers' counters summed, asked for only when plans are
    /// recomputed.
    pub counters: &'a dyn Fn() -> WorkerCounters,
    /// The workers' new entries for flow-state sync (M36), with
    /// `[flow_sync]`; the shell's received datagrams are read then.
    pub sync_queue: Option<&'a SyncQueue>,
}

/// What the flow table's ageing counted, for `stats` and `/metrics`.
#[derive(Debug, Default, Clone, Copy)]
pub struct Ageing {
    /// Entries expired since the start.
    pub expired: usize,
    /// Live and half-open entries counted by the pass in progress so far.
    live: usize,
    half_open: usize,
    /// The last full pass's live and half-open entries (a slice a tick,
    /// so that `/metrics` need not scan the table).
    pub last_pass: Option<(usize, usize)>,
}

impl Ageing {
    fn add(&mut self, s: &SweepStats) {
        self.expired += s.expired;
        self.live += s.live;
        self.half_open += s.half_open;
        if s.wrapped {
            self.last_pass = Some((self.live, self.half_open));
            (self.live, self.half_open) = (0, 0);
        }
    }
}

impl Core {
    /// One management tick at `now`, in this order: a slice of the flow
    /// table aged; the probers' health and remote verdicts in; the
    /// neighbours workers saw; the VRRP advertisements they handed over;
    /// the periodic work (draining backends retired, plans, neighbours,
    /// VRRP timers, the VIPs' announcement); the
    /// peers' flow-sync datagrams in and the workers' new entries out; then
    /// every output carried out.
    pub fn step(&mut self, now: Duration, inputs: Inputs<'_>, shell: &mut dyn Shell) {
        self.advance(now);
        let swept = inputs.flows.sweep(self.tick_now().get(), SWEEP_BUDGET);
        self.ageing.add(&swept);
        let probes = shell.probes();
        if let Some(h) = probes.verdicts_since(self.health_generation()) {
            self.health(now, h);
        }
        self.remote_verdicts(now, |k| probes.remote_verdict(k));
        if !inputs.sightings.is_empty() {
            self.sightings(now, inputs.sightings);
        }
        if !inputs.vrrp.is_empty() {
            self.vrrp_frames(now, inputs.vrrp);
        }
        self.tick(now, inputs.counters);
        if let Some(queue) = inputs.sync_queue {
            let flows = inputs.flows;
            shell.sync_receive(now, &mut |from, d| {
                self.sync_received(now, from, d, flows);
            });
            self.flow_sync(now, queue, flows);
        }
        self.carry_out(shell);
    }

    /// Hands every output to `shell`, in order, until none is left:
    /// carrying one out may give the core an input (tables built at once, a
    /// build that could not start) that asks for more. What a driver runs
    /// after every input it gives the core outside [`Core::step`].
    pub fn carry_out(&mut self, shell: &mut dyn Shell) {
        loop {
            let outs = std::mem::take(&mut self.out);
            if outs.is_empty() {
                return;
            }
            for out in outs {
                match out {
                    Output::Publish(s) => shell.publish(s),
                    Output::BuildTables { build, tables } => {
                        if let Some(built) = shell.build_tables(build, tables) {
                            self.tables_built(self.now, build, built, shell.probes());
                        }
                    }
                    Output::Watch(on) => shell.watch(on),
                    Output::Transmit { port, frame } => shell.transmit(port, frame),
                    Output::SyncSend { to, datagram } => shell.sync_send(to, datagram),
                    Output::Announce(desired, routes) => shell.announce(desired, routes),
                    Output::Log {
                        level,
                        target,
                        text,
                    } => shell.log(self.now, level, target, text),
                }
            }
        }
    }

    /// What the flow table's ageing counted so far.
    pub fn ageing(&self) -> &Ageing {
        &self.ageing
    }
}
