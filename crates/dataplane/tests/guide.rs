//! The operator's guide (`docs/guide.md`) against the data plane: it
//! explains every drop reason the data plane counts, and only those (its
//! "Drop reasons" table has one row per [`DropReason::ALL`] entry, named as
//! `spillway stats` and the label of `spillway_dropped_packets_total` name
//! it, with a meaning and an action), and its delivery-mode and MTU tables
//! list every mode with the overhead the snapshot actually allows for.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use dataplane::{DropReason, EndpointHealth, Local, SnapshotBuilder};
use testkit::config::{Config, group, port, rule, service};

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

/// The delivery modes the configuration accepts, from the parser's refusal
/// of an unknown one (so that a new mode is noticed here without a list).
fn delivery_modes() -> Vec<String> {
    let text = Config::new()
        .rule(rule("web", &["10.0.0.10"], "TCP", "80", "web"))
        .service(service("web", "zzz_probe").endpoints(&["10.0.1.11"]))
        .build();
    let err = match config::load_str("probe.toml", &text, &config::Env::default()) {
        Ok(_) => panic!("delivery \"zzz_probe\" was accepted"),
        Err(e) => e.to_string(),
    };
    let list = err
        .split("expected one of ")
        .nth(1)
        .unwrap_or_else(|| panic!("not an unknown-variant error: {err}"));
    list.lines()
        .next()
        .unwrap_or_default()
        .split(", ")
        .map(|m| m.trim().trim_matches('`').to_owned())
        .collect()
}

/// The rows of the guide's table whose header starts with `header`, as
/// cells (first cell without its backquotes).
fn table_rows(header: &str) -> Vec<Vec<String>> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/guide.md");
    let guide = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    let at = guide
        .find(&format!("\n{header}"))
        .unwrap_or_else(|| panic!("docs/guide.md has a table headed {header:?}"));
    guide[at + 1..]
        .lines()
        .skip(2) // the header and its rule
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            let mut cells: Vec<String> = l
                .trim_matches('|')
                .split('|')
                .map(|c| c.trim().to_owned())
                .collect();
            cells[0] = cells[0].trim_matches('`').to_owned();
            cells
        })
        .collect()
}

/// The first number of a cell and the one in parentheses, if any
/// (`24 (28 with a key)` → 24, Some(28)).
fn numbers(cell: &str) -> (u32, Option<u32>) {
    let num = |s: &str| -> Option<u32> {
        let digits: String = s
            .trim_start()
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse().ok()
    };
    let first = num(cell).unwrap_or_else(|| panic!("a number first: {cell:?}"));
    let paren = cell.split_once('(').and_then(|(_, r)| num(r));
    (first, paren)
}

