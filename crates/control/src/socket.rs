//! The Unix control socket: one command per connection, a text answer.
//!
//! Commands: `status`, `stats`, `flows [filters]`, `reload`. The answer's first line is `ok` or
//! `error`; the rest is for people.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::Manager;

/// A listening control socket (removed from the file system on drop).
pub struct ControlSocket {
    listener: UnixListener,
    path: PathBuf,
}

impl ControlSocket {
    /// Binds `path`, replacing a stale socket left by a previous run.
    pub fn bind(path: &Path) -> std::io::Result<ControlSocket> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        if UnixStream::connect(path).is_ok() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AddrInUse,
                format!("{} is in use by a running spillway", path.display()),
            ));
        }
        let _ = std::fs::remove_file(path);
        let listener = UnixListener::bind(path)?;
        listener.set_nonblocking(true)?;
        Ok(ControlSocket {
            listener,
            path: path.to_owned(),
        })
    }

    /// Answers every connection waiting now (never blocks on a slow client
    /// for more than a second).
    pub fn serve_pending(&self, mgr: &mut Manager) {
        while let Ok((stream, _)) = self.listener.accept() {
            if let Err(e) = answer(stream, mgr) {
                log::debug!("control socket: {e}");
            }
        }
    }
}

impl Drop for ControlSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn answer(stream: UnixStream, mgr: &mut Manager) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(Duration::from_secs(1)))?;
    stream.set_write_timeout(Some(Duration::from_secs(1)))?;
    let mut line = String::new();
    BufReader::new(stream.try_clone()?).take_line(&mut line)?;
    let reply = match line.trim() {
        "status" => format!("ok\n{}", mgr.status()),
        "stats" => format!("ok\n{}", mgr.stats()),
        "reload" => match mgr.reload() {
            Ok(g) => format!("ok\nreloaded: generation {g} is live\n"),
            Err(e) => format!("error\nreload rejected; the running configuration stays:\n{e}\n"),
        },
        cmd if cmd == "flows" || cmd.starts_with("flows ") => {
            match crate::flows::FlowQuery::parse(&cmd["flows".len()..]) {
                Ok(q) => format!("ok\n{}", mgr.flows(&q)),
                Err(e) => format!("error\n{e}\n"),
            }
        }
        other => format!("error\nunknown command {other:?} (status, stats, flows, reload)\n"),
    };
    (&stream).write_all(reply.as_bytes())
}

trait TakeLine {
    fn take_line(&mut self, line: &mut String) -> std::io::Result<()>;
}

impl<R: BufRead> TakeLine for R {
    /// Reads one line of at most 256 bytes.
    fn take_line(&mut self, line: &mut String) -> std::io::Result<()> {
        use std::io::Read;
        self.take(256).read_line(line).map(|_| ())
    }
}

/// Sends `command` to the daemon at `path` and returns (ok, text).
pub fn request(path: &Path, command: &str) -> std::io::Result<(bool, String)> {
    let mut s = UnixStream::connect(path)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.write_all(format!("{command}\n").as_bytes())?;
    let mut out = String::new();
    std::io::Read::read_to_string(&mut s, &mut out)?;
    let (status, rest) = out.split_once('\n').unwrap_or((out.as_str(), ""));
    Ok((status == "ok", rest.to_owned()))
}
