//! The running service: probe tasks feed the engine, which reads the
//! server, decides (`state`, `publish`) and sends the minimal update;
//! commands from the control socket go to the engine too. One thread
//! (a current-thread tokio runtime); blocking DNS exchanges and pings run
//! on tokio's blocking pool.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use admin::openmetrics::Exposition;
use dnsupdate::{Client, ClientError, Op, Rdata, rtype};
use health::probe::Prober;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot, watch};

use crate::config::Settings;
use crate::probe;
use crate::publish::{ServerView, address_ops};
use crate::state::{Health, Zones};

/// Why the service could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// the control socket
    #[error("control socket {path}: {source}")]
    Socket {
        /// its path
        path: String,
        /// why
        source: admin::unix::BindError,
    },
    /// the runtime or the prober
    #[error("{0}")]
    Setup(String),
}

/// A probe's result for VIP `vip` of zone `zone` (indices in the settings).
#[derive(Debug)]
struct ProbeResult {
    zone: usize,
    vip: usize,
    outcome: probe::Outcome,
}

/// A control command and where its answer goes: (ok, text).
struct Command {
    line: String,
    reply: oneshot::Sender<(bool, String)>,
}

/// The engine's state: what the probes said, what the server holds, and
/// what happened, for status.
struct Engine {
    settings: Arc<Settings>,
    client: Client,
    zones: Zones,
    /// Removed zones as last read from the server.
    removed: watch::Sender<BTreeSet<String>>,
    /// The server's address set as last read or written.
    published: Option<BTreeSet<IpAddr>>,
    fail_open: bool,
    updates: u64,
    errors: u64,
    last_update: Option<(Instant, String)>,
    last_error: Option<(Instant, String)>,
    last_sync_ok: bool,
    started: Instant,
}

/// Most attempts of one decision when the records change under it.
const ATTEMPTS: usize = 3;

/// Longest command line.
const MAX_LINE: usize = 1024;
/// Control-socket connections served at once; more are turned away (its
/// peers are the host's operators, by their credentials; the HTTP
/// endpoint's limits are `[metrics]`'s).
const MAX_CONNECTIONS: usize = 16;
/// Time a control-socket client has to send its line.
const LINE_TIMEOUT: Duration = Duration::from_secs(5);

impl Engine {
    /// Reads the three RRsets.
    async fn read(&self) -> Result<ServerView, ClientError> {
        let client = self.client.clone();
        let s = self.settings.clone();
        tokio::task::spawn_blocking(move || {
            let a = client.rrset(&s.name, rtype::A)?;
            let aaaa = client.rrset(&s.name, rtype::AAAA)?;
            let txt = client.rrset(&s.removed_name, rtype::TXT)?;
            Ok(ServerView::from_records(&a, &aaaa, &txt))
        })
        .await
        .unwrap_or_else(|e| Err(io_error(&self.client, &e.to_string())))
    }

    /// Sends `ops`, guarded by the removed zones of `view`.
    async fn send(&self, view: &ServerView, ops: Vec<Op>) -> Result<(), ClientError> {
        let client = self.client.clone();
        let s = self.settings.clone();
        let prereq = view.removed_unchanged(&s.removed_name);
        tokio::task::spawn_blocking(move || client.update(&s.zone, &[prereq], &ops))
            .await
            .unwrap_or_else(|e| Err(io_error(&self.client, &e.to_string())))
    }

    fn note_removed(&mut self, view: &ServerView) {
        let known: BTreeSet<String> = view
            .removed
            .iter()
            .filter(|z| self.settings.zone(z).is_some())
            .cloned()
            .collect();
        let before = self.removed.borrow().clone();
        for restored in before.difference(&known) {
            if let Some(z) = self.zones.zone_mut(restored) {
                z.reset();
            }
        }
        if before != known {
            log::info!("removed zones now: {}", list(&known));
            self.removed.send_replace(known);
        }
    }

