//! A management listener's Unix socket (M50): bound so that it is never
//! reachable with a mode other than 0660 in its group, removed only while
//! it is still the one bound, and its peers checked again by their
//! credentials (`SO_PEERCRED`), since a directory or mode changed by hand
//! should not open the service to every local user. The daemon's control
//! socket and the zone health service's are bound here; what is said on
//! them is theirs.

use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Why the control socket could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    /// another process answers on the path
    #[error("in use by a running spillway")]
    InUse,
    /// the path holds something else than a socket; it is left alone
    #[error(
        "a {what} is in the way; it is not removed (move it away or choose another [control] socket)"
    )]
    NotASocket {
        /// what is there
        what: &'static str,
    },
    /// the configured group does not exist
    #[error("[control] socket_group {0:?}: no such group")]
    NoSuchGroup(String),
    /// the group could not be looked up
    #[error("[control] socket_group {name:?}")]
    GroupLookup {
        /// the group name
        name: String,
        /// why
        #[source]
        source: nix::Error,
    },
    /// a file-system step failed
    #[error("{step}")]
    Io {
        /// what was being done
        step: String,
        /// why it failed
        #[source]
        source: std::io::Error,
    },
}

fn io(step: impl Into<String>) -> impl FnOnce(std::io::Error) -> BindError {
    let step = step.into();
    move |source| BindError::Io { step, source }
}

/// The group `name` (a number is taken as a group ID when no group has
/// that name).
pub fn resolve_group(name: &str) -> Result<u32, BindError> {
    match nix::unistd::Group::from_name(name) {
        Ok(Some(g)) => Ok(g.gid.as_raw()),
        Ok(None) => name
            .parse()
            .map_err(|_| BindError::NoSuchGroup(name.to_owned())),
        Err(source) => Err(BindError::GroupLookup {
            name: name.to_owned(),
            source,
        }),
    }
}

/// The socket file this daemon made: removed on drop, but only while the
/// path is still that socket (never what someone put there since).
#[derive(Debug)]
pub struct SocketFile {
    path: PathBuf,
    dev: u64,
    ino: u64,
    uid: u32,
    gid: u32,
}

impl SocketFile {
    /// Its path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Who may talk to it.
    pub fn peers(&self) -> Peers {
        Peers {
            owner: self.uid,
            group: self.gid,
        }
    }
}

