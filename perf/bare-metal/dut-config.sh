#!/usr/bin/env bash
# Writes the Spillway configuration of the device under test of perf/BARE-METAL.md to stdout:
# two NIC ports cabled to the traffic generator (uplink: traffic to the VIPs comes in; backend
# port: what Spillway delivers goes back out to the generator's second port), VIPs
# 198.18.10.10 (TCP 80, UDP 53) and 2001:db8::10 (TCP 80, UDP 53), eight IPv4 and eight IPv6
# endpoints, one delivery mode.
#
#   perf/bare-metal/dut-config.sh --mode gue --uplink 0000:3b:00.0 --backend 0000:3b:00.1 \
#       --gen-mac 3c:fd:fe:11:22:33 --mgmt 1 --workers 2,3,4,5 > /etc/spillway/bench.toml
#
#   --mode       l2dsr | ipip | gre | gre-key | gue | geneve                     (required)
#   --uplink     the port cabled to the generator's transmit port: a PCI address
#                (0000:3b:00.0, allow-listed with -a) or a DPDK virtual device with its
#                arguments (net_memif0,role=server,socket=/run/memif0.sock, created with --vdev)
#   --backend    the port cabled to the generator's receive port, the same way; MTU 9000 on
#                a NIC, 1500 on a virtual device (net_memif takes no larger frames)
#   --gen-mac    MAC of the generator's receive port: the next hop of every backend
#                (gateway_mac), and the endpoints' own MAC in l2dsr
#   --mgmt       management core (default 1)
#   --workers    worker cores, comma-separated (default 2,3,4,5)
#   --flows      flow-table capacity (default 2097152: twice the largest benchmark)
#   --socket     control socket (default /run/spillway/bench.sock)
#
# Tunnel modes reach the endpoints (198.18.20.11-18, 2001:db8:20::11-18) through the gateway
# 198.18.1.2 at --gen-mac; l2dsr endpoints sit on the backend port's subnet
# (198.18.1.11-18, 2001:db8:ff01::11-18) with --gen-mac as their MAC.
set -euo pipefail

mode=""
uplink="0000:3b:00.0"
backend="0000:3b:00.1"
gen_mac="02:00:00:00:00:fe"
mgmt=1
workers="2,3,4,5"
flows=2097152
socket="/run/spillway/bench.sock"

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" >&2; exit 2; }
while [ "$#" -gt 0 ]; do
    case "$1" in
        --mode) mode="$2"; shift 2 ;;
        --uplink) uplink="$2"; shift 2 ;;
        --backend) backend="$2"; shift 2 ;;
        --gen-mac) gen_mac="$2"; shift 2 ;;
        --mgmt) mgmt="$2"; shift 2 ;;
        --workers) workers="$2"; shift 2 ;;
        --flows) flows="$2"; shift 2 ;;
        --socket) socket="$2"; shift 2 ;;
        -h|--help) usage ;;
        *) echo "dut-config.sh: unknown argument $1" >&2; usage ;;
    esac
done

case "$mode" in
    l2dsr|ipip|gre|gre-key|gue|geneve) ;;
    "") echo "dut-config.sh: --mode is required" >&2; usage ;;
    *) echo "dut-config.sh: unknown mode $mode" >&2; usage ;;
esac
[[ "$gen_mac" =~ ^([0-9a-fA-F]{2}:){5}[0-9a-fA-F]{2}$ ]] || { echo "dut-config.sh: bad MAC $gen_mac" >&2; exit 2; }
[[ "$workers" =~ ^[0-9]+(,[0-9]+)*$ ]] || { echo "dut-config.sh: --workers takes 2,3,4,5" >&2; exit 2; }
# A PCI address is allow-listed with -a; a virtual device (net_*) only exists when created
# with --vdev. Either may carry device arguments after a comma; the port's `device` is the
# part before it.
eal_device() { # DEVICE -> its eal_args words, TOML-quoted
    case "$1" in
        net_*) printf '"--vdev=%s"' "$1" ;;
        *) printf '"-a", "%s"' "$1" ;;
    esac
}
for dev in "$uplink" "$backend"; do
    if ! [[ "${dev%%,*}" =~ ^net_[A-Za-z0-9_]+$ || "${dev%%,*}" =~ ^([0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$ ]]; then
        echo "dut-config.sh: $dev is neither a PCI address (0000:3b:00.0) nor a DPDK virtual device (net_...)" >&2
        exit 2
    fi
    [[ "$dev" != *'"'* ]] || { echo "dut-config.sh: no quotes in device arguments: $dev" >&2; exit 2; }
done
[ "${uplink%%,*}" != "${backend%%,*}" ] || { echo "dut-config.sh: --uplink and --backend are the same device" >&2; exit 2; }
# The backend port's MTU: 9000 on a NIC (room for the tunnel headers on full-size frames); a
# virtual device keeps Ethernet's 1500, since net_memif takes no frame over 1518 bytes (DPDK's
# max_rx_pktlen) and Spillway refuses to start a port whose MTU the device cannot take.
case "${backend%%,*}" in
    net_*) backend_mtu=1500; mtu_why="a virtual device: net_memif takes no larger frames" ;;
    *) backend_mtu=9000; mtu_why="room for the tunnel headers on full-size frames" ;;
