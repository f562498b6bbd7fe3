"""TRex stateless (STL) profile: traffic to a Spillway VIP for the bare-metal benchmarks.

One parametrised profile for every case of perf/BARE-METAL.md: 60-byte TCP ACKs (established
flows), TCP SYNs (new flows), UDP and IPv6, to the VIP, from 1 to millions of distinct client
flows. The generator side is the same for every delivery mode of the DUT (l2dsr, ipip, gre, gue,
geneve); --mode only selects the expected egress printed when the profile loads.

Load it on the port cabled to Spillway's uplink (port 0), e.g. in trex-console:

    start -f perf/trex/spillway_bench.py -p 0 -m 10mpps -d 30 -t --kind syn --flows 65536

(-t must come last; `-t --help` lists the tunables). Tunables:

    --kind   ack | syn | udp | ipv6 | ipv6-syn | ipv6-udp   (default ack)
    --flows  distinct client flows, 1 .. 8388608            (default 4096)
    --vip    VIP address; default 198.18.10.10, or 2001:db8::10 for the ipv6 kinds
    --port   VIP port; default 80 for TCP, 53 for UDP
    --size   frame length without the FCS (default 60; the minimum for IPv6 TCP is 74)
    --mode   l2dsr | ipip | gre | gre-key | gue | geneve: the DUT's delivery mode (default gue);
             only changes the expected egress frame length printed at load time
    --l4-csum hw | none: fix TCP/UDP checksums after rewriting the client address (NIC offload,
             default) or leave them stale (Spillway does not check them; IPv4 header checksums
             are always fixed)

Flow layout (the same as perf/pktgen/spillway.lua; `flow` below is its definition here): flow
i, 0 <= i < flows, has client address 10.0.0.1 + i (IPv6: 2001:db8:c::1 + i in the low 32 bits)
and source port 1235 + (i mod P), with P = gcd(flows, 4096). 1235 is the first source port
pktgen's range mode can send (its default port 1234, stepped once), so both generators send the
very same 5-tuples. Both field-engine variables start at flow 0 and step once per packet; since P
divides flows the pair repeats with period `flows`, so packet n is flow n mod flows: exactly
`flows` distinct 5-tuples, each once per period.
"""

import argparse
import ipaddress
import math
import os

try:
    from trex_stl_lib.api import (  # TRex up to v2.8x, and the compatibility name after
        CTRexVmInsFixHwCs, IP, IPv6, TCP, UDP, Ether, Padding, STLPktBuilder, STLScVmRaw,
        STLStream, STLTXCont, STLVmFixChecksumHw, STLVmFixIpv4, STLVmFlowVar, STLVmWrFlowVar)
except ImportError:  # pragma: no cover - newer TRex trees only ship trex.stl.api
    from trex.stl.api import (
        CTRexVmInsFixHwCs, IP, IPv6, TCP, UDP, Ether, Padding, STLPktBuilder, STLScVmRaw,
        STLStream, STLTXCont, STLVmFixChecksumHw, STLVmFixIpv4, STLVmFlowVar, STLVmWrFlowVar)

KINDS = ("ack", "syn", "udp", "ipv6", "ipv6-syn", "ipv6-udp")
MODES = ("l2dsr", "ipip", "gre", "gre-key", "gue", "geneve")
# The flow counts of the benchmark matrix (any count in range works).
FLOW_COUNTS = (1, 4096, 65536, 1048576)
MAX_FLOWS = 1 << 23

DEFAULT_VIP4 = "198.18.10.10"
DEFAULT_VIP6 = "2001:db8::10"
TCP_PORT = 80
UDP_PORT = 53
CLIENT4_FIRST = (10 << 24) | 1  # 10.0.0.1
CLIENT6_PREFIX = "2001:db8:c::"  # the flow index goes into the low 32 bits, from 1
CLIENT_PORT_FIRST = 1235  # pktgen's default source port 1234 + its range mode's first step
PORT_CYCLE = 4096
MIN_FRAME = 60  # Ethernet minimum without the FCS

# Header lengths (bytes).
ETH, IPV4, IPV6, TCP_HDR, UDP_HDR = 14, 20, 40, 20, 8
GRE_HDR, GRE_KEY, GENEVE_HDR, GENEVE_COOKIE_OPTION = 4, 4, 8, 8

# What Spillway puts between the outer IP header and the inner IP packet (M8, M30):
# ipip nothing, GRE its 4-byte header (+4 with a key), GUE variant 1 a bare UDP header,
# Geneve UDP + the 8-byte Geneve header + the flow-cookie option (4 + 4 bytes; the gateway
# endpoint-ID option is only sent by gateway rules).
TUNNEL_HEADER = {
    "ipip": 0,
    "gre": GRE_HDR,
    "gre-key": GRE_HDR + GRE_KEY,
    "gue": UDP_HDR,
    "geneve": UDP_HDR + GENEVE_HDR + GENEVE_COOKIE_OPTION,
}


