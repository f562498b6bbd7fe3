//! Configuration text (TOML) for tests: the common shapes — node, data
//! plane settings, ports, forwarding rules, backend services with groups and
//! endpoints, health checks — plus raw fragments for anything else.
//!
//! The builders only write text; `config::load_str` parses it (this kit's
//! tests check every shape does). Values are written as TOML: `str` quotes
//! its argument, `set` takes the value as raw TOML (`"80"`, `true`,
//! `["a", "b"]`, `{ port = 6081 }`), replacing an earlier one of that key.

use std::fmt;

/// A TOML table: `[name]`, or `[[name]]` when `array`, its `key = value`
/// lines in order, then its sub-tables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    name: String,
    array: bool,
    entries: Vec<(String, String)>,
    children: Vec<Table>,
}

/// `s` as a TOML string.
pub fn quote(s: &str) -> String {
    format!("{s:?}")
}

/// `items` as a TOML array of strings.
pub fn strings<S: AsRef<str>>(items: &[S]) -> String {
    let v: Vec<String> = items.iter().map(|s| quote(s.as_ref())).collect();
    format!("[{}]", v.join(", "))
}

impl Table {
    /// An empty `[name]` table.
    pub fn new(name: &str) -> Table {
        Table {
            name: name.to_string(),
            array: false,
            entries: Vec::new(),
            children: Vec::new(),
        }
    }

    /// An empty `[[name]]` element.
    pub fn element(name: &str) -> Table {
        Table {
            array: true,
            ..Table::new(name)
        }
    }

    /// `key = value` with `value` raw TOML (replaces an earlier `key`).
    pub fn set(mut self, key: &str, value: impl fmt::Display) -> Table {
        let value = value.to_string();
        match self.entries.iter_mut().find(|(k, _)| k == key) {
            Some(e) => e.1 = value,
            None => self.entries.push((key.to_string(), value)),
        }
        self
    }

    /// `key = "value"`.
    pub fn str(self, key: &str, value: &str) -> Table {
        self.set(key, quote(value))
    }

    /// `key = ["a", "b", …]`.
    pub fn strs<S: AsRef<str>>(self, key: &str, values: &[S]) -> Table {
        self.set(key, strings(values))
    }

    /// Removes `key`.
    pub fn unset(mut self, key: &str) -> Table {
        self.entries.retain(|(k, _)| k != key);
        self
    }

    /// Appends a sub-table (its name is written in full, e.g.
    /// `backend_services.groups`).
    pub fn child(mut self, t: Table) -> Table {
        self.children.push(t);
        self
    }

    /// The value of `key` as written, if set.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.entries
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// A backend service's group `g` (region "r", zone "z") of
    /// `endpoints` (see [`endpoint_list`]).
    pub fn endpoints<S: AsRef<str>>(self, endpoints: &[S]) -> Table {
        self.child(group("g", "r", "z").set("endpoints", endpoint_list(endpoints)))
    }
}

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.array {
            writeln!(f, "[[{}]]", self.name)?;
        } else {
            writeln!(f, "[{}]", self.name)?;
        }
        for (k, v) in &self.entries {
            writeln!(f, "{k} = {v}")?;
        }
        for c in &self.children {
            write!(f, "{c}")?;
        }
        Ok(())
    }
}

/// `endpoints` as a TOML array: an address becomes `{ address = "…" }`; an
/// item starting with `{` is taken as a raw inline table
/// (`{ address = "10.0.1.1", port = 80, mac = "02:…" }`).
pub fn endpoint_list<S: AsRef<str>>(endpoints: &[S]) -> String {
    let v: Vec<String> = endpoints
        .iter()
        .map(|e| {
            let e = e.as_ref();
            if e.starts_with('{') {
                e.to_string()
            } else {
                format!("{{ address = {} }}", quote(e))
            }
        })
        .collect();
    format!("[{}]", v.join(", "))
}

/// `count` addresses `prefix1`, `prefix2`, … (e.g. "10.1.1." or "2001:db8:200::").
pub fn addrs(prefix: &str, count: usize) -> Vec<String> {
    (1..=count).map(|i| format!("{prefix}{i}")).collect()
}

