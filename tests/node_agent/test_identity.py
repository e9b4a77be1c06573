"""The agent's own instance ARN (IMDSv2), which ends every key it writes."""

from __future__ import annotations

import json
import urllib.request

import pytest
from cachewarm.node_agent.errors import AgentError, ExitCode
from cachewarm.node_agent.identity import ARN_ENV, this_instance_arn


def _imds(doc: dict[str, str]) -> tuple[list[tuple[str, str, dict[str, str]]], object]:
    seen: list[tuple[str, str, dict[str, str]]] = []

    def fetch(req: urllib.request.Request, timeout: float) -> bytes:
        seen.append((req.get_method(), req.full_url, dict(req.header_items())))
        return b"TOKEN" if req.full_url.endswith("/api/token") else json.dumps(doc).encode()

    return seen, fetch


def test_the_arn_comes_from_imdsv2(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ARN_ENV, raising=False)
    seen, fetch = _imds(
        {"region": "eu-west-1", "accountId": "123456789012", "instanceId": "i-0123456789abcdef0"}
    )
    assert this_instance_arn(fetch) == "arn:aws:ec2:eu-west-1:123456789012:instance/i-0123456789abcdef0"  # type: ignore[arg-type]
    (m1, u1, _), (m2, _, h2) = seen
    assert (m1, u1) == ("PUT", "http://169.254.169.254/latest/api/token")
    assert (m2, h2.get("X-aws-ec2-metadata-token")) == ("GET", "TOKEN")
    _, cn = _imds({"region": "cn-north-1", "accountId": "123456789012", "instanceId": "i-0123456789abcdef0"})
    assert this_instance_arn(cn).startswith("arn:aws-cn:ec2:cn-north-1:")  # type: ignore[arg-type]


def test_no_imds_is_a_status_error_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ARN_ENV, raising=False)

    def down(req: urllib.request.Request, timeout: float) -> bytes:
        raise OSError("connection refused")

    with pytest.raises(AgentError, match="IMDSv2") as exc:
        this_instance_arn(down)
    assert exc.value.code == ExitCode.STATUS
    _, bad = _imds({"region": "us-east-1", "accountId": "x", "instanceId": "i-0123456789abcdef0"})
    with pytest.raises(AgentError, match="no valid instance ARN"):
        this_instance_arn(bad)  # type: ignore[arg-type]


def test_the_environment_override_must_be_an_instance_arn(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ARN_ENV, "arn:aws:iam::123456789012:role/admin")
    with pytest.raises(AgentError, match="not an EC2 instance ARN"):
        this_instance_arn()
