#!/usr/bin/env bash
# A two-node namespace lab for tunnelled ingress (M49): the first Spillway
# spills over to the second through a remote_rule group, tunnelling (GUE)
# to the second's own address; the second decapsulates and delivers to its
# own backends (l2dsr, the VIP on their loopback), which answer the client
# directly. Each node is its own DPDK process (own --file-prefix, no
# hugepages needed) on net_af_packet ports, with an exception TAP for its
# host's stack (the first node polls the second's /status through it).
# Everything lives in namespaces this script creates, named by a per-run
# tag, with addresses from 198.18.0.0/15 that never leave them.
#
#   scripts/lab-tunnels.sh up DIR [BIN]   build the lab (used by tests/lab_tunnels.rs)
#   scripts/lab-tunnels.sh down DIR       remove it
#
#   client 198.18.0.100 -- router 198.18.0.1
#                            | 198.18.1.1 (bridge; VIP 198.18.10.10 routed to node 1)
#        +-------------------+--------------------+----------------+
#   node 1 198.18.1.2    node 2 198.18.1.3    backend 198.18.1.11  backend 198.18.1.12
#   near group drained;  [tunnel_ingress]     (VIP on lo)          (VIP on lo)
#   far group: node 2's  allow = node 1
#   rule (remote_rule)
#   -> GUE to 198.18.1.3
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
source "$here/lib.sh"

VIP=198.18.10.10
ROUTER_MAC=02:53:51:00:00:fe

nsx() { local ns=$1; shift; ip netns exec "$ns" "$@"; }

# node N's DPDK configuration head: cores, EAL arguments, ports.
node_head() {
    local n=$1 T=$2 addr=$3 region=$4 sock=$5
    cat <<TOML
[node]
name = "node$n"
region = "$region"
zone = "$region-a"
region_preference = ["near", "far"]
shutdown_drain = "0s" # the lab is torn down at once: no drain period

TOML
    lab_node_dataplane spt "$T" "$n"
    cat <<TOML

[[ports]]
name = "uplink"
device = "net_af_packet${n}0"
role = "uplink"
addresses = ["$addr/24"]
gateway_mac = "$ROUTER_MAC"

[[ports]]
name = "kernel"
device = "net_tap${n}0"
role = "exception"

[[forwarding_rules]]
name = "web"
vips = ["$VIP"]
protocol = "TCP"
ports = 80
backend_service = "web"

[metrics]
listen = "0.0.0.0:9469"

[control]
socket = "$sock"
TOML
}

# The host's stack behind node N's exception TAP: its address, a route to
# the router, and strict reverse-path filtering on the data port (as in
# scripts/lab.sh: the namespace's kernel must leave that veth to DPDK).
node_host() {
    local ns=$1 T=$2 n=$3 addr=$4
    lab_node_host "$ns" "$T" "$n" "$addr"
    nsx "$ns" ip route add default via 198.18.1.1
}

start_node() {
    local ns=$1 n=$2 dir=$3 bin=$4
    ip netns exec "$ns" "$bin/spillway" run --config "$dir/node$n.toml" >"$dir/node$n.log" 2>&1 &
    echo $! >"$dir/node$n.pid"
    for _ in $(seq 150); do
        [ -S "$dir/n$n/control.sock" ] && return 0
        if ! kill -0 "$(cat "$dir/node$n.pid")" 2>/dev/null; then
            cat "$dir/node$n.log" >&2
            die "node $n exited"
        fi
        sleep 0.1
    done
    cat "$dir/node$n.log" >&2
    die "node $n did not open its control socket"
}

