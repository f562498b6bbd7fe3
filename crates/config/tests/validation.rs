//! One failing config per validation rule: each case marks the offending
//! line with `#!`, and the test asserts that the rejection names that line,
//! the field path and the reason.

use config::{ConfigErrors, Env, Memory, load_str};
use testkit::config::{endpoint_list, group, node, rule as rule_table, service};

/// The `[node]` of the cases (after an empty first line).
fn node_table() -> String {
    format!("\n{}", node("n1", "r1", "r1-a"))
}

/// The `web` service and its rule.
fn svc() -> String {
    let service = service("web", "ipip").child(group("g", "r1", "r1-a").set(
        "endpoints",
        endpoint_list(&[r#"{ address = "10.1.0.1", port = 80 }"#]),
    ));
    let rule = rule_table("web", &["10.0.0.10"], "TCP", "80", "web").set("ports", 80);
    format!("\n{service}\n{rule}")
}

/// The node, the `web` service and rule, then `extra`.
fn with(extra: &str) -> String {
    format!("{}{}{extra}", node_table(), svc())
}

/// `node` replaces the `[node]` table.
fn node_then_svc(node: &str) -> String {
    format!("{node}{}", svc())
}

/// The cases' machine: 4 CPUs and 1 GiB of memory, no hugepages.
fn machine() -> Env {
    Env::with_cpus(4).with_memory(Memory::total(1 << 30))
}

fn load(text: &str) -> Result<config::Loaded, ConfigErrors> {
    load_str("t.toml", text, &machine())
}

/// The warning every configuration made from [`svc`] gets: its service has
/// no health check (M25; `the_base_config_of_the_cases_is_valid`).
const NO_HEALTH_CHECK: &str = "backend_services[0].name: service \"web\" has no health check";

/// `l`'s warnings other than [`NO_HEALTH_CHECK`]: what the tests of other
/// warnings look at.
fn other_warnings(l: &config::Loaded) -> Vec<&str> {
    l.warnings
        .iter()
        .map(String::as_str)
        .filter(|w| !w.contains(NO_HEALTH_CHECK))
        .collect()
}

/// Ten services of one table of 16777213 slots (128 MiB counting a
/// rebuild); the first one's size is marked.
fn ten_huge_services() -> String {
    (0..10)
        .map(|i| {
            format!(
                "[[backend_services]]\nname = \"s{i}\"\ndelivery = \"gre\"\nmaglev_table_size = 16777213{}\ngroups = [{{ name = \"g\", region = \"r1\", zone = \"z\", endpoints = [{{ address = \"10.9.0.{i}\" }}] }}]\n",
                if i == 0 { " #!" } else { "" }
            )
        })
        .collect()
}

/// One service of 16777213 slots in four regions of two zones each, with
/// zonal affinity: up to 4 × (1 + 2) = 12 tables, 1.5 GiB counting a rebuild.
fn regions_and_zones() -> String {
    let groups: Vec<String> = ["ra", "rb", "rc", "rd"]
        .iter()
        .enumerate()
        .flat_map(|(r, region)| {
            (1..=2).map(move |z| {
                format!("  {{ name = \"{region}{z}\", region = \"{region}\", zone = \"{region}-{z}\", endpoints = [{{ address = \"10.9.{r}.{z}\" }}] }},\n")
            })
        })
        .collect();
    format!(
        "[[backend_services]]\nname = \"big\"\ndelivery = \"gre\"\nmaglev_table_size = 16777213 #!\nlocality = {{ zonal_affinity = true }}\ngroups = [\n{}]\n[[client_zones]]\nzone = \"ra-1\"\nprefixes = [\"10.0.0.0/8\"]\n",
        groups.concat()
    )
}

/// An uplink `up` at 10.0.0.2/24 and a VRRP group on it for the rule's VIP
/// with `fields` (the VRID first), then `more` (further groups).
fn vrrp(fields: &str, more: &str) -> String {
    format!(
        "[[ports]]\nname = \"up\"\ndevice = \"d\"\nrole = \"uplink\"\naddresses = [\"10.0.0.2/24\"]\n[[vrrp]]\n{fields}port = \"up\"\nvips = [\"10.0.0.10\"]\n{more}"
    )
}

struct Case {
    name: &'static str,
    text: String,
    path: &'static str,
    reason: &'static str,
}

fn case(name: &'static str, text: String, path: &'static str, reason: &'static str) -> Case {
    Case {
        name,
        text,
        path,
        reason,
    }
}

fn rule(name: &str, vips: &str, proto: &str, ports: &str, marker: &str) -> String {
    format!(
        "\n[[forwarding_rules]]\nname = \"{name}\"\nvips = [{vips}]\nprotocol = \"{proto}\"\nports = {ports}{}\nbackend_service = \"web\"\n",
        marker
    )
}

/// Rule `x` on `vips`, TCP 81, with `source_ranges = ranges` (the marked
/// line).
fn ranged(vips: &str, ranges: &str) -> String {
    rule("x", vips, "TCP", "81", "").replacen(
        "backend_service",
        &format!("source_ranges = {ranges} #!\nbackend_service"),
        1,
    )
}

/// Rules on `vips` (each a list's text; the first line marked) to an IPv6
/// service `web6`.
fn v6_rules(vips: &[&str]) -> String {
    let rules: String = vips
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let marker = if i + 1 == vips.len() { " #!" } else { "" };
            rule(&format!("x{i}"), v, "TCP", &format!("{}", 81 + i), "")
                .replacen(&format!("{v}]"), &format!("{v}]{marker}"), 1)
                .replace("backend_service = \"web\"", "backend_service = \"web6\"")
        })
        .collect();
    rules
        + "\n[[backend_services]]\nname = \"web6\"\ndelivery = \"ipip\"\ngroups = [{ name = \"g\", region = \"r1\", zone = \"z\", endpoints = [{ address = \"fd00::1\" }] }]\n"
}

/// A Geneve service `nva` of appliances, and `rule_text` pointed at it.
fn nva(rule_text: &str) -> String {
    format!(
        "{}\n[[backend_services]]\nname = \"nva\"\ndelivery = \"geneve\"\ngroups = [{{ name = \"g\", region = \"r1\", zone = \"z\", endpoints = [{{ address = \"10.7.0.1\" }}] }}]\n",
        rule_text.replace("backend_service = \"web\"", "backend_service = \"nva\"")
    )
}

/// Eleven services and a composite over all of them.
fn eleven_sources() -> String {
    let mut s = String::new();
    for i in 0..11 {
        s.push_str(&format!(
            "[[backend_services]]\nname = \"s{i}\"\ndelivery = \"gre\"\ngroups = [{{ name = \"g\", region = \"r1\", zone = \"z\" }}]\n"
        ));
    }
    let sources: Vec<String> = (0..11)
        .map(|i| format!("{{ backend_service = \"s{i}\" }}"))
        .collect();
    s.push_str(&format!(
        "[[composite_health_checks]]\nname = \"c\"\nsources = [{}] #!\ndestination = \"web\"\n",
        sources.join(", ")
    ));
    s
}

