"""memcached's binary protocol, for the one thing the meta protocol cannot do: name a key whose base64
form is longer than 250 characters (binary keys of 187..250 bytes; `wire.meta_expressible`).

memcached 1.6 still speaks it (`-B auto`, the default; checked on 1.6.18, 1.6.38 and 1.6.45) and
decides the protocol per connection from its first byte, so these items travel on a connection of
their own. Writes are ADDQ/SETQ (quiet: only failures answer) with the item's flags and its absolute
expiry in the extras (memcached reads an expiration above 30 days as a unix time), ended by a NOOP;
reads are GETKQ + NOOP (misses are silent). Every answer carries the request's opaque, which the
caller uses to name the item.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field

from cachewarm.datapath import _speedups
from cachewarm.datapath.wire import DestinationUnavailable

# magic, opcode, key length, extras length, data type, vbucket (request) / status (response),
# total body length, opaque, cas
HEADER = struct.Struct(">BBHBBHIIQ")
STORE_EXTRAS = struct.Struct(">II")  # flags, expiration
RESPONSE = 0x81
OP_DELETE, OP_NOOP, OP_GETKQ, OP_SETQ, OP_ADDQ = 0x04, 0x0A, 0x0D, 0x11, 0x12
STATUS_OK, KEY_NOT_FOUND, KEY_EXISTS, NOT_STORED = 0x00, 0x01, 0x02, 0x05
_STORE_OP = {"add": OP_ADDQ, "set": OP_SETQ}
_MAX_EXPIRATION = 0xFFFFFFFF


def speaks_binary(host: str, port: int, timeout: float) -> bool:
    """Whether the server answers the binary protocol (`-B auto`, the default; not `-B ascii`): a NOOP
    and a line end, so that a text-only server answers the line (ERROR) at once instead of waiting
    for one. Raises DestinationUnavailable when it cannot be reached."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(_request(OP_NOOP) + b"\r\n")
            head = b""
            while len(head) < 1:
                chunk = s.recv(64)
                if not chunk:
                    break
                head += chunk
    except (OSError, UnicodeError) as e:
        raise DestinationUnavailable(f"{host}:{port}: cannot connect: {e}") from e
    return head[:1] == bytes([RESPONSE])


class BinaryProtocolRefused(RuntimeError):
    """The server does not speak the binary protocol (`-B ascii`): keys only it can carry cannot be
    written (or read) there. Not retried."""


def store_request(
    mode: str, key: bytes, value: bytes | memoryview, flags: int, expiry: int, opaque: int
) -> bytes:
    """The header, extras and key of an ADDQ/SETQ (the value follows as it is). `expiry`: 0 = never,
    else the absolute unix time (capped at the field's maximum: never later than the source)."""
    head = _speedups.core_bin_store_head(
        _STORE_OP[mode], len(key), len(value), flags, min(expiry, _MAX_EXPIRATION), opaque
    )
    return head + key


def _request(opcode: int, key: bytes = b"", opaque: int = 0, cas: int = 0) -> bytes:
    return _speedups.core_bin_key_request(opcode, len(key), opaque, cas) + key


@dataclass
class StoreCounts:
    sent: int = 0
    # Opaques of the stores memcached refused because the key exists (add mode: a value is there).
    not_stored: list[int] = field(default_factory=list)
    errors: int = 0
    first_error: str | None = None


