#!/usr/bin/env bash
# Checks the pktgen-dpdk Lua scripts in this directory without pktgen-dpdk (what CI runs):
# `luac -p` (syntax) on every script, then check.lua, which runs spillway.lua against a fake
# `pktgen` table for every case. Installs Debian's lua5.4 when no Lua is found; without apt
# (or root) it prints a NOTICE and skips.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
say() { printf '[spillway] %s\n' "$*" >&2; }

first_of() {
    local c
    for c in "$@"; do
        if command -v "$c" >/dev/null 2>&1; then
            echo "$c"
            return 0
        fi
    done
    return 1
}

luac="$(first_of luac5.4 luac5.3 luac || true)"
lua="$(first_of lua5.4 lua5.3 lua || true)"
if [ -z "$luac" ] || [ -z "$lua" ]; then
    if command -v apt-get >/dev/null 2>&1 && { [ "$(id -u)" = 0 ] || command -v sudo >/dev/null 2>&1; }; then
        root=()
        [ "$(id -u)" = 0 ] || root=(sudo)
        say "installing lua5.4 (luac5.4) for the pktgen script checks"
        if ! "${root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends lua5.4 >/dev/null 2>&1; then
            "${root[@]}" apt-get update -qq >/dev/null 2>&1 || true
            "${root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends lua5.4 >/dev/null \
                || true
        fi
        luac="$(first_of luac5.4 luac5.3 luac || true)"
        lua="$(first_of lua5.4 lua5.3 lua || true)"
    fi
fi
if [ -z "$luac" ] || [ -z "$lua" ]; then
    say "NOTICE: no Lua (luac5.4) and no way to install it: pktgen script checks skipped"
    exit 0
fi

shopt -s nullglob
scripts=("$here"/*.lua)
[ "${#scripts[@]}" -gt 0 ] || { say "error: no Lua scripts in $here"; exit 1; }
for f in "${scripts[@]}"; do
    "$luac" -p "$f"
done
say "pktgen: $luac -p: ${#scripts[@]} scripts parse"
"$lua" "$here/check.lua"