impl Drop for SocketFile {
    fn drop(&mut self) {
        if let Ok(m) = std::fs::symlink_metadata(&self.path)
            && m.file_type().is_socket()
            && (m.dev(), m.ino()) == (self.dev, self.ino)
        {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Removes the staging directory (and the socket's name in it).
struct Staging(PathBuf);

impl Drop for Staging {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(self.0.join("s"));
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// Binds the control socket at `path`: mode 0660, group `gid` (else the
/// daemon's). A stale socket nobody answers on is replaced; anything else
/// at the path is an error and stays.
///
/// The socket is bound inside a private (0700) directory next to `path`,
/// given its mode and group there, and only then linked into place: it is
/// never reachable with the mode the umask would give it. `link` fails
/// rather than replace anything that appeared at `path` meanwhile.
pub fn bind(path: &Path, gid: Option<u32>) -> Result<(UnixListener, SocketFile), BindError> {
    let shown = path.display();
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    std::fs::create_dir_all(dir).map_err(io(format!("creating {}", dir.display())))?;
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => match UnixStream::connect(path) {
            Ok(_) => return Err(BindError::InUse),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                // A socket nobody listens on: a previous run's.
                std::fs::remove_file(path).map_err(io("removing the stale socket"))?;
            }
            Err(e) => return Err(io("checking whether it is in use")(e)),
        },
        Ok(m) => {
            let t = m.file_type();
            let what = if t.is_dir() {
                "directory"
            } else if t.is_symlink() {
                "symbolic link"
            } else if t.is_file() {
                "regular file"
            } else {
                "file"
            };
            return Err(BindError::NotASocket { what });
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(format!("inspecting {shown}"))(e)),
    }
    // Short, so the staged path stays within the 108 bytes of sun_path
    // whenever the final one does (or nearly).
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let staging = Staging(dir.join(format!(".spw{}.{nanos:x}", std::process::id())));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&staging.0)
        .map_err(io(format!("creating {}", staging.0.display())))?;
    let staged = staging.0.join("s");
    let listener = UnixListener::bind(&staged).map_err(io("bind"))?;
    std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(0o660))
        .map_err(io("setting mode 0660"))?;
    if let Some(g) = gid {
        std::os::unix::fs::chown(&staged, None, Some(g))
            .map_err(io(format!("giving the socket to group {g}")))?;
    }
    std::fs::hard_link(&staged, path).map_err(io(format!("linking it at {shown}")))?;
    drop(staging);
    let m = std::fs::symlink_metadata(path).map_err(io(format!("inspecting {shown}")))?;
    listener
        .set_nonblocking(true)
        .map_err(io("making it non-blocking"))?;
    Ok((
        listener,
        SocketFile {
            path: path.to_owned(),
            dev: m.dev(),
            ino: m.ino(),
            uid: m.uid(),
            gid: m.gid(),
        },
    ))
}

/// Who may use the socket: root, the socket's owner (the daemon's user)
/// and members of its group.
#[derive(Debug, Clone, Copy)]
pub struct Peers {
    owner: u32,
    group: u32,
}

/// A verdict on a peer from its credentials alone.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Root, the socket's owner, or the group as its primary group.
    Allowed,
    /// Allowed only if the user is a (supplementary) member of the group.
    AskGroup,
}

impl Peers {
    /// What `uid` (primary group `gid`) may do, from its credentials alone.
    pub fn verdict(&self, uid: u32, gid: u32) -> Verdict {
        if uid == 0 || uid == self.owner || gid == self.group {
            Verdict::Allowed
        } else {
            Verdict::AskGroup
        }
    }

    /// Checks the peer of `stream` (its credentials as of connect).
    pub async fn check(&self, stream: &tokio::net::UnixStream) -> Result<(), String> {
        let cred = stream
            .peer_cred()
            .map_err(|e| format!("peer credentials: {e}"))?;
        let (uid, gid) = (cred.uid(), cred.gid());
        if self.verdict(uid, gid) == Verdict::Allowed {
            return Ok(());
        }
        // The user and group databases may be remote (NSS): off the
        // listener's thread.
        let group = self.group;
        let member = tokio::task::spawn_blocking(move || in_group(uid, group))
            .await
            .unwrap_or(false);
        if member {
            Ok(())
        } else {
            Err(format!(
                "permission denied: uid {uid} is not root, the daemon's user (uid {}) or in the socket's group (gid {group})",
                self.owner
            ))
        }
    }
}

/// Whether user `uid` is a member of group `gid` (primary or listed).
fn in_group(uid: u32, gid: u32) -> bool {
    use nix::unistd::{Gid, Group, Uid, User};
    let Ok(Some(user)) = User::from_uid(Uid::from_raw(uid)) else {
        return false;
    };
    if user.gid.as_raw() == gid {
        return true;
    }
    Group::from_gid(Gid::from_raw(gid))
        .ok()
        .flatten()
        .is_some_and(|g| g.mem.contains(&user.name))
}

/// Sends `command` (one line) to the service listening at `path` and
/// reads its answer, waiting at most `timeout` for it: (ok, text) — the
/// first line is `ok` or `error`, the rest is the text. The line protocol
/// of every management socket of the project.
pub fn request(path: &Path, command: &str, timeout: Duration) -> std::io::Result<(bool, String)> {
    let mut s = connect(path)?;
    s.set_read_timeout(Some(timeout))?;
    s.write_all(format!("{command}\n").as_bytes())?;
    let mut out = String::new();
    std::io::Read::read_to_string(&mut s, &mut out)?;
    let (status, rest) = out.split_once('\n').unwrap_or((out.as_str(), ""));
    Ok((status == "ok", rest.to_owned()))
}

