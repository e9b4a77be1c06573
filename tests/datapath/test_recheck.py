"""The re-check (docs/reliability.md "Live traffic during the warm"): a delete, touch or increment a
client sends to both replicas during a warm is never undone by our copy, and a value a client writes
to the destination after our write is never deleted or overwritten. Real memcacheds (every release),
the real dumper (format 3) and the real populator (`cachewarm populate --source`, `cachewarm warm`).

The harmful race is an op that reaches the destination before our write of the key (the key is not
there yet: the op misses) and the source after the dumper read it. Each test makes exactly that race
by running the op on both servers between the dump and the populate; the live-traffic fault scenario
(tests/faults) runs it under real concurrency."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from cachewarm.datapath.binproto import BinaryConnection, store_request
from cachewarm.datapath.meta import Item, MetaConnection
from cachewarm.exitcodes import ExitCode
from cachewarm.testing.memcached import MemcachedServer
from cachewarm.testing.populating import clock_ahead, expiries

from tests.volume.conftest import BUCKET, local_s3  # noqa: F401  (the fixture, for --via-s3)

CLI = [sys.executable, "-c", "from cachewarm.cli import run; run()"]
N = 600
# A key of 200 bytes with no base64 form and a space: only the binary protocol names it.
LONG = b"long key " + bytes(0x80 + i % 128 for i in range(191))
# A key the text protocol cannot carry: base64 with `b`.
BIN = b"\x00b\xff"


def cli(args: list[str], dumper: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CACHEWARM_DUMP": str(dumper)}
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout, env=env)


def text(srv: MemcachedServer, *cmds: bytes) -> list[bytes]:
    """Each command's first reply line (incr, delete, touch, set)."""
    out = []
    with MetaConnection(srv.host, srv.port) as c:
        for cmd in cmds:
            c._send(cmd)
            out.append(c._readline())
    return out


def both(s: MemcachedServer, d: MemcachedServer, *cmds: bytes) -> None:
    """A replicated client's write: the same ops on both replicas."""
    text(s, *cmds)
    text(d, *cmds)


def load(src: MemcachedServer) -> None:
    cmds = [b"set k%d %d %d 6\r\nvalue%d\r\n" % (i, i, 0 if i % 2 else 3600, i % 10) for i in range(N)]
    cmds += [b"set ctr%d 0 0 2\r\n10\r\n" % i for i in range(20)]
    text(src, *cmds)
    with MetaConnection(src.host, src.port) as c:  # keys no text command carries
        c.send_batch(b"ms %b 3 b T0 F0 q\r\nbin\r\n" % base64.b64encode(BIN), 1)
        c.flush()
    with BinaryConnection(src.host, src.port) as bc:
        assert bc.store([(store_request("set", LONG, b"long", 0, 0, 1), b"long")]).errors == 0


