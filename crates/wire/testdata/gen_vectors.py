#!/usr/bin/env python3
"""Generates crates/wire/testdata/vectors.txt with scapy, an implementation independent of
the `wire` crate. Every packet (and every expected encapsulation output) is built and
checksummed by scapy; the flow-hash vectors come from the Python transcription of the
documented `spillway-flow-v1` algorithm below.

Run from anywhere:  python3 crates/wire/testdata/gen_vectors.py
Format: one vector per line, `<name> <hex>`; `hash` lines hold flow-hash vectors.
"""
import ipaddress
import os

from scapy.all import (ARP, ESP, GRE, ICMP, IP, UDP, TCP, Dot1AD, Dot1Q, Ether,
                       ICMPv6DestUnreach, ICMPv6EchoRequest, ICMPv6ND_NA, ICMPv6ND_NS,
                       ICMPv6NDOptDstLLAddr, ICMPv6NDOptSrcLLAddr, ICMPv6PacketTooBig,
                       ICMPv6TimeExceeded, IPOption_Router_Alert, IPv6,
                       IPv6ExtHdrDestOpt, IPv6ExtHdrFragment, IPv6ExtHdrHopByHop,
                       IPv6ExtHdrRouting, Padding, Raw, fragment, fragment6)
from scapy.contrib.geneve import GENEVE, GeneveOptions
from scapy.layers.vrrp import VRRPv3
from scapy.layers.vxlan import VXLAN

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "vectors.txt")

CLIENT_MAC = "02:00:00:00:00:01"
LB_MAC = "02:00:00:00:00:02"
BE_MAC = "02:00:00:00:00:03"
CLIENT4, VIP4, LB4, BE4, ROUTER4 = "192.0.2.10", "198.51.100.1", "10.0.0.1", "10.0.1.7", "203.0.113.9"
CLIENT6, VIP6, LB6, BE6, ROUTER6 = "2001:db8::10", "2001:db8:100::1", "fd00::1", "fd00:1::7", "2001:db8:ff::9"

vectors = []


def add(name, pkt):
    vectors.append((name, bytes(pkt).hex()))


# ---------------------------------------------------------------- headers
add("eth_qinq_ipv4_tcp", Ether(dst=LB_MAC, src=CLIENT_MAC) / Dot1AD(vlan=100, prio=3) / Dot1Q(vlan=200)
    / IP(src=CLIENT4, dst=VIP4, ttl=64, id=1) / TCP(sport=40000, dport=80, flags="S", seq=1000))
add("eth_vlan_ipv6_udp", Ether(dst=LB_MAC, src=CLIENT_MAC) / Dot1Q(vlan=42)
    / IPv6(src=CLIENT6, dst=VIP6, hlim=64) / UDP(sport=5353, dport=53) / Raw(b"query"))
add("arp_request", Ether(dst="ff:ff:ff:ff:ff:ff", src=CLIENT_MAC)
    / ARP(op=1, hwsrc=CLIENT_MAC, psrc=CLIENT4, hwdst="00:00:00:00:00:00", pdst=VIP4))
add("ipv4_options_udp", Ether(dst=LB_MAC, src=CLIENT_MAC)
    / IP(src=CLIENT4, dst=VIP4, ttl=17, tos=0xb8, id=0xbeef, flags="DF", options=[IPOption_Router_Alert()])
    / UDP(sport=1234, dport=5678) / Raw(b"payload!"))
frags = fragment(IP(src=CLIENT4, dst=VIP4, id=0x4242, ttl=64) / UDP(sport=3333, dport=4444) / Raw(b"A" * 120),
                 fragsize=48)
add("ipv4_frag_first", Ether(dst=LB_MAC, src=CLIENT_MAC) / frags[0])
add("ipv4_frag_later", Ether(dst=LB_MAC, src=CLIENT_MAC) / frags[1])
add("ipv4_udp_unfragmented", Ether(dst=LB_MAC, src=CLIENT_MAC)
    / IP(src=CLIENT4, dst=VIP4, ttl=64) / UDP(sport=3333, dport=4444) / Raw(b"A" * 8))
