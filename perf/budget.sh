#!/usr/bin/env bash
# The per-stage instruction budget of a packet (perf/README.md, "The
# per-stage budget"), as perf/RESULTS.md's table of it:
#
#   perf/budget.sh                 GUE, 4,096 established flows (the top case)
#   perf/budget.sh MODE            l2dsr, ipip, gue, gre, geneve, gateway or gateway-return
#   perf/budget.sh MODE FLOWS      another flow count (table capacity as perf/bench.sh sets it)
#   perf/budget.sh MODE FLOWS KIND [CAPACITY]
#                                  another kind of packet (delivery modes only): ack (the
#                                  default), syn, v6, churn, new, ranges (pipeline_cycles'
#                                  kinds; ranges: new's SYNs to a rule with 8 source_ranges);
#                                  CAPACITY overrides the table's (a `syn` set larger than
#                                  the table measures the insert that evicts)
#
# Builds `pipeline_cycles` (release), runs it under callgrind for 1,000 and
# 2,000 bursts of 32, counting only what `Pipeline::process_burst` executes (the
# data plane's work: the harness's re-loading of each frame, which a NIC's DMA
# does on the daemon, is not counted), and hands both `callgrind_annotate`
# outputs to perf/budget.py: a source file's instructions per packet are its
# difference over the 32,000 packets between the runs, grouped into stages.
# Instruction counts do not depend on the host's load. Prints a Markdown table and the
# total; the exit status is non-zero if a run fails or a mode's packets are
# not all forwarded.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

mode="${1:-gue}"
flows="${2:-4096}"
kind="${3:-ack}"
case "$mode" in
    l2dsr|ipip|gue|gre|geneve|gateway|gateway-return) ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown mode '$mode' (l2dsr, ipip, gue, gre, geneve, gateway, gateway-return)" ;;
esac
if ! [[ "$flows" =~ ^[1-9][0-9]*$ ]]; then die "FLOWS must be a positive number, not '$flows'"; fi
case "$kind" in
    ack) ;;
    syn|v6|churn|new|ranges) [[ "$mode" != gateway* ]] || die "gateway modes have one kind of set (ack), not '$kind'" ;;
    *) die "unknown kind '$kind' (ack, syn, v6, churn, new, ranges)" ;;
esac
command -v valgrind >/dev/null || die "valgrind not found: run scripts/setup.sh (Debian package valgrind)"
command -v callgrind_annotate >/dev/null || die "callgrind_annotate not found (Debian package valgrind)"
ensure_cargo

# perf/bench.sh's table capacity: room for twice the flows, at least 65,536.
capacity=65536
while ((capacity < 2 * flows)); do capacity=$((capacity * 2)); done
if [ -n "${4:-}" ]; then
    [[ "$4" =~ ^[1-9][0-9]*$ ]] || die "CAPACITY must be a positive number, not '$4'"
    capacity="$4"
fi

say "building pipeline_cycles (release)"
cargo build --quiet --release -p dataplane --example pipeline_cycles
bin="${CARGO_TARGET_DIR:-target}/release/examples/pipeline_cycles"

work="$(mktemp -d "${TMPDIR:-/tmp}/spillway-budget.XXXXXX")"
trap 'rm -rf "$work"' EXIT
short=1000
long=2000
for n in "$short" "$long"; do
    say "callgrind: pipeline_cycles $mode $flows $n $capacity $kind"
    valgrind --tool=callgrind --toggle-collect='*Pipeline::process_burst*' --callgrind-out-file="$work/cg.$n" "$bin" "$mode" "$flows" "$n" "$capacity" "$kind" \
        >"$work/run.$n.log" 2>&1 || { cat "$work/run.$n.log" >&2; die "pipeline_cycles failed under callgrind"; }
    callgrind_annotate --inclusive=no --auto=no --threshold=99.99 "$work/cg.$n" >"$work/annotate.$n"
done

echo "Per-stage budget: $mode $kind, $flows flows, 8 endpoints, table $capacity, commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo
python3 perf/budget.py "$work/annotate.$short" "$work/annotate.$long" "$(((long - short) * 32))" "$mode" perf/results.json "$kind"
