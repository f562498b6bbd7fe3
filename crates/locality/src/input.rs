//! What a decision is made from: the node's place, a service's static
//! shape (from the configuration), and one interval's observations (health,
//! weights, measured rates, utilization).
//!
//! Everything here is plain data. [`NodeSpec::from_compiled`] and
//! [`ServiceSpec::from_compiled`] fill the static part from a
//! [`config::Compiled`]; tests and benches build them by hand.

use std::time::Duration;

use config::compiled::{
    Compiled, DEFAULT_MAX_UTILIZATION, EndpointId, RegionId, ServiceId, ZoneId,
};
use config::schema::{Aggregation, BalancingMode, GroupKind, LoadBalancing, Locality};

/// Where this balancer node stands (M24).
#[derive(Clone, Debug, PartialEq)]
pub struct NodeSpec {
    /// The node's own region.
    pub region: RegionId,
    /// The node's own zone (the zone whose endpoints serve this node's
    /// traffic first when a service turns `cross_zone` off, M28).
    pub zone: ZoneId,
    /// Regions nearest first. Regions of a service that are not listed come
    /// after the listed ones, in id order; the node's own region is *not*
    /// moved to the front (the order is the operator's, M24).
    pub region_order: Vec<RegionId>,
    /// This node's share of every backend's `RATE` capacity, in (0, 1]:
    /// with N balancer nodes behind ECMP each sees about 1/N of the traffic
    /// and should budget 1/N of the capacity. Default 1. Not applied in
    /// `UTILIZATION` mode, whose capacity is estimated from what the
    /// endpoints report (their utilization already includes other nodes'
    /// traffic).
    pub capacity_share: f64,
}

impl NodeSpec {
    /// A node in `region`/`zone` that knows no other region's distance yet.
    pub fn new(region: RegionId, zone: ZoneId) -> Self {
        NodeSpec {
            region,
            zone,
            region_order: vec![region],
            capacity_share: 1.0,
        }
    }

    /// The node of a compiled configuration. `Compiled::regions` is already
    /// nearest first (the preference order, then the rest by name), so the
    /// order is simply its indices.
    pub fn from_compiled(c: &Compiled) -> Self {
        let n = u32::try_from(c.regions.len()).unwrap_or(u32::MAX);
        NodeSpec {
            region: c.node.region,
            zone: c.node.zone,
            region_order: (0..n).map(RegionId).collect(),
            capacity_share: 1.0,
        }
    }
}

/// How a service's capacity is accounted (M25).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum CapacityMode {
    /// Packets per second. A group's capacity is `max_rate_per_endpoint`
    /// times its eligible endpoints, capped by the group's `max_rate`
    /// (pro rata to its eligible endpoints), times `capacity_scaler`. With
    /// neither set the capacity is unlimited.
    Rate {
        /// Per-endpoint packets per second.
        max_rate_per_endpoint: Option<u64>,
    },
    /// Utilization reported by the endpoints (0.0–1.0). A group at average
    /// utilization `u` carrying `L` packets per second is assumed to scale
    /// linearly: it can carry `L · t / u` at target `t = max_utilization ·
    /// capacity_scaler`. Where a rate is set too (`max_rate_per_endpoint`,
    /// a group's `max_rate`), the group's capacity is the smaller of the
    /// two: it is full when either limit is reached.
    Utilization {
        /// Target utilization in (0, 1] of groups that set none
        /// ([`GroupSpec::max_utilization`]).
        max_utilization: f64,
        /// Per-endpoint packets per second, a second limit; `None`: none.
        max_rate_per_endpoint: Option<u64>,
    },
}

/// One backend group's static shape.
#[derive(Clone, Debug, PartialEq)]
pub struct GroupSpec {
    /// Its region.
    pub region: RegionId,
    /// Its zone.
    pub zone: ZoneId,
    /// 0.0–1.0; 0 drains the group (no new connections, M11, M25).
    pub capacity_scaler: f64,
    /// Packets per second of the whole group (`RATE`, or a second limit
    /// under `UTILIZATION`).
    pub max_rate: Option<u64>,
    /// `UTILIZATION`: the group's own target in (0, 1]; `None`: the
    /// service's.
    pub max_utilization: Option<f64>,
}