lab_up() {
    local dir=$1 bin=$2
    mkdir -p "$dir/n1" "$dir/n2"
    local T
    T=$(printf '%04x' $(( ($$ + RANDOM) % 65536 )))
    echo "$T" >"$dir/tag"
    local C="spt${T}c" R="spt${T}r" N1="spt${T}n1" N2="spt${T}n2"
    for ns in "$C" "$R" "$N1" "$N2"; do
        ip netns add "$ns"
        nsx "$ns" ip link set lo up
        nsx "$ns" sysctl -qw net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0
    done
    nsx "$R" sysctl -qw net.ipv4.ip_forward=1 net.ipv4.conf.all.send_redirects=0 \
        net.ipv4.conf.default.send_redirects=0

    ip link add "t${T}c" netns "$C" type veth peer name "t${T}rc" netns "$R"
    nsx "$C" ip addr add 198.18.0.100/24 dev "t${T}c"
    nsx "$C" ip link set "t${T}c" up
    nsx "$C" ip route add default via 198.18.0.1
    # Full checksums: the balancers pass frames on as they get them.
    nsx "$C" ethtool -K "t${T}c" tx off >/dev/null
    nsx "$R" ip addr add 198.18.0.1/24 dev "t${T}rc"
    nsx "$R" ip link set "t${T}rc" up

    # One segment for both nodes and the backends.
    nsx "$R" ip link add "t${T}br" address "$ROUTER_MAC" type bridge
    nsx "$R" ip addr add 198.18.1.1/24 dev "t${T}br"
    nsx "$R" ip link set "t${T}br" up
    nsx "$R" ip route add "$VIP/32" via 198.18.1.2
    for n in 1 2; do
        local ns="spt${T}n$n"
        ip link add "t${T}n$n" netns "$ns" type veth peer name "t${T}r$n" netns "$R"
        nsx "$ns" ip link set "t${T}n$n" up
        nsx "$R" ip link set "t${T}r$n" master "t${T}br" up
    done

    local endpoints=""
    for i in 1 2; do
        local B="spt${T}b$i" addr="198.18.1.1$i" mac="02:53:51:00:00:1$i"
        ip netns add "$B"
        nsx "$B" ip link set lo up
        nsx "$B" sysctl -qw net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0 \
            net.ipv4.conf.all.arp_ignore=1 net.ipv4.conf.all.arp_announce=2
        ip link add "t${T}b$i" netns "$B" address "$mac" type veth peer name "t${T}rb$i" netns "$R"
        nsx "$B" ip addr add "$addr/24" dev "t${T}b$i"
        nsx "$B" ip link set "t${T}b$i" up
        nsx "$B" ethtool -K "t${T}b$i" tx off >/dev/null
        nsx "$B" ip route add default via 198.18.1.1
        nsx "$B" ip addr add "$VIP/32" dev lo
        nsx "$R" ip link set "t${T}rb$i" master "t${T}br" up
        mkdir -p "$dir/www$i"
        echo "backend$i" >"$dir/www$i/index.html"
        ip netns exec "$B" python3 -m http.server 80 --bind 0.0.0.0 --directory "$dir/www$i" \
            >"$dir/http$i.log" 2>&1 &
        echo $! >"$dir/http$i.pid"
        endpoints+="  { address = \"$addr\", mac = \"$mac\" },"$'\n'
    done

    # Node 2: the VIP's own backends, and tunnels accepted from node 1
    # (it has no remote_rule group, so the default would accept none).
    {
        node_head 2 "$T" 198.18.1.3 far "$dir/n2/control.sock"
        cat <<TOML

[[backend_services]]
name = "web"
delivery = "l2dsr"
[[backend_services.groups]]
name = "far-a"
region = "far"
zone = "far-a"
endpoints = [
$endpoints]

[tunnel_ingress]
allow = ["198.18.1.2/32"]
TOML
    } >"$dir/node2.toml"

    # Node 1: its near group (a peer that is not there) drained, the far
    # group is node 2's rule, reached with GUE at node 2's own address.
    {
        node_head 1 "$T" 198.18.1.2 near "$dir/n1/control.sock"
        cat <<TOML

[[backend_services]]
name = "web"
delivery = "gue"
[[backend_services.groups]]
name = "near-a"
region = "near"
zone = "near-a"
kind = "remote_rule"
capacity_scaler = 0.0
remote = { status_url = "http://198.18.1.9:9469/status", rule = "web", vip = "198.18.1.9" }

[[backend_services.groups]]
name = "far-a"
region = "far"
zone = "far-a"
kind = "remote_rule"
remote = { status_url = "http://198.18.1.3:9469/status", rule = "web", vip = "198.18.1.3" }
TOML
    } >"$dir/node1.toml"

    start_node "$N2" 2 "$dir" "$bin"
    node_host "$N2" "$T" 2 198.18.1.3
    start_node "$N1" 1 "$dir" "$bin"
    node_host "$N1" "$T" 1 198.18.1.2
}

lab_down() { lab_teardown "$1" spt c r n1 n2 b1 b2; }

case "${1:-}" in
up)
    dir="$2"
    # A failed start leaves nothing behind.
    trap 'lab_down "$dir"' EXIT
    lab_up "$dir" "${3:-$root/target/release}"
    trap "" EXIT
    ;;
down) lab_down "$2" ;;
*) die "usage: $0 up DIR [BIN] | down DIR" ;;
esac
