//! Drain (M37): what the operator took out of service with `spillway
//! drain node|zone|region NAME`, and the text of its state file (the
//! daemon reads and writes the file: `control::drain`).
//!
//! A drained zone or region takes no new connections: locality plans it as
//! if its groups' `capacity_scaler` were 0 (established flows stay, as with
//! a `Draining` backend), so new connections spill to the other zones and
//! regions. A drained node only says so ([`crate::Core::node_drained`]):
//! its announcements are withdrawn, its forwarding is unchanged.
//!
//! The state is kept by name, so that it survives reloads (a name the new
//! configuration lacks is kept and applies again if the name comes back),
//! and the daemon saves it in a small file next to its control socket so that it
//! survives a restart too: a node drained for maintenance must not come
//! back into service because the daemon was restarted during it.

use std::collections::BTreeSet;
use std::fmt;

use config::Compiled;

/// What a drain names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scope {
    /// This balancer node.
    Node,
    /// A zone of the configuration.
    Zone,
    /// A region of the configuration.
    Region,
}

impl Scope {
    /// `node`, `zone`, `region`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Scope::Node => "node",
            Scope::Zone => "zone",
            Scope::Region => "region",
        }
    }

    /// The scope named `s`.
    pub fn parse(s: &str) -> Option<Scope> {
        match s {
            "node" => Some(Scope::Node),
            "zone" => Some(Scope::Zone),
            "region" => Some(Scope::Region),
            _ => None,
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Longest name taken (configuration names are far shorter).
pub const MAX_NAME: usize = 128;

/// Whether `name` can be a node, zone or region name: printable, no
/// spaces, quotes or backslashes (it goes into metrics labels and the state
/// file's lines).
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME
        && name
            .chars()
            .all(|c| c.is_ascii_graphic() && c != '"' && c != '\\')
}

/// The drained node, zones and regions, by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Drained {
    items: BTreeSet<(Scope, String)>,
}

impl Drained {
    /// Nothing drained.
    pub fn new() -> Self {
        Drained::default()
    }

    /// Whether `scope` `name` is drained.
    pub fn contains(&self, scope: Scope, name: &str) -> bool {
        self.items.contains(&(scope, name.to_owned()))
    }

    /// Drains (`on`) or undrains it; whether that changed anything.
    pub fn set(&mut self, scope: Scope, name: &str, on: bool) -> bool {
        if on {
            self.items.insert((scope, name.to_owned()))
        } else {
            self.items.remove(&(scope, name.to_owned()))
        }
    }

    /// Everything drained, by scope then name.
    pub fn iter(&self) -> impl Iterator<Item = (Scope, &str)> {
        self.items.iter().map(|(s, n)| (*s, n.as_str()))
    }

    /// Nothing is drained.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The drained zones and regions of `compiled`, as flags indexed like
    /// `compiled.zones` and `compiled.regions`.
    pub fn groups_of(&self, compiled: &Compiled) -> (Vec<bool>, Vec<bool>) {
        let zones = compiled
            .zones
            .iter()
            .map(|z| self.contains(Scope::Zone, z))
            .collect();
        let regions = compiled
            .regions
            .iter()
            .map(|r| self.contains(Scope::Region, r))
            .collect();
        (zones, regions)
    }

    /// The state file's text: one `scope name` line each.
    pub fn to_text(&self) -> String {
        let mut out = String::from("# spillway drain state (M37); written by the daemon\n");
        for (s, n) in self.iter() {
            out += &format!("{s} {n}\n");
        }
        out
    }

    /// Reads a state file's text. Comments and blank lines are skipped; a
    /// bad line is an error naming it (the daemon then starts with nothing
    /// drained and says so).
    pub fn from_text(text: &str) -> Result<Drained, String> {
        let mut d = Drained::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut words = line.split_whitespace();
            match (
                words.next().and_then(Scope::parse),
                words.next(),
                words.next(),
            ) {
                (Some(s), Some(n), None) if valid_name(n) => {
                    d.set(s, n, true);
                }
                _ => {
                    return Err(format!(
                        "line {}: {line:?} is not `node|zone|region NAME`",
                        i + 1
                    ));
                }
            }
        }
        Ok(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_file_round_trips_and_bad_lines_are_named() {
        let mut d = Drained::new();
        assert!(d.set(Scope::Zone, "eu-1a", true));
        assert!(!d.set(Scope::Zone, "eu-1a", true), "already drained");
        d.set(Scope::Node, "lb1", true);
        d.set(Scope::Region, "eu", true);
        assert_eq!(Drained::from_text(&d.to_text()), Ok(d.clone()));
        assert!(d.set(Scope::Region, "eu", false));
        assert!(!d.contains(Scope::Region, "eu"));
        assert_eq!(
            Drained::from_text("zone a\n\n# c\nrack r1\n"),
            Err("line 4: \"rack r1\" is not `node|zone|region NAME`".to_owned())
        );
        assert!(Drained::from_text("zone a b\n").is_err());
        assert!(Drained::from_text("zone \"a\n").is_err());
    }
}
