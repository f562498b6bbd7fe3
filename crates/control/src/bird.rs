//! The BIRD 2 driver (M34): makes the node's BIRD announce exactly the VIPs
//! the management core decided ([`crate::Output::Announce`]). Part of the
//! shell: it owns a thread, a file and a socket; the decision is
//! [`crate::announce`]'s.
//!
//! # Design
//!
//! Spillway never speaks BGP. It writes the VIPs to announce as BIRD
//! `protocol static` blocks (`spillway4`, `spillway6`, one `route VIP/32
//! blackhole;`, `/128` or a VIP prefix's own per VIP) into `[bgp] routes_file`, written whole
//! to a temporary file and renamed over it (BIRD never reads half a file),
//! then asks BIRD to `configure` over its control socket. The node's
//! bird.conf (`spillway bird-config` prints one) includes that file and
//! exports only routes of those two protocols to its peers. BIRD's
//! reconfiguration diffs the static routes: a VIP that stays is not
//! re-announced.
//!
//! Why a file and `configure` rather than BIRD commands per route: BIRD has
//! no command to add a static route at run time; the file is also the
//! state BIRD starts from after its own restart, so it never needs
//! Spillway to tell it again. Why the control socket spoken directly
//! rather than `birdc -s SOCKET configure`: no process per change, no
//! dependency on where birdc lives, timeouts of our own; the protocol is a
//! handful of line-based replies with 4-digit codes (BIRD's
//! doc/reply_codes), parsed here with bounds ([`parse_line`]).
//!
//! # Failures
//!
//! - BIRD down or refusing: the thread retries every [`RETRY`] with the
//!   latest decision (older ones are skipped), counts each failure, and
//!   `status` / metrics say the speaker is unreachable and why. While BIRD
//!   is not running, its BGP sessions are down anyway: nothing is
//!   announced for this node.
//! - Spillway stops: [`Speaker::stop`] writes an empty file and
//!   reconfigures (every VIP withdrawn) before the process exits.
//! - Spillway crashes: the file keeps the last decision and BIRD would go
//!   on announcing VIPs for a dead data plane. Hence: the file is emptied
//!   when Spillway starts, before anything is decided, and
//!   docs/operating.md gives the systemd safeguards: `ExecStopPost=` that
//!   empties the file and reconfigures BIRD (runs after a crash too), and
//!   BIRD's unit `BindsTo=` Spillway's, so that BIRD stops with it. Neither
//!   withdrawal can reach the peers when the BGP sessions run through the
//!   crashed data plane's exception port (the usual case): they notice the
//!   silence instead, through BFD (`[bgp] bfd`, by default after 3 × 100
//!   ms) or, without BFD, when the hold time ([`HOLD_TIME`]) runs out.
//! - Hostile or broken replies: a reply line longer than [`MAX_LINE`],
//!   more than [`MAX_LINES`] lines, or anything but a code the reply
//!   protocol allows is an error (counted, retried), never a panic.

use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::IpAddr;

use config::values::Prefix;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How soon a failed update is tried again.
pub const RETRY: Duration = Duration::from_secs(2);
/// How often BIRD is checked for reachability when nothing changes.
pub const PROBE: Duration = Duration::from_secs(10);
/// How long one exchange with BIRD may take.
pub const TIMEOUT: Duration = Duration::from_secs(5);
/// The longest reply line accepted.
pub const MAX_LINE: usize = 4096;
/// The most lines a reply may have.
pub const MAX_LINES: usize = 1024;

/// Why talking to BIRD failed.
#[derive(Debug, thiserror::Error)]
pub enum BirdError {
    /// A socket or file operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        source: std::io::Error,
    },
    /// BIRD said no (its code and message).
    #[error("BIRD answered {code}: {text}")]
    Refused {
        /// The reply code (8xxx run-time, 9xxx parse errors).
        code: u16,
        /// Its text (every line).
        text: String,
    },
    /// The reply broke the protocol.
    #[error("unexpected reply from BIRD: {0}")]
    Protocol(String),
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> BirdError {
    let what = what.into();
    move |source| BirdError::Io { what, source }
}

