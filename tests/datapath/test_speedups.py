"""The C encoding loop for data format v1 (agent/cachewarm/datapath/_speedups.c) against its Python
twin, encode.encode_sets: the same bytes on the wire, the same counts, the same records set aside
(expired, too large for the destination, keys for the binary protocol), the same records rejected
with the same message."""

from __future__ import annotations

import functools
import os
import random
import struct
from collections.abc import Callable
from typing import Any

import pytest
from cachewarm.datapath import encode
from cachewarm.datapath import format as df
from cachewarm.datapath.encode import UNLIMITED, EncodeStats, FileJob, Mode, encode_sets, encode_sets_c
from cachewarm.datapath.nodes import Node
from cachewarm.datapath.populate import WorkerParams, worker
from cachewarm.datapath.routing import Routing
from cachewarm.datapath.writer import encode_file as _encode_file
from cachewarm.testing.memcached import MemcachedServer

from tests.conftest import DEFAULT_VERSION

NOW = 1_800_000_000
# The C encoding loop is for data format v1 files (v2's records need no encoding: test_plan_v2.py).
encode_file = functools.partial(_encode_file, version=df.VERSION)

if encode._speedups is None:
    if os.environ.get("CACHEWARM_REQUIRE_SPEEDUPS"):
        pytest.fail("cachewarm.datapath._speedups is not built (pip install -e . needs a C compiler)")
    pytest.skip("cachewarm.datapath._speedups is not built", allow_module_level=True)


@pytest.fixture(autouse=True)
def _fixed_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(encode.time, "time", lambda: float(NOW))


def _verdict(data: bytes, name: str = "n1") -> df.Verdict:
    v = df.check_bytes(df.name_for(name, 0, 0, data), data, walk_records=False)
    assert v.ok, v.reason
    return v


def _python(v: df.Verdict, params: WorkerParams, budget: int = UNLIMITED) -> tuple[bytes, EncodeStats]:
    stats = EncodeStats(1)
    batches = list(encode_sets(v, params, FileJob((budget,)), None, stats))
    out = b"".join(b"".join(bytes(p) for p in pieces) for _, pieces, _, _ in batches)
    _check_order(batches, params)
    return out, stats


def _c(v: df.Verdict, params: WorkerParams, budget: int = UNLIMITED) -> tuple[bytes, EncodeStats]:
    stats = EncodeStats(1)
    batches = encode_sets_c(v, params, FileJob((budget,)), stats)
    assert all(isinstance(b, bytes) and n > 0 for _, b, n, _ in batches)
    _check_order(batches, params)
    return b"".join(b for _, b, _, _ in batches), stats


def _check_order(batches: list, params: WorkerParams) -> None:
    """Add mode names each item's record, in send order (the replies are matched by counting)."""
    for _, _, n, order in batches:
        assert (order is None) if params.mode == "set" else (len(order) == n)


def _records(rng: random.Random, n: int) -> list[df.Record]:
    recs = []
    for i in range(n):
        kind = rng.randrange(6)
        if kind == 0:  # binary key (base64 on the wire), sometimes too long for memcached
            key = bytes(rng.randrange(256) for _ in range(rng.choice([1, 2, 3, 50, 186, 187, 250])))
        else:
            key = b"key:%d:" % i + b"x" * rng.randrange(0, 200)
        exptime = rng.choice(
            [-1, NOW - 5, NOW, NOW + 1, NOW + 3600, NOW + 30 * 86400, NOW + 30 * 86400 + 1, 2**40, 1]
        )
        value = rng.randbytes(rng.choice([0, 1, 100, 1000, 10_000]))
        recs.append(df.Record(key, rng.choice([0, 1, 2**31, 2**32 - 1]), exptime, value))
    return recs


