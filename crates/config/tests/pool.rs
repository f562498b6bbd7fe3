//! VIPs from the availability groups' pools (M5): allocated by name, the
//! same whatever the order of the file, past every address taken, shown as
//! allocated; refused with a reason when they cannot be.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

use std::net::IpAddr;

use config::{Env, Loaded, load_str};

const HEAD: &str = r#"
[node]
name = "n1"
region = "r1"
zone = "r1-a"

[[ports]]
name = "uplink"
device = "net_null0"
role = "uplink"
addresses = ["198.51.100.2/24", "2001:db8::2/64"]

[[backend_services]]
name = "svc"
delivery = "ipip"
[[backend_services.groups]]
name = "g"
region = "r1"
zone = "r1-a"
endpoints = [{ address = "10.1.0.1", address6 = "fd01::1" }]
"#;

const POOLS: &str = r#"
[[availability_groups]]
group = 0
vip_pool = ["192.0.2.0/28", "2001:db8:f00::/120"]

[[availability_groups]]
group = 1
vip_pool = ["192.0.2.16/28"]
"#;

/// Rule `name` on TCP `port`: `vips` (a list's text) or none, and `extra`
/// lines.
fn rule(name: &str, port: u16, vips: Option<&str>, extra: &str) -> String {
    let vips = vips.map(|v| format!("vips = [{v}]\n")).unwrap_or_default();
    format!(
        "\n[[forwarding_rules]]\nname = \"{name}\"\n{vips}protocol = \"TCP\"\nports = {port}\nbackend_service = \"svc\"\n{extra}"
    )
}

fn load(text: &str) -> Result<Loaded, config::ConfigErrors> {
    load_str("t.toml", text, &Env::with_cpus(4))
}

/// Each child rule's VIP and whether it was allocated, by name.
fn vips(l: &Loaded) -> Vec<(String, IpAddr, bool)> {
    let mut v: Vec<_> = l
        .compiled
        .children
        .iter()
        .map(|c| (c.name.clone(), c.vip, c.allocated))
        .collect();
    v.sort();
    v
}

fn in_prefix(a: IpAddr, p: &str) -> bool {
    p.parse::<config::values::Prefix>().unwrap().contains(a)
}

