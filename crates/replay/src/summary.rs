//! What a replay reports ([`Summary`]): the lines `spillway replay` prints,
//! from what came in and went out, the pipeline's counters and what the
//! management core did.

use config::compiled::Compiled;
use dataplane::counters::{Text, line};
use dataplane::{ChildCounters, DropReason, WorkerCounters};

use crate::Replay;
use crate::driver::Mgmt;
use crate::io::MAX_PACKET;

/// A replay's report, as the lines `spillway replay` prints (without line
/// ends).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    /// The lines, in order.
    pub lines: Vec<String>,
}

/// The packets of a replay, counted.
pub(crate) struct Tally {
    /// Records read.
    pub(crate) seen: u64,
    /// Frames written to the output.
    pub(crate) written: u64,
    /// Records larger than [`MAX_PACKET`], skipped.
    pub(crate) too_big: u64,
    /// Records truncated by the capture, skipped.
    pub(crate) truncated: u64,
    /// The input's snaplen.
    pub(crate) snaplen: u32,
}

impl Summary {
    /// The summary of `replay`: `tally`, the pipeline's counters `c`, what
    /// the core did (`mgmt`), the rules of `compiled`; `uplink` is the port
    /// frames arrive on when no port's MAC names them.
    pub(crate) fn new(
        replay: &Replay,
        tally: &Tally,
        c: &WorkerCounters,
        mgmt: &Mgmt,
        uplink: usize,
        compiled: &Compiled,
    ) -> Summary {
        let mut lines = Vec::new();
        let Tally {
            seen,
            written,
            too_big,
            truncated,
            snaplen,
        } = *tally;
        lines.push(format!(
            "{}: {seen} packets in, {written} out to {}",
            replay.input.display(),
            replay.output.display()
        ));
        lines.push(format!(
            "{}, dropped {}{}",
            line(c, WorkerCounters::TRAFFIC, Text::Replay),
            c.total_drops(),
            if too_big > 0 {
                format!(", {too_big} larger than {MAX_PACKET} bytes skipped")
            } else {
                String::new()
            }
        ));
        for change in &mgmt.health_changes {
            lines.push(format!("health: {change}"));
        }
        for l in mgmt.logs() {
            lines.push(format!("core: {l}"));
        }
        if truncated > 0 {
            lines.push(format!(
                "{truncated} truncated by the capture (snaplen {snaplen}) skipped"
            ));
        }
        lines.push(format!(
            "flows: {}",
            line(c, WorkerCounters::FLOWS, Text::Replay)
        ));
        if c.decap_ipip + c.decap_gre + c.decap_gue + c.decap_geneve > 0 {
            lines.push(format!(
                "tunnels: decapsulated ipip {}, gre {}, gue {}, geneve {}",
                c.decap_ipip, c.decap_gre, c.decap_gue, c.decap_geneve
            ));
        }
        for r in DropReason::ALL {
            if c.dropped(r) > 0 {
                lines.push(format!("  drop {}: {}", r.name(), c.dropped(r)));
            }
        }
        if c.dropped(DropReason::L2ForeignDst) > 0 {
            // Replay has no device to ask for the uplink's MAC (M55).
            let local = &mgmt.snap.local;
            let mac = local.port_macs.get(uplink).copied().unwrap_or(local.mac);
            lines.push(format!(
                "  (frames to another MAC than the uplink's, {}: give the uplink the capture's destination MAC as its `mac`)",
                mac.map(|b| format!("{b:02x}")).join(":")
            ));
        }
        for (child, cc) in compiled.children.iter().zip(&c.children) {
            if cc.packets > 0 {
                lines.push(format!(
                    "  rule {}:{}",
                    child.name,
                    line(cc, ChildCounters::ALL, Text::Replay)
                ));
            }
        }
        Summary { lines }
    }
}
