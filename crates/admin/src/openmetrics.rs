//! OpenMetrics text (M42), as every `/metrics` of the project writes it:
//! the daemon's (`control::metrics`) and the zone health service's. A
//! scrape gathers its families into an [`Exposition`], in the order they
//! are added, and [`Exposition::text`] writes them and `# EOF`.
//!
//! The text is byte for byte what `prometheus-client`'s encoder wrote for
//! these families before this module (issue 40; control's
//! `tests/metrics_*.golden` and zonehealth's `metrics_text_is_unchanged`
//! pin it): per family a `# HELP` and a `# TYPE` line, then its samples, a
//! counter's named `…_total`; label values escaped as the format says;
//! integers in decimal; fractions as `dtoa` writes them (`1.0`, `1e-7`),
//! and a sample whose value is not finite left out.

use std::fmt::Write as _;

/// The start of every family's name: `spillway_`, then the name given.
pub const PREFIX: &str = "spillway";

/// A sample's labels: names and (unescaped) values.
pub type Labels = Vec<(&'static str, String)>;

/// A sample's value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value {
    /// A count.
    Count(u64),
    /// A signed integer (states, flags).
    Int(i64),
    /// A measurement (rates, ratios); not written unless finite.
    Real(f64),
}

impl From<u64> for Value {
    fn from(v: u64) -> Self {
        Value::Count(v)
    }
}
impl From<u32> for Value {
    fn from(v: u32) -> Self {
        Value::Count(v.into())
    }
}
impl From<u8> for Value {
    fn from(v: u8) -> Self {
        Value::Count(v.into())
    }
}
impl From<i8> for Value {
    fn from(v: i8) -> Self {
        Value::Int(v.into())
    }
}
impl From<i64> for Value {
    fn from(v: i64) -> Self {
        Value::Int(v)
    }
}
impl From<f64> for Value {
    fn from(v: f64) -> Self {
        Value::Real(v)
    }
}
impl From<bool> for Value {
    fn from(v: bool) -> Self {
        Value::Count(v.into())
    }
}

/// A family's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up; its samples are named `…_total`.
    Counter,
    /// Goes up and down.
    Gauge,
}

#[derive(Debug)]
struct Family {
    /// After `spillway_`; a counter's ends with `_total`.
    name: String,
    help: String,
    kind: Kind,
    samples: Vec<(Labels, Value)>,
}

/// One scrape's metric families, in the order they are added.
#[derive(Debug, Default)]
pub struct Exposition {
    families: Vec<Family>,
}

impl Exposition {
    /// An empty exposition.
    pub fn new() -> Self {
        Self::default()
    }

    /// A counter family `spillway_<name>` (`name` ends with `_total`).
    pub fn counter(
        &mut self,
        name: &str,
        help: &str,
        samples: impl IntoIterator<Item = (Labels, u64)>,
    ) {
        self.push(
            name,
            help,
            Kind::Counter,
            samples.into_iter().map(|(l, v)| (l, v.into())),
        );
    }

    /// A gauge family `spillway_<name>`.
    pub fn gauge<V: Into<Value>>(
        &mut self,
        name: &str,
        help: &str,
        samples: impl IntoIterator<Item = (Labels, V)>,
    ) {
        self.push(
            name,
            help,
            Kind::Gauge,
            samples.into_iter().map(|(l, v)| (l, v.into())),
        );
    }

    /// A counter without labels.
    pub fn one_counter(&mut self, name: &str, help: &str, v: u64) {
        self.counter(name, help, [(Labels::new(), v)]);
    }

    /// A gauge without labels.
    pub fn one_gauge(&mut self, name: &str, help: &str, v: impl Into<Value>) {
        self.gauge(name, help, [(Labels::new(), v)]);
    }

    fn push(
        &mut self,
        name: &str,
        help: &str,
        kind: Kind,
        samples: impl Iterator<Item = (Labels, Value)>,
    ) {
        self.families.push(Family {
            name: name.to_owned(),
            help: help.to_owned(),
            kind,
            samples: samples.collect(),
        });
    }

    /// The families' names (after `spillway_`), in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.families.iter().map(|f| f.name.as_str())
    }

    /// The families' names (after `spillway_`) and types, in order.
    pub fn families(&self) -> impl Iterator<Item = (&str, Kind)> {
        self.families.iter().map(|f| (f.name.as_str(), f.kind))
    }

    /// The OpenMetrics text, ending with `# EOF`.
    pub fn text(self) -> String {
        let mut out = String::new();
        for f in &self.families {
            f.write(&mut out);
        }
        out.push_str("# EOF\n");
        out
    }
}

