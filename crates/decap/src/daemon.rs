//! `spillway decap` / `spillway-decap`: receives Spillway's tunnels on a backend host and
//! delivers the inner packets through a TUN device, so that servers listening
//! on the VIP (configured on `lo`) get the client's packets unchanged and
//! reply to the client directly (DSR).
//!
//! GUE and GENEVE arrive on UDP sockets (dual-stack: IPv4 and IPv6 outer
//! headers); IPIP (4-in-4, 6-in-4, 4-in-6, 6-in-6) and GRE on raw IPv4 and
//! IPv6 sockets (which also keep the kernel from answering them with ICMP
//! "protocol unreachable"). One thread per socket; the TUN device is shared.
//! Every packet goes through [`crate::decide`]; what it refuses is counted by
//! reason and never reaches the kernel.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use socket2::{Domain, Protocol, Socket, Type};
use wire::geneve::OptionIds;

use std::str::FromStr;

use crate::{Carrier, DropReason, Policy, Prefix, Vip};

const AFTER_HELP: &str = "\
Every tunnel packet is checked before its inner packet reaches the kernel: the outer \
source must be in --allow-source (the balancers' tunnel source addresses: the first \
address of each family on their backend port), the inner destination one of the --vip \
addresses and, where the --vip lists ports, TCP or UDP to one of them, the inner source \
an address a client can have (not loopback, multicast, link-local, unspecified or a VIP), \
and GENEVE packets neither OAM nor carrying a critical option other than Spillway's own. \
With a port list, a later fragment (which carries no port) is taken when its protocol \
is listed (the kernel reassembles it only with its first fragment, which is checked), \
an ICMP error when the server's packet it quotes left from a listed port, and nothing \
else. Drops are counted by reason and logged every --stats-interval seconds when they \
change, and at exit.

Example: spillway decap --allow-source 10.0.0.1 --allow-source 2001:db8::1 \
--vip 192.0.2.10:tcp/80,443 --vip [2001:db8:10::10]:tcp/80,443,udp/443 --ipip";

/// Command-line arguments.
#[derive(clap::Args, Debug)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// Name of the TUN device to create.
    #[arg(long, default_value = "spwdecap0")]
    tun: String,
    /// Accept tunnels from this outer source address or prefix (IPv4 or IPv6);
    /// repeat for each balancer. Required unless --allow-any.
    #[arg(long = "allow-source", value_name = "ADDR[/LEN]", value_parser = Prefix::parse_network)]
    allow_source: Vec<Prefix>,
    /// Accept tunnels from any source. Anyone who can reach this host's tunnel
    /// ports can then inject packets to the VIPs: only where the network
    /// already keeps everyone but the balancers away from them.
    #[arg(long, conflicts_with = "allow_source")]
    allow_any: bool,
    /// A VIP this backend serves (address or prefix, IPv4 or IPv6), and the
    /// ports its servers listen on: `192.0.2.10:tcp/80,443,udp/53`,
    /// `[2001:db8::10]:tcp/80`, a port `N` or `N-M` (without a list: every
    /// protocol and port); repeat for each. Required: inner packets to any
    /// other destination, or another port, are dropped.
    #[arg(long = "vip", value_name = "ADDR[/LEN][:PROTO/PORTS]", value_parser = Vip::from_str)]
    vips: Vec<Vip>,
    /// GUE UDP port (0: off).
    #[arg(long, default_value_t = wire::gue::PORT)]
    gue_port: u16,
    /// GENEVE UDP port (0: off).
    #[arg(long, default_value_t = wire::geneve::PORT)]
    geneve_port: u16,
    /// Accept IP-in-IP (IP protocols 4 and 41, over IPv4 and IPv6).
    #[arg(long)]
    ipip: bool,
    /// Accept GRE (over IPv4 and IPv6).
    #[arg(long)]
    gre: bool,
    /// Option class of Spillway's GENEVE options (the balancer's
    /// `geneve.option_class`); the only options understood, so the only
    /// critical ones accepted.
    #[arg(long, default_value = "0x0139", value_name = "CLASS", value_parser = parse_u16)]
    geneve_option_class: u16,
    /// Type of the GENEVE endpoint ID option (the balancer's `geneve.endpoint_id_type`).
    #[arg(long, default_value_t = OptionIds::DEFAULT.endpoint_type, value_name = "TYPE")]
    geneve_endpoint_id_type: u8,
    /// Type of the GENEVE flow cookie option (the balancer's `geneve.flow_cookie_type`).
    #[arg(long, default_value_t = OptionIds::DEFAULT.cookie_type, value_name = "TYPE")]
    geneve_flow_cookie_type: u8,
    /// Seconds between counter lines in the log, written only when a counter
    /// changed (0: only at exit).
    #[arg(long, default_value_t = 60, value_name = "SECONDS")]
    stats_interval: u64,
}

