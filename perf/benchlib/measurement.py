"""What one measurement yields: the two samples around its window, the
result row made from them, the failure that ends a run, and Spillway's own
counters read from `spillway stats`."""

from __future__ import annotations

import re
from dataclasses import dataclass, field


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
