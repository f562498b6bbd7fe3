//! The bare-metal deployment kit in `scripts/deploy/` (docs/deploy.md): the
//! systemd units pass `systemd-analyze verify` and run commands the binary
//! takes; `bind-nics.sh --dry-run` against a fake sysfs says what it would do
//! and refuses what it must; `isolate-cpus.sh` prints the kernel command line
//! for a configuration's cores and rejects cores that do not fit. Nothing
//! here touches a real NIC or the boot configuration.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn deploy_dir() -> PathBuf {
    root().join("scripts/deploy")
}

/// A fresh, empty directory for one test.
fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("spillway-deploy-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Runs a script of scripts/deploy with arguments and environment.
fn script(name: &str, args: &[&str], env: &[(&str, &Path)]) -> Output {
    let path = deploy_dir().join(name);
    let mut c = Command::new(&path);
    c.args(args).current_dir(root());
    for (k, v) in env {
        c.env(k, v);
    }
    c.output()
        .unwrap_or_else(|e| panic!("run {}: {e}", path.display()))
}

fn show(o: &Output) -> String {
    format!(
        "status {:?}\n--- stdout\n{}--- stderr\n{}",
        o.status.code(),
        text(&o.stdout),
        text(&o.stderr)
    )
}

// ---------------------------------------------------------------------------
// systemd units

/// Where the units expect what they run once installed, and where it is here.
fn installed_paths() -> [(&'static str, String); 2] {
    [
        (
            "/usr/bin/spillway",
            env!("CARGO_BIN_EXE_spillway").to_owned(),
        ),
        (
            "/usr/lib/spillway/bind-nics.sh",
            deploy_dir().join("bind-nics.sh").display().to_string(),
        ),
    ]
}

const UNITS: &[&str] = &[
    "spillway.service",
    "spillway-bind-nics.service",
    "dev-hugepages1G.mount",
    "dev-hugepages2M.mount",
];
const DROP_INS: &[&str] = &[
    "spillway.service.d/bgp.conf",
    "bird.service.d/spillway.conf",
];

/// Copies the units and drop-ins into `dir`, with the installed paths
/// replaced by this checkout's (verify checks that every command exists).
fn stage_units(dir: &Path) {
    for f in UNITS.iter().chain(DROP_INS) {
        let mut s = std::fs::read_to_string(deploy_dir().join(f))
            .unwrap_or_else(|e| panic!("scripts/deploy/{f}: {e}"));
        for (from, to) in installed_paths() {
            s = s.replace(from, &to);
        }
        let dst = dir.join(f);
        std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
        std::fs::write(&dst, s).unwrap();
    }
}

fn verify(dir: &Path) -> Output {
    Command::new("systemd-analyze")
        .arg("verify")
        .arg("--man=no")
        .args(UNITS.iter().map(|u| dir.join(u)))
        .env("SYSTEMD_LOG_COLOR", "0")
        .output()
        .expect("run systemd-analyze (Debian package systemd; scripts/setup.sh installs it)")
}

#[test]
fn units_pass_systemd_analyze_verify() {
    let dir = tmp("units");
    stage_units(&dir);
    let out = verify(&dir);
    // verify exits 0 on unknown keys and other warnings: none may appear.
    assert!(
        out.status.success() && out.stderr.is_empty() && out.stdout.is_empty(),
        "systemd-analyze verify:\n{}",
        show(&out)
    );

    // The drop-ins are read: a key systemd does not know in each is reported.
    for d in DROP_INS {
        let p = dir.join(d);
        let good = std::fs::read_to_string(&p).unwrap();
        std::fs::write(&p, format!("{good}NoSuchKey=1\n")).unwrap();
        let out = verify(&dir);
        std::fs::write(&p, good).unwrap();
        assert!(
            text(&out.stderr).contains("NoSuchKey"),
            "{d} is not read by verify:\n{}",
            show(&out)
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The unit's lines `Key=value` of a file (comments skipped).
fn unit_values(file: &str, key: &str) -> Vec<String> {
    let s = std::fs::read_to_string(deploy_dir().join(file)).unwrap();
    s.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.strip_prefix(&format!("{key}=")))
        .map(str::to_owned)
        .collect()
}

#[test]
fn unit_commands_are_ones_the_binary_takes() {
    // Every Exec line running spillway parses: the same arguments with --help
    // appended exit 0 (an unknown subcommand or flag would be an error).
    let mut n = 0;
    for key in ["ExecStartPre", "ExecStart", "ExecReload"] {
        for line in unit_values("spillway.service", key) {
            let mut words = line.split_whitespace();
            assert_eq!(words.next(), Some("/usr/bin/spillway"), "{key}={line}");
            let out = Command::new(env!("CARGO_BIN_EXE_spillway"))
                .args(words)
                .arg("--help")
                .output()
                .unwrap();
            assert!(out.status.success(), "{key}={line}:\n{}", show(&out));
            n += 1;
        }
    }
    assert_eq!(n, 3);
    assert_eq!(
        unit_values("spillway.service", "ExecStart"),
        ["/usr/bin/spillway run --config /etc/spillway/spillway.toml"]
    );
    assert_eq!(
        unit_values("spillway.service", "ExecReload"),
        ["/usr/bin/spillway reload --config /etc/spillway/spillway.toml"]
    );
    assert_eq!(unit_values("spillway.service", "KillSignal"), ["SIGTERM"]);
    assert_eq!(unit_values("spillway.service", "Restart"), ["on-failure"]);
    assert_eq!(
        unit_values("spillway.service", "LimitMEMLOCK"),
        ["infinity"]
    );

    // TimeoutStopSec leaves shutdown_drain (the default, and the bare-metal
    // example's) at least 15 s to spare.
    let stop = unit_values("spillway.service", "TimeoutStopSec");
    let stop: u64 = stop[0].strip_suffix('s').unwrap().parse().unwrap();
    let example = std::fs::read_to_string(root().join("config/bare-metal-two-nic.toml")).unwrap();
    let drain = example
        .lines()
        .find_map(|l| l.strip_prefix("shutdown_drain = \""))
        .and_then(|l| l.split('"').next())
        .and_then(|l| l.strip_suffix('s'))
        .map(|l| l.parse::<u64>().unwrap())
        .expect("shutdown_drain in config/bare-metal-two-nic.toml");
    assert!(
        stop >= drain.max(30) + 15,
        "TimeoutStopSec {stop} s, shutdown_drain {drain} s"
    );

    // The bind unit binds the configuration's NICs.
    assert_eq!(
        unit_values("spillway-bind-nics.service", "ExecStart"),
        ["/usr/lib/spillway/bind-nics.sh --config /etc/spillway/spillway.toml"]
    );
}

// ---------------------------------------------------------------------------
// bind-nics.sh --dry-run on a fake sysfs

/// A sysfs with the bare-metal example's two NICs: 0000:3b:00.0 on ixgbe with
/// kernel interface eth1 (`eth1_state`), 0000:3b:00.1 without a driver, each
/// in its own IOMMU group unless `iommu` is false.
fn fake_sysfs(name: &str, eth1_state: &str, iommu: bool) -> PathBuf {
    use std::os::unix::fs::symlink;
    let fs = tmp(name);
    let devs = fs.join("bus/pci/devices");
    std::fs::create_dir_all(fs.join("bus/pci/drivers/ixgbe")).unwrap();
    for (i, dev) in ["0000:3b:00.0", "0000:3b:00.1"].iter().enumerate() {
        let d = devs.join(dev);
        std::fs::create_dir_all(&d).unwrap();
        if iommu {
            let g = fs.join(format!("kernel/iommu_groups/{}", 12 + i));
            std::fs::create_dir_all(&g).unwrap();
            symlink(&g, d.join("iommu_group")).unwrap();
        }
    }
    let d0 = devs.join("0000:3b:00.0");
    symlink(fs.join("bus/pci/drivers/ixgbe"), d0.join("driver")).unwrap();
    std::fs::create_dir_all(d0.join("net/eth1")).unwrap();
    std::fs::write(d0.join("net/eth1/operstate"), format!("{eth1_state}\n")).unwrap();
    std::fs::create_dir_all(fs.join("module/vfio/parameters")).unwrap();
    std::fs::write(
        fs.join("module/vfio/parameters/enable_unsafe_noiommu_mode"),
        "N\n",
    )
    .unwrap();
    fs
}

fn bind(fs: &Path, args: &[&str]) -> Output {
    script("bind-nics.sh", args, &[("SPILLWAY_SYSFS", fs)])
}

#[test]
fn bind_dry_run_says_what_it_would_do() {
    let fs = fake_sysfs("bind-ok", "down", true);
    let want = "would run: modprobe vfio-pci\n\
                would run: dpdk-devbind.py --bind=vfio-pci 0000:3b:00.0 0000:3b:00.1\n";
    // By address, short forms and upper case included, and from the example
    // configuration's [[ports]] (its TAP devices are no PCI devices).
    for args in [
        &["--dry-run", "0000:3b:00.0", "0000:3b:00.1"][..],
        &["--dry-run", "3B:00.0", "3b:00.1"],
        &["--dry-run", "--config", "config/bare-metal-two-nic.toml"],
    ] {
        let out = bind(&fs, args);
        assert_eq!(out.status.code(), Some(0), "{args:?}\n{}", show(&out));
        assert_eq!(text(&out.stdout), want, "{args:?}\n{}", show(&out));
        let err = text(&out.stderr);
        assert!(
            err.contains("0000:3b:00.0: on ixgbe now, to be bound to vfio-pci")
                && err.contains("kernel interface eth1 (down) goes away")
                && err.contains("0000:3b:00.1: no driver now"),
            "{}",
            show(&out)
        );
    }
    // Nothing changed in the fake sysfs.
    let link = std::fs::read_link(fs.join("bus/pci/devices/0000:3b:00.0/driver")).unwrap();
    assert!(link.ends_with("ixgbe"));

    // Devices already on vfio-pci are left alone; with the driver loaded no
    // modprobe either.
    std::fs::create_dir_all(fs.join("bus/pci/drivers/vfio-pci")).unwrap();
    let d1 = fs.join("bus/pci/devices/0000:3b:00.1");
    std::os::unix::fs::symlink(fs.join("bus/pci/drivers/vfio-pci"), d1.join("driver")).unwrap();
    let out = bind(&fs, &["--dry-run", "0000:3b:00.0", "0000:3b:00.1"]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert_eq!(
        text(&out.stdout),
        "would run: dpdk-devbind.py --bind=vfio-pci 0000:3b:00.0\n",
        "{}",
        show(&out)
    );
    assert!(text(&out.stderr).contains("0000:3b:00.1: already bound to vfio-pci"));
    let out = bind(&fs, &["--dry-run", "0000:3b:00.1"]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert_eq!(text(&out.stdout), "", "{}", show(&out));
    assert!(
        text(&out.stderr).contains("nothing to do"),
        "{}",
        show(&out)
    );
    let _ = std::fs::remove_dir_all(&fs);
}

#[test]
fn bind_refuses_with_clear_errors() {
    let fs = fake_sysfs("bind-errors", "up", true);
    let cases: &[(&[&str], i32, &str)] = &[
        (&["--dry-run"], 2, "no PCI address given"),
        (&["--dry-run", "--bogus"], 2, "unknown option --bogus"),
        (&["--dry-run", "eth1"], 2, "eth1 is not a PCI address"),
        (&["--dry-run", "0000:3b:00"], 2, "is not a PCI address"),
        (&["--dry-run", "--config"], 2, "--config needs a file"),
        (
            &["--dry-run", "0000:3b:00.2"],
            1,
            "no PCI device 0000:3b:00.2 on this machine",
        ),
        (
            &["--dry-run", "--config", "/nonexistent/spillway.toml"],
            1,
            "cannot read /nonexistent/spillway.toml",
        ),
        // The kernel's interface is up: maybe the way in; --force overrides.
        (
            &["--dry-run", "0000:3b:00.0"],
            1,
            "kernel's interface eth1, which is up",
        ),
    ];
    for (args, code, msg) in cases {
        let out = bind(&fs, args);
        assert_eq!(out.status.code(), Some(*code), "{args:?}\n{}", show(&out));
        assert!(
            text(&out.stderr).contains(msg),
            "{args:?}: want {msg:?}\n{}",
            show(&out)
        );
        assert_eq!(
            text(&out.stdout),
            "",
            "{args:?}: nothing done\n{}",
            show(&out)
        );
    }
    // A configuration of virtual devices only has nothing to bind, which is
    // fine (spillway.service requires the bind unit whatever the ports).
    let out = bind(&fs, &["--dry-run", "--config", "config/lab.toml"]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert_eq!(text(&out.stdout), "", "{}", show(&out));
    assert!(
        text(&out.stderr).contains("no [[ports]] device that is a PCI address"),
        "{}",
        show(&out)
    );
    let out = bind(&fs, &["--dry-run", "--force", "0000:3b:00.0"]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert!(
        text(&out.stdout).contains("dpdk-devbind.py --bind=vfio-pci --force 0000:3b:00.0"),
        "{}",
        show(&out)
    );
    let _ = std::fs::remove_dir_all(&fs);
}

#[test]
fn bind_without_iommu_explains_and_noiommu_mode_is_opt_in() {
    let fs = fake_sysfs("bind-noiommu", "down", false);
    let out = bind(&fs, &["--dry-run", "0000:3b:00.1"]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let err = text(&out.stderr);
    for want in [
        "no IOMMU groups",
        "intel_iommu=on",
        "amd_iommu=on",
        "--noiommu",
        "CAP_SYS_RAWIO",
    ] {
        assert!(err.contains(want), "want {want:?}\n{}", show(&out));
    }
    assert_eq!(text(&out.stdout), "");

    let out = bind(&fs, &["--dry-run", "--noiommu", "0000:3b:00.1"]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let param = fs.join("module/vfio/parameters/enable_unsafe_noiommu_mode");
    assert_eq!(
        text(&out.stdout),
        format!(
            "would write: 1 > {}\nwould run: modprobe vfio-pci\n\
             would run: dpdk-devbind.py --bind=vfio-pci 0000:3b:00.1\n",
            param.display()
        ),
        "{}",
        show(&out)
    );
    assert!(
        text(&out.stderr).contains("WARNING: no IOMMU"),
        "{}",
        show(&out)
    );
    assert_eq!(
        std::fs::read_to_string(&param).unwrap(),
        "N\n",
        "dry run wrote nothing"
    );
    let _ = std::fs::remove_dir_all(&fs);
}

// ---------------------------------------------------------------------------
// isolate-cpus.sh

fn isolate(args: &[&str]) -> Output {
    script("isolate-cpus.sh", args, &[])
}

#[test]
fn isolate_cpus_prints_the_kernel_command_line() {
    let cases: &[(&[&str], &str)] = &[
        // The example's cores (0 and 1) on an eight-CPU machine.
        (
            &["--config", "config/bare-metal-two-nic.toml", "--cpus", "8"],
            "isolcpus=managed_irq,domain,1 nohz_full=1 rcu_nocbs=1 irqaffinity=0,2-7",
        ),
        (
            &["--management", "1", "--workers", "2-5", "--cpus", "16"],
            "isolcpus=managed_irq,domain,2-5 nohz_full=2-5 rcu_nocbs=2-5 irqaffinity=0-1,6-15",
        ),
        (
            &[
                "--management",
                "1",
                "--workers",
                "9,3,2,10,8",
                "--cpus",
                "12",
            ],
            "isolcpus=managed_irq,domain,2-3,8-10 nohz_full=2-3,8-10 rcu_nocbs=2-3,8-10 \
             irqaffinity=0-1,4-7,11",
        ),
    ];
    for (args, want) in cases {
        let out = isolate(args);
        assert_eq!(out.status.code(), Some(0), "{args:?}\n{}", show(&out));
        assert_eq!(text(&out.stdout), format!("{want}\n"), "{args:?}");
        let err = text(&out.stderr);
        assert!(
            err.contains("GRUB_CMDLINE_LINUX") && err.contains("update-grub"),
            "{args:?}: instructions\n{}",
            show(&out)
        );
    }

    // A configuration whose worker_cores span lines, with comments, and
    // another table after [dataplane]; and one that sets neither (defaults
    // 0 and [1]).
    let dir = tmp("isolate");
    let multi = dir.join("multi.toml");
    std::fs::write(
        &multi,
        "[node]\nname = \"n\" # worker_cores = [7]\n\n[dataplane]\nmanagement_core = 1   # mgmt\n\
         worker_cores = [\n  2, 3,  # two\n  5,\n]\n\n[dataplane.timeouts]\nudp = \"10s\"\n",
    )
    .unwrap();
    let defaults = dir.join("defaults.toml");
    std::fs::write(&defaults, "[node]\nname = \"n\"\n").unwrap();
    let out = isolate(&["--config", multi.to_str().unwrap(), "--cpus", "8"]);
    assert_eq!(
        text(&out.stdout),
        "isolcpus=managed_irq,domain,2-3,5 nohz_full=2-3,5 rcu_nocbs=2-3,5 irqaffinity=0-1,4,6-7\n",
        "{}",
        show(&out)
    );
    let out = isolate(&["--config", defaults.to_str().unwrap(), "--cpus", "4"]);
    assert_eq!(
        text(&out.stdout),
        "isolcpus=managed_irq,domain,1 nohz_full=1 rcu_nocbs=1 irqaffinity=0,2-3\n",
        "{}",
        show(&out)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn isolate_cpus_rejects_cores_that_do_not_fit() {
    let cases: &[(&[&str], i32, &str)] = &[
        (&[], 2, "--management CORE is missing"),
        (&["--management", "1"], 2, "--workers LIST is missing"),
        (&["--bogus"], 2, "unknown argument --bogus"),
        (
            &["--management", "0", "--workers", "1", "--cpus", "0"],
            2,
            "expected a number of CPUs",
        ),
        (
            &[
                "--config",
                "config/lab.toml",
                "--management",
                "1",
                "--workers",
                "2",
            ],
            2,
            "not both",
        ),
        (
            &["--config", "/nonexistent.toml"],
            1,
            "cannot read /nonexistent.toml",
        ),
        (
            &["--management", "1", "--workers", "1,2", "--cpus", "4"],
            1,
            "core 1 (from the command line) is both the management core and a worker",
        ),
        (
            &["--management", "1", "--workers", "2,9", "--cpus", "4"],
            1,
            "worker core 9 (from the command line) does not exist: the machine has 4 CPUs (0-3)",
        ),
        (
            &["--management", "9", "--workers", "2", "--cpus", "4"],
            1,
            "management core 9 (from the command line) does not exist",
        ),
        (
            &["--management", "1", "--workers", "2,2", "--cpus", "4"],
            1,
            "worker core 2 (from the command line) is listed twice",
        ),
        (
            &["--management", "1", "--workers", "0,2", "--cpus", "4"],
            1,
            "core 0 (from the command line) cannot be a worker",
        ),
        (
            &["--management", "1", "--workers", "x", "--cpus", "4"],
            1,
            "\"x\" is not a core number or range",
        ),
        (
            &["--management", "1", "--workers", "5-3", "--cpus", "8"],
            1,
            "a range runs from low to high",
        ),
        (
            &["--management", "a", "--workers", "2", "--cpus", "4"],
            1,
            "management core \"a\" (from the command line) is not a core number",
        ),
    ];
    for (args, code, msg) in cases {
        let out = isolate(args);
        assert_eq!(out.status.code(), Some(*code), "{args:?}\n{}", show(&out));
        assert!(
            text(&out.stderr).contains(msg),
            "{args:?}: want {msg:?}\n{}",
            show(&out)
        );
        assert_eq!(text(&out.stdout), "", "{args:?}\n{}", show(&out));
    }
    // A configuration's cores are named as coming from it.
    let dir = tmp("isolate-bad");
    let f = dir.join("bad.toml");
    std::fs::write(
        &f,
        "[dataplane]\nmanagement_core = 2\nworker_cores = [2, 3]\n",
    )
    .unwrap();
    let out = isolate(&["--config", f.to_str().unwrap(), "--cpus", "4"]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(
        text(&out.stderr).contains(&format!("core 2 (from {}) is both", f.display())),
        "{}",
        show(&out)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
