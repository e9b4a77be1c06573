"""EVCache's ketama ring (spymemcached's KetamaNodeLocator) in plain Python with hashlib: an oracle the
tests hold the product's routing (hashkit, in C, for both data paths) against, and the writer of
tests/vectors/ketama.txt. Not product code: the populator and the dumper route with hashkit.

Ring: for each node (in the given order; a later node wins a point collision, like TreeMap.put)
and each i in 0 .. reps/4 - 1, d = md5(nodeKey + "-" + i); its four little-endian u32 words are
four ring points. A key's hash is the first little-endian u32 of md5(key) (of its part before the
first hash delimiter, when one is set); its node owns the first point >= the hash, wrapping.
"""

from __future__ import annotations

import bisect
import hashlib
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cachewarm.datapath.nodes import Node
from cachewarm.datapath.routing import EVCACHE_NODE_KEY, node_key

# spymemcached's default for a literal IP address (and its public test vectors).
SPY_NODE_KEY = "{host}:{port}"

_U32X4 = struct.Struct("<4I")
_U32 = struct.Struct("<I")


def key_hash(key: bytes) -> int:
    return int(_U32.unpack_from(hashlib.md5(key).digest())[0])


@dataclass
class KetamaRing:
    nodes: Sequence[Node]
    node_key_format: str = EVCACHE_NODE_KEY
    reps: int = 160
    hash_delimiter: bytes | None = None
    _points: list[int] = field(init=False, repr=False)
    _owners: list[int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        ring: dict[int, int] = {}
        for idx, nk in enumerate(self.node_key(n) for n in self.nodes):
            for i in range(self.reps // 4):
                for point in _U32X4.unpack(hashlib.md5(f"{nk}-{i}".encode()).digest()):
                    ring[point] = idx
        self._points = sorted(ring)
        self._owners = [ring[p] for p in self._points]

    def node_key(self, node: Node) -> str:
        return node_key(self.node_key_format, node)

    @property
    def points(self) -> list[int]:
        return self._points

    @property
    def owners(self) -> list[int]:
        return self._owners

    def index_for(self, key: bytes) -> int:
        if self.hash_delimiter is not None:
            cut = key.find(self.hash_delimiter)
            if cut >= 0:
                key = key[:cut]
        i = bisect.bisect_left(self._points, key_hash(key))
        return self._owners[i if i < len(self._points) else 0]

    def node_for(self, key: bytes) -> Node:
        return self.nodes[self.index_for(key)]


@dataclass(frozen=True)
class RingVectors:
    """One ring of a vector file (tests/vectors/ketama.txt, spymemcached_ketama.txt) and its keys."""

    reps: int
    delimiter: bytes | None
    node_keys: list[str]
    keys: list[tuple[bytes, int]]  # (key, its node's index)


def read_ring_vectors(path: Path) -> list[RingVectors]:
    """`ring <reps> <delimiter hex or -> <node key>...` then `<key hex> <node index>` lines, as
    dumper-cpp/tests/placement_test.cc reads them."""
    rings: list[RingVectors] = []
    for line in path.read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        first, *rest = line.split()
        if first == "ring":
            delim = None if rest[1] == "-" else bytes.fromhex(rest[1])
            rings.append(RingVectors(int(rest[0]), delim, rest[2:], []))
        else:
            rings[-1].keys.append((bytes.fromhex(first), int(rest[0])))
    return rings
