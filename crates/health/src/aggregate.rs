//! Service aggregation (M19) and composite health (M20): pure functions.
//!
//! # Aggregation
//!
//! A service (or the part of it in one region: the caller passes that
//! region's endpoint states) is aggregated by [`locality::aggregate`], the
//! one definition of M19 that the locality planner uses for its regions
//! too: HEALTHY when its healthy endpoints meet `min_healthy_count` and
//! `min_healthy_percent` (of all its endpoints), UNHEALTHY when even counting
//! every UNKNOWN endpoint as healthy they do not, UNKNOWN otherwise. So
//! right after start (everything UNKNOWN) a service is UNKNOWN, as M20 asks
//! ("none unhealthy, some not yet known"), unless it can never be healthy at
//! all (fewer endpoints than `min_healthy_count`: UNHEALTHY). A service with
//! 10 endpoints and a 60 % policy is already HEALTHY once six are healthy,
//! and already UNHEALTHY once five are unhealthy, whatever the other four
//! say.
//!
//! An empty endpoint list is UNHEALTHY unless `min_healthy_count` is 0.
//! Endpoints without a health check are always healthy: callers pass
//! [`State::Healthy`] for them.
//!
//! # Composite
//!
//! [`composite`]: HEALTHY if every source is healthy, UNHEALTHY if any is
//! unhealthy, UNKNOWN otherwise (none unhealthy, some unknown). A composite
//! without sources is UNKNOWN (validation requires 1–10).

use config::schema::Aggregation;
/// A service's, region's or composite's health (`HEALTHY`, `UNHEALTHY`,
/// `UNKNOWN`; UNKNOWN by default).
pub use locality::AggregateHealth as Aggregate;

use crate::state::State;

/// How many endpoints are in each state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Healthy endpoints.
    pub healthy: u64,
    /// Unhealthy endpoints.
    pub unhealthy: u64,
    /// Endpoints not yet known.
    pub unknown: u64,
}

impl Counts {
    /// Counts `states`.
    pub fn of<'a>(states: impl IntoIterator<Item = &'a State>) -> Self {
        let mut c = Counts::default();
        for s in states {
            match s {
                State::Healthy => c.healthy += 1,
                State::Unhealthy => c.unhealthy += 1,
                State::Unknown => c.unknown += 1,
            }
        }
        c
    }

    /// All endpoints.
    pub const fn total(&self) -> u64 {
        self.healthy + self.unhealthy + self.unknown
    }
}

/// Aggregates endpoint states under `policy` (see the module docs).
pub fn aggregate(states: &[State], policy: Aggregation) -> Aggregate {
    aggregate_counts(Counts::of(states), policy)
}

/// [`aggregate`] from counts.
pub fn aggregate_counts(c: Counts, policy: Aggregation) -> Aggregate {
    locality::aggregate(c.healthy, c.unknown, c.total(), &policy)
}

