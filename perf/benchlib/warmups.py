"""Warm-ups that a run needs before its window (each a `prepare` for
`Runner.measure`, called once the forwarding threads exist):
`GatewayWarmup` makes the gateway return case's flow entries in replay's
order through a FIFO port; `SynFloodWarmup` lets the synflood case's
established flows in under a budget, then lifts it so that the flood fills
the table, and `synflood_verdict` counts the established entries lost."""

from __future__ import annotations

import ipaddress
import json
import os
import select
import subprocess
import time
from pathlib import Path

from .cases import SYNFLOOD_SYNS_PER_ACK
from .machine import sh
from .measurement import Result, RunFailed, parse_spillway_stats
from .pcap import read_pcap


class GatewayWarmup:
    """Feeds the gateway return case's warm-up port, a FIFO net_pcap reads
    as a pcap file: the endpoint's gratuitous ARP (its MAC resolves), then,
    once the worker has the snapshot with it, the forward set in order, so
    that every flow's entry is made in replay's order with replay's seed,
    i.e. with the cookies the answers carry; a second time a second later,
    which confirms the entries (M15). Then end of file. net_pcap reads a
    burst of 32 frames in one blocking call: frames go in by 32."""

    def __init__(self, fifo: Path, forward_set: Path, spillway: Path, ctl: Path):
        self.header, records = read_pcap(forward_set)
        self.garp = records[0]
        self.forward = b"".join(records)
        self.spillway = spillway
        self.ctl = ctl
        self.flows = (len(records) - 1) // 2
        os.mkfifo(fifo)
        # Read-write: neither this open nor DPDK's blocks on the other.
        self.fd: int | None = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
        self.write(self.header + self.garp * 32)

    def write(self, data: bytes, timeout: float = 30.0) -> None:
        view = memoryview(data)
        deadline = time.monotonic() + timeout
        while view:
            left = deadline - time.monotonic()
            if left <= 0 or self.fd is None:
                raise RunFailed("the gateway warm-up FIFO is not being read")
            select.select([], [self.fd], [], left)
            try:
                n = os.write(self.fd, view)
            except BlockingIOError:
                continue
            view = view[n:]

    def stats(self) -> dict[str, int]:
        return parse_spillway_stats(sh([str(self.spillway), "stats", "--socket", str(self.ctl)]))

    def __call__(self, _p: subprocess.Popen) -> None:
        # The worker has the first ARP; the management core resolves the
        # endpoint at its next tick. Each round lets the blocked worker
        # loop once and take the newest snapshot.
        time.sleep(1.0)
        for _ in range(4):
            self.write(self.garp * 32)
            time.sleep(0.25)
        self.write(self.forward)
        time.sleep(1.1)
        self.write(self.forward)
        self.close()
        time.sleep(0.2)
        st = self.stats()
        if st.get("drop not_ours") or st.get("new", 0) != self.flows:
            raise RunFailed(
                f"gateway warm-up: {st.get('new', 0)} flow entries for {self.flows} flows, "
                f"{st.get('drop not_ours', 0)} dropped as not_ours (was the endpoint resolved?)"
            )

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def synflood_client(i: int) -> tuple[str, int]:
    """Established flow `i` of a synflood set: packetset's `client()` for IPv4."""
    a = i & ((1 << 22) - 1)
    port = 1024 + ((i >> 22) + ((a * 7919) & 0xFFFFFFFF)) % (65536 - 1024)
    return str(ipaddress.IPv4Address(0x6440_0000 + a)), port


