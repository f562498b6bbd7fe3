#!/usr/bin/env bash
# A network-namespace lab on one machine (M45): a client, a router, the
# balancer on DPDK net_af_packet ports, and three backends running real HTTP
# servers with the VIP on loopback, reached through GUE (decapsulated by
# spillway-decap into a TUN device) or l2dsr. Backends answer clients
# directly (DSR). Everything lives in namespaces this script creates, with
# addresses from 198.18.0.0/15 that never leave them.
#
#   scripts/lab.sh demo [gue|ipip|l2dsr]   build, start, drive traffic, show the spread, clean up
#   scripts/lab.sh up MODE DIR / down DIR  (used by the tests)
#   scripts/lab.sh backend DIR N stop|start  stop / (re)start backend N's HTTP server
#   LAB_JUMBO=1: MTU 9000 on the client side too (default: 1500 there, 9000
#   on the backend side)
#
# Opt-in variants (environment): LAB_DECAP_VIP replaces the backends'
# decapsulator's --vip (default: the VIP with the rules' ports);
# LAB_UDP=PORT adds a UDP rule for the VIP's port PORT, and on each backend a
# UDP server there answering each datagram with "backendN LENGTH" (what
# reached it whole); LAB_BE_MTU=1500 gives the backend side (the balancer's
# backend port, the bridge, the backends) that MTU instead of 9000 (M48's
# fragmentation test); LAB_REGIONS=2 (see lab_health) and
# LAB_EXCEPTION=per-port: a second exception TAP for the backend port, and a
# router that does not route between the uplink and backend subnets, so that
# the host reaches the backends (health probes, ping) only through it (M47).
# LAB_RESOLVE=1 leaves every MAC out of the configuration (no gateway_mac,
# no l2dsr endpoint mac): the balancer resolves its next hops with ARP (M47),
# with the [neighbours] timings of LAB_NEIGHBOURS (TOML lines; short ones by
# default). LAB_BE_PREFIX (default 24) is the prefix length of the balancer's
# backend-port address: 30 puts the backends off its subnet, so tunnels go
# through the router (the gateway, 198.18.2.1). LAB_CLIENT_ZONES=RATE gives
# the client a second address, 198.18.0.200: clients of 198.18.0.0/25 are in
# zone lab-a, of 198.18.0.128/25 in zone lab-b (M27); backend3 forms group
# lab-b in zone lab-b, and each group carries RATE packets per second
# (balancing_mode RATE, zonal affinity without spill below capacity).
#
#        client 198.18.0.100
#          |
#        router ---- 198.18.1.2 [uplink] spillway [backend] 198.18.2.2 ---- bridge (router 198.18.2.1)
#          |                                                                 |
#        VIP 198.18.10.10 routed to the balancer            backends 198.18.2.1{1,2,3}
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
source "$here/lib.sh"

VIP=198.18.10.10
# The balancer's backend port: the outer source of its tunnels.
BALANCER_BE=198.18.2.2
ROUTER_BE_MAC=02:53:50:00:00:fe

nsx() { local ns=$1; shift; ip netns exec "$ns" "$@"; }

