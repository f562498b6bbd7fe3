"""pcap files, byte by byte: reading one's records, and echoing the Geneve
frames `spillway replay` sent as the appliances would answer them (the
gateway return case's packet set)."""

from __future__ import annotations

import struct
from pathlib import Path

from .cases import GENEVE_PORT
from .measurement import RunFailed


def read_pcap(path: Path) -> tuple[bytes, list[bytes]]:
    """A pcap's file header and its records (each with its record header)."""
    data = path.read_bytes()
    if len(data) < 24:
        raise RunFailed(f"{path}: not a pcap")
    order = "<" if data[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    records = []
    off = 24
    while off + 16 <= len(data):
        incl = struct.unpack_from(order + "I", data, off + 8)[0]
        records.append(data[off : off + 16 + incl])
        off += 16 + incl
    return data[:24], records


def echo_geneve(sent: Path, out: Path) -> int:
    """Writes each IPv4 Geneve frame of `sent` back as its appliance would
    answer it (Ethernet and IP source and destination swapped; the IPv4 and
    UDP checksums do not change), the rest left out; returns how many."""
    header, records = read_pcap(sent)
    n = 0
    with open(out, "wb") as f:
        f.write(header)
        for rec in records:
            fr = rec[16:]
            if len(fr) < 42 or fr[12:14] != b"\x08\x00" or fr[23] != 17:
                continue
            udp = 14 + (fr[14] & 0x0F) * 4
            if len(fr) < udp + 8 or struct.unpack_from("!H", fr, udp + 2)[0] != GENEVE_PORT:
                continue
            e = bytearray(fr)
            e[0:6], e[6:12] = fr[6:12], fr[0:6]
            e[26:30], e[30:34] = fr[30:34], fr[26:30]
            f.write(rec[:16] + bytes(e))
            n += 1
    return n
