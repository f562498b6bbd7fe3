//! The zone health service's configuration file: the DNS server and key,
//! the name it publishes, the probes, and the zones with their VIPs. Read
//! and checked whole at start; every mistake is reported, with its field.

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use dnsupdate::{Key, Name};
use serde::Deserialize;
use values::{Duration as Span, Prefix};

/// The file, as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    dns: Dns,
    #[serde(default)]
    probe: Probe,
    #[serde(default)]
    control: Control,
    #[serde(default)]
    metrics: Metrics,
    zones: Vec<Zone>,
}

/// `[metrics]`: the HTTP endpoint, with the daemon's `[metrics]` limits
/// and the same admission rules ([`admin::admission`]).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Metrics {
    #[serde(default)]
    listen: Option<SocketAddr>,
    #[serde(default)]
    allow: Option<Vec<Prefix>>,
    #[serde(default = "d_max_connections")]
    max_connections: u32,
    #[serde(default)]
    max_connections_per_client: Option<u32>,
    #[serde(default = "d_http_timeout")]
    timeout: Span,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            listen: None,
            allow: None,
            max_connections: d_max_connections(),
            max_connections_per_client: None,
            timeout: d_http_timeout(),
        }
    }
}

fn d_max_connections() -> u32 {
    64
}
fn d_http_timeout() -> Span {
    Span::secs(5)
}

/// The HTTP endpoint's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Http {
    /// Where it listens.
    pub listen: SocketAddr,
    /// Client addresses admitted (absent: every address).
    pub allow: Option<Vec<Prefix>>,
    /// Connections served at once.
    pub max_connections: usize,
    /// Connections served at once from one client.
    pub per_client: usize,
    /// Time a client has to send its request, and again to read the answer.
    pub timeout: Duration,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Dns {
    server: String,
    zone: String,
    name: String,
    #[serde(default = "d_ttl")]
    ttl: u32,
    #[serde(default = "d_dns_timeout")]
    timeout: Span,
    tsig: Tsig,
}

