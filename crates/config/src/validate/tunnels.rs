//! `[tunnel_ingress]`: tunnels to this node's own addresses (M49) — who may
//! send them, which protocols, on which ports.

use std::collections::HashSet;

use super::Checker;
use crate::compiled::url_host;
use crate::schema::GroupKind;

impl Checker<'_> {
    pub(super) fn tunnel_ingress(&mut self) {
        let Some(t) = &self.cfg.tunnel_ingress else {
            self.default_tunnel_sources();
            return;
        };
        if let Some(allow) = &t.allow {
            if allow.is_empty() && t.enabled {
                self.err(
                    "tunnel_ingress.allow",
                    "an empty allow-list accepts no tunnel: set enabled = false to turn tunnelled ingress off, or leave `allow` out for the remote_rule peers",
                );
            }
            for (k, pre) in allow.iter().enumerate() {
                if pre.has_host_bits() {
                    self.err(
                        &format!("tunnel_ingress.allow[{k}]"),
                        format!(
                            "{pre} has bits set beyond /{}: write the network address",
                            pre.len
                        ),
                    );
                }
            }
        } else if t.enabled {
            self.default_tunnel_sources();
        }
        if t.enabled && t.protocols.is_empty() {
            self.err(
                "tunnel_ingress.protocols",
                "no protocol accepts no tunnel: set enabled = false instead",
            );
        }
        let mut seen = HashSet::new();
        for (k, p) in t.protocols.iter().enumerate() {
            if !seen.insert(*p) {
                self.err(
                    &format!("tunnel_ingress.protocols[{k}]"),
                    format!("{p:?} is listed twice"),
                );
            }
        }
        for (field, port) in [("gue_port", t.gue_port), ("geneve_port", t.geneve_port)] {
            if port == 0 {
                self.err(
                    &format!("tunnel_ingress.{field}"),
                    "port 0 is not a port tunnels arrive on",
                );
            }
        }
        if t.gue_port == t.geneve_port {
            self.err(
                "tunnel_ingress.geneve_port",
                format!(
                    "{} is also gue_port: GUE and GENEVE need ports of their own",
                    t.geneve_port
                ),
            );
        }
    }

    /// Without an allow-list the remote_rule peers are the tunnel sources:
    /// a status URL whose host is a name adds none (the data plane resolves
    /// no names), which the operator should know.
    fn default_tunnel_sources(&mut self) {
        for (i, s) in self.cfg.backend_services.iter().enumerate() {
            for (g, group) in s.groups.iter().enumerate() {
                let Some(r) = &group.remote else { continue };
                if group.kind == GroupKind::RemoteRule
                    && r.status_url.starts_with("http")
                    && url_host(&r.status_url).is_none()
                {
                    self.warn(
                        &format!("backend_services[{i}].groups[{g}].remote.status_url"),
                        "its host is a name, not an address: tunnels from it are accepted only if [tunnel_ingress] allow lists its address",
                    );
                }
            }
        }
    }
}
