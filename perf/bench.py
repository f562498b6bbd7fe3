#!/usr/bin/env python3
"""Spillway's benchmark harness (M46). Run it through perf/bench.sh.

Every measurement is one process on one DPDK `net_pcap` port that replays a
packet set forever (`rx_pcap=SET,infinite_rx=1`; with no `tx_pcap` the port
counts and frees what is sent): either `spillway run` or `dpdk-testpmd` in
`io` / `macswap` forwarding mode, on the same device, worker core(s) and
packet set. After a warm-up the harness samples, over a fixed window:

  * the port's RX/TX packet counters from DPDK telemetry (`/ethdev/stats,0`
    on the process's own socket under the EAL runtime directory);
  * the CPU time of the forwarding thread(s) (`spillway-wN`, testpmd's
    `rte-worker-N`) from /proc/PID/task/TID/schedstat (nanoseconds; stat's
    utime+stime as a fallback);
  * how busy the worker cores were with anything else (/proc/stat);
  * for Spillway, its own counters (`spillway stats`): forwarded share and
    new flows in the window.

Mpps = RX packets in the window / window; ns/pkt = forwarding-thread CPU
time / RX packets; the ratios to testpmd compare ns/pkt (packets per
CPU-second), which equals the Mpps ratio when both own their cores and
stays meaningful when something else shares them. Standard library only;
the plot is perf/plot.py.
No figure is ever asserted: the harness fails only when a run fails.

Gateway mode (M30-M32) has two cases of its own: `gateway forward` (frames
from the gateway endpoint's MAC to any destination, both directions of each
flow, to appliances in Geneve) and `gateway return` (the appliances' Geneve
answers, checked and sent back to the endpoint). The return set is what
`spillway replay --seed` sent for the forward set, echoed (outer addresses
swapped); the daemon runs with that seed (`--fixed-cookie-seed`) and is
warmed up through a second port, a FIFO the harness feeds: the endpoint's
gratuitous ARP, then once the forward set in order, so that its flow
entries, and their cookies, are the ones replay made.

The `synflood` case is a SYN flood from spoofed sources beside established
flows: the established entries are made and confirmed under a small
new-entry budget, then the budget is lifted by a reload and the flood fills
the table; the row reports the established packets' rate and how many
established flows lost their entry (SynFloodWarmup).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import ipaddress
import json
import os
import re
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

MODES = ["l2dsr", "ipip", "gue", "gre", "geneve"]
# packetset's synflood sets: per flow, 16 rounds of its ACK each followed by
# 2 SYNs from spoofed sources (perf/packetset/src/lib.rs, SYNFLOOD_*).
SYNFLOOD_ROUNDS = 16
SYNFLOOD_SYNS_PER_ACK = 2
# Gateway cases (M30-M32): appliances behind one gateway rule, and the seed
# of the flow cookies shared by `spillway replay` and the daemon.
GATEWAY_APPLIANCES = 4
GATEWAY_ENDPOINT = "10.0.0.1"
GATEWAY_ENDPOINT_MAC = "02:00:00:00:00:fe"  # packetset's frames' source
GATEWAY_ENDPOINT_ID = 0x1
GATEWAY_COOKIE_SEED = 0x6761_7465_7761_7921
GENEVE_PORT = 6081
FLOW_COUNTS = [1, 4096, 65536, 1048576]
VIP4 = "198.18.10.10"
VIP6 = "2001:db8:18::10"
DPORT = 80
# What an mbuf of the default size (2048 + 128 headroom) costs in a pool on
# hugepages, with its header and the mempool's per-object overhead, rounded up.
MBUF_BYTES = 2496


def net_pcap_mac(index: int) -> str:
    """The MAC DPDK's pcap driver gives its `index`-th device of a process
    (net_pcap0, net_pcap1 in EAL order; it cannot be changed). The sets'
    frames are addressed to it and the configurations name it: the data
    plane drops frames to any other unicast MAC (M55, `l2_foreign_dst`), and
    `spillway replay`, which makes the return set, has no device to ask. A
    driver that assigned others would make every row fail as forwarding
    nothing, not measure drops."""
    return f"02:70:63:61:70:{index:02x}"


UPLINK_MAC = net_pcap_mac(0)
APPLIANCE_PORT_MAC = net_pcap_mac(1)


# Processes this harness started: killed (by pid) on any exit.
CHILDREN: list[subprocess.Popen] = []
# Directories removed on exit.
REMOVE_ON_EXIT: list[Path] = []


def log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def human_flows(n: int) -> str:
    return f"{n:,}"


# ---------------------------------------------------------------------------
# Cases


@dataclass(frozen=True)
class Case:
    """One Spillway measurement."""

    mode: str  # a delivery mode, or "gateway"
    kind: str = "ack"  # ack | syn | udp | v6 | churn | synflood; gateway: forward | return
    flows: int = 4096
    endpoints: int = 8
    workers: int = 1

    def label(self) -> str:
        return (
            f"{self.mode} {self.kind} {human_flows(self.flows)} flows "
            f"{self.endpoints} ep {self.workers}w"
        )


def matrix(name: str) -> list[Case]:
    """The cases of a named matrix, in run order (grouped by packet set)."""
    if name == "quick":
        return [Case("gue")]
    # Gateway mode's two directions, 4,096 flows to 4 appliances.
    gateway = [Case("gateway", k, 4096, GATEWAY_APPLIANCES) for k in ("forward", "return")]
    cases: list[Case] = []
    if name == "default":
        # Every mode over every flow count (established flows, 8 endpoints,
        # one worker): the plot. Then one variation per other axis.
        for flows in FLOW_COUNTS:
            for mode in MODES:
                cases.append(Case(mode, "ack", flows))
        cases += [
            Case("gue", "syn", 4096),
            Case("gue", "syn", 1048576),
            Case("l2dsr", "syn", 4096),
            Case("gue", "churn", 4096),
            # A SYN flood from spoofed sources beside 4,096 established flows.
            Case("gue", "synflood", 4096),
            Case("gue", "churn", 65536),
            Case("l2dsr", "churn", 65536),
            Case("gue", "udp", 4096),
            Case("gue", "v6", 4096),
            Case("ipip", "v6", 4096),
            Case("gue", "v6", 1048576),
            Case("gue", "ack", 4096, endpoints=1000),
            Case("gue", "ack", 1048576, endpoints=1000),
            Case("gue", "ack", 4096, workers=2),
            Case("gue", "ack", 1048576, workers=2),
            *gateway,
        ]
    elif name == "full":
        for workers in (1, 2):
            for kind in ("ack", "syn", "churn", "udp", "v6"):
                for flows in FLOW_COUNTS:
                    for endpoints in (8, 1000):
                        for mode in MODES:
                            cases.append(Case(mode, kind, flows, endpoints, workers))
        cases += gateway
    else:
        raise SystemExit(f"unknown matrix {name!r}")
    # Group by packet set so each set's testpmd ceiling runs next to its cases.
    order = {}
    for c in cases:
        order.setdefault((c.kind, c.flows, c.workers), len(order))
    return sorted(cases, key=lambda c: order[(c.kind, c.flows, c.workers)])


# ---------------------------------------------------------------------------
# Machine


def packets_in_set(kind: str, flows: int) -> int:
    if kind == "forward":
        return 2 * flows + 1  # the endpoint's gratuitous ARP, both directions
    if kind == "synflood":
        return SYNFLOOD_ROUNDS * (1 + SYNFLOOD_SYNS_PER_ACK) * flows
    return 2 * flows if kind in ("churn", "return") else flows


def mbufs_for(packets: int, workers: int) -> int:
    # net_pcap's infinite_rx copies the whole set into mbufs of the port's
    # pool at queue setup; RX bursts then allocate fresh ones.
    return packets + 16383 + 4096 * workers


def memory_mb(mbufs: int, mem: str) -> int:
    """EAL memory (-m) for a pool of `mbufs` plus everything else DPDK
    allocates. On 4 KB pages (`--no-huge`) a pool never lets an mbuf span
    two pages, so each default-sized mbuf (2,368 bytes with its headers)
    takes a page of its own."""
    per_mbuf = 4096 if mem == "4k" else MBUF_BYTES
    return (mbufs * per_mbuf) // (1 << 20) + 384


def table_capacity(c: "Case") -> int:
    """The flow table's capacity for a case: room for twice its flows (gateway: fixed)."""
    if c.mode == "gateway":
        return 65536
    capacity = 65536
    while capacity < 2 * c.flows:
        capacity *= 2
    return capacity


