"""Data formats v1, v2 and v3 (docs/data-format.md) in Python: the constants, file names, header and
trailer, the v1 record walker (v2's and v3's records are `format_v2.py`'s), the checks of section 3
and the DONE manifest reader. (The writer for tests and
fault injection is `writer.py`; the production writer is the C++ dumper.)

The reader trusts nothing the file system shows it: `check_file` runs the checks of section 3 in order,
cheapest first, and only a file that passes all four is ever handed to `iter_records`. Lengths read
from a file are bounds-checked against the bytes actually present before they are used, and values
are returned as views into the file's buffer, so a bad length field can never make us allocate.
Every walk over records (check 4, `iter_records`, the populator's encoder) goes through
`record_spans`; the C encoder (_speedups.c) is its twin, and tests pin that both agree.
"""

# why this file is long: it is docs/data-format.md's reader, section by section (names, the data file
# and its four checks, DONE), sharing the constants and FormatError; every caller takes it as `df`.

from __future__ import annotations

import enum
import json
import math
import os
import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import xxhash

from cachewarm.datapath import format_v2 as v2

MAGIC = b"CWARMDF1"
TRAILER_MAGIC = b"CWARMEND"
VERSION = 1
# Version 2 (section 7): each record is the memcached command that stores the item. The dumper writes
# it by default; readers read both.
VERSION_2 = 2
# Version 3 (section 8): version 2's records, each behind a source stamp (the item's CAS on the source
# at the read, its expiry on the source's clock) for the populator's re-check. The dumper's default.
VERSION_3 = 3
VERSIONS = (VERSION, VERSION_2, VERSION_3)
# Versions whose records are memcached commands (sections 7 and 8).
COMMAND_VERSIONS = (VERSION_2, VERSION_3)
HEADER_FIXED = 48
TRAILER_LEN = 40
RECORD_FIXED = 20
MAX_KEY_LEN = 250
MAX_NODE_LEN = 64
NEVER_EXPIRES = -1
MANIFEST_NAME = "DONE"
DATA_SUFFIX = ".cwd"

NAME_RE = re.compile(r"^([A-Za-z0-9_.]{1,64})-([0-9]{8})-([0-9]{4})-([0-9a-f]{16})\.cwd$")
NODE_RE = re.compile(r"^[A-Za-z0-9_.]{1,64}$")

# magic, version, header_len, part, dump_start_ms, chunk, first_key_index, node_len, clock_flags,
# source_clock_ms (section 2.1; both zero in files of an older writer: their 6 bytes were reserved)
HEADER = struct.Struct("<8sHHIQQQHHi")
# clock_flags bit 0: source_clock_ms is set, and every exptime is the source's expiry on the dumper
# host's clock rounded DOWN by `Header.expiry_fraction` seconds (never late). Clear: an exptime may be
# up to 1 s late (the populator then sends it EXPIRY_MARGIN earlier).
CLOCK_KNOWN = 1
# clock_flags bit 1: source_clock_ms is the ceiling of the source's clock (it can never be ahead of
# it), not only its measured upper bound. Bits 2..15: the measurement's spread (upper minus lower
# bound), ms rounded up, at most CLOCK_SPREAD_MAX; 0 in files of an older dumper (not known).
CLOCK_CEILING = 2
CLOCK_SPREAD_SHIFT = 2
CLOCK_SPREAD_MAX = 16383
# magic, record_count, records_bytes, end_key_index, misses
TRAILER = struct.Struct("<8sQQQQ")
# value_len, flags, exptime, key_len (3 reserved bytes: zero when packed, skipped when read). The C
# encoder decodes the same fields at the same offsets.
RECORD = struct.Struct("<IIqB3x")
assert HEADER.size == HEADER_FIXED and TRAILER.size == TRAILER_LEN and RECORD.size == RECORD_FIXED


class FormatError(ValueError):
    """Bad input to the writer, or a manifest that does not follow the format."""


class CorruptRecord(FormatError):
    """A record the format forbids, or a record count the trailer contradicts (check 4): the message
    names the record and its offset."""


class ManifestNotReadable(FormatError):
    """DONE is not (yet) valid JSON: on a ro,norecovery mount its bytes may not be visible yet."""