@pytest.mark.parametrize("mode", ["add", "set"])
@pytest.mark.parametrize("batch_items,batch_bytes", [(1000, 4 << 20), (1, 1), (7, 5000)])
@pytest.mark.parametrize("budget", [UNLIMITED, 1000, 1004])
def test_same_bytes_and_counts_as_python(mode: Mode, batch_items: int, batch_bytes: int, budget: int) -> None:
    rng = random.Random(42)
    data = encode_file("n1", 0, 0, _records(rng, 2000))
    v = _verdict(data)
    params = WorkerParams(
        nodes=(Node("127.0.0.1", 1),), mode=mode, batch_items=batch_items, batch_bytes=batch_bytes
    )
    py, py_stats = _python(v, params, budget)
    c, c_stats = _c(v, params, budget)
    assert c == py
    assert c_stats == py_stats
    # Expired items and keys for the binary protocol were exercised, and oversize ones with a budget.
    assert py_stats.expired[0] > 0 and py_stats.long_keys[0]
    assert bool(py_stats.oversize[0]) is (budget != UNLIMITED)
    # Never-expiring items go with T0, all others with their absolute expiry less the margin (never a
    # relative TTL); one that expires within the margin is not sent.
    t = b" T%d " if mode == "set" else b" %d "
    assert t % 0 in py and t % (NOW + 3600 - encode.EXPIRY_MARGIN) in py
    assert t % (NOW + 1 - encode.EXPIRY_MARGIN) not in py and t % 3600 not in py
    # Add mode sends no `ms` (a failed one unlinks the key's live value) and no base64 key.
    if mode == "add":
        assert b"ms " not in py and b" b " not in py and py.startswith(b"add ")


def test_oversize_is_decided_by_memcacheds_item_size_rule() -> None:
    """key + value (+4 when flags != 0) against the budget: the item that fits exactly is sent, one
    more byte and it is set aside; both loops agree."""
    budget = 1000
    recs = [
        df.Record(b"a", 0, -1, b"x" * (budget - 1)),  # exactly fits
        df.Record(b"b", 0, -1, b"x" * budget),  # one byte over
        df.Record(b"c", 1, -1, b"x" * (budget - 5)),  # flags cost 4 bytes: exactly fits
        df.Record(b"d", 1, -1, b"x" * (budget - 4)),  # one byte over
    ]
    data = encode_file("n1", 0, 0, recs)
    v = _verdict(data)
    params = WorkerParams(nodes=(Node("127.0.0.1", 1),))
    for out, stats in (_python(v, params, budget), _c(v, params, budget)):
        assert [encode.record_at(data, at).key for at in stats.oversize[0]] == [b"b", b"d"]
        assert out.count(b"add ") == 2 and b"add a " in out and b"add c " in out


def test_reads_from_a_memoryview_into_a_reused_buffer() -> None:
    data = encode_file("n1", 0, 0, _records(random.Random(1), 300))
    buf = df.ReadBuffer()
    view = buf.view(len(data))
    view[:] = data
    v = df.check_bytes(df.name_for("n1", 0, 0, data), view, walk_records=False)
    params = WorkerParams(nodes=(Node("127.0.0.1", 1),))
    assert _c(v, params) == _python(_verdict(data), params)
    assert _c(v, params)[1].long_keys[0]


def _corrupt(data: bytes, offset: int, patch: bytes) -> df.Verdict:
    """A file whose checksum matches bytes that break a record (a writer bug, check 4)."""
    bad = data[:offset] + patch + data[offset + len(patch) :]
    return _verdict(bad)


@pytest.mark.parametrize(
    "field,patch",
    [
        ("key_len", struct.pack("<B", 0)),
        ("value_len", struct.pack("<I", 10**9)),
        ("exptime", struct.pack("<q", 0)),
        ("exptime", struct.pack("<q", -7)),
    ],
)
def test_rejects_the_same_bad_records_as_python(field: str, patch: bytes) -> None:
    recs = [df.Record(b"k%d" % i, 0, -1, b"v" * 10) for i in range(5)]
    data = encode_file("n1", 0, 0, recs)
    header_len = df.HEADER_FIXED + 2
    rec_len = df.RECORD_FIXED + 2 + 10
    at = header_len + 2 * rec_len + {"value_len": 0, "exptime": 8, "key_len": 16}[field]
    v = _corrupt(data, at, patch)
    params = WorkerParams(nodes=(Node("127.0.0.1", 1),))
    with pytest.raises(df.CorruptRecord) as py:
        _python(v, params)
    with pytest.raises(df.CorruptRecord) as c:
        _c(v, params)
    assert str(c.value) == str(py.value)
    assert "record 2" in str(c.value)


