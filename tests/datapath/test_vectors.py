"""The Python reader and writer against the C++ writer's golden files, byte for byte: data format v1
(tests/vectors/), v2 (tests/vectors/v2/) and v3 (tests/vectors/v3/), and the populator's C walk of v2
against them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cachewarm.datapath import format as df
from cachewarm.datapath import format_v2 as v2
from cachewarm.datapath.format import Record
from cachewarm.datapath.populate.plan import PIECE_LINE, PIECE_MN, PIECE_S, NodePlan, pieces_of
from cachewarm.datapath.writer import encode_file

from tests.datapath.plan_oracle import plan_with

VECTORS = Path(__file__).resolve().parent.parent / "vectors"
SETS = {1: VECTORS, 2: VECTORS / "v2", 3: VECTORS / "v3"}
SPECS: dict[int, dict[str, Any]] = {v: json.loads((d / "vectors.json").read_text()) for v, d in SETS.items()}
FILES = [(v, f) for v, spec in SPECS.items() for f in spec["files"]]


def expected_records(f: dict[str, Any]) -> list[Record]:
    return [
        Record(
            bytes.fromhex(r["key_hex"]),
            r["flags"],
            r["exptime"],
            bytes.fromhex(r["value_hex"]),
            r.get("source_cas", 0),
            r.get("source_exp", -1),
        )
        for r in f["records"]
    ]


@pytest.mark.parametrize(("version", "f"), FILES, ids=lambda x: x if isinstance(x, int) else x["name"])
def test_reader_matches_vectors(version: int, f: dict[str, Any]) -> None:
    spec = SPECS[version]
    v = df.check_file(SETS[version] / f["name"])
    assert v.status is df.Status.OK, v.reason
    assert v.header is not None and v.trailer is not None and v.data is not None
    assert v.header.version == version
    assert len(v.data) == f["size"]
    assert v.header.header_len == f["header_len"]
    assert v.header.node == spec["node"]
    assert v.header.dump_start_ms == spec["dump_start_ms"]
    assert (v.header.chunk, v.header.part) == (f["chunk"], f["part"])
    assert v.header.first_key_index == f["first_key_index"]
    assert v.trailer.end_key_index == f["end_key_index"]
    assert v.trailer.misses == f["misses"]
    assert v.trailer.record_count == f["record_count"]
    got = [
        Record(r.key, r.flags, r.exptime, bytes(r.value), r.source_cas, r.source_exp)
        for r in df.iter_records(v.data)
    ]
    assert got == expected_records(f)
    # The source's clock (section 2.1): none, a measured bound and its spread, or the ceiling.
    h = v.header
    assert (h.clock_flags, h.source_clock_ms) == (f["clock_flags"], f["source_clock_ms"])
    if f["clock_flags"] == 0:
        assert (h.expiry_fraction, h.clock_ceiling, h.source_clock_spread_ms) == (None, False, None)
    else:
        assert h.expiry_fraction == pytest.approx(
            -(-f["source_clock_ms"] // 1000) - f["source_clock_ms"] / 1000
        )
        assert h.clock_ceiling == bool(f["clock_flags"] & df.CLOCK_CEILING)
        assert h.source_clock_spread_ms == f["clock_flags"] >> df.CLOCK_SPREAD_SHIFT


@pytest.mark.parametrize(("version", "f"), FILES, ids=lambda x: x if isinstance(x, int) else x["name"])
def test_writer_reproduces_vectors(version: int, f: dict[str, Any]) -> None:
    spec = SPECS[version]
    data = encode_file(
        spec["node"],
        f["chunk"],
        f["part"],
        expected_records(f),
        dump_start_ms=spec["dump_start_ms"],
        first_key_index=f["first_key_index"],
        misses=f["misses"],
        version=version,
        source_clock_ms=f["source_clock_ms"] if f["clock_flags"] else None,
        clock_flags=f["clock_flags"],
    )
    assert data == (SETS[version] / f["name"]).read_bytes()
    assert df.name_for(spec["node"], f["chunk"], f["part"], data).name == f["name"]


@pytest.mark.parametrize("version", sorted(SETS))
def test_manifest_vector(version: int) -> None:
    spec = SPECS[version]
    m = df.read_manifest(SETS[version] / spec["done"])
    assert m.version == version
    assert m.node == spec["node"]
    assert [f.name for f in m.files] == [f["name"] for f in spec["files"]]
    assert [f.records for f in m.files] == [f["record_count"] for f in spec["files"]]
    assert [f.bytes for f in m.files] == [f["size"] for f in spec["files"]]
    assert m.total_records == sum(f["record_count"] for f in spec["files"])


@pytest.mark.parametrize("use_c", [True, False])
@pytest.mark.parametrize("f", SPECS[2]["files"], ids=lambda f: f["name"])
def test_v2_vectors_are_sent_as_their_own_bytes(f: dict[str, Any], use_c: bool) -> None:
    """The populator's walk (C and Python) plans every meta record of a v2 vector: in set mode (a
    destination on this host's clock) as a range of the file with `S` for its `E`, so what goes on
    the wire is the file's own bytes; in add mode as a generated `add` line and the record's own value
    bytes (a failed `ms` would unlink a live value); the binary record for the binary protocol."""
    data = (SETS[2] / f["name"]).read_bytes()
    v = df.check_bytes(df.parse_name(f["name"]), data)  # type: ignore[arg-type]
    assert v.header is not None and v.trailer is not None
    start, end = df.records_bounds(v.header, v.trailer)
    for set_mode in (True, False):
        p = plan_with(use_c, data, start, end, 1_700_000_000, (1 << 40,), set_mode, 1000, 1 << 20)
        assert p.records == f["record_count"]
        node = p.nodes[0]

        def piece(o: int, n: int, node: NodePlan = node) -> bytes:
            if o >= 0:
                return data[o : o + n]
            if o <= PIECE_LINE:
                return node.lines[PIECE_LINE - o : PIECE_LINE - o + n]
            return {PIECE_MN: b"mn\r\n", PIECE_S: b"S"}[o]

        wire = b"".join(piece(o, n) for o, n in pieces_of(node.pieces))
        binary = [df.record_at(data, at, 2).key for at in node.binary]
        meta = [r for r in expected_records(f) if r.key not in binary]
        assert node.items == len(meta) and wire.count(b"\r\nmn\r\n") == (1 if meta else 0)
        assert [r.key for r in expected_records(f) if r.key in binary] == binary
        if set_mode:
            own = b"".join(data[s.offset : s.end] for s in v2.spans(data, start, end) if not s.binary)
            assert wire.replace(b"mn\r\n", b"") == own.replace(b" ME q O", b" MS q O")
            assert node.lines == b""
        else:
            assert wire.startswith(b"add ") or not meta
            assert wire.count(b"\r\nadd ") + wire.startswith(b"add ") == len(meta)