/// One endpoint's static shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EndpointSpec {
    /// Index of its group in [`ServiceSpec::groups`].
    pub group: u32,
    /// Configured relative weight 0–1000 (0: no new connections).
    pub weight: u16,
}

/// A backend service's static shape: everything a decision needs that
/// changes only on reload.
#[derive(Clone, Debug, PartialEq)]
pub struct ServiceSpec {
    /// `RATE` or `UTILIZATION` and its limits.
    pub capacity: CapacityMode,
    /// Per-region health aggregation (M19).
    pub aggregation: Aggregation,
    /// M23.
    pub fail_open: bool,
    /// Whether anything resolves the endpoints' health (a health check, or
    /// the exported state of a `remote_rule` group). Without it an
    /// `Unknown` endpoint is healthy ("absent: endpoints are always
    /// healthy").
    pub health_checked: bool,
    /// `WEIGHTED_MAGLEV` (weights count) or `MAGLEV` (every endpoint with a
    /// positive weight counts the same).
    pub weighted: bool,
    /// Zonal affinity and cross-zone balancing (M27, M28).
    pub locality: Locality,
    /// Its groups.
    pub groups: Vec<GroupSpec>,
    /// Its endpoints; a plan names them by their index here. With
    /// [`ServiceSpec::from_compiled`] index `i` is the service's `i`-th
    /// endpoint, `EndpointId(service.endpoints.start + i)`
    /// ([`endpoint_id`]).
    pub endpoints: Vec<EndpointSpec>,
}

impl ServiceSpec {
    /// The static shape of service `id` of a compiled configuration, or
    /// `None` if there is no such service.
    pub fn from_compiled(c: &Compiled, id: ServiceId) -> Option<Self> {
        let s = c.services.get(id.index())?;
        let g0 = s.groups.start;
        let groups = s
            .group_ids()
            .filter_map(|g| c.groups.get(g.index()))
            .map(|g| GroupSpec {
                region: g.region,
                zone: g.zone,
                capacity_scaler: g.capacity_scaler,
                max_rate: g.max_rate,
                max_utilization: g.max_utilization,
            })
            .collect();
        let endpoints = c
            .service_endpoints(id)
            .iter()
            .map(|e| EndpointSpec {
                group: e.group.0.saturating_sub(g0),
                weight: e.weight,
            })
            .collect();
        Some(ServiceSpec {
            capacity: match s.balancing.mode {
                BalancingMode::Rate => CapacityMode::Rate {
                    max_rate_per_endpoint: s.balancing.max_rate_per_endpoint,
                },
                BalancingMode::Utilization => CapacityMode::Utilization {
                    max_utilization: s.balancing.max_utilization,
                    max_rate_per_endpoint: s.balancing.max_rate_per_endpoint,
                },
            },
            aggregation: s.aggregation,
            fail_open: s.fail_open,
            health_checked: s.health_check.is_some() || s.kind == GroupKind::RemoteRule,
            weighted: s.load_balancing == LoadBalancing::WeightedMaglev,
            locality: s.locality,
            groups,
            endpoints,
        })
    }

    /// A service with the configuration's defaults (UTILIZATION at 0.8,
    /// aggregation 60 % / 1, no fail-open, health-checked, weighted,
    /// cross-zone on) and no groups yet.
    pub fn new(capacity: CapacityMode) -> Self {
        ServiceSpec {
            capacity,
            aggregation: Aggregation::default(),
            fail_open: false,
            health_checked: true,
            weighted: true,
            locality: Locality::default(),
            groups: Vec::new(),
            endpoints: Vec::new(),
        }
    }

