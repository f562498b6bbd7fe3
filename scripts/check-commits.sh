#!/usr/bin/env bash
# Checks commit subjects against the project's style:
#   scope[, scope]: what changed        (at most 72 characters)
# where a scope is a crate, directory or file (control, tests/lab, README).
# Merge commits are exempt from the scope form but not from the length.
#
#   scripts/check-commits.sh                 every commit since the policy began
#   scripts/check-commits.sh REV             every commit since REV
#   scripts/check-commits.sh --message FILE  one message (use as .git/hooks/commit-msg)
set -euo pipefail

# The last commit made before the policy; older subjects are history.
POLICY_BASE=c0436aa

subject_ok() {
    local s=$1
    if (( ${#s} > 72 )); then
        echo "longer than 72 characters (${#s})"
        return 1
    fi
    [[ $s =~ ^Merge\  ]] && return 0
    if ! [[ $s =~ ^[A-Za-z0-9_./-]+(,\ [A-Za-z0-9_./-]+)*:\ [^\ ] ]]; then
        echo "not in the form 'scope[, scope]: what changed'"
        return 1
    fi
}

if [ "${1:-}" = "--message" ]; then
    subject="$(grep -v '^#' "$2" | head -n1)"
    if ! why="$(subject_ok "$subject")"; then
        echo "commit subject $why: $subject" >&2
        exit 1
    fi
    exit 0
fi

base="${1:-$POLICY_BASE}"
if ! git rev-parse -q --verify "$base^{commit}" >/dev/null; then
    echo "check-commits: $base is not in this clone (shallow?); nothing checked" >&2
    exit 0
fi
bad=0
while IFS=$'\t' read -r hash subject; do
    if ! why="$(subject_ok "$subject")"; then
        echo "${hash:0:10} subject $why: $subject" >&2
        bad=1
    fi
done < <(git log --format=$'%H\t%s' "$base..HEAD")
exit "$bad"
