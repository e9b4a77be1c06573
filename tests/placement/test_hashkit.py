"""hashkit (the C placement core) against published vectors and independent implementations:
mcrouter's own test values (FACTS.md), zlib, hashlib, mmh3 and pymemcache's murmur3, pymemcache's
RendezvousHash, spymemcached's KetamaNodeLocatorTest vectors (EVCache's ring: test_evcache_ring.py).
The C clients themselves (pylibmc, nutcracker) are in test_libmemcached.py and test_twemproxy.py."""

from __future__ import annotations

import hashlib
import zlib

import mmh3
import pytest
from cachewarm.datapath import _speedups
from cachewarm.datapath.nodes import Node, parse_nodes
from cachewarm.datapath.placement import PlacementError, PlacementSpec
from pymemcache.client.murmur3 import murmur3_32
from pymemcache.client.rendezvous import RendezvousHash

from tests.conftest import VECTORS
from tests.ketama_oracle import read_ring_vectors
from tests.placement.keys import corpus

KEYS = corpus()
SIGNED = bytes(range(-128 + 256, 256)) + bytes(range(0, 128))  # -128 .. 127 as C chars
SIGNED_DOWN = bytes(reversed(SIGNED))  # 127 .. -128


def test_mcrouter_published_ch3_values() -> None:
    furc = _speedups.furc_hash
    assert furc(b"sample", 100) == 97 and furc(b"", 100) == 72
    assert furc(b"sample", 1) == 0
    assert furc(b"", 1 << 23) == 6173600 and furc(b"sample", 1 << 23) == 5167780
    assert furc(SIGNED, 99999) == 31015 and furc(SIGNED_DOWN, 99999) == 67101
    counts = [0] * 3
    for i in range(1000):
        counts[furc(str(i).encode(), 3)] += 1
    assert counts == [307, 342, 351]
    counts = [0] * 10
    for i in range(10000):
        counts[furc(str(i).encode(), 10)] += 1
    assert counts == [995, 955, 1046, 968, 1032, 972, 1016, 1038, 1010, 968]


def test_mcrouter_published_crc32_values() -> None:
    def crc(key: bytes, n: int) -> int:
        return _speedups.hash("crc32_mcrouter", key) % n

    assert crc(b"sample", 100) == 7 and crc(b"", 100) == 0
    assert crc(b"sample", 2**30 - 1) == 822834884
    assert crc(SIGNED, 99999) == 11697 and crc(SIGNED_DOWN, 99999) == 97630


def test_standard_hashes_equal_independent_implementations() -> None:
    for k in KEYS:
        assert _speedups.hash("crc32a", k) == zlib.crc32(k)
        assert _speedups.hash("crc32", k) == (zlib.crc32(k) >> 16) & 0x7FFF
        assert _speedups.hash("md5", k) == int.from_bytes(hashlib.md5(k).digest()[:4], "little")
        assert _speedups.hash("murmur3", k) == mmh3.hash(k, 0, signed=False)
    # pymemcache's own murmur3 hashes a str's characters, each & 0xff
    for k in KEYS[:300]:
        s = k.decode("latin-1")
        assert _speedups.hash("murmur3", k) == murmur3_32(s)


def test_signed_char_hashes_move_high_bytes() -> None:
    """The C clients' byte hashes read `char` as signed: a byte >= 0x80 is not its unsigned value."""

    def one_at_a_time_unsigned(k: bytes) -> int:
        h = 0
        for b in k:
            h = (h + b) & 0xFFFFFFFF
            h = (h + (h << 10)) & 0xFFFFFFFF
            h ^= h >> 6
        h = (h + (h << 3)) & 0xFFFFFFFF
        h ^= h >> 11
        return (h + (h << 15)) & 0xFFFFFFFF

    def one_at_a_time_signed(k: bytes) -> int:
        h = 0
        for b in k:
            h = (h + (b - 256 if b >= 0x80 else b)) & 0xFFFFFFFF
            h = (h + (h << 10)) & 0xFFFFFFFF
            h ^= h >> 6
        h = (h + (h << 3)) & 0xFFFFFFFF
        h ^= h >> 11
        return (h + (h << 15)) & 0xFFFFFFFF

    def fnv1a_32_signed(k: bytes) -> int:
        h = 2166136261
        for b in k:
            h = ((h ^ ((b - 256) & 0xFFFFFFFF if b >= 0x80 else b)) * 16777619) & 0xFFFFFFFF
        return h

    assert _speedups.hash("one_at_a_time", b"abc") == one_at_a_time_unsigned(b"abc")
    high = [k for k in KEYS if max(k) >= 0x80]
    assert len(high) > 400
    for k in high:
        assert _speedups.hash("one_at_a_time", k) == one_at_a_time_signed(k)
        assert _speedups.hash("fnv1a_32", k) == fnv1a_32_signed(k)
    assert sum(_speedups.hash("one_at_a_time", k) != one_at_a_time_unsigned(k) for k in high) == len(high)


