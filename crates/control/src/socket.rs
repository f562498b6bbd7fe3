//! The Unix control socket: one command per connection, a text answer.
//!
//! Commands: `status`, `stats`, `flows [filters]`, `simulate FLOW`,
//! `trace [filters]`, `reload`, `drain` and `undrain` `node|zone|region
//! NAME`. The answer's
//! first line is `ok` or `error`; the rest is for people, or, when the
//! command line ends with the word `json`, one JSON object on one line
//! (`{"ok": true, …}`, or `{"ok": false, "error": …}`; see
//! [`crate::report`]).
//!
//! The socket file is bound by the admin floor ([`admin::unix`]: mode 0660
//! in the configured group, peers checked by their credentials, M50).
//! Connections are served by [`crate::listen`], off the management loop.

use std::path::Path;
use std::time::Duration;

use crate::Manager;
use crate::job::{Job, Parsed};

/// Longest command line read (a `flows` query is under 200 bytes).
pub const MAX_LINE: usize = 4096;

/// Over `max_connections`.
pub(crate) const BUSY: &[u8] = b"error\ntoo many connections to the control socket; try again\n";
/// The management loop did not take the command or answer it in time.
pub(crate) const UNAVAILABLE: &[u8] =
    b"error\nthe management core did not answer in time; try again\n";
/// No whole command line within `timeout`.
pub(crate) const TIMED_OUT: &[u8] = b"error\ntimed out waiting for a command line\n";
/// A line longer than [`MAX_LINE`].
pub(crate) const TOO_LARGE: &[u8] = b"error\ncommand line too long\n";

pub use admin::unix::{BindError, Peers, SocketFile, bind, resolve_group};

/// A command line as the listener received it.
pub(crate) fn parse(buf: &[u8]) -> Parsed {
    let line = buf.split(|&b| b == b'\n').next().unwrap_or_default();
    match std::str::from_utf8(line) {
        Ok(l) => Parsed::Job(Job::Command(l.trim().to_owned())),
        Err(_) => Parsed::Bad(b"error\nthe command is not UTF-8 text\n".to_vec()),
    }
}

/// A command line, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// `status`.
    Status,
    /// `stats`.
    Stats,
    /// `reload`, `reload --force`.
    Reload {
        /// `--force`.
        force: bool,
    },
    /// `flows [filters]`.
    Flows(crate::flows::FlowQuery),
    /// `simulate src=ADDR dst=ADDR …`: a flow's decision, explained.
    Simulate(crate::simulate::SimQuery),
    /// `trace [filters]`: the live decisions for matching packets,
    /// answered when the trace ends.
    Trace(crate::trace::TraceQuery),
    /// `drain|undrain node|zone|region NAME` (M37).
    Drain {
        /// What it names.
        scope: crate::drain::Scope,
        /// Its name.
        name: String,
        /// `drain` (true) or `undrain`.
        on: bool,
    },
}

/// The commands, as an unknown one's error lists them.
const COMMANDS: &str = "status, stats, flows, simulate, trace, reload [--force], drain|undrain node|zone|region NAME; any followed by json";

/// `line` without a last word `json`, and whether it had one. In `drain
/// zone json` the word is the zone's name: a drain's third word is never
/// the flag.
pub fn strip_json(line: &str) -> (&str, bool) {
    let line = line.trim();
    match line.rsplit_once(char::is_whitespace) {
        Some((rest, "json"))
            if !(matches!(rest.split_whitespace().next(), Some("drain" | "undrain"))
                && rest.split_whitespace().count() < 3) =>
        {
            (rest.trim_end(), true)
        }
        _ => (line, false),
    }
}

/// `drain`'s and `undrain`'s arguments: `node|zone|region NAME`.
fn drain(on: bool, args: &str) -> Result<Request, String> {
    let verb = if on { "drain" } else { "undrain" };
    let mut words = args.split_whitespace();
    match (
        words.next().map(|w| (w, crate::drain::Scope::parse(w))),
        words.next(),
        words.next(),
    ) {
        (Some((_, Some(scope))), Some(name), None) if crate::drain::valid_name(name) => {
            Ok(Request::Drain {
                scope,
                name: name.to_owned(),
                on,
            })
        }
        (Some((w, None)), ..) => Err(format!("{verb} {w:?}: not node, zone or region\n")),
        _ => Err(format!("usage: {verb} node|zone|region NAME\n")),
    }
}

