"""The status objects an agent publishes (moto S3), and how `execute` maps failures to them."""

from __future__ import annotations

from typing import Any

import boto3
from cachewarm.contract.status import Progress
from cachewarm.node_agent.errors import AgentError, ExitCode
from cachewarm.node_agent.lifecycle import execute
from cachewarm.node_agent.status import StatusPublisher
from moto import mock_aws

from tests.node_agent.support import read_status, where

# A dump's pace (Progress.items_per_s, ...) when the dumper has reported none.
IDLE_PACE = {
    "items_per_s": 0,
    "limit_items_per_s": 0,
    "backing_off": False,
    "probe_p99_us": 0,
    "probe_baseline_us": 0,
    "backed_off_ms": 0,
}


def test_status_object_schema_and_attempts(s3: Any) -> None:
    loc = where()
    # Keyed by the writing instance's ARN: IAM lets an agent write only keys ending in its own.
    assert loc.key == (
        "warms/warm-1/dump/i-0123456789abcdef0/arn:aws:ec2:us-east-1:123456789012:instance/i-0123456789abcdef0.json"
    )
    pub = StatusPublisher(s3, loc, interval_s=3600, now_ms=lambda: 1_700_000_000_000)
    pub.start()
    body = read_status(s3, loc)
    assert body == {
        "warm_id": "warm-1",
        "node_id": "i-0123456789abcdef0",
        "role": "dump",
        "state": "running",
        "heartbeat_ms": 1_700_000_000_000,
        "progress": {
            "items": 0,
            "bytes": 0,
            "files": 0,
            "keys_listed": 0,
            "items_per_s": 0,
            "limit_items_per_s": 0,
            "backing_off": False,
            "probe_p99_us": 0,
            "probe_baseline_us": 0,
            "backed_off_ms": 0,
        },
        "error": None,
        "attempt": 1,
    }
    pub.update(Progress(items=5, bytes=50, files=1, keys_listed=7))
    pub.finish("failed", "the dumper failed")
    body = read_status(s3, loc)
    assert body["state"] == "failed" and body["error"] == "the dumper failed"
    assert body["progress"] == {"items": 5, "bytes": 50, "files": 1, "keys_listed": 7, **IDLE_PACE}
    # A re-run (revive) counts the attempt up.
    again = StatusPublisher(s3, loc, interval_s=3600)
    again.start()
    again.finish("done")
    body = read_status(s3, loc)
    assert body["attempt"] == 2 and body["state"] == "done" and body["error"] is None


def test_heartbeat_thread_keeps_publishing(s3: Any) -> None:
    import threading

    beats = threading.Semaphore(0)
    pub = StatusPublisher(s3, where(), interval_s=0.01)
    real_put = pub._put

    def counting_put(st: Any) -> None:
        real_put(st)
        beats.release()

    pub._put = counting_put  # type: ignore[method-assign]
    pub.start()
    for _ in range(3):  # three heartbeats after the first publish, however slow the machine
        assert beats.acquire(timeout=60)
    pub.finish("done")
    assert read_status(s3, where())["state"] == "done"
    assert pub.published >= 4


def test_unwritable_bucket_is_exit_code_status() -> None:
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")  # no bucket

        def factory() -> StatusPublisher:
            return StatusPublisher(client, where(), interval_s=3600)

        assert execute(factory, lambda st: None) == ExitCode.STATUS


def test_execute_maps_failures_to_status_and_exit_code(s3: Any) -> None:
    def factory() -> StatusPublisher:
        return StatusPublisher(s3, where(), interval_s=3600)

    def fails(st: StatusPublisher) -> None:
        raise AgentError(ExitCode.VOLUME, "cannot mount /dev/x")

    assert execute(factory, fails) == ExitCode.VOLUME
    assert read_status(s3, where())["error"] == "cannot mount /dev/x"

    def crashes(st: StatusPublisher) -> None:
        raise ZeroDivisionError("bug")

    assert execute(factory, crashes) == ExitCode.WORK_FAILED
    body = read_status(s3, where())
    assert body["state"] == "failed" and "ZeroDivisionError" in body["error"] and body["attempt"] == 2

    def interrupted(st: StatusPublisher) -> None:
        raise KeyboardInterrupt

    assert execute(factory, interrupted) == ExitCode.INTERRUPTED
    assert "re-run to resume" in read_status(s3, where())["error"]
    assert execute(factory, lambda st: None) == ExitCode.OK
    assert read_status(s3, where())["state"] == "done"
