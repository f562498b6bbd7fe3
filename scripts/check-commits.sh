#!/usr/bin/env bash
# Checks commits against the project's style:
#   scope[, scope]: what changed        (subject: at most 72 characters)
#
#   body                                (required when the commit changes
#                                        more than BODY_LINES lines)
# A scope names what changed, from the list `scope_ok` accepts: a crate
# (control, dpdk-sys), a top-level file or directory (tests, README), any
# path in the commit's tree or its parent's (tests/lab_mtu, perf/bench.py),
# a source file's stem under src/, scripts/ or perf/ (replay, lab-bgp), a
# crate's module as crate/module (dataplane/snapshot, dataplane/pipeline),
# or one of EXTRA_SCOPES. Merge commits are exempt from the scope form and the
# body but not from the length.
#
#   scripts/check-commits.sh                 every commit since the policy began
#   scripts/check-commits.sh REV             every commit since REV
#   scripts/check-commits.sh --message FILE  one message, against the index
#                                            (scripts/hooks/commit-msg)
#   scripts/check-commits.sh --self-test     the rules, on commits made in a
#                                            scratch repository
set -euo pipefail

# The last commit made before the subject form; older subjects are history.
POLICY_BASE=c0436aa
# The last commit made before scopes were checked against the list and long
# commits needed a body: older commits are checked for their form only.
SCOPE_BASE="${SCOPE_BASE:-b0ec9cd}"
# A commit changing more lines than this (added plus removed) says why in a body.
BODY_LINES=100
# Scopes that are not paths: the workspace as a whole, CI, the binary.
EXTRA_SCOPES=(workspace ci deps spillway)

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

# Whether path $2 exists in revision $1 ("": in the work tree).
in_tree() {
    if [ -z "$1" ]; then
        [ -e "$(git rev-parse --show-toplevel)/$2" ]
    else
        git cat-file -e "$1:$2" 2>/dev/null
    fi
}

# Whether $2 is a scope of a commit whose tree is $1 (its parent's also
# counts: a commit may name what it removes).
scope_ok() {
    local rev=$1 scope=$2 r stem
    for stem in "${EXTRA_SCOPES[@]}"; do
        [ "$scope" = "$stem" ] && return 0
    done
    local revs=("$rev")
    [ -z "$rev" ] || revs+=("$rev^")
    for r in "${revs[@]}"; do
        for stem in "$scope" "$scope.rs" "crates/$scope" "$scope.md" "src/$scope.rs" "scripts/$scope" \
            "$scope.sh" "$scope.py" "scripts/$scope.sh" "scripts/$scope.py" "perf/$scope" "perf/$scope.sh" \
            "perf/$scope.py" "crates/${scope%%/*}/src/${scope#*/}.rs" \
            "crates/${scope%%/*}/src/${scope#*/}"; do
            in_tree "$r" "$stem" && return 0
        done
    done
    return 1
}

scopes_ok() {
    local rev=$1 subject=$2 scope
    [[ $subject =~ ^Merge\  ]] && return 0
    IFS=',' read -ra list <<<"${subject%%: *}"
    for scope in "${list[@]}"; do
        scope="${scope# }"
        if ! scope_ok "$rev" "$scope"; then
            echo "scope '$scope' is not a crate, path or known scope"
            return 1
        fi
    done
}

# Lines a numstat listing on stdin adds and removes (binary files count 0).
changed_lines() {
    awk '$1 ~ /^[0-9]+$/ { n += $1 + $2 } END { print n + 0 }'
}

body_ok() {
    local lines=$1 body=$2
    if ((lines > BODY_LINES)) && ! grep -q '[^[:space:]]' <<<"$body"; then
        echo "changes $lines lines and has no body saying why"
        return 1
    fi
}

