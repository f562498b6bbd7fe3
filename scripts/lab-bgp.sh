#!/usr/bin/env bash
# A two-node ECMP namespace lab for VIP announcement through BIRD (M34, M35):
# a router namespace runs BIRD 2 and peers (eBGP) with a BIRD in each
# Spillway node's namespace, which announces what that node decides (the
# routes file Spillway writes, `spillway bird-config`'s bird.conf). The
# router's BIRD merges the two nodes' routes into one ECMP kernel route,
# hashed on L4 (fib_multipath_hash_policy=1), so new connections spread over
# both nodes; both build the same Maglev tables, so both send a flow to the
# same backend (l2dsr, the VIP on the backends' loopback, answers go back
# directly). Each node is its own DPDK process (own --file-prefix, no
# hugepages needed) on net_af_packet ports, with an exception TAP for its
# host's stack, where its BIRD (BGP on TCP 179, BFD on UDP 3784) and its
# health probes live. BFD runs on every BGP session (100 ms x 3), so the
# router drops a dead node's routes within about 0.3 s; LAB_BFD=off leaves
# it out of the nodes' sessions (to compare: then BGP's hold time, 9 s).
# Everything lives in namespaces this script creates, named by a per-run tag,
# with addresses from 198.18.0.0/15 that never leave them.
#
#   scripts/lab-bgp.sh up [sync] [capacity] [zones] [ag] DIR [BIN]   build the lab
#                                                   (tests/lab_bgp.rs, tests/lab_zones.rs)
#   scripts/lab-bgp.sh down DIR                                 remove it
#
#   client 198.18.0.100 -- router 198.18.0.1, AS 65000, BIRD (ECMP into its kernel)
#                            | 198.18.1.1 (bridge)
#        +-------------------+------------------+-----------------+-----------------+
#   node 1 198.18.1.2   node 2 198.18.1.3   backend 198.18.1.11  198.18.1.12   198.18.1.13
#   AS 65001, BIRD      AS 65001, BIRD      (VIPs on lo)         (VIPs on lo)  (VIPs on lo)
#
# VIP 198.18.10.10 (rule web) is checked on port 80 (healthy), VIP
# 198.18.10.11 (rule spare) on the port after `port = ` on its line marked
# `# spare` (80 at first); tests/lab_bgp.rs edits and reloads. Backend 3
# runs but is in no service: its endpoint line in web's group is commented
# out and marked `# b3`, for a test that changes the backend set. With
# `sync`, the nodes sync flow state ([flow_sync], UDP 7700 between their
# uplink addresses). `[node] shutdown_drain` is 5 s, short enough for a test
# to watch a whole graceful shutdown.
#
# With `capacity`, a third rule `capped` (VIP 198.18.10.12, TCP 80) goes to
# service `capped`, balancing_mode RATE, with two groups: `near` (region lab,
# backend 1, max_rate $CAPPED_MAX_RATE packets/s, default 100) and `far`
# (region far, backend 2, max_rate 100000); the nodes prefer lab, then far.
# nftables counters (table `spb`, counter `capped`) count the packets for
# that VIP and port: at the client on output, at backends 1 and 2 as they
# arrive (prerouting). The health probes go to the backends' own addresses,
# so they are not counted.
#
# With `zones`, the two nodes are two zones of one site (M51, docs/zones.md):
# node 1 (zone a) also serves VIP $VIP_A, node 2 (zone b) VIP $VIP_B (rule
# `zone`, TCP 80, to web's backends, which carry both on lo), each announced by
# its own node only. A DNS namespace behind the router (198.18.5.53) runs Knot
# DNS, authoritative for lab.test, taking dynamic updates signed with the TSIG
# key spillway-zones (hmac-sha256, a fresh secret in DIR/dns/tsig.secret).
# DIR/zone-health.toml configures `spillway zone-health` to publish
# www.lab.test from the client namespace (the test starts it, socket
# DIR/zone-health.sock).
#
# With `ag`, the nodes are two availability groups (M5): node 1 has
# `availability_group = 0`, node 2 `availability_group = 1`. Rule web gets a
# second VIP, $VIP_AG1 (group 1), and web's check probes through the VIPs
# (target = "vip", M52); rule spare gets $VIP2_AG1, so that each node keeps
# a healthy VIP of its own when web fails on its side (no fail-open). The
# backends carry both on lo.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
source "$here/lib.sh"

