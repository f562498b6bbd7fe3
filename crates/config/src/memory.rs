//! How much memory a configuration makes the daemon allocate, so that
//! `check-config` (and the daemon's start and reloads, which run the same
//! validation) can refuse sizes this machine cannot hold rather than let the
//! daemon die of an allocation failure or the OOM killer.
//!
//! Three consumers grow with the configuration:
//!
//! * the **flow table**: one array allocated (and written) at start,
//!   [`flowtable::FlowTable::memory_bytes_for`] exactly;
//! * the **Maglev tables**: `M` slots of 4 bytes each, plus 8 bytes (id) and
//!   4 (backend slot) per endpoint, for every table of every service. A
//!   service has one table per region that takes a share of its new
//!   connections and, with zonal affinity, one more per zone of that region
//!   (the snapshot's `RegionTables`); this counts every region of its groups
//!   and every zone of each region, an upper bound. A rebuild makes the new
//!   snapshot's tables while the old ones are still in use, so tables count
//!   twice, plus the scratch of the largest single build
//!   ([`maglev::MaglevTable::build_scratch_bytes`]);
//! * the **packet pool**: `mbufs` DPDK objects of [`mbuf_bytes`] each (their data
//!   room follows the largest port MTU, [`pool_data_room`]), in hugepages (or in
//!   ordinary memory with `--no-huge`).
//!
//! Everything else (the compiled configuration, health-check state,
//! threads' stacks, DPDK's own few megabytes) is small beside these and not
//! counted.

use std::fmt;

use crate::schema::Config;

/// Bytes DPDK keeps free in front of a received packet (`RTE_PKTMBUF_HEADROOM`): where
/// the outer headers of encapsulation go.
pub const MBUF_HEADROOM: u16 = 128;

/// DPDK's default data room (`RTE_MBUF_DEFAULT_BUF_SIZE`: 2048 + the headroom), which
/// holds a 1500-byte MTU frame: the smallest the pool gets.
pub const DEFAULT_DATA_ROOM: u16 = 2048 + MBUF_HEADROOM;

/// Link-layer bytes of the largest frame a port takes beyond its MTU: Ethernet and one
/// VLAN tag.
pub const MAX_L2_LEN: u16 = 14 + 4;

/// The data room of every buffer of the pool when the largest port MTU is `mtu` (M48):
/// the headroom and a whole frame of that MTU, in one segment (the pipeline assumes
/// contiguous packets), the frame's part rounded up to whole KiB (some NICs take RX
/// buffer sizes in 1 KiB steps); never below [`DEFAULT_DATA_ROOM`].
pub const fn data_room(mtu: u16) -> u16 {
    let frame = (mtu as u32 + MAX_L2_LEN as u32).div_ceil(1024) * 1024;
    let room = MBUF_HEADROOM as u32 + frame;
    if room < DEFAULT_DATA_ROOM as u32 {
        DEFAULT_DATA_ROOM
    } else if room > u16::MAX as u32 {
        u16::MAX
    } else {
        #[allow(
            clippy::cast_possible_truncation,
            reason = "tested against u16::MAX above"
        )]
        let room = room as u16;
        room
    }
}

/// The data room of the pool for `cfg`: [`data_room`] of its largest port MTU.
pub fn pool_data_room(cfg: &Config) -> u16 {
    data_room(cfg.ports.iter().map(|p| p.mtu).max().unwrap_or(1500))
}

/// Bytes of one packet buffer with `data_room` in DPDK's pool: the object header (64, a
/// cache line), `struct rte_mbuf` (128) and the data room, rounded up to whole cache
/// lines and then to a count of lines prime to the 4 memory channels DPDK assumes (it
/// spreads objects over channels) — what `rte_mempool_calc_obj_size` gives for the pool
/// `spillway run` creates (DPDK 22.11, x86-64; a test of the binary checks it against
/// DPDK).
pub const fn mbuf_bytes(data_room: u16) -> u64 {
    let mut lines = (64 + 128 + data_room as u64).div_ceil(64);
    while lines % 2 == 0 {
        lines += 1;
    }
    lines * 64
}

