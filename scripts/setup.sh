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

# Debian packages of every program the build, the tests, the lab, the demo and
# the benchmarks run. tests/commands.rs scans the sources for the programs they
# run and fails when one comes from a package missing here: add new ones here,
# with what uses them.
PACKAGES=(
    libdpdk-dev dpdk-dev  # DPDK 22.11 headers, libraries, PMD plugins; dpdk-testpmd (perf/bench.sh)
    dpdk                  # dpdk-devbind.py (binding NICs, docs/dpdk.md)
    pkg-config            # how dpdk-sys finds DPDK
    clang libclang-dev    # bindgen
    build-essential       # cc for the static-inline wrappers
    dpkg-dev              # dpkg-shlibdeps: cargo-deb's Depends of the DPDK libraries (scripts/package.sh)
    debootstrap           # tests/package.rs installs the Debian package into a fresh Debian root
    git                   # build.rs stamps `spillway --version` with the commit; perf/bench.py and perf/flood.sh record it
    iproute2              # ip: namespaces, veth pairs and `ip netns exec` in the tests and the lab
    ethtool               # scripts/lab.sh turns off checksum offload on the lab's veths
    iputils-ping          # ping: tests/lab.rs reaches the balancer's host stack through the exception TAP
    procps                # kill (tests/run.rs, scripts/lab.sh), sysctl (scripts/lab.sh), pgrep (perf/bench.sh)
    python3               # scripts/pcap.py, the lab's HTTP and echo servers, perf/bench.py and its checks
    knot                  # knotd: the authoritative DNS server of crates/zonehealth/tests/knot.rs and the zones lab
    bind9-dnsutils        # dig: tests/lab_zones.rs and scripts/lab-bgp.sh zones resolve the published name
    python3-scapy         # ICMP too-big bytes compared with scapy's (crates/dataplane/tests/mtu.rs), tests/lab_mtu.rs; VRRPv3 adverts read back (tests/lab_vrrp.rs)
    python3-prometheus-client # the Prometheus project's OpenMetrics parser reads /metrics (tests/lab_metrics.rs)
    tcpdump               # tests/capture.rs reads dpdk-dumpcap's capture back; tests/lab_vrrp.rs captures the VRRP segment
    prometheus            # prometheus: tests/lab_prometheus.rs scrapes a lab's daemon; promtool: tests/monitoring.rs checks scripts/deploy/prometheus
    python3-yaml          # tests/monitoring.rs reads scripts/deploy/prometheus's rules and their unit tests
    curl                  # the lab demo's client; tests/lab.rs reads the metrics with it
    bird2                 # bird, birdc: the BGP speakers of scripts/lab-bgp.sh (M34)
    keepalived            # keepalived: the VRRPv3 peer of scripts/lab-vrrp.sh (tests/lab_vrrp.rs)
    nftables              # nft: scripts/lab-bgp.sh `capacity` counts the packets reaching each backend (tests/lab_bgp.rs); tests/lab_vrrp.rs cuts keepalived off
    lua5.4                # luac5.4, lua5.4: perf/pktgen/check.sh checks the pktgen-dpdk scripts
    shellcheck            # tests/shellcheck.rs checks every shell script
    systemd               # systemd-analyze: tests/deploy.rs verifies scripts/deploy's units
    kmod                  # modprobe: scripts/deploy/bind-nics.sh loads vfio-pci
    python3-scapy         # crates/wire/testdata/gen_vectors.py builds the test vectors
    python3-matplotlib    # scripts/demo-plot.py draws the demo's picture; perf/bench.py's plot
    valgrind              # valgrind, callgrind_annotate: perf/budget.sh counts a packet's instructions per stage
)

missing=()
for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    say "installing Debian packages: ${missing[*]}"
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    # The tests run Prometheus themselves (their own port, storage and
    # rules): the package's service, which it starts where systemd runs,
    # would only listen on every address of this machine.
    if [[ " ${missing[*]} " == *" prometheus "* ]] && [ -d /run/systemd/system ]; then
        say "stopping and disabling prometheus.service (the tests run their own Prometheus)"
        as_root systemctl disable --now prometheus.service >/dev/null 2>&1 || true
    fi
    # Likewise keepalived: the VRRP lab runs its own in a namespace; the
    # package's service would speak VRRP on this machine's own interfaces.
    if [[ " ${missing[*]} " == *" keepalived "* ]] && [ -d /run/systemd/system ]; then
        say "stopping and disabling keepalived.service (the VRRP lab runs its own)"
        as_root systemctl disable --now keepalived.service >/dev/null 2>&1 || true
    fi
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
# The Debian package's builder (scripts/package.sh).
if ! cargo deb --version >/dev/null 2>&1; then
    say "installing cargo-deb"
    cargo install cargo-deb --locked --quiet
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
    if mkdir -p /dev/hugepages; then mount -t hugetlbfs nodev /dev/hugepages 2>/dev/null || true; fi
fi
free=$(hugepages_free)
if (( free >= 64 )) && grep -qs ' hugetlbfs ' /proc/mounts; then
    say "hugepages: $free free 2 MB pages, hugetlbfs mounted"
else
    say "NOTICE: no usable hugepages ($free free); DPDK will run with --no-huge (slower, fine for tests)"
fi
