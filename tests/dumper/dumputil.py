"""Helpers for the dumper tests: fast loading over a raw socket, running the dumper, reading a dump."""

from __future__ import annotations

import base64
import json
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from cachewarm.datapath import format as dataformat
from cachewarm.testing.memcached import MemcachedServer


@dataclass(frozen=True)
class Item:
    key: bytes
    value: bytes
    flags: int = 0
    ttl: int = 0  # memcached semantics: 0 = never, <= 30 days relative, else absolute


def _ms_line(it: Item) -> bytes:
    if all(0x21 <= b <= 0x7E for b in it.key):
        k, b = it.key, b""
    else:
        k, b = base64.b64encode(it.key), b" b"
    return b"ms %s %d T%d F%d%s q\r\n%s\r\n" % (k, len(it.value), it.ttl, it.flags, b, it.value)


def load(server: MemcachedServer, items: Iterable[Item], batch: int = 2000) -> None:
    """Pipelined quiet `ms` over one raw socket; fails on any reply other than the final MN."""
    with socket.create_connection((server.host, server.port), timeout=60) as s:
        buf: list[bytes] = []

        def flush() -> None:
            s.sendall(b"".join(buf) + b"mn\r\n")
            buf.clear()
            reply = b""
            while not reply.endswith(b"MN\r\n"):
                chunk = s.recv(65536)
                assert chunk, "memcached closed the connection while loading"
                reply += chunk
            assert reply == b"MN\r\n", f"load failed: {reply[:200]!r}"

        for it in items:
            buf.append(_ms_line(it))
            if len(buf) >= batch:
                flush()
        if buf:
            flush()


def load_binary_protocol(server: MemcachedServer, items: Iterable[Item]) -> None:
    """Binary-protocol SET, one at a time: the only way to store a binary key longer than 186 bytes
    (its base64 form does not fit a meta command's 250-byte key token). Such items are also stored
    without memcached's "binary key" mark, so `mg ... k` would echo their key raw."""
    with socket.create_connection((server.host, server.port), timeout=60) as s:
        for it in items:
            extras = struct.pack(">II", it.flags, it.ttl)
            body = extras + it.key + it.value
            hdr = struct.pack(">BBHBBHIIQ", 0x80, 0x01, len(it.key), len(extras), 0, 0, len(body), 0, 0)
            s.sendall(hdr + body)
            resp = b""
            while len(resp) < 24:
                chunk = s.recv(4096)
                assert chunk, "memcached closed the binary connection"
                resp += chunk
            total = struct.unpack(">I", resp[8:12])[0]
            while len(resp) < 24 + total:
                resp += s.recv(4096)
            status = struct.unpack(">H", resp[6:8])[0]
            assert status == 0, (
                f"binary SET of a {len(it.key)}-byte key failed: status {status:#x} {resp[24:]!r}"
            )


def load_numbered(server: MemcachedServer, n: int, value_size: int = 10, prefix: str = "k") -> None:
    """n items `<prefix><i>` with small values; built in bulk for speed."""
    with socket.create_connection((server.host, server.port), timeout=120) as s:
        step = 5000
        val = b"x" * value_size
        for start in range(0, n, step):
            lines = [
                b"ms %s%d %d T0 F%d q\r\n%s\r\n" % (prefix.encode(), i, value_size, i & 0xFFFF, val)
                for i in range(start, min(n, start + step))
            ]
            s.sendall(b"".join(lines) + b"mn\r\n")
            reply = b""
            while not reply.endswith(b"MN\r\n"):
                chunk = s.recv(65536)
                assert chunk, "memcached closed the connection while loading"
                reply += chunk
            assert reply == b"MN\r\n", f"load failed: {reply[:200]!r}"


def dump_cmd(dumper: Path, server: MemcachedServer, out: Path, *args: str) -> list[str]:
    return [str(dumper), "--host", server.host, "--port", str(server.port), "--out", str(out), *args]


