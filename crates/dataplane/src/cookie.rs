//! The cookies of gateway flows that no flow entry stores (M32, M53).
//!
//! A gateway flow with an entry carries the entry's random cookie. One forwarded without an
//! entry (the table full, the worker over its new-entry budget) and every ICMP error about a
//! flow carry a cookie derived here instead, so that every packet of such a flow carries the
//! same one and the return path can check it without state. Derived with SipHash-2-4, a
//! pseudo-random function, under a 128-bit key drawn from the OS when the process starts
//! ([`CookieKey::random`]): without the key, cookies of different inputs are unrelated, so an
//! appliance that holds (or recovers, by trying) the cookie of one flow learns nothing about the
//! cookie of any other — not even of the same flow's other direction — and the key cannot be
//! worked back from any number of cookies. (A mixing function of the public flow hash, as
//! before, was inverted from three cookies.)
//!
//! The input binds what the return path must prove:
//! - a packet's cookie: the flow's key as the table stores it (symmetric, with its gateway
//!   endpoint's tag, so tenants never share one) and the packet's **direction**, so a cookie of
//!   packets one way does not admit packets the other way;
//! - an ICMP error's cookie: the quoted flow's key and direction and the error's own source,
//!   destination and length, so an appliance can hand back the error it was given, not one of
//!   its own making.
//!
//! A return is dropped before any cookie is worked out when its appliance is over its budget of
//! mismatches ([`crate::pipeline`]), so guessing 32-bit cookies is bounded in time too.

use siphasher::sip::SipHasher24;
use std::hash::Hasher;

/// Domain of a flow packet's cookie.
const FLOW: u8 = 1;
/// Domain of an ICMP error's cookie.
const ICMP_ERROR: u8 = 2;

/// The secret behind stateless cookies: a SipHash-2-4 key.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct CookieKey {
    k0: u64,
    k1: u64,
}

impl std::fmt::Debug for CookieKey {
    // Never printed: a log line or a status dump must not give it away.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CookieKey(..)")
    }
}

impl Default for CookieKey {
    /// The all-zero key of tests and offline replays (whose output must not depend on a
    /// random key), never of a running daemon.
    fn default() -> Self {
        Self::fixed(0, 0)
    }
}

impl CookieKey {
    /// A key from the operating system's random source.
    pub fn random() -> Result<Self, getrandom::Error> {
        let mut k = [0u8; 16];
        getrandom::fill(&mut k)?;
        let (a, b) = k.split_at(8);
        let word = |s: &[u8]| {
            let mut w = [0u8; 8];
            w.copy_from_slice(s);
            u64::from_le_bytes(w)
        };
        Ok(Self::fixed(word(a), word(b)))
    }

    /// A given key (tests, replays).
    #[must_use]
    pub const fn fixed(k0: u64, k1: u64) -> Self {
        Self { k0, k1 }
    }

    fn start(&self, domain: u8, key: &[u64; 5], reversed: bool) -> SipHasher24 {
        let mut h = SipHasher24::new_with_keys(self.k0, self.k1);
        h.write_u8(domain);
        for w in key {
            h.write_u64(*w);
        }
        h.write_u8(u8::from(reversed));
        h
    }

    /// The cookie of a packet of the flow whose table key is `key` (symmetric, tagged),
    /// travelling against the key's order if `reversed`.
    #[must_use]
    pub fn flow(&self, key: &[u64; 5], reversed: bool) -> u32 {
        fold(self.start(FLOW, key, reversed).finish())
    }

    /// The cookie of an ICMP error from `src` to `dst`, `ip_len` bytes long, about a packet of
    /// the flow `key` that travelled against the key's order if `reversed` (addresses as 16
    /// bytes, IPv4 mapped).
    #[must_use]
    pub fn icmp_error(
        &self,
        key: &[u64; 5],
        reversed: bool,
        (src, dst): (&[u8; 16], &[u8; 16]),
        ip_len: u32,
    ) -> u32 {
        let mut h = self.start(ICMP_ERROR, key, reversed);
        h.write(src);
        h.write(dst);
        h.write_u32(ip_len);
        fold(h.finish())
    }
}

/// 32 bits of a 64-bit PRF output (any 32 of them are as good).
#[allow(clippy::cast_possible_truncation, reason = "keeps the high half")]
fn fold(x: u64) -> u32 {
    (x >> 32) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: [u64; 5] = [
        0,
        0xffff_0a00_0001,
        0,
        0xffff_0a00_0002,
        0x1234_0050_0600_0007,
    ];

    #[test]
    fn a_cookie_depends_on_the_key_the_flow_its_direction_and_its_tag() {
        let k = CookieKey::fixed(1, 2);
        let c = k.flow(&KEY, false);
        assert_eq!(c, k.flow(&KEY, false));
        assert_ne!(c, k.flow(&KEY, true), "the other direction");
        assert_ne!(c, CookieKey::fixed(1, 3).flow(&KEY, false), "another key");
        let mut other_tag = KEY;
        other_tag[4] ^= 1;
        assert_ne!(c, k.flow(&other_tag, false), "another gateway endpoint");
    }

    #[test]
    fn an_icmp_error_cookie_binds_its_addresses_and_length() {
        let k = CookieKey::fixed(5, 6);
        let (a, b) = ([1u8; 16], [2u8; 16]);
        let c = k.icmp_error(&KEY, false, (&a, &b), 576);
        assert_eq!(c, k.icmp_error(&KEY, false, (&a, &b), 576));
        assert_ne!(c, k.icmp_error(&KEY, false, (&b, &a), 576));
        assert_ne!(c, k.icmp_error(&KEY, false, (&a, &a), 576));
        assert_ne!(c, k.icmp_error(&KEY, false, (&a, &b), 577));
        assert_ne!(c, k.icmp_error(&KEY, true, (&a, &b), 576));
        assert_ne!(c, k.flow(&KEY, false));
    }

    #[test]
    fn random_keys_differ_and_are_never_printed() {
        let (a, b) = (CookieKey::random().unwrap(), CookieKey::random().unwrap());
        assert_ne!(a, b);
        assert_eq!(format!("{a:?}"), "CookieKey(..)");
    }
}
