//! The management core's listeners (M50): the control socket and the
//! HTTP `/status` `/metrics` endpoint, served on a thread of their own
//! (`spillway-listen`) so that no client can delay the management loop.
//!
//! The thread owns the sockets. It accepts (in the admin floor's loops,
//! [`admin::accept`]), refuses connections beyond `max_connections` (for
//! HTTP: as [`crate::admission`] rules, which also deny addresses outside
//! `allow`, cap what one client holds, and give a configured peer the
//! slot of an idle or greedy client when all are taken; for the socket,
//! peers whose credentials are not allowed are refused too), reads one
//! request with one deadline for the whole request (not per read) and a
//! size bound, and hands the request to the management loop as a [`Call`] over a bounded
//! channel. The loop computes the answer between ticks and replies; the
//! thread writes the answer under a deadline again and closes. The loop
//! never touches a client's socket, so the worst a client can do is hold a
//! connection slot for `timeout`, twice. And the worst one HTTP client can
//! do is hold `max_connections_per_client` of them: the rest stay for the
//! others; and however many addresses hold them, the Spillways whose
//! `remote_rule` groups read `/status` (the configured peers) are served.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::thread::JoinHandle;
use std::time::Duration;

use admin::accept::{self, Event, try_write};
use config::values::Prefix;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::admission::{Admission, Policy, Refused};
use crate::job::Parsed;
pub use crate::job::{ANSWER_TIMEOUT, Job};
use crate::{http, socket};

/// Why the listeners could not start.
#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    /// the control socket could not be set up
    #[error("control socket {path}", path = .path.display())]
    Socket {
        /// the configured path
        path: PathBuf,
        /// what went wrong
        #[source]
        source: socket::BindError,
    },
    /// the thread's runtime could not be built
    #[error("listener thread")]
    Runtime(#[source] std::io::Error),
}

/// A request handed to the management loop, with where its answer goes.
#[derive(Debug)]
pub struct Call {
    /// The request.
    pub job: Job,
    /// The answer's text (for a command: its `ok`/`error` first line
    /// included; for HTTP: the body).
    pub reply: oneshot::Sender<String>,
}

/// One listener's connection counters.
#[derive(Debug, Default)]
pub struct Counters {
    answered: AtomicU64,
    refused: AtomicU64,
    per_client_limit: AtomicU64,
    denied: AtomicU64,
    timed_out: AtomicU64,
    oversized: AtomicU64,
    bad: AtomicU64,
    busy: AtomicU64,
    evicted: AtomicU64,
}

/// A copy of a listener's [`Counters`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CounterValues {
    /// Requests answered (404 and unknown commands included).
    pub answered: u64,
    /// Connections closed at once: `max_connections` were open.
    pub refused: u64,
    /// Connections closed at once: their client (HTTP: an IPv4 address or
    /// an IPv6 /64) had `max_connections_per_client` open.
    pub per_client_limit: u64,
    /// Connections closed at once: address not allowed (HTTP) or peer
    /// credentials not allowed (socket).
    pub denied: u64,
    /// Requests not received, or answers not taken, within `timeout`.
    pub timed_out: u64,
    /// Requests larger than the bound.
    pub oversized: u64,
    /// Requests that could not be parsed.
    pub bad: u64,
    /// Requests the management loop did not take or answer in time.
    pub busy: u64,
    /// Connections closed to give their slot to a client that may take it
    /// (HTTP: a configured peer, or a client below its fair share; see
    /// [`crate::admission`]).
    pub evicted: u64,
}

