"""A data format writer (versions 1, 2 and 3) for tests, fault injection and benchmarks: data files and a
dump directory written the way the dumper writes them (docs/data-format.md sections 1-2, 5, 7 and 8).
The C++ dumper is the production writer; the golden vectors (tests/vectors/, v2/, v3/) pin that both
write the same bytes. Version 3 is the default, as the dumper's: a record's stamp is its Record's
source_cas / source_exp.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cachewarm.datapath import format_v2 as v2
from cachewarm.datapath.format import (
    CLOCK_KNOWN,
    HEADER,
    HEADER_FIXED,
    MAGIC,
    MANIFEST_NAME,
    MAX_KEY_LEN,
    NEVER_EXPIRES,
    NODE_RE,
    RECORD,
    TRAILER,
    TRAILER_LEN,
    TRAILER_MAGIC,
    VERSION_2,
    VERSION_3,
    VERSIONS,
    DataFileName,
    FormatError,
    Record,
    name_for,
    parse_name,
)


def encode_record(rec: Record) -> bytes:
    key = bytes(rec.key)
    if not 1 <= len(key) <= MAX_KEY_LEN:
        raise FormatError(f"key length {len(key)} not in 1..{MAX_KEY_LEN}")
    if rec.exptime != NEVER_EXPIRES and rec.exptime <= 0:
        raise FormatError(f"exptime {rec.exptime}: must be -1 (never) or > 0")
    if not 0 <= rec.flags <= 0xFFFFFFFF:
        raise FormatError(f"flags {rec.flags} not a u32")
    value = bytes(rec.value)
    return RECORD.pack(len(value), rec.flags, rec.exptime, len(key)) + key + value


def encode_file(
    node: str,
    chunk: int,
    part: int,
    records: Iterable[Record],
    dump_start_ms: int = 0,
    first_key_index: int = 0,
    misses: int = 0,
    version: int = VERSION_3,
    source_clock_ms: int | None = None,
    clock_flags: int = 0,
) -> bytes:
    """The bytes of one data file (sections 2.1-2.3; version 2's records: section 7.1, version 3's 8.1).
    `source_clock_ms`: None = the header says nothing of the exptimes' clock (an older dumper's: they
    may be up to 1 s late); else section 2.1's source_clock_ms (0: they are exact on this host's clock)
    with `clock_flags`' other bits (CLOCK_CEILING, the spread)."""
    if not NODE_RE.fullmatch(node):
        raise FormatError(f"node id {node!r} must match [A-Za-z0-9_.]{{1,64}}")
    if version not in VERSIONS:
        raise FormatError(f"version {version} not in {VERSIONS}")
    node_b = node.encode("ascii")
    if version in (VERSION_2, VERSION_3):
        body, at = [], HEADER_FIXED + len(node_b)
        for r in records:
            stamp = (r.source_cas, r.source_exp) if version == VERSION_3 else None
            try:
                rec = v2.encode_record(bytes(r.key), r.flags, r.exptime, bytes(r.value), at, stamp)
            except ValueError as e:
                raise FormatError(str(e)) from e
            body.append(rec)
            at += len(rec)
    else:
        body = [encode_record(r) for r in records]
    rbytes = sum(len(b) for b in body)
    header = HEADER.pack(
        MAGIC,
        version,
        HEADER_FIXED + len(node_b),
        part,
        dump_start_ms,
        chunk,
        first_key_index,
        len(node_b),
        0 if source_clock_ms is None else CLOCK_KNOWN | clock_flags,
        source_clock_ms or 0,
    )
    end_key_index = first_key_index + len(body) + misses
    trailer = TRAILER.pack(TRAILER_MAGIC, len(body), rbytes, end_key_index, misses)
    return b"".join([header, node_b, *body, trailer])


def _publish(out: Path, final: str, tmp: str, data: bytes) -> Path:
    """Section 1's publish: temp name, fsync, rename, fsync the directory."""
    tmp_path = out / tmp
    with open(tmp_path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    final_path = out / final
    os.replace(tmp_path, final_path)
    dfd = os.open(out, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    return final_path


@dataclass
class PublishedFile:
    path: Path
    name: DataFileName
    records: int
    misses: int
    size: int


@dataclass
class DirWriter:
    """Writes a dump directory the way the dumper does (atomic publish, DONE last)."""

    out: Path
    node: str = "test_11211"
    dump_start_ms: int = 0
    version: int = VERSION_3
    # The header's source_clock_ms (encode_file): 0 = the records' exptimes are exact on this host's
    # clock (as the tests write them); None = say nothing, as an older dumper did.
    source_clock_ms: int | None = 0
    # The header's other clock_flags bits (encode_file).
    clock_flags: int = 0
    published: list[PublishedFile] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.out = Path(self.out)
        self.out.mkdir(parents=True, exist_ok=True)

    def encode(self, chunk: int, part: int, records: Iterable[Record], misses: int = 0) -> tuple[str, bytes]:
        """The final name and bytes of a file, without publishing it (for fault injection)."""
        data = encode_file(
            self.node,
            chunk,
            part,
            records,
            self.dump_start_ms,
            misses=misses,
            version=self.version,
            source_clock_ms=self.source_clock_ms,
            clock_flags=self.clock_flags,
        )
        return name_for(self.node, chunk, part, data).name, data

    def write(self, chunk: int, part: int, records: Iterable[Record], misses: int = 0) -> PublishedFile:
        name_s, data = self.encode(chunk, part, records, misses)
        path = _publish(self.out, name_s, f".tmp-{self.node}-{chunk:08d}-{part:04d}", data)
        name = parse_name(name_s)
        assert name is not None
        count = TRAILER.unpack_from(data, len(data) - TRAILER_LEN)[1]
        pf = PublishedFile(path, name, count, misses, len(data))
        self.published.append(pf)
        return pf

    def manifest(self, extra_files: Iterable[PublishedFile] = ()) -> dict[str, Any]:
        files = sorted([*self.published, *extra_files], key=lambda p: (p.name.chunk, p.name.part))
        return {
            "format": "cachewarm-dump",
            "version": self.version,
            "node": self.node,
            "source": {"host": "127.0.0.1", "port": 0},
            "dump_start_ms": self.dump_start_ms,
            "files": [
                {
                    "name": p.name.name,
                    "chunk": p.name.chunk,
                    "part": p.name.part,
                    "xxh3": p.name.xxh3_hex,
                    "records": p.records,
                    "misses": p.misses,
                    "bytes": p.size,
                }
                for p in files
            ],
            "totals": {
                "files": len(files),
                "records": sum(p.records for p in files),
                "bytes": sum(p.size for p in files),
                "keys_listed": sum(p.records + p.misses for p in files),
                "misses": sum(p.misses for p in files),
                "skipped_min_ttl": 0,
                "reconciled_keys": 0,
                "resumes": 0,
            },
        }

    def done(self, manifest: dict[str, Any] | None = None) -> Path:
        body = json.dumps(manifest if manifest is not None else self.manifest(), indent=1).encode()
        return _publish(self.out, MANIFEST_NAME, ".tmp-DONE", body)
