//! Scratch directories for tests: one per test and process, removed when
//! the test ends, even when it fails.

use std::path::{Path, PathBuf};

/// A directory of its own under the system's temporary directory, removed
/// (with everything in it) on drop.
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    /// `spw-NAME-PID` under the temporary directory, made empty.
    ///
    /// # Panics
    /// If it cannot be created (a test cannot go on without it).
    #[allow(clippy::panic, reason = "test support: fail the test loudly")]
    pub fn new(name: &str) -> TempDir {
        let d = std::env::temp_dir().join(format!("spw-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        if let Err(e) = std::fs::create_dir_all(&d) {
            panic!("creating {}: {e}", d.display());
        }
        TempDir(d)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl std::ops::Deref for TempDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}