# Makes commits in a scratch repository and checks that the rules refuse
# exactly the ones they should (scripts/test.sh runs it).
self_test() {
    local me dir fails=0
    me="$(realpath "${BASH_SOURCE[0]}")"
    dir="$(mktemp -d "${TMPDIR:-/tmp}/check-commits.XXXXXX")"
    trap 'rm -rf "$dir"' RETURN
    git -C "$dir" init -q
    git -C "$dir" config user.email test@example.invalid
    git -C "$dir" config user.name test
    mkdir -p "$dir/crates/wire/src" "$dir/docs"
    seq 1 50 >"$dir/crates/wire/src/ipv4.rs"
    git -C "$dir" add -A
    git -C "$dir" commit -qm "wire: the base"
    # expect: 0 (passes) or 1 (refused), message [lines to add to docs/a.md]
    local cases=(
        "0|wire: a short change|10"
        "0|wire/ipv4: a module as scope|10"
        "0|docs, wire: two scopes|10"
        "0|workspace: a known word|10"
        "1|wiring: no such crate or path|10"
        "1|wire: a long change without a body|150"
        "0|wire: a long change with a body\n\nWhy it is long.|150"
        "1|wire:no space after the colon|10"
        "1|wire: $(printf 'x%.0s' $(seq 1 70))|10"
    )
    local c want msg n got
    for c in "${cases[@]}"; do
        IFS='|' read -r want msg n <<<"$c"
        seq 1 "$n" >>"$dir/docs/a.md"
        git -C "$dir" add -A
        printf '%b\n' "$msg" >"$dir/msg"
        # As the commit-msg hook sees it, then as history since its parent.
        local hook=0 history=0 base
        (cd "$dir" && "$me" --message msg 2>/dev/null) || hook=1
        git -C "$dir" commit -qF "$dir/msg"
        base="$(git -C "$dir" rev-parse HEAD^)"
        (cd "$dir" && SCOPE_BASE="$base" "$me" "$base" 2>/dev/null) || history=1
        got="$hook$history"
        if [ "$got" != "$want$want" ]; then
            echo "check-commits self-test: '${msg%%\\n*}': hook $hook, history $history, want $want" >&2
            fails=1
        fi
    done
    return "$fails"
}

if [ "${1:-}" = "--self-test" ]; then
    self_test
    exit
fi

if [ "${1:-}" = "--message" ]; then
    message="$(grep -v '^#' "$2")"
    subject="$(head -n1 <<<"$message")"
    body="$(tail -n +2 <<<"$message")"
    lines="$(git diff --cached --numstat | changed_lines)"
    why="$(subject_ok "$subject")" || true
    [ -n "$why" ] || why="$(scopes_ok "" "$subject")" || true
    [ -n "$why" ] || why="$(body_ok "$lines" "$body")" || true
    if [ -n "$why" ]; then
        echo "commit $why: $subject" >&2
        exit 1
    fi
    exit 0
fi

base="${1:-$POLICY_BASE}"
if ! git rev-parse -q --verify "$base^{commit}" >/dev/null; then
    echo "check-commits: $base is not in this clone (shallow?); nothing checked" >&2
    exit 0
fi
# Commits after SCOPE_BASE get the scope and body checks (all of them when
# SCOPE_BASE is not in this clone's history: a shallow clone has only new ones).
strict=()
if git rev-parse -q --verify "$SCOPE_BASE^{commit}" >/dev/null; then
    mapfile -t strict < <(git rev-list "$SCOPE_BASE..HEAD")
else
    mapfile -t strict < <(git rev-list "$base..HEAD")
fi
declare -A is_strict=()
for h in "${strict[@]}"; do is_strict[$h]=1; done

bad=0
while IFS=$'\t' read -r hash parents subject; do
    why="$(subject_ok "$subject")" || true
    if [ -z "$why" ] && [ -n "${is_strict[$hash]:-}" ] && [[ $parents != *" "* ]]; then
        why="$(scopes_ok "$hash" "$subject")" || true
        if [ -z "$why" ]; then
            lines="$(git show --numstat --format= "$hash" | changed_lines)"
            why="$(body_ok "$lines" "$(git log -1 --format=%b "$hash")")" || true
        fi
    fi
    if [ -n "$why" ]; then
        echo "${hash:0:10} $why: $subject" >&2
        bad=1
    fi
done < <(git log --format=$'%H\t%P\t%s' "$base..HEAD")
exit "$bad"