impl Family {
    /// `# HELP`, `# TYPE` and the samples.
    fn write(&self, out: &mut String) {
        // The family is named without `_total`, its samples with it.
        let (base, kind, suffix) = match self.kind {
            Kind::Counter => (
                self.name.strip_suffix("_total").unwrap_or(&self.name),
                "counter",
                "_total",
            ),
            Kind::Gauge => (self.name.as_str(), "gauge", ""),
        };
        // (Writing to a String cannot fail.)
        let _ = write!(
            out,
            "# HELP {PREFIX}_{base} {}\n# TYPE {PREFIX}_{base} {kind}\n",
            self.help
        );
        for (labels, v) in &self.samples {
            if matches!(v, Value::Real(x) if !x.is_finite()) {
                continue;
            }
            let _ = write!(out, "{PREFIX}_{base}{suffix}");
            if !labels.is_empty() {
                out.push('{');
                for (i, (k, v)) in labels.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(k);
                    out.push_str("=\"");
                    escape_into(out, v);
                    out.push('"');
                }
                out.push('}');
            }
            out.push(' ');
            write_value(out, self.kind, *v);
            out.push('\n');
        }
    }
}

/// A label value as the text format quotes it.
fn escape_into(out: &mut String, v: &str) {
    for ch in v.chars() {
        match ch {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// A counter is never negative; a gauge is signed (a count past
/// `i64::MAX` shows as `i64::MAX`).
fn write_value(out: &mut String, kind: Kind, v: Value) {
    let _ = match (kind, v) {
        (Kind::Counter, Value::Count(n)) => write!(out, "{n}"),
        (Kind::Counter, Value::Int(n)) => write!(out, "{}", u64::try_from(n).unwrap_or(0)),
        (Kind::Gauge, Value::Count(n)) => {
            write!(out, "{}", i64::try_from(n).unwrap_or(i64::MAX))
        }
        (Kind::Gauge, Value::Int(n)) => write!(out, "{n}"),
        // Not the shortest form that reads back (Rust's `{}`): dtoa's, as
        // scrapes have always seen it (`1.0`, `1e21`).
        (_, Value::Real(x)) => {
            out.push_str(dtoa::Buffer::new().format(x));
            Ok(())
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn label(k: &'static str, v: &str) -> Labels {
        vec![(k, v.to_owned())]
    }

    #[test]
    fn families_are_written_whole_as_openmetrics() {
        let mut x = Exposition::new();
        x.one_counter("a_total", "A.", 1);
        x.counter(
            "b_total",
            "B.",
            [(label("x", "1"), 2), (label("x", "say \"hi\"\\\n"), 3)],
        );
        x.gauge(
            "c",
            "C.",
            [(label("y", "z"), f64::INFINITY), (label("y", "w"), 0.5)],
        );
        assert_eq!(
            x.text(),
            "# HELP spillway_a A.\n# TYPE spillway_a counter\nspillway_a_total 1\n\
             # HELP spillway_b B.\n# TYPE spillway_b counter\n\
             spillway_b_total{x=\"1\"} 2\nspillway_b_total{x=\"say \\\"hi\\\"\\\\\\n\"} 3\n\
             # HELP spillway_c C.\n# TYPE spillway_c gauge\nspillway_c{y=\"w\"} 0.5\n# EOF\n"
        );
    }

    #[test]
    fn values_are_written_as_their_kind_allows() {
        let mut x = Exposition::new();
        x.gauge(
            "g",
            "G.",
            [
                (label("v", "big"), Value::Count(u64::MAX)),
                (label("v", "neg"), Value::Int(-1)),
                (label("v", "one"), Value::Real(1.0)),
                (label("v", "tiny"), Value::Real(1e-7)),
                (label("v", "nan"), Value::Real(f64::NAN)),
            ],
        );
        x.one_counter("c", "Named without _total.", 3);
        x.counter("e_total", "Empty.", []);
        assert_eq!(
            x.families().collect::<Vec<_>>(),
            [
                ("g", Kind::Gauge),
                ("c", Kind::Counter),
                ("e_total", Kind::Counter)
            ]
        );
        assert_eq!(
            x.text(),
            "# HELP spillway_g G.\n# TYPE spillway_g gauge\n\
             spillway_g{v=\"big\"} 9223372036854775807\nspillway_g{v=\"neg\"} -1\n\
             spillway_g{v=\"one\"} 1.0\nspillway_g{v=\"tiny\"} 1e-7\n\
             # HELP spillway_c Named without _total.\n# TYPE spillway_c counter\nspillway_c_total 3\n\
             # HELP spillway_e Empty.\n# TYPE spillway_e counter\n# EOF\n"
        );
    }
}
