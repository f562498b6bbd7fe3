//! HTTP/1.0 as a management listener speaks it (M50): one request per
//! connection, its head read up to [`MAX_HEAD`] bytes, one answer with its
//! length, `Connection: close`. What a request asks for is the service's.

use std::fmt::Write as _;

/// Largest request head (request line and headers) read; a longer one is
/// answered 431. `/status` and `/metrics` requests are a few hundred bytes.
pub const MAX_HEAD: usize = 8192;

/// Over `max_connections`.
pub const BUSY: &[u8] =
    b"HTTP/1.0 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
/// The service did not take the request or answer it in time.
pub const UNAVAILABLE: &[u8] = BUSY;
/// The head did not arrive within `timeout`.
pub const TIMED_OUT: &[u8] =
    b"HTTP/1.0 408 Request Timeout\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
/// The head is longer than [`MAX_HEAD`].
pub const TOO_LARGE: &[u8] = b"HTTP/1.0 431 Request Header Fields Too Large\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

/// Whether `buf` holds a whole request head (ends with an empty line).
pub fn head_complete(buf: &[u8]) -> bool {
    buf.windows(4).any(|w| w == b"\r\n\r\n") || buf.windows(2).any(|w| w == b"\n\n")
}

/// A whole response.
pub fn response(code: &str, body: &str) -> Vec<u8> {
    with_type(code, "text/plain; version=0.0.4", body)
}

/// The answer to `GET /metrics`: OpenMetrics text (M42), which Prometheus
/// asks for and parses by this content type.
pub fn metrics_response(body: &str) -> Vec<u8> {
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
    fn answers_carry_their_length_and_close() {
        assert_eq!(
            response("200 OK", "rule web HEALTHY\n"),
            b"HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: 17\r\nConnection: close\r\n\r\nrule web HEALTHY\n"
        );
        assert!(
            metrics_response("# EOF\n")
                .starts_with(b"HTTP/1.0 200 OK\r\nContent-Type: application/openmetrics-text; version=1.0.0; charset=utf-8\r\nContent-Length: 6\r\n")
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
