//! The number of Maglev tables a plan makes stays within the bound the
//! configuration's memory estimate counts (`config::memory`): per region of
//! the service's groups one table, plus one per zone of the region with
//! zonal affinity.

use locality::{EndpointObs, NodeSpec, Observation, ServiceSpec, Tuning, decide};

#[test]
fn plans_make_no_more_tables_than_the_memory_estimate_counts() {
    let text = include_str!("../../../config/two-region-spillover.toml");
    let loaded = config::load_str("two-region-spillover.toml", text, &config::Env::default())
        .unwrap_or_else(|e| panic!("{e}"));
    let c = &loaded.compiled;
    let node = NodeSpec::from_compiled(c);
    let svc = ServiceSpec::from_compiled(c, config::compiled::ServiceId(0)).unwrap();
    let bound = loaded.memory.services[0].tables;
    // us-east: its table and one per zone (2); us-west: its table and one.
    assert_eq!(bound, 5);
    let n = svc.endpoints.len();
    let mut most = 0;
    // Idle, busy enough to spill to us-west, us-east half down, all down.
    for (rate, down) in [
        (0.0, 0),
        (50_000.0, 0),
        (80_000.0, 0),
        (50_000.0, 3),
        (0.0, n),
    ] {
        let mut obs = vec![EndpointObs::healthy(0.0); n];
        for (i, o) in obs.iter_mut().enumerate() {
            if i < 5 {
                o.rate = rate;
            }
            if i < down {
                *o = EndpointObs::UNHEALTHY;
            }
        }
        let p = decide(
            &node,
            &svc,
            &Observation::new(obs),
            None,
            &Tuning::default(),
        )
        .unwrap();
        let tables: usize = p.regions.iter().map(|r| r.tables().count()).sum();
        println!("rate {rate}, {down} down: {tables} tables");
        assert!(tables as u64 <= bound, "{tables} tables > {bound}: {p:?}");
        most = most.max(tables);
    }
    // The spilling plan uses both regions and us-east's zones.
    assert!(most >= 4, "{most}");
}
