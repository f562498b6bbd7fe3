//! What to probe: [`Target`]s and their [`Check`] settings, built from the
//! configuration or by hand.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use config::Compiled;
use config::compiled::EndpointId;
use config::schema::{GroupKind, HealthCheck, HealthCheckTarget, HealthCheckType};

use crate::error::HealthError;

/// Probe protocol (M16).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProbeKind {
    /// The TCP connection is established within the timeout.
    Tcp,
    /// `GET path` answers 2xx or 3xx.
    Http,
    /// `GET path` over TLS answers 2xx or 3xx; the certificate's host name
    /// and chain are not verified, its validity period is.
    Https,
}

impl From<HealthCheckType> for ProbeKind {
    fn from(t: HealthCheckType) -> Self {
        match t {
            HealthCheckType::Tcp => ProbeKind::Tcp,
            HealthCheckType::Http => ProbeKind::Http,
            HealthCheckType::Https => ProbeKind::Https,
        }
    }
}

/// A health check's settings, as the prober uses them. Two targets with
/// equal settings, service and address are the same probe (their state is
/// kept across [`crate::HealthChecker::update`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Check {
    /// Protocol.
    pub kind: ProbeKind,
    /// HTTP(S) request path (starts with `/`).
    pub path: String,
    /// HTTP(S) `Host` header; `None`: the endpoint address (with `:port`
    /// when the port is not the scheme's default).
    pub host: Option<String>,
    /// Time between probe starts (> 0).
    pub interval: Duration,
    /// Probe timeout, connection to response headers (> 0, ≤ interval).
    pub timeout: Duration,
    /// Consecutive successes to become healthy (≥ 1).
    pub healthy_threshold: u32,
    /// Consecutive failures to become unhealthy (≥ 1).
    pub unhealthy_threshold: u32,
    /// HTTP(S): read `X-Load-Balancing-Endpoint-Weight` (M17).
    pub weight_from_header: bool,
    /// Bind probes to this address before connecting (M22); `None`: the
    /// kernel's choice (the exception interface's address).
    pub source_address: Option<IpAddr>,
}

impl Check {
    /// A TCP check with the configuration's defaults (5 s interval, 3 s
    /// timeout, thresholds 2 and 3).
    pub fn tcp() -> Self {
        Self {
            kind: ProbeKind::Tcp,
            path: "/".to_owned(),
            host: None,
            interval: Duration::from_secs(5),
            timeout: Duration::from_secs(3),
            healthy_threshold: 2,
            unhealthy_threshold: 3,
            weight_from_header: false,
            source_address: None,
        }
    }

    /// An HTTP check of `path` with the configuration's defaults.
    pub fn http(path: &str) -> Self {
        Self {
            kind: ProbeKind::Http,
            path: path.to_owned(),
            ..Self::tcp()
        }
    }

    /// An HTTPS check of `path` with the configuration's defaults.
    pub fn https(path: &str) -> Self {
        Self {
            kind: ProbeKind::Https,
            ..Self::http(path)
        }
    }

    /// The check of a `[[health_checks]]` entry.
    pub fn from_config(hc: &HealthCheck) -> Result<Self, HealthError> {
        let c = Self {
            kind: hc.kind.into(),
            path: hc.path.clone().unwrap_or_else(|| "/".to_owned()),
            host: hc.host.clone(),
            interval: hc.interval.get(),
            timeout: hc.timeout.get(),
            healthy_threshold: hc.healthy_threshold,
            unhealthy_threshold: hc.unhealthy_threshold,
            weight_from_header: hc.weight_from_header,
            source_address: hc.source_address,
        };
        c.validate().map_err(|reason| HealthError::InvalidCheck {
            name: hc.name.clone(),
            reason,
        })?;
        Ok(c)
    }

    /// Checks what the prober relies on: positive interval and timeout,
    /// timeout at most the interval, thresholds at least 1, and a path and
    /// host that cannot break the request line (no whitespace or control
    /// characters; the path starts with `/`).
    pub fn validate(&self) -> Result<(), String> {
        if self.interval.is_zero() {
            return Err("the interval must be longer than 0s".to_owned());
        }
        if self.timeout.is_zero() {
            return Err("the timeout must be longer than 0s".to_owned());
        }
        if self.timeout > self.interval {
            return Err("the timeout exceeds the interval".to_owned());
        }
        if self.healthy_threshold == 0 || self.unhealthy_threshold == 0 {
            return Err("a threshold must be at least 1".to_owned());
        }
        let clean =
            |s: &str| !s.is_empty() && !s.chars().any(|c| c.is_whitespace() || c.is_control());
        if !self.path.starts_with('/') || !clean(&self.path) {
            return Err(format!(
                "path {:?} must start with '/' and contain no spaces or control characters",
                self.path
            ));
        }
        if let Some(h) = &self.host
            && !clean(h)
        {
            return Err(format!(
                "host {h:?} must be non-empty without spaces or control characters"
            ));
        }
        Ok(())
    }
}