@dataclass
class BinaryConnection:
    """One binary-protocol connection to one memcached."""

    host: str
    port: int
    timeout: float = 30.0
    sock: socket.socket | None = field(default=None, repr=False)
    _buf: bytearray = field(default_factory=bytearray, repr=False)

    def open(self) -> BinaryConnection:
        try:
            self.sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
        except (OSError, UnicodeError) as e:
            raise DestinationUnavailable(f"{self.host}:{self.port}: cannot connect: {e}") from e
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return self

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        self._buf.clear()

    def __enter__(self) -> BinaryConnection:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _send(self, pieces: list[bytes | memoryview]) -> None:
        assert self.sock is not None
        try:
            for p in pieces:
                self.sock.sendall(p)
        except OSError as e:
            raise DestinationUnavailable(f"{self.host}:{self.port}: send failed: {e}") from e

    def _read(self, n: int) -> bytes:
        assert self.sock is not None
        while len(self._buf) < n:
            try:
                chunk = self.sock.recv(1 << 16)
            except OSError as e:
                raise DestinationUnavailable(f"{self.host}:{self.port}: receive failed: {e}") from e
            if not chunk:
                raise DestinationUnavailable(f"{self.host}:{self.port}: connection closed by the server")
            self._buf += chunk
        out = bytes(self._buf[:n])
        del self._buf[:n]
        return out

    def _response(self) -> tuple[int, int, int, int, bytes, bytes, bytes]:
        """(opcode, status, opaque, flags, key, value, raw body) of the next response."""
        op, status, opaque, flags, key, value, body, _ = self._response_cas()
        return op, status, opaque, flags, key, value, body

    def _response_cas(self) -> tuple[int, int, int, int, bytes, bytes, bytes, int]:
        """_response and the response's CAS."""
        head = self._read(HEADER.size)
        magic, op, klen, elen, _, status, blen, opaque, cas = HEADER.unpack(head)
        if magic != RESPONSE:
            # A server started with `-B ascii` answers the text protocol's ERROR.
            raise BinaryProtocolRefused(
                f"{self.host}:{self.port} does not speak memcached's binary protocol (answered {head[:8]!r})"
            )
        body = self._read(blen)
        flags = STORE_EXTRAS.unpack_from(body)[0] if elen >= 4 else 0
        return op, status, opaque, flags, body[elen : elen + klen], body[elen + klen :], body, cas

    def store(self, requests: Iterable[tuple[bytes, bytes | memoryview]]) -> StoreCounts:
        """Send (request head, value) pairs from `store_request` and a NOOP; wait for the NOOP."""
        counts = StoreCounts()
        pieces: list[bytes | memoryview] = []
        for head, value in requests:
            pieces += [head, value]
            counts.sent += 1
        self._send([*pieces, _request(OP_NOOP)])
        while True:
            op, status, opaque, _, _, _, body = self._response()
            if op == OP_NOOP:
                return counts
            if status in (KEY_EXISTS, NOT_STORED):
                counts.not_stored.append(opaque)
            else:
                counts.errors += 1
                if counts.first_error is None:
                    text = body.decode("ascii", "replace")
                    counts.first_error = f"binary protocol status {status:#06x} {text!r}"

    def get_many(self, keys: list[bytes], batch: int = 500) -> dict[bytes, tuple[bytes, int]]:
        """(value, flags) of the keys that exist (GETKQ: misses are silent)."""
        return {k: (v, f) for k, (v, f, _) in self.get_many_cas(keys, batch).items()}

    def get_many_cas(self, keys: list[bytes], batch: int = 500) -> dict[bytes, tuple[bytes, int, int]]:
        """(value, flags, CAS) of the keys that exist (GETKQ: misses are silent; the CAS is in the
        answer's header)."""
        out: dict[bytes, tuple[bytes, int, int]] = {}
        for start in range(0, len(keys), batch):
            chunk = keys[start : start + batch]
            self._send([*(_request(OP_GETKQ, k, start + j) for j, k in enumerate(chunk)), _request(OP_NOOP)])
            while True:
                op, status, opaque, flags, _, value, body, cas = self._response_cas()
                if op == OP_NOOP:
                    break
                if status != STATUS_OK:
                    raise RuntimeError(
                        f"{self.host}:{self.port} answered status {status:#06x} {body!r} to GETKQ"
                    )
                out[keys[opaque]] = (value, flags, cas)
        return out

    def delete_cas(self, items: list[tuple[bytes, int]]) -> list[int]:
        """DELETE each (key, cas): memcached deletes the item only if its CAS is still `cas` (0: any).
        Returns each one's status: STATUS_OK deleted, KEY_NOT_FOUND gone, KEY_EXISTS another CAS;
        any other raises RuntimeError naming it."""
        self._send([*(_request(OP_DELETE, k, j, c) for j, (k, c) in enumerate(items)), _request(OP_NOOP)])
        out = [STATUS_OK] * len(items)
        while True:
            op, status, opaque, _, _, _, body = self._response()
            if op == OP_NOOP:
                return out
            if status not in (STATUS_OK, KEY_NOT_FOUND, KEY_EXISTS) or opaque >= len(items):
                raise RuntimeError(
                    f"{self.host}:{self.port} answered status {status:#06x} {body!r} to DELETE"
                )
            out[opaque] = status
