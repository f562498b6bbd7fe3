//! Narrowing casts whose range the call site knows, each named for the claim
//! it makes. Every one is the plain `as` (no branch, no panic: they run per
//! packet); the workspace lints every other narrowing `as`.

/// A length or offset within one frame, or a header's length: frames are
/// under 64 KiB (an IPv4 total length and a UDP length are 16 bits).
#[inline(always)]
#[allow(clippy::cast_possible_truncation, reason = "a frame is under 64 KiB")]
pub(crate) const fn len16(n: usize) -> u16 {
    n as u16
}

/// A length or offset within one frame, as the 32 bits of a pseudo header
/// or `PacketInfo`.
#[inline(always)]
#[allow(clippy::cast_possible_truncation, reason = "a frame is under 64 KiB")]
pub(crate) const fn len32(n: usize) -> u32 {
    n as u32
}

/// A header's length (or a count of its words, VLAN tags, options) that the
/// header's format keeps under 256.
#[inline(always)]
#[allow(
    clippy::cast_possible_truncation,
    reason = "header formats keep it under 256"
)]
pub(crate) const fn len8(n: usize) -> u8 {
    n as u8
}
