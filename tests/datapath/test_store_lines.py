"""dumper-cpp/core store_lines.c (`ms` and `add` lines) and cw_bin_store_head (ADD/ADDQ/SETQ heads)
through the extension, against tests/vectors/core/store_lines.txt, which dumper-cpp/tests/core_test.cc
reads too; and the Python twin below, kept only as an independent oracle of the same bytes."""

from __future__ import annotations

import base64
import random
import struct

from cachewarm.datapath import _speedups as sp

from tests.datapath.test_core import cases, hexed, unhex

_HEAD = struct.Struct(">BBHBBHIIQII")


def twin_ms(
    tok: bytes, b64: bool, value_len: int, t: int, flags: int, add: bool, opaque: int | None
) -> bytes:
    line = b"ms %b %d%b T%d F%d %b q" % (
        tok,
        value_len,
        b" b" if b64 else b"",
        t,
        flags,
        b"ME" if add else b"MS",
    )
    return line + (b" O%d" % opaque if opaque is not None else b"") + b"\r\n"


def twin_add(key: bytes, flags: int, t: int, value_len: int) -> bytes:
    return b"add %b %d %d %d\r\n" % (key, flags, t, value_len)


def twin_head(opcode: int, key_len: int, value_len: int, flags: int, expiration: int, opaque: int) -> bytes:
    return _HEAD.pack(0x80, opcode, key_len, 8, 0, 0, 8 + key_len + value_len, opaque, 0, flags, expiration)


def test_vectors() -> None:
    for c in cases("store_lines.txt"):
        if c[0] == "ms":
            tok, b64, vlen, t, flags, add, tagged, opaque = unhex(c[1]), *map(int, c[2:9])
            want = c[9]
            assert (
                hexed(sp.core_ms_line(tok, bool(b64), vlen, t, flags, bool(add), bool(tagged), opaque))
                == want
            ), c
            twin = twin_ms(tok, bool(b64), vlen, t, flags, bool(add), opaque if tagged else None)
            assert hexed(twin) == want, c
        elif c[0] == "add":
            key, flags, t, vlen = unhex(c[1]), *map(int, c[2:5])
            assert hexed(sp.core_add_line(key, flags, t, vlen)) == c[5], c
            assert hexed(twin_add(key, flags, t, vlen)) == c[5], c
        else:
            args = [int(x) for x in c[1:7]]
            assert sp.core_bin_store_head(*args).hex() == c[7], c
            assert twin_head(*args).hex() == c[7], c


def test_random_lines_match_the_twin() -> None:
    rng = random.Random(7)
    for _ in range(2000):
        key = bytes(rng.randrange(0x21, 0x7F) for _ in range(rng.randrange(1, 251)))
        b64 = rng.random() < 0.3
        tok = base64.b64encode(key[:186]) if b64 else key
        vlen, t, flags = rng.randrange(2**32), rng.choice([0, rng.randrange(2**31)]), rng.randrange(2**32)
        add, opaque = rng.random() < 0.5, rng.choice([None, 0, rng.randrange(2**64)])
        got = sp.core_ms_line(tok, b64, vlen, t, flags, add, opaque is not None, opaque or 0)
        assert got == twin_ms(tok, b64, vlen, t, flags, add, opaque)
        assert sp.core_add_line(key, flags, t, vlen) == twin_add(key, flags, t, vlen)
