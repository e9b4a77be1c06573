"""Data-file records -> pipelined writes: in set mode quiet meta sets (`ms <key> <len> [b] T<expiry>
F<flags> MS q`), in add mode text adds (`add <key> <flags> <expiry> <len>`).

The one place that knows how an item travels to memcached:
- add mode never sends `ms`: when memcached cannot allocate the new item (`SERVER_ERROR out of
  memory`), `ms` unlinks the key's existing item — in add mode (`ME`) too, so a live value would be
  lost — while the classic text `add` and binary ADDQ leave it (memcached's proto_text.c /
  proto_parser.c, 1.6.18 .. 1.6.45; measured). `add` answers every item (`STORED`, `NOT_STORED`, an
  error), in order: the sender names each reply's record by counting (`order`);
- keys: plain text; in set mode base64 with the `b` flag, or, when even that is too long for a meta
  command, the binary protocol (`binproto.py`); in add mode every non-plain key goes by the binary
  protocol (ADDQ: no text form);
- expiry: always an absolute unix time, EXPIRY_MARGIN before the record's (memcached reads a T above
  30 days as one), so however long an item waits before it is sent it never outlives the source's;
- size: an item a destination cannot hold (memcached's own rule, `ItemLimit`) is never sent, because
  a store memcached cannot allocate unlinks the key's live value, in add mode too.
How a key is named (plain, base64, binary) is `wire.py`'s. The C loop (_speedups.c) gets these
constants from `configure` below at import, and tests check that it writes the same bytes and reports
the same records as the Python loop.
"""

from __future__ import annotations

import base64
import struct
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol

from cachewarm.datapath import format as df
from cachewarm.datapath import format_v2 as v2
from cachewarm.datapath.placement import Placer
from cachewarm.datapath.wire import MAX_WIRE_KEY, PLAIN_KEY

if TYPE_CHECKING:
    from cachewarm.datapath.populate.hostclock import SourceClock

from cachewarm.datapath import _speedups  # required (setup.py): the C loop and the command lines

Mode = Literal["add", "set"]
# memcached reads an exptime/TTL above 30 days as an absolute unix time.
MAX_RELATIVE_TTL = 30 * 24 * 3600
# memcached parses an exptime/T as a signed 32-bit number.
MAX_EXPIRY = 2**31 - 1
# Seconds sent before a record's exptime (format_v2.EXPIRY_MARGIN).
EXPIRY_MARGIN = v2.EXPIRY_MARGIN
# The C loop copies each value into its batch once; above this average record size the Python
# loop's zero-copy pieces are as fast (measured, 200k x 10 KB: 67-73k items/s vs 68-77k) and copy
# nothing; at 1 KB the C loop is ~1.3x faster end to end.
C_LOOP_MAX_AVG_RECORD = 4096

# memcached's item size rule (items.c item_size_ok / item_make_header, the same in 1.6.18 .. 1.6.45):
# sizeof(item) + key + 1 (NUL) + value + 2 (CRLF) [+ 4 if flags != 0] [+ 8 with CAS] must not exceed
# item_size_max (-I). sizeof(item) is 48 on 64-bit builds (smaller on 32-bit: the rule stays safe).
ITEM_HEADER = 48
ITEM_KEY_NUL = 1
ITEM_VALUE_CRLF = 2
ITEM_FLAGS_SUFFIX = 4
ITEM_CAS = 8
# No limit (tests and tools that do not know the destination).
UNLIMITED = (1 << 62) - 1

_ORDER = struct.Struct("=q")  # the C loop's order entries (native int64)


def configure_speedups() -> None:
    """Hand the C loop the format's sizes and limits and the rules above (the key rules are the
    core's: dumper-cpp/core/key_token.c)."""
    _speedups.configure(df.RECORD_FIXED, df.MAX_KEY_LEN, df.NEVER_EXPIRES, ITEM_FLAGS_SUFFIX, EXPIRY_MARGIN)


configure_speedups()


@dataclass(frozen=True)
class ItemLimit:
    """What one destination can hold, from its `stats settings`."""

    item_size_max: int
    cas: bool = True

    @property
    def budget(self) -> int:
        """The most key + value (+ ITEM_FLAGS_SUFFIX when flags != 0) bytes one item may have."""
        fixed = ITEM_HEADER + ITEM_KEY_NUL + ITEM_VALUE_CRLF + (ITEM_CAS if self.cas else 0)
        return self.item_size_max - fixed

    def fits(self, key_len: int, value_len: int, flags: int) -> bool:
        return item_fits(self.budget, key_len, value_len, flags)


def item_fits(budget: int, key_len: int, value_len: int, flags: int) -> bool:
    return key_len + value_len + (ITEM_FLAGS_SUFFIX if flags else 0) <= budget


def ttl_token(exptime: int, now: int) -> int | None:
    """The `T` value for an item expiring at `exptime` (-1 = never): 0 for never, else the absolute
    expiry less EXPIRY_MARGIN (memcached reads it as absolute: any unix time of this century is above
    30 days), or None if that is not after `now` (expired: not sent)."""
    if exptime == df.NEVER_EXPIRES:
        return 0
    t = exptime - EXPIRY_MARGIN
    return t if t > now else None


