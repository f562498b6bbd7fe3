//! What a worker may do a limited number of times per tick: create flow
//! entries (M15), answer with ICMP too-big (M48) or echo replies, refuse
//! an appliance's returns (M53). One definition for all of them.

use flowtable::Tick;

/// A per-tick allowance: what was spent of it in its last tick, so that
/// it starts again in each new one. (Counted up, not down: a fresh budget
/// needs no "never used" state, and a limit that changes with the snapshot
/// applies at once.)
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct TickBudget {
    /// The tick `spent` belongs to.
    tick: Tick,
    spent: u32,
}

impl TickBudget {
    /// Whether anything is left in tick `now` of an allowance of `limit`.
    #[inline(always)]
    pub(super) fn available(&mut self, now: Tick, limit: u32) -> bool {
        if self.tick != now {
            self.tick = now;
            self.spent = 0;
        }
        self.spent < limit
    }

    /// Spends one (after [`TickBudget::available`] said there was one).
    #[inline(always)]
    pub(super) fn spend(&mut self) {
        self.spent = self.spent.saturating_add(1);
    }
}

#[cfg(test)]
mod tests {
    use super::TickBudget;

    #[test]
    fn a_budget_is_spent_within_its_tick_and_refilled_in_the_next() {
        let mut b = TickBudget::default();
        for _ in 0..3 {
            assert!(b.available(7, 3));
            b.spend();
        }
        assert!(!b.available(7, 3), "three a tick");
        b.spend();
        assert!(
            !b.available(7, 3),
            "spending an empty budget leaves it empty"
        );
        assert!(b.available(8, 3), "a new tick refills it");
        assert!(
            !TickBudget::default().available(0, 0),
            "a limit of 0 allows nothing"
        );
        // The clock wraps: any other tick is a new one.
        let mut w = TickBudget::default();
        assert!(w.available(u32::MAX, 1));
        w.spend();
        assert!(w.available(0, 1));
    }
}
