"""One pool worker's job: verify one data file and, only if every check passes, write all of its
items to the destination(s), routed by ketama: in add mode pipelined binary-protocol ADDs whose
answers carry the CAS of each item stored (kept, with the file's source stamps, for the file's
re-check: recheck.py), in set mode quiet meta sets. Items too large for their destination are never
sent (a store memcached cannot allocate deletes the key's live value, in add mode too): they come
back named. Runs in a pool process: everything it gets and returns is picklable.

The file is mapped, not read (no copy into this process). A version 2 file (docs/data-format.md
section 7) is sent as ranges of its own bytes (plan.py, send_v2.py); a version 1 file is encoded
(encode.py). Once a file is consumed its pages are dropped from the page cache: nothing reads it again
soon, and the dump's next files reuse that memory instead of growing the cache
(measured: docs/populator.md)."""

from __future__ import annotations

import contextlib
import math
import mmap
import os
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

from cachewarm.datapath import format as df
from cachewarm.datapath import format_v2 as v2
from cachewarm.datapath.binproto import BinaryConnection, BinaryProtocolRefused, store_request
from cachewarm.datapath.encode import EXPIRY_MARGIN, EncodeStats, FileJob, encode_file
from cachewarm.datapath.format_v2 import dest_expiry
from cachewarm.datapath.meta import BatchCounts, MetaConnection
from cachewarm.datapath.populate import hostclock
from cachewarm.datapath.populate.config import WorkerParams
from cachewarm.datapath.populate.plan import PLAN_ADD_BINARY, PLAN_ADD_TEXT, PLAN_SET, plan
from cachewarm.datapath.populate.ratelimit import RateLimiter
from cachewarm.datapath.populate.send_v2 import send_planned
from cachewarm.datapath.populate.state import NodeCounts
from cachewarm.datapath.presence import save_probes
from cachewarm.datapath.wire import DestinationUnavailable, retry_while_unavailable

DEST_ERROR = "dest_error"
# This host's clock disagrees with the dumper host's: the expiries cannot be kept (hostclock.py).
HOST_CLOCK = "host_clock"
# The destination stayed unavailable (refused, reset, timed out) for the destination timeout.
DEST_UNAVAILABLE = "dest_unavailable"
# Add mode with the re-check on, and a file whose format carries no source stamps (version 1 or 2).
NO_STAMPS = "no_stamps"


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
    version: int = 0  # the file's data format version, once it verified
    records: int = 0
    bytes: int = 0
    attempts: int = 0
    # Whether any byte of the file may have reached a destination (False: it did not verify yet).
    sent: bool = False
    identities: dict[str, tuple[int, int]] = field(default_factory=dict)
    # Per destination address: its clock's offset from this host's when this attempt connected.
    clock_offsets: dict[str, int] = field(default_factory=dict)
    # Per destination address written to (all of them, or the job's only_nodes).
    nodes: dict[str, NodeCounts] = field(default_factory=dict)
    oversize: list[OversizeItem] = field(default_factory=list)
    # For the file's re-check (add mode, format 3): per destination address, the stored items' record
    # offsets (packed int64) and the CAS our ADD gave each (packed u64; 0: not ours for sure, a
    # resend's EXISTS), and this host's wall clock after the last write.
    recheck: dict[str, tuple[bytes, bytes]] = field(default_factory=dict)
    written_at: float = 0.0


def _ours(conn: MetaConnection, data: bytes | memoryview, version: int, offsets: list[int]) -> int:
    """How many of these records (named by offset; they answered NS) hold exactly our value and
    flags in the destination: our own earlier attempt stored them. The others hold a live write."""
    recs = [df.record_at(data, at, version) for at in offsets]
    got = conn.get_many([r.key for r in recs])
    return sum(
        1 for r in recs if (it := got.get(r.key)) is not None and it.value == r.value and it.flags == r.flags
    )


def _write_binary(
    node: str,
    host: str,
    port: int,
    params: WorkerParams,
    data: bytes | memoryview,
    version: int,
    offsets: list[int],
    clock_offset: int,
) -> tuple[list[int], int, str | None]:
    """Write these records with the binary protocol: (offsets answered 'exists', errors, first error)."""
    reqs = []
    for n, at in enumerate(offsets):
        r = df.record_at(data, at, version)
        # As the meta sets (moved onto the destination's clock); expired since it was encoded: sent
        # anyway, it lands expired (memcached takes a past absolute time as such).
        expiry = 0 if r.exptime == df.NEVER_EXPIRES else dest_expiry(r.exptime - EXPIRY_MARGIN, clock_offset)
        expiry = max(1, expiry) if expiry else 0
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


