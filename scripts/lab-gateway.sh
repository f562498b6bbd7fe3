#!/usr/bin/env bash
# A namespace lab for gateway mode (M30-M33): a router sends everything it
# forwards between the client and the server through Spillway, which passes
# each flow, symmetrically, to one of two network virtual appliances
# (`spillway nva`) in GENEVE; the appliance returns it, and Spillway sends
# the inner packet back to the router, which delivers it. Real TCP, IPv4
# and IPv6 (inner); the tunnels to the appliances are IPv4.
#
# Spillway is one DPDK process (no hugepages needed) on a net_af_packet
# port on the router's segment, with an exception TAP through which its
# health checker probes the appliances' --health listeners in plain TCP.
# Everything lives in namespaces this script creates, named by a per-run
# tag, with addresses from 198.18.0.0/15 and 2001:db8::/32 that never
# leave them.
#
#   scripts/lab-gateway.sh up DIR [BIN]     build the lab (tests/lab_gateway.rs)
#   scripts/lab-gateway.sh up remote DIR [BIN]
#                                           the same with a remote gateway
#                                           endpoint (M31, see below)
#   scripts/lab-gateway.sh down DIR         remove it
#   scripts/lab-gateway.sh nva DIR N stop   stop appliance N (1 or 2)
#   scripts/lab-gateway.sh nva DIR N start [ARG...]
#                                           (re)start it with ARGs added to
#                                           its command line (--tamper ...)
#
# NVA1_ARGS / NVA2_ARGS (opt-in, for `up`): more arguments for appliance 1/2.
#
#   client 198.18.0.100          router                  server 198.18.3.100
#   2001:db8::100 ---- .0.1 / ::1      .3.1 / 2001:db8:3::1 ---- 2001:db8:3::100
#                                  | 198.18.1.1, 2001:db8:1::1 (bridge)
#        +-------------------------+---------------------+
#   spillway 198.18.1.2        nva1 198.18.1.21       nva2 198.18.1.22
#   2001:db8:1::2              GENEVE :6081, health TCP :8080
#   gateway rule, VIP 198.18.1.10
#
# The router's policy routing is what a real deployment does: packets that
# arrive from the client's or the server's side are routed via Spillway
# (IPv4 via the gateway rule's VIP, IPv6 via Spillway's own address on the
# segment); packets that arrive from the segment (returned by Spillway) use
# the main table and go straight to their destination.
#
# With `remote`, the client and the server sit behind a remote router
# (198.18.5.2, another network, reached through the router at 198.18.5.1)
# that is the gateway endpoint instead: it tunnels what it forwards to
# Spillway's address in Geneve (scripts/geneve-tun.py over a TUN device:
# the kernel has no geneve module), and Spillway sends the appliances'
# returns back to it in Geneve by the uplink's gateway, the router.
#
#   client ---- 198.18.0.1 remote router 198.18.3.1 ---- server
#               198.18.5.2 (Geneve) ---- 198.18.5.1 router
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
source "$here/lib.sh"

GW_VIP=198.18.1.10
ROUTER_MAC=02:53:47:00:00:fe
SPW_MAC=02:53:47:00:00:02
# Table of the router's "towards Spillway" routes.
VIA_SPILLWAY=100

nsx() { local ns=$1; shift; ip netns exec "$ns" "$@"; }

# nva_start DIR N [ARG...]: appliance N on its own address, with a flow log
# and the health listener Spillway probes.
nva_start() {
    local dir=$1 n=$2
    shift 2
    local T bin
    T=$(cat "$dir/tag")
    bin=$(cat "$dir/bin")
    # Its log is appended to across restarts: only this run's lines count.
    local seen=0
    [ -f "$dir/nva$n.log" ] && seen=$(wc -l <"$dir/nva$n.log")
    # It answers only Spillway's tunnel source (its address on the segment).
    ip netns exec "spg${T}a$n" "$bin/spillway" nva --listen "198.18.1.2$n" --allow-source 198.18.1.2 \
        --health "198.18.1.2$n:8080" --flow-log "$dir/nva$n.flows" "$@" \
        >>"$dir/nva$n.log" 2>&1 &
    echo $! >"$dir/nva$n.pid"
    for _ in $(seq 50); do
        # Logged once every socket is bound.
        tail -n +"$((seen + 1))" "$dir/nva$n.log" | grep -q "health listener" && return 0
        kill -0 "$(cat "$dir/nva$n.pid")" 2>/dev/null || break
        sleep 0.1
    done
    cat "$dir/nva$n.log" >&2
    die "nva $n did not start"
}

