#!/usr/bin/env python3
"""Draws the demo's picture: how the connections spread over the backends.

  demo-plot.py LOG MARKS OUT.png

LOG has a line "unix-time backend" per request (demo-client.py), MARKS a line
"unix-time label" per step of the demo. The top panel shows requests a second
per backend over time, with each step marked; the bottom one each step's
share per backend. Needs matplotlib (Debian: python3-matplotlib).
"""
import sys

import matplotlib

matplotlib.use("Agg")  # no display: write the file only
import matplotlib.pyplot as plt  # noqa: E402 (after choosing the backend)

BIN = 1.0  # seconds per point of the timeline


def read(path):
    rows = []
    with open(path, encoding="ascii") as f:
        for line in f:
            t, _, what = line.strip().partition(" ")
            if what:
                rows.append((float(t), what))
    return rows


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    requests = sorted(read(sys.argv[1]))
    marks = sorted(read(sys.argv[2]))
    if not requests:
        sys.exit(f"{sys.argv[1]}: no requests logged")
    t0 = min(requests[0][0], marks[0][0] if marks else requests[0][0])
    backends = sorted({b for _, b in requests if b != "FAILED"})
    series = backends + (["FAILED"] if any(b == "FAILED" for _, b in requests) else [])
    colours = {b: plt.cm.tab10(i) for i, b in enumerate(backends)}
    colours["FAILED"] = "red"

    fig, (top, bottom) = plt.subplots(
        2, 1, figsize=(11, 7), gridspec_kw={"height_ratios": [3, 2]}
    )
    end = requests[-1][0] - t0
    bins = int(end / BIN) + 1
    xs = [i * BIN for i in range(bins)]
    for b in series:
        ys = [0.0] * bins
        for t, who in requests:
            if who == b:
                ys[int((t - t0) / BIN)] += 1 / BIN
        top.plot(xs, ys, label=b, color=colours[b], linestyle="--" if b == "FAILED" else "-")
    for t, label in marks:
        top.axvline(t - t0, color="grey", linewidth=0.8)
        top.annotate(
            label, (t - t0, 1), xycoords=("data", "axes fraction"), rotation=90,
            va="top", ha="right", fontsize=8, color="dimgrey",
        )
    top.set_xlabel("seconds since the traffic started")
    top.set_ylabel("new connections / s")
    top.set_title("Spillway demo: new connections per backend")
    top.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)

    # Each step's share: the requests between its mark and the next.
    edges = [t for t, _ in marks] + [float("inf")]
    labels, shares = [], {b: [] for b in series}
    for i, (start, label) in enumerate(marks):
        inside = [b for t, b in requests if start <= t < edges[i + 1]]
        if not inside:
            continue
        labels.append(f"{label} ({len(inside)})")
        for b in series:
            shares[b].append(100.0 * inside.count(b) / len(inside))
    left = [0.0] * len(labels)
    for b in series:
        bottom.barh(labels, shares[b], left=left, color=colours[b], label=b)
        left = [a + s for a, s in zip(left, shares[b])]
    bottom.invert_yaxis()
    bottom.set_xlim(0, 100)
    bottom.set_xlabel("share of the step's new connections (%)")
    bottom.tick_params(axis="y", labelsize=8)
    fig.tight_layout()
    fig.savefig(sys.argv[3], dpi=100)


if __name__ == "__main__":
    main()