esac
n_workers=$(( $(tr -cd ',' <<<"$workers" | wc -c) + 1 ))
# Every worker has an RX and a TX ring on both ports, plus bursts in flight.
mbufs=$(( 2048 * 2 * 2 * n_workers + 8192 ))

case "$mode" in
    l2dsr) delivery='delivery = "l2dsr"' ;;
    ipip) delivery='delivery = "ipip"                  # 4in4 for "bench", 6in6 for "bench6"' ;;
    gre) delivery='delivery = "gre"                   # no key: 4-byte GRE header' ;;
    gre-key) delivery=$'delivery = "gre"\ngre_key = 42                        # 8-byte GRE header' ;;
    gue) delivery=$'delivery = "gue"\ngue_port = 6080                     # GUE variant 1: outer UDP only' ;;
    geneve) delivery=$'delivery = "geneve"\ngeneve = { port = 6081, option_class = 0x0139, endpoint_id_type = 1, flow_cookie_type = 3 }' ;;
esac

endpoints() { # family
    local i sep=""
    printf 'endpoints = ['
    for i in 11 12 13 14 15 16 17 18; do
        if [ "$mode" = l2dsr ]; then
            if [ "$1" = 4 ]; then
                printf '%s\n  { address = "198.18.1.%s", mac = "%s" }' "$sep" "$i" "$gen_mac"
            else
                printf '%s\n  { address = "2001:db8:ff01::%s", mac = "%s" }' "$sep" "$i" "$gen_mac"
            fi
        elif [ "$1" = 4 ]; then
            printf '%s\n  { address = "198.18.20.%s" }' "$sep" "$i"
        else
            printf '%s\n  { address = "2001:db8:20::%s" }' "$sep" "$i"
        fi
        sep=","
    done
    printf '\n]\n'
}

cat <<EOF
# Spillway on the benchmark DUT (perf/BARE-METAL.md), delivery mode "$mode".
# Generated by: perf/bare-metal/dut-config.sh --mode $mode --uplink $uplink --backend $backend \\
#   --gen-mac $gen_mac --mgmt $mgmt --workers $workers --flows $flows
# Check it with: spillway check-config FILE

[node]
name = "bench-dut"
region = "lab"
zone = "lab-a"

[dataplane]
management_core = $mgmt
worker_cores = [$workers]            # one RX/TX queue pair per worker on each port (RSS)
eal_args = [$(eal_device "$uplink"), $(eal_device "$backend"), "--file-prefix", "spillway", "--log-level=lib.eal:warning"]
burst_size = 32
mbufs = $mbufs
queue_descriptors = 2048
flow_table_capacity = $flows      # room for 1,048,576 flows without eviction or stateless fallback

[[ports]]
name = "uplink"
device = "${uplink%%,*}"
role = "uplink"
addresses = ["198.18.0.1/24", "2001:db8:ff00::1/64"]

[[ports]]
name = "backends"
device = "${backend%%,*}"
role = "backend"
addresses = ["198.18.1.1/24", "2001:db8:ff01::1/64"]   # outer source of IPv4 / IPv6 tunnels
gateway = "198.18.1.2"
gateway_mac = "$gen_mac"   # the generator's receive port: no ARP, every frame goes there
mtu = $backend_mtu                             # $mtu_why

[[forwarding_rules]]
name = "bench-tcp"
vips = ["198.18.10.10"]
protocol = "TCP"
ports = 80
backend_service = "bench"

[[forwarding_rules]]
name = "bench-udp"
vips = ["198.18.10.10"]
protocol = "UDP"
ports = 53
backend_service = "bench"

[[forwarding_rules]]
name = "bench6-tcp"
vips = ["2001:db8::10"]
protocol = "TCP"
ports = 80
backend_service = "bench6"

[[forwarding_rules]]
name = "bench6-udp"
vips = ["2001:db8::10"]
protocol = "UDP"
ports = 53
backend_service = "bench6"

[[backend_services]]
name = "bench"
$delivery

[[backend_services.groups]]
name = "lab-a"
region = "lab"
zone = "lab-a"
$(endpoints 4)

[[backend_services]]
name = "bench6"
$delivery

[[backend_services.groups]]
name = "lab-a"
region = "lab"
zone = "lab-a"
$(endpoints 6)

[control]
socket = "$socket"
EOF
