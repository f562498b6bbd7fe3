#!/usr/bin/env python3
"""Writes and compares classic pcap files (standard library only).

  pcap.py gen OUT.pcap [--count N] [--flows F]   UDP/IPv4 test frames
  pcap.py same A.pcap B.pcap                      same frames, same order?
"""
import argparse
import struct
import sys


def checksum(data, initial=0):
    if len(data) % 2:
        data += b"\0"
    s = initial + sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def udp_frame(i, flows):
    flow = i % flows
    src = bytes([198, 18, (flow >> 8) & 0xFF, flow & 0xFF])
    dst = bytes([198, 19, 0, 10])
    payload = b"spillway-%08d" % i
    sport, dport = 1024 + flow % 60000, 80
    udp_len = 8 + len(payload)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + udp_len, i & 0xFFFF, 0, 64, 17, 0, src, dst)
    ip = ip[:10] + struct.pack("!H", checksum(ip)) + ip[12:]
    pseudo = sum(struct.unpack("!4H", src + dst)) + 17 + udp_len
    udp = struct.pack("!HHHH", sport, dport, udp_len, 0) + payload
    c = checksum(udp, pseudo) or 0xFFFF
    udp = udp[:6] + struct.pack("!H", c) + udp[8:]
    eth = bytes.fromhex("020000000002" "020000000001" "0800")
    return eth + ip + udp


def write(path, frames):
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        for n, fr in enumerate(frames):
            f.write(struct.pack("<IIII", n // 1000, (n % 1000) * 1000, len(fr), len(fr)))
            f.write(fr)


def read(path):
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 24:
        raise SystemExit(f"{path}: not a pcap file ({len(data)} bytes)")
    magic = struct.unpack("<I", data[:4])[0]
    endian = {0xA1B2C3D4: "<", 0xA1B23C4D: "<", 0xD4C3B2A1: ">", 0x4D3CB2A1: ">"}.get(magic)
    if endian is None:
        raise SystemExit(f"{path}: bad pcap magic {magic:#x}")
    off, frames = 24, []
    while off + 16 <= len(data):
        _, _, incl, _ = struct.unpack(endian + "IIII", data[off:off + 16])
        frames.append(data[off + 16:off + 16 + incl])
        off += 16 + incl
    return frames


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("gen")
    g.add_argument("out")
    g.add_argument("--count", type=int, default=1000)
    g.add_argument("--flows", type=int, default=64)
    s = sub.add_parser("same")
    s.add_argument("a")
    s.add_argument("b")
    args = ap.parse_args()
    if args.cmd == "gen":
        write(args.out, [udp_frame(i, args.flows) for i in range(args.count)])
        print(f"wrote {args.count} UDP frames over {args.flows} flows to {args.out}")
        return 0
    a, b = read(args.a), read(args.b)
    if a == b:
        print(f"{args.b}: all {len(b)} frames identical to {args.a}, in order")
        return 0
    diff = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    print(f"{args.b} differs from {args.a}: {len(b)} vs {len(a)} frames, first difference at frame {diff}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
