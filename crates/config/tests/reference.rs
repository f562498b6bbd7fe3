//! `config/reference.toml` and the configuration map of `docs/guide.md`
//! cannot drift from the schema.
//!
//! The schema is read from the parser itself, not from a list kept here:
//! every table of the schema refuses unknown fields, and serde's refusal
//! names every field the table accepts. Probing each table with an unknown
//! key, and each of its fields with a table and an array of tables, walks
//! the whole schema from the root. A field added to, renamed in or removed
//! from `schema.rs` is thus noticed here without touching this file.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use config::{Env, load_str};

/// The key no table of the schema has.
const PROBE: &str = "zzz_probe";

/// What a field of the schema holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// A value (string, number, list of values, …).
    Value,
    /// A table (`[a.b]`, `b = { … }`).
    Table,
    /// An array of tables (`[[a.b]]`, `b = [{ … }]`).
    Tables,
}

/// Every field of the schema by dotted path (`backend_services.groups.name`).
type Schema = BTreeMap<String, Kind>;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// A document holding `inner` in the table at `path` (inline tables, so
/// that a path of any depth is one line).
fn nest(path: &[(String, Kind)], inner: &str) -> String {
    path.iter()
        .rev()
        .fold(inner.to_owned(), |acc, (name, kind)| {
            let body = format!("{{ {acc} }}");
            match kind {
                Kind::Tables => format!("{name} = [{body}]"),
                _ => format!("{name} = {body}"),
            }
        })
}

/// The fields the table at `path` accepts, from the parser's refusal of an
/// unknown key there; `None` when the value at `path` is no table (the
/// parser refused something else).
fn fields_at(path: &[(String, Kind)]) -> Option<Vec<String>> {
    let text = nest(path, &format!("{PROBE} = 1"));
    let errors = match load_str("probe.toml", &text, &Env::default()) {
        Ok(_) => panic!("a key {PROBE} was accepted: {text}"),
        Err(e) => e.errors,
    };
    let unknown = format!("unknown field `{PROBE}`");
    let message = &errors
        .iter()
        .find(|e| e.message.starts_with(&unknown))?
        .message;
    // serde: "expected `a`", "expected `a` or `b`", "expected one of `a`, `b`, …".
    let list = message
        .split("expected one of ")
        .nth(1)
        .or_else(|| message.split("expected ").nth(1))
        .unwrap_or_else(|| panic!("{text}: no field list in {message:?}"));
    let fields: Vec<String> = list
        .lines()
        .next()
        .unwrap_or_default()
        .split(", ")
        .flat_map(|f| f.split(" or "))
        .map(|f| f.trim().trim_matches('`').to_owned())
        .collect();
    assert!(
        fields.iter().all(|f| !f.is_empty() && !f.contains(' ')),
        "{text}: unreadable field list {message:?}"
    );
    Some(fields)
}

/// Walks the schema below `path` into `out`.
fn discover(path: &mut Vec<(String, Kind)>, fields: Vec<String>, out: &mut Schema) {
    for f in fields {
        let dotted = path
            .iter()
            .map(|(n, _)| n.as_str())
            .chain([f.as_str()])
            .collect::<Vec<_>>()
            .join(".");
        let mut kind = Kind::Value;
        for k in [Kind::Table, Kind::Tables] {
            path.push((f.clone(), k));
            if let Some(sub) = fields_at(path) {
                kind = k;
                out.insert(dotted.clone(), k);
                discover(path, sub, out);
                path.pop();
                break;
            }
            path.pop();
        }
        out.entry(dotted).or_insert(kind);
    }
}

/// The whole schema, from the parser.
fn schema() -> Schema {
    let root = fields_at(&[]).expect("the root table refuses unknown fields");
    let mut out = Schema::new();
    discover(&mut Vec::new(), root, &mut out);
    out
}

/// Adds every key under `table` (at `prefix`) to `out`.
fn keys(table: &toml::Table, prefix: &str, out: &mut BTreeSet<String>) {
    for (k, v) in table {
        let path = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            toml::Value::Table(t) => keys(t, &path, out),
            toml::Value::Array(a) => {
                for t in a.iter().filter_map(toml::Value::as_table) {
                    keys(t, &path, out);
                }
            }
            _ => {}
        }
        out.insert(path);
    }
}

/// The table a header line (`[a.b]`, `[[a.b]]  # …`) opens; `None` for
/// anything else (prose such as `[node]: who this balancer is`).
fn header(line: &str) -> Option<String> {
    let rest = line.strip_prefix('[')?.trim_start_matches('[');
    let (name, after) = rest.split_once(']')?;
    let after = after.trim_start_matches(']').trim();
    (after.is_empty() || after.starts_with('#')).then(|| name.trim().to_owned())
}

