//! The memory estimate (`config::memory`): it matches what the flow table
//! and the Maglev tables really allocate, and validation compares it with
//! the machine's memory (errors in `validation.rs`, the rest here).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

use config::memory::{self, Bytes};
use config::{Env, Memory, load_str};
use testkit::config::{Config, endpoint_list, group, health_check, node, rule, service};

/// A node, one service of two endpoints and its rule; the service has an
/// HTTP health check, so that it is warned of nothing (M25).
fn base() -> String {
    Config::new()
        .node(node("n1", "r1", "r1-a"))
        .rule(rule("web", &["10.0.0.10"], "TCP", "80", "web").set("ports", 80))
        .service(service("web", "ipip").str("health_check", "hc").child(
            group("g", "r1", "r1-a").set(
                "endpoints",
                endpoint_list(&[
                    r#"{ address = "10.1.0.1", port = 80 }"#,
                    r#"{ address = "10.1.0.2", port = 80 }"#,
                ]),
            ),
        ))
        .health_check(health_check("hc", "HTTP"))
        .build()
}

const GIB: u64 = 1 << 30;

fn with(extra: &str) -> String {
    format!("{}{extra}", base())
}

/// The estimate of `text`, loaded without machine checks.
fn estimate(text: &str) -> memory::Estimate {
    load_str("t.toml", text, &Env::default())
        .unwrap_or_else(|e| panic!("{e}"))
        .memory
}

fn on(text: &str, m: Memory) -> Result<config::Loaded, config::ConfigErrors> {
    load_str("t.toml", text, &Env::with_cpus(4).with_memory(m))
}

#[test]
fn the_flow_table_estimate_is_what_the_flow_table_allocates() {
    for cap in [1000u32, 65_536, 1 << 20, 4_194_304] {
        let e = estimate(&with(&format!(
            "[dataplane]\nflow_table_capacity = {cap}\n"
        )));
        let t = flowtable::FlowTable::new(flowtable::Config::with_capacity(cap as usize)).unwrap();
        assert_eq!(e.flow_table, Some(t.allocated_bytes() as u64), "{cap}");
    }
}

#[test]
fn the_maglev_estimate_is_what_a_table_holds() {
    let e = estimate(&with(""));
    let [s] = &e.services[..] else {
        panic!("{:?}", e.services)
    };
    assert_eq!((s.size, s.tables, s.endpoints), (65_537, 1, 2));
    let eps: Vec<maglev::Endpoint> = (0..2u64)
        .map(|i| maglev::Endpoint {
            id: maglev::EndpointId(i),
            weight: 1,
        })
        .collect();
    let t = maglev::MaglevTable::build_v1(65_537, &eps).unwrap();
    // The table, plus the snapshot's backend slot per endpoint.
    assert_eq!(s.bytes(), t.heap_bytes() as u64 + 2 * 4);
    assert_eq!(s.peak_bytes(), 2 * s.bytes());
    assert_eq!(
        e.maglev_bytes(),
        2 * s.bytes() + maglev::MaglevTable::build_scratch_bytes(65_537, 2)
    );
}

#[test]
fn tables_count_regions_and_with_zonal_affinity_their_zones() {
    let svc = |zonal: bool| {
        format!(
            "[[backend_services]]\nname = \"z\"\ndelivery = \"gre\"\nlocality = {{ zonal_affinity = {zonal} }}\ngroups = [\n\
             {{ name = \"a\", region = \"r1\", zone = \"r1-a\", endpoints = [{{ address = \"10.2.0.1\" }}] }},\n\
             {{ name = \"b\", region = \"r1\", zone = \"r1-b\", endpoints = [{{ address = \"10.2.0.2\" }}] }},\n\
             {{ name = \"c\", region = \"r1\", zone = \"r1-b\", endpoints = [{{ address = \"10.2.0.3\" }}] }},\n\
             {{ name = \"d\", region = \"r2\", zone = \"r2-a\", endpoints = [{{ address = \"10.2.0.4\" }}] }},\n\
             ]\n[[client_zones]]\nzone = \"r1-a\"\nprefixes = [\"10.0.0.0/8\"]\n"
        )
    };
    // r1: the region's table and one per zone (two zones); r2: one and one.
    let e = estimate(&with(&svc(true)));
    assert_eq!((e.services[1].regions, e.services[1].tables), (2, 5));
    assert_eq!(e.services[1].endpoints, 4);
    let e = estimate(&with(&svc(false)));
    assert_eq!((e.services[1].regions, e.services[1].tables), (2, 2));
}