/// Bytes of one default-sized packet buffer (1500-byte MTU): [`mbuf_bytes`] of
/// [`DEFAULT_DATA_ROOM`].
pub const MBUF_BYTES: u64 = mbuf_bytes(DEFAULT_DATA_ROOM);

/// Bytes per endpoint of a table beyond what the maglev crate holds: the
/// snapshot's backend slot of each table entry (`SlotTable::slots`, a `u32`).
pub const TABLE_SLOT_MAP_BYTES: u64 = 4;

/// Copies of every table alive at once: the running snapshot's and the one
/// being built to replace it.
pub const TABLE_COPIES: u64 = 2;

/// Nanoseconds to build one slot of a table of at most `m` slots (the
/// first entry whose bound is at least `m`). Building gets slower per slot
/// as the table and its bitmap outgrow the caches. Measured with
/// `cargo run --release -p maglev --example build_time` (1,000 and 10,000
/// endpoints) on a 2-core VM: 24-26 ns at M = 65537, 34-35 at 655373,
/// 68-104 at 4194301, 119 at 16777213, 385-520 at 67108859; rounded up.
pub const BUILD_NS_PER_SLOT: [(u32, u64); 5] = [
    (100_000, 30),
    (1_000_000, 40),
    (4_200_000, 110),
    (16_800_000, 130),
    (u32::MAX, 500),
];

/// One service's Maglev tables.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceTables {
    /// Index in `backend_services`.
    pub service: usize,
    /// Slots per table (`maglev_table_size`).
    pub size: u32,
    /// Most tables the service can have at once: per region of its groups,
    /// one, plus one per zone of the region with zonal affinity.
    pub tables: u64,
    /// Regions of its groups.
    pub regions: u64,
    /// Endpoints (and remote rules) of the service: the most one table holds.
    pub endpoints: u64,
}

impl ServiceTables {
    /// Bytes of one snapshot's tables of this service.
    pub fn bytes(&self) -> u64 {
        let endpoints = usize::try_from(self.endpoints).unwrap_or(usize::MAX);
        let one = maglev::MaglevTable::memory_bytes_for(self.size, endpoints)
            .saturating_add(self.endpoints.saturating_mul(TABLE_SLOT_MAP_BYTES));
        self.tables.saturating_mul(one)
    }

    /// Bytes while a rebuild replaces them.
    pub fn peak_bytes(&self) -> u64 {
        self.bytes().saturating_mul(TABLE_COPIES)
    }

    /// Slots a full rebuild of the service fills.
    pub fn slots(&self) -> u64 {
        self.tables.saturating_mul(u64::from(self.size))
    }

    /// Estimated time of a full rebuild of the service, in nanoseconds.
    pub fn build_ns(&self) -> u64 {
        let per_slot = BUILD_NS_PER_SLOT
            .iter()
            .find(|(m, _)| self.size <= *m)
            .map_or(500, |(_, ns)| *ns);
        self.slots().saturating_mul(per_slot)
    }

    /// Scratch memory of building one of its tables.
    pub fn build_scratch_bytes(&self) -> u64 {
        let endpoints = usize::try_from(self.endpoints).unwrap_or(usize::MAX);
        maglev::MaglevTable::build_scratch_bytes(self.size, endpoints)
    }
}

/// The memory a configuration needs; see the module documentation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Estimate {
    /// The flow table's allocation; `None` when its capacity is invalid
    /// (zero or beyond [`flowtable::MAX_CAPACITY`]).
    pub flow_table: Option<u64>,
    /// `dataplane.flow_table_capacity`.
    pub flow_table_capacity: u32,
    /// Every service's tables.
    pub services: Vec<ServiceTables>,
    /// The packet pool.
    pub packet_pool: u64,
    /// `dataplane.mbufs`.
    pub mbufs: u32,
    /// Whether the pool is in hugepages (no `--no-huge` in `eal_args`).
    pub pool_in_hugepages: bool,
}

impl Estimate {
    /// Maglev tables at their peak: every table twice, plus the largest
    /// build's scratch.
    pub fn maglev_bytes(&self) -> u64 {
        let tables = self
            .services
            .iter()
            .fold(0u64, |a, s| a.saturating_add(s.peak_bytes()));
        let scratch = self
            .services
            .iter()
            .map(ServiceTables::build_scratch_bytes)
            .max()
            .unwrap_or(0);
        tables.saturating_add(scratch)
    }

