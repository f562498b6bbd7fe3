//! `packetset`: writes a packet set for the `perf/` harness.
//!
//! ```text
//! packetset --kind ack --flows 4096 --vip 198.18.10.10 --dport 80 --out ack-4096.pcap
//! packetset --kind syn --flows 65536 --shards 2 --out syn.pcap   # syn.0.pcap, syn.1.pcap
//! packetset --kind gateway --flows 4096 --out gateway-4096.pcap  # 1 + 2 x 4096 frames
//! packetset --kind synflood --flows 4096 --out synflood.pcap     # 48 x 4096 frames
//! ```

use std::fs::File;
use std::io::BufWriter;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Parser;
use packetset::{Kind, Spec};

/// Writes one minimum-size frame per flow, all to one VIP, as a pcap.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Packet kind: ack (established TCP), syn (TCP SYN), udp, v6 (IPv6 TCP
    /// ACK), churn (per flow a SYN, then later a RST: two packets per flow),
    /// gateway (the gateway endpoint's gratuitous ARP, then per flow a TCP
    /// ACK from a client to a server and later the server's ACK back, not
    /// to the VIP: gateway mode), synflood (per flow 16 rounds of its ACK,
    /// each followed by 2 SYNs from spoofed sources that never repeat in the
    /// set: 48 packets per flow).
    #[arg(long, value_enum)]
    kind: Kind,
    /// Distinct flows (one packet each; two for churn and gateway; for
    /// synflood the established flows).
    #[arg(long)]
    flows: u32,
    /// Destination address (default 198.18.10.10, or 2001:db8:18::10 for v6).
    #[arg(long)]
    vip: Option<IpAddr>,
    /// Destination port.
    #[arg(long, default_value_t = 80)]
    dport: u16,
    /// Split the flows round-robin over this many files, one per worker
    /// queue: OUT's stem gets `.0`, `.1`, ... before the extension.
    #[arg(long, default_value_t = 1)]
    shards: u32,
    /// The frames' destination MAC: the receiving port's (a Spillway port
    /// drops frames to any other unicast MAC). Default 02:00:00:00:00:01.
    #[arg(long)]
    dst_mac: Option<config::values::MacAddr>,
    /// The pcap to write.
    #[arg(long)]
    out: PathBuf,
}

/// `dir/name.pcap` -> `dir/name.{shard}.pcap`.
fn shard_path(out: &Path, shard: u32) -> PathBuf {
    let stem = out.file_stem().and_then(|s| s.to_str()).unwrap_or("set");
    let name = match out.extension().and_then(|e| e.to_str()) {
        Some(ext) => format!("{stem}.{shard}.{ext}"),
        None => format!("{stem}.{shard}"),
    };
    out.with_file_name(name)
}

fn main() -> Result<()> {
    let args = Args::parse();
    anyhow::ensure!(args.shards >= 1, "--shards must be at least 1");
    let vip = args.vip.unwrap_or_else(|| args.kind.default_vip());
    let mut spec = Spec::new(args.kind, args.flows, vip, args.dport)?;
    if let Some(mac) = args.dst_mac {
        spec.dst_mac = mac.0;
    }
    for shard in 0..args.shards {
        let path = if args.shards == 1 {
            args.out.clone()
        } else {
            shard_path(&args.out, shard)
        };
        let file = File::create(&path).with_context(|| format!("{}", path.display()))?;
        let n = spec
            .write_pcap(BufWriter::with_capacity(1 << 20, file), shard, args.shards)
            .with_context(|| format!("{}", path.display()))?;
        eprintln!(
            "packetset: {} packets of {} bytes ({:?} to {vip}:{}) -> {}",
            n,
            args.kind.frame_len(),
            args.kind,
            args.dport,
            path.display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_paths() {
        assert_eq!(
            shard_path(Path::new("/tmp/a/ack.pcap"), 1),
            Path::new("/tmp/a/ack.1.pcap")
        );
        assert_eq!(shard_path(Path::new("x"), 0), Path::new("x.0"));
    }
}
