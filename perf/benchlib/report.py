"""The results table: its columns, one row's cells, printing a row as it
completes, the median row of several passes, and RESULTS.md."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from .machine import cpus_online
from .measurement import Result


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


def established_text(r: Result) -> str:
    """A synflood row's established flows, for its note."""
    if r.established_share is None:
        return ""
    ratio = "" if r.established_ratio_io is None else f", {r.established_ratio_io:.2f}x io"
    return (
        f"established {r.established_mpps:.2f} Mpps ({r.established_share:.0%} of the set){ratio}; "
        f"established evicted {r.established_evicted} of {r.case.get('flows', '?'):,}"
    )


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
