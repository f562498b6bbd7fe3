//! Health aggregation (SPEC M19) with a three-valued result (M20's
//! vocabulary).

use config::schema::Aggregation;

/// A service's (or one region's) aggregated health.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AggregateHealth {
    /// The healthy endpoints alone meet both thresholds.
    Healthy,
    /// Even counting every endpoint without a verdict as healthy, a
    /// threshold is missed.
    Unhealthy,
    /// The verdict depends on endpoints without a verdict yet.
    Unknown,
}

impl AggregateHealth {
    /// `HEALTHY`, `UNHEALTHY` or `UNKNOWN` (status output).
    pub const fn as_str(self) -> &'static str {
        match self {
            AggregateHealth::Healthy => "HEALTHY",
            AggregateHealth::Unhealthy => "UNHEALTHY",
            AggregateHealth::Unknown => "UNKNOWN",
        }
    }
}

impl std::fmt::Display for AggregateHealth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Aggregates `healthy` and `unknown` endpoints out of `total` under
/// `policy`: below `min_healthy_count` healthy endpoints, or below
/// `min_healthy_percent` of `total`, it is UNHEALTHY (M19). Endpoints without
/// a verdict make it UNKNOWN when they could tip it either way.
///
/// Every endpoint counts, whatever its weight or its group's
/// `capacity_scaler`: draining is the operator's choice, not ill health.
pub fn aggregate(healthy: u32, unknown: u32, total: u32, policy: &Aggregation) -> AggregateHealth {
    let meets = |h: u32| {
        h >= policy.min_healthy_count
            && u64::from(h) * 100 >= u64::from(policy.min_healthy_percent) * u64::from(total)
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
}
