//! `spillway nva` / `spillway-nva`: the reference appliance's sockets.
//!
//! One UDP socket per `--listen` address, one thread each, receives. By
//! default (`--answer kept-ports`) an answer is written whole — UDP header
//! from the balancer's source port (its flow hash) to the Geneve port,
//! checksum over the swapped addresses — and sent through a raw socket
//! bound to the listen address: the contract's answer (M32), outer
//! addresses swapped, ports kept. `--answer socket` sends it back through
//! the socket it came in on instead, as an appliance built on UDP sockets
//! does (ports swapped too). Either way a listen address should be the
//! appliance's own address, not a wildcard: it is the answer's source.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use socket2::{Domain, Protocol, Socket, Type};
use wire::geneve::OptionIds;

use crate::flowlog::{self, FlowLog};
use crate::{Config, DropReason, Flow, Prefix, Rule, Tamper, answer, kept_ports_datagram};

const AFTER_HELP: &str = "\
Only datagrams from --allow-source addresses (the balancers' tunnel source addresses: the \
first address of each family on their backend port) are answered; the others are counted \
(source_not_allowed) and never parsed, answered or logged. \
Each GENEVE packet received is sent back as it came (outer addresses swapped, ports kept \
unless --answer socket, every option unchanged), unless a --drop rule matches its inner packet. A rule is \
PROTO SRC -> DST (or <-> for either direction): PROTO tcp, udp, icmp, any or a number; \
SRC and DST ADDR[/LEN][:PORT], *[:PORT] or [IPV6[/LEN]][:PORT], a port a number or *. \
The flow log has one line per packet: what was done (returned, dropped:REASON), the \
balancer's address, the protocol, the connection's two sides in canonical order, the \
direction (a->b or b->a), the endpoint ID and the cookie (hex, - if absent); before a line \
would take the file past --flow-log-max-bytes it is rotated (FILE.1 ... FILE.N, N \
--flow-log-keep). Counters are \
printed on SIGUSR1 and at exit (SIGINT, SIGTERM). With --health, a TCP listener answers any \
HTTP request 200 OK (a plain connect succeeds too), for Spillway's health checks.

Example: spillway nva --listen 10.0.0.3 --listen 2001:db8::3 --allow-source 10.0.0.1 \
--allow-source 2001:db8::1 --flow-log /var/log/nva.log --drop \"tcp * -> *:23\" \
--health 10.0.0.3:8080";

