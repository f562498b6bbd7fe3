"""The Spillway configurations the harness writes for a case: a delivery
mode's service (`spillway_config`) or a gateway rule (`gateway_config`),
on net_pcap ports whose MACs the packet sets are addressed to."""

from __future__ import annotations

import json
from pathlib import Path

from .cases import (
    APPLIANCE_PORT_MAC,
    DPORT,
    GATEWAY_ENDPOINT,
    GATEWAY_ENDPOINT_ID,
    GATEWAY_ENDPOINT_MAC,
    UPLINK_MAC,
    VIP4,
    VIP6,
    Case,
    table_capacity,
)
from .machine import cpus_online


def spillway_config(
    c: Case, eal: list[str], mbufs: int, cores: list[int], ctl: Path, metrics_port: int,
    budget: int | None = 4294967295,
) -> str:
    if c.mode == "gateway":
        return gateway_config(c, eal, mbufs, cores, ctl, metrics_port)
    v6 = c.kind == "v6"
    vip = VIP6 if v6 else VIP4
    proto = "UDP" if c.kind == "udp" else "TCP"
    table = 65537 if c.endpoints < 500 else 655373
    capacity = table_capacity(c)
    eps = []
    for i in range(c.endpoints):
        addr = f"fd00:0:1::{i + 1:x}" if v6 else f"10.0.{1 + i // 250}.{1 + i % 250}"
        ep = f'{{ address = "{addr}"'
        if c.mode == "l2dsr":
            ep += f', mac = "02:00:00:01:{(i >> 8) & 0xff:02x}:{i & 0xff:02x}"'
        eps.append(ep + " }")
    delivery = {
        "l2dsr": 'delivery = "l2dsr"',
        "ipip": 'delivery = "ipip"',
        "gue": 'delivery = "gue"\ngue_port = 6080',
        "gre": 'delivery = "gre"',
        "geneve": 'delivery = "geneve"',
    }[c.mode]
    q = json.dumps  # TOML basic strings are JSON strings
    ep_lines = ",\n  ".join(eps)
    return f"""# Written by perf/bench.py for: {c.label()}
[node]
name = "bench"
region = "bench"
zone = "bench-a"
# Exit at the first SIGINT: a benchmark has no routes to withdraw (M39).
shutdown_drain = "0s"

[dataplane]
management_core = {cpus_online()[0]}
worker_cores = {json.dumps(cores)}
eal_args = [{", ".join(q(a) for a in eal)}]
mbufs = {mbufs}
burst_size = 32
queue_descriptors = 1024
flow_table_capacity = {capacity}
# Every new flow gets an entry (the stateful path is what is measured; the
# new-entry budget is a flood defence, shown by perf/flood.sh; synflood rows
# start with a small one, see SynFloodWarmup).
{"" if budget is None else f"new_flow_budget = {budget}"}

[[ports]]
name = "uplink"
device = "net_pcap0"
role = "uplink"
mac = "{UPLINK_MAC}"
# Endpoints are off these subnets: reached through gateway_mac. Nothing on
# a net_pcap port answers ARP/NDP, so an on-link endpoint, left to
# neighbour resolution (M47), would get nothing.
addresses = ["10.0.0.2/24", "fd00::2/64"]
gateway = "10.0.0.1"
gateway_mac = "02:00:00:00:00:fe"

[[forwarding_rules]]
name = "bench"
vips = [{q(vip)}]
protocol = "{proto}"
ports = {DPORT}
backend_service = "bench"

[[backend_services]]
name = "bench"
{delivery}
maglev_table_size = {table}

[[backend_services.groups]]
name = "bench-a"
region = "bench"
zone = "bench-a"
endpoints = [
  {ep_lines},
]

[metrics]
listen = "127.0.0.1:{metrics_port}"

[control]
socket = {q(str(ctl))}
watch_config = false
"""


def gateway_config(c: Case, eal: list[str], mbufs: int, cores: list[int], ctl: Path, metrics_port: int) -> str:
    """A gateway rule (M31) for packetset's gateway endpoint, to
    `c.endpoints` appliances in Geneve (off the ports' subnets, reached
    through gateway_mac: nothing answers ARP on net_pcap; the endpoint itself
    is resolved from its gratuitous ARP). The return case has a second port
    for the appliances, whose answers arrive there."""
    q = json.dumps
    two_ports = c.kind == "return"
    net = "10.1.1" if two_ports else "10.0.1"
    eps = ",\n  ".join(f'{{ address = "{net}.{11 + i}" }}' for i in range(c.endpoints))
    backend_port = (
        f"""
[[ports]]
name = "appliances"
device = "net_pcap1"
role = "backend"
mac = "{APPLIANCE_PORT_MAC}"
addresses = ["10.1.0.2/24"]
gateway = "10.1.0.1"
gateway_mac = "02:00:00:00:00:fd"
"""
        if two_ports
        else ""
    )
    return f"""# Written by perf/bench.py for: {c.label()}
[node]
name = "bench"
region = "bench"
zone = "bench-a"
# Exit at the first SIGINT: a benchmark has no routes to withdraw (M39).
shutdown_drain = "0s"

[dataplane]
management_core = {cpus_online()[0]}
worker_cores = {json.dumps(cores)}
eal_args = [{", ".join(q(a) for a in eal)}]
mbufs = {mbufs}
burst_size = 32
queue_descriptors = 1024
flow_table_capacity = 65536
new_flow_budget = 4294967295

[[ports]]
name = "uplink"
device = "net_pcap0"
role = "uplink"
mac = "{UPLINK_MAC}"
addresses = ["10.0.0.2/24"]
gateway = "{GATEWAY_ENDPOINT}"
gateway_mac = "{GATEWAY_ENDPOINT_MAC}"
{backend_port}
[[forwarding_rules]]
name = "bench"
vips = [{q(VIP4)}]
protocol = "L3_DEFAULT"
mode = "gateway"
gateway_endpoints = [{{ address = "{GATEWAY_ENDPOINT}", id = {GATEWAY_ENDPOINT_ID:#x} }}]
backend_service = "bench"

[[backend_services]]
name = "bench"
delivery = "geneve"
maglev_table_size = 65537

[[backend_services.groups]]
name = "bench-a"
region = "bench"
zone = "bench-a"
endpoints = [
  {eps},
]

[metrics]
listen = "127.0.0.1:{metrics_port}"

[control]
socket = {q(str(ctl))}
watch_config = false
"""