def test_weighted_ketama_gives_156_points_for_some_pool_sizes() -> None:
    pts = {n: _speedups.ketama_weighted_points(1, n, n, 160) for n in range(1, 101)}
    assert [n for n, p in pts.items() if p == 156] == [25, 47, 50, 55, 61, 71, 94, 100]
    assert {p for p in pts.values()} == {156, 160}


@pytest.mark.parametrize("n", [3, 25])
@pytest.mark.parametrize("keys", ["str", "bytes"])
def test_pymemcache_rendezvous(n: int, keys: str) -> None:
    nodes = [Node(f"127.0.0.{2 + i}", 11211) for i in range(n)]
    names = [f"{x.host}:{x.port}" for x in nodes]
    hasher = RendezvousHash(list(names))
    p = PlacementSpec.parse(f"pymemcache,keys={keys}").placer(nodes)
    utf8 = [k for k in KEYS if _is_utf8(k)]
    for k in utf8 if keys == "str" else KEYS:
        want = hasher.get_node(k.decode() if keys == "str" else k)
        assert names[p.index_for(k)] == want, k
    if keys == "bytes":  # the same key as str lands elsewhere for most keys
        assert sum(names[p.index_for(k)] != hasher.get_node(k.decode()) for k in utf8) > len(utf8) // 2


def test_pymemcache_prefix_is_stored_not_hashed() -> None:
    nodes = parse_nodes("127.0.0.2:11211,127.0.0.3:11211,127.0.0.4:11211")
    plain = PlacementSpec.parse("pymemcache").placer(nodes)
    prefixed = PlacementSpec.parse("pymemcache,prefix=app1:").placer(nodes)
    for k in KEYS[:200]:
        if _is_utf8(k):
            assert prefixed.index_for(b"app1:" + k) == plain.index_for(k)


def test_pymemcache_str_keys_place_a_key_that_is_not_utf8_as_bytes() -> None:
    """Such a key cannot have come from a str: the application passed bytes."""
    nodes = [Node(f"127.0.0.{2 + i}", 11211) for i in range(25)]
    names = [f"{x.host}:{x.port}" for x in nodes]
    hasher = RendezvousHash(list(names))
    p = PlacementSpec.parse("pymemcache").placer(nodes)
    raw = [k for k in KEYS if not _is_utf8(k)]
    assert len(raw) > 100
    assert all(names[p.index_for(k)] == hasher.get_node(k) for k in raw)


def test_gomemcache_is_crc32_mod_n() -> None:
    nodes = [Node(f"127.0.0.{2 + i}", 11211) for i in range(25)]
    p = PlacementSpec.parse("gomemcache").placer(nodes)
    assert [p.index_for(k) for k in KEYS] == [zlib.crc32(k) % 25 for k in KEYS]


def test_bad_specs_are_refused_with_their_usage() -> None:
    with pytest.raises(PlacementError, match="unknown placement scheme 'nutcrackr'"):
        PlacementSpec.parse("nutcrackr")
    with pytest.raises(
        PlacementError, match=r"twemproxy needs config= \(usage: twemproxy,config=NUTCRACKER.yml"
    ):
        PlacementSpec.parse("twemproxy,pool=alpha")
    with pytest.raises(PlacementError, match="libmemcached takes no option 'pool'"):
        PlacementSpec.parse("libmemcached,pool=x")
    with pytest.raises(PlacementError, match="libmemcached distribution 'ring'"):
        PlacementSpec.parse("libmemcached,distribution=ring")
    with pytest.raises(PlacementError, match="'keys' given twice"):
        PlacementSpec.parse("pymemcache,keys=str,keys=bytes")


