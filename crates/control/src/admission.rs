//! Who gets a management HTTP listener's connection slots (M50): the rules
//! are the admin floor's ([`admin::admission`]); the peers a configuration
//! names are the daemon's.

pub use admin::admission::*;
use values::Prefix;

/// The peers a configuration names: the hosts of its `remote_rule`
/// groups' status URLs (those given as addresses; the Spillways there read
/// this node's `/status` in turn) and its flow-sync peers.
pub fn configured_peers(compiled: &config::Compiled) -> Vec<Prefix> {
    let remote = compiled
        .groups
        .iter()
        .filter_map(|g| g.remote.as_ref())
        .filter_map(|r| config::compiled::url_host(&r.status_url));
    let sync = compiled
        .settings
        .flow_sync
        .iter()
        .flat_map(|f| f.peers.iter().map(std::net::SocketAddr::ip));
    let mut peers: Vec<Prefix> = remote.chain(sync).map(Prefix::host).collect();
    peers.sort_unstable();
    peers.dedup();
    peers
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_peers_of_a_configuration_are_its_remote_and_sync_hosts() {
        let text = r#"
[node]
name = "n"
region = "r"
zone = "z"

[[backend_services]]
name = "s"
delivery = "gue"
[[backend_services.groups]]
name = "other"
region = "r2"
zone = "z2"
kind = "remote_rule"
remote = { status_url = "http://192.0.2.10:9469/status", rule = "web", vip = "10.9.0.1" }
[[backend_services.groups]]
name = "named"
region = "r3"
zone = "z3"
kind = "remote_rule"
remote = { status_url = "http://lb.example:9469/status", rule = "web", vip = "10.9.0.2" }

[[forwarding_rules]]
name = "web"
vips = ["10.0.0.1"]
protocol = "TCP"
ports = 80
backend_service = "s"

[flow_sync]
listen = "192.0.2.2:7700"
peers = ["192.0.2.3:7700", "[2001:db8::3]:7700"]
key = "hex:00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"
"#;
        let c = match config::load_str("t.toml", text, &config::Env::default()) {
            Ok(l) => l.compiled,
            Err(e) => panic!("{e}"),
        };
        let peers: Vec<String> = configured_peers(&c)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            peers,
            ["192.0.2.3/32", "192.0.2.10/32", "2001:db8::3/128"],
            "a status URL naming a host by name adds none"
        );
    }
}
