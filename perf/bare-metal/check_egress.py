#!/usr/bin/env python3
"""Checks what perf/BARE-METAL.md says the DUT sends out, against Spillway itself.

For every delivery mode it writes the DUT configuration with perf/bare-metal/dut-config.sh,
validates it with `spillway check-config`, and pushes the benchmark's packets through the real
pipeline offline with `spillway replay`: TCP ACKs, SYNs, UDP and IPv6 to the VIPs, built the
way the TRex profile builds them (pure 60-byte TCP frames padded) and the way pktgen does (6
bytes of TCP data instead of padding), 32 client flows per kind, twice each. Then, per packet:

  - egress frame length == perf/trex/spillway_bench.expected_egress (and the pktgen formula),
  - destination MAC == the generator's MAC (gateway_mac, or the l2dsr endpoint MAC),
  - outer headers: EtherType, IP protocol / next header (4, 41, 47, 17), DF and TTL, outer
    source = the backend port's address, destination = an endpoint; GRE flags, key and
    protocol; GUE UDP port 6080 and source port range; Geneve port 6081, version, protocol,
    VNI 0 and the flow-cookie option (class 0x0139, type 3),
  - the inner IP packet is the client's, byte for byte (TTL / hop limit and the IPv4 header
    checksum aside), l2dsr frames change their MAC addresses only,

and the replay counters: every packet forwarded, none dropped, `flows` new flows and as many
hits (the counters BARE-METAL.md tells you to expect).

Needs a `spillway` binary no older than the sources (SPILLWAY_BIN, else target/release or
target/debug); without one it prints a NOTICE and exits 0.
"""

import glob
import importlib.util
import ipaddress
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # leave no __pycache__ in the work tree
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "perf", "trex"))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import check_profiles  # noqa: E402  (the fake trex_stl_lib, to import the profile)
import pcap  # noqa: E402  (scripts/pcap.py: pcap read/write, checksums)

MODES = ("l2dsr", "ipip", "gre", "gre-key", "gue", "geneve")
KINDS = ("ack", "syn", "udp", "ipv6", "ipv6-syn", "ipv6-udp")
GEN_MAC = "3c:fd:fe:11:22:33"
# The DUT uplink's MAC the generators address (on the bench, the NIC's own). A replay has no NIC
# to read it from, so the replayed configuration names it: its edge takes only frames to it (M55).
DUT_MAC = "02:00:00:00:00:01"
FLOWS = 32
FAILURES = []
CHECKS = [0]


def check(cond, what):
    CHECKS[0] += 1
    if not cond:
        FAILURES.append(what)


def say(msg):
    print("[spillway] %s" % msg, file=sys.stderr)


def find_binary():
    if os.environ.get("SPILLWAY_BIN"):
        return os.environ["SPILLWAY_BIN"], None
    # What the binary is built from (not tests, benches or fuzz targets).
    sources = [p for pat in ("src/**/*.rs", "crates/*/src/**/*.rs", "dpdk-sys/src/**/*.rs",
                             "Cargo.toml", "crates/*/Cargo.toml")
               for p in glob.glob(os.path.join(ROOT, pat), recursive=True)]
    newest_source = max(os.path.getmtime(p) for p in sources) if sources else 0
    bins = [os.path.join(ROOT, "target", d, "spillway") for d in ("release", "debug")]
    bins = [b for b in bins if os.access(b, os.X_OK)]
    if not bins:
        return None, "no spillway binary in target/ (cargo build)"
    newest = max(bins, key=os.path.getmtime)
    if os.path.getmtime(newest) < newest_source:
        return None, "%s is older than the sources (cargo build)" % os.path.relpath(newest, ROOT)
    return newest, None


