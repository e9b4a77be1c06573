"""The operator's first hour (issue 27): each row of what a new user met is a test here — the CLI in a
subprocess (real exit codes, real pipes, a real process group for Ctrl-C) against real memcacheds."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from cachewarm.datapath.meta import MetaConnection
from cachewarm.datapath.nodes import Node, parse_nodes
from cachewarm.datapath.stream import StreamCommand
from cachewarm.datapath.warm_config import WarmConfig, dumper_command
from cachewarm.exitcodes import ExitCode
from cachewarm.testing.memcached import MemcachedServer, free_port

from tests.cli.support import CLI, load, run

Start = Callable[..., MemcachedServer]


def one_error_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    errors = [ln for ln in stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, stderr
    return errors[0]


def warm(src: MemcachedServer | str, tgt: MemcachedServer | str, workdir: Path, *extra: str) -> list[str]:
    def addr(s: MemcachedServer | str) -> str:
        return s if isinstance(s, str) else f"127.0.0.1:{s.port}"

    return ["warm", "--source", addr(src), "--target", addr(tgt), "--workdir", str(workdir), *extra]


def holds(srv: MemcachedServer, n: int) -> int:
    """How many of load()'s `n` keys the server holds."""
    with MetaConnection(srv.host, srv.port) as c:
        return n - len(c.missing([b"item:%d" % i for i in range(n)]))


# ---- Ctrl-C and resume ---------------------------------------------------------------------------


