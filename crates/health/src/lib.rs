//! Spillway's health checking (M16–M20, M22): probers, the endpoint
//! state machine, service aggregation and composite health. It emits states
//! and decides nothing else: eligibility, fail-open and Maglev rebuilds are
//! the management core's.
//!
//! # Pieces
//!
//! - [`HealthChecker`] runs the probes of a list of [`Target`]s on one thread
//!   named `spillway-health` (a tokio current-thread runtime), one task per
//!   endpoint with its own interval timer, start times spread over the
//!   interval by the endpoint's index. The management core polls it:
//!   [`HealthChecker::generation`] (one atomic load) tells whether anything
//!   it decides on changed, [`HealthChecker::snapshot`] copies the statuses,
//!   [`HealthChecker::update`] replaces the targets on reload, keeping the
//!   state of those that stay. Nothing it calls waits on a probe.
//! - [`Prober`] runs one probe: `TCP` (connect within the timeout), `HTTP`
//!   and `HTTPS` (`GET path`, 2xx/3xx passes). Reasons for failures are the
//!   [`ProbeError`] messages: `connect refused`, `timeout after 2s`,
//!   `HTTP 503`, `certificate expired`, …
//! - [`Tracker`]: UNKNOWN → HEALTHY after `healthy_threshold` consecutive
//!   passes, → UNHEALTHY after `unhealthy_threshold` consecutive failures.
//!   Each transition is logged as one line,
//!   `health: <service>/<addr:port> <old> -> <new> (<reason>)`, and counted.
//! - [`aggregate()`] (M19) and [`composite()`] (M20): pure functions; see the
//!   [`aggregate`](mod@aggregate) module for how UNKNOWN endpoints count.
//!
//! # Probes as backends see them (M22)
//!
//! Probes are plain TCP connections from the host's own stack, never
//! encapsulated and never through the data plane: they leave through the
//! kernel's routing, which on a Spillway node is the exception interface
//! (TAP/virtio-user) on the data NIC. Their **source address** is therefore
//! the exception interface's address — the address the kernel picks for the
//! endpoint's route — unless the health check sets `source_address`, in
//! which case every probe binds to it before connecting (it must be an
//! address of this host, of the endpoint's IP version). Backends should
//! allow TCP connections from that address to the checked port (firewalls,
//! security groups, `allow` lists), and can recognise probes by it. HTTP(S)
//! probes also send `User-Agent: spillway-health/<version>` and
//! `Connection: close`; the `Host` header is the check's `host`, else the
//! endpoint address (with `:port` unless the port is 80 for HTTP or 443 for
//! HTTPS).
//!
//! A check with `target = "vip"` (M52) probes each endpoint through each
//! VIP of its service instead: the probe connects to `VIP:port` from its own
//! source port ([`Via`]), and the data plane delivers what the host sends
//! from that port to the endpoint, encapsulated like a client's packet. Such
//! probes always close with a reset, since a fixed source port in
//! `TIME_WAIT` would fail the next connect. The endpoint's verdict is the
//! worst of its probes' ([`HealthSnapshot::get`]).
//!
//! TCP probes close with a reset (`SO_LINGER` 0), as HAProxy's do, so that
//! thousands of probes a second leave no `TIME_WAIT` sockets on the node;
//! backends may log them as resets. HTTP(S) probes close normally after the
//! response head (the body is not read).
//!
//! # Response headers (M17, M25)
//!
//! - `X-Load-Balancing-Endpoint-Weight` (read when `weight_from_header` is
//!   set): an integer 0–1000. Absent: the configured weight applies
//!   ([`EndpointStatus::weight`] is `None`). 0: healthy but not eligible for
//!   new flows. Anything else (not an integer, out of range) **fails the
//!   probe** with reason `invalid X-Load-Balancing-Endpoint-Weight "…"`: the
//!   operator asked for weights and the endpoint is misreporting, so it
//!   must not keep receiving traffic at a weight nobody chose. Only the
//!   first occurrence is read.
//! - `X-Load-Balancing-Endpoint-Utilization` (always read on HTTP(S)
//!   checks): a decimal 0.0–1.0, the endpoint's own measure of how busy it
//!   is, for `UTILIZATION` balancing. Absent or invalid (not a number,
//!   outside 0–1): not reported ([`EndpointStatus::utilization`] is `None`);
//!   the probe's verdict does not depend on it, since nothing in the
//!   configuration asks for it.
//!
//! A failing probe keeps the last reported weight and utilization; a passing
//! one replaces them (with `None` when its response has no header).
//!
//! # HTTPS
//!
//! Host names and certificate chains are not verified (self-signed and
//! internal-CA certificates pass), but the leaf certificate must be within
//! its validity period ([`tls::check_validity`], with `x509-parser`), and
//! the handshake signatures are verified, so the backend must hold the
//! key. SNI is the check's `host` when it is a DNS name.

// The decisions: no I/O, no clock (clippy.toml here refuses them; the
// `probers` modules below allow them by name).
pub mod aggregate;
pub mod error;
pub mod state;
pub mod status;
pub mod target;

// The I/O: probers, their TLS, the checker thread (feature `probers`).
#[cfg(feature = "probers")]
pub mod checker;
#[cfg(feature = "probers")]
pub mod probe;
#[cfg(feature = "probers")]
pub mod tls;

pub use aggregate::{Aggregate, Counts, aggregate, aggregate_counts, composite};
#[cfg(feature = "probers")]
pub use checker::{HealthChecker, THREAD_NAME};
pub use error::HealthError;
#[cfg(feature = "probers")]
pub use probe::{ProbeError, ProbeOk, Prober, UTILIZATION_HEADER, WEIGHT_HEADER};
pub use state::{State, Tracker, Transition};
pub use status::{Counters, EndpointStatus, HealthSnapshot};
pub use target::{Check, ProbeKind, Target, Via, targets_from_compiled};
