//! Property tests: encode → decode round trips, any change to a datagram (a
//! flipped bit, a cut, an extension, another key) rejects it, nothing of
//! the body is in clear, and the replay window takes each sequence once.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

use flowsync::window::{Replay, ReplayWindow, WINDOW};
use flowsync::{
    Cipher, Datagram, DecodeError, HEADER_LEN, Header, Kind, MAX_DATAGRAM, PushError, Rate, Stamp,
    SyncEntry, SyncKey, TAG_LEN, Writer,
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
    flowsync::decode(bytes, &Cipher::new(key), |k, h| {
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

/// Any stamp.
fn stamp() -> impl Strategy<Value = Stamp> {
    any::<[u64; 4]>().prop_map(|[sender, epoch, peer_epoch, sequence]| Stamp {
        sender,
        epoch,
        peer_epoch,
        sequence,
    })
}

fn sync_key() -> impl Strategy<Value = SyncKey> {
    vec(any::<u8>(), 16..=64).prop_map(|b| SyncKey::new(&b).unwrap())
}

fn header(kind: Kind) -> impl Strategy<Value = Header> {
    stamp().prop_map(move |stamp| Header { kind, stamp })
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
    let mut w = Writer::new(h.kind);
    let mut written = Vec::new();
    for item in items {
        match push(&mut w, item) {
            Ok(()) => written.push(item.clone()),
            Err(PushError::Full) => break,
            Err(e) => panic!("{e}"),
        }
    }
    (w.seal(&h.stamp, &Cipher::new(key)), written)
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
        let mut w = Writer::new(h.kind);
        prop_assert_eq!(w.push(&SyncEntry {
            key: [0; 5], hash: 0, identity: "x".into(), cookie: 0, flags: 0, age_ms: 0,
        }), Err(PushError::NotEntries));
        let mut w = Writer::new(Kind::Entries);
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
        stamp in stamp(),
        key in sync_key(),
    ) {
        let h = Header { kind, stamp };
        let d = Writer::new(kind).seal(&stamp, &Cipher::new(&key));
        prop_assert_eq!(d.len(), HEADER_LEN + TAG_LEN);
        let got = decode(&d, &key).unwrap();
        prop_assert_eq!(got.header, h);
        prop_assert!(got.entries.is_empty() && got.challenge.is_none());
    }

    #[test]
    fn hellos_round_trip(
        reply in any::<bool>(),
        challenge in any::<[u8; 16]>(),
        stamp in stamp(),
        key in sync_key(),
    ) {
        let kind = if reply { Kind::HelloReply } else { Kind::Hello };
        let d = Writer::hello(kind, &challenge).unwrap().seal(&stamp, &Cipher::new(&key));
        let got = decode(&d, &key).unwrap();
        prop_assert_eq!(got.header, Header { kind, stamp });
        prop_assert_eq!(got.challenge, Some(challenge));
        prop_assert!(Writer::hello(Kind::Entries, &challenge).is_none());
    }

    /// The body is encrypted: no entry's cookie or identity, nor the
    /// challenge, appears in the datagram.
    #[test]
    fn nothing_of_the_body_is_in_clear(
        h in header(Kind::Entries),
        mut e in entry(),
        cookie in 0x0100_0000u32..,
        key in sync_key(),
    ) {
        e.cookie = cookie;
        e.identity = "10.200.30.40:8080".into();
        let (d, written) = write(h, std::slice::from_ref(&e), &key);
        prop_assert_eq!(written.len(), 1);
        let has = |needle: &[u8]| d.windows(needle.len()).any(|w| w == needle);
        prop_assert!(!has(&cookie.to_be_bytes()));
        prop_assert!(!has(e.identity.as_bytes()));
        prop_assert!(!has(&e.key[0].to_be_bytes()));
        let c = [0xa5; 16];
        let hello = Writer::hello(Kind::Hello, &c).unwrap().seal(&h.stamp, &Cipher::new(&key));
        prop_assert!(!hello.windows(16).any(|w| w == c));
    }

    /// The window takes every sequence at most once, and exactly those a
    /// model (every sequence seen, and the highest) says are new and not
    /// too far below the highest.
    #[test]
    fn the_window_takes_each_sequence_once(
        start in 0u64..5000,
        steps in vec(prop_oneof![0u64..3000, (0u64..40).prop_map(|d| d + 2990)], 1..400),
    ) {
        let mut w = ReplayWindow::starting_at(start);
        let mut seen: std::collections::HashSet<u64> = (start.saturating_sub(WINDOW)..=start).collect();
        let mut top = start;
        for s in steps {
            let want = if s + WINDOW <= top {
                Err(Replay::TooOld)
            } else if seen.contains(&s) || s <= start {
                Err(Replay::Repeated)
            } else {
                Ok(())
            };
            prop_assert_eq!(w.accept(s), want, "sequence {} (top {})", s, top);
            if want.is_ok() {
                seen.insert(s);
                top = top.max(s);
            }
            prop_assert_eq!(w.top(), top);
        }
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
        // Magic and version are read before the tag: flipped, they are
        // what is wrong; anything else fails the tag.
        let want = match i {
            0..4 => DecodeError::Magic,
            4 => DecodeError::Version,
            _ => DecodeError::Auth,
        };
        prop_assert_eq!(decode(&d, &key), Err(want));
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
        prop_assert_eq!(decode(&d, &other), Err(DecodeError::Auth));
    }

    #[test]
    fn arbitrary_bytes_never_decode(bytes in vec(any::<u8>(), 0..1500), key in sync_key()) {
        prop_assert!(decode(&bytes, &key).is_err());
    }
}

/// Bytes of the header, where the body starts.
const H: usize = HEADER_LEN;

/// `body` (a datagram's header and body, in clear) sealed with `key`.
fn sign(body: &[u8], key: &[u8]) -> Vec<u8> {
    let cipher = Cipher::new(&SyncKey::new(key).unwrap());
    let head: [u8; HEADER_LEN] = body[..HEADER_LEN].try_into().unwrap();
    cipher.seal_raw(&head, &body[HEADER_LEN..])
}

/// A datagram `d` (sealed with `key`) in clear: header and body.
fn unsealed(d: &[u8], key: &SyncKey) -> Vec<u8> {
    let got = decode(d, key).unwrap();
    let w = got.writer().unwrap();
    let mut b = w.header_bytes(&got.header.stamp).to_vec();
    b.extend_from_slice(w.body());
    b
}

/// A validly sealed datagram whose content is wrong in each way the parser
/// checks: the tag alone does not make it accepted.
#[test]
fn signed_but_malformed_is_rejected() {
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
        stamp: Stamp {
            sender: 1,
            epoch: 2,
            peer_epoch: 3,
            sequence: 4,
        },
    };
    let (d, _) = write(h, std::slice::from_ref(&e), &key);
    let clear = unsealed(&d, &key);
    let body = &clear[..];
    let check = |mut b: Vec<u8>, f: &dyn Fn(&mut Vec<u8>), want: DecodeError| {
        f(&mut b);
        let signed = sign(&b, &[7; 32]);
        assert_eq!(decode(&signed, &key), Err(want));
    };
    check(body.to_vec(), &|b| b[0] = b'X', DecodeError::Magic);
    check(body.to_vec(), &|b| b[4] = 1, DecodeError::Version);
    check(body.to_vec(), &|b| b[5] = 8, DecodeError::Kind);
    check(body.to_vec(), &|b| b[5] = 0, DecodeError::Kind);
    // A hello carries a challenge and no count.
    check(body.to_vec(), &|b| b[5] = 6, DecodeError::Kind);
    check(
        body.to_vec(),
        &|b| {
            b[5] = 7;
            b[7] = 0;
        },
        DecodeError::Malformed,
    );
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
    check(body.to_vec(), &|b| b[H + 40] ^= 1, DecodeError::Key);
    // Identity length 0 and beyond the end.
    check(body.to_vec(), &|b| b[H + 57] = 0, DecodeError::Malformed);
    check(body.to_vec(), &|b| b[H + 57] = 100, DecodeError::Malformed);
    // Not UTF-8.
    check(body.to_vec(), &|b| b[H + 58] = 0xff, DecodeError::Malformed);
    // No packed flow: an unknown tuple kind in the last word.
    check(body.to_vec(), &|b| b[H + 32 + 5] = 7, DecodeError::Key);
    // In clear it is no datagram; sealed with the key it is valid.
    assert!(decode(body, &key).is_err());
    assert_eq!(
        decode(&sign(body, &[7; 32]), &key).unwrap().entries,
        vec![e]
    );
}

/// Sealed rate datagrams wrong in each way the parser checks.
#[test]
fn signed_but_malformed_rates_are_rejected() {
    let key = SyncKey::new(&[7; 32]).unwrap();
    let r = Rate::new("web", "10.0.0.1:80", 12.5);
    assert_eq!(r.milli_pps, 12_500);
    let h = Header {
        kind: Kind::Rates,
        stamp: Stamp {
            sender: 1,
            epoch: 2,
            peer_epoch: 3,
            sequence: 4,
        },
    };
    let (d, _) = write_rates(h, std::slice::from_ref(&r), &key);
    let clear = unsealed(&d, &key);
    let body = &clear[..];
    let check = |f: &dyn Fn(&mut Vec<u8>), want: DecodeError| {
        let mut b = body.to_vec();
        f(&mut b);
        assert_eq!(decode(&sign(&b, &[7; 32]), &key), Err(want));
    };
    // Service name: length 0, beyond the end, not UTF-8.
    check(&|b| b[H + 8] = 0, DecodeError::Malformed);
    check(&|b| b[H + 8] = 200, DecodeError::Malformed);
    check(&|b| b[H + 9] = 0xff, DecodeError::Malformed);
    // Identity length beyond the end; a count of 2.
    check(&|b| b[H + 12] = 40, DecodeError::Malformed);
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
