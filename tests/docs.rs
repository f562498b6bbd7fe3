//! Links between the project's Markdown documents resolve: every relative
//! link names a file that exists and, with `#anchor`, a heading (as GitHub
//! makes anchors of headings) or an `<a id=…>` of that file. The operator's
//! guide points into operating.md and deploy.md section by section; renaming
//! a heading there must not leave it pointing nowhere.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The Markdown files of the repository outside build output and
/// dependencies.
fn markdown_files() -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![repo()];
    while let Some(dir) = dirs.pop() {
        for e in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{dir:?}: {e}")) {
            let p = e.expect("dir entry").path();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            if p.is_dir() {
                if !name.starts_with('.') && name != "target" {
                    dirs.push(p);
                }
            } else if name.ends_with(".md") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// Lines outside fenced code blocks.
fn prose(text: &str) -> impl Iterator<Item = &str> {
    let mut fenced = false;
    text.lines().filter(move |l| {
        if l.trim_start().starts_with("```") {
            fenced = !fenced;
            return false;
        }
        !fenced
    })
}

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces
/// made hyphens.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a document: its headings' (a repeated heading gets `-1`,
/// `-2`, … as on GitHub) and its `<a id="…">` / `<a name="…">`.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for line in prose(text) {
        for attr in ["<a id=\"", "<a name=\""] {
            for part in line.split(attr).skip(1) {
                if let Some((id, _)) = part.split_once('"') {
                    out.insert(id.to_owned());
                }
            }
        }
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if hashes == 0 || hashes > 6 || !line[hashes..].starts_with(' ') {
            continue;
        }
        let s = slug(&line[hashes..]);
        let n = seen.entry(s.clone()).or_default();
        out.insert(if *n == 0 {
            s.clone()
        } else {
            format!("{s}-{n}")
        });
        *n += 1;
    }
    out
}

/// The targets of the inline links `[text](target)` of a document.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in prose(text) {
        for part in line.split("](").skip(1) {
            if let Some((target, _)) = part.split_once(')') {
                out.push(target.trim().to_owned());
            }
        }
    }
    out
}

#[test]
fn relative_links_and_anchors_resolve() {
    let files = markdown_files();
    assert!(
        files.iter().any(|f| f.ends_with("docs/guide.md")),
        "docs/guide.md is among {} files",
        files.len()
    );
    let mut broken = Vec::new();
    let mut checked = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for target in links(&text) {
            // Other schemes (https:, mailto:) are not ours to check.
            if target.contains(':') || target.is_empty() || target.contains(' ') {
                continue;
            }
            let (path, anchor) = target.split_once('#').unwrap_or((&target, ""));
            let dest = if path.is_empty() {
                file.clone()
            } else {
                file.parent().unwrap().join(path)
            };
            checked += 1;
            let rel = file.strip_prefix(repo()).unwrap().display().to_string();
            if !dest.exists() {
                broken.push(format!("{rel}: {target}: no such file"));
                continue;
            }
            if anchor.is_empty() || dest.extension().is_none_or(|e| e != "md") {
                continue;
            }
            let dest_text = std::fs::read_to_string(&dest).unwrap();
            if !anchors(&dest_text).contains(anchor) {
                broken.push(format!(
                    "{rel}: {target}: no such heading in {}",
                    Path::new(path).display()
                ));
            }
        }
    }
    assert!(checked > 50, "{checked} links checked");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn anchors_follow_github() {
    let doc = "# Operating Spillway\n## Layering balancers: remote_rule spillover between nodes\n\
               ## 11. Upgrading or rolling back one node of a cluster\n```\n# not a heading\n```\n\
               ## MTU\n## MTU\n<a id=\"m3\"></a>\n";
    let a = anchors(doc);
    for want in [
        "operating-spillway",
        "layering-balancers-remote_rule-spillover-between-nodes",
        "11-upgrading-or-rolling-back-one-node-of-a-cluster",
        "mtu",
        "mtu-1",
        "m3",
    ] {
        assert!(a.contains(want), "{want} in {a:?}");
    }
    assert!(!a.contains("not-a-heading"), "{a:?}");
    assert_eq!(links("see [x](a.md#b) and [y](c.md)"), ["a.md#b", "c.md"]);
}
