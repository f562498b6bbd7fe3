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
    /// not enough room behind the packet to append the requested bytes
    #[error("not enough room behind the packet to append the requested bytes")]
    NoTailroom,
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

/// Why a Neighbor Solicitation or Advertisement is invalid and must be silently ignored
/// (RFC 4861 §7.1.1, §7.1.2; RFC 6980).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Error)]
pub enum NdpError {
    /// headers or options are malformed, or the checksum does not verify
    #[error("headers or options are malformed, or the checksum does not verify: {0}")]
    Parse(#[from] ParseError),
    /// message is not of the expected neighbor discovery type
    #[error("message is not of the expected neighbor discovery type")]
    WrongType,
    /// IP hop limit is not 255 (the message crossed a router)
    #[error("IP hop limit is not 255 (the message crossed a router)")]
    HopLimit,
    /// ICMPv6 code is not 0
    #[error("ICMPv6 code is not 0")]
    Code,
    /// message is shorter than 24 bytes
    #[error("message is shorter than 24 bytes")]
    TooShort,
    /// target address is a multicast address
    #[error("target address is a multicast address")]
    MulticastTarget,
    /// a source address (IPv6 or link-layer) is a multicast address
    #[error("a source address (IPv6 or link-layer) is a multicast address")]
    MulticastSource,
    /// a solicitation from the unspecified address is not for duplicate address detection
    #[error("a solicitation from the unspecified address is not for duplicate address detection")]
    BadDad,
    /// an advertisement to a multicast address has the Solicited flag set
    #[error("an advertisement to a multicast address has the Solicited flag set")]
    SolicitedMulticast,
    /// message is an IPv6 fragment (RFC 6980)
    #[error("message is an IPv6 fragment (RFC 6980)")]
    Fragmented,
}

/// Why a packet could not be turned into a reply in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Error)]
pub enum ReplyError {
    /// received frame is malformed
    #[error("received frame is malformed: {0}")]
    Parse(#[from] ParseError),
    /// received neighbor solicitation is invalid
    #[error("received neighbor solicitation is invalid: {0}")]
    Ndp(#[from] NdpError),
    /// buffer operation failed
    #[error("buffer operation failed: {0}")]
    Buf(#[from] BufError),
    /// received frame is not a TCP segment over IPv4 or IPv6
    #[error("received frame is not a TCP segment over IPv4 or IPv6")]
    NotTcp,
    /// received segment is an IP fragment
    #[error("received segment is an IP fragment")]
    Fragment,
    /// received segment is itself a reset (never answered, RFC 9293 §3.10.7.1)
    #[error("received segment is itself a reset")]
    Reset,
    /// sender address is not a unicast address a reply may be sent to
    #[error("sender address is not a unicast address a reply may be sent to")]
    BadSource,
    /// received frame is not an IPv4 or IPv6 packet
    #[error("received frame is not an IPv4 or IPv6 packet")]
    NotIp,
    /// received packet is itself an ICMP error (never answered with one, RFC 1122
    /// §3.2.2, RFC 4443 §2.4)
    #[error("received packet is itself an ICMP error")]
    IcmpError,
    /// received packet is not an ICMP echo request answerable in place (another
    /// message, IPv4 options or IPv6 extension headers)
    #[error("received packet is not an ICMP echo request answerable in place")]
    NotEcho,
}