add("ipv6_ext_tcp", Ether(dst=LB_MAC, src=CLIENT_MAC) / IPv6(src=CLIENT6, dst=VIP6, hlim=33, tc=0x20, fl=0xabcde)
    / IPv6ExtHdrHopByHop() / IPv6ExtHdrRouting(addresses=["2001:db8::99"], segleft=0)
    / IPv6ExtHdrDestOpt() / TCP(sport=50000, dport=443, flags="PA", seq=7, ack=9, window=512) / Raw(b"tls"))
f6 = fragment6(IPv6(src=CLIENT6, dst=VIP6) / IPv6ExtHdrFragment(id=0xcafe) / UDP(sport=7777, dport=8888)
               / Raw(b"B" * 200), 120)
add("ipv6_frag_first", Ether(dst=LB_MAC, src=CLIENT_MAC) / f6[0])
add("ipv6_frag_later", Ether(dst=LB_MAC, src=CLIENT_MAC) / f6[1])
# RFC 6946 atomic fragment: offset 0, M = 0 -- a whole packet behind a fragment header.
add("ipv6_atomic_frag_tcp", Ether(dst=LB_MAC, src=CLIENT_MAC) / IPv6(src=CLIENT6, dst=VIP6)
    / IPv6ExtHdrFragment(id=0xa70, offset=0, m=0) / TCP(sport=40022, dport=22, flags="S", seq=1))
add("tcp_syn_opts", Ether(dst=LB_MAC, src=CLIENT_MAC) / IP(src=CLIENT4, dst=VIP4)
    / TCP(sport=40001, dport=80, flags="SEC", seq=0x01020304, window=64240,
          options=[("MSS", 1460), ("SAckOK", b""), ("WScale", 7), ("NOP", None)]))
add("tcp_rst_v6", Ether(dst=LB_MAC, src=CLIENT_MAC) / IPv6(src=CLIENT6, dst=VIP6) / TCP(sport=1, dport=2, flags="RA"))
add("icmp4_echo", Ether(dst=LB_MAC, src=CLIENT_MAC) / IP(src=CLIENT4, dst=VIP4) / ICMP(type=8, id=0x77, seq=1) / Raw(b"ping"))
add("icmp6_echo", Ether(dst=LB_MAC, src=CLIENT_MAC) / IPv6(src=CLIENT6, dst=VIP6) / ICMPv6EchoRequest(id=5, seq=6))
add("esp4", Ether(dst=LB_MAC, src=CLIENT_MAC) / IP(src=CLIENT4, dst=VIP4) / ESP(spi=0x11223344, seq=5) / Raw(b"\x00" * 16))
add("gre_key_seq_csum", Ether(dst=LB_MAC, src=CLIENT_MAC) / IP(src=LB4, dst=BE4)
    / GRE(chksum_present=1, key_present=1, seqnum_present=1, key=0xdeadbeef, seqence_number=42, proto=0x0800)
    / IP(src=CLIENT4, dst=VIP4) / UDP(sport=1, dport=2))
add("gue_v0_ipv4", Ether(dst=LB_MAC, src=CLIENT_MAC) / IP(src=LB4, dst=BE4) / UDP(sport=50001, dport=6080)
    / Raw(bytes([0x01, 4, 0x12, 0x34, 0, 0, 0, 0])) / IP(src=CLIENT4, dst=VIP4) / UDP(sport=1, dport=2))
add("geneve_opts", Ether(dst=LB_MAC, src=CLIENT_MAC) / IP(src=LB4, dst=BE4) / UDP(sport=50002, dport=6081)
    / GENEVE(proto=0x0800, vni=0x123456, critical=0, options=[
        GeneveOptions(classid=0x0139, type=1, length=2, data=(0x0102030405060708).to_bytes(8, "big")),
        GeneveOptions(classid=0xffff, type=0x80, length=0, data=b""),
        GeneveOptions(classid=0x0139, type=3, length=1, data=(0xa1b2c3d4).to_bytes(4, "big"))])
    / IP(src=CLIENT4, dst=VIP4) / TCP(sport=40000, dport=80))
