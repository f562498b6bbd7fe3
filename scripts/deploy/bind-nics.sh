#!/usr/bin/env bash
# Binds Spillway's NICs to vfio-pci, so that DPDK can drive them.
#
#   bind-nics.sh [OPTIONS] PCI...              the devices, e.g. 0000:3b:00.0 3b:00.1
#   bind-nics.sh [OPTIONS] --config FILE       the [[ports]] devices of a Spillway
#                                              configuration that are PCI addresses
#                                              (none: nothing to do)
#
#   --dry-run     check everything, print what would be done, change nothing
#   --force       bind a device even though its kernel interface is up
#   --noiommu     on a machine without an IOMMU, turn on vfio's unsafe no-IOMMU
#                 mode (see below) instead of refusing
#
# Steps: every address is checked (well-formed, present under /sys/bus/pci,
# not carrying a kernel interface that is up unless --force), the IOMMU is
# checked, vfio-pci is loaded, and `dpdk-devbind.py --bind=vfio-pci` binds the
# devices not bound yet (devices already on vfio-pci are left as they are, so
# running it again is harmless). Exit status 0: every device is on vfio-pci
# (or would be, with --dry-run); 1: something is wrong (said on stderr); 2:
# bad usage.
#
# vfio-pci needs an IOMMU (Intel VT-d / AMD-Vi on in the firmware, and
# intel_iommu=on iommu=pt, or amd_iommu=on iommu=pt, on the kernel command
# line). Without one, vfio has an "unsafe no-IOMMU mode"
# (/sys/module/vfio/parameters/enable_unsafe_noiommu_mode): the device can then
# DMA into any memory of the host, the kernel is tainted, and the DPDK process
# needs CAP_SYS_RAWIO. Only for machines that have no IOMMU at all (some VMs);
# --noiommu turns it on.
#
# SPILLWAY_SYSFS (default /sys) is where sysfs is read: the tests point it at
# a fake tree to run --dry-run without touching real devices.
set -euo pipefail

sysfs="${SPILLWAY_SYSFS:-/sys}"
driver=vfio-pci
dry_run=0
force=0
noiommu=0
config=""
devices=()

say() { printf 'bind-nics: %s\n' "$*" >&2; }
die() { printf 'bind-nics: error: %s\n' "$*" >&2; exit 1; }
usage() {
    printf 'bind-nics: %s\n' "$*" >&2
    printf 'usage: bind-nics.sh [--dry-run] [--force] [--noiommu] (PCI... | --config FILE)\n' >&2
    exit 2
}
# Runs a command, or with --dry-run only says what it would run.
dry_or_run() {
    if ((dry_run)); then
        printf 'would run: %s\n' "$*"
    else
        say "running: $*"
        "$@"
    fi
}

while (($#)); do
    case "$1" in
        --dry-run) dry_run=1 ;;
        --force) force=1 ;;
        --noiommu) noiommu=1 ;;
        --config)
            (($# >= 2)) || usage "--config needs a file"
            config=$2
            shift
            ;;
        --config=*) config=${1#--config=} ;;
        -h | --help)
            sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"
            exit 0
            ;;
        -*) usage "unknown option $1" ;;
        *) devices+=("$1") ;;
    esac
    shift
done