impl Request {
    /// The command line [`Request::parse`] reads back as this request: what
    /// the CLI sends (then the word `json` for a JSON answer).
    pub fn to_line(&self) -> String {
        match self {
            Request::Status => "status".to_owned(),
            Request::Stats => "stats".to_owned(),
            Request::Reload { force: false } => "reload".to_owned(),
            Request::Reload { force: true } => "reload --force".to_owned(),
            Request::Flows(q) => q.to_command(),
            Request::Simulate(q) => q.to_command(),
            Request::Trace(q) => q.to_command(),
            Request::Drain { scope, name, on } => {
                format!("{} {scope} {name}", if *on { "drain" } else { "undrain" })
            }
        }
    }

    /// Parses a command line (without its `json` word, see
    /// [`strip_json`]); `Err` is the error's text for people. Every
    /// command is one arm here.
    pub fn parse(line: &str) -> Result<Request, String> {
        match line.trim() {
            "status" => Ok(Request::Status),
            "stats" => Ok(Request::Stats),
            "reload" => Ok(Request::Reload { force: false }),
            "reload --force" => Ok(Request::Reload { force: true }),
            cmd if cmd == "drain" || cmd.starts_with("drain ") => drain(true, &cmd[5..]),
            cmd if cmd == "undrain" || cmd.starts_with("undrain ") => drain(false, &cmd[7..]),
            cmd if cmd == "flows" || cmd.starts_with("flows ") => {
                crate::flows::FlowQuery::parse(&cmd["flows".len()..])
                    .map(Request::Flows)
                    .map_err(|e| format!("{e}\n"))
            }
            cmd if cmd == "simulate" || cmd.starts_with("simulate ") => {
                crate::simulate::SimQuery::parse(&cmd["simulate".len()..])
                    .map(Request::Simulate)
                    .map_err(|e| format!("{e}\n"))
            }
            cmd if cmd == "trace" || cmd.starts_with("trace ") => {
                crate::trace::TraceQuery::parse(&cmd["trace".len()..])
                    .map(Request::Trace)
                    .map_err(|e| format!("{e}\n"))
            }
            other => Err(format!("unknown command {other:?} ({COMMANDS})\n")),
        }
    }
}

/// Runs one command line on the management core: the whole answer, `ok`
/// or `error` first.
pub fn dispatch(mgr: &mut Manager, line: &str) -> String {
    let (line, json) = strip_json(line);
    let (ok, text) = match Request::parse(line) {
        // `simulate`'s own `json` word may stand anywhere among its words.
        Ok(Request::Simulate(q)) if q.json => mgr.request(Request::Simulate(q), true),
        Ok(r) => mgr.request(r, json),
        Err(e) if json => (false, crate::report::json_error(&e)),
        Err(e) => (false, e),
    };
    answer_line(ok, &text)
}

/// The whole answer: `ok` or `error`, then the text.
pub fn answer_line(ok: bool, text: &str) -> String {
    format!("{}\n{text}", if ok { "ok" } else { "error" })
}

/// Whether `line` asks for a reload: (`--force`, JSON). The daemon's loop
/// answers it once the file is read off the loop.
pub fn reload_request(line: &str) -> Option<(bool, bool)> {
    let (line, json) = strip_json(line);
    match Request::parse(line) {
        Ok(Request::Reload { force }) => Some((force, json)),
        _ => None,
    }
}

/// Whether `line` asks for a trace: the query and JSON. The daemon's loop
/// answers it when the trace ends.
pub fn trace_request(line: &str) -> Option<(crate::trace::TraceQuery, bool)> {
    let (line, json) = strip_json(line);
    match Request::parse(line) {
        Ok(Request::Trace(q)) => Some((q, json)),
        _ => None,
    }
}

