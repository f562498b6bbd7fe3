//! The `spillway` binary end to end: its command-line surface, and
//! `spillway forward` moving real frames between two DPDK `net_pcap` devices.

#![allow(clippy::cast_possible_truncation)] // test values are small
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

use std::path::PathBuf;
use std::process::{Command, Output};

use testkit::packet::{DST_MAC, SRC_MAC, frame};
use testkit::pcap::{read as read_pcap, write as write_pcap};

fn spillway(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run spillway")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn help_lists_every_subcommand() {
    let out = spillway(&["--help"]);
    assert!(out.status.success(), "{:?}: {}", out.status, text(&out));
    let help = text(&out);
    for cmd in [
        "run",
        "check-config",
        "replay",
        "status",
        "stats",
        "flows",
        "reload",
        "drain",
        "undrain",
        "forward",
        "decap",
        "nva",
        "zone-health",
    ] {
        assert!(
            help.contains(&format!("  {cmd} ")),
            "--help lists {cmd}:\n{help}"
        );
    }
}

/// `spillway run --fixed-cookie-seed` (the gateway return benchmark's: it
/// makes flow cookies predictable, M32) is accepted but never offered: not
/// in `run --help`; and it takes a number only.
#[test]
fn fixed_cookie_seed_is_hidden() {
    let out = spillway(&["run", "--help"]);
    assert!(out.status.success(), "{:?}: {}", out.status, text(&out));
    let help = text(&out);
    assert!(help.contains("--config"), "{help}");
    assert!(
        !help.contains("cookie"),
        "run --help offers a cookie seed:\n{help}"
    );
    let out = spillway(&[
        "run",
        "--config",
        "/nonexistent.toml",
        "--fixed-cookie-seed",
        "x",
    ]);
    assert!(!out.status.success());
    assert!(text(&out).contains("--fixed-cookie-seed"), "{}", text(&out));
}