class EncodeParams(Protocol):
    """What the encoder needs of the populator's worker parameters."""

    @property
    def nodes(self) -> Sequence[object]: ...
    @property
    def mode(self) -> Mode: ...
    @property
    def batch_items(self) -> int: ...
    @property
    def batch_bytes(self) -> int: ...
    @property
    def one_pass_max_bytes(self) -> int: ...


@dataclass(frozen=True)
class FileJob:
    """How one file is encoded on top of the worker's parameters."""

    # Per node: ItemLimit.budget of that destination (UNLIMITED when unknown).
    budgets: tuple[int, ...]
    # Send only the items of these nodes (a destination that restarted gets its share again).
    only_nodes: frozenset[int] | None = None
    # Tag each set with `O<record offset>`: an `NS` then names its record, so a resend can tell
    # our own earlier write from a live one.
    tagged: bool = False
    # Per node: its clock's offset from this host's in whole seconds (MetaConnection.clock_offset);
    # each T is moved onto that clock (format_v2.dest_expiry's rule). None = all 0.
    clock_offsets: tuple[int, ...] | None = None
    # Per node: the lower bound of its clock against this host's, measured to a few ms by the loop
    # (ServerClock.lo; None: not measured, the worker's own one-reading bound is used). The worker
    # turns it into clock_offsets with the file header's expiry_fraction (worker.expiry_shifts).
    clock_lows: tuple[float | None, ...] | None = None
    # The source memcached's clock from this host (populate.hostclock.SourceClock), when known: each
    # file's header is checked against it.
    source_clock: SourceClock | None = None


