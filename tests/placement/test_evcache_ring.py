"""EVCache's ketama ring (the default routing, hashkit in C for both data paths) against the vector
files the C++ suite reads too (dumper-cpp/tests/placement_test.cc): spymemcached's public
KetamaNodeLocatorTest vectors, and rings with EVCache's node keys, other reps and a hash delimiter
that the Python oracle (tests/ketama_oracle.py) wrote. The oracle and hashkit also build the same
ring, point for point."""

from __future__ import annotations

import struct

import pytest
from cachewarm.datapath.nodes import Node
from cachewarm.datapath.routing import EVCACHE_NODE_KEY, evcache_ring

from tests.conftest import VECTORS
from tests.ketama_oracle import KetamaRing, read_ring_vectors
from tests.placement.keys import corpus

VECTOR_FILES = {"spymemcached_ketama.txt": (2, 10), "ketama.txt": (3, 300)}


@pytest.mark.parametrize("name", sorted(VECTOR_FILES))
def test_vector_files(name: str) -> None:
    rings = read_ring_vectors(VECTORS / name)
    min_rings, min_keys = VECTOR_FILES[name]
    assert len(rings) >= min_rings and sum(len(r.keys) for r in rings) >= min_keys
    for r in rings:
        nodes = [Node(k, 0) for k in r.node_keys]  # the node keys as given
        ring = evcache_ring(nodes, "{host}", r.reps, r.delimiter)
        oracle = KetamaRing(nodes, "{host}", r.reps, r.delimiter)
        for key, want in r.keys:
            assert ring.index_for(key) == want == oracle.index_for(key), key


@pytest.mark.parametrize("n", [2, 3, 25])
def test_hashkit_builds_the_oracles_ring(n: int) -> None:
    nodes = [Node(f"127.0.0.{2 + i}", 11211, f"127.0.0.{2 + i}") for i in range(n)]
    oracle = KetamaRing(nodes)
    points, owners = evcache_ring(nodes).c_placement.ring()  # type: ignore[attr-defined]
    assert list(struct.unpack(f"<{len(points) // 4}I", points)) == oracle.points
    assert list(struct.unpack(f"<{len(owners) // 4}I", owners)) == oracle.owners
    keys = corpus()
    ring = evcache_ring(nodes)
    assert [ring.index_for(k) for k in keys] == [oracle.index_for(k) for k in keys]


def test_evcache_node_key_and_partial_key() -> None:
    nodes = [Node("10.1.2.3", 11211), Node("10.1.2.4", 6379)]
    ring = evcache_ring(nodes)
    assert ring.description.nodes[1].name == "10.1.2.4/10.1.2.4:11211"
    part = evcache_ring(nodes, EVCACHE_NODE_KEY, hash_delimiter=b":")
    for k in [b"user", b"abc", b"x"]:
        assert part.index_for(k + b":1") == part.index_for(k + b":2") == ring.index_for(k)


def test_bad_rings_are_refused() -> None:
    with pytest.raises(ValueError, match="collide"):
        evcache_ring([Node("h", 1), Node("h", 2)], EVCACHE_NODE_KEY)
    with pytest.raises(ValueError, match="multiple of 4"):
        evcache_ring([Node("h", 1)], reps=10)
    with pytest.raises(ValueError, match="bad node-key format"):
        evcache_ring([Node("h", 1)], "{name}")
