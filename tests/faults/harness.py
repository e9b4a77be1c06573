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
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from cachewarm.datapath.meta import Item, MetaConnection
from cachewarm.testing.memcached import MemcachedServer

# `make faults TRIALS=20` sets FAULT_TRIALS; the default keeps `make test` fast.
DEFAULT_TRIALS = 3
CLI = [sys.executable, "-c", "from cachewarm.cli import run; run()"]


def trials(default: int = DEFAULT_TRIALS) -> int:
    """FAULT_TRIALS, else `default` (a scenario may run fewer trials than DEFAULT_TRIALS in `make test`)."""
    raw = os.environ.get("FAULT_TRIALS", str(default))
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


class Unclean(AssertionError):
    """A live-operations scenario found the destination wrong (LiveTally.check): what an
    xfail(raises=Unclean) expects, so a broken harness still fails."""


@dataclass
class LiveTally(Tally):
    """A live-operations scenario's figures (tests/faults/liveops.py): client-deleted keys alive on
    the destination, items ending after their source's, counters behind (and ahead of) the source's,
    the client's latest values lost, the warm's exit codes and the client's deletes/touches its target
    check counted as missing. `lost`/`corrupt`: keys no client op touched, missing or wrong."""

    deleted_alive: int = 0
    outliving: int = 0
    counters_behind: int = 0
    counters_ahead: int = 0
    fresher_lost: int = 0
    counted_missing: int = 0
    exits: list[int] = field(default_factory=list)
    # A path's named residual (docs/reliability.md): counters ahead are counted and shown, not failed.
    counters_ahead_residual: str = ""

    @property
    def clean(self) -> bool:
        ahead = 0 if self.counters_ahead_residual else self.counters_ahead
        figures = (self.deleted_alive, self.outliving, self.counters_behind, ahead)
        return (
            super().clean
            and not any(figures)
            and self.fresher_lost == 0
            and self.counted_missing == 0
            and all(e == 0 for e in self.exits)
        )

    def exit_codes(self) -> str:
        """ "0 x3" or "8 x2, 0 x1": each final exit code of the warm with its count."""
        return ", ".join(f"{code} x{n}" for code, n in Counter(self.exits).most_common()) or "—"

    def check(self) -> None:
        print(self.line())
        if not self.clean:
            raise Unclean(self.line() + "\n  " + "\n  ".join(self.notes))

    def line(self) -> str:
        figures = (
            f"trials={self.trials} deleted_alive={self.deleted_alive} outliving={self.outliving} "
            f"counters_behind={self.counters_behind} counters_ahead={self.counters_ahead} "
            f"fresher_lost={self.fresher_lost} lost={self.lost} corrupt={self.corrupt} "
            f"counted_missing={self.counted_missing} exits=[{self.exit_codes()}]"
        )
        where = f" [memcached {self.release}]" if self.release else ""
        line = f"{self.scenario}{where}: {figures}"
        if self.counters_ahead_residual and self.counters_ahead:
            line += f" (counters ahead allowed: {self.counters_ahead_residual})"
        return line + (f" (known bug: {self.known_bug})" if self.known_bug else "")


@contextlib.contextmanager
def busy_cores(n: int = 2) -> Iterator[list[subprocess.Popen[bytes]]]:
    """`n` processes spinning on a core each (another workload on the host) while the block runs;
    ended by their ids afterwards."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield procs
    finally:
        for p in procs:
            p.kill()
            p.wait()


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
