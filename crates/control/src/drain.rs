//! Drains (M37): the state (what is drained, in
//! [`control_core::drain`], re-exported here) and the daemon's state file
//! next to its control socket, which keeps a drain across restarts.

use std::path::{Path, PathBuf};

pub use control_core::drain::*;

/// The state file of the daemon whose control socket is `socket`: the
/// socket's path with `.drain` appended.
pub fn state_path(socket: &Path) -> PathBuf {
    let mut p = socket.as_os_str().to_owned();
    p.push(".drain");
    PathBuf::from(p)
}

/// Writes `d` to `path` atomically: a temporary file in the same directory,
/// synced, then renamed over it (a crash leaves the old state or the new,
/// never half of one).
pub fn save(path: &Path, d: &Drained) -> std::io::Result<()> {
    use std::io::Write;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let written = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(d.to_text().as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// Reads the state file at `path`: nothing drained when there is none.
pub fn load(path: &Path) -> Result<Drained, String> {
    match std::fs::read_to_string(path) {
        Ok(text) => Drained::from_text(&text).map_err(|e| format!("{}: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Drained::new()),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_file_is_replaced_whole() {
        let dir = std::env::temp_dir().join(format!("spw-drain-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = state_path(&dir.join("control.sock"));
        assert_eq!(path, dir.join("control.sock.drain"));
        assert_eq!(load(&path), Ok(Drained::new()), "no file: nothing drained");
        let mut d = Drained::new();
        d.set(Scope::Zone, "z1", true);
        save(&path, &d).unwrap();
        assert_eq!(load(&path), Ok(d));
        save(&path, &Drained::new()).unwrap();
        assert_eq!(load(&path), Ok(Drained::new()));
        // Only the state file is left: no temporary beside it.
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