def test_ctrl_c_prints_the_command_that_continues_and_no_worker_traceback(
    memcached: Start, tmp_path: Path
) -> None:
    """A real Ctrl-C reaches the whole process group (the CLI, its pool workers, the dumper): one
    `error:` line with the exact command to continue, no ForkProcess traceback; that command then
    finishes the warm."""
    src, tgt = memcached(), memcached()
    load(src, 20_000)
    wd = tmp_path / "wd"
    # Slow enough (2,000 items/s for 20,000 items) that the interrupt lands mid-dump.
    args = warm(src, tgt, wd, "--max-items-per-second", "2000", "--workers", "2")
    proc = subprocess.Popen(
        [*CLI, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a terminal's foreground job
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert proc.stderr is not None
    # The populator's start line comes once the dumper and the workers are running.
    for line in proc.stderr:
        if line.startswith("cachewarm: populating"):
            break
    # Mid-dump: once the dumper's first checkpoint exists (the interrupt before it is the "--resume
    # on an empty workdir" case).
    while not (wd / "dump" / "keys" / "META").exists() and proc.poll() is None:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)
    _, rest = proc.communicate(timeout=120)
    assert proc.returncode == ExitCode.INTERRUPTED, rest
    assert "Traceback" not in rest and "ForkProcess" not in rest, rest
    line = one_error_line(rest)
    prefix = "error: interrupted; to continue: "
    assert line.startswith(prefix), line
    again = shlex.split(line[len(prefix) :])
    assert again[0] == "cachewarm" and again[-1] == "--resume" and again[1:-1] == args
    # Without the throttle: the printed command with the rate lifted (0 = unlimited).
    again[again.index("--max-items-per-second") + 1] = "0"
    r = run(again[1:])
    assert r.returncode == 0, r.stderr
    assert "warm OK" in r.stdout
    assert holds(tgt, 20_000) == 20_000


def test_a_background_warm_that_ignores_ctrl_c_keeps_its_workers(memcached: Start, tmp_path: Path) -> None:
    """A job started in the background (`cmd &`) ignores SIGINT, and so must its pool workers: a
    Ctrl-C meant for the foreground must not kill them under a warm that goes on (BrokenProcessPool)."""
    src, tgt = memcached(), memcached()
    load(src, 6000)
    args = warm(src, tgt, tmp_path / "wd", "--max-items-per-second", "2000", "--workers", "2")
    proc = subprocess.Popen(
        [*CLI, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    assert proc.stderr is not None
    for line in proc.stderr:
        if line.startswith("cachewarm: populating"):
            break
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "Traceback" not in err and "warm OK" in out
    assert holds(tgt, 6000) == 6000


def test_resume_on_an_empty_workdir_simply_starts(
    memcached: Start, tmp_path: Path, warm_args: list[str]
) -> None:
    src, tgt = memcached(), memcached()
    load(src, 500)
    r = run(warm(src, tgt, tmp_path / "fresh", "--resume", *warm_args))
    assert r.returncode == 0, r.stderr
    assert holds(tgt, 500) == 500


def test_a_new_warm_over_an_old_dump_is_a_setting_error_with_the_command(
    memcached: Start, tmp_path: Path
) -> None:
    src, tgt = memcached(), memcached()
    load(src, 100)
    args = warm(src, tgt, tmp_path / "wd")
    assert run(args).returncode == 0
    r = run(args)
    assert r.returncode == ExitCode.USAGE, r.stderr
    assert one_error_line(r.stderr) == (
        f"error: {tmp_path / 'wd' / 'dump'} already holds a dump; to continue it: "
        f"{shlex.join(['cachewarm', *args, '--resume'])} (or use an empty --workdir)"
    )


# ---- check before you cost -----------------------------------------------------------------------


def test_a_target_on_a_wrong_port_fails_before_any_dump(
    memcached: Start, tmp_path: Path, warm_args: list[str]
) -> None:
    """Exit 6 naming the target, before the dumper starts: no dump left behind to --resume (the default
    --destination-timeout of 120 s would outlast the subprocess timeout)."""
    src = memcached()
    load(src, 1000)
    port = free_port()
    wd = tmp_path / "wd"
    r = run(warm(src, f"127.0.0.1:{port}", wd, *warm_args), timeout=60)
    assert r.returncode == ExitCode.UNREACHABLE, r.stderr
    assert one_error_line(r.stderr) == (
        f"error: target 127.0.0.1:{port} unreachable: cannot connect: Connection refused"
    )
    assert not wd.exists() or not any(p.is_file() for p in wd.rglob("*"))


def test_stream_passes_the_destination_timeout_to_the_dumper(tmp_path: Path, dumper_bin: Path) -> None:
    cfg = WarmConfig(
        source=Node("127.0.0.1", 1),
        targets=[Node("127.0.0.1", 2)],
        workdir=tmp_path,
        dumper=dumper_bin,
        destination_timeout=2.0,
        stream=True,
    )
    from cachewarm.datapath.stream import stream_command

    argv = stream_command(cfg, tmp_path / "stream").argv()
    assert argv[argv.index("--destination-timeout") + 1] == "2"
    assert isinstance(stream_command(cfg, tmp_path), StreamCommand)
    assert "--destination-timeout" not in dumper_command(cfg, tmp_path).argv()


def test_stream_to_a_dead_port_with_a_destination_timeout_exits_6(memcached: Start, tmp_path: Path) -> None:
    src = memcached()
    load(src, 100)
    port = free_port()
    r = run(
        warm(src, f"127.0.0.1:{port}", tmp_path / "wd", "--stream", "--destination-timeout", "2"), timeout=60
    )
    assert r.returncode == ExitCode.UNREACHABLE, r.stderr
    assert f"127.0.0.1:{port} unreachable" in one_error_line(r.stderr)


@pytest.mark.parametrize("mode", ["add", "set"])
@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_the_source_as_target_is_refused(memcached: Start, tmp_path: Path, host: str, mode: str) -> None:
    src = memcached()
    load(src, 50)
    r = run(warm(src, f"{host}:{src.port}", tmp_path / "wd", "--mode", mode))
    assert r.returncode == ExitCode.USAGE, r.stderr
    line = one_error_line(r.stderr)
    assert line.startswith(
        f"error: target {host}:{src.port} is the source 127.0.0.1:{src.port}: the same memcached"
    )
    assert ("rewrite the live source" in line) == (mode == "set")
    assert not (tmp_path / "wd").exists()
    assert int(src.stats()["cmd_set"]) == 50  # nothing written back


def test_an_empty_source_is_named(memcached: Start, tmp_path: Path, warm_args: list[str]) -> None:
    src, tgt = memcached(), memcached()
    r = run(warm(src, tgt, tmp_path / "wd", *warm_args))
    assert r.returncode == 0, r.stderr
    said = f"the source 127.0.0.1:{src.port} holds no items (stats curr_items 0)"
    assert f"warning: {said}" in r.stderr.splitlines()[0]
    assert f"WARNING: {said}" in r.stdout


def test_a_workdir_it_cannot_write_is_one_line_with_the_path(memcached: Start, tmp_path: Path) -> None:
    """As root no mode bit stops a write: a workdir under a regular file fails the same way."""
    src, tgt = memcached(), memcached()
    load(src, 10)
    (tmp_path / "file").write_text("")
    r = run(warm(src, tgt, tmp_path / "file" / "wd"))
    assert r.returncode == ExitCode.USAGE, r.stderr
    assert (
        one_error_line(r.stderr)
        == f"error: cannot write the --workdir {tmp_path / 'file' / 'wd'}: Not a directory"
    )


# ---- flags -------------------------------------------------------------------------------------


def test_host_without_port_means_11211_and_errors_name_the_flag() -> None:
    assert parse_nodes("127.0.0.1", "--source", 11211) == [Node("127.0.0.1", 11211)]
    assert parse_nodes("a,b:5,[::1]", "--target", 11211) == [
        Node("a", 11211),
        Node("b", 5),
        Node("::1", 11211),
    ]
    with pytest.raises(ValueError, match=re.escape("bad destination '127.0.0.1': expected HOST:PORT")):
        parse_nodes("127.0.0.1")  # the node agent's lists still need ports


@pytest.mark.parametrize(
    "flag,value,said",
    [
        ("--source", "127.0.0.1:99999", "bad --source '127.0.0.1:99999': port 99999 is not in 1..65535"),
        ("--target", "127.0.0.1:0", "bad --target '127.0.0.1:0': port 0 is not in 1..65535"),
        ("--source", "no_such host", "bad --source 'no_such host': 'no_such host' is not a host name"),
    ],
)
def test_a_bad_address_names_its_flag(tmp_path: Path, flag: str, value: str, said: str) -> None:
    args = {"--source": "127.0.0.1:1", "--target": "127.0.0.1:2", flag: value}
    r = run(["warm", *[x for kv in args.items() for x in kv], "--workdir", str(tmp_path)])
    assert r.returncode == ExitCode.USAGE
    assert said in r.stderr and "destination" not in r.stderr, r.stderr


def test_source_without_port_is_11211(tmp_path: Path) -> None:
    """The source's address as the error shows it: the default port filled in (nothing listens on
    11211 on a test machine; if something does, the target's closed port fails instead)."""
    port = free_port()
    r = run(["warm", "--source", "127.0.0.1", "--target", f"127.0.0.1:{port}", "--workdir", str(tmp_path)])
    assert r.returncode == ExitCode.UNREACHABLE
    line = one_error_line(r.stderr)
    assert line.startswith(("error: source 127.0.0.1:11211 unreachable", f"error: target 127.0.0.1:{port}"))


@pytest.mark.parametrize(
    "flag",
    ["--max-items-per-second", "--source-max-items-per-second", "--target-max-items-per-second"],
)
def test_items_per_second_flags_take_whole_numbers_and_0_is_unlimited(
    memcached: Start, tmp_path: Path, flag: str
) -> None:
    src, tgt = memcached(), memcached()
    load(src, 300)
    r = run(warm(src, tgt, tmp_path / "a", flag, "1.5"))
    assert r.returncode == ExitCode.USAGE
    assert "'1.5' is not a rate: whole items per second, 0 = unlimited" in r.stderr
    r = run(warm(src, tgt, tmp_path / "b", flag, "0"))
    assert r.returncode == 0, r.stderr
    assert holds(tgt, 300) == 300


def test_populate_rates_are_the_same_type(tmp_path: Path) -> None:
    r = run(["populate", "--from", str(tmp_path), "--to", "127.0.0.1:1", "--max-items-per-second", "2.5"])
    assert r.returncode == ExitCode.USAGE
    assert "'2.5' is not a rate" in r.stderr


def test_the_dumper_has_a_version(dumper_bin: Path) -> None:
    from cachewarm import __version__

    r = subprocess.run([str(dumper_bin), "--version"], capture_output=True, text=True)
    assert (r.returncode, r.stdout, r.stderr) == (0, f"cachewarm-dump {__version__}\n", "")


# ---- output --------------------------------------------------------------------------------------


def test_verify_prints_plain_keys_and_n_examples_of_m(memcached: Start) -> None:
    """Keys as text (a binary one escaped), never b'...'; "10 examples of 25"; a key whose value and
    flags both differ says both."""
    from tests.datapath.test_verify import put

    src, tgt = memcached(), memcached()
    put(src, [(b"gone:%d" % i, 0, 0, b"v") for i in range(24)] + [(b"bin\x00\xff", 1, 0, b"aa")])
    put(tgt, [(b"bin\x00\xff", 2, 0, b"b")])
    r = run(["verify", "--source", f"127.0.0.1:{src.port}", "--target", f"127.0.0.1:{tgt.port}"])
    assert r.returncode == ExitCode.INCOMPLETE, r.stderr
    lines = r.stdout.splitlines()
    assert "missing 24, different 1 (value 1, flags 1, ttl 0)" in lines[0]
    assert lines[1] == "10 examples of 25:"
    assert "b'" not in r.stdout
    examples = [ln.strip() for ln in lines[2:]]
    assert len(examples) == 10
    assert all(e.startswith("gone:") and e.endswith(": missing") for e in examples if "bin" not in e)
    r = run(
        ["verify", "--source", f"127.0.0.1:{src.port}", "--target", f"127.0.0.1:{tgt.port}", "--sample", "1"]
    )
    assert "b'" not in r.stdout


def test_key_text_escapes_only_what_is_not_printable() -> None:
    from cachewarm.datapath.keytext import key_text

    assert key_text(b"user:42") == "user:42"
    assert key_text(b"a b\x00\xff\\") == "a\\x20b\\x00\\xff\\\\"


def test_populate_on_an_empty_directory_says_it_waits_for_a_dumper(tmp_path: Path, memcached: Start) -> None:
    tgt = memcached()
    (tmp_path / "dump").mkdir()
    r = run(
        [
            "populate",
            "--from",
            str(tmp_path / "dump"),
            "--to",
            f"127.0.0.1:{tgt.port}",
            "--state-file",
            str(tmp_path / "s"),
            "--idle-timeout",
            "0.5",
            "--poll-interval",
            "0.1",
        ]
    )
    assert r.returncode == ExitCode.TIMEOUT, r.stderr
    first = r.stderr.splitlines()[0]
    assert first.startswith(
        f"cachewarm: {tmp_path / 'dump'} holds no data files and no DONE yet: waiting for a dumper"
    )


def test_a_rerun_of_a_finished_populate_says_already_complete(tmp_path: Path, memcached: Start) -> None:
    from tests.cli.support import small_dump

    tgt = memcached()
    dump = small_dump(tmp_path / "dump")
    args = [
        "populate",
        "--from",
        str(dump),
        "--to",
        f"127.0.0.1:{tgt.port}",
        "--state-file",
        str(tmp_path / "s"),
    ]
    first = run(args)
    assert first.returncode == 0 and "items/s" in first.stdout, first.stderr
    again = run(args)
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == (
        "populate OK: already complete — all 2 files (200 items) were applied by an earlier run (the state "
        "file remembers them); nothing written"
    )
    assert "items/s" not in again.stdout
    assert '"already_complete":true' in run([*args, "--json"]).stdout


def test_json_events_carry_a_time_on_both_paths(
    memcached: Start, tmp_path: Path, warm_args: list[str]
) -> None:
    """Every line of `warm --json` is an event with an ISO UTC time; the stream mode emits the
    dumper's progress too (it emitted none); docs/json-events.md names the events."""
    import json

    src, tgt = memcached(), memcached()
    load(src, 2000)
    r = run(warm(src, tgt, tmp_path / "wd", "--json", *warm_args))
    assert r.returncode == 0, r.stderr
    events = [json.loads(ln) for ln in r.stdout.splitlines()]
    assert all(list(e)[:2] == ["event", "time"] and e["time"].endswith("Z") for e in events), events[:3]
    kinds = {e["event"] for e in events}
    assert "dump_done" in kinds and events[-1]["event"] == "warm_summary"
    assert events[-1]["stream"] == ("--stream" in warm_args)
    doc = (Path(__file__).resolve().parents[2] / "docs" / "json-events.md").read_text()
    assert all(f"`{k}`" in doc for k in kinds), kinds


def test_the_stream_summary_names_no_files(memcached: Start, tmp_path: Path, warm_args: list[str]) -> None:
    src, tgt = memcached(), memcached()
    load(src, 300)
    r = run(warm(src, tgt, tmp_path / "wd", *warm_args))
    assert r.returncode == 0, r.stderr
    bytes_line = next(ln for ln in r.stdout.splitlines() if ln.strip().startswith("bytes"))
    if "--stream" in warm_args:
        assert bytes_line.endswith("(streamed: no data files)")
    else:
        assert bytes_line.endswith("data file)") or bytes_line.endswith("data files)")


def test_the_summary_says_the_workdir_stays_and_its_size(memcached: Start, tmp_path: Path) -> None:
    src, tgt = memcached(), memcached()
    load(src, 1000, size=1000)
    r = run(warm(src, tgt, tmp_path / "wd"))
    assert r.returncode == 0, r.stderr
    line = next(ln for ln in r.stdout.splitlines() if "workdir kept" in ln)
    mb = float(line.split()[2].replace(",", ""))
    assert mb >= 1.0 and f"({tmp_path / 'wd'}; remove it when done" in line


# ---- finding things ------------------------------------------------------------------------------


def test_the_docs_index_and_the_readme_name_every_page() -> None:
    repo = Path(__file__).resolve().parents[2]
    pages = sorted(p.name for p in (repo / "docs").glob("*.md") if p.name != "README.md")
    index = (repo / "docs" / "README.md").read_text()
    readme = (repo / "README.md").read_text()
    assert [p for p in pages if f"]({p})" not in index] == []
    assert [p for p in pages if f"](docs/{p})" not in readme] == []
    assert "](docs/README.md)" in readme
    for said in (
        "cachewarm demo",
        "_CACHEWARM_COMPLETE=bash_source",
        "stays after the warm",
        "cachewarm stop",
    ):
        assert said in readme, said


def test_plan_says_what_a_warm_would_do_and_moves_nothing(memcached: Start, tmp_path: Path) -> None:
    src, tgt = memcached(memory_mb=64), memcached(memory_mb=1, max_item_size="512k")
    load(src, 2000, size=1000)
    wd = tmp_path / "wd"
    r = run(warm(src, tgt, wd, "--plan", "--source-max-items-per-second", "100"))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == (
        f"plan: warm 127.0.0.1:{src.port} -> 127.0.0.1:{tgt.port} (add mode, data files); nothing was moved"
    )
    assert lines[1].split()[:3] == ["source", "2,000", "items,"]
    assert "memory limit 1 MB, items up to 512 KiB" in lines[2]
    assert any("the targets' memory (1 MB) is less than the source's data" in ln for ln in lines)
    assert any(ln.startswith("  workdir") and "MB free on" in ln for ln in lines)
    assert any("at least 20s at 100 items/s from the source" in ln for ln in lines)
    assert any("takes items up to 512 KiB (-I), the source" in ln for ln in lines)
    assert not wd.exists() and int(tgt.stats()["curr_items"]) == 0


def test_a_target_with_a_smaller_item_limit_is_named_before_the_warm(
    memcached: Start, tmp_path: Path
) -> None:
    src, tgt = memcached(), memcached(max_item_size="512k")
    load(src, 10)
    r = run(warm(src, tgt, tmp_path / "wd"))
    assert r.returncode == 0, r.stderr
    assert r.stderr.startswith(f"warning: the target 127.0.0.1:{tgt.port} takes items up to 512 KiB (-I)")


def test_the_stream_giving_up_on_a_destination_is_exit_6(
    memcached: Start, tmp_path: Path, dumper_bin: Path
) -> None:
    """Past the look before the warm (a target that dies later): the dumper's own
    --destination-timeout ends the stream, and that is `Unreachable` (exit 6), not a failure (1)."""
    import io

    from cachewarm.datapath.stream import run_stream_warm
    from cachewarm.datapath.warm_errors import Unreachable

    src = memcached()
    load(src, 100)
    port = free_port()
    cfg = WarmConfig(
        source=Node("127.0.0.1", src.port),
        targets=[Node("127.0.0.1", port)],
        workdir=tmp_path / "wd",
        dumper=dumper_bin,
        destination_timeout=1.0,
        stream=True,
    )
    with pytest.raises(Unreachable, match=rf"destination 127.0.0.1:{port} unavailable for \d+ s") as e:
        run_stream_warm(cfg, io.StringIO())
    assert e.value.exit_code == ExitCode.UNREACHABLE and "(--destination-timeout)" in str(e.value)


def test_a_state_file_it_cannot_write_is_one_line_with_the_path(tmp_path: Path, memcached: Start) -> None:
    from tests.cli.support import small_dump

    tgt = memcached()
    dump = small_dump(tmp_path / "dump")
    (tmp_path / "file").write_text("")
    state = tmp_path / "file" / "s.json"
    r = run(["populate", "--from", str(dump), "--to", f"127.0.0.1:{tgt.port}", "--state-file", str(state)])
    assert r.returncode == ExitCode.FAILED
    assert one_error_line(r.stderr).startswith(f"error: Not a directory: {state}")


def test_one_target_named_twice_is_refused(memcached: Start, tmp_path: Path) -> None:
    src, tgt = memcached(), memcached()
    load(src, 10)
    r = run(warm(src, f"127.0.0.1:{tgt.port},localhost:{tgt.port}", tmp_path / "wd"))
    assert r.returncode == ExitCode.USAGE
    assert one_error_line(r.stderr).startswith(
        f"error: targets 127.0.0.1:{tgt.port} and localhost:{tgt.port} are the same memcached"
    )


def test_verify_refuses_the_source_as_target(memcached: Start) -> None:
    """Comparing a server with itself would say OK about nothing."""
    src = memcached()
    load(src, 10)
    r = run(["verify", "--source", f"127.0.0.1:{src.port}", "--target", f"localhost:{src.port}"])
    assert r.returncode == ExitCode.USAGE
    assert f"target localhost:{src.port} is the source 127.0.0.1:{src.port}" in one_error_line(r.stderr)