/// M48: buffers hold a whole frame of the largest port MTU in one segment.
#[test]
fn the_buffers_follow_the_largest_port_mtu() {
    assert_eq!(memory::data_room(576), memory::DEFAULT_DATA_ROOM);
    assert_eq!(memory::data_room(1500), 2176);
    assert_eq!(memory::data_room(2030), 2176);
    assert_eq!(memory::data_room(2031), 128 + 3072);
    assert_eq!(memory::data_room(9000), 128 + 9216);
    assert_eq!(memory::data_room(9216), 128 + 10240);
    for mtu in [576u16, 1500, 4000, 9000, 9216] {
        assert!(usize::from(memory::data_room(mtu)) >= 128 + 18 + usize::from(mtu));
    }
    assert_eq!(memory::MBUF_BYTES, 2368);
    assert_eq!(memory::mbuf_bytes(memory::data_room(9000)), 9536);
    let port = |name: &str, mtu: u16| {
        format!(
            "[[ports]]\nname = \"{name}\"\ndevice = \"net_null_{name}\"\nrole = \"backend\"\nmtu = {mtu}\n"
        )
    };
    let e = estimate(&with(&format!(
        "[dataplane]\nmbufs = 32767\n{}{}",
        port("a", 1500),
        port("b", 9000)
    )));
    assert_eq!(e.packet_pool, 32_767 * 9536);
}

#[test]
fn the_packet_pool_is_in_hugepages_unless_no_huge() {
    let e = estimate(&with("[dataplane]\nmbufs = 32767\n"));
    assert_eq!(e.packet_pool, 32_767 * memory::MBUF_BYTES);
    assert!(e.pool_in_hugepages);
    assert_eq!(e.total_bytes(), e.ordinary_bytes() + e.packet_pool);
    let e = estimate(&with(
        "[dataplane]\nmbufs = 32767\neal_args = [\"--no-huge\", \"-m\", \"512\"]\n",
    ));
    assert!(!e.pool_in_hugepages);
    assert_eq!(e.total_bytes(), e.ordinary_bytes());
}

#[test]
fn memory_is_not_checked_when_the_machine_is_unknown() {
    let text = with("[dataplane]\nflow_table_capacity = 20000000\n");
    assert!(load_str("t.toml", &text, &Env::with_cpus(4)).is_ok());
    assert!(on(&text, Memory::total(GIB)).is_err());
    assert!(on(&text, Memory::total(4 * GIB)).is_ok());
}

#[test]
fn hugepages_are_not_memory_for_the_flow_table() {
    // About 700 MiB of flow table: it fits 2 GiB, but not the 512 MiB
    // left beside 1.5 GiB of hugepages.
    let text = with("[dataplane]\nflow_table_capacity = 8000000\n");
    let m = Memory {
        total: 2 * GIB,
        available: 2 * GIB,
        hugepages: 3 * GIB / 2,
    };
    let errs = on(&text, m).unwrap_err();
    assert_eq!(errs.errors.len(), 1, "{errs}");
    let e = &errs.errors[0];
    assert_eq!(e.path, "dataplane.flow_table_capacity");
    assert!(
        e.message
            .contains("of ordinary memory but this machine has 512 MiB outside the 1.50 GiB reserved as hugepages: flow table"),
        "{e}"
    );
    assert!(
        on(
            &text,
            Memory {
                hugepages: GIB / 2,
                ..m
            }
        )
        .is_ok()
    );
}

