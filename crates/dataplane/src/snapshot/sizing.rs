//! Configured durations and rates as ticks, and the flow table's settings.

use flowtable::Tick;

/// Duration `d` in ticks of `per_second` a second (saturating).
pub(super) fn ticks(d: std::time::Duration, per_second: u32) -> Tick {
    let t = d.as_millis().saturating_mul(u128::from(per_second)) / 1000;
    Tick::try_from(t).unwrap_or(Tick::MAX / 2)
}

/// Flow-table settings from `[dataplane]` (one tick per second).
pub fn flow_table_config(dp: &config::schema::Dataplane) -> flowtable::Config {
    let secs = |d: config::values::Duration| ticks(d.0, 1).max(1);
    let mut cfg = flowtable::Config::with_capacity(dp.flow_table_capacity as usize);
    cfg.timeouts = flowtable::Timeouts {
        tcp_established: secs(dp.timeouts.tcp_established),
        tcp_half_open: secs(dp.timeouts.tcp_half_open),
        tcp_fin: secs(dp.timeouts.tcp_closing),
        tcp_rst: secs(dp.timeouts.tcp_closing),
        udp: secs(dp.timeouts.udp),
        other: secs(dp.timeouts.other),
        first_packet: secs(dp.timeouts.first_packet),
    };
    cfg
}