    /// Ordinary (not hugepage) memory: the flow table, the Maglev tables,
    /// and the packet pool when it is not in hugepages.
    pub fn ordinary_bytes(&self) -> u64 {
        let pool = if self.pool_in_hugepages {
            0
        } else {
            self.packet_pool
        };
        self.flow_table
            .unwrap_or(0)
            .saturating_add(self.maglev_bytes())
            .saturating_add(pool)
    }

    /// All of it.
    pub fn total_bytes(&self) -> u64 {
        let pool = if self.pool_in_hugepages {
            self.packet_pool
        } else {
            0
        };
        self.ordinary_bytes().saturating_add(pool)
    }

    /// Slots a full rebuild of every table fills.
    pub fn rebuild_slots(&self) -> u64 {
        self.services
            .iter()
            .fold(0u64, |a, s| a.saturating_add(s.slots()))
    }

    /// Tables a full rebuild builds.
    pub fn rebuild_tables(&self) -> u64 {
        self.services
            .iter()
            .fold(0u64, |a, s| a.saturating_add(s.tables))
    }

    /// Estimated duration of a full rebuild on one core.
    pub fn rebuild_time(&self) -> std::time::Duration {
        let ns = self
            .services
            .iter()
            .fold(0u64, |a, s| a.saturating_add(s.build_ns()));
        std::time::Duration::from_nanos(ns)
    }

    /// The consumers, largest first, as (field path, bytes, description).
    pub fn parts(&self) -> Vec<(String, u64, String)> {
        let mut parts = Vec::new();
        if let Some(b) = self.flow_table {
            parts.push((
                "dataplane.flow_table_capacity".to_owned(),
                b,
                format!(
                    "flow table (dataplane.flow_table_capacity = {}) {}",
                    self.flow_table_capacity,
                    Bytes(b)
                ),
            ));
        }
        for s in &self.services {
            let why = if s.tables > s.regions {
                format!(
                    "{} regions, {} zone tables with zonal affinity",
                    s.regions,
                    s.tables - s.regions
                )
            } else if s.regions > 1 {
                format!("{} regions", s.regions)
            } else {
                "one region".to_owned()
            };
            parts.push((
                format!("backend_services[{}].maglev_table_size", s.service),
                s.peak_bytes(),
                format!(
                    "Maglev tables (backend_services[{}].maglev_table_size = {}, up to {} table{} ({why}), twice while a rebuild replaces them) {}",
                    s.service,
                    s.size,
                    s.tables,
                    if s.tables == 1 { "" } else { "s" },
                    Bytes(s.peak_bytes())
                ),
            ));
        }
        let scratch = self.maglev_bytes().saturating_sub(
            self.services
                .iter()
                .fold(0u64, |a, s| a.saturating_add(s.peak_bytes())),
        );
        if scratch > 0 {
            parts.push((
                String::new(),
                scratch,
                format!("building a table {}", Bytes(scratch)),
            ));
        }
        parts.push((
            "dataplane.mbufs".to_owned(),
            self.packet_pool,
            format!(
                "packet pool (dataplane.mbufs = {}, in {}) {}",
                self.mbufs,
                if self.pool_in_hugepages {
                    "hugepages"
                } else {
                    "ordinary memory with --no-huge"
                },
                Bytes(self.packet_pool)
            ),
        ));
        // Stable: equal parts keep file order.
        parts.sort_by_key(|p| std::cmp::Reverse(p.1));
        parts
    }
}

