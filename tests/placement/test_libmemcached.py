"""libmemcached's placements against libmemcached itself: Debian's python3-pylibmc (libmemcached
1.1.4), whose Client.hash(key) is the index of the server a key goes to. Every hash x modula,
consistent (ketama), consistent weighted and ketama spy, at N = 3 and 25."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from cachewarm.datapath.nodes import Node
from cachewarm.datapath.placement import PlacementSpec
from cachewarm.datapath.placement.spec import LIBMEMCACHED_HASHES

from tests.placement.conftest import DEBIAN_PYTHON
from tests.placement.keys import corpus

KEYS = corpus(600)


pytestmark = pytest.mark.usefixtures("pylibmc_installed")


def pylibmc_indices(
    servers: list[str], behaviors: dict[str, object], keys: list[bytes], then: dict[str, object] | None = None
) -> list[int]:
    out = subprocess.run(
        [
            DEBIAN_PYTHON,
            str(Path(__file__).with_name("pylibmc_hash.py")),
            json.dumps({"servers": servers, "behaviors": behaviors, "then": then or {}}),
        ],
        input="\n".join(k.hex() for k in keys),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [int(x) for x in out.split()]


def _nodes(n: int, port: int) -> list[Node]:
    return [Node(f"127.0.0.{2 + i}", port) for i in range(n)]


DISTRIBUTIONS = {
    "modula": {},
    "ketama": {"distribution": "consistent ketama"},
    "ketama-spy": {"distribution": "consistent ketama spy"},
}


@pytest.mark.parametrize("n", [3, 25])
@pytest.mark.parametrize("port", [11211, 22122])
@pytest.mark.parametrize("dist", sorted(DISTRIBUTIONS))
# Debian's libmemcached is built without hsieh (behavior 'hash' = hsieh fails): nutcracker checks it.
@pytest.mark.parametrize("hash_name", sorted(set(LIBMEMCACHED_HASHES) - {"one_at_a_time", "hsieh"}))
def test_every_hash_and_distribution(n: int, port: int, dist: str, hash_name: str) -> None:
    nodes = _nodes(n, port)
    behaviors = {**DISTRIBUTIONS[dist], "hash": hash_name}
    want = pylibmc_indices([f"{x.host}:{x.port}" for x in nodes], behaviors, KEYS)
    p = PlacementSpec.parse(f"libmemcached,distribution={dist},hash={hash_name}").placer(nodes)
    got = [p.index_for(k) for k in KEYS]
    assert sum(a != b for a, b in zip(got, want, strict=True)) == 0


@pytest.mark.parametrize("n", [3, 25, 47])
@pytest.mark.parametrize("port", [11211, 22122])
def test_weighted_ketama_156_points(n: int, port: int) -> None:
    nodes = _nodes(n, port)
    want = pylibmc_indices([f"{x.host}:{x.port}" for x in nodes], {"ketama_weighted": True}, KEYS)
    p = PlacementSpec.parse("libmemcached,distribution=ketama-weighted").placer(nodes)
    assert [p.index_for(k) for k in KEYS] == want


@pytest.mark.parametrize("n", [3, 25])
@pytest.mark.parametrize("hash_name", [None, "crc", "fnv1a_32"])
def test_weighted_ketama_with_server_weights_and_a_key_hash(n: int, hash_name: str | None) -> None:
    nodes = _nodes(n, 22122)
    weights = [1 + (i * 7) % 5 for i in range(n)]
    servers = [f"{x.host}:{x.port}:{w}" for x, w in zip(nodes, weights, strict=True)]
    want = pylibmc_indices(
        servers, {"ketama_weighted": True}, KEYS, {"hash": hash_name} if hash_name else None
    )
    spec = "libmemcached,distribution=ketama-weighted,weights=" + ":".join(map(str, weights))
    p = PlacementSpec.parse(spec + (f",hash={hash_name}" if hash_name else "")).placer(nodes)
    assert [p.index_for(k) for k in KEYS] == want
