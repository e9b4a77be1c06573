"""The stream mode's C++ decisions against the Python populator's, which they must reproduce exactly:

- EVCache's ring as the dumper builds it (placement.cc: node keys into a hashkit description) vs the
  populator's (datapath/routing.py) and the oracle (tests/ketama_oracle.py) on generated key sets —
  printable and binary keys, EVCache's and spymemcached's node keys, other reps, a hash delimiter —
  through the `ketama_route` tool;
- the shared vector tables both suites read (tests/vectors/ketama.txt, written by the oracle;
  item_size.txt): each must be what the Python side says today.
  `python3 -m tests.datapath.test_stream_routing` rewrites them.
"""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest
from cachewarm.datapath.encode import ItemLimit
from cachewarm.datapath.nodes import Node, resolve_nodes
from cachewarm.datapath.routing import EVCACHE_NODE_KEY, evcache_ring

from tests.conftest import VECTORS
from tests.ketama_oracle import SPY_NODE_KEY, KetamaRing

KETAMA_VECTORS = VECTORS / "ketama.txt"
ITEM_SIZE_VECTORS = VECTORS / "item_size.txt"

# (node-key format, nodes, reps, hash delimiter)
RINGS = [
    (EVCACHE_NODE_KEY, [Node("10.1.2.3", 11211), Node("10.1.2.4", 11211), Node("10.1.2.5", 6379)], 160, None),
    (SPY_NODE_KEY, [Node("127.0.0.1", 10000 + i) for i in range(5)], 160, None),
    ("{ip}:{port}", [Node("127.0.0.1", 20000 + i) for i in range(4)], 100, b":"),
    (EVCACHE_NODE_KEY, [Node("localhost", 11211), Node("127.0.0.2", 11211)], 4, b"-"),
]


def generated_keys(n: int, seed: int) -> list[bytes]:
    """Printable keys like an application's, partial keys around the delimiters, and binary keys of
    1..250 bytes (every byte value)."""
    rng = random.Random(seed)
    keys: list[bytes] = []
    for i in range(n):
        kind = i % 4
        if kind == 0:
            keys.append(b"user:%d:profile" % rng.randrange(10**9))
        elif kind == 1:
            keys.append(b"%x-%d" % (rng.getrandbits(64), i))
        else:
            keys.append(rng.randbytes(rng.randint(1, 250)))
    return keys


def ring_of(fmt: str, nodes: list[Node], reps: int, delim: bytes | None) -> KetamaRing:
    return KetamaRing(resolve_nodes(nodes), fmt, reps, delim)


def route_cpp(tool: Path, ring: KetamaRing, keys: list[bytes]) -> list[int]:
    args = [str(tool), "--reps", str(ring.reps)]
    if ring.hash_delimiter is not None:
        args += ["--delimiter", ring.hash_delimiter.hex()]
    args += [ring.node_key(n) for n in ring.nodes]
    out = subprocess.run(
        args, input="".join(k.hex() + "\n" for k in keys), capture_output=True, text=True, check=True
    )
    return [int(x) for x in out.stdout.split()]


@pytest.fixture(scope="module")
def ketama_tool(dumper_bin: Path) -> Path:
    tool = dumper_bin.parent / "ketama_route"
    if not tool.exists():
        pytest.fail(f"{tool} is not built (cmake --build builds it with the dumper)")
    return tool


@pytest.mark.parametrize("ring_no", range(len(RINGS)))
def test_cpp_routes_every_key_like_python(ketama_tool: Path, ring_no: int) -> None:
    ring = ring_of(*RINGS[ring_no])
    fmt, nodes, reps, delim = RINGS[ring_no]
    populator = evcache_ring(resolve_nodes(nodes), fmt, reps, delim)
    keys = generated_keys(20_000, seed=ring_no)
    want = [ring.index_for(k) for k in keys]
    assert route_cpp(ketama_tool, ring, keys) == want
    assert [populator.index_for(k) for k in keys] == want


# ---- the vector tables the C++ unit tests read ---------------------------------------------------


def ketama_vectors() -> str:
    lines = [
        "# EVCache ring vectors: tests/datapath/test_stream_routing.py writes them (tests/ketama_oracle.py);",
        "# dumper-cpp/tests/placement_test.cc and tests/placement/test_evcache_ring.py read them.",
        "# ring <reps> <delimiter hex, or -> <node key>... ; then <key hex> <node index> lines.",
    ]
    for i, (fmt, nodes, reps, delim) in enumerate(RINGS):
        if any(not n.host[0].isdigit() for n in nodes):
            continue  # a host name resolves differently elsewhere: routing tests cover it
        ring = ring_of(fmt, nodes, reps, delim)
        lines.append(
            f"ring {reps} {delim.hex() if delim else '-'} {' '.join(ring.node_key(n) for n in ring.nodes)}"
        )
        lines += [f"{k.hex()} {ring.index_for(k)}" for k in generated_keys(120, seed=100 + i)]
    return "\n".join(lines) + "\n"


def item_size_vectors() -> str:
    """Boundary cases of memcached's item size rule (encode.ItemLimit)."""
    lines = [
        "# memcached's item size rule (datapath/encode.py and dumper-cpp/src/destination.h ItemLimit).",
        "# <item_size_max> <cas 0|1> <key_len> <value_len> <flags> <fits 0|1>",
    ]
    for isz in (1024 * 1024, 2 * 1024 * 1024, 4096):
        for cas in (True, False):
            limit = ItemLimit(isz, cas)
            for klen in (1, 100, 250):
                for flags in (0, 1, 0xFFFFFFFF):
                    edge = limit.budget - klen - (4 if flags else 0)
                    for vlen in (0, edge - 1, edge, edge + 1, isz):
                        if vlen >= 0:
                            fits = limit.fits(klen, vlen, flags)
                            lines.append(f"{isz} {int(cas)} {klen} {vlen} {flags} {int(fits)}")
    return "\n".join(lines) + "\n"


def test_vector_tables_are_current() -> None:
    assert KETAMA_VECTORS.read_text() == ketama_vectors(), "run python3 -m tests.datapath.test_stream_routing"
    assert ITEM_SIZE_VECTORS.read_text() == item_size_vectors(), (
        "run python3 -m tests.datapath.test_stream_routing"
    )


if __name__ == "__main__":
    KETAMA_VECTORS.write_text(ketama_vectors())
    ITEM_SIZE_VECTORS.write_text(item_size_vectors())
    print(f"wrote {KETAMA_VECTORS} and {ITEM_SIZE_VECTORS}", file=sys.stderr)
