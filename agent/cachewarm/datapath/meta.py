"""Pipelined quiet meta-protocol writes (`ms ... q`) to one memcached over a raw socket.

Quiet mode suppresses `HD` (stored), so on the wire come back only `NS` (add mode: the key is
already there, which counts as present), errors, and the `MN` we send at the end of each batch.
At most two batches are in flight: the replies to a batch are read while the next batch is on its
way, so the server never stalls writing replies we do not read and we never wait a full round trip
per batch. Every `SERVER_ERROR`/`CLIENT_ERROR`/`ERROR` is counted and reported: the caller fails.
"""

from __future__ import annotations

import base64
import re
import socket
from collections import deque
from dataclasses import dataclass, field

# Pieces per sendmsg call (Linux IOV_MAX is 1024).
_IOV_MAX = 1000
# memcached reads an exptime/TTL above 30 days as an absolute unix time.
MAX_RELATIVE_TTL = 30 * 24 * 3600


class DestinationUnavailable(ConnectionError):
    """The destination refused, reset or closed the connection: retry the file after a backoff."""


@dataclass(frozen=True)
class ServerIdentity:
    """Tells a restarted memcached (which came back empty) from the one we wrote to."""

    pid: int
    started: int  # unix seconds, from `time - uptime`

    def same_as(self, other: ServerIdentity) -> bool:
        return self.pid == other.pid and abs(self.started - other.started) <= 2


@dataclass
class BatchCounts:
    sent: int = 0
    not_stored: int = 0
    errors: int = 0
    first_error: str | None = None


_PLAIN_KEY = re.compile(rb"[\x21-\x7e]{1,250}")


def is_plain_key(key: bytes) -> bool:
    """A key memcached's text protocol takes as is: 1..250 bytes in 0x21..0x7E."""
    return _PLAIN_KEY.fullmatch(key) is not None


def wire_key(key: bytes) -> tuple[bytes, bytes]:
    """(key token, extra flag) for a meta command: base64 + ` b` for keys with other bytes."""
    if is_plain_key(key):
        return key, b""
    enc = base64.b64encode(key)
    if len(enc) > 250:
        raise ValueError(f"key of {len(key)} bytes is too long for a base64 meta key (max 186 bytes)")
    return enc, b" b"


def ttl_token(exptime: int, now: int) -> int | None:
    """The `T` value for an item expiring at `exptime` (-1 = never), or None if it has expired."""
    if exptime == -1:
        return 0
    remaining = exptime - now
    if remaining <= 0:
        return None
    # A relative TTL above 30 days would be misread as an absolute time: send the absolute time.
    return remaining if remaining <= MAX_RELATIVE_TTL else exptime


@dataclass
class MetaConnection:
    host: str
    port: int
    timeout: float = 30.0
    sock: socket.socket | None = field(default=None, repr=False)
    _rbuf: bytearray = field(default_factory=bytearray, repr=False)
    _inflight: deque[BatchCounts] = field(default_factory=deque, repr=False)
    totals: BatchCounts = field(default_factory=BatchCounts)

    def connect(self) -> ServerIdentity:
        try:
            self.sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
        except (OSError, UnicodeError) as e:
            raise DestinationUnavailable(f"{self.host}:{self.port}: cannot connect: {e}") from e
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return self.identity()

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        self._rbuf.clear()
        self._inflight.clear()

    def _send(self, data: bytes | bytearray | memoryview) -> None:
        assert self.sock is not None
        try:
            self.sock.sendall(data)
        except OSError as e:
            raise DestinationUnavailable(f"{self.host}:{self.port}: send failed: {e}") from e

    def _readline(self) -> bytes:
        assert self.sock is not None
        while True:
            i = self._rbuf.find(b"\r\n")
            if i >= 0:
                line = bytes(self._rbuf[:i])
                del self._rbuf[: i + 2]
                return line
            try:
                chunk = self.sock.recv(65536)
            except OSError as e:
                raise DestinationUnavailable(f"{self.host}:{self.port}: receive failed: {e}") from e
            if not chunk:
                raise DestinationUnavailable(f"{self.host}:{self.port}: connection closed by the server")
            self._rbuf += chunk

    def identity(self) -> ServerIdentity:
        stats = self.stats()
        try:
            return ServerIdentity(int(stats["pid"]), int(stats["time"]) - int(stats["uptime"]))
        except (KeyError, ValueError) as e:
            raise DestinationUnavailable(f"{self.host}:{self.port}: stats lacks pid/time/uptime") from e

    def stats(self) -> dict[str, str]:
        self._send(b"stats\r\n")
        stats: dict[str, str] = {}
        while True:
            line = self._readline()
            if line == b"END":
                break
            parts = line.decode("ascii", "replace").split(" ", 2)
            if len(parts) == 3 and parts[0] == "STAT":
                stats[parts[1]] = parts[2]
            elif line.startswith((b"SERVER_ERROR", b"CLIENT_ERROR", b"ERROR")):
                raise DestinationUnavailable(f"{self.host}:{self.port}: stats failed: {line!r}")
        return stats

    def send_batch(self, payload: bytes | bytearray | list[bytes | memoryview], count: int) -> None:
        """Send one batch of `ms ... q` commands (already encoded: one buffer, or a list of pieces
        sent with scatter-gather I/O so values go from the file's buffer to the socket uncopied)
        followed by `mn`; keeps at most two batches in flight, reading the older one's replies first."""
        if len(self._inflight) >= 2:
            self._drain_one()
        if isinstance(payload, list):
            self._send_pieces([*payload, b"mn\r\n"])
        else:
            self._send(payload)
            self._send(b"mn\r\n")
        self._inflight.append(BatchCounts(sent=count))

    def _send_pieces(self, pieces: list[bytes | memoryview]) -> None:
        assert self.sock is not None
        i, n = 0, len(pieces)
        try:
            while i < n:
                chunk = pieces[i : i + _IOV_MAX]
                sent = self.sock.sendmsg(chunk)
                # Advance past what was sent; a partial send leaves the rest of one piece.
                while sent > 0:
                    size = len(pieces[i])
                    if sent >= size:
                        sent -= size
                        i += 1
                    else:
                        pieces[i] = memoryview(pieces[i])[sent:]
                        sent = 0
                while i < n and len(pieces[i]) == 0:
                    i += 1
        except OSError as e:
            raise DestinationUnavailable(f"{self.host}:{self.port}: send failed: {e}") from e

    def _drain_one(self) -> None:
        b = self._inflight.popleft()
        while True:
            line = self._readline()
            if line == b"MN":
                break
            if line == b"NS":
                b.not_stored += 1
            else:
                b.errors += 1
                if b.first_error is None:
                    b.first_error = line.decode("ascii", "replace")
        t = self.totals
        t.sent += b.sent
        t.not_stored += b.not_stored
        t.errors += b.errors
        if t.first_error is None:
            t.first_error = b.first_error

    def flush(self) -> BatchCounts:
        """Wait for every batch in flight; returns the running totals."""
        while self._inflight:
            self._drain_one()
        return self.totals
