//! The flow log of `spillway nva --flow-log`: one line per packet, in a file
//! that never grows past `--flow-log-max-bytes`. Before a line would take it
//! past the limit the file is rotated (`FILE` → `FILE.1` → … → `FILE.KEEP`,
//! the oldest removed; with `--flow-log-keep 0` it is emptied instead), so
//! the log takes at most `(KEEP + 1) × MAX` bytes of disk whatever the
//! traffic: every packet the appliance answers writes a line, and a busy or
//! hostile sender must not be able to fill the disk.
//!
//! A line is never split: one longer than the limit is written alone into a
//! fresh file. When a rotation fails (a read-only directory, say) the lines
//! that would take the file past the limit are dropped and counted, never
//! written beyond it; the next line tries the rotation again.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// Rotated files kept by default.
pub const DEFAULT_KEEP: u32 = 4;
/// Largest file by default: 64 MiB.
pub const DEFAULT_MAX_BYTES: u64 = 64 << 20;

/// A size limit with an optional binary suffix: `1048576`, `512K`, `64M`,
/// `1G`. Zero is refused (no `--flow-log` logs nothing).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let (num, shift) = match s.char_indices().last() {
        Some((i, 'k' | 'K')) => (&s[..i], 10),
        Some((i, 'm' | 'M')) => (&s[..i], 20),
        Some((i, 'g' | 'G')) => (&s[..i], 30),
        _ => (s, 0),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(1 << shift))
        .filter(|&n| n > 0)
        .ok_or_else(|| {
            format!("{s:?} is not a size: a number of bytes above 0, optionally with K, M or G")
        })
}

/// The open log and its rotation state.
#[derive(Debug)]
pub struct FlowLog {
    path: PathBuf,
    file: Option<BufWriter<File>>,
    /// Bytes in the current file.
    size: u64,
    max: u64,
    keep: u32,
    /// Lines not written: the rotation failed and the file was full.
    lost: u64,
    /// The last rotation's error, reported once.
    failed: Option<String>,
}

impl FlowLog {
    /// Opens (appends to) `path`, whose size counts towards the limit.
    pub fn open(path: &Path, max: u64, keep: u32) -> std::io::Result<FlowLog> {
        let file = open_append(path)?;
        let size = file.metadata()?.len();
        Ok(FlowLog {
            path: path.to_owned(),
            file: Some(BufWriter::new(file)),
            size,
            max,
            keep,
            lost: 0,
            failed: None,
        })
    }

    /// Writes one line (a newline is added), rotating first when it would
    /// take the file past the limit. A write error (a full disk) is
    /// ignored: the appliance goes on, the counters still count. Returns
    /// the rotation error the first time one happens.
    pub fn line(&mut self, text: &str) -> Option<String> {
        let n = text.len() as u64 + 1;
        let mut report = None;
        if self.size > 0 && self.size.saturating_add(n) > self.max {
            match self.rotate() {
                Ok(()) => self.failed = None,
                Err(e) => {
                    let e = format!("rotating flow log {}: {e}", self.path.display());
                    if self.failed.as_ref() != Some(&e) {
                        report = Some(e.clone());
                    }
                    self.failed = Some(e);
                    self.lost += 1;
                    return report;
                }
            }
        }
        if let Some(f) = &mut self.file {
            // Whole lines reach the file: a reader never sees half of one.
            let _ = writeln!(f, "{text}").and_then(|()| f.flush());
            self.size += n;
        }
        report
    }

    /// Lines dropped because the file was full and could not be rotated.
    pub fn lost(&self) -> u64 {
        self.lost
    }

    /// `FILE.i` → `FILE.i+1` (the last one removed), `FILE` → `FILE.1`, a
    /// new `FILE`; with no file kept, `FILE` emptied.
    fn rotate(&mut self) -> std::io::Result<()> {
        if let Some(mut f) = self.file.take() {
            let _ = f.flush();
        }
        let result = if self.keep == 0 {
            OpenOptions::new()
                .write(true)
                .truncate(true)
                .open(&self.path)
                .map(drop)
        } else {
            let shift = (1..self.keep).rev().try_for_each(|i| {
                match std::fs::rename(self.numbered(i), self.numbered(i + 1)) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
                    _ => Ok(()),
                }
            });
            shift.and_then(|()| std::fs::rename(&self.path, self.numbered(1)))
        };
        // Reopened either way: after a failed rotation the old file goes on
        // being counted (and refused) at its size.
        let file = open_append(&self.path)?;
        self.size = file.metadata()?.len();
        self.file = Some(BufWriter::new(file));
        result
    }

    fn numbered(&self, i: u32) -> PathBuf {
        let mut p = self.path.clone().into_os_string();
        p.push(format!(".{i}"));
        PathBuf::from(p)
    }
}

