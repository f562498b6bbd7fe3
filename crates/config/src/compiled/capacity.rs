//! What limits a service's capacity (M25): the rates and the utilization
//! target its balancing mode counts, and whether anything reports the
//! utilization it would count. Validation warns from it, check-config
//! prints it, and status says why a utilization is unknown.

use std::fmt;

use super::{Compiled, ServiceId};
use crate::schema::{BalancingMode, GroupKind, HealthCheckType};

/// Where a `UTILIZATION` service's utilization can come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UtilizationSource {
    /// Its HTTP(S) health check: each endpoint may report its utilization
    /// in `X-Load-Balancing-Endpoint-Utilization`.
    HealthCheck,
    /// Nothing: the service has no health check.
    NoHealthCheck,
    /// Nothing: its health check is TCP, which carries no header.
    TcpCheck,
    /// Nothing: `remote_rule` groups, whose remote balancers export a
    /// state only (M21).
    RemoteRule,
}

impl UtilizationSource {
    /// The source of a service of groups of `kind` checked by a check of
    /// type `check` (`None`: no health check).
    pub fn of(kind: GroupKind, check: Option<HealthCheckType>) -> Self {
        match (kind, check) {
            (GroupKind::RemoteRule, _) => UtilizationSource::RemoteRule,
            (GroupKind::Endpoints, None) => UtilizationSource::NoHealthCheck,
            (GroupKind::Endpoints, Some(HealthCheckType::Tcp)) => UtilizationSource::TcpCheck,
            (GroupKind::Endpoints, Some(HealthCheckType::Http | HealthCheckType::Https)) => {
                UtilizationSource::HealthCheck
            }
        }
    }

    /// Whether anything can report a utilization.
    pub const fn can_report(self) -> bool {
        matches!(self, UtilizationSource::HealthCheck)
    }

    /// Why the utilization is unknown when nothing has reported one, for
    /// people: `no health check`, ….
    pub const fn why_unknown(self) -> &'static str {
        match self {
            UtilizationSource::HealthCheck => {
                "no endpoint reports X-Load-Balancing-Endpoint-Utilization to the health check"
            }
            UtilizationSource::NoHealthCheck => "no health check",
            UtilizationSource::TcpCheck => "a TCP health check cannot report it",
            UtilizationSource::RemoteRule => "remote rules report no utilization",
        }
    }
}

/// The limits a service's capacity counts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CapacityLimits {
    /// A rate is set: the service's `max_rate_per_endpoint` or some
    /// group's `max_rate`.
    pub rate: bool,
    /// `UTILIZATION` mode: its target (the service's; groups may set their
    /// own) and where the utilization comes from. `None` in `RATE` mode.
    pub utilization: Option<(f64, UtilizationSource)>,
}

impl CapacityLimits {
    /// Whether the capacity can be limited at all, as configured: some rate
    /// set, or a utilization that something can report.
    pub fn limited(&self) -> bool {
        self.rate || self.utilization.is_some_and(|(_, s)| s.can_report())
    }
}

impl fmt::Display for CapacityLimits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.utilization {
            None => f.write_str("by rate"),
            Some((t, s)) if s.can_report() => {
                if self.rate {
                    write!(
                        f,
                        "by rate or utilization (target {t}), whichever is reached first"
                    )
                } else {
                    write!(f, "by utilization (target {t})")
                }
            }
            Some((_, s)) => {
                let why = s.why_unknown();
                if self.rate {
                    write!(f, "by rate only (utilization unknown: {why})")
                } else {
                    write!(f, "unlimited (utilization unknown: {why})")
                }
            }
        }
    }
}

impl Compiled {
    /// What limits service `s`'s capacity; `None`: no such service.
    pub fn capacity_limits(&self, s: ServiceId) -> Option<CapacityLimits> {
        let svc = self.services.get(s.index())?;
        let rate = svc.balancing.max_rate_per_endpoint.is_some()
            || svc
                .group_ids()
                .filter_map(|g| self.groups.get(g.index()))
                .any(|g| g.max_rate.is_some());
        let check = svc
            .health_check
            .and_then(|h| self.health_checks.get(h.index()))
            .map(|h| h.kind);
        Some(CapacityLimits {
            rate,
            utilization: (svc.balancing.mode == BalancingMode::Utilization).then(|| {
                (
                    svc.balancing.max_utilization,
                    UtilizationSource::of(svc.kind, check),
                )
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_http_check_of_endpoint_groups_can_report_utilization() {
        use GroupKind::{Endpoints, RemoteRule};
        use HealthCheckType::{Http, Https, Tcp};
        let of = UtilizationSource::of;
        assert_eq!(of(Endpoints, Some(Http)), UtilizationSource::HealthCheck);
        assert_eq!(of(Endpoints, Some(Https)), UtilizationSource::HealthCheck);
        assert_eq!(of(Endpoints, Some(Tcp)), UtilizationSource::TcpCheck);
        assert_eq!(of(Endpoints, None), UtilizationSource::NoHealthCheck);
        assert_eq!(of(RemoteRule, None), UtilizationSource::RemoteRule);
        assert_eq!(of(RemoteRule, Some(Http)), UtilizationSource::RemoteRule);
        assert!(of(Endpoints, Some(Http)).can_report());
        assert!(!of(Endpoints, Some(Tcp)).can_report());
        assert!(!of(Endpoints, None).can_report());
    }

    #[test]
    fn limits_say_which_is_counted_and_why_utilization_is_unknown() {
        let l = |rate, utilization| CapacityLimits { rate, utilization }.to_string();
        let http = Some((0.8, UtilizationSource::HealthCheck));
        let tcp = Some((0.8, UtilizationSource::TcpCheck));
        assert_eq!(l(true, None), "by rate");
        assert_eq!(l(false, http), "by utilization (target 0.8)");
        assert_eq!(
            l(true, http),
            "by rate or utilization (target 0.8), whichever is reached first"
        );
        assert_eq!(
            l(true, tcp),
            "by rate only (utilization unknown: a TCP health check cannot report it)"
        );
        assert_eq!(
            l(false, Some((0.8, UtilizationSource::NoHealthCheck))),
            "unlimited (utilization unknown: no health check)"
        );
        assert!(
            !CapacityLimits {
                rate: false,
                utilization: tcp
            }
            .limited()
        );
        assert!(
            CapacityLimits {
                rate: false,
                utilization: http
            }
            .limited()
        );
    }
}