# --------------------------------------------------------------------------------------------------
# Names


@dataclass(frozen=True, order=True)
class DataFileName:
    """The parts of a published data file name: `<node>-<chunk:08>-<part:04>-<xxh3:016x>.cwd`."""

    chunk: int
    part: int
    node: str
    xxh3: int

    @property
    def name(self) -> str:
        return f"{self.node}-{self.chunk:08d}-{self.part:04d}-{self.xxh3:016x}{DATA_SUFFIX}"

    @property
    def xxh3_hex(self) -> str:
        return f"{self.xxh3:016x}"


def parse_name(name: str) -> DataFileName | None:
    """The parsed name of a published data file, or None for any other name (temp files, DONE, keys/)."""
    m = NAME_RE.fullmatch(name)
    if m is None:
        return None
    return DataFileName(node=m[1], chunk=int(m[2]), part=int(m[3]), xxh3=int(m[4], 16))


def name_for(node: str, chunk: int, part: int, data: bytes | memoryview) -> DataFileName:
    """The published name of a data file of these bytes."""
    return DataFileName(chunk=chunk, part=part, node=node, xxh3=xxhash.xxh3_64_intdigest(data))


# --------------------------------------------------------------------------------------------------
# Header, trailer, records


@dataclass(frozen=True)
class Header:
    version: int
    header_len: int
    part: int
    dump_start_ms: int
    chunk: int
    first_key_index: int
    node: str
    clock_flags: int = 0
    # The source memcached's clock minus the dumper host's, ms, rounded up (when clock_flags says so).
    source_clock_ms: int = 0

    @property
    def expiry_fraction(self) -> float | None:
        """Seconds the records' exptimes were rounded down by (0 <= f < 1): the source's expiry on
        the dumper host's clock is at least exptime + f. None: a file of an older dumper (an exptime
        may be up to 1 s late)."""
        if not self.clock_flags & CLOCK_KNOWN:
            return None
        return math.ceil(self.source_clock_ms / 1000) - self.source_clock_ms / 1000

    @property
    def clock_ceiling(self) -> bool:
        """source_clock_ms is the ceiling of the source's clock (its clock can never be ahead of it)."""
        return bool(self.clock_flags & CLOCK_KNOWN and self.clock_flags & CLOCK_CEILING)

    @property
    def source_clock_spread_ms(self) -> int | None:
        """How far the dumper's measurement of the source's clock could be off (its upper less its
        lower bound), ms; None when the header does not say (an older dumper's file)."""
        spread = self.clock_flags >> CLOCK_SPREAD_SHIFT
        return spread if self.clock_flags & CLOCK_KNOWN and spread else None


@dataclass(frozen=True)
class Trailer:
    record_count: int
    records_bytes: int
    end_key_index: int
    misses: int


@dataclass(frozen=True, slots=True)
class Record:
    """One item. `exptime` is absolute unix seconds, or -1 for never; `value` may be a view. Version 3:
    its source stamp (section 8.1: the CAS on the source at the read, 0 = not known, and the expiry on
    the source's clock, -1 = never); older versions read as (0, -1)."""

    key: bytes
    flags: int
    exptime: int
    value: memoryview | bytes
    source_cas: int = 0
    source_exp: int = NEVER_EXPIRES


class Status(enum.Enum):
    OK = "ok"
    # Fails checks 1-2: not (yet) fully visible; look again next round.
    INCOMPLETE = "incomplete"
    # Fails check 3: maybe blocks not yet visible on a ro,norecovery mount; look again next round.
    CHECKSUM_MISMATCH = "checksum_mismatch"
    # Passes 3, fails 4: the writer has a bug; stop with an error naming the file.
    CORRUPT = "corrupt"

    @property
    def retryable(self) -> bool:
        return self in (Status.INCOMPLETE, Status.CHECKSUM_MISMATCH)


@dataclass(frozen=True)
class Verdict:
    status: Status
    reason: str
    name: DataFileName
    header: Header | None = None
    trailer: Trailer | None = None
    # The verified bytes of the file (status OK only), so a caller never reads the file twice and
    # never applies bytes other than the ones that were verified.
    data: bytes | memoryview | None = field(default=None, repr=False)

    @property
    def ok(self) -> bool:
        return self.status is Status.OK