/// Command-line arguments.
#[derive(clap::Args, Debug)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// Address to receive GENEVE on, ADDR or ADDR:PORT ([IPV6]:PORT), port
    /// 6081 if not given; repeat for each (one per family, typically). The
    /// appliance's own address: answers leave from it.
    #[arg(long = "listen", value_name = "ADDR[:PORT]", required = true, value_parser = parse_listen)]
    listen: Vec<SocketAddr>,
    /// Answer GENEVE from this source address or prefix (IPv4 or IPv6);
    /// repeat for each balancer. Required unless --allow-any.
    #[arg(long = "allow-source", value_name = "ADDR[/LEN]", value_parser = Prefix::parse_network)]
    allow_source: Vec<Prefix>,
    /// Answer GENEVE from any source: the appliance then reflects whatever
    /// anyone who can reach it sends, to the source the packet claims. Only
    /// where the network already keeps everyone but the balancers away.
    #[arg(long, conflicts_with = "allow_source")]
    allow_any: bool,
    /// Append one line per packet to this file.
    #[arg(long, value_name = "FILE")]
    flow_log: Option<PathBuf>,
    /// Rotate the flow log before it grows past this size (bytes, or with
    /// K, M or G).
    #[arg(long, value_name = "SIZE", default_value = "64M", value_parser = flowlog::parse_size, requires = "flow_log")]
    flow_log_max_bytes: u64,
    /// Rotated flow logs kept (FILE.1 is the newest); 0: the file is
    /// emptied instead.
    #[arg(long, value_name = "N", default_value_t = flowlog::DEFAULT_KEEP, requires = "flow_log")]
    flow_log_keep: u32,
    /// Drop inner packets matching this rule (see below); repeat for more.
    #[arg(long = "drop", value_name = "RULE")]
    drop: Vec<Rule>,
    /// Negative tests only: `cookie` inverts the flow cookie's value,
    /// `strip-options` removes every option, before the packet is returned.
    #[arg(long, default_value = "none", value_name = "MODE")]
    tamper: Tamper,
    /// Negative tests only: send answers from this address (same port)
    /// instead of the one the packet came to; repeat for the other family.
    #[arg(long = "reply-from", value_name = "ADDR")]
    reply_from: Vec<IpAddr>,
    /// How answers are sent: `kept-ports` (the contract: from the
    /// balancer's source port to the Geneve port, through a raw socket:
    /// needs CAP_NET_RAW) or `socket` (a UDP socket's reply: from the
    /// Geneve port to the balancer's source port, no privileges).
    #[arg(long, default_value = "kept-ports", value_name = "HOW")]
    answer: AnswerMode,
    /// Also accept TCP on ADDR:PORT and answer any HTTP request `200 OK`,
    /// for Spillway's TCP/HTTP health checks; repeat for more.
    #[arg(long = "health", value_name = "ADDR:PORT")]
    health: Vec<SocketAddr>,
    /// Option class of Spillway's GENEVE options (the balancer's `geneve.option_class`).
    #[arg(long, default_value = "0x0139", value_name = "CLASS", value_parser = parse_u16)]
    geneve_option_class: u16,
    /// Type of the GENEVE endpoint ID option.
    #[arg(long, default_value_t = OptionIds::DEFAULT.endpoint_type, value_name = "TYPE")]
    geneve_endpoint_id_type: u8,
    /// Type of the GENEVE flow cookie option.
    #[arg(long, default_value_t = OptionIds::DEFAULT.cookie_type, value_name = "TYPE")]
    geneve_flow_cookie_type: u8,
}

/// How answers leave.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AnswerMode {
    /// Outer addresses swapped, ports kept (M32), written by the appliance.
    KeptPorts,
    /// The UDP socket's reply: addresses and ports swapped.
    Socket,
}

fn parse_listen(s: &str) -> Result<SocketAddr, String> {
    s.parse::<SocketAddr>()
        .or_else(|_| {
            s.parse::<IpAddr>()
                .map(|a| SocketAddr::new(a, wire::geneve::PORT))
        })
        .map_err(|_| format!("{s:?} is not an address or ADDR:PORT (write [IPV6]:PORT)"))
}

fn parse_u16(s: &str) -> Result<u16, String> {
    let r = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u16::from_str_radix(hex, 16),
        None => s.parse(),
    };
    r.map_err(|_| format!("{s:?} is not a number from 0 to 65535 (decimal or 0x hex)"))
}

impl Args {
    /// The appliance's configuration; refuses to answer everyone unasked.
    pub fn config(&self) -> Result<Config> {
        if self.allow_source.is_empty() && !self.allow_any {
            bail!(
                "no --allow-source given: name the balancers' tunnel source addresses \
                 (e.g. --allow-source 10.0.0.1 --allow-source 2001:db8::1), or pass --allow-any \
                 to answer GENEVE from anywhere (the appliance would then send whatever anyone \
                 sends it back to the address the packet claims)"
            );
        }
        if self.geneve_endpoint_id_type == self.geneve_flow_cookie_type {
            bail!("--geneve-endpoint-id-type and --geneve-flow-cookie-type must differ");
        }
        Ok(Config {
            sources: (!self.allow_any).then(|| self.allow_source.clone()),
            ids: OptionIds {
                class: self.geneve_option_class,
                endpoint_type: self.geneve_endpoint_id_type,
                cookie_type: self.geneve_flow_cookie_type,
            },
            rules: self.drop.clone(),
            tamper: self.tamper,
        })
    }
}