impl Counters {
    fn inc(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// The counters now.
    pub fn values(&self) -> CounterValues {
        let v = |c: &AtomicU64| c.load(Ordering::Relaxed);
        CounterValues {
            answered: v(&self.answered),
            refused: v(&self.refused),
            per_client_limit: v(&self.per_client_limit),
            denied: v(&self.denied),
            timed_out: v(&self.timed_out),
            oversized: v(&self.oversized),
            bad: v(&self.bad),
            busy: v(&self.busy),
            evicted: v(&self.evicted),
        }
    }
}

impl CounterValues {
    /// (name, value) pairs, in the order `stats` and `/metrics` show them.
    pub fn pairs(&self) -> [(&'static str, u64); 9] {
        [
            ("answered", self.answered),
            ("refused", self.refused),
            ("per_client_limit", self.per_client_limit),
            ("denied", self.denied),
            ("timed_out", self.timed_out),
            ("oversized", self.oversized),
            ("bad", self.bad),
            ("busy", self.busy),
            ("evicted", self.evicted),
        ]
    }
}

/// Connection limits of one listener.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections served at once.
    pub max_connections: usize,
    /// Connections served at once from one client (HTTP only).
    pub per_client: Option<usize>,
    /// For the whole request; again for writing the answer.
    pub timeout: Duration,
}

/// A listener as the management core sees it: its name (`http`,
/// `control`), limits and counters.
#[derive(Debug, Clone)]
pub struct ListenerInfo {
    /// `http` or `control`.
    pub name: &'static str,
    /// Its limits.
    pub limits: Limits,
    /// Its counters.
    pub counters: Arc<Counters>,
}

/// The running listeners: the thread, the management loop's end of the
/// channel, and the control socket's file (removed when stopped).
pub struct Listeners {
    calls: Receiver<Call>,
    info: Vec<ListenerInfo>,
    http_addr: Option<SocketAddr>,
    /// The HTTP listener's slots (to follow a reload's peers).
    http_admission: Option<Arc<Admission>>,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
    socket_file: Option<socket::SocketFile>,
}

/// What the HTTP front needs.
struct HttpSide {
    listener: std::net::TcpListener,
    admission: Arc<Admission>,
    ctx: Arc<Ctx>,
}

/// What the socket front needs.
struct SocketSide {
    listener: std::os::unix::net::UnixListener,
    peers: socket::Peers,
    ctx: Arc<Ctx>,
}

/// Shared by one listener's connections.
struct Ctx {
    calls: SyncSender<Call>,
    counters: Arc<Counters>,
    limits: Limits,
}

fn limits(
    max_connections: u32,
    per_client: Option<u32>,
    timeout: config::values::Duration,
) -> Limits {
    let max_connections = max_connections.max(1) as usize;
    Limits {
        max_connections,
        per_client: per_client.map(|n| (n.max(1) as usize).min(max_connections)),
        timeout: timeout.0,
    }
}

impl Listeners {
    /// Binds the control socket (any failure is an error: the daemon
    /// cannot be managed without it) and the HTTP endpoint (a failure is
    /// logged: the data plane does not need it), then serves both on the
    /// `spillway-listen` thread. `peers`: the configured peers, always
    /// served over HTTP ([`crate::admission::configured_peers`]).
    pub fn start(
        metrics: &config::schema::Metrics,
        control: &config::schema::Control,
        peers: Vec<Prefix>,
    ) -> Result<Listeners, ListenError> {
        let http_limits = limits(
            metrics.max_connections,
            Some(metrics.per_client()),
            metrics.timeout,
        );
        // The socket's peers are the node's operators (root, the daemon's
        // user, `socket_group`), who can drain every backend: no cap of
        // their own.
        let socket_limits = limits(control.max_connections, None, control.timeout);
        // Each connection has at most one call in flight.
        let (tx, calls) = std::sync::mpsc::sync_channel(
            http_limits.max_connections + socket_limits.max_connections,
        );
        let ctx = |limits: Limits| {
            Arc::new(Ctx {
                calls: tx.clone(),
                counters: Arc::new(Counters::default()),
                limits,
            })
        };
        let sock_err = |source| ListenError::Socket {
            path: control.socket.clone(),
            source,
        };
        let gid = match &control.socket_group {
            Some(g) => Some(socket::resolve_group(g).map_err(sock_err)?),
            None => None,
        };
        let (listener, socket_file) = socket::bind(&control.socket, gid).map_err(sock_err)?;
        let sock = SocketSide {
            listener,
            peers: socket_file.peers(),
            ctx: ctx(socket_limits),
        };
        let http = match std::net::TcpListener::bind(metrics.listen)
            .and_then(|l| l.set_nonblocking(true).map(|()| l))
        {
            Ok(listener) => {
                log::info!(
                    "status and metrics on http://{}/status and /metrics",
                    metrics.listen
                );
                Some(HttpSide {
                    listener,
                    admission: Admission::new(
                        http_limits.max_connections,
                        http_limits
                            .per_client
                            .unwrap_or(http_limits.max_connections),
                        Policy {
                            allow: metrics.allow.clone(),
                            peers,
                        },
                    ),
                    ctx: ctx(http_limits),
                })
            }
            Err(e) => {
                log::error!(
                    "[metrics] listen {}: {e}; no HTTP status or metrics",
                    metrics.listen
                );
                None
            }
        };
        let http_addr = http.as_ref().and_then(|h| h.listener.local_addr().ok());
        let http_admission = http.as_ref().map(|h| h.admission.clone());
        let mut info = vec![ListenerInfo {
            name: "control",
            limits: socket_limits,
            counters: sock.ctx.counters.clone(),
        }];
        if let Some(h) = &http {
            info.push(ListenerInfo {
                name: "http",
                limits: http_limits,
                counters: h.ctx.counters.clone(),
            });
        }
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .map_err(ListenError::Runtime)?;
        let (shutdown, stop) = oneshot::channel();
        let thread = std::thread::Builder::new()
            .name("spillway-listen".into())
            .spawn(move || {
                runtime.block_on(serve(http, sock, stop));
                // Not waiting for a group lookup stuck in NSS.
                runtime.shutdown_timeout(Duration::from_millis(500));
            })
            .map_err(ListenError::Runtime)?;
        Ok(Listeners {
            calls,
            info,
            http_addr,
            http_admission,
            shutdown: Some(shutdown),
            thread: Some(thread),
            socket_file: Some(socket_file),
        })
    }