/// One line of a BIRD control-socket reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line<'a> {
    /// `CODE-text`: more lines follow.
    More(u16, &'a str),
    /// `CODE text`: the last line of the reply.
    Last(u16, &'a str),
    /// ` text`: continues the previous line's code.
    Cont(&'a str),
}

/// Parses one reply line (without its newline).
pub fn parse_line(line: &str) -> Result<Line<'_>, BirdError> {
    if let Some(rest) = line.strip_prefix(' ') {
        return Ok(Line::Cont(rest));
    }
    let b = line.as_bytes();
    let code = b
        .get(..4)
        .filter(|d| d.iter().all(u8::is_ascii_digit))
        .and_then(|d| std::str::from_utf8(d).ok())
        .and_then(|d| d.parse::<u16>().ok())
        .ok_or_else(|| BirdError::Protocol(format!("no reply code in {:?}", clip(line))))?;
    let text = line.get(5..).unwrap_or("");
    match b.get(4) {
        Some(b'-') => Ok(Line::More(code, text)),
        Some(b' ') | None => Ok(Line::Last(code, text)),
        Some(_) => Err(BirdError::Protocol(format!(
            "bad separator in {:?}",
            clip(line)
        ))),
    }
}

fn clip(s: &str) -> &str {
    let mut end = s.len().min(80);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Reads one whole reply: its final code and every line's text. A code of
/// 8000 or more is [`BirdError::Refused`].
pub fn read_reply(r: &mut impl BufRead) -> Result<(u16, String), BirdError> {
    let mut text = String::new();
    for i in 0..MAX_LINES {
        let mut buf = Vec::new();
        let n = r
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut buf)
            .map_err(io("reading BIRD's reply"))?;
        if n == 0 {
            return Err(BirdError::Protocol(
                "the connection closed mid-reply".into(),
            ));
        }
        if buf.last() != Some(&b'\n') {
            return Err(BirdError::Protocol(format!(
                "a reply line longer than {MAX_LINE} bytes"
            )));
        }
        buf.pop();
        let line = String::from_utf8_lossy(&buf);
        let parsed = parse_line(&line)?;
        let (t, last) = match parsed {
            Line::More(_, t) | Line::Cont(t) => (t, None),
            Line::Last(c, t) => (t, Some(c)),
        };
        if i > 0 {
            text.push('\n');
        }
        text += t;
        if let Some(code) = last {
            if code >= 8000 {
                return Err(BirdError::Refused { code, text });
            }
            return Ok((code, text));
        }
    }
    Err(BirdError::Protocol(format!(
        "a reply of more than {MAX_LINES} lines"
    )))
}

/// Connects to BIRD's control socket and reads its greeting (0001).
fn connect(socket: &Path) -> Result<(UnixStream, BufReader<UnixStream>), BirdError> {
    let what = || format!("BIRD's control socket {}", socket.display());
    let s = UnixStream::connect(socket).map_err(io(what()))?;
    s.set_read_timeout(Some(TIMEOUT)).map_err(io(what()))?;
    s.set_write_timeout(Some(TIMEOUT)).map_err(io(what()))?;
    let mut r = BufReader::new(s.try_clone().map_err(io(what()))?);
    match read_reply(&mut r)? {
        (1, _) => Ok((s, r)),
        (code, text) => Err(BirdError::Protocol(format!(
            "greeting {code} {}",
            clip(&text)
        ))),
    }
}

/// Asks BIRD to re-read its configuration; BIRD's answer.
pub fn configure(socket: &Path) -> Result<String, BirdError> {
    let (mut s, mut r) = connect(socket)?;
    s.write_all(b"configure\n")
        .map_err(io("sending `configure` to BIRD"))?;
    let (_, text) = read_reply(&mut r)?;
    Ok(text)
}

/// Checks that BIRD answers on `socket`.
pub fn reachable(socket: &Path) -> Result<(), BirdError> {
    connect(socket).map(drop)
}

/// The routes file announcing `vips` (see the module docs).
pub fn routes_text(vips: &[Prefix]) -> String {
    let mut out = String::from(
        "# Written by spillway: the VIPs this node announces (M34). Rewritten whole\n# at every change; do not edit.\n",
    );
    for (name, family, v6) in [("spillway4", "ipv4", false), ("spillway6", "ipv6", true)] {
        let _ = writeln!(out, "protocol static {name} {{\n  {family};");
        for v in vips.iter().filter(|v| v.addr.is_ipv6() == v6) {
            let _ = writeln!(out, "  route {v} blackhole;");
        }
        out += "}\n";
    }
    out
}

/// Writes `vips` to `path` whole: a temporary file beside it, renamed over.
pub fn write_routes(path: &Path, vips: &[Prefix]) -> Result<(), BirdError> {
    let what = || format!("writing {}", path.display());
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io(what()))?;
    }
    // A hidden name: bird.conf includes `routes_file*`, which must never
    // match the file being written.
    let mut name = std::ffi::OsString::from(".");
    name.push(path.file_name().unwrap_or_default());
    name.push(".tmp");
    let tmp = path.with_file_name(name);
    let mut f = std::fs::File::create(&tmp).map_err(io(what()))?;
    f.write_all(routes_text(vips).as_bytes())
        .map_err(io(what()))?;
    f.sync_all().map_err(io(what()))?;
    std::fs::rename(&tmp, path).map_err(io(what()))
}

