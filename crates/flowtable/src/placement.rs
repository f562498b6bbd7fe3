//! Where a key lives is the table's secret.
//!
//! The flow hash that picks a flow's backend (`spillway-flow-v1`) is public and must be: every
//! node of a cluster computes it alike. Placing entries by it would let anyone who can send
//! packets aim spoofed flows at one chosen pair of buckets (and the public hash has structural
//! collisions besides: an IPv6 source whose upper half zeroes its first multiplication makes the
//! lower half irrelevant). So the table places keys by a hash of its own: SipHash-1-3 over the
//! 40-byte key under a 128-bit key drawn from the OS for each table ([`PlacementKey::random`]).
//! SipHash is a pseudo-random function: without the key, which never leaves the process, the
//! buckets of a set of flows cannot be chosen or predicted, and observing where some keys went
//! (which no packet reveals anyway) says nothing about where others go.
//!
//! SipHash-1-3 (one compression round, three finalisation rounds) is the variant Rust's own
//! `HashMap` uses against hash flooding: it needs the key to be secret, not the outputs, which
//! here are never shown. Deterministic users (offline replays, tests, benchmarks) give a fixed
//! key ([`PlacementKey::fixed`]).

use siphasher::sip::SipHasher13;
use std::hash::Hasher;

use crate::FlowKey;

/// The 128-bit key of a table's placement hash ([`crate::FlowTable::hash`]).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct PlacementKey {
    k0: u64,
    k1: u64,
}

impl std::fmt::Debug for PlacementKey {
    // Never printed: a log line must not give the key away.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PlacementKey(..)")
    }
}

impl PlacementKey {
    /// A key from the operating system's random source.
    pub fn random() -> Result<Self, getrandom::Error> {
        let mut b = [0u8; 16];
        getrandom::fill(&mut b)?;
        let (lo, hi) = b.split_at(8);
        let word = |s: &[u8]| {
            let mut w = [0u8; 8];
            w.copy_from_slice(s);
            u64::from_le_bytes(w)
        };
        Ok(Self::fixed(word(lo), word(hi)))
    }

    /// A given key: for deterministic runs (replays, tests, benchmarks), never for a table
    /// that faces live traffic.
    #[must_use]
    pub const fn fixed(k0: u64, k1: u64) -> Self {
        Self { k0, k1 }
    }

    /// The placement hash of `key` under this key.
    #[inline]
    #[must_use]
    pub fn hash(&self, key: &FlowKey) -> u64 {
        let mut h = SipHasher13::new_with_keys(self.k0, self.k1);
        for w in key.0 {
            h.write_u64(w);
        }
        h.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_depends_on_the_key_and_on_every_word() {
        let a = PlacementKey::fixed(1, 2);
        let b = PlacementKey::fixed(1, 3);
        let k = FlowKey([1, 2, 3, 4, 5]);
        assert_eq!(a.hash(&k), a.hash(&k));
        assert_ne!(a.hash(&k), b.hash(&k));
        for i in 0..5 {
            let mut other = k;
            other.0[i] ^= 1 << 40;
            assert_ne!(a.hash(&k), a.hash(&other), "word {i}");
        }
    }

    #[test]
    fn random_keys_differ_and_are_never_printed() {
        let (a, b) = (
            PlacementKey::random().unwrap(),
            PlacementKey::random().unwrap(),
        );
        assert_ne!(a, b);
        assert_eq!(format!("{a:?}"), "PlacementKey(..)");
    }

    #[test]
    fn keys_the_public_hash_confuses_are_placed_apart() {
        // Under the public `spillway-flow-v1` hash, an IPv6 source whose upper word is the
        // algorithm's first constant makes the lower word irrelevant: these keys all share one
        // public hash. Placed by the table's own hash they spread.
        const K0: u64 = 0x243f_6a88_85a3_08d3;
        let key = |lo: u64| FlowKey([K0, lo, 0x2001_0db8_0000_0000, 1, 6 << 24]);
        let p = PlacementKey::fixed(7, 11);
        let mut hashes: Vec<u64> = (0..1000).map(|i| p.hash(&key(i))).collect();
        hashes.sort_unstable();
        hashes.dedup();
        assert_eq!(hashes.len(), 1000);
    }
}
