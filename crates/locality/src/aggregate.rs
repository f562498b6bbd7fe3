//! Health aggregation (M19) with a three-valued result (M20's vocabulary):
//! the one definition, which the `health` crate's service and composite
//! states use too.
//!
//! A service (or the part of it in one region) is healthy when at least
//! `min_healthy_count` endpoints are healthy **and** at least
//! `min_healthy_percent` % of its endpoints are healthy; below either
//! threshold it is UNHEALTHY. Exactly at a threshold counts as healthy. The
//! percentage is of *all* the endpoints, whatever their state, weight or
//! group's `capacity_scaler` (draining is the operator's choice, not ill
//! health); a percentage above 100 counts as 100.
//!
//! **Unknown endpoints** (no verdict yet) are neither healthy nor
//! unhealthy: the aggregate is decided only when they cannot change it.
//!
//! - HEALTHY if the policy holds even if every unknown endpoint turned out
//!   unhealthy;
//! - UNHEALTHY if the policy fails even if every unknown endpoint turned out
//!   healthy;
//! - UNKNOWN otherwise.
//!
//! So right after start (everything unknown) a service is UNKNOWN, unless it
//! can never be healthy (fewer endpoints than `min_healthy_count`). No
//! endpoints at all is UNHEALTHY unless `min_healthy_count` is 0.

use config::schema::Aggregation;

use crate::input::Health;

/// A service's, region's or composite's aggregated health.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum AggregateHealth {
    /// The healthy endpoints alone meet both thresholds.
    Healthy,
    /// Even counting every endpoint without a verdict as healthy, a
    /// threshold is missed.
    Unhealthy,
    /// The verdict depends on endpoints without a verdict yet.
    #[default]
    Unknown,
}

impl AggregateHealth {
    /// The endpoint state of the same name: an aggregate is exported like
    /// an endpoint's state (M21).
    pub const fn as_health(self) -> Health {
        match self {
            AggregateHealth::Healthy => Health::Healthy,
            AggregateHealth::Unhealthy => Health::Unhealthy,
            AggregateHealth::Unknown => Health::Unknown,
        }
    }

    /// `HEALTHY`, `UNHEALTHY` or `UNKNOWN` (status output, M21).
    pub const fn as_str(self) -> &'static str {
        self.as_health().as_str()
    }
}

impl std::fmt::Display for AggregateHealth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Aggregates `healthy` and `unknown` endpoints out of `total` under
/// `policy` (see the module docs).
pub fn aggregate(healthy: u64, unknown: u64, total: u64, policy: &Aggregation) -> AggregateHealth {
    let percent = u128::from(policy.min_healthy_percent.min(100));
    let meets = |h: u64| {
        h >= u64::from(policy.min_healthy_count)
            && u128::from(h) * 100 >= percent * u128::from(total)
    };
    if meets(healthy) {
        AggregateHealth::Healthy
    } else if meets(healthy.saturating_add(unknown)) {
        AggregateHealth::Unknown
    } else {
        AggregateHealth::Unhealthy
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(pct: u8, count: u32) -> Aggregation {
        Aggregation {
            min_healthy_percent: pct,
            min_healthy_count: count,
        }
    }

    #[test]
    fn thresholds() {
        use AggregateHealth::*;
        // 60 % of 10 is 6.
        assert_eq!(aggregate(6, 0, 10, &p(60, 1)), Healthy);
        assert_eq!(aggregate(5, 0, 10, &p(60, 1)), Unhealthy);
        assert_eq!(aggregate(5, 1, 10, &p(60, 1)), Unknown);
        assert_eq!(aggregate(5, 5, 10, &p(60, 1)), Unknown);
        // Count threshold.
        assert_eq!(aggregate(2, 0, 2, &p(0, 3)), Unhealthy);
        assert_eq!(aggregate(3, 0, 3, &p(0, 3)), Healthy);
        // Nothing required.
        assert_eq!(aggregate(0, 0, 4, &p(0, 0)), Healthy);
        // All unknown (just started).
        assert_eq!(aggregate(0, 4, 4, &p(60, 1)), Unknown);
        assert_eq!(Unknown.to_string(), "UNKNOWN");
    }

    #[test]
    fn percent_above_100_counts_as_100() {
        // Validation rejects such a policy; the clamp keeps every endpoint
        // healthy from reading as UNHEALTHY should one get through.
        assert_eq!(aggregate(4, 0, 4, &p(250, 1)), AggregateHealth::Healthy);
        assert_eq!(aggregate(3, 1, 4, &p(250, 1)), AggregateHealth::Unknown);
    }

    #[test]
    fn counts_far_beyond_u32_do_not_overflow() {
        let n = u64::MAX / 2;
        assert_eq!(aggregate(n, 0, n, &p(100, 1)), AggregateHealth::Healthy);
        assert_eq!(aggregate(n, n, 2 * n, &p(60, 1)), AggregateHealth::Unknown);
    }
}