def run_dump(
    dumper: Path, server: MemcachedServer, out: Path, *args: str, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        dump_cmd(dumper, server, out, *args), capture_output=True, text=True, timeout=timeout, check=False
    )


@dataclass
class Dump:
    manifest: dataformat.Manifest | None
    records: list[dataformat.Record]
    files: list[str]

    def by_key(self) -> dict[bytes, dataformat.Record]:
        out: dict[bytes, dataformat.Record] = {}
        for r in self.records:
            assert r.key not in out, f"key {r.key!r} dumped twice"
            out[r.key] = r
        return out


def read_dump(out: Path, require_done: bool = True) -> Dump:
    """Every published data file must verify (section 3); with DONE, it must list exactly those files."""
    names = sorted(p.name for p in out.iterdir() if dataformat.parse_name(p.name) is not None)
    records: list[dataformat.Record] = []
    for n in names:
        v = dataformat.check_file(out / n)
        assert v.ok, f"{n}: {v.status} {v.reason}"
        assert v.data is not None
        recs = [
            dataformat.Record(r.key, r.flags, r.exptime, bytes(r.value))
            for r in dataformat.iter_records(v.data)
        ]
        assert v.trailer is not None and len(recs) == v.trailer.record_count
        records.extend(recs)
    manifest = None
    if (out / "DONE").exists():
        manifest = dataformat.read_manifest(out / "DONE")
        assert sorted(f.name for f in manifest.files) == names
        assert manifest.total_records == len(records)
    else:
        assert not require_done, "no DONE manifest"
    return Dump(manifest, records, names)


def assert_accounted(manifest: dataformat.Manifest) -> dict[str, object]:
    """DONE's completeness numbers add up (docs/data-format.md section 5); returns them."""
    comp = manifest.raw["completeness"]
    totals = manifest.totals
    explained = comp["misses_expired"] + comp["misses_gone"] + comp["skipped_min_ttl"] + comp["undumped"]
    assert comp["records"] == totals["records"] and comp["keys_listed"] == totals["keys_listed"]
    assert explained == totals["misses"], comp
    assert comp["records"] + explained == comp["keys_listed"], comp
    assert manifest.raw["complete"] is (manifest.raw["incomplete_reason"] is None)
    return dict(comp)


def progress_lines(stdout: str) -> list[dict[str, object]]:
    return [json.loads(ln) for ln in stdout.splitlines() if ln.startswith("{")]


def leftovers(out: Path) -> Sequence[str]:
    """Temporary files left in OUT (readers ignore them, but a clean failure removes its own)."""
    return [p.name for p in out.iterdir() if p.name.startswith(".tmp-")] if out.exists() else []


@contextmanager
def another_clients_crawl(server: MemcachedServer) -> Iterator[bytearray]:
    """Another client's `lru_crawler metadump all`, read slowly, holding the crawler meanwhile; yields
    the bytes it got, and on exit waits for its END. 64 KiB every 20 ms: the crawl takes seconds and
    the crawler waits on this client, but never for a second (memcached 1.6.38 corrupts the listing
    of a client that stalls for one: a timed-out write counts as sent; 1.6.45 retries instead).
    Hanging up instead can leave 1.6.18's crawler stuck for good when another crawl request waits."""
    blocker = socket.create_connection((server.host, server.port))
    blocker.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
    blocker.settimeout(60)
    blocker.sendall(b"lru_crawler metadump all\r\n")
    got = bytearray()

    def read_slowly() -> None:
        while b"END\r\n" not in got[-4096:]:
            chunk = blocker.recv(64 << 10)
            assert chunk, "memcached closed the other client's crawl"
            got.extend(chunk)
            time.sleep(0.02)

    reader = threading.Thread(target=read_slowly)
    reader.start()
    time.sleep(0.2)
    try:
        yield got
    finally:
        reader.join()
        blocker.close()
