//! `spillway bird-config --config FILE`: print a bird.conf for this node's
//! `[bgp]` (M34): the BIRD that announces the VIPs Spillway decides.

use crate::output::out;
use std::path::PathBuf;

use anyhow::{Context, bail};

/// Arguments of `spillway bird-config`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The node's configuration file.
    #[arg(long)]
    pub config: PathBuf,
}

/// Prints the bird.conf to stdout.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let loaded = config::load(&args.config)
        .map_err(|e| anyhow::anyhow!("{e}"))
        .with_context(|| format!("loading {}", args.config.display()))?;
    let c = &loaded.compiled;
    let Some(bgp) = &c.settings.bgp else {
        bail!("{} has no [bgp] section", args.config.display());
    };
    if bgp.speaker != config::schema::BgpSpeaker::Bird {
        bail!(
            "{}: [bgp] speaker is not \"bird\" (docs/operating.md shows how to drive GoBGP or ExaBGP)",
            args.config.display()
        );
    }
    // Validation refused unsafe paths already; the writer checks again.
    let conf = control::bird::bird_conf(&c.node.name, bgp)
        .with_context(|| format!("writing a bird.conf for {}", args.config.display()))?;
    out!("{conf}");
    Ok(())
}