def expiry_shifts(
    header: df.Header, job: FileJob, conns: dict[int, MetaConnection], n: int
) -> tuple[int, ...]:
    """Per node: what is added to a record's exptime less EXPIRY_MARGIN (the encoders' T) to give
    the T its destination ends the item at: never after the source did, at most ~1 s before
    (docs/reliability.md "How a TTL is carried"). The clock is the loop's measurement (to a few ms)
    unless this connection's own reading says it moved since (then the lower of the two bounds); the
    source's clock seen from this host ahead of the file's brings every expiry forward by that much
    (hostclock.shortening)."""
    frac = header.expiry_fraction
    if frac is not None:
        frac -= hostclock.shortening(header, job.source_clock)
    out = []
    for i in range(n):
        c = conns.get(i)
        if c is None:
            out.append(0)
            continue
        lo = c.clock_low
        if job.clock_lows and job.clock_lows[i] is not None:
            lo = min(job.clock_lows[i], c.clock_low + 1)  # β < one reading's bound + 1 s
        if frac is None:  # an older dumper's file: its exptime may be 1 s late (EXPIRY_MARGIN)
            out.append(math.floor(lo))
        else:
            out.append(math.floor(frac + lo) + EXPIRY_MARGIN)
    return tuple(out)


@dataclass
class NodeShare:
    """What the walk set aside for one destination (record offsets), and how many it found expired."""

    expired: int
    oversize: list[int]
    long_keys: list[int]


def _account(
    verdict: df.Verdict,
    params: WorkerParams,
    job: FileJob,
    conns: dict[int, MetaConnection],
    totals: dict[int, BatchCounts],
    shares: dict[int, NodeShare],
    out: FileOutcome,
    shifts: tuple[int, ...],
    inline_binary: bool = False,
) -> None:
    """After the meta sets: the binary-protocol records (unless `inline_binary`: the binary ADDs
    already carried them), what became of every item per destination, the file's status."""
    assert verdict.data is not None and verdict.header is not None and verdict.trailer is not None
    nodes, data, version = params.nodes, verdict.data, verdict.header.version
    errors, first_error = 0, None
    for i, c in conns.items():
        addr = nodes[i].address
        t, share = totals[i], shares[i]
        if t.errors and first_error is None:
            first_error = f"{addr} answered {t.first_error!r}"
            if t.first_error_at >= 0:
                first_error += f" to the add of key {df.record_at(data, t.first_error_at, version).key!r}"
        exists, b_errors, b_first = ([], 0, None)
        if share.long_keys and not t.errors and not inline_binary:
            exists, b_errors, b_first = _write_binary(
                addr,
                nodes[i].connect_host,
                nodes[i].port,
                params,
                data,
                version,
                share.long_keys,
                shifts[i],
            )
        first_error = first_error or b_first
        errors += t.errors + b_errors
        # A resend names each NS (tags): values that are ours were stored by an earlier attempt.
        resent = _ours(c, data, version, t.not_stored_tags + exists) if job.tagged else 0
        not_stored = t.not_stored + len(exists)
        binary = len(share.long_keys)
        out.nodes[addr] = NodeCounts(
            stored=t.sent + (0 if inline_binary else binary) - not_stored - t.errors - b_errors,
            present=not_stored - resent,
            resent=resent,
            expired=share.expired,
            oversize=len(share.oversize),
            binary=binary,
        )
        for at in share.oversize:
            r = df.record_at(data, at, version)
            out.oversize.append(OversizeItem(addr, r.key, len(r.value), r.flags))
    out.records = verdict.trailer.record_count
    if errors:
        out.status = DEST_ERROR
        out.reason = f"{errors} writes failed; first: {first_error}"
    else:
        out.status = "ok"


def _connect(params: WorkerParams, mine: list[int], out: FileOutcome) -> dict[int, MetaConnection]:
    nodes = params.nodes
    conns = {i: MetaConnection(nodes[i].connect_host, nodes[i].port, params.socket_timeout) for i in mine}
    try:
        for i, c in conns.items():
            ident = c.connect()
            out.identities[nodes[i].address] = (ident.pid, ident.started)
            out.clock_offsets[nodes[i].address] = c.clock_offset
    except BaseException:
        for c in conns.values():
            c.close()
        raise
    return conns