add("vxlan", Ether(dst=LB_MAC, src=CLIENT_MAC) / IP(src=LB4, dst=BE4) / UDP(sport=50003, dport=4789)
    / VXLAN(vni=0xabcdef, flags=0x08) / Ether(dst=BE_MAC, src=LB_MAC) / IP(src=CLIENT4, dst=VIP4) / UDP(sport=1, dport=2))

# ---------------------------------------------------------------- ICMP errors (M13)
# An ICMP error sent to the VIP quotes a packet the backend sent from the VIP to the client.
orig4 = Ether(dst=LB_MAC, src=CLIENT_MAC) / IP(src=CLIENT4, dst=VIP4) / TCP(sport=40000, dport=80, flags="A")
add("flow4_client_to_vip", orig4)
quoted4 = bytes(IP(src=VIP4, dst=CLIENT4, ttl=60, flags="DF") / TCP(sport=80, dport=40000, flags="A") / Raw(b"x" * 100))
add("icmp4_frag_needed", Ether(dst=LB_MAC, src=CLIENT_MAC) / IP(src=ROUTER4, dst=VIP4)
    / ICMP(type=3, code=4, nexthopmtu=1400) / Raw(quoted4[:28]))
add("icmp4_time_exceeded", Ether(dst=LB_MAC, src=CLIENT_MAC) / IP(src=ROUTER4, dst=VIP4)
    / ICMP(type=11, code=0) / Raw(quoted4[:48]))
quoted4u = bytes(IP(src=VIP4, dst=CLIENT4) / UDP(sport=53, dport=5353) / Raw(b"answer"))
add("icmp4_port_unreachable", Ether(dst=LB_MAC, src=CLIENT_MAC) / IP(src=ROUTER4, dst=VIP4)
    / ICMP(type=3, code=3) / Raw(quoted4u))
add("flow4_udp_client_to_vip", Ether(dst=LB_MAC, src=CLIENT_MAC) / IP(src=CLIENT4, dst=VIP4) / UDP(sport=5353, dport=53))
orig6 = Ether(dst=LB_MAC, src=CLIENT_MAC) / IPv6(src=CLIENT6, dst=VIP6) / TCP(sport=50000, dport=443, flags="A")
add("flow6_client_to_vip", orig6)
quoted6 = bytes(IPv6(src=VIP6, dst=CLIENT6) / TCP(sport=443, dport=50000, flags="A") / Raw(b"y" * 1400))
add("icmp6_packet_too_big", Ether(dst=LB_MAC, src=CLIENT_MAC) / IPv6(src=ROUTER6, dst=VIP6)
    / ICMPv6PacketTooBig(mtu=1280) / Raw(quoted6[:1232]))
quoted6u = bytes(IPv6(src=VIP6, dst=CLIENT6) / IPv6ExtHdrDestOpt() / UDP(sport=53, dport=5353) / Raw(b"a"))
add("icmp6_dest_unreachable", Ether(dst=LB_MAC, src=CLIENT_MAC) / IPv6(src=ROUTER6, dst=VIP6)
    / ICMPv6DestUnreach(code=4) / Raw(quoted6u))
add("icmp6_time_exceeded", Ether(dst=LB_MAC, src=CLIENT_MAC) / IPv6(src=ROUTER6, dst=VIP6)
    / ICMPv6TimeExceeded() / Raw(quoted6[:60]))
add("flow6_udp_client_to_vip", Ether(dst=LB_MAC, src=CLIENT_MAC) / IPv6(src=CLIENT6, dst=VIP6) / UDP(sport=5353, dport=53))

# ---------------------------------------------------------------- encapsulation (M8, M30)
# Parameters the Rust test uses: outer MACs LB_MAC -> BE_MAC, TTL 64, DF set, flow hash
# 0x00000000_00012345 (IPv6 flow label 0x12345), UDP source port range 50000..=50000.
TTL, SPORT, FLOWLABEL = 64, 50000, 0x12345
EID, COOKIE = 0x1122334455667788, 0x99aabbcc
inner4 = (Ether(dst=LB_MAC, src=CLIENT_MAC) / IP(src=CLIENT4, dst=VIP4, ttl=63, tos=0x2a, id=0x1234)
          / TCP(sport=40000, dport=80, flags="PA", seq=1) / Raw(b"hello"))
