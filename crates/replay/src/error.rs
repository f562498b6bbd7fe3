//! Why a replay failed. Each variant's text is the context it was found in
//! and its source the cause, so that the chain (`{:#}` of an
//! `anyhow::Error`, as `spillway` prints it) reads "context: cause".

use std::net::IpAddr;
use std::path::PathBuf;

use pcap_file::PcapError;
use wire::error::BufError;

/// Why a replay failed (before or while running; a reload refused at its
/// time is not a failure: the summary says why).
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The configuration file does not load. Its errors (positioned, one a
    /// line) are the whole text: no chain follows.
    #[error("{0}")]
    Config(config::ConfigErrors),
    /// A `--reload` file does not exist.
    #[error("--reload {}: no such file", .0.display())]
    ReloadMissing(PathBuf),
    /// `--down` or `--up` names an address that is no endpoint's, neither
    /// in the configuration nor in a reloaded one.
    #[error("{option} {address}: no endpoint has that address")]
    UnknownAddress {
        /// The option that names it (`--down`, `--up`).
        option: &'static str,
        /// The address.
        address: IpAddr,
    },
    /// The management core did not start.
    #[error("starting the management core")]
    Start(#[source] control_core::StartError),
    /// The flow table could not be made.
    #[error("flow table of {capacity} entries")]
    FlowTable {
        /// Its configured capacity.
        capacity: u32,
        /// Why.
        #[source]
        source: flowtable::ConfigError,
    },
    /// The input could not be opened.
    #[error("opening {}", .path.display())]
    OpenInput {
        /// The input file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The input is not a pcap file.
    #[error("{}: not a pcap file", .path.display())]
    NotPcap {
        /// The input file.
        path: PathBuf,
        /// Why.
        #[source]
        source: PcapError,
    },
    /// A record of the input could not be read.
    #[error("{}: packet {packet}", .path.display())]
    Record {
        /// The input file.
        path: PathBuf,
        /// The record's number (from 1).
        packet: u64,
        /// Why.
        #[source]
        source: PcapError,
    },
    /// A record's timestamp is out of range.
    #[error("{}: packet {packet}: timestamp fraction {fraction} out of range", .path.display())]
    Timestamp {
        /// The input file.
        path: PathBuf,
        /// The record's number (from 1).
        packet: u64,
        /// The fraction of a second (micro- or nanoseconds).
        fraction: u32,
    },
    /// The output could not be created.
    #[error("creating {}", .path.display())]
    CreateOutput {
        /// The output file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The output's pcap header could not be written.
    #[error("writing {}", .path.display())]
    WriteHeader {
        /// The output file.
        path: PathBuf,
        /// Why.
        #[source]
        source: PcapError,
    },
    /// A transmitted packet could not be written.
    #[error("writing the output pcap")]
    WriteOutput(#[source] PcapError),
    /// A packet buffer could not be made.
    #[error(transparent)]
    Buffer(#[from] BufError),
}
