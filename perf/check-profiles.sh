#!/usr/bin/env bash
# Checks the bare-metal benchmark material (M46, perf/BARE-METAL.md) without a traffic
# generator or a NIC, as far as that goes:
#
#   perf/pktgen/check.sh            the pktgen-dpdk Lua scripts: luac -p, then a fake pktgen
#                                   (installs lua5.4 when missing)
#   perf/trex/check_profiles.py     the TRex STL profiles, loaded against a fake trex_stl_lib,
#                                   and the same flows as pktgen's range and pcap modes (lua5.4)
#   perf/bare-metal/check_egress.py the DUT configs (-a for PCI addresses, --vdev for virtual
#                                   devices; spillway check-config, and spillway run on the
#                                   memif example) and the egress BARE-METAL.md documents,
#                                   through `spillway replay`
#
# The last one needs a spillway binary no older than the sources (scripts/test.sh builds it
# first); without one it says NOTICE and is skipped. Exits non-zero if any check fails.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
say() { printf '[spillway] %s\n' "$*" >&2; }

say "perf: pktgen-dpdk scripts (luac -p, fake pktgen)"
perf/pktgen/check.sh
say "perf: TRex profiles (fake trex_stl_lib; the flows pktgen sends)"
python3 perf/trex/check_profiles.py
say "perf: DUT configurations and egress (spillway check-config, spillway replay)"
python3 perf/bare-metal/check_egress.py
