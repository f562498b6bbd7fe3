//! The monitoring kit of `scripts/deploy/` (docs/operating.md, "Monitoring
//! with Prometheus"): the rules in `prometheus/alerts.yml` pass `promtool
//! check rules` and their unit tests (`promtool test rules`), which see
//! every alert both firing and not firing; the Grafana dashboard
//! `grafana/spillway.json` is well formed and each of its queries parses as
//! PromQL; and every metric an alert, a recording rule, a panel or a
//! dashboard variable names is one the daemon exports, with labels it
//! carries — as listed in `crates/control/tests/metrics_families.golden`,
//! which that crate's test keeps equal to what `/metrics` shows. A renamed
//! metric or label fails here, naming it and where it is used.
//! `tests/lab_prometheus.rs` loads the same rules into a running Prometheus.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn prometheus_dir() -> PathBuf {
    root().join("scripts/deploy/prometheus")
}

fn dashboard_path() -> PathBuf {
    root().join("scripts/deploy/grafana/spillway.json")
}

/// Series Prometheus makes itself (not the daemon's): `up` per target.
const PROMETHEUS_MADE: &[&str] = &["up"];
/// Labels Prometheus adds to every scraped series.
const TARGET_LABELS: &[&str] = &["instance", "job"];

/// PromQL's aggregation operators (`sum by (x) (…)`: no parenthesis right
/// after the name), keywords and literals: never metric names.
const NOT_METRICS: &[&str] = &[
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "and",
    "or",
    "unless",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "offset",
    "bool",
    "atan2",
    "inf",
    "nan",
];

/// Keywords followed by a parenthesised list of label names.
const GROUPING: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// What one PromQL expression names.
#[derive(Debug, Default, PartialEq)]
struct Names {
    /// Each metric selector: the metric and the label names its matchers use.
    selectors: Vec<(String, BTreeSet<String>)>,
    /// Label names of `by`, `without`, `on`, `ignoring`, `group_*` lists.
    grouping: BTreeSet<String>,
}

fn is_ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == ':'
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

/// The metric selectors and grouping labels of `expr`, read with PromQL's
/// lexical rules (strings, comments, durations and ranges skipped) and
/// Grafana's variables (`$x`, `${x}`) ignored: an identifier is a metric
/// unless a `(` follows it (a function) or it is a keyword or aggregation.
fn names(expr: &str) -> Names {
    let c: Vec<char> = expr.chars().collect();
    let mut out = Names::default();
    let mut i = 0;
    // The identifiers in c[from..] up to the `close` matching the opener
    // at c[from - 1], strings skipped; returns them and the index after it.
    let list = |from: usize, close: char| -> (BTreeSet<String>, usize) {
        let mut ids = BTreeSet::new();
        let mut j = from;
        while j < c.len() && c[j] != close {
            match c[j] {
                '"' | '\'' | '`' => j = skip_string(&c, j),
                '$' => j = skip_variable(&c, j),
                ch if is_ident_start(ch) => {
                    let s = j;
                    while j < c.len() && is_ident(c[j]) {
                        j += 1;
                    }
                    ids.insert(c[s..j].iter().collect());
                }
                _ => j += 1,
            }
        }
        (ids, j + 1)
    };
    while i < c.len() {
        match c[i] {
            '"' | '\'' | '`' => i = skip_string(&c, i),
            '#' => {
                while i < c.len() && c[i] != '\n' {
                    i += 1;
                }
            }
            '$' => i = skip_variable(&c, i),
            '[' => {
                while i < c.len() && c[i] != ']' {
                    i += 1;
                }
                i += 1;
            }
            // A selector without a name ({__name__="…"} is not used here).
            '{' => i = list(i + 1, '}').1,
            ch if ch.is_ascii_digit()
                || (ch == '.' && c.get(i + 1).is_some_and(char::is_ascii_digit)) =>
            {
                // Numbers (1e-3, 0x1f) and durations (5m, 1h30m).
                while i < c.len()
                    && (c[i].is_ascii_alphanumeric()
                        || c[i] == '.'
                        || ((c[i] == '-' || c[i] == '+') && matches!(c[i - 1], 'e' | 'E')))
                {
                    i += 1;
                }
            }
            ch if is_ident_start(ch) => {
                let s = i;
                while i < c.len() && is_ident(c[i]) {
                    i += 1;
                }
                let word: String = c[s..i].iter().collect();
                let mut k = i;
                while k < c.len() && c[k].is_whitespace() {
                    k += 1;
                }
                let paren = c.get(k) == Some(&'(');
                if GROUPING.contains(&word.as_str()) {
                    if paren {
                        let (labels, next) = list(k + 1, ')');
                        out.grouping.extend(labels);
                        i = next;
                    }
                } else if paren || NOT_METRICS.contains(&word.as_str()) {
                    // A function or an operator.
                } else if c.get(k) == Some(&'{') {
                    let (labels, next) = list(k + 1, '}');
                    out.selectors.push((word, labels));
                    i = next;
                } else {
                    out.selectors.push((word, BTreeSet::new()));
                }
            }
            _ => i += 1,
        }
    }
    out
}

