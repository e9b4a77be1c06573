"""The stream mode (`cachewarm-dump --to`) under faults: `kill -9` at random moments then `--resume`;
a destination connection cut mid-stream (the dumper reconnects and sends the part again, tagged); the
destination restarted mid-stream, or full with evictions off, or without the binary protocol: a loud
failure, never exit 0. Our own resent writes are never counted as live ones (`already_present`)."""

from __future__ import annotations

import json
import random
import subprocess
import time
from pathlib import Path

import pytest
from cachewarm.testing.memcached import MemcachedServer

from tests.conftest import stream_versions
from tests.dumper.dumputil import Item, dump_cmd, load, load_binary_protocol, load_numbered, run_dump
from tests.faults.harness import (
    CuttingProxy,
    Tally,
    fetch_all,
    kill9,
    survivors,
    tmp_leftovers,
    trials,
    wait_until,
)

# Stream-only scenarios: in `make test` the default release (CI time; the writes are the same meta
# commands on every one), in `make faults` every release (CACHEWARM_STREAM_VERSIONS=all).
pytestmark = pytest.mark.memcached_versions(*stream_versions())

N_ITEMS = 6000
VALUE_SIZE = 64
# Small key lists and batches, rate-limited: a kill lands in every phase and a trial takes ~1 s.
SLOW = [*("--key-file-size", "8k", "--batch", "40", "--max-items-per-second", "8000")]


def summary_of(stdout: str) -> dict[str, object]:
    lines = [ln for ln in stdout.splitlines() if '"stream_summary"' in ln]
    assert lines, f"no stream summary in {stdout[-500:]!r}"
    return dict(json.loads(lines[-1]))


def audit(dst: MemcachedServer, t: Tally, trial: int) -> None:
    """Every loaded item (load_numbered: value x*64, flags i & 0xffff, never expires) is in `dst`."""
    keys = [b"k%d" % i for i in range(N_ITEMS)]
    got = fetch_all(dst, keys)
    for i, k in enumerate(keys):
        it = got.get(k)
        if it is None:
            t.lost += 1
            if t.lost < 4:
                t.note(f"trial {trial}: {k!r} missing in the destination")
        elif it.value != b"x" * VALUE_SIZE or it.flags != i & 0xFFFF or it.ttl != -1:
            t.corrupt += 1
            t.note(f"trial {trial}: {k!r} wrong in the destination ({it.flags}, ttl {it.ttl})")


def check_ours(summary: dict[str, object], t: Tally, trial: int) -> None:
    """Nothing but the stream writes to the destination: every NS is our own earlier write."""
    present = int(summary["already_present"])  # type: ignore[call-overload]
    if present:
        t.corrupt += present
        t.note(f"trial {trial}: {present} of our own resent writes counted as live writes")
    if int(summary["records"]) != N_ITEMS:  # type: ignore[call-overload]
        t.lost += abs(N_ITEMS - int(summary["records"]))  # type: ignore[call-overload]
        t.note(f"trial {trial}: the summary says {summary['records']} records")


