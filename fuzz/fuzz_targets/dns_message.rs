//! DNS answers from the authoritative server (the zone health service's
//! input): arbitrary bytes never panic; what parses re-encodes to a message
//! that parses to the same records; a TSIG record's verification never
//! panics either.
#![no_main]
use dnsupdate::{Key, Message};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(m) = Message::parse(data) else {
        return;
    };
    let key = Key::new("k", "hmac-sha256", "c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0ISE=").unwrap();
    let _ = key.verify(data, &m, &[0; 32], 0);
    let again = Message::parse(&m.encode()).expect("an encoded message parses");
    assert_eq!(Message { tsig: None, ..m }, again);
});
