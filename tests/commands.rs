//! Every external program the repository runs is installed by
//! `scripts/setup.sh`, so that a fresh Debian machine passes the tests, runs
//! the demo and the benchmarks.
//!
//! The test scans the sources for the commands they run:
//!
//! - Rust (`*.rs`): `Command::new("…")`, and what `ip netns exec NS …` runs
//!   in an `.args([…])` list;
//! - shell (`*.sh`): every command word of every simple command, also inside
//!   `$(…)`, `<(…)`, heredocs and `trap` strings, and what wrappers run
//!   (`env`, `exec`, `sudo`, `xargs`, `timeout`, `ip netns exec`, the lab's
//!   `nsx`, lib.sh's `as_root`), and the names `command -v` looks up;
//! - Python (`*.py`): the first element of the command of `subprocess.*` and
//!   of perf/benchlib's `sh([…])`, and `shutil.which("…")`.
//!
//! Each command must then be a shell builtin or function, one of
//! [`NOT_FROM_DEBIAN`] (with the reason), or a program under /usr/bin,
//! /usr/sbin, /bin or /sbin that dpkg says belongs to a package in setup.sh's
//! `PACKAGES`, to one of their dependencies, or to a package of priority
//! "required" (present on every Debian system).
//!
//! A command word the scan cannot read (a variable, an expression) must be in
//! [`DYNAMIC`], keyed by file and text, with the commands it stands for,
//! which are checked in turn.
//!
//! To extend: a new program → add its Debian package to `PACKAGES` in
//! scripts/setup.sh with a comment saying what uses it (`dpkg -S
//! "$(command -v prog)"` or `apt-file search bin/prog` names it); a program
//! not from Debian → [`NOT_FROM_DEBIAN`]; a new way of running programs (a
//! wrapper or a Python helper) → [`SHELL_WRAPPERS`] or [`PY_RUNNERS`].
//! Entries that the scan no longer needs make the test fail too, so the lists
//! stay honest.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Programs that do not come from a Debian package, and why that is fine.
const NOT_FROM_DEBIAN: &[(&str, &str)] = &[
    (
        "cargo",
        "the Rust toolchain, from rustup (https://rustup.rs); setup.sh's ensure_cargo requires it \
         and installs cargo-nextest, fuzz-smoke.sh installs cargo-fuzz",
    ),
    (
        "rustc",
        "the Rust compiler, from rustup with cargo: perf/budget_check.py asks its version, which \
         instruction counts depend on",
    ),
    (
        "sudo",
        "lib.sh's as_root and pktgen/check.sh use it only when not root; as root nothing is needed",
    ),
];

/// Command words the scan cannot read, by file and text: what they run (each
/// checked like any other command; a path ending in a file of the repository
/// or in a binary this workspace builds needs nothing) and why.
const DYNAMIC: &[Dynamic] = &[
    Dynamic {
        file: "scripts/lib.sh",
        text: "\"$@\"",
        runs: &[],
        wraps: false,
        why: "as_root runs its arguments; its callers are scanned (as_root is a wrapper)",
    },
    Dynamic {
        file: "scripts/lab.sh",
        text: "\"$@\"",
        runs: &[],
        wraps: false,
        why: "nsx NS CMD… runs `ip netns exec NS CMD…`; its callers are scanned (nsx is a wrapper)",
    },
    Dynamic {
        file: "scripts/lab-tunnels.sh",
        text: "\"$@\"",
        runs: &[],
        wraps: false,
        why: "nsx NS CMD… runs `ip netns exec NS CMD…`; its callers are scanned (nsx is a wrapper)",
    },
    Dynamic {
        file: "scripts/lab-bgp.sh",
        text: "\"$@\"",
        runs: &[],
        wraps: false,
        why: "nsx NS CMD… runs `ip netns exec NS CMD…`; its callers are scanned (nsx is a wrapper)",
    },
    Dynamic {
        file: "scripts/lab-vrrp.sh",
        text: "\"$@\"",
        runs: &[],
        wraps: false,
        why: "nsx NS CMD… runs `ip netns exec NS CMD…`; its callers are scanned (nsx is a wrapper)",
    },
    Dynamic {
        file: "scripts/lab-gateway.sh",
        text: "\"$@\"",
        runs: &[],
        wraps: false,
        why: "nsx NS CMD… runs `ip netns exec NS CMD…`; its callers are scanned (nsx is a wrapper)",
    },
    Dynamic {
        file: "scripts/demo.sh",
        text: "\"$@\"",
        runs: &[],
        wraps: false,
        why: "progress LABEL CMD… runs CMD in the background; its callers are scanned (progress \
              is a wrapper)",
    },
    Dynamic {
        file: "perf/pktgen/check.sh",
        text: "\"$luac\"",
        runs: &["luac5.4"],
        wraps: false,
        why: "first_of luac5.4 luac5.3 luac",
    },
    Dynamic {
        file: "perf/pktgen/check.sh",
        text: "\"$lua\"",
        runs: &["lua5.4"],
        wraps: false,
        why: "first_of lua5.4 lua5.3 lua",
    },
    Dynamic {
        file: "perf/pktgen/check.sh",
        text: "\"${root[@]}\"",
        runs: &["sudo"],
        wraps: true,
        why: "empty as root, sudo otherwise",
    },
    Dynamic {
        file: "perf/budget_check.py",
        text: "row.command()",
        runs: &[],
        wraps: false,
        why: "Row.command(): this repository's perf/budget.sh and a row's arguments",
    },
    Dynamic {
        file: "perf/bench.sh",
        text: "\"$py\"",
        runs: &["python3"],
        wraps: false,
        why: "for py in python3 /usr/bin/python3",
    },
    Dynamic {
        file: "perf/benchlib/machine.py",
        text: "cmd",
        runs: &[],
        wraps: false,
        why: "sh(cmd) runs its callers' command lists (scanned: sh is a Python runner)",
    },
    Dynamic {
        file: "perf/benchlib/runner.py",
        text: "cmd",
        runs: &["dpdk-testpmd"],
        wraps: false,
        why: "Runner.start(cmd), packetset's run and spillway replay's: command lists of the \
              spillway and packetset binaries this workspace builds and of dpdk-testpmd",
    },
    Dynamic {
        file: "perf/benchlib/warmups.py",
        text: "cmd",
        runs: &[],
        wraps: false,
        why: "SynFloodWarmup.flows_json: the spillway binary this workspace builds",
    },
    Dynamic {
        file: "perf/benchlib/runner.py",
        text: "str(self.paths[\"spillway\"])",
        runs: &[],
        wraps: false,
        why: "the spillway binary this workspace builds",
    },
    Dynamic {
        file: "perf/benchlib/warmups.py",
        text: "str(self.spillway)",
        runs: &[],
        wraps: false,
        why: "the spillway binary this workspace builds (the gateway return and synflood \
              warm-ups' stats)",
    },
    Dynamic {
        file: "perf/benchlib/runner.py",
        text: "str(self.paths[binary_key])",
        runs: &[],
        wraps: false,
        why: "the spillway binary this workspace builds",
    },
    Dynamic {
        file: "scripts/check-commits.sh",
        text: "\"$me\"",
        runs: &[],
        wraps: false,
        why: "its self-test runs the script itself in a scratch repository",
    },
    Dynamic {
        file: "perf/bench.py",
        text: "args.plot_python",
        runs: &["python3"],
        wraps: false,
        why: "a python3 with matplotlib (bench.sh finds or installs python3-matplotlib)",
    },
    Dynamic {
        file: "perf/bare-metal/check_egress.py",
        text: "binary",
        runs: &[],
        wraps: false,
        why: "the spillway binary this workspace builds",
    },
    Dynamic {
        file: "perf/bare-metal/check_egress.py",
        text: "lua",
        runs: &["lua5.4"],
        wraps: false,
        why: "lua_binary(): the first of lua5.4, lua5.3, lua on PATH",
    },
    Dynamic {
        file: "perf/bare-metal/check_egress.py",
        text: "os.path.join(ROOT, \"perf\", \"bare-metal\", \"dut-config.sh\")",
        runs: &[],
        wraps: false,
        why: "a script of this repository (scanned itself)",
    },
    Dynamic {
        file: "scripts/package.sh",
        text: "\"$bin\"",
        runs: &[],
        wraps: false,
        why: "the spillway binary of the release build it packages",
    },
    Dynamic {
        file: "tests/package.rs",
        text: "repo().join(\"scripts/package.sh\")",
        runs: &[],
        wraps: false,
        why: "a script of this repository (scanned itself)",
    },
    Dynamic {
        file: "perf/flood.sh",
        text: "\"$target/flood\"",
        runs: &[],
        wraps: false,
        why: "the flood binary this workspace builds (perf/packetset)",
    },
    Dynamic {
        file: "crates/dataplane/tests/mtu.rs",
        text: "py",
        runs: &["python3"],
        wraps: false,
        why: "the first of python3 and /usr/bin/python3 that has scapy",
    },
    Dynamic {
        file: "perf/packetset/src/bin/flood.rs",
        text: "&args.spillway",
        runs: &[],
        wraps: false,
        why: "the spillway binary this workspace builds (perf/flood.sh passes its path)",
    },
    Dynamic {
        file: "scripts/deploy/bind-nics.sh",
        text: "\"$@\"",
        runs: &[],
        wraps: false,
        why: "dry_or_run CMD… runs its arguments (or prints them with --dry-run); its callers \
              are scanned (dry_or_run is a wrapper)",
    },
    Dynamic {
        file: "tests/deploy.rs",
        text: "&path",
        runs: &[],
        wraps: false,
        why: "bind-nics.sh and isolate-cpus.sh of scripts/deploy (scanned themselves)",
    },
    Dynamic {
        file: "crates/health/examples/probe_10k.rs",
        text: "exe",
        runs: &[],
        wraps: false,
        why: "the example re-runs its own executable",
    },
];

