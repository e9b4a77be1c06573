"""cachewarm-dump against real memcached servers: content, CLI, failure modes."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from cachewarm.testing.memcached import MemcachedServer

from tests.dumper.dumputil import (
    Item,
    assert_accounted,
    leftovers,
    load,
    load_numbered,
    progress_lines,
    read_dump,
    run_dump,
)


def test_every_kind_of_item_roundtrips(dumper_bin: Path, memcached, tmp_path: Path) -> None:
    srv: MemcachedServer = memcached(memory_mb=128, max_item_size="8m")
    big = os.urandom(5 * 1024 * 1024)  # larger than --buffer-size: streamed
    future = int(time.time()) + 40 * 86400  # > 30 days: memcached reads it as absolute
    items = [
        Item(b"plain", b"hello", 0, 0),
        Item(b"flags-max", b"v", 4294967295, 0),
        Item(b"zero-len", b"", 5, 0),
        Item(b"ttl-rel", b"t", 1, 3600),
        Item(b"ttl-abs", b"a", 2, future),
        Item(b"tricky", b"VALUE x 0 1\r\nEN\r\nEND\r\nMN\r\nVA 5 f0\r\n", 3, 0),
        Item(b"\x00bin key\xff", b"\x00\xff\r\n", 6, 0),
        Item(b"pct%20and+plus", b"url", 7, 0),
        Item(b"k" * 250, b"long key", 8, 0),
        Item(b"\x01" * 186, b"longest binary key", 9, 0),
        Item(b"big", big, 10, 0),
    ] + [Item(b"n%d" % i, os.urandom(i % 3000), i, 0) for i in range(3000)]
    load(srv, items)
    out = tmp_path / "out"
    t0 = int(time.time())
    r = run_dump(
        dumper_bin,
        srv,
        out,
        "--buffer-size",
        "256k",
        "--key-file-size",
        "8k",
        "--data-file-size",
        "64k",
        "--batch",
        "37",
        "--node-id",
        "src.1",
    )
    t1 = int(time.time())
    assert r.returncode == 0, r.stderr
    dump = read_dump(out)
    got = dump.by_key()
    assert set(got) == {it.key for it in items}
    for it in items:
        rec = got[it.key]
        assert (rec.value, rec.flags) == (it.value, it.flags), it.key[:40]
        if it.ttl == 0:
            assert rec.exptime == -1
        elif it.ttl == future:
            # mg reports the remaining TTL on memcached's 1-second clock: +-1 s is inherent.
            assert abs(rec.exptime - future) <= 1
        else:
            assert t0 + it.ttl - 2 <= rec.exptime <= t1 + it.ttl + 1
    assert dump.manifest is not None
    m = dump.manifest
    assert m.node == "src.1" and len(m.files) > 10
    assert m.totals["misses"] == 0 and m.totals["keys_listed"] == len(items)
    assert m.source["curr_items_before"] == len(items)
    assert all(f.name.startswith("src.1-") for f in m.files)
    assert m.raw["complete"] is True and m.raw["incomplete_reason"] is None
    comp = assert_accounted(m)
    assert comp["records"] == len(items) and comp["duplicates_dropped"] == 0 and comp["undumped"] == 0
    assert m.raw["crawl"]["modes"] == ["hash"] and m.raw["crawl"]["busy_retries"] == 0
    lines = progress_lines(r.stdout)
    assert lines[-1]["event"] == "done" and lines[-1]["items"] == len(items)
    assert leftovers(out) == []


def test_min_ttl_skips_short_lived_items(dumper_bin: Path, memcached, tmp_path: Path) -> None:
    srv = memcached()
    load(srv, [Item(b"short%d" % i, b"s", 0, 60) for i in range(50)])
    load(srv, [Item(b"long%d" % i, b"l", 0, 7200) for i in range(50)])
    load(srv, [Item(b"never%d" % i, b"n", 0, 0) for i in range(50)])
    r = run_dump(dumper_bin, srv, tmp_path / "o", "--min-ttl", "600")
    assert r.returncode == 0, r.stderr
    dump = read_dump(tmp_path / "o")
    keys = {k.decode() for k in dump.by_key()}
    assert keys == {f"long{i}" for i in range(50)} | {f"never{i}" for i in range(50)}
    assert dump.manifest is not None and dump.manifest.totals["skipped_min_ttl"] == 50
    comp = assert_accounted(dump.manifest)
    assert comp["skipped_min_ttl"] == 50 and dump.manifest.raw["complete"] is True


def test_rate_limit_still_dumps_everything(dumper_bin: Path, memcached, tmp_path: Path) -> None:
    srv = memcached()
    load_numbered(srv, 3000)
    r = run_dump(dumper_bin, srv, tmp_path / "o", "--max-items-per-second", "20000", "--threads", "3")
    assert r.returncode == 0, r.stderr
    assert len(read_dump(tmp_path / "o").by_key()) == 3000


def test_empty_server(dumper_bin: Path, memcached, tmp_path: Path) -> None:
    srv = memcached()
    r = run_dump(dumper_bin, srv, tmp_path / "o")
    assert r.returncode == 0, r.stderr
    dump = read_dump(tmp_path / "o")
    assert dump.records == [] and dump.manifest is not None and dump.manifest.files == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--threads", "0"], "--threads 0 is out of range 1..256"),
        (["--threads", "x"], "--threads: 'x' is not an integer"),
        (["--port", "70000"], "--port 70000 is out of range"),
        (["--buffer-size", "1k"], "--buffer-size 1k is out of range"),
        (["--batch", "0"], "--batch 0 is out of range"),
        (["--min-ttl", "-1"], "--min-ttl -1 is out of range"),
        (["--node-id", "a-b"], "--node-id 'a-b' must match"),
        (["--memory-limit", "16M", "--threads", "4"], "--memory-limit 16777216 is too small"),
        (["--bogus"], "unknown option --bogus"),
    ],
)
def test_bad_flags_are_named(dumper_bin: Path, tmp_path: Path, args: list[str], message: str) -> None:
    r = subprocess.run([str(dumper_bin), "--out", str(tmp_path / "o"), *args], capture_output=True, text=True)
    assert r.returncode == 2
    assert message in r.stderr
    assert not (tmp_path / "o").exists()


def test_help_and_missing_out(dumper_bin: Path) -> None:
    r = subprocess.run([str(dumper_bin), "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "--max-items-per-second" in r.stdout
    r = subprocess.run([str(dumper_bin)], capture_output=True, text=True)
    assert r.returncode == 2 and "--out DIR is required" in r.stderr


def test_unreachable_memcached_fails_loudly(dumper_bin: Path, tmp_path: Path) -> None:
    from cachewarm.testing.memcached import free_port

    port = free_port()
    r = subprocess.run(
        [str(dumper_bin), "--port", str(port), "--out", str(tmp_path / "o")], capture_output=True, text=True
    )
    assert r.returncode == 1
    assert f"127.0.0.1:{port}" in r.stderr and "no DONE" in r.stderr
    assert not (tmp_path / "o" / "DONE").exists()


def test_refuses_to_overwrite_or_mix_dumps(dumper_bin: Path, memcached, tmp_path: Path) -> None:
    srv = memcached()
    load_numbered(srv, 100)
    out = tmp_path / "o"
    assert run_dump(dumper_bin, srv, out).returncode == 0
    r = run_dump(dumper_bin, srv, out)
    assert r.returncode == 1 and "already holds a dump" in r.stderr
    r = run_dump(dumper_bin, srv, out, "--resume", "--node-id", "other")
    assert r.returncode == 1 and "holds a dump of node" in r.stderr
    # Resuming a finished dump is a no-op success.
    assert run_dump(dumper_bin, srv, out, "--resume").returncode == 0
    r = run_dump(dumper_bin, srv, tmp_path / "empty", "--resume")
    assert r.returncode == 1 and "no dump to resume" in r.stderr


def _slow_dump(dumper_bin: Path, srv: MemcachedServer, out: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [str(dumper_bin), "--port", str(srv.port), "--out", str(out), "--key-file-size", "16k",
         "--data-file-size", "16k", "--batch", "50", "--max-items-per-second", "20000",
         "--progress-interval", "0.05"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def _wait_for_items(proc: subprocess.Popen[str], n: int) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("{") and int(json.loads(line)["items"]) >= n:
            return
    pytest.fail("dumper ended before reaching the expected progress")


@pytest.mark.parametrize("how", ["kill", "restart"])
def test_memcached_dying_mid_dump_fails_loudly(dumper_bin: Path, memcached, tmp_path: Path, how: str) -> None:
    srv = memcached()
    load_numbered(srv, 20000, value_size=100)
    out = tmp_path / "o"
    proc = _slow_dump(dumper_bin, srv, out)
    _wait_for_items(proc, 2000)
    if how == "kill":
        srv.kill()
    else:
        srv.restart()
        load_numbered(srv, 10)
    _, err = proc.communicate(timeout=90)
    assert proc.returncode == 1, err
    assert "FAILED, no DONE written" in err
    assert "killed or restarted" in err or "restarted" in err
    assert not (out / "DONE").exists()
    read_dump(out, require_done=False)  # whatever was published verifies
    assert leftovers(out) == []


def test_items_expiring_mid_dump_are_counted_as_misses(dumper_bin: Path, memcached, tmp_path: Path) -> None:
    srv = memcached()
    load(srv, [Item(b"soon%d" % i, b"s", 0, 2) for i in range(3000)])
    load(srv, [Item(b"keep%d" % i, b"k", 0, 0) for i in range(3000)])
    # Rate-limited so the short-lived items expire between the crawl and their `mg`.
    r = run_dump(dumper_bin, srv, tmp_path / "o", "--max-items-per-second", "1500", "--batch", "50")
    assert r.returncode == 0, r.stderr
    dump = read_dump(tmp_path / "o")
    keys = set(dump.by_key())
    assert {b"keep%d" % i for i in range(3000)} <= keys
    m = dump.manifest
    assert m is not None
    assert m.totals["misses"] > 0, "expected some items to expire before they were fetched"
    assert m.totals["records"] + m.totals["misses"] == m.totals["keys_listed"]
    # Each miss is explained by the listing's exp: these items expired, none was deleted.
    comp = assert_accounted(m)
    assert comp["misses_expired"] == m.totals["misses"] and comp["misses_gone"] == 0
    assert m.raw["complete"] is True


def test_crawler_disabled_fails_loudly(dumper_bin: Path, memcached, tmp_path: Path) -> None:
    srv = memcached(extra_args=["-o", "no_lru_crawler"])
    load_numbered(srv, 10)
    r = run_dump(dumper_bin, srv, tmp_path / "o")
    assert r.returncode == 1
    assert "CLIENT_ERROR lru crawler disabled" in r.stderr and "no DONE" in r.stderr
    assert not (tmp_path / "o" / "DONE").exists()