lab_up() {
    local mode=$1 dir=$2 bin=$3
    mkdir -p "$dir"
    local T
    T=$(printf '%04x' $(( ($$ + RANDOM) % 65536 )))
    echo "$T" >"$dir/tag"
    local C="spw${T}c" R="spw${T}r" L="spw${T}lb"
    for ns in "$C" "$R" "$L"; do ip netns add "$ns"; done
    for ns in "$C" "$R" "$L"; do
        nsx "$ns" ip link set lo up
        nsx "$ns" sysctl -qw net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0
    done
    nsx "$R" sysctl -qw net.ipv4.ip_forward=1

    # LAB_JUMBO=1: the client side (client, router, uplink) takes 9000-byte
    # frames too, as the backend side always does (M48's lab test).
    local -a cmtu=()
    local up_mtu=1500
    if [ "${LAB_JUMBO:-0}" = 1 ]; then
        cmtu=(mtu 9000)
        up_mtu=9000
    fi
    # client <-> router
    ip link add "s${T}c" netns "$C" "${cmtu[@]}" type veth peer name "s${T}rc" netns "$R" "${cmtu[@]}"
    nsx "$C" ip addr add 198.18.0.100/24 dev "s${T}c"
    nsx "$C" ip link set "s${T}c" up
    nsx "$C" ip route add default via 198.18.0.1
    client_zones && nsx "$C" ip addr add 198.18.0.200/24 dev "s${T}c"
    # Full checksums from the client: the balancer forwards frames as it gets them.
    nsx "$C" ethtool -K "s${T}c" tx off >/dev/null
    nsx "$R" ip addr add 198.18.0.1/24 dev "s${T}rc"
    nsx "$R" ip link set "s${T}rc" up

    # router <-> balancer uplink and backend side
    ip link add "s${T}up" netns "$L" "${cmtu[@]}" type veth peer name "s${T}ru" netns "$R" "${cmtu[@]}"
    local be_mtu=${LAB_BE_MTU:-9000}
    ip link add "s${T}be" netns "$L" mtu "$be_mtu" type veth peer name "s${T}rb" netns "$R" mtu "$be_mtu"
    for i in up be; do nsx "$L" ip link set "s${T}$i" up; done
    nsx "$R" ip addr add 198.18.1.1/24 dev "s${T}ru"
    nsx "$R" ip link set "s${T}ru" up
    # The backend segment: a bridge joining the balancer's backend port and the
    # backends (l2dsr needs them on one L2 segment; tunnels are routed through
    # the router's address on it).
    nsx "$R" ip link add "s${T}br" address "$ROUTER_BE_MAC" mtu "$be_mtu" type bridge
    nsx "$R" sysctl -qw net.ipv4.conf.all.send_redirects=0 net.ipv4.conf.default.send_redirects=0
    nsx "$R" ip addr add 198.18.2.1/24 dev "s${T}br"
    nsx "$R" ip link set "s${T}rb" master "s${T}br" up
    nsx "$R" ip link set "s${T}br" up
    nsx "$R" ip route add "$VIP/32" via 198.18.1.2
    if per_port; then
        # Neither subnet reaches the other through the router: the host's
        # traffic to the backends can only take the backend port.
        nsx "$R" ip rule add from 198.18.1.0/24 to 198.18.2.0/24 prohibit
        nsx "$R" ip rule add from 198.18.2.0/24 to 198.18.1.0/24 prohibit
    fi

    # backends
    local endpoints="" far_endpoints=""
    for i in 1 2 3; do
        local B="spw${T}b$i" addr="198.18.2.1$i" mac="02:53:50:00:00:1$i"
        ip netns add "$B"
        nsx "$B" ip link set lo up
        # The VIP sits on lo; never answer ARP for it on the segment.
        nsx "$B" sysctl -qw net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0 \
            net.ipv4.conf.all.arp_ignore=1 net.ipv4.conf.all.arp_announce=2
        ip link add "s${T}b$i" netns "$B" address "$mac" mtu "$be_mtu" type veth peer name "s${T}r$i" netns "$R" mtu "$be_mtu"
        nsx "$B" ip addr add "$addr/24" dev "s${T}b$i"
        nsx "$B" ip link set "s${T}b$i" up
        # Full checksums here too: the balancer host's own connections (health
        # probes) get their answers through the DPDK uplink, which passes the
        # frames on as they are.
        nsx "$B" ethtool -K "s${T}b$i" tx off >/dev/null
        nsx "$B" ip route add default via 198.18.2.1
        nsx "$B" ip addr add "$VIP/32" dev lo
        nsx "$R" ip link set "s${T}r$i" master "s${T}br" up
        mkdir -p "$dir/www$i"
        echo "backend$i" >"$dir/www$i/index.html"
        http_start "$dir" "$i"
        # A line echo server on port 7 that names its backend: long-lived
        # connections for the reload tests.
        lab_echo_server "$B" "backend$i" "$dir/echo$i.log" "$dir/echo$i.pid"
        if [ -n "${LAB_UDP:-}" ]; then
            ip netns exec "$B" python3 -c '
import socket, sys
name, port = sys.argv[1].encode(), int(sys.argv[2])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("0.0.0.0", port))
while True:
    data, peer = s.recvfrom(65536)
    s.sendto(name + b" " + str(len(data)).encode(), peer)
