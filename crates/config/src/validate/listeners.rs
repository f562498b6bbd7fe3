//! `[control]` and `[metrics]`: the management listeners, their limits and who
//! may reach them (M50).

use super::{Checker, MAX_LISTENER_CONNECTIONS, MAX_LISTENER_TIMEOUT, join};

impl Checker<'_> {
    pub(super) fn control(&mut self) {
        if !self.cfg.control.socket.is_absolute() {
            self.err(
                "control.socket",
                format!(
                    "{} is not an absolute path",
                    self.cfg.control.socket.display()
                ),
            );
        }
        if let Some(g) = &self.cfg.control.socket_group
            && (g.is_empty() || g.chars().any(|c| c.is_whitespace() || c.is_control()))
        {
            self.err("control.socket_group", format!("{g:?} is not a group name"));
        }
        let m = &self.cfg.metrics;
        if m.listen.port() == 0 {
            self.err("metrics.listen", "port 0 is not a port to listen on");
        }
        match &m.allow {
            Some(allow) if allow.is_empty() => self.err(
                "metrics.allow",
                "an empty allow-list admits nobody: leave `allow` out to admit every address",
            ),
            Some(allow) => {
                for (k, pre) in allow.iter().enumerate() {
                    if pre.has_host_bits() {
                        self.err(
                            &format!("metrics.allow[{k}]"),
                            format!(
                                "{pre} has bits set beyond /{}: write the network address",
                                pre.len
                            ),
                        );
                    }
                }
            }
            None => {}
        }
        // M50: /status and /metrics tell anyone who can reach them the
        // node's rules, backends and traffic.
        if !m.listen.ip().to_canonical().is_loopback() {
            let who = match &m.allow {
                Some(allow) => format!("clients in {}", join(allow)),
                None => "any address (set [metrics] allow to narrow it)".to_owned(),
            };
            self.warn(
                "metrics.listen",
                format!(
                    "{} is not a loopback address: /status and /metrics are served to {who}",
                    m.listen
                ),
            );
        }
        for (section, max, timeout) in [
            ("metrics", m.max_connections, m.timeout),
            (
                "control",
                self.cfg.control.max_connections,
                self.cfg.control.timeout,
            ),
        ] {
            if !(1..=MAX_LISTENER_CONNECTIONS).contains(&max) {
                self.err(
                    &format!("{section}.max_connections"),
                    format!("{max}: expected 1-{MAX_LISTENER_CONNECTIONS}"),
                );
            }
            if timeout.is_zero() || timeout.0 > MAX_LISTENER_TIMEOUT {
                self.err(
                    &format!("{section}.timeout"),
                    format!(
                        "{timeout}: expected more than 0s and at most {}s",
                        MAX_LISTENER_TIMEOUT.as_secs()
                    ),
                );
            }
        }
        // One client may hold at most this many of the HTTP slots: what is
        // left is what other clients (other nodes polling /status) keep.
        match m.max_connections_per_client {
            Some(n) if n == 0 || n > m.max_connections => self.err(
                "metrics.max_connections_per_client",
                format!(
                    "{n}: expected 1-{} (at most max_connections)",
                    m.max_connections
                ),
            ),
            set if m.max_connections > 1 && m.per_client() >= m.max_connections => self.warn(
                if set.is_some() {
                    "metrics.max_connections_per_client"
                } else {
                    "metrics.max_connections"
                },
                format!(
                    "max_connections_per_client {} of max_connections {}: one client can hold every slot and keep other nodes from reading /status; set max_connections_per_client below max_connections",
                    m.per_client(),
                    m.max_connections
                ),
            ),
            _ => {}
        }
    }
}
