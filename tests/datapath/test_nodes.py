"""Ketama routing against spymemcached's public KetamaNodeLocatorTest vectors (FACTS.md)."""

from __future__ import annotations

import pytest
from cachewarm.datapath.ketama import EVCACHE_NODE_KEY, SPY_NODE_KEY, KetamaRing, Node, parse_nodes


def spy_ring(n: int) -> KetamaRing:
    return KetamaRing([Node("127.0.0.1", 10000 + i) for i in range(n)], SPY_NODE_KEY, reps=160)


@pytest.mark.parametrize(
    ("n", "key", "want"),
    [
        (4, "dustin", 0),
        (4, "noelani", 2),
        (4, "some other key", 0),
        (4, "7QHNPFVC", 1),
        (4, "N6H4245M", 1),  # hashes past the ring's last point: wraps to the first
        (5, "36", 2),
        (5, "10037", 3),
        (5, "22051", 1),
        (5, "49044", 4),
        (5, "some other key", 4),
    ],
)
def test_spymemcached_vectors(n: int, key: str, want: int) -> None:
    assert spy_ring(n).index_for(key.encode()) == want


def test_evcache_node_key_and_partial_key() -> None:
    ring = KetamaRing([Node("10.1.2.3", 11211), Node("10.1.2.4", 6379)], EVCACHE_NODE_KEY)
    assert ring.node_key(Node("10.1.2.4", 6379)) == "10.1.2.4/10.1.2.4:11211"
    part = KetamaRing(ring.nodes, EVCACHE_NODE_KEY, hash_delimiter=b":")
    for k in [b"user", b"abc", b"x"]:
        assert part.index_for(k + b":1") == part.index_for(k + b":2") == ring.index_for(k)


def test_bad_inputs() -> None:
    with pytest.raises(ValueError, match="collide"):
        KetamaRing([Node("h", 1), Node("h", 2)], EVCACHE_NODE_KEY)
    with pytest.raises(ValueError, match="multiple of 4"):
        KetamaRing([Node("h", 1)], reps=10)
    with pytest.raises(ValueError, match="bad destination"):
        parse_nodes("host")
    with pytest.raises(ValueError, match="twice"):
        parse_nodes("h:1,h:1")
    assert parse_nodes("a:1, b:2") == [Node("a", 1), Node("b", 2)]


@pytest.mark.parametrize("host", ["$(touch x)", "`id`", "x;y", "x|y", "a b", "x\ny", "-x", "a..b"])
def test_hosts_that_are_not_hostnames_are_refused(host: str) -> None:
    with pytest.raises(ValueError, match="not a host name"):
        parse_nodes(f"{host}:11211")


def test_ipv6_and_names_are_accepted() -> None:
    assert parse_nodes("[::1]:11211,cache-1.example.com:11212,10.0.0.1:1") == [
        Node("::1", 11211),
        Node("cache-1.example.com", 11212),
        Node("10.0.0.1", 1),
    ]
