//! `spillway check-config`: every file in `config/` passes; a broken file
//! fails with every error as `file:line:col: path: reason`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Warnings an example is meant to get, by file and field path (as in
/// crates/config/tests/examples.rs): a bare-metal node serves /metrics on its
/// management network, which check-config points out.
const EXPECTED_WARNINGS: &[(&str, &str)] = &[("bare-metal-two-nic.toml", "metrics.listen")];

fn check(file: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_spillway"))
        .arg("check-config")
        .arg(file)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run spillway")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn tmp(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("spillway-check-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write config");
    p
}

#[test]
fn every_file_in_config_passes() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).expect("config/") {
        let p = e.expect("entry").path();
        if p.extension().is_none_or(|x| x != "toml") {
            continue;
        }
        n += 1;
        let out = check(&p);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}:\n{}",
            p.display(),
            stderr(&out)
        );
        let s = stdout(&out);
        assert!(s.contains("configuration is valid"), "{s}");
        assert!(
            s.contains("forwarding rules: ") && s.contains("endpoints: ") && s.contains("regions"),
            "{s}"
        );
        // Only the fields this version does not act on yet are warned of,
        // and what an example shows on purpose (its expected warnings).
        let name = p.file_name().unwrap().to_string_lossy();
        let expected: Vec<&str> = EXPECTED_WARNINGS
            .iter()
            .filter(|(file, _)| *file == name)
            .map(|(_, path)| *path)
            .collect();
        let warnings: Vec<&str> = s
            .lines()
            .skip_while(|l| !l.starts_with("warnings: "))
            .skip(1)
            .collect();
        assert!(
            warnings
                .iter()
                .all(|w| w.trim_start().starts_with("warning: ")
                    && (w.contains("not used by this version")
                        || expected
                            .iter()
                            .any(|path| w.contains(&format!(": {path}: "))))),
            "{}: {s}",
            p.display()
        );
        for path in &expected {
            assert!(
                warnings.iter().any(|w| w.contains(&format!(": {path}: "))),
                "{}: expected a warning on {path}: {s}",
                p.display()
            );
        }
    }
    assert!(n >= 5, "{n} files in config/");
}

#[test]
fn summary_shows_rules_per_vip() {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/lab.toml");
    let s = stdout(&check(&p));
    assert!(
        s.contains("10.0.0.10: web TCP 80,443 -> web; dns UDP 53 -> web"),
        "{s}"
    );
    // A rule's source ranges are part of what it takes.
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/reference.toml");
    let s = stdout(&check(&p));
    assert!(
        s.contains(
            "192.0.2.20: media UDP 5004,8000-8100 -> failover (from 198.51.100.0/24, 203.0.113.0/28 only)"
        ),
        "{s}"
    );
}

#[test]
fn a_broken_file_fails_with_every_error_positioned() {
    let lab =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("config/lab.toml"))
            .expect("lab.toml");
    let broken = lab
        .replace("maglev_table_size = 65537", "maglev_table_size = 65536")
        .replacen(
            "[[backend_services]]",
            "[[forwarding_rules]]\nname = \"all-tcp\"\nvips = [\"10.0.0.10\"]\nprotocol = \"TCP\"\nbackend_service = \"web\"\n\n[[backend_services]]",
            1,
        );
    assert_ne!(broken, lab);
    let p = tmp("broken.toml", &broken);
    let out = check(&p);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(stdout(&out).is_empty(), "{}", stdout(&out));
    let err = stderr(&out);
    let line_of = |needle: &str| {
        broken
            .lines()
            .position(|l| l.contains(needle))
            .expect("needle")
            + 1
    };
    let file = p.display().to_string();
    let rule_line = line_of("name = \"all-tcp\"") - 1;
    let size_line = line_of("maglev_table_size");
    for want in [
        format!(
            "{file}:{rule_line}:1: forwarding_rules[2].ports: TCP ports 80,443 overlap rule \"web\""
        ),
        format!(
            "{file}:{size_line}:21: backend_services[0].maglev_table_size: 65536 is not a prime"
        ),
    ] {
        assert!(err.contains(&want), "missing {want:?} in:\n{err}");
    }
    assert!(err.contains("2 errors; configuration rejected"), "{err}");
}

