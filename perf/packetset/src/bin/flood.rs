//! `flood`: the flood figures of `perf/flood.sh` (M15). For each flood
//! kind and rate it writes a capture of real TCP connections among spoofed
//! new flows (`packetset::flood`), replays it through `spillway replay` with
//! the flood defences on (the defaults) and off, twice each with different
//! cookie seeds, and prints what happened to the real connections and to the
//! flow table as Markdown tables.
//!
//! ```text
//! flood --spillway target/release/spillway --workdir /tmp/flood
//! flood --spillway … --workdir … --kinds ack,syn --rates 50000 --seconds 20 --join 12
//! ```
//!
//! It prints figures and asserts none: it fails only when a run fails.

use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::Parser;
use packetset::flood::{
    Analysis, Defences, FloodKind, RealStats, Scenario, Summary, config, joining_backend,
};

/// Replays floods of spoofed new flows among real TCP connections and prints
/// what the flow-table defences change.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// The spillway binary (a release build: the floods are millions of
    /// packets).
    #[arg(long)]
    spillway: PathBuf,
    /// Where captures, configurations and outputs go (one case at a time).
    #[arg(long)]
    workdir: PathBuf,
    /// Flood kinds (a run without a flood comes first).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "ack,ack2,syn,synack,udp"
    )]
    kinds: Vec<FloodKind>,
    /// Flood packets per second.
    #[arg(long, value_delimiter = ',', default_value = "10000,50000,200000")]
    rates: Vec<u32>,
    /// Length of each capture in seconds.
    #[arg(long, default_value_t = 30)]
    seconds: u32,
    /// Seconds in which the established connections open (the flood starts
    /// after them).
    #[arg(long, default_value_t = 2)]
    warmup: u32,
    /// Real connections opened before the flood.
    #[arg(long, default_value_t = 4096)]
    established: u32,
    /// Real connections opened per second during the flood (until --join).
    #[arg(long, default_value_t = 100)]
    opens: u32,
    /// Second at which the last backend joins the service.
    #[arg(long, default_value_t = 20)]
    join: u32,
    /// Milliseconds from a real connection's SYN to its ACK.
    #[arg(long, default_value_t = 50)]
    rtt_ms: u32,
    /// Flow-table capacity.
    #[arg(long, default_value_t = 65536)]
    capacity: u32,
    /// Backends (the last one joins at --join), 2 to 250.
    #[arg(long, default_value_t = 8)]
    endpoints: u8,
    /// The new-entry budget of the runs with the defences on (default: the
    /// configuration's default, capacity / first_packet / workers, of each kind).
    #[arg(long)]
    budget: Option<u32>,
    /// Seed of the spoofed sources.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Keep captures and outputs in the workdir.
    #[arg(long)]
    keep: bool,
}

/// One row: a scenario replayed with one setting of the defences.
struct Row {
    flood: FloodKind,
    rate: u32,
    defences: Defences,
    summary: Summary,
    analysis: Analysis,
}

/// Cookie seeds of the two replays of each case (any two distinct values).
const SEEDS: [u64; 2] = [0x5350_494c_4c57_4159, 0x0123_4567_89ab_cdef];

fn main() -> Result<()> {
    let args = Args::parse();
    if !(2..=250).contains(&args.endpoints) {
        bail!("--endpoints: 2 to 250");
    }
    if args.rates.contains(&0) {
        bail!("--rates: a flood of 0 packets per second is the run without a flood, made anyway");
    }
    std::fs::create_dir_all(&args.workdir)
        .with_context(|| format!("creating {}", args.workdir.display()))?;
    let mut cases = vec![(FloodKind::None, 0)];
    for &k in args.kinds.iter().filter(|k| **k != FloodKind::None) {
        cases.extend(args.rates.iter().map(|&r| (k, r)));
    }
    let mut rows = Vec::new();
    for (flood, rate) in cases {
        let scn = Scenario {
            flood,
            rate,
            seconds: args.seconds,
            warmup: args.warmup,
            established: args.established,
            opens: args.opens,
            join: args.join,
            rtt_us: args.rtt_ms.saturating_mul(1000),
            seed: args.seed,
        };
        scn.validate()?;
        let input = args.workdir.join(format!("{}-{rate}.pcap", flood.name()));
        let started = Instant::now();
        let file = File::create(&input).with_context(|| format!("{}", input.display()))?;
        let packets = scn
            .write_pcap(BufWriter::with_capacity(1 << 20, file))
            .with_context(|| format!("writing {}", input.display()))?;
        eprintln!(
            "flood: {} at {rate}/s: {packets} packets in {:.1?}",
            flood.name(),
            started.elapsed()
        );
        for defences in [Defences::On(args.budget), Defences::Off] {
            let started = Instant::now();
            let row = run_case(&args, &scn, &input, packets, defences)?;
            eprintln!(
                "flood: {} at {rate}/s, defences {}: replayed twice and analysed in {:.1?}",
                flood.name(),
                defences.name(),
                started.elapsed()
            );
            rows.push(row);
        }
        if !args.keep {
            let _ = std::fs::remove_file(&input);
        }
    }
    print_tables(&args, &rows);
    Ok(())
}

