"""The stream mode (`cachewarm-dump --to`) where it decides what the Python populator decides (the
warm tests run in both modes; these pin what they do not reach): the size rule at the byte with CAS
on and off, expiries around memcached's 30-day boundary, EVCache's default node keys, set mode, the
write rate limits, evictions, and the summary's numbers adding up."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from cachewarm.datapath.encode import ItemLimit
from cachewarm.datapath.nodes import Node
from cachewarm.datapath.routing import Routing
from cachewarm.datapath.verify import verify
from cachewarm.testing.memcached import MemcachedServer
from cachewarm.testing.populating import ClockWatch, expiries, expiry_within, fetch

from tests.conftest import DEFAULT_VERSION
from tests.datapath.test_warm import put
from tests.dumper.dumputil import run_dump

MIB = 1 << 20


def summary(stdout: str) -> dict[str, object]:
    return dict(json.loads([ln for ln in stdout.splitlines() if '"stream_summary"' in ln][-1]))


@pytest.mark.parametrize("cas", [True, False])
def test_size_rule_at_the_byte(memcached, dumper_bin: Path, tmp_path: Path, cas: bool) -> None:
    src = memcached(memory_mb=64, max_item_size="4m")
    dst = memcached(memory_mb=64, max_item_size="1m", extra_args=[] if cas else ["-C"])
    budget = ItemLimit(MIB, cas).budget
    items = []
    for flags in (0, 7):
        edge = budget - len(b"fit-0") - (4 if flags else 0)
        items += [
            (b"fit-%d" % flags, flags, 0, b"f" * edge),
            (b"big-%d" % flags, flags, 0, b"b" * (edge + 1)),
        ]
    put(src, items)
    put(dst, [(b"big-0", 1, 0, b"live"), (b"big-7", 1, 0, b"live")])
    out = tmp_path / "o"
    r = run_dump(dumper_bin, src, out, "--to", dst.address)
    assert r.returncode == 1 and "--accept-oversize" in r.stderr, r.stderr
    s = summary(r.stdout)
    assert (s["stored"], s["oversize"], s["ok"]) == (2, 2, False)
    got = fetch(dst, [k for k, *_ in items])
    assert got[b"fit-0"].value == items[0][3] and got[b"fit-7"].value == items[2][3]
    assert got[b"big-0"].value == got[b"big-7"].value == b"live"  # never sent: the live values stay
    report = [json.loads(ln) for ln in Path(str(s["oversize_report"])).read_text().splitlines()]
    assert sorted((x["key"], x["value_bytes"], x["item_size_max"]) for x in report) == [
        ("big-0", len(items[1][3]), MIB),
        ("big-7", len(items[3][3]), MIB),
    ]
    again = run_dump(dumper_bin, src, out, "--to", dst.address, "--resume", "--accept-oversize")
    assert again.returncode == 0 and summary(again.stdout)["ok"], again.stderr


def test_expiries_around_the_30_day_boundary(memcached, dumper_bin: Path, tmp_path: Path) -> None:
    src, dst = memcached(memory_mb=64), memcached(memory_mb=64)
    clocks = ClockWatch(src, dst).join()  # first: the 2 s TTL below counts from after it
    now = int(time.time())
    month = 30 * 86400
    ttls = [month - 5, month, now + month + 5, now + 400 * 86400, 2, 0]  # relative, absolute, never
    put(src, [(b"t%d" % i, i, t, b"v") for i, t in enumerate(ttls)])
    r = run_dump(dumper_bin, src, tmp_path / "o", "--to", dst.address)
    assert r.returncode == 0, r.stderr
    keys = [b"t%d" % i for i in range(len(ttls))]
    slack = clocks.slack(src, dst)
    src_exp, dst_exp = expiries(src, keys, clocks.ahead(src)), expiries(dst, keys, clocks.ahead(dst))
    for k in keys:
        if k not in src_exp:  # the 2 s item may have run out at the source by now
            assert k == b"t4", k
        elif src_exp[k] == -1:
            assert dst_exp[k] == -1, k
        elif k not in dst_exp:  # only the 2 s item may have been left out as expired (never sent late)
            assert k == b"t4", k
        else:
            assert expiry_within(src_exp[k], dst_exp[k], slack), (k, src_exp[k], dst_exp[k], slack)


@pytest.mark.memcached_versions(DEFAULT_VERSION)
def test_evcache_node_keys_route_like_the_client(
    dumper_bin: Path, memcached_binary: str, tmp_path: Path
) -> None:
    """Three nodes on three loopback addresses: EVCache's default node key `{host}/{ip}:11211` tells
    them apart; verify (datapath/routing.py) finds every key on the node the stream wrote it to."""
    src = MemcachedServer(memory_mb=32, binary=memcached_binary).start()
    dsts = [
        MemcachedServer(memory_mb=32, host=f"127.0.0.{i}", binary=memcached_binary).start() for i in (2, 3, 4)
    ]
    try:
        put(src, [(b"user:%d" % i, i, 0, b"v%d" % i) for i in range(3000)])
        to = ",".join(d.address for d in dsts)
        r = run_dump(dumper_bin, src, tmp_path / "o", "--to", to)
        assert r.returncode == 0, r.stderr
        counts = [int(d.stats()["curr_items"]) for d in dsts]
        assert sum(counts) == 3000 and min(counts) > 500, counts
        rep = verify(Node(src.host, src.port), [Node(d.host, d.port) for d in dsts], None, 5, Routing())
        assert rep.ok and rep.checked == 3000, rep.text()
        assert summary(r.stdout)["per_node"] == {d.address: c for d, c in zip(dsts, counts, strict=True)}
    finally:
        for s in (src, *dsts):
            s.kill()


def test_set_mode_overwrites_and_add_mode_keeps(memcached, dumper_bin: Path, tmp_path: Path) -> None:
    src, dst = memcached(), memcached()
    put(src, [(b"k%d" % i, 1, 0, b"source") for i in range(100)])
    put(dst, [(b"k0", 2, 0, b"live")])
    r = run_dump(dumper_bin, src, tmp_path / "add", "--to", dst.address)
    assert r.returncode == 0 and summary(r.stdout)["already_present"] == 1
    assert fetch(dst, [b"k0"])[b"k0"].value == b"live"
    r = run_dump(dumper_bin, src, tmp_path / "set", "--to", dst.address, "--mode", "set")
    assert r.returncode == 0 and (summary(r.stdout)["stored"], summary(r.stdout)["already_present"]) == (
        100,
        0,
    )
    assert fetch(dst, [b"k0"])[b"k0"].value == b"source"


@pytest.mark.memcached_versions(DEFAULT_VERSION)
def test_write_rate_limits_and_the_summary_adds_up(memcached, dumper_bin: Path, tmp_path: Path) -> None:
    src, dst = memcached(), memcached()
    put(src, [(b"k%d" % i, i, 0 if i % 2 else 1, b"x" * (i % 300)) for i in range(3000)])
    time.sleep(1.5)  # the 1-second items expire at the source: misses, explained
    put(dst, [(b"k%d" % i, 0, 0, b"live") for i in range(1, 3000, 100)])
    limits = ("--max-write-items-per-second", "20000", "--max-write-bytes-per-second", "5000000")
    r = run_dump(
        dumper_bin, src, tmp_path / "o", "--to", dst.address, *limits, "--max-items-per-second", "30000"
    )
    assert r.returncode == 0, r.stderr
    s = summary(r.stdout)
    parts = [s[k] for k in ("stored", "already_present", "resent_own", "expired", "oversize")]
    assert sum(parts) == s["records"] == 1500 and s["already_present"] == 30  # type: ignore[arg-type]
    assert s["keys_listed"] == s["records"] + s["dump_misses"] and s["dump_complete"] is True  # type: ignore[operator]
    assert json.loads((tmp_path / "o" / "DONE").read_text())["format"] == "cachewarm-stream"


@pytest.mark.memcached_versions(DEFAULT_VERSION)
def test_evictions_make_the_run_incomplete_unless_accepted(
    memcached, dumper_bin: Path, tmp_path: Path
) -> None:
    src, dst = memcached(memory_mb=64), memcached(memory_mb=4)
    put(src, [(b"k%d" % i, 0, 0, b"x" * 2000) for i in range(10_000)])
    r = run_dump(dumper_bin, src, tmp_path / "o", "--to", dst.address)
    assert r.returncode == 1 and "--accept-evictions" in r.stderr
    assert summary(r.stdout)["destination_evictions"] > 0  # type: ignore[operator]
    again = run_dump(dumper_bin, src, tmp_path / "o", "--to", dst.address, "--resume", "--accept-evictions")
    assert again.returncode == 0 and summary(again.stdout)["accepted"], again.stderr
