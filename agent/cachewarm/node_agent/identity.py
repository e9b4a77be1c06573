"""Which instance this agent runs on, as IAM names it: the ARN that ends every object the agent
writes to the status bucket. The agent policy lets an instance write only keys ending in its own
`${ec2:SourceInstanceARN}`, so one node cannot write another's status (docs/security.md)."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Callable

from cachewarm.contract.status import instance_arn, writer_instance_id
from cachewarm.node_agent.errors import AgentError, ExitCode

IMDS = "http://169.254.169.254"
# Tests (and a host that is no EC2 instance, which the agent policy would refuse anyway) name it here.
ARN_ENV = "CACHEWARM_INSTANCE_ARN"

Fetch = Callable[[urllib.request.Request, float], bytes]


def _fetch(request: urllib.request.Request, timeout: float) -> bytes:
    with urllib.request.urlopen(request, timeout=timeout) as resp:
        return bytes(resp.read())


def this_instance_arn(fetch: Fetch = _fetch, timeout_s: float = 2.0) -> str:
    """The instance's ARN from IMDSv2's identity document (region, account, instance id)."""
    given = os.environ.get(ARN_ENV)
    if given:
        if writer_instance_id(given) is None:
            raise AgentError(ExitCode.STATUS, f"{ARN_ENV}={given!r} is not an EC2 instance ARN")
        return given
    try:
        token = fetch(
            urllib.request.Request(
                f"{IMDS}/latest/api/token",
                method="PUT",
                headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"},
            ),
            timeout_s,
        ).decode()
        doc = json.loads(
            fetch(
                urllib.request.Request(
                    f"{IMDS}/latest/dynamic/instance-identity/document",
                    headers={"X-aws-ec2-metadata-token": token},
                ),
                timeout_s,
            )
        )
        arn = instance_arn(str(doc["region"]), str(doc["accountId"]), str(doc["instanceId"]))
    except (OSError, urllib.error.URLError, ValueError, KeyError, TypeError) as e:
        raise AgentError(
            ExitCode.STATUS,
            f"cannot learn this instance's identity from IMDSv2 ({type(e).__name__}: {e}); the agent writes "
            "its status under its instance ARN and runs only on an EC2 instance",
        ) from e
    if writer_instance_id(arn) is None:
        raise AgentError(ExitCode.STATUS, f"IMDS identity document gave no valid instance ARN: {arn!r}")
    return arn


def this_account() -> str:
    """The account whose credentials this instance holds: every bucket the agent uses is that
    account's (the stack's; source nodes attach the stack's policy to a role of that account), so
    it is the owner each S3 request names — learned from the instance itself, never from a command
    parameter that whoever may send the command could set."""
    return this_instance_arn().split(":")[4]
