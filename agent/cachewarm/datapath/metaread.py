"""Pipelined meta-protocol reads (`mg <key> b v f t k`) and key listing (`lru_crawler metadump`), for
`cachewarm verify`, the warm's final check and tests. Replies are parsed by declared lengths."""

from __future__ import annotations

import re
import socket
import urllib.parse
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from cachewarm.meta import DestinationUnavailable, wire_key

_METADUMP = re.compile(rb"key=(\S+) exp=(-?\d+)")


@dataclass(frozen=True)
class Item:
    value: bytes
    flags: int
    ttl: int  # remaining seconds, -1 = never expires


@dataclass
class MetaReader:
    host: str
    port: int
    timeout: float = 30.0
    sock: socket.socket | None = field(default=None, repr=False)
    _buf: bytearray = field(default_factory=bytearray, repr=False)
    _rx: memoryview | None = field(default=None, repr=False)

    def __enter__(self) -> MetaReader:
        try:
            self.sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
        except OSError as e:
            raise DestinationUnavailable(f"{self.host}:{self.port}: cannot connect: {e}") from e
        return self

    def __exit__(self, *exc: object) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def _fill(self) -> None:
        assert self.sock is not None
        if self._rx is None:
            self._rx = memoryview(bytearray(1 << 18))
        # recv_into a reused buffer: sock.recv(large) allocates (and page-faults) a new buffer per call.
        n = self.sock.recv_into(self._rx)
        if not n:
            raise DestinationUnavailable(f"{self.host}:{self.port}: connection closed")
        self._buf += self._rx[:n]

    def _line(self) -> bytes:
        while True:
            i = self._buf.find(b"\r\n")
            if i >= 0:
                line = bytes(self._buf[:i])
                del self._buf[: i + 2]
                return line
            self._fill()

    def _value(self, n: int) -> bytes:
        """n bytes of value and the `\r\n` after them."""
        while len(self._buf) < n + 2:
            self._fill()
        out = bytes(self._buf[:n])
        del self._buf[: n + 2]
        return out

    def _pipelined(self, keys: list[bytes], batch: int, flags: bytes) -> Iterator[bytes]:
        """Send `mg <key> <flags>q O<index>` in batches ended by `mn`; yield every reply line but MN.

        O<index> ties each reply to its key without trusting the echoed key's encoding. The caller
        reads a `VA` line's value before asking for the next line.
        """
        assert self.sock is not None
        for start in range(0, len(keys), batch):
            req = bytearray()
            for j, k in enumerate(keys[start : start + batch], start):
                tok, b = wire_key(k)
                req += b"mg %b%b %bq O%d\r\n" % (tok, b, flags, j)
            req += b"mn\r\n"
            self.sock.sendall(req)
            while (line := self._line()) != b"MN":
                if line.startswith((b"SERVER_ERROR", b"CLIENT_ERROR", b"ERROR")):
                    raise RuntimeError(f"{self.host}:{self.port} answered {line!r} to mg")
                yield line

    def get_many(self, keys: Iterable[bytes], batch: int = 500) -> dict[bytes, Item]:
        """Items of the keys that exist; a missing key is absent from the result."""
        out: dict[bytes, Item] = {}
        keys = list(keys)
        for line in self._pipelined(keys, batch, b"v f t "):
            if not line.startswith(b"VA "):
                continue
            parts = line.split(b" ")
            size = int(parts[1])
            flags, ttl, idx = 0, -1, -1
            for p in parts[2:]:
                if p[:1] == b"f":
                    flags = int(p[1:])
                elif p[:1] == b"t":
                    ttl = int(p[1:])
                elif p[:1] == b"O":
                    idx = int(p[1:])
            out[keys[idx]] = Item(self._value(size), flags, ttl)
        return out

    def missing(self, keys: Iterable[bytes], batch: int = 1000) -> list[bytes]:
        """The keys the server does not hold (`mg` without a value: cheap)."""
        keys = list(keys)
        found = {
            int(line.rsplit(b"O", 1)[1])
            for line in self._pipelined(keys, batch, b"")
            if line.startswith(b"HD")
        }
        return [k for j, k in enumerate(keys) if j not in found]


def list_keys(
    host: str, port: int, timeout: float = 60.0, modes: Sequence[str] = ("hash", "all")
) -> Iterator[tuple[bytes, int]]:
    """(key, absolute exptime or -1) of every item, from `lru_crawler metadump hash`.

    `hash` walks the hash table waiting on each bucket's lock, so it lists every item that exists
    throughout the crawl; `all` walks the LRUs and skips items whose lock is busy (1.6.18), so a
    verify of a server under load could miss keys. A server without `hash` (a memcached older than
    it answers `BADCLASS invalid class id`, as 1.6.18 does to an unknown mode) or one answering any
    other error before listing a key is asked again with the next of `modes`: `metadump all`, with
    its skips. `BUSY` (another crawl is running) is raised, not retried with another mode.
    """
    for i, mode in enumerate(modes):
        try:
            yield from _metadump(host, port, mode, timeout)
            return
        except _ModeRefused:
            if i == len(modes) - 1:
                raise


class _ModeRefused(RuntimeError):
    """The server answered an error to `lru_crawler metadump <mode>` before listing any key."""


def _metadump(host: str, port: int, mode: str, timeout: float) -> Iterator[tuple[bytes, int]]:
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(b"lru_crawler metadump %s\r\n" % mode.encode())
        buf = b""
        listed = 0
        while True:
            chunk = s.recv(1 << 20)
            if not chunk:
                raise DestinationUnavailable(f"{host}:{port}: closed during metadump {mode}")
            buf += chunk
            lines = buf.split(b"\n")
            buf = lines.pop()
            for ln in lines:
                ln = ln.rstrip(b"\r")
                if ln == b"END":
                    return
                m = _METADUMP.match(ln)
                if m is None:
                    if ln.startswith((b"ERROR", b"CLIENT_ERROR", b"SERVER_ERROR", b"BADCLASS")):
                        err = _ModeRefused if listed == 0 else RuntimeError
                        raise err(f"{host}:{port}: metadump {mode} failed: {ln!r}")
                    if ln.startswith(b"BUSY"):
                        raise RuntimeError(f"{host}:{port}: metadump {mode} failed: {ln!r}")
                    continue
                listed += 1
                raw = m[1]
                key = urllib.parse.unquote_to_bytes(raw) if b"%" in raw else raw
                yield key, int(m[2])
