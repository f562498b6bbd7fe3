//! What a configuration file defines, by path: every section (table) and
//! every key, entries of named arrays of tables (`[[backend_services]]`,
//! `[[health_checks]]`, `[[backend_services.groups]]`, …) by their `name`.
//! The daemon's file watch (M38) applies a changed file unasked only if it
//! removes none of them from the file running, and is no truncation of it:
//! a file cut short by a half-done write or a full disk is still valid
//! TOML when cut at a line boundary, and often a valid configuration, whose
//! sections past the cut silently fall back to their defaults.
//!
//! Arrays of tables whose entries have no `name` (endpoints, client zones,
//! peers) are values, not sections: removing an endpoint is an edit the
//! watch applies like any change of a value.

use std::collections::BTreeSet;
use std::sync::Arc;

use toml::de::{DeTable, DeValue};

/// A file's text and the paths it defines.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outline {
    text: Arc<str>,
    paths: BTreeSet<String>,
}

impl Outline {
    /// The outline of `text`, if it is TOML.
    pub fn of(text: &str) -> Option<Outline> {
        let (root, errors) = DeTable::parse_recoverable(text);
        errors
            .is_empty()
            .then(|| Outline::of_table(text, root.get_ref()))
    }

    /// The outline of `text`, parsed as `root`.
    pub(crate) fn of_table(text: &str, root: &DeTable<'_>) -> Outline {
        let mut paths = BTreeSet::new();
        walk(&mut paths, "", root);
        Outline {
            text: Arc::from(text),
            paths,
        }
    }

    /// The paths this file defines that `new` does not, in order; of a
    /// section removed, the section only (not each of its keys).
    pub fn removed_in<'a>(&'a self, new: &Outline) -> Vec<&'a str> {
        let gone = |p: &str| self.paths.contains(p) && !new.paths.contains(p);
        self.paths
            .iter()
            .map(String::as_str)
            .filter(|p| gone(p))
            .filter(|p| {
                // Not under a removed section: no ancestor path is gone.
                !p.char_indices()
                    .filter(|&(_, c)| c == '.' || c == '[')
                    .any(|(i, _)| gone(&p[..i]))
            })
            .collect()
    }

    /// Whether `new`'s text is this one's cut short (a strict prefix).
    pub fn truncated_in(&self, new: &Outline) -> bool {
        new.text.len() < self.text.len() && self.text.starts_with(&*new.text)
    }

    /// Sections and keys defined.
    pub fn len(&self) -> usize {
        self.paths.len()
    }

    /// Whether the file defines nothing.
    pub fn is_empty(&self) -> bool {
        self.paths.is_empty()
    }
}

fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_owned()
    } else {
        format!("{prefix}.{key}")
    }
}

fn walk(paths: &mut BTreeSet<String>, prefix: &str, t: &DeTable<'_>) {
    for (k, v) in t.iter() {
        let path = join(prefix, k.get_ref());
        match v.get_ref() {
            DeValue::Table(inner) => {
                walk(paths, &path, inner);
            }
            DeValue::Array(items) => {
                let names: Option<Vec<(&str, &DeTable<'_>)>> = items
                    .iter()
                    .map(|item| {
                        let table = item.get_ref().as_table()?;
                        let name = table.get("name")?.get_ref().as_str()?;
                        Some((name, table))
                    })
                    .collect();
                match names {
                    Some(named) if !named.is_empty() => {
                        for (name, table) in named {
                            let entry = format!("{path}[{name}]");
                            walk(paths, &entry, table);
                            paths.insert(entry);
                        }
                    }
                    _ => {}
                }
            }
            _ => {}
        }
        paths.insert(path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(text: &str) -> Vec<String> {
        Outline::of(text).unwrap().paths.into_iter().collect()
    }

    #[test]
    fn sections_keys_and_named_entries_are_paths() {
        let text = r#"
[node]
name = "n"
[[backend_services]]
name = "web"
delivery = "ipip"
groups = [{ name = "a", endpoints = [{ address = "10.0.0.1" }] }]
[[backend_services]]
name = "dns"
[[backend_services.groups]]
name = "b"
endpoints = []
[[client_zones]]
zone = "z"
[metrics]
"#;
        assert_eq!(
            paths(text),
            [
                "backend_services",
                "backend_services[dns]",
                "backend_services[dns].groups",
                "backend_services[dns].groups[b]",
                "backend_services[dns].groups[b].endpoints",
                "backend_services[dns].groups[b].name",
                "backend_services[dns].name",
                "backend_services[web]",
                "backend_services[web].delivery",
                "backend_services[web].groups",
                "backend_services[web].groups[a]",
                "backend_services[web].groups[a].endpoints",
                "backend_services[web].groups[a].name",
                "backend_services[web].name",
                "client_zones",
                "metrics",
                "node",
                "node.name",
            ]
        );
    }

    #[test]
    fn removals_and_truncations_are_told_from_edits() {
        let old = Outline::of("[a]\nx = 1\ny = [1, 2]\n[b]\nz = 2\n").unwrap();
        // Values changed, an element of a value array removed: no removal.
        let edit = Outline::of("[a]\nx = 5\ny = [1]\n[b]\nz = 3\n").unwrap();
        assert!(old.removed_in(&edit).is_empty());
        assert!(!old.truncated_in(&edit));
        // A key and a section removed.
        let cut = Outline::of("[a]\nx = 1\ny = [1, 2]\n").unwrap();
        assert_eq!(old.removed_in(&cut), ["b"], "a section, not its keys");
        let fewer = Outline::of("[a]\nx = 1\n[b]\nz = 2\n").unwrap();
        assert_eq!(old.removed_in(&fewer), ["a.y"]);
        assert!(old.truncated_in(&cut));
        // Only a comment at the end gone: nothing removed, but cut short.
        let old = Outline::of("[a]\nx = 1\n# end\n").unwrap();
        let cut = Outline::of("[a]\nx = 1\n").unwrap();
        assert!(old.removed_in(&cut).is_empty());
        assert!(old.truncated_in(&cut));
        assert!(!old.truncated_in(&old), "the same file is no truncation");
        assert!(Outline::of("[a\n").is_none(), "not TOML");
    }
}
