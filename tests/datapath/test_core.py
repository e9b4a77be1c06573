"""dumper-cpp/core (the wire rules in C99, shared by the dumper and the populator's extension) through
the extension, against the vectors in tests/vectors/core/ that dumper-cpp/tests/core_test.cc reads too:
one implementation, pinned from both languages."""

from __future__ import annotations

from pathlib import Path

import pytest
from cachewarm.datapath import _speedups as sp

CORE = Path(__file__).resolve().parent.parent / "vectors" / "core"


def cases(name: str) -> list[list[str]]:
    out = [ln.split() for ln in (CORE / name).read_text().splitlines() if ln and not ln.startswith("#")]
    assert out, name
    return out


def unhex(h: str) -> bytes:
    return b"" if h == "-" else bytes.fromhex(h)


def hexed(b: bytes) -> str:
    return b.hex() or "-"


def test_binary_requests() -> None:
    for c in cases("binary_request.txt"):
        if c[0] == "key":
            assert sp.core_bin_key_request(int(c[1]), int(c[2]), int(c[3])).hex() == c[4]
        elif c[0] == "cas":
            assert sp.core_bin_key_request(*map(int, c[1:5])).hex() == c[5], c
        else:
            assert sp.core_bin_add_head(*map(int, c[:5])).hex() == c[5], c


def test_binary_replies() -> None:
    for c in cases("binary_reply.txt"):
        got = sp.core_bin_reply(unhex(c[0]))
        assert got[0] == int(c[1]), c
        if got[0] == 1:
            assert list(got[1:]) == [int(x) for x in c[2:7]], c
            assert sp.core_bin_add_outcome(got[2]) == int(c[7]), c


def test_binary_status_texts() -> None:
    for c in cases("binary_status.txt"):
        assert sp.core_bin_status_text(int(c[0])).replace(" ", "_") == c[1], c


def test_key_tokens() -> None:
    for c in cases("key_token.txt"):
        kind, token = sp.core_key_token(unhex(c[0]))
        assert (kind, hexed(token)) == (int(c[1]), c[2]), c


def test_meta_lines() -> None:
    for c in cases("meta_lines.txt"):
        if c[0] == "look":
            assert hexed(sp.core_mg_look_line(unhex(c[1]), int(c[2]))) == c[3], c
        elif c[0] == "mg":
            opaque = None if c[3] == "-" else int(c[3])
            if c[4] == "-":
                with pytest.raises(ValueError, match="no meta command names"):
                    sp.core_mg_line(unhex(c[1]), unhex(c[2]), opaque)
            else:
                assert sp.core_mg_line(unhex(c[1]), unhex(c[2]), opaque).hex() == c[4], c
        else:
            assert hexed(sp.core_md_cas_line(unhex(c[1]), int(c[2]), int(c[3]))) == c[4], c


def test_meta_replies() -> None:
    for c in cases("meta_reply.txt"):
        rc, code, *fields, value_len = sp.core_meta_reply(unhex(c[0]))
        assert rc == int(c[1]), c
        if rc != 0:
            continue
        assert code == ("" if c[2] == "-" else c[2]), c
        assert [None if f is None else str(f) for f in fields] == [None if x == "-" else x for x in c[3:8]], c
        assert value_len == int(c[8]), c


def test_source_verdicts() -> None:
    for c in cases("source_verdict.txt"):
        assert sp.core_source_verdict(*map(int, c[:8])) == int(c[8]), c


def test_delete_outcomes() -> None:
    for c in cases("md_outcome.txt"):
        assert sp.core_md_outcome(None if c[0] == "-" else unhex(c[0])) == int(c[1]), c


@pytest.mark.parametrize("c", cases("compare.txt"), ids=lambda c: " ".join(c[:5]))
def test_compare_verdicts(c: list[str]) -> None:
    s = (int(c[0]), 0, int(c[1]), int(c[2]), unhex(c[3]))
    d = (int(c[4]), int(c[5]), int(c[6]), int(c[7]), unhex(c[8]))
    assert sp.core_compare_verdict(s, d, int(c[9]), int(c[10]), int(c[11]), int(c[12])) == int(c[13])


def test_records() -> None:
    """The one reader of v2/v3 records (check 4) and the writer's encoding."""
    for c in cases("record_v2.txt"):
        if c[0] == "parse":
            data, stamped = unhex(c[3]), c[2] == "1"
            try:
                got = sp.record_parse(data, 0, len(data), stamped)
            except ValueError as e:
                assert c[4:] == ["bad", *str(e).split()], c[:3]
                continue
            key, flags, t, value_at, value_len, nxt, binary, _, cas, exp = got
            assert c[4] == "ok", (c[:3], got)
            assert [hexed(key), flags, t, value_at, value_len, nxt, int(binary), cas, exp] == [
                c[5],
                *map(int, c[6:]),
            ], c[:3]
        elif c[0] == "line":
            assert hexed(sp.core_record_meta_line(unhex(c[1]), *map(int, c[2:6]))) == c[6], c[:2]
        elif c[0] == "binhead":
            assert sp.core_record_binary_head(*map(int, c[1:5])).hex() == c[5], c
        else:
            assert sp.core_record_stamp(int(c[1]), int(c[2])).hex() == c[3], c


def test_read_stamps_round_trip() -> None:
    for cas, exp, vlen in [(0, -1, -1), (2**64 - 1, 2**63 - 1, 0), (42, 1795000000, 1 << 40)]:
        packed = sp.pack_read_stamp(cas, exp, vlen)
        assert len(packed) == 24
        assert sp.read_stamp(b"x" + packed, 1) == (cas, exp, vlen)
    with pytest.raises(ValueError):
        sp.read_stamp(bytes(23), 0)