/// The BGP hold time `bird-config` asks for (BIRD's default is 240 s): when
/// the data plane crashes it takes the exception port, and the BGP session
/// that runs through it, down with it, and the routers drop the node's routes
/// only when the hold time runs out — or, much sooner, when BFD (`[bgp]
/// bfd`, on by default) misses its packets; the hold time is the fallback
/// for routers without BFD. (BGP uses the smaller of the two sides' hold
/// times.)
pub const HOLD_TIME: u32 = 9;
/// Keepalives every third of the hold time, as BGP suggests.
pub const KEEPALIVE_TIME: u32 = 3;

/// Why `bird_conf` refused to write a value (validation refuses it first,
/// with its position in the file: this is the writer's own guard).
#[derive(Debug, thiserror::Error)]
#[error("{field} {value:?} cannot be written into bird.conf: {why}")]
pub struct UnsafeText {
    /// The configuration field.
    pub field: &'static str,
    /// Its value.
    pub value: String,
    /// What is wrong with it.
    pub why: &'static str,
}

/// `value` as a BIRD string literal. BIRD's lexer has no escapes (a string
/// is `"` up to the next `"` on the same line), so what cannot be written
/// verbatim is refused: a double quote or a control character (a line
/// break above all) would end the string and let the rest be read as
/// configuration. With `pattern` (an `include`), glob characters too:
/// they would match files other than the one named.
pub fn bird_string(field: &'static str, value: &str, pattern: bool) -> Result<String, UnsafeText> {
    let refuse = |why| UnsafeText {
        field,
        value: value.to_owned(),
        why,
    };
    if value.contains('"') {
        return Err(refuse("it contains a double quote"));
    }
    if value.chars().any(char::is_control) {
        return Err(refuse(
            "it contains a control character (a line break, a tab, …)",
        ));
    }
    if pattern && value.contains(['*', '?', '[', ']', '\\']) {
        return Err(refuse("it contains a glob character (*, ?, [, ], \\)"));
    }
    Ok(format!("\"{value}\""))
}

/// `value` for a `#` comment: one line, so no control character (a line
/// break would start a line of configuration).
fn comment_text<'a>(field: &'static str, value: &'a str) -> Result<&'a str, UnsafeText> {
    if value.chars().any(char::is_control) {
        return Err(UnsafeText {
            field,
            value: value.to_owned(),
            why: "it contains a control character (a line break, a tab, …)",
        });
    }
    Ok(value)
}

