#!/usr/bin/env bash
# Spillway's main job on one machine (M45), narrated step by step: builds
# Spillway and the network-namespace lab of scripts/lab.sh (a client, a
# router, the balancer on DPDK net_af_packet ports, three backends running
# real HTTP servers), then
#   - runs traffic through the VIP and shows the live `spillway status`;
#   - kills a backend's server: the health checks mark it Unhealthy, new
#     connections go to the other two; restarts it: Healthy, spread again;
#   - reloads the configuration under load (a weight changes) without losing
#     a connection;
#   - draws the spread of the connections over the backends as a PNG;
#   - shows the gateway path through the reference appliance (`spillway nva`,
#     the lab of scripts/lab-gateway.sh);
#   - shows two nodes behind BIRD (ECMP, scripts/lab-bgp.sh), one drained
#     with `spillway drain node`, its traffic moving to the other;
# and removes everything it made at the end, also on Ctrl-C or an error.
# About 40 seconds on 2 cores (plus the first build); --quick: the first
# lab only, about 20 seconds. Needs root (network namespaces).
#
#   scripts/demo.sh [--quick] [gue|ipip]   delivery mode to the backends (default gue)
#
# Environment: DEMO_QUICK=1 is --quick; DEMO_OUT=DIR where the picture goes
# (default target/demo); DEMO_BIN=DIR a directory holding a built `spillway`
# (then neither scripts/setup.sh nor the build runs: the tests use it).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
source "$here/lib.sh"
# Times are compared as numbers with a decimal point.
export LC_ALL=C

VIP=198.18.10.10

quick="${DEMO_QUICK:-0}"
mode=gue
for arg in "$@"; do
    case "$arg" in
    --quick) quick=1 ;;
    gue | ipip) mode=$arg ;;
    -h | --help)
        sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
        exit 0
        ;;
    *) die "usage: $0 [--quick] [gue|ipip]" ;;
    esac
done
out="${DEMO_OUT:-$root/target/demo}"
bin="${DEMO_BIN:-}"
# Absolute: it is handed on to the labs' scripts.
[ -z "$bin" ] || bin="$(cd "$bin" && pwd)"
if [ "$(id -u)" != 0 ]; then
    die "the demo needs root (network namespaces): build as yourself with
  cargo build --release -p spillway
then run  sudo DEMO_BIN=target/release $0 $*"
fi

# How long each part runs (seconds) and how many requests: the quick run
# shows the same on less.
if [ "$quick" = 1 ]; then
    rate=40 look=2 settle=2 burst=40
else
    rate=50 look=5 settle=4 burst=200
fi

# ---------------------------------------------------------------------------
# Narration and progress.

tty=0
[ -t 1 ] && tty=1
step_no=0
steps=8
[ -z "$bin" ] && steps=$((steps + 1))
[ "$quick" = 1 ] && steps=$((steps - 2))
surprises=0
demo_t0=$SECONDS

heading() {
    step_no=$((step_no + 1))
    printf '\n== [%d/%d] %s ==\n' "$step_no" "$steps" "$1"
}
# What to look at in this step.
look() { printf '   look at: %s\n' "$*"; }
note() { printf '   %s\n' "$*"; }
good() { printf '   ok: %s\n' "$*"; }
# An outcome the demo did not expect: said at once, and the demo fails at the end.
bad() {
    printf '   UNEXPECTED: %s\n' "$*"
    surprises=$((surprises + 1))
}
indent() { sed 's/^/     /'; }

# Microseconds since the epoch (EPOCHREALTIME without its decimal sign).
now_us() { echo "${EPOCHREALTIME//[!0-9]/}"; }
secs_since() { # tenths of a second since T (µs) as "1.2"
    local d=$(($(now_us) - $1))
    printf '%d.%d' $((d / 1000000)) $((d / 100000 % 10))
}

# Background processes of the demo itself, ended by cleanup (and
# forgotten once waited for: their ids may be reused).
bg=()
forget() {
    local p keep=()
    for p in "${bg[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done
    bg=("${keep[@]}")
}