def table_mb(c: "Case") -> int:
    """MB of DPDK heap the daemon's flow table takes (crates/flowtable: 512-byte buckets
    of 7 entries, 25 % headroom, padded to whole 2 MB pages), plus one page of slack."""
    buckets = -(-table_capacity(c) * 5 // 4 // 7)
    return -(-buckets * 512 // (2 << 20)) * 2 + 2


def hugepages_fit(mb: int) -> bool:
    """Whether `mb` MB of 2 MB hugepages are free now (with a little slack)."""
    return hugetlbfs_mounted() and hugepages_free() >= mb // 2 + 32


NR_HUGEPAGES = Path("/proc/sys/vm/nr_hugepages")
RESTORE_HUGEPAGES: list[int] = []


def reserve_hugepages(more: int) -> None:
    """Raises vm.nr_hugepages by `more` pages (restored by cleanup())."""
    try:
        before = int(NR_HUGEPAGES.read_text())
        NR_HUGEPAGES.write_text(f"{before + more}\n")
    except (OSError, ValueError) as e:
        log(f"NOTICE: cannot reserve {more} more hugepages: {e}")
        return
    RESTORE_HUGEPAGES.append(before)
    got = int(NR_HUGEPAGES.read_text()) - before
    log(f"reserved {got} more 2 MB hugepages for this run (vm.nr_hugepages {before} -> {before + got}; "
        "restored at exit)")


def cpus_online() -> list[int]:
    try:
        text = Path("/sys/devices/system/cpu/online").read_text().strip()
    except OSError:
        return list(range(os.cpu_count() or 1))
    out: list[int] = []
    for part in text.split(","):
        if "-" in part:
            a, b = part.split("-")
            out += range(int(a), int(b) + 1)
        elif part:
            out.append(int(part))
    return out


def hugepages_free() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("HugePages_Free:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def hugetlbfs_mounted() -> bool:
    try:
        return " hugetlbfs " in Path("/proc/mounts").read_text()
    except OSError:
        return False


def sh(cmd: list[str], cwd: Path | None = None) -> str:
    try:
        return subprocess.run(
            cmd, cwd=cwd, capture_output=True, text=True, check=False, timeout=20
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


def machine_info(repo: Path) -> dict:
    lscpu = sh(["lscpu"])
    model = re.search(r"^Model name:\s*(.+)$", lscpu, re.M)
    hyper = re.search(r"^Hypervisor vendor:\s*(.+)$", lscpu, re.M)
    commit = sh(["git", "rev-parse", "--short", "HEAD"], cwd=repo) or "unknown"
    # The harness's own outputs from an earlier run do not make the measured code differ.
    outputs = ("perf/RESULTS.md", "perf/results.json", "perf/results.png")
    status = sh(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo)
    dirty = [line for line in status.splitlines() if line[3:] not in outputs]
    dpdk = sh(["pkg-config", "--modversion", "libdpdk"]) or "unknown"
    deb = sh(["dpkg-query", "-W", "-f=${Version}", "dpdk"])
    mem_kb = 0
    try:
        m = re.search(r"^MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text(), re.M)
        mem_kb = int(m.group(1)) if m else 0
    except OSError:
        pass
    return {
        "cpu": model.group(1).strip() if model else "unknown",
        "cpus": len(cpus_online()),
        "hypervisor": hyper.group(1).strip() if hyper else "none",
        "memory_gib": round(mem_kb / 1024 / 1024, 1),
        "kernel": os.uname().release,
        "dpdk": dpdk + (f" (Debian {deb})" if deb else ""),
        "commit": commit + (" + uncommitted changes" if dirty else ""),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }


def proc_cpu_times() -> dict[int, tuple[str, int, int]]:
    """pid -> (command, utime+stime ticks, start time) of every process."""
    out = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        rest = stat[stat.rfind(")") + 2 :].split()
        name = cmd or stat[stat.find("(") + 1 : stat.rfind(")")]
        out[int(d.name)] = (name, int(rest[11]) + int(rest[12]), int(rest[19]))
    return out


def cpu_busy_ns(cpus: list[int]) -> dict[int, int]:
    """cpu -> non-idle time (ns) from /proc/stat."""
    hz = os.sysconf("SC_CLK_TCK")
    out = {}
    for line in Path("/proc/stat").read_text().splitlines():
        m = re.match(r"cpu(\d+)\s+(.*)", line)
        if m and int(m.group(1)) in cpus:
            v = [int(x) for x in m.group(2).split()]
            idle = v[3] + v[4]  # idle + iowait
            busy = sum(v[:8]) - idle  # user..steal, without guest (in user)
            out[int(m.group(1))] = busy * 1_000_000_000 // hz
    return out


def steal_ns(cpus: list[int]) -> int:
    hz = os.sysconf("SC_CLK_TCK")
    total = 0
    for line in Path("/proc/stat").read_text().splitlines():
        m = re.match(r"cpu(\d+)\s+(.*)", line)
        if m and int(m.group(1)) in cpus:
            total += int(m.group(2).split()[7])
    return total * 1_000_000_000 // hz


# ---------------------------------------------------------------------------
# Threads and telemetry


def thread_cpu_ns(pid: int, tid: int) -> int:
    base = Path(f"/proc/{pid}/task/{tid}")
    try:
        return int((base / "schedstat").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        stat = (base / "stat").read_text()
        rest = stat[stat.rfind(")") + 2 :].split()
        return (int(rest[11]) + int(rest[12])) * 1_000_000_000 // os.sysconf("SC_CLK_TCK")


def threads(pid: int) -> dict[int, str]:
    out = {}
    try:
        for t in Path(f"/proc/{pid}/task").iterdir():
            try:
                out[int(t.name)] = (t / "comm").read_text().strip()
            except OSError:
                pass
    except OSError:
        pass
    return out


class Telemetry:
    """DPDK telemetry v2: SOCK_SEQPACKET, a JSON greeting, then command -> JSON."""

    def __init__(self, path: Path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock.settimeout(5)
        self.sock.connect(str(path))
        hello = json.loads(self.sock.recv(65536).decode())
        self.max = int(hello.get("max_output_len", 16384))

    def query(self, cmd: str) -> dict:
        self.sock.send(cmd.encode())
        return json.loads(self.sock.recv(self.max).decode())

    def port_stats(self, port: int = 0) -> dict:
        r = self.query(f"/ethdev/stats,{port}")
        return r.get("/ethdev/stats") or {}

    def close(self) -> None:
        self.sock.close()


def runtime_dir(prefix: str) -> Path:
    if os.geteuid() == 0:
        base = Path("/var/run/dpdk")
    else:
        base = Path(os.environ.get("XDG_RUNTIME_DIR", "/tmp")) / "dpdk"
    return base / prefix


# ---------------------------------------------------------------------------
# One measurement


class RunFailed(Exception):
    pass


@dataclass
class Sample:
    t: float
    rx: int
    tx: int
    cpu_ns: int
    busy: dict[int, int]
    steal: int
    stats: dict[str, int] = field(default_factory=dict)
    # What `probe` saw just before the window (start sample) or just after it (end).
    probe: object = None


@dataclass
class Result:
    label: str
    kind: str  # spillway | io | macswap
    case: dict
    mpps: float
    ns_per_pkt: float
    cpu_share: float  # forwarding threads' CPU time / (window x workers)
    others: float  # share of the worker cores used by anything else
    steal: float  # hypervisor steal on the worker cores
    fwd_share: float | None = None  # forwarded / received (Spillway)
    new_flows_share: float | None = None  # new flow entries / received (Spillway)
    # Packets per CPU-second relative to testpmd's on the same set: testpmd
    # ns/pkt / this row's ns/pkt (the Mpps ratio when both own their cores).
    ratio_io: float | None = None
    ratio_macswap: float | None = None
    note: str = ""
    # synflood rows: the established flows' share of the set, their Mpps,
    # and how many of them lost their flow entry (see SynFloodWarmup).
    established_share: float | None = None
    established_mpps: float | None = None
    # testpmd io's ns/pkt / this row's: a fixed share of both rows' packets
    # is established, so it is the row's own ratio to io.
    established_ratio_io: float | None = None
    established_evicted: int | None = None


def parse_spillway_stats(text: str) -> dict[str, int]:
    out = {}
    m = re.search(r"^rx (\d+) packets", text, re.M)
    if m:
        out["rx"] = int(m.group(1))
    m = re.search(r"forwarded (\d+)", text)
    if m:
        out["forwarded"] = int(m.group(1))
    # Sent back to a gateway endpoint (M32): that case's forwarding.
    m = re.search(r"gateway returned (\d+)", text)
    if m:
        out["forwarded"] = out.get("forwarded", 0) + int(m.group(1))
    m = re.search(r"^flows: (\d+) new, (\d+) hits, \d+ races, \d+ rescheduled, (\d+) stateless", text, re.M)
    if m:
        out["new"], out["hits"], out["stateless"] = (int(x) for x in m.groups())
    m = re.search(r"^flows: .*, (\d+) over budget", text, re.M)
    if m:
        out["over budget"] = int(m.group(1))
    drops = re.findall(r"^drop ([^:]+): (\d+)$", text, re.M)
    out["drops"] = sum(int(n) for _, n in drops)
    for reason, n in drops:
        out[f"drop {reason}"] = int(n)
    return out


class Runner:
    def __init__(self, args, paths: dict, workdir: Path):
        self.args = args
        self.paths = paths
        self.workdir = workdir
        self.serial = 0
        self.notes: set[str] = set()
        self.mem = args.mem
        self.started: set[int] = set()

    # -- process control ----------------------------------------------------

    def start(self, cmd: list[str], logfile: Path) -> subprocess.Popen:
        out = open(logfile, "wb")
        # stdin stays an open pipe: testpmd without -i waits on it for Enter.
        p = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        out.close()
        CHILDREN.append(p)
        self.started.add(p.pid)
        return p

    def stop(self, p: subprocess.Popen, grace: float = 20.0) -> int:
        if p.poll() is None:
            try:
                p.send_signal(signal.SIGINT)
            except ProcessLookupError:
                pass
            try:
                p.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                log(f"pid {p.pid} ignored SIGINT for {grace:.0f} s: killing it")
                p.kill()
                p.wait()
        try:
            if p.stdin:
                p.stdin.close()
        except OSError:
            pass
        if p in CHILDREN:
            CHILDREN.remove(p)
        return p.returncode

    # -- pieces -------------------------------------------------------------

    def eal_memory(self, mbufs: int, table: int = 0) -> tuple[list[str], str]:
        """EAL arguments for a pool of `mbufs`, and `table` MB more for the flow table
        (Spillway puts it in DPDK's hugepage heap when it fits)."""
        mode = self.mem
        if mode == "mixed":
            mode = "huge" if hugepages_fit(memory_mb(mbufs, "huge") + table) else "4k"
        mb = memory_mb(mbufs, mode) + (table if mode == "huge" else 0)
        if mode == "huge":
            return ["--in-memory", "-m", str(mb)], "huge"
        return ["--no-huge", "-m", str(mb)], "4k"

    def pin_workers(self, pid: int, wanted: dict[str, int]) -> None:
        """Moves each named thread onto its core if it is not there."""
        for tid, comm in threads(pid).items():
            core = wanted.get(comm)
            if core is None:
                continue
            try:
                now = os.sched_getaffinity(tid)
                if now != {core}:
                    os.sched_setaffinity(tid, {core})
                    self.notes.add(
                        f"spillway left worker thread {comm} on CPUs {sorted(now)}, not on its "
                        f"worker core {core}; the harness pinned it there (sched_setaffinity)"
                    )
            except OSError as e:
                raise RunFailed(f"cannot pin {comm} ({tid}) to core {core}: {e}")

    def measure(
        self,
        cmd: list[str],
        prefix: str,
        worker_re: str,
        cores: list[int],
        logfile: Path,
        stats_socket: Path | None = None,
        pin: dict[str, int] | None = None,
        port: int = 0,
        prepare=None,
        tx_ports: tuple[int, ...] = (0,),
        probe=None,
    ) -> tuple[Sample, Sample, int]:
        """Runs `cmd`, waits until its port (DPDK port `port`) receives,
        warms up, samples a window, stops it. `prepare(process)`, if given,
        runs once the forwarding threads exist, before that wait; what is
        sent is counted on `tx_ports`. `probe()`, if given, runs just before
        the window and just after it (outside it); the samples keep what it
        returned. Returns (start, end, exit status)."""
        rdir = runtime_dir(prefix)
        p = self.start(cmd, logfile)
        tel = None
        prepared = prepare is None
        try:
            deadline = time.monotonic() + self.args.start_timeout
            sock = rdir / "dpdk_telemetry.v2"
            # Ready when the forwarding threads exist and the port's RX
            # counter moves (net_pcap also counts the packets it loads at
            # queue setup).
            last_rx = -1
            while True:
                if p.poll() is not None:
                    raise RunFailed(f"exited with status {p.returncode} while starting")
                if time.monotonic() > deadline:
                    raise RunFailed(f"no traffic after {self.args.start_timeout:.0f} s")
                if tel is None and sock.exists():
                    try:
                        tel = Telemetry(sock)
                    except OSError:
                        tel = None
                if tel is not None:
                    workers = [c for c in threads(p.pid).values() if re.fullmatch(worker_re, c)]
                    if workers and not prepared:
                        prepare(p)
                        prepared = True
                    try:
                        rx = int(tel.port_stats(port).get("ipackets", 0))
                    except (OSError, ValueError):
                        rx = -1
                    if workers and last_rx >= 0 and rx > last_rx:
                        break
                    last_rx = rx
                time.sleep(0.1)
            if pin:
                self.pin_workers(p.pid, pin)
            tids = [t for t, c in threads(p.pid).items() if re.fullmatch(worker_re, c)]
            if not tids:
                names = sorted(set(threads(p.pid).values()))
                raise RunFailed(f"no forwarding thread matching {worker_re!r} (threads: {names})")
            time.sleep(self.args.warmup)

            def sample() -> Sample:
                st = {}
                if stats_socket is not None:
                    st = parse_spillway_stats(
                        sh([str(self.paths["spillway"]), "stats", "--socket", str(stats_socket)])
                    )
                busy = cpu_busy_ns(cores)
                steal = steal_ns(cores)
                cpu = sum(thread_cpu_ns(p.pid, t) for t in tids)
                s = tel.port_stats(port)
                tx = sum(int((s if t == port else tel.port_stats(t)).get("opackets", 0)) for t in tx_ports)
                return Sample(
                    time.monotonic(),
                    int(s.get("ipackets", 0)),
                    tx,
                    cpu,
                    busy,
                    steal,
                    st,
                )

            before = probe() if probe else None
            a = sample()
            time.sleep(self.args.window)
            b = sample()
            a.probe, b.probe = before, probe() if probe else None
            if p.poll() is not None:
                raise RunFailed(f"exited with status {p.returncode} during the window")
        except RunFailed as e:
            self.stop(p)
            tail = logfile.read_text(errors="replace").strip().splitlines()[-4:]
            raise RunFailed(f"{e}; log {logfile}: " + " | ".join(tail)) from None
        finally:
            if tel is not None:
                tel.close()
            rc = self.stop(p)
            shutil.rmtree(rdir, ignore_errors=True)
        return a, b, rc

    # -- the two kinds of run -----------------------------------------------

    def packet_set(self, kind: str, flows: int, shards: int) -> list[Path]:
        d = self.workdir / "sets"
        d.mkdir(exist_ok=True)
        base = d / f"{kind}-{flows}-{shards}.pcap"
        if shards == 1:
            files = [base]
        else:
            files = [d / f"{kind}-{flows}-{shards}.{i}.pcap" for i in range(shards)]
        if kind == "return":
            if shards != 1:
                raise RunFailed("the gateway return set has one shard")
            if not base.exists():
                self.gateway_return_set(flows, base)
            return files
        if not all(f.exists() for f in files):
            cmd = [
                str(self.paths["packetset"]),
                "--kind", "gateway" if kind == "forward" else kind,
                "--flows", str(flows),
                "--vip", VIP6 if kind == "v6" else VIP4,
                "--dport", str(DPORT),
                "--shards", str(shards),
                "--dst-mac", UPLINK_MAC,
                "--out", str(base),
            ]  # fmt: skip
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                raise RunFailed(f"packetset failed: {r.stderr.strip()}")
        if kind == "synflood":
            # The memory sizing and the established share assume this layout:
            # 60-byte frames, each a 16-byte record after the 24-byte header.
            got = sum((f.stat().st_size - 24) // (16 + 60) for f in files)
            if got != packets_in_set(kind, flows):
                raise RunFailed(
                    f"packetset wrote {got} packets for the synflood set of {flows} flows, "
                    f"bench.py expects {packets_in_set(kind, flows)} (SYNFLOOD_* out of step?)"
                )
        return files

    def gateway_return_set(self, flows: int, out: Path) -> None:
        """The appliances' answers to the gateway forward set: what `spillway
        replay` sends them for it (the return case's configuration, the
        daemon's cookie seed), each echoed back, outer MACs and addresses
        swapped. Replay resolves the endpoint from its first tick, as the
        daemon has once the harness's warm-up announced it."""
        fwd = self.packet_set("forward", flows, 1)[0]
        d = self.workdir / "sets"
        conf = d / f"return-{flows}.toml"
        case = Case("gateway", "return", flows, GATEWAY_APPLIANCES)
        conf.write_text(spillway_config(case, [], 65536, [cpus_online()[-1]], d / "unused.sock", 9))
        sent = d / f"return-{flows}.sent.pcap"
        cmd = [
            str(self.paths["spillway"]), "replay",
            "--config", str(conf),
            "--input", str(fwd),
            "--output", str(sent),
            "--seed", str(GATEWAY_COOKIE_SEED),
            "--neighbour", f"{GATEWAY_ENDPOINT}={GATEWAY_ENDPOINT_MAC}",
        ]  # fmt: skip
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise RunFailed(f"spillway replay failed: {(r.stdout + r.stderr).strip()[-400:]}")
        n = echo_geneve(sent, out)
        if n != 2 * flows:
            raise RunFailed(
                f"spillway replay sent {n} Geneve packets for the {2 * flows} of the gateway "
                f"forward set ({sent}): {r.stdout.strip()[-300:]}"
            )

    def vdev(self, files: list[Path]) -> str:
        rx = ",".join(f"rx_pcap={f}" for f in files)
        return f"--vdev=net_pcap0,{rx},infinite_rx=1"

    def worker_cores(self, workers: int) -> list[int]:
        """CPUs of the forwarding threads: after the management core when
        there are enough; otherwise (testpmd only) the last ones, the first
        shared with the main lcore, which only waits."""
        cpus = cpus_online()
        if workers + 1 <= len(cpus):
            return cpus[1 : 1 + workers]
        return cpus[-workers:]

    def run_testpmd(self, fwd: str, kind: str, flows: int, workers: int) -> Result:
        self.serial += 1
        prefix = f"spwbench-{os.getpid()}-{self.serial}"
        files = self.packet_set(kind, flows, workers)
        mbufs = mbufs_for(packets_in_set(kind, flows), workers)
        mem, memmode = self.eal_memory(mbufs)
        cores = self.worker_cores(workers)
        # lcore 0 (main) on the first CPU, lcore i+1 on worker core i.
        lcores = ",".join([f"0@{cpus_online()[0]}"] + [f"{i + 1}@{c}" for i, c in enumerate(cores)])
        cmd = [
            str(self.paths["testpmd"]),
            f"--lcores={lcores}",
            *mem,
            "--no-pci",
            "--file-prefix", prefix,
            "--log-level=lib.eal:warning",
            self.vdev(files),
            "--",
            f"--forward-mode={fwd}",
            "--auto-start",
            "--port-topology=loop",
            f"--nb-cores={workers}",
            f"--rxq={workers}",
            f"--txq={workers}",
            "--burst=32",
            "--rxd=1024",
            "--txd=1024",
            "--mbcache=256",
            f"--total-num-mbufs={mbufs}",
        ]  # fmt: skip
        label = f"testpmd {fwd} {kind} {human_flows(flows)} flows {workers}w"
        logfile = self.workdir / f"{prefix}.log"
        a, b, _rc = self.measure(cmd, prefix, r"(rte|lcore)-worker-\d+", cores, logfile)
        # testpmd re-raises SIGINT after its clean shutdown: any status is fine.
        case = {"kind": kind, "flows": flows, "workers": workers, "mem": memmode}
        return self.result(label, fwd, case, a, b, cores, workers)

    def run_spillway(self, c: Case, binary_key: str = "spillway", suffix: str = "") -> Result:
        self.serial += 1
        prefix = f"spwbench-{os.getpid()}-{self.serial}"
        files = self.packet_set(c.kind, c.flows, c.workers)
        mbufs = mbufs_for(packets_in_set(c.kind, c.flows), c.workers)
        mem, memmode = self.eal_memory(mbufs, table_mb(c))
        cores = self.worker_cores(c.workers)
        d = self.workdir / prefix
        d.mkdir()
        ctl = d / "control.sock"
        conf = d / "bench.toml"
        eal = [*mem, "--no-pci", "--file-prefix", prefix, "--log-level=lib.eal:warning"]
        run = [str(self.paths[binary_key]), "run", "--config", str(conf)]
        warmup = None
        port = 0
        if c.mode == "gateway" and c.kind == "return":
            # Port 0 (the endpoint's) reads the warm-up FIFO, port 1 (the
            # appliances') replays the answers; the daemon makes replay's
            # cookies.
            fifo = d / "warmup.pcap"
            warmup = GatewayWarmup(fifo, self.packet_set("forward", c.flows, 1)[0], self.paths[binary_key], ctl)
            eal += [f"--vdev=net_pcap0,rx_pcap={fifo}", f"--vdev=net_pcap1,rx_pcap={files[0]},infinite_rx=1"]
            run += ["--fixed-cookie-seed", str(GATEWAY_COOKIE_SEED)]
            port = 1
        else:
            eal.append(self.vdev(files))
        metrics_port = self.free_tcp_port()
        probe = None
        if c.kind == "synflood":
            # Start with a new-entry budget that lets the established flows
            # in and keeps the flood from filling the table; the warm-up
            # lifts it once every established entry is confirmed.
            # --flood-defence: lifted to the daemon's default budget (the
            # defence on, as shipped) instead of removed.
            defended = self.args.flood_defence
            warmup = SynFloodWarmup(
                conf,
                spillway_config(
                    c, eal, mbufs, cores, ctl, metrics_port, budget=None if defended else 4294967295
                ),
                self.paths[binary_key],
                ctl,
                c.flows,
                defended,
            )
            probe = warmup.established
            conf.write_text(spillway_config(c, eal, mbufs, cores, ctl, metrics_port, budget=c.flows))
        else:
            conf.write_text(spillway_config(c, eal, mbufs, cores, ctl, metrics_port))
        check = subprocess.run(
            [str(self.paths[binary_key]), "check-config", str(conf)], capture_output=True, text=True
        )
        if check.returncode != 0:
            if warmup:
                warmup.close()
            raise RunFailed(f"spillway check-config {conf}: {check.stdout}{check.stderr}")
        logfile = d / "run.log"
        pin = {f"spillway-w{i}": core for i, core in enumerate(cores)}
        try:
            a, b, rc = self.measure(
                run,
                prefix,
                r"spillway-w\d+",
                cores,
                logfile,
                stats_socket=ctl,
                pin=pin,
                port=port,
                prepare=warmup,
                # Returned packets leave by the endpoint's port.
                tx_ports=(0,),
                probe=probe,
            )
        finally:
            if warmup:
                warmup.close()
        if rc != 0:
            tail = logfile.read_text(errors="replace").strip().splitlines()[-5:]
            raise RunFailed(f"spillway run exited with status {rc}: " + " | ".join(tail))
        case = dataclasses.asdict(c) | {"mem": memmode}
        r = self.result(c.label() + suffix, "spillway", case, a, b, cores, c.workers)
        if c.kind == "synflood":
            synflood_verdict(r, a.probe, b.probe, c.flows, warmup.before_flood)
            if "over budget" not in a.stats or "over budget" not in b.stats:
                raise RunFailed("synflood: `spillway stats` has no `over budget` count")
            over = b.stats["over budget"] - a.stats["over budget"]
            if self.args.flood_defence:
                rx = max(1, b.stats.get("rx", 0) - a.stats.get("rx", 0))
                r.note = "; ".join(
                    x for x in (r.note, f"flood defence on: {over / rx:.3f} of packets over budget") if x
                )
            elif over > 0:
                # Without the defence the flood is only one if every SYN could make an entry.
                raise RunFailed("synflood: new flows were over the new-entry budget in the window")
        if a.stats and b.stats and b.stats.get("rx", 0) > a.stats.get("rx", 0):
            rx = b.stats["rx"] - a.stats["rx"]
            r.fwd_share = (b.stats.get("forwarded", 0) - a.stats.get("forwarded", 0)) / rx
            r.new_flows_share = (b.stats.get("new", 0) - a.stats.get("new", 0)) / rx
            stateless = b.stats.get("stateless", 0) - a.stats.get("stateless", 0)
            if stateless:
                full = f"{stateless / rx:.0%} stateless (flow table full)"
                r.note = f"{r.note}; {full}" if r.note else full
            # What a row that forwards less than it receives drops.
            drops = {
                k[5:]: b.stats[k] - a.stats.get(k, 0)
                for k in b.stats
                if k.startswith("drop ") and b.stats[k] > a.stats.get(k, 0)
            }
            if drops and r.fwd_share < 0.99:
                top = max(drops, key=lambda k: drops[k])
                dropped = f"dropped: {top} {drops[top] / rx:.0%}"
                r.note = f"{r.note}; {dropped}" if r.note else dropped
            # Every row's set is forwarded whole (synflood rows too: over the
            # budget a SYN goes statelessly): one that is not measured a drop
            # path, not the case its label names.
            if r.fwd_share < 0.99:
                raise RunFailed(
                    f"forwarded {r.fwd_share:.0%} of what it received ({r.note or 'no drop counted'}): "
                    "the figures would be a drop path's"
                )
        return r

    def free_tcp_port(self) -> int:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    def result(self, label, kind, case, a: Sample, b: Sample, cores, workers) -> Result:
        dt = b.t - a.t
        pkts = b.rx - a.rx
        if pkts <= 0:
            raise RunFailed("the port received nothing in the window")
        cpu = b.cpu_ns - a.cpu_ns
        busy = sum(b.busy.get(c, 0) - a.busy.get(c, 0) for c in cores)
        window_ns = dt * 1e9 * len(cores)
        return Result(
            label=label,
            kind=kind,
            case=case,
            mpps=pkts / dt / 1e6,
            ns_per_pkt=cpu / pkts,
            cpu_share=cpu / window_ns,
            others=max(0.0, (busy - cpu) / window_ns),
            steal=(b.steal - a.steal) / window_ns,
            note=self.shared_note(busy - cpu, b.steal - a.steal, window_ns, (b.tx - a.tx) / pkts),
        )

    def shared_note(self, others_ns: float, steal: float, window_ns: float, tx_share: float) -> str:
        parts = []
        if tx_share < 0.99:
            parts.append(f"port sent {tx_share:.0%} of what it received")
        if others_ns / window_ns >= 0.10:
            parts.append(f"core shared ({others_ns / window_ns:.0%} others): Mpps low, ns/pkt holds")
        if steal / window_ns >= 0.05:
            parts.append(f"{steal / window_ns:.0%} steal")
        return "; ".join(parts)


def spillway_config(
    c: Case, eal: list[str], mbufs: int, cores: list[int], ctl: Path, metrics_port: int,
    budget: int | None = 4294967295,
) -> str:
    if c.mode == "gateway":
        return gateway_config(c, eal, mbufs, cores, ctl, metrics_port)
    v6 = c.kind == "v6"
    vip = VIP6 if v6 else VIP4
    proto = "UDP" if c.kind == "udp" else "TCP"
    table = 65537 if c.endpoints < 500 else 655373
    capacity = table_capacity(c)
    eps = []
    for i in range(c.endpoints):
        addr = f"fd00:0:1::{i + 1:x}" if v6 else f"10.0.{1 + i // 250}.{1 + i % 250}"
        ep = f'{{ address = "{addr}"'
        if c.mode == "l2dsr":
            ep += f', mac = "02:00:00:01:{(i >> 8) & 0xff:02x}:{i & 0xff:02x}"'
        eps.append(ep + " }")
    delivery = {
        "l2dsr": 'delivery = "l2dsr"',
        "ipip": 'delivery = "ipip"',
        "gue": 'delivery = "gue"\ngue_port = 6080',
        "gre": 'delivery = "gre"',
        "geneve": 'delivery = "geneve"',
    }[c.mode]
    q = json.dumps  # TOML basic strings are JSON strings
    ep_lines = ",\n  ".join(eps)
    return f"""# Written by perf/bench.py for: {c.label()}
[node]
name = "bench"
region = "bench"
zone = "bench-a"
# Exit at the first SIGINT: a benchmark has no routes to withdraw (M39).
shutdown_drain = "0s"

[dataplane]
management_core = {cpus_online()[0]}
worker_cores = {json.dumps(cores)}
eal_args = [{", ".join(q(a) for a in eal)}]
mbufs = {mbufs}
burst_size = 32
queue_descriptors = 1024
flow_table_capacity = {capacity}
# Every new flow gets an entry (the stateful path is what is measured; the
# new-entry budget is a flood defence, shown by perf/flood.sh; synflood rows
# start with a small one, see SynFloodWarmup).
{"" if budget is None else f"new_flow_budget = {budget}"}

[[ports]]
name = "uplink"
device = "net_pcap0"
role = "uplink"
mac = "{UPLINK_MAC}"
# Endpoints are off these subnets: reached through gateway_mac. Nothing on
# a net_pcap port answers ARP/NDP, so an on-link endpoint, left to
# neighbour resolution (M47), would get nothing.
addresses = ["10.0.0.2/24", "fd00::2/64"]
gateway = "10.0.0.1"
gateway_mac = "02:00:00:00:00:fe"

[[forwarding_rules]]
name = "bench"
vips = [{q(vip)}]
protocol = "{proto}"
ports = {DPORT}
backend_service = "bench"

[[backend_services]]
name = "bench"
{delivery}
maglev_table_size = {table}

[[backend_services.groups]]
name = "bench-a"
region = "bench"
zone = "bench-a"
endpoints = [
  {ep_lines},
]

[metrics]
listen = "127.0.0.1:{metrics_port}"

[control]
socket = {q(str(ctl))}
watch_config = false
"""


def gateway_config(c: Case, eal: list[str], mbufs: int, cores: list[int], ctl: Path, metrics_port: int) -> str:
    """A gateway rule (M31) for packetset's gateway endpoint, to
    `c.endpoints` appliances in Geneve (off the ports' subnets, reached
    through gateway_mac: nothing answers ARP on net_pcap; the endpoint itself
    is resolved from its gratuitous ARP). The return case has a second port
    for the appliances, whose answers arrive there."""
    q = json.dumps
    two_ports = c.kind == "return"
    net = "10.1.1" if two_ports else "10.0.1"
    eps = ",\n  ".join(f'{{ address = "{net}.{11 + i}" }}' for i in range(c.endpoints))
    backend_port = (
        f"""
[[ports]]
name = "appliances"
device = "net_pcap1"
role = "backend"
mac = "{APPLIANCE_PORT_MAC}"
addresses = ["10.1.0.2/24"]
gateway = "10.1.0.1"
gateway_mac = "02:00:00:00:00:fd"
"""
        if two_ports
        else ""
    )
    return f"""# Written by perf/bench.py for: {c.label()}
[node]
name = "bench"
region = "bench"
zone = "bench-a"
# Exit at the first SIGINT: a benchmark has no routes to withdraw (M39).
shutdown_drain = "0s"

[dataplane]
management_core = {cpus_online()[0]}
worker_cores = {json.dumps(cores)}
eal_args = [{", ".join(q(a) for a in eal)}]
mbufs = {mbufs}
burst_size = 32
queue_descriptors = 1024
flow_table_capacity = 65536
new_flow_budget = 4294967295

[[ports]]
name = "uplink"
device = "net_pcap0"
role = "uplink"
mac = "{UPLINK_MAC}"
addresses = ["10.0.0.2/24"]
gateway = "{GATEWAY_ENDPOINT}"
gateway_mac = "{GATEWAY_ENDPOINT_MAC}"
{backend_port}
[[forwarding_rules]]
name = "bench"
vips = [{q(VIP4)}]
protocol = "L3_DEFAULT"
mode = "gateway"
gateway_endpoints = [{{ address = "{GATEWAY_ENDPOINT}", id = {GATEWAY_ENDPOINT_ID:#x} }}]
backend_service = "bench"

[[backend_services]]
name = "bench"
delivery = "geneve"
maglev_table_size = 65537

[[backend_services.groups]]
name = "bench-a"
region = "bench"
zone = "bench-a"
endpoints = [
  {eps},
]

[metrics]
listen = "127.0.0.1:{metrics_port}"

[control]
socket = {q(str(ctl))}
watch_config = false
"""


class GatewayWarmup:
    """Feeds the gateway return case's warm-up port, a FIFO net_pcap reads
    as a pcap file: the endpoint's gratuitous ARP (its MAC resolves), then,
    once the worker has the snapshot with it, the forward set in order, so
    that every flow's entry is made in replay's order with replay's seed,
    i.e. with the cookies the answers carry; a second time a second later,
    which confirms the entries (M15). Then end of file. net_pcap reads a
    burst of 32 frames in one blocking call: frames go in by 32."""

    def __init__(self, fifo: Path, forward_set: Path, spillway: Path, ctl: Path):
        self.header, records = read_pcap(forward_set)
        self.garp = records[0]
        self.forward = b"".join(records)
        self.spillway = spillway
        self.ctl = ctl
        self.flows = (len(records) - 1) // 2
        os.mkfifo(fifo)
        # Read-write: neither this open nor DPDK's blocks on the other.
        self.fd: int | None = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
        self.write(self.header + self.garp * 32)

    def write(self, data: bytes, timeout: float = 30.0) -> None:
        view = memoryview(data)
        deadline = time.monotonic() + timeout
        while view:
            left = deadline - time.monotonic()
            if left <= 0 or self.fd is None:
                raise RunFailed("the gateway warm-up FIFO is not being read")
            select.select([], [self.fd], [], left)
            try:
                n = os.write(self.fd, view)
            except BlockingIOError:
                continue
            view = view[n:]

    def stats(self) -> dict[str, int]:
        return parse_spillway_stats(sh([str(self.spillway), "stats", "--socket", str(self.ctl)]))

    def __call__(self, _p: subprocess.Popen) -> None:
        # The worker has the first ARP; the management core resolves the
        # endpoint at its next tick. Each round lets the blocked worker
        # loop once and take the newest snapshot.
        time.sleep(1.0)
        for _ in range(4):
            self.write(self.garp * 32)
            time.sleep(0.25)
        self.write(self.forward)
        time.sleep(1.1)
        self.write(self.forward)
        self.close()
        time.sleep(0.2)
        st = self.stats()
        if st.get("drop not_ours") or st.get("new", 0) != self.flows:
            raise RunFailed(
                f"gateway warm-up: {st.get('new', 0)} flow entries for {self.flows} flows, "
                f"{st.get('drop not_ours', 0)} dropped as not_ours (was the endpoint resolved?)"
            )

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def synflood_client(i: int) -> tuple[str, int]:
    """Established flow `i` of a synflood set: packetset's `client()` for IPv4."""
    a = i & ((1 << 22) - 1)
    port = 1024 + ((i >> 22) + ((a * 7919) & 0xFFFFFFFF)) % (65536 - 1024)
    return str(ipaddress.IPv4Address(0x6440_0000 + a)), port


class SynFloodWarmup:
    """The synflood row's warm-up (a `prepare` for Runner.measure). The
    daemon starts with a new-entry budget of one per established flow per
    second and worker, so that the ACKs make their entries while the SYNs
    cannot fill the table. Once every established flow's entry is confirmed
    (seen in a later second than it was made: from then on no insert may
    displace it, crates/flowtable), it rewrites the configuration without
    the budget and reloads: every SYN then makes an entry, the table fills
    with half-open ones and the flood competes for its slots. That is the
    state of a real flood: the connections were established before it.

    `established()` lists the established entries (`spillway flows --state
    established`); the row compares each flow's entry (its cookie, drawn
    at random per entry) from the budget's lift to the window's end: an
    entry displaced and made again would carry another one."""

    def __init__(
        self, conf: Path, unlimited: str, spillway: Path, ctl: Path, flows: int, defended: bool = False
    ):
        self.conf = conf
        self.unlimited = unlimited
        # The lifted configuration keeps the default budget: its new flows stay over it.
        self.defended = defended
        self.spillway = spillway
        self.ctl = ctl
        self.keys = [synflood_client(i) for i in range(flows)]
        self.before_flood: dict | None = None

    def flows_json(self, *args: str) -> dict:
        cmd = [str(self.spillway), *args, "--socket", str(self.ctl), "--json"]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        try:
            answer = json.loads(r.stdout)
        except ValueError:
            answer = None
        if not isinstance(answer, dict) or not answer.get("ok"):
            raise RunFailed(f"`{' '.join(cmd[1:])}` failed: {(r.stdout + r.stderr).strip()[-300:]}")
        return answer

    def established(self) -> dict[tuple[str, int], tuple[str, bool]]:
        """(client, port) -> (cookie, unconfirmed) of the established flows' entries."""
        answer = self.flows_json("flows", "--state", "established", "--limit", "100000")
        try:
            entries = {
                (f["client"], int(f["client_port"])): (str(f["cookie"]), bool(f["unconfirmed"]))
                for f in answer["flows"]
            }
        except (KeyError, TypeError, ValueError) as e:
            raise RunFailed(f"spillway flows --json: no {e} in its entries") from None
        return {k: entries[k] for k in self.keys if k in entries}

    def __call__(self, _p: subprocess.Popen) -> None:
        deadline = time.monotonic() + 20
        while True:
            est = self.established()
            confirmed = sum(1 for _, unconfirmed in est.values() if not unconfirmed)
            if confirmed == len(self.keys):
                break
            if time.monotonic() > deadline:
                raise RunFailed(
                    f"synflood warm-up: {confirmed} of {len(self.keys)} established flows had a "
                    "confirmed entry after 20 s"
                )
            time.sleep(0.3)
        self.before_flood = est
        generation = self.generation()
        self.conf.write_text(self.unlimited)
        self.flows_json("reload")
        # The reload builds a snapshot off the management loop: wait until
        # the workers have it, so that the warm-up and the window are all flood.
        deadline = time.monotonic() + 30
        while self.generation() <= generation:
            if time.monotonic() > deadline:
                raise RunFailed("synflood warm-up: the reload lifting the budget did not go live in 30 s")
            time.sleep(0.1)
        if self.defended:
            return
        # A worker refills its budget at the next second: until then the
        # old one holds. Wait until no new flow is over it any more.
        last = None
        deadline = time.monotonic() + 10
        while True:
            st = parse_spillway_stats(sh([str(self.spillway), "stats", "--socket", str(self.ctl)]))
            if "over budget" not in st:
                raise RunFailed("synflood warm-up: `spillway stats` has no `over budget` count")
            if st["over budget"] == last:
                break
            if time.monotonic() > deadline:
                raise RunFailed("synflood warm-up: new flows still over the budget 10 s after the reload")
            last = st["over budget"]
            time.sleep(0.6)

    def generation(self) -> int:
        answer = self.flows_json("status")
        if not isinstance(answer.get("generation"), int):
            raise RunFailed("spillway status --json: no generation")
        return answer["generation"]

    def close(self) -> None:
        pass


def synflood_verdict(r: Result, start, end, flows: int, before_flood) -> None:
    """Fills in a synflood row's established figures; the eviction count is
    every established flow whose entry at the window's end is missing or not
    the one it had when the flood began."""
    if start is None or end is None or before_flood is None:
        raise RunFailed("synflood: the established entries were not read before and after the window")
    evicted = sum(1 for k, (cookie, _) in before_flood.items() if end.get(k, ("", True))[0] != cookie)
    evicted += flows - len(before_flood)
    r.established_share = 1 / (1 + SYNFLOOD_SYNS_PER_ACK)
    r.established_mpps = r.mpps * r.established_share
    r.established_evicted = evicted
    unconfirmed = sum(1 for _, u in end.values() if u)
    if unconfirmed:
        r.note = "; ".join(x for x in (r.note, f"{unconfirmed} established entries unconfirmed") if x)


def established_text(r: Result) -> str:
    """A synflood row's established flows, for its note."""
    if r.established_share is None:
        return ""
    ratio = "" if r.established_ratio_io is None else f", {r.established_ratio_io:.2f}x io"
    return (
        f"established {r.established_mpps:.2f} Mpps ({r.established_share:.0%} of the set){ratio}; "
        f"established evicted {r.established_evicted} of {r.case.get('flows', '?'):,}"
    )


def read_pcap(path: Path) -> tuple[bytes, list[bytes]]:
    """A pcap's file header and its records (each with its record header)."""
    data = path.read_bytes()
    if len(data) < 24:
        raise RunFailed(f"{path}: not a pcap")
    order = "<" if data[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    records = []
    off = 24
    while off + 16 <= len(data):
        incl = struct.unpack_from(order + "I", data, off + 8)[0]
        records.append(data[off : off + 16 + incl])
        off += 16 + incl
    return data[:24], records


def echo_geneve(sent: Path, out: Path) -> int:
    """Writes each IPv4 Geneve frame of `sent` back as its appliance would
    answer it (Ethernet and IP source and destination swapped; the IPv4 and
    UDP checksums do not change), the rest left out; returns how many."""
    header, records = read_pcap(sent)
    n = 0
    with open(out, "wb") as f:
        f.write(header)
        for rec in records:
            fr = rec[16:]
            if len(fr) < 42 or fr[12:14] != b"\x08\x00" or fr[23] != 17:
                continue
            udp = 14 + (fr[14] & 0x0F) * 4
            if len(fr) < udp + 8 or struct.unpack_from("!H", fr, udp + 2)[0] != GENEVE_PORT:
                continue
            e = bytearray(fr)
            e[0:6], e[6:12] = fr[6:12], fr[0:6]
            e[26:30], e[30:34] = fr[30:34], fr[26:30]
            f.write(rec[:16] + bytes(e))
            n += 1
    return n


# ---------------------------------------------------------------------------
# Output


COLUMNS = ["case", "Mpps", "ns/pkt", "× io", "× macswap", "cpu", "others", "fwd", "new/pkt", "note"]


def median_run(rs: list[Result]) -> Result:
    """One row from the passes' runs of it: the run of median ns/packet, with
    the ratios replaced by the medians of the passes' ratios (each pass pairs
    a row with the testpmd runs just before it) and the spread in the note."""
    if len(rs) == 1:
        return rs[0]
    by_ns = sorted(rs, key=lambda r: r.ns_per_pkt)
    # Odd N: the middle run; even N: the slower of the two middle ones.
    mid = by_ns[len(by_ns) // 2]

    def med(xs: list[float]) -> float | None:
        xs = sorted(xs)
        if not xs:
            return None
        n = len(xs)
        return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2

    out = dataclasses.replace(mid)
    out.ratio_io = med([r.ratio_io for r in rs if r.ratio_io is not None])
    out.ratio_macswap = med([r.ratio_macswap for r in rs if r.ratio_macswap is not None])
    if out.established_share is not None:
        out.established_ratio_io = out.ratio_io
        # Evicted in any pass counts.
        out.established_evicted = max(r.established_evicted or 0 for r in rs)
    spread = f"median of {len(rs)}: {by_ns[0].ns_per_pkt:.1f}-{by_ns[-1].ns_per_pkt:.1f} ns"
    out.note = "; ".join(x for x in (spread, mid.note) if x)
    return out


def fmt_row(r: Result) -> list[str]:
    def pct(x):
        return "" if x is None else f"{x:.0%}"

    def ratio(x):
        return "" if x is None else f"{x:.2f}"

    new = "" if r.new_flows_share is None else f"{r.new_flows_share:.3f}"
    return [
        r.label,
        f"{r.mpps:.2f}",
        f"{r.ns_per_pkt:.1f}",
        ratio(r.ratio_io),
        ratio(r.ratio_macswap),
        pct(r.cpu_share),
        pct(r.others),
        pct(r.fwd_share),
        new,
        "; ".join(x for x in (established_text(r), r.note) if x),
    ]


WIDTHS = [44, 7, 7, 6, 9, 5, 6, 5, 7, 0]


def print_row(cells: list[str]) -> None:
    line = "  ".join(c.rjust(w) if i in range(1, 9) else c.ljust(w) for i, (c, w) in enumerate(zip(cells, WIDTHS)))
    print(line.rstrip(), flush=True)


def write_markdown(path: Path, results: list[Result], info: dict, meta: dict) -> None:
    lines = [
        "# Benchmark results",
        "",
        "Written by `perf/bench.sh` (see perf/README.md for what each column means). Figures from a",
        "shared virtual machine are noisy: compare ratios within one run, not Mpps across runs.",
        "",
        f"- command: `{meta['command']}`",
        f"- date: {info['date']}",
        f"- commit: {info['commit']}",
        f"- machine: {info['cpu']}, {info['cpus']} CPUs ({info['hypervisor']} guest)"
        if info["hypervisor"] != "none"
        else f"- machine: {info['cpu']}, {info['cpus']} CPUs",
        f"- memory: {info['memory_gib']} GiB; kernel {info['kernel']}",
        f"- DPDK: {info['dpdk']}",
        f"- device: `net_pcap` with `infinite_rx=1`, no `tx_pcap` (TX counts and frees); burst 32, "
        f"1024 descriptors; DPDK memory: {meta['mem']}",
        f"- build: {meta['build']}; window: {meta['warmup']} s warm-up, then {meta['window']} s "
        "measured per row"
        + (
            f"; the whole matrix measured {meta['repeat']} times in passes: each row is its "
            "median run, its ratios the medians of the passes' ratios"
            if meta.get("repeat", 1) > 1
            else ""
        ),
        f"- worker cores: {meta['cores']}; management / testpmd main lcore: CPU {cpus_online()[0]}",
        f"- what else ran: {meta['others']}",
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "| " + " | ".join(["---"] + ["---:"] * 8 + ["---"]) + " |",
    ]
    for r in results:
        lines.append("| " + " | ".join(fmt_row(r)) + " |")
    if meta.get("skipped"):
        lines += ["", "Skipped:", ""] + [f"- {s}" for s in meta["skipped"]]
    if meta.get("notes"):
        lines += ["", "Notes:", ""] + [f"- {n}" for n in meta["notes"]]
    if meta.get("plot"):
        lines += ["", f"![Mpps vs. flow count per mode]({meta['plot']})"]
    path.write_text("\n".join(lines) + "\n")


# ---------------------------------------------------------------------------
# Main


class ProcAccount:
    """CPU time every other process used during the run, from /proc snapshots
    taken between rows (a process born after one snapshot counts whole)."""

    def __init__(self):
        self.last = proc_cpu_times()
        self.used: dict[int, list] = {}  # pid -> [cmd, ticks]

    def update(self) -> None:
        now = proc_cpu_times()
        for pid, (cmd, ticks, start) in now.items():
            prev = self.last.get(pid)
            # The same process (not a reused pid): count what it used since.
            delta = ticks - prev[1] if prev and prev[2] == start else ticks
            if delta > 0:
                self.used.setdefault(pid, [cmd, 0])[1] += delta
        self.last = now

    def summary(self, seconds: float, ours: set[int]) -> str:
        """Processes other than ours that used more than 5% of a CPU."""
        hz = os.sysconf("SC_CLK_TCK")
        busy = []
        for pid, (cmd, ticks) in self.used.items():
            if pid in ours or pid == os.getpid():
                continue
            share = ticks / hz / seconds if seconds > 0 else 0
            if share > 0.05:
                busy.append((share, pid, cmd))
        busy.sort(reverse=True)
        if not busy:
            return "nothing else used more than 5% of a CPU during the run"
        return "; ".join(f"pid {pid} `{cmd[:70]}` {share:.0%} of a CPU" for share, pid, cmd in busy[:6])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--quick", action="store_true", help="one short case with its testpmd ceiling (CI smoke)")
    g.add_argument("--full", action="store_true", help="the whole cross product (long)")
    ap.add_argument("--only", default="", help="run only cases whose label contains each of these words")
    ap.add_argument("--warmup", type=float, help="seconds before the window (default 1.5; quick 0.5)")
    ap.add_argument("--window", type=float, help="measured seconds per row (default 3; quick 1)")
    ap.add_argument("--mem", choices=["auto", "huge", "4k", "mixed"], default="auto",
                    help="DPDK memory: 2 MB hugepages (huge), 4 KB pages (4k, --no-huge), auto "
                    "(default: huge if the largest set of the run fits in the free hugepages, else "
                    "4k for every row), mixed (per packet set)")
    ap.add_argument("--reserve-hugepages", action="store_true",
                    help="(root) raise vm.nr_hugepages for the run so that every set fits in "
                    "hugepages; restored on exit")
    ap.add_argument("--repeat", type=int, default=1,
                    help="measure the whole matrix N times in passes and report per row the "
                    "median run, with ratios as the median of each pass's own ratios (on a "
                    "shared machine, one window per row can land in a slow spell)")
    ap.add_argument("--build", default="release", help="build profile, recorded in RESULTS.md")
    ap.add_argument("--plot-python", default="", help="a python with matplotlib for the PNG")
    ap.add_argument("--start-timeout", type=float, default=90.0)
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent,
                    help="directory for RESULTS.md, results.json, results.png (default perf/)")
    ap.add_argument("--no-write", action="store_true", help="print only")
    ap.add_argument("--spillway", type=Path, required=True)
    ap.add_argument("--compare", type=Path, default=None,
                    help="a second spillway binary (A/B of two builds): every case runs with it "
                    "right after --spillway's, rows marked [B]; with --repeat, the passes "
                    "alternate A and B under the same host load")
    ap.add_argument("--flood-defence", action="store_true",
                    help="synflood rows: after the warm-up keep the daemon's default new-entry "
                    "budget (the flood defence on, as shipped) instead of removing it")
    ap.add_argument("--packetset", type=Path, required=True)
    ap.add_argument("--testpmd", default=shutil.which("dpdk-testpmd") or "dpdk-testpmd")
    ap.add_argument("--workdir", type=Path, required=True, help="packet sets, configurations, logs")
    ap.add_argument("--remove-workdir", action="store_true", help="delete --workdir on exit")
    ap.add_argument("--repo", type=Path, default=Path(__file__).resolve().parent.parent)
    ap.add_argument("--command", default="perf/bench.sh", help="recorded in RESULTS.md")
    args = ap.parse_args()
    if args.remove_workdir:
        REMOVE_ON_EXIT.append(args.workdir)

    name = "quick" if args.quick else "full" if args.full else "default"
    args.warmup = args.warmup if args.warmup is not None else (0.5 if args.quick else 1.5)
    args.window = args.window if args.window is not None else (1.0 if args.quick else 3.0)
    cases = matrix(name)
    if args.only:
        words = args.only.split()
        cases = [c for c in cases if all(w in c.label().split() for w in words)]
        if not cases:
            log(f"no case of the {name} matrix has all of the words {words} in its label")
            return 2
    online = cpus_online()
    skipped = []
    runnable = []
    for c in cases:
        if c.workers > len(online):
            skipped.append(c)
        else:
            runnable.append(c)
    if skipped:
        log(
            f"{len(skipped)} Spillway case(s) skipped: more worker cores than this machine's "
            f"{len(online)} CPUs"
        )
    if any(c.workers + 1 > len(online) for c in runnable):
        log(
            "cases with as many workers as CPUs share the first worker's CPU with the management "
            "core (see the 'others' column)"
        )
    if cases and args.mem == "auto":
        need = max(
            memory_mb(mbufs_for(packets_in_set(c.kind, c.flows), c.workers), "huge") + table_mb(c)
            for c in cases
        )
        if args.reserve_hugepages and not hugepages_fit(need):
            reserve_hugepages(need // 2 + 32 - hugepages_free())
        if hugepages_fit(need):
            args.mem = "huge"
        else:
            args.mem = "4k"
            log(
                f"NOTICE: the largest packet set needs ~{need // 2 + 32} free 2 MB hugepages, "
                f"{hugepages_free()} are free: every row runs on 4 KB pages (--no-huge), which "
                "slows testpmd more than Spillway (ratios come out higher than with hugepages). "
                "Reserve more (echo N > /proc/sys/vm/nr_hugepages) or pass --mem mixed."
            )
    paths = {"spillway": args.spillway, "packetset": args.packetset, "testpmd": args.testpmd}
    if args.compare:
        paths["compare"] = args.compare
        if not args.no_write:
            log("--compare: printing only (an A/B is not a results table)")
            args.no_write = True
    args.workdir.mkdir(parents=True, exist_ok=True)
    runner = Runner(args, paths, args.workdir)
    info = machine_info(args.repo)
    log(f"{name} matrix: {len(runnable)} Spillway case(s); {info['cpu']}, {info['cpus']} CPUs; DPDK {info['dpdk']}")

    print_row(COLUMNS)
    results: list[Result] = []
    failures: list[str] = []
    account = ProcAccount()
    t0 = time.monotonic()
    # Per row label, one result per pass (ratios filled in within the pass).
    runs: dict[str, list[Result]] = {}
    for rep in range(max(1, args.repeat)):
        if args.repeat > 1:
            log(f"pass {rep + 1} of {args.repeat}")
        ceilings: dict[tuple, dict[str, Result]] = {}
        for c in cases:
            key = (c.kind, c.flows, c.workers)
            if key not in ceilings:
                ceilings[key] = {}
                for fwd in ("io", "macswap"):
                    try:
                        r = runner.run_testpmd(fwd, *key)
                    except RunFailed as e:
                        failures.append(f"testpmd {fwd} {key}: {e}")
                        log(f"FAILED: testpmd {fwd} {key}: {e}")
                        continue
                    ceilings[key][fwd] = r
                    runs.setdefault(r.label, []).append(r)
                    print_row(fmt_row(r))
                    account.update()
            if c in skipped:
                if rep == 0:
                    print_row([c.label(), "", "", "", "", "", "", "", "", f"skipped: needs {c.workers} CPUs"])
                continue
            builds = [("spillway", "")] + ([("compare", " [B]")] if args.compare else [])
            # A and B take turns going first, so neither always runs right after testpmd.
            if rep % 2:
                builds.reverse()
            for binary_key, suffix in builds:
                try:
                    r = runner.run_spillway(c, binary_key, suffix)
                except RunFailed as e:
                    failures.append(f"{c.label()}{suffix}: {e}")
                    log(f"FAILED: {c.label()}{suffix}: {e}")
                    continue
                ceil = ceilings[key]
                if "io" in ceil:
                    r.ratio_io = ceil["io"].ns_per_pkt / r.ns_per_pkt
                if "macswap" in ceil:
                    r.ratio_macswap = ceil["macswap"].ns_per_pkt / r.ns_per_pkt
                if r.established_share is not None:
                    r.established_ratio_io = r.ratio_io
                runs.setdefault(r.label, []).append(r)
                print_row(fmt_row(r))
                account.update()
        # Ceiling rows relative to io, for reading the table.
        for ceil in ceilings.values():
            for r in ceil.values():
                if "io" in ceil:
                    r.ratio_io = ceil["io"].ns_per_pkt / r.ns_per_pkt
                if "macswap" in ceil:
                    r.ratio_macswap = ceil["macswap"].ns_per_pkt / r.ns_per_pkt
    results = [median_run(rs) for rs in runs.values()]
    if args.repeat > 1:
        log(f"medians of {args.repeat} passes:")
        print_row(COLUMNS)
        for r in results:
            print_row(fmt_row(r))
    elapsed = time.monotonic() - t0
    if failures and REMOVE_ON_EXIT:
        REMOVE_ON_EXIT.clear()
        log(f"logs and configurations of the failed runs kept in {args.workdir}")
    account.update()
    others = account.summary(elapsed, runner.started)
    log(f"done in {elapsed:.0f} s; {len(results)} rows, {len(failures)} failure(s)")
    log(f"what else ran: {others}")
    for n in sorted(runner.notes):
        log(f"note: {n}")

    mems = sorted({r.case.get("mem", "") for r in results})
    meta = {
        "command": args.command,
        "build": args.build,
        "warmup": args.warmup,
        "window": args.window,
        "repeat": max(1, args.repeat),
        "mem": ", ".join({"4k": "4 KB pages (`--no-huge`)", "huge": "2 MB hugepages"}[m] for m in mems if m),
        "cores": ", ".join(
            f"{w}: CPU {','.join(map(str, runner.worker_cores(w)))}"
            for w in sorted({c.workers for c in cases})
        ),
        "others": others,
        "skipped": [f"{c.label()}: needs {c.workers} CPUs, this machine has "
                    f"{len(online)}" for c in skipped],
        "notes": sorted(runner.notes) + [f"FAILED {f}" for f in failures],
    }
    if not args.no_write:
        out = args.out
        out.mkdir(parents=True, exist_ok=True)
        data = {
            "machine": info,
            "meta": meta,
            "results": [dataclasses.asdict(r) for r in results],
        }
        (out / "results.json").write_text(json.dumps(data, indent=1) + "\n")
        meta["plot"] = ""
        png = out / "results.png"
        if args.plot_python and any(r.kind == "spillway" for r in results):
            r = subprocess.run(
                [args.plot_python, str(Path(__file__).with_name("plot.py")), str(out / "results.json"), str(png)],
                capture_output=True,
                text=True,
            )
            if r.returncode == 0:
                meta["plot"] = png.name
                log(f"wrote {png}")
            else:
                log(f"NOTICE: no plot: {r.stderr.strip().splitlines()[-1:]}")
        elif not args.plot_python:
            log("NOTICE: no python with matplotlib: no plot (apt-get install python3-matplotlib)")
        write_markdown(out / "RESULTS.md", results, info, meta)
        log(f"wrote {out / 'RESULTS.md'} and {out / 'results.json'}")
    return 1 if failures else 0


def cleanup(*_):
    for p in list(CHILDREN):
        if p.poll() is None:
            try:
                p.kill()
                p.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                pass
    CHILDREN.clear()
    for n in RESTORE_HUGEPAGES:
        try:
            NR_HUGEPAGES.write_text(f"{n}\n")
            log(f"vm.nr_hugepages back to {n}")
        except OSError as e:
            log(f"NOTICE: cannot restore vm.nr_hugepages to {n}: {e}")
    RESTORE_HUGEPAGES.clear()
    for d in REMOVE_ON_EXIT:
        shutil.rmtree(d, ignore_errors=True)
    REMOVE_ON_EXIT.clear()


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        rc = main()
    except KeyboardInterrupt:
        rc = 130
    finally:
        cleanup()
    sys.exit(rc)
