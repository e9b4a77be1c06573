"""twemproxy placements against nutcracker itself (Debian's nutcracker 0.5.0): each key is written
straight to the node cachewarm places it on, then read back through nutcracker, which must find
every one — for every hash nutcracker ships x ketama and modula, hash_tag, server names and weights,
N = 3 and 25. A misconfigured pool is refused before anything is sent."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from cachewarm.datapath.nodes import Node
from cachewarm.datapath.placement import PlacementError, PlacementSpec
from cachewarm.datapath.placement.spec import Placer
from cachewarm.datapath.placement.twemproxy import HASHES
from cachewarm.testing.memcached import MemcachedServer, free_port

from tests.conftest import DEFAULT_VERSION
from tests.placement.keys import corpus
from tests.placement.proxies import get_many, nutcracker, set_many

pytestmark = [
    pytest.mark.usefixtures("nutcracker_installed"),
    pytest.mark.memcached_versions(DEFAULT_VERSION),  # placement is decided on our side
]


def servers(memcached, n: int) -> list[MemcachedServer]:  # type: ignore[no-untyped-def]
    port = free_port()
    return [memcached(host=f"127.0.0.{2 + i}", port=port, memory_mb=16, threads=1) for i in range(n)]


def write_config(path: Path, pool: str, listen: int, srvs: list[MemcachedServer], **extra: object) -> None:
    weights = extra.pop("weights", None) or [1] * len(srvs)
    names = extra.pop("names", None) or [""] * len(srvs)
    conf = {
        pool: {
            "listen": f"127.0.0.1:{listen}",
            **extra,
            "servers": [
                f"{s.host}:{s.port}:{w}" + (f" {nm}" if nm else "")
                for s, w, nm in zip(srvs, weights, names, strict=True)
            ],
        }
    }
    path.write_text(yaml.safe_dump(conf))


def check_through_nutcracker(
    tmp_path: Path, srvs: list[MemcachedServer], keys: list[bytes], points: int | None = None, **extra: object
) -> int:
    """Places `keys` as cachewarm does, writes each to its node, reads all through nutcracker:
    the number of keys nutcracker could not find. `points`: a ketama ring with that many points per
    server instead (the negative control)."""
    for s in srvs:
        set_many(s.host, s.port, [])  # (reachable)
    listen = free_port()
    conf = tmp_path / "nutcracker.yml"
    write_config(conf, "cache", listen, srvs, **extra)
    nodes = [Node(s.host, s.port) for s in srvs]
    placer = PlacementSpec.parse(f"twemproxy,config={conf},pool=cache").placer(nodes)
    if points is not None:
        d = placer.description
        entries = tuple(replace(e, count=points) for e in d.nodes)
        placer = Placer(nodes, "twemproxy", replace(d, nodes=entries))
    per_node: dict[int, list[tuple[bytes, bytes]]] = {}
    for k in keys:
        per_node.setdefault(placer.index_for(k), []).append((k, b"v" + k[:8]))
    for i, items in per_node.items():
        set_many(srvs[i].host, srvs[i].port, items)
    with nutcracker(conf, tmp_path):
        found = get_many("127.0.0.1", listen, keys)
    for s in srvs:  # the next configuration starts empty
        _flush(s)
    return len(keys) - len(found)


def _flush(s: MemcachedServer) -> None:
    import socket

    with socket.create_connection((s.host, s.port), timeout=10) as c:
        c.sendall(b"flush_all\r\n")
        assert c.recv(100) == b"OK\r\n"


KEYS = corpus(600, utf8_only=False)


def test_every_hash_both_distributions_n3(memcached, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    srvs = servers(memcached, 3)
    missing = {
        (h, d): check_through_nutcracker(tmp_path, srvs, KEYS, hash=h, distribution=d)
        for h in HASHES
        for d in ("ketama", "modula")
    }
    assert missing == {k: 0 for k in missing}


def test_n25_defaults_tags_names_and_weights(memcached, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    srvs = servers(memcached, 25)
    cases = {
        "defaults (fnv1a_64 ketama, 156 points)": {},
        "md5 modula": {"hash": "md5", "distribution": "modula"},
        "one_at_a_time ketama + hash_tag": {"hash": "one_at_a_time", "hash_tag": "{}"},
        "murmur ketama, names": {"hash": "murmur", "names": [f"node-{i}" for i in range(25)]},
        "crc32a modula, weights": {
            "hash": "crc32a",
            "distribution": "modula",
            "weights": [1 + i % 3 for i in range(25)],
        },
        "fnv1a_32 ketama, names + weights": {
            "hash": "fnv1a_32",
            "names": [f"n{i}" for i in range(25)],
            "weights": [1 + i % 4 for i in range(25)],
        },
    }
    missing = {name: check_through_nutcracker(tmp_path, srvs, KEYS, **extra) for name, extra in cases.items()}
    assert missing == {k: 0 for k in missing}
    # the control: the same check sees a 160-point ring's misplaced keys (N = 25 has 156)
    assert check_through_nutcracker(tmp_path, srvs, KEYS, points=160) > 0


def test_misconfigured_pools_are_refused(tmp_path: Path) -> None:
    conf = tmp_path / "n.yml"
    conf.write_text(
        yaml.safe_dump(
            {"alpha": {"listen": "127.0.0.1:1", "servers": ["127.0.0.2:11211:1", "127.0.0.3:11211:1"]}}
        )
    )
    nodes = [Node("127.0.0.2", 11211), Node("127.0.0.3", 11211)]
    with pytest.raises(PlacementError, match=r"has no pool 'beta' \(its pools: alpha\)"):
        PlacementSpec.parse(f"twemproxy,config={conf},pool=beta").placer(nodes)
    with pytest.raises(PlacementError, match=r"does not list the destination\(s\) 127.0.0.9:11211"):
        PlacementSpec.parse(f"twemproxy,config={conf},pool=alpha").placer([*nodes, Node("127.0.0.9", 11211)])
    with pytest.raises(PlacementError, match=r"lists 127.0.0.3:11211, which --to does not name"):
        PlacementSpec.parse(f"twemproxy,config={conf},pool=alpha").placer(nodes[:1])
    with pytest.raises(PlacementError, match="No such file"):
        PlacementSpec.parse(f"twemproxy,config={tmp_path / 'nope.yml'},pool=alpha").placer(nodes)
    conf.write_text(yaml.safe_dump({"alpha": {"distribution": "random", "servers": ["127.0.0.2:11211:1"]}}))
    with pytest.raises(PlacementError, match="distribution 'random' cannot be warmed"):
        PlacementSpec.parse(f"twemproxy,config={conf},pool=alpha").placer(nodes[:1])


def test_server_names_follow_nutcracker(tmp_path: Path) -> None:
    """Its name, else the host on 11211, else host:port — and weights count with names."""
    conf = tmp_path / "n.yml"
    conf.write_text(
        yaml.safe_dump(
            {"a": {"servers": ["127.0.0.2:11211:1", "127.0.0.3:22122:1", "127.0.0.4:11211:3 big"]}}
        )
    )
    nodes = [Node("127.0.0.2", 11211), Node("127.0.0.3", 22122), Node("127.0.0.4", 11211)]
    d = PlacementSpec.parse(f"twemproxy,config={conf},pool=a").placer(nodes).description
    assert [(e.name, e.count) for e in d.nodes] == [("127.0.0.2", 96), ("127.0.0.3:22122", 96), ("big", 288)]
