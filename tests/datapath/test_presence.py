"""The target check's lookups (datapath/presence.py, _probes.c) against real memcacheds: hits and misses
named in order, base64 keys, an error reply fails loudly, kept lookups of a file, and a key list
routed by the C walk exactly as ketama.index_for routes it."""

from __future__ import annotations

import base64
import io
import os
import struct
import time
import urllib.parse
from pathlib import Path

import pytest
from cachewarm.datapath import format as df
from cachewarm.datapath import presence
from cachewarm.datapath.encode import FileJob
from cachewarm.datapath.meta import MetaConnection
from cachewarm.datapath.nodes import Node
from cachewarm.datapath.populate.config import WorkerParams
from cachewarm.datapath.populate.worker import apply_file
from cachewarm.datapath.routing import Routing, evcache_ring
from cachewarm.datapath.stream import _check_list
from cachewarm.datapath.warm_check import compare_sample
from cachewarm.datapath.warm_config import WarmConfig
from cachewarm.datapath.writer import encode_file

from tests.datapath.test_warm import put
from tests.ketama_oracle import KetamaRing

try:
    from cachewarm.datapath import _speedups
except ImportError:  # pragma: no cover
    _speedups = None  # type: ignore[assignment]

needs_c = pytest.mark.skipif(
    _speedups is None and not os.environ.get("CACHEWARM_REQUIRE_SPEEDUPS"), reason="_speedups not built"
)


def _lines(keys: list[bytes]) -> bytes:
    out = bytearray()
    for k in keys:
        if all(0x21 <= c <= 0x7E for c in k):
            out += b"mg %b\r\n" % k
        else:
            out += b"mg %b b\r\n" % base64.b64encode(k)
    return bytes(out)


def test_absent_names_every_miss_in_order(memcached) -> None:  # type: ignore[no-untyped-def]
    srv = memcached()
    present = [b"k:%d" % i for i in range(0, 30_000, 2)] + [b"bin\x00\xff key"]
    put(srv, [(k, 0, 0, b"v") for k in present])
    asked = [b"k:%d" % i for i in range(30_000)] + [b"bin\x00\xff key", b"bin\x01 gone"]
    idx = presence.absent(srv.host, srv.port, _lines(asked))
    assert idx == [i for i in range(1, 30_000, 2)] + [30_001]
    assert presence.absent(srv.host, srv.port, _lines(present)) == []
    assert presence.absent(srv.host, srv.port, b"") == []


def test_an_error_reply_fails_loudly(memcached) -> None:  # type: ignore[no-untyped-def]
    srv = memcached()
    with pytest.raises(presence.PresenceError, match="answered"):
        presence.absent(srv.host, srv.port, b"mg ok\r\nmg " + b"x" * 300 + b"\r\nmg ok2\r\n")