inner4_tagged = (Ether(dst=LB_MAC, src=CLIENT_MAC) / Dot1Q(vlan=7)
                 / IP(src=CLIENT4, dst=VIP4, ttl=63, tos=0x2a, id=0x1234) / TCP(sport=40000, dport=80, flags="PA", seq=1) / Raw(b"hello"))
inner4_padded = (Ether(dst=LB_MAC, src=CLIENT_MAC) / IP(src=CLIENT4, dst=VIP4, ttl=63) / UDP(sport=9, dport=9)
                 / Raw(b"x") / Padding(b"\x00" * 17))
inner6 = (Ether(dst=LB_MAC, src=CLIENT_MAC) / IPv6(src=CLIENT6, dst=VIP6, hlim=63, tc=0x48)
          / UDP(sport=50000, dport=443) / Raw(b"quic!"))
add("inner4", inner4)
add("inner4_tagged", inner4_tagged)
add("inner4_padded", inner4_padded)
add("inner6", inner6)
ip4 = bytes(inner4[IP])
ip6 = bytes(inner6[IPv6])


def o4(proto, tos):
    return Ether(dst=BE_MAC, src=LB_MAC) / IP(src=LB4, dst=BE4, ttl=TTL, id=0, flags="DF", tos=tos, proto=proto)


def o6(nh, tc):
    return Ether(dst=BE_MAC, src=LB_MAC) / IPv6(src=LB6, dst=BE6, hlim=TTL, tc=tc, fl=FLOWLABEL, nh=nh)


def gopts():
    return [GeneveOptions(classid=0x0139, type=1, length=2, data=EID.to_bytes(8, "big")),
            GeneveOptions(classid=0x0139, type=3, length=1, data=COOKIE.to_bytes(4, "big"))]


add("encap_ipip_4in4", o4(4, 0x2a) / Raw(ip4))
add("encap_ipip_padded_4in4", o4(4, 0) / Raw(bytes(inner4_padded[IP])[:29]))
add("encap_ipip_6in6", o6(41, 0x48) / Raw(ip6))
add("encap_ipip_4in6", o6(4, 0x2a) / Raw(ip4))
add("encap_gre_4in4", o4(47, 0x2a) / GRE(key_present=1, key=0xfeedbeef, proto=0x0800) / Raw(ip4))
add("encap_gre_6in6", o6(47, 0x48) / GRE(proto=0x86DD) / Raw(ip6))
add("encap_gue_4in4", o4(17, 0x2a) / UDP(sport=SPORT, dport=6080, chksum=0) / Raw(ip4))
add("encap_gue_4in4_full", o4(17, 0x2a) / UDP(sport=SPORT, dport=6080) / Raw(ip4))
add("encap_gue_6in6", o6(17, 0x48) / UDP(sport=SPORT, dport=6080) / Raw(ip6))
add("encap_gue_4in6", o6(17, 0x2a) / UDP(sport=SPORT, dport=6080) / Raw(ip4))
add("encap_geneve_4in4", o4(17, 0x2a) / UDP(sport=SPORT, dport=6081, chksum=0)
    / GENEVE(proto=0x0800, vni=0, options=gopts()) / Raw(ip4))
add("encap_geneve_6in6", o6(17, 0x48) / UDP(sport=SPORT, dport=6081)
    / GENEVE(proto=0x86DD, vni=0, options=gopts()) / Raw(ip6))
add("encap_geneve_4in4_tagged", o4(17, 0x2a) / UDP(sport=SPORT, dport=6081, chksum=0)
    / GENEVE(proto=0x0800, vni=0, options=gopts()) / Raw(ip4))
