//! Real servers on 127.0.0.1 ephemeral ports for the checker to probe, and
//! polling helpers. Servers run on a tokio runtime owned by the test, the
//! checker on its own thread, as in production.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use config::compiled::EndpointId;
use health::{Check, HealthChecker, HealthSnapshot, Target};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::runtime::Runtime;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

/// What a server does with its `n`th connection (0-based).
#[derive(Clone, Debug)]
pub enum Reply {
    /// Accept and close (TCP checks).
    Close,
    /// Read the request head, answer this (status line and headers; a
    /// blank line and a short body are added).
    Http(u16, Vec<(String, String)>),
    /// Read the request head, wait, then answer.
    Delayed(Duration, u16),
    /// Read the request head and close without answering.
    Drop,
    /// Read the request and never answer (until the prober gives up).
    Hang,
}

pub fn ok() -> Reply {
    Reply::Http(200, Vec::new())
}

pub fn status(code: u16) -> Reply {
    Reply::Http(code, Vec::new())
}

pub fn with_header(code: u16, name: &str, value: &str) -> Reply {
    Reply::Http(code, vec![(name.to_owned(), value.to_owned())])
}

type Script = Arc<dyn Fn(u64) -> Reply + Send + Sync>;

/// A test server.
pub struct Server {
    pub addr: SocketAddr,
    /// Connections accepted so far.
    pub accepted: Arc<AtomicU64>,
    /// Peer addresses of the connections.
    pub peers: Arc<Mutex<Vec<SocketAddr>>>,
    task: JoinHandle<()>,
}

impl Server {
    /// Stops listening (the port then refuses connections).
    pub fn stop(self, rt: &Runtime) {
        self.task.abort();
        let _ = rt.block_on(self.task);
    }

    pub fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }
}

pub fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Serves `script` on 127.0.0.1 (plain TCP).
pub fn serve(rt: &Runtime, script: impl Fn(u64) -> Reply + Send + Sync + 'static) -> Server {
    serve_at(rt, "127.0.0.1:0".parse().unwrap(), None, Arc::new(script))
}

/// Serves `script` over TLS with `cert`.
pub fn serve_tls(
    rt: &Runtime,
    cert: &TestCert,
    script: impl Fn(u64) -> Reply + Send + Sync + 'static,
) -> Server {
    serve_at(
        rt,
        "127.0.0.1:0".parse().unwrap(),
        Some(cert.acceptor()),
        Arc::new(script),
    )
}

/// Serves `script` at `addr` (a fixed port, to restart a stopped server).
pub fn serve_on(
    rt: &Runtime,
    addr: SocketAddr,
    script: impl Fn(u64) -> Reply + Send + Sync + 'static,
) -> Server {
    serve_at(rt, addr, None, Arc::new(script))
}

fn serve_at(rt: &Runtime, addr: SocketAddr, tls: Option<TlsAcceptor>, script: Script) -> Server {
    let listener = rt.block_on(TcpListener::bind(addr)).unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicU64::new(0));
    let peers = Arc::new(Mutex::new(Vec::new()));
    let (a, p) = (Arc::clone(&accepted), Arc::clone(&peers));
    let task = rt.spawn(async move {
        loop {
            let Ok((stream, peer)) = listener.accept().await else {
                continue;
            };
            let n = a.fetch_add(1, Ordering::Relaxed);
            p.lock().unwrap().push(peer);
            let reply = script(n);
            let tls = tls.clone();
            tokio::spawn(async move {
                match tls {
                    None => handle(stream, reply).await,
                    Some(acceptor) => {
                        if let Ok(s) = acceptor.accept(stream).await {
                            handle(s, reply).await;
                        }
                    }
                }
            });
        }
    });
    Server {
        addr,
        accepted,
        peers,
        task,
    }
}

async fn handle<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(mut s: S, reply: Reply) {
    let (code, headers, delay) = match reply {
        Reply::Close => return,
        Reply::Http(code, h) => (code, h, None),
        Reply::Delayed(d, code) => (code, Vec::new(), Some(d)),
        Reply::Drop => {
            let _ = read_head(&mut s).await;
            let _ = s.shutdown().await;
            return;
        }
        Reply::Hang => {
            let _ = read_head(&mut s).await;
            tokio::time::sleep(Duration::from_secs(3600)).await;
            return;
        }
    };
    if read_head(&mut s).await.is_none() {
        return;
    }
    if let Some(d) = delay {
        tokio::time::sleep(d).await;
    }
    let mut resp =
        format!("HTTP/1.1 {code} Whatever\r\nContent-Length: 2\r\nConnection: close\r\n");
    for (k, v) in headers {
        resp.push_str(&format!("{k}: {v}\r\n"));
    }
    resp.push_str("\r\nok");
    let _ = s.write_all(resp.as_bytes()).await;
    let _ = s.shutdown().await;
}

/// Reads until the end of the request head.
async fn read_head<S: tokio::io::AsyncRead + Unpin>(s: &mut S) -> Option<Vec<u8>> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = s.read(&mut chunk).await.ok()?;
        if n == 0 || buf.len() > 64 * 1024 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Some(buf)
}

/// A self-signed certificate and its key.
pub struct TestCert {
    pub cert: CertificateDer<'static>,
    key: Vec<u8>,
}

impl TestCert {
    /// For `name`, valid from `not_before` to `not_after` (y, m, d).
    pub fn new(name: &str, not_before: (i32, u8, u8), not_after: (i32, u8, u8)) -> Self {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec![name.to_owned()]).unwrap();
        params.not_before = rcgen::date_time_ymd(not_before.0, not_before.1, not_before.2);
        params.not_after = rcgen::date_time_ymd(not_after.0, not_after.1, not_after.2);
        let cert = params.self_signed(&key).unwrap();
        Self {
            cert: cert.der().clone(),
            key: key.serialize_der(),
        }
    }

    /// Valid from 2000 to 2100.
    pub fn valid(name: &str) -> Self {
        Self::new(name, (2000, 1, 1), (2100, 1, 1))
    }

    pub fn acceptor(&self) -> TlsAcceptor {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![self.cert.clone()],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.key.clone())),
            )
            .unwrap();
        TlsAcceptor::from(Arc::new(config))
    }
}

/// A check with short test timings: `interval` = `timeout` = `ms`.
pub fn fast(mut check: Check, ms: u64, healthy: u32, unhealthy: u32) -> Check {
    check.interval = Duration::from_millis(ms);
    check.timeout = Duration::from_millis(ms);
    check.healthy_threshold = healthy;
    check.unhealthy_threshold = unhealthy;
    check
}

pub fn target(id: u32, service: &str, addr: SocketAddr, check: &Check) -> Target {
    Target {
        endpoint: EndpointId(id),
        service: Arc::from(service),
        addr,
        check: check.clone(),
        via: None,
    }
}

/// Polls the checker until `pred` holds (10 s at most: generous, the
/// tests assert outcomes, never speed).
pub fn wait_for(
    checker: &HealthChecker,
    what: &str,
    pred: impl Fn(&HealthSnapshot) -> bool,
) -> HealthSnapshot {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let snap = checker.snapshot();
        if pred(&snap) {
            return snap;
        }
        if Instant::now() > deadline {
            panic!("timed out waiting for {what}: {snap:#?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