def is_ipv6(kind):
    return kind.startswith("ipv6")


def l4_of(kind):
    if kind in ("udp", "ipv6-udp"):
        return "udp"
    return "tcp"


def tcp_flags_of(kind):
    return "S" if kind in ("syn", "ipv6-syn") else "A"


def header_len(kind):
    """Ethernet + IP + TCP/UDP header bytes of a packet of this kind."""
    return ETH + (IPV6 if is_ipv6(kind) else IPV4) + (UDP_HDR if l4_of(kind) == "udp" else TCP_HDR)


def min_size(kind):
    return max(MIN_FRAME, header_len(kind))


def frame_layout(kind, size):
    """(L4 payload bytes, Ethernet padding bytes) of a `size`-byte frame of this kind.

    A TCP frame of the Ethernet minimum is a pure ACK or SYN: no payload, padded to 60 bytes.
    Anything larger carries payload, and UDP always does (a datagram with data)."""
    hdr = header_len(kind)
    if size < min_size(kind):
        raise ValueError("a %s frame needs at least %d bytes, not %d" % (kind, min_size(kind), size))
    if l4_of(kind) == "tcp" and size == MIN_FRAME and hdr < MIN_FRAME:
        return 0, MIN_FRAME - hdr
    return size - hdr, 0


def inner_ip_len(kind, size):
    """Length of the IP packet inside a `size`-byte frame (what a tunnel carries)."""
    _, pad = frame_layout(kind, size)
    return size - ETH - pad


def expected_egress(mode, kind, size, outer_ipv6=None):
    """Frame length (without FCS) of what Spillway sends towards the backend for one packet.

    l2dsr rewrites MAC addresses only, so the frame keeps its length (padding included).
    Tunnel modes drop the inner Ethernet header and any padding, and prepend Ethernet, the
    outer IP header (the backend's family: by default the VIP's, as in the DUT config of
    perf/bare-metal/dut-config.sh) and the tunnel header."""
    if mode not in MODES:
        raise ValueError("unknown mode %r (one of %s)" % (mode, ", ".join(MODES)))
    if mode == "l2dsr":
        return size
    if outer_ipv6 is None:
        outer_ipv6 = is_ipv6(kind)
    return ETH + (IPV6 if outer_ipv6 else IPV4) + TUNNEL_HEADER[mode] + inner_ip_len(kind, size)


def flow_layout(flows):
    """(client addresses, client ports) cycled for `flows` flows; lcm of the two == flows."""
    if not 1 <= flows <= MAX_FLOWS:
        raise ValueError("flows must be 1..%d, not %d" % (MAX_FLOWS, flows))
    return flows, math.gcd(flows, PORT_CYCLE)


def ipv4_str(n):
    return str(ipaddress.IPv4Address(n))


def ipv6_client(index):
    """Client address of flow `index`: 2001:db8:c::1 + index (the low 32 bits)."""
    return str(ipaddress.IPv6Address(int(ipaddress.IPv6Address(CLIENT6_PREFIX)) + index + 1))


def ipv6_low32(address):
    """The low 32 bits of an IPv6 address: what the field engine writes (offset_fixup 12)."""
    return int(ipaddress.IPv6Address(address)) & 0xFFFFFFFF


def flow(kind, flows, index):
    """Flow `index` (0 <= index < flows): (client address, source port). The field engine below
    sends flow n as packet n; perf/trex/check_profiles.py compares these with what
    perf/pktgen/spillway.lua makes pktgen send in range and pcap mode."""
    _, ports = flow_layout(flows)
    client = ipv6_client(index) if is_ipv6(kind) else ipv4_str(CLIENT4_FIRST + index)
    return client, CLIENT_PORT_FIRST + index % ports


def parse_tunables(tunables, kwargs=None):
    """Tunables as TRex passes them: a list of argv words since v2.89 (`-t --kind syn ...`),
    or keyword arguments before (`-t kind=syn,flows=4096`)."""
    words = list(tunables or [])
    for key, value in sorted((kwargs or {}).items()):
        if key in ("direction", "port_id"):
            continue
        words += ["--" + key.replace("_", "-"), str(value)]
    parser = argparse.ArgumentParser(
        prog=os.path.basename(__file__),
        description="Traffic to a Spillway VIP (perf/BARE-METAL.md).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--kind", choices=KINDS, default="ack", help="traffic kind")
    parser.add_argument("--flows", type=int, default=4096, help="distinct client flows")
    parser.add_argument("--vip", default=None,
                        help="VIP (default %s, %s for ipv6 kinds)" % (DEFAULT_VIP4, DEFAULT_VIP6))
    parser.add_argument("--port", type=int, default=None,
                        help="VIP port (default %d for TCP, %d for UDP)" % (TCP_PORT, UDP_PORT))
    parser.add_argument("--size", type=int, default=None,
                        help="frame length without FCS (default 60, or the kind's minimum)")
    parser.add_argument("--mode", choices=MODES, default="gue",
                        help="the DUT's delivery mode (expected egress only)")
    parser.add_argument("--l4-csum", choices=("hw", "none"), default="hw",
                        help="fix TCP/UDP checksums with NIC offload, or leave them")
    args = parser.parse_args(words)
    if args.vip is None:
        args.vip = DEFAULT_VIP6 if is_ipv6(args.kind) else DEFAULT_VIP4
    if (":" in args.vip) != is_ipv6(args.kind):
        parser.error("--vip %s does not match --kind %s" % (args.vip, args.kind))
    if args.port is None:
        args.port = UDP_PORT if l4_of(args.kind) == "udp" else TCP_PORT
    if not 1 <= args.port <= 65535:
        parser.error("--port must be 1..65535")
    if args.size is None:
        args.size = min_size(args.kind)
    try:
        frame_layout(args.kind, args.size)
        flow_layout(args.flows)
    except ValueError as e:
        parser.error(str(e))
    return args