#[test]
fn syntax_and_unknown_fields_are_positioned_too() {
    let p = tmp(
        "typo.toml",
        "[node]\nname = \"a\"\nregion = \"r\"\nzone = \"z\"\nzoen = \"z\"\n",
    );
    let out = check(&p);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    let err = stderr(&out);
    assert!(
        err.contains(&format!(
            "{}:5:1: node.zoen: unknown field `zoen`",
            p.display()
        )),
        "{err}"
    );

    let p = tmp("syntax.toml", "[node\nname = 1\n");
    let out = check(&p);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(
        stderr(&out).contains(&format!("{}:1:", p.display())),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_missing_file_is_an_error() {
    let out = check(Path::new("/nonexistent/spillway.toml"));
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("/nonexistent/spillway.toml:1:1: cannot read the file"),
        "{}",
        stderr(&out)
    );
}

/// A field that this version parses but does not act on is accepted with a
/// warning naming it, which check-config prints; `burst_size`'s says the
/// burst the workers really use.
#[test]
fn fields_not_used_by_this_version_are_printed_as_warnings() {
    let lab =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("config/lab.toml"))
            .expect("lab.toml");
    let text = lab.replacen("[dataplane]\n", "[dataplane]\nburst_size = 64\n", 1)
        + "\n[flow_sync]\nlisten = \"192.0.2.2:7700\"\npeers = [\"192.0.2.3:7700\"]\n"
        + "key = \"hex:00112233445566778899aabbccddeeff\"\n";
    assert_ne!(text, lab);
    let p = tmp("unused.toml", &text);
    let out = check(&p);
    let s = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{s}{}", stderr(&out));
    assert!(s.contains("configuration is valid"), "{s}");
    let burst = format!(
        "dataplane.burst_size: not used by this version: workers receive and send bursts of {} packets",
        dataplane::BURST
    );
    assert!(s.contains(&burst), "{s}");
    // [flow_sync] is acted on (M36): no warning.
    assert!(!s.contains("flow_sync:"), "{s}");
    assert!(s.contains("warnings: 1"), "{s}");
}

/// The summary estimates the memory the configuration needs; a flow table
/// beyond this machine's memory is refused, by check-config and by the
/// daemon at start (before DPDK), naming the field and both amounts.
#[test]
fn memory_is_estimated_and_a_flow_table_beyond_the_machine_is_refused() {
    let lab_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/lab.toml");
    let s = stdout(&check(&lab_path));
    assert!(
        s.contains("memory: about 25.0 MiB (flow table 6.00 MiB, Maglev tables 520 KiB counting a rebuild, packet pool 18.5 MiB in ordinary memory)\n  this machine: "),
        "{s}"
    );
    assert!(
        s.contains(
            "Maglev: a full rebuild builds 1 table, 65537 slots, about 2 ms on the management core"
        ),
        "{s}"
    );

    let lab = std::fs::read_to_string(&lab_path).expect("lab.toml");
    let big = lab.replace(
        "flow_table_capacity = 65536",
        "flow_table_capacity = 1073741824",
    );
    assert_ne!(big, lab);
    let need = flowtable::FlowTable::memory_bytes_for(1 << 30).expect("size") as u64;
    let total = config::Memory::system().expect("/proc/meminfo").total;
    if need <= total {
        println!(
            "this machine has {total} bytes, more than the largest flow table: nothing to refuse"
        );
        return;
    }
    let p = tmp("big-flow-table.toml", &big);
    let line = big
        .lines()
        .position(|l| l.starts_with("flow_table_capacity"))
        .expect("line")
        + 1;
    let want = format!(
        "{}:{line}:23: dataplane.flow_table_capacity: this configuration needs about {} of memory but this machine has {}: flow table (dataplane.flow_table_capacity = 1073741824)",
        p.display(),
        config::memory::Bytes(
            config::memory::estimate(
                &config::load_str("x", &big, &config::Env::default())
                    .expect("valid")
                    .config
            )
            .total_bytes()
        ),
        config::memory::Bytes(total),
    );
    let out = check(&p);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stderr(&out).contains(&want),
        "missing {want:?} in:\n{}",
        stderr(&out)
    );
    assert!(stderr(&out).contains("1 error; configuration rejected"));

    // The daemon loads its configuration the same way, before anything else.
    let out = Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(["run", "--config"])
        .arg(&p)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run spillway");
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains(&want),
        "missing {want:?} in:\n{}",
        stderr(&out)
    );
}

