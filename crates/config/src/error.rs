//! Errors with positions, and the map from field paths to positions.
//!
//! The file is parsed once into toml's spanned tree (`DeTable`). Before the
//! tree is deserialized into the schema, every node's path
//! (`forwarding_rules[2].ports`) and span are recorded here. Validation then
//! speaks in paths only, and the map turns a path into `line:col`; a field
//! left at its default has no span, so it takes its nearest written ancestor
//! (the table that should have held it). Serde errors carry a span, and the
//! map turns that into the path of the narrowest node around it.

use std::collections::HashMap;
use std::fmt;
use std::ops::Range;

use toml::Spanned;
use toml::de::{DeTable, DeValue};

/// One problem in a configuration file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// File name as given to the loader.
    pub file: String,
    /// 1-based line.
    pub line: usize,
    /// 1-based column (in characters).
    pub col: usize,
    /// Field path such as `forwarding_rules[2].ports`; empty for the
    /// document as a whole.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}: ", self.file, self.line, self.col)?;
        if !self.path.is_empty() {
            write!(f, "{}: ", self.path)?;
        }
        f.write_str(&self.message)
    }
}

/// Every problem found in a configuration file, in file order; displayed one
/// per line.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct ConfigErrors {
    /// The problems (never empty).
    pub errors: Vec<ConfigError>,
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.errors.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl ConfigErrors {
    /// A single error not tied to a position in the file (e.g. unreadable).
    pub fn whole_file(file: &str, message: String) -> Self {
        Self {
            errors: vec![ConfigError {
                file: file.to_owned(),
                line: 1,
                col: 1,
                path: String::new(),
                message,
            }],
        }
    }
}

/// One step of a field path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Seg {
    /// A table key.
    Key(String),
    /// An array index.
    Index(usize),
}