def test_record_count_must_match_the_trailer() -> None:
    data = bytearray(encode_file("n1", 0, 0, [df.Record(b"k", 0, -1, b"v")]))
    struct.pack_into("<Q", data, len(data) - df.TRAILER_LEN + 8, 2)  # trailer says 2 records
    v = _verdict(bytes(data))
    with pytest.raises(df.CorruptRecord, match="1 records parsed, trailer says 2"):
        _c(v, WorkerParams(nodes=(Node("127.0.0.1", 1),)))


def test_the_c_loop_takes_its_constants_from_encode_py() -> None:
    """_speedups.c restates no limit of the format's: a different expiry margin or flags cost handed
    to it changes what it writes and what it sets aside (the key rules are the core's, pinned by
    tests/vectors/core/key_token.txt)."""
    assert encode._speedups is not None
    key = b"\x00" * 9  # base64: 12 chars
    data = encode_file("n1", 0, 0, [df.Record(key, 1, NOW + 3600, b"v" * 10)])
    params = WorkerParams(nodes=(Node("127.0.0.1", 1),), mode="set")  # add mode sends no base64 key
    out, stats = _c(_verdict(data), params, budget=9 + 10 + encode.ITEM_FLAGS_SUFFIX)
    assert out.startswith(b"ms AAAAAAAAAAAA 10 b T%d F1 MS q" % (NOW + 3600 - encode.EXPIRY_MARGIN))
    assert not stats.long_keys[0] and not stats.oversize[0]
    try:
        encode._speedups.configure(df.RECORD_FIXED, df.MAX_KEY_LEN, df.NEVER_EXPIRES, 4, 100)
        assert _c(_verdict(data), params)[0].startswith(b"ms AAAAAAAAAAAA 10 b T%d " % (NOW + 3500))
        encode._speedups.configure(df.RECORD_FIXED, df.MAX_KEY_LEN, df.NEVER_EXPIRES, 5, 1)
        _, stats = _c(_verdict(data), params, budget=9 + 10 + encode.ITEM_FLAGS_SUFFIX)
        assert stats.oversize[0] == [df.HEADER_FIXED + 2]
    finally:
        encode.configure_speedups()
    assert _c(_verdict(data), params)[0] == out


@pytest.mark.memcached_versions(DEFAULT_VERSION)  # which loop runs does not depend on the server
@pytest.mark.parametrize(
    ("value_size", "n_nodes", "tagged", "uses_c"),
    [(1000, 1, False, True), (10_000, 1, False, False), (1000, 2, False, False), (1000, 1, True, False)],
)
def test_the_populator_takes_the_c_loop_for_small_items_to_one_node(
    memcached: Callable[..., MemcachedServer],
    monkeypatch: pytest.MonkeyPatch,
    value_size: int,
    n_nodes: int,
    tagged: bool,
    uses_c: bool,
) -> None:
    calls: list[int] = []
    real = encode.encode_sets_c

    def counting(*args: Any) -> Any:
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(encode, "encode_sets_c", counting)
    servers = [memcached(memory_mb=64) for _ in range(n_nodes)]
    recs = [df.Record(b"k%d" % i, 7, NOW + 600, b"v" * value_size) for i in range(50)]
    v = _verdict(encode_file("n1", 0, 0, recs))
    out = worker.FileOutcome(name="f", status="")
    nodes = tuple(Node(s.host, s.port) for s in servers)
    params = WorkerParams(nodes=nodes, routing=Routing("{host}:{port}"))
    worker.write_records(v, params, FileJob((UNLIMITED,) * n_nodes, tagged=tagged), out)
    assert out.status == "ok" and sum(n.stored for n in out.nodes.values()) == 50
    assert bool(calls) is uses_c
