#!/usr/bin/env bash
# Prepares this machine to build, test and run Spillway. Idempotent: installs
# only what is missing, reserves hugepages only when too few are free.
#
#   scripts/setup.sh            everything (packages, Rust tools, hugepages)
#   SPILLWAY_HUGEPAGES=N        how many 2 MB hugepages to reserve (default 512)
#
# Without hugepages (containers, no root) Spillway still runs: DPDK is started
# with --no-huge, and this script says so.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=scripts/lib.sh
source "$here/lib.sh"

# Debian packages the build, the tests and the lab use.
#   libdpdk-dev dpdk-dev  DPDK 22.11 headers, libraries and PMD plugins
#   dpdk                  dpdk-testpmd, dpdk-devbind.py (benchmarks, NIC binding)
#   pkg-config            how dpdk-sys finds DPDK
#   clang libclang-dev    bindgen
#   build-essential       cc for the static-inline wrappers
#   iproute2 ethtool      namespaces and veth pairs in tests and the lab
#   python3               scripts/pcap.py, the lab's HTTP servers
#   curl                  the lab demo's client
PACKAGES=(libdpdk-dev dpdk-dev dpdk pkg-config clang libclang-dev build-essential iproute2 ethtool python3 curl)

missing=()
for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    say "installing Debian packages: ${missing[*]}"
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
    say "Debian packages present"
fi

ver="$(pkg-config --modversion libdpdk)"
pkg-config --atleast-version=22.11 libdpdk || die "DPDK $ver is older than 22.11"
say "DPDK $ver ($(pkg-config --variable=libdir libdpdk))"

ensure_cargo
if ! cargo nextest --version >/dev/null 2>&1; then
    say "installing cargo-nextest"
    cargo install cargo-nextest --locked --quiet
fi

# Hugepages: reserve 2 MB pages and mount hugetlbfs where we can.
want="${SPILLWAY_HUGEPAGES:-512}"
if (( $(hugepages_free) < 64 )) && [ -w /proc/sys/vm/nr_hugepages ]; then
    total=$(cat /proc/sys/vm/nr_hugepages)
    if (( total < want )); then
        echo "$want" >/proc/sys/vm/nr_hugepages 2>/dev/null || true
    fi
fi
if ! grep -qs ' hugetlbfs ' /proc/mounts && [ "$(id -u)" = 0 ]; then
    mkdir -p /dev/hugepages && mount -t hugetlbfs nodev /dev/hugepages 2>/dev/null || true
fi
free=$(hugepages_free)
if (( free >= 64 )) && grep -qs ' hugetlbfs ' /proc/mounts; then
    say "hugepages: $free free 2 MB pages, hugetlbfs mounted"
else
    say "NOTICE: no usable hugepages ($free free); DPDK will run with --no-huge (slower, fine for tests)"
fi
