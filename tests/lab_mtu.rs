//! M48 with real kernels, in the namespace lab of scripts/lab.sh with
//! `LAB_JUMBO=1` (MTU 9000 from the client to the backends): a GUE flow of
//! ~8900-byte packets reaches a real backend and back, and a packet that no
//! longer fits once encapsulated (9000 + 28 bytes of GUE over the backend
//! port's 9000) is answered with ICMP "fragmentation needed": the client's
//! kernel learns the path MTU (`ip route get` shows it) and its TCP carries
//! on below it. Needs root.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

const VIP: &str = "198.18.10.10";
/// GUE over IPv4: outer IPv4 and UDP headers.
const GUE_OVERHEAD: u32 = 28;

struct Lab {
    dir: PathBuf,
    script: PathBuf,
    tag: String,
}

impl Lab {
    fn up(mode: &str) -> Lab {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let script = root.join("scripts/lab.sh");
        let dir =
            std::env::temp_dir().join(format!("spillway-labmtu-{mode}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let bin = Path::new(env!("CARGO_BIN_EXE_spillway"))
            .parent()
            .expect("bin dir")
            .to_owned();
        let mut up = Command::new("bash");
        up.env("LAB_JUMBO", "1")
            .arg(&script)
            .args(["up", mode])
            .arg(&dir)
            .arg(&bin);
        let out = common::output(&mut up);
        // Made before the check: a half-built lab is taken down too.
        let mut lab = Lab {
            dir: dir.clone(),
            script,
            tag: String::new(),
        };
        assert!(
            out.status.success(),
            "lab up failed: {}",
            common::report(&up, &out)
        );
        lab.tag = std::fs::read_to_string(dir.join("tag"))
            .expect("tag")
            .trim()
            .to_owned();
        lab
    }

    fn ns(&self, name: &str) -> String {
        format!("spw{}{name}", self.tag)
    }

    /// Runs `cmd` (an `ip netns exec` naming its program, for the command
    /// scan of tests/commands.rs); its stdout.
    fn stdout(cmd: &mut Command) -> String {
        let out = common::run_ok(cmd);
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// From the client, one connection to the VIP's echo port (7) sending a
    /// line of `len` bytes (with `mss`, TCP_MAXSEG set first): the length of
    /// the line that came back, or an error text.
    fn echo(&self, len: usize, mss: Option<u32>) -> String {
        let script = r#"
import socket, sys
vip, n, mss = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
s = socket.socket()
if mss:
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, mss)
s.settimeout(10)
s.connect((vip, 7))
s.sendall(b"x" * n + b"\n")
got = b""
while not got.endswith(b"\n"):
    b = s.recv(65536)
    if not b:
        break
    got += b
print(len(got.split(b" ", 1)[-1]) - 1)
"#;
        let mss = mss.unwrap_or(0).to_string();
        let len = len.to_string();
        Lab::stdout(Command::new("ip").args([
            "netns",
            "exec",
            &self.ns("c"),
            "python3",
            "-c",
            script,
            VIP,
            &len,
            &mss,
        ]))
        .trim()
        .to_owned()
    }

    fn stats(&self) -> String {
        // Workers publish their counters about every 100 ms.
        std::thread::sleep(std::time::Duration::from_millis(500));
        let out = common::run_ok(
            Command::new(env!("CARGO_BIN_EXE_spillway"))
                .args(["stats", "--socket"])
                .arg(self.dir.join("control.sock")),
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(&self.script)
            .arg("down")
            .arg(&self.dir)
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The number after `label` in `text` (`"icmp too big "` → N).
fn count(text: &str, label: &str) -> u64 {
    text.split(label)
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no {label:?} in {text}"))
}

#[test]
fn lab_jumbo_frames_go_through_and_too_big_ones_teach_the_client_the_path_mtu() {
    let lab = Lab::up("gue");
    println!(
        "client route before: {}",
        Lab::stdout(Command::new("ip").args([
            "netns",
            "exec",
            &lab.ns("c"),
            "ip",
            "route",
            "get",
            VIP,
        ]))
        .trim()
    );
    // ~8900-byte packets: segments of 8848 bytes of payload (TCP_MAXSEG),
    // 8900 IP bytes with headers and timestamps, 8928 once in GUE.
    let n = 100_000;
    let got = lab.echo(n, Some(8848));
    assert_eq!(
        got,
        n.to_string(),
        "the echo of {n} bytes in ~8900-byte packets"
    );
    let s = lab.stats();
    println!("after the ~8900-byte flow:\n{s}");
    assert_eq!(count(&s, "icmp too big "), 0, "nothing was too big: {s}");
    let forwarded = count(&s, "forwarded ");
    assert!(forwarded >= 12, "{n} bytes took at least 12 packets: {s}");

    // Full-size segments (MSS 8960: 9000-byte packets) no longer fit once
    // encapsulated: the balancer answers the first with "fragmentation
    // needed" advertising 9000 - 28, the client's kernel lowers its path MTU
    // and its TCP retransmits in smaller segments.
    let got = lab.echo(n, None);
    assert_eq!(got, n.to_string(), "the echo still completes");
    let s = lab.stats();
    println!("after the full-size flow:\n{s}");
    let answered = count(&s, "icmp too big ");
    assert!(answered >= 1, "the balancer sent ICMP too big: {s}");
    let route = Lab::stdout(Command::new("ip").args([
        "netns",
        "exec",
        &lab.ns("c"),
        "ip",
        "route",
        "get",
        VIP,
    ]));
    println!("client route after: {}", route.trim());
    let want = format!("mtu {}", 9000 - GUE_OVERHEAD);
    assert!(
        route.contains(&want),
        "the client learned the path MTU ({want}): {route}"
    );
    println!(
        "ICMP too big sent: {answered}; forwarded: {}",
        count(&s, "forwarded ")
    );
}
