"""`verify` compares a source and its targets key by key (real memcached servers)."""

from __future__ import annotations

from cachewarm.datapath.meta import MetaConnection
from cachewarm.datapath.nodes import Node
from cachewarm.datapath.verify import verify
from cachewarm.datapath.wire import wire_key
from cachewarm.testing.memcached import MemcachedServer


def put(srv: MemcachedServer, items: list[tuple[bytes, int, int, bytes]]) -> None:
    c = MetaConnection(srv.host, srv.port)
    c.connect()
    buf = bytearray()
    for key, flags, ttl, value in items:
        tok, b = wire_key(key)
        buf += b"ms %b %d%b T%d F%d q\r\n" % (tok, len(value), b, ttl, flags) + value + b"\r\n"
    c.send_batch(buf, len(items))
    assert c.flush().errors == 0
    c.close()


def node(s: MemcachedServer) -> Node:
    return Node(s.host, s.port)


def test_every_kind_of_difference_is_counted_and_named(memcached) -> None:
    src, dst = memcached(memory_mb=16), memcached(memory_mb=16)
    same = [(b"k%d" % i, i, 0, b"v%d" % i) for i in range(50_000)]
    put(
        src,
        [*same, (b"gone", 0, 0, b"x"), (b"flags", 1, 0, b"x"), (b"ttl", 0, 0, b"x"), (b"val", 0, 0, b"a")],
    )
    put(dst, [*same, (b"flags", 2, 0, b"x"), (b"ttl", 0, 3600, b"x"), (b"val", 0, 0, b"b")])
    rep = verify(node(src), [node(dst)], shard=7000)
    assert (rep.source_keys, rep.checked) == (50_004, 50_004)
    assert (rep.missing, rep.flags_mismatch, rep.ttl_mismatch, rep.value_mismatch) == (1, 1, 1, 1)
    assert not rep.ok and rep.differences == 4
    # A TTL ticks down while the test runs: compare the kind of each example, not the exact TTL.
    kinds = sorted(e.split(": ", 1)[1] for e in rep.examples)
    assert kinds[:2] == ["flags (1 vs 2) differs", "missing"] and kinds[3] == "value (1 bytes vs 1) differs"
    assert kinds[2].startswith("ttl (-1 vs 3")
    assert sorted(e.split(": ", 1)[0] for e in rep.examples) == ["flags", "gone", "ttl", "val"]
    put(dst, [(b"gone", 0, 0, b"x"), (b"flags", 1, 0, b"x"), (b"ttl", 0, 0, b"x"), (b"val", 0, 0, b"a")])
    assert verify(node(src), [node(dst)]).ok


def test_sample_and_binary_keys(memcached) -> None:
    src, dst = memcached(memory_mb=16), memcached(memory_mb=16)
    items = [(b"bin\x00\xff %d" % i, 0, 0, b"v") for i in range(100)] + [
        (b"p%d" % i, 0, 0, b"v") for i in range(900)
    ]
    put(src, items)
    put(dst, items)
    rep = verify(node(src), [node(dst)], sample=100, seed=3)
    assert rep.ok and rep.checked == 100 and rep.source_keys == 1000
    assert verify(node(src), [node(dst)]).checked == 1000


def test_a_key_differing_in_value_and_flags_counts_in_both_once(memcached) -> None:
    src, dst = memcached(memory_mb=16), memcached(memory_mb=16)
    put(src, [(b"both", 1, 0, b"aa"), (b"same", 0, 0, b"x")])
    put(dst, [(b"both", 2, 0, b"b"), (b"same", 0, 0, b"x")])
    rep = verify(node(src), [node(dst)])
    assert (rep.value_mismatch, rep.flags_mismatch, rep.keys_different, rep.differences) == (1, 1, 1, 1)
    assert rep.examples == ["both: value (2 bytes vs 1) and flags (1 vs 2) differ"]