fn open_append(path: &Path) -> std::io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("spillway-nva-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("temp dir");
        d
    }

    fn size(p: &Path) -> Option<u64> {
        std::fs::metadata(p).ok().map(|m| m.len())
    }

    #[test]
    fn sizes_parse_with_binary_suffixes() {
        assert_eq!(parse_size("1000"), Ok(1000));
        assert_eq!(parse_size("4K"), Ok(4096));
        assert_eq!(parse_size("64M"), Ok(64 << 20));
        assert_eq!(parse_size("2g"), Ok(2 << 30));
        for bad in ["0", "", "M", "-1", "1.5M", "1T", "99999999999G"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }

    /// Issue 38 item 10: ten thousand lines into a log of at most 1000
    /// bytes and 2 rotated files: no file ever exceeds the limit, the
    /// newest lines are in FILE, the ones before in FILE.1 and FILE.2, and
    /// nothing older is kept.
    #[test]
    fn the_log_never_grows_past_its_limit_and_keeps_n_files() {
        let d = dir("rotate");
        let path = d.join("flows.log");
        std::fs::write(&path, "an older line\n").expect("seed");
        let mut log = FlowLog::open(&path, 1000, 2).expect("open");
        for i in 0..10_000 {
            assert_eq!(log.line(&format!("line {i:05} {}", "x".repeat(40))), None);
            for p in [path.clone(), log.numbered(1), log.numbered(2)] {
                assert!(
                    size(&p).unwrap_or(0) <= 1000,
                    "{} after line {i}",
                    p.display()
                );
            }
        }
        assert!(size(&log.numbered(3)).is_none(), "only 2 rotated files");
        let now = std::fs::read_to_string(&path).expect("log");
        let one = std::fs::read_to_string(log.numbered(1)).expect("log.1");
        let two = std::fs::read_to_string(log.numbered(2)).expect("log.2");
        assert!(
            now.trim_end()
                .ends_with(&format!("line 09999 {}", "x".repeat(40)))
        );
        // Consecutive: FILE.2 then FILE.1 then FILE, every line whole.
        let all: Vec<&str> = two.lines().chain(one.lines()).chain(now.lines()).collect();
        let first: usize = all[0][5..10].parse().expect("number");
        for (k, l) in all.iter().enumerate() {
            assert_eq!(l, &format!("line {:05} {}", first + k, "x".repeat(40)));
        }
        assert!(all.len() > 40, "{} lines kept", all.len());
        assert_eq!(log.lost(), 0);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn keep_zero_empties_the_file_and_a_long_line_stands_alone() {
        let d = dir("keep0");
        let path = d.join("flows.log");
        let mut log = FlowLog::open(&path, 100, 0).expect("open");
        for i in 0..50 {
            log.line(&format!("line {i:03} {}", "y".repeat(20)));
            assert!(size(&path).unwrap_or(0) <= 100);
        }
        assert!(size(&log.numbered(1)).is_none());
        let long = "z".repeat(300);
        log.line(&long);
        assert_eq!(
            std::fs::read_to_string(&path).expect("log"),
            format!("{long}\n")
        );
        log.line("after");
        assert_eq!(std::fs::read_to_string(&path).expect("log"), "after\n");
        let _ = std::fs::remove_dir_all(&d);
    }

    /// A rotation that cannot happen (the directory became read-only to
    /// renames: here, FILE.1 is a directory that is not empty) drops the
    /// lines the full file cannot take and says so once; it never writes
    /// past the limit.
    #[test]
    fn a_failed_rotation_drops_lines_rather_than_grow() {
        let d = dir("fail");
        let path = d.join("flows.log");
        let mut log = FlowLog::open(&path, 100, 1).expect("open");
        std::fs::create_dir_all(log.numbered(1).join("blocker")).expect("blocker");
        let mut reports = 0;
        for i in 0..20 {
            if log
                .line(&format!("line {i:03} {}", "w".repeat(20)))
                .is_some()
            {
                reports += 1;
            }
            assert!(size(&path).unwrap_or(0) <= 100);
        }
        assert_eq!(reports, 1, "reported once");
        assert!(log.lost() > 10, "{} lost", log.lost());
        let _ = std::fs::remove_dir_all(&d);
    }
}
