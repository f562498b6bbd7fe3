//! BIRD control-socket replies (what `control::bird` reads from BIRD's socket):
//! arbitrary bytes never panic; a reply taken is never a refusal code and
//! holds at most `MAX_LINES` lines; reading stops within the input.
#![no_main]
use control::bird::{BirdError, MAX_LINES, parse_line, read_reply};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut r = std::io::BufReader::new(data);
    // Replies back to back, as on one connection, until the input ends or
    // one is bad.
    for _ in 0..4 {
        match read_reply(&mut r) {
            Ok((code, text)) => {
                assert!(code < 8000, "{code}");
                assert!(text.split('\n').count() <= MAX_LINES);
            }
            Err(BirdError::Refused { code, .. }) => assert!(code >= 8000),
            Err(_) => break,
        }
    }
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = parse_line(s);
    }
});
