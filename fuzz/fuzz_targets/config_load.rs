//! The configuration loader on arbitrary text: it must answer every input with
//! a loaded config or positioned errors, never a panic. Every error must point
//! inside the text (line/column within it) so operators can find it.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match config::load_str("fuzz.toml", text, &config::Env::with_cpus(4)) {
        Ok(loaded) => {
            let _ = loaded.summary();
        }
        Err(errors) => {
            assert!(
                !errors.errors.is_empty(),
                "a rejection names at least one error"
            );
            let lines = text.split('\n').count();
            for e in &errors.errors {
                assert!(
                    e.line >= 1 && e.line <= lines.max(1),
                    "error line {} outside 1..={lines}: {e}",
                    e.line
                );
                let _ = e.to_string();
            }
        }
    }
});
