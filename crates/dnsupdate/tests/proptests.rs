#![allow(clippy::unwrap_used)] // test code: fail loudly
//! Every encoder has its decoder: messages built from arbitrary records
//! parse back to themselves, signed ones too, and no byte string makes the
//! parser panic.

use std::net::{Ipv4Addr, Ipv6Addr};

use dnsupdate::message::{Message, Question, class, rtype};
use dnsupdate::{Key, Name, Rdata, Record};
use proptest::prelude::*;

fn name() -> impl Strategy<Value = Name> {
    proptest::collection::vec("[a-z0-9_-]{1,20}", 0..5)
        .prop_map(|labels| Name::parse(&labels.join(".")).unwrap())
}

fn rdata() -> impl Strategy<Value = (u16, Rdata)> {
    prop_oneof![
        any::<[u8; 4]>().prop_map(|a| (rtype::A, Rdata::A(Ipv4Addr::from(a)))),
        any::<[u8; 16]>().prop_map(|a| (rtype::AAAA, Rdata::Aaaa(Ipv6Addr::from(a)))),
        proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 1..4)
            .prop_map(|s| (rtype::TXT, Rdata::Txt(s))),
        proptest::collection::vec(any::<u8>(), 1..30).prop_map(|b| (99, Rdata::Other(b))),
    ]
}

fn record() -> impl Strategy<Value = Record> {
    (
        name(),
        rdata(),
        prop_oneof![Just(class::IN), Just(class::NONE)],
        any::<u32>(),
    )
        .prop_map(|(name, (rtype, rdata), class, ttl)| Record {
            name,
            rtype,
            class,
            ttl,
            rdata,
        })
}

fn message() -> impl Strategy<Value = Message> {
    (
        any::<u16>(),
        any::<u16>(),
        proptest::collection::vec((name(), any::<u16>()), 0..2),
        proptest::collection::vec(record(), 0..4),
        proptest::collection::vec(record(), 0..4),
        proptest::collection::vec(record(), 0..3),
    )
        .prop_map(|(id, flags, qs, answers, authority, additional)| Message {
            id,
            flags,
            questions: qs
                .into_iter()
                .map(|(name, qtype)| Question {
                    name,
                    qtype,
                    qclass: class::IN,
                })
                .collect(),
            answers,
            authority,
            additional,
            tsig: None,
        })
}

proptest! {
    #[test]
    fn messages_parse_back_to_themselves(m in message()) {
        prop_assert_eq!(Message::parse(&m.encode()).unwrap(), m);
    }

    #[test]
    fn signed_messages_keep_their_records_and_carry_the_mac(m in message(), time in 0u64..(1 << 48)) {
        let key = Key::new("k.example", "hmac-sha256", "c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0ISE=").unwrap();
        let (signed, mac) = key.sign(&m.encode(), time);
        let p = Message::parse(&signed).unwrap();
        let t = p.tsig.clone().unwrap();
        prop_assert_eq!((t.mac, t.time_signed, t.original_id), (mac, time, m.id));
        prop_assert_eq!(Message { tsig: None, ..p }, m);
    }

    #[test]
    fn any_bytes_parse_or_fail_cleanly(b in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = Message::parse(&b);
    }

    #[test]
    fn cut_messages_never_parse(m in message(), cut in any::<prop::sample::Index>()) {
        let b = m.encode();
        let at = cut.index(b.len());
        prop_assert!(Message::parse(&b[..at]).is_err());
    }
}
