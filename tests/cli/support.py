"""What the CLI tests share: the CLI in a subprocess (real exit codes, real pipes), a small dump
directory, a source memcached with items."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from cachewarm.datapath.format import Record
from cachewarm.datapath.meta import MetaConnection
from cachewarm.datapath.writer import DirWriter
from cachewarm.testing.memcached import MemcachedServer

CLI = [sys.executable, "-c", "from cachewarm.cli import run; run()"]


def run(
    args: list[str], env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    if args[:1] == ["populate"] and "--source" not in args:
        # These tests give no source memcached: the re-check has its own (tests/datapath/test_recheck.py).
        args = [*args, "--accept-no-recheck"]
    return subprocess.run(
        [*CLI, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env if env is not None else dict(os.environ),
    )


def small_dump(path: Path, n: int = 200, files: int = 2) -> Path:
    """A complete dump directory of `n` items in `files` data files."""
    w = DirWriter(path, node="src")
    per = n // files
    for f in range(files):
        w.write(f, 0, [Record(b"k:%d" % i, i, -1, b"v" * (i % 300)) for i in range(f * per, (f + 1) * per)])
    w.done()
    return path


def load(srv: MemcachedServer, n: int, size: int = 100) -> None:
    """`n` items into a server, with quiet meta sets."""
    c = MetaConnection(srv.host, srv.port)
    c.connect()
    buf = bytearray()
    for i in range(n):
        buf += b"ms item:%d %d T0 F%d q\r\n%b\r\n" % (i, size, i, b"x" * size)
    c.send_batch(buf, n)
    t = c.flush()
    c.close()
    assert t.errors == 0 and t.not_stored == 0, t.first_error
