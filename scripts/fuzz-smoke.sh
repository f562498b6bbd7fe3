#!/usr/bin/env bash
# Fuzz smoke: builds every cargo-fuzz target in fuzz/ and runs each one for an equal share of
# FUZZ_SMOKE_SECONDS (default 90 s in all), seeded with the committed corpus in
# fuzz/corpus/<target>/ (new inputs go to a temporary directory, the committed corpus is
# left alone). Prints the executions per target; exits non-zero if any target crashes.
#
#   scripts/fuzz-smoke.sh              # all targets, 90 s in all
#   FUZZ_SMOKE_SECONDS=30 scripts/fuzz-smoke.sh frame decap
#
# Targets are built optimised with debug assertions and overflow checks (-O -a) and the
# address sanitizer. Needs the nightly toolchain; installs cargo-fuzz if it is missing.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root/fuzz"
total="${FUZZ_SMOKE_SECONDS:-90}"
toolchain="${FUZZ_TOOLCHAIN:-nightly}"
# cargo-fuzz passes -Z flags (sanitizers, coverage); without a nightly toolchain
# let the stable one accept them rather than skip fuzzing.
if ! cargo "+$toolchain" --version >/dev/null 2>&1; then
    echo "fuzz-smoke: no $toolchain toolchain; using stable with RUSTC_BOOTSTRAP=1" >&2
    toolchain=stable
    export RUSTC_BOOTSTRAP=1
fi

if ! cargo "+$toolchain" fuzz --version >/dev/null 2>&1; then
    echo "fuzz-smoke: installing cargo-fuzz" >&2
    cargo install cargo-fuzz --locked
fi

if [ "$#" -gt 0 ]; then
    targets=("$@")
else
    mapfile -t targets < <(cargo "+$toolchain" fuzz list)
fi
n="${#targets[@]}"
per=$(( total / n ))
[ "$per" -ge 1 ] || per=1

echo "fuzz-smoke: building ${n} targets" >&2
cargo "+$toolchain" fuzz build -O -a

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
failed=()
printf '%-18s %12s %8s %s\n' target executions seconds result
for t in "${targets[@]}"; do
    mkdir -p "$work/$t" "corpus/$t"
    log="$work/$t.log"
    if cargo "+$toolchain" fuzz run -O -a "$t" "$work/$t" "corpus/$t" -- \
        -max_total_time="$per" -max_len=4096 -print_final_stats=1 -close_fd_mask=1 \
        >"$log" 2>&1; then
        result=ok
    else
        result=CRASH
        failed+=("$t")
    fi
    execs="$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)"
    printf '%-18s %12s %8s %s\n' "$t" "${execs:-?}" "$per" "$result"
    if [ "$result" = CRASH ]; then
        tail -40 "$log" >&2
    fi
done

if [ "${#failed[@]}" -gt 0 ]; then
    echo "fuzz-smoke: crashes in: ${failed[*]} (artifacts in fuzz/artifacts/)" >&2
    exit 1
fi
echo "fuzz-smoke: ${n} targets, no crash"