def test_stream_kill9_then_resume(dumper_bin: Path, memcached, tmp_path: Path, tally) -> None:
    t = tally("stream: kill -9 → --resume (resent writes are ours)")
    src: MemcachedServer = memcached()
    load_numbered(src, N_ITEMS, value_size=VALUE_SIZE)
    for trial in range(trials()):
        rng = random.Random(7100 + trial)
        dst: MemcachedServer = memcached()
        out = tmp_path / f"t{trial}"
        to = ["--to", dst.address]
        for k in range(2 if trial % 3 == 2 else 1):
            resume = ["--resume"] if k > 0 and (out / "keys" / "META").exists() else []
            proc = subprocess.Popen(
                dump_cmd(dumper_bin, src, out, *resume, *SLOW, *to),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            time.sleep(rng.uniform(0.0, 0.9))
            t.leaked += len(survivors(kill9(proc), grace=2.0))
        resume = ["--resume"] if (out / "keys" / "META").exists() else []
        r = run_dump(dumper_bin, src, out, *resume, *to)
        t.trials += 1
        if r.returncode != 0:
            t.lost += N_ITEMS
            t.note(f"trial {trial}: the resumed stream exited {r.returncode}: {r.stderr.strip()[-300:]}")
            continue
        check_ours(summary_of(r.stdout), t, trial)
        audit(dst, t, trial)
        left = tmp_leftovers(out)
        t.leaked += len(left)
        if left:
            t.note(f"trial {trial}: temp files left: {left[:3]}")
    t.check()


def test_stream_connection_cut_reconnects_and_resends_tagged(
    dumper_bin: Path, memcached, tmp_path: Path, tally
) -> None:
    t = tally("stream: a destination connection cut mid-stream → reconnect, tagged resend")
    src: MemcachedServer = memcached()
    load_numbered(src, N_ITEMS, value_size=VALUE_SIZE)
    for trial in range(trials()):
        rng = random.Random(7200 + trial)
        dst: MemcachedServer = memcached()
        proxy = CuttingProxy(dst, after=rng.randint(5_000, 300_000))
        r = run_dump(dumper_bin, src, tmp_path / f"t{trial}", *SLOW, "--to", proxy.address)
        proxy.close()
        t.trials += 1
        if r.returncode != 0:
            t.lost += N_ITEMS
            t.note(f"trial {trial}: exited {r.returncode}: {r.stderr.strip()[-300:]}")
            continue
        if proxy.cuts != 1 or "reconnecting" not in r.stderr:
            t.note(f"trial {trial}: no cut happened ({proxy.cuts}); stderr {r.stderr[-200:]!r}")
        check_ours(summary_of(r.stdout), t, trial)
        audit(dst, t, trial)
    t.check()


def test_destination_restart_mid_stream_fails_loudly(
    dumper_bin: Path, memcached, tmp_path: Path, tally
) -> None:
    t = tally("stream: the destination restarted mid-stream → loud failure, no DONE")
    src: MemcachedServer = memcached()
    load_numbered(src, N_ITEMS, value_size=VALUE_SIZE)
    for trial in range(trials()):
        rng = random.Random(7300 + trial)
        dst: MemcachedServer = memcached()
        out = tmp_path / f"t{trial}"
        proc = subprocess.Popen(
            dump_cmd(dumper_bin, src, out, *SLOW[:-1], "3000", "--to", dst.address),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

        # Restart once items are on the destination (the stream first measures its clock, up to
        # 1.2 s: a restart before the first write loses nothing, and the new server gets everything).
        def streaming(proc: subprocess.Popen[str] = proc, dst: MemcachedServer = dst) -> bool:
            return proc.poll() is not None or int(dst.stats().get("curr_items", 0)) > 0

        wait_until(streaming, 60)
        time.sleep(rng.uniform(0.0, 0.5))
        running = proc.poll() is None
        dst.kill()
        dst.start()  # same port, empty
        _, err = proc.communicate(timeout=120)
        if not running:
            t.note(f"trial {trial}: the stream had finished before the restart")
            continue
        t.trials += 1
        if proc.returncode == 0 or "restarted" not in err or (out / "DONE").exists():
            t.corrupt += 1
            t.note(f"trial {trial}: not loud: rc {proc.returncode}, {err.strip()[-300:]!r}")
        # --resume must refuse: the items streamed before the restart are gone.
        if (out / "keys" / "STREAM").exists():
            again = run_dump(dumper_bin, src, out, "--resume", "--to", dst.address)
            if again.returncode == 0 or "restarted" not in again.stderr:
                t.corrupt += 1
                t.note(f"trial {trial}: --resume after the restart: rc {again.returncode}")
    t.check()


def test_full_destination_never_exits_0(dumper_bin: Path, memcached, tmp_path: Path, tally) -> None:
    t = tally("stream: a full destination (-M) → refused, or SERVER_ERROR fails loudly")
    src: MemcachedServer = memcached(memory_mb=64)
    load(src, [Item(b"full:%d" % i, b"v" * 2000, i) for i in range(8000)])
    for trial in range(trials()):
        dst: MemcachedServer = memcached(memory_mb=8, extra_args=["-M"])
        refused = run_dump(dumper_bin, src, tmp_path / f"r{trial}", "--to", dst.address)
        t.trials += 1
        if (
            refused.returncode == 0
            or "evictions off" not in refused.stderr
            or dst.stats()["curr_items"] != "0"
        ):
            t.corrupt += 1
            t.note(f"trial {trial}: evictions off not refused: rc {refused.returncode}")
        out = tmp_path / f"t{trial}"
        r = run_dump(dumper_bin, src, out, "--to", dst.address, "--accept-no-evictions")
        if r.returncode == 0 or "SERVER_ERROR" not in r.stderr or (out / "DONE").exists():
            t.corrupt += 1
            t.note(f"trial {trial}: a full destination: rc {r.returncode}, {r.stderr.strip()[-300:]!r}")
    t.check()


def test_long_binary_keys_into_an_ascii_only_destination_fail_loudly(
    dumper_bin: Path, memcached, tmp_path: Path, tally
) -> None:
    t = tally("stream: keys only the binary protocol names, destination -B ascii → loud failure")
    src: MemcachedServer = memcached()
    load(src, [Item(b"plain:%d" % i, b"v") for i in range(100)])
    load_binary_protocol(src, [Item(bytes([1, 0xFF]) * 100, b"long binary key", 7)])
    dst: MemcachedServer = memcached(extra_args=["-B", "ascii"])
    out = tmp_path / "o"
    r = run_dump(dumper_bin, src, out, "--to", dst.address)
    t.trials += 1
    if r.returncode == 0 or "binary protocol" not in r.stderr or (out / "DONE").exists():
        t.corrupt += 1
        t.note(f"rc {r.returncode}: {r.stderr.strip()[-300:]!r}")
    t.check()
