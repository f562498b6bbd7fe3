//! `spillway replay`'s command line (M40): its options and the timed
//! changes read from their order (`--at TIME` followed by `--down`, `--up`,
//! `--remote`, `--reload`), handed to the replay engine (the `replay`
//! crate: a pcap through the exact data-plane pipeline offline, the
//! management core stepped on the capture's clock), whose summary is
//! printed here.

use crate::output::outln;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use ::replay::script::{Change, Down, Event, Script};
use anyhow::Result;
use control::scripted::State;

/// `spillway replay`'s arguments: the options as clap parses them, and the
/// timed changes (`--at T` followed by `--down`, `--up`, `--reload`) read
/// from their order on the command line.
#[derive(Debug)]
pub struct Args {
    opts: Opts,
    /// The changes at given capture times (ties: command-line order), and
    /// the `--down` options without a preceding `--at` (windows of whole
    /// seconds).
    script: Script,
}

#[derive(clap::Args, Debug)]
#[command(
    after_long_help = "Timed changes: `--at 2s --down 10.0.1.12 --at 5s --up 10.0.1.12 --at 3s --reload new.toml`. \
Each `--at TIME` (capture time since the first packet: 500ms, 2s, 1m30s) applies to the `--down`, `--up`, \
`--remote` and `--reload` options after it, up to the next `--at`. Health changes take effect at the next management tick \
(every 50 ms of capture time), as a prober's verdict would; a reload goes through the same validation as \
`spillway reload` (a rejected one leaves the running configuration, and the summary says why).\n\n\
Not modelled: real probe timing (intervals, thresholds, timeouts: a scripted verdict is the checker's \
verdict at once), ARP/NDP (a next hop without a static MAC stays unresolved: its packets are dropped as \
no_neighbour and its endpoints get no new flows, unless `--neighbour IP=MAC` says it answers, from the first \
tick on), remote rules' polling (a remote \
rule's state is what `--remote` says, HEALTHY unless told), and the delay before workers publish their counters (the core reads the \
pipeline's counters as they are at each tick)."
)]
struct Opts {
    /// The configuration file.
    #[arg(long, short)]
    config: PathBuf,
    /// Packets to process (pcap, Ethernet).
    #[arg(long, short)]
    input: PathBuf,
    /// Where transmitted packets go (pcap), in processing order.
    #[arg(long, short)]
    output: PathBuf,
    /// Treat this endpoint address as failing its health check
    /// (repeatable): for the whole capture, or with `@FROM` from second FROM
    /// of the capture on, or with `@FROM-UNTIL` from second FROM until
    /// second UNTIL (healthy again from then; `@0-20` joins at 20 s).
    /// Seconds count from the capture's first packet, as the clock does.
    /// After an `--at TIME`: failing from TIME on (no window then).
    #[arg(long, value_name = "ADDRESS[@FROM[-UNTIL]]", value_parser = parse_down)]
    down: Vec<Down>,
    /// After an `--at TIME`: this endpoint address passes its health check
    /// from TIME on (repeatable).
    #[arg(long, value_name = "ADDRESS")]
    up: Vec<IpAddr>,
    /// After an `--at TIME`: reload this configuration file at TIME, as
    /// `spillway reload` would (repeatable).
    #[arg(long, value_name = "FILE")]
    reload: Vec<PathBuf>,
    /// A remote rule's exported state as its peer answers it (`RULE` is
    /// the rule's name on the peer; HEALTHY, UNHEALTHY or UNKNOWN):
    /// for the whole capture, or after an `--at TIME` from TIME on
    /// (repeatable). Unscripted remote rules are HEALTHY.
    #[arg(long, value_name = "RULE=STATE", value_parser = parse_remote)]
    remote: Vec<(String, State)>,
    /// Capture time (since the first packet) of the `--down`, `--up`,
    /// `--remote` and `--reload` options that follow it.
    #[arg(long, value_name = "TIME")]
    at: Vec<config::values::Duration>,
    /// A next hop (gateway or endpoint without a static MAC) that answers
    /// ARP/NDP at this MAC for the whole capture (repeatable); a next hop
    /// not named stays unresolved (M47).
    #[arg(long, value_name = "IP=MAC", value_parser = parse_neighbour)]
    neighbour: Vec<(IpAddr, config::values::MacAddr)>,
    /// Seed of the flow-cookie generator (and of the flow table's
    /// placement, unless `--placement-seed` gives that its own).
    #[arg(long, default_value_t = 0x5350_494c_4c57_4159)]
    seed: u64,
    /// Seed of the flow table's placement key alone: two replays that
    /// differ only in `--seed` then fill the table alike, and only their
    /// cookies differ (perf/flood.sh tells an entry's packets by that).
    #[arg(long)]
    placement_seed: Option<u64>,
}

