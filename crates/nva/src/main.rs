//! `spillway-nva`: the reference appliance as a binary of its own, for
//! appliance hosts that should not need DPDK (`spillway nva` is the same).

use std::io::Write as _;
use std::process::ExitCode;

use clap::Parser;

#[derive(Parser, Debug)]
#[command(
    name = "spillway-nva",
    version,
    about = "Return Spillway's gateway GENEVE packets as a network virtual appliance would"
)]
struct Cli {
    #[command(flatten)]
    args: nva::daemon::Args,
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    match nva::daemon::run(&Cli::parse().args) {
        Ok(()) => ExitCode::SUCCESS,
        // The message, not a debug dump: this is what an operator reads.
        Err(e) => {
            // Not eprintln!, which panics when stderr is a closed pipe.
            let _ = writeln!(std::io::stderr(), "spillway-nva: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
