"""A data file's re-check (docs/reliability.md "Live traffic during the warm"; design: the rule is
dumper-cpp/core's recheck.c): once the settle delay has passed since the file's last write, every item
our ADD stored is looked at on the source, and where the source changed it since the dumper read it
(gone, another CAS or size, an earlier end) our copy is deleted from the destination — only if it is
still ours (`md <key> C<c_w> q`). A destination that holds a client's value instead (its CAS is not
ours) keeps it unless, after the settle delay, it still differs from the source's on the same CAS: then
it derives from our stale copy (a client's incr, append or touch on it) and is deleted, guarded by that
CAS. A re-check never writes a value.

The bulk (looking at the source, the guarded deletes) runs in C without the GIL (_recheck.c); the
rest here: the destinations that hold a client's value, and the keys no meta command names (the
binary protocol: their CAS is compared, their expiry cannot be read). Runs in a pool process.
"""

from __future__ import annotations

import contextlib
import math
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from cachewarm.datapath import format as df
from cachewarm.datapath import presence
from cachewarm.datapath.binproto import KEY_EXISTS, KEY_NOT_FOUND, STATUS_OK, BinaryConnection
from cachewarm.datapath.meta import Item, MetaConnection, ServerIdentity
from cachewarm.datapath.nodes import Node
from cachewarm.datapath.populate.config import WorkerParams
from cachewarm.datapath.populate.state import RecheckCounts
from cachewarm.datapath.populate.worker import DEST_UNAVAILABLE, mapped
from cachewarm.datapath.wire import DestinationUnavailable, meta_expressible, retry_while_unavailable

try:
    from cachewarm.datapath import _speedups
except ImportError:  # pragma: no cover - exercised where no C compiler was available
    _speedups = None  # type: ignore[assignment]

# dumper-cpp/core/cachewarm_core.h
SOURCE_UNCHANGED, SOURCE_CHANGED, SOURCE_UNSURE, LOOK_NO_META = 0, 1, 2, 3
MD_DELETED, MD_GONE, MD_NOT_OURS = 0, 1, 2
CMP_KEEP, CMP_GONE, CMP_WAIT, CMP_DELETE, CMP_UNSETTLED = 0, 1, 2, 3, 4
# Looks at a destination holding a client's value before it is left as it is and reported.
MAX_ROUNDS = 3
# Keys per pipelined batch on the source and the destinations.
BATCH = 1000
_U64 = struct.Struct("<Q")
# The source restarted since the dump: its CAS values mean nothing any more.
SOURCE_RESTARTED = "source_restarted"
RECHECK_ERROR = "recheck_error"


@dataclass(frozen=True)
class RecheckJob:
    name: str
    # Per destination address: the items to look at (record offsets, packed int64) and the CAS our
    # ADD gave each (packed u64; 0 = a resend's EXISTS: may be ours, may be a client's).
    shares: dict[str, tuple[bytes, bytes]]
    # The source, as the populate first saw it (pid, start time): a restart since makes every CAS
    # meaningless.
    source: Node
    source_identity: tuple[int, int]


@dataclass
class RecheckOutcome:
    name: str
    status: str = "ok"
    reason: str = ""
    nodes: dict[str, RecheckCounts] = field(default_factory=dict)


def _keys(blob: bytes) -> Iterator[bytes]:
    i = 0
    while i < len(blob):
        n = blob[i]
        yield blob[i + 1 : i + 1 + n]
        i += 1 + n


def _blob(keys: list[bytes]) -> bytes:
    return b"".join(bytes([len(k)]) + k for k in keys)


def _as_tuple(it: Item | None) -> tuple[int, int, int, int, bytes]:
    """An item as core_compare_verdict takes it: (present, cas, flags, ttl, value)."""
    if it is None:
        return (0, 0, 0, -1, b"")
    return (1, it.cas, it.flags, -1 if it.ttl is None else it.ttl, it.value)


def _delete(d: MetaConnection, items: list[tuple[bytes, int]], timeout: float) -> list[int]:
    """CAS-guarded deletes on the destination: MD_* per item."""
    meta = [(k, c) for k, c in items if meta_expressible(k)]
    out: dict[bytes, int] = {}
    if meta:
        assert d.sock is not None
        got = _speedups.dest_delete(
            d.sock.fileno(),
            _blob([k for k, _ in meta]),
            b"".join(_U64.pack(c) for _, c in meta),
            BATCH,
            timeout,
        )
        out.update({k: got[j] for j, (k, _) in enumerate(meta)})
    long = [(k, c) for k, c in items if not meta_expressible(k)]
    if long:
        with BinaryConnection(d.host, d.port, timeout) as bc:
            st = bc.delete_cas(long)
        codes = {STATUS_OK: MD_DELETED, KEY_NOT_FOUND: MD_GONE, KEY_EXISTS: MD_NOT_OURS}
        out.update({k: codes[s] for (k, _), s in zip(long, st, strict=True)})
    return [out[k] for k, _ in items]