struct Dynamic {
    file: &'static str,
    text: &'static str,
    runs: &'static [&'static str],
    /// A shell wrapper: what follows it is a command (run through exec).
    wraps: bool,
    why: &'static str,
}

/// Shell commands that run another command: name, whether they run it
/// through exec (so a shell builtin name means the program), how many
/// positional arguments come before the command.
const SHELL_WRAPPERS: &[(&str, bool, usize)] = &[
    ("exec", true, 0),
    ("env", true, 0),
    ("sudo", true, 0),
    ("xargs", true, 0),
    ("timeout", true, 1),
    ("nice", true, 0),
    ("setsid", true, 0),
    ("setpriv", true, 0),
    // scripts/lib.sh: as_root CMD…
    ("as_root", false, 0),
    // scripts/deploy/bind-nics.sh: dry_or_run CMD…
    ("dry_or_run", true, 0),
    // scripts/lab.sh: nsx NS CMD… (ip netns exec)
    ("nsx", true, 1),
    // scripts/demo.sh: progress LABEL CMD…
    ("progress", true, 1),
];

/// Python calls whose first argument is a command (list): the benchmark
/// harness's `sh` helper (perf/benchlib/machine.py) runs `subprocess.run(cmd)`.
const PY_RUNNERS: &[&str] = &[
    "subprocess.run(",
    "subprocess.Popen(",
    "subprocess.call(",
    "subprocess.check_call(",
    "subprocess.check_output(",
    "os.system(",
    "os.execv(",
    "os.execvp(",
    "sh(",
];

/// Bash builtins (as commands of a shell, not of an exec-style wrapper).
const SHELL_BUILTINS: &str = ". : [ alias break builtin cd continue declare echo eval exec exit \
     export false getopts hash kill let local mapfile popd printf pushd pwd read readarray return \
     set shift shopt source test trap true type typeset ulimit umask unset wait";

/// Where the scan found a command.
#[derive(Clone, Debug)]
struct Use {
    file: String,
    line: usize,
    name: String,
}

#[derive(Default, Debug)]
struct Scan {
    uses: Vec<Use>,
    /// Problems the scan itself found (an unknown dynamic command word).
    problems: Vec<String>,
    /// `DYNAMIC` entries that matched something.
    dynamic_used: BTreeSet<(String, String)>,
}

impl Scan {
    fn add(&mut self, file: &str, line: usize, name: &str) {
        self.uses.push(Use {
            file: file.to_owned(),
            line,
            name: name.to_owned(),
        });
    }

