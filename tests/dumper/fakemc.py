"""A scripted stand-in for memcached, for the dumper's cases a real server will not produce on demand:
a crawler that stays busy, a server without `metadump hash`, an LRU crawl that lists keys twice, a
server that does not speak the binary protocol, keys that keep appearing while reconciliation runs.

It speaks just what the dumper sends: `stats`, `lru_crawler metadump hash|all`, `mg` (b v f t k q u
O flags), `mn`, and — unless `binary=False` — the binary protocol's NOOP and GETKQ.
"""

from __future__ import annotations

import base64
import contextlib
import os
import socket
import struct
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field

_BIN_HEADER = struct.Struct(">BBHBBHIIQ")


@dataclass
class FakeItem:
    value: bytes
    flags: int = 0
    exptime: int = -1  # absolute unix time, -1 = never
    la: int = 1795436829  # last access, unix time (`la=` in the listing: the dumper's recency order)
    fetched: bool = False  # `fetch=yes|no`


@dataclass
class FakeMemcached:
    items: dict[bytes, FakeItem] = field(default_factory=dict)
    # Answers to successive `lru_crawler metadump` requests: a literal line (e.g. "BUSY currently
    # processing crawler request") or "DUMP" (list the items). When the script runs out: "DUMP".
    crawl_script: list[str] = field(default_factory=list)
    ok_line: bool = False  # memcached >= 1.6.43: "OK" before the listing
    hash_supported: bool = True  # else `metadump hash` answers BADCLASS, as before hash crawls existed
    binary: bool = True  # answers the binary protocol
    # `metadump all` lists these keys a second time (an item that moved to another LRU mid-crawl).
    listed_twice: set[bytes] = field(default_factory=set)
    # Called before each listing (e.g. to add keys, like live writes).
    before_listing: Callable[[FakeMemcached], None] | None = None
    curr_items: int | None = None  # `stats` curr_items (default: the number of items)
    host: str = "127.0.0.1"
    port: int = 0
    crawl_requests: list[str] = field(default_factory=list)
    _sock: socket.socket | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _started: float = field(default_factory=time.time)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def __enter__(self) -> FakeMemcached:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((self.host, 0))
        s.listen(64)
        s.settimeout(0.2)
        self._sock = s
        self.port = s.getsockname()[1]
        t = threading.Thread(target=self._accept, daemon=True)
        t.start()
        self._threads.append(t)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._sock is not None:
            self._sock.close()
        for t in self._threads:
            t.join(timeout=5)

    def _accept(self) -> None:
        assert self._sock is not None
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except (TimeoutError, OSError):
                continue
            t = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            t.start()
            self._threads.append(t)

    # ---- one connection ------------------------------------------------------------------------
    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(0.2)
        buf = b""
        with contextlib.suppress(OSError), conn:
            while not self._stop.is_set():
                try:
                    chunk = conn.recv(65536)
                except TimeoutError:
                    continue
                if not chunk:
                    return
                buf += chunk
                if buf[:1] == b"\x80":
                    if not self.binary:
                        continue  # like `-B ascii`: the bytes wait for a newline that never comes
                    buf = self._binary(conn, buf)
                    continue
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    self._text(conn, line.rstrip(b"\r"))

    def _text(self, conn: socket.socket, line: bytes) -> None:
        words = line.split(b" ")
        if words[0] == b"stats":
            with self._lock:
                n = self.curr_items if self.curr_items is not None else len(self.items)
            now = int(time.time())
            up = int(now - self._started)
            conn.sendall(
                b"STAT pid %d\r\nSTAT uptime %d\r\nSTAT time %d\r\nSTAT version fake\r\n"
                b"STAT curr_items %d\r\nEND\r\n" % (os.getpid(), up, now, n)
            )
        elif words[:2] == [b"lru_crawler", b"metadump"]:
            conn.sendall(self._crawl(words[2].decode()))
        elif words[0] == b"mg":
            conn.sendall(self._mg(words[1], words[2:]))
        elif words[0] == b"mn":
            conn.sendall(b"MN\r\n")
        else:
            conn.sendall(b"ERROR\r\n")

    def _crawl(self, mode: str) -> bytes:
        with self._lock:
            self.crawl_requests.append(mode)
            answer = self.crawl_script.pop(0) if self.crawl_script else "DUMP"
        if answer != "DUMP":
            return (b"OK\r\n" if self.ok_line else b"") + answer.encode() + b"\r\n"
        if mode == "hash" and not self.hash_supported:
            return b"BADCLASS invalid class id\r\n"
        if self.before_listing is not None:
            self.before_listing(self)
        out = [b"OK\r\n"] if self.ok_line else []
        with self._lock:
            listing = list(self.items.items())
        twice = [(k, it) for k, it in listing if k in self.listed_twice] if mode == "all" else []
        for k, it in listing + twice:
            url = urllib.parse.quote(k, safe="-._~").encode()
            out.append(
                b"key=%s exp=%d la=%d cas=1 fetch=%s cls=1 size=%d flags=%d \n"
                % (url, it.exptime, it.la, b"yes" if it.fetched else b"no", len(it.value) + 60, it.flags)
            )
        out.append(b"END\r\n")
        return b"".join(out)

    def _mg(self, key_tok: bytes, flags: list[bytes]) -> bytes:
        key = base64.b64decode(key_tok) if b"b" in flags else key_tok
        with self._lock:
            it = self.items.get(key)
        if it is None or (it.exptime != -1 and it.exptime <= time.time()):
            return b"" if b"q" in flags else b"EN\r\n"
        ttl = -1 if it.exptime == -1 else max(0, int(it.exptime - time.time()))
        ret = [b"VA %d" % len(it.value), b"f%d" % it.flags, b"t%d" % ttl]
        if b"k" in flags:
            ret.append(b"k" + key_tok + (b" b" if b"b" in flags else b""))
        ret += [f for f in flags if f.startswith(b"O")]
        return b" ".join(ret) + b"\r\n" + it.value + b"\r\n"

    def _binary(self, conn: socket.socket, buf: bytes) -> bytes:
        while len(buf) >= 24:
            _, op, keylen, extlen, _, _, body, opaque, _ = _BIN_HEADER.unpack(buf[:24])
            if len(buf) < 24 + body:
                break
            key = buf[24 + extlen : 24 + extlen + keylen]
            buf = buf[24 + body :]
            if op == 0x0A:  # NOOP
                conn.sendall(_BIN_HEADER.pack(0x81, 0x0A, 0, 0, 0, 0, 0, opaque, 0))
            elif op == 0x0D:  # GETKQ
                with self._lock:
                    it = self.items.get(key)
                if it is None:
                    continue
                b = struct.pack(">I", it.flags) + key + it.value
                conn.sendall(_BIN_HEADER.pack(0x81, 0x0D, len(key), 4, 0, 0, len(b), opaque, 0) + b)
        return buf
