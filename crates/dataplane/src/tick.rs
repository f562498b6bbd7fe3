//! The coarse clock of flow entries: what the management core advances and
//! workers stamp entries with, in one type so that every driver of the core
//! (the daemon, `replay`, the simulation) reads time the same way.

use std::time::Duration;

/// Whole seconds since the daemon (or a replay, or a simulation) started:
/// the unit flow entries are stamped, aged and timed out in
/// ([`flowtable::Tick`], which the hot path keeps as a plain integer).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Tick(flowtable::Tick);

impl Tick {
    /// The tick `since_start` after the start; the last one after 2^32
    /// seconds (it never wraps back to an earlier one).
    pub fn at(since_start: Duration) -> Tick {
        Tick(u32::try_from(since_start.as_secs()).unwrap_or(u32::MAX))
    }

    /// As workers and the flow table count it.
    pub const fn get(self) -> flowtable::Tick {
        self.0
    }

    /// Whether this tick is at or past `deadline` on the wrapping clock.
    pub const fn reached(self, deadline: flowtable::Tick) -> bool {
        flowtable::tick_reached(self.0, deadline)
    }
}

#[cfg(test)]
mod tests {
    use super::Tick;
    use std::time::Duration;

    #[test]
    fn whole_seconds_saturating() {
        assert_eq!(Tick::at(Duration::from_millis(1_999)).get(), 1);
        assert_eq!(Tick::at(Duration::from_secs(u64::MAX)).get(), u32::MAX);
        assert!(Tick::at(Duration::from_secs(5)).reached(5));
        assert!(!Tick::at(Duration::from_secs(4)).reached(5));
    }
}