    /// The management loop's end: requests waiting for an answer.
    pub fn calls(&self) -> &Receiver<Call> {
        &self.calls
    }

    /// Each listener's name, limits and counters.
    pub fn info(&self) -> &[ListenerInfo] {
        &self.info
    }

    /// The HTTP endpoint's address, if it is listening.
    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.http_addr
    }

    /// Follows a new configuration's peers (HTTP; the other listener
    /// settings take effect at the next start).
    pub fn set_peers(&self, peers: Vec<Prefix>) {
        if let Some(a) = &self.http_admission {
            a.set_peers(peers);
        }
    }

    /// The control socket's path.
    pub fn socket_path(&self) -> Option<&Path> {
        self.socket_file.as_ref().map(socket::SocketFile::path)
    }

    /// Stops serving: the thread ends (open connections are closed) and the
    /// control socket is removed. The counters stay readable.
    pub fn stop(&mut self) {
        if let Some(s) = self.shutdown.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.socket_file = None;
    }
}

impl Drop for Listeners {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The thread's work: both accept loops until told to stop.
async fn serve(http: Option<HttpSide>, sock: SocketSide, stop: oneshot::Receiver<()>) {
    let http = async move {
        match http {
            Some(h) => accept_http(h).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = stop => {}
        () = http => {}
        () = accept_socket(sock) => {}
    }
}

/// Serves the HTTP listener: its connections admitted as
/// [`crate::admission`] rules ([`admin::accept::admitted`]), each one's
/// request by one deadline.
async fn accept_http(h: HttpSide) {
    let listener = match tokio::net::TcpListener::from_std(h.listener) {
        Ok(l) => l,
        Err(e) => {
            log::error!("[metrics] listener: {e}; no HTTP status or metrics");
            return;
        }
    };
    let counters = h.ctx.counters.clone();
    let ctx = h.ctx;
    accept::admitted(
        async move || listener.accept().await,
        h.admission,
        http::BUSY,
        move |e| http_event(&counters, e),
        move |stream, _| {
            let ctx = ctx.clone();
            Box::pin(async move {
                let deadline = Instant::now() + ctx.limits.timeout;
                serve_connection(stream, Front::Http, &ctx, deadline, Ok(())).await;
            })
        },
    )
    .await;
}

/// Counts and logs what the HTTP listener's loop did besides serving.
fn http_event(counters: &Counters, e: Event<'_, SocketAddr>) {
    match e {
        Event::AcceptFailed(e) => log::warn!("[metrics] listener: accept: {e}"),
        Event::Refused(Refused::Denied, peer) => {
            // Closed at once, without an answer: nothing to learn here.
            Counters::inc(&counters.denied);
            log::debug!("http: {peer} is not in [metrics] allow");
        }
        Event::Refused(Refused::PerClient, peer) => {
            Counters::inc(&counters.per_client_limit);
            log::debug!("http: {peer} holds max_connections_per_client already");
        }
        Event::Refused(Refused::Full, _) => Counters::inc(&counters.refused),
        Event::Evicted(peer) => {
            Counters::inc(&counters.evicted);
            log::debug!("http: {peer}'s connection gave its slot to another client");
        }
    }
}

/// Serves the control socket: `max_connections` at once
/// ([`admin::accept::limited`]), each one's peer checked and its request
/// read by one deadline.
async fn accept_socket(s: SocketSide) {
    let listener = match tokio::net::UnixListener::from_std(s.listener) {
        Ok(l) => l,
        Err(e) => {
            log::error!("control socket: {e}");
            return;
        }
    };
    let peers = Arc::new(s.peers);
    let ctx = s.ctx;
    accept::limited(
        async move || listener.accept().await,
        ctx.limits.max_connections,
        socket::BUSY,
        |e| match e {
            Event::AcceptFailed(e) => log::warn!("control socket: accept: {e}"),
            Event::Refused(..) => Counters::inc(&ctx.counters.refused),
            // (Slots of a fixed number are not taken back.)
            Event::Evicted(_) => {}
        },
        |stream, _| {
            let (ctx, peers) = (ctx.clone(), peers.clone());
            async move {
                let deadline = Instant::now() + ctx.limits.timeout;
                let verdict = match tokio::time::timeout_at(deadline, peers.check(&stream)).await {
                    Ok(v) => v,
                    Err(_) => {
                        Counters::inc(&ctx.counters.timed_out);
                        return;
                    }
                };
                serve_connection(stream, Front::Control, &ctx, deadline, verdict).await;
            }
        },
    )
    .await;
}

/// The two protocols.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Front {
    Http,
    Control,
}

impl Front {
    /// Largest request read.
    pub(crate) fn max_request(self) -> usize {
        match self {
            Front::Http => http::MAX_HEAD,
            Front::Control => socket::MAX_LINE,
        }
    }