    /// A command word that is not a plain name; whether it is a wrapper.
    fn dynamic(&mut self, file: &str, line: usize, text: &str) -> bool {
        let text = text.trim();
        // A path to a program: scripts of this repository and the binaries the
        // workspace builds need nothing; a system path names its program.
        let unquoted = text.trim_matches('"');
        if let Some((_, base)) = unquoted.rsplit_once('/') {
            if !base.is_empty() && !base.contains(['$', '"', '\'', '`', '(', ')', '{', '}']) {
                if base == "spillway" || base == "packetset" || repo_has_file(base) {
                    return false;
                }
                if !unquoted.contains('$') {
                    self.add(file, line, base);
                    return false;
                }
            }
        }
        match DYNAMIC.iter().find(|d| d.file == file && d.text == text) {
            Some(d) => {
                self.dynamic_used
                    .insert((d.file.to_owned(), d.text.to_owned()));
                for r in d.runs {
                    self.add(file, line, r);
                }
                d.wraps
            }
            None => {
                self.problems.push(format!(
                    "{file}:{line}: runs `{text}`, which the scan cannot read: add it to DYNAMIC \
                     in tests/commands.rs with the commands it stands for"
                ));
                false
            }
        }
    }
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Whether a file named `name` is part of the repository (outside target/).
fn repo_has_file(name: &str) -> bool {
    source_files(&root())
        .iter()
        .any(|p| p.file_name().is_some_and(|f| f == name))
}

/// Every source file of the repository, skipping build output and VCS data.
fn source_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let p = e.path();
        let name = e.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.') || name == "target" || name == "corpus" || name == "artifacts" {
            continue;
        }
        if p.is_dir() {
            out.extend(source_files(&p));
        } else {
            out.push(p);
        }
    }
    out.sort();
    out
}

fn line_of(text: &str, pos: usize) -> usize {
    text[..pos.min(text.len())].matches('\n').count() + 1
}

// ---------------------------------------------------------------------------
// Rust

/// The text of a call's argument list starting after the opening `(` or `[`
/// at `start`: up to the matching close, skipping string literals.
fn balanced(s: &str, start: usize, open: char, close: char) -> Option<(String, usize)> {
    let mut depth = 1;
    let mut in_str = false;
    let mut escaped = false;
    for (i, c) in s[start..].char_indices() {
        if in_str {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_str = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_str = true,
            c if c == open => depth += 1,
            c if c == close => {
                depth -= 1;
                if depth == 0 {
                    return Some((s[start..start + i].to_owned(), start + i + 1));
                }
            }
            _ => {}
        }
    }
    None
}

