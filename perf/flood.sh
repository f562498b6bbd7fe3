#!/usr/bin/env bash
# The flood figures (M15): real TCP connections among floods of spoofed new flows, pushed
# through `spillway replay` (the capture's timestamps are its clock) with the flow-table
# defences on (the defaults) and off; see perf/README.md "Floods".
#
#   perf/flood.sh                       the default matrix: ack, ack2, syn and udp floods at
#                                       10k, 50k and 200k packets/s (~2 min on 2 vCPUs);
#                                       Markdown on stdout
#   perf/flood.sh --out perf/FLOOD.md   the same, also written there
#   perf/flood.sh --kinds syn --rates 50000 --seconds 20 --join 12
#   perf/flood.sh --debug               debug builds (checks the tool; slow for big floods)
#   perf/flood.sh --help                every option of the flood tool
#
# Figures only: the exit status is non-zero only when a run fails.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

profile=release
out=""
help=0
pass=()
while (($#)); do
    case "$1" in
        --debug) profile=debug ;;
        --out) out="$2"; shift ;;
        --out=*) out="${1#--out=}" ;;
        -h|--help) help=1 ;;
        *) pass+=("$1") ;;
    esac
    shift
done

ensure_cargo
cargo_flags=()
[ "$profile" = release ] && cargo_flags+=(--release)
say "building spillway and the flood tool ($profile)"
cargo build --quiet "${cargo_flags[@]}" -p spillway -p packetset
target="${CARGO_TARGET_DIR:-target}/$profile"
if ((help)); then
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
    exec "$target/flood" --help
fi

# Captures, configurations and replay outputs (a few GB at 200k packets/s), one case at a time.
workdir="$(mktemp -d "${TMPDIR:-/tmp}/spillway-flood.XXXXXX")"
trap 'rm -rf "$workdir"' EXIT

command_line="perf/flood.sh"
for a in "${pass[@]}"; do command_line+=" $(printf '%q' "$a")"; done
[ "$profile" = debug ] && command_line+=" --debug"
commit="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
git diff --quiet HEAD 2>/dev/null || commit+=" (with uncommitted changes)"

report="$workdir/report.md"
{
    printf '# Flood figures\n\n'
    # shellcheck disable=SC2016 # Markdown backticks, not a command substitution
    printf -- '- command: `%s`\n' "$command_line"
    printf -- '- commit: %s, %s build\n' "$commit" "$profile"
    printf -- '- date: %s\n\n' "$(date -u '+%Y-%m-%d %H:%M UTC')"
    "$target/flood" --spillway "$target/spillway" --workdir "$workdir/run" "${pass[@]}"
} >"$report"
cat "$report"
if [ -n "$out" ]; then
    cp "$report" "$out"
    say "written to $out"
fi
