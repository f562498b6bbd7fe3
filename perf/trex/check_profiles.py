#!/usr/bin/env python3
"""Checks the TRex profiles in this directory without TRex (what CI runs).

TRex is not installable from a package registry, so this loads each profile the way TRex's
STLProfile.load_py does (import by file name, register(), get_streams(direction=, port_id=,
tunables=)) against a small fake `trex_stl_lib.api` put into sys.modules. The fake records
every stream and field-engine instruction, and packets are either stub layers that know their
header lengths or, with --scapy (when scapy is importable), real scapy layers.

For every profile: register().get_streams() yields streams with default tunables, every
get_streams argument has a default (TRex < 2.89 requires it), and the file name has one dot.
For spillway_bench.py, every case of perf/BARE-METAL.md (kind x flows x mode) is checked:
frame length and headers, destination VIP and port, TCP flags, field-engine variables whose
ranges give exactly `flows` distinct client flows (also by stepping the variables as TRex
does), each starting at flow 0, checksum fixes after the writes, the expected DUT egress per
delivery mode against a table worked out by hand, both tunable syntaxes, and that bad tunables
are refused. Then the profile's flows, packet by packet, against what perf/pktgen/spillway.lua
makes pktgen send in range and pcap mode (perf/pktgen/check.lua --dump-flows, run with lua5.4):
the three send the same 5-tuples in the same order.

    python3 perf/trex/check_profiles.py            # stub layers
    python3 perf/trex/check_profiles.py --scapy    # real scapy layers, if installed
"""

import contextlib
import glob
import importlib.util
import io
import ipaddress
import math
import os
import socket
import subprocess
import sys
import types

sys.dont_write_bytecode = True  # leave no __pycache__ next to the profiles
HERE = os.path.dirname(os.path.abspath(__file__))
RECORDED = []  # every fake STL object made, in order
FAILURES = []
CHECKS = [0]


def check(cond, what):
    CHECKS[0] += 1
    if not cond:
        FAILURES.append(what)


# --- stub packet layers ------------------------------------------------------------------

class _Layer(object):
    HDR = 0

    def __init__(self, _pkt=None, **fields):
        self.fields = dict(fields)
        self.underlayer_payload = None

    def __getattr__(self, name):
        fields = self.__dict__.get("fields", {})
        if name in fields:
            return fields[name]
        raise AttributeError(name)

    def __truediv__(self, other):
        if isinstance(other, (bytes, str)):
            other = Raw(load=other if isinstance(other, bytes) else other.encode())
        last = self
        while last.underlayer_payload is not None:
            last = last.underlayer_payload
        last.underlayer_payload = other
        return self

    __div__ = __truediv__

    def chain(self):
        layer = self
        while layer is not None:
            yield layer
            layer = layer.underlayer_payload

    def own_len(self):
        return self.HDR

    def __len__(self):
        return sum(layer.own_len() for layer in self.chain())

    def getlayer(self, name):
        for layer in self.chain():
            if type(layer).__name__ == name:
                return layer
        return None


class Ether(_Layer):
    HDR = 14


class IP(_Layer):
    HDR = 20


class IPv6(_Layer):
    HDR = 40


class TCP(_Layer):
    HDR = 20


class UDP(_Layer):
    HDR = 8


class Raw(_Layer):
    def own_len(self):
        return len(self.fields.get("load", b""))


class Padding(Raw):
    pass


# --- fake STL objects ----------------------------------------------------------------------

class _Recorded(object):
    def __init__(self, *args, **kwargs):
        self.args = args
        self.kwargs = kwargs
        RECORDED.append(self)

    def __repr__(self):
        return "%s(%s)" % (type(self).__name__, self.kwargs)


class STLStream(_Recorded):
    pass


class STLPktBuilder(_Recorded):
    pass


class STLTXCont(_Recorded):
    pass


class STLScVmRaw(_Recorded):
    def instructions(self):
        return list(self.args[0] if self.args else self.kwargs.get("list_of_commands", []))


class CTRexPacketBuildException(Exception):
    """What TRex's packet builder raises for an instruction it refuses."""


def _fv_value(value):
    """TRex's convert_val: an integer, or an IPv4 address as a string."""
    if isinstance(value, bool):
        raise CTRexPacketBuildException("flow var value %r is not a number" % (value,))
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(ipaddress.IPv4Address(value))
        except ValueError:
            raise CTRexPacketBuildException("flow var value %r is not an IPv4 address" % value)
    raise CTRexPacketBuildException("flow var value %r is not valid" % (value,))


