//! The management core's HTTP endpoint (`[metrics].listen`): `GET /status`
//! exports every forwarding rule's state (SPEC M21: `rule <name> <STATE>`
//! lines, what `remote_rule` groups of other Spillways read) and `GET
//! /metrics` the counters in Prometheus text format (M42). Served between
//! management ticks, one short request at a time; never on a data core.

use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use crate::Manager;

/// A listening endpoint.
pub struct HttpEndpoint {
    listener: TcpListener,
}

impl HttpEndpoint {
    /// Listens on `addr`.
    pub fn bind(addr: SocketAddr) -> std::io::Result<HttpEndpoint> {
        let listener = TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        Ok(HttpEndpoint { listener })
    }

    /// The bound address.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Answers every request waiting now.
    pub fn serve_pending(&self, mgr: &Manager) {
        while let Ok((stream, _)) = self.listener.accept() {
            if let Err(e) = answer(stream, mgr) {
                log::debug!("http endpoint: {e}");
            }
        }
    }
}

fn answer(stream: TcpStream, mgr: &Manager) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(Duration::from_millis(500)))?;
    stream.set_write_timeout(Some(Duration::from_secs(1)))?;
    let mut line = String::new();
    BufReader::new(std::io::Read::take(stream.try_clone()?, 1024)).read_line(&mut line)?;
    let path = line.split_whitespace().nth(1).unwrap_or("");
    let (code, body) = match (line.split_whitespace().next(), path) {
        (Some("GET"), "/status") => ("200 OK", mgr.exported_status()),
        (Some("GET"), "/metrics") => ("200 OK", mgr.metrics()),
        (Some("GET"), _) => ("404 Not Found", "try /status or /metrics\n".to_owned()),
        _ => ("405 Method Not Allowed", String::new()),
    };
    let mut out = String::new();
    let _ = write!(
        out,
        "HTTP/1.0 {code}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    (&stream).write_all(out.as_bytes())
}
