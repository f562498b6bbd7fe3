//! Real kernel TCP clients through the balancer to real HTTP servers, in a
//! namespace lab built by scripts/lab.sh (the same lab as the demo): every
//! request answered, the spread across backends within 10 % of their equal
//! weights, and replies going to the client directly from the backends (the
//! balancer transmits nothing client-ward but ARP replies). Needs root.

use std::io::{Read, Write};
use std::net::{SocketAddrV4, TcpStream};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

struct Lab {
    dir: PathBuf,
    script: PathBuf,
    tag: String,
}

impl Lab {
    fn up(mode: &str) -> Lab {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let script = root.join("scripts/lab.sh");
        let dir = std::env::temp_dir().join(format!("spillway-lab-{mode}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let bin = Path::new(env!("CARGO_BIN_EXE_spillway"))
            .parent()
            .expect("bin dir")
            .to_owned();
        let out = Command::new("bash")
            .arg(&script)
            .args(["up", mode])
            .arg(&dir)
            .arg(&bin)
            .output()
            .expect("run scripts/lab.sh");
        let mut lab = Lab {
            dir: dir.clone(),
            script,
            tag: String::new(),
        };
        assert!(
            out.status.success(),
            "lab up failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
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

    /// Link counters of `dev` in namespace `ns`: (rx packets, tx packets).
    fn link_packets(&self, ns: &str, dev: &str) -> (u64, u64) {
        let read = |what: &str| {
            let out = Command::new("ip")
                .args([
                    "netns",
                    "exec",
                    &self.ns(ns),
                    "cat",
                    &format!("/sys/class/net/{dev}/statistics/{what}_packets"),
                ])
                .output()
                .expect("read counters");
            String::from_utf8_lossy(&out.stdout)
                .trim()
                .parse::<u64>()
                .unwrap_or(0)
        };
        (read("rx"), read("tx"))
    }

    /// `n` HTTP requests on fresh TCP connections from the client namespace;
    /// returns the body of each answer (or "FAILED").
    fn requests(&self, n: usize) -> Vec<String> {
        let path = format!("/var/run/netns/{}", self.ns("c"));
        std::thread::spawn(move || {
            let fd = std::fs::File::open(&path).expect("open netns");
            // SAFETY: setns with a valid namespace fd only moves this thread.
            let r = unsafe { libc::setns(fd.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(r, 0, "setns: {}", std::io::Error::last_os_error());
            let vip: SocketAddrV4 = "198.18.10.10:80".parse().expect("vip");
            (0..n)
                .map(|_| {
                    let get = || -> std::io::Result<String> {
                        let mut s =
                            TcpStream::connect_timeout(&vip.into(), Duration::from_secs(5))?;
                        s.set_read_timeout(Some(Duration::from_secs(5)))?;
                        s.write_all(b"GET / HTTP/1.0\r\nHost: lab\r\n\r\n")?;
                        let mut resp = String::new();
                        s.read_to_string(&mut resp)?;
                        Ok(resp
                            .rsplit("\r\n\r\n")
                            .next()
                            .unwrap_or("")
                            .trim()
                            .to_owned())
                    };
                    get().unwrap_or_else(|e| format!("FAILED: {e}"))
                })
                .collect()
        })
        .join()
        .expect("client thread")
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

fn through_the_balancer(mode: &str) {
    let lab = Lab::up(mode);
    let (_, up_tx_before) = lab.link_packets("lb", &format!("s{}up", lab.tag));
    let n = 3000;
    let answers = lab.requests(n);
    let failed: Vec<&String> = answers.iter().filter(|a| a.starts_with("FAILED")).collect();
    assert!(
        failed.is_empty(),
        "{mode}: {} of {n} requests failed, e.g. {:?}",
        failed.len(),
        failed.first()
    );
    let mut per = std::collections::BTreeMap::new();
    for a in &answers {
        *per.entry(a.clone()).or_insert(0usize) += 1;
    }
    assert_eq!(per.len(), 3, "{mode}: every backend answered: {per:?}");
    for (backend, count) in &per {
        assert!(
            (900..=1100).contains(count),
            "{mode}: {backend} got {count} of {n} (equal weights: 1000 ± 10 %): {per:?}"
        );
    }
    // DSR: the balancer's uplink sent at most a few ARP replies while
    // thousands of responses reached the client.
    let (_, up_tx_after) = lab.link_packets("lb", &format!("s{}up", lab.tag));
    assert!(
        up_tx_after - up_tx_before < 20,
        "{mode}: the balancer sent {} frames client-ward",
        up_tx_after - up_tx_before
    );
    eprintln!("{mode}: {per:?}");
}

#[test]
fn lab_gue_real_tcp_clients_reach_real_servers() {
    through_the_balancer("gue");
}

#[test]
fn lab_ipip_real_tcp_clients_reach_real_servers() {
    through_the_balancer("ipip");
}
