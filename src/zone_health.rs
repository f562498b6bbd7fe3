//! `spillway zone-health`: the zone health service (M51), and the commands
//! that talk to it over its control socket.

use crate::output::{err, errln, out, outln};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use zonehealth::Settings;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The zone health configuration file (docs/zones.md;
    /// config/zone-health.toml explains every field).
    #[arg(long, short, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The running service's control socket (default: the file's
    /// `[control] socket`).
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<ZoneCommand>,
}

#[derive(clap::Subcommand, Debug)]
enum ZoneCommand {
    /// Zones, VIPs, their last probes, the published records, the last
    /// update and error.
    Status {
        /// One JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Withdraw a zone's records now and stop probing it, until restored
    /// (recorded in the DNS zone: survives restarts, every instance sees
    /// it, fail-open never re-adds it).
    Remove {
        /// The zone's name.
        zone: String,
        /// Even if it is the last zone published.
        #[arg(long)]
        force: bool,
    },
    /// Undo `remove`: the zone is probed again and its records return once
    /// its VIPs pass.
    Restore {
        /// The zone's name.
        zone: String,
    },
    /// The service's counters and states, OpenMetrics text.
    Metrics,
    /// Check the configuration file and print what it says.
    Check,
}

/// Runs the service (no command) or one command.
pub fn run(args: &Args) -> ExitCode {
    let json = matches!(args.command, Some(ZoneCommand::Status { json: true }));
    match dispatch(args) {
        Ok(code) => code,
        Err(e) if json => {
            out!("{}", control::report::json_error(&format!("{e:#}")));
            ExitCode::FAILURE
        }
        Err(e) => {
            errln!("spillway: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn load(args: &Args) -> Result<Settings> {
    let Some(path) = &args.config else {
        bail!("--config FILE is needed");
    };
    Settings::load(path).map_err(|e| anyhow::anyhow!("{e}"))
}

fn dispatch(args: &Args) -> Result<ExitCode> {
    let command = match &args.command {
        None => {
            let settings = load(args)?;
            zonehealth::run(settings).context("zone-health")?;
            return Ok(ExitCode::SUCCESS);
        }
        Some(ZoneCommand::Check) => {
            let s = load(args)?;
            outln!(
                "{}: ok; publishing {} in zone {} on {} (TTL {} s, key {})",
                args.config
                    .as_ref()
                    .map_or(String::new(), |p| p.display().to_string()),
                s.name,
                s.zone,
                s.server,
                s.ttl,
                s.key.name()
            );
            for z in &s.zones {
                let vips: Vec<String> = z.vips.iter().map(ToString::to_string).collect();
                outln!("zone {}: {}", z.name, vips.join(", "));
            }
            return Ok(ExitCode::SUCCESS);
        }
        Some(ZoneCommand::Status { json: true }) => "status json".to_owned(),
        Some(ZoneCommand::Status { json: false }) => "status".to_owned(),
        Some(ZoneCommand::Metrics) => "metrics".to_owned(),
        Some(ZoneCommand::Remove { zone, force }) => {
            format!(
                "remove {}{}",
                word(zone)?,
                if *force { " force" } else { "" }
            )
        }
        Some(ZoneCommand::Restore { zone }) => format!("restore {}", word(zone)?),
    };
    let socket = match (&args.socket, &args.config) {
        (Some(s), _) => s.clone(),
        (None, Some(_)) => load(args)?.socket,
        (None, None) => PathBuf::from(zonehealth::config::DEFAULT_SOCKET),
    };
    let (ok, text) = control::socket::request(&socket, &command)
        .with_context(|| format!("zone-health control socket {}", socket.display()))?;
    if ok {
        out!("{text}");
        Ok(ExitCode::SUCCESS)
    } else {
        err!("{text}");
        Ok(ExitCode::FAILURE)
    }
}

/// A zone name as one word of the command line.
fn word(zone: &str) -> Result<&str> {
    if zone.is_empty() || zone.contains(char::is_whitespace) {
        bail!("{zone:?} is not a zone name");
    }
    Ok(zone)
}
