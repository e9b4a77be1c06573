"""Listing a memcached's keys with `lru_crawler metadump` (`cachewarm verify`, the tests): every key
and its absolute expiry, without its value."""

from __future__ import annotations

import re
import socket
import urllib.parse
from collections.abc import Iterator, Sequence

import tenacity

from cachewarm.datapath.meta import MetaConnection
from cachewarm.datapath.wire import ERROR_REPLIES, DestinationUnavailable

_METADUMP = re.compile(rb"key=(\S+) exp=(-?\d+)")


def list_keys(
    host: str, port: int, timeout: float = 60.0, modes: Sequence[str] = ("hash", "all")
) -> Iterator[tuple[bytes, int]]:
    """(key, absolute exptime or -1) of every item, from `lru_crawler metadump hash`.

    `hash` walks the hash table waiting on each bucket's lock, so it lists every item that exists
    throughout the crawl; `all` walks the LRUs and skips items whose lock is busy (1.6.18), so a
    verify of a server under load could miss keys. A server without `hash` (a memcached older than
    it answers `BADCLASS invalid class id`, as 1.6.18 does to an unknown mode) or one answering any
    other error before listing a key is asked again with the next of `modes`: `metadump all`, with
    its skips. While another crawl runs (`stats`), the same mode is asked again for up to `timeout`
    seconds, then `BUSY` is raised; never another mode.
    """
    for i, mode in enumerate(modes):
        try:
            for attempt in tenacity.Retrying(
                retry=tenacity.retry_if_exception_type(_CrawlerBusy),
                wait=tenacity.wait_exponential(multiplier=0.1, max=5),
                stop=tenacity.stop_after_delay(timeout),
                reraise=True,
            ):
                with attempt:
                    yield from _metadump(host, port, mode, timeout)
            return
        except _ModeRefused:
            if i == len(modes) - 1:
                raise


class _CrawlerBusy(RuntimeError):
    """Another crawl holds memcached's crawler (raised before any key is listed)."""


def _crawler_running(host: str, port: int) -> bool:
    """Whether `stats` says a crawl (a client's or memcached's own) holds the crawler now."""
    c = MetaConnection(host, port)
    c.connect()
    try:
        return c.stats().get("lru_crawler_running") == "1"
    finally:
        c.close()


class _ModeRefused(RuntimeError):
    """The server answered an error to `lru_crawler metadump <mode>` before listing any key."""


def _metadump(host: str, port: int, mode: str, timeout: float) -> Iterator[tuple[bytes, int]]:
    if _crawler_running(host, port):
        # Never queue a crawl behind a running one: the request's worker thread would wait on the
        # crawler's lock, and a hash table expansion starting then deadlocks memcached.
        raise _CrawlerBusy(f"{host}:{port}: metadump {mode} not sent: another crawl is running (BUSY)")
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
                    if ln.startswith((*ERROR_REPLIES, b"BADCLASS")):
                        err = _ModeRefused if listed == 0 else RuntimeError
                        raise err(f"{host}:{port}: metadump {mode} failed: {ln!r}")
                    if ln.startswith(b"BUSY"):  # another crawl (memcached's own) took the crawler first
                        err = _CrawlerBusy if listed == 0 else RuntimeError
                        raise err(f"{host}:{port}: metadump {mode} failed: {ln!r}")
                    continue
                listed += 1
                raw = m[1]
                key = urllib.parse.unquote_to_bytes(raw) if b"%" in raw else raw
                yield key, int(m[2])