/// The largest inner packet the snapshot lets through to the one endpoint
/// of a 1500-byte uplink's service over `delivery`, with `extra` set on the
/// service; a gateway rule's appliance with `gateway`.
fn max_inner(delivery: &str, v6: bool, extra: Option<(&str, &str)>, gateway: bool) -> u32 {
    let (vip, endpoint) = match (delivery, v6) {
        // l2dsr: the endpoint on the port's subnet, of the VIP's family,
        // with a static MAC (resolution is not what this checks).
        ("l2dsr", false) => (
            "10.0.0.10",
            "{ address = \"10.0.0.11\", mac = \"02:00:00:00:00:11\" }",
        ),
        ("l2dsr", true) => (
            "2001:db8::10",
            "{ address = \"2001:db8::11\", mac = \"02:00:00:00:00:11\" }",
        ),
        // Tunnels: an IPv4 VIP (every mode carries it over both families)
        // to an endpoint off the port's subnets, through the static gateway.
        (_, false) => ("10.0.0.10", "{ address = \"10.0.1.11\" }"),
        (_, true) => ("10.0.0.10", "{ address = \"2001:db8:1::11\" }"),
    };
    let mut r = rule(
        "web",
        &[vip],
        if gateway { "L3_DEFAULT" } else { "TCP" },
        if gateway { "all" } else { "80" },
        "web",
    );
    if gateway {
        r = r
            .str("mode", "gateway")
            .set("gateway_endpoints", "[{ address = \"10.0.0.1\", id = 1 }]");
    }
    let mut s = service("web", delivery);
    if let Some((k, v)) = extra {
        s = s.set(k, v);
    }
    let cfg = Config::new()
        .port(
            port("up", "net_ring0", "uplink")
                .strs("addresses", &["10.0.0.2/24", "2001:db8::2/64"])
                .str("mac", "02:00:00:00:00:01")
                .str("gateway_mac", "02:00:00:00:00:fe")
                .set("mtu", 1500),
        )
        .rule(r)
        .service(s.child(group("a", "r", "z").set("endpoints", format!("[{endpoint}]"))));
    let compiled = match config::load_str("test.toml", &cfg.build(), &config::Env::default()) {
        Ok(l) => Arc::new(l.compiled),
        Err(e) => panic!("{delivery} config rejected:\n{e}"),
    };
    let local = Local::from_config(&compiled, |_| None);
    let snap = SnapshotBuilder::new()
        .build(compiled, local, |_| EndpointHealth::HEALTHY, 0, 1)
        .expect("snapshot");
    assert_eq!(snap.backends.len(), 1, "{delivery}");
    let be = &snap.backends[0];
    assert!(
        delivery == "l2dsr" || be.encap.is_some() || be.gateway_encap.is_some(),
        "{delivery}: no encapsulation template built"
    );
    be.max_ip_len
}

#[test]
fn guide_tables_cover_every_delivery_mode_with_the_right_overheads() {
    let modes = delivery_modes();
    assert!(modes.len() >= 5, "{modes:?}");
    let concepts: Vec<String> = table_rows("| `delivery` | on the wire |")
        .into_iter()
        .map(|c| c[0].clone())
        .collect();
    assert_eq!(
        concepts, modes,
        "docs/guide.md: the delivery-mode table's rows"
    );
    let mtu = table_rows("| `delivery` | added over IPv4 |");
    let names: Vec<&str> = mtu.iter().map(|c| c[0].as_str()).collect();
    assert_eq!(names, modes, "docs/guide.md: the MTU table's rows");
    for row in &mtu {
        let mode = row[0].as_str();
        assert_eq!(row.len(), 5, "{mode}: {row:?}");
        // The variant in parentheses: GRE with a key, GENEVE of a gateway rule.
        let variant = |v6: bool| match mode {
            "gre" => Some(max_inner(mode, v6, Some(("gre_key", "42")), false)),
            "geneve" => Some(max_inner(mode, v6, None, true)),
            _ => None,
        };
        for (v6, cell) in [(false, &row[1]), (true, &row[2])] {
            let overhead = |inner: u32| 1500 - inner;
            let (base, paren) = numbers(cell);
            assert_eq!(
                base,
                overhead(max_inner(mode, v6, None, false)),
                "docs/guide.md: {mode} overhead over {}",
                if v6 { "IPv6" } else { "IPv4" }
            );
            assert_eq!(
                paren,
                variant(v6).map(overhead),
                "docs/guide.md: {mode}: {cell:?}"
            );
        }
        // The arithmetic of the last two columns, on a 1500-byte path over IPv4.
        let (v4, v4_paren) = numbers(&row[1]);
        let (inner, inner_paren) = numbers(&row[3]);
        let (mss, mss_paren) = numbers(&row[4]);
        assert_eq!(inner, 1500 - v4, "{mode}: {row:?}");
        assert_eq!(inner_paren, v4_paren.map(|o| 1500 - o), "{mode}: {row:?}");
        assert_eq!(mss, inner - 40, "{mode}: {row:?}");
        assert_eq!(mss_paren, inner_paren.map(|i| i - 40), "{mode}: {row:?}");
    }
}