# The NVA's return: MACs and IPs swapped, ports and options kept, TTL set to 63.
add("geneve_return_4in4", Ether(dst=LB_MAC, src=BE_MAC) / IP(src=BE4, dst=LB4, ttl=63, id=0, flags="DF", tos=0x2a, proto=17)
    / UDP(sport=SPORT, dport=6081, chksum=0) / GENEVE(proto=0x0800, vni=0, options=gopts()) / Raw(ip4))
add("geneve_return_6in6", Ether(dst=LB_MAC, src=BE_MAC) / IPv6(src=BE6, dst=LB6, hlim=63, tc=0x48, fl=FLOWLABEL, nh=17)
    / UDP(sport=SPORT, dport=6081) / GENEVE(proto=0x86DD, vni=0, options=gopts()) / Raw(ip6))
# The same with a checksummed UDP over IPv4, to show the swap keeps it valid.
add("encap_geneve_4in4_full", o4(17, 0x2a) / UDP(sport=SPORT, dport=6081)
    / GENEVE(proto=0x0800, vni=0, options=gopts()) / Raw(ip4))
add("geneve_return_4in4_full", Ether(dst=LB_MAC, src=BE_MAC) / IP(src=BE4, dst=LB4, ttl=63, id=0, flags="DF", tos=0x2a, proto=17)
    / UDP(sport=SPORT, dport=6081) / GENEVE(proto=0x0800, vni=0, options=gopts()) / Raw(ip4))

# ---------------------------------------------------------------- replies built in place
# Neighbor discovery for the balancer's IPv6 addresses (RFC 4861): each `ns_*` solicitation
# is answered by the `na_*` advertisement (R=0, S=1 unless DAD, O=1, target link-layer
# address option = LB_MAC, hop limit 255, IPv6 source = the target).
SN_VIP6 = "ff02::1:ff00:1"  # solicited-node group of VIP6
add("ns_vip6", Ether(dst="33:33:ff:00:00:01", src=CLIENT_MAC)
    / IPv6(src=CLIENT6, dst=SN_VIP6, hlim=255) / ICMPv6ND_NS(tgt=VIP6) / ICMPv6NDOptSrcLLAddr(lladdr=CLIENT_MAC))
add("na_vip6", Ether(dst=CLIENT_MAC, src=LB_MAC)
    / IPv6(src=VIP6, dst=CLIENT6, hlim=255) / ICMPv6ND_NA(R=0, S=1, O=1, tgt=VIP6)
    / ICMPv6NDOptDstLLAddr(lladdr=LB_MAC))
# A unicast reachability probe without a source link-layer option, VLAN-tagged: answered
# to the frame's source MAC, the tag kept, the frame grown by 8 bytes.
add("ns_nud_vlan", Ether(dst=LB_MAC, src=CLIENT_MAC) / Dot1Q(vlan=42)
    / IPv6(src=CLIENT6, dst=LB6, hlim=255) / ICMPv6ND_NS(tgt=LB6))
add("na_nud_vlan", Ether(dst=CLIENT_MAC, src=LB_MAC) / Dot1Q(vlan=42)
    / IPv6(src=LB6, dst=CLIENT6, hlim=255) / ICMPv6ND_NA(R=0, S=1, O=1, tgt=LB6)
    / ICMPv6NDOptDstLLAddr(lladdr=LB_MAC))
# Duplicate address detection: from ::, answered unsolicited to all nodes.
add("ns_dad", Ether(dst="33:33:ff:00:00:01", src=CLIENT_MAC)
    / IPv6(src="::", dst=SN_VIP6, hlim=255) / ICMPv6ND_NS(tgt=VIP6))
add("na_dad", Ether(dst="33:33:00:00:00:01", src=LB_MAC)
    / IPv6(src=VIP6, dst="ff02::1", hlim=255) / ICMPv6ND_NA(R=0, S=0, O=1, tgt=VIP6)
    / ICMPv6NDOptDstLLAddr(lladdr=LB_MAC))
