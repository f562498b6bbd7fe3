//! The management core's HTTP endpoint (`[metrics]`): `GET /status` exports
//! every forwarding rule's state (M21: `rule <name> <STATE>` lines,
//! what `remote_rule` groups of other Spillways read) and `GET /metrics` the
//! counters in Prometheus text format (M42). One request per connection
//! (HTTP/1.0, `Connection: close`).
//!
//! This module is what a request asks for; how a head is read and an
//! answer framed is the admin floor's ([`admin::http`]). The connections
//! themselves are served by [`crate::listen`], never on the management
//! loop (M50).

pub use admin::http::{
    BUSY, MAX_HEAD, TIMED_OUT, TOO_LARGE, UNAVAILABLE, head_complete, metrics_response, response,
};

use crate::job::{Job, Parsed};

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
}