#[test]
fn needing_most_of_the_memory_or_more_than_is_available_is_a_warning() {
    let text = with("[dataplane]\nflow_table_capacity = 4000000\n");
    let need = estimate(&text).total_bytes();
    // 90 % of the machine.
    let l = on(&text, Memory::total(need / 9 * 10)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(l.warnings.len(), 1, "{:?}", l.warnings);
    assert!(
        l.warnings[0].contains(&format!(
            "dataplane.flow_table_capacity: this configuration needs about {}, more than 80 % of this machine's",
            Bytes(need)
        )),
        "{:?}",
        l.warnings
    );
    // Half of it, but less than that available.
    let m = Memory {
        total: 2 * need,
        available: need / 2,
        hugepages: 0,
    };
    let l = on(&text, m).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(l.warnings.len(), 1, "{:?}", l.warnings);
    assert!(
        l.warnings[0].contains(&format!(
            "but only {} is available now: flow table",
            Bytes(need / 2)
        )),
        "{:?}",
        l.warnings
    );
    // A quarter: nothing to say.
    let l = on(&text, Memory::total(4 * need)).unwrap_or_else(|e| panic!("{e}"));
    assert!(l.warnings.is_empty(), "{:?}", l.warnings);
}

#[test]
fn a_slow_full_rebuild_is_a_warning_at_the_slowest_service() {
    let svc = |name: &str, m: u32, addr: &str| {
        format!(
            "[[backend_services]]\nname = \"{name}\"\ndelivery = \"gre\"\nmaglev_table_size = {m}\ngroups = [{{ name = \"g\", region = \"r1\", zone = \"z\", endpoints = [{{ address = \"{addr}\" }}] }}]\n"
        )
    };
    let text = with(&(svc("a", 655_373, "10.3.0.1") + &svc("b", 16_777_213, "10.3.0.2")));
    let l = load_str("t.toml", &text, &Env::default()).unwrap_or_else(|e| panic!("{e}"));
    let rebuild: Vec<&String> = l
        .warnings
        .iter()
        .filter(|w| w.contains("full rebuild"))
        .collect();
    assert_eq!(rebuild.len(), 1, "{:?}", l.warnings);
    assert!(
        rebuild[0].contains(
            "backend_services[2].maglev_table_size: a full rebuild of the Maglev tables (at start, or when every service changes) builds 3 tables, 17498123 slots in all: about "
        ),
        "{rebuild:?}"
    );
    println!("{}", rebuild[0]);
    // The default size builds in milliseconds.
    let l = load_str("t.toml", &with(""), &Env::default()).unwrap_or_else(|e| panic!("{e}"));
    assert!(l.warnings.is_empty(), "{:?}", l.warnings);
    assert!(
        l.summary()
            .contains("Maglev: a full rebuild builds 1 table, 65537 slots, about 2 ms"),
        "{}",
        l.summary()
    );
}

#[test]
fn the_summary_shows_the_estimate_and_the_machine() {
    let l = on(
        &with(""),
        Memory {
            total: 16 * GIB,
            available: 12 * GIB,
            hugepages: GIB,
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let s = l.summary();
    assert!(
        s.contains("memory: about 130 MiB (flow table 92.0 MiB, Maglev tables 520 KiB counting a rebuild, packet pool 37.0 MiB in hugepages)\n  this machine: 16.0 GiB (12.0 GiB available, 1.00 GiB reserved as hugepages)\n"),
        "{s}"
    );
    let l = load_str("t.toml", &with(""), &Env::default()).unwrap_or_else(|e| panic!("{e}"));
    assert!(l.summary().contains("  this machine: not checked\n"));
}

#[test]
fn meminfo_is_read_in_bytes() {
    let text = "MemTotal:       24684092 kB\nMemFree:         1124756 kB\nMemAvailable:   23016132 kB\nHugePages_Total:     512\nHugePages_Free:      512\nHugepagesize:       2048 kB\n";
    assert_eq!(
        config::parse_meminfo(text),
        Some(Memory {
            total: 24_684_092 * 1024,
            available: 23_016_132 * 1024,
            hugepages: 512 * 2048 * 1024,
        })
    );
    // Before Linux 3.14 there is no MemAvailable.
    let old = config::parse_meminfo("MemTotal: 1000 kB\nMemFree: 200 kB\n").unwrap();
    assert_eq!((old.available, old.hugepages), (200 * 1024, 0));
    assert_eq!(config::parse_meminfo("nothing"), None);
    let m = Memory::system().expect("/proc/meminfo");
    assert!(m.total > 0 && m.available <= m.total && m.hugepages <= m.total);
    println!("this machine: {m:?}");
}

#[test]
fn figures() {
    // Printed for the record (not asserted beyond sanity).
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../config/reference.toml"
    ))
    .unwrap();
    let l = load_str("reference.toml", &text, &Env::default()).unwrap();
    println!("reference.toml:\n{}", memory::summary(&l.memory, None));
    // Ten services at the largest table the maglev crate builds (the
    // configuration accepts up to 16777216; the estimate is computed anyway).
    let ten: String = (0..10)
        .map(|i| {
            format!(
                "[[backend_services]]\nname = \"s{i}\"\ndelivery = \"gre\"\nmaglev_table_size = 16777213\ngroups = [{{ name = \"g\", region = \"r1\", zone = \"z\", endpoints = [{{ address = \"10.9.0.{i}\" }}] }}]\n"
            )
        })
        .collect();
    let mut l = load_str("t.toml", &with(&ten), &Env::default()).unwrap();
    println!(
        "10 services at M = 16777213:\n{}",
        memory::summary(&l.memory, None)
    );
    for s in &mut l.config.backend_services[1..] {
        s.maglev_table_size = maglev::MAX_TABLE_SIZE - 5;
    }
    let e = memory::estimate(&l.config);
    println!(
        "10 services at M = 67108859:\n{}",
        memory::summary(&e, None)
    );
    assert!(e.maglev_bytes() > 10 * 2 * 4 * u64::from(maglev::MAX_TABLE_SIZE - 5));
}