class STLVmFlowVar(_Recorded):
    """Refuses what TRex refuses (STLVmFlowVar in the client, check_min_max in the server):
    size 1, 2, 4 or 8 bytes; op inc, dec or random; every value within the size;
    min <= max; the initial value (default min, max for dec) between them; step > 0."""

    def __init__(self, name, init_value=None, min_value=0, max_value=255, size=4, step=1, op="inc",
                 **kwargs):
        if size not in (1, 2, 4, 8):
            raise CTRexPacketBuildException("flow var %s: invalid size %r" % (name, size))
        if op not in ("inc", "dec", "random"):
            raise CTRexPacketBuildException("flow var %s: invalid op %r" % (name, op))
        lo, hi, st = _fv_value(min_value), _fv_value(max_value), _fv_value(step)
        init = _fv_value(init_value) if init_value is not None else (hi if op == "dec" else lo)
        limit = (1 << (8 * size)) - 1
        for v in (lo, hi, init, st):
            if v < 0 or v > limit:
                raise CTRexPacketBuildException("flow var %s: value %d does not fit %d bytes" % (name, v, size))
        if lo > hi:
            raise CTRexPacketBuildException("flow var %s: max %d is lower than min %d" % (name, hi, lo))
        if not lo <= init <= hi:
            raise CTRexPacketBuildException("flow var %s: init %d outside %d..%d" % (name, init, lo, hi))
        if st <= 0:
            raise CTRexPacketBuildException("flow var %s: step %d" % (name, st))
        super(STLVmFlowVar, self).__init__(name=name, init_value=init_value, min_value=min_value,
                                           max_value=max_value, size=size, step=step, op=op, **kwargs)


class STLVmWrFlowVar(_Recorded):
    pass


class STLVmFixIpv4(_Recorded):
    pass


class STLVmFixChecksumHw(_Recorded):
    pass


class CTRexVmInsFixHwCs(object):
    L4_TYPE_UDP = 11
    L4_TYPE_TCP = 13
    L4_TYPE_IP = 17


FAKE_NAMES = ["STLStream", "STLPktBuilder", "STLTXCont", "STLScVmRaw", "STLVmFlowVar",
              "STLVmWrFlowVar", "STLVmFixIpv4", "STLVmFixChecksumHw", "CTRexVmInsFixHwCs",
              "CTRexPacketBuildException"]
LAYER_NAMES = ["Ether", "IP", "IPv6", "TCP", "UDP", "Raw", "Padding"]


def install_fake_api(use_scapy):
    """Puts `trex_stl_lib` and `trex_stl_lib.api` into sys.modules; returns the layer source."""
    api = types.ModuleType("trex_stl_lib.api")
    for name in FAKE_NAMES:
        setattr(api, name, globals()[name])
    source = "stub layers"
    layers = globals()
    if use_scapy:
        try:
            import logging
            logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
            import scapy.all as scapy_all  # noqa: F401
            layers = vars(scapy_all)
            source = "scapy %s" % getattr(sys.modules.get("scapy"), "VERSION", "?")
        except ImportError:
            print("check_profiles: NOTICE: scapy is not installed; using stub layers")
    for name in LAYER_NAMES:
        setattr(api, name, layers[name])
    package = types.ModuleType("trex_stl_lib")
    package.__path__ = []
    package.api = api
    sys.modules["trex_stl_lib"] = package
    sys.modules["trex_stl_lib.api"] = api
    return source, source != "stub layers"


def load_profile(path):
    name = os.path.basename(path)[:-3]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def get_streams(profile, tunables=None, **kwargs):
    """Calls get_streams as TRex's load_py does; returns (streams, printed text, recorded)."""
    start = len(RECORDED)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        if tunables is not None:
            kwargs["tunables"] = tunables
        streams = profile.get_streams(direction=0, port_id=0, **kwargs)
    if not isinstance(streams, list):
        streams = [streams]
    return streams, out.getvalue(), RECORDED[start:]


def refuses(profile, tunables):
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            profile.get_streams(direction=0, port_id=0, tunables=tunables)
    except SystemExit:
        return True
    except (ValueError, CTRexPacketBuildException):
        return True
    return False


