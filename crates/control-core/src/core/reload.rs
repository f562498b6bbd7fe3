//! Reloads: a configuration loaded (by an operator's reload or the file
//! watch) is validated against the running one, guarded against what
//! looks like an accident ([`destructive_change`], and for the watch
//! [`watch_refusal`]), and made live, or refused with the running
//! configuration kept; and what the core counts of them.

use std::sync::Arc;
use std::time::Duration;

use config::Compiled;

use super::{Core, Output, Probes, Published, ReloadError, announced, next_hops, say};
use crate::neighbours::Timings;

impl Core {
    /// A configuration was read (or could not be). Validates it against
    /// the running one and, if it may go live, publishes a snapshot built
    /// from it. Returns what became of it (live, or waiting for large
    /// Maglev tables), or every error (the running configuration stays).
    /// With `force`, also a configuration that [`destructive_change`] would
    /// refuse (`spillway reload --force`). From the file watch (`watch`),
    /// not a file that [`watch_refusal`] refuses.
    pub(super) fn config_loaded(
        &mut self,
        loaded: Result<config::Loaded, String>,
        force: bool,
        watch: bool,
        probes: &mut dyn Probes,
    ) -> Result<Published, ReloadError> {
        let loaded = match loaded {
            Ok(l) => l,
            Err(e) => return Err(self.reload_failed(ReloadError::Load(e))),
        };
        if watch
            && let Some(running) = &self.outline
            && let Some(why) = watch_refusal(running, &loaded.outline)
        {
            self.watch_refused += 1;
            return Err(self.reload_failed(ReloadError::WatchRefused {
                file: self.path.display().to_string(),
                why,
            }));
        }
        if let Some(why) = destructive_change(&self.compiled, &loaded.compiled) {
            if !force {
                return Err(self.reload_failed(ReloadError::Destructive {
                    file: self.path.display().to_string(),
                    why,
                }));
            }
            say!(self.out, Warn, "reload forced although {why}");
        }
        let restart_needed = settings_needing_restart(&self.compiled, &loaded.compiled);
        let compiled = Arc::new(loaded.compiled);
        if let Err(e) = self
            .balance
            .reload(&compiled, self.now, probes, &mut self.out)
        {
            // Health checks the prober refuses: the whole reload is refused.
            if let Err(h) = self
                .balance
                .reload(&self.compiled, self.now, probes, &mut self.out)
            {
                say!(self.out, Error, "health checks: {h}");
            }
            return Err(self.reload_failed(ReloadError::Health(e.to_string())));
        }
        let previous = std::mem::replace(&mut self.compiled, compiled.clone());
        self.vrrp_reconfigure();
        self.neighbours.set_hops(
            Timings::from_config(&compiled.settings.neighbours),
            &next_hops(&compiled),
            self.now,
        );
        self.neighbours_changed();
        match self.publish() {
            Ok(published) => {
                // Addresses served from now on (new VIPs, or those of an
                // availability group this node took over) are announced.
                let old = announced(&previous);
                for (port, addr) in announced(&compiled) {
                    if !old.contains(&(port, addr)) {
                        self.announcer.announce(
                            self.now,
                            compiled.settings.neighbours.announce_count,
                            port,
                            addr,
                        );
                    }
                }
                self.out
                    .push(Output::Watch(compiled.settings.control.watch_config));
                self.outline = Some(loaded.outline);
                self.reloads_ok += 1;
                self.last_error = None;
                self.last_reload = Some(self.now);
                // A changed composite source is UNKNOWN from now (M20).
                self.track_states();
                for w in &loaded.warnings {
                    say!(self.out, Warn, "{}: {w}", self.path.display());
                }
                if let Some(what) = restart_needed {
                    say!(
                        self.out,
                        Warn,
                        "reload: {what} changed; that takes effect at the next restart"
                    );
                }
                Ok(published)
            }
            Err(e) => {
                // The new configuration did not go live: health, locality
                // and next hops follow the running one again.
                self.compiled = previous;
                self.vrrp_reconfigure();
                self.neighbours.set_hops(
                    Timings::from_config(&self.compiled.settings.neighbours),
                    &next_hops(&self.compiled),
                    self.now,
                );
                self.neighbours_changed();
                if let Err(h) = self
                    .balance
                    .reload(&self.compiled, self.now, probes, &mut self.out)
                {
                    say!(self.out, Error, "health checks: {h}");
                }
                Err(self.reload_failed(ReloadError::Snapshot(e)))
            }
        }
    }