' "backend$i" "$LAB_UDP" >"$dir/udp$i.log" 2>&1 &
            echo $! >"$dir/udp$i.pid"
        fi
        # Tunnels only from the balancer's backend port, only to the VIP's
        # ports the rules below forward (LAB_DECAP_VIP: another --vip).
        ip netns exec "$B" "$bin/spillway" decap --tun "s${T}t$i" --ipip \
            --allow-source "$BALANCER_BE" --vip "${LAB_DECAP_VIP:-$VIP:tcp/80,7${LAB_UDP:+,udp/$LAB_UDP}}" \
            >"$dir/decap$i.log" 2>&1 &
        echo $! >"$dir/decap$i.pid"
        local ep="  { address = \"$addr\" },"
        [ "$mode" = l2dsr ] && [ "${LAB_RESOLVE:-0}" != 1 ] && ep="  { address = \"$addr\", mac = \"$mac\" },"
        # LAB_REGIONS=2: backend3 is a second, farther region.
        # LAB_CLIENT_ZONES: backend3 is zone lab-b.
        if { [ "${LAB_REGIONS:-1}" = 2 ] || client_zones; } && [ "$i" = 3 ]; then
            far_endpoints+="$ep"$'\n'
        else
            endpoints+="$ep"$'\n'
        fi
    done
    for i in 1 2 3; do
        for _ in $(seq 50); do
            nsx "spw${T}b$i" ip link show "s${T}t$i" >/dev/null 2>&1 && break
            sleep 0.1
        done
        nsx "spw${T}b$i" sysctl -qw "net.ipv4.conf.s${T}t$i.rp_filter=0"
    done

    cat >"$dir/lab.toml" <<TOML
# Generated by scripts/lab.sh for namespace tag $T.
[node]
name = "lab"
region = "lab"
zone = "lab-a"
region_preference = ["lab", "far"]
shutdown_drain = "0s" # the lab is torn down at once: no drain period

[dataplane]
management_core = 0
worker_cores = [1]
mbufs = 8191
queue_descriptors = 512
flow_table_capacity = 65536
eal_args = ["$(eal_memory_args | sed 's/ /", "/g')", "--no-pci", "--no-telemetry", "--log-level=lib.eal:warning",
  "--vdev=net_af_packet0,iface=s${T}up$(af_packet_frames "$up_mtu")", "--vdev=net_af_packet1,iface=s${T}be$(af_packet_frames "$be_mtu")",
  "--vdev=net_tap0,iface=s${T}k"$(per_port && echo ", \"--vdev=net_tap1,iface=s${T}kb\"")]

[[ports]]
name = "uplink"
device = "net_af_packet0"
role = "uplink"
addresses = ["198.18.1.2/24"]
mtu = $up_mtu

[[ports]]
name = "backends"
device = "net_af_packet1"
role = "backend"
addresses = ["$BALANCER_BE/${LAB_BE_PREFIX:-24}"]
$(lab_gateway)
mtu = $be_mtu

# The balancer host's own stack (ARP resolution, SSH, BGP, health probes):
# what the data plane does not own goes to this TAP, and what the kernel
# sends on it leaves through the uplink.
[[ports]]
name = "kernel"
device = "net_tap0"
role = "exception"
$(lab_backend_exception)
[[forwarding_rules]]
name = "web"
vips = ["$VIP"]
protocol = "TCP"
ports = 80
backend_service = "web"

