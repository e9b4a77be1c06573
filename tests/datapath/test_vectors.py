"""The Python reader and writer against the C++ writer's golden files, byte for byte."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cachewarm.datapath import format as df
from cachewarm.datapath.format import Record
from cachewarm.datapath.writer import encode_file

VECTORS = Path(__file__).resolve().parent.parent / "vectors"
SPEC: dict[str, Any] = json.loads((VECTORS / "vectors.json").read_text())


def expected_records(f: dict[str, Any]) -> list[Record]:
    return [
        Record(bytes.fromhex(r["key_hex"]), r["flags"], r["exptime"], bytes.fromhex(r["value_hex"]))
        for r in f["records"]
    ]


@pytest.mark.parametrize("f", SPEC["files"], ids=lambda f: f["name"])
def test_reader_matches_vectors(f: dict[str, Any]) -> None:
    v = df.check_file(VECTORS / f["name"])
    assert v.status is df.Status.OK, v.reason
    assert v.header is not None and v.trailer is not None and v.data is not None
    assert len(v.data) == f["size"]
    assert v.header.header_len == f["header_len"]
    assert v.header.node == SPEC["node"]
    assert v.header.dump_start_ms == SPEC["dump_start_ms"]
    assert (v.header.chunk, v.header.part) == (f["chunk"], f["part"])
    assert v.header.first_key_index == f["first_key_index"]
    assert v.trailer.end_key_index == f["end_key_index"]
    assert v.trailer.misses == f["misses"]
    assert v.trailer.record_count == f["record_count"]
    got = [Record(r.key, r.flags, r.exptime, bytes(r.value)) for r in df.iter_records(v.data)]
    assert got == expected_records(f)


@pytest.mark.parametrize("f", SPEC["files"], ids=lambda f: f["name"])
def test_writer_reproduces_vectors(f: dict[str, Any]) -> None:
    data = encode_file(
        SPEC["node"],
        f["chunk"],
        f["part"],
        expected_records(f),
        dump_start_ms=SPEC["dump_start_ms"],
        first_key_index=f["first_key_index"],
        misses=f["misses"],
    )
    assert data == (VECTORS / f["name"]).read_bytes()
    assert df.name_for(SPEC["node"], f["chunk"], f["part"], data).name == f["name"]


def test_manifest_vector() -> None:
    m = df.read_manifest(VECTORS / SPEC["done"])
    assert m.node == SPEC["node"]
    assert [f.name for f in m.files] == [f["name"] for f in SPEC["files"]]
    assert [f.records for f in m.files] == [f["record_count"] for f in SPEC["files"]]
    assert [f.bytes for f in m.files] == [f["size"] for f in SPEC["files"]]
    assert m.total_records == sum(f["record_count"] for f in SPEC["files"])