def _parse_header(buf: bytes | memoryview, name: DataFileName, size: int) -> Header | str:
    """Check 1 on the first bytes of a file; returns the header or the reason it fails."""
    if size < HEADER_FIXED + TRAILER_LEN:
        return f"size {size} < {HEADER_FIXED + TRAILER_LEN}"
    if len(buf) < HEADER_FIXED:
        return "short header read"
    magic, version, header_len, part, start_ms, chunk, first, node_len, cflags, cms = HEADER.unpack_from(
        buf, 0
    )
    if magic != MAGIC:
        return f"bad magic {bytes(magic)!r}"
    if version not in VERSIONS:
        return f"version {version} not in {VERSIONS}"
    if not 1 <= node_len <= MAX_NODE_LEN:
        return f"node_len {node_len} out of range"
    if header_len != HEADER_FIXED + node_len:
        return f"header_len {header_len} != 48 + node_len {node_len}"
    if header_len + TRAILER_LEN > size:
        return f"header_len {header_len} + trailer exceeds size {size}"
    if len(buf) < header_len:
        return "short header read"
    node_b = bytes(buf[HEADER_FIXED:header_len])
    node = node_b.decode("ascii", errors="replace")
    if node != name.node:
        return f"node {node!r} != name's {name.node!r}"
    if chunk != name.chunk:
        return f"chunk {chunk} != name's {name.chunk}"
    if part != name.part:
        return f"part {part} != name's {name.part}"
    return Header(version, header_len, part, start_ms, chunk, first, node, cflags, cms)


def _parse_trailer(buf: bytes | memoryview, header: Header, size: int) -> Trailer | str:
    """Check 2 on the last 40 bytes of a file."""
    if len(buf) != TRAILER_LEN:
        return "short trailer read"
    magic, count, rbytes, end_idx, misses = TRAILER.unpack_from(buf, 0)
    if magic != TRAILER_MAGIC:
        return f"bad trailer magic {bytes(magic)!r}"
    if header.header_len + rbytes + TRAILER_LEN != size:
        return f"header_len {header.header_len} + records_bytes {rbytes} + 40 != size {size}"
    return Trailer(count, rbytes, end_idx, misses)


def check_ends(
    name: DataFileName, head: bytes | memoryview, tail: bytes | memoryview, size: int
) -> str | None:
    """Checks 1-2 on a file's first bytes (at least 48 + 64, or the whole file) and its last 40: None
    if they hold, else the reason. For a reader that streams the rest and checks the xxh3 itself (the
    S3 transport: it never holds a whole file)."""
    header = _parse_header(head, name, size)
    if isinstance(header, str):
        return header
    trailer = _parse_trailer(tail, header, size)
    return trailer if isinstance(trailer, str) else None


def record_spans(data: bytes | memoryview, start: int, end: int) -> Iterator[tuple[int, int, int, int, int]]:
    """The one record walker (section 2.2, check 4): `(key offset, value offset, next record's offset,
    flags, exptime)` of each record in `data[start:end]`, offsets into `data`. Raises CorruptRecord at
    the first record that runs past `end` or breaks a field's rule; counting the records against the
    trailer is the caller's (`check_record_count`). It builds no objects: the populator's Python
    encoding loop runs on it."""
    unpack = RECORD.unpack_from
    pos = start
    n = 0
    while pos < end:
        if end - pos < RECORD_FIXED:
            raise CorruptRecord(f"record {n} at offset {pos}: header runs past records end {end}")
        vlen, flags, exptime, klen = unpack(data, pos)
        if not 1 <= klen <= MAX_KEY_LEN:
            raise CorruptRecord(f"record {n} at offset {pos}: key_len {klen} not in 1..{MAX_KEY_LEN}")
        kstart = pos + RECORD_FIXED
        vstart = kstart + klen
        nxt = vstart + vlen
        if nxt > end:
            raise CorruptRecord(f"record {n} at offset {pos}: key/value ({klen}+{vlen} bytes) run past {end}")
        if exptime <= 0 and exptime != NEVER_EXPIRES:
            raise CorruptRecord(f"record {n} at offset {pos}: exptime {exptime}")
        yield kstart, vstart, nxt, flags, exptime
        pos = nxt
        n += 1


