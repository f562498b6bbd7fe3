//! The Debian package (`scripts/package.sh`; docs/deploy.md, "Install"),
//! installed into a fresh Debian root the way an operator installs it, and
//! purged again.
//!
//! One test, in order: `scripts/package.sh` builds the package (a release
//! build: `scripts/test.sh` makes it before the parallel test run, so here it
//! is only packed); `debootstrap --variant=minbase` makes a root of this
//! machine's Debian release from this machine's mirror; `apt-get install
//! ./spillway_….deb` there resolves the package's Depends from the mirror.
//! Then, inside the root: the files are where the documentation says,
//! `spillway --version` runs on the libraries the Depends brought,
//! `check-config` accepts the shipped example (as the user `spillway`, whom
//! the postinst made, and not as another user), nothing is enabled, DPDK
//! starts with the installed plugins (a packet pool on the ring mempool and
//! a TAP port, in a network namespace of its own), and `systemd-analyze
//! verify` passes the installed units with the BGP drop-ins linked as the
//! documentation says. Last, `apt-get remove --purge` leaves no file of the
//! package, no user or group `spillway` and no statoverride.
//!
//! Nothing is mounted in the root but inside `unshare --mount` (private
//! mounts that end with the command); the root is a unique directory removed
//! at the end, also on failure, and never across another file system. The
//! time of each step is printed (nextest shows it: .config/nextest.toml).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

mod common;

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Instant;

use common::{output, report, run_ok};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A fresh directory for the Debian root, removed on drop: first whatever is
/// still mounted beneath it (debootstrap mounts /proc and /sys while it
/// works; an interrupted run may leave them), then the tree, never crossing
/// into another file system.
struct Root {
    dir: PathBuf,
}