/// The text form of a path (`a.b[2].c`).
pub(crate) fn path_of(segs: &[Seg]) -> String {
    let mut out = String::new();
    for s in segs {
        match s {
            Seg::Key(k) if out.is_empty() => out.push_str(k),
            Seg::Key(k) => {
                out.push('.');
                out.push_str(k);
            }
            Seg::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

#[derive(Clone, Debug)]
struct Node {
    path: String,
    segs: Vec<Seg>,
    /// From the key (when there is one) to the end of the value.
    full: Range<usize>,
    /// Where errors about this node point: the value.
    at: usize,
}

/// Field paths and line/column positions of one file.
#[derive(Clone, Debug)]
pub struct SourceMap {
    file: String,
    line_starts: Vec<usize>,
    text: String,
    nodes: Vec<Node>,
    /// Path -> index of its (first) node in `nodes`: every error and
    /// warning looks its path up, so a scan of `nodes` each would make
    /// validation quadratic in the size of the file.
    by_path: HashMap<String, usize>,
}

impl SourceMap {
    /// A map with positions only (before the document could be parsed).
    pub(crate) fn new(file: &str, text: &str) -> Self {
        let mut line_starts = vec![0];
        line_starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        Self {
            file: file.to_owned(),
            line_starts,
            text: text.to_owned(),
            nodes: Vec::new(),
            by_path: HashMap::new(),
        }
    }

    /// Records every node of the parsed document.
    pub(crate) fn record(&mut self, root: &Spanned<DeTable<'_>>) {
        self.by_path
            .entry(String::new())
            .or_insert(self.nodes.len());
        self.nodes.push(Node {
            path: String::new(),
            segs: Vec::new(),
            full: 0..self.text.len(),
            at: 0,
        });
        self.walk_table(String::new(), &[], root.get_ref());
    }

    fn walk_table(&mut self, prefix: String, segs: &[Seg], t: &DeTable<'_>) {
        for (k, v) in t.iter() {
            let key: &str = k.get_ref();
            let path = if prefix.is_empty() {
                key.to_owned()
            } else {
                format!("{prefix}.{key}")
            };
            let (ks, vs) = (k.span(), v.span());
            // Tables opened by a `[header]` have the header's span as the
            // key's, and their value span may start before it; take the
            // union so that errors inside are attributed to this node.
            let full = ks.start.min(vs.start)..ks.end.max(vs.end);
            let mut segs = segs.to_vec();
            segs.push(Seg::Key(key.to_owned()));
            self.walk_value(path, segs, full, vs.start, v.get_ref());
        }
    }

    fn walk_value(
        &mut self,
        path: String,
        segs: Vec<Seg>,
        full: Range<usize>,
        at: usize,
        v: &DeValue<'_>,
    ) {
        self.by_path.entry(path.clone()).or_insert(self.nodes.len());
        self.nodes.push(Node {
            path: path.clone(),
            segs: segs.clone(),
            full,
            at,
        });
        match v {
            DeValue::Table(t) => self.walk_table(path, &segs, t),
            DeValue::Array(a) => {
                for (i, item) in a.iter().enumerate() {
                    let s = item.span();
                    let mut segs = segs.clone();
                    segs.push(Seg::Index(i));
                    self.walk_value(
                        format!("{path}[{i}]"),
                        segs,
                        s.clone(),
                        s.start,
                        item.get_ref(),
                    );
                }
            }
            _ => {}
        }
    }

    /// 1-based line and column of a byte offset.
    pub fn line_col(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.text.len());
        let line = self.line_starts.partition_point(|&s| s <= offset);
        let start = self
            .line_starts
            .get(line.saturating_sub(1))
            .copied()
            .unwrap_or(0);
        let col = self
            .text
            .get(start..offset)
            .map_or(1, |s| s.chars().count() + 1);
        (line.max(1), col)
    }

    /// Byte offset of `path`, or of its nearest recorded ancestor.
    fn offset_of(&self, path: &str) -> usize {
        let mut p = path;
        loop {
            if let Some(n) = self.by_path.get(p).and_then(|&i| self.nodes.get(i)) {
                return n.at;
            }
            // Strip the last `.field` or `[i]`.
            match p.rfind(['.', '[']) {
                Some(i) => p = &p[..i],
                None if !p.is_empty() => p = "",
                None => return 0,
            }
        }
    }

    /// Whether the file writes `path` (a default is not written).
    pub(crate) fn contains(&self, path: &str) -> bool {
        self.by_path.contains_key(path)
    }

    /// `file:line:col` of a path, for messages that point at another place.
    pub fn location(&self, path: &str) -> String {
        let (l, c) = self.line_col(self.offset_of(path));
        format!("{}:{l}:{c}", self.file)
    }

    /// An error at `path`.
    pub fn error(&self, path: &str, message: String) -> ConfigError {
        let (line, col) = self.line_col(self.offset_of(path));
        ConfigError {
            file: self.file.clone(),
            line,
            col,
            path: path.to_owned(),
            message,
        }
    }

    /// An error reported by the TOML parser or deserializer: the position is
    /// its span's, the path the narrowest recorded node around that span.
    pub fn toml_error(&self, e: &toml::de::Error) -> ConfigError {
        self.toml_error_at(e).0
    }

    /// `toml_error`, and the path segments of the node it was found in.
    pub(crate) fn toml_error_at(&self, e: &toml::de::Error) -> (ConfigError, Vec<Seg>) {
        let span = e.span().unwrap_or(0..0);
        let node = self
            .nodes
            .iter()
            .filter(|n| n.full.start <= span.start && span.end <= n.full.end.max(n.full.start + 1))
            // An array of tables and its first element share the first
            // header's span: on a tie the deeper path is the better name.
            .min_by_key(|n| (n.full.end - n.full.start, std::cmp::Reverse(n.path.len())));
        let path = node.map(|n| n.path.clone()).unwrap_or_default();
        let segs = node.map(|n| n.segs.clone()).unwrap_or_default();
        let message = e.message().trim().to_owned();
        // serde names a missing field in its message only; put it in the path.
        let path = match message
            .strip_prefix("missing field `")
            .and_then(|m| m.strip_suffix('`'))
        {
            Some(field) if path.is_empty() => field.to_owned(),
            Some(field) => format!("{path}.{field}"),
            None => path,
        };
        let (line, col) = self.line_col(span.start);
        let error = ConfigError {
            file: self.file.clone(),
            line,
            col,
            path,
            message,
        };
        (error, segs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(text: &str) -> SourceMap {
        let mut m = SourceMap::new("f.toml", text);
        let root = DeTable::parse(text).unwrap();
        m.record(&root);
        m
    }

    #[test]
    fn paths_resolve_to_their_values_and_defaults_to_their_table() {
        let text = "[node]\nname = \"a\"\n\n[[rules]]\nx = 1\n\n[[rules]]\n  x = [1, 2]\n";
        let m = map(text);
        assert_eq!(m.location("node.name"), "f.toml:2:8");
        assert_eq!(m.location("rules[1].x"), "f.toml:8:7");
        assert_eq!(m.location("rules[1].x[1]"), "f.toml:8:11");
        // Not written: its table.
        let (l, _) = m.line_col(m.offset_of("rules[1].y"));
        assert_eq!(l, 7);
        assert_eq!(m.line_col(m.offset_of("node.zone")).0, 1);
    }

    #[test]
    fn line_col_counts_characters() {
        let m = SourceMap::new("f", "ab\n\u{e9}x\n");
        assert_eq!(m.line_col(0), (1, 1));
        assert_eq!(m.line_col(3), (2, 1));
        assert_eq!(m.line_col(5), (2, 2));
        assert_eq!(m.line_col(7), (3, 1));
    }
}
