"""Sending a planned data format v2 file (plan.py) to its destinations: the C sender (_v2send.c: one
poll loop over every destination's connection, the file's bytes written as they are, replies read
concurrently, no GIL) when it is built, else `send_py`, its twin here over MetaConnection. Both keep
at most two batches in flight per connection, start no batch once any connection has read an error or
failed, and pace batches by the rate limits (items/s and bytes/s); tests run both against real
memcacheds. When a connection fails while another holds an error reply, the error is read and
reported (the file fails), not dropped with a retry."""

from __future__ import annotations

import socket
from collections.abc import Mapping

from cachewarm.datapath.meta import BatchCounts, MetaConnection
from cachewarm.datapath.populate.plan import PIECE_LINE, PIECE_MN, PIECE_S, Plan, pieces_of
from cachewarm.datapath.populate.ratelimit import RateLimiter
from cachewarm.datapath.wire import DestinationUnavailable

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
    binary: Mapping[int, socket.socket] | None = None,
) -> dict[int, BatchCounts]:
    """Send each connection (by destination index) its share of the plan; returns what each answered.
    `binary`: the plan's binary ADDs (PLAN_ADD_BINARY) go on these sockets (one per destination, that
    have sent nothing yet: memcached picks a connection's protocol by its first byte), in C; each
    BatchCounts then has the CAS of every item stored. Raises DestinationUnavailable when a connection
    breaks or stays silent for `timeout`."""
    if binary is not None or (use_c and _speedups is not None):
        if _speedups is None:
            raise RuntimeError("binary-protocol ADDs need the populator's C extension: build it")
        idx = list(conns)
        fds = []
        for i in idx:
            sock = binary[i] if binary is not None else conns[i].sock
            assert sock is not None
            fds.append(sock.fileno())
        res = _speedups.send_v2(
            fds,
            data,
            [plan.nodes[i].pieces for i in idx],
            [plan.nodes[i].lines for i in idx],
            [plan.nodes[i].order for i in idx],
            tagged,
            float(items_per_second or 0),
            float(bytes_per_second or 0),
            timeout,
            binary is not None,
        )
        out: dict[int, BatchCounts] = {}
        failures: dict[int, str] = {}
        for i, (sent, not_stored, tags, errors, first_error, failure, at, cas) in zip(idx, res, strict=True):
            c = conns[i]
            if failure is not None:
                failures[i] = f"{c.host}:{c.port}: {failure}"
            out[i] = BatchCounts(sent, not_stored, errors, first_error, list(tags or []), at, cas=cas)
        return _settle(out, failures)
    return send_py(conns, data, plan, items_per_second, bytes_per_second)


def _settle(out: dict[int, BatchCounts], failures: dict[int, str]) -> dict[int, BatchCounts]:
    """A failed connection is a retry (DestinationUnavailable) unless some destination answered an
    error: then that error is the outcome (the file fails), the failure counted as one more."""
    if not failures:
        return out
    if not any(b.errors for b in out.values()):
        raise DestinationUnavailable(next(iter(failures.values())))
    for i, why in failures.items():
        b = out[i]
        b.errors += 1
        b.first_error = b.first_error or f"connection failed: {why}"
        b.not_stored_tags = []  # not reliable on a connection that failed
    return out


def _batches(
    data: memoryview, pieces: bytes, lines: bytes, order: list[int]
) -> list[tuple[list[bytes | memoryview], int, list[int] | None]]:
    """The plan's pieces as MetaConnection batches (views of the file; send_batch adds the mn), each
    with its items' record offsets in add mode (None in set mode)."""
    out: list[tuple[list[bytes | memoryview], int, list[int] | None]] = []
    cur: list[bytes | memoryview] = []
    done = 0
    for off, n in pieces_of(pieces):
        if off == PIECE_MN:
            out.append((cur, n, order[done : done + n] if order else None))
            done += n
            cur = []
        elif off == PIECE_S:
            cur.append(b"S")
        elif off <= PIECE_LINE:
            at = PIECE_LINE - off
            cur.append(lines[at : at + n])
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
    queues = {
        i: _batches(mv, plan.nodes[i].pieces, plan.nodes[i].lines, plan.nodes[i].order_offsets())
        for i in conns
    }
    limiter = RateLimiter(items_per_second, bytes_per_second)
    failures: dict[int, str] = {}
    k = 0
    stop = False
    while not stop and any(k < len(q) for q in queues.values()):
        for i, q in queues.items():
            if k >= len(q):
                continue
            pieces, count, order = q[k]
            c = conns[i]
            try:
                c.send_batch(pieces, count, order)
            except DestinationUnavailable as e:
                failures[i] = str(e)
            limiter.take(count, sum(len(p) for p in pieces) + len(b"mn\r\n"))  # as _v2send.c counts
            if failures or any(x.totals.errors for x in conns.values()):
                stop = True  # no more stores once a destination failed or answered an error
                break
        k += 1
    out: dict[int, BatchCounts] = {}
    for i, c in conns.items():
        if i not in failures:
            try:
                c.flush()
            except DestinationUnavailable as e:
                failures[i] = str(e)
        out[i] = c.totals
    return _settle(out, failures)