/// `--neighbour IP=MAC`.
fn parse_neighbour(s: &str) -> Result<(IpAddr, config::values::MacAddr), String> {
    let Some((ip, mac)) = s.split_once('=') else {
        return Err(format!("{s:?}: write IP=MAC"));
    };
    let ip: IpAddr = ip.parse().map_err(|e| format!("{ip:?}: {e}"))?;
    let mac: config::values::MacAddr = mac.parse().map_err(|e| format!("{mac:?}: {e}"))?;
    Ok((ip, mac))
}

/// `--remote RULE=STATE`.
fn parse_remote(s: &str) -> Result<(String, State), String> {
    let Some((rule, state)) = s.split_once('=') else {
        return Err(format!("{s:?}: write RULE=STATE"));
    };
    let state = match state.to_ascii_uppercase().as_str() {
        "HEALTHY" => State::Healthy,
        "UNHEALTHY" => State::Unhealthy,
        "UNKNOWN" => State::Unknown,
        _ => return Err(format!("{state:?}: HEALTHY, UNHEALTHY or UNKNOWN")),
    };
    if rule.is_empty() {
        return Err(format!("{s:?}: no rule name"));
    }
    Ok((rule.to_owned(), state))
}

impl clap::FromArgMatches for Args {
    fn from_arg_matches(m: &clap::ArgMatches) -> Result<Self, clap::Error> {
        let opts = Opts::from_arg_matches(m)?;
        let index = |id: &str| -> Vec<usize> {
            m.indices_of(id).map(Iterator::collect).unwrap_or_default()
        };
        // Every option in command-line order.
        let mut order: Vec<(usize, &str, usize)> = Vec::new();
        for id in ["at", "down", "up", "reload", "remote"] {
            order.extend(index(id).into_iter().enumerate().map(|(i, at)| (at, id, i)));
        }
        order.sort_unstable();
        let err = |msg: String| clap::Error::raw(clap::error::ErrorKind::ArgumentConflict, msg);
        let (mut events, mut windows, mut at) = (Vec::new(), Vec::new(), None);
        for (_, id, i) in order {
            let (when, what) = match (id, at) {
                ("at", _) => {
                    at = opts.at.get(i).map(|d| d.get());
                    continue;
                }
                ("down", None) => {
                    windows.extend(opts.down.get(i).cloned());
                    continue;
                }
                ("down", Some(t)) => {
                    let Some(d) = opts.down.get(i) else { continue };
                    if d.from != 0 || d.until.is_some() {
                        return Err(err(format!(
                            "--down {}@…: after --at, the time is --at's (no window)\n",
                            d.address
                        )));
                    }
                    (t, Change::Down(d.address))
                }
                ("up", Some(t)) => match opts.up.get(i) {
                    Some(a) => (t, Change::Up(*a)),
                    None => continue,
                },
                ("remote", t) => match opts.remote.get(i) {
                    Some((rule, state)) => (
                        t.unwrap_or(Duration::ZERO),
                        Change::Remote(rule.clone(), *state),
                    ),
                    None => continue,
                },
                ("reload", Some(t)) => match opts.reload.get(i) {
                    Some(p) => (t, Change::Reload(p.clone())),
                    None => continue,
                },
                (id, _) => return Err(err(format!("--{id} needs an --at TIME before it"))),
            };
            events.push(Event { at: when, what });
        }
        Ok(Args {
            opts,
            script: Script::new(events, windows),
        })
    }

    fn update_from_arg_matches(&mut self, m: &clap::ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
}

impl clap::Args for Args {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        Opts::augment_args(cmd)
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Opts::augment_args_for_update(cmd)
    }
}

/// `--down ADDRESS[@FROM[-UNTIL]]`.
fn parse_down(s: &str) -> Result<Down, String> {
    let (addr, window) = match s.split_once('@') {
        Some((a, w)) => (a, Some(w)),
        None => (s, None),
    };
    let address = addr
        .parse()
        .map_err(|_| format!("{addr:?} is not an IP address"))?;
    let second = |v: &str| {
        v.parse::<u32>()
            .map_err(|_| format!("{v:?} is not a whole number of seconds"))
    };
    let (from, until) = match window {
        None => (0, None),
        Some(w) => match w.split_once('-') {
            None => (second(w)?, None),
            Some((from, until)) => {
                let (from, until) = (second(from)?, second(until)?);
                if until <= from {
                    return Err(format!("UNTIL ({until}) must come after FROM ({from})"));
                }
                (from, Some(until))
            }
        },
    };
    Ok(Down {
        address,
        from,
        until,
    })
}

/// Runs the replay and prints its summary.
pub fn run(args: &Args) -> Result<()> {
    let o = &args.opts;
    let summary = ::replay::run(&::replay::Replay {
        config: o.config.clone(),
        input: o.input.clone(),
        output: o.output.clone(),
        script: args.script.clone(),
        neighbours: o.neighbour.iter().map(|(ip, mac)| (*ip, mac.0)).collect(),
        seed: o.seed,
        placement_seed: o.placement_seed,
    })?;
    for line in &summary.lines {
        outln!("{line}");
    }
    Ok(())
}