def _settle_clients(
    s: MetaConnection,
    d: MetaConnection,
    keys: list[bytes],
    settle_s: float,
    timeout: float,
    counts: RecheckCounts,
) -> None:
    """Keys whose destination holds a value we did not write (or may not have): compare it with the
    source's (cw_compare_verdict), looking again after the settle delay while they differ."""
    before = dict.fromkeys(keys, 0)
    pending = list(keys)
    for rnd in range(1, MAX_ROUNDS + 1):
        if not pending:
            return
        src = s.get_many(pending, with_cas=True)
        dst = d.get_many(pending, with_cas=True)
        again: list[bytes] = []
        deletes: list[tuple[bytes, int]] = []
        for k in pending:
            v = _speedups.core_compare_verdict(
                _as_tuple(src.get(k)), _as_tuple(dst.get(k)), before[k], rnd, MAX_ROUNDS, math.ceil(settle_s)
            )
            if v == CMP_KEEP:
                counts.client_overwrote += 1
            elif v == CMP_WAIT:
                before[k] = dst[k].cas
                again.append(k)
            elif v == CMP_DELETE:
                deletes.append((k, dst[k].cas))
            elif v == CMP_UNSETTLED:
                counts.unsettled += 1
        for (k, _), o in zip(deletes, _delete(d, deletes, timeout), strict=True):
            if o == MD_DELETED:
                counts.deleted_stale += 1
            elif o == MD_NOT_OURS:  # written again between the look and the delete
                if rnd < MAX_ROUNDS:
                    before[k] = 0
                    again.append(k)
                else:
                    counts.unsettled += 1
        pending = again
        if pending:
            time.sleep(settle_s)
    counts.unsettled += len(pending)


def _binary_keys(
    s: MetaConnection, keys: list[bytes], stamps: list[tuple[int, int, int]], timeout: float
) -> list[int]:
    """SOURCE_* of keys only the binary protocol names: by presence and CAS (GETK's header), their
    expiry cannot be read (docs/reliability.md)."""
    with BinaryConnection(s.host, s.port, timeout) as bc:
        got = bc.get_many_cas(keys)
    out = []
    for k, (cas, _, vlen) in zip(keys, stamps, strict=True):
        it = got.get(k)
        same = it is not None and it[2] == cas and (vlen < 0 or len(it[0]) == vlen)
        out.append(SOURCE_UNCHANGED if same else SOURCE_CHANGED)
    return out


def _one_destination(
    s: MetaConnection,
    d: MetaConnection,
    data: memoryview,
    stamped: bool,
    share: tuple[bytes, bytes],
    settle_s: float,
    timeout: float,
) -> RecheckCounts:
    offsets, ours = share
    counts = RecheckCounts()
    n = len(offsets) // 8
    if n == 0:
        return counts
    keys_blob, stamps = _speedups.stamped_keys(data, offsets, stamped)
    assert s.sock is not None
    verdicts = _speedups.source_look(s.sock.fileno(), keys_blob, stamps, BATCH, timeout)
    counts.rechecked = n
    if all(v == SOURCE_UNCHANGED for v in verdicts):
        return counts
    keys = list(_keys(keys_blob))
    binary = [j for j, v in enumerate(verdicts) if v == LOOK_NO_META]
    verdict = list(verdicts)
    if binary:
        counts.cas_only = len(binary)
        looked = _binary_keys(
            s,
            [keys[j] for j in binary],
            [_speedups.read_stamp(stamps, j * presence.READ_STAMP) for j in binary],
            timeout,
        )
        for j, v in zip(binary, looked, strict=True):
            verdict[j] = v
    to_delete: list[tuple[bytes, int]] = []
    compare: list[bytes] = []
    for j, v in enumerate(verdict):
        if v == SOURCE_UNCHANGED:
            continue
        counts.changed_at_source += 1
        (c_w,) = _U64.unpack_from(ours, j * 8)
        if c_w:
            to_delete.append((keys[j], c_w))
        else:
            compare.append(keys[j])
    for (k, _), o in zip(to_delete, _delete(d, to_delete, timeout), strict=True):
        if o == MD_DELETED:
            counts.deleted_stale += 1
        elif o == MD_NOT_OURS:
            compare.append(k)
    _settle_clients(s, d, compare, settle_s, timeout, counts)
    return counts


def recheck_file(path: str, params: WorkerParams, job: RecheckJob) -> RecheckOutcome:
    """Re-check one applied file (see the module doc). Retries while a server is unavailable, for the
    destination timeout."""
    out = RecheckOutcome(job.name)
    name = df.parse_name(job.name)
    assert name is not None
    nodes = {n.address: n for n in params.nodes}
    with mapped(path) as data:
        verdict = df.check_bytes(name, data, walk_records=False)
        if not verdict.ok or verdict.header is None:
            out.status, out.reason = RECHECK_ERROR, f"{job.name} no longer verifies: {verdict.reason}"
            return out
        stamped = verdict.header.version == df.VERSION_3
        try:
            for attempt in retry_while_unavailable(params.destination_timeout):
                with attempt, contextlib.ExitStack() as stack:
                    out.nodes.clear()
                    s = MetaConnection(job.source.connect_host, job.source.port, params.socket_timeout)
                    ident = s.connect()
                    stack.callback(s.close)
                    if not ident.same_as(ServerIdentity(*job.source_identity)):
                        out.status = SOURCE_RESTARTED
                        out.reason = (
                            f"the source {job.source.address} restarted during the warm (pid "
                            f"{job.source_identity[0]} -> {ident.pid}): the dump's items can no longer be "
                            "re-checked against it; warm again"
                        )
                        return out
                    for addr, share in job.shares.items():
                        d = MetaConnection(nodes[addr].connect_host, nodes[addr].port, params.socket_timeout)
                        d.open()
                        stack.callback(d.close)
                        try:
                            out.nodes[addr] = _one_destination(
                                s, d, data, stamped, share, params.settle_seconds, params.socket_timeout
                            )
                        except ConnectionError as e:  # from the C calls: retried like any other
                            raise DestinationUnavailable(str(e)) from e
        except DestinationUnavailable as e:
            out.status = DEST_UNAVAILABLE
            out.reason = f"re-check: unavailable for {params.destination_timeout:g}s: {e}"
        except (OSError, RuntimeError) as e:  # an error answer (e.g. SERVER_ERROR to md): named
            out.status, out.reason = RECHECK_ERROR, f"re-check of {job.name}: {e}"
        del verdict
    return out