/// Splits at commas that are not inside brackets or strings.
fn top_level_items(s: &str) -> Vec<String> {
    let (mut items, mut cur, mut depth, mut in_str, mut escaped) =
        (Vec::new(), String::new(), 0i32, false, false);
    for c in s.chars() {
        if in_str {
            cur.push(c);
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_str = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => {
                in_str = true;
                cur.push(c);
            }
            '(' | '[' | '{' => {
                depth += 1;
                cur.push(c);
            }
            ')' | ']' | '}' => {
                depth -= 1;
                cur.push(c);
            }
            ',' if depth == 0 => items.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    if !cur.trim().is_empty() {
        items.push(cur);
    }
    items.into_iter().map(|i| i.trim().to_owned()).collect()
}

/// The value of a plain Rust string literal (`"abc"`), if `s` is one.
fn rust_literal(s: &str) -> Option<&str> {
    let v = s.strip_prefix('"')?.strip_suffix('"')?;
    (!v.contains(['"', '\\'])).then_some(v)
}

fn scan_rust(file: &str, text: &str, scan: &mut Scan) {
    let mut from = 0;
    while let Some(off) = text[from..].find("Command::new(") {
        let at = from + off;
        let open = at + "Command::new(".len();
        from = open;
        let line = line_of(text, at);
        let Some((arg, _)) = balanced(text, open, '(', ')') else {
            scan.problems
                .push(format!("{file}:{line}: unbalanced Command::new("));
            continue;
        };
        let arg = arg.trim();
        let name = match rust_literal(arg) {
            Some(lit) => lit.rsplit('/').next().unwrap_or(lit).to_owned(),
            None if arg.starts_with("env!(\"CARGO_BIN_EXE_") => continue,
            None => {
                scan.dynamic(file, line, arg);
                continue;
            }
        };
        scan.add(file, line, &name);
    }
    // What `ip netns exec NS CMD` runs: every `.args([…])` list that starts
    // with "netns", "exec". Any other "exec" literal is a way of running
    // programs the scan cannot follow.
    let mut exec_lists = 0;
    let mut from = 0;
    while let Some(off) = text[from..].find(".args([") {
        let open = from + off + ".args([".len();
        from = open;
        let line = line_of(text, open);
        let items = balanced(text, open, '[', ']')
            .map(|(s, _)| top_level_items(&s))
            .unwrap_or_default();
        let lits: Vec<Option<&str>> = items.iter().map(|i| rust_literal(i)).collect();
        if lits.first() == Some(&Some("netns")) && lits.get(1) == Some(&Some("exec")) {
            exec_lists += 1;
            match lits.get(3) {
                Some(Some(cmd)) => scan.add(file, line, cmd),
                // A binary of this workspace, which cargo builds.
                Some(None)
                    if items
                        .get(3)
                        .is_some_and(|i| i.starts_with("env!(\"CARGO_BIN_EXE_")) => {}
                _ => scan.problems.push(format!(
                    "{file}:{line}: cannot tell what `ip netns exec` runs: name the program as a \
                     string literal, fourth in .args([…])"
                )),
            }
        }
    }
    if text.matches("\"exec\"").count() > exec_lists {
        scan.problems.push(format!(
            "{file}: runs something through \"exec\" other than in .args([\"netns\", \"exec\", NS, \
             \"program\", …]): write it that way so that the scan sees the program"
        ));
    }
}

// ---------------------------------------------------------------------------
// Python

fn scan_python(file: &str, text: &str, scan: &mut Scan) {
    for runner in PY_RUNNERS {
        let mut from = 0;
        while let Some(off) = text[from..].find(runner) {
            let at = from + off;
            from = at + runner.len();
            // `sh(` must be a call of the name sh, not of `fresh(` or `def sh(`.
            let before = text[..at].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '.')
                || text[..at].ends_with("def ")
            {
                continue;
            }
            let line = line_of(text, at);
            let Some((args, _)) = balanced(text, from, '(', ')') else {
                continue;
            };
            let first = top_level_items(&args)
                .into_iter()
                .next()
                .unwrap_or_default();
            let cmd = match first.strip_prefix('[') {
                Some(list) => top_level_items(list.trim_end_matches(']'))
                    .into_iter()
                    .next()
                    .unwrap_or_default(),
                None => first,
            };
            match py_literal(&cmd) {
                Some(c) => {
                    let c = c.rsplit('/').next().unwrap_or(c).to_owned();
                    scan.add(file, line, &c);
                }
                None => {
                    scan.dynamic(file, line, &cmd);
                }
            }
        }
    }
    let mut from = 0;
    while let Some(off) = text[from..].find("shutil.which(") {
        let at = from + off;
        from = at + "shutil.which(".len();
        if let Some((arg, _)) = balanced(text, from, '(', ')') {
            if let Some(c) = py_literal(arg.trim()) {
                scan.add(file, line_of(text, at), c);
            }
        }
    }
}

fn py_literal(s: &str) -> Option<&str> {
    let s = s.trim();
    for q in ['"', '\''] {
        if let Some(v) = s.strip_prefix(q).and_then(|v| v.strip_suffix(q)) {
            if !v.contains(['"', '\'', '\\', '{']) {
                return Some(v);
            }
        }
    }
    None
}

// ---------------------------------------------------------------------------
// Shell: a small lexer (quotes, expansions, command substitutions,
// heredocs, redirections, arrays, `[[ ]]`, `(( ))`) and a walk over its
// tokens that finds each simple command's command word.

#[derive(Debug, Clone)]
enum Tok {
    /// A word: its text as written, its value when it has no expansion, its
    /// line.
    Word(String, Option<String>, usize),
    /// An operator: `;` `;;` `&` `&&` `|` `||` `(` `)` or a newline.
    Op(&'static str),
}

/// Command substitutions and other nested shell text found while lexing:
/// (text, first line).
type Subs = Vec<(String, usize)>;

struct Lexer<'a> {
    s: &'a [char],
    i: usize,
    line: usize,
    subs: Subs,
    heredocs: Vec<(String, bool, bool)>,
}

impl<'a> Lexer<'a> {
    fn new(s: &'a [char], line: usize) -> Lexer<'a> {
        Lexer {
            s,
            i: 0,
            line,
            subs: Vec::new(),
            heredocs: Vec::new(),
        }
    }

    fn peek(&self, k: usize) -> Option<char> {
        self.s.get(self.i + k).copied()
    }

    fn starts(&self, p: &str) -> bool {
        p.chars().enumerate().all(|(k, c)| self.peek(k) == Some(c))
    }

    /// Index just after the `close` matching an `open` already consumed,
    /// skipping quotes; the text in between.
    fn until_close(&mut self, open: char, close: char) -> String {
        let (start, mut depth) = (self.i, 1);
        while let Some(c) = self.peek(0) {
            match c {
                '\\' => self.i += 1,
                // A comment (a `#` that starts a word) runs to the end of the line.
                '#' if self.i > start && self.s[self.i - 1].is_whitespace() => {
                    while self.peek(1).is_some_and(|c| c != '\n') {
                        self.i += 1;
                    }
                }
                '\'' => {
                    self.i += 1;
                    while self.peek(0).is_some_and(|c| c != '\'') {
                        self.bump();
                    }
                }
                '"' => {
                    self.i += 1;
                    while let Some(c) = self.peek(0) {
                        if c == '\\' {
                            self.i += 1;
                        } else if c == '"' {
                            break;
                        }
                        self.bump();
                    }
                }
                '\n' => self.line += 1,
                c if c == open => depth += 1,
                c if c == close => {
                    depth -= 1;
                    if depth == 0 {
                        let inner: String = self.s[start..self.i].iter().collect();
                        self.i += 1;
                        return inner;
                    }
                }
                _ => {}
            }
            self.i += 1;
        }
        self.s[start..].iter().collect()
    }

    fn bump(&mut self) {
        if self.peek(0) == Some('\n') {
            self.line += 1;
        }
        self.i += 1;
    }

    /// `$…` at the cursor: substitutions go to `subs`.
    fn dollar(&mut self, raw: &mut String) {
        let line = self.line;
        let start = self.i;
        self.i += 1;
        match self.peek(0) {
            Some('(') if self.peek(1) == Some('(') => {
                self.i += 2;
                let inner = self.until_close('(', ')');
                self.i += 1; // the second `)`
                // Arithmetic may hold substitutions: $(( $(cmd) + 1 )).
                self.subs.extend(subs_in_text(&inner, line));
            }
            Some('(') => {
                self.i += 1;
                let inner = self.until_close('(', ')');
                self.subs.push((inner, line));
            }
            Some('{') => {
                self.i += 1;
                let inner = self.until_close('{', '}');
                self.subs.extend(subs_in_text(&inner, line));
            }
            Some('\'') => {
                self.i += 1;
                while let Some(c) = self.peek(0) {
                    if c == '\\' {
                        self.i += 1;
                    } else if c == '\'' {
                        break;
                    }
                    self.bump();
                }
                self.i += 1;
            }
            Some(c) if c.is_alphanumeric() || c == '_' => {
                while self
                    .peek(0)
                    .is_some_and(|c| c.is_alphanumeric() || c == '_')
                {
                    self.i += 1;
                }
            }
            Some(_) => self.i += 1,
            None => {}
        }
        raw.extend(&self.s[start..self.i.min(self.s.len())]);
    }

    /// One word at the cursor.
    fn word(&mut self) -> Tok {
        let line = self.line;
        let (mut raw, mut value, mut literal) = (String::new(), String::new(), true);
        while let Some(c) = self.peek(0) {
            match c {
                ' ' | '\t' | '\n' | ';' | '&' | '|' | '<' | '>' | ')' => break,
                '(' => {
                    // An array assignment: name=( … ) or name+=( … ).
                    if is_assignment(&raw) {
                        self.i += 1;
                        let inner = self.until_close('(', ')');
                        // The elements are words (with comments between).
                        let chars: Vec<char> = inner.chars().collect();
                        let (_, subs) = Lexer::new(&chars, line).tokens();
                        self.subs.extend(subs);
                        raw.push_str(&format!("({inner})"));
                        literal = false;
                        continue;
                    }
                    break;
                }
                '\\' => {
                    self.i += 1;
                    if let Some(c) = self.peek(0) {
                        if c != '\n' {
                            raw.push(c);
                            value.push(c);
                        }
                        self.bump();
                    }
                }
                '\'' => {
                    self.i += 1;
                    while let Some(c) = self.peek(0) {
                        if c == '\'' {
                            break;
                        }
                        value.push(c);
                        self.bump();
                    }
                    self.i += 1;
                    raw.push('\'');
                }
                '"' => {
                    raw.push('"');
                    self.i += 1;
                    while let Some(c) = self.peek(0) {
                        match c {
                            '"' => break,
                            '\\' => {
                                self.i += 1;
                                if let Some(c) = self.peek(0) {
                                    value.push(c);
                                    raw.push(c);
                                }
                                self.bump();
                            }
                            '$' => {
                                literal = false;
                                self.dollar(&mut raw);
                            }
                            '`' => {
                                literal = false;
                                self.backtick();
                            }
                            c => {
                                value.push(c);
                                raw.push(c);
                                self.bump();
                            }
                        }
                    }
                    self.i += 1;
                    raw.push('"');
                }
                '$' => {
                    literal = false;
                    self.dollar(&mut raw);
                }
                '`' => {
                    literal = false;
                    self.backtick();
                }
                c => {
                    raw.push(c);
                    value.push(c);
                    self.i += 1;
                }
            }
        }
        Tok::Word(raw, literal.then_some(value), line)
    }

    fn backtick(&mut self) {
        let line = self.line;
        self.i += 1;
        let start = self.i;
        while self.peek(0).is_some_and(|c| c != '`') {
            if self.peek(0) == Some('\\') {
                self.i += 1;
            }
            self.bump();
        }
        self.subs.push((
            self.s[start..self.i.min(self.s.len())].iter().collect(),
            line,
        ));
        self.i += 1;
    }

    fn skip_blanks(&mut self) {
        while let Some(c) = self.peek(0) {
            if c == ' ' || c == '\t' {
                self.i += 1;
            } else if c == '\\' && self.peek(1) == Some('\n') {
                self.i += 2;
                self.line += 1;
            } else {
                break;
            }
        }
    }

    /// The heredoc bodies that start after a newline.
    fn heredoc_bodies(&mut self) {
        for (delim, strip, quoted) in std::mem::take(&mut self.heredocs) {
            let start_line = self.line;
            let mut body = String::new();
            loop {
                let ls = self.i;
                while self.peek(0).is_some_and(|c| c != '\n') {
                    self.i += 1;
                }
                let l: String = self.s[ls..self.i].iter().collect();
                if self.peek(0).is_some() {
                    self.i += 1;
                    self.line += 1;
                }
                let cmp = if strip {
                    l.trim_start_matches('\t')
                } else {
                    &l
                };
                if cmp == delim || self.peek(0).is_none() {
                    break;
                }
                body.push_str(&l);
                body.push('\n');
            }
            if !quoted {
                self.subs.extend(subs_in_text(&body, start_line));
            }
        }
    }

    fn tokens(mut self) -> (Vec<Tok>, Subs) {
        let mut toks = Vec::new();
        loop {
            self.skip_blanks();
            let Some(c) = self.peek(0) else { break };
            match c {
                '#' => {
                    while self.peek(0).is_some_and(|c| c != '\n') {
                        self.i += 1;
                    }
                }
                '\n' => {
                    self.i += 1;
                    self.line += 1;
                    toks.push(Tok::Op("\n"));
                    self.heredoc_bodies();
                }
                '(' if self.peek(1) == Some('(') => {
                    let line = self.line;
                    self.i += 2;
                    let inner = self.until_close('(', ')');
                    self.i += 1;
                    self.subs.extend(subs_in_text(&inner, line));
                    toks.push(Tok::Word("((".into(), Some("((".into()), line));
                }
                '[' if self.starts("[[ ") => {
                    let line = self.line;
                    let start = self.i;
                    while self.peek(0).is_some() && !self.starts(" ]]") {
                        self.bump();
                    }
                    self.i += 3;
                    let inner: String = self.s[start..self.i.min(self.s.len())].iter().collect();
                    self.subs.extend(subs_in_text(&inner, line));
                    toks.push(Tok::Word("[[".into(), Some("[[".into()), line));
                }
                ';' | '&' | '|' | '(' | ')' => {
                    let ops: [&'static str; 9] = [";;", "&&", "||", "|&", ";", "&", "|", "(", ")"];
                    let op = ops.into_iter().find(|o| self.starts(o)).unwrap_or(";");
                    if op == "&" && self.peek(1) == Some('>') {
                        self.redirection();
                        continue;
                    }
                    self.i += op.len();
                    toks.push(Tok::Op(op));
                }
                '<' | '>' => {
                    if self.peek(1) == Some('(') {
                        // Process substitution: <(cmd) >(cmd).
                        let line = self.line;
                        self.i += 2;
                        let inner = self.until_close('(', ')');
                        self.subs.push((inner, line));
                        toks.push(Tok::Word("<(…)".into(), None, line));
                    } else {
                        self.redirection();
                    }
                }
                c if c.is_ascii_digit() && {
                    let mut k = 0;
                    while self.peek(k).is_some_and(|c| c.is_ascii_digit()) {
                        k += 1;
                    }
                    matches!(self.peek(k), Some('<' | '>'))
                } =>
                {
                    while self.peek(0).is_some_and(|c| c.is_ascii_digit()) {
                        self.i += 1;
                    }
                    self.redirection();
                }
                _ => {
                    let w = self.word();
                    toks.push(w);
                }
            }
        }
        (toks, self.subs)
    }

    /// A redirection at the cursor: the operator and its target word (a
    /// heredoc's delimiter is remembered for the next newline).
    fn redirection(&mut self) {
        for op in [
            "<<<", "<<-", "<<", "&>>", "&>", ">>", ">&", "<&", ">|", "<>", ">", "<",
        ] {
            if self.starts(op) {
                self.i += op.len();
                self.skip_blanks();
                if let Tok::Word(raw, value, _) = self.word() {
                    if op == "<<" || op == "<<-" {
                        let quoted = raw.contains(['\'', '"', '\\']);
                        let delim = value.unwrap_or_else(|| raw.replace(['\'', '"', '\\'], ""));
                        self.heredocs.push((delim, op == "<<-", quoted));
                    }
                }
                return;
            }
        }
        self.i += 1;
    }
}

/// Command substitutions inside text that is expanded like a double-quoted
/// string (heredoc bodies, `${…}`, arithmetic).
fn subs_in_text(text: &str, line: usize) -> Subs {
    let chars: Vec<char> = text.chars().collect();
    let mut lx = Lexer::new(&chars, line);
    while let Some(c) = lx.peek(0) {
        match c {
            '\\' => lx.i += 2,
            '$' => {
                let mut raw = String::new();
                lx.dollar(&mut raw);
            }
            '`' => lx.backtick(),
            _ => lx.bump(),
        }
    }
    lx.subs
}

fn is_assignment(raw: &str) -> bool {
    let Some(name) = raw.strip_suffix('=') else {
        return false;
    };
    let name = name.strip_suffix('+').unwrap_or(name);
    let name = name.split('[').next().unwrap_or("");
    !name.is_empty()
        && name.chars().all(|c| c.is_alphanumeric() || c == '_')
        && !name.starts_with(|c: char| c.is_ascii_digit())
}

/// Where the walk over one simple command is.
#[derive(Clone, Copy, PartialEq, Debug)]
enum At {
    /// Expecting the command word (after keywords, assignments, wrappers);
    /// `exec` once an exec-style wrapper came (builtin names are programs).
    Command { exec: bool },
    /// A wrapper's options and `n` positional arguments before the command.
    WrapperArgs { exec: bool, n: usize },
    /// After the builtin `command`: `-v` looks names up, else a command.
    CommandBuiltin,
    /// `ip`: the argument at position `k` of `netns exec NS`.
    Ip(usize),
    /// `command -v NAME…`: names looked up.
    LookUp,
    /// `trap 'text' …`: the first argument is shell.
    Trap,
    /// The rest of the command is arguments.
    Args,
    /// `case WORD` until `in`.
    CaseHeader,
}

fn scan_shell(
    file: &str,
    text: &str,
    first_line: usize,
    functions: &BTreeSet<String>,
    scan: &mut Scan,
) {
    let chars: Vec<char> = text.chars().collect();
    let (toks, subs) = Lexer::new(&chars, first_line).tokens();
    let mut at = At::Command { exec: false };
    // Case arms: how many `case` are open, and whether a pattern is expected.
    let (mut cases, mut pattern) = (0usize, false);
    let mut nested: Subs = Vec::new();
    for t in toks {
        let (raw, value, line) = match t {
            Tok::Op(op) => {
                if pattern {
                    if op == ")" {
                        pattern = false;
                        at = At::Command { exec: false };
                    }
                    continue;
                }
                if op == ";;" && cases > 0 {
                    pattern = true;
                }
                at = At::Command { exec: false };
                continue;
            }
            Tok::Word(raw, value, line) => (raw, value, line),
        };
        let v = value.as_deref();
        if pattern {
            if v == Some("esac") {
                pattern = false;
                cases = cases.saturating_sub(1);
                at = At::Args;
            }
            continue;
        }
        let option_or_assignment =
            v.is_some_and(|w| w.starts_with('-')) || is_assignment_word(&raw);
        at = match at {
            At::Args => At::Args,
            At::CaseHeader => {
                if v == Some("in") {
                    cases += 1;
                    pattern = true;
                }
                At::CaseHeader
            }
            At::Trap => {
                if let Some(v) = v {
                    nested.push((v.to_owned(), line));
                }
                At::Args
            }
            At::LookUp => {
                match v {
                    Some(v) if !v.starts_with('-') => scan.add(file, line, v),
                    _ => {}
                }
                At::LookUp
            }
            At::Ip(k) => match (k, v) {
                (0, Some("netns")) | (1, Some("exec")) => At::Ip(k + 1),
                (2, _) => At::Command { exec: true },
                _ => At::Args,
            },
            At::WrapperArgs { exec, n } if option_or_assignment => At::WrapperArgs { exec, n },
            At::WrapperArgs { exec, n } if n > 0 => At::WrapperArgs { exec, n: n - 1 },
            At::CommandBuiltin if matches!(v, Some("-v" | "-V")) => At::LookUp,
            At::WrapperArgs { exec, .. } => {
                command_word(file, &raw, v, line, exec, functions, scan)
            }
            At::CommandBuiltin => command_word(file, &raw, v, line, false, functions, scan),
            At::Command { exec } => match v {
                _ if is_assignment_word(&raw) => At::Command { exec },
                Some(
                    "if" | "then" | "else" | "elif" | "do" | "while" | "until" | "!" | "{" | "time",
                ) => At::Command { exec },
                Some("fi" | "done" | "}" | "[[" | "((" | "function" | "for" | "select") => At::Args,
                Some("esac") => {
                    cases = cases.saturating_sub(1);
                    At::Args
                }
                Some("case") => At::CaseHeader,
                _ => command_word(file, &raw, v, line, exec, functions, scan),
            },
        };
    }
    for (t, l) in subs.into_iter().chain(nested) {
        scan_shell(file, &t, l, functions, scan);
    }
}

/// The command word of a simple command: records the program it runs and
/// says what comes next.
fn command_word(
    file: &str,
    raw: &str,
    value: Option<&str>,
    line: usize,
    exec: bool,
    functions: &BTreeSet<String>,
    scan: &mut Scan,
) -> At {
    let Some(w) = value.filter(|w| !w.contains('/')) else {
        let wraps = scan.dynamic(file, line, value.unwrap_or(raw));
        return if wraps {
            At::Command { exec: true }
        } else {
            At::Args
        };
    };
    if !exec && w == "command" {
        return At::CommandBuiltin;
    }
    if !exec && w == "trap" {
        return At::Trap;
    }
    // Builtins and functions run in the shell; after an exec-style wrapper the
    // name is a program.
    let in_shell =
        !exec && (SHELL_BUILTINS.split_whitespace().any(|b| b == w) || functions.contains(w));
    if !in_shell {
        scan.add(file, line, w);
    }
    if let Some(&(_, e, n)) = SHELL_WRAPPERS.iter().find(|(name, ..)| *name == w) {
        return At::WrapperArgs { exec: e, n };
    }
    if w == "ip" {
        return At::Ip(0);
    }
    At::Args
}

fn is_assignment_word(w: &str) -> bool {
    w.split_once('=')
        .is_some_and(|(name, _)| is_assignment(&format!("{name}=")))
}

/// Names of the shell functions the scripts define.
fn shell_functions(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|l| {
            let l = l.trim_start();
            let (name, rest) = l.split_once("()")?;
            let name = name.trim();
            (rest.trim_start().starts_with('{')
                && !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_alphanumeric() || c == '_' || c == '-'))
            .then(|| name.to_owned())
        })
        .collect()
}

// ---------------------------------------------------------------------------
// The scan of the repository and the package check.

fn scan_repository() -> Scan {
    let root = root();
    let files = source_files(&root);
    let rel = |p: &Path| {
        p.strip_prefix(&root)
            .unwrap_or(p)
            .to_string_lossy()
            .into_owned()
    };
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
    let is = |p: &Path, ext: &str| p.extension().is_some_and(|e| e == ext);
    let mut functions = BTreeSet::new();
    for f in files.iter().filter(|f| is(f, "sh")) {
        functions.extend(shell_functions(&read(f)));
    }
    let mut scan = Scan::default();
    for f in &files {
        let name = rel(f);
        // This file names programs in its tables and runs dpkg-query (dpkg is
        // essential); it is not scanned.
        if name == "tests/commands.rs" {
            continue;
        }
        let text = read(f);
        if is(f, "rs") {
            scan_rust(&name, &text, &mut scan);
        } else if is(f, "sh") {
            scan_shell(&name, &text, 1, &functions, &mut scan);
        } else if is(f, "py") {
            scan_python(&name, &text, &mut scan);
        }
    }
    scan.add("tests/commands.rs", 1, "dpkg-query");
    scan
}

/// The package names in `PACKAGES=( … )` of scripts/setup.sh (one array,
/// comments allowed).
fn setup_packages(setup: &str) -> Vec<String> {
    let Some(start) = setup.find("PACKAGES=(") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for l in setup[start + "PACKAGES=(".len()..].lines() {
        let l = l.split('#').next().unwrap_or("");
        let (l, end) = match l.split_once(')') {
            Some((l, _)) => (l, true),
            None => (l, false),
        };
        out.extend(l.split_whitespace().map(str::to_owned));
        if end {
            break;
        }
    }
    out
}

fn dpkg_query(args: &[String]) -> String {
    let out = Command::new("dpkg-query")
        .args(args)
        .output()
        .expect("run dpkg-query");
    // dpkg-query -S exits 1 when some path has no owner: the others are
    // still printed.
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// What dpkg knows of an installed package.
struct Installed {
    /// Priority "required" or essential: on every Debian system
    /// (debootstrap --variant=minbase).
    everywhere: bool,
    depends: Vec<String>,
}

/// Every installed package, from one dpkg-query.
fn installed_packages() -> BTreeMap<String, Installed> {
    let args = [
        "-W".to_owned(),
        "-f=${db:Status-Abbrev}\t${Package}\t${Priority}\t${Essential}\t${Depends}, ${Pre-Depends}\n"
            .to_owned(),
    ];
    dpkg_query(&args)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            if f.len() < 5 || !f[0].starts_with("ii") {
                return None;
            }
            let depends = f[4]
                .split([',', '|'])
                .filter_map(|d| d.split_whitespace().next())
                .map(|d| d.split(':').next().unwrap_or(d).to_owned())
                .collect();
            let everywhere = f[2] == "required" || f[3] == "yes";
            Some((
                f[1].to_owned(),
                Installed {
                    everywhere,
                    depends,
                },
            ))
        })
        .collect()
}

