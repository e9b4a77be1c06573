"""Real clients and proxies for the placement tests: nutcracker (Debian's package) started on a
config, and plain text-protocol writes and multi-gets over a socket (no client library's own key
rules in the way)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml
from cachewarm.testing.memcached import free_port

NUTCRACKER = shutil.which("nutcracker") or "/usr/sbin/nutcracker"


def _recv_until(s: socket.socket, buf: bytearray, end: bytes) -> None:
    while not buf.endswith(end):
        chunk = s.recv(1 << 16)
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk


def set_many(host: str, port: int, items: Iterable[tuple[bytes, bytes]]) -> None:
    with socket.create_connection((host, port), timeout=30) as s:
        out = bytearray()
        for k, v in items:
            out += b"set %s 0 0 %d noreply\r\n%s\r\n" % (k, len(v), v)
        s.sendall(out + b"mn\r\n")
        _recv_until(s, bytearray(), b"MN\r\n")


def get_many(host: str, port: int, keys: list[bytes], batch: int = 40) -> dict[bytes, bytes]:
    """key -> value of the keys found, through `get k1 k2 ...` (what a proxy splits and routes)."""
    found: dict[bytes, bytes] = {}
    with socket.create_connection((host, port), timeout=30) as s:
        for i in range(0, len(keys), batch):
            s.sendall(b"get " + b" ".join(keys[i : i + batch]) + b"\r\n")
            buf = bytearray()
            _recv_until(s, buf, b"END\r\n")
            data = bytes(buf)
            pos = 0
            while not data.startswith(b"END\r\n", pos):
                eol = data.index(b"\r\n", pos)
                head = data[pos:eol].split(b" ")
                assert head[0] == b"VALUE", data[pos : pos + 100]
                n = int(head[3])
                found[head[1]] = data[eol + 2 : eol + 2 + n]
                pos = eol + 2 + n + 2
    return found


@contextmanager
def nutcracker(config: Path, work: Path) -> Iterator[None]:
    """nutcracker on `config`, until the block ends; entered once every pool's `listen:` address
    accepts and nutcracker is still running. Its stats port is never one of those addresses: a
    collision (two free_port() calls can return the same port) let the stats listener answer the
    wait while nutcracker exited on the pool's bind, and the reads found no proxy (CI, stop 31)."""
    out = subprocess.run([NUTCRACKER, "-t", "-c", str(config)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr + out.stdout
    listens = [_host_port(pool["listen"]) for pool in yaml.safe_load(config.read_text()).values()]
    stats = free_port()
    while stats in {port for _, port in listens}:
        stats = free_port()
    log, pid = work / "nutcracker.log", work / "nutcracker.pid"
    cmd = [NUTCRACKER, "-c", str(config), "-a", "127.0.0.1", "-s", str(stats), "-o", str(log), "-p", str(pid)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for host, port in listens:
            wait_listening(host, port)
        if proc.poll() is not None:
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise AssertionError(f"nutcracker exited {proc.returncode} after it started: {tail}")
        yield
    finally:
        proc.kill()
        proc.wait()


def _host_port(listen: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    return host, int(port)


def wait_listening(host: str, port: int, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host, port), timeout=1):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