#[test]
fn vips_come_from_the_pools_by_name_whatever_the_order() {
    let rules = [
        rule("web", 80, None, ""),
        rule("api", 81, None, ""),
        rule("mail", 25, None, ""),
        rule("six", 443, None, "ip_version = \"IPV6\"\n"),
        // Written VIPs, one inside a pool: never given to another rule.
        rule("fixed", 82, Some("\"192.0.2.5\", \"192.0.2.20\""), ""),
    ];
    let text = format!("{HEAD}{POOLS}{}", rules.concat());
    let a = load(&text).unwrap_or_else(|e| panic!("{e}"));
    let reversed: String = rules.iter().rev().cloned().collect();
    let b = load(&format!("{HEAD}{reversed}{POOLS}")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(vips(&a), vips(&b), "the order of the file does not matter");
    let all = vips(&a);
    for (name, vip, allocated) in &all {
        let fixed = name.starts_with("fixed");
        assert_eq!(*allocated, !fixed, "{name}");
        if fixed {
            continue;
        }
        let pool = match (name.ends_with("ag0"), name.starts_with("six")) {
            (true, false) => "192.0.2.0/28",
            (true, true) => "2001:db8:f00::/120",
            (false, false) => "192.0.2.16/28",
            (false, true) => panic!("group 1 has no IPv6 pool: {all:?}"),
        };
        assert!(in_prefix(*vip, pool), "{name} {vip} in {pool}");
    }
    let mut addrs: Vec<IpAddr> = all.iter().map(|(_, v, _)| *v).collect();
    addrs.sort();
    addrs.dedup();
    assert_eq!(addrs.len(), all.len(), "every VIP once: {all:?}");
    // The IPv6 rule has group 0's VIP only.
    assert_eq!(
        all.iter().filter(|(n, _, _)| n.starts_with("six")).count(),
        1
    );
    // check-config says which VIPs came from a pool.
    let summary = a.summary();
    let web = all.iter().find(|(n, _, _)| n == "web-ag0").unwrap().1;
    assert!(
        summary.contains(&format!("  {web} (from vip_pool): web TCP 80 -> svc")),
        "{summary}"
    );
}

#[test]
fn a_pool_steps_past_a_written_vip_prefix_and_runs_out_with_a_reason() {
    // The pool: a /124 that a rule's written VIP prefix takes whole, and a
    // /127 of two addresses.
    let pools = "\n[[availability_groups]]\ngroup = 0\nvip_pool = [\"2001:db8:f00::/124\", \"2001:db8:f00::100/127\"]\n";
    let text = format!(
        "{HEAD}{pools}{}{}",
        rule("wide", 80, Some("\"2001:db8:f00::/124\""), ""),
        rule("six", 443, None, "ip_version = \"IPV6\"\n")
    );
    // The allocation steps past the whole /124 to one of the /127's two.
    let l = load(&text).unwrap_or_else(|e| panic!("{e}"));
    let six = vips(&l)
        .into_iter()
        .find(|(n, _, _)| n == "six-ag0")
        .unwrap()
        .1;
    assert!(in_prefix(six, "2001:db8:f00::100/127"), "{six}");
    // Three rules for the /127's two addresses: the third is refused.
    let text = format!(
        "{text}{}{}",
        rule("six2", 444, None, "ip_version = \"IPV6\"\n"),
        rule("six3", 445, None, "ip_version = \"IPV6\"\n")
    );
    let e = load(&text).map(|_| ()).expect_err("exhausted").to_string();
    assert!(
        e.contains("no vips, and availability group 0's vip_pool has no IPv6 address left"),
        "{e}"
    );
}

/// A pool as wide as IPv6 allows (a /1 of 2^127 addresses) allocates
/// like a small one: the arithmetic never overflows.
#[test]
fn a_huge_pool_allocates_too() {
    let text = format!(
        "{HEAD}\n[[availability_groups]]\ngroup = 0\nvip_pool = [\"8000::/1\"]\n{}{}",
        rule("a", 80, None, "ip_version = \"IPV6\"\n"),
        rule("b", 81, None, "ip_version = \"IPV6\"\n")
    );
    let l = load(&text).unwrap_or_else(|e| panic!("{e}"));
    let all = vips(&l);
    assert_eq!(all.len(), 2);
    assert!(
        all.iter().all(|(_, v, _)| in_prefix(*v, "8000::/1")),
        "{all:?}"
    );
    assert_ne!(all[0].1, all[1].1);
}

#[test]
fn unusable_pools_and_rules_are_refused_with_a_reason() {
    for (extra, want) in [
        (
            rule("web", 80, None, ""),
            "no vips, and availability group 0 has no vip_pool of IPv4 addresses to allocate one from",
        ),
        (
            format!(
                "{}{}",
                rule("web", 80, None, "ip_version = \"IPV6\"\n"),
                "\n[[availability_groups]]\ngroup = 0\nvip_pool = [\"192.0.2.0/28\"]\n"
            ),
            "availability group 0 has no vip_pool of IPv6 addresses",
        ),
        (
            rule("web", 80, Some("\"192.0.2.9\""), "ip_version = \"IPV4\"\n"),
            "ip_version applies to VIPs allocated from a pool: this rule gives its vips",
        ),
        (
            format!(
                "{}\n[[availability_groups]]\ngroup = 2\nvip_pool = [\"192.0.2.0/28\"]\n",
                rule("web", 80, Some("\"192.0.2.9\""), "")
            ),
            "availability group 2 does not exist: groups are 0 and 1",
        ),
        (
            format!(
                "{}\n[[availability_groups]]\ngroup = 0\nvip_pool = [\"192.0.2.1/28\"]\n",
                rule("web", 80, Some("\"192.0.2.9\""), "")
            ),
            "192.0.2.1/28 has host bits set beyond /28: write the network, 192.0.2.0/28",
        ),
        (
            format!(
                "{}{POOLS}\n[[availability_groups]]\ngroup = 0\nvip_pool = [\"10.9.0.0/24\"]\n",
                rule("web", 80, Some("\"192.0.2.9\""), "")
            ),
            "availability group 0 is listed twice",
        ),
        (
            format!(
                "{}\n[[availability_groups]]\ngroup = 0\nvip_pool = [\"198.51.100.0/28\"]\n",
                rule("web", 80, Some("\"192.0.2.9\""), "")
            ),
            "198.51.100.0/28 holds this node's own address 198.51.100.2 (ports[0]): a VIP allocated there would be load-balanced host traffic",
        ),
        (
            format!(
                "{}\n[[availability_groups]]\ngroup = 0\nvip_pool = [\"192.0.2.0/24\"]\n[[availability_groups]]\ngroup = 1\nvip_pool = [\"192.0.2.128/25\"]\n",
                rule("web", 80, Some("\"192.0.2.9\""), "")
            ),
            "192.0.2.128/25 overlaps 192.0.2.0/24, already in a pool: an address belongs to one availability group",
        ),
    ] {
        let e = load(&format!("{HEAD}{extra}"))
            .map(|_| ())
            .expect_err(want)
            .to_string();
        assert!(e.contains(want), "{want}\n{e}");
    }
}
