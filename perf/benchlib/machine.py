"""The machine the harness runs on: its online CPUs, its hugepages (and
raising vm.nr_hugepages for a run, restored by bench.py's cleanup), what it
is (`machine_info`, recorded with the results), CPU time from /proc (per
CPU, per thread, per process: `ProcAccount` notes what else ran), a DPDK
process's telemetry socket, and `sh`, which runs a command for its output."""

from __future__ import annotations

import datetime
import json
import os
import re
import socket
import subprocess
from pathlib import Path

from .log import log


# ---------------------------------------------------------------------------
# CPUs and hugepages


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


# ---------------------------------------------------------------------------
# What the machine is


def sh(cmd: list[str], cwd: Path | None = None) -> str:
    """Runs `cmd` for its output, stripped; "" if it cannot run or takes over 20 s."""
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


# ---------------------------------------------------------------------------
# CPU time


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


# ---------------------------------------------------------------------------
# A DPDK process: its threads and telemetry


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
