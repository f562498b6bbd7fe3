//! Typed errors. One small enum per kind of operation; each variant's doc line is its message.
//!
//! The data plane does not propagate these: it maps them to drop counters.

use thiserror::Error;

/// Why a header could not be parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Error)]
pub enum ParseError {
    /// buffer too short for the header or the length it announces
    #[error("buffer too short for the header or the length it announces")]
    Truncated,
    /// wrong IP version for this header
    #[error("wrong IP version for this header")]
    BadVersion,
    /// header length field is invalid
    #[error("header length field is invalid")]
    BadHeaderLength,
    /// total or payload length field is invalid
    #[error("total or payload length field is invalid")]
    BadLength,
    /// checksum does not verify
    #[error("checksum does not verify")]
    BadChecksum,
    /// reserved flags or version bits are set
    #[error("reserved flags or version bits are set")]
    BadFlags,
    /// header is well-formed but of a kind this library does not handle
    #[error("header is well-formed but of a kind this library does not handle")]
    Unsupported,
    /// more IPv6 extension headers (or VLAN tags) than the walk allows
    #[error("more IPv6 extension headers (or VLAN tags) than the walk allows")]
    TooManyHeaders,
    /// option or TLV is malformed
    #[error("option or TLV is malformed")]
    BadOption,
}

/// Why a packet buffer could not be grown or shrunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Error)]
pub enum BufError {
    /// not enough headroom to prepend the requested bytes
    #[error("not enough headroom to prepend the requested bytes")]
    NoHeadroom,
    /// buffer holds fewer bytes than the requested strip or trim
    #[error("buffer holds fewer bytes than the requested strip or trim")]
    TooShort,
    /// initial data does not fit the buffer's storage
    #[error("initial data does not fit the buffer's storage")]
    TooLarge,
}

/// Why a packet could not be encapsulated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Error)]
pub enum EncapError {
    /// inner frame is malformed
    #[error("inner frame is malformed: {0}")]
    Parse(#[from] ParseError),
    /// buffer operation failed
    #[error("buffer operation failed: {0}")]
    Buf(#[from] BufError),
    /// inner frame does not carry IPv4 or IPv6
    #[error("inner frame does not carry IPv4 or IPv6")]
    NotIp,
    /// outer UDP source port range is empty
    #[error("outer UDP source port range is empty")]
    BadPortRange,
    /// outer source and destination addresses are of different families
    #[error("outer source and destination addresses are of different families")]
    MixedFamilies,
    /// encapsulated packet would exceed the 16-bit length fields
    #[error("encapsulated packet would exceed the 16-bit length fields")]
    TooLong,
}

/// Why a packet could not be decapsulated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Error)]
pub enum DecapError {
    /// outer headers are malformed
    #[error("outer headers are malformed: {0}")]
    Parse(#[from] ParseError),
    /// buffer operation failed
    #[error("buffer operation failed: {0}")]
    Buf(#[from] BufError),
    /// packet is not a tunnel packet of a configured kind
    #[error("packet is not a tunnel packet of a configured kind")]
    NotTunnel,
    /// tunnel payload is not an IPv4 or IPv6 packet
    #[error("tunnel payload is not an IPv4 or IPv6 packet")]
    NotIp,
    /// outer UDP checksum is zero over IPv6 and zero checksums are not allowed
    #[error("outer UDP checksum is zero over IPv6 and zero checksums are not allowed")]
    ZeroUdpChecksum,
    /// supplied link-layer header does not end in the inner packet's EtherType
    #[error("supplied link-layer header does not end in the inner packet's EtherType")]
    L2Mismatch,
}
