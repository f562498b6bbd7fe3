//! Where a key lives is the table's secret.
//!
//! The flow hash that picks a flow's backend (`spillway-flow-v1`) is public and must be: every
//! node of a cluster computes it alike. Placing entries by it would let anyone who can send
//! packets aim spoofed flows at one chosen pair of buckets (and the public hash has structural
//! collisions besides: an IPv6 source whose upper half equals its first constant zeroes its
//! first multiplication, so the lower half never counts). So the table places keys by a hash of
//! its own, keyed per table with 512 bits from the OS ([`PlacementKey::random`]).
//!
//! The keyed hash has the shape of `spillway-flow-v1` — three folded 64×64→128-bit
//! multiplications over the five key words and a final fold — with every constant replaced by
//! a secret word, each key word masked by its own: a multiplication can only be zeroed, or a
//! pair of inputs made to collide in it, by someone who knows the words it is masked with. Its
//! output never leaves the process (no packet carries it, no answer depends on it), so the
//! secret cannot be worked out from outputs either. It costs what the public hash costs, about
//! 20 instructions; SipHash-1-3 over the same 40 bytes cost 160 a packet
//! (`perf/budget.sh gue`), a quarter of the whole per-packet budget. Cookies, which an appliance
//! sees, are a different matter: they come from SipHash-2-4 (the data plane's `cookie` module).
//!
//! Deterministic users (offline replays, tests, benchmarks) give a fixed key
//! ([`PlacementKey::fixed`]).

use crate::FlowKey;

/// The secret of a table's placement hash ([`crate::FlowTable::hash`]).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct PlacementKey {
    s: [u64; 8],
}

impl std::fmt::Debug for PlacementKey {
    // Never printed: a log line must not give the key away.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PlacementKey(..)")
    }
}

/// 64×64→128-bit multiply, folded to 64 bits by xor of the halves.
#[inline(always)]
#[allow(
    clippy::cast_possible_truncation,
    reason = "splits the product in halves"
)]
const fn fold_mul(a: u64, b: u64) -> u64 {
    let r = (a as u128).wrapping_mul(b as u128);
    (r as u64) ^ ((r >> 64) as u64)
}

impl PlacementKey {
    /// A key from the operating system's random source.
    pub fn random() -> Result<Self, getrandom::Error> {
        let mut b = [0u8; 64];
        getrandom::fill(&mut b)?;
        let mut s = [0u64; 8];
        for (w, c) in s.iter_mut().zip(b.chunks_exact(8)) {
            let mut x = [0u8; 8];
            x.copy_from_slice(c);
            *w = u64::from_le_bytes(x);
        }
        Ok(Self { s })
    }

    /// A key derived from two words: for deterministic runs (replays, tests, benchmarks),
    /// never for a table that faces live traffic.
    #[must_use]
    pub const fn fixed(k0: u64, k1: u64) -> Self {
        // SplitMix64 from the two words: distinct, well-mixed secret words.
        let mut s = [0u64; 8];
        let mut x = k0 ^ k1.rotate_left(32);
        let mut i = 0;
        while i < 8 {
            x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            s[i] = z ^ (z >> 31);
            i += 1;
        }
        Self { s }
    }

    /// The placement hash of `key` under this key.
    #[inline]
    #[must_use]
    pub fn hash(&self, key: &FlowKey) -> u64 {
        let (w, s) = (&key.0, &self.s);
        let a = fold_mul(w[0] ^ s[0], w[1] ^ s[1]);
        let b = fold_mul(w[2] ^ s[2], w[3] ^ s[3]);
        let c = fold_mul(w[4] ^ s[4], a ^ b.rotate_left(32) ^ s[5]);
        fold_mul(c ^ s[6], s[7]) ^ c
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
            for bit in [0, 17, 40, 63] {
                let mut other = k;
                other.0[i] ^= 1 << bit;
                assert_ne!(a.hash(&k), a.hash(&other), "word {i} bit {bit}");
            }
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
        // public hash. Placed by the table's own hash they spread evenly over 64 buckets.
        const K0: u64 = 0x243f_6a88_85a3_08d3;
        let key = |lo: u64| FlowKey([K0, lo, 0x2001_0db8_0000_0000, 1, 6 << 24]);
        for p in [PlacementKey::fixed(7, 11), PlacementKey::random().unwrap()] {
            let mut per_bucket = [0u32; 64];
            for i in 0..6400 {
                per_bucket[(p.hash(&key(i)) >> 58) as usize] += 1;
            }
            // 100 expected per bucket; a bucket pair attacked would hold them all.
            assert!(
                per_bucket.iter().all(|&n| (50..=150).contains(&n)),
                "{per_bucket:?}"
            );
        }
    }
}
