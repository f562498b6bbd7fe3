//! What happens when in a replay, as plain data: the timed changes (`--at
//! TIME` followed by `--down`, `--up`, `--remote`, `--reload`) and the
//! `--down` windows of whole seconds. The command line builds a
//! [`Script`]; the crate's driver of the management core carries it out
//! on the capture's clock.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use control_core::scripted::State;

/// The health and configuration changes of a replay.
#[derive(Debug, Clone, Default)]
pub struct Script {
    /// The changes at given capture times, in time order (ties: the order
    /// they were given in).
    events: Vec<Event>,
    /// Endpoints failing their health check for whole seconds of the
    /// capture (`--down` without a preceding `--at`).
    windows: Vec<Down>,
}

impl Script {
    /// A script of `events` (put in time order here; ties keep their order)
    /// and `windows`.
    pub fn new(mut events: Vec<Event>, windows: Vec<Down>) -> Script {
        events.sort_by_key(|e| e.at);
        Script { events, windows }
    }

    /// The changes at given capture times, in time order.
    pub fn events(&self) -> &[Event] {
        &self.events
    }

    /// The `--down` windows.
    pub fn windows(&self) -> &[Down] {
        &self.windows
    }
}

/// A change at a given capture time.
#[derive(Debug, Clone)]
pub struct Event {
    /// Capture time since the first packet.
    pub at: Duration,
    /// What changes.
    pub what: Change,
}

/// What a timed change does.
#[derive(Debug, Clone)]
pub enum Change {
    /// `--down`: the endpoint address fails its health check from then on.
    Down(IpAddr),
    /// `--up`: the endpoint address passes its health check from then on.
    Up(IpAddr),
    /// `--reload`: this configuration file is reloaded, as `spillway
    /// reload` would.
    Reload(PathBuf),
    /// `--remote`: a remote rule's exported state as its peer answers it
    /// (the rule's name on the peer).
    Remote(String, State),
}

/// `--down ADDRESS[@FROM[-UNTIL]]`: an endpoint failing its health check
/// for seconds `from..until` of the capture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Down {
    /// The endpoint address.
    pub address: IpAddr,
    /// The first second it fails in.
    pub from: u32,
    /// The second it passes again from, if any.
    pub until: Option<u32>,
}

impl Down {
    /// Whether this window says `address` fails in second `second`.
    pub fn covers(&self, address: IpAddr, second: u32) -> bool {
        self.address == address && second >= self.from && self.until.is_none_or(|u| second < u)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64, what: Change) -> Event {
        Event {
            at: Duration::from_millis(ms),
            what,
        }
    }

    #[test]
    fn events_are_in_time_order_ties_in_the_order_given() {
        let (a, b) = (IpAddr::from([10, 0, 0, 1]), IpAddr::from([10, 0, 0, 2]));
        let script = Script::new(
            vec![
                at(2000, Change::Up(a)),
                at(500, Change::Down(a)),
                at(500, Change::Down(b)),
            ],
            Vec::new(),
        );
        let order: Vec<_> = script
            .events()
            .iter()
            .map(|e| (e.at.as_millis(), format!("{:?}", e.what)))
            .collect();
        assert_eq!(
            order,
            [
                (500, format!("{:?}", Change::Down(a))),
                (500, format!("{:?}", Change::Down(b))),
                (2000, format!("{:?}", Change::Up(a))),
            ]
        );
    }

    #[test]
    fn a_down_window_covers_from_its_first_second_until_its_last() {
        let a = IpAddr::from([10, 0, 0, 1]);
        let window = Down {
            address: a,
            from: 5,
            until: Some(20),
        };
        assert!(!window.covers(a, 4));
        assert!(window.covers(a, 5));
        assert!(window.covers(a, 19));
        assert!(!window.covers(a, 20));
        assert!(!window.covers(IpAddr::from([10, 0, 0, 2]), 10));
        let open = Down {
            until: None,
            ..window
        };
        assert!(open.covers(a, u32::MAX));
    }
}