/// `pkgs` and the installed packages they depend on, recursively: what
/// `apt-get install --no-install-recommends pkgs` installs.
fn with_dependencies(pkgs: &[String], db: &BTreeMap<String, Installed>) -> BTreeSet<String> {
    let mut all: BTreeSet<String> = pkgs.iter().cloned().collect();
    let mut todo: Vec<String> = pkgs.to_vec();
    while let Some(p) = todo.pop() {
        for d in db.get(&p).map(|i| i.depends.as_slice()).unwrap_or_default() {
            if db.contains_key(d) && all.insert(d.clone()) {
                todo.push(d.clone());
            }
        }
    }
    all
}

/// Owners (package names) of each program, from the paths dpkg knows.
fn owners(names: &BTreeSet<String>) -> BTreeMap<String, BTreeSet<String>> {
    let mut paths: BTreeMap<String, String> = BTreeMap::new();
    for n in names {
        for dir in ["/usr/bin", "/usr/sbin", "/bin", "/sbin"] {
            let p = format!("{dir}/{n}");
            if let Ok(real) = std::fs::canonicalize(&p) {
                paths.insert(real.to_string_lossy().into_owned(), n.clone());
            }
            paths.insert(p, n.clone());
        }
    }
    let mut args = vec!["-S".to_owned()];
    args.extend(paths.keys().cloned());
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for l in dpkg_query(&args).lines() {
        if l.starts_with("diversion ") {
            continue;
        }
        let Some((pkgs, path)) = l.split_once(": ") else {
            continue;
        };
        if let Some(n) = paths.get(path.trim()) {
            for p in pkgs.split(", ") {
                let p = p.split(':').next().unwrap_or(p).trim();
                out.entry(n.clone()).or_default().insert(p.to_owned());
            }
        }
    }
    out
}

