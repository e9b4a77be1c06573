"""`list_keys` lists every key of a real memcached, by `metadump hash` or, refused, by `metadump all`."""

from __future__ import annotations

import time

import pytest
from cachewarm.datapath.meta import MetaConnection
from cachewarm.datapath.metadump import list_keys
from cachewarm.datapath.wire import wire_key
from cachewarm.testing.memcached import MemcachedServer

from tests.dumper.dumputil import another_clients_crawl


def load(srv: MemcachedServer, items: dict[bytes, int]) -> None:
    """Set each key with the given exptime (0 = never) and a 100-byte value."""
    c = MetaConnection(srv.host, srv.port)
    c.connect()
    pairs = list(items.items())
    for start in range(0, len(pairs), 1000):
        batch = pairs[start : start + 1000]
        buf = bytearray()
        for key, ttl in batch:
            tok, b = wire_key(key)
            buf += b"ms %b 100%b T%d q\r\n" % (tok, b, ttl) + b"v" * 100 + b"\r\n"
        c.send_batch(buf, len(batch))
    assert c.flush().errors == 0
    c.close()


def keyset(n: int, now: int) -> dict[bytes, int]:
    """Plain keys, keys metadump URL-encodes (`%`, binary bytes) and three kinds of exptime."""
    items: dict[bytes, int] = {}
    for i in range(n):
        key = b"k:%d" % i if i % 10 else b"bin\x00\xff%%20 %d" % i
        items[key] = [0, 3600, now + 40 * 86400][i % 3]
    return items


@pytest.mark.parametrize("modes", [("hash", "all"), ("hash",)])
def test_list_keys_returns_every_key_and_exptime(memcached, modes: tuple[str, ...]) -> None:
    srv = memcached(memory_mb=64)
    now = int(time.time())
    items = keyset(30_000, now)
    load(srv, items)
    listed = list(list_keys(srv.host, srv.port, modes=modes))
    assert len(listed) == len(items)  # no key twice
    got = dict(listed)
    assert got.keys() == items.keys()
    for key, ttl in items.items():
        exp = got[key]
        if ttl == 0:
            assert exp == -1, key
        else:
            # metadump shows the absolute time; a relative TTL is counted from the server's clock.
            want = ttl if ttl > 30 * 86400 else now + ttl
            assert abs(exp - want) <= 5, (key, exp, want)


def test_list_keys_of_an_empty_server(memcached) -> None:
    srv = memcached(memory_mb=16)
    assert list(list_keys(srv.host, srv.port)) == []


def test_a_refused_mode_falls_back_to_the_next(memcached) -> None:
    # A memcached without `metadump hash` answers `BADCLASS invalid class id` to it, as 1.6.18 does
    # to any unknown mode: an unknown mode stands in for `hash` on an older server. `metadump all`
    # skips an item whose lock it cannot take, and the LRU maintainer moving items just loaded takes
    # them (1 run in 6 missed keys on 1.6.38): without it, the listing here is exact.
    srv = memcached(memory_mb=16, extra_args=["-o", "no_lru_maintainer"])
    items = keyset(2000, int(time.time()))
    load(srv, items)
    assert dict(list_keys(srv.host, srv.port, modes=("nosuchmode", "all"))).keys() == items.keys()
    with pytest.raises(RuntimeError, match="BADCLASS"):
        list(list_keys(srv.host, srv.port, modes=("nosuchmode",)))


def test_list_keys_waits_for_another_clients_crawl(memcached) -> None:
    """Another client's metadump, read slowly, holds the crawler while 100,000 items start a hash table
    expansion. A crawl request queued behind it would deadlock memcached (docs/data-format.md, "A busy
    crawler"): list_keys sends none while `stats` says a crawl runs, then lists every key."""
    srv = memcached(memory_mb=64)
    load(srv, {b"k:%d" % i: 0 for i in range(100_000)})
    with another_clients_crawl(srv) as got:
        keys = {k for k, _ in list_keys(srv.host, srv.port, timeout=60)}
    assert got.endswith(b"END\r\n") and len(keys) == 100_000