[[forwarding_rules]]
name = "echo"
vips = ["$VIP"]
protocol = "TCP"
ports = 7
backend_service = "web"
$(lab_udp_rule)
[[backend_services]]
name = "web"
delivery = "$mode"
connection_draining_timeout = "300s"
$(lab_health)
$(lab_zonal_service)
[[backend_services.groups]]
name = "lab-a"
region = "lab"
zone = "lab-a"
$(lab_zone_rate)
endpoints = [
$endpoints]
$(lab_far_group "$far_endpoints")
$(lab_zone_b_group "$far_endpoints")
$(lab_checks "$endpoints")
[control]
socket = "$dir/control.sock"
$(lab_neighbours)
$(lab_client_zones)
TOML
    ip netns exec "$L" "$bin/spillway" run --config "$dir/lab.toml" >"$dir/spillway.log" 2>&1 &
    echo $! >"$dir/spillway.pid"
    for _ in $(seq 100); do
        if [ -S "$dir/control.sock" ]; then
            lab_host "$dir" "$L" "s${T}k"
            lab_resolved "$dir" "$bin"
            return 0
        fi
        if ! kill -0 "$(cat "$dir/spillway.pid")" 2>/dev/null; then
            cat "$dir/spillway.log" >&2
            die "spillway run exited"
        fi
        sleep 0.1
    done
    cat "$dir/spillway.log" >&2
    die "spillway run did not open its control socket"
}

# Backend N's HTTP server (its pid in DIR/httpN.pid, its log appended to).
http_start() {
    local dir=$1 i=$2 T
    T=$(cat "$dir/tag")
    ip netns exec "spw${T}b$i" python3 -m http.server 80 --bind 0.0.0.0 --directory "$dir/www$i" \
        >>"$dir/http$i.log" 2>&1 &
    echo $! >"$dir/http$i.pid"
}

http_stop() {
    local dir=$1 i=$2 pid
    [ -f "$dir/http$i.pid" ] || return 0
    pid=$(cat "$dir/http$i.pid")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do
        any_running "$pid" || break
        sleep 0.1
    done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$dir/http$i.pid"
}

# Backend N's server answers again once it accepts connections.
http_wait() {
    local dir=$1 i=$2 T
    T=$(cat "$dir/tag")
    for _ in $(seq 50); do
        nsx "spw${T}b$i" python3 -c 'import socket; socket.create_connection(("127.0.0.1", 80), 1).close()' \
            2>/dev/null && return 0
        sleep 0.1
    done
    die "backend $i's HTTP server did not start: $(cat "$dir/http$i.log")"
}

# The router's MAC, given or (LAB_RESOLVE=1) resolved.
lab_gateway() {
    if [ "${LAB_RESOLVE:-0}" = 1 ]; then
        echo 'gateway = "198.18.2.1"'
    else
        echo "gateway_mac = \"$ROUTER_BE_MAC\""
    fi
}

# LAB_UDP=PORT: a UDP rule for the VIP's port PORT.
lab_udp_rule() {
    [ -n "${LAB_UDP:-}" ] || return 0
    cat <<TOML

[[forwarding_rules]]
name = "dgram"
vips = ["$VIP"]
protocol = "UDP"
ports = $LAB_UDP
backend_service = "web"
TOML
}

lab_neighbours() {
    [ "${LAB_RESOLVE:-0}" = 1 ] || return 0
    echo '[neighbours]'
    echo "${LAB_NEIGHBOURS:-reachable = \"2s\"
retransmit = \"500ms\"
probes = 2
failed_retry = \"2s\"}"
}

# Ready when every next hop is resolved (M47): until then new connections
# find no eligible backend. Waits up to 5 s; the tests say what is missing.
lab_resolved() {
    local dir=$1 bin=$2
    for _ in $(seq 50); do
        "$bin/spillway" status --socket "$dir/control.sock" 2>/dev/null |
            grep -q 'neighbour unresolved' || return 0
        sleep 0.1
    done
}

