//! The operator's guide explains every drop reason the data plane counts,
//! and only those: its table in `docs/guide.md` ("Drop reasons") has one row
//! per [`DropReason::ALL`] entry, named as `spillway stats` and the label of
//! `spillway_dropped_packets_total` name it, with a meaning and an action.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

use std::collections::BTreeMap;
use std::path::Path;

use dataplane::DropReason;

/// The rows of the guide's drop-reason table: reason name → its other cells.
fn guide_rows() -> BTreeMap<String, Vec<String>> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/guide.md");
    let guide = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    let section = guide
        .split("\n## ")
        .find(|s| s.starts_with("Drop reasons"))
        .expect("docs/guide.md has a section \"Drop reasons\"");
    let mut rows = BTreeMap::new();
    // Data rows of its table name one reason in code in their first cell.
    for line in section.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<String> = line
            .trim_matches('|')
            .split('|')
            .map(|c| c.trim().to_owned())
            .collect();
        let name = cells[0].trim_matches('`').to_owned();
        assert!(
            rows.insert(name.clone(), cells[1..].to_vec()).is_none(),
            "docs/guide.md: {name} has two rows"
        );
    }
    rows
}

#[test]
fn guide_explains_every_drop_reason() {
    let rows = guide_rows();
    let missing: Vec<&str> = DropReason::ALL
        .iter()
        .map(|r| r.name())
        .filter(|n| !rows.contains_key(*n))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/guide.md, \"Drop reasons\": no row for {missing:?}"
    );
    let unknown: Vec<&String> = rows
        .keys()
        .filter(|n| !DropReason::ALL.iter().any(|r| r.name() == n.as_str()))
        .collect();
    assert!(
        unknown.is_empty(),
        "docs/guide.md, \"Drop reasons\": rows for reasons the data plane does not have: {unknown:?}"
    );
    for (name, cells) in &rows {
        assert!(
            cells.len() == 2 && cells.iter().all(|c| !c.is_empty()),
            "docs/guide.md: the row of {name} needs a meaning and an action: {cells:?}"
        );
    }
}
