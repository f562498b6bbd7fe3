//! `remote_rule` polling (M21, M23) against real HTTP peers on
//! 127.0.0.1: a peer that trickles its answer or never answers delays no
//! other peer, fails its polls within the per-poll deadline and turns
//! UNHEALTHY after `FAILURES` of them, and dropping the poller (a reload)
//! waits for none of them.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use control::remote::{DEADLINE, FAILURES, RemoteKey, RemotePoller};
use health::State;

/// Reads a request head (up to the blank line), at most 2 s.
fn read_head(s: &mut TcpStream) {
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let mut head = Vec::new();
    let mut b = [0u8; 512];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match s.read(&mut b) {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&b[..n]),
        }
    }
}

/// Serves each connection on a thread of its own; returns the status URL.
fn serve(handle: impl Fn(TcpStream) + Send + Sync + 'static) -> String {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}/status", l.local_addr().expect("addr"));
    let handle = Arc::new(handle);
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            let h = handle.clone();
            std::thread::spawn(move || h(s));
        }
    });
    url
}

/// A peer that answers at once with `rule web <state>`.
fn answering(state: Arc<Mutex<&'static str>>) -> String {
    serve(move |mut s| {
        read_head(&mut s);
        let st = *state.lock().expect("state");
        let _ = s.write_all(format!("HTTP/1.0 200 OK\r\n\r\nrule web {st}\n").as_bytes());
    })
}

/// A peer that answers `rule web HEALTHY`, padded, a byte every 200 ms (so
/// no single read ever waits long) until `until`, then closes.
fn trickling(until: Instant) -> String {
    serve(move |mut s| {
        read_head(&mut s);
        let answer = b"HTTP/1.0 200 OK\r\n\r\nrule web HEALTHY\n";
        let mut i = 0;
        while Instant::now() < until {
            let byte = answer.get(i).copied().unwrap_or(b'\n');
            if s.write_all(&[byte]).is_err() {
                return;
            }
            i += 1;
            std::thread::sleep(Duration::from_millis(200));
        }
    })
}

/// A peer that accepts, reads the request and says nothing until `until`.
fn silent(until: Instant) -> String {
    serve(move |mut s| {
        read_head(&mut s);
        std::thread::sleep(until.saturating_duration_since(Instant::now()));
    })
}

fn key(url: &str) -> RemoteKey {
    RemoteKey {
        url: url.to_owned(),
        rule: "web".to_owned(),
    }
}

/// Waits (sampling every 10 ms) until `key`'s state is `want` or `until`
/// passes; every sample seen on the way.
fn wait_for(
    p: &RemotePoller,
    key: &RemoteKey,
    want: State,
    until: Instant,
) -> (bool, Vec<(State, String)>) {
    let mut seen = Vec::new();
    loop {
        let s = p.state(key);
        if seen.last() != Some(&s) {
            seen.push(s.clone());
        }
        if s.0 == want {
            return (true, seen);
        }
        if Instant::now() >= until {
            return (false, seen);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_slow_peer_holds_up_no_other_and_fails_its_polls() {
    let start = Instant::now();
    // The slow peers stall for this long; everything below must happen
    // before.
    let slow_until = start + Duration::from_secs(15);
    let fast_state = Arc::new(Mutex::new("HEALTHY"));
    let trickle = key(&trickling(slow_until));
    let quiet = key(&silent(slow_until));
    let fast = key(&answering(fast_state.clone()));
    // The slow peers first: a poller that asks one after the other would
    // reach the fast one only when they are done.
    let poller = RemotePoller::start(vec![trickle.clone(), quiet.clone(), fast.clone()]);

    let p = &poller;
    std::thread::scope(|scope| {
        // The slow peers' states from the start, to see each step.
        let slow: Vec<_> = [&trickle, &quiet]
            .into_iter()
            .map(|k| scope.spawn(move || (k, wait_for(p, k, State::Unhealthy, slow_until))))
            .collect();

        let (ok, seen) = wait_for(&poller, &fast, State::Healthy, slow_until);
        assert!(
            ok,
            "the fast peer's HEALTHY was not seen while the slow ones stalled: {seen:?}"
        );
        eprintln!("fast peer HEALTHY after {:?}", start.elapsed());

        *fast_state.lock().expect("state") = "UNHEALTHY";
        let flipped = Instant::now();
        let (ok, seen) = wait_for(&poller, &fast, State::Unhealthy, slow_until);
        assert!(
            ok,
            "the fast peer's change was not seen while the slow ones stalled: {seen:?}"
        );
        eprintln!(
            "fast peer's change to UNHEALTHY seen after {:?}",
            flipped.elapsed()
        );

        let late = format!("no complete answer within {} ms", DEADLINE.as_millis());
        for t in slow {
            let (k, (ok, seen)) = t.join().expect("sampler");
            eprintln!("{}: {seen:?}, UNHEALTHY after {:?}", k.url, start.elapsed());
            assert!(ok, "{}: not UNHEALTHY while it stalled: {seen:?}", k.url);
            // Its polls failed at their deadline, and only FAILURES (2) of
            // them made it UNHEALTHY: after the first it was still UNKNOWN.
            assert_eq!(FAILURES, 2);
            assert_eq!(
                seen,
                [
                    (State::Unknown, String::new()),
                    (State::Unknown, late.clone()),
                    (State::Unhealthy, late.clone()),
                ],
                "{}",
                k.url
            );
        }
    });

    // A reload drops the poller: it does not wait for the stalled peers.
    let dropping = Instant::now();
    drop(poller);
    eprintln!("poller dropped in {:?}", dropping.elapsed());
    assert!(
        Instant::now() < slow_until,
        "dropping the poller waited for the stalled peers"
    );
}