/// What the appliance did.
#[derive(Default)]
pub struct Counters {
    received: AtomicU64,
    returned: AtomicU64,
    dropped: [AtomicU64; DropReason::ALL.len()],
    /// Whether a refused source was logged yet.
    refusal_logged: AtomicBool,
}

impl Counters {
    /// Count of drops for `reason`.
    pub fn dropped_for(&self, reason: DropReason) -> u64 {
        self.dropped
            .get(reason.index())
            .map_or(0, |c| c.load(Ordering::Relaxed))
    }

    fn count_drop(&self, reason: DropReason) {
        if let Some(c) = self.dropped.get(reason.index()) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts a datagram from a source not allowed; the first is logged as
    /// a warning, the rest only at debug level (no flooding the log).
    fn refused(&self, from: IpAddr) {
        self.count_drop(DropReason::SourceNotAllowed);
        if self.refusal_logged.swap(true, Ordering::Relaxed) {
            log::debug!("spillway-nva: refused a datagram from {from}");
        } else {
            log::warn!(
                "spillway-nva: refused a datagram from {from}: not an --allow-source address \
                 (counted as source_not_allowed; further ones are only counted)"
            );
        }
    }

    /// One line: `received N, returned N, malformed N, dropped M (reason n, …)`.
    pub fn summary(&self) -> String {
        let reasons = DropReason::ALL
            .iter()
            .filter(|r| **r != DropReason::Malformed);
        let per: Vec<String> = reasons
            .clone()
            .map(|r| format!("{} {}", r.name(), self.dropped_for(*r)))
            .collect();
        let total: u64 = reasons.map(|r| self.dropped_for(*r)).sum();
        format!(
            "received {}, returned {}, malformed {}, dropped {total} ({})",
            self.received.load(Ordering::Relaxed),
            self.returned.load(Ordering::Relaxed),
            self.dropped_for(DropReason::Malformed),
            per.join(", ")
        )
    }
}

const READ_TIMEOUT: Duration = Duration::from_millis(200);

fn bind(addr: SocketAddr, reuse: bool) -> Result<UdpSocket> {
    let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))
        .context("creating a UDP socket")?;
    if addr.is_ipv6() {
        // `--listen 0.0.0.0 --listen ::` must both bind.
        s.set_only_v6(true)?;
    }
    // A --reply-from socket shares the port with a listener (a wildcard one
    // included).
    s.set_reuse_address(reuse)?;
    s.bind(&addr.into())
        .with_context(|| format!("binding UDP {addr}"))?;
    let s: UdpSocket = s.into();
    s.set_read_timeout(Some(READ_TIMEOUT))?;
    Ok(s)
}

/// A raw UDP socket sending from `from` (kernel-written IP header, our UDP
/// header), for answers with the ports kept.
fn raw_sender(from: IpAddr) -> Result<Socket> {
    let s = Socket::new(
        Domain::for_address(SocketAddr::new(from, 0)),
        Type::RAW,
        Some(Protocol::UDP),
    )
    .context("creating a raw UDP socket to answer with the ports kept (needs CAP_NET_RAW; or --answer socket)")?;
    s.bind(&SocketAddr::new(from, 0).into())
        .with_context(|| format!("binding a raw UDP socket to {from}"))?;
    // It also receives a copy of every UDP datagram, which nothing reads:
    // the smallest buffer the kernel allows.
    let _ = s.set_recv_buffer_size(0);
    Ok(s)
}

/// Where one listener's answers go out.
enum Sender {
    /// Through the UDP socket (the listener's, or a --reply-from one).
    Udp(Option<UdpSocket>),
    /// Written whole, ports kept, from this address.
    Raw(Socket, IpAddr),
}