/// Sends `command` to the daemon at `path` and returns (ok, text).
pub fn request(path: &Path, command: &str) -> std::io::Result<(bool, String)> {
    // As long as the daemon may take to answer (a reload of a large file
    // is read and validated meanwhile), and a little more.
    admin::unix::request(
        path,
        command,
        crate::job::ANSWER_TIMEOUT + Duration::from_secs(5),
    )
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A scratch directory of the socket tests (and the listeners').
    pub(crate) type Tmp = testkit::tmp::TempDir;

    pub(crate) fn tmp(name: &str) -> Tmp {
        Tmp::new(name)
    }

    #[test]
    fn command_lines_parse_to_requests_or_to_the_error_answered() {
        assert_eq!(Request::parse(" status "), Ok(Request::Status));
        assert_eq!(Request::parse("stats"), Ok(Request::Stats));
        assert_eq!(
            Request::parse("reload"),
            Ok(Request::Reload { force: false })
        );
        assert_eq!(
            Request::parse("reload --force"),
            Ok(Request::Reload { force: true })
        );
        assert!(matches!(
            Request::parse("simulate src=192.0.2.1 dst=10.0.0.10 dport=80 json"),
            Ok(Request::Simulate(q)) if q.json && q.probe.dport == 80
        ));
        assert_eq!(strip_json(" status json "), ("status", true));
        assert_eq!(strip_json("flows limit=3  json"), ("flows limit=3", true));
        assert_eq!(strip_json("status"), ("status", false));
        assert_eq!(strip_json("drain node json"), ("drain node json", false));
        assert_eq!(
            strip_json("drain node json json"),
            ("drain node json", true)
        );
        assert_eq!(strip_json("json"), ("json", false));
        assert_eq!(strip_json("drain node jsonx"), ("drain node jsonx", false));
        assert_eq!(
            Request::parse("simulate src=192.0.2.1"),
            Err("usage: simulate src=ADDR dst=ADDR [proto=tcp|udp|icmp|N] [sport=N] [dport=N] [established] [json]\n".to_owned())
        );
        assert!(matches!(
            Request::parse("flows limit=3"),
            Ok(Request::Flows(q)) if q.limit == 3
        ));
        assert_eq!(
            Request::parse("flows limit=x"),
            Err("limit=\"x\": not a count\n".to_owned())
        );
        assert_eq!(
            Request::parse("reload -f"),
            Err(format!("unknown command \"reload -f\" ({COMMANDS})\n"))
        );
        assert_eq!(
            Request::parse("drain zone eu-1a"),
            Ok(Request::Drain {
                scope: crate::drain::Scope::Zone,
                name: "eu-1a".into(),
                on: true
            })
        );
        assert_eq!(
            Request::parse("undrain node lb1"),
            Ok(Request::Drain {
                scope: crate::drain::Scope::Node,
                name: "lb1".into(),
                on: false
            })
        );
        assert_eq!(
            Request::parse("drain rack r1"),
            Err("drain \"rack\": not node, zone or region\n".to_owned())
        );
        for bad in ["drain", "drain zone", "drain zone a b", "undrain zone \"a"] {
            assert!(
                Request::parse(bad).unwrap_err().starts_with("usage: "),
                "{bad}"
            );
        }
    }

    #[test]
    fn every_request_reads_back_from_its_line() {
        let flows = |q: &str| match Request::parse(q) {
            Ok(r) => r,
            Err(e) => panic!("{q}: {e}"),
        };
        let requests = [
            Request::Status,
            Request::Stats,
            Request::Reload { force: false },
            Request::Reload { force: true },
            flows("flows"),
            flows(
                "flows vip=10.0.0.1 client=2001:db8::1 service=web proto=6 state=established limit=7",
            ),
            flows("simulate src=192.0.2.1 dst=10.0.0.10 proto=tcp sport=5 dport=53 established"),
            flows("simulate src=192.0.2.1 dst=10.0.0.10 proto=udp dport=53"),
            flows("simulate src=2001:db8::1 dst=2001:db8::10 proto=icmpv6 json"),
            flows("trace"),
            flows("trace src=192.0.2.0/24 dport=80 rule=web drop count=3 seconds=2"),
            Request::Drain {
                scope: crate::drain::Scope::Region,
                name: "eu-west".into(),
                on: true,
            },
            Request::Drain {
                scope: crate::drain::Scope::Node,
                name: "lb1".into(),
                on: false,
            },
        ];
        for r in requests {
            let line = r.to_line();
            assert_eq!(Request::parse(&line), Ok(r.clone()), "{line}");
            // The CLI's `--json` word does not change what is asked.
            let with_json = format!("{line} json");
            let (bare, json) = strip_json(&with_json);
            assert!(json, "{line}");
            assert_eq!(Request::parse(bare), Ok(r), "{line} json");
        }
    }

    #[test]
    fn command_lines_are_read_up_to_their_newline() {
        assert_eq!(
            parse(b"status\n"),
            Parsed::Job(Job::Command("status".into()))
        );
        assert_eq!(
            parse(b" flows limit=3 \r\ntrailing"),
            Parsed::Job(Job::Command("flows limit=3".into()))
        );
        assert!(matches!(parse(b"st\xffatus\n"), Parsed::Bad(_)));
    }
}
