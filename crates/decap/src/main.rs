//! `spillway-decap`: the backend-side decapsulator as a binary of its own,
//! for backend hosts that should not need DPDK (`spillway decap` is the same).

use std::io::Write as _;
use std::process::ExitCode;

use clap::Parser;

#[derive(Parser, Debug)]
#[command(
    name = "spillway-decap",
    version,
    about = "Deliver Spillway's GUE/GENEVE/IPIP/GRE tunnels from the balancers through a TUN device"
)]
struct Cli {
    #[command(flatten)]
    args: decap::daemon::Args,
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    match decap::daemon::run(&Cli::parse().args) {
        Ok(()) => ExitCode::SUCCESS,
        // The message, not a debug dump: this is what an operator reads.
        Err(e) => {
            // Not eprintln!, which panics when stderr is a closed pipe.
            let _ = writeln!(std::io::stderr(), "spillway-decap: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