def records_bounds(header: Header, trailer: Trailer) -> tuple[int, int]:
    """(start, end) offsets of a checked file's records."""
    return header.header_len, header.header_len + trailer.records_bytes


def check_record_count(header: Header, trailer: Trailer, count: int) -> None:
    """The rest of check 4, once `count` records were walked: raises CorruptRecord."""
    if count != trailer.record_count:
        raise CorruptRecord(f"{count} records parsed, trailer says {trailer.record_count}")
    if trailer.end_key_index - header.first_key_index != trailer.record_count + trailer.misses:
        raise CorruptRecord(
            f"end_key_index {trailer.end_key_index} - first_key_index {header.first_key_index}"
            f" != record_count {trailer.record_count} + misses {trailer.misses}"
        )


def check_records(data: bytes | memoryview, header: Header, trailer: Trailer) -> None:
    """Check 4 over a whole file (either version): raises CorruptRecord naming the first problem."""
    count = 0
    if header.version in COMMAND_VERSIONS:
        try:
            for _ in v2.spans(data, *records_bounds(header, trailer), stamped=header.version == VERSION_3):
                count += 1
        except v2.RecordError as e:
            raise CorruptRecord(str(e)) from e
    else:
        for _ in record_spans(data, *records_bounds(header, trailer)):
            count += 1
    check_record_count(header, trailer, count)


def record_at(data: bytes | memoryview, offset: int, version: int) -> Record:
    """The record at `offset` of a verified file's bytes (an offset from the populator's walk or an
    `O`/`NS` tag); the value is a view."""
    if version in COMMAND_VERSIONS:
        s = v2.parse_at(data, offset, len(data), stamped=version == VERSION_3)
        return Record(
            s.key,
            s.flags,
            s.exptime,
            memoryview(data)[s.value_start : s.value_end],
            s.source_cas,
            s.source_exp,
        )
    vlen, flags, exptime, klen = RECORD.unpack_from(data, offset)
    kstart = offset + RECORD_FIXED
    return Record(
        bytes(data[kstart : kstart + klen]),
        flags,
        exptime,
        memoryview(data)[kstart + klen : kstart + klen + vlen],
    )


def check_bytes(name: DataFileName, data: bytes | memoryview, walk_records: bool = True) -> Verdict:
    """Section 3 on a file's full contents in memory. With walk_records=False check 4 is left to the
    caller, which must run it over every record before using any (the populator does it while
    encoding, to save a pass)."""
    size = len(data)
    header = _parse_header(data, name, size)
    if isinstance(header, str):
        return Verdict(Status.INCOMPLETE, header, name)
    trailer = _parse_trailer(data[size - TRAILER_LEN :], header, size)
    if isinstance(trailer, str):
        return Verdict(Status.INCOMPLETE, trailer, name, header)
    digest = xxhash.xxh3_64_intdigest(data)
    if digest != name.xxh3:
        return Verdict(
            Status.CHECKSUM_MISMATCH, f"xxh3 {digest:016x} != name's {name.xxh3_hex}", name, header, trailer
        )
    if walk_records:
        try:
            check_records(data, header, trailer)
        except CorruptRecord as e:
            return Verdict(Status.CORRUPT, str(e), name, header, trailer)
    return Verdict(Status.OK, "ok", name, header, trailer, data)


