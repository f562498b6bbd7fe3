//! One probe: connect (optionally from a source address), for HTTP(S) send
//! `GET` and read the status line and headers, all within the timeout.
//!
//! The HTTP client is deliberately minimal: one HTTP/1.1 request with
//! `Connection: close`, the response head parsed with `httparse` once it is
//! complete (at most [`MAX_HEAD_BYTES`]); the body is never read.

// The I/O part of the crate (feature `probers`): clippy.toml keeps sockets,
// clocks and threads out of the decisions, not out of here.
#![allow(clippy::disallowed_types, clippy::disallowed_methods)]

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use rustls::CertificateError;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio_rustls::TlsConnector;

use crate::error::HealthError;
use crate::target::{Check, ProbeKind};

/// Response header carrying the endpoint's weight, 0–1000 (M17).
pub const WEIGHT_HEADER: &str = "X-Load-Balancing-Endpoint-Weight";
/// Response header carrying the endpoint's utilization, 0.0–1.0 (M25
/// `UTILIZATION` mode).
pub const UTILIZATION_HEADER: &str = "X-Load-Balancing-Endpoint-Utilization";
/// Largest response head (status line and headers) read.
pub const MAX_HEAD_BYTES: usize = 16 * 1024;
/// Largest header count accepted in a response head.
const MAX_HEADERS: usize = 64;
/// Largest weight a header may report (as the configuration's weights).
pub const MAX_WEIGHT: u16 = 1000;

/// A successful probe.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ProbeOk {
    /// HTTP(S): the status code (2xx or 3xx).
    pub status: Option<u16>,
    /// HTTP(S) with `weight_from_header`: the reported weight; `None` when
    /// the header is absent (the configured weight applies).
    pub weight: Option<u16>,
    /// HTTP(S): the reported utilization; `None` when absent or invalid.
    pub utilization: Option<f64>,
}

impl ProbeOk {
    /// What the log says about it: `connected` or `HTTP 200`.
    pub fn reason(&self) -> String {
        match self.status {
            Some(code) => format!("HTTP {code}"),
            None => "connected".to_owned(),
        }
    }
}

/// A failed probe; the message is the reason logged with a transition.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProbeError {
    /// connect refused
    #[error("connect refused")]
    ConnectRefused,
    /// timeout after {0}
    #[error("timeout after {}", HumanDuration(*.0))]
    Timeout(Duration),
    /// connect failed: {0}
    #[error("connect failed: {0}")]
    Connect(String),
    /// cannot bind source address {addr}: {reason}
    #[error("cannot bind source address {addr}: {reason}")]
    Bind {
        /// The configured source address.
        addr: IpAddr,
        /// The system's reason.
        reason: String,
    },
    /// connection reset
    #[error("connection reset")]
    Reset,
    /// I/O error: {0}
    #[error("I/O error: {0}")]
    Io(String),
    /// connection closed before the response headers
    #[error("connection closed before the response headers")]
    Closed,
    /// invalid HTTP response: {0}
    #[error("invalid HTTP response: {0}")]
    Malformed(String),
    /// response headers exceed 16 KiB
    #[error("response headers exceed {} KiB", MAX_HEAD_BYTES / 1024)]
    HeadTooLarge,
    /// HTTP {0}
    #[error("HTTP {0}")]
    Status(u16),
    /// invalid X-Load-Balancing-Endpoint-Weight {0:?}
    #[error("invalid {WEIGHT_HEADER} {0:?} (expected an integer 0-{MAX_WEIGHT})")]
    InvalidWeight(String),
    /// certificate expired
    #[error("certificate expired")]
    CertificateExpired,
    /// certificate not yet valid
    #[error("certificate not yet valid")]
    CertificateNotYetValid,
    /// TLS handshake failed: {0}
    #[error("TLS handshake failed: {0}")]
    Tls(String),
}

/// Durations as people write them: `2s`, `1.5s`, `100ms`.
#[derive(Clone, Copy, Debug)]
pub struct HumanDuration(pub Duration);

