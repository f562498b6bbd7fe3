#!/usr/bin/env bash
# A VRRP namespace lab (`[[vrrp]]`, docs/operating.md "Failover without
# BGP (VRRP)"): one L2 segment, a bridge in a namespace of its own, joins a
# client, Spillway node 1 and a peer in VRID 51 for VIP 198.18.10.10, and
# three backends (l2dsr: the VIP on their loopback, their answers go to the
# client directly). The peer is either
#
#   keepalived  Debian's keepalived (2.2.7), VRRPv3 with advert_int 0.1, in
#               namespace k: while master it holds the VIP on its interface,
#               so its own kernel answers the client (an HTTP server there
#               says "keepalived", and so does its echo server on port 7);
#   pair        Spillway node 2, with flow sync ([flow_sync], UDP 7700
#               between the nodes' uplink addresses) between the nodes.
#
# The client is on the segment and reaches the VIP directly (198.18.10.0/24
# is on-link for it): its neighbour entry for the VIP names whoever answered
# ARP or announced it last. Each Spillway node is its own DPDK process (own
# --file-prefix, no hugepages needed) on a net_af_packet port over a veth,
# with an exception TAP for its host's stack (health probes, flow sync).
# Everything lives in namespaces this script creates, named by a per-run
# tag, with addresses from 198.18.0.0/15 that never leave them.
#
#   scripts/lab-vrrp.sh up keepalived|pair DIR [BIN]   build the lab (tests/lab_vrrp.rs)
#   scripts/lab-vrrp.sh start N DIR [BIN]              start node N again (after it died)
#   scripts/lab-vrrp.sh down DIR                       remove it
#
#   client 198.18.1.100 ---- bridge (namespace s) ----+----------------+------------+
#       |                        |                    |                |            |
#   node 1 198.18.1.2     node 2 / keepalived     backend 1       backend 2    backend 3
#   priority 150          198.18.1.3, priority    198.18.1.11     198.18.1.12  198.18.1.13
#                         100 (KEEPALIVED_PRIORITY)
#
# Rule web (VIP 198.18.10.10, TCP 80 and 7: HTTP and a line echo server that
# names its backend) goes to backends 1 and 2; backend 3 runs but is in no
# service: its endpoint line is commented out and marked `# b3`, for a test
# that changes the backend set. MACs are fixed: node N's port
# 02:53:56:00:00:0<N+1>, keepalived's 02:53:56:00:00:4b, the client's
# 02:53:56:00:00:64. Adverts every 100 ms, preempt on.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
source "$here/lib.sh"

VIP=198.18.10.10
VRID=51
KEEPALIVED_PRIORITY=${KEEPALIVED_PRIORITY:-100}

nsx() { local ns=$1; shift; ip netns exec "$ns" "$@"; }

# Node N's MAC (its uplink veth's, which its net_af_packet port takes).
node_mac() { printf '02:53:56:00:00:%02x' "$(($1 + 1))"; }

# Node N's configuration; ENDPOINTS and EXTRA: web's endpoint lines (EXTRA
# commented out), SYNC 1 for [flow_sync] with the other node, PEER the other
# VRRP speaker's address.
node_toml() {
    local n=$1 T=$2 addr=$3 dir=$4 endpoints=$5 extra=$6 sync=$7 peer=$8 priority=$9
    cat <<TOML
[node]
name = "node$n"
region = "lab"
zone = "lab-a"
shutdown_drain = "5s"

TOML
    lab_node_dataplane spv "$T" "$n"
    cat <<TOML

[[ports]]
name = "uplink"
device = "net_af_packet${n}0"
role = "uplink"
addresses = ["$addr/24"]

[[ports]]
name = "kernel"
device = "net_tap${n}0"
role = "exception"

[[forwarding_rules]]
name = "web"
vips = ["$VIP"]
protocol = "TCP"
ports = "7,80"
backend_service = "web"

[[backend_services]]
name = "web"
delivery = "l2dsr"
health_check = "web-check"
[[backend_services.groups]]
name = "lab-a"
region = "lab"
zone = "lab-a"
endpoints = [
$endpoints$extra]

[[health_checks]]
name = "web-check"
type = "TCP"
port = 80
interval = "500ms"
timeout = "400ms"
healthy_threshold = 1
unhealthy_threshold = 1

[[vrrp]]
vrid = $VRID
port = "uplink"
priority = $priority
advert_interval = "100ms"
preempt = true
vips = ["$VIP"]
peers = ["$peer"]

[metrics]
listen = "0.0.0.0:9469"

[control]
socket = "$dir/n$n/control.sock"
TOML
    if [ "$sync" = 1 ]; then
        # The peer is the other node's uplink address, whose host stack
        # (behind its exception TAP) holds the sync socket.
        cat <<TOML

[flow_sync]
listen = "$addr:7700"
peers = ["$peer:7700"]
key = "hex:5370696c6c776179206c61622073796e63206b6579"
TOML
    fi
}

