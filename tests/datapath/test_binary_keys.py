"""Keys of every length memcached can hold: in set mode up to 186 bytes through `ms <base64> b`,
187..250 bytes (whose base64 form no meta command takes) and in add mode every non-printable key
through memcached's binary protocol, never dropped; with
0x00, space, LF, CR and 0xff in them. Read back (`fetch`, `verify`) the same ways."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from cachewarm.datapath.binproto import BinaryConnection, store_request
from cachewarm.datapath.format import Record
from cachewarm.datapath.populate import PopulateError, populate
from cachewarm.datapath.routing import Routing
from cachewarm.datapath.verify import verify
from cachewarm.datapath.writer import DirWriter
from cachewarm.testing.populating import ClockWatch, config, expiry_within, fetch, listed_expiries, node

SPECIAL = bytes([0x00, 0x20, 0x0A, 0x0D, 0xFF])
LENGTHS = (1, 186, 187, 250)


def key(n: int, tag: int) -> bytes:
    return (bytes([tag]) + SPECIAL * 60)[:n]


def items(now: int) -> list[Record]:
    out = []
    for tag, n in enumerate(LENGTHS * 3):
        exptime = [-1, now + 3600, now + 40 * 86400][tag % 3]
        out.append(Record(key(n, tag), 0xFFFFFFFF - tag, exptime, b"value-%d-" % n + SPECIAL * tag))
    return out


@pytest.mark.parametrize("mode", ["add", "set"])
def test_every_key_length_is_written(memcached, tmp_path: Path, mode: str) -> None:
    dst = memcached(memory_mb=16)
    clocks = ClockWatch(dst)
    now = int(time.time())
    recs = [*items(now), Record(b"plain", 1, -1, b"p")]
    w = DirWriter(tmp_path / "dump", node="src")
    w.write(0, 0, recs)
    w.done()
    clocks.join()
    s = populate(config(tmp_path / "dump", tmp_path, [dst], mode=mode))
    # Counted as binary protocol: the keys no meta command can name (add mode writes every key with
    # binary ADDs, set mode these with SETQ).
    binary = [r for r in recs if len(r.key) > 186]
    assert (s.stored, s.binary_protocol) == (len(recs), len(binary))
    got = fetch(dst, [r.key for r in recs])
    for r in recs:
        assert got[r.key].value == r.value and got[r.key].flags == r.flags, r.key
    # The expiry went with every item, binary protocol included (metadump lists each key's).
    slack = clocks.slack(None, dst)
    listed = listed_expiries(dst, clocks.ahead(dst))
    for r in recs:
        if r.exptime == -1:
            assert listed[r.key] == -1, r.key
        else:
            assert expiry_within(r.exptime, listed[r.key], slack), (r.key, r.exptime, listed[r.key], slack)


def test_add_mode_keeps_a_live_value_under_a_long_key(memcached, tmp_path: Path) -> None:
    dst = memcached(memory_mb=16)
    k = key(250, 9)
    with BinaryConnection(dst.host, dst.port) as bc:
        res = bc.store([(store_request("set", k, b"live", 3, 0, 0), b"live")])
    assert res.errors == 0
    w = DirWriter(tmp_path / "dump", node="src")
    w.write(0, 0, [Record(k, 1, -1, b"dumped"), Record(key(200, 1), 2, -1, b"other")])
    w.done()
    s = populate(config(tmp_path / "dump", tmp_path, [dst]))
    assert (s.stored, s.already_present, s.binary_protocol) == (1, 1, 2)
    assert fetch(dst, [k])[k].value == b"live"


def test_long_keys_route_to_their_node(memcached, tmp_path: Path) -> None:
    dsts = [memcached(memory_mb=16) for _ in range(3)]
    recs = [Record(key(187 + i % 60, i), i, -1, b"v%d" % i) for i in range(60)]
    w = DirWriter(tmp_path / "dump", node="src")
    w.write(0, 0, recs)
    w.done()
    s = populate(config(tmp_path / "dump", tmp_path, dsts))
    assert s.binary_protocol == 60 and sum(s.per_node.values()) == 60
    ring = Routing("{host}:{port}").ring([node(d) for d in dsts])
    assert ring is not None
    for d in dsts:
        mine = [r.key for r in recs if ring.node_for(r.key) == node(d)]
        assert len(fetch(d, mine)) == len(mine) == s.per_node[d.address]


@pytest.mark.memcached_versions("1.6.18")  # the -B option is the same in every release
def test_a_destination_without_the_binary_protocol_fails_loudly(memcached, tmp_path: Path) -> None:
    dst = memcached(memory_mb=16, extra_args=["-B", "ascii"])
    w = DirWriter(tmp_path / "dump", node="src")
    w.write(0, 0, [Record(key(200, 1), 0, -1, b"v"), Record(b"plain", 0, -1, b"p")])
    w.done()
    with pytest.raises(PopulateError, match="need the binary protocol"):
        populate(config(tmp_path / "dump", tmp_path, [dst]))


def test_verify_compares_long_keys(memcached) -> None:
    src, dst = memcached(memory_mb=16), memcached(memory_mb=16)
    recs = items(int(time.time()))
    for srv in (src, dst):
        with BinaryConnection(srv.host, srv.port) as bc:
            reqs = [
                (store_request("set", r.key, r.value, r.flags, 0, i), r.value) for i, r in enumerate(recs)
            ]
            assert bc.store(reqs).errors == 0
    rep = verify(node(src), [node(dst)])
    assert rep.ok and rep.checked == len(recs)
    changed = recs[-1]
    with BinaryConnection(dst.host, dst.port) as bc:
        bc.store([(store_request("set", changed.key, b"other", changed.flags, 0, 0), b"other")])
    rep = verify(node(src), [node(dst)])
    assert rep.value_mismatch == 1 and not rep.ok
