"""`cachewarm agent verify` (what the verify-agent document runs on a populator) against two real
memcacheds on 127.0.0.1: its result object, written to S3, is what the controller's Verify reads and
judges (`cachewarm.contract.status.VerifyResult`)."""

from __future__ import annotations

import shutil
import socket
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from cachewarm.node_agent.cli import agent_group
from cachewarm.testing.memcached import MemcachedServer, free_port
from click.testing import CliRunner
from moto import mock_aws

BUCKET = "cachewarm-status-verify"


@pytest.fixture
def memcacheds() -> Iterator[tuple[str, str]]:
    if shutil.which("memcached") is None:
        pytest.skip("memcached is not installed here")
    servers = [MemcachedServer(memory_mb=64) for _ in range(2)]
    try:
        for srv in servers:
            srv.start()
        yield servers[0].address, servers[1].address
    finally:
        for srv in servers:
            srv.stop()


def store(addr: str, items: dict[str, bytes]) -> None:
    host, port = addr.split(":")
    with socket.create_connection((host, int(port))) as s:
        for key, value in items.items():
            s.sendall(f"set {key} 7 0 {len(value)}\r\n".encode() + value + b"\r\n")
            assert s.recv(100).startswith(b"STORED")


def run_verify(source: str, target: str, sample: int = 1000) -> tuple[int, Any]:
    from cachewarm_controller.store import S3Store

    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket=BUCKET)
        args = [
            "verify",
            "--warm-id",
            "warm-verify",
            "--node-id",
            "i-0123456789abcdef0",
            "--source",
            source,
            "--to",
            target,
            "--sample",
            str(sample),
            "--status-bucket",
            BUCKET,
            "--status-prefix",
            "warms",
            "--region",
            "us-east-1",
        ]
        # The verify agent runs on the node's populator and writes under that instance's ARN.
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("CACHEWARM_INSTANCE_ARN", arn(POPULATOR))
            result = CliRunner().invoke(agent_group, args)
        found = S3Store(s3, BUCKET).read_verify(
            "warms", "warm-verify", {"i-0123456789abcdef0": arn(POPULATOR)}
        )
        # Another instance's result for the node is never read.
        assert not S3Store(s3, BUCKET).read_verify(
            "warms", "warm-verify", {"i-0123456789abcdef0": arn(OTHER)}
        )
    return result.exit_code, found.get("i-0123456789abcdef0")


POPULATOR, OTHER = "i-0feedfeedfeedfeed", "i-0badbadbadbadbadb"


def arn(instance_id: str) -> str:
    """An instance's ARN: what its status objects are keyed by (the controller reads them by it)."""
    return f"arn:aws:ec2:us-east-1:123456789012:instance/{instance_id}"


def test_the_agent_compares_source_and_destination_and_the_controller_judges_it(
    memcacheds: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from cachewarm_controller.steps.verification import judge

    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(var, "testing")
    source, target = memcacheds
    items = {f"key-{i}": f"value-{i}".encode() * 3 for i in range(60)}
    store(source, items)
    store(target, {k: v for k, v in items.items() if k not in {"key-1", "key-2", "key-3"}})
    code, result = run_verify(source, target)
    assert code == 0 and result is not None, result
    assert (result.source_keys, result.checked, result.missing) == (60, 60, 3)
    assert result.error is None and result.warm_id == "warm-verify"
    assert judge(result, 0.001) is not None and "3 of 60 sampled keys differ" in str(judge(result, 0.001))
    assert judge(result, 0.1) is None
    store(target, {k: items[k] for k in ("key-1", "key-2", "key-3")})
    code, result = run_verify(source, target, sample=20)
    assert code == 0 and result.checked == 20 and result.differences == 0


def test_an_unreachable_source_is_reported_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(var, "testing")
    code, result = run_verify(f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}")
    assert code == 0 and result is not None and result.error
    from cachewarm_controller.steps.verification import judge

    assert "could not compare" in str(judge(result, 0.5))