def dump(src: MemcachedServer, dumper: Path, out: Path) -> None:
    r = subprocess.run(
        [str(dumper), "--host", src.host, "--port", str(src.port), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads((out / "DONE").read_text())["version"] == 3


def get(srv: MemcachedServer, keys: list[bytes]) -> dict[bytes, Item]:
    with MetaConnection(srv.host, srv.port) as c:
        return c.get_many(keys)


def populate(
    src: MemcachedServer, dst: MemcachedServer, out: Path, tmp: Path, dumper: Path, *extra: str
) -> subprocess.CompletedProcess[str]:
    return cli(
        [
            "populate",
            "--from",
            str(out),
            "--to",
            dst.address,
            "--source",
            src.address,
            "--state-file",
            str(tmp / "state.json"),
            "--node-key-format",
            "{host}:{port}",
            "--settle-seconds",
            "0.5",
            "--json",
            *extra,
        ],
        dumper,
    )


def summary(r: subprocess.CompletedProcess[str]) -> dict:
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_deletes_touches_and_increments_are_never_undone(
    memcached: Callable[..., MemcachedServer], dumper_bin: Path, tmp_path: Path
) -> None:
    src, dst = memcached(memory_mb=64), memcached(memory_mb=64)
    load(src)
    dump(src, dumper_bin, tmp_path / "d")
    deleted = [b"k%d" % i for i in range(0, 100, 3)]
    touched = [b"k%d" % i for i in range(1, 100, 3)]  # never expiring (odd) and 1 h (even) alike
    counters = [b"ctr%d" % i for i in range(20)]
    rewritten = [b"k%d" % i for i in range(200, 230)]
    both(src, dst, *[b"delete %b\r\n" % k for k in deleted])
    both(src, dst, *[b"touch %b 30\r\n" % k for k in touched])
    both(src, dst, *[b"incr %b 5\r\n" % k for k in counters])
    both(src, dst, *[b"set %b 1 0 5\r\nfresh\r\n" % k for k in rewritten])
    both(src, dst, b"md %b b\r\n" % base64.b64encode(BIN))
    r = populate(src, dst, tmp_path / "d", tmp_path, dumper_bin)
    assert r.returncode == 0, r.stderr[-2000:]
    s = summary(r)
    assert s["recheck"] == "on" and s["rechecked"] == s["stored"] > 0
    assert s["changed_at_source"] >= len(deleted) + len(touched) + len(counters)
    assert s["deleted_stale"] == s["changed_at_source"] and s["unsettled"] == 0
    got = get(dst, [*deleted, *touched, *counters, *rewritten, BIN, LONG])
    assert not any(k in got for k in [*deleted, BIN]), "a deleted key came back"
    assert got[LONG].value == b"long"  # re-checked by CAS (the binary protocol): unchanged, kept
    srcs = get(src, counters)
    for k in counters:  # never behind: absent, or the source's value
        assert k not in got or got[k].value == srcs[k].value == b"15"
    src_ends = expiries(src, touched, clock_ahead(src))
    ends = expiries(dst, touched, clock_ahead(dst))
    for k in touched:  # never outlives its source: gone, or ending no later
        assert k not in ends or (ends[k] != -1 and ends[k] <= src_ends[k] + 0.05), k
    assert all(got[k].value == b"fresh" for k in rewritten)  # the client's own writes, kept
    untouched = [b"k%d" % i for i in range(300, N)]
    assert len(get(dst, untouched)) == len(untouched)


def test_a_clients_write_after_ours_is_never_deleted_and_a_derived_value_is(
    memcached: Callable[..., MemcachedServer], dumper_bin: Path, tmp_path: Path
) -> None:
    """Changes on the source after the read, then writes a client makes on the destination after our
    write and before the re-check: a set reaching both (kept: it is the client's), an incr on our
    stale copy (deleted after the settle delay: it derives from a value the source no longer had)."""
    src, dst = memcached(memory_mb=64), memcached(memory_mb=64)
    load(src)
    dump(src, dumper_bin, tmp_path / "d")
    overwritten = [b"k%d" % i for i in range(10)]
    derived = [b"ctr%d" % i for i in range(10)]
    both(src, dst, *[b"incr %b 5\r\n" % k for k in derived])  # misses the destination: 15 at the source
    text(src, *[b"set %b 0 0 3\r\nold\r\n" % k for k in overwritten])  # changed at the source only so far
    proc = subprocess.Popen(
        [
            *CLI,
            "populate",
            "--from",
            str(tmp_path / "d"),
            "--to",
            dst.address,
            "--source",
            src.address,
            "--state-file",
            str(tmp_path / "state.json"),
            "--node-key-format",
            "{host}:{port}",
            "--settle-seconds",
            "3",
            "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "CACHEWARM_DUMP": str(dumper_bin)},
    )
    deadline = time.monotonic() + 60
    while len(get(dst, overwritten + derived)) < len(overwritten + derived):  # our copies are there
        assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        time.sleep(0.02)
    both(src, dst, *[b"set %b 0 0 6\r\nclient\r\n" % k for k in overwritten])
    both(src, dst, *[b"incr %b 1\r\n" % k for k in derived])  # source 16, destination 11 (stale + 1)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-2000:]
    s = json.loads(out.strip().splitlines()[-1])
    got = get(dst, overwritten + derived)
    assert all(got[k].value == b"client" for k in overwritten)
    assert not any(k in got for k in derived), "a counter derived from a stale copy was kept"
    assert s["client_overwrote"] >= len(overwritten) and s["unsettled"] == 0


def test_a_resume_rechecks_the_copies_a_killed_run_wrote(
    memcached: Callable[..., MemcachedServer], dumper_bin: Path, tmp_path: Path
) -> None:
    """Killed after writing and before its re-check: the resumed run's ADDs answer EXISTS for its own
    earlier copies (their CAS unknown); where the source changed they are compared and deleted."""
    src, dst = memcached(memory_mb=64), memcached(memory_mb=64)
    load(src)
    dump(src, dumper_bin, tmp_path / "d")
    deleted = [b"k%d" % i for i in range(0, 60, 2)]
    both(src, dst, *[b"delete %b\r\n" % k for k in deleted])
    args = [
        *CLI,
        "populate",
        "--from",
        str(tmp_path / "d"),
        "--to",
        dst.address,
        "--source",
        src.address,
        "--state-file",
        str(tmp_path / "state.json"),
        "--node-key-format",
        "{host}:{port}",
        "--json",
    ]
    env = {**os.environ, "CACHEWARM_DUMP": str(dumper_bin)}
    proc = subprocess.Popen(
        [*args, "--settle-seconds", "60"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    deadline = time.monotonic() + 60
    while int(dst.stats()["curr_items"]) < N:
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.02)
    assert len(get(dst, deleted)) == len(deleted)  # the stale copies, written
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    r = subprocess.run(
        [*args, "--settle-seconds", "0.5"], capture_output=True, text=True, env=env, timeout=120
    )
    assert r.returncode == 0, r.stderr[-2000:]
    s = summary(r)
    assert not get(dst, deleted), "a deleted key came back after the resume"
    assert s["deleted_stale"] >= len(deleted) and s["unsettled"] == 0


def test_without_a_source_add_mode_is_refused_unless_accepted(
    memcached: Callable[..., MemcachedServer], dumper_bin: Path, tmp_path: Path
) -> None:
    src, dst = memcached(memory_mb=64), memcached(memory_mb=64)
    load(src)
    dump(src, dumper_bin, tmp_path / "d")
    base = [
        "populate",
        "--from",
        str(tmp_path / "d"),
        "--to",
        dst.address,
        "--json",
        "--node-key-format",
        "{host}:{port}",
    ]
    r = cli([*base, "--state-file", str(tmp_path / "s1.json")], dumper_bin)
    assert r.returncode == ExitCode.USAGE, r.stderr
    assert r.stderr.startswith("error: ") and "--source" in r.stderr and "--accept-no-recheck" in r.stderr
    assert int(dst.stats()["curr_items"]) == 0  # nothing written before the refusal
    r = cli([*base, "--state-file", str(tmp_path / "s2.json"), "--accept-no-recheck"], dumper_bin)
    assert r.returncode == 0, r.stderr
    s = summary(r)
    assert s["recheck"] == "off" and any("--source" in a for a in s["accepted"])


def test_cas_off_or_an_ascii_only_destination_is_refused_unless_accepted(
    memcached: Callable[..., MemcachedServer], dumper_bin: Path, tmp_path: Path
) -> None:
    src = memcached(memory_mb=64)
    load(src)
    dump(src, dumper_bin, tmp_path / "d")
    for n, extra in enumerate((["-C"], ["-B", "ascii"])):
        dst = memcached(memory_mb=64, extra_args=extra)
        r = populate(src, dst, tmp_path / "d", tmp_path / f"r{n}", dumper_bin)
        assert r.returncode == ExitCode.USAGE, r.stderr
        assert (
            r.stderr.startswith("error: ")
            and ("CAS off" if extra == ["-C"] else "binary protocol") in r.stderr
        )
        assert int(dst.stats()["curr_items"]) == 0
    cas_off = memcached(memory_mb=64, extra_args=["-C"])
    r = populate(cas_off, memcached(memory_mb=64), tmp_path / "d", tmp_path / "r3", dumper_bin)
    assert r.returncode == ExitCode.USAGE and "source" in r.stderr and "CAS off" in r.stderr


@pytest.mark.parametrize("via", ["files", "s3"])
def test_a_warm_under_deletes_touches_and_increments_exits_0(
    memcached: Callable[..., MemcachedServer],
    dumper_bin: Path,
    tmp_path: Path,
    via: str,
    request: pytest.FixtureRequest,
) -> None:
    """`cachewarm warm` (and `--via-s3`: the same populator) while a client deletes, touches and
    increments on both replicas (the populate slowed so that some ops land before our copy, some
    after): nothing undone, and the target check does not count the application's deletes and
    touches as missing (exit 0)."""
    src, dst = memcached(memory_mb=64), memcached(memory_mb=64)
    load(src)
    env = {**os.environ, "CACHEWARM_DUMP": str(dumper_bin)}
    s3: list[str] = []
    if via == "s3":
        local = request.getfixturevalue("local_s3")
        env.update(local.env())
        s3 = ["--via-s3", f"s3://{BUCKET}/recheck", "--s3-endpoint-url", local.url, "--data-file-size", "64k"]
    proc = subprocess.Popen(
        [
            *CLI,
            "warm",
            *("--source", src.address, "--target", dst.address, "--workdir", str(tmp_path / "w")),
            *("--target-max-items-per-second", "300", "--settle-seconds", "1", "--json", *s3),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    deadline = time.monotonic() + 60
    while not list((tmp_path / "w").rglob("DONE")):  # read: every key's copy is still to come or coming
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    deleted = [b"k%d" % i for i in range(0, N, 5)]
    touched = [b"k%d" % i for i in range(1, N, 5)]
    counters = [b"ctr%d" % i for i in range(20)]
    for i in range(0, len(deleted), 20):  # spread over the populate
        both(src, dst, *[b"delete %b\r\n" % k for k in deleted[i : i + 20]])
        both(src, dst, *[b"touch %b 3\r\n" % k for k in touched[i : i + 20]])
        both(src, dst, *[b"incr %b 1\r\n" % k for k in counters])
        time.sleep(0.1)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    s = json.loads(out.strip().splitlines()[-1])
    assert s["ok"] and s["missing_in_target"] == 0 and s["populate"]["recheck"] == "on", s
    got = get(dst, [*deleted, *touched, *counters])
    assert not any(k in got for k in deleted), "a deleted key came back"
    srcs = get(src, counters)
    assert all(k not in got or got[k].value == srcs[k].value for k in counters), "a counter went back"
    # The source first: a copy ends no later than its source, so one the source no longer holds is gone.
    src_ends = expiries(src, touched, clock_ahead(src))
    ends = expiries(dst, touched, clock_ahead(dst))
    assert all(k not in ends or (ends[k] != -1 and ends[k] <= src_ends.get(k, 0) + 0.05) for k in touched)


def test_the_target_check_looks_again_at_a_delete_that_reached_the_target_first(
    memcached: Callable[..., MemcachedServer], dumper_bin: Path, tmp_path: Path
) -> None:
    """A client's delete reaches the target as the populate ends and the source half a second later
    (inside --settle-seconds): the check may look the key up on the target after the delete and on
    the source before it. A key missing there is looked at again after the settle delay, on both
    sides: the application's delete, not a miss (exit 0)."""
    src, dst = memcached(memory_mb=64), memcached(memory_mb=64)
    load(src)
    env = {**os.environ, "CACHEWARM_DUMP": str(dumper_bin)}
    out = tmp_path / "warm.out"
    argv = [*CLI, "warm", "--source", src.address, "--target", dst.address, "--workdir", str(tmp_path / "w")]
    with out.open("wb") as f:
        proc = subprocess.Popen([*argv, "--settle-seconds", "1.5", "--json"], stdout=f, env=env)
    deadline = time.monotonic() + 120
    while b'"event": "done"' not in out.read_bytes() and b'"event":"done"' not in out.read_bytes():
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.005)
    deleted = [b"k%d" % i for i in range(0, N, 3)]
    text(dst, *[b"delete %b\r\n" % k for k in deleted])
    time.sleep(0.5)
    text(src, *[b"delete %b\r\n" % k for k in deleted])
    assert proc.wait(timeout=120) == 0, out.read_text()[-2000:]
    s = json.loads(out.read_text().strip().splitlines()[-1])
    assert s["ok"] and s["missing_in_target"] == 0, s
    assert not get(dst, deleted)