def load_profile():
    check_profiles.install_fake_api(False)
    spec = importlib.util.spec_from_file_location(
        "spillway_bench", os.path.join(ROOT, "perf", "trex", "spillway_bench.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- frames --------------------------------------------------------------------------------

def ipv4_header(src, dst, proto, payload_len, ttl=64):
    h = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + payload_len, 0, 0x4000, ttl, proto, 0,
                    src.packed, dst.packed)
    return h[:10] + struct.pack("!H", pcap.checksum(h)) + h[12:]


def l4_checksum(src, dst, proto, segment):
    if src.version == 4:
        pseudo = src.packed + dst.packed + struct.pack("!BBH", 0, proto, len(segment))
    else:
        pseudo = src.packed + dst.packed + struct.pack("!IxxxB", len(segment), proto)
    return pcap.checksum(pseudo + segment) or (0xFFFF if proto == 17 else 0)


def pktgen_size(m, kind):
    """pktgen's frame for a kind: 60 bytes, and never under 74 for IPv6 (78 with the FCS:
    pktgen enlarges shorter IPv6 frames), as perf/pktgen/spillway.lua's min_size says."""
    return max(m.min_size(kind), 74 if m.is_ipv6(kind) else 0)


def frame(m, kind, flow, style):
    """One client packet of `kind` from flow `flow`, as the TRex profile ("trex") or pktgen
    ("pktgen") builds it at the default size; returns (frame, inner IP packet)."""
    v6 = m.is_ipv6(kind)
    udp = m.l4_of(kind) == "udp"
    size = pktgen_size(m, kind) if style == "pktgen" else m.min_size(kind)
    if v6:
        src = ipaddress.ip_address(m.ipv6_client(flow))
        dst = ipaddress.ip_address(m.DEFAULT_VIP6)
    else:
        src = ipaddress.ip_address(m.CLIENT4_FIRST + flow)
        dst = ipaddress.ip_address(m.DEFAULT_VIP4)
    _, ports = m.flow_layout(FLOWS)
    sport = m.CLIENT_PORT_FIRST + flow % ports
    hdr = m.header_len(kind)
    if style == "trex":
        data_len, pad = m.frame_layout(kind, size)
    else:  # pktgen: the IP packet fills the frame, never padding
        data_len, pad = size - hdr, 0
    data = b"\x00" * data_len
    if udp:
        seg = struct.pack("!HHHH", sport, m.UDP_PORT, 8 + len(data), 0) + data
        proto = 17
        seg = seg[:6] + struct.pack("!H", l4_checksum(src, dst, proto, seg)) + seg[8:]
    else:
        flags = 0x02 if kind.endswith("syn") else 0x10
        seg = struct.pack("!HHIIBBHHH", sport, m.TCP_PORT, 1000, 0 if flags == 2 else 2000,
                          5 << 4, flags, 65535, 0, 0) + data
        proto = 6
        seg = seg[:16] + struct.pack("!H", l4_checksum(src, dst, proto, seg)) + seg[18:]
    if v6:
        ip = struct.pack("!IHBB16s16s", 6 << 28, len(seg), proto, 64, src.packed, dst.packed) + seg
        ethertype = 0x86DD
    else:
        ip = ipv4_header(src, dst, proto, len(seg)) + seg
        ethertype = 0x0800
    eth = bytes.fromhex(DUT_MAC.replace(":", "")) + bytes.fromhex("3cfdfe000001") + struct.pack("!H", ethertype)
    return eth + ip + b"\x00" * pad, ip


def masked_ip(ip):
    """The IP packet without TTL / hop limit and the IPv4 header checksum (M6: TTL aside)."""
    b = bytearray(ip)
    if b[0] >> 4 == 4:
        b[8] = 0
        b[10:12] = b"\0\0"
    else:
        b[7] = 0
    return bytes(b)


# --- egress checks -------------------------------------------------------------------------

def check_egress(m, mode, kind, style, out, sent):
    case = "%s %s (%s frames)" % (mode, kind, style)
    check(len(out) == len(sent), "%s: %d packets out for %d in" % (case, len(out), len(sent)))
    gen_mac = bytes.fromhex(GEN_MAC.replace(":", ""))
    v6 = m.is_ipv6(kind)
    for n, (eg, (fr, ip)) in enumerate(zip(out, sent)):
        what = "%s packet %d" % (case, n)
        if style == "trex":
            want = m.expected_egress(mode, kind, m.min_size(kind))
        else:  # pktgen: inner IP = frame - 14, no padding to drop
            size = pktgen_size(m, kind)
            want = size if mode == "l2dsr" else 14 + (40 if v6 else 20) + m.TUNNEL_HEADER[mode] + size - 14
        check(len(eg) == want, "%s: egress %d bytes, expected %d" % (what, len(eg), want))
        check(eg[:6] == gen_mac, "%s: destination MAC %s is not the generator's" % (what, eg[:6].hex(":")))
        if mode == "l2dsr":
            check(eg[12:] == fr[12:], "%s: l2dsr changed more than the MAC addresses" % what)
            continue
        ethertype = struct.unpack("!H", eg[12:14])[0]
        outer = eg[14:]
        if v6:
            check(ethertype == 0x86DD, "%s: outer EtherType %#06x, expected IPv6" % (what, ethertype))
            nxt, hlim = outer[6], outer[7]
            src, dst = ipaddress.IPv6Address(outer[8:24]), ipaddress.IPv6Address(outer[24:40])
            check(str(src) == "2001:db8:ff01::1", "%s: outer source %s" % (what, src))
            eps = ipaddress.ip_network("2001:db8:20::/64")
            rest = outer[40:]
        else:
            check(ethertype == 0x0800, "%s: outer EtherType %#06x, expected IPv4" % (what, ethertype))
            check(outer[0] == 0x45, "%s: outer IPv4 header with options" % what)
            check(pcap.checksum(outer[:20]) == 0, "%s: outer IPv4 header checksum" % what)
            check(struct.unpack("!H", outer[6:8])[0] & 0x4000, "%s: outer DF bit not set" % what)
            check(struct.unpack("!H", outer[2:4])[0] == len(outer), "%s: outer total length" % what)
            nxt, hlim = outer[9], outer[8]
            src, dst = ipaddress.IPv4Address(outer[12:16]), ipaddress.IPv4Address(outer[16:20])
            check(str(src) == "198.18.1.1", "%s: outer source %s" % (what, src))
            eps = ipaddress.ip_network("198.18.20.0/24")
            rest = outer[20:]
        check(hlim == 64, "%s: outer TTL %d" % (what, hlim))
        check(dst in eps, "%s: outer destination %s is not an endpoint" % (what, dst))
        inner_type = 0x86DD if v6 else 0x0800
        if mode == "ipip":
            check(nxt == (41 if v6 else 4), "%s: ipip protocol %d" % (what, nxt))
            inner = rest
        elif mode in ("gre", "gre-key"):
            check(nxt == 47, "%s: GRE protocol %d" % (what, nxt))
            flags, proto = struct.unpack("!HH", rest[:4])
            check(proto == inner_type, "%s: GRE protocol type %#06x" % (what, proto))
            if mode == "gre-key":
                check(flags == 0x2000 and struct.unpack("!I", rest[4:8])[0] == 42,
                      "%s: GRE key flag/value %#06x" % (what, flags))
                inner = rest[8:]
            else:
                check(flags == 0, "%s: GRE flags %#06x" % (what, flags))
                inner = rest[4:]
        else:
            check(nxt == 17, "%s: UDP protocol %d" % (what, nxt))
            sport, dport, ulen = struct.unpack("!HHH", rest[:6])
            check(49152 <= sport <= 65535, "%s: outer UDP source port %d" % (what, sport))
            check(ulen == len(rest), "%s: outer UDP length %d" % (what, ulen))
            if mode == "gue":
                check(dport == 6080, "%s: GUE port %d" % (what, dport))
                inner = rest[8:]
            else:
                check(dport == 6081, "%s: Geneve port %d" % (what, dport))
                g = rest[8:]
                ver_optlen, _, proto = struct.unpack("!BBH", g[:4])
                vni = struct.unpack("!I", g[4:8])[0] >> 8
                check(ver_optlen >> 6 == 0 and (ver_optlen & 0x3F) == 2,
                      "%s: Geneve version/option length %#04x" % (what, ver_optlen))
                check(proto == inner_type and vni == 0, "%s: Geneve protocol %#06x VNI %d" % (what, proto, vni))
                cls, typ, olen = struct.unpack("!HBB", g[8:12])
                check(cls == 0x0139 and typ == 3 and (olen & 0x1F) == 1,
                      "%s: Geneve option %#06x/%d/%d, expected the flow cookie" % (what, cls, typ, olen))
                inner = g[16:]
        check(masked_ip(inner) == masked_ip(ip), "%s: the inner packet is not the client's" % what)


def lua_binary():
    for name in ("lua5.4", "lua5.3", "lua"):
        path = shutil.which(name)
        if path:
            return path
    return None


def check_lua_pcaps(binary, lua, config, m, mode, tmp):
    """The frames perf/pktgen/spillway.lua writes for pcap mode (SPW_WRITE_PCAP), replayed:
    every one forwarded, with the egress of a pktgen frame of its kind."""
    for kind in KINDS:
        path = os.path.join(tmp, "lua-%s-%s.pcap" % (mode, kind))
        env = dict(os.environ, SPW_KIND=kind, SPW_FLOWS=str(FLOWS), SPW_WRITE_PCAP=path,
                   SPW_DST_MAC=DUT_MAC)
        res = subprocess.run([lua, os.path.join(ROOT, "perf", "pktgen", "spillway.lua")], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
        check(res.returncode == 0, "spillway.lua SPW_WRITE_PCAP for %s: %s" % (kind, res.stdout))
        if res.returncode != 0:
            continue
        frames = pcap.read(path)
        check(len(frames) == FLOWS, "spillway.lua wrote %d frames for %d %s flows" % (len(frames), FLOWS, kind))
        rc, text, out = replay(binary, config, frames, tmp, "lua-%s-%s" % (mode, kind))
        check(rc == 0, "%s %s: spillway replay of the Lua pcap failed:\n%s" % (mode, kind, text))
        if rc == 0:
            check_egress(m, mode, kind, "pktgen", out, [(f, f[14:]) for f in frames])


def replay(binary, config, frames, workdir, tag):
    inp = os.path.join(workdir, tag + "-in.pcap")
    out = os.path.join(workdir, tag + "-out.pcap")
    pcap.write(inp, frames)
    res = subprocess.run([binary, "replay", "--config", config, "--input", inp, "--output", out],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
    return res.returncode, res.stdout, (pcap.read(out) if res.returncode == 0 else [])


def dut_config(*args):
    return subprocess.run([os.path.join(ROOT, "perf", "bare-metal", "dut-config.sh"), "--mode", "gue",
                           "--gen-mac", GEN_MAC, "--mgmt", "0", "--workers", "1", "--flows", "65536"]
                          + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True)


def check_dut_devices(binary, tmp):
    """dut-config.sh passes a PCI address as `-a ADDR` and a virtual device as `--vdev=SPEC`
    (EAL only creates net_* devices it is told to), the port's `device` being the name
    without device arguments; anything else is refused. With a binary, check-config too."""
    cases = (
        ("0000:3b:00.0", '"-a", "0000:3b:00.0"', "0000:3b:00.0"),
        ("3b:00.1,safe-mode-support=1", '"-a", "3b:00.1,safe-mode-support=1"', "3b:00.1"),
        ("net_memif0,role=server,socket=/run/memif0.sock",
         '"--vdev=net_memif0,role=server,socket=/run/memif0.sock"', "net_memif0"),
        ("net_null1", '"--vdev=net_null1"', "net_null1"),
    )
    for i, (dev, eal, name) in enumerate(cases):
        other = cases[(i + 1) % len(cases)]
        res = dut_config("--uplink", dev, "--backend", other[0])
        check(res.returncode == 0, "dut-config.sh --uplink %s: %s" % (dev, res.stderr))
        eal_line = next((l for l in res.stdout.splitlines() if l.startswith("eal_args = [")), "")
        check(eal_line.startswith("eal_args = [%s, %s," % (eal, other[1])),
              "dut-config.sh --uplink %s --backend %s: eal_args %s" % (dev, other[0], eal_line))
        devices = re.findall(r'^device = "([^"]*)"', res.stdout, re.M)
        check(devices == [name, other[2]], "dut-config.sh --uplink %s: port devices %s" % (dev, devices))
        if binary is not None and res.returncode == 0:
            config = os.path.join(tmp, "dut-devices-%d.toml" % i)
            with open(config, "w") as f:
                f.write(res.stdout)
            chk = subprocess.run([binary, "check-config", config], stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, universal_newlines=True)
            check(chk.returncode == 0, "check-config of --uplink %s --backend %s:\n%s" % (dev, other[0], chk.stdout))
    for bad in (("--uplink", "eth0"), ("--uplink", "memif0"), ("--backend", "0000:3b:00"),
                ("--uplink", "0000:3b:00.1", "--backend", "0000:3b:00.1"),
                ("--uplink", 'net_memif0,socket="x"')):
        res = dut_config(*bad)
        check(res.returncode != 0 and "dut-config.sh:" in res.stderr,
              "dut-config.sh %s should be refused" % " ".join(bad))


def check_dut_starts(binary, tmp):
    """The memif set-up dut-config.sh advertises (--uplink and --backend net_memif servers)
    must start, not only pass check-config: Spillway sets each port's MTU from its [[ports]]
    entry and refuses to start a port whose device cannot take it (net_memif: no frame over
    1518 bytes, so no MTU over 1500). Runs `spillway run` on the generated file until it has
    set up both ports, then stops it. Only the EAL memory options (no hugepages, as the tests'
    daemons), the file prefix and the control socket are the test's own."""
    up = "net_memif0,role=server,id=0,socket=%s/memif-up.sock" % tmp
    be = "net_memif1,role=server,id=0,socket=%s/memif-be.sock" % tmp
    res = dut_config("--uplink", up, "--backend", be, "--socket", os.path.join(tmp, "dut.sock"))
    check(res.returncode == 0, "dut-config.sh with memif ports: %s" % res.stderr)
    prefix = '"--file-prefix", "spillway"'
    check(prefix in res.stdout, "dut-config.sh: no %s in eal_args" % prefix)
    text = res.stdout.replace(prefix, '"--file-prefix", "spw-egress-%d", "--no-huge", "-m", "512", '
                              '"--no-shconf", "--no-pci", "--no-telemetry"' % os.getpid())
    config = os.path.join(tmp, "dut-memif.toml")
    with open(config, "w") as f:
        f.write(text)
    chk = subprocess.run([binary, "check-config", config], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, universal_newlines=True)
    check(chk.returncode == 0, "check-config of the memif DUT config:\n%s" % chk.stdout)
    daemon = subprocess.Popen([binary, "run", "--config", config], stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, universal_newlines=True,
                              env=dict(os.environ, RUST_LOG="info"))
    log, ports = [], set()
    for line in daemon.stderr:
        log.append(line.rstrip("\n"))
        found = re.search(r"port (uplink|backends) \(net_memif\d", line)
        if found:
            ports.add(found.group(1))
        if ports == {"uplink", "backends"}:
            break
    # The first SIGTERM drains, the second stops at once (M39); the rest of the log is not read.
    for sig in (signal.SIGTERM, signal.SIGTERM, signal.SIGKILL):
        if daemon.poll() is not None:
            break
        daemon.send_signal(sig)
        try:
            daemon.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
    daemon.stderr.close()
    # DPDK's runtime directory of this run's prefix (it outlives the process).
    shutil.rmtree("/var/run/dpdk/spw-egress-%d" % os.getpid(), ignore_errors=True)
    check(ports == {"uplink", "backends"},
          "spillway run did not set up the memif ports dut-config.sh wrote; its log:\n%s"
          % "\n".join(log[-20:]))


def report():
    for f in FAILURES[:40]:
        print("FAIL: %s" % f)
    if len(FAILURES) > 40:
        print("FAIL: ... and %d more" % (len(FAILURES) - 40))


def main():
    binary, why = find_binary()
    if binary is None:
        with tempfile.TemporaryDirectory(prefix="spillway-egress-") as tmp:
            check_dut_devices(None, tmp)
        report()
        print("check_egress: dut-config.sh devices: %d checks: %d passed, %d failed"
              % (CHECKS[0], CHECKS[0] - len(FAILURES), len(FAILURES)))
        say("NOTICE: %s: DUT configs and egress not checked against Spillway" % why)
        return 1 if FAILURES else 0
    if (os.cpu_count() or 1) < 2:
        say("NOTICE: one CPU: the DUT configs need a management and a worker core; not checked")
        return 0
    m = load_profile()
    lua = lua_binary()
    if lua is None:
        say("NOTICE: no Lua: the pcap frames of perf/pktgen/spillway.lua are not replayed")
    with tempfile.TemporaryDirectory(prefix="spillway-egress-") as tmp:
        check_dut_devices(binary, tmp)
        check_dut_starts(binary, tmp)
        for mode in MODES:
            config = os.path.join(tmp, "dut-%s.toml" % mode)
            text = subprocess.run([os.path.join(ROOT, "perf", "bare-metal", "dut-config.sh"), "--mode", mode,
                                   "--gen-mac", GEN_MAC, "--mgmt", "0", "--workers", "1", "--flows", "65536"],
                                  stdout=subprocess.PIPE, universal_newlines=True, check=True).stdout
            uplink = 'role = "uplink"\n'
            check(uplink in text, "dut-config.sh --mode %s: no uplink port" % mode)
            with open(config, "w") as f:
                f.write(text.replace(uplink, uplink + 'mac = "%s"\n' % DUT_MAC, 1))
            res = subprocess.run([binary, "check-config", config], stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, universal_newlines=True)
            check(res.returncode == 0, "dut-config.sh --mode %s: check-config says\n%s" % (mode, res.stdout))
            if res.returncode != 0:
                continue
            if lua:
                check_lua_pcaps(binary, lua, config, m, mode, tmp)
            for style in ("trex", "pktgen"):
                # One replay per mode and generator: every kind, each from its own FLOWS
                # client flows (kind k uses flows k*FLOWS ..), every packet twice.
                sent = {kind: [frame(m, kind, k * FLOWS + i % FLOWS, style) for i in range(2 * FLOWS)]
                        for k, kind in enumerate(KINDS)}
                tag = "%s-%s" % (mode, style)
                frames = [f for kind in KINDS for f, _ in sent[kind]]
                rc, text, out = replay(binary, config, frames, tmp, tag)
                check(rc == 0, "%s: spillway replay failed:\n%s" % (tag, text))
                if rc != 0:
                    continue
                for k, kind in enumerate(KINDS):
                    n = 2 * FLOWS
                    check_egress(m, mode, kind, style, out[k * n:(k + 1) * n], sent[kind])
                # The replay summary: every packet forwarded, one new flow per client flow,
                # the second packet of each a hit. (Its wording is the replay command's; if
                # that changes, say so rather than fail on it.)
                total = len(KINDS) * FLOWS
                flows = re.search(r"flows: (\d+) new, (\d+) hits", text)
                fwd = re.search(r"forwarded (\d+)", text)
                dropped = re.search(r"dropped (\d+)", text)
                if flows and fwd and dropped:
                    check(flows.groups() == (str(total), str(total)),
                          "%s: expected %d new flows and %d hits:\n%s" % (tag, total, total, text))
                    check(int(fwd.group(1)) == 2 * total and int(dropped.group(1)) == 0,
                          "%s: not every packet forwarded:\n%s" % (tag, text))
                else:
                    say("NOTICE: %s: replay summary not recognised; counters not checked" % tag)
    report()
    print("check_egress: %s, %d modes x %d kinds: %d checks: %d passed, %d failed"
          % (os.path.relpath(binary, ROOT) if binary.startswith(ROOT) else binary, len(MODES),
             len(KINDS), CHECKS[0], CHECKS[0] - len(FAILURES), len(FAILURES)))
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
