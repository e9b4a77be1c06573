"""The one meta-protocol client: a raw socket to one memcached, for pipelined quiet writes (the
populator, the demo's load) and pipelined reads (`cachewarm verify`, the warm's final check, tests).
How keys are named on the wire is `wire.py`'s, how items and TTLs are `encode.py`'s.

Writes: quiet mode suppresses `HD` (stored), so on the wire come back only `NS` (add mode: the key is
already there, which counts as present; with an `O<tag>` on the set, the NS carries the tag), errors,
and the `MN` we send at the end of each batch. A batch of text `add`s (the populator's add mode: a
failed `ms` unlinks the key's live value, a failed `add` does not) is answered item by item, in order:
`STORED`, `NOT_STORED` (present; its tag is the batch's `order` entry) or an error. At
most two batches are in flight: the replies to a batch are read while the next batch is on its way,
so the server never stalls writing replies we do not read and we never wait a full round trip per
batch. Every `SERVER_ERROR`/`CLIENT_ERROR`/`ERROR` is counted and reported: the caller fails.

Reads: `mg <key> b v f t k q O<index>` in batches ended by `mn`; replies are parsed by declared
lengths. A key no meta command can name (`wire.meta_expressible`) is read with the binary protocol
(`binproto.py`), which does not tell its TTL. Listing keys (`lru_crawler metadump`) is `metadump.py`'s.
"""

from __future__ import annotations

import math
import socket
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from cachewarm.datapath import _speedups
from cachewarm.datapath.binproto import BinaryConnection
from cachewarm.datapath.wire import ERROR_REPLIES, DestinationUnavailable, meta_expressible

# Pieces per sendmsg call (Linux IOV_MAX is 1024).
_IOV_MAX = 1000


@dataclass(frozen=True)
class ServerIdentity:
    """Tells a restarted memcached (which came back empty) from the one we wrote to."""

    pid: int
    started: int  # unix seconds, from `time - uptime`

    def same_as(self, other: ServerIdentity) -> bool:
        return self.pid == other.pid and abs(self.started - other.started) <= 2


@dataclass(frozen=True)
class ServerClock:
    """A memcached's clock against this host's wall clock, bounded: its `stats time` at this host's
    wall time w is floor(w + beta), lo <= beta <= hi (seconds; beta < 0: it lags). An absolute T there
    ends at the wall moment T - beta. The dumper's twin is dumper-cpp/src/server_clock.h."""

    lo: float
    hi: float

    def shift(self, fraction: float) -> int:
        """Whole seconds to add to an exptime on this host's clock that was rounded down by
        `fraction` (the data file header's expiry_fraction) for the latest T this server expires no
        later than the item: floor(exptime + fraction + beta) - exptime, with beta's lower bound."""
        return math.floor(fraction + self.lo)


# How long measure_clock watches for a tick (memcached's clock advances once a second).
CLOCK_WATCH_S = 1.2
# A tick bounded more loosely than this (the host descheduled us between the two readings around
# it: 2-3 ms apart on a quiet host, tens of ms or more on a loaded one) is watched again at the next
# tick, for up to CLOCK_PATIENCE_S in all; the tightest bound seen is kept. A wide bound is never
# wrong, but its lower end goes into every T sent (copies that much shorter). A clock that does not
# tick within CLOCK_WATCH_S (its main thread held up: a loaded host, a stall) is watched on, up to
# CLOCK_PATIENCE_S: a stalled server's one reading says little about where its clock goes next.
CLOCK_TIGHT_S = 0.02
CLOCK_PATIENCE_S = 3.6


