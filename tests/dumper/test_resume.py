"""Checkpoint/resume: `kill -9` at random moments, then `--resume` → every item exactly once."""

from __future__ import annotations

import random
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.dumper.dumputil import assert_accounted, dump_cmd, leftovers, load_numbered, read_dump, run_dump

N_ITEMS = 20000
# Slow enough (rate-limited, small chunks and parts) that kills land in every phase:
# crawl, dump, reconciliation, publishing.
SLOW = [
    *("--key-file-size", "16k", "--data-file-size", "16k"),
    *("--batch", "40", "--max-items-per-second", "10000"),
    *("--reconcile", "always", "--crawl", "all"),  # the LRU crawl misses keys: reconciliation has work
]


def _kill_after(cmd: list[str], delay: float, began: Path | None = None) -> int:
    """kill -9 `delay` s after the start — or, given `began` (keys/META), after the dump began: the
    dumper first measures the source's clock (up to ~1.2 s), so a fixed delay could land before it."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if began is not None:
        deadline = time.monotonic() + 30
        while not began.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    return proc.wait()


@pytest.mark.parametrize("trial", range(5))
def test_kill9_then_resume_dumps_every_item_exactly_once(
    dumper_bin: Path, memcached, tmp_path: Path, trial: int
) -> None:
    rng = random.Random(1000 + trial)
    srv = memcached()
    load_numbered(srv, N_ITEMS, value_size=64)
    out = tmp_path / "o"
    # First run killed at a random moment of its dump (counted from keys/META: the clock measurement
    # before it takes up to ~1.2 s); trial 4 is killed twice (the resumed run too).
    _kill_after(dump_cmd(dumper_bin, srv, out, *SLOW), rng.uniform(0.0, 1.5), out / "keys" / "META")
    if trial == 4:
        _kill_after(dump_cmd(dumper_bin, srv, out, "--resume", *SLOW), rng.uniform(0.0, 0.6))
    if not (out / "keys" / "META").exists():
        pytest.skip("killed before the dump had started")  # nothing to resume: a fresh run is the answer
    finished_before = (out / "DONE").exists()  # the kill came after the end: resume is a no-op
    published_before = {p.name: p.stat().st_ino for p in out.iterdir() if p.suffix == ".cwd"}
    r = run_dump(dumper_bin, srv, out, "--resume")
    assert r.returncode == 0, r.stderr
    dump = read_dump(out)
    keys = dump.by_key()  # asserts no key twice
    assert set(keys) == {b"k%d" % i for i in range(N_ITEMS)}
    assert dump.manifest is not None
    assert finished_before or dump.manifest.totals["resumes"] >= 1
    # The explanation of every published file's misses survives the kill (keys/PARTS).
    comp = assert_accounted(dump.manifest)
    assert dump.manifest.raw["complete"] is True and comp["records"] == N_ITEMS
    # Published files are the checkpoint: never rewritten.
    for name, ino in published_before.items():
        assert (out / name).stat().st_ino == ino
    assert leftovers(out) == []


def test_resume_refuses_a_restarted_source(dumper_bin: Path, memcached, tmp_path: Path) -> None:
    srv = memcached()
    load_numbered(srv, N_ITEMS, value_size=64)
    out = tmp_path / "o"
    _kill_after(dump_cmd(dumper_bin, srv, out, *SLOW), 0.3, out / "keys" / "META")
    assert not (out / "DONE").exists()
    srv.restart()
    load_numbered(srv, N_ITEMS, value_size=64)
    r = run_dump(dumper_bin, srv, out, "--resume")
    assert r.returncode == 1
    assert "restarted since the dump began" in r.stderr
    assert not (out / "DONE").exists()


@pytest.mark.parametrize("fmt", [1, 2])
def test_a_resumed_dump_keeps_its_data_format(dumper_bin: Path, memcached, tmp_path: Path, fmt: int) -> None:
    """keys/META records the dump's format (docs/data-format.md section 6): a kill -9 then `--resume`
    without `--format` continues in it, every file and DONE in that version; an explicit other
    `--format` is refused."""
    from cachewarm.datapath import format as df

    srv = memcached()
    load_numbered(srv, N_ITEMS, value_size=64)
    out = tmp_path / "o"
    _kill_after(dump_cmd(dumper_bin, srv, out, "--format", str(fmt), *SLOW), 0.3, out / "keys" / "META")
    if not (out / "keys" / "META").exists():
        pytest.skip("killed before the dump had started")
    other = run_dump(dumper_bin, srv, out, "--resume", "--format", str(3 - fmt))
    assert other.returncode == 2 or other.returncode == 1, other.stderr
    assert f"data format version {fmt}" in other.stderr
    r = run_dump(dumper_bin, srv, out, "--resume")
    assert r.returncode == 0, r.stderr
    dump = read_dump(out)
    assert set(dump.by_key()) == {b"k%d" % i for i in range(N_ITEMS)}
    assert dump.manifest is not None and dump.manifest.version == fmt
    for name in dump.files:
        v = df.check_file(out / name)
        assert v.ok and v.header is not None and v.header.version == fmt, name
