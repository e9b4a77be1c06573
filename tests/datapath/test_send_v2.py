"""Sending data format v2/v3 files (populate/send_v2.py): the C sender (_v2send.c) and its Python
oracle (send_oracle.py) against real memcacheds — the same answers counted, `NS` named by their
records, `ME` sent as `MS` in set mode, errors loud and no batch started after one, a broken
connection reported; add mode's binary-protocol ADDs (C only) the same way, with the CAS of every item
stored; and the whole populator on v1, v2 and v3 dumps of the same items, leaving the same
destinations."""

from __future__ import annotations

import random
import socket
import struct
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from cachewarm.datapath import format as df
from cachewarm.datapath.encode import UNLIMITED
from cachewarm.datapath.meta import MetaConnection
from cachewarm.datapath.nodes import Node
from cachewarm.datapath.populate import PopulateIncomplete, populate
from cachewarm.datapath.populate.plan import PLAN_ADD_BINARY, plan
from cachewarm.datapath.populate.send_v2 import send_planned
from cachewarm.datapath.routing import evcache_ring
from cachewarm.datapath.wire import DestinationUnavailable
from cachewarm.datapath.writer import DirWriter, encode_file
from cachewarm.testing.memcached import MemcachedServer
from cachewarm.testing.populating import config, fetch

from tests.datapath.send_oracle import send_py
from tests.ketama_oracle import KetamaRing

PATHS = pytest.mark.parametrize("use_c", [True, False], ids=["c-sender", "python-sender"])
# Add mode: text adds (C and Python senders) and binary ADDs (the C sender only).
ADD_PATHS = pytest.mark.parametrize(
    "use_c", [True, False, "binary"], ids=["c-sender", "python-sender", "binary-add"]
)


def _recs(n: int, size: int = 100, prefix: bytes = b"k") -> list[df.Record]:
    now = int(time.time())
    return [
        df.Record(b"%s%d" % (prefix, i), i, -1 if i % 3 else now + 3600, b"%d-" % i + b"x" * size)
        for i in range(n)
    ]


def _send(
    servers: list[MemcachedServer],
    recs: list[df.Record],
    use_c: bool | str,
    *,
    set_mode: bool = False,
    tagged: bool = False,
    batch_items: int = 50,
    rate: float | None = None,
    byte_rate: float | None = None,
) -> tuple[bytes, dict]:
    """Plan and send a file of `recs`: version 2 with text adds or sets, or (use_c == "binary") version
    3 with binary ADDs, each destination's on a socket of its own."""
    binary = use_c == "binary"
    data = encode_file("n1", 0, 0, recs, version=df.VERSION_3 if binary else df.VERSION_2)
    v = df.check_bytes(df.name_for("n1", 0, 0, data), data)
    assert v.header is not None and v.trailer is not None
    nodes = [Node(s.host, s.port) for s in servers]
    ring = evcache_ring(nodes, "{host}:{port}") if len(nodes) > 1 else None
    mode = PLAN_ADD_BINARY if binary else set_mode
    p = plan(data, *df.records_bounds(v.header, v.trailer), int(time.time()), (UNLIMITED,) * len(nodes),
             mode, batch_items, 1 << 20, ring, stamped=binary)  # fmt: skip
    conns = {i: MetaConnection(n.host, n.port) for i, n in enumerate(nodes)}
    socks = {i: socket.create_connection((n.host, n.port)) for i, n in enumerate(nodes)} if binary else None
    for c in conns.values():
        c.connect()
    try:
        if not use_c:
            return data, send_py(conns, data, p, rate, byte_rate)
        return data, send_planned(conns, data, p, tagged, rate, byte_rate, 10.0, socks)
    finally:
        for c in conns.values():
            c.close()
        for sk in (socks or {}).values():
            sk.close()


