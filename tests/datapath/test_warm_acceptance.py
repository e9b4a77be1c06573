"""Issue 12's acceptance, end to end with the real dumper on each release: a mixed data set warms
exactly (values, flags, expiry within [source - 2 s, source]); oversize items into a `-I 1m` target
are skipped and named, and the target's live value under such a key survives."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from cachewarm.datapath.binproto import BinaryConnection, store_request
from cachewarm.datapath.wire import is_plain_key, meta_expressible
from cachewarm.exitcodes import ExitCode
from cachewarm.testing.memcached import MemcachedServer
from cachewarm.testing.populating import ClockWatch, expiries, expiry_within, fetch, listed_expiries

from tests.datapath.test_warm import put

CLI = [sys.executable, "-c", "from cachewarm.cli import run; run()"]
SPECIAL = bytes([0x00, 0x20, 0x0A, 0x0D, 0xFF])
MIB = 1 << 20


def warm(
    dumper: Path, src: MemcachedServer, dst: MemcachedServer, work: Path, *flags: str
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CACHEWARM_DUMP": str(dumper)}
    args = [
        "warm",
        "--source",
        src.address,
        "--target",
        dst.address,
        "--workdir",
        str(work),
        "--json",
        *flags,
    ]
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=300, env=env)


def mixed(now: int, longest: int) -> list[tuple[bytes, int, int, bytes]]:
    """(key, flags, T, value): binary keys 1..`longest` bytes, 0 B and multi-MiB values, flags 0 and
    2^32-1, TTL classes never / minutes / hours / > 30 days (absolute)."""
    ttls = [0, 120, 3 * 3600, now + 45 * 86400]
    out = []
    for i, n in enumerate([1, 2, 50, 100, 185, 186, 187, 200, 249, 250]):
        if n <= longest:
            key = (bytes([i]) + SPECIAL * 60)[:n]
            out.append((key, [0, 0xFFFFFFFF][i % 2], ttls[i % 4], b"bin-%d" % n))
    out += [
        (b"empty", 0, 0, b""),
        (b"multi-mib", 0xFFFFFFFF, 3600, bytes(range(256)) * (5 * 4096)),
        *[(b"bulk:%d" % i, [0, 0xFFFFFFFF][i % 2], ttls[i % 4], b"x" * (i % 500)) for i in range(2000)],
    ]
    return out


def load(srv: MemcachedServer, items: list[tuple[bytes, int, int, bytes]]) -> None:
    """Meta sets where a meta command can name the key, the binary protocol for the others."""
    put(srv, [it for it in items if meta_expressible(it[0])])
    long = [it for it in items if not meta_expressible(it[0])]
    if long:
        with BinaryConnection(srv.host, srv.port) as bc:
            res = bc.store([(store_request("set", k, v, f, t, i), v) for i, (k, f, t, v) in enumerate(long)])
        assert res.errors == 0, res.first_error


def check_exact(
    src: MemcachedServer,
    dst: MemcachedServer,
    items: list[tuple[bytes, int, int, bytes]],
    clocks: ClockWatch,
) -> None:
    keys = [k for k, *_ in items]
    got = fetch(dst, keys)
    for key, flags, _t, value in items:
        assert key in got and got[key].value == value and got[key].flags == flags, key
    slack = clocks.slack(src, dst)
    src_ahead, dst_ahead = clocks.ahead(src), clocks.ahead(dst)
    src_exp, dst_exp = expiries(src, keys, src_ahead), expiries(dst, keys, dst_ahead)
    # Keys only the binary protocol names: their expiry from metadump (absolute, the server's clock).
    src_exp.update(kv for kv in listed_expiries(src, src_ahead).items() if not meta_expressible(kv[0]))
    dst_exp.update(kv for kv in listed_expiries(dst, dst_ahead).items() if not meta_expressible(kv[0]))
    for key, _f, t, _v in items:
        if t == 0:
            assert src_exp[key] == dst_exp[key] == -1, key
        else:
            assert expiry_within(src_exp[key], dst_exp[key], slack), (key, src_exp[key], dst_exp[key], slack)


def test_a_mixed_data_set_warms_exactly(
    memcached, dumper_bin: Path, tmp_path: Path, warm_args: list[str]
) -> None:
    src = memcached(memory_mb=128, max_item_size="8m")
    dst = memcached(memory_mb=128, max_item_size="8m")
    clocks = ClockWatch(src, dst)
    items = mixed(int(time.time()), longest=186)
    load(src, items)
    clocks.join()
    r = warm(dumper_bin, src, dst, tmp_path / "w", *warm_args)
    assert r.returncode == 0, r.stderr[-3000:]
    s = json.loads(r.stdout.splitlines()[-1])
    assert s["ok"] and s["copied"] == len(items) and s["missing_in_target"] == 0
    check_exact(src, dst, items, clocks)


def test_a_mixed_data_set_with_keys_up_to_250_bytes_warms_exactly(
    memcached, dumper_bin: Path, tmp_path: Path, warm_args: list[str]
) -> None:
    src = memcached(memory_mb=128, max_item_size="8m")
    dst = memcached(memory_mb=128, max_item_size="8m")
    clocks = ClockWatch(src, dst)
    items = mixed(int(time.time()), longest=250)
    load(src, items)
    clocks.join()
    r = warm(dumper_bin, src, dst, tmp_path / "w", *warm_args)
    assert r.returncode == 0, r.stderr[-3000:]
    s = json.loads(r.stdout.splitlines()[-1])
    # Files: add mode writes every key with binary ADDs, counted as binary protocol are the keys no
    # meta command can name (the 4 long ones). The stream: every key that is not printable ASCII goes
    # by ADDQ (a failed `ms` would unlink the live value; the text `add` cannot carry such a key).
    stream = "--stream" in warm_args
    binary = sum(1 for k, *_ in items if not is_plain_key(k) and (stream or len(k) > 186))
    assert s["ok"] and s["populate"]["binary_protocol"] == binary >= 4
    check_exact(src, dst, items, clocks)


def test_oversize_into_a_smaller_target_keeps_the_live_value(
    memcached, dumper_bin: Path, tmp_path: Path, warm_args: list[str]
) -> None:
    src = memcached(memory_mb=64, max_item_size="4m")
    dst = memcached(memory_mb=64, max_item_size="1m")
    put(src, [(b"big", 1, 0, b"b" * (2 * MIB)), *[(b"k%d" % i, 0, 0, b"v") for i in range(500)]])
    put(dst, [(b"big", 2, 0, b"live value, written by live traffic")])
    r = warm(dumper_bin, src, dst, tmp_path / "w", *warm_args)
    assert r.returncode == ExitCode.INCOMPLETE
    assert "never sent" in r.stderr and "--accept-oversize" in r.stderr
    s = json.loads(r.stdout.splitlines()[-1])
    assert (s["copied"], s["populate"]["oversize"], s["missing_in_target"], s["ok"]) == (500, 1, 0, False)
    assert fetch(dst, [b"big"])[b"big"].value == b"live value, written by live traffic"
    report = [json.loads(ln) for ln in Path(s["populate"]["oversize_report"]).read_text().splitlines()]
    assert [(x["key"], x["value_bytes"]) for x in report] == [("big", 2 * MIB)]
    again = warm(dumper_bin, src, dst, tmp_path / "w", "--resume", "--accept-oversize", *warm_args)
    assert again.returncode == 0, again.stderr[-2000:]
    assert json.loads(again.stdout.splitlines()[-1])["ok"]
