//! A real `dpdk-testpmd` as the memif client of a port under test, flooding
//! it (`--forward-mode=txonly`): the peer the memif restart tests start,
//! check and stop again and again.

use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// `dpdk-testpmd` in memif client mode, transmitting only; killed on drop.
pub struct MemifPeer(Child);

impl MemifPeer {
    /// Starts testpmd as the memif client of `socket` (one core pair, no
    /// hugepages, small rings), with `tx_args` added to its transmit options
    /// (destination MAC, addresses, ports; none: testpmd's defaults).
    pub fn start<S: AsRef<str>>(socket: &Path, tx_args: &[S]) -> MemifPeer {
        let vdev = format!(
            "--vdev=net_memif0,role=client,id=0,socket={}",
            socket.display()
        );
        let child = Command::new("dpdk-testpmd")
            .args([
                "-l",
                "0,1",
                "--no-huge",
                "--no-shconf",
                "-m",
                "64",
                "--no-pci",
                "--no-telemetry",
                "--log-level=lib.eal:warning",
                &vdev,
                "--",
                "--forward-mode=txonly",
                "--total-num-mbufs=2048",
                "--txd=256",
                "--rxd=256",
            ])
            .args(tx_args.iter().map(AsRef::as_ref))
            // Non-interactive testpmd forwards until a line on stdin: the
            // pipe stays open until it is stopped. Its output is never read
            // while it runs (a full pipe would block it): only its errors,
            // once it has exited.
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run dpdk-testpmd (Debian package dpdk, scripts/setup.sh)");
        MemifPeer(child)
    }

    /// Panics with testpmd's errors if it has exited by itself (`what`:
    /// where the test was).
    pub fn check_running(&mut self, what: &str) {
        if let Some(status) = self.0.try_wait().expect("wait for testpmd") {
            let mut err = String::new();
            if let Some(e) = self.0.stderr.as_mut() {
                let _ = e.read_to_string(&mut err);
            }
            panic!("testpmd exited by itself ({status}) {what}:\n{err}");
        }
    }

    /// Stops it with `signal` (`kill`'s option: "-TERM", "-KILL") and
    /// waits for it.
    pub fn stop(mut self, signal: &str) {
        drop(self.0.stderr.take());
        let status = Command::new("kill")
            .args([signal, &self.0.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill {signal} testpmd: {status}");
        let _ = self.0.wait();
    }
}

impl Drop for MemifPeer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