    /// Whether `buf` holds a whole request.
    fn complete(self, buf: &[u8]) -> bool {
        match self {
            Front::Http => http::head_complete(buf),
            Front::Control => buf.contains(&b'\n'),
        }
    }

    fn parse(self, buf: &[u8]) -> Parsed {
        match self {
            Front::Http => http::parse(buf),
            Front::Control => socket::parse(buf),
        }
    }

    /// The bytes that carry the management loop's answer (`/metrics` is
    /// OpenMetrics text, which has a content type of its own).
    fn wrap(self, answer: String, openmetrics: bool) -> Vec<u8> {
        match self {
            Front::Http if openmetrics => http::metrics_response(&answer),
            Front::Http => http::response("200 OK", &answer),
            Front::Control => answer.into_bytes(),
        }
    }

    fn timed_out(self) -> &'static [u8] {
        match self {
            Front::Http => http::TIMED_OUT,
            Front::Control => socket::TIMED_OUT,
        }
    }

    fn too_large(self) -> &'static [u8] {
        match self {
            Front::Http => http::TOO_LARGE,
            Front::Control => socket::TOO_LARGE,
        }
    }

    fn unavailable(self) -> &'static [u8] {
        match self {
            Front::Http => http::UNAVAILABLE,
            Front::Control => socket::UNAVAILABLE,
        }
    }
}

/// Why no whole request was read.
#[derive(Debug)]
pub(crate) enum ReadError {
    TooLarge,
    Io(std::io::Error),
}

/// Reads until `front` sees a whole request, the client stops sending
/// (EOF: what came is the request), or more than `front.max_request()`
/// bytes came. The caller bounds the time.
pub(crate) async fn read_request<S: AsyncRead + Unpin>(
    stream: &mut S,
    front: Front,
) -> Result<Vec<u8>, ReadError> {
    let max = front.max_request();
    let mut buf = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    loop {
        let n = stream.read(&mut chunk).await.map_err(ReadError::Io)?;
        if n == 0 {
            return Ok(buf);
        }
        buf.extend_from_slice(chunk.get(..n).unwrap_or_default());
        if front.complete(&buf) {
            return if buf.len() > max {
                Err(ReadError::TooLarge)
            } else {
                Ok(buf)
            };
        }
        if buf.len() > max {
            return Err(ReadError::TooLarge);
        }
    }
}

