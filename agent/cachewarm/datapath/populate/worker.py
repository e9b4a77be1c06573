"""One pool worker's job: verify one data file and, only if every check passes, write all of its
items to the destination(s), routed by ketama: pipelined quiet meta sets, and the binary protocol for
the keys no meta command can name. Items too large for their destination are never sent (a store
memcached cannot allocate deletes the key's live value, in add mode too): they come back named.
Runs in a pool process: everything it gets and returns is picklable."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field, replace

from cachewarm.datapath import format as df
from cachewarm.datapath import pool
from cachewarm.datapath.binproto import BinaryConnection, BinaryProtocolRefused, store_request
from cachewarm.datapath.encode import EXPIRY_MARGIN, EncodeStats, FileJob, encode_file, record_at
from cachewarm.datapath.meta import DestinationUnavailable, MetaConnection, retry_while_unavailable
from cachewarm.datapath.populate.config import WorkerParams
from cachewarm.datapath.populate.state import NodeCounts

DEST_ERROR = "dest_error"
# The destination stayed unavailable (refused, reset, timed out) for the destination timeout.
DEST_UNAVAILABLE = "dest_unavailable"


@dataclass(frozen=True)
class OversizeItem:
    destination: str
    key: bytes
    value_len: int
    flags: int


@dataclass
class FileOutcome:
    name: str
    status: str  # "ok", a df.Status value, or DEST_ERROR
    reason: str = ""
    records: int = 0
    bytes: int = 0
    attempts: int = 0
    # Whether any byte of the file may have reached a destination (False: it did not verify yet).
    sent: bool = False
    identities: dict[str, tuple[int, int]] = field(default_factory=dict)
    # Per destination address written to (all of them, or the job's only_nodes).
    nodes: dict[str, NodeCounts] = field(default_factory=dict)
    oversize: list[OversizeItem] = field(default_factory=list)


class RateLimiter:
    """Items/s and bytes/s (either None = unlimited): sleeps once the batches sent so far are ahead."""

    def __init__(self, rate: float | None, byte_rate: float | None = None) -> None:
        self.rate = rate
        self.byte_rate = byte_rate
        self.start = time.monotonic()
        self.count = 0
        self.nbytes = 0

    def take(self, n: int, nbytes: int = 0) -> None:
        if not self.rate and not self.byte_rate:
            return
        self.count += n
        self.nbytes += nbytes
        due = max(
            self.count / self.rate if self.rate else 0.0,
            self.nbytes / self.byte_rate if self.byte_rate else 0.0,
        )
        ahead = due - (time.monotonic() - self.start)
        if ahead > 0:
            time.sleep(ahead)


def _ours(conn: MetaConnection, data: bytes | memoryview, offsets: list[int]) -> int:
    """How many of these records (named by offset; they answered NS) hold exactly our value and
    flags in the destination: our own earlier attempt stored them. The others hold a live write."""
    recs = [record_at(data, at) for at in offsets]
    got = conn.get_many([r.key for r in recs])
    return sum(
        1 for r in recs if (it := got.get(r.key)) is not None and it.value == r.value and it.flags == r.flags
    )


def _write_binary(
    node: str, host: str, port: int, params: WorkerParams, data: bytes | memoryview, offsets: list[int]
) -> tuple[list[int], int, str | None]:
    """Write these records with the binary protocol: (offsets answered 'exists', errors, first error)."""
    reqs = []
    for n, at in enumerate(offsets):
        r = record_at(data, at)
        # As the meta sets (encode.ttl_token); expired since it was encoded: sent anyway, it lands
        # expired (memcached takes a past absolute time as such).
        expiry = 0 if r.exptime == df.NEVER_EXPIRES else max(1, r.exptime - EXPIRY_MARGIN)
        reqs.append((store_request(params.mode, r.key, r.value, r.flags, expiry, n), r.value))
    try:
        with BinaryConnection(host, port, params.socket_timeout) as bc:
            res = bc.store(reqs)
    except BinaryProtocolRefused as e:
        return (
            [],
            len(reqs),
            f"{node}: {len(reqs)} keys no meta command can name need the binary protocol: {e}",
        )
    first = f"{node} answered {res.first_error}" if res.first_error else None
    return [offsets[n] for n in res.not_stored], res.errors, first


def write_records(verdict: df.Verdict, params: WorkerParams, job: FileJob, out: FileOutcome) -> None:
    """One attempt at writing all of a verified file's items. Raises DestinationUnavailable."""
    assert verdict.data is not None and verdict.header is not None and verdict.trailer is not None
    nodes = params.nodes
    ring = params.routing.ring(nodes)
    mine = [i for i in range(len(nodes)) if job.only_nodes is None or i in job.only_nodes]
    stats = EncodeStats(len(nodes))
    try:
        batches = encode_file(verdict, params, job, ring, stats)
    except df.CorruptRecord as e:
        out.status, out.reason = df.Status.CORRUPT.value, str(e)
        return
    out.sent = True
    conns = {i: MetaConnection(nodes[i].connect_host, nodes[i].port, params.socket_timeout) for i in mine}
    try:
        for i, c in conns.items():
            ident = c.connect()
            out.identities[nodes[i].address] = (ident.pid, ident.started)
        limiter = RateLimiter(params.items_per_second, params.bytes_per_second)
        try:
            for idx, payload, count in batches:
                c = conns[idx]
                c.send_batch(payload, count)
                if c.totals.errors:  # e.g. out of memory: stop adding failed stores (each one
                    break  # deletes its key's live value); the file fails below
                limiter.take(count, len(payload))
        except df.CorruptRecord as e:  # unreachable: a large file was walked first; kept as a guard
            raise AssertionError(f"record check failed after sending began: {e}") from e
        errors, first_error = 0, None
        data = verdict.data
        for i, c in conns.items():
            addr = nodes[i].address
            t = c.flush()
            if t.errors and first_error is None:
                first_error = f"{addr} answered {t.first_error!r}"
            exists, b_errors, b_first = ([], 0, None)
            if stats.long_keys[i] and not t.errors:
                exists, b_errors, b_first = _write_binary(
                    addr, nodes[i].connect_host, nodes[i].port, params, data, stats.long_keys[i]
                )
            first_error = first_error or b_first
            errors += t.errors + b_errors
            # A resend names each NS (tags): values that are ours were stored by an earlier attempt.
            resent = _ours(c, data, t.not_stored_tags + exists) if job.tagged else 0
            not_stored = t.not_stored + len(exists)
            binary = len(stats.long_keys[i])
            out.nodes[addr] = NodeCounts(
                stored=t.sent + binary - not_stored - t.errors - b_errors,
                present=not_stored - resent,
                resent=resent,
                expired=stats.expired[i],
                oversize=len(stats.oversize[i]),
                binary=binary,
            )
            for at in stats.oversize[i]:
                r = record_at(data, at)
                out.oversize.append(OversizeItem(addr, r.key, len(r.value), r.flags))
        out.records = verdict.trailer.record_count
        if errors:
            out.status = DEST_ERROR
            out.reason = f"{errors} writes failed; first: {first_error}"
        else:
            out.status = "ok"
    finally:
        for c in conns.values():
            c.close()


def apply_file(path: str, params: WorkerParams, job: FileJob) -> FileOutcome:
    """Verify one data file and, only if it passes every check, write all of its items. A resend
    (after a reconnect here, or of a file the populator may have started before) tags its sets."""
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
                out.nodes.clear()
                out.oversize.clear()
                write_records(verdict, params, job if out.attempts == 1 else replace(job, tagged=True), out)
    except DestinationUnavailable as e:
        out.status = DEST_UNAVAILABLE
        out.reason = (
            f"destination unavailable for {params.destination_timeout:g}s ({out.attempts} attempts): {e}"
        )
    return out
