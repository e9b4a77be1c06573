"""The format v1 reader and writer (docs/data-format.md), without memcached (v2: test_dataformat_v2.py)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
import xxhash
from cachewarm.datapath import format as df
from cachewarm.datapath.format import Record, Status
from cachewarm.datapath.writer import DirWriter


def sample_records() -> list[Record]:
    return [
        Record(b"a", 0, -1, b""),
        Record(b"key:2", 0xFFFFFFFF, 1_900_000_000, b"hello\r\nEND\r\n"),
        Record(bytes(range(1, 251)), 7, 1, b"\x00" * 1000),
    ]


def test_names_parse_and_ignore_others() -> None:
    n = df.parse_name("10.0.1.7_11211-00000003-0002-1a2b3c4d5e6f7081.cwd")
    assert n == df.DataFileName(chunk=3, part=2, node="10.0.1.7_11211", xxh3=0x1A2B3C4D5E6F7081)
    assert n.name == "10.0.1.7_11211-00000003-0002-1a2b3c4d5e6f7081.cwd"
    for bad in [
        ".tmp-n-00000000-0000",
        "DONE",
        "keys",
        "n-0000000-0000-1a2b3c4d5e6f7081.cwd",
        "n-00000000-0000-1A2B3C4D5E6F7081.cwd",
        "a-b-00000000-0000-1a2b3c4d5e6f7081.cwd",
        "n-00000000-0000-1a2b3c4d5e6f7081.cwd.x",
        "x" * 65 + "-00000000-0000-1a2b3c4d5e6f7081.cwd",
        "n-00000000-0000-1a2b3c4d5e6f7081.cwd\n",  # Python's `$` matches before a final newline
    ]:
        assert df.parse_name(bad) is None, bad


def test_a_node_id_ending_in_a_newline_is_refused(tmp_path: Path) -> None:
    """Found by the fuzzer (CI, stop 30): `NODE_RE.match("vec_node.\\n")` accepted it."""
    with pytest.raises(df.FormatError, match="node id"):
        DirWriter(tmp_path, version=1, node="n1\n", dump_start_ms=1).write(0, 0, sample_records(), misses=0)


def test_round_trip(tmp_path: Path) -> None:
    w = DirWriter(tmp_path, version=1, node="n1", dump_start_ms=123)
    pf = w.write(0, 0, sample_records(), misses=2)
    v = df.check_file(pf.path)
    assert v.status is Status.OK, v.reason
    assert v.header is not None and v.trailer is not None and v.data is not None
    assert v.header.node == "n1" and v.header.dump_start_ms == 123
    assert v.trailer.record_count == 3 and v.trailer.misses == 2 and v.trailer.end_key_index == 5
    got = [Record(r.key, r.flags, r.exptime, bytes(r.value)) for r in df.iter_records(v.data)]
    assert got == sample_records()
    assert not list(tmp_path.glob(".tmp-*"))


def test_empty_file_is_valid(tmp_path: Path) -> None:
    pf = DirWriter(tmp_path, version=1, node="n").write(5, 1, [], misses=4)
    v = df.check_file(pf.path)
    assert v.ok and v.trailer is not None and v.trailer.record_count == 0
    assert v.data is not None and list(df.iter_records(v.data)) == []


@pytest.mark.parametrize("cut", [0, 10, 47, 87, 100, -41, -1])
def test_truncated_is_incomplete(tmp_path: Path, cut: int) -> None:
    name, data = DirWriter(tmp_path, version=1, node="n").encode(0, 0, sample_records())
    (tmp_path / name).write_bytes(data[:cut])
    v = df.check_file(tmp_path / name)
    assert v.status is Status.INCOMPLETE and v.data is None


def test_zero_tail_and_zero_file(tmp_path: Path) -> None:
    name, data = DirWriter(tmp_path, version=1, node="n").encode(0, 0, sample_records())
    (tmp_path / name).write_bytes(data[:200] + b"\0" * (len(data) - 200))
    assert df.check_file(tmp_path / name).status is Status.INCOMPLETE  # no trailer magic
    (tmp_path / name).write_bytes(b"\0" * len(data))
    assert df.check_file(tmp_path / name).status is Status.INCOMPLETE


def test_middle_block_invisible_is_checksum_mismatch(tmp_path: Path) -> None:
    name, data = DirWriter(tmp_path, version=1, node="n").encode(0, 0, sample_records())
    hole = data[:100] + b"\0" * 50 + data[150:]
    (tmp_path / name).write_bytes(hole)
    v = df.check_file(tmp_path / name)
    assert v.status is Status.CHECKSUM_MISMATCH and v.status.retryable and v.data is None


def test_header_disagreeing_with_name(tmp_path: Path) -> None:
    w = DirWriter(tmp_path, version=1, node="n")
    _, data = w.encode(0, 0, sample_records())
    other = df.name_for("n", 1, 0, data).name  # right checksum, wrong chunk in the name
    (tmp_path / other).write_bytes(data)
    v = df.check_file(tmp_path / other)
    assert v.status is Status.INCOMPLETE and "chunk" in v.reason


def _rehash(tmp_path: Path, data: bytes) -> Path:
    name = df.name_for("n", 0, 0, data).name
    (tmp_path / name).write_bytes(data)
    return tmp_path / name


def test_checksum_ok_but_records_bad_is_corrupt(tmp_path: Path) -> None:
    _, data = DirWriter(tmp_path, version=1, node="n").encode(0, 0, sample_records())
    hl = 48 + 1
    # exptime 0 in the first record
    bad = bytearray(data)
    struct.pack_into("<q", bad, hl + 8, 0)
    v = df.check_file(_rehash(tmp_path, bytes(bad)))
    assert v.status is Status.CORRUPT and "exptime" in v.reason
    # a huge value_len must be rejected by bounds, never allocated
    bad = bytearray(data)
    struct.pack_into("<I", bad, hl, 0xFFFFFFFF)
    v = df.check_file(_rehash(tmp_path, bytes(bad)))
    assert v.status is Status.CORRUPT and "run past" in v.reason
    # key_len 0
    bad = bytearray(data)
    bad[hl + 16] = 0
    v = df.check_file(_rehash(tmp_path, bytes(bad)))
    assert v.status is Status.CORRUPT and "key_len" in v.reason
    # record_count disagrees
    bad = bytearray(data)
    struct.pack_into("<Q", bad, len(bad) - 32, 4)
    v = df.check_file(_rehash(tmp_path, bytes(bad)))
    assert v.status is Status.CORRUPT and "records parsed" in v.reason


def test_not_a_data_name_raises(tmp_path: Path) -> None:
    (tmp_path / "DONE").write_text("{}")
    with pytest.raises(df.FormatError, match="not a data file name"):
        df.check_file(tmp_path / "DONE")


def test_manifest(tmp_path: Path) -> None:
    w = DirWriter(tmp_path, version=1, node="n")
    w.write(0, 0, sample_records())
    w.write(0, 1, sample_records()[:1])
    m = df.read_manifest(w.done())
    assert [(f.chunk, f.part, f.records) for f in m.files] == [(0, 0, 3), (0, 1, 1)]
    assert m.total_records == 4 and m.node == "n"
    body = json.loads((tmp_path / "DONE").read_text())
    body["future_field"] = {"x": 1}
    assert df.parse_manifest(json.dumps(body)).total_records == 4
    with pytest.raises(df.FormatError, match="not valid JSON"):
        df.parse_manifest(b'{"format": "cachewarm-du')  # half visible
    body["totals"]["records"] = 5
    with pytest.raises(df.FormatError, match=r"totals\.records"):
        df.parse_manifest(json.dumps(body))
    body = json.loads((tmp_path / "DONE").read_text())
    body["files"][0]["xxh3"] = "0" * 16
    with pytest.raises(df.FormatError, match="disagree"):
        df.parse_manifest(json.dumps(body))


def test_name_checksum_covers_every_byte(tmp_path: Path) -> None:
    pf = DirWriter(tmp_path, version=1, node="n").write(0, 0, sample_records())
    assert xxhash.xxh3_64_intdigest(pf.path.read_bytes()) == pf.name.xxh3


def test_manifest_listing_a_file_twice_is_refused(tmp_path: Path) -> None:
    w = DirWriter(tmp_path, version=1, node="n")
    w.write(0, 0, sample_records())
    body = w.manifest()
    body["files"].append(dict(body["files"][0]))
    body["totals"]["records"] *= 2
    with pytest.raises(df.FormatError, match="more than once"):
        df.parse_manifest(json.dumps(body))