    /// Records a failed exchange ("reading NAME from SERVER: why"); the text.
    fn failed(&mut self, doing: &str, prep: &str, e: &ClientError) -> String {
        let msg = format!(
            "{doing} {} {prep} {}: {e}",
            self.settings.name, self.settings.server
        );
        self.error(msg.clone());
        msg
    }

    fn error(&mut self, what: String) {
        if self.last_sync_ok || self.last_error.as_ref().is_none_or(|(_, e)| *e != what) {
            log::warn!("{what}");
        }
        self.errors += 1;
        self.last_sync_ok = false;
        self.last_error = Some((Instant::now(), what));
    }

    /// Reads the server and brings it to the plan, optionally with the
    /// removed zones changed (`change`: zone, removed?); returns what was
    /// done, for the operator.
    async fn sync(&mut self, change: Option<(&str, bool)>) -> Result<String, String> {
        for attempt in 1..=ATTEMPTS {
            let view = match self.read().await {
                Ok(v) => v,
                Err(e) => return Err(self.failed("reading", "from", &e)),
            };
            self.note_removed(&view);
            let mut removed = self.removed.borrow().clone();
            let mut ops = Vec::new();
            if let Some((zone, remove)) = change {
                let raw = Rdata::txt(zone);
                let present = view.removed.contains(zone);
                if remove && !present {
                    removed.insert(zone.to_owned());
                    ops.push(Op::Add {
                        name: self.settings.removed_name.clone(),
                        ttl: self.settings.ttl,
                        rdata: raw,
                    });
                } else if !remove && present {
                    removed.remove(zone);
                    ops.push(Op::Delete {
                        name: self.settings.removed_name.clone(),
                        rdata: raw,
                    });
                    if let Some(z) = self.zones.zone_mut(zone) {
                        z.reset();
                    }
                }
            }
            let plan = self.zones.plan(&removed);
            // Undecided (zones still unknown): the server's set stays, but a
            // removed zone's VIPs leave it all the same.
            let keep = || -> BTreeSet<IpAddr> {
                let gone: BTreeSet<IpAddr> = self
                    .settings
                    .zones
                    .iter()
                    .filter(|z| removed.contains(&z.name))
                    .flat_map(|z| z.vips.iter().copied())
                    .collect();
                view.published().difference(&gone).copied().collect()
            };
            let want = plan.as_ref().map_or_else(keep, |p| p.addrs.clone());
            let mut what = Vec::new();
            {
                let addr_ops = address_ops(&self.settings.name, &view, &want, self.settings.ttl);
                for op in &addr_ops {
                    what.push(match op {
                        Op::Add { rdata, .. } if view.published().contains(&addr_of(rdata)) => {
                            format!("TTL of {}", addr_of(rdata))
                        }
                        Op::Add { rdata, .. } => format!("added {}", addr_of(rdata)),
                        Op::Delete { rdata, .. } => format!("withdrew {}", addr_of(rdata)),
                    });
                }
                ops.extend(addr_ops);
            }
            if let Some(p) = &plan {
                if p.fail_open != self.fail_open {
                    if p.fail_open {
                        log::warn!("no zone is healthy: fail-open, every zone's records published");
                    } else {
                        log::info!("fail-open over");
                    }
                }
                self.fail_open = p.fail_open;
            }
            if let Some((zone, remove)) = change {
                what.insert(
                    0,
                    format!(
                        "zone {zone} {}",
                        if remove { "removed" } else { "restored" }
                    ),
                );
            }
            if ops.is_empty() {
                self.published = Some(view.published());
                self.last_sync_ok = true;
                return Ok(if what.is_empty() {
                    "nothing to change".to_owned()
                } else {
                    what.join(", ")
                });
            }
            match self.send(&view, ops).await {
                Ok(()) => {
                    if change.is_some() {
                        self.removed.send_replace(removed);
                    }
                    let text = what.join(", ");
                    log::info!("updated {}: {text}", self.settings.name);
                    self.updates += 1;
                    self.last_update = Some((Instant::now(), text.clone()));
                    self.last_sync_ok = true;
                    self.published = Some(want);
                    return Ok(text);
                }
                Err(ClientError::Changed(r)) if attempt < ATTEMPTS => {
                    log::info!("the records changed while deciding ({r}): reading them again");
                }
                Err(e) => return Err(self.failed("updating", "on", &e)),
            }
        }
        Err("the records kept changing; try again".to_owned())
    }