def watch_clock(
    read: Callable[[], int],
    wall: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
) -> ServerClock:
    """A server's clock against this host's, from `read()` (its `stats time`): read until it ticks
    and bound beta by the readings around the tick. A tick bounded wider than CLOCK_TIGHT_S is
    watched again at the next ticks (up to CLOCK_PATIENCE_S); the tightest bound is kept. A clock that
    does not tick within CLOCK_PATIENCE_S keeps the one-reading bound (a second wide).
    The dumper's twin: WatchClock in dumper-cpp/src/server_clock.cc (both read the shared vectors in
    tests/vectors/clock_watch.txt)."""
    a0 = wall()
    first = last = read()
    b0 = wall()
    best = ServerClock(first - b0, first + 1 - a0)
    ticked = False
    deadline, limit = b0 + CLOCK_WATCH_S, b0 + CLOCK_PATIENCE_S
    while wall() < deadline:
        sleep(0.002)
        a = wall()
        now = read()
        b = wall()
        if now != last:  # it ticked after the reading that began at a0, by the one that ended at b
            tick = ServerClock(now - b, now - a0)
            if not ticked or tick.hi - tick.lo < best.hi - best.lo:
                best = tick
            ticked = True
            if best.hi - best.lo <= CLOCK_TIGHT_S:
                return best
            deadline = min(b + CLOCK_WATCH_S, limit)
        elif not ticked:
            deadline = limit  # no tick yet: a held-up main thread; watch on
        a0, last = a, now
    return best


@dataclass
class BatchCounts:
    sent: int = 0
    not_stored: int = 0
    errors: int = 0
    first_error: str | None = None
    # The O<tag> of each NS that carried one (sets sent with tags), or the order entry of each
    # NOT_STORED (text adds).
    not_stored_tags: list[int] = field(default_factory=list)
    # Text adds: the order entry (record offset) of the item first_error answered; -1 = not known.
    first_error_at: int = -1
    # Text adds: each item's tag in send order (None: a batch of quiet meta sets).
    order: list[int] | None = None
    # Binary ADDs: per item in send order, the CAS of the item our ADD stored (packed u64; 0: not
    # stored), for the re-check.
    cas: bytes | None = None


@dataclass(frozen=True)
class Item:
    value: bytes
    flags: int
    ttl: int | None  # remaining seconds, -1 = never expires, None = not known (binary protocol read)
    cas: int = 0  # the item's CAS when asked for (get_many(with_cas=True)), else 0


