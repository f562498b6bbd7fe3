//! Every transition is one log line:
//! `health: <service>/<addr:port> <old> -> <new> (<reason>)` (M18).

// Tests drive the probers against real servers: sockets and clocks are
// theirs (clippy.toml keeps them out of the crate's decisions only).
#![allow(clippy::disallowed_types, clippy::disallowed_methods)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

mod common;

use std::sync::Mutex;

use common::*;
use health::{Check, HealthChecker, State};

static LINES: Mutex<Vec<String>> = Mutex::new(Vec::new());

struct Capture;

impl log::Log for Capture {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= log::Level::Info
    }
    fn log(&self, r: &log::Record<'_>) {
        if r.target().starts_with("health") && r.level() == log::Level::Info {
            LINES.lock().unwrap().push(r.args().to_string());
        }
    }
    fn flush(&self) {}
}

#[test]
fn transitions_are_logged_one_line_each() {
    log::set_logger(&Capture).unwrap();
    log::set_max_level(log::LevelFilter::Info);

    let rt = runtime();
    let server = serve(&rt, |n| if n < 2 { ok() } else { status(503) });
    let addr = server.addr;
    let check = fast(Check::http("/"), 200, 2, 2);
    let checker = HealthChecker::start(vec![target(0, "web", addr, &check)]).unwrap();
    wait_for(&checker, "unhealthy", |s| {
        s.endpoints[0].state == State::Unhealthy
    });
    checker.stop().unwrap();

    let lines = LINES.lock().unwrap().clone();
    assert_eq!(
        lines,
        [
            format!("health: web/{addr} UNKNOWN -> HEALTHY (HTTP 200)"),
            format!("health: web/{addr} HEALTHY -> UNHEALTHY (HTTP 503)"),
        ]
    );
}
