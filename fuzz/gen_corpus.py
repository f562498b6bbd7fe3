#!/usr/bin/env python3
"""Writes the small seed corpus under fuzz/corpus/<target>/ from the scapy-built vectors in
crates/wire/testdata/vectors.txt (run gen_vectors.py there first)."""
import hashlib
import os

from scapy.all import ARP, ESP, GRE, ICMP, IP, TCP, UDP, Ether, IPv6
from scapy.layers.inet6 import _ICMPv6
from scapy.contrib.geneve import GENEVE
from scapy.layers.vxlan import VXLAN

HERE = os.path.dirname(os.path.abspath(__file__))
VEC = os.path.join(HERE, "..", "crates", "wire", "testdata", "vectors.txt")
vectors = {}
for line in open(VEC):
    if line.startswith(("#", "hash")):
        continue
    name, hx = line.split()
    vectors[name] = bytes.fromhex(hx)


def seed(target, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, hashlib.sha1(data).hexdigest()[:16]), "wb") as f:
        f.write(data)


for name, b in vectors.items():
    seed("frame", b)
    # Frames neighbour resolution reads: ARP, solicitations, advertisements.
    if name.startswith(("arp", "ns_", "na_", "nbr_")):
        seed("neighbour", b)
    if name.startswith("vrrp"):
        seed("vrrp", b)
    p = Ether(b)
    if IP in p:
        seed("ipv4", bytes(p[IP]))
        # frag: a big-endian length limit, then the IPv4 packet (DF cleared, checksum redone).
        q = p[IP].copy()
        q.flags = 0
        del q.chksum
        seed("frag", bytes([0x00, 0x30]) + bytes(q))
    if IPv6 in p:
        seed("ipv6", bytes(p[IPv6]))
    for layer in (TCP, UDP):
        if layer in p:
            seed("tcp_udp", bytes(p[layer]))
    for layer in (ICMP, _ICMPv6):
        if layer in p:
            seed("icmp", bytes(p[layer]))
    for layer in (ARP, ESP, VXLAN):
        if layer in p:
            seed("arp_esp_vxlan", bytes(p[layer]))
    if GRE in p:
        seed("gre_gue", bytes(p[GRE]))
    if UDP in p and p[UDP].dport == 6080:
        seed("gre_gue", bytes(p[UDP].payload))
    if GENEVE in p:
        seed("geneve", bytes(p[GENEVE]))
        seed("nva", bytes(p[GENEVE]))
    if name.startswith(("encap_", "geneve_", "gre_", "gue_", "vxlan")):
        seed("decap", b)
    if name.startswith(("inner", "flow", "eth_", "tcp_", "ipv")):
        for sel in (0x00, 0x03, 0x05, 0x0e, 0x1f, 0x47, 0xc6):
            seed("encap_roundtrip", bytes([sel]) + b)
    # ndp: mode byte 0/2 + a bare ICMPv6 message, mode 1 + a whole frame.
    if name.startswith(("ns_", "na_")):
        seed("ndp", bytes([1]) + b)
        msg = bytes(p[IPv6].payload)
        seed("ndp", bytes([0]) + msg)
        seed("ndp", bytes([2]) + msg)
    # tcp_reset: mode byte 0 (as is) / 1 (checksums fixed up) + a whole frame.
    if TCP in p:
        seed("tcp_reset", bytes([0]) + b)
        seed("tcp_reset", bytes([1]) + b)
    # too_big: mode byte 0 / 1 (IPv4 checksum fixed up), a big-endian MTU, a whole frame.
    if IP in p or IPv6 in p:
        seed("too_big", bytes([1, 0x05, 0xc4]) + b)
        seed("too_big", bytes([0, 0x00, 0x40]) + b)
    # gateway: sel (endpoint, appliance, options), the first frame's length, an endpoint ID (8
    # bytes) and a cookie (4), then a frame from a gateway endpoint and one an appliance returns.
    if name.startswith(("inner", "flow", "tcp_", "ipv", "eth_")) and len(b) < 256:
        for sel in (0x01, 0x02, 0xc1, 0xc6, 0xa9, 0x91, 0x8f):
            seed("gateway", bytes([sel, len(b)]) + (1).to_bytes(8, "big") + bytes(4) + b + b)
print("corpus written")