/// Connects to the control socket. A full accept queue (the daemon busy
/// for a moment: `EAGAIN` on a Unix socket) is retried for up to two
/// seconds; any other error is returned at once.
pub fn connect(path: &Path) -> std::io::Result<UnixStream> {
    let mut tries = 0;
    loop {
        match UnixStream::connect(path) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && tries < 20 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(100));
            }
            r => return r,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use testkit::tmp::TempDir;

    fn tmp(name: &str) -> TempDir {
        TempDir::new(name)
    }

    #[test]
    fn the_socket_is_0660_in_its_group_and_removed_only_while_it_is_ours() {
        let d = tmp("sock-mode");
        let path = d.join("ctl.sock");
        let nogroup = resolve_group("nogroup").unwrap();
        let (l, f) = bind(&path, Some(nogroup)).unwrap();
        let m = std::fs::symlink_metadata(&path).unwrap();
        assert!(m.file_type().is_socket());
        assert_eq!(m.mode() & 0o7777, 0o660);
        assert_eq!(m.gid(), nogroup);
        // It answers under its final name; the staging directory is gone.
        UnixStream::connect(&path).unwrap();
        assert_eq!(std::fs::read_dir(&*d).unwrap().count(), 1);
        // A second daemon on the same path is refused.
        assert!(matches!(bind(&path, None), Err(BindError::InUse)));
        drop(l);
        drop(f);
        assert!(!path.exists(), "removed on drop");

        // Something put in its place after bind is left alone.
        let (l, f) = bind(&path, None).unwrap();
        drop(l);
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, "precious").unwrap();
        drop(f);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "precious");
    }

    #[test]
    fn only_a_stale_socket_is_replaced() {
        let d = tmp("sock-stale");
        let path = d.join("ctl.sock");
        // A socket nobody listens on any more.
        drop(UnixListener::bind(&path).unwrap());
        let (_l, _f) = bind(&path, None).unwrap();
        UnixStream::connect(&path).unwrap();

        for (what, make) in [
            (
                "regular file",
                &(|p: &Path| std::fs::write(p, "x").unwrap()) as &dyn Fn(&Path),
            ),
            ("directory", &|p: &Path| std::fs::create_dir(p).unwrap()),
            ("symbolic link", &|p: &Path| {
                std::os::unix::fs::symlink("/etc/passwd", p).unwrap()
            }),
        ] {
            let p = d.join(what.replace(' ', "-"));
            make(&p);
            let e = bind(&p, None).unwrap_err();
            assert!(
                e.to_string().contains(&format!("a {what} is in the way")),
                "{e}"
            );
            assert!(std::fs::symlink_metadata(&p).is_ok(), "{what} kept");
        }
    }

    #[test]
    fn an_unknown_group_is_a_clear_error() {
        let e = resolve_group("no-such-group-spw").unwrap_err();
        assert_eq!(
            e.to_string(),
            "[control] socket_group \"no-such-group-spw\": no such group"
        );
        assert_eq!(resolve_group("4242").unwrap(), 4242);
    }

    #[test]
    fn peers_are_root_the_owner_and_the_group() {
        let p = Peers {
            owner: 1000,
            group: 50,
        };
        assert_eq!(p.verdict(0, 0), Verdict::Allowed);
        assert_eq!(p.verdict(1000, 7), Verdict::Allowed);
        assert_eq!(p.verdict(1234, 50), Verdict::Allowed);
        assert_eq!(p.verdict(1234, 7), Verdict::AskGroup);
        // nobody is not listed in root's group.
        assert!(!in_group(65534, 0));
        assert!(in_group(65534, 65534), "nobody's primary group");
    }
}