    fn reload_failed(&mut self, e: ReloadError) -> ReloadError {
        self.reloads_failed += 1;
        self.last_reload = Some(self.now);
        say!(
            self.out,
            Error,
            "reload rejected; the running configuration stays:\n{e}"
        );
        self.last_error = Some(e.to_string());
        e
    }

    /// When (core time) the last reload was accepted or refused.
    pub fn last_reload(&self) -> Option<Duration> {
        self.last_reload
    }

    /// What the file the running configuration came from defines (the
    /// shell reads the file at start; every accepted reload sets it after).
    pub fn set_outline(&mut self, outline: config::Outline) {
        self.outline = Some(outline);
    }

    /// File changes the watch did not apply (also counted as rejected
    /// reloads).
    pub fn watch_refused(&self) -> u64 {
        self.watch_refused
    }

    /// Reloads accepted and refused, and the last refusal's reason.
    pub fn reloads(&self) -> (u64, u64, Option<&str>) {
        (
            self.reloads_ok,
            self.reloads_failed,
            self.last_error.as_deref(),
        )
    }
}

/// Why replacing `old` by `new` looks like an accident rather than an edit
/// (M38): it removes every forwarding rule, or more than half of the
/// VIPs this node serves. `None` when the change may go live unforced.
pub fn destructive_change(old: &Compiled, new: &Compiled) -> Option<String> {
    if new.rules.is_empty() && !old.rules.is_empty() {
        return Some(format!(
            "the new configuration has no forwarding rules (the running one has {})",
            old.rules.len()
        ));
    }
    let served = |c: &Compiled| -> Vec<config::values::Vip> {
        let mut v: Vec<_> = c
            .children
            .iter()
            .filter(|ch| ch.served)
            .map(config::compiled::ChildRule::vip_spec)
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    };
    // M5: a VIP allocated from a pool moves only when forced: clients and
    // DNS know it, and the file does not show it.
    let moved: Vec<String> = old
        .children
        .iter()
        .filter(|o| o.allocated)
        .filter_map(|o| {
            let n = new.children.iter().find(|n| n.name == o.name)?;
            (n.vip != o.vip)
                .then(|| format!("{} from {} to {}", o.name, o.vip_spec(), n.vip_spec()))
        })
        .collect();
    if !moved.is_empty() {
        return Some(format!(
            "it would move VIPs allocated from a vip_pool: {} (write the VIP into the rule to keep it)",
            moved.join(", ")
        ));
    }
    let (before, after) = (served(old), served(new));
    let gone: Vec<String> = before
        .iter()
        .filter(|v| after.binary_search(v).is_err())
        .map(ToString::to_string)
        .collect();
    if gone.len() * 2 > before.len() {
        const SHOWN: usize = 8;
        let mut list = gone
            .iter()
            .take(SHOWN)
            .cloned()
            .collect::<Vec<_>>()
            .join(", ");
        if gone.len() > SHOWN {
            list += &format!(" and {} more", gone.len() - SHOWN);
        }
        return Some(format!(
            "it would stop serving {} of the {} VIPs this node serves ({list})",
            gone.len(),
            before.len()
        ));
    }
    None
}

/// Why the file watch does not apply a changed file on its own (M38): it
/// is the running file cut short (a strict prefix of its text), or it
/// removes a section or key the running file has (a section, a service,
/// a group, a health check, a setting; [`config::Outline`]). A file cut
/// short at a line boundary is often a valid configuration whose missing
/// sections fall back to their defaults: an unasked reload must not take
/// it for an edit. `None` when the watch may apply it (the reload guard,
/// [`destructive_change`], still applies).
pub fn watch_refusal(running: &config::Outline, new: &config::Outline) -> Option<String> {
    if running.truncated_in(new) {
        return Some("it is the running file cut short".to_owned());
    }
    let removed = running.removed_in(new);
    if removed.is_empty() {
        return None;
    }
    const SHOWN: usize = 8;
    let mut list = removed
        .iter()
        .take(SHOWN)
        .copied()
        .collect::<Vec<_>>()
        .join(", ");
    if removed.len() > SHOWN {
        list += &format!(" and {} more", removed.len() - SHOWN);
    }
    Some(format!("it removes what the running file sets: {list}"))
}