/// The index after the string literal opening at `c[i]`.
fn skip_string(c: &[char], i: usize) -> usize {
    let quote = c[i];
    let mut j = i + 1;
    while j < c.len() && c[j] != quote {
        j += if c[j] == '\\' && quote != '`' { 2 } else { 1 };
    }
    j + 1
}

/// The index after the Grafana variable at `c[i]` (`$name`, `${name}`).
fn skip_variable(c: &[char], i: usize) -> usize {
    let mut j = i + 1;
    if c.get(j) == Some(&'{') {
        while j < c.len() && c[j] != '}' {
            j += 1;
        }
        return j + 1;
    }
    while j < c.len() && is_ident(c[j]) {
        j += 1;
    }
    j
}

/// The label names a Grafana legend (`{{rule}}`) or an alert's annotation
/// (`{{ $labels.rule }}`) reads.
fn template_labels(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for part in text.split("{{").skip(1) {
        let inner = part.split("}}").next().unwrap_or("").trim();
        let name = inner.strip_prefix("$labels.").unwrap_or(inner);
        if !name.is_empty() && name.chars().all(is_ident) {
            out.insert(name.to_owned());
        }
    }
    out
}

/// A family of the daemon: its label names, `None` where the catalogue
/// could not see them (a family without samples there).
type Catalogue = BTreeMap<String, Option<BTreeSet<String>>>;

/// `crates/control/tests/metrics_families.golden`: every family `/metrics`
/// can carry, by sample name.
fn catalogue() -> Catalogue {
    let path = root().join("crates/control/tests/metrics_families.golden");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    let out: Catalogue = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            assert_eq!(f.len(), 3, "{path:?}: {l}");
            let labels = match f[2] {
                "?" => None,
                "-" => Some(BTreeSet::new()),
                l => Some(l.split(',').map(str::to_owned).collect()),
            };
            (f[0].to_owned(), labels)
        })
        .collect();
    assert!(out.len() > 100, "{path:?}: {} families", out.len());
    out
}

/// A YAML file as JSON, read by PyYAML (Debian's python3-yaml).
fn yaml(path: &Path) -> Value {
    let out = common::run_ok(Command::new("python3").args([
        "-c",
        "import json, sys, yaml\njson.dump(yaml.safe_load(open(sys.argv[1])), sys.stdout)",
        &path.display().to_string(),
    ]));
    serde_json::from_slice(&out.stdout).expect("PyYAML's JSON")
}

fn rules() -> Vec<Value> {
    let doc = yaml(&prometheus_dir().join("alerts.yml"));
    doc["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .flat_map(|g| g["rules"].as_array().expect("rules").clone())
        .collect()
}

fn dashboard() -> Value {
    let path = dashboard_path();
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path:?}: {e}"))
}

/// Every panel, rows' nested panels included.
fn panels(d: &Value) -> Vec<Value> {
    let mut out = Vec::new();
    for p in d["panels"].as_array().expect("panels") {
        out.push(p.clone());
        if let Some(inner) = p["panels"].as_array() {
            out.extend(inner.iter().cloned());
        }
    }
    out
}

/// A query to check: where it is, its PromQL, and the label templates
/// (legend, annotations) that read its result.
struct Query {
    at: String,
    expr: String,
    templates: Vec<String>,
}

