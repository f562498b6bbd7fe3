//! The Unix control socket: one command per connection, a text answer.
//!
//! Commands: `status`, `stats`, `flows [filters]`, `simulate FLOW`,
//! `reload`, `drain` and `undrain` `node|zone|region NAME`. The answer's
//! first line is `ok` or `error`; the rest is for people, or, when the
//! command line ends with the word `json`, one JSON object on one line
//! (`{"ok": true, …}`, or `{"ok": false, "error": …}`; see
//! [`crate::report`]).
//!
//! The socket file is created mode 0660, in the configured group, and never
//! reachable with any other mode; peers are checked again by their
//! credentials (`SO_PEERCRED`), since a directory or mode changed by hand
//! should not open the daemon to every local user (M50). Connections
//! are served by [`crate::listen`], off the management loop.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::Manager;
use crate::listen::{Job, Parsed};

/// Longest command line read (a `flows` query is under 200 bytes).
pub const MAX_LINE: usize = 4096;

/// Over `max_connections`.
pub(crate) const BUSY: &[u8] = b"error\ntoo many connections to the control socket; try again\n";
/// The management loop did not take the command or answer it in time.
pub(crate) const UNAVAILABLE: &[u8] =
    b"error\nthe management core did not answer in time; try again\n";
/// No whole command line within `timeout`.
pub(crate) const TIMED_OUT: &[u8] = b"error\ntimed out waiting for a command line\n";
/// A line longer than [`MAX_LINE`].
pub(crate) const TOO_LARGE: &[u8] = b"error\ncommand line too long\n";

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
pub(crate) enum Verdict {
    Allowed,
    /// Allowed only if the user is a (supplementary) member of the group.
    AskGroup,
}

