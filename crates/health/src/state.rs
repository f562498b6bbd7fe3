//! The per-endpoint state machine (M16, M18).
//!
//! An endpoint starts [`State::Unknown`]; `healthy_threshold` consecutive
//! successful probes make it [`State::Healthy`], `unhealthy_threshold`
//! consecutive failures make it [`State::Unhealthy`]. A result of the other
//! kind resets the run, so a flapping endpoint whose runs are shorter than
//! the threshold never changes state. The machine is pure (no clock, no
//! I/O): the prober feeds it results, and a deterministic harness can do the
//! same.

/// An endpoint's health (UNKNOWN by default): the locality planner's
/// vocabulary too.
pub use locality::Health as State;

/// A state change: `from -> to`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transition {
    /// State before.
    pub from: State,
    /// State after.
    pub to: State,
}

/// Consecutive-result counting with hysteresis.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tracker {
    state: State,
    /// Current run of successes (0 while the last result failed).
    successes: u32,
    /// Current run of failures (0 while the last result succeeded).
    failures: u32,
    healthy_threshold: u32,
    unhealthy_threshold: u32,
    /// Successes that make an [`State::Unknown`] tracker healthy (the
    /// healthy threshold unless [`Tracker::first_success_decides`]).
    unknown_threshold: u32,
}

impl Tracker {
    /// A tracker in [`State::Unknown`]. Thresholds below 1 count as 1.
    pub fn new(healthy_threshold: u32, unhealthy_threshold: u32) -> Self {
        Self {
            state: State::Unknown,
            successes: 0,
            failures: 0,
            healthy_threshold: healthy_threshold.max(1),
            unhealthy_threshold: unhealthy_threshold.max(1),
            unknown_threshold: healthy_threshold.max(1),
        }
    }

    /// This tracker, made healthy by its first success while still
    /// [`State::Unknown`] (the healthy threshold then applies only to
    /// coming back from unhealthy). For a watcher that decides nothing on
    /// half a picture (the zone health service, M51): waiting for a
    /// threshold's worth of successes would only delay its first decision.
    #[must_use]
    pub fn first_success_decides(mut self) -> Self {
        self.unknown_threshold = 1;
        self
    }

    /// Back to [`State::Unknown`] with no results, thresholds kept (what it
    /// tracks stopped being probed; what it said is stale).
    pub fn restart(&mut self) {
        self.state = State::Unknown;
        self.successes = 0;
        self.failures = 0;
    }

    /// Results in a row that agree with the last one (0 before the first).
    pub const fn run(&self) -> u32 {
        if self.successes > 0 {
            self.successes
        } else {
            self.failures
        }
    }

    /// The current state.
    pub const fn state(&self) -> State {
        self.state
    }

    /// Records one probe result; returns the transition it caused, if any.
    pub fn record(&mut self, success: bool) -> Option<Transition> {
        let from = self.state;
        if success {
            self.failures = 0;
            self.successes = self.successes.saturating_add(1);
            let needed = if self.state == State::Unknown {
                self.unknown_threshold
            } else {
                self.healthy_threshold
            };
            if self.successes >= needed {
                self.state = State::Healthy;
            }
        } else {
            self.successes = 0;
            self.failures = self.failures.saturating_add(1);
            if self.failures >= self.unhealthy_threshold {
                self.state = State::Unhealthy;
            }
        }
        (self.state != from).then_some(Transition {
            from,
            to: self.state,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(t: &mut Tracker, results: &[bool]) -> Vec<State> {
        results
            .iter()
            .map(|&r| {
                t.record(r);
                t.state()
            })
            .collect()
    }

    use State::{Healthy as H, Unhealthy as U, Unknown as K};

    #[test]
    fn becomes_healthy_after_threshold_successes() {
        let mut t = Tracker::new(2, 3);
        assert_eq!(run(&mut t, &[true, true, true]), [K, H, H]);
    }

    #[test]
    fn becomes_unhealthy_after_threshold_failures() {
        let mut t = Tracker::new(2, 3);
        assert_eq!(run(&mut t, &[false, false, false, false]), [K, K, U, U]);
    }

    #[test]
    fn alternating_results_never_cross_a_threshold_of_two() {
        let mut t = Tracker::new(2, 2);
        let flaps: Vec<bool> = (0..20).map(|i| i % 2 == 0).collect();
        assert!(run(&mut t, &flaps).iter().all(|&s| s == K));

        // Once healthy, alternating results keep it healthy.
        let mut t = Tracker::new(2, 2);
        run(&mut t, &[true, true]);
        assert!(run(&mut t, &flaps).iter().all(|&s| s == H));
    }

    #[test]
    fn a_success_resets_the_failure_run() {
        let mut t = Tracker::new(1, 3);
        assert_eq!(
            run(&mut t, &[true, false, false, true, false, false, false]),
            [H, H, H, H, H, H, U]
        );
    }

    #[test]
    fn record_reports_each_transition_once() {
        let mut t = Tracker::new(1, 1);
        assert_eq!(t.record(true), Some(Transition { from: K, to: H }));
        assert_eq!(t.record(true), None);
        assert_eq!(t.record(false), Some(Transition { from: H, to: U }));
        assert_eq!(t.record(false), None);
        assert_eq!(t.record(true), Some(Transition { from: U, to: H }));
    }

    #[test]
    fn zero_thresholds_count_as_one() {
        let mut t = Tracker::new(0, 0);
        assert_eq!(t.record(true).map(|x| x.to), Some(H));
        assert_eq!(t.record(false).map(|x| x.to), Some(U));
    }

    #[test]
    fn first_success_decides_only_while_unknown() {
        let mut t = Tracker::new(2, 3).first_success_decides();
        assert_eq!(
            run(&mut t, &[false, true]),
            [K, H],
            "one success from unknown"
        );
        assert_eq!(t.run(), 1);
        assert_eq!(run(&mut t, &[false, false, false]), [H, H, U]);
        assert_eq!(t.run(), 3);
        assert_eq!(run(&mut t, &[true, true]), [U, H], "the threshold back");
        t.restart();
        assert_eq!((t.state(), t.run()), (K, 0));
        assert_eq!(run(&mut t, &[true]), [H], "restarted: unknown again");
        // Without it, unknown waits for the healthy threshold.
        let mut plain = Tracker::new(2, 3);
        assert_eq!(run(&mut plain, &[true, true]), [K, H]);
    }
}
