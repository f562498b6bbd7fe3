//! Tunnelled ingress (M49) between two real Spillway processes, in a
//! namespace lab built by scripts/lab-tunnels.sh: the first node's rule
//! spills over to the second node's through a `remote_rule` group (GUE to
//! the second node's own address); the second decapsulates and delivers to
//! its own backends, which answer the client directly. Real kernel TCP
//! connections from a client namespace must complete through both nodes.
//! Needs root.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

mod common;

use std::time::{Duration, Instant};

use common::lab::{self, LAB_TUNNELS_SH, Lab};

impl Lab {
    /// Waits until node 1 sees node 2's rule HEALTHY (its /status polled
    /// through both nodes' exception paths).
    fn wait_for_the_peer(&self) {
        let t0 = Instant::now();
        self.wait_status_on(
            "n1/control.sock",
            "node1.log",
            &["198.18.1.3:9469", "): HEALTHY"],
            Duration::from_secs(20),
        );
        eprintln!("node 1 sees node 2's rule HEALTHY after {:?}", t0.elapsed());
    }

    /// Replaces node 2's `[tunnel_ingress] allow` and reloads it.
    fn allow_on_node2(&self, prefix: &str) {
        let path = self.dir().join("node2.toml");
        let text = std::fs::read_to_string(&path).expect("node2.toml");
        let text: String = text
            .lines()
            .map(|l| {
                if l.starts_with("allow = ") {
                    format!("allow = [\"{prefix}\"]\n")
                } else {
                    format!("{l}\n")
                }
            })
            .collect();
        std::fs::write(&path, text).expect("write node2.toml");
        let said = self.node(2, &["reload"]);
        eprintln!("node 2 reload: {}", said.trim());
    }
}

#[test]
fn lab_tcp_spills_over_through_a_second_spillway() {
    let lab = Lab::up(&LAB_TUNNELS_SH, &[], &[]);
    lab.wait_for_the_peer();

    let n = 200;
    let t0 = Instant::now();
    let answers = lab.requests(n);
    let took = t0.elapsed();
    let failed = lab::failed(&answers);
    let per = lab::spread(&answers);
    let s1 = lab.node(1, &["stats"]);
    let s2 = lab.node(2, &["stats"]);
    eprintln!(
        "{n} connections through both nodes in {took:?} ({:.1} ms each); answers {per:?}",
        took.as_secs_f64() * 1000.0 / n as f64
    );
    eprintln!(
        "node 1:\n{}",
        s1.lines().take(2).collect::<Vec<_>>().join("\n")
    );
    eprintln!(
        "node 2:\n{}",
        s2.lines().take(2).collect::<Vec<_>>().join("\n")
    );
    assert!(
        failed.is_empty(),
        "{} of {n} requests failed, e.g. {:?}",
        failed.len(),
        failed.first()
    );
    assert_eq!(
        per.keys().cloned().collect::<Vec<_>>(),
        ["backend1", "backend2"],
        "node 2 spreads over both of its backends: {per:?}"
    );
    // Every client packet (at least SYN, request, ACK, FIN per connection)
    // went through node 1 in GUE and was decapsulated by node 2. (The two
    // nodes' counters are read at different moments: each is checked on
    // its own.)
    let least = 3 * n as u64;
    let gue = lab::counter(&s2, " gue ");
    assert!(gue >= least, "node 2 decapsulated {gue}:\n{s2}");
    assert!(lab::counter(&s1, "forwarded ") >= least, "node 1:\n{s1}");
    assert!(lab::counter(&s2, "forwarded ") >= least, "node 2:\n{s2}");
    assert_eq!(lab::counter(&s2, "drop tunnel_source_denied: "), 0, "{s2}");

    // Node 2 no longer accepts node 1's tunnels: connections fail, and the
    // tunnels are counted as denied (not handed to node 2's host).
    lab.allow_on_node2("198.18.1.99/32");
    let answers = lab.requests_within(3, Duration::from_secs(2));
    assert!(
        answers.iter().all(|a| a.starts_with("FAILED")),
        "{answers:?}"
    );
    let s2 = lab.node(2, &["stats"]);
    let denied = lab::counter(&s2, "drop tunnel_source_denied: ");
    eprintln!("with node 1 not allowed: {denied} tunnels denied");
    assert!(denied >= 3, "{s2}");

    // Allowed again: traffic flows again.
    lab.allow_on_node2("198.18.1.2/32");
    let answers = lab.requests(20);
    assert!(
        answers.iter().all(|a| a.starts_with("backend")),
        "{answers:?}"
    );
}
