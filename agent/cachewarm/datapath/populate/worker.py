"""One pool worker's job: verify one data file and, only if every check passes, write all of its
items to the destination(s) with pipelined quiet meta sets, routed by ketama. Runs in a pool process:
everything it gets and returns is picklable."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from cachewarm.datapath import format as df
from cachewarm.datapath import pool
from cachewarm.datapath.encode import MAX_BINARY_KEY, Batch, encode_file
from cachewarm.datapath.ketama import KetamaRing
from cachewarm.datapath.meta import DestinationUnavailable, MetaConnection, retry_while_unavailable
from cachewarm.datapath.populate.config import WorkerParams

DEST_ERROR = "dest_error"


@dataclass
class FileOutcome:
    name: str
    status: str  # "ok", a df.Status value, or DEST_ERROR
    reason: str = ""
    records: int = 0
    stored: int = 0
    present: int = 0
    expired: int = 0
    bytes: int = 0
    attempts: int = 0
    identities: dict[str, tuple[int, int]] = field(default_factory=dict)
    per_node: dict[str, int] = field(default_factory=dict)


class RateLimiter:
    def __init__(self, rate: float | None) -> None:
        self.rate = rate
        self.start = time.monotonic()
        self.count = 0

    def take(self, n: int) -> None:
        if not self.rate:
            return
        self.count += n
        ahead = self.count / self.rate - (time.monotonic() - self.start)
        if ahead > 0:
            time.sleep(ahead)


def write_records(verdict: df.Verdict, params: WorkerParams, out: FileOutcome) -> None:
    """One attempt at writing all of a verified file's items. Raises DestinationUnavailable."""
    assert verdict.data is not None and verdict.header is not None and verdict.trailer is not None
    nodes = params.nodes
    ring = (
        KetamaRing(nodes, params.node_key_format, params.ketama_reps, params.hash_delimiter)
        if len(nodes) > 1
        else None
    )
    skipped = [0, 0]  # expired, binary keys too long for memcached
    batches: Iterable[Batch]
    try:
        batches = encode_file(verdict, params, ring, skipped)
    except df.CorruptRecord as e:
        out.status, out.reason = df.Status.CORRUPT.value, str(e)
        return
    conns = [MetaConnection(n.host, n.port, params.socket_timeout) for n in nodes]
    try:
        for n, c in zip(nodes, conns, strict=True):
            ident = c.connect()
            out.identities[n.address] = (ident.pid, ident.started)
        limiter = RateLimiter(params.items_per_second)
        per_node = [0] * len(nodes)
        try:
            for idx, payload, count in batches:
                conns[idx].send_batch(payload, count)
                per_node[idx] += count
                limiter.take(count)
        except df.CorruptRecord as e:  # unreachable: a large file was walked first; kept as a guard
            raise AssertionError(f"record check failed after sending began: {e}") from e
        sent = present = errors = 0
        first_error = None
        for n, c in zip(nodes, conns, strict=True):
            t = c.flush()
            sent += t.sent
            present += t.not_stored
            errors += t.errors
            if t.first_error and first_error is None:
                first_error = f"{n.address} answered {t.first_error!r}"
        out.records = verdict.trailer.record_count
        out.expired = skipped[0]
        out.present = present
        out.stored = sent - present - errors
        out.per_node = {n.address: k for n, k in zip(nodes, per_node, strict=True)}
        if errors:
            out.status = DEST_ERROR
            out.reason = f"{errors} of {sent} writes failed; first: {first_error}"
        elif skipped[1]:
            out.status = DEST_ERROR
            out.reason = (
                f"{skipped[1]} binary keys longer than {MAX_BINARY_KEY} bytes cannot be written to memcached"
            )
        else:
            out.status = "ok"
    finally:
        for c in conns:
            c.close()


def apply_file(path: str, params: WorkerParams) -> FileOutcome:
    """Verify one data file and, only if it passes every check, write all of its items."""
    name = os.path.basename(path)
    out = FileOutcome(name=name, status="")
    try:
        # Checks 1-3 here; check 4 runs in encode_file, over every record before any is sent.
        verdict = df.check_file(path, walk_records=False, buffer=pool.read_buffer())
    except OSError as e:
        # Vanished, or unreadable blocks on a ro,norecovery view: look again next round.
        out.status, out.reason = df.Status.INCOMPLETE.value, f"cannot read: {e}"
        return out
    if not verdict.ok:
        out.status, out.reason = verdict.status.value, verdict.reason
        return out
    out.bytes = len(verdict.data or b"")
    try:
        for attempt in retry_while_unavailable(params.destination_timeout):
            with attempt:
                out.attempts += 1
                out.identities.clear()
                write_records(verdict, params, out)
    except DestinationUnavailable as e:
        out.status = DEST_ERROR
        out.reason = (
            f"destination unavailable for {params.destination_timeout:g}s ({out.attempts} attempts): {e}"
        )
    return out