# TCP resets for a service without backends (M14, RFC 9293 §3.10.7.1): each `rst_in_*`
# segment is answered by `rst_out_*` (MACs, addresses and ports swapped, options and payload
# gone, window 0, IPv4 TTL 64 / ID 0 / DF, IPv6 hop limit 64).
add("rst_in_syn4", Ether(dst=LB_MAC, src=CLIENT_MAC)
    / IP(src=CLIENT4, dst=VIP4, ttl=61, id=77, tos=0x10, options=[IPOption_Router_Alert()])
    / TCP(sport=40000, dport=80, flags="S", seq=1000, window=64240,
          options=[("MSS", 1460), ("SAckOK", b""), ("WScale", 7), ("NOP", None)]))
add("rst_out_syn4", Ether(dst=CLIENT_MAC, src=LB_MAC) / IP(src=VIP4, dst=CLIENT4, ttl=64, id=0, flags="DF")
    / TCP(sport=80, dport=40000, flags="RA", seq=0, ack=1001, window=0))
add("rst_in_ack4_qinq", Ether(dst=LB_MAC, src=CLIENT_MAC) / Dot1AD(vlan=100) / Dot1Q(vlan=200)
    / IP(src=CLIENT4, dst=VIP4, ttl=61) / TCP(sport=40001, dport=80, flags="PA", seq=5000, ack=0x89abcdef)
    / Raw(b"GET / HTTP/1.1\r\n\r\n"))
add("rst_out_ack4_qinq", Ether(dst=CLIENT_MAC, src=LB_MAC) / Dot1AD(vlan=100) / Dot1Q(vlan=200)
    / IP(src=VIP4, dst=CLIENT4, ttl=64, id=0, flags="DF")
    / TCP(sport=80, dport=40001, flags="R", seq=0x89abcdef, ack=0, window=0))
add("rst_in_fin4", Ether(dst=LB_MAC, src=CLIENT_MAC) / IP(src=CLIENT4, dst=VIP4)
    / TCP(sport=40002, dport=80, flags="F", seq=0xfffffffe, ack=0) / Raw(b"bye"))
add("rst_out_fin4", Ether(dst=CLIENT_MAC, src=LB_MAC) / IP(src=VIP4, dst=CLIENT4, ttl=64, id=0, flags="DF")
    / TCP(sport=80, dport=40002, flags="RA", seq=0, ack=(0xfffffffe + 3 + 1) & 0xffffffff, window=0))
add("rst_in_syn6", Ether(dst=LB_MAC, src=CLIENT_MAC) / IPv6(src=CLIENT6, dst=VIP6, hlim=60, tc=0x20, fl=0x12345)
    / TCP(sport=50000, dport=443, flags="S", seq=0xdeadbeef, options=[("MSS", 1440)]))
add("rst_out_syn6", Ether(dst=CLIENT_MAC, src=LB_MAC) / IPv6(src=VIP6, dst=CLIENT6, hlim=64)
    / TCP(sport=443, dport=50000, flags="RA", seq=0, ack=0xdeadbef0, window=0))
add("rst_in_ack6_vlan_ext", Ether(dst=LB_MAC, src=CLIENT_MAC) / Dot1Q(vlan=7)
    / IPv6(src=CLIENT6, dst=VIP6, hlim=60) / IPv6ExtHdrDestOpt()
    / TCP(sport=50001, dport=443, flags="A", seq=1, ack=2) / Raw(b"z" * 30))
add("rst_out_ack6_vlan_ext", Ether(dst=CLIENT_MAC, src=LB_MAC) / Dot1Q(vlan=7)
    / IPv6(src=VIP6, dst=CLIENT6, hlim=64) / TCP(sport=443, dport=50001, flags="R", seq=2, ack=0, window=0))

# ---------------------------------------------------------------- spillway-flow-v1
M64 = (1 << 64) - 1
K = [0x243F6A8885A308D3, 0x13198A2E03707344, 0xA4093822299F31D0,
     0x082EFA98EC4E6C89, 0x452821E638D01377, 0xBE5466CF34E90C6C]


def fold_mul(a, b):
    r = (a & M64) * (b & M64)
    return (r & M64) ^ (r >> 64)


def rotl(x, n):
    return ((x << n) | (x >> (64 - n))) & M64


