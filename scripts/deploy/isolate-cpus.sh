#!/usr/bin/env bash
# Prints the kernel command-line fragment that keeps the kernel off
# Spillway's worker cores. It changes nothing: add the line it prints to
# GRUB_CMDLINE_LINUX yourself (instructions on stderr).
#
#   isolate-cpus.sh --config FILE [--cpus N]
#   isolate-cpus.sh --management CORE --workers LIST [--cpus N]
#
#   --config FILE    read [dataplane] management_core and worker_cores from a
#                    Spillway configuration (defaults 0 and [1], as Spillway's)
#   --management N   the management core; --workers LIST the worker cores
#                    ("2,3,6-9")
#   --cpus N         the machine has N CPUs (0 to N-1); default: this machine's
#
# The fragment (stdout, one line):
#   isolcpus=managed_irq,domain,W  no scheduler load balancing and no managed
#                                  interrupts on the workers W: only threads
#                                  pinned there (Spillway's workers) run there
#   nohz_full=W                    no scheduler tick on W while one task runs
#   rcu_nocbs=W                    RCU callbacks run elsewhere
#   irqaffinity=H                  other interrupts go to the housekeeping
#                                  cores H: every CPU that is not a worker,
#                                  the management core among them
# The management core is not isolated: it makes system calls, runs the health
# checker and the listeners, and shares the housekeeping cores with the rest of
# the system. Exit status 0: printed; 1: the cores do not fit the machine (said
# on stderr); 2: bad usage.
set -euo pipefail

config=""
management=""
workers=""
cpus=""

die() { printf 'isolate-cpus: error: %s\n' "$*" >&2; exit 1; }
usage() {
    printf 'isolate-cpus: %s\n' "$*" >&2
    printf 'usage: isolate-cpus.sh (--config FILE | --management CORE --workers LIST) [--cpus N]\n' >&2
    exit 2
}

while (($#)); do
    case "$1" in
        --config | --management | --workers | --cpus)
            (($# >= 2)) || usage "$1 needs a value"
            case "$1" in
                --config) config=$2 ;;
                --management) management=$2 ;;
                --workers) workers=$2 ;;
                --cpus) cpus=$2 ;;
            esac
            shift
            ;;
        -h | --help)
            sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"
            exit 0
            ;;
        *) usage "unknown argument $1" ;;
    esac
    shift
done

