//! `spillway check-config FILE`: validate a configuration like `nginx -t`.
//!
//! It runs exactly what the daemon runs on start and reload
//! (`config::load`), so a file that passes here loads there on this machine.

use crate::output::{errln, out, outln};
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `spillway check-config`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The configuration file.
    pub file: PathBuf,
}

/// Prints a summary and exits 0, or prints every error and exits 1.
pub fn run(args: &Args) -> ExitCode {
    match config::load(&args.file) {
        Ok(loaded) => {
            outln!("{}: configuration is valid", args.file.display());
            out!("{}", loaded.summary());
            ExitCode::SUCCESS
        }
        Err(errors) => {
            errln!("{errors}");
            let n = errors.errors.len();
            errln!(
                "{}: {n} error{}; configuration rejected",
                args.file.display(),
                if n == 1 { "" } else { "s" }
            );
            ExitCode::FAILURE
        }
    }
}