#[test]
fn every_program_the_repository_runs_is_installed_by_setup_sh() {
    let scan = scan_repository();
    assert!(
        scan.problems.is_empty(),
        "the scan for external commands found problems:\n  {}",
        scan.problems.join("\n  ")
    );
    let mut by_name: BTreeMap<&str, Vec<&Use>> = BTreeMap::new();
    for u in &scan.uses {
        by_name.entry(&u.name).or_default().push(u);
    }
    for must in [
        "ip",
        "ping",
        "curl",
        "python3",
        "ethtool",
        "kill",
        "sysctl",
        "dpdk-testpmd",
        "nft",
    ] {
        assert!(
            by_name.contains_key(must),
            "the scan no longer sees `{must}`: it lost track of what the sources run \
             (found: {:?})",
            by_name.keys().collect::<Vec<_>>()
        );
    }
    let stale: Vec<_> = DYNAMIC
        .iter()
        .filter(|d| {
            !scan
                .dynamic_used
                .contains(&(d.file.to_owned(), d.text.to_owned()))
        })
        .map(|d| format!("{}: {} ({})", d.file, d.text, d.why))
        .collect();
    let stale_exceptions: Vec<_> = NOT_FROM_DEBIAN
        .iter()
        .filter(|(n, _)| !by_name.contains_key(n))
        .map(|(n, _)| *n)
        .collect();
    assert!(
        stale.is_empty() && stale_exceptions.is_empty(),
        "entries of tests/commands.rs that nothing needs any more: remove them:\n  \
         DYNAMIC: {stale:?}\n  NOT_FROM_DEBIAN: {stale_exceptions:?}"
    );

    let names: BTreeSet<String> = by_name
        .keys()
        .filter(|n| !NOT_FROM_DEBIAN.iter().any(|(e, _)| e == *n))
        .map(|n| n.to_string())
        .collect();
    eprintln!("programs run by the repository: {names:?}");
    if Command::new("dpkg-query")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("NOTICE: no dpkg-query (not Debian): which packages provide them is not checked");
        return;
    }
    let setup =
        std::fs::read_to_string(root().join("scripts/setup.sh")).expect("read scripts/setup.sh");
    let packages = setup_packages(&setup);
    assert!(
        packages.len() >= 5,
        "cannot read PACKAGES=( … ) in scripts/setup.sh: {packages:?}"
    );
    let db = installed_packages();
    let not_installed: Vec<_> = packages.iter().filter(|p| !db.contains_key(*p)).collect();
    let provided_by_setup = with_dependencies(&packages, &db);
    let owners = owners(&names);
    let everywhere = |p: &String| db.get(p).is_some_and(|i| i.everywhere);
    let mut missing = Vec::new();
    for n in &names {
        let where_ = by_name[n.as_str()]
            .iter()
            .take(3)
            .map(|u| format!("{}:{}", u.file, u.line))
            .collect::<Vec<_>>()
            .join(", ");
        match owners.get(n) {
            None => missing.push(format!(
                "`{n}` (run by {where_}): no installed Debian package ships it in /usr/bin, \
                 /usr/sbin, /bin or /sbin; add the package that does (apt-file search bin/{n}) to \
                 PACKAGES in scripts/setup.sh and run scripts/setup.sh"
            )),
            Some(o)
                if o.iter()
                    .any(|p| provided_by_setup.contains(p) || everywhere(p)) => {}
            Some(o) => missing.push(format!(
                "`{n}` (run by {where_}) comes from {o:?}, which scripts/setup.sh does not \
                 install: add it to PACKAGES there"
            )),
        }
    }
    assert!(
        missing.is_empty(),
        "programs the tests, scripts or benchmarks run that scripts/setup.sh does not install \
         (setup.sh's PACKAGES not installed here: {not_installed:?}):\n  {}",
        missing.join("\n  ")
    );
}