fn d_ttl() -> u32 {
    60
}
fn d_dns_timeout() -> Span {
    Span::secs(2)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Tsig {
    name: String,
    #[serde(default = "d_algorithm")]
    algorithm: String,
    #[serde(default)]
    secret: Option<String>,
    #[serde(default)]
    secret_file: Option<PathBuf>,
}

fn d_algorithm() -> String {
    "hmac-sha256".to_owned()
}

/// What a VIP's port is probed with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum PortProbe {
    /// A TCP connection.
    #[default]
    Tcp,
    /// An HTTP GET answered 2xx.
    Http,
    /// None (ICMP alone).
    None,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Probe {
    #[serde(default = "d_interval")]
    interval: Span,
    #[serde(default = "d_timeout")]
    timeout: Span,
    #[serde(default = "d_unhealthy")]
    unhealthy_threshold: u32,
    #[serde(default = "d_healthy")]
    healthy_threshold: u32,
    #[serde(default = "d_true")]
    icmp: bool,
    #[serde(default)]
    kind: PortProbe,
    #[serde(default)]
    port: Option<u16>,
    #[serde(default = "d_path")]
    path: String,
    #[serde(default)]
    host: Option<String>,
}

impl Default for Probe {
    fn default() -> Self {
        Probe {
            interval: d_interval(),
            timeout: d_timeout(),
            unhealthy_threshold: d_unhealthy(),
            healthy_threshold: d_healthy(),
            icmp: true,
            kind: PortProbe::Tcp,
            port: None,
            path: d_path(),
            host: None,
        }
    }
}

fn d_interval() -> Span {
    Span::secs(10)
}
fn d_timeout() -> Span {
    Span::secs(2)
}
fn d_unhealthy() -> u32 {
    3
}
fn d_healthy() -> u32 {
    2
}
fn d_true() -> bool {
    true
}
fn d_path() -> String {
    "/".to_owned()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Control {
    #[serde(default = "d_socket")]
    socket: PathBuf,
    #[serde(default)]
    socket_group: Option<String>,
}

impl Default for Control {
    fn default() -> Self {
        Control {
            socket: d_socket(),
            socket_group: None,
        }
    }
}

/// Where the control socket is unless the file says otherwise.
pub const DEFAULT_SOCKET: &str = "/run/spillway/zone-health.sock";

fn d_socket() -> PathBuf {
    PathBuf::from(DEFAULT_SOCKET)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Zone {
    name: String,
    vips: Vec<IpAddr>,
    #[serde(default)]
    port: Option<u16>,
}

/// The probes' settings.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeSettings {
    /// Time between the starts of a VIP's probes.
    pub interval: Duration,
    /// Time a probe may take.
    pub timeout: Duration,
    /// Consecutive failures after which a VIP is unhealthy.
    pub unhealthy_threshold: u32,
    /// Consecutive successes after which an unhealthy VIP is healthy again.
    pub healthy_threshold: u32,
    /// Whether an ICMP echo must be answered.
    pub icmp: bool,
    /// The port probe.
    pub kind: PortProbe,
    /// HTTP path.
    pub path: String,
    /// HTTP Host header (default: the VIP).
    pub host: Option<String>,
}

/// A zone.
#[derive(Debug, Clone, PartialEq)]
pub struct ZoneSpec {
    /// Its name (an operator's word: `remove NAME`).
    pub name: String,
    /// Its VIPs: the records it contributes.
    pub vips: Vec<IpAddr>,
    /// The port its VIPs are probed on (`None`: ICMP alone).
    pub port: Option<u16>,
}

/// The checked configuration.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The authoritative server.
    pub server: SocketAddr,
    /// The zone updates go to.
    pub zone: Name,
    /// The name whose A/AAAA set is published.
    pub name: Name,
    /// Where removed zones are recorded (a TXT RRset).
    pub removed_name: Name,
    /// TTL of published records.
    pub ttl: u32,
    /// Time one exchange with the server may take.
    pub dns_timeout: Duration,
    /// The TSIG key.
    pub key: Key,
    /// Probes.
    pub probe: ProbeSettings,
    /// Control socket.
    pub socket: PathBuf,
    /// Control socket's group.
    pub socket_group: Option<String>,
    /// Where `GET /metrics` is served, if anywhere.
    pub metrics_listen: Option<SocketAddr>,
    /// The HTTP endpoint, if there is one.
    pub http: Option<Http>,
    /// Zones, in file order.
    pub zones: Vec<ZoneSpec>,
}

/// The label under the published name where removed zones are recorded.
pub const REMOVED_LABEL: &str = "_spillway-removed";

/// A configuration that cannot be used: every problem found, one a line.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {}", .problems.join("\n  "))]
pub struct ConfigError {
    /// The file.
    pub path: String,
    /// What is wrong, each with its field.
    pub problems: Vec<String>,
}

impl Settings {
    /// Reads and checks the file at `path`.
    pub fn load(path: &Path) -> Result<Settings, ConfigError> {
        let fail = |p: String| ConfigError {
            path: path.display().to_string(),
            problems: vec![p],
        };
        let text = std::fs::read_to_string(path).map_err(|e| fail(format!("cannot read: {e}")))?;
        Settings::parse(&text, path.parent().unwrap_or(Path::new("."))).map_err(|problems| {
            ConfigError {
                path: path.display().to_string(),
                problems,
            }
        })
    }

    /// Parses and checks `text`; a relative `secret_file` is taken from `dir`.
    pub fn parse(text: &str, dir: &Path) -> Result<Settings, Vec<String>> {
        let f: File = toml::from_str(text).map_err(|e| vec![e.to_string()])?;
        let mut errs = Vec::new();
        let mut err = |field: &str, msg: String| errs.push(format!("{field}: {msg}"));

        let server = match f.dns.server.parse::<SocketAddr>() {
            Ok(s) => Some(s),
            Err(_) => match f.dns.server.parse::<IpAddr>() {
                Ok(ip) => Some(SocketAddr::new(ip, 53)),
                Err(_) => {
                    err(
                        "dns.server",
                        format!(
                            "{:?} is not an address (\"192.0.2.53\" or \"192.0.2.53:53\" or \"[2001:db8::53]:53\")",
                            f.dns.server
                        ),
                    );
                    None
                }
            },
        };
        let zone = Name::parse(&f.dns.zone)
            .map_err(|e| err("dns.zone", e.to_string()))
            .ok();
        let name = Name::parse(&f.dns.name)
            .map_err(|e| err("dns.name", e.to_string()))
            .ok();
        if let (Some(z), Some(n)) = (&zone, &name)
            && !n.is_within(z)
        {
            err(
                "dns.name",
                format!("{n} is not in zone {z}: updates go to the zone the name is in"),
            );
        }
        if f.dns.ttl == 0 || f.dns.ttl > 86_400 {
            err(
                "dns.ttl",
                format!(
                    "{} s: between 1 s and a day (60 s is usual; resolvers keep a withdrawn zone's record up to this long)",
                    f.dns.ttl
                ),
            );
        }
        let dns_timeout = f.dns.timeout.get();
        if dns_timeout.is_zero() || dns_timeout > Duration::from_secs(30) {
            err(
                "dns.timeout",
                format!("{}: between 1 ms and 30 s", f.dns.timeout),
            );
        }
        let secret = match (&f.dns.tsig.secret, &f.dns.tsig.secret_file) {
            (Some(s), None) => Some(s.clone()),
            (None, Some(p)) => {
                let p = if p.is_relative() {
                    dir.join(p)
                } else {
                    p.clone()
                };
                match std::fs::read_to_string(&p) {
                    Ok(s) => Some(s),
                    Err(e) => {
                        err(
                            "dns.tsig.secret_file",
                            format!("cannot read {}: {e}", p.display()),
                        );
                        None
                    }
                }
            }
            _ => {
                err(
                    "dns.tsig",
                    "give exactly one of secret (base64) and secret_file".to_owned(),
                );
                None
            }
        };
        let key = secret.and_then(|s| {
            Key::new(&f.dns.tsig.name, &f.dns.tsig.algorithm, &s)
                .map_err(|e| err("dns.tsig", e.to_string()))
                .ok()
        });

        let p = &f.probe;
        let (interval, timeout) = (p.interval.get(), p.timeout.get());
        if interval < Duration::from_millis(100) {
            err("probe.interval", format!("{}: at least 100ms", p.interval));
        }
        if timeout.is_zero() || timeout > interval {
            err(
                "probe.timeout",
                format!(
                    "{}: more than 0 and at most the interval ({})",
                    p.timeout, p.interval
                ),
            );
        }
        for (field, v) in [
            ("probe.unhealthy_threshold", p.unhealthy_threshold),
            ("probe.healthy_threshold", p.healthy_threshold),
        ] {
            if v == 0 || v > 100 {
                err(field, format!("{v}: between 1 and 100"));
            }
        }
        if !p.path.starts_with('/') || p.path.bytes().any(|b| b.is_ascii_control() || b == b' ') {
            err(
                "probe.path",
                format!(
                    "{:?}: a path starting with / without spaces or control characters",
                    p.path
                ),
            );
        }
        if p.host
            .as_ref()
            .is_some_and(|h| h.is_empty() || h.bytes().any(|b| b.is_ascii_control() || b == b' '))
        {
            err(
                "probe.host",
                "a host name without spaces or control characters".to_owned(),
            );
        }

        if f.zones.is_empty() {
            err("zones", "at least one [[zones]] entry".to_owned());
        }
        let mut names = HashSet::new();
        let mut vips = HashSet::new();
        let mut zones = Vec::new();
        for (i, z) in f.zones.iter().enumerate() {
            let at = format!("zones[{i}]");
            if z.name.is_empty()
                || z.name.len() > 63
                || !z
                    .name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            {
                err(
                    &format!("{at}.name"),
                    format!("{:?}: 1-63 letters, digits, '-' or '_'", z.name),
                );
            }
            if !names.insert(z.name.as_str()) {
                err(
                    &format!("{at}.name"),
                    format!("zone {:?} is listed twice", z.name),
                );
            }
            if z.vips.is_empty() {
                err(&format!("{at}.vips"), "at least one VIP".to_owned());
            }
            for v in &z.vips {
                let bad = match v {
                    IpAddr::V4(a) => a.is_unspecified() || a.is_broadcast() || a.is_multicast(),
                    IpAddr::V6(a) => a.is_unspecified() || a.is_multicast(),
                };
                if bad {
                    err(
                        &format!("{at}.vips"),
                        format!("{v} cannot be a published VIP"),
                    );
                }
                if !vips.insert(*v) {
                    err(&format!("{at}.vips"), format!("{v} is listed in two zones"));
                }
            }
            let port = match p.kind {
                PortProbe::None => None,
                _ => z.port.or(p.port),
            };
            if p.kind != PortProbe::None && port.is_none_or(|x| x == 0) {
                err(
                    &format!("{at}.port"),
                    format!(
                        "probe.kind {:?} needs a port: set probe.port or this zone's port",
                        p.kind
                    ),
                );
            }
            zones.push(ZoneSpec {
                name: z.name.clone(),
                vips: z.vips.clone(),
                port,
            });
        }
        if !p.icmp && p.kind == PortProbe::None {
            err(
                "probe",
                "icmp = false and kind = \"none\": nothing would be probed".to_owned(),
            );
        }
        let http = check_metrics(&f.metrics, &mut err);
        let control_ok = !f.control.socket.as_os_str().is_empty();
        if !control_ok {
            err("control.socket", "a path".to_owned());
        }

        let removed_name = name.as_ref().and_then(|n| {
            n.child(REMOVED_LABEL)
                .map_err(|e| err("dns.name", e.to_string()))
                .ok()
        });
        match (server, zone, name, removed_name, key) {
            (Some(server), Some(zone), Some(name), Some(removed_name), Some(key))
                if errs.is_empty() =>
            {
                Ok(Settings {
                    server,
                    zone,
                    name,
                    removed_name,
                    ttl: f.dns.ttl,
                    dns_timeout,
                    key,
                    probe: ProbeSettings {
                        interval,
                        timeout,
                        unhealthy_threshold: p.unhealthy_threshold,
                        healthy_threshold: p.healthy_threshold,
                        icmp: p.icmp,
                        kind: p.kind,
                        path: p.path.clone(),
                        host: p.host.clone(),
                    },
                    socket: f.control.socket,
                    socket_group: f.control.socket_group,
                    metrics_listen: f.metrics.listen,
                    http,
                    zones,
                })
            }
            _ => Err(errs),
        }
    }

    /// The zone named `name`.
    pub fn zone(&self, name: &str) -> Option<&ZoneSpec> {
        self.zones.iter().find(|z| z.name == name)
    }
}

/// `[metrics]` checked as the daemon's is (allow-list, limits, timeout);
/// the endpoint's settings, if it listens.
fn check_metrics(m: &Metrics, err: &mut impl FnMut(&str, String)) -> Option<Http> {
    use values::listener::{
        MAX_CONNECTIONS as MAX_LISTENER_CONNECTIONS, MAX_TIMEOUT as MAX_LISTENER_TIMEOUT,
    };
    if let Some(l) = m.listen
        && l.port() == 0
    {
        err(
            "metrics.listen",
            "port 0 is not a port to listen on".to_owned(),
        );
    }
    match &m.allow {
        Some(allow) if allow.is_empty() => err(
            "metrics.allow",
            "an empty allow-list admits nobody: leave `allow` out to admit every address"
                .to_owned(),
        ),
        Some(allow) => {
            for (k, pre) in allow.iter().enumerate() {
                if pre.has_host_bits() {
                    err(
                        &format!("metrics.allow[{k}]"),
                        format!(
                            "{pre} has bits set beyond /{}: write the network address",
                            pre.len
                        ),
                    );
                }
            }
        }
        None => {}
    }
    if !(1..=MAX_LISTENER_CONNECTIONS).contains(&m.max_connections) {
        err(
            "metrics.max_connections",
            format!(
                "{}: expected 1-{MAX_LISTENER_CONNECTIONS}",
                m.max_connections
            ),
        );
    }
    let per_client = m
        .max_connections_per_client
        .unwrap_or(values::listener::DEFAULT_MAX_CONNECTIONS_PER_CLIENT)
        .min(m.max_connections);
    if let Some(n) = m.max_connections_per_client
        && (n == 0 || n > m.max_connections)
    {
        err(
            "metrics.max_connections_per_client",
            format!(
                "{n}: expected 1-{} (at most max_connections)",
                m.max_connections
            ),
        );
    }
    let timeout = m.timeout.get();
    if timeout.is_zero() || timeout > MAX_LISTENER_TIMEOUT {
        err(
            "metrics.timeout",
            format!(
                "{}: expected more than 0s and at most {}s",
                m.timeout,
                MAX_LISTENER_TIMEOUT.as_secs()
            ),
        );
    }
    let usize_of = |n: u32| usize::try_from(n).unwrap_or(usize::MAX);
    m.listen.map(|listen| Http {
        listen,
        allow: m.allow.clone(),
        max_connections: usize_of(m.max_connections.max(1)),
        per_client: usize_of(per_client.max(1)),
        timeout,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    pub(crate) const GOOD: &str = r#"
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
name = "b"
vips = ["198.18.10.21"]
port = 8080
"#;

    #[test]
    fn defaults_and_fields() {
        let s = Settings::parse(GOOD, Path::new(".")).unwrap();
        assert_eq!(s.server, "192.0.2.53:53".parse().unwrap());
        assert_eq!((s.ttl, s.dns_timeout), (60, Duration::from_secs(2)));
        assert_eq!(
            s.removed_name.to_string(),
            "_spillway-removed.www.lab.test."
        );
        assert_eq!(
            (s.probe.interval, s.probe.unhealthy_threshold, s.probe.icmp),
            (Duration::from_secs(10), 3, true)
        );
        assert_eq!((s.zones[0].port, s.zones[1].port), (Some(80), Some(8080)));
        assert_eq!(s.socket, PathBuf::from(DEFAULT_SOCKET));
    }

    #[test]
    fn every_mistake_is_reported_with_its_field() {
        let bad = GOOD
            .replace("name = \"www.lab.test\"", "name = \"www.other.test\"")
            .replace("name = \"b\"", "name = \"a\"")
            .replace("\"198.18.10.21\"", "\"198.18.10.20\"")
            .replace("[probe]\nport = 80", "[probe]\ntimeout = \"20s\"");
        let errs = Settings::parse(&bad, Path::new(".")).unwrap_err();
        let all = errs.join("\n");
        for needle in [
            "dns.name",
            "listed twice",
            "in two zones",
            "probe.timeout",
            "zones[0].port",
        ] {
            assert!(all.contains(needle), "{needle} in:\n{all}");
        }
        let no_key = GOOD.replace("secret = \"c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0ISE=\"", "");
        assert!(Settings::parse(&no_key, Path::new(".")).unwrap_err()[0].contains("dns.tsig"));
        let unknown = format!("{GOOD}\n[extra]\n");
        assert!(Settings::parse(&unknown, Path::new(".")).is_err());
    }
}