/// One connection: the request by `deadline`, the management loop's
/// answer, the answer written within the timeout again. A peer `denied`
/// gets its reason instead (after its request was read: closing on unread
/// data would reset the connection, and the reason with it).
async fn serve_connection<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    front: Front,
    ctx: &Ctx,
    deadline: Instant,
    denied: Result<(), String>,
) {
    let counters = &ctx.counters;
    let request = match tokio::time::timeout_at(deadline, read_request(&mut stream, front)).await {
        Ok(Ok(r)) => r,
        Ok(Err(ReadError::TooLarge)) => {
            Counters::inc(&counters.oversized);
            try_write(&mut stream, front.too_large()).await;
            return;
        }
        Ok(Err(ReadError::Io(e))) => {
            log::debug!("{front:?} listener: reading a request: {e}");
            return;
        }
        Err(_) => {
            Counters::inc(&counters.timed_out);
            try_write(&mut stream, front.timed_out()).await;
            return;
        }
    };
    if let Err(why) = denied {
        Counters::inc(&counters.denied);
        log::warn!("{front:?} listener: {why}");
        try_write(&mut stream, format!("error\n{why}\n").as_bytes()).await;
        return;
    }
    let bytes = match front.parse(&request) {
        Parsed::Job(job) => {
            let openmetrics = job == Job::Metrics;
            let (reply, answer) = oneshot::channel();
            match ctx.calls.try_send(Call { job, reply }) {
                Ok(()) => {}
                Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                    Counters::inc(&counters.busy);
                    try_write(&mut stream, front.unavailable()).await;
                    return;
                }
            }
            match tokio::time::timeout(ANSWER_TIMEOUT, answer).await {
                Ok(Ok(a)) => front.wrap(a, openmetrics),
                Ok(Err(_)) | Err(_) => {
                    Counters::inc(&counters.busy);
                    try_write(&mut stream, front.unavailable()).await;
                    return;
                }
            }
        }
        Parsed::Answer(bytes) => bytes,
        Parsed::Bad(bytes) => {
            Counters::inc(&counters.bad);
            try_write(&mut stream, &bytes).await;
            return;
        }
    };
    let write = async {
        stream.write_all(&bytes).await?;
        // Counted before the client can see the end of the answer.
        Counters::inc(&counters.answered);
        stream.shutdown().await
    };
    match tokio::time::timeout(ctx.limits.timeout, write).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => log::debug!("{front:?} listener: writing an answer: {e}"),
        Err(_) => Counters::inc(&counters.timed_out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(f)
    }

    #[test]
    fn a_request_is_read_up_to_its_end_and_no_further_than_the_bound() {
        run(async {
            let (mut a, mut b) = tokio::io::duplex(1 << 16);
            a.write_all(b"status\nrest").await.unwrap();
            let r = read_request(&mut b, Front::Control).await.unwrap();
            assert_eq!(r, b"status\nrest");

            // EOF ends a request without its newline.
            let (mut a, mut b) = tokio::io::duplex(1 << 16);
            a.write_all(b"stats").await.unwrap();
            drop(a);
            assert_eq!(
                read_request(&mut b, Front::Control).await.unwrap(),
                b"stats"
            );

            // A line longer than the bound, with or without its newline.
            for tail in [&b""[..], b"\n"] {
                let (mut a, mut b) = tokio::io::duplex(1 << 16);
                let mut long = vec![b'x'; socket::MAX_LINE + 1];
                long.extend_from_slice(tail);
                a.write_all(&long).await.unwrap();
                assert!(matches!(
                    read_request(&mut b, Front::Control).await,
                    Err(ReadError::TooLarge)
                ));
            }
            let (mut a, mut b) = tokio::io::duplex(1 << 16);
            a.write_all(&vec![b'H'; http::MAX_HEAD + 1]).await.unwrap();
            assert!(matches!(
                read_request(&mut b, Front::Http).await,
                Err(ReadError::TooLarge)
            ));
        });
    }

    use std::io::{Read, Write};
    use std::net::TcpStream;
    use std::os::unix::net::UnixStream;

    /// Listeners on a fresh socket path and an ephemeral port, with a
    /// thread standing in for the management loop.
    fn listeners(
        name: &str,
        max: u32,
        timeout_ms: u64,
        allow: Option<&str>,
    ) -> (Listeners, socket::tests::Tmp) {
        listeners_per_client(name, max, max, timeout_ms, allow)
    }

    /// The same, with a cap per client for HTTP.
    fn listeners_per_client(
        name: &str,
        max: u32,
        per_client: u32,
        timeout_ms: u64,
        allow: Option<&str>,
    ) -> (Listeners, socket::tests::Tmp) {
        listeners_with_peers(name, max, per_client, timeout_ms, allow, &[])
    }

    /// The same, with configured peers.
    fn listeners_with_peers(
        name: &str,
        max: u32,
        per_client: u32,
        timeout_ms: u64,
        allow: Option<&str>,
        peers: &[&str],
    ) -> (Listeners, socket::tests::Tmp) {
        let dir = socket::tests::tmp(&format!("listen-{name}"));
        let metrics = config::schema::Metrics {
            listen: "127.0.0.1:0".parse().unwrap(),
            allow: allow.map(|a| vec![a.parse().unwrap()]),
            max_connections: max,
            max_connections_per_client: Some(per_client),
            timeout: config::values::Duration::millis(timeout_ms),
        };
        let control = config::schema::Control {
            socket: dir.join("ctl.sock"),
            socket_group: None,
            max_connections: max,
            timeout: config::values::Duration::millis(timeout_ms),
            watch_config: false,
        };
        let peers = peers.iter().map(|p| p.parse().unwrap()).collect();
        let l = Listeners::start(&metrics, &control, peers).unwrap();
        (l, dir)
    }

    /// Answers calls like a management loop would, until the listeners go.
    fn answer_in_background(l: &mut Listeners) -> std::thread::JoinHandle<()> {
        answer_with(l, |job| {
            Some(match job {
                Job::Command(line) => format!("ok\n{line}\n"),
                Job::ExportedStatus => "rule web HEALTHY\n".to_owned(),
                Job::Metrics => "spillway_x 1\n".to_owned(),
            })
        })
    }

    /// Answers calls with `answer` (`None`: the reply is dropped, as by a
    /// loop that gave up), until the listeners go.
    fn answer_with(
        l: &mut Listeners,
        answer: impl Fn(Job) -> Option<String> + Send + 'static,
    ) -> std::thread::JoinHandle<()> {
        let (tx, calls) = std::sync::mpsc::sync_channel(1);
        let real = std::mem::replace(&mut l.calls, calls);
        drop(tx);
        std::thread::spawn(move || {
            while let Ok(c) = real.recv() {
                if let Some(a) = answer(c.job) {
                    let _ = c.reply.send(a);
                }
            }
        })
    }

    fn ask_socket(path: &Path, cmd: &[u8]) -> String {
        let mut s = UnixStream::connect(path).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let _ = s.write_all(cmd);
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    }

    fn ask_http(addr: SocketAddr, req: &[u8]) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let _ = s.write_all(req);
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    }

    fn counters(l: &Listeners, name: &str) -> CounterValues {
        l.info()
            .iter()
            .find(|i| i.name == name)
            .unwrap()
            .counters
            .values()
    }

    /// Sends one byte every 20 ms until the listener closes the connection
    /// (true) or `bytes` were sent (false).
    fn trickle<S: Write>(mut s: S, bytes: usize) -> bool {
        for _ in 0..bytes {
            if s.write_all(b"x").is_err() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    #[test]
    fn trickling_clients_are_cut_off_while_others_are_answered() {
        let (mut l, _dir) = listeners("trickle", 32, 300, None);
        let mgr = answer_in_background(&mut l);
        let path = l.socket_path().unwrap().to_owned();
        let addr = l.http_addr().unwrap();
        let mut tricklers = Vec::new();
        for i in 0..10 {
            let (path, addr) = (path.clone(), addr);
            tricklers.push(std::thread::spawn(move || {
                // 200 bytes at one per 20 ms: 4 s, far beyond the 300 ms
                // the listener gives a request.
                if i % 2 == 0 {
                    let s = UnixStream::connect(&path).unwrap();
                    trickle(s, 200)
                } else {
                    let s = TcpStream::connect(addr).unwrap();
                    trickle(s, 200)
                }
            }));
        }
        std::thread::sleep(Duration::from_millis(50));
        let t0 = std::time::Instant::now();
        assert_eq!(ask_socket(&path, b"status\n"), "ok\nstatus\n");
        let http = ask_http(addr, b"GET /status HTTP/1.0\r\n\r\n");
        println!("answered in {:?} while 10 clients trickled", t0.elapsed());
        assert!(http.ends_with("\r\n\r\nrule web HEALTHY\n"), "{http}");
        for t in tricklers {
            assert!(
                t.join().unwrap(),
                "a trickler was cut off before it was done"
            );
        }
        let (c, h) = (counters(&l, "control"), counters(&l, "http"));
        assert_eq!((c.timed_out, h.timed_out), (5, 5), "{c:?} {h:?}");
        assert_eq!((c.answered, h.answered), (1, 1), "{c:?} {h:?}");
        drop(l);
        mgr.join().unwrap();
        assert!(
            !path.exists(),
            "the socket is removed when the listeners stop"
        );
    }

    #[test]
    fn connections_beyond_the_cap_are_refused_and_counted() {
        let (mut l, _dir) = listeners("cap", 4, 2000, None);
        let mgr = answer_in_background(&mut l);
        let path = l.socket_path().unwrap().to_owned();
        let addr = l.http_addr().unwrap();
        // Four idle connections each hold a slot (the listener accepts in
        // order, so they are in before the fifth).
        let idle: Vec<_> = (0..4)
            .map(|_| UnixStream::connect(&path).unwrap())
            .collect();
        let idle_http: Vec<_> = (0..4).map(|_| TcpStream::connect(addr).unwrap()).collect();
        std::thread::sleep(Duration::from_millis(100));
        // (Sending nothing: a refused connection is closed without being
        // read, which resets it if a request was waiting.)
        assert_eq!(ask_socket(&path, b"").as_bytes(), socket::BUSY);
        assert_eq!(ask_http(addr, b"").as_bytes(), http::BUSY);
        assert_eq!(counters(&l, "control").refused, 1);
        assert_eq!(counters(&l, "http").refused, 1);
        // A slot freed is a slot served.
        drop(idle);
        drop(idle_http);
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(ask_socket(&path, b"stats\n"), "ok\nstats\n");
        drop(l);
        mgr.join().unwrap();
    }

    #[test]
    fn oversized_and_malformed_requests_are_answered_here_and_counted() {
        let (mut l, _dir) = listeners("size", 8, 2000, None);
        let mgr = answer_in_background(&mut l);
        let path = l.socket_path().unwrap().to_owned();
        let addr = l.http_addr().unwrap();
        let long = vec![b'x'; socket::MAX_LINE + 10];
        assert_eq!(ask_socket(&path, &long).as_bytes(), socket::TOO_LARGE);
        let mut head = b"GET /status HTTP/1.0\r\n".to_vec();
        while head.len() <= http::MAX_HEAD {
            head.extend_from_slice(b"X-Filler: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n");
        }
        head.extend_from_slice(b"\r\n");
        assert_eq!(ask_http(addr, &head).as_bytes(), http::TOO_LARGE);
        assert!(ask_http(addr, b"\r\n\r\n").starts_with("HTTP/1.0 400 "));
        assert!(ask_http(addr, b"GET /x HTTP/1.0\r\n\r\n").starts_with("HTTP/1.0 404 "));
        let (c, h) = (counters(&l, "control"), counters(&l, "http"));
        assert_eq!((c.oversized, h.oversized, h.bad, h.answered), (1, 1, 1, 1));
        drop(l);
        mgr.join().unwrap();
    }

    /// A TCP connection to `to` from `from` (any address of 127/8 is this
    /// host on Linux).
    fn connect_from(from: &str, to: SocketAddr) -> TcpStream {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        let from: SocketAddr = (from.parse::<std::net::Ipv4Addr>().unwrap(), 0).into();
        s.bind(&from.into()).unwrap();
        s.connect(&to.into()).unwrap();
        s.into()
    }

    fn ask(mut s: TcpStream, req: &[u8]) -> String {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let _ = s.write_all(req);
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    }

    /// Waits (at most 10 s) until `done`.
    fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !done() {
            assert!(std::time::Instant::now() < deadline, "{what}: never");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn one_client_at_its_cap_leaves_the_other_slots_to_others() {
        let (mut l, _dir) = listeners_per_client("per-client", 8, 2, 2000, None);
        let mgr = answer_in_background(&mut l);
        let addr = l.http_addr().unwrap();
        let clients = l.http_admission.clone().unwrap();
        let first: std::net::IpAddr = "127.0.0.1".parse().unwrap();
        let idle: Vec<_> = (0..2).map(|_| connect_from("127.0.0.1", addr)).collect();
        wait_for("two slots held", || clients.held(first) == 2);
        // A third from the same address: 503, closed, counted.
        assert_eq!(
            ask(connect_from("127.0.0.1", addr), b"").as_bytes(),
            http::BUSY
        );
        // Another address still has its share.
        let answer = ask(
            connect_from("127.0.0.2", addr),
            b"GET /status HTTP/1.0\r\n\r\n",
        );
        assert!(answer.ends_with("\r\n\r\nrule web HEALTHY\n"), "{answer}");
        let h = counters(&l, "http");
        assert_eq!(
            (h.per_client_limit, h.refused, h.answered),
            (1, 0, 1),
            "{h:?}"
        );
        drop(idle);
        wait_for("the slots given back", || clients.clients() == 0);
        drop(l);
        mgr.join().unwrap();
    }

    /// With one connection per client, each way a connection can end must
    /// give its slot back, or the client's next one would be refused.
    #[test]
    fn every_way_an_http_connection_ends_gives_its_client_slot_back() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let (mut l, _dir) = listeners_per_client("exits", 8, 1, 300, None);
        let huge = Arc::new(AtomicBool::new(false));
        let mgr = answer_with(&mut l, {
            let huge = huge.clone();
            move |job| match job {
                Job::ExportedStatus => Some("rule web HEALTHY\n".to_owned()),
                // More than the socket buffers take: the client must read.
                Job::Metrics if huge.load(Ordering::Relaxed) => Some("x".repeat(64 << 20)),
                // The loop gives up: busy.
                Job::Metrics | Job::Command(_) => None,
            }
        });
        let addr = l.http_addr().unwrap();
        let clients = l.http_admission.clone().unwrap();
        let me: std::net::IpAddr = "127.0.0.1".parse().unwrap();
        let status = b"GET /status HTTP/1.0\r\n\r\n";
        // The client's next request is answered (retried while the slot is
        // not back yet: the listener may see the next connection before the
        // end of the last one when the client ended it).
        let served_again = |after: &str| {
            let mut tries = 0;
            wait_for(&format!("served again after {after}"), || {
                tries += 1;
                ask(connect_from("127.0.0.1", addr), status).ends_with("rule web HEALTHY\n")
            });
            println!("{after}: served again at try {tries}");
        };
        served_again("nothing");

        // The request never comes (timed out, 408), while a second
        // connection of the same client is refused (503).
        let idle = connect_from("127.0.0.1", addr);
        wait_for("the idle connection's slot", || clients.held(me) == 1);
        assert_eq!(
            ask(connect_from("127.0.0.1", addr), b"").as_bytes(),
            http::BUSY
        );
        assert!(ask(idle, b"").starts_with("HTTP/1.0 408 "));
        served_again("a request that never came");
        // Part of a request, then nothing.
        assert!(ask(connect_from("127.0.0.1", addr), b"GET /st").starts_with("HTTP/1.0 408 "));
        served_again("a request cut short");
        // Too large, malformed, unknown path.
        let big = vec![b'H'; http::MAX_HEAD + 1];
        assert_eq!(
            ask(connect_from("127.0.0.1", addr), &big).as_bytes(),
            http::TOO_LARGE
        );
        served_again("an oversized request");
        assert!(ask(connect_from("127.0.0.1", addr), b"\r\n\r\n").starts_with("HTTP/1.0 400 "));
        served_again("a malformed request");
        assert!(
            ask(connect_from("127.0.0.1", addr), b"GET /x HTTP/1.0\r\n\r\n")
                .starts_with("HTTP/1.0 404 ")
        );
        served_again("a 404");
        // The management loop gives up on the request.
        assert_eq!(
            ask(
                connect_from("127.0.0.1", addr),
                b"GET /metrics HTTP/1.0\r\n\r\n"
            )
            .as_bytes(),
            http::UNAVAILABLE
        );
        served_again("a request the loop did not answer");
        // The client resets the connection mid-request (a read error).
        let s = socket2::Socket::from(connect_from("127.0.0.1", addr));
        s.set_linger(Some(Duration::ZERO)).unwrap();
        let _ = (&s).write_all(b"GET /status HTTP/1.0\r\n");
        wait_for("the reset connection's slot", || clients.held(me) == 1);
        drop(s);
        served_again("a reset");
        // The client never reads its (large) answer: the write times out,
        // and the slot is back while the client still holds its socket.
        huge.store(true, Ordering::Relaxed);
        let mut unread = connect_from("127.0.0.1", addr);
        unread.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
        let before = counters(&l, "http").timed_out;
        wait_for("the unread answer timed out", || {
            counters(&l, "http").timed_out > before
        });
        served_again("an answer never read");
        drop(unread);

        let h = counters(&l, "http");
        println!("{h:?}");
        assert!(h.per_client_limit >= 1, "{h:?}");
        assert_eq!(
            (h.timed_out, h.oversized, h.bad, h.busy),
            (3, 1, 1, 1),
            "{h:?}"
        );
        wait_for("every slot given back", || clients.clients() == 0);
        drop(l);
        mgr.join().unwrap();
    }

    /// Issue 38 item 6: idle connections hold every slot; a configured
    /// peer takes the oldest one's slot and is answered, the idle client
    /// is told 503 and closed, and it is counted.
    #[test]
    fn a_peer_takes_an_idle_clients_slot_when_all_are_taken() {
        let (mut l, _dir) = listeners_with_peers("evict", 2, 2, 5000, None, &["127.0.0.9/32"]);
        let mgr = answer_in_background(&mut l);
        let addr = l.http_addr().unwrap();
        let slots = l.http_admission.clone().unwrap();
        let first = connect_from("127.0.0.1", addr);
        wait_for("a slot held", || slots.len() == 1);
        let _second = connect_from("127.0.0.3", addr);
        wait_for("two slots held", || slots.len() == 2);
        // Another client is refused (each holds one: no fair share to
        // take from): 503.
        assert_eq!(
            ask(connect_from("127.0.0.2", addr), b"").as_bytes(),
            http::BUSY
        );
        // The peer is answered.
        let answer = ask(
            connect_from("127.0.0.9", addr),
            b"GET /status HTTP/1.0\r\n\r\n",
        );
        assert!(answer.ends_with("\r\n\r\nrule web HEALTHY\n"), "{answer}");
        // The oldest idle connection was told and closed.
        let mut first = first;
        first
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut got = Vec::new();
        let _ = first.read_to_end(&mut got);
        assert_eq!(got, http::BUSY);
        let h = counters(&l, "http");
        assert_eq!((h.evicted, h.refused, h.answered), (1, 1, 1), "{h:?}");
        drop(l);
        mgr.join().unwrap();
    }

    #[test]
    fn addresses_outside_the_allow_list_are_closed_at_once() {
        let (mut l, _dir) = listeners("allow", 8, 2000, Some("10.0.0.0/8"));
        let mgr = answer_in_background(&mut l);
        let addr = l.http_addr().unwrap();
        assert_eq!(ask_http(addr, b"GET /status HTTP/1.0\r\n\r\n"), "");
        assert_eq!(counters(&l, "http").denied, 1);
        drop(l);
        mgr.join().unwrap();
    }
}