fn parse_u16(s: &str) -> Result<u16, String> {
    let r = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u16::from_str_radix(hex, 16),
        None => s.parse(),
    };
    r.map_err(|_| format!("{s:?} is not a number from 0 to 65535 (decimal or 0x hex)"))
}

impl Args {
    /// The policy these arguments ask for; refuses to run open.
    pub fn policy(&self) -> Result<Policy> {
        if self.allow_source.is_empty() && !self.allow_any {
            bail!(
                "no --allow-source given: name the balancers' tunnel source addresses \
                 (e.g. --allow-source 10.0.0.1 --allow-source 10.0.1.0/24), or pass --allow-any \
                 to accept tunnels from anywhere (anyone reaching this host could then inject \
                 packets to its VIPs)"
            );
        }
        if self.vips.is_empty() {
            bail!(
                "no --vip given: name the VIPs this backend serves (e.g. --vip 192.0.2.10); \
                 inner packets to any other destination are dropped"
            );
        }
        if self.geneve_endpoint_id_type == self.geneve_flow_cookie_type {
            bail!("--geneve-endpoint-id-type and --geneve-flow-cookie-type must differ");
        }
        Ok(Policy {
            sources: (!self.allow_any).then(|| self.allow_source.clone()),
            vips: self.vips.clone(),
            geneve_ids: OptionIds {
                class: self.geneve_option_class,
                endpoint_type: self.geneve_endpoint_id_type,
                cookie_type: self.geneve_flow_cookie_type,
            },
            tunnel_ports: vec![self.gue_port, self.geneve_port],
        })
    }
}

/// What the decapsulator did, by outcome.
#[derive(Default)]
pub struct Counters {
    delivered: AtomicU64,
    dropped: [AtomicU64; DropReason::ALL.len()],
    /// Whether the first drop of each reason was logged.
    warned: [AtomicBool; DropReason::ALL.len()],
}

