"""What `warm` and `populate` show while they run (issue 15 §4): `--json` is JSON lines for machines;
in a pipe the display is plain lines (no carriage returns, no escape sequences); on a terminal (a
pseudo-terminal here) one live display renders without errors; the summary ends with the speed.
Real memcached servers and the real dumper; no timing assertions."""

from __future__ import annotations

import fcntl
import io
import json
import os
import pty
import select
import struct
import subprocess
import termios
from pathlib import Path

from cachewarm.datapath.dumper import DumperProgress
from cachewarm.datapath.populate import Progress
from cachewarm.datapath.progress import LiveDisplay, PlainDisplay, make_display
from cachewarm.testing.memcached import MemcachedServer

from tests.cli.support import CLI, load, run, small_dump

SPEED = r"  speed "


def populate_args(dump: Path, dst: MemcachedServer, tmp_path: Path) -> list[str]:
    return [
        "populate",
        "--from",
        str(dump),
        "--to",
        dst.address,
        "--state-file",
        str(tmp_path / "state.json"),
        "--accept-no-recheck",  # no source here
    ]


def warm_args(src: MemcachedServer, dst: MemcachedServer, tmp_path: Path, dumper: Path) -> list[str]:
    work = str(tmp_path / "w")
    return [
        "warm",
        "--source",
        src.address,
        "--target",
        dst.address,
        "--workdir",
        work,
        "--dumper",
        str(dumper),
    ]


def assert_speed_last(stdout: str) -> None:
    last = stdout.rstrip("\n").splitlines()[-1]
    assert last.startswith(SPEED) and "items/s" in last and "MB/s" in last and "elapsed" in last, last


def assert_plain(stderr: str) -> None:
    assert "\r" not in stderr and "\x1b" not in stderr, repr(stderr[:300])
    assert stderr.endswith("\n")
    for line in stderr.splitlines():
        assert line.startswith("cachewarm: "), line


# --------------------------------------------------------------------------------------------------
# --json


def test_populate_json_is_json_lines(memcached, tmp_path: Path) -> None:
    dst = memcached(memory_mb=16)
    r = run([*populate_args(small_dump(tmp_path / "dump"), dst, tmp_path), "--json"])
    assert r.returncode == 0, r.stderr
    events = [json.loads(ln) for ln in r.stdout.splitlines()]
    assert events[0]["event"] == "start" and events[-1]["event"] == "summary"
    assert events[-1]["records"] == 200 and events[-1]["ok"] is True
    files = [e for e in events if e["event"] == "file"]
    assert files and files[-1]["total_items"] == 200 and files[-1]["files_published"] == 2
    assert r.stderr == ""


def test_warm_json_is_json_lines(memcached, dumper_bin: Path, tmp_path: Path) -> None:
    src, dst = memcached(memory_mb=16), memcached(memory_mb=16)
    load(src, 2000)
    r = run([*warm_args(src, dst, tmp_path, dumper_bin), "--json"])
    assert r.returncode == 0, r.stderr
    events = [json.loads(ln) for ln in r.stdout.splitlines()]
    kinds = {e["event"] for e in events}
    assert {"dump_done", "start", "done", "warm_summary"} <= kinds, kinds
    assert events[-1]["event"] == "warm_summary" and events[-1]["items_dumped"] == 2000
    assert events[-1]["items_per_s"] > 0
    assert r.stderr == ""


# --------------------------------------------------------------------------------------------------
# Not a terminal


def test_populate_in_a_pipe_prints_plain_lines(memcached, tmp_path: Path) -> None:
    dst = memcached(memory_mb=16)
    r = run(populate_args(small_dump(tmp_path / "dump"), dst, tmp_path))
    assert r.returncode == 0, r.stderr
    assert_plain(r.stderr)
    last = r.stderr.splitlines()[-1]
    assert "published 2 files" in last and "populated 200/200 items" in last, last
    assert r.stdout.startswith("populate OK: 200 items from 2 files into 1 destination\n")
    assert_speed_last(r.stdout)


def test_warm_in_a_pipe_prints_plain_lines(memcached, dumper_bin: Path, tmp_path: Path) -> None:
    src, dst = memcached(memory_mb=16), memcached(memory_mb=16)
    load(src, 2000)
    r = run(warm_args(src, dst, tmp_path, dumper_bin))
    assert r.returncode == 0, r.stderr
    assert_plain(r.stderr)
    last = r.stderr.splitlines()[-1]
    assert "dumped 2,000/2,000 items" in last and "populated 2,000/2,000 items" in last, last
    assert r.stdout.startswith("warm OK")
    assert_speed_last(r.stdout)


