//! The admin floor: what every management listener of the project needs,
//! whatever it serves — the daemon's control socket and `/status` and
//! `/metrics` endpoint (`control`), the zone health service's
//! (`zonehealth`).
//!
//! - [`unix`]: a Unix socket bound mode 0660 in its group, removed only
//!   while it is the one bound, peers checked by their credentials; the
//!   client's connect.
//! - [`admission`]: who gets an HTTP listener's connection slots (allow
//!   list, per-client caps, fair eviction).
//! - [`accept`]: the accept loops: a slot for each connection (an HTTP
//!   listener's by [`admission`], a control socket's of a fixed number)
//!   or the listener's `busy` answer, a task for each served one.
//! - [`http`]: one request per connection: when a head is whole, how an
//!   answer is framed.
//! - [`openmetrics`]: the text of a `/metrics` answer: families of
//!   counters and gauges, written as the OpenMetrics format says.
//!
//! The limits these listeners accept are in `values::listener`, below
//! every configuration file.

pub mod accept;
pub mod admission;
pub mod http;
pub mod openmetrics;
pub mod unix;