VIP=198.18.10.10
VIP2=198.18.10.11
VIP3=198.18.10.12
VIP_AG1=198.18.10.13
VIP2_AG1=198.18.10.14
VIP_A=198.18.10.20
VIP_B=198.18.10.21
DNS=198.18.5.53
# packets/s of the capped service's near group (tests/lab_bgp.rs sets it)
CAPPED_MAX_RATE=${CAPPED_MAX_RATE:-100}
# `off`: the nodes' BGP sessions without BFD ([bgp] bfd = { enabled = false };
# the router keeps its own), to compare a crash's figures without it
LAB_BFD=${LAB_BFD:-on}
ROUTER_MAC=02:53:51:00:00:fe

nsx() { local ns=$1; shift; ip netns exec "$ns" "$@"; }

# node N's configuration; ENDPOINTS: the backends' TOML lines, EXTRA web's
# further ones, SYNC 1 for [flow_sync], CAPACITY 1 for the capped service,
# ZONES 1 for the zone's own VIP, AG 1 for availability groups.
node_toml() {
    local n=$1 T=$2 addr=$3 dir=$4 endpoints=$5 extra=$6 sync=$7 capacity=$8 zones=$9 ag=${10}
    local web_vips="\"$VIP\"" spare_vips="\"$VIP2\"" target=""
    if [ "$ag" = 1 ]; then
        web_vips+=", \"$VIP_AG1\""
        spare_vips+=", \"$VIP2_AG1\""
        target='target = "vip"'
    fi
    cat <<TOML
[node]
name = "node$n"
region = "lab"
zone = "lab-a"
shutdown_drain = "5s"
TOML
    if [ "$ag" = 1 ]; then
        echo "availability_group = $((n - 1))"
    fi
    if [ "$capacity" = 1 ]; then
        echo 'region_preference = ["lab", "far"]'
    fi
    cat <<TOML

TOML
    lab_node_dataplane spb "$T" "$n"
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
vips = [$web_vips]
protocol = "TCP"
ports = 80
backend_service = "web"

[[forwarding_rules]]
name = "spare"
vips = [$spare_vips]
protocol = "TCP"
ports = 80
backend_service = "spare"

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

[[backend_services]]
name = "spare"
delivery = "l2dsr"
health_check = "spare-check"
[[backend_services.groups]]
name = "lab-a"
region = "lab"
zone = "lab-a"
endpoints = [
$endpoints]

[[health_checks]]
name = "web-check"
type = "TCP"
port = 80 # web
interval = "500ms"
timeout = "400ms"
healthy_threshold = 1
unhealthy_threshold = 1
$target

[[health_checks]]
name = "spare-check"
type = "TCP"
port = 80 # spare
interval = "500ms"
timeout = "400ms"
healthy_threshold = 1
unhealthy_threshold = 1

[bgp]
speaker = "bird"
control = "$dir/n$n/bird.ctl"
local_asn = 65001
router_id = "$addr"
peers = [{ address = "198.18.1.1", asn = 65000 }]
routes_file = "$dir/n$n/bird-vips.conf"
TOML
    if [ "$LAB_BFD" = off ]; then
        echo 'bfd = { enabled = false }'
    fi
    cat <<TOML

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
peers = ["198.18.1.$((4 - n)):7700"]
key = "hex:5370696c6c776179206c61622073796e63206b6579"
TOML
    fi
    if [ "$zones" = 1 ]; then
        local zvip=$VIP_A
        [ "$n" = 1 ] || zvip=$VIP_B
        cat <<TOML

[[forwarding_rules]]
name = "zone"
vips = ["$zvip"]
protocol = "TCP"
ports = 80
backend_service = "web"
TOML
    fi
    if [ "$capacity" = 1 ]; then
        # Backend 1 near (capped), backend 2 far (all the rest).
        cat <<TOML

[[forwarding_rules]]
name = "capped"
vips = ["$VIP3"]
protocol = "TCP"
ports = 80
backend_service = "capped"

[[backend_services]]
name = "capped"
delivery = "l2dsr"
health_check = "capped-check"
balancing_mode = "RATE"
[[backend_services.groups]]
name = "near"
region = "lab"
zone = "lab-a"
max_rate = $CAPPED_MAX_RATE
endpoints = [{ address = "198.18.1.11", mac = "02:53:51:00:00:11" }]
[[backend_services.groups]]
name = "far"
region = "far"
zone = "far-a"
max_rate = 100000
endpoints = [{ address = "198.18.1.12", mac = "02:53:51:00:00:12" }]

[[health_checks]]
name = "capped-check"
type = "TCP"
port = 80
interval = "500ms"
timeout = "400ms"
healthy_threshold = 1
unhealthy_threshold = 1
TOML
    fi
}