/// `[node]`.
pub fn node(name: &str, region: &str, zone: &str) -> Table {
    Table::new("node")
        .str("name", name)
        .str("region", region)
        .str("zone", zone)
}

/// A `[[ports]]` element; `role` is "uplink", "backend" or "exception".
pub fn port(name: &str, device: &str, role: &str) -> Table {
    Table::element("ports")
        .str("name", name)
        .str("device", device)
        .str("role", role)
}

/// A `[[forwarding_rules]]` element; `ports` is written as a string ("80",
/// "80-90", "all"; `set("ports", "80")` writes an integer).
pub fn rule<S: AsRef<str>>(
    name: &str,
    vips: &[S],
    protocol: &str,
    ports: &str,
    service: &str,
) -> Table {
    Table::element("forwarding_rules")
        .str("name", name)
        .strs("vips", vips)
        .str("protocol", protocol)
        .str("ports", ports)
        .str("backend_service", service)
}

/// A `[[backend_services]]` element; add groups with [`Table::child`] and
/// [`group`], or one default group with [`Table::endpoints`].
pub fn service(name: &str, delivery: &str) -> Table {
    Table::element("backend_services")
        .str("name", name)
        .str("delivery", delivery)
}

/// A `[[backend_services.groups]]` element (set "endpoints" with
/// [`endpoint_list`]).
pub fn group(name: &str, region: &str, zone: &str) -> Table {
    Table::element("backend_services.groups")
        .str("name", name)
        .str("region", region)
        .str("zone", zone)
}

/// A `[[health_checks]]` element; `kind` is "TCP", "HTTP" or "HTTPS".
pub fn health_check(name: &str, kind: &str) -> Table {
    Table::element("health_checks")
        .str("name", name)
        .str("type", kind)
}

/// A whole configuration: `[node]` (default `t`/`r`/`z`), an optional
/// `[dataplane]`, then ports, rules, services, health checks and raw
/// fragments, each section in the order added.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    node: Table,
    dataplane: Option<Table>,
    ports: Vec<Table>,
    rules: Vec<Table>,
    services: Vec<Table>,
    checks: Vec<Table>,
    raw: Vec<String>,
}

impl Default for Config {
    fn default() -> Config {
        Config::new()
    }
}

impl Config {
    /// Node `t` in region `r`, zone `z` (the default group's), nothing else.
    pub fn new() -> Config {
        Config {
            node: node("t", "r", "z"),
            dataplane: None,
            ports: Vec::new(),
            rules: Vec::new(),
            services: Vec::new(),
            checks: Vec::new(),
            raw: Vec::new(),
        }
    }

    /// Replaces `[node]` (see [`node`]).
    pub fn node(mut self, node: Table) -> Config {
        self.node = node;
        self
    }

    /// Sets `key = value` (raw TOML) in `[dataplane]`.
    pub fn dataplane(mut self, key: &str, value: impl fmt::Display) -> Config {
        let t = self
            .dataplane
            .take()
            .unwrap_or_else(|| Table::new("dataplane"));
        self.dataplane = Some(t.set(key, value));
        self
    }

    /// Adds a port ([`port`]).
    pub fn port(mut self, p: Table) -> Config {
        self.ports.push(p);
        self
    }

    /// Adds a forwarding rule ([`rule`]).
    pub fn rule(mut self, r: Table) -> Config {
        self.rules.push(r);
        self
    }

    /// Adds a backend service ([`service`]).
    pub fn service(mut self, s: Table) -> Config {
        self.services.push(s);
        self
    }

    /// Adds a health check ([`health_check`]).
    pub fn health_check(mut self, c: Table) -> Config {
        self.checks.push(c);
        self
    }

    /// Appends raw TOML text at the end.
    pub fn raw(mut self, text: &str) -> Config {
        self.raw.push(text.to_string());
        self
    }

    /// The TOML text (also [`fmt::Display`]).
    pub fn build(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.node)?;
        let tables = self
            .dataplane
            .iter()
            .chain(&self.ports)
            .chain(&self.rules)
            .chain(&self.services)
            .chain(&self.checks);
        for t in tables {
            write!(f, "\n{t}")?;
        }
        for r in &self.raw {
            write!(f, "\n{r}")?;
            if !r.ends_with('\n') {
                writeln!(f)?;
            }
        }
        Ok(())
    }
}