    /// One probe result; whether a zone changed state.
    fn take(&mut self, r: ProbeResult) -> bool {
        let Some(spec) = self.settings.zones.get(r.zone) else {
            return false;
        };
        if self.removed.borrow().contains(&spec.name) {
            return false;
        }
        let Some(v) = self
            .zones
            .zones
            .get_mut(r.zone)
            .and_then(|z| z.vips.get_mut(r.vip))
        else {
            return false;
        };
        let (ok, text) = match r.outcome {
            Ok(()) => (true, "ok".to_owned()),
            Err(e) => (false, e),
        };
        let changed = v.record(ok, text.clone());
        if changed {
            log::info!(
                "zone {} VIP {}: {} ({text})",
                spec.name,
                v.addr,
                v.state.name()
            );
        }
        changed
    }

    async fn command(&mut self, line: &str) -> (bool, String) {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["status"] => (true, self.status_text()),
            ["status", "json"] => (true, self.status_json()),
            ["metrics"] => (true, self.metrics()),
            ["remove", zone, rest @ ..] if rest.is_empty() || rest == ["force"] => {
                self.remove(zone, rest == ["force"]).await
            }
            ["restore", zone] => match self.settings.zone(zone) {
                None => (false, self.unknown_zone(zone)),
                Some(_) => match self.sync(Some((zone, false))).await {
                    Ok(t) => (
                        true,
                        format!("{t}; probing it again, its records return once its VIPs pass"),
                    ),
                    Err(e) => (false, e),
                },
            },
            _ => (
                false,
                "unknown command: status [json], metrics, remove ZONE [force], restore ZONE"
                    .to_owned(),
            ),
        }
    }

    async fn remove(&mut self, zone: &str, force: bool) -> (bool, String) {
        if self.settings.zone(zone).is_none() {
            return (false, self.unknown_zone(zone));
        }
        let removed = self.removed.borrow().clone();
        let left = self
            .settings
            .zones
            .iter()
            .filter(|z| z.name != zone && !removed.contains(&z.name))
            .count();
        if left == 0 && !force {
            return (
                false,
                format!(
                    "removing zone {zone} would leave no zone published: the name would not resolve; use --force to do it anyway"
                ),
            );
        }
        match self.sync(Some((zone, true))).await {
            Ok(t) => (true, format!("{t}; not probed until restored")),
            Err(e) => (false, e),
        }
    }

    fn unknown_zone(&self, zone: &str) -> String {
        let names: Vec<&str> = self
            .settings
            .zones
            .iter()
            .map(|z| z.name.as_str())
            .collect();
        format!("no zone is named {zone:?} (zones: {})", names.join(", "))
    }

    fn zone_state(&self, name: &str, h: Health) -> &'static str {
        if self.removed.borrow().contains(name) {
            "removed"
        } else {
            h.name()
        }
    }

    fn status_text(&self) -> String {
        let s = &self.settings;
        let mut out = format!(
            "zone-health: publishing {} on {} (zone {}, TTL {} s); up {} s\n",
            s.name,
            s.server,
            s.zone,
            s.ttl,
            self.started.elapsed().as_secs()
        );
        let published = self
            .published
            .as_ref()
            .map_or("(not read yet)".to_owned(), list);
        let _ = writeln!(
            out,
            "published: {published}{}",
            if self.fail_open {
                " (fail-open: no zone is healthy)"
            } else {
                ""
            }
        );
        for z in &self.zones.zones {
            let state = self.zone_state(&z.name, z.state());
            let _ = write!(out, "zone {}: {state}", z.name);
            if state == "removed" {
                let _ = writeln!(out, " (by an operator; not probed)");
                continue;
            }
            let vips: Vec<String> = z
                .vips
                .iter()
                .map(|v| format!("{} {} ({})", v.addr, v.state.name(), v.last))
                .collect();
            let _ = writeln!(out, "; {}", vips.join(", "));
        }
        let ago = |t: &Instant| format!("{} s ago", t.elapsed().as_secs());
        let _ = writeln!(
            out,
            "updates: {}; last: {}; errors: {}; last error: {}",
            self.updates,
            self.last_update
                .as_ref()
                .map_or("none".to_owned(), |(t, w)| format!("{} ({w})", ago(t))),
            self.errors,
            self.last_error
                .as_ref()
                .map_or("none".to_owned(), |(t, w)| format!("{} ({w})", ago(t))),
        );
        out
    }

    fn status_json(&self) -> String {
        let zones: Vec<serde_json::Value> = self
            .zones
            .zones
            .iter()
            .map(|z| {
                serde_json::json!({
                    "name": z.name,
                    "state": self.zone_state(&z.name, z.state()),
                    "vips": z.vips.iter().map(|v| serde_json::json!({
                        "addr": v.addr.to_string(),
                        "healthy": v.state == Health::Healthy,
                        "state": v.state.name(),
                        "last_probe": v.last,
                        "probes": v.probes,
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        serde_json::json!({
            "ok": true,
            "name": self.settings.name.to_string(),
            "server": self.settings.server.to_string(),
            "zones": zones,
            "removed": self.removed.borrow().iter().collect::<Vec<_>>(),
            "fail_open": self.fail_open,
            "published": self.published.as_ref().map(|p| p.iter().map(ToString::to_string).collect::<Vec<_>>()),
            "updates": self.updates,
            "errors": self.errors,
            "last_update": self.last_update.as_ref().map(|(_, w)| w),
            "last_update_seconds_ago": self.last_update.as_ref().map(|(t, _)| t.elapsed().as_secs()),
            "last_error": self.last_error.as_ref().map(|(_, w)| w),
            "last_sync_ok": self.last_sync_ok,
        })
        .to_string()
    }

    /// The OpenMetrics text exposition.
    fn metrics(&self) -> String {
        let mut x = Exposition::new();
        x.gauge(
            "zone_health_zone_state",
            "Each zone's state (1 for the state it is in).",
            self.zones.zones.iter().flat_map(|z| {
                let now = self.zone_state(&z.name, z.state());
                ["healthy", "unhealthy", "unknown", "removed"].map(|st| {
                    let labels = vec![("zone", z.name.clone()), ("state", st.to_owned())];
                    (labels, u8::from(now == st))
                })
            }),
        );
        x.one_gauge(
            "zone_health_published_records",
            "Records the name holds as last read or written.",
            self.published.as_ref().map_or(0, |p| p.len() as u64),
        );
        x.one_gauge(
            "zone_health_fail_open",
            "1 while no zone is healthy and every zone's records are published.",
            self.fail_open,
        );
        x.one_counter(
            "zone_health_updates_total",
            "Updates the server accepted.",
            self.updates,
        );
        x.one_counter(
            "zone_health_errors_total",
            "Failed reads and updates.",
            self.errors,
        );
        x.one_gauge(
            "zone_health_last_sync_ok",
            "1 if the last exchange with the server succeeded.",
            self.last_sync_ok,
        );
        x.gauge(
            "zone_health_vip_healthy",
            "1 while a VIP passes its probes.",
            self.zones.zones.iter().flat_map(|z| {
                z.vips.iter().map(|v| {
                    let labels = vec![("zone", z.name.clone()), ("vip", v.addr.to_string())];
                    (labels, v.state == Health::Healthy)
                })
            }),
        );
        x.text()
    }
}

fn addr_of(r: &Rdata) -> IpAddr {
    match r {
        Rdata::A(a) => IpAddr::V4(*a),
        Rdata::Aaaa(a) => IpAddr::V6(*a),
        _ => IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
    }
}

fn list<T: ToString>(items: &BTreeSet<T>) -> String {
    if items.is_empty() {
        return "(none)".to_owned();
    }
    items
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

fn io_error(client: &Client, what: &str) -> ClientError {
    ClientError::Io {
        what: "talking to",
        server: client.server(),
        source: std::io::Error::other(what.to_owned()),
    }
}

/// Runs the service until the process ends.
pub fn run(settings: Settings) -> Result<(), StartError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| StartError::Setup(format!("runtime: {e}")))?;
    rt.block_on(serve(settings))
}

async fn serve(settings: Settings) -> Result<(), StartError> {
    let gid = match &settings.socket_group {
        Some(g) => Some(
            admin::unix::resolve_group(g).map_err(|source| StartError::Socket {
                path: settings.socket.display().to_string(),
                source,
            })?,
        ),
        None => None,
    };
    let (listener, file) =
        admin::unix::bind(&settings.socket, gid).map_err(|source| StartError::Socket {
            path: settings.socket.display().to_string(),
            source,
        })?;
    listener
        .set_nonblocking(true)
        .map_err(|e| StartError::Setup(format!("control socket: {e}")))?;
    let listener = tokio::net::UnixListener::from_std(listener)
        .map_err(|e| StartError::Setup(format!("control socket: {e}")))?;
    let prober = Arc::new(Prober::new().map_err(|e| StartError::Setup(format!("prober: {e}")))?);
    let settings = Arc::new(settings);
    let (removed_tx, removed_rx) = watch::channel(BTreeSet::new());
    let (results_tx, mut results) = mpsc::channel::<ProbeResult>(256);
    let (commands_tx, mut commands) = mpsc::channel::<Command>(16);

    // One task per VIP, their starts spread over the interval.
    let check = probe::port_check(&settings.probe);
    let count: usize = settings.zones.iter().map(|z| z.vips.len()).sum();
    let mut k = 0;
    for (zi, z) in settings.zones.iter().enumerate() {
        for (vi, &addr) in z.vips.iter().enumerate() {
            let phase = settings.probe.interval * u32::try_from(k).unwrap_or(0)
                / u32::try_from(count.max(1)).unwrap_or(1);
            k += 1;
            let (s, tx, removed, prober, check) = (
                settings.clone(),
                results_tx.clone(),
                removed_rx.clone(),
                prober.clone(),
                check.clone(),
            );
            let (zone, port) = (z.name.clone(), z.port);
            tokio::spawn(async move {
                tokio::time::sleep(phase).await;
                let mut tick = tokio::time::interval(s.probe.interval);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tick.tick().await;
                    if removed.borrow().contains(&zone) {
                        continue;
                    }
                    let outcome = probe::probe_vip(
                        &prober,
                        addr,
                        s.probe.icmp,
                        port,
                        check.as_ref(),
                        s.probe.timeout,
                    )
                    .await;
                    if tx
                        .send(ProbeResult {
                            zone: zi,
                            vip: vi,
                            outcome,
                        })
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
            });
        }
    }

    if let Some(h) = settings.http.clone() {
        let addr = h.listen;
        let http = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| StartError::Setup(format!("[metrics] listen {addr}: {e}")))?;
        if !addr.ip().is_loopback() && h.allow.is_none() {
            log::warn!(
                "[metrics] listen {addr} is not a loopback address: anyone who reaches it reads the zones' state (set [metrics] allow to narrow it)"
            );
        }
        tokio::spawn(serve_metrics(http, commands_tx.clone(), h));
    }
    let peers = file.peers();
    let control = commands_tx.clone();
    // MAX_CONNECTIONS at once, the others told so; nothing counted. Each
    // one's exchange is the service's own: its line protocol answers
    // `error` with a reason where the daemon's socket answers its own.
    tokio::spawn(admin::accept::limited(
        async move || listener.accept().await,
        MAX_CONNECTIONS,
        b"error\ntoo many connections to the control socket; try again\n",
        |_| {},
        move |mut stream: tokio::net::UnixStream, _| {
            let commands = control.clone();
            async move {
                let answer = match peers.check(&stream).await {
                    Err(e) => (false, e),
                    Ok(()) => {
                        match tokio::time::timeout(LINE_TIMEOUT, read_line(&mut stream)).await {
                            Err(_) => (false, "timed out waiting for a command line".to_owned()),
                            Ok(Err(e)) => (false, e),
                            Ok(Ok(line)) => ask(&commands, line)
                                .await
                                .unwrap_or((false, "the service is stopping".to_owned())),
                        }
                    }
                };
                let text = format!(
                    "{}\n{}\n",
                    if answer.0 { "ok" } else { "error" },
                    answer.1.trim_end()
                );
                let _ = tokio::time::timeout(LINE_TIMEOUT, stream.write_all(text.as_bytes())).await;
            }
        },
    ));

    let client = Client::new(settings.server, settings.key.clone(), settings.dns_timeout);
    let mut engine = Engine {
        zones: Zones::new(&settings.zones, &settings.probe),
        settings: settings.clone(),
        client,
        removed: removed_tx,
        published: None,
        fail_open: false,
        updates: 0,
        errors: 0,
        last_update: None,
        last_error: None,
        last_sync_ok: false,
        started: Instant::now(),
    };
    log::info!(
        "zone-health: {} zones, probing every {:?}, publishing {} on {}; control socket {}",
        settings.zones.len(),
        settings.probe.interval,
        settings.name,
        settings.server,
        file.path().display()
    );
    // Read the server at once: the removed zones are known before any
    // probe is sent, and a wrong key or address shows in the first second.
    let _ = engine.sync(None).await;
    let mut tick = tokio::time::interval(settings.probe.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            Some(r) = results.recv() => {
                if engine.take(r) {
                    let _ = engine.sync(None).await;
                }
            }
            Some(c) = commands.recv() => {
                let answer = engine.command(&c.line).await;
                let _ = c.reply.send(answer);
            }
            _ = tick.tick() => {
                // Every interval: learn other services' removals, repair
                // records changed by hand, retry a failed update.
                let _ = engine.sync(None).await;
            }
        }
    }
}

/// `GET /metrics` (OpenMetrics text) and `GET /status` (the JSON of
/// `status --json`), one request per connection, for scrapers, admitted as
/// the daemon's HTTP listener admits ([`admin::accept::admitted`] by
/// [`admin::admission`]: `allow`, `max_connections`,
/// `max_connections_per_client`; when every slot is taken, a client below
/// its fair share takes one from a client holding two more); the whole
/// request within `timeout`, the answer taken within `timeout` again.
async fn serve_metrics(
    listener: tokio::net::TcpListener,
    commands: mpsc::Sender<Command>,
    h: crate::config::Http,
) {
    use admin::admission::{Admission, Policy};
    let slots = Admission::new(
        h.max_connections,
        h.per_client,
        Policy {
            allow: h.allow.clone(),
            // No other service depends on this one's answers.
            peers: Vec::new(),
        },
    );
    let timeout = h.timeout;
    admin::accept::admitted(
        async move || listener.accept().await,
        slots,
        BUSY,
        // Nothing counted or logged: the service has no listener counters.
        |_| {},
        move |stream, _| {
            let commands = commands.clone();
            Box::pin(async move { http_exchange(stream, &commands, timeout).await })
        },
    )
    .await;
}

/// Every slot taken, or this one given to another client.
const BUSY: &[u8] =
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

/// One request and its answer. Not the daemon's exchange
/// (`control::listen`), whose loop it shares: these answers are HTTP/1.1,
/// a head that is too long or late is answered for what came of it (a
/// 404, mostly) where the daemon answers 431 or 408, and the engine
/// answers, not a management loop; scrapers and checks read these answers
/// as they are.
async fn http_exchange(
    stream: &mut tokio::net::TcpStream,
    commands: &mpsc::Sender<Command>,
    timeout: Duration,
) {
    let head = tokio::time::timeout(timeout, async {
        let mut buf = Vec::with_capacity(512);
        let mut chunk = [0u8; 512];
        while !admin::http::head_complete(&buf) && buf.len() <= admin::http::MAX_HEAD {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        buf
    })
    .await
    .unwrap_or_default();
    let line = head.split(|&b| b == b'\n').next().unwrap_or_default();
    let command = match line.strip_suffix(b"\r").unwrap_or(line) {
        b"GET /metrics HTTP/1.1" | b"GET /metrics HTTP/1.0" => Some((
            "metrics",
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )),
        b"GET /status HTTP/1.1" | b"GET /status HTTP/1.0" => {
            Some(("status json", "application/json"))
        }
        _ => None,
    };
    let (status, kind, body) = match command {
        None => (
            "404 Not Found",
            "text/plain",
            "GET /metrics or /status\n".to_owned(),
        ),
        Some((c, kind)) => match ask(commands, c.to_owned()).await {
            Some((true, body)) => ("200 OK", kind, body),
            _ => (
                "503 Service Unavailable",
                "text/plain",
                "the service is busy\n".to_owned(),
            ),
        },
    };
    let answer = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(timeout, stream.write_all(answer.as_bytes())).await;
}

/// Asks the engine `line`; `None` when the service is stopping.
async fn ask(commands: &mpsc::Sender<Command>, line: String) -> Option<(bool, String)> {
    let (tx, rx) = oneshot::channel();
    commands.send(Command { line, reply: tx }).await.ok()?;
    Some(rx.await.unwrap_or((false, "no answer".to_owned())))
}

/// One command line, at most [`MAX_LINE`] bytes, UTF-8.
async fn read_line(stream: &mut tokio::net::UnixStream) -> Result<String, String> {
    let mut buf = Vec::with_capacity(128);
    let mut chunk = [0u8; 256];
    loop {
        let n = stream
            .read(&mut chunk)
            .await
            .map_err(|e| format!("reading the command: {e}"))?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
        if buf.contains(&b'\n') {
            break;
        }
        if buf.len() > MAX_LINE {
            return Err("command line too long".to_owned());
        }
    }
    let line = buf.split(|&b| b == b'\n').next().unwrap_or_default();
    if line.len() > MAX_LINE {
        return Err("command line too long".to_owned());
    }
    String::from_utf8(line.to_vec())
        .map(|s| s.trim().to_owned())
        .map_err(|_| "the command is not UTF-8 text".to_owned())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Three zones: one healthy, one unhealthy with a VIP still unknown,
    /// one removed by an operator.
    fn engine() -> Engine {
        let text = r#"
[dns]
server = "192.0.2.53"
zone = "lab.test"
name = "www.lab.test"
[dns.tsig]
name = "spillway-zones"
secret = "c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0ISE="
[probe]
port = 80
[[zones]]
name = "a"
vips = ["198.18.10.20", "2001:db8::20"]
[[zones]]
name = "b_2"
vips = ["198.18.10.21", "198.18.10.22"]
[[zones]]
name = "c"
vips = ["198.18.10.23"]
"#;
        let settings = Arc::new(Settings::parse(text, std::path::Path::new(".")).unwrap());
        let mut zones = Zones::new(&settings.zones, &settings.probe);
        for v in &mut zones.zones[0].vips {
            v.record(true, "ok".to_owned());
        }
        for _ in 0..settings.probe.unhealthy_threshold {
            zones.zones[1].vips[0].record(false, "timed out".to_owned());
        }
        let client = Client::new(settings.server, settings.key.clone(), settings.dns_timeout);
        let (removed, _) = watch::channel(BTreeSet::from(["c".to_owned()]));
        Engine {
            settings,
            client,
            zones,
            removed,
            published: Some(BTreeSet::from([
                "198.18.10.20".parse().unwrap(),
                "2001:db8::20".parse().unwrap(),
            ])),
            fail_open: false,
            updates: 3,
            errors: 1,
            last_update: None,
            last_error: None,
            last_sync_ok: true,
            started: Instant::now(),
        }
    }

    /// `metrics` and `GET /metrics` byte for byte, as the service wrote
    /// them before issue 40 (operators scrape them; external checks read
    /// them).
    #[test]
    fn metrics_text_is_unchanged() {
        assert_eq!(
            engine().metrics(),
            "\
# HELP spillway_zone_health_zone_state Each zone's state (1 for the state it is in).
# TYPE spillway_zone_health_zone_state gauge
spillway_zone_health_zone_state{zone=\"a\",state=\"healthy\"} 1
spillway_zone_health_zone_state{zone=\"a\",state=\"unhealthy\"} 0
spillway_zone_health_zone_state{zone=\"a\",state=\"unknown\"} 0
spillway_zone_health_zone_state{zone=\"a\",state=\"removed\"} 0
spillway_zone_health_zone_state{zone=\"b_2\",state=\"healthy\"} 0
spillway_zone_health_zone_state{zone=\"b_2\",state=\"unhealthy\"} 1
spillway_zone_health_zone_state{zone=\"b_2\",state=\"unknown\"} 0
spillway_zone_health_zone_state{zone=\"b_2\",state=\"removed\"} 0
spillway_zone_health_zone_state{zone=\"c\",state=\"healthy\"} 0
spillway_zone_health_zone_state{zone=\"c\",state=\"unhealthy\"} 0
spillway_zone_health_zone_state{zone=\"c\",state=\"unknown\"} 0
spillway_zone_health_zone_state{zone=\"c\",state=\"removed\"} 1
# HELP spillway_zone_health_published_records Records the name holds as last read or written.
# TYPE spillway_zone_health_published_records gauge
spillway_zone_health_published_records 2
# HELP spillway_zone_health_fail_open 1 while no zone is healthy and every zone's records are published.
# TYPE spillway_zone_health_fail_open gauge
spillway_zone_health_fail_open 0
# HELP spillway_zone_health_updates Updates the server accepted.
# TYPE spillway_zone_health_updates counter
spillway_zone_health_updates_total 3
# HELP spillway_zone_health_errors Failed reads and updates.
# TYPE spillway_zone_health_errors counter
spillway_zone_health_errors_total 1
# HELP spillway_zone_health_last_sync_ok 1 if the last exchange with the server succeeded.
# TYPE spillway_zone_health_last_sync_ok gauge
spillway_zone_health_last_sync_ok 1
# HELP spillway_zone_health_vip_healthy 1 while a VIP passes its probes.
# TYPE spillway_zone_health_vip_healthy gauge
spillway_zone_health_vip_healthy{zone=\"a\",vip=\"198.18.10.20\"} 1
spillway_zone_health_vip_healthy{zone=\"a\",vip=\"2001:db8::20\"} 1
spillway_zone_health_vip_healthy{zone=\"b_2\",vip=\"198.18.10.21\"} 0
spillway_zone_health_vip_healthy{zone=\"b_2\",vip=\"198.18.10.22\"} 0
spillway_zone_health_vip_healthy{zone=\"c\",vip=\"198.18.10.23\"} 0
# EOF
"
        );
    }
}
