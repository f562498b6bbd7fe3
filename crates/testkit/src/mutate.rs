//! A seeded frame mutator for robustness tests: bit flips, truncation,
//! field overwrites, length lies, rewritten EtherTypes and protocols, noise
//! and tails. The same seed gives the same mutations, on every machine
//! (xorshift64*; no global state), so a failure reproduces from its seed.

use std::ops::Range;

/// EtherTypes [`Mutator::set_ethertype`] picks from (IPv4, IPv6, ARP,
/// 802.1Q, 802.1ad, an unknown one).
pub const ETHERTYPES: [u16; 6] = [0x0800, 0x86dd, 0x0806, 0x8100, 0x88a8, 0x9999];

/// IP protocols [`Mutator::set_ip_protocol`] picks from (ICMP, IPIP, TCP,
/// UDP, IPv6, GRE, ESP, ICMPv6).
pub const PROTOCOLS: [u8; 8] = [1, 4, 6, 17, 41, 47, 50, 58];

/// What [`Mutator::mutate`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mutation {
    /// Replaced by 1–200 random bytes.
    Noise,
    /// Cut short (at least one byte left).
    Truncate,
    /// The outer EtherType rewritten.
    EtherType,
    /// The IP protocol / next header rewritten.
    Protocol,
    /// An IP or UDP length field (or the IPv4 header length) made up.
    LengthLie,
    /// A random byte of the IP header overwritten.
    Overwrite,
    /// One to four bits flipped anywhere.
    BitFlips,
    /// Random bytes appended.
    Tail,
}

impl Mutation {
    /// Every kind, in the order [`Mutator::mutate`] numbers them.
    pub const ALL: [Mutation; 8] = [
        Mutation::Noise,
        Mutation::Truncate,
        Mutation::EtherType,
        Mutation::Protocol,
        Mutation::LengthLie,
        Mutation::Overwrite,
        Mutation::BitFlips,
        Mutation::Tail,
    ];
}

/// A deterministic source of mutations.
#[derive(Debug, Clone)]
pub struct Mutator {
    state: u64,
}

/// Offset of the IP header in an untagged Ethernet frame.
const L3: usize = 14;

impl Mutator {
    /// A mutator whose choices follow from `seed` alone.
    pub fn new(seed: u64) -> Mutator {
        // SplitMix64 of the seed: nearby seeds give unrelated streams, and
        // the state is never 0 (which xorshift would keep forever).
        let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        Mutator {
            state: (z ^ (z >> 31)) | 1,
        }
    }

    /// The next pseudo-random number.
    pub fn next_u64(&mut self) -> u64 {
        self.state ^= self.state >> 12;
        self.state ^= self.state << 25;
        self.state ^= self.state >> 27;
        self.state.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// The low 8 bits of the next number.
    #[allow(clippy::cast_possible_truncation, reason = "takes the low bits")]
    fn next_u8(&mut self) -> u8 {
        self.next_u64() as u8
    }

    /// The low 16 bits of the next number.
    #[allow(clippy::cast_possible_truncation, reason = "takes the low bits")]
    fn next_u16(&mut self) -> u16 {
        self.next_u64() as u16
    }

    /// A number below `n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        assert!(n > 0, "below(0)");
        usize::try_from(self.next_u64() % n as u64).expect("below n")
    }

    /// A number in `r` (not empty).
    pub fn in_range(&mut self, r: Range<usize>) -> usize {
        r.start + self.below(r.end - r.start)
    }