/// The memory `cfg` needs. Services whose table size is not a valid one
/// (not a prime, or beyond what the maglev crate builds) are left out, as
/// validation rejects them anyway.
pub fn estimate(cfg: &Config) -> Estimate {
    let d = &cfg.dataplane;
    let flow_table = usize::try_from(d.flow_table_capacity)
        .ok()
        .and_then(|c| flowtable::FlowTable::memory_bytes_for(c).ok())
        .map(|b| b as u64);
    let services = cfg
        .backend_services
        .iter()
        .enumerate()
        .filter(|(_, s)| maglev::TableSize::new(s.maglev_table_size).is_ok())
        .map(|(i, s)| {
            let mut regions: Vec<(&str, Vec<&str>)> = Vec::new();
            for g in &s.groups {
                match regions.iter_mut().find(|(r, _)| *r == g.region) {
                    Some((_, zones)) => {
                        if !zones.contains(&g.zone.as_str()) {
                            zones.push(&g.zone);
                        }
                    }
                    None => regions.push((&g.region, vec![&g.zone])),
                }
            }
            let zonal = s.locality.zonal_affinity;
            let tables = regions
                .iter()
                .map(|(_, zones)| 1 + if zonal { zones.len() as u64 } else { 0 })
                .sum::<u64>()
                .max(1);
            let endpoints = s
                .groups
                .iter()
                .map(|g| g.endpoints.len() as u64 + u64::from(g.remote.is_some()))
                .sum();
            ServiceTables {
                service: i,
                size: s.maglev_table_size,
                tables,
                regions: (regions.len() as u64).max(1),
                endpoints,
            }
        })
        .collect();
    Estimate {
        flow_table,
        flow_table_capacity: d.flow_table_capacity,
        services,
        packet_pool: u64::from(d.mbufs).saturating_mul(mbuf_bytes(pool_data_room(cfg))),
        mbufs: d.mbufs,
        pool_in_hugepages: !d.eal_args.iter().any(|a| a == "--no-huge"),
    }
}

/// The lines `check-config`'s summary shows about memory and rebuild time.
pub fn summary(e: &Estimate, machine: Option<&crate::Memory>) -> String {
    let flow = e
        .flow_table
        .map_or_else(|| "invalid".to_owned(), |b| Bytes(b).to_string());
    let mut s = format!(
        "memory: about {} (flow table {flow}, Maglev tables {} counting a rebuild, packet pool {} in {})\n",
        Bytes(e.total_bytes()),
        Bytes(e.maglev_bytes()),
        Bytes(e.packet_pool),
        if e.pool_in_hugepages {
            "hugepages"
        } else {
            "ordinary memory"
        },
    );
    match machine {
        Some(m) => {
            s.push_str(&format!(
                "  this machine: {} ({} available",
                Bytes(m.total),
                Bytes(m.available)
            ));
            if m.hugepages > 0 {
                s.push_str(&format!(", {} reserved as hugepages", Bytes(m.hugepages)));
            }
            s.push_str(")\n");
        }
        None => s.push_str("  this machine: not checked\n"),
    }
    s.push_str(&format!(
        "Maglev: a full rebuild builds {} table{}, {} slots, about {} on the management core\n",
        e.rebuild_tables(),
        if e.rebuild_tables() == 1 { "" } else { "s" },
        e.rebuild_slots(),
        seconds(e.rebuild_time())
    ));
    s
}

/// A byte count for people: binary units, three significant digits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bytes(pub u64);

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
        let mut v = self.0 as f64;
        let mut u = 0;
        while v >= 1024.0 && u + 1 < UNITS.len() {
            v /= 1024.0;
            u += 1;
        }
        match u {
            0 => write!(f, "{} B", self.0),
            _ if v < 10.0 => write!(f, "{v:.2} {}", UNITS[u]),
            _ if v < 100.0 => write!(f, "{v:.1} {}", UNITS[u]),
            _ => write!(f, "{v:.0} {}", UNITS[u]),
        }
    }
}

/// A duration for people: "3 ms", "1.2 s".
pub fn seconds(d: std::time::Duration) -> String {
    let s = d.as_secs_f64();
    if s < 1.0 {
        format!("{:.0} ms", (s * 1e3).max(1.0))
    } else if s < 10.0 {
        format!("{s:.1} s")
    } else {
        format!("{s:.0} s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_read_well() {
        assert_eq!(Bytes(100).to_string(), "100 B");
        assert_eq!(Bytes(1536).to_string(), "1.50 KiB");
        assert_eq!(Bytes(96 << 20).to_string(), "96.0 MiB");
        assert_eq!(Bytes(300 << 30).to_string(), "300 GiB");
        assert_eq!(seconds(std::time::Duration::from_micros(2600)), "3 ms");
        assert_eq!(seconds(std::time::Duration::from_millis(1250)), "1.2 s");
    }
}