def test_kept_lookups_count_expired_misses_as_explained(memcached, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    a, b = memcached(), memcached()
    nodes = [Node(a.host, a.port), Node(b.host, b.port)]
    put(a, [(b"a1", 0, 0, b"v"), (b"a2", 0, 0, b"v")])
    put(b, [(b"b1", 0, 0, b"v")])
    now = int(time.time())
    t = struct.Struct("<q")
    per_node = {
        # a3 missing (never expires), a4 missing but its T has passed: expired, explained
        nodes[0].address: (_lines([b"a1", b"a2", b"a3", b"a4"]), t.pack(0) * 3 + t.pack(now - 10), [], b""),
        nodes[1].address: (_lines([b"b1"]), t.pack(now + 3600), [b"L" * 200], b""),  # a binary-protocol key
    }
    presence.save_probes(tmp_path, "f1", {nodes[1].address: (b"mg stale\r\n", t.pack(0), [], b"")})
    presence.save_probes(tmp_path, "f1", {nodes[0].address: per_node[nodes[0].address]})
    assert presence.check_kept(tmp_path, "f1", nodes) == (
        3 + 1,
        [b"a3", b"stale"],
        [],
    )  # both kept (a4: expired)
    presence.save_probes(tmp_path, "f1", {nodes[1].address: per_node[nodes[1].address]})  # replaces b's
    checked, gone, _ = presence.check_kept(tmp_path, "f1", nodes) or (0, [], [])
    assert (checked, sorted(gone)) == (5, [b"L" * 200, b"a3"])
    # Kept for other destinations (or none kept): the caller walks the file instead.
    assert presence.check_kept(tmp_path, "f1", [Node(a.host, a.port + 1)]) is None
    assert presence.check_kept(tmp_path, "f2", nodes) is None
    presence.forget(tmp_path)
    assert not tmp_path.exists()


@needs_c
@pytest.mark.parametrize("delimiter", [None, b":"])
def test_key_lists_route_as_the_ring(delimiter: bytes | None) -> None:
    nodes = [Node(f"10.0.0.{i}", 11211) for i in range(1, 5)]
    ring = KetamaRing(nodes, hash_delimiter=delimiter)  # the oracle
    now = 1_800_000_000
    keys = [b"user:%d:x%d" % (i % 97, i) for i in range(3000)] + [b"sp ace", b"\x00\xffbin", b"\xfe" * 200]
    exps = [-1, now + 10, now, now - 1]
    data = b"".join(
        urllib.parse.quote_from_bytes(k).encode() + b" %d\n" % exps[i % 4] for i, k in enumerate(keys)
    )
    placement = evcache_ring(nodes, hash_delimiter=delimiter).c_placement
    shares = _speedups.probe_keys(data, now, len(nodes), placement)
    want: list[list[bytes]] = [[] for _ in nodes]
    want_bin: list[list[bytes]] = [[] for _ in nodes]
    for i, k in enumerate(keys):
        if exps[i % 4] in (-1, now + 10):
            (want_bin if len(k) > 186 else want)[ring.index_for(k)].append(k)
    for (lookups, expiry, binary), w, wb in zip(shares, want, want_bin, strict=True):
        got = [presence.probe_key(x) for x in lookups.split(b"\r\n")[:-1]]
        assert got == w and binary == wb and len(expiry) == 8 * len(w)
    with pytest.raises(ValueError, match="key list line 2"):
        _speedups.probe_keys(b"a 1\nnoexptime\n", now, 1, None)


@needs_c
def test_a_stream_key_list_check_finds_the_missing(memcached, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    a, b = memcached(), memcached()
    nodes = [Node(a.host, a.port), Node(b.host, b.port)]
    routing = Routing(node_key_format="{host}:{port}")
    ring = routing.ring(nodes)
    assert ring is not None
    keys = [b"s:%d" % i for i in range(2000)]
    for i, srv in enumerate((a, b)):
        put(srv, [(k, 0, 0, b"v") for k in keys if k != b"s:7" and ring.index_for(k) == i])
    lst = tmp_path / "0.keys"
    lst.write_bytes(b"".join(k + b" -1\n" for k in keys) + b"gone:1 %d\n" % (int(time.time()) - 5))
    checked, gone, sample = _check_list(lst, nodes, routing, frozenset(), 0.1)
    assert (checked, gone) == (2000, [b"s:7"]) and 100 <= len(sample) <= 300 and b"s:7" not in sample
    checked, gone, _ = _check_list(lst, nodes, routing, frozenset({b"s:7"}))  # skipped on purpose
    assert (checked, gone) == (1999, [])


@pytest.mark.parametrize("mode", ["add", "set"])
def test_the_worker_keeps_what_the_check_needs(memcached, tmp_path: Path, mode: str) -> None:  # type: ignore[no-untyped-def]
    """A populated file's kept lookups find every item it sent (base64 and binary-protocol keys
    included); a key deleted afterwards is named; an expired one and an oversize one are not asked."""
    a, b = memcached(), memcached()
    nodes = (Node(a.host, a.port), Node(b.host, b.port))
    routing = Routing(node_key_format="{host}:{port}")
    now = int(time.time())
    recs = [df.Record(b"k:%d" % i, i, -1, b"v%d" % i) for i in range(500)]
    recs += [df.Record(b"\x00bin\xff", 1, now + 3600, b"b64"), df.Record(b"\xfe" * 200, 2, -1, b"binary")]
    recs += [df.Record(b"gone", 0, now - 10, b"expired"), df.Record(b"huge", 0, -1, b"x" * 5000)]
    data = encode_file("n1", 0, 0, recs)
    path = tmp_path / df.name_for("n1", 0, 0, data).name
    path.write_bytes(data)
    probes = tmp_path / "probes"
    params = WorkerParams(nodes=nodes, mode=mode, routing=routing, probe_dir=probes)  # type: ignore[arg-type]
    out = apply_file(str(path), params, FileJob(budgets=(4096, 4096)))
    assert out.status == "ok", out.reason
    checked, gone, sample = presence.check_kept(probes, path.name, list(nodes), 1.0) or (-1, [], [])
    assert (checked, gone) == (502, [])
    assert len(sample) == 501  # every key a meta command names (base64 included)
    ring = routing.ring(list(nodes))
    assert ring is not None
    for key in (b"k:7", b"\x00bin\xff"):
        srv = (a, b)[ring.index_for(key)]
        with MetaConnection(srv.host, srv.port) as c:
            c._send(b"md %b b\r\n" % base64.b64encode(key))
            assert c._readline() == b"HD"
    checked, gone, _ = presence.check_kept(probes, path.name, list(nodes)) or (-1, [], [])
    assert (checked, sorted(gone)) == (502, [b"\x00bin\xff", b"k:7"])


def test_a_sampled_difference_fails_the_warm_with_examples(memcached, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    src, dst = memcached(), memcached()
    put(src, [(b"same", 1, 0, b"v"), (b"other", 1, 0, b"source's")])
    put(dst, [(b"same", 1, 0, b"v"), (b"other", 2, 0, b"a live write")])
    cfg = WarmConfig(
        Node(src.host, src.port), [Node(dst.host, dst.port)], tmp_path, Path("x"), check_sample=10
    )
    out, problems = io.StringIO(), []
    assert compare_sample(cfg, [b"same"], out, problems) == (1, 0) and not problems
    assert compare_sample(cfg, [b"same", b"other"], out, problems) == (2, 1)
    assert problems == ["1 of 2 sampled keys differ between the source and the target"]
    assert "other: value (8 bytes vs 12) and flags (1 vs 2) differ" in out.getvalue()
