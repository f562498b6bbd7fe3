//! Writes the seed corpus of the `flowsync` fuzz target (format 2) into the
//! directory given (`fuzz/corpus/flowsync`): a datagram of each kind sealed
//! with the fuzz target's key, and the same in clear (header and body, no
//! tag), which the target seals itself to reach the parser.
//!
//! `cargo run -p flowsync --example fuzz_seeds -- fuzz/corpus/flowsync`

use flowsync::{Cipher, Kind, Rate, Stamp, SyncEntry, SyncKey, Writer};
use wire::flow::{FlowKey, hash_words, with_service_tag, without_service_tag};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args().nth(1).ok_or("usage: fuzz_seeds DIR")?;
    std::fs::create_dir_all(&dir)?;
    let cipher = Cipher::new(&SyncKey::new(&[0x5a; 32])?);
    let stamp = Stamp {
        sender: flowsync::node_id("lb-1"),
        epoch: 0x1122_3344_5566_7788,
        peer_epoch: 0x99aa_bbcc_ddee_ff00,
        sequence: 42,
    };
    let key = with_service_tag(FlowKey::five([0; 16], [1; 16], 6, 40000, 443).pack(), 3);
    let entry = SyncEntry {
        key,
        hash: hash_words(&without_service_tag(key), 0),
        identity: "10.0.0.1:443".into(),
        cookie: 0xdead_beef,
        flags: 4,
        age_ms: 1500,
    };
    let mut entries = Writer::new(Kind::Entries);
    entries.push(&entry)?;
    entries.push(&SyncEntry {
        identity: "[2001:db8::1]:443".into(),
        ..entry.clone()
    })?;
    let mut rates = Writer::new(Kind::Rates);
    rates.push_rate(&Rate::new("web", "10.0.0.1:443", 1234.5))?;
    let mut writers = vec![entries, rates];
    for kind in [Kind::RequestDump, Kind::DumpDone, Kind::Leaving] {
        writers.push(Writer::new(kind));
    }
    for kind in [Kind::Hello, Kind::HelloReply] {
        writers.extend(Writer::hello(kind, &[7; 16]));
    }
    for w in &writers {
        let sealed = w.seal(&stamp, &cipher);
        let mut clear = w.header_bytes(&stamp).to_vec();
        clear.extend_from_slice(w.body());
        for (what, bytes) in [("sealed", sealed), ("clear", clear)] {
            let name = format!("{dir}/{what}-kind{}", w.kind().code());
            std::fs::write(&name, bytes)?;
            println!("{name}");
        }
    }
    Ok(())
}
