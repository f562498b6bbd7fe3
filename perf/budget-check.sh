#!/usr/bin/env bash
# The instruction budget, checked (perf/budget.toml): runs perf/budget.sh for
# every row and fails when one grows more than the table's tolerance (2 %)
# over its checked-in Ir/packet, printing that row's per-stage table.
#
#   perf/budget-check.sh               every row
#   perf/budget-check.sh gue/v6        rows by MODE, MODE/KIND or MODE/KIND/FLOWS
#   perf/budget-check.sh --update      measure and write the figures into the table
#
# scripts/test.sh runs it. Needs valgrind and python3 (scripts/setup.sh).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

case "${1:-}" in
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
esac
ensure_cargo
exec python3 perf/budget_check.py "$@"
