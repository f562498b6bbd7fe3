# Helpers shared by the scripts (sourced, not run).
# shellcheck disable=SC2015 # "[ -f F ] && kill … || true": try, never fail

say() { printf '[spillway] %s\n' "$*" >&2; }
die() { printf '[spillway] error: %s\n' "$*" >&2; exit 1; }

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
        die "need root for: $*"
    fi
}

# Puts cargo on PATH when it was installed by rustup but the shell is not a
# login shell (as in CI).
ensure_cargo() {
    if ! command -v cargo >/dev/null 2>&1 && [ -f "$HOME/.cargo/env" ]; then
        # shellcheck disable=SC1091
        source "$HOME/.cargo/env"
    fi
    command -v cargo >/dev/null 2>&1 || die "cargo not found: install Rust with rustup (https://rustup.rs)"
}

hugepages_free() {
    awk '/^HugePages_Free:/ {print $2; found=1} END {if (!found) print 0}' /proc/meminfo
}

# EAL memory arguments that work on this machine right now.
eal_memory_args() {
    if (( $(hugepages_free) >= 64 )) && grep -qs ' hugetlbfs ' /proc/mounts; then
        echo "--in-memory"
    else
        echo "--no-huge --no-shconf -m 512"
    fi
}

# Takes down a namespace lab that a lab script's `up` built in DIR (which
# holds its tag): the processes of its pid files (TERM, then KILL), then
# whatever still runs in its namespaces PREFIX<tag>NAME for each NAME, and
# the namespaces. Without DIR/tag there is nothing to do.
lab_teardown() {
    local dir=$1 prefix=$2
    shift 2
    [ -f "$dir/tag" ] || return 0
    local T
    T=$(cat "$dir/tag")
    local f ns
    for f in "$dir"/*.pid; do
        [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null || true
    done
    sleep 0.3
    for f in "$dir"/*.pid; do
        [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null || true
        rm -f "$f"
    done
    for ns in "$@"; do
        ip netns pids "$prefix$T$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
        ip netns del "$prefix$T$ns" 2>/dev/null || true
    done
    rm -f "$dir/tag"
}