def generic_checks(path, module):
    base = os.path.basename(path)
    check(len(base.split(".")) == 2, "%s: TRex loads profiles whose name has exactly one dot" % base)
    check(base[:-3].isidentifier(), "%s: TRex imports the profile by its file name" % base)
    check(callable(getattr(module, "register", None)), "%s: no register()" % base)
    profile = module.register()
    func = profile.get_streams
    code = func.__code__
    argc = code.co_argcount
    defaults = func.__defaults__ or ()
    # TRex's get_module_tunables: every argument after self needs a default.
    check(len(defaults) == argc - 1,
          "%s: every get_streams argument needs a default (TRex < 2.89 inspects them)" % base)
    streams, _, _ = get_streams(profile, tunables=[])
    check(len(streams) >= 1 and all(isinstance(s, STLStream) for s in streams),
          "%s: get_streams() with default tunables yields no STLStream" % base)
    for s in streams:
        check(isinstance(s.kwargs.get("packet"), STLPktBuilder), "%s: stream without packet" % base)
    return profile


def as_int(value):
    if isinstance(value, str):
        return int(ipaddress.ip_address(value))
    return int(value)


def wire_ip_len(pkt, real):
    """The IP packet length the frame carries (IPv4 total length; IPv6 40 + payload length)."""
    if real:
        raw = bytes(pkt)
        ethertype = int.from_bytes(raw[12:14], "big")
        if ethertype == 0x0800:
            return int.from_bytes(raw[16:18], "big")
        return 40 + int.from_bytes(raw[18:20], "big")
    pad = pkt.getlayer("Padding")
    return len(pkt) - 14 - (len(pad.load) if pad is not None else 0)


def split_engine(variables, packets, cores):
    """The (value, ...) tuples `cores` TRex cores send over `packets` packets each: TRex splits
    an inc variable by giving core k the initial value k steps on and a step of `cores`
    (trex_stl_vm_splitter.cpp, StreamVmInstructionFlowMan::update), wrapping within min..max."""
    sent = set()
    for k in range(cores):
        for n in range(packets):
            sent.add(tuple(lo + (k + n * cores) % (hi - lo + 1) for lo, hi in variables))
    return sent


# Where the fields the profile writes sit in the packet, and their width: (layer, offset in
# the layer, bytes).
FIELDS = {"IP.src": ("IP", 12, 4), "IPv6.src": ("IPv6", 8, 16), "TCP.sport": ("TCP", 0, 2),
          "UDP.sport": ("UDP", 0, 2)}


def step_engine(variables, packets):
    """Distinct value tuples over `packets` packets when every variable steps once per packet
    (op "inc", wrapping from max to min), as TRex's field engine does on one core."""
    seen = set()
    for n in range(packets):
        seen.add(tuple(lo + (n % (hi - lo + 1)) for lo, hi in variables))
    return len(seen)


# DUT egress frame lengths (without FCS) worked out by hand for the default frame sizes:
#   ack/syn: 60-byte frame = Ethernet 14 + IPv4 20 + TCP 20 + 6 padding -> inner IP 40 bytes
#   udp:     60-byte frame = Ethernet 14 + IPv4 20 + UDP 8 + 18 data    -> inner IP 46 bytes
#   ipv6:    74-byte frame = Ethernet 14 + IPv6 40 + TCP 20             -> inner IP 60 bytes
# egress = Ethernet 14 + outer IP (20, or 40 for the IPv6 service's IPv6 backends)
#          + tunnel header (ipip 0, gre 4, gre-key 8, gue 8, geneve 8 + 8 + 8-byte cookie option)
#          + inner IP; l2dsr keeps the frame as it is.
EXPECTED_EGRESS = {
    "ack": {"l2dsr": 60, "ipip": 74, "gre": 78, "gre-key": 82, "gue": 82, "geneve": 98},
    "syn": {"l2dsr": 60, "ipip": 74, "gre": 78, "gre-key": 82, "gue": 82, "geneve": 98},
    "udp": {"l2dsr": 60, "ipip": 80, "gre": 84, "gre-key": 88, "gue": 88, "geneve": 104},
    "ipv6": {"l2dsr": 74, "ipip": 114, "gre": 118, "gre-key": 122, "gue": 122, "geneve": 138},
    "ipv6-syn": {"l2dsr": 74, "ipip": 114, "gre": 118, "gre-key": 122, "gue": 122, "geneve": 138},
    "ipv6-udp": {"l2dsr": 62, "ipip": 102, "gre": 106, "gre-key": 110, "gue": 110, "geneve": 126},
}


