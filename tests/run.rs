//! `spillway run` as a process: DPDK net_pcap ports, real workers, the
//! control socket, reloads (valid and invalid), clean shutdown on SIGTERM.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

use pcap_file::pcap::{PcapPacket, PcapReader, PcapWriter};
use wire::encap::{DecapConfig, parse_tunnel};

fn spillway(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(args)
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

fn frame(i: u16) -> Vec<u8> {
    // Ethernet/IPv4/UDP 192.0.2.1:(1000+i) -> 10.0.0.10:53, checksums zero
    // (IPv4 header checksum computed: the pipeline relies on it).
    let mut ip = vec![
        0x45, 0, 0, 32, 0, 1, 0, 0, 64, 17, 0, 0, 192, 0, 2, 1, 10, 0, 0, 10,
    ];
    let mut sum: u32 = ip
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    ip[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 0x77, 0x08, 0x00];
    f.extend_from_slice(&ip);
    f.extend_from_slice(&(1000 + i).to_be_bytes());
    f.extend_from_slice(&53u16.to_be_bytes());
    f.extend_from_slice(&[0, 12, 0, 0, b'q', b'u', b'e', b'r']);
    f
}

fn write_pcap(path: &Path, frames: &[Vec<u8>]) {
    let mut w = PcapWriter::new(std::fs::File::create(path).expect("create")).expect("writer");
    for f in frames {
        w.write_packet(&PcapPacket::new(Duration::ZERO, f.len() as u32, f))
            .expect("write");
    }
}

fn config(dir: &Path, service: &str) -> String {
    format!(
        r#"
[node]
name = "t"
region = "r"
zone = "z"

[dataplane]
management_core = 0
worker_cores = [1]
mbufs = 4095
queue_descriptors = 256
flow_table_capacity = 4096
eal_args = ["--no-huge", "--no-shconf", "-m", "256", "--no-pci", "--no-telemetry",
  "--log-level=lib.eal:warning",
  "--vdev=net_pcap0,rx_pcap={d}/in.pcap,tx_pcap={d}/up-out.pcap",
  "--vdev=net_pcap1,rx_pcap={d}/empty.pcap,tx_pcap={d}/out.pcap"]

[[ports]]
name = "up"
device = "net_pcap0"
role = "uplink"
addresses = ["10.0.0.2/24"]

[[ports]]
name = "be"
device = "net_pcap1"
role = "backend"
addresses = ["10.0.1.2/24"]
gateway_mac = "02:00:00:00:00:fe"

[[forwarding_rules]]
name = "dns"
vips = ["10.0.0.10"]
protocol = "UDP"
ports = 53
backend_service = "{service}"

[[backend_services]]
name = "{service}"
delivery = "gue"
[[backend_services.groups]]
name = "a"
region = "r"
zone = "z"
endpoints = [{{ address = "10.0.1.11" }}, {{ address = "10.0.1.12" }}]

[control]
socket = "{d}/ctl.sock"
"#,
        d = dir.display()
    )
}

struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn stat(socket: &str, key: &str) -> Option<u64> {
    let out = spillway(&["stats", "--socket", socket]);
    let t = text(&out);
    t.lines().find_map(|l| {
        l.split(';').find_map(|part| {
            let part = part.trim();
            part.strip_prefix(key)
                .and_then(|v| v.trim().split(' ').next()?.parse().ok())
        })
    })
}

#[test]
fn the_daemon_forwards_reloads_and_stops_cleanly() {
    let dir: PathBuf = std::env::temp_dir().join(format!("spillway-run-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let frames: Vec<Vec<u8>> = (0..500).map(frame).collect();
    write_pcap(&dir.join("in.pcap"), &frames);
    write_pcap(&dir.join("empty.pcap"), &[]);
    let cfg = dir.join("spillway.toml");
    std::fs::write(&cfg, config(&dir, "dns")).expect("config");
    let check = spillway(&["check-config", cfg.to_str().expect("utf-8")]);
    assert!(check.status.success(), "{}", text(&check));

    let child = Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(["run", "--config", cfg.to_str().expect("utf-8")])
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start spillway run");
    let mut daemon = Daemon(child);
    let socket = dir.join("ctl.sock");
    let socket_s = socket.to_str().expect("utf-8").to_owned();

    let deadline = Instant::now() + Duration::from_secs(20);
    let mut forwarded = None;
    while Instant::now() < deadline {
        if let Some(n) = stat(&socket_s, "forwarded") {
            forwarded = Some(n);
            if n >= 500 {
                break;
            }
        }
        if let Ok(Some(status)) = daemon.0.try_wait() {
            panic!("spillway run exited early: {status}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(forwarded, Some(500), "every datagram forwarded");

    let status = spillway(&["status", "--socket", &socket_s]);
    assert!(status.status.success(), "{}", text(&status));
    assert!(
        text(&status).contains("snapshot generation 1"),
        "{}",
        text(&status)
    );

    // A valid reload (the service renamed) goes live ...
    std::fs::write(&cfg, config(&dir, "dns2")).expect("config");
    let r = spillway(&["reload", "--socket", &socket_s]);
    assert!(r.status.success(), "{}", text(&r));
    assert!(text(&r).contains("generation 2"), "{}", text(&r));
    // ... an invalid one is rejected with its errors, and changes nothing.
    std::fs::write(&cfg, "[node]\nname = 3\n").expect("config");
    let r = spillway(&["reload", "--socket", &socket_s]);
    assert_eq!(r.status.code(), Some(1), "{}", text(&r));
    assert!(text(&r).contains("spillway.toml:2:"), "{}", text(&r));
    let status = text(&spillway(&["status", "--socket", &socket_s]));
    assert!(
        status.contains("snapshot generation 2") && status.contains("reloads 1 ok / 1 rejected"),
        "{status}"
    );
    assert!(status.contains("service dns2"), "{status}");

    let pid = daemon.0.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill")
            .success()
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let code = loop {
        if let Some(s) = daemon.0.try_wait().expect("wait") {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "spillway run did not stop on SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(code.success(), "clean exit: {code}");
    assert!(!socket.exists(), "the control socket is removed on exit");

    let mut r = PcapReader::new(std::fs::File::open(dir.join("out.pcap")).expect("out.pcap"))
        .expect("pcap");
    let mut n = 0;
    while let Some(p) = r.next_packet() {
        let p = p.expect("packet");
        let t = parse_tunnel(&p.data, &DecapConfig::default()).expect("GUE frame");
        assert_eq!(
            &p.data[t.inner_offset..t.inner_offset + t.inner_len],
            &frames[n][14..]
        );
        assert_eq!(&p.data[0..6], &[2, 0, 0, 0, 0, 0xfe]);
        n += 1;
    }
    assert_eq!(n, 500, "every datagram left the backend port encapsulated");
    let _ = std::fs::remove_dir_all(&dir);
}