per_port() { [ "${LAB_EXCEPTION:-}" = per-port ]; }
client_zones() { [ -n "${LAB_CLIENT_ZONES:-}" ]; }

# LAB_CLIENT_ZONES=RATE: capacities in packets per second, zonal affinity.
lab_zonal_service() {
    client_zones || return 0
    echo 'balancing_mode = "RATE"'
    echo 'locality = { zonal_affinity = true, zonal_spill_ratio = 0.0 }'
}
lab_zone_rate() {
    client_zones || return 0
    echo "max_rate = $LAB_CLIENT_ZONES"
}
lab_zone_b_group() {
    client_zones || return 0
    cat <<TOML
[[backend_services.groups]]
name = "lab-b"
region = "lab"
zone = "lab-b"
max_rate = $LAB_CLIENT_ZONES
endpoints = [
$1]
TOML
}
lab_client_zones() {
    client_zones || return 0
    cat <<TOML

[[client_zones]]
zone = "lab-a"
prefixes = ["198.18.0.0/25"]

[[client_zones]]
zone = "lab-b"
prefixes = ["198.18.0.128/25"]
TOML
}
# net_af_packet's ring frames for a port MTU (its default 2048-byte frames
# take up to 1996): a frame must hold the MTU behind TPACKET2_HDRLEN (52) and
# its data fit an mbuf's room behind the headroom (Spillway sizes the pool
# for the largest MTU: 9216 bytes for 9000), blocks whole pages holding whole
# frames (4 here, 512 frames in all).
af_packet_frames() {
    [ "$1" -gt 1500 ] || return 0
    echo ",framesz=9216,blocksz=36864"
}

# With LAB_REGIONS=2 the service is health-checked over HTTP (probes leave
# through the exception TAP) and backend3 forms region "far", which takes new
# connections only when region "lab" cannot (M24, M26). LAB_EXCEPTION=per-port
# checks the backends too (their probes leave by the backend port), and so
# does LAB_HEALTH=1 (the demo) alone.
#
# LAB_VIP_CHECK=1 checks through the VIP (target = "vip", M52), and adds a
# service "web-own" (no rule) with the same backends checked at their own
# addresses, to compare the two in `spillway status`.
health_checked() {
    [ "${LAB_REGIONS:-1}" = 2 ] || per_port || [ "${LAB_HEALTH:-0}" = 1 ] || vip_checked
}
vip_checked() { [ "${LAB_VIP_CHECK:-0}" = 1 ]; }

lab_health() {
    health_checked || return 0
    echo 'health_check = "web-http"'
}

# LAB_EXCEPTION=per-port: the backend port's own exception port.
lab_backend_exception() {
    per_port || return 0
    cat <<TOML

# The host's interface on the backend segment: the kernel reaches the
# backends through it (what it sends leaves by the backend port).
[[ports]]
name = "kernel-backends"
device = "net_tap1"
role = "exception"
for_port = "backends"
TOML
}

lab_far_group() {
    [ "${LAB_REGIONS:-1}" = 2 ] || return 0
    cat <<TOML
[[backend_services.groups]]
name = "far-a"
region = "far"
zone = "far-a"
endpoints = [
$1]
TOML
}

# An HTTP check NAME of port 80 every second, and its extra TOML lines.
http_check() {
    cat <<TOML
[[health_checks]]
name = "$1"
type = "HTTP"
port = 80
interval = "1s"
timeout = "500ms"
healthy_threshold = 1
unhealthy_threshold = 2
${2:-}
TOML
}

lab_checks() {
    health_checked || return 0
    http_check web-http "$(vip_checked && echo 'target = "vip"')"
    vip_checked || return 0
    http_check own-address
    cat <<TOML

[[backend_services]]
name = "web-own"
delivery = "gue"
health_check = "own-address"
[[backend_services.groups]]
name = "lab-a"
region = "lab"
zone = "lab-a"
endpoints = [
$1]
TOML
}