type Log = Option<Arc<Mutex<FlowLog>>>;

/// Runs until SIGINT or SIGTERM.
pub fn run(args: &Args) -> Result<()> {
    // Before anything is bound: an appliance without an allow-list is a
    // reflector, so it does not start at all.
    let cfg = Arc::new(args.config()?);
    match &cfg.sources {
        Some(list) => {
            let s: Vec<String> = list.iter().map(ToString::to_string).collect();
            log::info!("spillway-nva: answering GENEVE from {}", s.join(", "));
        }
        None => log::warn!(
            "spillway-nva: --allow-any: answering GENEVE from ANY source; anyone who can reach \
             this appliance can have it send packets to the address they claim"
        ),
    }
    let log: Log = match &args.flow_log {
        Some(path) => {
            let l = FlowLog::open(path, args.flow_log_max_bytes, args.flow_log_keep)
                .with_context(|| format!("opening flow log {}", path.display()))?;
            Some(Arc::new(Mutex::new(l)))
        }
        None => None,
    };
    let reuse = !args.reply_from.is_empty();
    let mut pairs = Vec::new();
    for &addr in &args.listen {
        let rx = bind(addr, reuse)?;
        let reply_from = args
            .reply_from
            .iter()
            .find(|a| a.is_ipv6() == addr.is_ipv6())
            .copied();
        let tx = match (args.answer, reply_from) {
            (AnswerMode::Socket, Some(from)) => {
                Sender::Udp(Some(bind(SocketAddr::new(from, addr.port()), true)?))
            }
            (AnswerMode::Socket, None) => Sender::Udp(None),
            (AnswerMode::KeptPorts, from) => {
                let from = from.unwrap_or(addr.ip());
                if from.is_unspecified() {
                    bail!(
                        "--listen {addr}: answering with the ports kept needs the appliance's own address (the answer's source), not a wildcard; or --answer socket"
                    );
                }
                Sender::Raw(raw_sender(from)?, from)
            }
        };
        pairs.push((addr, rx, tx));
    }
    let mut health = Vec::new();
    for &addr in &args.health {
        health.push((addr, crate::health::bind(addr)?));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let show = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGTERM, stop.clone())?;
    signal_hook::flag::register(signal_hook::consts::SIGINT, stop.clone())?;
    signal_hook::flag::register(signal_hook::consts::SIGUSR1, show.clone())?;
    let counters = Arc::new(Counters::default());
    if cfg.tamper != Tamper::None || reuse {
        log::warn!(
            "spillway-nva: tampering ({:?}, reply from {:?}): for negative tests only",
            cfg.tamper,
            args.reply_from
        );
    }
    let mut threads = Vec::new();
    for (addr, listener) in health {
        log::info!("spillway-nva: health listener on TCP {addr}");
        threads.push(crate::health::spawn(listener, stop.clone()));
    }
    for (addr, rx, tx) in pairs {
        let (cfg, log, stop, counters) = (cfg.clone(), log.clone(), stop.clone(), counters.clone());
        log::info!("spillway-nva: listening on {addr}");
        threads.push(std::thread::spawn(move || {
            let mut buf = vec![0u8; 65536];
            while !stop.load(Ordering::Relaxed) {
                let Ok((n, from)) = rx.recv_from(&mut buf) else {
                    continue;
                };
                counters.received.fetch_add(1, Ordering::Relaxed);
                // Not even parsed, answered or logged: a stranger must
                // neither be reflected nor fill the flow log.
                if !cfg.source_allowed(from.ip()) {
                    counters.refused(from.ip());
                    continue;
                }
                let Some(bytes) = buf.get(..n) else { continue };
                let (verdict, flow) = match answer(&cfg, bytes) {
                    Ok(a) => {
                        let sent = match &tx {
                            Sender::Udp(s) => s.as_ref().unwrap_or(&rx).send_to(&a.payload, from),
                            Sender::Raw(s, src) => {
                                match kept_ports_datagram(
                                    SocketAddr::new(*src, addr.port()),
                                    from,
                                    &a.payload,
                                ) {
                                    Some(d) => s.send_to(&d, &SocketAddr::new(from.ip(), 0).into()),
                                    None => Err(std::io::ErrorKind::InvalidInput.into()),
                                }
                            }
                        };
                        if sent.is_ok() {
                            counters.returned.fetch_add(1, Ordering::Relaxed);
                            ("returned".to_owned(), Some(a.flow))
                        } else {
                            counters.count_drop(DropReason::SendFailed);
                            ("dropped:send_failed".to_owned(), Some(a.flow))
                        }
                    }
                    Err((reason, flow)) => {
                        counters.count_drop(reason);
                        log::debug!("spillway-nva: from {from}: {reason}");
                        (format!("dropped:{}", reason.name()), flow)
                    }
                };
                write_log(&log, &verdict, from, flow);
            }
        }));
    }
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(100));
        if show.swap(false, Ordering::Relaxed) {
            log::info!("spillway-nva: {}", counters.summary());
        }
    }
    for t in threads {
        let _ = t.join();
    }
    log::info!("spillway-nva: exiting: {}", counters.summary());
    if let Some(lost) = log
        .as_ref()
        .and_then(|l| l.lock().ok().map(|l| l.lost()))
        .filter(|&n| n > 0)
    {
        log::warn!(
            "spillway-nva: {lost} flow-log lines were dropped (the log could not be rotated)"
        );
    }
    Ok(())
}

