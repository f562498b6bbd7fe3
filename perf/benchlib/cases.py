"""What the harness measures: the cases (one Spillway row each), the named
matrices of them, the constants the packet sets and configurations share,
and the sizing that follows from a case (packets in its set, mbufs, DPDK
memory, flow-table capacity).

Read `Case` and `matrix()` first; the sizing functions below them are what
the runner asks before it starts a process."""

from __future__ import annotations

from dataclasses import dataclass


MODES = ["l2dsr", "ipip", "gue", "gre", "geneve"]
# packetset's synflood sets: per flow, 16 rounds of its ACK each followed by
# 2 SYNs from spoofed sources (perf/packetset/src/lib.rs, SYNFLOOD_*).
SYNFLOOD_ROUNDS = 16
SYNFLOOD_SYNS_PER_ACK = 2
# Gateway cases (M30-M32): appliances behind one gateway rule, and the seed
# of the flow cookies shared by `spillway replay` and the daemon.
GATEWAY_APPLIANCES = 4
GATEWAY_ENDPOINT = "10.0.0.1"
GATEWAY_ENDPOINT_MAC = "02:00:00:00:00:fe"  # packetset's frames' source
GATEWAY_ENDPOINT_ID = 0x1
GATEWAY_COOKIE_SEED = 0x6761_7465_7761_7921
GENEVE_PORT = 6081
FLOW_COUNTS = [1, 4096, 65536, 1048576]
VIP4 = "198.18.10.10"
VIP6 = "2001:db8:18::10"
DPORT = 80
# What an mbuf of the default size (2048 + 128 headroom) costs in a pool on
# hugepages, with its header and the mempool's per-object overhead, rounded up.
MBUF_BYTES = 2496


def net_pcap_mac(index: int) -> str:
    """The MAC DPDK's pcap driver gives its `index`-th device of a process
    (net_pcap0, net_pcap1 in EAL order; it cannot be changed). The sets'
    frames are addressed to it and the configurations name it: the data
    plane drops frames to any other unicast MAC (M55, `l2_foreign_dst`), and
    `spillway replay`, which makes the return set, has no device to ask. A
    driver that assigned others would make every row fail as forwarding
    nothing, not measure drops."""
    return f"02:70:63:61:70:{index:02x}"


UPLINK_MAC = net_pcap_mac(0)
APPLIANCE_PORT_MAC = net_pcap_mac(1)


# ---------------------------------------------------------------------------
# Cases


def human_flows(n: int) -> str:
    return f"{n:,}"


@dataclass(frozen=True)
class Case:
    """One Spillway measurement."""

    mode: str  # a delivery mode, or "gateway"
    kind: str = "ack"  # ack | syn | udp | v6 | churn | synflood; gateway: forward | return
    flows: int = 4096
    endpoints: int = 8
    workers: int = 1

    def label(self) -> str:
        return (
            f"{self.mode} {self.kind} {human_flows(self.flows)} flows "
            f"{self.endpoints} ep {self.workers}w"
        )


def matrix(name: str) -> list[Case]:
    """The cases of a named matrix, in run order (grouped by packet set)."""
    if name == "quick":
        return [Case("gue")]
    # Gateway mode's two directions, 4,096 flows to 4 appliances.
    gateway = [Case("gateway", k, 4096, GATEWAY_APPLIANCES) for k in ("forward", "return")]
    cases: list[Case] = []
    if name == "default":
        # Every mode over every flow count (established flows, 8 endpoints,
        # one worker): the plot. Then one variation per other axis.
        for flows in FLOW_COUNTS:
            for mode in MODES:
                cases.append(Case(mode, "ack", flows))
        cases += [
            Case("gue", "syn", 4096),
            Case("gue", "syn", 1048576),
            Case("l2dsr", "syn", 4096),
            Case("gue", "churn", 4096),
            # A SYN flood from spoofed sources beside 4,096 established flows.
            Case("gue", "synflood", 4096),
            Case("gue", "churn", 65536),
            Case("l2dsr", "churn", 65536),
            Case("gue", "udp", 4096),
            Case("gue", "v6", 4096),
            Case("ipip", "v6", 4096),
            Case("gue", "v6", 1048576),
            Case("gue", "ack", 4096, endpoints=1000),
            Case("gue", "ack", 1048576, endpoints=1000),
            Case("gue", "ack", 4096, workers=2),
            Case("gue", "ack", 1048576, workers=2),
            *gateway,
        ]
    elif name == "full":
        for workers in (1, 2):
            for kind in ("ack", "syn", "churn", "udp", "v6"):
                for flows in FLOW_COUNTS:
                    for endpoints in (8, 1000):
                        for mode in MODES:
                            cases.append(Case(mode, kind, flows, endpoints, workers))
        cases += gateway
    else:
        raise SystemExit(f"unknown matrix {name!r}")
    # Group by packet set so each set's testpmd ceiling runs next to its cases.
    order = {}
    for c in cases:
        order.setdefault((c.kind, c.flows, c.workers), len(order))
    return sorted(cases, key=lambda c: order[(c.kind, c.flows, c.workers)])


# ---------------------------------------------------------------------------
# Sizing: what a case's run needs


def packets_in_set(kind: str, flows: int) -> int:
    if kind == "forward":
        return 2 * flows + 1  # the endpoint's gratuitous ARP, both directions
    if kind == "synflood":
        return SYNFLOOD_ROUNDS * (1 + SYNFLOOD_SYNS_PER_ACK) * flows
    return 2 * flows if kind in ("churn", "return") else flows


def mbufs_for(packets: int, workers: int) -> int:
    # net_pcap's infinite_rx copies the whole set into mbufs of the port's
    # pool at queue setup; RX bursts then allocate fresh ones.
    return packets + 16383 + 4096 * workers


def memory_mb(mbufs: int, mem: str) -> int:
    """EAL memory (-m) for a pool of `mbufs` plus everything else DPDK
    allocates. On 4 KB pages (`--no-huge`) a pool never lets an mbuf span
    two pages, so each default-sized mbuf (2,368 bytes with its headers)
    takes a page of its own."""
    per_mbuf = 4096 if mem == "4k" else MBUF_BYTES
    return (mbufs * per_mbuf) // (1 << 20) + 384


def table_capacity(c: "Case") -> int:
    """The flow table's capacity for a case: room for twice its flows (gateway: fixed)."""
    if c.mode == "gateway":
        return 65536
    capacity = 65536
    while capacity < 2 * c.flows:
        capacity *= 2
    return capacity


def table_mb(c: "Case") -> int:
    """MB of DPDK heap the daemon's flow table takes (crates/flowtable: 512-byte buckets
    of 7 entries, 25 % headroom, padded to whole 2 MB pages), plus one page of slack."""
    buckets = -(-table_capacity(c) * 5 // 4 // 7)
    return -(-buckets * 512 // (2 << 20)) * 2 + 2
