#!/usr/bin/env bash
# Spillway's benchmark harness (M46), one command:
#
#   perf/bench.sh            the default matrix (every axis, ~6 min on 2 vCPUs);
#                            writes perf/RESULTS.md, perf/results.json, perf/results.png
#   perf/bench.sh --quick    one short case and its testpmd ceiling (CI smoke);
#                            writes to ${TMPDIR:-/tmp}/spillway-bench-quick unless --out
#   perf/bench.sh --full     the whole cross product (long)
#
# Other options (passed to perf/bench.py, `perf/bench.sh --help` lists them):
#   --debug                  use debug builds (CI: checks the harness; figures meaningless)
#   --only "gue 4,096"       only the cases whose label has all these words
#   --warmup S --window S    seconds of warm-up and of measurement per row
#   --repeat N               measure the matrix N times in passes; each row is its median
#   --mem auto|huge|4k|mixed DPDK memory (see perf/README.md)
#   --reserve-hugepages      (root) raise vm.nr_hugepages for the run so every set fits; restored
#   --out DIR                where RESULTS.md, results.json and results.png go
#
# Every row is `spillway run` or `dpdk-testpmd` (io, macswap) on a net_pcap
# port replaying a packet set forever, rate from DPDK telemetry, ns/packet
# from the forwarding thread's CPU time. No figure is asserted: the exit
# status is non-zero only when a run fails.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

profile=release
quick=0
out=""
pass=()
while (($#)); do
    case "$1" in
        --debug) profile=debug ;;
        --quick) quick=1; pass+=("$1") ;;
        --out) out="$2"; shift ;;
        --out=*) out="${1#--out=}" ;;
        -h|--help)
            sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
            exec python3 perf/bench.py --help ;;
        *) pass+=("$1") ;;
    esac
    shift
done

command -v dpdk-testpmd >/dev/null || die "dpdk-testpmd not found: run scripts/setup.sh (Debian package dpdk-dev)"
command -v python3 >/dev/null || die "python3 not found: run scripts/setup.sh"
ensure_cargo

# A Python with matplotlib for the plot: the one on PATH, the system one, or
# (full and default runs, as root) the Debian package installed now.
plot_python=""
for py in python3 /usr/bin/python3; do
    if command -v "$py" >/dev/null && "$py" -c 'import matplotlib' 2>/dev/null; then
        plot_python="$(command -v "$py")"
        break
    fi
done
if [ -z "$plot_python" ] && ((!quick)) && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "installing python3-matplotlib for the plot"
    if DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-matplotlib >/dev/null 2>&1 \
        && /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
        plot_python=/usr/bin/python3
    else
        say "NOTICE: python3-matplotlib could not be installed: no plot"
    fi
fi

cargo_flags=()
[ "$profile" = release ] && cargo_flags+=(--release)
say "building spillway and packetset ($profile)"
cargo build --quiet "${cargo_flags[@]}" -p spillway -p packetset
target="${CARGO_TARGET_DIR:-target}/$profile"

if [ -z "$out" ]; then
    if ((quick)); then out="${TMPDIR:-/tmp}/spillway-bench-quick"; else out="perf"; fi
fi

# Other busy DPDK processes disturb every figure: say so (never touch them).
others="$( (pgrep -a -x spillway; pgrep -a dpdk-testpmd) 2>/dev/null | grep -v ' decap ' || true)"
if [ -n "$others" ]; then
    say "NOTICE: other DPDK processes are running; figures will be disturbed:"
    printf '%s\n' "$others" | sed 's/^/[spillway]   /' >&2
fi

# Packet sets, configurations and logs; bench.py deletes it on exit.
workdir="$(mktemp -d "${TMPDIR:-/tmp}/spillway-bench.XXXXXX")"

command_line="perf/bench.sh"
for a in "${pass[@]}"; do command_line+=" $(printf '%q' "$a")"; done
[ "$profile" = debug ] && command_line+=" --debug"

# exec: a signal to this script reaches bench.py, which stops its own
# processes and restores what it changed.
exec python3 perf/bench.py \
    --spillway "$target/spillway" \
    --packetset "$target/packetset" \
    --workdir "$workdir" \
    --remove-workdir \
    --out "$out" \
    --plot-python "$plot_python" \
    --command "$command_line" \
    --build "$profile" \
    "${pass[@]}"
