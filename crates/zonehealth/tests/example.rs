#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: fail loudly
//! config/zones/zone-health.toml, the documented example, is a valid
//! configuration and says what its comments say.

use std::path::Path;
use std::time::Duration;

#[test]
fn the_example_configuration_is_valid() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/zones/zone-health.toml");
    let text = std::fs::read_to_string(&root).expect("config/zones/zone-health.toml");
    // Its key file is a deployment's: point it at one of ours.
    let dir = std::env::temp_dir().join(format!("spillway-zh-example-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("key"),
        "c3BpbGx3YXktem9uZS1oZWFsdGgtdGVzdC1rZXkhIQ==\n",
    )
    .unwrap();
    let text = text.replace("/etc/spillway/zone-health.key", "key");
    let s = zonehealth::Settings::parse(&text, &dir).unwrap_or_else(|e| panic!("{}", e.join("\n")));
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(
        (s.ttl, s.probe.interval, s.probe.unhealthy_threshold),
        (60, Duration::from_secs(10), 3)
    );
    assert_eq!(s.zones.len(), 2);
    assert_eq!(s.zones[0].port, Some(80));
    assert_eq!(
        s.removed_name.to_string(),
        "_spillway-removed.www.example.com."
    );
}
