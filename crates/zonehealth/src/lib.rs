//! Spillway's zone health service (M51): multi-zone active/active with DNS
//! failover. Each zone has its own VIPs; one name resolves to the VIPs of
//! every healthy zone. `spillway zone-health` probes every zone's VIPs from
//! outside the balancers (ICMP echo and a TCP or HTTP probe through a
//! port), and publishes the healthy zones' VIPs as the name's A/AAAA set on
//! a real authoritative DNS server, with RFC 2136 updates signed with TSIG
//! ([`dnsupdate`]). When every zone fails, every zone's records are
//! published (fail-open); an operator can remove a zone by hand, recorded
//! in the DNS zone itself so that it survives restarts and is seen by every
//! redundant instance, and never undone by fail-open.
//!
//! [`config`] reads the file, [`state`] decides from probe results,
//! [`publish`] turns a decision into the minimal update, [`probe`] probes,
//! and [`service`] runs it all.

pub mod config;
pub mod probe;
pub mod publish;
pub mod service;
pub mod state;

pub use config::Settings;
pub use service::run;
