"""Hot items first (--order recency) and the source guard (--adaptive, --crawl-sleep-us), end to end.

The order is decided by `la=`/`fetch=` in the listing: a scripted server (fakemc) gives exact ages, so
the tiers are checked without any clock; the real servers of the matrix check that what memcached
itself reports puts the keys clients just read first. The guard's decisions are unit-tested with
scripted probe latencies (dumper-cpp/tests/source_guard_test.cc); here: it runs against a real
server, says what it did in DONE, and leaves the server's crawler pace as it found it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from pathlib import Path

from cachewarm.testing.memcached import MemcachedServer

from tests.dumper.dumputil import dump_cmd, load_numbered, read_dump, run_dump
from tests.dumper.fakemc import FakeItem, FakeMemcached
from tests.dumper.test_crawl_cases import run

SMALL_LISTS = ("--threads", "1", "--key-file-size", "4k")


def test_recency_order_follows_last_access_then_fetched(dumper_bin: Path, tmp_path: Path) -> None:
    now = int(time.time())
    # (age in seconds, fetched) -> tier order: younger first; within an age, fetched first. Ages sit
    # far from tier boundaries (half powers of two), so the second the dump starts in does not matter.
    ages = [(10**6, False), (3000, True), (0, False), (10**6, True), (3000, False), (0, True)]
    want_order = sorted(range(len(ages)), key=lambda g: (ages[g][0], not ages[g][1]))
    items: dict[bytes, FakeItem] = {}
    for i in range(600):  # 100 keys per group, interleaved in the listing
        age, fetched = ages[i % len(ages)]
        items[b"k%d" % i] = FakeItem(b"v%d" % i, la=now - age, fetched=fetched)
    with FakeMemcached(items=items) as fake:
        rc, err = run(dumper_bin, fake, tmp_path / "r", "--order", "recency", *SMALL_LISTS)
        assert rc == 0, err
        rc, err = run(dumper_bin, fake, tmp_path / "c", "--order", "crawl", *SMALL_LISTS)
        assert rc == 0, err
    got = [int(r.key[1:]) % len(ages) for r in read_dump(tmp_path / "r").records]
    assert got == [g for g in want_order for _ in range(100)]
    done = json.loads((tmp_path / "r" / "DONE").read_text())
    assert done["order"]["first_crawl"] == "recency" and done["complete"] is True
    # Crawl order: the listing's own (the fake lists in insertion order); DONE says nothing of order.
    assert [r.key for r in read_dump(tmp_path / "c").records] == list(items)
    assert "order" not in json.loads((tmp_path / "c" / "DONE").read_text())


def _fetch(srv: MemcachedServer, keys: list[int], times: int) -> None:
    with socket.create_connection((srv.host, srv.port), timeout=30) as s:
        for _ in range(times):
            s.sendall(b"".join(b"mg k%d q\r\n" % k for k in keys) + b"mn\r\n")
            reply = b""
            while not reply.endswith(b"MN\r\n"):
                reply += s.recv(1 << 16)


def test_real_server_keys_just_read_come_first(dumper_bin: Path, memcached, tmp_path: Path) -> None:
    """memcached marks an item read once `fetch=yes`, and a second read makes it active with a fresh
    `la`: either way those keys lead the dump, in every release of the matrix."""
    srv: MemcachedServer = memcached()
    load_numbered(srv, 3000, value_size=100)
    hot = list(range(7, 3000, 30))  # 100 keys
    _fetch(srv, hot, 2)
    r = run_dump(dumper_bin, srv, tmp_path / "o", "--order", "recency", *SMALL_LISTS)
    assert r.returncode == 0, r.stderr
    d = read_dump(tmp_path / "o")
    assert len(d.records) == 3000
    assert {int(rec.key[1:]) for rec in d.records[: len(hot)]} == set(hot)


def _crawl_sleep(srv: MemcachedServer) -> int:
    with socket.create_connection((srv.host, srv.port), timeout=10) as s:
        s.sendall(b"stats settings\r\n")
        reply = b""
        while not reply.endswith(b"END\r\n"):
            reply += s.recv(1 << 16)
    [line] = [ln for ln in reply.split(b"\r\n") if ln.startswith(b"STAT lru_crawler_sleep ")]
    return int(line.split()[2])


def test_adaptive_dump_is_complete_reports_its_guard_and_restores_the_crawl_pace(
    dumper_bin: Path, memcached, tmp_path: Path
) -> None:
    srv: MemcachedServer = memcached()
    load_numbered(srv, 5000, value_size=200)
    before = _crawl_sleep(srv)
    trace = tmp_path / "guard.jsonl"
    r = subprocess.run(
        dump_cmd(dumper_bin, srv, tmp_path / "o", "--adaptive", "--crawl-sleep-us", "250", "--threads", "2"),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "CACHEWARM_GUARD_TRACE": str(trace)},
    )
    assert r.returncode == 0, r.stderr
    assert _crawl_sleep(srv) == before  # restored, whatever the guard set meanwhile
    d = read_dump(tmp_path / "o")
    assert len(d.by_key()) == 5000
    done = json.loads((tmp_path / "o" / "DONE").read_text())
    guard = done["source_protection"]
    assert guard["adaptive"] is True and guard["crawl_sleep_original_us"] == before
    assert guard["probe_baseline_us"] > 0 and guard["probe_threshold_us"] >= guard["probe_baseline_us"]
    assert guard["crawl_sleep_max_us"] >= 250
    # Issue 22: the harm report — its probes with no dump (the second before it) and during it.
    assert guard["probes_before"] > 0 and 0 < guard["probe_p50_before_us"] <= guard["probe_p99_before_us"]
    assert guard["probes_during"] >= 0 and guard["backed_off_ms"] >= 0 and guard["paused_ms"] >= 0
    if guard["probes_during"]:
        during = [guard[k] for k in ("probe_p50_during_us", "probe_p99_during_us", "probe_max_during_us")]
        assert 0 < during[0] <= during[1] <= during[2]
    assert guard["probe_p99_ratio"] is None or guard["probe_p99_ratio"] > 0
    # memcached's own view of the run: it served the dump (CPU seconds), yields counted (>= 0).
    assert guard["server_cpu_s"] >= 0 and guard["server_conn_yields"] >= 0
    lines = [json.loads(ln) for ln in r.stdout.splitlines() if ln.startswith("{")]
    assert lines[-1]["event"] == "done" and "backing_off" in lines[-1] and "limit_items_per_s" in lines[-1]
    assert lines[-1]["probe_baseline_us"] > 0 and "probe_p99_us" in lines[-1] and "backed_off_ms" in lines[-1]
    # The guard's trace (CACHEWARM_GUARD_TRACE, bench/source_harm.py --trace-dir): a JSON line per
    # decision and window; the batches stay short (at most 32 keys, 64 KiB: pace_controller.h).
    decisions = [json.loads(ln) for ln in trace.read_text().splitlines()]
    assert all(d["what"] in ("backoff", "window", "change") for d in decisions)
    assert all(4 <= d["batch"] <= 32 and d["batch_bytes"] <= 64 << 10 for d in decisions)
    assert decisions == [] or decisions[-1]["backoffs"] == guard["backoffs"]
