"""Data-file records -> pipelined quiet meta sets (`ms <key> <len> [b] T<ttl> F<flags> ME|MS q`).

The one place that knows how an item travels to memcached: which keys go as plain text (the others as
base64 with the `b` flag), when a TTL must be sent as an absolute time (over 30 days), and which
binary keys memcached cannot hold. `meta.py` (reads), the demo and the tests take `wire_key` and
`ttl_token` from here; the C loop (_speedups.c) gets these constants from `configure` below at import,
and tests check that it writes the same bytes as the Python loop.
"""

from __future__ import annotations

import base64
import re
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Literal, Protocol

from cachewarm.datapath import format as df
from cachewarm.datapath.ketama import KetamaRing

try:  # the encoding loop in C (setup.py builds it; optional: without it the Python loop runs)
    from cachewarm.datapath import _speedups
except ImportError:  # pragma: no cover - exercised where no C compiler was available
    _speedups = None  # type: ignore[assignment]

Mode = Literal["add", "set"]
# memcached's KEY_MAX_LENGTH: the key token on the wire, plain or base64.
MAX_WIRE_KEY = 250
# The longest binary key whose base64 form fits in MAX_WIRE_KEY (186 bytes).
MAX_BINARY_KEY = MAX_WIRE_KEY // 4 * 3
# Keys made only of these bytes (printable ASCII but space) travel as they are.
PLAIN_KEY_BYTES = (0x21, 0x7E)
# memcached reads an exptime/TTL above 30 days as an absolute unix time.
MAX_RELATIVE_TTL = 30 * 24 * 3600
# The C loop copies each value into its batch once; above this average record size the Python
# loop's zero-copy pieces are as fast (measured, 200k x 10 KB: 67-73k items/s vs 68-77k) and copy
# nothing; at 1 KB the C loop is ~1.3x faster end to end.
C_LOOP_MAX_AVG_RECORD = 4096

_PLAIN_KEY = re.compile(b"[\\x%02x-\\x%02x]{1,%d}" % (*PLAIN_KEY_BYTES, MAX_WIRE_KEY))
_TAIL = {"add": b" ME q\r\n", "set": b" MS q\r\n"}


def configure_speedups() -> None:
    """Hand the C loop the format's sizes and limits and the rules above (it restates none)."""
    if _speedups is not None:
        _speedups.configure(
            df.RECORD_FIXED,
            df.MAX_KEY_LEN,
            df.NEVER_EXPIRES,
            MAX_RELATIVE_TTL,
            PLAIN_KEY_BYTES[0],
            PLAIN_KEY_BYTES[1],
            MAX_WIRE_KEY,
        )


configure_speedups()


def is_plain_key(key: bytes | memoryview) -> bool:
    """A key memcached's text protocol takes as is: 1..250 bytes in 0x21..0x7E."""
    return _PLAIN_KEY.fullmatch(key) is not None


def wire_key(key: bytes) -> tuple[bytes, bytes]:
    """(key token, extra flag) for a meta command: base64 + ` b` for keys with other bytes."""
    if is_plain_key(key):
        return key, b""
    enc = base64.b64encode(key)
    if len(enc) > MAX_WIRE_KEY:
        raise ValueError(
            f"key of {len(key)} bytes is too long for a base64 meta key (max {MAX_BINARY_KEY} bytes)"
        )
    return enc, b" b"


def ttl_token(exptime: int, now: int) -> int | None:
    """The `T` value for an item expiring at `exptime` (-1 = never), or None if it has expired."""
    if exptime == df.NEVER_EXPIRES:
        return 0
    remaining = exptime - now
    if remaining <= 0:
        return None
    # A relative TTL above 30 days would be misread as an absolute time: send the absolute time.
    return remaining if remaining <= MAX_RELATIVE_TTL else exptime


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
    @property
    def use_speedups(self) -> bool: ...


# (node index, payload: one buffer or pieces for scatter-gather I/O, item count)
Batch = tuple[int, bytes | list[bytes | memoryview], int]


