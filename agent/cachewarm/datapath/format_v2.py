"""Data format v2 records (docs/data-format.md section 7) in Python: each record is the command that
stores the item — `ms <key> <len>[ b] T<expiry> F<flags> ME q O<offset>\\r\\n<value>\\r\\n`, or for a key
no meta command can name a binary-protocol ADDQ request. Version 3 (section 8) puts a 16-byte source
stamp (the item's CAS on the source at the read, its expiry on the source's clock) in front of each.

The one Python walker of v2 records (check 4, section 7.2) and the writer's encoding. The C++ writer
(dumper-cpp/src/record_v2.cc) and the populator's C walk (_v2plan.c) are its twins; the golden vectors
(tests/vectors/v2/) and tests/datapath/test_plan_v2.py pin that they agree, messages included.
Self-contained (no import of format.py, which imports this module).
"""

from __future__ import annotations

import base64
import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass

MAX_KEY_LEN = 250
MAX_WIRE_KEY = 250
MAX_BASE64_KEY = MAX_WIRE_KEY // 4 * 3  # 186
NEVER_EXPIRES = -1
# T is the record's expiry less this (docs/populator.md "Expiry"), absolute: memcached reads a T above
# 30 days as a unix time and parses it as a signed 32-bit number.
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

_NUM = rb"(0|[1-9][0-9]{0,19})"
_LINE = re.compile(
    rb"ms ([\x21-\x7e]{1,250}) " + _NUM + rb"( b)? T" + _NUM + rb" F" + _NUM + rb" ME q O" + _NUM + rb"\r\n"
)
_PLAIN = re.compile(rb"[\x21-\x7e]{1,250}")


class RecordError(ValueError):
    """A record that is not exactly as section 7.1 writes it; the message names the record."""


def is_plain_key(key: bytes) -> bool:
    return _PLAIN.fullmatch(key) is not None


def needs_binary_record(key: bytes) -> bool:
    """A key no meta command can name: not printable ASCII and too long for a base64 key token."""
    return not is_plain_key(key) and len(key) > MAX_BASE64_KEY


def expiry_to_send(exptime: int) -> int:
    """T of an item whose version 1 exptime is `exptime` (-1 = never)."""
    return 0 if exptime == NEVER_EXPIRES else exptime - EXPIRY_MARGIN


def dest_expiry(expiry: int, offset: int) -> int:
    """The T to send a destination whose clock is `offset` whole seconds ahead of this host's (its
    `stats time` minus ours, rounded down): memcached converts an absolute T with its own idea of the
    time, so the T moves onto that clock. 0 stays 0 (never); above MAX_EXPIRY it is clamped (only
    shortens); -1 when it would not be an absolute time there (not sent: expired). The C twin is
    _v2record.h's v2_dest_expiry."""
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
    a version 3 record (section 8.2), its stamp first."""
    if not stamped:
        return _command_at(data, pos, end, n, pos)
    if end - pos < STAMP_LEN:
        raise _bad(n, pos, "source stamp runs past the records")
    cas, exp = STAMP.unpack_from(data, pos)
    if exp != NEVER_EXPIRES and exp <= 0:
        raise _bad(n, pos, f"source_exp {exp}")
    s = _command_at(data, pos + STAMP_LEN, end, n, pos)
    return Span(
        pos, s.key, s.flags, s.exptime, s.value_start, s.value_end, s.end, s.binary, s.mode_at, cas, exp, True
    )


def _command_at(data: bytes | memoryview, pos: int, end: int, n: int, o_expect: int) -> Span:
    """A version 2 record at `pos` whose meta line's O names `o_expect`."""
    if pos >= end:
        raise _bad(n, pos, "no record")
    first = data[pos]
    if first == BINARY_MAGIC:
        if end - pos < BINARY_HEAD_LEN:
            raise _bad(n, pos, "binary record runs past the records")
        _, op, klen, elen, dtype, vb, body, opaque, cas, flags, expiry = BINARY_HEAD.unpack_from(data, pos)
        if op != OP_ADDQ or elen != 8 or dtype or vb or opaque or cas:
            raise _bad(n, pos, "not an ADDQ request")
        if not MAX_BASE64_KEY < klen <= MAX_KEY_LEN or body < 8 + klen:
            raise _bad(n, pos, "bad binary key length")
        nxt = pos + BINARY_HEAD_LEN + body - 8
        if nxt > end:
            raise _bad(n, pos, "binary record runs past the records")
        if not valid_expiry(expiry):
            raise _bad(n, pos, "bad expiration")
        kstart = pos + BINARY_HEAD_LEN
        key = bytes(data[kstart : kstart + klen])
        if is_plain_key(key):
            raise _bad(n, pos, "a printable key in a binary record")
        return Span(pos, key, flags, exptime_of(expiry), kstart + klen, nxt, nxt, True)
    if first != 0x6D:  # "m"
        raise _bad(n, pos, "neither a meta set nor a binary record")
    # A line is at most ~340 bytes: match on a bounded slice (re needs no more).
    m = _LINE.match(data[pos : min(end, pos + 400)])
    if m is None:
        raise _bad(n, pos, "not a meta set line")
    tok, vlen_s, b, t_s, f_s, o_s = m.groups()
    vlen, expiry, flags, offset = int(vlen_s), int(t_s), int(f_s), int(o_s)
    if vlen > U32_MAX:
        raise _bad(n, pos, "bad value length")
    if not valid_expiry(expiry):
        raise _bad(n, pos, "bad T")
    if flags > U32_MAX:
        raise _bad(n, pos, "bad F")
    if offset != o_expect:
        raise _bad(n, pos, "O is not the record's offset")
    vstart = pos + m.end()
    vend = vstart + vlen
    if vend + 2 > end or data[vend] != 0x0D or data[vend + 1] != 0x0A:
        raise _bad(n, pos, "value not followed by \\r\\n within the records")
    if b:
        try:
            key = base64.b64decode(tok, validate=True)
        except ValueError:
            raise _bad(n, pos, "bad base64 key") from None
        if not 1 <= len(key) <= MAX_BASE64_KEY or is_plain_key(key) or base64.b64encode(key) != tok:
            raise _bad(n, pos, "bad base64 key")
    else:
        key = tok
    # The E of " ME q O...": the line ends with it, the O token and \r\n.
    mode_at = pos + m.start(6) - len(b" ME q O") + 2
    return Span(pos, key, flags, exptime_of(expiry), vstart, vend, vend + 2, False, mode_at)


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
    """A meta record's line (everything before the value) for a key that has a meta form."""
    if is_plain_key(key):
        tok, b = key, b""
    else:
        tok, b = base64.b64encode(key), b" b"
    return b"ms %b %d%b T%d F%d ME q O%d\r\n" % (tok, value_len, b, expiry_to_send(exptime), flags, offset)


def binary_head(key_len: int, value_len: int, flags: int, exptime: int) -> bytes:
    return BINARY_HEAD.pack(
        BINARY_MAGIC, OP_ADDQ, key_len, 8, 0, 0, 8 + key_len + value_len, 0, 0, flags, expiry_to_send(exptime)
    )


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
