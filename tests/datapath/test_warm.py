"""Source -> cachewarm-dump -> populator -> target with real memcached servers: `warm`, `verify`, `demo`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cachewarm.datapath.meta import MetaConnection
from cachewarm.datapath.wire import wire_key
from cachewarm.exitcodes import ExitCode
from cachewarm.testing.memcached import MemcachedServer, free_port
from cachewarm.testing.populating import ClockWatch, expiries, expiry_within, fetch

from tests.conftest import DEFAULT_VERSION

CLI = [sys.executable, "-c", "from cachewarm.cli import run; run()"]
BIG = bytes(range(256)) * (5 * 4096)  # 5 MiB


def run(args: list[str], dumper: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CACHEWARM_DUMP": str(dumper)}
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout, env=env)


def put(srv: MemcachedServer, items: list[tuple[bytes, int, int, bytes]]) -> None:
    """(key, flags, T, value) with quiet meta sets; T > 30 days is an absolute time."""
    c = MetaConnection(srv.host, srv.port)
    c.connect()
    buf = bytearray()
    for key, flags, ttl, value in items:
        tok, b = wire_key(key)
        buf += b"ms %b %d%b T%d F%d q\r\n" % (tok, len(value), b, ttl, flags) + value + b"\r\n"
    c.send_batch(buf, len(items))
    t = c.flush()
    c.close()
    assert t.errors == 0 and t.not_stored == 0, t.first_error


def edge_items() -> list[tuple[bytes, int, int, bytes]]:
    now = int(time.time())
    return [
        (b"plain", 0, 0, b"never expires"),
        (b"maxflags", 0xFFFFFFFF, 0, b"all 32 flag bits"),
        (b"empty", 3, 0, b""),
        (b"big", 4, 0, BIG),
        (b"short", 5, 120, b"two minutes"),
        (b"long", 6, now + 60 * 86400, b"sixty days, absolute"),
        (b"bin\x00\xff\r\n key", 7, 0, b"binary key"),
        (b"tricky", 8, 0, b"VA 5 f1\r\nEN\r\nEND\r\nMN\r\n"),
        *[(b"bulk:%d" % i, i, 0 if i % 2 else 3600, b"x" * (i % 700)) for i in range(3000)],
    ]


def test_round_trip_edge_cases(memcached, dumper_bin: Path, tmp_path: Path, warm_args: list[str]) -> None:
    src = memcached(memory_mb=128, max_item_size="8m")
    dst = memcached(memory_mb=128, max_item_size="8m")
    clocks = ClockWatch(src, dst)
    items = edge_items()
    put(src, items)
    clocks.join()
    r = run(
        [
            "warm",
            "--source",
            src.address,
            "--target",
            dst.address,
            "--workdir",
            str(tmp_path / "w"),
            *warm_args,
        ],
        dumper_bin,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "warm OK" in r.stdout and "target check" in r.stdout
    got = fetch(dst, [k for k, *_ in items])
    assert len(got) == len(items)
    for key, flags, _ttl, value in items:
        assert got[key].value == value and got[key].flags == flags, key
    # Issue 12/21: each item expires on the target within [its expiry on the source - EXPIRY_SLACK,
    # that expiry], each read on its server's own clock (never: never).
    slack = clocks.slack(src, dst)
    src_exp = expiries(src, list(got), clocks.ahead(src))
    dst_exp = expiries(dst, list(got), clocks.ahead(dst))
    for key, _flags, ttl, _value in items:
        if ttl == 0:
            assert src_exp[key] == dst_exp[key] == -1, key
        else:
            assert expiry_within(src_exp[key], dst_exp[key], slack), (key, src_exp[key], dst_exp[key], slack)
    v = run(["verify", "--source", src.address, "--target", dst.address, "--json"], dumper_bin)
    assert v.returncode == 0, v.stdout + v.stderr
    rep = json.loads(v.stdout)
    assert rep["ok"] and rep["checked"] == len(items)


def test_warm_keeps_fresher_target_values_and_reports(
    memcached, dumper_bin: Path, tmp_path: Path, warm_args: list[str]
) -> None:
    src = memcached(memory_mb=64)
    dst = memcached(memory_mb=64)
    put(src, [(b"k%d" % i, 1, 0, b"old") for i in range(1000)])
    put(dst, [(b"k7", 2, 0, b"fresher, written by live traffic")])
    r = run(
        [
            "warm",
            "--source",
            src.address,
            "--target",
            dst.address,
            "--workdir",
            str(tmp_path / "w"),
            "--json",
            *warm_args,
        ],
        dumper_bin,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    s = json.loads(r.stdout.strip().splitlines()[-1])
    assert (s["copied"], s["already_present"], s["items_dumped"], s["missing_in_target"]) == (999, 1, 1000, 0)
    assert fetch(dst, [b"k7"])[b"k7"].value == b"fresher, written by live traffic"
    # verify sees the difference the add mode kept on purpose and says so.
    v = run(["verify", "--source", src.address, "--target", dst.address], dumper_bin)
    assert v.returncode == ExitCode.INCOMPLETE
    assert "k7: value (3 bytes vs 32) and flags (1 vs 2) differ" in v.stdout  # both, the key as text


def test_warm_into_several_targets(memcached, dumper_bin: Path, tmp_path: Path, warm_args: list[str]) -> None:
    src = memcached(memory_mb=64)
    dsts = [memcached(memory_mb=64) for _ in range(3)]
    put(src, [(b"user:%d" % i, i, 0, b"v%d" % i) for i in range(3000)])
    targets = ",".join(d.address for d in dsts)
    fmt = ["--node-key-format", "{host}:{port}"]
    r = run(
        [
            "warm",
            "--source",
            src.address,
            "--target",
            targets,
            "--workdir",
            str(tmp_path / "w"),
            *fmt,
            *warm_args,
        ],
        dumper_bin,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    counts = [int(d.stats()["curr_items"]) for d in dsts]
    assert sum(counts) == 3000 and min(counts) > 500
    v = run(["verify", "--source", src.address, "--target", targets, *fmt], dumper_bin)
    assert v.returncode == 0, v.stdout


@pytest.mark.memcached_versions(DEFAULT_VERSION)  # no source at all: the release does not matter
def test_warm_fails_clearly_when_the_source_is_down(
    dumper_bin: Path, memcached, tmp_path: Path, warm_args: list[str]
) -> None:
    dst = memcached(memory_mb=16)
    r = run(
        [
            "warm",
            "--source",
            f"127.0.0.1:{free_port()}",
            "--target",
            dst.address,
            "--workdir",
            str(tmp_path / "w"),
            *warm_args,
        ],
        dumper_bin,
        timeout=120,
    )
    # Checked before the dumper starts: one line naming the source, the exit code of "unreachable".
    assert r.returncode == ExitCode.UNREACHABLE
    assert r.stderr.startswith("error: source 127.0.0.1:") and "unreachable" in r.stderr, r.stderr


@pytest.mark.memcached_versions(DEFAULT_VERSION)  # refused before any server is asked
def test_warm_refuses_a_used_workdir(
    memcached, dumper_bin: Path, tmp_path: Path, warm_args: list[str]
) -> None:
    src = memcached(memory_mb=16)
    dst = memcached(memory_mb=16)
    used = tmp_path / "w" / ("stream" if warm_args else "dump")
    used.mkdir(parents=True)
    (used / "leftover").write_text("x")
    r = run(
        [
            "warm",
            "--source",
            src.address,
            "--target",
            dst.address,
            "--workdir",
            str(tmp_path / "w"),
            *warm_args,
        ],
        dumper_bin,
    )
    assert r.returncode == 2 and "already holds a dump" in r.stderr  # a setting error


def test_demo_small(dumper_bin: Path) -> None:
    r = run(["demo", "--items", "20000"], dumper_bin)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "demo OK" in r.stdout and "verify OK: 20,000 keys compared" in r.stdout


@pytest.mark.parametrize("bad", ["--target nohost:0", "--target x;y:1"])
def test_warm_bad_flags(bad: str, dumper_bin: Path, tmp_path: Path, warm_args: list[str]) -> None:
    r = run(
        ["warm", "--source", "127.0.0.1:1", *bad.split(), "--workdir", str(tmp_path), *warm_args], dumper_bin
    )
    assert r.returncode == 2 and "--target" in r.stderr


def test_warm_check_sample_compares_values_with_the_source(
    memcached, dumper_bin: Path, tmp_path: Path, warm_args: list[str]
) -> None:
    """--check-sample N: besides the presence of every key, about N keys' value, flags and TTL are
    compared with the source; the same items compare equal. A sample comes only from the kept
    lookups (the fallback walk gives none): so the files path used them, not the walk."""
    src = memcached(memory_mb=64)
    dst = memcached(memory_mb=64)
    put(src, [(b"k%d" % i, i, 0 if i % 2 else 3600, b"v%d" % i) for i in range(3000)])
    argv = ["warm", "--source", src.address, "--target", dst.address, "--workdir", str(tmp_path / "w")]
    r = run([*argv, "--json", "--check-sample", "300", *warm_args], dumper_bin)
    assert r.returncode == 0, r.stderr[-3000:]
    s = json.loads(r.stdout.strip().splitlines()[-1])
    assert s["checked_in_target"] == 3000 and s["missing_in_target"] == 0
    assert 200 <= s["sample_compared"] <= 300 and s["sample_different"] == 0
    assert not (tmp_path / "w" / "probes").exists()  # the kept lookups go after the check


def test_warm_fails_when_the_target_cannot_hold_everything(
    memcached, dumper_bin: Path, tmp_path: Path, warm_args: list[str]
) -> None:
    src = memcached(memory_mb=64)
    dst = memcached(memory_mb=4)  # evicts: the populate itself succeeds, the target check must not
    put(src, [(b"k%d" % i, 0, 0, b"x" * 2000) for i in range(10_000)])
    r = run(
        [
            "warm",
            "--source",
            src.address,
            "--target",
            dst.address,
            "--workdir",
            str(tmp_path / "w"),
            *warm_args,
        ],
        dumper_bin,
    )
    assert r.returncode == ExitCode.INCOMPLETE
    assert "warm FAILED" in r.stdout and "evicted" in r.stdout
    assert "error: the target is missing" in r.stderr


def test_warm_resume_of_a_finished_warm_is_a_no_op(
    memcached, dumper_bin: Path, tmp_path: Path, warm_args: list[str]
) -> None:
    src = memcached(memory_mb=16)
    dst = memcached(memory_mb=16)
    put(src, [(b"k%d" % i, 0, 0, b"x") for i in range(100)])
    args = [
        "warm",
        "--source",
        src.address,
        "--target",
        dst.address,
        "--workdir",
        str(tmp_path / "w"),
        "--json",
        *warm_args,
    ]
    first = run(args, dumper_bin)
    assert first.returncode == 0, first.stderr[-2000:]
    again = run([*args, "--resume"], dumper_bin)
    assert again.returncode == 0, again.stderr[-2000:]
    s = json.loads(again.stdout.strip().splitlines()[-1])
    assert (s["copied"], s["items_dumped"], s["missing_in_target"]) == (100, 100, 0)
