"""Data format v2 records (docs/data-format.md section 7) in Python: each record is the command that
stores the item — `ms <key> <len>[ b] T<expiry> F<flags> ME q O<offset>\\r\\n<value>\\r\\n`, or for a key
no meta command can name a binary-protocol ADDQ request. Version 3 (section 8) puts a 16-byte source
stamp (the item's CAS on the source at the read, its expiry on the source's clock) in front of each.

Check 4's walk of v2 records (section 7.2) through the one reader, dumper-cpp/core/record_v2.c (the
dumper's and the populator's C walk's), and the encoding of the Python test writer (writer.py). The
core's vectors (tests/vectors/core/record_v2.txt), the golden files (tests/vectors/v2/, v3/) and a
Python oracle (tests/datapath/v2_oracle.py) pin them. No import of format.py (which imports this
module); the key rules are wire.py's.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

from cachewarm.datapath import _speedups  # required (setup.py)
from cachewarm.datapath.wire import MAX_BINARY_KEY, is_plain_key

MAX_KEY_LEN = 250
NEVER_EXPIRES = -1
# Seconds sent before a record's exptime: a version 2 record's T is its exptime less this (docs/
# populator.md "Expiry"). The dumper records exptime as its wall clock plus the remaining TTL `mg t`
# reports, in whole seconds, from a server whose clock ticks once a second behind the wall clock: up
# to 1 s later than the source's own expiry. One second less keeps the destination's expiry in
# [source's - 2 s, source's], never after it. T is absolute: memcached reads a T above 30 days as a
# unix time and parses it as a signed 32-bit number.
EXPIRY_MARGIN = 1
MAX_RELATIVE_TTL = 30 * 24 * 3600
MAX_EXPIRY = 2**31 - 1
U32_MAX = 2**32 - 1

BINARY_MAGIC, OP_ADDQ = 0x80, 0x12
# magic, opcode, key length, extras length, data type, vbucket, total body, opaque, cas; flags, expiration
BINARY_HEAD = struct.Struct(">BBHBBHIIQII")
BINARY_HEAD_LEN = BINARY_HEAD.size  # 32
# Version 3's source stamp: source_cas (u64), source_exp (i64, -1 = never).
STAMP = struct.Struct("<Qq")
STAMP_LEN = STAMP.size  # 16


class RecordError(ValueError):
    """A record that is not exactly as section 7.1 writes it; the message names the record."""


def needs_binary_record(key: bytes) -> bool:
    """A key no meta command can name: not printable ASCII and too long for a base64 key token."""
    return not is_plain_key(key) and len(key) > MAX_BINARY_KEY


def expiry_to_send(exptime: int) -> int:
    """T of an item whose version 1 exptime is `exptime` (-1 = never)."""
    return 0 if exptime == NEVER_EXPIRES else exptime - EXPIRY_MARGIN


def dest_expiry(expiry: int, offset: int) -> int:
    """The T to send a destination whose clock is `offset` whole seconds ahead of this host's (its
    `stats time` minus ours, rounded down): memcached converts an absolute T with its own idea of the
    time, so the T moves onto that clock. 0 stays 0 (never); above MAX_EXPIRY it is clamped (only
    shortens); -1 when it would not be an absolute time there (not sent: expired). The C twin is
    _v2plan.h's v2_dest_expiry."""
    if expiry == 0:
        return 0
    t = min(expiry + offset, MAX_EXPIRY)
    return t if t > MAX_RELATIVE_TTL else -1


def exptime_of(expiry: int) -> int:
    return NEVER_EXPIRES if expiry == 0 else expiry + EXPIRY_MARGIN


def valid_expiry(t: int) -> bool:
    return t == 0 or MAX_RELATIVE_TTL < t <= MAX_EXPIRY


@dataclass(frozen=True, slots=True)
class Span:
    """One v2 record of a file: where it is and what it holds (the key decoded, exptime as in v1)."""

    offset: int
    key: bytes
    flags: int
    exptime: int
    value_start: int
    value_end: int
    end: int  # the next record's offset
    binary: bool  # a binary-protocol record
    # Meta records: the offset of the `E` of `ME` (set mode sends an `S` there).
    mode_at: int = -1
    # Version 3: the record's source stamp (section 8.1); the command starts at `offset + STAMP_LEN`.
    source_cas: int = 0
    source_exp: int = NEVER_EXPIRES
    stamped: bool = False


def _bad(n: int, pos: int, why: str) -> RecordError:
    return RecordError(f"record {n} at offset {pos}: {why}")


def parse_at(data: bytes | memoryview, pos: int, end: int, n: int = 0, stamped: bool = False) -> Span:
    """The record at `pos` (record number `n`, for messages), checked as section 7.2 says; `stamped`:
    a version 3 record (section 8.2), its stamp first. The reader is the dumper's and the populator's
    C walk's (dumper-cpp/core/record_v2.c)."""
    try:
        key, flags, expiry, vstart, vlen, nxt, binary, mode_at, cas, exp = _speedups.record_parse(
            data, pos, end, stamped
        )
    except ValueError as e:
        raise _bad(n, pos, str(e)) from None
    return Span(
        pos, key, flags, exptime_of(expiry), vstart, vstart + vlen, nxt, binary, mode_at, cas, exp, stamped
    )


def spans(data: bytes | memoryview, start: int, end: int, stamped: bool = False) -> Iterator[Span]:
    """Every record of `data[start:end]` (check 4's walk; `stamped`: version 3's); raises RecordError at
    the first bad one. Counting them against the trailer is the caller's."""
    pos, n = start, 0
    while pos < end:
        s = parse_at(data, pos, end, n, stamped)
        yield s
        pos = s.end
        n += 1


def meta_line(key: bytes, value_len: int, flags: int, exptime: int, offset: int) -> bytes:
    """A meta record's line (everything before the value) for a key that has a meta form
    (dumper-cpp/core, the dumper's own encoding)."""
    return _speedups.core_record_meta_line(key, value_len, flags, expiry_to_send(exptime), offset)


def binary_head(key_len: int, value_len: int, flags: int, exptime: int) -> bytes:
    return _speedups.core_record_binary_head(key_len, value_len, flags, expiry_to_send(exptime))


def encode_record(
    key: bytes,
    flags: int,
    exptime: int,
    value: bytes,
    offset: int,
    stamp: tuple[int, int] | None = None,
) -> bytes:
    """One v2 record starting at file offset `offset`; with `stamp` (source_cas, source_exp) a version 3
    record (the stamp, then the command whose O names the stamp's offset)."""
    if stamp is not None:
        cas, exp = stamp
        if not 0 <= cas < 2**64 or (exp != NEVER_EXPIRES and exp <= 0):
            raise ValueError(f"source stamp {stamp}: cas a u64, source_exp -1 or > 0")
        return STAMP.pack(cas, exp) + encode_record(key, flags, exptime, value, offset)
    if not 1 <= len(key) <= MAX_KEY_LEN:
        raise ValueError(f"key length {len(key)} not in 1..{MAX_KEY_LEN}")
    if exptime != NEVER_EXPIRES and not MAX_RELATIVE_TTL < expiry_to_send(exptime) <= MAX_EXPIRY:
        raise ValueError(f"exptime {exptime} has no absolute T in {MAX_RELATIVE_TTL + 1}..{MAX_EXPIRY}")
    if not 0 <= flags <= U32_MAX:
        raise ValueError(f"flags {flags} not a u32")
    if needs_binary_record(key):
        return binary_head(len(key), len(value), flags, exptime) + key + value
    return meta_line(key, len(value), flags, exptime, offset) + value + b"\r\n"