/// The queries of alerts.yml (recording rules and alerts) and of the
/// dashboard (panel targets, and the series a variable's `label_values`
/// reads, with its label as a template).
fn queries() -> Vec<Query> {
    let mut out = Vec::new();
    for r in rules() {
        let name = r["record"].as_str().or(r["alert"].as_str()).expect("name");
        let annotations = r["annotations"]
            .as_object()
            .map(|a| {
                a.values()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        out.push(Query {
            at: format!("alerts.yml {name}"),
            expr: r["expr"].as_str().expect("expr").to_owned(),
            templates: annotations,
        });
    }
    let d = dashboard();
    for p in panels(&d) {
        for t in p["targets"].as_array().into_iter().flatten() {
            out.push(Query {
                at: format!(
                    "spillway.json panel {:?} target {}",
                    p["title"].as_str().unwrap_or("?"),
                    t["refId"].as_str().unwrap_or("?")
                ),
                expr: t["expr"].as_str().expect("target expr").to_owned(),
                templates: vec![t["legendFormat"].as_str().unwrap_or("").to_owned()],
            });
        }
    }
    for v in d["templating"]["list"].as_array().expect("templating") {
        let Some(q) = v["query"]["query"].as_str() else {
            continue;
        };
        let args = q
            .strip_prefix("label_values(")
            .and_then(|a| a.strip_suffix(')'))
            .unwrap_or_else(|| panic!("variable {}: not label_values(…): {q}", v["name"]));
        let (series, label) = args.rsplit_once(',').expect("label_values(series, label)");
        out.push(Query {
            at: format!("spillway.json variable {}", v["name"]),
            expr: series.to_owned(),
            templates: vec![format!("{{{{{}}}}}", label.trim())],
        });
    }
    out
}

/// Problems with `q`: a metric the daemon does not export (nor a rule
/// records), a matcher's or template's label its metrics do not carry.
fn check(
    q: &Query,
    daemon: &Catalogue,
    recorded: &BTreeMap<String, BTreeSet<String>>,
) -> Vec<String> {
    let n = names(&q.expr);
    let mut problems = Vec::new();
    if n.selectors.is_empty() {
        problems.push(format!("{}: names no metric: {}", q.at, q.expr));
    }
    // The labels the result can carry: None while some metric's are unknown.
    let mut carried: Option<BTreeSet<String>> =
        Some(TARGET_LABELS.iter().map(|s| (*s).to_owned()).collect());
    for (metric, matchers) in &n.selectors {
        let labels = if let Some(l) = recorded.get(metric) {
            Some(l.clone())
        } else if let Some(l) = daemon.get(metric) {
            l.clone()
        } else if PROMETHEUS_MADE.contains(&metric.as_str()) {
            Some(BTreeSet::new())
        } else {
            problems.push(format!(
                "{}: {metric} is not a metric the daemon exports",
                q.at
            ));
            None
        };
        match labels {
            Some(l) => {
                for m in matchers {
                    if !l.contains(m) && !TARGET_LABELS.contains(&m.as_str()) {
                        problems.push(format!("{}: {metric} has no label {m}", q.at));
                    }
                }
                if let Some(c) = &mut carried {
                    c.extend(l);
                }
            }
            None => carried = None,
        }
    }
    if let Some(c) = carried {
        for t in &q.templates {
            for l in template_labels(t) {
                if !c.contains(&l) {
                    problems.push(format!(
                        "{}: {l} in {t:?} is a label none of its metrics has",
                        q.at
                    ));
                }
            }
        }
    }
    problems
}

/// Recording rules: their names and the labels they keep (their `by`).
fn recorded() -> BTreeMap<String, BTreeSet<String>> {
    rules()
        .iter()
        .filter_map(|r| {
            let name = r["record"].as_str()?;
            Some((
                name.to_owned(),
                names(r["expr"].as_str().expect("expr")).grouping,
            ))
        })
        .collect()
}

#[test]
fn the_query_reader_finds_metrics_and_labels() {
    let n = names(
        "sum by (instance, reason) (rate(spillway_dropped_packets_total{reason!~\"no_rule|x{\", instance=~\"$instance\"}[$__rate_interval] offset 1h)) \
         > 2 * on (instance) group_left (rule) up{job='spillway'} # a comment spillway_commented\n\
         / ignoring(worker) (spillway_flow_table_entries + 1e-3) and ${x} unless spillway_x:rate5m[5m:1m]",
    );
    let labels = |l: &[&str]| l.iter().map(|s| (*s).to_owned()).collect::<BTreeSet<_>>();
    assert_eq!(
        n,
        Names {
            selectors: vec![
                (
                    "spillway_dropped_packets_total".into(),
                    labels(&["reason", "instance"])
                ),
                ("up".into(), labels(&["job"])),
                ("spillway_flow_table_entries".into(), labels(&[])),
                ("spillway_x:rate5m".into(), labels(&[])),
            ],
            grouping: labels(&["instance", "reason", "rule", "worker"]),
        }
    );
    assert_eq!(
        template_labels("{{ $labels.service }} at {{$value | humanize}} {{rule}}"),
        labels(&["service", "rule"])
    );
}

#[test]
fn every_query_names_metrics_and_labels_the_daemon_exports() {
    let daemon = catalogue();
    let recorded = recorded();
    assert!(recorded.len() >= 5, "{recorded:?}");
    for name in recorded.keys() {
        assert!(
            !daemon.contains_key(name),
            "{name}: a recording rule named like a metric of the daemon"
        );
    }
    let queries = queries();
    assert!(queries.len() > 60, "{} queries", queries.len());
    let problems: Vec<String> = queries
        .iter()
        .flat_map(|q| check(q, &daemon, &recorded))
        .collect();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn alert_rules_pass_promtool_check_and_their_unit_tests() {
    let dir = prometheus_dir();
    let out = common::run_ok(
        Command::new("promtool")
            .args(["check", "rules", "alerts.yml"])
            .current_dir(&dir),
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("SUCCESS"), "{said}");
    let out = common::run_ok(
        Command::new("promtool")
            .args(["test", "rules", "alerts_test.yml"])
            .current_dir(&dir),
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("SUCCESS"), "{said}");
}

/// Each alert of alerts.yml is expected firing at one time and not firing
/// at another in alerts_test.yml; every group has a name and a severity.
#[test]
fn every_alert_is_unit_tested_firing_and_not_firing() {
    let alerts: Vec<(String, Value)> = rules()
        .into_iter()
        .filter_map(|r| Some((r["alert"].as_str()?.to_owned(), r)))
        .collect();
    assert!(alerts.len() >= 12, "{} alerts", alerts.len());
    let tests = yaml(&prometheus_dir().join("alerts_test.yml"));
    let mut seen: BTreeMap<String, (bool, bool)> = BTreeMap::new();
    for t in tests["tests"].as_array().expect("tests") {
        for a in t["alert_rule_test"].as_array().into_iter().flatten() {
            let name = a["alertname"].as_str().expect("alertname").to_owned();
            let firing = a["exp_alerts"].as_array().is_some_and(|e| !e.is_empty());
            let e = seen.entry(name).or_default();
            if firing {
                e.0 = true;
            } else {
                e.1 = true;
            }
        }
    }
    let mut problems = Vec::new();
    for (name, rule) in &alerts {
        match seen.get(name) {
            Some((true, true)) => {}
            Some((fires, _)) => problems.push(format!(
                "{name}: alerts_test.yml never expects it {}",
                if *fires { "silent" } else { "firing" }
            )),
            None => problems.push(format!("{name}: not in alerts_test.yml")),
        }
        let severity = rule["labels"]["severity"].as_str().unwrap_or("");
        if !["critical", "warning"].contains(&severity) {
            problems.push(format!("{name}: severity {severity:?}"));
        }
        for a in ["summary", "description"] {
            if rule["annotations"][a].as_str().is_none_or(str::is_empty) {
                problems.push(format!("{name}: no {a}"));
            }
        }
    }
    for name in seen.keys() {
        if !alerts.iter().any(|(a, _)| a == name) {
            problems.push(format!(
                "alerts_test.yml tests {name}, which alerts.yml lacks"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Grafana's variables replaced by what they stand for at query time.
fn substitute(expr: &str) -> String {
    expr.replace("$__rate_interval", "1m")
        .replace("$__range", "1h")
        .replace("$instance", ".*")
        .replace("$service", ".*")
}

/// Every dashboard query parses as PromQL: Prometheus's own parser reads
/// them as recording rules (`promtool check rules`).
#[test]
fn dashboard_queries_parse_as_promql() {
    let d = dashboard();
    let mut file = String::from("groups:\n  - name: dashboard\n    rules:\n");
    let mut n = 0;
    for p in panels(&d) {
        for t in p["targets"].as_array().into_iter().flatten() {
            let expr = substitute(t["expr"].as_str().expect("expr"));
            assert!(!expr.contains('$'), "a variable left in {expr}");
            n += 1;
            file.push_str(&format!(
                "      - record: dashboard:query{n}\n        expr: {}\n",
                serde_json::to_string(&expr).expect("quoted")
            ));
        }
    }
    let dir = std::env::temp_dir().join(format!("spillway-monitoring-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("dashboard-rules.yml");
    std::fs::write(&path, &file).expect("rules file");
    let out = common::output(Command::new("promtool").args(["check", "rules"]).arg(&path));
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "{}{}\n{file}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(n > 40, "{n} queries");
}

/// What Grafana needs to import the dashboard and draw every panel: a
/// title and uid, a Prometheus datasource variable every panel and target
/// uses, the node and service variables, panels with unique ids inside the
/// 24-column grid, each with targets of unique refIds and a non-empty
/// query, and the rows an operator looks for.
#[test]
fn dashboard_is_well_formed() {
    let d = dashboard();
    let mut problems = Vec::new();
    for k in ["title", "uid"] {
        if d[k].as_str().is_none_or(str::is_empty) {
            problems.push(format!("no {k}"));
        }
    }
    if d["schemaVersion"].as_u64().is_none_or(|v| v < 30) {
        problems.push(format!("schemaVersion {}", d["schemaVersion"]));
    }
    let vars: BTreeMap<&str, &Value> = d["templating"]["list"]
        .as_array()
        .expect("templating.list")
        .iter()
        .map(|v| (v["name"].as_str().expect("variable name"), v))
        .collect();
    match vars.get("datasource") {
        Some(v) if v["type"] == "datasource" && v["query"] == "prometheus" => {}
        other => problems.push(format!("no Prometheus datasource variable: {other:?}")),
    }
    for v in ["instance", "service"] {
        if vars.get(v).is_none_or(|v| v["type"] != "query") {
            problems.push(format!("no query variable {v}"));
        }
    }
    let ds_ok = |ds: &Value| ds["type"] == "prometheus" && ds["uid"] == "${datasource}";
    let mut ids = BTreeSet::new();
    let mut rows = BTreeSet::new();
    let all = panels(&d);
    for p in &all {
        let title = p["title"].as_str().unwrap_or("");
        let id = p["id"].as_u64();
        if title.is_empty() || id.is_none() || !ids.insert(id) {
            problems.push(format!("panel {id:?} {title:?}: a title and a unique id"));
        }
        let g = &p["gridPos"];
        let (x, w, h) = (g["x"].as_u64(), g["w"].as_u64(), g["h"].as_u64());
        if !matches!((x, w, h, g["y"].as_u64()), (Some(x), Some(w), Some(h), Some(_)) if w > 0 && h > 0 && x + w <= 24)
        {
            problems.push(format!("panel {title:?}: gridPos {g}"));
        }
        let kind = p["type"].as_str().unwrap_or("");
        if kind == "row" {
            rows.insert(title.to_owned());
            continue;
        }
        if ![
            "timeseries",
            "stat",
            "table",
            "state-timeline",
            "gauge",
            "bargauge",
        ]
        .contains(&kind)
        {
            problems.push(format!("panel {title:?}: type {kind:?}"));
        }
        if !ds_ok(&p["datasource"]) {
            problems.push(format!("panel {title:?}: datasource {}", p["datasource"]));
        }
        let targets = p["targets"].as_array().cloned().unwrap_or_default();
        if targets.is_empty() {
            problems.push(format!("panel {title:?}: no targets"));
        }
        let mut refs = BTreeSet::new();
        for t in &targets {
            if !refs.insert(t["refId"].as_str().unwrap_or("").to_owned())
                || t["refId"].as_str().is_none()
            {
                problems.push(format!("panel {title:?}: refIds {targets:?}"));
            }
            if t["expr"].as_str().is_none_or(|e| e.trim().is_empty()) || !ds_ok(&t["datasource"]) {
                problems.push(format!("panel {title:?}: target {t}"));
            }
        }
    }
    for want in [
        "Traffic",
        "Drops",
        "Health",
        "Locality and spillover",
        "Flow table",
        "BGP",
        "Flow sync and cluster",
    ] {
        if !rows.contains(want) {
            problems.push(format!("no row {want:?} (rows: {rows:?})"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