# The balancer host's kernel behind the exception TAP: the uplink's address,
# a default route via the router, and a line echo server on port 179 (a
# stand-in for BGP/SSH on the same NIC).
lab_host() {
    local dir=$1 L=$2 tap=$3
    for _ in $(seq 50); do
        nsx "$L" ip link show "$tap" >/dev/null 2>&1 && break
        sleep 0.1
    done
    # The uplink veths are the "NIC": in the lab the namespace's kernel sees
    # them too and, weak-host, would answer for 198.18.1.2 on them as well.
    # Strict reverse-path filtering there (the route back is via the TAP)
    # leaves those frames to the data plane only, as on real hardware.
    for i in up be; do
        nsx "$L" sysctl -qw "net.ipv4.conf.s$(cat "$dir/tag")$i.rp_filter=1"
    done
    nsx "$L" ip addr add 198.18.1.2/24 dev "$tap"
    nsx "$L" ip link set "$tap" up
    nsx "$L" ip route add default via 198.18.1.1
    if per_port; then
        # The backend port's address on its own interface: the kernel's
        # connected route to the backends' subnet, and its source there.
        for _ in $(seq 50); do
            nsx "$L" ip link show "${tap}b" >/dev/null 2>&1 && break
            sleep 0.1
        done
        nsx "$L" ip addr add "$BALANCER_BE/24" dev "${tap}b"
        nsx "$L" ip link set "${tap}b" up
    fi
    ip netns exec "$L" python3 -c '
import socketserver
class Echo(socketserver.StreamRequestHandler):
    def handle(self):
        for line in self.rfile:
            self.wfile.write(b"host " + line)
            self.wfile.flush()
socketserver.ThreadingTCPServer.allow_reuse_address = True
socketserver.ThreadingTCPServer(("198.18.1.2", 179), Echo).serve_forever()
' >"$dir/host-echo.log" 2>&1 &
    echo $! >"$dir/host-echo.pid"
}

lab_down() { lab_teardown "$1" spw c r lb b1 b2 b3; }

# Sends N requests from the client, prints "backend count" lines.
lab_requests() {
    local dir=$1 n=$2 T
    T=$(cat "$dir/tag")
    for _ in $(seq "$n"); do
        nsx "spw${T}c" curl -s --max-time 5 "http://$VIP/" || echo FAILED
    done | sort | uniq -c | awk '{print $2, $1}'
}

case "${1:-demo}" in
up) lab_up "$2" "$3" "${4:-$root/target/release}" ;;
down) lab_down "$2" ;;
requests) lab_requests "$2" "$3" ;;
backend)
    [ -f "$2/tag" ] || die "no lab in $2"
    case "${4:-}" in
    stop) http_stop "$2" "$3" ;;
    start)
        http_stop "$2" "$3"
        http_start "$2" "$3"
        http_wait "$2" "$3"
        ;;
    *) die "usage: $0 backend DIR N stop|start" ;;
    esac
    ;;
demo)
    mode="${2:-gue}"
    "$here/setup.sh"
    ensure_cargo
    say "building spillway (release)"
    (cd "$root" && cargo build --release --quiet -p spillway)
    dir="$(mktemp -d /tmp/spillway-lab.XXXXXX)"
    trap 'lab_down "$dir"; rm -rf "$dir"' EXIT INT TERM
    lab_up "$mode" "$dir" "$root/target/release"
    say "lab up ($mode): client -> VIP $VIP -> spillway -> 3 backends; 300 requests with curl"
    lab_requests "$dir" 300
    say "spillway's counters:"
    "$root/target/release/spillway" stats --socket "$dir/control.sock" | head -4
    ;;
*) die "usage: $0 demo [gue|ipip|l2dsr] | up MODE DIR [BIN] | down DIR | requests DIR N | backend DIR N stop|start" ;;
esac