/// M25: check-config says what limits each service's capacity, and warns
/// where `UTILIZATION` has nothing to measure it by (a TCP check, no check:
/// no limit, or only the rates) and of a service with no health check. A
/// rate under `UTILIZATION` is a second limit ("or both"), not an error.
#[test]
fn capacity_limits_are_shown_and_utilization_without_a_source_is_warned() {
    let lab =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("config/lab.toml"))
            .expect("lab.toml");
    let run = |name: &str, text: &str| {
        assert_ne!(text, lab, "{name}: the edit applies");
        let out = check(&tmp(name, text));
        let s = stdout(&out);
        assert_eq!(out.status.code(), Some(0), "{name}: {s}{}", stderr(&out));
        s
    };
    let s = stdout(&check(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("config/lab.toml"),
    ));
    assert!(
        s.contains("Maglev M = 65537, capacity by utilization (target 0.8)\n"),
        "{s}"
    );

    // Both limits: whichever is reached first; no warning.
    let both = run(
        "both.toml",
        &lab.replacen(
            "name = \"lab-a\"\n",
            "name = \"lab-a\"\nmax_rate = 50000\nmax_utilization = 0.6\n",
            1,
        ),
    );
    assert!(
        both.contains("capacity by rate or utilization (target 0.8), whichever is reached first\n"),
        "{both}"
    );
    assert!(both.contains("warnings: 0"), "{both}");

    // A TCP check reports no utilization: no limit at all, said twice.
    let tcp = run(
        "tcp.toml",
        &lab.replacen(
            "type = \"HTTP\"\npath = \"/healthz\"\n",
            "type = \"TCP\"\n",
            1,
        ),
    );
    assert!(
        tcp.contains(
            "capacity unlimited (utilization unknown: a TCP health check cannot report it)"
        ),
        "{tcp}"
    );
    assert!(
        tcp.contains("backend_services[0].health_check: balancing_mode UTILIZATION (the default), but health check \"http-80\" is TCP, which cannot report utilization: it has no capacity limit"),
        "{tcp}"
    );
    assert!(tcp.contains("warnings: 1"), "{tcp}");

    // No health check at all, with a rate: only the rate limits.
    let none = run(
        "none.toml",
        &lab.replacen(
            "health_check = \"http-80\"\n",
            "max_rate_per_endpoint = 1000\n",
            1,
        ),
    );
    assert!(
        none.contains("capacity by rate only (utilization unknown: no health check)"),
        "{none}"
    );
    assert!(
        none.contains("backend_services[0].name: service \"web\" has no health check: every endpoint counts as healthy, failing or not, and nothing reports utilization: under balancing_mode UTILIZATION (the default) only its rates limit its capacity"),
        "{none}"
    );
    // The unused check is warned of too.
    assert!(none.contains("warnings: 2"), "{none}");

    // RATE takes no utilization target: refused, saying what to use.
    let out = check(&tmp(
        "rate.toml",
        &lab.replacen(
            "health_check = \"http-80\"\n",
            "health_check = \"http-80\"\nbalancing_mode = \"RATE\"\nmax_rate_per_endpoint = 1000\nmax_utilization = 0.5\n",
            1,
        ),
    ));
    assert_ne!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("backend_services[0].max_utilization: max_utilization is a target of balancing_mode UTILIZATION; RATE counts packets per second only (to limit by rate and utilization together, use UTILIZATION with max_rate or max_rate_per_endpoint)"),
        "{}",
        stderr(&out)
    );
}
