//! Flow-sync datagrams (format 2, M54): arbitrary bytes never panic, and
//! whatever decodes re-seals to the same bytes. A fuzzer cannot forge
//! tags, so the input is also sealed with the key as it is (header in
//! clear, the rest as the body): the parser behind the tag is fuzzed too,
//! and so are the sessions (a datagram that decodes is opened by a node in
//! session with its sender, then replayed: never taken twice).
#![no_main]
use std::time::Duration;

use flowsync::session::{Accepted, Peers};
use flowsync::{Cipher, Datagram, DecodeError, HEADER_LEN, SyncKey};
use libfuzzer_sys::fuzz_target;
use wire::flow::{FlowKey, hash_words, without_service_tag};

fn valid_key(k: &[u64; 5], h: u64) -> bool {
    FlowKey::unpack(&without_service_tag(*k)).is_some() && hash_words(&without_service_tag(*k), 0) == h
}

fn decode(bytes: &[u8], cipher: &Cipher) -> Result<Datagram, DecodeError> {
    flowsync::decode(bytes, cipher, valid_key)
}

fuzz_target!(|data: &[u8]| {
    let cipher = Cipher::new(&SyncKey::new(&[0x5a; 32]).unwrap());
    if let Ok(d) = decode(data, &cipher) {
        assert_eq!(reseal(&d, &cipher), data);
    }
    // Past the tag: seal the bytes as they are.
    let Some((head, body)) = data.split_first_chunk::<HEADER_LEN>() else {
        return;
    };
    let sealed = cipher.seal_raw(head, body);
    let Ok(d) = decode(&sealed, &cipher) else {
        return;
    };
    assert_eq!(reseal(&d, &cipher), sealed);
    // A node in session with this datagram's sender (a handshake between
    // the two first): whatever the datagram, it is taken at most once.
    let s = d.header.stamp;
    let mut node = Peers::new(s.sender ^ 1, s.peer_epoch, cipher.clone(), 1);
    let mut sender = Peers::new(s.sender, s.epoch, cipher.clone(), 1);
    let (mut to_sender, mut to_node) = (Vec::new(), Vec::new());
    node.poll(Duration::ZERO, &mut to_sender);
    for (_, h) in to_sender.drain(..) {
        let _ = sender.open(0, &h, Duration::ZERO, valid_key, &mut to_node);
    }
    for (_, r) in to_node.drain(..) {
        let _ = node.open(0, &r, Duration::ZERO, valid_key, &mut to_sender);
    }
    let mut taken = 0;
    for _ in 0..3 {
        if let Ok(Accepted::Data(_)) = node.open(0, &sealed, Duration::ZERO, valid_key, &mut to_sender) {
            taken += 1;
        }
    }
    assert!(taken <= 1);
});

fn reseal(d: &Datagram, cipher: &Cipher) -> Vec<u8> {
    d.writer().unwrap().seal(&d.header.stamp, cipher)
}