if [ -n "$config" ]; then
    [ -z "$management$workers" ] || usage "give --config or --management/--workers, not both"
    [ -r "$config" ] || die "cannot read $config"
    # management_core and worker_cores of the [dataplane] table (an array may
    # span lines); comments are dropped. Prints "M|W1,W2,...".
    parsed=$(awk '
        { sub(/#.*/, "") }
        /^[[:space:]]*\[/ {
            if (inarr) { inarr = 0 }
            t = $0; gsub(/[[:space:]]/, "", t); dp = (t == "[dataplane]"); next
        }
        inarr { w = w $0; if ($0 ~ /\]/) inarr = 0; next }
        dp && /^[[:space:]]*management_core[[:space:]]*=/ {
            v = $0; sub(/^[^=]*=/, "", v); gsub(/[[:space:]]/, "", v); m = v; next
        }
        dp && /^[[:space:]]*worker_cores[[:space:]]*=/ {
            v = $0; sub(/^[^=]*=/, "", v); w = v; seen = 1
            if (v !~ /\]/) inarr = 1
            next
        }
        END {
            gsub(/[[:space:]\[\]]/, "", w)
            sub(/,$/, "", w)
            if (m == "") m = "0"
            if (!seen) w = "1"
            print m "|" w
        }
    ' "$config")
    management=${parsed%%|*}
    workers=${parsed#*|}
    source="$config"
else
    [ -n "$management" ] || usage "--management CORE is missing (or give --config FILE)"
    [ -n "$workers" ] || usage "--workers LIST is missing (or give --config FILE)"
    source="the command line"
fi

if [ -z "$cpus" ]; then
    cpus=$(getconf _NPROCESSORS_CONF)
fi
[[ $cpus =~ ^[1-9][0-9]*$ ]] || usage "--cpus $cpus: expected a number of CPUs"
[[ $management =~ ^[0-9]+$ ]] || die "management core \"$management\" (from $source) is not a core number"
management=$((10#$management))

# Expands "2,3,6-9" into the array expanded (in this shell, so that an
# error stops the script).
expanded=()
expand() {
    local item lo hi c
    local IFS=,
    for item in $1; do
        if [[ $item =~ ^[0-9]+$ ]]; then
            expanded+=("$((10#$item))")
        elif [[ $item =~ ^([0-9]+)-([0-9]+)$ ]]; then
            lo=$((10#${BASH_REMATCH[1]})) hi=$((10#${BASH_REMATCH[2]}))
            ((lo <= hi)) || die "worker cores \"$item\" (from $source): a range runs from low to high"
            for ((c = lo; c <= hi; c++)); do expanded+=("$c"); done
        else
            die "worker cores \"$1\" (from $source): \"$item\" is not a core number or range"
        fi
    done
}

# Compresses sorted core numbers (one per line) into "0-3,6".
compress() {
    awk '
        NR == 1 { lo = hi = $1; next }
        $1 == hi + 1 { hi = $1; next }
        { out = out sep (lo == hi ? lo : lo "-" hi); sep = ","; lo = hi = $1 }
        END { if (NR) print out sep (lo == hi ? lo : lo "-" hi) }
    '
}

[ -n "$workers" ] || die "no worker cores (from $source)"
expand "$workers"
((${#expanded[@]})) || die "no worker cores (from $source)"
declare -A is_worker=()
for w in "${expanded[@]}"; do
    ((w < cpus)) || die "worker core $w (from $source) does not exist: the machine has $cpus CPUs (0-$((cpus - 1))); --cpus N for another machine"
    [ -z "${is_worker[$w]:-}" ] || die "worker core $w (from $source) is listed twice"
    ((w != management)) || die "core $w (from $source) is both the management core and a worker"
    ((w != 0)) || die "core 0 (from $source) cannot be a worker here: the kernel keeps timekeeping and boot work on CPU 0, so it stays a housekeeping core; move the worker to another core"
    is_worker[$w]=1
done
mapfile -t worker_list < <(printf '%s\n' "${expanded[@]}" | sort -n)
((management < cpus)) || die "management core $management (from $source) does not exist: the machine has $cpus CPUs (0-$((cpus - 1)))"

housekeeping=()
for ((c = 0; c < cpus; c++)); do
    [ -n "${is_worker[$c]:-}" ] || housekeeping+=("$c")
done
((${#housekeeping[@]})) || die "every CPU is a worker: leave at least one for the kernel and the management core"

w=$(printf '%s\n' "${worker_list[@]}" | compress)
h=$(printf '%s\n' "${housekeeping[@]}" | compress)

printf 'isolcpus=managed_irq,domain,%s nohz_full=%s rcu_nocbs=%s irqaffinity=%s\n' "$w" "$w" "$w" "$h"

{
    printf '\n'
    printf 'Workers %s isolated; management core %s and housekeeping cores %s take\n' "$w" "$management" "$h"
    printf 'everything else (interrupts, the kernel'"'"'s threads, other services).\n'
    printf 'Nothing was changed. To apply it (Debian, GRUB):\n'
    printf '  1. add the line above to GRUB_CMDLINE_LINUX in /etc/default/grub,\n'
    printf '     beside the hugepage options (docs/deploy.md);\n'
    printf '  2. run update-grub, then reboot;\n'
    printf '  3. check: cat /sys/devices/system/cpu/isolated /sys/devices/system/cpu/nohz_full\n'
    printf 'Keep the cores in the configuration and on the command line in step: a\n'
    printf 'worker moved to a core that is not isolated still works, only less steadily.\n'
} >&2