impl Peers {
    pub(crate) fn verdict(&self, uid: u32, gid: u32) -> Verdict {
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

/// A command line as the listener received it.
pub(crate) fn parse(buf: &[u8]) -> Parsed {
    let line = buf.split(|&b| b == b'\n').next().unwrap_or_default();
    match std::str::from_utf8(line) {
        Ok(l) => Parsed::Job(Job::Command(l.trim().to_owned())),
        Err(_) => Parsed::Bad(b"error\nthe command is not UTF-8 text\n".to_vec()),
    }
}

/// A command line, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// `status`.
    Status,
    /// `stats`.
    Stats,
    /// `reload`, `reload --force`.
    Reload {
        /// `--force`.
        force: bool,
    },
    /// `flows [filters]`.
    Flows(crate::flows::FlowQuery),
    /// `simulate src=ADDR dst=ADDR …`: a flow's decision, explained.
    Simulate(crate::simulate::SimQuery),
    /// `drain|undrain node|zone|region NAME` (M37).
    Drain {
        /// What it names.
        scope: crate::drain::Scope,
        /// Its name.
        name: String,
        /// `drain` (true) or `undrain`.
        on: bool,
    },
}

/// The commands, as an unknown one's error lists them.
const COMMANDS: &str = "status, stats, flows, simulate, reload [--force], drain|undrain node|zone|region NAME; any followed by json";

/// `line` without a last word `json`, and whether it had one. In `drain
/// zone json` the word is the zone's name: a drain's third word is never
/// the flag.
pub fn strip_json(line: &str) -> (&str, bool) {
    let line = line.trim();
    match line.rsplit_once(char::is_whitespace) {
        Some((rest, "json"))
            if !(matches!(rest.split_whitespace().next(), Some("drain" | "undrain"))
                && rest.split_whitespace().count() < 3) =>
        {
            (rest.trim_end(), true)
        }
        _ => (line, false),
    }
}

/// `drain`'s and `undrain`'s arguments: `node|zone|region NAME`.
fn drain(on: bool, args: &str) -> Result<Request, String> {
    let verb = if on { "drain" } else { "undrain" };
    let mut words = args.split_whitespace();
    match (
        words.next().map(|w| (w, crate::drain::Scope::parse(w))),
        words.next(),
        words.next(),
    ) {
        (Some((_, Some(scope))), Some(name), None) if crate::drain::valid_name(name) => {
            Ok(Request::Drain {
                scope,
                name: name.to_owned(),
                on,
            })
        }
        (Some((w, None)), ..) => Err(format!("{verb} {w:?}: not node, zone or region\n")),
        _ => Err(format!("usage: {verb} node|zone|region NAME\n")),
    }
}

impl Request {
    /// Parses a command line (without its `json` word, see
    /// [`strip_json`]); `Err` is the error's text for people. Every
    /// command is one arm here.
    pub fn parse(line: &str) -> Result<Request, String> {
        match line.trim() {
            "status" => Ok(Request::Status),
            "stats" => Ok(Request::Stats),
            "reload" => Ok(Request::Reload { force: false }),
            "reload --force" => Ok(Request::Reload { force: true }),
            cmd if cmd == "drain" || cmd.starts_with("drain ") => drain(true, &cmd[5..]),
            cmd if cmd == "undrain" || cmd.starts_with("undrain ") => drain(false, &cmd[7..]),
            cmd if cmd == "flows" || cmd.starts_with("flows ") => {
                crate::flows::FlowQuery::parse(&cmd["flows".len()..])
                    .map(Request::Flows)
                    .map_err(|e| format!("{e}\n"))
            }
            cmd if cmd == "simulate" || cmd.starts_with("simulate ") => {
                crate::simulate::SimQuery::parse(&cmd["simulate".len()..])
                    .map(Request::Simulate)
                    .map_err(|e| format!("{e}\n"))
            }
            other => Err(format!("unknown command {other:?} ({COMMANDS})\n")),
        }
    }
}

/// Runs one command line on the management core: the whole answer, `ok`
/// or `error` first.
pub fn dispatch(mgr: &mut Manager, line: &str) -> String {
    let (line, json) = strip_json(line);
    let (ok, text) = match Request::parse(line) {
        // `simulate`'s own `json` word may stand anywhere among its words.
        Ok(Request::Simulate(q)) if q.json => mgr.request(Request::Simulate(q), true),
        Ok(r) => mgr.request(r, json),
        Err(e) if json => (false, crate::report::json_error(&e)),
        Err(e) => (false, e),
    };
    answer_line(ok, &text)
}

/// The whole answer: `ok` or `error`, then the text.
pub fn answer_line(ok: bool, text: &str) -> String {
    format!("{}\n{text}", if ok { "ok" } else { "error" })
}

/// Whether `line` asks for a reload: (`--force`, JSON). The daemon's loop
/// answers it once the file is read off the loop.
pub fn reload_request(line: &str) -> Option<(bool, bool)> {
    let (line, json) = strip_json(line);
    match Request::parse(line) {
        Ok(Request::Reload { force }) => Some((force, json)),
        _ => None,
    }
}

/// Sends `command` to the daemon at `path` and returns (ok, text).
pub fn request(path: &Path, command: &str) -> std::io::Result<(bool, String)> {
    let mut s = connect(path)?;
    // As long as the daemon may take to answer (a reload of a large file
    // is read and validated meanwhile), and a little more.
    s.set_read_timeout(Some(crate::listen::ANSWER_TIMEOUT + Duration::from_secs(5)))?;
    s.write_all(format!("{command}\n").as_bytes())?;
    let mut out = String::new();
    std::io::Read::read_to_string(&mut s, &mut out)?;
    let (status, rest) = out.split_once('\n').unwrap_or((out.as_str(), ""));
    Ok((status == "ok", rest.to_owned()))
}

/// Connects to the control socket. A full accept queue (the daemon busy
/// for a moment: `EAGAIN` on a Unix socket) is retried for up to two
/// seconds; any other error is returned at once.
fn connect(path: &Path) -> std::io::Result<UnixStream> {
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
pub(crate) mod tests {
    use super::*;

    /// A directory of its own, removed even when the test fails.
    pub(crate) struct Tmp(pub(crate) PathBuf);

    impl Drop for Tmp {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    impl std::ops::Deref for Tmp {
        type Target = Path;
        fn deref(&self) -> &Path {
            &self.0
        }
    }

    pub(crate) fn tmp(name: &str) -> Tmp {
        let d = std::env::temp_dir().join(format!("spw-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Tmp(d)
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

    #[test]
    fn command_lines_parse_to_requests_or_to_the_error_answered() {
        assert_eq!(Request::parse(" status "), Ok(Request::Status));
        assert_eq!(Request::parse("stats"), Ok(Request::Stats));
        assert_eq!(
            Request::parse("reload"),
            Ok(Request::Reload { force: false })
        );
        assert_eq!(
            Request::parse("reload --force"),
            Ok(Request::Reload { force: true })
        );
        assert!(matches!(
            Request::parse("simulate src=192.0.2.1 dst=10.0.0.10 dport=80 json"),
            Ok(Request::Simulate(q)) if q.json && q.probe.dport == 80
        ));
        assert_eq!(strip_json(" status json "), ("status", true));
        assert_eq!(strip_json("flows limit=3  json"), ("flows limit=3", true));
        assert_eq!(strip_json("status"), ("status", false));
        assert_eq!(strip_json("drain node json"), ("drain node json", false));
        assert_eq!(
            strip_json("drain node json json"),
            ("drain node json", true)
        );
        assert_eq!(strip_json("json"), ("json", false));
        assert_eq!(strip_json("drain node jsonx"), ("drain node jsonx", false));
        assert_eq!(
            Request::parse("simulate src=192.0.2.1"),
            Err("usage: simulate src=ADDR dst=ADDR [proto=tcp|udp|icmp|N] [sport=N] [dport=N] [established] [json]\n".to_owned())
        );
        assert!(matches!(
            Request::parse("flows limit=3"),
            Ok(Request::Flows(q)) if q.limit == 3
        ));
        assert_eq!(
            Request::parse("flows limit=x"),
            Err("limit=\"x\": not a count\n".to_owned())
        );
        assert_eq!(
            Request::parse("reload -f"),
            Err(format!("unknown command \"reload -f\" ({COMMANDS})\n"))
        );
        assert_eq!(
            Request::parse("drain zone eu-1a"),
            Ok(Request::Drain {
                scope: crate::drain::Scope::Zone,
                name: "eu-1a".into(),
                on: true
            })
        );
        assert_eq!(
            Request::parse("undrain node lb1"),
            Ok(Request::Drain {
                scope: crate::drain::Scope::Node,
                name: "lb1".into(),
                on: false
            })
        );
        assert_eq!(
            Request::parse("drain rack r1"),
            Err("drain \"rack\": not node, zone or region\n".to_owned())
        );
        for bad in ["drain", "drain zone", "drain zone a b", "undrain zone \"a"] {
            assert!(
                Request::parse(bad).unwrap_err().starts_with("usage: "),
                "{bad}"
            );
        }
    }

    #[test]
    fn command_lines_are_read_up_to_their_newline() {
        assert_eq!(
            parse(b"status\n"),
            Parsed::Job(Job::Command("status".into()))
        );
        assert_eq!(
            parse(b" flows limit=3 \r\ntrailing"),
            Parsed::Job(Job::Command("flows limit=3".into()))
        );
        assert!(matches!(parse(b"st\xffatus\n"), Parsed::Bad(_)));
    }
}
