"""Keys of 187..250 bytes with no base64 form (issue 21, gap 2). A meta command carries such a key raw
unless it holds a space, a '\\n' or a NUL: the dumper fetches it with `mg <raw key> v f t`, value,
flags and TTL from one moment, and writes the record it always wrote (v2: the binary ADDQ). The rest
keep the binary protocol's GETKQ, their TTL from the listing: counted as `ttl_from_listing`. Real
memcached, every release of the matrix."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest
from cachewarm.datapath import format as dataformat
from cachewarm.datapath import format_v2
from cachewarm.testing.memcached import MemcachedServer

from tests.dumper.dumputil import Item, load, load_binary_protocol, read_dump, run_dump

# What the dumper's codec.h IsTextKey sends raw: every byte but these.
UNTEXTABLE = (0x00, 0x0A, 0x20)


def _mg_batch(srv: MemcachedServer, keys: list[bytes]) -> bytes:
    req = b"".join(b"mg %b v f t q u O%d\r\n" % (k, i) for i, k in enumerate(keys)) + b"mn\r\n"
    with socket.create_connection((srv.host, srv.port), timeout=10) as s:
        s.sendall(req)
        got = b""
        s.settimeout(5)
        try:
            while not got.endswith(b"MN\r\n"):
                chunk = s.recv(1 << 16)
                if not chunk:
                    break
                got += chunk
        except TimeoutError:
            pass
    return got


def test_a_meta_command_carries_a_raw_key_with_any_byte_but_space_newline_nul(
    memcached, memcached_version: str
) -> None:
    """The measurement behind IsTextKey, pinned: a 200-byte key holding one byte outside 0x21..0x7E
    (at its start, middle or end), stored through the binary protocol, reads back exact with a
    pipelined raw-key `mg` for every byte but space, '\\n' and NUL; those three do not."""
    srv: MemcachedServer = memcached(memory_mb=64)
    safe = [b for b in range(256) if not 0x21 <= b <= 0x7E and b not in UNTEXTABLE]
    keys = []
    for b in safe:
        for at in (0, 100, 199):
            k = bytearray(b"k" * 200)
            k[at] = b
            keys.append(bytes(k))
    items = [Item(k, b"v%d" % i, i, 0) for i, k in enumerate(keys)]
    load_binary_protocol(srv, items)
    want = b"".join(
        b"VA %d f%d t-1 O%d\r\n%b\r\n" % (len(it.value), it.flags, i, it.value) for i, it in enumerate(items)
    )
    assert _mg_batch(srv, keys) == want + b"MN\r\n"
    # Space and '\n' end the key token on every release; NUL ends the command on 1.6.18 and 1.6.38
    # (1.6.45 reads it): the dumper never sends any of them raw.
    for b in (0x0A, 0x20) if memcached_version == "1.6.45" else UNTEXTABLE:
        k = b"u" * 100 + bytes([b]) + b"u" * 99
        load_binary_protocol(srv, [Item(k, b"x", 1, 0)])
        assert _mg_batch(srv, [k]) != b"VA 1 f1 t-1 O0\r\nx\r\nMN\r\n", hex(b)


def _text_keys() -> list[bytes]:
    """187..250-byte keys with no base64 form that a meta command carries raw."""
    return [
        b"colon:" * 31 + b"\xff",  # 187 bytes
        (b"a:b/\xc3\xa9" * 40)[:200],
        bytes([0x0D]) + b"r" * 198 + bytes([0x0D]),  # '\r' at both ends
        (b"\t\x01\x7f\x80" * 63)[:250],
    ]


def _untextable_keys() -> list[bytes]:
    return [(b"sp ace" * 40)[:200], (b"new\nline" * 30)[:188], (b"\x00\xff" * 125)]


def _check_v2_bytes(out: Path) -> int:
    """Each data file's records are byte for byte what the format's encoder (format_v2.encode_record,
    the Python twin) makes of them; returns the binary records counted."""
    binary = 0
    for name in sorted(p.name for p in out.iterdir() if dataformat.parse_name(p.name) is not None):
        v = dataformat.check_file(out / name)
        assert v.ok and v.data is not None and v.header is not None and v.trailer is not None
        start, end = dataformat.records_bounds(v.header, v.trailer)
        data = bytes(v.data)
        pos = start
        for r in dataformat.iter_records(v.data):
            enc = format_v2.encode_record(r.key, r.flags, r.exptime, bytes(r.value), pos)
            assert data[pos : pos + len(enc)] == enc, (name, pos, r.key[:16])
            binary += format_v2.needs_binary_record(r.key)
            pos += len(enc)
        assert pos == end
    return binary


@pytest.mark.parametrize("version", [1, 2])
def test_long_keys_a_meta_command_carries_come_with_mg_and_their_own_ttl(
    dumper_bin: Path, memcached, tmp_path: Path, version: int
) -> None:
    """Text-safe long keys are dumped exact (value, flags, the TTL `mg t` read) with no
    binary-protocol fetch; untextable ones by the binary protocol, their TTL read again after the
    fetch (ttl_reread; none from the first listing).
    A value larger than the receive buffer (streamed) on a text-safe long key too. v2: the records
    are the ADDQ records such keys always got, byte for byte."""
    srv: MemcachedServer = memcached(memory_mb=64)
    text = [Item(k, b"text-%d" % i * 30, 0xFFFFFFF0 + i, 3600 * (i % 2)) for i, k in enumerate(_text_keys())]
    big = Item(b"\xfe" * 230, bytes(range(256)) * 1200, 9, 7200)  # 300 KB > --buffer-size 64k
    untext = [Item(k, b"bin-%d" % i, 100 + i, 1800 * (i % 2)) for i, k in enumerate(_untextable_keys())]
    plain = [Item(b"p" * 250, b"plain", 3, 0), Item(b"\xff" * 186, b"b64", 4, 0)]
    load(srv, plain)
    load_binary_protocol(srv, [*text, big, *untext])
    want = [*text, big, *untext, *plain]
    out = tmp_path / "o"
    r = run_dump(dumper_bin, srv, out, "--format", str(version), "--batch", "3", "--buffer-size", "64k")
    assert r.returncode == 0, r.stderr
    now = time.time()
    got = read_dump(out).by_key()
    assert set(got) == {it.key for it in want}
    for it in want:
        rec = got[it.key]
        assert (rec.value, rec.flags) == (it.value, it.flags), it.key[:16]
        if it.ttl == 0:
            assert rec.exptime == -1, it.key[:16]
        else:
            assert now + it.ttl - 5 <= rec.exptime <= now + it.ttl, (it.key[:16], rec.exptime - now)
    comp = json.loads((out / "DONE").read_text())["completeness"]
    assert comp["binary_protocol_records"] == len(untext)
    assert comp["ttl_from_listing"] == 0 and comp["ttl_reread"] == len(untext)
    assert comp["undumped"] == 0 and comp["records"] == len(want)
    if version == 2:
        assert _check_v2_bytes(out) == len(text) + 1 + len(untext)