# Starts node N's spillway (its log appended to: a restart keeps the first
# run's) and its host stack; waits for its control socket.
start_node() {
    local dir=$1 n=$2 bin=$3
    local T ns
    T=$(cat "$dir/tag")
    ns="spv${T}n$n"
    # A node killed with KILL leaves its socket behind.
    rm -f "$dir/n$n/control.sock"
    echo "=== $(date '+%T.%N') start" >>"$dir/node$n.log"
    ip netns exec "$ns" "$bin/spillway" run --config "$dir/node$n.toml" >>"$dir/node$n.log" 2>&1 &
    echo $! >"$dir/node$n.pid"
    local up=0
    for _ in $(seq 150); do
        if [ -S "$dir/n$n/control.sock" ]; then
            up=1
            break
        fi
        if ! kill -0 "$(cat "$dir/node$n.pid")" 2>/dev/null; then
            cat "$dir/node$n.log" >&2
            die "node $n exited"
        fi
        sleep 0.1
    done
    if [ "$up" = 0 ]; then
        cat "$dir/node$n.log" >&2
        die "node $n did not open its control socket"
    fi
    # Its host stack on the segment's subnet: no router, every address it
    # talks to is on-link.
    lab_node_host "$ns" "$T" "$n" "198.18.1.$((n + 1))"
}

# keepalived in namespace K on interface IF with priority P: VRRPv3, VRID
# 51, every 100 ms, the VIP as a /32 on IF while master. Its pid files and
# log are in DIR.
start_keepalived() {
    local K=$1 dir=$2 iface=$3 priority=$4
    command -v keepalived >/dev/null || die "keepalived not found: scripts/setup.sh installs keepalived"
    cat >"$dir/keepalived.conf" <<CONF
global_defs {
  router_id lab-vrrp
  vrrp_version 3
}
vrrp_instance VI_$VRID {
  state BACKUP
  interface $iface
  virtual_router_id $VRID
  priority $priority
  advert_int 0.1
  virtual_ipaddress {
    $VIP/32
  }
}
CONF
    nsx "$K" keepalived -t -f "$dir/keepalived.conf" 2>"$dir/keepalived-check.log" ||
        die "keepalived rejects $dir/keepalived.conf: $(cat "$dir/keepalived-check.log")"
    # -n: no daemon (it stays this script's background job), -l -D: a
    # detailed log on its console, into DIR.
    ip netns exec "$K" keepalived -n -l -D -f "$dir/keepalived.conf" \
        -p "$dir/keepalived.pid" -r "$dir/keepalived-vrrp.pid" >"$dir/keepalived.log" 2>&1 &
    for _ in $(seq 50); do
        grep -q "Entering BACKUP STATE" "$dir/keepalived.log" && return 0
        sleep 0.1
    done
    cat "$dir/keepalived.log" >&2
    die "keepalived did not start"
}

# A line echo server on port 7 naming NAME (long-lived connections), and
# HTTP on port 80 answering NAME, in namespace NS; pid files WHO.pid.
servers() {
    local ns=$1 name=$2 dir=$3 who=$4
    mkdir -p "$dir/www-$who"
    echo "$name" >"$dir/www-$who/index.html"
    ip netns exec "$ns" python3 -m http.server 80 --bind 0.0.0.0 --directory "$dir/www-$who" \
        >"$dir/http-$who.log" 2>&1 &
    echo $! >"$dir/http-$who.pid"
    lab_echo_server "$ns" "$name" "$dir/echo-$who.log" "$dir/echo-$who.pid"
}