impl fmt::Display for HumanDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = self.0;
        if d.subsec_nanos() == 0 {
            write!(f, "{}s", d.as_secs())
        } else if d.subsec_nanos() % 1_000_000 == 0 {
            let ms = d.as_millis();
            if ms >= 1000 {
                write!(f, "{}s", d.as_secs_f64())
            } else {
                write!(f, "{ms}ms")
            }
        } else {
            write!(f, "{d:?}")
        }
    }
}

/// Outcome of parsing a (possibly partial) response head.
#[derive(Debug, PartialEq)]
pub enum Parsed {
    /// More bytes are needed.
    Partial,
    /// The head is complete; the probe's verdict.
    Done(Result<ProbeOk, ProbeError>),
}

/// Parses the response head in `buf` (everything read so far) and judges
/// it: status 2xx/3xx passes; with `weight_from_header` the weight header
/// must be absent or an integer 0–1000 (anything else fails the probe: the
/// operator asked for weights and the endpoint sends nonsense); the
/// utilization header is read when present and ignored when invalid.
pub fn parse_head(buf: &[u8], weight_from_header: bool) -> Parsed {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut headers);
    match resp.parse(buf) {
        Ok(httparse::Status::Partial) => Parsed::Partial,
        Err(e) => Parsed::Done(Err(ProbeError::Malformed(e.to_string()))),
        Ok(httparse::Status::Complete(_)) => Parsed::Done(judge(&resp, weight_from_header)),
    }
}

fn judge(
    resp: &httparse::Response<'_, '_>,
    weight_from_header: bool,
) -> Result<ProbeOk, ProbeError> {
    let code = resp
        .code
        .ok_or_else(|| ProbeError::Malformed("no status code".to_owned()))?;
    if !(200..400).contains(&code) {
        return Err(ProbeError::Status(code));
    }
    let header = |name: &str| {
        resp.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| String::from_utf8_lossy(h.value).trim().to_owned())
    };
    let weight = if weight_from_header {
        match header(WEIGHT_HEADER) {
            None => None,
            Some(v) => match v.parse::<u16>() {
                Ok(w) if w <= MAX_WEIGHT => Some(w),
                _ => return Err(ProbeError::InvalidWeight(v)),
            },
        }
    } else {
        None
    };
    let utilization = header(UTILIZATION_HEADER)
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|u| (0.0..=1.0).contains(u));
    Ok(ProbeOk {
        status: Some(code),
        weight,
        utilization,
    })
}

/// The `Host` header value: the configured host, else the address
/// (bracketed for IPv6) with `:port` unless the port is the scheme's
/// default.
pub fn host_header(check: &Check, addr: SocketAddr) -> String {
    if let Some(h) = &check.host {
        return h.clone();
    }
    let default_port = match check.kind {
        ProbeKind::Https => 443,
        _ => 80,
    };
    let ip = match addr.ip() {
        IpAddr::V4(a) => a.to_string(),
        IpAddr::V6(a) => format!("[{a}]"),
    };
    if addr.port() == default_port {
        ip
    } else {
        format!("{ip}:{}", addr.port())
    }
}

