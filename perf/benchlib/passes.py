"""The matrix measured in passes (`--repeat N`, one pass by default). In each
pass every packet set gets its testpmd io and macswap rows (the ceilings)
just before its Spillway rows, and each Spillway row's ratios are to the
ceilings of its own pass. Rows print as they complete; bench.py reports the
median of the passes per row (report.median_run)."""

from __future__ import annotations

from .cases import Case
from .log import log
from .machine import ProcAccount
from .measurement import Result, RunFailed
from .report import fmt_row, print_row
from .runner import Runner


def set_ratios(r: Result, ceil: dict[str, Result]) -> None:
    """`r`'s packets per CPU-second relative to the ceilings measured."""
    if "io" in ceil:
        r.ratio_io = ceil["io"].ns_per_pkt / r.ns_per_pkt
    if "macswap" in ceil:
        r.ratio_macswap = ceil["macswap"].ns_per_pkt / r.ns_per_pkt


class Passes:
    """Runs the passes; `runs` keeps per row label one result per pass
    (ratios filled in within the pass), `failures` what failed."""

    def __init__(self, args, runner: Runner, account: ProcAccount):
        self.args = args
        self.runner = runner
        self.account = account
        self.runs: dict[str, list[Result]] = {}
        self.failures: list[str] = []

    def run(self, cases: list[Case], skipped: list[Case]) -> None:
        for rep in range(max(1, self.args.repeat)):
            if self.args.repeat > 1:
                log(f"pass {rep + 1} of {self.args.repeat}")
            self.one_pass(rep, cases, skipped)

    def one_pass(self, rep: int, cases: list[Case], skipped: list[Case]) -> None:
        ceilings: dict[tuple, dict[str, Result]] = {}
        for c in cases:
            key = (c.kind, c.flows, c.workers)
            if key not in ceilings:
                ceilings[key] = self.ceilings(key)
            if c in skipped:
                if rep == 0:
                    print_row([c.label(), "", "", "", "", "", "", "", "", f"skipped: needs {c.workers} CPUs"])
                continue
            builds = [("spillway", "")] + ([("compare", " [B]")] if self.args.compare else [])
            # A and B take turns going first, so neither always runs right after testpmd.
            if rep % 2:
                builds.reverse()
            for binary_key, suffix in builds:
                self.spillway_row(c, binary_key, suffix, ceilings[key])
        # Ceiling rows relative to io, for reading the table.
        for ceil in ceilings.values():
            for r in ceil.values():
                set_ratios(r, ceil)

    def ceilings(self, key: tuple) -> dict[str, Result]:
        """testpmd's io and macswap rows on the packet set of `key` (kind, flows, workers)."""
        ceil: dict[str, Result] = {}
        for fwd in ("io", "macswap"):
            try:
                r = self.runner.run_testpmd(fwd, *key)
            except RunFailed as e:
                self.failures.append(f"testpmd {fwd} {key}: {e}")
                log(f"FAILED: testpmd {fwd} {key}: {e}")
                continue
            ceil[fwd] = r
            self.record(r)
        return ceil

    def spillway_row(self, c: Case, binary_key: str, suffix: str, ceil: dict[str, Result]) -> None:
        try:
            r = self.runner.run_spillway(c, binary_key, suffix)
        except RunFailed as e:
            self.failures.append(f"{c.label()}{suffix}: {e}")
            log(f"FAILED: {c.label()}{suffix}: {e}")
            return
        set_ratios(r, ceil)
        if r.established_share is not None:
            r.established_ratio_io = r.ratio_io
        self.record(r)

    def record(self, r: Result) -> None:
        """Keeps a row of this pass and prints it."""
        self.runs.setdefault(r.label, []).append(r)
        print_row(fmt_row(r))
        self.account.update()
