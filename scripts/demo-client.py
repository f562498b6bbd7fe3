#!/usr/bin/env python3
"""The demo's clients (standard library only), run inside the lab's client
namespace by scripts/demo.sh.

  demo-client.py fetch VIP N LOG         N HTTP requests, 8 at a time; prints
                                         "backend count" lines
  demo-client.py load VIP RATE LOG STOP  HTTP requests at about RATE a second
                                         until the file STOP exists
  demo-client.py hold VIP N STOP         N long-lived connections to the
                                         VIP's line echo service (port 7),
                                         one line each every 100 ms until STOP
                                         exists; prints what broke

Every request is appended to LOG as "unix-time backend", the time it started
and who answered ("FAILED" when none did): the data of the demo's picture.
"""
import os
import socket
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

# Per step (connect, read): a SYN lost on a busy machine is sent again after
# 1 s and 3 s.
TIMEOUT = 5.0
# Why requests failed, for the summary: error name -> count.
ERRORS = {}


def get(vip):
    """One request on a fresh TCP connection: the backend's name or FAILED."""
    try:
        with socket.create_connection((vip, 80), timeout=TIMEOUT) as s:
            s.sendall(b"GET / HTTP/1.0\r\nHost: demo\r\n\r\n")
            data = b""
            while True:
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
        body = data.split(b"\r\n\r\n", 1)[1].decode().strip()
        if body:
            return body
        why = "empty answer"
    except (OSError, IndexError, UnicodeDecodeError) as e:
        why = type(e).__name__
    ERRORS[why] = ERRORS.get(why, 0) + 1
    return "FAILED"


class Log:
    """Appends "time backend" lines; thread-safe."""

    def __init__(self, path):
        self.f = open(path, "a", encoding="ascii")
        self.lock = threading.Lock()

    def request(self, vip):
        """One request, logged at the time it started (when its connection's
        first packet left, whenever the answer came)."""
        start = time.time()
        backend = get(vip)
        with self.lock:
            self.f.write(f"{start:.3f} {backend}\n")
            self.f.flush()
        return backend


def fetch(vip, n, log_path):
    log = Log(log_path)

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: log.request(vip), range(n)))
    for b in sorted(set(answers)):
        print(b, answers.count(b))
    if ERRORS:
        print("(" + ", ".join(f"{k} {n}" for k, n in sorted(ERRORS.items())) + ")")


def load(vip, rate, log_path, stop):
    log = Log(log_path)
    gap = 1.0 / rate
    # Started on a fixed clock so a slow answer does not slow the rate.
    with ThreadPoolExecutor(16) as pool:
        t = time.monotonic()
        while not os.path.exists(stop):
            pool.submit(log.request, vip)
            t += gap
            time.sleep(max(0.0, t - time.monotonic()))


def hold(vip, n, stop):
    conns = []
    for _ in range(n):
        s = socket.create_connection((vip, 7), timeout=TIMEOUT)
        conns.append([s, s.makefile("rb"), ""])
    rounds, broken = 0, {}
    while not os.path.exists(stop):
        for i, c in enumerate(conns):
            if i in broken:
                continue
            s, r, backend = c
            try:
                s.sendall(b"ping %d\n" % rounds)
                line = r.readline().decode()
            except OSError as e:
                broken[i] = f"round {rounds}: {e}"
                continue
            name = line.split(" ", 1)[0]
            if not line.endswith(f"ping {rounds}\n"):
                broken[i] = f"round {rounds}: answer {line!r}"
            elif not backend:
                c[2] = name
            elif backend != name:
                broken[i] = f"moved from {backend} to {name}"
        rounds += 1
        time.sleep(0.1)
    spread = {}
    for c in conns:
        spread[c[2]] = spread.get(c[2], 0) + 1
    print(f"{n} connections, {rounds} rounds each, {len(broken)} broken")
    print("on: " + ", ".join(f"{b} {k}" for b, k in sorted(spread.items())))
    for i, why in sorted(broken.items()):
        print(f"connection {i}: {why}")
    sys.exit(1 if broken else 0)


def main():
    args = sys.argv[1:]
    if args[:1] == ["fetch"] and len(args) == 4:
        fetch(args[1], int(args[2]), args[3])
    elif args[:1] == ["load"] and len(args) == 5:
        load(args[1], float(args[2]), args[3], args[4])
    elif args[:1] == ["hold"] and len(args) == 4:
        hold(args[1], int(args[2]), args[3])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
