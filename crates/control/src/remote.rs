//! `remote_rule` backend groups (SPEC M21): another Spillway's forwarding
//! rule, whose exported state (its `GET /status`) decides whether the group
//! takes new connections. Polled on a thread of its own, so a slow or dead
//! remote never stalls the management core, which only reads the latest
//! verdicts.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use health::State;

/// How often each remote is asked.
pub const POLL: Duration = Duration::from_secs(1);
/// Consecutive failed fetches before the remote counts as UNHEALTHY.
pub const FAILURES: u32 = 2;

/// A remote rule: where its state is published, and its name there.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RemoteKey {
    /// `http://host:port/status`.
    pub url: String,
    /// The rule's name on the remote.
    pub rule: String,
}

#[derive(Default)]
struct Entry {
    state: State,
    failures: u32,
    reason: String,
}

/// The poller.
pub struct RemotePoller {
    keys: Vec<RemoteKey>,
    states: Arc<Mutex<HashMap<RemoteKey, Entry>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl RemotePoller {
    /// Polls `keys` every [`POLL`] on a new thread (none when empty).
    pub fn start(keys: Vec<RemoteKey>) -> RemotePoller {
        let states: Arc<Mutex<HashMap<RemoteKey, Entry>>> = Arc::new(Mutex::new(
            keys.iter().map(|k| (k.clone(), Entry::default())).collect(),
        ));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = if keys.is_empty() {
            None
        } else {
            let (states, stop, keys) = (states.clone(), stop.clone(), keys.clone());
            std::thread::Builder::new()
                .name("spillway-remote".into())
                .spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        for k in &keys {
                            let verdict = fetch(k);
                            if let Ok(mut map) = states.lock() {
                                let e = map.entry(k.clone()).or_default();
                                let old = e.state;
                                match verdict {
                                    Ok(s) => {
                                        e.failures = 0;
                                        e.state = s;
                                        e.reason = format!("remote says {}", s.as_str());
                                    }
                                    Err(why) => {
                                        e.failures += 1;
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
                        }
                        // In steps, so that stopping (a reload) never waits long.
                        let mut slept = Duration::ZERO;
                        while slept < POLL && !stop.load(Ordering::Relaxed) {
                            std::thread::sleep(Duration::from_millis(50));
                            slept += Duration::from_millis(50);
                        }
                    }
                })
                .ok()
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
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// `GET url` and find `rule <name> <STATE>` in the answer.
fn fetch(k: &RemoteKey) -> Result<State, String> {
    let rest = k
        .url
        .strip_prefix("http://")
        .ok_or_else(|| format!("{}: only http:// URLs", k.url))?;
    let (hostport, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/status"),
    };
    let addr: SocketAddr = hostport
        .to_socket_addrs()
        .map_err(|e| format!("{hostport}: {e}"))?
        .next()
        .ok_or_else(|| format!("{hostport}: no address"))?;
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(800))
        .map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(Duration::from_millis(800)))
        .map_err(|e| e.to_string())?;
    s.set_write_timeout(Some(Duration::from_millis(800)))
        .map_err(|e| e.to_string())?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {hostport}\r\n\r\n").as_bytes())
        .map_err(|e| format!("send: {e}"))?;
    let mut body = Vec::new();
    s.take(1 << 20)
        .read_to_end(&mut body)
        .map_err(|e| format!("read: {e}"))?;
    let text = String::from_utf8_lossy(&body);
    if !text.starts_with("HTTP/1.") || text.split(' ').nth(1).is_none_or(|c| c != "200") {
        return Err(format!(
            "answer: {}",
            text.lines().next().unwrap_or("(empty)")
        ));
    }
    parse_status(&text, &k.rule).ok_or_else(|| format!("rule {} not in the status", k.rule))
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