impl Counters {
    /// Counts a delivered packet.
    pub fn delivered(&self) {
        self.delivered.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a drop; the first of each reason is logged as a warning, the
    /// rest only at debug level (an attacker must not be able to flood the log).
    pub fn dropped(&self, reason: DropReason, src: IpAddr) {
        let i = reason.index();
        if let Some(c) = self.dropped.get(i) {
            c.fetch_add(1, Ordering::Relaxed);
        }
        let first = self
            .warned
            .get(i)
            .is_some_and(|w| !w.swap(true, Ordering::Relaxed));
        if first {
            log::warn!(
                "spillway-decap: dropped a packet from {src}: {reason} (counted as {}; \
                 further drops of this kind are only counted)",
                reason.name()
            );
        } else {
            log::debug!("spillway-decap: dropped a packet from {src}: {reason}");
        }
    }

    /// Count of drops for `reason`.
    pub fn dropped_for(&self, reason: DropReason) -> u64 {
        self.dropped
            .get(reason.index())
            .map_or(0, |c| c.load(Ordering::Relaxed))
    }

    /// One line: `delivered N, dropped M (reason n, …)`, every reason listed.
    pub fn summary(&self) -> String {
        let per: Vec<String> = DropReason::ALL
            .iter()
            .map(|r| format!("{} {}", r.name(), self.dropped_for(*r)))
            .collect();
        let total: u64 = DropReason::ALL.iter().map(|r| self.dropped_for(*r)).sum();
        format!(
            "delivered {}, dropped {total} ({})",
            self.delivered.load(Ordering::Relaxed),
            per.join(", ")
        )
    }
}

type Tun = Arc<Mutex<tun::Device>>;

/// A socket and how to read what it receives.
enum Listener {
    /// GUE or GENEVE: the UDP payload.
    Udp(UdpSocket, Carrier),
    /// IPIP or GRE over IPv4: the outer IPv4 header comes with the packet.
    RawV4(Socket),
    /// IPIP or GRE over IPv6: a raw IPv6 socket delivers only what follows the
    /// IPv6 header (and its extension headers); the source comes with
    /// `recvfrom`. (std's `UdpSocket` serves as a safe `recvfrom` on it.)
    RawV6(UdpSocket, Carrier),
}

/// Runs the decapsulator until SIGINT or SIGTERM.
pub fn run(args: &Args) -> Result<()> {
    // Before anything is created: a decapsulator without a policy is an open
    // injector, so it does not start at all.
    let policy = Arc::new(args.policy()?);
    match &policy.sources {
        Some(list) => log::info!(
            "spillway-decap: accepting tunnels from {} for VIPs {}",
            join(list),
            join(&policy.vips)
        ),
        None => log::warn!(
            "spillway-decap: --allow-any: accepting tunnels from ANY source for VIPs {}; \
             anyone who can reach this host's tunnel ports can inject packets to them",
            join(&policy.vips)
        ),
    }
    if policy.vips.iter().any(|v| v.ports.is_none()) {
        log::warn!(
            "spillway-decap: a --vip without a port list takes every protocol and port: \
             packets to services the balancer does not forward reach them too; list the \
             forwarding rules' ports (--vip ADDR:tcp/80,443)"
        );
    }
    let listeners = listeners(args)?;
    let mut cfg = tun::Configuration::default();
    cfg.tun_name(&args.tun).mtu(9000).up();
    let dev = tun::create(&cfg).with_context(|| format!("creating TUN device {}", args.tun))?;
    let tun: Tun = Arc::new(Mutex::new(dev));
    let stop = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGTERM, stop.clone())?;
    signal_hook::flag::register(signal_hook::consts::SIGINT, stop.clone())?;
    let counters = Arc::new(Counters::default());

    let mut threads = Vec::new();
    for l in listeners {
        let (tun, stop, counters, policy) =
            (tun.clone(), stop.clone(), counters.clone(), policy.clone());
        threads.push(std::thread::spawn(move || {
            let mut buf = vec![0u8; 65536];
            while !stop.load(Ordering::Relaxed) {
                let (n, src, carrier) = match &l {
                    // The dual-stack UDP sockets see IPv4 peers as ::ffff:a.b.c.d.
                    Listener::Udp(s, c) => match s.recv_from(&mut buf) {
                        Ok((n, from)) => (n, from.ip().to_canonical(), Some(*c)),
                        Err(_) => continue,
                    },
                    // On an IPv6 raw socket an IPv4-mapped source is an IPv6
                    // packet that claims one (older kernels pass them): kept
                    // as it is, it matches no IPv4 allowed source.
                    Listener::RawV6(s, c) => match s.recv_from(&mut buf) {
                        Ok((n, from)) => (n, from.ip(), Some(*c)),
                        Err(_) => continue,
                    },
                    // socket2's `Read` impl receives into initialised memory.
                    Listener::RawV4(s) => match (&*s).read(&mut buf) {
                        Ok(n) => (n, ipv4_source(&buf[..n]), None),
                        Err(_) => continue,
                    },
                };
                let Some(bytes) = buf.get(..n) else { continue };
                let verdict = match carrier {
                    Some(c) => crate::decide(&policy, src, c, bytes),
                    None => crate::decide_ipv4(&policy, bytes),
                };
                deliver(&tun, &counters, src, verdict);
            }
        }));
    }
    log::info!(
        "spillway-decap: TUN {}; GUE port {}, GENEVE port {}, IPIP {}, GRE {}",
        args.tun,
        args.gue_port,
        args.geneve_port,
        args.ipip,
        args.gre
    );
    let interval = Duration::from_secs(args.stats_interval);
    let (mut last, mut shown) = (Instant::now(), counters.summary());
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(200));
        if !interval.is_zero() && last.elapsed() >= interval {
            last = Instant::now();
            let now = counters.summary();
            if now != shown {
                log::info!("spillway-decap: {now}");
                shown = now;
            }
        }
    }
    for t in threads {
        let _ = t.join();
    }
    log::info!("spillway-decap: exiting: {}", counters.summary());
    Ok(())
}

