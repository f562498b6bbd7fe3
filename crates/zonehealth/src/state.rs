//! What the probes concluded, and what should be published: the pure
//! decisions of the zone health service, apart from sockets and clocks.
//!
//! A VIP is unknown until its first probe succeeds (healthy) or
//! `unhealthy_threshold` fail in a row (unhealthy); then it changes state
//! after the threshold's worth of results in a row against it (`health`'s
//! `Tracker`, as the daemon's endpoints). A zone is
//! healthy while every VIP of it is. What is published:
//! - the VIPs of the healthy zones not removed by an operator;
//! - if none is healthy, every not-removed zone's VIPs (fail-open: DNS
//!   cannot do better than let clients try, and one zone coming back makes
//!   the set shrink to it again);
//! - nothing is decided while no zone is healthy and some are still
//!   unknown, nor at start before every zone is known: a restarted service
//!   never withdraws records on half a picture.

use std::collections::BTreeSet;
use std::net::IpAddr;

use health::{State, Tracker};

use crate::config::{ProbeSettings, ZoneSpec};

/// A VIP's (or zone's) state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    /// Not enough results yet.
    Unknown,
    /// Answering.
    Healthy,
    /// Not answering.
    Unhealthy,
}

impl Health {
    /// Its name in status.
    pub fn name(self) -> &'static str {
        match self {
            Health::Unknown => "unknown",
            Health::Healthy => "healthy",
            Health::Unhealthy => "unhealthy",
        }
    }
}

/// One VIP's probe history: its state from `health`'s [`Tracker`] (the
/// daemon's endpoints' rules, M16), except that the first success of an
/// unknown VIP is enough — nothing is decided on half a picture anyway
/// ([`Zones::plan`]), and a restarted service should know its zones in one
/// round of probes.
#[derive(Debug, Clone)]
pub struct VipHealth {
    /// The VIP.
    pub addr: IpAddr,
    /// Its state.
    pub state: Health,
    /// The last result, for people ("ok", or why not).
    pub last: String,
    /// Probes done.
    pub probes: u64,
    tracker: Tracker,
}

impl VipHealth {
    fn new(addr: IpAddr, p: &ProbeSettings) -> VipHealth {
        VipHealth {
            addr,
            state: Health::Unknown,
            last: "not probed yet".to_owned(),
            probes: 0,
            tracker: Tracker::new(p.healthy_threshold, p.unhealthy_threshold)
                .first_success_decides(),
        }
    }

    /// Takes one probe result; whether the state changed.
    pub fn record(&mut self, ok: bool, what: String) -> bool {
        self.probes += 1;
        self.last = what;
        let changed = self.tracker.record(ok).is_some();
        self.state = match self.tracker.state() {
            State::Unknown => Health::Unknown,
            State::Healthy => Health::Healthy,
            State::Unhealthy => Health::Unhealthy,
        };
        changed
    }

    /// Forgets its history.
    fn restart(&mut self) {
        self.state = Health::Unknown;
        self.last = "not probed yet".to_owned();
        self.probes = 0;
        self.tracker.restart();
    }
}

/// One zone's state.
#[derive(Debug, Clone)]
pub struct ZoneHealth {
    /// Name.
    pub name: String,
    /// Its VIPs.
    pub vips: Vec<VipHealth>,
}

impl ZoneHealth {
    /// Healthy while every VIP is; unhealthy as soon as one is.
    pub fn state(&self) -> Health {
        if self.vips.iter().any(|v| v.state == Health::Unhealthy) {
            Health::Unhealthy
        } else if self.vips.iter().any(|v| v.state == Health::Unknown) {
            Health::Unknown
        } else {
            Health::Healthy
        }
    }

    /// Forgets its history (a zone restored after a removal: its probes
    /// stopped, what they said is stale).
    pub fn reset(&mut self) {
        for v in &mut self.vips {
            v.restart();
        }
    }
}

/// What to publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The address set of the name.
    pub addrs: BTreeSet<IpAddr>,
    /// Whether it is the fail-open set (no zone healthy).
    pub fail_open: bool,
}

/// Every zone's state.
#[derive(Debug, Clone)]
pub struct Zones {
    /// In configuration order.
    pub zones: Vec<ZoneHealth>,
    /// Whether every zone has been known once (decisions may be taken).
    settled: bool,
}

impl Zones {
    /// Every VIP unknown, judged by `probe`'s thresholds.
    pub fn new(specs: &[ZoneSpec], probe: &ProbeSettings) -> Zones {
        Zones {
            zones: specs
                .iter()
                .map(|z| ZoneHealth {
                    name: z.name.clone(),
                    vips: z.vips.iter().map(|&a| VipHealth::new(a, probe)).collect(),
                })
                .collect(),
            settled: false,
        }
    }

    /// The zone named `name`.
    pub fn zone_mut(&mut self, name: &str) -> Option<&mut ZoneHealth> {
        self.zones.iter_mut().find(|z| z.name == name)
    }

