//! Errors of setting up health checking (probe failures are not errors:
//! they are [`crate::ProbeError`] results that drive the state machine).

/// Setting up the health checker failed.
#[derive(Debug, thiserror::Error)]
pub enum HealthError {
    /// health check {name:?}: {reason}
    #[error("health check {name:?}: {reason}")]
    InvalidCheck {
        /// The check's name (or `"<target>"` for hand-built targets).
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// cannot start the health-check runtime: {0}
    #[error("cannot start the health-check runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// cannot spawn the health-check thread: {0}
    #[error("cannot spawn the health-check thread: {0}")]
    Thread(#[source] std::io::Error),
    /// cannot set up TLS for HTTPS checks: {0}
    #[cfg(feature = "probers")]
    #[error("cannot set up TLS for HTTPS checks: {0}")]
    Tls(#[source] rustls::Error),
    /// the health-check thread panicked
    #[error("the health-check thread panicked")]
    Panicked,
}
