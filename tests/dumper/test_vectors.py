"""The golden vectors agree with an independent check: python-xxhash and a by-the-doc parse."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import xxhash

VECTORS = Path(__file__).resolve().parent.parent / "vectors"


def test_vectors_json_matches_files_byte_for_byte() -> None:
    spec = json.loads((VECTORS / "vectors.json").read_text())
    done = json.loads((VECTORS / "DONE").read_text())
    assert [f["name"] for f in done["files"]] == [f["name"] for f in spec["files"]]
    for f in spec["files"]:
        data = (VECTORS / f["name"]).read_bytes()
        assert len(data) == f["size"]
        assert xxhash.xxh3_64_hexdigest(data) == f["xxh3"] == f["name"][-20:-4]
        hlen = struct.unpack_from("<H", data, 10)[0]
        assert data[:8] == b"CWARMDF1" and hlen == f["header_len"]
        magic, count, rbytes, end_idx, misses = struct.unpack_from("<8sQQQQ", data, len(data) - 40)
        assert magic == b"CWARMEND" and count == f["record_count"] and end_idx == f["end_key_index"]
        assert misses == f["misses"] and hlen + rbytes + 40 == len(data)
        pos, got = hlen, []
        while pos < hlen + rbytes:
            vlen, flags, exp, klen = struct.unpack_from("<IIqB", data, pos)
            pos += 20
            key, value = data[pos : pos + klen], data[pos + klen : pos + klen + vlen]
            pos += klen + vlen
            got.append({"key_hex": key.hex(), "flags": flags, "exptime": exp, "value_hex": value.hex()})
        assert got == f["records"]