    /// What to publish given the zones `removed`; `None`: not decidable yet
    /// (keep what the server holds).
    pub fn plan(&mut self, removed: &BTreeSet<String>) -> Option<Plan> {
        let candidates: Vec<&ZoneHealth> = self
            .zones
            .iter()
            .filter(|z| !removed.contains(&z.name))
            .collect();
        let unknown = candidates.iter().any(|z| z.state() == Health::Unknown);
        let healthy: Vec<&ZoneHealth> = candidates
            .iter()
            .copied()
            .filter(|z| z.state() == Health::Healthy)
            .collect();
        if unknown && (!self.settled || healthy.is_empty()) {
            return None;
        }
        self.settled = true;
        let addrs_of = |zs: &[&ZoneHealth]| -> BTreeSet<IpAddr> {
            zs.iter()
                .flat_map(|z| z.vips.iter().map(|v| v.addr))
                .collect()
        };
        Some(if healthy.is_empty() && !candidates.is_empty() {
            Plan {
                addrs: addrs_of(&candidates),
                fail_open: true,
            }
        } else {
            Plan {
                addrs: addrs_of(&healthy),
                fail_open: false,
            }
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::time::Duration;

    fn probe() -> ProbeSettings {
        ProbeSettings {
            interval: Duration::from_secs(1),
            timeout: Duration::from_millis(500),
            unhealthy_threshold: 3,
            healthy_threshold: 2,
            icmp: true,
            kind: crate::config::PortProbe::Tcp,
            path: "/".into(),
            host: None,
        }
    }

    fn zones() -> Zones {
        Zones::new(
            &[
                ZoneSpec {
                    name: "a".into(),
                    vips: vec!["198.18.10.20".parse().unwrap()],
                    port: Some(80),
                },
                ZoneSpec {
                    name: "b".into(),
                    vips: vec![
                        "198.18.10.21".parse().unwrap(),
                        "2001:db8::21".parse().unwrap(),
                    ],
                    port: Some(80),
                },
            ],
            &probe(),
        )
    }

    fn feed(z: &mut Zones, zone: usize, ok: bool, times: usize) {
        for _ in 0..times {
            for v in &mut z.zones[zone].vips {
                v.record(ok, if ok { "ok" } else { "timeout" }.into());
            }
        }
    }

    fn addrs(p: &Plan) -> Vec<String> {
        p.addrs.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn thresholds() {
        let p = probe();
        let mut v = VipHealth::new("192.0.2.1".parse().unwrap(), &p);
        assert!(!v.record(false, "x".into()));
        assert!(!v.record(false, "x".into()));
        assert!(v.record(false, "x".into()), "third failure: unhealthy");
        assert_eq!(v.state, Health::Unhealthy);
        assert!(!v.record(true, "ok".into()));
        assert!(!v.record(false, "x".into()), "a run broken");
        assert!(!v.record(true, "ok".into()));
        assert!(v.record(true, "ok".into()), "two successes in a row");
        assert!(!v.record(false, "x".into()));
        assert!(!v.record(false, "x".into()));
        assert_eq!(v.state, Health::Healthy);
    }

    #[test]
    fn nothing_is_decided_on_half_a_picture() {
        let mut z = zones();
        let none = BTreeSet::new();
        feed(&mut z, 0, true, 1);
        assert_eq!(z.plan(&none), None, "b unknown at start");
        feed(&mut z, 1, true, 1);
        let p = z.plan(&none).unwrap();
        assert_eq!(addrs(&p), ["198.18.10.20", "198.18.10.21", "2001:db8::21"]);
        assert!(!p.fail_open);
    }

    #[test]
    fn failover_fail_open_and_recovery_one_by_one() {
        let mut z = zones();
        let none = BTreeSet::new();
        feed(&mut z, 0, true, 1);
        feed(&mut z, 1, true, 1);
        feed(&mut z, 1, false, 3);
        assert_eq!(addrs(&z.plan(&none).unwrap()), ["198.18.10.20"]);
        feed(&mut z, 0, false, 3);
        let p = z.plan(&none).unwrap();
        assert!(p.fail_open);
        assert_eq!(p.addrs.len(), 3, "every zone's records restored");
        feed(&mut z, 1, true, 2);
        let p = z.plan(&none).unwrap();
        assert_eq!(
            (addrs(&p), p.fail_open),
            (
                vec!["198.18.10.21".to_string(), "2001:db8::21".to_string()],
                false
            )
        );
    }

    #[test]
    fn a_removed_zone_is_never_published_not_even_by_fail_open() {
        let mut z = zones();
        feed(&mut z, 0, true, 1);
        feed(&mut z, 1, true, 1);
        let removed: BTreeSet<String> = ["a".to_string()].into();
        assert_eq!(
            addrs(&z.plan(&removed).unwrap()),
            ["198.18.10.21", "2001:db8::21"]
        );
        feed(&mut z, 1, false, 3);
        let p = z.plan(&removed).unwrap();
        assert!(p.fail_open);
        assert_eq!(addrs(&p), ["198.18.10.21", "2001:db8::21"]);
        let all: BTreeSet<String> = ["a".to_string(), "b".to_string()].into();
        assert!(z.plan(&all).unwrap().addrs.is_empty());
        // Restored: its history is gone; it returns with its first success.
        z.zone_mut("a").unwrap().reset();
        assert_eq!(z.plan(&BTreeSet::new()), None, "b down, a unknown: wait");
        feed(&mut z, 0, true, 1);
        assert_eq!(addrs(&z.plan(&BTreeSet::new()).unwrap()), ["198.18.10.20"]);
    }
}