/// Settings a reload cannot change in a running process (cores, ports, EAL).
fn settings_needing_restart(old: &Compiled, new: &Compiled) -> Option<&'static str> {
    let (a, b) = (&old.settings.dataplane, &new.settings.dataplane);
    if a.eal_args != b.eal_args {
        Some("[dataplane].eal_args")
    } else if a.worker_cores != b.worker_cores || a.management_core != b.management_core {
        Some("[dataplane] cores")
    } else if a.flow_table_capacity != b.flow_table_capacity || a.mbufs != b.mbufs {
        Some("[dataplane] sizes")
    } else if a.timeouts != b.timeouts {
        // The flow table is made with them (new_flow_budget, read from each
        // snapshot, applies at once).
        Some("[dataplane.timeouts]")
    } else if old.settings.ports.len() != new.settings.ports.len()
        || old
            .settings
            .ports
            .iter()
            .zip(&new.settings.ports)
            .any(|(x, y)| x.device != y.device)
        // Workers route host traffic by the exception ports they started with.
        || old.settings.exception_for != new.settings.exception_for
    {
        Some("[[ports]]")
    } else if listeners_differ(old, new) {
        Some("[metrics] or [control] listener settings")
    } else if old.settings.flow_sync != new.settings.flow_sync
        || old.settings.flow_sync_key != new.settings.flow_sync_key
    {
        // The sync socket, peers and key are set up once, at start.
        Some("[flow_sync]")
    } else {
        None
    }
}

