//! `spillway-decap`: the backend-side decapsulator as a binary of its own,
//! for backend hosts that should not need DPDK (`spillway decap` is the same).

use clap::Parser;

#[derive(Parser, Debug)]
#[command(
    name = "spillway-decap",
    version,
    about = "Deliver Spillway's GUE/GENEVE/IPIP/GRE tunnels through a TUN device"
)]
struct Cli {
    #[command(flatten)]
    args: decap::daemon::Args,
}

fn main() -> anyhow::Result<()> {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    decap::daemon::run(&Cli::parse().args)
}