def flow_hash(w, seed):
    a = fold_mul(w[0] ^ K[0], w[1] ^ K[1] ^ seed)
    b = fold_mul(w[2] ^ K[2], w[3] ^ K[3])
    c = fold_mul(w[4] ^ K[4], a ^ rotl(b, 32) ^ K[5])
    return fold_mul(c ^ K[0], K[5] ^ seed) ^ c


def mapped(addr):
    a = ipaddress.ip_address(addr)
    if a.version == 4:
        return ipaddress.IPv6Address("::ffff:" + addr).packed
    return a.packed


def pack(src, dst, sport, dport, proto, tuple_):
    s, d = mapped(src), mapped(dst)
    return [int.from_bytes(s[:8], "big"), int.from_bytes(s[8:], "big"),
            int.from_bytes(d[:8], "big"), int.from_bytes(d[8:], "big"),
            (sport << 48) | (dport << 32) | (proto << 24) | (tuple_ << 16)]


hashes = [
    (CLIENT4, VIP4, 40000, 80, 6, 5, 0),
    (CLIENT4, VIP4, 0, 0, 6, 3, 0),
    (CLIENT4, VIP4, 0, 0, 0, 2, 0),
    (CLIENT6, VIP6, 50000, 443, 17, 5, 0),
    (CLIENT6, VIP6, 50000, 443, 17, 5, 0xdeadbeefcafef00d),
    ("::", "::", 0, 0, 0, 2, 0),
    ("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 65535, 65535, 255, 5, M64),
]

# ---------------------------------------------------------------- neighbour resolution (M47)
add("nbr_arp_request", Ether(dst="ff:ff:ff:ff:ff:ff", src=LB_MAC)
    / ARP(op=1, hwsrc=LB_MAC, psrc=LB4, hwdst="00:00:00:00:00:00", pdst=BE4))
add("nbr_garp", Ether(dst="ff:ff:ff:ff:ff:ff", src=LB_MAC)
    / ARP(op=1, hwsrc=LB_MAC, psrc=VIP4, hwdst="00:00:00:00:00:00", pdst=VIP4))
add("nbr_ns", Ether(dst="33:33:ff:00:00:07", src=LB_MAC) / IPv6(src=LB6, dst="ff02::1:ff00:7", hlim=255)
    / ICMPv6ND_NS(tgt=BE6) / ICMPv6NDOptSrcLLAddr(lladdr=LB_MAC))
add("nbr_na", Ether(dst="33:33:00:00:00:01", src=LB_MAC) / IPv6(src=VIP6, dst="ff02::1", hlim=255)
    / ICMPv6ND_NA(tgt=VIP6, R=0, S=0, O=1) / ICMPv6NDOptDstLLAddr(lladdr=LB_MAC))

# ---------------------------------------------------------------- VRRPv3 (RFC 5798)
add("vrrp_v4", Ether(dst="01:00:5e:00:00:12", src=LB_MAC)
    / IP(src=LB4, dst="224.0.0.18", ttl=255, tos=0xc0, id=0, flags=0)
    / VRRPv3(vrid=51, priority=150, ipcount=2, adv=10, addrlist=[VIP4, "198.51.100.2"]))
add("vrrp_v6", Ether(dst="33:33:00:00:00:12", src=LB_MAC)
    / IPv6(src="fe80::ff:fe00:2", dst="ff02::12", hlim=255, tc=0xc0)
    / VRRPv3(vrid=7, priority=0, ipcount=1, adv=100, addrlist=[VIP6]))

with open(OUT, "w") as f:
    f.write("# generated by gen_vectors.py with scapy; do not edit\n")
    for name, hx in vectors:
        f.write(f"{name} {hx}\n")
    for (src, dst, sp, dp, pr, tu, seed) in hashes:
        w = pack(src, dst, sp, dp, pr, tu)
        f.write(f"hash {mapped(src).hex()} {mapped(dst).hex()} {sp} {dp} {pr} {tu} {seed:016x} "
                f"{flow_hash(w, seed):016x}\n")
print(f"wrote {len(vectors)} packet vectors and {len(hashes)} hash vectors to {OUT}")