def check_case(m, profile, kind, flows, real):
    case = "spillway_bench --kind %s --flows %d" % (kind, flows)
    streams, text, recorded = get_streams(profile, ["--kind", kind, "--flows", str(flows)])
    check(len(streams) == 1, "%s: expected one stream, got %d" % (case, len(streams)))
    stream = streams[0]
    check(isinstance(stream.kwargs.get("mode"), STLTXCont), "%s: not a continuous stream" % case)
    builder = stream.kwargs.get("packet")
    pkt = builder.kwargs.get("pkt")
    v6 = m.is_ipv6(kind)
    udp = m.l4_of(kind) == "udp"
    size = m.min_size(kind)
    check(len(pkt) == size, "%s: frame is %d bytes, expected %d" % (case, len(pkt), size))
    # TRex fills frames under 60 bytes up with zeros the profile would not account for.
    check(len(pkt) >= 60, "%s: %d-byte frame: TRex would send 60" % (case, len(pkt)))
    check(wire_ip_len(pkt, real) == m.inner_ip_len(kind, size),
          "%s: IP length %d, expected %d" % (case, wire_ip_len(pkt, real), m.inner_ip_len(kind, size)))
    ip = pkt.getlayer("IPv6" if v6 else "IP")
    check(ip is not None, "%s: no %s header" % (case, "IPv6" if v6 else "IPv4"))
    if ip is not None:
        vip = m.DEFAULT_VIP6 if v6 else m.DEFAULT_VIP4
        check(ipaddress.ip_address(ip.dst) == ipaddress.ip_address(vip),
              "%s: destination %s, expected the VIP %s" % (case, ip.dst, vip))
        first = "2001:db8:c::1" if v6 else "10.0.0.1"
        check(ipaddress.ip_address(ip.src) == ipaddress.ip_address(first),
              "%s: first client %s, expected %s" % (case, ip.src, first))
    l4 = pkt.getlayer("UDP" if udp else "TCP")
    check(l4 is not None, "%s: no %s header" % (case, "UDP" if udp else "TCP"))
    if l4 is not None:
        check(int(l4.dport) == (53 if udp else 80), "%s: destination port %s" % (case, l4.dport))
        check(int(l4.sport) == 1235, "%s: first source port %s" % (case, l4.sport))
        if not udp:
            want = "S" if kind.endswith("syn") else "A"
            check(str(l4.flags) == want, "%s: TCP flags %s, expected %s" % (case, l4.flags, want))

    vm = builder.kwargs.get("vm")
    if flows == 1:
        check(vm is None, "%s: one flow needs no field engine" % case)
    else:
        check(isinstance(vm, STLScVmRaw), "%s: no STLScVmRaw field engine" % case)
    program = vm.instructions() if isinstance(vm, STLScVmRaw) else []
    variables = {}
    writes = {}
    for pos, ins in enumerate(program):
        if isinstance(ins, STLVmFlowVar):
            k = ins.kwargs
            check(k.get("op") == "inc", "%s: variable %s is not op=inc" % (case, k.get("name")))
            # TRex starts an inc variable at init_value (its min when not given): flow 0.
            init = k.get("init_value")
            check(init is None or as_int(init) == as_int(k["min_value"]),
                  "%s: variable %s does not start at its minimum (flow 0)" % (case, k.get("name")))
            variables[k["name"]] = (pos, as_int(k["min_value"]), as_int(k["max_value"]), k.get("size"))
        elif isinstance(ins, STLVmWrFlowVar):
            k = ins.kwargs
            check(k["fv_name"] in variables, "%s: %s written before it is defined" % (case, k["fv_name"]))
            check(k["fv_name"] not in writes, "%s: %s written twice" % (case, k["fv_name"]))
            writes[k["fv_name"]] = (pos, k["pkt_offset"], k.get("offset_fixup", 0))
    if flows > 1:
        check("client_ip" in variables and "client_ip" in writes,
              "%s: the client address is not varied" % case)
    addr_count = port_count = 1
    if "client_ip" in variables:
        _, lo, hi, width = variables["client_ip"]
        addr_count = hi - lo + 1
        check(width == 4, "%s: client address variable is %s bytes" % (case, width))
        if v6:
            check(writes.get("client_ip", (0, None, None))[1:] == ("IPv6.src", 12),
                  "%s: IPv6 client must go to the low 32 bits of IPv6.src" % case)
            check(lo == 1, "%s: IPv6 clients start at ::1 of the prefix" % case)
        else:
            check(writes.get("client_ip", (0, None, None))[1:] == ("IP.src", 0),
                  "%s: client address must go to IP.src" % case)
            check(lo == int(ipaddress.ip_address("10.0.0.1")), "%s: IPv4 clients start at 10.0.0.1" % case)
    if "client_port" in variables:
        _, lo, hi, width = variables["client_port"]
        port_count = hi - lo + 1
        check(width == 2, "%s: port variable is %s bytes" % (case, width))
        check(lo == 1235 and hi <= 65535, "%s: source ports %d-%d" % (case, lo, hi))
        check(writes.get("client_port", (0, None))[1] == ("UDP.sport" if udp else "TCP.sport"),
              "%s: source port written to %s" % (case, writes.get("client_port")))
    check(addr_count == flows, "%s: %d client addresses for %d flows" % (case, addr_count, flows))
    lcm = addr_count * port_count // math.gcd(addr_count, port_count)
    check(lcm == flows, "%s: the variables repeat after %d packets, not %d" % (case, lcm, flows))
    if 1 < flows <= 65536:
        ranges = [(variables[n][1], variables[n][2]) for n in ("client_ip", "client_port") if n in variables]
        distinct = step_engine(ranges, 2 * flows)
        check(distinct == flows, "%s: stepping the engine gives %d flows" % (case, distinct))
        # On several TRex cores every variable is split the same way: still exactly the
        # layout's flows (address i with port i mod P), all of them.
        want = set((ranges[0][0] + i,) + ((ranges[1][0] + i % port_count,) if len(ranges) > 1 else ())
                   for i in range(flows))
        for cores in (2, 3, 8):
            got = split_engine(ranges, flows // cores + 1, cores)
            check(got == want, "%s: on %d TRex cores %d flows, %d outside the layout"
                  % (case, cores, len(got), len(got - want)))
    # Every write lands inside its field (TRex writes the variable's size at the offset).
    for name, (_, target, fixup) in writes.items():
        layer, at, width = FIELDS.get(target, (None, 0, 0))
        check(layer is not None and pkt.getlayer(layer) is not None,
              "%s: %s written to %s, not a field of this packet" % (case, name, target))
        if name in variables:
            check(fixup >= 0 and fixup + variables[name][3] <= width,
                  "%s: %s (%d bytes at +%d) overflows %s (%d bytes)"
                  % (case, name, variables[name][3], fixup, target, width))
    if program:
        last_write = max(p for p, _, _ in writes.values()) if writes else -1
        fixes = [(pos, ins) for pos, ins in enumerate(program)
                 if isinstance(ins, (STLVmFixIpv4, STLVmFixChecksumHw))]
        check(len(fixes) == 1, "%s: expected one checksum fix, got %d" % (case, len(fixes)))
        for pos, ins in fixes:
            check(pos == len(program) - 1 and pos > last_write,
                  "%s: the checksum fix must come last, after the writes" % case)
            check(isinstance(ins, STLVmFixChecksumHw), "%s: default --l4-csum hw needs STLVmFixChecksumHw" % case)
            if isinstance(ins, STLVmFixChecksumHw):
                k = ins.kwargs
                check(k.get("l3_offset") == ("IPv6" if v6 else "IP"), "%s: l3_offset %s" % (case, k))
                check(k.get("l4_offset") == ("UDP" if udp else "TCP"), "%s: l4_offset %s" % (case, k))
                want = CTRexVmInsFixHwCs.L4_TYPE_UDP if udp else CTRexVmInsFixHwCs.L4_TYPE_TCP
                check(k.get("l4_type") == want, "%s: l4_type %s" % (case, k.get("l4_type")))
    check("%d flows" % flows in text and "-byte frames" in text,
          "%s: load-time description missing: %r" % (case, text))
    del recorded


def check_spillway_bench(m, real):
    profile = m.register()
    for kind in m.KINDS:
        for flows in m.FLOW_COUNTS + (m.MAX_FLOWS,):
            check_case(m, profile, kind, flows, real)
        for mode in m.MODES:
            want = EXPECTED_EGRESS[kind][mode]
            got = m.expected_egress(mode, kind, m.min_size(kind))
            check(got == want, "expected egress %s/%s: %d, the table says %d" % (kind, mode, got, want))
            _, text, _ = get_streams(profile, ["--kind", kind, "--mode", mode])
            check(("with %s: %d-byte frames" % (mode, want)) in text,
                  "--kind %s --mode %s: load-time egress line wrong: %r" % (kind, mode, text))
    # Larger frames: TCP carries data instead of padding, tunnels add exactly their headers.
    check(m.expected_egress("gue", "ack", 128) == 128 + 28, "gue of a 128-byte ACK")
    check(m.expected_egress("geneve", "udp", 1400) == 1400 + 44, "geneve of a 1400-byte UDP frame")
    check(m.expected_egress("ipip", "ipv6", 200) == 200 + 40, "ipip (6in6) of a 200-byte frame")
    check(m.expected_egress("gre", "ack", 60, outer_ipv6=True) == 14 + 40 + 4 + 40, "gre 4in6")
    streams, _, _ = get_streams(profile, ["--kind", "udp", "--size", "512", "--flows", "7"])
    pkt = streams[0].kwargs["packet"].kwargs["pkt"]
    check(len(pkt) == 512, "--size 512 gives a %d-byte frame" % len(pkt))
    # Both tunable syntaxes: argv words (TRex >= 2.89) and keyword arguments (older TRex).
    a, _, _ = get_streams(profile, ["--kind", "syn", "--flows", "65536", "--size", "60"])
    b, _, _ = get_streams(profile, None, kind="syn", flows=65536, size=60)
    check(repr(a[0].kwargs["packet"].kwargs["vm"].instructions()) ==
          repr(b[0].kwargs["packet"].kwargs["vm"].instructions()),
          "tunables as keywords differ from tunables as words")
    # --l4-csum none: IPv4 header checksum fix only, nothing for IPv6.
    s, _, _ = get_streams(profile, ["--flows", "4096", "--l4-csum", "none"])
    prog = s[0].kwargs["packet"].kwargs["vm"].instructions()
    check(isinstance(prog[-1], STLVmFixIpv4), "--l4-csum none must still fix the IPv4 header checksum")
    s, _, _ = get_streams(profile, ["--kind", "ipv6", "--flows", "4096", "--l4-csum", "none"])
    prog = s[0].kwargs["packet"].kwargs["vm"].instructions()
    check(not any(isinstance(i, (STLVmFixIpv4, STLVmFixChecksumHw)) for i in prog),
          "--l4-csum none with IPv6 needs no fix")
    # The fake field engine refuses what TRex refuses.
    for bad in (dict(min_value=0, max_value=70000, size=2), dict(min_value=5, max_value=4),
                dict(min_value=0, max_value=10, size=3), dict(min_value=0, max_value=10, op="up"),
                dict(min_value=0, max_value=10, step=0), dict(min_value="10.0.0.300", max_value=10)):
        try:
            STLVmFlowVar(name="x", **bad)
            check(False, "STLVmFlowVar(%s) should be refused as TRex does" % bad)
        except CTRexPacketBuildException:
            check(True, "")
    for bad in (["--kind", "bogus"], ["--flows", "0"], ["--flows", str(m.MAX_FLOWS + 1)],
                ["--kind", "ipv6", "--vip", "198.18.10.10"], ["--vip", "2001:db8::10"],
                ["--kind", "ipv6", "--size", "60"], ["--size", "59"], ["--port", "70000"],
                ["--mode", "vxlan"]):
        check(refuses(profile, bad), "tunables %s should be refused" % bad)


def trex_flows(m, kind, pkt, program):
    """A function of n giving (client as an integer, source port) of packet n of the stream as
    TRex sends it on one core: every inc variable at min + (init - min + n) mod (max - min + 1),
    written where the program says (an IPv6 client's low 32 bits: offset_fixup 12)."""
    variables = {}
    for ins in program:
        if isinstance(ins, STLVmFlowVar):
            k = ins.kwargs
            lo, hi = as_int(k["min_value"]), as_int(k["max_value"])
            init = as_int(k["init_value"]) if k.get("init_value") is not None else lo
            variables[k["name"]] = (lo, init - lo, hi - lo + 1)
    ip = pkt.getlayer("IPv6" if m.is_ipv6(kind) else "IP")
    l4 = pkt.getlayer("UDP" if m.l4_of(kind) == "udp" else "TCP")
    base, sport = int(ipaddress.ip_address(ip.src)), int(l4.sport)
    keep = ~0xFFFFFFFF if m.is_ipv6(kind) else 0

    def value(name, n, default):
        if name not in variables:
            return default
        lo, off, span = variables[name]
        return lo + (off + n) % span

    return lambda n: ((base & keep) | value("client_ip", n, base & 0xFFFFFFFF) if m.is_ipv6(kind)
                      else value("client_ip", n, base), value("client_port", n, sport))


def check_flow_sets(m, profile):
    """The flows of TRex, pktgen's range mode and pktgen's pcap mode are the same 5-tuples in
    the same order: packet n is flow n. perf/pktgen/check.lua --dump-flows runs
    perf/pktgen/spillway.lua against its fake pktgen (which builds range packets the way
    pktgen does) and writes the case's pcap; each of its lines must be the TRex stream's packet
    of that index. Every packet up to 4096 flows, range mode's up to its 24576 mbufs, and the
    pcap's first, last and port-wrap frames above."""
    script = os.path.join(os.path.dirname(HERE), "pktgen", "check.lua")
    cases = [(kind, flows) for kind in m.KINDS for flows in (1, 7, 4096)]
    cases += [(kind, flows) for kind in ("ack", "ipv6") for flows in (24576, 1048576, m.MAX_FLOWS)]
    for kind, flows in cases:
        case = "flows of --kind %s --flows %d" % (kind, flows)
        try:
            res = subprocess.run(["lua5.4", script, "--dump-flows", kind, str(flows)],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
        except FileNotFoundError:
            check(False, "%s: no lua5.4 to run perf/pktgen/check.lua (scripts/setup.sh installs it)" % case)
            return
        check(res.returncode == 0, "%s: check.lua --dump-flows failed: %s" % (case, res.stderr))
        streams, _, _ = get_streams(profile, ["--kind", kind, "--flows", str(flows)])
        builder = streams[0].kwargs["packet"]
        vm = builder.kwargs.get("vm")
        trex = trex_flows(m, kind, builder.kwargs["pkt"], vm.instructions() if vm is not None else [])
        family = socket.AF_INET6 if m.is_ipv6(kind) else socket.AF_INET
        seen = {"range": 0, "pcap": 0}
        bad = []
        for line in res.stdout.splitlines():
            source, n, addr, port = line.split()
            seen[source] += 1
            got = (int.from_bytes(socket.inet_pton(family, addr), "big"), int(port))
            want = trex(int(n))
            if got != want and len(bad) < 3:
                bad.append("%s packet %s is %s:%d, TRex's is %s:%d" % (
                    source, n, addr, got[1], ipaddress.ip_address(want[0]), want[1]))
        check(not bad, "%s: %s" % (case, "; ".join(bad)))
        check(seen["range"] == (flows if flows <= 65536 else 0)
              and seen["pcap"] == (flows if flows <= 4096 else 6),
              "%s: %d range and %d pcap flows compared" % (case, seen["range"], seen["pcap"]))


def main(argv):
    source, real = install_fake_api("--scapy" in argv)
    paths = sorted(p for p in glob.glob(os.path.join(HERE, "*.py"))
                   if os.path.basename(p) != os.path.basename(__file__))
    check(paths, "no profiles in %s" % HERE)
    for path in paths:
        try:
            module = load_profile(path)
            generic_checks(path, module)
            if os.path.basename(path) == "spillway_bench.py":
                check_spillway_bench(module, real)
                check_flow_sets(module, module.register())
        except Exception as e:  # a profile that does not even load is one failure, with its cause
            import traceback
            FAILURES.append("%s: %s\n%s" % (os.path.basename(path), e, traceback.format_exc()))
    for f in FAILURES[:40]:
        print("FAIL: %s" % f)
    if len(FAILURES) > 40:
        print("FAIL: ... and %d more" % (len(FAILURES) - 40))
    print("check_profiles: %d profiles, %d checks (%s): %d passed, %d failed"
          % (len(paths), CHECKS[0], source, CHECKS[0] - len(FAILURES), len(FAILURES)))
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