def test_bad_descriptions_name_their_line() -> None:
    with pytest.raises(ValueError, match=r"unknown hash nope"):
        _speedups.Placement(b"dist ketama\nhash nope\n")
    with pytest.raises(ValueError, match="no node"):
        _speedups.Placement(b"dist modula\nhash md5\n")
    with pytest.raises(ValueError, match="not a multiple of 4"):
        _speedups.Placement(b"dist ketama\nhash md5\npoints md5x4\nnode 61 6\n")


def _is_utf8(k: bytes) -> bool:
    try:
        k.decode()
        return True
    except UnicodeDecodeError:
        return False


def test_spymemcached_scheme_reproduces_the_published_vectors() -> None:
    """The scheme's node keys for IP literals are `ip:port`, as in spymemcached's own test."""
    for r in read_ring_vectors(VECTORS / "spymemcached_ketama.txt"):
        nodes = [Node(k.rpartition(":")[0], int(k.rpartition(":")[2])) for k in r.node_keys]
        p = PlacementSpec.parse("spymemcached").placer(nodes)
        assert [e.name for e in p.description.nodes] == r.node_keys
        assert [p.index_for(k) for k, _ in r.keys] == [want for _, want in r.keys]


def test_spymemcached_node_key_formats_and_weights() -> None:
    named = [Node("cache-1.internal", 11211, "10.0.0.1"), Node("cache-2.internal", 22122, "10.0.0.2")]
    spy = PlacementSpec.parse("spymemcached").placer(named).description
    assert [e.name for e in spy.nodes] == [
        "cache-1.internal/10.0.0.1:11211",
        "cache-2.internal/10.0.0.2:22122",
    ]
    lib = PlacementSpec.parse("spymemcached,format=libmemcached").placer(named).description
    assert [e.name for e in lib.nodes] == ["cache-1.internal", "cache-2.internal:22122"]
    nodes = [Node(f"127.0.0.{2 + i}", 11211) for i in range(25)]
    weighted = PlacementSpec.parse("spymemcached,weighted=true").placer(nodes).description
    assert {e.count for e in weighted.nodes} == {156}  # Java's float arithmetic, as twemproxy's
    assert {e.count for e in PlacementSpec.parse("spymemcached").placer(nodes).description.nodes} == {160}
    three = nodes[:3]
    heavy = PlacementSpec.parse("spymemcached,weighted=true,weights=2:1:1").placer(three).description
    assert [e.count for e in heavy.nodes] == [240, 120, 120]
    with pytest.raises(PlacementError, match="weights count only with weighted=true"):
        PlacementSpec.parse("spymemcached,weights=2:1:1").placer(three)
    with pytest.raises(PlacementError, match="give 3 positive integers"):
        PlacementSpec.parse("libmemcached,distribution=ketama-weighted,weights=2:1").placer(three)


# folly's SpookyHashV2Test: Hash32(buf, n, 0) over buf[i] = i + 128, at lengths through both paths
# (short < 192 bytes, long >= 192).
SPOOKY32 = {
    0: 0x6BF50919,
    1: 0x70DE1D26,
    15: 0x83EC01F9,
    16: 0xF274736C,
    31: 0x027BCA7C,
    32: 0xE5CFC8B6,
    191: 0xE13D9E19,
    192: 0x77E012BD,
    193: 0x2D05114C,
    300: 0x37E2B1DA,
    511: 0xCC1C8250,
}


def test_spooky32_published_values() -> None:
    buf = bytes((i + 128) & 0xFF for i in range(512))
    assert {n: _speedups.spooky32(buf[:n], 0) for n in SPOOKY32} == SPOOKY32


