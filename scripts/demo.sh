#!/usr/bin/env bash
# Spillway's main job, runnable on any machine of this kind: builds the
# release binary and forwards a packet set between two DPDK virtual devices
# (net_pcap in, net_pcap out), then checks every frame came out unchanged.
# (It grows into the full network-namespace lab of SPEC M45.)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/lib.sh

scripts/setup.sh
ensure_cargo
say "building spillway (release)"
cargo build --release --quiet

work="$(mktemp -d /tmp/spillway-demo.XXXXXX)"
trap 'rm -rf "$work"' EXIT
count="${1:-100000}"
python3 scripts/pcap.py gen "$work/in.pcap" --count "$count" --flows 4096

# shellcheck disable=SC2046
./target/release/spillway forward --rx net_pcap0 --tx net_pcap1 -- \
    -l 0 $(eal_memory_args) --no-pci --no-telemetry --log-level=lib.eal:warning \
    --vdev="net_pcap0,rx_pcap=$work/in.pcap" --vdev="net_pcap1,tx_pcap=$work/out.pcap"

python3 scripts/pcap.py same "$work/in.pcap" "$work/out.pcap"
say "demo done: DPDK is up on this machine and Spillway moved every packet"
