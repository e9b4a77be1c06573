"""Shared pieces of the fault suite: trial counts, the per-scenario tally, the result table, and small
helpers to run the real binaries and look at real memcached servers."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from cachewarm.datapath.meta import Item, MetaConnection
from cachewarm.testing.memcached import MemcachedServer

# `make faults TRIALS=20` sets FAULT_TRIALS; the default keeps `make test` fast.
DEFAULT_TRIALS = 3
CLI = [sys.executable, "-c", "from cachewarm.cli import run; run()"]


def trials() -> int:
    raw = os.environ.get("FAULT_TRIALS", str(DEFAULT_TRIALS))
    try:
        n = int(raw)
    except ValueError as e:
        raise ValueError(f"FAULT_TRIALS={raw!r} is not an integer") from e
    if n < 1:
        raise ValueError(f"FAULT_TRIALS={n} must be >= 1")
    return n


@dataclass
class Tally:
    """One scenario's figures. lost: items that should have arrived and did not. corrupt: items or
    files that arrived wrong (bad value/flags, twice, partial, clobbered, resurrected, unverifiable).
    leaked: anything left behind (temp files, processes, written state on refused input, AWS resources).
    """

    scenario: str
    trials: int = 0
    lost: int = 0
    corrupt: int = 0
    leaked: int = 0
    notes: list[str] = field(default_factory=list)
    # Set when the scenario is an xfail(strict=True) test pinning a known bug in another area.
    known_bug: str | None = None
    # The memcached release the trials ran against (None: the scenario starts no server).
    release: str | None = None

    def note(self, text: str) -> None:
        if len(self.notes) < 20:
            self.notes.append(text)

    @property
    def clean(self) -> bool:
        return self.lost == 0 and self.corrupt == 0 and self.leaked == 0

    def line(self) -> str:
        figures = f"trials={self.trials} lost={self.lost} corrupt={self.corrupt} leaked={self.leaked}"
        where = f" [memcached {self.release}]" if self.release else ""
        line = f"{self.scenario}{where}: {figures}"
        return line + (f" (known bug: {self.known_bug})" if self.known_bug else "")

    def check(self) -> None:
        """Print the scenario line and fail with the first notes if anything was lost/corrupt/leaked."""
        print(self.line())
        assert self.clean, self.line() + "\n  " + "\n  ".join(self.notes)


def fetch_all(srv: MemcachedServer, keys: Iterable[bytes]) -> dict[bytes, Item]:
    with MetaConnection(srv.host, srv.port) as r:
        return r.get_many(list(keys))


def children_of(proc: subprocess.Popen[bytes] | subprocess.Popen[str]) -> list[psutil.Process]:
    try:
        return psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def kill9(proc: subprocess.Popen[bytes] | subprocess.Popen[str]) -> list[psutil.Process]:
    """SIGKILL one process we started; returns its descendants as they were just before."""
    kids = children_of(proc)
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
    proc.wait()
    return kids


def survivors(procs: list[psutil.Process], grace: float = 5.0) -> list[psutil.Process]:
    """Descendants of a killed process still alive after `grace` seconds (a leak); we then end them."""
    _, alive = psutil.wait_procs(procs, timeout=grace)
    for p in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    return alive


def wait_until(pred: Callable[[], bool], timeout: float, step: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(step)
    return False


def tmp_leftovers(directory: Path) -> list[str]:
    """Temporary names a process left behind (readers ignore them; a clean run removes its own)."""
    if not directory.exists():
        return []
    return sorted(str(p.relative_to(directory)) for p in directory.rglob(".tmp-*"))


class CuttingProxy:
    """A TCP proxy to `upstream` that resets the first connection through which more than `after`
    bytes went upstream (a writer's connection, not a `stats` probe); the others pass."""

    def __init__(
        self, upstream: MemcachedServer, after: int, on_cut: Callable[[], None] | None = None
    ) -> None:
        self.upstream = (upstream.host, upstream.port)
        self.host = "127.0.0.1"
        self.after = after
        self.on_cut = on_cut  # run just before the cut (e.g. to change another server)
        self.cuts = 0
        self.lsock = socket.create_server(("127.0.0.1", 0))
        self.port = self.lsock.getsockname()[1]
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while True:
            try:
                c, _ = self.lsock.accept()
            except OSError:
                return
            u = socket.create_connection(self.upstream)
            threading.Thread(target=self._pump, args=(c, u, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(u, c, False), daemon=True).start()

    def _pump(self, a: socket.socket, b: socket.socket, upstream: bool) -> None:
        sent = 0
        try:
            while data := a.recv(65536):
                b.sendall(data)
                sent += len(data)
                if upstream and sent > self.after:
                    with self.lock:
                        cut = self.cuts == 0
                        self.cuts += cut
                    if cut:
                        if self.on_cut is not None:
                            self.on_cut()
                        for s in (a, b):  # RST, as a broken network path would
                            s.setsockopt(
                                socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
                            )
                            s.close()
                        return
        except OSError:
            pass
        for s in (a, b):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.lsock.close()
