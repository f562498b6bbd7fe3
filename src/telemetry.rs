//! Spillway's own commands on DPDK's telemetry socket (`dpdk-telemetry.py
//! --file-prefix P`, then `/spillway/stats`), beside DPDK's `/ethdev/...`.
//!
//! Each asks the daemon's control socket what `spillway stats --json` (or
//! `status --json`) asks, on DPDK's telemetry thread, and hands the answer
//! over as telemetry data: one source of figures for the CLI, the metrics
//! and telemetry, and nothing of the management loop's to share.

use std::path::{Path, PathBuf};

use dpdk::{Eal, TelValue};

/// The commands: telemetry name, control-socket command, help.
const COMMANDS: &[(&str, &str, &str)] = &[
    (
        "/spillway/stats",
        "stats json",
        "Spillway's counters: packets by outcome, drops by reason, per rule and backend",
    ),
    (
        "/spillway/status",
        "status json",
        "Spillway's state: rules, VIPs, services, backends and their health",
    ),
];

/// Registers the commands; a failure is logged (telemetry is for people,
/// the daemon runs without it).
pub fn register(eal: &Eal, socket: &Path) {
    for &(name, command, help) in COMMANDS {
        let socket: PathBuf = socket.to_owned();
        let r = dpdk::register_telemetry(eal, name, help, move |_params| ask(&socket, command));
        if let Err(e) = r {
            log::warn!("telemetry: {e}");
        }
    }
}

/// The control socket's answer to `command`, as telemetry data.
fn ask(socket: &Path, command: &str) -> TelValue {
    match control::socket::request(socket, command) {
        Ok((_, text)) => match serde_json::from_str::<serde_json::Value>(text.trim()) {
            Ok(v) => value(&v),
            Err(e) => TelValue::Dict(vec![(
                "error".into(),
                TelValue::Str(format!("unreadable answer: {e}")),
            )]),
        },
        Err(e) => TelValue::Dict(vec![(
            "error".into(),
            TelValue::Str(format!("control socket {}: {e}", socket.display())),
        )]),
    }
}

/// JSON as telemetry data (booleans and null as strings, as DPDK has no
/// such type).
fn value(v: &serde_json::Value) -> TelValue {
    use serde_json::Value as J;
    match v {
        J::Null => TelValue::Str("null".into()),
        J::Bool(b) => TelValue::Str(b.to_string()),
        J::Number(n) => match (n.as_u64(), n.as_i64()) {
            (Some(u), _) => TelValue::U64(u),
            (None, Some(i)) => TelValue::Int(i),
            _ => TelValue::Str(n.to_string()),
        },
        J::String(s) => TelValue::Str(s.clone()),
        J::Array(items) => TelValue::Array(items.iter().map(value).collect()),
        J::Object(m) => TelValue::Dict(m.iter().map(|(k, v)| (k.clone(), value(v))).collect()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_answers_become_telemetry_values() {
        let v: serde_json::Value = serde_json::from_str(
            r#"{"ok":true,"rx":5,"delta":-3,"rate":1.5,"names":["a"],"x":null}"#,
        )
        .unwrap_or_default();
        assert_eq!(
            value(&v),
            TelValue::Dict(vec![
                ("delta".into(), TelValue::Int(-3)),
                (
                    "names".into(),
                    TelValue::Array(vec![TelValue::Str("a".into())])
                ),
                ("ok".into(), TelValue::Str("true".into())),
                ("rate".into(), TelValue::Str("1.5".into())),
                ("rx".into(), TelValue::U64(5)),
                ("x".into(), TelValue::Str("null".into())),
            ])
        );
    }
}