# An nftables counter `capped` in namespace NS counting packets for the
# capped VIP's TCP port 80 on HOOK (output at the client, prerouting at a
# backend: before anything there could drop them).
count_capped() {
    local ns=$1 hook=$2
    nsx "$ns" nft -f - <<NFT
table inet spb {
  counter capped {}
  chain count {
    type filter hook $hook priority -300; policy accept;
    ip daddr $VIP3 tcp dport 80 counter name capped
  }
}
NFT
}

# The host's stack behind node N's exception TAP (as in lab-tunnels.sh).
node_host() {
    local ns=$1 T=$2 n=$3 addr=$4
    lab_node_host "$ns" "$T" "$n" "$addr"
    # The data plane may still be bringing the TAP's link up (its connected
    # route comes and goes with it): "Nexthop has invalid gateway" meanwhile.
    for _ in $(seq 50); do
        nsx "$ns" ip route replace default via 198.18.1.1 2>/dev/null && return 0
        sleep 0.1
    done
    nsx "$ns" ip route replace default via 198.18.1.1
}

# The DNS namespace D behind the router: Knot DNS, authoritative for
# lab.test, updates with the TSIG key only; and the zone health service's
# configuration for the client namespace.
dns_up() {
    local D=$1 R=$2 T=$3 dir=$4
    command -v knotd >/dev/null || die "knotd not found: scripts/setup.sh installs knot"
    ip netns add "$D"
    nsx "$D" ip link set lo up
    ip link add "t${T}d" netns "$D" type veth peer name "t${T}rd" netns "$R"
    nsx "$D" ip addr add "$DNS/24" dev "t${T}d"
    nsx "$D" ip link set "t${T}d" up
    nsx "$D" ip route add default via 198.18.5.1
    nsx "$R" ip addr add 198.18.5.1/24 dev "t${T}rd"
    nsx "$R" ip link set "t${T}rd" up
    local d="$dir/dns"
    mkdir -p "$d"
    head -c 32 /dev/urandom | base64 >"$d/tsig.secret"
    cat >"$d/knot.conf" <<KNOT
server:
    rundir: $d
    listen: $DNS@53
database:
    storage: $d
key:
  - id: spillway-zones
    algorithm: hmac-sha256
    secret: $(cat "$d/tsig.secret")
acl:
  - id: zone-health
    key: spillway-zones
    action: update
zone:
  - domain: lab.test
    storage: $d
    file: lab.test.zone
    acl: zone-health
    zonefile-sync: -1
    journal-content: changes
log:
  - target: $d/knot.log
    any: info
KNOT
    cat >"$d/lab.test.zone" <<ZONE
\$ORIGIN lab.test.
\$TTL 300
@ SOA ns hostmaster 1 3600 600 86400 300
@ NS ns
ns A $DNS
ZONE
    ip netns exec "$D" knotd -c "$d/knot.conf" >"$d/knotd.out" 2>&1 &
    echo $! >"$dir/knotd.pid"
    for _ in $(seq 50); do
        nsx "$D" dig +short +time=1 +tries=1 "@$DNS" ns.lab.test A 2>/dev/null | grep -q "$DNS" && break
        sleep 0.1
    done
    cat >"$dir/zone-health.toml" <<TOML
[dns]
server = "$DNS:53"
zone = "lab.test"
name = "www.lab.test"
ttl = 60
timeout = "1s"

[dns.tsig]
name = "spillway-zones"
algorithm = "hmac-sha256"
secret_file = "$d/tsig.secret"

[probe]
interval = "1s"
timeout = "500ms"
unhealthy_threshold = 3
healthy_threshold = 2
icmp = true
kind = "tcp"
port = 80

[control]
socket = "$dir/zone-health.sock"

[[zones]]
name = "a"
vips = ["$VIP_A"]

[[zones]]
name = "b"
vips = ["$VIP_B"]
TOML
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

# BIRD in namespace NS with config CONF, control socket SOCK; pid in PIDFILE.
start_bird() {
    local ns=$1 conf=$2 sock=$3 pidfile=$4 log=$5
    bird -p -c "$conf" || die "$conf: BIRD rejects it"
    ip netns exec "$ns" bird -f -c "$conf" -s "$sock" >"$log" 2>&1 &
    echo $! >"$pidfile"
    for _ in $(seq 50); do
        [ -S "$sock" ] && return 0
        sleep 0.1
    done
    cat "$log" >&2
    die "BIRD in $ns did not open $sock"
}

lab_up() {
    local dir=$1 bin=$2 sync=$3 capacity=$4 zones=$5 ag=$6
    command -v bird >/dev/null || die "bird not found: scripts/setup.sh installs bird2"
    if [ "$capacity" = 1 ]; then
        command -v nft >/dev/null || die "nft not found: scripts/setup.sh installs nftables"
    fi
    mkdir -p "$dir/n1" "$dir/n2" "$dir/r"
    local T
    T=$(printf '%04x' $(( ($$ + RANDOM) % 65536 )))
    echo "$T" >"$dir/tag"
    local C="spb${T}c" R="spb${T}r"
    for ns in "$C" "$R" "spb${T}n1" "spb${T}n2"; do
        ip netns add "$ns"
        nsx "$ns" ip link set lo up
        nsx "$ns" sysctl -qw net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0
    done
    # ECMP hashed on the 5-tuple: one client's connections spread.
    nsx "$R" sysctl -qw net.ipv4.ip_forward=1 net.ipv4.conf.all.send_redirects=0 \
        net.ipv4.conf.default.send_redirects=0 net.ipv4.fib_multipath_hash_policy=1

    ip link add "t${T}c" netns "$C" type veth peer name "t${T}rc" netns "$R"
    nsx "$C" ip addr add 198.18.0.100/24 dev "t${T}c"
    nsx "$C" ip link set "t${T}c" up
    nsx "$C" ip route add default via 198.18.0.1
    # The client's sockets keep their flow hash at a retransmission timeout
    # (Linux 5.19's default draws a new one, and the router's ECMP follows
    # it): a stalled connection must not hop to the live node and hide an
    # outage, as with a real router's 5-tuple hash. Per namespace.
    nsx "$C" sysctl -qw net.core.txrehash=0
    # Full checksums: the balancers pass frames on as they get them.
    nsx "$C" ethtool -K "t${T}c" tx off >/dev/null
    nsx "$R" ip addr add 198.18.0.1/24 dev "t${T}rc"
    nsx "$R" ip link set "t${T}rc" up
    if [ "$capacity" = 1 ]; then
        count_capped "$C" output
    fi

    nsx "$R" ip link add "t${T}br" address "$ROUTER_MAC" type bridge
    nsx "$R" ip addr add 198.18.1.1/24 dev "t${T}br"
    nsx "$R" ip link set "t${T}br" up
    # Full checksums on what the router itself sends (its BGP sessions):
    # the nodes hand those frames to their kernels as they get them.
    nsx "$R" ethtool -K "t${T}br" tx off >/dev/null
    for n in 1 2; do
        local ns="spb${T}n$n"
        ip link add "t${T}n$n" netns "$ns" type veth peer name "t${T}r$n" netns "$R"
        nsx "$ns" ip link set "t${T}n$n" up
        nsx "$R" ip link set "t${T}r$n" master "t${T}br" up
    done

    local endpoints="" extra=""
    for i in 1 2 3; do
        local B="spb${T}b$i" addr="198.18.1.1$i" mac="02:53:51:00:00:1$i"
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
        nsx "$B" ip addr add "$VIP2/32" dev lo
        nsx "$B" ip addr add "$VIP3/32" dev lo
        if [ "$zones" = 1 ]; then
            nsx "$B" ip addr add "$VIP_A/32" dev lo
            nsx "$B" ip addr add "$VIP_B/32" dev lo
        fi
        if [ "$ag" = 1 ]; then
            nsx "$B" ip addr add "$VIP_AG1/32" dev lo
            nsx "$B" ip addr add "$VIP2_AG1/32" dev lo
        fi
        if [ "$capacity" = 1 ] && [ "$i" != 3 ]; then
            count_capped "$B" prerouting
        fi
        nsx "$R" ip link set "t${T}rb$i" master "t${T}br" up
        mkdir -p "$dir/www$i"
        echo "backend$i" >"$dir/www$i/index.html"
        # HTTP/1.1: a client may keep its connection for many requests.
        ip netns exec "$B" python3 -m http.server 80 --protocol HTTP/1.1 --bind 0.0.0.0 --directory "$dir/www$i" \
            >"$dir/http$i.log" 2>&1 &
        echo $! >"$dir/http$i.pid"
        if [ "$i" = 3 ]; then
            extra+="  #{ address = \"$addr\", mac = \"$mac\" }, # b3"$'\n'
        else
            endpoints+="  { address = \"$addr\", mac = \"$mac\" },"$'\n'
        fi
    done

    # The router's BIRD: a session per node, their routes merged into one
    # multipath kernel route; BFD on each session (as the nodes' bird.conf
    # has it), so that a dead node's routes go within 3 x 100 ms rather than
    # at the end of BGP's hold time.
    cat >"$dir/r/bird.conf" <<BIRD
router id 198.18.1.1;
protocol device {
}
protocol kernel {
  ipv4 { import none; export all; };
  merge paths on;
}
protocol bfd {
  interface "*" {
    min rx interval 100 ms;
    min tx interval 100 ms;
    multiplier 3;
  };
}
BIRD
    for n in 1 2; do
        cat >>"$dir/r/bird.conf" <<BIRD
protocol bgp node$n {
  local 198.18.1.1 as 65000;
  neighbor 198.18.1.$((n + 1)) as 65001;
  bfd on;
  ipv4 { import all; export none; };
}
BIRD
    done
    start_bird "$R" "$dir/r/bird.conf" "$dir/r/bird.ctl" "$dir/birdr.pid" "$dir/birdr.log"
    if [ "$zones" = 1 ]; then
        dns_up "spb${T}d" "$R" "$T" "$dir"
    fi

    for n in 1 2; do
        local ns="spb${T}n$n" addr="198.18.1.$((n + 1))"
        node_toml "$n" "$T" "$addr" "$dir" "$endpoints" "$extra" "$sync" "$capacity" "$zones" "$ag" \
            >"$dir/node$n.toml"
        "$bin/spillway" bird-config --config "$dir/node$n.toml" >"$dir/n$n/bird.conf"
        start_node "$ns" "$n" "$dir" "$bin"
        node_host "$ns" "$T" "$n" "$addr"
        start_bird "$ns" "$dir/n$n/bird.conf" "$dir/n$n/bird.ctl" "$dir/bird$n.pid" "$dir/bird$n.log"
    done
}

lab_down() { lab_teardown "$1" spb c r n1 n2 b1 b2 b3 d; }

case "${1:-}" in
up)
    sync=0 capacity=0
    if [ "${2:-}" = sync ]; then
        sync=1
        shift
    fi
    if [ "${2:-}" = capacity ]; then
        capacity=1
        shift
    fi
    zones=0
    if [ "${2:-}" = zones ]; then
        zones=1
        shift
    fi
    ag=0
    if [ "${2:-}" = ag ]; then
        ag=1
        shift
    fi
    dir="$2"
    # A failed start leaves nothing behind.
    trap 'lab_down "$dir"' EXIT
    lab_up "$dir" "${3:-$root/target/release}" "$sync" "$capacity" "$zones" "$ag"
    trap "" EXIT
    ;;
down) lab_down "$2" ;;
*) die "usage: $0 up [sync] [capacity] [zones] [ag] DIR [BIN] | down DIR" ;;
esac