def encode_sets(
    verdict: df.Verdict, params: EncodeParams, ring: KetamaRing | None, stats: list[int]
) -> Iterator[tuple[int, list[bytes | memoryview], int]]:
    """Yield (node index, `ms ... q` batch as pieces (values are views into the file), item count),
    running the format's record checks (section 3, check 4) on the way; raises df.CorruptRecord
    naming the bad record. `stats[0]` counts the items skipped as expired, `stats[1]` binary keys too
    long for memcached's base64 key. The caller decides whether to send before the generator is
    exhausted."""
    assert verdict.data is not None and verdict.header is not None and verdict.trailer is not None
    # The file's bytes may be a memoryview into a worker's read buffer: keys are memoryview slices
    # too (formatting and the plain-key check take them as they are).
    mv = memoryview(verdict.data)
    n_nodes = len(params.nodes)
    tail = _TAIL[params.mode]
    batch_items, batch_bytes = params.batch_items, params.batch_bytes
    parts: list[list[bytes | memoryview]] = [[] for _ in range(n_nodes)]
    counts = [0] * n_nodes
    sizes = [0] * n_nodes
    plain = _PLAIN_KEY.fullmatch
    b64 = base64.b64encode
    never = df.NEVER_EXPIRES
    now = int(time.time())
    horizon = now + MAX_RELATIVE_TTL
    start, end = df.records_bounds(verdict.header, verdict.trailer)
    nrec = 0
    idx = 0
    for kstart, vstart, nxt, flags, exptime in df.record_spans(mv, start, end):
        nrec += 1
        if exptime == never:
            ttl = 0
        elif exptime > now:
            # ttl_token's rule, inlined: this loop runs once per item.
            ttl = exptime - now if exptime <= horizon else exptime
        else:
            stats[0] += 1
            continue
        key = mv[kstart:vstart]
        vlen = nxt - vstart
        if ring is not None:
            idx = ring.index_for(bytes(key))
        p = parts[idx]
        # Two pieces per item: the command line carries the previous value's \r\n in front of it
        # (fewer list appends and iovecs; measured ~15% less encoding time than three pieces).
        sep = b"\r\n" if p else b""
        if plain(key):
            p.append(b"%bms %b %d T%d F%d%b" % (sep, key, vlen, ttl, flags, tail))
        else:
            enc = b64(key)
            if len(enc) > MAX_WIRE_KEY:
                # memcached cannot hold it (base64 form > 250 chars): counted, and the file fails.
                stats[1] += 1
                continue
            p.append(b"%bms %b %d b T%d F%d%b" % (sep, enc, vlen, ttl, flags, tail))
        p.append(mv[vstart:nxt])
        counts[idx] += 1
        sizes[idx] += vlen
        if counts[idx] >= batch_items or sizes[idx] >= batch_bytes:
            p.append(b"\r\n")
            yield idx, p, counts[idx]
            parts[idx] = []
            counts[idx] = sizes[idx] = 0
    df.check_record_count(verdict.header, verdict.trailer, nrec)
    for i in range(n_nodes):
        if counts[i]:
            parts[i].append(b"\r\n")
            yield i, parts[i], counts[i]


def encode_sets_c(
    verdict: df.Verdict, params: EncodeParams, stats: list[int]
) -> list[tuple[int, bytes, int]]:
    """`encode_sets` for one destination, in C: the same bytes (values copied into each batch, which
    for small items is cheaper than a scatter-gather piece per value), the same checks."""
    assert _speedups is not None
    assert verdict.data is not None and verdict.header is not None and verdict.trailer is not None
    start, end = df.records_bounds(verdict.header, verdict.trailer)
    try:
        batches, nrec, expired, too_long = _speedups.encode_ms(
            verdict.data,
            start,
            end,
            int(time.time()),
            params.mode == "add",
            params.batch_items,
            params.batch_bytes,
        )
    except ValueError as e:
        raise df.CorruptRecord(str(e)) from e
    stats[0] += expired
    stats[1] += too_long
    df.check_record_count(verdict.header, verdict.trailer, nrec)
    return [(0, b, n) for b, n in batches]


def encode_file(
    verdict: df.Verdict, params: EncodeParams, ring: KetamaRing | None, stats: list[int]
) -> Iterable[Batch]:
    """The batches of a verified file, by the cheapest way that never lets a bad file be partly
    sent: a file up to `one_pass_max_bytes` is checked and encoded in one pass and held encoded (the
    C loop for one destination and small items, else the Python loop); a larger one is checked first
    (a cheap walk), then encoded batch by batch as the caller sends. Raises df.CorruptRecord before
    returning if any record is bad."""
    assert verdict.data is not None and verdict.trailer is not None and verdict.header is not None
    one_pass = len(verdict.data) <= params.one_pass_max_bytes
    avg_record = verdict.trailer.records_bytes / max(1, verdict.trailer.record_count)
    if (
        one_pass
        and ring is None
        and params.use_speedups
        and _speedups is not None
        and avg_record <= C_LOOP_MAX_AVG_RECORD
    ):
        return encode_sets_c(verdict, params, stats)
    if one_pass:
        return list(encode_sets(verdict, params, ring, stats))
    df.check_records(verdict.data, verdict.header, verdict.trailer)
    return encode_sets(verdict, params, ring, stats)
