//! The management core's HTTP endpoint (`[metrics]`): `GET /status` exports
//! every forwarding rule's state (M21: `rule <name> <STATE>` lines,
//! what `remote_rule` groups of other Spillways read) and `GET /metrics` the
//! counters in Prometheus text format (M42). One request per connection
//! (HTTP/1.0, `Connection: close`).
//!
//! This module is the protocol: when a request head is whole, what it asks, and the bytes of each answer. The connections
//! themselves are served by [`crate::listen`], never on the management
//! loop (M50).

use crate::listen::{Job, Parsed};
use std::fmt::Write as _;

/// Largest request head (request line and headers) read; a longer one is
/// answered 431. `/status` and `/metrics` requests are a few hundred bytes.
pub const MAX_HEAD: usize = 8192;

/// Over `max_connections`.
pub(crate) const BUSY: &[u8] =
    b"HTTP/1.0 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
/// The management loop did not take the request or answer it in time.
pub(crate) const UNAVAILABLE: &[u8] = BUSY;
/// The head did not arrive within `timeout`.
pub(crate) const TIMED_OUT: &[u8] =
    b"HTTP/1.0 408 Request Timeout\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
/// The head is longer than [`MAX_HEAD`].
pub(crate) const TOO_LARGE: &[u8] = b"HTTP/1.0 431 Request Header Fields Too Large\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

/// Whether `buf` holds a whole request head (ends with an empty line).
pub(crate) fn head_complete(buf: &[u8]) -> bool {
    buf.windows(4).any(|w| w == b"\r\n\r\n") || buf.windows(2).any(|w| w == b"\n\n")
}

/// What a request head asks for.
pub(crate) fn parse(head: &[u8]) -> Parsed {
    let line = head
        .split(|&b| b == b'\n')
        .next()
        .and_then(|l| std::str::from_utf8(l).ok());
    let Some(line) = line else {
        return Parsed::Bad(response("400 Bad Request", ""));
    };
    let mut words = line.split_whitespace();
    match (words.next(), words.next()) {
        (Some("GET"), Some("/status")) => Parsed::Job(Job::ExportedStatus),
        (Some("GET"), Some("/metrics")) => Parsed::Job(Job::Metrics),
        (Some("GET"), Some(_)) => {
            Parsed::Answer(response("404 Not Found", "try /status or /metrics\n"))
        }
        (Some(_), Some(_)) => Parsed::Answer(response("405 Method Not Allowed", "")),
        _ => Parsed::Bad(response("400 Bad Request", "")),
    }
}

/// A whole response.
pub(crate) fn response(code: &str, body: &str) -> Vec<u8> {
    with_type(code, "text/plain; version=0.0.4", body)
}

/// The answer to `GET /metrics`: OpenMetrics text (M42), which Prometheus
/// asks for and parses by this content type.
pub(crate) fn metrics_response(body: &str) -> Vec<u8> {
    with_type(
        "200 OK",
        "application/openmetrics-text; version=1.0.0; charset=utf-8",
        body,
    )
}

fn with_type(code: &str, content_type: &str, body: &str) -> Vec<u8> {
    let mut out = String::with_capacity(body.len() + 128);
    let _ = write!(
        out,
        "HTTP/1.0 {code}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    out.into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_map_to_jobs_or_answers() {
        let p = |s: &str| parse(s.as_bytes());
        assert_eq!(
            p("GET /status HTTP/1.0\r\nHost: x\r\n\r\n"),
            Parsed::Job(Job::ExportedStatus)
        );
        assert_eq!(
            p("GET /metrics HTTP/1.1\r\n\r\n"),
            Parsed::Job(Job::Metrics)
        );
        assert_eq!(
            p("GET /nope HTTP/1.0\r\n\r\n"),
            Parsed::Answer(response("404 Not Found", "try /status or /metrics\n"))
        );
        assert_eq!(
            p("POST /status HTTP/1.0\r\n\r\n"),
            Parsed::Answer(response("405 Method Not Allowed", ""))
        );
        assert!(matches!(p("\r\n\r\n"), Parsed::Bad(_)));
        assert!(matches!(parse(b"GET \xff\xfe\r\n\r\n"), Parsed::Bad(_)));
    }

    #[test]
    fn the_answer_bytes_are_what_status_pollers_read() {
        assert_eq!(
            response("200 OK", "rule web HEALTHY\n"),
            b"HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: 17\r\nConnection: close\r\n\r\nrule web HEALTHY\n"
        );
        let text = String::from_utf8(response("200 OK", "rule web HEALTHY\n")).unwrap();
        assert_eq!(
            crate::remote::parse_status(&text, "web"),
            Some(health::State::Healthy)
        );
    }

    #[test]
    fn heads_end_with_an_empty_line() {
        assert!(!head_complete(b"GET /status HTTP/1.0\r\n"));
        assert!(!head_complete(b"GET /status HTTP/1.0\r\nHost: a\r\n"));
        assert!(head_complete(b"GET /status HTTP/1.0\r\nHost: a\r\n\r\n"));
        assert!(head_complete(b"GET /status HTTP/1.0\n\n"));
    }
}
