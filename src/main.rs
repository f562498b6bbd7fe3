//! `spillway`: the L4 passthrough / GENEVE gateway load balancer.
//!
//! It parses the command line and wires the crates together; one command
//! keeps logic of its own here: `forward`'s port-to-port loop (`replay`'s
//! engine is the `replay` crate).

mod bird_config;
mod check_config;
mod forward;
mod output;
mod package_assets;
mod replay;
mod run;
mod telemetry;
mod zone_health;

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};
use control::socket::Request;
use output::errln;

#[derive(Parser, Debug)]
#[command(
    name = "spillway",
    about = "L4 passthrough load balancer and GENEVE gateway load balancer on DPDK",
    long_version = long_version(),
    version = env!("CARGO_PKG_VERSION"),
    propagate_version = true
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the load balancer daemon.
    Run(run::Args),
    /// Validate a configuration file and print a summary (like `nginx -t`).
    CheckConfig(check_config::Args),
    /// Push a pcap through the exact data-plane pipeline offline and write
    /// the transmitted packets to a pcap.
    Replay(replay::Args),
    /// Show a running daemon's state (over its control socket).
    Status(run::ClientArgs),
    /// Show a running daemon's counters, with rates.
    Stats(run::StatsArgs),
    /// List a running daemon's flow-table entries.
    Flows(run::FlowsArgs),
    /// Ask a running daemon which rule, service and backend a flow would
    /// take, and why (nothing is forwarded or recorded).
    Simulate(run::SimulateArgs),
    /// Trace a running daemon's decisions for the packets a filter takes:
    /// rule, service, backend, flow entry, delivery or drop reason, each
    /// packet as it arrives, until a count or a time.
    Trace(run::TraceArgs),
    /// Make a running daemon reload its configuration.
    Reload(run::ReloadArgs),
    /// Drain this node (its VIPs withdrawn), or a zone or region (no new
    /// connections to its backends; established ones stay) (M37).
    Drain(run::DrainArgs),
    /// Undo `spillway drain`.
    Undrain(run::DrainArgs),
    /// Print a bird.conf for this node's `[bgp]`: the BIRD that announces
    /// the VIPs (--config FILE).
    BirdConfig(bird_config::Args),
    /// Backend side: deliver GUE/GENEVE/IPIP/GRE tunnels from the balancers
    /// (--allow-source) to the VIPs (--vip) through a TUN device.
    Decap(decap::daemon::Args),
    /// Reference network virtual appliance: return gateway GENEVE packets
    /// (--listen), optionally logging, filtering (--drop) or tampering.
    Nva(nva::daemon::Args),
    /// Zone health service (multi-zone DNS failover): probe every zone's
    /// VIPs and publish the healthy zones' VIPs on an authoritative DNS
    /// server (--config FILE); or talk to it (status, remove, restore).
    ZoneHealth(zone_health::Args),
    /// Forward frames from one DPDK port to another and report what happened
    /// (bring-up check for DPDK, drivers and hugepages on this host).
    Forward(forward::Args),
    /// Write the man pages and shell completions of this command line
    /// (scripts/package.sh puts them into the Debian package).
    #[command(hide = true)]
    PackageAssets(package_assets::Args),
}

fn long_version() -> String {
    format!(
        "{} (commit {}; linked against {})",
        env!("CARGO_PKG_VERSION"),
        env!("SPILLWAY_COMMIT"),
        dpdk::version()
    )
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let cli = Cli::parse();
    // Whatever the command did, output lost to a write error (not a reader
    // that went away) makes it fail (`output`).
    output::exit_code(dispatch(cli.command))
}

fn dispatch(command: Command) -> ExitCode {
    let result = match command {
        Command::Forward(args) => forward::run(&args),
        Command::Decap(args) => decap::daemon::run(&args),
        Command::Nva(args) => nva::daemon::run(&args),
        Command::Run(args) => run::run(&args),
        Command::CheckConfig(args) => return check_config::run(&args),
        Command::Replay(args) => replay::run(&args),
        Command::Status(args) => {
            return run::client_exit(args.json, run::client(&Request::Status, &args));
        }
        Command::Stats(args) => return run::client_exit(args.daemon.json, run::stats(&args)),
        Command::Flows(args) => return run::client_exit(args.daemon.json, run::flows(&args)),
        Command::Simulate(args) => {
            return run::client_exit(args.daemon.json, run::simulate(&args));
        }
        Command::Trace(args) => {
            return run::client_exit(args.daemon.json, run::trace(&args));
        }
        Command::Reload(args) => {
            let request = Request::Reload { force: args.force };
            return run::client_exit(args.client.json, run::client(&request, &args.client));
        }
        Command::Drain(args) => return run::client_exit(args.daemon.json, run::drain(true, &args)),
        Command::Undrain(args) => {
            return run::client_exit(args.daemon.json, run::drain(false, &args));
        }
        Command::BirdConfig(args) => bird_config::run(&args),
        Command::ZoneHealth(args) => return zone_health::run(&args),
        Command::PackageAssets(args) => package_assets::run(&args, Cli::command()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            errln!("spillway: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
