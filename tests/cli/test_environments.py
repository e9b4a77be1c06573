"""Where users run it, not only where CI does: SIGPIPE at its default action (an ordinary shell),
ignored (many CI runners, `nohup`) or blocked; standard output read by `head` (its reader gone before
the command ends); standard input closed. A process inherits all of these, so each test starts its
program through a wrapper that sets one of them and then execs it. (On a terminal, 0 or 120 columns
wide: tests/cli/test_progress.py.)"""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path

import pytest
from cachewarm.testing.memcached import MemcachedServer

from tests.cli.support import CLI, load

REPO = Path(__file__).resolve().parents[2]
# How SIGPIPE reaches the program: each a prefix that execs the rest.
SIGPIPE = {
    "default": [str(REPO / ".ci" / "default-signals")],
    "ignored": ["env", "--ignore-signal=PIPE"],
    "blocked": ["env", "--block-signal=PIPE"],
}
N = 3000


def curr_items(srv: MemcachedServer) -> int:
    with socket.create_connection((srv.host, srv.port), timeout=5) as s:
        s.sendall(b"stats\r\n")
        buf = b""
        while not buf.endswith(b"END\r\n"):
            chunk = s.recv(65536)
            assert chunk, "memcached closed the stats connection"
            buf += chunk
    for line in buf.decode().splitlines():
        if line.startswith("STAT curr_items "):
            return int(line.split()[2])
    raise AssertionError("no curr_items in stats")


def warm_argv(src: MemcachedServer, dst: MemcachedServer, workdir: Path, *extra: str) -> list[str]:
    return [*CLI, "warm", "--source", src.address, "--target", dst.address, "--workdir", str(workdir), *extra]


@pytest.mark.parametrize("sigpipe", SIGPIPE)
def test_warm_whose_output_reader_leaves_early_still_warms_everything(
    sigpipe: str, memcached, tmp_path: Path
) -> None:
    """`cachewarm warm --json | head -1`: the reader leaves after one line; the warm goes on to the
    end, exits 0 and says once that its output went nowhere (before: a progress thread's
    BrokenPipeError traceback and exit 1)."""
    src, dst = memcached(), memcached()
    load(src, N)
    proc = subprocess.Popen(
        [*SIGPIPE[sigpipe], *warm_argv(src, dst, tmp_path / "w", "--json")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()  # `head -1` exits
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 0, err
    # One whole JSON event (which one depends on timing: a small dump may end before the populator
    # has measured the destinations' clocks and said `start`).
    assert json.loads(first)["event"] in {"start", "clocks", "dump_progress", "dump_done"}
    assert "Traceback" not in err, err
    assert "reader of standard output went away" in err
    assert curr_items(dst) == N


@pytest.mark.parametrize("sigpipe", SIGPIPE)
def test_dumper_whose_progress_reader_leaves_early_publishes_done(
    sigpipe: str, dumper_bin: Path, memcached, tmp_path: Path
) -> None:
    """`cachewarm-dump ... | head -1`: the dumper's progress lines lose their reader; the dump still
    ends with DONE and exit 0 (the dumper ignores SIGPIPE itself; stdout errors are not fatal)."""
    src = memcached()
    load(src, N)
    out = tmp_path / "d"
    argv = [str(dumper_bin), "--port", str(src.port), "--out", str(out), "--progress-interval", "0.05"]
    argv += ["--max-items-per-second", "10000"]  # ~0.3 s: several progress lines after the first
    proc = subprocess.Popen([*SIGPIPE[sigpipe], *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode(errors="replace")
    assert proc.wait(timeout=120) == 0, err
    done = json.loads((out / "DONE").read_text())
    assert done["complete"] is True and done["totals"]["records"] == N


def test_warm_with_standard_input_closed(memcached, tmp_path: Path) -> None:
    """CI starts with no standard input at all (fd 0 closed, not /dev/null): the first socket or file
    the warm opens takes descriptor 0, and nothing may mistake it for a terminal or read from it."""
    src, dst = memcached(), memcached()
    load(src, N)
    argv = ["bash", "-c", 'exec "$@" <&-', "-", *warm_argv(src, dst, tmp_path / "w")]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert curr_items(dst) == N


@pytest.mark.parametrize("sigpipe", ["ignored", "blocked"])
def test_dumper_unit_tests_under_every_sigpipe_disposition(sigpipe: str) -> None:
    """The GoogleTest binary (its fake servers write to sockets whose reader may be gone) passes with
    SIGPIPE ignored or blocked, as it does with the default (`.ci/run` runs `make test-cpp` so, through
    .ci/default-signals): before, a default SIGPIPE killed it (CrawlStream.SpillDir...)."""
    binary = REPO / "build" / "asan" / "dumper_tests"
    if not binary.exists():
        pytest.skip(f"{binary} is not built (make dumper-asan)")
    # HotFirst (22 of the binary's 27 s under ASan) orders keys in memory and a spill directory: no
    # socket, no pipe; `make test-cpp` runs it.
    argv = [str(binary), "--gtest_brief=1", "--gtest_filter=-HotFirst.*"]
    proc = subprocess.run([*SIGPIPE[sigpipe], *argv], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
