"""A pure-Python reader of data format v2/v3 records (docs/data-format.md sections 7.2 and 8.2), kept
only to cross-check the one reader in product code, dumper-cpp/core/record_v2.c (bound as
format_v2.parse_at): written from the format document, not from the C, so the two disagreeing points at
one of them or at the document."""

from __future__ import annotations

import base64
import re

from cachewarm.datapath.format_v2 import (
    BINARY_HEAD,
    BINARY_HEAD_LEN,
    BINARY_MAGIC,
    MAX_KEY_LEN,
    NEVER_EXPIRES,
    OP_ADDQ,
    STAMP,
    STAMP_LEN,
    U32_MAX,
    RecordError,
    Span,
    exptime_of,
    valid_expiry,
)
from cachewarm.datapath.wire import MAX_BINARY_KEY, is_plain_key

_NUM = rb"(0|[1-9][0-9]{0,19})"
_LINE = re.compile(
    rb"ms ([\x21-\x7e]{1,250}) " + _NUM + rb"( b)? T" + _NUM + rb" F" + _NUM + rb" ME q O" + _NUM + rb"\r\n"
)


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
    """A version 2 record at `pos` whose meta line's O names `o_expect`, the record's offset (a version 3
    record's stamp's): the one messages name."""
    if pos >= end:
        raise _bad(n, o_expect, "no record")
    first = data[pos]
    if first == BINARY_MAGIC:
        if end - pos < BINARY_HEAD_LEN:
            raise _bad(n, o_expect, "binary record runs past the records")
        _, op, klen, elen, dtype, vb, body, opaque, cas, flags, expiry = BINARY_HEAD.unpack_from(data, pos)
        if op != OP_ADDQ or elen != 8 or dtype or vb or opaque or cas:
            raise _bad(n, o_expect, "not an ADDQ request")
        if not MAX_BINARY_KEY < klen <= MAX_KEY_LEN or body < 8 + klen:
            raise _bad(n, o_expect, "bad binary key length")
        nxt = pos + BINARY_HEAD_LEN + body - 8
        if nxt > end:
            raise _bad(n, o_expect, "binary record runs past the records")
        if not valid_expiry(expiry):
            raise _bad(n, o_expect, "bad expiration")
        kstart = pos + BINARY_HEAD_LEN
        key = bytes(data[kstart : kstart + klen])
        if is_plain_key(key):
            raise _bad(n, o_expect, "a printable key in a binary record")
        return Span(pos, key, flags, exptime_of(expiry), kstart + klen, nxt, nxt, True)
    if first != 0x6D:  # "m"
        raise _bad(n, o_expect, "neither a meta set nor a binary record")
    # A line is at most ~340 bytes: match on a bounded slice (re needs no more).
    m = _LINE.match(data[pos : min(end, pos + 400)])
    if m is None:
        raise _bad(n, o_expect, "not a meta set line")
    tok, vlen_s, b, t_s, f_s, o_s = m.groups()
    vlen, expiry, flags, offset = int(vlen_s), int(t_s), int(f_s), int(o_s)
    if vlen > U32_MAX:
        raise _bad(n, o_expect, "bad value length")
    if not valid_expiry(expiry):
        raise _bad(n, o_expect, "bad T")
    if flags > U32_MAX:
        raise _bad(n, o_expect, "bad F")
    if offset != o_expect:
        raise _bad(n, o_expect, "O is not the record's offset")
    vstart = pos + m.end()
    vend = vstart + vlen
    if vend + 2 > end or data[vend] != 0x0D or data[vend + 1] != 0x0A:
        raise _bad(n, o_expect, "value not followed by \\r\\n within the records")
    if b:
        try:
            key = base64.b64decode(tok, validate=True)
        except ValueError:
            raise _bad(n, o_expect, "bad base64 key") from None
        if not 1 <= len(key) <= MAX_BINARY_KEY or is_plain_key(key) or base64.b64encode(key) != tok:
            raise _bad(n, o_expect, "bad base64 key")
    else:
        key = tok
    # The E of " ME q O...": the line ends with it, the O token and \r\n.
    mode_at = pos + m.start(6) - len(b" ME q O") + 2
    return Span(pos, key, flags, exptime_of(expiry), vstart, vend, vend + 2, False, mode_at)