/// One endpoint to probe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// The caller's handle for the endpoint, returned in every status
    /// (e.g. its index in [`Compiled::endpoints`]). Not part of the probe's
    /// identity: it may change on reload while the state is kept.
    pub endpoint: EndpointId,
    /// Backend service name (logs; part of the identity).
    pub service: Arc<str>,
    /// The endpoint's address and the port probed.
    pub addr: SocketAddr,
    /// Settings.
    pub check: Check,
    /// Probed through a VIP (M52): part of the identity.
    pub via: Option<Via>,
}

/// How a probe through a VIP goes: to `vip` at the target's port, from
/// `source_port`, which the data plane maps to the target's endpoint (M52).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Via {
    /// The VIP connected to.
    pub vip: IpAddr,
    /// The source port bound. Not part of the identity: a reload that
    /// moves it keeps the probe's state.
    pub source_port: u16,
}

impl Target {
    /// Where the probe connects: the VIP's address for a probe through a
    /// VIP, else the endpoint's.
    pub fn connect_to(&self) -> SocketAddr {
        match self.via {
            Some(v) => SocketAddr::new(v.vip, self.addr.port()),
            None => self.addr,
        }
    }
}

/// One target per endpoint of every service that has a health check, in
/// endpoint order; with `target = "vip"`, one per endpoint and VIP of its
/// service ([`Compiled::vip_probes`], M52). Endpoints of services without a
/// check (always healthy) and `remote_rule` groups (their state comes from
/// the remote's status, M21) are left out, as are endpoints without a port
/// to probe (validation rejects those).
pub fn targets_from_compiled(c: &Compiled) -> Result<Vec<Target>, HealthError> {
    let mut checks = Vec::with_capacity(c.health_checks.len());
    for hc in &c.health_checks {
        checks.push(Check::from_config(hc)?);
    }
    let mut out = Vec::new();
    for svc in &c.services {
        let Some(check) = svc.health_check.and_then(|id| checks.get(id.index())) else {
            continue;
        };
        if svc.kind == GroupKind::RemoteRule {
            continue;
        }
        let name: Arc<str> = Arc::from(svc.name.as_str());
        let through_vips = svc
            .health_check
            .and_then(|h| c.health_checks.get(h.index()))
            .is_some_and(|h| h.target == HealthCheckTarget::Vip);
        for id in svc.endpoint_ids() {
            let Some(ep) = c.endpoints.get(id.index()) else {
                continue;
            };
            let Some(port) = ep.health_port else {
                continue;
            };
            let target = Target {
                endpoint: id,
                service: Arc::clone(&name),
                addr: SocketAddr::new(ep.address, port),
                check: check.clone(),
                via: None,
            };
            if !through_vips {
                // A dual-stack endpoint is probed at each address (M8).
                for addr in ep.addresses() {
                    let mut check = check.clone();
                    check.source_address = check
                        .source_address
                        .filter(|s| s.is_ipv4() == addr.is_ipv4());
                    out.push(Target {
                        addr: SocketAddr::new(addr, port),
                        check,
                        ..target.clone()
                    });
                }
                continue;
            }
            let first = c.vip_probes.partition_point(|p| p.endpoint < id);
            for p in c
                .vip_probes
                .iter()
                .skip(first)
                .take_while(|p| p.endpoint == id)
            {
                out.push(Target {
                    addr: SocketAddr::new(ep.address, p.port),
                    via: Some(Via {
                        vip: p.vip,
                        source_port: p.source_port,
                    }),
                    ..target.clone()
                });
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validate_rejects_request_splitting() {
        let mut c = Check::http("/health\r\nX-Evil: 1");
        assert!(c.validate().is_err());
        c.path = "/a b".to_owned();
        assert!(c.validate().is_err());
        c.path = "health".to_owned();
        assert!(c.validate().is_err());
        c.path = "/healthz?full=1".to_owned();
        assert!(c.validate().is_ok());
        c.host = Some("example.com\r\n".to_owned());
        assert!(c.validate().is_err());
        c.host = Some("example.com:8080".to_owned());
        assert!(c.validate().is_ok());
    }

    #[test]
    fn validate_rejects_bad_timing() {
        let mut c = Check::tcp();
        c.timeout = c.interval + Duration::from_millis(1);
        assert!(c.validate().is_err());
        c.timeout = Duration::ZERO;
        assert!(c.validate().is_err());
        c = Check::tcp();
        c.interval = Duration::ZERO;
        assert!(c.validate().is_err());
        c = Check::tcp();
        c.healthy_threshold = 0;
        assert!(c.validate().is_err());
    }
}