    /// `len` random bytes.
    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next_u8()).collect()
    }

    /// Flips 1 to `max` random bits (nothing in an empty frame).
    pub fn flip_bits(&mut self, f: &mut [u8], max: usize) {
        if f.is_empty() {
            return;
        }
        for _ in 0..1 + self.below(max.max(1)) {
            let at = self.below(f.len());
            f[at] ^= 1 << self.below(8);
        }
    }

    /// Cuts the frame to a random length of at least 1 byte.
    pub fn truncate(&mut self, f: &mut Vec<u8>) {
        if f.len() > 1 {
            let len = 1 + self.below(f.len() - 1);
            f.truncate(len);
        }
    }

    /// Overwrites one byte at a random offset in `range` (clipped to the
    /// frame) with a random value.
    pub fn overwrite(&mut self, f: &mut [u8], range: Range<usize>) {
        let end = range.end.min(f.len());
        if range.start < end {
            let at = self.in_range(range.start..end);
            f[at] = self.next_u8();
        }
    }

    /// Rewrites the outer EtherType with one of [`ETHERTYPES`].
    pub fn set_ethertype(&mut self, f: &mut [u8]) {
        if f.len() >= 14 {
            let et = ETHERTYPES[self.below(ETHERTYPES.len())];
            f[12..14].copy_from_slice(&et.to_be_bytes());
        }
    }

    /// Rewrites the IP protocol (IPv4) or next header (IPv6) of an
    /// untagged frame with one of [`PROTOCOLS`].
    pub fn set_ip_protocol(&mut self, f: &mut [u8]) {
        let at = match f.get(L3).map(|b| b >> 4) {
            Some(6) => L3 + 6,
            _ => L3 + 9,
        };
        if let Some(b) = f.get_mut(at) {
            *b = PROTOCOLS[self.below(PROTOCOLS.len())];
        }
    }

    /// Makes up a length: the IPv4 header length and total length, the IPv6
    /// payload length, or the UDP length of an untagged frame.
    pub fn lie_about_length(&mut self, f: &mut [u8]) {
        let v6 = f.get(L3).is_some_and(|b| b >> 4 == 6);
        let at = match (self.below(3), v6) {
            (0, false) => {
                // Version and IHL: a header length from 0 to 60 bytes.
                if let Some(b) = f.get_mut(L3) {
                    *b = (*b & 0xf0) | (self.next_u8() & 0x0f);
                }
                return;
            }
            (1, false) => L3 + 2,
            (1 | 0, true) => L3 + 4,
            (_, false) => L3 + 20 + 4,
            (_, true) => L3 + 40 + 4,
        };
        if at + 2 <= f.len() {
            let v = self.next_u16();
            f[at..at + 2].copy_from_slice(&v.to_be_bytes());
        }
    }

    /// 1 to `max` random bytes.
    pub fn noise(&mut self, max: usize) -> Vec<u8> {
        let len = 1 + self.below(max.max(1));
        self.bytes(len)
    }

    /// Appends 0 to `max` - 1 random bytes.
    pub fn append_tail(&mut self, f: &mut Vec<u8>, max: usize) {
        let n = self.below(max.max(1));
        let tail = self.bytes(n);
        f.extend_from_slice(&tail);
    }

    /// Grows the frame to a random length in `len` with `fill` (jumbo frames).
    pub fn grow(&mut self, f: &mut Vec<u8>, len: Range<usize>, fill: u8) {
        let n = self.in_range(len);
        f.resize(n.max(f.len()), fill);
    }

    /// One random mutation of [`Mutation::ALL`], equally likely; returns
    /// which. A noise frame replaces `f`.
    pub fn mutate(&mut self, f: &mut Vec<u8>) -> Mutation {
        let m = Mutation::ALL[self.below(Mutation::ALL.len())];
        match m {
            Mutation::Noise => *f = self.noise(200),
            Mutation::Truncate => self.truncate(f),
            Mutation::EtherType => self.set_ethertype(f),
            Mutation::Protocol => self.set_ip_protocol(f),
            Mutation::LengthLie => self.lie_about_length(f),
            Mutation::Overwrite => self.overwrite(f, L3..L3 + 40),
            Mutation::BitFlips => self.flip_bits(f, 4),
            Mutation::Tail => self.append_tail(f, 64),
        }
        m
    }

    /// `n` mutants of `base` (taken in turn), one [`Mutator::mutate`] each.
    pub fn mutants<F: AsRef<[u8]>>(&mut self, base: &[F], n: usize) -> Vec<Vec<u8>> {
        assert!(!base.is_empty(), "no frames to mutate");
        (0..n)
            .map(|i| {
                let mut f = base[i % base.len()].as_ref().to_vec();
                self.mutate(&mut f);
                f
            })
            .collect()
    }
}
