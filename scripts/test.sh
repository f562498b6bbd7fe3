#!/usr/bin/env bash
# The whole test suite, as CI runs it: set-up, formatting, lints, every test
# (unit, property, integration on DPDK virtual devices and network
# namespaces), and a short fuzz smoke.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/lib.sh

start=$SECONDS
scripts/setup.sh
ensure_cargo

say "commits: subjects, scopes, bodies (scripts/check-commits.sh)"
scripts/check-commits.sh --self-test
scripts/check-commits.sh

say "cargo fmt --check"
cargo fmt --all -- --check

say "cargo clippy (all targets, warnings are errors)"
cargo clippy --workspace --all-targets --quiet -- -D warnings
# The flow table's shuttle build (its test needs the feature, so the run above skips it).
cargo clippy -p flowtable --all-targets --features shuttle --quiet -- -D warnings

# The crates of decisions without I/O, built alone: their clippy.toml refuses
# sockets, clocks, threads and files, and without its `probers` feature the
# health crate has no tokio, rustls or socket2 to import; the management
# core's decisions (control-core) stand on no runtime, socket or metrics
# crate either (docs/architecture.md, "Rules the graph keeps").
say "decisions without I/O, built alone (health without probers, locality, control-core)"
cargo clippy -p health --no-default-features --quiet -- -D warnings
cargo clippy -p locality --quiet -- -D warnings
cargo clippy -p control-core --all-targets --quiet -- -D warnings
io_crates=$(cargo tree -p control-core -e normal --prefix none | awk '{print $1}' | sort -u |
    grep -xE 'tokio|socket2|nix|prometheus-client|rustls|mio' || true)
if [ -n "$io_crates" ]; then
    echo "control-core depends on I/O crates: $io_crates" >&2
    exit 1
fi

filter=()
if (( $(hugepages_free) < 64 )); then
    say "NOTICE: no free hugepages: the hugepage variants of the DPDK tests are skipped; the --no-huge ones run"
    filter=(-E 'not test(/^hugepages_/)')
fi
# The Debian package's release build, made here rather than inside the
# parallel test run below, where it would compete with the labs for the cores;
# tests/package.rs then only packs and installs it.
say "Debian package (scripts/package.sh --fast)"
scripts/package.sh --fast >/dev/null

say "cargo nextest (a process per test: DPDK's EAL initialises once per process)"
cargo nextest run --workspace --profile ci "${filter[@]}"

# The flow table built against shuttle's atomics: its concurrency tests under shuttle's
# schedulers (a feature of their own, which the workspace run must not enable).
say "cargo nextest: flowtable under shuttle"
cargo nextest run -p flowtable --profile ci --features shuttle

# The benchmark harness must keep working: one short case on the debug build
# (it prints figures and asserts none; it fails only if a run fails).
say "benchmark harness smoke (perf/bench.sh --quick --debug)"
perf/bench.sh --quick --debug

perf/check-profiles.sh

# The instruction budget (perf/budget.toml): fails when a row grows more than 2 % over its
# checked-in Ir/packet, printing where that row's instructions go.
say "instruction budget (perf/budget-check.sh)"
perf/budget-check.sh

if [ -x scripts/fuzz-smoke.sh ]; then
    say "fuzz smoke"
    scripts/fuzz-smoke.sh
fi

say "all checks passed in $((SECONDS - start)) s"
