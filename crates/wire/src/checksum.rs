//! The Internet checksum (RFC 1071), pseudo headers, and incremental update (RFC 1624).
//!
//! Sums are accumulated in a `u64` of big-endian 16-bit words and folded at the end, so
//! partial sums of several pieces can be added together before folding.

use core::net::{Ipv4Addr, Ipv6Addr};

/// Adds the big-endian 16-bit words of `data` to a running sum (odd length is zero-padded).
///
/// Whole 8-byte words are summed as they lie in memory (little-endian) with an end-around
/// carry, folded to 16 bits and byte-swapped: the one's complement sum does not depend on
/// byte order (RFC 1071, 2.B), and a load plus an add-with-carry per word is cheaper than
/// a byte swap and two adds. The result is congruent modulo 0xffff to the plain sum of the
/// words and zero only when they all are, so [`fold`] of it is the same.
#[inline]
#[allow(
    clippy::cast_possible_truncation,
    reason = "the halves of a 64-bit sum"
)]
pub fn add(acc: u64, data: &[u8]) -> u64 {
    // One's complement addition: an add and an add of its carry.
    let adc = |sum: u64, w: u64| {
        let (s, carry) = sum.overflowing_add(w);
        s + u64::from(carry)
    };
    let mut words = 0u64;
    let mut rest = data;
    while let Some((w, tail)) = rest.split_first_chunk::<8>() {
        words = adc(words, u64::from_le_bytes(*w));
        rest = tail;
    }
    // The last 0-7 bytes in the same lanes, a 4-, 2- and 1-byte piece (an odd last byte is
    // the low byte of its lane: zero-padded).
    if let Some((w, tail)) = rest.split_first_chunk::<4>() {
        words = adc(words, u64::from(u32::from_le_bytes(*w)));
        rest = tail;
    }
    if let Some((w, tail)) = rest.split_first_chunk::<2>() {
        words = adc(words, u64::from(u16::from_le_bytes(*w)));
        rest = tail;
    }
    if let [last] = rest {
        words = adc(words, u64::from(*last));
    }
    // 64 bits to 32 with an end-around carry (which cannot carry again), then to 16.
    let (half, carry) = (words as u32).overflowing_add((words >> 32) as u32);
    acc + u64::from(fold32(half + u32::from(carry)).swap_bytes())
}

/// Folds a running sum to 16 bits (one's complement addition of the carries).
#[inline]
#[allow(clippy::cast_possible_truncation, reason = "the loop leaves 16 bits")]
pub fn fold(mut acc: u64) -> u16 {
    while acc >> 16 != 0 {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// [`fold`] of a 32-bit sum: two folding steps always suffice (the first leaves at most
/// `0x1fffe`, the second at most `0xffff`), without `fold`'s loop.
#[inline]
#[allow(clippy::cast_possible_truncation, reason = "two steps leave 16 bits")]
pub const fn fold32(acc: u32) -> u16 {
    let a = (acc & 0xffff) + (acc >> 16);
    ((a & 0xffff) + (a >> 16)) as u16
}

/// The Internet checksum of `data`: the one's complement of the folded sum.
#[inline]
pub fn checksum(data: &[u8]) -> u16 {
    !fold(add(0, data))
}

/// Partial sum of the IPv4 pseudo header for an upper-layer packet of `len` bytes.
#[inline]
pub fn pseudo_v4(src: &Ipv4Addr, dst: &Ipv4Addr, proto: u8, len: u16) -> u64 {
    let acc = add(0, &src.octets());
    let acc = add(acc, &dst.octets());
    acc + u64::from(proto) + u64::from(len)
}

/// Partial sum of the IPv6 pseudo header (RFC 8200 §8.1) for an upper-layer packet.
#[inline]
pub fn pseudo_v6(src: &Ipv6Addr, dst: &Ipv6Addr, proto: u8, len: u32) -> u64 {
    let acc = add(0, &src.octets());
    let acc = add(acc, &dst.octets());
    acc + u64::from(proto) + u64::from(len >> 16) + u64::from(len & 0xffff)
}

/// Updates checksum `hc` after a 16-bit field changed from `old` to `new` (RFC 1624 eqn. 3).
#[inline]
pub fn update16(hc: u16, old: u16, new: u16) -> u16 {
    let sum = u64::from(!hc) + u64::from(!old) + u64::from(new);
    !fold(sum)
}

/// Updates checksum `hc` after the bytes `old` were replaced by `new` (equal even lengths).
///
/// Lengths that differ or are odd are treated as zero-padded 16-bit words.
#[inline]
pub fn update_bytes(hc: u16, old: &[u8], new: &[u8]) -> u16 {
    // ~C' = ~C + ~m + m'  where ~m sums as (0xffff - word) per word.
    let old_sum = fold(add(0, old));
    let new_sum = fold(add(0, new));
    let sum = u64::from(!hc) + u64::from(!old_sum) + u64::from(new_sum);
    !fold(sum)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fold32_is_fold() {
        let edges = [
            0,
            1,
            0xffff,
            0x1_0000,
            0x1_fffe,
            0x1_ffff,
            0xffff_0000,
            0xffff_fffe,
        ];
        let mut x = 0x9e37_79b9u32;
        for v in edges
            .into_iter()
            .chain(
                std::iter::repeat_with(move || {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    x
                })
                .take(100_000),
            )
            .chain([u32::MAX])
        {
            assert_eq!(fold32(v), fold(u64::from(v)), "{v:#x}");
        }
    }

    #[test]
    fn rfc1071_example() {
        // RFC 1071 §3 example: words 0001 f203 f4f5 f6f7 sum to ddf2 (folded).
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold(add(0, &data)), 0xddf2);
        assert_eq!(checksum(&data), !0xddf2);
    }

    #[test]
    fn odd_length_pads_with_zero() {
        assert_eq!(fold(add(0, &[0x12, 0x34, 0x56])), 0x1234 + 0x5600);
    }

    #[test]
    fn incremental_matches_full_recompute() {
        let mut hdr = [
            0x45u8, 0x00, 0x00, 0x54, 0x12, 0x34, 0x40, 0x00, 0x40, 0x01, 0x00, 0x00, 10, 0, 0, 1,
            10, 0, 0, 2,
        ];
        let c = checksum(&hdr);
        hdr[10..12].copy_from_slice(&c.to_be_bytes());
        let old = u16::from_be_bytes([hdr[8], hdr[9]]);
        hdr[8] = 0x3f;
        let new = u16::from_be_bytes([hdr[8], hdr[9]]);
        let inc = update16(c, old, new);
        hdr[10..12].copy_from_slice(&[0, 0]);
        assert_eq!(inc, checksum(&hdr));
        let inc2 = update_bytes(c, &old.to_be_bytes(), &new.to_be_bytes());
        assert_eq!(inc2, inc);
    }
}