nva_stop() {
    local dir=$1 n=$2 pid
    [ -f "$dir/nva$n.pid" ] || return 0
    pid=$(cat "$dir/nva$n.pid")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$dir/nva$n.pid"
}

lab_up() {
    local dir=$1 bin=$2 remote=${3:-}
    mkdir -p "$dir"
    local T
    T=$(printf '%04x' $(( ($$ + RANDOM) % 65536 )))
    echo "$T" >"$dir/tag"
    echo "$bin" >"$dir/bin"
    local C="spg${T}c" R="spg${T}r" S="spg${T}s" N="spg${T}n" X="spg${T}x"
    # The router the client and the server are behind.
    local CS=$R
    [ -n "$remote" ] && CS=$X
    for ns in "$C" "$R" "$S" "$N" "spg${T}a1" "spg${T}a2" ${remote:+"$X"}; do
        ip netns add "$ns"
        nsx "$ns" ip link set lo up
        nsx "$ns" sysctl -qw net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0
    done
    # The router forwards both families, never answers with redirects.
    nsx "$R" sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1 \
        net.ipv4.conf.all.send_redirects=0 net.ipv4.conf.default.send_redirects=0
    if [ -n "$remote" ]; then
        nsx "$X" sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1 \
            net.ipv4.conf.all.send_redirects=0 net.ipv4.conf.default.send_redirects=0
        ip link add "g${T}x" netns "$X" type veth peer name "g${T}rx" netns "$R"
        nsx "$X" ip addr add 198.18.5.2/24 dev "g${T}x"
        nsx "$X" ip link set "g${T}x" up
        nsx "$X" ethtool -K "g${T}x" tx off >/dev/null
        nsx "$X" ip route add default via 198.18.5.1
        nsx "$R" ip addr add 198.18.5.1/24 dev "g${T}rx"
        nsx "$R" ip link set "g${T}rx" up
        # The remote endpoint's tunnel: Geneve to Spillway's address.
        ip netns exec "$X" python3 "$here/geneve-tun.py" "g${T}t" 198.18.5.2 198.18.1.2 \
            >"$dir/tunnel.log" 2>&1 &
        echo $! >"$dir/tunnel.pid"
        local up=0
        for _ in $(seq 50); do
            if grep -q "up," "$dir/tunnel.log"; then up=1; break; fi
            sleep 0.1
        done
        [ "$up" = 1 ] || { cat "$dir/tunnel.log" >&2; die "geneve-tun did not start"; }
        # Room for the tunnel's 36 bytes on the way to the node: the client's
        # and the server's links too, so that no segment needs PMTU discovery.
        nsx "$X" ip link set "g${T}t" mtu 1400 up
        nsx "$X" ip -4 route add default dev "g${T}t" table "$VIA_SPILLWAY"
        nsx "$X" ip -6 route add default dev "g${T}t" table "$VIA_SPILLWAY"
    fi

    # Client and server, each on a /24 and /64 of their own behind the router.
    # Full checksums on their veths: Spillway passes frames on as it gets them.
    local side addr4 addr6 net4 net6
    for side in c s; do
        if [ "$side" = c ]; then net4=198.18.0 net6=2001:db8:0; else net4=198.18.3 net6=2001:db8:3; fi
        addr4="$net4.100" addr6="$net6::100"
        local ns="spg${T}$side"
        ip link add "g${T}$side" netns "$ns" type veth peer name "g${T}r$side" netns "$CS"
        nsx "$ns" ip addr add "$addr4/24" dev "g${T}$side"
        nsx "$ns" ip addr add "$addr6/64" dev "g${T}$side" nodad
        nsx "$ns" ip link set "g${T}$side" up
        nsx "$ns" ethtool -K "g${T}$side" tx off >/dev/null
        nsx "$ns" ip route add default via "$net4.1"
        nsx "$ns" ip -6 route add default via "$net6::1"
        nsx "$CS" ip addr add "$net4.1/24" dev "g${T}r$side"
        nsx "$CS" ip addr add "$net6::1/64" dev "g${T}r$side" nodad
        nsx "$CS" ip link set "g${T}r$side" up
        if [ -n "$remote" ]; then
            nsx "$ns" ip link set "g${T}$side" mtu 1400
            nsx "$CS" ip link set "g${T}r$side" mtu 1400
        fi
        # Policy routing: from this side, everything goes through Spillway
        # (directly, or in the remote router's tunnel).
        nsx "$CS" ip -4 rule add iif "g${T}r$side" lookup "$VIA_SPILLWAY" pref 100
        nsx "$CS" ip -6 rule add iif "g${T}r$side" lookup "$VIA_SPILLWAY" pref 100
    done

    # The segment of the router, Spillway and the appliances.
    nsx "$R" ip link add "g${T}br" address "$ROUTER_MAC" type bridge
    nsx "$R" ip addr add 198.18.1.1/24 dev "g${T}br"
    nsx "$R" ip addr add 2001:db8:1::1/64 dev "g${T}br" nodad
    nsx "$R" ip link set "g${T}br" up
    nsx "$R" ip -4 route add default via "$GW_VIP" dev "g${T}br" table "$VIA_SPILLWAY"
    nsx "$R" ip -6 route add default via 2001:db8:1::2 dev "g${T}br" table "$VIA_SPILLWAY"

    ip link add "g${T}n" netns "$N" address "$SPW_MAC" type veth peer name "g${T}rn" netns "$R"
    # The data veth is DPDK's: the node's kernel keeps off it (no IPv6,
    # strict reverse-path filtering drops what reaches its IPv4 stack).
    nsx "$N" sysctl -qw "net.ipv6.conf.g${T}n.disable_ipv6=1"
    nsx "$N" ip link set "g${T}n" up
    nsx "$R" ip link set "g${T}rn" master "g${T}br" up

    local endpoints=""
    for n in 1 2; do
        local A="spg${T}a$n"
        ip link add "g${T}a$n" netns "$A" type veth peer name "g${T}ra$n" netns "$R"
        nsx "$A" ip addr add "198.18.1.2$n/24" dev "g${T}a$n"
        nsx "$A" ip link set "g${T}a$n" up
        nsx "$A" ethtool -K "g${T}a$n" tx off >/dev/null
        nsx "$R" ip link set "g${T}ra$n" master "g${T}br" up
        endpoints+="  { address = \"198.18.1.2$n\", port = 8080 },"$'\n'
    done

    mkdir -p "$dir/www"
    echo "server" >"$dir/www/index.html"
    # Dual-stack (http.server's --bind :: accepts IPv4 too).
    ip netns exec "$S" python3 -m http.server 80 --bind :: --directory "$dir/www" \
        >"$dir/http.log" 2>&1 &
    echo $! >"$dir/http.pid"
    # Long-lived connections for the persistence phase: one line back per line.
    ip netns exec "$S" python3 -c '
import socketserver
class Echo(socketserver.StreamRequestHandler):
    def handle(self):
        for line in self.rfile:
            self.wfile.write(b"echo " + line)
            self.wfile.flush()
socketserver.ThreadingTCPServer.allow_reuse_address = True
socketserver.ThreadingTCPServer.daemon_threads = True
socketserver.ThreadingTCPServer(("0.0.0.0", 7), Echo).serve_forever()
' >"$dir/echo.log" 2>&1 &
    echo $! >"$dir/echo.pid"

    # The gateway endpoint: the router on the segment, or the remote router
    # by its tunnel (reached by the uplink's gateway, the router).
    local gw_endpoint='{ address = "198.18.1.1", id = 0x100 }' uplink_gateway=""
    if [ -n "$remote" ]; then
        gw_endpoint='{ address = "198.18.5.2", id = 0x500, tunnel = "geneve" }'
        uplink_gateway='gateway = "198.18.1.1"'
    fi

    cat >"$dir/spillway.toml" <<TOML
[node]
name = "gw"
region = "lab"
zone = "lab-a"
shutdown_drain = "0s" # the lab is torn down at once: no drain period

[dataplane]
management_core = 0
worker_cores = [1]
mbufs = 4095
queue_descriptors = 512
flow_table_capacity = 65536
eal_args = ["$(eal_memory_args | sed 's/-m 512/-m 256/; s/ /", "/g')", "--file-prefix=spg$T", "--no-pci",
  "--no-telemetry", "--log-level=lib.eal:warning",
  "--vdev=net_af_packet0,iface=g${T}n", "--vdev=net_tap0,iface=g${T}k"]

[[ports]]
name = "uplink"
device = "net_af_packet0"
role = "uplink"
addresses = ["198.18.1.2/24", "2001:db8:1::2/64"]
$uplink_gateway

[[ports]]
name = "kernel"
device = "net_tap0"
role = "exception"

[[forwarding_rules]]
name = "gw"
vips = ["$GW_VIP"]
protocol = "L3_DEFAULT"
backend_service = "nvas"
mode = "gateway"
gateway_endpoints = [$gw_endpoint]

[[backend_services]]
name = "nvas"
delivery = "geneve"
health_check = "nva"
# TCP flows stay on an unhealthy appliance (the default persistence) until
# this timeout: long enough for the test to see them stay.
connection_persistence = "DEFAULT_FOR_PROTOCOL"
connection_draining_timeout = "300s"
[[backend_services.groups]]
name = "lab-a"
region = "lab"
zone = "lab-a"
endpoints = [
$endpoints]

[[health_checks]]
name = "nva"
type = "HTTP"
port = 8080
interval = "1s"
timeout = "500ms"
healthy_threshold = 1
unhealthy_threshold = 2

[control]
socket = "$dir/control.sock"
TOML

    ip netns exec "$N" "$bin/spillway" run --config "$dir/spillway.toml" >"$dir/spillway.log" 2>&1 &
    echo $! >"$dir/spillway.pid"
    local ok=0
    for _ in $(seq 150); do
        if [ -S "$dir/control.sock" ]; then ok=1; break; fi
        if ! kill -0 "$(cat "$dir/spillway.pid")" 2>/dev/null; then
            cat "$dir/spillway.log" >&2
            die "spillway run exited"
        fi
        sleep 0.1
    done
    if [ "$ok" != 1 ]; then
        cat "$dir/spillway.log" >&2
        die "spillway run did not open its control socket"
    fi
    # The node's host stack behind the exception TAP: the health checker's
    # way to the appliances.
    for _ in $(seq 50); do
        nsx "$N" ip link show "g${T}k" >/dev/null 2>&1 && break
        sleep 0.1
    done
    nsx "$N" sysctl -qw "net.ipv4.conf.g${T}n.rp_filter=1"
    nsx "$N" ip addr add 198.18.1.2/24 dev "g${T}k"
    nsx "$N" ip link set "g${T}k" up

    # shellcheck disable=SC2086 # word lists on purpose
    nva_start "$dir" 1 ${NVA1_ARGS:-}
    # shellcheck disable=SC2086
    nva_start "$dir" 2 ${NVA2_ARGS:-}
}

lab_down() { lab_teardown "$1" spg c r s n a1 a2 x; }

case "${1:-}" in
up)
    remote=""
    if [ "${2:-}" = remote ]; then
        remote=1
        shift
    fi
    dir="$2"
    # A failed start leaves nothing behind.
    trap 'lab_down "$dir"' EXIT
    lab_up "$dir" "${3:-$root/target/release}" "$remote"
    trap "" EXIT
    ;;
down) lab_down "$2" ;;
nva)
    [ -f "$2/tag" ] || die "no lab in $2"
    case "${4:-}" in
    stop) nva_stop "$2" "$3" ;;
    start)
        nva_stop "$2" "$3"
        nva_start "$2" "$3" "${@:5}"
        ;;
    *) die "usage: $0 nva DIR N start [ARG...] | nva DIR N stop" ;;
    esac
    ;;
*) die "usage: $0 up [remote] DIR [BIN] | down DIR | nva DIR N start [ARG...] | nva DIR N stop" ;;
esac
