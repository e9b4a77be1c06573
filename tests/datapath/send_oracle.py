"""The Python oracle of the v2 sender (agent/cachewarm/datapath/populate/send_v2.py, _v2send.c): the
same batches, over MetaConnection, interleaved over the destinations, with the same stops and pacing;
tests run both against real memcacheds."""

from __future__ import annotations

from collections.abc import Mapping

from cachewarm.datapath.meta import BatchCounts, MetaConnection
from cachewarm.datapath.populate.plan import PIECE_LINE, PIECE_MN, PIECE_S, Plan, pieces_of
from cachewarm.datapath.populate.ratelimit import RateLimiter
from cachewarm.datapath.populate.send_v2 import settle
from cachewarm.datapath.wire import DestinationUnavailable


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
    return settle(out, failures)
