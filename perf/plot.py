#!/usr/bin/env python3
"""Plots Mpps vs. flow count per delivery mode from perf/bench.py's results.json.

The y axis is Mpps per worker core, 1000 / (ns of worker CPU per packet): the
measured Mpps when the worker had its core to itself, and unaffected when
something else shared it (a shared machine).

    plot.py results.json results.png

Spillway rows of established flows (ack), the fewest endpoints and one worker,
one line per mode; testpmd io and macswap on the same packet sets as dashed
ceilings. Needs matplotlib (Debian: python3-matplotlib).
"""

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import ScalarFormatter  # noqa: E402


def main() -> int:
    src, dst = sys.argv[1], sys.argv[2]
    data = json.load(open(src))
    rows = data["results"]
    info = data["machine"]
    # Of the plotted rows only (the gateway cases' appliances are not endpoints).
    ep = min(
        (r["case"].get("endpoints", 1 << 30) for r in rows if r["kind"] == "spillway" and r["case"].get("kind") == "ack"),
        default=8,
    )

    def pick(kind, mode=None):
        pts = {}
        for r in rows:
            c = r["case"]
            if r["kind"] != kind or c.get("kind") != "ack" or c.get("workers") != 1:
                continue
            if mode is not None and (c.get("mode") != mode or c.get("endpoints") != ep):
                continue
            # Mpps per worker core: the measured Mpps on an unshared core,
            # and not lowered when something else shared it.
            pts[c["flows"]] = 1000.0 / r["ns_per_pkt"]
        return sorted(pts.items())

    fig, ax = plt.subplots(figsize=(9, 5), dpi=110)
    for fwd, style in (("io", "k--"), ("macswap", "k:")):
        pts = pick(fwd)
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], style, label=f"testpmd {fwd}")
    for mode in ("l2dsr", "ipip", "gue", "gre", "geneve"):
        pts = pick("spillway", mode)
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=f"spillway {mode}")
    ax.set_xscale("symlog", linthresh=1)
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(ScalarFormatter())
    ax.yaxis.set_minor_formatter(ScalarFormatter())
    ax.tick_params(axis="y", which="minor", labelsize=7)
    ax.set_xlabel("distinct flows in the replayed set")
    ax.set_ylabel("Mpps per worker core (1000 / ns per packet)")
    ax.set_title(
        f"Spillway vs. testpmd on net_pcap, 60-byte TCP ACKs, {ep} endpoints, "
        f"{data['meta'].get('mem', '').replace('`', '')}\n"
        f"{info['cpu']}, {info['cpus']} CPUs; DPDK {info['dpdk'].split()[0]}; "
        f"{info['commit']}; {info['date']}",
        fontsize=9,
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    fig.savefig(dst)
    return 0


if __name__ == "__main__":
    sys.exit(main())
