"""`cachewarm agent verify`'s job: compare a sample of one source node's keys with the destination and
write the result where the controller reads it."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

from cachewarm.contract import inputs
from cachewarm.contract.status import VerifyResult, verify_key
from cachewarm.node_agent.errors import AgentError, ExitCode
from cachewarm.node_agent.lifecycle import log


def _data_path_verify() -> tuple[Callable[..., Any], Callable[[str], list[Any]]]:
    """`cachewarm verify`'s comparison and node parser (imported late: the other agent commands
    do not need them)."""
    from cachewarm.datapath.nodes import parse_nodes
    from cachewarm.datapath.verify import verify

    return verify, parse_nodes


def run_verify(
    warm_id: str,
    node_id: str,
    source: str,
    to: str,
    sample: int,
    ttl_tolerance: int,
    now_ms: Callable[[], int],
    placement: str = inputs.DEFAULT_PLACEMENT,
) -> VerifyResult:
    """Compare `sample` of the source's keys with the destination; any failure to compare becomes
    the result's `error` (the controller reports it), never an exception."""
    try:
        verify, parse_nodes = _data_path_verify()
        from cachewarm.datapath.routing import Routing
        from cachewarm.node_agent.jobs import placement_spec

        (src,) = parse_nodes(source)
        targets = parse_nodes(to)
        routing = Routing(placement=placement_spec(placement, targets))
        # One source node of many: its targets hold the other nodes' keys too, so keys only the
        # targets hold cannot be told from theirs here (`cachewarm verify` of a whole warm does).
        rep = verify(src, targets, sample, ttl_tolerance, routing, target_keys=False)
    except (OSError, RuntimeError, ValueError, AgentError) as e:
        return VerifyResult(warm_id, node_id, now_ms(), error=f"{type(e).__name__}: {e}")
    return VerifyResult(
        warm_id=warm_id,
        node_id=node_id,
        finished_ms=now_ms(),
        source_keys=rep.source_keys,
        checked=rep.checked,
        gone_from_source=rep.gone_from_source,
        missing=rep.missing,
        value_mismatch=rep.value_mismatch,
        flags_mismatch=rep.flags_mismatch,
        ttl_mismatch=rep.ttl_mismatch,
        examples=tuple(rep.examples[:10]),
    )


def now_ms() -> int:
    return int(time.time() * 1000)


def write_result(
    compare: Callable[[], VerifyResult], status_bucket: str, status_prefix: str, region: str | None
) -> VerifyResult:
    """Compare, then write the result to `<prefix>/<warm-id>/verify/<node-id>/<this instance's ARN>.json`
    in the status bucket; exit 4 if it cannot be written (the controller then reports a missing result)."""
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    from cachewarm.node_agent.identity import this_instance_arn

    try:
        writer = this_instance_arn()
    except AgentError as e:
        log(str(e))
        sys.exit(int(e.code))
    result = compare()
    key = verify_key(status_prefix, result.warm_id, result.node_id, writer)
    try:
        boto3.client("s3", region_name=region).put_object(
            Bucket=status_bucket,
            Key=key,
            Body=result.to_json().encode(),
            ContentType="application/json",
            ExpectedBucketOwner=writer.split(":")[4],  # this instance's account owns the status bucket
        )
    except (BotoCoreError, ClientError) as e:
        log(f"cannot write s3://{status_bucket}/{key}: {e}")
        sys.exit(int(ExitCode.STATUS))
    log(
        f"verify {result.node_id}: {result.checked} keys compared, {result.differences} differ"
        + (f", error: {result.error}" if result.error else "")
    )
    return result