/// The listeners are set up once, at start.
fn listeners_differ(old: &Compiled, new: &Compiled) -> bool {
    let (a, b) = (&old.settings.metrics, &new.settings.metrics);
    let (c, d) = (&old.settings.control, &new.settings.control);
    a.listen != b.listen
        || a.allow != b.allow
        || a.max_connections != b.max_connections
        || a.per_client() != b.per_client()
        || a.timeout != b.timeout
        || c.socket != d.socket
        || c.socket_group != d.socket_group
        || c.max_connections != d.max_connections
        || c.timeout != d.timeout
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use dataplane::Local;

    use super::*;

    /// A node serving `vips` (one TCP rule each), availability group `ag`.
    fn serving(vips: &[&str], ag: Option<u8>) -> Compiled {
        let mut text = String::from("[node]\nname = \"n\"\nregion = \"r\"\nzone = \"z\"\n");
        if let Some(g) = ag {
            text += &format!("availability_group = {g}\n");
        }
        text += "\n[[backend_services]]\nname = \"s\"\ndelivery = \"ipip\"\ngroups = [{ name = \"g\", region = \"r\", zone = \"z\", endpoints = [{ address = \"10.1.0.1\" }] }]\n";
        for (i, v) in vips.iter().enumerate() {
            text += &format!(
                "\n[[forwarding_rules]]\nname = \"r{i}\"\nvips = [{v}]\nprotocol = \"TCP\"\nports = 80\nbackend_service = \"s\"\n"
            );
        }
        match config::load_str("t.toml", &text, &config::Env::default()) {
            Ok(l) => l.compiled,
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn reloads_that_remove_every_rule_or_most_vips_are_refused() {
        let four = serving(
            &[
                "\"10.0.0.1\"",
                "\"10.0.0.2\"",
                "\"10.0.0.3\"",
                "\"10.0.0.4\"",
            ],
            None,
        );
        let none = serving(&[], None);
        let why = destructive_change(&four, &none).expect("refused");
        assert!(why.contains("no forwarding rules"), "{why}");
        // Half of the VIPs may go; more than half may not.
        let two = serving(&["\"10.0.0.1\"", "\"10.0.0.2\""], None);
        assert_eq!(destructive_change(&four, &two), None);
        let one = serving(&["\"10.0.0.1\""], None);
        let why = destructive_change(&four, &one).expect("refused");
        assert!(
            why.contains("3 of the 4 VIPs") && why.contains("10.0.0.4"),
            "{why}"
        );
        // Rules that move to other VIPs count as removals of the old ones.
        let moved = serving(
            &[
                "\"10.0.9.1\"",
                "\"10.0.9.2\"",
                "\"10.0.0.3\"",
                "\"10.0.0.4\"",
            ],
            None,
        );
        assert_eq!(destructive_change(&four, &moved), None);
        let moved3 = serving(
            &[
                "\"10.0.9.1\"",
                "\"10.0.9.2\"",
                "\"10.0.9.3\"",
                "\"10.0.0.4\"",
            ],
            None,
        );
        assert!(destructive_change(&four, &moved3).is_some());
        // Growing, and starting from nothing, are always fine.
        assert_eq!(destructive_change(&two, &four), None);
        assert_eq!(destructive_change(&none, &four), None);
        assert_eq!(destructive_change(&none, &none), None);
        // Only served VIPs count: a node of group 0 does not serve AG1's VIP.
        let ag0 = serving(&["\"10.0.0.1\", \"10.0.1.1\""], Some(0));
        let ag0_other = serving(&["\"10.0.0.1\", \"10.0.1.9\""], Some(0));
        assert_eq!(destructive_change(&ag0, &ag0_other), None);
    }

    /// M38, issue 38 item 7: a file change the watch reads is applied if
    /// it removes nothing the running file sets; the running file cut
    /// short, or a change removing a section, is refused, counted and
    /// applied only by an operator's reload.
    #[test]
    fn the_watch_applies_edits_and_leaves_removals_to_an_operator() {
        let base = "[node]\nname = \"n\"\nregion = \"r\"\nzone = \"z\"\n\n\
            [[backend_services]]\nname = \"s\"\ndelivery = \"ipip\"\nhealth_check = \"hc\"\ngroups = [{ name = \"g\", region = \"r\", zone = \"z\", endpoints = [{ address = \"10.1.0.1\", port = 80 }] }]\n\n\
            [[forwarding_rules]]\nname = \"r\"\nvips = [\"10.0.0.1\"]\nprotocol = \"TCP\"\nports = 80\nbackend_service = \"s\"\n\n\
            [[health_checks]]\nname = \"hc\"\ntype = \"HTTP\"\n";
        let full = format!("{base}path = \"/healthz\"\n\n[metrics]\nlisten = \"127.0.0.1:9999\"\n");
        let load = |t: &str| match config::load_str("t.toml", t, &config::Env::default()) {
            Ok(l) => l,
            Err(e) => panic!("{e}"),
        };
        let running = load(&full);
        let mut probes = crate::scripted::ScriptedProbes::new(crate::scripted::State::Healthy);
        let mut core = match Core::start(
            Path::new("t.toml"),
            running.compiled.clone(),
            Local::default(),
            dataplane::CookieKey::fixed(1, 0),
            Duration::ZERO,
            &mut probes,
        ) {
            Ok(c) => c,
            Err(e) => panic!("{e}"),
        };
        core.set_outline(running.outline.clone());
        let now = Duration::from_secs(1);
        let watch = |core: &mut Core, probes: &mut crate::scripted::ScriptedProbes, text: &str| {
            core.file_changed(now, Ok(load(text)), probes)
                .map_err(|e| e.to_string())
        };
        // Cut short after the health check's type: valid (its path falls
        // back to "/"), and [metrics] gone.
        let e = watch(&mut core, &mut probes, base).expect_err("the file cut short");
        assert!(
            e.contains("does not apply it: it is the running file cut short"),
            "{e}"
        );
        // Removing the path only (not a truncation): refused too.
        let e = watch(
            &mut core,
            &mut probes,
            &full.replace("path = \"/healthz\"\n", ""),
        )
        .expect_err("a removal");
        assert!(
            e.contains("it removes what the running file sets: health_checks[hc].path"),
            "{e}"
        );
        assert_eq!(
            (core.watch_refused(), core.reloads().0, core.reloads().1),
            (2, 0, 2)
        );
        assert_eq!(core.live().generation, 1, "the running configuration stays");
        // An edit that removes nothing goes live.
        let edited = full.replace("/healthz", "/ready");
        assert!(matches!(
            watch(&mut core, &mut probes, &edited),
            Ok(Published::Live(_))
        ));
        // An operator's reload applies what the watch refused, and the
        // watch compares with that file from then on.
        let r = core.reload(now, Ok(load(base)), false, &mut probes);
        assert!(matches!(r, Ok(Published::Live(_))), "{r:?}");
        assert!(
            matches!(watch(&mut core, &mut probes, &full), Ok(Published::Live(_))),
            "adding back"
        );
        assert_eq!(core.watch_refused(), 2);
    }

    /// M47: the data port an exception port stands for is fixed at start.
    #[test]
    fn a_new_for_port_takes_effect_at_the_next_restart() {
        let with = |for_port: &str| {
            let text = format!(
                "[node]\nname = \"n\"\nregion = \"r\"\nzone = \"z\"\n{}",
                [
                    "[[ports]]\nname = \"up\"\ndevice = \"d0\"\nrole = \"uplink\"\n",
                    "[[ports]]\nname = \"be\"\ndevice = \"d1\"\nrole = \"backend\"\n",
                    &format!(
                        "[[ports]]\nname = \"k\"\ndevice = \"t0\"\nrole = \"exception\"\n{for_port}"
                    ),
                ]
                .concat()
            );
            match config::load_str("t.toml", &text, &config::Env::default()) {
                Ok(l) => l.compiled,
                Err(e) => panic!("{e}"),
            }
        };
        let (uplink, backend) = (with(""), with("for_port = \"be\"\n"));
        assert_eq!(
            settings_needing_restart(&uplink, &with("for_port = \"up\"\n")),
            None
        );
        assert_eq!(
            settings_needing_restart(&uplink, &backend),
            Some("[[ports]]")
        );
    }
}