# The PCI addresses of a configuration's [[ports]] devices (virtual devices
# such as net_tap0 are not PCI devices and are skipped).
config_devices() {
    awk '
        /^[[:space:]]*\[/ { ports = ($0 ~ /^[[:space:]]*\[\[ports\]\]/) }
        ports && /^[[:space:]]*device[[:space:]]*=/ {
            v = $0
            sub(/^[^=]*=[[:space:]]*"/, "", v)
            sub(/".*$/, "", v)
            if (v ~ /^[0-9a-fA-F:.]+$/ && v ~ /:/) print v
        }
    ' "$1"
}

if [ -n "$config" ]; then
    [ -r "$config" ] || die "cannot read $config"
    while IFS= read -r d; do devices+=("$d"); done < <(config_devices "$config")
    if ((${#devices[@]} == 0)); then
        say "nothing to do: $config has no [[ports]] device that is a PCI address"
        exit 0
    fi
fi
((${#devices[@]})) || usage "no PCI address given"

# Well-formed, full (domain:bus:device.function) addresses, in lower case.
addrs=()
for d in "${devices[@]}"; do
    d=${d,,}
    if [[ $d =~ ^[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$ ]]; then
        d="0000:$d"
    fi
    [[ $d =~ ^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$ ]] ||
        usage "$d is not a PCI address (DDDD:BB:DD.F or BB:DD.F, e.g. 0000:3b:00.0)"
    addrs+=("$d")
done

# The driver a device is bound to now, or "none".
current_driver() {
    local link="$sysfs/bus/pci/devices/$1/driver"
    if [ -L "$link" ]; then
        basename "$(readlink "$link")"
    else
        echo none
    fi
}

to_bind=()
for a in "${addrs[@]}"; do
    dev="$sysfs/bus/pci/devices/$a"
    [ -e "$dev" ] || die "no PCI device $a on this machine (\`dpdk-devbind.py --status\` or \`lspci -D\` lists them)"
    drv=$(current_driver "$a")
    if [ "$drv" = "$driver" ]; then
        say "$a: already bound to $driver"
        continue
    fi
    # A kernel interface that is up may be this machine's way in (SSH):
    # taking it away is refused unless --force.
    for ifdir in "$dev"/net/*; do
        [ -e "$ifdir" ] || continue
        ifname=$(basename "$ifdir")
        state=$(cat "$ifdir/operstate" 2>/dev/null || echo unknown)
        if [ "$state" = up ] && ((!force)); then
            die "$a is the kernel's interface $ifname, which is up: binding it to $driver takes it away from the kernel (is it the way you reached this machine?); take it down first (ip link set $ifname down) or give --force"
        fi
        say "$a: kernel interface $ifname ($state) goes away"
    done
    if [ "$drv" = none ]; then
        say "$a: no driver now, to be bound to $driver"
    else
        say "$a: on $drv now, to be bound to $driver"
    fi
    to_bind+=("$a")
done

if ((${#to_bind[@]} == 0)); then
    say "nothing to do: every device is bound to $driver"
    exit 0
fi

# The IOMMU: every device must be in an IOMMU group, unless no-IOMMU mode.
groups=0
if [ -d "$sysfs/kernel/iommu_groups" ]; then
    groups=$(find "$sysfs/kernel/iommu_groups" -mindepth 1 -maxdepth 1 | wc -l)
fi
if ((groups == 0)); then
    if ((!noiommu)); then
        die "no IOMMU groups under $sysfs/kernel/iommu_groups: the IOMMU is off or absent. Turn on VT-d (Intel) or AMD-Vi (AMD) in the firmware and add intel_iommu=on iommu=pt (or amd_iommu=on iommu=pt) to the kernel command line, then reboot. On a machine without any IOMMU, --noiommu turns on vfio's unsafe no-IOMMU mode, enable_unsafe_noiommu_mode (the devices can DMA anywhere in memory, the kernel is tainted, spillway needs CAP_SYS_RAWIO)"
    fi
    say "WARNING: no IOMMU: turning on vfio's unsafe no-IOMMU mode (the devices can DMA anywhere in memory)"
    param="$sysfs/module/vfio/parameters/enable_unsafe_noiommu_mode"
    if [ ! -e "$param" ]; then
        dry_or_run modprobe vfio enable_unsafe_noiommu_mode=1
    elif ((dry_run)); then
        printf 'would write: 1 > %s\n' "$param"
    else
        echo 1 >"$param"
    fi
else
    for a in "${to_bind[@]}"; do
        [ -L "$sysfs/bus/pci/devices/$a/iommu_group" ] ||
            die "$a is in no IOMMU group although the IOMMU is on (docs/deploy.md, \"Binding the NICs\")"
    done
fi

if [ ! -d "$sysfs/bus/pci/drivers/$driver" ]; then
    dry_or_run modprobe "$driver"
fi
if ! command -v dpdk-devbind.py >/dev/null 2>&1; then
    ((dry_run)) || die "dpdk-devbind.py not found: install Debian's dpdk package (apt-get install dpdk)"
    say "note: dpdk-devbind.py not found (Debian package dpdk); it is needed without --dry-run"
fi
if ((force)); then
    dry_or_run dpdk-devbind.py --bind="$driver" --force "${to_bind[@]}"
else
    dry_or_run dpdk-devbind.py --bind="$driver" "${to_bind[@]}"
fi

if ((dry_run)); then exit 0; fi
for a in "${to_bind[@]}"; do
    drv=$(current_driver "$a")
    [ "$drv" = "$driver" ] || die "$a: still bound to $drv after dpdk-devbind.py"
    if [ -L "$sysfs/bus/pci/devices/$a/iommu_group" ]; then
        group=$(basename "$(readlink "$sysfs/bus/pci/devices/$a/iommu_group")")
        say "$a: bound to $driver, /dev/vfio/$group"
    else
        say "$a: bound to $driver (no-IOMMU mode: /dev/vfio/noiommu-N)"
    fi
done