fn cases() -> Vec<Case> {
    vec![
        // ---- TOML and schema (reported by the parser / deserializer) ----
        case("syntax error", with("[[health_checks] #!\n"), "", "unclosed array table"),
        case("unknown field", with("[[health_checks]]\nname = \"h\"\ntype = \"TCP\"\nport = 80\nintervall = \"5s\" #!\n"), "health_checks[0].intervall", "unknown field `intervall`"),
        case("unknown top-level table", with("[metric] #!\nlisten = \"127.0.0.1:1\"\n"), "metric", "unknown field `metric`"),
        case("unknown enum value", with(&rule("x", "\"10.0.0.11\"", "SCTP", "80", "").replacen("protocol = \"SCTP\"", "protocol = \"SCTP\" #!", 1)), "forwarding_rules[1].protocol", "unknown variant `SCTP`"),
        case("missing field", with("[[forwarding_rules]] #!\nname = \"x\"\nvips = [\"10.0.0.11\"]\nbackend_service = \"web\"\n"), "forwarding_rules[1].protocol", "missing field `protocol`"),
        case("no VIPs and no pool", with("[[forwarding_rules]] #!\nname = \"x\"\nprotocol = \"TCP\"\nbackend_service = \"web\"\n"), "forwarding_rules[1].vips", "no vips, and availability group 0 has no vip_pool of IPv4 addresses to allocate one from"),
        case("wrong type", with("[[forwarding_rules]]\nname = \"x\"\nvips = \"10.0.0.1\" #!\nprotocol = \"TCP\"\nbackend_service = \"web\"\n"), "forwarding_rules[1].vips", "expected a sequence"),
        case("duration without unit", with("[[health_checks]]\nname = \"h\"\ntype = \"TCP\"\nport = 80\ninterval = 5 #!\n"), "health_checks[0].interval", "a duration needs a unit"),
        case("duration with unknown unit", with("[dataplane.timeouts]\nudp = \"3d\" #!\n"), "dataplane.timeouts.udp", "invalid duration \"3d\""),
        case("port range backwards", with(&rule("x", "\"10.0.0.11\"", "TCP", "\"90-80\"", " #!")), "forwarding_rules[1].ports", "backwards"),
        case("port out of range", with(&rule("x", "\"10.0.0.11\"", "TCP", "70000", " #!")), "forwarding_rules[1].ports", "out of range 1-65535"),
        case("port zero", with(&rule("x", "\"10.0.0.11\"", "TCP", "[\"0\"]", " #!")), "forwarding_rules[1].ports[0]", "port 0 is out of range"),
        case("all inside a port list", with(&rule("x", "\"10.0.0.11\"", "TCP", "[80, \"all\"]", " #!")), "forwarding_rules[1].ports", "cannot be part of a list"),
        case("bad address", with("[[ports]]\nname = \"p\"\ndevice = \"net_null0\"\nrole = \"uplink\"\naddresses = [\"10.0.0.300/24\"] #!\n"), "ports[0].addresses[0]", "invalid IP address \"10.0.0.300\""),
        case("bad MAC", with("[[ports]]\nname = \"p\"\ndevice = \"net_null0\"\nrole = \"uplink\"\nmac = \"02:00\" #!\n"), "ports[0].mac", "invalid MAC address"),
        // ---- names ----
        case("duplicate rule name", with(&rule("web", "\"10.0.0.11\"", "TCP", "80", "").replacen("name = \"web\"", "name = \"web\" #!", 1)), "forwarding_rules[1].name", "duplicate forwarding rule name \"web\""),
        case("duplicate service name", with("[[backend_services]]\nname = \"web\" #!\ndelivery = \"gre\"\ngroups = [{ name = \"g\", region = \"r1\", zone = \"z\" }]\n"), "backend_services[1].name", "duplicate backend service name"),
        case("duplicate health check name", with("[[health_checks]]\nname = \"h\"\ntype = \"TCP\"\nport = 1\n[[health_checks]]\nname = \"h\" #!\ntype = \"TCP\"\nport = 1\n"), "health_checks[1].name", "duplicate health check name"),
        case("duplicate group name", with("[[backend_services]]\nname = \"s2\"\ndelivery = \"gre\"\n[[backend_services.groups]]\nname = \"g\"\nregion = \"r1\"\nzone = \"z\"\n[[backend_services.groups]]\nname = \"g\" #!\nregion = \"r1\"\nzone = \"z\"\n"), "backend_services[1].groups[1].name", "duplicate group name \"g\""),
        case("duplicate port name", with("[[ports]]\nname = \"p\"\ndevice = \"a\"\nrole = \"uplink\"\n[[ports]]\nname = \"p\" #!\ndevice = \"b\"\nrole = \"backend\"\n"), "ports[1].name", "duplicate port name"),
        case("rule named like a child rule", with(&rule("web-ag0", "\"10.0.0.11\"", "TCP", "80", "").replacen("name = \"web-ag0\"", "name = \"web-ag0\" #!", 1)), "forwarding_rules[1].name", "\"web-ag0\" is also the name of rule \"web\"'s child rule for availability group 0"),
        case("malformed name", with(&rule("a b", "\"10.0.0.11\"", "TCP", "80", "").replacen("name = \"a b\"", "name = \"a b\" #!", 1)), "forwarding_rules[1].name", "must be 1-63 characters"),
        // ---- forwarding rules (M1, M4) ----
        case("no VIP", with(&rule("x", "", "TCP", "81", "").replacen("vips = []", "vips = [] #!", 1)), "forwarding_rules[1].vips", "needs one VIP"),
        case("three VIPs", with(&rule("x", "\"10.0.0.11\", \"10.0.0.12\", \"10.0.0.13\"", "TCP", "81", "").replacen("\"10.0.0.13\"]", "\"10.0.0.13\"] #!", 1)), "forwarding_rules[1].vips", "at most two"),
        case("VIPs of two families", with(&rule("x", "\"10.0.0.11\", \"fd00::11\"", "TCP", "81", "").replacen("\"fd00::11\"]", "\"fd00::11\"] #!", 1)), "forwarding_rules[1].vips[1]", "both VIPs of a rule are of one IP version"),
        case("an address in two availability groups", with(&rule("x", "\"10.0.0.11\", \"10.0.0.10\"", "TCP", "81", "").replacen("\"10.0.0.10\"]", "\"10.0.0.10\"] #!", 1)), "forwarding_rules[1].vips[1]", "10.0.0.10 is availability group 1 here but group 0 in rule \"web\": an address plays one availability-group role across all rules"),
        case("same VIP twice", with(&rule("x", "\"10.0.0.11\", \"10.0.0.11\"", "TCP", "81", "").replacen("\"10.0.0.11\"]", "\"10.0.0.11\"] #!", 1)), "forwarding_rules[1].vips[1]", "each availability group needs its own VIP"),
        case("IPv4 VIP prefix", with(&rule("x", "\"10.0.1.0/24\"", "TCP", "81", "").replacen("/24\"]", "/24\"] #!", 1)), "forwarding_rules[1].vips[0]", "10.0.1.0/24: an IPv4 VIP is one address; only an IPv6 VIP may be a prefix (/96 to /128)"),
        case("IPv6 VIP prefix wider than /96", with(&v6_rules(&["\"fd00:1::/64\""])), "forwarding_rules[1].vips[0]", "fd00:1::/64 is wider than /96: an IPv6 VIP prefix is /96 to /128"),
        case("IPv6 VIP prefix with host bits", with(&v6_rules(&["\"fd00:1::5/96\""])), "forwarding_rules[1].vips[0]", "fd00:1::5/96 has host bits set beyond /96: write the network, fd00:1::/96"),
        case("VIP inside another rule's VIP prefix", with(&v6_rules(&["\"fd00:1::/96\"", "\"fd00:2::1\", \"fd00:1::9\""])), "forwarding_rules[2].vips[1]", "fd00:1::9 overlaps VIP fd00:1::/96 of rule \"x0\": a packet's destination must name one VIP"),
        case("unusable VIP", with(&rule("x", "\"0.0.0.0\"", "TCP", "81", "").replacen("\"0.0.0.0\"]", "\"0.0.0.0\"] #!", 1)), "forwarding_rules[1].vips[0]", "cannot be a VIP"),
        case("IPv4-mapped VIP", with(&(rule("x", "\"::ffff:10.0.0.11\"", "TCP", "81", "").replacen("\"::ffff:10.0.0.11\"]", "\"::ffff:10.0.0.11\"] #!", 1).replace("backend_service = \"web\"", "backend_service = \"web6\"") + "\n[[backend_services]]\nname = \"web6\"\ndelivery = \"ipip\"\ngroups = [{ name = \"g\", region = \"r1\", zone = \"z\", endpoints = [{ address = \"fd00::1\" }] }]\n")), "forwarding_rules[1].vips[0]", "IPv4-mapped IPv6 address, which never appears on the wire: write 10.0.0.11"),
        case("empty source ranges", with(&ranged("\"10.0.0.11\"", "[]")), "forwarding_rules[1].source_ranges", "an empty list admits no client: omit source_ranges"),
        case("source range of the other family", with(&ranged("\"10.0.0.11\"", "[\"192.0.2.0/24\", \"2001:db8::/32\"]")), "forwarding_rules[1].source_ranges[1]", "2001:db8::/32 is IPv6 but the rule's VIPs are IPv4: it would admit no client"),
        case("source range with host bits", with(&ranged("\"10.0.0.11\"", "[\"192.0.2.9/24\"]")), "forwarding_rules[1].source_ranges[0]", "192.0.2.9/24 has host bits set beyond /24: write the network, 192.0.2.0/24"),
        case("source range not a prefix", with(&ranged("\"10.0.0.11\"", "[\"192.0.2.0/33\"]")), "forwarding_rules[1].source_ranges[0]", "invalid prefix length \"33\""),
        case("source ranges on a gateway rule", with(&nva(&ranged("\"10.0.0.11\"", "[\"192.0.2.0/24\"]").replace("protocol = \"TCP\"", "protocol = \"L3_DEFAULT\"\nmode = \"gateway\"\ngateway_endpoints = [{ address = \"10.0.0.40\", id = 1 }]").replace("ports = 81", "ports = \"all\""))), "forwarding_rules[1].source_ranges", "source_ranges apply to passthrough rules"),
        case("L3_DEFAULT with ports", with(&rule("x", "\"10.0.0.11\"", "L3_DEFAULT", "\"80\"", " #!")), "forwarding_rules[1].ports", "ports must be \"all\""),
        case("two L3_DEFAULT on a pair", with(&(rule("x", "\"10.0.0.11\"", "L3_DEFAULT", "\"all\"", "") + &rule("y", "\"10.0.0.11\"", "L3_DEFAULT", "\"all\"", "").replacen("protocol = \"L3_DEFAULT\"", "protocol = \"L3_DEFAULT\" #!", 1))), "forwarding_rules[2].protocol", "a second L3_DEFAULT rule on 10.0.0.11: rule \"x\" (t.toml:23:1)"),
        case("overlapping TCP ports", with(&rule("x", "\"10.0.0.10\"", "TCP", "\"all\"", " #!")), "forwarding_rules[1].ports", "TCP ports 80 overlap rule \"web\" (t.toml:16:1) on 10.0.0.10"),
        case("overlap through one shared VIP", with(&rule("x", "\"10.0.0.10\", \"10.0.0.99\"", "TCP", "\"70-90,443\"", " #!")), "forwarding_rules[1].ports", "TCP ports 80 overlap rule \"web\""),
        case("unknown backend service", with(&rule("x", "\"10.0.0.11\"", "TCP", "80", "").replacen("backend_service = \"web\"", "backend_service = \"nope\" #!", 1)), "forwarding_rules[1].backend_service", "no backend service is named \"nope\" (known: web)"),
        case("VIP is the balancer's own address", with(&format!("[[ports]]\nname = \"p\"\ndevice = \"d\"\nrole = \"uplink\"\naddresses = [\"10.0.0.11/24\"]\n{}", rule("x", "\"10.0.0.11\"", "TCP", "81", "").replacen("\"10.0.0.11\"]", "\"10.0.0.11\"] #!", 1))), "forwarding_rules[1].vips[0]", "also the balancer's own address"),
        // ---- address families (M4, M8) ----
        case("l2dsr across families", node_then_svc(&node_table()).replace("delivery = \"ipip\"", "delivery = \"l2dsr\"").replace("endpoints = [{ address = \"10.1.0.1\", port = 80 }]", "endpoints = [{ address = \"fd01::1\", port = 80 }] #!"), "backend_services[0].groups[0].endpoints[0].address", "IPv6 endpoint fd01::1 cannot take the IPv4 traffic of rule \"web\""),
        case("ipip 6-in-4", node_then_svc(&node_table()).replace("vips = [\"10.0.0.10\"]", "vips = [\"fd00::10\"]").replace("endpoints = [{ address = \"10.1.0.1\", port = 80 }]", "endpoints = [{ address = \"10.1.0.1\", port = 80 }] #!"), "backend_services[0].groups[0].endpoints[0].address", "not IPv6 in IPv4"),
        // ---- services ----
        case("Maglev size not prime", with("[[backend_services]]\nname = \"s\"\ndelivery = \"gre\"\nmaglev_table_size = 65536 #!\ngroups = [{ name = \"g\", region = \"r1\", zone = \"z\" }]\n"), "backend_services[1].maglev_table_size", "65536 is not a prime"),
        case("Maglev size below the endpoint count", with("[[backend_services]]\nname = \"s\"\ndelivery = \"gre\"\nmaglev_table_size = 2 #!\ngroups = [{ name = \"g\", region = \"r1\", zone = \"z\", endpoints = [{ address = \"10.9.0.1\" }, { address = \"10.9.0.2\" }, { address = \"10.9.0.3\" }] }]\n"), "backend_services[1].maglev_table_size", "2 slots cannot hold 3 endpoints"),
        case("unknown health check", node_then_svc(&node_table()).replace("delivery = \"ipip\"", "delivery = \"ipip\"\nhealth_check = \"nope\" #!"), "backend_services[0].health_check", "no health check is named \"nope\""),
        case("health percentage above 100", node_then_svc(&node_table()).replace("delivery = \"ipip\"", "delivery = \"ipip\"\naggregation = { min_healthy_percent = 101 } #!"), "backend_services[0].aggregation.min_healthy_percent", "101% is not a percentage"),
        case("no groups", with("[[backend_services]]\nname = \"s\"\ndelivery = \"gre\"\ngroups = [] #!\n"), "backend_services[1].groups", "at least one group"),
        case("groups of two kinds", with("[[backend_services]]\nname = \"s\"\ndelivery = \"gre\"\n[[backend_services.groups]]\nname = \"a\"\nregion = \"r1\"\nzone = \"z\"\n[[backend_services.groups]]\nname = \"b\"\nregion = \"r2\"\nzone = \"z\"\nkind = \"remote_rule\" #!\nremote = { status_url = \"http://10.9.0.1:9469/status\", rule = \"web\", vip = \"10.9.0.10\" }\n"), "backend_services[1].groups[1].kind", "all groups of a service are of one kind"),
        case("remote_rule group without remote", with("[[backend_services]]\nname = \"s\"\ndelivery = \"gre\"\n[[backend_services.groups]] #!\nname = \"a\"\nregion = \"r1\"\nzone = \"z\"\nkind = \"remote_rule\"\n"), "backend_services[1].groups[0].remote", "needs remote = { status_url, rule, vip }"),
        case("remote_rule with a bad URL", with("[[backend_services]]\nname = \"s\"\ndelivery = \"gre\"\n[[backend_services.groups]]\nname = \"a\"\nregion = \"r1\"\nzone = \"z\"\nkind = \"remote_rule\"\nremote = { status_url = \"10.9.0.1:9469\", rule = \"web\", vip = \"10.9.0.10\" } #!\n"), "backend_services[1].groups[0].remote.status_url", "not an http:// or https:// URL"),
        case("endpoints group with a remote", with("[[backend_services]]\nname = \"s\"\ndelivery = \"gre\"\n[[backend_services.groups]]\nname = \"a\"\nregion = \"r1\"\nzone = \"z\"\nendpoints = [{ address = \"10.9.0.1\" }]\nremote = { status_url = \"http://x/\", rule = \"web\", vip = \"10.9.0.10\" } #!\n"), "backend_services[1].groups[0].remote", "lists endpoints, not a remote rule"),
        case("capacity_scaler above 1", node_then_svc(&node_table()).replace("zone = \"r1-a\"\nendpoints", "zone = \"r1-a\"\ncapacity_scaler = 1.5 #!\nendpoints"), "backend_services[0].groups[0].capacity_scaler", "1.5 is out of range 0.0-1.0"),
        case("capacity_scaler negative", node_then_svc(&node_table()).replace("zone = \"r1-a\"\nendpoints", "zone = \"r1-a\"\ncapacity_scaler = -0.1 #!\nendpoints"), "backend_services[0].groups[0].capacity_scaler", "-0.1 is out of range"),
        case("endpoint weight above 1000", node_then_svc(&node_table()).replace("port = 80 }]", "port = 80, weight = 1001 }] #!"), "backend_services[0].groups[0].endpoints[0].weight", "weight 1001 is out of range 0-1000"),
        case("endpoint listed twice", node_then_svc(&node_table()).replace("endpoints = [{ address = \"10.1.0.1\", port = 80 }]", "endpoints = [\n  { address = \"10.1.0.1\", port = 80 },\n  { address = \"10.1.0.1\", port = 80 }, #!\n]"), "backend_services[0].groups[0].endpoints[1].address", "endpoint 10.1.0.1 is already in this service"),
        case("endpoint MAC without l2dsr", node_then_svc(&node_table()).replace("port = 80 }]", "port = 80, mac = \"02:00:00:00:00:01\" }] #!"), "backend_services[0].groups[0].endpoints[0].mac", "applies to delivery \"l2dsr\""),
        case("GRE key with ipip", node_then_svc(&node_table()).replace("delivery = \"ipip\"", "delivery = \"ipip\"\ngre_key = 7 #!"), "backend_services[0].gre_key", "gre_key applies to delivery \"gre\", not \"ipip\""),
        case("Geneve options with gre", node_then_svc(&node_table()).replace("delivery = \"ipip\"", "delivery = \"gre\"\ngeneve = { port = 6081 } #!"), "backend_services[0].geneve", "geneve options apply to delivery \"geneve\""),
        case("Geneve option types equal", node_then_svc(&node_table()).replace("delivery = \"ipip\"", "delivery = \"geneve\"\ngeneve = { endpoint_id_type = 3 } #!"), "backend_services[0].geneve.flow_cookie_type", "need distinct types"),
        case("RATE without a rate", node_then_svc(&node_table()).replace("delivery = \"ipip\"", "delivery = \"ipip\"\nbalancing_mode = \"RATE\"").replace("[[backend_services.groups]]", "[[backend_services.groups]] #!"), "backend_services[0].groups[0].max_rate", "balancing_mode RATE needs max_rate"),
        case("max_utilization with RATE", node_then_svc(&node_table()).replace("delivery = \"ipip\"", "delivery = \"ipip\"\nbalancing_mode = \"RATE\"\nmax_rate_per_endpoint = 1000\nmax_utilization = 0.7 #!"), "backend_services[0].max_utilization", "RATE counts packets per second only (to limit by rate and utilization together, use UTILIZATION with max_rate"),
        case("group max_utilization with RATE", node_then_svc(&node_table()).replace("delivery = \"ipip\"", "delivery = \"ipip\"\nbalancing_mode = \"RATE\"").replace("zone = \"r1-a\"\nendpoints", "zone = \"r1-a\"\nmax_rate = 1000\nmax_utilization = 0.7 #!\nendpoints"), "backend_services[0].groups[0].max_utilization", "max_utilization is a target of balancing_mode UTILIZATION"),
        case("group max_utilization above 1", node_then_svc(&node_table()).replace("zone = \"r1-a\"\nendpoints", "zone = \"r1-a\"\nmax_rate = 1000\nmax_utilization = 1.5 #!\nendpoints"), "backend_services[0].groups[0].max_utilization", "1.5 is out of range: 0 < max_utilization <= 1.0"),
        case("zero rate per endpoint with UTILIZATION", node_then_svc(&node_table()).replace("delivery = \"ipip\"", "delivery = \"ipip\"\nmax_rate_per_endpoint = 0 #!"), "backend_services[0].max_rate_per_endpoint", "a rate of 0 would refuse every connection"),
        case("max_utilization on a remote_rule group", with("[[backend_services]]\nname = \"s\"\ndelivery = \"gre\"\n[[backend_services.groups]]\nname = \"a\"\nregion = \"r1\"\nzone = \"z\"\nkind = \"remote_rule\"\nmax_utilization = 0.5 #!\nremote = { status_url = \"http://10.9.0.1:9469/status\", rule = \"web\", vip = \"10.9.0.10\" }\n"), "backend_services[1].groups[0].max_utilization", "a remote_rule group reports no utilization"),
        case("max_utilization zero", node_then_svc(&node_table()).replace("delivery = \"ipip\"", "delivery = \"ipip\"\nmax_utilization = 0.0 #!"), "backend_services[0].max_utilization", "0 < max_utilization <= 1.0"),
        case("zonal affinity without client zones", node_then_svc(&node_table()).replace("delivery = \"ipip\"", "delivery = \"ipip\"\nlocality = { zonal_affinity = true } #!"), "backend_services[0].locality.zonal_affinity", "needs [[client_zones]]"),
        case("spill ratio out of range", node_then_svc(&node_table()).replace("delivery = \"ipip\"", "delivery = \"ipip\"\nlocality = { zonal_affinity = true, zonal_spill_ratio = 2.0 } #!") + "[[client_zones]]\nzone = \"r1-a\"\nprefixes = [\"10.0.0.0/8\"]\n", "backend_services[0].locality.zonal_spill_ratio", "2 is out of range 0.0-1.0"),
        // ---- health checks (M16) ----
        case("health timeout above interval", with("[[health_checks]]\nname = \"h\"\ntype = \"TCP\"\nport = 80\ninterval = \"1s\"\ntimeout = \"2s\" #!\n"), "health_checks[0].timeout", "timeout 2s exceeds interval 1s"),
        case("zero interval", with("[[health_checks]]\nname = \"h\"\ntype = \"TCP\"\nport = 80\ninterval = \"0s\" #!\n"), "health_checks[0].interval", "longer than 0s"),
        case("health path that splits the request", with("[[health_checks]]\nname = \"h\"\ntype = \"HTTP\"\nport = 80\npath = \"/a b\" #!\n"), "health_checks[0].path", "no spaces or control characters"),
        case("health host with a space", with("[[health_checks]]\nname = \"h\"\ntype = \"HTTP\"\nport = 80\nhost = \"a b\" #!\n"), "health_checks[0].host", "a host name has no spaces"),
        case("address6 that is no IPv6 address", with("[[backend_services]]\nname = \"ds\"\ndelivery = \"gue\"\n[[backend_services.groups]]\nname = \"g\"\nregion = \"r1\"\nzone = \"r1-a\"\nendpoints = [\n  { address = \"10.1.0.5\", address6 = \"10.1.0.6\" }, #!\n]\n"), "backend_services[1].groups[0].endpoints[0].address6", "10.1.0.6 is no IPv6 unicast address"),
        case("dual-stack endpoint whose address is IPv6", with("[[backend_services]]\nname = \"ds\"\ndelivery = \"gue\"\n[[backend_services.groups]]\nname = \"g\"\nregion = \"r1\"\nzone = \"r1-a\"\nendpoints = [\n  { address = \"fd00::5\", address6 = \"fd00::6\" }, #!\n]\n"), "backend_services[1].groups[0].endpoints[0].address", "with address6, address is the endpoint's IPv4 address"),
        case("address6 that repeats an endpoint", with("[[backend_services]]\nname = \"ds\"\ndelivery = \"gue\"\n[[backend_services.groups]]\nname = \"g\"\nregion = \"r1\"\nzone = \"r1-a\"\nendpoints = [\n  { address = \"10.1.0.5\", address6 = \"fd00::6\" },\n  { address = \"fd00::6\" }, #!\n]\n"), "backend_services[1].groups[0].endpoints[1].address", "endpoint fd00::6 is already in this service"),
        case("VIP probes without an exception port", with("[[ports]]\nname = \"up\"\ndevice = \"net_null0\"\nrole = \"uplink\"\naddresses = [\"10.0.0.2/24\"]\n[[health_checks]]\nname = \"h\"\ntype = \"TCP\"\nport = 80\ntarget = \"vip\" #!\n").replace("delivery = \"ipip\"", "delivery = \"ipip\"\nhealth_check = \"h\""), "health_checks[0].target", "no [[ports]] entry has role \"exception\""),
        case("VIP probe source of the other family", with("[[health_checks]]\nname = \"h\"\ntype = \"TCP\"\nport = 80\ntarget = \"vip\"\nsource_address = \"2001:db8::2\" #!\n").replace("delivery = \"ipip\"", "delivery = \"ipip\"\nhealth_check = \"h\""), "health_checks[0].source_address", "cannot probe through VIP 10.0.0.10"),
        case("VIP probes of a service without rules", with("[[backend_services]]\nname = \"idle\"\ndelivery = \"ipip\"\nhealth_check = \"h\" #!\n[[backend_services.groups]]\nname = \"g\"\nregion = \"r1\"\nzone = \"r1-a\"\nendpoints = [{ address = \"10.1.0.2\" }]\n[[health_checks]]\nname = \"h\"\ntype = \"TCP\"\nport = 80\ntarget = \"vip\"\n"), "backend_services[1].health_check", "no forwarding rule uses service \"idle\""),
        case("privileged VIP probe ports", with("[dataplane]\nvip_probe_ports = \"80-90\" #!\n"), "dataplane.vip_probe_ports", "from 1024 up"),
        case("too few VIP probe ports", format!("{}{}", with("[dataplane]\nvip_probe_ports = \"61000\" #!\n[[health_checks]]\nname = \"h\"\ntype = \"TCP\"\nport = 80\ntarget = \"vip\"\n").replace("delivery = \"ipip\"", "delivery = \"ipip\"\nhealth_check = \"h\""), rule("x", "\"10.0.0.11\"", "TCP", "81", "")), "dataplane.vip_probe_ports", "2 probes through VIPs need a source port each, and the range has 1"),
        case("probe source of the other family", with("[[health_checks]]\nname = \"h\"\ntype = \"TCP\"\nport = 80\nsource_address = \"2001:db8::2\" #!\n").replace("delivery = \"ipip\"", "delivery = \"ipip\"\nhealth_check = \"h\""), "health_checks[0].source_address", "cannot probe endpoint 10.1.0.1"),
        case("healthy threshold zero", with("[[health_checks]]\nname = \"h\"\ntype = \"TCP\"\nport = 80\nhealthy_threshold = 0 #!\n"), "health_checks[0].healthy_threshold", "at least 1"),
        case("unhealthy threshold zero", with("[[health_checks]]\nname = \"h\"\ntype = \"TCP\"\nport = 80\nunhealthy_threshold = 0 #!\n"), "health_checks[0].unhealthy_threshold", "at least 1"),
        case("HTTP path on a TCP check", with("[[health_checks]]\nname = \"h\"\ntype = \"TCP\"\nport = 80\npath = \"/\" #!\n"), "health_checks[0].path", "path applies to HTTP and HTTPS health checks, not TCP"),
        case("weight header on a TCP check", with("[[health_checks]]\nname = \"h\"\ntype = \"TCP\"\nport = 80\nweight_from_header = true #!\n"), "health_checks[0].weight_from_header", "not TCP"),
        case("relative HTTP path", with("[[health_checks]]\nname = \"h\"\ntype = \"HTTP\"\nport = 80\npath = \"healthz\" #!\n"), "health_checks[0].path", "must start with '/'"),
        case("no port to probe", node_then_svc(&node_table()).replace("delivery = \"ipip\"", "delivery = \"ipip\"\nhealth_check = \"h\"").replace("endpoints = [{ address = \"10.1.0.1\", port = 80 }]", "endpoints = [{ address = \"10.1.0.1\" }] #!") + "[[health_checks]]\nname = \"h\"\ntype = \"TCP\"\n", "backend_services[0].groups[0].endpoints[0].port", "names no port, so endpoint 10.1.0.1 needs one"),
        // ---- composite health (M20) ----
        case("composite with no source", with("[[composite_health_checks]]\nname = \"c\"\nsources = [] #!\ndestination = \"web\"\n"), "composite_health_checks[0].sources", "0 sources: a composite health check has 1 to 10"),
        case("composite with eleven sources", with(&eleven_sources()), "composite_health_checks[0].sources", "11 sources: a composite health check has 1 to 10"),
        case("composite of a composite", with("[[composite_health_checks]]\nname = \"c1\"\nsources = [{ backend_service = \"web\" }]\ndestination = \"web\"\n[[composite_health_checks]]\nname = \"c2\"\nsources = [{ backend_service = \"c1\" }] #!\ndestination = \"web2\"\n") + &rule("web2", "\"10.0.0.11\"", "TCP", "80", ""), "composite_health_checks[1].sources[0].backend_service", "may not use another composite's state"),
        case("composite source unknown", with("[[composite_health_checks]]\nname = \"c\"\nsources = [{ backend_service = \"nope\" }] #!\ndestination = \"web\"\n"), "composite_health_checks[0].sources[0].backend_service", "no backend service is named \"nope\""),
        case("composite destination unknown", with("[[composite_health_checks]]\nname = \"c\"\nsources = [{ backend_service = \"web\" }]\ndestination = \"nope\" #!\n"), "composite_health_checks[0].destination", "no forwarding rule is named \"nope\""),
        case("two composites for one rule", with("[[composite_health_checks]]\nname = \"c1\"\nsources = [{ backend_service = \"web\" }]\ndestination = \"web\"\n[[composite_health_checks]]\nname = \"c2\"\nsources = [{ backend_service = \"web\" }]\ndestination = \"web\" #!\n"), "composite_health_checks[1].destination", "already takes its state from composite \"c1\""),
        case("composite source percentage", with("[[composite_health_checks]]\nname = \"c\"\nsources = [{ backend_service = \"web\", aggregation = { min_healthy_percent = 150 } }] #!\ndestination = \"web\"\n"), "composite_health_checks[0].sources[0].aggregation.min_healthy_percent", "150% is not a percentage"),
        // ---- gateway mode (M30, M31) ----
        case("gateway rule on a non-Geneve service", with(&rule("gw", "\"10.0.0.20\"", "L3_DEFAULT", "\"all\"", "\nmode = \"gateway\" #!\ngateway_endpoints = [{ address = \"10.5.0.1\", id = 1 }]")), "forwarding_rules[1].mode", "delivers with ipip"),
        case("gateway rule without gateway endpoints", with(&nva(&rule("gw", "\"10.0.0.20\"", "L3_DEFAULT", "\"all\"", "\nmode = \"gateway\"").replacen("[[forwarding_rules]]", "[[forwarding_rules]] #!", 1))), "forwarding_rules[1].gateway_endpoints", "at least one gateway endpoint"),
        case("gateway endpoint ID twice", with(&nva(&rule("gw", "\"10.0.0.20\"", "L3_DEFAULT", "\"all\"", "\nmode = \"gateway\"\ngateway_endpoints = [\n  { address = \"10.5.0.1\", id = 0x10 },\n  { address = \"10.5.0.2\", id = 0x10 }, #!\n]"))), "forwarding_rules[1].gateway_endpoints[1].id", "endpoint ID 0x10 is used twice"),
        case("gateway endpoint in two rules", with(&nva(&(rule("gw1", "\"10.0.0.20\"", "L3_DEFAULT", "\"all\"", "\nmode = \"gateway\"\ngateway_endpoints = [{ address = \"10.5.0.1\", id = 1 }]") + &rule("gw2", "\"10.0.0.21\"", "L3_DEFAULT", "\"all\"", "\nmode = \"gateway\"\ngateway_endpoints = [{ address = \"10.5.0.1\", id = 2 }] #!")))), "forwarding_rules[2].gateway_endpoints[0].address", "gateway endpoint 10.5.0.1 is already listed at t.toml:"),
        case("gateway rule with a port filter", with(&nva(&rule("gw", "\"10.0.0.20\"", "TCP", "\"80\" #!", "\nmode = \"gateway\"\ngateway_endpoints = [{ address = \"10.5.0.1\", id = 1 }]"))), "forwarding_rules[1].ports", "ports must be \"all\""),
        case("appliances shared with a passthrough rule", with(&nva(&(rule("gw", "\"10.0.0.20\"", "L3_DEFAULT", "\"all\"", "\nmode = \"gateway\"\ngateway_endpoints = [{ address = \"10.5.0.1\", id = 1 }]").replacen("backend_service = \"web\"", "backend_service = \"nva\" #!", 1) + &rule("plain", "\"10.0.0.21\"", "TCP", "80", "")))), "forwarding_rules[1].backend_service", "cannot also serve passthrough rule \"plain\""),
        case("gateway endpoint off every port's subnet", with(&format!("[[ports]]\nname = \"up\"\ndevice = \"net_null0\"\nrole = \"uplink\"\naddresses = [\"10.0.0.2/24\"]\n{}", nva(&rule("gw", "\"10.0.0.20\"", "L3_DEFAULT", "\"all\"", "\nmode = \"gateway\"\ngateway_endpoints = [{ address = \"10.5.0.1\", id = 1 }] #!")))), "forwarding_rules[1].gateway_endpoints[0].address", "gateway endpoint 10.5.0.1 is on no subnet of a data port"),
        case("remote gateway endpoint off the egress port's subnets without a gateway", with(&format!("[[ports]]\nname = \"up\"\ndevice = \"net_null0\"\nrole = \"uplink\"\naddresses = [\"10.0.0.2/24\"]\n{}", nva(&rule("gw", "\"10.0.0.20\"", "L3_DEFAULT", "\"all\"", "\nmode = \"gateway\"\ngateway_endpoints = [{ address = \"10.5.0.1\", id = 1, tunnel = \"geneve\" }] #!")))), "forwarding_rules[1].gateway_endpoints[0].address", "remote gateway endpoint 10.5.0.1 is on no subnet of port \"up\""),
        case("remote gateway endpoint without an egress address of its family", with(&format!("[[ports]]\nname = \"up\"\ndevice = \"net_null0\"\nrole = \"uplink\"\naddresses = [\"10.0.0.2/24\"]\ngateway = \"10.0.0.1\"\n{}", nva(&rule("gw", "\"10.0.0.20\"", "L3_DEFAULT", "\"all\"", "\nmode = \"gateway\"\ngateway_endpoints = [{ address = \"2001:db8::5\", id = 1, tunnel = \"geneve\" }] #!")))), "forwarding_rules[1].gateway_endpoints[0].address", "which has no IPv6 address"),
        case("remote gateway endpoint that is an appliance", with(&nva(&rule("gw", "\"10.0.0.20\"", "L3_DEFAULT", "\"all\"", "\nmode = \"gateway\"\ngateway_endpoints = [{ address = \"10.7.0.1\", id = 1, tunnel = \"geneve\" }] #!"))), "forwarding_rules[1].gateway_endpoints[0].address", "is also an endpoint of service \"nva\""),
        case("remote gateway endpoint that is a VIP", with(&nva(&rule("gw", "\"10.0.0.20\"", "L3_DEFAULT", "\"all\"", "\nmode = \"gateway\"\ngateway_endpoints = [{ address = \"10.0.0.10\", id = 1, tunnel = \"geneve\" }] #!"))), "forwarding_rules[1].gateway_endpoints[0].address", "is a VIP of this node's"),
        case("gateway endpoint tunnel of an unknown kind", with(&nva(&rule("gw", "\"10.0.0.20\"", "L3_DEFAULT", "\"all\"", "\nmode = \"gateway\"\ngateway_endpoints = [{ address = \"10.5.0.1\", id = 1, tunnel = \"vxlan\" }] #!"))), "forwarding_rules[1].gateway_endpoints[0].tunnel", "unknown variant"),
        case("gateway endpoints on a passthrough rule", with(&rule("x", "\"10.0.0.20\"", "TCP", "80", "\ngateway_endpoints = [{ address = \"10.5.0.1\", id = 1 }] #!")), "forwarding_rules[1].gateway_endpoints", "only apply to rules with mode = \"gateway\""),
        // ---- node, locality (M5, M24) ----
        case("capacity share 0", node_then_svc(&format!("{}capacity_share = 0.0 #!\n", node_table())), "node.capacity_share", "0 is not a share"),
        case("capacity share above 1", node_then_svc(&format!("{}capacity_share = 1.5 #!\n", node_table())), "node.capacity_share", "1.5 is not a share"),
        case("availability group 2", node_then_svc(&format!("{}availability_group = 2 #!\n", node_table())), "node.availability_group", "availability group 2 does not exist"),
        case("preference without own region", node_then_svc(&format!("{}region_preference = [\"r2\", \"r3\"] #!\n", node_table())), "node.region_preference", "own region \"r1\" is missing"),
        case("region listed twice", node_then_svc(&format!("{}region_preference = [\"r1\", \"r2\",\n  \"r2\"] #!\n", node_table())), "node.region_preference[2]", "region \"r2\" is listed twice"),
        case("client prefix with host bits", with("[[client_zones]]\nzone = \"r1-a\"\nprefixes = [\"10.1.2.3/16\"] #!\n"), "client_zones[0].prefixes[0]", "has bits set beyond /16"),
        case("client prefix in two zones", with("[[client_zones]]\nzone = \"r1-a\"\nprefixes = [\"10.1.0.0/16\"]\n[[client_zones]]\nzone = \"r1-b\"\nprefixes = [\"10.1.0.0/16\"] #!\n"), "client_zones[1].prefixes[0]", "already mapped at t.toml:"),
        // ---- dataplane ----
        case("worker core that does not exist", with("[dataplane]\nworker_cores = [1, 9] #!\n"), "dataplane.worker_cores[1]", "core 9 does not exist on this machine (online: 0,1,2,3)"),
        case("management core that does not exist", with("[dataplane]\nmanagement_core = 4 #!\n"), "dataplane.management_core", "core 4 does not exist"),
        case("worker core twice", with("[dataplane]\nworker_cores = [1, 1] #!\n"), "dataplane.worker_cores[1]", "core 1 is listed twice"),
        case("no worker core", with("[dataplane]\nworker_cores = [] #!\n"), "dataplane.worker_cores", "at least one worker core"),
        case("burst size zero", with("[dataplane]\nburst_size = 0 #!\n"), "dataplane.burst_size", "out of range 1-512"),
        case("descriptors not a power of two", with("[dataplane]\nqueue_descriptors = 1000 #!\n"), "dataplane.queue_descriptors", "power of two"),
        case("too few mbufs", with("[dataplane]\nmbufs = 1000 #!\n"), "dataplane.mbufs", "cannot fill the RX and TX rings"),
        case("flow table of zero", with("[dataplane]\nflow_table_capacity = 0 #!\n"), "dataplane.flow_table_capacity", "at least 1"),
        case("flow table beyond its limit", with("[dataplane]\nflow_table_capacity = 2000000000 #!\n"), "dataplane.flow_table_capacity", "2000000000 entries: the flow table holds at most 1073741824"),
        // ---- memory (machine(): 1 GiB) ----
        case("flow table beyond memory", with("[dataplane]\nflow_table_capacity = 20000000 #!\n"), "dataplane.flow_table_capacity", "this configuration needs about 1.74 GiB of memory but this machine has 1.00 GiB: flow table (dataplane.flow_table_capacity = 20000000) 1.70 GiB"),
        case("Maglev tables of ten huge services beyond memory", with(&ten_huge_services()), "backend_services[1].maglev_table_size", "of memory but this machine has 1.00 GiB: Maglev tables (backend_services[1].maglev_table_size = 16777213, up to 1 table (one region), twice while a rebuild replaces them) 128 MiB"),
        case("Maglev tables of regions and zones beyond memory", with(&regions_and_zones()), "backend_services[1].maglev_table_size", "of memory but this machine has 1.00 GiB: Maglev tables (backend_services[1].maglev_table_size = 16777213, up to 12 tables (4 regions, 8 zone tables with zonal affinity), twice while a rebuild replaces them) 1.50 GiB"),
        case("zero idle timeout", with("[dataplane.timeouts]\nudp = \"0s\" #!\n"), "dataplane.timeouts.udp", "longer than 0s"),
        case("FIN/RST timeout longer than established", with("[dataplane.timeouts]\ntcp_established = \"60s\"\ntcp_closing = \"2m\" #!\n"), "dataplane.timeouts.tcp_closing", "must shorten"),
        // ---- ports ----
        case("MTU out of range", with("[[ports]]\nname = \"p\"\ndevice = \"d\"\nrole = \"uplink\"\nmtu = 100 #!\n"), "ports[0].mtu", "MTU 100 is out of range 576-9216"),
        case("IPv6 VIPs' packets under 1280 bytes once encapsulated", with("[[ports]]\nname = \"p\"\ndevice = \"d\"\nrole = \"backend\"\naddresses = [\"2001:db8::2/64\"]\nmtu = 1300 #!\n[[forwarding_rules]]\nname = \"v6\"\nvips = [\"2001:db8:10::1\"]\nprotocol = \"TCP\"\nports = 80\nbackend_service = \"six\"\n[[backend_services]]\nname = \"six\"\ndelivery = \"gue\"\ngroups = [{ name = \"g\", region = \"r1\", zone = \"z\", endpoints = [{ address = \"10.9.0.1\" }] }]\n"), "ports[0].mtu", "MTU 1300 leaves 1272 bytes for the IPv6 packets of service \"six\" once in gue (28 bytes): IPv6 needs 1280 (hosts ignore a smaller \"packet too big\"); at least 1308 on this port"),
        case("gateway off the port's subnets", with("[[ports]]\nname = \"p\"\ndevice = \"d\"\nrole = \"uplink\"\naddresses = [\"10.0.0.2/24\"]\ngateway = \"10.0.1.1\" #!\n"), "ports[0].gateway", "not on any subnet"),
        case("address on two ports", with("[[ports]]\nname = \"p\"\ndevice = \"d\"\nrole = \"uplink\"\naddresses = [\"10.0.0.2/24\"]\n[[ports]]\nname = \"q\"\ndevice = \"e\"\nrole = \"backend\"\naddresses = [\"10.0.0.2/24\"] #!\n"), "ports[1].addresses[0]", "already assigned"),
        case("two exception ports for the uplink", with("[[ports]]\nname = \"u\"\ndevice = \"d\"\nrole = \"uplink\"\n[[ports]]\nname = \"k\"\ndevice = \"tk\"\nrole = \"exception\"\n[[ports]]\nname = \"l\"\ndevice = \"tl\"\nrole = \"exception\" #!\n"), "ports[2].role", "port \"u\" already has an exception port (t.toml:"),
        case("two exception ports for one backend port", with("[[ports]]\nname = \"u\"\ndevice = \"d\"\nrole = \"uplink\"\n[[ports]]\nname = \"b\"\ndevice = \"e\"\nrole = \"backend\"\n[[ports]]\nname = \"k\"\ndevice = \"tk\"\nrole = \"exception\"\nfor_port = \"b\"\n[[ports]]\nname = \"l\"\ndevice = \"tl\"\nrole = \"exception\"\nfor_port = \"b\" #!\n"), "ports[3].for_port", "port \"b\" already has an exception port"),
        case("for_port on a data port", with("[[ports]]\nname = \"u\"\ndevice = \"d\"\nrole = \"uplink\"\n[[ports]]\nname = \"b\"\ndevice = \"e\"\nrole = \"backend\"\nfor_port = \"u\" #!\n"), "ports[1].for_port", "for_port applies to role \"exception\", not Backend"),
        case("for_port naming an exception port", with("[[ports]]\nname = \"u\"\ndevice = \"d\"\nrole = \"uplink\"\n[[ports]]\nname = \"k\"\ndevice = \"tk\"\nrole = \"exception\"\n[[ports]]\nname = \"l\"\ndevice = \"tl\"\nrole = \"exception\"\nfor_port = \"k\" #!\n"), "ports[2].for_port", "port \"k\" is an exception port"),
        case("for_port naming no port", with("[[ports]]\nname = \"u\"\ndevice = \"d\"\nrole = \"uplink\"\n[[ports]]\nname = \"k\"\ndevice = \"tk\"\nrole = \"exception\"\nfor_port = \"nope\" #!\n"), "ports[1].for_port", "no port is named \"nope\""),
        // ---- neighbours (M47) ----
        case("l2dsr endpoint without mac off the backend port's subnets", with("[[ports]]\nname = \"b\"\ndevice = \"d\"\nrole = \"backend\"\naddresses = [\"10.2.0.2/24\"]\n").replace("delivery = \"ipip\"", "delivery = \"l2dsr\"").replace("endpoints = [{ address = \"10.1.0.1\", port = 80 }]", "endpoints = [{ address = \"10.1.0.1\", port = 80 }] #!"), "backend_services[0].groups[0].endpoints[0].address", "resolved with ARP/NDP on port \"b\""),
        case("no neighbour probes", with("[neighbours]\nprobes = 0 #!\n"), "neighbours.probes", "out of range 1-20"),
        case("zero reachable time", with("[neighbours]\nreachable = \"0s\" #!\n"), "neighbours.reachable", "longer than 0"),
        case("failed retry shorter than retransmit", with("[neighbours]\nretransmit = \"2s\"\nfailed_retry = \"1s\" #!\n"), "neighbours.failed_retry", "at least neighbours.retransmit"),
        // ---- VRRP ----
        case("VRRP VRID 0", with(&vrrp("vrid = 0 #!\n", "")), "vrrp[0].vrid", "a virtual router ID is 1 to 255"),
        case("VRRP owner priority", with(&vrrp("vrid = 51\npriority = 255 #!\n", "")), "vrrp[0].priority", "priority 255 is not 1 to 254"),
        case("VRRP interval too short", with(&vrrp("vrid = 51\nadvert_interval = \"50ms\" #!\n", "")), "vrrp[0].advert_interval", "from 100ms to 40.95s"),
        case("VRRP interval not in centiseconds", with(&vrrp("vrid = 51\nadvert_interval = \"105ms\" #!\n", "")), "vrrp[0].advert_interval", "not a whole number of centiseconds"),
        case("VRRP on no port", with(&vrrp("vrid = 51\n", "").replace("port = \"up\"", "port = \"nope\" #!")), "vrrp[0].port", "no port is named \"nope\""),
        case("VRRP VIP of no rule", with(&vrrp("vrid = 51\n", "").replace("vips = [\"10.0.0.10\"]", "vips = [\"10.0.0.99\"] #!")), "vrrp[0].vips", "10.0.0.99 is no single-address VIP of a forwarding rule"),
        case("VRRP group of two IP versions", with(&vrrp("vrid = 51\n", "").replace("vips = [\"10.0.0.10\"]", "vips = [\"10.0.0.10\", \"2001:db8::10\"] #!")), "vrrp[0].vips", "2001:db8::10 is not of the IP version of 10.0.0.10"),
        case("VRRP VIP in two groups", with(&vrrp("vrid = 51\n", "[[vrrp]]\nvrid = 52\nport = \"up\"\nvips = [\"10.0.0.10\"] #!\n")), "vrrp[1].vips", "10.0.0.10 is already in the group of VRID 51"),
        case("VRRP VRID twice on a port", with(&vrrp("vrid = 51\n", "[[vrrp]]\nvrid = 51 #!\nport = \"up\"\nvips = [\"10.0.0.11\"]\n")).replacen("vips = [\"10.0.0.10\"]\nprotocol", "vips = [\"10.0.0.10\", \"10.0.0.11\"]\nprotocol", 1), "vrrp[1].vrid", "VRID 51 of IPv4 is already a group on port \"up\""),
        case("VRRP VIP also announced by BGP", with(&format!("[bgp]\nspeaker = \"bird\"\ncontrol = \"/run/bird/bird.ctl\"\nlocal_asn = 65001\n{}", vrrp("vrid = 51\n", "").replace("vips = [\"10.0.0.10\"]", "vips = [\"10.0.0.10\"] #!"))), "vrrp[0].vips", "10.0.0.10 is announced by [bgp], which announces every VIP"),
        case("VRRP peer of the other IP version", with(&vrrp("vrid = 51\npeers = [\"2001:db8::3\"] #!\n", "")), "vrrp[0].peers[0]", "2001:db8::3 is not of the group's IP version"),
        // ---- BGP, flow sync, control ----
        case("reserved local ASN", with("[bgp]\nspeaker = \"bird\"\ncontrol = \"/run/bird/bird.ctl\"\nlocal_asn = 0 #!\n"), "bgp.local_asn", "AS 0 is reserved"),
        case("BIRD socket not a path", with("[bgp]\nspeaker = \"bird\"\ncontrol = \"127.0.0.1:179\" #!\nlocal_asn = 65001\n"), "bgp.control", "absolute path"),
        case("relative routes file", with("[bgp]\nspeaker = \"bird\"\ncontrol = \"/run/bird/bird.ctl\"\nlocal_asn = 65001\nroutes_file = \"vips.conf\" #!\n"), "bgp.routes_file", "absolute file path"),
        // Issue 38 item 9: bird.conf has no escapes; a quote or a line break
        // in a path written there would inject BIRD configuration.
        case("routes file injecting a BIRD protocol", with("[bgp]\nspeaker = \"bird\"\ncontrol = \"/run/bird/bird.ctl\"\nlocal_asn = 65001\nroutes_file = \"/run/x\\\";\\nprotocol bgp evil { local as 1; neighbor 192.0.2.66 as 2; ipv4 { export all; }; }\\ninclude \\\"/run/y\" #!\n"), "bgp.routes_file", "contains a double quote"),
        case("routes file with a line break", with("[bgp]\nspeaker = \"bird\"\ncontrol = \"/run/bird/bird.ctl\"\nlocal_asn = 65001\nroutes_file = \"/run/spillway/vips.conf\\nx\" #!\n"), "bgp.routes_file", "contains a line break"),
        case("routes file with a glob", with("[bgp]\nspeaker = \"bird\"\ncontrol = \"/run/bird/bird.ctl\"\nlocal_asn = 65001\nroutes_file = \"/etc/bird/*.conf\" #!\n"), "bgp.routes_file", "the glob character '*'"),
        case("control socket with a line break", with("[bgp]\nspeaker = \"bird\"\ncontrol = \"/run/bird/bird.ctl\\nprotocol static evil { ipv4; route 0.0.0.0/0 blackhole; }\" #!\nlocal_asn = 65001\n"), "bgp.control", "contains a line break"),
        case("control socket with a control character", with("[bgp]\nspeaker = \"bird\"\ncontrol = \"/run/bird/bird\\u0000.ctl\" #!\nlocal_asn = 65001\n"), "bgp.control", "the control character U+0000"),
        case("BFD interval too short", with("[bgp]\nspeaker = \"bird\"\ncontrol = \"/run/bird/bird.ctl\"\nlocal_asn = 65001\nbfd = { interval = \"5ms\", multiplier = 3 } #!\n"), "bgp.bfd.interval", "BFD interval 5ms: expected 10ms to 10s"),
        case("BFD interval too long", with("[bgp]\nspeaker = \"bird\"\ncontrol = \"/run/bird/bird.ctl\"\nlocal_asn = 65001\n[bgp.bfd]\ninterval = \"1m\" #!\n"), "bgp.bfd.interval", "BFD interval 60s: expected 10ms to 10s"),
        case("BFD as a boolean", with("[bgp]\nspeaker = \"bird\"\ncontrol = \"/run/bird/bird.ctl\"\nlocal_asn = 65001\nbfd = false #!\n"), "bgp.bfd", "expected a table: { interval = \"100ms\", multiplier = 3 }, or { enabled = false } for none"),
        case("BFD multiplier of zero", with("[bgp]\nspeaker = \"bird\"\ncontrol = \"/run/bird/bird.ctl\"\nlocal_asn = 65001\nbfd = { multiplier = 0 } #!\n"), "bgp.bfd.multiplier", "BFD multiplier 0: expected 1 to 255"),
        case("BFD multiplier beyond its octet", with("[bgp]\nspeaker = \"bird\"\ncontrol = \"/run/bird/bird.ctl\"\nlocal_asn = 65001\nbfd = { interval = \"50ms\", multiplier = 256 } #!\n"), "bgp.bfd.multiplier", "BFD multiplier 256: expected 1 to 255"),
        case("BGP peer twice", with("[bgp]\nspeaker = \"gobgp\"\ncontrol = \"127.0.0.1:50051\"\nlocal_asn = 65001\npeers = [\n  { address = \"10.0.0.1\", asn = 65000 },\n  { address = \"10.0.0.1\", asn = 65000 }, #!\n]\n"), "bgp.peers[1].address", "listed twice"),
        case("flow-sync peer is itself", with("[flow_sync]\nkey = \"hex:00112233445566778899aabbccddeeff\"\nlisten = \"10.0.0.2:7700\"\npeers = [\"10.0.0.2:7700\"] #!\n"), "flow_sync.peers[0]", "own listen address"),
        case("flow-sync batch of zero", with("[flow_sync]\nkey = \"hex:00112233445566778899aabbccddeeff\"\nlisten = \"10.0.0.2:7700\"\npeers = [\"10.0.0.3:7700\"]\nbatch_size = 0 #!\n"), "flow_sync.batch_size", "expected 1-1024"),
        case("flow-sync without a key", with("[flow_sync] #!\nlisten = \"10.0.0.2:7700\"\npeers = [\"10.0.0.3:7700\"]\n"), "flow_sync", "needs a shared key"),
        case("flow-sync key and key file", with("[flow_sync]\nlisten = \"10.0.0.2:7700\"\npeers = [\"10.0.0.3:7700\"]\nkey = \"hex:00112233445566778899aabbccddeeff\"\nkey_file = \"/etc/spillway/sync.key\" #!\n"), "flow_sync.key_file", "not both"),
        case("flow-sync key without encoding", with("[flow_sync]\nlisten = \"10.0.0.2:7700\"\npeers = [\"10.0.0.3:7700\"]\nkey = \"00112233445566778899aabbccddeeff\" #!\n"), "flow_sync.key", "expected \"hex:\" or \"base64:\""),
        case("flow-sync key not hex", with("[flow_sync]\nlisten = \"10.0.0.2:7700\"\npeers = [\"10.0.0.3:7700\"]\nkey = \"hex:0011223344556677889xaabbccddeeff\" #!\n"), "flow_sync.key", "not hex"),
        case("flow-sync key too short", with("[flow_sync]\nlisten = \"10.0.0.2:7700\"\npeers = [\"10.0.0.3:7700\"]\nkey = \"base64:AAECAwQFBgcICQ==\" #!\n"), "flow_sync.key", "a key of 10 bytes: expected 16-64"),
        case("flow-sync key file missing", with("[flow_sync]\nlisten = \"10.0.0.2:7700\"\npeers = [\"10.0.0.3:7700\"]\nkey_file = \"/nonexistent/spillway-sync.key\" #!\n"), "flow_sync.key_file", "cannot read /nonexistent/spillway-sync.key"),
        case("relative control socket", with("[control]\nsocket = \"spillway.sock\" #!\n"), "control.socket", "not an absolute path"),
        case("blank socket group", with("[control]\nsocket_group = \"\" #!\n"), "control.socket_group", "not a group name"),
        case("no control connections", with("[control]\nmax_connections = 0 #!\n"), "control.max_connections", "expected 1-4096"),
        case("control timeout of zero", with("[control]\ntimeout = \"0s\" #!\n"), "control.timeout", "expected more than 0s and at most 60s"),
        case("too many metrics connections", with("[metrics]\nmax_connections = 5000 #!\n"), "metrics.max_connections", "expected 1-4096"),
        case("metrics timeout too long", with("[metrics]\ntimeout = \"5m\" #!\n"), "metrics.timeout", "at most 60s"),
        case("empty metrics allow-list", with("[metrics]\nallow = [] #!\n"), "metrics.allow", "admits nobody"),
        case("per-client cap above max_connections", with("[metrics]\nmax_connections = 16\nmax_connections_per_client = 17 #!\n"), "metrics.max_connections_per_client", "17: expected 1-16 (at most max_connections)"),
        case("per-client cap of zero", with("[metrics]\nmax_connections_per_client = 0 #!\n"), "metrics.max_connections_per_client", "0: expected 1-64"),
        case("allow-list prefix with host bits", with("[metrics]\nallow = [\"10.1.2.3/16\"] #!\n"), "metrics.allow[0]", "write the network address"),
        case("empty tunnel allow-list", with("[tunnel_ingress]\nallow = [] #!\n"), "tunnel_ingress.allow", "accepts no tunnel"),
        case("tunnel source with host bits", with("[tunnel_ingress]\nallow = [\"10.1.2.3/16\"] #!\n"), "tunnel_ingress.allow[0]", "write the network address"),
        case("no tunnel protocol", with("[tunnel_ingress]\nprotocols = [] #!\n"), "tunnel_ingress.protocols", "set enabled = false"),
        case("tunnel protocol twice", with("[tunnel_ingress]\nprotocols = [\"gre\",\n  \"gre\", #!\n]\n"), "tunnel_ingress.protocols[1]", "listed twice"),
        case("GUE and GENEVE on one port", with("[tunnel_ingress]\ngue_port = 7000\ngeneve_port = 7000 #!\n"), "tunnel_ingress.geneve_port", "ports of their own"),
        case("tunnel port zero", with("[tunnel_ingress]\ngue_port = 0 #!\n"), "tunnel_ingress.gue_port", "port 0"),
    ]
}