def write_records(verdict: df.Verdict, params: WorkerParams, job: FileJob, out: FileOutcome) -> None:
    """One attempt at writing all of a verified version 1 file's items. Raises DestinationUnavailable."""
    assert verdict.data is not None and verdict.header is not None and verdict.trailer is not None
    nodes = params.nodes
    ring = params.routing.ring(nodes)
    mine = [i for i in range(len(nodes)) if job.only_nodes is None or i in job.only_nodes]
    stats = EncodeStats(len(nodes))
    # Connected first: each destination's clock offset (read at connect) goes into its items' T.
    conns = _connect(params, mine, out)
    try:
        offsets = expiry_shifts(verdict.header, job, conns, len(nodes))
        try:
            batches = encode_file(verdict, params, replace(job, clock_offsets=offsets), ring, stats)
        except df.CorruptRecord as e:
            out.status, out.reason = df.Status.CORRUPT.value, str(e)
            return
        out.sent = True
        limiter = RateLimiter(params.items_per_second, params.bytes_per_second)
        try:
            for idx, payload, count, order in batches:
                c = conns[idx]
                c.send_batch(payload, count, order)
                if c.totals.errors:  # e.g. out of memory: start no more stores; the file fails below
                    break
                limiter.take(count, len(payload))
        except df.CorruptRecord as e:  # unreachable: a large file was walked first; kept as a guard
            raise AssertionError(f"record check failed after sending began: {e}") from e
        totals = {i: c.flush() for i, c in conns.items()}
        shares = {i: NodeShare(stats.expired[i], stats.oversize[i], stats.long_keys[i]) for i in conns}
        _account(verdict, params, job, conns, totals, shares, out, offsets)
    finally:
        for c in conns.values():
            c.close()


def write_records_v2(verdict: df.Verdict, params: WorkerParams, job: FileJob, out: FileOutcome) -> None:
    """One attempt at writing all of a verified version 2 file's items: check 4 and the plan in one
    walk, then the file's own bytes. Raises DestinationUnavailable."""
    assert verdict.data is not None and verdict.header is not None and verdict.trailer is not None
    nodes = params.nodes
    mine = [i for i in range(len(nodes)) if job.only_nodes is None or i in job.only_nodes]
    start, end = df.records_bounds(verdict.header, verdict.trailer)
    version = verdict.header.version
    stamped = version == df.VERSION_3
    mode = PLAN_SET if params.mode == "set" else PLAN_ADD_TEXT if params.store == "text" else PLAN_ADD_BINARY
    # Connected first: each destination's clock offset (read at connect) goes into its items' T.
    conns = _connect(params, mine, out)
    binary: dict[int, BinaryConnection] = {}
    shifts = expiry_shifts(verdict.header, job, conns, len(nodes))
    try:
        try:
            p = plan(
                verdict.data,
                start,
                end,
                int(time.time()),
                job.budgets,
                mode,
                params.batch_items,
                params.batch_bytes,
                params.routing.ring(nodes),
                job.only_nodes,
                shifts,
                probes=params.probe_dir is not None,
                stamped=stamped,
            )
            df.check_record_count(verdict.header, verdict.trailer, p.records)
        except (v2.RecordError, df.CorruptRecord) as e:
            out.status, out.reason = df.Status.CORRUPT.value, str(e)
            return
        if (
            mode == PLAN_ADD_BINARY
        ):  # a connection of their own: memcached picks the protocol by its first byte
            for i in conns:
                binary[i] = BinaryConnection(
                    nodes[i].connect_host, nodes[i].port, params.socket_timeout
                ).open()
        out.sent = True
        totals = send_planned(
            conns,
            verdict.data,
            p,
            job.tagged,
            params.items_per_second,
            params.bytes_per_second,
            params.socket_timeout,
            {i: b.sock for i, b in binary.items() if b.sock is not None} if binary else None,
        )
        out.written_at = time.time()
        shares = {i: NodeShare(p.nodes[i].expired, p.nodes[i].oversize, p.nodes[i].binary) for i in conns}
        _account(verdict, params, job, conns, totals, shares, out, shifts, inline_binary=bool(binary))
        if binary and stamped and params.store == "binary" and out.status == "ok":
            for i in conns:
                out.recheck[nodes[i].address] = _recheck_share(p.nodes[i].order, totals[i], job.tagged)
        if params.probe_dir is not None and out.status == "ok":
            keys = {
                i: [df.record_at(verdict.data, at, version).key for at in p.nodes[i].binary] for i in conns
            }
            save_probes(
                params.probe_dir,
                out.name,
                {
                    nodes[i].address: (
                        p.nodes[i].probes,
                        p.nodes[i].probe_expiry,
                        keys[i],
                        p.nodes[i].probe_stamps,
                    )
                    for i in conns
                },
            )
    finally:
        for c in conns.values():
            c.close()
        for b in binary.values():
            b.close()