@ADD_PATHS
def test_add_mode_counts_and_names_what_was_there(
    memcached: Callable[..., MemcachedServer], use_c: bool | str
) -> None:
    dst = memcached(memory_mb=64)
    recs = _recs(500)
    with MetaConnection(dst.host, dst.port) as c:  # live values under every 7th key
        c.send_batch(b"".join(b"ms %b 4 T0 F0 q\r\nlive\r\n" % r.key for r in recs[::7]), len(recs[::7]))
        c.flush()
    data, res = _send([dst], recs, use_c, tagged=True)
    t = res[0]
    assert (t.sent, t.not_stored, t.errors) == (500, len(recs[::7]), 0)
    version = df.VERSION_3 if use_c == "binary" else df.VERSION_2
    named = sorted(df.record_at(data, at, version).key for at in t.not_stored_tags)
    assert named == sorted(r.key for r in recs[::7])
    got = fetch(dst, [r.key for r in recs])
    for i, r in enumerate(recs):
        assert got[r.key].value == (b"live" if i % 7 == 0 else r.value) and (
            i % 7 == 0 or got[r.key].flags == r.flags
        )
    if use_c == "binary":  # each ADD's answer carried the CAS of the item it stored (0: EXISTS)
        with MetaConnection(dst.host, dst.port) as c:
            now = c.get_many([r.key for r in recs], with_cas=True)
        cas = [c for (c,) in struct.iter_unpack("<Q", t.cas)]
        assert cas == [0 if i % 7 == 0 else now[r.key].cas for i, r in enumerate(recs)]


@PATHS
def test_set_mode_overwrites(memcached: Callable[..., MemcachedServer], use_c: bool) -> None:
    dst = memcached(memory_mb=64)
    recs = _recs(120)
    with MetaConnection(dst.host, dst.port) as c:
        c.send_batch(b"".join(b"ms %b 4 T0 F0 q\r\nlive\r\n" % r.key for r in recs), len(recs))
        c.flush()
    _, res = _send([dst], recs, use_c, set_mode=True, batch_items=7)
    assert (res[0].sent, res[0].not_stored, res[0].errors) == (120, 0, 0)
    got = fetch(dst, [r.key for r in recs])
    assert all(got[r.key].value == r.value for r in recs)


@ADD_PATHS
def test_each_destination_gets_its_share(memcached: Callable[..., MemcachedServer], use_c: bool) -> None:
    servers = [memcached(memory_mb=64) for _ in range(3)]
    recs = _recs(900)
    _, res = _send(servers, recs, use_c)
    ring = KetamaRing([Node(s.host, s.port) for s in servers], "{host}:{port}")
    for i, s in enumerate(servers):
        mine = [r.key for r in recs if ring.index_for(r.key) == i]
        assert res[i].sent == len(mine) and int(s.stats()["curr_items"]) == len(mine)
        assert set(fetch(s, mine)) == set(mine)


@ADD_PATHS
def test_an_error_fails_loudly_and_no_batch_starts_after_it(
    memcached: Callable[..., MemcachedServer], use_c: bool
) -> None:
    """A full destination with evictions off answers SERVER_ERROR out of memory: counted, the first
    one kept, and the sender stops starting batches."""
    dst = memcached(memory_mb=2, extra_args=["-M"])
    recs = _recs(6000, size=2000)
    _, res = _send([dst], recs, use_c, batch_items=100)
    t = res[0]
    assert t.errors > 0 and t.first_error is not None
    # memcached's SERVER_ERROR out of memory (to an ADD: binary status 0x82, said the same way)
    assert t.first_error.startswith("SERVER_ERROR"), t.first_error
    # At most the batches in flight when the first error was read were sent after it.
    stored = int(dst.stats()["curr_items"])
    assert t.sent < len(recs) and t.sent <= stored + t.errors + 2 * 100


@PATHS
def test_a_broken_connection_is_reported(memcached: Callable[..., MemcachedServer], use_c: bool) -> None:
    dst = memcached(memory_mb=64)
    data = encode_file("n1", 0, 0, _recs(2000, size=1000), version=df.VERSION_2)
    v = df.check_bytes(df.name_for("n1", 0, 0, data), data)
    assert v.header is not None and v.trailer is not None
    p = plan(
        data, *df.records_bounds(v.header, v.trailer), int(time.time()), (UNLIMITED,), False, 100, 1 << 20
    )
    c = MetaConnection(dst.host, dst.port)
    c.connect()
    dst.kill()
    with pytest.raises(DestinationUnavailable):
        if use_c:
            send_planned({0: c}, data, p, False, None, None, 5.0)
        else:
            send_py({0: c}, data, p, None, None)
    c.close()


