//! Property tests: encode → decode round trips, and any change to a datagram
//! (a flipped bit, a cut, an extension, another key) rejects it.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

use flowsync::{
    Datagram, DecodeError, Header, Kind, MAX_DATAGRAM, PushError, Rate, SyncEntry, SyncKey, Writer,
};
use proptest::collection::vec;
use proptest::prelude::*;
use wire::flow::{FlowKey, with_service_tag, without_service_tag};

/// The table hash of a flow-table key (the data plane's).
fn key_hash(key: &[u64; 5]) -> u64 {
    wire::flow::hash_words(&without_service_tag(*key), 0)
}

/// [`flowsync::decode`] with the data plane's key check.
fn decode(bytes: &[u8], key: &SyncKey) -> Result<Datagram, DecodeError> {
    flowsync::decode(bytes, key, |k, h| {
        FlowKey::unpack(&without_service_tag(*k)).is_some() && key_hash(k) == h
    })
}

fn flow_key() -> impl Strategy<Value = FlowKey> {
    let v4 =
        || any::<[u8; 4]>().prop_map(|a| std::net::Ipv4Addr::from(a).to_ipv6_mapped().octets());
    let v6 = || {
        any::<[u8; 16]>().prop_filter("not v4-mapped", |a| {
            std::net::Ipv6Addr::from(*a).to_ipv4_mapped().is_none()
        })
    };
    prop_oneof![
        (v4(), v4(), any::<u8>(), any::<u16>(), any::<u16>())
            .prop_map(|(s, d, p, sp, dp)| FlowKey::five(s, d, p, sp, dp)),
        (v6(), v6(), any::<u8>(), any::<u16>(), any::<u16>())
            .prop_map(|(s, d, p, sp, dp)| FlowKey::five(s, d, p, sp, dp)),
        (v4(), v4(), any::<u8>()).prop_map(|(s, d, p)| FlowKey::three(s, d, p)),
        (v6(), v6()).prop_map(|(s, d)| FlowKey::two(s, d)),
    ]
}

fn entry() -> impl Strategy<Value = SyncEntry> {
    (
        flow_key(),
        any::<u16>(),
        "[a-z0-9.:\\[\\]-]{1,60}",
        any::<u32>(),
        any::<u8>(),
        any::<u32>(),
    )
        .prop_filter_map("packs", |(k, tag, identity, cookie, flags, age_ms)| {
            FlowKey::unpack(&k.pack())?;
            let key = with_service_tag(k.pack(), tag);
            Some(SyncEntry {
                key,
                hash: key_hash(&key),
                identity,
                cookie,
                flags,
                age_ms,
            })
        })
}

fn rate() -> impl Strategy<Value = Rate> {
    (
        "[a-zA-Z0-9._-]{1,63}",
        "[a-z0-9.:\\[\\]-]{1,60}",
        any::<u64>(),
    )
        .prop_map(|(service, identity, milli_pps)| Rate {
            service,
            identity,
            milli_pps,
        })
}

/// Writes as many of `rates` as fit; returns the datagram and those written.
fn write_rates(h: Header, rates: &[Rate], key: &SyncKey) -> (Vec<u8>, Vec<Rate>) {
    write_with(h, rates, key, Writer::push_rate)
}

fn sync_key() -> impl Strategy<Value = SyncKey> {
    vec(any::<u8>(), 16..=64).prop_map(|b| SyncKey::new(&b).unwrap())
}

fn header(kind: Kind) -> impl Strategy<Value = Header> {
    (any::<u64>(), any::<u64>()).prop_map(move |(sender, sequence)| Header {
        kind,
        sender,
        sequence,
    })
}

/// Writes as many of `entries` as fit; returns the datagram and those written.
fn write(h: Header, entries: &[SyncEntry], key: &SyncKey) -> (Vec<u8>, Vec<SyncEntry>) {
    write_with(h, entries, key, Writer::push)
}

/// Writes as many of `items` as fit with `push`; the datagram and those
/// written.
fn write_with<T: Clone>(
    h: Header,
    items: &[T],
    key: &SyncKey,
    push: fn(&mut Writer, &T) -> Result<(), PushError>,
) -> (Vec<u8>, Vec<T>) {
    let mut w = Writer::new(h);
    let mut written = Vec::new();
    for item in items {
        match push(&mut w, item) {
            Ok(()) => written.push(item.clone()),
            Err(PushError::Full) => break,
            Err(e) => panic!("{e}"),
        }
    }
    (w.finish(key), written)
}

