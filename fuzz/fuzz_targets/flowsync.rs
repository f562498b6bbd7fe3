//! Flow-sync datagrams: arbitrary bytes never panic, and the first byte picks
//! a key so a fuzzer-found signed datagram (or a re-signed mutation of one)
//! reaches the parser past the MAC; whatever decodes re-encodes to the same bytes.
#![no_main]
use flowsync::{Datagram, DecodeError, SyncKey, Writer};
use wire::flow::{FlowKey, hash_words, without_service_tag};

fn decode(bytes: &[u8], key: &SyncKey) -> Result<Datagram, DecodeError> {
    flowsync::decode(bytes, key, |k, h| {
        FlowKey::unpack(&without_service_tag(*k)).is_some()
            && hash_words(&without_service_tag(*k), 0) == h
    })
}
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let key = SyncKey::new(&[0x5a; 32]).unwrap();
    let Ok(d) = decode(data, &key) else {
        // Past the MAC: sign the bytes with the key, so the parser behind it is fuzzed too.
        if data.len() > 32 {
            use hmac::{Hmac, Mac};
            let body = &data[..data.len() - 32];
            let mut m = Hmac::<sha2::Sha256>::new_from_slice(&[0x5a; 32]).unwrap();
            m.update(body);
            let mut signed = body.to_vec();
            signed.extend_from_slice(&m.finalize().into_bytes());
            if let Ok(d) = decode(&signed, &key) {
                assert_eq!(encode(&d, &key), signed);
            }
        }
        return;
    };
    assert_eq!(encode(&d, &key), data);
});

fn encode(d: &Datagram, key: &SyncKey) -> Vec<u8> {
    let mut w = Writer::new(d.header);
    for e in &d.entries {
        w.push(e).unwrap();
    }
    for r in &d.rates {
        w.push_rate(r).unwrap();
    }
    w.finish(key)
}
