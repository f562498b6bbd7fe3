"""The harness's progress messages: on stderr, each prefixed `[bench]`, so that
stdout carries only the results table."""

from __future__ import annotations

import sys


def log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)