/// Replays `input` twice (two cookie seeds) with `defences` and analyses
/// the outputs.
fn run_case(
    args: &Args,
    scn: &Scenario,
    input: &Path,
    packets: u64,
    defences: Defences,
) -> Result<Row> {
    let cfg = args
        .workdir
        .join(format!("defences-{}.toml", defences.tag()));
    std::fs::write(&cfg, config(args.capacity, args.endpoints, defences))
        .with_context(|| format!("writing {}", cfg.display()))?;
    let stem = format!("{}-{}-{}", scn.flood.name(), scn.rate, defences.tag());
    let outputs = [0, 1].map(|i| args.workdir.join(format!("{stem}.out{i}.pcap")));
    let down = format!("{}@0-{}", joining_backend(args.endpoints), args.join);
    let mut summaries = Vec::new();
    for (output, seed) in outputs.iter().zip(SEEDS) {
        let run = Command::new(&args.spillway)
            .arg("replay")
            .arg("--config")
            .arg(&cfg)
            .arg("--input")
            .arg(input)
            .arg("--output")
            .arg(output)
            .arg("--down")
            .arg(&down)
            .arg("--seed")
            .arg(seed.to_string())
            // One placement for both: under pressure, where the table puts
            // an entry decides what is evicted, which must not differ.
            .arg("--placement-seed")
            .arg(SEEDS[0].to_string())
            .output()
            .with_context(|| format!("running {}", args.spillway.display()))?;
        let stdout = String::from_utf8_lossy(&run.stdout);
        if !run.status.success() {
            bail!(
                "spillway replay of {} with {} failed ({}):\n{stdout}{}",
                input.display(),
                cfg.display(),
                run.status,
                String::from_utf8_lossy(&run.stderr)
            );
        }
        let s = Summary::parse(&stdout)?;
        if s.packets_in != packets {
            bail!(
                "spillway replay read {} packets of {}'s {packets}",
                s.packets_in,
                input.display()
            );
        }
        summaries.push(s);
    }
    if summaries[0] != summaries[1] {
        bail!(
            "two replays of {} that differ only in --seed counted differently: {:?} vs {:?}",
            input.display(),
            summaries[0],
            summaries[1]
        );
    }
    let open = |p: &Path| -> Result<BufReader<File>> {
        Ok(BufReader::with_capacity(
            1 << 20,
            File::open(p).with_context(|| format!("{}", p.display()))?,
        ))
    };
    let analysis = scn
        .analyse(open(&outputs[0])?, open(&outputs[1])?)
        .with_context(|| format!("analysing the outputs of {stem}"))?;
    if !args.keep {
        for o in &outputs {
            let _ = std::fs::remove_file(o);
        }
    }
    Ok(Row {
        flood: scn.flood,
        rate: scn.rate,
        defences,
        summary: summaries[0],
        analysis,
    })
}

/// `1234567` -> `1,234,567`.
fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `part` of `whole` as a percentage with the count.
fn share(part: u64, whole: u64) -> String {
    if whole == 0 {
        return "-".into();
    }
    let p = part as f64 * 100.0 / whole as f64;
    let p = if part == whole || part == 0 {
        format!("{p:.0}%")
    } else {
        format!("{p:.1}%")
    };
    format!("{p} ({})", thousands(part))
}

