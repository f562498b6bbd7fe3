//! `remote_rule` backend groups (M21): another Spillway's forwarding
//! rule, whose exported state (its `GET /status`) decides whether the group
//! takes new connections.
//!
//! Every [`POLL`] all remote status URLs are asked at once, each by a fetch
//! thread of its own, and whatever has not answered completely within
//! [`DEADLINE`] of the poll's start is a failed poll, however it stalls
//! (connect, DNS, a peer that never answers or trickles its answer). A peer
//! whose previous fetch is still stuck is not asked again: that poll fails
//! too, so there is at most one fetch per URL. The management core only
//! reads the latest verdicts, and dropping the poller (a reload) waits for
//! no peer.

use std::collections::{BTreeMap, HashMap};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use health::State;

/// How often each remote is asked.
pub const POLL: Duration = Duration::from_secs(1);
/// How long one poll may take in all (resolve, connect, send, read the whole
/// answer) before it counts as failed.
pub const DEADLINE: Duration = Duration::from_millis(800);
/// Consecutive failed polls before the remote counts as UNHEALTHY.
pub const FAILURES: u32 = 2;
/// The longest status answer read.
const MAX_ANSWER: usize = 1 << 20;
/// How often the poller looks at its stop flag while it waits.
const STEP: Duration = Duration::from_millis(50);

pub use control_core::RemoteKey;

#[derive(Default)]
struct Entry {
    state: State,
    failures: u32,
    reason: String,
}

type States = Arc<Mutex<HashMap<RemoteKey, Entry>>>;

