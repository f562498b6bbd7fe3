//! Spillway's configuration: one TOML file (M41) → a validated
//! [`Config`] → an immutable [`Compiled`] snapshot the data plane reads.
//!
//! The pipeline is the same for `spillway check-config`, the daemon's start
//! and every reload ([`load`]):
//!
//! 1. parse into toml's spanned tree, reporting every syntax error with
//!    `file:line:col` ([`error::SourceMap`] records each field path's span);
//! 2. deserialize into the [`schema`] types: unknown fields, wrong types and
//!    malformed values are errors with their position and path, all of them
//!    collected (the offending entry is dropped and deserialization retried);
//! 3. [`validate`]: every semantic rule, all errors collected, each naming
//!    file, line, column, field path and reason;
//! 4. compile ([`compiled`]): dense indices and the per-VIP rule index.
//!
//! A config that fails any step is never compiled, so the data plane only
//! ever sees snapshots built from valid configs (M38: a bad reload leaves
//! the running snapshot in place).

pub mod compiled;
pub mod error;
pub mod memory;
pub mod outline;
pub mod pool;
pub mod schema;
pub mod validate;
pub use values;

use std::path::Path;

use serde::Deserialize;

pub use compiled::{Compiled, RuleIndex, RuleMatch};
pub use error::{ConfigError, ConfigErrors};
pub use outline::Outline;
pub use schema::Config;

/// Facts about the machine that validation checks against, injectable so
/// that tests do not depend on the host.
#[derive(Clone, Debug, Default)]
pub struct Env {
    /// CPUs that exist and are online; `None` skips the check.
    pub online_cpus: Option<Vec<u32>>,
    /// The machine's memory; `None` skips the memory checks.
    pub memory: Option<Memory>,
}

/// A machine's memory, in bytes (from `/proc/meminfo`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Memory {
    /// `MemTotal`: all of it, hugepages included.
    pub total: u64,
    /// What this process could have now: `MemAvailable` plus what it holds
    /// already (`VmRSS`), so that a running daemon validating a reload does
    /// not count its own flow table as taken.
    pub available: u64,
    /// Reserved as hugepages (`HugePages_Total` × `Hugepagesize`): only
    /// DPDK's memory can use it, the flow table and Maglev tables cannot.
    pub hugepages: u64,
}

impl Memory {
    /// A machine with `total` bytes, all available, no hugepages.
    pub fn total(total: u64) -> Self {
        Self {
            total,
            available: total,
            hugepages: 0,
        }
    }

    /// This machine's memory, if `/proc/meminfo` can be read.
    pub fn system() -> Option<Self> {
        let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
        let own = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| kib_field(&s, "VmRSS:"))
            .unwrap_or(0);
        let mut m = parse_meminfo(&meminfo)?;
        m.available = m.available.saturating_add(own).min(m.total);
        Some(m)
    }

    /// Memory ordinary allocations can use: all but the hugepages.
    pub fn ordinary(&self) -> u64 {
        self.total.saturating_sub(self.hugepages)
    }
}

/// Parses `/proc/meminfo` (without adding this process's own memory).
pub fn parse_meminfo(s: &str) -> Option<Memory> {
    let total = kib_field(s, "MemTotal:")?;
    // MemAvailable is missing before Linux 3.14: MemFree understates it.
    let available = kib_field(s, "MemAvailable:")
        .or_else(|| kib_field(s, "MemFree:"))
        .unwrap_or(total);
    let pages = s
        .lines()
        .find_map(|l| l.strip_prefix("HugePages_Total:"))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(0);
    let page = kib_field(s, "Hugepagesize:").unwrap_or(0);
    Some(Memory {
        total,
        available: available.min(total),
        hugepages: pages.saturating_mul(page).min(total),
    })
}

/// A `Name:   123 kB` field of a /proc file, in bytes.
fn kib_field(s: &str, name: &str) -> Option<u64> {
    let v = s.lines().find_map(|l| l.strip_prefix(name))?;
    let kib: u64 = v.trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(kib.saturating_mul(1024))
}