@ADD_PATHS
def test_the_rate_limit_paces_batches(memcached: Callable[..., MemcachedServer], use_c: bool) -> None:
    """400 items at 1,000/s in batches of 100: the last batch may not start before 0.3 s."""
    dst = memcached(memory_mb=64)
    t0 = time.monotonic()
    _, res = _send([dst], _recs(400), use_c, batch_items=100, rate=1000.0)
    assert res[0].sent == 400 and time.monotonic() - t0 >= 0.3


@ADD_PATHS
def test_the_byte_rate_paces_batches(memcached: Callable[..., MemcachedServer], use_c: bool) -> None:
    """400 items in batches of 100 at the file's size per second: the last batch starts after about
    3/4 of a second (its three batches before it are ~3/4 of the file), not at once."""
    dst = memcached(memory_mb=64)
    recs = _recs(400)
    size = len(encode_file("n1", 0, 0, recs))
    t0 = time.monotonic()
    _, res = _send([dst], recs, use_c, batch_items=100, byte_rate=float(size))
    assert res[0].sent == 400 and time.monotonic() - t0 >= 0.6


def _dump(out: Path, version: int, seed: int) -> list[df.Record]:
    rng = random.Random(seed)
    now = int(time.time())
    recs = []
    for i in range(3000):
        if i % 97 == 0:
            key = bytes(rng.randrange(256) for _ in range(rng.choice([5, 186, 187, 250])))
        else:
            key = b"key:%d" % i
        exptime = rng.choice([-1, -1, now + 3600, now - 10])
        size = 1 << 20 if i % 300 == 5 else rng.choice([0, 10, 3000])  # 1 MiB: too large for -I 1m
        recs.append(df.Record(key, rng.choice([0, 7, 2**32 - 1]), exptime, rng.randbytes(size)))
    w = DirWriter(out, node="src", version=version)
    for c in range(3):
        w.write(c, 0, recs[c * 1000 : (c + 1) * 1000])
    w.done()
    return recs


@pytest.mark.parametrize("version", [1, 2, 3])
def test_the_populator_on_either_version(
    memcached: Callable[..., MemcachedServer], tmp_path: Path, version: int
) -> None:
    """The same items as a version 1, 2 or 3 dump, with an item size limit that makes some oversize:
    the same summary and the same destination."""
    dst = memcached(memory_mb=64, max_item_size="1m")
    with MetaConnection(dst.host, dst.port) as c:
        c.send_batch(b"ms key:1 4 T0 F0 q\r\nlive\r\n", 1)
        c.flush()
    recs = _dump(tmp_path / "dump", version, seed=5)
    with pytest.raises(PopulateIncomplete) as e:  # the oversize items make it incomplete
        populate(config(tmp_path / "dump", tmp_path, [dst]))
    s = e.value.summary
    live = [r for r in recs if r.exptime == -1 or r.exptime - 1 > time.time()]
    small = [
        r for r in live if len(r.key) + len(r.value) + (4 if r.flags else 0) <= (1 << 20) - 48 - 1 - 2 - 8
    ]
    assert (s.records, s.expired, s.already_present) == (3000, 3000 - len(live), 1)  # type: ignore[attr-defined]
    assert s.oversize == len(live) - len(small) > 0  # type: ignore[attr-defined]
    assert s.stored == len(small) - 1 and s.binary_protocol > 0  # type: ignore[attr-defined]
    got = fetch(dst, [r.key for r in recs])
    assert set(got) == {r.key for r in small}
    assert all(got[r.key].value == r.value for r in small if r.key != b"key:1")
    assert got[b"key:1"].value == b"live"
