"""atheris harness for the Python data-file reader (`cachewarm.datapath.format`).

Input: byte 0 picks how the file is named (its real XXH3 so the record checks run, or a checksum
that does not match) and whether the header/trailer framing is repaired first (so mutations reach
the record walk), the rest is the file's bytes (seeds: tests/vectors/*.cwd and DONE). Properties:
- `check_bytes` never raises and never hands out data for a file that fails a check;
- a file it accepts yields exactly `record_count` records from `iter_records`, each within the file;
- `iter_records` on a bare record stream and `parse_manifest` raise nothing but FormatError;
- no length field makes it allocate: run with -rss_limit_mb / -malloc_limit_mb (make fuzz does).

Run: python3 tests/fuzz/fuzz_dataformat.py CORPUS_DIR SEED_DIR... -max_total_time=60
"""

from __future__ import annotations

import contextlib
import struct
import sys

import atheris

with atheris.instrument_imports():
    import xxhash
    from cachewarm.datapath import format as df


def _name_for(data: bytes, mode: int) -> df.DataFileName:
    node, chunk, part = "fuzz", 0, 0
    if len(data) >= df.HEADER_FIXED:
        _, _, _, part, _, chunk, _, node_len, _ = struct.unpack_from("<8sHHIQQQH6s", data, 0)
        raw = data[df.HEADER_FIXED : df.HEADER_FIXED + node_len]
        cand = raw.decode("ascii", errors="replace")
        if df.NODE_RE.fullmatch(cand) and chunk < 10**8 and part < 10**4:
            node = cand
        else:
            chunk = part = 0
    digest = xxhash.xxh3_64_intdigest(data)
    if mode & 1:
        digest ^= 1 + mode  # a checksum that does not match
    return df.DataFileName(chunk=chunk, part=part, node=node, xxh3=digest)


def _repair(data: bytes) -> bytes:
    """Make the cheap checks (1-2) pass so mutations reach the record walk, where the length fields
    (key_len, value_len, record_count, records_bytes) are interpreted."""
    if len(data) < df.HEADER_FIXED + df.TRAILER_LEN:
        return data
    b = bytearray(data)
    node_len = max(1, min(df.MAX_NODE_LEN, struct.unpack_from("<H", b, 40)[0]))
    header_len = df.HEADER_FIXED + node_len
    if header_len + df.TRAILER_LEN > len(b):
        return data
    b[0:8] = df.MAGIC
    struct.pack_into("<HHH", b, 8, df.VERSION, header_len, 0)
    struct.pack_into("<H", b, 40, node_len)
    b[df.HEADER_FIXED : header_len] = b"n" * node_len
    t = len(b) - df.TRAILER_LEN
    b[t : t + 8] = df.TRAILER_MAGIC
    struct.pack_into("<Q", b, t + 16, len(b) - header_len - df.TRAILER_LEN)
    return bytes(b)


def test_one_input(buf: bytes) -> None:
    if not buf:
        return
    mode, data = buf[0], bytes(buf[1:])
    if mode & 2:
        data = _repair(data)
    name = _name_for(data, mode)
    v = df.check_bytes(name, data)
    if v.ok:
        assert v.data is data and v.header is not None and v.trailer is not None
        n = 0
        for rec in df.iter_records(v.data, v.header.header_len):
            assert 1 <= len(rec.key) <= df.MAX_KEY_LEN
            assert len(rec.value) <= len(data)
            assert rec.exptime == df.NEVER_EXPIRES or rec.exptime > 0
            n += 1
        assert n == v.trailer.record_count, (n, v.trailer)
        # A verified file re-verifies under its own name (the checksum covers every byte).
        assert df.parse_name(name.name) == name
    else:
        assert v.data is None
    # A bare record stream (no header). Data starting with the file magic is only ever passed to
    # iter_records after check_bytes accepted it (see tests/fuzz/test_fuzz.py for the known gap).
    if not data.startswith(df.MAGIC):
        try:
            for rec in df.iter_records(data):
                assert len(rec.value) <= len(data)
        except df.FormatError:
            pass
    # Any bad DONE must raise FormatError (naming the problem), never another exception.
    with contextlib.suppress(df.FormatError):
        df.parse_manifest(data)


def main() -> None:
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