/// Combines a composite's sources (M20): HEALTHY if all are healthy,
/// UNHEALTHY if any is unhealthy, otherwise UNKNOWN (also for no sources).
pub fn composite(sources: &[Aggregate]) -> Aggregate {
    if sources.contains(&Aggregate::Unhealthy) {
        Aggregate::Unhealthy
    } else if !sources.is_empty() && sources.iter().all(|&s| s == Aggregate::Healthy) {
        Aggregate::Healthy
    } else {
        Aggregate::Unknown
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Aggregate::{Healthy as AH, Unhealthy as AU, Unknown as AK};
    use State::{Healthy as H, Unhealthy as U, Unknown as K};

    fn policy(min_healthy_percent: u8, min_healthy_count: u32) -> Aggregation {
        Aggregation {
            min_healthy_percent,
            min_healthy_count,
        }
    }

    fn states(h: usize, u: usize, k: usize) -> Vec<State> {
        let mut v = vec![H; h];
        v.extend(vec![U; u]);
        v.extend(vec![K; k]);
        v
    }

    #[test]
    fn default_policy_is_60_percent_and_one() {
        assert_eq!(Aggregation::default(), policy(60, 1));
    }

    #[test]
    fn aggregation_truth_table() {
        // (healthy, unhealthy, unknown, percent, count) -> expected
        let table: &[(usize, usize, usize, u8, u32, Aggregate)] = &[
            // Right after start: everything unknown.
            (0, 0, 5, 60, 1, AK),
            (0, 0, 1, 60, 1, AK),
            (0, 0, 5, 0, 0, AH),  // a policy that nothing can fail
            (0, 0, 2, 60, 3, AU), // can never reach 3 healthy
            // Fully known.
            (5, 0, 0, 60, 1, AH),
            (3, 2, 0, 60, 1, AH), // exactly 60 %: healthy
            (2, 3, 0, 60, 1, AU), // 40 %
            (0, 5, 0, 60, 1, AU),
            (1, 0, 0, 100, 1, AH),
            (9, 1, 0, 100, 1, AU),
            (1, 9, 0, 0, 1, AH),  // count only
            (0, 9, 0, 0, 1, AU),  // count only, none healthy
            (2, 0, 0, 60, 3, AU), // 100 % but below the count
            (3, 7, 0, 30, 3, AH),
            // Partly known: decided when the unknowns cannot change it.
            (6, 0, 4, 60, 1, AH), // 60 % even if all 4 fail
            (5, 0, 5, 60, 1, AK), // 50 %..100 %
            (3, 3, 4, 60, 1, AK), // 30 %..70 %
            (1, 5, 4, 60, 1, AU), // at most 50 %
            (0, 5, 5, 60, 1, AU), // at most 50 %
            (0, 4, 6, 60, 1, AK), // at most 60 %
            (1, 0, 1, 60, 2, AK), // count reachable
            (1, 1, 1, 60, 3, AU), // count unreachable
            // Empty.
            (0, 0, 0, 60, 1, AU),
            (0, 0, 0, 60, 0, AH),
        ];
        for &(h, u, k, pct, cnt, want) in table {
            assert_eq!(
                aggregate(&states(h, u, k), policy(pct, cnt)),
                want,
                "{h} healthy, {u} unhealthy, {k} unknown, {pct}% / {cnt}"
            );
        }
    }

    #[test]
    fn order_of_states_does_not_matter() {
        let a = [K, H, U, H, H];
        let b = [H, H, H, U, K];
        for pct in [0, 50, 60, 61, 100] {
            assert_eq!(aggregate(&a, policy(pct, 1)), aggregate(&b, policy(pct, 1)));
        }
    }

    #[test]
    fn percent_above_100_is_clamped() {
        assert_eq!(aggregate(&[H, H], policy(250, 1)), AH);
    }

    #[test]
    fn composite_truth_table() {
        let table: &[(&[Aggregate], Aggregate)] = &[
            (&[AH], AH),
            (&[AU], AU),
            (&[AK], AK),
            (&[AH, AH, AH], AH),
            (&[AH, AK], AK),
            (&[AK, AK], AK), // right after start
            (&[AH, AU], AU),
            (&[AK, AU], AU),
            (&[AU, AU], AU),
            (&[AH, AK, AU], AU),
            (&[], AK),
        ];
        for &(sources, want) in table {
            assert_eq!(composite(sources), want, "{sources:?}");
        }
    }

    #[test]
    fn composite_of_fresh_services_is_unknown() {
        // Two services just created: all endpoints unknown.
        let p = Aggregation::default();
        let a = aggregate(&[K, K, K], p);
        let b = aggregate(&[K], p);
        assert_eq!(composite(&[a, b]), AK);
        // One becomes healthy: still unknown; the other turns unhealthy.
        let a = aggregate(&[H, H, K], p);
        assert_eq!(composite(&[a, b]), AK);
        let b = aggregate(&[U], p);
        assert_eq!(composite(&[a, b]), AU);
    }
}