lab_up() {
    local dir=$1 bin=$2 mode=$3
    mkdir -p "$dir/n1" "$dir/n2"
    local T
    T=$(printf '%04x' $(( ($$ + RANDOM) % 65536 )))
    echo "$T" >"$dir/tag"
    echo "$mode" >"$dir/mode"
    local S="spv${T}s" C="spv${T}c"
    local peers=("spv${T}n1")
    if [ "$mode" = pair ]; then
        peers+=("spv${T}n2")
    else
        peers+=("spv${T}k")
    fi
    for ns in "$S" "$C" "${peers[@]}"; do
        ip netns add "$ns"
        nsx "$ns" ip link set lo up
        nsx "$ns" sysctl -qw net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0
    done

    # The segment: a bridge with no address of its own.
    nsx "$S" ip link add "t${T}br" type bridge
    nsx "$S" ip link set "t${T}br" up
    # port NS DEV MAC: a veth DEV in NS (with MAC) on the bridge.
    port() {
        local ns=$1 dev=$2 mac=$3
        ip link add "$dev" netns "$ns" address "$mac" type veth peer name "${dev/t${T}/t${T}s}" netns "$S"
        nsx "$S" ip link set "${dev/t${T}/t${T}s}" master "t${T}br" up
        nsx "$ns" ip link set "$dev" up
    }

    port "$C" "t${T}c" 02:53:56:00:00:64
    nsx "$C" ip addr add 198.18.1.100/24 dev "t${T}c"
    # The VIPs are on-link: the client asks ARP for them.
    nsx "$C" ip route add 198.18.10.0/24 dev "t${T}c" scope link
    # Full checksums: the balancers pass frames on as they get them.
    nsx "$C" ethtool -K "t${T}c" tx off >/dev/null

    local endpoints="" extra=""
    for i in 1 2 3; do
        local B="spv${T}b$i" addr="198.18.1.1$i" mac="02:53:51:00:00:1$i"
        ip netns add "$B"
        nsx "$B" ip link set lo up
        nsx "$B" sysctl -qw net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0 \
            net.ipv4.conf.all.arp_ignore=1 net.ipv4.conf.all.arp_announce=2
        port "$B" "t${T}b$i" "$mac"
        nsx "$B" ip addr add "$addr/24" dev "t${T}b$i"
        nsx "$B" ethtool -K "t${T}b$i" tx off >/dev/null
        nsx "$B" ip addr add "$VIP/32" dev lo
        servers "$B" "backend$i" "$dir" "b$i"
        if [ "$i" = 3 ]; then
            extra+="  #{ address = \"$addr\", mac = \"$mac\" }, # b3"$'\n'
        else
            endpoints+="  { address = \"$addr\", mac = \"$mac\" },"$'\n'
        fi
    done

    port "spv${T}n1" "t${T}n1" "$(node_mac 1)"
    local sync=0
    if [ "$mode" = pair ]; then
        sync=1
        port "spv${T}n2" "t${T}n2" "$(node_mac 2)"
    else
        local K="spv${T}k"
        port "$K" "t${T}ka" 02:53:56:00:00:4b
        nsx "$K" ip addr add 198.18.1.3/24 dev "t${T}ka"
        nsx "$K" ethtool -K "t${T}ka" tx off >/dev/null
        servers "$K" keepalived "$dir" k
    fi

    node_toml 1 "$T" 198.18.1.2 "$dir" "$endpoints" "$extra" "$sync" 198.18.1.3 150 >"$dir/node1.toml"
    "$bin/spillway" check-config "$dir/node1.toml" >/dev/null
    start_node "$dir" 1 "$bin"
    if [ "$mode" = pair ]; then
        node_toml 2 "$T" 198.18.1.3 "$dir" "$endpoints" "$extra" "$sync" 198.18.1.2 100 >"$dir/node2.toml"
        start_node "$dir" 2 "$bin"
    else
        start_keepalived "spv${T}k" "$dir" "t${T}ka" "$KEEPALIVED_PRIORITY"
    fi
}

lab_down() { lab_teardown "$1" spv s c n1 n2 k b1 b2 b3; }

case "${1:-}" in
up)
    mode=${2:-}
    case "$mode" in
    keepalived | pair) ;;
    *) die "usage: $0 up keepalived|pair DIR [BIN]" ;;
    esac
    dir="${3:?DIR}"
    # A failed start leaves nothing behind.
    trap 'lab_down "$dir"' EXIT
    lab_up "$dir" "${4:-$root/target/release}" "$mode"
    trap "" EXIT
    ;;
start)
    [ -f "${3:?DIR}/tag" ] || die "no lab in $3"
    start_node "$3" "${2:?N}" "${4:-$root/target/release}"
    ;;
down) lab_down "${2:?DIR}" ;;
*) die "usage: $0 up keepalived|pair DIR [BIN] | start N DIR [BIN] | down DIR" ;;
esac
