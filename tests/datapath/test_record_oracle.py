"""The one reader of v2/v3 records (dumper-cpp/core/record_v2.c, as format_v2.parse_at) against a
pure-Python reader written from the format document (v2_oracle.py): the same verdict, fields and words on
the shared vectors, the golden files, and records damaged at random."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from cachewarm.datapath import format as df
from cachewarm.datapath import format_v2 as v2

from tests.datapath import v2_oracle

VECTORS = Path(__file__).resolve().parent.parent / "vectors"
NOW = 1795000000


def outcome(read: object, data: bytes, stamped: bool) -> v2.Span | str:
    try:
        return read(data, 0, len(data), 0, stamped)  # type: ignore[operator]
    except v2.RecordError as e:
        return str(e)


def agree(data: bytes, stamped: bool) -> None:
    assert outcome(v2.parse_at, data, stamped) == outcome(v2_oracle.parse_at, data, stamped), (
        data[:80],
        stamped,
    )


def test_the_shared_vectors() -> None:
    for line in (VECTORS / "core" / "record_v2.txt").read_text().splitlines():
        f = line.split()
        if f and f[0] == "parse":
            agree(b"" if f[3] == "-" else bytes.fromhex(f[3]), f[2] == "1")


@pytest.mark.parametrize("sub", ["v2", "v3"])
def test_the_golden_files(sub: str) -> None:
    files = sorted((VECTORS / sub).glob("*.cwd"))
    assert files
    for p in files:
        data = p.read_bytes()
        header = df.HEADER.unpack_from(data, 0)
        start, end, stamped = header[2], len(data) - df.TRAILER_LEN, sub == "v3"
        pos = start
        while pos < end:
            got = v2.parse_at(data, pos, end, 0, stamped)
            assert got == v2_oracle.parse_at(data, pos, end, 0, stamped)
            pos = got.end


def test_damaged_records() -> None:
    rng = random.Random(15)
    keys = [b"user:1", b"k" * 250, b"\x00bin\xff", bytes(range(186)), b"\x01" * 200, b"a b" * 70]
    for i in range(3000):
        key = rng.choice(keys)
        stamp = (rng.randrange(2**64), rng.choice([-1, NOW])) if i % 2 else None
        exptime = rng.choice([-1, NOW + 3600, 2**31])
        rec = bytearray(
            v2.encode_record(key, rng.randrange(2**32), exptime, rng.randbytes(rng.randrange(8)), 0, stamp)
        )
        for _ in range(rng.randrange(1, 4)):
            at = rng.randrange(len(rec))
            how = rng.randrange(4)
            if how == 0:
                rec[at] = rng.randrange(256)
            elif how == 1:
                rec[at] = rng.choice(b"0123456789 \r\nbTFMEqO=+/m\x80")
            elif how == 2:
                del rec[at:]
            else:
                rec[at:at] = bytes([rng.choice(b"0 9\r")])
            if not rec:
                break
        agree(bytes(rec), stamp is not None)