proptest! {
    #[test]
    fn round_trip(h in header(Kind::Entries), entries in vec(entry(), 0..40), key in sync_key()) {
        let (d, written) = write(h, &entries, &key);
        prop_assert!(d.len() <= MAX_DATAGRAM);
        let got = decode(&d, &key).unwrap();
        prop_assert_eq!(got.header, h);
        prop_assert_eq!(&got.entries, &written);
        // Only a full datagram stops early.
        if let Some(next) = entries.get(written.len()) {
            prop_assert!(d.len() + next.wire_len() > MAX_DATAGRAM);
        }
    }

    #[test]
    fn rates_round_trip(h in header(Kind::Rates), rates in vec(rate(), 0..40), key in sync_key()) {
        let (d, written) = write_rates(h, &rates, &key);
        prop_assert!(d.len() <= MAX_DATAGRAM);
        let got = decode(&d, &key).unwrap();
        prop_assert_eq!(got.header, h);
        prop_assert_eq!(&got.rates, &written);
        prop_assert!(got.entries.is_empty());
        if let Some(next) = rates.get(written.len()) {
            prop_assert!(d.len() + next.wire_len() > MAX_DATAGRAM);
        }
        // A rate datagram takes no entries, an entries one no rates.
        let mut w = Writer::new(h);
        prop_assert_eq!(w.push(&SyncEntry {
            key: [0; 5], hash: 0, identity: "x".into(), cookie: 0, flags: 0, age_ms: 0,
        }), Err(PushError::NotEntries));
        let mut w = Writer::new(Header { kind: Kind::Entries, ..h });
        if let Some(r) = rates.first() {
            prop_assert_eq!(w.push_rate(r), Err(PushError::NotEntries));
        }
    }

    #[test]
    fn a_rate_in_pps_survives_the_trip(pps in 0.0f64..1e9) {
        let r = Rate::new("web", "10.0.0.1:80", pps);
        prop_assert!((r.pps() - pps).abs() <= 0.0005 + pps * 1e-12);
    }

    #[test]
    fn dump_request_and_done_round_trip(
        kind in prop_oneof![Just(Kind::RequestDump), Just(Kind::DumpDone), Just(Kind::Leaving)],
        seq in any::<u64>(),
        key in sync_key(),
    ) {
        let h = Header { kind, sender: 7, sequence: seq };
        let d = Writer::new(h).finish(&key);
        let got = decode(&d, &key).unwrap();
        prop_assert_eq!(got.header, h);
        prop_assert!(got.entries.is_empty());
    }

    #[test]
    fn any_flipped_bit_is_rejected(
        h in header(Kind::Entries),
        entries in vec(entry(), 0..8),
        rates in vec(rate(), 0..8),
        as_rates in any::<bool>(),
        key in sync_key(),
        at in any::<prop::sample::Index>(),
        bit in 0u8..8,
    ) {
        let mut d = if as_rates {
            write_rates(Header { kind: Kind::Rates, ..h }, &rates, &key).0
        } else {
            write(h, &entries, &key).0
        };
        let i = at.index(d.len());
        d[i] ^= 1 << bit;
        prop_assert_eq!(decode(&d, &key), Err(DecodeError::Mac));
    }

    #[test]
    fn cut_or_extended_is_rejected(
        h in header(Kind::Entries),
        entries in vec(entry(), 1..8),
        key in sync_key(),
        cut in any::<prop::sample::Index>(),
        extra in vec(any::<u8>(), 1..16),
    ) {
        let (d, _) = write(h, &entries, &key);
        let n = cut.index(d.len());
        prop_assert!(decode(&d[..n], &key).is_err());
        let mut longer = d.clone();
        longer.extend_from_slice(&extra);
        prop_assert!(decode(&longer, &key).is_err());
    }

    #[test]
    fn another_key_is_rejected(
        h in header(Kind::Entries),
        entries in vec(entry(), 0..8),
        key in sync_key(),
        other in sync_key(),
    ) {
        prop_assume!(key != other);
        let (d, _) = write(h, &entries, &key);
        prop_assert_eq!(decode(&d, &other), Err(DecodeError::Mac));
    }

    #[test]
    fn arbitrary_bytes_never_decode(bytes in vec(any::<u8>(), 0..1500), key in sync_key()) {
        prop_assert!(decode(&bytes, &key).is_err());
    }
}