class SynFloodWarmup:
    """The synflood row's warm-up (a `prepare` for Runner.measure). The
    daemon starts with a new-entry budget of one per established flow per
    second and worker, so that the ACKs make their entries while the SYNs
    cannot fill the table. Once every established flow's entry is confirmed
    (seen in a later second than it was made: from then on no insert may
    displace it, crates/flowtable), it rewrites the configuration without
    the budget and reloads: every SYN then makes an entry, the table fills
    with half-open ones and the flood competes for its slots. That is the
    state of a real flood: the connections were established before it.

    `established()` lists the established entries (`spillway flows --state
    established`); the row compares each flow's entry (its cookie, drawn
    at random per entry) from the budget's lift to the window's end: an
    entry displaced and made again would carry another one."""

    def __init__(
        self, conf: Path, unlimited: str, spillway: Path, ctl: Path, flows: int, defended: bool = False
    ):
        self.conf = conf
        self.unlimited = unlimited
        # The lifted configuration keeps the default budget: its new flows stay over it.
        self.defended = defended
        self.spillway = spillway
        self.ctl = ctl
        self.keys = [synflood_client(i) for i in range(flows)]
        self.before_flood: dict | None = None

    def flows_json(self, *args: str) -> dict:
        cmd = [str(self.spillway), *args, "--socket", str(self.ctl), "--json"]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        try:
            answer = json.loads(r.stdout)
        except ValueError:
            answer = None
        if not isinstance(answer, dict) or not answer.get("ok"):
            raise RunFailed(f"`{' '.join(cmd[1:])}` failed: {(r.stdout + r.stderr).strip()[-300:]}")
        return answer

    def established(self) -> dict[tuple[str, int], tuple[str, bool]]:
        """(client, port) -> (cookie, unconfirmed) of the established flows' entries."""
        answer = self.flows_json("flows", "--state", "established", "--limit", "100000")
        try:
            entries = {
                (f["client"], int(f["client_port"])): (str(f["cookie"]), bool(f["unconfirmed"]))
                for f in answer["flows"]
            }
        except (KeyError, TypeError, ValueError) as e:
            raise RunFailed(f"spillway flows --json: no {e} in its entries") from None
        return {k: entries[k] for k in self.keys if k in entries}

    def __call__(self, _p: subprocess.Popen) -> None:
        deadline = time.monotonic() + 20
        while True:
            est = self.established()
            confirmed = sum(1 for _, unconfirmed in est.values() if not unconfirmed)
            if confirmed == len(self.keys):
                break
            if time.monotonic() > deadline:
                raise RunFailed(
                    f"synflood warm-up: {confirmed} of {len(self.keys)} established flows had a "
                    "confirmed entry after 20 s"
                )
            time.sleep(0.3)
        self.before_flood = est
        generation = self.generation()
        self.conf.write_text(self.unlimited)
        self.flows_json("reload")
        # The reload builds a snapshot off the management loop: wait until
        # the workers have it, so that the warm-up and the window are all flood.
        deadline = time.monotonic() + 30
        while self.generation() <= generation:
            if time.monotonic() > deadline:
                raise RunFailed("synflood warm-up: the reload lifting the budget did not go live in 30 s")
            time.sleep(0.1)
        if self.defended:
            return
        # A worker refills its budget at the next second: until then the
        # old one holds. Wait until no new flow is over it any more.
        last = None
        deadline = time.monotonic() + 10
        while True:
            st = parse_spillway_stats(sh([str(self.spillway), "stats", "--socket", str(self.ctl)]))
            if "over budget" not in st:
                raise RunFailed("synflood warm-up: `spillway stats` has no `over budget` count")
            if st["over budget"] == last:
                break
            if time.monotonic() > deadline:
                raise RunFailed("synflood warm-up: new flows still over the budget 10 s after the reload")
            last = st["over budget"]
            time.sleep(0.6)

    def generation(self) -> int:
        answer = self.flows_json("status")
        if not isinstance(answer.get("generation"), int):
            raise RunFailed("spillway status --json: no generation")
        return answer["generation"]

    def close(self) -> None:
        pass


def synflood_verdict(r: Result, start, end, flows: int, before_flood) -> None:
    """Fills in a synflood row's established figures; the eviction count is
    every established flow whose entry at the window's end is missing or not
    the one it had when the flood began."""
    if start is None or end is None or before_flood is None:
        raise RunFailed("synflood: the established entries were not read before and after the window")
    evicted = sum(1 for k, (cookie, _) in before_flood.items() if end.get(k, ("", True))[0] != cookie)
    evicted += flows - len(before_flood)
    r.established_share = 1 / (1 + SYNFLOOD_SYNS_PER_ACK)
    r.established_mpps = r.mpps * r.established_share
    r.established_evicted = evicted
    unconfirmed = sum(1 for _, u in end.values() if u)
    if unconfirmed:
        r.note = "; ".join(x for x in (r.note, f"{unconfirmed} established entries unconfirmed") if x)