impl Env {
    /// This machine: `/sys/devices/system/cpu/online`, else
    /// `available_parallelism` (cores `0..n`); memory from `/proc/meminfo`.
    pub fn system() -> Self {
        let from_sys = std::fs::read_to_string("/sys/devices/system/cpu/online")
            .ok()
            .and_then(|s| parse_cpu_list(&s));
        let online_cpus = from_sys.or_else(|| {
            std::thread::available_parallelism()
                .ok()
                .map(|n| (0..u32::try_from(n.get()).unwrap_or(u32::MAX)).collect())
        });
        Self {
            online_cpus,
            memory: Memory::system(),
        }
    }

    /// A machine with CPUs `0..n` online (memory unknown).
    pub fn with_cpus(n: u32) -> Self {
        Self {
            online_cpus: Some((0..n).collect()),
            memory: None,
        }
    }

    /// This machine with `memory`.
    pub fn with_memory(self, memory: Memory) -> Self {
        Self {
            memory: Some(memory),
            ..self
        }
    }
}

/// Parses the kernel's CPU list format (`0-3,5,7-8`).
pub fn parse_cpu_list(s: &str) -> Option<Vec<u32>> {
    let mut out = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u32, u32) = (a.parse().ok()?, b.parse().ok()?);
                if a > b {
                    return None;
                }
                out.extend(a..=b);
            }
            None => out.push(part.parse().ok()?),
        }
    }
    Some(out)
}

/// A configuration that passed validation, and its compiled snapshot.
#[derive(Clone, Debug)]
pub struct Loaded {
    /// The file as written (defaults filled in).
    pub config: Config,
    /// What the data plane and the management core read.
    pub compiled: Compiled,
    /// Things that are allowed but probably not meant.
    pub warnings: Vec<String>,
    /// The memory the configuration needs.
    pub memory: memory::Estimate,
    /// The memory of the machine it was checked against, if known.
    pub machine: Option<Memory>,
    /// The file's text and what it defines (the file watch compares it
    /// with the running file's, M38).
    pub outline: Outline,
}

impl Loaded {
    /// A short human summary (what `spillway check-config` prints).
    pub fn summary(&self) -> String {
        let memory = memory::summary(&self.memory, self.machine.as_ref());
        compiled::summary(&self.compiled, &memory, &self.warnings)
    }
}

/// Reads, validates and compiles the configuration file at `path`, checking
/// cores against this machine. The daemon's start and reload and
/// `check-config` all call this.
pub fn load(path: &Path) -> Result<Loaded, ConfigErrors> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path)
        .map_err(|e| ConfigErrors::whole_file(&name, format!("cannot read the file: {e}")))?;
    load_str(&name, &text, &Env::system())
}

/// Validates and compiles `text`; `file` names it in errors.
pub fn load_str(file: &str, text: &str, env: &Env) -> Result<Loaded, ConfigErrors> {
    let mut map = error::SourceMap::new(file, text);
    let (root, syntax) = toml::de::DeTable::parse_recoverable(text);
    if !syntax.is_empty() {
        return Err(ConfigErrors {
            errors: syntax.iter().map(|e| map.toml_error(e)).collect(),
        });
    }
    map.record(&root);
    let outline = Outline::of_table(text, root.get_ref());
    let mut config = deserialize(&map, root)?;
    pool::allocate(&mut config, |path| map.contains(path)).map_err(|errors| ConfigErrors {
        errors: errors
            .into_iter()
            .map(|(path, reason)| map.error(&path, reason))
            .collect(),
    })?;
    let warnings = validate::validate(&config, &map, env)?;
    let compiled = compiled::compile(&config);
    Ok(Loaded {
        memory: memory::estimate(&config),
        machine: env.memory,
        config,
        compiled,
        warnings,
        outline,
    })
}

/// Most schema errors collected from one file before giving up.
const MAX_SCHEMA_ERRORS: usize = 50;

