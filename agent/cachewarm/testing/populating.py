"""Helpers for populator tests and benchmarks: dump directories, the populator in a thread."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from cachewarm.datapath.format import Record
from cachewarm.datapath.ketama import Node
from cachewarm.datapath.meta import Item, MetaConnection
from cachewarm.datapath.populate import PopulateConfig, PopulateSummary, Progress, populate
from cachewarm.testing.memcached import MemcachedServer

# How much earlier than at its source an item may expire at a destination, each read on its own
# server's clock in whole seconds: the dumper's whole-second TTL and EXPIRY_MARGIN (up to 2 s), plus the
# destination's clock offset rounded down (its `stats time` lags the wall clock by up to ~2 s, and T
# is moved onto it: issue 21). Never later.
EXPIRY_SLACK = 4


def node(srv: MemcachedServer) -> Node:
    return Node(srv.host, srv.port)


def records(n: int, prefix: bytes = b"k", size: int = 100, start: int = 0) -> list[Record]:
    return [Record(b"%s%d" % (prefix, i), i, -1, b"v%d-" % i + b"x" * size) for i in range(start, start + n)]


def fetch(srv: MemcachedServer, keys: list[bytes]) -> dict[bytes, Item]:
    with MetaConnection(srv.host, srv.port) as r:
        return r.get_many(keys)


def expiries(srv: MemcachedServer, keys: list[bytes]) -> dict[bytes, int]:
    """Each present key's absolute expiry on the server's own clock (-1 = never): its `time` stat plus
    the TTL `mg t` reports, read right after (both in whole seconds, so +-1 s)."""
    with MetaConnection(srv.host, srv.port) as r:
        now = int(r.stats()["time"])
        got = r.get_many(keys)
    return {k: -1 if it.ttl == -1 else now + int(it.ttl or 0) for k, it in got.items()}


def config(src: Path, tmp: Path, dests: list[MemcachedServer], **kw: object) -> PopulateConfig:
    base: dict[str, object] = {
        "source_dir": src,
        "destinations": [node(d) for d in dests],
        "state_file": tmp / "state" / "populate.json",
        "workers": 2,
        "poll_interval": 0.05,
        "bad_file_timeout": 30.0,
        "destination_timeout": 20.0,
        "node_key_format": "{host}:{port}",
        "progress_interval": 0.0,
    }
    base.update(kw)
    return PopulateConfig(**base)  # type: ignore[arg-type]


@dataclass
class Background:
    """The populator running in a thread, so a test can change the directory under it."""

    cfg: PopulateConfig
    events: list[Progress] = field(default_factory=list)
    summary: PopulateSummary | None = None
    error: BaseException | None = None
    thread: threading.Thread | None = None

    def start(self) -> Background:
        def run() -> None:
            try:
                self.summary = populate(self.cfg, self.events.append)
            except BaseException as e:
                self.error = e

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        return self

    def wait_for(self, pred: Callable[[], bool], timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not pred():
            if self.error is not None:
                raise AssertionError(f"populator failed: {self.error}")
            assert time.monotonic() < deadline, "timed out waiting"
            time.sleep(0.02)

    def rounds(self) -> int:
        return max((e.round for e in self.events), default=0)

    def join(self, timeout: float = 60.0) -> None:
        assert self.thread is not None
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "populator did not finish"
