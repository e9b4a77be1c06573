"""Never longer across memcached's clock moves (docs/reliability.md "How a TTL is carried").

memcached keeps time on a 1-s timer re-armed after each tick: its clock slips (~1-3 ms a second, more on
a loaded host), jumps a whole second ahead when the slip passes one, and a stalled main thread moves
its tick to wherever it resumes. Each scenario judges every copy against its source with both servers'
clocks measured after the warm, and excuses no move of the source's clock (the dumper runs beside it
and moves every expiry by its clock's ceiling): a copy ending later than its source by more than the
tests' reading slack is a failure, whatever the source's clock did during the warm.

- skewed clocks: the source or the destination 600 s ahead or behind (faketime), files and stream, in
  one go or killed mid-dump and `--resume`d — trials cycle through the four skews;
- a source clock jumped 0.8 s ahead mid-warm (the jump memcached makes on its own every few minutes,
  made here by stopping it and resuming it at chosen moments: `_stall_to`), during the dump, or between
  a killed dump and its `--resume`;
- keys only the listing gave a TTL (200 bytes holding a space, '\\n' or NUL): touched or gat'd to 30 s on
  the source between the listing and the fetch, never copied with the listing's TTL (issue 34: 100 of
  100 outlived their source, exit 0).
"""

from __future__ import annotations

import json
import math
import os
import signal
import socket
import struct
import subprocess
import time
from pathlib import Path

import pytest
from cachewarm.testing.memcached import MemcachedServer
from cachewarm.testing.populating import (
    READ_SLACK,
    ClockWatch,
    clock_and_ceiling,
    expiries,
    listed_expiries,
)

from tests.dumper.dumputil import Item, load, load_binary_protocol
from tests.faults.harness import CLI, Tally, kill9, survivors, trials, wait_until
from tests.faults.test_exactness_faults import faketime

SKEWS = (("source", 600), ("destination", -600), ("source", -600), ("destination", 600))
# Slow enough that a dump can be killed, or its source stopped, while it runs (~1.5 s of fetching).
SLOW = ["--source-max-items-per-second", "1500", "--data-file-size", "16k"]


def _items(n: int) -> list[Item]:
    """TTLs of 100-150 s (relative), a fifth never expiring, a tenth absolute (40 days)."""
    far = int(time.time()) + 40 * 86400
    out = []
    for i in range(n):
        ttl = 0 if i % 5 == 0 else far if i % 10 == 1 else 100 + i % 51
        out.append(Item(b"clk:%d" % i, b"v%d-" % i + b"x" * 60, i, ttl))
    return out


def _warm(src: MemcachedServer, dst: MemcachedServer, work: Path, warm_mode: str, *extra: str) -> list[str]:
    return [
        *CLI,
        "warm",
        *("--source", src.address, "--target", dst.address, "--workdir", str(work)),
        "--json",
        *(["--stream"] if warm_mode == "stream" else []),
        *extra,
    ]


def _started(work: Path, warm_mode: str) -> bool:
    """The dump is fetching values: a data file published, or the stream's first part out."""
    if warm_mode == "stream":
        return any(p.stat().st_size > 0 for p in work.rglob("STREAMED"))
    return any(work.rglob("*.cwd"))


def _listed(work: Path) -> bool:
    """The dump's listing is complete (its key lists published)."""
    return any(work.rglob("CRAWLED"))