fn join<T: std::fmt::Display>(list: &[T]) -> String {
    let s: Vec<String> = list.iter().map(ToString::to_string).collect();
    s.join(", ")
}

/// The source of an IPv4 packet as a raw socket delivers it, for the log
/// (0.0.0.0 if too short to have one; `decide_ipv4` then refuses it).
fn ipv4_source(b: &[u8]) -> IpAddr {
    match b.get(12..16) {
        Some(&[a, b, c, d]) => IpAddr::V4(Ipv4Addr::new(a, b, c, d)),
        _ => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
    }
}

/// The sockets `args` ask for. IPv6 ones are skipped, with a warning, on a
/// host without IPv6.
fn listeners(args: &Args) -> Result<Vec<Listener>> {
    let mut out = Vec::new();
    for (port, carrier) in [
        (args.gue_port, Carrier::Gue),
        (args.geneve_port, Carrier::Geneve),
    ] {
        if port != 0 {
            out.push(Listener::Udp(udp_socket(port)?, carrier));
        }
    }
    let mut raw = Vec::new();
    if args.ipip {
        raw.extend([
            (4, Carrier::IpInIp { inner_v6: false }),
            (41, Carrier::IpInIp { inner_v6: true }),
        ]);
    }
    if args.gre {
        raw.push((47, Carrier::Gre));
    }
    for (proto, carrier) in raw {
        let s = Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::from(proto)))
            .with_context(|| format!("raw IPv4 socket for IP protocol {proto} (needs root)"))?;
        s.set_read_timeout(Some(READ_TIMEOUT))?;
        out.push(Listener::RawV4(s));
        match Socket::new(Domain::IPV6, Type::RAW, Some(Protocol::from(proto))) {
            Ok(s) => {
                s.set_read_timeout(Some(READ_TIMEOUT))?;
                out.push(Listener::RawV6(s.into(), carrier));
            }
            Err(e) if no_ipv6(&e) => {
                log::warn!(
                    "spillway-decap: no IPv6 on this host: IP protocol {proto} over IPv4 only"
                );
            }
            Err(e) => {
                return Err(e).with_context(|| {
                    format!("raw IPv6 socket for IP protocol {proto} (needs root)")
                });
            }
        }
    }
    Ok(out)
}

/// How often the receiving threads look at the stop flag.
const READ_TIMEOUT: Duration = Duration::from_millis(200);

/// A UDP socket on `port` for both IPv4 and IPv6 outer headers (IPv4 sources
/// arrive as IPv4-mapped addresses; the policy compares canonical ones), or
/// IPv4 only on a host without IPv6.
fn udp_socket(port: u16) -> Result<UdpSocket> {
    let dual = || -> std::io::Result<UdpSocket> {
        let s = Socket::new(Domain::IPV6, Type::DGRAM, Some(Protocol::UDP))?;
        s.set_only_v6(false)?;
        s.bind(&SocketAddr::from((Ipv6Addr::UNSPECIFIED, port)).into())?;
        Ok(s.into())
    };
    let sock = match dual() {
        Ok(s) => s,
        Err(e) if no_ipv6(&e) => {
            log::warn!("spillway-decap: no IPv6 on this host: UDP port {port} over IPv4 only");
            UdpSocket::bind((Ipv4Addr::UNSPECIFIED, port))
                .with_context(|| format!("binding UDP port {port}"))?
        }
        Err(e) => return Err(e).with_context(|| format!("binding UDP port {port}")),
    };
    sock.set_read_timeout(Some(READ_TIMEOUT))?;
    Ok(sock)
}

fn no_ipv6(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EAFNOSUPPORT | libc::EADDRNOTAVAIL | libc::EPROTONOSUPPORT)
    )
}