fn print_tables(args: &Args, rows: &[Row]) {
    let opened = rows.first().map_or(0, |r| r.analysis.opened.conns);
    let on = Defences::On(args.budget);
    let budget = match args.budget {
        None => format!(
            "the defaults, `new_flow_budget` {} entries/s of each kind, SYN-opened and other (capacity / first_packet / workers)",
            thousands(u64::from(on.budget(args.capacity)))
        ),
        Some(b) => format!("`new_flow_budget = {b}`"),
    };
    println!("## Setting\n");
    println!(
        "Flow table of {} entries, one worker, GENEVE to {} backends of which {} joins at \
         {} s (`spillway replay --down {}@0-{}`). Real connections: {} opened in 0–{} s, then \
         {}/s until {} s ({} in all), each sends one ACK in every second after its handshake (SYN, \
         ACK {} ms later), at a random point of it, until {} s. Flood from {} s to {} s, one spoofed flow per packet (`ack2`: two \
         ACKs per flow; `synack`: a SYN and its ACK). Defences **on**: {budget}, `first_packet = \"10s\"`; **off**: `new_flow_budget = \
         4294967295`, `first_packet = \"600s\"`. Replay does no ageing sweep: inserts reclaim \
         expired entries themselves.\n",
        thousands(u64::from(args.capacity)),
        args.endpoints,
        joining_backend(args.endpoints),
        args.join,
        joining_backend(args.endpoints),
        args.join,
        thousands(u64::from(args.established)),
        args.warmup,
        args.opens,
        args.join,
        thousands(opened),
        args.rtt_ms,
        args.seconds,
        args.warmup,
        args.seconds,
    );
    println!("## Real connections\n");
    println!(
        "| flood | pkt/s | defences | established: one entry throughout | established: moved \
         | opened under flood: one entry from the SYN | packets without entry | lost an entry \
         | without entry after the join | moved | real packets lost |"
    );
    println!("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in rows {
        let (e, o): (&RealStats, &RealStats) = (&r.analysis.established, &r.analysis.opened);
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.flood.name(),
            thousands(u64::from(r.rate)),
            r.defences.name(),
            share(e.one_entry, e.conns),
            share(e.moved, e.conns),
            share(o.one_entry, o.conns),
            share(o.stateless, o.sent),
            share(o.lost_entry, o.conns),
            share(o.stateless_after_join, o.conns),
            share(o.moved, o.conns),
            thousands((e.sent + o.sent).saturating_sub(e.out + o.out)),
        );
    }
    println!(
        "\n*one entry*: every packet of the connection went through one flow entry (a \
         packet's GENEVE cookie differs between two replays with different cookie seeds when \
         it came from an entry; the same when Maglev alone forwarded it) and the entry never \
         changed. *packets without entry*: of all packets of those connections. *lost an \
         entry*: a later packet went through a new entry. *without entry after the join*: some \
         packet after {} s was forwarded by Maglev alone, which by then maps about 1/{} of the \
         flows to the new backend. *moved*: some packet went to another backend than its SYN.",
        args.join, args.endpoints
    );
    println!("\n## The flow table\n");
    println!(
        "| flood | pkt/s | defences | packets | new entries | hits | stateless (table full) \
         | over budget | entries made/s in the flood | flood packets with an entry |"
    );
    println!("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|");
    let flood_secs = u64::from(args.seconds - args.warmup);
    for r in rows {
        let s = &r.summary;
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.flood.name(),
            thousands(u64::from(r.rate)),
            r.defences.name(),
            thousands(s.packets_in),
            thousands(s.new),
            thousands(s.hits),
            thousands(s.stateless),
            thousands(s.over_budget),
            thousands(s.new.saturating_sub(u64::from(args.established)) / flood_secs),
            share(r.analysis.flood_with_entry, r.analysis.flood_out),
        );
    }
    println!(
        "\n*entries made/s*: (new entries − the {} of the warm-up) / the flood's {} s. *flood \
         packets with an entry*: forwarded through a flow entry (for `ack2` and `synack` the \
         second packet of a flow hits the entry its first made).",
        thousands(u64::from(args.established)),
        flood_secs
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_well() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(share(5, 10), "50.0% (5)");
        assert_eq!(share(10, 10), "100% (10)");
        assert_eq!(share(0, 10), "0% (0)");
        assert_eq!(share(1, 0), "-");
    }
}