/// A bird.conf for this node (`spillway bird-config`): router ID, the
/// routes file included, one BGP session per peer (hold time
/// [`HOLD_TIME`], BFD unless `[bgp] bfd` turns it off) exporting only the
/// routes of `spillway4` / `spillway6`, importing nothing.
///
/// # Errors
/// A value that cannot be written safely ([`bird_string`]): the node name,
/// the control socket or the routes file with a quote, a control
/// character, or (the routes file) a glob character.
pub fn bird_conf(node: &str, bgp: &config::schema::Bgp) -> Result<String, UnsafeText> {
    let node = comment_text("node.name", node)?;
    let control = comment_text("bgp.control", &bgp.control)?;
    let file = bgp.routes_file.to_string_lossy();
    // The file is written into the include pattern and a comment; the
    // pattern is checked whole, so the comment is safe too.
    bird_string("bgp.routes_file", &file, true)?;
    let include = bird_string("bgp.routes_file", &exact_glob(&file), false)?;
    let mut o = format!(
        "# bird.conf of Spillway node {node}, printed by `spillway bird-config`.\n\
         # BIRD speaks BGP; Spillway writes the VIPs to announce into {file}\n\
         # and asks BIRD to reconfigure over its control socket: run BIRD as\n\
         #   bird -c THIS_FILE -s {control}\n"
    );
    match bgp.router_id {
        Some(id) => {
            let _ = writeln!(o, "router id {id};");
        }
        None => o += "# router id: BIRD's own choice (the highest IPv4 address of an interface).\n",
    }
    o += "\nprotocol device {\n}\n\n";
    let _ = write!(
        o,
        "# The protocols spillway4 and spillway6 (static routes, one per VIP to\n\
         # announce). A pattern matching the file alone: BIRD starts before\n\
         # Spillway wrote it (its directory must exist: systemd RuntimeDirectory=).\n\
         include {include};\n\n\
         filter spillway_vips {{\n  if proto = \"spillway4\" || proto = \"spillway6\" then accept;\n  reject;\n}}\n"
    );
    let bfd = &bgp.bfd;
    let bfd_on = if bfd.enabled {
        let ms = bfd.interval.get().as_millis();
        let timers = format!(
            "    min rx interval {ms} ms;\n    min tx interval {ms} ms;\n    multiplier {};\n",
            bfd.multiplier
        );
        let _ = write!(
            o,
            "\n# BFD (RFC 5880) on every BGP session: a peer that hears nothing for\n\
             # {ms} ms x {} takes the session down, and this node's routes with it,\n\
             # without waiting for the hold time ([bgp] bfd). Its packets (UDP 3784,\n\
             # 4784 multihop) run through the data plane like BGP's: a dead data\n\
             # plane is a silent one.\n\
             protocol bfd {{\n  interface \"*\" {{\n{timers}  }};\n  multihop {{\n{timers}  }};\n}}\n",
            bfd.multiplier
        );
        "\n  bfd on;"
    } else {
        ""
    };
    for (i, p) in bgp.peers.iter().enumerate() {
        let (family, v6) = match p.address {
            IpAddr::V4(_) => ("ipv4", false),
            IpAddr::V6(_) => ("ipv6", true),
        };
        let next_hop = match bgp.next_hop {
            Some(h) if h.is_ipv6() == v6 => format!("next hop address {h};"),
            _ => "next hop self;".to_owned(),
        };
        let _ = write!(
            o,
            "\nprotocol bgp peer{i} {{\n  local as {};\n  neighbor {} as {};\n  hold time {HOLD_TIME};\n  keepalive time {KEEPALIVE_TIME};{bfd_on}\n  {family} {{\n    import none;\n    export filter spillway_vips;\n    {next_hop}\n  }};\n}}\n",
            bgp.local_asn, p.address, p.asn
        );
    }
    Ok(o)
}

/// A BIRD include pattern matching `path` alone (its last character as a
/// bracket class): BIRD accepts a pattern that matches nothing, but not a
/// missing plain file.
fn exact_glob(path: &str) -> String {
    match path.chars().last() {
        Some(c) if c.is_ascii_alphanumeric() => {
            format!("{}[{c}]", &path[..path.len() - 1])
        }
        _ => path.to_owned(),
    }
}

/// What the driver knows of the speaker (status, metrics).
#[derive(Debug, Clone, Default)]
pub struct SpeakerStatus {
    /// The control socket.
    pub socket: PathBuf,
    /// `Some(true)`: BIRD answered last time; `None`: not tried yet.
    pub reachable: Option<bool>,
    /// Whether BIRD runs the latest decision.
    pub in_sync: bool,
    /// Reconfigurations BIRD accepted.
    pub updates: u64,
    /// Failed attempts (file, socket or BIRD's refusal).
    pub failures: u64,
    /// The latest failure.
    pub last_error: Option<String>,
    /// The VIPs in the routes file.
    pub announced: Vec<Prefix>,
}

