//! What the commands print. `print!` and `println!` panic when a write
//! fails, and the commonest failure is ordinary: `spillway … | head -1`
//! closes the pipe after one line, and the next write gets EPIPE (Rust
//! ignores SIGPIPE, so the write fails instead of the process being killed;
//! the release profile turns the panic into an abort). So every command
//! prints through [`write`] (the `out!`, `outln!`, `err!` and `errln!`
//! macros), which never panics:
//!
//! - a reader that went away (EPIPE) is no error of the command: nothing
//!   more is written to that stream, and the command ends with the status
//!   it would have had ([`write`] says whether the stream is still open:
//!   a loop printing until interrupted stops);
//! - any other write error (a full disk, an I/O error) loses output the
//!   caller asked for: it is said once on stderr, if stderr still takes
//!   it, and the command exits 1 ([`exit_code`]).

use std::fmt;
use std::io::{self, Write};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU8, Ordering};

/// A stream's state: still open, its reader gone, or failed otherwise.
const OPEN: u8 = 0;
const GONE: u8 = 1;
const FAILED: u8 = 2;

static STDOUT: AtomicU8 = AtomicU8::new(OPEN);
static STDERR: AtomicU8 = AtomicU8::new(OPEN);

/// The two streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// Standard output.
    Out,
    /// Standard error.
    Err,
}

impl Stream {
    fn state(self) -> &'static AtomicU8 {
        match self {
            Stream::Out => &STDOUT,
            Stream::Err => &STDERR,
        }
    }
}

/// Writes `args` to `stream` (flushed) unless it is closed; whether it is
/// still open afterwards.
pub fn write(stream: Stream, args: fmt::Arguments<'_>) -> bool {
    let state = stream.state();
    if state.load(Ordering::Relaxed) != OPEN {
        return false;
    }
    let result = match stream {
        Stream::Out => {
            let mut o = io::stdout().lock();
            o.write_fmt(args).and_then(|()| o.flush())
        }
        Stream::Err => {
            let mut e = io::stderr().lock();
            e.write_fmt(args).and_then(|()| e.flush())
        }
    };
    match result {
        Ok(()) => true,
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {
            state.store(GONE, Ordering::Relaxed);
            false
        }
        Err(e) => {
            state.store(FAILED, Ordering::Relaxed);
            if stream == Stream::Out {
                write(
                    Stream::Err,
                    format_args!("spillway: error: writing to stdout: {e}\n"),
                );
            }
            false
        }
    }
}

/// The exit status: `code`, unless output was lost to a write error other
/// than a reader going away.
pub fn exit_code(code: ExitCode) -> ExitCode {
    let failed = |s: &AtomicU8| s.load(Ordering::Relaxed) == FAILED;
    if failed(&STDOUT) || failed(&STDERR) {
        ExitCode::FAILURE
    } else {
        code
    }
}

/// `print!` that never panics ([`write`]).
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::output::write($crate::output::Stream::Out, format_args!($($arg)*))
    };
}

/// `println!` that never panics ([`write`]).
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::output::write($crate::output::Stream::Out, format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `eprint!` that never panics ([`err`]).
macro_rules! err {
    ($($arg:tt)*) => {
        $crate::output::write($crate::output::Stream::Err, format_args!($($arg)*))
    };
}

/// `eprintln!` that never panics ([`err`]).
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::output::write($crate::output::Stream::Err, format_args!("{}\n", format_args!($($arg)*)))
    };
}

pub(crate) use {err, errln, out, outln};