/// The poller.
pub struct RemotePoller {
    keys: Vec<RemoteKey>,
    states: States,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl RemotePoller {
    /// Polls `keys` every [`POLL`] (no thread when empty): a thread that
    /// keeps time and one fetch thread per distinct status URL.
    pub fn start(keys: Vec<RemoteKey>) -> RemotePoller {
        let states: States = Arc::new(Mutex::new(
            keys.iter().map(|k| (k.clone(), Entry::default())).collect(),
        ));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = if keys.is_empty() {
            None
        } else {
            let (states, stop) = (states.clone(), stop.clone());
            let mut peers: BTreeMap<String, Vec<RemoteKey>> = BTreeMap::new();
            for k in &keys {
                peers.entry(k.url.clone()).or_default().push(k.clone());
            }
            let peers: Vec<(String, Vec<RemoteKey>)> = peers.into_iter().collect();
            match std::thread::Builder::new()
                .name("spillway-remote".into())
                .spawn(move || poll_loop(peers, &states, &stop))
            {
                Ok(t) => Some(t),
                Err(e) => {
                    log::error!("health: cannot start the remote rule poller: {e}");
                    None
                }
            }
        };
        RemotePoller {
            keys,
            states,
            stop,
            thread,
        }
    }

    /// The remote rules it polls.
    pub fn keys(&self) -> &[RemoteKey] {
        &self.keys
    }

    /// The latest verdict on `key` and why (UNKNOWN before the first).
    pub fn state(&self, key: &RemoteKey) -> (State, String) {
        self.states
            .lock()
            .ok()
            .and_then(|m| m.get(key).map(|e| (e.state, e.reason.clone())))
            .unwrap_or((State::Unknown, String::new()))
    }
}

impl Drop for RemotePoller {
    fn drop(&mut self) {
        // The timekeeper notices within a STEP; fetch threads still busy
        // with a peer end on their own (their fetches have a deadline).
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A request to a fetch thread: the poll's number and deadline.
type Ask = (u64, Instant);
/// A fetch thread's answer: its peer's index, the poll, the status text.
type Answer = (usize, u64, Result<String, String>);

/// A fetch thread: the status text of one URL, per request.
struct Fetcher {
    ask: Sender<Ask>,
    /// Number of the poll its fetch in flight belongs to.
    busy: Option<u64>,
}

fn spawn_fetcher(url: &str, index: usize, done: Sender<Answer>) -> Option<Fetcher> {
    let (ask, asked): (Sender<Ask>, Receiver<Ask>) = mpsc::channel();
    let u = url.to_owned();
    let spawned = std::thread::Builder::new()
        .name("spillway-rfetch".into())
        .spawn(move || {
            // Ends when the poller goes (its sender is dropped).
            while let Ok((poll, deadline)) = asked.recv() {
                if done.send((index, poll, fetch(&u, deadline))).is_err() {
                    break;
                }
            }
        });
    match spawned {
        Ok(_) => Some(Fetcher { ask, busy: None }),
        Err(e) => {
            log::error!("health: cannot start a fetch thread for {url}: {e}");
            None
        }
    }
}

/// Every POLL: ask every peer at once, wait at most DEADLINE for their
/// answers, record a verdict for each.
fn poll_loop(peers: Vec<(String, Vec<RemoteKey>)>, states: &States, stop: &AtomicBool) {
    let (done, answers) = mpsc::channel();
    let mut fetchers: Vec<Option<Fetcher>> = peers
        .iter()
        .enumerate()
        .map(|(i, (url, _))| spawn_fetcher(url, i, done.clone()))
        .collect();
    drop(done);
    let mut poll: u64 = 0;
    while !stop.load(Ordering::Relaxed) {
        poll += 1;
        let start = Instant::now();
        let deadline = start + DEADLINE;
        // Answers that came after their poll's deadline: their fetchers are
        // free again.
        while let Ok((i, _, _)) = answers.try_recv() {
            if let Some(Some(f)) = fetchers.get_mut(i) {
                f.busy = None;
            }
        }
        // Each verdict is recorded as soon as it is known: a slow peer
        // delays no other's.
        let verdict = |i: usize, answer: &Result<String, String>| {
            for k in peers
                .get(i)
                .map(|(_, keys)| keys.as_slice())
                .unwrap_or_default()
            {
                record(states, k, answer);
            }
        };
        let mut pending = vec![false; peers.len()];
        for (i, f) in fetchers.iter_mut().enumerate() {
            let Some(f) = f else {
                verdict(i, &Err("no fetch thread".into()));
                continue;
            };
            if let Some(old) = f.busy {
                verdict(
                    i,
                    &Err(format!(
                        "still no answer to the poll {} s ago",
                        (poll - old) * POLL.as_secs()
                    )),
                );
            } else if f.ask.send((poll, deadline)).is_ok() {
                f.busy = Some(poll);
                pending[i] = true;
            } else {
                verdict(i, &Err("fetch thread gone".into()));
            }
        }
        while pending.contains(&true) && !stop.load(Ordering::Relaxed) {
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                break;
            };
            match answers.recv_timeout(left.min(STEP)) {
                Ok((i, p, answer)) => {
                    if let Some(Some(f)) = fetchers.get_mut(i) {
                        f.busy = None;
                    }
                    // A late answer to an earlier poll only frees its fetcher.
                    if p == poll && pending.get(i) == Some(&true) {
                        pending[i] = false;
                        verdict(i, &answer);
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
        }
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let late = Err(format!(
            "no complete answer within {} ms",
            DEADLINE.as_millis()
        ));
        for (i, _) in pending.iter().enumerate().filter(|(_, p)| **p) {
            verdict(i, &late);
        }
        // In steps, so that stopping (a reload) never waits long.
        while !stop.load(Ordering::Relaxed) {
            let Some(left) = (start + POLL).checked_duration_since(Instant::now()) else {
                break;
            };
            std::thread::sleep(left.min(STEP));
        }
    }
    // Dropping the senders lets idle fetch threads end.
    fetchers.clear();
}

/// One poll's verdict on `k` from its URL's answer.
fn record(states: &States, k: &RemoteKey, answer: &Result<String, String>) {
    let verdict = answer.as_ref().map_err(Clone::clone).and_then(|text| {
        parse_status(text, &k.rule).ok_or_else(|| format!("rule {} not in the status", k.rule))
    });
    let Ok(mut map) = states.lock() else {
        return;
    };
    let e = map.entry(k.clone()).or_default();
    let old = e.state;
    match verdict {
        Ok(s) => {
            e.failures = 0;
            e.state = s;
            e.reason = format!("remote says {}", s.as_str());
        }
        Err(why) => {
            e.failures = e.failures.saturating_add(1);
            e.reason = why;
            if e.failures >= FAILURES {
                e.state = State::Unhealthy;
            }
        }
    }
    if e.state != old {
        log::info!(
            "health: remote rule {} at {} {} -> {} ({})",
            k.rule,
            k.url,
            old,
            e.state,
            e.reason
        );
    }
}

/// `GET url` by `deadline`: the answer's text when it is a 200.
fn fetch(url: &str, deadline: Instant) -> Result<String, String> {
    let late = || format!("no complete answer within {} ms", DEADLINE.as_millis());
    let left = || {
        deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or_else(late)
    };
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("{url}: only http:// URLs"))?;
    let (hostport, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/status"),
    };
    let addr: SocketAddr = hostport
        .to_socket_addrs()
        .map_err(|e| format!("{hostport}: {e}"))?
        .next()
        .ok_or_else(|| format!("{hostport}: no address"))?;
    let mut s = TcpStream::connect_timeout(&addr, left()?).map_err(|e| format!("connect: {e}"))?;
    s.set_write_timeout(Some(left()?))
        .map_err(|e| e.to_string())?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {hostport}\r\n\r\n").as_bytes())
        .map_err(|e| format!("send: {e}"))?;
    // The deadline is for the whole answer, not for each read: a peer that
    // trickles bytes cannot keep the fetch going.
    let mut body = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        s.set_read_timeout(Some(left()?))
            .map_err(|e| e.to_string())?;
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                body.extend_from_slice(&buf[..n]);
                if body.len() > MAX_ANSWER {
                    return Err(format!("answer longer than {MAX_ANSWER} bytes"));
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Err(late());
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("read: {e}")),
        }
    }
    let text = String::from_utf8_lossy(&body).into_owned();
    if !text.starts_with("HTTP/1.") || text.split(' ').nth(1).is_none_or(|c| c != "200") {
        return Err(format!(
            "answer: {}",
            text.lines().next().unwrap_or("(empty)")
        ));
    }
    Ok(text)
}

/// The state of `rule` in a status text (`rule <name> <STATE>` lines).
pub fn parse_status(text: &str, rule: &str) -> Option<State> {
    text.lines().find_map(|l| {
        let mut w = l.split_whitespace();
        (w.next() == Some("rule") && w.next() == Some(rule)).then_some(())?;
        match w.next()? {
            "HEALTHY" => Some(State::Healthy),
            "UNHEALTHY" => Some(State::Unhealthy),
            "UNKNOWN" => Some(State::Unknown),
            _ => None,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_lines_are_found_by_rule() {
        let t = "HTTP/1.0 200 OK\r\n\r\nrule web HEALTHY\nrule api UNHEALTHY\nrule x UNKNOWN\n";
        assert_eq!(parse_status(t, "web"), Some(State::Healthy));
        assert_eq!(parse_status(t, "api"), Some(State::Unhealthy));
        assert_eq!(parse_status(t, "x"), Some(State::Unknown));
        assert_eq!(parse_status(t, "we"), None);
        assert_eq!(parse_status("rule web SICK\n", "web"), None);
    }
}
