"""Sending a planned data format v2 file (plan.py) to its destinations: the C sender (_v2send.c: one
poll loop over every destination's connection, the file's bytes written as they are, replies read
concurrently, no GIL). It keeps at most two batches in flight per connection, starts no batch once any
connection has read an error or failed, and paces batches by the rate limits (items/s and bytes/s);
tests run it and a Python oracle (tests/datapath/send_oracle.py) against real memcacheds. When a
connection fails while another holds an error reply, the error is read and reported (the file
fails), not dropped with a retry."""

from __future__ import annotations

import socket
from collections.abc import Mapping

from cachewarm.datapath import _speedups  # required (setup.py)
from cachewarm.datapath.meta import BatchCounts, MetaConnection
from cachewarm.datapath.populate.plan import Plan
from cachewarm.datapath.wire import DestinationUnavailable


def send_planned(
    conns: Mapping[int, MetaConnection],
    data: bytes | memoryview,
    plan: Plan,
    tagged: bool,
    items_per_second: float | None,
    bytes_per_second: float | None,
    timeout: float,
    binary: Mapping[int, socket.socket] | None = None,
) -> dict[int, BatchCounts]:
    """Send each connection (by destination index) its share of the plan; returns what each answered.
    `binary`: the plan's binary ADDs (PLAN_ADD_BINARY) go on these sockets (one per destination, that
    have sent nothing yet: memcached picks a connection's protocol by its first byte), in C; each
    BatchCounts then has the CAS of every item stored. Raises DestinationUnavailable when a connection
    breaks or stays silent for `timeout`."""
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
    return settle(out, failures)


def settle(out: dict[int, BatchCounts], failures: dict[int, str]) -> dict[int, BatchCounts]:
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
