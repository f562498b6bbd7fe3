#!/usr/bin/env bash
# Spillway's main job on one machine: the network-namespace lab of M45.
# Builds the release binary, creates a client, a router, the balancer on DPDK
# net_af_packet ports and three backends running real HTTP servers, sends
# 300 HTTP requests from the client through the VIP, prints how they spread
# over the backends and what the balancer counted, and cleans everything up
# (also on Ctrl-C).
#
#   scripts/demo.sh [gue|ipip]      delivery mode (default gue)
set -euo pipefail
exec "$(dirname "${BASH_SOURCE[0]}")/lab.sh" demo "${1:-gue}"
