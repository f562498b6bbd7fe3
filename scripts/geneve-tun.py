#!/usr/bin/env python3
"""A remote gateway endpoint's tunnel (M31) in userspace, for the namespace
lab (scripts/lab-gateway.sh up remote): what the kernel routes into the TUN
device leaves in Geneve (RFC 8926: no options, VNI 0, the inner IP packet)
to the balancer; Geneve from the balancer arrives on the UDP port and its
inner packet goes into the TUN device, where the kernel routes it on. The
kernel here has no geneve module, hence userspace.

    geneve-tun.py TUN LOCAL_ADDR BALANCER_ADDR [PORT]

Counts what it did on stderr when it ends (SIGTERM): the lab's test reads
the counts to see that both ways went through the tunnel.
"""

import fcntl
import os
import select
import signal
import socket
import struct
import sys

TUNSETIFF = 0x400454CA
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000


def main() -> int:
    name, local, balancer = sys.argv[1], sys.argv[2], sys.argv[3]
    port = int(sys.argv[4]) if len(sys.argv) > 4 else 6081
    tun = os.open("/dev/net/tun", os.O_RDWR)
    fcntl.ioctl(tun, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((local, port))
    counts = {"sent": 0, "received": 0, "refused": 0}

    def stop(*_):
        sys.stderr.write("geneve-tun: sent %(sent)d received %(received)d refused %(refused)d\n" % counts)
        sys.stderr.flush()
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print("geneve-tun: %s up, %s -> %s:%d" % (name, local, balancer, port), flush=True)
    while True:
        ready, _, _ = select.select([tun, sock], [], [])
        if tun in ready:
            pkt = os.read(tun, 65535)
            version = pkt[0] >> 4 if pkt else 0
            # A router forwards no IPv6 link-local or multicast traffic (the
            # TUN device's own neighbour and listener discovery).
            if version == 6 and len(pkt) >= 40 and (pkt[24] == 0xFF or pkt[8:10] == b"\xfe\x80"):
                continue
            if version in (4, 6):
                proto = 0x0800 if version == 4 else 0x86DD
                sock.sendto(struct.pack("!BBHI", 0, 0, proto, 0) + pkt, (balancer, port))
                counts["sent"] += 1
        if sock in ready:
            data, (src, _) = sock.recvfrom(65535)
            # Only the balancer's tunnel, only plain Geneve carrying IP.
            if src != balancer or len(data) < 8 or data[0] >> 6 != 0:
                counts["refused"] += 1
                continue
            opt_len = (data[0] & 0x3F) * 4
            proto = struct.unpack("!H", data[2:4])[0]
            if proto not in (0x0800, 0x86DD) or len(data) < 8 + opt_len:
                counts["refused"] += 1
                continue
            os.write(tun, data[8 + opt_len:])
            counts["received"] += 1


if __name__ == "__main__":
    sys.exit(main())
