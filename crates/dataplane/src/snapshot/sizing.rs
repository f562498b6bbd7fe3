//! Configured durations and rates as ticks and per-tick budgets, the
//! largest packet a backend takes, and the flow table's settings.

use flowtable::Tick;
use wire::encap::Template;

use super::Local;

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

/// The largest inner IP packet (bytes) that fits the egress port's MTU once
/// `encap` is put before it ([`Backend::max_ip_len`](super::Backend::max_ip_len));
/// no limit without an egress port.
pub(super) fn max_ip_len(local: &Local, encap: Option<&Template>) -> u32 {
    let overhead = encap.map_or(0, Template::overhead);
    local.egress_mtu.map_or(u32::MAX, |m| {
        u32::from(m).saturating_sub(u32::try_from(overhead).unwrap_or(u32::MAX))
    })
}

/// What a worker may create or send per tick, from the per-second rates of
/// `[dataplane]`: the limits each worker's `TickBudget`s (pipeline) spend against.
pub(super) struct TickLimits {
    /// New flow entries ([`Snapshot::new_flow_budget`](super::Snapshot::new_flow_budget)).
    pub(super) new_flow: u32,
    /// ICMP too-big errors.
    pub(super) too_big: u32,
    /// ICMP echo replies.
    pub(super) echo: u32,
    /// Refused appliance returns.
    pub(super) gateway_mismatch: u32,
}

impl TickLimits {
    /// The budgets of `dp` at `ticks_per_second` ticks a second.
    pub(super) fn of(dp: &config::schema::Dataplane, ticks_per_second: u32) -> TickLimits {
        let per_second = dp.new_flow_budget_per_worker();
        let too_big = dp.icmp_too_big_rate;
        let echo = dp.icmp_echo_rate;
        TickLimits {
            new_flow: (per_second / ticks_per_second.max(1)).max(1),
            // A rate below the tick rate still sends some: one a tick.
            too_big: if too_big == 0 {
                0
            } else {
                (too_big / ticks_per_second.max(1)).max(1)
            },
            echo: if echo == 0 {
                0
            } else {
                (echo / ticks_per_second.max(1)).max(1)
            },
            gateway_mismatch: (dp.gateway_mismatch_rate / ticks_per_second.max(1)).max(1),
        }
    }
}