impl SpeakerStatus {
    /// Its part of `status` (the `bgp speaker bird at …` line).
    pub fn report(&self) -> crate::report::Speaker {
        let state = match self.reachable {
            None => "not tried yet".to_owned(),
            Some(true) if self.in_sync => "reachable, up to date".to_owned(),
            Some(true) => "reachable, update pending".to_owned(),
            Some(false) => format!(
                "UNREACHABLE ({}), retrying every {} s",
                self.last_error.as_deref().unwrap_or("?"),
                RETRY.as_secs()
            ),
        };
        crate::report::Speaker {
            kind: "bird",
            socket: self.socket.display().to_string(),
            state,
            reachable: self.reachable,
            in_sync: self.in_sync,
            updates: self.updates,
            failures: self.failures,
            routes_file_vips: self.announced.len(),
        }
    }
}

enum Msg {
    Set(Vec<Prefix>),
    Stop,
}

/// The driver: a thread that carries each decision to BIRD.
pub struct Speaker {
    tx: Sender<Msg>,
    status: Arc<Mutex<SpeakerStatus>>,
    thread: Option<JoinHandle<()>>,
}

impl Speaker {
    /// Empties `routes_file` (a node starting announces nothing it has not
    /// decided: a crashed predecessor's VIPs go) and starts the thread.
    pub fn start(socket: PathBuf, routes_file: PathBuf) -> Result<Speaker, BirdError> {
        write_routes(&routes_file, &[])?;
        let status = Arc::new(Mutex::new(SpeakerStatus {
            socket: socket.clone(),
            ..SpeakerStatus::default()
        }));
        let (tx, rx) = mpsc::channel();
        let st = status.clone();
        let thread = std::thread::Builder::new()
            .name("spillway-bird".into())
            .spawn(move || run(&socket, &routes_file, &rx, &st))
            .map_err(io("starting the BIRD driver thread"))?;
        Ok(Speaker {
            tx,
            status,
            thread: Some(thread),
        })
    }

    /// Announce exactly `vips` from now on.
    pub fn set(&self, vips: Vec<Prefix>) {
        // The thread only ends after Stop.
        let _ = self.tx.send(Msg::Set(vips));
    }

