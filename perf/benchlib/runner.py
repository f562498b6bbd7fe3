"""Running the measured processes: `Runner` writes a case's packet set and
configuration, starts `spillway run` or `dpdk-testpmd` on a net_pcap port,
waits until it forwards, samples a window and makes the result row.
`CHILDREN` lists the processes it started, which bench.py's cleanup kills.

Read `measure()` first (one process, one window); `run_testpmd()` and
`run_spillway()` build on it."""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from .cases import (
    DPORT,
    GATEWAY_APPLIANCES,
    GATEWAY_COOKIE_SEED,
    GATEWAY_ENDPOINT,
    GATEWAY_ENDPOINT_MAC,
    UPLINK_MAC,
    VIP4,
    VIP6,
    Case,
    human_flows,
    mbufs_for,
    memory_mb,
    packets_in_set,
    table_mb,
)
from .configs import spillway_config
from .log import log
from .machine import (
    Telemetry,
    cpu_busy_ns,
    cpus_online,
    hugepages_fit,
    runtime_dir,
    sh,
    steal_ns,
    thread_cpu_ns,
    threads,
)
from .measurement import Result, RunFailed, Sample, parse_spillway_stats
from .pcap import echo_geneve
from .warmups import GatewayWarmup, SynFloodWarmup, synflood_verdict


# Processes this harness started: killed (by pid) on any exit.
CHILDREN: list[subprocess.Popen] = []


class Runner:
    """Runs the rows of one harness run (its options `args`, the binaries in
    `paths`, its scratch directory `workdir`) and keeps what they noted."""

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