/// Flow-log line; a malformed packet has no flow and is only counted.
fn write_log(log: &Log, verdict: &str, from: SocketAddr, flow: Option<Flow>) {
    let (Some(log), Some(flow)) = (log, flow) else {
        return;
    };
    if let Ok(mut w) = log.lock() {
        // A full disk must not stop the appliance; the counters still count.
        let line = format!("{verdict} from={} {flow}", from.ip().to_canonical());
        if let Some(e) = w.line(&line) {
            log::warn!("spillway-nva: {e}: lines are dropped until it succeeds");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    fn args(a: &[&str]) -> Result<Args, clap::Error> {
        Cli::try_parse_from(std::iter::once("nva").chain(a.iter().copied())).map(|c| c.args)
    }

    #[test]
    fn listen_is_required_and_defaults_the_port() {
        assert!(args(&[]).is_err());
        let a = args(&["--listen", "10.0.0.3", "--listen", "[2001:db8::3]:7000"]).expect("parses");
        assert_eq!(
            a.listen,
            vec![
                "10.0.0.3:6081".parse::<SocketAddr>().expect("addr"),
                "[2001:db8::3]:7000".parse().expect("addr")
            ]
        );
        let a = args(&["--listen", "2001:db8::3"]).expect("bare v6");
        assert_eq!(a.listen[0].port(), 6081);
    }

    /// Issue 38 item 10: an appliance answers only the balancers it is
    /// told of, or says it answers anyone; it never starts as an open
    /// reflector by default.
    #[test]
    fn refuses_to_answer_everyone_unasked() {
        let e = args(&["--listen", "10.0.0.3"])
            .expect("parses")
            .config()
            .expect_err("no allow-list");
        let msg = format!("{e:#}");
        assert!(
            msg.contains("--allow-source") && msg.contains("--allow-any"),
            "{msg}"
        );
        let c = args(&[
            "--listen",
            "10.0.0.3",
            "--allow-source",
            "10.0.0.1",
            "--allow-source",
            "2001:db8:1::/48",
        ])
        .expect("parses")
        .config()
        .expect("config");
        let ip = |s: &str| s.parse::<IpAddr>().expect("ip");
        assert!(c.source_allowed(ip("10.0.0.1")));
        assert!(!c.source_allowed(ip("10.0.0.2")));
        assert!(!c.source_allowed(ip("::ffff:10.0.0.1")));
        assert!(c.source_allowed(ip("2001:db8:1::9")));
        assert!(!c.source_allowed(ip("2001:db8:2::9")));
        let any = args(&["--listen", "10.0.0.3", "--allow-any"])
            .expect("parses")
            .config()
            .expect("config");
        assert!(any.source_allowed(ip("203.0.113.9")));
        assert!(
            args(&[
                "--listen",
                "10.0.0.3",
                "--allow-any",
                "--allow-source",
                "10.0.0.1"
            ])
            .is_err()
        );
        assert!(args(&["--listen", "10.0.0.3", "--allow-source", "10.0.0.1/24"]).is_err());
    }

    #[test]
    fn flow_log_limits_parse_and_need_a_log() {
        let a = args(&[
            "--listen",
            "10.0.0.3",
            "--allow-any",
            "--flow-log",
            "/tmp/x",
        ])
        .expect("parses");
        assert_eq!((a.flow_log_max_bytes, a.flow_log_keep), (64 << 20, 4));
        let a = args(&[
            "--listen",
            "10.0.0.3",
            "--allow-any",
            "--flow-log",
            "/tmp/x",
            "--flow-log-max-bytes",
            "1M",
            "--flow-log-keep",
            "0",
        ])
        .expect("parses");
        assert_eq!((a.flow_log_max_bytes, a.flow_log_keep), (1 << 20, 0));
        assert!(args(&["--listen", "10.0.0.3", "--flow-log-max-bytes", "1M"]).is_err());
        assert!(
            args(&[
                "--listen",
                "10.0.0.3",
                "--flow-log",
                "/tmp/x",
                "--flow-log-max-bytes",
                "0"
            ])
            .is_err()
        );
    }

    #[test]
    fn rules_tamper_and_ids_parse() {
        let c = args(&[
            "--listen",
            "10.0.0.3",
            "--allow-any",
            "--drop",
            "tcp 10.0.0.1:* -> *:22",
            "--tamper",
            "strip-options",
            "--geneve-option-class",
            "0xffff",
        ])
        .expect("parses")
        .config()
        .expect("config");
        assert_eq!(c.rules.len(), 1);
        assert_eq!(c.tamper, Tamper::StripOptions);
        assert_eq!(c.ids.class, 0xffff);
        assert!(args(&["--listen", "10.0.0.3", "--drop", "tcp 10.0.0.1 to *:22"]).is_err());
        assert!(args(&["--listen", "10.0.0.3", "--tamper", "cookies"]).is_err());
        let e = args(&[
            "--listen",
            "10.0.0.3",
            "--allow-any",
            "--geneve-endpoint-id-type",
            "3",
        ])
        .expect("parses")
        .config()
        .expect_err("same types");
        assert!(format!("{e:#}").contains("must differ"));
    }

    #[test]
    fn health_listeners_parse() {
        let a = args(&[
            "--listen",
            "10.0.0.3",
            "--health",
            "10.0.0.3:8080",
            "--health",
            "[2001:db8::3]:8080",
        ])
        .expect("parses");
        assert_eq!(a.health.len(), 2);
        assert!(args(&["--listen", "10.0.0.3", "--health", "10.0.0.3"]).is_err());
    }

    #[test]
    fn summary_lists_every_counter() {
        let c = Counters::default();
        c.received.fetch_add(3, Ordering::Relaxed);
        c.returned.fetch_add(1, Ordering::Relaxed);
        c.count_drop(DropReason::Malformed);
        c.count_drop(DropReason::Rule);
        c.refused("203.0.113.9".parse().expect("ip"));
        assert_eq!(
            c.summary(),
            "received 3, returned 1, malformed 1, dropped 2 (source_not_allowed 1, not_ip 0, oam 0, rule 1, send_failed 0)"
        );
    }
}