/// A validly signed datagram whose content is wrong in each way the parser
/// checks: the MAC alone does not make it accepted.
#[test]
fn signed_but_malformed_is_rejected() {
    use hmac_sign::sign;
    let key = SyncKey::new(&[7; 32]).unwrap();
    let k = FlowKey::five([0; 16], [1; 16], 6, 1, 2);
    let good_key = with_service_tag(k.pack(), 3);
    let e = SyncEntry {
        key: good_key,
        hash: key_hash(&good_key),
        identity: "10.0.0.1:80".into(),
        cookie: 9,
        flags: 4,
        age_ms: 5,
    };
    let h = Header {
        kind: Kind::Entries,
        sender: 1,
        sequence: 2,
    };
    let (d, _) = write(h, std::slice::from_ref(&e), &key);
    let body = &d[..d.len() - 32];
    let check = |mut b: Vec<u8>, f: &dyn Fn(&mut Vec<u8>), want: DecodeError| {
        f(&mut b);
        let signed = sign(&b, &[7; 32]);
        assert_eq!(decode(&signed, &key), Err(want));
    };
    check(body.to_vec(), &|b| b[0] = b'X', DecodeError::Magic);
    check(body.to_vec(), &|b| b[4] = 2, DecodeError::Version);
    check(body.to_vec(), &|b| b[5] = 6, DecodeError::Kind);
    // Leaving carries nothing.
    check(body.to_vec(), &|b| b[5] = 5, DecodeError::Kind);
    // Read as rates, the entry's bytes do not add up.
    check(body.to_vec(), &|b| b[5] = 4, DecodeError::Malformed);
    // A dump request or its end carries no entries.
    check(body.to_vec(), &|b| b[5] = 3, DecodeError::Kind);
    check(body.to_vec(), &|b| b[5] = 2, DecodeError::Kind);
    check(body.to_vec(), &|b| b[7] = 2, DecodeError::Malformed);
    check(body.to_vec(), &|b| b[7] = 0, DecodeError::Malformed);
    // The hash of another key.
    check(body.to_vec(), &|b| b[24 + 40] ^= 1, DecodeError::Key);
    // Identity length 0 and beyond the end.
    check(body.to_vec(), &|b| b[24 + 57] = 0, DecodeError::Malformed);
    check(body.to_vec(), &|b| b[24 + 57] = 100, DecodeError::Malformed);
    // Not UTF-8.
    check(
        body.to_vec(),
        &|b| b[24 + 58] = 0xff,
        DecodeError::Malformed,
    );
    // No packed flow: an unknown tuple kind in the last word.
    check(body.to_vec(), &|b| b[24 + 32 + 5] = 7, DecodeError::Key);
    // Unsigned it is a MAC failure; the right MAC makes it valid.
    assert_eq!(
        decode(&sign(body, &[7; 32]), &key).unwrap().entries,
        vec![e]
    );
}

/// Signed rate datagrams wrong in each way the parser checks.
#[test]
fn signed_but_malformed_rates_are_rejected() {
    use hmac_sign::sign;
    let key = SyncKey::new(&[7; 32]).unwrap();
    let r = Rate::new("web", "10.0.0.1:80", 12.5);
    assert_eq!(r.milli_pps, 12_500);
    let h = Header {
        kind: Kind::Rates,
        sender: 1,
        sequence: 2,
    };
    let (d, _) = write_rates(h, std::slice::from_ref(&r), &key);
    let body = &d[..d.len() - 32];
    let check = |f: &dyn Fn(&mut Vec<u8>), want: DecodeError| {
        let mut b = body.to_vec();
        f(&mut b);
        assert_eq!(decode(&sign(&b, &[7; 32]), &key), Err(want));
    };
    // Service name: length 0, beyond the end, not UTF-8.
    check(&|b| b[24 + 8] = 0, DecodeError::Malformed);
    check(&|b| b[24 + 8] = 200, DecodeError::Malformed);
    check(&|b| b[24 + 9] = 0xff, DecodeError::Malformed);
    // Identity length beyond the end; a count of 2.
    check(&|b| b[24 + 12] = 40, DecodeError::Malformed);
    check(&|b| b[7] = 2, DecodeError::Malformed);
    // One byte too many.
    check(&|b| b.push(0), DecodeError::Malformed);
    assert_eq!(decode(&sign(body, &[7; 32]), &key).unwrap().rates, vec![r]);
    // Rates beyond the cap are read as the cap.
    let huge = Rate {
        milli_pps: u64::MAX,
        ..Rate::new("web", "a", 0.0)
    };
    assert!((huge.pps() - flowsync::MAX_RATE_PPS).abs() < 1.0);
    assert_eq!(Rate::new("web", "a", f64::NAN).milli_pps, 0);
    assert_eq!(Rate::new("web", "a", -3.0).milli_pps, 0);
}

mod hmac_sign {
    use hmac::{Hmac, Mac};
    pub fn sign(body: &[u8], key: &[u8]) -> Vec<u8> {
        let mut m = Hmac::<sha2::Sha256>::new_from_slice(key).unwrap();
        m.update(body);
        let mut out = body.to_vec();
        out.extend_from_slice(&m.finalize().into_bytes());
        out
    }
}