# progress LABEL CMD...: runs CMD in the background (its output in
# $work/progress.out) and shows that it is going: a spinner with the seconds
# so far on a terminal, otherwise a plain line at the start and every 5 s.
# Ends the demo, with CMD's output, when CMD fails.
progress() {
    local label=$1
    shift
    local t0 pid rc=0 i=0 next=5 spin="|/-\\"
    t0=$(now_us)
    "$@" >"$work/progress.out" 2>&1 &
    pid=$!
    bg+=("$pid")
    ((tty)) || printf '   ... %s\n' "$label"
    while any_running "$pid"; do
        if ((tty)); then
            printf '\r   %s %s  %ss ' "${spin:i++%4:1}" "$label" "$(secs_since "$t0")"
        elif (($(now_us) - t0 >= next * 1000000)); then
            printf '   ... %s (%ds)\n' "$label" "$next"
            next=$((next + 5))
        fi
        sleep 0.2
    done
    wait "$pid" || rc=$?
    forget "$pid"
    ((tty)) && printf '\r\033[K'
    if ((rc)); then
        printf '   FAILED: %s (exit %d) after %ss:\n' "$label" "$rc" "$(secs_since "$t0")"
        indent <"$work/progress.out"
        exit 1
    fi
    printf '   done: %s (%ss)\n' "$label" "$(secs_since "$t0")"
}

# A line "time label" for the picture: the steps on its time line.
mark() { echo "$EPOCHREALTIME $*" >>"$work/marks"; }

# ---------------------------------------------------------------------------
# Cleanup: every lab this run built, the demo's own processes, the work
# directory. On exit, Ctrl-C (INT), TERM and errors alike.

