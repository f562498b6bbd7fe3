//! `spillway replay` and `check-config`: a rule's VIP may be an IPv6 prefix
//! up to /96 (M1), as a cloud's external IPv6 forwarding rule is: every
//! address in it takes the rule, delivered with its destination unchanged;
//! an address just outside takes nothing.

#![allow(clippy::cast_possible_truncation)] // test values are small
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

mod common;

use common::replay::*;
use common::*;
use testkit::config::{addrs, rule, service};

fn config() -> String {
    [
        base(),
        rule("web6", &["2001:db8:f00::/96"], "TCP", "80", "web6").to_string(),
        // A single VIP beside the prefix, and one of the other family.
        rule("one6", &["2001:db8:f01::10"], "TCP", "80", "web6").to_string(),
        rule("web", &["10.0.0.10"], "TCP", "80", "web").to_string(),
        service("web6", "ipip")
            .endpoints(&addrs("2001:db8:200::", 3))
            .to_string(),
        service("web", "ipip")
            .endpoints(&addrs("10.1.1.", 2))
            .to_string(),
    ]
    .concat()
}

#[test]
fn every_address_of_a_vip_prefix_takes_its_rule_and_no_other_does() {
    let client = v6("2001:db8:c::1");
    let inside = [
        "2001:db8:f00::",
        "2001:db8:f00::1",
        "2001:db8:f00::abcd:1234",
        "2001:db8:f00::ffff:ffff",
    ];
    let outside = [
        "2001:db8:f00::1:0:0",
        "2001:db8:eff:ffff:ffff:ffff:ffff:ffff",
        "2001:db8:f01::11",
    ];
    let mut frames: Vec<Vec<u8>> = Vec::new();
    for (i, d) in inside.iter().enumerate() {
        frames.push(tcp_frame(client, v6(d), 40000 + i as u16, 80, SYN, &[]));
    }
    frames.push(tcp_frame(
        client,
        v6("2001:db8:f01::10"),
        41000,
        80,
        SYN,
        &[],
    ));
    frames.push(tcp_frame(
        v4("192.0.2.1"),
        v4("10.0.0.10"),
        41001,
        80,
        SYN,
        &[],
    ));
    let delivered_count = frames.len();
    for (i, d) in outside.iter().enumerate() {
        frames.push(tcp_frame(client, v6(d), 42000 + i as u16, 80, SYN, &[]));
    }
    // Another port of the prefix: a VIP, but no rule.
    frames.push(tcp_frame(
        client,
        v6("2001:db8:f00::7"),
        43000,
        443,
        SYN,
        &[],
    ));

    let r = run("vip-prefix", &config(), &frames, &[]);
    assert_eq!(r.out.len(), delivered_count, "{}", r.text);
    for (want, out) in frames.iter().zip(&r.out) {
        let d = delivered(out, Mode::Ipip);
        assert_eq!(d.inner, want[14..], "delivered unchanged: {}", r.text);
    }
    assert_eq!(
        r.rule("web6-ag0").packets,
        inside.len() as u64,
        "{}",
        r.text
    );
    assert_eq!(r.rule("one6-ag0").packets, 1, "{}", r.text);
    assert_eq!(r.drops("no_rule"), 1, "{}", r.text);
}

/// `spillway check-config FILE` on `text`.
fn check(name: &str, text: &str) -> std::process::Output {
    let dir = std::env::temp_dir().join(format!("spillway-vip-prefix-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join(name);
    std::fs::write(&file, text).unwrap();
    std::process::Command::new(env!("CARGO_BIN_EXE_spillway"))
        .arg("check-config")
        .arg(&file)
        .output()
        .unwrap()
}

#[test]
fn check_config_shows_the_prefix_and_refuses_one_wider_than_96() {
    let out = check("good.toml", &config());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("  2001:db8:f00::/96: web6 TCP 80 -> web6"),
        "{text}"
    );
    let out = check(
        "wide.toml",
        &config().replace("2001:db8:f00::/96", "2001:db8:f00::/64"),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("2001:db8:f00::/64 is wider than /96"), "{err}");
}