    /// Checks that every endpoint names an existing group.
    pub fn check(&self) -> Result<(), InputError> {
        match self
            .endpoints
            .iter()
            .enumerate()
            .find(|(_, e)| e.group as usize >= self.groups.len())
        {
            Some((endpoint, e)) => Err(InputError::GroupOutOfRange {
                endpoint,
                group: e.group,
                groups: self.groups.len(),
            }),
            None => Ok(()),
        }
    }

    /// The default `UTILIZATION` mode (target 0.8, no rate).
    pub const DEFAULT_UTILIZATION: CapacityMode = CapacityMode::Utilization {
        max_utilization: DEFAULT_MAX_UTILIZATION,
        max_rate_per_endpoint: None,
    };
}

/// The configuration id of a plan's endpoint index `local` of service `s`
/// (for a [`ServiceSpec`] made by [`ServiceSpec::from_compiled`]).
pub fn endpoint_id(s: &config::compiled::Service, local: u32) -> EndpointId {
    EndpointId(s.endpoints.start.saturating_add(local))
}

/// An endpoint's health as the health checker last reported it (the
/// `health` crate's `State`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Health {
    /// Passing its health check.
    Healthy,
    /// Failing its health check.
    Unhealthy,
    /// No verdict yet: just created (or its check changed) and fewer than a
    /// threshold's worth of results seen.
    #[default]
    Unknown,
}

impl Health {
    /// `HEALTHY`, `UNHEALTHY` or `UNKNOWN` (as logged and exported).
    pub const fn as_str(self) -> &'static str {
        match self {
            Health::Healthy => "HEALTHY",
            Health::Unhealthy => "UNHEALTHY",
            Health::Unknown => "UNKNOWN",
        }
    }
}

impl std::fmt::Display for Health {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One interval's observation of one endpoint.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EndpointObs {
    /// Health (M16, M21).
    pub health: Health,
    /// Weight read from the health check's response header (M17); `None`
    /// keeps the configured weight.
    pub weight: Option<u16>,
    /// Packets per second the data plane sent to it over the interval (new
    /// and established flows). Negative or non-finite values count as 0.
    pub rate: f64,
    /// `UTILIZATION` mode: utilization it reported (0.0–1.0; above 1 means
    /// overloaded); `None`: not reported.
    pub utilization: Option<f64>,
}

impl EndpointObs {
    /// Healthy, configured weight, carrying `rate` packets per second.
    pub const fn healthy(rate: f64) -> Self {
        EndpointObs {
            health: Health::Healthy,
            weight: None,
            rate,
            utilization: None,
        }
    }

    /// Unhealthy, carrying nothing.
    pub const UNHEALTHY: EndpointObs = EndpointObs {
        health: Health::Unhealthy,
        weight: None,
        rate: 0.0,
        utilization: None,
    };

    /// No health verdict yet, carrying nothing.
    pub const UNKNOWN: EndpointObs = EndpointObs {
        health: Health::Unknown,
        weight: None,
        rate: 0.0,
        utilization: None,
    };
}

/// One interval's observation of a service.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Observation {
    /// One entry per [`ServiceSpec::endpoints`], same order.
    pub endpoints: Vec<EndpointObs>,
    /// The service's demand in packets per second. `None`: the sum of the
    /// endpoints' rates (the usual case; [`crate::Planner`] passes its
    /// smoothed sum here).
    pub demand: Option<f64>,
    /// Share (0–1) of the service's new connections per source zone, as the
    /// data plane classified them: the client's zone (from
    /// `[[client_zones]]`) when zonal affinity is on, else the node's zone
    /// when `cross_zone` is off. Used only to size zone capacity (M27, M28);
    /// empty: unknown, see the crate documentation for the fallback.
    pub zone_demand: Vec<(ZoneId, f64)>,
}

impl Observation {
    /// Observations of the endpoints, demand from their rates, no zone
    /// figures.
    pub fn new(endpoints: Vec<EndpointObs>) -> Self {
        Observation {
            endpoints,
            demand: None,
            zone_demand: Vec::new(),
        }
    }
}

