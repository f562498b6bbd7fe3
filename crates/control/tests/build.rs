//! Large Maglev tables are built off the management loop (M38, M50):
//! a reload that needs them is accepted at once, the running snapshot stays
//! live while a thread builds them, ticks and answers go on, and what is
//! asked for meanwhile is published after.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

use std::path::PathBuf;
use std::time::{Duration, Instant};

use control::{Manager, Published};
use dataplane::Local;
use testkit::config::{Config, addrs, node, rule, service};

/// A prime table size large enough that building it takes a while.
fn big_prime() -> u32 {
    (1_000_000u32..)
        .find(|&m| maglev::is_prime(m))
        .expect("a prime")
}

fn config(endpoints: usize) -> String {
    Config::new()
        .node(node("n", "r", "z"))
        .dataplane("flow_table_capacity", 1024)
        .rule(rule("web", &["10.0.0.10"], "TCP", "80", "web").set("ports", 80))
        .service(
            service("web", "ipip")
                .set("maglev_table_size", big_prime())
                .endpoints(&addrs("10.1.0.", endpoints)),
        )
        .raw("[control]\nsocket = \"/nonexistent/not-used.sock\"\nwatch_config = false\n")
        .build()
}

struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A manager over `config(endpoints)` in a directory of its own, building
/// every missing table on a thread.
fn manager(dir: &Dir, endpoints: usize) -> (Manager, std::sync::Arc<control::Shared>, PathBuf) {
    std::fs::create_dir_all(&dir.0).expect("dir");
    let path = dir.0.join("spillway.toml");
    std::fs::write(&path, config(endpoints)).expect("config");
    let loaded = config::load(&path).unwrap_or_else(|e| panic!("{e}"));
    // A next hop for every endpoint (no ports: `next_hop_mac`), so that
    // every endpoint is eligible (M47).
    let local = Local {
        next_hop_mac: [2, 0, 0, 0, 0, 0xfe],
        ..Local::default()
    };
    let (mut mgr, shared) =
        Manager::start(&path, loaded.compiled, local, 1, None).unwrap_or_else(|e| panic!("{e}"));
    mgr.build_inline_up_to(0);
    assert_eq!(shared.snapshot.load().generation, 1);
    (mgr, shared, path)
}

/// The addresses in the live snapshot's (only) Maglev table.
fn live_endpoints(shared: &control::Shared) -> Vec<String> {
    let snap = shared.snapshot.load();
    snap.services[0].regions[0].tables[0]
        .slots
        .iter()
        .map(|&s| snap.backends[s as usize].addr.to_string())
        .collect()
}

#[test]
fn a_reload_with_large_tables_is_built_off_the_loop_and_goes_live_after() {
    let dir = Dir(std::env::temp_dir().join(format!("spillway-build-{}", std::process::id())));
    let (mut mgr, shared, path) = manager(&dir, 3);

    // A fourth endpoint: the service's table must be built again.
    std::fs::write(&path, config(4)).expect("config");
    let t0 = Instant::now();
    let published = mgr.reload().unwrap_or_else(|e| panic!("{e}"));
    let accepted = t0.elapsed();
    assert!(
        matches!(published, Published::Building { tables: 1, .. }),
        "{published:?}"
    );
    assert!(mgr.building());
    assert_eq!(
        shared.snapshot.load().generation,
        1,
        "the running snapshot stays"
    );
    assert!(
        mgr.status()
            .to_string()
            .contains("building 1 Maglev table(s)"),
        "{}",
        mgr.status()
    );

    // Meanwhile a fifth endpoint: noted, published after the pending build.
    std::fs::write(&path, config(5)).expect("config");
    let again = mgr.reload().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(again, Published::Queued);

    // The loop goes on: ticks and answers while the thread builds.
    let (mut ticks, mut longest) = (0u32, Duration::ZERO);
    let mut first_live = None;
    let deadline = Instant::now() + Duration::from_secs(120);
    while mgr.building() {
        assert!(Instant::now() < deadline, "the tables were never built");
        let t = Instant::now();
        mgr.poll_build();
        mgr.tick();
        let _ = mgr.status();
        longest = longest.max(t.elapsed());
        ticks += 1;
        if first_live.is_none() && shared.snapshot.load().generation > 1 {
            first_live = Some(t0.elapsed());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    println!(
        "reload accepted in {:.1} ms; first new generation live after {:.2} s; all built after {:.2} s; \
         {ticks} loop turns meanwhile, the longest {:.1} ms",
        accepted.as_secs_f64() * 1e3,
        first_live.unwrap_or_default().as_secs_f64(),
        t0.elapsed().as_secs_f64(),
        longest.as_secs_f64() * 1e3
    );
    assert!(ticks > 1, "the loop turned while the tables were built");
    // The last configuration is live: five endpoints in the table.
    let live = live_endpoints(&shared);
    assert_eq!(live.len(), 5, "{live:?}");
    assert!(live.contains(&"10.1.0.5".to_owned()), "{live:?}");
}

/// A reload reverted while its tables are built never goes live: the revert
/// (whose tables are at hand) does, as soon as the build ends.
#[test]
fn a_configuration_reverted_while_its_tables_are_built_never_goes_live() {
    let dir = Dir(std::env::temp_dir().join(format!("spillway-revert-{}", std::process::id())));
    let (mut mgr, shared, path) = manager(&dir, 3);
    std::fs::write(&path, config(4)).expect("config");
    let first = mgr.reload().unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(first, Published::Building { .. }), "{first:?}");
    std::fs::write(&path, config(3)).expect("config");
    assert_eq!(mgr.reload(), Ok(Published::Queued));
    let deadline = Instant::now() + Duration::from_secs(120);
    while mgr.building() {
        assert!(Instant::now() < deadline, "the tables were never built");
        mgr.poll_build();
        mgr.tick();
        assert_eq!(
            live_endpoints(&shared).len(),
            3,
            "the reverted configuration went live"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        shared.snapshot.load().generation > 1,
        "the revert was published"
    );
    assert_eq!(live_endpoints(&shared).len(), 3);
    assert!(
        !mgr.status().to_string().contains("last reload error"),
        "{}",
        mgr.status()
    );
}
