"""Several destinations: host names route like the EVCache client routes them (node key = host name +
"/" + resolved IP + ":11211"), the state file pins the routing, a restarted destination gets only its
own items again, and `verify` routes like `populate`."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
from cachewarm.datapath.format import Record
from cachewarm.datapath.nodes import Node, resolve
from cachewarm.datapath.populate import PopulateError, PopulateState, populate
from cachewarm.datapath.routing import EVCACHE_NODE_KEY, Routing
from cachewarm.datapath.verify import verify
from cachewarm.datapath.writer import DirWriter
from cachewarm.testing.memcached import MemcachedServer
from cachewarm.testing.populating import Background, config, fetch, node, records

from tests.conftest import DEFAULT_VERSION
from tests.ketama_oracle import KetamaRing

CLI = [sys.executable, "-c", "from cachewarm.cli import main; main()"]
# Where keys go is decided on our side: one release is enough (a restart, below, runs on all).
ROUTING_ONLY = pytest.mark.memcached_versions(DEFAULT_VERSION)


def _dump(path: Path, recs: list[Record], files: int = 1) -> None:
    w = DirWriter(path, node="src")
    per = -(-len(recs) // files)
    for f in range(files):
        w.write(f, 0, recs[f * per : (f + 1) * per])
    w.done()


def _keys(srv: MemcachedServer, recs: list[Record]) -> set[bytes]:
    return set(fetch(srv, [r.key for r in recs]))


def test_resolve_prefers_ipv4_and_names_what_does_not_resolve() -> None:
    def fake(host: str, port: int, *_: object) -> list[tuple[object, ...]]:
        if host == "cache-1.internal":
            return [
                (socket.AF_INET6, socket.SOCK_STREAM, 6, "", ("fd00::5", port, 0, 0)),
                (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.1.2.3", port)),
            ]
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    n = resolve(Node("cache-1.internal", 11211), fake)
    assert n.ip == "10.1.2.3" and n.connect_host == "10.1.2.3" and n.address == "cache-1.internal:11211"
    assert (
        KetamaRing([n, Node("10.1.2.4", 11211, "10.1.2.4")]).node_key(n) == "cache-1.internal/10.1.2.3:11211"
    )
    assert resolve(Node("10.0.0.9", 1), fake).ip == "10.0.0.9"  # an address is its own
    with pytest.raises(ValueError, match=r"cannot resolve 'nope\.internal'"):
        resolve(Node("nope.internal", 1), fake)


@ROUTING_ONLY
def test_names_route_like_the_addresses_they_resolve_to(memcached, tmp_path: Path) -> None:
    """`--to localhost:p1,...` with node keys of the resolved address lands every item where
    `--to 127.0.0.1:p1,...` does."""
    dsts = [memcached(memory_mb=16) for _ in range(3)]
    recs = records(1500)
    _dump(tmp_path / "dump", recs)
    by_ip = ",".join(f"127.0.0.1:{d.port}" for d in dsts)
    by_name = ",".join(f"localhost:{d.port}" for d in dsts)
    placed = []
    for i, to in enumerate((by_ip, by_name)):
        args = ["--from", str(tmp_path / "dump"), "--to", to, "--state-file", str(tmp_path / f"s{i}.json")]
        p = subprocess.run(
            [*CLI, "populate", *args, "--node-key-format", "{ip}:{port}", "--mode", "set"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert p.returncode == 0, p.stderr
        placed.append([_keys(d, recs) for d in dsts])
        for d in dsts:
            d.command(b"flush_all\r\n", until=b"OK\r\n")
    assert placed[0] == placed[1] and all(0 < len(k) < 1000 for k in placed[0])
    assert sum(len(k) for k in placed[0]) == 1500


@ROUTING_ONLY
def test_evcache_node_keys_for_host_names(memcached, tmp_path: Path) -> None:
    """EVCache's node key with a host name: `localhost/127.0.0.1:11211`; its items land where a ring of
    those exact strings puts them (the other nodes are named by address: `127.0.0.2/127.0.0.2:11211`)."""
    dsts = [memcached(memory_mb=16, host=f"127.0.0.{k + 1}") for k in range(3)]
    nodes = [Node("localhost", dsts[0].port), *(node(d) for d in dsts[1:])]
    recs = records(1200)
    _dump(tmp_path / "dump", recs)
    cfg = config(tmp_path / "dump", tmp_path, [], node_key_format=EVCACHE_NODE_KEY)
    cfg.destinations = nodes
    s = populate(cfg)
    assert s.stored == 1200
    expected = ["localhost/127.0.0.1:11211", "127.0.0.2/127.0.0.2:11211", "127.0.0.3/127.0.0.3:11211"]
    assert PopulateState.load(cfg.state_file).routing["node_keys"] == expected
    literal = KetamaRing([Node(k, 0) for k in expected], "{host}")
    for i, d in enumerate(dsts):
        mine = {r.key for r in recs if literal.index_for(r.key) == i}
        assert _keys(d, recs) == mine


@ROUTING_ONLY
def test_the_state_file_refuses_another_routing(memcached, tmp_path: Path) -> None:
    dsts = [memcached(memory_mb=16) for _ in range(2)]
    _dump(tmp_path / "dump", records(100))
    populate(config(tmp_path / "dump", tmp_path, dsts, node_key_format="{host}:{port}"))
    for change in ({"node_key_format": "{ip}:{port}-x"}, {"ketama_reps": 80}, {"hash_delimiter": b":"}):
        with pytest.raises(PopulateError, match="records files written with routing"):
            populate(
                config(tmp_path / "dump", tmp_path, dsts, **{"node_key_format": "{host}:{port}", **change})
            )
    assert populate(config(tmp_path / "dump", tmp_path, dsts, node_key_format="{host}:{port}")).stored == 100


def test_a_restarted_destination_gets_only_its_items_again(memcached, tmp_path: Path) -> None:
    """One of three destinations restarts (empty) mid-run: it gets all of its items again, the two
    others get none twice (memcached's cmd_set counts every set they received)."""
    dsts = [memcached(memory_mb=32) for _ in range(3)]
    recs = records(3000)
    out = tmp_path / "dump"
    w = DirWriter(out, node="src")
    w.write(0, 0, recs[:1000])
    w.write(1, 0, recs[1000:2000])
    bg = Background(config(out, tmp_path, dsts, workers=1)).start()
    bg.wait_for(lambda: sum(e.event == "file" for e in bg.events) >= 2)
    dsts[1].restart()
    w.write(2, 0, recs[2000:])
    w.done()
    bg.join()
    s = bg.summary
    assert s is not None and s.restarts_detected == 1 and s.stored == 3000
    ring = Routing("{host}:{port}").ring([node(d) for d in dsts])
    assert ring is not None
    for i, d in enumerate(dsts):
        mine = {r.key for r in recs if ring.index_for(r.key) == i}
        assert _keys(d, recs) == mine, d
        if i != 1:
            assert int(d.stats()["cmd_set"]) == len(mine), "items re-sent to a destination that kept them"
    # The same after the populator had stopped: a resumed run re-sends only to the one that restarted.
    dsts[0].restart()
    sets = [int(d.stats()["cmd_set"]) for d in dsts]
    again = populate(config(out, tmp_path, dsts, workers=1))
    assert again.restarts_detected == 2
    assert _keys(dsts[0], recs) == {r.key for r in recs if ring.index_for(r.key) == 0}
    assert [int(d.stats()["cmd_set"]) for d in dsts][1:] == sets[1:]


@ROUTING_ONLY
def test_verify_takes_the_populators_routing(memcached, tmp_path: Path) -> None:
    """Keys `user:<id>:<field>` routed by `user:<id>` only (hash.on.partial.key): verify with the same
    options finds every key; with the default routing it looks on the wrong nodes."""
    src = memcached(memory_mb=16)
    dsts = [memcached(memory_mb=16) for _ in range(3)]
    recs = [
        Record(b"user:%d:%s" % (i // 3, f), 0, -1, b"v%d" % i)
        for i, f in zip(range(900), [b"a", b"b", b"c"] * 300, strict=True)
    ]
    _dump(tmp_path / "dump", recs)
    routing = Routing("{host}:{port}", 80, b":")
    populate(
        config(
            tmp_path / "dump",
            tmp_path,
            dsts,
            node_key_format="{host}:{port}",
            ketama_reps=80,
            hash_delimiter=b":",
        )
    )
    for d in dsts:  # every field of a user on one node
        held = _keys(d, recs)
        users = {k.split(b":")[1] for k in held}
        assert all({b"user:%s:%s" % (u, f) for f in (b"a", b"b", b"c")} <= held for u in users)
    with socket.create_connection((src.host, src.port)) as c:
        c.sendall(
            b"".join(b"set %s 0 0 %d\r\n%s\r\n" % (r.key, len(r.value), r.value) for r in recs) + b"mn\r\n"
        )
        buf = b""
        while not buf.endswith(b"MN\r\n"):
            buf += c.recv(65536)
    targets = [node(d) for d in dsts]
    assert verify(node(src), targets, routing=routing).ok
    assert verify(node(src), targets, routing=Routing("{host}:{port}")).missing > 0
    args = ["verify", "--source", src.address, "--target", ",".join(d.address for d in dsts)]
    opts = ["--node-key-format", "{host}:{port}", "--ketama-reps", "80", "--hash-delimiter", ":"]
    p = subprocess.run([*CLI, *args, *opts], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