/// Knobs of the decision and of the smoothing. The defaults suit the
/// management core's 1 s cycle.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tuning {
    /// Time constant of the exponential smoothing of rising measurements
    /// (demand, rates, utilization): a step up is 63 % followed after this
    /// long. Default 1 s: spill quickly when load surges.
    pub rise: Duration,
    /// Time constant for falling measurements. Default 5 s: come back
    /// slowly, so a dip does not pull everything back only to spill again.
    pub fall: Duration,
    /// A region's published fraction changes only when some fraction moved
    /// by at least this much, or the set of usable regions changed
    /// (failover and recovery act at once). Same for zone shares. Default
    /// 0.01.
    pub hysteresis: f64,
    /// Region fractions also hold while their move is within counting
    /// noise: this many standard deviations of a Poisson count of the
    /// demand over the smoothing's ~2 s (`k / √(2 s · demand)`), at most
    /// [`MAX_NOISE_BAND`]: 1.7 % at 4,000 pps, 0.53 % (below
    /// [`Tuning::hysteresis`]) at 40,000 pps, 5.3 % capped to 4 % at 400
    /// pps. Keeps a low-rate service hovering at capacity from following its
    /// own counting noise. Default 1.5; 0 turns it off.
    pub noise_sigmas: f64,
    /// Fractions below this are folded into the others (noise floor).
    /// Default 0.001.
    pub min_fraction: f64,
    /// `UTILIZATION`: a group carrying at most this many packets per second
    /// (or 0.1 % of the demand, whichever is more) gives no usable capacity
    /// estimate; it is assumed to have room while its utilization is below
    /// target, and none otherwise. Default 1 pps.
    pub idle_rate: f64,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            rise: Duration::from_secs(1),
            fall: Duration::from_secs(5),
            hysteresis: 0.01,
            noise_sigmas: 1.5,
            min_fraction: 0.001,
            idle_rate: 1.0,
        }
    }
}

/// The widest band [`Tuning::noise_sigmas`] gives: the published fractions
/// stay within 4 % of the exact water-fill however low the rates.
pub const MAX_NOISE_BAND: f64 = 0.04;

impl Tuning {
    /// The band within which region fractions hold at `demand` packets
    /// per second: [`Tuning::hysteresis`], widened to the counting noise.
    pub fn region_band(&self, demand: f64) -> f64 {
        let noise = if self.noise_sigmas > 0.0 && demand > 0.0 {
            (self.noise_sigmas / (2.0 * demand).sqrt()).min(MAX_NOISE_BAND)
        } else {
            0.0
        };
        self.hysteresis.max(noise)
    }
}

/// Why a decision could not be made: the observation does not fit the
/// service's shape.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InputError {
    /// {got} endpoint observations for a service of {want} endpoints
    #[error("{got} endpoint observations for a service of {want} endpoints")]
    EndpointCount {
        /// Observations given.
        got: usize,
        /// Endpoints of the service.
        want: usize,
    },
    /// endpoint {endpoint} names group {group}, but the service has {groups} groups
    #[error("endpoint {endpoint} names group {group}, but the service has {groups} groups")]
    GroupOutOfRange {
        /// Endpoint index.
        endpoint: usize,
        /// The group it names.
        group: u32,
        /// Groups of the service.
        groups: usize,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_region_band_widens_to_counting_noise_at_low_rates_only() {
        let t = Tuning::default();
        // 1.5 / sqrt(2 * 400) = 5.3 %: capped.
        assert_eq!(t.region_band(400.0), MAX_NOISE_BAND);
        assert!((t.region_band(4000.0) - 1.5 / 8000f64.sqrt()).abs() < 1e-12);
        // At 40,000 pps the noise (0.53 %) is below the hysteresis.
        assert_eq!(t.region_band(40_000.0), t.hysteresis);
        assert_eq!(t.region_band(0.0), t.hysteresis);
        let off = Tuning {
            noise_sigmas: 0.0,
            ..t
        };
        assert_eq!(off.region_band(400.0), t.hysteresis);
    }
}
