//! DPDK's own operator tools against a live `spillway run` (net_pcap ports,
//! hugepages, a `--file-prefix` of its own): `dpdk-dumpcap` captures what
//! the daemon receives and sends with a BPF filter, so does `dpdk-pdump`
//! on the backend port's transmit side, `dpdk-proc-info` reads
//! its ports' counters, and `dpdk-telemetry.py` shows Spillway's own
//! commands beside DPDK's. Each attaches as a DPDK secondary process, which
//! a daemon without `rte_pdump_init` or with `--in-memory` refuses.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::read_pcap;
use wire::encap::{DecapConfig, parse_tunnel};

/// [`common::looping_pcap_daemon_config`] on hugepages under `prefix`, with
/// DPDK's telemetry.
fn config(dir: &Path, prefix: &str) -> String {
    let text = common::looping_pcap_daemon_config(dir, "dns")
        .replace(
            "\"--no-huge\", \"--no-shconf\", \"-m\", \"256\", ",
            &format!("\"--file-prefix={prefix}\", \"-m\", \"256\", "),
        )
        .replace("\"--no-telemetry\", ", "");
    assert!(
        text.contains(&format!("--file-prefix={prefix}")) && !text.contains("--no-telemetry"),
        "{text}"
    );
    text
}

/// Runs `cmd` (at most `within`), its output; fails on a non-zero exit.
fn run(cmd: &mut Command, within: Duration) -> String {
    let (status, text, line) = run_status(cmd, within, None);
    assert!(status.success(), "{line}: {status:?}\n{text}");
    text
}

/// Runs `cmd` (at most `within`, `input` on its stdin): its exit status,
/// output and command line.
fn run_status(
    cmd: &mut Command,
    within: Duration,
    input: Option<&str>,
) -> (std::process::ExitStatus, String, String) {
    use std::io::Write;
    let line = common::command_line(cmd);
    let mut child = cmd
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{line}: {e}"));
    // Closed once written (or at once): the tool sees the end of its input.
    if let (Some(mut stdin), Some(input)) = (child.stdin.take(), input) {
        stdin.write_all(input.as_bytes()).expect("write");
    }
    let pid = child.id();
    std::thread::spawn(move || {
        std::thread::sleep(within);
        let _ = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
    });
    let out = child.wait_with_output().expect("wait");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status, text, line)
}

