//! Every shell script of the repository passes `shellcheck` (with the
//! settings of `.shellcheckrc`, following sourced files). A script is a file
//! ending in `.sh` or one whose `#!` line runs sh or bash, anywhere outside
//! build output and VCS data.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Whether a `#!` line runs a shell: `#!/bin/sh`, `#!/usr/bin/env bash -e`, ...
fn shell_shebang(first_line: &str) -> bool {
    let Some(rest) = first_line.strip_prefix("#!") else {
        return false;
    };
    let mut words = rest.split_whitespace();
    let mut prog = words.next().unwrap_or_default();
    if prog.ends_with("/env") {
        prog = words.find(|w| !w.starts_with('-')).unwrap_or_default();
    }
    matches!(
        prog.rsplit('/').next().unwrap_or_default(),
        "sh" | "bash" | "dash"
    )
}

fn scripts(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || name == "target" || name == "corpus" || name == "artifacts" {
            continue;
        }
        if p.is_dir() {
            scripts(&p, out);
            continue;
        }
        let is_script = name.ends_with(".sh")
            || std::fs::read(&p).is_ok_and(|b| {
                let first = b.split(|&c| c == b'\n').next().unwrap_or_default();
                shell_shebang(&String::from_utf8_lossy(first))
            });
        if is_script {
            out.push(p.strip_prefix(root()).unwrap().to_path_buf());
        }
    }
}

#[test]
fn every_shell_script_passes_shellcheck() {
    let mut files = Vec::new();
    scripts(&root(), &mut files);
    files.sort();
    for want in [
        "scripts/setup.sh",
        "scripts/lib.sh",
        "scripts/hooks/commit-msg",
        "perf/bench.sh",
    ] {
        assert!(
            files.iter().any(|f| f == Path::new(want)),
            "{want} not found among {files:?}"
        );
    }
    let out = Command::new("shellcheck")
        .arg("--external-sources")
        .arg("--format=gcc")
        .args(&files)
        .current_dir(root())
        .output()
        .expect("run shellcheck (Debian package shellcheck; scripts/setup.sh installs it)");
    assert!(
        out.status.success(),
        "shellcheck found problems in {} scripts (fix them, or disable a check on \
         its line with a reason: `# shellcheck disable=SCnnnn # why`):\n{}{}",
        files.len(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn shebangs_are_recognised() {
    assert!(shell_shebang("#!/bin/sh"));
    assert!(shell_shebang("#!/usr/bin/env bash"));
    assert!(shell_shebang("#!/usr/bin/env -S bash -e"));
    assert!(shell_shebang("#!/bin/bash -eu"));
    assert!(!shell_shebang("#!/usr/bin/env python3"));
    assert!(!shell_shebang("#!/usr/bin/lua5.4"));
    assert!(!shell_shebang("# bash"));
}
