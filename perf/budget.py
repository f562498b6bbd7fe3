#!/usr/bin/env python3
"""The per-stage instruction budget of one packet, from two callgrind runs of
`pipeline_cycles` (perf/budget.sh makes them): each source file's
instructions in the longer run minus the shorter one's, over the packets
between them, grouped into the pipeline's stages. Everything is inlined into
`Pipeline::process_burst`, so callgrind places instructions by the source file
they come from, which is what the stages are told apart by.

  python3 perf/budget.py SHORT.annotate LONG.annotate PACKETS [MODE] [RESULTS_JSON] [KIND]

The two inputs are `callgrind_annotate --inclusive=no --auto=no --threshold=99.99` of
each run. Standard library only. Prints a Markdown table and the total.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

# Stages in pipeline order: (name, patterns of the source paths it covers).
# The first stage with a matching pattern takes a file.
STAGES: list[tuple[str, list[str]]] = [
    ("parse and classify", [r"dataplane/src/pipeline/classify\.rs$", r"wire/src/(packet|ethernet|ipv4|ipv6|ip|tcp|udp)\.rs$", r"crates/config/"]),
    ("flow key and hash", [r"wire/src/flow\.rs$"]),
    ("flow-table lookup", [r"crates/flowtable/", r"library/core/src/sync/atomic\.rs$"]),
    ("entry decision and delivery call", [r"dataplane/src/pipeline/flow\.rs$"]),
    ("gateway branch", [r"dataplane/src/pipeline/gateway\.rs$"]),
    ("select (Maglev, snapshot)", [r"crates/maglev/", r"dataplane/src/snapshot"]),
    ("encapsulate (template copy, lengths, checksum)", [r"wire/src/(encap|buf|checksum|geneve|gue|gre|vxlan)\.rs$", r"memmove|memcpy"]),
    ("burst staging, prefetch, verdicts", [r"dataplane/src/pipeline/mod\.rs$"]),
    ("counters", [r"dataplane/src/pipeline/count\.rs$"]),
    ("core library helpers inlined into all of the above", [r"^/rustc/", r"library/(core|alloc|std)/"]),
    ("the harness (buffer reset)", [r"benches/common/"]),
    ("lines callgrind could not place", [r"^\?\?\?$"]),
]
OTHER = "other"

LINE = re.compile(r"^\s*([\d,]+)\s+\([\s\d.]+%\)\s+(.+?):(.*)$")


def per_file(path: Path) -> tuple[int, dict[str, int]]:
    """(program total, Ir per source file) of a callgrind_annotate output."""
    total = None
    files: dict[str, int] = {}
    for line in path.read_text(errors="replace").splitlines():
        if line.rstrip().endswith("PROGRAM TOTALS"):
            total = int(line.split()[0].replace(",", ""))
            continue
        m = LINE.match(line)
        if not m:
            continue
        ir = int(m.group(1).replace(",", ""))
        files[m.group(2)] = files.get(m.group(2), 0) + ir
    if total is None:
        raise SystemExit(f"budget.py: {path}: no PROGRAM TOTALS line (not callgrind_annotate output?)")
    return total, files


def short(path: str) -> str:
    """A source path as the table names it."""
    # Paths under the working directory come relative.
    path = "/" + path.lstrip("./") if not path.startswith("/") else path
    for marker in ("/library/", "/crates/", "/sysdeps/"):
        i = path.find(marker)
        if i >= 0:
            return path[i + len(marker):].replace("/src/", "/", 1)
    return path.rsplit("/", 1)[-1]


def stage_of(path: str) -> str:
    for name, patterns in STAGES:
        if any(re.search(p, path) for p in patterns):
            return name
    return OTHER


def tx_line(mode: str, results: Path, kind: str = "ack") -> str:
    """What the DPDK rows say about RX and TX, which this harness leaves out."""
    kind = {"gateway": "forward", "gateway-return": "return"}.get(mode, kind)
    label = f"testpmd io {kind} 4,096 flows 1w"
    try:
        rows = json.loads(results.read_text())["results"]
    except (OSError, ValueError, KeyError):
        rows = []
    row = next((r for r in rows if r.get("label") == label), None)
    if row is None:
        return (f"TX (and RX) are outside this harness: `pipeline_cycles` neither receives nor sends "
                f"(no `{label}` row in {results} to compare with).")
    return (f"TX (and RX) are outside this harness: `pipeline_cycles` neither receives nor sends. "
            f"On the DPDK rows ({results}), `{label}` takes {row['ns_per_pkt']:.1f} ns a packet for "
            "RX and TX alone (net_pcap's copy included): a ceiling for them, in nanoseconds, "
            "not instructions.")


def main() -> int:
    if len(sys.argv) < 4:
        print(__doc__, file=sys.stderr)
        return 2
    short_run, long_run = Path(sys.argv[1]), Path(sys.argv[2])
    packets = int(sys.argv[3])
    mode = sys.argv[4] if len(sys.argv) > 4 else "gue"
    results = Path(sys.argv[5]) if len(sys.argv) > 5 else None
    kind = sys.argv[6] if len(sys.argv) > 6 else "ack"
    if packets <= 0:
        raise SystemExit("budget.py: PACKETS must be positive")
    t1, f1 = per_file(short_run)
    t2, f2 = per_file(long_run)
    stages: dict[str, dict[str, float]] = {}
    for path in set(f1) | set(f2):
        d = (f2.get(path, 0) - f1.get(path, 0)) / packets
        if abs(d) < 0.05:
            continue  # set-up and exit, the same in both runs
        stages.setdefault(stage_of(path), {})
        name = short(path)
        stages[stage_of(path)][name] = stages[stage_of(path)].get(name, 0.0) + d
    total = (t2 - t1) / packets
    print("| stage | source | Ir/packet |")
    print("| --- | --- | ---: |")
    order = [name for name, _ in STAGES] + [OTHER]
    placed = 0.0
    for name in order:
        files = stages.get(name)
        if not files:
            continue
        s = sum(files.values())
        placed += s
        if abs(s) < 0.5:
            continue
        top = sorted(files.items(), key=lambda kv: -kv[1])
        shown = ", ".join(f"`{f}` {v:.1f}" for f, v in top[:4] if v >= 0.5)
        rest = sum(v for _, v in top[4:])
        if len(top) > 4 and abs(rest) >= 0.5:
            shown += f", the rest {rest:.1f}"
        print(f"| {name} | {shown} | {s:.0f} |")
    label = mode if kind == "ack" else f"{mode} {kind}"
    print(f"| **total** ({label}) | callgrind's program totals | **{total:.1f}** |")
    if abs(placed - total) > 1:
        print(f"\n(the rows add up to {placed:.1f}: lines below callgrind_annotate's threshold are missing)")
    if results is not None:
        print()
        print(tx_line(mode, results, kind))
    return 0


if __name__ == "__main__":
    sys.exit(main())