    /// What the driver knows now.
    pub fn status(&self) -> SpeakerStatus {
        match self.status.lock() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    /// Withdraws every VIP (empty file, one reconfiguration) and ends the
    /// thread.
    pub fn stop(&mut self) {
        let _ = self.tx.send(Msg::Stop);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Speaker {
    fn drop(&mut self) {
        self.stop();
    }
}

fn run(socket: &Path, file: &Path, rx: &Receiver<Msg>, status: &Mutex<SpeakerStatus>) {
    let mut want: Option<Vec<Prefix>> = None;
    let mut pending = false;
    let mut stopping = false;
    let mut last_probe = Instant::now();
    loop {
        let wait = if pending { RETRY } else { PROBE };
        match rx.recv_timeout(wait) {
            Ok(m) => {
                // The latest decision only.
                for m in std::iter::once(m).chain(rx.try_iter()) {
                    match m {
                        Msg::Set(v) => want = Some(v),
                        Msg::Stop => stopping = true,
                    }
                }
                pending = true;
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => stopping = true,
        }
        if stopping {
            want = Some(Vec::new());
            pending = true;
        }
        let result = if pending {
            let vips = want.clone().unwrap_or_default();
            let r = write_routes(file, &vips).and_then(|()| configure(socket));
            let mut s = lock(status);
            if r.is_ok() {
                s.updates += 1;
                s.announced = vips;
                pending = false;
            }
            s.in_sync = !pending;
            r.map(drop)
        } else if last_probe.elapsed() >= PROBE {
            last_probe = Instant::now();
            reachable(socket)
        } else {
            continue;
        };
        let mut s = lock(status);
        match result {
            Ok(()) => {
                if s.reachable != Some(true) {
                    log::info!("bgp: BIRD at {} is reachable", socket.display());
                }
                s.reachable = Some(true);
            }
            Err(e) => {
                s.failures += 1;
                if s.reachable != Some(false) || s.last_error.as_deref() != Some(&e.to_string()) {
                    log::warn!("bgp: {e}; retrying every {} s", RETRY.as_secs());
                }
                // Refused: BIRD is there but would not take it.
                s.reachable = Some(matches!(e, BirdError::Refused { .. }));
                s.last_error = Some(e.to_string());
            }
        }
        drop(s);
        if stopping {
            // One attempt: a stopping daemon does not wait for BIRD.
            return;
        }
    }
}

fn lock(m: &Mutex<SpeakerStatus>) -> std::sync::MutexGuard<'_, SpeakerStatus> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::os::unix::net::UnixListener;

    #[test]
    fn reply_lines_parse() {
        assert_eq!(
            parse_line("0001 BIRD 2.0.12 ready.").unwrap(),
            Line::Last(1, "BIRD 2.0.12 ready.")
        );
        assert_eq!(
            parse_line("0002-Reading configuration from /etc/bird.conf").unwrap(),
            Line::More(2, "Reading configuration from /etc/bird.conf")
        );
        assert_eq!(parse_line(" more").unwrap(), Line::Cont("more"));
        assert_eq!(parse_line("0003").unwrap(), Line::Last(3, ""));
        for bad in ["", "abc", "00x1 x", "0001+x", "12"] {
            assert!(parse_line(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn replies_end_at_their_last_line_and_errors_are_refusals() {
        let mut ok =
            "0002-Reading configuration from /etc/bird.conf\n0003 Reconfigured\nrest\n".as_bytes();
        let (code, text) = read_reply(&mut ok).unwrap();
        assert_eq!(code, 3);
        assert!(text.ends_with("Reconfigured"), "{text}");
        let mut bad = "0002-Reading configuration from /etc/bird.conf\n8002 /etc/bird.conf:3:1 syntax error\n".as_bytes();
        match read_reply(&mut bad) {
            Err(BirdError::Refused { code: 8002, text }) => assert!(text.contains("syntax error")),
            other => panic!("{other:?}"),
        }
        let long = format!("0001 {}\n", "x".repeat(MAX_LINE + 10));
        assert!(read_reply(&mut long.as_bytes()).is_err());
        let many = "0001-x\n".repeat(MAX_LINES + 1);
        assert!(read_reply(&mut many.as_bytes()).is_err());
        assert!(read_reply(&mut "0002-cut".as_bytes()).is_err());
    }

    proptest! {
        /// Whatever BIRD (or whoever holds its socket) sends, the reader
        /// ends with an answer or an error, never a panic.
        #[test]
        fn any_reply_bytes_are_handled(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = read_reply(&mut bytes.as_slice());
        }

        /// A reply written line by line reads back as written.
        #[test]
        fn written_replies_read_back(
            lines in proptest::collection::vec("[a-zA-Z0-9 ./:]{0,40}", 0..8),
            code in 0u16..8000,
        ) {
            let mut text = String::new();
            for l in &lines {
                text += &format!("0002-{l}\n");
            }
            text += &format!("{code:04} done\n");
            let (c, t) = read_reply(&mut text.as_bytes()).unwrap();
            prop_assert_eq!(c, code);
            let mut want: Vec<String> = lines.clone();
            want.push("done".into());
            prop_assert_eq!(t, want.join("\n"));
        }
    }

    #[test]
    fn bird_conf_has_a_session_per_peer_exporting_only_the_vips() {
        use config::schema::{AnnouncePolicy, Bfd, Bgp, BgpPeer, BgpSpeaker};
        let b = Bgp {
            speaker: BgpSpeaker::Bird,
            control: "/run/bird/bird.ctl".into(),
            local_asn: 65001,
            router_id: Some("192.0.2.2".parse().unwrap()),
            peers: vec![
                BgpPeer {
                    address: "192.0.2.1".parse().unwrap(),
                    asn: 65000,
                },
                BgpPeer {
                    address: "2001:db8::1".parse().unwrap(),
                    asn: 65000,
                },
            ],
            next_hop: Some("192.0.2.9".parse().unwrap()),
            announce: AnnouncePolicy::WhenHealthy,
            fail_open: true,
            routes_file: "/run/spillway/bird-vips.conf".into(),
            bfd: Bfd::default(),
        };
        let c = bird_conf("n1", &b).unwrap();
        assert!(c.contains("router id 192.0.2.2;"), "{c}");
        assert!(
            c.contains("include \"/run/spillway/bird-vips.con[f]\";"),
            "{c}"
        );
        assert!(c.contains("protocol bgp peer0 {\n  local as 65001;\n  neighbor 192.0.2.1 as 65000;\n  hold time 9;\n  keepalive time 3;\n  bfd on;\n  ipv4 {\n    import none;\n    export filter spillway_vips;\n    next hop address 192.0.2.9;"), "{c}");
        assert!(c.contains("neighbor 2001:db8::1 as 65000;\n  hold time 9;\n  keepalive time 3;\n  bfd on;\n  ipv6 {\n    import none;\n    export filter spillway_vips;\n    next hop self;"), "{c}");
        // BFD by default: 100 ms x 3, for direct and multihop sessions.
        let timers =
            "    min rx interval 100 ms;\n    min tx interval 100 ms;\n    multiplier 3;\n  };";
        assert!(
            c.contains(&format!(
                "protocol bfd {{\n  interface \"*\" {{\n{timers}\n  multihop {{\n{timers}\n}}"
            )),
            "{c}"
        );
    }

    #[test]
    fn bird_conf_writes_the_configured_bfd_timers_or_none() {
        use config::schema::{AnnouncePolicy, Bfd, Bgp, BgpPeer, BgpSpeaker};
        let mut b = Bgp {
            speaker: BgpSpeaker::Bird,
            control: "/run/bird/bird.ctl".into(),
            local_asn: 65001,
            router_id: None,
            peers: vec![BgpPeer {
                address: "192.0.2.1".parse().unwrap(),
                asn: 65000,
            }],
            next_hop: None,
            announce: AnnouncePolicy::WhenHealthy,
            fail_open: true,
            routes_file: "/run/spillway/bird-vips.conf".into(),
            bfd: Bfd {
                enabled: true,
                interval: config::values::Duration::millis(250),
                multiplier: 5,
            },
        };
        let c = bird_conf("n1", &b).unwrap();
        assert_eq!(c.matches("min rx interval 250 ms;").count(), 2, "{c}");
        assert_eq!(c.matches("min tx interval 250 ms;").count(), 2, "{c}");
        assert_eq!(c.matches("multiplier 5;").count(), 2, "{c}");
        assert!(c.contains("keepalive time 3;\n  bfd on;\n"), "{c}");
        b.bfd.enabled = false;
        let c = bird_conf("n1", &b).unwrap();
        assert!(!c.contains("bfd"), "{c}");
        assert!(c.contains("keepalive time 3;\n  ipv4 {"), "{c}");
    }

    /// Issue 38 item 9, the writer's own guard: whatever validation let
    /// through, a value that would end its string or comment is refused.
    #[test]
    fn bird_conf_refuses_values_that_would_inject_configuration() {
        use config::schema::{AnnouncePolicy, Bfd, Bgp, BgpSpeaker};
        let good = Bgp {
            speaker: BgpSpeaker::Bird,
            control: "/run/bird/bird.ctl".into(),
            local_asn: 65001,
            router_id: None,
            peers: vec![],
            next_hop: None,
            announce: AnnouncePolicy::WhenHealthy,
            fail_open: true,
            routes_file: "/run/spillway/bird-vips.conf".into(),
            bfd: Bfd::default(),
        };
        assert!(bird_conf("n1", &good).is_ok());
        let evil = [
            (
                "routes_file",
                "/run/x\";\nprotocol bgp evil {}\ninclude \"/run/y",
            ),
            (
                "routes_file",
                "/run/spillway/vips.conf\nprotocol bgp evil {}",
            ),
            ("routes_file", "/etc/bird/*.conf"),
            ("routes_file", "/run/spillway/vips\\.conf"),
            ("routes_file", "/run/spillway/vips.conf\r"),
            ("control", "/run/bird/bird.ctl\nprotocol bgp evil {}"),
            ("control", "/run/bird/bird.ctl\u{85}"),
            ("node", "n1\nprotocol bgp evil {}"),
        ];
        for (field, value) in evil {
            let mut b = good.clone();
            let mut node = "n1";
            match field {
                "routes_file" => b.routes_file = value.into(),
                "control" => b.control = value.into(),
                _ => node = value,
            }
            let e = bird_conf(node, &b).expect_err(value);
            assert!(
                e.to_string().contains("cannot be written into bird.conf"),
                "{e}"
            );
        }
        assert_eq!(
            bird_string("f", "/run/a b/c.conf", true).unwrap(),
            "\"/run/a b/c.conf\""
        );
        assert!(bird_string("f", "/run/a\"b", false).is_err());
        assert!(bird_string("f", "/run/a\tb", false).is_err());
    }

    #[test]
    fn routes_file_holds_both_families() {
        let v: Vec<Prefix> = vec![
            "198.51.100.1".parse().unwrap(),
            "2001:db8::1".parse().unwrap(),
            "2001:db8:1::/96".parse().unwrap(),
        ];
        let t = routes_text(&v);
        assert!(
            t.contains(
                "protocol static spillway4 {\n  ipv4;\n  route 198.51.100.1/32 blackhole;\n}"
            ),
            "{t}"
        );
        assert!(
            t.contains(
                "protocol static spillway6 {\n  ipv6;\n  route 2001:db8::1/128 blackhole;\n  route 2001:db8:1::/96 blackhole;\n}"
            ),
            "{t}"
        );
        let empty = routes_text(&[]);
        assert!(!empty.contains("route"), "{empty}");
    }

    /// A fake BIRD: answers each connection with a greeting and, to
    /// `configure`, `answer`; counts the configures.
    fn fake_bird(path: &Path, answer: &'static str) -> Arc<Mutex<u32>> {
        let l = UnixListener::bind(path).unwrap();
        let n = Arc::new(Mutex::new(0));
        let seen = n.clone();
        std::thread::spawn(move || {
            for s in l.incoming() {
                let Ok(mut s) = s else { return };
                let _ = s.write_all(b"0001 BIRD 2.0.12 ready.\n");
                let mut r = BufReader::new(s.try_clone().unwrap());
                let mut cmd = String::new();
                if r.read_line(&mut cmd).unwrap_or(0) > 0 && cmd == "configure\n" {
                    *seen.lock().unwrap() += 1;
                    let _ = s.write_all(answer.as_bytes());
                }
            }
        });
        n
    }

    fn wait_for(mut f: impl FnMut() -> bool) {
        let t = Instant::now();
        while !f() {
            assert!(t.elapsed() < Duration::from_secs(20), "not reached");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    #[test]
    fn the_driver_writes_configures_retries_and_withdraws_on_stop() {
        let dir = std::env::temp_dir().join(format!("spillway-bird-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let sock = dir.join("bird.ctl");
        let file = dir.join("sub/vips.conf");
        // A crashed predecessor's file.
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, routes_text(&["198.51.100.7".parse().unwrap()])).unwrap();
        let mut sp = Speaker::start(sock.clone(), file.clone()).unwrap();
        assert!(
            !std::fs::read_to_string(&file).unwrap().contains("route"),
            "emptied at start"
        );
        let vip: Prefix = "198.51.100.1".parse().unwrap();
        // BIRD not there yet: a failure, then a retry once it is.
        sp.set(vec![vip]);
        wait_for(|| sp.status().failures > 0);
        assert_eq!(sp.status().reachable, Some(false));
        assert!(
            sp.status().report().state.contains("UNREACHABLE"),
            "{}",
            sp.status().report().state
        );
        let configures = fake_bird(&sock, "0002-Reading configuration\n0003 Reconfigured\n");
        wait_for(|| sp.status().in_sync);
        assert_eq!(*configures.lock().unwrap(), 1);
        assert!(
            std::fs::read_to_string(&file)
                .unwrap()
                .contains("route 198.51.100.1/32 blackhole;")
        );
        assert_eq!(sp.status().announced, vec![vip]);
        sp.stop();
        assert!(
            !std::fs::read_to_string(&file).unwrap().contains("route"),
            "emptied on stop"
        );
        assert_eq!(*configures.lock().unwrap(), 2, "and BIRD told");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_refusal_is_counted_with_birds_words() {
        let dir = std::env::temp_dir().join(format!("spillway-bird-r-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let sock = dir.join("bird.ctl");
        let _configures = fake_bird(&sock, "8002 bird.conf:9:1 syntax error\n");
        let sp = Speaker::start(sock, dir.join("vips.conf")).unwrap();
        sp.set(vec!["198.51.100.1".parse().unwrap()]);
        wait_for(|| sp.status().failures > 0);
        let s = sp.status();
        assert_eq!(s.reachable, Some(true));
        assert!(!s.in_sync);
        assert!(s.last_error.unwrap_or_default().contains("syntax error"));
        drop(sp);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
