//! What the listeners hand the management core ([`Job`]), what a request
//! read whole turned out to be ([`Parsed`]), and how long its answer may
//! take. Below the listeners ([`crate::listen`]) and the two protocols they
//! read ([`crate::socket`], [`crate::http`]), which all use them.

use std::time::Duration;

/// How long a request waits for the management loop's answer (a reload of a
/// large configuration may take a while; the loop is not stalled meanwhile,
/// it is working).
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

/// What a client asked of the management core.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Job {
    /// A control-socket command line, as sent (see [`crate::socket::dispatch`]).
    Command(String),
    /// HTTP `GET /status`: the exported rule states.
    ExportedStatus,
    /// HTTP `GET /metrics`.
    Metrics,
}

/// What a complete request turned out to be.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Parsed {
    /// For the management loop.
    Job(Job),
    /// Answered here (an HTTP 404 or 405).
    Answer(Vec<u8>),
    /// Not a request (answered here, counted as bad).
    Bad(Vec<u8>),
}