/// The request bytes of an HTTP(S) check.
pub fn request(check: &Check, addr: SocketAddr) -> Vec<u8> {
    format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: spillway-health/{}\r\nAccept: */*\r\nConnection: close\r\n\r\n",
        check.path,
        host_header(check, addr),
        env!("CARGO_PKG_VERSION"),
    )
    .into_bytes()
}

/// Runs probes; cheap to clone (shares the TLS configuration).
#[derive(Clone)]
pub struct Prober {
    tls: TlsConnector,
}

impl fmt::Debug for Prober {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Prober").finish_non_exhaustive()
    }
}

/// A probe with its request prepared once (each endpoint task keeps one).
#[derive(Clone, Debug)]
pub struct Prepared {
    addr: SocketAddr,
    /// Bound before connecting (a probe through a VIP, M52).
    source_port: Option<u16>,
    check: Check,
    request: Arc<[u8]>,
    server_name: ServerName<'static>,
}

impl Prepared {
    /// Prepares probing `addr` with `check`.
    pub fn new(addr: SocketAddr, check: Check) -> Self {
        let request = Arc::from(request(&check, addr));
        let server_name = crate::tls::server_name(check.host.as_deref(), addr.ip());
        Self {
            addr,
            source_port: None,
            check,
            request,
            server_name,
        }
    }

    /// Binds this source port before connecting (`None`: the kernel's
    /// choice). Such probes always close with a reset: a `TIME_WAIT` on the
    /// port would fail the next probe's connect.
    pub fn set_source_port(&mut self, port: Option<u16>) {
        self.source_port = port;
    }

    /// The check.
    pub fn check(&self) -> &Check {
        &self.check
    }

    /// The address probed.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Prober {
    /// A prober with the HTTPS client configuration of [`crate::tls`].
    pub fn new() -> Result<Self, HealthError> {
        let config = crate::tls::client_config().map_err(HealthError::Tls)?;
        Ok(Self {
            tls: TlsConnector::from(config),
        })
    }

    /// Probes `addr` once with `check` (must be called inside a tokio
    /// runtime with I/O and time enabled).
    pub async fn probe(&self, addr: SocketAddr, check: &Check) -> Result<ProbeOk, ProbeError> {
        self.run(&Prepared::new(addr, check.clone())).await
    }

    /// Runs a prepared probe, bounded by its timeout.
    pub async fn run(&self, p: &Prepared) -> Result<ProbeOk, ProbeError> {
        let timeout = p.check.timeout;
        match tokio::time::timeout(timeout, self.run_unbounded(p)).await {
            Ok(r) => r,
            Err(_) => Err(ProbeError::Timeout(timeout)),
        }
    }

    async fn run_unbounded(&self, p: &Prepared) -> Result<ProbeOk, ProbeError> {
        let abortive = p.check.kind == ProbeKind::Tcp || p.source_port.is_some();
        let source = Source {
            addr: p.check.source_address,
            port: p.source_port,
        };
        let mut stream = connect(p.addr, source, abortive).await?;
        match p.check.kind {
            ProbeKind::Tcp => Ok(ProbeOk {
                status: None,
                weight: None,
                utilization: None,
            }),
            ProbeKind::Http => exchange(&mut stream, &p.request, p.check.weight_from_header).await,
            ProbeKind::Https => {
                let mut tls = self
                    .tls
                    .connect(p.server_name.clone(), stream)
                    .await
                    .map_err(tls_error)?;
                // Dropped without close_notify: the verdict is known, and
                // waiting on the peer could turn it into a timeout.
                exchange(&mut tls, &p.request, p.check.weight_from_header).await
            }
        }
    }
}

/// What a probe binds to before connecting.
#[derive(Clone, Copy)]
struct Source {
    addr: Option<IpAddr>,
    port: Option<u16>,
}

/// Connects, binding to `source` first when given. TCP-only checks close
/// with a reset (`SO_LINGER` 0, as HAProxy does) so that thousands of probes
/// a second leave no `TIME_WAIT` sockets behind on the balancer.
async fn connect(
    addr: SocketAddr,
    source: Source,
    abortive_close: bool,
) -> Result<TcpStream, ProbeError> {
    let socket = match addr {
        SocketAddr::V4(_) => TcpSocket::new_v4(),
        SocketAddr::V6(_) => TcpSocket::new_v6(),
    }
    .map_err(|e| ProbeError::Connect(e.to_string()))?;
    let unspecified = match addr {
        SocketAddr::V4(_) => IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
        SocketAddr::V6(_) => IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
    };
    if source.addr.is_some() || source.port.is_some() {
        let src = source.addr.unwrap_or(unspecified);
        if src.is_ipv4() != addr.is_ipv4() {
            return Err(ProbeError::Bind {
                addr: src,
                reason: "not the endpoint's IP version".to_owned(),
            });
        }
        // A fixed port (M52) may still be held by the previous probe's
        // socket being torn down; the 4-tuple stays unique regardless.
        if source.port.is_some() {
            socket
                .set_reuseaddr(true)
                .map_err(|e| ProbeError::Connect(e.to_string()))?;
        }
        socket
            .bind(SocketAddr::new(src, source.port.unwrap_or(0)))
            .map_err(|e| ProbeError::Bind {
                addr: src,
                reason: e.to_string(),
            })?;
    }
    if abortive_close {
        socket
            .set_zero_linger()
            .map_err(|e| ProbeError::Connect(e.to_string()))?;
    }
    socket.connect(addr).await.map_err(|e| match e.kind() {
        std::io::ErrorKind::ConnectionRefused => ProbeError::ConnectRefused,
        _ => ProbeError::Connect(e.to_string()),
    })
}

fn io_error(e: std::io::Error) -> ProbeError {
    match e.kind() {
        std::io::ErrorKind::ConnectionReset => ProbeError::Reset,
        _ => ProbeError::Io(e.to_string()),
    }
}

fn tls_error(e: std::io::Error) -> ProbeError {
    let inner = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>());
    match inner {
        Some(rustls::Error::InvalidCertificate(
            CertificateError::Expired | CertificateError::ExpiredContext { .. },
        )) => ProbeError::CertificateExpired,
        Some(rustls::Error::InvalidCertificate(
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. },
        )) => ProbeError::CertificateNotYetValid,
        Some(other) => ProbeError::Tls(other.to_string()),
        None => match e.kind() {
            std::io::ErrorKind::ConnectionReset => ProbeError::Reset,
            std::io::ErrorKind::UnexpectedEof => {
                ProbeError::Tls("connection closed during the handshake".to_owned())
            }
            _ => ProbeError::Tls(e.to_string()),
        },
    }
}

/// Sends the request and reads the response head.
async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    request: &[u8],
    weight_from_header: bool,
) -> Result<ProbeOk, ProbeError> {
    stream.write_all(request).await.map_err(io_error)?;
    stream.flush().await.map_err(io_error)?;
    let mut buf = vec![0u8; 1024];
    let mut len = 0;
    loop {
        if len == buf.len() {
            if len >= MAX_HEAD_BYTES {
                return Err(ProbeError::HeadTooLarge);
            }
            buf.resize((len * 2).min(MAX_HEAD_BYTES), 0);
        }
        let n = match stream.read(&mut buf[len..]).await {
            Ok(n) => n,
            // Some servers reset after answering `Connection: close`; judge
            // what arrived.
            Err(e) if len > 0 && e.kind() == std::io::ErrorKind::ConnectionReset => 0,
            Err(e) => return Err(io_error(e)),
        };
        if n == 0 {
            return match parse_head(&buf[..len], weight_from_header) {
                Parsed::Done(r) => r,
                Parsed::Partial => Err(ProbeError::Closed),
            };
        }
        len += n;
        if let Parsed::Done(r) = parse_head(&buf[..len], weight_from_header) {
            return r;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(code: u16, weight: Option<u16>, utilization: Option<f64>) -> Parsed {
        Parsed::Done(Ok(ProbeOk {
            status: Some(code),
            weight,
            utilization,
        }))
    }

    #[test]
    fn status_classes() {
        for (code, healthy) in [
            (200, true),
            (204, true),
            (301, true),
            (302, true),
            (399, true),
            (100, false),
            (404, false),
            (500, false),
            (503, false),
        ] {
            let head = format!("HTTP/1.1 {code} X\r\n\r\n");
            let got = parse_head(head.as_bytes(), false);
            if healthy {
                assert_eq!(got, ok(code, None, None));
            } else {
                assert_eq!(got, Parsed::Done(Err(ProbeError::Status(code))));
            }
        }
    }

    #[test]
    fn partial_and_malformed() {
        assert_eq!(parse_head(b"", false), Parsed::Partial);
        assert_eq!(parse_head(b"HTTP/1.1 200 OK\r\n", false), Parsed::Partial);
        assert_eq!(
            parse_head(b"HTTP/1.1 200 OK\r\nA: b\r\n", false),
            Parsed::Partial
        );
        assert!(matches!(
            parse_head(b"SSH-2.0-OpenSSH\r\n\r\n", false),
            Parsed::Done(Err(ProbeError::Malformed(_)))
        ));
        let many: String = (0..100).map(|i| format!("H{i}: v\r\n")).collect();
        let head = format!("HTTP/1.1 200 OK\r\n{many}\r\n");
        assert!(matches!(
            parse_head(head.as_bytes(), false),
            Parsed::Done(Err(ProbeError::Malformed(_)))
        ));
    }

    #[test]
    fn weight_header() {
        let head =
            |v: &str| format!("HTTP/1.1 200 OK\r\nx-load-balancing-endpoint-weight: {v}\r\n\r\n");
        assert_eq!(
            parse_head(head("250").as_bytes(), true),
            ok(200, Some(250), None)
        );
        assert_eq!(
            parse_head(head(" 0 ").as_bytes(), true),
            ok(200, Some(0), None)
        );
        assert_eq!(
            parse_head(head("1000").as_bytes(), true),
            ok(200, Some(1000), None)
        );
        for bad in ["1001", "-1", "abc", "2.5", "", "65536"] {
            assert_eq!(
                parse_head(head(bad).as_bytes(), true),
                Parsed::Done(Err(ProbeError::InvalidWeight(bad.trim().to_owned()))),
                "{bad:?}"
            );
        }
        // Ignored unless asked for.
        assert_eq!(
            parse_head(head("abc").as_bytes(), false),
            ok(200, None, None)
        );
        // Absent: the configured weight.
        assert_eq!(
            parse_head(b"HTTP/1.1 200 OK\r\n\r\n", true),
            ok(200, None, None)
        );
        // A failing status wins over the weight.
        let head = "HTTP/1.1 503 X\r\nX-Load-Balancing-Endpoint-Weight: 5\r\n\r\n";
        assert_eq!(
            parse_head(head.as_bytes(), true),
            Parsed::Done(Err(ProbeError::Status(503)))
        );
    }

    #[test]
    fn utilization_header() {
        let head = |v: &str| {
            format!("HTTP/1.1 200 OK\r\nX-Load-Balancing-Endpoint-Utilization: {v}\r\n\r\n")
        };
        assert_eq!(
            parse_head(head("0.25").as_bytes(), false),
            ok(200, None, Some(0.25))
        );
        assert_eq!(
            parse_head(head("1").as_bytes(), false),
            ok(200, None, Some(1.0))
        );
        for bad in ["1.5", "-0.1", "NaN", "x", "inf"] {
            assert_eq!(
                parse_head(head(bad).as_bytes(), false),
                ok(200, None, None),
                "{bad}"
            );
        }
    }

    #[test]
    fn reasons_read_like_the_spec() {
        assert_eq!(ProbeError::ConnectRefused.to_string(), "connect refused");
        assert_eq!(
            ProbeError::Timeout(Duration::from_secs(2)).to_string(),
            "timeout after 2s"
        );
        assert_eq!(
            ProbeError::Timeout(Duration::from_millis(100)).to_string(),
            "timeout after 100ms"
        );
        assert_eq!(
            ProbeError::Timeout(Duration::from_millis(1500)).to_string(),
            "timeout after 1.5s"
        );
        assert_eq!(ProbeError::Status(503).to_string(), "HTTP 503");
        assert_eq!(
            ProbeError::CertificateExpired.to_string(),
            "certificate expired"
        );
        assert_eq!(
            ProbeError::HeadTooLarge.to_string(),
            "response headers exceed 16 KiB"
        );
    }

    #[test]
    fn request_and_host_header() {
        let a: SocketAddr = "10.0.0.1:80".parse().unwrap();
        let mut c = Check::http("/healthz");
        assert_eq!(
            String::from_utf8(request(&c, a)).unwrap(),
            format!(
                "GET /healthz HTTP/1.1\r\nHost: 10.0.0.1\r\nUser-Agent: spillway-health/{}\r\nAccept: */*\r\nConnection: close\r\n\r\n",
                env!("CARGO_PKG_VERSION")
            )
        );
        assert_eq!(
            host_header(&c, "10.0.0.1:8080".parse().unwrap()),
            "10.0.0.1:8080"
        );
        assert_eq!(
            host_header(&c, "[fd00::1]:80".parse().unwrap()),
            "[fd00::1]"
        );
        assert_eq!(
            host_header(&c, "[fd00::1]:81".parse().unwrap()),
            "[fd00::1]:81"
        );
        c.kind = ProbeKind::Https;
        assert_eq!(host_header(&c, "10.0.0.1:443".parse().unwrap()), "10.0.0.1");
        assert_eq!(
            host_header(&c, "10.0.0.1:80".parse().unwrap()),
            "10.0.0.1:80"
        );
        c.host = Some("web.example".to_owned());
        assert_eq!(host_header(&c, a), "web.example");
    }
}