#[test]
fn hugepages_dpdk_tools_capture_and_inspect_a_live_daemon() {
    let queries: Vec<Vec<u8>> = (0..64).map(common::dns_query).collect();
    let dir = common::pcap_daemon_dir("capture", &queries);
    let prefix = format!("spwcap{}", std::process::id());
    // Dropped after the daemon (declared before it): DPDK leaves its
    // runtime directory and hugepage files of the prefix behind.
    let _leftovers = Leftovers(prefix.clone());
    let cfg = dir.join("spillway.toml");
    std::fs::write(&cfg, config(&dir, &prefix)).expect("config");
    let log = dir.join("daemon.log");
    let socket = dir.join("ctl.sock");
    let mut daemon = common::Daemon::start(&dir, &cfg, Some(&log));
    daemon.wait_answering(&socket, &log);
    let logged = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        logged.contains(&format!("dpdk-dumpcap --file-prefix={prefix}")),
        "the daemon says how to capture:\n{logged}"
    );

    // The backend port's transmitted frames: every one GUE to a backend
    // carrying one of the queries, and nothing the filter leaves out.
    let out = dir.join("backend.pcap");
    let text = run(
        Command::new("dpdk-dumpcap")
            .arg(format!("--file-prefix={prefix}"))
            .args([
                "-i",
                "net_pcap1",
                "-f",
                "udp and not port 53",
                "-c",
                "40",
                "-P",
                "-q",
            ])
            .arg("-w")
            .arg(&out),
        Duration::from_secs(60),
    );
    // It stops after the burst that reached the count.
    let frames = read_pcap(&out);
    assert!(frames.len() >= 40, "{} frames\n{text}", frames.len());
    for f in &frames {
        let t = parse_tunnel(f, &DecapConfig::default())
            .unwrap_or_else(|e| panic!("not a tunnel frame ({e:?}): {f:02x?}"));
        let inner = &f[t.inner_offset..t.inner_offset + t.inner_len];
        assert!(
            queries.iter().any(|q| &q[14..] == inner),
            "a captured frame carries one of the queries"
        );
        assert_eq!(
            &f[0..6],
            &[2, 0, 0, 0, 0, 0xfe],
            "to the backend's next hop"
        );
    }

    if let Ok(Some(st)) = daemon.child.try_wait() {
        panic!(
            "the daemon exited after a capture: {st}\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    }
    // The uplink's received queries, through a filter only they pass.
    let out = dir.join("uplink.pcap");
    run(
        Command::new("dpdk-dumpcap")
            .arg(format!("--file-prefix={prefix}"))
            .args([
                "-i",
                "net_pcap0",
                "-f",
                "udp dst port 53",
                "-c",
                "10",
                "-P",
                "-q",
            ])
            .arg("-w")
            .arg(&out),
        Duration::from_secs(60),
    );
    let frames = read_pcap(&out);
    assert!(frames.len() >= 10, "{} frames", frames.len());
    assert!(
        frames.iter().all(|f| queries.contains(f)),
        "the queries as received"
    );
    // tcpdump reads the capture as any other.
    let shown = run(
        Command::new("tcpdump").args(["-nn", "-r"]).arg(&out),
        Duration::from_secs(20),
    );
    let lines: Vec<&str> = shown.lines().filter(|l| l.contains(" IP ")).collect();
    assert!(
        lines.len() >= 10
            && lines
                .iter()
                .all(|l| l.contains(" IP 192.0.2.1.") && l.contains(" > 10.0.0.10.53: ")),
        "{shown}"
    );

    // dpdk-pdump: the same through DPDK's older tool, which runs until
    // interrupted and writes through pcap devices of its own.
    let tx = dir.join("pdump-tx.pcap");
    let mut pdump = Command::new("dpdk-pdump")
        .arg(format!("--file-prefix={prefix}"))
        .args(["--log-level=lib.eal:error", "--", "--pdump"])
        .arg(format!("port=1,queue=*,tx-dev={}", tx.display()))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("dpdk-pdump");
    let deadline = Instant::now() + Duration::from_secs(30);
    while read_pcap_len(&tx) < 20 {
        assert!(Instant::now() < deadline, "dpdk-pdump wrote no packets");
        std::thread::sleep(Duration::from_millis(200));
    }
    let _ = Command::new("kill")
        .args(["-INT", &pdump.id().to_string()])
        .status();
    let _ = pdump.wait();
    let frames = read_pcap(&tx);
    assert!(frames.len() >= 20);
    assert!(
        frames
            .iter()
            .all(|f| parse_tunnel(f, &DecapConfig::default()).is_ok()),
        "every frame dpdk-pdump took from the backend port is encapsulated"
    );

    // dpdk-proc-info: the ports' counters, read from the shared memory.
    // DPDK 22.11's net_pcap crashes a secondary process in its device
    // removal at rte_eal_cleanup, after the tool printed (a backtrace ends
    // in librte_net_pcap's remove; with other drivers it exits 0): a
    // SIGSEGV is taken here only after complete figures.
    let (status, stats, line) = run_status(
        Command::new("dpdk-proc-info")
            .arg(format!("--file-prefix={prefix}"))
            .args(["--log-level=lib.eal:error", "--", "--stats"]),
        Duration::from_secs(30),
        None,
    );
    {
        use std::os::unix::process::ExitStatusExt;
        assert!(
            status.success() || status.signal() == Some(11),
            "{line}: {status:?}\n{stats}"
        );
    }
    assert!(
        stats.contains("NIC statistics for port 1") && stats.contains("TX-packets:"),
        "{stats}"
    );
    let tx: Vec<u64> = stats
        .split("NIC statistics for port 1")
        .nth(1)
        .and_then(|s| s.split("TX-packets:").nth(1))
        .and_then(|s| s.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .into_iter()
        .collect();
    assert!(tx.first().is_some_and(|&n| n > 0), "{stats}");

    // dpdk-telemetry.py: Spillway's commands listed beside DPDK's, and its
    // counters through them.
    let (status, answer, line) = run_status(
        Command::new("dpdk-telemetry.py").args(["-f", &prefix]),
        Duration::from_secs(30),
        Some("/\n/spillway/stats\n/spillway/status\n"),
    );
    assert!(status.success(), "{line}: {status:?}\n{answer}");
    assert!(
        answer.contains("\"/spillway/stats\"") && answer.contains("\"/ethdev/stats\""),
        "{answer}"
    );
    // The counter (the rates are strings), as `spillway stats --json` has it.
    let forwarded = answer
        .split("\"forwarded\": ")
        .filter_map(|s| s.split(|c: char| !c.is_ascii_digit()).next())
        .find_map(|n| n.parse::<u64>().ok());
    assert!(forwarded.is_some_and(|n| n > 0), "{answer}");
    assert!(
        answer.contains("\"dns\""),
        "the status names the rule: {answer}"
    );
}

/// Removes what DPDK leaves behind of a file prefix: its runtime directory
/// and hugepage files.
struct Leftovers(String);

impl Drop for Leftovers {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(format!("/var/run/dpdk/{}", self.0));
        if let Ok(files) = std::fs::read_dir("/dev/hugepages") {
            for f in files.flatten() {
                if f.file_name()
                    .to_string_lossy()
                    .starts_with(&format!("{}map_", self.0))
                {
                    let _ = std::fs::remove_file(f.path());
                }
            }
        }
    }
}

/// Records in the pcap file at `path` so far (0 while it is not there).
fn read_pcap_len(path: &Path) -> usize {
    let Ok(bytes) = std::fs::read(path) else {
        return 0;
    };
    // Whole records after the 24-byte header (the tool may be mid-write).
    let (mut at, mut n) = (24usize, 0);
    while let Some(h) = bytes.get(at..at + 16) {
        let incl = u32::from_le_bytes([h[8], h[9], h[10], h[11]]) as usize;
        if bytes.len() < at + 16 + incl {
            break;
        }
        at += 16 + incl;
        n += 1;
    }
    n
}
