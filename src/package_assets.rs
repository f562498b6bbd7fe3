//! `spillway package-assets --out-dir DIR` (hidden): the man pages and shell
//! completions of this binary's own command line, for the Debian package
//! (`scripts/package.sh` runs it on the release binary it packages).
//!
//! They are generated from the binary rather than by a build script: the
//! command line is defined across several crates (`decap`, `nva`, …) that a
//! build script could not see, and what the binary accepts is then exactly
//! what its pages and completions describe. The output depends on nothing but
//! the command line (no date, no host), so the same sources give the same
//! files.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap_complete::Shell;

/// Arguments of `spillway package-assets`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Where to write `man/` (section 1 pages) and `completions/` (bash, zsh,
    /// fish); created if missing.
    #[arg(long)]
    pub out_dir: PathBuf,
}

/// The shells whose completions the package ships, and the file name each
/// one's completion loader looks for.
const SHELLS: [(Shell, &str); 3] = [
    (Shell::Bash, "spillway"),
    (Shell::Zsh, "_spillway"),
    (Shell::Fish, "spillway.fish"),
];

/// Writes the man pages and the completions of `cmd` under `args.out_dir`.
pub fn run(args: &Args, cmd: clap::Command) -> Result<()> {
    let man = args.out_dir.join("man");
    let completions = args.out_dir.join("completions");
    for dir in [&man, &completions] {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    write_man_pages(cmd.clone(), &man)?;
    for (shell, file) in SHELLS {
        let mut text = Vec::new();
        clap_complete::generate(shell, &mut cmd.clone(), "spillway", &mut text);
        write(&completions.join(file), &text)?;
    }
    Ok(())
}

/// `spillway.1` and one page per visible subcommand (`spillway-status.1`,
/// `spillway-zone-health-status.1`, …), which `man spillway-status` finds;
/// each page's SYNOPSIS reads as typed (`spillway status`).
fn write_man_pages(cmd: clap::Command, dir: &Path) -> Result<()> {
    // As `clap_mangen::generate_to`, with the package's name and version on
    // every page's footer (not the subcommand's).
    let mut cmd = cmd.disable_help_subcommand(true);
    cmd.build();
    let source = format!("spillway {}", cmd.get_version().unwrap_or_default());
    let mut todo = vec![cmd];
    while let Some(cmd) = todo.pop() {
        todo.extend(cmd.get_subcommands().filter(|s| !s.is_hide_set()).cloned());
        clap_mangen::Man::new(cmd)
            .source(source.clone())
            .manual("Spillway")
            .generate_to(dir)
            .with_context(|| format!("writing man pages to {}", dir.display()))?;
    }
    Ok(())
}

fn write(path: &Path, text: &[u8]) -> Result<()> {
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small command line of the same shape: subcommands, a nested one and
    /// a hidden one.
    #[derive(clap::Parser)]
    #[command(name = "spillway", version = "1.2.3", about = "the tool")]
    struct TestCli {
        #[command(subcommand)]
        command: TestCommand,
    }

    #[derive(clap::Subcommand)]
    enum TestCommand {
        /// show the state
        Status {
            #[arg(long)]
            json: bool,
        },
        /// zones
        ZoneHealth {
            #[command(subcommand)]
            command: ZoneCommand,
        },
        #[command(hide = true)]
        Secret,
    }

    #[derive(clap::Subcommand)]
    enum ZoneCommand {
        /// take a zone out
        Remove,
    }

    fn cli() -> clap::Command {
        <TestCli as clap::CommandFactory>::command()
    }

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "spillway-package-assets-{}-{name}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    fn files(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn a_page_per_visible_subcommand_and_three_completions() {
        let out = tmp("pages");
        run(
            &Args {
                out_dir: out.clone(),
            },
            cli(),
        )
        .unwrap();
        assert_eq!(
            files(&out.join("man")),
            [
                "spillway-status.1",
                "spillway-zone-health-remove.1",
                "spillway-zone-health.1",
                "spillway.1"
            ]
        );
        let status = std::fs::read_to_string(out.join("man/spillway-status.1")).unwrap();
        assert!(status.contains("show the state"), "{status}");
        assert!(status.contains("json"), "{status}");
        assert!(
            status.contains(".TH spillway-status 1  \"spillway 1.2.3\" Spillway"),
            "{status}"
        );
        assert!(status.contains("spillway status"), "SYNOPSIS: {status}");
        let top = std::fs::read_to_string(out.join("man/spillway.1")).unwrap();
        assert!(top.contains("spillway\\-status(1)"), "SEE ALSO: {top}");
        assert!(!top.contains("secret"), "hidden: {top}");

        assert_eq!(
            files(&out.join("completions")),
            ["_spillway", "spillway", "spillway.fish"]
        );
        let bash = std::fs::read_to_string(out.join("completions/spillway")).unwrap();
        assert!(
            bash.contains("zone-health") && bash.contains("--json"),
            "{bash}"
        );
        let _ = std::fs::remove_dir_all(&out);
    }

    #[test]
    fn the_same_command_line_gives_the_same_files() {
        let (a, b) = (tmp("a"), tmp("b"));
        run(&Args { out_dir: a.clone() }, cli()).unwrap();
        run(&Args { out_dir: b.clone() }, cli()).unwrap();
        for sub in ["man", "completions"] {
            for f in files(&a.join(sub)) {
                assert_eq!(
                    std::fs::read(a.join(sub).join(&f)).unwrap(),
                    std::fs::read(b.join(sub).join(&f)).unwrap(),
                    "{sub}/{f}"
                );
            }
        }
        let _ = std::fs::remove_dir_all(&a);
        let _ = std::fs::remove_dir_all(&b);
    }

    #[test]
    fn an_unwritable_directory_is_an_error() {
        let out = tmp("file");
        std::fs::write(&out, "not a directory").unwrap();
        let err = run(
            &Args {
                out_dir: out.clone(),
            },
            cli(),
        )
        .unwrap_err();
        assert!(format!("{err:#}").contains("creating"), "{err:#}");
        let _ = std::fs::remove_file(&out);
    }
}