impl Root {
    fn new() -> Root {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let dir =
            std::env::temp_dir().join(format!("spillway-package-{}-{nanos:x}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Root { dir }
    }

    /// `path` (absolute, as seen inside the root) on the host.
    fn path(&self, path: &str) -> PathBuf {
        self.dir.join(path.trim_start_matches('/'))
    }

    /// A command run inside the root (`chroot`), non-interactive, in the C
    /// locale.
    fn cmd(&self, args: &[&str]) -> Command {
        self.cmd_as(None, args)
    }

    /// [`Root::cmd`] as `uid:gid` when given.
    fn cmd_as(&self, ids: Option<&str>, args: &[&str]) -> Command {
        let mut c = Command::new("chroot");
        if let Some(ids) = ids {
            c.arg(format!("--userspec={ids}"));
        }
        c.arg(&self.dir).args(args);
        c.env("DEBIAN_FRONTEND", "noninteractive")
            .env("LC_ALL", "C")
            .env(
                "PATH",
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            );
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        run_ok(&mut self.cmd(args))
    }

    /// `apt-get ARGS…` inside the root, without a terminal.
    fn apt(&self, args: &[&str]) -> Output {
        let mut a = vec!["apt-get", "-q", "-y", "-o", "Dpkg::Use-Pty=0"];
        a.extend(args);
        self.run(&a)
    }

    /// The mount points at or beneath the root, deepest first.
    fn mounts(&self) -> Vec<String> {
        let dir = self.dir.to_string_lossy().into_owned();
        let mut v: Vec<String> = std::fs::read_to_string("/proc/self/mounts")
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split_whitespace().nth(1))
            // /proc/self/mounts writes a space in a path as \040; the root's
            // path has none.
            .filter(|m| *m == dir || m.starts_with(&format!("{dir}/")))
            .map(str::to_owned)
            .collect();
        v.sort_by_key(|m| std::cmp::Reverse(m.len()));
        v
    }
}

impl Drop for Root {
    fn drop(&mut self) {
        for m in self.mounts() {
            let _ = Command::new("umount").args(["--lazy", &m]).status();
        }
        let left = self.mounts();
        if left.is_empty() {
            let _ = Command::new("rm")
                .args(["-rf", "--one-file-system"])
                .arg(&self.dir)
                .status();
        } else {
            eprintln!(
                "package test: {} still has mounts {left:?}; left in place",
                self.dir.display()
            );
        }
    }
}

/// The host's Debian release (`VERSION_CODENAME` of /etc/os-release): the
/// package links this machine's DPDK, so it is for this release.
fn codename() -> String {
    let os = std::fs::read_to_string("/etc/os-release").unwrap();
    os.lines()
        .find_map(|l| l.strip_prefix("VERSION_CODENAME="))
        .map(|v| v.trim_matches('"').to_owned())
        .filter(|v| !v.is_empty())
        .expect("VERSION_CODENAME in /etc/os-release")
}

/// The mirror this machine's apt uses for `suite` (its sources are the only
/// package registry it may reach): the first `deb` entry of
/// /etc/apt/sources.list, sources.list.d/*.list (one-line format) or
/// sources.list.d/*.sources (deb822) whose suites include it.
fn mirror(suite: &str) -> String {
    let mut files = vec![PathBuf::from("/etc/apt/sources.list")];
    if let Ok(dir) = std::fs::read_dir("/etc/apt/sources.list.d") {
        let mut more: Vec<PathBuf> = dir.flatten().map(|e| e.path()).collect();
        more.sort();
        files.extend(more);
    }
    for f in files {
        let Ok(s) = std::fs::read_to_string(&f) else {
            continue;
        };
        let found = if f.extension().is_some_and(|e| e == "sources") {
            deb822_mirror(&s, suite)
        } else {
            one_line_mirror(&s, suite)
        };
        if let Some(m) = found {
            return m;
        }
    }
    panic!("no apt source for {suite} in /etc/apt/sources.list or sources.list.d");
}

fn one_line_mirror(s: &str, suite: &str) -> Option<String> {
    s.lines().find_map(|l| {
        let mut w = l.split_whitespace().filter(|w| !w.starts_with('['));
        (w.next() == Some("deb"))
            .then(|| (w.next(), w.next()))
            .and_then(|(uri, s)| (s == Some(suite)).then_some(uri?.to_owned()))
    })
}

fn deb822_mirror(s: &str, suite: &str) -> Option<String> {
    s.split("\n\n").find_map(|stanza| {
        let field = |name: &str| {
            stanza
                .lines()
                .find_map(|l| l.strip_prefix(name).map(str::trim).map(str::to_owned))
        };
        let debs = field("Types:").is_some_and(|t| t.split_whitespace().any(|t| t == "deb"));
        let has = field("Suites:").is_some_and(|s| s.split_whitespace().any(|s| s == suite));
        let uri = field("URIs:")?;
        (debs && has).then(|| uri.split_whitespace().next().unwrap_or_default().to_owned())
    })
}

/// Runs `step`, printing how long it took.
fn timed<T>(
    times: &mut Vec<(&'static str, f64)>,
    name: &'static str,
    step: impl FnOnce() -> T,
) -> T {
    let t = Instant::now();
    let r = step();
    let s = t.elapsed().as_secs_f64();
    eprintln!("package test: {name}: {s:.1} s");
    times.push((name, s));
    r
}

/// The units the package installs (enabled by nobody) and the drop-ins it
/// ships for BGP nodes, linked where docs/deploy.md links them.
const UNITS: &[&str] = &[
    "spillway.service",
    "spillway-bind-nics.service",
    "dev-hugepages1G.mount",
    "dev-hugepages2M.mount",
];
const DROP_INS: &[(&str, &str)] = &[
    (
        "/usr/share/spillway/systemd/spillway.service.d/bgp.conf",
        "/etc/systemd/system/spillway.service.d/bgp.conf",
    ),
    (
        "/usr/share/spillway/systemd/bird.service.d/spillway.conf",
        "/etc/systemd/system/bird.service.d/spillway.conf",
    ),
];

/// Files the package must hold, where docs/deploy.md and the units say.
const FILES: &[&str] = &[
    "/usr/bin/spillway",
    "/usr/lib/spillway/bind-nics.sh",
    "/usr/lib/spillway/isolate-cpus.sh",
    "/usr/lib/systemd/system/spillway.service",
    "/usr/lib/systemd/system/spillway-bind-nics.service",
    "/usr/lib/systemd/system/dev-hugepages1G.mount",
    "/usr/lib/systemd/system/dev-hugepages2M.mount",
    "/usr/lib/udev/rules.d/60-spillway-vfio.rules",
    "/usr/share/spillway/systemd/spillway.service.d/bgp.conf",
    "/usr/share/spillway/systemd/bird.service.d/spillway.conf",
    "/usr/share/spillway/sysctl.d/80-spillway-hugepages.conf",
    "/etc/spillway/spillway.toml",
    "/usr/share/doc/spillway/deploy.md",
    "/usr/share/doc/spillway/examples/reference.toml",
    "/usr/share/man/man1/spillway.1.gz",
    "/usr/share/man/man1/spillway-check-config.1.gz",
    "/usr/share/man/man1/spillway-status.1.gz",
    "/usr/share/man/man1/spillway-zone-health-status.1.gz",
    "/usr/share/bash-completion/completions/spillway",
    "/usr/share/zsh/vendor-completions/_spillway",
    "/usr/share/fish/vendor_completions.d/spillway.fish",
];

#[test]
fn the_package_installs_runs_and_purges_cleanly_in_a_fresh_debian_root() {
    let mut times = Vec::new();
    let total = Instant::now();

    // The package. `--fast`: lighter compression, the same files.
    let mut pack = Command::new(repo().join("scripts/package.sh"));
    pack.arg("--fast").current_dir(repo());
    let out = timed(&mut times, "scripts/package.sh --fast", || {
        run_ok(&mut pack)
    });
    let deb = PathBuf::from(text(&out.stdout).trim());
    let name = deb.file_name().unwrap().to_string_lossy().into_owned();
    let version = env!("CARGO_PKG_VERSION");
    assert!(
        name.starts_with(&format!("spillway_{version}")) && name.ends_with("_amd64.deb"),
        "{}",
        deb.display()
    );
    let control = run_ok(
        Command::new("dpkg-deb")
            .args(["--field"])
            .arg(&deb)
            .arg("Depends"),
    );
    let depends = text(&control.stdout);
    for lib in [
        "librte-eal23",
        "librte-ethdev23",
        "librte-mempool-ring23",
        "librte-net-tap23",
    ] {
        assert!(depends.contains(lib), "Depends lacks {lib}: {depends}");
    }

    // A fresh root of this machine's release, from its mirror.
    let root = Root::new();
    let suite = codename();
    let mirror = mirror(&suite);
    let mut boot = Command::new("debootstrap");
    boot.args(["--variant=minbase", &suite])
        .arg(&root.dir)
        .arg(&mirror);
    timed(&mut times, "debootstrap --variant=minbase", || {
        let out = output(&mut boot);
        assert!(
            out.status.success(),
            "(debootstrap: Debian package debootstrap, scripts/setup.sh installs it)\n{}",
            report(&boot, &out)
        );
    });

    // Installed as docs/deploy.md says: apt resolves the Depends.
    std::fs::copy(&deb, root.path(&format!("/tmp/{name}"))).unwrap();
    timed(&mut times, "apt-get install ./spillway_….deb", || {
        root.apt(&["update"]);
        root.apt(&[
            "install",
            "--no-install-recommends",
            &format!("/tmp/{name}"),
        ]);
    });
    std::fs::remove_file(root.path(&format!("/tmp/{name}"))).unwrap();

    timed(&mut times, "checks of the installed package", || {
        check_installed(&root, version);
    });
    timed(&mut times, "DPDK on the installed plugins", || {
        check_dpdk(&root)
    });
    timed(&mut times, "apt-get install systemd bird2; verify", || {
        check_units(&root);
    });

    let files = text(&root.run(&["dpkg", "--listfiles", "spillway"]).stdout);
    timed(&mut times, "apt-get remove --purge spillway", || {
        root.apt(&["remove", "--purge", "spillway"]);
    });
    check_purged(&root, &files);

    let total = total.elapsed().as_secs_f64();
    eprintln!(
        "package test: total {total:.1} s ({})",
        times
            .iter()
            .map(|(n, s)| format!("{n} {s:.1} s"))
            .collect::<Vec<_>>()
            .join(", ")
    );
}

fn check_installed(root: &Root, version: &str) {
    for f in FILES {
        assert!(root.path(f).is_file(), "the package installs {f}");
    }
    let v = text(&root.run(&["spillway", "--version"]).stdout);
    assert!(
        v.starts_with(&format!("spillway {version} ")) && v.contains("linked against DPDK"),
        "{v}"
    );

    // The user and group of the postinst: a system user without a login.
    let user = text(&root.run(&["getent", "passwd", "spillway"]).stdout);
    let fields: Vec<&str> = user.trim().split(':').collect();
    assert_eq!(fields.len(), 7, "{user}");
    assert!(
        fields[2].parse::<u32>().unwrap() < 1000,
        "a system user: {user}"
    );
    assert_eq!(fields[6], "/usr/sbin/nologin", "{user}");
    let group = text(&root.run(&["getent", "group", "spillway"]).stdout);
    assert_eq!(
        group.split(':').nth(2),
        Some(fields[3]),
        "the user's own group: {user} {group}"
    );

    // /etc/spillway: root:spillway 0750, the conffile 0640.
    let stat = text(
        &root
            .run(&[
                "stat",
                "-c",
                "%n %U:%G %a",
                "/etc/spillway",
                "/etc/spillway/spillway.toml",
            ])
            .stdout,
    );
    assert_eq!(
        stat,
        "/etc/spillway root:spillway 750\n/etc/spillway/spillway.toml root:spillway 640\n"
    );
    let conffiles = text(
        &root
            .run(&["dpkg-query", "-W", "-f=${Conffiles}", "spillway"])
            .stdout,
    );
    assert!(
        conffiles.contains("/etc/spillway/spillway.toml"),
        "{conffiles}"
    );

    // The shipped example is valid, for the daemon's user too; another user
    // cannot read it.
    let check = ["spillway", "check-config", "/etc/spillway/spillway.toml"];
    let daemon = format!("{}:{}", fields[2], fields[3]);
    for ids in [None, Some(daemon.as_str())] {
        let out = run_ok(&mut root.cmd_as(ids, &check));
        assert!(
            text(&out.stdout).contains("/etc/spillway/spillway.toml: configuration is valid"),
            "{ids:?}: {}",
            text(&out.stdout)
        );
    }
    let mut nobody = root.cmd_as(Some("65534:65534"), &check);
    let out = output(&mut nobody);
    assert!(
        !out.status.success() && text(&out.stderr).contains("ermission denied"),
        "{}",
        report(&nobody, &out)
    );

    // Installed, not enabled and not started: no unit of the package is
    // wanted by any target.
    let wants = text(
        &root
            .run(&["find", "/etc/systemd/system", "-name", "*.wants"])
            .stdout,
    );
    for dir in wants.lines() {
        for e in std::fs::read_dir(root.path(dir)).unwrap().flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            assert!(
                !UNITS.contains(&n.as_str()),
                "{dir}/{n}: enabled on install"
            );
        }
    }

    // The man pages are readable pages, the completions load.
    let page = std::fs::read(root.path("/usr/share/man/man1/spillway-status.1.gz")).unwrap();
    assert_eq!(&page[..2], &[0x1f, 0x8b], "gzip");
    let bash =
        std::fs::read_to_string(root.path("/usr/share/bash-completion/completions/spillway"))
            .unwrap();
    assert!(
        bash.contains("complete -F") && bash.contains("check-config"),
        "{bash}"
    );
}

/// DPDK starts from what the package's Depends installed: EAL loads its
/// plugins, the packet pool is made on the ring mempool
/// (librte-mempool-ring23), and a TAP port (librte-bus-vdev23,
/// librte-net-tap23) starts and stops. In a mount and network namespace of
/// its own: /proc, /sys and /dev/net/tun are mounted there only, and the TAP
/// interface never shows on the host.
fn check_dpdk(root: &Root) {
    let r = root.dir.display();
    let script = format!(
        "set -e; mount -t proc proc {r}/proc; mount -t sysfs sysfs {r}/sys; \
         mkdir -p {r}/dev/net; touch {r}/dev/net/tun; mount --bind /dev/net/tun {r}/dev/net/tun; \
         exec chroot {r} spillway forward --rx net_tap0 --tx net_tap0 --idle-ms 100 \
         --max-seconds 5 -- -l 0 --no-huge --no-shconf -m 256 --no-pci --no-telemetry \
         --vdev=net_tap0,iface=spwpkg0"
    );
    let mut c = Command::new("unshare");
    c.args(["--mount", "--net", "--fork", "sh", "-c", &script]);
    let out = output(&mut c);
    let o = text(&out.stdout);
    assert!(
        out.status.success()
            && o.contains("spillway forward: net_tap0 (net_tap,")
            && o.contains("mempool spillway_fwd:"),
        "{}",
        report(&c, &out)
    );
}

/// The installed units pass `systemd-analyze verify` (systemd and BIRD
/// installed the way a BGP node has them), with the BGP drop-ins linked as
/// docs/deploy.md says; systemd reads both drop-ins.
fn check_units(root: &Root) {
    root.apt(&["install", "--no-install-recommends", "systemd", "bird2"]);
    for (shipped, link) in DROP_INS {
        let link = root.path(link);
        std::fs::create_dir_all(link.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(shipped, &link).unwrap();
    }
    let mut args = vec!["systemd-analyze", "verify", "--man=no"];
    args.extend(UNITS);
    args.push("bird.service");
    let mut verify = root.cmd(&args);
    verify.env("SYSTEMD_LOG_COLOR", "0");
    let out = output(&mut verify);
    // verify exits 0 on unknown keys and other warnings: none may appear.
    assert!(
        out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
        "{}",
        report(&verify, &out)
    );
    let delta = text(
        &root
            .run(&["systemd-delta", "--no-pager", "--type=extended"])
            .stdout,
    );
    for (unit, (_, link)) in ["spillway.service", "bird.service"].iter().zip(DROP_INS) {
        // "[EXTENDED] /usr/lib/systemd/system/UNIT -> LINK" ("→" in UTF-8).
        assert!(
            delta.lines().any(|l| l.starts_with("[EXTENDED]")
                && l.contains(&format!(" /usr/lib/systemd/system/{unit} "))
                && l.ends_with(&format!(" {link}"))),
            "{unit} extended by {link}:\n{delta}"
        );
    }
}

/// After the purge: no file of the package (a directory that remains is
/// another package's too), no user or group, no statoverride, no drop-in link.
fn check_purged(root: &Root, files: &str) {
    let mut left = Vec::new();
    for f in files.lines().filter(|f| f.starts_with('/') && *f != "/.") {
        let p = root.path(f);
        if p.symlink_metadata().is_ok() {
            left.push(f);
        }
    }
    // dpkg keeps a directory that another package owns, or that holds other
    // packages' files (through the /lib → /usr/lib alias, say).
    let dirs: Vec<&str> = left
        .iter()
        .copied()
        .filter(|f| root.path(f).is_dir() && !root.path(f).is_symlink())
        .collect();
    let files_left: Vec<&&str> = left.iter().filter(|f| !dirs.contains(f)).collect();
    assert!(files_left.is_empty(), "left by the purge: {files_left:?}");
    let empty: Vec<&str> = dirs
        .iter()
        .copied()
        .filter(|d| std::fs::read_dir(root.path(d)).unwrap().next().is_none())
        .collect();
    if !empty.is_empty() {
        let mut args = vec!["dpkg-query", "--search"];
        args.extend(empty.iter().copied());
        let mut search = root.cmd(&args);
        let out = output(&mut search);
        for d in &empty {
            assert!(
                text(&out.stdout)
                    .lines()
                    .any(|l| l.ends_with(&format!(": {d}"))),
                "{d} remains, empty, and is no other package's:\n{}",
                report(&search, &out)
            );
        }
    }
    for db in ["passwd", "group"] {
        let out = output(&mut root.cmd(&["getent", db, "spillway"]));
        assert_eq!(out.status.code(), Some(2), "{db}: {}", text(&out.stdout));
    }
    let overrides = text(&root.run(&["dpkg-statoverride", "--list"]).stdout);
    assert!(!overrides.contains("spillway"), "{overrides}");
    for (_, link) in DROP_INS {
        assert!(root.path(link).symlink_metadata().is_err(), "{link} left");
    }
    assert!(!root.path("/etc/spillway").exists(), "/etc/spillway left");
}

#[test]
fn mirrors_are_read_from_both_source_formats() {
    let one = "# comment\ndeb [arch=amd64] http://mirror.example/debian bookworm main\n\
               deb http://security.example/debian-security bookworm-security main\n";
    assert_eq!(
        one_line_mirror(one, "bookworm").as_deref(),
        Some("http://mirror.example/debian")
    );
    assert_eq!(one_line_mirror(one, "trixie"), None);
    let deb822 = "Types: deb\nURIs: http://deb.example/debian\nSuites: bookworm bookworm-updates\n\
                  Components: main\n\nTypes: deb\nURIs: http://sec.example/debian-security\n\
                  Suites: bookworm-security\n";
    assert_eq!(
        deb822_mirror(deb822, "bookworm").as_deref(),
        Some("http://deb.example/debian")
    );
    assert_eq!(
        deb822_mirror(deb822, "bookworm-updates").as_deref(),
        Some("http://deb.example/debian")
    );
    assert_eq!(deb822_mirror(deb822, "trixie"), None);
    assert_eq!(
        deb822_mirror(
            "Types: deb-src\nURIs: http://x/\nSuites: bookworm\n",
            "bookworm"
        ),
        None
    );
}