/// `spillway nva` is wired in and refuses a bad command line before binding
/// anything: no --listen, a rule it cannot read, an unknown tamper mode, no
/// --allow-source.
#[test]
fn nva_checks_its_command_line() {
    for (args, want) in [
        (&[][..], "--listen"),
        (
            &["--listen", "127.0.0.1", "--drop", "tcp * to *:22"][..],
            "->",
        ),
        (
            &["--listen", "127.0.0.1", "--tamper", "cookies"][..],
            "strip-options",
        ),
    ] {
        let out = spillway(&[&["nva"][..], args].concat());
        let t = text(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {t}");
        assert!(t.contains(want), "nva {args:?} names {want}: {t}");
    }
    // Issue 38 item 10: without an allow-list it would reflect anyone's
    // packets; it does not start (before binding anything).
    let out = spillway(&["nva", "--listen", "127.0.0.1"]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(
        t.contains("--allow-source") && t.contains("--allow-any"),
        "{t}"
    );
}

#[test]
fn version_names_the_linked_dpdk() {
    let out = spillway(&["--version"]);
    assert!(out.status.success(), "{:?}: {}", out.status, text(&out));
    let v = text(&out);
    assert!(
        v.starts_with(&format!("spillway {}", env!("CARGO_PKG_VERSION"))),
        "{v}"
    );
    assert!(v.contains("DPDK 2"), "names the DPDK release: {v}");
}

/// `spillway drain|undrain` (M37): without a daemon, a clear error; a bad
/// scope or name is refused before any daemon is asked.
#[test]
fn drain_without_a_daemon_or_with_bad_arguments_is_a_clear_error() {
    let sock = std::env::temp_dir().join(format!("spw-cli-drain-{}.sock", std::process::id()));
    for verb in ["drain", "undrain"] {
        let out = spillway(&[verb, "zone", "eu1-a", "--socket", sock.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(1), "{verb}: {}", text(&out));
        let t = text(&out);
        assert!(
            t.contains("cannot reach spillway at") && t.contains("is it running?"),
            "{verb}: {t}"
        );
    }
    let out = spillway(&["drain", "rack", "r1"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("possible values: node, zone, region"),
        "{}",
        text(&out)
    );
    let out = spillway(&["drain"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let out = spillway(&["drain", "zone", "a b", "--socket", sock.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("not a name"), "{}", text(&out));
}

#[test]
fn bad_eal_arguments_are_a_clear_error() {
    let out = spillway(&["forward", "--", "--no-such-eal-flag"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let t = text(&out);
    assert!(
        t.contains("cannot start DPDK") && t.contains("--no-such-eal-flag"),
        "{t}"
    );
}

#[test]
fn unknown_port_names_the_ports_that_exist() {
    let out = spillway(&[
        "forward",
        "--rx",
        "net_nope",
        "--",
        "-l",
        "0",
        "--no-huge",
        "--no-shconf",
        "-m",
        "128",
        "--no-pci",
        "--no-telemetry",
        "--vdev=net_null0",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let t = text(&out);
    assert!(t.contains("net_nope") && t.contains("net_null0"), "{t}");
}

fn frames(n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            let payload: Vec<u8> = (0..(46 + i % 200)).map(|b| (b ^ i) as u8).collect();
            frame(SRC_MAC, DST_MAC, &[], 0x88b5, &payload, 0)
        })
        .collect()
}

fn tmpdir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("spillway-cli-{}", std::process::id()));
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

#[test]
fn forward_copies_every_frame_between_pcap_devices() {
    let dir = tmpdir();
    let (inp, outp) = (dir.join("in.pcap"), dir.join("out.pcap"));
    let sent = frames(5000);
    write_pcap(&inp, &sent);
    let out = spillway(&[
        "forward",
        "--rx",
        "net_pcap0",
        "--tx",
        "net_pcap1",
        "--idle-ms",
        "300",
        "--",
        "-l",
        "0",
        "--no-huge",
        "--no-shconf",
        "-m",
        "256",
        "--no-pci",
        "--no-telemetry",
        &format!("--vdev=net_pcap0,rx_pcap={}", inp.display()),
        &format!("--vdev=net_pcap1,tx_pcap={}", outp.display()),
    ]);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains("forwarded 5000 of 5000 packets"), "{t}");
    assert!(t.contains("0 mbufs in use before, 0 after"), "{t}");
    let got = read_pcap(&outp);
    assert_eq!(got.len(), sent.len());
    assert!(got == sent, "frames come out byte-identical and in order");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn clients_without_a_daemon_say_so() {
    let out = spillway(&["status", "--socket", "/nonexistent/spillway.sock"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("cannot reach spillway at /nonexistent/spillway.sock"),
        "{}",
        text(&out)
    );
}

/// M50: `spillway decap` is told whom to take tunnels from and for which
/// VIPs, or it does not start. (Run in a network namespace of its own where
/// one can be made, so that a decapsulator that did start would touch
/// nothing of the host's.)
#[test]
fn decap_refuses_to_start_open() {
    let isolated = Command::new("unshare")
        .args(["--net", "true"])
        .status()
        .is_ok_and(|s| s.success());
    for (args, wants) in [
        (&[][..], &["--allow-source", "--allow-any"][..]),
        (
            &["--vip", "192.0.2.10"][..],
            &["--allow-source", "--allow-any"][..],
        ),
        (&["--allow-source", "10.0.0.1"][..], &["--vip"][..]),
    ] {
        let mut cmd = if isolated {
            let mut c = Command::new("unshare");
            c.args(["--net", env!("CARGO_BIN_EXE_spillway")]);
            c
        } else {
            Command::new(env!("CARGO_BIN_EXE_spillway"))
        };
        let mut child = cmd
            .args([
                "decap",
                "--tun",
                "spwclitun0",
                "--gue-port",
                "0",
                "--geneve-port",
                "0",
            ])
            .args(args)
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run spillway decap");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while child.try_wait().expect("wait").is_none() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let running = child.try_wait().expect("wait").is_none();
        if running {
            let _ = child.kill();
        }
        let out = child.wait_with_output().expect("output");
        let t = text(&out);
        assert!(!running, "decap {args:?} started and kept running:\n{t}");
        assert_eq!(out.status.code(), Some(1), "{args:?}: {t}");
        for w in wants {
            assert!(t.contains(w), "decap {args:?} names {w}: {t}");
        }
    }
}

/// `spillway zone-health` (M51): a bad file is refused with every problem
/// and its field; commands without a running service say so; the example
/// file's summary names its zones.
#[test]
fn zone_health_checks_its_file_and_reports_a_missing_service() {
    let dir = std::env::temp_dir().join(format!("spillway-cli-zh-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let bad = dir.join("bad.toml");
    std::fs::write(
        &bad,
        "[dns]\nserver = \"nowhere\"\nzone = \"a.test\"\nname = \"www.b.test\"\n\
         [dns.tsig]\nname = \"k\"\nsecret = \"short\"\n[[zones]]\nname = \"a b\"\nvips = []\n",
    )
    .expect("write");
    let out = spillway(&[
        "zone-health",
        "--config",
        bad.to_str().expect("utf-8"),
        "check",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let t = text(&out);
    for field in [
        "dns.server",
        "dns.name",
        "dns.tsig",
        "zones[0].name",
        "zones[0].vips",
    ] {
        assert!(t.contains(field), "{field} in:\n{t}");
    }
    let sock = dir.join("none.sock");
    let out = spillway(&[
        "zone-health",
        "--socket",
        sock.to_str().expect("utf-8"),
        "status",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let t = String::from_utf8_lossy(&out.stdout);
    assert!(t.contains("\"ok\":false") && t.contains("none.sock"), "{t}");
    let out = spillway(&[
        "zone-health",
        "--socket",
        sock.to_str().expect("utf-8"),
        "remove",
        "a b",
    ]);
    assert!(text(&out).contains("is not a zone name"), "{}", text(&out));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 38 item 9: `[bgp]` paths end up in the bird.conf `spillway
/// bird-config` prints (the routes file in an `include "…"`, the socket in a
/// comment), where BIRD strings have no escapes: a quote and a line break
/// would inject a BIRD protocol. Such paths are refused at validation, with
/// the field's position; a plain configuration's bird.conf parses in BIRD
/// (`bird -p`).
#[test]
fn bird_config_refuses_paths_that_would_inject_bird_configuration() {
    let dir = std::env::temp_dir().join(format!("spillway-cli-bird-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let base = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/two-region-spillover.toml"),
    )
    .expect("example");
    let start = base.find("[bgp]\n").expect("a [bgp] section");
    let end = start + base[start..].find("\n\n").expect("its end");
    let with_bgp = |control: &str, routes_file: &str| {
        let bgp = format!(
            "[bgp]\nspeaker = \"bird\"\ncontrol = {control}\nlocal_asn = 65010\nrouter_id = \"10.100.0.2\"\npeers = [{{ address = \"10.100.0.1\", asn = 65000 }}]\nroutes_file = {routes_file}"
        );
        let path = dir.join("node.toml");
        std::fs::write(&path, format!("{}{bgp}{}", &base[..start], &base[end..])).expect("write");
        let out = spillway(&["bird-config", "--config", path.to_str().expect("utf-8")]);
        let line = format!("{}{bgp}", &base[..start]).lines().count();
        (out, line)
    };
    let routes = format!("\"{}/vips.conf\"", dir.display());

    // A plain one: printed, and BIRD parses it.
    let (out, _) = with_bgp("\"/run/bird/bird.ctl\"", &routes);
    assert!(out.status.success(), "{}", text(&out));
    let conf = dir.join("bird.conf");
    std::fs::write(&conf, &out.stdout).expect("write bird.conf");
    let parsed = Command::new("bird")
        .arg("-p")
        .arg("-c")
        .arg(&conf)
        .output()
        .expect("run bird -p (scripts/setup.sh installs bird2)");
    assert!(
        parsed.status.success(),
        "bird -p: {}\n{}",
        text(&parsed),
        String::from_utf8_lossy(&out.stdout)
    );

    // The attack: a routes file that closes the include's string and adds a
    // BGP session exporting everything; a socket path whose line break ends
    // the comment it is written in. Each is refused, naming the field at its
    // line, and nothing is printed.
    let evil_routes = r#""/run/x\";\nprotocol bgp evil { local as 65010; neighbor 192.0.2.66 as 64999; ipv4 { export all; }; }\ninclude \"/run/y""#;
    let evil_control =
        r#""/run/bird/bird.ctl\nprotocol static evil { ipv4; route 0.0.0.0/0 blackhole; }""#;
    for (control, routes_file, field, why) in [
        (
            "\"/run/bird/bird.ctl\"",
            evil_routes,
            "bgp.routes_file",
            "double quote",
        ),
        (evil_control, routes.as_str(), "bgp.control", "line break"),
    ] {
        let (out, line) = with_bgp(control, routes_file);
        let t = text(&out);
        assert_eq!(out.status.code(), Some(1), "{field} accepted:\n{t}");
        assert!(out.stdout.is_empty(), "printed a bird.conf:\n{t}");
        let at = if field == "bgp.control" {
            line - 4
        } else {
            line
        };
        assert!(
            t.contains(&format!("node.toml:{at}:"))
                && t.contains(&format!("{field}: "))
                && t.contains(why),
            "{field} refused at line {at} for a {why}:\n{t}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