labs=()   # "script dir" of each lab started, for cleanup
cleaned=0
cleanup() {
    local rc=$?
    trap '' INT TERM
    set +e
    ((cleaned)) && return
    cleaned=1
    ((tty)) && printf '\r\033[K'
    printf '\n== cleaning up ==\n'
    if ((${#bg[@]})); then
        kill "${bg[@]}" 2>/dev/null
        sleep 0.2
        kill -9 "${bg[@]}" 2>/dev/null
    fi
    local l script dir tag left
    for l in "${labs[@]}"; do
        script=${l%% *} dir=${l#* }
        [ -f "$dir/tag" ] || continue
        tag="$(cat "$dir/tag")"
        bash "$here/$script" down "$dir"
        left=$(ip netns list | awk '{print $1}' | grep -c "^sp.${tag}" || true)
        if [ "$left" = 0 ]; then
            note "$script: lab $tag removed (namespaces, processes, DPDK files)"
        else
            note "$script: $left namespaces of lab $tag are left: ip netns list"
            rc=1
        fi
    done
    [ -n "${work:-}" ] && rm -rf "$work"
    note "work directory $work removed"
    if ((rc == 0 && surprises)); then
        printf '\n%d unexpected outcome(s): see UNEXPECTED above\n' "$surprises"
        rc=1
    fi
    ((rc == 0)) && printf '\nDemo done in %ds.\n' $((SECONDS - demo_t0))
    exit "$rc"
}

work="$(mktemp -d /tmp/spillway-demo.XXXXXX)"
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
# What failed when a command of the script itself ends it (set -e).
trap 'printf "   error: line %d: %s failed\n" "$LINENO" "$BASH_COMMAND" >&2' ERR

title="Spillway demo"
[ "$quick" = 1 ] && title+=" (quick)"
printf '%s: a load balancer on DPDK virtual devices in network namespaces.\n' "$title"
note "work directory: $work"

# ---------------------------------------------------------------------------

if [ -z "$bin" ]; then
    heading "Preparing this machine and building Spillway"
    look "scripts/setup.sh installs what is missing; the build is incremental"
    progress "scripts/setup.sh" "$here/setup.sh"
    ensure_cargo
    progress "cargo build --release -p spillway" \
        cargo build --release --quiet -p spillway --manifest-path "$root/Cargo.toml"
    bin="$root/target/release"
fi
[ -x "$bin/spillway" ] || die "no spillway binary in $bin"

# ---------------------------------------------------------------------------
heading "The lab: a client, a router, Spillway on DPDK, three backends"
look "the topology; every namespace and interface name carries this run's tag"
main="$work/main"
labs+=("lab.sh $main")
progress "building the namespace lab (scripts/lab.sh up $mode)" \
    env LAB_HEALTH=1 bash "$here/lab.sh" up "$mode" "$main" "$bin"
T=$(cat "$main/tag")
C="spw${T}c"
sock="$main/control.sock"
status() { "$bin/spillway" status --socket "$sock"; }
cat <<EOF
     client 198.18.0.100 --- router --- [uplink] Spillway [backends] --- backend1 198.18.2.11
                                 VIP $VIP                    |--------- backend2 198.18.2.12
                                                                        \`-------- backend3 198.18.2.13
EOF
note "namespaces spw${T}c (client), spw${T}r (router), spw${T}lb (Spillway), spw${T}b1..3 (backends)"
note "Spillway sends each new connection to a backend (Maglev) in ${mode^^}; the backends answer"
note "the client directly. Every backend is health-checked over HTTP once a second."
wait_healthy() {
    until [ "$(status | grep -c 'health web/.*: HEALTHY')" = 3 ]; do sleep 0.2; done
}
progress "waiting for the health checks: all three backends HEALTHY" timeout 30 bash -c \
    "$(declare -f wait_healthy status); bin='$bin' sock='$sock' wait_healthy"

# ---------------------------------------------------------------------------
heading "Traffic, and the live status table"
look "'load ... pps' and 'flow table: ... live' grow; every backend active and HEALTHY"
note "the client opens $rate new HTTP connections a second to $VIP (scripts/demo-client.py)"
stop_load="$work/load.stop"
ip netns exec "$C" python3 "$here/demo-client.py" load "$VIP" "$rate" "$work/requests.log" "$stop_load" \
    >"$work/load.out" 2>&1 &
load_pid=$!
bg+=("$load_pid")
mark "traffic"
traffic_t0=$EPOCHREALTIME
if ((tty)); then
    # Redrawn in place once a second, each line cut to the terminal's width
    # (a wrapped line would throw off the count of lines to go back up).
    cols=$(stty size </dev/tty 2>/dev/null | awk '{print $2}') || true
    # Unknown (0 on a terminal without a size): a usual width.
    ((${cols:-0} >= 40)) || cols=100
    lines=0
    for _ in $(seq "$look"); do
        st="$(status | indent | cut -c "1-$((cols - 1))")"
        ((lines)) && printf '\033[%dA\033[J' "$lines"
        printf '%s\n' "$st"
        lines=$(printf '%s\n' "$st" | wc -l)
        sleep 1
    done
else
    progress "traffic for ${look}s" sleep "$look"
    note "spillway status (live on a terminal, redrawn every second):"
    status | indent
fi

# ---------------------------------------------------------------------------
# Requests per backend in the log between two times (EPOCHREALTIME values;
# the second may be empty: until now), with a bar each.
spread() {
    awk -v a="$1" -v b="${2:-1e12}" '
        $1 >= a && $1 < b { n[$2]++; all++ }
        END {
            if (!all) { print "no requests"; exit }
            for (k in n) {
                bar = ""
                for (i = 0; i < int(40 * n[k] / all + 0.5); i++) bar = bar "#"
                printf "%-9s %5d  %5.1f %%  %s\n", k, n[k], 100 * n[k] / all, bar
            }
        }' "$work/requests.log" | sort | indent
}
# How many requests of the log between two times went to WHO.
count() {
    awk -v a="$1" -v b="${2:-1e12}" -v who="$3" '$1 >= a && $1 < b && $2 == who { n++ } END { print n + 0 }' \
        "$work/requests.log"
}

heading "How the connections spread"
look "each backend gets about a third (equal weights); no FAILED"
spread "$traffic_t0"
for i in 1 2 3; do
    (($(count "$traffic_t0" "" "backend$i"))) || bad "backend$i got no connection"
done
(($(count "$traffic_t0" "" FAILED))) && bad "requests failed with every backend healthy"
note "three of the connections in Spillway's flow table (spillway flows):"
"$bin/spillway" flows --socket "$sock" --vip "$VIP" --limit 3 | indent
note "counters (spillway stats):"
"$bin/spillway" stats --socket "$sock" | sed -n 1,2p | indent

# ---------------------------------------------------------------------------
heading "A backend fails and comes back"
look "backend2's health going UNHEALTHY, then HEALTHY again; its share going to 0, then back"
wait_state() { # until backend2's health says $1 and its slot $2 (the data plane has it)
    local st
    while :; do
        st="$(status)"
        grep -q "health web/198.18.2.12:80: $1" <<<"$st" && grep -q "198.18.2.12 $2" <<<"$st" && return 0
        sleep 0.1
    done
}
probe_env="$(declare -f wait_state status); bin='$bin' sock='$sock'"
mark "backend2 killed"
bash "$here/lab.sh" backend "$main" 2 stop
killed=$EPOCHREALTIME
note "killed backend2's HTTP server: connections to it are refused"
progress "waiting for the health checks to notice (2 failed probes, 1 s apart)" \
    timeout 30 bash -c "$probe_env; wait_state UNHEALTHY unhealthy"
unhealthy=$EPOCHREALTIME
mark "backend2 unhealthy"
status | grep -E "198\.18\.2\.12|eligible" | indent
progress "traffic to the two others for ${settle}s" sleep "$settle"
note "while backend2 was down (the failures: connections Maglev gave it before the checks noticed):"
spread "$killed"
(($(count "$unhealthy" "" backend2))) && bad "backend2 got new connections while unhealthy"
# (The log has when each request started; a moment's grace for the last
# status poll.)
late=$(awk -v a="$unhealthy" '$1 >= a + 0.2 && $2 == "FAILED" { n++ } END { print n + 0 }' "$work/requests.log")
((late)) && bad "$late requests failed after backend2 was marked unhealthy"
((late)) || good "no failure once backend2 was marked unhealthy"

mark "backend2 restarted"
bash "$here/lab.sh" backend "$main" 2 start
note "restarted backend2's HTTP server"
progress "waiting for the health checks to see it (1 good probe)" \
    timeout 30 bash -c "$probe_env; wait_state HEALTHY active"
healthy=$EPOCHREALTIME
mark "backend2 healthy"
status | grep -E "198\.18\.2\.12|eligible" | indent
progress "traffic for ${settle}s" sleep "$settle"
note "since backend2 is healthy again:"
spread "$healthy"
(($(count "$healthy" "" backend2))) || bad "backend2 got no new connection after it was healthy again"

# ---------------------------------------------------------------------------
heading "Reloading the configuration under load"
look "'0 broken' among the long-lived connections; backend1's share growing to about 5/7"
stop_hold="$work/hold.stop"
ip netns exec "$C" python3 "$here/demo-client.py" hold "$VIP" 30 "$stop_hold" >"$work/hold.out" 2>&1 &
hold_pid=$!
bg+=("$hold_pid")
note "30 long-lived connections to the VIP's echo service (port 7) send a line every 100 ms"
progress "long-lived connections talking for 1s" sleep 1
# Written beside and renamed over: the daemon never reads half a file.
sed 's/{ address = "198.18.2.11" }/{ address = "198.18.2.11", weight = 500 }/' "$main/lab.toml" >"$main/.lab.toml.new"
grep -q 'weight = 500' "$main/.lab.toml.new" || die "cannot find backend1 in $main/lab.toml"
mv "$main/.lab.toml.new" "$main/lab.toml"
mark "reload: backend1 weight 500"
reloaded=$EPOCHREALTIME
note "lab.toml: backend1 weight 500 (the others 100); spillway reload says:"
"$bin/spillway" reload --socket "$sock" | indent
progress "traffic and long-lived connections for ${settle}s" sleep "$settle"
touch "$stop_hold" "$stop_load"
hold_rc=0
wait "$hold_pid" || hold_rc=$?
wait "$load_pid" || true
forget "$hold_pid"
forget "$load_pid"
mark "end"
indent <"$work/hold.out"
if ((hold_rc)) || ! grep -q ' 0 broken' "$work/hold.out"; then
    bad "long-lived connections broke during the reload"
else
    good "no connection lost"
fi
note "new connections since the reload:"
spread "$reloaded"
all=$(awk -v a="$reloaded" '$1 >= a { n++ } END { print n + 0 }' "$work/requests.log")
b1=$(count "$reloaded" "" backend1)
((all && b1 * 2 > all)) || bad "backend1 got $b1 of $all new connections after the reload (expected about 5/7)"
failed=$(count "$reloaded" "" FAILED)
((failed)) && bad "$failed new connections failed after the reload"
"$bin/spillway" status --socket "$sock" | grep -E '^uptime' | indent

# ---------------------------------------------------------------------------
heading "A picture of the spread"
look "the PNG: new connections per backend over time, each step marked"
mkdir -p "$out"
png="$out/spillway-demo.png"
rm -f "$png"
# The system Python has matplotlib once scripts/setup.sh ran; another one on
# PATH (a virtualenv) may not.
if /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
    progress "drawing it (matplotlib)" /usr/bin/python3 "$here/demo-plot.py" "$work/requests.log" "$work/marks" "$png"
elif python3 -c 'import matplotlib' 2>/dev/null; then
    progress "drawing it (matplotlib)" python3 "$here/demo-plot.py" "$work/requests.log" "$work/marks" "$png"
else
    bad "no Python with matplotlib (Debian: python3-matplotlib; scripts/setup.sh installs it)"
fi
[ -s "$png" ] && note "picture: $png"
cp "$work/requests.log" "$out/requests.log"
cp "$work/marks" "$out/marks"
note "data: $out/requests.log (time backend), $out/marks (time step)"
progress "taking the first lab down" bash "$here/lab.sh" down "$main"

if [ "$quick" = 1 ]; then
    exit 0
fi

# ---------------------------------------------------------------------------
heading "Gateway mode: every flow through a network appliance and back"
gw="$work/gateway"
labs+=("lab-gateway.sh $gw")
progress "building the gateway lab (scripts/lab-gateway.sh up)" bash "$here/lab-gateway.sh" up "$gw" "$bin"
G=$(cat "$gw/tag")
note "namespaces spg${G}c (client), spg${G}r (router), spg${G}s (server), spg${G}n (Spillway), spg${G}a1..2 (appliances)"
cat <<EOF
     client 198.18.0.100 --- router --- server 198.18.3.100
                               |  (everything it forwards goes through Spillway)
              Spillway 198.18.1.2 ==GENEVE==> nva1 198.18.1.21 / nva2 198.18.1.22 (spillway nva)
EOF
note "the router sends what it forwards to Spillway's gateway rule; Spillway hands each flow, both"
note "directions, to one of two reference appliances in GENEVE; they return it, Spillway delivers it"
look "both appliances carry flows; each connection's two directions on the same appliance"
gsock="$gw/control.sock"
wait_nvas() {
    until "$bin/spillway" status --socket "$gsock" | grep -q '2 endpoints (2 healthy'; do sleep 0.2; done
}
progress "waiting for both appliances to be HEALTHY" timeout 30 bash -c \
    "$(declare -f wait_nvas); bin='$bin' gsock='$gsock' wait_nvas"
progress "$burst HTTP requests from the client to the server" \
    ip netns exec "spg${G}c" python3 "$here/demo-client.py" fetch 198.18.3.100 "$burst" "$work/gateway.log"
note "answers:"
indent <"$work/progress.out"
grep -q "^server $burst\$" "$work/progress.out" || bad "not every request was answered by the server"
# The appliances' flow logs: a line per packet, "… CLIENT SERVER a->b|b->a …".
summary="$(awk '$2 == "from=198.18.1.2" { c[$4] = c[$4] " " $6 }
    END { for (k in c) print FILENAME, k, (c[k] ~ /a->b/ && c[k] ~ /b->a/) ? "both" : "one" }' "$gw/nva1.flows"
    awk '$2 == "from=198.18.1.2" { c[$4] = c[$4] " " $6 }
    END { for (k in c) print FILENAME, k, (c[k] ~ /a->b/ && c[k] ~ /b->a/) ? "both" : "one" }' "$gw/nva2.flows")"
for n in 1 2; do
    k=$(grep -c "nva$n.flows " <<<"$summary" || true)
    note "nva$n carried $k connections"
    ((k)) || bad "nva$n carried no connection"
done
shared=$(awk '{print $2}' <<<"$summary" | sort | uniq -d | wc -l)
onedir=$(grep -c ' one$' <<<"$summary" || true)
((shared)) && bad "$shared connections went through both appliances"
((onedir)) && bad "$onedir connections were seen in one direction only"
((shared || onedir)) || good "every connection through one appliance, both directions"
"$bin/spillway" stats --socket "$gsock" | sed -n 1p | sed 's/.*\(gateway returned [0-9]*\).*/\1 packets (spillway stats)/' | indent
progress "taking the gateway lab down" bash "$here/lab-gateway.sh" down "$gw"

# ---------------------------------------------------------------------------
heading "Two nodes behind BIRD (ECMP), one drained"
bgp="$work/bgp"
labs+=("lab-bgp.sh $bgp")
progress "building the two-node lab (scripts/lab-bgp.sh up)" bash "$here/lab-bgp.sh" up "$bgp" "$bin"
B=$(cat "$bgp/tag")
note "namespaces spb${B}c (client), spb${B}r (router), spb${B}n1..2 (nodes), spb${B}b1..3 (backends)"
cat <<EOF
     client --- router (BIRD, ECMP) --+-- node1 198.18.1.2 (Spillway + BIRD) --+-- backend1, backend2
                                      \`-- node2 198.18.1.3 (Spillway + BIRD) --'   (l2dsr)
EOF
note "each node's BIRD announces the VIP $VIP while Spillway says it is healthy; the router"
note "spreads new connections over both routes"
look "the router's route via both nodes, then via node2 only; node1's new flows stopping"
route() { ip netns exec "spb${B}r" ip route show "$VIP"; }
wait_route() { # until the router's route to the VIP goes through exactly $1
    while :; do
        r="$(route)"
        case "$1" in
        both) [[ "$r" == *"via 198.18.1.2 "* && "$r" == *"via 198.18.1.3 "* ]] && return 0 ;;
        node2) [[ "$r" != *"via 198.18.1.2 "* && "$r" == *"via 198.18.1.3 "* ]] && return 0 ;;
        esac
        sleep 0.2
    done
}
route_env="$(declare -f route wait_route); B='$B' VIP='$VIP'"
progress "waiting for BGP: the router's route to the VIP via both nodes" \
    timeout 60 bash -c "$route_env; wait_route both"
note "router: ip route show $VIP"
route | indent
new_flows() { "$bin/spillway" stats --socket "$bgp/n$1/control.sock" | sed -n 's/^flows: \([0-9]*\) new.*/\1/p'; }
bgp_round() { # N requests; prints each node's new flows
    local a1 a2
    a1=$(new_flows 1) a2=$(new_flows 2)
    progress "$burst HTTP requests to the VIP" \
        ip netns exec "spb${B}c" python3 "$here/demo-client.py" fetch "$VIP" "$burst" "$work/bgp.log"
    grep -q FAILED "$work/progress.out" && bad "requests failed: $(tr '\n' ' ' <"$work/progress.out")"
    # Workers publish their counters every ~100 ms: read until every request
    # is counted, for at most 2 s (a shortfall then shows in the figures).
    local tries=0
    while :; do
        d1=$(($(new_flows 1) - a1)) d2=$(($(new_flows 2) - a2))
        ((d1 + d2 >= burst || ++tries > 20)) && break
        sleep 0.1
    done
    note "new connections: node1 $d1, node2 $d2 (spillway stats on each); backends: $(tr '\n' ' ' <"$work/progress.out")"
}
bgp_round
((d1 && d2)) || bad "the router did not spread connections over both nodes"
note "spillway drain node node1:"
"$bin/spillway" drain node node1 --socket "$bgp/n1/control.sock" | indent
drained=$(now_us)
progress "waiting for the router to drop node1's route" timeout 60 bash -c "$route_env; wait_route node2"
note "node1 withdrawn after $(secs_since "$drained")s; router: ip route show $VIP"
route | indent
"$bin/spillway" status --socket "$bgp/n1/control.sock" | grep -E '^drained|VIP ' | indent
bgp_round
((d1 == 0 && d2 > 0)) && good "every new connection through node2"
((d1 == 0 && d2 > 0)) || bad "node1 still took new connections after the drain"
progress "taking the two-node lab down" bash "$here/lab-bgp.sh" down "$bgp"

printf '\nPicture: %s\n' "$png"