fn deliver(tun: &Tun, counters: &Counters, src: IpAddr, verdict: Result<&[u8], DropReason>) {
    match verdict {
        Ok(pkt) => {
            let ok = match tun.lock() {
                Ok(mut t) => t.write_all(pkt).is_ok(),
                Err(_) => false,
            };
            if ok {
                counters.delivered();
            } else {
                counters.dropped(DropReason::TunWriteFailed, src);
            }
        }
        Err(reason) => counters.dropped(reason, src),
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
        Cli::try_parse_from(std::iter::once("decap").chain(a.iter().copied())).map(|c| c.args)
    }

    #[test]
    fn refuses_to_run_open() {
        let e = args(&["--vip", "192.0.2.10"])
            .expect("parses")
            .policy()
            .expect_err("no allow-list");
        let msg = format!("{e:#}");
        assert!(
            msg.contains("--allow-source") && msg.contains("--allow-any"),
            "{msg}"
        );
        let e = args(&["--allow-source", "10.0.0.1"])
            .expect("parses")
            .policy()
            .expect_err("no VIP");
        assert!(format!("{e:#}").contains("--vip"), "{e:#}");
    }

    #[test]
    fn allow_any_is_explicit_and_exclusive() {
        let p = args(&["--allow-any", "--vip", "192.0.2.10"])
            .expect("parses")
            .policy()
            .expect("policy");
        assert_eq!(p.sources, None);
        assert!(p.source_allowed("203.0.113.9".parse().expect("ip")));
        assert!(
            args(&[
                "--allow-any",
                "--allow-source",
                "10.0.0.1",
                "--vip",
                "192.0.2.10"
            ])
            .is_err()
        );
    }

    #[test]
    fn lists_repeat_and_mix_families() {
        let p = args(&[
            "--allow-source",
            "10.0.0.1",
            "--allow-source",
            "2001:db8:1::/48",
            "--vip",
            "192.0.2.10",
            "--vip",
            "2001:db8:10::/64",
            "--geneve-option-class",
            "0x0ABC",
        ])
        .expect("parses")
        .policy()
        .expect("policy");
        let ip = |s: &str| s.parse::<IpAddr>().expect("ip");
        assert!(p.source_allowed(ip("10.0.0.1")));
        // An IPv6 packet claiming an IPv4-mapped source is not from 10.0.0.1
        // (the daemon canonicalises only what its dual-stack UDP sockets say).
        assert!(!p.source_allowed(ip("::ffff:10.0.0.1")));
        assert!(!p.source_allowed(ip("10.0.0.2")));
        assert!(p.source_allowed(ip("2001:db8:1:ffff::7")));
        assert!(!p.source_allowed(ip("2001:db8:2::1")));
        assert!(p.owns(ip("2001:db8:10::99")));
        assert!(!p.owns(ip("192.0.2.11")));
        assert_eq!(p.geneve_ids.class, 0x0abc);
    }

    #[test]
    fn bad_lists_are_refused_by_the_parser() {
        assert!(
            args(&["--allow-source", "10.0.0.1/24"]).is_err(),
            "host bits"
        );
        assert!(args(&["--allow-source", "10.0.0.0/33"]).is_err());
        assert!(args(&["--vip", "vip"]).is_err());
        assert!(args(&["--geneve-option-class", "0x10000"]).is_err());
        let same = args(&[
            "--allow-any",
            "--vip",
            "192.0.2.10",
            "--geneve-flow-cookie-type",
            "1",
        ])
        .expect("parses");
        assert!(same.policy().is_err());
    }

    #[test]
    fn counters_name_every_reason() {
        let c = Counters::default();
        c.delivered();
        c.dropped(
            DropReason::SourceNotAllowed,
            "10.9.9.9".parse().expect("ip"),
        );
        c.dropped(
            DropReason::SourceNotAllowed,
            "10.9.9.9".parse().expect("ip"),
        );
        c.dropped(DropReason::GeneveOam, "10.0.0.1".parse().expect("ip"));
        let s = c.summary();
        assert!(s.starts_with("delivered 1, dropped 3 ("), "{s}");
        for r in DropReason::ALL {
            assert!(s.contains(r.name()), "{s} names {}", r.name());
        }
        assert!(s.contains("source_not_allowed 2,"), "{s}");
        assert!(s.contains("geneve_oam 1,"), "{s}");
        assert_eq!(c.dropped_for(DropReason::Malformed), 0);
    }
}
