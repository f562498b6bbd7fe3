# Helpers shared by the scripts (sourced, not run).

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