/// Deserializes the schema, collecting every schema error rather than the
/// first.
///
/// serde stops at the first error, so the offending entry (a key, or an
/// array element) is removed from the tree and deserialization retried.
/// Positions and paths always come from the original tree, whose spans the
/// removal leaves intact. Errors under a removed entry (the "missing field"
/// its removal causes) are not reported; a table then missing a required
/// field is removed in turn. With any schema error, semantic validation does
/// not run: the config is incomplete.
fn deserialize(
    map: &error::SourceMap,
    root: toml::Spanned<toml::de::DeTable<'_>>,
) -> Result<Config, ConfigErrors> {
    let mut root = root;
    let mut errors: Vec<ConfigError> = Vec::new();
    let mut removed = Removed::default();
    loop {
        let e = match Config::deserialize(toml::de::Deserializer::from(root.clone())) {
            Ok(config) if errors.is_empty() => return Ok(config),
            Ok(_) => break,
            Err(e) => e,
        };
        let (err, mut segs) = map.toml_error_at(&e);
        // A table missing a field goes as a whole (an array element is
        // removed without renumbering its siblings' paths). A bad value
        // inside a value array takes its whole key: dropping one element
        // could make the list wrong in a new way (e.g. empty).
        if !err.message.starts_with("missing field") {
            while matches!(segs.last(), Some(error::Seg::Index(_))) {
                segs.pop();
            }
        }
        let under = |r: &String| {
            err.path == *r
                || err.path.starts_with(&format!("{r}."))
                || err.path.starts_with(&format!("{r}["))
        };
        if !removed.paths.iter().any(under) {
            errors.push(err);
        }
        if segs.is_empty()
            || errors.len() >= MAX_SCHEMA_ERRORS
            || !removed.remove(root.get_mut(), &segs)
        {
            break;
        }
    }
    errors.sort_by_key(|e| (e.line, e.col));
    Err(ConfigErrors { errors })
}

/// What has been removed from the tree, in original paths and indices.
#[derive(Default)]
struct Removed {
    paths: Vec<String>,
    /// Original array path → original indices of removed elements, to map
    /// original indices to current ones.
    elements: std::collections::HashMap<String, Vec<usize>>,
}

impl Removed {
    /// Removes the entry at `segs` (original coordinates); false if absent.
    fn remove(&mut self, root: &mut toml::de::DeTable<'_>, segs: &[error::Seg]) -> bool {
        let done = self.walk_table(root, String::new(), segs);
        if done {
            self.paths.push(error::path_of(segs));
        }
        done
    }

    fn walk_table(
        &mut self,
        t: &mut toml::de::DeTable<'_>,
        path: String,
        segs: &[error::Seg],
    ) -> bool {
        let Some((error::Seg::Key(k), rest)) = segs.split_first() else {
            return false;
        };
        if rest.is_empty() {
            return t.remove(k.as_str()).is_some();
        }
        let path = if path.is_empty() {
            k.clone()
        } else {
            format!("{path}.{k}")
        };
        match t.get_mut(k.as_str()) {
            Some(v) => self.walk_value(v.get_mut(), path, rest),
            None => false,
        }
    }

    fn walk_value(
        &mut self,
        v: &mut toml::de::DeValue<'_>,
        path: String,
        segs: &[error::Seg],
    ) -> bool {
        use toml::de::DeValue;
        match (v, segs) {
            (DeValue::Table(t), [error::Seg::Key(_), ..]) => self.walk_table(t, path, segs),
            (DeValue::Array(a), [error::Seg::Index(n), rest @ ..]) => {
                let gone = self
                    .elements
                    .get(&path)
                    .map_or(0, |r| r.iter().filter(|&&x| x < *n).count());
                let Some(cur) = n.checked_sub(gone) else {
                    return false;
                };
                if rest.is_empty() {
                    if cur >= a.len() {
                        return false;
                    }
                    // DeArray has no remove: rebuild it without the element.
                    let mut kept = toml::de::DeArray::new();
                    for (i, item) in a.iter().enumerate() {
                        if i != cur {
                            kept.push(item.clone());
                        }
                    }
                    *a = kept;
                    self.elements.entry(path).or_default().push(*n);
                    return true;
                }
                match a.get_mut(cur) {
                    Some(item) => self.walk_value(item.get_mut(), format!("{path}[{n}]"), rest),
                    None => false,
                }
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-3,5\n"), Some(vec![0, 1, 2, 3, 5]));
        assert_eq!(parse_cpu_list("0"), Some(vec![0]));
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("x"), None);
    }

    #[test]
    fn this_machine_has_a_cpu() {
        let env = Env::system();
        assert!(env.online_cpus.is_some_and(|c| !c.is_empty()));
    }
}
