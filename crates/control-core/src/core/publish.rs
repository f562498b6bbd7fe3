//! Publishing snapshots: each is made of the running configuration, the
//! endpoints' health and the locality plans; it goes live at once when the
//! Maglev tables it lacks are small ([`INLINE_TABLE_SLOTS`]), else the core
//! asks its shell to build them off the loop ([`Output::BuildTables`],
//! [`build_tables`]) and publishes when they come back
//! ([`Core::tables_built`]). What became of a request is [`Published`].

use std::sync::Arc;
use std::time::Duration;

use config::Compiled;
use dataplane::EndpointHealth;

use super::{Core, Output, Probes, say};

/// Missing Maglev tables of at most this many slots in all (a few tens of
/// milliseconds of building) are built on the management loop itself.
pub const INLINE_TABLE_SLOTS: u64 = 1 << 21;

pub use crate::ports::{BuiltTables, build_tables};

/// What became of a snapshot to publish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Published {
    /// Live now, as this generation.
    Live(u32),
    /// Waiting for `tables` Maglev tables (`slots` slots in all) that a
    /// thread is building; it goes live when they are built.
    Building {
        /// Tables being built.
        tables: usize,
        /// Their slots in all.
        slots: u64,
    },
    /// Noted while a build is in progress; published (with whatever tables
    /// it needs) when that build ends.
    Queued,
}

impl std::fmt::Display for Published {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Published::Live(g) => write!(f, "generation {g} is live"),
            Published::Building { tables, slots } => write!(
                f,
                "accepted; it goes live when its {tables} new Maglev table(s) ({slots} slots) are built (see `spillway status`)"
            ),
            Published::Queued => write!(
                f,
                "accepted; it goes live after the Maglev build in progress (see `spillway status`)"
            ),
        }
    }
}

/// Plans of VIPs of their own: (service index, VIP, plan).
type VipPlans = Vec<(usize, std::net::IpAddr, locality::Plan)>;

/// A snapshot waiting for its Maglev tables, which the shell builds so that
/// the management loop goes on ageing flows, applying health and answering
/// while they are large (M38, M50).
pub(super) struct PendingBuild {
    build: u64,
    compiled: Arc<Compiled>,
    /// Health of every endpoint of `compiled` and the plans, as they were
    /// when the build started: the snapshot is made of these.
    health: Vec<EndpointHealth>,
    plans: Vec<Option<locality::Plan>>,
    /// The VIPs' own plans (M52, M8), as they were then.
    vip_plans: VipPlans,
    pub(super) started: Duration,
    pub(super) tables: usize,
    pub(super) slots: u64,
}

impl Core {
    /// Sets the size of table builds made by the core itself (default
    /// [`INLINE_TABLE_SLOTS`]; 0 asks for every missing table with
    /// [`Output::BuildTables`]).
    pub fn build_inline_up_to(&mut self, slots: u64) {
        self.inline_slots = slots;
    }

    /// Whether a snapshot is waiting for Maglev tables built off the loop.
    pub fn building(&self) -> bool {
        self.pending.is_some()
    }

    /// Publishes a snapshot of the current configuration, health and plans:
    /// at once when the Maglev tables it lacks are small, else once they are
    /// built off the loop. While a build is pending, a new request is noted
    /// and served when it ends (the latest state then).
    pub(super) fn publish(&mut self) -> Result<Published, String> {
        if self.pending.is_some() {
            self.dirty = true;
            return Ok(Published::Queued);
        }
        self.builder.set_standby(self.vrrp.standby());
        let compiled = self.compiled.clone();
        let health: Vec<EndpointHealth> = (0..u32::try_from(compiled.endpoints.len())
            .unwrap_or(u32::MAX))
            .map(|i| {
                self.balance
                    .endpoint_health(config::compiled::EndpointId(i))
            })
            .collect();
        let plans = self.balance.plans().to_vec();
        let vip_plans = self.balance.vip_plans();
        let missing =
            self.builder
                .missing_tables(&compiled, &self.local, captured(&health), &plans);
        let slots: u64 = missing.iter().map(|k| u64::from(k.size)).sum();
        if slots <= self.inline_slots {
            return self
                .assemble(compiled, &health, &plans, vip_plans)
                .map(Published::Live);
        }
        let tables = missing.len();
        self.builds += 1;
        let build = self.builds;
        self.out.push(Output::BuildTables {
            build,
            tables: missing,
        });
        say!(
            self.out,
            Info,
            "building {tables} Maglev table(s), {slots} slots, off the management loop"
        );
        self.pending = Some(PendingBuild {
            build,
            compiled,
            health,
            plans,
            vip_plans,
            started: self.now,
            tables,
            slots,
        });
        Ok(Published::Building { tables, slots })
    }