def base_packet(args):
    """The first flow's packet; the field engine rewrites client address and port."""
    payload, pad = frame_layout(args.kind, args.size)
    client, sport = flow(args.kind, args.flows, 0)
    if is_ipv6(args.kind):
        pkt = Ether() / IPv6(src=client, dst=args.vip, hlim=64)
    else:
        pkt = Ether() / IP(src=client, dst=args.vip, ttl=64)
    if l4_of(args.kind) == "udp":
        pkt = pkt / UDP(sport=sport, dport=args.port)
    else:
        pkt = pkt / TCP(sport=sport, dport=args.port, flags=tcp_flags_of(args.kind),
                        seq=1000, ack=(0 if args.kind.endswith("syn") else 2000), window=65535)
    if payload:
        pkt = pkt / (b"\x00" * payload)
    if pad:
        pkt = pkt / Padding(load=b"\x00" * pad)
    return pkt


def field_engine(args):
    """Field-engine program spreading the packets over args.flows client flows (None for 1)."""
    addresses, ports = flow_layout(args.flows)
    if addresses == 1:
        return None
    v6 = is_ipv6(args.kind)
    l4 = "UDP" if l4_of(args.kind) == "udp" else "TCP"
    first, first_port = flow(args.kind, args.flows, 0)
    last, _ = flow(args.kind, args.flows, args.flows - 1)
    _, last_port = flow(args.kind, args.flows, ports - 1)
    program = []
    # Each variable starts at its minimum (flow 0's value) and steps by 1 per packet.
    if v6:
        lo, hi = ipv6_low32(first), ipv6_low32(last)
        program.append(STLVmFlowVar(name="client_ip", min_value=lo, max_value=hi, init_value=lo,
                                    size=4, op="inc"))
    else:
        program.append(STLVmFlowVar(name="client_ip", min_value=first, max_value=last,
                                    init_value=first, size=4, op="inc"))
    if ports > 1:
        program.append(STLVmFlowVar(name="client_port", min_value=first_port, max_value=last_port,
                                    init_value=first_port, size=2, op="inc"))
    if v6:
        # The low 32 bits of the 128-bit source address.
        program.append(STLVmWrFlowVar(fv_name="client_ip", pkt_offset="IPv6.src", offset_fixup=12))
    else:
        program.append(STLVmWrFlowVar(fv_name="client_ip", pkt_offset="IP.src"))
    if ports > 1:
        program.append(STLVmWrFlowVar(fv_name="client_port", pkt_offset=l4 + ".sport"))
    if args.l4_csum == "hw":
        # Last: IPv4 header and TCP/UDP checksums, by the NIC.
        l4_type = (CTRexVmInsFixHwCs.L4_TYPE_UDP if l4 == "UDP" else CTRexVmInsFixHwCs.L4_TYPE_TCP)
        program.append(STLVmFixChecksumHw(l3_offset="IPv6" if v6 else "IP", l4_offset=l4,
                                          l4_type=l4_type))
    elif not v6:
        program.append(STLVmFixIpv4(offset="IP"))
    return STLScVmRaw(program)


def describe(args):
    addresses, ports = flow_layout(args.flows)
    return ("spillway_bench: %s to %s port %d, %d-byte frames, %d flows (%d client addresses, "
            "%d source ports); DUT egress with %s: %d-byte frames"
            % (args.kind, args.vip, args.port, args.size, args.flows, addresses, ports,
               args.mode, expected_egress(args.mode, args.kind, args.size)))


class SpillwayBench(object):
    """The profile object TRex gets from register()."""

    def get_streams(self, direction=0, port_id=0, tunables=None, **kwargs):
        # Every argument has a default: older TRex inspects them as the tunables.
        args = parse_tunables(tunables, kwargs)
        print(describe(args))
        stream = STLStream(
            name="spillway-%s-%d" % (args.kind, args.flows),
            packet=STLPktBuilder(pkt=base_packet(args), vm=field_engine(args)),
            mode=STLTXCont())
        return [stream]


def register():
    return SpillwayBench()
