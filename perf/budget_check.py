#!/usr/bin/env python3
"""The instruction budget, checked: runs `perf/budget.sh` for every row of
perf/budget.toml and compares each row's Ir/packet with its checked-in figure.

  python3 perf/budget_check.py [--update] [--table FILE] [ROW ...]

A row fails when it is more than the table's `tolerance` (percent) over its
figure; its per-stage table is printed, and the exit status is 1. A row that
came out lower is a notice: lowering a figure is a commit that updates the
table (`--update` rewrites every measured row's `ir` in place, comments kept).
ROW selects rows by `MODE`, `MODE/KIND` or `MODE/KIND/FLOWS` (all by default).

Instruction counts do not depend on the host or its load, but they do depend
on the compiler: the table records the `rustc` it was measured with, and with
another one the figures are printed and nothing fails (re-measure with
`--update`). Standard library only (tomllib: Python 3.11).
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOTAL = re.compile(r"^\| \*\*total\*\* .*\*\*([\d.]+)\*\* \|$", re.M)


@dataclass
class Row:
    mode: str
    kind: str
    flows: int
    capacity: int | None
    ir: float

    def name(self) -> str:
        cap = f" (table {self.capacity})" if self.capacity else ""
        return f"{self.mode}/{self.kind}/{self.flows}{cap}"

    def selected(self, wanted: list[str]) -> bool:
        if not wanted:
            return True
        parts = [self.mode, self.kind, str(self.flows)]
        return any(w.split("/") == parts[: len(w.split("/"))] for w in wanted)

    def command(self) -> list[str]:
        cmd = [str(ROOT / "perf/budget.sh"), self.mode, str(self.flows), self.kind]
        if self.capacity:
            cmd.append(str(self.capacity))
        return cmd


def load(path: Path) -> tuple[dict, list[Row]]:
    try:
        doc = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise SystemExit(f"budget_check: {path}: {e}")
    rows = []
    for i, r in enumerate(doc.get("row", [])):
        try:
            rows.append(Row(str(r["mode"]), str(r.get("kind", "ack")), int(r["flows"]),
                            int(r["capacity"]) if "capacity" in r else None, float(r["ir"])))
        except (KeyError, TypeError, ValueError) as e:
            raise SystemExit(f"budget_check: {path}: row {i + 1}: {e!r} (needs mode, flows, ir)")
    if not rows:
        raise SystemExit(f"budget_check: {path}: no [[row]]")
    return doc, rows


def rustc_version() -> str:
    try:
        out = subprocess.run(["rustc", "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    parts = out.split()
    return parts[1] if len(parts) > 1 else "unknown"


def measure(row: Row) -> tuple[float | None, str]:
    """(Ir/packet, budget.sh's whole output) of one row."""
    run = subprocess.run(row.command(), capture_output=True, text=True, cwd=ROOT)
    out = run.stdout + (run.stderr if run.returncode else "")
    m = TOTAL.search(run.stdout)
    if run.returncode or not m:
        return None, out
    return float(m.group(1)), run.stdout


def update(path: Path, figures: dict[tuple[str, str, int, int | None], float], rustc: str) -> None:
    """Rewrites the `ir` of measured rows and the `rustc` line, keeping the rest."""
    lines = path.read_text().splitlines(keepends=True)
    out: list[str] = []
    starts = [i for i, l in enumerate(lines) if l.strip() == "[[row]]"] + [len(lines)]
    head = lines[: starts[0]]
    for i, l in enumerate(head):
        if re.match(r"^rustc\s*=", l):
            head[i] = f'rustc = "{rustc}"\n'
    out.extend(head)
    for a, b in zip(starts, starts[1:]):
        block = lines[a:b]
        text = "".join(block)
        try:
            r = tomllib.loads(text.replace("[[row]]", "", 1))
        except tomllib.TOMLDecodeError:
            out.extend(block)
            continue
        key = (r.get("mode"), r.get("kind", "ack"), r.get("flows"), r.get("capacity"))
        cur = figures.get(key)
        if cur is not None:
            block = [re.sub(r"^(ir\s*=\s*)[\d.]+", lambda m: f"{m.group(1)}{cur:.1f}", l) for l in block]
        out.extend(block)
    path.write_text("".join(out))


def main() -> int:
    args = sys.argv[1:]
    if "-h" in args or "--help" in args:
        print(__doc__)
        return 0
    do_update = "--update" in args
    args = [a for a in args if a != "--update"]
    table = ROOT / "perf/budget.toml"
    if "--table" in args:
        i = args.index("--table")
        if i + 1 >= len(args):
            raise SystemExit("budget_check: --table needs a file")
        table = Path(args[i + 1])
        del args[i : i + 2]
    unknown = [a for a in args if a.startswith("-")]
    if unknown:
        raise SystemExit(f"budget_check: unknown option {unknown[0]} (see --help)")
    doc, rows = load(table)
    tolerance = float(doc.get("tolerance", 2.0))
    rustc = rustc_version()
    same_compiler = doc.get("rustc") == rustc
    picked = [r for r in rows if r.selected(args)]
    if not picked:
        raise SystemExit(f"budget_check: no row matches {' '.join(args)}")
    if not same_compiler:
        print(f"budget_check: NOTICE: the table was measured with rustc {doc.get('rustc')}, this is "
              f"{rustc}: figures are printed, none fails (re-measure with --update)")

    failed, broken, figures = [], [], {}
    print("| row | budget | now | change |")
    print("| --- | ---: | ---: | ---: |")
    for r in picked:
        ir, out = measure(r)
        if ir is None:
            broken.append((r, out))
            print(f"| {r.name()} | {r.ir:.1f} | failed | |", flush=True)
            continue
        figures[(r.mode, r.kind, r.flows, r.capacity)] = ir
        # A row without a figure yet fails until `--update` gives it one.
        change = (ir - r.ir) / r.ir * 100 if r.ir > 0 else float("inf")
        flag = ""
        if change > tolerance:
            flag = " **over**"
            failed.append((r, ir, out))
        elif change < -tolerance:
            flag = " lower"
        print(f"| {r.name()} | {r.ir:.1f} | {ir:.1f} | {change:+.1f} %{flag} |", flush=True)

    for r, out in broken:
        print(f"\nbudget_check: {r.name()}: `{' '.join(r.command())}` failed:\n{out}", file=sys.stderr)
    if do_update:
        update(table, figures, rustc)
        print(f"\nbudget_check: {table}: {len(figures)} figures written (rustc {rustc})")
        return 1 if broken else 0
    for r, ir, out in failed:
        print(f"\nbudget_check: {r.name()} takes {ir:.1f} Ir/packet, over its budget of {r.ir:.1f} "
              f"by more than {tolerance} %. Where they go:\n")
        print(out)
    lower = [r for r in picked if (f := figures.get((r.mode, r.kind, r.flows, r.capacity)))
             and f < r.ir * (1 - tolerance / 100)]
    if lower:
        print(f"\nbudget_check: {len(lower)} row(s) came out lower: lower the table "
              "(perf/budget-check.sh --update) in the commit that made them so")
    if broken:
        return 1
    if failed and same_compiler:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
