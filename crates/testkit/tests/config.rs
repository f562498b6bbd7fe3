//! Every shape the builders write is a configuration `config` loads.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

use config::{Env, load_str};
use testkit::config::{
    Config, addrs, endpoint_list, group, health_check, node, port, rule, service,
};

fn loads(text: &str) -> config::Loaded {
    load_str("t.toml", text, &Env::default()).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

#[test]
fn the_empty_configuration_loads() {
    loads(&Config::new().build());
}

#[test]
fn every_shape_loads() {
    let text =
        Config::new()
            .node(node("n1", "r1", "r1-a"))
            .dataplane("worker_cores", "[1]")
            .dataplane("flow_table_capacity", 4096)
            .port(
                port("up", "net_pcap0", "uplink")
                    .strs("addresses", &["10.0.0.2/24", "2001:db8::2/64"])
                    .str("mac", "02:00:00:00:00:01")
                    .str("gateway_mac", "02:00:00:00:00:fe"),
            )
            .port(port("be", "net_pcap1", "backend").strs("addresses", &["10.1.0.2/16"]))
            .rule(rule("web", &["10.0.0.10"], "TCP", "80", "web"))
            .rule(rule("dns", &["10.0.0.20"], "UDP", "53", "dns").set("ports", 53))
            .rule(rule(
                "web6",
                &["2001:db8:f00::10"],
                "L3_DEFAULT",
                "all",
                "web6",
            ))
            .service(
                service("web", "gre")
                    .set("gre_key", 7)
                    .str("health_check", "web-http")
                    .child(group("a", "r1", "r1-a").set(
                        "endpoints",
                        endpoint_list(&["10.1.1.1", "{ address = \"10.1.1.2\", port = 8080 }"]),
                    )),
            )
            .service(service("dns", "gue").set("gue_port", 7777).child(
                group("b", "r1", "r1-a").set("endpoints", endpoint_list(&addrs("10.1.2.", 2))),
            ))
            .service(
                service("web6", "geneve")
                    .set("geneve", "{ port = 6081, option_class = 0x0105 }")
                    .child(
                        group("c", "r1", "r1-a")
                            .set("endpoints", endpoint_list(&addrs("2001:db8:200::", 2))),
                    ),
            )
            .health_check(
                health_check("web-http", "HTTP")
                    .set("port", 80)
                    .str("path", "/healthz"),
            )
            .raw("[[client_zones]]\nzone = \"r1-a\"\nprefixes = [\"192.0.2.0/24\"]")
            .build();
    let loaded = loads(&text);
    assert_eq!(loaded.config.forwarding_rules.len(), 3, "{text}");
    assert_eq!(loaded.config.backend_services.len(), 3, "{text}");
}

#[test]
fn the_default_group_matches_the_default_node() {
    loads(
        &Config::new()
            .rule(rule("web", &["10.0.0.10"], "TCP", "80", "web"))
            .service(service("web", "ipip").endpoints(&["10.0.1.1"]))
            .build(),
    );
}

#[test]
fn set_replaces_and_values_are_written_as_toml() {
    let t = rule("x", &["10.0.0.1", "10.0.0.2"], "TCP", "80", "s").set("ports", 81);
    assert_eq!(t.get("ports"), Some("81"));
    assert_eq!(t.get("vips"), Some("[\"10.0.0.1\", \"10.0.0.2\"]"));
    assert_eq!(
        t.to_string(),
        "[[forwarding_rules]]\nname = \"x\"\nvips = [\"10.0.0.1\", \"10.0.0.2\"]\n\
         protocol = \"TCP\"\nports = 81\nbackend_service = \"s\"\n"
    );
    let text = Config::new().build();
    assert!(text.contains("[node]\nname = \"t\"\nregion = \"r\"\nzone = \"z\"\n"));
    // A broken value is config's to reject, with its position.
    let bad = Config::new()
        .raw("[dataplane]\nworker_cores = \"x\"")
        .build();
    assert!(load_str("t.toml", &bad, &Env::default()).is_err());
}