# --------------------------------------------------------------------------------------------------
# A terminal


def on_a_terminal(args: list[str], columns: int = 0, timeout: float = 120) -> tuple[int, str]:
    """Run the CLI with stdin, stdout and stderr on a pseudo-terminal `columns` wide (0: a terminal
    that does not say); (exit code, what it printed)."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 30, columns, 0, 0))
    proc = subprocess.Popen([*CLI, *args], stdin=follower, stdout=follower, stderr=follower, close_fds=True)
    os.close(follower)
    out = bytearray()
    try:
        while True:
            ready, _, _ = select.select([leader], [], [], timeout)
            if not ready:
                raise AssertionError(f"no output for {timeout}s: {bytes(out[-500:])!r}")
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            out += chunk
    finally:
        os.close(leader)
        proc.wait(timeout)
    return proc.returncode, out.decode(errors="replace")


def test_warm_on_a_terminal_shows_one_live_display(memcached, dumper_bin: Path, tmp_path: Path) -> None:
    src, dst = memcached(memory_mb=16), memcached(memory_mb=16)
    load(src, 2000)
    code, out = on_a_terminal(warm_args(src, dst, tmp_path, dumper_bin), columns=120)
    assert code == 0, out[-2000:]
    assert "Traceback" not in out
    for stage in ("   dumped: ", "published: ", "populated: "):
        assert stage in out, stage
    assert "100%|" in out and "2.00k/2.00k items" in out and "MB/s" in out
    assert "warm OK" in out and SPEED in out


def test_populate_on_a_terminal_shows_one_live_display(memcached, tmp_path: Path) -> None:
    dst = memcached(memory_mb=16)
    code, out = on_a_terminal(populate_args(small_dump(tmp_path / "dump"), dst, tmp_path))
    assert code == 0, out[-2000:]
    assert "Traceback" not in out and "dumped:" not in out
    assert "published: 2 files" in out and "populated: 100%|" in out and "200/200 items" in out
    assert "populate OK" in out and SPEED in out


# --------------------------------------------------------------------------------------------------
# The displays alone


def progress(event: str, items: int, total: int | None = None, detail: str = "") -> Progress:
    return Progress(event, 1, 1, 0, items, items, 0, 0, items * 100, 1.0, float(items), detail, 1, total)


def test_plain_display_lines_and_notices() -> None:
    out = io.StringIO()
    d = PlainDisplay(out, dumper=True, interval_s=0)
    d.dumper(DumperProgress("progress", "crawl", keys_listed=10, items=0))
    d.populator(progress("destination_unavailable", 0, detail="waiting for h:1 (refused), retrying for 9s"))
    d.populator(progress("destination_unavailable", 0, detail="waiting for h:1 (refused), retrying for 8s"))
    d.dumper(DumperProgress("done", "done", keys_listed=10, items=10, bytes=1000, files=1))
    d.populator(progress("file", 10, total=10))
    d.close()
    lines = out.getvalue().splitlines()
    # The same destination is told at once, then not again within NOTICE_REPEAT_S.
    assert sum("waiting for h:1" in ln for ln in lines) == 1
    assert "dumped 0 items (crawl)" in lines[0]
    assert "dumped 10/10 items" in lines[-1] and "populated 10/10 items" in lines[-1]


def test_live_display_draws_every_stage() -> None:
    out = io.StringIO()
    d = LiveDisplay(out, dumper=True)
    d.dumper(DumperProgress("done", "done", keys_listed=10, items=10, bytes=1000, files=1))
    d.populator(progress("warning", 5, total=10, detail="something to know"))
    d.populator(progress("file", 10, total=10))
    d.close()
    text = out.getvalue()
    assert "something to know" in text and "populated: 100%|" in text and "published: 1 file" in text


def test_make_display_picks_by_stream() -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert isinstance(make_display(io.StringIO()), PlainDisplay)
    live = make_display(Tty())
    assert isinstance(live, LiveDisplay)
    live.close()


def test_plain_display_keeps_the_dumps_rate_once_it_ended() -> None:
    """Issue 27: the dump's MB/s kept falling after the dump ended (divided by the warm's time)."""
    d = PlainDisplay(io.StringIO(), dumper=True, interval_s=3600)
    d.dumper(DumperProgress("done", "done", keys_listed=10, items=10, bytes=50_000_000, files=1))
    dumped = [d.line(e).split(" | ")[1] for e in (100.0, 200.0)]
    assert dumped[0] == dumped[1] and dumped[0].startswith("dumped 10/10 items,"), dumped