#[test]
fn every_rule_rejects_its_config_naming_field_line_and_reason() {
    let all = cases();
    assert!(all.len() >= 80, "{} cases", all.len());
    let mut names = std::collections::HashSet::new();
    // Every case runs; the failures are reported together.
    let mut failures = Vec::new();
    for c in all {
        assert!(names.insert(c.name), "case name {:?} twice", c.name);
        let marker = c
            .text
            .lines()
            .position(|l| l.contains("#!"))
            .unwrap_or_else(|| panic!("{}: no #! marker", c.name))
            + 1;
        let errs = match load(&c.text) {
            Ok(_) => {
                failures.push(format!("{}: accepted:\n{}", c.name, c.text));
                continue;
            }
            Err(e) => e,
        };
        let hit = errs
            .errors
            .iter()
            .find(|e| e.path == c.path && e.message.contains(c.reason));
        let Some(e) = hit else {
            failures.push(format!(
                "{}: no error at {} saying {:?}; got:\n{errs}",
                c.name, c.path, c.reason
            ));
            continue;
        };
        if e.line != marker {
            failures.push(format!(
                "{}: line {} instead of {marker}: {e}",
                c.name, e.line
            ));
        }
        let prefix = match c.path {
            "" => format!("t.toml:{marker}:{}: ", e.col),
            p => format!("t.toml:{marker}:{}: {p}: ", e.col),
        };
        if e.file != "t.toml" || !e.to_string().starts_with(&prefix) {
            failures.push(format!("{}: rendered as {e}", c.name));
        }
        // One mistake, one error: no noise from rules that did not fire.
        if errs.errors.len() != 1 {
            failures.push(format!("{}: expected one error, got:\n{errs}", c.name));
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

#[test]
fn the_base_config_of_the_cases_is_valid() {
    let l = load(&with("")).unwrap_or_else(|e| panic!("{e}"));
    // Warned only that its service has no health check, which keeps the
    // cases short.
    assert_eq!(l.warnings.len(), 1, "{:?}", l.warnings);
    assert!(l.warnings[0].contains(NO_HEALTH_CHECK), "{:?}", l.warnings);
    assert!(other_warnings(&l).is_empty(), "{:?}", l.warnings);
}

/// M47: one exception port per data port; `for_port` defaults to the uplink.
#[test]
fn exception_ports_compile_to_the_data_port_each_stands_for() {
    let ports = concat!(
        "[[ports]]\nname = \"k-be\"\ndevice = \"t1\"\nrole = \"exception\"\nfor_port = \"be\"\n",
        "[[ports]]\nname = \"up\"\ndevice = \"d0\"\nrole = \"uplink\"\n",
        "[[ports]]\nname = \"be\"\ndevice = \"d1\"\nrole = \"backend\"\naddresses = [\"10.0.1.2/24\"]\n",
        "[[ports]]\nname = \"k-up\"\ndevice = \"t0\"\nrole = \"exception\"\n",
    );
    let l = load(&with(ports)).unwrap_or_else(|e| panic!("{e}"));
    assert!(other_warnings(&l).is_empty(), "{:?}", other_warnings(&l));
    assert_eq!(
        l.compiled.settings.exception_for,
        vec![Some(2), None, None, Some(1)]
    );
    // Without an uplink, an exception port without for_port stands for
    // nothing: accepted, with a warning (what the host sends is dropped).
    let alone = "[[ports]]\nname = \"k\"\ndevice = \"t0\"\nrole = \"exception\"\n";
    let l = load(&with(alone)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(l.compiled.settings.exception_for, vec![None]);
    assert!(
        other_warnings(&l)
            .iter()
            .any(|w| w.contains("ports[0].role: no port has role \"uplink\"")),
        "{:?}",
        other_warnings(&l)
    );
}

#[test]
fn all_errors_are_reported_at_once_in_file_order() {
    let text = with(concat!(
        "[dataplane]\n",
        "worker_cores = [1, 1] #! 1\n",
        "burst_size = 1000 #! 2\n",
        "\n[[forwarding_rules]]\n",
        "name = \"web\" #! 3\n",
        "vips = [\"10.0.0.10\"]\n",
        "protocol = \"TCP\"\n",
        "ports = \"1-100\" #! 4\n",
        "backend_service = \"nope\" #! 5\n",
        "\n[[health_checks]]\n",
        "name = \"h\"\n",
        "type = \"TCP\"\n",
        "timeout = \"10s\" #! 6\n",
    ));
    let errs = load(&text).unwrap_err();
    let lines: Vec<usize> = errs.errors.iter().map(|e| e.line).collect();
    let markers: Vec<usize> = text
        .lines()
        .enumerate()
        .filter(|(_, l)| l.contains("#!"))
        .map(|(i, _)| i + 1)
        .collect();
    assert_eq!(lines, markers, "{errs}");
    let shown = errs.to_string();
    assert_eq!(shown.lines().count(), 6, "{shown}");
    assert!(shown.lines().all(|l| l.starts_with("t.toml:")), "{shown}");
}

#[test]
fn syntax_errors_are_all_reported_with_positions() {
    let text = format!("{}\nx = = 1\ny = \"unterminated\nz = 3\n", node_table());
    let errs = load(&text).unwrap_err();
    assert!(errs.errors.len() >= 2, "{errs}");
    assert_eq!(errs.errors[0].line, 7, "{errs}");
    assert!(errs.errors.iter().any(|e| e.line == 8), "{errs}");
}

#[test]
fn warnings_do_not_reject() {
    let text = with("[[health_checks]]\nname = \"unused\"\ntype = \"TCP\"\nport = 80\n");
    let l = load(&text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(other_warnings(&l).len(), 1, "{:?}", other_warnings(&l));
    assert!(
        other_warnings(&l)[0].contains("t.toml:23:8: health_checks[0].name: health check \"unused\" is used by no backend service"),
        "{:?}",
        other_warnings(&l)
    );
}

/// Only the VIPs a node serves are probed (M5, M52), so only they need
/// probe source ports: one endpoint through web's VIP and both of x's is 3
/// probes on a node of both groups, 2 on a node of group 0.
#[test]
fn probe_ports_are_counted_for_the_served_vips_only() {
    let text = |node_extra: &str| {
        format!(
            "{}{}",
            with("[dataplane]\nvip_probe_ports = \"61000-61001\"\n[[health_checks]]\nname = \"h\"\ntype = \"TCP\"\nport = 80\ntarget = \"vip\"\n")
                .replace("delivery = \"ipip\"", "delivery = \"ipip\"\nhealth_check = \"h\"")
                .replacen("zone = \"r1-a\"\n", &format!("zone = \"r1-a\"\n{node_extra}"), 1),
            rule("x", "\"10.0.0.11\", \"10.0.0.12\"", "TCP", "81", "")
        )
    };
    let both = load(&text("")).map(|_| ()).unwrap_err().to_string();
    assert!(
        both.contains("3 probes through VIPs need a source port each, and the range has 2"),
        "{both}"
    );
    let l = load(&text("availability_group = 0\n")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(l.compiled.vip_probes.len(), 2);
}

/// A node that announces its VIPs (one of N behind ECMP, perhaps) without
/// flow-sync peers or a capacity share would budget a whole RATE capacity
/// for itself: a warning. Either of them silences it.
#[test]
fn announcing_rate_capacity_without_peers_or_a_share_is_a_warning() {
    let rate =
        with("[bgp]\nspeaker = \"bird\"\ncontrol = \"/run/bird/bird.ctl\"\nlocal_asn = 65001\n")
            .replacen(
                "delivery = \"ipip\"",
                "delivery = \"ipip\"\nbalancing_mode = \"RATE\"\nmax_rate_per_endpoint = 1000",
                1,
            );
    let l = load(&rate).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(other_warnings(&l).len(), 1, "{:?}", other_warnings(&l));
    assert!(
        other_warnings(&l)[0].contains(
            "node.capacity_share: this node announces its VIPs but has no [flow_sync] peers"
        ),
        "{:?}",
        other_warnings(&l)
    );
    let shared = rate.replacen(
        "zone = \"r1-a\"\n",
        "zone = \"r1-a\"\ncapacity_share = 0.5\n",
        1,
    );
    let l = load(&shared).unwrap_or_else(|e| panic!("{e}"));
    assert!(other_warnings(&l).is_empty(), "{:?}", other_warnings(&l));
    assert!((l.compiled.node.capacity_share - 0.5).abs() < 1e-12);
    // The default share: 1 / (peers + 1).
    let synced = format!(
        "{rate}\n[flow_sync]\nlisten = \"192.0.2.1:7700\"\npeers = [\"192.0.2.2:7700\", \"192.0.2.3:7700\"]\nkey = \"hex:000102030405060708090a0b0c0d0e0f\"\n"
    );
    let l = load(&synced).unwrap_or_else(|e| panic!("{e}"));
    assert!(other_warnings(&l).is_empty(), "{:?}", other_warnings(&l));
    assert!((l.compiled.node.capacity_share - 1.0 / 3.0).abs() < 1e-12);
    assert!(!l.compiled.node.capacity_share_set);
}

#[test]
fn a_worker_on_the_management_core_is_a_warning() {
    let text = with("[dataplane]\nmanagement_core = 1\nworker_cores = [0, 1]\n");
    let l = load(&text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(other_warnings(&l).len(), 1, "{:?}", other_warnings(&l));
    assert!(
        other_warnings(&l)[0]
            .contains("dataplane.worker_cores[1]: core 1 is also the management core"),
        "{:?}",
        other_warnings(&l)
    );
}

/// M50: a per-client cap that lets one client hold every HTTP slot is
/// allowed, and said; the default (8, never above max_connections) is
/// enough for max_connections above 8.
#[test]
fn a_per_client_cap_that_reserves_nothing_is_a_warning() {
    for (metrics, path) in [
        (
            "max_connections = 8\nmax_connections_per_client = 8\n",
            "metrics.max_connections_per_client",
        ),
        // Absent: 8, here capped at 4.
        ("max_connections = 4\n", "metrics.max_connections"),
    ] {
        let l = load(&with(&format!("[metrics]\n{metrics}"))).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(other_warnings(&l).len(), 1, "{:?}", other_warnings(&l));
        assert!(
            other_warnings(&l)[0].contains(&format!("{path}: max_connections_per_client "))
                && other_warnings(&l)[0].contains("one client can hold every slot"),
            "{:?}",
            other_warnings(&l)
        );
    }
    for (metrics, per_client) in [
        ("", 8),
        ("max_connections = 9\n", 8),
        ("max_connections = 1\n", 1),
        (
            "max_connections = 16\nmax_connections_per_client = 15\n",
            15,
        ),
    ] {
        let l = load(&with(&format!("[metrics]\n{metrics}"))).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            other_warnings(&l).is_empty(),
            "{metrics}: {:?}",
            other_warnings(&l)
        );
        assert_eq!(l.config.metrics.per_client(), per_client, "{metrics}");
    }
}

/// M50: a metrics listener off loopback is allowed, and said.
#[test]
fn a_metrics_listener_off_loopback_is_a_warning() {
    for (listen, allow, who) in [
        (
            "0.0.0.0:9469",
            "",
            "any address (set [metrics] allow to narrow it)",
        ),
        ("[::]:9469", "", "any address"),
        (
            "10.0.0.2:9469",
            "allow = [\"10.0.0.0/24\", \"::1/128\"]\n",
            "clients in 10.0.0.0/24, ::1/128",
        ),
    ] {
        let text = with(&format!("[metrics]\nlisten = \"{listen}\"\n{allow}"));
        let l = load(&text).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(other_warnings(&l).len(), 1, "{:?}", other_warnings(&l));
        assert!(
            other_warnings(&l)[0].contains(&format!("metrics.listen: {listen} is not a loopback address: /status and /metrics are served to {who}")),
            "{:?}",
            other_warnings(&l)
        );
    }
    for listen in ["127.0.0.1:9469", "[::1]:9469", "127.0.0.5:80"] {
        let l = load(&with(&format!("[metrics]\nlisten = \"{listen}\"\n")))
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            other_warnings(&l).is_empty(),
            "{listen}: {:?}",
            other_warnings(&l)
        );
    }
}

#[test]
fn cores_are_not_checked_when_the_machine_is_unknown() {
    let text = with("[dataplane]\nmanagement_core = 60\nworker_cores = [61, 62]\n");
    assert!(load_str("t.toml", &text, &Env::default()).is_ok());
    assert!(load_str("t.toml", &text, &Env::with_cpus(2)).is_err());
}

#[test]
fn schema_errors_are_all_reported_too() {
    // Each marked line has one mistake serde would stop at; the loader
    // removes the offending entry and goes on, so all are reported. Rule "b"
    // comes after rule "a", whose bad protocol removes "a" as a whole.
    let text = concat!(
        "[node]\n",
        "name = \"n\"\n",
        "region = \"r\"\n",
        "zone = \"z\"\n",
        "zoen = \"z\" #!\n",
        "[dataplane]\n",
        "burst_size = \"32\" #!\n",
        "[[forwarding_rules]]\n",
        "name = \"a\"\n",
        "vips = [\"10.0.0.1\"]\n",
        "protocol = \"SCTP\" #!\n",
        "backend_service = \"s\"\n",
        "[[forwarding_rules]]\n",
        "name = \"b\"\n",
        "vips = [\"10.0.0.300\"] #!\n",
        "protocol = \"TCP\"\n",
        "ports = \"90-80\" #!\n",
        "backend_service = \"s\"\n",
        "[[backend_services]]\n",
        "name = \"s\"\n",
        "delivery = \"gre\"\n",
        "[[backend_services.groups]]\n",
        "name = \"g\"\n",
        "region = \"r\"\n",
        "zone = \"z\"\n",
        "endpoints = [\n",
        "  { address = \"10.1.0.1\", prt = 80 }, #!\n",
        "  { address = \"10.1.0.2\", weight = \"x\" }, #!\n",
        "]\n",
        "[[health_checks]]\n",
        "name = \"h\"\n",
        "type = \"TCP\"\n",
        "interval = 5 #!\n",
    );
    let errs = load(text).unwrap_err();
    let lines: Vec<usize> = errs.errors.iter().map(|e| e.line).collect();
    let markers: Vec<usize> = text
        .lines()
        .enumerate()
        .filter(|(_, l)| l.contains("#!"))
        .map(|(i, _)| i + 1)
        .collect();
    assert_eq!(lines, markers, "{errs}");
    let paths: Vec<&str> = errs.errors.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "node.zoen",
            "dataplane.burst_size",
            "forwarding_rules[0].protocol",
            "forwarding_rules[1].vips[0]",
            "forwarding_rules[1].ports",
            "backend_services[0].groups[0].endpoints[0].prt",
            "backend_services[0].groups[0].endpoints[1].weight",
            "health_checks[0].interval",
        ]
    );
}

#[test]
fn a_removed_element_does_not_renumber_later_paths() {
    // Elements 0 and 2 are broken; after element 0 is dropped, element 2
    // is still called [2], and its two errors are both found (the second
    // only if the first's removal finds the element at its new index).
    let text = with(concat!(
        // A bad required field: the whole element 0 is dropped.
        "[[health_checks]]\nname = \"a\"\ntype = \"TCPX\"\nport = 1\n",
        "[[health_checks]]\nname = \"b\"\ntype = \"TCP\"\nport = 1\n",
        "[[health_checks]]\nname = \"c\"\ntype = \"TCP\"\nport = 1\ntimeout = 3\nbogus = 1\n",
    ));
    let errs = load(&text).unwrap_err();
    let paths: Vec<&str> = errs.errors.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "health_checks[0].type",
            "health_checks[2].timeout",
            "health_checks[2].bogus"
        ],
        "{errs}"
    );
}

/// Fields this version parses but does not act on: setting one is accepted
/// with a warning that names its path; leaving it out (the default) is not
/// warned of. No field silently does nothing.
#[test]
fn fields_not_used_by_this_version_are_warnings_naming_them() {
    let cases: [(&str, String); 2] = [
        (
            "dataplane.burst_size",
            with("[dataplane]\nburst_size = 64\n"),
        ),
        (
            "bgp.speaker",
            with("[bgp]\nspeaker = \"gobgp\"\ncontrol = \"127.0.0.1:50051\"\nlocal_asn = 64512\n"),
        ),
    ];
    for (path, text) in cases {
        let l = load(&text).unwrap_or_else(|e| panic!("{path}: rejected:\n{e}\n{text}"));
        assert_eq!(
            other_warnings(&l).len(),
            1,
            "{path}: {:?}\n{text}",
            other_warnings(&l)
        );
        assert!(
            other_warnings(&l)[0].contains(&format!(": {path}: "))
                && other_warnings(&l)[0].contains("not used by this version"),
            "{path}: {:?}",
            other_warnings(&l)
        );
        assert!(
            l.summary().contains("not used by this version"),
            "{path}: the summary (check-config) shows it"
        );
    }
    // The same fields at their defaults, a passthrough rule, or BGP through
    // BIRD (driven, M34) are not warned of.
    let quiet = with(concat!(
        "[dataplane]\nworker_cores = [1]\n",
        "[[ports]]\nname = \"up\"\ndevice = \"net_null0\"\nrole = \"uplink\"\naddresses = [\"10.0.0.2/24\"]\n",
        "[bgp]\nspeaker = \"bird\"\ncontrol = \"/run/bird/bird.ctl\"\nlocal_asn = 64512\n",
    ))
    .replace(
        "backend_service = \"web\"\n",
        "backend_service = \"web\"\nmode = \"passthrough\"\n",
    );
    let l = load(&quiet).unwrap_or_else(|e| panic!("{e}"));
    assert!(other_warnings(&l).is_empty(), "{:?}", l.warnings);
}

#[test]
fn tunnel_sources_default_to_the_remote_rule_peers() {
    let remote = service("far", "gue")
        .child(group("g", "r2", "r2-a").str("kind", "remote_rule").set(
        "remote",
        r#"{ status_url = "http://192.0.2.7:9469/status", rule = "web", vip = "198.51.100.9" }"#,
    ));
    let named = service("far2", "gue")
        .child(group("g", "r2", "r2-a").str("kind", "remote_rule").set(
        "remote",
        r#"{ status_url = "http://peer.example:9469/status", rule = "web", vip = "2001:db8::9" }"#,
    ));
    let loaded = load(&with(&format!("\n{remote}\n{named}\n"))).unwrap();
    let t = &loaded.compiled.tunnel_ingress;
    let allow: Vec<String> = t.allow.iter().map(ToString::to_string).collect();
    assert_eq!(
        allow,
        ["192.0.2.7/32", "198.51.100.9/32", "2001:db8::9/128"]
    );
    assert!(t.ipip && t.gre);
    assert_eq!((t.gue_port, t.geneve_port), (Some(6080), Some(6081)));
    // A status URL by name adds no source, and says so.
    assert!(
        loaded
            .warnings
            .iter()
            .any(|w| w.contains("groups[0].remote.status_url") && w.contains("host is a name")),
        "{:?}",
        loaded.warnings
    );

    let explicit = load(&with(&format!(
        "\n{remote}\n[tunnel_ingress]\nallow = [\"10.7.0.0/16\"]\nprotocols = [\"gue\"]\ngue_port = 7777\n"
    )))
    .unwrap();
    let t = &explicit.compiled.tunnel_ingress;
    assert_eq!(t.allow.len(), 1);
    assert!(t.allows("10.7.1.2".parse().unwrap()) && !t.allows("192.0.2.7".parse().unwrap()));
    assert_eq!(
        (t.ipip, t.gre, t.gue_port, t.geneve_port),
        (false, false, Some(7777), None)
    );
    assert_eq!(t.tunnel_ports, [7777, 6081]);

    let off = load(&with("[tunnel_ingress]\nenabled = false\n")).unwrap();
    assert!(!off.compiled.tunnel_ingress.any());
}

#[test]
fn a_dual_stack_l2dsr_service_takes_both_families_only_if_every_endpoint_can() {
    let text = |second: &str| {
        format!(
            r#"{}
[[forwarding_rules]]
name = "v4"
vips = ["10.0.0.10"]
protocol = "TCP"
ports = 80
backend_service = "ds"

[[forwarding_rules]]
name = "v6"
vips = ["fd00::10"]
protocol = "TCP"
ports = 80
backend_service = "ds"

[[backend_services]]
name = "ds"
delivery = "l2dsr"
[[backend_services.groups]]
name = "g"
region = "r1"
zone = "r1-a"
endpoints = [
  {{ address = "10.1.0.1", address6 = "fd01::1", mac = "02:00:00:00:00:01" }},
  {second}
]
"#,
            node_table()
        )
    };
    load(&text(
        r#"{ address = "10.1.0.2", address6 = "fd01::2", mac = "02:00:00:00:00:02" },"#,
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    let Err(err) = load(&text(
        r#"{ address = "10.1.0.2", mac = "02:00:00:00:00:02" },"#,
    )) else {
        panic!("an IPv4-only endpoint cannot take the IPv6 rule");
    };
    let s = err.to_string();
    assert!(
        s.contains("endpoints[1].address")
            && s.contains("cannot take the IPv6 traffic of rule \"v6\""),
        "{s}"
    );
}

/// A configuration of `n` services (each with a rule of its own) with a
/// mistake of every kind whose check relates services, rules, health
/// checks and composites to one another: the checks that were quadratic
/// in services before they were indexed (issue 38, item 12).
fn many_mistakes(n: usize) -> String {
    use std::fmt::Write as _;
    let mut t = node_table();
    t.push_str(
        "\n[[health_checks]]\nname = \"hc\"\ntype = \"TCP\"\nport = 80\n\
         \n[[health_checks]]\nname = \"hc-unused\"\ntype = \"TCP\"\nport = 81\n\
         \n[[health_checks]]\nname = \"hc-vip\"\ntype = \"TCP\"\nport = 80\ntarget = \"vip\"\nsource_address = \"10.99.0.1\"\n\
         \n[[health_checks]]\nname = \"hc-v6-source\"\ntype = \"TCP\"\nport = 80\nsource_address = \"fd00::99\"\n",
    );
    let check = |i: usize| match i {
        11..=13 => "hc-vip",
        30 => "hc-v6-source",
        60 => "nohc",
        _ => "hc",
    };
    for i in 0..n {
        let name = if i == 81 {
            "s80".to_owned()
        } else {
            format!("s{i}")
        };
        let delivery = if i == 20 { "geneve" } else { "gue" };
        let six = if i % 9 == 0 || i == 20 {
            format!(", address6 = \"fd00::{i:x}\"")
        } else {
            String::new()
        };
        let _ = write!(
            t,
            "\n[[backend_services]]\nname = \"{name}\"\ndelivery = \"{delivery}\"\nhealth_check = \"{}\"\nmaglev_table_size = 251\ngroups = [{{ name = \"g\", region = \"r1\", zone = \"r1-a\", endpoints = [{{ address = \"10.60.{}.{}\", port = 80{six} }}] }}]\n",
            check(i),
            i / 200,
            i % 200 + 1,
        );
    }
    for i in 0..n {
        // s7 is used by no rule; s11 (a check through VIPs) neither.
        let service = match i {
            7 | 11 => "web".to_owned(),
            50 => "missing".to_owned(),
            _ => format!("s{i}"),
        };
        let vip = match i {
            71 => "10.50.0.70".to_owned(),
            13 => "fd00:50::13".to_owned(),
            _ => format!("10.50.{}.{}", i / 200, i % 200),
        };
        let (mode, ports) = match i {
            20 => (
                "\nmode = \"gateway\"\ngateway_endpoints = [{ address = \"10.1.0.9\", id = 1 }]",
                "\"all\"",
            ),
            12 => (
                "\nmode = \"gateway\"\ngateway_endpoints = [{ address = \"10.1.0.10\", id = 2 }]",
                "\"all\"",
            ),
            _ => ("", "80"),
        };
        let _ = write!(
            t,
            "\n[[forwarding_rules]]\nname = \"r{i}\"\nvips = [\"{vip}\"]\nprotocol = \"TCP\"\nports = {ports}\nbackend_service = \"{service}\"{mode}\n"
        );
    }
    // A passthrough rule to the appliances' service too.
    t.push_str("\n[[forwarding_rules]]\nname = \"r20-pass\"\nvips = [\"10.51.0.20\"]\nprotocol = \"TCP\"\nports = 80\nbackend_service = \"s20\"\n");
    t.push_str(
        "\n[[composite_health_checks]]\nname = \"c1\"\nsources = [{ backend_service = \"s40\" }, { backend_service = \"s41\" }]\ndestination = \"r40\"\n\
         \n[[composite_health_checks]]\nname = \"c2\"\nsources = [{ backend_service = \"s42\" }]\ndestination = \"r40\"\n\
         \n[[composite_health_checks]]\nname = \"c3\"\nsources = [{ backend_service = \"c1\" }, { backend_service = \"nothing\" }]\ndestination = \"nope\"\n",
    );
    t
}

/// A valid configuration of `n` services with the warnings that relate
/// services, rules and health checks: a service and a check used by
/// nothing, a service used by a composite only.
fn many_warnings(n: usize) -> String {
    use std::fmt::Write as _;
    let mut t = with("");
    t.push_str(
        "\n[[health_checks]]\nname = \"hc\"\ntype = \"TCP\"\nport = 80\n\
         \n[[health_checks]]\nname = \"hc-unused\"\ntype = \"TCP\"\nport = 81\n",
    );
    for i in 0..n {
        let _ = write!(
            t,
            "\n[[backend_services]]\nname = \"s{i}\"\ndelivery = \"gue\"\nhealth_check = \"hc\"\nmaglev_table_size = 251\ngroups = [{{ name = \"g\", region = \"r1\", zone = \"r1-a\", endpoints = [{{ address = \"10.60.{}.{}\", port = 80 }}] }}]\n",
            i / 200,
            i % 200 + 1,
        );
    }
    for i in (0..n).filter(|i| !matches!(i, 7 | 8)) {
        let _ = write!(
            t,
            "\n[[forwarding_rules]]\nname = \"r{i}\"\nvips = [\"10.50.{}.{}\"]\nprotocol = \"TCP\"\nports = 80\nbackend_service = \"s{i}\"\n",
            i / 200,
            i % 200
        );
    }
    t.push_str("\n[[composite_health_checks]]\nname = \"c1\"\nsources = [{ backend_service = \"s8\" }]\ndestination = \"r9\"\n");
    t
}

/// Every error and warning of the cases above, of the example files and
/// of [`many_mistakes`], as recorded in `validation.golden` before the
/// checks were indexed (issue 38, item 12): the same files must get the
/// same errors, in the same order, with the same words.
/// `SPILLWAY_BLESS=1` rewrites the file (for a deliberate change).
#[test]
fn every_error_and_warning_is_the_one_recorded() {
    let render = |name: &str, text: &str| -> String {
        let mut out = format!("== {name}\n");
        match load(text) {
            Ok(l) => {
                for w in &l.warnings {
                    out.push_str(&format!("{w}\n"));
                }
            }
            Err(e) => out.push_str(&format!("{e}\n")),
        }
        out
    };
    let mut got = String::new();
    for c in cases() {
        got.push_str(&render(c.name, &c.text));
    }
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        got.push_str(&render(&name, &text));
    }
    got.push_str(&render("many mistakes", &many_mistakes(400)));
    got.push_str(&render("many warnings", &many_warnings(400)));
    let golden = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/validation.golden");
    if std::env::var_os("SPILLWAY_BLESS").is_some() {
        std::fs::write(&golden, &got).unwrap();
    }
    let want = std::fs::read_to_string(&golden).unwrap();
    if got != want {
        let (g, w): (Vec<_>, Vec<_>) = (got.lines().collect(), want.lines().collect());
        let first = g
            .iter()
            .zip(&w)
            .position(|(a, b)| a != b)
            .unwrap_or(g.len().min(w.len()));
        panic!(
            "the errors differ from validation.golden from line {}:\n got: {:?}\nwant: {:?}",
            first + 1,
            g.get(first),
            w.get(first)
        );
    }
}

/// Rules on one VIP are checked against the rules whose port ranges meet
/// theirs, found by a sweep in port order (issue 38, item 12): every
/// overlapping pair is told, adjacent in port order or not, and rules on
/// ports of their own are not, however many share the VIP.
#[test]
fn every_overlapping_pair_of_rules_on_a_vip_is_told_and_no_other() {
    let mut extra = String::new();
    // 2000 rules on one VIP, a port each: no overlap.
    for i in 0..2000 {
        extra.push_str(&rule(
            &format!("p{i}"),
            "\"10.0.0.20\"",
            "TCP",
            &(2000 + i).to_string(),
            "",
        ));
    }
    // On another VIP: a wide range, one inside it, one overlapping only
    // the wide one (past the second's end), one of several ranges whose
    // last meets the first, and UDP on the same ports (another protocol).
    for (name, ports, proto) in [
        ("wide", "\"100-200\"", "TCP"),
        ("inside", "\"110-120\"", "TCP"),
        ("tail", "\"150-160\"", "TCP"),
        ("multi", "\"10,20,199\"", "TCP"),
        ("udp", "\"100-200\"", "UDP"),
    ] {
        extra.push_str(&rule(name, "\"10.0.0.30\"", proto, ports, ""));
    }
    let errs = match load(&with(&extra)) {
        Ok(_) => panic!("accepted"),
        Err(e) => e,
    };
    let got: Vec<String> = errs
        .errors
        .iter()
        .map(|e| format!("{}: {}", e.path, e.message))
        .collect();
    let want = [
        "forwarding_rules[2002].ports: TCP ports 110-120 overlap rule \"wide\"",
        "forwarding_rules[2003].ports: TCP ports 150-160 overlap rule \"wide\"",
        "forwarding_rules[2004].ports: TCP ports 199 overlap rule \"wide\"",
    ];
    assert_eq!(got.len(), want.len(), "{got:#?}");
    for (g, w) in got.iter().zip(want) {
        assert!(g.starts_with(w), "{g} / {w}");
    }
}

/// M14: draining endpoints as the last resort need a draining period to
/// exist; without one the fallback can never apply, which is said.
#[test]
fn a_draining_fallback_without_a_draining_period_is_a_warning() {
    let fallback = |timeout: &str| {
        with("").replace(
            "[[backend_services]]\n",
            &format!("[[backend_services]]\nno_backend_fallback = \"draining\"\nconnection_draining_timeout = \"{timeout}\"\n"),
        )
    };
    let l = load(&fallback("0s")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(other_warnings(&l).len(), 1, "{:?}", other_warnings(&l));
    assert!(
        other_warnings(&l)[0].contains("backend_services[0].no_backend_fallback: \"draining\" with connection_draining_timeout = 0"),
        "{:?}",
        other_warnings(&l)
    );
    let l = load(&fallback("30s")).unwrap_or_else(|e| panic!("{e}"));
    assert!(other_warnings(&l).is_empty(), "{:?}", other_warnings(&l));
    assert_eq!(
        l.config.backend_services[0].no_backend_fallback,
        config::schema::NoBackendFallback::Draining
    );
    let e = load(&with("").replace(
        "[[backend_services]]\n",
        "[[backend_services]]\nno_backend_fallback = \"unhealthy\"\n",
    ))
    .map(|_| ())
    .expect_err("an unknown fallback is refused");
    assert!(e.to_string().contains("no_backend_fallback"), "{e}");
}