def _interrupted_warm(cmd: list[str], work: Path, warm_mode: str, t: Tally, trial: int) -> bool:
    """Starts the warm, kills it (and its dumper) once values are being fetched; False if it ended first."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if not wait_until(lambda: _started(work, warm_mode) or proc.poll() is not None, timeout=60):
        t.note(f"trial {trial}: the dump never started")
    ended = proc.poll() is not None
    survivors(kill9(proc), grace=0.0)
    return not ended


def _judge(
    t: Tally,
    trial: int,
    src: MemcachedServer,
    dst: MemcachedServer,
    keys: list[bytes],
    clocks: ClockWatch,
    before: list[float],
) -> None:
    """Every copy ends never after its source, on both servers' clocks as they stand now: READ_SLACK
    (the tests' reading) and the destination's own slip since it was measured before the warm (its
    timekeeping after a copy is written: docs/reliability.md, what remains), nothing for the source's
    clock; at most the slack ClockWatch allows before it. How much before its source each copy ends
    goes into `before`."""
    slack = clocks.slack(src, dst)
    src_end = expiries(src, keys, clocks.ahead(src))
    dst_end = expiries(dst, keys, clocks.ahead(dst))
    for k in keys:
        if k not in src_end:
            continue
        if k not in dst_end:
            t.lost += 1
            if t.lost < 4:
                t.note(f"trial {trial}: {k!r} missing at the destination")
            continue
        s, d = src_end[k], dst_end[k]
        if s == -1 or d == -1:
            if s != d:
                t.corrupt += 1
                t.note(f"trial {trial}: {k!r} never expires on one side only ({s}, {d})")
            continue
        before.append(s - d)
        if d > s + slack.late + READ_SLACK:
            t.corrupt += 1
            if t.corrupt < 4:
                t.note(f"trial {trial}: {k!r} ends {d - s:+.3f} s after its source {slack.why}")
        elif d < s - slack.early - READ_SLACK:
            t.corrupt += 1
            if t.corrupt < 4:
                t.note(
                    f"trial {trial}: {k!r} ends {s - d:.3f} s before its source (allowed {slack.early:.3f})"
                )


@pytest.mark.parametrize("resume", [False, True], ids=["once", "resumed"])
def test_skewed_clocks_no_copy_ends_after_its_source(
    memcached_binary: str, tmp_path: Path, tally, warm_mode: str, resume: bool
) -> None:
    t = tally(
        f"clocks ±600 s (source, destination) → no copy ends after its source ({warm_mode}, "
        f"{'killed and --resumed' if resume else 'one go'})"
    )
    early: list[float] = []
    for trial in range(trials()):
        role, shift = SKEWS[trial % len(SKEWS)]
        skewed = {"launcher": faketime(f"{shift:+d}s")}
        src = MemcachedServer(
            memory_mb=64, binary=memcached_binary, **(skewed if role == "source" else {})
        ).start()
        dst = MemcachedServer(
            memory_mb=64, binary=memcached_binary, **(skewed if role != "source" else {})
        ).start()
        try:
            clocks = ClockWatch(src, dst)
            items = _items(2000)
            load(src, items)
            clocks.join()
            work = tmp_path / f"t{trial}"
            cmd = _warm(src, dst, work, warm_mode, *SLOW)
            if resume:
                _interrupted_warm(cmd, work, warm_mode, t, trial)
                cmd = [*cmd, "--resume"]
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            t.trials += 1
            if r.returncode != 0:
                t.lost += len(items)
                why = r.stderr.strip()[-300:]
                t.note(f"trial {trial} ({role} {shift:+d} s): warm exited {r.returncode}: {why}")
                continue
            _judge(t, trial, src, dst, [it.key for it in items], clocks, early)
        finally:
            src.stop()
            dst.stop()
    _print_early(early)
    t.check()


def _print_early(early: list[float]) -> None:
    """How much before its source a copy ended, over every copy of every trial (seconds)."""
    if early:
        early.sort()
        span = f"{early[0]:+.3f} .. {early[-1]:+.3f} s"
        print(f"  copies end {span} before their source (median {early[len(early) // 2]:.3f} s)")


def _stall_to(srv: MemcachedServer, phase: float) -> None:
    """Stops the server (SIGSTOP: its main thread too) for 1.3 s or a little more and resumes it at
    `phase` of a second of the monotonic clock: its clock then ticks there. memcached's time is
    floor(monotonic at its tick) + a constant, so ticking at 0.95 its clock stands 0.95 s below its
    ceiling, at 0.15 only 0.15 s below: from the one to the other it jumps 0.8 s ahead (memcached's
    own slip makes that jump every few minutes). (Resumed within ~0.05 s after a whole second, measured
    here, the phase often stays where it was.)"""
    assert srv.proc is not None
    os.kill(srv.proc.pid, signal.SIGSTOP)
    try:
        wake = math.floor(time.monotonic() + 1.3) + phase
        time.sleep(max(0.0, wake - time.monotonic()))
    finally:
        os.kill(srv.proc.pid, signal.SIGCONT)


@pytest.mark.parametrize("when", ["mid-dump", "across-resume"])
def test_a_source_clock_jump_mid_warm_never_makes_a_copy_late(
    memcached, tmp_path: Path, tally, warm_mode: str, when: str
) -> None:
    t = tally(f"the source's clock jumps 0.8 s ahead ({when}) → no copy ends after its source ({warm_mode})")
    moved: list[float] = []
    early: list[float] = []
    for trial in range(trials()):
        src: MemcachedServer = memcached(memory_mb=64)
        dst: MemcachedServer = memcached(memory_mb=64)
        clocks = ClockWatch(src, dst)
        items = _items(2000)
        load(src, items)
        _stall_to(src, 0.95)  # its clock at the bottom of its range when the dump measures it
        clocks.join()
        before, _ = clock_and_ceiling(src)
        work = tmp_path / f"t{trial}"
        cmd = _warm(src, dst, work, warm_mode, *SLOW)
        if when == "across-resume":
            _interrupted_warm(cmd, work, warm_mode, t, trial)
            _stall_to(src, 0.15)
            r = subprocess.run([*cmd, "--resume"], capture_output=True, text=True, timeout=300)
        else:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            wait_until(lambda w=work, p=proc: _started(w, warm_mode) or p.poll() is not None, timeout=60)
            _stall_to(src, 0.15)
            out, err = proc.communicate(timeout=300)
            r = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
        t.trials += 1
        if r.returncode != 0:
            t.lost += len(items)
            t.note(f"trial {trial}: warm exited {r.returncode}: {r.stderr.strip()[-300:]}")
            continue
        _judge(t, trial, src, dst, [it.key for it in items], clocks, early)
        moved.append(clocks.ahead(src) - before)
    if moved:
        jumped = sum(1 for m in moved if m > 0.5)
        span = f"{min(moved):+.3f} .. {max(moved):+.3f} s"
        print(f"  the source's clock moved {span} ({jumped} of {len(moved)} more than +0.5 s)")
        if jumped < len(moved):
            t.note(f"the source's clock jumped in {jumped} of {len(moved)} trials only: {moved}")
    _print_early(early)
    t.check()


def _binary_request(srv: MemcachedServer, opcode: int, key: bytes, ttl: int) -> int:
    """A binary-protocol TOUCH (0x1c) or GAT (0x1d) with this TTL: the status it answered."""
    with socket.create_connection((srv.host, srv.port), timeout=10) as s:
        extras = struct.pack(">I", ttl)
        s.sendall(
            struct.pack(">BBHBBHIIQ", 0x80, opcode, len(key), 4, 0, 0, 4 + len(key), 0, 0) + extras + key
        )
        head = b""
        while len(head) < 24:
            chunk = s.recv(24 - len(head))
            if not chunk:
                raise ConnectionError("memcached closed the binary connection")
            head += chunk
        body = struct.unpack(">I", head[8:12])[0]
        while body > 0:
            chunk = s.recv(body)
            if not chunk:
                raise ConnectionError("memcached closed the binary connection")
            body -= len(chunk)
        return int(struct.unpack(">H", head[6:8])[0])


def _listing_only_keys(n: int) -> list[bytes]:
    """200-byte keys no meta command names (a space, '\\n' or NUL; base64 too long): the binary
    protocol fetches them and returns no TTL."""
    seps = (b" ", b"\n", b"\x00")
    return [b"lst:%03d:" % i + (seps[i % 3] + b"x") * 96 for i in range(n)]


def test_keys_only_the_listing_gave_a_ttl_touched_mid_warm_never_outlive_their_source(
    memcached, tmp_path: Path, tally, warm_mode: str
) -> None:
    t = tally(
        f"100 listing-only keys touched/gat'd to 30 s mid-warm → none outlives its source, exit 0 "
        f"({warm_mode})"
    )
    for trial in range(trials()):
        src: MemcachedServer = memcached(memory_mb=64)
        dst: MemcachedServer = memcached(memory_mb=64)
        keys = _listing_only_keys(100)
        assert all(len(k) == 200 for k in keys)
        load_binary_protocol(src, [Item(k, b"listed-%d" % i, i, 3600) for i, k in enumerate(keys)])
        time.sleep(1.1)  # a second older (`la`): recency order fetches them after the others
        load(src, [Item(b"k:%d" % i, b"v" * 100, 0, 0) for i in range(3000)])
        work = tmp_path / f"t{trial}"
        proc = subprocess.Popen(
            _warm(src, dst, work, warm_mode, *SLOW), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        # Touched once the listing is complete, before their fetch (they come last).
        wait_until(lambda w=work, p=proc: _listed(w) or p.poll() is not None, timeout=60)
        answers = [_binary_request(src, 0x1C if i % 2 else 0x1D, k, 30) for i, k in enumerate(keys)]
        out, err = proc.communicate(timeout=300)
        t.trials += 1
        if set(answers) != {0}:
            t.note(f"trial {trial}: the touches answered {sorted(set(answers))}")
        if proc.returncode != 0:
            t.lost += len(keys)
            t.note(f"trial {trial}: warm exited {proc.returncode}: {err.strip()[-300:]}")
            continue
        src_end, dst_end = listed_expiries(src), listed_expiries(dst)
        for k in keys:
            if k not in src_end:
                continue
            if k not in dst_end:
                t.lost += 1
                if t.lost < 4:
                    t.note(f"trial {trial}: {k[:12]!r}… not copied")
            elif dst_end[k] == -1 or dst_end[k] > src_end[k] + READ_SLACK:
                t.corrupt += 1
                if t.corrupt < 4:
                    t.note(
                        f"trial {trial}: {k[:12]!r}… ends {dst_end[k] - src_end[k]:+.1f} s after its source"
                    )
        summary = json.loads(out.strip().splitlines()[-1]) if out.strip() else {}
        if not summary.get("ok"):
            t.note(f"trial {trial}: the warm's summary says not ok: {out.strip()[-300:]}")
    t.check()
