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

# This file is the command line: its options, the stages of a run (main) and
# the cleanup on exit. The harness's parts are in perf/benchlib/ (its
# __init__ lists them); `python3 perf/bench.py` finds them next to it.

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from benchlib.cases import Case, matrix, mbufs_for, memory_mb, packets_in_set, table_mb
from benchlib.log import log
from benchlib.machine import (
    NR_HUGEPAGES,
    RESTORE_HUGEPAGES,
    ProcAccount,
    cpus_online,
    hugepages_fit,
    hugepages_free,
    machine_info,
    reserve_hugepages,
)
from benchlib.measurement import Result
from benchlib.passes import Passes
from benchlib.report import COLUMNS, fmt_row, median_run, print_row, write_markdown
from benchlib.runner import CHILDREN, Runner

# Directories removed on exit.
REMOVE_ON_EXIT: list[Path] = []


def parse_args() -> argparse.Namespace:
    """The command line (`perf/bench.sh --help` prints it after its own)."""
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
    return ap.parse_args()


def split_by_cpus(cases: list[Case], online: list[int]) -> tuple[list[Case], list[Case]]:
    """The cases with more workers than this machine has CPUs (skipped), and
    the others; says so on stderr."""
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
    return skipped, runnable


def choose_memory(args, cases: list[Case]) -> None:
    """`--mem auto`: 2 MB hugepages if the largest set of the run fits in the
    free ones (after raising vm.nr_hugepages with --reserve-hugepages), else
    4 KB pages for every row."""
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


def run_meta(
    args, runner: Runner, cases: list[Case], skipped: list[Case], online: list[int],
    results: list[Result], others: str, failures: list[str],
) -> dict:
    """How the run was made, for results.json and RESULTS.md."""
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
    return meta


def write_outputs(args, results: list[Result], info: dict, meta: dict) -> None:
    """results.json, the plot (perf/plot.py, run by --plot-python) and
    RESULTS.md, in --out."""
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


def main() -> int:
    """One run: the cases, the memory, the passes, their medians, the outputs.
    Returns the exit status (1 if any run failed)."""
    args = parse_args()
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
    skipped, runnable = split_by_cpus(cases, online)
    choose_memory(args, cases)
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
    account = ProcAccount()
    t0 = time.monotonic()
    passes = Passes(args, runner, account)
    passes.run(cases, skipped)
    failures = passes.failures
    results = [median_run(rs) for rs in passes.runs.values()]
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

    meta = run_meta(args, runner, cases, skipped, online, results, others, failures)
    if not args.no_write:
        write_outputs(args, results, info, meta)
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
