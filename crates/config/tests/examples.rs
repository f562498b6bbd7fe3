//! The files in `config/`: each loads on this machine, warned only of the
//! fields this version does not act on yet. That `reference.toml` documents
//! every field of the schema is `tests/reference.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

use std::path::{Path, PathBuf};

use config::{Env, load, load_str};

fn config_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config")
}

fn files() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(config_dir())
        .expect("config/ exists")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    v.sort();
    v
}

/// Warnings an example is meant to get, by file and field path: what the
/// example shows on purpose (a bare-metal node serves /metrics on its
/// management network, which check-config points out).
const EXPECTED_WARNINGS: &[(&str, &str)] = &[("bare-metal-two-nic.toml", "metrics.listen")];

/// The field path of a warning (`warning: FILE:LINE:COL: PATH: message`).
fn warned_path(w: &str) -> &str {
    w.split(": ").nth(2).unwrap_or_default()
}

#[test]
fn every_example_loads_warned_only_of_unused_fields() {
    let files = files();
    let names: Vec<String> = files
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    for want in [
        "reference.toml",
        "lab.toml",
        "two-region-spillover.toml",
        "geneve-gateway.toml",
        "ipv6.toml",
        "bare-metal-two-nic.toml",
        "vrrp-pair.toml",
    ] {
        assert!(
            names.iter().any(|n| n == want),
            "config/{want} exists: {names:?}"
        );
    }
    for f in &files {
        let l = load(f).unwrap_or_else(|e| panic!("{}:\n{e}", f.display()));
        // Warnings that the configuration may be wrong have no place in an
        // example, unless it is there to show them (EXPECTED_WARNINGS); that
        // a written field is not used yet, the examples show.
        let name = f.file_name().unwrap().to_string_lossy();
        let expected: Vec<&str> = EXPECTED_WARNINGS
            .iter()
            .filter(|(file, _)| *file == name)
            .map(|(_, path)| *path)
            .collect();
        assert!(
            l.warnings
                .iter()
                .all(|w| w.contains(": not used by this version:")
                    || w.contains(": gateway mode is not used by this version:")
                    || expected.contains(&warned_path(w))),
            "{}: {:?}",
            f.display(),
            l.warnings
        );
        for path in &expected {
            assert!(
                l.warnings.iter().any(|w| warned_path(w) == *path),
                "{}: expected a warning on {path}: {:?}",
                f.display(),
                l.warnings
            );
        }
        // The examples are meant to run on the two-core lab machine too.
        let text = std::fs::read_to_string(f).unwrap();
        load_str("x", &text, &Env::with_cpus(2)).unwrap_or_else(|e| panic!("{e}"));
    }
}

#[test]
fn examples_show_what_they_say() {
    let c = |name: &str| load(&config_dir().join(name)).unwrap().compiled;
    let pair = c("vrrp-pair.toml");
    let g = &pair.settings.vrrp[0];
    assert_eq!((g.vrid, g.priority, g.preempt), (51, 150, true));
    assert!(pair.settings.bgp.is_none(), "VRRP fails over without BGP");
    assert!(
        pair.settings.flow_sync.is_some(),
        "the backup has the flows"
    );
    assert!(pair.rule_index.is_vip(g.vips[0]));
    let v6 = c("ipv6.toml");
    let m = v6
        .rule_index
        .lookup("2001:db8:f00::11".parse().unwrap(), 58, None)
        .unwrap();
    assert_eq!(v6.children[m.child.index()].name, "rest6-ag1");
    let m = v6
        .rule_index
        .lookup("2001:db8:f00::10".parse().unwrap(), 17, Some(443))
        .unwrap();
    assert_eq!(v6.children[m.child.index()].name, "quic6-ag0");

    let gw = c("geneve-gateway.toml");
    let ep = gw.gateway_endpoint("10.50.0.22".parse().unwrap()).unwrap();
    assert_eq!(
        (ep.rule, ep.id),
        (config::compiled::RuleId(0), 0x1_0000_0002)
    );
    // Each endpoint's flows are its own: tags distinct from each other and
    // from every service's (M31).
    let mut tags: Vec<u16> = gw.gateways.iter().map(|g| g.flow_tag).collect();
    tags.extend(gw.services.iter().map(|s| s.flow_tag));
    let n = tags.len();
    tags.sort_unstable();
    tags.dedup();
    assert_eq!(tags.len(), n);
    assert!(matches!(
        gw.services[0].delivery,
        config::compiled::Delivery::Geneve {
            port: 6081,
            option_class: 0x0139,
            ..
        }
    ));

    let two = c("two-region-spillover.toml");
    assert_eq!(two.regions, ["us-east", "us-west"]);
    // Availability group 0 only: the ag1 VIP is not served here.
    assert!(two.rule_index.is_vip("198.51.100.10".parse().unwrap()));
    assert!(!two.rule_index.is_vip("198.51.100.11".parse().unwrap()));
    let regions: Vec<&str> = two
        .groups
        .iter()
        .map(|g| two.regions[g.region.index()].as_str())
        .collect();
    assert_eq!(regions, ["us-east", "us-east", "us-west"]);
}

/// reference.toml writes every field, so it gets every "not used by this
/// version" warning there is (and the comments there say so).
#[test]
// A list of one field for now: others join it as versions leave them unused.
#[allow(clippy::single_element_loop)]
fn reference_is_warned_of_each_field_not_used_by_this_version() {
    let l = load(&config_dir().join("reference.toml")).unwrap_or_else(|e| panic!("{e}"));
    let paths: Vec<&str> = l.warnings.iter().map(|w| warned_path(w)).collect();
    assert_eq!(paths, ["dataplane.burst_size"], "{:?}", l.warnings);
    let reference = std::fs::read_to_string(config_dir().join("reference.toml")).unwrap();
    let lines: Vec<&str> = reference.lines().collect();
    for field in ["burst_size ="] {
        let at = lines
            .iter()
            .position(|l| l.starts_with(field))
            .unwrap_or_else(|| panic!("reference.toml has {field}"));
        // Its documentation: the comment lines just above it, its own line
        // and the indented comment lines that continue it.
        let above = lines[..at]
            .iter()
            .rev()
            .take_while(|l| l.starts_with('#'))
            .count();
        let below = lines[at + 1..]
            .iter()
            .take_while(|l| l.trim_start().starts_with('#') && l.starts_with(' '))
            .count();
        let doc = lines[at - above..=at + below].join("\n");
        assert!(
            doc.to_lowercase().contains("not used by this version"),
            "reference.toml: the comment of {field} says it is not used by this version:\n{doc}"
        );
    }
}