@dataclass
class EncodeStats:
    """What the encoder met in one file, per node index. Items are named by their record's offset."""

    nodes: int
    records: int = 0
    expired: list[int] = field(default_factory=list)
    # Too large for the node's destination: never sent.
    oversize: list[list[int]] = field(default_factory=list)
    # Binary keys no meta command can name: for the binary protocol.
    long_keys: list[list[int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.expired = [0] * self.nodes
        self.oversize = [[] for _ in range(self.nodes)]
        self.long_keys = [[] for _ in range(self.nodes)]


# (node index, payload: one buffer or pieces for scatter-gather I/O, item count, add mode: the record
# offset of each item in send order (MetaConnection.send_batch's `order`), set mode: None)
Batch = tuple[int, bytes | list[bytes | memoryview], int, list[int] | None]


def encode_sets(
    verdict: df.Verdict,
    params: EncodeParams,
    job: FileJob,
    ring: Placer | None,
    stats: EncodeStats,
) -> Iterator[tuple[int, list[bytes | memoryview], int, list[int] | None]]:
    """Yield (node index, `ms ... q` / `add` batch as pieces (values are views into the file), item
    count, add mode: each item's record offset),
    running the format's record checks (section 3, check 4) on the way; raises df.CorruptRecord
    naming the bad record. Expired, oversize and long-key items are not in the batches but in
    `stats`. The caller decides whether to send before the generator is exhausted."""
    assert verdict.data is not None and verdict.header is not None and verdict.trailer is not None
    # The file's bytes may be a memoryview into a worker's read buffer: keys are memoryview slices
    # too (formatting and the plain-key check take them as they are).
    mv = memoryview(verdict.data)
    n_nodes = len(params.nodes)
    batch_items, batch_bytes = params.batch_items, params.batch_bytes
    parts: list[list[bytes | memoryview]] = [[] for _ in range(n_nodes)]
    add = params.mode == "add"
    orders: list[list[int]] = [[] for _ in range(n_nodes)]
    counts = [0] * n_nodes
    sizes = [0] * n_nodes
    budgets, only, tagged = job.budgets, job.only_nodes, job.tagged
    # A value up to this fits whatever its key and flags.
    roomy = [b - df.MAX_KEY_LEN - ITEM_FLAGS_SUFFIX for b in budgets]
    # The command lines are dumper-cpp/core's (store_lines.c); a tagged set ends in ` O<record
    # offset>` (its NS names it).
    ms_line, add_line = _speedups.core_ms_line, _speedups.core_add_line
    plain = PLAIN_KEY.fullmatch
    b64 = base64.b64encode
    never = df.NEVER_EXPIRES
    suffix = ITEM_FLAGS_SUFFIX
    margin = EXPIRY_MARGIN
    fixed = df.RECORD_FIXED
    now = int(time.time())
    offs = job.clock_offsets
    start, end = df.records_bounds(verdict.header, verdict.trailer)
    idx = 0
    nrec = 0
    for kstart, vstart, nxt, flags, exptime in df.record_spans(mv, start, end):
        nrec += 1
        key = mv[kstart:vstart]
        if ring is not None:
            idx = ring.index_for(bytes(key))
            if only is not None and idx not in only:
                continue
        # ttl_token's rule, inlined: this loop runs once per item; then onto the node's clock
        # (format_v2.dest_expiry, inlined).
        if exptime == never:
            ttl = 0
        elif exptime - margin > now:
            ttl = exptime - margin
            if offs is not None:
                ttl += offs[idx]
            if ttl > MAX_EXPIRY:
                ttl = MAX_EXPIRY  # memcached parses T as a signed 32-bit number; clamping only shortens
            elif ttl <= MAX_RELATIVE_TTL:
                stats.expired[idx] += 1
                continue
        else:
            stats.expired[idx] += 1
            continue
        vlen = nxt - vstart
        # ItemLimit.fits, inlined (and only worked out for values near the limit).
        if vlen > roomy[idx] and vstart - kstart + vlen + (suffix if flags else 0) > budgets[idx]:
            stats.oversize[idx].append(kstart - fixed)
            continue
        p = parts[idx]
        # Two pieces per item: the command line carries the previous value's \r\n in front of it
        # (fewer list appends and iovecs; measured ~15% less encoding time than three pieces).
        sep = b"\r\n" if p else b""
        if add:
            if not plain(key):  # no text form: ADDQ
                stats.long_keys[idx].append(kstart - fixed)
                continue
            line = sep + add_line(key, flags, ttl, vlen)
            orders[idx].append(kstart - fixed)
        elif plain(key):
            line = sep + ms_line(key, False, vlen, ttl, flags, False, tagged, kstart - fixed)
        else:
            enc = b64(key)
            if len(enc) > MAX_WIRE_KEY:
                stats.long_keys[idx].append(kstart - fixed)
                continue
            line = sep + ms_line(enc, True, vlen, ttl, flags, False, tagged, kstart - fixed)
        p.append(line)
        p.append(mv[vstart:nxt])
        counts[idx] += 1
        sizes[idx] += vlen
        if counts[idx] >= batch_items or sizes[idx] >= batch_bytes:
            p.append(b"\r\n")
            yield idx, p, counts[idx], (orders[idx] if add else None)
            parts[idx] = []
            orders[idx] = []
            counts[idx] = sizes[idx] = 0
    stats.records += nrec
    df.check_record_count(verdict.header, verdict.trailer, nrec)
    for i in range(n_nodes):
        if counts[i]:
            parts[i].append(b"\r\n")
            yield i, parts[i], counts[i], (orders[i] if add else None)


def encode_sets_c(
    verdict: df.Verdict, params: EncodeParams, job: FileJob, stats: EncodeStats
) -> list[tuple[int, bytes, int, list[int] | None]]:
    """`encode_sets` for one destination, in C: the same bytes (values copied into each batch, which
    for small items is cheaper than a scatter-gather piece per value), the same checks, the same
    records in `stats`."""
    assert verdict.data is not None and verdict.header is not None and verdict.trailer is not None
    start, end = df.records_bounds(verdict.header, verdict.trailer)
    try:
        batches, nrec, expired, long_keys, oversize = _speedups.encode_ms(
            verdict.data,
            start,
            end,
            int(time.time()),
            params.mode == "add",
            params.batch_items,
            params.batch_bytes,
            job.budgets[0],
            job.clock_offsets[0] if job.clock_offsets else 0,
        )
    except ValueError as e:
        raise df.CorruptRecord(str(e)) from e
    stats.records += nrec
    stats.expired[0] += expired
    stats.long_keys[0] += long_keys
    stats.oversize[0] += oversize
    df.check_record_count(verdict.header, verdict.trailer, nrec)
    add = params.mode == "add"
    return [(0, b, n, [o for (o,) in _ORDER.iter_unpack(order)] if add else None) for b, n, order in batches]


def encode_file(
    verdict: df.Verdict,
    params: EncodeParams,
    job: FileJob,
    ring: Placer | None,
    stats: EncodeStats,
) -> Iterable[Batch]:
    """The batches of a verified file, by the cheapest way that never lets a bad file be partly
    sent: a file up to `one_pass_max_bytes` is checked and encoded in one pass and held encoded (the
    C loop for one destination, small items and untagged sets, else the Python loop); a larger one
    is checked first (a cheap walk), then encoded batch by batch as the caller sends. Raises
    df.CorruptRecord before returning if any record is bad."""
    assert verdict.data is not None and verdict.trailer is not None and verdict.header is not None
    one_pass = len(verdict.data) <= params.one_pass_max_bytes
    avg_record = verdict.trailer.records_bytes / max(1, verdict.trailer.record_count)
    if one_pass and ring is None and not job.tagged and avg_record <= C_LOOP_MAX_AVG_RECORD:
        return encode_sets_c(verdict, params, job, stats)
    if one_pass:
        return list(encode_sets(verdict, params, job, ring, stats))
    df.check_records(verdict.data, verdict.header, verdict.trailer)
    return encode_sets(verdict, params, job, ring, stats)


def record_at(data: bytes | memoryview, offset: int) -> df.Record:
    """The record at `offset` of a verified file's bytes (an offset from EncodeStats or an `O` tag)."""
    vlen, flags, exptime, klen = df.RECORD.unpack_from(data, offset)
    kstart = offset + df.RECORD_FIXED
    return df.Record(
        bytes(data[kstart : kstart + klen]),
        flags,
        exptime,
        memoryview(data)[kstart + klen : kstart + klen + vlen],
    )
