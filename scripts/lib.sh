# Helpers shared by the scripts (sourced, not run).
# shellcheck disable=SC2015 # "[ -f F ] && kill … || true": try, never fail

say() { printf '[spillway] %s\n' "$*" >&2; }
die() { printf '[spillway] error: %s\n' "$*" >&2; exit 1; }

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
        die "need root for: $*"
    fi
}

# Puts cargo on PATH when it was installed by rustup but the shell is not a
# login shell (as in CI).
ensure_cargo() {
    if ! command -v cargo >/dev/null 2>&1 && [ -f "$HOME/.cargo/env" ]; then
        # shellcheck disable=SC1091
        source "$HOME/.cargo/env"
    fi
    command -v cargo >/dev/null 2>&1 || die "cargo not found: install Rust with rustup (https://rustup.rs)"
}

hugepages_free() {
    awk '/^HugePages_Free:/ {print $2; found=1} END {if (!found) print 0}' /proc/meminfo
}

# EAL memory arguments that work on this machine right now.
eal_memory_args() {
    if (( $(hugepages_free) >= 64 )) && grep -qs ' hugetlbfs ' /proc/mounts; then
        echo "--in-memory"
    else
        echo "--no-huge --no-shconf -m 512"
    fi
}

# Whether any of PIDS still runs (a zombie does not: the lab's processes
# outlive the script that started them, and nobody may reap them).
any_running() {
    local p
    for p in "$@"; do
        case "$(ps -o stat= -p "$p" 2>/dev/null)" in
        "" | Z*) ;;
        *) return 0 ;;
        esac
    done
    return 1
}

# Takes down a namespace lab that a lab script's `up` built in DIR (which
# holds its tag): the processes of its pid files (TERM twice, then KILL what
# is left), then whatever still runs in its namespaces PREFIX<tag>NAME for
# each NAME, the namespaces, and the DPDK files of its --file-prefix
# PREFIX<tag>…. Without DIR/tag there is nothing to do.
lab_teardown() {
    local dir=$1 prefix=$2
    shift 2
    [ -f "$dir/tag" ] || return 0
    local T
    T=$(cat "$dir/tag")
    local f ns pids=()
    for f in "$dir"/*.pid; do
        [ -f "$f" ] && pids+=("$(cat "$f")")
    done
    # A daemon's first TERM starts its shutdown drain ([node]
    # shutdown_drain); the second, once its loop took the first (it checks
    # every 50 ms), exits at once, cleanly: a DPDK process killed with KILL
    # leaves its hugepage files behind.
    if ((${#pids[@]})); then
        kill "${pids[@]}" 2>/dev/null || true
        sleep 0.3
        kill "${pids[@]}" 2>/dev/null || true
        local _
        for _ in $(seq 50); do
            any_running "${pids[@]}" || break
            sleep 0.1
        done
        kill -9 "${pids[@]}" 2>/dev/null || true
    fi
    rm -f "$dir"/*.pid
    for ns in "$@"; do
        ip netns pids "$prefix$T$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
        ip netns del "$prefix$T$ns" 2>/dev/null || true
    done
    # DPDK leaves its runtime directory behind even with --in-memory, and
    # hugepage files when a process without it was killed.
    rm -rf "/var/run/dpdk/$prefix$T"*
    local m
    while read -r m; do
        rm -f "$m/$prefix$T"*
    done < <(awk '$3 == "hugetlbfs" {print $2}' /proc/mounts)
    rm -f "$dir/tag"
}

# The host's stack behind a lab node's exception TAP t<T>k<N> in namespace
# NS (scripts/lab-bgp.sh, lab-tunnels.sh, lab-vrrp.sh): waits for the TAP
# the node's data plane creates, gives it ADDR/24 and brings it up.
#   lab_node_host NS T N ADDR
lab_node_host() {
    local ns=$1 T=$2 n=$3 addr=$4
    for _ in $(seq 50); do
        ip netns exec "$ns" ip link show "t${T}k$n" >/dev/null 2>&1 && break
        sleep 0.1
    done
    ip netns exec "$ns" sysctl -qw "net.ipv4.conf.t${T}n$n.rp_filter=1"
    # The kernel sees the data plane's uplink frames too (af_packet on a
    # veth); rp_filter drops its copies, but UDP early demux skips that
    # check for a connected socket (flow sync has one per peer), which
    # would then get every datagram twice (refused as replays).
    ip netns exec "$ns" sysctl -qw net.ipv4.udp_early_demux=0
    ip netns exec "$ns" ip addr add "$addr/24" dev "t${T}k$n"
    ip netns exec "$ns" ip link set "t${T}k$n" up
}

# The [dataplane] table of lab node N (scripts/lab-bgp.sh, lab-tunnels.sh,
# lab-vrrp.sh): management on core 0, one worker on core 1, without
# hugepages where none are free, DPDK files under prefix STEM<T>n<N>, an
# af_packet uplink on veth t<T>n<N> (net_af_packet<N>0) and an exception TAP
# t<T>k<N> (net_tap<N>0).
#   lab_node_dataplane STEM T N
lab_node_dataplane() {
    local stem=$1 T=$2 n=$3
    cat <<TOML
[dataplane]
management_core = 0
worker_cores = [1]
mbufs = 4095
queue_descriptors = 512
flow_table_capacity = 65536
eal_args = ["$(eal_memory_args | sed 's/-m 512/-m 256/; s/ /", "/g')", "--file-prefix=${stem}${T}n$n", "--no-pci", "--no-telemetry",
  "--log-level=lib.eal:warning",
  "--vdev=net_af_packet${n}0,iface=t${T}n$n", "--vdev=net_tap${n}0,iface=t${T}k$n"]
TOML
}

# A line echo server on TCP port 7 in namespace NS whose answers name it:
# each line comes back as "NAME line" (long-lived connections for the labs'
# reload and takeover tests). Its log goes to LOG, its pid to PIDFILE.
#   lab_echo_server NS NAME LOG PIDFILE
lab_echo_server() {
    local ns=$1 name=$2 log=$3 pidfile=$4
    ip netns exec "$ns" python3 -c '
import socketserver, sys
name = sys.argv[1].encode()
class Echo(socketserver.StreamRequestHandler):
    def handle(self):
        for line in self.rfile:
            self.wfile.write(name + b" " + line)
            self.wfile.flush()
socketserver.ThreadingTCPServer.allow_reuse_address = True
socketserver.ThreadingTCPServer.daemon_threads = True
socketserver.ThreadingTCPServer(("0.0.0.0", 7), Echo).serve_forever()
' "$name" >"$log" 2>&1 &
    echo $! >"$pidfile"
}