class ReadBuffer:
    """A read buffer reused from file to file by one reading process. Reading a 17 MB file into fresh
    memory costs ~3x the copy itself in page faults (measured: 7 ms vs 2 ms per file); the populator
    reads every byte of the dump, so its workers keep one of these."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def view(self, size: int) -> memoryview:
        """A view of exactly `size` bytes. Growing makes a new buffer, so views handed out earlier
        stay valid (they keep the old one alive)."""
        if len(self._buf) < size:
            self._buf = bytearray(size + (size >> 3))
        return memoryview(self._buf)[:size]


def check_file(
    path: str | os.PathLike[str], walk_records: bool = True, buffer: ReadBuffer | None = None
) -> Verdict:
    """Decide whether a published data file is complete (section 3), reading it at most once in full.

    Raises FormatError if the file's name is not a data file name; OSError (e.g. the file vanished)
    propagates. On OK, `verdict.data` holds the verified bytes: a `bytes`, or with `buffer` a
    memoryview into it, valid until the buffer's next use.
    """
    p = Path(path)
    name = parse_name(p.name)
    if name is None:
        raise FormatError(f"{p.name}: not a data file name")
    with open(p, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        # Checks 1-2 with two small reads before paying for the whole file.
        head = f.read(HEADER_FIXED + MAX_NODE_LEN)
        header = _parse_header(head, name, size)
        if isinstance(header, str):
            return Verdict(Status.INCOMPLETE, header, name)
        f.seek(size - TRAILER_LEN)
        trailer = _parse_trailer(f.read(TRAILER_LEN), header, size)
        if isinstance(trailer, str):
            return Verdict(Status.INCOMPLETE, trailer, name, header)
        f.seek(0)
        data: bytes | memoryview
        if buffer is None:
            data = f.read(size)
        else:
            view = buffer.view(size)
            got = 0
            while got < size:
                n = f.readinto(view[got:])
                if not n:
                    break
                got += n
            data = view[:got]
    if len(data) != size:
        return Verdict(Status.INCOMPLETE, f"read {len(data)} of {size} bytes", name, header, trailer)
    # Re-run every check on the bytes we hold: those are the bytes that will be applied.
    return check_bytes(name, data, walk_records)


def iter_records(
    data: bytes | memoryview, header_len: int | None = None, version: int = VERSION
) -> Iterator[Record]:
    """Records of a file that passed `check_file` (or of a bare record stream when header_len is None
    and `data` holds only records, in `version`). With a header in `data` its version decides. Values
    are memoryviews into `data`. Raises FormatError (CorruptRecord for a bad record); never allocates
    from a length field."""
    mv = data if isinstance(data, memoryview) else memoryview(data)
    if header_len is None:
        if bytes(mv[:8]) == MAGIC:
            if len(mv) < HEADER_FIXED + TRAILER_LEN:
                raise FormatError(f"{len(mv)} bytes start with the magic but cannot hold header and trailer")
            version, header_len = HEADER.unpack_from(mv, 0)[1:3]
            end = len(mv) - TRAILER_LEN
            if not HEADER_FIXED <= header_len <= end:
                raise FormatError(f"header_len {header_len} outside {HEADER_FIXED}..{end}")
        else:
            header_len = 0
            end = len(mv)
    else:
        end = len(mv) - TRAILER_LEN
        if len(mv) >= HEADER_FIXED and bytes(mv[:8]) == MAGIC:  # a whole file: its header says the version
            version = HEADER.unpack_from(mv, 0)[1]
    if version in COMMAND_VERSIONS:
        try:
            for s in v2.spans(mv, header_len, end, stamped=version == VERSION_3):
                yield Record(
                    s.key, s.flags, s.exptime, mv[s.value_start : s.value_end], s.source_cas, s.source_exp
                )
        except v2.RecordError as e:
            raise CorruptRecord(str(e)) from e
        return
    for kstart, vstart, nxt, flags, exptime in record_spans(mv, header_len, end):
        yield Record(bytes(mv[kstart:vstart]), flags, exptime, mv[vstart:nxt])


# --------------------------------------------------------------------------------------------------
# The DONE manifest


@dataclass(frozen=True)
class ManifestFile:
    name: str
    chunk: int
    part: int
    xxh3: str
    records: int
    misses: int
    bytes: int


@dataclass(frozen=True)
class Manifest:
    version: int
    node: str
    dump_start_ms: int
    files: list[ManifestFile]
    totals: dict[str, int]
    source: dict[str, Any]
    raw: dict[str, Any] = field(repr=False)
    # Whether the dump holds every item the source held (section 5, "Completeness"); None: DONE
    # does not say (a dumper older than the field), which readers take as complete.
    complete: bool | None = None
    incomplete_reason: str | None = None
    # The numbers behind `complete` (keys_listed, records, misses_expired, misses_gone, undumped, ...).
    completeness: dict[str, Any] = field(default_factory=dict)

    @property
    def total_records(self) -> int:
        return int(self.totals.get("records", sum(f.records for f in self.files)))


def _opt_int(obj: dict[str, Any], key: str, where: str) -> int:
    """An optional integer field (default 0): present but not an integer is a FormatError naming it."""
    return int(_req(obj, key, int, where)) if key in obj else 0


def _req(obj: dict[str, Any], key: str, typ: type, where: str) -> Any:
    if key not in obj:
        raise FormatError(f"{where}: missing field {key!r}")
    val = obj[key]
    if typ is int and (isinstance(val, bool) or not isinstance(val, int)):
        raise FormatError(f"{where}: field {key!r} must be an integer, got {val!r}")
    if typ is not int and not isinstance(val, typ):
        raise FormatError(f"{where}: field {key!r} must be {typ.__name__}, got {val!r}")
    return val


def parse_manifest(text: bytes | str, where: str = "DONE") -> Manifest:
    """Parse and validate a DONE manifest (section 5). Raises FormatError naming the problem."""
    try:
        obj = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ManifestNotReadable(f"{where}: not valid JSON ({e})") from e
    if not isinstance(obj, dict):
        raise FormatError(f"{where}: not a JSON object")
    if obj.get("format") != "cachewarm-dump":
        raise FormatError(f"{where}: format {obj.get('format')!r} != 'cachewarm-dump'")
    version = _req(obj, "version", int, where)
    if version not in VERSIONS:
        raise FormatError(f"{where}: version {version} not in {VERSIONS}")
    files: list[ManifestFile] = []
    for i, fobj in enumerate(_req(obj, "files", list, where)):
        w = f"{where}: files[{i}]"
        if not isinstance(fobj, dict):
            raise FormatError(f"{w}: not an object")
        mf = ManifestFile(
            name=_req(fobj, "name", str, w),
            chunk=_req(fobj, "chunk", int, w),
            part=_req(fobj, "part", int, w),
            xxh3=_req(fobj, "xxh3", str, w),
            records=_req(fobj, "records", int, w),
            misses=_opt_int(fobj, "misses", w),
            bytes=_req(fobj, "bytes", int, w),
        )
        parsed = parse_name(mf.name)
        if parsed is None:
            raise FormatError(f"{w}: {mf.name!r} is not a data file name")
        if (parsed.chunk, parsed.part, parsed.xxh3_hex) != (mf.chunk, mf.part, mf.xxh3):
            raise FormatError(f"{w}: chunk/part/xxh3 disagree with the name {mf.name!r}")
        files.append(mf)
    names = [f.name for f in files]
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise FormatError(f"{where}: lists a file more than once: {', '.join(dup[:3])}")
    slots = [(f.chunk, f.part) for f in files]
    if len(set(slots)) != len(slots):
        raise FormatError(f"{where}: lists two files for one (chunk, part)")
    totals = obj.get("totals", {})
    if not isinstance(totals, dict):
        raise FormatError(f"{where}: totals must be an object")
    if "records" in totals and totals["records"] != sum(f.records for f in files):
        raise FormatError(
            f"{where}: totals.records {totals['records']} != sum of files' records "
            f"{sum(f.records for f in files)}"
        )
    source = obj.get("source", {})
    complete = obj.get("complete")
    if complete is not None and not isinstance(complete, bool):
        raise FormatError(f"{where}: field 'complete' must be true or false, got {complete!r}")
    reason = obj.get("incomplete_reason")
    if reason is not None and not isinstance(reason, str):
        raise FormatError(f"{where}: field 'incomplete_reason' must be a string or null, got {reason!r}")
    completeness = obj.get("completeness", {})
    if not isinstance(completeness, dict):
        raise FormatError(f"{where}: field 'completeness' must be an object")
    if complete is False and not reason:
        reason = "no reason given"
    return Manifest(
        version=version,
        node=_req(obj, "node", str, where),
        dump_start_ms=_opt_int(obj, "dump_start_ms", where),
        files=files,
        totals={k: v for k, v in totals.items() if isinstance(v, int)},
        source=source if isinstance(source, dict) else {},
        raw=obj,
        complete=complete,
        incomplete_reason=reason,
        completeness=completeness,
    )


def read_manifest(path: str | os.PathLike[str]) -> Manifest:
    """Read `DONE`. On a ro,norecovery mount it may be half visible: that raises FormatError too."""
    return parse_manifest(Path(path).read_bytes(), where=str(path))