_I64 = struct.Struct("<q")
_U64 = struct.Struct("<Q")


def _recheck_share(order: bytes, counts: BatchCounts, tagged: bool) -> tuple[bytes, bytes]:
    """(record offsets, c_w) of the items one destination's re-check looks at: every item our ADD
    stored (its CAS), and on a resend every EXISTS (c_w 0: it may be our own earlier write, or a
    client's; the re-check compares its value with the source's when the source changed)."""
    cas = counts.cas or b""
    n = len(order) // _I64.size
    if len(cas) != n * _U64.size:
        raise AssertionError(f"{len(cas)} bytes of CAS for {n} items")
    offs, ours = bytearray(), bytearray()
    exists = set(counts.not_stored_tags) if tagged else set()
    for k in range(n):
        (c,) = _U64.unpack_from(cas, k * _U64.size)
        if c or (tagged and _I64.unpack_from(order, k * _I64.size)[0] in exists):
            offs += order[k * _I64.size : (k + 1) * _I64.size]
            ours += cas[k * _U64.size : (k + 1) * _U64.size]
    return bytes(offs), bytes(ours)


@contextlib.contextmanager
def mapped(path: str) -> Iterator[memoryview]:
    """The file's bytes, mapped read-only (no copy); empty for an empty file."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            yield memoryview(b"")
            return
        flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)  # fault the pages in at once
        try:
            mm = mmap.mmap(fd, size, flags=flags, prot=mmap.PROT_READ)
        except ValueError as e:  # it shrank since fstat (rewritten under us): not whole yet, as unreadable
            raise OSError(f"{path}: its size changed while it was being mapped ({e})") from e
        view = memoryview(mm)
        try:
            yield view
        finally:
            with contextlib.suppress(BufferError):  # a view still held (a traceback): the GC unmaps it
                view.release()
                mm.close()
    finally:
        os.close(fd)


def _drop_cached(path: str) -> None:
    """Drop a consumed file's pages from the page cache (clean pages: the dumper fsynced the file)."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def apply_file(path: str, params: WorkerParams, job: FileJob) -> FileOutcome:
    """Verify one data file and, only if it passes every check, write all of its items. A resend
    (after a reconnect here, or of a file the populator may have started before) tags its sets."""
    name = os.path.basename(path)
    out = FileOutcome(name=name, status="")
    parsed = df.parse_name(name)
    if parsed is None:
        raise df.FormatError(f"{name}: not a data file name")
    with contextlib.ExitStack() as stack:
        try:
            data = stack.enter_context(mapped(path))
        except OSError as e:
            # Vanished, or unreadable blocks on a ro,norecovery view: look again next round.
            out.status, out.reason = df.Status.INCOMPLETE.value, f"cannot read: {e}"
            return out
        # Checks 1-3 here; check 4 runs in the walk that encodes or plans, before anything is sent.
        verdict = df.check_bytes(parsed, data, walk_records=False)
        if not verdict.ok:
            out.status, out.reason = verdict.status.value, verdict.reason
            return out
        out.bytes = len(data)
        assert verdict.header is not None
        out.version = verdict.header.version
        if (why := hostclock.check(verdict.header, job.source_clock)) is not None:
            out.status, out.reason = HOST_CLOCK, why
            return out
        if params.mode == "add" and params.store == "binary" and verdict.header.version != df.VERSION_3:
            out.status = NO_STAMPS
            out.reason = (
                f"data format version {verdict.header.version} carries no source CAS: its items cannot be "
                "re-checked, so a delete, touch or increment the source got during the warm could be undone. "
                "Dump again with a current cachewarm-dump (format 3), or pass --accept-no-recheck"
            )
            return out
        write = write_records_v2 if verdict.header.version in df.COMMAND_VERSIONS else write_records
        try:
            for attempt in retry_while_unavailable(params.destination_timeout):
                with attempt:
                    out.attempts += 1
                    out.identities.clear()
                    out.clock_offsets.clear()
                    out.nodes.clear()
                    out.oversize.clear()
                    write(verdict, params, job if out.attempts == 1 else replace(job, tagged=True), out)
        except DestinationUnavailable as e:
            out.status = DEST_UNAVAILABLE
            out.reason = (
                f"destination unavailable for {params.destination_timeout:g}s ({out.attempts} attempts): {e}"
            )
        del verdict, data
    if out.status == "ok":
        _drop_cached(path)
    return out
