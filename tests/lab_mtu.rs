//! M48 with real kernels, in the namespace lab of scripts/lab.sh with
//! `LAB_JUMBO=1` (MTU 9000 from the client to the backends): a GUE flow of
//! ~8900-byte packets reaches a real backend and back, and a packet that no
//! longer fits once encapsulated (9000 + 28 bytes of GUE over the backend
//! port's 9000) is answered with ICMP "fragmentation needed": the client's
//! kernel learns the path MTU (`ip route get` shows it) and its TCP carries
//! on below it. And with a 1,500-byte backend side (`LAB_BE_MTU=1500`), a
//! 1,500-byte UDP datagram without DF (1,528 bytes once in GUE) reaches the
//! backend's server whole: the balancer sends it in two fragments, each
//! within the MTU once encapsulated, the backend's `spillway decap` hands
//! both to its kernel, which reassembles them (issue 38 item 14). Needs
//! root.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

mod common;

use std::process::Command;

use common::lab::{self, LAB_SH, Lab};

const VIP: &str = "198.18.10.10";
/// GUE over IPv4: outer IPv4 and UDP headers.
const GUE_OVERHEAD: u32 = 28;

/// The lab of scripts/lab.sh in `mode` with MTU 9000 on the client side too.
fn up(mode: &str) -> Lab {
    Lab::up(&LAB_SH, &[mode], &[("LAB_JUMBO", "1")])
}

/// Runs `cmd` (an `ip netns exec` naming its program, for the command
/// scan of tests/commands.rs); its stdout.
fn stdout(cmd: &mut Command) -> String {
    let out = common::run_ok(cmd);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

impl Lab {
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
        stdout(Command::new("ip").args([
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
        self.ctl(&["stats"])
    }
}

#[test]
fn lab_jumbo_frames_go_through_and_too_big_ones_teach_the_client_the_path_mtu() {
    let lab = up("gue");
    println!(
        "client route before: {}",
        lab.ip("c", &["route", "get", VIP]).trim()
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
    assert_eq!(
        lab::counter(&s, "icmp too big "),
        0,
        "nothing was too big: {s}"
    );
    let forwarded = lab::counter(&s, "forwarded ");
    assert!(forwarded >= 12, "{n} bytes took at least 12 packets: {s}");

    // Full-size segments (MSS 8960: 9000-byte packets) no longer fit once
    // encapsulated: the balancer answers the first with "fragmentation
    // needed" advertising 9000 - 28, the client's kernel lowers its path MTU
    // and its TCP retransmits in smaller segments.
    let got = lab.echo(n, None);
    assert_eq!(got, n.to_string(), "the echo still completes");
    let s = lab.stats();
    println!("after the full-size flow:\n{s}");
    let answered = lab::counter(&s, "icmp too big ");
    assert!(answered >= 1, "the balancer sent ICMP too big: {s}");
    let route = lab.ip("c", &["route", "get", VIP]);
    println!("client route after: {}", route.trim());
    let want = format!("mtu {}", 9000 - GUE_OVERHEAD);
    assert!(
        route.contains(&want),
        "the client learned the path MTU ({want}): {route}"
    );
    println!(
        "ICMP too big sent: {answered}; forwarded: {}",
        lab::counter(&s, "forwarded ")
    );
}

/// The datagram's length as the backend's server got it, from the client:
/// `len` bytes of UDP payload to the VIP's port `port`, sent without DF
/// (IP_PMTUDISC_DONT), again every 2 s until an answer (at most 10 tries):
/// the answer's text ("backendN LENGTH"), or "no answer".
fn udp_exchange(lab: &Lab, port: u16, len: usize) -> String {
    let script = r#"
import socket, sys
vip, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
# IP_MTU_DISCOVER (10) = IP_PMTUDISC_DONT (0): no DF on what this socket sends.
s.setsockopt(socket.IPPROTO_IP, 10, 0)
s.settimeout(2)
for _ in range(10):
    s.sendto(b"x" * n, (vip, port))
    try:
        print(s.recv(100).decode())
        break
    except socket.timeout:
        pass
else:
    print("no answer")
"#;
    stdout(Command::new("ip").args([
        "netns",
        "exec",
        &lab.ns("c"),
        "python3",
        "-c",
        script,
        VIP,
        &port.to_string(),
        &len.to_string(),
    ]))
    .trim()
    .to_owned()
}

/// Issue 38 item 14: a 1,500-byte IPv4 datagram without DF from the client
/// (1,500-byte links all the way) is 1,528 bytes once in GUE, 28 over the
/// backend side's MTU. It reaches the backend's server whole — sent as two
/// inner fragments, each in a GUE packet within the MTU, decapsulated by
/// the backend's `spillway decap` and reassembled by its kernel — and the
/// server's answer (its length) comes back. (Before, it left whole with the
/// outer DF set and the backend link dropped it.)
#[test]
fn lab_a_datagram_without_df_over_the_backend_mtu_reaches_the_backend_whole() {
    let lab = Lab::up(
        &LAB_SH,
        &["gue"],
        &[("LAB_BE_MTU", "1500"), ("LAB_UDP", "7777")],
    );
    // A small one first: the path works.
    let small = udp_exchange(&lab, 7777, 100);
    assert!(
        small.starts_with("backend") && small.ends_with(" 100"),
        "the small datagram's answer: {small:?}"
    );
    // 1,472 bytes of payload: a 1,500-byte IP packet.
    let got = udp_exchange(&lab, 7777, 1472);
    let s = lab.stats();
    println!("after the 1,500-byte datagram: {got:?}\n{s}");
    assert!(
        got.starts_with("backend") && got.ends_with(" 1472"),
        "the server got the 1,472-byte datagram whole: {got:?}\n{s}"
    );
    let fragmented = lab::counter(&s, "fragmented ");
    assert!(fragmented >= 1, "the balancer fragmented it: {s}");
    assert_eq!(lab::counter(&s, "icmp too big "), 0, "no DF, no ICMP: {s}");
    println!("fragmented: {fragmented} (one per datagram sent)");
}
