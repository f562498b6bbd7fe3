//! A service's capacity settings (M25): which rates and utilization targets
//! its balancing mode takes, and warnings where a limit it asks for has
//! nothing to measure it by.
//!
//! `UTILIZATION` counts the utilization its endpoints report and, where
//! one is set, `max_rate_per_endpoint` or a group's `max_rate` too: the
//! capacity is reached when either is (the clouds' "or both"). `RATE`
//! counts rates only, so a utilization target there is refused rather than
//! silently ignored.

use super::Checker;
use crate::compiled::UtilizationSource;
use crate::schema::{BackendService, BalancingMode, GroupKind, HealthCheck};

/// The reason given when a rate of 0 is refused.
const ZERO_RATE: &str =
    "a rate of 0 would refuse every connection; use capacity_scaler = 0 to drain";

impl Checker<'_> {
    /// `s`'s capacity settings; `check` is its health check, if it names
    /// one that exists.
    pub(super) fn capacity(&mut self, p: &str, s: &BackendService, check: Option<&HealthCheck>) {
        if s.max_rate_per_endpoint == Some(0) {
            self.err(&format!("{p}.max_rate_per_endpoint"), ZERO_RATE);
        }
        match s.balancing_mode {
            BalancingMode::Rate => self.rate_mode(p, s),
            BalancingMode::Utilization => self.utilization_mode(p, s),
        }
        self.capacity_sources(p, s, check);
    }

    fn rate_mode(&mut self, p: &str, s: &BackendService) {
        const RATE_ONLY: &str = "max_utilization is a target of balancing_mode UTILIZATION; RATE counts packets per second only (to limit by rate and utilization together, use UTILIZATION with max_rate or max_rate_per_endpoint)";
        if s.max_utilization.is_some() {
            self.err(&format!("{p}.max_utilization"), RATE_ONLY);
        }
        for (g, group) in s.groups.iter().enumerate() {
            if group.max_utilization.is_some() {
                self.err(&format!("{p}.groups[{g}].max_utilization"), RATE_ONLY);
            }
            if s.max_rate_per_endpoint.is_none() && group.max_rate.is_none() {
                self.err(
                    &format!("{p}.groups[{g}].max_rate"),
                    "balancing_mode RATE needs max_rate on every group, or max_rate_per_endpoint on the service",
                );
            }
        }
    }

    fn utilization_mode(&mut self, p: &str, s: &BackendService) {
        let target = |c: &mut Self, path: String, u: Option<f64>| {
            if let Some(u) = u
                && !(u > 0.0 && u <= 1.0)
            {
                c.err(
                    &path,
                    format!("{u} is out of range: 0 < max_utilization <= 1.0"),
                );
            }
        };
        target(self, format!("{p}.max_utilization"), s.max_utilization);
        for (g, group) in s.groups.iter().enumerate() {
            let gp = format!("{p}.groups[{g}]");
            target(self, format!("{gp}.max_utilization"), group.max_utilization);
            if group.kind == GroupKind::RemoteRule && group.max_utilization.is_some() {
                self.err(
                    &format!("{gp}.max_utilization"),
                    "a remote_rule group reports no utilization, so a target has nothing to count; use max_rate",
                );
            }
        }
    }

    /// Warnings: a service without a health check (every endpoint counts
    /// as healthy; the clouds require one), and `UTILIZATION` with nothing
    /// that can report a utilization (no limit, or only the rates).
    /// `remote_rule` services are exempt: their health is the remote
    /// rule's exported state (M21), and their capacity the remote's.
    fn capacity_sources(&mut self, p: &str, s: &BackendService, check: Option<&HealthCheck>) {
        let kind = s.groups.first().map(|g| g.kind).unwrap_or_default();
        if kind == GroupKind::RemoteRule {
            return;
        }
        let source = UtilizationSource::of(kind, check.map(|c| c.kind));
        let rate =
            s.max_rate_per_endpoint.is_some() || s.groups.iter().any(|g| g.max_rate.is_some());
        let limit = if rate {
            "only its rates limit its capacity"
        } else {
            "it has no capacity limit"
        };
        let mode = if self.map.contains(&format!("{p}.balancing_mode")) {
            "balancing_mode UTILIZATION"
        } else {
            "balancing_mode UTILIZATION (the default)"
        };
        let utilization = s.balancing_mode == BalancingMode::Utilization;
        match source {
            UtilizationSource::NoHealthCheck if s.health_check.is_none() => {
                let tail = if utilization {
                    format!(", and nothing reports utilization: under {mode} {limit}")
                } else {
                    String::new()
                };
                self.warn(
                    &format!("{p}.name"),
                    format!(
                        "service {:?} has no health check: every endpoint counts as healthy, failing or not{tail} (cloud load balancers require a health check)",
                        s.name
                    ),
                );
            }
            UtilizationSource::TcpCheck if utilization => {
                self.warn(
                    &format!("{p}.health_check"),
                    format!(
                        "{mode}, but health check {:?} is TCP, which cannot report utilization: {limit} (use an HTTP(S) check whose endpoints send X-Load-Balancing-Endpoint-Utilization, or balancing_mode RATE)",
                        s.health_check.as_deref().unwrap_or_default()
                    ),
                );
            }
            _ => {}
        }
    }
}
