"""Shared fixtures: real memcached servers on 127.0.0.1, started and stopped by each test."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cachewarm.testing.memcached import MemcachedServer

REPO = Path(__file__).resolve().parent.parent
VECTORS = REPO / "tests" / "vectors"


@pytest.fixture
def memcached() -> Iterator[Callable[..., MemcachedServer]]:
    """Factory: `memcached(memory_mb=64, max_item_size="8m")` starts a server; all stop at teardown."""
    started: list[MemcachedServer] = []

    def start(**kw: object) -> MemcachedServer:
        srv = MemcachedServer(**kw).start()  # type: ignore[arg-type]
        started.append(srv)
        return srv

    yield start
    for srv in started:
        srv.stop()


@pytest.fixture(scope="session")
def dumper_bin() -> Path:
    """The Release build of cachewarm-dump (make builds it; CACHEWARM_DUMP overrides)."""
    path = Path(os.environ.get("CACHEWARM_DUMP", REPO / "build" / "release" / "cachewarm-dump"))
    if not path.exists():
        pytest.fail(f"cachewarm-dump not built at {path}: run `make build`")
    return path
