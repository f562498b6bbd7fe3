//! The core's side of VRRP (`[[vrrp]]`, [`crate::vrrp`]): the groups made
//! from the configuration and this node's ports, the advertisements the data
//! plane hands over in, the groups' timers each tick; advertisements and
//! gratuitous announcements out as frames for a worker to send
//! ([`Output::Transmit`]); the VIPs of groups this node is not master of
//! left out of the snapshot.

use std::net::IpAddr;
use std::time::Duration;

use config::Compiled;
use dataplane::Local;

use super::{Core, Output, say};
use crate::vrrp::{Action, Fitness, GroupSpec, State, Vrrp};

/// The groups of `compiled` on this node's ports (`local`'s MACs).
pub(super) fn vrrp_specs(compiled: &Compiled, local: &Local) -> Vec<GroupSpec> {
    let ports = &compiled.settings.ports;
    compiled
        .settings
        .vrrp
        .iter()
        .filter_map(|g| {
            let port = ports.iter().position(|p| p.name == g.port)?;
            let mac = local.port_macs.get(port).copied().unwrap_or(local.mac);
            let v4 = g.vips.first().is_none_or(IpAddr::is_ipv4);
            let src = if v4 {
                ports
                    .get(port)?
                    .addresses
                    .iter()
                    .map(|a| a.addr)
                    .find(IpAddr::is_ipv4)?
            } else {
                IpAddr::V6(wire::vrrp::link_local(mac))
            };
            let mut vips = g.vips.clone();
            vips.sort_unstable();
            vips.dedup();
            let cs = g.advert_interval.0.as_millis() / 10;
            Some(GroupSpec {
                vrid: g.vrid,
                port,
                priority: g.priority,
                interval_cs: u16::try_from(cs).unwrap_or(wire::vrrp::MAX_INTERVAL_CS),
                preempt: g.preempt,
                vips,
                src,
                mac,
                peers: g.peers.clone(),
            })
        })
        .collect()
}

impl Core {
    /// The VRRP groups (status, metrics).
    pub fn vrrp(&self) -> &Vrrp {
        &self.vrrp
    }

    /// Input: VRRP advertisements the data plane handed over since the
    /// last tick, as (port, frame). A group that changes state
    /// republishes the snapshot at once.
    pub fn vrrp_frames(&mut self, now: Duration, frames: Vec<(usize, Vec<u8>)>) {
        self.advance(now);
        let before = self.vrrp_states();
        let mut acts = Vec::new();
        for (port, frame) in frames {
            if let Err(why) = self.vrrp.frame(self.now, port, &frame, &mut acts) {
                // Counted; logged at debug level only: a hostile segment
                // must not flood the log.
                say!(
                    self.out,
                    Debug,
                    "vrrp: advertisement on port {port} refused ({})",
                    why.label()
                );
            }
        }
        self.vrrp_act(acts);
        if self.vrrp_changed(&before) {
            self.vrrp_publish();
        }
    }

    /// The groups' timers at the core's time; whether the VIPs served
    /// changed (the caller republishes).
    pub(super) fn vrrp_tick(&mut self) -> bool {
        if self.vrrp.groups().is_empty() {
            return false;
        }
        let before = self.vrrp_states();
        let fitness = Fitness {
            drained: self.node_drained(),
            shutting_down: self.shutting_down(),
        };
        let health = self.balance.child_states(&self.compiled);
        let compiled = self.compiled.clone();
        let unhealthy = |vips: &[IpAddr]| {
            let mut on = compiled
                .children
                .iter()
                .zip(&health)
                .filter(|(ch, _)| vips.contains(&ch.vip))
                .peekable();
            on.peek().is_some() && on.all(|(_, h)| *h == health::Aggregate::Unhealthy)
        };
        let mut acts = Vec::new();
        self.vrrp.tick(self.now, fitness, unhealthy, &mut acts);
        self.vrrp_act(acts);
        self.vrrp_changed(&before)
    }

    fn vrrp_states(&self) -> Vec<State> {
        self.vrrp.groups().iter().map(|g| g.state()).collect()
    }

    /// Logs each group's change of state; whether any changed. A group
    /// that is no longer master stops announcing its VIPs: what is left of
    /// its takeover's announcements ([neighbours] announce_count, one
    /// announce_interval apart) would move the neighbour caches back to a
    /// node that now drops the VIPs' packets (vrrp_backup).
    fn vrrp_changed(&mut self, before: &[State]) -> bool {
        let mut changed = false;
        let mut silenced = Vec::new();
        for (g, was) in self.vrrp.groups().iter().zip(before) {
            if g.state() == *was {
                continue;
            }
            changed = true;
            if *was == State::Master {
                silenced.extend(g.spec().vips.iter().map(|&v| (g.spec().port, v)));
            }
            let why = match (g.state(), g.master()) {
                (State::Master, _) => "no higher-priority master heard".to_owned(),
                (State::Backup, Some(m)) => format!("master is {m}"),
                (State::Backup, None) if g.unfit() => {
                    "resigned: this node is drained or its rules are unhealthy".to_owned()
                }
                (State::Backup, None) => "waiting for a master".to_owned(),
                (State::Initialize, _) => "shutting down".to_owned(),
            };
            say!(
                self.out,
                Info,
                "vrrp {}: {} -> {} ({why}); VIPs {}",
                g.spec().name(),
                was.name(),
                g.state().name(),
                g.spec()
                    .vips
                    .iter()
                    .map(IpAddr::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        for (port, vip) in silenced {
            self.announcer.announce(self.now, 0, port, vip);
        }
        changed
    }

    /// The groups' actions as frames to send and announcements.
    fn vrrp_act(&mut self, acts: Vec<(usize, Action)>) {
        for (i, a) in acts {
            let Some(g) = self.vrrp.groups().get(i) else {
                continue;
            };
            let port = g.spec().port;
            match a {
                Action::Advertise(priority) => {
                    if let Some(frame) = self.vrrp.advert(i, priority) {
                        self.out.push(Output::Transmit { port, frame });
                    }
                }
                Action::Announce => {
                    let count = self.compiled.settings.neighbours.announce_count.max(1);
                    for vip in g.spec().vips.clone() {
                        self.announcer.announce(self.now, count, port, vip);
                    }
                }
            }
        }
    }

    /// The served VIPs changed: the snapshot follows.
    pub(super) fn vrrp_publish(&mut self) {
        if let Err(e) = self.publish() {
            say!(self.out, Error, "rebuilding the snapshot: {e}");
        }
    }

    /// The groups of the running configuration, keeping the state of those
    /// that stay (a reload).
    pub(super) fn vrrp_reconfigure(&mut self) {
        let specs = vrrp_specs(&self.compiled, &self.local);
        let old = std::mem::take(&mut self.vrrp);
        let served = old.served();
        self.vrrp = Vrrp::new(specs, self.now, Some(old));
        // A master given more VIPs by the reload announces the new ones.
        let count = self.compiled.settings.neighbours.announce_count.max(1);
        for (port, vip) in self.vrrp.served() {
            if !served.contains(&(port, vip)) {
                self.announcer.announce(self.now, count, port, vip);
            }
        }
    }
}
