//! The daemon's reports: the core's (`status`, `stats`, answers; in
//! [`control_core::report`], re-exported here) and the rates of `stats`,
//! sampled on the daemon's clock.

use std::time::{Duration, Instant};

use dataplane::WorkerCounters;

pub use control_core::report::*;

/// Samples of the summed counters, one a second, for [`Rates`]: the two
/// newest are kept, so a rate covers between one and two seconds.
#[derive(Debug, Default)]
pub struct RateSampler {
    newest: Option<(Instant, WorkerCounters)>,
    older: Option<(Instant, WorkerCounters)>,
}

/// How often [`RateSampler`] takes a sample.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(1);

impl RateSampler {
    /// Whether a sample is due at `now`.
    pub fn due(&self, now: Instant) -> bool {
        self.newest
            .as_ref()
            .is_none_or(|(t, _)| now.saturating_duration_since(*t) >= SAMPLE_EVERY)
    }

    /// Keeps `counters`, read at `now`.
    pub fn push(&mut self, now: Instant, counters: WorkerCounters) {
        self.older = self.newest.replace((now, counters));
    }

    /// The rates from the newest sample at least a second old to `current`
    /// (read at `now`).
    pub fn rates(&self, now: Instant, current: &WorkerCounters) -> Option<Rates> {
        [&self.newest, &self.older]
            .into_iter()
            .flatten()
            .find(|(t, _)| now.saturating_duration_since(*t) >= SAMPLE_EVERY)
            .map(|(t, c)| Rates::between(c, current, now.saturating_duration_since(*t)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_come_from_a_sample_at_least_a_second_old() {
        let t0 = Instant::now();
        let mut s = RateSampler::default();
        let c = |n| WorkerCounters {
            rx_packets: n,
            ..WorkerCounters::new(0)
        };
        assert!(s.due(t0));
        s.push(t0, c(100));
        assert!(!s.due(t0 + Duration::from_millis(500)));
        assert_eq!(s.rates(t0 + Duration::from_millis(500), &c(150)), None);
        let r = s.rates(t0 + Duration::from_secs(2), &c(300)).unwrap();
        assert_eq!(r.interval_s, 2.0);
        assert_eq!(r.per_second[0], ("rx_packets", 100.0));
        s.push(t0 + Duration::from_secs(2), c(300));
        // The newest is too recent: the older one is used.
        let r = s.rates(t0 + Duration::from_millis(2500), &c(350)).unwrap();
        assert_eq!(r.interval_s, 2.5);
        assert_eq!(r.per_second[0], ("rx_packets", 100.0));
    }
}
