//! The anti-replay window of one sender epoch (RFC 4303 §3.4.3, with the
//! bitmap of RFC 6479): the highest sequence accepted, and which of the
//! [`WINDOW`] sequences at and below it were seen. A sequence above the
//! highest is new; one in the window is new once; one below the window is
//! refused (it may have been seen: the window no longer knows).
//!
//! [`ReplayWindow::check`] only looks; [`ReplayWindow::accept`] records. A
//! receiver checks, authenticates and decides, and records only what it
//! takes, so a forged or refused datagram never moves the window.

/// Sequences the window remembers below and at the highest one. A sender's
/// sequence is shared by all its peers (each copy of a datagram has its
/// own), so a receiver sees gaps; reordering on a LAN is far below this.
pub const WINDOW: u64 = 1024;

const WORDS: usize = (WINDOW / 64) as usize;

/// Why a sequence was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum Replay {
    /// Below the window: too old to tell, refused.
    #[error("sequence below the replay window")]
    TooOld,
    /// Seen before: a replay (or a duplicate the network made).
    #[error("sequence seen before")]
    Repeated,
}

/// The window of one (peer, epoch).
#[derive(Clone, PartialEq, Eq)]
pub struct ReplayWindow {
    /// The highest sequence accepted.
    top: u64,
    /// Bit `s % WINDOW` for each sequence `s` in `(top - WINDOW, top]`.
    bits: [u64; WORDS],
}

impl core::fmt::Debug for ReplayWindow {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "ReplayWindow(top {})", self.top)
    }
}

impl ReplayWindow {
    /// A window in which `sequence` and everything before it count as seen:
    /// a session starts there, so nothing sent before it is ever taken.
    #[must_use]
    pub fn starting_at(sequence: u64) -> ReplayWindow {
        ReplayWindow {
            top: sequence,
            bits: [u64::MAX; WORDS],
        }
    }

    /// The highest sequence accepted.
    #[must_use]
    pub fn top(&self) -> u64 {
        self.top
    }

    fn slot(sequence: u64) -> (usize, u64) {
        let i = sequence % WINDOW;
        // i < WINDOW, so i / 64 < WORDS.
        (usize::try_from(i / 64).unwrap_or(0), 1u64 << (i % 64))
    }

    /// Whether `sequence` would be new.
    ///
    /// # Errors
    /// [`Replay::TooOld`] below the window, [`Replay::Repeated`] if seen.
    pub fn check(&self, sequence: u64) -> Result<(), Replay> {
        if sequence > self.top {
            return Ok(());
        }
        if self.top - sequence >= WINDOW {
            return Err(Replay::TooOld);
        }
        let (w, bit) = Self::slot(sequence);
        if self.bits.get(w).is_some_and(|b| b & bit != 0) {
            Err(Replay::Repeated)
        } else {
            Ok(())
        }
    }

    /// Checks `sequence` and records it as seen.
    ///
    /// # Errors
    /// As [`ReplayWindow::check`]; nothing is recorded then.
    pub fn accept(&mut self, sequence: u64) -> Result<(), Replay> {
        self.check(sequence)?;
        if sequence > self.top {
            let ahead = sequence - self.top;
            if ahead >= WINDOW {
                self.bits = [0; WORDS];
            } else {
                // Forget the sequences the window slides past: their slots
                // are those of the new ones.
                for s in self.top + 1..sequence {
                    let (w, bit) = Self::slot(s);
                    if let Some(b) = self.bits.get_mut(w) {
                        *b &= !bit;
                    }
                }
            }
            self.top = sequence;
        }
        let (w, bit) = Self::slot(sequence);
        if let Some(b) = self.bits.get_mut(w) {
            *b |= bit;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_once_old_never() {
        let mut w = ReplayWindow::starting_at(10);
        assert_eq!(w.accept(10), Err(Replay::Repeated));
        assert_eq!(w.accept(3), Err(Replay::Repeated));
        assert_eq!(w.accept(12), Ok(()));
        assert_eq!(w.accept(11), Ok(()));
        assert_eq!(w.accept(11), Err(Replay::Repeated));
        assert_eq!(w.accept(12), Err(Replay::Repeated));
        assert_eq!(w.accept(12 + WINDOW), Ok(()));
        assert_eq!(w.check(12), Err(Replay::TooOld));
        assert_eq!(w.check(13), Ok(()), "in the window, never seen");
        assert_eq!(w.accept(13), Ok(()));
        assert_eq!(w.accept(13), Err(Replay::Repeated));
        assert_eq!(w.accept(u64::MAX), Ok(()));
        assert_eq!(w.accept(u64::MAX), Err(Replay::Repeated));
        assert_eq!(w.accept(0), Err(Replay::TooOld));
    }
}