/// The scan itself, on snippets: what it must find and what it must not.
#[test]
fn the_scan_finds_commands_in_shell_rust_and_python() {
    let sh = r#"#!/bin/bash
set -euo pipefail
say() { printf '%s\n' "$*"; }
die() { say "$*"; exit 1; }
# tcpdump in a comment is not run
x="$(cd "$(dirname "$0")" && pwd)"
PKGS=(tcpdump  # `tcpdump -i` (a comment)
      bird2)
if (( $(nproc) > 1 )) && [ -w /proc/sys ]; then
    nsx "$ns" ping -c 1 "$addr" >/dev/null 2>&1
fi
case "$1" in
    up|down) lsof -i ;;
    *) say "usage" ;;
esac
ip netns exec spw1 tc qdisc show | grep -q x || true
cat >"$d/x.toml" <<TOML
name = "$(hostname)"
TOML
cat <<'EOF'
$(not-run)
EOF
ip netns pids x | xargs -r kill -9
command -v nft >/dev/null || die "no nft"
env DEBIAN_FRONTEND=noninteractive apt-get install -y foo
trap 'rm -rf "$work"' EXIT
mapfile -t t < <(findmnt -n)
[[ "$m" =~ ^([0-9]{2}:){5}$ ]] || { echo bad; exit 2; }
n=$(( $(tr -cd ',' <<<"$w" | wc -c) + 1 ))
"#;
    let mut scan = Scan::default();
    let mut functions = shell_functions(sh);
    functions.insert("nsx".into());
    scan_shell("x.sh", sh, 1, &functions, &mut scan);
    let found: BTreeSet<&str> = scan.uses.iter().map(|u| u.name.as_str()).collect();
    let want = [
        "dirname", "nproc", "ping", "lsof", "ip", "tc", "grep", "cat", "hostname", "xargs", "kill",
        "nft", "env", "apt-get", "rm", "findmnt", "tr", "wc",
    ];
    let want: BTreeSet<&str> = want.into_iter().collect();
    assert_eq!(found, want, "problems: {:?}", scan.problems);
    assert!(scan.problems.is_empty(), "{:?}", scan.problems);

    let rs = r#"
        let a = Command::new("tcpdump").arg("-i").output();
        let mut b = Command::new("ip");
        b.args(["netns", "exec", &ns, "bird", "-c"]).status();
        let c = Command::new("/usr/sbin/nft").status();
        let d = Command::new(env!("CARGO_BIN_EXE_spillway")).status();
        let e = Command::new(program).status();
        let f = Command::new("ip").arg("netns").arg("exec").arg(&ns).arg("tc").status();
    "#;
    let mut scan = Scan::default();
    scan_rust("x.rs", rs, &mut scan);
    let found: BTreeSet<&str> = scan.uses.iter().map(|u| u.name.as_str()).collect();
    assert_eq!(
        found,
        ["tcpdump", "ip", "bird", "nft"].into_iter().collect()
    );
    assert_eq!(
        scan.problems.len(),
        2,
        "`program` and `.arg(\"exec\")` are not readable: {:?}",
        scan.problems
    );

    let py = r#"
def sh(cmd):
    return subprocess.run(cmd, capture_output=True)
lscpu = sh(["lscpu"])
subprocess.Popen(
    ["tcpdump", "-i", "x"], stdout=subprocess.PIPE)
fresh(["not-a-command"])
t = shutil.which("dpdk-testpmd") or "x"
"#;
    let mut scan = Scan::default();
    scan_python("x.py", py, &mut scan);
    let found: BTreeSet<&str> = scan.uses.iter().map(|u| u.name.as_str()).collect();
    assert_eq!(
        found,
        ["lscpu", "tcpdump", "dpdk-testpmd"].into_iter().collect()
    );
    assert_eq!(
        scan.problems.len(),
        1,
        "`cmd` is not readable: {:?}",
        scan.problems
    );
}