def test_mcrouter_published_weighted_ch3_values() -> None:
    wch3 = _speedups.wch3_hash
    assert wch3(b"sample", [1.0] * 100) == 97 and wch3(b"", [1.0] * 100) == 72  # all 1.0 = Ch3
    assert wch3(b"sample", [0.0]) == 0 and wch3(b"sample", [0.0] * 100) == 59 and wch3(b"", [0.0] * 100) == 45
    counts = [0] * 3
    for i in range(1000):
        counts[wch3(str(i).encode(), [1.0, 1.0, 0.7])] += 1
    assert counts == [341, 371, 288]
    w10 = [0.429, 0.541, 0.117, 0.998, 0.283, 0.065, 0.109, 0.042, 0.676, 0.943]
    counts = [0] * 10
    for i in range(10000):
        counts[wch3(str(i).encode(), w10)] += 1
    assert counts == [1016, 1252, 288, 2354, 661, 195, 247, 122, 1668, 2197]

    def checksum(n: int, w: float) -> int:
        acc = 0
        for i in range(10000):
            acc = (acc * 31 + wch3(b"k%d" % i, [w] * n)) & 0xFFFFFFFF
        return acc

    assert checksum(2, 0.5) == 2395690262 and checksum(10, 0.5) == 547444706
    assert checksum(2, 0.0) == 3431444300 and checksum(10, 0.0) == 1290067504


def test_mcrouter_weighted_ch3_from_the_config(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json

    nodes = [Node(f"127.0.0.{2 + i}", 5000) for i in range(3)]
    conf = tmp_path / "mcrouter.json"
    route = {"type": "PoolRoute", "pool": "A", "hash": {"hash_func": "WeightedCh3", "weights": [1.0, 1.0]}}
    conf.write_text(json.dumps({"pools": {"A": {"servers": [n.address for n in nodes]}}, "route": route}))
    p = PlacementSpec.parse(f"mcrouter,config={conf},pool=A").placer(nodes)
    assert p.description.weights == (1.0, 1.0, 0.5)  # a missing weight is 0.5, as mcrouter reads it
    keys = [b"%d" % i for i in range(1000)] + [k + b"|#|x" for k in KEYS[:200]]
    want = [_speedups.wch3_hash(k.split(b"|#|")[0], [1.0, 1.0, 0.5]) for k in keys]
    assert [p.index_for(k) for k in keys] == want


def test_mcrouter_config_with_comments_and_misconfigurations(tmp_path) -> None:  # type: ignore[no-untyped-def]
    nodes = [Node(f"127.0.0.{2 + i}", 5000) for i in range(2)]
    conf = tmp_path / "mcrouter.json"
    conf.write_text(
        "// a pool of two\n{\n"
        '  "pools": {"A": {"servers": ["127.0.0.2:5000", "127.0.0.3:5000"]}}, /* the route: */\n'
        '  "route": {"type": "PoolRoute", "pool": "A", "hash": {"hash_func": "Crc32", "salt": "//x/*"}}\n}\n'
    )
    p = PlacementSpec.parse(f"mcrouter,config={conf},pool=A").placer(nodes)
    assert p.description.salt == b"//x/*" and p.description.hash == "crc32_mcrouter"
    with pytest.raises(PlacementError, match=r"has no pool 'B' \(its pools: A\)"):
        PlacementSpec.parse(f"mcrouter,config={conf},pool=B").placer(nodes)
    with pytest.raises(PlacementError, match=r"does not list the destination\(s\) 127.0.0.9:5000"):
        PlacementSpec.parse(f"mcrouter,config={conf},pool=A").placer([*nodes, Node("127.0.0.9", 5000)])
    conf.write_text('{"pools": {"A": {"servers": ["127.0.0.2:5000"]}}, "route": "PoolRoute|A", "macros": {}}')
    with pytest.raises(PlacementError, match="macros or named handles"):
        PlacementSpec.parse(f"mcrouter,config={conf},pool=A").placer(nodes[:1])
    conf.write_text(
        '{"pools": {"A": {"servers": ["127.0.0.2:5000"]}}, "route": {"type": "PoolRoute", '
        '"pool": "A", "hash": "WeightedCh3Rv"}}'
    )
    with pytest.raises(PlacementError, match="hashed with 'WeightedCh3Rv'"):
        PlacementSpec.parse(f"mcrouter,config={conf},pool=A").placer(nodes[:1])