/// Every key reference.toml documents, by dotted path: the keys it sets,
/// and the fields it shows commented out (a line `# key = value` at the
/// start of the line, in the table above it or under a commented-out
/// header), which are alternatives to a key it sets or have no default.
fn documented(reference: &str) -> BTreeSet<String> {
    let table: toml::Table = toml::from_str(reference).expect("reference.toml is TOML");
    let mut out = BTreeSet::new();
    keys(&table, "", &mut out);
    let mut live = String::new();
    let mut commented: Option<String> = None;
    for line in reference.lines() {
        let Some(text) = line.strip_prefix("# ") else {
            if line.starts_with('#') {
                continue; // a bare "#" keeps a commented block going
            }
            commented = None;
            if let Some(h) = header(line) {
                live = h;
            }
            continue;
        };
        if let Some(h) = header(text) {
            // A commented-out table documents itself and its keys below.
            out.insert(h.clone());
            commented = Some(h);
            continue;
        }
        let Ok(t) = toml::from_str::<toml::Table>(text) else {
            continue; // prose
        };
        if t.len() == 1 {
            keys(&t, commented.as_deref().unwrap_or(&live), &mut out);
        }
    }
    out
}

#[test]
fn the_schema_walk_finds_what_it_should() {
    // The walk itself is checked on fields known to exist, so that a change
    // in serde's wording cannot make the drift checks below vacuous.
    let s = schema();
    for (path, kind) in [
        ("node", Kind::Table),
        ("node.name", Kind::Value),
        ("dataplane.timeouts", Kind::Table),
        ("dataplane.timeouts.first_packet", Kind::Value),
        ("ports", Kind::Tables),
        ("backend_services.groups", Kind::Tables),
        ("backend_services.groups.endpoints.weight", Kind::Value),
        ("backend_services.geneve", Kind::Table),
        ("health_checks.type", Kind::Value),
        ("flow_sync.peers", Kind::Value),
        ("bgp.peers", Kind::Tables),
    ] {
        assert_eq!(s.get(path), Some(&kind), "{path}");
    }
    assert!(s.len() > 120, "{} fields found", s.len());
}

#[test]
fn reference_documents_exactly_the_schema() {
    let reference = read("config/reference.toml");
    // Every key it sets is accepted: the parser refuses unknown ones.
    load_str("config/reference.toml", &reference, &Env::default())
        .unwrap_or_else(|e| panic!("{e}"));
    let schema = schema();
    let doc = documented(&reference);
    let missing: Vec<&String> = schema.keys().filter(|p| !doc.contains(*p)).collect();
    let unknown: Vec<&String> = doc.iter().filter(|p| !schema.contains_key(*p)).collect();
    assert!(
        missing.is_empty(),
        "fields the parser accepts that config/reference.toml does not document \
         (set them, or show them as a `# key = value` line in their table): {missing:?}"
    );
    assert!(
        unknown.is_empty(),
        "config/reference.toml documents fields the parser does not accept: {unknown:?}"
    );
}

/// The rows of the guide's configuration map: table as written
/// (`[a]`/`[[a]]`), and the fields its last column names.
fn guide_map(guide: &str) -> Vec<(String, Vec<String>)> {
    let section = guide
        .split("\n## ")
        .find(|s| s.starts_with("Configuration map"))
        .expect("docs/guide.md has a section \"Configuration map\"");
    section
        .lines()
        .filter(|l| l.starts_with("| `["))
        .map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split('|').map(str::trim).collect();
            assert_eq!(cells.len(), 3, "a row of three cells: {l}");
            let fields = cells[2]
                .split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_owned)
                .collect();
            (cells[0].trim_matches('`').to_owned(), fields)
        })
        .collect()
}

#[test]
fn guide_maps_every_table_of_the_schema() {
    let schema = schema();
    let rows = guide_map(&read("docs/guide.md"));
    let mut seen = BTreeSet::new();
    for (table, fields) in &rows {
        let (path, kind) = match table.strip_prefix("[[") {
            Some(p) => (p.trim_end_matches("]]"), Kind::Tables),
            None => (table.trim_matches(['[', ']']), Kind::Table),
        };
        assert_eq!(
            schema.get(path),
            Some(&kind),
            "docs/guide.md maps {table}, which the schema has not (as that kind of table)"
        );
        assert!(seen.insert(path.to_owned()), "{table} mapped twice");
        for f in fields {
            assert!(
                schema.contains_key(&format!("{path}.{f}")),
                "docs/guide.md names `{f}` under {table}: not a field there"
            );
        }
    }
    let unmapped: Vec<&String> = schema
        .iter()
        .filter(|(p, k)| **k != Kind::Value && !seen.contains(*p))
        .map(|(p, _)| p)
        .collect();
    assert!(
        unmapped.is_empty(),
        "tables of the schema the guide's configuration map leaves out: {unmapped:?}"
    );
}