    /// Builds the snapshot of `compiled` with this health and these plans
    /// (its Maglev tables at hand, or built here) and publishes it.
    fn assemble(
        &mut self,
        compiled: Arc<Compiled>,
        health: &[EndpointHealth],
        plans: &[Option<locality::Plan>],
        vip_plans: VipPlans,
    ) -> Result<u32, String> {
        self.builder.set_vip_plans(vip_plans);
        let snap = self
            .builder
            .build_with_plans(
                compiled,
                self.local.clone(),
                captured(health),
                plans,
                self.tick_now().get(),
                1,
            )
            .map_err(|e| e.to_string())?;
        let generation = snap.generation;
        self.say_last_resort(&snap);
        let snap = Arc::new(snap);
        self.live = snap.clone();
        self.out.push(Output::Publish(snap));
        if let Some(s) = &mut self.sync {
            s.learn(&self.compiled, &self.builder);
        }
        Ok(generation)
    }

    /// Logs each service whose new connections start or stop going to
    /// draining endpoints as the last resort (M14) with `snap`.
    fn say_last_resort(&mut self, snap: &dataplane::Snapshot) {
        let was = |name: &str| {
            let live = &self.live;
            live.compiled
                .services
                .iter()
                .zip(&live.services)
                .any(|(s, p)| s.name == name && p.last_resort)
        };
        for (svc, plan) in snap.compiled.services.iter().zip(&snap.services) {
            match (was(&svc.name), plan.last_resort) {
                (false, true) => say!(
                    self.out,
                    Warn,
                    "service {}: no configured endpoint is eligible; new connections go to its {} draining endpoint(s) as the last resort",
                    svc.name,
                    plan.eligible_slots().len()
                ),
                (true, false) => say!(
                    self.out,
                    Info,
                    "service {}: no longer on draining endpoints as the last resort",
                    svc.name
                ),
                _ => {}
            }
        }
    }

    /// Input: the tables of [`Output::BuildTables`] `build` are built (or
    /// could not be). Publishes the snapshot waiting for them, unless a
    /// newer configuration was accepted meanwhile (then that one, never the
    /// superseded one); then whatever was asked for meanwhile.
    pub fn tables_built(
        &mut self,
        now: Duration,
        build: u64,
        built: Result<BuiltTables, String>,
        probes: &mut dyn Probes,
    ) {
        self.advance(now);
        if self.pending.as_ref().is_none_or(|p| p.build != build) {
            return;
        }
        let Some(p) = self.pending.take() else {
            return;
        };
        let asked = std::mem::take(&mut self.dirty);
        // A reload accepted while the tables were built (a revert, say)
        // replaces the configuration they were built for.
        let superseded = !Arc::ptr_eq(&p.compiled, &self.compiled);
        let result = built.and_then(|tables| {
            self.builder.add_tables(tables);
            if superseded {
                return Ok(None);
            }
            self.assemble(p.compiled.clone(), &p.health, &p.plans, p.vip_plans.clone())
                .map(Some)
        });
        match result {
            Ok(Some(generation)) => say!(
                self.out,
                Info,
                "generation {generation} live: {} Maglev table(s) built in {:.1} s",
                p.tables,
                self.now.saturating_sub(p.started).as_secs_f64()
            ),
            Ok(None) => say!(
                self.out,
                Info,
                "{} Maglev table(s) built for a configuration replaced meanwhile; publishing the current one",
                p.tables
            ),
            Err(e) if superseded => say!(
                self.out,
                Warn,
                "building Maglev tables for a configuration replaced meanwhile: {e}"
            ),
            Err(e) => {
                self.build_failed(&e, probes);
                if !asked {
                    return;
                }
            }
        }
        if asked || superseded {
            if let Err(e) = self.publish() {
                self.build_failed(&e, probes);
            }
        }
    }

    /// The current configuration cannot go live (cannot happen with a
    /// validated one): the running snapshot stays, and health and locality
    /// follow its configuration again.
    pub(super) fn build_failed(&mut self, e: &str, probes: &mut dyn Probes) {
        say!(self.out, Error, "building the snapshot: {e}");
        let live = self.live.compiled.clone();
        if !Arc::ptr_eq(&live, &self.compiled) {
            self.compiled = live;
            if let Err(h) = self
                .balance
                .reload(&self.compiled, self.now, probes, &mut self.out)
            {
                say!(self.out, Error, "health checks: {h}");
            }
            self.reloads_failed += 1;
            self.last_reload = Some(self.now);
            self.last_error = Some(format!("the reloaded configuration could not go live: {e}"));
        }
    }
}

/// Endpoint health as captured for a build (indexed like the configuration's
/// endpoints), in the form the snapshot builder asks for it.
fn captured(
    health: &[EndpointHealth],
) -> impl Fn(config::compiled::EndpointId) -> EndpointHealth + '_ {
    |id| {
        health
            .get(id.index())
            .copied()
            .unwrap_or(EndpointHealth::HEALTHY)
    }
}
