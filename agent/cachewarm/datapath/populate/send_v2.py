"""Sending a planned data format v2 file (plan.py) to its destinations: the C sender (_v2send.c: one
poll loop over every destination's connection, the file's bytes written as they are, replies read
concurrently, no GIL) when it is built, else `send_py`, its twin here over MetaConnection. Both keep
at most two batches in flight per connection, start no batch once any connection has read an error,
and pace batches by the rate limits (items/s and bytes/s); tests run both against real memcacheds."""

from __future__ import annotations

from collections.abc import Mapping

from cachewarm.datapath.meta import BatchCounts, DestinationUnavailable, MetaConnection
from cachewarm.datapath.populate.plan import PIECE_MN, PIECE_S, Plan, pieces_of
from cachewarm.datapath.populate.ratelimit import RateLimiter

try:
    from cachewarm.datapath import _speedups
except ImportError:  # pragma: no cover - exercised where no C compiler was available
    _speedups = None  # type: ignore[assignment]


def send_planned(
    conns: Mapping[int, MetaConnection],
    data: bytes | memoryview,
    plan: Plan,
    tagged: bool,
    items_per_second: float | None,
    bytes_per_second: float | None,
    timeout: float,
    use_c: bool = True,
) -> dict[int, BatchCounts]:
    """Send each connection (by destination index) its share of the plan; returns what each answered.
    Raises DestinationUnavailable when a connection breaks or stays silent for `timeout`."""
    if use_c and _speedups is not None:
        idx = list(conns)
        fds = []
        for i in idx:
            sock = conns[i].sock
            assert sock is not None
            fds.append(sock.fileno())
        res = _speedups.send_v2(
            fds,
            data,
            [plan.nodes[i].pieces for i in idx],
            tagged,
            float(items_per_second or 0),
            float(bytes_per_second or 0),
            timeout,
        )
        out: dict[int, BatchCounts] = {}
        for i, (sent, not_stored, tags, errors, first_error, failure) in zip(idx, res, strict=True):
            c = conns[i]
            if failure is not None:
                raise DestinationUnavailable(f"{c.host}:{c.port}: {failure}")
            out[i] = BatchCounts(sent, not_stored, errors, first_error, list(tags or []))
        return out
    return send_py(conns, data, plan, items_per_second, bytes_per_second)


def _batches(data: memoryview, pieces: bytes) -> list[tuple[list[bytes | memoryview], int]]:
    """The plan's pieces as MetaConnection batches (views of the file; send_batch adds the mn)."""
    out: list[tuple[list[bytes | memoryview], int]] = []
    cur: list[bytes | memoryview] = []
    for off, n in pieces_of(pieces):
        if off == PIECE_MN:
            out.append((cur, n))
            cur = []
        elif off == PIECE_S:
            cur.append(b"S")
        else:
            cur.append(data[off : off + n])
    assert not cur, "pieces end with a batch's mn"
    return out


def send_py(
    conns: Mapping[int, MetaConnection],
    data: bytes | memoryview,
    plan: Plan,
    items_per_second: float | None,
    bytes_per_second: float | None = None,
) -> dict[int, BatchCounts]:
    """`send_planned` in Python: batches interleaved over the destinations, as the v1 loop sends."""
    mv = memoryview(data)
    queues = {i: _batches(mv, plan.nodes[i].pieces) for i in conns}
    limiter = RateLimiter(items_per_second, bytes_per_second)
    k = 0
    stop = False
    while not stop and any(k < len(q) for q in queues.values()):
        for i, q in queues.items():
            if k >= len(q):
                continue
            pieces, count = q[k]
            c = conns[i]
            c.send_batch(pieces, count)
            limiter.take(count, sum(len(p) for p in pieces) + len(b"mn\r\n"))  # as _v2send.c counts
            if any(x.totals.errors for x in conns.values()):
                stop = True  # each further failed store would delete a live value
                break
        k += 1
    return {i: c.flush() for i, c in conns.items()}
