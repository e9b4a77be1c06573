"""Errors are one line naming the problem, with the exit code of their kind, and fast (issue 14 §3):
an unreachable memcached is named at once and retried (real servers and closed ports on 127.0.0.1),
missing AWS credentials are a sentence, not a botocore traceback (no AWS: the environment is
emptied), bad input is a usage error."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
from cachewarm.exitcodes import ExitCode
from cachewarm.testing.memcached import free_port

from tests.cli.support import CLI, load, run, small_dump

EXECUTION = "arn:aws:states:us-east-1:123456789012:execution:cachewarm:warm-1"


def one_error_line(stderr: str) -> str:
    """The `error:` line of a failed run; there is exactly one, and no traceback."""
    assert "Traceback" not in stderr, stderr
    errors = [ln for ln in stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, stderr
    return errors[0]


# --------------------------------------------------------------------------------------------------
# Unreachable memcached


def test_populate_names_a_closed_destination_at_once_and_keeps_saying_so(tmp_path: Path) -> None:
    """The first line comes while the populator still waits (not after its timeout), names HOST:PORT
    and why; Ctrl-C then stops it with exit 130 and one line."""
    port = free_port()
    dump = small_dump(tmp_path / "dump")
    proc = subprocess.Popen(
        [
            *CLI,
            "populate",
            "--from",
            str(dump),
            "--to",
            f"127.0.0.1:{port}",
            "--state-file",
            str(tmp_path / "s"),
            "--accept-no-recheck",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # A test run started in the background (`make test &`) ignores SIGINT, and so would the child
        # (Python keeps an inherited SIG_IGN): give it the terminal's default, as a user's Ctrl-C has.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert proc.stderr is not None
    first = proc.stderr.readline()
    still_waiting = proc.poll() is None  # the default --destination-timeout is 120 s
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert still_waiting, "the populator said nothing until it gave up"
    assert first.startswith(f"cachewarm: waiting for 127.0.0.1:{port} (") and "refused" in first, first
    assert "retrying for 120s" in first
    assert proc.returncode == ExitCode.INTERRUPTED
    assert one_error_line(err) == "error: interrupted; run the same command again to resume"


def test_populate_gives_up_on_a_closed_destination_with_exit_6(tmp_path: Path) -> None:
    port = free_port()
    dump = small_dump(tmp_path / "dump")
    args = ["populate", "--from", str(dump), "--to", f"127.0.0.1:{port}", "--state-file", str(tmp_path / "s")]
    r = run([*args, "--destination-timeout", "1"])
    assert r.returncode == ExitCode.UNREACHABLE, r.stderr
    assert r.stderr.startswith(
        f"cachewarm: waiting for 127.0.0.1:{port} (cannot connect: Connection refused)"
    )
    line = one_error_line(r.stderr)
    assert line.startswith(f"error: destination 127.0.0.1:{port} unavailable for 1s (--destination-timeout)")
    assert "refused" in line and r.stdout == ""


def test_populate_json_tells_the_wait_as_events(tmp_path: Path) -> None:
    port = free_port()
    dump = small_dump(tmp_path / "dump")
    args = ["populate", "--from", str(dump), "--to", f"127.0.0.1:{port}", "--state-file", str(tmp_path / "s")]
    r = run([*args, "--destination-timeout", "0.5", "--json"])
    assert r.returncode == ExitCode.UNREACHABLE
    events = [json.loads(ln) for ln in r.stdout.splitlines()]
    assert events and all(e["event"] == "destination_unavailable" for e in events)
    assert f"127.0.0.1:{port}" in events[0]["detail"]


def test_warm_names_an_unreachable_source_before_starting_anything(
    memcached, dumper_bin: Path, tmp_path: Path
) -> None:
    dst = memcached(memory_mb=16)
    port = free_port()
    args = [
        "warm",
        "--source",
        f"127.0.0.1:{port}",
        "--target",
        dst.address,
        "--workdir",
        str(tmp_path / "w"),
    ]
    r = run([*args, "--dumper", str(dumper_bin)])
    assert r.returncode == ExitCode.UNREACHABLE
    assert (
        one_error_line(r.stderr)
        == f"error: source 127.0.0.1:{port} unreachable: cannot connect: Connection refused"
    )
    assert not (tmp_path / "w").exists()  # nothing was started


def test_warm_names_an_unreachable_target(memcached, dumper_bin: Path, tmp_path: Path) -> None:
    src = memcached(memory_mb=16)
    load(src, 300)
    port = free_port()
    args = [
        "warm",
        "--source",
        src.address,
        "--target",
        f"127.0.0.1:{port}",
        "--workdir",
        str(tmp_path / "w"),
    ]
    r = run([*args, "--dumper", str(dumper_bin), "--destination-timeout", "1"])
    assert r.returncode == ExitCode.UNREACHABLE, r.stderr
    # Named before the dumper starts (issue 27): no dump of the source to a target that is not there.
    assert (
        one_error_line(r.stderr)
        == f"error: target 127.0.0.1:{port} unreachable: cannot connect: Connection refused"
    )
    assert not (tmp_path / "w").exists()


def test_verify_names_the_unreachable_side(memcached) -> None:
    up = memcached(memory_mb=16)
    port = free_port()
    for src, dst, side in (
        (f"127.0.0.1:{port}", up.address, "source"),
        (up.address, f"127.0.0.1:{port}", "target"),
    ):
        r = run(["verify", "--source", src, "--target", dst])
        assert r.returncode == ExitCode.UNREACHABLE, r.stderr
        assert one_error_line(r.stderr).startswith(f"error: {side} 127.0.0.1:{port} unreachable:")


# --------------------------------------------------------------------------------------------------
# Bad input


def test_populate_bad_directory_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    for where in (tmp_path / "missing", tmp_path / "file"):
        r = run(["populate", "--from", str(where), "--to", "127.0.0.1:11211"])
        assert r.returncode == ExitCode.USAGE and "--from" in r.stderr and "Traceback" not in r.stderr


def test_an_unusable_workdir_is_the_same_usage_error_with_and_without_plan(
    memcached, dumper_bin: Path, tmp_path: Path
) -> None:
    src, dst = memcached(memory_mb=16), memcached(memory_mb=16)
    load(src, 10)
    (tmp_path / "file").write_text("x")
    workdir = tmp_path / "file" / "w"  # under a regular file: no one can create it (root included)
    args = ["warm", "--source", src.address, "--target", dst.address, "--workdir", str(workdir)]
    for extra in (["--plan"], ["--dumper", str(dumper_bin)]):
        r = run([*args, *extra])
        assert r.returncode == ExitCode.USAGE, (extra, r.stderr)
        assert one_error_line(r.stderr).startswith("error: cannot write the --workdir "), r.stderr


def test_warm_into_several_targets_on_one_host_with_colliding_node_keys_is_a_usage_error(
    tmp_path: Path,
) -> None:
    # EVCache's default node key has no port: three targets on one host collide on the ring.
    targets = ",".join(f"127.0.0.1:{free_port()}" for _ in range(3))
    r = run(["warm", "--source", f"127.0.0.1:{free_port()}", "--target", targets, "--workdir", str(tmp_path)])
    assert r.returncode == ExitCode.USAGE, r.stderr
    assert "Traceback" not in r.stderr and "--node-key-format" in r.stderr and "collide" in r.stderr


def test_an_invalid_done_is_a_data_error(memcached, tmp_path: Path) -> None:
    dst = memcached(memory_mb=16)
    dump = small_dump(tmp_path / "dump")
    done = json.loads((dump / "DONE").read_text())
    (dump / "DONE").write_text(json.dumps({**done, "version": 4}))  # no such version
    r = run(["populate", "--from", str(dump), "--to", dst.address, "--state-file", str(tmp_path / "s")])
    assert r.returncode == ExitCode.DATA, r.stderr
    assert one_error_line(r.stderr).startswith("error: DONE is invalid")


def test_a_corrupt_data_file_is_a_data_error(memcached, tmp_path: Path) -> None:
    dst = memcached(memory_mb=16)
    dump = small_dump(tmp_path / "dump")
    victim = sorted(p for p in dump.iterdir() if p.name != "DONE")[0]
    raw = bytearray(victim.read_bytes())
    raw[len(raw) // 2] ^= 0xFF  # the checksum no longer matches: unverifiable
    victim.write_bytes(bytes(raw))
    args = ["populate", "--from", str(dump), "--to", dst.address, "--state-file", str(tmp_path / "s")]
    r = run([*args, "--bad-file-timeout", "0.2", "--poll-interval", "0.05"])
    assert r.returncode == ExitCode.DATA, r.stderr
    assert victim.name in one_error_line(r.stderr)


def test_nothing_appearing_is_a_timeout(memcached, tmp_path: Path) -> None:
    dst = memcached(memory_mb=16)
    (tmp_path / "empty").mkdir()
    args = [
        "populate",
        "--from",
        str(tmp_path / "empty"),
        "--to",
        dst.address,
        "--state-file",
        str(tmp_path / "s"),
    ]
    r = run([*args, "--idle-timeout", "0.2", "--poll-interval", "0.05"])
    assert r.returncode == ExitCode.TIMEOUT, r.stderr
    assert "no data file and no DONE appeared" in one_error_line(r.stderr)


def test_start_with_an_input_that_is_no_object_is_a_usage_error(tmp_path: Path) -> None:
    p = tmp_path / "in.json"
    for body, why in (("{oops", "not valid JSON"), ("[]", "JSON object"), ('{"x": 1}', "warm_id")):
        p.write_text(body)
        r = run(["start", "--state-machine", "arn:aws:states:us-east-1:1:stateMachine:x", "--input", str(p)])
        assert r.returncode == ExitCode.USAGE and why in r.stderr and "--input" in r.stderr, r.stderr


# --------------------------------------------------------------------------------------------------
# AWS without credentials (the environment emptied: no keys, no profile files, no instance metadata)


def no_aws(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        HOME=str(tmp_path),
        AWS_CONFIG_FILE=str(tmp_path / "none"),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
        AWS_EC2_METADATA_DISABLED="true",
        AWS_DEFAULT_REGION="us-east-1",
    )
    env.update(extra)
    return env


@pytest.mark.parametrize(
    "args",
    [
        ["status", EXECUTION],
        ["watch", EXECUTION, "--interval", "0"],
        ["start", "--state-machine", "arn:x", "--input"],
    ],
    ids=["status", "watch", "start"],
)
def test_no_aws_credentials_is_one_line(tmp_path: Path, args: list[str]) -> None:
    if args[-1] == "--input":
        (tmp_path / "in.json").write_text(
            '{"warm_id": "warm-1", "destination": {"endpoints": ["10.0.0.1:11211"]}, "populator": {}}'
        )
        args = [*args, str(tmp_path / "in.json")]
    r = run(args, env=no_aws(tmp_path))
    assert r.returncode == ExitCode.AWS_CONFIG, r.stderr
    line = one_error_line(r.stderr)
    assert line.startswith("error: Unable to locate credentials: configure AWS credentials"), line
    assert len(r.stderr.splitlines()) == 1


def test_no_aws_region_is_one_line(tmp_path: Path) -> None:
    """A warm id names no region (an ARN does: see below)."""
    env = no_aws(tmp_path)
    del env["AWS_DEFAULT_REGION"]
    r = run(["status", "warm-1"], env=env)
    assert r.returncode == ExitCode.AWS_CONFIG
    assert one_error_line(r.stderr).startswith("error: no AWS region")


@pytest.mark.parametrize(
    "args,extra",
    [(["status", EXECUTION], {}), (["status", "warm-1"], {"AWS_REGION": "us-east-1"})],
    ids=["region-of-the-arn", "AWS_REGION"],
)
def test_the_region_comes_from_the_arn_or_aws_region(
    tmp_path: Path, args: list[str], extra: dict[str, str]
) -> None:
    """Issue 27: `AWS_REGION=us-east-1 cachewarm status ARN` said "no AWS region" (the SDK reads only
    AWS_DEFAULT_REGION). Past the region, this environment has no credentials: that is the line."""
    env = no_aws(tmp_path, **extra)
    del env["AWS_DEFAULT_REGION"]
    r = run(args, env=env)
    assert r.returncode == ExitCode.AWS_CONFIG
    assert one_error_line(r.stderr).startswith("error: Unable to locate credentials"), r.stderr


@pytest.mark.parametrize("command", [["status", EXECUTION], ["list"], ["stop", "warm-1"]])
def test_a_missing_profile_exits_9(tmp_path: Path, command: list[str]) -> None:
    r = run(command, env=no_aws(tmp_path, AWS_PROFILE="no-such-profile"))
    assert r.returncode == ExitCode.AWS_CONFIG, r.stderr
    line = one_error_line(r.stderr)
    assert line.startswith("error: The config profile (no-such-profile) could not be found"), line


def test_an_unreachable_aws_endpoint_is_named(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    env = no_aws(tmp_path, AWS_ACCESS_KEY_ID="AKIDEXAMPLE", AWS_SECRET_ACCESS_KEY="x", AWS_ENDPOINT_URL=url)
    r = run(["status", EXECUTION], env=env)
    assert r.returncode == ExitCode.UNREACHABLE, r.stderr
    assert (
        one_error_line(r.stderr) == f'error: AWS unreachable: Could not connect to the endpoint URL: "{url}/"'
    )
