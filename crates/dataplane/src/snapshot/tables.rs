//! What a service's Maglev tables are built from (M12): the endpoints each
//! takes given health, the service's locality plan and resolved next hops
//! (`select`), and the key the builder keeps tables by between builds
//! ([`TableKey`]), so that a health change rebuilds the tables of the
//! service it touches, not every table.

use config::compiled::{Compiled, EndpointId as ConfigEndpointId, ZoneId};
use config::schema::LoadBalancing;
use maglev::MaglevTable;

use super::{EndpointHealth, Local};

/// What a Maglev table is built from (M12): its size and its endpoints
/// (identity, weight) in order. Equal keys give equal tables, so the builder
/// keeps tables by key and a rebuild builds only those whose inputs changed.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TableKey {
    /// The table-building algorithm (the service's `hash`).
    pub algorithm: maglev::Algorithm,
    /// Table size (a prime).
    pub size: u32,
    /// Endpoints, in the order the table numbers them.
    pub endpoints: Vec<maglev::Endpoint>,
}

impl TableKey {
    /// Builds the table. Pure: any thread may do it.
    pub fn build(&self) -> Result<MaglevTable, maglev::BuildError> {
        MaglevTable::build(
            self.algorithm,
            maglev::TableSize::new(self.size)?,
            &self.endpoints,
        )
    }
}

/// One table's endpoints: (index within the service, Maglev endpoint).
type EndpointSet = Vec<(usize, maglev::Endpoint)>;

/// A service's selection before backend slots are attached: per region that
/// takes a share of new connections, its non-empty tables (endpoints by
/// their index within the service, with weights) and the client zones of
/// its variants.
pub(super) struct Selection {
    pub(super) regions: Vec<(Vec<EndpointSet>, Vec<ZoneId>)>,
    pub(super) thresholds: Vec<u32>,
    /// Every endpoint is unhealthy and the service fails open (M23): all of
    /// them are used as if healthy, existing flows included.
    pub(super) fail_open: bool,
}

/// What `svc` selects from, given health and its locality plan (a service
/// without one gets a single table over its eligible endpoints).
pub(super) fn select(
    compiled: &Compiled,
    svc: &config::compiled::Service,
    health: &impl Fn(ConfigEndpointId) -> EndpointHealth,
    plan: Option<&locality::Plan>,
    local: &Local,
) -> Selection {
    // Every endpoint by its index within the service (what a plan names):
    // its Maglev identity, weight, and whether it may take new flows:
    // healthy, and its next hop resolved (M47).
    let eps: Vec<(maglev::Endpoint, bool, bool)> = svc
        .endpoint_ids()
        .filter_map(|ep_id| {
            let ep = compiled.endpoints.get(ep_id.0 as usize)?;
            let h = health(ep_id);
            let weight = match svc.load_balancing {
                LoadBalancing::Maglev => 1,
                LoadBalancing::WeightedMaglev => u32::from(h.weight.unwrap_or(ep.weight)),
            };
            let id = maglev::EndpointId::from_bytes(ep.identity.as_bytes());
            let resolved = local.endpoint_resolved(compiled, ep);
            Some((maglev::Endpoint { id, weight }, h.healthy, resolved))
        })
        .collect();
    let non_empty =
        |sets: Vec<EndpointSet>| -> Vec<_> { sets.into_iter().filter(|s| !s.is_empty()).collect() };
    match plan {
        Some(plan) => Selection {
            regions: plan
                .regions
                .iter()
                .map(|share| {
                    let sets = share
                        .tables()
                        .map(|set| {
                            set.iter()
                                .filter(|w| w.weight > 0)
                                .filter_map(|w| {
                                    let i = w.endpoint as usize;
                                    // The plan weighs health; an unresolved
                                    // next hop takes no new flows whatever
                                    // the plan says.
                                    let (e, _, resolved) = eps.get(i)?;
                                    if !resolved {
                                        return None;
                                    }
                                    Some((
                                        i,
                                        maglev::Endpoint {
                                            id: e.id,
                                            weight: w.weight,
                                        },
                                    ))
                                })
                                .collect()
                        })
                        .collect();
                    (
                        non_empty(sets),
                        share.zone_variants.iter().map(|v| v.zone).collect(),
                    )
                })
                .collect(),
            thresholds: plan.thresholds.clone(),
            fail_open: plan.eligibility == locality::Eligibility::FailOpen,
        },
        None => {
            // Fail-open (M23) is about health: an endpoint whose next hop
            // is unresolved (M47) never takes new flows.
            let weighted = || {
                eps.iter()
                    .enumerate()
                    .filter(|(_, (e, _, resolved))| e.weight > 0 && *resolved)
            };
            let mut eligible: EndpointSet = weighted()
                .filter(|(_, (_, healthy, _))| *healthy)
                .map(|(i, (e, _, _))| (i, *e))
                .collect();
            // Fail-open (M23): with every endpoint unhealthy, use them all.
            let fail_open = eligible.is_empty() && svc.fail_open && weighted().next().is_some();
            if fail_open {
                eligible = weighted().map(|(i, (e, _, _))| (i, *e)).collect();
            }
            if eligible.is_empty() {
                Selection {
                    regions: Vec::new(),
                    thresholds: Vec::new(),
                    fail_open,
                }
            } else {
                Selection {
                    regions: vec![(vec![eligible], Vec::new())],
                    thresholds: vec![u32::MAX],
                    fail_open,
                }
            }
        }
    }
}

/// The key of the table over `set`, an endpoint set of `svc`.
pub(super) fn table_key(
    svc: &config::compiled::Service,
    set: &[(usize, maglev::Endpoint)],
) -> TableKey {
    TableKey {
        algorithm: match svc.hash {
            config::schema::HashAlgorithm::MaglevV1 => maglev::Algorithm::V1,
            config::schema::HashAlgorithm::MaglevV2 => maglev::Algorithm::V2,
        },
        size: svc.maglev_table_size,
        endpoints: set.iter().map(|(_, e)| *e).collect(),
    }
}