@dataclass
class MetaConnection:
    """`connect()` (returns the server's identity) then write; or `with MetaConnection(...) as c:`
    (no identity round trip) then read."""

    host: str
    port: int
    timeout: float = 30.0
    sock: socket.socket | None = field(default=None, repr=False)
    _rbuf: bytearray = field(default_factory=bytearray, repr=False)
    _rx: memoryview | None = field(default=None, repr=False)
    _inflight: deque[BatchCounts] = field(default_factory=deque, repr=False)
    totals: BatchCounts = field(default_factory=BatchCounts)
    # The server's clock against this host's, in whole seconds rounded down (its `stats time` minus
    # ours when its answer arrived), measured by identity(): memcached reads an absolute expiry with
    # its own idea of the time (it never re-reads the wall clock), so an absolute T must be moved
    # onto that clock. Rounded down because `stats time` lags the server's real time (whole seconds):
    # an expiry moved by it is never later, at most ~1 s earlier.
    clock_offset: int = 0
    # The same reading's lower bound, unrounded: `stats time` minus this host's clock after it arrived
    # (ServerClock.lo of a one-reading measurement).
    clock_low: float = 0.0

    # ---- connection ------------------------------------------------------------------------------

    def open(self) -> None:
        try:
            self.sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
        except (OSError, UnicodeError) as e:
            raise DestinationUnavailable(f"{self.host}:{self.port}: cannot connect: {e}") from e
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connect(self) -> ServerIdentity:
        self.open()
        return self.identity()

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        self._rbuf.clear()
        self._inflight.clear()

    def __enter__(self) -> MetaConnection:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _send(self, data: bytes | bytearray | memoryview) -> None:
        assert self.sock is not None
        try:
            self.sock.sendall(data)
        except OSError as e:
            raise DestinationUnavailable(f"{self.host}:{self.port}: send failed: {e}") from e

    def _fill(self) -> None:
        assert self.sock is not None
        if self._rx is None:
            self._rx = memoryview(bytearray(1 << 18))
        # recv_into a reused buffer: sock.recv(large) allocates (and page-faults) a new buffer per call.
        try:
            n = self.sock.recv_into(self._rx)
        except OSError as e:
            raise DestinationUnavailable(f"{self.host}:{self.port}: receive failed: {e}") from e
        if not n:
            raise DestinationUnavailable(f"{self.host}:{self.port}: connection closed by the server")
        self._rbuf += self._rx[:n]

    def _readline(self) -> bytes:
        while True:
            i = self._rbuf.find(b"\r\n")
            if i >= 0:
                line = bytes(self._rbuf[:i])
                del self._rbuf[: i + 2]
                return line
            self._fill()

    def _value(self, n: int) -> bytes:
        """n bytes of value and the `\r\n` after them."""
        while len(self._rbuf) < n + 2:
            self._fill()
        out = bytes(self._rbuf[:n])
        del self._rbuf[: n + 2]
        return out

    def identity(self) -> ServerIdentity:
        stats = self.stats()
        here = time.time()
        try:
            ident = ServerIdentity(int(stats["pid"]), int(stats["time"]) - int(stats["uptime"]))
            self.clock_offset = math.floor(int(stats["time"]) - here)
            self.clock_low = int(stats["time"]) - here
        except (KeyError, ValueError) as e:
            raise DestinationUnavailable(f"{self.host}:{self.port}: stats lacks pid/time/uptime") from e
        return ident

    def measure_clock(self) -> ServerClock:
        """The server's clock against this host's to a few ms (watch_clock over `stats time`)."""

        def read() -> int:
            try:
                return int(self.stats()["time"])
            except (KeyError, ValueError) as e:
                raise DestinationUnavailable(f"{self.host}:{self.port}: stats lacks time") from e

        return watch_clock(read)

    def version(self) -> str:
        self._send(b"version\r\n")
        line = self._readline()
        if not line.startswith(b"VERSION "):
            raise DestinationUnavailable(f"{self.host}:{self.port}: version answered {line!r}")
        return line[8:].decode("ascii", "replace")

    def stats(self, group: bytes = b"") -> dict[str, str]:
        """`stats` (or `stats <group>`, e.g. b"settings") as a dict."""
        self._send(b"stats %b\r\n" % group if group else b"stats\r\n")
        stats: dict[str, str] = {}
        while True:
            line = self._readline()
            if line == b"END":
                break
            parts = line.decode("ascii", "replace").split(" ", 2)
            if len(parts) == 3 and parts[0] == "STAT":
                stats[parts[1]] = parts[2]
            elif line.startswith(ERROR_REPLIES):
                raise DestinationUnavailable(f"{self.host}:{self.port}: stats failed: {line!r}")
        return stats

    # ---- writes ----------------------------------------------------------------------------------

    def send_batch(
        self,
        payload: bytes | bytearray | list[bytes | memoryview],
        count: int,
        order: list[int] | None = None,
    ) -> None:
        """Send one batch of `ms ... q` commands (already encoded: one buffer, or a list of pieces
        sent with scatter-gather I/O so values go from the file's buffer to the socket uncopied)
        followed by `mn`; keeps at most two batches in flight, reading the older one's replies first.
        A batch of text `add`s passes `order`: one tag per item (the replies come one per item)."""
        if len(self._inflight) >= 2:
            self._drain_one()
        if isinstance(payload, list):
            self._send_pieces([*payload, b"mn\r\n"])
        else:
            self._send(payload)
            self._send(b"mn\r\n")
        self._inflight.append(BatchCounts(sent=count, order=order))

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
        k = 0
        while True:
            line = self._readline()
            if line == b"MN":
                break
            if b.order is not None:  # text adds: one reply per item, in order
                at = b.order[k] if k < len(b.order) else -1
                k += 1
                if line == b"STORED":
                    continue
                if line == b"NOT_STORED":
                    b.not_stored += 1
                    if at >= 0:
                        b.not_stored_tags.append(at)
                    continue
                if b.first_error is None:
                    b.first_error_at = at
            if line == b"NS":
                b.not_stored += 1
            elif line.startswith(b"NS "):
                b.not_stored += 1
                b.not_stored_tags += [int(t[1:]) for t in line.split()[1:] if t[:1] == b"O"]
            else:
                b.errors += 1
                if b.first_error is None:
                    b.first_error = line.decode("ascii", "replace")
        t = self.totals
        t.sent += b.sent
        t.not_stored += b.not_stored
        t.errors += b.errors
        t.not_stored_tags += b.not_stored_tags
        if t.first_error is None:
            t.first_error = b.first_error
            t.first_error_at = b.first_error_at

    def flush(self) -> BatchCounts:
        """Wait for every batch in flight; returns the running totals."""
        while self._inflight:
            self._drain_one()
        return self.totals

    # ---- reads -----------------------------------------------------------------------------------

    def _pipelined(self, keys: list[bytes], batch: int, flags: bytes) -> Iterator[bytes]:
        """Send `mg <key> <flags>q O<index>` in batches ended by `mn`; yield every reply line but MN.

        O<index> ties each reply to its key without trusting the echoed key's encoding. The caller
        reads a `VA` line's value before asking for the next line.
        """
        for start in range(0, len(keys), batch):
            req = bytearray()
            for j, k in enumerate(keys[start : start + batch], start):
                req += _speedups.core_mg_line(k, flags + b"q", j)
            req += b"mn\r\n"
            self._send(req)
            while (line := self._readline()) != b"MN":
                if line.startswith(ERROR_REPLIES):
                    raise RuntimeError(f"{self.host}:{self.port} answered {line!r} to mg")
                yield line

    def _long_keys(self, keys: Iterable[bytes]) -> tuple[list[bytes], dict[bytes, Item]]:
        """(the keys a meta command can name, the items of those it cannot, read by binary protocol)."""
        meta, long = [], []
        for k in keys:
            (meta if meta_expressible(k) else long).append(k)
        if not long:
            return meta, {}
        with BinaryConnection(self.host, self.port, self.timeout) as bc:
            got = bc.get_many_cas(long)
        return meta, {k: Item(v, f, None, c) for k, (v, f, c) in got.items()}

    def get_many(self, keys: Iterable[bytes], batch: int = 500, with_cas: bool = False) -> dict[bytes, Item]:
        """Items of the keys that exist; a missing key is absent from the result. `with_cas`: each
        item's CAS too."""
        keys, out = self._long_keys(keys)
        for line in self._pipelined(keys, batch, b"v f t c " if with_cas else b"v f t "):
            if not line.startswith(b"VA "):
                continue
            parts = line.split(b" ")
            size = int(parts[1])
            flags, ttl, idx, cas = 0, -1, -1, 0
            for p in parts[2:]:
                if p[:1] == b"f":
                    flags = int(p[1:])
                elif p[:1] == b"t":
                    ttl = int(p[1:])
                elif p[:1] == b"O":
                    idx = int(p[1:])
                elif p[:1] == b"c":
                    cas = int(p[1:])
            out[keys[idx]] = Item(self._value(size), flags, ttl, cas)
        return out

    def missing(self, keys: Iterable[bytes], batch: int = 1000) -> list[bytes]:
        """The keys the server does not hold (`mg` without a value: cheap)."""
        keys = list(keys)
        long = [k for k in keys if not meta_expressible(k)]
        keys, long_found = self._long_keys(keys)
        found = {
            int(line.rsplit(b"O", 1)[1])
            for line in self._pipelined(keys, batch, b"")
            if line.startswith(b"HD")
        }
        return [k for j, k in enumerate(keys) if j not in found] + [k for k in long if k not in long_found]
